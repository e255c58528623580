/*
 * test_lm_train.c — causal-LM (SFT) training on tiny random models (tests/tinymodel.c):
 *  (a) af_engine_lm_step: the gradient of grad_scale·loss_sum w.r.t. LoRA parameters of every
 *      layer against central finite differences (llama and gemma3, with soft-cap on gemma3);
 *      the forward-only call gives the same loss; checkpointing gives bitwise the same loss and
 *      gradient; a batch without targets gives loss 0, no target and no gradient;
 *  (b) loss normalisation over an accumulated step (transformers PR #34191): one micro-batch of
 *      4 samples vs two micro-batches of 2 with unequal target counts, both with grad_scale =
 *      1 / targets of the whole step, give the same update (relative 1e-5), while a mean of the
 *      two micro-batch means would give a different one;
 *  (c) training memorises a small batch (loss falls below 20% of its start in 40 steps);
 *  (d) af_dataset_from_tokens_lm + the batcher: targets follow the mask, truncation;
 *  (e) errors: a classification trainer refuses accumulate_lm, a target outside [-1, vocab);
 *  (f) af_pack_bfd: every sample once, bins within the budget, the same bin count for every shuffle;
 *  (g) the training run (af_trainer, task causal-lm, what `afinar train --task causal-lm` runs) on
 *      learnable sequences, packed and unpacked: the loss falls, eval lines carry TRL's names, best
 *      is chosen on eval loss, adapters are PEFT CAUSAL_LM; exact resume (stop after 5 steps,
 *      resume: final adapter byte-identical to the uninterrupted run); classification options
 *      and data are refused for a causal-LM run.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "lora/lora.h"
#include "train/data.h"
#include "train/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 4 samples of lengths 6, 9, 4, 7; targets: next token, none on the first 2 positions of samples 0
 * and 1 ("prompt"), only the first position of sample 2, none at a sample's last token.
 * Micro-batch halves: samples {0,1} (3 + 6 = 9 targets) and {2,3} (1 + 6 = 7 targets). */
#define NTOK 26
static int32_t g_tok[NTOK], g_tg[NTOK];
static const int32_t g_ss[5] = {0, 6, 15, 19, 26};

static void make_batch(int vocab) {
    uint64_t rng = 21;
    for (int i = 0; i < NTOK; i++) g_tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)vocab);
    for (int s = 0; s < 4; s++)
        for (int t = g_ss[s]; t < g_ss[s + 1]; t++) {
            const int j = t - g_ss[s];
            int on = t + 1 < g_ss[s + 1];
            if (s < 2 && j < 2) on = 0;
            if (s == 2 && j > 0) on = 0;
            g_tg[t] = on ? g_tok[t + 1] : -1;
        }
}

static int64_t count_targets(int32_t a, int32_t b) {
    int64_t n = 0;
    for (int32_t t = g_ss[a]; t < g_ss[b]; t++) n += g_tg[t] >= 0;
    return n;
}

