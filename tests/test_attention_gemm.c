/*
 * test_attention_gemm.c — the blocked-GEMM attention (src/kernels/cpu/attention_gemm.c) against the
 * row kernels of ops_attention.c (themselves checked against finite differences and a naive
 * reference in test_ops.c): forward output and lse, backward dq/dk/dv (added into nonzero
 * buffers), GQA groupings, sliding windows, lengths around the 64-row blocks, NaN propagation,
 * and independence from the thread count. Runs only where af_att_gemm_usable (AVX-512 path).
 */
#include "testlib.h"
#include "kernels/ctx.h"

#include "afinar.h"
#include "kernels/cpu/attention_gemm.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x5eed1234abcdull;

static float *rnd(int64_t n, float sc) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = tl_rand_normal(&g_rng) * sc;
    return x;
}

static float *dup(const float *x, int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)n);
    memcpy(y, x, sizeof(float) * (size_t)n);
    return y;
}

static double maxabs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static const char *g_path = ""; /* kernel path under test, for the messages */

static void one(int64_t n, int64_t nh, int64_t nkh, int64_t hd, int64_t window) {
    char what[128];
    snprintf(what, sizeof what, "%s n=%lld heads=%lld/%lld hd=%lld window=%lld", g_path, (long long)n, (long long)nh,
             (long long)nkh, (long long)hd, (long long)window);
    if (!af_att_gemm_usable(T_CTX, n, 0, n, nh, nkh, hd)) {
        CHECK(0, "%s: not usable", what);
        return;
    }
    const int64_t qn = n * nh * hd, kn = n * nkh * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = rnd(qn, 1.f), *k = rnd(kn, 1.f), *v = rnd(kn, 1.f), *dout = rnd(qn, 1.f);
    float *o1 = malloc(sizeof(float) * qn), *o2 = malloc(sizeof(float) * qn);
    float *l1 = malloc(sizeof(float) * n * nh), *l2 = malloc(sizeof(float) * n * nh);
    af_ctx_set_hook(T_CTX, AF_CTX_ATT_GEMM, 0);
    af_attention_forward(T_CTX, o1, l1, q, k, v, n, 0, n, nkh * hd, nh, nkh, hd, scale, window);
    CHECK(af_att_gemm_forward(T_CTX, o2, l2, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window), "%s: forward", what);
    double mo = maxabs(o1, qn);
    CHECK_CLOSE(what, o2, o1, (size_t)qn, 2e-6 * mo + 1e-7, 1e-5);
    CHECK_CLOSE(what, l2, l1, (size_t)(n * nh), 1e-6, 1e-6);
    /* backward into nonzero buffers (gradients are added) */
    float *dq0 = rnd(qn, 0.1f), *dk0 = rnd(kn, 0.1f), *dv0 = rnd(kn, 0.1f);
    float *dq1 = dup(dq0, qn), *dk1 = dup(dk0, kn), *dv1 = dup(dv0, kn);
    float *dq2 = dup(dq0, qn), *dk2 = dup(dk0, kn), *dv2 = dup(dv0, kn);
    af_attention_backward(T_CTX, dq1, dk1, dv1, dout, o1, l1, q, k, v, n, 0, n, nh, nkh, hd, scale, window);
    CHECK(af_att_gemm_backward(T_CTX, dq2, dk2, dv2, dout, o1, l1, q, k, v, n, n, nh, nkh, hd, scale, window),
          "%s: backward", what);
    CHECK_CLOSE(what, dq2, dq1, (size_t)qn, 1e-5 * maxabs(dq1, qn) + 1e-7, 1e-4);
    CHECK_CLOSE(what, dk2, dk1, (size_t)kn, 1e-5 * maxabs(dk1, kn) + 1e-7, 1e-4);
    CHECK_CLOSE(what, dv2, dv1, (size_t)kn, 1e-5 * maxabs(dv1, kn) + 1e-7, 1e-4);
    /* the same bits with one thread */
    int th = af_ctx_n_threads(T_CTX);
    tl_ctx_set(NULL, 1, NULL, -1);
    float *dq3 = dup(dq0, qn), *dk3 = dup(dk0, kn), *dv3 = dup(dv0, kn), *o3 = malloc(sizeof(float) * qn);
    af_att_gemm_forward(T_CTX, o3, NULL, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window);
    af_att_gemm_backward(T_CTX, dq3, dk3, dv3, dout, o1, l1, q, k, v, n, n, nh, nkh, hd, scale, window);
    tl_ctx_set(NULL, th, NULL, -1);
    CHECK(!memcmp(o3, o2, sizeof(float) * qn) && !memcmp(dq3, dq2, sizeof(float) * qn) &&
              !memcmp(dk3, dk2, sizeof(float) * kn) && !memcmp(dv3, dv2, sizeof(float) * kn),
          "%s: 1 thread == %d threads bitwise", what, th);
    /* a NaN in one key reaches the outputs of the queries that see it, and only those */
    k[(n / 2) * nkh * hd + 3] = NAN; /* kv head 0, position n/2 */
    af_att_gemm_forward(T_CTX, o3, NULL, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < nh; h++) {
            int sees = h / (nh / nkh) == 0 && i >= n / 2 && (window <= 0 || i - n / 2 < window);
            ok &= (isnan(o3[(i * nh + h) * hd]) != 0) == sees;
        }
    CHECK(ok, "%s: NaN key propagates to exactly the queries that see it", what);
    af_ctx_set_hook(T_CTX, AF_CTX_ATT_GEMM, 1);
    free(q); free(k); free(v); free(dout); free(o1); free(o2); free(o3); free(l1); free(l2);
    free(dq0); free(dk0); free(dv0); free(dq1); free(dk1); free(dv1); free(dq2); free(dk2); free(dv2);
    free(dq3); free(dk3); free(dv3);
}

