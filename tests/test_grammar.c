/*
 * test_grammar.c — the "response_format" grammar of `afinar serve` (src/serve/grammar.c):
 *  - compile errors: every unsupported keyword or inconsistent schema is a 400 naming the field;
 *    "response_format" shapes (text, json_object, json_schema, bad ones);
 *  - hand-written documents accepted / refused at the right byte (types, required, duplicate keys,
 *    integer vs number, enum, UTF-8, control characters, nesting, whitespace bound);
 *  - a fuzz over generated schemas: 400 random schemas (types, properties, required, enum, const,
 *    items, minItems, maxItems, nesting), each with random walks that pick random tokens of a
 *    synthetic vocabulary among those srv_gstate_mask leaves allowed until the end-of-generation
 *    token: every finished document must parse (cJSON) and validate against its schema under an
 *    independent validator written here from the JSON Schema rules; almost every walk must finish;
 *  - alternatives of the literal prefix (srv_grammar_set_prefixes);
 *  - tools (src/serve/tools.c): "tools" / "tool_choice" errors, the forced call's grammar (prefix and
 *    suffix literals around {"name", "arguments"}), and tool calls parsed from the three formats.
 */
#include "testlib.h"

#include "serve/grammar.h"
#include "serve/tools.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- an independent validator */

static int validate(const cJSON *v, const cJSON *sc);

static int type_ok(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    return 0;
}

static int validate(const cJSON *v, const cJSON *sc) {
    if (cJSON_IsTrue(sc)) return 1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sc, "type");
    if (cJSON_IsString(t) && !type_ok(v, t->valuestring)) return 0;
    if (cJSON_IsArray(t)) {
        int any = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, t) any |= type_ok(v, x->valuestring);
        if (!any) return 0;
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(sc, "const");
    if (cn && !cJSON_Compare(v, cn, 1)) return 0;
    if (en) {
        int any = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, en) any |= cJSON_Compare(v, x, 1);
        if (!any) return 0;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(sc, "properties");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
        const cJSON *k;
        cJSON_ArrayForEach(k, v) {
            const cJSON *ps = pr ? cJSON_GetObjectItemCaseSensitive(pr, k->string) : NULL;
            if (ps && !validate(k, ps)) return 0;
            if (!ps && cJSON_IsFalse(ap)) return 0;
            if (!ps && cJSON_IsObject(ap) && !validate(k, ap)) return 0;
            /* a key twice: JSON Schema sees the last one; the grammar refuses a named key twice */
            int n = 0;
            const cJSON *k2;
            cJSON_ArrayForEach(k2, v) n += !strcmp(k2->string, k->string);
            if (n > 1 && pr && pr->child) return 0;
        }
        const cJSON *rq = cJSON_GetObjectItemCaseSensitive(sc, "required"), *r;
        cJSON_ArrayForEach(r, rq) if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return 0;
    }
    if (cJSON_IsArray(v)) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(sc, "items");
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(sc, "minItems"), *mx = cJSON_GetObjectItemCaseSensitive(sc, "maxItems");
        const int n = cJSON_GetArraySize(v);
        if (mn && n < mn->valuedouble) return 0;
        if (mx && n > mx->valuedouble) return 0;
        const cJSON *x;
        if (it) cJSON_ArrayForEach(x, v) if (!validate(x, it)) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- helpers */

static srv_grammar *compile_text(const char *schema, srv_err *err) {
    cJSON *j = cJSON_Parse(schema);
    srv_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    if (!j || !srv_grammar_compile(j, "schema", &g, err)) g = NULL;
    cJSON_Delete(j);
    return g;
}

/* Feed doc byte by byte: the index of the first refused byte, -1 when all accepted (then *end = can_end). */
static int feed_doc(const srv_grammar *g, const char *doc, int *end) {
    srv_gstate *st = srv_gstate_new(g);
    int bad = -1;
    for (size_t i = 0; doc[i]; i++)
        if (!srv_gstate_feed(st, doc + i, 1)) {
            bad = (int)i;
            break;
        }
    *end = bad < 0 && srv_gstate_can_end(st);
    srv_gstate_free(st);
    return bad;
}

