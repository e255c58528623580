/*
 * gemm_packed.c — cache-blocked GEMM on packed operands for the large products of training and
 * prompt evaluation (the structure of Goto & van de Geijn, "Anatomy of high-performance matrix
 * multiplication", ACM TOMS 2008, and BLIS):
 *
 *   C[m, N] (+)= A[m, K] · B[K, N]
 *
 *  - B is packed ONCE per call into column panels of AF_GP_NR = 32 columns, [N/32][K][32] f32
 *    (zero-padded at the right edge), dequantizing the weight rows on the way: for x·Wᵀ the panel
 *    holds Wᵀ (B[k][j] = W[j][k]), for dy·W it holds W (B[k][j] = W[k][j]); f32 operands with any
 *    row stride use the same code (type F32).
 *  - A is packed per task and per K-chunk of AF_GP_KC into row micro-panels [MC/8][KC][8]
 *    (zero-padded rows), so the micro-kernel reads both operands contiguously.
 *  - The micro-kernel (ops.ukernel, AVX-512 only) computes an 8 x 32 tile with 16 zmm
 *    accumulators over one K-chunk and adds into / stores C with masks at the edges.
 *  - Threads: OpenMP over (block of MC rows) x (group of panels) tasks; each element of C is
 *    computed by one task in a fixed order (K-chunks ascending), so results do not depend on the
 *    thread count.
 * Used when the kernel path provides ops.ukernel, the product is large enough, and the packed B
 * fits in AF_GP_MAX_B bytes; otherwise the callers keep their tile paths. Exact up to f32
 * summation order (each C element is a sequential f32 FMA chain over k, chunked by AF_GP_KC).
 */
#include "kernels/cpu/gemm_packed.h"

#include "core/core.h"
#include "core/threads.h"

#include <string.h>

#ifdef _OPENMP
#define GP_OMP(x) _Pragma(#x)
#else
#define GP_OMP(x)
#endif

#define MC 128               /* rows of A per task (packed block MC x KC = 128 KiB, in L2) */
#define NG 4                 /* panels per task (128 columns of C) */
#define MAX_B (64u << 20)    /* largest packed B (bytes) this path allocates */

int64_t af_gp_packed_b_floats(int64_t k, int64_t n) { return (n + AF_GP_NR - 1) / AF_GP_NR * AF_GP_NR * k; }

bool af_gp_usable(const af_mm_ops *ops, int64_t m, int64_t n, int64_t k) {
    /* The choice must not depend on m: the engine splits the rows of a product into blocks and
     * relies on getting bitwise the same result as one call (tests/test_engine.c). */
    if (!ops->ukernel || m <= AF_MM_DECODE_N || n < 16 || k < 16 || n * k < 65536) return false;
    return (double)af_gp_packed_b_floats(k, n) * sizeof(float) <= (double)MAX_B;
}

/* B panels from W[N, K] (rows of W are columns of B): bp[(j/32)*K*32 + kk*32 + j%32] = W[j][kk].
 * Rows are dequantized in K-chunks of AF_GP_KC (a multiple of every block size) into a buffer
 * and scattered with stride 32. */
static void pack_b_trans(const af_mm_ops *ops, float *bp, const uint8_t *w, uint32_t type, size_t rb,
                         int64_t n, int64_t k) {
    int64_t npan = (n + AF_GP_NR - 1) / AF_GP_NR;
    GP_OMP(omp for schedule(static))
    for (int64_t p = 0; p < npan; p++) {
        float row[AF_GP_KC] __attribute__((aligned(64)));
        float *dst = bp + p * k * AF_GP_NR;
        int64_t j0 = p * AF_GP_NR, nr = n - j0 < AF_GP_NR ? n - j0 : AF_GP_NR;
        if (nr < AF_GP_NR) memset(dst, 0, (size_t)(k * AF_GP_NR) * sizeof(float));
        for (int64_t r = 0; r < nr; r++)
            for (int64_t k0 = 0; k0 < k; k0 += AF_GP_KC) {
                int64_t kc = k - k0 < AF_GP_KC ? k - k0 : AF_GP_KC;
                ops->dequant(type, w, (int64_t)rb, j0 + r, 1, k0, kc, row, kc);
                for (int64_t kk = 0; kk < kc; kk++) dst[(k0 + kk) * AF_GP_NR + r] = row[kk];
            }
    }
}

