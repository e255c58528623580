/*
 * jsonl.c — JSONL classification corpus reader (see jsonl.h for the format and the errors).
 */
#include "formats/jsonl.h"
#include "core/fsutil.h"
#include "formats/json_nul.h"
#include "formats/csv.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest line of a label-name file (labels.txt). */
#define MAX_LABEL_LINE 65536

void af_corpus_opts_init(af_corpus_opts *o) { memset(o, 0, sizeof *o); }

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- a small string -> index hash table (open addressing, FNV-1a) ---- */
typedef struct name_map {
    char **names;   /* [n] owned, in insertion order */
    int32_t n, cap; /* names */
    int32_t *slots; /* [nslot] index + 1, 0 = empty */
    size_t nslot;   /* power of two */
} name_map;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int32_t map_find(const name_map *m, const char *s) {
    if (!m->nslot) return -1;
    for (size_t i = fnv1a(s) & (m->nslot - 1);; i = (i + 1) & (m->nslot - 1)) {
        int32_t v = m->slots[i];
        if (!v) return -1;
        if (!strcmp(m->names[v - 1], s)) return v - 1;
    }
}

/* Adds `s` (copied) if absent; returns its index, or -1 on allocation failure. */
static int32_t map_add(name_map *m, const char *s) {
    int32_t f = map_find(m, s);
    if (f >= 0) return f;
    if ((size_t)(m->n + 1) * 2 > m->nslot) {
        size_t ns = m->nslot ? m->nslot * 2 : 64;
        int32_t *sl = calloc(ns, sizeof *sl);
        if (!sl) return -1;
        for (int32_t k = 0; k < m->n; k++) {
            size_t i = fnv1a(m->names[k]) & (ns - 1);
            while (sl[i]) i = (i + 1) & (ns - 1);
            sl[i] = k + 1;
        }
        free(m->slots);
        m->slots = sl;
        m->nslot = ns;
    }
    if (m->n == m->cap) {
        int32_t nc = m->cap ? m->cap * 2 : 16;
        char **nn = af_realloc_array(m->names, (size_t)nc, sizeof *nn);
        if (!nn) return -1;
        m->names = nn;
        m->cap = nc;
    }
    char *d = dup_str(s, strlen(s));
    if (!d) return -1;
    m->names[m->n] = d;
    size_t i = fnv1a(s) & (m->nslot - 1);
    while (m->slots[i]) i = (i + 1) & (m->nslot - 1);
    m->slots[i] = m->n + 1;
    return m->n++;
}