/* A synthetic vocabulary: every byte, structural and literal pieces, words, a 2-byte character,
 * pieces of a 3-byte one, and the end-of-generation token (last). */
static srv_vocab *make_vocab(void) {
    static const char *const extra[] = {"{\"", "\":", "\",\"", "\"}", "}}", "]}", "[\"", "\"]", "true", "false", "null",
                                        "12", "-3", "0.5", "e+7", " ", "\n  ", ", ", "name", "age", "tags", "é",
                                        "\xe2\x82", "\xac", "\\u00e9", "\\n", "ab", "xyz", "1,", "[]", "{}", "\"a\"",
                                        "\":\"", "\":[", "\":{", "],\"", "},\"", "\"nam", "\"name\":", "tru", "nul",
                                        "xyz\"", "ab c", "1.5e", "\xe2\x82\xac", "a\xe2", "a\\"};
    const int ne = (int)(sizeof extra / sizeof *extra), n = 256 + ne + 1;
    srv_vocab *v = calloc(1, sizeof *v);
    v->n = n;
    v->off = malloc(sizeof(uint32_t) * (size_t)(n + 1));
    v->eog = calloc((size_t)n, 1);
    v->bytes = malloc(4096);
    uint32_t len = 0;
    for (int i = 0; i < n; i++) {
        v->off[i] = len;
        if (i < 256) v->bytes[len++] = (char)i;
        else if (i < 256 + ne) {
            memcpy(v->bytes + len, extra[i - 256], strlen(extra[i - 256]));
            len += (uint32_t)strlen(extra[i - 256]);
        }
    }
    v->off[n] = len;
    v->eog[n - 1] = 1;
    if (!srv_vocab_build_index(v)) abort();
    return v;
}

/* ---------------------------------------------------------------- random schemas */

static uint64_t g_rng = 12345;
static int rnd(int n) { return (int)(tl_rand_u64(&g_rng) % (uint64_t)n); }

static cJSON *rand_literal(void) {
    switch (rnd(5)) {
    case 0: {
        char b[8];
        snprintf(b, sizeof b, "v%d", rnd(20));
        return cJSON_CreateString(b);
    }
    case 1: return cJSON_CreateNumber(rnd(200) - 100);
    case 2: return cJSON_CreateNumber((rnd(200) - 100) / 4.0);
    case 3: return cJSON_CreateBool(rnd(2));
    default: return cJSON_CreateNull();
    }
}

