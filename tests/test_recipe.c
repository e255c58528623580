/*
 * test_recipe.c — train/recipe.h: the automatic recipe's rules on synthetic data statistics:
 * epochs from the set's size (and the imbalance floor), class weights at the 5:1 boundary,
 * max_seq_len from the p95 length with its caps (512, the context, memory), the compute budget's
 * order of giving up and the layer growth, given values kept, causal-LM epochs from target tokens,
 * the cost model by hand, and the evaluation interval; the evaluations' cost with the prefix cache, the
 * early-stopping cadence, patience and threshold.
 */
#include "testlib.h"
#include "train/recipe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* SmolLM2-135M's shape: 30 layers, hidden 576, f = 2 x 3.54M parameters per layer. */
#define F_SMOL (2.0 * (2.0 * 576 * 576 + 2.0 * 576 * 192 + 3.0 * 576 * 1536))

static int32_t *g_len; /* sorted lengths, shared by the cases that take a prefix of them */

/* n samples, every one `len` tokens long except the longest 8% of `tail` tokens (so p95 = tail). */
static int32_t *lengths(int64_t n, int32_t len, int32_t tail) {
    int32_t *l = malloc(sizeof *l * (size_t)n);
    for (int64_t i = 0; i < n; i++) l[i] = i >= n - n * 8 / 100 ? tail : len;
    return l;
}

static af_recipe_in base(int64_t n, const int32_t *len, const int64_t *counts, int32_t C) {
    af_recipe_in in;
    memset(&in, 0, sizeof in);
    in.n = n;
    in.sorted_len = len;
    in.num_classes = C;
    in.class_count = counts;
    in.n_layers = 30;
    in.max_positions = 8192;
    in.flops_token_layer = F_SMOL;
    in.hidden = 576;
    in.prefix_cache_bytes = (int64_t)2048 << 20;
    in.batch = 8;
    in.grad_accum = 2;
    in.budget_flops = 1e30; /* no budget pressure unless a case sets one */
    in.epochs = 1;
    in.max_seq_len = 128;
    in.layers = 10;
    return in;
}

static af_recipe choose(const af_recipe_in *in) {
    af_recipe r;
    int rc = af_recipe_choose(in, &r);
    CHECK(rc == 0, "af_recipe_choose returned %d", rc);
    return r;
}

static void test_epochs_by_size(void) {
    int32_t *l = lengths(60000, 40, 60);
    int64_t bal[2] = {1, 1};
    struct { int64_t n; double e; } cases[] = {{1558, 2}, {737, 5}, {3000, 1}, {2999, 2}, {1500, 2}, {1499, 3},
                                               {100, 5}, {20000, 1}, {50000, 0.4}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bal[0] = bal[1] = cases[i].n / 2;
        af_recipe_in in = base(cases[i].n, l, bal, 2);
        af_recipe r = choose(&in);
        CHECK(fabs(r.epochs - cases[i].e) < 1e-12, "n = %lld: epochs %g, want %g (%s)", (long long)cases[i].n, r.epochs,
              cases[i].e, r.why_epochs);
        CHECK(strcmp(r.class_weights, "uniform") == 0, "balanced: uniform weights, got %s", r.class_weights);
    }
    free(l);
}

