/*
 * test_head.c — pooling, classification head and losses (src/train/head.c).
 *
 * 1. Forward values against double-precision reference implementations written here.
 * 2. Gradients against central finite differences of those double references (step 1e-4 in
 *    double, so the FD error ~1e-8 is far below the float tolerance): pool (mean and last, packed
 *    samples of lengths 1, 3, 5, 2, 7; H both below and above the 512 chunk and not a multiple of
 *    the 16 dot lanes), head (W, bias and pooled grads), weighted CE, BCE, and the whole chain
 *    hidden -> mean pool -> head -> weighted CE. Tolerance |analytic − FD| <= 2e-6 + 1e-4·|FD|.
 * 3. Hand-computed losses and gradients, the accumulate (+=) contracts, invalid labels.
 * 4. Stability: logits ±1000 give the exact finite loss and gradient.
 */
#include "train/head.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FD_H 1e-4
#define GRAD_ATOL 2e-6
#define GRAD_RTOL 1e-4

/* ---------------------------------------------------------------- double references */

static void pool_ref(double *out, const double *hid, const int32_t *ss, int B, int64_t H, af_pooling pool) {
    for (int b = 0; b < B; b++) {
        const int s = ss[b], e = ss[b + 1];
        for (int64_t j = 0; j < H; j++) {
            if (pool == AF_POOL_LAST) {
                out[b * H + j] = hid[(int64_t)(e - 1) * H + j];
                continue;
            }
            double a = 0;
            for (int t = s; t < e; t++) a += hid[(int64_t)t * H + j];
            out[b * H + j] = a / (e - s);
        }
    }
}

static void head_ref(double *logits, const double *pooled, const double *W, const double *bias, int B, int64_t H,
                     int C) {
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double a = bias ? bias[c] : 0.0;
            for (int64_t j = 0; j < H; j++) a += pooled[b * H + j] * W[c * H + j];
            logits[b * C + c] = a;
        }
}

static double ce_ref(const double *x, const int32_t *y, const float *w, int B, int C) {
    double tot = 0;
    for (int b = 0; b < B; b++) {
        double m = -INFINITY, z = 0;
        for (int c = 0; c < C; c++) m = fmax(m, x[b * C + c]);
        for (int c = 0; c < C; c++) z += exp(x[b * C + c] - m);
        tot += -(w ? w[y[b]] : 1.0) * (x[b * C + y[b]] - m - log(z));
    }
    return tot / B;
}

static double bce_ref(const double *x, const float *t, int B, int C) {
    double tot = 0;
    for (int i = 0; i < B * C; i++) {
        const double p = 1.0 / (1.0 + exp(-x[i]));
        tot += -(t[i] * log(p) + (1 - t[i]) * log1p(-p));
    }
    return tot / (B * C);
}

/* ---------------------------------------------------------------- helpers */

static void fill(float *f, double *d, size_t n, uint64_t *rs, float scale) {
    for (size_t i = 0; i < n; i++) {
        f[i] = tl_rand_normal(rs) * scale;
        if (d) d[i] = f[i];
    }
}

static double dot_d(const double *a, const float *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * r[i];
    return s;
}

/* ---------------------------------------------------------------- tests */

