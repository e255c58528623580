/*
 * matmul_avx2.c — AVX2+FMA kernels for matmul.c (see matmul_internal.h for the contract):
 *  - panel: 6 tokens x 16 outputs register tile (12 ymm accumulators); masked loads/stores
 *    (vmaskmovps) only for a partial right-edge panel.
 *  - decode: integer dot products with vpmaddubsw + vpmaddwd (u8 weights x s8 activations; the
 *    unsigned weight values are < 64, or |q| <= 128 for Q8_0 with the sign moved to x, so the
 *    pairwise i16 sums never saturate: 2*128*127 < 32767), unpacking in matmul_unpack.h.
 *  - decode_f32: f32 activations, weights dequantized in registers (mm_unpack) to the exact
 *    values of af_dequantize_row, f32 FMAs; 2 accumulators per token and row; one token: rows
 *    in pairs sharing each load of x (f2_row2), each row's arithmetic that of f2_row. Q4_0,
 *    Q4_1 and Q4_K nibbles come from zero-extending loads and 32-bit shifts (f2_w), not byte
 *    shuffles: the shuffle port bounded this kernel (bench_matmul: Q4_1 rows 28% faster).
 *  - dequant: matmul_unpack.h.
 *  - ukernel/tpack: the 8 x 32 tile of the packed GEMM (gemm_packed.c) as three register tiles
 *    (6x16, 6x16, 2x32) and the 8 x 8 transposing packer of its operands.
 * Compiled for baseline x86-64; every function carries the AVX2 target attribute and is only
 * reached through the avx2 dispatch table (kernels.h), or, for int8 decode, from the AVX-512
 * kernels on CPUs without VNNI.
 */
#if defined(__x86_64__)

#define AF_MM_TARGET __attribute__((target("avx2,fma,f16c")))
#define AF_MM_DOT(u, q) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1))

#include "kernels/cpu/kernels.h"
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

/* ---------------------------------------------------------------- f32 decode (ops.decode_f32) */

/* The 32 values of chunk j of a block as four ymm, dequantized in registers to exactly the f32
 * values of af_dequantize_row: u*s + (b - O*s) per 16-group, u*s exact, one rounding. */
AF_MM_INLINE void f2_w(uint32_t t, const uint8_t *blk, int j, const float *s, const float *b, __m256 *W) {
    const float O = (float)mm_off(t);
    if (t == AF_TYPE_Q8_0) { /* q*d, exact; no offset or bias */
        __m256 d = _mm256_set1_ps(s[0]);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            W[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                     (const __m128i *)(blk + 2 + 8 * v)))), d);
        return;
    }
    if (t == AF_TYPE_Q4_0 || t == AF_TYPE_Q4_1 || t == AF_TYPE_Q4_K) {
        /* The nibbles with zero-extending 8-byte loads and 32-bit shifts instead of mm_unpack's
         * byte shuffles (the kernel was bound by the shuffle port): the same u, so the same
         * weights. Q4_0/Q4_1: values 0-7 / 8-15 are the low nibbles of bytes 0-7 / 8-15, values
         * 16-23 / 24-31 their high nibbles. Q4_K: chunk j is the low (j even) or high (j odd)
         * nibbles of 32 bytes. (Q5_0 measured slower this way: its qh bits cost more ALU work
         * than the shuffles saved.) */
        const __m256i m4 = _mm256_set1_epi32(15);
        __m256i u[4];
        if (t == AF_TYPE_Q4_K) {
            const uint8_t *q = blk + 16 + 32 * (j >> 1);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * v)));
                u[v] = (j & 1) ? _mm256_srli_epi32(z, 4) : _mm256_and_si256(z, m4);
            }
        } else {
            const uint8_t *q = blk + (t == AF_TYPE_Q4_0 ? 2 : 4);
            const __m256i z0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
            const __m256i z1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8)));
            u[0] = _mm256_and_si256(z0, m4);
            u[1] = _mm256_and_si256(z1, m4);
            u[2] = _mm256_srli_epi32(z0, 4);
            u[3] = _mm256_srli_epi32(z1, 4);
        }
        const __m256 vs = _mm256_set1_ps(s[2 * j]), vc = _mm256_set1_ps(b[2 * j] - O * s[2 * j]);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) W[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[v]), vs, vc);
        return;
    }
    __m256i u = mm_unpack(t, blk, j);
    /* one scale and bias for the whole 32-chunk where the type has them (mm_scale32) */
    __m256 vs = _mm256_set1_ps(s[2 * j]), vc = _mm256_set1_ps(b[2 * j] - O * s[2 * j]);
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
        __m128i h = g ? _mm256_extracti128_si256(u, 1) : _mm256_castsi256_si128(u);
        __m128i h8 = _mm_srli_si128(h, 8);
        __m256i v0 = mm_signed(t) ? _mm256_cvtepi8_epi32(h) : _mm256_cvtepu8_epi32(h);
        __m256i v1 = mm_signed(t) ? _mm256_cvtepi8_epi32(h8) : _mm256_cvtepu8_epi32(h8);
        if (g && !mm_scale32(t)) {
            vs = _mm256_set1_ps(s[2 * j + 1]);
            vc = _mm256_set1_ps(b[2 * j + 1] - O * s[2 * j + 1]);
        }
        W[2 * g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), vs, vc);
        W[2 * g + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), vs, vc);
    }
}

