/*
 * lm_jsonl.c — causal-LM examples in JSON Lines (TRL's formats), see lm_jsonl.h.
 */
#include "formats/lm_jsonl.h"
#include "core/fsutil.h"

#include "formats/csv.h"
#include "formats/jsonl.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *af_chat_role_name(af_chat_role r) {
    return r == AF_ROLE_SYSTEM ? "system" : r == AF_ROLE_USER ? "user" : r == AF_ROLE_TOOL ? "tool" : "assistant";
}

const char *af_lm_format_name(af_lm_format f) {
    switch (f) {
    case AF_LM_TEXT: return "text";
    case AF_LM_PROMPT_COMPLETION: return "prompt/completion";
    case AF_LM_MESSAGES: return "messages";
    case AF_LM_CHAT_PC: return "prompt/completion (messages)";
    }
    return "?";
}

void af_lm_example_clear(af_lm_example *ex) {
    if (!ex) return;
    free(ex->msgs);
    free(ex->buf);
    memset(ex, 0, sizeof *ex);
}

af_status af_lm_msgs_check(const char *P, long ln, const char *f, const cJSON *arr, int32_t *n, size_t *bytes,
                            int32_t *n_asst) {
    if (!cJSON_IsArray(arr))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': expected a list of messages, got %s", P, ln, f,
                       af_json_type_name(arr));
    int32_t k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        if (!cJSON_IsObject(m))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d]': expected a message object "
                           "{\"role\": ..., \"content\": ...}, got %s", P, ln, f, (int)k, af_json_type_name(m));
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!r) return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d].role': missing", P, ln, f, (int)k);
        if (!cJSON_IsString(r))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d].role': expected a string, got %s", P, ln, f, (int)k,
                           af_json_type_name(r));
        const char *rs = r->valuestring;
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d].role': unknown role \"%.40s\" (expected system, "
                           "user or assistant)", P, ln, f, (int)k, rs);
        if (!strcmp(rs, "assistant")) (*n_asst)++;
        if (!c) return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d].content': missing", P, ln, f, (int)k);
        if (!cJSON_IsString(c))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s[%d].content': expected a string, got %s", P, ln, f,
                           (int)k, af_json_type_name(c));
        *bytes += strlen(c->valuestring) + 1;
        if (++k == INT32_MAX / 2) return af_fail(AF_ERR_RANGE, "%s:%ld: field '%s': too many messages", P, ln, f);
    }
    if (k == 0) return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': empty list of messages", P, ln, f);
    *n += k;
    return AF_OK;
}

void af_lm_msgs_copy(af_lm_example *ex, const cJSON *arr, int32_t *n, size_t *o) {
    const cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        const char *rs = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const char *cs = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        size_t L = strlen(cs);
        af_chat_msg *d = &ex->msgs[(*n)++];
        d->role = !strcmp(rs, "system") ? AF_ROLE_SYSTEM : !strcmp(rs, "user") ? AF_ROLE_USER : AF_ROLE_ASSISTANT;
        memcpy(ex->buf + *o, cs, L + 1);
        d->content = ex->buf + *o;
        d->len = L;
        *o += L + 1;
    }
}