static void map_free(name_map *m) {
    for (int32_t k = 0; k < m->n; k++) free(m->names[k]);
    free(m->names);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- label lists ---- */
void af_labels_free(char **names, int32_t n) {
    if (!names) return;
    for (int32_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* af_jsonl_read_line: jsonl.h. */
af_status af_jsonl_next_line(FILE *fp, const char *path, size_t maxl, char **line, size_t *cap, long *ln, char **text,
                             size_t *len) {
    ssize_t n;
    *text = NULL;
    *len = 0;
    while ((n = af_jsonl_read_line(fp, line, cap, maxl)) != -1) {
        ++*ln;
        if (n == -2) return af_fail(AF_ERR_FORMAT, "%s:%ld: line longer than %zu bytes", path, *ln, maxl);
        if (n == -3) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, *ln);
        char *s = *line;
        if (*ln == 1) {
            size_t bom = 0;
            AF_TRY(af_text_check_encoding(path, (const unsigned char *)s, (size_t)n, &bom));
            s += bom;
            n -= (ssize_t)bom;
        }
        size_t k = 0;
        while (k < (size_t)n && is_space(s[k])) k++;
        if (k == (size_t)n) continue;
        *text = s;
        *len = (size_t)n;
        return AF_OK;
    }
    return AF_OK;
}

ssize_t af_jsonl_read_line(FILE *fp, char **buf, size_t *cap, size_t maxl) {
    size_t len = 0;
    int ch;
    while ((ch = getc_unlocked(fp)) != EOF) {
        if (len >= maxl) return -2;
        if (len + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            if (maxl < SIZE_MAX - 2 && nc > maxl + 2) nc = maxl + 2;
            char *nb = realloc(*buf, nc);
            if (!nb) return -3;
            *buf = nb;
            *cap = nc;
        }
        (*buf)[len++] = (char)ch;
        if (ch == '\n') break;
    }
    if (len == 0) return -1;
    (*buf)[len] = 0;
    return (ssize_t)len;
}

/* Appends the trimmed name s[0..n) to m; errors name `where` (a file:line or "labels"). */
static af_status add_label_name(name_map *m, const char *s, size_t n, const char *where) {
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    if (!n) return af_fail(AF_ERR_INVALID_ARG, "%s: empty label name", where);
    /* A NUL inside a name (possible in labels.txt) would silently cut it short. */
    if (memchr(s, 0, n)) return af_fail(AF_ERR_INVALID_ARG, "%s: label name contains a NUL byte", where);
    char *tmp = dup_str(s, n);
    if (!tmp) return af_fail(AF_ERR_NOMEM, "%s: out of memory", where);
    int32_t before = m->n, id = map_find(m, tmp);
    if (id >= 0) {
        af_status st = af_fail(AF_ERR_INVALID_ARG, "%s: duplicate label name \"%.60s\"", where, tmp);
        free(tmp);
        return st;
    }
    id = map_add(m, tmp);
    free(tmp);
    if (id < 0 || m->n != before + 1) return af_fail(AF_ERR_NOMEM, "%s: out of memory", where);
    return AF_OK;
}

static af_status take_names(name_map *m, char ***names, int32_t *n, const char *what) {
    if (m->n == 0) {
        map_free(m);
        return af_fail(AF_ERR_INVALID_ARG, "%s: empty label list", what);
    }
    *names = m->names;
    *n = m->n;
    free(m->slots);
    return AF_OK;
}

af_status af_labels_parse_list(const char *list, char ***names, int32_t *n) {
    *names = NULL;
    *n = 0;
    if (!list) return af_fail(AF_ERR_INVALID_ARG, "labels: NULL list");
    name_map m = {0};
    const char *p = list;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        af_status st = add_label_name(&m, p, len, "labels");
        if (st != AF_OK) {
            map_free(&m);
            return st;
        }
        if (!c) break;
        p = c + 1;
    }
    return take_names(&m, names, n, "labels");
}

af_status af_labels_read_file(const char *path, char ***names, int32_t *n) {
    *names = NULL;
    *n = 0;
    FILE *fp = af_fopen_regular(path, NULL); /* never blocks; message recorded */
    if (!fp) return AF_ERR_IO;
    name_map m = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long ln = 0;
    af_status st = AF_OK;
    while ((len = af_jsonl_read_line(fp, &line, &cap, MAX_LABEL_LINE)) != -1) {
        ln++;
        if (len < 0) {
            st = len == -2 ? af_fail(AF_ERR_FORMAT, "%s:%ld: line longer than %d bytes", path, ln, MAX_LABEL_LINE)
                           : af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
            break;
        }
        size_t k = 0;
        while (k < (size_t)len && is_space(line[k])) k++;
        if (k == (size_t)len) continue;
        char where[300];
        snprintf(where, sizeof where, "%s:%ld", path, ln);
        if ((st = add_label_name(&m, line, (size_t)len, where)) != AF_OK) break;
    }
    if (st == AF_OK && ferror(fp)) st = af_fail(AF_ERR_IO, "%s: read error", path);
    free(line);
    fclose(fp);
    if (st != AF_OK) {
        map_free(&m);
        if (st == AF_ERR_INVALID_ARG) st = AF_ERR_FORMAT;
        return st;
    }
    return take_names(&m, names, n, path);
}

/* ---- corpus ---- */
void af_corpus_free(af_corpus *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n; i++) free(c->texts[i]);
    free(c->texts);
    free(c->text_len);
    free(c->line_no);
    free(c->labels);
    free(c->label_off);
    free(c->label_ids);
    af_labels_free(c->label_names, c->label_names ? c->num_classes : 0);
    free(c->path);
    free(c);
}

