/*
 * test_engine.c — the training step (src/train/engine.c) on tiny random models written as GGUF by
 * the test (tests/tinymodel.c), for llama and gemma3 and for base weights in several block types
 * (qwen2 and qwen3 in one block type each):
 *  (a) gradients of af_engine_step vs central finite differences of the loss on LoRA A, B and head
 *      parameters: directional derivatives along random ±1 directions over each group, plus the
 *      largest-gradient elements one by one. The forward is f32 and eps is 1e-2 (directions) /
 *      2e-2 (elements), so the expected relative error is ~1e-3; tolerance 2e-2 relative plus
 *      an absolute floor of 1e-3 of the group's gradient norm.
 *      Checkpointing on and off must give bitwise identical gradients and losses (recomputation is
 *      deterministic), also with dropout active (masks are regenerated from the counter RNG).
 *  (b) packing: a packed batch of 3 samples of different lengths gives the same logits and the same
 *      summed gradients as the samples one by one (tolerance 1e-4 relative to the largest value).
 *  (c) layer ranges (PEFT layers_to_transform, backward truncated at the lowest adapted layer):
 *      logits, loss and gradients identical to the full model with B = 0 outside the range; FD
 *      check; checkpointing identity; smaller workspace; the same for layer lists with gaps
 *      (af_param_layout_init_list: unlisted layers between listed ones). The frozen-prefix cache gives identical
 *      results cold, warm, partly warm and over budget. Token-blocked products are bitwise equal to
 *      one call per product.
 *  (d) errors on bad input.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "kernels/quant.h"
#include "train/engine.h"
#include "kernels/ctx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    af_model *m;
    af_param_layout lay;
    af_engine *e;
    float *P, *G;
    float *deq; /* test_nf4: the projections as f32 (owned) */
} fixture;

/* test_nf4: fx_init_ex requantizes the loaded model's projections to g_requant (F32: not at all);
 * with g_requant_deq the NF4 weights are then replaced by f32 copies of their dequantized values. */
static uint32_t g_requant = AF_TYPE_F32;
static int g_requant_deq;
static int nf4_apply(fixture *f) {
    int done = 0, kept = 0;
    if (!CHECK(af_model_requantize(f->m, g_requant, &done, &kept) == AF_OK, "requantize: %s", af_last_error()))
        return 0;
    CHECK(done == 7 * f->m->cfg.num_hidden_layers && kept == 0, "requantized %d projections, kept %d", done, kept);
    if (!g_requant_deq) return 1;
    size_t total = 0;
    for (int il = 0; il < f->m->cfg.num_hidden_layers; il++) {
        af_layer *L = &f->m->layers[il];
        af_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int k = 0; k < 7; k++) total += (size_t)(w[k]->rows * w[k]->cols);
    }
    f->deq = malloc(total * sizeof(float));
    float *p = f->deq;
    for (int il = 0; il < f->m->cfg.num_hidden_layers; il++) {
        af_layer *L = &f->m->layers[il];
        af_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int k = 0; k < 7; k++) {
            for (int64_t r = 0; r < w[k]->rows; r++) af_weight_row(w[k], r, p + r * w[k]->cols);
            w[k]->data = p;
            w[k]->type = AF_TYPE_F32;
            p += w[k]->rows * w[k]->cols;
        }
    }
    return 1;
}

/* A layer list (af_param_layout_init_list) for the next fx_init_ex of a range, or NULL: the range. */
static const int32_t *g_list;
static int32_t g_nlist;

/* Whether layer l has adapters: in [lmin, le), and listed when g_list is set. */
static int selected(int32_t l, int32_t lmin, int32_t le) {
    int listed = !g_list;
    for (int32_t i = 0; g_list && i < g_nlist; i++) listed |= g_list[i] == l;
    return listed && l >= lmin && l < le;
}

/* Adapters on `targets` of the layers [lmin, lend) (lend = 0: through the last layer); only the
 * layers of g_list when it is set and the range is not every layer. */
static int fx_init_ex(fixture *f, const tm_spec *s, float dropout, int32_t classes, uint32_t targets, int32_t lmin,
                      int32_t lend) {
    memset(f, 0, sizeof *f);
    if (!CHECK(tm_load(s, &f->m) == AF_OK, "tiny %s %s: %s", s->arch, af_type_name(s->wtype), af_last_error()))
        return 0;
    if (g_requant != AF_TYPE_F32 && !nf4_apply(f)) return 0;
    af_lora_config c = {4, 8.0f, dropout, 0, targets, 5, 0};
    const int list = g_list && !(lmin == 0 && lend == 0);
    if (!CHECK((list ? af_param_layout_init_list(&f->lay, f->m, &c, classes, g_list, g_nlist)
                     : af_param_layout_init_layers(&f->lay, f->m, &c, classes, lmin, lend)) == AF_OK,
               "layout: %s", af_last_error()))
        return 0;
    if (!CHECK(af_engine_new(NULL, f->m, &f->lay, &f->e) == AF_OK, "engine: %s", af_last_error())) return 0;
    f->P = malloc(sizeof(float) * (size_t)f->lay.n_total);
    f->G = calloc((size_t)f->lay.n_total, sizeof(float));
    af_lora_init_params(&f->lay, f->P);
    /* B non-zero (else dA = 0), head bias non-zero */
    uint64_t rng = 77;
    for (int32_t l = 0; l < f->lay.n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *sl = af_lora_slot_at(&f->lay, l, (af_proj)p);
            if (sl->a_off < 0) continue;
            for (int64_t i = 0; i < sl->out * 4; i++) f->P[sl->b_off + i] = tl_rand_uniform(&rng, -0.1f, 0.1f);
        }
    for (int i = 0; i < classes; i++) f->P[f->lay.head_b_off + i] = tl_rand_uniform(&rng, -0.5f, 0.5f);
    /* a stronger head so the loss is sensitive */
    for (int64_t i = 0; i < (int64_t)classes * f->lay.hidden; i++) f->P[f->lay.head_w_off + i] *= 4.0f;
    return 1;
}