/* B panels from W[K, N] (rows of W are rows of B): bp[(j/32)*K*32 + kk*32 + j%32] = W[kk][j]. */
static void pack_b_rows(const af_mm_ops *ops, float *bp, const uint8_t *w, uint32_t type, size_t rb,
                        int64_t n, int64_t k) {
    GP_OMP(omp for schedule(static))
    for (int64_t kk = 0; kk < k; kk++) {
        float row[AF_GP_KC] __attribute__((aligned(64)));
        for (int64_t c0 = 0; c0 < n; c0 += AF_GP_KC) {
            int64_t cc = n - c0 < AF_GP_KC ? n - c0 : AF_GP_KC;
            ops->dequant(type, w, (int64_t)rb, kk, 1, c0, cc, row, cc);
            for (int64_t j = 0; j < cc; j += AF_GP_NR) {
                int64_t p = (c0 + j) / AF_GP_NR, nr = cc - j < AF_GP_NR ? cc - j : AF_GP_NR;
                float *dst = bp + p * k * AF_GP_NR + kk * AF_GP_NR;
                memcpy(dst, row + j, (size_t)nr * sizeof(float));
                if (nr < AF_GP_NR) memset(dst + nr, 0, (size_t)(AF_GP_NR - nr) * sizeof(float));
            }
        }
    }
}

/* A rows [t0, t0+mc) x columns [k0, k0+kc) -> ap[(t/8)][kk][t%8], zero rows past mc. */
static void pack_a(float *ap, const float *a, int64_t sat, int64_t sak, int64_t t0, int64_t mc, int64_t k0,
                   int64_t kc) {
    int64_t nb = (mc + 7) / 8;
    for (int64_t b = 0; b < nb; b++) {
        float *dst = ap + b * kc * 8;
        int64_t rows = mc - 8 * b < 8 ? mc - 8 * b : 8;
        if (sak == 1) {
            for (int64_t i = 0; i < rows; i++) {
                const float *src = a + (t0 + 8 * b + i) * sat + k0;
                for (int64_t kk = 0; kk < kc; kk++) dst[kk * 8 + i] = src[kk];
            }
        } else {
            for (int64_t kk = 0; kk < kc; kk++) {
                const float *src = a + (t0 + 8 * b) * sat + (k0 + kk) * sak;
                for (int64_t i = 0; i < rows; i++) dst[kk * 8 + i] = src[i * sat];
            }
        }
        for (int64_t i = rows; i < 8; i++)
            for (int64_t kk = 0; kk < kc; kk++) dst[kk * 8 + i] = 0.f;
    }
}

bool af_gp_gemm(const af_mm_ops *ops, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                int accumulate, int nth) {
    float *bp = af_malloc_aligned((size_t)af_gp_packed_b_floats(k, n) * sizeof(float));
    if (!bp) return false;
    const uint8_t *wb = (const uint8_t *)w;
    int64_t npan = (n + AF_GP_NR - 1) / AF_GP_NR;
    int64_t nmb = (m + MC - 1) / MC, ngr = (npan + NG - 1) / NG;
    if (nth < 1) nth = 1;
    GP_OMP(omp parallel num_threads(nth))
    {
        if (b_trans) pack_b_trans(ops, bp, wb, type, (size_t)ldw_bytes, n, k);
        else pack_b_rows(ops, bp, wb, type, (size_t)ldw_bytes, n, k);
        /* implicit barrier of the omp for above */
        float ap[MC * AF_GP_KC] __attribute__((aligned(64)));
        GP_OMP(omp for schedule(static))
        for (int64_t task = 0; task < nmb * ngr; task++) {
            int64_t mb = task / ngr, g = task % ngr;
            int64_t t0 = mb * MC, mc = m - t0 < MC ? m - t0 : MC;
            int64_t p0 = g * NG, p1 = p0 + NG < npan ? p0 + NG : npan;
            for (int64_t k0 = 0; k0 < k; k0 += AF_GP_KC) {
                int64_t kc = k - k0 < AF_GP_KC ? k - k0 : AF_GP_KC;
                int acc = k0 > 0 || accumulate;
                pack_a(ap, a, sat, sak, t0, mc, k0, kc);
                for (int64_t p = p0; p < p1; p++) {
                    int64_t j0 = p * AF_GP_NR;
                    int nr = (int)(n - j0 < AF_GP_NR ? n - j0 : AF_GP_NR);
                    const float *bpp = bp + p * k * AF_GP_NR + k0 * AF_GP_NR;
                    for (int64_t i0 = 0; i0 < mc; i0 += 8) {
                        int mr = (int)(mc - i0 < 8 ? mc - i0 : 8);
                        ops->ukernel(mr, kc, ap + (i0 / 8) * kc * 8, bpp, c + (t0 + i0) * ldc + j0, ldc, nr, acc);
                    }
                }
            }
        }
    }
    af_free_aligned(bp);
    return true;
}