/* (a) */
static void test_engine_fd(const char *arch, float cap) {
    tm_spec spec = tm_default(arch, AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny %s: %s", arch, af_last_error())) return;
    m->desc.final_logit_softcap = cap;
    make_batch(m->cfg.vocab_size);
    uint32_t targets = 0;
    af_lora_parse_targets("all-linear", &targets);
    af_lora_config c = {4, 8.0f, 0.0f, 0, targets, 3, 0};
    af_param_layout lay;
    if (!CHECK(af_param_layout_init(&lay, m, &c, 0) == AF_OK, "layout: %s", af_last_error())) {
        af_model_free(m);
        return;
    }
    const int64_t np = lay.n_total;
    float *P = malloc(sizeof(float) * (size_t)np), *G = calloc((size_t)np, sizeof(float));
    float *G2 = calloc((size_t)np, sizeof(float));
    uint64_t rng = 5;
    for (int64_t i = 0; i < np; i++) P[i] = tl_rand_uniform(&rng, -0.3f, 0.3f); /* B != 0: A gets gradient */
    af_engine *e = NULL;
    CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine: %s", af_last_error());
    const af_batch b = {g_tok, g_ss, 4, NTOK, NULL, NULL, g_tg};
    af_step_opts so = {AF_POOL_MEAN, NULL, 0, 0, 0};
    const float gs = 0.25f;
    af_lm_loss r, r2;
    CHECK(af_engine_lm_step(e, P, G, &b, &so, gs, &r) == AF_OK, "lm step: %s", af_last_error());
    CHECK(r.n_targets == count_targets(0, 4), "%s: %lld targets", arch, (long long)r.n_targets);
    CHECK(af_engine_lm_step(e, P, NULL, &b, &so, gs, &r2) == AF_OK && r2.loss_sum == r.loss_sum &&
              r2.n_correct == r.n_correct,
          "%s: forward-only loss %.9g == step loss %.9g", arch, r2.loss_sum, r.loss_sum);
    so.checkpointing = 1;
    CHECK(af_engine_lm_step(e, P, G2, &b, &so, gs, &r2) == AF_OK && r2.loss_sum == r.loss_sum &&
              !memcmp(G, G2, sizeof(float) * (size_t)np),
          "%s: checkpointing gives bitwise the same loss and gradient", arch);
    so.checkpointing = 0;
    /* finite differences on parameters spread over the vector (every layer, A and B) */
    double worst = 0;
    int nchk = 0;
    for (int64_t k = 0; k < 40; k++) {
        const int64_t i = (k * 7919 + 13) % np;
        if (fabsf(G[i]) < 1e-4f) continue;
        const float p0 = P[i], h = 2e-2f;
        P[i] = p0 + h;
        af_engine_lm_step(e, P, NULL, &b, &so, gs, &r2);
        const double lp = r2.loss_sum;
        P[i] = p0 - h;
        af_engine_lm_step(e, P, NULL, &b, &so, gs, &r2);
        P[i] = p0;
        const double fd = gs * (lp - r2.loss_sum) / (2.0 * h);
        const double err = fabs(fd - G[i]) / (fabs(fd) + 1e-3);
        if (err > worst) worst = err;
        nchk++;
    }
    printf("%s cap=%g: LM step gradient vs finite differences: worst relative error %.3g over %d parameters\n", arch,
           (double)cap, worst, nchk);
    CHECK(nchk >= 20 && worst < 3e-2, "%s cap=%g: LM step gradient vs finite differences over %d parameters: worst "
                                      "relative error %.3g",
          arch, (double)cap, nchk, worst);
    /* no targets at all */
    int32_t none[NTOK];
    for (int i = 0; i < NTOK; i++) none[i] = -1;
    const af_batch b0 = {g_tok, g_ss, 4, NTOK, NULL, NULL, none};
    memset(G2, 0, sizeof(float) * (size_t)np);
    CHECK(af_engine_lm_step(e, P, G2, &b0, &so, gs, &r2) == AF_OK && r2.n_targets == 0 && r2.loss_sum == 0,
          "%s: a batch without targets", arch);
    int allz = 1;
    for (int64_t i = 0; i < np; i++) allz &= G2[i] == 0;
    CHECK(allz, "%s: no target, no gradient", arch);
    /* bad target */
    int32_t bad[NTOK];
    memcpy(bad, g_tg, sizeof bad);
    bad[3] = m->cfg.vocab_size;
    const af_batch bb = {g_tok, g_ss, 4, NTOK, NULL, NULL, bad};
    CHECK(af_engine_lm_step(e, P, G2, &bb, &so, gs, &r2) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "position 3"),
          "%s: target out of range named: %s", arch, af_last_error());
    af_engine_free(e);
    free(P);
    free(G);
    free(G2);
    af_param_layout_free(&lay);
    af_model_free(m);
}

static af_lora_trainer *lm_trainer(const af_model *m, float lr) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.lora_alpha = 8.0f;
    o.lora_dropout = 0.0f;
    o.targets = "all-linear";
    o.seed = 9;
    o.num_classes = 0;
    o.lr = lr;
    o.max_grad_norm = 0.0f;
    af_lora_trainer *tr = NULL;
    CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "LM trainer: %s", af_last_error());
    return tr;
}

