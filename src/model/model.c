/* model.c — load a transformer from GGUF or a Hugging Face directory: hyper-parameters,
 * architecture table, weight views. */
#include "model/model.h"
#include "model/model_load.h"

#include "kernels/ctx.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void af_weight_row(const af_weight *w, int64_t r, float *dst) {
    const char *p = (const char *)w->data + (size_t)r * af_row_bytes(w->type, w->cols);
    af_dequantize_row(w->type, p, dst, w->cols);
}

/* Where the weights come from: a GGUF file or a Hugging Face directory. The loader below asks for
 * tensors by their GGUF (llama.cpp) names; for an HF directory hf_name() maps them to the
 * transformers names, so one walk over the layers serves both containers. */
typedef struct wsrc {
    af_model *m;
    const char *label;  /* file or directory, for messages */
    int norm_plus_one;  /* HF Gemma: RMSNorm weights stored as w and used as (1 + w), docs/FORMATS.md §4.2 */
    int permute_qk;     /* HF checkpoint on a NORM-RoPE architecture: q/k rows to the GGUF order (§3.3) */
    int32_t expect_vocab; /* HF: config.json vocab_size (0: take it from token_embd) */
} wsrc;

/* A tensor of either container: data, ggml type, GGUF dims (ne[0] contiguous). */
typedef struct wview {
    const void *data;
    uint32_t type;
    int64_t ne[4];
    char name[160]; /* the name in the container (for messages) */
} wview;

/* GGUF name -> transformers name (llama/gemma3/qwen2/qwen3/gemma4 modeling files; llama.cpp
 * gguf-py/gguf/tensor_mapping.py lists the same pairs). Sandwich-norm architectures (gemma3)
 * call the pre-FFN norm pre_feedforward_layernorm and use post_attention_layernorm for the
 * post-attention norm; the others call the pre-FFN norm post_attention_layernorm. */
static int hf_name(const af_model *m, const char *gg, char *out, size_t cap) {
    static const struct { const char *gg, *hf; } glob[] = {
        {"token_embd", "model.embed_tokens"}, {"output", "lm_head"}, {"output_norm", "model.norm"},
        {"per_layer_token_embd", "model.embed_tokens_per_layer"},
        {"per_layer_model_proj", "model.per_layer_model_projection"},
        {"per_layer_proj_norm", "model.per_layer_projection_norm"}};
    static const struct { const char *gg, *hf; } blk[] = {
        {"attn_norm", "input_layernorm"},          {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},            {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"},       {"attn_q_norm", "self_attn.q_norm"},
        {"attn_k_norm", "self_attn.k_norm"},       {"post_attention_norm", "post_attention_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"}, {"ffn_gate", "mlp.gate_proj"},
        {"ffn_up", "mlp.up_proj"},                 {"ffn_down", "mlp.down_proj"},
        {"inp_gate", "per_layer_input_gate"},      {"proj", "per_layer_projection"},
        {"post_norm", "post_per_layer_input_norm"}};
    const char *dot = strrchr(gg, '.'); /* ".weight" / ".bias" */
    if (!dot) return 0;
    int il = -1, nc = 0;
    if (sscanf(gg, "blk.%d.%n", &il, &nc) == 1 && nc > 0) {
        size_t bl = (size_t)(dot - (gg + nc));
        const char *base = gg + nc, *hf = NULL;
        if (bl == 8 && !memcmp(base, "ffn_norm", 8))
            hf = m->desc.sandwich_norm ? "pre_feedforward_layernorm" : "post_attention_layernorm";
        if (bl == 18 && !memcmp(base, "layer_output_scale", 18)) { /* a buffer without ".weight" */
            snprintf(out, cap, "model.layers.%d.layer_scalar", il);
            return 1;
        }
        for (size_t i = 0; !hf && i < sizeof blk / sizeof *blk; i++)
            if (strlen(blk[i].gg) == bl && !memcmp(base, blk[i].gg, bl)) hf = blk[i].hf;
        if (!hf) return 0;
        snprintf(out, cap, "model.layers.%d.%s%s", il, hf, dot);
        return 1;
    }
    for (size_t i = 0; i < sizeof glob / sizeof *glob; i++)
        if (strlen(glob[i].gg) == (size_t)(dot - gg) && !memcmp(gg, glob[i].gg, (size_t)(dot - gg))) {
            snprintf(out, cap, "%s%s", glob[i].hf, dot);
            return 1;
        }
    return 0;
}

/* Look a tensor up by its GGUF name. AF_ERR_NOT_FOUND when absent (message recorded only if
 * `required`), AF_ERR_UNSUPPORTED for a SafeTensors dtype other than F32/F16/BF16. */
static af_status src_find(const wsrc *s, const char *gg, int required, wview *v) {
    memset(v, 0, sizeof *v);
    if (s->m->gguf) {
        const af_gguf_tensor *t = af_gguf_find_tensor(s->m->gguf, gg);
        snprintf(v->name, sizeof v->name, "%s", gg);
        if (!t) return required ? af_fail(AF_ERR_NOT_FOUND, "%s: tensor '%s' is missing", s->label, gg) : AF_ERR_NOT_FOUND;
        v->data = t->data;
        v->type = t->type;
        memcpy(v->ne, t->ne, sizeof v->ne);
        return AF_OK;
    }
    if (!hf_name(s->m, gg, v->name, sizeof v->name)) snprintf(v->name, sizeof v->name, "%s", gg);
    const af_st_file *f = NULL;
    const af_st_tensor *t = af_hf_weights_find(s->m->hf, v->name, &f);
    if (!t) return required ? af_fail(AF_ERR_NOT_FOUND, "%s: tensor '%s' is missing", s->label, v->name) : AF_ERR_NOT_FOUND;
    switch (t->dtype) {
    case AF_ST_F32: v->type = AF_TYPE_F32; break;
    case AF_ST_F16: v->type = AF_TYPE_F16; break;
    case AF_ST_BF16: v->type = AF_TYPE_BF16; break;
    default:
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16)", af_st_path(f),
                       v->name, af_st_dtype_name(t->dtype));
    }
    if (t->n_dims < 1 || t->n_dims > 2)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': %d dimensions, expected 1 or 2", af_st_path(f), v->name,
                       (int)t->n_dims);
    v->data = t->data;
    v->ne[0] = t->shape[t->n_dims - 1];
    v->ne[1] = t->n_dims == 2 ? t->shape[0] : 1;
    v->ne[2] = v->ne[3] = 1;
    return AF_OK;
}

