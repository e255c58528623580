/*
 * ops_attention.c — causal grouped-query attention (optional sliding window, strided K/V cache),
 * forward saving the log-sum-exp, and the backward recomputing probabilities from it
 * (FlashAttention-2, Dao 2023, Alg. 1/2, one query row at a time). Contract: ops.h.
 *
 * Forward: one query row × (up to 4 heads of one kv group) per work item, an online softmax over
 * blocks of ATT_BLK keys (running max m and sum l; the output row itself is the accumulator,
 * rescaled by e^(m_old−m_new) when the max grows), so no scratch memory beyond stack blocks of
 * scores. Masked keys are never visited, so they contribute exactly 0. All accumulation in f32 with
 * max-subtraction; exp is expf on the scalar path and vexp.h's polynomial (<= 1 ulp) on AVX2/AVX-512.
 * Backward, in two race-free parallel passes (scores are recomputed in each):
 *   A. over (query row i, head h): D_i = dout_i·out_i; dq_i += scale · Σ_j ds_ij k_j
 *   B. over (key j, kv head g):    dv_j += Σ_{h∈g, i} p_ij dout_i;  dk_j += scale · Σ_{h∈g, i} ds_ij q_i
 * with p_ij = exp(s_ij − lse_i), ds_ij = p_ij (dout_i·v_j − D_i).
 * SIMD: block primitives (dot of one vector with nb rows; y += Σ c_b·row_b kept in registers; the
 * softmax steps of a block: scale + max, exp + sum, and the backward's p and ds) in scalar C
 * (vectorisable at baseline x86-64), AVX2+FMA and AVX-512 variants; the work
 * items are instantiated once per path (constant P) and exported as the af_att_rows parts of the
 * dispatch tables (kernels.h), reached as ctx->k->att.
 * Threads: the context's pool over work items (dynamic schedule: causal rows differ in cost, ctx->n_threads)
 * when the call is big enough; results do not depend on the thread count.
 */
#include "kernels/ops.h"
#include "kernels/cpu/attention_gemm.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define ATT_X86 1
#include "kernels/cpu/vexp.h"
#else
#define ATT_X86 0
#endif

#define ATT_BLK 64 /* keys per online-softmax block */

/* ---- primitives: scalar ---- */
static inline float dot_sc(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) acc[u] += a[i + u] * b[i + u];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Block primitives over nb rows r_b = base + b*stride (b < nb <= ATT_BLK), each of n floats:
 *   dotblk:  s[b] = x · r_b
 *   axpyblk: y += Σ_b c[b] · r_b   (y stays in registers over the whole block: no store→load chain) */
static inline void dotblk_sc(float *s, const float *x, const float *base, int64_t stride, int64_t nb, int64_t n) {
    for (int64_t b = 0; b < nb; b++) s[b] = dot_sc(x, base + b * stride, n);
}
static inline void axpyblk_sc(float *y, const float *c, const float *base, int64_t stride, int64_t nb, int64_t n) {
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
        float acc[16];
        for (int u = 0; u < 16; u++) acc[u] = y[d + u];
        for (int64_t b = 0; b < nb; b++) {
            const float *r = base + b * stride + d;
            for (int u = 0; u < 16; u++) acc[u] += c[b] * r[u];
        }
        for (int u = 0; u < 16; u++) y[d + u] = acc[u];
    }
    for (; d < n; d++) {
        float acc = y[d];
        for (int64_t b = 0; b < nb; b++) acc += c[b] * base[b * stride + d];
        y[d] = acc;
    }
}
/* Softmax pieces over one block of nb <= ATT_BLK scores (arrays with room for ATT_BLK floats):
 *   scalev:   x *= f (x of any length: an output row)
 *   scalemax: s *= scale; returns max s (NaN scores ignored here: they propagate through exp);
 *             -inf when nb = 0
 *   expsum:   s = e^(s − m); returns Σ s
 *   softgrad: p = e^(p·scale − L[b]); dp = p·(dp − D[b])·scale   (attention backward: p and scale·ds) */
