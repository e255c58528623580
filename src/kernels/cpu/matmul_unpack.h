/*
 * matmul_unpack.h — in-register unpacking of ggml weight blocks and the kernels built on it
 * (ops.dequant, ops.dot, ops.decode of matmul_internal.h), shared by matmul_avx2.c and
 * matmul_avx512.c. Each includes it after defining AF_MM_TARGET (its target attribute) and
 * AF_MM_DOT(u, q) (u8 x s8 -> 8 x i32 sums of 4 products: vpdpbusd or vpmaddubsw+vpmaddwd).
 * Uses AVX2 + F16C instructions only, so it is valid in both.
 *
 * Every quantized type is viewed the same way: a block of bs = 32 or 256 values is cut into
 * 32-value chunks j = 0 .. bs/32-1 and 16-value groups g = 0 .. bs/16-1, and
 *     value[32j + l] = (u[l] - O) * s[g] + b[g],   g = 2j + l/16,
 * where u[l] is a small unsigned integer (< 64) unpacked by mm_unpack(), O the type's integer
 * offset (mm_off()) and s/b the per-group f32 scale and bias from mm_prep(). Q8_0 is the exception:
 * u is the signed int8 quant (mm_signed()), O = 0.
 * Layouts and formulas: docs/FORMATS.md §2 (ggml-common.h, dequantize_row_* in
 * ggml-quants.c). Own code.
 */
#ifndef AF_MATMUL_UNPACK_H
#define AF_MATMUL_UNPACK_H

#include "core/core.h"
#include "kernels/quant.h"

#include <immintrin.h>
#include <string.h>

#define AF_MM_INLINE static inline AF_MM_TARGET __attribute__((always_inline))

#include "kernels/cpu/nf4_unpack.h" /* mm_deq_nf4 (NF4 blocks, afinar-internal) */

/* mm_pf(p, bytes): software prefetch of the decode kernels (n <= AF_MM_DECODE_N tokens), called
 * as p .. p + bytes of a weight row are about to be read: prefetches those bytes AF_MM_PREFETCH
 * ahead.
 * A thread's rows are one contiguous stream, but the hardware prefetchers stop at each 4 KiB
 * page: measured on an Intel Xeon (Emerald Rapids, 2 cores, SmolLM2 Q4_1 decode), no prefetch
 * 82-88 tok/s, 512 B ahead +8%, 1 KiB +17%, 2 KiB +25-35%, 4-8 KiB about the same as 2 KiB
 * (bench/results/decode-prefetch-intel-xeon-emerald-rapids-2c.md). Prefetches never fault, so
 * those past the end of a matrix are harmless (the address is formed as an integer). Override
 * with -DAF_MM_PREFETCH=N (0 = none). Bits unchanged: it only moves data into the cache. */
#ifndef AF_MM_PREFETCH
#define AF_MM_PREFETCH 2048
#endif
AF_MM_INLINE void mm_pf(const uint8_t *p, int bytes) {
#if AF_MM_PREFETCH > 0
    for (int b = 0; b < bytes; b += 64)
        _mm_prefetch((const char *)((uintptr_t)p + AF_MM_PREFETCH + (unsigned)b), _MM_HINT_T0);
#else
    (void)p;
    (void)bytes;
#endif
}

AF_MM_INLINE float mm_h(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return _cvtsh_ss(v);
}

