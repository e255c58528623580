/*
 * ops.c — element-wise and per-row transformer ops on float32 (RMSNorm, RoPE, SwiGLU, GeGLU, add,
 * softmax), each forward beside its backward. Attention lives in ops_attention.c.
 * Contract and formulas: ops.h; shared/reference/FORMATS.md §3.4, §4.3 and §7.
 *
 * Numerics: row sums (RMSNorm's Σx², its backward Σ(g·x), softmax's Σexp) are accumulated in
 * double — cheap next to the matmuls and exact to f32 rounding for any dim. RoPE angles are formed in
 * double (θ = pos·base^(−2i/d), reduced mod 2π) and then cosf/sinf, so they stay accurate at large
 * positions (ggml instead iterates θ *= base^(−2/d) in f32, which drifts by ~1e-3 rad at pos ~ 4k).
 * Threads: OpenMP over rows/elements when the call is large enough to pay for a parallel region.
 */
#include "kernels/ops.h"

#include "core/threads.h"

#include <math.h>
#include <stddef.h>

#ifdef _OPENMP
#define OPS_PRAGMA(x) _Pragma(#x)
#define OPS_PAR_FOR(clauses) OPS_PRAGMA(omp parallel for clauses)
#else
#define OPS_PAR_FOR(clauses)
#endif

/* Below this many floats of work a call runs on one thread (parallel-region cost ~ a few µs). */
#define AF_OPS_PAR_MIN 32768

/* ------------------------------------------------------------------------------------------------
 * RMSNorm
 * ---------------------------------------------------------------------------------------------- */

void af_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                        float eps) {
    int par = n > 1 && n * dim >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * dim;
        float *yr = y + t * dim;
        double ss = 0.0;
        for (int64_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
        if (rstd) rstd[t] = r;
        for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * r * w[i];
    }
}

void af_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, int64_t n, int64_t dim) {
    int par = n > 1 && n * dim >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * dim, *dyr = dy + t * dim;
        float *dxr = dx + t * dim;
        float r = rstd[t];
        double gx = 0.0;
        for (int64_t i = 0; i < dim; i++) gx += (double)(w[i] * dyr[i]) * xr[i];
        float c = (float)((double)r * r * r / (double)dim * gx);
        for (int64_t i = 0; i < dim; i++) dxr[i] += r * (w[i] * dyr[i]) - c * xr[i];
    }
    if (!dw) return;
    /* dw: parallel over column blocks (each thread owns its columns; no races). */
    int64_t nblk = (dim + 255) / 256;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * 256, i1 = i0 + 256 < dim ? i0 + 256 : dim;
        for (int64_t t = 0; t < n; t++) {
            const float *xr = x + t * dim, *dyr = dy + t * dim;
            float r = rstd[t];
            for (int64_t i = i0; i < i1; i++) dw[i] += dyr[i] * xr[i] * r;
        }
    }
}

/* ------------------------------------------------------------------------------------------------
 * RoPE
 * ---------------------------------------------------------------------------------------------- */

#define ROPE_CHUNK 64 /* pairs per stack table */

/* Rotate all heads of one token by angles θ_i = pos·base^(−2i/hd) (sign = +1 forward, −1 inverse). */
static void rope_token(float *xt, double pos, int64_t n_heads, int64_t hd, double log_base, int neox,
                       float sign) {
    int64_t half = hd / 2;
    float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t c0 = 0; c0 < half; c0 += ROPE_CHUNK) {
        int64_t nc = half - c0 < ROPE_CHUNK ? half - c0 : ROPE_CHUNK;
        for (int64_t c = 0; c < nc; c++) {
            int64_t i = c0 + c;
            double th = pos * exp(-2.0 * (double)i / (double)hd * log_base);
            th -= two_pi * floor(th / two_pi); /* reduce in double, then f32 trig */
            cs[c] = cosf((float)th);
            sn[c] = sign * sinf((float)th);
        }
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = xt + h * hd;
            if (neox) {
                float *x0 = xh + c0, *x1 = xh + half + c0;
                for (int64_t c = 0; c < nc; c++) {
                    float a = x0[c], b = x1[c];
                    x0[c] = a * cs[c] - b * sn[c];
                    x1[c] = a * sn[c] + b * cs[c];
                }
            } else {
                float *xp = xh + 2 * c0;
                for (int64_t c = 0; c < nc; c++) {
                    float a = xp[2 * c], b = xp[2 * c + 1];
                    xp[2 * c] = a * cs[c] - b * sn[c];
                    xp[2 * c + 1] = a * sn[c] + b * cs[c];
                }
            }
        }
    }
}

static void rope_apply(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                       float base, int neox, float sign) {
    double log_base = log((double)base);
    int par = n > 1 && n * n_heads * head_dim >= AF_OPS_PAR_MIN / 4;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t t = 0; t < n; t++)
        rope_token(x + t * n_heads * head_dim, (double)pos[t], n_heads, head_dim, log_base, neox, sign);
}

void af_rope_forward(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                     float base, int neox) {
    rope_apply(x, pos, n, n_heads, head_dim, base, neox, 1.0f);
}

void af_rope_backward(float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                      float base, int neox) {
    rope_apply(dx, pos, n, n_heads, head_dim, base, neox, -1.0f);
}

/* ------------------------------------------------------------------------------------------------
 * Gated activations
 * ---------------------------------------------------------------------------------------------- */

/* σ(x) = 1/(1+e^−x); for x → −∞ e^−x overflows to inf and σ → 0 exactly, no NaN. */
static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void af_swiglu_forward(float *h, const float *gate, const float *up, int64_t n) {
    int par = n >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g * sigmoidf_(g) * up[i];
    }
}

void af_swiglu_backward(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                        int64_t n) {
    int par = n >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoidf_(g);
        d_gate[i] += dh[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        d_up[i] += dh[i] * g * s;
    }
}

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

void af_geglu_forward(float *h, const float *gate, const float *up, int64_t n) {
    int par = n >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        h[i] = 0.5f * x * (1.0f + t) * up[i];
    }
}

void af_geglu_backward(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up,
                       int64_t n) {
    int par = n >= AF_OPS_PAR_MIN;
    (void)par;
OPS_PAR_FOR(schedule(static) if (par))
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
        float g = 0.5f * x * (1.0f + t);
        float dg = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        d_gate[i] += dh[i] * up[i] * dg;
        d_up[i] += dh[i] * g;
    }
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
