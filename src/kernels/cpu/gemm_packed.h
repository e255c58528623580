/* gemm_packed.h — cache-blocked GEMM on packed operands (gemm_packed.c), used by matmul.c for
 * large products when the kernel path has a packed micro-kernel (ops.ukernel). */
#ifndef AF_GEMM_PACKED_H
#define AF_GEMM_PACKED_H

#include "kernels/cpu/matmul_internal.h"

#include <stdbool.h>
#include <stdint.h>

#define AF_GP_NR 32  /* columns per packed B panel (= micro-tile width) */
#define AF_GP_KC 256 /* K-chunk: a multiple of every block size (32, 256) */

/* Floats of the packed B for B[k, n]: ceil(n/32)*32*k. */
int64_t af_gp_packed_b_floats(int64_t k, int64_t n);

/* True when af_gp_gemm should be used for C[m,n] = A[m,k]·B[k,n] on this path: ops.ukernel
 * present, m > AF_MM_DECODE_N, n >= 16, k >= 16, n*k >= 65536, packed B <= 64 MiB. Apart from
 * m > AF_MM_DECODE_N the choice does not depend on m, so a product split into row blocks gives
 * bitwise the result of one call. */
bool af_gp_usable(const af_mm_ops *ops, int64_t m, int64_t n, int64_t k);

/* C[m, n] (+)= A[m, k] · B[k, n], f32, row-major C with row stride ldc (floats).
 *  A(t, kk) = a[t*sat + kk*sak] (f32, any strides).
 *  B from rows of W (type `type`, any block format af_type_can_dequantize accepts, or F32), W's
 *  row stride ldw_bytes: b_trans = 1: B[kk][j] = W[j][kk] (W is [n, k], x·Wᵀ);
 *  b_trans = 0: B[kk][j] = W[kk][j] (W is [k, n], dy·W). Block types need the dequantized
 *  index (kk for b_trans, j otherwise) to start at multiples of AF_GP_KC, which holds.
 *  accumulate: add to C instead of overwriting it. nth: OpenMP threads (>= 1).
 * Returns false (C untouched) when the packed B cannot be allocated. Results do not depend on nth. */
bool af_gp_gemm(const af_mm_ops *ops, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                int accumulate, int nth);

#endif /* AF_GEMM_PACKED_H */
