/*
 * data.c — tokenized data sets, statistics, class weights, shuffles, splits, packed batches (data.h).
 */
#include "train/data.h"

#include "kernels/ctx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *dup_cstr(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

int32_t af_dataset_size(const af_dataset *ds) { return ds ? ds->n : 0; }

void af_dataset_free(af_dataset *ds) {
    if (!ds) return;
    free(ds->tok_off);
    free(ds->tokens);
    free(ds->orig_len);
    free(ds->labels);
    free(ds->multi_hot);
    free(ds->line_no);
    free(ds->target_mask);
    free(ds->path);
    if (ds->label_names)
        for (int32_t c = 0; c < ds->num_classes; c++) free(ds->label_names[c]);
    free(ds->label_names);
    free(ds);
}

/* Allocates the per-sample arrays of an n-sample set (tokens are allocated by the caller). */
static af_dataset *ds_alloc(int32_t n, int32_t num_classes, int multi) {
    af_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    ds->n = n;
    ds->num_classes = num_classes;
    ds->multi_label = multi;
    ds->tok_off = calloc((size_t)n + 1, sizeof *ds->tok_off);
    ds->orig_len = calloc((size_t)n, sizeof *ds->orig_len);
    if (multi)
        ds->multi_hot = calloc((size_t)n * (size_t)(num_classes > 0 ? num_classes : 1), 1);
    else
        ds->labels = calloc((size_t)n, sizeof *ds->labels);
    if (!ds->tok_off || !ds->orig_len || (multi ? !ds->multi_hot : !ds->labels)) {
        af_dataset_free(ds);
        return NULL;
    }
    return ds;
}

static af_status copy_names(af_dataset *ds, char *const *names) {
    if (!names || ds->num_classes <= 0) return AF_OK;
    ds->label_names = calloc((size_t)ds->num_classes, sizeof(char *));
    if (!ds->label_names) return AF_ERR_NOMEM;
    for (int32_t c = 0; c < ds->num_classes; c++)
        if (!(ds->label_names[c] = dup_cstr(names[c]))) return AF_ERR_NOMEM;
    return AF_OK;
}

typedef struct tok_job {
    const af_corpus *c;
    const af_tokenizer *tok;
    int32_t **ids;
    size_t *nids;
    af_status *sts;
} tok_job;

/* Samples [i0, i1) tokenized (each writes its own slots). */
static void tok_range(void *va, int64_t i0, int64_t i1, int tid) {
    const tok_job *J = va;
    for (int64_t i = i0; i < i1; i++)
        J->sts[i] = af_tokenize(J->tok, J->c->texts[i], J->c->text_len[i], 1, 0, &J->ids[i], &J->nids[i]);
}

