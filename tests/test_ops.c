/*
 * test_ops.c — kernels/ops.h: every forward against a naive double-precision reference, and every
 * backward against central finite differences of that double reference on L = Σ R ⊙ y (random R),
 * run once per kernel path the CPU supports (scalar, avx2, avx512).
 * Tolerances (|got − want| <= atol + rtol·|want|, want in double):
 *   forwards: atol 2e-5, rtol 1e-4 (RoPE at positions up to 30000: atol 2e-5 as well)
 *   finite-difference gradients (h = 1e-4 in double, truncation error ~1e-8): atol 1e-4, rtol 1e-3
 *   attention backward at model shapes vs a double analytic reference: atol 1e-4, rtol 1e-3
 *   strided-KV vs compact, decode vs full-forward rows: bitwise equal (same arithmetic).
 * The worst error seen per category is printed at the end.
 */
#include "afinar.h"
#include "kernels/ops.h"
#include "testlib.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x5eed1234abcdULL;

/* worst |diff| seen per category, for the summary */
enum { W_FWD, W_FD, W_ATTBWD, W_COUNT };
static double g_worst[W_COUNT];
static const char *g_wname[W_COUNT] = {"forward vs double ref", "backward vs finite differences",
                                       "attention backward vs double analytic"};

static float *frand(int64_t n, float lo, float hi) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = tl_rand_uniform(&g_rng, lo, hi);
    return p;
}
static double *to_d(const float *x, int64_t n) {
    double *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = x[i];
    return p;
}
static float *fconst(int64_t n, float c) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = c;
    return p;
}

/* got (f32, minus `base` when the op adds into it) against want (double). */
static bool close_d(const char *what, int cat, const float *got, float base, const double *want, int64_t n,
                    double atol, double rtol, int line) {
    double worst = 0, worst_ex = -1;
    int64_t wi = 0;
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(((double)got[i] - base) - want[i]);
        if (d != d) d = INFINITY;
        double ex = d - (atol + rtol * fabs(want[i]));
        if (ex > 0) ok = false;
        if (ex > worst_ex) worst_ex = ex, wi = i;
        if (d > worst) worst = d;
    }
    if (worst > g_worst[cat]) g_worst[cat] = worst;
    if (!ok || getenv("TL_VERBOSE"))
        fprintf(ok ? stdout : stderr, "%s %s: n=%lld max|diff| %.3g; worst vs tol at [%lld]: got %.9g want %.9g\n",
                ok ? "ok  " : "FAIL", what, (long long)n, worst, (long long)wi, (double)got[wi] - base, want[wi]);
    return tl_check(ok, __FILE__, line, "%s not close", what);
}
#define CLOSE_D(what, cat, got, base, want, n, atol, rtol)                                          \
    close_d(what, cat, got, base, want, n, atol, rtol, __LINE__)

