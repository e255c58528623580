/*
 * test_matmul.c — kernels/matmul.h against dequantize-then-multiply in double, for every weight
 * type and every kernel path this CPU has (one context per path, tl_ctx_set).
 *
 * Weights: half the rows are random f32 quantized with af_quantize_row (when it supports the
 * type), the other half random block bytes with finite random fp16 scale fields, so every bit
 * pattern of the packed quants is exercised. Reference: af_dequantize_row + f64 products.
 *
 * Decode (n <= 4) is run in each of its modes: the default f32 decode (weights dequantized in
 * registers, ops.decode_f32), the dequantize-to-stack + dot fallback (af_ctx_set_hook(T_CTX, AF_CTX_FUSED_DECODE, 0))
 * and, for block types on SIMD paths, int8 activations (tl_ctx_set(NULL, -1, NULL, 1)).
 *
 * Tolerances (per output element, rigorous bounds rather than guesses):
 *  - f32 paths (scalar, f32 decode, dot decode, tile GEMM for n > 4, dyw, f32 GEMMs):
 *    |err| <= 3e-5 * sum_k |x_k w_k| + 1e-6 (f32 accumulation over k <= 1536 terms: a few ulps
 *    times sqrt(k) in practice; the measured worst is ~3% of it, rel ~5e-7).
 *  - int8 decode (opt-in, SIMD paths, block types, n <= 4): activations are rounded to int8 with
 *    step d = max|x| / 127 per 32-block, so |err| <= sum_k |w_k| d_k / 2, plus the f32 term.
 *    The kernel folds weight offsets and mins into d*sum(q) of the quantized block, so the result
 *    is exactly sum_k w_k * xq_k and this bound holds for every type. The measured relative error
 *    ||y - y_ref|| / ||y_ref|| of that path is printed (about 3e-3 for Gaussian x, the same as
 *    llama.cpp's Q8 activations).
 */
#include "testlib.h"
#include "kernels/ctx.h"

#include "core/core.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t TYPES[] = {AF_TYPE_F32,  AF_TYPE_F16,  AF_TYPE_BF16, AF_TYPE_Q4_0, AF_TYPE_Q4_1,
                                 AF_TYPE_Q5_0, AF_TYPE_Q5_1, AF_TYPE_Q8_0, AF_TYPE_Q2_K, AF_TYPE_Q3_K,
                                 AF_TYPE_Q4_K, AF_TYPE_Q5_K, AF_TYPE_Q6_K, AF_TYPE_NF4};
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])

static uint64_t g_rng = 0x1234567887654321ull;

static void put_h(uint8_t *p, float v) {
    uint16_t h = af_f32_to_fp16(v);
    memcpy(p, &h, 2);
}
static float rnd_scale(void) {
    float v = tl_rand_uniform(&g_rng, 0.002f, 0.05f);
    return (tl_rand_u64(&g_rng) & 1) ? v : -v;
}

/* Random bytes for one row of `in` values with the fp16 scale fields made finite. */
static void random_row(uint32_t type, uint8_t *row, int64_t in) {
    size_t rb = af_row_bytes(type, in), bb = af_type_block_bytes(type);
    for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)tl_rand_u64(&g_rng);
    for (size_t off = 0; off < rb; off += bb) {
        uint8_t *b = row + off;
        switch (type) {
        case AF_TYPE_F32: {
            float v = tl_rand_normal(&g_rng);
            memcpy(b, &v, 4);
        } break;
        case AF_TYPE_F16: put_h(b, tl_rand_normal(&g_rng)); break;
        case AF_TYPE_BF16: {
            float v = tl_rand_normal(&g_rng);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(b, &h, 2);
        } break;
        case AF_TYPE_Q4_0: case AF_TYPE_Q5_0: case AF_TYPE_Q8_0: put_h(b, rnd_scale()); break;
        case AF_TYPE_Q4_1: case AF_TYPE_Q5_1: case AF_TYPE_Q4_K: case AF_TYPE_Q5_K:
            put_h(b, rnd_scale());
            put_h(b + 2, rnd_scale());
            break;
        case AF_TYPE_Q2_K: put_h(b + 80, rnd_scale()); put_h(b + 82, rnd_scale()); break;
        case AF_TYPE_Q3_K: put_h(b + 108, rnd_scale()); break;
        case AF_TYPE_Q6_K: put_h(b + 208, rnd_scale()); break;
        case AF_TYPE_NF4: { /* f32 absmax (nf4.h), any sign */
            float v = rnd_scale();
            memcpy(b, &v, 4);
        } break;
        default: break;
        }
    }
}

/* W[out, in] of `type` (bytes) and its f32 dequantization wd. */
static uint8_t *make_w(uint32_t type, int64_t out, int64_t in, float *wd) {
    size_t rb = af_row_bytes(type, in);
    uint8_t *w = malloc(rb * (size_t)out);
    float *tmp = malloc(sizeof(float) * (size_t)in);
    for (int64_t o = 0; o < out; o++) {
        bool done = false;
        if (o % 2 == 0) {
            for (int64_t k = 0; k < in; k++) tmp[k] = tl_rand_normal(&g_rng) * 0.1f;
            done = af_quantize_row(type, tmp, w + o * rb, in);
        }
        if (!done) random_row(type, w + o * rb, in);
        af_dequantize_row(type, w + o * rb, wd + o * in, in);
    }
    free(tmp);
    return w;
}

static void rand_vec(float *v, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) v[i] = tl_rand_normal(&g_rng) * scale;
}

static const char *PATHS[] = {"scalar", "avx2", "avx512"};
static bool path_ok[3];

/* Worst ratio |err| / tolerance over all elements; reports the worst one on failure. */
typedef struct worst {
    double ratio, rel; /* rel: max over cases with >= 64 outputs of ||err|| / ||ref|| */
} worst;

static bool check_vs(const char *what, const float *got, const double *ref, const double *tol, int64_t cnt,
                     worst *wst) {
    double e2 = 0, r2 = 0;
    int64_t wi = 0;
    double wr = -1;
    for (int64_t i = 0; i < cnt; i++) {
        double e = fabs((double)got[i] - ref[i]);
        double r = e / tol[i];
        if (!(r <= wr)) {
            wr = r;
            wi = i;
        }
        e2 += e * e;
        r2 += ref[i] * ref[i];
    }
    if (cnt >= 64 && r2 > 0 && sqrt(e2 / r2) > wst->rel) wst->rel = sqrt(e2 / r2);
    if (wr > wst->ratio) wst->ratio = wr;
    bool ok = wr <= 1.0;
    if (!ok)
        fprintf(stderr, "%s: worst [%lld] got %.8g want %.8g |err| %.3g tol %.3g\n", what, (long long)wi,
                got[wi], ref[wi], fabs(got[wi] - ref[wi]), tol[wi]);
    return ok;
}

static const char *MODES[] = {"f32-decode", "dot-decode", "int8-decode"};

/* One (type, n, in, out) case on every path and decode mode; worst ratios go to wi (int8
 * decode), wf (f32 decode, n <= 4), wt (tiles, n > 4) and wd_ (dyw). */