af_status af_dataset_build(const af_ctx *ctx, const af_corpus *c, const af_tokenizer *tok, int32_t max_seq_len, af_dataset **out) {
    *out = NULL;
    if (!c || !tok || max_seq_len < 1)
        return af_fail(AF_ERR_INVALID_ARG, "dataset: need a corpus, a tokenizer and max_seq_len >= 1 (got %d)",
                       (int)max_seq_len);
    const char *P = c->path ? c->path : "corpus";
    int32_t n = c->n;
    /* the multi-label table is n x num_classes bytes: bounded (both counts come from the data) */
    if (c->multi_label && (uint64_t)n * (uint64_t)(c->num_classes > 0 ? c->num_classes : 1) > ((uint64_t)1 << 31))
        return af_fail(AF_ERR_RANGE, "%s: %d samples x %d classes: the multi-label table would take %llu bytes, above "
                       "the limit of %llu (fewer classes or samples)", P, n, c->num_classes,
                       (unsigned long long)((uint64_t)n * (uint64_t)c->num_classes), 1ull << 31);
    int32_t fill = af_token_bos(tok) >= 0 ? af_token_bos(tok) : af_token_eos(tok);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    size_t *nids = calloc((size_t)n, sizeof *nids);
    af_status *sts = calloc((size_t)n, sizeof *sts);
    af_dataset *ds = ds_alloc(n, c->num_classes, c->multi_label);
    af_status st = AF_OK;
    if (!ids || !nids || !sts || !ds) {
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
        goto fail;
    }
    /* af_tokenize is thread-safe (tokenizer.h); errors are collected per sample and re-reported on
       this thread because af_fail's message is thread-local. Dynamic schedule: lengths vary. */
    tok_job J = {c, tok, ids, nids, sts};
    af_threadpool_run(ctx->pool, ctx->n_threads, n, 4, tok_range, &J);
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sts[i] != AF_OK) {
            st = af_fail(sts[i], "%s:%d: field 'input': tokenization failed (%s)", P, c->line_no[i],
                         af_status_name(sts[i]));
            goto fail;
        }
        if (nids[i] == 0 && fill < 0) {
            st = af_fail(AF_ERR_FORMAT, "%s:%d: field 'input': text gives no token and the model has no BOS/EOS "
                                        "token to stand in", P, c->line_no[i]);
            goto fail;
        }
        size_t keep = nids[i] == 0 ? 1 : nids[i] < (size_t)max_seq_len ? nids[i] : (size_t)max_seq_len;
        ds->orig_len[i] = nids[i] > INT32_MAX ? INT32_MAX : (int32_t)nids[i];
        total += (int64_t)keep;
        ds->tok_off[i + 1] = total;
    }
    ds->tokens = malloc((size_t)(total ? total : 1) * sizeof *ds->tokens);
    ds->line_no = malloc((size_t)n * sizeof *ds->line_no);
    ds->path = dup_cstr(P);
    if (!ds->tokens || !ds->line_no || !ds->path || copy_names(ds, c->label_names) != AF_OK) {
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
        goto fail;
    }
    memcpy(ds->line_no, c->line_no, (size_t)n * sizeof *ds->line_no);
    ds->max_seq_len = max_seq_len;
    for (int32_t i = 0; i < n; i++) {
        int32_t *dst = ds->tokens + ds->tok_off[i];
        if (nids[i] == 0)
            dst[0] = fill;
        else
            memcpy(dst, ids[i], (size_t)(ds->tok_off[i + 1] - ds->tok_off[i]) * sizeof *dst);
        if (c->multi_label) {
            for (int32_t k = c->label_off[i]; k < c->label_off[i + 1]; k++)
                ds->multi_hot[(size_t)i * (size_t)c->num_classes + (size_t)c->label_ids[k]] = 1;
        } else {
            ds->labels[i] = c->labels[i];
        }
    }
    for (int32_t i = 0; i < n; i++) free(ids[i]);
    free(ids), free(nids), free(sts);
    *out = ds;
    return AF_OK;
fail:
    if (ids)
        for (int32_t i = 0; i < n; i++) free(ids[i]);
    free(ids), free(nids), free(sts);
    af_dataset_free(ds);
    return st;
}

af_status af_dataset_from_tokens(const int32_t *ids, const int64_t *off, int32_t n, const int32_t *labels,
                                 const uint8_t *multi_hot, int32_t num_classes, int32_t max_seq_len,
                                 af_dataset **out) {
    *out = NULL;
    if (n < 1 || !ids || !off || max_seq_len < 1 || num_classes < 1 || (!labels == !multi_hot))
        return af_fail(AF_ERR_INVALID_ARG, "dataset: invalid arguments (n %d, num_classes %d, max_seq_len %d)",
                       (int)n, (int)num_classes, (int)max_seq_len);
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int64_t len = off[i + 1] - off[i];
        if (len < 1 || len > INT32_MAX)
            return af_fail(AF_ERR_INVALID_ARG, "dataset: sample %d: %lld tokens", (int)i, (long long)len);
        if (labels && (labels[i] < -1 || labels[i] >= num_classes))
            return af_fail(AF_ERR_INVALID_ARG, "dataset: sample %d: label %d out of range [0, %d)", (int)i,
                           (int)labels[i], (int)num_classes);
        total += len < max_seq_len ? len : max_seq_len;
    }
    af_dataset *ds = ds_alloc(n, num_classes, multi_hot != NULL);
    if (!ds || !(ds->tokens = malloc((size_t)total * sizeof *ds->tokens))) {
        af_dataset_free(ds);
        return af_fail(AF_ERR_NOMEM, "dataset: out of memory");
    }
    ds->max_seq_len = max_seq_len;
    for (int32_t i = 0; i < n; i++) {
        int64_t len = off[i + 1] - off[i], keep = len < max_seq_len ? len : max_seq_len;
        ds->orig_len[i] = (int32_t)len;
        ds->tok_off[i + 1] = ds->tok_off[i] + keep;
        memcpy(ds->tokens + ds->tok_off[i], ids + off[i], (size_t)keep * sizeof(int32_t));
        if (labels) ds->labels[i] = labels[i];
    }
    if (multi_hot)
        for (size_t k = 0; k < (size_t)n * (size_t)num_classes; k++) ds->multi_hot[k] = multi_hot[k] ? 1 : 0;
    *out = ds;
    return AF_OK;
}

