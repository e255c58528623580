/* grammar.c — "response_format" of `afinar serve` (grammar.h): a JSON-Schema subset compiled into
 * nodes, a pushdown matcher over bytes, and the logit mask of constrained decoding.
 *
 * The matcher follows the JSON grammar of RFC 8259 (values, strings with their escapes, numbers)
 * with strict UTF-8 (RFC 3629 table 3-7: no overlong forms, no surrogates) and bounded whitespace
 * between two tokens (nothing, one space, or a newline and up to 20 spaces or tabs, as llama.cpp's
 * json.gbnf; none after the end), and enforces the schema while it reads: an object of a schema with "properties"
 * takes only those keys, once each, and closes only when the "required" ones are there; an array
 * holds between minItems and maxItems values of its "items" schema; "enum"/"const" values are
 * matched as their compact JSON text (cJSON_PrintUnformatted). Digits are bounded (an integer part
 * of at most 15, a fraction of 15, an exponent of 3) so that a number always ends. A token is
 * allowed when the matcher accepts all its bytes from the current state (a copy is fed); an
 * end-of-generation token when the document is complete (srv_gstate_mask_simple; the fast mask over an
 * indexed vocabulary: grammar_mask.c). */
#include "serve/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };
#define MAX_NODES 1024
#define MAX_PROPS 64
#define MAX_LITS 256
#define MAX_LIT_LEN 1024
#define MAX_INT_DIGITS 15
#define MAX_FRAC_DIGITS 15
#define MAX_EXP_DIGITS 3
#define MAX_INDENT 20 /* whitespace between two tokens: nothing, one space, or a newline and up to 20 spaces/tabs */
#define WS_SPACE 100

typedef struct gnode {
    int types;           /* T_* mask */
    int32_t n_lit;       /* enum/const: the value is one of these compact JSON texts */
    char **lit;
    int32_t n_prop;      /* object with properties: only these keys */
    char **pname;
    int32_t *pnode;
    uint64_t required;   /* bit i: pname[i] is required */
    int32_t values;      /* object without properties: the node of every value */
    int32_t items;       /* array: node of the items */
    int32_t min_items, max_items;
} gnode;

struct srv_grammar {
    gnode *nodes;
    int32_t n_nodes, cap;
    int32_t root, any, lit_bool, lit_null;
    char **prefix;         /* [n_prefix] alternatives of the literal text before the document (none
                              a prefix of another); 0: none */
    int32_t n_prefix;
    char *suffix;          /* literal text after the document (NULL: none) */
};

/* ---------------------------------------------------------------- compiling */

#define BADG(...) srv_err_set(err, 400, "invalid_request_error", NULL, path, __VA_ARGS__)

static int32_t new_node(srv_grammar *g, int types) {
    if (g->n_nodes >= MAX_NODES) return -1;
    if (g->n_nodes == g->cap) {
        int32_t c = g->cap ? 2 * g->cap : 16;
        gnode *t = realloc(g->nodes, sizeof *t * (size_t)c);
        if (!t) return -1;
        g->nodes = t, g->cap = c;
    }
    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->types = types;
    n->values = n->items = -1;
    n->max_items = INT32_MAX;
    return g->n_nodes++;
}

static int add_lit(srv_grammar *g, int32_t id, const char *text) {
    gnode *n = &g->nodes[id];
    char **t = realloc(n->lit, sizeof *t * (size_t)(n->n_lit + 1));
    if (!t) return 0;
    n->lit = t;
    if (!(n->lit[n->n_lit] = strdup(text))) return 0;
    n->n_lit++;
    return 1;
}

static int type_of(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) ? T_INT | T_NUM : T_NUM;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsArray(v)) return T_ARR;
    return T_OBJ;
}

static int type_bit(const char *name) {
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    static const int bits[] = {T_NULL, T_BOOL, T_INT, T_NUM | T_INT, T_STR, T_ARR, T_OBJ};
    for (int i = 0; i < 7; i++)
        if (!strcmp(name, names[i])) return bits[i];
    return 0;
}