static inline void scalev_sc(float *x, int64_t n, float f) {
    for (int64_t i = 0; i < n; i++) x[i] *= f;
}
static inline float scalemax_sc(float *s, int64_t nb, float scale) {
    float bm = -INFINITY;
    for (int64_t b = 0; b < nb; b++) {
        s[b] *= scale;
        bm = s[b] > bm ? s[b] : bm;
    }
    return bm;
}
static inline float expsum_sc(float *s, int64_t nb, float m) {
    float l = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        s[b] = expf(s[b] - m);
        l += s[b];
    }
    return l;
}
static inline void softgrad_sc(float *p, float *dp, int64_t nb, float scale, const float *L, const float *D) {
    for (int64_t b = 0; b < nb; b++) {
        p[b] = expf(p[b] * scale - L[b]);
        dp[b] = p[b] * (dp[b] - D[b]) * scale;
    }
}

#if ATT_X86
/* ---- AVX2 + FMA ---- */
__attribute__((target("avx2,fma"))) static inline float dot_256(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- AVX-512 F (masked tails) ---- */
#define ATT_T512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma")))
ATT_T512 static inline float dot_512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* exp: vexp.h's e^x (<= 1 ulp, expf's special values: NaN stays NaN — a NaN score must not become a
 * zero weight, no silent divergence; s − max = −inf gives exactly 0). */
/* ---- softmax pieces (see scalemax_sc / expsum_sc / softgrad_sc) ---- */
ATT_T512 static inline __mmask16 att_tail16(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}
ATT_T512 static inline void scalev_512(float *x, int64_t n, float f) {
    __m512 fv = _mm512_set1_ps(f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = att_tail16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), fv));
    }
}
ATT_T512 static inline float scalemax_512(float *s, int64_t nb, float scale) {
    __m512 sc = _mm512_set1_ps(scale), mx = _mm512_set1_ps(-INFINITY);
    for (int64_t b = 0; b < nb; b += 16) {
        __mmask16 m = att_tail16(nb - b);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + b), sc);
        _mm512_mask_storeu_ps(s + b, m, v);
        mx = _mm512_mask_max_ps(mx, m, v, mx); /* NaN in v: the second operand (mx) is kept */
    }
    return _mm512_reduce_max_ps(mx);
}
ATT_T512 static inline float expsum_512(float *s, int64_t nb, float mval) {
    __m512 mv = _mm512_set1_ps(mval), acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 16) {
        __mmask16 m = att_tail16(nb - b);
        __m512 e = af_vexp_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + b), mv));
        _mm512_mask_storeu_ps(s + b, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}