af_status af_dataset_subset(const af_dataset *ds, const int32_t *idx, int32_t m, af_dataset **out) {
    *out = NULL;
    if (m < 1 || !idx) return af_fail(AF_ERR_INVALID_ARG, "dataset subset: empty index list");
    int64_t total = 0;
    for (int32_t k = 0; k < m; k++) {
        if (idx[k] < 0 || idx[k] >= ds->n)
            return af_fail(AF_ERR_INVALID_ARG, "dataset subset: index %d out of range [0, %d)", (int)idx[k],
                           (int)ds->n);
        total += af_dataset_len(ds, idx[k]);
    }
    af_dataset *s = ds_alloc(m, ds->num_classes, ds->multi_label);
    af_status st = AF_OK;
    if (!s || !(s->tokens = malloc((size_t)total * sizeof *s->tokens)) ||
        (ds->line_no && !(s->line_no = malloc((size_t)m * sizeof *s->line_no))) ||
        (ds->path && !(s->path = dup_cstr(ds->path))) || copy_names(s, ds->label_names) != AF_OK ||
        (ds->target_mask && !(s->target_mask = malloc((size_t)(total ? total : 1)))))
        st = AF_ERR_NOMEM;
    if (st != AF_OK) {
        af_dataset_free(s);
        return af_fail(AF_ERR_NOMEM, "dataset subset: out of memory");
    }
    s->max_seq_len = ds->max_seq_len;
    size_t C = (size_t)ds->num_classes;
    for (int32_t k = 0; k < m; k++) {
        int32_t i = idx[k], len = af_dataset_len(ds, i);
        s->tok_off[k + 1] = s->tok_off[k] + len;
        memcpy(s->tokens + s->tok_off[k], ds->tokens + ds->tok_off[i], (size_t)len * sizeof(int32_t));
        if (ds->target_mask) memcpy(s->target_mask + s->tok_off[k], ds->target_mask + ds->tok_off[i], (size_t)len);
        s->orig_len[k] = ds->orig_len[i];
        if (s->line_no) s->line_no[k] = ds->line_no[i];
        if (ds->multi_label)
            memcpy(s->multi_hot + (size_t)k * C, ds->multi_hot + (size_t)i * C, C);
        else if (ds->labels)
            s->labels[k] = ds->labels[i];
    }
    if (!ds->multi_label && !ds->labels) { /* causal-LM sets keep labels NULL */
        free(s->labels);
        s->labels = NULL;
    }
    s->pairs = ds->pairs && m % 2 == 0; /* still pairs when idx takes whole pairs in order (2i, 2i + 1) */
    for (int32_t k = 0; s->pairs && k < m; k += 2) s->pairs = idx[k] % 2 == 0 && idx[k + 1] == idx[k] + 1;
    *out = s;
    return AF_OK;
}

/* ---- statistics ---- */
void af_data_stats_free(af_data_stats *s) {
    if (!s) return;
    free(s->class_count);
    free(s->sorted_len);
    memset(s, 0, sizeof *s);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted[0..n): sorted[ceil(p/100 · n) - 1], computed in integers
   for p given in tenths of a percent to avoid rounding surprises (p = 95 -> ceil(950·n/1000)). */
static int32_t pct(const int32_t *sorted, int32_t n, int p_permille) {
    int64_t r = ((int64_t)p_permille * n + 999) / 1000;
    if (r < 1) r = 1;
    if (r > n) r = n;
    return sorted[r - 1];
}

af_status af_data_stats_compute(const af_dataset *ds, af_data_stats *s) {
    memset(s, 0, sizeof *s);
    int32_t n = ds->n, C = ds->num_classes;
    s->n = n;
    s->num_classes = C;
    s->multi_label = ds->multi_label;
    s->max_seq_len = ds->max_seq_len;
    s->class_count = calloc((size_t)(C > 0 ? C : 1), sizeof *s->class_count);
    s->sorted_len = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->sorted_len);
    if (!s->class_count || !s->sorted_len) {
        af_data_stats_free(s);
        return af_fail(AF_ERR_NOMEM, "dataset stats: out of memory");
    }
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ds->multi_label) {
            int any = 0;
            for (int32_t c = 0; c < C; c++)
                if (ds->multi_hot[(size_t)i * (size_t)C + (size_t)c]) s->class_count[c]++, any = 1;
            s->n_labelled += any;
        } else if (ds->labels && ds->labels[i] >= 0 && ds->labels[i] < C) {
            s->class_count[ds->labels[i]]++;
            s->n_labelled++;
        }
        s->sorted_len[i] = ds->orig_len[i];
        sum += ds->orig_len[i];
        if (ds->orig_len[i] > ds->max_seq_len) s->n_truncated++;
        if (ds->orig_len[i] == 0) s->n_empty++;
    }
    s->n_tokens = n ? ds->tok_off[n] : 0;
    qsort(s->sorted_len, (size_t)n, sizeof *s->sorted_len, cmp_i32);
    if (n) {
        s->len_mean = sum / n;
        s->len_min = s->sorted_len[0];
        s->len_max = s->sorted_len[n - 1];
        s->len_p50 = pct(s->sorted_len, n, 500);
        s->len_p95 = pct(s->sorted_len, n, 950);
        s->len_p99 = pct(s->sorted_len, n, 990);
    }
    s->min_class = s->max_class = -1;
    for (int32_t c = 0; c < C; c++) {
        if (s->class_count[c] == 0) {
            s->n_empty_classes++;
            continue;
        }
        if (s->min_class < 0 || s->class_count[c] < s->class_count[s->min_class]) s->min_class = c;
        if (s->max_class < 0 || s->class_count[c] > s->class_count[s->max_class]) s->max_class = c;
    }
    s->imbalance = s->min_class >= 0 ? (double)s->class_count[s->max_class] / (double)s->class_count[s->min_class]
                                     : 1.0;
    return AF_OK;
}