/* Keep a weight copy made at load (freed with the model). */
static af_status own(af_model *m, void *p, const char *label) {
    void **nw = af_realloc_array(m->owned_w, (size_t)m->n_owned_w + 1, sizeof *nw);
    if (!nw) {
        af_free_aligned(p);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", label);
    }
    m->owned_w = nw;
    m->owned_w[m->n_owned_w++] = p;
    return AF_OK;
}

/* Find a tensor and check it is a 2-D matrix [rows, cols] (GGUF ne = {cols, rows}) of a type the
 * kernels can read. `qk_heads` > 0: a q/k projection of that many heads whose rows are put in the
 * GGUF (NORM RoPE) order when the source asks for it: GGUF row h·hd + w = HF row
 * h·hd + (w mod 2)·hd/2 + w/2 (docs/FORMATS.md §3.3). HF tensors whose rows are not aligned for
 * their element type are copied too. */
static af_status find_matrix(const wsrc *s, const char *name, int64_t rows, int64_t cols, int64_t qk_heads,
                             af_weight *w) {
    wview t;
    AF_TRY(src_find(s, name, 1, &t));
    if (t.ne[0] != cols || t.ne[1] != rows || t.ne[2] != 1 || t.ne[3] != 1)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       s->label, t.name, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2],
                       (long long)t.ne[3], (long long)cols, (long long)rows);
    if (!af_type_can_dequantize(t.type))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': type %s (%u) is not supported", s->label, t.name,
                       af_type_name(t.type), t.type);
    w->data = t.data;
    w->type = t.type;
    w->rows = rows;
    w->cols = cols;
    const size_t esz = t.type == AF_TYPE_F32 ? 4 : 2;
    const int permute = s->permute_qk && qk_heads > 0;
    if (s->m->hf && (permute || (uintptr_t)t.data % esz)) {
        const size_t rb = af_row_bytes(t.type, cols);
        char *dst = af_malloc_aligned(rb * (size_t)rows);
        if (!dst) return af_fail(AF_ERR_NOMEM, "%s: out of memory copying '%s'", s->label, t.name);
        const int64_t hd = permute ? rows / qk_heads : rows;
        for (int64_t r = 0; r < rows; r++) {
            const int64_t h = r / hd, k = r % hd;
            const int64_t src = permute ? h * hd + (k % 2) * (hd / 2) + k / 2 : r;
            memcpy(dst + (size_t)r * rb, (const char *)t.data + (size_t)src * rb, rb);
        }
        AF_TRY(own(s->m, dst, s->label));
        w->data = dst;
    }
    return AF_OK;
}

