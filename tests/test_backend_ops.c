/*
 * test_backend_ops.c — every op of the Vulkan backend (kernels/vulkan/vk.h) against the CPU kernels
 * on the same inputs: forwards and backwards, every weight block format, awkward shapes (one row,
 * odd sizes, sizes that are not multiples of any workgroup, arguments split across buffer windows by
 * lowering the per-buffer limit), the fast paths on and off (subgroup arithmetic, the f32 variants of
 * the shaders that use double), and the failures (no loader, no device, allocation failure, a shader
 * the driver refuses, device lost). Skips with a message where no Vulkan device exists.
 *
 * Tolerances (|vulkan − cpu| per element; u = 2^-24, the f32 unit roundoff):
 *   - products (x·Wᵀ, dy·W, the dense GEMMs, LoRA): both sides dequantize the weights to the same
 *     f32 values and sum K products in f32, in different orders (and the device may fuse
 *     multiply-adds). Each sum is within γ_K·Σ|a_k·b_k| of the exact one (γ_K = K·u/(1 − K·u),
 *     Higham, Accuracy and Stability of Numerical Algorithms, §3.1, for any order), so the two
 *     differ by at most 2·γ_K·Σ|a_k·b_k|: that bound, computed per element, is the tolerance.
 *     LoRA chains three products: the bound of each product, with the operands' own error added.
 *   - ops that do the CPU's float operations in the CPU's order (RMSNorm and pooling/head/AdamW/
 *     losses with the double variants, RoPE, embedding, dropout masks, gather/scatter/bias, add,
 *     scale): identical results are expected on an IEEE device (lavapipe); the tolerance allows 2 ulp
 *     of the result (a driver may round double sqrt/division or f32 sin/cos differently by 1 ulp).
 *   - transcendental element-wise ops (SwiGLU, GeGLU, exp, soft-cap): exp is the CPU's polynomial
 *     (<= 1 ulp from expf), tanh our own (<= 2 ulp): 8 ulp of the largest term of the expression.
 *   - attention (online softmax, f32 dot products of head_dim terms, sums over up to n_kv keys):
 *     per element 64·n_kv·u·(max|v|) for out, 64·hd·u·scale·max|q||k| for lse, and the same
 *     scaled by the gradient magnitudes for the backward (the score error times the largest term).
 *   - the f32 variants (no shaderFloat64): the double sums become f32 sums: γ_n·Σ|terms|.
 * Every check prints its worst error relative to its tolerance with TL_VERBOSE=1.
 */
#include "afinar.h"
#include "core/blocks.h"
#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/vulkan/vk.h"
#include "lora/lora.h"
#include "testlib.h"
#include "train/head.h"
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static af_vk_dev *D;
static uint64_t g_rng = 0xb4c7e9d1u;
static const double U = 1.0 / 16777216.0; /* 2^-24 */

/* ---------------------------------------------------------------- helpers */

static float *frand(int64_t n, float lo, float hi) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = tl_rand_uniform(&g_rng, lo, hi);
    return p;
}
static float *fcopy(const float *x, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    memcpy(p, x, (size_t)n * sizeof *p);
    return p;
}
/* device copy of host bytes */
static void *up(const void *h, size_t bytes) {
    void *p = af_vk_alloc(D, bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "alloc %zu: %s\n", bytes, af_last_error());
        exit(1);
    }
    if (bytes && af_vk_upload(D, p, h, bytes) != AF_OK) fprintf(stderr, "upload: %s\n", af_last_error());
    return p;
}
static float *upf(const float *h, int64_t n) { return up(h, (size_t)n * 4); }
/* host copy of device floats (malloc'ed) */
static float *down(const void *dp, int64_t n) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * 4);
    if (af_vk_download(D, h, dp, (size_t)n * 4) != AF_OK) {
        fprintf(stderr, "download: %s\n", af_last_error());
        for (int64_t i = 0; i < n; i++) h[i] = NAN;
    }
    return h;
}

/* |got − want| <= tol[i] (or the scalar tol0 when tol is NULL) for every element */
static bool close_tol(const char *what, const float *got, const float *want, const double *tol, double tol0, int64_t n,
                      int line) {
    double worst_ratio = 0, worst = 0;
    int64_t wi = 0;
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double t = tol ? tol[i] : tol0;
        double dd = fabs((double)got[i] - (double)want[i]);
        if (isnan(got[i]) != isnan(want[i]) || (isinf(want[i]) && got[i] != want[i])) dd = INFINITY;
        if (isnan(want[i]) && isnan(got[i])) dd = 0;
        if (isinf(want[i]) && got[i] == want[i]) dd = 0;
        double r = t > 0 ? dd / t : (dd > 0 ? INFINITY : 0);
        if (dd > t) ok = false;
        if (r > worst_ratio || (r == worst_ratio && dd > worst)) worst_ratio = r, wi = i;
        if (dd > worst) worst = dd;
    }
    if (!ok || getenv("TL_VERBOSE"))
        fprintf(ok ? stdout : stderr, "%s %s: n=%lld max|diff| %.3g, worst/tolerance %.3g at [%lld]: vulkan %.9g cpu %.9g\n",
                ok ? "ok  " : "FAIL", what, (long long)n, worst, worst_ratio, (long long)wi, (double)got[wi],
                (double)want[wi]);
    return tl_check(ok, __FILE__, line, "%s: vulkan differs from cpu beyond the tolerance", what);
}
#define CLOSE(what, got, want, tol, tol0, n) close_tol(what, got, want, tol, tol0, n, __LINE__)

/* 2 ulp of each element of want (ops expected to be identical) */
static double *ulp_tol(const float *want, int64_t n, double ulps) {
    double *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        double a = fabs((double)want[i]);
        t[i] = a > 0 ? ulps * a * 2 * U : ulps * 1.4e-45;
    }
    return t;
}

/* CPU seconds of this process (every thread, the driver's included) */
static double cpu_sec(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double gamma_k(int64_t k) { return (double)k * U / (1.0 - (double)k * U); }

/* ---------------------------------------------------------------- products */

static const uint32_t all_types[] = {AF_TYPE_F32,  AF_TYPE_F16,  AF_TYPE_BF16, AF_TYPE_Q4_0, AF_TYPE_Q4_1,
                                     AF_TYPE_Q5_0, AF_TYPE_Q5_1, AF_TYPE_Q8_0, AF_TYPE_Q2_K, AF_TYPE_Q3_K,
                                     AF_TYPE_Q4_K, AF_TYPE_Q5_K, AF_TYPE_Q6_K, AF_TYPE_NF4};

/* x·Wᵀ and dy·W on a random [out, in] weight stored as `type`, n rows, plain and accumulating. */
static void test_matmul(uint32_t type, int64_t n, int64_t in, int64_t out) {
    char what[160];
    const size_t rb = af_row_bytes(type, in);
    float *w = frand(out * in, -1, 1), *wd = malloc((size_t)(out * in) * 4);
    unsigned char *wq = malloc(rb * (size_t)out);
    for (int64_t o = 0; o < out; o++) {
        af_quantize_row(type, w + o * in, wq + o * rb, in);
        af_dequantize_row(type, wq + o * rb, wd + o * in, in);
    }
    float *x = frand(n * in, -1, 1), *dy = frand(n * out, -1, 1);
    float *y0 = frand(n * out, -1, 1), *dx0 = frand(n * in, -1, 1);
    void *dw = up(wq, rb * (size_t)out);
    float *dxx = upf(x, n * in), *ddy = upf(dy, n * out);
    for (int acc = 0; acc <= 1; acc++) {
        /* y (+)= x·Wᵀ */
        float *yc = fcopy(y0, n * out), *dyv = upf(y0, n * out);
        af_matmul_xwt(T_CTX, yc, x, wq, type, n, in, out, acc);
        af_vk_matmul_xwt(D, dyv, dxx, dw, type, n, in, out, acc);
        float *yg = down(dyv, n * out);
        double *tol = malloc((size_t)(n * out) * sizeof *tol);
        for (int64_t t = 0; t < n; t++)
            for (int64_t o = 0; o < out; o++) {
                double s = acc ? fabs(y0[t * out + o]) : 0;
                for (int64_t k = 0; k < in; k++) s += fabs((double)x[t * in + k] * wd[o * in + k]);
                tol[t * out + o] = 2 * gamma_k(in + acc) * s + 1e-30;
            }
        snprintf(what, sizeof what, "matmul_xwt %s n=%lld in=%lld out=%lld%s", af_type_name(type), (long long)n,
                 (long long)in, (long long)out, acc ? " accumulate" : "");
        CLOSE(what, yg, yc, tol, 0, n * out);
        free(yc), free(yg), free(tol);
        af_vk_free(D, dyv);
        /* dx (+)= dy·W */
        float *dxc = fcopy(dx0, n * in), *ddx = upf(dx0, n * in);
        af_matmul_dyw(T_CTX, dxc, dy, wq, type, n, in, out, acc);
        af_vk_matmul_dyw(D, ddx, ddy, dw, type, n, in, out, acc);
        float *dxg = down(ddx, n * in);
        tol = malloc((size_t)(n * in) * sizeof *tol);
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < in; i++) {
                double s = acc ? fabs(dx0[t * in + i]) : 0;
                for (int64_t o = 0; o < out; o++) s += fabs((double)dy[t * out + o] * wd[o * in + i]);
                tol[t * in + i] = 2 * gamma_k(out + acc) * s + 1e-30;
            }
        snprintf(what, sizeof what, "matmul_dyw %s n=%lld in=%lld out=%lld%s", af_type_name(type), (long long)n,
                 (long long)in, (long long)out, acc ? " accumulate" : "");
        CLOSE(what, dxg, dxc, tol, 0, n * in);
        free(dxc), free(dxg), free(tol);
        af_vk_free(D, ddx);
    }
    af_vk_free(D, dw), af_vk_free(D, dxx), af_vk_free(D, ddy);
    free(w), free(wd), free(wq), free(x), free(dy), free(y0), free(dx0);
}

/* The dense GEMMs C[m, n] (+)= A·Bᵀ, A·B, Aᵀ·B. */
static void test_gemm(int64_t m, int64_t n, int64_t k) {
    char what[128];
    float *a = frand(m * k, -1, 1), *bt = frand(n * k, -1, 1), *b = frand(k * n, -1, 1), *at = frand(k * m, -1, 1);
    float *c0 = frand(m * n, -1, 1);
    float *da = upf(a, m * k), *dbt = upf(bt, n * k), *db = upf(b, k * n), *dat = upf(at, k * m);
    for (int kind = 0; kind < 3; kind++)
        for (int acc = 0; acc <= 1; acc++) {
            float *cc = fcopy(c0, m * n), *dc = upf(c0, m * n);
            double *tol = malloc((size_t)(m * n) * sizeof *tol);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = acc ? fabs(c0[i * n + j]) : 0;
                    for (int64_t q = 0; q < k; q++)
                        s += kind == 0   ? fabs((double)a[i * k + q] * bt[j * k + q])
                             : kind == 1 ? fabs((double)a[i * k + q] * b[q * n + j])
                                         : fabs((double)at[q * m + i] * b[q * n + j]);
                    tol[i * n + j] = 2 * gamma_k(k + acc) * s + 1e-30;
                }
            if (kind == 0) af_gemm_abt(T_CTX, cc, a, bt, m, n, k, acc), af_vk_gemm_abt(D, dc, da, dbt, m, n, k, acc);
            if (kind == 1) af_gemm_ab(T_CTX, cc, a, b, m, n, k, acc), af_vk_gemm_ab(D, dc, da, db, m, n, k, acc);
            if (kind == 2) af_gemm_atb(T_CTX, cc, at, b, m, n, k, acc), af_vk_gemm_atb(D, dc, dat, db, m, n, k, acc);
            float *cg = down(dc, m * n);
            snprintf(what, sizeof what, "gemm_%s m=%lld n=%lld k=%lld%s", kind == 0 ? "abt" : kind == 1 ? "ab" : "atb",
                     (long long)m, (long long)n, (long long)k, acc ? " accumulate" : "");
            CLOSE(what, cg, cc, tol, 0, m * n);
            free(cc), free(cg), free(tol);
            af_vk_free(D, dc);
        }
    af_vk_free(D, da), af_vk_free(D, dbt), af_vk_free(D, db), af_vk_free(D, dat);
    free(a), free(bt), free(b), free(at), free(c0);
}

