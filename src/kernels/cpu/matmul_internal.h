/*
 * matmul_internal.h — private contract between the matmul driver (matmul.c: dispatch, tiling,
 * threads, scalar path) and the per-ISA kernel files (matmul_avx2.c, matmul_avx512.c).
 * Not used outside src/kernels/cpu/matmul*.c.
 *
 * Every kernel path provides an af_mm_ops table of kernels (part of its kernels.h af_kernels,
 * reached as ctx->k->mm); the driver does the rest:
 *  - panel:   C[t, j] (+)= sum_k X(t, k) * P(k, j) for t < m, j < nr (nr <= ops.nr), where
 *             X(t, k) = x[t*sxt + k*sxk] and P(k, j) = p[k*spk + j] (only j < nr is read).
 *             This one strided f32 micro-kernel driver serves the dequantized-tile path of
 *             af_matmul_xwt (P = packed W tile, transposed), af_matmul_dyw (P = W rows), and the
 *             three f32 GEMMs.
 *  - dequant: rows [r0, r0+nr) x columns [k0, k0+kc) of a weight matrix in block format `type`
 *             (row stride row_bytes) to f32 out[r*ldo + k]; k0 and kc multiples of the block size.
 *  - dot:     f32 dot products of one (dequantized) weight row with n <= AF_MM_DECODE_N tokens.
 *  - decode:  y[t*ldy + o] (+)= sum_k x[t, k] * W[o, k] for o in [o0, o1), t < n <= AF_MM_DECODE_N,
 *             from int8-quantized activations (af_mm_xq below) and integer dot products; NULL if
 *             the path has none (the driver then uses the f32 tile path). Opt-in only
 *             (ctx->int8_act).
 *  - decode_f32: the same product from f32 activations x[t*in + k], exact up to f32 rounding:
 *             each weight chunk is dequantized in registers to the same f32 values as
 *             af_dequantize_row and multiplied-added in f32 (no int8 rounding of x). NULL, or
 *             false for an unsupported type, sends the driver to the dequant + dot fallback.
 */
#ifndef AF_MATMUL_INTERNAL_H
#define AF_MATMUL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* Largest token count handled by the integer decode kernels. */
#define AF_MM_DECODE_N 4

/* Activations quantized per 32-element block, like ggml's Q8_0 activation side:
 *   d[t*nb32 + b]      = max_j |x[t, 32b + j]| / 127            (f32; 0 for an all-zero block)
 *   q[t*in + k]        = round(x[t, k] / d), clamped to [-127, 127]   (int8, never -128)
 *   sq[t*nb16 + g]     = d * sum of the 16 int8 q in group g             (for offsets and mins)
 * Error bound: |x - d*q| <= d/2 per element (plus f32 rounding), so
 * |y_int - y_exact| <= sum_k |W[o,k]| * d_block(k) / 2. */
typedef struct af_mm_xq {
    int8_t *q;
    float *d, *sq;
    int64_t in, nb32, nb16;
} af_mm_xq;

typedef struct af_mm_ops {
    int nr; /* panel width (outputs per micro-tile), <= 32 */
    void (*panel)(int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk, const float *p,
                  int64_t spk, int nr, float *c, int64_t ldc, int accumulate);
    void (*dequant)(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t r0, int64_t nr,
                    int64_t k0, int64_t kc, float *out, int64_t ldo);
    /* acc[t] += sum_k x[t*ldx + k] * w[k], t < n (f32 dot products of the decode fallback). */
    void (*dot)(int64_t n, int64_t k, const float *x, int64_t ldx, const float *w, float *acc);
    /* Returns false when it does not handle `type` (the driver falls back to the tile path). */
    bool (*decode)(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t o0, int64_t o1,
                   const af_mm_xq *xq, int64_t n, float *y, int64_t ldy, int accumulate);
    /* x: [n, in] f32 row-major, n in 1..AF_MM_DECODE_N; W rows of row_bytes bytes. */
    bool (*decode_f32)(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t o0, int64_t o1,
                       const float *x, int64_t in, int64_t n, float *y, int64_t ldy, int accumulate);
    /* Packed micro-kernel of gemm_packed.c (NULL: not provided): C[i][j] (+)= sum_kk
     * ap[kk*8 + i] * bp[kk*32 + j] for i < mr (<= 8), j < nr (<= 32); ap [kc][8], bp [kc][32],
     * both 64-byte aligned; C row stride ldc; accumulate adds to C, else C is overwritten. */
    void (*ukernel)(int mr, int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int nr,
                    int accumulate);
    /* Transposing packer of gemm_packed.c (NULL when ukernel is): dst[q*ldd + i] = src[i][q] for
     * q < kc, i < 8 (src[i] NULL: zeros in column i); dst is read as f32 by ukernel. */
    void (*tpack)(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd);
} af_mm_ops;

/* The tables themselves (af_mm_ops_scalar, _avx2, _avx512) are declared in kernels.h. Tests and
 * benchmarks compare decode_f32 with the dequant + dot fallback (xwt_dot) through the context hook
 * AF_CTX_FUSED_DECODE (kernels/ctx.h). */

#endif /* AF_MATMUL_INTERNAL_H */
