/*
 * lm_data.c — causal-LM (SFT) data sets: af_lm_dataset_read and its report (include/afinar.h,
 * "Causal-LM data sets"; docs/FORMATS.md §10). Parsing: formats/lm_jsonl.c; rendering, sequence
 * layout and loss targets: tokenizer/chat.c; this file drives them, tokenizes in parallel,
 * truncates, drops examples without a target and builds the af_dataset (train/data.h).
 */
#include "train/data.h"

#include "formats/lm_jsonl.h"
#include "formats/pref_jsonl.h"
#include "kernels/ctx.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

void af_lm_data_opts_init(af_lm_data_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_seq_len = 1024;
}

/* Re-raise the current thread's error message with a "PREFIX: " in front (same status). */
static af_status prefixed(af_status st, const char *prefix) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", af_last_error());
    return af_fail(st, "%s: %s", prefix, msg);
}

/* Examples [i0, i1) tokenized (each writes its own slots). */
typedef struct lm_tok_job {
    const af_tokenizer *tok;
    af_chat_doc *docs;
    int32_t **ids;
    uint8_t **msk;
    size_t *nids;
    af_status *sts;
} lm_tok_job;

static void lm_tok_range(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const lm_tok_job *J = arg;
    for (int64_t i = i0; i < i1; i++) {
        J->sts[i] = af_chat_doc_tokenize(J->tok, &J->docs[i], &J->ids[i], &J->msk[i], &J->nids[i]);
        af_chat_doc_free(&J->docs[i]);
    }
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Preference pairs (examples 2i chosen, 2i + 1 rejected): a pair with a side dropped (keep[] 2 or 3)
 * is dropped whole (its kept side becomes 2); the pair diagnostics into *r. Prompt tokens of a side:
 * those before its first target token. */
static void pref_pairs(const af_lm_corpus *c, int32_t *const *ids, uint8_t *const *msk, const size_t *nids, int32_t L,
                       uint8_t *keep, af_pref_data_report *r) {
    memset(r, 0, sizeof *r);
    const int32_t np = c->n / 2;
    int32_t *plen = malloc(sizeof(int32_t) * (size_t)(np ? np : 1));
    double sum_c = 0, sum_r = 0;
    r->n_read = np;
    for (int32_t i = 0; i < np; i++) {
        const int32_t a = 2 * i, b = 2 * i + 1;
        size_t first = nids[a];
        for (size_t j = 1; j < nids[a]; j++)
            if (msk[a][j]) {
                first = j;
                break;
            }
        if (plen) plen[i] = (int32_t)(first > INT32_MAX ? INT32_MAX : first);
        int64_t tc = 0, tr = 0;
        for (size_t j = 1; j < nids[a]; j++) tc += msk[a][j];
        for (size_t j = 1; j < nids[b]; j++) tr += msk[b][j];
        sum_c += (double)tc, sum_r += (double)tr;
        if (tc > 2 * tr || tr > 2 * tc) r->n_length_far++;
        if (nids[a] == nids[b] && !memcmp(ids[a], ids[b], sizeof(int32_t) * nids[a])) {
            r->n_identical++;
            if (!r->first_identical_line) r->first_identical_line = c->ex[a].line_no;
        }
        if (keep[a] != 1 || keep[b] != 1) {
            if (first >= (size_t)L) r->n_prompt_too_long++;
            else r->n_dropped_other++;
            if (!r->first_dropped_line) r->first_dropped_line = c->ex[a].line_no;
            if (keep[a] == 1) keep[a] = 2;
            if (keep[b] == 1) keep[b] = 2;
            continue;
        }
        r->n_kept++;
        r->n_truncated += nids[a] > (size_t)L || nids[b] > (size_t)L;
    }
    r->chosen_tokens_mean = np ? sum_c / np : 0;
    r->rejected_tokens_mean = np ? sum_r / np : 0;
    if (plen && np) {
        qsort(plen, (size_t)np, sizeof *plen, cmp_i32);
        r->prompt_p50 = plen[(np + 1) / 2 - 1];
        r->prompt_max = plen[np - 1];
    }
    free(plen);
}

/* The per-example work of one read: rendered documents, token ids and loss masks, statuses, and
 * the verdict of each example (1 kept; dropped: 2 every target cut, 3 no target; 0 once counted). */
typedef struct lm_work {
    int32_t n;
    af_chat_doc *docs;
    int32_t **ids;
    uint8_t **msk;
    size_t *nids;
    af_status *sts;
    uint8_t *keep;
} lm_work;

/* What the kept examples hold and why the others were dropped. */
typedef struct lm_counts {
    int32_t kept, cut, empty, first_drop, ntrunc;
    int64_t total, tgt_kept, tgt_cut;
} lm_counts;

static af_status work_alloc(lm_work *W, int32_t n, const char *path) {
    memset(W, 0, sizeof *W);
    W->n = n;
    W->docs = calloc((size_t)n, sizeof *W->docs);
    W->ids = calloc((size_t)n, sizeof *W->ids);
    W->msk = calloc((size_t)n, sizeof *W->msk);
    W->nids = calloc((size_t)n, sizeof *W->nids);
    W->sts = calloc((size_t)n, sizeof *W->sts);
    W->keep = calloc((size_t)n, 1);
    if (!W->docs || !W->ids || !W->msk || !W->nids || !W->sts || !W->keep)
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    return AF_OK;
}

static void work_free(lm_work *W) {
    if (W->docs)
        for (int32_t i = 0; i < W->n; i++) af_chat_doc_free(&W->docs[i]);
    if (W->ids)
        for (int32_t i = 0; i < W->n; i++) free(W->ids[i]);
    if (W->msk)
        for (int32_t i = 0; i < W->n; i++) free(W->msk[i]);
    free(W->docs), free(W->ids), free(W->msk), free(W->nids), free(W->sts), free(W->keep);
}

/* The options checked: max_seq_len >= 1, loss_on auto or all (*all; not for preference pairs). */
static af_status check_lm_opts(const char *path, const af_lm_data_opts *o, int pref, int *all) {
    if (o->max_seq_len < 1)
        return af_fail(AF_ERR_INVALID_ARG, "%s: max_seq_len must be >= 1 (got %d)", path, (int)o->max_seq_len);
    *all = 0;
    if (o->loss_on && strcmp(o->loss_on, "auto")) {
        if (strcmp(o->loss_on, "all"))
            return af_fail(AF_ERR_INVALID_ARG, "%s: loss_on '%.40s': expected auto or all", path, o->loss_on);
        if (pref)
            return af_fail(AF_ERR_INVALID_ARG, "%s: loss_on all: a preference pair compares the completions only "
                           "(the prompt is shared)", path);
        *all = 1;
    }
    return AF_OK;
}

/* Render every example sequentially (cheap; errors name the line), then tokenize them in parallel
 * into W (af_chat_doc_tokenize is thread-safe; statuses are collected per example and re-reported
 * on this thread: af_fail's message is thread-local; each example's ids depend on it alone). */
static af_status render_tokenize(const af_ctx *ctx, const af_tokenizer *tok, af_chat_family fam,
                                 const af_lm_corpus *c, const char *path, lm_work *W) {
    for (int32_t i = 0; i < c->n; i++) {
        const af_lm_example *e = &c->ex[i];
        af_status st = AF_OK;
        switch (e->format) {
        case AF_LM_TEXT: st = af_chat_doc_plain(tok, NULL, 0, e->text, e->text_len, &W->docs[i]); break;
        case AF_LM_PROMPT_COMPLETION:
            st = af_chat_doc_plain(tok, e->text, e->text_len, e->completion, e->completion_len, &W->docs[i]);
            break;
        case AF_LM_MESSAGES:
        case AF_LM_CHAT_PC:
            st = af_chat_render(tok, fam, e->msgs, e->n_msgs, e->n_prompt_msgs, 0, &W->docs[i]);
            break;
        }
        if (st != AF_OK) {
            char where[400];
            snprintf(where, sizeof where, "%s:%d: field '%s'", path, (int)e->line_no,
                     e->format == AF_LM_CHAT_PC ? "prompt/completion" : e->format == AF_LM_MESSAGES ? "messages" : "text");
            return prefixed(st, where);
        }
    }
    lm_tok_job J = {tok, W->docs, W->ids, W->msk, W->nids, W->sts};
    af_threadpool_run(ctx->pool, ctx->n_threads, c->n, 4, lm_tok_range, &J);
    for (int32_t i = 0; i < c->n; i++)
        if (W->sts[i] != AF_OK)
            return af_fail(W->sts[i], "%s:%d: tokenization failed (%s)", path, (int)c->ex[i].line_no,
                           af_status_name(W->sts[i]));
    return AF_OK;
}

/* The loss masks (no loss on the first token; every token with loss_on all) and each example's
 * verdict in W->keep from its targets within the first L tokens. */
static void mark_targets(lm_work *W, int32_t L, int all) {
    for (int32_t i = 0; i < W->n; i++) {
        uint8_t *m = W->msk[i];
        size_t len = W->nids[i], k = len < (size_t)L ? len : (size_t)L;
        if (len) m[0] = 0;
        int64_t t_all = 0, t_in = 0;
        for (size_t j = 1; j < len; j++) {
            if (all) m[j] = 1;
            t_all += m[j];
            if (j < k) t_in += m[j];
        }
        W->keep[i] = t_in > 0 ? 1 : t_all > 0 ? 2 : 3; /* 1 kept; dropped: 2 every target cut, 3 none */
    }
}

/* The kept examples' tokens and targets, and the dropped ones by reason, into *k (W->keep: 1 kept,
 * else 0 afterwards). */
static void count_kept(const af_lm_corpus *c, lm_work *W, int32_t L, lm_counts *k) {
    memset(k, 0, sizeof *k);
    for (int32_t i = 0; i < W->n; i++) {
        if (W->keep[i] != 1) {
            if (W->keep[i] == 3) k->empty++;
            else k->cut++;
            if (!k->first_drop) k->first_drop = c->ex[i].line_no;
            W->keep[i] = 0;
            continue;
        }
        const size_t len = W->nids[i], kk = len < (size_t)L ? len : (size_t)L;
        int64_t t_all = 0, t_in = 0;
        for (size_t j = 1; j < len; j++) t_all += W->msk[i][j], t_in += j < kk ? W->msk[i][j] : 0;
        k->kept++;
        k->total += (int64_t)kk;
        k->tgt_kept += t_in;
        k->tgt_cut += t_all - t_in;
        k->ntrunc += len > (size_t)L;
    }
}

/* The kept examples, cut to L tokens, into ds. Errors: AF_ERR_NOMEM. */
static af_status fill_dataset(af_dataset *ds, const af_lm_corpus *c, const lm_work *W, const lm_counts *k, int32_t L,
                              int pairs, const char *path) {
    ds->n = k->kept;
    ds->pairs = pairs;
    ds->max_seq_len = L;
    ds->tok_off = calloc((size_t)k->kept + 1, sizeof *ds->tok_off);
    ds->orig_len = malloc((size_t)k->kept * sizeof *ds->orig_len);
    ds->line_no = malloc((size_t)k->kept * sizeof *ds->line_no);
    ds->tokens = malloc((size_t)k->total * sizeof *ds->tokens);
    ds->target_mask = malloc((size_t)k->total);
    ds->path = strdup(path);
    if (!ds->tok_off || !ds->orig_len || !ds->line_no || !ds->tokens || !ds->target_mask || !ds->path)
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    for (int32_t i = 0, s = 0; i < W->n; i++) {
        if (!W->keep[i]) continue;
        size_t kk = W->nids[i] < (size_t)L ? W->nids[i] : (size_t)L;
        int64_t o0 = ds->tok_off[s];
        memcpy(ds->tokens + o0, W->ids[i], kk * sizeof *ds->tokens);
        memcpy(ds->target_mask + o0, W->msk[i], kk);
        ds->orig_len[s] = W->nids[i] > INT32_MAX ? INT32_MAX : (int32_t)W->nids[i];
        ds->line_no[s] = c->ex[i].line_no;
        ds->tok_off[s + 1] = o0 + (int64_t)kk;
        s++;
    }
    return AF_OK;
}

/* The reader's report (af_lm_data_report) of a read that kept k's examples into ds. Errors: those of
 * af_data_stats_compute. */
static af_status fill_report(af_lm_data_report *r, const af_lm_corpus *c, const af_dataset *ds, const lm_counts *k,
                             int32_t L, int all, const char *format, const char *chat_template) {
    memset(r, 0, sizeof *r);
    r->format = format;
    r->chat_template = chat_template;
    r->loss_on = all ? "all" : c->format == AF_LM_TEXT ? "all"
               : c->format == AF_LM_PROMPT_COMPLETION ? "completion" : "assistant";
    r->max_seq_len = L;
    r->n_read = c->n;
    r->n_kept = k->kept;
    r->n_dropped_cut = k->cut;
    r->n_dropped_empty = k->empty;
    r->first_dropped_line = k->first_drop;
    r->n_truncated = k->ntrunc;
    r->n_tokens = k->total;
    r->n_target_tokens = k->tgt_kept;
    r->n_target_cut = k->tgt_cut;
    af_data_stats s;
    AF_TRY(af_data_stats_compute(ds, &s));
    r->len_min = s.len_min, r->len_p50 = s.len_p50, r->len_p95 = s.len_p95, r->len_p99 = s.len_p99;
    r->len_max = s.len_max, r->len_mean = s.len_mean;
    af_data_stats_free(&s);
    return AF_OK;
}

/* The one causal-LM reader: `pref` NULL reads `path` as causal-LM data (af_lm_dataset_read), else
 * as preference pairs (af_pref_dataset_read: a pair is kept or dropped whole, *pref filled). */
static af_status lm_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                         af_pref_data_report *pref, af_dataset **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "lm data: NULL out");
    *out = NULL;
    af_lm_data_opts def;
    if (!o) {
        af_lm_data_opts_init(&def);
        o = &def;
    }
    if (!path || !model) return af_fail(AF_ERR_INVALID_ARG, "lm data: NULL %s", path ? "model" : "path");
    int all = 0;
    AF_TRY(check_lm_opts(path, o, pref != NULL, &all));
    const af_tokenizer *tok = af_model_tokenizer(model);
    if (!tok) return af_fail(AF_ERR_INVALID_ARG, "%s: the model has no tokenizer", path);
    if (!ctx) ctx = af_ctx_default();
    af_chat_family fam = AF_CHAT_NONE;
    if (o->chat_template && strcmp(o->chat_template, "auto")) /* check the name before reading */
        AF_TRY(af_chat_family_of(tok, o->chat_template, &fam));

    af_lm_corpus *c = NULL;
    af_pref_format pfmt = AF_PREF_EXPLICIT;
    if (pref) AF_TRY(af_pref_corpus_read(path, -1, o->max_line_bytes, &c, &pfmt));
    else AF_TRY(af_lm_corpus_read(path, o->max_line_bytes, &c));
    int chat = c->format == AF_LM_MESSAGES || c->format == AF_LM_CHAT_PC;
    af_status st = AF_OK;
    if (chat && fam == AF_CHAT_NONE && (st = af_chat_family_of(tok, o->chat_template, &fam)) != AF_OK) {
        st = prefixed(st, path);
        af_lm_corpus_free(c);
        return st;
    }
    const int32_t n = c->n, L = o->max_seq_len;
    lm_work W;
    lm_counts k;
    af_dataset *ds = calloc(1, sizeof *ds);
    st = work_alloc(&W, n, path);
    if (st == AF_OK && !ds) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    if (st == AF_OK) st = render_tokenize(ctx, tok, fam, c, path, &W);
    if (st == AF_OK) {
        mark_targets(&W, L, all);
        if (pref) pref_pairs(c, W.ids, W.msk, W.nids, L, W.keep, pref);
        count_kept(c, &W, L, &k);
        if (k.kept == 0)
            st = af_fail(AF_ERR_FORMAT, "%s: no example left: all %d were dropped (%d with every target token beyond "
                         "max_seq_len = %d, %d with no target token)", path, (int)n, (int)k.cut, (int)L, (int)k.empty);
    }
    if (st == AF_OK) st = fill_dataset(ds, c, &W, &k, L, pref != NULL, path);
    if (st == AF_OK && o->report)
        st = fill_report(o->report, c, ds, &k, L, all, pref ? af_pref_format_name(pfmt) : af_lm_format_name(c->format),
                         chat ? af_chat_family_name(fam) : "none");
    work_free(&W);
    af_lm_corpus_free(c);
    if (st != AF_OK) {
        af_dataset_free(ds);
        return st;
    }
    *out = ds;
    return AF_OK;
}

