/*
 * convert.c — af_model_convert (afinar_app.h): a Hugging Face checkpoint directory written as a GGUF
 * with llama.cpp's names and metadata. The source is the model af_model_load made of the directory
 * (the one walk's view: llama q/k rows already in GGUF order, Gemma 3 norms already 1 + w, gemma4's
 * RoPE factors built from config.json), so what is written is what afinar runs.
 * Metadata keys: llama.cpp gguf-py/gguf/constants.py Keys and convert_hf_to_gguf.py (TextModel,
 * Gemma3Model, Gemma4Model, Qwen2Model, Qwen3Model); docs/FORMATS.md §12.6.
 */
#include "afinar.h"
#include "afinar_app.h"

#include "formats/gguf_write.h"
#include "kernels/quant.h"
#include "app/export.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* llama.cpp LLAMA_FTYPE of a file mostly of `type` (general.file_type). */
static uint32_t file_type_of(uint32_t type) {
    switch (type) {
    case AF_TYPE_F32: return 0;
    case AF_TYPE_F16: return 1;
    case AF_TYPE_Q4_0: return 2;
    case AF_TYPE_Q4_1: return 3;
    case AF_TYPE_Q8_0: return 7;
    case AF_TYPE_Q5_0: return 8;
    case AF_TYPE_Q5_1: return 9;
    case AF_TYPE_Q4_K: return 14; /* Q4_K_S: every matrix Q4_K */
    case AF_TYPE_Q6_K: return 18;
    case AF_TYPE_BF16: return 32;
    default: return 0;
    }
}

typedef struct conv {
    af_gguf_writer *w;
    const af_model *m;
    uint32_t target;      /* AF_TYPE_KEEP or a type */
    af_convert_stats st;
    void **bufs;          /* converted tensors, freed after the write */
    int32_t n_bufs, cap_bufs;
    const char *label;
    FILE *log;            /* progress (NULL: quiet) */
} conv;

static af_status keep_buf(conv *c, void *p) {
    if (c->n_bufs == c->cap_bufs) {
        int32_t nc = c->cap_bufs ? 2 * c->cap_bufs : 64;
        void **nb = af_realloc_array(c->bufs, (size_t)nc, sizeof *nb);
        if (!nb) {
            free(p);
            return af_fail(AF_ERR_NOMEM, "%s: out of memory", c->label);
        }
        c->bufs = nb;
        c->cap_bufs = nc;
    }
    c->bufs[c->n_bufs++] = p;
    return AF_OK;
}

/* A matrix [rows, cols]: its stored bytes ("keep", or already of the type) or converted row by row. */
static af_status put_matrix(conv *c, const char *name, const af_weight *W) {
    uint32_t ty = c->target == AF_TYPE_KEEP ? W->type : c->target;
    const int64_t bs = (int64_t)af_type_block_size(ty);
    if (W->cols % bs != 0) { /* rows not a multiple of the block: the nearest type that fits */
        ty = W->cols % 32 == 0 && ty != AF_TYPE_F16 && ty != AF_TYPE_BF16 ? AF_TYPE_Q8_0 : AF_TYPE_F16;
        c->st.fallback++;
    }
    const int64_t ne[2] = {W->cols, W->rows};
    const size_t rb_out = af_row_bytes(ty, W->cols);
    c->st.tensors++;
    if (ty == W->type) return af_gguf_writer_add_tensor_ref(c->w, name, ty, 2, ne, W->data, rb_out * (size_t)W->rows);
    uint8_t *q = af_malloc(rb_out * (size_t)W->rows);
    float *row = af_malloc(sizeof(float) * (size_t)W->cols);
    if (!q || !row) {
        free(q);
        free(row);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory converting %s", c->label, name);
    }
    for (int64_t r = 0; r < W->rows; r++) {
        af_weight_row(W, r, row);
        af_quantize_row(ty, row, q + (size_t)r * rb_out, W->cols);
    }
    free(row);
    c->st.converted++;
    AF_TRY(keep_buf(c, q));
    return af_gguf_writer_add_tensor_ref(c->w, name, ty, 2, ne, q, rb_out * (size_t)W->rows);
}

/* A 1-D F32 vector [n] (copied: the model's own arrays stay valid, but a scaled copy may be made). */
static af_status put_vector(conv *c, const char *name, const float *v, int64_t n, float scale) {
    const int64_t ne[1] = {n};
    c->st.tensors++;
    if (scale == 1.0f) return af_gguf_writer_add_tensor_ref(c->w, name, AF_TYPE_F32, 1, ne, v, sizeof(float) * (size_t)n);
    float *s = af_malloc(sizeof(float) * (size_t)n);
    if (!s) return af_fail(AF_ERR_NOMEM, "%s: out of memory", c->label);
    for (int64_t i = 0; i < n; i++) s[i] = v[i] * scale;
    AF_TRY(keep_buf(c, s));
    return af_gguf_writer_add_tensor_ref(c->w, name, AF_TYPE_F32, 1, ne, s, sizeof(float) * (size_t)n);
}

