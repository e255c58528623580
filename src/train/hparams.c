/*
 * hparams.c — hyper-parameter diagnostics (rules and sources in hparams.h).
 */
#include "train/hparams.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *af_diag_severity_name(af_diag_severity s) {
    return s == AF_DIAG_ERROR ? "error" : s == AF_DIAG_WARN ? "warn" : "info";
}

void af_diag_list_free(af_diag_list *l) {
    if (!l) return;
    free(l->items);
    memset(l, 0, sizeof *l);
}

int af_diag_has_error(const af_diag_list *l) {
    for (int32_t i = 0; i < l->n; i++)
        if (l->items[i].severity == AF_DIAG_ERROR) return 1;
    return 0;
}

int32_t af_diag_find(const af_diag_list *l, const char *code) {
    for (int32_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].code, code)) return i;
    return -1;
}

void af_diag_print(const af_diag_list *l, FILE *fp) {
    for (int32_t i = 0; i < l->n; i++) {
        const af_diag *d = &l->items[i];
        fprintf(fp, "%-5s [%s] %s", af_diag_severity_name(d->severity), d->code, d->message);
        if (d->recommendation[0]) fprintf(fp, " -> %s", d->recommendation);
        fprintf(fp, "\n");
    }
}

/* Adds one diagnostic; `rec` may be NULL. Returns 0 on allocation failure. */
static int add(af_diag_list *l, af_diag_severity sev, const char *code, const char *rec, const char *fmt, ...)
    AF_PRINTF(5, 6);
static int add(af_diag_list *l, af_diag_severity sev, const char *code, const char *rec, const char *fmt, ...) {
    if (l->n == l->cap) {
        int32_t nc = l->cap ? l->cap * 2 : 8;
        af_diag *p = af_realloc_array(l->items, (size_t)nc, sizeof *p);
        if (!p) return 0;
        l->items = p;
        l->cap = nc;
    }
    af_diag *d = &l->items[l->n++];
    memset(d, 0, sizeof *d);
    d->severity = sev;
    snprintf(d->code, sizeof d->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->message, sizeof d->message, fmt, ap);
    va_end(ap);
    if (rec) snprintf(d->recommendation, sizeof d->recommendation, "%s", rec);
    return 1;
}

/* Compact number: 2e-4, 1.5e-3, 0.3, 16, 2.5 ("%g" between 0.01 and 1e4, else mantissa e exponent). */
static const char *num(char *buf, size_t cap, double v) {
    double a = fabs(v);
    if (v == 0 || (a >= 0.01 && a < 1e4) || !isfinite(v)) {
        snprintf(buf, cap, "%g", v);
        return buf;
    }
    int e = (int)floor(log10(a));
    double m = v / pow(10, e);
    if (fabs(m) >= 9.9995) m /= 10, e++;
    snprintf(buf, cap, "%.3ge%d", m, e);
    return buf;
}

