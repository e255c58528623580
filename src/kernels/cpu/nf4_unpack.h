/*
 * nf4_unpack.h — AVX2 dequantization of NF4 blocks (kernels/nf4.h) for ops.dequant
 * (matmul_unpack.h mm_dequant), included by matmul_unpack.h after AF_MM_INLINE is defined.
 * Each 4-bit code is looked up in the 16-entry f32 table with two vpermps (entries 0-7, 8-15)
 * and a blend, then multiplied by the block's absmax: the same single f32 product as
 * af_nf4_dequantize_row, so the values are identical. Own code.
 */
#ifndef AF_NF4_UNPACK_H
#define AF_NF4_UNPACK_H

#include "kernels/nf4.h"

/* 8 values from 8 code bytes (one code 0..15 per byte) times d. */
AF_MM_INLINE __m256 mm_nf4_8(__m128i codes8, __m256 tlo, __m256 thi, __m256 d) {
    __m256i idx = _mm256_cvtepu8_epi32(codes8);
    __m256 lo = _mm256_permutevar8x32_ps(tlo, idx), hi = _mm256_permutevar8x32_ps(thi, idx);
    __m256 sel = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_mul_ps(_mm256_blendv_ps(lo, hi, sel), d);
}

/* n f32 values (n % 64 == 0) from the NF4 blocks at src. */
AF_MM_INLINE void mm_deq_nf4(const uint8_t *src, int64_t n, float *out) {
    const __m256 tlo = _mm256_loadu_ps(af_nf4_code), thi = _mm256_loadu_ps(af_nf4_code + 8);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t ib = 0; ib < n / AF_QK_NF4; ib++, src += 4 + AF_QK_NF4 / 2) {
        float absmax;
        memcpy(&absmax, src, 4);
        const __m256 d = _mm256_set1_ps(absmax);
        for (int c = 0; c < 2; c++, out += 32) {
            __m128i v = _mm_loadu_si128((const __m128i *)(src + 4 + 16 * c));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4), lo = _mm_and_si128(v, m4);
            __m128i a = _mm_unpacklo_epi8(hi, lo), b = _mm_unpackhi_epi8(hi, lo); /* element order */
            _mm256_storeu_ps(out, mm_nf4_8(a, tlo, thi, d));
            _mm256_storeu_ps(out + 8, mm_nf4_8(_mm_srli_si128(a, 8), tlo, thi, d));
            _mm256_storeu_ps(out + 16, mm_nf4_8(b, tlo, thi, d));
            _mm256_storeu_ps(out + 24, mm_nf4_8(_mm_srli_si128(b, 8), tlo, thi, d));
        }
    }
}

#endif /* AF_NF4_UNPACK_H */
