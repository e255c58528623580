/*
 * csv.c — CSV/TSV rows as JSON objects (libcsv, strict RFC 4180) and the encoding check of text
 * data files; see csv.h.
 *
 * libcsv (Debian libcsv-dev) does the quoting state machine; this file feeds it one physical line
 * at a time so that every row and every error carries its line number, bounds a row's size before
 * libcsv buffers it, and turns rows into cJSON objects keyed by the header.
 */
#include "formats/csv.h"
#include "core/fsutil.h"
#include "formats/jsonl.h"

#include <cJSON.h>
#include <csv.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int ends_with_ci(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

int af_data_file_delim(const char *path) {
    if (!path) return 0;
    if (ends_with_ci(path, ".csv")) return ',';
    if (ends_with_ci(path, ".tsv") || ends_with_ci(path, ".tab")) return '\t';
    return 0;
}

static af_status refuse_encoding(const char *path, const char *enc, int bom) {
    return af_fail(AF_ERR_FORMAT,
                   "%s: the file is %s, %s a byte-order mark; afinar reads UTF-8 data: convert it first, e.g. "
                   "iconv -f %s -t UTF-8 %s > OUT",
                   path, enc, bom ? "with" : "without", enc, path);
}

af_status af_text_check_encoding(const char *path, const unsigned char *h, size_t n, size_t *bom) {
    *bom = 0;
    if (n >= 4 && h[0] == 0xFF && h[1] == 0xFE && h[2] == 0 && h[3] == 0)
        return refuse_encoding(path, "UTF-32LE", 1);
    if (n >= 4 && h[0] == 0 && h[1] == 0 && h[2] == 0xFE && h[3] == 0xFF)
        return refuse_encoding(path, "UTF-32BE", 1);
    if (n >= 2 && h[0] == 0xFF && h[1] == 0xFE) return refuse_encoding(path, "UTF-16LE", 1);
    if (n >= 2 && h[0] == 0xFE && h[1] == 0xFF) return refuse_encoding(path, "UTF-16BE", 1);
    if (n >= 3 && h[0] == 0xEF && h[1] == 0xBB && h[2] == 0xBF) {
        *bom = 3;
        return AF_OK;
    }
    /* RFC 4627 §3: the first two characters are ASCII, so the NUL pattern of 4 bytes tells the encoding */
    if (n >= 4) {
        if (h[0] && !h[1] && !h[2] && !h[3]) return refuse_encoding(path, "UTF-32LE", 0);
        if (!h[0] && !h[1] && !h[2] && h[3]) return refuse_encoding(path, "UTF-32BE", 0);
        if (h[0] && !h[1] && h[2] && !h[3]) return refuse_encoding(path, "UTF-16LE", 0);
        if (!h[0] && h[1] && !h[2] && h[3]) return refuse_encoding(path, "UTF-16BE", 0);
    } else if (n >= 2) { /* a one-character first line: "x\0\n\0" is cut at the '\n' */
        if (h[0] && !h[1]) return refuse_encoding(path, "UTF-16LE", 0);
        if (!h[0] && h[1]) return refuse_encoding(path, "UTF-16BE", 0);
    }
    return AF_OK;
}

void af_json_key_list(const cJSON *obj, char *buf, size_t cap) {
    size_t o = 0;
    if (!cap) return;
    buf[0] = 0;
    const cJSON *e;
    int first = 1;
    cJSON_ArrayForEach(e, obj) {
        const char *k = e->string ? e->string : "";
        int w = snprintf(buf + o, cap - o, "%s'%.60s'", first ? "" : ", ", k);
        if (w < 0 || (size_t)w >= cap - o) {
            if (cap > 5) snprintf(buf + cap - 5, 5, "...");
            return;
        }
        o += (size_t)w;
        first = 0;
    }
    if (first) snprintf(buf, cap, "none");
}

