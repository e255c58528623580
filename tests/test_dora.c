/*
 * test_dora.c — DoRA (src/lora/dora.h):
 *  (a) one projection against PEFT (tests/fixtures/dora_ref.safetensors from tests/ref/make_dora_ref.py:
 *      peft 0.21 use_dora=True, float64): the initial magnitude (row norms of W), the output y and
 *      the gradients of A, B, m and x, without dropout and with a fixed dropout mask, computed the way
 *      the engine composes a DoRA projection (frozen products, af_lora_forward / af_lora_backward,
 *      af_dora_*); the merged weight against PEFT's merge_and_unload;
 *  (b) finite differences of the same composition (loss = Σ y·dy, the norm held at its value, as the
 *      backward detaches it): dA, dB, dm, dx;
 *  (c) af_lora_trainer with use_dora on a tiny llama (F32 weights): an untrained DoRA adapter gives the
 *      plain LoRA loss exactly; 3 tensors per projection (the magnitude [out, 1]); finite differences
 *      of the classification loss in the magnitudes; checkpointing gives the same gradient bit for bit;
 *      dropout runs; a step moves m; the PEFT directory holds use_dora and lora_magnitude_vector and
 *      loads back exactly; a plain LoRA trainer refuses it;
 *  (d) PEFT's own DoRA adapter of tests/fixtures/hf_tiny_llama (tests/ref/make_dora_model_ref.py) loads
 *      as it is; the summed next-token loss (2e-5 relative) and all 42 gradients (A, B, magnitude; 1e-4
 *      of each tensor's largest entry) equal PEFT's;
 *  (e) a DoRA adapter applied unmerged by a session (CPU) gives the logits of the model af_merge_adapter
 *      writes (F32 tiny llama), and token-by-token decoding (norms cached by the session) the batched
 *      logits; llama.cpp GGUF adapter export refuses DoRA;
 * PiSSA / OLoRA, LoRA+ against PEFT and the adapter-off parameters: tests/test_lora_variants.c.
 * Tolerances: PEFT parity 2e-5 relative to each tensor's largest entry (float32 vs float64);
 * finite differences (central, h = 1e-2 · max(1, |θ|)) 2e-3 relative.
 */
#include "afinar_app.h"
#include "testlib.h"
#include "tinymodel.c"
#include "variants_common.h" /* rel_err, session_loss */

#include "core/blocks.h"
#include "formats/safetensors.h"
#include "kernels/train_ops.h"
#include "lora/dora.h"
#include "lora/lora.h"
#include "train/api_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---------------------------------------------------------------- (c) the trainer on a tiny model */

static int32_t g_tok[26];
static const int32_t g_ss[5] = {0, 6, 15, 19, 26}, g_lab[4] = {2, 0, 1, 2};

static af_lora_trainer_opts dora_opts(int use_dora, float dropout) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.lora_alpha = 8.0f;
    o.lora_dropout = dropout;
    o.targets = "all-linear";
    o.seed = 3;
    o.num_classes = 3;
    o.use_dora = use_dora;
    return o;
}

static double loss_of(af_lora_trainer *tr, const float *P, float *grad) {
    double l = NAN;
    af_lora_trainer_set_params(tr, P);
    af_lora_trainer_zero_grad(tr);
    af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1.0f, &l, NULL);
    if (grad) af_lora_trainer_collect_gradients(tr, grad, NULL, NULL);
    af_lora_trainer_zero_grad(tr);
    return l;
}