static void run_case(uint32_t type, int64_t n, int64_t in, int64_t out, worst *wi, worst *wf, worst *wt,
                     worst *wd_) {
    float *wd = malloc(sizeof(float) * (size_t)(out * in));
    uint8_t *w = make_w(type, out, in, wd);
    float *x = malloc(sizeof(float) * (size_t)(n * in)), *dy = malloc(sizeof(float) * (size_t)(n * out));
    rand_vec(x, n * in, 1.0f);
    if (in >= 64) memset(x + 32, 0, 32 * sizeof(float)); /* an all-zero activation block */
    rand_vec(dy, n * out, 1.0f);
    double *yr = malloc(sizeof(double) * (size_t)(n * out)), *tf = malloc(sizeof(double) * (size_t)(n * out));
    double *ti = malloc(sizeof(double) * (size_t)(n * out));
    double *dxr = malloc(sizeof(double) * (size_t)(n * in)), *td = malloc(sizeof(double) * (size_t)(n * in));
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * in;
        for (int64_t o = 0; o < out; o++) {
            const float *wo = wd + o * in;
            double s = 0, a = 0, q = 0;
            for (int64_t k = 0; k < in; k++) {
                s += (double)xt[k] * wo[k];
                a += fabs((double)xt[k] * wo[k]);
            }
            for (int64_t b = 0; b + 32 <= in; b += 32) {
                double amax = 0, sw = 0;
                for (int j = 0; j < 32; j++) {
                    amax = fmax(amax, fabs(xt[b + j]));
                    sw += fabs(wo[b + j]);
                }
                q += sw * amax / 127.0 / 2.0;
            }
            yr[t * out + o] = s;
            tf[t * out + o] = 3e-5 * a + 1e-6;
            ti[t * out + o] = 1.001 * q + 3e-5 * a + 1e-6;
        }
        for (int64_t k = 0; k < in; k++) {
            double s = 0, a = 0;
            for (int64_t o = 0; o < out; o++) {
                s += (double)dy[t * out + o] * wd[o * in + k];
                a += fabs((double)dy[t * out + o] * wd[o * in + k]);
            }
            dxr[t * in + k] = s;
            td[t * in + k] = 3e-5 * a + 1e-6;
        }
    }
    float *y = malloc(sizeof(float) * (size_t)(n * out)), *dx = malloc(sizeof(float) * (size_t)(n * in));
    float *y0 = malloc(sizeof(float) * (size_t)(n * out));
    double *yr2 = malloc(sizeof(double) * (size_t)(n * out));
    bool is_block = af_type_block_size(type) >= 32;
    char what[200];
    for (int p = 0; p < 3; p++) {
        if (!path_ok[p]) continue;
        tl_ctx_set(PATHS[p], -1, NULL, -1);
        /* decode modes (n <= 4): 0 f32 fused (default), 1 dequant + dot fallback, 2 int8 activations */
        for (int mode = 0; mode < 3; mode++) {
            if (mode > 0 && (n > 4 || p == 0)) continue;
            if (mode == 2 && !is_block) continue;
            af_ctx_set_hook(T_CTX, AF_CTX_FUSED_DECODE, mode != 1);
            tl_ctx_set(NULL, -1, NULL, mode == 2);
            bool intp = mode == 2;
            worst *wx = intp ? wi : n <= 4 ? wf : wt;
            const char *mname = n > 4 ? "tiles" : MODES[mode];
            snprintf(what, sizeof what, "xwt %s %s %s n=%lld in=%lld out=%lld", PATHS[p], mname,
                     af_type_name(type), (long long)n, (long long)in, (long long)out);
            for (int64_t i = 0; i < n * out; i++) y[i] = NAN;
            af_matmul_xwt(T_CTX, y, x, w, type, n, in, out, 0);
            CHECK(check_vs(what, y, yr, intp ? ti : tf, n * out, wx), "%s", what);
            /* accumulate = 1 on top of random values */
            rand_vec(y0, n * out, 1.0f);
            memcpy(y, y0, sizeof(float) * (size_t)(n * out));
            for (int64_t i = 0; i < n * out; i++) yr2[i] = yr[i] + y0[i];
            af_matmul_xwt(T_CTX, y, x, w, type, n, in, out, 1);
            snprintf(what, sizeof what, "xwt+acc %s %s %s n=%lld in=%lld out=%lld", PATHS[p], mname,
                     af_type_name(type), (long long)n, (long long)in, (long long)out);
            CHECK(check_vs(what, y, yr2, intp ? ti : tf, n * out, wx), "%s", what);
        }
        af_ctx_set_hook(T_CTX, AF_CTX_FUSED_DECODE, 1);
        tl_ctx_set(NULL, -1, NULL, 0);

        snprintf(what, sizeof what, "dyw %s %s n=%lld in=%lld out=%lld", PATHS[p], af_type_name(type),
                 (long long)n, (long long)in, (long long)out);
        for (int64_t i = 0; i < n * in; i++) dx[i] = NAN;
        af_matmul_dyw(T_CTX, dx, dy, w, type, n, in, out, 0);
        CHECK(check_vs(what, dx, dxr, td, n * in, wd_), "%s", what);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    free(w); free(wd); free(x); free(dy); free(yr); free(tf); free(ti); free(dxr); free(td);
    free(y); free(dx); free(y0); free(yr2);
}

static void test_types(void) {
    static const int64_t NS[] = {1, 2, 3, 5, 8, 17, 64};
    static const int64_t OUTS[] = {1, 7, 33};
    for (int ti = 0; ti < NTYPES; ti++) {
        uint32_t type = TYPES[ti];
        int64_t bs = (int64_t)af_type_block_size(type);
        int64_t ins[2];
        if (bs == 256) { ins[0] = 256; ins[1] = 512; }
        else if (bs == 32) { ins[0] = 32; ins[1] = 160; }
        else if (bs == 64) { ins[0] = 64; ins[1] = 192; } /* NF4 */
        else { ins[0] = 7; ins[1] = 136; }
        worst wi = {0, 0}, wf = {0, 0}, wt = {0, 0}, wd = {0, 0};
        for (int a = 0; a < 2; a++)
            for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++)
                for (size_t oi = 0; oi < sizeof OUTS / sizeof OUTS[0]; oi++)
                    run_case(type, NS[ni], ins[a], OUTS[oi], &wi, &wf, &wt, &wd);
        /* model-like shapes: odd large outputs, threads engaged */
        int64_t big_in = bs == 256 ? 256 : 576;
        run_case(type, 1, big_in, 1536, &wi, &wf, &wt, &wd);
        run_case(type, 4, big_in, 576, &wi, &wf, &wt, &wd);
        run_case(type, 9, big_in, 576, &wi, &wf, &wt, &wd);
        /* the packed GEMM (gemm_packed.c, AVX-512; the f32 GEMMs: 203 x 130 x 600 below): ragged rows (37 = 4x8+5) and columns
         * (1100 = 34x32+12), several K-chunks of 256 for xwt (in 768) and dyw (K = out) */
        run_case(type, 37, 768, 1100, &wi, &wf, &wt, &wd);
        /* out >= 4*in: dyw streams rows with per-thread accumulators */
        run_case(type, 17, bs == 256 ? 256 : 64, 1100, &wi, &wf, &wt, &wd);
        printf("%-5s worst err/tol: f32 decode %.3f (rel %.2e), int8 decode %.3f (rel %.2e), "
               "tiles %.3f (rel %.2e), dyw %.3f (rel %.2e)\n",
               af_type_name(type), wf.ratio, wf.rel, wi.ratio, wi.rel, wt.ratio, wt.rel, wd.ratio, wd.rel);
    }
}

/* ---- f32 GEMMs vs naive f64 ---- */
static void test_gemm(void) {
    static const int64_t SZ[][3] = {{1, 1, 1}, {3, 5, 7}, {8, 32, 16}, {17, 33, 65}, {2, 16, 576},
                                    {64, 16, 576}, {130, 70, 300}, {5, 100, 3}, {33, 1, 9},
                                    {203, 130, 600}};
    for (size_t si = 0; si < sizeof SZ / sizeof SZ[0]; si++) {
        int64_t m = SZ[si][0], n = SZ[si][1], k = SZ[si][2];
        float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(n * k));
        float *c = malloc(sizeof(float) * (size_t)(m * n)), *c0 = malloc(sizeof(float) * (size_t)(m * n));
        double *r = malloc(sizeof(double) * (size_t)(m * n)), *tol = malloc(sizeof(double) * (size_t)(m * n));
        rand_vec(a, m * k, 1.f);
        rand_vec(b, n * k, 1.f);
        rand_vec(c0, m * n, 1.f);
        for (int form = 0; form < 3; form++) {
            /* form 0: abt (A[m,k], B[n,k]); 1: ab (A[m,k], B[k,n]); 2: atb (A[k,m], B[k,n]) */
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0, ab = 0;
                    for (int64_t kk = 0; kk < k; kk++) {
                        double av = form == 2 ? a[kk * m + i] : a[i * k + kk];
                        double bv = form == 0 ? b[j * k + kk] : b[kk * n + j];
                        s += av * bv;
                        ab += fabs(av * bv);
                    }
                    r[i * n + j] = s;
                    tol[i * n + j] = 3e-5 * ab + 1e-6;
                }
            for (int p = 0; p < 3; p++) {
                if (!path_ok[p]) continue;
                tl_ctx_set(PATHS[p], -1, NULL, -1);
                for (int acc = 0; acc < 2; acc++) {
                    if (acc) memcpy(c, c0, sizeof(float) * (size_t)(m * n));
                    else for (int64_t i = 0; i < m * n; i++) c[i] = NAN;
                    if (form == 0) af_gemm_abt(T_CTX, c, a, b, m, n, k, acc);
                    else if (form == 1) af_gemm_ab(T_CTX, c, a, b, m, n, k, acc);
                    else af_gemm_atb(T_CTX, c, a, b, m, n, k, acc);
                    if (acc) for (int64_t i = 0; i < m * n; i++) c[i] -= c0[i];
                    char what[128];
                    snprintf(what, sizeof what, "gemm_%s %s m=%lld n=%lld k=%lld acc=%d",
                             form == 0 ? "abt" : form == 1 ? "ab" : "atb", PATHS[p], (long long)m,
                             (long long)n, (long long)k, acc);
                    worst wst = {0, 0};
                    CHECK(check_vs(what, c, r, tol, m * n, &wst), "%s", what);
                }
            }
            tl_ctx_set("auto", -1, NULL, -1);
        }
        free(a); free(b); free(c); free(c0); free(r); free(tol);
    }
}