/* ---------------------------------------------------------------- row ops */

/* tolerance of ops expected to match: 2 ulp; the f32 variants: the f32 row sum's bound */
static int g_fp64 = 1;

static void test_rmsnorm(int64_t n, int64_t dim) {
    char what[128];
    const float eps = 1e-5f;
    float *x = frand(n * dim, -2, 2), *w = frand(dim, 0.5f, 1.5f), *dy = frand(n * dim, -1, 1);
    float *dx0 = frand(n * dim, -1, 1), *dw0 = frand(dim, -1, 1);
    float *yc = malloc((size_t)(n * dim) * 4), *rc = malloc((size_t)n * 4);
    af_rmsnorm_forward(T_CTX, yc, rc, x, w, n, dim, eps);
    float *dxx = upf(x, n * dim), *dww = upf(w, dim), *ddy = upf(dy, n * dim);
    float *dyv = af_vk_alloc(D, (size_t)(n * dim) * 4), *drs = af_vk_alloc(D, (size_t)n * 4);
    af_vk_rmsnorm_forward(D, dyv, drs, dxx, dww, n, dim, eps);
    float *yg = down(dyv, n * dim), *rg = down(drs, n);
    double *ty = ulp_tol(yc, n * dim, 2), *tr = ulp_tol(rc, n, 2);
    if (!g_fp64) /* f32 row sums: rstd within (γ_dim/2 + 2u) relative, y within that + 2u */
        for (int64_t i = 0; i < n * dim; i++) ty[i] = (gamma_k(dim) + 8 * U) * fabs(yc[i]) + 1e-30;
    if (!g_fp64)
        for (int64_t i = 0; i < n; i++) tr[i] = (gamma_k(dim) + 8 * U) * fabs(rc[i]);
    snprintf(what, sizeof what, "rmsnorm_forward n=%lld dim=%lld (y)", (long long)n, (long long)dim);
    CLOSE(what, yg, yc, ty, 0, n * dim);
    snprintf(what, sizeof what, "rmsnorm_forward n=%lld dim=%lld (rstd)", (long long)n, (long long)dim);
    CLOSE(what, rg, rc, tr, 0, n);
    /* backward on the CPU's rstd, into bases */
    float *dxc = fcopy(dx0, n * dim), *dwc = fcopy(dw0, dim);
    af_rmsnorm_backward(T_CTX, dxc, dwc, dy, x, w, rc, n, dim);
    float *ddx = upf(dx0, n * dim), *ddw = upf(dw0, dim), *drc = upf(rc, n);
    af_vk_rmsnorm_backward(D, ddx, ddw, ddy, dxx, dww, drc, n, dim);
    float *dxg = down(ddx, n * dim), *dwg = down(ddw, dim);
    double *tdx = ulp_tol(dxc, n * dim, 2), *tdw = ulp_tol(dwc, dim, 2);
    for (int64_t t = 0; t < n && !g_fp64; t++) /* c = r³/dim·Σ(w·dy)·x in f32: γ_dim of Σ|w·dy·x| */
        for (int64_t i = 0; i < dim; i++) {
            double sum = 0;
            for (int64_t j = 0; j < dim; j++) sum += fabs((double)w[j] * dy[t * dim + j] * x[t * dim + j]);
            double r = rc[t];
            tdx[t * dim + i] = 4 * U * (fabs(dxc[t * dim + i]) + fabs(r * w[i] * dy[t * dim + i])) +
                               2 * gamma_k(dim) * r * r * r / dim * sum * fabs(x[t * dim + i]);
        }
    snprintf(what, sizeof what, "rmsnorm_backward n=%lld dim=%lld (dx)", (long long)n, (long long)dim);
    CLOSE(what, dxg, dxc, tdx, 0, n * dim);
    snprintf(what, sizeof what, "rmsnorm_backward n=%lld dim=%lld (dw)", (long long)n, (long long)dim);
    CLOSE(what, dwg, dwc, tdw, 0, dim);
    af_vk_free(D, dxx), af_vk_free(D, dww), af_vk_free(D, ddy), af_vk_free(D, dyv), af_vk_free(D, drs);
    af_vk_free(D, ddx), af_vk_free(D, ddw), af_vk_free(D, drc);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(yc), free(rc), free(yg), free(rg), free(ty), free(tr);
    free(dxc), free(dwc), free(dxg), free(dwg), free(tdx), free(tdw);
}

/* with_ff: frequency factors (gemma4's RoPE: theta_i / ff[i]; a 1e30 factor = an unrotated pair, as
 * its proportional RoPE writes them), checked against af_rope_ff_forward/_backward. */
static void test_rope_ff(int64_t n, int64_t nh, int64_t hd, float base, int neox, int32_t maxpos, int with_ff) {
    char what[160];
    int32_t *pos = malloc((size_t)n * 4);
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(tl_rand_u64(&g_rng) % (uint64_t)(maxpos + 1));
    if (n > 2) pos[n - 1] = pos[0]; /* a repeated position */
    float *x = frand(n * nh * hd, -2, 2);
    int32_t *dpos = up(pos, (size_t)n * 4);
    float *ff = NULL, *dff = NULL;
    if (with_ff) {
        ff = frand(hd / 2, 1, 8);
        ff[hd / 2 - 1] = 1e30f;
        dff = upf(ff, hd / 2);
    }
    for (int bwd = 0; bwd <= 1; bwd++) {
        float *xc = fcopy(x, n * nh * hd), *dx = upf(x, n * nh * hd);
        if (bwd) af_rope_ff_backward(T_CTX, xc, pos, n, nh, hd, base, neox, ff), af_vk_rope_backward(D, dx, dpos, n, nh, hd, base, neox, dff);
        else af_rope_ff_forward(T_CTX, xc, pos, n, nh, hd, base, neox, ff), af_vk_rope_forward(D, dx, dpos, n, nh, hd, base, neox, dff);
        float *xg = down(dx, n * nh * hd);
        /* 1 ulp of cos/sin times the pair's magnitude, 2 roundings; f32 variant: the angle error
         * |θ|·4u plus the driver's sin/cos error (Vulkan's bound 2^-11) */
        double *tol = malloc((size_t)(n * nh * hd) * sizeof *tol);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t i = 0; i < hd; i++) {
                    int64_t j = neox ? (i < hd / 2 ? i + hd / 2 : i - hd / 2) : (i ^ 1);
                    const float *r = x + (t * nh + h) * hd;
                    double mag = fabs(r[i]) + fabs(r[j]);
                    double e = g_fp64 ? 4 * U : (double)pos[t] * 8 * U + 1.0 / 2048;
                    tol[(t * nh + h) * hd + i] = e * mag + 1e-30;
                }
        snprintf(what, sizeof what, "rope_%s n=%lld heads=%lld hd=%lld %s pos<=%d%s", bwd ? "backward" : "forward",
                 (long long)n, (long long)nh, (long long)hd, neox ? "neox" : "norm", maxpos, with_ff ? " freq_factors" : "");
        CLOSE(what, xg, xc, tol, 0, n * nh * hd);
        free(xc), free(xg), free(tol);
        af_vk_free(D, dx);
    }
    af_vk_free(D, dpos);
    if (dff) af_vk_free(D, dff);
    free(pos), free(x), free(ff);
}

static void test_rope(int64_t n, int64_t nh, int64_t hd, float base, int neox, int32_t maxpos) {
    test_rope_ff(n, nh, hd, base, neox, maxpos, 0);
}

/* SwiGLU / GeGLU forward and backward, exp, soft-cap, add, scale over n elements */
static void test_elementwise(int64_t n) {
    char what[128];
    float *g = frand(n, -8, 8), *u = frand(n, -2, 2), *dh = frand(n, -1, 1), *b0 = frand(n, -1, 1), *b1 = frand(n, -1, 1);
    float *dg = upf(g, n), *du = upf(u, n), *ddh = upf(dh, n);
    for (int geglu = 0; geglu <= 1; geglu++) {
        float *hc = malloc((size_t)n * 4), *dhv = af_vk_alloc(D, (size_t)n * 4);
        if (geglu) af_geglu_forward(T_CTX, hc, g, u, n), af_vk_geglu_forward(D, dhv, dg, du, n);
        else af_swiglu_forward(T_CTX, hc, g, u, n), af_vk_swiglu_forward(D, dhv, dg, du, n);
        float *hg = down(dhv, n);
        /* exp / tanh within 2 ulp of the CPU's, through a few roundings: 16u of the terms' size */
        double *tol = malloc((size_t)n * sizeof *tol);
        for (int64_t i = 0; i < n; i++) tol[i] = 16 * U * (fabs(hc[i]) + fabs(g[i] * u[i])) + 1e-30;
        snprintf(what, sizeof what, "%s_forward n=%lld", geglu ? "geglu" : "swiglu", (long long)n);
        CLOSE(what, hg, hc, tol, 0, n);
        float *gc = fcopy(b0, n), *uc = fcopy(b1, n), *dgv = upf(b0, n), *duv = upf(b1, n);
        if (geglu) af_geglu_backward(T_CTX, gc, uc, dh, g, u, n), af_vk_geglu_backward(D, dgv, duv, ddh, dg, du, n);
        else af_swiglu_backward(T_CTX, gc, uc, dh, g, u, n), af_vk_swiglu_backward(D, dgv, duv, ddh, dg, du, n);
        float *gg = down(dgv, n), *ug = down(duv, n);
        double *tg = malloc((size_t)n * sizeof *tg);
        for (int64_t i = 0; i < n; i++) {
            tg[i] = 16 * U * (fabs(gc[i]) + fabs(b0[i]) + fabs(dh[i] * u[i]) * (1 + fabs(g[i]))) + 1e-30;
            tol[i] = 16 * U * (fabs(uc[i]) + fabs(b1[i]) + fabs(dh[i] * g[i])) + 1e-30;
        }
        snprintf(what, sizeof what, "%s_backward n=%lld (d_gate)", geglu ? "geglu" : "swiglu", (long long)n);
        CLOSE(what, gg, gc, tg, 0, n);
        snprintf(what, sizeof what, "%s_backward n=%lld (d_up)", geglu ? "geglu" : "swiglu", (long long)n);
        CLOSE(what, ug, uc, tol, 0, n);
        free(hc), free(hg), free(tol), free(gc), free(uc), free(gg), free(ug), free(tg);
        af_vk_free(D, dhv), af_vk_free(D, dgv), af_vk_free(D, duv);
    }
    /* exp (vexp.h's polynomial on both sides: <= 2 ulp apart), soft-cap (tanh: 8 ulp), add, scale (exact) */
    float *ec = malloc((size_t)n * 4), *de = af_vk_alloc(D, (size_t)n * 4);
    af_vexpf(T_CTX, ec, g, n);
    af_vk_vexpf(D, de, dg, n);
    float *eg = down(de, n);
    double *te = ulp_tol(ec, n, 2);
    snprintf(what, sizeof what, "exp n=%lld", (long long)n);
    CLOSE(what, eg, ec, te, 0, n);
    float *sc = fcopy(g, n);
    for (int64_t i = 0; i < n; i++) sc[i] = 5.0f * tanhf(sc[i] / 5.0f); /* transformer.c's soft-cap loop */
    float *ds = upf(g, n);
    af_vk_softcap(D, ds, n, 5.0f);
    float *sg = down(ds, n);
    double *ts = ulp_tol(sc, n, 8);
    snprintf(what, sizeof what, "softcap n=%lld", (long long)n);
    CLOSE(what, sg, sc, ts, 0, n);
    float *ac = malloc((size_t)n * 4), *da = af_vk_alloc(D, (size_t)n * 4);
    af_add(ac, g, u, n);
    af_vk_add(D, da, dg, du, n);
    float *ag = down(da, n);
    snprintf(what, sizeof what, "add n=%lld", (long long)n);
    CLOSE(what, ag, ac, NULL, 0, n);
    for (int64_t i = 0; i < n; i++) ac[i] = 0.37f * g[i];
    af_vk_scale(D, da, dg, 0.37f, n);
    free(ag);
    ag = down(da, n);
    snprintf(what, sizeof what, "scale n=%lld", (long long)n);
    CLOSE(what, ag, ac, NULL, 0, n);
    af_vk_free(D, dg), af_vk_free(D, du), af_vk_free(D, ddh), af_vk_free(D, de), af_vk_free(D, ds), af_vk_free(D, da);
    free(g), free(u), free(dh), free(b0), free(b1), free(ec), free(eg), free(te), free(sc), free(sg), free(ts), free(ac),
        free(ag);
}

