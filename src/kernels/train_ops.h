/*
 * train_ops.h — the CPU kernels of training (and of adapters at inference) that the backend table
 * (kernels/backend.h) points at: the LoRA correction and its dropout mask, the classification head
 * and its losses, AdamW and global-norm clipping. Row-major float32; outputs first. Callers in
 * model / train / infer code reach them through the table (af_be(ctx)->...), never directly on
 * device memory; tests call them on host memory. Implementations: kernels/cpu/lora_ops.c,
 * head_ops.c, optim_ops.c (moved from lora/lora.c, train/head.c, train/optim.c, so that every op on activation memory is in the backend table),
 * mlp_ops.c (the gated MLP's products with the activation fused in).
 */
#ifndef AF_TRAIN_OPS_H
#define AF_TRAIN_OPS_H

#include "afinar.h"

#include <stdint.h>

/* ---- LoRA (Hu et al. 2021; PEFT's unmerged form, peft/tuners/lora/layer.py) ---- */

/* Forward correction of one projection for n tokens:
 *   xa[n, r] = dropout(x)[n, in] · Aᵀ   (saved for the backward)
 *   y[n, out] += scale · xa · Bᵀ
 * `drop_mask` [n, in] (may be NULL when dropout == 0) holds 0 or 1/(1-p) per element. */
void af_lora_forward(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask, const float *A, const float *B,
                     int64_t n, int64_t in, int64_t out, int32_t r, float scale);

/* The projection and its correction in one call (backend.h proj_lora_forward):
 *   xa[n, r] = dropout(x)·Aᵀ;  y[n, out] = x[n, in]·Wᵀ + scale·xa·Bᵀ
 * W [out, in] frozen, blocks of `type` (af_matmul_rows, block_rows as there). With bf16 products on
 * AMX tiles (r even, <= 32) the correction is added in the epilogue of the frozen product
 * (gemm_packed.h af_gp_gemm_fused) while each block of y is in cache, instead of a pass over y of
 * its own, as bf16 products (scale·B rounded to bf16 once, xa per block), and without a mask xa is
 * the frozen product's side product from its packed rows of x (bitwise the separate x·Aᵀ);
 * otherwise, and always in f32, it is af_matmul_rows then af_lora_forward, bit for bit. */
void af_proj_lora_forward(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                          const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                          int64_t out, int32_t r, float scale, int64_t block_rows);

/* Backward of the correction, given dy [n, out]:
 *   dB[out, r] += scale · dyᵀ · xa
 *   t[n, r]     = scale · dy · B
 *   dA[r, in]  += tᵀ · dropout(x)
 *   dx[n, in]  += (t · A) ⊙ drop_mask     (the frozen path's dx = dy·W is added by the caller)
 * `tmp` is scratch of n*r floats (+ n*in when drop_mask != NULL). */
void af_lora_backward(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x, const float *xa,
                      const float *drop_mask, const float *A, const float *B, int64_t n, int64_t in, int64_t out,
                      int32_t r, float scale);

/* The backward of a projection with its correction in one call (backend.h proj_lora_backward): dx [n, in]
 * (+)= dy·W (accumulate: onto dx) plus af_lora_backward's dx, dA and dB (dx may be NULL: only the
 * adapter's gradients). With bf16 products on AMX tiles, no mask and r even <= 32, dx += t·A runs in
 * the epilogue of dy·W while each block of dx is in cache, t = scale·dy·B being that product's side
 * product from its packed rows of dy (and dy's rows in pairs for dB written by the same packing), dA
 * and dB after it (where the side product does not apply: t and the gradients first); each result
 * bitwise that of its separate product; otherwise, and always in f32, af_matmul_rows (dyw) then
 * af_lora_backward, bit for bit. tmp as af_lora_backward's. */
void af_proj_lora_backward(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                           const float *x, const float *xa, const float *drop_mask, const void *w, uint32_t type,
                           const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale,
                           int accumulate, int64_t block_rows);

/* Fill mask [n, in] for the dropout of adapter (layer, proj) with probability p: element (t, i) is
 * 1/(1-p) when af_ctr_u01(af_ctr_key(seed, layer, proj, t0 + t + 1), i) >= p, else 0. t0 is the
 * index of the first row's token in the packed batch. */
void af_lora_dropout_mask(const af_ctx *ctx, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0, int64_t n,
                          int64_t in, float p);

/* ---- the gated MLP's products with the activation in their epilogue (cpu/mlp_ops.c) ----
 * act(g) = g·σ(g) (SwiGLU; Shazeer 2020) or the tanh-approximated GELU (geglu = 1, Gemma).
 * Results are bit for bit those of the unfused sequence, which the ops run themselves where the
 * packed GEMM does not take the product; block_rows as af_matmul_rows. */

/* A projection's LoRA adapter for the MLP ops below (NULL: the projection has none): A [r, in] and
 * B [out, r] (PEFT's lora_A / lora_B), scale, xa [n, r] (written by the forward, read by the
 * backward), drop_mask [n, in] or NULL (af_lora_forward's); backward only: dA, dB (added to), tmp
 * (af_lora_backward's scratch) and x [n, in], where af_mlp_down_back writes the down projection's
 * input act(gate)·up, which the adapter's dA needs. */
typedef struct af_lora_args {
    const float *A, *B;
    float *xa;
    const float *drop_mask;
    float *dA, *dB, *tmp, *x;
    int32_t r;
    float scale;
} af_lora_args;

/* gate, up [n, F] = x [n, in] · Wgᵀ, x · Wuᵀ (Wg, Wu [F, in], blocks of tg / tu, import_weight
 * addresses), each plus its LoRA correction when lg / lu is given (af_proj_lora_forward);
 * h [n, F] = act(gate) · up. = af_matmul_rows(dyw 0) or af_proj_lora_forward for each, then
 * af_swiglu_forward (af_geglu_forward). h must not overlap gate, up or x. */