/* Central differences of loss() with respect to every element of x (double), into g. */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(double *g, double *x, int64_t n, loss_fn loss, void *ctx) {
    const double h = 1e-4;
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}
static double dotd(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#define FWD_ATOL 2e-5
#define FWD_RTOL 1e-4
#define FD_ATOL 1e-4
#define FD_RTOL 1e-3

/* ================================================================================================
 * RMSNorm
 * ============================================================================================== */
typedef struct {
    double *x, *w, *R, *y;
    int64_t n, dim;
    double eps;
} rms_ctx;

static void rms_ref(double *y, const double *x, const double *w, int64_t n, int64_t dim, double eps) {
    for (int64_t t = 0; t < n; t++) {
        double ss = dotd(x + t * dim, x + t * dim, dim);
        double r = 1.0 / sqrt(ss / dim + eps);
        for (int64_t i = 0; i < dim; i++) y[t * dim + i] = x[t * dim + i] * r * w[i];
    }
}
static double rms_loss(void *vc) {
    rms_ctx *c = vc;
    rms_ref(c->y, c->x, c->w, c->n, c->dim, c->eps);
    return dotd(c->R, c->y, c->n * c->dim);
}

static void test_rmsnorm(int64_t n, int64_t dim, int fd) {
    float eps = 1e-5f;
    float *x = frand(n * dim, -2, 2), *w = frand(dim, 0.5f, 1.5f), *R = frand(n * dim, -1, 1);
    float *y = malloc((size_t)(n * dim) * sizeof *y), *rstd = malloc((size_t)n * sizeof *rstd);
    rms_ctx c = {to_d(x, n * dim), to_d(w, dim), to_d(R, n * dim), malloc((size_t)(n * dim) * sizeof(double)),
                 n, dim, eps};
    af_rmsnorm_forward(T_CTX, y, rstd, x, w, n, dim, eps);
    rms_ref(c.y, c.x, c.w, n, dim, eps);
    CLOSE_D("rmsnorm forward", W_FWD, y, 0, c.y, n * dim, FWD_ATOL, FWD_RTOL);
    /* in place (y aliases x) gives the same */
    float *xi = malloc((size_t)(n * dim) * sizeof *xi);
    memcpy(xi, x, (size_t)(n * dim) * sizeof *xi);
    af_rmsnorm_forward(T_CTX, xi, NULL, xi, w, n, dim, eps);
    CHECK(memcmp(xi, y, (size_t)(n * dim) * sizeof *xi) == 0, "rmsnorm in place differs");
    if (fd) {
        float *dx = fconst(n * dim, 0.25f), *dw = fconst(dim, -0.5f);
        af_rmsnorm_backward(T_CTX, dx, dw, R, x, w, rstd, n, dim);
        double *gx = malloc((size_t)(n * dim) * sizeof *gx), *gw = malloc((size_t)dim * sizeof *gw);
        fd_grad(gx, c.x, n * dim, rms_loss, &c);
        fd_grad(gw, c.w, dim, rms_loss, &c);
        CLOSE_D("rmsnorm dx (FD)", W_FD, dx, 0.25f, gx, n * dim, FD_ATOL, FD_RTOL);
        CLOSE_D("rmsnorm dw (FD)", W_FD, dw, -0.5f, gw, dim, FD_ATOL, FD_RTOL);
        /* dw == NULL is allowed */
        float *dx2 = fconst(n * dim, 0.25f);
        af_rmsnorm_backward(T_CTX, dx2, NULL, R, x, w, rstd, n, dim);
        CHECK(memcmp(dx2, dx, (size_t)(n * dim) * sizeof *dx) == 0, "rmsnorm dx differs with dw NULL");
        free(dx), free(dw), free(gx), free(gw), free(dx2);
    }
    free(x), free(w), free(R), free(y), free(rstd), free(xi);
    free(c.x), free(c.w), free(c.R), free(c.y);
}

/* ================================================================================================
 * RoPE
 * ============================================================================================== */
typedef struct {
    double *x, *R, *y;
    const int32_t *pos;
    int64_t n, nh, hd;
    double base;
    int neox;
} rope_ctx;

static void rope_ref(double *y, const double *x, const int32_t *pos, int64_t n, int64_t nh, int64_t hd,
                     double base, int neox) {
    int64_t half = hd / 2;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            const double *xr = x + (t * nh + h) * hd;
            double *yr = y + (t * nh + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                double th = pos[t] * pow(base, -2.0 * i / hd);
                int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                yr[a] = xr[a] * cos(th) - xr[b] * sin(th);
                yr[b] = xr[a] * sin(th) + xr[b] * cos(th);
            }
        }
}
static double rope_loss(void *vc) {
    rope_ctx *c = vc;
    rope_ref(c->y, c->x, c->pos, c->n, c->nh, c->hd, c->base, c->neox);
    return dotd(c->R, c->y, c->n * c->nh * c->hd);
}

/* packed = 0: random positions in [0, pos_max] (spread: cos/sin per token); packed = 1: positions
 * t % (pos_max + 1), as in a batch of packed sequences (cos/sin from a per-call table). */
static void test_rope(int64_t n, int64_t nh, int64_t hd, float base, int neox, int32_t pos_max, int fd, int packed) {
    int64_t N = n * nh * hd;
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    for (int64_t t = 0; t < n; t++)
        pos[t] = packed ? (int32_t)(t % (pos_max + 1)) : (int32_t)(tl_rand_u64(&g_rng) % (uint64_t)(pos_max + 1));
    pos[0] = 0;
    float *x = frand(N, -1, 1), *R = frand(N, -1, 1);
    float *y = malloc((size_t)N * sizeof *y);
    memcpy(y, x, (size_t)N * sizeof *y);
    rope_ctx c = {to_d(x, N), to_d(R, N), malloc((size_t)N * sizeof(double)), pos, n, nh, hd, base, neox};
    af_rope_forward(T_CTX, y, pos, n, nh, hd, base, neox);
    rope_ref(c.y, c.x, pos, n, nh, hd, base, neox);
    char what[96];
    snprintf(what, sizeof what, "rope %s forward hd=%lld pos<=%d%s", neox ? "neox" : "norm", (long long)hd,
             (int)pos_max, packed ? " packed" : "");
    CLOSE_D(what, W_FWD, y, 0, c.y, N, FWD_ATOL, FWD_RTOL);
    /* backward(forward(x)) == x */
    af_rope_backward(T_CTX, y, pos, n, nh, hd, base, neox);
    CLOSE_D("rope backward(forward(x)) == x", W_FWD, y, 0, c.x, N, FWD_ATOL, FWD_RTOL);
    if (fd) {
        float *dx = malloc((size_t)N * sizeof *dx);
        memcpy(dx, R, (size_t)N * sizeof *dx);
        af_rope_backward(T_CTX, dx, pos, n, nh, hd, base, neox);
        double *g = malloc((size_t)N * sizeof *g);
        fd_grad(g, c.x, N, rope_loss, &c);
        snprintf(what, sizeof what, "rope %s dx (FD)%s", neox ? "neox" : "norm", packed ? " packed" : "");
        CLOSE_D(what, W_FD, dx, 0, g, N, FD_ATOL, FD_RTOL);
        free(dx), free(g);
    }
    free(pos), free(x), free(R), free(y), free(c.x), free(c.R), free(c.y);
}

