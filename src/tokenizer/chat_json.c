/*
 * chat_json.c — JSON values written as the chat templates' Jinja `tojson` filter writes them in
 * transformers (Python's json.dumps(x, ensure_ascii=False, indent=None|k), tok_internal.h): the
 * value is parsed (RFC 8259; nesting limited to 64 levels) and written back with ", " and ": "
 * separators (indent k: one member per line, "," at line ends), keys in their given order, strings
 * with only \" \\ \n \r \t \b \f and \u00XX (other control characters) escaped and everything
 * else as UTF-8, integers as written ("-0" as "0"), other numbers as Python's repr() of the double.
 * Used by the tool turns of chat_tools.c; checked against transformers by tests/test_chat_families.c.
 */
#include "tokenizer/tok_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON as Python's json.dumps writes it ---- */

#define PJ_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t n, i;
    af_chat_doc *d; /* NULL: validate only */
    int indent;     /* 0: one line with ", " / ": " separators; > 0: json.dumps(indent=k) */
    const char *err;
    int raw;        /* strings: the decoded text without quotes or escapes (Jinja's string output) */
} pj;

static void pj_out(pj *p, const char *s, size_t n) {
    if (p->d) af_chat_put(p->d, s, n);
}

static void pj_ws(pj *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static void pj_newline(pj *p, int depth) {
    if (!p->indent) return;
    pj_out(p, "\n", 1);
    for (int k = 0; k < depth * p->indent; k++) pj_out(p, " ", 1);
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return 0;
        *v = *v * 16 + (unsigned)h;
    }
    return 1;
}

/* A string: escapes decoded, written back as json.dumps(ensure_ascii=False) does (\" \\ \n \r \t \b
 * \f, other control characters \u00XX, everything else as UTF-8). Lone surrogates are refused
 * (Python would keep them, and they have no UTF-8 form). */
static int pj_string(pj *p) {
    if (p->i >= p->n || p->s[p->i] != '"') return p->err = "expected a string", 0;
    p->i++;
    if (!p->raw) pj_out(p, "\"", 1);
    while (p->i < p->n && p->s[p->i] != '"') {
        unsigned char c = (unsigned char)p->s[p->i];
        unsigned cp;
        if (c < 0x20) return p->err = "control character inside a string", 0;
        if (c != '\\') {
            int k = af_utf8_valid_len((const unsigned char *)p->s + p->i, p->n - p->i);
            if (k <= 0) return p->err = "invalid UTF-8 inside a string", 0;
            pj_out(p, p->s + p->i, (size_t)k);
            p->i += (size_t)k;
            continue;
        }
        if (p->i + 1 >= p->n) return p->err = "unterminated escape", 0;
        char e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 'n': cp = 10; break;
        case 'r': cp = 13; break;
        case 't': cp = 9; break;
        case 'u':
            if (p->i + 4 > p->n || !hex4(p->s + p->i, &cp)) return p->err = "bad \\u escape", 0;
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || !hex4(p->s + p->i + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return p->err = "lone UTF-16 surrogate in a \\u escape", 0;
                p->i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return p->err = "lone UTF-16 surrogate in a \\u escape", 0;
            }
            break;
        default: return p->err = "unknown escape", 0;
        }
        char o[8];
        size_t ol = 0;
        if (p->raw && cp < 0x80) { o[0] = (char)cp; ol = 1; }
        else if (cp == '"' || cp == '\\') { o[0] = '\\'; o[1] = (char)cp; ol = 2; }
        else if (cp == 10) { memcpy(o, "\\n", 2); ol = 2; }
        else if (cp == 13) { memcpy(o, "\\r", 2); ol = 2; }
        else if (cp == 9) { memcpy(o, "\\t", 2); ol = 2; }
        else if (cp == 8) { memcpy(o, "\\b", 2); ol = 2; }
        else if (cp == 12) { memcpy(o, "\\f", 2); ol = 2; }
        else if (cp < 0x20) ol = (size_t)snprintf(o, sizeof o, "\\u%04x", cp);
        else if (cp < 0x80) { o[0] = (char)cp; ol = 1; }
        else if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); ol = 2; }
        else if (cp < 0x10000) {
            o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
            ol = 3;
        } else {
            o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
            ol = 4;
        }
        pj_out(p, o, ol);
    }
    if (p->i >= p->n) return p->err = "unterminated string", 0;
    p->i++;
    if (!p->raw) pj_out(p, "\"", 1);
    return 1;
}