int32_t af_data_stats_count_longer(const af_data_stats *s, int32_t L) {
    int32_t lo = 0, hi = s->n; /* first index with sorted_len > L */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->sorted_len[mid] > L)
            hi = mid;
        else
            lo = mid + 1;
    }
    return s->n - lo;
}

void af_data_stats_print(const af_data_stats *s, const char *const *names, const char *title, FILE *fp) {
    if (title) fprintf(fp, "%s\n", title);
    fprintf(fp, "  samples        %d (%d labelled)%s\n", s->n, s->n_labelled, s->multi_label ? ", multi-label" : "");
    fprintf(fp, "  classes        %d", s->num_classes);
    if (s->min_class >= 0)
        fprintf(fp, ", imbalance %.2f:1 (max/min class count)", s->imbalance);
    if (s->n_empty_classes) fprintf(fp, ", %d with no sample", s->n_empty_classes);
    fprintf(fp, "\n");
    int64_t tot = 0;
    for (int32_t c = 0; c < s->num_classes; c++) tot += s->class_count[c];
    /* a bounded table: past MAX_ROWS classes only the classes with samples, MAX_ROWS of them at most */
    enum { MAX_ROWS = 64 };
    int32_t shown = 0, hidden = 0;
    for (int32_t c = 0; c < s->num_classes; c++) {
        if (s->num_classes > MAX_ROWS && (s->class_count[c] == 0 || shown >= MAX_ROWS)) {
            hidden++;
            continue;
        }
        char id[32];
        snprintf(id, sizeof id, "%d", c);
        fprintf(fp, "    %-20.20s %8lld  %5.1f%%\n", names && names[c] ? names[c] : id, (long long)s->class_count[c],
                tot ? 100.0 * (double)s->class_count[c] / (double)tot : 0.0);
        shown++;
    }
    if (hidden) fprintf(fp, "    ... %d more classes not listed (%d classes with no sample)\n", hidden, s->n_empty_classes);
    fprintf(fp, "  tokens/sample  min %d  p50 %d  p95 %d  p99 %d  max %d  mean %.1f (before truncation)\n",
            s->len_min, s->len_p50, s->len_p95, s->len_p99, s->len_max, s->len_mean);
    fprintf(fp, "  max_seq_len    %d: %d samples truncated (%.1f%%), %lld tokens kept\n", s->max_seq_len,
            s->n_truncated, s->n ? 100.0 * s->n_truncated / s->n : 0.0, (long long)s->n_tokens);
    if (s->n_empty) fprintf(fp, "  empty texts    %d (each stands as one BOS/EOS token)\n", s->n_empty);
}

