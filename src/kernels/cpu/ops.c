/*
 * ops.c — element-wise and per-row transformer ops on float32 (RMSNorm, RoPE, SwiGLU, GeGLU, add,
 * softmax), each forward beside its backward. Attention lives in ops_attention.c.
 * Contract and formulas: ops.h; docs/FORMATS.md §3.4, §4.3 and §7.
 *
 * Numerics: row sums (RMSNorm's Σx², its backward Σ(g·x), softmax's Σexp) are accumulated in
 * double — cheap next to the matmuls and exact to f32 rounding for any dim. RoPE angles are formed in
 * double (θ = pos·base^(−2i/d), reduced mod 2π) and then cosf/sinf, so they stay accurate at large
 * positions (ggml instead iterates θ *= base^(−2/d) in f32, which drifts by ~1e-3 rad at pos ~ 4k).
 * SIMD: RMSNorm, RoPE, SwiGLU and af_vexpf have AVX2+FMA and AVX-512 kernels beside the scalar C,
 * exported as the af_ops_rows parts of the dispatch tables (kernels.h) and reached as ctx->k->ops. RMSNorm and RoPE do the
 * same float operations in the same order on every path (same bits); SwiGLU's SIMD paths use
 * vexp.h's e^x (<= 1 ulp) where the scalar path calls expf.
 * Threads: the context's pool over rows/elements (ctx->n_threads) when the call is large enough to
 * pay for a dispatch (AF_OPS_PAR_MIN); smaller calls run on the caller alone.
 */
#include "kernels/ops.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vexp.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Below this many floats of work a call runs on one thread (parallel-region cost ~ a few µs). */
#define AF_OPS_PAR_MIN 32768

/* ------------------------------------------------------------------------------------------------
 * Kernel paths. The per-path kernels below work on one row or one contiguous range; the pool
 * jobs stay in the generic functions and call them through ctx->k->ops (a target-specific
 * function cannot be inlined into generic code anyway, so each is one call per row or per
 * OPS_EW_CHUNK elements).
 * ---------------------------------------------------------------------------------------------- */
#if AF_VEXP_X86
#define OPS_T256 AF_VEXP_T256
#define OPS_T512 AF_VEXP_T512
#endif

/* elements per work unit of the element-wise ops (a fixed split: results do not depend on threads) */
#define OPS_EW_CHUNK 8192

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------------------------------------
 * RMSNorm
 * Row sums in double over 32 lanes: element i goes to lane i % 32, lanes are summed by the fixed
 * tree (16, 8, 4, 2, 1). A float·float product is exact in double, so a fused multiply-add into a
 * lane rounds exactly like the scalar add: every path gives the same bits.
 * ---------------------------------------------------------------------------------------------- */
#define RMS_LANES 32

static inline double lanes_sum(double *a) {
    for (int s = RMS_LANES / 2; s >= 1; s /= 2)
        for (int i = 0; i < s; i++) a[i] += a[i + s];
    return a[0];
}

/* Σ a[i]·b[i] in double (a == b: Σ a²) */
static double dsum_sc(const float *a, const float *b, int64_t n) {
    double acc[RMS_LANES] = {0};
    for (int64_t i = 0; i < n; i++) acc[i % RMS_LANES] += (double)a[i] * b[i];
    return lanes_sum(acc);
}
/* Σ (w[i]·dy[i])·x[i] in double, the product w·dy rounded to float first */
static double dsum3_sc(const float *w, const float *dy, const float *x, int64_t n) {
    double acc[RMS_LANES] = {0};
    for (int64_t i = 0; i < n; i++) acc[i % RMS_LANES] += (double)(w[i] * dy[i]) * x[i];
    return lanes_sum(acc);
}
static void rms_scale_sc(float *y, const float *x, const float *w, float r, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}
static void rms_bwd_row_sc(float *dx, const float *dy, const float *x, const float *w, float r, float c,
                           int64_t n) {
    for (int64_t i = 0; i < n; i++) dx[i] += r * (w[i] * dy[i]) - c * x[i];
}