/* {arch}.{suffix}: one u32, or an i32 array [L] when the layers differ (llama.cpp get_key_or_arr). */
static af_status put_layers(conv *c, const char *arch, const char *suffix, const int32_t *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    const int32_t L = c->m->cfg.num_hidden_layers;
    int same = 1;
    for (int32_t i = 1; i < L; i++) same &= v[i] == v[0];
    if (same) return af_gguf_writer_add_u32(c->w, k, (uint32_t)v[0]);
    return af_gguf_writer_add_arr(c->w, k, AF_GGUF_INT32, v, (uint64_t)L);
}

static af_status put_u32(conv *c, const char *arch, const char *suffix, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return af_gguf_writer_add_u32(c->w, k, v);
}

static af_status put_f32(conv *c, const char *arch, const char *suffix, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return af_gguf_writer_add_f32(c->w, k, v);
}

/* The hyper-parameters as llama.cpp's converter writes them for the architecture. */
static af_status put_hparams(conv *c, const char *dir) {
    const af_model *m = c->m;
    const af_model_config *cf = &m->cfg;
    const af_arch_desc *D = &m->desc;
    const char *a = D->name;
    const int32_t L = cf->num_hidden_layers;
    af_gguf_writer *w = c->w;
    const char *base = strrchr(dir, '/');
    while (base && base[1] == 0 && base > dir) { /* trailing slashes */
        const char *p = base - 1;
        while (p > dir && *p != '/') p--;
        base = *p == '/' ? p : NULL;
    }
    char name[256];
    snprintf(name, sizeof name, "%s", base ? base + 1 : dir);
    char *sl = strchr(name, '/');
    if (sl) *sl = 0;
    AF_TRY(af_gguf_writer_add_str(w, "general.architecture", a));
    AF_TRY(af_gguf_writer_add_str(w, "general.name", name));
    uint32_t ft = c->target;
    if (ft == AF_TYPE_KEEP) ft = m->layers[0].wq.type;
    AF_TRY(af_gguf_writer_add_u32(w, "general.file_type", file_type_of(ft)));
    AF_TRY(put_u32(c, a, "context_length", (uint32_t)cf->max_position_embeddings));
    AF_TRY(put_u32(c, a, "embedding_length", (uint32_t)cf->hidden_size));
    AF_TRY(put_u32(c, a, "block_count", (uint32_t)L));
    AF_TRY(put_u32(c, a, "vocab_size", (uint32_t)cf->vocab_size));
    int32_t *v = af_malloc(3 * (size_t)L * sizeof *v);
    uint8_t *slide = af_malloc((size_t)L);
    if (!v || !slide) {
        free(v);
        free(slide);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", c->label);
    }
    int32_t hd_full = cf->head_dim, hd_swa = 0, any_slide = 0;
    for (int32_t l = 0; l < L; l++) {
        const af_layer *Ly = &m->layers[l];
        v[l] = Ly->n_ff;
        v[L + l] = Ly->n_head;
        v[2 * L + l] = Ly->n_kv_head;
        slide[l] = Ly->window > 0;
        any_slide |= slide[l];
        if (slide[l]) hd_swa = Ly->head_dim;
        else hd_full = Ly->head_dim;
    }
    if (!hd_swa) hd_swa = hd_full;
    af_status st = put_layers(c, a, "feed_forward_length", v);
    if (st == AF_OK) st = put_layers(c, a, "attention.head_count", v + L);
    if (st == AF_OK) st = put_layers(c, a, "attention.head_count_kv", v + 2 * L);
    free(v);
    if (st == AF_OK) st = put_f32(c, a, "attention.layer_norm_rms_epsilon", cf->rms_norm_eps);
    if (st == AF_OK) st = put_f32(c, a, "rope.freq_base", cf->rope_theta);
    const int32_t hd = D->swa_period < 0 ? hd_full : cf->head_dim; /* gemma4: key_length = the global layers' */
    if (st == AF_OK) st = put_u32(c, a, "attention.key_length", (uint32_t)hd);
    if (st == AF_OK) st = put_u32(c, a, "attention.value_length", (uint32_t)hd);
    if (st == AF_OK) st = put_u32(c, a, "rope.dimension_count", (uint32_t)hd);
    if (st == AF_OK && D->final_logit_softcap > 0) st = put_f32(c, a, "final_logit_softcapping", D->final_logit_softcap);
    if (st == AF_OK && D->swa_period != 0 && any_slide) {
        char k[128];
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", a);
        st = put_u32(c, a, "attention.sliding_window", (uint32_t)D->sliding_window);
        if (st == AF_OK) st = put_f32(c, a, "rope.freq_base_swa", D->rope_base_swa);
        if (st == AF_OK) st = af_gguf_writer_add_arr(w, k, AF_GGUF_BOOL, slide, (uint64_t)L);
    }
    if (st == AF_OK && D->swa_period < 0) { /* gemma4 */
        st = put_u32(c, a, "attention.key_length_swa", (uint32_t)hd_swa);
        if (st == AF_OK) st = put_u32(c, a, "attention.value_length_swa", (uint32_t)hd_swa);
        if (st == AF_OK) st = put_u32(c, a, "rope.dimension_count_swa", (uint32_t)hd_swa);
        if (st == AF_OK && !any_slide) st = put_f32(c, a, "rope.freq_base_swa", D->rope_base_swa);
        if (st == AF_OK && !any_slide) {
            char k[128];
            snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", a);
            st = af_gguf_writer_add_arr(w, k, AF_GGUF_BOOL, slide, (uint64_t)L);
        }
        if (st == AF_OK) st = put_u32(c, a, "attention.shared_kv_layers", (uint32_t)D->n_kv_shared);
        if (st == AF_OK) st = put_u32(c, a, "embedding_length_per_layer_input", (uint32_t)D->ple_dim);
    }
    free(slide);
    return st;
}