/* acc[i][v & 1] += W[v] * x[i][k + 8v .. +8) for i < nt, v < 4. */
AF_MM_INLINE void f2_fma(int nt, __m256 acc[AF_MM_DECODE_N][2], const __m256 *W, const float *x, int64_t in,
                         int64_t k) {
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            acc[i][v & 1] = _mm256_fmadd_ps(W[v], _mm256_loadu_ps(x + i * in + k + 8 * v), acc[i][v & 1]);
}

/* 8 f32 weights of an F32 / F16 / BF16 row from element k. */
AF_MM_INLINE __m256 f2_flt(uint32_t t, const uint8_t *row, int64_t k) {
    if (t == AF_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)row + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)(const void *)row + k));
    if (t == AF_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* y row o (+)= W[o, :] . x[i, :] for nt tokens (t, nt compile-time constants). */
AF_MM_INLINE void f2_row(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o, const float *x,
                         int64_t in, float *y, int64_t ldy, int accumulate) {
    const uint8_t *row = w + o * rb;
    __m256 acc[AF_MM_DECODE_N][2], W[4];
    float tail[AF_MM_DECODE_N] = {0};
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    if (t == AF_TYPE_F32 || t == AF_TYPE_F16 || t == AF_TYPE_BF16) {
        const int es = t == AF_TYPE_F32 ? 4 : 2; /* bytes per weight */
        int64_t k = 0;
        for (; k + 32 <= in; k += 32) {
            mm_pf(row + k * es, 32 * es);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) W[v] = f2_flt(t, row, k + 8 * v);
            f2_fma(nt, acc, W, x, in, k);
        }
        for (; k + 8 <= in; k += 8) {
            __m256 wv = f2_flt(t, row, k);
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) acc[i][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * in + k), acc[i][0]);
        }
        for (; k < in; k++) {
            uint16_t h;
            memcpy(&h, row + 2 * k, 2);
            float wk = t == AF_TYPE_F32 ? ((const float *)(const void *)row)[k]
                       : t == AF_TYPE_F16 ? mm_h(row + 2 * k) : af_bf16_to_f32(h);
            for (int i = 0; i < nt; i++) tail[i] += wk * x[i * in + k];
        }
    } else {
        const int bs = mm_bs(t), bb = mm_bb(t);
        float s[16], b[16];
        for (int64_t k = 0; k < in; k += bs, row += bb) {
            mm_pf(row, bb);
            mm_prep(t, row, s, b);
#pragma GCC unroll 8
            for (int j = 0; j < bs / 32; j++) {
                f2_w(t, row, j, s, b, W);
                f2_fma(nt, acc, W, x, in, k + 32 * j);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) {
        float v = mm_hsum(_mm256_add_ps(acc[i][0], acc[i][1])) + tail[i];
        y[i * ldy + o] = accumulate ? y[i * ldy + o] + v : v;
    }
}

/* One token, rows o and o + 1 of a block type in one pass: each 8 x values loaded once serve both
 * rows; each row keeps its own two accumulators, chunks and FMAs in f2_row's order (bitwise
 * f2_row(t, 1, ...) per row). The next pair's rows are prefetched (two interleaved rows defeat
 * part of the hardware prefetch: without it the cold pass was up to 1.6x slower). */
AF_MM_INLINE void f2_row2(uint32_t t, const uint8_t *w, int64_t rb, int64_t o, const float *x, int64_t in, float *y,
                          int accumulate) {
    const uint8_t *r0 = w + o * rb, *r1 = r0 + rb;
    const int bs = mm_bs(t), bb = mm_bb(t);
    __m256 a0[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, a1[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 W[4], X[4];
    float s0[16], b0[16], s1[16], b1[16];
    for (int64_t k = 0; k < in; k += bs, r0 += bb, r1 += bb) {
        _mm_prefetch((const char *)(r0 + 2 * rb + 256), _MM_HINT_T0);
        _mm_prefetch((const char *)(r1 + 2 * rb + 256), _MM_HINT_T0);
        mm_prep(t, r0, s0, b0);
        mm_prep(t, r1, s1, b1);
#pragma GCC unroll 8
        for (int j = 0; j < bs / 32; j++) {
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) X[v] = _mm256_loadu_ps(x + k + 32 * j + 8 * v);
            f2_w(t, r0, j, s0, b0, W);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) a0[v & 1] = _mm256_fmadd_ps(W[v], X[v], a0[v & 1]);
            f2_w(t, r1, j, s1, b1, W);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) a1[v & 1] = _mm256_fmadd_ps(W[v], X[v], a1[v & 1]);
        }
    }
    const float v0 = mm_hsum(_mm256_add_ps(a0[0], a0[1])) + 0.f, v1 = mm_hsum(_mm256_add_ps(a1[0], a1[1])) + 0.f;
    y[o] = accumulate ? y[o] + v0 : v0;
    y[o + 1] = accumulate ? y[o + 1] + v1 : v1;
}

