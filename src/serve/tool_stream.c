/* tool_stream.c — tool calls streamed as they are generated (tools.h, srv_tool_stream_step): the
 * answer so far is read in the call format of the request (the generic <tool_call> blocks and the
 * layouts' own: Qwen <tool_call> blocks, Llama 3.x's whole-answer JSON, Mistral Nemo's
 * [TOOL_CALLS][...], mistral-v7's [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}), and what is certain is
 * sent as OpenAI's chunk deltas: the text before the first call (never a tail that may begin a call
 * marker, nor trailing whitespace), each call's first delta {index, id, type, function: {name,
 * arguments: ""}} once its name is complete and offered by "tools", then pieces of its arguments.
 *
 * The arguments are sent as cJSON prints them (cJSON_PrintUnformatted of the parsed object, which is
 * what the non-streamed answer holds): the text is re-printed while it is read — whitespace between
 * tokens dropped, strings decoded and escaped again as cJSON escapes them (a character is sent once
 * its escape is complete), a number once it has ended (printed by cJSON), true/false/null once
 * whole. At the end of the answer the whole text is parsed as the non-streamed answer is
 * (srv_tools_extract) and what was not sent yet is sent, so the deltas of a stream add up to the
 * non-streamed answer's tool_calls (and its content, up to whitespace at the content's start). */
#include "serve/tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- JSON re-printed as cJSON prints it */

typedef struct obuf {
    char *p;
    size_t n, cap;
    int oom;
} obuf;

static void put(obuf *o, const char *s, size_t n) {
    if (o->oom) return;
    if (o->n + n + 1 > o->cap) {
        size_t c = o->cap ? o->cap : 64;
        while (c < o->n + n + 1) c *= 2;
        char *t = realloc(o->p, c);
        if (!t) {
            o->oom = 1;
            return;
        }
        o->p = t, o->cap = c;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = 0;
}

/* cJSON skips every byte <= 32 between tokens. */
static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (unsigned char)s[i] <= 32) i++;
    return i;
}

enum { R_BAD = -1, R_MORE = 0, R_DONE = 1 };

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        const int h = hexval((unsigned char)s[k]);
        if (h < 0) return 0;
        *v = *v * 16 + (unsigned)h;
    }
    return 1;
}

/* One decoded byte as cJSON's print_string writes it. */
static void put_char(obuf *o, unsigned char c) {
    char e[8];
    switch (c) {
    case '"': put(o, "\\\"", 2); return;
    case '\\': put(o, "\\\\", 2); return;
    case '\b': put(o, "\\b", 2); return;
    case '\f': put(o, "\\f", 2); return;
    case '\n': put(o, "\\n", 2); return;
    case '\r': put(o, "\\r", 2); return;
    case '\t': put(o, "\\t", 2); return;
    default:
        if (c < 32) {
            snprintf(e, sizeof e, "\\u%04x", c);
            put(o, e, 6);
        } else {
            put(o, (const char *)&c, 1);
        }
    }
}

/* A string at s[*i] == '"': its characters as far as they are complete. R_DONE past the closing
 * quote. A NUL (raw or \u0000) ends cJSON's C string: nothing after it is printed. */