af_status af_corpus_from_texts(const char *name, const char *const *texts, const size_t *lens, int32_t n,
                               int32_t first_line, int32_t num_classes, af_corpus **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_corpus_from_texts: NULL out");
    *out = NULL;
    if (n < 0 || num_classes < 0 || (n > 0 && (!texts || !lens)))
        return af_fail(AF_ERR_INVALID_ARG, "af_corpus_from_texts: n = %d, num_classes = %d, texts %s", n, num_classes,
                       texts && lens ? "given" : "NULL");
    af_corpus *k = calloc(1, sizeof *k);
    if (!k) return af_fail(AF_ERR_NOMEM, "out of memory");
    const size_t m = (size_t)(n ? n : 1);
    k->path = strdup(name ? name : "<texts>");
    k->texts = calloc(m, sizeof *k->texts);
    k->text_len = malloc(sizeof *k->text_len * m);
    k->line_no = malloc(sizeof *k->line_no * m);
    k->labels = malloc(sizeof *k->labels * m);
    k->num_classes = num_classes;
    if (!k->path || !k->texts || !k->text_len || !k->line_no || !k->labels) {
        af_corpus_free(k);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        k->texts[i] = malloc(lens[i] + 1);
        if (!k->texts[i]) {
            k->n = i; /* af_corpus_free frees the texts made so far */
            af_corpus_free(k);
            return af_fail(AF_ERR_NOMEM, "out of memory");
        }
        memcpy(k->texts[i], texts[i], lens[i]);
        k->texts[i][lens[i]] = 0;
        k->text_len[i] = lens[i];
        k->line_no[i] = first_line + i;
        k->labels[i] = -1;
    }
    k->n = n;
    *out = k;
    return AF_OK;
}

int32_t af_corpus_size(const af_corpus *c) { return c ? c->n : 0; }

int af_corpus_multi_label(const af_corpus *c) { return c ? c->multi_label : 0; }

const char *af_json_type_name(const struct cJSON *v) {
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "invalid value";
}

typedef struct reader {
    const char *path;
    const af_corpus_opts *o;
    af_corpus *c;
    int32_t cap;       /* capacity of the per-sample arrays */
    int32_t *ids;      /* label ids (CSR over samples, label_off) */
    int64_t n_ids, cap_ids;
    int form;          /* 0 undecided, 1 single, 2 multi */
    int kind;          /* 0 undecided, 1 integer, 2 string */
    name_map given;    /* label list from opts */
    name_map found;    /* names seen (no list) */
    int64_t max_int;   /* largest integer label seen */
    const char *text_field; /* the text field: opts' or detected on the first sample (borrowed) */
    int csv;           /* 1: rows of a CSV/TSV file (cells are strings; integer-looking labels are ids) */
} reader;

/* Text fields looked for when none is given, in this order: the names of Hugging Face data sets
 * (text: imdb, ag_news, yelp; sentence: glue/sst2, cola; content: amazon_polarity-style sets) and
 * afinar's own earlier default "input". */
static const char *const k_text_fields[] = {"text", "sentence", "content", "input"};
#define N_TEXT_FIELDS (sizeof k_text_fields / sizeof k_text_fields[0])

static int ids_push(reader *r, int32_t v) {
    if (r->n_ids == r->cap_ids) {
        int64_t nc = r->cap_ids ? r->cap_ids * 2 : 1024;
        int32_t *p = af_realloc_array(r->ids, (size_t)nc, sizeof *p);
        if (!p) return 0;
        r->ids = p;
        r->cap_ids = nc;
    }
    r->ids[r->n_ids++] = v;
    return 1;
}

static void known_list(const name_map *m, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < m->n && o + 8 < cap; i++) {
        int w = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", m->names[i]);
        if (w < 0 || (size_t)w >= cap - o) {
            snprintf(buf + (cap > 8 ? cap - 5 : 0), 5, "...");
            return;
        }
        o += (size_t)w;
    }
}