static af_status put_tensors(conv *c) {
    const af_model *m = c->m;
    const af_arch_desc *D = &m->desc;
    const int64_t H = m->cfg.hidden_size;
    AF_TRY(put_matrix(c, "token_embd.weight", &m->tok_embd));
    if (!D->tied_head) AF_TRY(put_matrix(c, "output.weight", &m->output));
    AF_TRY(put_vector(c, "output_norm.weight", m->output_norm, H, 1.0f));
    for (int32_t l = 0; l < m->cfg.num_hidden_layers; l++) /* gemma4: one RoPE factor table for the global layers */
        if (m->layers[l].rope_freq_factors) {
            AF_TRY(put_vector(c, "rope_freqs.weight", m->layers[l].rope_freq_factors, m->layers[l].head_dim / 2, 1.0f));
            break;
        }
    if (D->ple_dim > 0) {
        AF_TRY(put_matrix(c, "per_layer_token_embd.weight", &m->ple_tok_embd));
        AF_TRY(put_matrix(c, "per_layer_model_proj.weight", &m->ple_model_proj));
        AF_TRY(put_vector(c, "per_layer_proj_norm.weight", m->ple_proj_norm, D->ple_dim, 1.0f));
    }
    /* llama.cpp's attention scale is 1/sqrt(head_dim) (gemma3: gemma3.cpp); another one is folded into
     * the q norm, which only scales q (attention-scale c·q·k = (c·q)·k) */
    float qscale = 1.0f;
    if (D->qk_norm && D->attn_scale != 1.0f && fabsf(D->attn_scale * sqrtf((float)m->cfg.head_dim) - 1.0f) > 1e-6f) {
        qscale = D->attn_scale * sqrtf((float)m->cfg.head_dim);
        c->st.folded_q_scale = 1;
    }
    const int64_t every = m->cfg.num_hidden_layers >= 10 ? m->cfg.num_hidden_layers / 10 : 1;
    for (int32_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        const af_layer *Ly = &m->layers[l];
        const int64_t hd = Ly->head_dim, qd = (int64_t)Ly->n_head * hd, kvd = (int64_t)Ly->n_kv_head * hd;
        char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        AF_TRY(put_vector(c, NM("attn_norm.weight"), Ly->attn_norm, H, 1.0f));
        AF_TRY(put_matrix(c, NM("attn_q.weight"), &Ly->wq));
        if (Ly->wk.data) AF_TRY(put_matrix(c, NM("attn_k.weight"), &Ly->wk));
        if (Ly->wv.data) AF_TRY(put_matrix(c, NM("attn_v.weight"), &Ly->wv));
        AF_TRY(put_matrix(c, NM("attn_output.weight"), &Ly->wo));
        if (Ly->bq) AF_TRY(put_vector(c, NM("attn_q.bias"), Ly->bq, qd, 1.0f));
        if (Ly->bk) AF_TRY(put_vector(c, NM("attn_k.bias"), Ly->bk, kvd, 1.0f));
        if (Ly->bv) AF_TRY(put_vector(c, NM("attn_v.bias"), Ly->bv, kvd, 1.0f));
        if (Ly->q_norm) AF_TRY(put_vector(c, NM("attn_q_norm.weight"), Ly->q_norm, hd, qscale));
        if (Ly->k_norm) AF_TRY(put_vector(c, NM("attn_k_norm.weight"), Ly->k_norm, hd, 1.0f));
        if (Ly->post_attn_norm) AF_TRY(put_vector(c, NM("post_attention_norm.weight"), Ly->post_attn_norm, H, 1.0f));
        AF_TRY(put_vector(c, NM("ffn_norm.weight"), Ly->ffn_norm, H, 1.0f));
        AF_TRY(put_matrix(c, NM("ffn_gate.weight"), &Ly->w_gate));
        AF_TRY(put_matrix(c, NM("ffn_up.weight"), &Ly->w_up));
        AF_TRY(put_matrix(c, NM("ffn_down.weight"), &Ly->w_down));
        if (Ly->post_ffw_norm) AF_TRY(put_vector(c, NM("post_ffw_norm.weight"), Ly->post_ffw_norm, H, 1.0f));
        if (D->swa_period < 0) AF_TRY(put_vector(c, NM("layer_output_scale.weight"), &Ly->out_scale, 1, 1.0f));
        if (D->ple_dim > 0) {
            AF_TRY(put_matrix(c, NM("inp_gate.weight"), &Ly->ple_gate));
            AF_TRY(put_matrix(c, NM("proj.weight"), &Ly->ple_proj));
            AF_TRY(put_vector(c, NM("post_norm.weight"), Ly->ple_post_norm, H, 1.0f));
        }
#undef NM
        if (c->log && ((l + 1) % every == 0 || l + 1 == m->cfg.num_hidden_layers))
            fprintf(c->log, "convert: layer %d/%d\n", l + 1, m->cfg.num_hidden_layers);
    }
    return AF_OK;
}