static int32_t compile_node(srv_grammar *g, const cJSON *sc, const char *path, int depth, srv_err *err);

/* A property name is matched byte for byte as its JSON text: printable, no '"' or '\\'. */
static int plain_name(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\') return 0;
    return 1;
}

static int compile_object(srv_grammar *g, int32_t id, const cJSON *sc, const char *path, int depth, srv_err *err) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sc, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sc, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
    char sub[512];
    if (props) {
        if (!cJSON_IsObject(props)) return BADG("'%s.properties' must be an object", path);
        const int n = cJSON_GetArraySize(props);
        if (n > MAX_PROPS) return BADG("'%s.properties' has %d entries, more than %d", path, n, MAX_PROPS);
        gnode *nd = &g->nodes[id];
        nd->pname = calloc((size_t)n + 1, sizeof(char *));
        nd->pnode = calloc((size_t)n + 1, sizeof(int32_t));
        if (!nd->pname || !nd->pnode) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            snprintf(sub, sizeof sub, "%s.properties.%s", path, p->string);
            if (!plain_name(p->string))
                return BADG("'%s': property names with '\"', '\\' or control characters are not supported", sub);
            for (int32_t k = 0; k < g->nodes[id].n_prop; k++)
                if (!strcmp(g->nodes[id].pname[k], p->string)) return BADG("'%s' appears twice", sub);
            const int32_t c = compile_node(g, p, sub, depth + 1, err);
            if (c < 0) return 0;
            nd = &g->nodes[id]; /* compile_node may move the table */
            if (!(nd->pname[nd->n_prop] = strdup(p->string)))
                return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
            nd->pnode[nd->n_prop++] = c;
        }
    }
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return BADG("'%s.additionalProperties' must be a boolean or a schema", path);
    /* Without named properties, the keys are free and their values follow `values`; values < 0
     * (an empty 'properties' or 'additionalProperties': false) allows only the empty object. */
    if (!g->nodes[id].n_prop && !cJSON_IsFalse(ap) && !(props && !cJSON_IsObject(ap))) {
        int32_t c = g->any;
        if (cJSON_IsObject(ap)) {
            snprintf(sub, sizeof sub, "%s.additionalProperties", path);
            if ((c = compile_node(g, ap, sub, depth + 1, err)) < 0) return 0;
        }
        g->nodes[id].values = c;
    }
    if (req) {
        if (!cJSON_IsArray(req)) return BADG("'%s.required' must be a list of property names", path);
        const cJSON *r;
        cJSON_ArrayForEach(r, req) {
            if (!cJSON_IsString(r)) return BADG("'%s.required' must be a list of property names", path);
            gnode *nd = &g->nodes[id];
            int32_t k = 0;
            while (k < nd->n_prop && strcmp(nd->pname[k], r->valuestring)) k++;
            if (k == nd->n_prop)
                return BADG("'%s.required' names '%.100s', which is not in 'properties'", path, r->valuestring);
            nd->required |= (uint64_t)1 << k;
        }
    }
    return 1;
}