static void test_trainer(const af_model *m) {
    af_lora_trainer_opts o = dora_opts(1, 0.0f), ol = dora_opts(0, 0.0f);
    af_lora_trainer *tr = NULL, *plain = NULL, *ck = NULL, *dr = NULL, *other = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK && af_lora_trainer_new(m, &ol, &plain) == AF_OK,
               "new: %s", af_last_error()))
        goto out;
    const int64_t n = af_lora_trainer_n_params(tr), nl = af_lora_trainer_n_params(plain);
    const int32_t nt = af_lora_trainer_n_tensors(tr);
    CHECK(nt == 2 * 7 * 3 + 2, "DoRA tensors: A, B, magnitude per projection (%d)", nt);
    float *P = malloc(4 * (size_t)n), *G = malloc(4 * (size_t)n), *G2 = malloc(4 * (size_t)n), *Q = malloc(4 * (size_t)n);
    af_lora_trainer_get_params(tr, P);
    /* identity at initialisation: the same loss as plain LoRA (B = 0, m = ||W||_row) */
    double l0 = NAN, lp = NAN;
    af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1.0f, &l0, NULL);
    af_lora_trainer_accumulate(plain, g_tok, g_ss, 4, g_lab, 1.0f, &lp, NULL);
    af_lora_trainer_zero_grad(tr);
    CHECK(l0 == lp && isfinite(l0), "untrained DoRA == plain LoRA: loss %.9g vs %.9g (%lld vs %lld parameters)", l0, lp,
          (long long)n, (long long)nl);
    /* move B and m away from their initial values */
    uint64_t rng = 99;
    int mags = 0;
    for (int32_t i = 0; i < nt; i++) {
        const char *name;
        int64_t sh[2], off;
        af_lora_trainer_tensor_info(tr, i, &name, sh, &off);
        if (strstr(name, "lora_B"))
            for (int64_t k = 0; k < sh[0] * sh[1]; k++) P[off + k] = tl_rand_uniform(&rng, -0.05f, 0.05f);
        if (strstr(name, "lora_magnitude_vector")) {
            mags++;
            CHECK(sh[1] == 1 && P[off] > 0, "%s: [%lld, 1], m[0] = %g > 0", name, (long long)sh[0], (double)P[off]);
            for (int64_t k = 0; k < sh[0]; k++) P[off + k] *= 1.0f + tl_rand_uniform(&rng, -0.2f, 0.2f);
        }
    }
    CHECK(mags == 14, "14 magnitude vectors (%d)", mags);
    const double l1 = loss_of(tr, P, G);
    CHECK(isfinite(l1) && l1 != l0, "moved parameters: loss %.6g", l1);
    /* finite differences of the magnitude (the norm does not depend on m: exact derivative) */
    double worst = 0, gmax = 0;
    int checked = 0;
    for (int32_t i = 0; i < nt; i++) {
        const char *name;
        int64_t sh[2], off;
        af_lora_trainer_tensor_info(tr, i, &name, sh, &off);
        if (!strstr(name, "lora_magnitude_vector")) continue;
        for (int64_t k = 0; k < sh[0]; k += sh[0] / 3 + 1) {
            const int64_t e = off + k;
            const float keep = P[e], h = 1e-2f * fabsf(keep);
            memcpy(Q, P, 4 * (size_t)n);
            Q[e] = keep + h;
            const double up = loss_of(tr, Q, NULL);
            Q[e] = keep - h;
            const double dn = loss_of(tr, Q, NULL);
            const double fd = (up - dn) / (2.0 * (double)h);
            worst = fmax(worst, fabs(fd - G[e]));
            gmax = fmax(gmax, fabs((double)G[e]));
            checked++;
        }
    }
    CHECK(checked >= 28 && gmax > 1e-4 && worst <= 2e-2 * gmax + 1e-5, "dLoss/dm: finite differences vs backward over %d entries: max "
          "|diff| %.3g (max |grad| %.3g)", checked, worst, gmax);
    printf("  dLoss/dm: %d entries, max |FD - backward| %.3g, max |grad| %.3g\n", checked, worst, gmax);
    /* gradient checkpointing: the same gradient bit for bit */
    af_lora_trainer_opts oc = o;
    oc.checkpointing = 1;
    if (CHECK(af_lora_trainer_new(m, &oc, &ck) == AF_OK, "checkpointing: %s", af_last_error())) {
        const double lc = loss_of(ck, P, G2);
        CHECK(lc == l1 && !memcmp(G, G2, 4 * (size_t)n), "checkpointing: same loss and gradient (bitwise)");
    }
    /* dropout: finite, and different from no dropout */
    af_lora_trainer_opts od = dora_opts(1, 0.3f);
    if (CHECK(af_lora_trainer_new(m, &od, &dr) == AF_OK, "dropout: %s", af_last_error())) {
        const double ld = loss_of(dr, P, G2);
        int fin = 1;
        for (int64_t k = 0; k < n; k++) fin &= isfinite(G2[k]);
        CHECK(isfinite(ld) && fin && ld != l1, "dropout 0.3: loss %.6g (no dropout %.6g), finite gradient", ld, l1);
    }
    /* one optimizer step moves the magnitudes */
    af_lora_trainer_set_params(tr, P);
    double ls;
    af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1.0f, &ls, NULL);
    CHECK(af_lora_trainer_step(tr, 1e-2f, NULL) == AF_OK, "step: %s", af_last_error());
    af_lora_trainer_get_params(tr, Q);
    int32_t im = -1;
    af_lora_trainer_find_tensor(tr, "base_model.model.model.layers.1.mlp.down_proj.lora_magnitude_vector", &im);
    int64_t sh[2], off = -1;
    const char *nm;
    af_lora_trainer_tensor_info(tr, im, &nm, sh, &off);
    CHECK(im >= 0 && off >= 0 && Q[off] != P[off], "a step changes m (%g -> %g)", (double)P[off], (double)Q[off]);
    /* PEFT adapter directory: names, use_dora, round trip */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/af_dora_%d", (int)getpid());
    if (CHECK(af_lora_trainer_save_adapter(tr, dir, "tiny-llama") == AF_OK, "save: %s", af_last_error())) {
        char *cfg = tl_read_file(tl_join(dir, "adapter_config.json"), NULL);
        CHECK(cfg && strstr(cfg, "\"use_dora\":\ttrue"), "adapter_config.json: use_dora true");
        free(cfg);
        af_st_file *f = NULL;
        if (CHECK(af_st_open(tl_join(dir, "adapter_model.safetensors"), &f) == AF_OK, "open weights")) {
            const af_st_tensor *t = af_st_find(f, "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector");
            CHECK(t && t->n_dims == 1 && t->shape[0] == 64, "magnitude saved as PEFT names it, 1-D [out]");
            af_st_close(f);
        }
        af_lora_trainer_opts o2 = o;
        o2.seed = 77;
        if (CHECK(af_lora_trainer_new(m, &o2, &other) == AF_OK, "fresh: %s", af_last_error())) {
            CHECK(af_lora_trainer_load_adapter(other, dir) == AF_OK, "load: %s", af_last_error());
            af_lora_trainer_get_params(other, G2);
            CHECK(!memcmp(G2, Q, 4 * (size_t)n), "save + load: the same parameters (q/k rows and magnitudes mapped back)");
        }
        CHECK(af_lora_trainer_load_adapter(plain, dir) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "use_dora"),
              "a DoRA adapter into a plain LoRA trainer: refused: %s", af_last_error());
        static const char *const files[] = {"adapter_config.json", "adapter_model.safetensors", "afinar.json",
                                            "manifest.json"};
        for (int i = 0; i < 4; i++) unlink(tl_join(dir, files[i]));
        rmdir(dir);
    }
    free(P), free(G), free(G2), free(Q);
