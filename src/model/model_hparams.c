/* model_hparams.c — the hyper-parameters of a model (model_load.h): the architecture table and
 * description, the per-layer sizes and sliding pattern, from GGUF metadata or config.json. The weights
 * are read by model.c with the plan made here. */
#include "model/model.h"
#include "model/model_load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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


/* The architecture table: one row per supported general.architecture. Sources: llama.cpp
 * src/models/llama.cpp, gemma3.cpp, qwen2.cpp, qwen3.cpp, gemma4.cpp (rope types in
 * src/llama-model.cpp); transformers modeling_llama.py, modeling_gemma3.py, modeling_qwen2.py,
 * modeling_qwen3.py, modeling_gemma4.py.
 * llama: pre-norm, SwiGLU, RoPE NORM mode (the GGUF converter permuted q/k rows), no biases.
 * qwen2 (Qwen2, Qwen2.5): llama's layer plus biases on q/k/v (attn_{q,k,v}.bias), RoPE NEOX mode
 * (rows not permuted by the converter), rope.freq_base from the file (1e6 typical).
 * qwen3: llama's layer plus per-head RMSNorm of q and k before RoPE (attn_{q,k}_norm, weight used
 * as is: no 1 + w; eps = attention.layer_norm_rms_epsilon), no biases, RoPE NEOX mode, head_dim
 * from attention.key_length (may differ from hidden / heads).
 * gemma3: sandwich norms, q/k norms, GeGLU (tanh), RoPE NEOX mode, embedding times sqrt(hidden),
 * every 6th layer (il % 6 == 5) global and the others sliding-window with their own RoPE base
 * (llama.cpp set_swa_pattern(6); HF layer_types).
 * gemma4: gemma3's layer with the sliding/global pattern from the file (per-layer array), global
 * layers with their own head_dim (key_length vs key_length_swa) and KV heads, v normed by an
 * unweighted RMSNorm, attention scale 1 (q and k are normed), RoPE frequency factors on global layers
 * (rope_freqs), KV sharing (shared_kv_layers), PLE, a per-layer output scale, final logit
 * soft-capping; norm weights used as stored (no 1 + w in HF checkpoints). docs/FORMATS.md §5c. */
typedef struct arch_entry {
    const char *name;
    int sandwich_norm, qk_norm;
    af_act act;
    int rope_neox;
    int embd_scale_sqrt_hidden; /* desc.embd_scale = sqrt(hidden) (else 1) */
    int32_t swa_period;         /* llama.cpp's fixed pattern; -1: the pattern is in the file (gemma4) */
    int qkv_bias;
    int gemma4;                 /* v norm, attention scale 1, PLE, KV sharing, per-layer sizes */
    int hf_norm_plus_one;       /* HF checkpoints store norm weights as w, used as 1 + w (gemma3) */
} arch_entry;

static const arch_entry arch_table[] = {
    {"llama", 0, 0, AF_ACT_SWIGLU, 0, 0, 0, 0, 0, 0},
    {"gemma3", 1, 1, AF_ACT_GEGLU_TANH, 1, 1, 6, 0, 0, 1},
    {"qwen2", 0, 0, AF_ACT_SWIGLU, 1, 0, 0, 1, 0, 0},
    {"qwen3", 0, 1, AF_ACT_SWIGLU, 1, 0, 0, 0, 0, 0},
    {"gemma4", 1, 1, AF_ACT_GEGLU_TANH, 1, 1, -1, 0, 1, 0},
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
        return af_fail(AF_ERR_UNSUPPORTED, "%s: '%s' is not supported (supported: llama, gemma3, qwen2, qwen3, gemma4)",
                       where, c->architecture);
    m->desc.name = ae->name;
    m->desc.sandwich_norm = ae->sandwich_norm;
    m->desc.qk_norm = ae->qk_norm;
    m->desc.act = ae->act;
    m->desc.rope_neox = ae->rope_neox;
    m->desc.swa_period = ae->swa_period;
    m->desc.qkv_bias = ae->qkv_bias;
    m->desc.final_logit_softcap = 0; /* set from the file where it has one (gemma4, HF configs) */
    m->desc.embd_scale = ae->embd_scale_sqrt_hidden ? sqrtf((float)c->hidden_size) : 1.0f;
    m->desc.attn_scale = 1.0f / sqrtf((float)c->head_dim); /* gemma3: query_pre_attn_scalar = head_dim for 270m..12B */
    if (ae->gemma4) m->desc.attn_scale = 1.0f; /* transformers Gemma4TextAttention.scaling = 1.0 */
    m->desc.v_norm = ae->gemma4;
    m->desc.sliding_window = 0;
    m->desc.rope_base_swa = c->rope_theta;
    return AF_OK;
}