#if AF_VEXP_X86
/* acc (4 × 8 lanes = 32) += lo/hi halves of two 16-float products */
OPS_T512 static inline __m512d cvt_lo(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
OPS_T512 static inline __m512d cvt_hi(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
OPS_T512 static inline __mmask16 tail16(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}
/* one 32-float step: u = a (or w·dy), v = b; lanes += u·v in double */
#define DSUM512_STEP(u0, v0, u1, v1)                                                                \
    do {                                                                                           \
        a0 = _mm512_fmadd_pd(cvt_lo(u0), cvt_lo(v0), a0);                                         \
        a1 = _mm512_fmadd_pd(cvt_hi(u0), cvt_hi(v0), a1);                                         \
        a2 = _mm512_fmadd_pd(cvt_lo(u1), cvt_lo(v1), a2);                                         \
        a3 = _mm512_fmadd_pd(cvt_hi(u1), cvt_hi(v1), a3);                                         \
    } while (0)
#define DSUM512_END()                                                                              \
    double acc[RMS_LANES];                                                                         \
    _mm512_storeu_pd(acc, a0), _mm512_storeu_pd(acc + 8, a1);                                      \
    _mm512_storeu_pd(acc + 16, a2), _mm512_storeu_pd(acc + 24, a3);                                \
    return lanes_sum(acc)

OPS_T512 static double dsum_512(const float *a, const float *b, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 32) {
        __mmask16 m0 = tail16(n - i), m1 = tail16(n - i - 16);
        __m512 u0 = _mm512_maskz_loadu_ps(m0, a + i), u1 = _mm512_maskz_loadu_ps(m1, a + i + 16);
        __m512 v0 = _mm512_maskz_loadu_ps(m0, b + i), v1 = _mm512_maskz_loadu_ps(m1, b + i + 16);
        DSUM512_STEP(u0, v0, u1, v1);
    }
    DSUM512_END();
}
OPS_T512 static double dsum3_512(const float *w, const float *dy, const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 32) {
        __mmask16 m0 = tail16(n - i), m1 = tail16(n - i - 16);
        __m512 u0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, w + i), _mm512_maskz_loadu_ps(m0, dy + i));
        __m512 u1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, w + i + 16), _mm512_maskz_loadu_ps(m1, dy + i + 16));
        __m512 v0 = _mm512_maskz_loadu_ps(m0, x + i), v1 = _mm512_maskz_loadu_ps(m1, x + i + 16);
        DSUM512_STEP(u0, v0, u1, v1);
    }
    DSUM512_END();
}
OPS_T512 static void rms_scale_512(float *y, const float *x, const float *w, float r, int64_t n) {
    __m512 rv = _mm512_set1_ps(r);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rv), _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}
OPS_T512 static void rms_bwd_row_512(float *dx, const float *dy, const float *x, const float *w, float r,
                                     float c, int64_t n) {
    __m512 rv = _mm512_set1_ps(r), cv = _mm512_set1_ps(c);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, dy + i));
        __m512 t = _mm512_sub_ps(_mm512_mul_ps(rv, g), _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m, x + i)));
        _mm512_mask_storeu_ps(dx + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx + i), t));
    }
}

/* AVX2: 8 accumulators of 4 double lanes over 32 floats; the tail (< 32) goes lane by lane */
#define DSUM256_BODY(LOADU)                                                                        \
    __m256d a[8];                                                                                  \
    for (int l = 0; l < 8; l++) a[l] = _mm256_setzero_pd();                                        \
    int64_t i = 0;                                                                                 \
    for (; i + 32 <= n; i += 32)                                                               \
        for (int l = 0; l < 4; l++) {                                                              \
            __m256 u = LOADU(i + 8 * l), v = _mm256_loadu_ps(b + i + 8 * l);                       \
            a[2 * l] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(u)),                 \
                                       _mm256_cvtps_pd(_mm256_castps256_ps128(v)), a[2 * l]);      \
            a[2 * l + 1] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(u, 1)),           \
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), a[2 * l + 1]); \
        }                                                                                          \
    double acc[RMS_LANES];                                                                         \
    for (int l = 0; l < 8; l++) _mm256_storeu_pd(acc + 4 * l, a[l])

