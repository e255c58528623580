/* tools.c — function calling of `afinar serve` (tools.h). Field names and shapes: OpenAI's API
 * reference (chat/completions: tools, tool_choice, message.tool_calls, finish_reason "tool_calls"). */
#include "serve/tools.h"

#include "core/core.h"
#include "tokenizer/tok_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BADT(param, ...) srv_err_set(err, 400, "invalid_request_error", NULL, (param), __VA_ARGS__)
#define CALL_OPEN "<tool_call>\n"
#define CALL_CLOSE "\n</tool_call>"

void srv_tools_free(srv_tools *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n; i++) {
        free(t->name[i]);
        free(t->spec[i]);
        free(t->params[i]);
    }
    free(t->json);
    free(t->name);
    free(t->spec);
    free(t->params);
    free(t);
}

static int good_name(const char *s) {
    const size_t n = strlen(s);
    if (n < 1 || n > 64) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return 0;
    return 1;
}

/* The JSON schema of the arguments of a forced call: function `only`'s "parameters" (or the one
 * function's), else any object. */
static cJSON *args_schema(const srv_tools *t, int32_t only) {
    const int one = only >= 0 || t->n == 1;
    cJSON *args = one ? cJSON_Parse(t->params[only >= 0 ? only : 0]) : NULL;
    if (!args) args = cJSON_CreateObject();
    if (args && (!one || !cJSON_GetObjectItemCaseSensitive(args, "type"))) cJSON_AddStringToObject(args, "type", "object");
    return args;
}

/* {"name": one of the names, args_key: the arguments' schema}, both required. */
static cJSON *call_schema(const srv_tools *t, int32_t only, const char *args_key) {
    cJSON *sc = cJSON_CreateObject(), *pr = cJSON_AddObjectToObject(sc, "properties"), *nm = cJSON_AddObjectToObject(pr, "name");
    cJSON *en = cJSON_AddArrayToObject(nm, "enum");
    for (int32_t i = 0; i < t->n; i++)
        if (only < 0 || i == only) cJSON_AddItemToArray(en, cJSON_CreateString(t->name[i]));
    cJSON_AddItemToObject(pr, args_key, args_schema(t, only));
    cJSON *rq = cJSON_AddArrayToObject(sc, "required");
    cJSON_AddItemToArray(rq, cJSON_CreateString("name"));
    cJSON_AddItemToArray(rq, cJSON_CreateString(args_key));
    cJSON_AddStringToObject(sc, "type", "object");
    return sc;
}

/* The grammar of one forced call in the format of layout fam (native 0: the generic fallback's
 * CALL_OPEN {"name", "arguments"} CALL_CLOSE; the other formats: srv_tools_bind). */
