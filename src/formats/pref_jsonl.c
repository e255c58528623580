/*
 * pref_jsonl.c — preference pairs in TRL's formats, read into a causal-LM corpus of chosen and
 * rejected examples (pref_jsonl.h).
 */
#include "formats/pref_jsonl.h"

#include "core/fsutil.h"
#include "formats/csv.h"
#include "formats/jsonl.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *af_pref_format_name(af_pref_format f) {
    switch (f) {
    case AF_PREF_EXPLICIT: return "prompt/chosen/rejected";
    case AF_PREF_IMPLICIT: return "chosen/rejected (implicit prompt)";
    case AF_PREF_CHAT: return "prompt/chosen/rejected (messages)";
    case AF_PREF_CHAT_IMPLICIT: return "chosen/rejected (messages, implicit prompt)";
    }
    return "?";
}

/* The implicit prompt of two strings: the length of their common prefix by TRL's rule (a space just
 * before the first difference goes to the completions; equal strings or one a prefix of the other:
 * one character before the shorter's end), moved back to a UTF-8 character boundary. */
static size_t common_prefix_str(const char *a, size_t la, const char *b, size_t lb) {
    const size_t m = la < lb ? la : lb;
    if (m == 0) return 0;
    size_t i = 0;
    while (i < m && a[i] == b[i]) i++;
    if (i == m) i = m - 1; /* no difference within the shorter one: TRL's loop ends at its last index */
    else if (i > 0 && a[i - 1] == ' ') i--;
    while (i > 0 && ((unsigned char)a[i] & 0xC0) == 0x80) i--; /* never inside a UTF-8 sequence */
    return i;
}

static int same_msg(const cJSON *x, const cJSON *y) {
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(x, "role"), *ry = cJSON_GetObjectItemCaseSensitive(y, "role");
    const cJSON *cx = cJSON_GetObjectItemCaseSensitive(x, "content"), *cy = cJSON_GetObjectItemCaseSensitive(y, "content");
    return !strcmp(rx->valuestring, ry->valuestring) && !strcmp(cx->valuestring, cy->valuestring);
}

/* One side of a string pair as a prompt/completion example (copies). */
static af_status str_example(const char *P, long ln, const char *p, size_t lp, const char *c, size_t lc,
                             af_lm_example *ex) {
    memset(ex, 0, sizeof *ex);
    if (!(ex->buf = malloc(lp + lc + 2))) return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    memcpy(ex->buf, p, lp);
    ex->buf[lp] = 0;
    memcpy(ex->buf + lp + 1, c, lc);
    ex->buf[lp + 1 + lc] = 0;
    ex->format = AF_LM_PROMPT_COMPLETION;
    ex->line_no = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
    ex->text = ex->buf;
    ex->text_len = lp;
    ex->completion = ex->buf + lp + 1;
    ex->completion_len = lc;
    return AF_OK;
}

/* One side of a conversation pair: the first `np` messages of `prompt` (a list; NULL: none) then the
 * messages of `side` from index `skip` on, as a prompt/completion (messages) example. The
 * completion needs an assistant message (field `f`). */
static af_status chat_example(const char *P, long ln, const cJSON *prompt, int32_t np, const cJSON *side, int32_t skip,
                              const char *f, af_lm_example *ex) {
    memset(ex, 0, sizeof *ex);
    const int32_t ns = cJSON_GetArraySize(side);
    int32_t n = np + ns - skip, na = 0;
    size_t bytes = 0;
    for (int32_t k = 0; k < np; k++)
        bytes += strlen(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(prompt, k), "content")->valuestring) + 1;
    for (int32_t k = skip; k < ns; k++) {
        const cJSON *m = cJSON_GetArrayItem(side, k);
        bytes += strlen(cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring) + 1;
        na += !strcmp(cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, "assistant");
    }
    if (!na)
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': no assistant message after the prompt (nothing to compare)",
                       P, ln, f);
    ex->msgs = malloc((size_t)n * sizeof *ex->msgs);
    ex->buf = malloc(bytes ? bytes : 1);
    if (!ex->msgs || !ex->buf) {
        af_lm_example_clear(ex);
        return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    }
    /* copy the selected messages through a detached list of references (af_lm_msgs_copy walks a list) */
    cJSON *sel = cJSON_CreateArray();
    int ok = sel != NULL;
    for (int32_t k = 0; ok && k < np; k++) ok = cJSON_AddItemReferenceToArray(sel, cJSON_GetArrayItem(prompt, k));
    for (int32_t k = skip; ok && k < ns; k++) ok = cJSON_AddItemReferenceToArray(sel, cJSON_GetArrayItem(side, k));
    if (!ok) {
        cJSON_Delete(sel);
        af_lm_example_clear(ex);
        return af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", P, ln);
    }
    int32_t k = 0;
    size_t o = 0;
    af_lm_msgs_copy(ex, sel, &k, &o);
    cJSON_Delete(sel);
    ex->format = AF_LM_CHAT_PC;
    ex->n_msgs = n;
    ex->n_prompt_msgs = np;
    ex->line_no = (int32_t)(ln > INT32_MAX ? INT32_MAX : ln);
    return AF_OK;
}