/* ---- bf16 precision of the packed path (tl_ctx_set(NULL, -1, "bf16", -1)) ---- */

/* bfloat16 round to nearest even (finite inputs), as VCVTNEPS2BF16. */
static double bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* y = x·Wᵀ (xwt = 1, W [out, in]) or dx = dy·W (xwt = 0, W [out, in], dy [n, out]) in bf16
 * against two f64 references: the exact product of the f32 operands, within the stated bound
 * (2^-8 + k 2^-24) sum |a||b|, and the product of the bf16-rounded operands, within f32
 * accumulation error only (k 2^-23 sum |a'||b'|) — the second fails if f32 were used instead. */
static void bf16_case(uint32_t type, int xwt, int64_t n, int64_t in, int64_t out) {
    float *wd = malloc(sizeof(float) * (size_t)(in * out));
    uint8_t *w = make_w(type, out, in, wd);
    int64_t k = xwt ? in : out, nc = xwt ? out : in;
    float *x = malloc(sizeof(float) * (size_t)(n * k)), *y = malloc(sizeof(float) * (size_t)(n * nc));
    float *y1 = malloc(sizeof(float) * (size_t)(n * nc)), *y2 = malloc(sizeof(float) * (size_t)(n * nc));
    double *r = malloc(sizeof(double) * (size_t)(n * nc)), *tol = malloc(sizeof(double) * (size_t)(n * nc));
    double *rb = malloc(sizeof(double) * (size_t)(n * nc)), *tolb = malloc(sizeof(double) * (size_t)(n * nc));
    rand_vec(x, n * k, 1.f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < nc; j++) {
            double s = 0, a = 0, sb = 0, ab = 0;
            for (int64_t kk = 0; kk < k; kk++) {
                float wv = xwt ? wd[j * in + kk] : wd[kk * in + j];
                double p = (double)x[t * k + kk] * wv, pb = bf16_round(x[t * k + kk]) * bf16_round(wv);
                s += p;
                a += fabs(p);
                sb += pb;
                ab += fabs(pb);
            }
            r[t * nc + j] = s;
            tol[t * nc + j] = (ldexp(1, -8) + (double)k * ldexp(1, -24)) * a + 1e-30;
            rb[t * nc + j] = sb;
            tolb[t * nc + j] = (double)k * ldexp(1, -23) * ab + 1e-30;
        }
    char what[160];
    snprintf(what, sizeof what, "bf16 %s %s n=%lld in=%lld out=%lld", xwt ? "xwt" : "dyw", af_type_name(type),
             (long long)n, (long long)in, (long long)out);
    CHECK(af_matmul_packed_path(T_CTX, n, in, out), "%s: takes the packed path", what);
    if (xwt) af_matmul_xwt(T_CTX, y, x, w, type, n, in, out, 0);
    else af_matmul_dyw(T_CTX, y, x, w, type, n, in, out, 0);
    worst w1 = {0, 0}, w2 = {0, 0};
    CHECK(check_vs(what, y, r, tol, n * nc, &w1), "%s: vs exact within (2^-8 + k 2^-24) sum|ab|", what);
    CHECK(check_vs(what, y, rb, tolb, n * nc, &w2), "%s: vs bf16-rounded operands within k 2^-23 sum|ab|", what);
    printf("  %s: err/bound %.3f (vs exact), %.3f (vs bf16 operands); rel %.2e\n", what, w1.ratio, w2.ratio, w1.rel);
    /* same bits whatever the thread count and the row blocking (the engine relies on it) */
    int th = af_ctx_n_threads(T_CTX);
    tl_ctx_set(NULL, 1, NULL, -1);
    if (xwt) af_matmul_xwt(T_CTX, y1, x, w, type, n, in, out, 0);
    else af_matmul_dyw(T_CTX, y1, x, w, type, n, in, out, 0);
    tl_ctx_set(NULL, th, NULL, -1);
    int64_t h = n / 2;
    if (xwt) {
        af_matmul_xwt(T_CTX, y2, x, w, type, h, in, out, 0);
        af_matmul_xwt(T_CTX, y2 + h * nc, x + h * k, w, type, n - h, in, out, 0);
    } else {
        af_matmul_dyw(T_CTX, y2, x, w, type, h, in, out, 0);
        af_matmul_dyw(T_CTX, y2 + h * nc, x + h * k, w, type, n - h, in, out, 0);
    }
    CHECK(!memcmp(y, y1, sizeof(float) * (size_t)(n * nc)), "%s: 1 thread == %d threads bitwise", what, th);
    if (h > AF_MM_DECODE_N) /* blocks of <= 4 rows take the f32 decode path by design */
        CHECK(!memcmp(y, y2, sizeof(float) * (size_t)(n * nc)), "%s: two row blocks == one call bitwise", what);
    /* accumulate adds the same product */
    for (int64_t i = 0; i < n * nc; i++) y1[i] = 1.0f;
    if (xwt) af_matmul_xwt(T_CTX, y1, x, w, type, n, in, out, 1);
    else af_matmul_dyw(T_CTX, y1, x, w, type, n, in, out, 1);
    /* y1 - 1 and y are the same sum taken in two orders (the accumulating kernel starts from 1, or adds
     * it last): each is within k 2^-24 sum|a'b'| of the exact sum of the bf16-rounded operands (tolb is
     * twice that), plus the rounding of the final add, so their difference is bounded by tolb plus a
     * few ulp of 1 + |y|. A bound relative to |y| alone fails where the products cancel. */
    double worst_acc = 0;
    for (int64_t i = 0; i < n * nc; i++) {
        double d = fabs((double)y1[i] - 1.0 - y[i]) / (1e-6 * (1 + fabs(y[i])) + tolb[i]);
        if (d > worst_acc) worst_acc = d;
    }
    CHECK(worst_acc <= 1, "%s: accumulate adds the product (worst %.3g of tol)", what, worst_acc);
    /* a NaN in one input row reaches that output row and no other */
    x[3 * k + 5] = NAN;
    if (xwt) af_matmul_xwt(T_CTX, y1, x, w, type, n, in, out, 0);
    else af_matmul_dyw(T_CTX, y1, x, w, type, n, in, out, 0);
    int nan_row = 1, nan_other = 0;
    for (int64_t j = 0; j < nc; j++) nan_row &= isnan(y1[3 * nc + j]) != 0;
    for (int64_t i = 0; i < n * nc; i++)
        if (i / nc != 3) nan_other |= isnan(y1[i]) != 0;
    CHECK(nan_row && !nan_other, "%s: NaN propagates to its row only", what);
    free(wd); free(w); free(x); free(y); free(y1); free(y2); free(r); free(tol); free(rb); free(tolb);
}

/* af_gemm_atb in bf16 (C[m, n] = A[k, m]ᵀ · B[k, n]: the LoRA gradients' shape, A packed from its
 * columns; on AMX tiles with n <= 32 formed as (Bᵀ·A)ᵀ, matmul.c atb_transposed): within the bounds
 * of bf16_case against the exact and the bf16-rounded products, bitwise the same on 1 thread, and
 * accumulated onto C: C0 + the product within k·2^-23·(sum|ab| + |C0|) of C0 + the product alone. */
