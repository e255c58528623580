/*
 * recipe.c — the automatic recipe's rules (see recipe.h for the rules and their sources).
 */
#include "train/recipe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
    SAMPLES_TARGET = 3000,    /* samples seen by a classification run */
    SAMPLES_MAX = 20000,      /* above this many samples: fewer than one pass */
    EPOCHS_MAX = 5,           /* at most this many passes (classification) */
    MINORITY_SEEN = 300,      /* the smallest class seen at least this often (imbalanced sets) */
    LM_TARGETS = 1000000,     /* target tokens seen by a causal-LM run */
    LM_EPOCHS_MAX = 3,
    LEN_MIN = 64, LEN_MAX = AF_RECIPE_MAX_LEN, LEN_BUDGET_MIN = 128, LEN_STEP = 64,
    LAYERS_BUDGET_MIN = 10,   /* the budget takes layers below this only after the epochs */
    EVALS_MIN = 2,
    EVALS_PER_EPOCH = 4,      /* early stopping: an evaluation every quarter epoch ... */
    PATIENCE = 2              /* ... and a stop after 2 of them without a gain */
};
#define EVAL_SHARE 0.25       /* the evaluations at most this share of the training compute */
#define LM_THRESHOLD 0.005    /* the least eval-loss gain (nats per target token) that counts */
#define IMBALANCE_RATIO 5.0
#define WARMUP_RATIO 0.06

int64_t af_recipe_tokens(const int32_t *sorted_len, int64_t n, int32_t L) {
    int64_t t = 0;
    for (int64_t i = 0; sorted_len && i < n; i++) {
        int32_t x = sorted_len[i] < 1 ? 1 : sorted_len[i];
        t += x < L ? x : L;
    }
    return t;
}

double af_recipe_cost(const af_recipe_in *in, double epochs, int32_t L, int32_t layers, int32_t n_evals) {
    const int32_t nl = in->n_layers;
    const int32_t K = layers < 1 ? 1 : layers > nl ? nl : layers;
    const double T = (double)af_recipe_tokens(in->sorted_len, in->n, L);
    const double Tv = in->val_sorted_len ? (double)af_recipe_tokens(in->val_sorted_len, in->n_val, L) : 0.0;
    const int32_t below = nl - K;
    const int cache = below > 0 && in->prefix_cache_bytes > 0 && T * (double)in->hidden * 4.0 <= (double)in->prefix_cache_bytes;
    const double below_passes = cache ? (epochs < 1 ? epochs : 1.0) : epochs;
    return in->flops_token_layer * (T * (2.0 * K * epochs + below * below_passes) + (double)n_evals * Tv * nl);
}

double af_recipe_eval_cost(const af_recipe_in *in, int32_t L, int32_t layers, int32_t n_evals) {
    if (n_evals <= 0 || !in->val_sorted_len || in->n_val <= 0) return 0;
    const int32_t nl = in->n_layers;
    const int32_t K = layers < 1 ? 1 : layers > nl ? nl : layers;
    const double T = (double)af_recipe_tokens(in->sorted_len, in->n, L);
    const double Tv = (double)af_recipe_tokens(in->val_sorted_len, in->n_val, L);
    const int cache = K < nl && in->prefix_cache_bytes > 0 &&
                      (T + Tv) * (double)in->hidden * 4.0 <= (double)in->prefix_cache_bytes;
    return in->flops_token_layer * Tv * ((double)nl + (double)(n_evals - 1) * (cache ? K : nl));
}

int64_t af_recipe_eval_every(int32_t n_evals, int64_t total, int64_t steps_per_epoch) {
    if (n_evals <= 0 || total <= 0) return 0;
    int64_t every = (total + n_evals - 1) / n_evals;
    if (steps_per_epoch > 0 && every > steps_per_epoch) every = steps_per_epoch; /* at least once per epoch */
    return every < 1 ? 1 : every;
}