/* Packed positions (cos/sin from the per-call table) give the same bits as the per-token path: the
 * same tokens with one extra token far away (positions then spread: no table), forward and backward. */
static void test_rope_table_vs_token(int64_t n, int64_t nh, int64_t hd, int neox) {
    int64_t N = n * nh * hd, per = nh * hd;
    int32_t *pos = malloc((size_t)(n + 1) * sizeof *pos);
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(t % 16);
    pos[n] = 1000000;
    float *x = frand(N + per, -1, 1), *a = malloc((size_t)(N + per) * sizeof *a), *b = malloc((size_t)(N + per) * sizeof *b);
    for (int dir = 0; dir < 2; dir++) {
        memcpy(a, x, (size_t)(N + per) * sizeof *a);
        memcpy(b, x, (size_t)(N + per) * sizeof *b);
        (dir ? af_rope_backward : af_rope_forward)(T_CTX, a, pos, n, nh, hd, 10000.0f, neox);     /* table */
        (dir ? af_rope_backward : af_rope_forward)(T_CTX, b, pos, n + 1, nh, hd, 10000.0f, neox); /* per token */
        CHECK(memcmp(a, b, (size_t)N * sizeof *a) == 0, "rope %s %s: packed-position table differs from per-token",
              neox ? "neox" : "norm", dir ? "backward" : "forward");
        CHECK(memcmp(a, x, (size_t)N * sizeof *a) != 0, "rope did nothing");
    }
    free(pos), free(x), free(a), free(b);
}

/* ================================================================================================
 * SwiGLU / GeGLU
 * ============================================================================================== */
typedef struct {
    double *g, *u, *R;
    int64_t n;
    int gelu;
} glu_ctx;

static double glu_ref1(double g, double u, int gelu) {
    if (gelu) return 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
    return g / (1 + exp(-g)) * u;
}
static double glu_loss(void *vc) {
    glu_ctx *c = vc;
    double s = 0;
    for (int64_t i = 0; i < c->n; i++) s += c->R[i] * glu_ref1(c->g[i], c->u[i], c->gelu);
    return s;
}

static void test_glu(int64_t n, int gelu, float range, int fd) {
    float *g = frand(n, -range, range), *u = frand(n, -2, 2), *R = frand(n, -1, 1);
    float *h = malloc((size_t)n * sizeof *h);
    glu_ctx c = {to_d(g, n), to_d(u, n), to_d(R, n), n, gelu};
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = glu_ref1(c.g[i], c.u[i], gelu);
    (gelu ? af_geglu_forward : af_swiglu_forward)(T_CTX, h, g, u, n);
    CLOSE_D(gelu ? "geglu forward" : "swiglu forward", W_FWD, h, 0, want, n, FWD_ATOL, FWD_RTOL);
    /* in place (h aliases gate) */
    float *g2 = malloc((size_t)n * sizeof *g2);
    memcpy(g2, g, (size_t)n * sizeof *g2);
    (gelu ? af_geglu_forward : af_swiglu_forward)(T_CTX, g2, g2, u, n);
    CHECK(memcmp(g2, h, (size_t)n * sizeof *h) == 0, "glu in place differs");
    if (fd) {
        float *dg = fconst(n, 0.25f), *du = fconst(n, 0.25f);
        (gelu ? af_geglu_backward : af_swiglu_backward)(T_CTX, dg, du, R, g, u, n);
        double *fg = malloc((size_t)n * sizeof *fg), *fu = malloc((size_t)n * sizeof *fu);
        fd_grad(fg, c.g, n, glu_loss, &c);
        fd_grad(fu, c.u, n, glu_loss, &c);
        CLOSE_D(gelu ? "geglu d_gate (FD)" : "swiglu d_gate (FD)", W_FD, dg, 0.25f, fg, n, FD_ATOL, FD_RTOL);
        CLOSE_D(gelu ? "geglu d_up (FD)" : "swiglu d_up (FD)", W_FD, du, 0.25f, fu, n, FD_ATOL, FD_RTOL);
        free(dg), free(du), free(fg), free(fu);
    }
    free(g), free(u), free(R), free(h), free(want), free(g2), free(c.g), free(c.u), free(c.R);
}

/* ================================================================================================
 * add, softmax
 * ============================================================================================== */
