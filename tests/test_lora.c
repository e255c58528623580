/*
 * test_lora.c — LoRA adapters (src/lora/lora.c): the forward correction and its backward against
 * central finite differences (the correction is linear in x, in A and in B separately, so central
 * differences are exact up to f32 rounding and the tolerance is tight), with and without a dropout
 * mask; merge/unmerge; target parsing; the parameter layout and its validation; initialisation;
 * layer selections (af_lora_parse_layers, af_param_layout_init_layers; lists: af_lora_parse_layer_list,
 * af_param_layout_init_list).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/train_ops.h"
#include "lora/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* loss = sum(y ⊙ R) with y = lora_forward(x, A, B) (y starts at zero). */
static double lora_loss(const float *x, const float *mask, const float *A, const float *B, const float *R, int64_t n,
                        int64_t in, int64_t out, int32_t r, float scale) {
    float *y = calloc((size_t)(n * out), sizeof(float));
    float *xa = malloc(sizeof(float) * (size_t)(n * r));
    af_lora_forward(T_CTX, y, xa, x, mask, A, B, n, in, out, r, scale);
    double s = 0;
    for (int64_t i = 0; i < n * out; i++) s += (double)y[i] * R[i];
    free(y);
    free(xa);
    return s;
}

static void fill(float *p, int64_t n, uint64_t *rng, float b) {
    for (int64_t i = 0; i < n; i++) p[i] = tl_rand_uniform(rng, -b, b);
}

/* FD on every element of `p` (n of them) vs the analytic gradient g. */
static void fd_group(const char *what, float *p, const float *g, int64_t n, const float *x, const float *mask,
                     const float *A, const float *B, const float *R, int64_t nt, int64_t in, int64_t out, int32_t r,
                     float scale) {
    float *fd = malloc(sizeof(float) * (size_t)n);
    const float eps = 0.125f; /* a power of two: p ± eps is exact for |p| < 1 */
    for (int64_t i = 0; i < n; i++) {
        float save = p[i];
        p[i] = save + eps;
        double lp = lora_loss(x, mask, A, B, R, nt, in, out, r, scale);
        p[i] = save - eps;
        double lm = lora_loss(x, mask, A, B, R, nt, in, out, r, scale);
        p[i] = save;
        fd[i] = (float)((lp - lm) / (2 * eps));
    }
    CHECK_CLOSE(what, g, fd, (size_t)n, 2e-4, 2e-3);
    free(fd);
}

static void test_fd(int with_mask) {
    uint64_t rng = 42 + (uint64_t)with_mask;
    const int64_t n = 7, in = 40, out = 24;
    const int32_t r = 3;
    const float scale = 2.5f, p = 0.3f;
    float *x = malloc(sizeof(float) * n * in), *A = malloc(sizeof(float) * r * in), *B = malloc(sizeof(float) * out * r);
    float *R = malloc(sizeof(float) * n * out), *mask = NULL;
    fill(x, n * in, &rng, 1.0f);
    fill(A, r * in, &rng, 0.3f);
    fill(B, out * r, &rng, 0.3f);
    fill(R, n * out, &rng, 1.0f);
    if (with_mask) {
        mask = malloc(sizeof(float) * n * in);
        af_lora_dropout_mask(T_CTX, mask, 99, 1, AF_PROJ_V, 0, n, in, p);
        int zeros = 0;
        for (int64_t i = 0; i < n * in; i++) {
            zeros += mask[i] == 0;
            if (mask[i] != 0 && fabsf(mask[i] - 1 / (1 - p)) > 1e-6f) zeros = -100000;
        }
        CHECK(zeros > n * in * p * 0.6 && zeros < n * in * p * 1.4, "dropout mask: %d zeros of %lld (p = %.2f)", zeros,
              (long long)(n * in), (double)p);
        float *m2 = malloc(sizeof(float) * n * in);
        af_lora_dropout_mask(T_CTX, m2, 99, 1, AF_PROJ_V, 3, n - 3, in, p);
        CHECK(!memcmp(m2, mask + 3 * in, sizeof(float) * (size_t)((n - 3) * in)), "dropout mask rows keyed by token");
        free(m2);
    }
    /* analytic */
    float *y = calloc((size_t)(n * out), sizeof(float)), *xa = malloc(sizeof(float) * n * r);
    float *dx = calloc((size_t)(n * in), sizeof(float)), *dA = calloc((size_t)(r * in), sizeof(float));
    float *dB = calloc((size_t)(out * r), sizeof(float)), *tmp = malloc(sizeof(float) * (size_t)(n * (r + in)));
    af_lora_forward(T_CTX, y, xa, x, mask, A, B, n, in, out, r, scale);
    af_lora_backward(T_CTX, dx, dA, dB, tmp, R, x, xa, mask, A, B, n, in, out, r, scale);
    char w[64];
    snprintf(w, sizeof w, "lora dx (mask %d)", with_mask);
    fd_group(w, x, dx, n * in, x, mask, A, B, R, n, in, out, r, scale);
    snprintf(w, sizeof w, "lora dA (mask %d)", with_mask);
    fd_group(w, A, dA, r * in, x, mask, A, B, R, n, in, out, r, scale);
    snprintf(w, sizeof w, "lora dB (mask %d)", with_mask);
    fd_group(w, B, dB, out * r, x, mask, A, B, R, n, in, out, r, scale);
    /* backward adds into gradients */
    af_lora_backward(T_CTX, dx, dA, dB, tmp, R, x, xa, mask, A, B, n, in, out, r, scale);
    float *dB2 = malloc(sizeof(float) * out * r);
    for (int64_t i = 0; i < out * r; i++) dB2[i] = 0.5f * dB[i];
    float *dB1 = calloc((size_t)(out * r), sizeof(float));
    af_lora_backward(T_CTX, NULL, dA, dB1, tmp, R, x, xa, mask, A, B, n, in, out, r, scale);
    CHECK_CLOSE("lora backward accumulates", dB1, dB2, (size_t)(out * r), 1e-6, 1e-5);
    free(dB2);
    free(dB1);
    free(x), free(A), free(B), free(R), free(mask), free(y), free(xa), free(dx), free(dA), free(dB), free(tmp);
}