static af_status fill(const char *P, long ln, const cJSON *root, af_lm_example *ex) {
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(root, "label");
    const char *labf = "label";
    if (!lab) lab = cJSON_GetObjectItemCaseSensitive(root, "labels"), labf = "labels";
    if (lab)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': a causal-LM data file has no labels (this looks like "
                       "classification data: use --task classification)", P, ln, labf);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "completion");
    const char *names[3];
    int g = 0;
    if (t) names[g++] = "text";
    if (ms) names[g++] = "messages";
    if (p || c) names[g++] = p ? "prompt" : "completion";
    if (g > 1)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': a line holds one format, but this one has both '%s' and "
                       "'%s' (use 'text', 'prompt'+'completion' or 'messages')", P, ln, names[1], names[0], names[1]);
    if (g == 0) {
        int cls = cJSON_GetObjectItemCaseSensitive(root, "input") != NULL;
        char have[300];
        af_json_key_list(root, have, sizeof have);
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'text': missing: a causal-LM line needs 'text', "
                       "'prompt'+'completion' or 'messages' (it has %s)%s", P, ln, have,
                       cls ? " (found 'input': classification data? use --task classification)" : "");
    }
    memset(ex, 0, sizeof *ex);
    ex->line_no = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
    if (t) {
        if (!cJSON_IsString(t))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'text': expected a string, got %s", P, ln,
                           af_json_type_name(t));
        size_t L = strlen(t->valuestring);
        if (!(ex->buf = malloc(L + 1))) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
        memcpy(ex->buf, t->valuestring, L + 1);
        ex->format = AF_LM_TEXT;
        ex->text = ex->buf;
        ex->text_len = L;
        return AF_OK;
    }
    if (p || c) {
        if (!p) return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'prompt': missing (a 'completion' needs a 'prompt')", P, ln);
        if (!c) return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'completion': missing (a 'prompt' needs a 'completion')", P, ln);
        if (cJSON_IsString(p) && cJSON_IsString(c)) {
            size_t Lp = strlen(p->valuestring), Lc = strlen(c->valuestring);
            if (!(ex->buf = malloc(Lp + Lc + 2))) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
            memcpy(ex->buf, p->valuestring, Lp + 1);
            memcpy(ex->buf + Lp + 1, c->valuestring, Lc + 1);
            ex->format = AF_LM_PROMPT_COMPLETION;
            ex->text = ex->buf;
            ex->text_len = Lp;
            ex->completion = ex->buf + Lp + 1;
            ex->completion_len = Lc;
            return AF_OK;
        }
        if (!cJSON_IsString(p) && !cJSON_IsArray(p))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'prompt': expected a string or a list of messages, got %s",
                           P, ln, af_json_type_name(p));
        if (cJSON_IsString(p) || !cJSON_IsArray(c))
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'completion': expected %s like 'prompt', got %s", P, ln,
                           cJSON_IsString(p) ? "a string" : "a list of messages", af_json_type_name(c));
        int32_t n = 0, np, na_p = 0, na_c = 0;
        size_t bytes = 0;
        AF_TRY(af_lm_msgs_check(P, ln, "prompt", p, &n, &bytes, &na_p));
        np = n;
        AF_TRY(af_lm_msgs_check(P, ln, "completion", c, &n, &bytes, &na_c));
        if (!na_c)
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'completion': no assistant message (nothing to train on)",
                           P, ln);
        ex->msgs = malloc((size_t)n * sizeof *ex->msgs);
        ex->buf = malloc(bytes);
        if (!ex->msgs || !ex->buf) {
            af_lm_example_clear(ex);
            return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
        }
        int32_t k = 0;
        size_t o = 0;
        af_lm_msgs_copy(ex, p, &k, &o);
        af_lm_msgs_copy(ex, c, &k, &o);
        ex->format = AF_LM_CHAT_PC;
        ex->n_msgs = n;
        ex->n_prompt_msgs = np;
        ex->line_no = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
        return AF_OK;
    }
    int32_t n = 0, na = 0;
    size_t bytes = 0;
    AF_TRY(af_lm_msgs_check(P, ln, "messages", ms, &n, &bytes, &na));
    if (!na)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'messages': no assistant turn (nothing to train on)", P, ln);
    ex->msgs = malloc((size_t)n * sizeof *ex->msgs);
    ex->buf = malloc(bytes);
    if (!ex->msgs || !ex->buf) {
        af_lm_example_clear(ex);
        return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    }
    int32_t k = 0;
    size_t o = 0;
    af_lm_msgs_copy(ex, ms, &k, &o);
    ex->format = AF_LM_MESSAGES;
    ex->n_msgs = n;
    ex->line_no = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
    return AF_OK;
}

af_status af_lm_example_parse(const char *path, long ln, const char *line, size_t len, af_lm_example *ex) {
    memset(ex, 0, sizeof *ex);
    cJSON *root = NULL;
    AF_TRY(af_jsonl_parse_object(path, ln, line, len, &root));
    af_status st = fill(path, ln, root, ex);
    cJSON_Delete(root);
    if (st != AF_OK) af_lm_example_clear(ex);
    return st;
}

void af_lm_corpus_free(af_lm_corpus *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n; i++) af_lm_example_clear(&c->ex[i]);
    free(c->ex);
    free(c->path);
    free(c);
}

/* State of one read: the corpus being filled and its first example's line (for the one-format rule). */
typedef struct lm_reader {
    af_lm_corpus *c;
    int32_t ncap, first_line;
} lm_reader;