static af_status plan_init(lplan *p, const af_model_config *c, const char *label) {
    memset(p, 0, sizeof *p);
    const size_t L = (size_t)c->num_hidden_layers;
    p->nh = af_malloc(4 * L * sizeof(int32_t));
    p->sliding = af_calloc(L, 1);
    if (!p->nh || !p->sliding) {
        free(p->nh);
        free(p->sliding);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", label);
    }
    p->nkv = p->nh + L;
    p->hd = p->nkv + L;
    p->ff = p->hd + L;
    for (size_t i = 0; i < L; i++) {
        p->nh[i] = c->num_attention_heads;
        p->nkv[i] = c->num_key_value_heads;
        p->hd[i] = c->head_dim;
        p->ff[i] = c->intermediate_size;
    }
    p->rope_partial_full = 1.0f;
    return AF_OK;
}

void model_plan_free(lplan *p) {
    free(p->nh);
    free(p->sliding);
}

/* Checks shared by both containers, per layer. */
static af_status check_hparams(const af_model *m, const lplan *pl, const char *label) {
    const af_model_config *c = &m->cfg;
    for (int32_t il = 0; il < c->num_hidden_layers; il++) {
        if (pl->nh[il] < 1 || pl->nkv[il] < 1 || pl->hd[il] < 1 || pl->ff[il] < 1)
            return af_fail(AF_ERR_FORMAT, "%s: layer %d: head count, KV-head count, head_dim and FFN width must be "
                           "positive", label, il);
        if (pl->nh[il] % pl->nkv[il])
            return af_fail(AF_ERR_FORMAT, "%s: layer %d: num_attention_heads %d is not a multiple of "
                           "num_key_value_heads %d", label, il, pl->nh[il], pl->nkv[il]);
        if (pl->hd[il] % 2)
            return af_fail(AF_ERR_FORMAT, "%s: layer %d: head_dim %d must be even for RoPE", label, il, pl->hd[il]);
    }
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return af_fail(AF_ERR_FORMAT, "%s: rms_norm_eps and rope_theta must be positive", label);
    return AF_OK;
}

/* {arch}.{suffix}: an integer for every layer, or an array of one integer per layer (llama.cpp
 * get_key_or_arr), into dst [L]. Absent: dst unchanged when has_def, else an error. */
static af_status get_int_layers(const af_gguf *g, const char *arch, const char *suffix, int64_t lo, int64_t hi,
                                int has_def, int32_t L, int32_t *dst) {
    char k[128];
    akey(k, sizeof k, arch, suffix);
    const af_gguf_value *v = af_gguf_find(g, k);
    if (!v || v->type != AF_GGUF_ARRAY) {
        if (!v && has_def) return AF_OK;
        int32_t x;
        AF_TRY(get_int(g, arch, suffix, lo, hi, 0, 0, &x));
        for (int32_t i = 0; i < L; i++) dst[i] = x;
        return AF_OK;
    }
    if (v->arr_n != (uint64_t)L || v->arr_type == AF_GGUF_STRING || v->arr_type == AF_GGUF_ARRAY ||
        v->arr_type == AF_GGUF_FLOAT32 || v->arr_type == AF_GGUF_FLOAT64)
        return af_fail(AF_ERR_FORMAT, "%s: %s: expected an integer or an array of %d integers (one per layer)", g->path,
                       k, L);
    for (int32_t i = 0; i < L; i++) {
        int64_t x = af_gguf_arr_int(v, (uint64_t)i);
        if (x < lo || x > hi)
            return af_fail(AF_ERR_FORMAT, "%s: %s[%d]: value %lld outside [%lld, %lld]", g->path, k, i, (long long)x,
                           (long long)lo, (long long)hi);
        dst[i] = (int32_t)x;
    }
    return AF_OK;
}

/* {arch}.attention.sliding_window_pattern into sliding [L]: an array of one bool per layer (true =
 * sliding window), or a period n (layer il slides when il % n < n - 1: llama.cpp set_swa_pattern).
 * Absent: AF_ERR_NOT_FOUND (with a message when `required`), sliding unchanged. */