/* One pair from a parsed line (or a table row) into ex[0] (chosen) and ex[1] (rejected). */
static af_status pair_fill(const char *P, long ln, const cJSON *root, af_lm_example ex[2], af_pref_format *fmt) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "chosen");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "rejected");
    memset(ex, 0, 2 * sizeof *ex);
    if (!c || !r) {
        const char *miss = !c ? "chosen" : "rejected";
        const int sft = cJSON_GetObjectItemCaseSensitive(root, "completion") || cJSON_GetObjectItemCaseSensitive(root, "messages") ||
                        cJSON_GetObjectItemCaseSensitive(root, "text");
        char have[300];
        af_json_key_list(root, have, sizeof have);
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': missing: a preference line needs 'chosen' and 'rejected' "
                       "(and 'prompt' unless it is their common prefix); it has %s%s", P, ln, miss, have,
                       sft ? " (supervised data? use --task causal-lm)" : "");
    }
    const int str = cJSON_IsString(c);
    if (!str && !cJSON_IsArray(c))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'chosen': expected a string or a list of messages, got %s", P, ln,
                       af_json_type_name(c));
    if (str ? !cJSON_IsString(r) : !cJSON_IsArray(r))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'rejected': expected %s like 'chosen', got %s", P, ln,
                       str ? "a string" : "a list of messages", af_json_type_name(r));
    if (p && (str ? !cJSON_IsString(p) : !cJSON_IsArray(p)))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field 'prompt': expected %s like 'chosen', got %s", P, ln,
                       str ? "a string" : "a list of messages", af_json_type_name(p));
    af_status st;
    if (str) {
        const char *cs = c->valuestring, *rs = r->valuestring;
        const size_t lc = strlen(cs), lr = strlen(rs);
        if (p) {
            *fmt = AF_PREF_EXPLICIT;
            const size_t lp = strlen(p->valuestring);
            st = str_example(P, ln, p->valuestring, lp, cs, lc, &ex[0]);
            if (st == AF_OK) st = str_example(P, ln, p->valuestring, lp, rs, lr, &ex[1]);
        } else {
            *fmt = AF_PREF_IMPLICIT;
            const size_t k = common_prefix_str(cs, lc, rs, lr);
            st = str_example(P, ln, cs, k, cs + k, lc - k, &ex[0]);
            if (st == AF_OK) st = str_example(P, ln, cs, k, rs + k, lr - k, &ex[1]);
        }
    } else {
        int32_t n = 0, na = 0;
        size_t bytes = 0;
        if (p) AF_TRY(af_lm_msgs_check(P, ln, "prompt", p, &n, &bytes, &na));
        AF_TRY(af_lm_msgs_check(P, ln, "chosen", c, &n, &bytes, &na));
        AF_TRY(af_lm_msgs_check(P, ln, "rejected", r, &n, &bytes, &na));
        if (p) {
            *fmt = AF_PREF_CHAT;
            const int32_t np = cJSON_GetArraySize(p);
            st = chat_example(P, ln, p, np, c, 0, "chosen", &ex[0]);
            if (st == AF_OK) st = chat_example(P, ln, p, np, r, 0, "rejected", &ex[1]);
        } else {
            *fmt = AF_PREF_CHAT_IMPLICIT;
            const int32_t nc = cJSON_GetArraySize(c), nr = cJSON_GetArraySize(r), m = nc < nr ? nc : nr;
            int32_t k = 0;
            while (k < m && same_msg(cJSON_GetArrayItem(c, k), cJSON_GetArrayItem(r, k))) k++;
            if (k == m) k = m - 1;
            st = chat_example(P, ln, c, k, c, k, "chosen", &ex[0]);
            if (st == AF_OK) st = chat_example(P, ln, c, k, r, k, "rejected", &ex[1]);
        }
    }
    if (st != AF_OK) af_lm_example_clear(&ex[0]), af_lm_example_clear(&ex[1]);
    return st;
}