/* (b) */
static void test_normalisation(const af_model *m) {
    make_batch(m->cfg.vocab_size);
    const int64_t n01 = count_targets(0, 2), n23 = count_targets(2, 4), N = n01 + n23;
    CHECK(n01 != n23, "micro-batches with unequal target counts (%lld, %lld)", (long long)n01, (long long)n23);
    af_lora_trainer *t1 = lm_trainer(m, 1e-2f), *t2 = lm_trainer(m, 1e-2f), *t3 = lm_trainer(m, 1e-2f);
    if (!t1 || !t2 || !t3) goto out;
    /* step 0 moves B off zero so every parameter gets a gradient in step 1 */
    for (int k = 0; k < 2; k++) {
        double L1, L2a, L2b;
        int64_t c1, c2a, c2b;
        CHECK(af_lora_trainer_accumulate_lm(t1, g_tok, g_ss, 4, g_tg, 1.0f / (float)N, &L1, &c1, NULL) == AF_OK,
              "accumulate 1x4: %s", af_last_error());
        const int32_t ss_hi[3] = {0, g_ss[3] - g_ss[2], g_ss[4] - g_ss[2]};
        CHECK(af_lora_trainer_accumulate_lm(t2, g_tok, g_ss, 2, g_tg, 1.0f / (float)N, &L2a, &c2a, NULL) == AF_OK &&
                  af_lora_trainer_accumulate_lm(t2, g_tok + g_ss[2], ss_hi, 2, g_tg + g_ss[2], 1.0f / (float)N, &L2b,
                                                &c2b, NULL) == AF_OK,
              "accumulate 2x2: %s", af_last_error());
        CHECK(c1 == N && c2a == n01 && c2b == n23 && fabs(L1 - (L2a + L2b)) <= 1e-6 * fabs(L1),
              "token loss sums agree: %.9g vs %.9g + %.9g", L1, L2a, L2b);
        /* the mean of micro-batch means (the pre-#34191 normalisation) */
        af_lora_trainer_accumulate_lm(t3, g_tok, g_ss, 2, g_tg, 0.5f / (float)n01, NULL, NULL, NULL);
        af_lora_trainer_accumulate_lm(t3, g_tok + g_ss[2], ss_hi, 2, g_tg + g_ss[2], 0.5f / (float)n23, NULL, NULL,
                                      NULL);
        double g1, g2, g3;
        CHECK(af_lora_trainer_step(t1, -1, &g1) == AF_OK && af_lora_trainer_step(t2, -1, &g2) == AF_OK &&
                  af_lora_trainer_step(t3, -1, &g3) == AF_OK,
              "steps: %s", af_last_error());
        CHECK(fabs(g1 - g2) <= 1e-5 * g1, "step %d: gradient norm 1x4 %.9g vs 2x2 %.9g", k, g1, g2);
        if (k == 1) CHECK(fabs(g1 - g3) > 1e-3 * g1, "mean of micro-batch means differs: %.9g vs %.9g", g3, g1);
    }
    const int64_t np = af_lora_trainer_n_params(t1);
    float *p1 = malloc(sizeof(float) * (size_t)np), *p2 = malloc(sizeof(float) * (size_t)np);
    af_lora_trainer_get_params(t1, p1);
    af_lora_trainer_get_params(t2, p2);
    double worst = 0;
    for (int64_t i = 0; i < np; i++) {
        const double d = fabs((double)p1[i] - p2[i]) / (fabs(p1[i]) + 1e-3);
        if (d > worst) worst = d;
    }
    printf("loss normalisation: 1x(2B) vs 2x(B) parameters after 2 steps: worst relative difference %.3g\n", worst);
    CHECK(worst < 1e-4, "1x(2B) vs 2x(B) parameters after 2 steps: worst relative difference %.3g", worst);
    free(p1);
    free(p2);
out:
    af_lora_trainer_free(t1);
    af_lora_trainer_free(t2);
    af_lora_trainer_free(t3);
}

/* (c) */
static void test_memorise(const af_model *m) {
    make_batch(m->cfg.vocab_size);
    for (int t = 0; t < NTOK; t++) { /* train on every next token */
        int last = 0;
        for (int s = 0; s < 4; s++) last |= t + 1 == g_ss[s + 1];
        g_tg[t] = last ? -1 : g_tok[t + 1];
    }
    af_lora_trainer *tr = lm_trainer(m, 2e-2f);
    if (!tr) return;
    double first = 0, last = 0;
    int64_t nt = 0;
    for (int k = 0; k < 40; k++) {
        double L;
        af_lora_trainer_accumulate_lm(tr, g_tok, g_ss, 4, g_tg, 1.0f / 22.0f, &L, &nt, NULL);
        if (k == 0) first = L / (double)nt;
        last = L / (double)nt;
        af_lora_trainer_step(tr, -1, NULL);
    }
    double Lf;
    int64_t nc = 0;
    CHECK(af_lora_trainer_forward_lm(tr, g_tok, g_ss, 4, g_tg, &Lf, &nt, &nc) == AF_OK, "forward_lm: %s",
          af_last_error());
    printf("memorisation: mean token loss %.4f -> %.4f, accuracy %lld/%lld\n", first, Lf / (double)nt, (long long)nc,
           (long long)nt);
    CHECK(nt == 22 && Lf / (double)nt < 0.2 * first,
          "memorisation: mean token loss %.4f -> %.4f (last step %.4f), accuracy %lld/%lld", first, Lf / (double)nt,
          last, (long long)nc, (long long)nt);
    af_lora_trainer_free(tr);
}