static void test_softmax(int64_t rows, int64_t n) {
    char what[96];
    float *x = frand(rows * n, -20, 20);
    for (int64_t i = 0; i < n; i++) x[i] = -INFINITY; /* a fully masked row: zeros */
    float *xc = fcopy(x, rows * n);
    for (int64_t r = 0; r < rows; r++) af_softmax_inplace(xc + r * n, n);
    float *dx = upf(x, rows * n);
    af_vk_softmax_rows(D, dx, rows, n);
    float *xg = down(dx, rows * n);
    double *tol = ulp_tol(xc, rows * n, 8); /* libm expf vs vexp's polynomial (<= 2 ulp), the scale */
    if (!g_fp64)
        for (int64_t i = 0; i < rows * n; i++) tol[i] += gamma_k(n) * fabs(xc[i]);
    snprintf(what, sizeof what, "softmax rows=%lld n=%lld", (long long)rows, (long long)n);
    CLOSE(what, xg, xc, tol, 0, rows * n);
    af_vk_free(D, dx);
    free(x), free(xc), free(xg), free(tol);
}

/* ---------------------------------------------------------------- attention */

static double absmax(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Forward (with lse) of n_q queries at q_pos0 over a KV of capacity n_kv and row stride kv_stride;
 * the backward too when q_pos0 == 0 and the KV is compact. */
static void test_attention(int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t nh, int64_t nkv,
                           int64_t hd, int64_t window) {
    char what[200];
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t qn = n_q * nh * hd, kvn = n_kv * kv_stride;
    float *q = frand(qn, -1, 1), *k = frand(kvn, -1, 1), *v = frand(kvn, -1, 1);
    float *oc = malloc((size_t)qn * 4), *lc = malloc((size_t)(n_q * nh) * 4);
    af_attention_forward(T_CTX, oc, lc, q, k, v, n_q, q_pos0, n_kv, kv_stride, nh, nkv, hd, scale, window);
    float *dq_ = upf(q, qn), *dk_ = upf(k, kvn), *dv_ = upf(v, kvn);
    float *dout = af_vk_alloc(D, (size_t)qn * 4), *dlse = af_vk_alloc(D, (size_t)(n_q * nh) * 4);
    af_vk_attention_forward(D, dout, dlse, dq_, dk_, dv_, n_q, q_pos0, n_kv, kv_stride, nh, nkv, hd, scale, window);
    float *og = down(dout, qn), *lg = down(dlse, n_q * nh);
    /* out: a convex combination of v rows; the weights' error comes from the scores' error
     * (hd-term dots: γ_hd·scale·Σ|q||k| <= hd·u·scale·hd) and from the sums over the visible keys */
    const double vm = absmax(v, kvn);
    const double ds = 2 * gamma_k(hd) * scale * hd * absmax(q, qn) * absmax(k, kvn);
    const double tout = (4 * ds + 4 * gamma_k(q_pos0 + n_q + hd)) * vm + 1e-30;
    snprintf(what, sizeof what, "attention_forward n_q=%lld q_pos0=%lld n_kv=%lld stride=%lld heads=%lld/%lld hd=%lld "
             "window=%lld (out)", (long long)n_q, (long long)q_pos0, (long long)n_kv, (long long)kv_stride, (long long)nh,
             (long long)nkv, (long long)hd, (long long)window);
    CLOSE(what, og, oc, NULL, tout, qn);
    double *tl = malloc((size_t)(n_q * nh) * sizeof *tl);
    for (int64_t i = 0; i < n_q * nh; i++) tl[i] = 2 * ds + 4 * gamma_k(q_pos0 + n_q) + 4 * U * fabs(lc[i]);
    snprintf(what, sizeof what, "attention_forward n_q=%lld q_pos0=%lld hd=%lld window=%lld (lse)", (long long)n_q,
             (long long)q_pos0, (long long)hd, (long long)window);
    CLOSE(what, lg, lc, tl, 0, n_q * nh);
    if (q_pos0 == 0 && kv_stride == nkv * hd) {
        float *go = frand(qn, -1, 1);
        float *bq = frand(qn, -1, 1), *bk = frand(kvn, -1, 1), *bv = frand(kvn, -1, 1);
        float *gq = fcopy(bq, qn), *gk = fcopy(bk, kvn), *gv = fcopy(bv, kvn);
        af_attention_backward(T_CTX, gq, gk, gv, go, oc, lc, q, k, v, n_q, 0, n_kv, nh, nkv, hd, scale, window);
        float *dgo = upf(go, qn), *dgq = upf(bq, qn), *dgk = upf(bk, kvn), *dgv = upf(bv, kvn);
        float *doc = upf(oc, qn), *dlc = upf(lc, n_q * nh);
        af_vk_attention_backward(D, dgq, dgk, dgv, dgo, doc, dlc, dq_, dk_, dv_, n_q, 0, n_kv, nh, nkv, hd, scale, window);
        float *rq = down(dgq, qn), *rk = down(dgk, kvn), *rv = down(dgv, kvn);
        /* Each gradient element is a sum of terms p_ij·(...) with p = e^(s·scale − lse) in error by
         * ε_p <= 2·ds (the score error; lse is the CPU's) and dp − D = dout·v − dout·out, hd-term dots
         * in error by 2γ_hd·Σ|dout||v| + 2γ_hd·Σ|dout||out|. The tolerance is that relative error of the
         * terms, plus the γ of the sum over the terms, times the sum of the terms' absolute values,
         * recomputed here in double:
         *   dq_i: Σ_j p·(|dp|+|D|)_abs·scale·|k_j|,  dk_j: Σ_{h,i} p·(|dp|+|D|)_abs·scale·|q_i|,
         *   dv_j: Σ_{h,i} p·|dout_i|  (per dimension). */
        double *Mq = calloc((size_t)qn, sizeof *Mq), *Mk = calloc((size_t)kvn, sizeof *Mk), *Mv = calloc((size_t)kvn, sizeof *Mv);
        const int64_t grp = nh / nkv;
        for (int64_t i = 0; i < n_q; i++)
            for (int64_t h = 0; h < nh; h++) {
                const float *qi = q + (i * nh + h) * hd, *gi = go + (i * nh + h) * hd, *oi = oc + (i * nh + h) * hd;
                double Dabs = 0;
                for (int64_t e = 0; e < hd; e++) Dabs += fabs((double)gi[e] * oi[e]);
                const int64_t lo = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
                for (int64_t j = lo; j <= i; j++) {
                    const float *kj = k + j * kv_stride + (h / grp) * hd, *vj = v + j * kv_stride + (h / grp) * hd;
                    double sdot = 0, dpabs = 0;
                    for (int64_t e = 0; e < hd; e++) sdot += (double)qi[e] * kj[e], dpabs += fabs((double)gi[e] * vj[e]);
                    const double p = exp(sdot * scale - lc[h * n_q + i]);
                    const double w = p * (dpabs + Dabs) * scale;
                    for (int64_t e = 0; e < hd; e++) {
                        Mq[(i * nh + h) * hd + e] += w * fabs(kj[e]);
                        Mk[j * kv_stride + (h / grp) * hd + e] += w * fabs(qi[e]);
                        Mv[j * kv_stride + (h / grp) * hd + e] += p * fabs(gi[e]);
                    }
                }
            }
        const double eb = 4 * ds + 4 * gamma_k(hd) + 2 * gamma_k(n_q * grp + 1) + 8 * U;
        double *tq = malloc((size_t)qn * sizeof *tq), *tk = malloc((size_t)kvn * sizeof *tk), *tv = malloc((size_t)kvn * sizeof *tv);
        for (int64_t i = 0; i < qn; i++) tq[i] = eb * Mq[i] + 4 * U * fabs(bq[i]) + 1e-30;
        for (int64_t i = 0; i < kvn; i++) tk[i] = eb * Mk[i] + 4 * U * fabs(bk[i]) + 1e-30, tv[i] = eb * Mv[i] + 4 * U * fabs(bv[i]) + 1e-30;
        snprintf(what, sizeof what, "attention_backward n=%lld heads=%lld/%lld hd=%lld window=%lld (dq)", (long long)n_q,
                 (long long)nh, (long long)nkv, (long long)hd, (long long)window);
        CLOSE(what, rq, gq, tq, 0, qn);
        what[strlen(what) - 4] = 0, strcat(what, "(dk)");
        CLOSE(what, rk, gk, tk, 0, kvn);
        what[strlen(what) - 4] = 0, strcat(what, "(dv)");
        CLOSE(what, rv, gv, tv, 0, kvn);
        free(Mq), free(Mk), free(Mv), free(tq), free(tk), free(tv);
        af_vk_free(D, dgo), af_vk_free(D, dgq), af_vk_free(D, dgk), af_vk_free(D, dgv), af_vk_free(D, doc),
            af_vk_free(D, dlc);
        free(go), free(bq), free(bk), free(bv), free(gq), free(gk), free(gv), free(rq), free(rk), free(rv);
    }
    af_vk_free(D, dq_), af_vk_free(D, dk_), af_vk_free(D, dv_), af_vk_free(D, dout), af_vk_free(D, dlse);
    free(q), free(k), free(v), free(oc), free(lc), free(og), free(lg), free(tl);
}

/* ---------------------------------------------------------------- rows, embedding, masks */

static void test_rows(uint32_t type, int64_t rows, int64_t dim) {
    char what[128];
    const size_t rb = af_row_bytes(type, dim);
    float *w = frand(rows * dim, -1, 1);
    unsigned char *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) af_quantize_row(type, w + r * dim, wq + r * rb, dim);
    const int64_t n = 7;
    int32_t tok[7] = {0, 3, (int32_t)rows - 1, 3, 1, (int32_t)rows / 2, 2};
    void *dw = up(wq, rb * (size_t)rows);
    int32_t *dt = up(tok, sizeof tok);
    for (int sc = 0; sc <= 1; sc++) {
        const float scale = sc ? 24.0f : 1.0f;
        float *xc = malloc((size_t)(n * dim) * 4), *dx = af_vk_alloc(D, (size_t)(n * dim) * 4);
        for (int64_t t = 0; t < n; t++) { /* transformer.c af_tf_embed */
            af_dequantize_row(type, wq + (size_t)tok[t] * rb, xc + t * dim, dim);
            if (scale != 1.0f)
                for (int64_t i = 0; i < dim; i++) xc[t * dim + i] *= scale;
        }
        af_vk_embed(D, dx, dw, type, dt, n, dim, rows, scale);
        float *xg = down(dx, n * dim);
        snprintf(what, sizeof what, "embed %s rows=%lld dim=%lld scale=%g", af_type_name(type), (long long)rows,
                 (long long)dim, scale);
        CLOSE(what, xg, xc, NULL, 0, n * dim);
        free(xc), free(xg);
        af_vk_free(D, dx);
    }
    af_vk_free(D, dw), af_vk_free(D, dt);
    free(w), free(wq);
}

