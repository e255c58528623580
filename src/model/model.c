/* model.c — load a transformer from GGUF: hyper-parameters, architecture table, weight views. */
#include "model/model.h"

#include "kernels/ctx.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Find a tensor and check it is a 2-D matrix [rows, cols] (GGUF ne = {cols, rows}) of a type the
 * kernels can read. */
static af_status find_matrix(const af_gguf *g, const char *name, int64_t rows, int64_t cols, af_weight *w) {
    const af_gguf_tensor *t = af_gguf_find_tensor(g, name);
    if (!t) return af_fail(AF_ERR_NOT_FOUND, "%s: tensor '%s' is missing", g->path, name);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       g->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)cols, (long long)rows);
    if (!af_type_can_dequantize(t->type))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': type %s (%u) is not supported", g->path, name,
                       af_type_name(t->type), t->type);
    w->data = t->data;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    return AF_OK;
}

/* A 1-D norm vector [n]; converted to f32 into `*scratch` (advanced) when not stored as F32. */
static af_status find_vector(const af_gguf *g, const char *name, int64_t n, float **scratch, const float **out) {
    const af_gguf_tensor *t = af_gguf_find_tensor(g, name);
    if (!t) return af_fail(AF_ERR_NOT_FOUND, "%s: tensor '%s' is missing", g->path, name);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld], expected [%lld]", g->path, name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    if (t->type == AF_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)t->data;
        return AF_OK;
    }
    if (!af_type_can_dequantize(t->type))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': type %s is not supported", g->path, name,
                       af_type_name(t->type));
    af_dequantize_row(t->type, t->data, *scratch, n);
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
    const arch_entry *ae = arch_find(c->architecture);
    if (!ae)
        return af_fail(AF_ERR_UNSUPPORTED,
                       "%s: general.architecture: '%s' is not supported (supported: llama, gemma3, qwen2, qwen3; "
                       "mixture-of-experts variants such as qwen2moe/qwen3moe are not)", g->path,
                       c->architecture);
    m->desc.name = ae->name;
    m->desc.sandwich_norm = ae->sandwich_norm;
    m->desc.qk_norm = ae->qk_norm;
    m->desc.act = ae->act;
    m->desc.rope_neox = ae->rope_neox;
    m->desc.swa_period = ae->swa_period;
    m->desc.qkv_bias = ae->qkv_bias;
    m->desc.final_logit_softcap = 0; /* none of the supported architectures caps the final logits */
    const char *a = c->architecture;
    AF_TRY(get_int(g, a, "embedding_length", 1, 1 << 16, 0, 0, &c->hidden_size));
    AF_TRY(get_int(g, a, "block_count", 1, 1024, 0, 0, &c->num_hidden_layers));
    AF_TRY(get_int(g, a, "feed_forward_length", 1, 1 << 20, 0, 0, &c->intermediate_size));
    AF_TRY(get_int(g, a, "attention.head_count", 1, 1024, 0, 0, &c->num_attention_heads));
    AF_TRY(get_int(g, a, "attention.head_count_kv", 1, 1024, 1, c->num_attention_heads, &c->num_key_value_heads));
    if (c->num_attention_heads % c->num_key_value_heads)
        return af_fail(AF_ERR_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                       g->path, a, c->num_attention_heads, c->num_key_value_heads);
    int32_t def_hd = c->hidden_size / c->num_attention_heads;
    AF_TRY(get_int(g, a, "attention.key_length", 1, 4096, 1, def_hd, &c->head_dim));
    int32_t vlen, rot;
    AF_TRY(get_int(g, a, "attention.value_length", 1, 4096, 1, c->head_dim, &vlen));
    if (vlen != c->head_dim)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.attention.value_length %d != key_length %d", g->path, a, vlen,
                       c->head_dim);
    if (c->head_dim % 2)
        return af_fail(AF_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", g->path, c->head_dim);
    AF_TRY(get_int(g, a, "rope.dimension_count", 1, 4096, 1, c->head_dim, &rot));
    if (rot != c->head_dim)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count %d != head_dim %d (partial RoPE)", g->path,
                       a, rot, c->head_dim);
    AF_TRY(get_int(g, a, "context_length", 1, INT32_MAX, 1, 2048, &c->max_position_embeddings));
    char k[128];
    AF_TRY(af_gguf_get_f32(g, akey(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), &c->rms_norm_eps));
    AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.freq_base"), 10000.0f, &c->rope_theta));
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return af_fail(AF_ERR_FORMAT, "%s: rms_norm_eps and rope.freq_base must be positive", g->path);
    af_gguf_str rs;
    if (af_gguf_find(g, akey(k, sizeof k, a, "rope.scaling.type")) &&
        af_gguf_get_str(g, k, &rs) == AF_OK && !af_gguf_str_eq(rs, "none")) {
        float f = 1;
        AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.scaling.factor"), 1.0f, &f));
        if (f != 0 && f != 1)
            return af_fail(AF_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' (factor %g) is not supported", g->path,
                           (int)rs.len, rs.ptr, (double)f);
    }
    return AF_OK;
}