static af_status gguf_pattern(const af_gguf *g, const char *a, int32_t L, uint8_t *sliding, int required) {
    char k[128];
    const af_gguf_value *pv = af_gguf_find(g, akey(k, sizeof k, a, "attention.sliding_window_pattern"));
    if (pv && pv->type == AF_GGUF_ARRAY) {
        if (pv->arr_n != (uint64_t)L || (pv->arr_type != AF_GGUF_BOOL && pv->arr_type != AF_GGUF_UINT8 &&
                                         pv->arr_type != AF_GGUF_INT8 && pv->arr_type != AF_GGUF_UINT32 &&
                                         pv->arr_type != AF_GGUF_INT32))
            return af_fail(AF_ERR_FORMAT, "%s: %s: expected an array of %d booleans (true = sliding layer)", g->path, k,
                           L);
        for (int32_t i = 0; i < L; i++) sliding[i] = af_gguf_arr_int(pv, (uint64_t)i) != 0;
        return AF_OK;
    }
    if (pv) {
        int32_t period;
        AF_TRY(get_int(g, a, "attention.sliding_window_pattern", 1, 1024, 0, 0, &period));
        for (int32_t i = 0; i < L; i++) sliding[i] = i % period < period - 1;
        return AF_OK;
    }
    if (required)
        return af_fail(AF_ERR_NOT_FOUND, "%s: %s: missing (%s needs the sliding/global layer pattern)", g->path, k, a);
    return AF_ERR_NOT_FOUND;
}

/* gemma4's GGUF keys (llama.cpp convert_hf_to_gguf.py Gemma4Model, src/models/gemma4.cpp): the
 * sliding pattern (attention.sliding_window_pattern: a bool per layer, or a period), head sizes of the
 * global (key_length) and sliding (key_length_swa) layers, RoPE dimensions (full only: partial RoPE
 * is expressed by rope_freqs), shared_kv_layers, embedding_length_per_layer_input,
 * final_logit_softcapping. MoE variants (expert_count > 0) are refused. */
static af_status gguf_gemma4(af_model *m, lplan *pl) {
    const af_gguf *g = m->gguf;
    af_model_config *c = &m->cfg;
    af_arch_desc *D = &m->desc;
    const char *a = c->architecture;
    const int32_t L = c->num_hidden_layers;
    char k[128];
    int32_t x;
    AF_TRY(get_int(g, a, "expert_count", 0, INT32_MAX, 1, 0, &x));
    if (x > 0 || af_gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight"))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.expert_count %d: mixture-of-experts Gemma 4 models are not "
                       "supported (dense models only, e.g. E2B/E4B)", g->path, a, x);
    AF_TRY(gguf_pattern(g, a, L, pl->sliding, 1));
    int any_sliding = 0;
    for (int32_t i = 0; i < L; i++) any_sliding |= pl->sliding[i];
    int32_t hd_full = c->head_dim, hd_swa, v_swa, rot_swa, swa = 0;
    AF_TRY(get_int(g, a, "attention.key_length_swa", 1, 4096, 1, hd_full, &hd_swa));
    AF_TRY(get_int(g, a, "attention.value_length_swa", 1, 4096, 1, hd_swa, &v_swa));
    if (v_swa != hd_swa)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.attention.value_length_swa %d != key_length_swa %d", g->path, a,
                       v_swa, hd_swa);
    AF_TRY(get_int(g, a, "rope.dimension_count_swa", 1, 4096, 1, hd_swa, &rot_swa));
    if (rot_swa != hd_swa)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count_swa %d != key_length_swa %d (partial RoPE on "
                       "sliding layers is not supported)", g->path, a, rot_swa, hd_swa);
    for (int32_t i = 0; i < L; i++) pl->hd[i] = pl->sliding[i] ? hd_swa : hd_full;
    if (any_sliding) AF_TRY(get_int(g, a, "attention.sliding_window", 1, INT32_MAX, 0, 0, &swa));
    D->sliding_window = swa;
    AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.freq_base_swa"), 10000.0f, &D->rope_base_swa));
    AF_TRY(get_int(g, a, "attention.shared_kv_layers", 0, L - 1, 1, 0, &D->n_kv_shared));
    AF_TRY(get_int(g, a, "embedding_length_per_layer_input", 0, 1 << 16, 1, 0, &D->ple_dim));
    return AF_OK;
}