static int rp_string(const char *s, size_t n, size_t *i, obuf *o) {
    size_t k = *i + 1;
    int cut = 0;
    put(o, "\"", 1);
    while (k < n) {
        const unsigned char c = (unsigned char)s[k];
        if (c == '"') {
            put(o, "\"", 1);
            *i = k + 1;
            return R_DONE;
        }
        if (c != '\\') {
            cut |= c == 0;
            if (!cut) put_char(o, c);
            k++;
            continue;
        }
        if (k + 1 >= n) break;
        const char e = s[k + 1];
        const char *simple = strchr("bfnrt\"\\/", e);
        if (e && simple) {
            static const char dec[] = "\b\f\n\r\t\"\\/";
            if (!cut) put_char(o, (unsigned char)dec[simple - "bfnrt\"\\/"]);
            k += 2;
            continue;
        }
        if (e != 'u') return R_BAD;
        if (k + 6 > n) break;
        unsigned u, lo = 0;
        if (!hex4(s + k + 2, &u)) return R_BAD;
        size_t used = 6;
        if (u >= 0xD800 && u <= 0xDBFF) { /* a surrogate pair: wait for its second half */
            if (k + 12 > n) break;
            if (s[k + 6] != '\\' || s[k + 7] != 'u' || !hex4(s + k + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) return R_BAD;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
            return R_BAD;
        }
        unsigned char b[4];
        int nb;
        if (u < 0x80) b[0] = (unsigned char)u, nb = 1;
        else if (u < 0x800) b[0] = (unsigned char)(0xC0 | u >> 6), b[1] = (unsigned char)(0x80 | (u & 63)), nb = 2;
        else if (u < 0x10000)
            b[0] = (unsigned char)(0xE0 | u >> 12), b[1] = (unsigned char)(0x80 | ((u >> 6) & 63)),
            b[2] = (unsigned char)(0x80 | (u & 63)), nb = 3;
        else
            b[0] = (unsigned char)(0xF0 | u >> 18), b[1] = (unsigned char)(0x80 | ((u >> 12) & 63)),
            b[2] = (unsigned char)(0x80 | ((u >> 6) & 63)), b[3] = (unsigned char)(0x80 | (u & 63)), nb = 4;
        cut |= u == 0;
        for (int q = 0; q < nb && !cut; q++) put_char(o, b[q]);
        k += used;
    }
    return R_MORE;
}

/* One JSON value at s[*i] (whitespace skipped first): its re-printed form as far as it is certain
 * into o; R_DONE with *i past it, R_MORE when s ends inside it, R_BAD when it is not JSON. */
static int rp_value(const char *s, size_t n, size_t *i, obuf *o, int depth) {
    size_t k = skip_ws(s, n, *i);
    if (k >= n) return R_MORE;
    if (depth > 64) return R_BAD;
    const char c = s[k];
    if (c == '"') {
        *i = k;
        return rp_string(s, n, i, o);
    }
    if (c == '{' || c == '[') {
        const char close = c == '{' ? '}' : ']';
        put(o, &c, 1);
        k = skip_ws(s, n, k + 1);
        if (k >= n) return R_MORE;
        if (s[k] == close) {
            put(o, &close, 1);
            *i = k + 1;
            return R_DONE;
        }
        for (;;) {
            int r;
            if (c == '{') {
                k = skip_ws(s, n, k);
                if (k >= n) return R_MORE;
                if (s[k] != '"') return R_BAD;
                if ((r = rp_string(s, n, &k, o)) != R_DONE) return r;
                k = skip_ws(s, n, k);
                if (k >= n) return R_MORE;
                if (s[k] != ':') return R_BAD;
                put(o, ":", 1);
                k++;
            }
            if ((r = rp_value(s, n, &k, o, depth + 1)) != R_DONE) return r;
            k = skip_ws(s, n, k);
            if (k >= n) return R_MORE;
            if (s[k] == close) {
                put(o, &close, 1);
                *i = k + 1;
                return R_DONE;
            }
            if (s[k] != ',') return R_BAD;
            put(o, ",", 1);
            k++;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) { /* sent once it has ended, as cJSON prints it */
        size_t e = k;
        while (e < n && strchr("+-0123456789.eE", s[e]) && s[e]) e++;
        if (e >= n) return R_MORE;
        cJSON *num = cJSON_ParseWithLength(s + k, e - k);
        char *t = cJSON_IsNumber(num) ? cJSON_PrintUnformatted(num) : NULL;
        cJSON_Delete(num);
        if (!t) return R_BAD;
        put(o, t, strlen(t));
        free(t);
        *i = e;
        return R_DONE;
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int q = 0; q < 3; q++) {
        const size_t l = strlen(lits[q]);
        const size_t have = n - k < l ? n - k : l;
        if (!memcmp(s + k, lits[q], have)) {
            if (have < l) return R_MORE;
            put(o, lits[q], l);
            *i = k + l;
            return R_DONE;
        }
    }
    return R_BAD;
}

/* ---------------------------------------------------------------- the calls of a partial answer */

typedef struct call_view {
    char *name, *id;  /* complete (malloc'ed) or NULL */
    obuf args;        /* the arguments re-printed as far as certain (an object value only) */
    int args_obj;     /* the arguments' value is an object (else it is sent at the end) */
    int args_seen;    /* its arguments key came (the first one counts, as cJSON_GetObjectItem finds) */
    int ready;        /* its first delta may be sent (name known; Nemo: the object complete) */
} call_view;

typedef struct view {
    size_t content_end; /* text[0 .. content_end) may be sent as content */
    int n;
    call_view call[SRV_MAX_TOOLS];
} view;

static void view_free(view *v) {
    for (int k = 0; k < v->n; k++) {
        free(v->call[k].name);
        free(v->call[k].id);
        free(v->call[k].args.p);
    }
    memset(v, 0, sizeof *v);
}

static int known(const srv_tools *t, const char *name, size_t len) {
    for (int32_t i = 0; i < t->n; i++)
        if (strlen(t->name[i]) == len && !memcmp(t->name[i], name, len)) return 1;
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* The call object at s[*i] == '{' into c: "name" (a string naming a function of t), the arguments
 * ("arguments", or "parameters" with args2), "id" (id_key). R_DONE past its end. */
static int scan_object(const srv_tools *t, const char *s, size_t n, size_t *i, call_view *c, int args2, int id_key) {
    size_t k = *i + 1;
    for (;;) {
        k = skip_ws(s, n, k);
        if (k >= n) return R_MORE;
        if (s[k] == '}') {
            *i = k + 1;
            return R_DONE;
        }
        if (s[k] != '"') return R_BAD;
        obuf key = {0}, val = {0};
        int r = rp_string(s, n, &k, &key);
        if (r == R_DONE) {
            k = skip_ws(s, n, k);
            r = k >= n ? R_MORE : s[k] != ':' ? R_BAD : R_DONE;
            k++;
        }
        const int is_args = key.p && (!strcmp(key.p, "\"arguments\"") || (args2 && !strcmp(key.p, "\"parameters\"")));
        const int is_name = key.p && !strcmp(key.p, "\"name\""), is_id = id_key && key.p && !strcmp(key.p, "\"id\"");
        if (r == R_DONE && is_args && !c->args_seen) {
            const size_t v0 = skip_ws(s, n, k);
            c->args_seen = 1;
            c->args_obj = v0 < n && s[v0] == '{';
            r = rp_value(s, n, &k, c->args_obj ? &c->args : &val, 0);
        } else if (r == R_DONE) {
            r = rp_value(s, n, &k, &val, 0);
            char **dst = is_name ? &c->name : &c->id;
            if (r == R_DONE && (is_name || is_id) && !*dst && val.n >= 2 && val.p[0] == '"' && !strchr(val.p + 1, '\\'))
                *dst = dup_n(val.p + 1, val.n - 2); /* the first one, as cJSON_GetObjectItem finds */
        }
        free(key.p);
        free(val.p);
        if (r != R_DONE) return r;
        k = skip_ws(s, n, k);
        if (k >= n) return R_MORE;
        if (s[k] == '}') {
            *i = k + 1;
            return R_DONE;
        }
        if (s[k] != ',') return R_BAD;
        k++;
    }
}

static const char *find(const char *s, size_t n, size_t from, const char *m) {
    const size_t l = strlen(m);
    for (size_t k = from; k + l <= n; k++)
        if (!memcmp(s + k, m, l)) return s + k;
    return NULL;
}

/* Bytes at the end of s[0..n) that are a proper prefix of marker m (held back from the content). */
static size_t marker_tail(const char *s, size_t n, const char *m) {
    const size_t l = strlen(m);
    for (size_t h = l - 1 < n ? l - 1 : n; h > 0; h--)
        if (!memcmp(s + n - h, m, h)) return h;
    return 0;
}

/* The content that may be sent of s[0..end): without its trailing whitespace (the answer's content
 * is trimmed when calls follow). */
static size_t content_upto(const char *s, size_t end) {
    while (end > 0 && isspace((unsigned char)s[end - 1])) end--;
    return end;
}

/* Append a call view; NULL when the table is full. */
static call_view *next_call(view *v) { return v->n < SRV_MAX_TOOLS ? &v->call[v->n++] : NULL; }

/* A call object at s[k] ('{' expected after whitespace): scanned into a new call of v. R_* */
static int object_call(const srv_tools *t, view *v, const char *s, size_t n, size_t *k, int args2, int nemo) {
    *k = skip_ws(s, n, *k);
    if (*k >= n) return R_MORE;
    if (s[*k] != '{') return R_BAD;
    call_view *c = next_call(v);
    if (!c) return R_BAD;
    const int r = scan_object(t, s, n, k, c, args2, nemo);
    c->ready = c->name && known(t, c->name, strlen(c->name)) && (!nemo || r == R_DONE);
    if (c->name && !known(t, c->name, strlen(c->name))) return R_BAD;
    return r;
}

/* The view of text s[0..n) for the tools' format. */
static void read_view(const srv_tools *t, const char *s, size_t n, view *v) {
    const int fam = t->fam;
    const int hermes = !t->native || fam == AF_CHAT_CHATML || fam == AF_CHAT_QWEN3 || fam == AF_CHAT_QWQ;
    const int bare = !t->native || fam == AF_CHAT_LLAMA3; /* the whole answer may be one JSON call */
    const size_t b = skip_ws(s, n, 0);
    if (bare) {
        static const char tag[] = "<|python_tag|>";
        size_t k = b;
        if (t->native && n - b < sizeof tag - 1 && !memcmp(s + b, tag, n - b)) return; /* may be the tag: wait */
        if (t->native && n - b >= sizeof tag - 1 && !memcmp(s + b, tag, sizeof tag - 1)) k = b + sizeof tag - 1;
        k = skip_ws(s, n, k);
        if (k >= n && k > b) return;
        if (k < n && (s[k] == '{' || (!t->native && s[k] == '['))) {
            if (s[k] == '{') object_call(t, v, s, n, &k, 1, 0);
            return; /* a list: sent at the end */
        }
        if (k >= n) return;
        if (!hermes) { /* Llama: no call can follow text */
            v->content_end = n;
            return;
        }
    }
    const char *mk = hermes ? "<tool_call>" : "[TOOL_CALLS]";
    const char *a = find(s, n, 0, mk);
    if (!a) {
        v->content_end = content_upto(s, n - marker_tail(s, n, mk));
        return;
    }
    v->content_end = content_upto(s, (size_t)(a - s));
    size_t k = (size_t)(a - s) + strlen(mk);
    if (hermes) { /* <tool_call> {call} </tool_call> ... */
        for (;;) {
            if (object_call(t, v, s, n, &k, 1, 0) != R_DONE) return;
            const char *nx = find(s, n, k, "<tool_call>");
            if (!nx) return;
            k = (size_t)(nx - s) + strlen("<tool_call>");
        }
    }
    if (fam == AF_CHAT_MISTRAL) { /* [TOOL_CALLS] [ {call}, ... ] */
        k = skip_ws(s, n, k);
        if (k >= n || s[k] != '[') return;
        k++;
        for (;;) {
            if (object_call(t, v, s, n, &k, 0, 1) != R_DONE) return;
            k = skip_ws(s, n, k);
            if (k >= n || s[k] != ',') return;
            k++;
        }
    }
    for (;;) { /* mistral-v7: [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} ... */
        const char *ar = find(s, n, k, "[ARGS]"), *ci = find(s, n, k, "[CALL_ID]");
        const char *ne = ci && (!ar || ci < ar) ? ci : ar;
        if (!ne || ne == s + k || !known(t, s + k, (size_t)(ne - s) - k)) return;
        if (!ar) return;
        call_view *c = next_call(v);
        if (!c) return;
        c->name = dup_n(s + k, (size_t)(ne - s) - k);
        if (ci && ci < ar) c->id = dup_n(ci + strlen("[CALL_ID]"), (size_t)(ar - ci) - strlen("[CALL_ID]"));
        c->ready = c->name != NULL;
        k = (size_t)(ar - s) + strlen("[ARGS]");
        const size_t v0 = skip_ws(s, n, k);
        c->args_obj = v0 < n && s[v0] == '{';
        if (!c->args_obj || rp_value(s, n, &k, &c->args, 0) != R_DONE) return;
        const char *nx = find(s, n, k, "[TOOL_CALLS]");
        if (!nx) return;
        k = (size_t)(nx - s) + strlen("[TOOL_CALLS]");
    }
}

/* ---------------------------------------------------------------- the deltas */

struct srv_tool_stream {
    size_t content_sent;   /* bytes of content sent */
    int n_started;         /* calls whose first delta was sent */
    size_t args_sent[SRV_MAX_TOOLS];
};

srv_tool_stream *srv_tool_stream_new(void) { return calloc(1, sizeof(srv_tool_stream)); }

void srv_tool_stream_free(srv_tool_stream *ts) { free(ts); }

static void add_content(cJSON *deltas, const char *s, size_t n) {
    char *t = dup_n(s, n);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "content", t ? t : "");
    cJSON_AddItemToArray(deltas, d);
    free(t);
}

/* A delta of call k: its first (id, type, name, arguments) or a piece of its arguments. */
static void add_call_delta(cJSON *deltas, int k, const char *id, const char *name, const char *args, size_t n) {
    cJSON *d = cJSON_CreateObject(), *tc = cJSON_AddArrayToObject(d, "tool_calls"), *x = cJSON_CreateObject();
    cJSON_AddItemToArray(tc, x);
    cJSON_AddNumberToObject(x, "index", k);
    if (id) {
        cJSON_AddStringToObject(x, "id", id);
        cJSON_AddStringToObject(x, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(x, "function");
    if (name) cJSON_AddStringToObject(f, "name", name);
    char *a = dup_n(args, n);
    cJSON_AddStringToObject(f, "arguments", a ? a : "");
    free(a);
    cJSON_AddItemToArray(deltas, d);
}

/* The end: the answer parsed as the non-streamed one, and what is missing sent. */
static int finish(srv_tool_stream *ts, const srv_tools *t, const char *s, size_t n, uint64_t req_id, cJSON *deltas) {
    char *content = NULL;
    cJSON *calls = srv_tools_extract(t, s, n, req_id, &content);
    const char *full = calls ? content : s;
    const size_t fl = calls ? (content ? strlen(content) : 0) : n;
    size_t lead = 0; /* the content's leading whitespace was never sent */
    while (lead < fl && isspace((unsigned char)full[lead])) lead++;
    if (ts->content_sent == 0 && fl) add_content(deltas, full, fl);
    else if (ts->content_sent < fl - lead) add_content(deltas, full + lead + ts->content_sent, fl - lead - ts->content_sent);
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "id"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments"));
        const size_t al = args ? strlen(args) : 0;
        if (k >= ts->n_started) add_call_delta(deltas, k, id, name, args ? args : "", al);
        else if (ts->args_sent[k] < al) add_call_delta(deltas, k, NULL, NULL, args + ts->args_sent[k], al - ts->args_sent[k]);
        k++;
    }
    cJSON_Delete(calls);
    free(content);
    return k > 0;
}

cJSON *srv_tool_stream_step(srv_tool_stream *ts, const srv_tools *t, const char *text, size_t n, int final,
                            uint64_t req_id, int *has_calls) {
    cJSON *deltas = cJSON_CreateArray();
    *has_calls = 0;
    if (!deltas) return NULL;
    if (!text) text = "";
    if (final) {
        srv_tool_stream none;
        memset(&none, 0, sizeof none);
        *has_calls = finish(ts ? ts : &none, t, text, n, req_id, deltas);
        return deltas;
    }
    if (!ts) return deltas;
    view v;
    memset(&v, 0, sizeof v);
    read_view(t, text, n, &v);
    size_t b = 0; /* content: from its first non-space byte */
    while (b < v.content_end && isspace((unsigned char)text[b])) b++;
    if (v.content_end > b + ts->content_sent && !ts->n_started) {
        add_content(deltas, text + b + ts->content_sent, v.content_end - b - ts->content_sent);
        ts->content_sent = v.content_end - b;
    }
    for (int k = 0; k < v.n; k++) {
        call_view *c = &v.call[k];
        if (k >= ts->n_started) {
            if (!c->ready || k > ts->n_started) break;
            char idb[64];
            if (!c->id) snprintf(idb, sizeof idb, "call_%llu_%d", (unsigned long long)req_id, k);
            add_call_delta(deltas, k, c->id ? c->id : idb, c->name, "", 0);
            ts->n_started++;
        }
        if (c->args_obj && !c->args.oom && c->args.n > ts->args_sent[k]) {
            add_call_delta(deltas, k, NULL, NULL, c->args.p + ts->args_sent[k], c->args.n - ts->args_sent[k]);
            ts->args_sent[k] = c->args.n;
        }
    }
    view_free(&v);
    return deltas;
}
