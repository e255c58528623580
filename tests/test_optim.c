/*
 * test_optim.c — AdamW, gradient clipping and schedules (src/train/optim.c).
 *
 * 1. Replay of tests/fixtures/optim_ref.bin (tests/ref/make_optim_ref.py: torch.optim.AdamW,
 *    single-tensor CPU path, + clip_grad_norm_ over 10 steps, two runs: cosine schedule with weight
 *    decay 0.01 everywhere; linear schedule with weight decay 0.01 on 600 elements and 0.0 on 400).
 *    Required: per-step lr equal to the fixture's float32 lr within 1 ulp, pre-clip norms within
 *    1e-6 relative of torch's float32 norm, final parameters within 1e-6 relative
 *    (|got − want| <= 1e-6·|want| + 1e-9). The achieved worst errors are printed.
 * 2. AdamW properties: the first step moves every parameter by ≈ lr·sign(g) (m̂/sqrt(v̂) = ±1),
 *    weight decay only where the mask says, the OpenMP path (large n) gives the same bits as the
 *    sequential path (small chunks).
 * 3. clip: below max_norm unchanged, above rescaled to max_norm, max_norm 0 never clips, huge finite
 *    values do not overflow, NaN/Inf return a non-finite norm and leave G bit-identical.
 * 4. Schedules at the boundaries (step 0, warm-up end, first decay step, last step, past the end,
 *    warmup 0, total 1, warmup = total) and af_sched_parse.
 * 5. warmup-stable-decay (wsd): warm-up, stable, the cool-down over the last fifth, and the length
 *    whose cool-down starts at a given step (af_wsd_total_ending).
 */
#include "train/optim.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/optim_ref.bin"