ATT_T512 static inline void softgrad_512(float *p, float *dp, int64_t nb, float scale, const float *L,
                                         const float *D) {
    __m512 sc = _mm512_set1_ps(scale);
    for (int64_t b = 0; b < nb; b += 16) {
        __mmask16 m = att_tail16(nb - b);
        __m512 pv = af_vexp_512(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + b), sc),
                                              _mm512_maskz_loadu_ps(m, L + b)));
        __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + b), _mm512_maskz_loadu_ps(m, D + b));
        _mm512_mask_storeu_ps(p + b, m, pv);
        _mm512_mask_storeu_ps(dp + b, m, _mm512_mul_ps(_mm512_mul_ps(pv, g), sc));
    }
}
/* AVX2: whole vectors, then the tail (< 8) through the scalar code's arithmetic on a padded vector */
__attribute__((target("avx2,fma"))) static inline float hmax256(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
__attribute__((target("avx2,fma"))) static inline float hadd256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
__attribute__((target("avx2,fma"))) static inline void scalev_256(float *x, int64_t n, float f) {
    __m256 fv = _mm256_set1_ps(f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), fv));
    for (; i < n; i++) x[i] *= f;
}
__attribute__((target("avx2,fma"))) static inline float scalemax_256(float *s, int64_t nb, float scale) {
    __m256 sc = _mm256_set1_ps(scale), mx = _mm256_set1_ps(-INFINITY);
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + b), sc);
        _mm256_storeu_ps(s + b, v);
        mx = _mm256_max_ps(v, mx); /* NaN in v: the second operand (mx) is kept */
    }
    float bm = hmax256(mx);
    for (; b < nb; b++) {
        s[b] *= scale;
        bm = s[b] > bm ? s[b] : bm;
    }
    return bm;
}
__attribute__((target("avx2,fma"))) static inline float expsum_256(float *s, int64_t nb, float mval) {
    __m256 mv = _mm256_set1_ps(mval), acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256 e = af_vexp_256(_mm256_sub_ps(_mm256_loadu_ps(s + b), mv));
        _mm256_storeu_ps(s + b, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (b < nb) {
        float t[8];
        for (int u = 0; u < 8; u++) t[u] = b + u < nb ? s[b + u] - mval : -INFINITY; /* e^-inf = 0 */
        __m256 e = af_vexp_256(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, e);
        acc = _mm256_add_ps(acc, e);
        for (int64_t u = 0; u < nb - b; u++) s[b + u] = t[u];
    }
    return hadd256(acc);
}
__attribute__((target("avx2,fma"))) static inline void softgrad_256(float *p, float *dp, int64_t nb, float scale,
                                                                    const float *L, const float *D) {
    __m256 sc = _mm256_set1_ps(scale);
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256 pv = af_vexp_256(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + b), sc), _mm256_loadu_ps(L + b)));
        __m256 g = _mm256_sub_ps(_mm256_loadu_ps(dp + b), _mm256_loadu_ps(D + b));
        _mm256_storeu_ps(p + b, pv);
        _mm256_storeu_ps(dp + b, _mm256_mul_ps(_mm256_mul_ps(pv, g), sc));
    }
    if (b < nb) {
        float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t u = 0; u < nb - b; u++) t[u] = p[b + u] * scale - L[b + u];
        _mm256_storeu_ps(t, af_vexp_256(_mm256_loadu_ps(t)));
        for (int64_t u = 0; u < nb - b; u++) {
            p[b + u] = t[u];
            dp[b + u] = t[u] * (dp[b + u] - D[b + u]) * scale;
        }
    }
}
/* ---- block primitives (see dotblk_sc / axpyblk_sc) ---- */
/* four 8-lane sums -> one vector of the 4 totals */
__attribute__((target("avx2,fma"))) static inline __m128 hsum4_128(__m128 a, __m128 b, __m128 c, __m128 d) {
    return _mm_hadd_ps(_mm_hadd_ps(a, b), _mm_hadd_ps(c, d));
}
__attribute__((target("avx2,fma"))) static inline __m128 fold256(__m256 a) {
    return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}