/* A 1-D vector [n]; converted to f32 into `*scratch` (advanced) when not stored as aligned F32
 * (and always for HF Gemma norms, stored as w and used as 1 + w). */
static af_status find_vector(const wsrc *s, const char *name, int64_t n, float **scratch, const float **out) {
    wview t;
    AF_TRY(src_find(s, name, 1, &t));
    if (t.ne[0] != n || t.ne[1] != 1 || t.ne[2] != 1 || t.ne[3] != 1)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld], expected [%lld]", s->label, t.name,
                       (long long)t.ne[0], (long long)t.ne[1], (long long)n);
    const size_t nl = strlen(name);
    const int plus1 = s->norm_plus_one && nl >= 11 && !strcmp(name + nl - 11, "norm.weight");
    if (!plus1 && t.type == AF_TYPE_F32 && ((uintptr_t)t.data % sizeof(float)) == 0) {
        *out = (const float *)t.data;
        return AF_OK;
    }
    if (!af_type_can_dequantize(t.type))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': type %s is not supported", s->label, t.name,
                       af_type_name(t.type));
    if (t.type == AF_TYPE_F32) memcpy(*scratch, t.data, (size_t)n * sizeof(float)); /* misaligned */
    else af_dequantize_row(t.type, t.data, *scratch, n);
    if (plus1)
        for (int64_t i = 0; i < n; i++) (*scratch)[i] += 1.0f;
    *out = *scratch;
    *scratch += n;
    return AF_OK;
}

/* KV sharing (gemma4): layer i >= L - n_kv_shared attends to the K/V of the last layer before
 * L - n_kv_shared of its own type (sliding or global): transformers Gemma4TextConfig.kv_sharing_modes.
 * (llama.cpp takes layer L - n_kv_shared - 2 for sliding and - 1 for global layers, the same layers
 * when the last two unshared layers are sliding, global.) The cache offsets of the layers with their
 * own K/V follow one another (af_layer.kv_off). */
static af_status resolve_kv(af_model *m, const lplan *pl, const char *label) {
    const int32_t L = m->cfg.num_hidden_layers, first = L - m->desc.n_kv_shared;
    int64_t off = 0;
    for (int32_t il = 0; il < L; il++) {
        af_layer *Ly = &m->layers[il];
        Ly->kv_src = il;
        if (il >= first) {
            int32_t src = -1;
            for (int32_t j = first - 1; j >= 0 && src < 0; j--)
                if (pl->sliding[j] == pl->sliding[il]) src = j;
            if (src < 0)
                return af_fail(AF_ERR_FORMAT, "%s: layer %d reuses the K/V of an earlier %s layer, but none of layers "
                               "0..%d is one", label, il, pl->sliding[il] ? "sliding" : "global", first - 1);
            const af_layer *S = &m->layers[src];
            if (S->head_dim != Ly->head_dim || S->n_kv_head != Ly->n_kv_head)
                return af_fail(AF_ERR_FORMAT, "%s: layer %d reuses the K/V of layer %d, whose head_dim / KV heads "
                               "(%d / %d) differ from its own (%d / %d)", label, il, src, S->head_dim, S->n_kv_head,
                               Ly->head_dim, Ly->n_kv_head);
            Ly->kv_src = src;
            Ly->kv_off = S->kv_off;
            continue;
        }
        Ly->kv_off = off;
        off += (int64_t)Ly->n_kv_head * Ly->head_dim;
    }
    m->kv_floats = off;
    return AF_OK;
}

/* Proportional RoPE of a global layer with head_dim hd (transformers _compute_proportional_rope_parameters):
 * the first int(partial·hd/2) frequency pairs rotate; the frequencies of the others are 0, written
 * as llama.cpp's frequency factors (1e30 divides them to 0 in f32; convert_hf_to_gguf.py Gemma4Model).
 * NULL when every pair rotates. *scratch advances by hd/2. */