typedef struct csv_state {
    const char *path;
    af_csv_row_fn fn;
    void *ud;
    cJSON *header;     /* array of names; NULL until the header row ended */
    cJSON *row;        /* the row being built (object), or the header (array) while header == NULL */
    int32_t n_header;  /* columns */
    int32_t n_fields;  /* cells of the current row so far */
    long ln;           /* line being fed */
    long row_start;    /* line where the current row began */
    long n_rows;       /* data rows handed to fn */
    af_status st;      /* first error */
} csv_state;

static void on_field(void *s, size_t n, void *d) {
    csv_state *c = d;
    if (c->st != AF_OK) return;
    const char *txt = s ? (const char *)s : "";
    if (!s) n = 0;
    if (!c->row && !(c->row = c->header ? cJSON_CreateObject() : cJSON_CreateArray())) {
        c->st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", c->path, c->ln);
        return;
    }
    if (!c->header) { /* the header row */
        const cJSON *e;
        cJSON_ArrayForEach(e, c->row) {
            if (strlen(e->valuestring) == n && !memcmp(e->valuestring, txt, n)) {
                c->st = af_fail(AF_ERR_FORMAT, "%s:%ld: duplicate column name \"%.60s\" in the header", c->path,
                                c->row_start, e->valuestring);
                return;
            }
        }
        char *name = malloc(n + 1);
        cJSON *v = NULL;
        if (name) {
            memcpy(name, txt, n);
            name[n] = 0;
            v = cJSON_CreateString(name);
            free(name);
        }
        if (!v || !cJSON_AddItemToArray(c->row, v)) {
            cJSON_Delete(v);
            c->st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", c->path, c->ln);
            return;
        }
        c->n_fields++;
        return;
    }
    if (c->n_fields < c->n_header) {
        const char *key = cJSON_GetArrayItem(c->header, c->n_fields)->valuestring;
        char *val = malloc(n + 1);
        cJSON *v = NULL;
        if (val) {
            memcpy(val, txt, n);
            val[n] = 0;
            v = cJSON_CreateString(val);
            free(val);
        }
        if (!v || !cJSON_AddItemToObject(c->row, key, v)) {
            cJSON_Delete(v);
            c->st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", c->path, c->ln);
            return;
        }
    }
    c->n_fields++;
}

static void on_row(int term, void *d) {
    (void)term;
    csv_state *c = d;
    if (c->st != AF_OK) return;
    if (!c->header) {
        c->header = c->row;
        c->n_header = c->n_fields;
    } else {
        if (c->n_fields != c->n_header)
            c->st = af_fail(AF_ERR_FORMAT, "%s:%ld: row has %d field%s but the header has %d%s", c->path, c->row_start,
                            (int)c->n_fields, c->n_fields == 1 ? "" : "s", (int)c->n_header,
                            c->n_fields > c->n_header ? " (a delimiter inside an unquoted field? quote the field)" : "");
        else
            c->n_rows++, c->st = c->fn(c->ud, c->row_start, c->row);
        cJSON_Delete(c->row);
    }
    c->row = NULL;
    c->n_fields = 0;
    c->row_start = 0;
}

static int no_space(unsigned char ch) {
    (void)ch;
    return 0; /* RFC 4180: spaces are part of a field */
}

/* Rows end at LF only (a CR before it is dropped when the line is fed): a lone CR is data, and a
 * row never starts in the middle of a physical line, so line numbers are exact. */
static int is_lf(unsigned char ch) { return ch == '\n'; }