static void test_misc(void) {
    int64_t n = 1000;
    float *a = frand(n, -3, 3), *b = frand(n, -3, 3), *y = malloc((size_t)n * sizeof *y);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    af_add(y, a, b, n);
    CLOSE_D("add", W_FWD, y, 0, want, n, 0, 1e-7);
    af_add(a, a, b, n); /* aliasing */
    CLOSE_D("add in place", W_FWD, a, 0, want, n, 0, 1e-7);

    float *x = frand(n, -30, 30);
    x[3] = -INFINITY, x[77] = -INFINITY;
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    for (int64_t i = 0; i < n; i++) want[i] = exp((double)x[i] - mx) / s;
    af_softmax_inplace(x, n);
    CLOSE_D("softmax", W_FWD, x, 0, want, n, 1e-7, 1e-5);
    CHECK(x[3] == 0.0f && x[77] == 0.0f, "softmax: masked entries not exactly 0");
    float allm[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    af_softmax_inplace(allm, 4);
    CHECK(allm[0] == 0 && allm[1] == 0 && allm[2] == 0 && allm[3] == 0, "softmax of all -inf is not all 0");
    float big[3] = {1000.0f, 999.0f, -1000.0f};
    af_softmax_inplace(big, 3);
    CHECK(fabsf(big[0] - 0.7310586f) < 1e-6f && big[2] == 0.0f, "softmax overflow guard: %g %g", big[0], big[2]);
    free(a), free(b), free(y), free(want), free(x);
}

/* ================================================================================================
 * exp (af_vexpf; the SIMD e^x inside SiLU and attention)
 * ============================================================================================== */
#define VEXP_RTOL 1.5e-7 /* <= ~1 ulp (2^-23 = 1.19e-7 is one ulp at the bottom of a binade) */

/* Every 509th float in [-110, 95] (both signs, ~4e6 values) plus edge cases, against double exp:
 * relative error <= VEXP_RTOL for normal results, <= 1 subnormal ulp (2^-149) for subnormal ones;
 * +inf exactly where e^x rounds past FLT_MAX, 0 where it rounds below 2^-150; NaN propagates. */
static void test_vexpf(void) {
    static const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 0.34657359f,
                                 -0.34657359f, 10.0f, -10.0f, 88.0f, 88.72f, 88.7228f, 88.72283f, 88.72284f,
                                 88.7229f, 89.0f, 100.0f, 1e30f, FLT_MAX, -87.0f, -87.33654f, -87.3366f,
                                 -100.0f, -103.278f, -103.9720f, -103.98f, -104.0f, -150.0f, -1e30f, -FLT_MAX,
                                 INFINITY, -INFINITY};
    int64_t cap = 4500000, n = 0;
    float *x = malloc((size_t)cap * sizeof *x), *y = malloc((size_t)cap * sizeof *y);
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
    for (int sg = 0; sg < 2; sg++) {
        float lim = sg ? 110.0f : 95.0f;
        uint32_t lb;
        memcpy(&lb, &lim, 4);
        for (uint32_t b = 0; b <= lb && n < cap; b += 509) {
            uint32_t bits = b | (sg ? 0x80000000u : 0u);
            memcpy(&x[n++], &bits, 4);
        }
    }
    af_vexpf(T_CTX, y, x, n);
    double worst_rel = 0, worst_sub = 0;
    int64_t bad = 0, bad_inf = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = exp((double)x[i]), got = y[i];
        if (want > FLT_MAX) { /* overflows in float unless within rounding of FLT_MAX */
            if (!(isinf(got) || fabs(got - want) <= VEXP_RTOL * want)) bad_inf++;
        } else if (isinf(got)) {
            bad_inf++;
        } else if (want < 0x1p-126) {
            double d = fabs(got - want) / 0x1p-149;
            if (d > worst_sub) worst_sub = d;
            if (d > 1.0) bad++;
        } else {
            double r = fabs(got - want) / want;
            if (r > worst_rel) worst_rel = r;
            if (r > VEXP_RTOL) bad++;
        }
    }
    CHECK(bad == 0 && bad_inf == 0, "vexpf: %lld values off (%lld at overflow), worst rel %.3g, subnormal %.3g ulp",
          (long long)bad, (long long)bad_inf, worst_rel, worst_sub);
    printf("vexpf: %lld values, worst rel %.3g, worst subnormal %.3g ulp\n", (long long)n, worst_rel, worst_sub);
    /* exact special values */
    float sp[7] = {0.0f, -INFINITY, INFINITY, NAN, -NAN, -200.0f, 200.0f}, sy[7];
    af_vexpf(T_CTX, sy, sp, 7);
    CHECK(sy[0] == 1.0f && sy[1] == 0.0f && !signbit(sy[1]) && isinf(sy[2]) && sy[2] > 0 && isnan(sy[3]) &&
              isnan(sy[4]) && sy[5] == 0.0f && isinf(sy[6]),
          "vexpf specials: e^0 %g, e^-inf %g, e^inf %g, e^nan %g %g, e^-200 %g, e^200 %g", sy[0], sy[1], sy[2],
          sy[3], sy[4], sy[5], sy[6]);
    /* a NaN amid finite values stays in its own lane; lengths off the vector width; in place */
    for (int64_t len = 1; len <= 40; len += 13) {
        float *v = frand(len, -5, 5), *w = malloc((size_t)len * sizeof *w);
        v[len / 2] = NAN;
        af_vexpf(T_CTX, w, v, len);
        int ok = 1;
        for (int64_t i = 0; i < len; i++)
            ok &= i == len / 2 ? isnan(w[i]) : fabs(w[i] - exp((double)v[i])) <= VEXP_RTOL * exp((double)v[i]);
        af_vexpf(T_CTX, v, v, len);
        ok &= memcmp(v, w, (size_t)len * sizeof *v) == 0 || len == 0;
        CHECK(ok, "vexpf n=%lld: NaN lane, tail or in-place result wrong", (long long)len);
        free(v), free(w);
    }
    free(x), free(y);
}

