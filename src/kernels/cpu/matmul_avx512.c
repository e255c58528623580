/*
 * matmul_avx512.c — AVX-512 kernels for matmul.c (see matmul_internal.h for the contract):
 *  - panel: 8 tokens x 32 outputs register tile (16 zmm accumulators), masked loads/stores at the
 *    right edge; x broadcast from memory, the packed panel P read as two zmm per k.
 *  - decode: integer dot products with AVX512-VNNI vpdpbusd (u8 weights x s8 activations -> i32):
 *    Q4_0 / Q4_1 two 32-blocks per zmm, short rows in pairs sharing each load of x, scales
 *    applied per lane (decode512); the K-quants on 256-bit vectors with the unpacking of
 *    matmul_unpack.h; the AVX2 decode (vpmaddubsw) when the CPU lacks VNNI (af_mm_ops_avx512_novnni).
 *  - decode_f32 (the default decode, n <= 4): f32 activations; each weight row is dequantized in
 *    zmm registers to exactly the values of af_dequantize_row and multiplied-added in f32.
 *    4-bit types use a 16-entry f32 table per block (u*s + c for u = 0..15) read with vpermps,
 *    Q5_0/Q5_1 two tables selected by the qh bits as a write mask, Q8_0 q*d, other types
 *    mm_unpack + vcvtdq2ps + one fma. See the section comment for what was measured.
 *  - dequant: matmul_unpack.h (AVX2 width).
 * Compiled for baseline x86-64; every function carries the AVX-512 target attribute and is only
 * reached through the avx512 dispatch table (kernels.h).
 */
#if defined(__x86_64__)

#define AF_MM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")))
#define AF_MM_DOT(u, q) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (q))

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
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

/* AVX-512 CPUs without VNNI run the int8 decode of the AVX2 table (af_mm_ops_avx512_novnni,
 * chosen by af_kernels_for when the context is created). */
static AF_MM_TARGET bool decode512_novnni(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0,
                                          int64_t o1, const af_mm_xq *xq, int64_t n, float *y,
                                          int64_t ldy, int acc) {
    return af_mm_ops_avx2.decode(type, w, rb, o0, o1, xq, n, y, ldy, acc);
}

/* ---------------------------------------------------------------- f32 decode (ops.decode_f32) */

/* Weights are dequantized in registers to exactly the f32 values of af_dequantize_row (each is
 * u*s + c with u*s exact, rounded once) and multiplied-added with f32 x: the result is the
 * dequantize-then-multiply product up to f32 accumulation rounding. Two weight rows are done at
 * once (R = 2) so every x vector loaded from L1 serves both; per (row, token) two accumulators
 * alternate to hide the FMA latency. */

/* 16 f32 table entries u*s + c for u = 0..15: the dequantized values of a 4-bit group. */
AF_MM_INLINE __m512 f5_tab(float s, float c) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_fmadd_ps(iota, _mm512_set1_ps(s), _mm512_set1_ps(c));
}

/* The 32 values of one 32-block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as two zmm.
 * Q4_0/Q4_1: the 16 packed bytes are widened to dwords once; vpermps reads only the low 4 bits
 * of each index, so byte q gives tab[q & 15] and q >> 4 gives tab[q >> 4] without masking. */