static void test_imbalance(void) {
    int32_t *l = lengths(2400, 30, 40);
    /* exactly 5:1 is not imbalanced; above is */
    int64_t c5[2] = {2000, 400}, c5b[2] = {2001, 399}, c68[3] = {1278, 188, 934}, c12[3] = {1560, 130, 710};
    af_recipe_in in = base(2400, l, c5, 2);
    af_recipe r = choose(&in);
    CHECK(!strcmp(r.class_weights, "uniform") && r.epochs == 2, "5:1: uniform, 2 epochs by size (got %s, %g)",
          r.class_weights, r.epochs);
    in.class_count = c5b;
    r = choose(&in);
    CHECK(!strcmp(r.class_weights, "sqrt-inverse") && strstr(r.why_class_weights, "5.0:1"),
          "5.01:1: sqrt-inverse (%s)", r.why_class_weights);
    /* 6.8:1, smallest class 188: 2 epochs (the floor), 188 x 2 = 376 >= 300 sightings */
    in = base(2400, l, c68, 3);
    r = choose(&in);
    CHECK(r.epochs == 2 && !strcmp(r.class_weights, "sqrt-inverse"), "6.8:1: 2 epochs, sqrt-inverse (got %g, %s)",
          r.epochs, r.class_weights);
    /* 12:1, smallest 130 of 2400: ceil(300 / 130) = 3 epochs although the size asks 2 */
    in.class_count = c12;
    r = choose(&in);
    CHECK(r.epochs == 3 && strstr(r.why_epochs, "smallest class"), "12:1: 3 epochs (got %g: %s)", r.epochs, r.why_epochs);
    /* a tiny minority: capped at 5 epochs */
    int64_t c_tiny[2] = {2390, 10};
    in.class_count = c_tiny;
    in.num_classes = 2;
    r = choose(&in);
    CHECK(r.epochs == 5, "239:1: 5 epochs (cap), got %g", r.epochs);
    /* multi-label: no class weights (BCE), no imbalance floor */
    in.multi_label = 1;
    r = choose(&in);
    CHECK(!strcmp(r.class_weights, "uniform") && r.epochs == 2, "multi-label: uniform, 2 epochs (got %s, %g)",
          r.class_weights, r.epochs);
    free(l);
}

static void test_max_seq_len(void) {
    int64_t c[2] = {500, 500};
    struct { int32_t len, tail, want; } cases[] = {{20, 311, 320}, {20, 87, 128}, {5, 10, 64}, {400, 949, 512},
                                                   {64, 64, 64}, {64, 65, 128}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t *l = lengths(1000, cases[i].len, cases[i].tail);
        af_recipe_in in = base(1000, l, c, 2);
        af_recipe r = choose(&in);
        CHECK(r.max_seq_len == cases[i].want, "p95 %d: max_seq_len %d, want %d (%s)", cases[i].tail, r.max_seq_len,
              cases[i].want, r.why_max_seq_len);
        in.max_positions = 256; /* the context caps it */
        r = choose(&in);
        CHECK(r.max_seq_len == (cases[i].want < 256 ? cases[i].want : 256), "context 256: max_seq_len %d",
              r.max_seq_len);
        in.max_positions = 8192;
        in.mem_tokens = 8 * 200; /* memory: 200 tokens per sample at batch 8 -> a multiple of 64 below */
        r = choose(&in);
        CHECK(r.max_seq_len == (cases[i].want < 192 ? cases[i].want : 192), "memory cap: max_seq_len %d (%s)",
              r.max_seq_len, r.why_max_seq_len);
        free(l);
    }
}

static void test_cost(void) {
    int32_t len[4] = {0, 10, 100, 300}; /* a 0 counts as 1 token */
    CHECK(af_recipe_tokens(len, 4, 128) == 1 + 10 + 100 + 128, "tokens(128) = %lld",
          (long long)af_recipe_tokens(len, 4, 128));
    int64_t c[2] = {2, 2};
    af_recipe_in in = base(4, len, c, 2);
    in.flops_token_layer = 1;
    const double T = 239;
    /* 10 adapted of 30, the cache holds 239 x 576 floats: the 20 below run once */
    CHECK(fabs(af_recipe_cost(&in, 3, 128, 10, 0) - T * (2 * 10 * 3 + 20 * 1)) < 1e-6, "cost with the cache");
    in.prefix_cache_bytes = 100; /* too small: the layers below run every epoch */
    CHECK(fabs(af_recipe_cost(&in, 3, 128, 10, 0) - T * (2 * 10 * 3 + 20 * 3)) < 1e-6, "cost without the cache");
    int32_t vl[2] = {50, 500};
    in.val_sorted_len = vl;
    in.n_val = 2;
    CHECK(fabs(af_recipe_cost(&in, 1, 128, 30, 4) - (T * 60 + 4.0 * 178 * 30)) < 1e-6, "cost with 4 evaluations");
}