void af_mlp_gate_up(const af_ctx *ctx, float *gate, float *up, float *h, const float *x, const void *wg, uint32_t tg,
                    const void *wu, uint32_t tu, int64_t n, int64_t in, int64_t F, int geglu, int64_t block_rows,
                    const af_lora_args *lg, const af_lora_args *lu);

/* dh [n, F] = dy [n, H] · Wd (Wd [H, F], blocks of td); d_gate, d_up [n, F] = the activation's
 * backward of dh at gate, up (OVERWRITTEN, not added to). = af_matmul_rows(dyw 1), zero-fill of
 * d_gate and d_up, then af_swiglu_backward (af_geglu_backward). With ld (down_proj's adapter):
 * ld->x = act(gate)·up first (its input), then af_proj_lora_backward onto dh (not accumulated) with
 * ld's gradients, then the fills and the activation's backward. No array may overlap another. */
void af_mlp_down_back(const af_ctx *ctx, float *dh, float *d_gate, float *d_up, const float *dy, const void *wd,
                      uint32_t td, const float *gate, const float *up, int64_t n, int64_t F, int64_t H, int geglu,
                      int64_t block_rows, const af_lora_args *ld);

/* ---- classification head and losses: sequence-classification head on the final hidden states ----
 * Samples are packed: sample b owns tokens [seq_start[b], seq_start[b+1]) (seq_start [B+1],
 * seq_start[0] = 0, strictly increasing; the caller validates this — these functions do not).
 *   pooling MEAN: pooled[b] = mean of its tokens' hidden states (default)
 *   pooling LAST: pooled[b] = hidden state of its last token (transformers *ForSequenceClassification)
 *   logits[b, c] = pooled[b] · W[c]ᵀ + bias[c],  W [num_classes, hidden]
 * Losses, averaged over the batch (sum over samples / n_samples):
 *   weighted softmax cross-entropy  loss_b = -w[y_b] · log softmax(logits_b)[y_b]
 *       d logits_b = w[y_b] · (softmax(logits_b) - onehot(y_b)) / n_samples
 *     (PyTorch CrossEntropyLoss(weight=w, reduction='sum') / B — note: NOT PyTorch's default
 *      'mean' with weights, which divides by sum of w[y_b]; documented choice)
 *   multi-label BCE-with-logits (stable form) loss_b = mean_c [max(x,0) - x·t + log(1 + e^-|x|)]
 *       d x = (sigmoid(x) - t) / (C · n_samples)
 *     (PyTorch BCEWithLogitsLoss(reduction='mean') over the [B, C] matrix; no pos_weight)
 * All arrays are float32, row-major, caller-owned; nothing allocates, nothing fails. Sums are
 * accumulated in double (losses, softmax denominators, pooled means) or in float lanes reduced in
 * double (dot products), so results do not depend on the thread count.
 */

/* pooled [B, H] (overwritten) from hidden [n_tok, H], n_tok = seq_start[B]. */
void af_pool_forward(float *pooled, const float *hidden, const int32_t *seq_start, int32_t B, int64_t H,
                     af_head_pooling pool);
/* d_hidden [n_tok, H] += scatter of d_pooled [B, H] (mean: d/len to each token; last: to the last).
 * Tokens that the pooling does not read (LAST: all but the last of each sample) are left as they are. */
void af_pool_backward(float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B, int64_t H,
                      af_head_pooling pool);

/* logits [B, C] (overwritten) = pooled [B, H] · W[C, H]ᵀ + bias [C] (bias may be NULL). */
void af_head_forward(const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias, int32_t B, int64_t H,
                     int32_t C);
/* dW [C, H] += d_logitsᵀ · pooled; dbias [C] += column sums of d_logits [B, C] (may be NULL);
 * d_pooled [B, H] += d_logits · W (may be NULL when the pooled gradient is not needed). */
void af_head_backward(const af_ctx *ctx, float *d_pooled, float *dW, float *dbias, const float *d_logits, const float *pooled,
                      const float *W, int32_t B, int64_t H, int32_t C);

/* Weighted softmax CE over B samples; labels [B] in [0, C); class_w [C] (NULL = all 1).
 * Writes d_logits [B, C] (overwrites) and returns the mean loss (sum over samples / B; 0 for B = 0).
 * probs [B, C] (may be NULL) receives the softmax. A label outside [0, C) makes the return value NaN
 * and that sample's d_logits row zero (the engine validates labels before calling). Stable for any
 * finite logits (log-softmax with the row maximum subtracted). */
double af_ce_loss(float *d_logits, float *probs, const float *logits, const int32_t *labels, const float *class_w,
                  int32_t B, int32_t C);
/* BCE-with-logits over B samples with multi-hot targets [B, C] in {0, 1} (any t in [0, 1] works).
 * Writes d_logits [B, C] (overwrites) and returns the mean loss over the B·C entries (0 for B·C = 0). */
double af_bce_loss(float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C);

/* ---- optimizer ----
 * AdamW (Loshchilov & Hutter 2019) with PyTorch torch.optim.AdamW semantics:
 *   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
 *   m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t);  p ← p − lr · m̂ / (sqrt(v̂) + eps)
 * Defaults (PyTorch): beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01.
 * Verified against torch.optim.AdamW + clip_grad_norm_ by tests/test_optim.c
 * (fixture tests/fixtures/optim_ref.bin from tests/ref/make_optim_ref.py).
 */
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

#endif /* AF_TRAIN_OPS_H */
