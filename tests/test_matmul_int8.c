/*
 * test_matmul_int8.c — the int8 frozen products (matmul precision "int8", src/kernels/cpu/gemm_int8.h)
 * on CPUs with AVX512_VNNI, through af_matmul_xwt (y = x·Wᵀ) and af_matmul_dyw (dx = dy·W):
 *  - against an emulation of the method in this file (scales per chunk of depth, round-half-even
 *    quantization, exact integer sums per chunk, f32 scaling and summation in the kernel's order): equal
 *    bit for bit, so a wrong layout, offset correction, scale or chunking fails;
 *  - against the exact product in f64, within the error bound of the quantization
 *    sum_k (|a|·eb/2 + ea/2·|b| + ea·eb/4) + f32 rounding (ea, eb the two operands' steps);
 *  - bitwise the same for 1 thread and for several, and for two row blocks and one call;
 *    accumulate adds; a NaN in an input row reaches that output row only;
 *  - the fused form (af_gp_gemm_fused, the MLP's epilogue) gives the same bits and covers C once;
 *  - the products that keep their precision: f32 weights (LoRA, attention) and vocabulary-shaped ones.
 * Weight types: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K and F16 (depth not a multiple of 4 with F16).
 */
#include "testlib.h"
#include "kernels/ctx.h"

#include "core/core.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x5eed1234abcd9876ull;

/* W[out, in] of `type` from N(0, 0.1) values, and its dequantization wd. */
static uint8_t *make_w(uint32_t type, int64_t out, int64_t in, float *wd) {
    const size_t rb = af_row_bytes(type, in);
    uint8_t *w = malloc(rb * (size_t)out);
    float *tmp = malloc(sizeof(float) * (size_t)in);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t k = 0; k < in; k++) tmp[k] = tl_rand_normal(&g_rng) * 0.1f;
        if (!af_quantize_row(type, tmp, w + o * rb, in)) {
            free(w);
            free(tmp);
            return NULL;
        }
        af_dequantize_row(type, w + o * rb, wd + o * in, in);
    }
    free(tmp);
    return w;
}

static float amax_of(const float *x, int64_t n, int64_t stride, const float *s) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float v = s ? x[i * stride] * s[i] : x[i * stride];
        if (fabsf(v) > m) m = fabsf(v);
    }
    return m;
}

static int32_t q8(float v, float inv) {
    float r = nearbyintf(v * inv);
    return r > 127.f ? 127 : r < -127.f ? -127 : (int32_t)r;
}

/* The method (gemm_int8.h) in scalar code: C[t][j] for A [n, k], B(kk, j) = W[j][kk] (xwt) or
 * W[kk][j] (dyw, W [k, nc]); e: the exact product and tol its bound (f64). Chunks of AF_I8_KC. */