OPS_T256 static double dsum_256(const float *a_, const float *b, int64_t n) {
#define LOAD_A(j) _mm256_loadu_ps(a_ + (j))
    DSUM256_BODY(LOAD_A);
#undef LOAD_A
    for (; i < n; i++) acc[i % RMS_LANES] += (double)a_[i] * b[i];
    return lanes_sum(acc);
}
OPS_T256 static double dsum3_256(const float *w, const float *dy, const float *b, int64_t n) {
#define LOAD_WDY(j) _mm256_mul_ps(_mm256_loadu_ps(w + (j)), _mm256_loadu_ps(dy + (j)))
    DSUM256_BODY(LOAD_WDY);
#undef LOAD_WDY
    for (; i < n; i++) acc[i % RMS_LANES] += (double)(w[i] * dy[i]) * b[i];
    return lanes_sum(acc);
}
OPS_T256 static void rms_scale_256(float *y, const float *x, const float *w, float r, int64_t n) {
    __m256 rv = _mm256_set1_ps(r);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = x[i] * r * w[i];
}
OPS_T256 static void rms_bwd_row_256(float *dx, const float *dy, const float *x, const float *w, float r,
                                     float c, int64_t n) {
    __m256 rv = _mm256_set1_ps(r), cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(dy + i));
        __m256 t = _mm256_sub_ps(_mm256_mul_ps(rv, g), _mm256_mul_ps(cv, _mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(dx + i, _mm256_add_ps(_mm256_loadu_ps(dx + i), t));
    }
    for (; i < n; i++) dx[i] += r * (w[i] * dy[i]) - c * x[i];
}
#endif

/* Arguments of the row jobs of this file (each job reads the fields it needs). */
typedef struct ops_job {
    const af_ops_rows *K;
    float *y, *y2, *y3, *rstd;
    const float *x, *w, *dy, *x2, *x3, *crstd;
    const int32_t *pos;
    const double *freq;
    float *tab;
    int64_t n, dim, half, hd, n_heads, tstride, pmin;
    double log_base;
    float eps, sign;
    int neox;
} ops_job;

/* The threads of an op over `work` elements: all of the context's when par, else the caller. */
static int ops_threads(const af_ctx *ctx, int par) { return par ? ctx->n_threads : 1; }

static void rmsnorm_fwd_job(void *va, int64_t t0, int64_t t1, int tid) {
    const ops_job *J = va;
    const int64_t dim = J->dim;
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = J->x + t * dim;
        double ss = J->K->dsum(xr, xr, dim);
        float r = (float)(1.0 / sqrt(ss / (double)dim + (double)J->eps));
        if (J->rstd) J->rstd[t] = r;
        J->K->rms_scale(J->y + t * dim, xr, J->w, r, dim);
    }
}

void af_rmsnorm_forward(const af_ctx *ctx,
                        float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                        float eps) {
    int par = n > 1 && n * dim >= AF_OPS_PAR_MIN;
    ops_job J = {.K = ctx->k->ops, .y = y, .rstd = rstd, .x = x, .w = w, .n = n, .dim = dim, .eps = eps};
    af_threadpool_run(ctx->pool, ops_threads(ctx, par), n, 0, rmsnorm_fwd_job, &J);
}

static void rmsnorm_bwd_job(void *va, int64_t t0, int64_t t1, int tid) {
    const ops_job *J = va;
    const int64_t dim = J->dim;
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = J->x + t * dim, *dyr = J->dy + t * dim;
        float r = J->crstd[t];
        double gx = J->K->dsum3(J->w, dyr, xr, dim);
        float c = (float)((double)r * r * r / (double)dim * gx);
        J->K->rms_bwd_row(J->y + t * dim, dyr, xr, J->w, r, c, dim);
    }
}

/* dw over column blocks [b0, b1) of 256 (each thread owns its columns; rows summed in order). */
static void rmsnorm_dw_job(void *va, int64_t b0, int64_t b1, int tid) {
    const ops_job *J = va;
    const int64_t dim = J->dim;
    float *dw = J->y2;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * 256, i1 = i0 + 256 < dim ? i0 + 256 : dim;
        for (int64_t t = 0; t < J->n; t++) {
            const float *xr = J->x + t * dim, *dyr = J->dy + t * dim;
            float r = J->crstd[t];
            for (int64_t i = i0; i < i1; i++) dw[i] += dyr[i] * xr[i] * r;
        }
    }
}

void af_rmsnorm_backward(const af_ctx *ctx, float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, int64_t n, int64_t dim) {
    int par = n > 1 && n * dim >= AF_OPS_PAR_MIN;
    ops_job J = {.K = ctx->k->ops, .y = dx, .y2 = dw, .x = x, .w = w, .dy = dy, .crstd = rstd, .n = n,
                 .dim = dim};
    af_threadpool_run(ctx->pool, ops_threads(ctx, par), n, 0, rmsnorm_bwd_job, &J);
    if (!dw) return;
    af_threadpool_run(ctx->pool, ops_threads(ctx, par), (dim + 255) / 256, 0, rmsnorm_dw_job, &J);
}