af_status af_model_convert(const char *dir, const char *out_path, const af_convert_opts *opts,
                           af_convert_stats *stats) {
    const af_convert_opts zero = {0};
    const af_convert_opts *o = opts ? opts : &zero;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!dir || !out_path || !*out_path) return af_fail(AF_ERR_INVALID_ARG, "af_model_convert: NULL argument");
    uint32_t target = AF_TYPE_KEEP;
    AF_TRY(af_quant_type_parse(o->type, &target));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return af_fail(AF_ERR_INVALID_ARG, "%s: not a directory (convert reads a Hugging Face checkpoint directory: "
                       "config.json, *.safetensors, tokenizer.json)", dir);
    AF_TRY(af_export_check_out(out_path, o->overwrite));
    af_model *m = NULL;
    AF_TRY(af_model_load(NULL, dir, &m));
    conv c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.target = target;
    c.label = dir;
    c.log = o->log;
    af_status st = af_gguf_writer_new(&c.w);
    if (st == AF_OK) st = put_hparams(&c, dir);
    if (st == AF_OK && m->tok) st = af_tokenizer_gguf_write(m->tok, c.w, m->desc.name, m->pad_token_id);
    if (st == AF_OK && !m->tok) { /* llama.cpp's vocabulary-less form: "none" + {arch}.vocab_size */
        st = af_gguf_writer_add_str(c.w, "tokenizer.ggml.model", "none");
        if (o->log) fprintf(o->log, "convert: note: no tokenizer written (%s)\n", af_model_tokenizer_error(m));
    }
    if (st == AF_OK) st = put_tensors(&c);
    if (st == AF_OK) {
        if (o->log) fprintf(o->log, "convert: writing %s (%llu bytes)\n", out_path,
                            (unsigned long long)af_gguf_writer_size(c.w));
        c.st.bytes = af_gguf_writer_size(c.w);
        st = af_gguf_writer_write_file(c.w, out_path);
    }
    if (st == AF_OK && c.st.folded_q_scale && o->log)
        fprintf(o->log, "convert: note: the attention scale %g (query_pre_attn_scalar) differs from 1/sqrt(head_dim "
                        "%d), which llama.cpp uses: folded into attn_q_norm\n",
                (double)m->desc.attn_scale, m->cfg.head_dim);
    if (st == AF_OK && stats) *stats = c.st;
    for (int32_t i = 0; i < c.n_bufs; i++) free(c.bufs[i]);
    free(c.bufs);
    af_gguf_writer_free(c.w);
    af_model_free(m);
    return st;
}