static void test_merge(void) {
    uint64_t rng = 7;
    const int64_t in = 48, out = 20, n = 5;
    const int32_t r = 4;
    const float scale = 0.75f;
    float *W = malloc(sizeof(float) * out * in), *W0 = malloc(sizeof(float) * out * in);
    float *A = malloc(sizeof(float) * r * in), *B = malloc(sizeof(float) * out * r), *x = malloc(sizeof(float) * n * in);
    fill(W, out * in, &rng, 0.5f);
    fill(A, r * in, &rng, 0.5f);
    fill(B, out * r, &rng, 0.5f);
    fill(x, n * in, &rng, 1.0f);
    memcpy(W0, W, sizeof(float) * out * in);
    float *y1 = calloc((size_t)(n * out), sizeof(float)), *y2 = calloc((size_t)(n * out), sizeof(float));
    float *xa = malloc(sizeof(float) * n * r);
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)x[t * in + i] * W0[o * in + i];
            y1[t * out + o] = (float)s;
        }
    af_lora_forward(T_CTX, y1, xa, x, NULL, A, B, n, in, out, r, scale);
    af_lora_merge(W, A, B, in, out, r, scale, +1);
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)x[t * in + i] * W[o * in + i];
            y2[t * out + o] = (float)s;
        }
    CHECK_CLOSE("merged W gives x·Wᵀ + lora", y2, y1, (size_t)(n * out), 1e-5, 1e-5);
    af_lora_merge(W, A, B, in, out, r, scale, -1);
    CHECK_CLOSE("unmerge restores W", W, W0, (size_t)(out * in), 1e-6, 1e-6);
    free(W), free(W0), free(A), free(B), free(x), free(y1), free(y2), free(xa);
}

static void test_targets(void) {
    uint32_t m = 0;
    CHECK(af_lora_parse_targets("qv", &m) == AF_OK && m == ((1u << AF_PROJ_Q) | (1u << AF_PROJ_V)), "qv");
    CHECK(af_lora_parse_targets(NULL, &m) == AF_OK && m == ((1u << AF_PROJ_Q) | (1u << AF_PROJ_V)), "default qv");
    CHECK(af_lora_parse_targets("qkv", &m) == AF_OK && m == 7u, "qkv");
    CHECK(af_lora_parse_targets("all-linear", &m) == AF_OK && m == 127u, "all-linear");
    CHECK(af_lora_parse_targets("o,gate, up ,down", &m) == AF_OK &&
              m == ((1u << AF_PROJ_O) | (1u << AF_PROJ_GATE) | (1u << AF_PROJ_UP) | (1u << AF_PROJ_DOWN)),
          "comma list with spaces");
    CHECK(af_lora_parse_targets("q_proj,k_proj,down_proj", &m) == AF_OK &&
              m == ((1u << AF_PROJ_Q) | (1u << AF_PROJ_K) | (1u << AF_PROJ_DOWN)),
          "PEFT names");
    af_status st = af_lora_parse_targets("q,foo", &m);
    CHECK(st == AF_ERR_INVALID_ARG && strstr(af_last_error(), "'foo'"), "unknown target named: %s", af_last_error());
    CHECK(af_lora_parse_targets("q,,v", &m) == AF_ERR_INVALID_ARG, "empty entry rejected");
    CHECK(af_lora_parse_targets("qproj", &m) == AF_ERR_INVALID_ARG, "qproj rejected");
    CHECK(!strcmp(af_proj_name(AF_PROJ_GATE), "gate_proj") && !strcmp(af_proj_name(AF_PROJ_DOWN), "down_proj"),
          "proj names");
}