static int fx_init(fixture *f, const tm_spec *s, float dropout, int32_t classes) {
    return fx_init_ex(f, s, dropout, classes, 127, 0, 0);
}

static void fx_free(fixture *f) {
    af_engine_free(f->e);
    af_param_layout_free(&f->lay);
    af_model_free(f->m);
    free(f->P);
    free(f->G);
    free(f->deq);
}

/* A batch of 3 samples of lengths 7, 12, 5 with fixed tokens and labels. */
static int32_t g_tok[64], g_ss[4] = {0, 7, 19, 24}, g_lab[3] = {2, 0, 1};
static af_batch make_batch(int vocab) {
    uint64_t rng = 5;
    for (int i = 0; i < 24; i++) g_tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)vocab);
    af_batch b = {g_tok, g_ss, 3, 24, g_lab, NULL, NULL};
    return b;
}

/* Loss from a forward-only pass (cheaper than a step; the same forward code). */
static double loss_at(fixture *f, const af_batch *b, const af_step_opts *o) {
    float lg[64], dl[64];
    if (af_engine_forward(f->e, f->P, b, o, lg) != AF_OK) return NAN;
    return af_ce_loss(dl, NULL, lg, b->labels, o->class_w, b->n_samples, f->lay.num_classes);
}

typedef struct group {
    const char *name;
    int64_t *idx;
    int64_t n;
} group;

/* Collect indices of a parameter group: A (which=0), B (1) of every adapter, or the head (2). */
static group make_group(const af_param_layout *lay, int which) {
    static const char *names[3] = {"LoRA A", "LoRA B", "head"};
    group g = {names[which], malloc(sizeof(int64_t) * (size_t)lay->n_total), 0};
    if (which == 2) {
        for (int64_t i = lay->head_w_off; i < lay->n_total; i++) g.idx[g.n++] = i;
        return g;
    }
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            int64_t off = which ? s->b_off : s->a_off, len = which ? s->out * lay->lora.r : lay->lora.r * s->in;
            for (int64_t i = 0; i < len; i++) g.idx[g.n++] = off + i;
        }
    return g;
}

static double worst_rel_global;

static void grad_check(fixture *f, const af_batch *b, const af_step_opts *o, const char *tag) {
    double L0 = 0;
    memset(f->G, 0, sizeof(float) * (size_t)f->lay.n_total);
    if (!CHECK(af_engine_step(f->e, f->P, f->G, b, o, 1.0f, &L0, NULL) == AF_OK, "%s step: %s", tag, af_last_error()))
        return;
    CHECK(isfinite(L0) && L0 > 0, "%s loss %g", tag, L0);
    for (int which = 0; which < 3; which++) {
        group g = make_group(&f->lay, which);
        double gn = 0;
        for (int64_t i = 0; i < g.n; i++) gn += (double)f->G[g.idx[i]] * f->G[g.idx[i]];
        gn = sqrt(gn);
        CHECK(gn > 0, "%s %s gradient non-zero", tag, g.name);
        uint64_t rng = 1000 + (uint64_t)which;
        double worst = 0;
        /* 3 random ±1 directions over the group */
        for (int dir = 0; dir < 3; dir++) {
            float *v = malloc(sizeof(float) * (size_t)g.n);
            double gv = 0, vn = sqrt((double)g.n);
            for (int64_t i = 0; i < g.n; i++) {
                v[i] = (tl_rand_u64(&rng) & 1) ? 1.0f : -1.0f;
                gv += (double)v[i] * f->G[g.idx[i]];
            }
            const float eps = 1e-2f / (float)sqrt(vn); /* |step| = 1e-2 * n^(1/4) */
            float *save = malloc(sizeof(float) * (size_t)g.n);
            for (int64_t i = 0; i < g.n; i++) save[i] = f->P[g.idx[i]];
            for (int64_t i = 0; i < g.n; i++) f->P[g.idx[i]] = save[i] + eps * v[i];
            double lp = loss_at(f, b, o);
            for (int64_t i = 0; i < g.n; i++) f->P[g.idx[i]] = save[i] - eps * v[i];
            double lm = loss_at(f, b, o);
            for (int64_t i = 0; i < g.n; i++) f->P[g.idx[i]] = save[i];
            double fd = (lp - lm) / (2.0 * eps);
            double err = fabs(fd - gv), lim = 2e-2 * fabs(gv) + 1e-3 * gn * vn;
            double rel = err / (fabs(gv) + 1e-3 * gn * vn);
            if (rel > worst) worst = rel;
            CHECK(err <= lim, "%s %s direction %d: FD %.6g vs grad %.6g (|g| %.3g)", tag, g.name, dir, fd, gv, gn);
            free(v);
            free(save);
        }
        /* the 3 largest-gradient elements one by one */
        for (int k = 0; k < 3; k++) {
            int64_t best = -1;
            for (int64_t i = 0; i < g.n; i++) {
                float a = fabsf(f->G[g.idx[i]]);
                int taken = 0;
                (void)taken;
                if (best < 0 || a > fabsf(f->G[g.idx[best]])) best = i;
            }
            /* exclude it next round by marking through a copy */
            int64_t pi = g.idx[best];
            float save = f->P[pi];
            const float eps = 2e-2f;
            f->P[pi] = save + eps;
            double lp = loss_at(f, b, o);
            f->P[pi] = save - eps;
            double lm = loss_at(f, b, o);
            f->P[pi] = save;
            double fd = (lp - lm) / (2.0 * eps), gi = f->G[pi];
            double err = fabs(fd - gi), lim = 2e-2 * fabs(gi) + 1e-3 * gn;
            double rel = err / (fabs(gi) + 1e-3 * gn);
            if (rel > worst) worst = rel;
            CHECK(err <= lim, "%s %s element %lld: FD %.6g vs grad %.6g", tag, g.name, (long long)pi, fd, gi);
            g.idx[best] = g.idx[--g.n]; /* drop it from the candidates */
        }
        if (worst > worst_rel_global) worst_rel_global = worst;
        if (getenv("TL_VERBOSE")) printf("  %s %s: |g| %.4g, worst relative FD error %.2e\n", tag, g.name, gn, worst);
        free(g.idx);
    }
}