af_status af_csv_read(const char *path, int delim, size_t max_row_bytes, af_csv_row_fn fn, void *ud, cJSON **header) {
    if (header) *header = NULL;
    if (!path || !fn || (delim != ',' && delim != '\t'))
        return af_fail(AF_ERR_INVALID_ARG, "af_csv_read: NULL path/callback or delimiter not ',' / TAB");
    const size_t maxr = max_row_bytes ? max_row_bytes : AF_JSONL_DEFAULT_MAX_LINE;
    FILE *fp = af_fopen_regular(path, NULL); /* never blocks; message recorded */
    if (!fp) return AF_ERR_IO;
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
        fclose(fp);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    csv_set_delim(&p, (unsigned char)delim);
    csv_set_space_func(&p, no_space);
    csv_set_term_func(&p, is_lf);
    csv_state c = {.path = path, .fn = fn, .ud = ud, .st = AF_OK};
    char *line = NULL;
    size_t cap = 0, row_bytes = 0;
    ssize_t len;
    while (c.st == AF_OK && (len = af_jsonl_read_line(fp, &line, &cap, maxr)) != -1) {
        c.ln++;
        if (len == -2) {
            c.st = af_fail(AF_ERR_FORMAT, "%s:%ld: row longer than %zu bytes", path, c.row_start ? c.row_start : c.ln,
                           maxr);
            break;
        }
        if (len == -3) {
            c.st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, c.ln);
            break;
        }
        const char *s = line;
        size_t n = (size_t)len;
        if (c.ln == 1) {
            size_t bom = 0;
            if ((c.st = af_text_check_encoding(path, (const unsigned char *)s, n, &bom)) != AF_OK) break;
            s += bom;
            n -= bom;
        }
        if (memchr(s, 0, n)) {
            c.st = af_fail(AF_ERR_FORMAT, "%s:%ld: NUL byte in the data (a binary file, or not UTF-8?)", path, c.ln);
            break;
        }
        if (!c.row_start) { /* between rows: skip empty lines, else a row begins here */
            size_t k = 0;
            while (k < n && (s[k] == '\r' || s[k] == '\n')) k++;
            if (k == n) continue;
            c.row_start = c.ln;
            row_bytes = 0;
        }
        row_bytes += n;
        if (row_bytes > maxr) {
            c.st = af_fail(AF_ERR_FORMAT, "%s:%ld: row longer than %zu bytes", path, c.row_start, maxr);
            break;
        }
        const int crlf = n >= 2 && s[n - 2] == '\r' && s[n - 1] == '\n';
        const size_t body = crlf ? n - 2 : n >= 1 && s[n - 1] == '\r' ? n - 1 : n; /* CRLF (or a final CR) -> LF */
        if ((csv_parse(&p, s, body, on_field, on_row, &c) != body ||
             (crlf && csv_parse(&p, "\n", 1, on_field, on_row, &c) != 1)) && c.st == AF_OK) {
            c.st = csv_error(&p) == CSV_EPARSE
                       ? af_fail(AF_ERR_FORMAT,
                                 "%s:%ld: malformed quoting (a '\"' inside an unquoted field, or text after a closing "
                                 "quote): quote the whole field and double the quotes inside it (RFC 4180)",
                                 path, c.ln)
                       : af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, c.ln);
        }
    }
    if (c.st == AF_OK && ferror(fp)) c.st = af_fail(AF_ERR_IO, "%s: read error: %s", path, strerror(errno));
    if (c.st == AF_OK) {
        const long open_at = c.row_start;
        if (csv_fini(&p, on_field, on_row, &c) != 0 && c.st == AF_OK)
            c.st = af_fail(AF_ERR_FORMAT, "%s:%ld: a quoted field of the row starting on this line is not closed at the "
                           "end of the file", path, open_at);
    }
    if (c.st == AF_OK && !c.header) c.st = af_fail(AF_ERR_FORMAT, "%s: empty file (no header row)", path);
    if (c.st == AF_OK && c.n_rows == 0) c.st = af_fail(AF_ERR_FORMAT, "%s: no data rows (only a header)", path);
    csv_free(&p);
    free(line);
    fclose(fp);
    cJSON_Delete(c.row);
    if (header) *header = c.header;
    else cJSON_Delete(c.header);
    return c.st;
}
