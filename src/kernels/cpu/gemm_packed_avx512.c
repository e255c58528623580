/*
 * gemm_packed_avx512.c — AVX-512 pieces of the packed GEMM (gemm_packed.c): the transposing
 * packer of A blocks and B panels (f32 or bf16 pairs), and, on CPUs with AVX512_BF16, the
 * conversion of f32 operands to bfloat16 pairs and an 8 x 32 micro-kernel built on
 * VDPBF16PS (Intel SDM, "VDPBF16PS — Dot Product of BF16 Pairs Accumulated Into Packed Single
 * Precision"): for each 32-bit lane, acc += a.lo*b.lo + a.hi*b.hi with the bf16 products formed
 * exactly and accumulated in f32 (round-to-nearest-even, denormal inputs and outputs flushed to
 * zero, as the instruction defines).
 *
 * Operands are rounded to bfloat16 once, when packed, with round-to-nearest-even
 * (VCVTNEPS2BF16; NaN stays NaN). This is what PyTorch's CPU autocast does for Linear layers
 * (bf16 inputs and weights, f32 accumulation inside oneDNN), so the error model is the same:
 * relative error of each operand <= 2^-9, of each product <= ~2^-8, summed in f32:
 *   |C - C_exact| <= (2^-8 + k·2^-24) · sum_k |A(t,k)|·|B(k,j)|   (tests/test_matmul.c).
 * A pair packs two consecutive k: lane value = bf16(x[k]) | bf16(x[k+1]) << 16.
 * Compiled for baseline x86-64; every function carries a target attribute; the bf16 ones are
 * called only when af_cpu()->avx512_bf16 and the AVX-512 kernel path is in use, the f32 packer
 * only on the AVX-512 path.
 */
#if defined(__x86_64__)

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"

#include <immintrin.h>

#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512dq,avx2,fma")))
#define GP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

/* Transpose 8 rows of 16 dwords (r[i] lane q = element (i, q)) and store row q of the result,
 * the 8 dwords (0, q) .. (7, q), at dst + q*ldd for q < nq. Three shuffle stages (32-bit
 * unpack, 64-bit unpack, 128-bit lane moves), 24 shuffles for 128 elements. */
GP_TARGET static inline void tr8x16_store(const __m512i r[8], uint32_t *dst, int64_t ldd, int nq) {
    __m512i t[8], A[4], B[4];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);     /* lane L: q = 4L, 4L+1 */
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]); /* lane L: q = 4L+2, 4L+3 */
    }
    A[0] = _mm512_unpacklo_epi64(t[0], t[2]); /* rows 0-3, q = 4L */
    A[1] = _mm512_unpackhi_epi64(t[0], t[2]); /* q = 4L+1 */
    A[2] = _mm512_unpacklo_epi64(t[1], t[3]); /* q = 4L+2 */
    A[3] = _mm512_unpackhi_epi64(t[1], t[3]); /* q = 4L+3 */
    B[0] = _mm512_unpacklo_epi64(t[4], t[6]); /* rows 4-7 */
    B[1] = _mm512_unpackhi_epi64(t[4], t[6]);
    B[2] = _mm512_unpacklo_epi64(t[5], t[7]);
    B[3] = _mm512_unpackhi_epi64(t[5], t[7]);
    for (int m = 0; m < 4; m++) {
        __m512i x = _mm512_shuffle_i32x4(A[m], B[m], _MM_SHUFFLE(1, 0, 1, 0)); /* A.l0 A.l1 B.l0 B.l1 */
        __m512i y = _mm512_shuffle_i32x4(A[m], B[m], _MM_SHUFFLE(3, 2, 3, 2)); /* A.l2 A.l3 B.l2 B.l3 */
        x = _mm512_shuffle_i32x4(x, x, _MM_SHUFFLE(3, 1, 2, 0)); /* q = m | q = 4+m */
        y = _mm512_shuffle_i32x4(y, y, _MM_SHUFFLE(3, 1, 2, 0)); /* q = 8+m | q = 12+m */
        if (m < nq) _mm256_storeu_si256((__m256i *)(dst + m * ldd), _mm512_castsi512_si256(x));
        if (4 + m < nq) _mm256_storeu_si256((__m256i *)(dst + (4 + m) * ldd), _mm512_extracti64x4_epi64(x, 1));
        if (8 + m < nq) _mm256_storeu_si256((__m256i *)(dst + (8 + m) * ldd), _mm512_castsi512_si256(y));
        if (12 + m < nq) _mm256_storeu_si256((__m256i *)(dst + (12 + m) * ldd), _mm512_extracti64x4_epi64(y, 1));
    }
}

/* f32: dst[q*ldd + i] = src[i][q] for q < kc, i < 8 (src[i] NULL: zeros). */
GP_TARGET void af_gp_tpack_f32(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd) {
    for (int64_t q0 = 0; q0 < kc; q0 += 16) {
        int nq = (int)(kc - q0 < 16 ? kc - q0 : 16);
        __mmask16 m = (__mmask16)(nq == 16 ? 0xFFFF : (1u << nq) - 1);
        __m512i r[8];
        for (int i = 0; i < 8; i++)
            r[i] = src[i] ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src[i] + q0)) : _mm512_setzero_si512();
        tr8x16_store(r, dst + q0 * ldd, ldd, nq);
    }
}

