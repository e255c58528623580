/*
 * ops.h — transformer ops on float32 activations, each forward beside its backward
 * (convention from karpathy/llm.c train_gpt2.c). Row-major; argument order: outputs (and saved
 * tensors) first, then inputs, then weights, then sizes. Backward functions ADD into gradient
 * buffers (`d_*`), so accumulation over micro-batches is free; callers zero them first.
 * Formulas: docs/FORMATS.md §4 and §7; sources named at each function.
 * Every op with threads or ISA variants runs under `ctx` (first argument, kernels/ctx.h): its
 * kernel table (scalar / AVX2 / AVX-512, chosen when the context was created) and thread count.
 * Implementation: src/kernels/cpu/ops.c, ops_attention.c (the context's pool when a call is large enough;
 * results do not depend on the thread count). None of these allocate except af_attention_backward (a small [n_heads, n_q]
 * scratch) and RoPE (a [half] frequency table, and a [positions, 2, head_dim] cos/sin table when
 * positions repeat); without memory they recompute instead. None fail.
 * exp on the SIMD paths (SiLU, attention softmax, af_vexpf) is vexp.h's polynomial (<= 1 ulp), on
 * the scalar path libm's expf, so those ops differ between paths by a few ulp.
 */
#ifndef AF_OPS_H
#define AF_OPS_H

#include "afinar.h"

#include <stdint.h>

/* ---- exp ----
 * y[i] = e^x[i] for x, y: [n] (y may alias x). SIMD paths: Cody–Waite reduction + Cephes degree-7
 * polynomial (src/kernels/cpu/vexp.h), relative error <= 1.2e-7 (1 ulp) for normal results; special
 * values as expf: overflow → +inf, underflow → 0 through subnormals, exp(−inf) = 0, NaN → NaN.
 * Scalar path: libm expf. */
void af_vexpf(const af_ctx *ctx, float *y, const float *x, int64_t n);

/* ---- element-wise product ----
 * y[i] = a[i]·b[i] (acc 0) or y[i] += a[i]·b[i] (acc 1) for y, a, b: [n] (y may alias a); each
 * element on its own (a multiply, then an add: no fused multiply-add), so the result does not
 * depend on the threads. Used for LoRA dropout's masks (lora_ops.c). */
void af_mul_elementwise(const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n, int acc);

/* ---- RMSNorm (Zhang & Sennrich 2019; llama/transformers LlamaRMSNorm) ----
 * y[t, :] = x[t, :] * rstd[t] * w[:],  rstd[t] = 1 / sqrt(mean(x[t, :]^2) + eps)
 * x, y: [n, dim]; w: [dim]; rstd (may be NULL): [n], saved for the backward. y may alias x. */
void af_rmsnorm_forward(const af_ctx *ctx,
                        float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                        float eps);
/* dx[t,:] += rstd*g - rstd^3/dim * x * sum(g*x),  g = w*dy;  dw[:] += sum_t dy*x*rstd  (dw may be NULL)
 * rstd: the [n] saved by the forward. Row sums (forward Σx², backward Σg·x) are accumulated in double
 * over 32 lanes (element i into lane i % 32, then a fixed tree), identically on every kernel path:
 * RMSNorm results are the same bits on the scalar, AVX2 and AVX-512 paths. */
void af_rmsnorm_backward(const af_ctx *ctx, float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, int64_t n, int64_t dim);

/* ---- RoPE, rotating pairs in place ----
 * x: [n, n_heads, head_dim]; pos: [n] absolute positions; rotary dims = head_dim (full).
 * theta_i = pos * base^(-2i/head_dim), i in [0, head_dim/2).
 * neox = 0: "NORM" mode, pairs (2i, 2i+1) — llama.cpp's rope for GGUF llama tensors, whose
 *           q/k rows the converter permuted (docs/FORMATS.md §3.3).
 * neox = 1: "NEOX" mode, pairs (i, i + head_dim/2) — HF rotate_half, used by gemma3 GGUF.
 * head_dim must be even. θ is formed in double and reduced mod 2π before cosf/sinf, so it stays
 * exact at large positions (ggml's iterated f32 θ drifts by ~1e-3 rad at pos ~4k). cos/sin are
 * computed once per distinct position when positions repeat (packed batches), else once per token;
 * the result is the same bits either way and on every kernel path. */
void af_rope_forward(const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                     float base, int neox);
/* In-place inverse rotation of the gradient: dx = R(-theta) dy. */
void af_rope_backward(const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                      float base, int neox);
/* The same with frequency factors (llama.cpp ggml_rope_ext freq_factors, the rope_freqs tensor):
 * theta_i = pos * base^(-2i/head_dim) / freq_factors[i], freq_factors [head_dim/2] (NULL = all 1:
 * af_rope_forward exactly). A factor of 1e30 makes the pair's angle 0 in f32 (cos 1, sin 0 to
 * within 1e-27·pos): Gemma 4's "proportional" RoPE, whose unrotated pairs transformers gives
 * frequency 0 (modeling_rope_utils.py _compute_proportional_rope_parameters). */
void af_rope_ff_forward(const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                        float base, int neox, const float *freq_factors);
void af_rope_ff_backward(const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads,
                         int64_t head_dim, float base, int neox, const float *freq_factors);