static void bf16_atb_case(int64_t m, int64_t n, int64_t k) {
    float *a = malloc(sizeof(float) * (size_t)(k * m)), *b = malloc(sizeof(float) * (size_t)(k * n));
    float *c = malloc(sizeof(float) * (size_t)(m * n)), *c1 = malloc(sizeof(float) * (size_t)(m * n));
    double *r = malloc(sizeof(double) * (size_t)(m * n)), *tol = malloc(sizeof(double) * (size_t)(m * n));
    double *rb = malloc(sizeof(double) * (size_t)(m * n)), *tolb = malloc(sizeof(double) * (size_t)(m * n));
    rand_vec(a, k * m, 1.f);
    rand_vec(b, k * n, 1.f);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sx = 0, ax = 0, sb = 0, ab = 0;
            for (int64_t kk = 0; kk < k; kk++) {
                double p = (double)a[kk * m + i] * b[kk * n + j], pb = bf16_round(a[kk * m + i]) * bf16_round(b[kk * n + j]);
                sx += p, ax += fabs(p), sb += pb, ab += fabs(pb);
            }
            r[i * n + j] = sx, rb[i * n + j] = sb;
            tol[i * n + j] = (ldexp(1, -8) + (double)k * ldexp(1, -24)) * ax + 1e-30;
            tolb[i * n + j] = (double)k * ldexp(1, -23) * ab + 1e-30;
        }
    char what[120];
    snprintf(what, sizeof what, "bf16 gemm_atb m=%lld n=%lld k=%lld", (long long)m, (long long)n, (long long)k);
    CHECK(af_matmul_packed_path(T_CTX, m, k, n), "%s: takes the packed path", what);
    af_gemm_atb(T_CTX, c, a, b, m, n, k, 0);
    worst w1 = {0, 0}, w2 = {0, 0};
    CHECK(check_vs(what, c, r, tol, m * n, &w1), "%s: vs exact within (2^-8 + k 2^-24) sum|ab|", what);
    CHECK(check_vs(what, c, rb, tolb, m * n, &w2), "%s: vs bf16-rounded operands within k 2^-23 sum|ab|", what);
    int th = af_ctx_n_threads(T_CTX);
    tl_ctx_set(NULL, 1, NULL, -1);
    af_gemm_atb(T_CTX, c1, a, b, m, n, k, 0);
    tl_ctx_set(NULL, th, NULL, -1);
    CHECK(!memcmp(c, c1, sizeof(float) * (size_t)(m * n)), "%s: 1 thread == %d threads bitwise", what, th);
    for (int64_t i = 0; i < m * n; i++) c1[i] = 0.5f + (float)(i % 5);
    af_gemm_atb(T_CTX, c1, a, b, m, n, k, 1);
    double worst_acc = 0;
    for (int64_t i = 0; i < m * n; i++) {
        const double want = (double)(0.5f + (float)(i % 5)) + c[i];
        const double c0 = 0.5 + (double)(i % 5); /* the sums of C0 + products: k roundings of at most |C0| + sum|ab| */
        const double e = fabs(c1[i] - want) / (tolb[i] + (double)k * ldexp(1, -23) * c0 + ldexp(1, -22) * fabs(want));
        if (e > worst_acc) worst_acc = e;
    }
    CHECK(worst_acc <= 1, "%s: accumulated onto C (worst %.3g of the bound)", what, worst_acc);
    free(a), free(b), free(c), free(c1), free(r), free(tol), free(rb), free(tolb);
}

/* B packed once into bf16 panels (af_gp_pack_bf16_panels: the blocked attention's K and V) and used
 * for a range of it (af_gp_gemm_bf16_panels): bitwise the C of af_gp_gemm on the same sub-matrix, on
 * one thread; b_trans = 1 takes columns off .. off + n (whole panels), b_trans = 0 depths off .. off + k;
 * A by rows or (sak = m) by columns, onto C and accumulated. */
static void panels_case(int b_trans, int64_t m, int64_t n, int64_t k, int64_t off, int a_cols) {
    const int64_t n_all = b_trans ? off + n + 40 : n, k_all = b_trans ? k : off + k + 6, ldw = b_trans ? k + 3 : n + 5;
    const int64_t wrows = b_trans ? n_all : k_all;
    float *w = malloc(sizeof(float) * (size_t)(wrows * ldw)), *a = malloc(sizeof(float) * (size_t)(m * k));
    float *c1 = malloc(sizeof(float) * (size_t)(m * n)), *c2 = malloc(sizeof(float) * (size_t)(m * n));
    rand_vec(w, wrows * ldw, 1.f);
    rand_vec(a, m * k, 1.f);
    uint32_t *bp = af_malloc_aligned(sizeof(uint32_t) * (size_t)af_gp_bf16_panels_dwords(b_trans ? n_all : n, k_all));
    char what[160];
    snprintf(what, sizeof what, "bf16 panels b_trans=%d m=%lld n=%lld k=%lld off=%lld A by %s", b_trans, (long long)m,
             (long long)n, (long long)k, (long long)off, a_cols ? "columns" : "rows");
    CHECK(af_gp_pack_bf16_panels(T_CTX, bp, w, ldw, b_trans, b_trans ? n_all : n, k_all), "%s: packed", what);
    const int64_t sat = a_cols ? 1 : k, sak = a_cols ? m : 1; /* A(i, kk) = a[i·sat + kk·sak] */
    const float *wsub = w + off * ldw;
    for (int acc = 0; acc < 2; acc++) {
        for (int64_t i = 0; i < m * n; i++) c1[i] = c2[i] = acc ? 0.25f * (float)(i % 7) : 0.f;
        af_gp_gemm(T_CTX, c1, n, a, sat, sak, wsub, AF_TYPE_F32, ldw * (int64_t)sizeof(float), b_trans, m, n, k, acc,
                   1);
        const uint32_t *b0 = b_trans ? bp + off / 32 * (k_all / 2) * 32 : bp; /* b_trans: panels from column off */
        const bool ok = af_gp_gemm_bf16_panels(T_CTX, c2, n, a, sat, sak, b0, k_all / 2 * 32, b_trans ? 0 : off, m, n,
                                               k, acc);
        CHECK(ok && !memcmp(c1, c2, sizeof(float) * (size_t)(m * n)), "%s acc=%d: bitwise af_gp_gemm's C", what, acc);
    }
    af_free_aligned(bp);
    free(w); free(a); free(c1); free(c2);
}

