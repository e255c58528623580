/*
 * test_dora.c — DoRA (src/lora/dora.h):
 *  (a) one projection against PEFT (tests/fixtures/dora_ref.safetensors from tests/ref/make_dora_ref.py:
 *      peft 0.21 use_dora=True, float64): the initial magnitude (row norms of W), the output y and
 *      the gradients of A, B, m and x, without dropout and with a fixed dropout mask, computed the way
 *      the engine composes a DoRA projection (frozen products, af_lora_forward / af_lora_backward,
 *      af_dora_*); the merged weight against PEFT's merge_and_unload;
 *  (b) finite differences of the same composition (loss = Σ y·dy, the norm held at its value, as the
 *      backward detaches it): dA, dB, dm, dx;
 * Tolerances: PEFT parity 2e-5 relative to each tensor's largest entry (float32 vs float64);
 * finite differences (central, h = 1e-2 · max(1, |θ|)) 2e-3 relative.
 */
#include "testlib.h"

#include "core/blocks.h"
#include "formats/safetensors.h"
#include "kernels/train_ops.h"
#include "lora/dora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIX "tests/fixtures/dora_ref.safetensors"

typedef struct proj {
    int64_t n, in, out;
    int32_t r;
    float s;
    float *W, *A, *B, *m, *x, *mask; /* mask NULL: no dropout */
} proj;

static void xwt(float *y, const float *x, const float *W, int64_t n, int64_t in, int64_t out) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)x[t * in + i] * W[o * in + i];
            y[t * out + o] = (float)s;
        }
}
static void dyw(float *dx, const float *dy, const float *W, int64_t n, int64_t in, int64_t out) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0;
            for (int64_t o = 0; o < out; o++) s += (double)dy[t * out + o] * W[o * in + i];
            dx[t * in + i] = (float)s;
        }
}

/* Forward: y [n, out]; y_pre, xa, nrm filled. nrm_fixed: use it instead of computing the norm. */
static void fwd(const proj *P, float *y, float *y_pre, float *xa, float *nrm, const float *nrm_fixed) {
    const int64_t n = P->n, in = P->in, out = P->out;
    if (nrm_fixed) memcpy(nrm, nrm_fixed, sizeof(float) * (size_t)out);
    else af_dora_weight_norm(T_CTX, nrm, P->W, AF_TYPE_F32, P->A, P->B, in, out, P->r, P->s);
    xwt(y, P->x, P->W, n, in, out);
    if (!P->mask) {
        memcpy(y_pre, y, sizeof(float) * (size_t)(n * out));
        af_lora_forward(T_CTX, y_pre, xa, P->x, NULL, P->A, P->B, n, in, out, P->r, P->s);
        af_dora_scale(y, y_pre, P->m, nrm, n, out, 0.0f);
        return;
    }
    float *xd = malloc(sizeof(float) * (size_t)(n * in));
    for (int64_t k = 0; k < n * in; k++) xd[k] = P->x[k] * P->mask[k];
    xwt(y_pre, xd, P->W, n, in, out);
    for (int64_t k = 0; k < n * out; k++) y[k] -= y_pre[k];
    af_lora_forward(T_CTX, y_pre, xa, P->x, P->mask, P->A, P->B, n, in, out, P->r, P->s);
    float *gy = malloc(sizeof(float) * (size_t)(n * out));
    af_dora_scale(gy, y_pre, P->m, nrm, n, out, 0.0f);
    for (int64_t k = 0; k < n * out; k++) y[k] += gy[k];
    free(xd), free(gy);
}

static void bwd(const proj *P, const float *dy, const float *y_pre, const float *xa, const float *nrm, float *dA,
                float *dB, float *dm, float *dx) {
    const int64_t n = P->n, in = P->in, out = P->out;
    af_dora_dmag(dm, dy, y_pre, nrm, n, out);
    float *dyg = malloc(sizeof(float) * (size_t)(n * out)), *tmp = malloc(sizeof(float) * (size_t)(n * (in + P->r)));
    af_dora_scale(dyg, dy, P->m, nrm, n, out, 0.0f);
    if (!P->mask) {
        dyw(dx, dyg, P->W, n, in, out);
    } else {
        dyw(dx, dy, P->W, n, in, out);
        float *t = malloc(sizeof(float) * (size_t)(n * out));
        af_dora_scale(t, dy, P->m, nrm, n, out, 1.0f);
        dyw(tmp, t, P->W, n, in, out);
        for (int64_t k = 0; k < n * in; k++) dx[k] += tmp[k] * P->mask[k];
        free(t);
    }
    af_lora_backward(T_CTX, dx, dA, dB, tmp, dyg, P->x, xa, P->mask, P->A, P->B, n, in, out, P->r, P->s);
    free(dyg), free(tmp);
}