static int call_grammar(const srv_tools *t, int32_t only, int native, af_chat_family fam, srv_grammar **out, srv_err *err) {
    *out = NULL;
    const int32_t k = only >= 0 ? only : 0;
    cJSON *sc = NULL;
    const char *pre = CALL_OPEN, *suf = CALL_CLOSE;
    char *m7[SRV_MAX_TOOLS]; /* mistral-v7: the prefix of each function that may be called */
    int32_t n7 = 0;
    int oom = 0;
    if (native && fam == AF_CHAT_LLAMA3) {
        sc = call_schema(t, only, "parameters");
        pre = suf = NULL;
    } else if (native && fam == AF_CHAT_MISTRAL) {
        sc = cJSON_CreateObject();
        cJSON_AddStringToObject(sc, "type", "array");
        cJSON_AddItemToObject(sc, "items", call_schema(t, only, "arguments"));
        cJSON_AddNumberToObject(sc, "minItems", 1);
        pre = "[TOOL_CALLS]", suf = NULL;
    } else if (native && fam == AF_CHAT_MISTRAL7) { /* the name outside the JSON: one prefix per function */
        sc = args_schema(t, only);
        for (int32_t i = 0; i < t->n; i++)
            if (only < 0 || i == only) {
                char *m = malloc(strlen(t->name[i]) + 32);
                if (m) sprintf(m, "[TOOL_CALLS]%s[ARGS]", t->name[i]);
                m7[n7++] = m;
                if (!m) oom = 1;
            }
        pre = NULL, suf = NULL;
    } else {
        sc = call_schema(t, only, "arguments");
    }
    srv_grammar *g = NULL;
    int ok = sc && !oom;
    if (!ok) srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    if (ok && !native) { /* the arguments' schema: name the tool's field in errors */
        char path[64];
        snprintf(path, sizeof path, "tools[%d].function.parameters", (int)k);
        cJSON *args = args_schema(t, only);
        ok = args && srv_grammar_compile(args, path, &g, err);
        if (!args) srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        cJSON_Delete(args);
        srv_grammar_free(g);
        g = NULL;
    }
    if (ok) ok = srv_grammar_compile(sc, "tool_choice", &g, err);
    cJSON_Delete(sc);
    if (ok && !(n7 ? srv_grammar_set_prefixes(g, (const char *const *)m7, n7, NULL) : srv_grammar_set_affixes(g, pre, suf))) {
        srv_grammar_free(g);
        g = NULL;
        ok = srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (int32_t i = 0; i < n7; i++) free(m7[i]);
    *out = ok ? g : NULL;
    return ok;
}

int srv_tools_parse(const cJSON *o, srv_tools **out, srv_grammar **grammar, srv_err *err) {
    *out = NULL;
    *grammar = NULL;
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(o, "tools"), *tc = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    const cJSON *ptc = cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls");
    if (ptc && !cJSON_IsNull(ptc) && !cJSON_IsBool(ptc)) return BADT("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    if (tc && cJSON_IsNull(tc)) tc = NULL;
    if (!tl || cJSON_IsNull(tl)) {
        if (tc && !(cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")))
            return BADT("tool_choice", "'tool_choice' needs 'tools'");
        return 1;
    }
    if (!cJSON_IsArray(tl)) return BADT("tools", "'tools' must be a list of {\"type\": \"function\", \"function\": {...}}");
    const int n = cJSON_GetArraySize(tl);
    if (n < 1 || n > SRV_MAX_TOOLS) return BADT("tools", "'tools' must hold 1 to %d functions (%d)", SRV_MAX_TOOLS, n);
    srv_tools *t = calloc(1, sizeof *t);
    if (t) {
        t->name = calloc((size_t)n, sizeof(char *));
        t->spec = calloc((size_t)n, sizeof(char *));
        t->params = calloc((size_t)n, sizeof(char *));
    }
    if (!t || !t->name || !t->spec || !t->params) {
        srv_tools_free(t);
        return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    *out = t;
    if (!(t->json = cJSON_PrintUnformatted(tl))) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, tl) {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", (int)t->n);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "type"), *fn = cJSON_GetObjectItemCaseSensitive(e, "function");
        if (!cJSON_IsObject(e) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsObject(fn))
            return BADT(p, "'%s' must be {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}", p);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name"), *ds = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        snprintf(p, sizeof p, "tools[%d].function.name", (int)t->n);
        if (!cJSON_IsString(nm) || !good_name(nm->valuestring))
            return BADT(p, "'%s' must be 1 to 64 letters, digits, '_', '-' or '.'", p);
        for (int32_t k = 0; k < t->n; k++)
            if (!strcmp(t->name[k], nm->valuestring)) return BADT(p, "'%s': the function '%s' is given twice", p, nm->valuestring);
        snprintf(p, sizeof p, "tools[%d].function.description", (int)t->n);
        if (ds && !cJSON_IsString(ds) && !cJSON_IsNull(ds)) return BADT(p, "'%s' must be a string", p);
        snprintf(p, sizeof p, "tools[%d].function.parameters", (int)t->n);
        if (pa && !cJSON_IsObject(pa) && !cJSON_IsNull(pa)) return BADT(p, "'%s' must be a JSON schema (an object)", p);
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddStringToObject(sp, "name", nm->valuestring);
        if (cJSON_IsString(ds)) cJSON_AddStringToObject(sp, "description", ds->valuestring);
        if (cJSON_IsObject(pa)) cJSON_AddItemToObject(sp, "parameters", cJSON_Duplicate(pa, 1));
        const int32_t i = t->n++;
        t->name[i] = strdup(nm->valuestring);
        t->spec[i] = cJSON_PrintUnformatted(sp);
        t->params[i] = cJSON_IsObject(pa) ? cJSON_PrintUnformatted(pa) : strdup("{}");
        cJSON_Delete(sp);
        if (!t->name[i] || !t->spec[i] || !t->params[i]) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    t->choice = SRV_TOOL_AUTO;
    if (tc && cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "none")) t->choice = SRV_TOOL_NONE;
        else if (!strcmp(tc->valuestring, "auto")) t->choice = SRV_TOOL_AUTO;
        else if (!strcmp(tc->valuestring, "required")) t->choice = SRV_TOOL_REQUIRED;
        else return BADT("tool_choice", "'tool_choice' is \"%.40s\": expected \"none\", \"auto\", \"required\" or "
                                        "{\"type\": \"function\", \"function\": {\"name\": ...}}", tc->valuestring);
    } else if (tc) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsObject(tc) || !cJSON_IsString(nm))
            return BADT("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                       "\"function\": {\"name\": ...}}");
        t->named = -1;
        for (int32_t k = 0; k < t->n; k++)
            if (!strcmp(t->name[k], nm->valuestring)) t->named = k;
        if (t->named < 0) return BADT("tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", nm->valuestring);
        t->choice = SRV_TOOL_NAMED;
    }
    if (t->choice == SRV_TOOL_REQUIRED || t->choice == SRV_TOOL_NAMED)
        return call_grammar(t, t->choice == SRV_TOOL_NAMED ? t->named : -1, 0, AF_CHAT_NONE, grammar, err);
    return 1;
}

char *srv_tools_prompt(const srv_tools *t) {
    static const char head[] =
        "You can call functions to help answer. Their names, descriptions and the JSON schemas of their "
        "arguments:\n<tools>\n";
    static const char tail[] = "</tools>\nTo call a function, answer with one block per call:\n" CALL_OPEN
                               "{\"name\": \"FUNCTION_NAME\", \"arguments\": {ARGUMENTS_AS_JSON}}" CALL_CLOSE "\n";
    size_t n = sizeof head + sizeof tail;
    for (int32_t i = 0; i < t->n; i++) n += strlen(t->spec[i]) + 1;
    char *s = malloc(n), *p = s;
    if (!s) return NULL;
    p += sprintf(p, "%s", head);
    for (int32_t i = 0; i < t->n; i++) p += sprintf(p, "%s\n", t->spec[i]);
    sprintf(p, "%s", tail);
    return s;
}

char *srv_tool_call_text(const char *name, const char *args_json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON *a = cJSON_Parse(args_json);
    cJSON_AddItemToObject(o, "arguments", a ? a : cJSON_CreateObject());
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!js) return NULL;
    char *s = malloc(strlen(js) + sizeof CALL_OPEN + sizeof CALL_CLOSE);
    if (s) sprintf(s, "%s%s%s", CALL_OPEN, js, CALL_CLOSE);
    free(js);
    return s;
}

