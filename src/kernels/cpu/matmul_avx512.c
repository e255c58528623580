/*
 * matmul_avx512.c — AVX-512 kernels for matmul.c (see matmul_internal.h for the contract):
 *  - panel: 8 tokens x 32 outputs register tile (16 zmm accumulators), masked loads/stores at the
 *    right edge; x broadcast from memory, the packed panel P read as two zmm per k.
 *  - decode: integer dot products with AVX512-VNNI vpdpbusd on 256-bit vectors
 *    (u8 weights x s8 activations -> i32), unpacking in matmul_unpack.h; falls back to the AVX2
 *    decode (vpmaddubsw) when the CPU lacks VNNI.
 *  - dequant: matmul_unpack.h (AVX2 width).
 * Compiled for baseline x86-64; every function carries the AVX-512 target attribute and is only
 * called when af_kernel_path() == AF_KPATH_AVX512.
 */
#if defined(__x86_64__)

#define AF_MM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")))
#define AF_MM_DOT(u, q) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (q))

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack.h"

/* C[0..mr)[0..32) (+)= X[0..mr)[0..k) · P[0..k)[0..32); nh = number of 16-wide halves in use. */
AF_MM_INLINE void mk512(int mr, int nh, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                        const float *p, int64_t spk, __mmask16 m0, __mmask16 m1, float *c,
                        int64_t ldc, int accumulate) {
    __m512 a0[8], a1[8];
    for (int i = 0; i < mr; i++) {
        a0[i] = _mm512_setzero_ps();
        a1[i] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; kk++) {
        __m512 w0 = _mm512_maskz_loadu_ps(m0, p);
        __m512 w1 = nh > 1 ? _mm512_maskz_loadu_ps(m1, p + 16) : _mm512_setzero_ps();
        p += spk;
        for (int i = 0; i < mr; i++) {
            __m512 xb = _mm512_set1_ps(x[i * sxt]);
            a0[i] = _mm512_fmadd_ps(xb, w0, a0[i]);
            if (nh > 1) a1[i] = _mm512_fmadd_ps(xb, w1, a1[i]);
        }
        x += sxk;
    }
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            a0[i] = _mm512_add_ps(a0[i], _mm512_maskz_loadu_ps(m0, ci));
            if (nh > 1) a1[i] = _mm512_add_ps(a1[i], _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, a0[i]);
        if (nh > 1) _mm512_mask_storeu_ps(ci + 16, m1, a1[i]);
    }
}

AF_MM_INLINE void mk512_h(int nh, int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                          const float *p, int64_t spk, __mmask16 m0, __mmask16 m1, float *c,
                          int64_t ldc, int acc) {
    int64_t t = 0;
    for (; t + 8 <= m; t += 8) mk512(8, nh, k, x + t * sxt, sxt, sxk, p, spk, m0, m1, c + t * ldc, ldc, acc);
    x += t * sxt;
    c += t * ldc;
    switch (m - t) {
    case 1: mk512(1, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 2: mk512(2, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 3: mk512(3, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 4: mk512(4, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 5: mk512(5, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 6: mk512(6, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    case 7: mk512(7, nh, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, acc); break;
    default: break;
    }
}

static AF_MM_TARGET void panel512(int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                                  const float *p, int64_t spk, int nr, float *c, int64_t ldc,
                                  int accumulate) {
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    if (nr > 16)
        mk512_h(2, m, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, accumulate);
    else
        mk512_h(1, m, k, x, sxt, sxk, p, spk, m0, m1, c, ldc, accumulate);
}

static AF_MM_TARGET bool decode512(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0,
                                   int64_t o1, const af_mm_xq *xq, int64_t n, float *y,
                                   int64_t ldy, int acc) {
    if (!af_cpu()->avx512_vnni) return af_mm_ops_avx2.decode(type, w, rb, o0, o1, xq, n, y, ldy, acc);
    return mm_decode(type, w, rb, o0, o1, xq, n, y, ldy, acc);
}

const af_mm_ops af_mm_ops_avx512 = {32, panel512, mm_dequant, mm_dot, decode512};

#else
typedef int af_matmul_avx512_empty; /* ISO C forbids an empty translation unit */
#endif
