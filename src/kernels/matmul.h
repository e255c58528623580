/*
 * matmul.h — products with weights kept in their stored (possibly quantized) block format.
 *
 * W is a frozen weight matrix [out, in] (a PyTorch Linear weight; GGUF dims [in, out]):
 * row o holds `in` elements of `type`, i.e. af_row_bytes(type, in) bytes, rows contiguous.
 * Blocks are dequantized inside the kernel (per tile, in registers / L1), never into an f32 copy
 * of the whole matrix. Accumulation is f32. Threads: the context's pool over output tiles, ctx->n_threads.
 * Every function runs under `ctx` (kernels/ctx.h): its kernel table (scalar / AVX2+FMA / AVX-512,
 * chosen when the context was created), thread count, precision and decode settings.
 */
#ifndef AF_MATMUL_H
#define AF_MATMUL_H

#include "afinar.h"

#include <stdint.h>

/* y[n, out] = x[n, in] · W[out, in]ᵀ   (forward of a bias-free Linear layer).
 * If `accumulate` is nonzero, y += x·Wᵀ instead of y = x·Wᵀ.
 * Preconditions: in % af_type_block_size(type) == 0; af_type_can_dequantize(type). */
void af_matmul_xwt(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in,
                   int64_t out, int accumulate);

/* One product of af_matmul_xwt_parts: y[n, out] = x[n, in] · W[out, in]ᵀ (W of `type`, as
 * af_matmul_xwt: in % af_type_block_size(type) == 0). */
typedef struct af_mm_part {
    float *y;
    const float *x;
    const void *w;
    uint32_t type;
    int64_t n, in, out;
    int exact; /* 1: exact f32 decode even when the context has int8 activations */
} af_mm_part;

/* The n_parts products parts[i] (y overwritten), each with exactly the bits af_matmul_xwt(ctx,
 * y, x, w, type, n, in, out, 0) gives it (a part with `exact` set: the bits that call gives under
 * the same context without int8 activations). Products in the decode regime (n <= 4 rows) run as one
 * parallel region of the context's pool over their concatenated row blocks (16 products at most
 * per region; threads when their multiply-adds together reach the threshold a lone product has):
 * one fork-join instead of one per product, and products too small to split alone (k and v of a
 * small model) share the threads. Other products run one call each. The y arrays must not
 * overlap each other or any x. */
void af_matmul_xwt_parts(const af_ctx *ctx, const af_mm_part *parts, int n_parts);

/* dx[n, in] (+)= dy[n, out] · W[out, in]   (backward of a Linear layer w.r.t. its input).
 * Same storage conventions as af_matmul_xwt. */
void af_matmul_dyw(const af_ctx *ctx, float *dx, const float *dy, const void *w, uint32_t type, int64_t n, int64_t in,
                   int64_t out, int accumulate);

/* The training form (n >= 16 rows): dyw = 0 is af_matmul_xwt, dyw = 1 af_matmul_dyw (y [n, in]).
 * Unless the packed GEMM takes the whole call (af_matmul_packed_path), the rows are cut into
 * about n / block_rows token blocks (block_rows 0: one call), which the context's threads take
 * whole (each block one single-threaded kernel call), keeping a block's x (or dy) stream in the
 * per-core L2 (engine.h af_engine_set_block_rows). Every row's arithmetic is that of one call: the
 * results equal one call bit for bit. Inside a pool job the blocks run one after the other. */
void af_matmul_rows(const af_ctx *ctx, int dyw, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                    int64_t in, int64_t out, int accumulate, int64_t block_rows);

/* Decode precision (n <= 4 tokens) is ctx->int8_act: when on, activations are quantized to int8
 * per 32-block and multiplied with integer dot products (llama.cpp's scheme: faster, relative
 * error ~5e-3 per product, which moves logits by up to ~0.5 over 30 layers); when off (the
 * default) decode uses f32 activations and is exact up to f32 rounding. */

/* 1 when af_matmul_xwt(n, in, out) / af_matmul_dyw(n, in, out) on ctx's kernel path use the
 * packed, cache-blocked GEMM (gemm_packed.c): it blocks the rows itself, packs W once per call and
 * splits the work over the context's threads, so callers should pass all rows in one call. The
 * per-row results are the same whatever the row count n > 4 (no dependence on blocking). */
int af_matmul_packed_path(const af_ctx *ctx, int64_t n, int64_t in, int64_t out);

/* Precision of the packed path (af_matmul_packed_path products) is ctx->bf16: on = bfloat16
 * operands with f32 accumulation (AVX512_BF16; error bound in gemm_packed_avx512.c). */

/* Plain f32 GEMM helpers for activations and LoRA factors (row-major):
 * C[m, n] (+)= A[m, k] · B[n, k]ᵀ */
void af_gemm_abt(const af_ctx *ctx,
                 float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate);
/* C[m, n] (+)= A[m, k] · B[k, n] */
void af_gemm_ab(const af_ctx *ctx,
                float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate);
/* C[m, n] (+)= A[k, m]ᵀ · B[k, n]   (weight gradients: dW = dyᵀ x) */
void af_gemm_atb(const af_ctx *ctx,
                 float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate);

#endif /* AF_MATMUL_H */
