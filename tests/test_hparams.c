/*
 * test_hparams.c — train/hparams.h: each diagnostic fires exactly when it should, including the
 * boundary cases (3x learning rate, half/double effective batch, alpha/r = 0.5 and 8, 2 x p99,
 * p95, 5:1 imbalance, 2 epochs), the numbers in the messages, and the one-line printer.
 */
#include "testlib.h"
#include "train/hparams.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Stats of a synthetic set: sample i has len[i] tokens and label lab[i]. */
static int make_stats(const int32_t *len, const int32_t *lab, int32_t n, int32_t C, int32_t max_seq_len,
                      af_data_stats *s) {
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    off[0] = 0;
    for (int32_t i = 0; i < n; i++) off[i + 1] = off[i] + len[i];
    int32_t *ids = calloc((size_t)off[n], sizeof *ids);
    af_dataset *ds = NULL;
    af_status st = af_dataset_from_tokens(ids, off, n, lab, NULL, C, max_seq_len, &ds);
    free(off), free(ids);
    if (st != AF_OK) return 0;
    st = af_data_stats_compute(ds, s);
    af_dataset_free(ds);
    return st == AF_OK;
}

/* 100 samples, lengths 1..100 (p95 95, p99 99, max 100), labels by class counts. */
static int stats_counts(const int32_t *counts, int32_t C, af_data_stats *s) {
    int32_t len[100], lab[100], k = 0;
    for (int32_t i = 0; i < 100; i++) len[i] = i + 1;
    for (int32_t c = 0; c < C; c++)
        for (int32_t j = 0; j < counts[c]; j++) lab[k++] = c;
    while (k < 100) lab[k++] = 0;
    return make_stats(len, lab, 100, C, 512, s);
}

static af_train_config base(void) {
    af_train_config c = {0};
    c.lr = 2e-4;
    c.lora_r = 8;
    c.lora_alpha = 16;
    c.batch_size = 16;
    c.grad_accum = 1;
    c.max_grad_norm = 1.0;
    c.epochs = 3;
    c.max_seq_len = 128;
    c.n_model_params = 134515008;
    c.num_classes = 3;
    return c;
}

static af_data_stats g_bal; /* counts 40/30/30 */

/* Runs the check; returns the index of `code` (-1 if absent); *nd = number of diagnostics. */
static int32_t run(const af_train_config *c, const af_data_stats *s, const char *code, af_diag *d, int32_t *nd) {
    af_diag_list l = {0};
    af_status st = af_hparams_check(c, s, &l);
    CHECK(st == AF_OK, "check: %s", af_last_error());
    int32_t k = af_diag_find(&l, code);
    if (k >= 0 && d) *d = l.items[k];
    if (nd) *nd = l.n;
    af_diag_list_free(&l);
    return k;
}