/* ---- class weights ---- */
af_status af_class_weights(const af_data_stats *s, const char *spec, float *w) {
    int32_t C = s->num_classes;
    if (!spec || !strcmp(spec, "uniform")) {
        for (int32_t c = 0; c < C; c++) w[c] = 1.0f;
        return AF_OK;
    }
    int inv = !strcmp(spec, "inverse-freq"), sq = !strcmp(spec, "sqrt-inverse");
    if (inv || sq) {
        double N = 0, K = 0, S = 0;
        for (int32_t c = 0; c < C; c++) {
            double nc = (double)s->class_count[c];
            N += nc;
            K += nc > 0;
            S += sqrt(nc);
        }
        if (N <= 0) return af_fail(AF_ERR_INVALID_ARG, "class weights '%s': no labelled sample", spec);
        for (int32_t c = 0; c < C; c++) {
            double nc = (double)s->class_count[c];
            w[c] = nc <= 0 ? 1.0f : (float)(inv ? N / (K * nc) : N / (sqrt(nc) * S));
        }
        return AF_OK;
    }
    const char *p = spec;
    int32_t k = 0;
    for (;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v <= 0)
            return af_fail(AF_ERR_INVALID_ARG,
                           "class weights '%s': weight %d is not a positive number (expected uniform, inverse-freq, "
                           "sqrt-inverse or %d comma-separated weights)", spec, (int)k + 1, (int)C);
        while (*end == ' ') end++;
        if (k < C) w[k] = (float)v;
        k++;
        if (*end == 0) break;
        if (*end != ',') return af_fail(AF_ERR_INVALID_ARG, "class weights '%s': unexpected '%c'", spec, *end);
        p = end + 1;
    }
    if (k != C)
        return af_fail(AF_ERR_INVALID_ARG, "class weights '%s': %d weights given for %d classes", spec, (int)k,
                       (int)C);
    return AF_OK;
}

/* ---- shuffling ---- */
uint64_t af_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t af_rand_below(uint64_t *state, uint64_t bound) {
    if (bound <= 1) return 0;
    uint64_t lim = UINT64_MAX - (UINT64_MAX % bound); /* accept x < lim: a multiple of bound */
    for (;;) {
        uint64_t x = af_splitmix64(state);
        if (x < lim) return x % bound;
    }
}

