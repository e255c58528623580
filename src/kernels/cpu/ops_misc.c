/*
 * ops_misc.c — CPU kernels of the loops that model and training code ran on the host before the
 * backend table: scale, bias add, embedding gather, soft-cap, row gather/scatter, the
 * non-finite count, the LM-head loss rows, and the token-blocked training product (moved from
 * model/transformer.c mm_blocks). Contracts: kernels/ops.h and kernels/matmul.h. Each loop is the
 * code it replaces, so results are the same bits.
 */
#include "kernels/ops.h"

#include "core/blocks.h"
#include "core/threadpool.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

void af_scale(const af_ctx *ctx, float *x, float s, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void af_add_bias(const af_ctx *ctx, float *y, const float *b, int64_t n, int64_t out) {
    (void)ctx;
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < out; j++) y[t * out + j] += b[j];
}

void af_embed(const af_ctx *ctx, float *x, const int32_t *tokens, int64_t n, const void *w, uint32_t type, int64_t H,
              float scale) {
    (void)ctx;
    const size_t rb = af_row_bytes(type, H);
    for (int64_t t = 0; t < n; t++) {
        float *row = x + t * H;
        af_dequantize_row(type, (const char *)w + (size_t)tokens[t] * rb, row, H);
        if (scale != 1.0f)
            for (int64_t i = 0; i < H; i++) row[i] *= scale;
    }
}

void af_softcap(const af_ctx *ctx, float *x, int64_t n, float c) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

void af_rows_gather(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W) {
    (void)ctx;
    for (int64_t j = 0; j < k; j++) memcpy(dst + j * W, src + (int64_t)idx[j] * W, sizeof(float) * (size_t)W);
}

void af_rows_scatter(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W) {
    (void)ctx;
    for (int64_t j = 0; j < k; j++) {
        float *d = dst + (int64_t)idx[j] * W;
        if (src) memcpy(d, src + j * W, sizeof(float) * (size_t)W);
        else memset(d, 0, sizeof(float) * (size_t)W);
    }
}

int64_t af_count_nonfinite(const af_ctx *ctx, const float *x, int64_t n) {
    (void)ctx;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += !isfinite(x[i]);
    return c;
}

/* ---------------------------------------------------------------- LM-head loss rows */

/* Forward: z [V] in place = softcap(z); returns loss = lse(z) − z[t] and whether argmax == t.
 * With grad: z becomes grad_scale·(softmax − onehot)·softcap'. */
static double lm_row(float *z, int64_t V, int32_t t, float cap, float gs, int grad, int32_t *correct) {
    if (cap > 0)
        for (int64_t v = 0; v < V; v++) z[v] = cap * tanhf(z[v] / cap);
    int64_t am = 0;
    float mx = z[0];
    for (int64_t v = 1; v < V; v++)
        if (z[v] > mx) {
            mx = z[v];
            am = v;
        }
    *correct = am == t;
    double s = 0;
    for (int64_t v = 0; v < V; v++) s += exp((double)(z[v] - mx));
    const double lse = (double)mx + log(s);
    const double loss = lse - (double)z[t];
    if (grad) {
        for (int64_t v = 0; v < V; v++) {
            const float zv = z[v];
            float g = (float)exp((double)zv - lse);
            if (v == t) g -= 1.0f;
            g *= gs;
            if (cap > 0) {
                const float th = zv / cap;
                g *= 1.0f - th * th;
            }
            z[v] = g;
        }
    }
    return loss;
}

/* rows [i0, i1) of a logits chunk: loss, gradient in place, argmax hit (one row per index, so the
 * results do not depend on the team) */
typedef struct lm_rows_job {
    float *z;
    int64_t V;
    const int32_t *tgt;
    float cap, grad_scale;
    int grad;
    double *loss;
    int32_t *correct;
} lm_rows_job;

static void lm_rows_run(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const lm_rows_job *J = arg;
    for (int64_t j = i0; j < i1; j++)
        J->loss[j] = lm_row(J->z + j * J->V, J->V, J->tgt[j], J->cap, J->grad_scale, J->grad, &J->correct[j]);
}

void af_lm_ce_rows(const af_ctx *ctx, float *z, const int32_t *tgt, int64_t k, int64_t V, float cap, float grad_scale,
                   int grad, double *loss, int32_t *correct) {
    lm_rows_job J = {z, V, tgt, cap, grad_scale, grad, loss, correct};
    af_threadpool_run(ctx->pool, k > 1 ? ctx->n_threads : 1, k, 0, lm_rows_run, &J);
}

/* ---------------------------------------------------------------- token-blocked training product */

/* Threads for a block-parallel product: the context's when the call is not itself inside a pool
 * job (the kernel calls inside the blocks then run single-threaded: nested calls are serial),
 * else 1 (blocks are then run one after the other). */
static int block_threads(const af_ctx *ctx) { return af_threadpool_in_job() ? 1 : ctx->n_threads; }

typedef struct blocks_job {
    const af_ctx *ctx;
    int dyw, accumulate;
    float *y;
    const float *x;
    const void *w;
    uint32_t type;
    int64_t n, nb, xw, yw;
} blocks_job;

/* Row blocks [b0, b1) of af_matmul_rows, one kernel call each. */
static void blocks_run(void *va, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const blocks_job *J = va;
    const int64_t n = J->n, nb = J->nb, xw = J->xw, yw = J->yw;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t t0 = n * b / nb, m = n * (b + 1) / nb - t0;
        if (J->dyw) af_matmul_dyw(J->ctx, J->y + t0 * yw, J->x + t0 * xw, J->w, J->type, m, yw, xw, J->accumulate);
        else af_matmul_xwt(J->ctx, J->y + t0 * yw, J->x + t0 * xw, J->w, J->type, m, xw, yw, J->accumulate);
    }
}

void af_matmul_rows(const af_ctx *ctx, int dyw, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                    int64_t in, int64_t out, int accumulate, int64_t block_rows) {
    const int64_t xw = dyw ? out : in, yw = dyw ? in : out;
    /* the packed GEMM blocks rows and threads by itself and packs W once per call: one call */
    const int64_t br = af_matmul_packed_path(ctx, n, xw, yw) ? 0 : block_rows;
    int64_t nb = br > 0 ? (n + br / 2) / br : 1;
    const int nth = nb >= 2 ? block_threads(ctx) : 1;
    if (nth > 1 && nb >= nth) nb = (nb + nth - 1) / nth * nth; /* equal shares */
    if (nb < 2) {
        if (dyw) af_matmul_dyw(ctx, y, x, w, type, n, in, out, accumulate);
        else af_matmul_xwt(ctx, y, x, w, type, n, in, out, accumulate);
        return;
    }
    const int par = nth > 1 && nb >= nth;
    blocks_job J = {ctx, dyw, accumulate, y, x, w, type, n, nb, xw, yw};
    af_threadpool_run(ctx->pool, par ? nth : 1, nb, 1, blocks_run, &J);
}