/* bf16 products (a context with matmul precision bf16, as the recipe's training on CPUs with AVX512_BF16 /
 * AMX): each thread packs K, V, Q and dO once per call into bf16 panels and multiplies every block against
 * its range of them. Against the f32 row kernels within bf16's rounding (operands rounded to 8 bits of
 * mantissa: 2^-8 relative per product, sums of up to n terms), the same bits on 1 thread, a second call with
 * new K and V in the same buffers uses them (the panels are packed per call), and gradients still add. */
static void one_bf16(int64_t n, int64_t nh, int64_t nkh, int64_t hd, int64_t window) {
    char what[128];
    snprintf(what, sizeof what, "bf16 n=%lld heads=%lld/%lld hd=%lld window=%lld", (long long)n, (long long)nh,
             (long long)nkh, (long long)hd, (long long)window);
    const int64_t qn = n * nh * hd, kn = n * nkh * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = rnd(qn, 1.f), *k = rnd(kn, 1.f), *v = rnd(kn, 1.f), *dout = rnd(qn, 1.f);
    float *o1 = malloc(sizeof(float) * qn), *o2 = malloc(sizeof(float) * qn), *o3 = malloc(sizeof(float) * qn);
    float *l1 = malloc(sizeof(float) * n * nh), *l2 = malloc(sizeof(float) * n * nh);
    float *dq1 = rnd(qn, 0.f), *dk1 = rnd(kn, 0.f), *dv1 = rnd(kn, 0.f);
    float *dq2 = rnd(qn, 0.f), *dk2 = rnd(kn, 0.f), *dv2 = rnd(kn, 0.f);
    float *dq3 = rnd(qn, 0.f), *dk3 = rnd(kn, 0.f), *dv3 = rnd(kn, 0.f);
    af_ctx_set_hook(T_CTX, AF_CTX_ATT_GEMM, 0);
    af_attention_forward(T_CTX, o1, l1, q, k, v, n, 0, n, nkh * hd, nh, nkh, hd, scale, window);
    af_attention_backward(T_CTX, dq1, dk1, dv1, dout, o1, l1, q, k, v, n, 0, n, nh, nkh, hd, scale, window);
    const int th = af_ctx_n_threads(T_CTX);
    CHECK(tl_ctx_set(NULL, -1, "bf16", -1) == AF_OK, "%s: bf16 context", what);
    CHECK(af_att_gemm_forward(T_CTX, o2, l2, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window), "%s: forward", what);
    CHECK(af_att_gemm_backward(T_CTX, dq2, dk2, dv2, dout, o1, l1, q, k, v, n, n, nh, nkh, hd, scale, window),
          "%s: backward", what);
    CHECK_CLOSE(what, o2, o1, (size_t)qn, 2e-2 * maxabs(o1, qn), 0);
    CHECK_CLOSE(what, l2, l1, (size_t)(n * nh), 2e-2, 0);
    CHECK_CLOSE(what, dq2, dq1, (size_t)qn, 3e-2 * maxabs(dq1, qn), 0);
    CHECK_CLOSE(what, dk2, dk1, (size_t)kn, 3e-2 * maxabs(dk1, kn), 0);
    CHECK_CLOSE(what, dv2, dv1, (size_t)kn, 3e-2 * maxabs(dv1, kn), 0);
    tl_ctx_set(NULL, 1, "bf16", -1);
    af_att_gemm_forward(T_CTX, o3, NULL, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window);
    af_att_gemm_backward(T_CTX, dq3, dk3, dv3, dout, o1, l1, q, k, v, n, n, nh, nkh, hd, scale, window);
    CHECK(!memcmp(o3, o2, sizeof(float) * qn) && !memcmp(dq3, dq2, sizeof(float) * qn) &&
              !memcmp(dk3, dk2, sizeof(float) * kn) && !memcmp(dv3, dv2, sizeof(float) * kn),
          "%s: 1 thread == %d threads bitwise", what, th);
    /* new keys and values in the same buffers: the next call packs them again (same result as fresh
     * buffers: o3 from copies) */
    for (int64_t i = 0; i < kn; i++) k[i] = -k[i], v[i] = 0.5f * v[i];
    float *kc = malloc(sizeof(float) * kn), *vc = malloc(sizeof(float) * kn);
    memcpy(kc, k, sizeof(float) * kn);
    memcpy(vc, v, sizeof(float) * kn);
    af_att_gemm_forward(T_CTX, o2, NULL, q, k, v, n, n, nkh * hd, nh, nkh, hd, scale, window);
    af_att_gemm_forward(T_CTX, o3, NULL, q, kc, vc, n, n, nkh * hd, nh, nkh, hd, scale, window);
    CHECK(!memcmp(o3, o2, sizeof(float) * qn), "%s: new K and V in the same buffers are used", what);
    tl_ctx_set(NULL, th, "f32", -1);
    af_ctx_set_hook(T_CTX, AF_CTX_ATT_GEMM, 1);
    free(q); free(k); free(v); free(kc); free(vc); free(dout); free(o1); free(o2); free(o3); free(l1); free(l2);
    free(dq1); free(dk1); free(dv1); free(dq2); free(dk2); free(dv2); free(dq3); free(dk3); free(dv3);
}