/* One label value -> id (pushed into r->ids). */
static af_status one_label(reader *r, long ln, const char *field, const cJSON *v) {
    const char *P = r->path;
    int kind = cJSON_IsNumber(v) ? 1 : cJSON_IsString(v) ? 2 : 0;
    if (!kind)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': expected an integer or a string label, got %s", P, ln,
                       field, af_json_type_name(v));
    if (r->kind && kind != r->kind)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': got %s label but earlier lines use %s labels", P, ln,
                       field, kind == 1 ? "an integer" : "a string", r->kind == 1 ? "integer" : "string");
    r->kind = kind;
    int32_t id;
    if (kind == 1) {
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': label %g is not an integer", P, ln, field, d);
        int64_t limit = r->given.n ? r->given.n : r->o->num_classes > 0 ? r->o->num_classes : 0;
        if (d < 0) return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': label %.17g is negative", P, ln, field, d);
        if (limit > 0 && d >= (double)limit)
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': value %.17g out of range [0, %lld)", P, ln, field, d,
                           (long long)limit);
        /* inferred class count (max label + 1): bounded, or one line could ask for a billion classes */
        if (limit == 0 && d >= (double)AF_MAX_CLASSES)
            return af_fail(AF_ERR_FORMAT,
                           "%s:%ld: field '%s': label %.17g is above the largest class id %d (at most %d classes; "
                           "integer labels are class ids 0..N-1: renumber them or use string labels)",
                           P, ln, field, d, AF_MAX_CLASSES - 1, AF_MAX_CLASSES);
        id = (int32_t)d;
        if (id > r->max_int) r->max_int = id;
    } else if (r->given.n) {
        id = map_find(&r->given, v->valuestring);
        if (id < 0) {
            char known[400];
            known_list(&r->given, known, sizeof known);
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': unknown label name \"%.60s\" (known: %s)", P, ln,
                           field, v->valuestring, known);
        }
    } else {
        if (!v->valuestring[0]) return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': empty label name", P, ln, field);
        if (r->found.n >= AF_MAX_CLASSES && map_find(&r->found, v->valuestring) < 0)
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': label \"%.60s\" would be class %d, above the limit of %d classes",
                           P, ln, field, v->valuestring, r->found.n + 1, AF_MAX_CLASSES);
        id = map_add(&r->found, v->valuestring);
        if (id < 0) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    }
    if (!ids_push(r, id)) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    return AF_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

af_status af_jsonl_parse_object(const char *path, long ln, const char *line, size_t len, struct cJSON **out) {
    const char *end = NULL;
    *out = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (!root) {
        long col = end && end >= line ? (long)(end - line) + 1 : 1;
        return af_fail(AF_ERR_FORMAT, "%s:%ld: invalid JSON at column %ld", path, ln, col);
    }
    size_t k = end ? (size_t)(end - line) : len;
    while (k < len && is_space(line[k])) k++;
    af_status st = AF_OK;
    char where[64];
    if (k < len)
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: invalid JSON at column %zu: unexpected text after the object", path,
                     ln, k + 1);
    else if (!cJSON_IsObject(root))
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: expected a JSON object, got %s", path, ln, af_json_type_name(root));
    else if (af_json_nul_path(line, len, where, sizeof where))
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s' holds a NUL character (\\u0000); text with NUL characters is not accepted",
                     path, ln, where);
    if (st != AF_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return AF_OK;
}

/* The fields a line has and the flag to name another one, appended to a "missing" message. */
static af_status missing_field(reader *r, long ln, const cJSON *root, const char *field, const char *flag) {
    char have[400];
    af_json_key_list(root, have, sizeof have);
    return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': missing (the %s has %s; name the field with %s NAME)", r->path,
                   ln, field, r->csv ? "header" : "line", have, flag);
}

/* The text field of a sample whose object is `root`: the given one, else the first of
 * k_text_fields present in the first sample (then required in every later one). */
static af_status find_text(reader *r, long ln, const cJSON *root, const cJSON **t) {
    if (!r->text_field) {
        for (size_t i = 0; i < N_TEXT_FIELDS && !r->text_field; i++)
            if (cJSON_GetObjectItemCaseSensitive(root, k_text_fields[i])) r->text_field = k_text_fields[i];
        if (!r->text_field) {
            char have[400];
            af_json_key_list(root, have, sizeof have);
            return af_fail(AF_ERR_FORMAT,
                           "%s:%ld: no text field: looked for 'text', 'sentence', 'content' and 'input', the %s has %s; "
                           "name the text field with --text-field NAME",
                           r->path, ln, r->csv ? "header" : "line", have);
        }
    }
    *t = cJSON_GetObjectItemCaseSensitive(root, r->text_field);
    if (!*t) return missing_field(r, ln, root, r->text_field, "--text-field");
    if (!cJSON_IsString(*t))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': expected a string, got %s", r->path, ln, r->text_field,
                       af_json_type_name(*t));
    return AF_OK;
}