/* "1,558" */
static const char *thousands(char *buf, size_t cap, int64_t v) {
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)(v < 0 ? -v : v));
    size_t n = strlen(t), o = 0;
    if (v < 0 && o + 1 < cap) buf[o++] = '-';
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = t[i];
    }
    buf[o] = 0;
    return buf;
}

static int32_t round_up(int32_t v, int32_t m) { return (int32_t)(((int64_t)v + m - 1) / m * m); }

static void append(char *dst, size_t cap, const char *s) {
    size_t l = strlen(dst);
    if (l && l + 2 < cap) strncat(dst, "; ", cap - l - 1);
    strncat(dst, s, cap - strlen(dst) - 1);
}

static const char *epochs_text(char *buf, size_t cap, double e) {
    if (e == floor(e)) snprintf(buf, cap, "%.0f epoch%s", e, e == 1 ? "" : "s");
    else snprintf(buf, cap, "%.2f epochs", e);
    return buf;
}

/* The choices af_recipe_choose works on: the rules' values, then fitted to the budget. */
typedef struct choice {
    int chooseE, chooseL, chooseK; /* what the recipe decides (not given; layers and length: classification) */
    double E, E_rule;              /* epochs; the rule's before the budget */
    int32_t L, L_rule;             /* max_seq_len; the rule's */
    int32_t K;                     /* adapted layers (the top K) */
    int32_t nev;                   /* evaluations */
    double cost, B;                /* the plan's FLOPs; the budget */
    int over;                      /* still over the budget */
    int evals_cut;                 /* 1: one evaluation instead of several, 2: none */
} choice;

/* The epochs' rule (r->why_epochs): preference 1, causal LM ~1M target tokens, classification ~3,000
 * samples seen (more when the smallest class of imbalanced data is seen too rarely); the given
 * length as it is. */
static double rule_epochs(const af_recipe_in *in, af_recipe *r, int imbalanced, int64_t nmin, double imb) {
    char a[32], b[32], c[32];
    double E = in->epochs;
    if (in->given & AF_RECIPE_GIVEN_LENGTH) {
        E = in->max_steps > 0 ? 0 : in->epochs;
    } else if (in->preference) {
        E = 1;
        snprintf(r->why_epochs, sizeof r->why_epochs, "1 epoch: preference tuning (the alignment handbook's DPO and "
                 "ORPO recipes train 1 epoch; the implicit rewards overfit quickly)");
    } else if (in->causal_lm) {
        int64_t T = in->n_targets > 0 ? in->n_targets : 1;
        E = ceil((double)LM_TARGETS / (double)T);
        E = E < 1 ? 1 : E > LM_EPOCHS_MAX ? LM_EPOCHS_MAX : E;
        snprintf(r->why_epochs, sizeof r->why_epochs,
                 "%s: %s target tokens in the training data; a run should see about 1,000,000 (1 to %d epochs, the "
                 "SFT practice)",
                 epochs_text(c, sizeof c, E), thousands(a, sizeof a, T), LM_EPOCHS_MAX);
    } else if (in->n > SAMPLES_MAX) {
        E = (double)SAMPLES_MAX / (double)in->n;
        snprintf(r->why_epochs, sizeof r->why_epochs, "%s: %s samples > %s: %s samples seen", epochs_text(c, sizeof c, E),
                 thousands(a, sizeof a, in->n), thousands(b, sizeof b, SAMPLES_MAX), thousands(c, sizeof c, SAMPLES_MAX));
    } else {
        E = ceil((double)SAMPLES_TARGET / (double)in->n - 1e-9);
        E = E < 1 ? 1 : E > EPOCHS_MAX ? EPOCHS_MAX : E;
        snprintf(r->why_epochs, sizeof r->why_epochs, "%s: %s samples x %.0f = %s samples seen (a run should see about "
                 "%s; 1 to %d epochs)",
                 epochs_text(c, sizeof c, E), thousands(a, sizeof a, in->n), E,
                 thousands(b, sizeof b, (int64_t)(E * (double)in->n)), "3,000", EPOCHS_MAX);
        if (imbalanced) {
            double Ei = ceil((double)MINORITY_SEEN / (double)nmin - 1e-9);
            Ei = Ei < 2 ? 2 : Ei > EPOCHS_MAX ? EPOCHS_MAX : Ei;
            if (Ei > E) {
                E = Ei;
                snprintf(r->why_epochs, sizeof r->why_epochs,
                         "%s: class imbalance %.1f:1 > %.0f:1, so the smallest class (%s samples) is seen %s times (at "
                         "least 2 epochs and %d sightings wanted, at most %d epochs)",
                         epochs_text(c, sizeof c, E), imb, IMBALANCE_RATIO, thousands(a, sizeof a, nmin),
                         thousands(b, sizeof b, (int64_t)(E * (double)nmin)), MINORITY_SEEN, EPOCHS_MAX);
            }
        }
    }
    return E;
}

