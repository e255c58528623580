/* gemm_int8.h — int8 products of the frozen weights (gemm_int8.c), a precision of training contexts
 * (matmul precision "int8", `--frozen-precision int8`) on CPUs with AVX512_VNNI. */
#ifndef AF_GEMM_INT8_H
#define AF_GEMM_INT8_H

#include "afinar.h"
#include "kernels/cpu/gemm_packed.h"

#include <stdbool.h>
#include <stdint.h>

#define AF_I8_KC 256 /* depth of one scale and of one micro-kernel call (a B sliver of 256 x 32 bytes) */

/* The AVX512-VNNI kernels (gemm_int8_avx512.c; layouts and rounding there), reached as ctx->k->gp_i8; with AMX,
 * the micro-kernel on AMX-INT8 tiles too. */
typedef struct af_gp_i8_ops {
    float (*amax)(const float *x, const float *s, int64_t n);
    void (*quant_row)(const float *x, const float *s, float inv, int64_t n, int64_t npad, int off, uint8_t *q,
                      int64_t kc, int32_t *sums);
    void (*interleave4)(const uint8_t *const r[4], int64_t n, uint32_t *dst);
    void (*ukernel)(int mr, int64_t kq, const uint32_t *ap, const uint32_t *bp, const int32_t *comp, const float *sa,
                    const float *sb, float *c, int64_t ldc, int nr, int accumulate);
    /* AMX-INT8 tiles (gemm_amx.c; NULL without AMX): 32 x 32 blocks from rows of A, bitwise ukernel's result */
    void (*amx_ukernel)(int mr, int64_t kq, const uint32_t *ap, int64_t lda, const uint32_t *bp, const int32_t *comp,
                        const float *sa, int64_t gs, const float *sb, float *c, int64_t ldc, int nr, int accumulate,
                        int *tilecfg);
} af_gp_i8_ops;

/* gemm_amx.c: af_gp_i8_ops.amx_ukernel of the AMX table. */
void af_i8_amx_ukernel(int mr, int64_t kq, const uint32_t *ap, int64_t lda, const uint32_t *bp, const int32_t *comp,
                       const float *sa, int64_t gs, const float *sb, float *c, int64_t ldc, int nr, int accumulate,
                       int *tilecfg);

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
 * with row-wise scales of the activations / output gradient and of the weight, for the forward and the
 * input gradient), with the scales taken per chunk of AF_I8_KC along the depth (as llama.cpp's Q8
 * blocks, coarser) so that one outlier channel coarsens only its chunk. For chunk c = [256c, 256c + 256):
 *   x·Wᵀ (b_trans 1):  sW[j,c] = max_{k in c} |W[j][k]| / 127, qW = round(W / sW[j,c]);
 *                      sA[t,c] = max_{k in c} |A[t][k]| / 127, qA = round(A / sA[t,c]);
 *                      C[t][j] = sum_c sA[t,c]·sW[j,c]·sum_{k in c} qA[t][k]·qW[j][k]
 *   dy·W (b_trans 0):  W quantized along its rows (which run along the depth here), one scale per row
 *                      sW[k] = max_j |W[k][j]| / 127, folded into A before it is quantized:
 *                      qA = round(A[t][k]·sW[k] / sA[t,c]), sA[t,c] = max_{k in c} |A[t][k]·sW[k]| / 127;
 *                      C[t][j] = sum_c sA[t,c]·sum_{k in c} qA[t][k]·qW[k][j].
 * Rounding to nearest even; integer sums exact (int32), converted to f32 per chunk, scaled and summed
 * in f32 in ascending chunk order. Error: per element |C - C_exact| <= sum_k (|A|·sW/2 + sA/2·|W| +
 * sA·sW/4) (the scales of k's chunk; the folded operands for dy·W) plus f32 rounding;
 * tests/test_matmul_int8.c checks that bound and the exact integer result. Results do not depend on
 * nth or on the row blocking.
 * Returns false (C untouched) when a buffer cannot be allocated. */
bool af_gp_gemm_i8(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak, const void *w,
                   uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k, int accumulate,
                   int nth, const af_gp_fused *f);

#endif /* AF_GEMM_INT8_H */