static uint32_t u32_at(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static float f32_at(const unsigned char *p) {
    uint32_t u = u32_at(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct reader {
    const unsigned char *p, *end;
    int bad;
} reader;

static const unsigned char *take(reader *r, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *q = r->p;
    r->p += n;
    return q;
}
static uint32_t rd_u32(reader *r) {
    const unsigned char *q = take(r, 4);
    return q ? u32_at(q) : 0;
}
static float rd_f32(reader *r) {
    const unsigned char *q = take(r, 4);
    return q ? f32_at(q) : 0.0f;
}
static int rd_f32s(reader *r, float *dst, size_t n) {
    const unsigned char *q = take(r, 4 * n);
    if (!q) return 0;
    for (size_t i = 0; i < n; i++) dst[i] = f32_at(q + 4 * i);
    return 1;
}

static void test_fixture(void) {
    size_t len = 0;
    char *buf = tl_read_file(FIXTURE, &len);
    if (!CHECK(buf != NULL, "fixture %s missing (run tests/ref/make_optim_ref.py)", FIXTURE)) return;
    reader r = {(const unsigned char *)buf, (const unsigned char *)buf + len, 0};
    const unsigned char *magic = take(&r, 4);
    CHECK(magic && memcmp(magic, "AFOR", 4) == 0, "fixture magic");
    CHECK(rd_u32(&r) == 1, "fixture version");
    const uint32_t n_runs = rd_u32(&r);
    CHECK(n_runs >= 1 && n_runs < 100, "fixture run count %u", n_runs);
    for (uint32_t run = 0; run < n_runs && !r.bad; run++) {
        const uint32_t n = rd_u32(&r), n_steps = rd_u32(&r), n_decay = rd_u32(&r), sched = rd_u32(&r);
        const uint32_t warmup = rd_u32(&r), total = rd_u32(&r);
        const float lr = rd_f32(&r), lr_min = rd_f32(&r), b1 = rd_f32(&r), b2 = rd_f32(&r), eps = rd_f32(&r);
        const float wd = rd_f32(&r), max_norm = rd_f32(&r);
        if (!CHECK(!r.bad && n > 0 && n <= 1000000 && n_decay <= n && sched <= 2, "run %u header", run)) break;
        float *P = calloc(n, sizeof *P), *G = calloc(n, sizeof *G), *M = calloc(n, sizeof *M);
        float *V = calloc(n, sizeof *V), *want = calloc(n, sizeof *want);
        uint8_t *mask = NULL;
        if (n_decay < n) {
            mask = calloc(n, 1);
            for (uint32_t i = 0; i < n_decay; i++) mask[i] = 1;
        }
        rd_f32s(&r, P, n);
        af_adamw o;
        af_adamw_defaults(&o, lr);
        o.beta1 = b1;
        o.beta2 = b2;
        o.eps = eps;
        o.weight_decay = wd;
        double worst_norm_rel = 0.0;
        int lr_ok = 1;
        for (uint32_t s = 0; s < n_steps && !r.bad; s++) {
            const uint32_t clip = rd_u32(&r);
            const float lr_ref = rd_f32(&r), norm_ref = rd_f32(&r);
            rd_f32s(&r, G, n);
            const float lr_s = af_lr_at((af_sched)sched, lr, lr_min, s, warmup, total);
            if (!(fabsf(lr_s - lr_ref) <= 1.2e-7f * fabsf(lr_ref))) {
                lr_ok = 0;
                fprintf(stderr, "run %u step %u: lr %.9g want %.9g\n", run, s, lr_s, lr_ref);
            }
            if (clip) {
                const double nrm = af_clip_grad_norm(T_CTX, G, n, max_norm);
                const double rel = fabs(nrm - norm_ref) / norm_ref;
                if (rel > worst_norm_rel) worst_norm_rel = rel;
            }
            af_adamw_step(T_CTX, &o, P, G, M, V, n, lr_s, mask);
        }
        rd_f32s(&r, want, n);
        if (!CHECK(!r.bad, "run %u: fixture truncated", run)) {
            free(P), free(G), free(M), free(V), free(want), free(mask);
            break;
        }
        CHECK(lr_ok, "run %u: schedule lr differs from the fixture", run);
        CHECK(worst_norm_rel <= 1e-6, "run %u: pre-clip norm rel error %.3g", run, worst_norm_rel);
        CHECK(o.t == (int64_t)n_steps, "run %u: t = %lld", run, (long long)o.t);
        double worst_abs = 0.0, worst_rel = 0.0;
        for (uint32_t i = 0; i < n; i++) {
            const double d = fabs((double)P[i] - (double)want[i]);
            if (d > worst_abs) worst_abs = d;
            if (want[i] != 0.0f && d / fabs((double)want[i]) > worst_rel) worst_rel = d / fabs((double)want[i]);
        }
        printf("optim fixture run %u (sched %u, wd %g, decay on %u/%u): final params max abs diff %.3g, "
               "max rel diff %.3g; pre-clip norm max rel diff %.3g\n",
               run, sched, (double)wd, n_decay, n, worst_abs, worst_rel, worst_norm_rel);
        CHECK_CLOSE("final params vs torch AdamW", P, want, n, 1e-9, 1e-6);
        free(P), free(G), free(M), free(V), free(want), free(mask);
    }
    CHECK(!r.bad && r.p == r.end, "fixture fully consumed");
    free(buf);
}

static void test_adamw_props(void) {
    /* first step: m̂ = g, v̂ = g², so p1 = p0·(1 − lr·wd) − lr·g/(|g| + eps) */
    enum { N = 64 };
    float P[N], G[N], M[N] = {0}, V[N] = {0}, P0[N], want[N];
    uint8_t mask[N];
    uint64_t rs = 7;
    for (int i = 0; i < N; i++) {
        P0[i] = P[i] = tl_rand_normal(&rs);
        G[i] = tl_rand_normal(&rs) * 0.01f;
        mask[i] = (uint8_t)(i % 3 != 0);
        const double p = mask[i] ? P0[i] * (1.0 - 1e-3 * 0.01) : P0[i];
        want[i] = (float)(p - 1e-3 * G[i] / (fabs(G[i]) + 1e-8));
    }
    af_adamw o;
    af_adamw_defaults(&o, 1e-3f);
    CHECK(o.beta1 == 0.9f && o.beta2 == 0.999f && o.eps == 1e-8f && o.weight_decay == 0.01f && o.t == 0,
          "defaults");
    af_adamw_step(T_CTX, &o, P, G, M, V, N, 1e-3f, mask);
    CHECK_CLOSE("adamw first step = lr*sign(g) + masked decay", P, want, N, 1e-9, 1e-6);
    CHECK(o.t == 1, "t incremented");

    /* zero gradient, no decay: parameters unchanged; weight decay alone shrinks by (1 − lr·wd) */
    float p2[3] = {1.0f, -2.0f, 0.5f}, g2[3] = {0}, m2[3] = {0}, v2[3] = {0};
    af_adamw o2;
    af_adamw_defaults(&o2, 0.1f);
    af_adamw_step(T_CTX, &o2, p2, g2, m2, v2, 3, 0.1f, NULL);
    const float w2[3] = {1.0f * 0.999f, -2.0f * 0.999f, 0.5f * 0.999f};
    CHECK_CLOSE("adamw zero grad: pure decoupled decay", p2, w2, 3, 0, 1e-7);

    /* the OpenMP path (n large) equals the sequential one (chunks below the threshold), bit for bit */
    const int64_t n = 1 << 17;
    float *Pa = malloc(n * sizeof *Pa), *Pb = malloc(n * sizeof *Pb), *Gg = malloc(n * sizeof *Gg);
    float *Ma = calloc(n, sizeof *Ma), *Va = calloc(n, sizeof *Va), *Mb = calloc(n, sizeof *Mb),
          *Vb = calloc(n, sizeof *Vb);
    for (int64_t i = 0; i < n; i++) {
        Pa[i] = Pb[i] = tl_rand_normal(&rs);
        Gg[i] = tl_rand_normal(&rs);
    }
    af_adamw oa, ob;
    af_adamw_defaults(&oa, 1e-2f);
    af_adamw_defaults(&ob, 1e-2f);
    for (int step = 0; step < 3; step++) {
        af_adamw_step(T_CTX, &oa, Pa, Gg, Ma, Va, n, 1e-2f, NULL);
        const int64_t chunk = 1000;
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            af_adamw tmp = ob;
            af_adamw_step(T_CTX, &tmp, Pb + i0, Gg + i0, Mb + i0, Vb + i0, (n - i0 < chunk ? n - i0 : chunk), 1e-2f, NULL);
            if (i0 + chunk >= n) ob = tmp;
        }
    }
    CHECK(memcmp(Pa, Pb, n * sizeof *Pa) == 0 && memcmp(Ma, Mb, n * sizeof *Ma) == 0 &&
              memcmp(Va, Vb, n * sizeof *Va) == 0,
          "adamw large n (threaded) bit-identical to small chunks");
    free(Pa), free(Pb), free(Gg), free(Ma), free(Va), free(Mb), free(Vb);
}

static void test_clip(void) {
    float g[4] = {3.0f, 4.0f, 0.0f, 0.0f}, g0[4];
    memcpy(g0, g, sizeof g);
    double nrm = af_clip_grad_norm(T_CTX, g, 4, 10.0);
    CHECK(nrm == 5.0 && memcmp(g, g0, sizeof g) == 0, "below max_norm: norm %g, unchanged", nrm);
    nrm = af_clip_grad_norm(T_CTX, g, 4, 0.0);
    CHECK(nrm == 5.0 && memcmp(g, g0, sizeof g) == 0, "max_norm 0: never clips");
    nrm = af_clip_grad_norm(T_CTX, g, 4, 1.0);
    const double c = 1.0 / (5.0 + 1e-6);
    const float want[4] = {(float)(3 * c), (float)(4 * c), 0, 0};
    CHECK(nrm == 5.0, "pre-clip norm returned: %g", nrm);
    CHECK_CLOSE("clipped to max_norm/(norm+1e-6)", g, want, 4, 0, 2e-7);
    CHECK(fabs(af_clip_grad_norm(T_CTX, g, 4, 0.0) - 1.0) < 1e-6, "post-clip norm ~ max_norm");

    /* huge finite values: squares in double do not overflow */
    float big[3] = {1e30f, -1e30f, 1e30f};
    nrm = af_clip_grad_norm(T_CTX, big, 3, 1.0);
    CHECK(isfinite(nrm) && fabs(nrm / (1e30 * sqrt(3.0)) - 1.0) < 1e-6, "huge norm finite: %g", nrm);
    CHECK(fabsf(big[0] - 1.0f / sqrtf(3.0f)) < 1e-6f, "huge clipped: %g", (double)big[0]);

    /* non-finite: norm returned, G untouched */
    float bad[5] = {1.0f, 2.0f, NAN, 4.0f, 100.0f}, bad0[5];
    memcpy(bad0, bad, sizeof bad);
    nrm = af_clip_grad_norm(T_CTX, bad, 5, 1.0);
    CHECK(isnan(nrm), "NaN gradient -> NaN norm (%g)", nrm);
    CHECK(memcmp(bad, bad0, sizeof bad) == 0, "NaN gradient left untouched");
    float inf[3] = {INFINITY, 2.0f, 50.0f}, inf0[3];
    memcpy(inf0, inf, sizeof inf);
    nrm = af_clip_grad_norm(T_CTX, inf, 3, 1.0);
    CHECK(!isfinite(nrm), "Inf gradient -> non-finite norm (%g)", nrm);
    CHECK(memcmp(inf, inf0, sizeof inf) == 0, "Inf gradient left untouched");
    CHECK(af_clip_grad_norm(T_CTX, NULL, 0, 1.0) == 0.0, "empty gradient: norm 0");
}

#define LR_EQ(got, want, what) CHECK(fabs((double)(got) - (want)) <= 1e-7 * fabs(want) + 1e-12, \
                                     "%s: %.9g want %.9g", what, (double)(got), (double)(want))

static void test_sched(void) {
    /* warmup 4, total 10: warm-up steps 0..3, decay from step 4 (lr) to step 9 (lr_min) */
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 0, 4, 10), 0.25, "cosine step 0");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 2, 4, 10), 0.75, "cosine step 2");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 3, 4, 10), 1.0, "cosine warm-up end");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 4, 4, 10), 1.0, "cosine first decay step");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 9, 4, 10), (double)0.1f, "cosine last step");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 50, 4, 10), (double)0.1f, "cosine past the end");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, -3, 4, 10), 0.25, "negative step = step 0");
    /* warmup 4, total 9: span 4, step 6 is the midpoint */
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.1f, 6, 4, 9), 0.55, "cosine midpoint");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 1.0f, 0.1f, 6, 4, 9), 0.55, "linear midpoint");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 1.0f, 0.1f, 5, 4, 9), 1.0 - 0.9 * 0.25, "linear quarter");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.0f, 5, 4, 9), 0.5 * (1 + cos(M_PI * 0.25)), "cosine quarter");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 2e-4f, 0.0f, 8, 4, 9), 0.0, "linear to zero at last step");
    LR_EQ(af_lr_at(AF_SCHED_CONSTANT, 1.0f, 0.1f, 1, 4, 9), 0.5, "constant warm-up");
    LR_EQ(af_lr_at(AF_SCHED_CONSTANT, 1.0f, 0.1f, 8, 4, 9), 1.0, "constant after warm-up (ignores lr_min)");
    /* warmup 0: full lr at step 0, lr_min at the last step */
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 3e-4f, 3e-5f, 0, 0, 10), (double)3e-4f, "warmup 0 step 0");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 3e-4f, 3e-5f, 9, 0, 10), (double)3e-5f, "warmup 0 last step");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 3e-4f, 3e-5f, 0, -5, 10), (double)3e-4f, "negative warmup = none");
    /* total 1: the single step runs at lr (no decay steps) */
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 3e-4f, 0.0f, 0, 0, 1), (double)3e-4f, "total 1 cosine");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 3e-4f, 0.0f, 0, 0, 1), (double)3e-4f, "total 1 linear");
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 3e-4f, 0.0f, 0, 1, 1), (double)3e-4f, "total 1 warmup 1");
    /* warmup = total: all warm-up, last step at lr; warmup > total never reaches lr */
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.0f, 4, 5, 5), 1.0, "warmup = total, last step");
    LR_EQ(af_lr_at(AF_SCHED_COSINE, 1.0f, 0.0f, 4, 10, 5), 0.5, "warmup > total");
    /* decay span 0 (total = warmup + 1): the one post-warm-up step is at lr */
    LR_EQ(af_lr_at(AF_SCHED_LINEAR, 1.0f, 0.0f, 3, 3, 4), 1.0, "span 0");
    /* monotone non-increasing after warm-up */
    int mono = 1;
    for (int64_t s = 5; s < 100; s++)
        if (af_lr_at(AF_SCHED_COSINE, 1.0f, 0.01f, s, 5, 100) > af_lr_at(AF_SCHED_COSINE, 1.0f, 0.01f, s - 1, 5, 100))
            mono = 0;
    CHECK(mono, "cosine non-increasing after warm-up");

    af_sched sc = AF_SCHED_LINEAR;
    CHECK(af_sched_parse("cosine", &sc) == 0 && sc == AF_SCHED_COSINE, "parse cosine");
    CHECK(af_sched_parse("constant", &sc) == 0 && sc == AF_SCHED_CONSTANT, "parse constant");
    CHECK(af_sched_parse("linear", &sc) == 0 && sc == AF_SCHED_LINEAR, "parse linear");
    CHECK(af_sched_parse("wsd", &sc) == 0 && sc == AF_SCHED_WSD, "parse wsd");
    sc = AF_SCHED_LINEAR;
    CHECK(af_sched_parse("Cosine", &sc) == -1 && sc == AF_SCHED_LINEAR, "parse is case-sensitive, out untouched");
    CHECK(af_sched_parse("", &sc) == -1 && af_sched_parse(NULL, &sc) == -1, "parse empty/NULL");
}