static void test_bf16(void) {
    CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "f32"), "default matmul precision is f32");
    CHECK(tl_ctx_set(NULL, -1, "fp8", -1) == AF_ERR_INVALID_ARG, "unknown precision refused");
    if (path_ok[1]) { /* the f32 fallback: bf16 is refused on the AVX2 path and f32 stays in use */
        tl_ctx_set("avx2", -1, NULL, -1);
        CHECK(tl_ctx_set(NULL, -1, "bf16", -1) == AF_ERR_UNSUPPORTED, "bf16 refused on the avx2 path");
        CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "f32"), "precision stays f32 after a refusal");
        tl_ctx_set("auto", -1, NULL, -1);
    }
    if (tl_ctx_set(NULL, -1, "bf16", -1) != AF_OK) {
        CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "f32"), "precision stays f32 without AVX512_BF16");
        tl_skip("bf16 matmul: %s", af_last_error());
        return;
    }
    CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "bf16"), "precision reads back bf16");
    static const uint32_t BT[] = {AF_TYPE_F32, AF_TYPE_F16, AF_TYPE_Q4_1, AF_TYPE_Q8_0, AF_TYPE_Q4_K, AF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof BT / sizeof BT[0]; i++) {
        bf16_case(BT[i], 1, 133, 512, 200);
        bf16_case(BT[i], 0, 133, 512, 256);
        bf16_case(BT[i], 1, 9, 256, 300);
    }
    /* the LoRA gradients' products (dB = dyᵀ·t, dA = tᵀ·x): full and partial 8-row micro-panels */
    bf16_atb_case(576, 16, 300);
    bf16_atb_case(1000, 16, 1030); /* more rows than one task's block */
    bf16_atb_case(13, 576, 300);
    bf16_atb_case(16, 200, 1030);
    /* depths over one chunk of the AMX tiles' products with B packed whole (KC_AMX = 768: 768 + 768 + 64),
     * more rows than one task's block */
    bf16_case(AF_TYPE_Q4_1, 1, 200, 1600, 96);
    bf16_case(AF_TYPE_Q8_0, 0, 200, 96, 1600);
    /* B packed once, used in ranges (the blocked attention's shapes: 64-row blocks, head dim 64) */
    panels_case(1, 64, 192, 64, 128, 0);
    panels_case(1, 37, 64, 64, 0, 0);
    panels_case(0, 64, 64, 130, 64, 0);
    panels_case(0, 64, 64, 900, 192, 1);
    panels_case(0, 200, 40, 512, 0, 1);
    /* K not a multiple of the 32-wide conversion step / of the K-chunk (f32 operands only) */
    bf16_case(AF_TYPE_F32, 1, 133, 330, 200);
    bf16_case(AF_TYPE_F32, 0, 77, 256, 330);
    /* a context on a path without bf16 cannot have bf16; derived with f32 it is exact up to f32
     * rounding */
    if (path_ok[1]) {
        CHECK(tl_ctx_set("avx2", -1, NULL, -1) == AF_ERR_UNSUPPORTED, "bf16 on the avx2 path refused");
        tl_ctx_set("avx2", -1, "f32", -1);
        CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "f32"), "bf16 not in use on the avx2 path");
        int64_t m = 40, k = 256, n = 300;
        float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(n * k));
        float *c = malloc(sizeof(float) * (size_t)(m * n));
        rand_vec(a, m * k, 1.f);
        rand_vec(b, n * k, 1.f);
        af_gemm_abt(T_CTX, c, a, b, m, n, k, 0);
        double worst_r = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, ab = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    s += (double)a[i * k + kk] * b[j * k + kk];
                    ab += fabs((double)a[i * k + kk] * b[j * k + kk]);
                }
                double e = fabs(c[i * n + j] - s) / (3e-5 * ab + 1e-6);
                if (e > worst_r) worst_r = e;
            }
        CHECK(worst_r <= 1, "avx2 fallback with bf16 requested is f32-exact (worst %.3g of tol)", worst_r);
        free(a); free(b); free(c);
        tl_ctx_set("auto", -1, NULL, -1);
    }
    tl_ctx_set(NULL, -1, "f32", -1);
}

/* ---- column blocks of the packed GEMM: products whose packed B exceeds MAX_B ---- */

/* One product of kind `kind` on T_CTX with the packed-B cap `cap` (af_gp_set_max_b; 0: the default
 * 64 MiB) into c (accumulate: onto its contents). W [out, in] of `type`; kinds: 0 xwt
 * (c[n, out] = x[n, in] W^T), 1 dyw (c[n, in] = dy[n, out] W), 2 gemm_ab and 3 gemm_atb (f32 W
 * read as B[in, out]; x or its transpose xt as A): c[n, out]. */
static void blk_product(int kind, size_t cap, float *c, const float *x, const float *xt, const float *dy,
                        const void *w, uint32_t type, int64_t n, int64_t in, int64_t out, int acc) {
    af_gp_set_max_b(T_CTX, cap);
    if (kind == 0) af_matmul_xwt(T_CTX, c, x, w, type, n, in, out, acc);
    else if (kind == 1) af_matmul_dyw(T_CTX, c, dy, w, type, n, in, out, acc);
    else if (kind == 2) af_gemm_ab(T_CTX, c, x, (const float *)w, n, out, in, acc);
    else af_gemm_atb(T_CTX, c, xt, (const float *)w, n, out, in, acc);
    af_gp_set_max_b(T_CTX, 0);
}

/* The packed-path decision of kind's product (as matmul.c and af_matmul_rows take it). */
static int blk_packed(int kind, int64_t n, int64_t in, int64_t out) {
    return kind == 1 ? af_matmul_packed_path(T_CTX, n, out, in) : af_matmul_packed_path(T_CTX, n, in, out);
}

/* One (type, kind, shape) case on the current context: with the cap lowered to `cap` (below this
 * product's packed B), the product is blocked (projection-shaped, or vocabulary-shaped in bf16:
 * `blocked`) and then bitwise equal to one packed call (default cap), or it stays on the panel
 * path (vocabulary-shaped in f32)
 * and is bitwise the panel result; either way (f32 precision) within the f32 tolerance of the
 * panel path and of the f64 reference; also with accumulate. */
static void blk_case(const char *pname, uint32_t type, int kind, int64_t n, int64_t in, int64_t out, size_t cap,
                     bool blocked) {
    int64_t nc = kind == 1 ? in : out, kd = kind == 1 ? out : in; /* output columns, depth */
    float *wd = malloc(sizeof(float) * (size_t)(out * in));
    uint8_t *w = make_w(type, out, in, wd);
    float *x = malloc(sizeof(float) * (size_t)(n * in)), *xt = malloc(sizeof(float) * (size_t)(n * in));
    float *dy = malloc(sizeof(float) * (size_t)(n * out));
    rand_vec(x, n * in, 1.f);
    rand_vec(dy, n * out, 1.f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < in; k++) xt[k * n + t] = x[t * in + k];
    double *ref = malloc(sizeof(double) * (size_t)(n * nc)), *tol = malloc(sizeof(double) * (size_t)(n * nc));
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < nc; j++) {
            double s = 0, ab = 0;
            for (int64_t k = 0; k < kd; k++) {
                double av = kind == 1 ? dy[t * out + k] : x[t * in + k];
                double bv = kind == 0 ? wd[j * in + k] : kind == 1 ? wd[k * in + j] : wd[k * out + j];
                s += av * bv;
                ab += fabs(av * bv);
            }
            ref[t * nc + j] = s;
            tol[t * nc + j] = 3e-5 * ab + 1e-6;
        }
    const bool exact = !strcmp(af_ctx_matmul_precision(T_CTX), "f32");
    size_t cnt = (size_t)(n * nc), bytes = sizeof(float) * cnt;
    float *cb = malloc(bytes), *c1 = malloc(bytes), *cp = malloc(bytes), *c0 = malloc(bytes);
    double *tolp = malloc(sizeof(double) * cnt);
    static const char *KINDS[] = {"xwt", "dyw", "gemm_ab", "gemm_atb"};
    char what[200];
    snprintf(what, sizeof what, "%s %s %s n=%lld in=%lld out=%lld cap=%zu", KINDS[kind], pname,
             af_type_name(type), (long long)n, (long long)in, (long long)out, cap);
    CHECK((double)af_gp_packed_b_floats(kd, nc) * sizeof(float) > (double)cap, "%s: B over the cap", what);
    af_gp_set_max_b(T_CTX, cap);
    int on_packed = blk_packed(kind, n, in, out);
    af_gp_set_max_b(T_CTX, 4096); /* no block of B fits: the panel path */
    int on_panel = !blk_packed(kind, n, in, out);
    af_gp_set_max_b(T_CTX, 0);
    CHECK(on_packed == (int)blocked && on_panel, "%s: %s (packed path %d)", what,
          blocked ? "column-blocked packed path" : "stays on the panel path", on_packed);
    CHECK(blk_packed(kind, n, in, out), "%s: one packed call under the default cap", what);
    for (int acc = 0; acc < 2; acc++) {
        rand_vec(c0, (int64_t)cnt, 1.f);
        memcpy(cb, c0, bytes);
        memcpy(c1, c0, bytes);
        memcpy(cp, c0, bytes);
        blk_product(kind, cap, cb, x, xt, dy, w, type, n, in, out, acc);
        blk_product(kind, 0, c1, x, xt, dy, w, type, n, in, out, acc);
        blk_product(kind, 4096, cp, x, xt, dy, w, type, n, in, out, acc);
        if (acc)
            for (size_t i = 0; i < cnt; i++) cb[i] -= c0[i], c1[i] -= c0[i], cp[i] -= c0[i];
        if (blocked)
            CHECK(!memcmp(cb, c1, bytes), "%s acc=%d: column blocks bitwise equal to one packed call", what, acc);
        else
            CHECK(!memcmp(cb, cp, bytes), "%s acc=%d: bitwise the panel path's result", what, acc);
        if (!exact) continue; /* bf16 operands: their bounds are checked in bf16_case */
        /* blocked vs panel within the f32 tolerance (twice: both are within it of the reference) */
        double *pref = malloc(sizeof(double) * cnt);
        for (size_t i = 0; i < cnt; i++) pref[i] = cp[i], tolp[i] = 2 * tol[i];
        worst w1 = {0, 0}, w2 = {0, 0};
        CHECK(check_vs(what, cb, pref, tolp, (int64_t)cnt, &w1), "%s acc=%d: vs the panel path", what, acc);
        CHECK(check_vs(what, cb, ref, tol, (int64_t)cnt, &w2), "%s acc=%d: vs f64 reference", what, acc);
        free(pref);
    }
    free(wd); free(w); free(x); free(xt); free(dy); free(ref); free(tol); free(cb); free(c1); free(cp); free(c0);
    free(tolp);
}

