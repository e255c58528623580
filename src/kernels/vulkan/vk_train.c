/*
 * vk_train.c — the training ops of the Vulkan backend (vk.h): LoRA forward/backward and dropout
 * masks (lora.h), pooling, the linear head and the classification losses (head.h), the LM-head loss
 * rows (transformer.c), AdamW and gradient-norm clipping (optim.h). The LoRA products are the
 * general product of vk_matmul.c with the operand transforms that reproduce lora.c's roundings.
 */
#include "kernels/vulkan/vk_ops.h"

#include "core/blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- LoRA */

static vk_mm mm_dense(float *c, const float *a, const float *b, int64_t M, int64_t N, int64_t K, int64_t sam,
                      int64_t sak, int64_t sbk, int64_t sbn, int64_t ldc, int accumulate) {
    vk_mm q;
    memset(&q, 0, sizeof q);
    q.c = c, q.a = a, q.b = b, q.type = AF_TYPE_F32, q.mode = 2;
    q.M = M, q.N = N, q.K = K, q.sam = sam, q.sak = sak, q.sbk = sbk, q.sbn = sbn, q.ldc = ldc;
    q.alpha_a = q.alpha_b = q.alpha_c = 1.0f;
    q.accumulate = accumulate;
    return q;
}

void af_vk_lora_forward(af_vk_dev *d, float *y, float *xa, const float *x, const float *drop_mask, const float *A,
                        const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale) {
    const char *op = "lora_forward";
    int64_t sz[4] = {n, in, out, r};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 4, sz) && n > 0) {
        if (!drop_mask) vk_matmul_xwt(d, op, xa, x, A, AF_TYPE_F32, n, in, r, 0, 1.0f); /* xa = x·Aᵀ */
        else { /* xa = (x ⊙ mask)·Aᵀ, the product x·mask rounded first as lora.c does */
            vk_mm q = mm_dense(xa, x, A, n, r, in, in, 1, 1, in, r, 0);
            q.am = drop_mask;
            vk_mm_run(d, op, &q);
        }
        vk_matmul_xwt(d, op, y, xa, B, AF_TYPE_F32, n, r, out, 1, scale); /* y += (scale·xa)·Bᵀ */
    }
    vk_leave(d);
}

void af_vk_lora_backward(af_vk_dev *d, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x,
                         const float *xa, const float *drop_mask, const float *A, const float *B, int64_t n,
                         int64_t in, int64_t out, int32_t r, float scale) {
    const char *op = "lora_backward";
    int64_t sz[4] = {n, in, out, r};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 4, sz) && n > 0) {
        float *t = tmp; /* [n, r] */
        /* dB[out, r] += dyᵀ·(scale·xa) */
        vk_mm q = mm_dense(dB, dy, xa, out, r, n, 1, out, r, 1, r, 1);
        q.alpha_b = scale;
        vk_mm_run(d, op, &q);
        /* t = (dy·B)·scale */
        q = mm_dense(t, dy, B, n, r, out, out, 1, r, 1, r, 0);
        q.alpha_c = scale;
        vk_mm_run(d, op, &q);
        /* dA[r, in] += tᵀ·(x ⊙ mask) */
        q = mm_dense(dA, t, x, r, in, n, 1, r, in, 1, in, 1);
        q.bm = drop_mask;
        vk_mm_run(d, op, &q);
        /* dx[n, in] += (t·A) ⊙ mask */
        if (dx) {
            q = mm_dense(dx, t, A, n, in, r, r, 1, in, 1, in, 1);
            q.cm = drop_mask;
            vk_mm_run(d, op, &q);
        }
    }
    vk_leave(d);
}

/* af_ctr_key's first three mixing steps (lora.c), on the host: the shader finishes the key per row. */
static uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

typedef struct drop_push {
    uint32_t off[8];
    uint32_t n, in;
    uint32_t h3[2], t0p1[2];
    float p, keep;
} drop_push;