static void test_model_type(const char *arch, uint32_t type) {
    tm_spec s = tm_default(arch, type);
    fixture f;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s", arch, af_type_name(type));
    if (!fx_init(&f, &s, 0.0f, 3)) {
        fx_free(&f);
        return;
    }
    af_batch b = make_batch(s.vocab);
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    grad_check(&f, &b, &o, tag);
    /* checkpointing: identical gradients */
    float *G1 = calloc((size_t)f.lay.n_total, sizeof(float)), *G2 = calloc((size_t)f.lay.n_total, sizeof(float));
    double L1 = 0, L2 = 0;
    float lg1[9], lg2[9];
    af_engine_step(f.e, f.P, G1, &b, &o, 1.0f, &L1, lg1);
    o.checkpointing = 1;
    af_engine_step(f.e, f.P, G2, &b, &o, 1.0f, &L2, lg2);
    CHECK(L1 == L2 && !memcmp(G1, G2, sizeof(float) * (size_t)f.lay.n_total) && !memcmp(lg1, lg2, sizeof lg1),
          "%s checkpointing on/off identical (loss %.9g vs %.9g, max |dG| %.3g)", tag, L1, L2,
          tl_max_abs_diff(G1, G2, (size_t)f.lay.n_total, NULL));
    /* forward-only logits equal the step's */
    float lg3[9];
    CHECK(af_engine_forward(f.e, f.P, &b, &o, lg3) == AF_OK, "forward");
    CHECK(!memcmp(lg1, lg3, sizeof lg1), "%s forward-only logits equal the step's", tag);
    /* grad_scale scales and accumulation adds */
    af_engine_step(f.e, f.P, G2, &b, &o, 0.5f, &L2, NULL);
    for (int64_t i = 0; i < f.lay.n_total; i++) G1[i] *= 1.5f;
    CHECK_CLOSE("gradients accumulate with grad_scale", G2, G1, (size_t)f.lay.n_total, 1e-7, 1e-5);
    free(G1);
    free(G2);
    fx_free(&f);
}

static void test_dropout(const char *arch) {
    tm_spec s = tm_default(arch, AF_TYPE_Q8_0);
    fixture f;
    if (!fx_init(&f, &s, 0.25f, 3)) {
        fx_free(&f);
        return;
    }
    af_batch b = make_batch(s.vocab);
    af_step_opts o = {AF_POOL_LAST, NULL, 0, 1, 31};
    char tag[64];
    snprintf(tag, sizeof tag, "%s/dropout/last-pool", arch);
    grad_check(&f, &b, &o, tag);
    float *G1 = calloc((size_t)f.lay.n_total, sizeof(float)), *G2 = calloc((size_t)f.lay.n_total, sizeof(float));
    double L1 = 0, L2 = 0, L3 = 0;
    af_engine_step(f.e, f.P, G1, &b, &o, 1.0f, &L1, NULL);
    o.checkpointing = 1;
    af_engine_step(f.e, f.P, G2, &b, &o, 1.0f, &L2, NULL);
    CHECK(L1 == L2 && !memcmp(G1, G2, sizeof(float) * (size_t)f.lay.n_total), "%s checkpointing identical", tag);
    o.dropout_seed = 32;
    af_engine_step(f.e, f.P, G2, &b, &o, 1.0f, &L3, NULL);
    CHECK(L3 != L1, "%s another dropout seed changes the loss", tag);
    o.train = 0;
    float lg_eval[9], lg_tr[9];
    af_engine_forward(f.e, f.P, &b, &o, lg_eval);
    o.train = 1;
    af_engine_forward(f.e, f.P, &b, &o, lg_tr);
    CHECK(memcmp(lg_eval, lg_tr, sizeof lg_eval) != 0, "%s eval mode has no dropout", tag);
    free(G1);
    free(G2);
    fx_free(&f);
}

static void test_packing(const char *arch, uint32_t type) {
    tm_spec s = tm_default(arch, type);
    fixture f;
    if (!fx_init(&f, &s, 0.0f, 4)) {
        fx_free(&f);
        return;
    }
    int32_t len[3] = {9, 17, 6}, lab[3] = {3, 1, 0}, ss[4] = {0, 9, 26, 32}, tok[32];
    uint64_t rng = 11;
    for (int i = 0; i < 32; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)s.vocab);
    af_batch b = {tok, ss, 3, 32, lab, NULL, NULL};
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    int64_t nt = f.lay.n_total;
    float *Gp = calloc((size_t)nt, sizeof(float)), *Gs = calloc((size_t)nt, sizeof(float));
    float lp[12], ls[12];
    double Lp = 0, Ls = 0;
    af_engine_step(f.e, f.P, Gp, &b, &o, 1.0f, &Lp, lp);
    for (int k = 0; k < 3; k++) {
        int32_t ss1[2] = {0, len[k]};
        af_batch b1 = {tok + ss[k], ss1, 1, len[k], &lab[k], NULL, NULL};
        double L = 0;
        CHECK(af_engine_step(f.e, f.P, Gs, &b1, &o, 1.0f / 3, &L, ls + 4 * k) == AF_OK, "single %d: %s", k,
              af_last_error());
        Ls += L / 3;
    }
    char w[96];
    snprintf(w, sizeof w, "%s/%s packed vs single logits", arch, af_type_name(type));
    CHECK_CLOSE(w, lp, ls, 12, 1e-5, 1e-4);
    CHECK(fabs(Lp - Ls) <= 1e-5 * (1 + fabs(Ls)), "%s packed loss %.8g vs mean of single %.8g", w, Lp, Ls);
    float gmax = 0;
    for (int64_t i = 0; i < nt; i++) gmax = fmaxf(gmax, fabsf(Gs[i]));
    snprintf(w, sizeof w, "%s/%s packed vs summed single gradients", arch, af_type_name(type));
    CHECK_CLOSE(w, Gp, Gs, (size_t)nt, 1e-4 * gmax, 1e-3);
    free(Gp);
    free(Gs);
    fx_free(&f);
}