static int32_t compile_node(srv_grammar *g, const cJSON *sc, const char *path, int depth, srv_err *err) {
    if (cJSON_IsTrue(sc) || (cJSON_IsObject(sc) && !sc->child)) return g->any;
    if (!cJSON_IsObject(sc)) return BADG("'%s' must be a schema (an object)", path) - 1;
    if (depth > SRV_GRAMMAR_MAX_DEPTH / 2 - 1)
        return BADG("'%s': the schema nests deeper than %d levels", path, SRV_GRAMMAR_MAX_DEPTH / 2 - 1) - 1;
    static const char *const known[] = {"type", "properties", "required", "enum", "const", "items", "minItems",
                                        "maxItems", "additionalProperties", "title", "description", "default",
                                        "examples", "$schema", "$id", "$comment"};
    const cJSON *k;
    cJSON_ArrayForEach(k, sc) {
        size_t i = 0;
        while (i < sizeof known / sizeof *known && strcmp(k->string, known[i])) i++;
        if (i == sizeof known / sizeof *known)
            return BADG("'%s.%.60s' is not supported (supported: type, properties, required, enum, const, items, "
                        "minItems, maxItems, additionalProperties)",
                        path, k->string) -
                   1;
    }
    int types = T_ALL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sc, "type");
    if (ty) {
        types = 0;
        if (cJSON_IsString(ty)) {
            types = type_bit(ty->valuestring);
        } else if (cJSON_IsArray(ty)) {
            const cJSON *t;
            cJSON_ArrayForEach(t, ty) {
                if (!cJSON_IsString(t) || !type_bit(t->valuestring)) {
                    types = 0;
                    break;
                }
                types |= type_bit(t->valuestring);
            }
        }
        if (!types)
            return BADG("'%s.type' must be one of object, array, string, number, integer, boolean, null, or a "
                        "non-empty list of them",
                        path) -
                   1;
    }
    const int32_t id = new_node(g, types);
    if (id < 0) return BADG("'%s': the schema has more than %d parts", path, MAX_NODES) - 1;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(sc, "const");
    if (en || cn) {
        if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) < 1 || cJSON_GetArraySize(en) > MAX_LITS))
            return BADG("'%s.enum' must be a list of 1 to %d values", path, MAX_LITS) - 1;
        const cJSON *v = cn ? cn : en->child;
        for (; v; v = cn ? NULL : v->next) {
            if (!(type_of(v) & types)) continue; /* a value the type excludes can never validate */
            char *t = cJSON_PrintUnformatted(v);
            if (!t) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory") - 1;
            const size_t len = strlen(t);
            int dup = 0;
            for (int32_t i = 0; i < g->nodes[id].n_lit; i++) dup |= !strcmp(g->nodes[id].lit[i], t);
            const int ok = len <= MAX_LIT_LEN && (dup || add_lit(g, id, t));
            free(t);
            if (len > MAX_LIT_LEN) return BADG("'%s': an enum/const value longer than %d bytes", path, MAX_LIT_LEN) - 1;
            if (!ok) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory") - 1;
        }
        if (!g->nodes[id].n_lit) return BADG("'%s': no enum/const value has the schema's type", path) - 1;
        return id;
    }
    if (types & T_OBJ)
        if (!compile_object(g, id, sc, path, depth, err)) return -1;
    if (types & T_ARR) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(sc, "items");
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        const int32_t c = it ? compile_node(g, it, sub, depth + 1, err) : g->any;
        if (c < 0) return -1;
        g->nodes[id].items = c;
        double mn = 0, mx = 1e9;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(sc, "minItems"), *b = cJSON_GetObjectItemCaseSensitive(sc, "maxItems");
        if (a && (!cJSON_IsNumber(a) || a->valuedouble < 0 || a->valuedouble > 1e9 || a->valuedouble != floor(a->valuedouble)))
            return BADG("'%s.minItems' must be an integer >= 0", path) - 1;
        if (b && (!cJSON_IsNumber(b) || b->valuedouble < 0 || b->valuedouble > 1e9 || b->valuedouble != floor(b->valuedouble)))
            return BADG("'%s.maxItems' must be an integer >= 0", path) - 1;
        if (a) mn = a->valuedouble;
        if (b) mx = b->valuedouble;
        if (mn > mx) return BADG("'%s': minItems %g > maxItems %g", path, mn, mx) - 1;
        g->nodes[id].min_items = (int32_t)mn;
        g->nodes[id].max_items = (int32_t)mx;
    }
    return id;
}

static srv_grammar *grammar_new(void) {
    srv_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->any = new_node(g, T_ALL);
    g->lit_bool = new_node(g, T_BOOL);
    g->lit_null = new_node(g, T_NULL);
    if (g->lit_null < 0 || !add_lit(g, g->lit_bool, "true") || !add_lit(g, g->lit_bool, "false") ||
        !add_lit(g, g->lit_null, "null")) {
        srv_grammar_free(g);
        return NULL;
    }
    g->nodes[g->any].values = g->nodes[g->any].items = g->any;
    return g;
}