static void test_moves(void) {
    const int64_t rows = 9, width = 70, k = 5;
    float *src = frand(rows * width, -1, 1), *dst0 = frand(rows * width, -1, 1), *b = frand(width, -1, 1);
    int32_t idx[5] = {8, 0, 4, 2, 6};
    float *ds = upf(src, rows * width), *dd = upf(dst0, rows * width), *db = upf(b, width);
    int32_t *di = up(idx, sizeof idx);
    /* gather */
    float *gc = malloc((size_t)(k * width) * 4), *dg = af_vk_alloc(D, (size_t)(k * width) * 4);
    for (int64_t j = 0; j < k; j++) memcpy(gc + j * width, src + idx[j] * width, (size_t)width * 4);
    af_vk_gather_rows(D, dg, ds, di, k, width);
    float *gg = down(dg, k * width);
    CLOSE("gather_rows", gg, gc, NULL, 0, k * width);
    /* scatter */
    float *sc = fcopy(dst0, rows * width);
    for (int64_t j = 0; j < k; j++) memcpy(sc + idx[j] * width, src + j * width, (size_t)width * 4);
    af_vk_scatter_rows(D, dd, ds, di, k, width);
    float *sg = down(dd, rows * width);
    CLOSE("scatter_rows", sg, sc, NULL, 0, rows * width);
    /* bias add (transformer.c add_bias) */
    for (int64_t t = 0; t < rows; t++)
        for (int64_t j = 0; j < width; j++) sc[t * width + j] += b[j];
    af_vk_bias_add(D, dd, db, rows, width);
    free(sg);
    sg = down(dd, rows * width);
    CLOSE("bias_add", sg, sc, NULL, 0, rows * width);
    /* copy, fill */
    af_vk_copy(D, dd, ds, (size_t)(rows * width) * 4);
    free(sg);
    sg = down(dd, rows * width);
    CLOSE("copy", sg, src, NULL, 0, rows * width);
    float pat = -2.5f;
    uint32_t bits;
    memcpy(&bits, &pat, 4);
    af_vk_fill(D, dd, bits, (size_t)(rows * width) * 4);
    free(sg);
    sg = down(dd, rows * width);
    for (int64_t i = 0; i < rows * width; i++) sc[i] = pat;
    CLOSE("fill", sg, sc, NULL, 0, rows * width);
    /* non-finite count */
    float *nf = frand(10000, -1, 1);
    nf[3] = NAN, nf[777] = INFINITY, nf[9999] = -INFINITY;
    float *dnf = upf(nf, 10000);
    CHECK(af_vk_count_nonfinite(D, dnf, 10000) == 3, "count_nonfinite: %lld, want 3",
          (long long)af_vk_count_nonfinite(D, dnf, 10000));
    CHECK(af_vk_count_nonfinite(D, dnf, 3) == 0, "count_nonfinite of the first 3: want 0");
    af_vk_free(D, dnf);
    af_vk_free(D, ds), af_vk_free(D, dd), af_vk_free(D, db), af_vk_free(D, di), af_vk_free(D, dg);
    free(src), free(dst0), free(b), free(gc), free(gg), free(sc), free(sg), free(nf);
}

/* ---------------------------------------------------------------- LoRA */

static void test_dropout(int64_t n, int64_t in) {
    float *mc = malloc((size_t)(n * in) * 4), *dm = af_vk_alloc(D, (size_t)(n * in) * 4);
    af_lora_dropout_mask(T_CTX, mc, 0x123456789abcdefULL, 7, AF_PROJ_UP, 5, n, in, 0.1f);
    af_vk_lora_dropout_mask(D, dm, 0x123456789abcdefULL, 7, AF_PROJ_UP, 5, n, in, 0.1f);
    float *mg = down(dm, n * in);
    char what[96];
    snprintf(what, sizeof what, "lora_dropout_mask n=%lld in=%lld (bit-identical)", (long long)n, (long long)in);
    CLOSE(what, mg, mc, NULL, 0, n * in);
    af_vk_free(D, dm);
    free(mc), free(mg);
}

/* |A|·|B|ᵀ-style magnitude of a product chain, for the LoRA tolerances: out[i] = Σ_k |a(i,k)|·|b(k,j)| */
static void absmm(double *out, const float *a, const double *ad, const float *b, int64_t m, int64_t n, int64_t k,
                  int64_t sam, int64_t sak, int64_t sbk, int64_t sbn) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t q = 0; q < k; q++)
                s += (ad ? ad[i * sam + q * sak] : fabs(a[i * sam + q * sak])) * fabs(b[q * sbk + j * sbn]);
            out[i * n + j] = s;
        }
}

static void test_lora(int64_t n, int64_t in, int64_t out, int32_t r, float scale, int masked) {
    char what[160];
    float *x = frand(n * in, -1, 1), *A = frand(r * in, -0.3f, 0.3f), *B = frand(out * r, -0.3f, 0.3f);
    float *y0 = frand(n * out, -1, 1), *dy = frand(n * out, -1, 1);
    float *mask = NULL;
    if (masked) {
        mask = malloc((size_t)(n * in) * 4);
        af_lora_dropout_mask(T_CTX, mask, 99, 1, AF_PROJ_Q, 0, n, in, 0.25f);
    }
    /* forward */
    float *yc = fcopy(y0, n * out), *xac = malloc((size_t)(n * r) * 4);
    af_lora_forward(T_CTX, yc, xac, x, mask, A, B, n, in, out, r, scale);
    float *dx_ = upf(x, n * in), *dA = upf(A, r * in), *dB = upf(B, out * r), *dm = mask ? upf(mask, n * in) : NULL;
    float *dyv = upf(y0, n * out), *dxa = af_vk_alloc(D, (size_t)(n * r) * 4);
    af_vk_lora_forward(D, dyv, dxa, dx_, dm, dA, dB, n, in, out, r, scale);
    float *yg = down(dyv, n * out), *xag = down(dxa, n * r);
    double *mxa = malloc((size_t)(n * r) * sizeof *mxa), *my = malloc((size_t)(n * out) * sizeof *my);
    absmm(mxa, x, NULL, A, n, r, in, in, 1, 1, in); /* Σ|x||A| (the mask only shrinks terms: <= 1/(1-p)) */
    double *txa = malloc((size_t)(n * r) * sizeof *txa);
    for (int64_t i = 0; i < n * r; i++) txa[i] = 2 * gamma_k(in) * mxa[i] * (masked ? 1.0 / 0.75 : 1) + 1e-30;
    absmm(my, NULL, mxa, B, n, out, r, r, 1, 1, r);
    double *ty = malloc((size_t)(n * out) * sizeof *ty);
    for (int64_t i = 0; i < n * out; i++)
        ty[i] = (2 * gamma_k(r + 1) + 2 * gamma_k(in)) * (fabs(y0[i]) + fabs(scale) * my[i] * (masked ? 1.0 / 0.75 : 1)) +
                1e-30;
    snprintf(what, sizeof what, "lora_forward n=%lld in=%lld out=%lld r=%d scale=%g%s (xa)", (long long)n, (long long)in,
             (long long)out, r, scale, masked ? " dropout" : "");
    CLOSE(what, xag, xac, txa, 0, n * r);
    what[strlen(what) - 4] = 0, strcat(what, "(y)");
    CLOSE(what, yg, yc, ty, 0, n * out);
    /* backward from the CPU's xa, into random bases */
    float *gx0 = frand(n * in, -1, 1), *gA0 = frand(r * in, -1, 1), *gB0 = frand(out * r, -1, 1);
    float *gxc = fcopy(gx0, n * in), *gAc = fcopy(gA0, r * in), *gBc = fcopy(gB0, out * r);
    float *tmp = malloc((size_t)(n * (r + in)) * 4);
    af_lora_backward(T_CTX, gxc, gAc, gBc, tmp, dy, x, xac, mask, A, B, n, in, out, r, scale);
    float *ddy = upf(dy, n * out), *dxac = upf(xac, n * r), *dtmp = af_vk_alloc(D, (size_t)(n * (r + in)) * 4);
    float *dgx = upf(gx0, n * in), *dgA = upf(gA0, r * in), *dgB = upf(gB0, out * r);
    af_vk_lora_backward(D, dgx, dgA, dgB, dtmp, ddy, dx_, dxac, dm, dA, dB, n, in, out, r, scale);
    float *rx = down(dgx, n * in), *rA = down(dgA, r * in), *rB = down(dgB, out * r);
    /* t = s·dy·B (|t| <= s·Σ|dy||B|, error γ_out), then dA = tᵀ·x, dx = t·A, dB = dyᵀ·(s·xa) */
    double *mt = malloc((size_t)(n * r) * sizeof *mt);
    absmm(mt, dy, NULL, B, n, r, out, out, 1, r, 1);
    for (int64_t i = 0; i < n * r; i++) mt[i] *= fabs(scale);
    const double g = 2 * gamma_k(out) + 2 * gamma_k(n + 1) + 2 * gamma_k(r + 1) + 8 * U;
    const double mk = masked ? 1.0 / 0.75 : 1.0;
    double *tB = malloc((size_t)(out * r) * sizeof *tB), *tA = malloc((size_t)(r * in) * sizeof *tA);
    double *tx = malloc((size_t)(n * in) * sizeof *tx);
    absmm(tB, dy, NULL, xac, out, r, n, 1, out, r, 1);
    for (int64_t i = 0; i < out * r; i++) tB[i] = g * (fabs(gB0[i]) + fabs(scale) * tB[i]) + 1e-30;
    for (int64_t j = 0; j < r; j++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0;
            for (int64_t t = 0; t < n; t++) s += mt[t * r + j] * fabs(x[t * in + i]) * mk;
            tA[j * in + i] = g * (fabs(gA0[j * in + i]) + s) + 1e-30;
        }
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0;
            for (int64_t j = 0; j < r; j++) s += mt[t * r + j] * fabs(A[j * in + i]) * mk;
            tx[t * in + i] = g * (fabs(gx0[t * in + i]) + s) + 1e-30;
        }
    snprintf(what, sizeof what, "lora_backward n=%lld in=%lld out=%lld r=%d scale=%g%s (dB)", (long long)n, (long long)in,
             (long long)out, r, scale, masked ? " dropout" : "");
    CLOSE(what, rB, gBc, tB, 0, out * r);
    what[strlen(what) - 4] = 0, strcat(what, "(dA)");
    CLOSE(what, rA, gAc, tA, 0, r * in);
    what[strlen(what) - 4] = 0, strcat(what, "(dx)");
    CLOSE(what, rx, gxc, tx, 0, n * in);
    af_vk_free(D, dx_), af_vk_free(D, dA), af_vk_free(D, dB), af_vk_free(D, dm), af_vk_free(D, dyv), af_vk_free(D, dxa);
    af_vk_free(D, ddy), af_vk_free(D, dxac), af_vk_free(D, dtmp), af_vk_free(D, dgx), af_vk_free(D, dgA), af_vk_free(D, dgB);
    free(x), free(A), free(B), free(y0), free(dy), free(mask), free(yc), free(xac), free(yg), free(xag), free(mxa);
    free(my), free(txa), free(ty), free(gx0), free(gA0), free(gB0), free(gxc), free(gAc), free(gBc), free(tmp);
    free(rx), free(rA), free(rB), free(mt), free(tB), free(tA), free(tx);
}