/* Layer range (PEFT layers_to_transform): adapters on `targets` of layers [lmin, lend) of a 4-layer
 * model. The engine keeps nothing below lmin and stops the backward there (no dx of lmin's input,
 * and inside layer lmin none below its lowest adapter). Checks: (1) the truncated model against the
 * full one (adapters on every layer) whose adapters outside the range have B = 0 and the same A/B
 * inside: the forwards are then the same computation, so logits, loss and every gradient of the
 * range's adapters and of the head must be identical (B = 0 adds exact zeros); (2) finite
 * differences on the truncated model; (3) checkpointing on/off identical; (4) less workspace. */
static void test_layer_range(const char *arch, uint32_t type, uint32_t targets, int32_t lmin, int32_t lend,
                             float dropout, af_pooling pool) {
    tm_spec s = tm_default(arch, type);
    s.n_layer = 4;
    fixture full, part;
    char tag[96];
    snprintf(tag, sizeof tag, "%s/%s targets 0x%x layers [%d,%d)%s", arch, af_type_name(type), targets, lmin,
             lend ? lend : s.n_layer, dropout > 0 ? " dropout" : "");
    int ok = fx_init_ex(&full, &s, dropout, 3, targets, 0, 0);
    ok = fx_init_ex(&part, &s, dropout, 3, targets, lmin, lend) && ok;
    if (!ok) {
        fx_free(&full);
        fx_free(&part);
        return;
    }
    const int32_t le = lend ? lend : s.n_layer;
    CHECK(part.lay.n_total < full.lay.n_total, "%s fewer parameters (%lld vs %lld)", tag,
          (long long)part.lay.n_total, (long long)full.lay.n_total);
    /* full P: the range's values copied, B = 0 elsewhere; the head copied */
    for (int32_t l = 0; l < s.n_layer; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *sf = af_lora_slot_at(&full.lay, l, (af_proj)p), *sp = af_lora_slot_at(&part.lay, l, (af_proj)p);
            if (sf->a_off < 0) continue;
            const int in_range = selected(l, lmin, le);
            CHECK(in_range == (sp->a_off >= 0), "%s slot (%d, %d) adapted iff in the range", tag, l, p);
            if (!in_range) {
                memset(full.P + sf->b_off, 0, sizeof(float) * (size_t)(sf->out * 4));
                continue;
            }
            memcpy(full.P + sf->a_off, part.P + sp->a_off, sizeof(float) * (size_t)(sf->in * 4));
            memcpy(full.P + sf->b_off, part.P + sp->b_off, sizeof(float) * (size_t)(sf->out * 4));
        }
    memcpy(full.P + full.lay.head_w_off, part.P + part.lay.head_w_off,
           sizeof(float) * (size_t)(part.lay.n_total - part.lay.head_w_off));
    af_batch b = make_batch(s.vocab);
    af_step_opts o = {pool, NULL, 0, 1, 17};
    float lgf[9], lgp[9];
    double Lf = 0, Lp = 0;
    CHECK(af_engine_step(full.e, full.P, full.G, &b, &o, 1.0f, &Lf, lgf) == AF_OK, "%s full step", tag);
    CHECK(af_engine_step(part.e, part.P, part.G, &b, &o, 1.0f, &Lp, lgp) == AF_OK, "%s range step: %s", tag,
          af_last_error());
    CHECK(Lf == Lp && !memcmp(lgf, lgp, sizeof lgf), "%s loss %.9g vs full model %.9g (identical expected)", tag, Lp,
          Lf);
    double worst = 0, gmax = 0;
    for (int32_t l = lmin; l < le; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *sf = af_lora_slot_at(&full.lay, l, (af_proj)p), *sp = af_lora_slot_at(&part.lay, l, (af_proj)p);
            if (sp->a_off < 0) continue;
            int64_t na = sp->in * 4, nb = sp->out * 4;
            worst = fmax(worst, tl_max_abs_diff(full.G + sf->a_off, part.G + sp->a_off, (size_t)na, NULL));
            worst = fmax(worst, tl_max_abs_diff(full.G + sf->b_off, part.G + sp->b_off, (size_t)nb, NULL));
            for (int64_t i = 0; i < na; i++) gmax = fmax(gmax, fabs(part.G[sp->a_off + i]));
            for (int64_t i = 0; i < nb; i++) gmax = fmax(gmax, fabs(part.G[sp->b_off + i]));
        }
    worst = fmax(worst, tl_max_abs_diff(full.G + full.lay.head_w_off, part.G + part.lay.head_w_off,
                                        (size_t)(part.lay.n_total - part.lay.head_w_off), NULL));
    CHECK(worst == 0 && gmax > 0, "%s gradients equal the full model's (max |diff| %.3g, max |g| %.3g)", tag, worst,
          gmax);
    /* finite differences on the truncated model */
    grad_check(&part, &b, &o, tag);
    /* checkpointing: identical */
    float *G1 = calloc((size_t)part.lay.n_total, sizeof(float)), *G2 = calloc((size_t)part.lay.n_total, sizeof(float));
    double L1 = 0, L2 = 0;
    af_engine_step(part.e, part.P, G1, &b, &o, 1.0f, &L1, NULL);
    o.checkpointing = 1;
    af_engine_step(part.e, part.P, G2, &b, &o, 1.0f, &L2, NULL);
    CHECK(L1 == L2 && !memcmp(G1, G2, sizeof(float) * (size_t)part.lay.n_total), "%s checkpointing identical", tag);
    free(G1);
    free(G2);
    size_t bf = af_engine_bytes(full.m, &full.lay, 100, 0), bp = af_engine_bytes(part.m, &part.lay, 100, 0);
    CHECK(lmin == 0 || bp < bf, "%s workspace %zu < full %zu bytes", tag, bp, bf);
    fx_free(&full);
    fx_free(&part);
}

