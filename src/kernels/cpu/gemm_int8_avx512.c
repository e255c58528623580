/*
 * gemm_int8_avx512.c — the AVX512-VNNI pieces of the int8 frozen products (gemm_int8.c): row
 * quantization to int8 with one scale per row, the u8 interleave of weight rows, and an 8 x 32
 * micro-kernel on VPDPBUSD (Intel SDM, "VPDPBUSD — Multiply and Add Unsigned and Signed Bytes":
 * for each 32-bit lane, acc += sum of four products u8 x s8, exact in int32).
 *
 * Quantization (gemm_int8.c gives the formulas): q = round(x·s·(127/amax)) to nearest even
 * (VCVTPS2DQ under the default MXCSR), |q| <= 127; B is stored as u8 = q + 128 and A as s8, so
 * sum u8(B)·s8(A) = sum qB·qA + 128·sum qA, the second term removed with A's row sums.
 * Compiled for baseline x86-64; every function carries a target attribute and is reached only
 * through the AVX-512 table of a CPU with AVX512_VNNI (kernels.c).
 */
#if defined(__x86_64__)

#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/kernels.h"

#include <immintrin.h>
#include <math.h>

#define I8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

static I8_TARGET inline __mmask16 tail16(int64_t left) {
    return (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
}

/* max_k |x[k]·s[k]| (s NULL: 1) for k < n; NaN in: NaN out. */
I8_TARGET float af_i8_amax(const float *x, const float *s, int64_t n) {
    __m512 m = _mm512_setzero_ps();
    __m512i nan = _mm512_setzero_si512();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 t = tail16(n - k);
        __m512 v = _mm512_maskz_loadu_ps(t, x + k);
        if (s) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(t, s + k));
        nan = _mm512_or_si512(nan, _mm512_movm_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)));
        m = _mm512_max_ps(m, _mm512_abs_ps(v));
    }
    float r = _mm512_reduce_max_ps(m);
    return _mm512_reduce_or_epi32(nan) ? NAN : r;
}

/* q[k] = round(x[k]·s[k]·inv) + off for k < n (int8 bytes, off 0: s8, 128: u8), bytes n .. npad - 1
 * set to off; sums[c] = sum of round(x·s·inv) over k in [c·kc, (c+1)·kc) (kc a multiple of 16).
 * Values are clamped to [-127, 127] (NaN gives -127; the caller's scale is NaN then). */
I8_TARGET void af_i8_quant_row(const float *x, const float *s, float inv, int64_t n, int64_t npad, int off,
                               uint8_t *q, int64_t kc, int32_t *sums) {
    const __m512 vi = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), vo = _mm512_set1_epi32(off);
    __m512i acc = _mm512_setzero_si512();
    int64_t c = 0;
    for (int64_t k = 0; k < npad; k += 16) {
        __mmask16 t = tail16(n - k > 0 ? n - k : 0), st = tail16(npad - k);
        __m512 v = _mm512_maskz_loadu_ps(t, x + k);
        if (s) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(t, s + k));
        __m512i r = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vi)), lo), hi);
        r = _mm512_maskz_mov_epi32(t, r);
        if (sums) acc = _mm512_add_epi32(acc, r);
        _mm_mask_storeu_epi8(q + k, st, _mm512_cvtepi32_epi8(_mm512_add_epi32(r, vo)));
        if (sums && ((k + 16) % kc == 0 || k + 16 >= npad)) {
            sums[c++] = _mm512_reduce_add_epi32(acc);
            acc = _mm512_setzero_si512();
        }
    }
}

/* dst[j] = r0[j] | r1[j] << 8 | r2[j] << 16 | r3[j] << 24 for j < n: four byte rows (consecutive k)
 * into the dwords of B's panels, where 16 consecutive j of one panel row are contiguous (dst is
 * the panel row of j0, the caller's 32-column panels are split here: j0 % 32 + n <= 32). */
I8_TARGET void af_i8_interleave4(const uint8_t *const r[4], int64_t n, uint32_t *dst) {
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 t = tail16(n - j);
        __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, r[0] + j));
        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, r[1] + j)), 8));
        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, r[2] + j)), 16));
        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, r[3] + j)), 24));
        _mm512_mask_storeu_epi32(dst + j, t, v);
    }
}

/* C[i][j] (+)= float(sum_q dot(bp[q*32 + j], ap[q*8 + i]) - comp[i]) · (sb[j]·sa[i]) for i < mr <= 8,
 * j < nr <= 32, q < kq: bp u8 quads, ap s8 quads; 16 zmm int32 accumulators, two aligned zmm of B
 * and eight 32-bit broadcasts of A per quad. ap [kq][8], bp [kq][32] 64-byte aligned; comp, sa: 8
 * entries, sb: 32. Only mr rows and nr columns of C are touched. */
I8_TARGET void af_i8_ukernel(int mr, int64_t kq, const uint32_t *ap, const uint32_t *bp, const int32_t *comp,
                             const float *sa, const float *sb, float *c, int64_t ldc, int nr, int accumulate) {
    __m512i a0[8], a1[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) a0[i] = a1[i] = _mm512_setzero_si512();
    for (int64_t q = 0; q < kq; q++) {
        __m512i b0 = _mm512_load_si512(bp), b1 = _mm512_load_si512(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m512i x = _mm512_set1_epi32((int)ap[i]);
            a0[i] = _mm512_dpbusd_epi32(a0[i], b0, x);
            a1[i] = _mm512_dpbusd_epi32(a1[i], b1, x);
        }
        ap += 8;
        bp += 32;
    }
    const __mmask16 m0 = tail16(nr), m1 = tail16(nr > 16 ? nr - 16 : 0);
    const __m512 s0 = _mm512_maskz_loadu_ps(m0, sb), s1 = _mm512_maskz_loadu_ps(m1, sb + 16);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        const __m512i ci32 = _mm512_set1_epi32(comp[i]);
        const __m512 si = _mm512_set1_ps(sa[i]);
        __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0[i], ci32)), _mm512_mul_ps(s0, si));
        __m512 v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1[i], ci32)), _mm512_mul_ps(s1, si));
        if (accumulate) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), v1);
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}

/* int8 part of the AVX-512 dispatch table (kernels.h); only in the table of CPUs with AVX512_VNNI. */
const af_gp_i8_ops af_gp_i8_ops_avx512 = {af_i8_amax, af_i8_quant_row, af_i8_interleave4, af_i8_ukernel, NULL};
/* the same with the AMX-INT8 micro-kernel (gemm_amx.c), in the AMX table */
const af_gp_i8_ops af_gp_i8_ops_amx = {af_i8_amax, af_i8_quant_row, af_i8_interleave4, af_i8_ukernel, af_i8_amx_ukernel};

#else
typedef int af_gemm_int8_avx512_empty; /* ISO C forbids an empty translation unit */
#endif
