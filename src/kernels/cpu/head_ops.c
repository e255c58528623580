/*
 * head_ops.c — the CPU kernels of the classification head: pooling, linear head and its losses
 * (contracts and formulas in kernels/train_ops.h; moved from train/head.c for the backend table).
 *
 * Sizes are small (B <= 64, C <= 64, H <= 4096), so everything is plain loops written so that
 * the compiler vectorises the H dimension without -ffast-math:
 *   - dot products accumulate into DOT_LANES independent float lanes (an element-wise loop the
 *     vectoriser handles), reduced in double at the end;
 *   - the mean pooling sums into a double chunk buffer, element-wise over H;
 *   - the backward passes are axpy loops over H.
 * Every output element is owned by one loop iteration, so the optional threaded loops give the same
 * bits for any thread count.
 *
 * Formula sources: softmax cross-entropy and its gradient (softmax − onehot), e.g. Goodfellow,
 * Bengio & Courville, "Deep Learning" §6.2.2.3; the stable BCE-with-logits form
 * max(x,0) − x·t + log(1 + e^−|x|) as in PyTorch's BCEWithLogitsLoss documentation.
 */
#include "kernels/train_ops.h"

#include "kernels/ctx.h"

#include <math.h>
#include <string.h>

#define DOT_LANES 16
#define POOL_CHUNK 512
/* Work (multiply-adds) above which the head loops use the context's threads. */
#define HEAD_PAR_WORK (1 << 20)

/* Σ a[i]·b[i] over n floats: float lanes (vectorisable), reduced in double. */
static double dot_f32(const float *a, const float *b, int64_t n) {
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += a[i + j] * b[i + j];
    double s = 0.0;
    for (; i < n; i++) s += (double)a[i] * (double)b[i];
    for (int j = 0; j < DOT_LANES; j++) s += (double)acc[j];
    return s;
}

/* y[i] += a·x[i] over n floats (blocks of a fixed DOT_LANES, which GCC vectorises even under the
 * -O2 "very cheap" cost model that skips loops of unknown trip count). */
static void axpy_f32(float *restrict y, float a, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) y[i + j] += a * x[i + j];
    for (; i < n; i++) y[i] += a * x[i];
}

/* acc[j] += (double)x[j] over n elements (same blocking as axpy_f32). */
static void acc_f64(double *restrict acc, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[i + j] += (double)x[i + j];
    for (; i < n; i++) acc[i] += (double)x[i];
}

void af_pool_forward(float *pooled, const float *hidden, const int32_t *seq_start, int32_t B, int64_t H,
                     af_head_pooling pool) {
    for (int32_t b = 0; b < B; b++) {
        const int64_t s = seq_start[b], e = seq_start[b + 1], len = e - s;
        float *out = pooled + (int64_t)b * H;
        if (len <= 0) { /* invalid sample (the caller validates): defined output instead of garbage */
            memset(out, 0, (size_t)H * sizeof *out);
            continue;
        }
        if (pool == AF_POOLING_LAST || len == 1) {
            memcpy(out, hidden + (e - 1) * H, (size_t)H * sizeof *out);
            continue;
        }
        for (int64_t h0 = 0; h0 < H; h0 += POOL_CHUNK) {
            const int64_t hn = H - h0 < POOL_CHUNK ? H - h0 : POOL_CHUNK;
            double acc[POOL_CHUNK];
            for (int64_t j = 0; j < hn; j++) acc[j] = 0.0;
            for (int64_t t = s; t < e; t++) acc_f64(acc, hidden + t * H + h0, hn);
            const double dl = (double)len;
            for (int64_t j = 0; j < hn; j++) out[h0 + j] = (float)(acc[j] / dl);
        }
    }
}

void af_pool_backward(float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B, int64_t H,
                      af_head_pooling pool) {
    for (int32_t b = 0; b < B; b++) {
        const int64_t s = seq_start[b], e = seq_start[b + 1], len = e - s;
        const float *g = d_pooled + (int64_t)b * H;
        if (len <= 0) continue;
        if (pool == AF_POOLING_LAST || len == 1) {
            axpy_f32(d_hidden + (e - 1) * H, 1.0f, g, H);
            continue;
        }
        const float inv = (float)(1.0 / (double)len);
        for (int64_t t = s; t < e; t++) axpy_f32(d_hidden + t * H, inv, g, H);
    }
}

typedef struct head_job {
    float *out;
    const float *pooled, *W, *bias, *d_logits;
    int32_t B, C;
    int64_t H;
} head_job;

/* logits[k] for k in [k0, k1) (k = b·C + c). */
static void head_fwd_range(void *va, int64_t k0, int64_t k1, int tid) {
    const head_job *J = va;
    const int64_t H = J->H, C = J->C;
    for (int64_t k = k0; k < k1; k++) {
        const int64_t b = k / C, c = k % C;
        double v = dot_f32(J->pooled + b * H, J->W + c * H, H);
        if (J->bias) v += (double)J->bias[c];
        J->out[k] = (float)v;
    }
}