static void emulate(int xwt, const float *x, const float *wd, int64_t n, int64_t k, int64_t nc, float *c, double *e,
                    double *tol) {
    const int64_t KC = AF_I8_KC, nch = (k + KC - 1) / KC;
    /* weight scales: xwt per (row j, chunk), dyw per row kk (folded into A) */
    float *sw = malloc(sizeof(float) * (size_t)((xwt ? nc * nch : k)));
    int32_t *qw = malloc(sizeof(int32_t) * (size_t)(k * nc));
    if (xwt)
        for (int64_t j = 0; j < nc; j++)
            for (int64_t ch = 0; ch < nch; ch++) {
                const int64_t c0 = ch * KC, len = k - c0 < KC ? k - c0 : KC;
                const float m = amax_of(wd + j * k + c0, len, 1, NULL), inv = m > 0 ? 127.0f / m : 0.0f;
                sw[j * nch + ch] = m / 127.0f;
                for (int64_t i = c0; i < c0 + len; i++) qw[j * k + i] = q8(wd[j * k + i], inv);
            }
    else
        for (int64_t r = 0; r < k; r++) {
            const float m = amax_of(wd + r * nc, nc, 1, NULL), inv = m > 0 ? 127.0f / m : 0.0f;
            sw[r] = m / 127.0f;
            for (int64_t i = 0; i < nc; i++) qw[r * nc + i] = q8(wd[r * nc + i], inv);
        }
    int32_t *qa = malloc(sizeof(int32_t) * (size_t)k);
    float *sa = malloc(sizeof(float) * (size_t)nch);
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * k, *fold = xwt ? NULL : sw;
        for (int64_t ch = 0; ch < nch; ch++) {
            const int64_t c0 = ch * KC, len = k - c0 < KC ? k - c0 : KC;
            const float m = amax_of(xt + c0, len, 1, fold ? fold + c0 : NULL), inv = m > 0 ? 127.0f / m : 0.0f;
            sa[ch] = m / 127.0f;
            for (int64_t kk = c0; kk < c0 + len; kk++) qa[kk] = q8(fold ? xt[kk] * fold[kk] : xt[kk], inv);
        }
        for (int64_t j = 0; j < nc; j++) {
            float acc = 0.0f;
            double ex = 0, bound = 0, abs = 0;
            for (int64_t ch = 0; ch < nch; ch++) {
                const int64_t c0 = ch * KC;
                const float sb = xwt ? sw[j * nch + ch] : 1.0f, sc = sb * sa[ch];
                int64_t s = 0;
                for (int64_t kk = c0; kk < c0 + KC && kk < k; kk++)
                    s += (int64_t)qa[kk] * (xwt ? qw[j * k + kk] : qw[kk * nc + j]);
                const float v = (float)(int32_t)s * sc;
                acc = ch ? acc + v : v;
                for (int64_t kk = c0; kk < c0 + KC && kk < k; kk++) {
                    const double w = xwt ? wd[j * k + kk] : wd[kk * nc + j];
                    /* folded units for dyw: a' = a·s (step sa), b' = w / s (step 1) */
                    const double a1 = xwt ? xt[kk] : (double)xt[kk] * sw[kk];
                    const double b1 = xwt ? w : (sw[kk] > 0 ? w / sw[kk] : 0);
                    const double ea = sa[ch], eb = xwt ? sb : 1.0;
                    ex += (double)xt[kk] * w;
                    bound += fabs(a1) * eb / 2 + ea / 2 * fabs(b1) + ea * eb / 4;
                    abs += fabs((double)xt[kk] * w);
                }
            }
            c[t * nc + j] = acc;
            e[t * nc + j] = ex;
            tol[t * nc + j] = bound * 1.001 + (double)k * ldexp(1, -22) * (abs + bound) + 1e-30;
        }
    }
    free(sw);
    free(qw);
    free(qa);
    free(sa);
}

static void product(int xwt, float *y, const float *x, const uint8_t *w, uint32_t type, int64_t n, int64_t in,
                    int64_t out, int acc) {
    if (xwt) af_matmul_xwt(T_CTX, y, x, w, type, n, in, out, acc);
    else af_matmul_dyw(T_CTX, y, x, w, type, n, in, out, acc);
}