__attribute__((target("avx2,fma"))) static inline void dotblk_256(float *s, const float *x, const float *base,
                                                                  int64_t stride, int64_t nb, int64_t n) {
    int64_t b = 0;
    for (; b + 4 <= nb && n >= 8; b += 4) {
        const float *r0 = base + b * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t d = 0;
        for (; d + 8 <= n; d += 8) {
            __m256 xv = _mm256_loadu_ps(x + d);
            a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r0 + d), a0);
            a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r1 + d), a1);
            a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r2 + d), a2);
            a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r3 + d), a3);
        }
        _mm_storeu_ps(s + b, hsum4_128(fold256(a0), fold256(a1), fold256(a2), fold256(a3)));
        for (; d < n; d++) {
            s[b] += x[d] * r0[d], s[b + 1] += x[d] * r1[d];
            s[b + 2] += x[d] * r2[d], s[b + 3] += x[d] * r3[d];
        }
    }
    for (; b < nb; b++) s[b] = dot_256(x, base + b * stride, n);
}
__attribute__((target("avx2,fma"))) static inline void axpyblk_256(float *y, const float *c, const float *base,
                                                                   int64_t stride, int64_t nb, int64_t n) {
    int64_t d = 0;
    for (; d + 32 <= n; d += 32) {
        __m256 a0 = _mm256_loadu_ps(y + d), a1 = _mm256_loadu_ps(y + d + 8);
        __m256 a2 = _mm256_loadu_ps(y + d + 16), a3 = _mm256_loadu_ps(y + d + 24);
        for (int64_t b = 0; b < nb; b++) {
            const float *r = base + b * stride + d;
            __m256 cb = _mm256_set1_ps(c[b]);
            a0 = _mm256_fmadd_ps(cb, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(cb, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(cb, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(cb, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(y + d, a0), _mm256_storeu_ps(y + d + 8, a1);
        _mm256_storeu_ps(y + d + 16, a2), _mm256_storeu_ps(y + d + 24, a3);
    }
    for (; d + 8 <= n; d += 8) {
        __m256 a0 = _mm256_loadu_ps(y + d);
        for (int64_t b = 0; b < nb; b++) a0 = _mm256_fmadd_ps(_mm256_set1_ps(c[b]), _mm256_loadu_ps(base + b * stride + d), a0);
        _mm256_storeu_ps(y + d, a0);
    }
    for (; d < n; d++) {
        float acc = y[d];
        for (int64_t b = 0; b < nb; b++) acc += c[b] * base[b * stride + d];
        y[d] = acc;
    }
}
ATT_T512 static inline __m128 fold512(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
ATT_T512 static inline void dotblk_512(float *s, const float *x, const float *base, int64_t stride, int64_t nb,
                                       int64_t n) {
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const float *r0 = base + b * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t d = 0;
        for (; d + 16 <= n; d += 16) {
            __m512 xv = _mm512_loadu_ps(x + d);
            a0 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r0 + d), a0);
            a1 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r1 + d), a1);
            a2 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r2 + d), a2);
            a3 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r3 + d), a3);
        }
        if (d < n) {
            __mmask16 m = (__mmask16)((1u << (n - d)) - 1u);
            __m512 xv = _mm512_maskz_loadu_ps(m, x + d);
            a0 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, r0 + d), a0);
            a1 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, r1 + d), a1);
            a2 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, r2 + d), a2);
            a3 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, r3 + d), a3);
        }
        _mm_storeu_ps(s + b, hsum4_128(fold512(a0), fold512(a1), fold512(a2), fold512(a3)));
    }
    for (; b < nb; b++) s[b] = dot_512(x, base + b * stride, n);
}
ATT_T512 static inline void axpyblk_512(float *y, const float *c, const float *base, int64_t stride, int64_t nb,
                                        int64_t n) {
    int64_t d = 0;
    for (; d + 64 <= n; d += 64) {
        __m512 a0 = _mm512_loadu_ps(y + d), a1 = _mm512_loadu_ps(y + d + 16);
        __m512 a2 = _mm512_loadu_ps(y + d + 32), a3 = _mm512_loadu_ps(y + d + 48);
        for (int64_t b = 0; b < nb; b++) {
            const float *r = base + b * stride + d;
            __m512 cb = _mm512_set1_ps(c[b]);
            a0 = _mm512_fmadd_ps(cb, _mm512_loadu_ps(r), a0);
            a1 = _mm512_fmadd_ps(cb, _mm512_loadu_ps(r + 16), a1);
            a2 = _mm512_fmadd_ps(cb, _mm512_loadu_ps(r + 32), a2);
            a3 = _mm512_fmadd_ps(cb, _mm512_loadu_ps(r + 48), a3);
        }
        _mm512_storeu_ps(y + d, a0), _mm512_storeu_ps(y + d + 16, a1);
        _mm512_storeu_ps(y + d + 32, a2), _mm512_storeu_ps(y + d + 48, a3);
    }
    for (; d < n; d += 16) {
        __mmask16 m = n - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - d)) - 1u);
        __m512 a0 = _mm512_maskz_loadu_ps(m, y + d);
        for (int64_t b = 0; b < nb; b++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(c[b]), _mm512_maskz_loadu_ps(m, base + b * stride + d), a0);
        _mm512_mask_storeu_ps(y + d, m, a0);
    }
}
#define DOTBLK(P, s, x, base, stride, nb, n)                                                       \
    ((P) == 2 ? dotblk_512(s, x, base, stride, nb, n)                                              \
              : (P) == 1 ? dotblk_256(s, x, base, stride, nb, n) : dotblk_sc(s, x, base, stride, nb, n))