/* The class weights' rule (r->class_weights, r->why_class_weights): sqrt-inverse for imbalanced
 * single-label data, else uniform. */
static void rule_class_weights(const af_recipe_in *in, af_recipe *r, int imbalanced, double imb, int64_t nmin,
                               int64_t nmax) {
    char a[32], b[32];
    snprintf(r->class_weights, sizeof r->class_weights, "uniform");
    if ((in->given & AF_RECIPE_GIVEN_CLASS_WEIGHTS) || in->causal_lm) return;
    if (imbalanced) {
        snprintf(r->class_weights, sizeof r->class_weights, "sqrt-inverse");
        snprintf(r->why_class_weights, sizeof r->why_class_weights,
                 "class weights sqrt-inverse: class imbalance %.1f:1 (%s vs %s samples) > %.0f:1", imb,
                 thousands(a, sizeof a, nmax), thousands(b, sizeof b, nmin), IMBALANCE_RATIO);
    } else if (!in->multi_label) {
        snprintf(r->why_class_weights, sizeof r->why_class_weights,
                 "class weights uniform: class imbalance %.1f:1 <= %.0f:1", imb, IMBALANCE_RATIO);
    }
}

/* The max_seq_len rule when chosen (r->why_max_seq_len): the p95 token length rounded up to
 * LEN_STEP, within [LEN_MIN, LEN_MAX], the model's context and the memory limit. */
static int32_t rule_max_seq_len(const af_recipe_in *in, af_recipe *r, int chooseL) {
    int32_t L = in->max_seq_len;
    if (!chooseL) return L;
    int64_t i95 = (int64_t)ceil(0.95 * (double)in->n) - 1;
    int32_t p95 = in->sorted_len[i95 < 0 ? 0 : i95];
    L = round_up(p95 < 1 ? 1 : p95, LEN_STEP);
    const char *cap = "";
    if (L < LEN_MIN) L = LEN_MIN;
    if (L > LEN_MAX) L = LEN_MAX, cap = ", capped at 512";
    if (in->max_positions > 0 && L > in->max_positions) L = in->max_positions, cap = ", capped by the model's context";
    if (in->mem_tokens > 0 && in->batch > 0 && (int64_t)L * in->batch > in->mem_tokens) {
        int32_t Lm = (int32_t)(in->mem_tokens / in->batch / LEN_STEP * LEN_STEP);
        L = Lm < LEN_STEP ? LEN_STEP : Lm, cap = ", capped by the memory limit";
    }
    snprintf(r->why_max_seq_len, sizeof r->why_max_seq_len, "the p95 token length %d rounded up to a multiple of "
             "%d%s", (int)p95, LEN_STEP, cap);
    return L;
}

/* Fit c to the budget c->B: under a time budget fewer evaluations first; then, while over it, a
 * shorter max_seq_len (to LEN_BUDGET_MIN), fewer layers (to LAYERS_BUDGET_MIN), fewer whole
 * epochs, then the last resorts (a time budget cuts passes below one); then as many layers as fit. */