static void model_size(char *buf, size_t cap, int64_t n) {
    if (n <= 0)
        snprintf(buf, cap, "model of unknown size (assumed <= 13B parameters)");
    else if (n < 1000000000)
        snprintf(buf, cap, "%.0fM-parameter model", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.1fB-parameter model", (double)n / 1e9);
}

static const char *cls(const af_train_config *c, int32_t k, char *buf, size_t cap) {
    if (c->label_names && k >= 0 && k < c->num_classes && c->label_names[k]) return c->label_names[k];
    snprintf(buf, cap, "%d", (int)k);
    return buf;
}

#define ADD(...)                                                                                \
    do {                                                                                        \
        if (!add(out, __VA_ARGS__)) return af_fail(AF_ERR_NOMEM, "hparams: out of memory");     \
    } while (0)

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Σ min(len, L)² over the sorted lengths. */
static double attn_total(const af_data_stats *s, int32_t L) {
    double t = 0;
    for (int32_t i = 0; i < s->n; i++) {
        double x = s->sorted_len[i] < L ? s->sorted_len[i] : L;
        t += x * x;
    }
    return t;
}

/* The effective batch: --batch x --grad-accum (0 when either is invalid). */
static int64_t effective_batch(const af_train_config *c) {
    return (int64_t)(c->batch_size > 0 ? c->batch_size : 0) * (c->grad_accum > 0 ? c->grad_accum : 0);
}

/* The errors: values and combinations a run cannot start with, the data's classes against the run's.
 * *no_stats: 1 when the data have no (labelled) sample, so the data rules cannot run. */
static af_status check_invalid(const af_train_config *c, const af_data_stats *s, af_diag_list *out, int *no_stats) {
    char a[32], b[32], r[256];
    *no_stats = 0;
    if (!(c->lr > 0) || !isfinite(c->lr))
        ADD(AF_DIAG_ERROR, "lr-invalid", "use --lr 2e-4", "learning rate %s must be a finite number > 0",
            num(a, sizeof a, c->lr));
    /* combinations that cannot be right: one place, for check and train alike */
    if (c->lr_decays && c->lr > 0 && isfinite(c->lr) && c->lr_min > c->lr)
        ADD(AF_DIAG_ERROR, "lr-min-above-lr", "give --lr-min below --lr (e.g. 0 or lr/10)",
            "--lr-min %s is above --lr %s: the schedule would climb to %s instead of decaying",
            num(a, sizeof a, c->lr_min), num(b, sizeof b, c->lr), num(r, sizeof r, c->lr_min));
    if (c->max_positions > 0 && s && s->n > 0) {
        int32_t longest = s->len_max < c->max_seq_len ? s->len_max : c->max_seq_len;
        if (longest > c->max_positions) {
            snprintf(r, sizeof r, "use --max-seq-len %d", (int)c->max_positions);
            ADD(AF_DIAG_ERROR, "seq-len-positions", r,
                "max_seq_len %d lets samples of %d tokens through, beyond the model's %d positions (context_length): "
                "%d sample(s) would train on positions the model never saw",
                (int)c->max_seq_len, (int)longest, (int)c->max_positions,
                (int)af_data_stats_count_longer(s, c->max_positions));
        }
    }
    if (c->patience > 0 && !c->has_val)
        ADD(AF_DIAG_ERROR, "patience-no-val", "give --val FILE or --val-split 0.1, or drop --patience",
            "--patience %lld needs validation data: without it early stopping never happens", (long long)c->patience);
    if (c->eval_every > 0 && !c->has_val)
        ADD(AF_DIAG_WARN, "eval-no-val", "give --val FILE or --val-split 0.1",
            "--eval-every %lld has no validation data to evaluate on", (long long)c->eval_every);
    if (c->total_steps > 0 && c->warmup_steps >= c->total_steps)
        ADD(AF_DIAG_WARN, "warmup-long", "use a shorter --warmup (default 6%)",
            "the warm-up (%lld steps) is as long as the whole run (%lld steps): the learning rate never reaches --lr",
            (long long)c->warmup_steps, (long long)c->total_steps);
    if (c->batch_size < 1)
        ADD(AF_DIAG_ERROR, "batch-invalid", "use --batch 8", "batch size %d must be >= 1", (int)c->batch_size);
    if (c->grad_accum < 1)
        ADD(AF_DIAG_ERROR, "accum-invalid", "use --grad-accum 1 or more", "gradient accumulation %d must be >= 1",
            (int)c->grad_accum);
    if (c->lora_r < 1)
        ADD(AF_DIAG_ERROR, "rank-invalid", "use --lora-r 8", "LoRA rank r = %d must be >= 1", (int)c->lora_r);
    if (!(c->lora_alpha > 0) || !isfinite(c->lora_alpha))
        ADD(AF_DIAG_ERROR, "alpha-invalid", "use --lora-alpha 2r", "lora_alpha %s must be a finite number > 0",
            num(a, sizeof a, c->lora_alpha));
    if (c->max_seq_len < 1)
        ADD(AF_DIAG_ERROR, "seq-len-invalid", "use --max-seq-len 512", "max_seq_len %d must be >= 1",
            (int)c->max_seq_len);
    if (!(c->epochs > 0 && isfinite(c->epochs)) && c->max_steps <= 0)
        ADD(AF_DIAG_ERROR, "length-invalid", "use --epochs 3", "training length is zero: epochs %s, max_steps %lld",
            num(a, sizeof a, c->epochs), (long long)c->max_steps);
    if (c->causal_lm) {
        if (!s || s->n == 0) {
            ADD(AF_DIAG_ERROR, "data-empty", "check the training file", "the training data have no sample");
            *no_stats = 1;
            return AF_OK;
        }
    } else if (c->num_classes < 2)
        ADD(AF_DIAG_ERROR, "classes-invalid", "give a label list with >= 2 names (--labels a,b)",
            "classification needs at least 2 classes, got %d", (int)c->num_classes);
    if (!c->causal_lm && (!s || s->n == 0 || s->n_labelled == 0)) {
        ADD(AF_DIAG_ERROR, "data-empty", "check the training file and its label field",
            "the training data have no labelled sample");
        *no_stats = 1; /* the data rules need statistics */
        return AF_OK;
    }
    if (s->num_classes > c->num_classes && c->num_classes >= 2)
        ADD(AF_DIAG_ERROR, "labels-range", "make --labels / the model head match the data",
            "the training data use %d classes but the run is configured for %d (labels out of range)",
            (int)s->num_classes, (int)c->num_classes);
    return AF_OK;
}

/* The optimisation against common practice: the learning rate and the effective batch for the
 * model's size (QLoRA), alpha = 2r, gradient clipping. */
static af_status check_optimisation(const af_train_config *c, af_diag_list *out) {
    char a[32], b[32], r[256], sz[80];
    int64_t P = c->n_model_params;
    model_size(sz, sizeof sz, P);
    /* ---- learning rate vs model size (QLoRA) ---- */
    double rec_lr = P > 13000000000ll ? 1e-4 : 2e-4;
    if (!c->preference && c->lr > 0 && isfinite(c->lr)) {
        double q = c->lr / rec_lr;
        if (q > 3 || q < 1.0 / 3) {
            snprintf(r, sizeof r, "use --lr %s", num(b, sizeof b, rec_lr));
            ADD(AF_DIAG_WARN, "lr-model-size", r, "lr %s is %.1fx %s the %s recommended for a %s (QLoRA, Dettmers "
                "et al. 2023)", num(a, sizeof a, c->lr), q > 1 ? q : 1 / q, q > 1 ? "above" : "below",
                num(b, sizeof b, rec_lr), sz);
        }
    }
    /* ---- effective batch (QLoRA: 16 up to 13B, 32 up to 33B, 64 above) ---- */
    int64_t eff = effective_batch(c);
    int64_t rec_b = P > 33000000000ll ? 64 : P > 13000000000ll ? 32 : 16;
    if (c->step_samples > 0 && eff > 0) { /* packed causal LM: samples per step, not --batch x --grad-accum */
        const double es = c->step_samples, per_mb = es / (double)c->grad_accum;
        if (es * 2 < (double)rec_b || es > (double)rec_b * 2) {
            int64_t k = (int64_t)floor((double)rec_b / (per_mb > 0 ? per_mb : 1) + 0.5);
            if (k >= 1)
                snprintf(r, sizeof r, "use --grad-accum %lld (~%.0f samples per step)", (long long)k, per_mb * (double)k);
            else
                snprintf(r, sizeof r, "use --grad-accum 1 and a smaller --batch (fewer tokens per packed micro-batch)");
            ADD(AF_DIAG_WARN, "effective-batch", r, "effective batch ~%.1f samples per step (packed micro-batches of "
                "%lld tokens = batch %d x max_seq_len %d, ~%.1f samples each, x accumulation %d) is far from the %lld "
                "used by QLoRA (Dettmers et al. 2023) for a %s", es, (long long)c->batch_size * c->max_seq_len,
                (int)c->batch_size, (int)c->max_seq_len, per_mb, (int)c->grad_accum, (long long)rec_b, sz);
        }
    } else if (eff > 0 && (eff * 2 < rec_b || eff > rec_b * 2)) {
        if (c->batch_size <= rec_b) {
            int64_t k = (rec_b + c->batch_size / 2) / c->batch_size;
            if (k < 1) k = 1;
            snprintf(r, sizeof r, "use --grad-accum %lld (batch %d x %lld = %lld)", (long long)k, (int)c->batch_size,
                     (long long)k, (long long)(k * c->batch_size));
        } else {
            snprintf(r, sizeof r, "use --batch %lld --grad-accum 1", (long long)rec_b);
        }
        ADD(AF_DIAG_WARN, "effective-batch", r, "effective batch %lld (batch %d x accumulation %d) is far from the "
            "%lld used by QLoRA (Dettmers et al. 2023) for a %s", (long long)eff, (int)c->batch_size,
            (int)c->grad_accum, (long long)rec_b, sz);
    }
    /* ---- alpha = 2r ---- */
    if (c->lora_r >= 1 && c->lora_alpha > 0 && isfinite(c->lora_alpha)) {
        double q = c->lora_alpha / c->lora_r;
        double scale = c->use_rslora ? c->lora_alpha / sqrt((double)c->lora_r) : q;
        if (fabs(q - 2) > 1e-9) {
            snprintf(r, sizeof r, "use --lora-alpha %d", 2 * (int)c->lora_r);
            ADD(q >= 0.5 && q <= 8 ? AF_DIAG_INFO : AF_DIAG_WARN, "lora-alpha", r,
                "lora_alpha %s = %.2g x r (r = %d; scale %s = %.3g); alpha = 2r is common practice (Raschka 2023, "
                "\"Practical Tips for Finetuning LLMs Using LoRA\")", num(a, sizeof a, c->lora_alpha), q,
                (int)c->lora_r, c->use_rslora ? "alpha/sqrt(r)" : "alpha/r", scale);
        }
    }
    /* ---- gradient clipping ---- */
    if (!(c->max_grad_norm > 0))
        ADD(AF_DIAG_WARN, "grad-clip", "use --max-grad-norm 1.0 (QLoRA used 0.3)",
            "gradient clipping is off (max_grad_norm %s); one bad batch can blow up the adapters",
            num(a, sizeof a, c->max_grad_norm));
    return AF_OK;
}

/* max_seq_len against the data's token lengths: far above the p99 (attention and memory wasted),
 * below the p95 (samples truncated); as information when the automatic recipe chose it. */
static af_status check_seq_len(const af_train_config *c, const af_data_stats *s, af_diag_list *out) {
    char r[256];
    int32_t L = c->max_seq_len;
    /* the recipe's reason, up to its first ';' (the rest repeats the truncation count) */
    const char *why = c->max_seq_len_why;
    const int why_n = why ? (int)strcspn(why, ";") : 0;
    if (L >= 1 && s->len_p99 >= 1 && (int64_t)L > 2 * (int64_t)s->len_p99 && round_up(s->len_p99, 64) < L) {
        int64_t L2 = round_up(s->len_p99, 64);
        double worst = L < s->len_max ? L : s->len_max, worst2 = L2 < s->len_max ? (double)L2 : s->len_max;
        double t1 = attn_total(s, L), t2 = attn_total(s, (int32_t)L2);
        int32_t cut = af_data_stats_count_longer(s, (int32_t)L2);
        snprintf(r, sizeof r, "%s --max-seq-len %lld", c->max_seq_len_why ? "to change it:" : "use", (long long)L2);
        ADD(c->max_seq_len_why ? AF_DIAG_INFO : AF_DIAG_WARN, "seq-len-long", r,
            "%s%.*s%smax_seq_len %d is %.1fx the p99 token length %d; with %lld (p99 rounded up to a multiple of 64) the "
            "longest sample's attention cost (∝ L²) is %.1fx lower and its activation memory (∝ L) %.1fx lower, "
            "total attention cost over the data %.2fx lower, %d sample(s) (%.1f%%) truncated%s",
            why ? "chosen by the automatic recipe (" : "", why_n, why ? why : "", why ? "): " : "", (int)L,
            (double)L / s->len_p99, (int)s->len_p99, (long long)L2, (worst / worst2) * (worst / worst2),
            worst / worst2, t2 > 0 ? t1 / t2 : 1.0, (int)cut, 100.0 * cut / s->n,
            L >= s->len_max ? " (now the limit binds on no sample: packed batches have no padding)" : "");
    }
    if (L >= 1 && L < s->len_p95) {
        int32_t cut = af_data_stats_count_longer(s, L);
        if (c->max_seq_len_why) /* the recipe's own choice: say what it chose and why, not "override it" */
            snprintf(r, sizeof r, "--max-seq-len %lld would keep them whole (longer steps)",
                     (long long)round_up(s->len_p95, 64));
        else
            snprintf(r, sizeof r, "use --max-seq-len %lld if memory allows", (long long)round_up(s->len_p95, 64));
        ADD(c->max_seq_len_why ? AF_DIAG_INFO : AF_DIAG_WARN, "seq-len-short", r,
            "%s%.*s%smax_seq_len %d is below the p95 token length %d: %d of %d samples (%.1f%%) are truncated "
            "(p99 %d, max %d)", why ? "chosen by the automatic recipe (" : "", why_n, why ? why : "", why ? "): " : "",
            (int)L, (int)s->len_p95,
            (int)cut, (int)s->n, 100.0 * cut / s->n, (int)s->len_p99, (int)s->len_max);
    }
    return AF_OK;
}

/* The classes and texts of the data: empty classes, imbalance against the epochs and the class
 * weights, empty texts. */
static af_status check_classes(const af_train_config *c, const af_data_stats *s, af_diag_list *out) {
    char r[256], n1[64], n2[64];
    const int64_t eff = effective_batch(c);
    if (s->n_empty_classes > 0 && s->num_classes <= c->num_classes) {
        int32_t k = 0;
        while (k < s->num_classes && s->class_count[k] > 0) k++;
        ADD(AF_DIAG_WARN, "class-empty", "add samples of that class or drop it from the label list",
            "%d class(es) have no training sample (first: '%s'); the head cannot learn them",
            (int)s->n_empty_classes, cls(c, k, n1, sizeof n1));
    }
    int weighted = c->class_weights && strcmp(c->class_weights, "uniform") != 0;
    if (s->min_class >= 0 && s->imbalance > 5) {
        int64_t nmin = s->class_count[s->min_class], nmax = s->class_count[s->max_class];
        double ep = c->epochs;
        if (c->max_steps > 0 && eff > 0) ep = (double)c->max_steps * (double)eff / s->n;
        if (ep > 0 && ep < 2 && eff > 0) {
            double updates = ceil(ep * s->n / (double)eff);
            double seen = ep * (double)nmin;
            snprintf(r, sizeof r, "train >= 2 epochs (--epochs 3)%s",
                     weighted ? "" : " and/or use --class-weights sqrt-inverse");
            ADD(AF_DIAG_WARN, "epochs-imbalance", r,
                "class imbalance %.1f:1 ('%s' %lld vs '%s' %lld samples) with %.2g epoch(s): the minority class is "
                "seen only ~%.0f times over ~%.0f optimizer updates", s->imbalance, cls(c, s->max_class, n1, sizeof n1),
                (long long)nmax, cls(c, s->min_class, n2, sizeof n2), (long long)nmin, ep, seen, updates);
        }
        if (!weighted)
            ADD(AF_DIAG_INFO, "class-weights", "consider --class-weights sqrt-inverse (or inverse-freq)",
                "class imbalance %.1f:1 with uniform class weights: the loss favours '%s'", s->imbalance,
                cls(c, s->max_class, n1, sizeof n1));
    }
    if (s->n_empty > 0)
        ADD(AF_DIAG_INFO, "empty-texts", "check the input field of those lines",
            "%d sample(s) have an empty text (each stands as one BOS/EOS token)", (int)s->n_empty);
    return AF_OK;
}

af_status af_hparams_check(const af_train_config *c, const af_data_stats *s, af_diag_list *out) {
    int no_stats = 0;
    AF_TRY(check_invalid(c, s, out, &no_stats));
    if (no_stats) return AF_OK;
    AF_TRY(check_optimisation(c, out));
    AF_TRY(check_seq_len(c, s, out));
    return check_classes(c, s, out);
}