AF_MM_INLINE int mm_off(uint32_t t) {
    switch (t) {
    case AF_TYPE_Q4_0: return 8;
    case AF_TYPE_Q5_0: return 16;
    case AF_TYPE_Q3_K: return 4;
    case AF_TYPE_Q6_K: return 32;
    default: return 0;
    }
}
AF_MM_INLINE int mm_signed(uint32_t t) { return t == AF_TYPE_Q8_0; }
AF_MM_INLINE int mm_has_bias(uint32_t t) {
    return t == AF_TYPE_Q4_1 || t == AF_TYPE_Q5_1 || t == AF_TYPE_Q2_K || t == AF_TYPE_Q4_K ||
           t == AF_TYPE_Q5_K;
}
/* True when both 16-groups of every 32-chunk share one scale and bias. */
AF_MM_INLINE int mm_scale32(uint32_t t) {
    return !(t == AF_TYPE_Q2_K || t == AF_TYPE_Q3_K || t == AF_TYPE_Q6_K);
}
AF_MM_INLINE int mm_bs(uint32_t t) { return t >= AF_TYPE_Q2_K && t <= AF_TYPE_Q6_K ? 256 : 32; }
AF_MM_INLINE int mm_bb(uint32_t t) {
    switch (t) {
    case AF_TYPE_Q4_0: return 18;
    case AF_TYPE_Q4_1: return 20;
    case AF_TYPE_Q5_0: return 22;
    case AF_TYPE_Q5_1: return 24;
    case AF_TYPE_Q8_0: return 34;
    case AF_TYPE_Q2_K: return 84;
    case AF_TYPE_Q3_K: return 110;
    case AF_TYPE_Q4_K: return 144;
    case AF_TYPE_Q5_K: return 176;
    case AF_TYPE_Q6_K: return 210;
    default: return 0;
    }
}
/* True for the block types this header handles. */
static inline bool mm_is_quant(uint32_t t) {
    switch (t) {
    case AF_TYPE_Q4_0: case AF_TYPE_Q4_1: case AF_TYPE_Q5_0: case AF_TYPE_Q5_1: case AF_TYPE_Q8_0:
    case AF_TYPE_Q2_K: case AF_TYPE_Q3_K: case AF_TYPE_Q4_K: case AF_TYPE_Q5_K: case AF_TYPE_Q6_K:
        return true;
    default: return false;
    }
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block k (docs/FORMATS.md §2 Q4_K). */
AF_MM_INLINE void mm_k4_scale(const uint8_t *q, int k, int *sc, int *mn) {
    if (k < 4) {
        *sc = q[k] & 63;
        *mn = q[k + 4] & 63;
    } else {
        *sc = (q[k + 4] & 0xF) | ((q[k - 4] >> 6) << 4);
        *mn = (q[k + 4] >> 4) | ((q[k] >> 6) << 4);
    }
}

/* Per-16-group scale s[g] and bias b[g] of one block (g < bs/16). */
AF_MM_INLINE void mm_prep(uint32_t t, const uint8_t *blk, float *s, float *b) {
    switch (t) {
    case AF_TYPE_Q4_0: case AF_TYPE_Q5_0: case AF_TYPE_Q8_0:
        s[0] = s[1] = mm_h(blk);
        b[0] = b[1] = 0.f;
        break;
    case AF_TYPE_Q4_1: case AF_TYPE_Q5_1: { /* d and m converted together */
        uint32_t dm;
        memcpy(&dm, blk, 4);
        __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
        s[0] = s[1] = _mm_cvtss_f32(v);
        b[0] = b[1] = _mm_cvtss_f32(_mm_movehdup_ps(v));
    } break;
    case AF_TYPE_Q2_K: {
        float d = mm_h(blk + 80), dm = mm_h(blk + 82);
        for (int g = 0; g < 16; g++) {
            s[g] = d * (float)(blk[g] & 15);
            b[g] = -dm * (float)(blk[g] >> 4);
        }
    } break;
    case AF_TYPE_Q3_K: {
        const uint8_t *q = blk + 96;
        float d = mm_h(blk + 108);
        for (int g = 0; g < 16; g++) {
            int grp = g >> 2, i = g & 3;
            int nib = (grp & 1) ? q[4 + i] : q[i];
            nib = (grp & 2) ? nib >> 4 : nib & 15;
            int top = (q[8 + i] >> (2 * grp)) & 3;
            s[g] = d * (float)((nib | (top << 4)) - 32);
            b[g] = 0.f;
        }
    } break;
    case AF_TYPE_Q4_K: case AF_TYPE_Q5_K: {
        float d = mm_h(blk), dm = mm_h(blk + 2);
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            mm_k4_scale(blk + 4, k, &sc, &mn);
            s[2 * k] = s[2 * k + 1] = d * (float)sc;
            b[2 * k] = b[2 * k + 1] = -dm * (float)mn;
        }
    } break;
    case AF_TYPE_Q6_K: {
        float d = mm_h(blk + 208);
        const int8_t *sc = (const int8_t *)(blk + 192);
        for (int g = 0; g < 16; g++) {
            s[g] = d * (float)sc[g];
            b[g] = 0.f;
        }
    } break;
    default: break;
    }
}

/* 16 bytes -> 32 nibbles: low nibbles = values 0..15, high nibbles = values 16..31. */
AF_MM_INLINE __m256i mm_nib16(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m128i m = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(q, m), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}
/* Bit i of h -> byte i = v (else 0), i < 32. */
AF_MM_INLINE __m256i mm_bits32(uint32_t h, char v) {
    __m256i x = _mm256_set1_epi32((int)h);
    const __m256i sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                        2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    x = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(x, sh), bit), bit);
    return _mm256_and_si256(x, _mm256_set1_epi8(v));
}