static void test_pool(int64_t H) {
    const int32_t ss[] = {0, 1, 4, 9, 11, 18}; /* lengths 1, 3, 5, 2, 7 */
    const int B = 5, T = 18;
    uint64_t rs = 11 + (uint64_t)H;
    float *hid = malloc(sizeof(float) * T * H), *pooled = malloc(sizeof(float) * B * H);
    double *hd = malloc(sizeof(double) * T * H), *pd = malloc(sizeof(double) * B * H);
    float *R = malloc(sizeof(float) * B * H), *dh = malloc(sizeof(float) * T * H), *fd = malloc(sizeof(float) * T * H);
    float *fpd = malloc(sizeof(float) * B * H), *dhs = malloc(sizeof(float) * T * H);
    fill(hid, hd, (size_t)T * H, &rs, 1.0f);
    fill(R, NULL, (size_t)B * H, &rs, 1.0f);
    for (int mode = 0; mode < 2; mode++) {
        const af_pooling pool = mode ? AF_POOL_LAST : AF_POOL_MEAN;
        char what[96];
        af_pool_forward(pooled, hid, ss, B, H, pool);
        pool_ref(pd, hd, ss, B, H, pool);
        for (int64_t i = 0; i < B * H; i++) fpd[i] = (float)pd[i];
        snprintf(what, sizeof what, "pool %s forward H=%lld", mode ? "last" : "mean", (long long)H);
        CHECK_CLOSE(what, pooled, fpd, (size_t)B * H, 1e-7, 1e-6);
        /* L = Σ R ⊙ pooled; backward accumulates into a non-zero d_hidden */
        for (int64_t i = 0; i < T * H; i++) dh[i] = 0.5f;
        af_pool_backward(dh, R, ss, B, H, pool);
        /* FD of every element for small H; a strided subset (every 7th) for large H */
        const int64_t stride = H > 64 ? 7 : 1;
        size_t nchk = 0;
        for (int64_t i = 0; i < T * H; i += stride) {
            const double keep = hd[i];
            hd[i] = keep + FD_H;
            pool_ref(pd, hd, ss, B, H, pool);
            const double lp = dot_d(pd, R, (size_t)B * H);
            hd[i] = keep - FD_H;
            pool_ref(pd, hd, ss, B, H, pool);
            const double lm = dot_d(pd, R, (size_t)B * H);
            hd[i] = keep;
            fd[nchk] = (float)((lp - lm) / (2 * FD_H) + 0.5);
            dhs[nchk++] = dh[i];
        }
        snprintf(what, sizeof what, "pool %s backward vs FD (+= 0.5) H=%lld", mode ? "last" : "mean", (long long)H);
        CHECK_CLOSE(what, dhs, fd, nchk, GRAD_ATOL, GRAD_RTOL);
    }
    free(hid), free(pooled), free(hd), free(pd), free(R), free(dh), free(fd), free(fpd), free(dhs);
}

static void test_head_grads(int B, int64_t H, int C) {
    uint64_t rs = 99 + (uint64_t)H;
    const size_t nP = (size_t)B * H, nW = (size_t)C * H;
    float *P = malloc(sizeof(float) * nP), *W = malloc(sizeof(float) * nW), *bias = malloc(sizeof(float) * C);
    double *Pd = malloc(sizeof(double) * nP), *Wd = malloc(sizeof(double) * nW), *bd = malloc(sizeof(double) * C);
    float *R = malloc(sizeof(float) * B * C), *logits = malloc(sizeof(float) * B * C), *lref = malloc(sizeof(float) * B * C);
    double *ld = malloc(sizeof(double) * B * C);
    float *dP = calloc(nP, sizeof(float)), *dW = calloc(nW, sizeof(float)), *db = calloc(C, sizeof(float));
    float *fdP = malloc(sizeof(float) * nP), *fdW = malloc(sizeof(float) * nW), *fdb = malloc(sizeof(float) * C);
    fill(P, Pd, nP, &rs, 1.0f);
    fill(W, Wd, nW, &rs, 0.1f);
    fill(bias, bd, C, &rs, 0.5f);
    fill(R, NULL, (size_t)B * C, &rs, 1.0f);
    char what[96];

    af_head_forward(T_CTX, logits, P, W, bias, B, H, C);
    head_ref(ld, Pd, Wd, bd, B, H, C);
    for (int i = 0; i < B * C; i++) lref[i] = (float)ld[i];
    snprintf(what, sizeof what, "head forward B=%d H=%lld C=%d", B, (long long)H, C);
    CHECK_CLOSE(what, logits, lref, (size_t)B * C, 1e-5, 1e-5);
    af_head_forward(T_CTX, logits, P, W, NULL, B, H, C);
    head_ref(ld, Pd, Wd, NULL, B, H, C);
    for (int i = 0; i < B * C; i++) lref[i] = (float)ld[i];
    CHECK_CLOSE("head forward, no bias", logits, lref, (size_t)B * C, 1e-5, 1e-5);

    /* L = Σ R ⊙ logits: dW = Rᵀ P, db = column sums of R, dP = R W (accumulated onto zeros) */
    af_head_backward(T_CTX, dP, dW, db, R, P, W, B, H, C);
    struct { double *x; float *fd; size_t n; } sets[3] = {{Pd, fdP, nP}, {Wd, fdW, nW}, {bd, fdb, (size_t)C}};
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < sets[s].n; i++) {
            const double keep = sets[s].x[i];
            sets[s].x[i] = keep + FD_H;
            head_ref(ld, Pd, Wd, bd, B, H, C);
            const double lp = dot_d(ld, R, (size_t)B * C);
            sets[s].x[i] = keep - FD_H;
            head_ref(ld, Pd, Wd, bd, B, H, C);
            const double lm = dot_d(ld, R, (size_t)B * C);
            sets[s].x[i] = keep;
            sets[s].fd[i] = (float)((lp - lm) / (2 * FD_H));
        }
    CHECK_CLOSE("head dW vs FD", dW, fdW, nW, GRAD_ATOL, GRAD_RTOL);
    CHECK_CLOSE("head dbias vs FD", db, fdb, (size_t)C, GRAD_ATOL, GRAD_RTOL);
    CHECK_CLOSE("head d_pooled vs FD", dP, fdP, nP, GRAD_ATOL, GRAD_RTOL);
    /* accumulate contract: a second backward doubles everything; NULL dbias / d_pooled allowed */
    af_head_backward(T_CTX, NULL, dW, NULL, R, P, W, B, H, C);
    for (size_t i = 0; i < nW; i++) fdW[i] *= 2;
    CHECK_CLOSE("head dW accumulates (+=), NULL dbias/d_pooled", dW, fdW, nW, 2 * GRAD_ATOL, GRAD_RTOL);
    free(P), free(W), free(bias), free(Pd), free(Wd), free(bd), free(R), free(logits), free(lref), free(ld);
    free(dP), free(dW), free(db), free(fdP), free(fdW), free(fdb);
}