AF_MM_INLINE void f5_w32(uint32_t t, const uint8_t *blk, __m512 *w0, __m512 *w1) {
    if (t == AF_TYPE_Q4_0 || t == AF_TYPE_Q4_1) {
        float s, c;
        if (t == AF_TYPE_Q4_1) {
            uint32_t dm;
            memcpy(&dm, blk, 4);
            __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
            s = _mm_cvtss_f32(v);
            c = _mm_cvtss_f32(_mm_movehdup_ps(v));
        } else {
            s = mm_h(blk);
            c = -8.f * s;
        }
        __m512 tab = f5_tab(s, c);
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + (t == AF_TYPE_Q4_1 ? 4 : 2))));
        *w0 = _mm512_permutexvar_ps(idx, tab);
        *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
        return;
    }
    if (t == AF_TYPE_Q5_0 || t == AF_TYPE_Q5_1) {
        /* 5-bit u = nibble + 16 * (bit of qh): the nibble picks from tab(u < 16) and the lanes
         * whose qh bit is set are re-picked from tab(u >= 16) (vpermps with a write mask). */
        float s, c;
        if (t == AF_TYPE_Q5_1) {
            uint32_t dm;
            memcpy(&dm, blk, 4);
            __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
            s = _mm_cvtss_f32(v);
            c = _mm_cvtss_f32(_mm_movehdup_ps(v));
        } else {
            s = mm_h(blk);
            c = -16.f * s;
        }
        const int o = t == AF_TYPE_Q5_1 ? 4 : 2;
        uint32_t qh;
        memcpy(&qh, blk + o, 4);
        __m512 lo = f5_tab(s, c), hi = f5_tab(s, c + 16.f * s);
        if (t == AF_TYPE_Q5_1) /* (u+16)*s + m rounded once, as af_dequantize_row */
            hi = _mm512_fmadd_ps(_mm512_add_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                              14, 15), _mm512_set1_ps(16.f)),
                                 _mm512_set1_ps(s), _mm512_set1_ps(c));
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + o + 4)));
        __m512i idx1 = _mm512_srli_epi32(idx, 4);
        *w0 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(idx, lo), (__mmask16)qh, idx, hi);
        *w1 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(idx1, lo), (__mmask16)(qh >> 16), idx1, hi);
        return;
    }
    if (t == AF_TYPE_Q8_0) { /* q*d, exact */
        __m512 d = _mm512_set1_ps(mm_h(blk));
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))), d);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))), d);
        return;
    }
    float s[2], b[2];
    mm_prep(t, blk, s, b);
    const float c = b[0] - (float)mm_off(t) * s[0];
    __m256i u = mm_unpack(t, blk, 0);
    __m128i h0 = _mm256_castsi256_si128(u), h1 = _mm256_extracti128_si256(u, 1);
    __m512i v0 = mm_signed(t) ? _mm512_cvtepi8_epi32(h0) : _mm512_cvtepu8_epi32(h0);
    __m512i v1 = mm_signed(t) ? _mm512_cvtepi8_epi32(h1) : _mm512_cvtepu8_epi32(h1);
    __m512 vs = _mm512_set1_ps(s[0]), vc = _mm512_set1_ps(c);
    *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v0), vs, vc);
    *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v1), vs, vc);
}

/* Per-block constants of a 256-value K-quant super-block, computed with vector instructions
 * (the scalar mm_prep was half the time of a Q4_K row):
 *  Q4_K: s[j] = d*sc_j, s[8+j] = -dmin*m_j for the 8 sub-blocks of 32 (6-bit sc/m unpacked four
 *        at a time as bytes of 32-bit words: docs/FORMATS.md §2 Q4_K, get_scale_min_k4);
 *  Q6_K: s[g] = d*sc_g, c[g] = -32*s[g] for the 16 groups of 16;
 *  other: s[g] and c[g] = b[g] - O*s[g] per 16-group from mm_prep. */
AF_MM_INLINE void f5_prep256(uint32_t t, const uint8_t *blk, float *s, float *c) {
    if (t == AF_TYPE_Q4_K) {
        uint32_t q[3], dm;
        memcpy(q, blk + 4, 12);
        memcpy(&dm, blk, 4);
        const uint32_t sc_lo = q[0] & 0x3f3f3f3fu, mn_lo = q[1] & 0x3f3f3f3fu;
        const uint32_t sc_hi = (q[2] & 0x0f0f0f0fu) | (((q[0] >> 6) & 0x03030303u) << 4);
        const uint32_t mn_hi = ((q[2] >> 4) & 0x0f0f0f0fu) | (((q[1] >> 6) & 0x03030303u) << 4);
        __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)mn_lo, (int)mn_hi)));
        __m128 h = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm)); /* d, dmin */
        __m512 k = _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_broadcastss_ps(h),
                                        _mm512_broadcastss_ps(_mm_sub_ps(_mm_setzero_ps(), _mm_movehdup_ps(h))));
        _mm512_storeu_ps(s, _mm512_mul_ps(f, k));
        return;
    }
    if (t == AF_TYPE_Q6_K) {
        __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
        __m512 v = _mm512_mul_ps(sc, _mm512_set1_ps(mm_h(blk + 208)));
        _mm512_storeu_ps(s, v);
        _mm512_storeu_ps(c, _mm512_mul_ps(v, _mm512_set1_ps(-32.f)));
        return;
    }
    float b[16];
    mm_prep(t, blk, s, b);
    const float O = (float)mm_off(t);
    for (int g = 0; g < 16; g++) c[g] = b[g] - O * s[g];
}