static const float *rope_factors(float partial, int32_t hd, float **scratch) {
    const int32_t rot = (int32_t)floor((double)partial * (double)hd / 2.0 + 1e-9);
    if (rot >= hd / 2) return NULL;
    float *f = *scratch;
    for (int32_t i = 0; i < hd / 2; i++) f[i] = i < rot ? 1.0f : 1e30f;
    *scratch += hd / 2;
    return f;
}

/* The PLE tensors of the model and of layer il (desc.ple_dim > 0). */
static af_status load_ple(af_model *m, const wsrc *s, float **scratch) {
    const int64_t H = m->cfg.hidden_size, P = m->desc.ple_dim, LP = (int64_t)m->cfg.num_hidden_layers * P;
    AF_TRY(find_matrix(s, "per_layer_token_embd.weight", m->cfg.vocab_size, LP, 0, &m->ple_tok_embd));
    AF_TRY(find_matrix(s, "per_layer_model_proj.weight", LP, H, 0, &m->ple_model_proj));
    AF_TRY(find_vector(s, "per_layer_proj_norm.weight", P, scratch, &m->ple_proj_norm));
    return AF_OK;
}

/* The token embedding (its rows give the vocabulary size) and the output head (tied to the
 * embedding when a GGUF has no output.weight, or as config.json says). */
static af_status load_embeddings(af_model *m, const wsrc *s) {
    af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size;
    wview te;
    AF_TRY(src_find(s, "token_embd.weight", 1, &te));
    if (te.ne[1] < 1 || te.ne[1] > INT32_MAX)
        return af_fail(AF_ERR_FORMAT, "%s: %s: bad vocabulary size", s->label, te.name);
    if (s->expect_vocab && te.ne[1] != s->expect_vocab)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s' has %lld rows but config.json vocab_size is %d", s->label,
                       te.name, (long long)te.ne[1], s->expect_vocab);
    c->vocab_size = (int32_t)te.ne[1];
    AF_TRY(find_matrix(s, "token_embd.weight", c->vocab_size, H, 0, &m->tok_embd));
    int tied = c->tie_word_embeddings;
    if (m->gguf) {
        wview o;
        af_status fs = src_find(s, "output.weight", 0, &o);
        if (fs != AF_OK && fs != AF_ERR_NOT_FOUND) return fs;
        tied = fs == AF_ERR_NOT_FOUND;
    }
    if (!tied) {
        AF_TRY(find_matrix(s, "output.weight", c->vocab_size, H, 0, &m->output));
    } else {
        m->output = m->tok_embd;
    }
    c->tie_word_embeddings = tied;
    return AF_OK;
}

/* Layer il's projections and their norms: attention norm, q, k and v (none when it reads another
 * layer's K/V; no v for attention_k_eq_v), o; feed-forward norm, gate, up, down. */
static af_status load_layer_proj(af_model *m, const wsrc *s, const lplan *pl, int il, float **scratch) {
    const af_arch_desc *D = &m->desc;
    af_layer *L = &m->layers[il];
    const int64_t H = m->cfg.hidden_size, hd = L->head_dim, qd = (int64_t)L->n_head * hd,
                  kvd = (int64_t)L->n_kv_head * hd, F = L->n_ff;
    const int own_kv = L->kv_src == il;
    char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    AF_TRY(find_vector(s, NM("attn_norm.weight"), H, scratch, &L->attn_norm));
    AF_TRY(find_matrix(s, NM("attn_q.weight"), qd, H, L->n_head, &L->wq));
    if (own_kv) {
        AF_TRY(find_matrix(s, NM("attn_k.weight"), kvd, H, L->n_kv_head, &L->wk));
        /* attention_k_eq_v: GGUF without attn_v (llama.cpp: v = k); HF global layers by config.json */
        int has_v = 1;
        if (D->v_norm) {
            wview vv;
            af_status fs = m->gguf ? src_find(s, NM("attn_v.weight"), 0, &vv)
                                   : (pl->v_from_k_global && !pl->sliding[il] ? AF_ERR_NOT_FOUND : AF_OK);
            if (fs != AF_OK && fs != AF_ERR_NOT_FOUND) return fs;
            has_v = fs == AF_OK;
        }
        L->v_from_k = !has_v;
        if (has_v) AF_TRY(find_matrix(s, NM("attn_v.weight"), kvd, H, 0, &L->wv));
    }
    AF_TRY(find_matrix(s, NM("attn_output.weight"), H, qd, 0, &L->wo));
    AF_TRY(find_vector(s, NM("ffn_norm.weight"), H, scratch, &L->ffn_norm));
    AF_TRY(find_matrix(s, NM("ffn_gate.weight"), F, H, 0, &L->w_gate));
    AF_TRY(find_matrix(s, NM("ffn_up.weight"), F, H, 0, &L->w_up));
    AF_TRY(find_matrix(s, NM("ffn_down.weight"), H, F, 0, &L->w_down));
#undef NM
    return AF_OK;
}