out:
    af_lora_trainer_free(tr), af_lora_trainer_free(plain), af_lora_trainer_free(ck), af_lora_trainer_free(dr);
    af_lora_trainer_free(other);
}

/* (d) PEFT's own DoRA adapter of the tiny HF llama: loaded as it is, the summed next-token loss and every
 * gradient (A, B, magnitude) against PEFT's (tests/fixtures/dora_model_ref.safetensors). */
static void test_peft_model(void) {
    af_model *m = NULL;
    af_st_file *f = NULL;
    af_lora_trainer *tr = NULL;
    float *G = NULL, *P = NULL, *g = NULL, *ref = NULL;
    if (!CHECK(af_model_load(NULL, "tests/fixtures/hf_tiny_llama", &m) == AF_OK, "hf_tiny_llama: %s", af_last_error()))
        return;
    if (!CHECK(af_st_open("tests/fixtures/dora_model_ref.safetensors", &f) == AF_OK, "fixture: %s", af_last_error()))
        goto out;
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4, o.lora_alpha = 8.0f, o.lora_dropout = 0.0f, o.targets = "all-linear", o.use_dora = 1;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "trainer: %s", af_last_error())) goto out;
    if (!CHECK(af_lora_trainer_load_adapter(tr, "tests/fixtures/dora_adapter") == AF_OK,
               "PEFT's DoRA adapter loads: %s", af_last_error()))
        goto out;
    float tokf[18], ssf[3], lref;
    const af_st_tensor *tt = af_st_find(f, "tokens"), *ts = af_st_find(f, "seq_start"), *tl = af_st_find(f, "loss");
    if (!CHECK(tt && ts && tl && tt->n_elem == 18, "fixture tensors")) goto out;
    af_st_read_f32(f, tt, tokf, 18), af_st_read_f32(f, ts, ssf, 3), af_st_read_f32(f, tl, &lref, 1);
    int32_t tok[18], tgt[18], ss[3] = {(int32_t)ssf[0], (int32_t)ssf[1], (int32_t)ssf[2]};
    for (int i = 0; i < 18; i++) tok[i] = (int32_t)tokf[i];
    for (int b = 0; b < 2; b++)
        for (int32_t t = ss[b]; t < ss[b + 1]; t++) tgt[t] = t + 1 < ss[b + 1] ? tok[t + 1] : -1;
    double lsum = 0;
    int64_t ntg = 0;
    CHECK(af_lora_trainer_accumulate_lm(tr, tok, ss, 2, tgt, 1.0f, &lsum, &ntg, NULL) == AF_OK && ntg == 16,
          "accumulate_lm: %s", af_last_error());
    CHECK(fabs(lsum - lref) <= 2e-5 * fabs(lref), "summed loss %.7g vs PEFT %.7g", lsum, (double)lref);
    /* gradients in PEFT order: through the tensor getter (q/k rows, magnitudes mapped back) */
    const int64_t n = af_lora_trainer_n_params(tr);
    G = malloc(4 * (size_t)n), P = malloc(4 * (size_t)n);
    af_lora_trainer_collect_gradients(tr, G, NULL, NULL);
    af_lora_trainer_get_params(tr, P);
    af_lora_trainer_set_params(tr, G);
    double worst = 0;
    int cmp = 0;
    for (int32_t i = 0; i < af_lora_trainer_n_tensors(tr); i++) {
        const char *name;
        int64_t sh[2];
        af_lora_trainer_tensor_info(tr, i, &name, sh, NULL);
        char key[256];
        snprintf(key, sizeof key, "grad.%s", name);
        const af_st_tensor *t = af_st_find(f, key);
        if (!CHECK(t && t->n_elem == (uint64_t)(sh[0] * sh[1]), "reference gradient %s", key)) continue;
        g = realloc(g, 4 * t->n_elem), ref = realloc(ref, 4 * t->n_elem);
        af_lora_trainer_get_tensor(tr, i, g);
        af_st_read_f32(f, t, ref, t->n_elem);
        const double e = rel_err(g, ref, t->n_elem);
        worst = fmax(worst, e);
        CHECK(e < 1e-4, "%s: max |diff| / max |ref| = %.2e", name, e);
        cmp++;
    }
    printf("  PEFT DoRA tiny llama: loss %.7g (PEFT %.7g), %d gradients, worst max|diff|/max|ref| %.2e\n", lsum,
           (double)lref, cmp, worst);
    CHECK(cmp == 42, "42 gradients compared (%d)", cmp);
    af_lora_trainer_set_params(tr, P);