static void test_ce_grads(void) {
    enum { B = 6, C = 5 };
    uint64_t rs = 5;
    float x[B * C], d[B * C], probs[B * C], fd[B * C];
    double xd[B * C];
    const int32_t y[B] = {0, 4, 2, 2, 1, 3};
    const float w[C] = {0.5f, 2.0f, 1.0f, 3.0f, 0.25f};
    fill(x, xd, B * C, &rs, 3.0f);
    for (int weighted = 0; weighted < 2; weighted++) {
        const float *cw = weighted ? w : NULL;
        const double loss = af_ce_loss(d, probs, x, y, cw, B, C);
        const double want = ce_ref(xd, y, cw, B, C);
        CHECK(fabs(loss - want) <= 1e-12 * fabs(want) + 1e-12, "CE loss (%s) %.15g want %.15g",
              weighted ? "weighted" : "plain", loss, want);
        for (int i = 0; i < B * C; i++) {
            const double keep = xd[i];
            xd[i] = keep + FD_H;
            const double lp = ce_ref(xd, y, cw, B, C);
            xd[i] = keep - FD_H;
            const double lm = ce_ref(xd, y, cw, B, C);
            xd[i] = keep;
            fd[i] = (float)((lp - lm) / (2 * FD_H));
        }
        CHECK_CLOSE(weighted ? "CE d_logits vs FD (class weights)" : "CE d_logits vs FD", d, fd, B * C, GRAD_ATOL,
                    GRAD_RTOL);
        double worst = 0;
        for (int b = 0; b < B; b++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += probs[b * C + c];
            worst = fmax(worst, fabs(s - 1));
        }
        CHECK(worst < 1e-6, "softmax rows sum to 1 (worst %.3g)", worst);
    }
    /* a NULL probs pointer is allowed and gives the same gradient */
    float d2[B * C];
    af_ce_loss(d2, NULL, x, y, w, B, C);
    af_ce_loss(d, probs, x, y, w, B, C);
    CHECK(memcmp(d, d2, sizeof d) == 0, "CE with probs NULL: same gradient");
}

static void test_bce_grads(void) {
    enum { B = 4, C = 6 };
    uint64_t rs = 17;
    float x[B * C], d[B * C], fd[B * C], t[B * C];
    double xd[B * C];
    fill(x, xd, B * C, &rs, 4.0f);
    for (int i = 0; i < B * C; i++) t[i] = (float)(tl_rand_u64(&rs) & 1);
    const double loss = af_bce_loss(d, x, t, B, C);
    const double want = bce_ref(xd, t, B, C);
    CHECK(fabs(loss - want) <= 1e-12 * fabs(want) + 1e-12, "BCE loss %.15g want %.15g", loss, want);
    for (int i = 0; i < B * C; i++) {
        const double keep = xd[i];
        xd[i] = keep + FD_H;
        const double lp = bce_ref(xd, t, B, C);
        xd[i] = keep - FD_H;
        const double lm = bce_ref(xd, t, B, C);
        xd[i] = keep;
        fd[i] = (float)((lp - lm) / (2 * FD_H));
    }
    CHECK_CLOSE("BCE d_logits vs FD", d, fd, B * C, GRAD_ATOL, GRAD_RTOL);
}