#define AXPYBLK(P, y, c, base, stride, nb, n)                                                      \
    ((P) == 2 ? axpyblk_512(y, c, base, stride, nb, n)                                             \
              : (P) == 1 ? axpyblk_256(y, c, base, stride, nb, n) : axpyblk_sc(y, c, base, stride, nb, n))
#define DOT(P, a, b, n) ((P) == 2 ? dot_512(a, b, n) : (P) == 1 ? dot_256(a, b, n) : dot_sc(a, b, n))
#define SCALEV(P, x, n, f) ((P) == 2 ? scalev_512(x, n, f) : (P) == 1 ? scalev_256(x, n, f) : scalev_sc(x, n, f))
#define SCALEMAX(P, s, nb, sc) ((P) == 2 ? scalemax_512(s, nb, sc) : (P) == 1 ? scalemax_256(s, nb, sc) : scalemax_sc(s, nb, sc))
#define EXPSUM(P, s, nb, m) ((P) == 2 ? expsum_512(s, nb, m) : (P) == 1 ? expsum_256(s, nb, m) : expsum_sc(s, nb, m))
#define SOFTGRAD(P, p, dp, nb, sc, L, D)                                                           \
    ((P) == 2 ? softgrad_512(p, dp, nb, sc, L, D)                                                  \
              : (P) == 1 ? softgrad_256(p, dp, nb, sc, L, D) : softgrad_sc(p, dp, nb, sc, L, D))
#else
#define SCALEV(P, x, n, f) scalev_sc(x, n, f)
#define SCALEMAX(P, s, nb, sc) scalemax_sc(s, nb, sc)
#define EXPSUM(P, s, nb, m) expsum_sc(s, nb, m)
#define SOFTGRAD(P, p, dp, nb, sc, L, D) softgrad_sc(p, dp, nb, sc, L, D)
#define DOT(P, a, b, n) dot_sc(a, b, n)
#define DOTBLK(P, s, x, base, stride, nb, n) dotblk_sc(s, x, base, stride, nb, n)
#define AXPYBLK(P, y, c, base, stride, nb, n) axpyblk_sc(y, c, base, stride, nb, n)
#endif

#define ATT_INLINE static inline __attribute__((always_inline))

/* Keys visible to the query at absolute position p: [*lo, *hi] (empty when hi < lo). */
static inline void key_range(int64_t p, int64_t n_kv, int64_t window, int64_t *lo, int64_t *hi) {
    *hi = p < n_kv - 1 ? p : n_kv - 1;
    *lo = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
}

/* ------------------------------------------------------------------------------------------------
 * Forward. A work item is one query row i and up to ATT_HG query heads h0.. of one kv group g: the
 * heads share each block of K/V rows while it is in L1/L2 (GQA: 3× less K/V traffic for SmolLM2,
 * 4× for Gemma 3 — decode is bound by reading the cache). Per head, the arithmetic is the same
 * whatever the grouping, so a decode row equals the matching row of a full forward bit for bit.
 * ---------------------------------------------------------------------------------------------- */
#define ATT_HG 4

typedef struct af_att_fwd_args {
    float *out, *lse;
    const float *q, *k, *v;
    int64_t n_q, q_pos0, n_kv, kv_stride, n_heads, n_kv_heads, hd, window;
    float scale;
    int64_t n_sub; /* head sub-groups per kv group: ceil(group / ATT_HG) */
} fwd_args;