int srv_grammar_compile(const cJSON *schema, const char *path, srv_grammar **out, srv_err *err) {
    *out = NULL;
    srv_grammar *g = grammar_new();
    if (!g) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    g->root = compile_node(g, schema, path, 0, err);
    if (g->root < 0) {
        srv_grammar_free(g);
        return 0;
    }
    *out = g;
    return 1;
}

int srv_grammar_from_format(const cJSON *rf, srv_grammar **out, srv_err *err) {
    *out = NULL;
    const char *path = "response_format";
    const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (!cJSON_IsString(t))
        return BADG("'response_format' must be an object with \"type\": \"text\", \"json_object\" or \"json_schema\"");
    if (!strcmp(t->valuestring, "text")) return 1;
    if (!strcmp(t->valuestring, "json_object")) {
        srv_grammar *g = grammar_new();
        const int32_t id = g ? new_node(g, T_OBJ) : -1;
        if (id < 0) {
            srv_grammar_free(g);
            return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        }
        g->nodes[id].values = g->any;
        g->root = id;
        *out = g;
        return 1;
    }
    if (strcmp(t->valuestring, "json_schema"))
        return BADG("'response_format.type' is \"%.40s\": expected \"text\", \"json_object\" or \"json_schema\"",
                    t->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    path = "response_format.json_schema";
    if (!cJSON_IsObject(js)) return BADG("'response_format.json_schema' must be an object {\"name\", \"schema\"}");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(js, "name"), *st = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (nm && !cJSON_IsString(nm)) return BADG("'response_format.json_schema.name' must be a string");
    if (st && !cJSON_IsBool(st) && !cJSON_IsNull(st)) return BADG("'response_format.json_schema.strict' must be true or false");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
    path = "response_format.json_schema.schema";
    if (!sc) return BADG("'response_format.json_schema.schema' is required");
    return srv_grammar_compile(sc, path, out, err);
}

void srv_grammar_free(srv_grammar *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        gnode *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_lit; k++) free(n->lit[k]);
        for (int32_t k = 0; k < n->n_prop; k++) free(n->pname[k]);
        free(n->lit);
        free(n->pname);
        free(n->pnode);
    }
    free(g->nodes);
    for (int32_t k = 0; k < g->n_prefix; k++) free(g->prefix[k]);
    free(g->prefix);
    free(g->suffix);
    free(g);
}

int srv_grammar_set_prefixes(srv_grammar *g, const char *const *prefixes, int32_t n, const char *suffix) {
    for (int32_t k = 0; k < g->n_prefix; k++) free(g->prefix[k]);
    free(g->prefix);
    free(g->suffix);
    g->prefix = NULL, g->n_prefix = 0;
    g->suffix = suffix && suffix[0] ? strdup(suffix) : NULL;
    int ok = !suffix || !suffix[0] || g->suffix;
    for (int32_t k = 0; k < n && ok; k++) /* prefix-free: none starts another (a complete one ends the prefix) */
        for (int32_t i = 0; i < n && ok; i++)
            ok = !prefixes[k][0] || (i == k ? 1 : strncmp(prefixes[i], prefixes[k], strlen(prefixes[k])) != 0);
    if (ok && n > 0 && prefixes[0][0]) {
        ok = (g->prefix = calloc((size_t)n, sizeof(char *))) != NULL;
        for (int32_t k = 0; k < n && ok; k++) ok = (g->prefix[g->n_prefix++] = strdup(prefixes[k])) != NULL;
    }
    return ok;
}

int srv_grammar_set_affixes(srv_grammar *g, const char *prefix, const char *suffix) {
    const char *one[1] = {prefix};
    return srv_grammar_set_prefixes(g, one, prefix && prefix[0] ? 1 : 0, suffix);
}

/* ---------------------------------------------------------------- matching */