/* test_layer_range on a layer list with gaps (PEFT's layers_to_transform as any set): the layers
 * between the listed ones run forward and backward without adapters. */
static void test_layer_list(const char *arch, uint32_t type, uint32_t targets, const int32_t *list, int32_t n,
                            float dropout) {
    g_list = list, g_nlist = n;
    test_layer_range(arch, type, targets, list[0], list[n - 1] + 1 == 4 ? 0 : list[n - 1] + 1, dropout, AF_POOL_MEAN);
    g_list = NULL, g_nlist = 0;
}

/* One step (fresh gradients) into G [n_total] and logits lg [n_samples * 3]. */
static double step_into(fixture *f, af_engine *e, const af_batch *b, float *G, float *lg) {
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 3};
    double L = NAN;
    memset(G, 0, sizeof(float) * (size_t)f->lay.n_total);
    if (af_engine_step(e, f->P, G, b, &o, 1.0f, &L, lg) != AF_OK) return NAN;
    return L;
}

/* Frozen-prefix cache: steps with the cache cold, warm, partly warm (new samples, a duplicate) and
 * over budget give the same loss, logits and gradients as an engine without the cache. */
static void test_prefix_cache(const char *arch, uint32_t type) {
    tm_spec s = tm_default(arch, type);
    s.n_layer = 4;
    fixture f;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s prefix cache", arch, af_type_name(type));
    if (!fx_init_ex(&f, &s, 0.1f, 3, 127, 2, 0)) {
        fx_free(&f);
        return;
    }
    af_engine *ref = NULL;
    if (!CHECK(af_engine_new(NULL, f.m, &f.lay, &ref) == AF_OK, "engine")) {
        fx_free(&f);
        return;
    }
    CHECK(af_engine_first_layer(f.e) == 2, "%s first layer 2", tag);
    const int64_t nt = f.lay.n_total;
    float *G0 = malloc(sizeof(float) * (size_t)nt), *G1 = malloc(sizeof(float) * (size_t)nt);
    float lg0[12], lg1[12];
    af_batch b = make_batch(s.vocab);
    /* batch 2: sample 1 of b (cached after the first steps), a new sample, sample 1 again */
    int32_t tok2[40], ss2[4] = {0, 12, 20, 32}, lab2[3] = {1, 2, 0};
    memcpy(tok2, g_tok + 7, sizeof(int32_t) * 12);
    for (int i = 12; i < 20; i++) tok2[i] = (i * 7) % s.vocab;
    memcpy(tok2 + 20, g_tok + 7, sizeof(int32_t) * 12);
    af_batch b2 = {tok2, ss2, 3, 32, lab2, NULL, NULL};
    CHECK(af_engine_set_prefix_cache(f.e, 1 << 20) == AF_OK, "enable");
    const af_batch *batches[4] = {&b, &b, &b2, &b2};
    static const char *what[4] = {"cold", "warm", "partly warm with a duplicate", "warm again"};
    for (int k = 0; k < 4; k++) {
        double L0 = step_into(&f, ref, batches[k], G0, lg0), L1 = step_into(&f, f.e, batches[k], G1, lg1);
        CHECK(L0 == L1 && !memcmp(lg0, lg1, sizeof(float) * 9) && !memcmp(G0, G1, sizeof(float) * (size_t)nt),
              "%s %s: loss %.9g vs %.9g, max |dG| %.3g", tag, what[k], L1, L0,
              tl_max_abs_diff(G0, G1, (size_t)nt, NULL));
    }
    int64_t ent = 0, hits = 0, misses = 0;
    size_t bytes = 0;
    af_engine_prefix_cache_stats(f.e, &ent, &bytes, &hits, &misses);
    CHECK(ent == 4 && misses == 4 && hits == 8 && bytes >= 24 * 4 * (size_t)s.hidden,
          "%s stats: %lld entries, %zu bytes, %lld hits, %lld misses (expected 4, 8, 4)", tag, (long long)ent, bytes,
          (long long)hits, (long long)misses);
    /* forward-only uses it too */
    float lg2[12];
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 0, 0};
    af_engine_forward(ref, f.P, &b2, &o, lg0);
    af_engine_forward(f.e, f.P, &b2, &o, lg2);
    CHECK(!memcmp(lg0, lg2, sizeof(float) * 9), "%s forward", tag);
    /* over budget: nothing cached, still correct */
    af_engine_set_prefix_cache(f.e, 0);
    af_engine_set_prefix_cache(f.e, 100);
    double L0 = step_into(&f, ref, &b, G0, lg0), L1 = step_into(&f, f.e, &b, G1, lg1);
    af_engine_prefix_cache_stats(f.e, &ent, &bytes, &hits, &misses);
    CHECK(L0 == L1 && !memcmp(G0, G1, sizeof(float) * (size_t)nt) && ent == 0 && bytes == 0 && misses == 3,
          "%s over budget: %lld entries, %lld misses", tag, (long long)ent, (long long)misses);
    free(G0);
    free(G1);
    af_engine_free(ref);
    fx_free(&f);
}

/* Token blocking of the frozen-weight products (af_engine_set_block_rows): a 330-token batch in
 * blocks of 64 rows (several blocks per thread) gives bitwise the step of one call per product. */
static void test_block_rows(const char *arch, uint32_t type) {
    tm_spec s = tm_default(arch, type);
    fixture f;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s token blocks", arch, af_type_name(type));
    if (!fx_init(&f, &s, 0.1f, 3)) {
        fx_free(&f);
        return;
    }
    int32_t tok[330], ss[4] = {0, 100, 230, 330}, lab[3] = {0, 2, 1};
    uint64_t rng = 9;
    for (int i = 0; i < 330; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)s.vocab);
    af_batch b = {tok, ss, 3, 330, lab, NULL, NULL};
    const int64_t nt = f.lay.n_total;
    float *G0 = malloc(sizeof(float) * (size_t)nt), *G1 = malloc(sizeof(float) * (size_t)nt);
    float lg0[9], lg1[9];
    af_engine_set_block_rows(f.e, 0);
    double L0 = step_into(&f, f.e, &b, G0, lg0);
    af_engine_set_block_rows(f.e, 64);
    double L1 = step_into(&f, f.e, &b, G1, lg1);
    CHECK(isfinite(L0) && L0 == L1 && !memcmp(lg0, lg1, sizeof lg0) && !memcmp(G0, G1, sizeof(float) * (size_t)nt),
          "%s: loss %.9g vs %.9g, max |dG| %.3g", tag, L1, L0, tl_max_abs_diff(G0, G1, (size_t)nt, NULL));
    free(G0);
    free(G1);
    fx_free(&f);
}