/* Work item it = (i * n_kv_heads + g) * n_sub + sub. */
ATT_INLINE void fwd_item(const int P, const fwd_args *a, int64_t it) {
    const int64_t hd = a->hd, stride = a->kv_stride, group = a->n_heads / a->n_kv_heads;
    int64_t sub = it % a->n_sub, ig = it / a->n_sub, g = ig % a->n_kv_heads, i = ig / a->n_kv_heads;
    int64_t h0 = g * group + sub * ATT_HG, nh = group - sub * ATT_HG < ATT_HG ? group - sub * ATT_HG : ATT_HG;
    const float *kh = a->k + g * hd, *vh = a->v + g * hd;
    float s[ATT_BLK], m[ATT_HG], l[ATT_HG];
    int64_t lo, hi;
    key_range(a->q_pos0 + i, a->n_kv, a->window, &lo, &hi);
    for (int64_t hh = 0; hh < nh; hh++) {
        float *o = a->out + (i * a->n_heads + h0 + hh) * hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        m[hh] = -INFINITY, l[hh] = 0.0f;
    }
    for (int64_t j0 = lo; j0 <= hi; j0 += ATT_BLK) {
        int64_t nb = hi - j0 + 1 < ATT_BLK ? hi - j0 + 1 : ATT_BLK;
        for (int64_t hh = 0; hh < nh; hh++) {
            const float *qr = a->q + (i * a->n_heads + h0 + hh) * hd;
            float *o = a->out + (i * a->n_heads + h0 + hh) * hd;
            DOTBLK(P, s, qr, kh + j0 * stride, stride, nb, hd);
            float bm = SCALEMAX(P, s, nb, a->scale);
            if (bm > m[hh]) { /* new running max: rescale the accumulated sum and row (0 at first) */
                float f = expf(m[hh] - bm);
                l[hh] *= f;
                if (f != 1.0f)
                    SCALEV(P, o, hd, f);
                m[hh] = bm;
            }
            l[hh] += EXPSUM(P, s, nb, m[hh]);
            AXPYBLK(P, o, s, vh + j0 * stride, stride, nb, hd);
        }
    }
    for (int64_t hh = 0; hh < nh; hh++) {
        float *o = a->out + (i * a->n_heads + h0 + hh) * hd;
        float L = -INFINITY; /* no visible key (impossible when n_kv >= q_pos0+n_q): zero row */
        if (l[hh] > 0.0f) {
            float inv = 1.0f / l[hh];
            SCALEV(P, o, hd, inv);
            L = m[hh] + logf(l[hh]);
        }
        if (a->lse) a->lse[(h0 + hh) * a->n_q + i] = L;
    }
}

typedef struct af_att_bwd_args {
    float *dq, *dk, *dv, *D;
    const float *dout, *out, *lse, *q, *k, *v;
    int64_t n_q, q_pos0, n_kv, n_heads, n_kv_heads, hd, window;
    float scale;
} bwd_args;

/* Pass A: D and dq for work item it = i * n_heads + h. */
ATT_INLINE void bwd_item_q(const int P, const bwd_args *a, int64_t it) {
    const int64_t n_q = a->n_q, n_heads = a->n_heads, hd = a->hd;
    const int64_t qs = n_heads * hd, ks = a->n_kv_heads * hd; /* row strides */
    int64_t i = it / n_heads, h = it % n_heads, g = h / (n_heads / a->n_kv_heads);
    const float *qi = a->q + i * qs + h * hd, *doi = a->dout + i * qs + h * hd;
    float *dqi = a->dq + i * qs + h * hd;
    float D = DOT(P, doi, a->out + i * qs + h * hd, hd);
    if (a->D) a->D[h * n_q + i] = D;
    float L = a->lse[h * n_q + i];
    int64_t lo, hi;
    key_range(a->q_pos0 + i, a->n_kv, a->window, &lo, &hi);
    float p[ATT_BLK], dp[ATT_BLK], Lb[ATT_BLK], Db[ATT_BLK];
    for (int64_t b = 0; b < ATT_BLK; b++) Lb[b] = L, Db[b] = D;
    for (int64_t j0 = lo; j0 <= hi; j0 += ATT_BLK) {
        int64_t nb = hi - j0 + 1 < ATT_BLK ? hi - j0 + 1 : ATT_BLK;
        const float *kb = a->k + j0 * ks + g * hd, *vb = a->v + j0 * ks + g * hd;
        DOTBLK(P, p, qi, kb, ks, nb, hd);
        DOTBLK(P, dp, doi, vb, ks, nb, hd);
        SOFTGRAD(P, p, dp, nb, a->scale, Lb, Db); /* p, and dp = scale · ds */
        AXPYBLK(P, dqi, dp, kb, ks, nb, hd);
    }
}

