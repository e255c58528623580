/* model.c — load a transformer from GGUF or a Hugging Face directory: hyper-parameters,
 * architecture table, weight views. */
#include "model/model.h"

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

/* Key "{arch}.{suffix}". */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

static af_status get_int(const af_gguf *g, const char *arch, const char *suffix, int64_t lo, int64_t hi,
                         int has_def, int64_t def, int32_t *out) {
    char k[128];
    int64_t v;
    akey(k, sizeof k, arch, suffix);
    if (has_def) AF_TRY(af_gguf_get_i64_or(g, k, def, &v));
    else AF_TRY(af_gguf_get_i64(g, k, &v));
    if (v < lo || v > hi)
        return af_fail(AF_ERR_FORMAT, "%s: %s: value %lld outside [%lld, %lld]", g->path, k, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return AF_OK;
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

/* GGUF name -> transformers name (llama/gemma3/qwen2/qwen3 modeling files; llama.cpp
 * gguf-py/gguf/tensor_mapping.py lists the same pairs). Sandwich-norm architectures (gemma3)
 * call the pre-FFN norm pre_feedforward_layernorm and use post_attention_layernorm for the
 * post-attention norm; the others call the pre-FFN norm post_attention_layernorm. */
static int hf_name(const af_model *m, const char *gg, char *out, size_t cap) {
    static const struct { const char *gg, *hf; } glob[] = {
        {"token_embd", "model.embed_tokens"}, {"output", "lm_head"}, {"output_norm", "model.norm"}};
    static const struct { const char *gg, *hf; } blk[] = {
        {"attn_norm", "input_layernorm"},          {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},            {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"},       {"attn_q_norm", "self_attn.q_norm"},
        {"attn_k_norm", "self_attn.k_norm"},       {"post_attention_norm", "post_attention_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"}, {"ffn_gate", "mlp.gate_proj"},
        {"ffn_up", "mlp.up_proj"},                 {"ffn_down", "mlp.down_proj"}};
    const char *dot = strrchr(gg, '.'); /* ".weight" / ".bias" */
    if (!dot) return 0;
    int il = -1, nc = 0;
    if (sscanf(gg, "blk.%d.%n", &il, &nc) == 1 && nc > 0) {
        size_t bl = (size_t)(dot - (gg + nc));
        const char *base = gg + nc, *hf = NULL;
        if (bl == 8 && !memcmp(base, "ffn_norm", 8))
            hf = m->desc.sandwich_norm ? "pre_feedforward_layernorm" : "post_attention_layernorm";
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

/* The architecture table: one row per supported general.architecture. Sources: llama.cpp
 * src/models/llama.cpp, gemma3.cpp, qwen2.cpp, qwen3.cpp (rope types in src/llama-model.cpp);
 * transformers modeling_llama.py, modeling_gemma3.py, modeling_qwen2.py, modeling_qwen3.py.
 * llama: pre-norm, SwiGLU, RoPE NORM mode (the GGUF converter permuted q/k rows), no biases.
 * qwen2 (Qwen2, Qwen2.5): llama's layer plus biases on q/k/v (attn_{q,k,v}.bias), RoPE NEOX mode
 * (rows not permuted by the converter), rope.freq_base from the file (1e6 typical).
 * qwen3: llama's layer plus per-head RMSNorm of q and k before RoPE (attn_{q,k}_norm, weight used
 * as is: no 1 + w; eps = attention.layer_norm_rms_epsilon), no biases, RoPE NEOX mode, head_dim
 * from attention.key_length (may differ from hidden / heads).
 * gemma3: sandwich norms, q/k norms, GeGLU (tanh), RoPE NEOX mode, embedding times sqrt(hidden),
 * every 6th layer (il % 6 == 5) global and the others sliding-window with their own RoPE base
 * (llama.cpp set_swa_pattern(6); HF layer_types). */
typedef struct arch_entry {
    const char *name;
    int sandwich_norm, qk_norm;
    af_act act;
    int rope_neox;
    int embd_scale_sqrt_hidden; /* desc.embd_scale = sqrt(hidden) (else 1) */
    int32_t swa_period;
    int qkv_bias;
} arch_entry;

static const arch_entry arch_table[] = {
    {"llama", 0, 0, AF_ACT_SWIGLU, 0, 0, 0, 0},
    {"gemma3", 1, 1, AF_ACT_GEGLU_TANH, 1, 1, 6, 0},
    {"qwen2", 0, 0, AF_ACT_SWIGLU, 1, 0, 0, 1},
    {"qwen3", 0, 1, AF_ACT_SWIGLU, 1, 0, 0, 0},
};

static const arch_entry *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (!strcmp(name, arch_table[i].name)) return &arch_table[i];
    return NULL;
}

/* Architecture row -> desc (shared by both containers). `where` names the file and field. */
static af_status set_arch(af_model *m, const char *where) {
    af_model_config *c = &m->cfg;
    const arch_entry *ae = arch_find(c->architecture);
    if (!ae)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: '%s' is not supported (supported: llama, gemma3, qwen2, qwen3)",
                       where, c->architecture);
    m->desc.name = ae->name;
    m->desc.sandwich_norm = ae->sandwich_norm;
    m->desc.qk_norm = ae->qk_norm;
    m->desc.act = ae->act;
    m->desc.rope_neox = ae->rope_neox;
    m->desc.swa_period = ae->swa_period;
    m->desc.qkv_bias = ae->qkv_bias;
    m->desc.final_logit_softcap = 0; /* none of the supported architectures' GGUFs caps the final logits */
    m->desc.embd_scale = ae->embd_scale_sqrt_hidden ? sqrtf((float)c->hidden_size) : 1.0f;
    m->desc.attn_scale = 1.0f / sqrtf((float)c->head_dim); /* gemma3: query_pre_attn_scalar = head_dim for 270m..12B */
    m->desc.sliding_window = 0;
    m->desc.rope_base_swa = c->rope_theta;
    return AF_OK;
}

/* Checks shared by both containers. */
static af_status check_hparams(const af_model *m, const char *label) {
    const af_model_config *c = &m->cfg;
    if (c->num_attention_heads % c->num_key_value_heads)
        return af_fail(AF_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", label,
                       c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2) return af_fail(AF_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", label, c->head_dim);
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return af_fail(AF_ERR_FORMAT, "%s: rms_norm_eps and rope_theta must be positive", label);
    return AF_OK;
}

static af_status load_hparams(af_model *m) {
    const af_gguf *g = m->gguf;
    af_model_config *c = &m->cfg;
    af_gguf_str arch;
    AF_TRY(af_gguf_get_str(g, "general.architecture", &arch));
    if (arch.len >= sizeof c->architecture)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: general.architecture: '%.*s' is not supported", g->path,
                       (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    memcpy(c->architecture, arch.ptr, arch.len);
    c->architecture[arch.len] = 0;
    const char *a = c->architecture;
    if (!arch_find(a))
        return af_fail(AF_ERR_UNSUPPORTED,
                       "%s: general.architecture: '%s' is not supported (supported: llama, gemma3, qwen2, qwen3; "
                       "mixture-of-experts variants such as qwen2moe/qwen3moe are not)", g->path, a);
    AF_TRY(get_int(g, a, "embedding_length", 1, 1 << 16, 0, 0, &c->hidden_size));
    AF_TRY(get_int(g, a, "block_count", 1, 1024, 0, 0, &c->num_hidden_layers));
    AF_TRY(get_int(g, a, "feed_forward_length", 1, 1 << 20, 0, 0, &c->intermediate_size));
    AF_TRY(get_int(g, a, "attention.head_count", 1, 1024, 0, 0, &c->num_attention_heads));
    AF_TRY(get_int(g, a, "attention.head_count_kv", 1, 1024, 1, c->num_attention_heads, &c->num_key_value_heads));
    int32_t def_hd = c->hidden_size / c->num_attention_heads;
    AF_TRY(get_int(g, a, "attention.key_length", 1, 4096, 1, def_hd, &c->head_dim));
    int32_t vlen, rot;
    AF_TRY(get_int(g, a, "attention.value_length", 1, 4096, 1, c->head_dim, &vlen));
    if (vlen != c->head_dim)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.attention.value_length %d != key_length %d", g->path, a, vlen,
                       c->head_dim);
    AF_TRY(get_int(g, a, "rope.dimension_count", 1, 4096, 1, c->head_dim, &rot));
    if (rot != c->head_dim)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count %d != head_dim %d (partial RoPE)", g->path,
                       a, rot, c->head_dim);
    AF_TRY(get_int(g, a, "context_length", 1, INT32_MAX, 1, 2048, &c->max_position_embeddings));
    char k[128];
    AF_TRY(af_gguf_get_f32(g, akey(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), &c->rms_norm_eps));
    AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.freq_base"), 10000.0f, &c->rope_theta));
    AF_TRY(check_hparams(m, g->path));
    af_gguf_str rs;
    if (af_gguf_find(g, akey(k, sizeof k, a, "rope.scaling.type")) &&
        af_gguf_get_str(g, k, &rs) == AF_OK && !af_gguf_str_eq(rs, "none")) {
        float f = 1;
        AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.scaling.factor"), 1.0f, &f));
        if (f != 0 && f != 1)
            return af_fail(AF_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' (factor %g) is not supported", g->path,
                           (int)rs.len, rs.ptr, (double)f);
    }
    AF_TRY(set_arch(m, g->path));
    af_arch_desc *D = &m->desc;
    if (D->swa_period > 0) {
        int32_t swa = 0;
        AF_TRY(get_int(g, a, "attention.sliding_window", 1, INT32_MAX, 0, 0, &swa));
        D->sliding_window = swa;
        AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.freq_base_swa"), 10000.0f, &D->rope_base_swa));
    }
    /* a tensor of a layer past block_count: the layer count is wrong, layers would be ignored */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *tn = g->tensors[i].name;
        char *end = NULL;
        if (strncmp(tn, "blk.", 4) != 0) continue;
        long il = strtol(tn + 4, &end, 10);
        if (end != tn + 4 && *end == '.' && il >= c->num_hidden_layers)
            return af_fail(AF_ERR_FORMAT,
                           "%s: tensor '%s' belongs to layer %ld but %s.block_count is %d: the file's layer count is "
                           "wrong (layers %d.. would be ignored)",
                           g->path, tn, il, c->architecture, c->num_hidden_layers, c->num_hidden_layers);
    }
    return AF_OK;
}

/* config.json -> the same config and description (formats/hf_config.h lists the keys). */
static af_status load_hparams_hf(af_model *m, const af_hf_config *h, const char *label) {
    af_model_config *c = &m->cfg;
    snprintf(c->architecture, sizeof c->architecture, "%s", h->architecture);
    c->hidden_size = h->hidden_size;
    c->num_hidden_layers = h->num_hidden_layers;
    c->intermediate_size = h->intermediate_size;
    c->num_attention_heads = h->num_attention_heads;
    c->num_key_value_heads = h->num_key_value_heads;
    c->head_dim = h->head_dim;
    c->max_position_embeddings = h->max_position_embeddings;
    c->rms_norm_eps = h->rms_norm_eps;
    c->rope_theta = h->rope_theta;
    c->vocab_size = h->vocab_size;
    c->tie_word_embeddings = h->tie_word_embeddings;
    AF_TRY(check_hparams(m, label));
    char where[700];
    snprintf(where, sizeof where, "%.600s: field 'model_type' ('%.31s')", label, h->model_type);
    AF_TRY(set_arch(m, where));
    af_arch_desc *D = &m->desc;
    if (h->attention_bias && !D->qkv_bias)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'attention_bias': attention biases are not supported for %s",
                       label, h->model_type);
    if (h->query_pre_attn_scalar > 0) D->attn_scale = 1.0f / sqrtf(h->query_pre_attn_scalar);
    D->final_logit_softcap = h->final_logit_softcapping;
    if (D->swa_period > 0) { /* the architecture has sliding layers: HF's pattern replaces llama.cpp's rule */
        if (h->sliding_window_pattern > 0) D->swa_period = h->sliding_window_pattern;
        D->sliding_window = h->sliding_window;
        D->rope_base_swa = h->rope_theta_swa;
    }
    return AF_OK;
}

/* The weights of either container (src_find maps names). `sliding` [num_hidden_layers] (may be
 * NULL): 1 = sliding layer (HF layer_types); else the period rule of desc.swa_period. */
static af_status load_weights(af_model *m, const wsrc *s, const uint8_t *sliding) {
    af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t qd = (int64_t)c->num_attention_heads * hd, kvd = (int64_t)c->num_key_value_heads * hd;
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
    /* scratch for norms that are not F32 (rare): upper bound of all vector lengths */
    size_t nvec = (size_t)H + (size_t)c->num_hidden_layers * (size_t)(4 * H + 2 * hd + qd + 2 * kvd);
    m->owned_f32 = af_calloc(nvec, sizeof(float));
    m->layers = af_calloc((size_t)c->num_hidden_layers, sizeof(af_layer));
    if (!m->owned_f32 || !m->layers) return af_fail(AF_ERR_NOMEM, "%s: out of memory for layer table", s->label);
    float *scratch = m->owned_f32;
    AF_TRY(find_vector(s, "output_norm.weight", H, &scratch, &m->output_norm));
    af_arch_desc *D = &m->desc;
    D->tied_head = c->tie_word_embeddings;
    for (int il = 0; il < c->num_hidden_layers; il++) {
        af_layer *L = &m->layers[il];
        char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
        AF_TRY(find_vector(s, NM("attn_norm.weight"), H, &scratch, &L->attn_norm));
        AF_TRY(find_matrix(s, NM("attn_q.weight"), qd, H, c->num_attention_heads, &L->wq));
        AF_TRY(find_matrix(s, NM("attn_k.weight"), kvd, H, c->num_key_value_heads, &L->wk));
        AF_TRY(find_matrix(s, NM("attn_v.weight"), kvd, H, 0, &L->wv));
        AF_TRY(find_matrix(s, NM("attn_output.weight"), H, qd, 0, &L->wo));
        AF_TRY(find_vector(s, NM("ffn_norm.weight"), H, &scratch, &L->ffn_norm));
        AF_TRY(find_matrix(s, NM("ffn_gate.weight"), F, H, 0, &L->w_gate));
        AF_TRY(find_matrix(s, NM("ffn_up.weight"), F, H, 0, &L->w_up));
        AF_TRY(find_matrix(s, NM("ffn_down.weight"), H, F, 0, &L->w_down));
        L->rope_base = c->rope_theta;
        L->window = 0;
        if (D->qkv_bias) {
            AF_TRY(find_vector(s, NM("attn_q.bias"), qd, &scratch, &L->bq));
            AF_TRY(find_vector(s, NM("attn_k.bias"), kvd, &scratch, &L->bk));
            AF_TRY(find_vector(s, NM("attn_v.bias"), kvd, &scratch, &L->bv));
        }
        if (D->qk_norm) {
            AF_TRY(find_vector(s, NM("attn_q_norm.weight"), hd, &scratch, &L->q_norm));
            AF_TRY(find_vector(s, NM("attn_k_norm.weight"), hd, &scratch, &L->k_norm));
        }
        if (D->sandwich_norm) {
            AF_TRY(find_vector(s, NM("post_attention_norm.weight"), H, &scratch, &L->post_attn_norm));
            AF_TRY(find_vector(s, NM("post_ffw_norm.weight"), H, &scratch, &L->post_ffw_norm));
        }
        int slide = sliding ? sliding[il] : (D->swa_period > 0 && il % D->swa_period != D->swa_period - 1);
        if (D->swa_period > 0 && slide) {
            L->window = D->sliding_window;
            L->rope_base = D->rope_base_swa;
        }
#undef NM
    }
    return AF_OK;
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
    st = load_hparams_hf(m, &h, label);
    if (st == AF_OK) st = af_hf_weights_open(dir, &m->hf);
    if (st == AF_OK) {
        m->file_bytes = af_hf_weights_bytes(m->hf);
        /* the weights config.json implies must fit in the files (>= 2 bytes each) before anything
         * is sized by these numbers */
        const af_model_config *c = &m->cfg;
        const double H = c->hidden_size, qd = (double)c->num_attention_heads * c->head_dim,
                     kvd = (double)c->num_key_value_heads * c->head_dim;
        const double need = 2.0 * ((double)c->num_hidden_layers * (2 * H * qd + 2 * H * kvd + 3 * H * c->intermediate_size) +
                                   (double)c->vocab_size * H);
        if (need > (double)m->file_bytes)
            st = af_fail(AF_ERR_FORMAT,
                         "%s: the hyper-parameters need at least %.0f bytes of weights but the SafeTensors files hold "
                         "%llu", label, need, (unsigned long long)m->file_bytes);
    }
    if (st == AF_OK) {
        wsrc s = {m, dir, !strcmp(h.architecture, "gemma3"), !m->desc.rope_neox, h.vocab_size};
        st = load_weights(m, &s, m->desc.swa_period > 0 ? h.layer_sliding : NULL);
    }
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
    return AF_OK;
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
    af_status st;
    if (is_dir(path)) {
        st = load_hf(m, path);
    } else {
        st = af_gguf_open(path, &m->gguf);
        if (st == AF_OK) st = load_hparams(m);
        if (st == AF_OK) {
            m->file_bytes = m->gguf->size;
            wsrc s = {m, path, 0, 0, 0};
            st = load_weights(m, &s, NULL);
        }
        if (st == AF_OK) {
            /* A model without a usable tokenizer still runs on token ids; the CLI reports it. */
            af_status ts = af_tokenizer_load(m->gguf, &m->tok);
            if (ts != AF_OK) {
                m->tok = NULL;
                if (ts == AF_ERR_NOMEM) st = ts;
                snprintf(m->tok_error, sizeof m->tok_error, "%s", af_last_error());
                af_clear_error();
            }
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