/* ------------------------------------------------------------------------------------------------
 * RoPE
 * The rotation of pair (a, b) by θ is written per element against a partner: y[j] = x[j]·C[j] +
 * x[partner(j)]·S[j], with C = cos θ on both elements of a pair and S = −sin θ on the first, +sin θ
 * on the second (norm: pairs (2i, 2i+1); neox: (i, i + hd/2)). That is the same float arithmetic as
 * (a·cos − b·sin, a·sin + b·cos): −(b·sin) is exact and the sum is commutative.
 * One row of C and S ([2, head_dim] floats) per position. When the call's positions span no more
 * than half its token count (packed batches repeat positions 0..len−1), the rows are built once per
 * distinct position in a malloc'ed table; otherwise (or without memory) once per token on the stack.
 * ---------------------------------------------------------------------------------------------- */

#define ROPE_CHUNK 64 /* pairs per stack row in the per-token fallback */

/* One C/S row (layout above) for pairs i0 .. i0+ni−1 of a position: θ = pos·f reduced mod 2π in
 * double, then f32 cos/sin. f: the ni frequencies base^(−2i/hd) of those pairs. C and S hold 2·ni
 * floats each, indexed by element relative to the chunk (norm: 2c, 2c+1; neox: c, ni+c). */
static void rope_row(float *C, float *S, double pos, const double *f, int64_t ni, int neox, float sign) {
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t c = 0; c < ni; c++) {
        double th = pos * f[c];
        th -= two_pi * floor(th / two_pi); /* reduce in double, then f32 trig */
        float cs = cosf((float)th), sn = sign * sinf((float)th);
        int64_t a = neox ? c : 2 * c, b = neox ? c + ni : 2 * c + 1;
        C[a] = cs, C[b] = cs, S[a] = -sn, S[b] = sn;
    }
}

/* Rotate nh heads of one token (stride hd) by a C/S row covering pairs [i0, i0+ni). */
static void rope_rot_sc(float *xt, const float *C, const float *S, int64_t nh, int64_t hd, int64_t i0,
                        int64_t ni, int neox) {
    int64_t half = hd / 2;
    for (int64_t h = 0; h < nh; h++) {
        float *xh = xt + h * hd;
        if (neox) {
            float *x0 = xh + i0, *x1 = xh + half + i0;
            for (int64_t c = 0; c < ni; c++) {
                float a = x0[c], b = x1[c], cs = C[c], sn = S[ni + c];
                x0[c] = a * cs - b * sn;
                x1[c] = a * sn + b * cs;
            }
        } else {
            float *xp = xh + 2 * i0;
            for (int64_t c = 0; c < ni; c++) {
                float a = xp[2 * c], b = xp[2 * c + 1], cs = C[2 * c], sn = S[2 * c + 1];
                xp[2 * c] = a * cs - b * sn;
                xp[2 * c + 1] = a * sn + b * cs;
            }
        }
    }
}