enum { F_VALUE, F_LIT, F_STR, F_KEY, F_NUM, F_OBJ, F_ARR };
enum { O_START, O_KEY, O_INKEY, O_COLON, O_VAL, O_AFTER };               /* F_OBJ */
enum { A_START, A_NEXT, A_VAL, A_AFTER };                                 /* F_ARR */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };      /* F_NUM */
enum { S_CHAR, S_ESC, S_HEX };                                            /* F_STR */

typedef struct gframe {
    uint8_t kind, sub;
    uint8_t lo, hi;      /* F_STR: the range of the next UTF-8 continuation byte */
    int32_t node;
    int32_t cand, len;   /* F_LIT/F_KEY: the candidate matched so far and its length; F_OBJ: the key's
                            property; F_STR: continuation bytes left (len) and hex digits left (cand) */
    int32_t count;       /* F_ARR: items; F_NUM: digits of the current part */
    uint64_t seen;       /* F_OBJ: properties already given */
} gframe;

struct srv_gstate {
    const srv_grammar *g;
    int depth, done;
    int ws; /* whitespace since the last token: 0 none, WS_SPACE one space, 1 + k a newline and k indent bytes */
    int pre, suf; /* bytes of the grammar's prefix / suffix matched */
    int pcand;    /* the prefix alternative matched so far */
    gframe f[SRV_GRAMMAR_MAX_DEPTH];
};

srv_gstate *srv_gstate_new(const srv_grammar *g) {
    srv_gstate *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->g = g;
    st->depth = 1;
    st->f[0].kind = F_VALUE;
    st->f[0].node = g->root;
    return st;
}

void srv_gstate_free(srv_gstate *st) { free(st); }

void srv_gstate_copy(srv_gstate *dst, const srv_gstate *src) {
    dst->g = src->g;
    dst->depth = src->depth;
    dst->done = src->done;
    dst->ws = src->ws;
    dst->pre = src->pre;
    dst->pcand = src->pcand;
    dst->suf = src->suf;
    memcpy(dst->f, src->f, sizeof(gframe) * (size_t)src->depth);
}

/* 1 while the literal prefix is not complete. */
static int in_prefix(const srv_gstate *st) { return st->g->n_prefix && st->g->prefix[st->pcand][st->pre]; }

static int push(srv_gstate *st, int kind, int32_t node) {
    if (st->depth >= SRV_GRAMMAR_MAX_DEPTH) return 0;
    gframe *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->kind = (uint8_t)kind;
    f->node = node;
    f->cand = -1;
    return 1;
}

/* The top frame's value is complete: pop it and advance its parent. */
static void pop(srv_gstate *st) {
    st->depth--;
    if (st->depth == 0) {
        st->done = 1;
        return;
    }
    gframe *p = &st->f[st->depth - 1];
    if (p->kind == F_OBJ) {
        if (p->sub == O_INKEY) {
            p->sub = O_COLON;
        } else {
            if (p->cand >= 0) p->seen |= (uint64_t)1 << p->cand;
            p->sub = O_AFTER;
        }
    } else if (p->kind == F_ARR) {
        p->count++;
        p->sub = A_AFTER;
    }
}

/* Literal candidates: lit[k] extends lit[cand][0..len) by c. -1: none. */
static int32_t lit_next(char *const *lit, int32_t n, int32_t cand, int32_t len, int c, uint64_t skip) {
    for (int32_t k = 0; k < n; k++) {
        if ((skip >> k) & 1) continue;
        if (len > 0 && strncmp(lit[k], lit[cand], (size_t)len)) continue;
        if ((size_t)len < strlen(lit[k]) && (unsigned char)lit[k][len] == c) return k;
    }
    return -1;
}

/* 1 when some candidate of lit[cand][0..len) is longer than len. */
static int lit_longer(char *const *lit, int32_t n, int32_t cand, int32_t len) {
    for (int32_t k = 0; k < n; k++)
        if (!strncmp(lit[k], lit[cand], (size_t)len) && strlen(lit[k]) > (size_t)len) return 1;
    return 0;
}