/* ---------------------------------------------------------------- heads, losses, optimizer */

static void test_head(int32_t B, int64_t H, int32_t C) {
    char what[128];
    int32_t ss[5] = {0, 3, 4, 11, 17};
    const int64_t ntok = ss[B];
    float *hid = frand(ntok * H, -1, 1), *W = frand((int64_t)C * H, -0.5f, 0.5f), *bias = frand(C, -0.1f, 0.1f);
    float *dhid = upf(hid, ntok * H), *dW = upf(W, (int64_t)C * H), *dbias = upf(bias, C);
    int32_t *dss = up(ss, sizeof ss);
    for (int pool = 0; pool <= 1; pool++) {
        const af_pooling pm = pool ? AF_POOL_LAST : AF_POOL_MEAN;
        float *pc = malloc((size_t)(B * H) * 4), *dp = af_vk_alloc(D, (size_t)(B * H) * 4);
        af_pool_forward(pc, hid, ss, B, H, pm);
        af_vk_pool_forward(D, dp, dhid, dss, B, H, pm);
        float *pg = down(dp, B * H);
        double *tp = ulp_tol(pc, B * H, 2);
        if (!g_fp64)
            for (int64_t i = 0; i < B * H; i++) tp[i] = gamma_k(8) * 2 + 4 * U * fabs(pc[i]);
        snprintf(what, sizeof what, "pool_forward %s B=%d H=%lld", pool ? "last" : "mean", B, (long long)H);
        CLOSE(what, pg, pc, tp, 0, B * H);
        float *dpool = frand(B * H, -1, 1), *gh0 = frand(ntok * H, -1, 1), *ghc = fcopy(gh0, ntok * H);
        af_pool_backward(ghc, dpool, ss, B, H, pm);
        float *ddpool = upf(dpool, B * H), *dgh = upf(gh0, ntok * H);
        af_vk_pool_backward(D, dgh, ddpool, dss, B, H, pm);
        float *ghg = down(dgh, ntok * H);
        double *th = ulp_tol(ghc, ntok * H, 2);
        snprintf(what, sizeof what, "pool_backward %s B=%d H=%lld", pool ? "last" : "mean", B, (long long)H);
        CLOSE(what, ghg, ghc, th, 0, ntok * H);
        free(pc), free(pg), free(tp), free(dpool), free(gh0), free(ghc), free(ghg), free(th);
        af_vk_free(D, dp), af_vk_free(D, ddpool), af_vk_free(D, dgh);
    }
    /* head forward / backward on the mean pooling */
    float *pooled = frand(B * H, -1, 1), *lc = malloc((size_t)(B * C) * 4);
    af_head_forward(T_CTX, lc, pooled, W, bias, B, H, C);
    float *dpooled = upf(pooled, B * H), *dl = af_vk_alloc(D, (size_t)(B * C) * 4);
    af_vk_head_forward(D, dl, dpooled, dW, dbias, B, H, C);
    float *lg = down(dl, B * C);
    double *tl = ulp_tol(lc, B * C, 2);
    /* Both sides sum 16 float lanes in the same order, but a driver may still fuse a lane's multiply
     * and add (NVIDIA 580 does, despite NoContraction: 30 ulp apart at H = 96): each lane's chain of
     * H/16 multiply-adds then differs by at most the forward error bound of both, 2·γ(H/16 + 1)·Σ|p|
     * over the lane's products p (Higham, Accuracy and Stability §3.1), summed over the lanes. */
    for (int64_t i = 0; i < B * C; i++) {
        const int64_t b = i / C, c = i % C;
        double sabs = 0;
        for (int64_t h = 0; h < H; h++) sabs += fabs((double)pooled[b * H + h] * (double)W[c * H + h]);
        const double fused = 2 * gamma_k(H / 16 + 1) * sabs;
        tl[i] = g_fp64 ? tl[i] + fused : 2 * gamma_k(H) * H * 0.5 + 4 * U * fabs(lc[i]);
    }
    snprintf(what, sizeof what, "head_forward B=%d H=%lld C=%d", B, (long long)H, C);
    CLOSE(what, lg, lc, tl, 0, B * C);
    float *dlog = frand(B * C, -1, 1), *gp0 = frand(B * H, -1, 1), *gW0 = frand((int64_t)C * H, -1, 1), *gb0 = frand(C, -1, 1);
    float *gpc = fcopy(gp0, B * H), *gWc = fcopy(gW0, (int64_t)C * H), *gbc = fcopy(gb0, C);
    af_head_backward(T_CTX, gpc, gWc, gbc, dlog, pooled, W, B, H, C);
    float *ddl = upf(dlog, B * C), *dgp = upf(gp0, B * H), *dgW = upf(gW0, (int64_t)C * H), *dgb = upf(gb0, C);
    af_vk_head_backward(D, dgp, dgW, dgb, ddl, dpooled, dW, B, H, C);
    float *rp = down(dgp, B * H), *rW = down(dgW, (int64_t)C * H), *rb = down(dgb, C);
    double *t1 = ulp_tol(gpc, B * H, 2), *t2 = ulp_tol(gWc, (int64_t)C * H, 2), *t3 = ulp_tol(gbc, C, 2);
    if (!g_fp64)
        for (int64_t i = 0; i < C; i++) t3[i] = 2 * gamma_k(B) * B + 4 * U * fabs(gbc[i]);
    snprintf(what, sizeof what, "head_backward B=%d H=%lld C=%d (d_pooled)", B, (long long)H, C);
    CLOSE(what, rp, gpc, t1, 0, B * H);
    what[strlen(what) - 10] = 0, strcat(what, "(dW)");
    CLOSE(what, rW, gWc, t2, 0, (int64_t)C * H);
    what[strlen(what) - 4] = 0, strcat(what, "(dbias)");
    CLOSE(what, rb, gbc, t3, 0, C);
    af_vk_free(D, dhid), af_vk_free(D, dW), af_vk_free(D, dbias), af_vk_free(D, dss), af_vk_free(D, dpooled);
    af_vk_free(D, dl), af_vk_free(D, ddl), af_vk_free(D, dgp), af_vk_free(D, dgW), af_vk_free(D, dgb);
    free(hid), free(W), free(bias), free(pooled), free(lc), free(lg), free(tl), free(dlog), free(gp0), free(gW0);
    free(gb0), free(gpc), free(gWc), free(gbc), free(rp), free(rW), free(rb), free(t1), free(t2), free(t3);
}

static void test_losses(int32_t B, int32_t C) {
    char what[128];
    float *logits = frand(B * C, -6, 6), *cw = frand(C, 0.5f, 2.0f);
    int32_t *lab = malloc((size_t)B * 4);
    for (int32_t b = 0; b < B; b++) lab[b] = (int32_t)(tl_rand_u64(&g_rng) % (uint64_t)C);
    float *dlg = upf(logits, B * C), *dcw = upf(cw, C);
    int32_t *dlab = up(lab, (size_t)B * 4);
    for (int weighted = 0; weighted <= 1; weighted++) {
        float *gc = malloc((size_t)(B * C) * 4), *pc = malloc((size_t)(B * C) * 4);
        double lc = af_ce_loss(gc, pc, logits, lab, weighted ? cw : NULL, B, C);
        float *dg = af_vk_alloc(D, (size_t)(B * C) * 4), *dp = af_vk_alloc(D, (size_t)(B * C) * 4);
        double lgv = af_vk_ce_loss(D, dg, dp, dlg, dlab, weighted ? dcw : NULL, B, C);
        float *gg = down(dg, B * C), *pg = down(dp, B * C);
        const double rel = g_fp64 ? 1e-12 : 8 * gamma_k(C + B);
        CHECK(fabs(lgv - lc) <= rel * fabs(lc), "ce_loss%s B=%d C=%d: vulkan %.17g cpu %.17g", weighted ? " weighted" : "",
              B, C, lgv, lc);
        double *t1 = ulp_tol(gc, B * C, 2), *t2 = ulp_tol(pc, B * C, 2);
        if (!g_fp64)
            for (int64_t i = 0; i < B * C; i++) t1[i] = 16 * gamma_k(C) * (1 + fabs(gc[i])), t2[i] = 16 * gamma_k(C) * fabs(pc[i]);
        snprintf(what, sizeof what, "ce_loss%s B=%d C=%d (d_logits)", weighted ? " weighted" : "", B, C);
        CLOSE(what, gg, gc, t1, 0, B * C);
        what[strlen(what) - 10] = 0, strcat(what, "(probs)");
        CLOSE(what, pg, pc, t2, 0, B * C);
        free(gc), free(pc), free(gg), free(pg), free(t1), free(t2);
        af_vk_free(D, dg), af_vk_free(D, dp);
    }
    /* BCE with multi-hot targets */
    float *tg = malloc((size_t)(B * C) * 4);
    for (int64_t i = 0; i < B * C; i++) tg[i] = (tl_rand_u64(&g_rng) & 1) ? 1.0f : 0.0f;
    float *gc = malloc((size_t)(B * C) * 4);
    double lc = af_bce_loss(gc, logits, tg, B, C);
    float *dtg = upf(tg, B * C), *dg = af_vk_alloc(D, (size_t)(B * C) * 4);
    double lgv = af_vk_bce_loss(D, dg, dlg, dtg, B, C);
    float *gg = down(dg, B * C);
    const double rel = g_fp64 ? 1e-12 : 8 * gamma_k(B * C);
    CHECK(fabs(lgv - lc) <= rel * fabs(lc), "bce_loss B=%d C=%d: vulkan %.17g cpu %.17g", B, C, lgv, lc);
    double *t1 = ulp_tol(gc, B * C, 2);
    if (!g_fp64)
        for (int64_t i = 0; i < B * C; i++) t1[i] = 16 * U * (1.0 / (B * C) + fabs(gc[i]));
    snprintf(what, sizeof what, "bce_loss B=%d C=%d (d_logits)", B, C);
    CLOSE(what, gg, gc, t1, 0, B * C);
    af_vk_free(D, dlg), af_vk_free(D, dcw), af_vk_free(D, dlab), af_vk_free(D, dtg), af_vk_free(D, dg);
    free(logits), free(cw), free(lab), free(tg), free(gc), free(gg), free(t1);
}