void af_shuffle_i32(int32_t *a, int32_t n, uint64_t seed) {
    uint64_t st = seed;
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)af_rand_below(&st, (uint64_t)i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void af_shuffle_perm(int32_t *perm, int32_t n, uint64_t seed, uint64_t epoch) {
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    uint64_t mix = seed ^ (epoch * 0xD1B54A32D192ED03ull);
    af_shuffle_i32(perm, n, af_splitmix64(&mix));
}

/* ---- stratified split ---- */
static int32_t stratum(const af_dataset *ds, int32_t i) {
    if (!ds->multi_label) return !ds->labels || ds->labels[i] < 0 ? ds->num_classes : ds->labels[i];
    for (int32_t c = 0; c < ds->num_classes; c++)
        if (ds->multi_hot[(size_t)i * (size_t)ds->num_classes + (size_t)c]) return c;
    return ds->num_classes;
}

af_status af_dataset_split_stratified(const af_dataset *ds, double val_frac, uint64_t seed, int32_t **train_idx,
                                      int32_t *n_train, int32_t **val_idx, int32_t *n_val) {
    *train_idx = *val_idx = NULL;
    *n_train = *n_val = 0;
    if (!(val_frac > 0 && val_frac < 1))
        return af_fail(AF_ERR_INVALID_ARG, "split: validation fraction %g not in (0, 1)", val_frac);
    int32_t n = ds->n, S = ds->num_classes + 1;
    int32_t *cnt = calloc((size_t)S + 1, sizeof *cnt), *by = malloc((size_t)n * sizeof *by);
    uint8_t *is_val = calloc((size_t)n, 1);
    int32_t *tr = malloc((size_t)n * sizeof *tr), *va = malloc((size_t)n * sizeof *va);
    af_status st = AF_OK;
    if (!cnt || !by || !is_val || !tr || !va) {
        st = af_fail(AF_ERR_NOMEM, "split: out of memory");
        goto done;
    }
    /* counting sort by stratum, samples ascending inside each */
    for (int32_t i = 0; i < n; i++) cnt[stratum(ds, i) + 1]++;
    for (int32_t s = 0; s < S; s++) cnt[s + 1] += cnt[s];
    {
        int32_t *pos = malloc((size_t)S * sizeof *pos);
        if (!pos) {
            st = af_fail(AF_ERR_NOMEM, "split: out of memory");
            goto done;
        }
        memcpy(pos, cnt, (size_t)S * sizeof *pos);
        for (int32_t i = 0; i < n; i++) by[pos[stratum(ds, i)]++] = i;
        free(pos);
    }
    for (int32_t s = 0; s < S; s++) {
        int32_t m = cnt[s + 1] - cnt[s];
        if (m == 0) continue;
        int32_t k = (int32_t)floor(val_frac * m + 0.5);
        if (k > m - 1) k = m - 1;
        uint64_t mix = seed ^ ((uint64_t)(s + 1) * 0x9E3779B97F4A7C15ull);
        af_shuffle_i32(by + cnt[s], m, af_splitmix64(&mix));
        for (int32_t j = 0; j < k; j++) is_val[by[cnt[s] + j]] = 1;
    }
    for (int32_t i = 0; i < n; i++) {
        if (is_val[i])
            va[(*n_val)++] = i;
        else
            tr[(*n_train)++] = i;
    }
    if (*n_val == 0) {
        st = af_fail(AF_ERR_INVALID_ARG, "split: validation fraction %g of %d samples leaves no validation sample",
                     val_frac, (int)n);
        *n_train = 0;
        goto done;
    }
    *train_idx = tr;
    *val_idx = va;
    tr = va = NULL;
done:
    free(cnt), free(by), free(is_val), free(tr), free(va);
    return st;
}

/* ---- packed batches ---- */
struct af_batcher {
    const af_dataset *ds;
    int32_t *order, n_order, batch_size, pos;
    int32_t *tokens;
    int64_t cap_tok;
    int32_t *seq_start, *labels, *index, cap_b;
    float *multi_hot;
    int32_t *targets; /* [cap_tok] causal-LM targets */
};

void af_batcher_free(af_batcher *b) {
    if (!b) return;
    free(b->order), free(b->tokens), free(b->seq_start), free(b->labels), free(b->index), free(b->multi_hot);
    free(b->targets);
    free(b);
}

static af_status check_order(const af_dataset *ds, const int32_t *idx, int32_t m) {
    for (int32_t k = 0; k < m; k++)
        if (idx[k] < 0 || idx[k] >= ds->n)
            return af_fail(AF_ERR_INVALID_ARG, "batcher: index %d out of range [0, %d)", (int)idx[k], (int)ds->n);
    return AF_OK;
}

af_status af_batcher_new(const af_dataset *ds, const int32_t *order, int32_t n_order, int32_t batch_size,
                         af_batcher **out) {
    *out = NULL;
    if (!ds || batch_size < 1) return af_fail(AF_ERR_INVALID_ARG, "batcher: batch size %d < 1", (int)batch_size);
    if (!order) n_order = ds->n;
    if (n_order < 0) return af_fail(AF_ERR_INVALID_ARG, "batcher: negative order length");
    if (order) AF_TRY(check_order(ds, order, n_order));
    af_batcher *b = calloc(1, sizeof *b);
    if (!b || !(b->order = malloc((size_t)(n_order ? n_order : 1) * sizeof *b->order))) {
        af_batcher_free(b);
        return af_fail(AF_ERR_NOMEM, "batcher: out of memory");
    }
    b->ds = ds;
    b->n_order = n_order;
    b->batch_size = batch_size;
    for (int32_t k = 0; k < n_order; k++) b->order[k] = order ? order[k] : k;
    *out = b;
    return AF_OK;
}

af_status af_batcher_reset(af_batcher *b, const int32_t *order) {
    if (order) {
        AF_TRY(check_order(b->ds, order, b->n_order));
        memcpy(b->order, order, (size_t)b->n_order * sizeof *order);
    }
    b->pos = 0;
    return AF_OK;
}

int64_t af_batcher_count(const af_batcher *b) {
    return ((int64_t)b->n_order + b->batch_size - 1) / b->batch_size;
}

af_status af_batcher_pack(af_batcher *b, const int32_t *idx, int32_t m, af_packed_batch *pb) {
    const af_dataset *ds = b->ds;
    if (m < 1) return af_fail(AF_ERR_INVALID_ARG, "batcher: empty batch");
    AF_TRY(check_order(ds, idx, m));
    int64_t ntok = 0;
    for (int32_t k = 0; k < m; k++) ntok += af_dataset_len(ds, idx[k]);
    if (ntok > INT32_MAX) return af_fail(AF_ERR_RANGE, "batcher: %lld tokens in one batch", (long long)ntok);
    size_t C = (size_t)ds->num_classes;
    if (m > b->cap_b) {
        int32_t *s = af_realloc_array(b->seq_start, (size_t)m + 1, sizeof *s);
        if (s) b->seq_start = s;
        int32_t *l = s ? af_realloc_array(b->labels, (size_t)m, sizeof *l) : NULL;
        if (l) b->labels = l;
        int32_t *x = l ? af_realloc_array(b->index, (size_t)m, sizeof *x) : NULL;
        if (x) b->index = x;
        float *h = x && ds->multi_label ? af_realloc_array(b->multi_hot, (size_t)m * C, sizeof *h) : NULL;
        if (h) b->multi_hot = h;
        if (!x || (ds->multi_label && !h)) return af_fail(AF_ERR_NOMEM, "batcher: out of memory");
        b->cap_b = m;
    }
    if (ntok > b->cap_tok) {
        int32_t *t = af_realloc_array(b->tokens, (size_t)ntok, sizeof *t);
        if (!t) return af_fail(AF_ERR_NOMEM, "batcher: out of memory");
        b->tokens = t;
        if (ds->target_mask) {
            int32_t *g = af_realloc_array(b->targets, (size_t)ntok, sizeof *g);
            if (!g) return af_fail(AF_ERR_NOMEM, "batcher: out of memory");
            b->targets = g;
        }
        b->cap_tok = ntok;
    }
    int32_t at = 0;
    b->seq_start[0] = 0;
    for (int32_t k = 0; k < m; k++) {
        int32_t i = idx[k], len = af_dataset_len(ds, i);
        memcpy(b->tokens + at, ds->tokens + ds->tok_off[i], (size_t)len * sizeof(int32_t));
        if (ds->target_mask) {
            const int32_t *tk = ds->tokens + ds->tok_off[i];
            const uint8_t *tm = ds->target_mask + ds->tok_off[i];
            for (int32_t j = 0; j < len; j++) b->targets[at + j] = j + 1 < len && tm[j + 1] ? tk[j + 1] : -1;
        }
        at += len;
        b->seq_start[k + 1] = at;
        b->index[k] = i;
        if (ds->multi_label)
            for (size_t c = 0; c < C; c++) b->multi_hot[(size_t)k * C + c] = ds->multi_hot[(size_t)i * C + c];
        else if (ds->labels)
            b->labels[k] = ds->labels[i];
    }
    pb->tokens = b->tokens;
    pb->seq_start = b->seq_start;
    pb->n_samples = m;
    pb->n_tok = at;
    pb->labels = ds->multi_label || !ds->labels ? NULL : b->labels;
    pb->targets = ds->target_mask ? b->targets : NULL;
    pb->multi_hot = ds->multi_label ? b->multi_hot : NULL;
    pb->index = b->index;
    return AF_OK;
}

int af_batcher_next(af_batcher *b, af_packed_batch *pb) {
    if (b->pos >= b->n_order) return 0;
    int32_t m = b->n_order - b->pos < b->batch_size ? b->n_order - b->pos : b->batch_size;
    if (af_batcher_pack(b, b->order + b->pos, m, pb) != AF_OK) return -1;
    b->pos += m;
    return 1;
}

/* ---- causal-LM data sets from token arrays (tests, tools) ---- */

af_status af_dataset_from_tokens_lm(const int32_t *ids, const int64_t *off, int32_t n, const uint8_t *mask,
                                    int32_t max_seq_len, af_dataset **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "LM dataset: NULL out");
    *out = NULL;
    if (n < 1 || !ids || !off || !mask || max_seq_len < 1)
        return af_fail(AF_ERR_INVALID_ARG, "LM dataset: invalid arguments (n %d, max_seq_len %d, ids/off/mask %s)",
                       (int)n, (int)max_seq_len, ids && off && mask ? "set" : "NULL");
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const int64_t len = off[i + 1] - off[i];
        if (len < 1 || len > INT32_MAX)
            return af_fail(AF_ERR_INVALID_ARG, "LM dataset: sample %d: %lld tokens", (int)i, (long long)len);
        if (mask[off[i]])
            return af_fail(AF_ERR_INVALID_ARG, "LM dataset: sample %d: its first token is marked as a target (nothing "
                                               "before it in the sample predicts it)", (int)i);
        total += len < max_seq_len ? len : max_seq_len;
    }
    af_dataset *ds = ds_alloc(n, 0, 0);
    if (ds) {
        free(ds->labels);
        ds->labels = NULL;
    }
    if (!ds || !(ds->tokens = malloc((size_t)total * sizeof *ds->tokens)) ||
        !(ds->target_mask = malloc((size_t)total))) {
        af_dataset_free(ds);
        return af_fail(AF_ERR_NOMEM, "LM dataset: out of memory");
    }
    ds->max_seq_len = max_seq_len;
    for (int32_t i = 0; i < n; i++) {
        const int64_t len = off[i + 1] - off[i], keep = len < max_seq_len ? len : max_seq_len;
        ds->orig_len[i] = (int32_t)len;
        ds->tok_off[i + 1] = ds->tok_off[i] + keep;
        memcpy(ds->tokens + ds->tok_off[i], ids + off[i], (size_t)keep * sizeof(int32_t));
        for (int64_t j = 0; j < keep; j++) ds->target_mask[ds->tok_off[i] + j] = mask[off[i] + j] ? 1 : 0;
    }
    *out = ds;
    return AF_OK;
}