static cJSON *rand_schema(int depth) {
    static const char *const types[] = {"string", "integer", "number", "boolean", "null", "object", "array"};
    cJSON *s = cJSON_CreateObject();
    const int pick = rnd(depth > 2 ? 6 : 10);
    if (pick == 5) { /* enum (maybe mixed types, maybe with a type that filters it) */
        cJSON *e = cJSON_AddArrayToObject(s, "enum");
        const int n = 1 + rnd(4);
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(e, rand_literal());
        if (rnd(3) == 0) cJSON_AddItemToArray(e, cJSON_CreateNumber(1)), cJSON_AddItemToArray(e, cJSON_CreateNumber(12));
        return s;
    }
    if (pick == 4 && rnd(2)) {
        cJSON_AddItemToObject(s, "const", rand_literal());
        return s;
    }
    if (pick == 3 && rnd(2)) { /* a list of types */
        cJSON *t = cJSON_AddArrayToObject(s, "type");
        cJSON_AddItemToArray(t, cJSON_CreateString(types[rnd(5)]));
        cJSON_AddItemToArray(t, cJSON_CreateString("null"));
        return s;
    }
    const char *t = depth > 2 ? types[rnd(5)] : pick >= 6 ? types[5 + rnd(2)] : types[rnd(7)];
    if (rnd(12) == 0) t = NULL; /* no type: any value */
    if (t) cJSON_AddStringToObject(s, "type", t);
    if (rnd(3) == 0) cJSON_AddStringToObject(s, "description", "ignored");
    if (t && !strcmp(t, "object")) {
        if (rnd(5) == 0) { /* free keys, or none: an empty 'properties' / 'additionalProperties': false */
            if (rnd(3) == 0) cJSON_AddObjectToObject(s, "properties");
            const int a = rnd(3);
            if (a == 1) cJSON_AddItemToObject(s, "additionalProperties", rand_schema(depth + 1));
            if (a == 2) cJSON_AddFalseToObject(s, "additionalProperties");
            return s;
        }
        cJSON *p = cJSON_AddObjectToObject(s, "properties"), *rq = cJSON_AddArrayToObject(s, "required");
        const int n = 1 + rnd(4);
        for (int i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof name, "%s%d", rnd(2) ? "k" : "key", i); /* "k0" is a prefix of "k01" etc. */
            if (rnd(4) == 0) snprintf(name, sizeof name, "k%d%d", i, i);
            if (cJSON_GetObjectItemCaseSensitive(p, name)) continue;
            cJSON_AddItemToObject(p, name, rand_schema(depth + 1));
            if (rnd(2)) cJSON_AddItemToArray(rq, cJSON_CreateString(name));
        }
        if (rnd(2)) cJSON_AddFalseToObject(s, "additionalProperties");
    } else if (t && !strcmp(t, "array")) {
        if (rnd(4)) cJSON_AddItemToObject(s, "items", rand_schema(depth + 1));
        const int mn = rnd(3), mx = mn + rnd(4);
        if (rnd(2)) cJSON_AddNumberToObject(s, "minItems", mn);
        if (rnd(2)) cJSON_AddNumberToObject(s, "maxItems", mx);
    }
    return s;
}

static int g_mask_diff; /* steps where the fast mask (indexed vocabulary) differs from the simple one */

/* One random walk: tokens drawn uniformly among the allowed ones (after 200 steps, closing pieces
 * first) until the end token. Returns the document (malloc'ed) or NULL when it did not finish in
 * 3000 tokens. *stuck = 1 when the mask left no token. Every step also compares srv_gstate_mask
 * with srv_gstate_mask_simple (g_mask_diff). */
static char *walk(const srv_grammar *g, const srv_vocab *v, int *stuck) {
    srv_gstate *st = srv_gstate_new(g);
    float *lg = malloc(sizeof(float) * (size_t)v->n), *lg2 = malloc(sizeof(float) * (size_t)v->n);
    int32_t *ok = malloc(sizeof(int32_t) * (size_t)v->n);
    size_t cap = 1 << 16, len = 0;
    char *doc = malloc(cap);
    *stuck = 0;
    int finished = 0;
    for (int step = 0; step < 3000 && !finished; step++) {
        for (int32_t i = 0; i < v->n; i++) lg[i] = lg2[i] = 0;
        const int32_t allowed = srv_gstate_mask(st, v, lg, v->n);
        int same = allowed == srv_gstate_mask_simple(st, v, lg2, v->n);
        for (int32_t i = 0; i < v->n; i++) same &= isfinite(lg[i]) == isfinite(lg2[i]);
        g_mask_diff += !same;
        if (allowed == 0) {
            *stuck = 1;
            break;
        }
        int32_t n = 0;
        for (int32_t i = 0; i < v->n; i++)
            if (isfinite(lg[i])) ok[n++] = i;
        int32_t id = ok[rnd(n)];
        if (step > 200) { /* steer to the end: the end token, then closing bytes, then short values */
            static const char pref[] = "\"}]0tn,";
            int best = 99;
            for (int32_t k = 0; k < n; k++) {
                const int32_t t = ok[k];
                int r = 98;
                if (v->eog[t]) r = -1;
                else if (v->off[t + 1] - v->off[t] == 1) {
                    const char *p = strchr(pref, v->bytes[v->off[t]]);
                    if (p && v->bytes[v->off[t]]) r = (int)(p - pref);
                }
                if (r < best) best = r, id = t;
            }
        }
        if (v->eog[id]) {
            finished = 1;
            break;
        }
        const uint32_t a = v->off[id], b = v->off[id + 1];
        if (!srv_gstate_feed(st, v->bytes + a, b - a)) { /* the mask let through a refused token */
            *stuck = 2;
            break;
        }
        if (len + (b - a) + 1 > cap) break;
        memcpy(doc + len, v->bytes + a, b - a);
        len += b - a;
    }
    doc[len] = 0;
    srv_gstate_free(st);
    free(lg);
    free(lg2);
    free(ok);
    if (!finished) {
        free(doc);
        return NULL;
    }
    return doc;
}