static void test_packed_blocks(void) {
    for (int p = 1; p < 3; p++) { /* the paths with the packed micro-kernel */
        if (!path_ok[p]) continue;
        for (int prec = 0; prec < 2; prec++) {
            if (tl_ctx_set(PATHS[p], -1, prec ? "bf16" : "f32", -1) != AF_OK) continue; /* bf16: AVX512_BF16 */
            char pname[32];
            snprintf(pname, sizeof pname, "%s/%s", PATHS[p], prec ? "bf16" : "f32");
            /* routing at model shapes under the default 64 MiB cap (xwt: n, in, out; the dyw of
             * W[out, in] is decided on (n, out, in)); tokens n = 512 */
            static const int64_t SH[][3] = {
                {3072, 8192, 1}, {8192, 3072, 1},   /* Llama-3.2-3B MLP up/gate, down: 96 MiB, blocked */
                {4096, 14336, 1}, {14336, 4096, 1}, /* Llama-3.1-8B MLP: 224 MiB, blocked */
                {2048, 8192, 1},                    /* Llama-3.2-1B MLP: exactly 64 MiB, one block */
                {576, 1536, 1},                     /* SmolLM2-135M MLP */
                /* LM heads (vocabulary-shaped): the panel path in f32, blocks of the packed path
                 * in bf16 (want 2) */
                {576, 49152, 2},                    /* SmolLM2-135M: 113 MiB (bf16 57) */
                {640, 262144, 2},                   /* Gemma 3 270M: 671 MiB (bf16 335) */
                {3072, 49152, 2}, {4096, 128256, 2} /* 16x / 31x the hidden size */
            };
            for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++) {
                int64_t in = SH[i][0], out = SH[i][1];
                int want = SH[i][2] == 2 ? prec : (int)SH[i][2];
                CHECK(af_matmul_packed_path(T_CTX, 512, in, out) == want &&
                          af_matmul_packed_path(T_CTX, 512, out, in) == want,
                      "%s: %lld x %lld (xwt and dyw) %s", pname, (long long)in, (long long)out,
                      want ? "on the packed path" : "on the panel path");
            }
            CHECK(!af_matmul_packed_path(T_CTX, 4, 3072, 8192), "%s: decode (n = 4) not on the packed path", pname);
            /* (xwt with 137 rows: two row blocks, so B is packed whole, not streamed: test_streamed)
             * xwt and the f32 GEMMs: 1000 columns of depth 512, 2 MiB of packed B (bf16: 1 MiB)
             * under a 1 MiB cap (bf16: 512 KiB): 2 blocks, the last one ragged (488 = 15x32 + 8
             * columns). dyw: 1024 columns of depth 1000 (4 MB, bf16 2 MB) under 1 MiB: blocks of
             * 256 columns (of W's rows: a block boundary of every type). On AMX tiles the one bf16
             * call of xwt runs its 32 panels in two groups of 16 (gemm_packed.c AMX_B_GROUP, 512 KiB of
             * B chunks), each block in one group: also the check that the groups keep the bits */
            size_t cap = prec ? (512u << 10) : (1u << 20);
            static const uint32_t BT[] = {AF_TYPE_F32, AF_TYPE_Q4_0, AF_TYPE_Q4_K};
            for (size_t t = 0; t < sizeof BT / sizeof BT[0]; t++) {
                blk_case(pname, BT[t], 0, 137, 512, 1000, cap, true);
                blk_case(pname, BT[t], 1, 37, 1024, 1000, 1u << 20, true);
            }
            blk_case(pname, AF_TYPE_F32, 2, 37, 512, 1000, cap, true);
            blk_case(pname, AF_TYPE_F32, 3, 37, 512, 1000, cap, true);
            /* vocabulary-shaped (out = 17 x in): packed B 17 MiB over a 12 MiB cap that would hold
             * a block (the aspect rule decides): the panel path in f32, xwt and dyw; in bf16 the
             * packed path (8.5 MiB: one block) */
            blk_case(pname, AF_TYPE_Q4_0, 0, 137, 512, 8704, 12u << 20, prec);
            blk_case(pname, AF_TYPE_Q4_0, 1, 17, 512, 8704, 12u << 20, prec);
            if (prec) /* bf16 under a 1 MiB cap: xwt in column blocks (9, the last ragged); dyw, whose
                       * 256 columns of depth 8704 are over it, in depth blocks of 1024 (9, the last 512) */
                for (size_t t = 0; t < sizeof BT / sizeof BT[0]; t++) {
                    blk_case(pname, BT[t], 0, 137, 512, 8704, 1u << 20, true);
                    blk_case(pname, BT[t], 1, 37, 512, 8704, 1u << 20, true);
                }
        }
    }
    tl_ctx_set("auto", -1, "f32", -1);
}

/* Streamed B (gemm_packed.c gp_streams): x·Wᵀ with at most 128 rows packs each chunk of B in the
 * task that uses it instead of packing B whole first. Rows 0..m-1 of a product of 200 rows (two
 * row blocks: B packed whole) must equal the product of those m rows alone (streamed) bit for bit:
 * every type the packers read, f32 and bf16 products, depth over one chunk and ragged (a last
 * panel of 8 columns), onto C and accumulated. */
static void test_streamed(void) {
    static const uint32_t TY[] = {AF_TYPE_F32, AF_TYPE_Q4_0, AF_TYPE_Q4_1, AF_TYPE_Q4_K, AF_TYPE_Q8_0};
    static const int64_t SH[][2] = {{512, 1000}, {768, 200}, {256, 40}}; /* in, out */
    static const int64_t MS[] = {37, 128};
    const int64_t M = 200;
    for (int p = 1; p < 3; p++) {
        if (!path_ok[p]) continue;
        for (int prec = 0; prec < 2; prec++) {
            if (tl_ctx_set(PATHS[p], -1, prec ? "bf16" : "f32", -1) != AF_OK) continue;
            for (size_t t = 0; t < sizeof TY / sizeof TY[0]; t++)
                for (size_t sh = 0; sh < sizeof SH / sizeof SH[0]; sh++) {
                    const int64_t in = SH[sh][0], out = SH[sh][1];
                    float *wd = malloc(sizeof(float) * (size_t)(out * in));
                    uint8_t *w = make_w(TY[t], out, in, wd);
                    float *x = malloc(sizeof(float) * (size_t)(M * in));
                    float *c0 = malloc(sizeof(float) * (size_t)(M * out)), *cb = malloc(sizeof(float) * (size_t)(M * out));
                    float *cs = malloc(sizeof(float) * (size_t)(M * out));
                    rand_vec(x, M * in, 1.f);
                    rand_vec(c0, M * out, 1.f);
                    CHECK(af_matmul_packed_path(T_CTX, M, in, out) && af_matmul_packed_path(T_CTX, MS[0], in, out),
                          "%s/%s %s %lldx%lld: on the packed path", PATHS[p], prec ? "bf16" : "f32",
                          af_type_name(TY[t]), (long long)in, (long long)out);
                    for (int acc = 0; acc < 2; acc++) {
                        memcpy(cb, c0, sizeof(float) * (size_t)(M * out));
                        af_matmul_xwt(T_CTX, cb, x, w, TY[t], M, in, out, acc);
                        for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
                            const int64_t m = MS[mi];
                            memcpy(cs, c0, sizeof(float) * (size_t)(m * out));
                            af_matmul_xwt(T_CTX, cs, x, w, TY[t], m, in, out, acc);
                            CHECK(!memcmp(cs, cb, sizeof(float) * (size_t)(m * out)),
                                  "%s/%s %s in=%lld out=%lld acc=%d: %lld rows streamed bitwise rows of B packed whole",
                                  PATHS[p], prec ? "bf16" : "f32", af_type_name(TY[t]), (long long)in, (long long)out,
                                  acc, (long long)m);
                        }
                    }
                    free(wd); free(w); free(x); free(c0); free(cb); free(cs);
                }
        }
    }
    tl_ctx_set("auto", -1, "f32", -1);
}