static float *rd(af_st_file *f, const char *name, size_t *n) {
    const af_st_tensor *t = af_st_find(f, name);
    if (!CHECK(t != NULL, "%s: tensor %s missing (tests/ref/make_dora_ref.py)", FIX, name)) return calloc(1, 4);
    float *x = malloc(sizeof(float) * t->n_elem);
    af_st_read_f32(f, t, x, t->n_elem);
    if (n) *n = t->n_elem;
    return x;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        md = fmax(md, fabs((double)a[i] - b[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

/* loss(θ) = Σ y·dy with the norm fixed at nrm0 */
static double loss_at(const proj *P, const float *dy, const float *nrm0) {
    const int64_t n = P->n, out = P->out;
    float *y = malloc(sizeof(float) * (size_t)(n * out)), *yp = malloc(sizeof(float) * (size_t)(n * out)),
          *xa = malloc(sizeof(float) * (size_t)(n * P->r)), *nr = malloc(sizeof(float) * (size_t)out);
    fwd(P, y, yp, xa, nr, nrm0);
    double s = 0;
    for (int64_t k = 0; k < n * out; k++) s += (double)y[k] * dy[k];
    free(y), free(yp), free(xa), free(nr);
    return s;
}

static void fd_check(const char *what, proj *P, float *theta, const float *grad, size_t cnt, const float *dy,
                     const float *nrm0) {
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < cnt; i++) gmax = fmax(gmax, fabs((double)grad[i]));
    for (size_t i = 0; i < cnt; i++) {
        const float keep = theta[i], h = 1e-2f * fmaxf(1.0f, fabsf(keep));
        theta[i] = keep + h;
        const double lp = loss_at(P, dy, nrm0);
        theta[i] = keep - h;
        const double lm = loss_at(P, dy, nrm0);
        theta[i] = keep;
        const double fd = (lp - lm) / (2.0 * (double)h);
        worst = fmax(worst, fabs(fd - grad[i]));
    }
    CHECK(worst <= 2e-3 * fmax(gmax, 1e-3), "%s: finite differences vs backward: max |diff| %.3g (max |grad| %.3g)",
          what, worst, gmax);
}

static void test_peft(void) {
    af_st_file *f = NULL;
    if (!CHECK(af_st_open(FIX, &f) == AF_OK, "open %s: %s", FIX, af_last_error())) return;
    size_t nW, nA, nx;
    proj P = {0};
    P.W = rd(f, "W", &nW);
    P.A = rd(f, "A", &nA);
    P.B = rd(f, "B", NULL);
    P.m = rd(f, "m", NULL);
    P.x = rd(f, "x", &nx);
    float *dy = rd(f, "dy", NULL), *mask = rd(f, "mask", NULL), *sc = rd(f, "scale", NULL);
    float *nrm0 = rd(f, "nrm0", NULL), *merged = rd(f, "merged", NULL);
    P.out = 16, P.in = 24, P.r = 4, P.n = 5, P.s = sc[0];
    if (!CHECK(nW == 16 * 24 && nA == 4 * 24 && nx == 5 * 24, "fixture shapes")) goto out;
    { /* the initial magnitude: row norms of W (B = 0) */
        float *B0 = calloc(16 * 4, sizeof(float)), nr[16];
        af_dora_weight_norm(T_CTX, nr, P.W, AF_TYPE_F32, P.A, B0, P.in, P.out, P.r, P.s);
        CHECK(rel_err(nr, nrm0, 16) < 1e-6, "initial magnitude = PEFT's: %.2e", rel_err(nr, nrm0, 16));
        free(B0);
    }
    for (int c = 0; c < 2; c++) {
        const char *cs = c ? "drop" : "nodrop";
        P.mask = c ? mask : NULL;
        float y[80], yp[80], xa[20], nrm[16], dA[96] = {0}, dB[64] = {0}, dm[16] = {0}, dx[120];
        fwd(&P, y, yp, xa, nrm, NULL);
        bwd(&P, dy, yp, xa, nrm, dA, dB, dm, dx);
        static const char *const names[5] = {"y", "dA", "dB", "dm", "dx"};
        const float *got[5] = {y, dA, dB, dm, dx};
        const size_t cnt[5] = {80, 96, 64, 16, 120};
        for (int k = 0; k < 5; k++) {
            char nm[32];
            snprintf(nm, sizeof nm, "%s.%s", cs, names[k]);
            size_t nr = 0;
            float *ref = rd(f, nm, &nr);
            const double e = nr == cnt[k] ? rel_err(got[k], ref, cnt[k]) : 1.0;
            CHECK(e < 2e-5, "%s vs PEFT: max |diff| / max |ref| = %.2e", nm, e);
            free(ref);
        }
        /* (b) finite differences, the norm held */
        fd_check(c ? "dA (dropout)" : "dA", &P, P.A, dA, 96, dy, nrm);
        fd_check(c ? "dB (dropout)" : "dB", &P, P.B, dB, 64, dy, nrm);
        fd_check(c ? "dm (dropout)" : "dm", &P, P.m, dm, 16, dy, nrm);
        fd_check(c ? "dx (dropout)" : "dx", &P, P.x, dx, 120, dy, nrm);
    }
    { /* merge */
        float Wd[16 * 24];
        memcpy(Wd, P.W, sizeof Wd);
        af_dora_merge(Wd, P.A, P.B, P.m, P.in, P.out, P.r, P.s);
        CHECK(rel_err(Wd, merged, 16 * 24) < 2e-6, "merged weight vs PEFT merge_and_unload: %.2e",
              rel_err(Wd, merged, 16 * 24));
    }
out:
    free(P.W), free(P.A), free(P.B), free(P.m), free(P.x), free(dy), free(mask), free(sc), free(nrm0), free(merged);
    af_st_close(f);
}

int main(void) {
    test_peft();
    return tl_finish("dora");
}