int srv_tools_native(const af_tokenizer *tok, af_chat_family fam) {
    /* the tokenizer's own check: a conversation holding a tool result passes only where the layout
     * has tool turns */
    const af_chat_msg probe = {AF_ROLE_TOOL, "", 0};
    return af_chat_tools_check(tok, fam, &probe, 1, NULL) == AF_OK;
}

int srv_tools_bind(srv_tools *t, const af_tokenizer *tok, af_chat_family fam, srv_grammar **grammar, srv_err *err) {
    if (!t) return 1;
    t->tok = tok;
    t->fam = fam;
    t->native = srv_tools_native(tok, fam);
    if (!t->native || (t->choice != SRV_TOOL_REQUIRED && t->choice != SRV_TOOL_NAMED)) return 1;
    if (fam != AF_CHAT_LLAMA3 && fam != AF_CHAT_MISTRAL && fam != AF_CHAT_MISTRAL7) return 1; /* Hermes: as parsed */
    srv_grammar *g = NULL;
    if (!call_grammar(t, t->choice == SRV_TOOL_NAMED ? t->named : -1, 1, fam, &g, err)) return 0;
    srv_grammar_free(*grammar);
    *grammar = g;
    return 1;
}

int srv_tools_marker(const char *s, size_t n) {
    static const char *const mk[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>", "<tool_call>", "</tool_call>"};
    for (size_t i = 0; i < sizeof mk / sizeof *mk; i++)
        if (strlen(mk[i]) == n && !memcmp(mk[i], s, n)) return 1;
    return 0;
}

/* The generic fallback: the tools' description in the system turn (appended to the request's, or one
 * of its own), earlier calls as CALL_OPEN ... CALL_CLOSE text of the assistant turn, tool results as
 * user turns <tool_response>...</tool_response>; then the layout's plain rendering. */
static af_status generic_prompt(const af_tokenizer *tok, af_chat_family fam, const srv_req *rq, int tools_on, char **out) {
    const int32_t n = rq->n_msgs;
    af_chat_msg *m = malloc(sizeof *m * ((size_t)n + 1));
    char **own = calloc((size_t)n + 1, sizeof *own); /* strings made here, freed at the end */
    af_status st = m && own ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
    int32_t nm = 0, i0 = 0;
    if (st == AF_OK && tools_on) {
        char *tp = srv_tools_prompt(rq->tools);
        const int has_sys = rq->msgs[0].role == AF_ROLE_SYSTEM;
        char *sys = tp ? malloc(strlen(tp) + (has_sys ? rq->msgs[0].len : 0) + 3) : NULL;
        if (!sys) st = af_fail(AF_ERR_NOMEM, "out of memory");
        else if (has_sys) sprintf(sys, "%.*s\n\n%s", (int)rq->msgs[0].len, rq->msgs[0].content, tp);
        else strcpy(sys, tp);
        free(tp);
        if (sys) own[n] = sys, m[nm++] = (af_chat_msg){AF_ROLE_SYSTEM, sys, strlen(sys)};
        i0 = has_sys;
    }
    for (int32_t i = i0; st == AF_OK && i < n; i++) {
        const af_chat_msg *q = &rq->msgs[i];
        const af_chat_msg_x *x = rq->msgx ? &rq->msgx[i] : NULL;
        char *t = NULL;
        if (q->role == AF_ROLE_TOOL) {
            if ((t = malloc(q->len + 40))) sprintf(t, "<tool_response>\n%.*s\n</tool_response>", (int)q->len, q->content);
        } else if (x && x->n_calls > 0) {
            size_t cap = q->len + 1, len = q->len;
            if ((t = malloc(cap))) memcpy(t, q->content, q->len), t[len] = 0;
            for (int32_t k = 0; t && k < x->n_calls; k++) {
                char *c = srv_tool_call_text(x->calls[k].name, x->calls[k].args);
                char *nt = c ? realloc(t, len + strlen(c) + 2) : NULL;
                if (!nt) {
                    free(c);
                    free(t);
                    t = NULL;
                    break;
                }
                t = nt;
                len += (size_t)sprintf(t + len, "%s%s", len ? "\n" : "", c);
                free(c);
            }
        } else {
            m[nm++] = *q;
            continue;
        }
        if (!t) {
            st = af_fail(AF_ERR_NOMEM, "out of memory");
            break;
        }
        own[i] = t;
        m[nm++] = (af_chat_msg){q->role == AF_ROLE_TOOL ? AF_ROLE_USER : q->role, t, strlen(t)};
    }
    if (st == AF_OK) st = af_chat_prompt_text(tok, fam, m, nm, out);
    for (int32_t i = 0; own && i <= n; i++) free(own[i]);
    free(own);
    free(m);
    return st;
}

af_status srv_chat_prompt(const af_tokenizer *tok, af_chat_family fam, const srv_req *rq, char **out) {
    *out = NULL;
    const int tools_on = rq->tools && rq->tools->choice != SRV_TOOL_NONE;
    if (!tools_on && !rq->msgx) return af_chat_prompt_text(tok, fam, rq->msgs, rq->n_msgs, out);
    if (!srv_tools_native(tok, fam)) return generic_prompt(tok, fam, rq, tools_on, out);
    const af_chat_extra x = {tools_on ? rq->tools->json : NULL, tools_on ? strlen(rq->tools->json) : 0, rq->msgx};
    return af_chat_prompt_text_ex(tok, fam, rq->msgs, rq->n_msgs, &x, out);
}

/* Add one call {"name", "arguments" | "parameters"} from the JSON object c when its name is a tool's. */
static int add_call(const srv_tools *t, const cJSON *c, cJSON *calls, uint64_t req_id) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(c, "parameters");
    if (!cJSON_IsObject(c) || !cJSON_IsString(nm)) return 0;
    int known = 0;
    for (int32_t i = 0; i < t->n; i++) known |= !strcmp(t->name[i], nm->valuestring);
    if (!known) return 0;
    char *as = args ? (cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args)) : strdup("{}");
    if (!as) return 0;
    cJSON *x = cJSON_CreateObject(), *f;
    char id[64];
    snprintf(id, sizeof id, "call_%llu_%d", (unsigned long long)req_id, cJSON_GetArraySize(calls));
    cJSON_AddStringToObject(x, "id", id);
    cJSON_AddStringToObject(x, "type", "function");
    f = cJSON_AddObjectToObject(x, "function");
    cJSON_AddStringToObject(f, "name", nm->valuestring);
    cJSON_AddStringToObject(f, "arguments", as);
    free(as);
    cJSON_AddItemToArray(calls, x);
    return 1;
}