typedef struct pref_reader {
    af_lm_corpus *c;
    int32_t ncap, first_line;
    af_pref_format fmt;
} pref_reader;

static af_status pref_push(pref_reader *R, const char *path, long ln, const cJSON *root) {
    af_lm_corpus *c = R->c;
    af_lm_example ex[2];
    af_pref_format f = AF_PREF_EXPLICIT;
    AF_TRY(pair_fill(path, ln, root, ex, &f));
    af_status st = AF_OK;
    if (c->n == 0) {
        R->fmt = f;
        R->first_line = ex[0].line_no;
    } else if (f != R->fmt)
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: field 'chosen': line is '%s' but line %d is '%s' (one format per file)", path,
                     ln, af_pref_format_name(f), (int)R->first_line, af_pref_format_name(R->fmt));
    if (st == AF_OK && c->n >= INT32_MAX - 3) st = af_fail(AF_ERR_RANGE, "%s:%ld: too many pairs", path, ln);
    if (st == AF_OK && c->n + 2 > R->ncap) {
        int32_t nc = R->ncap ? (R->ncap > INT32_MAX / 2 ? INT32_MAX - 1 : R->ncap * 2) : 256;
        af_lm_example *ne = af_realloc_array(c->ex, (size_t)nc, sizeof *ne);
        if (!ne) st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
        else c->ex = ne, R->ncap = nc;
    }
    if (st != AF_OK) {
        af_lm_example_clear(&ex[0]), af_lm_example_clear(&ex[1]);
        return st;
    }
    c->ex[c->n++] = ex[0];
    c->ex[c->n++] = ex[1];
    return AF_OK;
}

static af_status pref_row(void *ud, long ln, const cJSON *row) {
    pref_reader *R = ud;
    return pref_push(R, R->c->path, ln, row);
}

af_status af_pref_corpus_read(const char *path, int delim, size_t max_line_bytes, af_lm_corpus **out,
                              af_pref_format *fmt) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "preference data: NULL out");
    *out = NULL;
    if (!path) return af_fail(AF_ERR_INVALID_ARG, "preference data: NULL path");
    if (delim < 0) delim = af_data_file_delim(path);
    const size_t maxl = max_line_bytes ? max_line_bytes : AF_JSONL_DEFAULT_MAX_LINE;
    pref_reader R = {0};
    af_lm_corpus *c = calloc(1, sizeof *c);
    af_status st = AF_OK;
    if (!c || !(c->path = strdup(path))) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    R.c = c;
    FILE *fp = NULL;
    if (st == AF_OK && delim) st = af_csv_read(path, delim, maxl, pref_row, &R, NULL);
    else if (st == AF_OK && !(fp = af_fopen_regular(path, NULL))) st = AF_ERR_IO; /* message recorded */
    char *line = NULL, *s = NULL;
    size_t cap = 0, len = 0;
    long ln = 0;
    while (fp && st == AF_OK && (st = af_jsonl_next_line(fp, path, maxl, &line, &cap, &ln, &s, &len)) == AF_OK && s) {
        cJSON *root = NULL;
        if ((st = af_jsonl_parse_object(path, ln, s, len, &root)) != AF_OK) break;
        st = pref_push(&R, path, ln, root);
        cJSON_Delete(root);
    }
    if (fp) {
        if (st == AF_OK && ferror(fp)) st = af_fail(AF_ERR_IO, "%s: read error: %s", path, strerror(errno));
        fclose(fp);
    }
    free(line);
    if (st == AF_OK && c->n == 0) st = af_fail(AF_ERR_FORMAT, "%s: no preference pairs (empty file)", path);
    if (st != AF_OK) {
        af_lm_corpus_free(c);
        return st;
    }
    c->format = c->ex[0].format;
    if (fmt) *fmt = R.fmt;
    *out = c;
    return AF_OK;
}