/* ---------------------------------------------------------------- tests */

static void compile_errors(void) {
    static const struct {
        const char *schema, *needle;
    } bad[] = {
        {"{\"type\":\"string\",\"minLength\":2}", "schema.minLength' is not supported"},
        {"{\"type\":\"strin\"}", "schema.type' must be one of"},
        {"{\"type\":[]}", "schema.type' must be one of"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "names 'b', which is not in"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "minItems 3 > maxItems 1"},
        {"{\"type\":\"array\",\"minItems\":-1}", "minItems' must be an integer"},
        {"{\"enum\":[]}", "enum' must be a list of 1 to"},
        {"{\"type\":\"integer\",\"enum\":[\"a\",1.5]}", "no enum/const value has the schema's type"},
        {"{\"$ref\":\"#/x\"}", "schema.$ref' is not supported"},
        {"{\"anyOf\":[{}]}", "schema.anyOf' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}}}", "schema.properties.a.minimum'"},
        {"{\"type\":\"object\",\"properties\":{\"a\\\"b\":{}}}", "property names with"},
        {"{\"type\":\"object\",\"properties\":[]}", "properties' must be an object"},
        {"{\"type\":\"object\",\"required\":\"a\"}", "required' must be a list"},
        {"{\"type\":\"object\",\"additionalProperties\":3}", "additionalProperties' must be"},
        {"3", "must be a schema"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        srv_err e;
        srv_grammar *g = compile_text(bad[i].schema, &e);
        CHECK(!g && e.status == 400 && strstr(e.message, bad[i].needle) && !strncmp(e.param, "schema", 6),
              "schema %s: want a 400 with '%s', got %d '%s' (param %s)", bad[i].schema, bad[i].needle, e.status,
              e.message, e.param);
        srv_grammar_free(g);
    }
    /* nesting deeper than the matcher's frames */
    char deep[2048] = "", tail[512] = "";
    for (int i = 0; i < 20; i++) strcat(deep, "{\"type\":\"array\",\"items\":"), strcat(tail, "}");
    strcat(deep, "{}");
    strcat(deep, tail);
    srv_err e;
    srv_grammar *g = compile_text(deep, &e);
    CHECK(!g && strstr(e.message, "nests deeper"), "a schema 20 levels deep is refused: %s", e.message);
    srv_grammar_free(g);

    static const struct {
        const char *rf, *needle; /* needle NULL: accepted */
        int is_null;             /* accepted with no grammar ("text") */
    } fmts[] = {
        {"{\"type\":\"text\"}", NULL, 1},
        {"{\"type\":\"json_object\"}", NULL, 0},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"integer\"}}}", NULL, 0},
        {"{\"type\":\"xml\"}", "expected \"text\", \"json_object\" or \"json_schema\"", 0},
        {"\"json\"", "must be an object", 0},
        {"{\"type\":\"json_schema\"}", "json_schema' must be an object", 0},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", "schema' is required", 0},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":1,\"schema\":{}}}", "name' must be a string", 0},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"strict\":\"yes\",\"schema\":{}}}", "strict' must be true or false", 0},
    };
    for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++) {
        cJSON *j = cJSON_Parse(fmts[i].rf);
        memset(&e, 0, sizeof e);
        g = NULL;
        const int ok = srv_grammar_from_format(j, &g, &e);
        if (fmts[i].needle)
            CHECK(!ok && !g && e.status == 400 && strstr(e.message, fmts[i].needle) && !strncmp(e.param, "response_format", 15),
                  "response_format %s: want 400 '%s', got '%s' (%s)", fmts[i].rf, fmts[i].needle, e.message, e.param);
        else CHECK(ok && (fmts[i].is_null ? !g : g != NULL), "response_format %s accepted: %s", fmts[i].rf, e.message);
        srv_grammar_free(g);
        cJSON_Delete(j);
    }
}