/* u[0..31] of chunk j of a block (see the header comment). */
AF_MM_INLINE __m256i mm_unpack(uint32_t t, const uint8_t *blk, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    switch (t) {
    case AF_TYPE_Q4_0: return mm_nib16(blk + 2);
    case AF_TYPE_Q4_1: return mm_nib16(blk + 4);
    case AF_TYPE_Q5_0: case AF_TYPE_Q5_1: {
        int o = t == AF_TYPE_Q5_1 ? 4 : 2;
        uint32_t h;
        memcpy(&h, blk + o, 4);
        return _mm256_or_si256(mm_nib16(blk + o + 4), mm_bits32(h, 0x10));
    }
    case AF_TYPE_Q8_0: return _mm256_loadu_si256((const __m256i *)(blk + 2));
    case AF_TYPE_Q2_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * (j >> 2)));
        return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (j & 3))), m2);
    }
    case AF_TYPE_Q3_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 32 + 32 * (j >> 2)));
        q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (j & 3))), m2);
        __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
        __m256i bit = _mm256_set1_epi8((char)(1u << j));
        __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit),
                                      _mm256_set1_epi8(4));
        return _mm256_or_si256(q, hb);
    }
    case AF_TYPE_Q4_K: case AF_TYPE_Q5_K: {
        const uint8_t *qs = blk + (t == AF_TYPE_Q5_K ? 48 : 16) + 32 * (j >> 1);
        __m256i q = _mm256_loadu_si256((const __m256i *)qs);
        q = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
        if (t == AF_TYPE_Q5_K) {
            __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
            __m256i bit = _mm256_set1_epi8((char)(1u << j));
            q = _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                                    _mm256_set1_epi8(16)));
        }
        return q;
    }
    case AF_TYPE_Q6_K: {
        int h = j >> 2, k = j & 3;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (k & 1)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        ql = (k & 2) ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4) : _mm256_and_si256(ql, m4);
        qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m2);
        return _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));
    }
    default: return _mm256_setzero_si256();
    }
}


/* ---------------------------------------------------------------- dequantization to f32 */

/* n f32 values from `src` (a row segment of type t, n a multiple of the block size). */
AF_MM_INLINE void mm_deq_quant(uint32_t t, const uint8_t *src, int64_t n, float *out) {
    const int bs = mm_bs(t), bb = mm_bb(t), O = mm_off(t);
    const __m256i vo = _mm256_set1_epi32(O);
    for (int64_t ib = 0; ib < n / bs; ib++, src += bb) {
        float s[16], b[16];
        mm_prep(t, src, s, b);
        for (int j = 0; j < bs / 32; j++, out += 32) {
            __m256i u = mm_unpack(t, src, j);
            for (int g = 0; g < 2; g++) {
                __m128i h = g ? _mm256_extracti128_si256(u, 1) : _mm256_castsi256_si128(u);
                __m256i v0, v1;
                if (mm_signed(t)) {
                    v0 = _mm256_cvtepi8_epi32(h);
                    v1 = _mm256_cvtepi8_epi32(_mm_srli_si128(h, 8));
                } else {
                    v0 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(h), vo);
                    v1 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(h, 8)), vo);
                }
                __m256 sc = _mm256_set1_ps(s[2 * j + g]), bi = _mm256_set1_ps(b[2 * j + g]);
                _mm256_storeu_ps(out + 16 * g, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), sc, bi));
                _mm256_storeu_ps(out + 16 * g + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), sc, bi));
            }
        }
    }
}

/* ops.dequant for every type af_type_can_dequantize() accepts. */
static AF_MM_TARGET void mm_dequant(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t r0,
                                    int64_t nr, int64_t k0, int64_t kc, float *out, int64_t ldo) {
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = w + (r0 + r) * row_bytes;
        float *o = out + r * ldo;
        int64_t k = 0;
        switch (type) {
        case AF_TYPE_F32: memcpy(o, row + 4 * k0, (size_t)kc * sizeof(float)); break;
        case AF_TYPE_F16: {
            const uint16_t *h = (const uint16_t *)(const void *)row + k0;
            for (; k + 8 <= kc; k += 8)
                _mm256_storeu_ps(o + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + k))));
            for (; k < kc; k++) o[k] = mm_h((const uint8_t *)(h + k));
        } break;
        case AF_TYPE_BF16: {
            const uint16_t *h = (const uint16_t *)(const void *)row + k0;
            for (; k + 8 <= kc; k += 8) {
                __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + k)));
                _mm256_storeu_ps(o + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
            }
            for (; k < kc; k++) {
                uint16_t v;
                memcpy(&v, h + k, 2);
                o[k] = af_bf16_to_f32(v);
            }
        } break;