/* The workspace grows by an eighth at least (engine.c engine_reserve): after a batch of 300 tokens
 * one of 330 fits a workspace of 337 tokens, and its step equals (bitwise) the step of an engine
 * whose workspace was made for exactly those 330 tokens; a batch of 337 then needs no new one. */
static void test_capacity(const char *arch, uint32_t type) {
    tm_spec s = tm_default(arch, type);
    fixture f;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s workspace growth", arch, af_type_name(type));
    if (!fx_init(&f, &s, 0.1f, 3)) {
        fx_free(&f);
        return;
    }
    int32_t tok[337], ss[4] = {0, 100, 230, 330}, lab[3] = {0, 2, 1};
    uint64_t rng = 11;
    for (int i = 0; i < 337; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)s.vocab);
    const int64_t nt = f.lay.n_total;
    float *G0 = malloc(sizeof(float) * (size_t)nt), *G1 = malloc(sizeof(float) * (size_t)nt);
    float lg0[9], lg1[9];
    af_engine *fresh = NULL;
    if (CHECK(af_engine_new(NULL, f.m, &f.lay, &fresh) == AF_OK, "engine")) {
        int32_t ss300[4] = {0, 100, 230, 300};
        af_batch b300 = {tok, ss300, 3, 300, lab, NULL, NULL}, b = {tok, ss, 3, 330, lab, NULL, NULL};
        step_into(&f, f.e, &b300, G0, lg0); /* workspace for 300 tokens */
        const int64_t cap0 = af_engine_capacity(f.e);
        double L1 = step_into(&f, f.e, &b, G1, lg1); /* grows to 300 + 300/8 = 337 */
        const int64_t cap1 = af_engine_capacity(f.e);
        double L0 = step_into(&f, fresh, &b, G0, lg0); /* made for 330 */
        CHECK(cap0 == 300 && cap1 == 337 && af_engine_capacity(fresh) == 330, "%s: capacities %lld, %lld, fresh %lld",
              tag, (long long)cap0, (long long)cap1, (long long)af_engine_capacity(fresh));
        CHECK(isfinite(L0) && L0 == L1 && !memcmp(lg0, lg1, sizeof lg0) &&
                  !memcmp(G0, G1, sizeof(float) * (size_t)nt),
              "%s: the step in the larger workspace is bitwise the fresh one's (loss %.9g vs %.9g)", tag, L1, L0);
        int32_t ss337[4] = {0, 100, 230, 337};
        af_batch b337 = {tok, ss337, 3, 337, lab, NULL, NULL};
        step_into(&f, f.e, &b337, G1, lg1);
        CHECK(af_engine_capacity(f.e) == 337, "%s: a batch of 337 tokens fits without a new workspace (%lld)", tag,
              (long long)af_engine_capacity(f.e));
        af_engine_free(fresh);
    }
    free(G0);
    free(G1);
    fx_free(&f);
}

static void test_errors(void) {
    tm_spec s = tm_default("llama", AF_TYPE_F32);
    fixture f;
    if (!fx_init(&f, &s, 0.0f, 3)) {
        fx_free(&f);
        return;
    }
    af_batch b = make_batch(s.vocab);
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    double L;
    int32_t tok[24], ss[4] = {0, 7, 7, 24}, lab[3] = {0, 3, 1};
    memcpy(tok, g_tok, sizeof tok);
    af_batch bad = b;
    bad.seq_start = ss;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "empty"),
          "empty sample: %s", af_last_error());
    bad = b;
    bad.labels = lab;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "label 3"),
          "label out of range: %s", af_last_error());
    bad = b;
    tok[10] = s.vocab;
    bad.tokens = tok;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "token 97"),
          "token out of range: %s", af_last_error());
    tok[10] = -1;
    CHECK(af_engine_forward(f.e, f.P, &bad, &o, NULL) == AF_ERR_INVALID_ARG, "forward NULL logits");
    float lg[9];
    CHECK(af_engine_forward(f.e, f.P, &bad, &o, lg) == AF_ERR_INVALID_ARG, "negative token");
    bad = b;
    bad.n_tok = 23;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG, "n_tok mismatch");
    bad = b;
    bad.labels = NULL;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG, "no labels");
    bad = b;
    bad.n_samples = 0;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG, "no samples");
    /* multi-label BCE runs */
    float mh[9] = {1, 0, 1, 0, 0, 0, 0, 1, 1};
    bad = b;
    bad.labels = NULL;
    bad.multi_hot = mh;
    CHECK(af_engine_step(f.e, f.P, f.G, &bad, &o, 1, &L, NULL) == AF_OK && isfinite(L) && L > 0, "BCE step");
    /* non-finite parameters: loss returned as is, no gradient added */
    float *G = calloc((size_t)f.lay.n_total, sizeof(float));
    f.P[f.lay.head_b_off] = NAN;
    CHECK(af_engine_step(f.e, f.P, G, &b, &o, 1, &L, NULL) == AF_OK && !isfinite(L), "NaN loss returned");
    int zero = 1;
    for (int64_t i = 0; i < f.lay.n_total; i++) zero &= G[i] == 0;
    CHECK(zero, "no gradient on a non-finite loss");
    free(G);
    /* layout without head */
    af_param_layout lay2;
    af_lora_config c = {2, 4, 0, 0, 3, 1, 0};
    af_engine *e2 = NULL;
    if (CHECK(af_param_layout_init(&lay2, f.m, &c, 0) == AF_OK, "layout without head")) {
        CHECK(af_engine_new(NULL, f.m, &lay2, &e2) == AF_OK, "engine");
        CHECK(af_engine_step(e2, f.P, f.G, &b, &o, 1, &L, NULL) == AF_ERR_INVALID_ARG, "no head rejected");
        af_engine_free(e2);
        af_param_layout_free(&lay2);
    }
    size_t b0 = af_engine_bytes(f.m, &f.lay, 100, 0), b1 = af_engine_bytes(f.m, &f.lay, 100, 1);
    CHECK(b1 < b0 && b0 > 100 * 4 * (size_t)s.hidden * (size_t)s.n_layer, "bytes: %zu (ckpt %zu)", b0, b1);
    fx_free(&f);
}