static void fit_budget(const af_recipe_in *in, choice *c) {
    const unsigned g = in->given;
    c->cost = af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, c->K, c->nev);
    if (in->time_budget && c->cost > c->B && c->nev > 0 && !(g & AF_RECIPE_GIVEN_EVAL_EVERY)) {
        /* one evaluation, at the end; none when it alone (at the budget's shortest length) would take
           more than half the budget */
        const int32_t Le = c->chooseL && c->L > LEN_BUDGET_MIN ? LEN_BUDGET_MIN : c->L;
        if (c->nev > 1) c->nev = 1, c->evals_cut = 1;
        if (af_recipe_cost(in, 0, Le, c->K, 1) > 0.5 * c->B) c->nev = 0, c->evals_cut = 2;
        c->cost = af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, c->K, c->nev);
    }
    const int tb = in->time_budget && c->chooseE; /* a time budget cuts passes (below one) before layers < 10 */
    while (c->cost > c->B) {
        if (c->chooseL && c->L > LEN_BUDGET_MIN) c->L = c->L - LEN_STEP < LEN_BUDGET_MIN ? LEN_BUDGET_MIN : c->L - LEN_STEP;
        else if (c->chooseK && c->K > LAYERS_BUDGET_MIN) c->K--;
        else if (c->chooseE && c->E > 1) c->E = ceil(c->E) - 1 < 1 ? 1 : ceil(c->E) - 1;
        else if (!tb && c->chooseK && c->K > 1) c->K--;
        else if (!tb && c->chooseL && c->L > LEN_MIN) c->L = LEN_MIN;
        else if (tb && c->E > 0) {
            /* the cost is linear in E <= 1 plus the evaluations' fixed part */
            const double c0 = af_recipe_cost(in, 0, c->L, c->K, c->nev);
            c->E = c0 < c->B && c->cost > c0 ? c->E * (c->B - c0) / (c->cost - c0) * 0.999 : 1e-6;
            if (c->E < 1e-6) c->E = 1e-6;
            c->cost = af_recipe_cost(in, c->E, c->L, c->K, c->nev);
            if (c->cost > c->B) c->over = 1;
            break;
        } else {
            c->over = 1;
            break;
        }
        c->cost = af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, c->K, c->nev);
    }
    if (c->chooseK)
        while (c->K < in->n_layers && af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, c->K + 1, c->nev) <= c->B)
            c->K++, c->cost = af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, c->K, c->nev);
    if (in->n_val > 0 && c->chooseE && c->E > 0 && !c->evals_cut)
        c->nev = c->E < 1 ? 1 : c->E > EVALS_MIN ? (int32_t)ceil(c->E) : EVALS_MIN;
}

/* The evaluation cadence and early stopping (recipe.h), after the budget's fit: c->nev grows to
 * EVALS_PER_EPOCH per epoch (fewer while the evaluations would cost more than EVAL_SHARE of the
 * training); early stopping when at least patience + 2 evaluations remain. */