out:
    free(G), free(P), free(g), free(ref);
    af_lora_trainer_free(tr);
    af_st_close(f);
    af_model_free(m);
}

/* Logits [n, vocab] of ids (7i + 3) mod V through a session, with the adapter directory applied unmerged. */
static float *session_logits(const char *model_path, const char *adapter, int n, int32_t *vocab) {
    af_model *m = NULL;
    if (af_model_load(NULL, model_path, &m) != AF_OK) return NULL;
    const int32_t V = af_model_get_config(m)->vocab_size;
    *vocab = V;
    af_session *s = NULL;
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int32_t ids[16];
    for (int i = 0; i < n; i++) ids[i] = (7 * i + 3) % V;
    af_status st = af_session_new(m, n + 1, &s);
    if (st == AF_OK && adapter) st = af_session_load_adapter(s, adapter, 1.0f);
    if (st == AF_OK) st = af_session_eval(s, ids, n, NULL, out);
    if (!CHECK(st == AF_OK, "session logits (%s, %s): %s", model_path, adapter ? adapter : "-", af_last_error())) {
        free(out);
        out = NULL;
    }
    af_session_free(s);
    af_model_free(m);
    return out;
}

/* (e) a trained-looking DoRA adapter applied unmerged by a session equals the model `afinar merge` writes
 * (F32: the same function), and differs from the base; GGUF adapter export refuses DoRA. */