#if AF_VEXP_X86
OPS_T512 static void rope_rot_512(float *xt, const float *C, const float *S, int64_t nh, int64_t hd,
                                  int64_t i0, int64_t ni, int neox) {
    int64_t half = hd / 2;
    for (int64_t h = 0; h < nh; h++) {
        float *xh = xt + h * hd;
        if (neox) {
            float *x0 = xh + i0, *x1 = xh + half + i0;
            for (int64_t c = 0; c < ni; c += 16) {
                __mmask16 m = tail16(ni - c);
                __m512 a = _mm512_maskz_loadu_ps(m, x0 + c), b = _mm512_maskz_loadu_ps(m, x1 + c);
                __m512 c0 = _mm512_maskz_loadu_ps(m, C + c), s0 = _mm512_maskz_loadu_ps(m, S + c);
                __m512 c1 = _mm512_maskz_loadu_ps(m, C + ni + c), s1 = _mm512_maskz_loadu_ps(m, S + ni + c);
                _mm512_mask_storeu_ps(x0 + c, m, _mm512_add_ps(_mm512_mul_ps(a, c0), _mm512_mul_ps(b, s0)));
                _mm512_mask_storeu_ps(x1 + c, m, _mm512_add_ps(_mm512_mul_ps(b, c1), _mm512_mul_ps(a, s1)));
            }
        } else {
            float *xp = xh + 2 * i0;
            for (int64_t j = 0; j < 2 * ni; j += 16) { /* 2·ni is even: a pair never straddles the mask */
                __mmask16 m = tail16(2 * ni - j);
                __m512 v = _mm512_maskz_loadu_ps(m, xp + j);
                __m512 sw = _mm512_permute_ps(v, 0xB1); /* (x1, x0, x3, x2, ...) */
                __m512 y = _mm512_add_ps(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, C + j)),
                                         _mm512_mul_ps(sw, _mm512_maskz_loadu_ps(m, S + j)));
                _mm512_mask_storeu_ps(xp + j, m, y);
            }
        }
    }
}
OPS_T256 static void rope_rot_256(float *xt, const float *C, const float *S, int64_t nh, int64_t hd,
                                  int64_t i0, int64_t ni, int neox) {
    int64_t half = hd / 2;
    for (int64_t h = 0; h < nh; h++) {
        float *xh = xt + h * hd;
        if (neox) {
            float *x0 = xh + i0, *x1 = xh + half + i0;
            int64_t c = 0;
            for (; c + 8 <= ni; c += 8) {
                __m256 a = _mm256_loadu_ps(x0 + c), b = _mm256_loadu_ps(x1 + c);
                _mm256_storeu_ps(x0 + c, _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(C + c)),
                                                       _mm256_mul_ps(b, _mm256_loadu_ps(S + c))));
                _mm256_storeu_ps(x1 + c, _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(C + ni + c)),
                                                       _mm256_mul_ps(a, _mm256_loadu_ps(S + ni + c))));
            }
            for (; c < ni; c++) {
                float a = x0[c], b = x1[c], cs = C[c], sn = S[ni + c];
                x0[c] = a * cs - b * sn;
                x1[c] = a * sn + b * cs;
            }
        } else {
            float *xp = xh + 2 * i0;
            int64_t j = 0;
            for (; j + 8 <= 2 * ni; j += 8) {
                __m256 v = _mm256_loadu_ps(xp + j), sw = _mm256_permute_ps(v, 0xB1);
                _mm256_storeu_ps(xp + j, _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(C + j)),
                                                       _mm256_mul_ps(sw, _mm256_loadu_ps(S + j))));
            }
            for (; j < 2 * ni; j += 2) {
                float a = xp[j], b = xp[j + 1], cs = C[j], sn = S[j + 1];
                xp[j] = a * cs - b * sn;
                xp[j + 1] = a * sn + b * cs;
            }
        }
    }
}
#endif

/* Table rows of positions pmin + [p0, p1). */
static void rope_tab_job(void *va, int64_t p0, int64_t p1, int tid) {
    const ops_job *J = va;
    const int64_t hd = J->hd;
    for (int64_t p = p0; p < p1; p++)
        rope_row(J->tab + p * 2 * hd, J->tab + p * 2 * hd + hd, (double)J->pmin + (double)p, J->freq, J->half, J->neox,
                 J->sign);
}

/* Tokens [t0, t1) rotated with the table. */
static void rope_rot_job(void *va, int64_t t0, int64_t t1, int tid) {
    const ops_job *J = va;
    for (int64_t t = t0; t < t1; t++) {
        const float *row = J->tab + (int64_t)(J->pos[t] - J->pmin) * 2 * J->hd;
        J->K->rope_rot(J->y + t * J->tstride, row, row + J->hd, J->n_heads, J->hd, 0, J->half, J->neox);
    }
}

/* Tokens [t0, t1) without a table: rows of ROPE_CHUNK pairs on the stack (f_i recomputed when
 * there is no memory for them). */
static void rope_row_job(void *va, int64_t t0, int64_t t1, int tid) {
    const ops_job *J = va;
    const int64_t half = J->half, hd = J->hd;
    for (int64_t t = t0; t < t1; t++) {
        float C[2 * ROPE_CHUNK], S[2 * ROPE_CHUNK];
        double fr[ROPE_CHUNK];
        for (int64_t c0 = 0; c0 < half; c0 += ROPE_CHUNK) {
            int64_t nc = min64(half - c0, ROPE_CHUNK);
            if (!J->freq)
                for (int64_t c = 0; c < nc; c++) {
                    fr[c] = exp(-2.0 * (double)(c0 + c) / (double)hd * J->log_base);
                    if (J->w) fr[c] /= (double)J->w[c0 + c];
                }
            rope_row(C, S, (double)J->pos[t], J->freq ? J->freq + c0 : fr, nc, J->neox, J->sign);
            J->K->rope_rot(J->y + t * J->tstride, C, S, J->n_heads, hd, c0, nc, J->neox);
        }
    }
}