/* SwiGLU on special inputs: NaN propagates (a NaN activation must not turn finite), large |gate|
 * saturates without NaN (σ → 0 or 1), through forward and backward. */
static void test_swiglu_special(void) {
    float g[8] = {NAN, 1.0f, -95.0f, 95.0f, -1e30f, 1e30f, 0.0f, 2.0f}, u[8] = {1, NAN, 2, 2, 1, 1, 3, 1};
    float h[8], dg[8] = {0}, du[8] = {0}, dh[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    af_swiglu_forward(T_CTX, h, g, u, 8);
    af_swiglu_backward(T_CTX, dg, du, dh, g, u, 8);
    CHECK(isnan(h[0]) && isnan(h[1]) && isnan(dg[0]) && isnan(du[0]) && isnan(dg[1]),
          "swiglu: NaN did not propagate (h %g %g, dg %g %g, du %g)", h[0], h[1], dg[0], dg[1], du[0]);
    CHECK(fabsf(h[2]) < 1e-30f && h[3] == 190.0f && fabsf(h[4]) == 0.0f && h[5] == 1e30f && h[6] == 0.0f,
          "swiglu saturation: %g %g %g %g %g", h[2], h[3], h[4], h[5], h[6]);
    CHECK(fabsf(dg[2]) < 1e-30f && dg[3] == 2.0f && du[3] == 95.0f && dg[5] == 1.0f && du[6] == 0.0f,
          "swiglu backward saturation: dg %g %g %g du %g %g", dg[2], dg[3], dg[5], du[3], du[6]);
}

/* Kernel paths against each other: af_vexpf AVX2 == AVX-512 bit for bit (same arithmetic, vexp.h);
 * RMSNorm forward/backward and RoPE the same bits on every path (documented in ops.h). */
static void test_paths_agree(void) {
    static const char *paths[] = {"scalar", "avx2", "avx512"};
    const int64_t nx = 100003, n = 7, dim = 583, rn = 40, nh = 3, hd = 20;
    float *x = frand(nx, -110, 95);
    float *xr = frand(n * dim, -2, 2), *w = frand(dim, 0.5f, 1.5f), *dy = frand(n * dim, -1, 1);
    float *q = frand(rn * nh * hd, -1, 1);
    int32_t pos[40];
    for (int t = 0; t < rn; t++) pos[t] = t % 8;
    float *ref[5] = {0}, *cur[5];
    size_t len[5] = {(size_t)nx, (size_t)(n * dim), (size_t)(n * dim), (size_t)(rn * nh * hd), (size_t)(rn * nh * hd)};
    const char *what[5] = {"vexpf", "rmsnorm forward", "rmsnorm backward", "rope norm", "rope neox"};
    for (int p = 0; p < 3; p++) {
        if (tl_ctx_set(paths[p], -1, NULL, -1) != AF_OK) continue;
        for (int k = 0; k < 5; k++) cur[k] = calloc(len[k], sizeof(float));
        af_vexpf(T_CTX, cur[0], x, nx);
        float rstd[7];
        af_rmsnorm_forward(T_CTX, cur[1], rstd, xr, w, n, dim, 1e-5f);
        af_rmsnorm_backward(T_CTX, cur[2], NULL, dy, xr, w, rstd, n, dim);
        memcpy(cur[3], q, len[3] * sizeof(float));
        memcpy(cur[4], q, len[4] * sizeof(float));
        af_rope_forward(T_CTX, cur[3], pos, rn, nh, hd, 10000.0f, 0);
        af_rope_forward(T_CTX, cur[4], pos, rn, nh, hd, 10000.0f, 1);
        for (int k = 0; k < 5; k++) {
            if (k == 0 && p == 0) continue; /* the scalar path's exp is libm's */
            if (!ref[k]) {
                ref[k] = cur[k], cur[k] = NULL;
                continue;
            }
            CHECK(memcmp(ref[k], cur[k], len[k] * sizeof(float)) == 0, "%s: path %s differs from the first path",
                  what[k], paths[p]);
        }
        for (int k = 0; k < 5; k++) free(cur[k]);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    for (int k = 0; k < 5; k++) free(ref[k]);
    free(x), free(xr), free(w), free(dy), free(q);
}

/* ================================================================================================
 * Attention
 * ============================================================================================== */
typedef struct {
    int64_t n_q, q_pos0, n_kv, nh, nkh, hd, window;
    double scale;
} att_shape;

static int visible(const att_shape *s, int64_t i, int64_t j) {
    int64_t p = s->q_pos0 + i;
    return j <= p && (s->window <= 0 || p - j < s->window);
}

/* Naive double reference with materialised probabilities P [nh, n_q, n_kv] (P may be NULL). */
static void att_ref(double *out, double *lse, double *P, const double *q, const double *k, const double *v,
                    const att_shape *s) {
    int64_t nh = s->nh, hd = s->hd, grp = s->nh / s->nkh, ks = s->nkh * hd;
    double *sc = malloc((size_t)s->n_kv * sizeof *sc);
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < s->n_q; i++) {
            const double *qi = q + (i * nh + h) * hd;
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s->n_kv; j++) {
                sc[j] = visible(s, i, j) ? dotd(qi, k + j * ks + (h / grp) * hd, hd) * s->scale : -INFINITY;
                if (sc[j] > m) m = sc[j];
            }
            for (int64_t j = 0; j < s->n_kv; j++) sum += (sc[j] = exp(sc[j] - m));
            double *o = out + (i * nh + h) * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0;
            for (int64_t j = 0; j < s->n_kv; j++) {
                double p = sc[j] / sum;
                if (P) P[(h * s->n_q + i) * s->n_kv + j] = p;
                for (int64_t d = 0; d < hd; d++) o[d] += p * v[j * ks + (h / grp) * hd + d];
            }
            if (lse) lse[h * s->n_q + i] = m + log(sum);
        }
    free(sc);
}