static void test_layout(void) {
    tm_spec s = tm_default("llama", AF_TYPE_F32);
    af_model *m = NULL;
    if (!CHECK(tm_load(&s, &m) == AF_OK, "tiny model: %s", af_last_error())) return;
    af_lora_config c = {4, 8.0f, 0.0f, 0, 0, 7, 0};
    af_param_layout lay;
    CHECK(af_lora_parse_targets("all-linear", &c.targets) == AF_OK, "targets");
    if (CHECK(af_param_layout_init(&lay, m, &c, 3) == AF_OK, "layout: %s", af_last_error())) {
        CHECK(fabsf(lay.scale - 2.0f) < 1e-7f, "scale alpha/r");
        /* every region disjoint, covering [0, n_total) exactly */
        char *cover = calloc((size_t)lay.n_total, 1);
        int ok = 1;
        int64_t sum = 0;
        for (int32_t l = 0; l < lay.n_layers; l++)
            for (int p = 0; p < AF_PROJ_COUNT; p++) {
                const af_lora_slot *sl = af_lora_slot_at(&lay, l, (af_proj)p);
                int64_t offs[2] = {sl->a_off, sl->b_off}, lens[2] = {4 * sl->in, sl->out * 4};
                for (int k = 0; k < 2; k++) {
                    for (int64_t i = 0; i < lens[k]; i++) {
                        if (offs[k] < 0 || offs[k] + i >= lay.n_lora || cover[offs[k] + i]) ok = 0;
                        else cover[offs[k] + i] = 1;
                    }
                    sum += lens[k];
                }
            }
        CHECK(sum == lay.n_lora, "LoRA part sums to n_lora (%lld vs %lld)", (long long)sum, (long long)lay.n_lora);
        CHECK(lay.head_w_off == lay.n_lora && lay.head_b_off == lay.head_w_off + 3 * s.hidden &&
                  lay.n_total == lay.head_b_off + 3,
              "head after the adapters");
        for (int64_t i = lay.n_lora; i < lay.n_total; i++) cover[i] = 1;
        for (int64_t i = 0; i < lay.n_total; i++) ok &= cover[i];
        CHECK(ok, "slots disjoint and covering");
        const af_lora_slot *q = af_lora_slot_at(&lay, 1, AF_PROJ_Q), *dn = af_lora_slot_at(&lay, 1, AF_PROJ_DOWN);
        CHECK(q->in == s.hidden && q->out == s.n_head * s.head_dim && dn->in == s.ffn && dn->out == s.hidden,
              "slot shapes");
        free(cover);
        /* init: A uniform within bound, B zero, head W within bound, b zero; deterministic */
        float *P = malloc(sizeof(float) * (size_t)lay.n_total), *P2 = malloc(sizeof(float) * (size_t)lay.n_total);
        af_lora_init_params(&lay, P);
        af_lora_init_params(&lay, P2);
        CHECK(!memcmp(P, P2, sizeof(float) * (size_t)lay.n_total), "init deterministic");
        const af_lora_slot *v = af_lora_slot_at(&lay, 0, AF_PROJ_V);
        double mx = 0, mean = 0, bsum = 0;
        for (int64_t i = 0; i < 4 * v->in; i++) {
            mx = fmax(mx, fabs(P[v->a_off + i]));
            mean += P[v->a_off + i];
        }
        for (int64_t i = 0; i < v->out * 4; i++) bsum += fabs(P[v->b_off + i]);
        double bound = 1 / sqrt((double)v->in);
        CHECK(mx <= bound && mx > 0.8 * bound && fabs(mean / (4 * v->in)) < 0.2 * bound && bsum == 0,
              "A ~ U(-1/sqrt(in), 1/sqrt(in)) (max %.4f, bound %.4f), B = 0", mx, bound);
        CHECK(memcmp(P + v->a_off, P + af_lora_slot_at(&lay, 1, AF_PROJ_V)->a_off, sizeof(float) * 8) != 0,
              "layers get different A");
        c.seed = 8;
        af_param_layout lay2;
        if (CHECK(af_param_layout_init(&lay2, m, &c, 3) == AF_OK, "layout 2")) {
            af_lora_init_params(&lay2, P2);
            CHECK(memcmp(P, P2, sizeof(float) * 16) != 0, "seed changes init");
            af_param_layout_free(&lay2);
        }
        double hb = 0, hbias = 0;
        for (int64_t i = 0; i < 3 * s.hidden; i++) hb = fmax(hb, fabs(P[lay.head_w_off + i]));
        for (int i = 0; i < 3; i++) hbias += fabs(P[lay.head_b_off + i]);
        CHECK(hb <= 1 / sqrt((double)s.hidden) && hb > 0 && hbias == 0, "head init");
        free(P);
        free(P2);
        af_param_layout_free(&lay);
    }
    /* rsLoRA scale, qv-only layout */
    af_lora_config c2 = {16, 16.0f, 0.1f, 1, (1u << AF_PROJ_Q) | (1u << AF_PROJ_V), 1, 0};
    if (CHECK(af_param_layout_init(&lay, m, &c2, 0) == AF_OK, "qv layout")) {
        CHECK(fabsf(lay.scale - 4.0f) < 1e-6f && lay.head_w_off == -1 && lay.n_total == lay.n_lora &&
                  af_lora_slot_at(&lay, 0, AF_PROJ_K)->a_off == -1,
              "rslora scale, no head, untargeted slot -1");
        af_param_layout_free(&lay);
    }
    /* validation */
    af_lora_config bad = c2;
    bad.r = 0;
    CHECK(af_param_layout_init(&lay, m, &bad, 2) == AF_ERR_INVALID_ARG, "r = 0 rejected");
    bad.r = s.n_kv_head * s.head_dim + 1; /* > out of k/v... but only q,v targeted: v has out = kvd */
    CHECK(af_param_layout_init(&lay, m, &bad, 2) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "v_proj"),
          "r > min(in, out) rejected: %s", af_last_error());
    bad = c2;
    bad.alpha = 0;
    CHECK(af_param_layout_init(&lay, m, &bad, 2) == AF_ERR_INVALID_ARG, "alpha 0 rejected");
    bad = c2;
    bad.dropout = 1.0f;
    CHECK(af_param_layout_init(&lay, m, &bad, 2) == AF_ERR_INVALID_ARG, "dropout 1 rejected");
    bad = c2;
    bad.targets = 0;
    CHECK(af_param_layout_init(&lay, m, &bad, 2) == AF_ERR_INVALID_ARG, "no target rejected");
    af_model_free(m);
}