/* Parallel regions the pool of T_CTX has run so far. */
static uint64_t regions_now(void) {
    af_pool_stats st;
    af_ctx_pool_stats(T_CTX, &st);
    return st.regions;
}

/* af_matmul_xwt_parts: every product bitwise as its own af_matmul_xwt call, on every path and
 * decode mode (f32 fused, dequant + dot, int8 activations), for parts of mixed types, parts of a
 * second input, a part of 6 rows (not the decode regime: a call of its own) and 20 parts (two
 * regions); with 2 threads the decode parts of one call are ONE parallel region. */
static void test_parts(void) {
    enum { IN = 512, NP = 20 };
    static const uint32_t PT[] = {AF_TYPE_Q4_1, AF_TYPE_Q6_K, AF_TYPE_Q8_0, AF_TYPE_Q4_K, AF_TYPE_F16};
    static const int64_t PO[] = {512, 72, 40, 512, 130};
    uint8_t *w[NP];
    float *wd = malloc(sizeof(float) * (size_t)IN * 512);
    float *x = malloc(sizeof(float) * 6 * IN * 2);
    float *ya[NP], *yb[NP];
    rand_vec(x, 6 * IN * 2, 1.0f);
    for (int i = 0; i < NP; i++) {
        w[i] = make_w(PT[i % 5], PO[i % 5], IN, wd);
        ya[i] = malloc(sizeof(float) * 6 * 512);
        yb[i] = malloc(sizeof(float) * 6 * 512);
    }
    for (int p = 0; p < 3; p++) {
        if (!path_ok[p]) continue;
        tl_ctx_set(PATHS[p], 2, NULL, -1);
        for (int mode = 0; mode < 3; mode++) {
            if (mode > 0 && p == 0) continue;
            af_ctx_set_hook(T_CTX, AF_CTX_FUSED_DECODE, mode != 1);
            tl_ctx_set(NULL, -1, NULL, mode == 2);
            for (int64_t n = 1; n <= 4; n++) {
                for (int np = 1; np <= NP; np += np < 5 ? 1 : 15) {
                    af_mm_part parts[NP];
                    uint64_t lone = 0; /* regions of the 6-row part's own call */
                    for (int i = 0; i < np; i++) {
                        /* part 3 reads the second input; part 4 has 6 rows when n == 4 */
                        const int64_t rows = i == 4 && n == 4 ? 6 : n;
                        parts[i] = (af_mm_part){.y = ya[i], .x = x + (i == 3 ? 6 * IN : 0), .w = w[i],
                                                .type = PT[i % 5], .n = rows, .in = IN, .out = PO[i % 5]};
                        for (int64_t k = 0; k < rows * PO[i % 5]; k++) ya[i][k] = yb[i][k] = NAN;
                        const uint64_t r = regions_now();
                        af_matmul_xwt(T_CTX, yb[i], parts[i].x, w[i], PT[i % 5], rows, IN, PO[i % 5], 0);
                        if (rows > 4) lone = regions_now() - r;
                    }
                    const uint64_t r0 = regions_now();
                    af_matmul_xwt_parts(T_CTX, parts, np);
                    const uint64_t regions = regions_now() - r0;
                    int same = 1;
                    for (int i = 0; i < np; i++)
                        same &= memcmp(ya[i], yb[i], sizeof(float) * (size_t)(parts[i].n * parts[i].out)) == 0;
                    CHECK(same, "xwt_parts %s %s n=%lld %d parts: each product bitwise as alone", PATHS[p], MODES[mode],
                          (long long)n, np);
                    /* decode parts: one region per 16 (each chunk's work is above the threshold),
                     * plus the 6-row part's own */
                    const int ndec = np - (n == 4 && np >= 5);
                    const uint64_t want = (uint64_t)((ndec + 15) / 16) + lone;
                    CHECK(regions == want, "xwt_parts %s %s n=%lld %d parts: %llu parallel regions (want %llu)",
                              PATHS[p], MODES[mode], (long long)n, np, (unsigned long long)regions,
                              (unsigned long long)want);
                }
            }
            /* the hook off: one call per product (q, k and v of 512 x 512: three regions) */
            af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, 0);
            af_mm_part q3[3];
            for (int i = 0; i < 3; i++)
                q3[i] = (af_mm_part){.y = ya[i], .x = x, .w = w[5 * i], .type = PT[0], .n = 1, .in = IN, .out = 512};
            uint64_t r0 = regions_now();
            af_matmul_xwt_parts(T_CTX, q3, 3);
            const uint64_t off = regions_now() - r0;
            af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, 1);
            r0 = regions_now();
            af_matmul_xwt_parts(T_CTX, q3, 3);
            const uint64_t on = regions_now() - r0;
            CHECK(off == 3 && on == 1, "xwt_parts %s %s: three 512 x 512 products: %llu regions alone, %llu together",
                  PATHS[p], MODES[mode], (unsigned long long)off, (unsigned long long)on);
        }
        af_ctx_set_hook(T_CTX, AF_CTX_FUSED_DECODE, 1);
        tl_ctx_set(NULL, -1, NULL, 0);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    for (int i = 0; i < NP; i++) {
        free(w[i]);
        free(ya[i]);
        free(yb[i]);
    }
    free(wd);
    free(x);
}

/* af_mm_part.exact (mixed decode, kernels/ctx.h int8_roles): under a context with int8
 * activations, a part marked exact has the bits of the call under the same context without them,
 * an unmarked part those of the int8 call (the two differ), grouped or each its own region. */
static void test_parts_exact(void) {
    enum { IN = 512, OUT = 96 };
    float *wd = malloc(sizeof(float) * IN * OUT), x[2 * IN], ye[2 * OUT], yq[2 * OUT], y0[2 * OUT], y1[2 * OUT];
    uint8_t *w = make_w(AF_TYPE_Q4_1, OUT, IN, wd);
    rand_vec(x, 2 * IN, 1.0f);
    for (int p = 1; p < 3; p++) {
        if (!path_ok[p]) continue;
        tl_ctx_set(PATHS[p], 2, NULL, 0);
        af_matmul_xwt(T_CTX, ye, x, w, AF_TYPE_Q4_1, 2, IN, OUT, 0);
        tl_ctx_set(NULL, -1, NULL, 1);
        af_matmul_xwt(T_CTX, yq, x, w, AF_TYPE_Q4_1, 2, IN, OUT, 0);
        CHECK(memcmp(ye, yq, sizeof ye) != 0, "%s: the int8 product differs from the exact one", PATHS[p]);
        for (int groups = 0; groups < 2; groups++) {
            af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, groups);
            af_mm_part parts[2] = {{.y = y0, .x = x, .w = w, .type = AF_TYPE_Q4_1, .n = 2, .in = IN, .out = OUT, .exact = 1},
                                   {.y = y1, .x = x, .w = w, .type = AF_TYPE_Q4_1, .n = 2, .in = IN, .out = OUT}};
            af_matmul_xwt_parts(T_CTX, parts, 2);
            CHECK(!memcmp(y0, ye, sizeof ye) && !memcmp(y1, yq, sizeof yq),
                  "%s groups=%d: exact part == exact call, int8 part == int8 call (bitwise)", PATHS[p], groups);
        }
        af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, 1);
        tl_ctx_set(NULL, -1, NULL, 0);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    free(w);
    free(wd);
}

/* ops.decode_f32 of one token over a row range (rows in pairs sharing x on the AVX2 path) ==
 * the rows one call each (one row: the single-row kernel), bitwise, for every block type, odd and
 * even ranges and both accumulate modes. */