static void rope_apply(const af_ctx *ctx,
                       float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t hd, float base,
                       int neox, const float *ff, float sign) {
    if (n <= 0 || n_heads <= 0 || hd < 2) return;
    const int64_t half = hd / 2, tstride = n_heads * hd;
    const double log_base = log((double)base);
    const af_ops_rows *K = ctx->k->ops;
    int32_t pmin = pos[0], pmax = pos[0];
    for (int64_t t = 1; t < n; t++) {
        pmin = pos[t] < pmin ? pos[t] : pmin;
        pmax = pos[t] > pmax ? pos[t] : pmax;
    }
    const int64_t span = (int64_t)pmax - pmin + 1;
    /* frequencies f_i = base^(−2i/hd), then (table mode) rows of 2·hd floats per position */
    double *freq = NULL;
    float *tab = NULL;
    const int use_tab = span * 2 <= n; /* each position used twice or more on average */
    void *mem = malloc((size_t)half * sizeof(double) + (use_tab ? (size_t)(span * 2 * hd) * sizeof(float) : 0));
    if (mem) {
        freq = mem;
        for (int64_t i = 0; i < half; i++) {
            freq[i] = exp(-2.0 * (double)i / (double)hd * log_base);
            if (ff) freq[i] /= (double)ff[i];
        }
        if (use_tab) tab = (float *)(freq + half);
    }
    int par = n > 1 && n * tstride >= AF_OPS_PAR_MIN / 4;
    ops_job J = {.K = K, .y = x, .pos = pos, .freq = freq, .tab = tab, .n = n, .half = half, .hd = hd,
                 .n_heads = n_heads, .tstride = tstride, .pmin = pmin, .log_base = log_base, .sign = sign,
                 .neox = neox, .w = ff};
    if (tab) {
        af_threadpool_run(ctx->pool, ops_threads(ctx, par), span, 0, rope_tab_job, &J);
        af_threadpool_run(ctx->pool, ops_threads(ctx, par), n, 0, rope_rot_job, &J);
    } else
        af_threadpool_run(ctx->pool, ops_threads(ctx, par), n, 0, rope_row_job, &J);
    free(mem);
}

void af_rope_forward(const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                     float base, int neox) {
    rope_apply(ctx, x, pos, n, n_heads, head_dim, base, neox, NULL, 1.0f);
}

void af_rope_backward(const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                      float base, int neox) {
    rope_apply(ctx, dx, pos, n, n_heads, head_dim, base, neox, NULL, -1.0f);
}

void af_rope_ff_forward(const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                        float base, int neox, const float *freq_factors) {
    rope_apply(ctx, x, pos, n, n_heads, head_dim, base, neox, freq_factors, 1.0f);
}

void af_rope_ff_backward(const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads,
                         int64_t head_dim, float base, int neox, const float *freq_factors) {
    rope_apply(ctx, dx, pos, n, n_heads, head_dim, base, neox, freq_factors, -1.0f);
}

/* ------------------------------------------------------------------------------------------------
 * exp, SwiGLU
 * SIMD paths use vexp.h's e^x (<= 1 ulp; expf's special values); the scalar path libm's expf.
 * σ(x) = 1/(1+e^−x): for x → −∞, e^−x overflows to inf and σ → 0 exactly, no NaN.
 * ---------------------------------------------------------------------------------------------- */

static void vexp_sc(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}
static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static void swiglu_fwd_sc(float *h, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g * sigmoidf_(g) * up[i];
    }
}
static void swiglu_bwd_sc(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                          int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoidf_(g);
        d_gate[i] += dh[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        d_up[i] += dh[i] * g * s;
    }
}

#if AF_VEXP_X86
/* The same float expressions as the scalar loops, lane by lane (no contraction into FMAs). */
OPS_T512 static inline __m512 sigmoid_512(__m512 g) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = af_vexp_512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}
OPS_T512 static void vexp_512(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m, af_vexp_512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}
OPS_T512 static void swiglu_fwd_512(float *h, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(g, sigmoid_512(g)), _mm512_maskz_loadu_ps(m, up + i));
        _mm512_mask_storeu_ps(h + i, m, v);
    }
}
OPS_T512 static void swiglu_bwd_512(float *d_gate, float *d_up, const float *dh, const float *gate,
                                    const float *up, int64_t n) {
    __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), s = sigmoid_512(g);
        __m512 d = _mm512_maskz_loadu_ps(m, dh + i);
        /* s · (1 + g·(1 − s)) */
        __m512 ds = _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, s))));
        __m512 dg = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, up + i)), ds);
        __m512 du = _mm512_mul_ps(_mm512_mul_ps(d, g), s);
        _mm512_mask_storeu_ps(d_gate + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d_gate + i), dg));
        _mm512_mask_storeu_ps(d_up + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d_up + i), du));
    }
}

