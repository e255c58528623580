/*
 * test_pref.c — preference losses (src/train/pref.c): DPO sigmoid (with label smoothing), IPO and ORPO.
 *   1. af_pref_loss: closed-form values, the derivatives against central finite differences of the
 *      loss itself, the metrics, and every argument refusal.
 *   2. Parity with TRL on the tiny random llama of tests/fixtures/hf_tiny_llama (LoRA r 8, alpha 16
 *      on all 7 projections, A/B from the closed-form formulas of peft_fixture.h, 3 pairs):
 *      reference and policy log-probabilities, the losses and rewards of DPOTrainer (sigmoid, ipo) and
 *      ORPOTrainer, and every LoRA gradient's norm (tests/ref/make_pref_ref.py ->
 *      tests/fixtures/pref_ref.bin).
 */
#include "afinar.h"
#include "testlib.h"

#include "lora/adapter_io.h"
#include "lora/lora.h"
#include "model/model.h"
#include "train/engine.h"
#include "train/pref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peft_fixture.h"

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-12); }

static void test_loss_math(void) {
    const af_pref_type types[3] = {AF_PREF_SIGMOID, AF_PREF_IPO, AF_PREF_ORPO};
    const char *names[3] = {"sigmoid", "ipo", "orpo"};
    af_pref_logps lp[3] = {{-12.5, -15.0, -13.0, -14.2, 5, 7}, {-8.0, -6.5, -8.4, -6.0, 4, 3}, {-20.0, -22.5, -19.0, -23.0, 9, 10}};
    for (int t = 0; t < 3; t++)
        for (int ls = 0; ls < (t == 0 ? 2 : 1); ls++) {
            af_pref_opts o = {types[t], 0.1 + 0.2 * t, ls ? 0.2 : 0.0};
            double L, dc[3], dr[3];
            af_pref_metrics m;
            if (!CHECK(af_pref_loss(&o, lp, 3, &L, dc, dr, &m) == AF_OK, "%s: loss: %s", names[t], af_last_error())) continue;
            CHECK(isfinite(L) && m.loss == L, "%s: finite loss %g, metrics.loss equal", names[t], L);
            double worst = 0;
            for (int i = 0; i < 3; i++)
                for (int side = 0; side < 2; side++) {
                    const double h = 1e-5;
                    af_pref_logps a[3], b[3];
                    memcpy(a, lp, sizeof a), memcpy(b, lp, sizeof b);
                    if (side) a[i].r += h, b[i].r -= h;
                    else a[i].c += h, b[i].c -= h;
                    double La, Lb;
                    af_pref_loss(&o, a, 3, &La, NULL, NULL, NULL);
                    af_pref_loss(&o, b, 3, &Lb, NULL, NULL, NULL);
                    const double fd = (La - Lb) / (2 * h), an = side ? dr[i] : dc[i];
                    worst = fmax(worst, fabs(fd - an) / fmax(fabs(fd), 1e-6));
                }
            CHECK(worst < 1e-6, "%s%s: d loss / d logp vs central differences, worst rel %.2e", names[t], ls ? " (label smoothing)" : "", worst);
        }
    /* closed forms */
    af_pref_logps eq = {-10, -10, -10, -10, 3, 3};
    af_pref_opts s = {AF_PREF_SIGMOID, 0.1, 0.0};
    double L;
    af_pref_metrics m;
    CHECK(af_pref_loss(&s, &eq, 1, &L, NULL, NULL, &m) == AF_OK && fabs(L - log(2.0)) < 1e-15 && m.reward_accuracy == 0 &&
              m.reward_margin == 0,
          "sigmoid: policy == reference gives log 2 (%.17g), margin 0", L);
    af_pref_opts ipo = {AF_PREF_IPO, 0.5, 0.0};
    CHECK(af_pref_loss(&ipo, &eq, 1, &L, NULL, NULL, NULL) == AF_OK && fabs(L - 1.0) < 1e-15, "ipo: z = 0 gives (1/(2 beta))^2 = 1 (%.17g)", L);
    af_pref_logps win = {-5, -9, -7, -7, 2, 2};
    CHECK(af_pref_loss(&s, &win, 1, &L, NULL, NULL, &m) == AF_OK && fabs(m.reward_chosen - 0.2) < 1e-15 &&
              fabs(m.reward_rejected + 0.2) < 1e-15 && m.reward_accuracy == 1 && fabs(m.reward_margin - 0.4) < 1e-15 &&
              fabs(L + log(1 / (1 + exp(-0.4)))) < 1e-15,
          "sigmoid: rewards beta(c - c0) = 0.2, beta(r - r0) = -0.2, accuracy 1, loss -log sigmoid(0.4)");
    /* refusals */
    af_pref_opts bad = s;
    bad.beta = 0;
    CHECK(af_pref_loss(&bad, &eq, 1, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "beta 0 refused");
    bad = s, bad.label_smoothing = 0.5;
    CHECK(af_pref_loss(&bad, &eq, 1, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "label_smoothing 0.5 refused");
    CHECK(af_pref_loss(&s, &eq, 0, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "no pair refused");
    af_pref_logps z = eq;
    z.nc = 0;
    CHECK(af_pref_loss(&s, &z, 1, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "a completion without tokens refused");
    z = eq, z.c0 = NAN;
    CHECK(af_pref_loss(&s, &z, 1, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "a NaN log-probability refused");
    af_pref_opts orpo = {AF_PREF_ORPO, 0.1, 0};
    z = eq, z.c = 0;
    CHECK(af_pref_loss(&orpo, &z, 1, &L, NULL, NULL, NULL) == AF_ERR_INVALID_ARG, "orpo: log-probability 0 refused");
}

static int64_t hf_row(int permuted, int p, int64_t o, int64_t hd) {
    if (!permuted || (p != AF_PROJ_Q && p != AF_PROJ_K)) return o;
    return af_adapter_qk_hf_row(o, hd);
}

static void test_trl_parity(void) {
    const char *fixture = "tests/fixtures/pref_ref.bin";
    size_t len = 0;
    char *buf = tl_read_file(fixture, &len);
    if (!CHECK(buf != NULL, "fixture %s missing (tests/ref/make_pref_ref.py)", fixture)) return;
    rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    const void *magic = take(&r, 4);
    const uint32_t ver = u32(&r), n = u32(&r), rank = u32(&r), nl = u32(&r), ntok = u32(&r), vocab = u32(&r);
    if (!CHECK(magic && !memcmp(magic, "AFPR", 4) && ver == 1 && n >= 1 && n <= 16 && rank >= 1 && rank <= 64 && ntok < 4096,
               "%s: header", fixture)) {
        free(buf);
        return;
    }
    const int32_t *ss = take(&r, 4 * (size_t)(2 * n + 1)), *tok = take(&r, 4 * (size_t)ntok), *tg = take(&r, 4 * (size_t)ntok);
    double ref_c[16], ref_r[16], pol_c[16], pol_r[16];
    for (uint32_t i = 0; i < n; i++) ref_c[i] = f64(&r);
    for (uint32_t i = 0; i < n; i++) ref_r[i] = f64(&r);
    for (uint32_t i = 0; i < n; i++) pol_c[i] = f64(&r);
    for (uint32_t i = 0; i < n; i++) pol_r[i] = f64(&r);
    af_model *m = NULL;
    if (!CHECK(ss && tok && tg, "%s: body", fixture) ||
        !CHECK(af_model_load(T_CTX, "tests/fixtures/hf_tiny_llama", &m) == AF_OK, "load: %s", af_last_error())) {
        free(buf);
        return;
    }
    const af_model_config *mc = &m->cfg;
    CHECK((int)nl == mc->num_hidden_layers && (int)vocab == mc->vocab_size, "tiny llama: %u layers, vocab %u", nl, vocab);
    const int permuted = af_adapter_qk_permuted(mc->architecture);
    af_lora_config cfg = {(int32_t)rank, 2.0f * (float)rank, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    if (!CHECK(af_param_layout_init(&lay, m, &cfg, 0) == AF_OK, "layout: %s", af_last_error()) ||
        !CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine: %s", af_last_error())) {
        af_model_free(m);
        free(buf);
        return;
    }
    float *P = malloc(sizeof(float) * (size_t)lay.n_total), *G = malloc(sizeof(float) * (size_t)lay.n_total),
          *Z = calloc((size_t)lay.n_total, sizeof(float));
    for (int l = 0; l < (int)nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(&lay, l, (af_proj)p);
            for (int64_t j = 0; j < rank; j++)
                for (int64_t i = 0; i < s->in; i++) P[s->a_off + j * s->in + i] = lora_a(l, p, j, i);
            for (int64_t o = 0; o < s->out; o++)
                for (int64_t j = 0; j < rank; j++)
                    P[s->b_off + o * rank + j] = lora_b(l, p, hf_row(permuted, p, o, mc->head_dim), j);
        }
    af_pref_batch b = {tok, ss, tg, (int32_t)n, NULL, NULL};
    double my_rc[16], my_rr[16];
    double worst_lp = 0;
    if (CHECK(af_pref_ref_logps(e, Z, &b, my_rc, my_rr) == AF_OK, "reference log-probabilities: %s", af_last_error()))
        for (uint32_t i = 0; i < n; i++) worst_lp = fmax(worst_lp, fmax(rel(my_rc[i], ref_c[i]), rel(my_rr[i], ref_r[i])));
    CHECK(worst_lp < 1e-5, "reference (adapter off) log-probabilities vs transformers: worst rel %.2e", worst_lp);
    b.ref_c = my_rc, b.ref_r = my_rr;
    const uint32_t n_types = u32(&r);
    const char *names[3] = {"sigmoid (DPO)", "ipo", "orpo"};
    for (uint32_t k = 0; k < n_types && k < 8; k++) {
        const uint32_t type = u32(&r);
        af_pref_opts po = {(af_pref_type)type, f64(&r), f64(&r)};
        const double t_loss = f64(&r), t_rc = f64(&r), t_rr = f64(&r), t_margin = f64(&r), t_acc = f64(&r);
        const float *t_norms = take(&r, 4 * (size_t)nl * 14);
        if (!CHECK(type <= 2 && t_norms, "%s: entry %u", fixture, k)) break;
        memset(G, 0, sizeof(float) * (size_t)lay.n_total);
        const af_step_opts so = {AF_POOL_MEAN, NULL, 0, 0, 0};
        af_pref_metrics mt;
        if (!CHECK(af_pref_step(e, P, G, &b, &so, &po, 1.0f, &mt) == AF_OK, "%s: step: %s", names[type], af_last_error())) continue;
        double mc_ = 0, mr_ = 0;
        for (uint32_t i = 0; i < n; i++) mc_ += pol_c[i] / n, mr_ += pol_r[i] / n;
        CHECK(rel(mt.logp_chosen, mc_) < 1e-5 && rel(mt.logp_rejected, mr_) < 1e-5,
              "%s: policy log-probabilities (logps/chosen %.6f, logps/rejected %.6f) vs transformers + PEFT %.6f / %.6f",
              names[type], mt.logp_chosen, mt.logp_rejected, mc_, mr_);
        CHECK(rel(mt.loss, t_loss) < 1e-5, "%s: loss %.8f vs TRL %.8f (rel %.2e)", names[type], mt.loss, t_loss, rel(mt.loss, t_loss));
        CHECK(fabs(mt.reward_chosen - t_rc) < 1e-5 * fmax(1, fabs(t_rc)) && fabs(mt.reward_rejected - t_rr) < 1e-5 * fmax(1, fabs(t_rr)) &&
                  fabs(mt.reward_margin - t_margin) < 1e-5 * fmax(1, fabs(t_margin)) && fabs(mt.reward_accuracy - t_acc) < 1e-6,
              "%s: rewards chosen %.6f / rejected %.6f / margin %.6f / accuracy %.2f vs TRL %.6f / %.6f / %.6f / %.2f",
              names[type], mt.reward_chosen, mt.reward_rejected, mt.reward_margin, mt.reward_accuracy, t_rc, t_rr, t_margin, t_acc);
        double worst = 0;
        for (int l = 0; l < (int)nl; l++)
            for (int p = 0; p < AF_PROJ_COUNT; p++) {
                const af_lora_slot *s = af_lora_slot_at(&lay, l, (af_proj)p);
                double na = 0, nb = 0;
                for (int64_t i = 0; i < rank * s->in; i++) na += (double)G[s->a_off + i] * G[s->a_off + i];
                for (int64_t i = 0; i < s->out * rank; i++) nb += (double)G[s->b_off + i] * G[s->b_off + i];
                worst = fmax(worst, fmax(rel(sqrt(na), t_norms[(l * 7 + p) * 2]), rel(sqrt(nb), t_norms[(l * 7 + p) * 2 + 1])));
            }
        CHECK(worst < 2e-3, "%s: LoRA gradient norms vs TRL + PEFT: worst rel %.2e (tolerance 2e-3, as the SFT parity)", names[type], worst);
        printf("  %s: loss %.8f (TRL %.8f), rewards/margins %.6f, worst gradient-norm rel %.2e\n", names[type], mt.loss, t_loss,
               mt.reward_margin, worst);
    }
    /* a non-finite parameter: NaN log-probabilities give a NaN loss and no gradient (the trainer's skip) */
    {
        const af_lora_slot *s0 = af_lora_slot_at(&lay, 0, AF_PROJ_Q);
        P[s0->a_off] = NAN;
        memset(G, 0, sizeof(float) * (size_t)lay.n_total);
        const af_step_opts so = {AF_POOL_MEAN, NULL, 0, 0, 0};
        af_pref_opts po = {AF_PREF_SIGMOID, 0.1, 0.0};
        af_pref_metrics mt;
        int zero = 1;
        const af_status st = af_pref_step(e, P, G, &b, &so, &po, 1.0f, &mt);
        for (int64_t i = 0; i < lay.n_total; i++) zero &= G[i] == 0.0f;
        CHECK(st == AF_OK && isnan(mt.loss) && zero, "a NaN parameter: step AF_OK, loss NaN (%g), no gradient added (%s)",
              mt.loss, af_last_error());
    }
    free(P), free(G), free(Z);
    af_engine_free(e);
    af_param_layout_free(&lay);
    af_model_free(m);
    free(buf);
}

int main(void) {
    test_loss_math();
    test_trl_parity();
    return tl_finish("test_pref");
}