/* The rest of layer il (in the order the loader has always read it): RoPE base and window, the
 * q/k/v biases and q/k norms its architecture has, the sandwich norms, the window and RoPE of
 * sliding / global layers (gguf_ff: GGUF rope_freqs of the global layers, whose head_dim is
 * hd_global; HF factors into *misc), the PLE tensors, the optional layer_output_scale. */
static af_status load_layer_rest(af_model *m, const wsrc *s, const lplan *pl, int il, float **scratch, float **misc,
                                 const float *gguf_ff, int32_t hd_global) {
    const af_model_config *c = &m->cfg;
    const af_arch_desc *D = &m->desc;
    af_layer *L = &m->layers[il];
    const int64_t H = c->hidden_size, P = D->ple_dim, hd = L->head_dim, qd = (int64_t)L->n_head * hd,
                  kvd = (int64_t)L->n_kv_head * hd;
    const int own_kv = L->kv_src == il;
    char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    L->rope_base = c->rope_theta;
    L->window = 0;
    if (D->qkv_bias) {
        AF_TRY(find_vector(s, NM("attn_q.bias"), qd, scratch, &L->bq));
        AF_TRY(find_vector(s, NM("attn_k.bias"), kvd, scratch, &L->bk));
        AF_TRY(find_vector(s, NM("attn_v.bias"), kvd, scratch, &L->bv));
    }
    if (D->qk_norm) {
        AF_TRY(find_vector(s, NM("attn_q_norm.weight"), hd, scratch, &L->q_norm));
        if (own_kv) AF_TRY(find_vector(s, NM("attn_k_norm.weight"), hd, scratch, &L->k_norm));
    }
    if (D->sandwich_norm) {
        AF_TRY(find_vector(s, NM("post_attention_norm.weight"), H, scratch, &L->post_attn_norm));
        AF_TRY(find_vector(s, NM("post_ffw_norm.weight"), H, scratch, &L->post_ffw_norm));
    }
    if (D->swa_period != 0 && pl->sliding[il]) {
        L->window = D->sliding_window;
        L->rope_base = D->rope_base_swa;
    }
    if (D->swa_period < 0 && !pl->sliding[il]) {
        if (m->gguf) {
            if (gguf_ff && hd != hd_global)
                return af_fail(AF_ERR_FORMAT, "%s: rope_freqs.weight has %d factors but layer %d has head_dim %lld",
                               s->label, hd_global / 2, il, (long long)hd);
            L->rope_freq_factors = gguf_ff;
        } else {
            L->rope_freq_factors = rope_factors(pl->rope_partial_full, (int32_t)hd, misc);
        }
    }
    if (P > 0) {
        AF_TRY(find_matrix(s, NM("inp_gate.weight"), P, H, 0, &L->ple_gate));
        AF_TRY(find_matrix(s, NM("proj.weight"), H, P, 0, &L->ple_proj));
        AF_TRY(find_vector(s, NM("post_norm.weight"), H, scratch, &L->ple_post_norm));
    }
    if (D->swa_period < 0) { /* layer_output_scale: optional */
        wview os;
        af_status fs = src_find(s, NM("layer_output_scale.weight"), 0, &os);
        if (fs != AF_OK && fs != AF_ERR_NOT_FOUND) return fs;
        if (fs == AF_OK) {
            const float *sc = NULL;
            AF_TRY(find_vector(s, NM("layer_output_scale.weight"), 1, scratch, &sc));
            if (!isfinite(sc[0])) return af_fail(AF_ERR_FORMAT, "%s: tensor '%s' is not finite", s->label, os.name);
            L->out_scale = sc[0];
        }
    }
#undef NM
    return AF_OK;
}