static int num_can_end(const gframe *f) { return f->sub == N_ZERO || f->sub == N_INT || f->sub == N_FRAC || f->sub == N_EXP; }

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Start a value of node `node` in the top frame (F_VALUE) with byte c. */
static int start_value(srv_gstate *st, gframe *f, int c) {
    const srv_grammar *g = st->g;
    const gnode *n = &g->nodes[f->node];
    if (n->n_lit) {
        const int32_t k = lit_next(n->lit, n->n_lit, 0, 0, c, 0);
        if (k < 0) return 0;
        f->kind = F_LIT, f->cand = k, f->len = 1;
        if ((size_t)f->len == strlen(n->lit[k]) && !lit_longer(n->lit, n->n_lit, k, 1)) pop(st);
        return 1;
    }
    if (c == '{' && (n->types & T_OBJ)) {
        f->kind = F_OBJ, f->sub = O_START, f->seen = 0, f->cand = -1;
        return 1;
    }
    if (c == '[' && (n->types & T_ARR)) {
        f->kind = F_ARR, f->sub = A_START, f->count = 0;
        return 1;
    }
    if (c == '"' && (n->types & T_STR)) {
        f->kind = F_STR, f->sub = S_CHAR, f->len = 0;
        return 1;
    }
    if ((c == '-' || is_digit(c)) && (n->types & (T_INT | T_NUM))) {
        f->kind = F_NUM;
        f->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        f->count = c == '-' ? 0 : 1;
        return 1;
    }
    const int32_t ln = c == 'n' && (n->types & T_NULL) ? g->lit_null : (c == 't' || c == 'f') && (n->types & T_BOOL) ? g->lit_bool : -1;
    if (ln < 0) return 0;
    f->node = ln;
    return start_value(st, f, c);
}

/* String bytes (F_STR and free keys). 1: consumed (the string may have ended: popped). */
static int str_byte(srv_gstate *st, gframe *f, int c) {
    if (f->len > 0) { /* UTF-8 continuation */
        if (c < f->lo || c > f->hi) return 0;
        f->len--;
        f->lo = 0x80, f->hi = 0xBF;
        return 1;
    }
    if (f->sub == S_ESC) {
        if (!strchr("\"\\/bfnrtu", c) || !c) return 0;
        if (c == 'u') f->sub = S_HEX, f->cand = 4;
        else f->sub = S_CHAR;
        return 1;
    }
    if (f->sub == S_HEX) {
        if (!is_digit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F')) return 0;
        if (--f->cand == 0) f->sub = S_CHAR;
        return 1;
    }
    if (c == '"') {
        pop(st);
        return 1;
    }
    if (c == '\\') {
        f->sub = S_ESC;
        return 1;
    }
    if (c < 0x20 || c == 0x7F) return 0;
    if (c < 0x80) return 1;
    f->lo = 0x80, f->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) f->len = 1;
    else if (c >= 0xE0 && c <= 0xEF) f->len = 2, f->lo = c == 0xE0 ? 0xA0 : 0x80, f->hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) f->len = 3, f->lo = c == 0xF0 ? 0x90 : 0x80, f->hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    return 1;
}