AF_MM_INLINE void f2_n(uint32_t t, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, const float *x,
                       int64_t in, int64_t n, float *y, int64_t ldy, int acc) {
    /* rows in pairs for the 4/5-bit types of 32-blocks (Q8_0 and the K-quants measured slower in
     * pairs when W streams from memory: bench_matmul AF_BENCH_COLD=1) */
    if (n == 1 && (t == AF_TYPE_Q4_0 || t == AF_TYPE_Q4_1 || t == AF_TYPE_Q5_0 || t == AF_TYPE_Q5_1))
        for (; o0 + 2 <= o1; o0 += 2) f2_row2(t, w, rb, o0, x, in, y, acc);
    for (int64_t o = o0; o < o1; o++) {
        switch (n) {
        case 1: f2_row(t, 1, w, rb, o, x, in, y, ldy, acc); break;
        case 2: f2_row(t, 2, w, rb, o, x, in, y, ldy, acc); break;
        case 3: f2_row(t, 3, w, rb, o, x, in, y, ldy, acc); break;
        default: f2_row(t, 4, w, rb, o, x, in, y, ldy, acc); break;
        }
    }
}

/* ops.decode_f32 (matmul_internal.h): F32/F16/BF16 and every block type of matmul_unpack.h. */
static AF_MM_TARGET bool decode_f32_256(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0,
                                        int64_t o1, const float *x, int64_t in, int64_t n, float *y,
                                        int64_t ldy, int acc) {
    if (n < 1 || n > AF_MM_DECODE_N) return false;
    switch (type) {
#define F2(T) case T: f2_n(T, w, rb, o0, o1, x, in, n, y, ldy, acc); break;
        F2(AF_TYPE_F32) F2(AF_TYPE_F16) F2(AF_TYPE_BF16)
        F2(AF_TYPE_Q4_0) F2(AF_TYPE_Q4_1) F2(AF_TYPE_Q5_0) F2(AF_TYPE_Q5_1) F2(AF_TYPE_Q8_0)
        F2(AF_TYPE_Q2_K) F2(AF_TYPE_Q3_K) F2(AF_TYPE_Q4_K) F2(AF_TYPE_Q5_K) F2(AF_TYPE_Q6_K)
#undef F2
    default: return false;
    }
    return true;
}

/* ---------------------------------------------------------------- packed GEMM (gemm_packed.c) */

static const int32_t uk_mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* Lane mask of the first n (clamped to 0..8) lanes, for vmaskmovps. */
AF_MM_INLINE __m256i uk_mask(int n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_loadu_si256((const __m256i *)(uk_mask_tab + 8 - n));
}

AF_MM_INLINE void uk_store(float *ci, __m256 v, int nc, int accumulate) {
    if (nc >= 8) {
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(ci));
        _mm256_storeu_ps(ci, v);
    } else if (nc > 0) {
        __m256i m = uk_mask(nc);
        if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(ci, m));
        _mm256_maskstore_ps(ci, m, v);
    }
}