/* (d) */
static void test_dataset(void) {
    const int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int64_t off[3] = {0, 4, 9};
    const uint8_t mask[9] = {0, 0, 1, 1, 0, 1, 1, 1, 1};
    af_dataset *ds = NULL;
    CHECK(af_dataset_from_tokens_lm(ids, off, 2, mask, 4, &ds) == AF_OK, "from_tokens_lm: %s", af_last_error());
    if (!ds) return;
    CHECK(ds->n == 2 && ds->num_classes == 0 && !ds->labels && ds->target_mask && af_dataset_len(ds, 1) == 4,
          "LM data set: 2 samples, no labels, truncated to 4");
    af_batcher *bt = NULL;
    af_packed_batch pb;
    CHECK(af_batcher_new(ds, NULL, 2, 2, &bt) == AF_OK && af_batcher_next(bt, &pb) == 1, "batcher");
    const int32_t want[8] = {-1, 3, 4, -1, 6, 7, 8, -1};
    CHECK(pb.targets && pb.n_tok == 8 && !memcmp(pb.targets, want, sizeof want), "targets from the mask");
    af_batcher_free(bt);
    af_dataset_free(ds);
    const uint8_t bad[9] = {1, 0, 1, 1, 0, 1, 1, 1, 1};
    CHECK(af_dataset_from_tokens_lm(ids, off, 2, bad, 4, &ds) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "sample 0"),
          "a target on a sample's first token is refused: %s", af_last_error());
}

/* (e) */
static void test_errors(const af_model *m) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.num_classes = 2;
    af_lora_trainer *tr = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "classifier trainer")) return;
    make_batch(m->cfg.vocab_size);
    CHECK(af_lora_trainer_accumulate_lm(tr, g_tok, g_ss, 4, g_tg, 1.0f, NULL, NULL, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "classification head"),
          "accumulate_lm on a classifier: %s", af_last_error());
    af_lora_trainer_free(tr);
}

/* n samples of arithmetic sequences t_{k+1} = (t_k + d) mod V with d in {1, 2, 3} by sample, lengths
 * 6..21; loss on every token after the third (a "prompt" of 3 tokens). */
static af_dataset *seq_data(int n, int V, uint64_t seed, int32_t max_seq_len) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * 24);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint8_t *mask = malloc((size_t)n * 24);
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        const int len = 6 + (int)(tl_rand_u64(&seed) % 16), d = 1 + i % 3;
        int32_t t0 = (int32_t)(tl_rand_u64(&seed) % (uint64_t)V);
        for (int j = 0; j < len; j++) {
            ids[off[i] + j] = (t0 + d * j) % V;
            mask[off[i] + j] = j >= 3;
        }
        off[i + 1] = off[i] + len;
    }
    af_dataset *ds = NULL;
    CHECK(af_dataset_from_tokens_lm(ids, off, n, mask, max_seq_len, &ds) == AF_OK, "seq data: %s", af_last_error());
    free(ids);
    free(off);
    free(mask);
    return ds;
}

/* (f) */
static void test_pack(void) {
    af_dataset *ds = seq_data(40, 97, 3, 16);
    if (!ds) return;
    int32_t idx[40], off[41], order[40], nb0 = -1;
    int ok = 1;
    for (uint64_t e = 0; e < 4; e++) {
        af_shuffle_perm(order, 40, 7, e);
        int32_t nb = 0;
        if (!CHECK(af_pack_bfd(ds, order, 40, 40, e, idx, off, &nb) == AF_OK, "pack: %s", af_last_error())) break;
        if (nb0 < 0) nb0 = nb;
        ok &= nb == nb0 && off[0] == 0 && off[nb] == 40;
        int seen[40] = {0};
        for (int32_t q = 0; q < nb; q++) {
            int64_t tok = 0;
            for (int32_t k = off[q]; k < off[q + 1]; k++) tok += af_dataset_len(ds, idx[k]), seen[idx[k]]++;
            ok &= tok <= 40 && off[q + 1] > off[q];
        }
        for (int i = 0; i < 40; i++) ok &= seen[i] == 1;
    }
    int64_t total = 0;
    for (int i = 0; i < 40; i++) total += af_dataset_len(ds, i);
    CHECK(ok && nb0 >= (total + 39) / 40 && nb0 <= (total + 39) / 40 + 2,
          "best-fit decreasing: %d bins for %lld tokens in bins of 40 (every sample once, same count every epoch)",
          (int)nb0, (long long)total);
    af_dataset_free(ds);
}