/* transformer.c lm_row, the CPU oracle of af_vk_lm_rows (the model's row loop, not a kernel of its own) */
static double lm_row_ref(float *z, int64_t V, int32_t t, float cap, float gs, int grad, int *correct) {
    if (cap > 0)
        for (int64_t v = 0; v < V; v++) z[v] = cap * tanhf(z[v] / cap);
    int64_t am = 0;
    float mx = z[0];
    for (int64_t v = 1; v < V; v++)
        if (z[v] > mx) mx = z[v], am = v;
    *correct = am == t;
    double s = 0;
    for (int64_t v = 0; v < V; v++) s += exp((double)(z[v] - mx));
    const double lse = (double)mx + log(s);
    const double loss = lse - (double)z[t];
    if (grad)
        for (int64_t v = 0; v < V; v++) {
            const float zv = z[v];
            float g = (float)exp((double)zv - lse);
            if (v == t) g -= 1.0f;
            g *= gs;
            if (cap > 0) {
                const float th = zv / cap;
                g *= 1.0f - th * th;
            }
            z[v] = g;
        }
    return loss;
}

static void test_lm_rows(int64_t k, int64_t V, float cap) {
    char what[128];
    float *z = frand(k * V, -10, 10);
    z[2 * V + 17] = z[2 * V + 5] = 12.0f; /* a tie: the lowest index wins */
    int32_t *tg = malloc((size_t)k * 4);
    for (int64_t i = 0; i < k; i++) tg[i] = (int32_t)(tl_rand_u64(&g_rng) % (uint64_t)V);
    tg[2] = 5;
    int32_t *dtg = up(tg, (size_t)k * 4);
    for (int grad = 0; grad <= 1; grad++) {
        float *zc = fcopy(z, k * V);
        double *lc = malloc((size_t)k * 8);
        int *cc = malloc((size_t)k * sizeof *cc);
        for (int64_t i = 0; i < k; i++) lc[i] = lm_row_ref(zc + i * V, V, tg[i], cap, 0.01f, grad, &cc[i]);
        float *dz = upf(z, k * V);
        void *dl = af_vk_alloc(D, (size_t)k * 8);
        int32_t *dc = af_vk_alloc(D, (size_t)k * 4);
        af_vk_lm_rows(D, dz, V, dtg, k, cap, 0.01f, grad, dl, dc);
        float *zg = down(dz, k * V);
        double *lg = malloc((size_t)k * 8);
        int32_t *cg = malloc((size_t)k * 4);
        af_vk_download(D, lg, dl, (size_t)k * 8);
        af_vk_download(D, cg, dc, (size_t)k * 4);
        /* the capped logits differ by up to 8 ulp of cap (our tanh vs libm's): lse and z[target]
         * move by that much, the gradient's exponent too */
        const double ez = cap > 0 ? 8 * 2 * U * cap : 0;
        for (int64_t i = 0; i < k; i++) {
            const double rel = g_fp64 ? 1e-12 : 16 * gamma_k(V);
            CHECK(fabs(lg[i] - lc[i]) <= rel * (1 + fabs(lc[i])) + 2 * ez, "lm_rows V=%lld cap=%g row %lld: loss %.17g vs %.17g",
                  (long long)V, cap, (long long)i, lg[i], lc[i]);
            CHECK(cg[i] == cc[i], "lm_rows row %lld: argmax hit %d vs %d", (long long)i, cg[i], cc[i]);
        }
        double sum = 0, want = 0;
        CHECK(af_vk_sum_f64(D, dl, k, &sum) == AF_OK, "sum_f64: %s", af_last_error());
        for (int64_t i = 0; i < k; i++) want += lg[i];
        CHECK(sum == want, "sum_f64: %.17g vs the host sum %.17g", sum, want);
        double *tz = ulp_tol(zc, k * V, cap > 0 ? 8 : 2);
        for (int64_t i = 0; i < k * V && grad; i++)
            tz[i] = ((g_fp64 ? 2 * U : 16 * gamma_k(V)) + 3 * ez + 4 * U) * (fabs(zc[i]) + 0.01 * U);
        snprintf(what, sizeof what, "lm_rows k=%lld V=%lld cap=%g %s", (long long)k, (long long)V, cap,
                 grad ? "(gradient)" : "(capped logits)");
        CLOSE(what, zg, zc, tz, 0, k * V);
        free(zc), free(lc), free(cc), free(zg), free(lg), free(cg), free(tz);
        af_vk_free(D, dz), af_vk_free(D, dl), af_vk_free(D, dc);
    }
    af_vk_free(D, dtg);
    free(z), free(tg);
}

static void test_adamw(int64_t n) {
    float *P = frand(n, -1, 1), *M = calloc((size_t)n, 4), *V = calloc((size_t)n, 4), *P0 = fcopy(P, n);
    uint8_t *mask = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) mask[i] = (uint8_t)(i % 3 != 0);
    float *dP = upf(P, n), *dM = upf(M, n), *dV = upf(V, n);
    uint8_t *dmask = up(mask, (size_t)n);
    af_adamw o;
    af_adamw_defaults(&o, 1e-3f);
    int64_t t = 0;
    for (int step = 0; step < 3; step++) {
        float *G = frand(n, -2, 2), *dG = upf(G, n);
        af_adamw_step(T_CTX, &o, P, G, M, V, n, 1e-3f * (step + 1), mask);
        af_vk_adamw_step(D, &t, o.beta1, o.beta2, o.eps, o.weight_decay, dP, dG, dM, dV, n, 1e-3f * (step + 1), dmask);
        af_vk_free(D, dG);
        free(G);
    }
    float *Pg = down(dP, n), *Mg = down(dM, n), *Vg = down(dV, n);
    double *tp = ulp_tol(P, n, g_fp64 ? 2 : 8), *tm = ulp_tol(M, n, 2), *tv = ulp_tol(V, n, 2);
    /* A driver may contract p − lr·wd·p − lr·u into fused multiply-adds (NVIDIA 580 does): each step
     * may then round differently, by up to 2U of the terms' sizes |p| and lr·|u| (|u| = |m̂|/(√v̂ + eps)
     * ≤ 1/√(1 − β2) ≈ 31.6 here), which exceeds ulps of the result where they cancel (P near 0). */
    for (int64_t i = 0; i < n; i++) tp[i] += 3 * 2 * U * (fabs((double)P0[i]) + 2 * 6e-3 * 31.7);
    CLOSE("adamw_step x3 (P)", Pg, P, tp, 0, n);
    CLOSE("adamw_step x3 (M)", Mg, M, tm, 0, n);
    CLOSE("adamw_step x3 (V)", Vg, V, tv, 0, n);
    CHECK(t == o.t, "adamw step count %lld vs %lld", (long long)t, (long long)o.t);
    /* clipping */
    float *G = frand(n, -3, 3), *Gc = fcopy(G, n), *dG = upf(G, n);
    double nc = af_clip_grad_norm(T_CTX, Gc, n, 1.0);
    double ng = af_vk_clip_grad_norm(D, dG, n, 1.0);
    CHECK(fabs(ng - nc) <= (g_fp64 ? 1e-13 : 4 * gamma_k(n)) * nc, "clip_grad_norm: norm %.17g vs %.17g", ng, nc);
    float *Gg = down(dG, n);
    double *tg = ulp_tol(Gc, n, 2);
    CLOSE("clip_grad_norm (scaled gradient)", Gg, Gc, tg, 0, n);
    af_vk_free(D, dP), af_vk_free(D, dM), af_vk_free(D, dV), af_vk_free(D, dmask), af_vk_free(D, dG);
    free(P), free(P0), free(M), free(V), free(mask), free(Pg), free(Mg), free(Vg), free(tp), free(tm), free(tv), free(G), free(Gc);
    free(Gg), free(tg);
}

/* ---------------------------------------------------------------- buffer windows, staging */

/* With the per-buffer limit lowered to 64 KiB (windows of 64 KiB every 32 KiB), tensors of a few
 * hundred KiB are split: products by rows of x/y, rows of W or the summed dimension, element-wise
 * ops by ranges, the embedding by pieces of the weight, transfers by windows. */
static void test_split(void) {
    printf("-- arguments split across buffer windows (limit 64 KiB)\n");
    af_vk_set_hook(D, AF_VK_HOOK_BUFFER_LIMIT, 65536);
    double t = af_time_sec();
    test_matmul(AF_TYPE_Q4_0, 20, 512, 300);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_matmul(AF_TYPE_Q4_0, 20, 512, 300);"), t = af_time_sec();
    test_matmul(AF_TYPE_Q6_K, 3, 512, 200);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_matmul(AF_TYPE_Q6_K, 3, 512, 200);"), t = af_time_sec();
    test_matmul(AF_TYPE_F32, 40, 256, 70);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_matmul(AF_TYPE_F32, 40, 256, 70);"), t = af_time_sec();
    test_gemm(16, 300, 200);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_gemm(16, 300, 200);"), t = af_time_sec();
    test_gemm(90, 16, 300);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_gemm(90, 16, 300);"), t = af_time_sec();
    test_elementwise(50000);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_elementwise(50000);"), t = af_time_sec();
    test_rmsnorm(100, 576);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_rmsnorm(100, 576);"), t = af_time_sec();
    test_rope(300, 3, 64, 10000.0f, 1, 1000);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_rope(300, 3, 64, 10000.0f, 1, 1000);"), t = af_time_sec();
    test_rows(AF_TYPE_Q4_0, 500, 1024);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_rows(AF_TYPE_Q4_0, 500, 1024);"), t = af_time_sec();
    test_rows(AF_TYPE_F32, 100, 256);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_rows(AF_TYPE_F32, 100, 256);"), t = af_time_sec();
    test_lora(70, 256, 96, 8, 2.0f, 1);
    if (getenv("TL_VERBOSE")) printf("   %.2f s: %s\n", af_time_sec() - t, "test_lora(70, 256, 96, 8, 2.0f, 1);"), t = af_time_sec();
    /* a 1 MiB round trip through many windows */
    const int64_t n = 262144;
    float *x = frand(n, -1, 1), *dx = upf(x, n);
    float *d2 = af_vk_alloc(D, (size_t)n * 4);
    af_vk_copy(D, d2, dx, (size_t)n * 4);
    float *g = down(d2, n);
    CLOSE("1 MiB upload, copy, download over 64 KiB windows", g, x, NULL, 0, n);
    af_vk_free(D, dx), af_vk_free(D, d2);
    free(x), free(g);
    af_vk_set_hook(D, AF_VK_HOOK_BUFFER_LIMIT, 0);
}

/* Uploads and downloads through staging buffers (what a discrete GPU always does), larger than one
 * frame's staging memory, interleaved with ops. */