af_status af_lm_dataset_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                             af_dataset **out) {
    return lm_read(ctx, path, model, o, NULL, out);
}

af_status af_pref_dataset_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                               af_pref_data_report *pref, af_dataset **out) {
    af_pref_data_report tmp;
    return lm_read(ctx, path, model, o, pref ? pref : &tmp, out);
}

void af_lm_data_report_print(const af_lm_data_report *r, const char *title, FILE *fp) {
    if (!r || !fp) return;
    if (title) fprintf(fp, "%s\n", title);
    fprintf(fp, "  format         %s, chat template %s, loss on %s tokens\n", r->format ? r->format : "?",
            r->chat_template ? r->chat_template : "none", r->loss_on ? r->loss_on : "?");
    fprintf(fp, "  examples       %d read, %d kept", r->n_read, r->n_kept);
    if (r->n_dropped_cut || r->n_dropped_empty)
        fprintf(fp, ", %d dropped (%d: every target beyond max_seq_len, %d: no target; first at line %d)",
                r->n_dropped_cut + r->n_dropped_empty, r->n_dropped_cut, r->n_dropped_empty, r->first_dropped_line);
    fprintf(fp, "\n  tokens/example min %d  p50 %d  p95 %d  p99 %d  max %d  mean %.1f (before truncation)\n",
            r->len_min, r->len_p50, r->len_p95, r->len_p99, r->len_max, r->len_mean);
    fprintf(fp, "  max_seq_len    %d: %d examples truncated (%.1f%%), %lld tokens kept, %lld targets (%.1f%%)",
            r->max_seq_len, r->n_truncated, r->n_kept ? 100.0 * r->n_truncated / r->n_kept : 0.0,
            (long long)r->n_tokens, (long long)r->n_target_tokens,
            r->n_tokens ? 100.0 * (double)r->n_target_tokens / (double)r->n_tokens : 0.0);
    if (r->n_target_cut) fprintf(fp, ", %lld target tokens cut", (long long)r->n_target_cut);
    fprintf(fp, "\n");
    if ((int64_t)r->n_dropped_cut * 100 > (int64_t)r->n_read) /* more than 1%: never silent */
        fprintf(fp, "  warning: %d of %d examples (%.1f%%) dropped: every target token lies beyond max_seq_len %d "
                "(first at line %d); raise --max-seq-len\n", r->n_dropped_cut, r->n_read,
                100.0 * r->n_dropped_cut / (r->n_read > 0 ? r->n_read : 1), r->max_seq_len, r->first_dropped_line);
}