/* Appends a parsed example (moved in; cleared on error) checking the one-format-per-file rule. */
static af_status lm_push(lm_reader *r, const char *path, long ln, af_lm_example *ex) {
    af_lm_corpus *c = r->c;
    if (c->n == INT32_MAX - 1) {
        af_lm_example_clear(ex);
        return af_fail(AF_ERR_RANGE, "%s:%ld: too many examples", path, ln);
    }
    if (c->n == 0) {
        c->format = ex->format;
        r->first_line = ex->line_no;
    } else if (ex->format != c->format) {
        af_status st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': line is '%s' but line %d is '%s' (one format per file)",
                               path, ln, ex->format == AF_LM_TEXT ? "text" : ex->format == AF_LM_MESSAGES ? "messages" : "prompt",
                               af_lm_format_name(ex->format), (int)r->first_line, af_lm_format_name(c->format));
        af_lm_example_clear(ex);
        return st;
    }
    if (c->n == r->ncap) {
        int32_t nc = r->ncap ? (r->ncap > INT32_MAX / 2 ? INT32_MAX - 1 : r->ncap * 2) : 256;
        af_lm_example *ne = af_realloc_array(c->ex, (size_t)nc, sizeof *ne);
        if (!ne) {
            af_lm_example_clear(ex);
            return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
        }
        c->ex = ne;
        r->ncap = nc;
    }
    c->ex[c->n++] = *ex;
    return AF_OK;
}

/* One CSV/TSV row: its columns as the keys of a JSONL line (text, or prompt + completion; a cell is
 * always a string, so conversations need JSONL). */
static af_status lm_row(void *ud, long ln, const cJSON *row) {
    lm_reader *r = ud;
    af_lm_example ex;
    memset(&ex, 0, sizeof ex);
    af_status st = fill(r->c->path, ln, row, &ex);
    if (st != AF_OK) {
        af_lm_example_clear(&ex);
        return st;
    }
    return lm_push(r, r->c->path, ln, &ex);
}

af_status af_lm_corpus_read(const char *path, size_t max_line_bytes, af_lm_corpus **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "lm corpus: NULL out");
    *out = NULL;
    if (!path) return af_fail(AF_ERR_INVALID_ARG, "lm corpus: NULL path");
    return af_lm_corpus_read_as(path, af_data_file_delim(path), max_line_bytes, out);
}

af_status af_lm_corpus_read_as(const char *path, int delim, size_t max_line_bytes, af_lm_corpus **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "lm corpus: NULL out");
    *out = NULL;
    if (!path) return af_fail(AF_ERR_INVALID_ARG, "lm corpus: NULL path");
    size_t maxl = max_line_bytes ? max_line_bytes : AF_JSONL_DEFAULT_MAX_LINE;
    lm_reader r = {0};
    af_lm_corpus *c = calloc(1, sizeof *c);
    af_status st = AF_OK;
    if (!c || !(c->path = strdup(path))) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    r.c = c;
    FILE *fp = NULL;
    if (st == AF_OK && delim) st = af_csv_read(path, delim, maxl, lm_row, &r, NULL);
    else if (st == AF_OK && !(fp = af_fopen_regular(path, NULL))) st = AF_ERR_IO; /* never blocks; message recorded */
    char *line = NULL;
    size_t cap = 0;
    char *s = NULL;
    size_t len = 0;
    long ln = 0;
    while (fp && st == AF_OK && (st = af_jsonl_next_line(fp, path, maxl, &line, &cap, &ln, &s, &len)) == AF_OK && s) {
        af_lm_example ex;
        if ((st = af_lm_example_parse(path, ln, s, len, &ex)) != AF_OK) break;
        st = lm_push(&r, path, ln, &ex);
    }
    if (fp) {
        if (st == AF_OK && ferror(fp)) st = af_fail(AF_ERR_IO, "%s: read error: %s", path, strerror(errno));
        fclose(fp);
    }
    free(line);
    if (st == AF_OK && c->n == 0) st = af_fail(AF_ERR_FORMAT, "%s: no examples (empty file)", path);
    if (st != AF_OK) {
        af_lm_corpus_free(c);
        return st;
    }
    *out = c;
    return AF_OK;
}