static void int8_case(uint32_t type, int xwt, int64_t n, int64_t in, int64_t out) {
    float *wd = malloc(sizeof(float) * (size_t)(in * out));
    uint8_t *w = make_w(type, out, in, wd);
    if (!w) {
        tl_skip("int8 %s: af_quantize_row has no %s", af_type_name(type), af_type_name(type));
        free(wd);
        return;
    }
    const int64_t k = xwt ? in : out, nc = xwt ? out : in, cnt = n * nc;
    float *x = malloc(sizeof(float) * (size_t)(n * k)), *y = malloc(sizeof(float) * (size_t)cnt);
    float *y1 = malloc(sizeof(float) * (size_t)cnt), *ye = malloc(sizeof(float) * (size_t)cnt);
    double *e = malloc(sizeof(double) * (size_t)cnt), *tol = malloc(sizeof(double) * (size_t)cnt);
    for (int64_t i = 0; i < n * k; i++) x[i] = tl_rand_normal(&g_rng);
    for (int64_t t = 0; t < n; t += 7) x[t * k + (t % k)] *= 20.0f; /* an outlier in some rows */
    char what[160];
    snprintf(what, sizeof what, "int8 %s %s n=%lld in=%lld out=%lld", xwt ? "xwt" : "dyw", af_type_name(type),
             (long long)n, (long long)in, (long long)out);
    CHECK(af_gp_i8_applies(T_CTX, nc, k, type), "%s: takes the int8 path", what);
    product(xwt, y, x, w, type, n, in, out, 0);
    emulate(xwt, x, wd, n, k, nc, ye, e, tol);
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < cnt; i++)
        if (memcmp(&y[i], &ye[i], sizeof(float))) {
            if (first < 0) first = i;
            diff++;
        }
    CHECK(diff == 0, "%s: equals the scalar emulation bit for bit (%lld differ; first [%lld] %.9g vs %.9g)", what,
          (long long)diff, (long long)first, first >= 0 ? y[first] : 0.0, first >= 0 ? ye[first] : 0.0);
    double worst = 0, e2 = 0, r2 = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const double d = fabs((double)y[i] - e[i]);
        if (d / tol[i] > worst || isnan(d)) worst = isnan(d) ? INFINITY : d / tol[i];
        e2 += d * d;
        r2 += e[i] * e[i];
    }
    CHECK(worst <= 1, "%s: vs exact within the quantization bound (worst %.3f of it)", what, worst);
    printf("  %s: err/bound %.3f, rel %.2e\n", what, worst, sqrt(e2 / r2));
    /* threads and row blocks */
    const int th = af_ctx_n_threads(T_CTX);
    tl_ctx_set(NULL, 1, NULL, -1);
    product(xwt, y1, x, w, type, n, in, out, 0);
    tl_ctx_set(NULL, th, NULL, -1);
    CHECK(!memcmp(y, y1, sizeof(float) * (size_t)cnt), "%s: 1 thread == %d threads bitwise", what, th);
    const int64_t h = n / 2;
    product(xwt, y1, x, w, type, h, in, out, 0);
    product(xwt, y1 + h * nc, x + h * k, w, type, n - h, in, out, 0);
    CHECK(!memcmp(y, y1, sizeof(float) * (size_t)cnt), "%s: two row blocks == one call bitwise", what);
    /* accumulate: 1 + the product, the chunks added in the same order */
    for (int64_t i = 0; i < cnt; i++) y1[i] = 1.0f;
    product(xwt, y1, x, w, type, n, in, out, 1);
    double wa = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const double d = fabs((double)y1[i] - 1.0 - y[i]) / (4e-7 * (1 + fabs(y[i])) * (double)((k + AF_I8_KC - 1) / AF_I8_KC + 1));
        if (d > wa || isnan(d)) wa = isnan(d) ? INFINITY : d;
    }
    CHECK(wa <= 1, "%s: accumulate adds the product (worst %.3g of tol)", what, wa);
    /* a NaN in one input row reaches that output row and no other */
    x[3 * k + 5] = NAN;
    product(xwt, y1, x, w, type, n, in, out, 0);
    int nan_row = 1, nan_other = 0;
    for (int64_t j = 0; j < nc; j++) nan_row &= isnan(y1[3 * nc + j]) != 0;
    for (int64_t i = 0; i < cnt; i++)
        if (i / nc != 3) nan_other |= isnan(y1[i]) != 0;
    CHECK(nan_row && !nan_other, "%s: NaN propagates to its row only", what);
    free(wd); free(w); free(x); free(y); free(y1); free(ye); free(e); free(tol);
}

/* The fused form: ep sees every element of C once, after it is final; C equals af_gp_gemm's. */
typedef struct cover {
    int64_t n;
    int *seen;
    const float *c;
    int64_t ldc;
    int late; /* an element seen whose value was not yet final (compared with the unfused C) */
    const float *ref;
} cover;

static void cover_ep(void *arg, int64_t r0, int64_t mc, int64_t j0, int64_t nc) {
    cover *v = arg;
    for (int64_t r = r0; r < r0 + mc; r++)
        for (int64_t j = j0; j < j0 + nc; j++) {
            __atomic_fetch_add(&v->seen[r * v->n + j], 1, __ATOMIC_RELAXED);
            if (memcmp(&v->c[r * v->ldc + j], &v->ref[r * v->ldc + j], sizeof(float))) v->late = 1;
        }
}