/* One byte. */
static int feed1(srv_gstate *st, int c) {
    const int is_ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    const srv_grammar *gr = st->g;
    if (in_prefix(st)) { /* an alternative that extends the bytes matched by c */
        for (int32_t k = 0; k < gr->n_prefix; k++)
            if (!strncmp(gr->prefix[k], gr->prefix[st->pcand], (size_t)st->pre) && (unsigned char)gr->prefix[k][st->pre] == c) {
                st->pcand = k, st->pre++;
                return 1;
            }
        return 0;
    }
    const int ws = st->ws;
    st->ws = 0;
    for (;;) { /* loops only when a number or literal ends at c and the parent takes c */
        if (st->done) return gr->suffix && gr->suffix[st->suf] && (unsigned char)gr->suffix[st->suf] == c ? (st->suf++, 1) : 0;
        if (st->depth == 0) return 0;
        gframe *f = &st->f[st->depth - 1];
        if (is_ws && (f->kind == F_VALUE || f->kind == F_OBJ || f->kind == F_ARR)) { /* between two tokens */
            if (ws == 0 && (c == ' ' || c == '\n')) st->ws = c == ' ' ? WS_SPACE : 1;
            else if (ws >= 1 && ws <= MAX_INDENT && (c == ' ' || c == '\t')) st->ws = ws + 1;
            else return 0;
            return 1;
        }
        const srv_grammar *g = st->g;
        const gnode *n = &g->nodes[f->node];
        switch (f->kind) {
        case F_VALUE:
            return start_value(st, f, c);
        case F_LIT: {
            const int32_t k = lit_next(n->lit, n->n_lit, f->cand, f->len, c, 0);
            if (k >= 0) {
                f->cand = k, f->len++;
                if ((size_t)f->len == strlen(n->lit[k]) && !lit_longer(n->lit, n->n_lit, k, f->len)) pop(st);
                return 1;
            }
            if ((size_t)f->len != strlen(n->lit[f->cand])) return 0;
            pop(st); /* a number literal that ends here (a longer candidate was possible) */
            continue;
        }
        case F_STR:
            return str_byte(st, f, c);
        case F_KEY: { /* a property name of the object below */
            const gframe *o = &st->f[st->depth - 2];
            const gnode *on = &g->nodes[o->node];
            if (c == '"') {
                for (int32_t k = 0; k < on->n_prop; k++)
                    if (!((o->seen >> k) & 1) && strlen(on->pname[k]) == (size_t)f->len &&
                        (f->len == 0 || !strncmp(on->pname[k], on->pname[f->cand], (size_t)f->len))) {
                        st->depth--;
                        st->f[st->depth - 1].cand = k;
                        st->f[st->depth - 1].sub = O_COLON;
                        return 1;
                    }
                return 0;
            }
            const int32_t k = lit_next(on->pname, on->n_prop, f->cand, f->len, c, o->seen);
            if (k < 0) return 0;
            f->cand = k, f->len++;
            return 1;
        }
        case F_NUM: {
            const int is_int = !(n->types & T_NUM);
            int ok = 0;
            switch (f->sub) {
            case N_MINUS:
                if (is_digit(c)) f->sub = c == '0' ? N_ZERO : N_INT, f->count = 1, ok = 1;
                break;
            case N_ZERO:
            case N_INT:
                if (is_digit(c) && f->sub == N_INT && f->count < MAX_INT_DIGITS) f->count++, ok = 1;
                else if (c == '.' && !is_int) f->sub = N_DOT, f->count = 0, ok = 1;
                else if ((c == 'e' || c == 'E') && !is_int) f->sub = N_E, ok = 1;
                break;
            case N_DOT:
            case N_FRAC:
                if (is_digit(c) && f->count < MAX_FRAC_DIGITS) f->sub = N_FRAC, f->count++, ok = 1;
                else if ((c == 'e' || c == 'E') && f->sub == N_FRAC) f->sub = N_E, ok = 1;
                break;
            case N_E:
                if (c == '+' || c == '-') f->sub = N_ESIGN, ok = 1;
                else if (is_digit(c)) f->sub = N_EXP, f->count = 1, ok = 1;
                break;
            case N_ESIGN:
            case N_EXP:
                if (is_digit(c) && (f->sub == N_ESIGN || f->count < MAX_EXP_DIGITS))
                    f->count = f->sub == N_ESIGN ? 1 : f->count + 1, f->sub = N_EXP, ok = 1;
                break;
            }
            if (ok) return 1;
            if (!num_can_end(f)) return 0;
            pop(st);
            continue;
        }
        case F_OBJ:
            switch (f->sub) {
            case O_START:
            case O_KEY: {
                if (f->sub == O_START && c == '}') {
                    if ((f->seen & n->required) != n->required) return 0;
                    pop(st);
                    return 1;
                }
                if (c != '"') return 0;
                f->cand = -1;
                if (n->n_prop) {
                    uint64_t left = 0;
                    for (int32_t k = 0; k < n->n_prop; k++) left |= (uint64_t)!((f->seen >> k) & 1) << k;
                    if (!left) return 0;
                    f->sub = O_INKEY;
                    return push(st, F_KEY, f->node);
                }
                if (n->values < 0) return 0; /* no key allowed */
                f->sub = O_INKEY;
                if (!push(st, F_STR, f->node)) return 0;
                return 1;
            }
            case O_COLON:
                if (c != ':') return 0;
                f->sub = O_VAL;
                return push(st, F_VALUE, n->n_prop ? n->pnode[f->cand] : n->values);
            case O_AFTER:
                if (c == '}') {
                    if ((f->seen & n->required) != n->required) return 0;
                    pop(st);
                    return 1;
                }
                if (c != ',') return 0;
                if (n->n_prop) {
                    int left = 0;
                    for (int32_t k = 0; k < n->n_prop; k++) left |= !((f->seen >> k) & 1);
                    if (!left) return 0;
                }
                f->sub = O_KEY;
                return 1;
            default:
                return 0;
            }
        case F_ARR:
            if (f->sub == A_START && c == ']') {
                if (n->min_items > 0) return 0;
                pop(st);
                return 1;
            }
            if (f->sub == A_START || f->sub == A_NEXT) {
                if (f->count >= n->max_items) return 0;
                f->sub = A_VAL;
                if (!push(st, F_VALUE, n->items)) return 0;
                continue;
            }
            if (f->sub == A_AFTER) {
                if (c == ']' && f->count >= n->min_items) {
                    pop(st);
                    return 1;
                }
                if (c == ',' && f->count < n->max_items) {
                    f->sub = A_NEXT;
                    return 1;
                }
            }
            return 0;
        default:
            return 0;
        }
    }
}

