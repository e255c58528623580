/*
 * vexp.h — e^x on vectors of float32 for the CPU kernels (AVX-512F and AVX2+FMA), header-only so
 * the element-wise loops that need it (SiLU/sigmoid, softmax, attention's online softmax) inline it.
 * The scalar path of those kernels keeps libm's expf; af_vexpf (ops.h) is the array form with the
 * run-time choice of path.
 *
 * Method (Cephes expf, S. Moshier; as in the SSE/AVX "sse_mathfun" ports):
 *   x = k·ln2 + r, k = round(x·log2 e), |r| <= ln2/2, with ln2 split in two (Cody–Waite: the first
 *   part has 9 significant bits, so k·C1 is exact for |k| < 2^15);
 *   e^r ≈ 1 + (r + r²·P(r)), P of degree 5 with Cephes' minimax coefficients (polynomial error
 *   ~1e-9 relative); the "1 +" is the last, single rounding;
 *   e^x = e^r · 2^k, the scaling exact except where the result is subnormal (one rounding there).
 * Accuracy against double exp, measured once over every float in [-104.5, 90] (2.24e9 inputs):
 * max relative error 8.5e-8 (1.01 ulp) for normal results, 0.75 subnormal ulp for subnormal ones,
 * AVX2 and AVX-512 identical on every input; tests/test_ops.c re-checks every 509th float
 * (relative error <= 1.5e-7) and the special values.
 * Special values, as expf: x > 88.7228 → +inf (also +inf); x < -103.98 → +0 (also -inf), results
 * between 2^-149 and 2^-126 subnormal; NaN → NaN (the clamp keeps NaN: min/max return their SECOND
 * operand when either is NaN, and x is passed second).
 * AVX-512 scales with vscalefps; AVX2 multiplies by 2^k1·2^k2 (k1 = k>>1, k2 = k−k1, both normal
 * exponents for k in [-150, 128]): the two give bit-identical results.
 */
#ifndef AF_VEXP_H
#define AF_VEXP_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_VEXP_X86 1
#define AF_VEXP_T256 __attribute__((target("avx2,fma")))
#define AF_VEXP_T512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma")))

#define AF_VEXP_LOG2E 1.44269504088896341f
#define AF_VEXP_C1 0.693359375f        /* ln2 high part (9 significant bits) */
#define AF_VEXP_C2 (-2.12194440e-4f)   /* ln2 − C1 */
#define AF_VEXP_P0 1.9875691500e-4f
#define AF_VEXP_P1 1.3981999507e-3f
#define AF_VEXP_P2 8.3334519073e-3f
#define AF_VEXP_P3 4.1665795894e-2f
#define AF_VEXP_P4 1.6666665459e-1f
#define AF_VEXP_P5 5.0000001201e-1f
#define AF_VEXP_HI 89.0f    /* e^89 > FLT_MAX: every input above this overflows anyway */
#define AF_VEXP_LO (-104.0f) /* e^-104 < 2^-150: every input below this rounds to 0 anyway */

AF_VEXP_T512 static inline __m512 af_vexp_512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(AF_VEXP_HI), _mm512_max_ps(_mm512_set1_ps(AF_VEXP_LO), x));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(AF_VEXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(AF_VEXP_C1), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(AF_VEXP_C2), r);
    __m512 p = _mm512_set1_ps(AF_VEXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AF_VEXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AF_VEXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AF_VEXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AF_VEXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AF_VEXP_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

AF_VEXP_T256 static inline __m256 af_vexp_256(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(AF_VEXP_HI), _mm256_max_ps(_mm256_set1_ps(AF_VEXP_LO), x));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(AF_VEXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(AF_VEXP_C1), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(AF_VEXP_C2), r);
    __m256 p = _mm256_set1_ps(AF_VEXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AF_VEXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AF_VEXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AF_VEXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AF_VEXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AF_VEXP_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    /* 2^k = 2^k1 · 2^k2: p·2^k1 is exact (normal), the second product rounds once */
    __m256i ki = _mm256_cvtps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
#else
#define AF_VEXP_X86 0
#endif

#endif /* AF_VEXP_H */