/* Python's repr() of a finite double (the shortest digits that read back to v; fixed notation for
 * decimal exponents -4 <= e < 16, always with a fractional part, else d.ddde+XX), into o[40]. */
static void py_float_repr(double v, char *o) {
    char b[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*e", prec - 1, v);
        if (strtod(b, NULL) == v) break;
    }
    const char *q = b;
    int neg = *q == '-';
    if (neg) q++;
    char dig[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 20) dig[nd++] = *q;
    int e = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    size_t w = 0;
    if (neg) o[w++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            o[w++] = '0';
            o[w++] = '.';
            for (int k = 0; k < -e - 1; k++) o[w++] = '0';
            for (int k = 0; k < nd; k++) o[w++] = dig[k];
        } else {
            for (int k = 0; k <= e; k++) o[w++] = k < nd ? dig[k] : '0';
            o[w++] = '.';
            if (nd > e + 1) for (int k = e + 1; k < nd; k++) o[w++] = dig[k];
            else o[w++] = '0';
        }
        o[w] = 0;
    } else {
        o[w++] = dig[0];
        if (nd > 1) {
            o[w++] = '.';
            for (int k = 1; k < nd; k++) o[w++] = dig[k];
        }
        snprintf(o + w, 40 - w, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

/* A number: an integer literal as Python's int prints it ("-0" -> "0"), any other as the repr of
 * the double it reads as. */
static int pj_number(pj *p) {
    size_t b = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return p->err = "bad number", 0;
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    int is_float = 0;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return p->err = "bad number", 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return p->err = "bad number", 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    size_t len = p->i - b;
    if (!is_float) {
        if (len == 2 && p->s[b] == '-' && p->s[b + 1] == '0') pj_out(p, "0", 1);
        else pj_out(p, p->s + b, len);
        return 1;
    }
    if (len > 300) return p->err = "number literal too long", 0;
    char lit[320], o[40];
    memcpy(lit, p->s + b, len);
    lit[len] = 0;
    double v = strtod(lit, NULL);
    if (!isfinite(v)) return p->err = "number out of the double range", 0;
    py_float_repr(v, o);
    pj_out(p, o, strlen(o));
    return 1;
}

static int pj_value(pj *p, int depth) {
    if (depth > PJ_MAX_DEPTH) return p->err = "nested deeper than 64 levels", 0;
    pj_ws(p);
    if (p->i >= p->n) return p->err = "unexpected end", 0;
    char c = p->s[p->i];
    if (c == '"') return pj_string(p);
    if (c == '{' || c == '[') {
        const char close = c == '{' ? '}' : ']';
        p->i++;
        pj_out(p, &c, 1);
        pj_ws(p);
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            pj_out(p, &close, 1);
            return 1;
        }
        for (int first = 1;; first = 0) {
            if (!first) pj_out(p, p->indent ? "," : ", ", p->indent ? 1 : 2);
            pj_newline(p, depth + 1);
            if (c == '{') {
                pj_ws(p);
                if (!pj_string(p)) return 0;
                pj_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') return p->err = "expected ':'", 0;
                p->i++;
                pj_out(p, ": ", 2);
            }
            if (!pj_value(p, depth + 1)) return 0;
            pj_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == close) {
                p->i++;
                pj_newline(p, depth);
                pj_out(p, &close, 1);
                return 1;
            }
            return p->err = c == '{' ? "expected ',' or '}'" : "expected ',' or ']'", 0;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return pj_number(p);
    static const char *const lit[3] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lit[k]);
        if (p->n - p->i >= l && !memcmp(p->s + p->i, lit[k], l)) {
            pj_out(p, lit[k], l);
            p->i += l;
            return 1;
        }
    }
    return p->err = "unexpected character", 0;
}

const char *af_chat_json_check(const char *s, size_t n, char want, size_t *at) {
    pj p = {s, n, 0, NULL, 0, NULL, 0};
    pj_ws(&p);
    if (want && (p.i >= n || s[p.i] != want)) {
        *at = p.i;
        return want == '{' ? "expected a JSON object" : "expected a JSON array";
    }
    if (pj_value(&p, 0)) {
        pj_ws(&p);
        if (p.i == n) return NULL;
        p.err = "text after the JSON value";
    }
    *at = p.i;
    return p.err;
}

void af_chat_put_json(af_chat_doc *d, const char *s, size_t n, int indent) {
    pj p = {s, n, 0, d, indent, NULL, 0};
    (void)pj_value(&p, 0); /* validated before rendering (af_chat_tools_check) */
}