/* A CSV cell that is a canonical non-negative integer ("0", "17"; not "007", "+1", "1.0") becomes a
 * number (an integer class id), as pandas and datasets write integer labels; others stay names. */
static void csv_label_number(cJSON *lv) {
    if (!cJSON_IsString(lv)) return;
    const char *s = lv->valuestring;
    size_t n = strlen(s);
    if (n == 0 || n > 9 || (n > 1 && s[0] == '0')) return;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return;
    const double v = (double)strtol(s, NULL, 10);
    /* the item becomes a number in place (its string was made by cJSON_CreateString: ours to free) */
    cJSON_free(lv->valuestring);
    lv->valuestring = NULL;
    lv->type = (lv->type & ~0xFF) | cJSON_Number;
    cJSON_SetNumberValue(lv, v);
}

/* Adds sample c->n from the object `root` (one JSONL line or one CSV row at line `ln`). */
static af_status parse_obj(reader *r, long ln, cJSON *root) {
    const char *P = r->path;
    af_corpus *c = r->c;
    af_status st = AF_OK;
    const cJSON *t = NULL;
    if ((st = find_text(r, ln, root, &t)) != AF_OK) return st;
    const char *lf = r->o->label_field;
    cJSON *lv;
    if (lf) {
        lv = cJSON_GetObjectItemCaseSensitive(root, lf);
    } else {
        lf = "label";
        lv = cJSON_GetObjectItemCaseSensitive(root, "label");
        if (!lv && (lv = cJSON_GetObjectItemCaseSensitive(root, "labels"))) lf = "labels";
    }
    if (lv && r->csv) {
        if (r->o->labels_optional && cJSON_IsString(lv) && !lv->valuestring[0]) lv = NULL; /* empty cell */
        else csv_label_number(lv);
    }
    if (lv && cJSON_IsNull(lv) && r->o->labels_optional) lv = NULL;
    if (!lv && !r->o->labels_optional)
        return missing_field(r, ln, root, r->o->label_field ? lf : "label", "--label-field");
    int64_t first = r->n_ids;
    if (lv) {
        int form = cJSON_IsArray(lv) ? 2 : 1;
        if (r->form && form != r->form) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': got a %s but earlier lines are %s", P, ln, lf,
                         form == 2 ? "list of labels" : "single label",
                         r->form == 2 ? "multi-label (lists)" : "single-label");
            return st;
        }
        r->form = form;
        if (form == 1) {
            st = one_label(r, ln, lf, lv);
        } else {
            const cJSON *e;
            cJSON_ArrayForEach(e, lv) {
                if ((st = one_label(r, ln, lf, e)) != AF_OK) break;
            }
        }
        if (st != AF_OK) return st;
        if (form == 2 && r->n_ids - first > 1 && r->kind == 1) { /* sort + unique (ids are final) */
            int32_t *p = r->ids + first;
            int64_t m = r->n_ids - first, w = 1;
            qsort(p, (size_t)m, sizeof *p, cmp_i32);
            for (int64_t i = 1; i < m; i++)
                if (p[i] != p[w - 1]) p[w++] = p[i];
            r->n_ids = first + w;
        }
        c->n_labelled++;
    }
    if (c->n == r->cap) {
        int32_t nc = r->cap ? r->cap * 2 : 256;
        char **tx = af_realloc_array(c->texts, (size_t)nc, sizeof *tx);
        if (tx) c->texts = tx;
        size_t *tl = tx ? af_realloc_array(c->text_len, (size_t)nc, sizeof *tl) : NULL;
        if (tl) c->text_len = tl;
        int32_t *lnp = tl ? af_realloc_array(c->line_no, (size_t)nc, sizeof *lnp) : NULL;
        if (lnp) c->line_no = lnp;
        int32_t *lo = lnp ? af_realloc_array(c->label_off, (size_t)nc + 1, sizeof *lo) : NULL;
        if (!lo) {
            st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
            return st;
        }
        c->label_off = lo;
        r->cap = nc;
    }
    size_t tlen = strlen(t->valuestring);
    char *txt = dup_str(t->valuestring, tlen);
    if (!txt) {
        st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
        return st;
    }
    if (r->n_ids > INT32_MAX) {
        free(txt);
        st = af_fail(AF_ERR_RANGE, "%s:%ld: too many labels", P, ln);
        return st;
    }
    c->texts[c->n] = txt;
    c->text_len[c->n] = tlen;
    c->line_no[c->n] = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
    c->label_off[c->n] = (int32_t)first;
    c->n++;
    c->label_off[c->n] = (int32_t)r->n_ids;
    return st;
}

