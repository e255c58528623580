/*
 * optim_ops.c — the CPU kernels of the optimizer step: AdamW and global-norm gradient clipping
 * (contracts in kernels/train_ops.h; moved from train/optim.c for the backend table; the
 * learning-rate schedules stay in train/optim.c).
 *
 * Sources: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019); Kingma & Ba,
 * "Adam" (ICLR 2015); the update order and scalar handling of torch.optim.AdamW
 * (_single_tensor_adamw: param *= 1 − lr·wd; exp_avg.lerp_(g, 1 − β1);
 * exp_avg_sq = exp_avg_sq·β2 + (1 − β2)·g·g; denom = sqrt(exp_avg_sq)/sqrt(bc2) + eps;
 * param += −(lr/bc1) · exp_avg / denom) and torch.nn.utils.clip_grad_norm_ (coef =
 * max_norm / (norm + 1e-6), clamped at 1).
 */
#include "kernels/train_ops.h"

#include "kernels/ctx.h"

#include <math.h>
#include <string.h>

/* Elements above which the AdamW loop runs on the context's threads. */
#define ADAMW_PAR_MIN (1 << 15)
#define NORM_LANES 8

void af_adamw_defaults(af_adamw *o, float lr) {
    o->lr = lr;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 0.01f;
    o->t = 0;
}

typedef struct adamw_job {
    float *P, *M, *V;
    const float *G;
    const uint8_t *decay_mask;
    float decay, w1, fb2, w2, neg_step, bc2_sqrt, eps, c;
    int wd_on;
} adamw_job;

/* Elements [i0, i1) of one AdamW step (each element on its own: threads cannot change it). */
static void adamw_range(void *va, int64_t i0, int64_t i1, int tid) {
    const adamw_job *J = va;
    float *P = J->P, *M = J->M, *V = J->V;
    const float *G = J->G;
    const uint8_t *decay_mask = J->decay_mask;
    const float decay = J->decay, w1 = J->w1, fb2 = J->fb2, w2 = J->w2, neg_step = J->neg_step,
                bc2_sqrt = J->bc2_sqrt, eps = J->eps;
    const int wd_on = J->wd_on;
    for (int64_t i = i0; i < i1; i++) {
        float p = P[i];
        const float g = G[i];
        if (wd_on && (!decay_mask || decay_mask[i])) p *= decay;
        float m = M[i];
        m = m + w1 * (g - m);          /* torch lerp for weight < 0.5: self + w·(end − self) */
        float v = V[i] * fb2;
        v = v + w2 * g * g;            /* addcmul: self + value·t1·t2 */
        const float denom = sqrtf(v) / bc2_sqrt + eps;
        p = p + neg_step * m / denom;  /* addcdiv: self + value·t1/t2 */
        M[i] = m;
        V[i] = v;
        P[i] = p;
    }
}

void af_adamw_step(const af_ctx *ctx, af_adamw *o, float *P, const float *G, float *M, float *V, int64_t n, float lr,
                   const uint8_t *decay_mask) {
    o->t++;
    const double t = (double)o->t;
    const double b1 = (double)o->beta1, b2 = (double)o->beta2;
    /* Scalars formed in double, rounded to float once (as torch passes Python floats to float32
     * tensor kernels). */
    const float decay = (float)(1.0 - (double)lr * (double)o->weight_decay);
    const float w1 = (float)(1.0 - b1);            /* lerp weight */
    const float fb2 = o->beta2;
    const float w2 = (float)(1.0 - b2);
    const float neg_step = (float)(-((double)lr / (1.0 - pow(b1, t))));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, t));
    const float eps = o->eps;
    const int wd_on = o->weight_decay != 0.0f;
    adamw_job J = {P, M, V, G, decay_mask, decay, w1, fb2, w2, neg_step, bc2_sqrt, eps, 0.0f, wd_on};
    af_threadpool_run(ctx->pool, n >= ADAMW_PAR_MIN ? ctx->n_threads : 1, n, 0, adamw_range, &J);
}

/* Elements [i0, i1) of P scaled by c (gradient clipping). */
static void scale_range(void *va, int64_t i0, int64_t i1, int tid) {
    const adamw_job *J = va;
    for (int64_t k = i0; k < i1; k++) J->P[k] *= J->c;
}

double af_clip_grad_norm(const af_ctx *ctx, float *G, int64_t n, double max_norm) {
    /* Sequential lanes in double: a fixed summation order (same result for any thread count);
     * double squares cannot overflow for finite floats. */
    double acc[NORM_LANES] = {0};
    int64_t i = 0;
    for (; i + NORM_LANES <= n; i += NORM_LANES)
        for (int j = 0; j < NORM_LANES; j++) acc[j] += (double)G[i + j] * (double)G[i + j];
    double ss = 0.0;
    for (; i < n; i++) ss += (double)G[i] * (double)G[i];
    for (int j = 0; j < NORM_LANES; j++) ss += acc[j];
    const double norm = sqrt(ss);
    if (!isfinite(norm)) return norm;
    if (max_norm > 0.0) {
        const double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) {
            const float c = (float)coef;
            adamw_job J = {.P = G, .c = c};
            af_threadpool_run(ctx->pool, n >= ADAMW_PAR_MIN ? ctx->n_threads : 1, n, 0, scale_range, &J);
        }
    }
    return norm;
}