/* Pass B: dk, dv for work item it = j * n_kv_heads + g, over the queries i that see key j. */
ATT_INLINE void bwd_item_kv(const int P, const bwd_args *a, int64_t it) {
    const int64_t n_q = a->n_q, n_heads = a->n_heads, nkh = a->n_kv_heads, hd = a->hd;
    const int64_t group = n_heads / nkh, qs = n_heads * hd, ks = nkh * hd;
    int64_t j = it / nkh, g = it % nkh;
    int64_t i0 = j - a->q_pos0 > 0 ? j - a->q_pos0 : 0;
    int64_t i1 = n_q - 1;
    if (a->window > 0 && j + a->window - 1 - a->q_pos0 < i1) i1 = j + a->window - 1 - a->q_pos0;
    const float *kj = a->k + j * ks + g * hd, *vj = a->v + j * ks + g * hd;
    float *dkj = a->dk + j * ks + g * hd, *dvj = a->dv + j * ks + g * hd;
    float p[ATT_BLK], dp[ATT_BLK], Dl[ATT_BLK];
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        for (int64_t c0 = i0; c0 <= i1; c0 += ATT_BLK) {
            int64_t nb = i1 - c0 + 1 < ATT_BLK ? i1 - c0 + 1 : ATT_BLK;
            const float *qb = a->q + c0 * qs + h * hd, *dob = a->dout + c0 * qs + h * hd;
            DOTBLK(P, p, kj, qb, qs, nb, hd);
            DOTBLK(P, dp, vj, dob, qs, nb, hd);
            const float *Db = a->D ? a->D + h * n_q + c0 : Dl;
            if (!a->D)
                for (int64_t b = 0; b < nb; b++) Dl[b] = DOT(P, dob + b * qs, a->out + (c0 + b) * qs + h * hd, hd);
            SOFTGRAD(P, p, dp, nb, a->scale, a->lse + h * n_q + c0, Db); /* p, and dp = scale · ds */
            AXPYBLK(P, dvj, p, dob, qs, nb, hd);
            AXPYBLK(P, dkj, dp, qb, qs, nb, hd);
        }
    }
}

/* The pool jobs are the target-specific functions (fwd_item etc. inlined with the ISA's P), so
 * each table entry gets its own; items are dealt dynamically, 4 at a time (causal rows differ in
 * cost). Each item writes its own rows of the outputs: the result does not depend on the team. */
