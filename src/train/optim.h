/*
 * optim.h — AdamW, gradient clipping, learning-rate schedules.
 * AdamW (Loshchilov & Hutter 2019) with PyTorch torch.optim.AdamW semantics:
 *   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
 *   m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t);  p ← p − lr · m̂ / (sqrt(v̂) + eps)
 * Defaults (PyTorch): beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01.
 * Verified against torch.optim.AdamW + clip_grad_norm_ by tests/test_optim.c
 * (fixture tests/fixtures/optim_ref.bin from tests/ref/make_optim_ref.py).
 */
#ifndef AF_OPTIM_H
#define AF_OPTIM_H

#include "afinar.h"

#include <stdint.h>

typedef struct af_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t; /* steps taken so far (bias correction uses t after increment) */
} af_adamw;

/* lr as given, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01, t 0. */
void af_adamw_defaults(af_adamw *o, float lr);
/* One update of P [n] with gradient G [n], moments M, V [n] (zero-initialised by the caller).
 * `lr` overrides o->lr for this step (schedules); `decay_mask` [n] (NULL = decay everything) selects
 * which parameters get weight decay (mask[i] != 0). Increments o->t. The hyper-parameters are used
 * as the doubles their float values represent; scalar factors (1 − lr·wd, lr/(1 − β1^t),
 * sqrt(1 − β2^t)) are formed in double and rounded to float once, element math is float, as in
 * PyTorch's single-tensor CPU implementation. Elements are independent, so threading (the context's pool,
 * for large n) does not change results. */
void af_adamw_step(const af_ctx *ctx, af_adamw *o, float *P, const float *G, float *M, float *V, int64_t n, float lr,
                   const uint8_t *decay_mask);

/* Global L2 norm of G [n] (computed in double, fixed summation order). If max_norm > 0 and
 * clip_coef = max_norm / (norm + 1e-6) is below 1 (i.e. the norm exceeds max_norm, up to the 1e-6),
 * scales G by clip_coef (torch.nn.utils.clip_grad_norm_, which clamps the coefficient at 1).
 * Returns the pre-clip norm (NaN/Inf if G has non-finite values; G is then left untouched). */
double af_clip_grad_norm(const af_ctx *ctx, float *G, int64_t n, double max_norm);

/* af_sched: include/afinar.h ("Training runs"). */

/* Learning rate at optimizer step `step` (0-based) of `total` steps: linear warm-up from 0 over
 * `warmup` steps (lr·(step+1)/warmup, so step warmup−1 reaches lr), then constant / cosine / linear
 * decay from lr at step `warmup` to lr_min at step total−1 (transformers
 * get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup shapes, with a floor lr_min):
 *   progress = (step − warmup) / (total − 1 − warmup), clamped to [0, 1]
 *   cosine: lr_min + (lr − lr_min)·½(1 + cos(π·progress));  linear: lr_min + (lr − lr_min)(1 − progress)
 * When no step follows the warm-up's first full-lr step (total − 1 − warmup <= 0) the post-warm-up
 * rate is lr. Constant ignores lr_min. Computed in double, rounded to float once. step < 0 counts as
 * 0; warmup <= 0 means no warm-up. */
float af_lr_at(af_sched s, float lr, float lr_min, int64_t step, int64_t warmup, int64_t total);
/* "constant" | "cosine" | "linear" -> 0 on success, -1 unknown (NULL too); *out untouched on error. */
int af_sched_parse(const char *name, af_sched *out);

#endif /* AF_OPTIM_H */