#define MM_DQ(T) case T: mm_deq_quant(T, row + k0 / mm_bs(T) * mm_bb(T), kc, o); break;
        MM_DQ(AF_TYPE_Q4_0) MM_DQ(AF_TYPE_Q4_1) MM_DQ(AF_TYPE_Q5_0) MM_DQ(AF_TYPE_Q5_1)
        MM_DQ(AF_TYPE_Q8_0) MM_DQ(AF_TYPE_Q2_K) MM_DQ(AF_TYPE_Q3_K) MM_DQ(AF_TYPE_Q4_K)
        MM_DQ(AF_TYPE_Q5_K) MM_DQ(AF_TYPE_Q6_K)
#undef MM_DQ
        case AF_TYPE_NF4: mm_deq_nf4(row + k0 / AF_QK_NF4 * (4 + AF_QK_NF4 / 2), kc, o); break;
        default: af_dequantize_row(type, row + k0 / (int64_t)af_type_block_size(type) *
                                                  (int64_t)af_type_block_bytes(type), o, kc);
        }
    }
}

AF_MM_INLINE float mm_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ops.dot: acc[t] += sum_k x[t*ldx + k] * w[k] for t < n (f32, 4 partial sums per token). */
static AF_MM_TARGET void mm_dot(int64_t n, int64_t k, const float *x, int64_t ldx, const float *w,
                                float *acc) {
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * ldx;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t i = 0;
        for (; i + 32 <= k; i += 32) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xt + i), _mm256_loadu_ps(w + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xt + i + 8), _mm256_loadu_ps(w + i + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xt + i + 16), _mm256_loadu_ps(w + i + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xt + i + 24), _mm256_loadu_ps(w + i + 24), a3);
        }
        for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xt + i), _mm256_loadu_ps(w + i), a0);
        float r = 0.f;
        for (; i < k; i++) r += xt[i] * w[i];
        acc[t] += mm_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + r;
    }
}

/* ---------------------------------------------------------------- integer decode */

/* One 32-value chunk j of block `blk` (x block kb) for nt tokens: P = AF_MM_DOT(u, q) gives 8
 * int32 partial sums (lanes 0-3 = values 0-15, lanes 4-7 = values 16-31), then
 * va += f32(P) * s * d_x, and sa += (b - O*s) * d_x*sum(q) per 16-group, so the result is exactly
 * sum_k W[o,k] * d_x q_k up to f32 rounding. */