OPS_T256 static inline __m256 sigmoid_256(__m256 g) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = af_vexp_256(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}
/* AVX2 has no cheap masked tail: the last < 8 elements go through a zero-padded stack vector, so
 * each element gets the same arithmetic wherever it sits. */
OPS_T256 static void vexp_256(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, af_vexp_256(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        for (int64_t u = 0; u < n - i; u++) t[u] = x[i + u];
        _mm256_storeu_ps(t, af_vexp_256(_mm256_loadu_ps(t)));
        for (int64_t u = 0; u < n - i; u++) y[i + u] = t[u];
    }
}
OPS_T256 static inline __m256 swiglu_fwd_v256(__m256 g, __m256 u) {
    return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid_256(g)), u);
}
OPS_T256 static void swiglu_fwd_256(float *h, const float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(h + i, swiglu_fwd_v256(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        for (int64_t u = 0; u < n - i; u++) tg[u] = gate[i + u], tu[u] = up[i + u];
        _mm256_storeu_ps(tg, swiglu_fwd_v256(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        for (int64_t u = 0; u < n - i; u++) h[i + u] = tg[u];
    }
}
/* adds into *dg, *du (8 lanes) */
OPS_T256 static inline void swiglu_bwd_v256(float *dgp, float *dup, __m256 d, __m256 g, __m256 u) {
    __m256 one = _mm256_set1_ps(1.0f), s = sigmoid_256(g);
    __m256 ds = _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, s))));
    _mm256_storeu_ps(dgp, _mm256_add_ps(_mm256_loadu_ps(dgp), _mm256_mul_ps(_mm256_mul_ps(d, u), ds)));
    _mm256_storeu_ps(dup, _mm256_add_ps(_mm256_loadu_ps(dup), _mm256_mul_ps(_mm256_mul_ps(d, g), s)));
}
OPS_T256 static void swiglu_bwd_256(float *d_gate, float *d_up, const float *dh, const float *gate,
                                    const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        swiglu_bwd_v256(d_gate + i, d_up + i, _mm256_loadu_ps(dh + i), _mm256_loadu_ps(gate + i),
                        _mm256_loadu_ps(up + i));
    if (i < n) {
        float td[8] = {0}, tg[8] = {0}, tu[8] = {0}, tdg[8] = {0}, tdu[8] = {0};
        for (int64_t u = 0; u < n - i; u++)
            td[u] = dh[i + u], tg[u] = gate[i + u], tu[u] = up[i + u], tdg[u] = d_gate[i + u], tdu[u] = d_up[i + u];
        swiglu_bwd_v256(tdg, tdu, _mm256_loadu_ps(td), _mm256_loadu_ps(tg), _mm256_loadu_ps(tu));
        for (int64_t u = 0; u < n - i; u++) d_gate[i + u] = tdg[u], d_up[i + u] = tdu[u];
    }
}
#endif

/* Element-wise ops over fixed chunks of OPS_EW_CHUNK elements (threads when n >= AF_OPS_PAR_MIN):
 * chunks [c0, c1) of one op. */
typedef enum { EW_EXP, EW_SWIGLU_FWD, EW_SWIGLU_BWD, EW_GEGLU_FWD, EW_GEGLU_BWD, EW_MUL, EW_MUL_ACC } ew_op;
typedef struct ew_job {
    const af_ops_rows *K;
    ew_op op;
    int64_t n;
    float *y, *y2;
    const float *a, *b, *c;
} ew_job;

static void geglu_fwd_range(float *h, const float *gate, const float *up, int64_t i0, int64_t i1);
static void geglu_bwd_range(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                            int64_t i0, int64_t i1);

