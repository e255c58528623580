/*
 * dora.h — DoRA, weight-decomposed low-rank adaptation (Liu et al. 2024, "DoRA: Weight-Decomposed
 * Low-Rank Adaptation", arXiv:2402.09353), in PEFT's form (peft 0.21 tuners/lora/dora.py
 * DoraLinearLayer, variants.py DoraLinearVariant). For one projection with frozen W [out, in], LoRA
 * A [r, in], B [out, r], scale s and the trained magnitude m [out]:
 *   nrm[o] = || W[o,:] + s·(B·A)[o,:] ||_2            (PEFT's "column-wise" norm of W + s·BᵀA in its
 *                                                     fan-in view: one norm per output row), DETACHED:
 *                                                     the backward treats it as a constant (DoRA §4.3)
 *   g[o]   = m[o] / nrm[o]
 *   without dropout:  y = g ⊙ (x·Wᵀ + s·x·Aᵀ·Bᵀ)
 *   with dropout (x_d = dropout(x), PEFT recomputes the base product on x_d):
 *                     y = x·Wᵀ + (g − 1) ⊙ (x_d·Wᵀ) + g ⊙ s·x_d·Aᵀ·Bᵀ
 * so with y_pre = x_d·Wᵀ + s·x_d·Aᵀ·Bᵀ (x_d = x without dropout) the gradients are
 *   dm[o] = Σ_t dy[t,o]·y_pre[t,o] / nrm[o]
 *   dA, dB = the LoRA gradients of dy' = g ⊙ dy;   dx = dy·W + ((g − 1)⊙dy)·W ⊙ mask + LoRA dx of dy'.
 * m is initialised to nrm at B = 0, i.e. the row norms of W (update_layer), so an untrained DoRA adapter
 * is the identity. The merged weight (af_dora_merge) is g ⊙ (W + s·B·A) row by row (merge_safe).
 * All arrays are host float32, row-major (the CPU backend: the trainer refuses DoRA on other devices).
 */
#ifndef AF_DORA_H
#define AF_DORA_H

#include "afinar.h"

#include <stdint.h>

/* nrm [out] = row norms of W + scale·B·A, W [out, in] of block type `wtype` (af_dequantize_row's types,
 * F32 included), A [r, in], B [out, r]. Each row is dequantized into float, corrected, and its squared
 * sum accumulated in double (rows in parallel on ctx's threads; the result does not depend on their
 * number). ctx may be NULL (one thread). */
void af_dora_weight_norm(const af_ctx *ctx, float *nrm, const void *W, uint32_t wtype, const float *A, const float *B,
                         int64_t in, int64_t out, int32_t r, float scale);

/* dst [n, out] = (m[o] / nrm[o] − sub) · src [n, out] per column o (sub 0: g ⊙ src; 1: (g − 1) ⊙ src);
 * dst may equal src. */
void af_dora_scale(float *dst, const float *src, const float *m, const float *nrm, int64_t n, int64_t out, float sub);

/* dm [out] += Σ_t dy[t, o]·y_pre[t, o] / nrm[o] (sums over t in double). */
void af_dora_dmag(float *dm, const float *dy, const float *y_pre, const float *nrm, int64_t n, int64_t out);

/* Merge (PEFT merge_safe): Wd [out, in] (f32, in place) = m[o]/nrm[o] · (Wd + s·B·A)[o, :] with nrm the
 * row norms of Wd + s·B·A (computed here, in double). */
void af_dora_merge(float *Wd, const float *A, const float *B, const float *m, int64_t in, int64_t out, int32_t r,
                   float scale);

/* m of every slot of `lay` (lay->lora.use_dora) = af_dora_weight_norm of the model's frozen weight with
 * the A, B already in P (B = 0 after af_lora_init_params: the row norms of W), as PEFT's update_layer.
 * Host weights (af_weight.data). Errors: AF_ERR_INVALID_ARG (NULL, no DoRA layout, a slot the model
 * lacks, a weight type without a dequantizer). Defined in model/lora_layout.c (it reads the model). */
struct af_param_layout;
af_status af_dora_init_magnitudes(const af_model *model, const struct af_param_layout *lay, float *P);


#endif /* AF_DORA_H */