static void test_budget(void) {
    /* BBC News' shape: 1,558 samples of ~500 tokens, balanced, 223 validation samples */
    int32_t *l = lengths(1558, 443, 949), *vl = lengths(223, 465, 928);
    int64_t c[5] = {357, 270, 292, 358, 281};
    af_recipe_in in = base(1558, l, c, 5);
    in.n_val = 223;
    in.val_sorted_len = vl;
    in.budget_flops = 0; /* the default */
    af_recipe r = choose(&in);
    CHECK(r.epochs == 2 && r.max_seq_len == 128 && r.layers >= 10 && r.layers < 30 && r.cost_flops <= r.budget_flops,
          "BBC-like, default budget: 2 epochs, 128 tokens, 10..29 layers (got %g, %d, %d; %s)", r.epochs, r.max_seq_len,
          r.layers, r.gave_up);
    CHECK(strstr(r.gave_up, "max_seq_len 128 instead of 512") && strstr(r.gave_up, "instead of all 30 layers"),
          "gave up: %s", r.gave_up);
    CHECK(fabs(r.budget_flops - AF_RECIPE_DEFAULT_FLOPS) < 1, "default budget %g", r.budget_flops);
    /* the largest layer count that fits: one more does not */
    CHECK(af_recipe_cost(&in, r.epochs, r.max_seq_len, r.layers + 1, r.n_evals) > r.budget_flops,
          "layers %d is the most that fit", r.layers);
    /* a big budget: everything the rules ask */
    in.budget_flops = 1e17;
    r = choose(&in);
    CHECK(r.epochs == 2 && r.max_seq_len == 512 && r.layers == 30 && !r.gave_up[0], "big budget: 2, 512, all (got %g, "
          "%d, %d; %s)", r.epochs, r.max_seq_len, r.layers, r.gave_up);
    /* order of giving up: length to 128, layers to 10, then epochs, then layers below 10 */
    in.budget_flops = af_recipe_cost(&in, 2, 128, 10, 2) * 1.001;
    r = choose(&in);
    CHECK(r.max_seq_len == 128 && r.layers == 10 && r.epochs == 2, "just fits 2/128/10 (got %g, %d, %d)", r.epochs,
          r.max_seq_len, r.layers);
    in.budget_flops = af_recipe_cost(&in, 2, 128, 10, 2) * 0.999;
    r = choose(&in);
    CHECK(r.epochs == 1 && r.max_seq_len == 128 && r.layers >= 10, "below 2/128/10: 1 epoch first (got %g, %d, %d)",
          r.epochs, r.max_seq_len, r.layers);
    in.budget_flops = af_recipe_cost(&in, 1, 128, 3, 2) * 1.001;
    r = choose(&in);
    CHECK(r.epochs == 1 && r.max_seq_len == 128 && r.layers == 3, "then layers: 1/128/3 (got %g, %d, %d)", r.epochs,
          r.max_seq_len, r.layers);
    /* nothing left to give up without a time budget: said; with one, fewer than one pass */
    in.budget_flops = 1e9;
    r = choose(&in);
    CHECK(r.epochs == 1 && r.max_seq_len == 64 && r.layers == 1 && strstr(r.gave_up, "still over the budget"),
          "tiny budget: 1/64/1 and said (got %g, %d, %d; %s)", r.epochs, r.max_seq_len, r.layers, r.gave_up);
    /* a time budget: one evaluation (at the end), length 128 and 10 layers kept, less than a pass */
    in.time_budget = 1;
    in.budget_flops = af_recipe_cost(&in, 1, 128, 10, 1) * 0.5;
    r = choose(&in);
    CHECK(r.epochs > 0 && r.epochs < 1 && r.max_seq_len == 128 && r.layers == 10 && r.n_evals == 1 &&
              r.cost_flops <= in.budget_flops && strstr(r.gave_up, "one evaluation (at the end)") &&
              fabs(r.epochs_rule - 2) < 1e-12,
          "time budget: %g of a pass at 128/10, %d evaluation(s), cost %g <= %g (%s)", r.epochs, r.n_evals, r.cost_flops,
          in.budget_flops, r.gave_up);
    /* the validation data alone cost more than half the budget: no evaluation, said */
    in.budget_flops = af_recipe_cost(&in, 0, 128, 10, 1) * 1.5;
    r = choose(&in);
    CHECK(r.n_evals == 0 && strstr(r.gave_up, "no evaluation on the validation data") && r.epochs > 0 &&
              r.cost_flops <= in.budget_flops,
          "time budget below the evaluation: no evaluation (%d, %g; %s)", r.n_evals, r.epochs, r.gave_up);
    free(l), free(vl);
}