/* Layer selection: af_lora_parse_layers and af_param_layout_init_layers. */
static void test_layers(void) {
    int32_t lo = -1, le = -1;
    static const struct {
        const char *spec;
        int32_t lo, le;
    } ok[] = {{NULL, 0, 0}, {"", 0, 0}, {"all", 0, 0}, {"20-29", 20, 0}, {"3-7", 3, 8}, {"5", 5, 6},
              {"29", 29, 0}, {"12-", 12, 0}, {"top10", 20, 0}, {"last:1", 29, 0}, {"top30", 0, 0}, {"0-29", 0, 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(af_lora_parse_layers(ok[i].spec, 30, &lo, &le) == AF_OK && lo == ok[i].lo && le == ok[i].le,
              "layers '%s' -> [%d, %d) expected [%d, %d): %s", ok[i].spec ? ok[i].spec : "(null)", lo, le, ok[i].lo,
              ok[i].le, af_last_error());
    static const char *const bad[] = {"30", "5-3", "top0", "top31", "x", "-3", "3-x", "1,2", "top", "2-40", "3 -5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(af_lora_parse_layers(bad[i], 30, &lo, &le) == AF_ERR_INVALID_ARG && strstr(af_last_error(), bad[i]),
              "layers '%s' rejected: %s", bad[i], af_last_error());

    /* PEFT's layers_to_transform as a list: ascending, any set */
    static const struct {
        const char *spec;
        int32_t n, l[4];
    } lok[] = {{"0,2,5", 3, {0, 2, 5}}, {"5, 2,0", 3, {0, 2, 5}}, {"29", 1, {29}}, {"3,1", 2, {1, 3}}};
    for (size_t i = 0; i < sizeof lok / sizeof lok[0]; i++) {
        int32_t *v = NULL, n = 0;
        const af_status st = af_lora_parse_layer_list(lok[i].spec, 30, &v, &n);
        CHECK(st == AF_OK && n == lok[i].n && !memcmp(v, lok[i].l, sizeof(int32_t) * (size_t)n),
              "layer list '%s': %d layers: %s", lok[i].spec, n, af_last_error());
        free(v);
    }
    static const struct {
        const char *spec, *why;
    } lbad[] = {{"", "expected a comma list"}, {"1,,2", "expected a comma list"}, {"1,", "expected a comma list"},
                {"a", "expected a comma list"}, {"1-3", "expected a comma list"}, {"-1", "expected a comma list"},
                {"30", "layer 30 does not exist (layers 0..29)"}, {"2,4,2", "layer 2 is listed twice"}};
    for (size_t i = 0; i < sizeof lbad / sizeof lbad[0]; i++) {
        int32_t *v = (int32_t *)&lo, n = 5;
        CHECK(af_lora_parse_layer_list(lbad[i].spec, 30, &v, &n) == AF_ERR_INVALID_ARG && !v && n == 0 &&
                  strstr(af_last_error(), lbad[i].why),
              "layer list '%s' rejected: %s", lbad[i].spec, af_last_error());
    }

    tm_spec s = tm_default("llama", AF_TYPE_F32);
    s.n_layer = 4;
    af_model *m = NULL;
    if (!CHECK(tm_load(&s, &m) == AF_OK, "tiny model: %s", af_last_error())) return;
    af_lora_config c = {4, 8.0f, 0.0f, 0, (1u << AF_PROJ_Q) | (1u << AF_PROJ_V), 7, 0};
    { /* a contiguous list is the range; a list with a gap leaves the layer between empty */
        af_param_layout r, l;
        static const int32_t l12[] = {1, 2}, l13[] = {1, 3}, unsorted[] = {2, 1}, past[] = {1, 4};
        if (CHECK(af_param_layout_init_layers(&r, m, &c, 3, 1, 3) == AF_OK &&
                      af_param_layout_init_list(&l, m, &c, 3, l12, 2) == AF_OK,
                  "layouts: %s", af_last_error())) {
            CHECK(r.n_total == l.n_total && r.head_w_off == l.head_w_off && r.layer_min == l.layer_min &&
                      r.layer_end == l.layer_end &&
                      !memcmp(r.slots, l.slots, sizeof(af_lora_slot) * (size_t)(4 * AF_PROJ_COUNT)),
                  "list 1,2 = range [1, 3)");
            af_param_layout_free(&l);
            if (CHECK(af_param_layout_init_list(&l, m, &c, 3, l13, 2) == AF_OK, "list 1,3: %s", af_last_error())) {
                int ok_slots = 1;
                for (int32_t ly = 0; ly < 4; ly++)
                    for (int p = 0; p < AF_PROJ_COUNT; p++) {
                        const af_lora_slot *sl = af_lora_slot_at(&l, ly, (af_proj)p);
                        const int want = (ly == 1 || ly == 3) && (c.targets & (1u << p));
                        ok_slots &= want ? sl->a_off >= 0 : sl->a_off == -1 && sl->b_off == -1;
                    }
                CHECK(ok_slots && l.n_lora == r.n_lora && af_lora_lowest_layer(&l) == 1 && l.layer_end == 4,
                      "list 1,3: adapters on layers 1 and 3 only, packed (%lld LoRA floats)", (long long)l.n_lora);
                af_param_layout_free(&l);
            }
            af_param_layout_free(&r);
        }
        CHECK(af_param_layout_init_list(&l, m, &c, 3, unsorted, 2) == AF_ERR_INVALID_ARG &&
                  af_param_layout_init_list(&l, m, &c, 3, past, 2) == AF_ERR_INVALID_ARG &&
                  af_param_layout_init_list(&l, m, &c, 3, l12, 0) == AF_ERR_INVALID_ARG,
              "unsorted, out-of-range and empty lists refused");
    }
    af_param_layout full, part;
    if (CHECK(af_param_layout_init(&full, m, &c, 3) == AF_OK, "full layout")) {
        CHECK(af_lora_lowest_layer(&full) == 0 && full.layer_min == 0 && full.layer_end == 4, "full: lowest layer 0");
        if (CHECK(af_param_layout_init_layers(&part, m, &c, 3, 1, 3) == AF_OK, "layers [1, 3): %s", af_last_error())) {
            int ok_slots = 1;
            for (int32_t l = 0; l < 4; l++)
                for (int p = 0; p < AF_PROJ_COUNT; p++) {
                    const af_lora_slot *sl = af_lora_slot_at(&part, l, (af_proj)p);
                    int want = l >= 1 && l < 3 && (c.targets & (1u << p));
                    ok_slots &= want ? (sl->a_off >= 0 && sl->b_off >= 0) : (sl->a_off == -1 && sl->b_off == -1);
                }
            CHECK(ok_slots, "only layers 1, 2 have adapters");
            CHECK(part.n_lora * 2 == full.n_lora && part.head_w_off == part.n_lora && af_lora_lowest_layer(&part) == 1 &&
                      part.layer_min == 1 && part.layer_end == 3,
                  "half the LoRA parameters (%lld vs %lld), lowest layer %d", (long long)part.n_lora,
                  (long long)full.n_lora, af_lora_lowest_layer(&part));
            /* the same A for the same (layer, proj) whatever the range */
            float *Pf = malloc(sizeof(float) * (size_t)full.n_total), *Pp = malloc(sizeof(float) * (size_t)part.n_total);
            af_lora_init_params(&full, Pf);
            af_lora_init_params(&part, Pp);
            const af_lora_slot *af = af_lora_slot_at(&full, 2, AF_PROJ_V), *ap = af_lora_slot_at(&part, 2, AF_PROJ_V);
            CHECK(!memcmp(Pf + af->a_off, Pp + ap->a_off, sizeof(float) * (size_t)(4 * af->in)),
                  "A of layer 2 v_proj independent of the range");
            CHECK(!memcmp(Pf + full.head_w_off, Pp + part.head_w_off, sizeof(float) * (size_t)(3 * s.hidden)),
                  "head init independent of the range");
            free(Pf);
            free(Pp);
            af_param_layout_free(&part);
        }
        af_param_layout_free(&full);
    }
    static const int32_t bad_ranges[][2] = {{-1, 0}, {4, 0}, {2, 2}, {3, 1}, {0, 5}, {0, -1}};
    for (size_t i = 0; i < sizeof bad_ranges / sizeof bad_ranges[0]; i++)
        CHECK(af_param_layout_init_layers(&part, m, &c, 3, bad_ranges[i][0], bad_ranges[i][1]) == AF_ERR_INVALID_ARG &&
                  strstr(af_last_error(), "layer range"),
              "range [%d, %d) rejected: %s", bad_ranges[i][0], bad_ranges[i][1], af_last_error());
    af_model_free(m);
}

/* AF_LORA_INIT_GAUSSIAN: A from N(0, 1/r²) (PEFT init_lora_weights="gaussian"), deterministic, B = 0. */
static void test_gaussian(void) {
    af_lora_slot slots[2 * AF_PROJ_COUNT];
    for (int k = 0; k < 2 * AF_PROJ_COUNT; k++) slots[k] = (af_lora_slot){-1, -1, 0, 0, -1};
    const int32_t r = 4;
    const int64_t in = 512, out = 64;
    slots[0] = (af_lora_slot){0, r * in, in, out, -1}; /* layer 0 q_proj */
    af_param_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.lora = (af_lora_config){r, 8.0f, 0.0f, 0, 1u << AF_PROJ_Q, 5, 0};
    lay.n_layers = 2;
    lay.slots = slots;
    lay.head_w_off = lay.head_b_off = -1;
    lay.n_lora = lay.n_total = r * in + out * r;
    lay.init = AF_LORA_INIT_GAUSSIAN;
    float *P = malloc(sizeof(float) * (size_t)lay.n_total), *Q = malloc(sizeof(float) * (size_t)lay.n_total);
    for (int64_t i = 0; i < lay.n_total; i++) P[i] = Q[i] = 7.0f;
    af_lora_init_params(&lay, P);
    af_lora_init_params(&lay, Q);
    double s1 = 0, s2 = 0, s4 = 0;
    const int64_t na = r * in;
    for (int64_t i = 0; i < na; i++) s1 += P[i], s2 += (double)P[i] * P[i], s4 += pow(P[i], 4);
    const double mean = s1 / na, var = s2 / na - mean * mean, kurt = (s4 / na) / (var * var);
    int bzero = 1;
    for (int64_t i = na; i < lay.n_total; i++) bzero &= P[i] == 0.0f;
    CHECK(fabs(mean) < 4.0 * 0.25 / sqrt((double)na) && fabs(sqrt(var) - 0.25) < 0.02 && fabs(kurt - 3.0) < 0.5 &&
              bzero && !memcmp(P, Q, sizeof(float) * (size_t)lay.n_total),
          "gaussian init: mean %.4f, std %.4f (1/r = 0.25), kurtosis %.2f (3), B = 0, deterministic", mean, sqrt(var),
          kurt);
    lay.init = AF_LORA_INIT_DEFAULT;
    af_lora_init_params(&lay, Q);
    double amax = 0;
    for (int64_t i = 0; i < na; i++) amax = fmax(amax, fabs((double)Q[i]));
    CHECK(amax <= 1.0 / sqrt((double)in) && amax > 0.9 / sqrt((double)in), "default init: U(-1/sqrt(in), 1/sqrt(in)), max %.4f",
          amax);
    free(P), free(Q);
}

/* The forward with a dropout mask multiplies the masked input in blocks of whole 64 KiB chunks of rows
 * (16384 / in rows: 28 for in = 576); xa must be bitwise that of one product per chunk (each chunk masked
 * on the stack and multiplied alone: the implementation before the blocks), a last chunk of <= 4 rows
 * (the products' decode path) included: n = 2048 (2048 % 28 = 4), 2045 (1), 300 (20), 9 — with f32 and,
 * where the CPU has them, bf16 products. */
static void test_drop_blocks(void) {
    const int64_t in = 576, out = 64, rows = 16384 / in, ns[] = {2048, 2045, 300, 9};
    const int32_t r = 16;
    uint64_t rng = 77;
    for (int prec = 0; prec < 2; prec++) {
        if (prec == 1 && tl_ctx_set(NULL, -1, "bf16", -1) != AF_OK) break;
        for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
            const int64_t n = ns[t];
            float *x = malloc(sizeof(float) * (size_t)(n * in)), *mask = malloc(sizeof(float) * (size_t)(n * in));
            float *A = malloc(sizeof(float) * (size_t)(r * in)), *B = malloc(sizeof(float) * (size_t)(out * r));
            float *y = calloc((size_t)(n * out), sizeof(float)), *xa = malloc(sizeof(float) * (size_t)(n * r));
            float *ref = malloc(sizeof(float) * (size_t)(n * r)), *buf = malloc(sizeof(float) * (size_t)(rows * in));
            fill(x, n * in, &rng, 1.f);
            fill(A, r * in, &rng, 0.1f);
            fill(B, out * r, &rng, 0.1f);
            af_lora_dropout_mask(T_CTX, mask, 5, 2, AF_PROJ_Q, 0, n, in, 0.1f);
            af_lora_forward(T_CTX, y, xa, x, mask, A, B, n, in, out, r, 2.0f);
            for (int64_t t0 = 0; t0 < n; t0 += rows) {
                const int64_t m = n - t0 < rows ? n - t0 : rows;
                for (int64_t i = 0; i < m * in; i++) buf[i] = x[t0 * in + i] * mask[t0 * in + i];
                af_gemm_abt(T_CTX, ref + t0 * r, buf, A, m, r, in, 0);
            }
            CHECK(!memcmp(xa, ref, sizeof(float) * (size_t)(n * r)),
                  "dropout forward in blocks, %s products, n = %lld: x·Aᵀ bitwise one product per %lld-row chunk",
                  prec ? "bf16" : "f32", (long long)n, (long long)rows);
            free(x); free(mask); free(A); free(B); free(y); free(xa); free(ref); free(buf);
        }
    }
    tl_ctx_set(NULL, -1, "f32", -1);
}

/* af_proj_lora_forward / af_proj_lora_backward (the projection with its correction in one call,
 * backend.h proj_lora_forward / proj_lora_backward) against their compositions af_matmul_rows +
 * af_lora_forward / af_lora_backward (dA, dB always bit for bit; y and dx as follows): f32 bit for bit; bf16 (where the CPU has
 * the products; on AMX tiles the correction runs in the frozen product's epilogue as bf16 products, where
 * the composition's may be f32: the LoRA products of < 256 output columns take the panel path) within
 * the bf16 bound of the correction — with and without a dropout mask, Q4_1 and F32 weights, row counts over and under one
 * 128-row block, 200 output columns (a ragged last panel), r 16 and 8; xa as the composition's. */
static void test_proj_fused(void) {
    static const int64_t SH[][4] = {{300, 512, 200, 16}, {2048, 576, 1536, 16}, {137, 256, 96, 8}, {40, 512, 64, 16},
                                    {1024, 512, 400, 16}}; /* out % 32 != 0: a partial last panel of dy's pairs */
    static const float SC[] = {2.0f, 0.7f};
    uint64_t rng = 91;
    for (int prec = 0; prec < 2; prec++) {
        if (prec == 1 && tl_ctx_set(NULL, -1, "bf16", -1) != AF_OK) break;
        for (size_t sh = 0; sh < sizeof SH / sizeof *SH; sh++)
            for (int ty = 0; ty < 2; ty++)
                for (int msk = 0; msk < 2; msk++)
                    for (int sc = 0; sc < 2; sc++) {
                        const int64_t n = SH[sh][0], in = SH[sh][1], out = SH[sh][2];
                        const int32_t r = (int32_t)SH[sh][3];
                        const uint32_t type = ty ? AF_TYPE_Q4_1 : AF_TYPE_F32;
                        float *wf = malloc(sizeof(float) * (size_t)(out * in)), *x = malloc(sizeof(float) * (size_t)(n * in));
                        float *mask = malloc(sizeof(float) * (size_t)(n * in)), *A = malloc(sizeof(float) * (size_t)(r * in));
                        float *B = malloc(sizeof(float) * (size_t)(out * r)), *xa0 = malloc(sizeof(float) * (size_t)(n * r));
                        float *xa1 = malloc(sizeof(float) * (size_t)(n * r)), *y0 = malloc(sizeof(float) * (size_t)(n * out));
                        float *y1 = malloc(sizeof(float) * (size_t)(n * out)), *yf = malloc(sizeof(float) * (size_t)(n * out));
                        uint8_t *w = malloc(af_row_bytes(type, in) * (size_t)out);
                        fill(wf, out * in, &rng, 0.1f);
                        fill(x, n * in, &rng, 1.f);
                        fill(A, r * in, &rng, 0.1f);
                        fill(B, out * r, &rng, 0.1f);
                        for (int64_t o = 0; o < out; o++)
                            af_quantize_row(type, wf + o * in, w + (size_t)o * af_row_bytes(type, in), in);
                        const float *mk = msk ? mask : NULL;
                        if (msk) af_lora_dropout_mask(T_CTX, mask, 3, 1, AF_PROJ_O, 0, n, in, 0.1f);
                        af_matmul_rows(T_CTX, 0, y0, x, w, type, n, in, out, 0, 0);
                        memcpy(yf, y0, sizeof(float) * (size_t)(n * out)); /* the frozen product alone */
                        af_lora_forward(T_CTX, y0, xa0, x, mk, A, B, n, in, out, r, SC[sc]);
                        af_proj_lora_forward(T_CTX, y1, xa1, x, mk, w, type, A, B, n, in, out, r, SC[sc], 0);
                        char what[160];
                        snprintf(what, sizeof what, "projection + LoRA in one call, %s, %s n=%lld in=%lld out=%lld r=%d %s scale %g",
                                 prec ? "bf16" : "f32", af_type_name(type), (long long)n, (long long)in, (long long)out, r,
                                 msk ? "dropout" : "no dropout", SC[sc]);
                        CHECK(!memcmp(xa0, xa1, sizeof(float) * (size_t)(n * r)), "%s: xa as the composition's", what);
                        if (!prec) {
                            CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)(n * out)), "%s: y bit for bit", what);
                        } else {
                            /* y - frozen is the correction: bf16 operands (relative 2^-8 each) summed in f32 */
                            double worst = 0;
                            for (int64_t t = 0; t < n; t++)
                                for (int64_t o = 0; o < out; o++) {
                                    double ab = 0;
                                    for (int32_t j = 0; j < r; j++) ab += fabs((double)xa0[t * r + j] * B[o * r + j]);
                                    const double bound = (3 * ldexp(1, -8) + r * ldexp(1, -23)) * SC[sc] * ab +
                                                         4 * ldexp(1, -24) * fabs(yf[t * out + o]) + 1e-30;
                                    const double e = fabs((double)y1[t * out + o] - y0[t * out + o]) / bound;
                                    if (e > worst) worst = e;
                                }
                            CHECK(worst <= 1, "%s: y within the bf16 bound of the correction (worst %.3g)", what, worst);
                        }
                        /* the backward: dy = y0 - 1 onto dx = 0.25 (accumulate), dA, dB from 0 */
                        float *dy = malloc(sizeof(float) * (size_t)(n * out)), *dx0 = malloc(sizeof(float) * (size_t)(n * in));
                        float *dx1 = malloc(sizeof(float) * (size_t)(n * in)), *dxf = malloc(sizeof(float) * (size_t)(n * in));
                        float *g0 = calloc((size_t)(r * (in + out)), sizeof(float)), *g1 = calloc((size_t)(r * (in + out)), sizeof(float));
                        float *tmp = malloc(sizeof(float) * (size_t)(n * (r + in)));
                        for (int64_t i = 0; i < n * out; i++) dy[i] = y0[i] - 1.0f;
                        for (int64_t i = 0; i < n * in; i++) dx0[i] = dx1[i] = dxf[i] = 0.25f;
                        af_matmul_rows(T_CTX, 1, dx0, dy, w, type, n, in, out, 1, 0);
                        memcpy(dxf, dx0, sizeof(float) * (size_t)(n * in)); /* the frozen part alone */
                        af_lora_backward(T_CTX, dx0, g0, g0 + r * in, tmp, dy, x, xa0, mk, A, B, n, in, out, r, SC[sc]);
                        af_proj_lora_backward(T_CTX, dx1, g1, g1 + r * in, tmp, dy, x, xa0, mk, w, type, A, B, n, in, out, r,
                                              SC[sc], 1, 0);
                        CHECK(!memcmp(g0, g1, sizeof(float) * (size_t)(r * (in + out))), "%s: backward dA, dB bit for bit", what);
                        if (!prec) {
                            CHECK(!memcmp(dx0, dx1, sizeof(float) * (size_t)(n * in)), "%s: backward dx bit for bit", what);
                        } else {
                            /* dx - frozen part: t·A (⊙ mask), t = scale·dy·B: bf16 operands summed in f32 */
                            double worst = 0;
                            for (int64_t t = 0; t < n; t++) {
                                float tv[32];
                                for (int32_t j = 0; j < r; j++) {
                                    double a = 0;
                                    for (int64_t o = 0; o < out; o++) a += fabs((double)dy[t * out + o] * B[o * r + j]);
                                    tv[j] = (float)(SC[sc] * a);
                                }
                                for (int64_t i = 0; i < in; i++) {
                                    double ab = 0;
                                    for (int32_t j = 0; j < r; j++) ab += fabs((double)tv[j] * A[j * in + i]);
                                    if (mk) ab *= mk[t * in + i];
                                    const double bound = (3 * ldexp(1, -8) + r * ldexp(1, -23)) * ab +
                                                         4 * ldexp(1, -24) * fabs(dxf[t * in + i]) + 1e-30;
                                    const double e = fabs((double)dx1[t * in + i] - dx0[t * in + i]) / bound;
                                    if (e > worst) worst = e;
                                }
                            }
                            CHECK(worst <= 1, "%s: backward dx within the bf16 bound of t·A (worst %.3g)", what, worst);
                        }
                        free(dy); free(dx0); free(dx1); free(dxf); free(g0); free(g1); free(tmp);
                        free(wf); free(x); free(mask); free(A); free(B); free(xa0); free(xa1); free(y0); free(y1); free(yf); free(w);
                    }
    }
    tl_ctx_set(NULL, -1, "f32", -1);
}

int main(void) {
    test_proj_fused();
    test_drop_blocks();
    test_gaussian();
    test_layers();
    test_fd(0);
    test_fd(1);
    test_merge();
    test_targets();
    test_layout();
    return tl_finish("lora");
}