static void documents(void) {
    static const struct {
        const char *schema, *doc;
        int bad_at; /* -1: accepted */
        int end;    /* accepted and complete */
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":12}", -1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{ \"a\" :\n 12 }", -1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{}", 1, 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1.5}", 6, 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"b\":1}", 2, 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1,\"a\":2}", 6, 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{\"a\":1", -1, 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"ab\":{}}}", "{\"ab\":null,\"a\":[1,{\"x\":\"y\"}]}", -1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"ab\":{}}}", "{\"abc\":1}", 4, 0},
        {"{\"type\":\"number\"}", "-0.5e+10", -1, 1},
        {"{\"type\":\"number\"}", "01", 1, 0},
        {"{\"type\":\"number\"}", "1.", -1, 0},
        {"{\"type\":\"number\"}", "1234567890123456", 15, 0},
        {"{\"type\":\"integer\"}", "-7", -1, 1},
        {"{\"type\":\"integer\"}", "7e1", 1, 0},
        {"{\"type\":\"string\"}", "\"caf\xc3\xa9 \\u00e9\\n\"", -1, 1},
        {"{\"type\":\"string\"}", "\"a\nb\"", 2, 0},
        {"{\"type\":\"string\"}", "\"\xc3\x28\"", 2, 0},
        {"{\"type\":\"string\"}", "\"\xed\xa0\x80\"", 2, 0},  /* a surrogate in UTF-8 */
        {"{\"type\":\"string\"}", "\"\xe0\x80\xaf\"", 2, 0},  /* overlong */
        {"{\"type\":\"string\"}", "\"\\q\"", 2, 0},
        {"{\"type\":\"string\"}", "\"ok\" ", 4, 0},          /* nothing after the end */
        {"{\"enum\":[\"red\",\"green\",1,12,null]}", "\"green\"", -1, 1},
        {"{\"enum\":[\"red\",\"green\",1,12,null]}", "1", -1, 1},
        {"{\"enum\":[\"red\",\"green\",1,12,null]}", "12", -1, 1},
        {"{\"enum\":[\"red\",\"green\",1,12,null]}", "13", 1, 0},
        {"{\"enum\":[\"red\",\"green\",1,12,null]}", "\"blue\"", 1, 0},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[true,false]", -1, 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[]", 1, 0},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[true,true,", 10, 0},
        {"{\"type\":[\"string\",\"null\"]}", "null", -1, 1},
        {"{\"type\":[\"string\",\"null\"]}", "true", 0, 0},
        {"{\"const\":{\"a\":[1,2]}}", "{\"a\":[1,2]}", -1, 1},
        {"{\"type\":\"object\"}", "[", 0, 0},
        {"{\"type\":\"object\"}", "{\"x\":{\"y\":[1,\"z\",null]},\"x\":2}", -1, 1},
        /* no named property: an empty 'properties' or 'additionalProperties': false allows only {} */
        {"{\"type\":\"object\",\"properties\":{}}", "{}", -1, 1},
        {"{\"type\":\"object\",\"properties\":{}}", "{\"aUb\": \"x\"}", 1, 0},
        {"{\"type\":\"object\",\"additionalProperties\":false}", "{ \"a\"", 2, 0},
        {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":1,\"b\":2}", -1, 1},
        {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":true", 5, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        srv_err e;
        srv_grammar *g = compile_text(cases[i].schema, &e);
        if (!CHECK(g != NULL, "schema %s compiles: %s", cases[i].schema, e.message)) continue;
        int end = 0;
        const int at = feed_doc(g, cases[i].doc, &end);
        CHECK(at == cases[i].bad_at && end == cases[i].end, "%s on %s: refused at %d (want %d), complete %d (want %d)",
              cases[i].doc, cases[i].schema, at, cases[i].bad_at, end, cases[i].end);
        srv_grammar_free(g);
    }
    /* whitespace between tokens is bounded (a model cannot loop on spaces) */
    srv_err e;
    srv_grammar *g = compile_text("{\"type\":\"array\"}", &e);
    char ws[80] = "[\n";
    memset(ws + 2, '\t', 40);
    int end;
    CHECK(feed_doc(g, ws, &end) == 22, "whitespace between tokens: a newline and at most 20 spaces or tabs");
    CHECK(feed_doc(g, "[  ", &end) == 2 && feed_doc(g, "[\r", &end) == 1 && feed_doc(g, "[ \n", &end) == 2,
          "whitespace between tokens: one space, no carriage return, no newline after a space");
    srv_grammar_free(g);
}

static void fuzz_schemas(void) {
    srv_vocab *v = make_vocab();
    int n_schemas = 0, n_docs = 0, n_valid = 0, n_unfinished = 0, n_stuck = 0, n_leak = 0;
    for (int i = 0; i < 400; i++) {
        cJSON *sc = rand_schema(0);
        srv_err e;
        memset(&e, 0, sizeof e);
        srv_grammar *g = NULL;
        if (!srv_grammar_compile(sc, "schema", &g, &e)) { /* only a type that filters out every enum value */
            char *t = cJSON_PrintUnformatted(sc);
            CHECK(strstr(e.message, "no enum/const value has the schema's type") != NULL, "generated schema %s: %s", t, e.message);
            free(t);
            cJSON_Delete(sc);
            continue;
        }
        n_schemas++;
        for (int w = 0; w < 3; w++) {
            int stuck = 0;
            char *doc = walk(g, v, &stuck);
            n_stuck += stuck == 1;
            n_leak += stuck == 2;
            if (!doc) {
                n_unfinished++;
                continue;
            }
            n_docs++;
            cJSON *d = cJSON_Parse(doc);
            const int ok = d && validate(d, sc);
            n_valid += ok;
            if (!ok) {
                char *t = cJSON_PrintUnformatted(sc);
                CHECK(0, "a generated document does not %s:\n  schema %s\n  doc    %s", d ? "validate" : "parse", t, doc);
                free(t);
            }
            cJSON_Delete(d);
            free(doc);
        }
        srv_grammar_free(g);
        cJSON_Delete(sc);
    }
    CHECK(n_schemas >= 300, "%d of 400 generated schemas compile", n_schemas);
    CHECK(n_docs > 0 && n_valid == n_docs, "every finished walk parses and validates: %d of %d", n_valid, n_docs);
    CHECK(n_stuck == 0 && n_leak == 0, "the mask never leaves no token (%d) nor lets a refused one through (%d)", n_stuck, n_leak);
    CHECK(g_mask_diff == 0, "the fast mask equals the simple one at every step of every walk (%d differ)", g_mask_diff);
    CHECK(n_unfinished * 20 <= n_docs + n_unfinished, "walks that did not finish in 3000 tokens: %d of %d", n_unfinished,
          n_docs + n_unfinished);
    printf("grammar fuzz: %d schemas, %d documents (all valid: %d), %d unfinished\n", n_schemas, n_docs, n_valid, n_unfinished);
    srv_vocab_free(v);
}

static srv_tools *tools_of(const char *body, srv_grammar **g, srv_err *e) {
    cJSON *o = cJSON_Parse(body);
    srv_tools *t = NULL;
    memset(e, 0, sizeof *e);
    *g = NULL;
    if (!o || !srv_tools_parse(o, &t, g, e)) {
        srv_tools_free(t);
        t = NULL;
        if (!e->status) e->status = -1;
    }
    cJSON_Delete(o);
    return t;
}

static void tools(void) {
    static const char *const T = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                                 "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                                 "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";
    static const struct {
        const char *extra, *needle, *param;
    } bad[] = {
        {"\"tools\":{}", "must be a list", "tools"},
        {"\"tools\":[]", "1 to 64 functions", "tools"},
        {"\"tools\":[{\"type\":\"code\"}]", "must be {\"type\": \"function\"", "tools[0]"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "letters, digits", "tools[0].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
         "given twice", "tools[1].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]", "JSON schema", "tools[0].function.parameters"},
        {"\"tool_choice\":\"auto\"", "needs 'tools'", "tool_choice"},
        {"%s,\"tool_choice\":\"always\"", "expected \"none\"", "tool_choice"},
        {"%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}", "not in 'tools'", "tool_choice"},
        {"%s,\"parallel_tool_calls\":1", "true or false", "parallel_tool_calls"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
         "{\"x\":{\"type\":\"integer\",\"minimum\":1}}}}}],\"tool_choice\":\"required\"",
         "minimum' is not supported", "tools[0].function.parameters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[1024], ex[900];
        snprintf(ex, sizeof ex, bad[i].extra, T);
        snprintf(body, sizeof body, "{%s}", ex);
        srv_err e;
        srv_grammar *g = NULL;
        srv_tools *t = tools_of(body, &g, &e);
        CHECK(!t && e.status == 400 && strstr(e.message, bad[i].needle) && !strncmp(e.param, bad[i].param, strlen(bad[i].param)),
              "tools %s: want 400 '%s' (param %s), got %d '%s' (%s)", body, bad[i].needle, bad[i].param, e.status, e.message, e.param);
        srv_grammar_free(g);
    }
    char body[1024];
    snprintf(body, sizeof body, "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}", T);
    srv_err e;
    srv_grammar *g = NULL;
    srv_tools *t = tools_of(body, &g, &e);
    CHECK(t && g && t->n == 2 && t->choice == SRV_TOOL_NAMED && t->named == 0, "named tool_choice: a grammar (%s)", e.message);
    if (t && g) {
        int end = 0;
        CHECK(feed_doc(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", &end) < 0 && end,
              "the forced call: prefix, {name, arguments valid under the function's schema}, suffix");
        CHECK(feed_doc(g, "<tool_call>\n{\"name\":\"now\"", &end) == 21, "the forced call: only the named function");
        CHECK(feed_doc(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}", &end) == 47,
              "the forced call: the arguments' required fields");
        CHECK(feed_doc(g, "{", &end) == 0, "the forced call: the prefix first");
        CHECK(feed_doc(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}\n</tool_call> ", &end) == 72,
              "nothing after the suffix");
        /* parsing: the three formats; unknown functions and bad JSON stay text */
        static const struct {
            const char *text, *name, *args, *content;
            int n;
        } out[] = {
            {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "get_weather",
             "{\"city\":\"Paris\"}", NULL, 1},
            {"Let me check.\n<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"get_weather\","
             "\"arguments\":{\"city\":\"Oslo\"}}</tool_call>", "now", "{}", "Let me check.", 2},
            {" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "get_weather", "{\"city\":\"Rome\"}", NULL, 1},
            {"[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Bern\"}}]", "get_weather", "{\"city\":\"Bern\"}", NULL, 1},
            {"<tool_call>{\"name\":\"delete_all\",\"arguments\":{}}</tool_call>", NULL, NULL, NULL, 0},
            {"<tool_call>{\"name\":\"now\",</tool_call>", NULL, NULL, NULL, 0},
            {"It is sunny.", NULL, NULL, NULL, 0},
        };
        for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
            char *content = NULL;
            cJSON *c = srv_tools_extract(t, out[i].text, strlen(out[i].text), 7, &content);
            const cJSON *f = c ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, 0), "function") : NULL;
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *ar = cJSON_GetObjectItemCaseSensitive(f, "arguments");
            const cJSON *id = c ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, 0), "id") : NULL;
            const int ok = out[i].n == 0 ? !c && !content
                                         : c && cJSON_GetArraySize(c) == out[i].n && !strcmp(nm->valuestring, out[i].name) &&
                                               !strcmp(ar->valuestring, out[i].args) && !strcmp(id->valuestring, "call_7_0") &&
                                               (out[i].content ? content && !strcmp(content, out[i].content) : !content);
            CHECK(ok, "tool calls of %s: want %d (%s %s), content '%s'", out[i].text, out[i].n, out[i].name ? out[i].name : "-",
                  out[i].args ? out[i].args : "-", content ? content : "");
            cJSON_Delete(c);
            free(content);
        }
        char *p = srv_tools_prompt(t), *ct = srv_tool_call_text("now", "{\"a\": 1}");
        CHECK(p && strstr(p, "<tools>\n{\"name\":\"get_weather\",\"parameters\":{") && strstr(p, "{\"name\":\"now\"}\n</tools>") &&
                  ct && !strcmp(ct, "<tool_call>\n{\"name\":\"now\",\"arguments\":{\"a\":1}}\n</tool_call>"),
              "the tools' system text and a call as the model writes it:\n%s\n%s", p ? p : "", ct ? ct : "");
        free(p);
        free(ct);
    }
    srv_tools_free(t);
    srv_grammar_free(g);
}