static void test_given(void) {
    int32_t *l = lengths(1558, 443, 949);
    int64_t c[2] = {1500, 58}; /* imbalanced: the rules would choose weights and 5 epochs */
    af_recipe_in in = base(1558, l, c, 2);
    in.budget_flops = 1e13; /* heavy pressure */
    in.given = AF_RECIPE_GIVEN_LENGTH | AF_RECIPE_GIVEN_MAX_SEQ_LEN | AF_RECIPE_GIVEN_LAYERS |
               AF_RECIPE_GIVEN_CLASS_WEIGHTS;
    in.epochs = 3;
    in.max_seq_len = 256;
    in.layers = 30;
    af_recipe r = choose(&in);
    CHECK(r.epochs == 3 && r.max_seq_len == 256 && r.layers == 30 && !strcmp(r.class_weights, "uniform") &&
              !r.why_epochs[0] && !r.why_max_seq_len[0] && !r.why_layers[0] && !r.why_class_weights[0],
          "given values kept under budget pressure (got %g, %d, %d, %s)", r.epochs, r.max_seq_len, r.layers,
          r.class_weights);
    CHECK(strstr(r.gave_up, "still over the budget") != NULL, "over budget said: %s", r.gave_up);
    /* only the length given: the budget takes layers and length, never the epochs */
    in.given = AF_RECIPE_GIVEN_LENGTH;
    in.epochs = 4;
    r = choose(&in);
    CHECK(r.epochs == 4 && r.layers == 1 && r.max_seq_len == 64, "epochs given: 4 kept (got %g, layers %d, len %d)",
          r.epochs, r.layers, r.max_seq_len);
    /* max_steps given: epochs 0 (the steps set the length) */
    in.max_steps = 50;
    r = choose(&in);
    CHECK(r.epochs == 0, "max_steps given: epochs 0, got %g", r.epochs);
    free(l);
}