/* Parses one non-blank JSONL line into sample c->n. */
static af_status parse_line(reader *r, long ln, const char *line, size_t len) {
    cJSON *root = NULL;
    af_status st = af_jsonl_parse_object(r->path, ln, line, len, &root);
    if (st != AF_OK) return st;
    st = parse_obj(r, ln, root);
    cJSON_Delete(root);
    return st;
}

/* One CSV/TSV row (af_csv_row_fn). */
static af_status parse_row(void *ud, long ln, const cJSON *row) {
    reader *r = ud;
    if (r->c->n == INT32_MAX - 1) return af_fail(AF_ERR_RANGE, "%s:%ld: too many samples", r->path, ln);
    return parse_obj(r, ln, (cJSON *)row); /* the label cell may become a number in place */
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Remaps string ids found without a list to sorted order and builds the final label arrays. */
static af_status finish(reader *r) {
    af_corpus *c = r->c;
    const char *P = r->path;
    if (r->given.n) {
        c->num_classes = r->given.n;
        c->label_names = calloc((size_t)r->given.n, sizeof(char *));
        if (!c->label_names) return af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
        for (int32_t i = 0; i < r->given.n; i++)
            if (!(c->label_names[i] = dup_str(r->given.names[i], strlen(r->given.names[i]))))
                return af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
    } else if (r->kind == 2) {
        int32_t n = r->found.n;
        int32_t *order = malloc((size_t)n * sizeof *order), *rank = malloc((size_t)n * sizeof *rank);
        char **names = calloc((size_t)n, sizeof *names);
        if (!order || !rank || !names) {
            free(order), free(rank), free(names);
            return af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
        }
        for (int32_t i = 0; i < n; i++) names[i] = r->found.names[i];
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (int32_t i = 0; i < n; i++) {
            order[i] = map_find(&r->found, names[i]);
            rank[order[i]] = i;
        }
        for (int64_t k = 0; k < r->n_ids; k++) r->ids[k] = rank[r->ids[k]];
        /* hand the names over in sorted order */
        for (int32_t i = 0; i < n; i++) r->found.names[i] = names[i];
        c->label_names = r->found.names;
        c->num_classes = n;
        r->found.names = NULL;
        r->found.n = 0;
        free(order), free(rank), free(names);
    } else {
        c->num_classes = r->o->num_classes > 0 ? r->o->num_classes : (int32_t)(r->max_int + 1);
    }
    if (r->form == 2) {
        if (r->kind == 2) /* string ids were remapped: sort + unique per sample now */
            for (int32_t i = 0; i < c->n; i++) {
                int32_t a = c->label_off[i], b = c->label_off[i + 1];
                qsort(r->ids + a, (size_t)(b - a), sizeof(int32_t), cmp_i32);
            }
        /* compact duplicates across the CSR */
        int64_t w = 0;
        int32_t start = 0;
        for (int32_t i = 0; i < c->n; i++) {
            int32_t a = start, b = c->label_off[i + 1];
            start = b;
            c->label_off[i] = (int32_t)w;
            for (int32_t k = a; k < b; k++)
                if (k == a || r->ids[k] != r->ids[k - 1]) r->ids[w++] = r->ids[k];
        }
        c->label_off[c->n] = (int32_t)w;
        c->multi_label = 1;
        c->label_ids = r->ids;
        r->ids = NULL;
        if (!c->label_ids && !(c->label_ids = malloc(sizeof(int32_t))))
            return af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
    } else {
        c->labels = malloc((size_t)c->n * sizeof *c->labels);
        if (!c->labels) return af_fail(AF_ERR_NOMEM, "%s: out of memory", P);
        for (int32_t i = 0; i < c->n; i++)
            c->labels[i] = c->label_off[i + 1] > c->label_off[i] ? r->ids[c->label_off[i]] : -1;
        free(c->label_off);
        c->label_off = NULL;
    }
    if (c->num_classes <= 0 && c->n_labelled == 0 && !r->o->labels_optional)
        return af_fail(AF_ERR_FORMAT, "%s: no labels", P);
    return AF_OK;
}

/* The lines of a JSONL file into r->c (encoding checked on the first line, a UTF-8 BOM skipped). */
static af_status read_jsonl_lines(reader *r, size_t maxl) {
    const char *path = r->path;
    FILE *fp = af_fopen_regular(path, NULL); /* never blocks; "/dev/stdin" may be a pipe */
    if (!fp) return AF_ERR_IO;
    af_status st = AF_OK;
    char *line = NULL;
    size_t cap = 0;
    char *s = NULL;
    size_t len = 0;
    long ln = 0;
    while (st == AF_OK && (st = af_jsonl_next_line(fp, path, maxl, &line, &cap, &ln, &s, &len)) == AF_OK && s) {
        if (r->c->n == INT32_MAX - 1) {
            st = af_fail(AF_ERR_RANGE, "%s:%ld: too many samples", path, ln);
            break;
        }
        st = parse_line(r, ln, s, len);
    }
    if (st == AF_OK && ferror(fp)) st = af_fail(AF_ERR_IO, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(fp);
    return st;
}

af_status af_corpus_read(const char *path, const af_corpus_opts *opts, af_corpus **out) {
    return af_corpus_read_as(path, af_data_file_delim(path), opts, out);
}

af_status af_corpus_read_as(const char *path, int delim, const af_corpus_opts *opts, af_corpus **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "corpus: NULL out");
    *out = NULL;
    af_corpus_opts def;
    if (!opts) {
        af_corpus_opts_init(&def);
        opts = &def;
    }
    if (!path) return af_fail(AF_ERR_INVALID_ARG, "corpus: NULL path");
    if (opts->n_label_names < 0 || (opts->n_label_names > 0 && !opts->label_names))
        return af_fail(AF_ERR_INVALID_ARG, "%s: invalid label list", path);
    reader r = {0};
    r.path = path;
    r.o = opts;
    r.max_int = -1;
    for (int32_t i = 0; i < opts->n_label_names; i++) {
        const char *s = opts->label_names[i];
        af_status st = s ? add_label_name(&r.given, s, strlen(s), "labels")
                         : af_fail(AF_ERR_INVALID_ARG, "labels: NULL name");
        if (st != AF_OK) {
            map_free(&r.given);
            return st;
        }
    }
    if (opts->num_classes > 0 && r.given.n && opts->num_classes != r.given.n) {
        map_free(&r.given);
        return af_fail(AF_ERR_INVALID_ARG, "%s: num_classes %d differs from the %d label names", path,
                       opts->num_classes, r.given.n);
    }
    af_corpus *c = calloc(1, sizeof *c);
    r.c = c;
    r.text_field = opts->text_field;
    af_status st = AF_OK;
    if (!c || !(c->path = dup_str(path, strlen(path)))) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    size_t maxl = opts->max_line_bytes ? opts->max_line_bytes : AF_JSONL_DEFAULT_MAX_LINE;
    if (st == AF_OK && delim) {
        r.csv = 1;
        st = af_csv_read(path, delim, maxl, parse_row, &r, NULL);
    } else if (st == AF_OK) {
        st = read_jsonl_lines(&r, maxl);
    }
    if (st == AF_OK && c->n == 0) st = af_fail(AF_ERR_FORMAT, "%s: no samples (empty data set)", path);
    if (st == AF_OK) st = finish(&r);
    free(r.ids);
    map_free(&r.given);
    map_free(&r.found);
    if (st != AF_OK) {
        af_corpus_free(c);
        return st;
    }
    *out = c;
    return AF_OK;
}