/* Rows 0..5 of a packed 8-row A micro-panel (ap [kc][8]) times 16 columns of a packed B panel
 * (bp [kc][32], starting at the wanted column): 12 ymm accumulators, per k two B loads and six
 * broadcasts; C rows i < mr, columns < nc written. */
AF_MM_INLINE void uk6x16(int mr, int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int nc,
                         int accumulate) {
    __m256 s0[6], s1[6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) s0[i] = s1[i] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < kc; kk++) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            __m256 x = _mm256_broadcast_ss(ap + i);
            s0[i] = _mm256_fmadd_ps(x, b0, s0[i]);
            s1[i] = _mm256_fmadd_ps(x, b1, s1[i]);
        }
        ap += 8;
        bp += 32;
    }
    /* constant indices (fully unrolled) keep the accumulators in registers inside the k loop */
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++)
        if (i < mr) {
            uk_store(c + i * ldc, s0[i], nc, accumulate);
            uk_store(c + i * ldc + 8, s1[i], nc - 8, accumulate);
        }
}

/* Rows 6..7 of the micro-panel times all 32 columns: 8 accumulators, per k four B loads and two
 * broadcasts. c points at row 6. */
AF_MM_INLINE void uk2x32(int mr, int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int nr,
                         int accumulate) {
    __m256 s[2][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) s[0][j] = s[1][j] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < kc; kk++) {
        __m256 x0 = _mm256_broadcast_ss(ap + 6), x1 = _mm256_broadcast_ss(ap + 7);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256 b = _mm256_load_ps(bp + 8 * j);
            s[0][j] = _mm256_fmadd_ps(x0, b, s[0][j]);
            s[1][j] = _mm256_fmadd_ps(x1, b, s[1][j]);
        }
        ap += 8;
        bp += 32;
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) uk_store(c + 8 * j, s[0][j], nr - 8 * j, accumulate);
    if (mr > 7)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) uk_store(c + ldc + 8 * j, s[1][j], nr - 8 * j, accumulate);
}

/* ops.ukernel: the 8 x 32 tile of gemm_packed.c in three register tiles that fit the 16 ymm
 * registers (rows 0-5 x columns 0-15, rows 0-5 x columns 16-31, rows 6-7 x columns 0-31). Each
 * C element is one sequential FMA chain over kc, then added to C when accumulating: the same
 * operations in the same order as the AVX-512 kernel. */
static AF_MM_TARGET void ukernel256(int mr, int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                                    int nr, int accumulate) {
    uk6x16(mr, kc, ap, bp, c, ldc, nr, accumulate);
    if (nr > 16) uk6x16(mr, kc, ap, bp + 16, c + 16, ldc, nr - 16, accumulate);
    if (mr > 6) uk2x32(mr, kc, ap, bp, c + 6 * ldc, ldc, nr, accumulate);
}

/* ops.tpack: dst[q*ldd + i] = src[i][q] for q < kc, i < 8 (src[i] NULL: zeros), 8 x 8 register
 * transposes (unpack, shuffle, 128-bit permutes). */
static AF_MM_TARGET void tpack256(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd) {
    for (int64_t q0 = 0; q0 < kc; q0 += 8) {
        int nq = (int)(kc - q0 < 8 ? kc - q0 : 8);
        __m256i m = uk_mask(nq);
        __m256 r[8], t[8], u[8];
        for (int i = 0; i < 8; i++)
            r[i] = !src[i]    ? _mm256_setzero_ps()
                   : nq == 8 ? _mm256_loadu_ps(src[i] + q0)
                             : _mm256_maskload_ps(src[i] + q0, m);
        for (int i = 0; i < 4; i++) {
            t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for (int h = 0; h < 2; h++) { /* h = 0: rows 0-3, h = 1: rows 4-7 */
            u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
            u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
            u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
            u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        /* u[j] (rows 0-3) lanes: q = j | q = 4+j; u[4+j] (rows 4-7) likewise */
        for (int j = 0; j < 4; j++) {
            __m256 lo = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20); /* q = j */
            __m256 hi = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31); /* q = 4 + j */
            if (j < nq) _mm256_storeu_ps((float *)(dst + (q0 + j) * ldd), lo);
            if (4 + j < nq) _mm256_storeu_ps((float *)(dst + (q0 + 4 + j) * ldd), hi);
        }
    }
}

const af_mm_ops af_mm_ops_avx2 = {16, panel256, mm_dequant, mm_dot, mm_decode, decode_f32_256, ukernel256, tpack256};

#else
typedef int af_matmul_avx2_empty; /* ISO C forbids an empty translation unit */
#endif