int srv_gstate_feed(srv_gstate *st, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed1(st, (unsigned char)bytes[i])) return 0;
    return 1;
}

int srv_gstate_done(const srv_gstate *st) { return st->done && !(st->g->suffix && st->g->suffix[st->suf]); }

int srv_gstate_can_end(const srv_gstate *st) {
    if (st->g->suffix) return srv_gstate_done(st);
    if (st->done) return 1;
    if (st->depth != 1) return 0;
    const gframe *f = &st->f[0];
    if (f->kind == F_NUM) return num_can_end(f);
    if (f->kind == F_LIT) return strlen(st->g->nodes[f->node].lit[f->cand]) == (size_t)f->len;
    return 0;
}

srv_gstate *srv_gstate_clone(const srv_gstate *st) {
    srv_gstate *c = malloc(sizeof *c);
    if (c) srv_gstate_copy(c, st);
    return c;
}

int srv_gstate_in_string(const srv_gstate *st) {
    if (in_prefix(st) || st->done || st->depth == 0) return 0;
    const gframe *f = &st->f[st->depth - 1];
    return f->kind == F_STR && f->sub == S_CHAR && f->len == 0;
}

int32_t srv_gstate_mask_simple(const srv_gstate *st, const srv_vocab *v, float *logits, int32_t n_logits) {
    for (int32_t i = v->n; i < n_logits; i++) logits[i] = -INFINITY; /* padding rows of the LM head */
    srv_gstate tmp;
    int first[256]; /* 1: a token may start with this byte */
    for (int b = 0; b < 256; b++) {
        srv_gstate_copy(&tmp, st);
        const char c = (char)b;
        first[b] = srv_gstate_feed(&tmp, &c, 1);
    }
    const int end_ok = srv_gstate_can_end(st);
    int32_t left = 0;
    for (int32_t i = 0; i < v->n && i < n_logits; i++) {
        const uint32_t a = v->off[i], e = v->off[i + 1];
        int ok;
        if (v->eog[i]) ok = end_ok;
        else if (a == e || !first[(unsigned char)v->bytes[a]]) ok = 0;
        else {
            srv_gstate_copy(&tmp, st);
            ok = srv_gstate_feed(&tmp, v->bytes + a, e - a);
        }
        if (ok) left++;
        else logits[i] = -INFINITY;
    }
    return left;
}