static void rule_plateau(const af_recipe_in *in, af_recipe *r, choice *c) {
    const unsigned g = in->given;
    if (in->n_val <= 0 || c->evals_cut) return;
    if (!(g & AF_RECIPE_GIVEN_EVAL_EVERY) && c->E > 0) {
        const double train = af_recipe_cost(in, c->E, c->L, c->K, 0);
        const int32_t base = c->nev;
        for (int32_t epe = EVALS_PER_EPOCH; epe >= 2; epe--) {
            int32_t nev = (int32_t)ceil(c->E * epe - 1e-9);
            if (nev < base) nev = base;
            if (af_recipe_eval_cost(in, c->L, c->K, nev) <= EVAL_SHARE * train) {
                c->nev = nev;
                r->evals_per_epoch = epe;
                break;
            }
        }
        r->eval_flops = af_recipe_eval_cost(in, c->L, c->K, c->nev);
        if (r->evals_per_epoch)
            snprintf(r->why_eval, sizeof r->why_eval,
                     "%d evaluations on the validation data (%d per epoch: %.0f%% of the training compute with the "
                     "prefix cache, at most %.0f%%), the best one kept",
                     (int)c->nev, (int)r->evals_per_epoch, 100.0 * r->eval_flops / train, 100.0 * EVAL_SHARE);
        else
            snprintf(r->why_eval, sizeof r->why_eval,
                     "%d evaluations on the validation data (at least %d per run, every epoch when there are more; "
                     "2 per epoch would cost more than %.0f%% of the training), the best one kept",
                     (int)c->nev, EVALS_MIN, 100.0 * EVAL_SHARE);
    }
    /* not with --eval-every given: the evaluations are the caller's (and a resume, whose recorded
       eval-every reads as given, decides as the run it continues: its choices are recorded) */
    if (g & AF_RECIPE_GIVEN_EVAL_EVERY) return;
    const int32_t pat = (g & AF_RECIPE_GIVEN_PATIENCE) ? in->patience : PATIENCE;
    if (c->E <= 0 || c->nev < pat + 2) {
        snprintf(r->why_stop, sizeof r->why_stop, "no early stopping: %d evaluations%s", (int)c->nev,
                 c->E <= 0 ? " over the given --max-steps" : " leave no room for it");
        return;
    }
    r->early_stop = 1;
    r->patience = PATIENCE;
    r->es_threshold = in->causal_lm ? LM_THRESHOLD : 1.0 / (double)in->n_val;
    char thr[96];
    if (g & AF_RECIPE_GIVEN_THRESHOLD) snprintf(thr, sizeof thr, "the given threshold");
    else if (in->causal_lm)
        snprintf(thr, sizeof thr, "%.3g nats of eval loss", r->es_threshold);
    else
        snprintf(thr, sizeof thr, "%.3g of macro-F1 (1/%lld validation samples)", r->es_threshold, (long long)in->n_val);
    snprintf(r->why_stop, sizeof r->why_stop,
             "early stopping: %s evaluations without a gain above %s (transformers' EarlyStoppingCallback, Prechelt "
             "1998); %s",
             (g & AF_RECIPE_GIVEN_PATIENCE) ? "the given --patience" : "2", thr,
             (g & AF_RECIPE_GIVEN_SCHEDULE) ? "the given --schedule"
                                            : "schedule wsd: constant lr, then at the plateau a linear cool-down over a "
                                              "quarter of the steps done and one last evaluation (Hu et al. 2024; Hägele "
                                              "et al. 2024)");
}

/* The reasons of the fitted choices (why_layers, the final why_max_seq_len, the budget's note on
 * the epochs and the evaluations) and what the budget took away (r->gave_up). */