/* Analytic double backward from materialised P (the textbook softmax/matmul chain rule). */
static void att_bwd_ref(double *dq, double *dk, double *dv, const double *dout, const double *q,
                        const double *k, const double *v, const att_shape *s) {
    int64_t nh = s->nh, hd = s->hd, grp = s->nh / s->nkh, ks = s->nkh * hd;
    int64_t nq = s->n_q, nkv = s->n_kv;
    double *P = malloc((size_t)(nh * nq * nkv) * sizeof *P), *out = malloc((size_t)(nq * nh * hd) * sizeof *out);
    double *dp = malloc((size_t)nkv * sizeof *dp);
    att_ref(out, NULL, P, q, k, v, s);
    memset(dq, 0, (size_t)(nq * nh * hd) * sizeof *dq);
    memset(dk, 0, (size_t)(nkv * ks) * sizeof *dk);
    memset(dv, 0, (size_t)(nkv * ks) * sizeof *dv);
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < nq; i++) {
            const double *pr = P + (h * nq + i) * nkv, *doi = dout + (i * nh + h) * hd, *qi = q + (i * nh + h) * hd;
            int64_t g = h / grp;
            double sdp = 0;
            for (int64_t j = 0; j < nkv; j++) {
                dp[j] = dotd(doi, v + j * ks + g * hd, hd);
                sdp += pr[j] * dp[j];
            }
            for (int64_t j = 0; j < nkv; j++) {
                double ds = pr[j] * (dp[j] - sdp) * s->scale;
                for (int64_t d = 0; d < hd; d++) {
                    dq[(i * nh + h) * hd + d] += ds * k[j * ks + g * hd + d];
                    dk[j * ks + g * hd + d] += ds * qi[d];
                    dv[j * ks + g * hd + d] += pr[j] * doi[d];
                }
            }
        }
    free(P), free(out), free(dp);
}

typedef struct {
    double *q, *k, *v, *R, *out;
    const att_shape *s;
} att_ctx;
static double att_loss(void *vc) {
    att_ctx *c = vc;
    att_ref(c->out, NULL, NULL, c->q, c->k, c->v, c->s);
    return dotd(c->R, c->out, c->s->n_q * c->s->nh * c->s->hd);
}