/* NF4 QLoRA (af_model_requantize, kernels/nf4.h) on an f32 tiny model:
 *  - FD check of the LoRA/head gradients through the NF4 weights (grad_check, its tolerances);
 *  - the NF4 model's loss and gradients equal those of an f32 model holding the dequantized NF4
 *    values (the kernels compute x·Wᵀ and dy·W on exactly those values): relative L2 difference
 *    <= 1e-5, loss within 1e-6 relative;
 *  - against the original f32 base: gradients within 0.5 relative L2 and loss within 10% (measured
 *    0.13 / 5.3% llama, 0.30 / 3.3% gemma3: these tiny models have uniform random weights, for which
 *    NF4's normal-quantile grid is coarse at the block edges (gap 0.28 absmax below 1.0), and only
 *    2 layers of 64); the same model requantized to Q8_0 must be at least 5x closer (measured 29x llama, 26x gemma3),
 *    so the deviation is the 4-bit rounding and not a kernel error;
 *  - the context route (af_ctx_params.quantize = "nf4" at af_model_load) gives the same bits as
 *    af_model_requantize; a model already in Q4_1 is refused naming the tensor. */
static double rel_l2(const float *a, const float *b, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / (r > 0 ? r : 1));
}

static void test_nf4(const char *arch) {
    tm_spec s = tm_default(arch, AF_TYPE_F32);
    af_batch b = make_batch(s.vocab);
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    fixture f32, nf4, deq, q8;
    int ok = fx_init(&f32, &s, 0.0f, 3);
    g_requant = AF_TYPE_Q8_0;
    ok = fx_init(&q8, &s, 0.0f, 3) && ok;
    g_requant = AF_TYPE_NF4;
    ok = fx_init(&nf4, &s, 0.0f, 3) && ok;
    g_requant_deq = 1;
    ok = fx_init(&deq, &s, 0.0f, 3) && ok;
    g_requant = AF_TYPE_F32;
    g_requant_deq = 0;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/NF4", arch);
    if (ok) {
        CHECK(nf4.m->layers[0].wq.type == AF_TYPE_NF4 && nf4.m->tok_embd.type == AF_TYPE_F32 &&
                  nf4.m->owned_quant_bytes > 0,
              "%s: projections NF4, embeddings untouched", tag);
        grad_check(&nf4, &b, &o, tag);
        const int64_t n = nf4.lay.n_total;
        float *g0 = calloc((size_t)n, sizeof(float)), *g1 = calloc((size_t)n, sizeof(float)),
              *g2 = calloc((size_t)n, sizeof(float)), *g3 = calloc((size_t)n, sizeof(float));
        double l0 = 0, l1 = 0, l2 = 0, l3 = 0;
        af_engine_step(q8.e, q8.P, g3, &b, &o, 1.0f, &l3, NULL);
        af_engine_step(f32.e, f32.P, g0, &b, &o, 1.0f, &l0, NULL);
        af_engine_step(nf4.e, nf4.P, g1, &b, &o, 1.0f, &l1, NULL);
        af_engine_step(deq.e, deq.P, g2, &b, &o, 1.0f, &l2, NULL);
        double r_deq = rel_l2(g1, g2, n), r_f32 = rel_l2(g1, g0, n);
        CHECK(r_deq <= 1e-5 && fabs(l1 - l2) <= 1e-6 * fabs(l2),
              "%s: NF4 kernels vs f32 on the dequantized weights: grad rel L2 %.3g, loss %.9g vs %.9g", tag, r_deq,
              l1, l2);
        double r_q8 = rel_l2(g3, g0, n);
        CHECK(r_f32 <= 0.5 && fabs(l1 - l0) <= 0.1 * fabs(l0),
              "%s: NF4 vs f32 base: grad rel L2 %.3g, loss %.6g vs %.6g", tag, r_f32, l1, l0);
        CHECK(r_q8 * 5 <= r_f32, "%s: Q8_0 vs f32 base rel L2 %.3g not 5x below NF4's %.3g", tag, r_q8, r_f32);
        printf("%s: gradients vs dequantized-f32 model rel L2 %.2e (loss %.9g vs %.9g); vs f32 base rel L2 %.3f "
               "(loss %.6f vs %.6f); Q8_0 vs f32 base rel L2 %.4f (loss %.6f)\n",
               tag, r_deq, l1, l2, r_f32, l1, l0, r_q8, l3);
        free(g3);
        long long fb = 0;
        for (int il = 0; il < f32.m->cfg.num_hidden_layers; il++) {
            const af_layer *L = &f32.m->layers[il];
            const af_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (int k = 0; k < 7; k++) fb += (long long)af_row_bytes(w[k]->type, w[k]->cols) * w[k]->rows;
        }
        printf("%s: projection bytes f32 %lld, q8_0 %zu, nf4 %zu (model-owned, 64-byte aligned per matrix)\n", tag, fb,
               q8.m->owned_quant_bytes, nf4.m->owned_quant_bytes);
        free(g0);
        free(g1);
        free(g2);
    }
    fx_free(&f32);
    fx_free(&nf4);
    fx_free(&deq);
    fx_free(&q8);
}