/* bf16 pairs: dst[q*ldd + i] = bf16(src[i][2q]) | bf16(src[i][2q+1]) << 16 for q < kc/2 (kc even),
 * i < 8 (src[i] NULL: zeros). */
BF_TARGET void af_gp_tpack_bf16(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd) {
    for (int64_t k0 = 0; k0 < kc; k0 += 32) {
        int64_t rem = kc - k0;
        int nq = (int)(rem < 32 ? rem / 2 : 16);
        __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
        __mmask16 m1 = (__mmask16)(rem >= 32 ? 0xFFFF : rem > 16 ? (1u << (rem - 16)) - 1 : 0);
        __m512i r[8];
        for (int i = 0; i < 8; i++)
            r[i] = src[i] ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, src[i] + k0 + 16),
                                                        _mm512_maskz_loadu_ps(m0, src[i] + k0))
                          : _mm512_setzero_si512();
        tr8x16_store(r, dst + (k0 / 2) * ldd, ldd, nq);
    }
}

/* dst[j] = bf16(lo[j]) | bf16(hi[j]) << 16 for j < n: one two-source conversion (lo's 16 values in
 * the low words, hi's in the high ones) and one word shuffle interleaving them, per 16 pairs
 * (bitwise the two one-source conversions, zero-extensions, shift and or it replaced: 1.06-1.11x) */
BF_TARGET void af_gp_bf16_pair_rows(const float *lo, const float *hi, uint32_t *dst, int64_t n) {
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                           6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
        __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m, hi + j), _mm512_maskz_loadu_ps(m, lo + j));
        _mm512_mask_storeu_epi32(dst + j, m, _mm512_permutexvar_epi16(inter, v));
    }
}

/* dst[q*8 + i] = bf16(src[2q*s + i]) | bf16(src[(2q+1)*s + i]) << 16 for q < kp, i < nrow <= 8 (rows
 * i >= nrow: 0): an A micro-panel from a column-major block (the transposed operands of the LoRA
 * gradients), one 8-lane conversion per pair of k instead of a 16-lane call per pair. */
BF_TARGET void af_gp_bf16_pair_cols(const float *src, int64_t s, int64_t kp, int64_t nrow, uint32_t *dst) {
    const __mmask8 m = (__mmask8)(nrow >= 8 ? 0xFF : (1u << nrow) - 1);
    for (int64_t q = 0; q < kp; q++) {
        __m128i l = (__m128i)_mm256_cvtneps_pbh(_mm256_maskz_loadu_ps(m, src + 2 * q * s));
        __m128i h = (__m128i)_mm256_cvtneps_pbh(_mm256_maskz_loadu_ps(m, src + (2 * q + 1) * s));
        _mm256_storeu_si256((__m256i *)(dst + q * 8),
                            _mm256_or_si256(_mm256_cvtepu16_epi32(l), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
}

/* C[i][j] (+)= sum_p dot(ap[p*8 + i], bp[p*32 + j]) over kp k-pairs, i < mr <= 8, j < nr <= 32:
 * 16 zmm accumulators, per pair two aligned zmm of B and eight 32-bit broadcasts of A. Padded
 * rows/columns of the packed operands are zero; only mr rows and nr columns of C are touched. */
BF_TARGET void af_gp_ukernel_bf16(int mr, int64_t kp, const uint32_t *ap, const uint32_t *bp, float *c,
                                  int64_t ldc, int nr, int accumulate) {
    __m512 a0[8], a1[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)ap[i]);
            a0[i] = _mm512_dpbf16_ps(a0[i], x, b0);
            a1[i] = _mm512_dpbf16_ps(a1[i], x, b1);
        }
        ap += 8;
        bp += 32;
    }
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            a0[i] = _mm512_add_ps(a0[i], _mm512_maskz_loadu_ps(m0, ci));
            a1[i] = _mm512_add_ps(a1[i], _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, a0[i]);
        _mm512_mask_storeu_ps(ci + 16, m1, a1[i]);
    }
}

/* bf16 part of the AVX-512 dispatch table (kernels.h); used only where the CPU has AVX512_BF16. */
const af_gp_bf16_ops af_gp_bf16_ops_avx512 = {af_gp_tpack_bf16, af_gp_bf16_pair_rows, af_gp_ukernel_bf16,
                                              af_gp_bf16_pair_cols, NULL, NULL, NULL};
/* the same with the AMX tile kernels (gemm_amx.c) for A contiguous in k (rows) or in i (columns) */
const af_gp_bf16_ops af_gp_bf16_ops_amx = {af_gp_tpack_bf16,  af_gp_bf16_pair_rows, af_gp_ukernel_bf16,
                                           af_gp_bf16_pair_cols, af_gp_amx_pack_a,  af_gp_amx_pack_at,
                                           af_gp_amx_ukernel};

#else
typedef int af_gemm_bf16_avx512_empty; /* ISO C forbids an empty translation unit */
#endif