/* Values 64h .. 64h+63 (chunks 2h, 2h+1) of a 256-value K-quant super-block as four zmm, with
 * s/c from f5_prep256. Q4_K: 32 packed bytes hold chunk 2h in the low and chunk 2h+1 in the high
 * nibbles, one table each. Others: u from mm_unpack, value = u*s[g] + c[g]. */
AF_MM_INLINE void f5_w256(uint32_t t, const uint8_t *blk, int h, const float *s, const float *c, __m512 *W) {
    if (t == AF_TYPE_Q4_K) {
        const uint8_t *qs = blk + 16 + 32 * h;
        __m512i i0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
        __m512i i1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16)));
        __m512 t0 = f5_tab(s[2 * h], s[8 + 2 * h]), t1 = f5_tab(s[2 * h + 1], s[9 + 2 * h]);
        W[0] = _mm512_permutexvar_ps(i0, t0);
        W[1] = _mm512_permutexvar_ps(i1, t0);
        W[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(i0, 4), t1);
        W[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(i1, 4), t1);
        return;
    }
#pragma GCC unroll 2
    for (int jj = 0; jj < 2; jj++) {
        const int j = 2 * h + jj;
        __m256i u = mm_unpack(t, blk, j);
        __m512i v0 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(u));
        __m512i v1 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(u, 1));
        W[2 * jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v0), _mm512_set1_ps(s[2 * j]), _mm512_set1_ps(c[2 * j]));
        W[2 * jj + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v1), _mm512_set1_ps(s[2 * j + 1]),
                                        _mm512_set1_ps(c[2 * j + 1]));
    }
}

/* acc[i][v & 1] += W[v] * x[i][k + 16v .. +16) for i < nt, v < nv. */
AF_MM_INLINE void f5_fma(int nt, int nv, __m512 acc[AF_MM_DECODE_N][2], const __m512 *W, const float *x,
                         int64_t in, int64_t k) {
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[i][v & 1] = _mm512_fmadd_ps(W[v], _mm512_loadu_ps(x + i * in + k + 16 * v), acc[i][v & 1]);
}

/* y row o for nt tokens of a quantized type t (both compile-time constants). One row at a time:
 * interleaving two rows was measured 2-3x slower when W streams from DRAM (hardware prefetch). */
AF_MM_INLINE void f5_quant(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o, const float *x,
                           int64_t in, float *y, int64_t ldy, int accumulate) {
    const int bs = mm_bs(t), bb = mm_bb(t);
    const uint8_t *row = w + o * rb;
    __m512 acc[AF_MM_DECODE_N][2], W[4];
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    if (bs == 32) {
        int64_t k = 0;
        for (; k + 64 <= in; k += 64, row += 2 * bb) {
            mm_pf(row, 2 * bb);
            f5_w32(t, row, &W[0], &W[1]);
            f5_w32(t, row + bb, &W[2], &W[3]);
            f5_fma(nt, 4, acc, W, x, in, k);
        }
        if (k < in) {
            f5_w32(t, row, &W[0], &W[1]);
            f5_fma(nt, 2, acc, W, x, in, k);
        }
    } else {
        float s[16], c[16];
        for (int64_t k = 0; k < in; k += 256, row += bb) {
            mm_pf(row, bb);
            f5_prep256(t, row, s, c);
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                f5_w256(t, row, h, s, c, W);
                f5_fma(nt, 4, acc, W, x, in, k + 64 * h);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) {
        float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
        y[i * ldy + o] = accumulate ? y[i * ldy + o] + v : v;
    }
}

/* 16 f32 weights of an F32 / F16 / BF16 row from element k; m selects the valid lanes. */
AF_MM_INLINE __m512 f5_flt(uint32_t t, const uint8_t *row, int64_t k, __mmask16 m) {
    if (t == AF_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)(const void *)row + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)(const void *)row + k);
    if (t == AF_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* y row o for nt tokens of an F32 / F16 / BF16 matrix (any `in`, masked tail). */
AF_MM_INLINE void f5_float(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o, const float *x,
                           int64_t in, float *y, int64_t ldy, int accumulate) {
    const uint8_t *row = w + o * rb;
    __m512 acc[AF_MM_DECODE_N][2];
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    const int es = t == AF_TYPE_F32 ? 4 : 2; /* bytes per weight */
    int64_t k = 0;
    for (; k + 32 <= in; k += 32) {
        __m512 w0, w1;
        mm_pf(row + k * es, 32 * es);
        if (t == AF_TYPE_F32) {
            w0 = _mm512_loadu_ps((const float *)(const void *)row + k);
            w1 = _mm512_loadu_ps((const float *)(const void *)row + k + 16);
        } else {
            __m256i h0 = _mm256_loadu_si256((const __m256i *)((const uint16_t *)(const void *)row + k));
            __m256i h1 = _mm256_loadu_si256((const __m256i *)((const uint16_t *)(const void *)row + k + 16));
            if (t == AF_TYPE_F16) {
                w0 = _mm512_cvtph_ps(h0);
                w1 = _mm512_cvtph_ps(h1);
            } else {
                w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
                w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            acc[i][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * in + k), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i * in + k + 16), acc[i][1]);
        }
    }
    for (; k < in; k += 32) {
        __mmask16 m0 = (__mmask16)(in - k >= 16 ? 0xFFFF : (1u << (in - k)) - 1);
        __mmask16 m1 = (__mmask16)(in - k >= 32 ? 0xFFFF : in - k > 16 ? (1u << (in - k - 16)) - 1 : 0);
        __m512 w0 = f5_flt(t, row, k, m0), w1 = f5_flt(t, row, k + 16, m1);
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            acc[i][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, x + i * in + k), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, x + i * in + k + 16), acc[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) {
        float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
        y[i * ldy + o] = accumulate ? y[i * ldy + o] + v : v;
    }
}