static char *trimmed(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n) return NULL;
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* srv_tools_extract in the layout's own format (af_chat_parse_tool_calls). */
static cJSON *native_extract(const srv_tools *t, const char *text, size_t len, uint64_t req_id, char **content) {
    af_chat_tool_output o;
    if (af_chat_parse_tool_calls(t->tok, t->fam, text, len, &o) != AF_OK || o.n_calls == 0) {
        af_chat_tool_output_free(&o);
        return NULL;
    }
    cJSON *calls = cJSON_CreateArray();
    for (int32_t k = 0; calls && k < o.n_calls; k++) {
        const af_chat_parsed_call *c = &o.calls[k];
        int known = 0;
        for (int32_t i = 0; i < t->n; i++) known |= !strcmp(t->name[i], c->name);
        if (!known) { /* a function the request does not offer: the answer stays text */
            cJSON_Delete(calls);
            calls = NULL;
            break;
        }
        char id[64];
        if (c->id) snprintf(id, sizeof id, "%s", c->id);
        else snprintf(id, sizeof id, "call_%llu_%d", (unsigned long long)req_id, (int)k);
        cJSON *x = cJSON_CreateObject(), *f;
        cJSON_AddStringToObject(x, "id", id);
        cJSON_AddStringToObject(x, "type", "function");
        f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", c->name);
        cJSON_AddStringToObject(f, "arguments", c->arguments);
        cJSON_AddItemToArray(calls, x);
    }
    if (calls) *content = trimmed(o.content, o.content_len);
    af_chat_tool_output_free(&o);
    return calls;
}