static void test_decode_rows(void) {
    enum { IN = 512, OUT = 37 };
    float *wd = malloc(sizeof(float) * IN * OUT), x[IN], ya[OUT], yb[OUT];
    rand_vec(x, IN, 1.0f);
    for (int p = 0; p < 3; p++) {
        if (!path_ok[p]) continue;
        tl_ctx_set(PATHS[p], -1, NULL, -1);
        const af_mm_ops *ops = T_CTX->k->mm;
        if (!ops->decode_f32) continue;
        for (int ti = 0; ti < NTYPES; ti++) {
            const uint32_t type = TYPES[ti];
            const int64_t rb = (int64_t)af_row_bytes(type, IN);
            uint8_t *w = make_w(type, OUT, IN, wd);
            for (int acc = 0; acc < 2; acc++) {
                rand_vec(ya, OUT, 1.0f);
                memcpy(yb, ya, sizeof ya);
                if (!ops->decode_f32(type, w, rb, 3, OUT, x, IN, 1, ya, OUT, acc)) break;
                for (int64_t o = 3; o < OUT; o++) ops->decode_f32(type, w, rb, o, o + 1, x, IN, 1, yb, OUT, acc);
                CHECK(memcmp(ya, yb, sizeof ya) == 0,
                      "decode_f32 %s %s acc=%d: rows 3..%d in one call == one row a call", PATHS[p],
                      af_type_name(type), acc, OUT);
            }
            free(w);
        }
    }
    tl_ctx_set("auto", -1, NULL, -1);
    free(wd);
}

/* ops.decode (int8 activations) of every SIMD path against the scalar int8 reference of the
 * contract (matmul_internal.h): x quantized here per 32-block (d = max|x|/127, q = round(x/d)),
 * y_ref[t, o] = sum_k W[o, k] * d_t(k) * q_t(k) in double with W from af_dequantize_row. The
 * integer dot products are exact, so only f32 rounding of the scales and sums separates the
 * kernel from the reference: |err| <= 1e-5 * sum_k |W d q| + 1e-6. Odd block counts (the 512-bit
 * kernel's half pair), rows of <= and > 512 bytes (its paired and single-row passes), an odd row
 * range (its single-row tail), n = 1..4, both accumulate modes. */
static void test_decode_int8_ref(void) {
    enum { OUT = 37, O0 = 2, NMAX = AF_MM_DECODE_N };
    for (int p = 1; p < 3; p++) {
        if (!path_ok[p]) continue;
        tl_ctx_set(PATHS[p], -1, NULL, -1);
        const af_mm_ops *ops = T_CTX->k->mm;
        if (!ops->decode) continue;
        double wmax = 0;
        for (int tc = 0; tc < 2 * NTYPES; tc++) {
            const uint32_t type = TYPES[tc / 2];
            const int64_t bs = (int64_t)af_type_block_size(type);
            if (type == AF_TYPE_F32 || type == AF_TYPE_F16 || type == AF_TYPE_BF16 || type == AF_TYPE_NF4) continue;
            const int64_t in = bs == 256 ? 768 * (1 + tc % 2) : tc % 2 ? 928 : 416, nb32 = in / 32, nb16 = in / 16;
            const int64_t rb = (int64_t)af_row_bytes(type, in);
            float *wd = malloc(sizeof(float) * (size_t)(in * OUT)), *x = malloc(sizeof(float) * (size_t)(NMAX * in));
            float *d = malloc(sizeof(float) * (size_t)(NMAX * nb32)), *sq = malloc(sizeof(float) * (size_t)(NMAX * nb16));
            int8_t *q = malloc((size_t)(NMAX * in));
            uint8_t *w = make_w(type, OUT, in, wd);
            rand_vec(x, NMAX * in, 1.0f);
            for (int64_t t = 0; t < NMAX; t++)
                for (int64_t b = 0; b < nb32; b++) {
                    float amax = 0;
                    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[t * in + 32 * b + j]));
                    const float db = amax / 127.f, id = amax > 0 ? 127.f / amax : 0.f;
                    d[t * nb32 + b] = db;
                    for (int g = 0; g < 2; g++) {
                        int s = 0;
                        for (int j = 16 * g; j < 16 * g + 16; j++) {
                            int v = (int)roundf(x[t * in + 32 * b + j] * id);
                            v = v > 127 ? 127 : v < -127 ? -127 : v;
                            q[t * in + 32 * b + j] = (int8_t)v;
                            s += v;
                        }
                        sq[t * nb16 + 2 * b + g] = db * (float)s;
                    }
                }
            const af_mm_xq xq = {.q = q, .d = d, .sq = sq, .in = in, .nb32 = nb32, .nb16 = nb16};
            for (int64_t n = 1; n <= NMAX; n++)
                for (int acc = 0; acc < 2; acc++) {
                    float y[NMAX * OUT], y0[NMAX * OUT];
                    rand_vec(y0, NMAX * OUT, 1.0f);
                    memcpy(y, y0, sizeof y);
                    if (!CHECK(ops->decode(type, w, rb, O0, OUT, &xq, n, y, OUT, acc), "%s decode %s handled", PATHS[p],
                               af_type_name(type)))
                        break;
                    int bad = 0;
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t o = 0; o < OUT; o++) {
                            double ref = 0, mag = 0;
                            for (int64_t k = 0; k < in; k++) {
                                double v = (double)wd[o * in + k] * d[t * nb32 + k / 32] * q[t * in + k];
                                ref += v;
                                mag += fabs(v);
                            }
                            if (o < O0) ref = 0; /* rows outside the range keep their value */
                            if (acc || o < O0) ref += y0[t * OUT + o];
                            double err = fabs((double)y[t * OUT + o] - ref), tol = 1e-5 * mag + 1e-6;
                            if (err / tol > wmax) wmax = err / tol;
                            bad += !(err <= tol);
                        }
                    CHECK(!bad, "%s int8 decode %s in=%lld n=%lld acc=%d == scalar int8 reference (%d outputs off)",
                          PATHS[p], af_type_name(type), (long long)in, (long long)n, acc, bad);
                }
            free(w);
            free(wd);
            free(x);
            free(d);
            free(sq);
            free(q);
        }
        printf("%s int8 decode vs scalar int8 reference: wmax err/tol %.3f\n", PATHS[p], wmax);
    }
    tl_ctx_set("auto", -1, NULL, -1);
}

/* af_ctx: parameters checked once at creation, read back by the getters */
static void test_ctx_api(void) {
    af_ctx *c = NULL;
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.kernel_path = "sse9";
    CHECK(af_ctx_new(&p, &c) == AF_ERR_INVALID_ARG && c == NULL, "unknown kernel path refused");
    af_ctx_params_default(&p);
    p.matmul_precision = "fp8";
    CHECK(af_ctx_new(&p, &c) == AF_ERR_INVALID_ARG && c == NULL, "unknown matmul precision refused");
    af_ctx_params_default(&p);
    p.kernel_path = "scalar";
    p.n_threads = 1;
    p.int8_activations = 1;
    if (CHECK(af_ctx_new(&p, &c) == AF_OK, "scalar context: %s", af_last_error())) {
        CHECK(af_ctx_n_threads(c) == 1 && !strcmp(af_ctx_kernel_path(c), "scalar") &&
                  !strcmp(af_ctx_matmul_precision(c), "f32") && af_ctx_int8_activations(c) == 1 &&
                  strstr(af_ctx_describe(c), "-> scalar") != NULL,
              "getters read back the parameters (%s)", af_ctx_describe(c));
        af_ctx_params q;
        af_ctx_get_params(c, &q);
        CHECK(q.n_threads == 1 && !strcmp(q.kernel_path, "scalar") && q.int8_activations == 1,
              "af_ctx_get_params round trip");
        p.matmul_precision = "bf16";
        af_ctx *b = NULL;
        CHECK(af_ctx_new(&p, &b) == AF_ERR_UNSUPPORTED && b == NULL, "bf16 refused on the scalar path");
    }
    af_ctx_free(c);
    af_ctx_free(NULL);
    CHECK(af_ctx_new(NULL, &c) == AF_OK && af_ctx_n_threads(c) >= 1, "default context");
    af_ctx_free(c);
}

int main(void) {
    for (int p = 0; p < 3; p++) {
        path_ok[p] = tl_ctx_set(PATHS[p], -1, NULL, -1) == AF_OK;
        if (!path_ok[p]) tl_skip("kernel path %s: not supported by this CPU", PATHS[p]);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    printf("cpu: %s\n", af_ctx_describe(T_CTX));
    test_gemm();
    test_types();
    test_packed_blocks();
    test_streamed();
    test_bf16();
    test_ctx_api();
    test_parts();
    test_parts_exact();
    test_decode_rows();
    test_decode_int8_ref();
    return tl_finish("test_matmul");
}