AF_MM_INLINE void f5_rows(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1,
                          const float *x, int64_t in, float *y, int64_t ldy, int acc) {
    int64_t o = o0;
    if (t == AF_TYPE_F32 || t == AF_TYPE_F16 || t == AF_TYPE_BF16) {
        for (; o < o1; o++) f5_float(t, nt, w, rb, o, x, in, y, ldy, acc);
        return;
    }
    for (; o < o1; o++) f5_quant(t, nt, w, rb, o, x, in, y, ldy, acc);
}

AF_MM_INLINE void f5_n(uint32_t t, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, const float *x,
                       int64_t in, int64_t n, float *y, int64_t ldy, int acc) {
    switch (n) {
    case 1: f5_rows(t, 1, w, rb, o0, o1, x, in, y, ldy, acc); break;
    case 2: f5_rows(t, 2, w, rb, o0, o1, x, in, y, ldy, acc); break;
    case 3: f5_rows(t, 3, w, rb, o0, o1, x, in, y, ldy, acc); break;
    default: f5_rows(t, 4, w, rb, o0, o1, x, in, y, ldy, acc); break;
    }
}

/* ops.decode_f32 (matmul_internal.h): F32/F16/BF16 and every block type of matmul_unpack.h. */
static AF_MM_TARGET bool decode_f32_512(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0,
                                        int64_t o1, const float *x, int64_t in, int64_t n, float *y,
                                        int64_t ldy, int acc) {
    if (n < 1 || n > AF_MM_DECODE_N) return false;
    switch (type) {
#define F5(T) case T: f5_n(T, w, rb, o0, o1, x, in, n, y, ldy, acc); break;
        F5(AF_TYPE_F32) F5(AF_TYPE_F16) F5(AF_TYPE_BF16)
        F5(AF_TYPE_Q4_0) F5(AF_TYPE_Q4_1) F5(AF_TYPE_Q5_0) F5(AF_TYPE_Q5_1) F5(AF_TYPE_Q8_0)
        F5(AF_TYPE_Q2_K) F5(AF_TYPE_Q3_K) F5(AF_TYPE_Q4_K) F5(AF_TYPE_Q5_K) F5(AF_TYPE_Q6_K)
#undef F5
    default: return false;
    }
    return true;
}

/* ---------------------------------------------------------------- int8 decode on 512-bit vectors */

/* ops.decode for the 32-blocks Q4_0 and Q4_1 with two blocks A, B per zmm (vpdpbusd on 64
 * bytes) and R rows per pass sharing each load of the quantized x (af_mm_xq). Per block pair and
 * (row, token): P = vpdpbusd(u, q) gives 16 int32 sums of 4 products (lanes 0-7 block A, 8-15
 * block B), then
 *     acc += f32(P) * DX * D        DX = [dxA x8, dxB x8] (activation scales), D the weight scales,
 *     accm += M * SX                M = the weight bias (Q4_1 m, Q4_0 -8d) per block lane,
 *                                   SX = d_x * sum of the 16 quants of each 16-group / 4 per lane,
 * so sum(acc + accm) = sum_k W[o,k] * d_x q_k (llama.cpp's Q8_0 activation scheme) up to f32
 * rounding, the same value as the 256-bit kernel of matmul_unpack.h (mm_dec_chunk) and the scalar
 * reference of tests/test_matmul.c. */