static void test_causal_lm(void) {
    int32_t *l = lengths(1000, 150, 300);
    af_recipe_in in = base(1000, l, NULL, 0);
    in.causal_lm = 1;
    in.layers = 30;
    in.max_seq_len = 512;
    struct { int64_t targets; double e; } cases[] = {{15000, 3}, {400000, 3}, {600000, 2}, {1000000, 1}, {5000000, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        in.n_targets = cases[i].targets;
        af_recipe r = choose(&in);
        CHECK(r.epochs == cases[i].e && r.max_seq_len == 512 && r.layers == 30 && !strcmp(r.class_weights, "uniform"),
              "causal LM, %lld targets: %g epochs (want %g), length and layers kept (%d, %d)",
              (long long)cases[i].targets, r.epochs, cases[i].e, r.max_seq_len, r.layers);
    }
    in.n_targets = 15000;
    in.budget_flops = af_recipe_cost(&in, 2, 512, 30, 0) * 1.001; /* the budget takes epochs, not layers */
    af_recipe r = choose(&in);
    CHECK(r.epochs == 2 && r.layers == 30, "causal LM under a budget: 2 epochs, 30 layers (got %g, %d)", r.epochs,
          r.layers);
    free(l);
}

/* The causal-LM max_seq_len from the data (af_recipe_lm_max_seq_len). */
static void test_lm_max_seq_len(void) {
    /* the held-out prompt/completion set of the issue: 3,000 examples, p99 139, max 147 */
    int32_t *l = calloc(3000, sizeof *l);
    if (!CHECK(l != NULL, "alloc")) return;
    for (int i = 0; i < 3000; i++) l[i] = i < 2969 ? 60 + i / 60 : 139 + (i - 2969) * 8 / 30;
    CHECK(l[2969] == 139 && l[2999] == 147, "fixture: p99 %d, max %d", l[2969], l[2999]);
    int64_t longer = -1;
    char why[256];
    int32_t L = af_recipe_lm_max_seq_len(l, 3000, 8192, 0, 8, &longer, why, sizeof why);
    CHECK(L == 192 && longer == 0, "p99 139 -> 192, none longer (got %d, %lld)", L, (long long)longer);
    CHECK(strstr(why, "p99 token length 139") && strstr(why, "0 of 3,000"), "reason: %s", why);
    /* the model's context binds: 31 examples (1.03%) longer than 128 */
    L = af_recipe_lm_max_seq_len(l, 3000, 128, 0, 8, &longer, why, sizeof why);
    CHECK(L == 128 && longer == 31 && strstr(why, "model's context"), "context cap: %d, %lld longer (%s)", L,
          (long long)longer, why);
    /* the memory limit binds: 8 x L <= 800 tokens -> 64 (a multiple of 64, at least 64) */
    L = af_recipe_lm_max_seq_len(l, 3000, 8192, 800, 8, &longer, why, sizeof why);
    CHECK(L == 64 && strstr(why, "memory limit"), "memory cap: %d (%s)", L, why);
    L = af_recipe_lm_max_seq_len(l, 3000, 8192, 10, 8, &longer, NULL, 0);
    CHECK(L == 64, "memory cap never below 64: %d", L);
    /* a generous memory limit changes nothing */
    L = af_recipe_lm_max_seq_len(l, 3000, 8192, 8 * 192, 8, &longer, NULL, 0);
    CHECK(L == 192, "memory limit exactly 8 x 192: %d", L);
    /* short examples: one step of 64 */
    for (int i = 0; i < 3000; i++) l[i] = 10;
    L = af_recipe_lm_max_seq_len(l, 3000, 8192, 0, 8, &longer, NULL, 0);
    CHECK(L == 64 && longer == 0, "short examples -> 64 (got %d, %lld)", L, (long long)longer);
    /* a model context shorter than a step */
    L = af_recipe_lm_max_seq_len(l, 3000, 40, 0, 8, &longer, NULL, 0);
    CHECK(L == 40 && longer == 0, "context 40 -> 40 (got %d)", L);
    /* without a binding cap at most 1% are ever longer, whatever the distribution */
    for (int shape = 0; shape < 4; shape++) {
        for (int n = 1; n <= 3000; n += 277) {
            for (int i = 0; i < n; i++) {
                const double u = (double)(i + 1) / n;
                l[i] = shape == 0 ? 1 + i : shape == 1 ? (int32_t)(20 / (1.0001 - u)) : shape == 2 ? (u > 0.98 ? 5000 : 30)
                                                                                             : (int32_t)(u * u * 2000);
                if (l[i] < 1) l[i] = 1;
            }
            L = af_recipe_lm_max_seq_len(l, n, 0, 0, 8, &longer, NULL, 0);
            CHECK(L >= 1 && longer * 100 <= n, "shape %d, n %d: %lld of %d longer than %d", shape, n, (long long)longer,
                  n, L);
        }
    }
    CHECK(af_recipe_lm_max_seq_len(l, 0, 8192, 0, 8, NULL, NULL, 0) == 0 &&
              af_recipe_lm_max_seq_len(NULL, 3, 8192, 0, 8, NULL, NULL, 0) == 0 &&
              af_recipe_lm_max_seq_len(l, 3, 8192, 0, 0, NULL, NULL, 0) == 0,
          "invalid input -> 0");
    free(l);
}

static void test_eval_every(void) {
    CHECK(af_recipe_eval_every(4, 196, 98) == 49, "4 evaluations over 196 steps: %lld",
          (long long)af_recipe_eval_every(4, 196, 98));
    CHECK(af_recipe_eval_every(5, 235, 47) == 47, "5 over 5 epochs of 47: every epoch");
    CHECK(af_recipe_eval_every(4, 3, 3) == 1, "4 over 3 steps: every step");
    CHECK(af_recipe_eval_every(4, 1000, 100) == 100, "at least once per epoch: %lld",
          (long long)af_recipe_eval_every(4, 1000, 100));
    CHECK(af_recipe_eval_every(0, 100, 10) == 0, "no validation: 0");
    int32_t *l = lengths(100, 10, 10);
    int64_t c[2] = {50, 50};
    af_recipe_in in = base(100, l, c, 2);
    af_recipe r = choose(&in);
    CHECK(r.n_evals == 0 && !r.why_eval[0], "no validation data: no evaluations");
    in.n_val = 10;
    in.val_sorted_len = l;
    r = choose(&in);
    CHECK(r.n_evals == 20 && r.evals_per_epoch == 4 && r.epochs == 5, "5 epochs: 20 evaluations, 4 per epoch (got %d)",
          r.n_evals);
    free(l);
}

/* The evaluation cost with and without the prefix cache, by hand. */
static void test_eval_cost(void) {
    int32_t *l = lengths(100, 200, 200), *vl = lengths(20, 300, 300);
    int64_t c[2] = {50, 50};
    af_recipe_in in = base(100, l, c, 2);
    in.n_val = 20;
    in.val_sorted_len = vl;
    const double Tv = 20.0 * 128;
    CHECK(fabs(af_recipe_eval_cost(&in, 128, 10, 5) - F_SMOL * Tv * (30 + 4 * 10)) < 1,
          "cached: the first evaluation every layer, the next 4 the top 10");
    CHECK(fabs(af_recipe_eval_cost(&in, 128, 30, 5) - F_SMOL * Tv * 30 * 5) < 1, "all layers adapted: no cache");
    in.prefix_cache_bytes = 0;
    CHECK(fabs(af_recipe_eval_cost(&in, 128, 10, 5) - F_SMOL * Tv * 30 * 5) < 1, "cache off: every layer");
    in.prefix_cache_bytes = (int64_t)(100 * 128 + 20 * 128) * 576 * 4 - 1; /* one byte short */
    CHECK(fabs(af_recipe_eval_cost(&in, 128, 10, 5) - F_SMOL * Tv * 30 * 5) < 1, "cache too small: every layer");
    CHECK(af_recipe_eval_cost(&in, 128, 10, 0) == 0, "no evaluation: 0");
    free(l), free(vl);
}

/* Early stopping at the plateau: the evaluation cadence (a quarter epoch, fewer when they would cost
 * more than 25% of the training), patience 2, the threshold, and when it is off. */
static void test_plateau(void) {
    int32_t *l = lengths(1558, 443, 949), *vl = lengths(223, 465, 928), *big = lengths(300, 465, 928);
    int64_t c[5] = {357, 270, 292, 358, 281};
    af_recipe_in in = base(1558, l, c, 5);
    in.n_val = 223;
    in.val_sorted_len = vl;
    in.budget_flops = 0; /* the default: BBC News' plan */
    af_recipe r = choose(&in);
    const double train = af_recipe_cost(&in, r.epochs, r.max_seq_len, r.layers, 0);
    CHECK(r.epochs == 2 && r.layers == 10 && r.max_seq_len == 128 && r.n_evals == 8 && r.evals_per_epoch == 4 &&
              r.eval_flops <= 0.25 * train && fabs(r.eval_flops - af_recipe_eval_cost(&in, 128, 10, 8)) < 1,
          "BBC-like: 2 epochs, top 10, 8 evaluations (%d, %d per epoch, %.3g of %.3g)", r.n_evals, r.evals_per_epoch,
          r.eval_flops, train);
    CHECK(fabs(r.cost_flops - af_recipe_cost(&in, 2, 128, 10, 2)) < 1 && r.cost_flops <= r.budget_flops,
          "the budget counts the 2 evaluations it always did (%g)", r.cost_flops);
    CHECK(r.early_stop && r.patience == 2 && fabs(r.es_threshold - 1.0 / 223) < 1e-15 && strstr(r.why_stop, "wsd") &&
              strstr(r.why_stop, "1/223"),
          "early stopping: patience %d, threshold %g (%s)", r.patience, r.es_threshold, r.why_stop);
    /* a validation set of 300 long samples: fewer evaluations per epoch, within the share */
    in.n_val = 300;
    in.val_sorted_len = big;
    r = choose(&in);
    const double tr2 = af_recipe_cost(&in, r.epochs, r.max_seq_len, r.layers, 0);
    const int32_t more = (int32_t)ceil(r.epochs * (r.evals_per_epoch + 1));
    CHECK(r.evals_per_epoch >= 2 && r.evals_per_epoch < 4 && r.n_evals == (int32_t)ceil(r.epochs * r.evals_per_epoch) &&
              r.eval_flops <= 0.25 * tr2 && af_recipe_eval_cost(&in, r.max_seq_len, r.layers, more) > 0.25 * tr2,
          "large validation set: %d per epoch is the most within 25%% (%d evaluations)", r.evals_per_epoch, r.n_evals);
    in.n_val = 223;
    in.val_sorted_len = vl;
    /* the given patience is kept and decides whether there is room: 8 evaluations hold patience 6, not 7 */
    in.given = AF_RECIPE_GIVEN_PATIENCE;
    in.patience = 6;
    r = choose(&in);
    CHECK(r.early_stop && strstr(r.why_stop, "the given --patience"), "given patience 6: on (%s)", r.why_stop);
    in.patience = 7;
    r = choose(&in);
    CHECK(!r.early_stop && strstr(r.why_stop, "no early stopping"), "given patience 7: off (%s)", r.why_stop);
    /* a given schedule and threshold are named as given */
    in.given = AF_RECIPE_GIVEN_SCHEDULE | AF_RECIPE_GIVEN_THRESHOLD;
    r = choose(&in);
    CHECK(r.early_stop && strstr(r.why_stop, "the given --schedule") && strstr(r.why_stop, "the given threshold"),
          "given schedule and threshold: %s", r.why_stop);
    /* --eval-every given (also a resume's recorded one): the caller's cadence, no early stopping chosen;
       --max-steps given: today's 2 evaluations, off */
    in.given = AF_RECIPE_GIVEN_EVAL_EVERY;
    r = choose(&in);
    CHECK(!r.early_stop && r.n_evals == 2 && r.evals_per_epoch == 0, "--eval-every given: %d evaluations, early stop %d",
          r.n_evals, r.early_stop);
    in.given = AF_RECIPE_GIVEN_LENGTH;
    in.max_steps = 500;
    in.epochs = 0;
    r = choose(&in);
    CHECK(!r.early_stop && r.n_evals == 2 && strstr(r.why_stop, "--max-steps"), "--max-steps given: off (%s)",
          r.why_stop);
    in.given = 0;
    in.max_steps = 0;
    in.epochs = 1;
    /* a time budget that leaves one evaluation: off */
    in.time_budget = 1;
    in.budget_flops = 3e13;
    r = choose(&in);
    CHECK(r.n_evals == 1 && !r.early_stop && !r.why_stop[0], "time budget, 1 evaluation: no early stopping (%d)",
          r.n_evals);
    in.time_budget = 0;
    in.budget_flops = 0;
    /* causal LM: the threshold in nats of eval loss */
    in.causal_lm = 1;
    in.layers = 30;
    in.n_targets = 400000;
    in.n_val = 50; /* a small validation set: room for the evaluations */
    r = choose(&in);
    CHECK(r.early_stop && fabs(r.es_threshold - 0.005) < 1e-15 && strstr(r.why_stop, "nats"),
          "causal LM: threshold %g (%s)", r.es_threshold, r.why_stop);
    /* no validation data: nothing */
    in.causal_lm = 0;
    in.n_val = 0;
    in.val_sorted_len = NULL;
    r = choose(&in);
    CHECK(!r.early_stop && r.n_evals == 0 && !r.why_stop[0], "no validation data: no early stopping");
    free(l), free(vl), free(big);
}

static void test_invalid(void) {
    af_recipe r;
    af_recipe_in in;
    memset(&in, 0, sizeof in);
    CHECK(af_recipe_choose(&in, &r) == -1, "empty input refused");
    CHECK(af_recipe_choose(NULL, &r) == -1, "NULL refused");
}

int main(void) {
    g_len = NULL;
    test_epochs_by_size();
    test_imbalance();
    test_max_seq_len();
    test_cost();
    test_budget();
    test_given();
    test_causal_lm();
    test_lm_max_seq_len();
    test_eval_every();
    test_eval_cost();
    test_plateau();
    test_invalid();
    return tl_finish("test_recipe");
}
