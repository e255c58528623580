/*
 * forward.c — inference forward pass (prompt batches and single-token decode with a KV cache).
 *
 * llama (llama.cpp src/models/llama.cpp, transformers modeling_llama.py), per layer:
 *   h = rmsnorm(x)·attn_norm;  q,k,v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q), rope(k)
 *   x += attention(q, K, V)·Woᵀ
 *   h = rmsnorm(x)·ffn_norm;   x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
 * gemma3 (llama.cpp src/models/gemma3.cpp, modeling_gemma3.py) adds: x0 = embd·sqrt(hidden),
 *   per-head rmsnorm of q and k (q_norm, k_norm) before RoPE, sandwich post-norms on both branch
 *   outputs (post_attention_norm, post_ffw_norm) before the residual add, GeGLU (tanh GELU),
 *   sliding-window attention on 5 of every 6 layers with their own RoPE base.
 */
#include "model/model.h"

#include "core/threads.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

af_status af_fwd_scratch_init(af_fwd_scratch *s, const af_model *m, int64_t cap) {
    const af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, F = c->intermediate_size;
    const int64_t qd = (int64_t)c->num_attention_heads * c->head_dim;
    const int64_t kvd = (int64_t)c->num_key_value_heads * c->head_dim;
    memset(s, 0, sizeof *s);
    s->cap = cap;
    const int64_t hq = H > qd ? H : qd;
    s->x = af_malloc_aligned(sizeof(float) * (size_t)(cap * H));
    s->h = af_malloc_aligned(sizeof(float) * (size_t)(cap * hq));
    s->q = af_malloc_aligned(sizeof(float) * (size_t)(cap * qd));
    s->k = af_malloc_aligned(sizeof(float) * (size_t)(cap * kvd));
    s->v = af_malloc_aligned(sizeof(float) * (size_t)(cap * kvd));
    s->o = af_malloc_aligned(sizeof(float) * (size_t)(cap * H));
    s->g = af_malloc_aligned(sizeof(float) * (size_t)(cap * F));
    s->u = af_malloc_aligned(sizeof(float) * (size_t)(cap * F));
    s->pos = af_malloc(sizeof(int32_t) * (size_t)cap);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->o || !s->g || !s->u || !s->pos) {
        af_fwd_scratch_free(s);
        return af_fail(AF_ERR_NOMEM, "out of memory for forward scratch (%lld tokens)", (long long)cap);
    }
    return AF_OK;
}

void af_fwd_scratch_free(af_fwd_scratch *s) {
    af_free_aligned(s->x);
    af_free_aligned(s->h);
    af_free_aligned(s->q);
    af_free_aligned(s->k);
    af_free_aligned(s->v);
    af_free_aligned(s->o);
    af_free_aligned(s->g);
    af_free_aligned(s->u);
    free(s->pos);
    memset(s, 0, sizeof *s);
}

void af_forward_tokens(const af_model *m, af_fwd_scratch *s, const int32_t *tokens, int64_t n, int64_t n_past,
                       float *k_cache, float *v_cache, int64_t n_ctx) {
    const af_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const float eps = c->rms_norm_eps;

    for (int64_t t = 0; t < n; t++) {
        af_weight_row(&m->tok_embd, tokens[t], s->x + t * H);
        if (m->embd_scale != 1.0f)
            for (int64_t i = 0; i < H; i++) s->x[t * H + i] *= m->embd_scale;
        s->pos[t] = (int32_t)(n_past + t);
    }
    for (int il = 0; il < c->num_hidden_layers; il++) {
        const af_layer *L = &m->layers[il];
        float *kc = k_cache + (size_t)il * (size_t)n_ctx * (size_t)kvd;
        float *vc = v_cache + (size_t)il * (size_t)n_ctx * (size_t)kvd;
        /* attention block */
        af_rmsnorm_forward(m->ctx, s->h, NULL, s->x, L->attn_norm, n, H, eps);
        af_matmul_xwt(m->ctx, s->q, s->h, L->wq.data, L->wq.type, n, H, qd, 0);
        af_matmul_xwt(m->ctx, s->k, s->h, L->wk.data, L->wk.type, n, H, kvd, 0);
        af_matmul_xwt(m->ctx, s->v, s->h, L->wv.data, L->wv.type, n, H, kvd, 0);
        if (L->q_norm) af_rmsnorm_forward(m->ctx, s->q, NULL, s->q, L->q_norm, n * nh, hd, eps);
        if (L->k_norm) af_rmsnorm_forward(m->ctx, s->k, NULL, s->k, L->k_norm, n * nkv, hd, eps);
        af_rope_forward(m->ctx, s->q, s->pos, n, nh, hd, L->rope_base, m->rope_neox);
        af_rope_forward(m->ctx, s->k, s->pos, n, nkv, hd, L->rope_base, m->rope_neox);
        memcpy(kc + (size_t)n_past * (size_t)kvd, s->k, sizeof(float) * (size_t)(n * kvd));
        memcpy(vc + (size_t)n_past * (size_t)kvd, s->v, sizeof(float) * (size_t)(n * kvd));
        af_attention_forward(m->ctx, s->h, NULL, s->q, kc, vc, n, n_past, n_past + n, kvd, nh, nkv, hd, m->attn_scale,
                             L->window);
        af_matmul_xwt(m->ctx, s->o, s->h, L->wo.data, L->wo.type, n, qd, H, 0);
        if (L->post_attn_norm) af_rmsnorm_forward(m->ctx, s->o, NULL, s->o, L->post_attn_norm, n, H, eps);
        af_add(s->x, s->x, s->o, n * H);
        /* feed-forward block */
        af_rmsnorm_forward(m->ctx, s->h, NULL, s->x, L->ffn_norm, n, H, eps);
        af_matmul_xwt(m->ctx, s->g, s->h, L->w_gate.data, L->w_gate.type, n, H, F, 0);
        af_matmul_xwt(m->ctx, s->u, s->h, L->w_up.data, L->w_up.type, n, H, F, 0);
        if (m->act_gelu) af_geglu_forward(m->ctx, s->g, s->g, s->u, n * F);
        else af_swiglu_forward(m->ctx, s->g, s->g, s->u, n * F);
        af_matmul_xwt(m->ctx, s->o, s->g, L->w_down.data, L->w_down.type, n, F, H, 0);
        if (L->post_ffw_norm) af_rmsnorm_forward(m->ctx, s->o, NULL, s->o, L->post_ffw_norm, n, H, eps);
        af_add(s->x, s->x, s->o, n * H);
    }
}

void af_forward_logits(const af_model *m, float *logits, float *x, int64_t n) {
    const af_model_config *c = &m->cfg;
    af_rmsnorm_forward(m->ctx, x, NULL, x, m->output_norm, n, c->hidden_size, c->rms_norm_eps);
    af_matmul_xwt(m->ctx, logits, x, m->output.data, m->output.type, n, c->hidden_size, c->vocab_size, 0);
}