/* 64 4-bit weights of blocks A, B as u8 in value order ([A lo, A hi, B lo, B hi] nibbles).
 * `full` 0: block B absent (zeros). */
AF_MM_INLINE __m512i dq_w64(uint32_t t, const uint8_t *a, const uint8_t *b, int full) {
    const int o = t == AF_TYPE_Q4_1 ? 4 : 2;
    __m128i qa = _mm_loadu_si128((const __m128i *)(a + o));
    __m128i qb = full ? _mm_loadu_si128((const __m128i *)(b + o)) : _mm_setzero_si128();
    __m512i z = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1));
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0)); /* [qa, qa, qb, qb] */
    z = _mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* Weight scale D and bias M per lane of a block pair (Q4_1: d and m; Q4_0: d and -8d). */
AF_MM_INLINE void dq_dm(uint32_t t, const uint8_t *a, const uint8_t *b, int full, __m512 *D, __m512 *M) {
    const __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __mmask16 k = full ? 0xFFFF : 0x00FF;
    if (t == AF_TYPE_Q4_1) {
        uint32_t da, db = 0;
        memcpy(&da, a, 4);
        if (full) memcpy(&db, b, 4);
        __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128((int)da), (int)db, 1)));
        *D = _mm512_maskz_permutexvar_ps(k, _mm512_add_epi32(lo, lo), f);                           /* [dA, dB] */
        *M = _mm512_maskz_permutexvar_ps(k, _mm512_add_epi32(_mm512_add_epi32(lo, lo), _mm512_set1_epi32(1)), f);
        return;
    }
    uint16_t ha, hb = 0;
    memcpy(&ha, a, 2);
    if (full) memcpy(&hb, b, 2);
    __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)ha | (uint32_t)hb << 16))));
    *D = _mm512_maskz_permutexvar_ps(k, lo, f);
    *M = _mm512_mul_ps(*D, _mm512_set1_ps(-8.f));
}

/* One block pair (kb, kb+1; only kb when full is 0) of rows o .. o+R-1 into acc / accm. */
AF_MM_INLINE void dq_pair(uint32_t t, int R, int nt, int full, const uint8_t *w, int64_t rb, int64_t o, int64_t kb,
                          const af_mm_xq *xq, __m512 acc[2][AF_MM_DECODE_N], __m512 accm[2][AF_MM_DECODE_N]) {
    const int bb = mm_bb(t);
    const __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i g4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512i W[2];
    __m512 D[2], M[2];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint8_t *a = w + (o + r) * rb + kb * bb;
        mm_pf(a, 2 * bb);
        W[r] = dq_w64(t, a, a + bb, full);
        dq_dm(t, a, a + bb, full, &D[r], &M[r]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) {
        const int8_t *xp = xq->q + i * xq->in + 32 * kb;
        const float *dp = xq->d + i * xq->nb32 + kb;
        __m512i X = full ? _mm512_loadu_si512(xp) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xp);
        __m128 d2 = full ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)dp)) : _mm_load_ss(dp);
        __m512 DX = _mm512_permutexvar_ps(lo, _mm512_castps128_ps512(d2));
        const float *sp = xq->sq + i * xq->nb16 + 2 * kb;
        __m128 s4 = full ? _mm_loadu_ps(sp) : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)sp));
        __m512 SX = _mm512_mul_ps(_mm512_permutexvar_ps(g4, _mm512_castps128_ps512(s4)), _mm512_set1_ps(0.25f));
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m512i P = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[r], X);
            acc[r][i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(P), DX), D[r], acc[r][i]);
            accm[r][i] = _mm512_fmadd_ps(M[r], SX, accm[r][i]);
        }
    }
}

