/* gemm_int8.h — int8 products of the frozen weights (gemm_int8.c), a precision of training contexts
 * (matmul precision "int8", `--frozen-precision int8`) on CPUs with AVX512_VNNI. */
#ifndef AF_GEMM_INT8_H
#define AF_GEMM_INT8_H

#include "afinar.h"
#include "kernels/cpu/gemm_packed.h"

#include <stdbool.h>
#include <stdint.h>

#define AF_I8_KC 512 /* depth of one micro-kernel call (a B sliver of 512 x 32 bytes, 16 KiB) */

/* The AVX512-VNNI kernels (gemm_int8_avx512.c; layouts and rounding there), reached as ctx->k->gp_i8. */
typedef struct af_gp_i8_ops {
    float (*amax)(const float *x, const float *s, int64_t n);
    void (*quant_row)(const float *x, const float *s, float inv, int64_t n, int64_t npad, int off, uint8_t *q,
                      int64_t kc, int32_t *sums);
    void (*interleave4)(const uint8_t *const r[4], int64_t n, uint32_t *dst);
    void (*ukernel)(int mr, int64_t kq, const uint32_t *ap, const uint32_t *bp, const int32_t *comp, const float *sa,
                    const float *sb, float *c, int64_t ldc, int nr, int accumulate);
} af_gp_i8_ops;

/* True when af_gp_gemm runs C = A·B of this shape and weight type as an int8 product: ctx->i8, the
 * weight in a block format (a frozen, quantized or f16/bf16 base weight: never F32, so LoRA, attention
 * and the f32 GEMMs keep their precision), not vocabulary-shaped (the LM head and its backward keep
 * theirs: a softmax gradient row is mostly tiny values that one row scale would round to zero), and
 * the int8 packed B (n rounded up to 32, x k rounded up to 4 bytes) within the packing cap (64 MiB).
 * Does not depend on m (a product split into row blocks gives bitwise the result of one call). */
bool af_gp_i8_applies(const af_ctx *ctx, int64_t n, int64_t k, uint32_t type);

/* af_gp_gemm / af_gp_gemm_fused (gemm_packed.h: the same arguments, f may be NULL) as an int8
 * product, for products where af_gp_i8_applies. The method is SwitchBack's (Wortsman et al., "Stable
 * and low-precision training for large-scale vision-language models", NeurIPS 2023: int8 products
 * with one scale per row of the activations / output gradient and per row of the weight, for the
 * forward and the input gradient):
 *   x·Wᵀ (b_trans 1):  sW[j] = max_k |W[j][k]| / 127, qW = round(W / sW[j]);
 *                      sA[t] = max_k |A[t][k]| / 127, qA = round(A / sA[t]);
 *                      C[t][j] = sA[t]·sW[j]·sum_k qA[t][k]·qW[j][k]
 *   dy·W (b_trans 0):  the same weight quantization along W's rows, which run along the depth k here:
 *                      sW[k] folded into A before its row is quantized: qA = round(A[t][k]·sW[k] / sA[t])
 *                      with sA[t] = max_k |A[t][k]·sW[k]| / 127; C[t][j] = sA[t]·sum_k qA[t][k]·qW[k][j].
 * Rounding to nearest even; integer sums exact (int32), converted to f32 per depth chunk of AF_I8_KC and
 * summed in f32 in ascending chunk order. Error: per element |C - C_exact| <= sum_k (|A|·sW/2 + sA/2·|W|
 * + sA·sW/4) (with the folded scales for dy·W) plus f32 rounding; tests/test_matmul.c checks that bound
 * and the exact integer result. Results do not depend on nth or on the row blocking.
 * Returns false (C untouched) when a buffer cannot be allocated. */
bool af_gp_gemm_i8(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak, const void *w,
                   uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k, int accumulate,
                   int nth, const af_gp_fused *f);

/* Frees the calling thread's int8 buffers (grow-only; af_kernels_thread_release). */
void af_gp_i8_release(void);

#endif /* AF_GEMM_INT8_H */