af_status model_hparams_gguf(af_model *m, lplan *pl) {
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
                       "%s: general.architecture: '%s' is not supported (supported: llama, gemma3, qwen2, qwen3, gemma4; "
                       "mixture-of-experts variants such as qwen2moe/qwen3moe are not)", g->path, a);
    AF_TRY(get_int(g, a, "embedding_length", 1, 1 << 16, 0, 0, &c->hidden_size));
    AF_TRY(get_int(g, a, "block_count", 1, 1024, 0, 0, &c->num_hidden_layers));
    const int32_t L = c->num_hidden_layers;
    AF_TRY(plan_init(pl, c, g->path));
    AF_TRY(get_int_layers(g, a, "feed_forward_length", 1, 1 << 20, 0, L, pl->ff));
    AF_TRY(get_int_layers(g, a, "attention.head_count", 1, 1024, 0, L, pl->nh));
    memcpy(pl->nkv, pl->nh, sizeof(int32_t) * (size_t)L); /* default: one KV head per head */
    AF_TRY(get_int_layers(g, a, "attention.head_count_kv", 1, 1024, 1, L, pl->nkv));
    c->intermediate_size = pl->ff[0];
    c->num_attention_heads = pl->nh[0];
    c->num_key_value_heads = pl->nkv[0];
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
    for (int32_t i = 0; i < L; i++) pl->hd[i] = c->head_dim;
    AF_TRY(get_int(g, a, "context_length", 1, INT32_MAX, 1, 2048, &c->max_position_embeddings));
    char k[128];
    AF_TRY(af_gguf_get_f32(g, akey(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), &c->rms_norm_eps));
    AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "rope.freq_base"), 10000.0f, &c->rope_theta));
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
        /* the file's pattern key where it has one (llama.cpp load_swa_pattern), else the fixed period */
        af_status ps = gguf_pattern(g, a, L, pl->sliding, 0);
        if (ps == AF_ERR_NOT_FOUND)
            for (int32_t il = 0; il < L; il++) pl->sliding[il] = il % D->swa_period != D->swa_period - 1;
        else if (ps != AF_OK)
            return ps;
    } else if (D->swa_period < 0) {
        AF_TRY(gguf_gemma4(m, pl));
    }
    /* final logit soft-capping (llama.cpp reads it for gemma2/3/4; absent = off) */
    float cap = 0;
    AF_TRY(af_gguf_get_f32_or(g, akey(k, sizeof k, a, "final_logit_softcapping"), 0.0f, &cap));
    if (!(cap >= 0) || !isfinite(cap))
        return af_fail(AF_ERR_FORMAT, "%s: %s: %g is not a non-negative number", g->path, k, (double)cap);
    D->final_logit_softcap = cap;
    c->head_dim = pl->hd[0];
    AF_TRY(check_hparams(m, pl, g->path));
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
af_status model_hparams_hf(af_model *m, const af_hf_config *h, const char *label, lplan *pl) {
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
    AF_TRY(plan_init(pl, c, label));
    const int32_t L = c->num_hidden_layers;
    if (h->layer_head_dim)
        for (int32_t i = 0; i < L; i++) {
            pl->hd[i] = h->layer_head_dim[i];
            pl->nkv[i] = h->layer_kv_heads[i];
            pl->ff[i] = h->layer_ff[i];
        }
    AF_TRY(check_hparams(m, pl, label));
    char where[700];
    snprintf(where, sizeof where, "%.600s: field 'model_type' ('%.31s')", label, h->model_type);
    AF_TRY(set_arch(m, where));
    af_arch_desc *D = &m->desc;
    if (h->attention_bias && !D->qkv_bias)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'attention_bias': attention biases are not supported for %s",
                       label, h->model_type);
    if (h->query_pre_attn_scalar > 0) D->attn_scale = 1.0f / sqrtf(h->query_pre_attn_scalar);
    D->final_logit_softcap = h->final_logit_softcapping;
    if (D->swa_period != 0) { /* the architecture has sliding layers: HF's pattern replaces llama.cpp's rule */
        if (D->swa_period > 0 && h->sliding_window_pattern > 0) D->swa_period = h->sliding_window_pattern;
        D->sliding_window = h->sliding_window;
        D->rope_base_swa = h->rope_theta_swa;
        for (int32_t il = 0; il < L; il++)
            pl->sliding[il] = h->layer_sliding ? h->layer_sliding[il]
                                               : D->swa_period > 0 && il % D->swa_period != D->swa_period - 1;
    }
    if (D->swa_period < 0) { /* gemma4 */
        D->n_kv_shared = h->num_kv_shared_layers;
        D->ple_dim = h->hidden_size_per_layer_input;
        pl->rope_partial_full = h->rope_partial_full;
        pl->v_from_k_global = h->attention_k_eq_v;
    }
    return AF_OK;
}

int model_arch_hf_norm_plus_one(const char *arch) {
    const arch_entry *ae = arch_find(arch);
    return ae && ae->hf_norm_plus_one;
}