/* Rows o .. o+R-1 of y for nt tokens (t, R, nt compile-time constants after inlining). */
AF_MM_INLINE void dq_rows(uint32_t t, int R, int nt, const uint8_t *w, int64_t rb, int64_t o,
                          const af_mm_xq *xq, float *y, int64_t ldy, int accumulate) {
    const int64_t nblk = xq->nb32;
    __m512 acc[2][AF_MM_DECODE_N], accm[2][AF_MM_DECODE_N];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) acc[r][i] = accm[r][i] = _mm512_setzero_ps();
    int64_t kb = 0;
    for (; kb + 2 <= nblk; kb += 2) dq_pair(t, R, nt, 1, w, rb, o, kb, xq, acc, accm);
    if (kb < nblk) dq_pair(t, R, nt, 0, w, rb, o, kb, xq, acc, accm);
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][i], accm[r][i]));
            float *yo = y + i * ldy + o + r;
            *yo = accumulate ? *yo + v : v;
        }
}

/* Rows [o0, o1): short rows (<= 512 bytes) in pairs sharing each x load, then one at a time.
 * Measured on a Zen 4 with W streaming from DRAM (bench_matmul AF_BENCH_COLD=1, 1 thread): pairs
 * 14-17% faster than single rows for SmolLM2's 360-byte Q4_1 rows, 2x slower for its 960-byte
 * down_proj rows (two streams a row apart defeat the hardware prefetcher; a software prefetch
 * recovered only part of it). */
AF_MM_INLINE void dq_n(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1,
                       const af_mm_xq *xq, float *y, int64_t ldy, int acc) {
    int64_t o = o0;
    if (rb <= 512)
        for (; o + 2 <= o1; o += 2) dq_rows(t, 2, nt, w, rb, o, xq, y, ldy, acc);
    for (; o < o1; o++) dq_rows(t, 1, nt, w, rb, o, xq, y, ldy, acc);
}

AF_MM_INLINE void dq_t(uint32_t t, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, const af_mm_xq *xq,
                       int64_t n, float *y, int64_t ldy, int acc) {
    switch (n) {
    case 1: dq_n(t, 1, w, rb, o0, o1, xq, y, ldy, acc); break;
    case 2: dq_n(t, 2, w, rb, o0, o1, xq, y, ldy, acc); break;
    case 3: dq_n(t, 3, w, rb, o0, o1, xq, y, ldy, acc); break;
    default: dq_n(t, 4, w, rb, o0, o1, xq, y, ldy, acc); break;
    }
}

/* ops.decode of the VNNI table: Q4_0 and Q4_1 here, the other block types on the 256-bit kernel of
 * matmul_unpack.h (mm_decode). Q8_0 stays there: a 512-bit variant of this kernel (|w| against
 * q with w's sign by mask) was measured no faster in cache and 1.6x slower on SmolLM2's 28 MiB
 * LM head streaming from memory. */
static AF_MM_TARGET bool decode512(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1,
                                   const af_mm_xq *xq, int64_t n, float *y, int64_t ldy, int acc) {
    if (n < 1 || n > AF_MM_DECODE_N) return false;
    switch (type) {
    case AF_TYPE_Q4_0: dq_t(AF_TYPE_Q4_0, w, rb, o0, o1, xq, n, y, ldy, acc); return true;
    case AF_TYPE_Q4_1: dq_t(AF_TYPE_Q4_1, w, rb, o0, o1, xq, n, y, ldy, acc); return true;
    default: return mm_decode(type, w, rb, o0, o1, xq, n, y, ldy, acc);
    }
}

/* ---------------------------------------------------------------- packed GEMM micro-kernel */

/* ops.ukernel (gemm_packed.c): an 8 x 32 tile of C over one K-chunk, both operands packed and
 * contiguous: per k, two aligned zmm of B and eight broadcasts of A feed 16 independent FMA
 * chains (enough to cover the FMA latency on two 512-bit FMA pipes). Padded rows/columns of the
 * packed operands are zero; only mr rows and nr columns of C are read and written. */
static AF_MM_TARGET void ukernel512(int mr, int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                                    int nr, int accumulate) {
    __m512 a0[8], a1[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kc; kk++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m512 x = _mm512_set1_ps(ap[i]);
            a0[i] = _mm512_fmadd_ps(x, b0, a0[i]);
            a1[i] = _mm512_fmadd_ps(x, b1, a1[i]);
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

const af_mm_ops af_mm_ops_avx512 = {32,        panel512,       mm_dequant, mm_dot, decode512,
                                    decode_f32_512, ukernel512, af_gp_tpack_f32};
const af_mm_ops af_mm_ops_avx512_novnni = {32,        panel512,       mm_dequant, mm_dot, decode512_novnni,
                                           decode_f32_512, ukernel512, af_gp_tpack_f32};

#else
typedef int af_matmul_avx512_empty; /* ISO C forbids an empty translation unit */
#endif