void af_chat_put_json_string(af_chat_doc *d, const char *s, size_t n) {
    af_chat_put(d, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char o[8];
        size_t ol = 1;
        o[0] = (char)c;
        if (c == '"' || c == '\\') { o[0] = '\\'; o[1] = (char)c; ol = 2; }
        else if (c == '\n') { memcpy(o, "\\n", 2); ol = 2; }
        else if (c == '\r') { memcpy(o, "\\r", 2); ol = 2; }
        else if (c == '\t') { memcpy(o, "\\t", 2); ol = 2; }
        else if (c == 8) { memcpy(o, "\\b", 2); ol = 2; }
        else if (c == 12) { memcpy(o, "\\f", 2); ol = 2; }
        else if (c < 0x20) ol = (size_t)snprintf(o, sizeof o, "\\u%04x", c);
        af_chat_put(d, o, ol);
    }
    af_chat_put(d, "\"", 1);
}

void af_chat_put_json_raw(af_chat_doc *d, const char *s, size_t n) {
    pj p = {s, n, 0, d, 0, NULL, 1};
    (void)pj_string(&p);
}

int32_t af_chat_json_members(const char *s, size_t n, af_chat_json_member *m, int32_t max) {
    pj p = {s, n, 0, NULL, 0, NULL, 0};
    pj_ws(&p);
    if (p.i >= n || s[p.i] != '{') return 0;
    p.i++;
    int32_t k = 0;
    for (;;) {
        pj_ws(&p);
        if (p.i >= n || s[p.i] != '"') break;
        size_t kb = p.i;
        if (!pj_string(&p)) break;
        size_t ke = p.i;
        pj_ws(&p);
        if (p.i >= n || s[p.i] != ':') break;
        p.i++;
        pj_ws(&p);
        size_t vb = p.i;
        if (!pj_value(&p, 1)) break;
        if (k < max) m[k] = (af_chat_json_member){kb, ke, vb, p.i};
        k++;
        pj_ws(&p);
        if (p.i < n && s[p.i] == ',') p.i++;
    }
    return k;
}

int af_chat_json_key_is(const char *s, const af_chat_json_member *m, const char *key) {
    af_chat_doc d = {0};
    af_chat_put(&d, "", 0);
    af_chat_put_json_raw(&d, s + m->kb, m->ke - m->kb);
    int eq = !d.oom && !strcmp(d.text, key) && d.len == strlen(key);
    af_chat_doc_free(&d);
    return eq;
}

/* Spans [b, e) of the elements of the JSON array s[0..n) (validated), up to max; returns the count. */
static int32_t pj_items(const char *s, size_t n, size_t *b, size_t *e, int32_t max) {
    pj p = {s, n, 0, NULL, 0, NULL, 0};
    pj_ws(&p);
    if (p.i >= n || s[p.i] != '[') return 0;
    p.i++;
    int32_t k = 0;
    for (;;) {
        pj_ws(&p);
        if (p.i >= n || s[p.i] == ']') break;
        size_t st = p.i;
        if (!pj_value(&p, 1)) break;
        if (k < max) {
            b[k] = st;
            e[k] = p.i;
        }
        k++;
        pj_ws(&p);
        if (p.i < n && s[p.i] == ',') p.i++;
    }
    return k;
}

void af_chat_tools_spans(const af_chat_extra *x, size_t *b, size_t *e, int32_t max) {
    if (x && x->tools && x->tools_len) (void)pj_items(x->tools, x->tools_len, b, e, max);
}

int32_t af_chat_tools_count(const af_chat_extra *x) {
    if (!x || !x->tools || !x->tools_len) return 0;
    size_t b, e;
    return pj_items(x->tools, x->tools_len, &b, &e, 0);
}

/* Writes each tool of x->tools with `before` / `after` around it, as json.dumps(indent) writes it. */
void af_chat_put_tools(af_chat_doc *d, const af_chat_extra *x, const char *before, const char *after, int indent) {
    int32_t n = af_chat_tools_count(x);
    if (n <= 0) return;
    size_t *b = malloc(sizeof *b * (size_t)n), *e = malloc(sizeof *e * (size_t)n);
    if (!b || !e) {
        d->oom = 1;
        free(b);
        free(e);
        return;
    }
    pj_items(x->tools, x->tools_len, b, e, n);
    for (int32_t k = 0; k < n; k++) {
        af_chat_put(d, before, strlen(before));
        af_chat_put_json(d, x->tools + b[k], e[k] - b[k], indent);
        af_chat_put(d, after, strlen(after));
    }
    free(b);
    free(e);
}