int main(void) {
    static const char *PATHS[] = {"avx512", "avx2"};
    int ran = 0;
    for (int p = 0; p < 2; p++) {
        if (tl_ctx_set(PATHS[p], -1, NULL, -1) != AF_OK || !af_att_gemm_usable(T_CTX, 128, 0, 128, 9, 3, 64)) {
            tl_skip("blocked-GEMM attention on the %s path: not supported by this CPU (%s)", PATHS[p],
                    af_ctx_describe(T_CTX));
            continue;
        }
        ran++;
        g_path = PATHS[p];
        CHECK(!af_att_gemm_usable(T_CTX, 128, 5, 133, 9, 3, 64), "%s: q_pos0 > 0 is not handled", PATHS[p]);
        CHECK(!af_att_gemm_usable(T_CTX, 16, 0, 16, 9, 3, 64), "%s: short sequences stay on the row kernels", PATHS[p]);
        static const int64_t N[] = {32, 63, 64, 65, 130, 200};
        for (size_t i = 0; i < sizeof N / sizeof *N; i++) {
            one(N[i], 9, 3, 64, 0);
            one(N[i], 4, 1, 32, 37);
        }
        one(256, 4, 4, 64, 100);
        one(300, 8, 2, 16, 0);
        if (p == 0 && tl_ctx_set(PATHS[p], -1, "bf16", -1) == AF_OK) {
            tl_ctx_set(PATHS[p], -1, "f32", -1);
            static const int64_t NB[] = {64, 65, 130, 512};
            for (size_t i = 0; i < sizeof NB / sizeof *NB; i++) one_bf16(NB[i], 9, 3, 64, 0);
            one_bf16(200, 4, 1, 32, 37);
        } else if (p == 0) {
            tl_skip("bf16 blocked attention: no bf16 products on this CPU");
            tl_ctx_set(PATHS[p], -1, "f32", -1);
        }
    }
    tl_ctx_set("auto", -1, NULL, -1);
    CHECK(tl_ctx_set("scalar", -1, NULL, -1) == AF_OK && !af_att_gemm_usable(T_CTX, 128, 0, 128, 9, 3, 64),
          "the scalar path keeps the row kernels");
    tl_ctx_set("auto", -1, NULL, -1);
    (void)ran;
    return tl_finish("attention_gemm");
}