static void test_fused(void) {
    const int64_t m = 300, n = 200, k = 576;
    float *wd = malloc(sizeof(float) * (size_t)(n * k));
    uint8_t *w = make_w(AF_TYPE_Q4_1, n, k, wd);
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *c0 = malloc(sizeof(float) * (size_t)(m * n));
    float *c1 = malloc(sizeof(float) * (size_t)(m * n));
    int *seen = calloc((size_t)(m * n), sizeof(int));
    for (int64_t i = 0; i < m * k; i++) a[i] = tl_rand_normal(&g_rng);
    const int64_t rb = (int64_t)af_row_bytes(AF_TYPE_Q4_1, k);
    const int nth = af_ctx_n_threads(T_CTX);
    CHECK(af_gp_gemm(T_CTX, c0, n, a, k, 1, w, AF_TYPE_Q4_1, rb, 1, m, n, k, 0, nth), "int8 af_gp_gemm runs");
    cover v = {.n = n, .seen = seen, .c = c1, .ldc = n, .ref = c0};
    af_gp_fused f = {.ep = cover_ep, .arg = &v};
    CHECK(af_gp_gemm_fused(T_CTX, c1, n, a, k, 1, w, AF_TYPE_Q4_1, rb, 1, m, n, k, 0, nth, &f), "int8 fused runs");
    CHECK(!memcmp(c0, c1, sizeof(float) * (size_t)(m * n)), "int8 fused == unfused bitwise");
    int once = 1;
    for (int64_t i = 0; i < m * n; i++) once &= seen[i] == 1;
    CHECK(once && !v.late, "int8 fused: the epilogue sees every element once, final");
    free(wd); free(w); free(a); free(c0); free(c1); free(seen);
}

/* Products that keep their precision under int8: f32 weights and vocabulary-shaped ones. */
static void test_scope(void) {
    CHECK(!af_gp_i8_applies(T_CTX, 200, 576, AF_TYPE_F32), "f32 weights (LoRA, attention): not int8");
    CHECK(!af_gp_i8_applies(T_CTX, 49152, 576, AF_TYPE_Q4_1), "an LM head (49152 x 576): not int8");
    CHECK(!af_gp_i8_applies(T_CTX, 576, 49152, AF_TYPE_Q4_1), "an LM head's backward: not int8");
    CHECK(af_gp_i8_applies(T_CTX, 1536, 576, AF_TYPE_Q4_1), "an MLP projection: int8");
    CHECK(!strcmp(af_ctx_matmul_precision(T_CTX), "int8"), "precision reads back int8");
}

int main(void) {
    if (tl_ctx_set(NULL, -1, "int8", -1) != AF_OK) {
        tl_skip("int8 products: %s", af_last_error());
        CHECK(!af_cpu()->avx512_vnni || tl_ctx_set("avx2", -1, "int8", -1) == AF_ERR_UNSUPPORTED,
              "int8 refused where there are no VNNI kernels");
        return tl_finish("test_matmul_int8");
    }
    printf("cpu: %s\n", af_ctx_describe(T_CTX));
    test_scope();
    const uint32_t types[] = {AF_TYPE_Q4_0, AF_TYPE_Q4_1, AF_TYPE_Q8_0, AF_TYPE_Q4_K, AF_TYPE_Q6_K};
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++) {
        const int64_t in = types[i] == AF_TYPE_Q4_K || types[i] == AF_TYPE_Q6_K ? 768 : 576;
        int8_case(types[i], 1, 133, in, 200);  /* x·Wᵀ: 7 panels, the last ragged; 3 chunks of depth */
        int8_case(types[i], 0, 133, in, 1100); /* dy·W: depth 1100 (5 chunks, the last ragged) */
    }
    int8_case(AF_TYPE_F16, 1, 37, 330, 96);  /* depth 330: not a multiple of 4 */
    int8_case(AF_TYPE_F16, 0, 300, 96, 258); /* dy·W depth 258, three row blocks (128 + 128 + 44) */
    test_fused();
    /* refused on the avx2 path */
    CHECK(tl_ctx_set("avx2", -1, "int8", -1) == AF_ERR_UNSUPPORTED, "int8 refused on the avx2 path");
    return tl_finish("test_matmul_int8");
}