static void test_merge(void) {
    char mp[64], dir[64], out[64], gg[64];
    snprintf(mp, sizeof mp, "/tmp/af_dora_m_%d.gguf", (int)getpid());
    snprintf(dir, sizeof dir, "/tmp/af_dora_a_%d", (int)getpid());
    snprintf(out, sizeof out, "/tmp/af_dora_o_%d.gguf", (int)getpid());
    snprintf(gg, sizeof gg, "/tmp/af_dora_g_%d.gguf", (int)getpid());
    tm_spec ts = tm_default("llama", AF_TYPE_F32);
    af_model *m = NULL;
    af_lora_trainer *tr = NULL;
    if (!CHECK(tm_write(&ts, mp) == AF_OK && af_model_load(NULL, mp, &m) == AF_OK, "model: %s", af_last_error())) return;
    af_lora_trainer_opts o = dora_opts(1, 0.0f);
    o.num_classes = 0;
    if (CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "trainer: %s", af_last_error())) {
        const int64_t n = af_lora_trainer_n_params(tr);
        float *P = malloc(4 * (size_t)n);
        af_lora_trainer_get_params(tr, P);
        uint64_t rng = 17;
        for (int32_t i = 0; i < af_lora_trainer_n_tensors(tr); i++) {
            const char *name;
            int64_t sh[2], off;
            af_lora_trainer_tensor_info(tr, i, &name, sh, &off);
            for (int64_t k = 0; k < sh[0] * sh[1]; k++) {
                if (strstr(name, "lora_B")) P[off + k] = tl_rand_uniform(&rng, -0.1f, 0.1f);
                if (strstr(name, "lora_magnitude_vector")) P[off + k] *= 1.0f + tl_rand_uniform(&rng, -0.3f, 0.3f);
            }
        }
        af_lora_trainer_set_params(tr, P);
        free(P);
        CHECK(af_lora_trainer_save_adapter(tr, dir, "tiny") == AF_OK, "save: %s", af_last_error());
    }
    af_lora_trainer_free(tr);
    af_model_free(m);
    af_merge_opts mo = {"keep", 0};
    af_merge_stats ms;
    if (CHECK(af_merge_adapter(mp, dir, out, &mo, &ms) == AF_OK, "afinar merge of a DoRA adapter: %s", af_last_error())) {
        int32_t V = 0;
        float *un = session_logits(mp, dir, 6, &V), *mg = session_logits(out, NULL, 6, &V),
              *base = session_logits(mp, NULL, 6, &V);
        if (un && mg && base) {
            double d = 0, eff = 0, amax = 0;
            for (size_t i = 0; i < (size_t)6 * (size_t)V; i++) {
                d = fmax(d, fabs((double)mg[i] - un[i]));
                eff = fmax(eff, fabs((double)un[i] - base[i]));
                amax = fmax(amax, fabs((double)un[i]));
            }
            printf("  DoRA merge: max |merged - unmerged| %.3g, max |adapter effect| %.3g\n", d, eff);
            CHECK(eff > 1e-2 && d <= 1e-4 * (1 + amax), "merged == unmerged DoRA logits: %.3g (effect %.3g)", d, eff);
        }
        free(un), free(mg), free(base);
    }
    { /* token by token (the session's cached DoRA norms reused across calls) == one batched call */
        af_model *mm = NULL;
        af_session *se = NULL;
        int32_t V = 0;
        float *batch = session_logits(mp, dir, 6, &V);
        if (CHECK(batch && af_model_load(NULL, mp, &mm) == AF_OK && af_session_new(mm, 8, &se) == AF_OK &&
                      af_session_load_adapter(se, dir, 1.0f) == AF_OK,
                  "session: %s", af_last_error())) {
            float *one = malloc(sizeof(float) * (size_t)V);
            double d = 0, amax = 0;
            for (int i = 0; i < 6; i++) {
                const int32_t id = (7 * i + 3) % V;
                if (!CHECK(af_session_eval(se, &id, 1, NULL, one) == AF_OK, "eval: %s", af_last_error())) break;
                for (int32_t v = 0; v < V; v++) {
                    d = fmax(d, fabs((double)one[v] - batch[(size_t)i * (size_t)V + (size_t)v]));
                    amax = fmax(amax, fabs((double)one[v]));
                }
            }
            CHECK(d <= 1e-4 * (1 + amax), "DoRA decode token by token == batched logits: %.3g", d);
            free(one);
        }
        free(batch);
        af_session_free(se);
        af_model_free(mm);
    }
    CHECK(af_adapter_export_gguf(mp, dir, gg, 1) == AF_ERR_UNSUPPORTED && strstr(af_last_error(), "afinar merge"),
          "GGUF adapter export refuses DoRA: %s", af_last_error());
    static const char *const files[] = {"adapter_config.json", "adapter_model.safetensors", "afinar.json", "manifest.json"};
    for (int i = 0; i < 4; i++) unlink(tl_join(dir, files[i]));
    rmdir(dir);
    unlink(mp), unlink(out), unlink(gg);
}

int main(void) {
    test_peft();
    tm_spec sp = tm_default("llama", AF_TYPE_F32);
    uint64_t rng = 5;
    for (int i = 0; i < 26; i++) g_tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)sp.vocab);
    af_model *m = NULL;
    if (CHECK(tm_load(&sp, &m) == AF_OK, "tiny llama: %s", af_last_error())) test_trainer(m);
    af_model_free(m);
    test_peft_model();
    test_merge();
    return tl_finish("dora");
}