/* The context route and the refusal of an already-quantized model. */
static void test_nf4_ctx(void) {
    af_ctx_params cp;
    af_ctx_get_params(T_CTX, &cp);
    cp.quantize = "nf4";
    af_ctx *qctx = NULL;
    if (!CHECK(af_ctx_new(&cp, &qctx) == AF_OK, "ctx quantize nf4: %s", af_last_error())) return;
    af_ctx_params back;
    af_ctx_get_params(qctx, &back);
    CHECK(!strcmp(back.quantize, "nf4"), "af_ctx_get_params gives quantize %s", back.quantize);
    cp.quantize = "nf3";
    af_ctx *bad = NULL;
    CHECK(af_ctx_new(&cp, &bad) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "nf3"), "quantize nf3: %s",
          af_last_error());
    static int counter;
    char path[256];
    for (int q = 0; q < 2; q++) {
        tm_spec s = tm_default("llama", q ? AF_TYPE_Q4_1 : AF_TYPE_F32);
        snprintf(path, sizeof path, "/tmp/afinar_tiny_nf4_%ld_%d.gguf", (long)getpid(), counter++);
        if (!CHECK(tm_write(&s, path) == AF_OK, "write tiny model")) continue;
        af_model *m = NULL, *r = NULL;
        af_status st = af_model_load(qctx, path, &m);
        if (q == 1) {
            CHECK(st == AF_ERR_UNSUPPORTED && strstr(af_last_error(), "blk.0.attn_q.weight") &&
                      strstr(af_last_error(), "Q4_1"),
                  "Q4_1 model with quantize nf4 refused: %s", af_last_error());
        } else if (CHECK(st == AF_OK, "load with quantize nf4: %s", af_last_error()) &&
                   CHECK(af_model_load(T_CTX, path, &r) == AF_OK, "load f32") &&
                   CHECK(af_model_requantize(r, AF_TYPE_NF4, NULL, NULL) == AF_OK, "requantize")) {
            size_t bytes = af_row_bytes(AF_TYPE_NF4, m->layers[1].w_down.cols) * (size_t)m->layers[1].w_down.rows;
            CHECK(m->layers[1].w_down.type == AF_TYPE_NF4 &&
                      !memcmp(m->layers[1].w_down.data, r->layers[1].w_down.data, bytes),
                  "context route == af_model_requantize (bitwise)");
            CHECK(af_model_requantize(m, AF_TYPE_Q8_0, NULL, NULL) == AF_ERR_INVALID_ARG, "requantize twice refused");
        }
        af_model_free(m);
        af_model_free(r);
        unlink(path);
    }
    af_ctx_free(qctx);
}

int main(void) {
    static const uint32_t types[] = {AF_TYPE_F32, AF_TYPE_Q8_0, AF_TYPE_Q4_1, AF_TYPE_Q4_K, AF_TYPE_Q6_K,
                                     AF_TYPE_Q5_0, AF_TYPE_Q5_K, AF_TYPE_F16};
    const char *archs[2] = {"llama", "gemma3"};
    for (int a = 0; a < 2; a++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) test_model_type(archs[a], types[t]);
    test_model_type("qwen2", AF_TYPE_Q4_K); /* q/k/v biases */
    test_model_type("qwen3", AF_TYPE_Q8_0); /* q/k norms, NEOX RoPE without the sandwich norms */
    printf("worst relative FD error over all models: %.2e\n", worst_rel_global);
    test_dropout("llama");
    test_dropout("gemma3");
    test_packing("llama", AF_TYPE_Q4_1);
    test_packing("gemma3", AF_TYPE_Q4_K);
    /* layer ranges: every early exit of the truncated backward (lowest adapter on q/v, o, gate/up, down) */
    const uint32_t QV = (1u << AF_PROJ_Q) | (1u << AF_PROJ_V);
    test_layer_range("llama", AF_TYPE_Q4_1, 127, 1, 3, 0.25f, AF_POOL_MEAN);
    test_layer_range("llama", AF_TYPE_Q8_0, 1u << AF_PROJ_DOWN, 2, 0, 0.0f, AF_POOL_LAST);
    test_layer_range("llama", AF_TYPE_F16, (1u << AF_PROJ_GATE) | (1u << AF_PROJ_UP), 1, 0, 0.0f, AF_POOL_MEAN);
    test_layer_range("gemma3", AF_TYPE_Q4_K, 1u << AF_PROJ_O, 2, 0, 0.0f, AF_POOL_MEAN);
    test_layer_range("gemma3", AF_TYPE_F32, QV, 3, 0, 0.0f, AF_POOL_LAST);
    test_layer_range("gemma3", AF_TYPE_Q8_0, 127, 1, 2, 0.0f, AF_POOL_MEAN);
    test_layer_range("llama", AF_TYPE_F32, 1u << AF_PROJ_Q, 3, 0, 0.0f, AF_POOL_MEAN);
    static const int32_t gap02[] = {0, 2}, gap13[] = {1, 3};
    test_layer_list("llama", AF_TYPE_F32, 127, gap02, 2, 0.25f);
    test_layer_list("gemma3", AF_TYPE_Q8_0, QV, gap13, 2, 0.0f);
    test_prefix_cache("llama", AF_TYPE_Q4_1);
    test_prefix_cache("gemma3", AF_TYPE_Q4_K);
    test_block_rows("llama", AF_TYPE_Q4_1);
    test_capacity("llama", AF_TYPE_Q4_1);
    test_block_rows("gemma3", AF_TYPE_Q6_K);
    test_errors();
    test_nf4("llama");
    test_nf4("gemma3");
    test_nf4_ctx();
    /* the other kernel paths (scalar C, AVX2) on one model each */
    const char *paths[2] = {"scalar", "avx2"};
    for (int k = 0; k < 2; k++) {
        if (tl_ctx_set(paths[k], -1, NULL, -1) != AF_OK) {
            tl_skip("kernel path %s not available here", paths[k]);
            continue;
        }
        test_model_type(k ? "gemma3" : "llama", AF_TYPE_Q4_K);
        test_packing(k ? "llama" : "gemma3", AF_TYPE_Q4_1);
    }
    tl_ctx_set("auto", -1, NULL, -1);
    return tl_finish("engine");
}