void af_pref_data_report_print(const af_pref_data_report *r, int32_t max_seq_len, const char *title, FILE *fp) {
    if (!r || !fp) return;
    if (title) fprintf(fp, "%s\n", title);
    fprintf(fp, "  pairs          %d read, %d kept", r->n_read, r->n_kept);
    if (r->n_prompt_too_long || r->n_dropped_other)
        fprintf(fp, ", %d dropped (%d: prompt fills max_seq_len %d, %d: a side without target; first at line %d)",
                r->n_prompt_too_long + r->n_dropped_other, r->n_prompt_too_long, max_seq_len, r->n_dropped_other,
                r->first_dropped_line);
    fprintf(fp, "\n  prompt tokens  p50 %d  max %d; completion tokens: chosen mean %.1f, rejected mean %.1f (ratio %.2f)\n",
            r->prompt_p50, r->prompt_max, r->chosen_tokens_mean, r->rejected_tokens_mean,
            r->rejected_tokens_mean > 0 ? r->chosen_tokens_mean / r->rejected_tokens_mean : 0.0);
    fprintf(fp, "  pairs          %d with a side truncated, %d with one completion over twice the other's length, "
                "%d with chosen == rejected\n", r->n_truncated, r->n_length_far, r->n_identical);
    if (r->n_identical)
        fprintf(fp, "  warning: %d pair%s with chosen == rejected (first at line %d) carry no preference: the loss "
                    "is constant for them\n", r->n_identical, r->n_identical > 1 ? "s" : "", r->first_identical_line);
    if (r->n_prompt_too_long)
        fprintf(fp, "  warning: %d pair%s dropped: the prompt alone fills max_seq_len %d (first at line %d); raise "
                    "--max-seq-len\n", r->n_prompt_too_long, r->n_prompt_too_long > 1 ? "s" : "", max_seq_len,
                r->first_dropped_line);
}