void af_vk_lora_dropout_mask(af_vk_dev *d, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0,
                             int64_t n, int64_t in, float p) {
    const char *op = "lora_dropout_mask";
    int64_t sz[2] = {n, in};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz) && n > 0 && in > 0) {
        uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
        h = mix64(h ^ ((uint64_t)layer * 0xd1b54a32d192ed03ULL + 1));
        h = mix64(h ^ ((uint64_t)proj * 0xaef17502108ef2d9ULL + 2));
        const uint64_t c = (uint64_t)(t0 + 1);
        drop_push q = {{0}, (uint32_t)n, (uint32_t)in, {(uint32_t)h, (uint32_t)(h >> 32)},
                       {(uint32_t)c, (uint32_t)(c >> 32)}, p, 1.0f / (1.0f - p)};
        if ((uint64_t)n * in > 0xFFFFFFFFu || vk_fit(d, mask) < 4 * (uint64_t)n * in)
            if (!vk_not_device(d, op, 1, mask)) vk_fail(d, AF_ERR_UNSUPPORTED, "%s: a [%lld, %lld] mask longer than a buffer window", op, (long long)n,
                    (long long)in);
        vk_arg a[1] = {{mask, 4 * (uint64_t)n * in, 1}};
        uint64_t groups = vk_div((uint64_t)n * in, 256);
        if (groups > 65535u * 4) groups = 65535u * 4;
        uint32_t gx, gy;
        vk_grid(groups, &gx, &gy);
        vk_dispatch(d, op, AF_VKS_DROPOUT, NULL, a, 1, &q, sizeof q, gx, gy, 1);
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- pooling and the head */

typedef struct pool_push {
    uint32_t off[8];
    uint32_t B, H, last, bwd;
} pool_push;

/* Everything bindable from p: the token rows of a pooling depend on seq_start (device data). */
static uint64_t reach(af_vk_dev *d, const void *p) {
    uint64_t f = vk_fit(d, p);
    return f ? f : 4;
}

static void pool(af_vk_dev *d, const char *op, int bwd, float *o, const float *x, const int32_t *ss, int32_t B,
                 int64_t H, int last) {
    int64_t sz[2] = {B, H};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz) && B > 0 && H > 0) {
        const uint64_t sp = 4 * (uint64_t)B * H;
        pool_push q = {{0}, (uint32_t)B, (uint32_t)H, (uint32_t)(last != 0), (uint32_t)bwd};
        vk_arg a[3] = {{o, bwd ? reach(d, o) : sp, 1}, {x, bwd ? sp : reach(d, x), 0}, {ss, 4 * ((uint64_t)B + 1), 0}};
        uint32_t gx, gy;
        vk_grid(vk_div((uint64_t)B * H, 64), &gx, &gy);
        vk_dispatch(d, op, d->use_fp64 ? AF_VKS_POOL_F64 : AF_VKS_POOL_F32, NULL, a, 3, &q, sizeof q, gx, gy, 1);
    }
    vk_leave(d);
}

void af_vk_pool_forward(af_vk_dev *d, float *pooled, const float *hidden, const int32_t *seq_start, int32_t B,
                        int64_t H, int pooling) {
    pool(d, "pool_forward", 0, pooled, hidden, seq_start, B, H, pooling == AF_POOLING_LAST);
}

void af_vk_pool_backward(af_vk_dev *d, float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B,
                         int64_t H, int pooling) {
    pool(d, "pool_backward", 1, d_hidden, d_pooled, seq_start, B, H, pooling == AF_POOLING_LAST);
}

typedef struct head_push {
    uint32_t off[8];
    uint32_t B, H, C, op;
} head_push;

static void head_op(af_vk_dev *d, const char *op, int kind, float *o, uint64_t so, const float *pooled,
                    const float *W, const float *b3, uint64_t s3, int32_t B, int64_t H, int32_t C, uint64_t items) {
    const uint64_t sp = 4 * (uint64_t)B * H, sw = 4 * (uint64_t)C * H;
    head_push q = {{0}, (uint32_t)B, (uint32_t)H, (uint32_t)C, (uint32_t)kind};
    vk_arg a[4] = {{o, so, 1}, {pooled, pooled ? sp : 0, 0}, {W, W ? sw : 0, 0}, {b3, b3 ? s3 : 0, 0}};
    uint32_t gx, gy;
    vk_grid(vk_div(items, 64), &gx, &gy);
    vk_dispatch(d, op, d->use_fp64 ? AF_VKS_HEAD_F64 : AF_VKS_HEAD_F32, NULL, a, 4, &q, sizeof q, gx, gy, 1);
}

void af_vk_head_forward(af_vk_dev *d, float *logits, const float *pooled, const float *W, const float *bias, int32_t B,
                        int64_t H, int32_t C) {
    int64_t sz[3] = {B, H, C};
    if (vk_enter(d, "head_forward") && vk_sizes_ok(d, "head_forward", 3, sz) && B > 0 && C > 0)
        head_op(d, "head_forward", 0, logits, 4 * (uint64_t)B * C, pooled, W, bias, 4 * (uint64_t)C, B, H, C,
                (uint64_t)B * C);
    vk_leave(d);
}

