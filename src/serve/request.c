/* request.c — parsing of the OpenAI-style request bodies of `afinar serve` and the error object
 * (serve.h). Field names and meanings: OpenAI's API reference (chat/completions, completions) and
 * llama.cpp's server README (top_k, lora). */
#include "serve/serve.h"

#include "formats/json_nul.h"
#include "serve/grammar.h"
#include "serve/tools.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

#define BAD(param, ...) srv_err_set(err, 400, "invalid_request_error", NULL, (param), __VA_ARGS__)

void srv_req_free(srv_req *r) {
    if (!r) return;
    free(r->model);
    free(r->msgs);
    free(r->prompt);
    for (int32_t i = 0; i < r->n_inputs; i++) free(r->inputs[i]);
    free(r->inputs);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (int32_t i = 0; i < r->n_bufs; i++) free(r->bufs[i]);
    free(r->bufs);
    free(r->msgx);
    free(r->calls);
    srv_grammar_free(r->grammar);
    srv_tools_free(r->tools);
    memset(r, 0, sizeof *r);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* A number field in [lo, hi] (absent: keep *out). */
static int get_num(const cJSON *o, const char *name, double lo, double hi, double *out, srv_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(name, "'%s' is %g, outside [%g, %g]", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 1;
}

/* An integer field in [lo, hi] (absent: keep *out). */
static int get_int(const cJSON *o, const char *name, double lo, double hi, int64_t *out, srv_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return BAD(name, "'%s' must be an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(name, "'%s' is %.17g, outside [%.17g, %.17g]", name, v->valuedouble, lo, hi);
    *out = (int64_t)v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *o, const char *name, int *out, srv_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsBool(v)) return BAD(name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 1;
}

/* Message content: a string, or a list of {"type": "text", "text": ...} parts (joined). */
static char *content_text(const cJSON *c, int i, srv_err *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) {
        char *d = dup_str(c->valuestring);
        if (!d) srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return d;
    }
    if (!cJSON_IsArray(c)) {
        BAD(param, "'%s' must be a string or a list of text parts", param);
        return NULL;
    }
    size_t n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type"), *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x)) {
            BAD(param, "'%s': only {\"type\": \"text\", \"text\": ...} parts are supported", param);
            return NULL;
        }
        n += strlen(x->valuestring);
    }
    char *d = malloc(n + 1);
    if (!d) {
        srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    n = 0;
    cJSON_ArrayForEach(p, c) {
        const char *s = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t k = strlen(s);
        memcpy(d + n, s, k);
        n += k;
    }
    d[n] = 0;
    return d;
}

/* Keep string t (malloc'ed, may be NULL: out of memory) among r's owned strings. Returns t, or
 * NULL with *err set (t freed). */
static char *keep(srv_req *r, char *t, srv_err *err) {
    if (t && r->n_bufs == r->cap_bufs) {
        const int32_t c = r->cap_bufs ? 2 * r->cap_bufs : 16;
        char **nb = realloc(r->bufs, sizeof *nb * (size_t)c);
        if (!nb) {
            free(t);
            t = NULL;
        } else {
            r->bufs = nb, r->cap_bufs = c;
        }
    }
    if (!t) {
        srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    r->bufs[r->n_bufs++] = t;
    return t;
}

/* The "tool_calls" of assistant message i into r->calls[*k ..] (their strings kept in r->bufs):
 * each {"id"?, "type": "function", "function": {"name": STRING, "arguments": JSON object as text}}. */
static int parse_calls(const cJSON *tc, int i, srv_req *r, int32_t *k, srv_err *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    const int nc = cJSON_IsArray(tc) ? cJSON_GetArraySize(tc) : 0;
    if (nc < 1 || nc > SRV_MAX_TOOLS)
        return BAD(param, "'%s' must be a list of 1 to %d {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                   param, SRV_MAX_TOOLS);
    af_chat_call *nc_arr = realloc(r->calls, sizeof *nc_arr * (size_t)(*k + nc));
    if (!nc_arr) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    r->calls = nc_arr;
    const cJSON *x;
    int c = 0;
    cJSON_ArrayForEach(x, tc) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function"), *id = cJSON_GetObjectItemCaseSensitive(x, "id");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *ar = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsString(nm) || !nm->valuestring[0] || (ar && !cJSON_IsNull(ar) && !cJSON_IsString(ar)) ||
            (id && !cJSON_IsNull(id) && !cJSON_IsString(id)))
            return BAD(param, "'%s[%d]' must be {\"id\": STRING, \"function\": {\"name\": STRING, \"arguments\": JSON_TEXT}}",
                       param, c);
        const char *as = cJSON_IsString(ar) ? ar->valuestring : "{}";
        cJSON *av = cJSON_Parse(as);
        const int obj = cJSON_IsObject(av);
        cJSON_Delete(av);
        if (!obj) return BAD(param, "'%s[%d].function.arguments' must be a JSON object as text (\"{...}\")", param, c);
        af_chat_call *cl = &r->calls[*k];
        memset(cl, 0, sizeof *cl);
        if (!(cl->name = keep(r, dup_str(nm->valuestring), err)) || !(cl->args = keep(r, dup_str(as), err))) return 0;
        cl->args_len = strlen(cl->args);
        if (cJSON_IsString(id) && !(cl->id = keep(r, dup_str(id->valuestring), err))) return 0;
        (*k)++, c++;
    }
    return 1;
}

/* "messages": roles, contents, and the tool turns as they are (tools.c renders them for the model's
 * layout: srv_chat_prompt). */
static int parse_messages(const cJSON *o, srv_req *r, srv_err *err) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!m) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return BAD("messages", "'messages' must be a list of messages");
    const int n = cJSON_GetArraySize(m);
    if (n < 1) return BAD("messages", "'messages' is empty");
    if (n > 4096) return BAD("messages", "'messages' has %d entries, more than 4096", n);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    af_chat_msg_x *mx = calloc((size_t)n, sizeof *mx);
    int32_t *first = calloc((size_t)n, sizeof *first); /* index of message i's first call in r->calls */
    if (!r->msgs || !mx || !first) {
        free(mx);
        free(first);
        return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    r->msgx = mx;
    int i = 0, ok = 1, any = 0;
    int32_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(e)) {
            ok = BAD(param, "'%s' must be an object with 'role' and 'content'", param);
            break;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsString(role)) {
            ok = BAD(param, "'%s.role' must be a string", param);
            break;
        }
        af_chat_role rl;
        if (!strcmp(role->valuestring, "system") || !strcmp(role->valuestring, "developer")) rl = AF_ROLE_SYSTEM;
        else if (!strcmp(role->valuestring, "user")) rl = AF_ROLE_USER;
        else if (!strcmp(role->valuestring, "tool")) rl = AF_ROLE_TOOL;
        else if (!strcmp(role->valuestring, "assistant")) rl = AF_ROLE_ASSISTANT;
        else {
            ok = BAD(param, "'%s.role' is \"%.40s\": expected system, developer, user, assistant or tool", param, role->valuestring);
            break;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *tc = rl == AF_ROLE_ASSISTANT ? cJSON_GetObjectItemCaseSensitive(e, "tool_calls") : NULL;
        const int calls = tc && !cJSON_IsNull(tc);
        char *t = NULL;
        if (calls && (!c || cJSON_IsNull(c))) {
            t = keep(r, dup_str(""), err);
        } else if (!c || cJSON_IsNull(c)) {
            ok = BAD(param, "'%s.content' is required", param);
            break;
        } else if ((t = content_text(c, i, err))) {
            t = keep(r, t, err);
        }
        if (!t) {
            ok = 0;
            break;
        }
        r->msgs[i] = (af_chat_msg){rl, t, strlen(t)};
        first[i] = k;
        if (calls) {
            const int32_t k0 = k;
            if (!(ok = parse_calls(tc, i, r, &k, err))) break;
            mx[i].n_calls = k - k0;
            any = 1;
        }
        if (rl == AF_ROLE_TOOL) {
            any = 1;
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "tool_call_id");
            if (id && !cJSON_IsNull(id) && !cJSON_IsString(id)) {
                ok = BAD(param, "'%s.tool_call_id' must be a string", param);
                break;
            }
            if (cJSON_IsString(id) && !(mx[i].call_id = keep(r, dup_str(id->valuestring), err))) {
                ok = 0;
                break;
            }
        }
        i++;
    }
    for (int q = 0; ok && q < n; q++) /* r->calls moved while it grew: point into it now */
        if (mx[q].n_calls) mx[q].calls = r->calls + first[q];
    free(first);
    if (!ok) return 0;
    if (!any) { /* no tool turns: the plain chat rendering */
        free(r->msgx);
        r->msgx = NULL;
    }
    r->n_msgs = n;
    return 1;
}