cJSON *srv_tools_extract(const srv_tools *t, const char *text, size_t len, uint64_t req_id, char **content) {
    *content = NULL;
    if (t->native) return native_extract(t, text, len, req_id, content);
    cJSON *calls = cJSON_CreateArray();
    char *txt = malloc(len + 1), *rest = malloc(len + 1);
    if (!calls || !txt || !rest) {
        free(txt);
        free(rest);
        cJSON_Delete(calls);
        return NULL;
    }
    memcpy(txt, text, len);
    txt[len] = 0;
    size_t rl = 0;
    const char *p = txt;
    const char *open = "<tool_call>", *close = "</tool_call>";
    for (;;) { /* <tool_call> {json} </tool_call> blocks (Qwen2.5/3, Hermes) */
        const char *a = strstr(p, open);
        if (!a) break;
        const char *b = strstr(a, close);
        const char *js = a + strlen(open), *je = b ? b : txt + len;
        char *body = trimmed(js, (size_t)(je - js));
        cJSON *c = body ? cJSON_Parse(body) : NULL;
        free(body);
        if (c && add_call(t, c, calls, req_id)) {
            memcpy(rest + rl, p, (size_t)(a - p));
            rl += (size_t)(a - p);
        } else {
            memcpy(rest + rl, p, (size_t)(je - p));
            rl += (size_t)(je - p);
        }
        cJSON_Delete(c);
        p = b ? b + strlen(close) : txt + len;
    }
    memcpy(rest + rl, p, len - (size_t)(p - txt));
    rl += len - (size_t)(p - txt);
    if (cJSON_GetArraySize(calls) == 0) { /* the whole answer a JSON call or list of calls (Llama 3.x, Mistral) */
        char *body = trimmed(txt, len);
        cJSON *c = body ? cJSON_Parse(body) : NULL;
        free(body);
        if (cJSON_IsArray(c)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, c) add_call(t, x, calls, req_id);
        } else if (c) {
            add_call(t, c, calls, req_id);
        }
        if (cJSON_GetArraySize(calls) > 0) rl = 0;
        cJSON_Delete(c);
    }
    if (cJSON_GetArraySize(calls) == 0) {
        cJSON_Delete(calls);
        calls = NULL;
    } else {
        *content = trimmed(rest, rl);
    }
    free(txt);
    free(rest);
    return calls;
}