/* ---- SwiGLU (Shazeer 2020): h = silu(gate) * up, silu(x) = x * sigmoid(x) ----
 * gate, up, h: [n] (flattened). h may alias gate. */
void af_swiglu_forward(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n);
/* d_gate += dh * up * silu'(gate);  d_up += dh * silu(gate) */
void af_swiglu_backward(const af_ctx *ctx,
                        float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                        int64_t n);

/* ---- GeGLU with tanh-approximate GELU (Gemma): h = gelu_tanh(gate) * up ---- */
void af_geglu_forward(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n);
void af_geglu_backward(const af_ctx *ctx,
                       float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                       int64_t n);

/* ---- Causal grouped-query self-attention over ONE sequence (a packed sample) ----
 * q:   [n_q, n_heads, head_dim]        queries at positions q_pos0 .. q_pos0+n_q-1
 * k,v: [n_kv, n_kv_heads, head_dim]    keys/values at positions 0 .. n_kv-1 (n_kv >= q_pos0+n_q)
 *      (k/v rows may be strided: kv_stride floats between consecutive positions, for KV caches)
 * out: [n_q, n_heads, head_dim]
 * Query head h uses kv head h / (n_heads / n_kv_heads). Query at position p sees keys
 * p' with p' <= p and, when window > 0, p - p' < window (sliding window, gemma3).
 * scores = q·kᵀ * scale; softmax over allowed keys.
 * lse (may be NULL): [n_heads, n_q] log-sum-exp of the scaled scores, saved for the backward.
 * Requires n_heads % n_kv_heads == 0 and kv_stride >= n_kv_heads*head_dim. Keys after the query's
 * position are never read (a KV cache may pass n_kv = its capacity with garbage beyond q_pos0+n_q).
 * Online softmax in f32 with max-subtraction; masked keys contribute exactly 0. A decode call
 * (n_q = 1, q_pos0 = p) returns bit-for-bit the row p of the full forward on the same keys.
 * Source: Vaswani et al. 2017; GQA Ainslie et al. 2023; lse recomputation as FlashAttention-2. */
void af_attention_forward(const af_ctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                          int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
/* Gradients (added into dq, dk, dv; same shapes as q, k, v with kv_stride = n_kv_heads*head_dim)
 * recomputing probabilities from the saved lse: p = exp(s - lse);
 * dv += pᵀ·dout; dp = dout·vᵀ; ds = p * (dp - rowsum(dout*out)); dq += ds·k*scale; dk += dsᵀ·q*scale */
void af_attention_backward(const af_ctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                           int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window);

/* ---- misc ---- */
/* y[i] = a[i] + b[i] (y may alias a or b) */
void af_add(float *y, const float *a, const float *b, int64_t n);
/* Softmax over one row in place. */
void af_softmax_inplace(float *x, int64_t n);

/* ---- loops that model / training code ran on the host (kernels/cpu/ops_misc.c; one op each of the
 * backend table, kernels/backend.h) ---- */
/* x[i] *= s over n floats. */
void af_scale(const af_ctx *ctx, float *x, float s, int64_t n);
/* y[t, :] += b for every row t of y [n, out]; b [out]. */
void af_add_bias(const af_ctx *ctx, float *y, const float *b, int64_t n, int64_t out);
/* x [n, H] = rows tokens[t] (in [0, rows of W), unchecked) of W [*, H] stored in blocks of `type`,
 * dequantized (af_dequantize_row), then times `scale` unless it is 1. */
void af_embed(const af_ctx *ctx, float *x, const int32_t *tokens, int64_t n, const void *w, uint32_t type, int64_t H,
              float scale);
/* x[i] = c·tanh(x[i]/c) over n floats (logit soft-capping, Gemma 2/3; c > 0). */
void af_softcap(const af_ctx *ctx, float *x, int64_t n, float c);
/* dst [k, W] row j = src row idx[j]. */
void af_rows_gather(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W);
/* dst row idx[j] = src row j (src [k, W]); zeros when src is NULL. */
void af_rows_scatter(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W);
/* Number of NaN / ±Inf values among x [n]. */
int64_t af_count_nonfinite(const af_ctx *ctx, const float *x, int64_t n);
/* Softmax cross-entropy of k logit rows z [k, V] with targets tgt [k] in [0, V) (the LM head loss,
 * model/transformer.h af_lm_head_loss): z soft-capped in place when cap > 0 (c·tanh(z/c));
 * loss[j] = logsumexp(z_j) − z_j[tgt_j] (double), correct[j] = (argmax_v z_j[v], lowest index on
 * ties) == tgt_j; with grad, z_j is replaced by grad_scale·(softmax(z_j) − onehot(tgt_j)) times
 * the soft-cap derivative 1 − (z/c)². Sums in double, one row per thread (the same bits for any
 * thread count). Source: softmax CE gradient (Goodfellow et al. 2016 §6.2.2.3); tanh' = 1 − tanh². */
void af_lm_ce_rows(const af_ctx *ctx, float *z, const int32_t *tgt, int64_t k, int64_t V, float cap, float grad_scale,
                   int grad, double *loss, int32_t *correct);

#endif /* AF_OPS_H */