/* ---- packing of causal-LM micro-batches ---- */

int64_t af_dataset_n_targets(const af_dataset *ds, int32_t i) {
    if (!ds->target_mask) return 0;
    int64_t k = 0;
    for (int64_t t = ds->tok_off[i] + 1; t < ds->tok_off[i + 1]; t++) k += ds->target_mask[t] != 0;
    return k;
}

typedef struct bfd_item {
    int32_t len, rank, idx;
} bfd_item;

static int bfd_cmp(const void *a, const void *b) {
    const bfd_item *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return (x->rank > y->rank) - (x->rank < y->rank);      /* ties: the given order */
}

af_status af_pack_bfd(const af_dataset *ds, const int32_t *order, int32_t n, int64_t budget, uint64_t shuffle_seed,
                      int32_t *idx, int32_t *off, int32_t *n_bins) {
    *n_bins = 0;
    if (n < 1 || budget < 1) return af_fail(AF_ERR_INVALID_ARG, "packing: n = %d, budget = %lld", (int)n, (long long)budget);
    bfd_item *it = malloc(sizeof *it * (size_t)n);
    int64_t *room = malloc(sizeof *room * (size_t)n);
    int32_t *bin = malloc(sizeof *bin * (size_t)n), *cnt = calloc((size_t)n + 1, sizeof *cnt);
    int32_t *perm = malloc(sizeof *perm * (size_t)n), *pos = malloc(sizeof *pos * (size_t)n);
    af_status st = AF_OK;
    if (!it || !room || !bin || !cnt || !perm || !pos) {
        st = af_fail(AF_ERR_NOMEM, "packing: out of memory");
        goto done;
    }
    for (int32_t k = 0; k < n; k++) {
        const int32_t i = order ? order[k] : k;
        if (i < 0 || i >= ds->n) {
            st = af_fail(AF_ERR_INVALID_ARG, "packing: index %d out of range [0, %d)", (int)i, (int)ds->n);
            goto done;
        }
        it[k] = (bfd_item){af_dataset_len(ds, i), k, i};
        if (it[k].len > budget) {
            st = af_fail(AF_ERR_INVALID_ARG, "packing: sample %d has %d tokens, more than the budget %lld", (int)i,
                         (int)it[k].len, (long long)budget);
            goto done;
        }
    }
    qsort(it, (size_t)n, sizeof *it, bfd_cmp);
    int32_t nb = 0;
    for (int32_t k = 0; k < n; k++) { /* best fit: the fullest bin the item still fits in (lowest index on ties) */
        int32_t best = -1;
        for (int32_t b = 0; b < nb; b++)
            if (room[b] >= it[k].len && (best < 0 || room[b] < room[best])) best = b;
        if (best < 0) room[best = nb++] = budget;
        room[best] -= it[k].len;
        bin[k] = best;
        cnt[best + 1]++;
    }
    /* bins in a seeded random order, so long and short bins are spread over the epoch */
    for (int32_t b = 0; b < nb; b++) perm[b] = b;
    af_shuffle_i32(perm, nb, shuffle_seed);
    int32_t at = 0; /* pos[b]: where bin b's samples go in idx */
    for (int32_t q = 0; q < nb; q++) {
        off[q] = at;
        pos[perm[q]] = at;
        at += cnt[perm[q] + 1];
    }
    off[nb] = at;
    for (int32_t k = 0; k < n; k++) idx[pos[bin[k]]++] = it[k].idx; /* inside a bin: longest first */
    *n_bins = nb;
done:
    free(it);
    free(room);
    free(bin);
    free(cnt);
    free(perm);
    free(pos);
    return st;
}

af_status af_dataset_truncate(af_dataset *ds, int32_t L) {
    if (!ds || L < 1 || L > ds->max_seq_len || ds->target_mask)
        return af_fail(AF_ERR_INVALID_ARG, "dataset: cannot truncate to %d tokens (built with %d%s)", (int)L,
                       ds ? (int)ds->max_seq_len : 0, ds && ds->target_mask ? ", causal LM" : "");
    int64_t w = 0;
    for (int32_t i = 0; i < ds->n; i++) {
        const int64_t a = ds->tok_off[i], len = ds->tok_off[i + 1] - a, keep = len < L ? len : L;
        memmove(ds->tokens + w, ds->tokens + a, sizeof *ds->tokens * (size_t)keep);
        ds->tok_off[i] = w;
        w += keep;
    }
    ds->tok_off[ds->n] = w;
    ds->max_seq_len = L;
    return AF_OK;
}