/* Forward vs reference; backward vs FD (fd = 1) or vs the analytic double reference (fd = 0). */
static void test_attention(att_shape s, int fd, float qmag) {
    int64_t NQ = s.n_q * s.nh * s.hd, NK = s.n_kv * s.nkh * s.hd;
    float *q = frand(NQ, -qmag, qmag), *k = frand(NK, -1.5f, 1.5f), *v = frand(NK, -1, 1), *R = frand(NQ, -1, 1);
    float *out = malloc((size_t)NQ * sizeof *out), *lse = malloc((size_t)(s.nh * s.n_q) * sizeof *lse);
    att_ctx c = {to_d(q, NQ), to_d(k, NK), to_d(v, NK), to_d(R, NQ), malloc((size_t)NQ * sizeof(double)), &s};
    double *lse_d = malloc((size_t)(s.nh * s.n_q) * sizeof *lse_d);
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "nq=%lld p0=%lld nkv=%lld h=%lld/%lld hd=%lld win=%lld", (long long)s.n_q,
             (long long)s.q_pos0, (long long)s.n_kv, (long long)s.nh, (long long)s.nkh, (long long)s.hd,
             (long long)s.window);
    af_attention_forward(T_CTX, out, lse, q, k, v, s.n_q, s.q_pos0, s.n_kv, s.nkh * s.hd, s.nh, s.nkh, s.hd,
                         (float)s.scale, s.window);
    att_ref(c.out, lse_d, NULL, c.q, c.k, c.v, &s);
    snprintf(what, sizeof what, "attention forward out [%s]", tag);
    CLOSE_D(what, W_FWD, out, 0, c.out, NQ, FWD_ATOL, FWD_RTOL);
    snprintf(what, sizeof what, "attention forward lse [%s]", tag);
    CLOSE_D(what, W_FWD, lse, 0, lse_d, s.nh * s.n_q, FWD_ATOL, FWD_RTOL);

    float *dq = fconst(NQ, 0.25f), *dk = fconst(NK, 0.25f), *dv = fconst(NK, 0.25f);
    af_attention_backward(T_CTX, dq, dk, dv, R, out, lse, q, k, v, s.n_q, s.q_pos0, s.n_kv, s.nh, s.nkh, s.hd,
                          (float)s.scale, s.window);
    double *gq = calloc((size_t)NQ, sizeof *gq), *gk = calloc((size_t)NK, sizeof *gk),
           *gv = calloc((size_t)NK, sizeof *gv);
    int cat = fd ? W_FD : W_ATTBWD;
    const char *how = fd ? "FD" : "analytic";
    if (fd) {
        fd_grad(gq, c.q, NQ, att_loss, &c);
        fd_grad(gk, c.k, NK, att_loss, &c);
        fd_grad(gv, c.v, NK, att_loss, &c);
    } else {
        att_bwd_ref(gq, gk, gv, c.R, c.q, c.k, c.v, &s);
    }
    snprintf(what, sizeof what, "attention dq (%s) [%s]", how, tag);
    CLOSE_D(what, cat, dq, 0.25f, gq, NQ, FD_ATOL, FD_RTOL);
    snprintf(what, sizeof what, "attention dk (%s) [%s]", how, tag);
    CLOSE_D(what, cat, dk, 0.25f, gk, NK, FD_ATOL, FD_RTOL);
    snprintf(what, sizeof what, "attention dv (%s) [%s]", how, tag);
    CLOSE_D(what, cat, dv, 0.25f, gv, NK, FD_ATOL, FD_RTOL);
    if (fd) { /* the FD must agree with the analytic reference too (checks the reference itself) */
        double *aq = malloc((size_t)NQ * sizeof *aq), *ak = malloc((size_t)NK * sizeof *ak),
               *av = malloc((size_t)NK * sizeof *av);
        att_bwd_ref(aq, ak, av, c.R, c.q, c.k, c.v, &s);
        double worst = 0;
        for (int64_t i = 0; i < NQ; i++) worst = fmax(worst, fabs(aq[i] - gq[i]));
        for (int64_t i = 0; i < NK; i++) worst = fmax(worst, fmax(fabs(ak[i] - gk[i]), fabs(av[i] - gv[i])));
        CHECK(worst < 1e-6, "attention analytic double reference vs FD: %.3g [%s]", worst, tag);
        free(aq), free(ak), free(av);
    }
    free(q), free(k), free(v), free(R), free(out), free(lse), free(lse_d), free(dq), free(dk), free(dv);
    free(gq), free(gk), free(gv), free(c.q), free(c.k), free(c.v), free(c.R), free(c.out);
}

/* Strided KV cache (NaN padding) equals compact; decode rows equal the full forward's rows, also
 * when the cache holds NaN garbage beyond the query's position (must never be read). */
static void test_attention_cache(int64_t n, int64_t nh, int64_t nkh, int64_t hd, int64_t window) {
    int64_t NQ = n * nh * hd, kvw = nkh * hd, stride = kvw + 13, cap = n + 5;
    float scale = 1.0f / sqrtf((float)hd);
    float *q = frand(NQ, -2, 2), *k = frand(n * kvw, -2, 2), *v = frand(n * kvw, -1, 1);
    float *kc = fconst(cap * stride, NAN), *vc = fconst(cap * stride, NAN);
    for (int64_t j = 0; j < n; j++) {
        memcpy(kc + j * stride, k + j * kvw, (size_t)kvw * sizeof(float));
        memcpy(vc + j * stride, v + j * kvw, (size_t)kvw * sizeof(float));
    }
    float *out = malloc((size_t)NQ * sizeof *out), *out2 = malloc((size_t)NQ * sizeof *out2);
    float *lse = malloc((size_t)(nh * n) * sizeof *lse), *lse2 = malloc((size_t)(nh * n) * sizeof *lse2);
    af_attention_forward(T_CTX, out, lse, q, k, v, n, 0, n, kvw, nh, nkh, hd, scale, window);
    af_attention_forward(T_CTX, out2, lse2, q, kc, vc, n, 0, n, stride, nh, nkh, hd, scale, window);
    CHECK_CLOSE("attention strided KV == compact (out)", out2, out, (size_t)NQ, 0, 0);
    CHECK_CLOSE("attention strided KV == compact (lse)", lse2, lse, (size_t)(nh * n), 0, 0);
    /* decode: each row i with q_pos0 = i, against a cache of n_kv = i+1 and of n_kv = cap (NaN tail) */
    float *o1 = malloc((size_t)(nh * hd) * sizeof *o1), l1[64];
    int bad_exact = 0, bad_cap = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int pass = 0; pass < 2; pass++) {
            int64_t nkv = pass ? cap : i + 1;
            af_attention_forward(T_CTX, o1, l1, q + i * nh * hd, kc, vc, 1, i, nkv, stride, nh, nkh, hd, scale, window);
            int same = memcmp(o1, out + i * nh * hd, (size_t)(nh * hd) * sizeof *o1) == 0;
            for (int64_t h = 0; h < nh; h++) same &= l1[h] == lse[h * n + i];
            if (!same) *(pass ? &bad_cap : &bad_exact) += 1;
        }
    }
    CHECK(bad_exact == 0, "decode rows (n_kv = pos+1) differ from the full forward: %d rows", bad_exact);
    CHECK(bad_cap == 0, "decode rows (n_kv = capacity, NaN tail) differ from the full forward: %d rows", bad_cap);
    free(q), free(k), free(v), free(kc), free(vc), free(out), free(out2), free(lse), free(lse2), free(o1);
}