/* The largest per-layer sizes (the walk's buffers). */
static void note_max_sizes(af_model *m) {
    for (int il = 0; il < m->cfg.num_hidden_layers; il++) {
        const af_layer *L = &m->layers[il];
        const int64_t qd = (int64_t)L->n_head * L->head_dim, kvd = (int64_t)L->n_kv_head * L->head_dim;
        if (qd > m->max_qd) m->max_qd = qd;
        if (kvd > m->max_kvd) m->max_kvd = kvd;
        if (L->n_ff > m->max_ff) m->max_ff = L->n_ff;
        if (L->n_head > m->max_n_head) m->max_n_head = L->n_head;
        if (L->n_kv_head > m->max_n_kv_head) m->max_n_kv_head = L->n_kv_head;
        if (L->head_dim > m->max_head_dim) m->max_head_dim = L->head_dim;
    }
}

/* The weights of either container (src_find maps names), with the per-layer sizes and sliding
 * pattern of `pl`. */
static af_status load_weights(af_model *m, const wsrc *s, const lplan *pl) {
    af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, P = m->desc.ple_dim;
    const int32_t NL = c->num_hidden_layers;
    AF_TRY(load_embeddings(m, s));
    /* scratch for norms that are not F32 (rare) and, last, RoPE factors / ones: an upper bound */
    int32_t hdmax = 0;
    size_t nvec = (size_t)H + (size_t)P + 1;
    for (int32_t il = 0; il < NL; il++) {
        const size_t hd = (size_t)pl->hd[il], qd = (size_t)pl->nh[il] * hd, kvd = (size_t)pl->nkv[il] * hd;
        nvec += 6 * (size_t)H + 3 * hd + qd + 2 * kvd + 1;
        if (pl->hd[il] > hdmax) hdmax = pl->hd[il];
    }
    m->owned_f32 = af_calloc(nvec, sizeof(float));
    m->layers = af_calloc((size_t)NL, sizeof(af_layer));
    if (!m->owned_f32 || !m->layers) return af_fail(AF_ERR_NOMEM, "%s: out of memory for layer table", s->label);
    float *scratch = m->owned_f32;
    AF_TRY(find_vector(s, "output_norm.weight", H, &scratch, &m->output_norm));
    af_arch_desc *D = &m->desc;
    D->tied_head = c->tie_word_embeddings;
    if (P > 0) AF_TRY(load_ple(m, s, &scratch));
    /* global layers' RoPE factors: GGUF rope_freqs (one tensor for every global layer), HF from
     * config.json; and the weight of the unweighted v norm */
    const float *gguf_ff = NULL;
    int32_t hd_global = 0; /* head_dim of the global layers (gemma4: key_length) */
    for (int32_t il = 0; il < NL; il++)
        if (!pl->sliding[il]) hd_global = pl->hd[il];
    if (m->gguf && D->swa_period < 0 && hd_global > 0) {
        wview rf;
        af_status fs = src_find(s, "rope_freqs.weight", 0, &rf);
        if (fs != AF_OK && fs != AF_ERR_NOT_FOUND) return fs;
        if (fs == AF_OK) AF_TRY(find_vector(s, "rope_freqs.weight", hd_global / 2, &scratch, &gguf_ff));
    }
    for (int il = 0; il < NL; il++) {
        af_layer *L = &m->layers[il];
        L->n_head = pl->nh[il];
        L->n_kv_head = pl->nkv[il];
        L->head_dim = pl->hd[il];
        L->n_ff = pl->ff[il];
        L->out_scale = 1.0f;
    }
    AF_TRY(resolve_kv(m, pl, s->label));
    m->owned_misc = af_malloc(((size_t)NL * (size_t)hdmax / 2 + (size_t)hdmax + 1) * sizeof(float));
    if (!m->owned_misc) return af_fail(AF_ERR_NOMEM, "%s: out of memory", s->label);
    float *misc = m->owned_misc;
    if (D->v_norm) {
        for (int32_t i = 0; i < hdmax; i++) misc[i] = 1.0f;
        m->ones = misc;
        misc += hdmax;
    }
    for (int il = 0; il < NL; il++) {
        AF_TRY(load_layer_proj(m, s, pl, il, &scratch));
        AF_TRY(load_layer_rest(m, s, pl, il, &scratch, &misc, gguf_ff, hd_global));
    }
    note_max_sizes(m);
    return AF_OK;
}