#define FIRES(cfg, stats, code, sev, ...)                                                         \
    do {                                                                                          \
        af_diag d_;                                                                               \
        int32_t k_ = run(&(cfg), (stats), (code), &d_, NULL);                                     \
        CHECK(k_ >= 0 && d_.severity == (sev), "%s should fire (%s): %s", code, #sev, __VA_ARGS__); \
    } while (0)
#define SILENT(cfg, stats, code, ...)                                                             \
    do {                                                                                          \
        af_diag d_;                                                                               \
        int32_t k_ = run(&(cfg), (stats), (code), &d_, NULL);                                     \
        CHECK(k_ < 0, "%s should not fire: %s (got: %s)", code, __VA_ARGS__, k_ >= 0 ? d_.message : ""); \
    } while (0)

static void test_clean_and_errors(void) {
    af_train_config c = base();
    int32_t nd = -1;
    run(&c, &g_bal, "none", NULL, &nd);
    CHECK(nd == 0, "recommended config gives no diagnostic (got %d)", nd);
    const char *codes[] = {"lr-invalid",      "lr-invalid",     "batch-invalid",  "accum-invalid",  "rank-invalid",
                           "alpha-invalid",   "seq-len-invalid", "length-invalid", "classes-invalid"};
    for (int i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++) {
        c = base();
        switch (i) {
        case 0: c.lr = 0; break;
        case 1: c.lr = NAN; break;
        case 2: c.batch_size = 0; break;
        case 3: c.grad_accum = 0; break;
        case 4: c.lora_r = 0; break;
        case 5: c.lora_alpha = -1; break;
        case 6: c.max_seq_len = 0; break;
        case 7: c.epochs = 0, c.max_steps = 0; break;
        case 8: c.num_classes = 1; break;
        }
        af_diag_list l = {0};
        af_hparams_check(&c, &g_bal, &l);
        int32_t k = af_diag_find(&l, codes[i]);
        CHECK(k >= 0 && l.items[k].severity == AF_DIAG_ERROR && af_diag_has_error(&l), "case %d: %s error", i,
              codes[i]);
        af_diag_list_free(&l);
    }
    c = base();
    c.epochs = 0;
    c.max_steps = 100; /* max_steps alone is a valid length */
    SILENT(c, &g_bal, "length-invalid", "max_steps 100");
    c = base();
    af_diag_list l = {0};
    af_hparams_check(&c, NULL, &l);
    CHECK(af_diag_find(&l, "data-empty") >= 0 && af_diag_has_error(&l), "no data -> data-empty error");
    af_diag_list_free(&l);
    c.num_classes = 2; /* the data have 3 classes */
    FIRES(c, &g_bal, "labels-range", AF_DIAG_ERROR, "3 classes in data, 2 configured");
    c = base();
    c.lr = 1e-3;
    af_hparams_check(&c, &g_bal, &l);
    CHECK(!af_diag_has_error(&l), "a warning is not an error");
    af_diag_list_free(&l);
}

static void test_lr_batch_alpha_clip(void) {
    af_train_config c = base();
    af_diag d;
    c.lr = 5.9e-4;
    SILENT(c, &g_bal, "lr-model-size", "2.95x");
    c.lr = 6.1e-4;
    FIRES(c, &g_bal, "lr-model-size", AF_DIAG_WARN, "3.05x");
    c.lr = 6.7e-5;
    SILENT(c, &g_bal, "lr-model-size", "1/2.99");
    c.lr = 6.6e-5;
    FIRES(c, &g_bal, "lr-model-size", AF_DIAG_WARN, "1/3.03");
    c.lr = 1e-3;
    run(&c, &g_bal, "lr-model-size", &d, NULL);
    CHECK(strstr(d.message, "lr 1e-3 is 5.0x above the 2e-4 recommended for a 135M-parameter model (QLoRA, Dettmers") &&
              !strcmp(d.recommendation, "use --lr 2e-4"),
          "lr message: '%s' -> '%s'", d.message, d.recommendation);
    c.n_model_params = 20000000000ll; /* > 13B: 1e-4 */
    c.lr = 2e-4;
    SILENT(c, &g_bal, "lr-model-size", "2x of 1e-4");
    c.lr = 3.5e-4;
    run(&c, &g_bal, "lr-model-size", &d, NULL);
    CHECK(strstr(d.message, "3.5x above the 1e-4") && strstr(d.message, "20.0B-parameter"), "big model: %s", d.message);

    c = base(); /* effective batch: 16 recommended, warn below 8 or above 32 */
    c.batch_size = 8;
    SILENT(c, &g_bal, "effective-batch", "8");
    c.batch_size = 7;
    FIRES(c, &g_bal, "effective-batch", AF_DIAG_WARN, "7");
    c.batch_size = 32;
    SILENT(c, &g_bal, "effective-batch", "32");
    c.batch_size = 11, c.grad_accum = 3;
    FIRES(c, &g_bal, "effective-batch", AF_DIAG_WARN, "33");
    c.batch_size = 4, c.grad_accum = 1;
    run(&c, &g_bal, "effective-batch", &d, NULL);
    CHECK(strstr(d.message, "effective batch 4 (batch 4 x accumulation 1)") &&
              !strcmp(d.recommendation, "use --grad-accum 4 (batch 4 x 4 = 16)"),
          "batch message: '%s' -> '%s'", d.message, d.recommendation);
    /* packed causal LM: the samples a step holds count, not --batch x --grad-accum (8 x 2 = 16 would
       be silent): 1,000 samples in 10 steps per epoch = 100 per step */
    c = base();
    c.batch_size = 8, c.grad_accum = 2, c.max_seq_len = 512, c.step_samples = 100;
    run(&c, &g_bal, "effective-batch", &d, NULL);
    CHECK(strstr(d.message, "effective batch ~100.0 samples per step") && strstr(d.message, "4096 tokens") &&
              !strcmp(d.recommendation, "use --grad-accum 1 and a smaller --batch (fewer tokens per packed micro-batch)"),
          "packed batch message: '%s' -> '%s'", d.message, d.recommendation);
    c.step_samples = 16; /* 8 per packed micro-batch x 2: fine */
    SILENT(c, &g_bal, "effective-batch", "packed 16");
    c.step_samples = 4, c.grad_accum = 2; /* 2 per micro-batch: 8 micro-batches reach 16 */
    run(&c, &g_bal, "effective-batch", &d, NULL);
    CHECK(!strcmp(d.recommendation, "use --grad-accum 8 (~16 samples per step)"), "packed small: '%s'", d.recommendation);

    c = base(); /* alpha/r: 2 silent, [0.5, 8] info, outside warn */
    c.lora_alpha = 8;
    FIRES(c, &g_bal, "lora-alpha", AF_DIAG_INFO, "ratio 1");
    run(&c, &g_bal, "lora-alpha", &d, NULL);
    CHECK(strstr(d.message, "scale alpha/r = 1") && !strcmp(d.recommendation, "use --lora-alpha 16"), "alpha: %s",
          d.message);
    c.lora_alpha = 4;
    FIRES(c, &g_bal, "lora-alpha", AF_DIAG_INFO, "ratio 0.5");
    c.lora_alpha = 3.9;
    FIRES(c, &g_bal, "lora-alpha", AF_DIAG_WARN, "ratio 0.49");
    c.lora_alpha = 64;
    FIRES(c, &g_bal, "lora-alpha", AF_DIAG_INFO, "ratio 8");
    c.lora_alpha = 65;
    FIRES(c, &g_bal, "lora-alpha", AF_DIAG_WARN, "ratio 8.1");

    c = base();
    c.max_grad_norm = 0;
    FIRES(c, &g_bal, "grad-clip", AF_DIAG_WARN, "clip off");
    c.max_grad_norm = 0.3;
    SILENT(c, &g_bal, "grad-clip", "0.3");
}

static void test_seq_len(void) {
    af_train_config c = base();
    af_diag d;
    c.max_seq_len = 198; /* p99 99: 2 x p99 = 198 */
    SILENT(c, &g_bal, "seq-len-long", "198");
    c.max_seq_len = 199;
    FIRES(c, &g_bal, "seq-len-long", AF_DIAG_WARN, "199");
    c.max_seq_len = 95; /* p95 95 */
    SILENT(c, &g_bal, "seq-len-short", "95");
    c.max_seq_len = 94;
    run(&c, &g_bal, "seq-len-short", &d, NULL);
    CHECK(d.severity == AF_DIAG_WARN && strstr(d.message, "6 of 100 samples (6.0%)") &&
              strstr(d.recommendation, "--max-seq-len 128"),
          "short: %s -> %s", d.message, d.recommendation);
    /* the automatic recipe's own choice: said at info level with its reason, never "use --max-seq-len" */
    c.max_seq_len_why = "max_seq_len 94: the compute budget (the rule gives 128)";
    run(&c, &g_bal, "seq-len-short", &d, NULL);
    CHECK(d.severity == AF_DIAG_INFO && strstr(d.message, "chosen by the automatic recipe (max_seq_len 94: the compute "
                                                          "budget") && strstr(d.message, "6 of 100 samples") &&
              !strstr(d.recommendation, "use --max-seq-len") && strstr(d.recommendation, "--max-seq-len 128"),
          "short, the recipe's choice: info with the reason: %s -> %s", d.message, d.recommendation);
    c.max_seq_len = 199;
    run(&c, &g_bal, "seq-len-long", &d, NULL);
    CHECK(d.severity == AF_DIAG_INFO && strstr(d.message, "chosen by the automatic recipe") &&
              !strstr(d.recommendation, "use --max-seq-len"),
          "long, the recipe's choice: info: %s -> %s", d.message, d.recommendation);
    c.max_seq_len_why = NULL;
    { /* p99 11: the suggestion (p99 rounded up to 64) is 64 itself: nothing to suggest at 64 */
        int32_t sl[40], sb[40];
        for (int i = 0; i < 40; i++) sl[i] = 10 + i % 2, sb[i] = i % 3;
        af_data_stats ss;
        if (CHECK(make_stats(sl, sb, 40, 3, 512, &ss), "stats")) {
            c.max_seq_len = 64;
            SILENT(c, &ss, "seq-len-long", "64 when p99 rounds up to 64");
            c.max_seq_len = 65;
            FIRES(c, &ss, "seq-len-long", AF_DIAG_WARN, "65");
            af_data_stats_free(&ss);
        }
    }
    c.max_seq_len = 94;
    /* 198 samples of 10 tokens, 2 of 1000: p99 10, max 1000 */
    int32_t len[200], lab[200];
    for (int i = 0; i < 200; i++) len[i] = i < 198 ? 10 : 1000, lab[i] = i % 3;
    af_data_stats s;
    if (!make_stats(len, lab, 200, 3, 512, &s)) {
        CHECK(0, "stats");
        return;
    }
    c.max_seq_len = 512;
    run(&c, &s, "seq-len-long", &d, NULL);
    /* L' = 64; worst case 512 -> 64: 8x memory, 64x attention; total (198·100 + 2·512²)/(198·100 + 2·64²) */
    char want[160];
    snprintf(want, sizeof want, "total attention cost over the data %.2fx lower", 544088.0 / 27992.0);
    CHECK(strstr(d.message, "max_seq_len 512 is 51.2x the p99 token length 10; with 64") &&
              strstr(d.message, "(∝ L²) is 64.0x lower") && strstr(d.message, "(∝ L) 8.0x lower") &&
              strstr(d.message, want) && strstr(d.message, "2 sample(s) (1.0%) truncated") &&
              !strcmp(d.recommendation, "use --max-seq-len 64"),
          "long: %s -> %s", d.message, d.recommendation);
    af_data_stats_free(&s);
}

static void test_imbalance(void) {
    af_train_config c = base();
    af_diag d;
    const int32_t c6[3] = {60, 30, 10}, c5[3] = {50, 40, 10}, c0[3] = {50, 50, 0};
    af_data_stats s6, s5, s0;
    if (!stats_counts(c6, 3, &s6) || !stats_counts(c5, 3, &s5) || !stats_counts(c0, 3, &s0)) {
        CHECK(0, "stats");
        return;
    }
    const char *names[3] = {"business", "sport", "tech"};
    c.label_names = names;
    c.epochs = 1.9;
    run(&c, &s6, "epochs-imbalance", &d, NULL);
    CHECK(d.severity == AF_DIAG_WARN && strstr(d.message, "imbalance 6.0:1 ('business' 60 vs 'tech' 10 samples)") &&
              strstr(d.message, "seen only ~19 times over ~12 optimizer updates"),
          "imbalance: %s", d.message);
    FIRES(c, &s6, "class-weights", AF_DIAG_INFO, "uniform weights, 6:1");
    c.class_weights = "inverse-freq";
    SILENT(c, &s6, "class-weights", "weighted");
    c.epochs = 2;
    SILENT(c, &s6, "epochs-imbalance", "2 epochs");
    c.epochs = 1;
    SILENT(c, &s5, "epochs-imbalance", "imbalance exactly 5");
    c.epochs = 0, c.max_steps = 5; /* 5 x 16 / 100 = 0.8 epochs */
    run(&c, &s6, "epochs-imbalance", &d, NULL);
    CHECK(strstr(d.message, "with 0.8 epoch(s)") && strstr(d.message, "seen only ~8 times over ~5 optimizer"),
          "max_steps path: %s", d.message);
    c = base();
    run(&c, &s0, "class-empty", &d, NULL);
    CHECK(d.severity == AF_DIAG_WARN && strstr(d.message, "1 class(es) have no training sample (first: '2')"),
          "class-empty: %s", d.message);
    SILENT(c, &s6, "class-empty", "all present");
    af_data_stats_free(&s6), af_data_stats_free(&s5), af_data_stats_free(&s0);
}

static void test_printer(void) {
    af_train_config c = base();
    c.lr = 1e-3;
    c.max_grad_norm = 0;
    af_diag_list l = {0};
    af_hparams_check(&c, &g_bal, &l);
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp) return;
    af_diag_print(&l, fp);
    fclose(fp);
    CHECK(buf && strstr(buf, "warn  [lr-model-size] lr 1e-3 is 5.0x above the 2e-4 recommended for a 135M-parameter "
                             "model (QLoRA, Dettmers et al. 2023) -> use --lr 2e-4\n") &&
              strstr(buf, "warn  [grad-clip] "),
          "printed:\n%s", buf ? buf : "");
    int lines = 0;
    for (char *p = buf; p && *p; p++) lines += *p == '\n';
    CHECK(lines == l.n && l.n == 2, "one line per diagnostic (%d lines, %d diagnostics)", lines, l.n);
    free(buf);
    af_diag_list_free(&l);
}

int main(void) {
    const int32_t bal[3] = {40, 30, 30};
    if (!stats_counts(bal, 3, &g_bal)) {
        CHECK(0, "stats: %s", af_last_error());
        return tl_finish("test_hparams");
    }
    test_clean_and_errors();
    test_lr_batch_alpha_clip();
    test_seq_len();
    test_imbalance();
    test_printer();
    af_data_stats_free(&g_bal);
    return tl_finish("test_hparams");
}
