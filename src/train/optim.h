/*
 * optim.h — learning-rate schedules; AdamW and gradient clipping (kernels/train_ops.h, one kernel of
 * every backend) are re-exported here.
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
#include "afinar_app.h"
#include "kernels/train_ops.h" /* af_adamw, af_adamw_step, af_clip_grad_norm */

#include <stdint.h>

/* af_sched: include/afinar.h ("Training runs"). */

/* Learning rate at optimizer step `step` (0-based) of `total` steps: linear warm-up from 0 over
 * `warmup` steps (lr·(step+1)/warmup, so step warmup−1 reaches lr), then constant / cosine / linear
 * decay from lr at step `warmup` to lr_min at step total−1 (transformers
 * get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup shapes, with a floor lr_min):
 *   progress = (step − warmup) / (total − 1 − warmup), clamped to [0, 1]
 *   cosine: lr_min + (lr − lr_min)·½(1 + cos(π·progress));  linear: lr_min + (lr − lr_min)(1 − progress)
 * When no step follows the warm-up's first full-lr step (total − 1 − warmup <= 0) the post-warm-up
 * rate is lr. Constant ignores lr_min. Computed in double, rounded to float once. step < 0 counts as
 * 0; warmup <= 0 means no warm-up.
 * wsd (warmup-stable-decay): lr after the warm-up up to step D = af_wsd_decay_start(total) − 1, then
 * lr_min + (lr − lr_min)(1 − (step − D)/(total − D)) from step D to total − 1: a linear cool-down over
 * the last fifth of the steps [transformers get_wsd_schedule with decay_type "linear"; Hu et al. 2024,
 * "MiniCPM" (WSD); Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
 * Training Durations": a 20% cool-down matches cosine, and the run can end at any point by starting it]. */
float af_lr_at(af_sched s, float lr, float lr_min, int64_t step, int64_t warmup, int64_t total);
/* "constant" | "cosine" | "linear" | "wsd" -> 0 on success, -1 unknown (NULL too); *out untouched on error. */
int af_sched_parse(const char *name, af_sched *out);
/* The name af_sched_parse reads ("constant", "cosine", "linear", "wsd"); "?" for another value. Static. */
const char *af_sched_name(af_sched s);

/* First step of the wsd cool-down of a `total`-step run: total − floor(total / 5) (total <= 0: 0). */
int64_t af_wsd_decay_start(int64_t total);

/* The wsd length whose cool-down starts exactly at step `s` (> 0): the smallest total with
 * af_wsd_decay_start(total) >= s, for which it equals s (total − floor(total/5) grows by 0 or 1 per
 * step); about 1.25 s, i.e. a cool-down of a quarter of the steps done. s <= 0: 0. */
int64_t af_wsd_total_ending(int64_t s);

#endif /* AF_OPTIM_H */