/* hidden -> mean pool -> head -> weighted CE, gradients w.r.t. hidden and W */
static double chain_ref(const double *hd, const double *Wd, const double *bd, const int32_t *ss, const int32_t *y,
                        const float *w, int B, int64_t H, int C) {
    double pd[4 * 24], ld[4 * 3];
    pool_ref(pd, hd, ss, B, H, AF_POOL_MEAN);
    head_ref(ld, pd, Wd, bd, B, H, C);
    return ce_ref(ld, y, w, B, C);
}

static void test_chain(void) {
    enum { B = 4, H = 24, C = 3, T = 10 };
    const int32_t ss[B + 1] = {0, 1, 4, 8, 10};
    const int32_t y[B] = {2, 0, 1, 2};
    const float w[C] = {1.0f, 2.0f, 0.5f};
    uint64_t rs = 23;
    float hid[T * H], W[C * H], bias[C], pooled[B * H], logits[B * C], dl[B * C];
    double hd[T * H], Wd[C * H], bd[C];
    fill(hid, hd, T * H, &rs, 1.0f);
    fill(W, Wd, C * H, &rs, 0.5f);
    fill(bias, bd, C, &rs, 0.2f);
    af_pool_forward(pooled, hid, ss, B, H, AF_POOL_MEAN);
    af_head_forward(T_CTX, logits, pooled, W, bias, B, H, C);
    const double loss = af_ce_loss(dl, NULL, logits, y, w, B, C);
    const double want = chain_ref(hd, Wd, bd, ss, y, w, B, H, C);
    CHECK(fabs(loss - want) < 1e-6 * fabs(want), "chain loss %.9g want %.9g", loss, want);
    float dP[B * H] = {0}, dW[C * H] = {0}, db[C] = {0}, dh[T * H] = {0}, fdh[T * H], fdW[C * H];
    af_head_backward(T_CTX, dP, dW, db, dl, pooled, W, B, H, C);
    af_pool_backward(dh, dP, ss, B, H, AF_POOL_MEAN);
    for (int i = 0; i < T * H; i++) {
        const double keep = hd[i];
        hd[i] = keep + FD_H;
        const double lp = chain_ref(hd, Wd, bd, ss, y, w, B, H, C);
        hd[i] = keep - FD_H;
        const double lm = chain_ref(hd, Wd, bd, ss, y, w, B, H, C);
        hd[i] = keep;
        fdh[i] = (float)((lp - lm) / (2 * FD_H));
    }
    for (int i = 0; i < C * H; i++) {
        const double keep = Wd[i];
        Wd[i] = keep + FD_H;
        const double lp = chain_ref(hd, Wd, bd, ss, y, w, B, H, C);
        Wd[i] = keep - FD_H;
        const double lm = chain_ref(hd, Wd, bd, ss, y, w, B, H, C);
        Wd[i] = keep;
        fdW[i] = (float)((lp - lm) / (2 * FD_H));
    }
    CHECK_CLOSE("chain d_hidden vs FD", dh, fdh, T * H, GRAD_ATOL, GRAD_RTOL);
    CHECK_CLOSE("chain dW vs FD", dW, fdW, C * H, GRAD_ATOL, GRAD_RTOL);
}