static void ew_run_job(void *va, int64_t c0, int64_t c1, int tid) {
    const ew_job *J = va;
    for (int64_t c = c0; c < c1; c++) {
        int64_t i0 = c * OPS_EW_CHUNK, len = min64(J->n - i0, OPS_EW_CHUNK);
        switch (J->op) {
        case EW_EXP: J->K->vexp(J->y + i0, J->a + i0, len); break;
        case EW_SWIGLU_FWD: J->K->swiglu_fwd(J->y + i0, J->a + i0, J->b + i0, len); break;
        case EW_SWIGLU_BWD: J->K->swiglu_bwd(J->y + i0, J->y2 + i0, J->a + i0, J->b + i0, J->c + i0, len); break;
        case EW_GEGLU_FWD: geglu_fwd_range(J->y, J->a, J->b, i0, i0 + len); break;
        case EW_GEGLU_BWD: geglu_bwd_range(J->y, J->y2, J->a, J->b, J->c, i0, i0 + len); break;
        case EW_MUL:
            for (int64_t i = i0; i < i0 + len; i++) J->y[i] = J->a[i] * J->b[i];
            break;
        case EW_MUL_ACC:
            for (int64_t i = i0; i < i0 + len; i++) J->y[i] += J->a[i] * J->b[i];
            break;
        }
    }
}

static void ew_run(const af_ctx *ctx, ew_job *J) {
    J->K = ctx->k->ops;
    af_threadpool_run(ctx->pool, ops_threads(ctx, J->n >= AF_OPS_PAR_MIN), (J->n + OPS_EW_CHUNK - 1) / OPS_EW_CHUNK, 0,
                ew_run_job, J);
}

void af_vexpf(const af_ctx *ctx, float *y, const float *x, int64_t n) {
    ew_run(ctx, &(ew_job){.op = EW_EXP, .n = n, .y = y, .a = x});
}

void af_mul_elementwise(const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n, int acc) {
    ew_run(ctx, &(ew_job){.op = acc ? EW_MUL_ACC : EW_MUL, .n = n, .y = y, .a = a, .b = b});
}

void af_swiglu_forward(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n) {
    ew_run(ctx, &(ew_job){.op = EW_SWIGLU_FWD, .n = n, .y = h, .a = gate, .b = up});
}

void af_swiglu_backward(const af_ctx *ctx,
                        float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                        int64_t n) {
    ew_run(ctx, &(ew_job){.op = EW_SWIGLU_BWD, .n = n, .y = d_gate, .y2 = d_up, .a = dh, .b = gate, .c = up});
}

/* ------------------------------------------------------------------------------------------------
 * GeGLU
 * ---------------------------------------------------------------------------------------------- */

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

static void geglu_fwd_range(float *h, const float *gate, const float *up, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float x = gate[i];
        float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        h[i] = 0.5f * x * (1.0f + t) * up[i];
    }
}

static void geglu_bwd_range(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                            int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float x = gate[i];
        float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        float g = 0.5f * x * (1.0f + t);
        float dg = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        d_gate[i] += dh[i] * up[i] * dg;
        d_up[i] += dh[i] * g;
    }
}

void af_geglu_span_fwd(float *h, const float *gate, const float *up, int64_t n) { geglu_fwd_range(h, gate, up, 0, n); }

void af_geglu_span_bwd(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up, int64_t n) {
    geglu_bwd_range(d_gate, d_up, dh, gate, up, 0, n);
}

/* ------------------------------------------------------------------------------------------------
 * misc
 * ---------------------------------------------------------------------------------------------- */

void af_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void af_softmax_inplace(float *x, int64_t n) {
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    if (m == -INFINITY) { /* every entry masked: an all-zero row rather than NaN */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* ------------------------------------------------------------------------------------------------
 * The af_ops_rows parts of the dispatch tables (kernels.h)
 * ---------------------------------------------------------------------------------------------- */
const af_ops_rows af_ops_rows_scalar = {dsum_sc, dsum3_sc, rms_scale_sc, rms_bwd_row_sc,
                                        rope_rot_sc, vexp_sc, swiglu_fwd_sc, swiglu_bwd_sc};
#if AF_VEXP_X86
const af_ops_rows af_ops_rows_avx2 = {dsum_256, dsum3_256, rms_scale_256, rms_bwd_row_256,
                                      rope_rot_256, vexp_256, swiglu_fwd_256, swiglu_bwd_256};
const af_ops_rows af_ops_rows_avx512 = {dsum_512, dsum3_512, rms_scale_512, rms_bwd_row_512,
                                        rope_rot_512, vexp_512, swiglu_fwd_512, swiglu_bwd_512};
#endif

void af_geglu_forward(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n) {
    ew_run(ctx, &(ew_job){.op = EW_GEGLU_FWD, .n = n, .y = h, .a = gate, .b = up});
}

void af_geglu_backward(const af_ctx *ctx,
                       float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                       int64_t n) {
    ew_run(ctx, &(ew_job){.op = EW_GEGLU_BWD, .n = n, .y = d_gate, .y2 = d_up, .a = dh, .b = gate, .c = up});
}