static int parse_strings(const cJSON *v, const char *name, int max, char ***out, int32_t *n, int allow_empty, srv_err *err) {
    if (cJSON_IsString(v)) {
        if (!allow_empty && !v->valuestring[0]) return BAD(name, "'%s' is an empty string", name);
        *out = calloc(1, sizeof(char *));
        if (!*out || !((*out)[0] = dup_str(v->valuestring))) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        *n = 1;
        return 1;
    }
    if (!cJSON_IsArray(v)) return BAD(name, "'%s' must be a string or a list of strings", name);
    const int k = cJSON_GetArraySize(v);
    if (k < 1) return BAD(name, "'%s' is an empty list", name);
    if (k > max) return BAD(name, "'%s' has %d entries, more than %d", name, k, max);
    *out = calloc((size_t)k, sizeof(char *));
    if (!*out) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) return BAD(name, "'%s[%d]' must be a string", name, *n);
        if (!allow_empty && !e->valuestring[0]) return BAD(name, "'%s[%d]' is an empty string", name, *n);
        if (!((*out)[*n] = dup_str(e->valuestring))) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        (*n)++;
    }
    return 1;
}

static int parse_generation(const cJSON *o, srv_req *r, srv_err *err) {
    if (!get_bool(o, "stream", &r->stream, err)) return 0;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &r->include_usage, err)) return 0;
    }
    if (!get_num(o, "temperature", 0, 2, &r->temperature, err)) return 0;
    if (!get_num(o, "top_p", 0, 1, &r->top_p, err)) return 0;
    int64_t v = r->top_k;
    if (!get_int(o, "top_k", 0, 1 << 30, &v, err)) return 0;
    r->top_k = (int32_t)v;
    if (!get_int(o, "max_tokens", 1, 1 << 30, &r->max_tokens, err)) return 0;
    if (!get_int(o, "max_completion_tokens", 1, 1 << 30, &r->max_tokens, err)) return 0;
    int64_t n = 1;
    if (!get_int(o, "n", 1, SRV_MAX_CHOICES, &n, err)) return 0;
    r->n_choices = (int32_t)n;
    if (r->kind == SRV_CHAT) { /* "logprobs": bool, "top_logprobs": 0..20 (needs logprobs) */
        if (!get_bool(o, "logprobs", &r->logprobs, err)) return 0;
        int64_t t = 0;
        if (!get_int(o, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &t, err)) return 0;
        if (t > 0 && !r->logprobs) return BAD("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        r->top_logprobs = (int32_t)t;
    } else { /* completions: "logprobs": K, the K most likely tokens of each position (0..5) */
        int64_t t = -1;
        if (!get_int(o, "logprobs", 0, 5, &t, err)) return 0;
        r->logprobs = t >= 0;
        r->top_logprobs = t > 0 ? (int32_t)t : 0;
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    if (rf && !cJSON_IsNull(rf) && !srv_grammar_from_format(rf, &r->grammar, err)) return 0;
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (sd && !cJSON_IsNull(sd)) {
        int64_t s = 0;
        if (!get_int(o, "seed", 0, 9007199254740991.0, &s, err)) return 0;
        r->has_seed = 1;
        r->seed = (uint64_t)s;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (st && !cJSON_IsNull(st)) {
        char **list = NULL;
        int32_t k = 0;
        int ok = parse_strings(st, "stop", SRV_MAX_STOP, &list, &k, 0, err);
        for (int32_t i = 0; i < k; i++) r->stop[i] = list[i];
        r->n_stop = k;
        free(list);
        if (!ok) return 0;
    }
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(o, "lora");
    if (lo && !cJSON_IsNull(lo)) {
        if (!cJSON_IsArray(lo)) return BAD("lora", "'lora' must be a list of {\"id\": N, \"scale\": S}");
        if (cJSON_GetArraySize(lo) > SRV_MAX_LORA) return BAD("lora", "'lora' has more than %d entries", SRV_MAX_LORA);
        const cJSON *e;
        cJSON_ArrayForEach(e, lo) {
            char param[32];
            snprintf(param, sizeof param, "lora[%d]", r->n_lora);
            if (!cJSON_IsObject(e)) return BAD(param, "'%s' must be an object {\"id\": N, \"scale\": S}", param);
            int64_t id = -1;
            double sc = 1.0;
            if (!cJSON_GetObjectItemCaseSensitive(e, "id")) return BAD(param, "'%s.id' is required", param);
            if (!get_int(e, "id", 0, 1e6, &id, err) || !get_num(e, "scale", -100, 100, &sc, err)) {
                snprintf(err->param, sizeof err->param, "%s", param);
                return 0;
            }
            r->lora_id[r->n_lora] = (int32_t)id;
            r->lora_scale[r->n_lora++] = sc;
        }
    }
    return 1;
}

int srv_req_parse(srv_kind kind, const char *body, size_t len, srv_req *r, srv_err *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    af_sampling def; /* the defaults of afinar generate (one place: af_sampling_default) */
    af_sampling_default(&def);
    r->temperature = def.temperature;
    r->top_p = def.top_p;
    r->top_k = def.top_k;
    r->max_tokens = -1;
    r->n_choices = 1;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!o) {
        const size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return BAD(NULL, "the body is not valid JSON (error near byte %zu)", at);
    }
    int ok = 1;
    char where[64];
    if (af_json_nul_path(body, len, where, sizeof where))
        ok = BAD(where, "'%s' holds a NUL character (\\u0000); text with NUL characters is not accepted", where);
    if (ok && !cJSON_IsObject(o)) ok = BAD(NULL, "the body must be a JSON object");
    const cJSON *m = ok ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
    if (ok && m && !cJSON_IsNull(m)) {
        if (!cJSON_IsString(m)) ok = BAD("model", "'model' must be a string");
        else if (!(r->model = dup_str(m->valuestring))) ok = srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (ok && kind == SRV_CHAT) ok = parse_messages(o, r, err) && parse_generation(o, r, err);
    if (ok && kind == SRV_CHAT) {
        srv_grammar *tg = NULL;
        ok = srv_tools_parse(o, &r->tools, &tg, err);
        if (ok && tg && r->grammar) {
            srv_grammar_free(tg);
            ok = BAD("tool_choice", "a required tool call and 'response_format' cannot be combined");
        } else if (tg) {
            r->grammar = tg;
        }
    }
    if (ok && kind == SRV_COMPLETION) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        char **list = NULL;
        int32_t k = 0;
        if (!p) ok = BAD("prompt", "'prompt' is required");
        else ok = parse_strings(p, "prompt", 1, &list, &k, 1, err);
        if (k) r->prompt = list[0];
        free(list);
        ok = ok && parse_generation(o, r, err);
    }
    if (ok && (kind == SRV_CLASSIFY || kind == SRV_EMBED)) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "input");
        if (!p) ok = BAD("input", "'input' is required");
        else ok = parse_strings(p, "input", 256, &r->inputs, &r->n_inputs, kind == SRV_CLASSIFY, err);
    }
    if (ok && kind == SRV_EMBED) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "encoding_format");
        if (f && !cJSON_IsNull(f)) {
            if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
                ok = BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            else r->embed_base64 = !strcmp(f->valuestring, "base64");
        }
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dimensions");
        if (ok && d && !cJSON_IsNull(d))
            ok = BAD("dimensions", "'dimensions' is not supported: the embeddings have the model's hidden size");
    }
    cJSON_Delete(o);
    return ok;
}

char *srv_err_json(const srv_err *e) {
    cJSON *o = cJSON_CreateObject(), *x = cJSON_AddObjectToObject(o, "error");
    if (!x) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(x, "message", e->message);
    cJSON_AddStringToObject(x, "type", e->type ? e->type : "server_error");
    if (e->param[0]) cJSON_AddStringToObject(x, "param", e->param);
    else cJSON_AddNullToObject(x, "param");
    if (e->code) cJSON_AddStringToObject(x, "code", e->code);
    else cJSON_AddNullToObject(x, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *srv_json_string(const char *s, size_t len) {
    char *t = malloc(len + 1);
    if (!t) return NULL;
    memcpy(t, s, len);
    t[len] = 0;
    cJSON *v = cJSON_CreateString(t);
    free(t);
    char *out = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    return out;
}

double srv_json_float(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.9g", (double)f);
    return strtod(b, NULL);
}

size_t srv_utf8_complete(const char *s, size_t len) {
    /* look back at most 3 bytes for the lead byte of the last character */
    for (size_t k = 1; k <= 4 && k <= len; k++) {
        const unsigned char c = (unsigned char)s[len - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte */
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? len - k : len;
    }
    return len;
}
