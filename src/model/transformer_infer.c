/*
 * transformer_infer.c — the inference state of the walk (transformer.h af_tf_infer): its buffers
 * and KV cache carved once, and the forward over new tokens (one sequence or several) through the
 * layers of transformer.c, stopping at a layer boundary when the caller's control asks.
 */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/ctx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- inference state */

static void infer_plan(af_carver *cv, af_tf_infer *s, const af_model *m, const af_param_layout *lay, int64_t cap) {
    s->x = af_carve(cv, cap * m->cfg.hidden_size);
    s->pos = (int32_t *)af_carve(cv, cap);
    s->tok = (int32_t *)af_carve(cv, cap);
    s->ple = m->desc.ple_dim > 0 ? af_carve(cv, cap * m->cfg.num_hidden_layers * m->desc.ple_dim) : NULL;
    af_tf_carve_acts(cv, &s->S, m, lay, cap, AF_TF_INFER, 0);
    af_tf_carve_scratch(cv, &s->w, m, lay, cap, AF_TF_INFER, 0);
}

af_status af_tf_infer_init(af_tf_infer *s, const af_ctx *ctx, const af_model *m, const af_param_layout *lay,
                           int64_t cap) {
    memset(s, 0, sizeof *s);
    af_carver cv;
    af_carver_count(&cv, ctx->dev->info.max_alloc == UINT64_MAX ? 0 : (size_t)ctx->dev->info.max_alloc);
    infer_plan(&cv, s, m, lay, cap);
    s->pos_host = af_malloc(sizeof(int32_t) * (size_t)cap);
    af_status st = s->pos_host ? af_carver_alloc(&cv, ctx, &s->mem)
                               : af_fail(AF_ERR_NOMEM, "out of memory for forward scratch (%lld tokens)", (long long)cap);
    if (st != AF_OK) {
        af_carver_done(&cv);
        free(s->pos_host);
        s->pos_host = NULL;
        return st;
    }
    infer_plan(&cv, s, m, lay, cap);
    s->cap = cap;
    if (lay && lay->lora.use_dora) { /* the norms of a DoRA adapter depend on P only: kept across calls */
        for (int64_t k = 0; k < (int64_t)lay->n_layers * AF_PROJ_COUNT; k++)
            if (lay->slots[k].a_off >= 0 && lay->slots[k].out > s->dora_stride) s->dora_stride = lay->slots[k].out;
        const size_t nk = (size_t)lay->n_layers * AF_PROJ_COUNT;
        s->dora_nrm = af_malloc(sizeof(float) * nk * (size_t)(s->dora_stride > 0 ? s->dora_stride : 1));
        s->dora_ok = af_calloc(nk, 1);
        if (!s->dora_nrm || !s->dora_ok) {
            af_tf_infer_free(s);
            return af_fail(AF_ERR_NOMEM, "out of memory for the DoRA norms");
        }
    }
    return AF_OK;
}

void af_tf_infer_free(af_tf_infer *s) {
    af_devmem_free(&s->mem);
    free(s->pos_host);
    free(s->dora_nrm);
    free(s->dora_ok);
    memset(s, 0, sizeof *s);
}

static int cancelled(const af_tf_control *ctl) {
    for (int32_t i = 0; ctl && i < ctl->n_flags; i++)
        if (ctl->flags[i] && *ctl->flags[i]) return 1;
    return 0;
}

/* The inference run shared by the one- and the multi-sequence forward, and their layer loop
 * (embedding of the call's tokens, then every layer, the cancel flags read before each). */
static af_tf_run infer_run(const af_ctx *ctx, const af_model *m, af_tf_infer *s) {
    af_tf_run R;
    memset(&R, 0, sizeof R);
    R.ctx = ctx;
    R.m = m;
    R.mode = AF_TF_INFER;
    R.pos = s->pos;
    R.ws = &s->w;
    return R;
}

/* tokens: host ids of the call's R->n rows; s->pos_host holds their positions (both uploaded here). */
static af_status infer_walk(af_tf_run *R, af_tf_infer *s, const int32_t *tokens, const af_tf_control *ctl) {
    const af_backend *be = af_be(R->ctx);
    AF_TRY(be->upload(R->ctx, s->tok, tokens, sizeof(int32_t) * (size_t)R->n));
    AF_TRY(be->upload(R->ctx, s->pos, s->pos_host, sizeof(int32_t) * (size_t)R->n));
    af_tf_embed(R->ctx, R->m, s->tok, R->n, s->x);
    if (R->m->desc.ple_dim > 0) {
        af_tf_ple_inputs(R, s->tok, s->x, s->ple);
        R->ple = s->ple;
    }
    for (int32_t l = 0; l < R->m->cfg.num_hidden_layers; l++) {
        if (cancelled(ctl)) return af_fail(AF_ERR_CANCELLED, "cancelled before layer %d", l);
        af_tf_layer_forward(R, l, &s->S, s->x, s->x);
    }
    return AF_OK;
}

af_status af_tf_infer_forward(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const float *P,
                              const af_param_layout *lay, float scale, const int32_t *tokens, int64_t n,
                              int64_t n_past, float *const *k_cache, float *const *v_cache, int64_t n_ctx,
                              const af_tf_control *ctl) {
    af_tf_run R = infer_run(ctx, m, s);
    R.n = n;
    R.P = P;
    R.lay = P ? lay : NULL;
    R.lora_scale = scale;
    R.dora_cache = P && lay && lay->lora.use_dora && s->dora_nrm && lay->n_layers == m->cfg.num_hidden_layers ? s : NULL;
    R.k_cache = k_cache;
    R.v_cache = v_cache;
    R.n_ctx = n_ctx;
    R.n_past = n_past;
    for (int64_t t = 0; t < n; t++) s->pos_host[t] = (int32_t)(n_past + t);
    return infer_walk(&R, s, tokens, ctl);
}

af_status af_tf_infer_forward_multi(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const af_tf_seq *seq,
                                    int32_t n_seq, const int32_t *tokens, float *xa, const af_tf_control *ctl) {
    af_tf_run R = infer_run(ctx, m, s);
    R.seq = seq;
    R.n_seq = n_seq;
    R.xa = xa;
    /* one sequence with one DoRA adapter: the single-adapter walk (DoRA's norm is not a correction the
     * multi-sequence mode adds; the session re-made its forward state for that layout) */
    if (n_seq == 1 && seq[0].n_lora == 1 && seq[0].lora[0].P && seq[0].lora[0].lay && seq[0].lora[0].lay->lora.use_dora)
        return af_tf_infer_forward(ctx, m, s, seq[0].lora[0].P, seq[0].lora[0].lay, seq[0].lora[0].scale, tokens, seq[0].n,
                                   seq[0].n_past, seq[0].k_cache, seq[0].v_cache, seq[0].n_ctx, ctl);
    for (int32_t i = 0; i < n_seq; i++)
        for (int32_t k = 0; k < seq[i].n_lora; k++)
            if (seq[i].lora[k].P && seq[i].lora[k].lay && seq[i].lora[k].lay->lora.use_dora)
                return af_fail(AF_ERR_UNSUPPORTED, "a DoRA adapter is not applied in a batch of sequences (merge it into "
                                                   "the model with `afinar merge`)");
    for (int32_t i = 0; i < n_seq; i++) {
        for (int64_t t = 0; t < seq[i].n; t++) s->pos_host[R.n + t] = (int32_t)(seq[i].n_past + t);
        R.n += seq[i].n;
    }
    return infer_walk(&R, s, tokens, ctl);
}