static void explain(const af_recipe_in *in, af_recipe *r, const choice *c) {
    char a[32], b[32], t[160];
    const int32_t nl = in->n_layers;
    if (c->chooseK) {
        if (c->K == nl)
            snprintf(r->why_layers, sizeof r->why_layers, "LoRA on all %d layers: the run fits the compute budget "
                     "(%.2g of %.2g FLOPs)", (int)nl, c->cost, c->B);
        else
            snprintf(r->why_layers, sizeof r->why_layers, "LoRA on the top %d of %d layers: the most the compute budget "
                     "allows (%.2g of %.2g FLOPs; all %d layers: %.2g)", (int)c->K, (int)nl, c->cost, c->B, (int)nl,
                     af_recipe_cost(in, c->E > 0 ? c->E : 1, c->L, nl, c->nev));
    }
    if (c->chooseL) { /* the reason, with the final length */
        char rule[200];
        snprintf(rule, sizeof rule, "%.190s", r->why_max_seq_len);
        int64_t longer = 0;
        for (int64_t i = in->n - 1; i >= 0 && in->sorted_len[i] > c->L; i--) longer++;
        if (c->L != c->L_rule)
            snprintf(r->why_max_seq_len, sizeof r->why_max_seq_len, "max_seq_len %d: the compute budget (the rule gives %d: "
                     "%.190s)", (int)c->L, (int)c->L_rule, rule);
        else
            snprintf(r->why_max_seq_len, sizeof r->why_max_seq_len, "max_seq_len %d: %.190s", (int)c->L, rule);
        size_t l = strlen(r->why_max_seq_len);
        snprintf(r->why_max_seq_len + l, sizeof r->why_max_seq_len - l, "; %s of %s samples (%.1f%%) are longer, "
                 "truncated to their first %d tokens", thousands(a, sizeof a, longer), thousands(b, sizeof b, in->n),
                 100.0 * (double)longer / (double)in->n, (int)c->L);
    }
    if (c->chooseL && c->L != c->L_rule) {
        snprintf(t, sizeof t, "max_seq_len %d instead of %d", (int)c->L, (int)c->L_rule);
        append(r->gave_up, sizeof r->gave_up, t);
    }
    if (c->chooseK && c->K < nl) {
        snprintf(t, sizeof t, "LoRA on %d instead of all %d layers", (int)c->K, (int)nl);
        append(r->gave_up, sizeof r->gave_up, t);
    }
    if (c->chooseE && c->E != c->E_rule) {
        snprintf(t, sizeof t, "%s instead of %s", epochs_text(a, sizeof a, c->E), epochs_text(b, sizeof b, c->E_rule));
        append(r->gave_up, sizeof r->gave_up, t);
        size_t l = strlen(r->why_epochs);
        snprintf(r->why_epochs + l, sizeof r->why_epochs - l, "; the budget: %s", epochs_text(a, sizeof a, c->E));
    }
    if (c->evals_cut == 1) append(r->gave_up, sizeof r->gave_up, "one evaluation (at the end) instead of several");
    if (c->evals_cut == 2) {
        snprintf(t, sizeof t, "no evaluation on the validation data (%.2g FLOPs, more than half the budget): the "
                 "last step is the best", af_recipe_cost(in, 0, c->L, c->K, 1));
        append(r->gave_up, sizeof r->gave_up, t);
        snprintf(r->why_eval, sizeof r->why_eval, "no evaluation: the validation data cost more than half the budget");
    } else if (c->evals_cut == 1)
        snprintf(r->why_eval, sizeof r->why_eval, "1 evaluation on the validation data, at the end (the budget)");
    if (c->over) {
        snprintf(t, sizeof t, "still over the budget (%.2g of %.2g FLOPs): nothing left to give up", c->cost, c->B);
        append(r->gave_up, sizeof r->gave_up, t);
    }
}

