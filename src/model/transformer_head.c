/*
 * transformer_head.c — the end of the walk (transformer.h): the final norm (forward and backward),
 * the LM head, and the causal-LM loss computed in chunks of rows so the [n, vocab] logits are never
 * whole (af_lm_head_loss). Kernel calls go through the context's backend table (af_be), as in
 * transformer.c.
 */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/ctx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Training products with fewer rows are computed on a zero-padded copy (transformer.c). */
#define MIN_ROWS AF_TF_MIN_ROWS

/* ---------------------------------------------------------------- final norm, LM head */

static const float *out_norm(const af_ctx *ctx, const af_model *m) {
    return ctx->dev->info.host_memory ? m->output_norm : m->output_norm_dev;
}

void af_tf_final_norm(const af_ctx *ctx, const af_model *m, float *y, float *rstd, const float *x, int64_t n) {
    af_be(ctx)->rmsnorm_forward(ctx, y, rstd, x, out_norm(ctx, m), n, m->cfg.hidden_size, m->cfg.rms_norm_eps);
}

void af_tf_final_norm_backward(const af_ctx *ctx, const af_model *m, float *dx, const float *dy, const float *x, const float *rstd,
                               int64_t n) {
    af_be(ctx)->rmsnorm_backward(ctx, dx, NULL, dy, x, out_norm(ctx, m), rstd, n, m->cfg.hidden_size);
}

void af_lm_head_forward(const af_ctx *ctx, const af_model *m, float *logits, float *x, int64_t n) {
    const af_model_config *c = &m->cfg;
    const af_backend *be = af_be(ctx);
    uint32_t type;
    const void *w = af_weight_dev(ctx, &m->output, &type);
    af_tf_final_norm(ctx, m, x, NULL, x, n);
    if (ctx->int8_act && !(ctx->int8_roles & AF_INT8_HEAD)) { /* mixed decode: the head exact f32 */
        const af_mm_part part = {.y = logits, .x = x, .w = w, .type = type, .n = n, .in = c->hidden_size,
                                 .out = c->vocab_size, .exact = 1};
        be->matmul_xwt_parts(ctx, &part, 1);
    } else
        be->matmul_xwt(ctx, logits, x, w, type, n, c->hidden_size, c->vocab_size, 0);
    const float cap = m->desc.final_logit_softcap;
    if (cap > 0) be->softcap(ctx, logits, n * c->vocab_size, cap);
}

/* ---------------------------------------------------------------- LM head loss (causal LM) */

int64_t af_lm_chunk_rows(const af_model *m) {
    const int64_t v = m->cfg.vocab_size > 0 ? m->cfg.vocab_size : 1;
    int64_t c = ((int64_t)1 << 23) / v;
    return c < MIN_ROWS ? MIN_ROWS : c > 256 ? 256 : c;
}

/* The regions of the LM head scratch, each rounded up to 16 floats (64 bytes): logits [C, V], gathered
 * rows [C, H], their dh [C, H], then per chunk row: its index and target (int32), loss (double) and
 * argmax hit (int32). */
typedef struct lm_scr {
    float *z, *xc, *dc;
    int32_t *idx, *tgt, *hit;
    double *loss;
} lm_scr;

static int64_t r16(int64_t n) { return (n + 15) / 16 * 16; }

static lm_scr lm_scratch(const af_model *m, float *base) {
    const int64_t c = af_lm_chunk_rows(m), V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    lm_scr r;
    r.z = base;
    r.xc = r.z + r16(c * V);
    r.dc = r.xc + r16(c * H);
    r.idx = (int32_t *)(r.dc + r16(c * H));
    r.tgt = (int32_t *)((float *)r.idx + r16(c));
    r.hit = (int32_t *)((float *)r.tgt + r16(c));
    r.loss = (double *)((float *)r.hit + r16(c));
    return r;
}

int64_t af_lm_head_scratch_floats(const af_model *m) {
    const int64_t c = af_lm_chunk_rows(m), V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    return r16(c * V) + 2 * r16(c * H) + 3 * r16(c) + r16(2 * c);
}

void af_lm_head_loss(const af_ctx *ctx, const af_model *m, const float *x, const int32_t *targets, int64_t n,
                     float *hN, float *rstd, float *dx, float grad_scale, float *scratch, af_lm_loss *res) {
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, C = af_lm_chunk_rows(m);
    const float cap = m->desc.final_logit_softcap;
    const int grad = dx != NULL;
    const af_backend *be = af_be(ctx);
    uint32_t type;
    const void *w = af_weight_dev(ctx, &m->output, &type);
    const lm_scr S = lm_scratch(m, scratch);
    double rl[256];
    int32_t rc[256], rows[256], tg[256];
    res->loss_sum = 0;
    res->n_targets = 0;
    res->n_correct = 0;
    af_tf_final_norm(ctx, m, hN, rstd, x, n);
    int64_t i = 0;
    while (i < n) {
        /* up to C target rows, gathered on the device by index */
        int64_t k = 0;
        for (; i < n && k < C; i++)
            if (targets[i] >= 0) {
                rows[k] = (int32_t)i;
                tg[k] = targets[i];
                k++;
            }
        if (k == 0) break;
        if (be->upload(ctx, S.idx, rows, sizeof(int32_t) * (size_t)k) != AF_OK ||
            be->upload(ctx, S.tgt, tg, sizeof(int32_t) * (size_t)k) != AF_OK)
            goto device_error;
        be->rows_gather(ctx, S.xc, hN, S.idx, k, H);
        /* f32-exact for every row count: at least MIN_ROWS rows, the extra ones zero (transformer.c top) */
        const int64_t kk = k < MIN_ROWS ? MIN_ROWS : k;
        if (kk > k) be->fill(ctx, S.xc + k * H, 0.0f, (kk - k) * H);
        be->matmul_xwt(ctx, S.z, S.xc, w, type, kk, H, V, 0);
        be->lm_ce_rows(ctx, S.z, S.tgt, k, V, cap, grad_scale, grad, S.loss, S.hit);
        if (be->download(ctx, rl, S.loss, sizeof(double) * (size_t)k) != AF_OK ||
            be->download(ctx, rc, S.hit, sizeof(int32_t) * (size_t)k) != AF_OK)
            goto device_error;
        for (int64_t j = 0; j < k; j++) {
            res->loss_sum += rl[j];
            res->n_correct += rc[j];
        }
        res->n_targets += k;
        if (!grad) continue;
        if (kk > k) be->fill(ctx, S.z + k * V, 0.0f, (kk - k) * V);
        be->matmul_dyw(ctx, S.dc, S.z, w, type, kk, H, V, 0);
        /* dh of the chunk's rows into hN (rows before i are no longer read by the forward) */
        be->rows_scatter(ctx, hN, S.dc, S.idx, k, H);
    }
    if (!grad) return;
    /* rows without a target: dh = 0 (their hN still holds the normed state), C rows per call */
    for (int64_t r = 0, k = 0; r <= n; r++) {
        if (r < n && targets[r] < 0) rows[k++] = (int32_t)r;
        if (k == C || (r == n && k > 0)) {
            if (be->upload(ctx, S.idx, rows, sizeof(int32_t) * (size_t)k) != AF_OK) goto device_error;
            be->rows_scatter(ctx, hN, NULL, S.idx, k, H);
            k = 0;
        }
    }
    af_tf_final_norm_backward(ctx, m, dx, hN, x, rstd, n);
    return;
device_error: /* the device failed: a NaN loss (the caller skips the step and reads af_device_status) */
    res->loss_sum = NAN;
}

