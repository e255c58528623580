/*
 * matmul_avx2.c — AVX2+FMA kernels for matmul.c (see matmul_internal.h for the contract):
 *  - panel: 6 tokens x 16 outputs register tile (12 ymm accumulators); masked loads/stores
 *    (vmaskmovps) only for a partial right-edge panel.
 *  - decode: integer dot products with vpmaddubsw + vpmaddwd (u8 weights x s8 activations; the
 *    unsigned weight values are < 64, or |q| <= 128 for Q8_0 with the sign moved to x, so the
 *    pairwise i16 sums never saturate: 2*128*127 < 32767), unpacking in matmul_unpack.h.
 *  - dequant: matmul_unpack.h.
 * Compiled for baseline x86-64; every function carries the AVX2 target attribute and is only
 * called when af_kernel_path() selects AVX2 (or AVX-512 without VNNI, for decode).
 */
#if defined(__x86_64__)

#define AF_MM_TARGET __attribute__((target("avx2,fma,f16c")))
#define AF_MM_DOT(u, q) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1))

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack.h"

/* C[0..mr)[0..16) (+)= X[0..mr)[0..k) · P[0..k)[0..16); full: all 16 columns valid. */
AF_MM_INLINE void mk256(int mr, int full, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                        const float *p, int64_t spk, __m256i m0, __m256i m1, float *c, int64_t ldc,
                        int accumulate) {
    __m256 a0[6], a1[6];
    for (int i = 0; i < mr; i++) {
        a0[i] = _mm256_setzero_ps();
        a1[i] = _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; kk++) {
        __m256 w0 = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m0);
        __m256 w1 = full ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, m1);
        p += spk;
        for (int i = 0; i < mr; i++) {
            __m256 xb = _mm256_broadcast_ss(x + i * sxt);
            a0[i] = _mm256_fmadd_ps(xb, w0, a0[i]);
            a1[i] = _mm256_fmadd_ps(xb, w1, a1[i]);
        }
        x += sxk;
    }
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (full) {
            if (accumulate) {
                a0[i] = _mm256_add_ps(a0[i], _mm256_loadu_ps(ci));
                a1[i] = _mm256_add_ps(a1[i], _mm256_loadu_ps(ci + 8));
            }
            _mm256_storeu_ps(ci, a0[i]);
            _mm256_storeu_ps(ci + 8, a1[i]);
        } else {
            if (accumulate) {
                a0[i] = _mm256_add_ps(a0[i], _mm256_maskload_ps(ci, m0));
                a1[i] = _mm256_add_ps(a1[i], _mm256_maskload_ps(ci + 8, m1));
            }
            _mm256_maskstore_ps(ci, m0, a0[i]);
            _mm256_maskstore_ps(ci + 8, m1, a1[i]);
        }
    }
}

AF_MM_INLINE void mk256_f(int full, int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                          const float *p, int64_t spk, __m256i m0, __m256i m1, float *c,
                          int64_t ldc, int acc) {
    int64_t t = 0;
    for (; t + 6 <= m; t += 6) mk256(6, full, k, x + t * sxt, sxt, sxk, p, spk, m0, m1, c + t * ldc, ldc, acc);
    x += t * sxt;
    c += t * ldc;
    switch (m - t) {
    case 1: mk256(1, full, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 2: mk256(2, full, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 3: mk256(3, full, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 4: mk256(4, full, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 5: mk256(5, full, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    default: break;
    }
}

static AF_MM_TARGET void panel256(int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                                  const float *p, int64_t spk, int nr, float *c, int64_t ldc,
                                  int accumulate) {
    if (nr >= 16) {
        __m256i z = _mm256_setzero_si256();
        mk256_f(1, m, k, x, sxt, sxk, p, spk, z, z, c, ldc, accumulate);
        return;
    }
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), idx);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), idx);
    mk256_f(0, m, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, accumulate);
}

const af_mm_ops af_mm_ops_avx2 = {16, panel256, mm_dequant, mm_dot, mm_decode, NULL};

#else
typedef int af_matmul_avx2_empty; /* ISO C forbids an empty translation unit */
#endif