static void test_staging(void) {
    printf("-- transfers through staging buffers\n");
    af_vk_set_hook(D, AF_VK_HOOK_STAGING, 1);
    const int64_t n = 3 * 1024 * 1024 + 17; /* 12 MiB: two frames' staging */
    float *x = frand(n, -1, 1), *dx = upf(x, n);
    af_vk_scale(D, dx, dx, 2.0f, n);
    float *g = down(dx, n);
    for (int64_t i = 0; i < n; i++) x[i] *= 2.0f;
    CLOSE("12 MiB upload, scale, download through staging", g, x, NULL, 0, n);
    /* a result read back right after the work that computes it: the upload, the op and the copy
     * to the host in one command buffer (the discrete-GPU path of a decode step's logits) */
    {
        float *c = frand(5000, -1, 1), *dc = af_vk_alloc(D, 20000), *dr = af_vk_alloc(D, 20000);
        af_vk_sync(D);
        const uint64_t s0 = af_vk_submissions(D);
        af_vk_upload(D, dc, c, 20000);
        af_vk_scale(D, dr, dc, -0.5f, 5000);
        float *r = down(dr, 5000);
        const uint64_t ns = af_vk_submissions(D) - s0;
        for (int64_t i = 0; i < 5000; i++) c[i] *= -0.5f;
        CLOSE("upload, scale, download through staging", r, c, NULL, 0, 5000);
        CHECK(ns == 1, "upload + op + read-back through staging: %llu submissions, want 1", (unsigned long long)ns);
        printf("upload + op + read-back through staging: %llu submission(s)\n", (unsigned long long)ns);
        af_vk_free(D, dc), af_vk_free(D, dr);
        free(c), free(r);
    }
    /* an upload queued behind an op that reads the old contents */
    float *a = frand(1000, -1, 1), *b = frand(1000, -1, 1), *da = upf(a, 1000), *dy = af_vk_alloc(D, 4000);
    af_vk_scale(D, dy, da, 3.0f, 1000);
    af_vk_upload(D, da, b, 4000);
    float *yg = down(dy, 1000), *ag = down(da, 1000);
    for (int64_t i = 0; i < 1000; i++) a[i] *= 3.0f;
    CLOSE("an upload ordered after the op that reads the old data", yg, a, NULL, 0, 1000);
    CLOSE("the uploaded data", ag, b, NULL, 0, 1000);
    test_moves();
    af_vk_free(D, dx), af_vk_free(D, da), af_vk_free(D, dy);
    free(x), free(g), free(a), free(b), free(yg), free(ag);
    af_vk_set_hook(D, AF_VK_HOOK_STAGING, 0);
}

/* ---------------------------------------------------------------- memory policy */

/* af_vk_pick_memory on the memory properties of devices we cannot run here (values as vulkaninfo
 * reports them: an NVIDIA data-centre GPU with a resizable BAR, a discrete GPU with a 256 MiB BAR, an
 * integrated GPU, lavapipe). Flags: 1 DEVICE_LOCAL, 2 HOST_VISIBLE, 4 HOST_COHERENT, 8 HOST_CACHED. */
static void test_mem_policy(void) {
    printf("-- memory policy (af_vk_pick_memory)\n");
    const uint64_t G = 1ull << 30;
    /* NVIDIA H100-like: VRAM, host WC, host cached, VRAM through the BAR (same heap as VRAM) */
    const af_vk_memtype nv[] = {{1, 80 * G}, {2 | 4, 128 * G}, {2 | 4 | 8, 128 * G}, {1 | 2 | 4, 80 * G}};
    af_vk_mempick p = {-1, -1, -1, -1, -1};
    CHECK(af_vk_pick_memory(nv, 4, 2, &p) == 0 && p.device == 0 && !p.device_host_visible && p.host == 2 &&
              p.host_coherent && p.host_cached,
          "discrete GPU with a resizable BAR: plain VRAM (0), staging in cached host memory (2): got %d %d %d", p.device,
          p.host, p.device_host_visible);
    CHECK(af_vk_pick_memory(nv, 4, 1, &p) == 0 && p.device == 3 && p.device_host_visible,
          "the same types on an integrated device: the mapped device-local type (3): got %d %d", p.device,
          p.device_host_visible);
    /* discrete with a small BAR heap: the large VRAM heap wins whatever the device type */
    const af_vk_memtype amd[] = {{1, 16 * G}, {2 | 4, 32 * G}, {1 | 2 | 4, 256ull << 20}};
    CHECK(af_vk_pick_memory(amd, 3, 2, &p) == 0 && p.device == 0 && !p.device_host_visible && p.host == 1 &&
              !p.host_cached,
          "discrete GPU with a 256 MiB BAR: VRAM (0), staging 1: got %d %d", p.device, p.host);
    CHECK(af_vk_pick_memory(amd, 3, 1, &p) == 0 && p.device == 0 && !p.device_host_visible,
          "largest heap first: got %d", p.device);
    /* lavapipe: one type that is everything */
    const af_vk_memtype lvp[] = {{1 | 2 | 4 | 8, 2 * G}};
    CHECK(af_vk_pick_memory(lvp, 1, 4, &p) == 0 && p.device == 0 && p.host == 0 && p.device_host_visible,
          "lavapipe: one mapped type");
    const af_vk_memtype none[] = {{2 | 4, G}}, nohost[] = {{1, G}};
    CHECK(af_vk_pick_memory(none, 1, 2, &p) == -1 && af_vk_pick_memory(nohost, 1, 2, &p) == -1,
          "no device-local or no host-visible type: refused");
}

/* ---------------------------------------------------------------- profiler */

/* A device opened with AF_VULKAN_PROFILE=1: two element-wise ops, an upload and a read-back are in
 * its table with their counts and a positive time; the plain device reports nothing. */
static void test_profile(void) {
    printf("-- profiler (AF_VULKAN_PROFILE)\n");
    char buf[4096];
    CHECK(af_vk_profile_text(D, buf, sizeof buf) == 0 && buf[0] == 0, "no profile without AF_VULKAN_PROFILE");
    setenv("AF_VULKAN_PROFILE", "1", 1);
    af_vk_dev *d2 = NULL;
    af_status st = af_vk_open(0, &d2);
    unsetenv("AF_VULKAN_PROFILE");
    if (!CHECK(st == AF_OK, "profiled device: %s", af_last_error())) return;
    float *x = frand(4096, -1, 1), *y = malloc(4096 * 4);
    float *dx = af_vk_alloc(d2, 4096 * 4), *dy = af_vk_alloc(d2, 4096 * 4);
    af_vk_set_hook(d2, AF_VK_HOOK_STAGING, 1);
    af_vk_upload(d2, dx, x, 4096 * 4);
    af_vk_scale(d2, dy, dx, 2.0f, 4096);
    af_vk_add(d2, dy, dy, dx, 4096);
    CHECK(af_vk_download(d2, y, dy, 4096 * 4) == AF_OK && y[7] == 3.0f * x[7], "profiled device computes");
    af_vk_sync(d2);
    const size_t n = af_vk_profile_text(d2, buf, sizeof buf);
    printf("%s", buf);
    const char *ew = strstr(buf, "\n  ew "), *tr = strstr(buf, "\n  transfers ");
    unsigned long long cnt = 0, tcnt = 0;
    double ms = -1, tms = -1;
    if (ew) sscanf(ew + 5, "%llu %lf", &cnt, &ms);
    if (tr) sscanf(tr + 12, "%llu %lf", &tcnt, &tms);
    CHECK(n > 0 && ew && cnt == 2 && ms > 0, "profile: the element-wise shader twice with a positive time (%llu, %g ms)",
          cnt, ms);
    CHECK(tr && tcnt == 2 && tms >= 0, "profile: the upload and the read-back as transfers (%llu)", tcnt);
    const char *bo = strstr(buf, " operation ");
    CHECK(bo && strstr(bo, " scale ") && strstr(bo, " add "), "profile: a table by operation names scale and add");
    af_vk_free(d2, dx), af_vk_free(d2, dy);
    af_vk_close(d2);
    free(x), free(y);
}

/* ---------------------------------------------------------------- subgroup sizes */

/* The size policy on the ranges of devices we cannot run here, then, on this device, the decode
 * products of the subgroup shader (mv_sg) created with every required size the device allows (and
 * with none: the driver's choice) against the CPU. Lavapipe allows only 8; the shader strides its
 * lanes by gl_SubgroupSize, so sizes 16/32/64 run the same code with more lanes (GPU run: the kit). */
static void test_subgroup_sizes(void) {
    printf("-- subgroup sizes\n");
    CHECK(af_vk_pick_subgroup_size(32, 32) == 32 && af_vk_pick_subgroup_size(32, 64) == 32 &&
              af_vk_pick_subgroup_size(8, 32) == 32 && af_vk_pick_subgroup_size(8, 8) == 8 &&
              af_vk_pick_subgroup_size(64, 64) == 64 && af_vk_pick_subgroup_size(4, 16) == 16 &&
              af_vk_pick_subgroup_size(0, 0) == 0 && af_vk_pick_subgroup_size(64, 32) == 0,
          "subgroup size policy: 32 clamped to the device's range");
    const af_vk_info *in = af_vk_dev_info(D);
    if (!in->subgroup_arith) {
        tl_skip("no subgroup arithmetic on this device: the subgroup shaders are not used");
        return;
    }
    CHECK(af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP_SIZE, 3) == -1, "a required subgroup size of 3 is refused");
    if (!in->subgroup_control) {
        tl_skip("no subgroup size control on this device (subgroup size %u, the driver's)", in->subgroup_size);
        return;
    }
    const int prev = af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP_SIZE, 0);
    CHECK(af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP_SIZE, 2 * (uint64_t)in->subgroup_max) == -1,
          "a required size above the device's maximum is refused");
    static const uint32_t types[] = {AF_TYPE_Q4_0, AF_TYPE_Q3_K, AF_TYPE_Q6_K, AF_TYPE_F16};
    for (uint32_t sz = 0; sz <= in->subgroup_max; sz = sz ? 2 * sz : in->subgroup_min) {
        CHECK(af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP_SIZE, sz) >= 0, "required subgroup size %u accepted", sz);
        printf("required subgroup size %u%s:\n", sz, sz ? "" : " (none: the driver's)");
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            test_matmul(types[i], 1, 768, 45);
            test_matmul(types[i], 6, 512, 19);
        }
        if (sz == in->subgroup_max) break;
    }
    af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP_SIZE, (uint64_t)(prev > 0 ? prev : 0));
}

/* ---------------------------------------------------------------- failures */

static int contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* In a child process with `env`=`val` set before the loader is opened: af_vk_open must fail with a
 * message containing `want`. Returns 1 when it did. */