/* Alternatives of the literal prefix (mistral-v7's "[TOOL_CALLS]NAME[ARGS]" per function): the
 * document follows any one of them, nothing else; the fast mask agrees inside the prefix; a set where
 * one alternative starts another is refused. */
static void prefixes(void) {
    srv_err e;
    srv_grammar *g = compile_text("{\"type\":\"object\"}", &e);
    const char *const alt[3] = {"[TOOL_CALLS]get[ARGS]", "[TOOL_CALLS]g[ARGS]", "[TOOL_CALLS]go.x[ARGS]"};
    CHECK(g && srv_grammar_set_prefixes(g, alt, 3, NULL), "three prefixes set");
    int end;
    CHECK(feed_doc(g, "[TOOL_CALLS]g[ARGS]{}", &end) < 0 && end, "the second alternative, then the document");
    CHECK(feed_doc(g, "[TOOL_CALLS]go.x[ARGS]{\"a\": 1}", &end) < 0 && end, "the third alternative");
    CHECK(feed_doc(g, "[TOOL_CALLS]get[ARGS] {}", &end) < 0 && end, "the first alternative, a space, the document");
    CHECK(feed_doc(g, "[TOOL_CALLS]gx", &end) == 13 && feed_doc(g, "{}", &end) == 0 && feed_doc(g, "[TOOL_CALLS]get{", &end) == 15,
          "no other prefix: refused at the first byte no alternative has");
    srv_vocab *v = make_vocab();
    srv_gstate *st = srv_gstate_new(g);
    int same = 1;
    const char *doc = "[TOOL_CALLS]go.x[ARGS]{}";
    float *a = malloc(sizeof(float) * (size_t)v->n), *b = malloc(sizeof(float) * (size_t)v->n);
    for (size_t i = 0; i <= strlen(doc); i++) {
        for (int32_t k = 0; k < v->n; k++) a[k] = b[k] = 0;
        same &= srv_gstate_mask(st, v, a, v->n) == srv_gstate_mask_simple(st, v, b, v->n);
        for (int32_t k = 0; k < v->n; k++) same &= isfinite(a[k]) == isfinite(b[k]);
        if (doc[i]) srv_gstate_feed(st, doc + i, 1);
    }
    CHECK(same, "inside and after the prefix, the fast mask == the simple one");
    free(a);
    free(b);
    srv_gstate_free(st);
    srv_vocab_free(v);
    const char *const bad[2] = {"[TOOL_CALLS]g", "[TOOL_CALLS]get"};
    CHECK(!srv_grammar_set_prefixes(g, bad, 2, NULL), "prefixes where one starts another are refused");
    srv_grammar_free(g);
}

int main(void) {
    prefixes();
    tools();
    compile_errors();
    documents();
    fuzz_schemas();
    return tl_finish("test_grammar");
}