void af_vk_head_backward(af_vk_dev *d, float *d_pooled, float *dW, float *dbias, const float *d_logits,
                         const float *pooled, const float *W, int32_t B, int64_t H, int32_t C) {
    const char *op = "head_backward";
    int64_t sz[3] = {B, H, C};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 3, sz) && B > 0 && C > 0) {
        const uint64_t sl = 4 * (uint64_t)B * C;
        if (dbias) head_op(d, op, 3, dbias, 4 * (uint64_t)C, NULL, NULL, d_logits, sl, B, H, C, (uint64_t)C);
        head_op(d, op, 1, dW, 4 * (uint64_t)C * H, pooled, NULL, d_logits, sl, B, H, C, (uint64_t)C * H);
        if (d_pooled) head_op(d, op, 2, d_pooled, 4 * (uint64_t)B * H, NULL, W, d_logits, sl, B, H, C, (uint64_t)B * H);
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- losses */

typedef struct loss_push {
    uint32_t off[8];
    uint32_t B, C, op;
} loss_push;

/* Σ of n doubles at device address x, in index order (a synchronization point). */
static af_status sum_f64(af_vk_dev *d, const void *x, int64_t n, double *out) {
    *out = NAN;
    double *h = malloc(8 * (size_t)(n > 0 ? n : 1));
    if (!h) return af_fail(AF_ERR_NOMEM, "out of host memory");
    af_status st = vk_download_locked(d, h, x, 8 * (uint64_t)n);
    if (st == AF_OK) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += h[i];
        *out = s;
    }
    free(h);
    return st;
}

af_status af_vk_sum_f64(af_vk_dev *d, const void *x, int64_t n, double *out) {
    vk_enter(d, "sum_f64");
    af_status st = sum_f64(d, x, n, out);
    vk_leave(d);
    return st;
}

double af_vk_ce_loss(af_vk_dev *d, float *d_logits, float *probs, const float *logits, const int32_t *labels,
                     const float *class_w, int32_t B, int32_t C) {
    const char *op = "ce_loss";
    double loss = NAN;
    int64_t sz[2] = {B, C};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz)) {
        if (B <= 0) loss = 0.0;
        void *terms = B > 0 ? vk_scratch(d, 8 * (uint64_t)B) : NULL;
        if (terms) {
            const uint64_t sl = 4 * (uint64_t)B * C;
            loss_push q = {{0}, (uint32_t)B, (uint32_t)C, 0};
            vk_arg a[6] = {{d_logits, sl, 1}, {probs, probs ? sl : 0, 1}, {terms, 8 * (uint64_t)B, 1},
                           {logits, sl, 0}, {labels, 4 * (uint64_t)B, 0}, {class_w, class_w ? 4 * (uint64_t)C : 0, 0}};
            uint32_t gx, gy;
            vk_grid(vk_div((uint64_t)B, 64), &gx, &gy);
            vk_dispatch(d, op, d->use_fp64 ? AF_VKS_LOSS_F64 : AF_VKS_LOSS_F32, NULL, a, 6, &q, sizeof q, gx, gy, 1);
            double total;
            if (sum_f64(d, terms, B, &total) == AF_OK) loss = total * (1.0 / (double)B);
        }
    }
    vk_leave(d);
    return loss;
}

double af_vk_bce_loss(af_vk_dev *d, float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C) {
    const char *op = "bce_loss";
    double loss = NAN;
    int64_t sz[2] = {B, C};
    const int64_t n = (int64_t)B * C;
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz)) {
        if (n <= 0) loss = 0.0;
        void *terms = n > 0 ? vk_scratch(d, 8 * (uint64_t)n) : NULL;
        if (terms) {
            const uint64_t sl = 4 * (uint64_t)n;
            loss_push q = {{0}, (uint32_t)B, (uint32_t)C, 1};
            vk_arg a[5] = {{d_logits, sl, 1}, {NULL, 0, 0}, {terms, 8 * (uint64_t)n, 1}, {logits, sl, 0}, {targets, sl, 0}};
            uint32_t gx, gy;
            vk_grid(vk_div((uint64_t)n, 64), &gx, &gy);
            vk_dispatch(d, op, d->use_fp64 ? AF_VKS_LOSS_F64 : AF_VKS_LOSS_F32, NULL, a, 5, &q, sizeof q, gx, gy, 1);
            double total;
            if (sum_f64(d, terms, n, &total) == AF_OK) loss = total * (1.0 / (double)n);
        }
    }
    vk_leave(d);
    return loss;
}