/* dW rows c in [c0, c1): dW[c, :] += Σ_b d_logits[b, c] · pooled[b, :] (b in order). */
static void head_dw_range(void *va, int64_t c0, int64_t c1, int tid) {
    const head_job *J = va;
    const int64_t H = J->H, C = J->C;
    for (int64_t c = c0; c < c1; c++)
        for (int32_t b = 0; b < J->B; b++) axpy_f32(J->out + c * H, J->d_logits[b * C + c], J->pooled + b * H, H);
}

/* d_pooled rows b in [b0, b1): d_pooled[b, :] += Σ_c d_logits[b, c] · W[c, :] (c in order). */
static void head_dp_range(void *va, int64_t b0, int64_t b1, int tid) {
    const head_job *J = va;
    const int64_t H = J->H, C = J->C;
    for (int64_t b = b0; b < b1; b++)
        for (int32_t c = 0; c < J->C; c++) axpy_f32(J->out + b * H, J->d_logits[b * C + c], J->W + c * H, H);
}

void af_head_forward(const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias, int32_t B, int64_t H,
                     int32_t C) {
    const int64_t nbc = (int64_t)B * C;
    const int big = (double)nbc * (double)H > HEAD_PAR_WORK;
    head_job J = {.out = logits, .pooled = pooled, .W = W, .bias = bias, .B = B, .C = C, .H = H};
    af_threadpool_run(ctx->pool, big ? ctx->n_threads : 1, nbc, 0, head_fwd_range, &J);
}

void af_head_backward(const af_ctx *ctx, float *d_pooled, float *dW, float *dbias, const float *d_logits, const float *pooled,
                      const float *W, int32_t B, int64_t H, int32_t C) {
    const int big = (double)B * (double)C * (double)H > HEAD_PAR_WORK;
    if (dbias) {
        for (int32_t c = 0; c < C; c++) {
            double s = 0.0;
            for (int32_t b = 0; b < B; b++) s += (double)d_logits[(int64_t)b * C + c];
            dbias[c] += (float)s;
        }
    }
    /* row c of dW, row b of d_pooled owned by one thread */
    head_job J = {.out = dW, .pooled = pooled, .W = W, .d_logits = d_logits, .B = B, .C = C, .H = H};
    af_threadpool_run(ctx->pool, big ? ctx->n_threads : 1, C, 0, head_dw_range, &J);
    if (!d_pooled) return;
    J.out = d_pooled;
    af_threadpool_run(ctx->pool, big ? ctx->n_threads : 1, B, 0, head_dp_range, &J);
}

double af_ce_loss(float *d_logits, float *probs, const float *logits, const int32_t *labels, const float *class_w,
                  int32_t B, int32_t C) {
    if (B <= 0) return 0.0;
    const double invB = 1.0 / (double)B;
    double total = 0.0;
    for (int32_t b = 0; b < B; b++) {
        const float *x = logits + (int64_t)b * C;
        float *d = d_logits + (int64_t)b * C;
        float *p = probs ? probs + (int64_t)b * C : NULL;
        const int32_t y = labels[b];
        /* log softmax(x)_c = x_c − m − log Σ_k e^(x_k − m), m = max_k x_k (every exponent <= 0) */
        double m = -INFINITY;
        for (int32_t c = 0; c < C; c++)
            if ((double)x[c] > m) m = (double)x[c];
        double z = 0.0;
        for (int32_t c = 0; c < C; c++) z += exp((double)x[c] - m);
        const double logz = log(z);
        if (y < 0 || y >= C) {
            total = NAN;
            memset(d, 0, (size_t)C * sizeof *d);
            if (p)
                for (int32_t c = 0; c < C; c++) p[c] = (float)exp((double)x[c] - m - logz);
            continue;
        }
        const double w = class_w ? (double)class_w[y] : 1.0;
        total += -w * ((double)x[y] - m - logz);
        const double gs = w * invB;
        for (int32_t c = 0; c < C; c++) {
            const double pc = exp((double)x[c] - m - logz);
            if (p) p[c] = (float)pc;
            d[c] = (float)(gs * (pc - (c == y ? 1.0 : 0.0)));
        }
    }
    return total * invB;
}

double af_bce_loss(float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C) {
    const int64_t n = (int64_t)B * C;
    if (n <= 0) return 0.0;
    const double invn = 1.0 / (double)n;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)logits[i], t = (double)targets[i];
        const double ax = fabs(x);
        /* log(1 + e^−|x|) with log1p for accuracy when e^−|x| is tiny */
        total += (x > 0 ? x : 0.0) - x * t + log1p(exp(-ax));
        /* stable sigmoid: never exponentiates a positive number */
        const double en = exp(-ax);
        const double sig = x >= 0 ? 1.0 / (1.0 + en) : en / (1.0 + en);
        d_logits[i] = (float)((sig - t) * invn);
    }
    return total * invn;
}