static void test_hand_values(void) {
    /* CE: sample 0 logits (0, 0) label 0 weight 2; sample 1 logits (ln 3, 0) label 1 weight 1:
     * loss = (2 ln 2 + ln 4) / 2 = 2 ln 2; d = (2·(½ − 1, ½), 1·(¾, ¼ − 1)) / 2 */
    const float x[4] = {0.0f, 0.0f, (float)log(3.0), 0.0f};
    const int32_t y[2] = {0, 1};
    const float w[2] = {2.0f, 1.0f};
    float d[4], probs[4];
    double loss = af_ce_loss(d, probs, x, y, w, 2, 2);
    CHECK(fabs(loss - 2 * log(2.0)) < 1e-7, "CE weighted hand value %.9g want %.9g", loss, 2 * log(2.0));
    const float dw[4] = {-0.5f, 0.5f, 0.375f, -0.375f}, pw[4] = {0.5f, 0.5f, 0.75f, 0.25f};
    CHECK_CLOSE("CE weighted hand gradient", d, dw, 4, 1e-7, 0);
    CHECK_CLOSE("CE hand probs", probs, pw, 4, 1e-7, 0);
    loss = af_ce_loss(d, NULL, x, y, NULL, 2, 2);
    CHECK(fabs(loss - 1.5 * log(2.0)) < 1e-7, "CE unweighted hand value %.9g want %.9g", loss, 1.5 * log(2.0));
    /* BCE: x (0, 2, −3), t (1, 0, 1): mean of ln 2, 2 + ln(1+e^−2), 3 + ln(1+e^−3) */
    const float bx[3] = {0.0f, 2.0f, -3.0f}, bt[3] = {1.0f, 0.0f, 1.0f};
    float bd[3];
    loss = af_bce_loss(bd, bx, bt, 1, 3);
    const double bwant = (log(2.0) + 2 + log1p(exp(-2.0)) + 3 + log1p(exp(-3.0))) / 3;
    CHECK(fabs(loss - bwant) < 1e-7, "BCE hand value %.9g want %.9g", loss, bwant);
    const float bdw[3] = {(float)(-0.5 / 3), (float)(1 / (1 + exp(-2.0)) / 3), (float)((1 / (1 + exp(3.0)) - 1) / 3)};
    CHECK_CLOSE("BCE hand gradient", bd, bdw, 3, 1e-7, 0);
    /* degenerate sizes and invalid labels */
    CHECK(af_ce_loss(NULL, NULL, NULL, NULL, NULL, 0, 3) == 0.0, "CE with B = 0 is 0");
    CHECK(af_bce_loss(NULL, NULL, NULL, 0, 3) == 0.0, "BCE with B = 0 is 0");
    const int32_t ybad[2] = {0, 2};
    d[2] = d[3] = 7.0f;
    loss = af_ce_loss(d, NULL, x, ybad, NULL, 2, 2);
    CHECK(isnan(loss) && d[2] == 0.0f && d[3] == 0.0f, "CE label out of range -> NaN, zero row");
}

static void test_stability(void) {
    const float x[3] = {1000.0f, -1000.0f, 0.0f};
    float d[3], probs[3];
    int32_t y = 1;
    double loss = af_ce_loss(d, probs, x, &y, NULL, 1, 3);
    const float d1[3] = {1.0f, -1.0f, 0.0f}, p1[3] = {1.0f, 0.0f, 0.0f};
    CHECK(isfinite(loss) && fabs(loss - 2000.0) < 1e-9, "CE logits ±1000, wrong class: loss %.12g want 2000", loss);
    CHECK_CLOSE("CE ±1000 gradient", d, d1, 3, 1e-7, 0);
    CHECK_CLOSE("CE ±1000 probs", probs, p1, 3, 1e-7, 0);
    y = 0;
    loss = af_ce_loss(d, NULL, x, &y, NULL, 1, 3);
    const float d0[3] = {0.0f, 0.0f, 0.0f};
    CHECK(loss == 0.0, "CE logits ±1000, right class: loss %.3g want 0", loss);
    CHECK_CLOSE("CE ±1000 gradient, right class", d, d0, 3, 1e-7, 0);
    const float xs[3] = {-1000.0f, -1000.0f, -1000.0f};
    loss = af_ce_loss(d, NULL, xs, &y, NULL, 1, 3);
    CHECK(fabs(loss - log(3.0)) < 1e-12, "CE all −1000: ln 3 (%.12g)", loss);

    const float bx[4] = {1000.0f, -1000.0f, 1000.0f, -1000.0f}, bt[4] = {0, 1, 1, 0};
    float bd[4];
    loss = af_bce_loss(bd, bx, bt, 2, 2);
    const float bdw[4] = {0.25f, -0.25f, 0.0f, 0.0f};
    CHECK(isfinite(loss) && fabs(loss - 500.0) < 1e-9, "BCE ±1000: loss %.12g want 500", loss);
    CHECK_CLOSE("BCE ±1000 gradient", bd, bdw, 4, 1e-7, 0);
}

int main(void) {
    test_pool(37);
    test_pool(600); /* > 512-element chunk of the mean pooling */
    test_head_grads(5, 37, 4);
    test_head_grads(3, 100, 7);
    test_ce_grads();
    test_bce_grads();
    test_chain();
    test_hand_values();
    test_stability();
    return tl_finish("test_head");
}