/* ================================================================================================ */
static void run_all(void) {
    /* RMSNorm: FD on small shapes; forward at SmolLM2 width (parallel path) */
    test_rmsnorm(3, 16, 1);
    test_rmsnorm(2, 37, 1);
    test_rmsnorm(64, 576, 0);
    /* RoPE both modes, FD, and large positions with both gemma bases */
    for (int neox = 0; neox < 2; neox++) {
        test_rope(3, 2, 8, 10000.0f, neox, 50, 1, 0);
        test_rope(2, 3, 16, 1e6f, neox, 500, 1, 0);
        test_rope(40, 9, 64, 10000.0f, neox, 8192, 0, 0);
        test_rope(20, 4, 256, 1e6f, neox, 30000, 0, 0);
        test_rope(48, 2, 12, 10000.0f, neox, 7, 1, 1);     /* packed: table path, FD; SIMD tails */
        test_rope(512, 9, 64, 10000.0f, neox, 127, 0, 1);  /* packed at SmolLM2 shape (parallel) */
        test_rope(64, 2, 256, 1e6f, neox, 31, 0, 1);       /* packed, gemma head_dim */
        test_rope_table_vs_token(64, 3, 64, neox);
        test_rope_table_vs_token(40, 2, 20, neox);
    }
    /* gated activations: FD, wide-range values, and a large (parallel) forward */
    for (int gelu = 0; gelu < 2; gelu++) {
        test_glu(50, gelu, 4.0f, 1);
        test_glu(200, gelu, 30.0f, 0);
        test_glu(40000, gelu, 6.0f, 0);
    }
    test_misc();
    test_vexpf();
    test_swiglu_special();
    /* attention: FD on small shapes */
    const att_shape fd_shapes[] = {
        {7, 0, 7, 6, 2, 8, 0, 0},    /* GQA 6/2, causal */
        {7, 0, 7, 6, 2, 8, 3, 0},    /* sliding window < sequence */
        {5, 4, 11, 4, 1, 16, 0, 0},  /* q_pos0 > 0, n_kv > q_pos0+n_q (unseen keys get 0 grad) */
        {6, 3, 9, 6, 2, 16, 4, 0},   /* q_pos0 > 0 and window */
        {4, 0, 4, 3, 3, 20, 0, 0},   /* MHA, head_dim with SIMD tails */
        {1, 6, 7, 2, 1, 8, 0, 0},    /* decode-shaped */
        {5, 2, 7, 10, 2, 8, 3, 0},   /* group of 5 query heads (> 4: two head sub-groups per item) */
    };
    for (size_t i = 0; i < sizeof fd_shapes / sizeof fd_shapes[0]; i++) {
        att_shape s = fd_shapes[i];
        s.scale = 1.0 / sqrt((double)s.hd);
        test_attention(s, 1, 1.5f);
    }
    /* model shapes vs the double references (parallel and SIMD paths) */
    att_shape smol = {48, 0, 48, 9, 3, 64, 0, 0.125};
    test_attention(smol, 0, 1.5f);
    test_attention(smol, 0, 25.0f); /* peaky softmax: scores spread over ~±60 */
    att_shape gemma = {24, 8, 40, 4, 1, 256, 16, 1.0 / 16};
    test_attention(gemma, 0, 1.5f);
    att_shape smol_dec = {1, 299, 300, 9, 3, 64, 0, 0.125};
    test_attention(smol_dec, 0, 1.5f);
    test_attention_cache(20, 6, 2, 16, 0);
    test_attention_cache(20, 4, 1, 256, 7);
    test_attention_cache(70, 9, 3, 64, 0); /* > ATT_BLK keys: online-softmax rescaling */
    test_attention_cache(9, 9, 1, 12, 4);  /* group of 9: sub-groups of 4+4+1 heads */
    test_attention_cache(160, 9, 3, 64, 0); /* decode rows over >= 114 keys: parallel, one head per item */
}

int main(void) {
    const char *paths[] = {"scalar", "avx2", "avx512"};
    for (int p = 0; p < 3; p++) {
        if (tl_ctx_set(paths[p], -1, NULL, -1) != AF_OK) {
            tl_skip("kernel path %s not supported by this CPU", paths[p]);
            continue;
        }
        printf("-- kernel path %s\n", paths[p]);
        run_all();
    }
    tl_ctx_set("auto", -1, NULL, -1);
    test_paths_agree();
    for (int i = 0; i < W_COUNT; i++) printf("worst %s: %.3g\n", g_wname[i], g_worst[i]);
    return tl_finish("ops");
}