int af_model_proj_shape(const af_model *m, int32_t l, int32_t p, int64_t *in, int64_t *out) {
    *in = *out = 0;
    if (!m || l < 0 || l >= m->cfg.num_hidden_layers || p < 0 || p > 6) return 0;
    const af_layer *L = &m->layers[l];
    const int64_t H = m->cfg.hidden_size, qd = (int64_t)L->n_head * L->head_dim,
                  kvd = (int64_t)L->n_kv_head * L->head_dim, F = L->n_ff;
    switch (p) {
    case 0: *in = H, *out = qd; break;
    case 1: if (!L->wk.data) return 0; *in = H, *out = kvd; break;
    case 2: if (!L->wv.data) return 0; *in = H, *out = kvd; break;
    case 3: *in = qd, *out = H; break;
    case 4:
    case 5: *in = H, *out = F; break;
    default: *in = F, *out = H; break;
    }
    return 1;
}

/* `path` is a directory: a Hugging Face checkpoint (config.json, SafeTensors, tokenizer.json). */
static af_status load_hf(af_model *m, const char *dir) {
    char *js = NULL;
    size_t jl = 0;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json", dir);
    af_status st = af_hf_read_json_file(dir, "config.json", (size_t)16 << 20, &js, &jl);
    if (st == AF_ERR_NOT_FOUND)
        return af_fail(AF_ERR_NOT_FOUND, "%s: a directory without config.json (not a Hugging Face checkpoint)", dir);
    if (st != AF_OK) return st;
    af_hf_config h;
    st = af_hf_config_parse(js, jl, label, &h);
    free(js);
    if (st != AF_OK) return st;
    lplan pl;
    memset(&pl, 0, sizeof pl);
    st = model_hparams_hf(m, &h, label, &pl);
    if (st == AF_OK) st = af_hf_weights_open(dir, &m->hf);
    if (st == AF_OK) {
        m->file_bytes = af_hf_weights_bytes(m->hf);
        /* the weights config.json implies must fit in the files (>= 2 bytes each) before anything
         * is sized by these numbers (a lower bound: q, o and the FFN of every layer, K of the first
         * layer, and the token embedding) */
        const af_model_config *c = &m->cfg;
        const double H = c->hidden_size;
        double need = (double)c->vocab_size * H + H * (double)pl.nkv[0] * pl.hd[0];
        for (int32_t il = 0; il < c->num_hidden_layers; il++)
            need += 2 * H * (double)pl.nh[il] * pl.hd[il] + 3 * H * (double)pl.ff[il];
        need *= 2.0;
        if (need > (double)m->file_bytes)
            st = af_fail(AF_ERR_FORMAT,
                         "%s: the hyper-parameters need at least %.0f bytes of weights but the SafeTensors files hold "
                         "%llu", label, need, (unsigned long long)m->file_bytes);
    }
    if (st == AF_OK) {
        wsrc s = {m, dir, model_arch_hf_norm_plus_one(h.architecture), !m->desc.rope_neox, h.vocab_size};
        st = load_weights(m, &s, &pl);
    }
    model_plan_free(&pl);
    m->pad_token_id = h.pad_token_id;
    const int64_t h_bos = h.bos_token_id, h_eos = h.eos_token_id;
    af_hf_config_free(&h);
    if (st != AF_OK) return st;
    /* A model without a usable tokenizer still runs on token ids; the CLI reports it. */
    af_status ts = af_tokenizer_load_hf(dir, &m->tok);
    if (ts != AF_OK) {
        m->tok = NULL;
        snprintf(m->tok_error, sizeof m->tok_error, "%s", af_last_error());
        af_clear_error();
        if (ts == AF_ERR_NOMEM) return af_fail(AF_ERR_NOMEM, "%s", m->tok_error);
    }
    const char *const names[] = {"config.json bos_token_id", "config.json eos_token_id", "config.json pad_token_id"};
    const int64_t ids[] = {h_bos, h_eos, m->pad_token_id};
    return model_tok_check(m, dir, names, ids, 3);
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

af_status af_model_load(const af_ctx *ctx, const char *path, af_model **out) {
    if (!path || !out) return af_fail(AF_ERR_INVALID_ARG, "af_model_load: NULL argument");
    *out = NULL;
    if (!ctx && !(ctx = af_ctx_default())) return af_fail(AF_ERR_NOMEM, "out of memory for the default context");
    af_model *m = af_calloc(1, sizeof *m);
    if (!m) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    m->ctx = ctx;
    m->pad_token_id = -1;
    af_status st;
    if (is_dir(path)) {
        st = load_hf(m, path);
    } else {
        lplan pl;
        memset(&pl, 0, sizeof pl);
        st = af_gguf_open(path, &m->gguf);
        if (st == AF_OK) st = model_hparams_gguf(m, &pl);
        if (st == AF_OK) {
            m->file_bytes = m->gguf->size;
            wsrc s = {m, path, 0, 0, 0};
            st = load_weights(m, &s, &pl);
        }
        model_plan_free(&pl);
        if (st == AF_OK) {
            /* A model without a usable tokenizer still runs on token ids; the CLI reports it. */
            af_status ts = af_tokenizer_load(m->gguf, &m->tok);
            if (ts != AF_OK) {
                m->tok = NULL;
                if (ts == AF_ERR_NOMEM) st = ts;
                snprintf(m->tok_error, sizeof m->tok_error, "%s", af_last_error());
                af_clear_error();
            }
            if (st == AF_OK) st = model_tok_check_gguf(m, path);
        }
    }
    if (st == AF_OK && ctx->quantize != AF_TYPE_F32) st = af_model_requantize(m, ctx->quantize, NULL, NULL);
    if (st == AF_OK && !m->imported) st = af_model_import(m); /* weights on the context's device */
    if (st != AF_OK) {
        af_model_free(m);
        return st;
    }
    *out = m;
    return AF_OK;
}

void af_model_free(af_model *m) {
    if (!m) return;
    af_model_release(m);
    if (m->tok) af_tokenizer_free(m->tok);
    free(m->layers);
    free(m->owned_f32);
    free(m->owned_misc);
    for (int32_t i = 0; i < m->n_owned_w; i++) af_free_aligned(m->owned_w[i]);
    free(m->owned_w);
    af_free_aligned(m->owned_quant);
    af_gguf_close(m->gguf);
    af_hf_weights_close(m->hf);
    free(m);
}

const af_model_config *af_model_get_config(const af_model *m) { return &m->cfg; }

const af_tokenizer *af_model_tokenizer(const af_model *m) { return m->tok; }
const char *af_model_tokenizer_error(const af_model *m) {
    if (!m || m->tok) return NULL;
    return m->tok_error[0] ? m->tok_error : "the file has no tokenizer.ggml.* keys";
}

af_status af_chat_format(const af_model *m, const char *system, const char *user, char **out) {
    if (!m->tok) return af_fail(AF_ERR_NOT_FOUND, "model has no tokenizer, so no chat template");
    return af_chat_format_tok(m->tok, system, user, out);
}

af_status af_chat_format_template(const af_model *m, const char *chat_template, const char *system, const char *user,
                                  char **out) {
    if (!m->tok) return af_fail(AF_ERR_NOT_FOUND, "model has no tokenizer, so no chat template");
    return af_chat_format_tok_as(m->tok, chat_template, system, user, out);
}

/* The generation prompt of a conversation is af_chat_apply_template with add_generation_prompt = 1:
 * one renderer, one set of argument checks (chat_messages.c). */
af_status af_chat_format_turns(const af_model *m, const char *chat_template, const char *const *roles,
                               const char *const *contents, int32_t n, char **out) {
    if (out) *out = NULL;
    if (!m || !roles || !contents || !out || n < 1) return af_fail(AF_ERR_INVALID_ARG, "af_chat_format_turns: no turns");
    if (n > 1000000) return af_fail(AF_ERR_INVALID_ARG, "af_chat_format_turns: %d turns, more than 1000000", (int)n);
    size_t *lens = malloc(sizeof *lens * (size_t)n);
    if (!lens) return af_fail(AF_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) lens[i] = contents[i] ? strlen(contents[i]) : 0;
    af_status st = af_chat_apply_template(m, chat_template, roles, contents, lens, n, 1, out);
    free(lens);
    return st;
}