AF_MM_INLINE void mm_dec_chunk(uint32_t t, int nt, const uint8_t *blk, int j, const float *s,
                               const float *b, int64_t kb, const af_mm_xq *xq, __m256 *va, float *sa) {
    const int O = mm_off(t), s32 = mm_scale32(t);
    __m256i u = mm_unpack(t, blk, j);
    __m256i ua = mm_signed(t) ? _mm256_abs_epi8(u) : u;
    __m256 sv = s32 ? _mm256_setzero_ps()
                    : _mm256_setr_m128(_mm_set1_ps(s[2 * j]), _mm_set1_ps(s[2 * j + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(xq->q + i * xq->in + 32 * kb));
        if (mm_signed(t)) q = _mm256_sign_epi8(q, u);
        __m256 f = _mm256_cvtepi32_ps(AF_MM_DOT(ua, q));
        const float dx = xq->d[i * xq->nb32 + kb];
        if (s32)
            va[i] = _mm256_fmadd_ps(f, _mm256_set1_ps(s[2 * j] * dx), va[i]);
        else
            va[i] = _mm256_fmadd_ps(f, _mm256_mul_ps(sv, _mm256_set1_ps(dx)), va[i]);
        const float *sq = xq->sq + i * xq->nb16 + 2 * kb;
        if (s32) {
            if (mm_has_bias(t) || O) sa[i] += (b[2 * j] - (float)O * s[2 * j]) * (sq[0] + sq[1]);
        } else if (mm_has_bias(t) || O) {
            sa[i] += (b[2 * j] - (float)O * s[2 * j]) * sq[0] + (b[2 * j + 1] - (float)O * s[2 * j + 1]) * sq[1];
        }
    }
}

/* Rows [o0, o1) of y for nt tokens (type t and nt are compile-time constants after inlining).
 * Two accumulator sets (even / odd chunks) hide the FMA latency. */
AF_MM_INLINE void mm_dec_rows(uint32_t t, int nt, const uint8_t *w, int64_t rb, int64_t o0,
                              int64_t o1, const af_mm_xq *xq, float *y, int64_t ldy, int acc) {
    const int bs = mm_bs(t), bb = mm_bb(t), nc = bs / 32;
    const int64_t nblk = xq->in / bs;
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *blk = w + o * rb;
        __m256 va0[AF_MM_DECODE_N], va1[AF_MM_DECODE_N];
        float sa0[AF_MM_DECODE_N], sa1[AF_MM_DECODE_N];
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            va0[i] = va1[i] = _mm256_setzero_ps();
            sa0[i] = sa1[i] = 0.f;
        }
        float s[16], b[16], s1[2], b1[2];
        if (bs == 32) {
            int64_t ib = 0;
            for (; ib + 2 <= nblk; ib += 2, blk += 2 * bb) {
                mm_pf(blk, 2 * bb);
                mm_prep(t, blk, s, b);
                mm_prep(t, blk + bb, s1, b1);
                mm_dec_chunk(t, nt, blk, 0, s, b, ib, xq, va0, sa0);
                mm_dec_chunk(t, nt, blk + bb, 0, s1, b1, ib + 1, xq, va1, sa1);
            }
            if (ib < nblk) {
                mm_prep(t, blk, s, b);
                mm_dec_chunk(t, nt, blk, 0, s, b, ib, xq, va0, sa0);
            }
        } else {
            for (int64_t ib = 0; ib < nblk; ib++, blk += bb) {
                mm_pf(blk, bb);
                mm_prep(t, blk, s, b);
#pragma GCC unroll 8
                for (int j = 0; j < nc; j += 2) {
                    mm_dec_chunk(t, nt, blk, j, s, b, ib * nc + j, xq, va0, sa0);
                    mm_dec_chunk(t, nt, blk, j + 1, s, b, ib * nc + j + 1, xq, va1, sa1);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            float r = mm_hsum(_mm256_add_ps(va0[i], va1[i])) + (sa0[i] + sa1[i]);
            y[i * ldy + o] = acc ? y[i * ldy + o] + r : r;
        }
    }
}

AF_MM_INLINE void mm_dec_n(uint32_t t, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1,
                           const af_mm_xq *xq, int64_t n, float *y, int64_t ldy, int acc) {
    switch (n) {
    case 1: mm_dec_rows(t, 1, w, rb, o0, o1, xq, y, ldy, acc); break;
    case 2: mm_dec_rows(t, 2, w, rb, o0, o1, xq, y, ldy, acc); break;
    case 3: mm_dec_rows(t, 3, w, rb, o0, o1, xq, y, ldy, acc); break;
    default: mm_dec_rows(t, 4, w, rb, o0, o1, xq, y, ldy, acc); break;
    }
}

/* ops.decode: every block type; n in 1..AF_MM_DECODE_N. */
static AF_MM_TARGET bool mm_decode(uint32_t type, const uint8_t *w, int64_t rb, int64_t o0,
                                   int64_t o1, const af_mm_xq *xq, int64_t n, float *y, int64_t ldy,
                                   int acc) {
    if (!mm_is_quant(type) || n < 1 || n > AF_MM_DECODE_N) return false;
    switch (type) {
#define MM_DEC(T) case T: mm_dec_n(T, w, rb, o0, o1, xq, n, y, ldy, acc); break;
        MM_DEC(AF_TYPE_Q4_0) MM_DEC(AF_TYPE_Q4_1) MM_DEC(AF_TYPE_Q5_0) MM_DEC(AF_TYPE_Q5_1)
        MM_DEC(AF_TYPE_Q8_0) MM_DEC(AF_TYPE_Q2_K) MM_DEC(AF_TYPE_Q3_K) MM_DEC(AF_TYPE_Q4_K)
        MM_DEC(AF_TYPE_Q5_K) MM_DEC(AF_TYPE_Q6_K)
#undef MM_DEC
    default: return false;
    }
    return true;
}

#endif /* AF_MATMUL_UNPACK_H */