int af_recipe_choose(const af_recipe_in *in, af_recipe *r) {
    memset(r, 0, sizeof *r);
    if (!in || in->n <= 0 || !in->sorted_len || in->n_layers < 1 || !(in->flops_token_layer > 0)) return -1;
    const int32_t nl = in->n_layers;
    const int lm = in->causal_lm != 0;
    const unsigned g = in->given;
    /* ---- class statistics ---- */
    int64_t nmin = 0, nmax = 0;
    for (int32_t k = 0; in->class_count && k < in->num_classes; k++) {
        int64_t x = in->class_count[k];
        if (x <= 0) continue;
        if (nmin == 0 || x < nmin) nmin = x;
        if (x > nmax) nmax = x;
    }
    const double imb = nmin > 0 ? (double)nmax / (double)nmin : 1.0;
    const int imbalanced = !lm && !in->multi_label && imb > IMBALANCE_RATIO;
    /* ---- the rules: epochs, class weights, max_seq_len, layers, evaluations ---- */
    choice c;
    memset(&c, 0, sizeof c);
    c.chooseE = !(g & AF_RECIPE_GIVEN_LENGTH);
    c.chooseL = !(g & AF_RECIPE_GIVEN_MAX_SEQ_LEN) && !lm;
    c.chooseK = !(g & AF_RECIPE_GIVEN_LAYERS) && !lm;
    c.E = c.E_rule = rule_epochs(in, r, imbalanced, nmin, imb);
    rule_class_weights(in, r, imbalanced, imb, nmin, nmax);
    c.L = c.L_rule = rule_max_seq_len(in, r, c.chooseL);
    c.K = c.chooseK ? nl : (in->layers < 1 ? 1 : in->layers > nl ? nl : in->layers);
    if (in->n_val > 0) {
        c.nev = c.E > EVALS_MIN ? (int32_t)ceil(c.E) : EVALS_MIN;
        if (!(g & AF_RECIPE_GIVEN_EVAL_EVERY))
            snprintf(r->why_eval, sizeof r->why_eval,
                     "%d evaluations on the validation data (at least %d per run, every epoch when there are more), "
                     "the best one kept", (int)c.nev, EVALS_MIN);
    }
    /* ---- the budget ---- */
    c.B = in->budget_flops > 0 ? in->budget_flops : AF_RECIPE_DEFAULT_FLOPS;
    fit_budget(in, &c);
    r->epochs = c.E;
    r->epochs_rule = c.E_rule;
    r->max_seq_len = c.L;
    r->layers = c.K;
    r->n_evals = c.nev;
    r->cost_flops = c.cost;
    r->budget_flops = c.B;
    r->warmup_ratio = WARMUP_RATIO;
    if (!(g & AF_RECIPE_GIVEN_WARMUP))
        snprintf(r->why_warmup, sizeof r->why_warmup, "warm-up %.0f%% of the steps (RoBERTa's fine-tuning recipe, Liu et "
                 "al. 2019)", 100.0 * WARMUP_RATIO);
    explain(in, r, &c);
    rule_plateau(in, r, &c); /* after the budget's reasons: they cost the budget's evaluations */
    r->n_evals = c.nev;
    return 0;
}

int32_t af_recipe_lm_max_seq_len(const int32_t *sorted_len, int64_t n, int32_t max_positions, int64_t mem_tokens,
                                 int32_t batch, int64_t *n_longer, char *why, size_t cap) {
    if (n_longer) *n_longer = 0;
    if (why && cap) why[0] = 0;
    if (!sorted_len || n < 1 || batch < 1) return 0;
    int64_t i99 = (int64_t)ceil(0.99 * (double)n) - 1;
    const int32_t p99 = sorted_len[i99 < 0 ? 0 : i99 > n - 1 ? n - 1 : i99];
    int32_t L = round_up(p99 < 1 ? 1 : p99, LEN_STEP);
    const char *capped = "";
    if (max_positions > 0 && L > max_positions) L = max_positions, capped = ", capped by the model's context";
    if (mem_tokens > 0 && (int64_t)L * batch > mem_tokens) {
        int64_t Lm = mem_tokens / batch / LEN_STEP * LEN_STEP;
        if (Lm < LEN_STEP) Lm = LEN_STEP;
        if (Lm < L) L = (int32_t)Lm, capped = ", capped by the memory limit";
    }
    /* examples longer than L: binary search for the first length > L */
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted_len[mid] > L) hi = mid;
        else lo = mid + 1;
    }
    if (n_longer) *n_longer = n - lo;
    if (why && cap) {
        char a[32], b[32];
        snprintf(why, cap, "max_seq_len %d: the p99 token length %d rounded up to a multiple of %d%s (%s of %s "
                 "examples longer; the longest %d)", (int)L, (int)p99, LEN_STEP, capped, thousands(a, sizeof a, n - lo),
                 thousands(b, sizeof b, n), (int)sorted_len[n - 1]);
    }
    return L;
}