#define ATT_DEFINE_PATH(SUFFIX, ATTR, P)                                                           \
    ATTR static void fwd_job_##SUFFIX(void *va, int64_t i0, int64_t i1, int tid) {                 \
        for (int64_t it = i0; it < i1; it++) fwd_item(P, (const fwd_args *)va, it);               \
    }                                                                                              \
    ATTR static void bwdq_job_##SUFFIX(void *va, int64_t i0, int64_t i1, int tid) {                \
        for (int64_t it = i0; it < i1; it++) bwd_item_q(P, (const bwd_args *)va, it);             \
    }                                                                                              \
    ATTR static void bwdkv_job_##SUFFIX(void *va, int64_t i0, int64_t i1, int tid) {               \
        for (int64_t it = i0; it < i1; it++) bwd_item_kv(P, (const bwd_args *)va, it);            \
    }                                                                                              \
    static void fwd_##SUFFIX(const af_ctx *ctx, const fwd_args *a, int64_t items, int par) {       \
        af_threadpool_run(ctx->pool, par ? ctx->n_threads : 1, items, items >= 8 * ctx->n_threads ? 4 : 1,  \
                          fwd_job_##SUFFIX, (void *)a);                                            \
    }                                                                                              \
    static void bwd_##SUFFIX(const af_ctx *ctx, const bwd_args *a, int par) {                      \
        int nth = par ? ctx->n_threads : 1;                                                        \
        af_threadpool_run(ctx->pool, nth, a->n_q * a->n_heads, 4, bwdq_job_##SUFFIX, (void *)a);         \
        af_threadpool_run(ctx->pool, nth, a->n_kv * a->n_kv_heads, 4, bwdkv_job_##SUFFIX, (void *)a);    \
    }

/* The af_att_rows parts of the dispatch tables (kernels.h). */
ATT_DEFINE_PATH(sc, , 0)
const af_att_rows af_att_rows_scalar = {fwd_sc, bwd_sc};
#if ATT_X86
ATT_DEFINE_PATH(256, __attribute__((target("avx2,fma"))), 1)
ATT_DEFINE_PATH(512, ATT_T512, 2)
const af_att_rows af_att_rows_avx2 = {fwd_256, bwd_256};
const af_att_rows af_att_rows_avx512 = {fwd_512, bwd_512};
#endif

/* Parallel only when the work (rows × keys × head_dim) pays for a parallel region: a decode row
 * of SmolLM2 (9 heads of 64) from 114 keys on. Items are then dealt one at a time when they are
 * few (a decode row's 3 kv groups), in chunks of 4 otherwise. */
static int att_par(int64_t items, int64_t n_kv, int64_t hd) {
    return items > 1 && items * n_kv * hd >= 65536;
}

void af_attention_forward(const af_ctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                          int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window) {
    if (n_q <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return;
    /* training sequences (lse requested) of >= 192 tokens: blocked products on the packed GEMM
     * (attention_gemm.c; measured slower than the row kernels at 128 tokens, 1.5x faster at 512) */
    if (lse && n_q >= 192 && af_att_gemm_usable(ctx, n_q, q_pos0, n_kv, n_heads, n_kv_heads, head_dim) &&
        af_att_gemm_forward(ctx, out, lse, q, k, v, n_q, n_kv, kv_stride, n_heads, n_kv_heads, head_dim, scale, window))
        return;
    /* up to ATT_HG heads per item, sharing each K/V block while it is in L1 (one head per item was
     * measured to double decode attention's CPU time: each head reads the cache from L3 itself) */
    int64_t group = n_heads / n_kv_heads, n_sub = (group + ATT_HG - 1) / ATT_HG;
    fwd_args a = {out, lse, q, k, v, n_q, q_pos0, n_kv, kv_stride, n_heads, n_kv_heads, head_dim, window,
                  scale, n_sub};
    int64_t items = n_q * n_kv_heads * n_sub;
    int par = items > 1 && att_par(n_q * n_heads, n_kv, head_dim);
    ctx->k->att->fwd(ctx, &a, items, par);
}

void af_attention_backward(const af_ctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                           int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window) {
    if (n_q <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return;
    if (af_att_gemm_usable(ctx, n_q, q_pos0, n_kv, n_heads, n_kv_heads, head_dim) &&
        af_att_gemm_backward(ctx, dq, dk, dv, dout, out, lse, q, k, v, n_q, n_kv, n_heads, n_kv_heads, head_dim, scale,
                             window))
        return;
    bwd_args a = {dq, dk, dv, NULL, dout, out, lse, q, k, v, n_q, q_pos0, n_kv, n_heads, n_kv_heads,
                  head_dim, window, scale};
    int par = att_par(n_q * n_heads, n_kv, head_dim);
    /* D = rowsum(dout ⊙ out), saved by pass A for pass B; without memory pass B recomputes it. */
    a.D = malloc((size_t)(n_q * n_heads) * sizeof(float));
    ctx->k->att->bwd(ctx, &a, par);
    free(a.D);
}