static af_status load_weights(af_model *m) {
    af_gguf *g = m->gguf;
    af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t qd = (int64_t)c->num_attention_heads * hd, kvd = (int64_t)c->num_key_value_heads * hd;
    const af_gguf_tensor *te = af_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return af_fail(AF_ERR_NOT_FOUND, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return af_fail(AF_ERR_FORMAT, "%s: token_embd.weight: bad vocabulary size", g->path);
    c->vocab_size = (int32_t)te->ne[1];
    AF_TRY(find_matrix(g, "token_embd.weight", c->vocab_size, H, &m->tok_embd));
    if (af_gguf_find_tensor(g, "output.weight")) {
        AF_TRY(find_matrix(g, "output.weight", c->vocab_size, H, &m->output));
        c->tie_word_embeddings = 0;
    } else {
        m->output = m->tok_embd;
        c->tie_word_embeddings = 1;
    }
    /* scratch for norms that are not F32 (rare): upper bound of all vector lengths */
    size_t nvec = (size_t)H + (size_t)c->num_hidden_layers * (size_t)(4 * H + 2 * hd + qd + 2 * kvd);
    m->owned_f32 = af_calloc(nvec, sizeof(float));
    m->layers = af_calloc((size_t)c->num_hidden_layers, sizeof(af_layer));
    if (!m->owned_f32 || !m->layers) return af_fail(AF_ERR_NOMEM, "%s: out of memory for layer table", g->path);
    float *scratch = m->owned_f32;
    AF_TRY(find_vector(g, "output_norm.weight", H, &scratch, &m->output_norm));
    af_arch_desc *D = &m->desc;
    D->tied_head = c->tie_word_embeddings;
    D->sliding_window = 0;
    D->rope_base_swa = c->rope_theta;
    if (D->swa_period > 0) {
        int32_t swa = 0;
        AF_TRY(get_int(g, c->architecture, "attention.sliding_window", 1, INT32_MAX, 0, 0, &swa));
        char k[128];
        D->sliding_window = swa;
        AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, c->architecture, "rope.freq_base_swa"), 10000.0f,
                                  &D->rope_base_swa));
    }
    for (int il = 0; il < c->num_hidden_layers; il++) {
        af_layer *L = &m->layers[il];
        char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
        AF_TRY(find_vector(g, NM("attn_norm.weight"), H, &scratch, &L->attn_norm));
        AF_TRY(find_matrix(g, NM("attn_q.weight"), qd, H, &L->wq));
        AF_TRY(find_matrix(g, NM("attn_k.weight"), kvd, H, &L->wk));
        AF_TRY(find_matrix(g, NM("attn_v.weight"), kvd, H, &L->wv));
        AF_TRY(find_matrix(g, NM("attn_output.weight"), H, qd, &L->wo));
        AF_TRY(find_vector(g, NM("ffn_norm.weight"), H, &scratch, &L->ffn_norm));
        AF_TRY(find_matrix(g, NM("ffn_gate.weight"), F, H, &L->w_gate));
        AF_TRY(find_matrix(g, NM("ffn_up.weight"), F, H, &L->w_up));
        AF_TRY(find_matrix(g, NM("ffn_down.weight"), H, F, &L->w_down));
        L->rope_base = c->rope_theta;
        L->window = 0;
        if (D->qkv_bias) {
            AF_TRY(find_vector(g, NM("attn_q.bias"), qd, &scratch, &L->bq));
            AF_TRY(find_vector(g, NM("attn_k.bias"), kvd, &scratch, &L->bk));
            AF_TRY(find_vector(g, NM("attn_v.bias"), kvd, &scratch, &L->bv));
        }
        if (D->qk_norm) {
            AF_TRY(find_vector(g, NM("attn_q_norm.weight"), hd, &scratch, &L->q_norm));
            AF_TRY(find_vector(g, NM("attn_k_norm.weight"), hd, &scratch, &L->k_norm));
        }
        if (D->sandwich_norm) {
            AF_TRY(find_vector(g, NM("post_attention_norm.weight"), H, &scratch, &L->post_attn_norm));
            AF_TRY(find_vector(g, NM("post_ffw_norm.weight"), H, &scratch, &L->post_ffw_norm));
        }
        if (D->swa_period > 0 && il % D->swa_period != D->swa_period - 1) {
            L->window = D->sliding_window;
            L->rope_base = D->rope_base_swa;
        }
#undef NM
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
    D->embd_scale = arch_find(c->architecture)->embd_scale_sqrt_hidden ? sqrtf((float)H) : 1.0f;
    D->attn_scale = 1.0f / sqrtf((float)hd); /* gemma3: query_pre_attn_scalar = head_dim for 270m..12B */
    return AF_OK;
}

af_status af_model_load(const af_ctx *ctx, const char *path, af_model **out) {
    if (!path || !out) return af_fail(AF_ERR_INVALID_ARG, "af_model_load: NULL argument");
    *out = NULL;
    if (!ctx && !(ctx = af_ctx_default())) return af_fail(AF_ERR_NOMEM, "out of memory for the default context");
    af_model *m = af_calloc(1, sizeof *m);
    if (!m) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    m->ctx = ctx;
    af_status st = af_gguf_open(path, &m->gguf);
    if (st == AF_OK) st = load_hparams(m);
    if (st == AF_OK) st = load_weights(m);
    if (st == AF_OK && ctx->quantize != AF_TYPE_F32) st = af_model_requantize(m, ctx->quantize, NULL, NULL);
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
    if (st != AF_OK) {
        af_model_free(m);
        return st;
    }
    *out = m;
    return AF_OK;
}

void af_model_free(af_model *m) {
    if (!m) return;
    if (m->tok) af_tokenizer_free(m->tok);
    free(m->layers);
    free(m->owned_f32);
    af_free_aligned(m->owned_quant);
    af_gguf_close(m->gguf);
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