typedef struct lm_push {
    uint32_t off[8];
    uint32_t k, V, grad;
    float cap, gs;
} lm_push;

void af_vk_lm_rows(af_vk_dev *d, float *z, int64_t V, const int32_t *targets, int64_t k, float cap, float grad_scale,
                   int grad, void *loss, int32_t *correct) {
    const char *op = "lm_rows";
    int64_t sz[2] = {V, k};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz) && k > 0 && V > 0) {
        lm_push q = {{0}, (uint32_t)k, (uint32_t)V, (uint32_t)(grad != 0), cap, grad_scale};
        vk_arg a[4] = {{z, 4 * (uint64_t)k * V, 1}, {loss, 8 * (uint64_t)k, 1}, {correct, 4 * (uint64_t)k, 1},
                       {targets, 4 * (uint64_t)k, 0}};
        uint32_t gx, gy;
        vk_grid((uint64_t)k, &gx, &gy);
        vk_dispatch(d, op, d->use_fp64 ? AF_VKS_LM_ROWS_F64 : AF_VKS_LM_ROWS_F32, NULL, a, 4, &q, sizeof q, gx, gy, 1);
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- optimizer */

typedef struct adamw_push {
    uint32_t off[8];
    uint32_t n, wd_on;
    float decay, w1, b2, w2, neg_step, bc2_sqrt, eps;
} adamw_push;

void af_vk_adamw_step(af_vk_dev *d, int64_t *t, float beta1, float beta2, float eps, float weight_decay, float *P,
                      const float *G, float *M, float *V, int64_t n, float lr, const uint8_t *decay_mask) {
    const char *op = "adamw_step";
    int64_t sz[1] = {n};
    (*t)++;
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 1, sz) && n > 0) {
        /* the scalars exactly as af_adamw_step forms them (optim.c) */
        const double tt = (double)*t, b1 = (double)beta1, b2 = (double)beta2;
        adamw_push q = {{0},
                        (uint32_t)n,
                        weight_decay != 0.0f,
                        (float)(1.0 - (double)lr * (double)weight_decay),
                        (float)(1.0 - b1),
                        beta2,
                        (float)(1.0 - b2),
                        (float)(-((double)lr / (1.0 - pow(b1, tt)))),
                        (float)sqrt(1.0 - pow(b2, tt)),
                        eps};
        const uint64_t sp = 4 * (uint64_t)n;
        if (vk_fit(d, P) < sp || vk_fit(d, G) < sp || vk_fit(d, M) < sp || vk_fit(d, V) < sp)
            if (!vk_not_device(d, op, 5, P, G, M, V, decay_mask)) vk_fail(d, AF_ERR_UNSUPPORTED, "%s: %lld parameters longer than a buffer window", op, (long long)n);
        vk_arg a[5] = {{P, sp, 1}, {M, sp, 1}, {V, sp, 1}, {G, sp, 0}, {decay_mask, decay_mask ? (uint64_t)n : 0, 0}};
        uint64_t groups = vk_div((uint64_t)n, 256);
        if (groups > 65535u * 4) groups = 65535u * 4;
        uint32_t gx, gy;
        vk_grid(groups, &gx, &gy);
        vk_dispatch(d, op, d->use_fp64 ? AF_VKS_ADAMW_F64 : AF_VKS_ADAMW_F32, NULL, a, 5, &q, sizeof q, gx, gy, 1);
    }
    vk_leave(d);
}

double af_vk_clip_grad_norm(af_vk_dev *d, float *G, int64_t n, double max_norm) {
    const char *op = "clip_grad_norm";
    double norm = NAN;
    if (vk_enter(d, op)) {
        norm = n > 0 ? sqrt(vk_sumsq(d, op, G, n)) : 0.0;
        if (isfinite(norm) && max_norm > 0.0) {
            const double coef = max_norm / (norm + 1e-6);
            if (coef < 1.0) vk_ew(d, op, VK_EW_SCALE, G, NULL, G, NULL, NULL, n, (float)coef);
        }
        if (d->err != AF_OK) norm = NAN;
    }
    vk_leave(d);
    return norm;
}