static int child_open_fails(const char *env, const char *val, const char *want) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv(env, val, 1);
        af_vk_dev *d = NULL;
        af_status st = af_vk_open(0, &d);
        if (st == AF_OK) {
            printf("  [child] %s=%s: af_vk_open succeeded\n", env, val);
            _exit(2);
        }
        printf("  [child] %s=%s: %s: %s\n", env, val, af_status_name(st), af_last_error());
        fflush(stdout);
        _exit(contains(af_last_error(), want) ? 0 : 3);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static void test_faults(void) {
    printf("-- failures\n");
    af_vk_dev *d = NULL;
    CHECK(af_vk_open(99, &d) == AF_ERR_NOT_FOUND && contains(af_last_error(), "vulkan:99"),
          "a device index that does not exist: %s", af_last_error());
    /* allocation failure: NULL with the device, the size and the VkResult named; the device stays usable */
    af_vk_fault_arm(D, 0, 1);
    void *p = af_vk_alloc(D, 1 << 20);
    const char *e = af_last_error();
    CHECK(p == NULL && contains(e, "vulkan:0") && contains(e, "1048576 bytes") &&
              contains(e, "VK_ERROR_OUT_OF_DEVICE_MEMORY"),
          "allocation failure message: %s", e);
    printf("  allocation failure: %s\n", e);
    p = af_vk_alloc(D, 1 << 20);
    CHECK(p != NULL && af_vk_sync(D) == AF_OK, "the device works after an allocation failure");
    af_vk_free(D, p);
    /* a host pointer passed to an op: the op fails (sticky) naming the op and the argument */
    float host[16] = {0};
    af_vk_dev *d2 = NULL;
    CHECK(af_vk_open(0, &d2) == AF_OK, "open a second device handle");
    if (d2) {
        float *dy = af_vk_alloc(d2, 64);
        af_vk_add(d2, dy, host, host, 16);
        af_status st = af_vk_sync(d2);
        e = af_last_error();
        CHECK(st != AF_OK && contains(e, "vulkan:0") && contains(e, "add") && contains(e, "not device memory"),
              "a host pointer given to an op: %s", e);
        printf("  host pointer: %s\n", e);
        af_vk_free(d2, dy);
        af_vk_close(d2);
    }
    /* a shader the driver refuses: the op's error at the next synchronization point */
    CHECK(af_vk_open(0, &d2) == AF_OK, "open a device for the shader fault");
    if (d2) {
        af_vk_fault_arm(d2, 2, 1);
        float *x = af_vk_alloc(d2, 4096), *w = af_vk_alloc(d2, 4096);
        af_vk_fill(d2, x, 0, 4096);
        af_vk_fill(d2, w, 0x3f800000u, 4096);
        af_vk_rmsnorm_forward(d2, x, NULL, x, w, 4, 256, 1e-5f);
        af_status st = af_vk_sync(d2);
        e = af_last_error();
        CHECK(st == AF_ERR_UNSUPPORTED && contains(e, "vulkan:0") && contains(e, "rmsnorm_forward") &&
                  contains(e, "refused shader"),
              "shader load failure: %s", e);
        printf("  shader failure: %s\n", e);
        float out[4];
        CHECK(af_vk_download(d2, out, x, 16) != AF_OK, "later transfers report the error too");
        af_vk_add(d2, x, x, x, 8); /* skipped, no crash */
        af_vk_free(d2, x), af_vk_free(d2, w);
        af_vk_close(d2);
    }
    /* device lost at a submission: every later op is skipped, every synchronization point says so */
    CHECK(af_vk_open(0, &d2) == AF_OK, "open a device for the device-lost fault");
    if (d2) {
        af_vk_fault_arm(d2, 1, 1);
        float *x = af_vk_alloc(d2, 4096);
        af_vk_fill(d2, x, 0, 4096);
        af_vk_add(d2, x, x, x, 1024);
        af_status st = af_vk_sync(d2);
        e = af_last_error();
        CHECK(st != AF_OK && contains(e, "vulkan:0") && contains(e, "device lost") && contains(e, "add"),
              "device lost: %s", e);
        printf("  device lost: %s\n", e);
        af_vk_scale(d2, x, x, 2.0f, 1024);
        CHECK(isnan(af_vk_clip_grad_norm(d2, x, 1024, 1.0)), "a host scalar after the loss is NaN");
        CHECK(af_vk_count_nonfinite(d2, x, 1024) == -1, "the non-finite count after the loss is -1");
        float out[4];
        CHECK(af_vk_download(d2, out, x, 16) != AF_OK, "a download after the loss fails");
        af_vk_free(d2, x);
        af_vk_close(d2);
    }
}

/* ---------------------------------------------------------------- main */

static void run_all(const char *label, int full) {
    printf("-- %s\n", label);
    double t0 = af_time_sec();
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        const uint32_t t = all_types[i];
        if (!full && t != AF_TYPE_Q4_K && t != AF_TYPE_F32) continue;
        test_matmul(t, 1, 256, 37);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_matmul(t, 1, 256, 37);");
        test_matmul(t, 5, 256, 37);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_matmul(t, 5, 256, 37);");
        if (full) test_matmul(t, 17, 256, 40);
        if (getenv("TL_TIMING")) printf("   %.2f s cpu: after matmul %s\n", cpu_sec(), af_type_name(t));
        if (full) test_rows(t, 11, 256);
        if (getenv("TL_TIMING")) printf("   %.2f s cpu: after rows %s\n", cpu_sec(), af_type_name(t));
    }
    test_gemm(1, 16, 576);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_gemm(1, 16, 576);");
    test_gemm(70, 16, 45);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_gemm(70, 16, 45);");
    test_gemm(16, 77, 130);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_gemm(16, 77, 130);");
    test_rmsnorm(1, 576);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_rmsnorm(1, 576);");
    test_rmsnorm(33, 67);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_rmsnorm(33, 67);");
    test_rope(7, 3, 64, 10000.0f, 0, g_fp64 ? 30000 : 64);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_rope(7, 3, 64, 10000.0f, 0, g_fp64 ? 30000 : 64);");
    test_rope(5, 2, 6, 1e6f, 1, g_fp64 ? 30000 : 64);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_rope(5, 2, 6, 1e6f, 1, g_fp64 ? 30000 : 64);");
    test_rope_ff(9, 2, 16, 1e6f, 1, g_fp64 ? 30000 : 64, 1);
    test_rope_ff(4, 3, 8, 10000.0f, 0, g_fp64 ? 30000 : 64, 1);
    test_elementwise(1000);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_elementwise(1000);");
    test_softmax(4, 333);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_softmax(4, 333);");
    test_attention(70, 0, 70, 2 * 64, 6, 2, 64, 0);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_attention(70, 0, 70, 2 * 64, 6, 2, 64, 0);");
    test_attention(70, 0, 70, 2 * 64, 6, 2, 64, 16);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_attention(70, 0, 70, 2 * 64, 6, 2, 64, 16);");
    test_attention(1, 40, 64, 2 * 64 + 5, 6, 2, 64, 0);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_attention(1, 40, 64, 2 * 64 + 5, 6, 2, 64, 0);");
    test_attention(3, 5, 9, 80, 2, 1, 80, 0);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_attention(3, 5, 9, 80, 2, 1, 80, 0);");
    if (full) test_attention(20, 0, 20, 4 * 48, 4, 4, 48, 7);
    test_attention(6, 0, 6, 512, 2, 1, 512, 0); /* Gemma 4's global head_dim (the shaders' largest) */
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_attention(6, 0, 6, 512, 2, 1, 512, 0);");
    test_attention(2, 3, 5, 2 * 320, 4, 2, 320, 0); /* head_dim 320: more than 4 dims per invocation, a partial last */
    test_moves();
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_moves();");
    test_dropout(3, 70);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_dropout(3, 70);");
    test_lora(3, 96, 80, 8, 2.0f, 0);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_lora(3, 96, 80, 8, 2.0f, 0);");
    test_lora(37, 96, 80, 8, 2.0f, 1);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_lora(37, 96, 80, 8, 2.0f, 1);");
    test_lora(20, 64, 48, 4, 1.0f, 1);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_lora(20, 64, 48, 4, 1.0f, 1);");
    test_head(4, 96, 5);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_head(4, 96, 5);");
    test_losses(6, 5);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_losses(6, 5);");
    test_lm_rows(5, 1000, 0.0f);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_lm_rows(5, 1000, 0.0f);");
    test_lm_rows(4, 700, 30.0f);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_lm_rows(4, 700, 30.0f);");
    test_adamw(5000);
    if (getenv("TL_TIMING")) printf("   %.2f s cpu: %s\n", cpu_sec(), "test_adamw(5000);");
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
}

int main(void) {
    /* before anything opens the loader in this process (forked children inherit it): no loader,
     * and a loader that finds no driver, give clear messages and no crash */
    printf("-- no loader, no driver\n");
    CHECK(child_open_fails("AF_VULKAN_LOADER", "/nonexistent/libvulkan.so.1", "no loader"),
          "a missing Vulkan loader is reported as such");
    if (af_vk_built())
        CHECK(child_open_fails("VK_ICD_FILENAMES", "/nonexistent/icd.json", "Vulkan"),
              "a loader without a driver is reported");
    if (af_vk_built()) test_mem_policy();
    af_status st = af_vk_open(0, &D);
    if (st != AF_OK) {
        tl_skip("no Vulkan device: %s", af_last_error());
        return tl_finish("test_backend_ops");
    }
    const af_vk_info *in = af_vk_dev_info(D);
    printf("%s, driver %s, fp64 %d, fp16 %d, subgroup arithmetic %d (size %u), maxStorageBufferRange %llu\n",
           af_vk_dev_name(D), in->driver, in->fp64, in->fp16, in->subgroup_arith, in->subgroup_size,
           (unsigned long long)in->max_range);
    run_all("default paths", 1);
    double t0 = af_time_sec();
    test_split();
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
    t0 = af_time_sec();
    test_staging();
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
    test_profile();
    t0 = af_time_sec();
    test_subgroup_sizes();
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
    t0 = af_time_sec();
    test_faults();
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
    /* the products with the other tile size than this device's default (mm / mm_s) */
    const int mm_prev = af_vk_set_hook(D, AF_VK_HOOK_MM_SMALL, 0);
    af_vk_set_hook(D, AF_VK_HOOK_MM_SMALL, mm_prev > 0 ? 0 : UINT64_MAX);
    printf("-- %s\n", mm_prev > 0 ? "products in 64 x 64 tiles (mm)" : "products in 32 x 32 tiles (mm_s)");
    t0 = af_time_sec();
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) test_matmul(all_types[i], 17, 256, 40);
    test_matmul(AF_TYPE_Q4_0, 70, 256, 100); /* several tiles each way, partial last ones */
    test_gemm(70, 16, 45);
    test_gemm(16, 77, 130);
    test_lora(37, 96, 80, 8, 2.0f, 1);
    /* split-K where the 32 x 32 tiles are on: few output tiles, a long k (the LoRA gradients) */
    test_gemm(16, 40, 1100);
    test_lora(600, 96, 80, 8, 2.0f, 1);
    printf("   (%.1f s, %.1f s cpu so far)\n", af_time_sec() - t0, cpu_sec());
    af_vk_set_hook(D, AF_VK_HOOK_MM_SMALL, (uint64_t)mm_prev);
    if (af_vk_set_hook(D, AF_VK_HOOK_FP64, 0) >= 0 && af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP, 0) >= 0) {
        g_fp64 = 0;
        run_all("f32 variants of the double shaders, no subgroup arithmetic", 0);
        g_fp64 = 1;
        af_vk_set_hook(D, AF_VK_HOOK_FP64, in->fp64);
        af_vk_set_hook(D, AF_VK_HOOK_SUBGROUP, in->subgroup_arith);
    }
    af_vk_close(D);
    return tl_finish("test_backend_ops");
}