/* warmup-stable-decay: warm-up, lr up to the last fifth, then linear to lr_min as transformers'
 * get_wsd_schedule (decay_type "linear": the first decay step at lr, the last at lr_min + (lr −
 * lr_min)/decay_steps); the length that starts the cool-down at a given step. */
static void test_wsd(void) {
    CHECK(af_wsd_decay_start(100) == 80 && af_wsd_decay_start(4) == 4 && af_wsd_decay_start(0) == 0,
          "decay start: 80 of 100, none in 4 steps");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 1, 4, 100), 0.5, "wsd warm-up");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 50, 4, 100), 1.0, "wsd stable");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 79, 4, 100), 1.0, "wsd last stable step");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 80, 4, 100), 1.0, "wsd first decay step");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 90, 4, 100), 0.5, "wsd decay midpoint");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.1f, 99, 4, 100), 0.1 + 0.9 / 20, "wsd last step");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.1f, 500, 4, 100), (double)0.1f, "wsd past the end: lr_min");
    LR_EQ(af_lr_at(AF_SCHED_WSD, 1.0f, 0.0f, 3, 4, 4), 1.0, "wsd: 4 steps have no cool-down");
    int ok = 1;
    for (int64_t s = 1; s < 5000; s++) {
        const int64_t t = af_wsd_total_ending(s);
        if (af_wsd_decay_start(t) != s || af_wsd_decay_start(t - 1) >= s || t < s) ok = 0;
    }
    CHECK(ok, "af_wsd_total_ending: the cool-down starts exactly at s, the shortest such length");
    CHECK(af_wsd_total_ending(80) == 99 && af_wsd_total_ending(98) == 122 && af_wsd_total_ending(0) == 0,
          "80 -> 99 (99 - 19), 98 -> %lld", (long long)af_wsd_total_ending(98));
}

int main(void) {
    test_fixture();
    test_adamw_props();
    test_clip();
    test_sched();
    test_wsd();
    return tl_finish("test_optim");
}