static char g_dir[256];

static const char *path_in(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = tl_read_file(a, &la), *y = tl_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void lm_opts(af_trainer_opts *o, const af_model *m, const af_dataset *tr, const af_dataset *va, const char *out) {
    af_trainer_opts_defaults(o);
    o->task = AF_TASK_CAUSAL_LM;
    o->model = m;
    o->train_data = tr;
    o->val_data = va;
    o->output_dir = out;
    o->targets = "all-linear";
    o->lora_layers = "all";
    o->lora_r = 4;
    o->lora_alpha = 8;
    o->lora_dropout = 0.05;
    o->lr = 1e-2;
    o->batch = 2;
    o->grad_accum = 2;
    o->max_seq_len = 24;
    o->max_steps = 12;
    o->warmup_steps = 1;
    o->eval_every = 4;
    o->threads = 1;
    o->plot = 0;
    o->log = getenv("TL_VERBOSE") ? stderr : NULL;
    o->progress_tty = 0;
}

static af_status run_lm(const af_trainer_opts *o, af_train_result *res) {
    af_trainer *t = NULL;
    af_status st = af_trainer_new(o, &t);
    if (st == AF_OK) { /* the pre-training report of a causal-LM run (data statistics without classes, plan) */
        FILE *f = o->log ? o->log : tmpfile();
        if (f) af_trainer_report(t, f);
        if (f && !o->log) {
            rewind(f);
            char line[512];
            int has_plan = 0;
            while (fgets(line, sizeof line, f)) has_plan |= strstr(line, "plan: causal LM") != NULL;
            CHECK(has_plan, "the report states the causal-LM plan");
            fclose(f);
        }
        st = af_trainer_run(t, res);
    }
    af_trainer_free(t);
    return st;
}

/* mean of "key" over the first / last k train lines of metrics.jsonl */
static void loss_ends(const char *path, int k, double *first, double *last, int *n_eval_named) {
    char *b = tl_read_file(path, NULL);
    double v[256];
    int n = 0;
    *n_eval_named = 0;
    for (char *l = b ? strtok(b, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        if (strstr(l, "\"type\":\"train\"") && n < 256) {
            const char *p = strstr(l, "\"loss\":");
            v[n++] = p ? strtod(p + 7, NULL) : NAN;
        }
        if (strstr(l, "\"type\":\"eval\"") && strstr(l, "\"eval_loss\":") && strstr(l, "\"eval_mean_token_accuracy\":") &&
            strstr(l, "\"perplexity\":"))
            (*n_eval_named)++;
    }
    *first = *last = 0;
    for (int i = 0; i < k && i < n; i++) *first += v[i] / k, *last += v[n - 1 - i] / k;
    free(b);
}

/* (g) */
static void test_trainer_lm(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_lm_%ld", (long)getpid());
    if (!CHECK(mkdir(g_dir, 0777) == 0, "mkdir %s", g_dir)) return;
    tm_spec spec = tm_default("llama", AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny llama: %s", af_last_error())) return;
    af_dataset *tr = seq_data(32, m->cfg.vocab_size, 11, 24), *va = seq_data(8, m->cfg.vocab_size, 12, 24);
    af_trainer_opts o;
    af_train_result r;
    for (int packing = 1; packing >= 0; packing--) {
        const char *out = path_in(packing ? "packed" : "unpacked");
        lm_opts(&o, m, tr, va, out);
        o.packing = packing;
        o.max_steps = 40;
        o.eval_every = 10;
        af_status st = run_lm(&o, &r);
        CHECK(st == AF_OK && r.stop == AF_STOP_DONE && r.steps_done == 40, "packing=%d run: %s", packing, af_last_error());
        double first, last;
        int ne;
        loss_ends(path_in(packing ? "packed/metrics.jsonl" : "unpacked/metrics.jsonl"), 4, &first, &last, &ne);
        printf("causal-LM run (packing %d): train loss %.3f -> %.3f, best eval loss %.3f at step %lld\n", packing, first,
               last, r.best_eval_loss, (long long)r.best_step);
        CHECK(last < 0.5 * first && ne == 4 && isfinite(r.best_eval_loss) && r.best_step > 0 && isnan(r.best_macro_f1),
              "packing=%d: loss falls (%.3f -> %.3f), 4 eval lines with TRL's names (%d), best on eval loss", packing,
              first, last, ne);
        char cfg[600];
        snprintf(cfg, sizeof cfg, "%s/final/adapter_config.json", out);
        char *c = tl_read_file(cfg, NULL);
        CHECK(c && strstr(c, "\"CAUSAL_LM\""), "packing=%d: adapter_config.json task_type CAUSAL_LM", packing);
        free(c);
    }
    /* exact resume */
    lm_opts(&o, m, tr, va, path_in("res_a"));
    CHECK(run_lm(&o, &r) == AF_OK, "res_a: %s", af_last_error());
    lm_opts(&o, m, tr, va, path_in("res_b"));
    o.stop_after = 5;
    CHECK(run_lm(&o, &r) == AF_OK && r.stop == AF_STOP_INTERRUPTED && r.steps_done == 5, "res_b stopped: %s",
          af_last_error());
    lm_opts(&o, m, tr, va, NULL);
    o.resume = path_in("res_b");
    CHECK(run_lm(&o, &r) == AF_OK && r.steps_done == 12, "res_b resumed: %s", af_last_error());
    CHECK(files_equal(path_in("res_a/final/adapter_model.safetensors"), path_in("res_b/final/adapter_model.safetensors")),
          "causal LM: final adapter after resume is byte-identical to the uninterrupted run");
    CHECK(files_equal(path_in("res_a/best/adapter_model.safetensors"), path_in("res_b/best/adapter_model.safetensors")),
          "causal LM: best adapter after resume is byte-identical");
    /* the same run on the guard device (device memory PROT_NONE between the backend table's
     * ops: any host access outside the table kills this program) ends with the CPU run's bits; the
     * evaluation (forward-only LM loss) included */
    if (CHECK(tl_ctx_set_device("guard") == AF_OK, "guard context: %s", af_last_error())) {
        af_model *g = NULL;
        if (CHECK(tm_load(&spec, &g) == AF_OK, "tiny llama on guard: %s", af_last_error())) {
            lm_opts(&o, g, tr, va, path_in("res_g"));
            o.checkpointing = 1;
            CHECK(run_lm(&o, &r) == AF_OK, "res_g: %s", af_last_error());
            CHECK(files_equal(path_in("res_a/final/adapter_model.safetensors"), path_in("res_g/final/adapter_model.safetensors")) &&
                      files_equal(path_in("res_a/best/adapter_model.safetensors"), path_in("res_g/best/adapter_model.safetensors")),
                  "causal LM on the guard device (checkpointing): adapters differ from the CPU run's");
        }
        af_model_free(g);
        tl_ctx_set_device("cpu");
    }
    /* refusals */
    lm_opts(&o, m, tr, va, path_in("bad"));
    o.class_weights = "inverse-freq";
    CHECK(run_lm(&o, &r) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "class-weights"), "class weights refused: %s",
          af_last_error());
    const int32_t ids[4] = {1, 2, 3, 4};
    const int64_t off[3] = {0, 2, 4};
    const int32_t lab[2] = {0, 1};
    af_dataset *cls = NULL;
    af_dataset_from_tokens(ids, off, 2, lab, NULL, 2, 8, &cls);
    lm_opts(&o, m, cls, NULL, path_in("bad"));
    CHECK(run_lm(&o, &r) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "no loss mask"),
          "classification data refused: %s", af_last_error());
    af_trainer_opts_defaults(&o);
    o.model = m;
    o.train_data = tr;
    o.output_dir = path_in("bad");
    CHECK(run_lm(&o, &r) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "--task causal-lm"),
          "a causal-LM set in a classification run refused: %s", af_last_error());
    af_dataset_free(cls);
    af_dataset_free(tr);
    af_dataset_free(va);
    af_model_free(m);
    if (!tl_failed && !getenv("TL_KEEP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) printf("could not remove %s\n", g_dir);
    } else
        printf("test files kept in %s\n", g_dir);
}

int main(void) {
    test_engine_fd("llama", 0.0f);
    test_engine_fd("gemma3", 5.0f);
    tm_spec spec = tm_default("llama", AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (CHECK(tm_load(&spec, &m) == AF_OK, "tiny llama: %s", af_last_error())) {
        test_normalisation(m);
        test_memorise(m);
        test_errors(m);
        af_model_free(m);
    }
    test_dataset();
    test_pack();
    test_trainer_lm();
    return tl_finish("test_lm_train");
}
