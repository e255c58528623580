/*
 * fuzz_tool_stream.c — libFuzzer target for tool calls streamed by `afinar serve`
 * (src/serve/tool_stream.c: srv_tool_stream_step, with srv_tools_extract at the end). Input: byte 0
 * % 6 picks the call format (0 the generic <tool_call> blocks, 1 qwen3, 2 llama3, 3 Mistral Nemo,
 * 4 mistral-v7, 5 the generic format with a one-byte growth step), the rest is the generated text;
 * the tools are get_weather and get_time. The text is fed as it grows (whole UTF-8 characters; every
 * 1 to 7 bytes), then the end. Oracles: every delta is an object with "content" or a one-call
 * "tool_calls" list; call indexes start at 0 and grow by one, a call's first delta has id, type
 * "function" and a name offered by the tools, later ones only arguments; the end reports calls
 * exactly when srv_tools_extract finds them; when it does and the stream started as many calls
 * with the same names, each call's arguments put together equal the non-streamed ones (the only
 * divergence allowed: a "parameters" key before an "arguments" one, which the parser prefers).
 * Returns AF_OK.
 */
#include "fuzz/fuzz_common.h"
#include "serve/tools.h"

#include <cJSON.h>

#define FZ_TS_CALLS 64

typedef struct fz_ts_acc {
    int n;
    char name[FZ_TS_CALLS][80];
    char *args[FZ_TS_CALLS];
} fz_ts_acc;

static void fz_ts_take(fz_ts_acc *a, const cJSON *deltas) {
    const cJSON *d;
    cJSON_ArrayForEach(d, deltas) {
        FZ_ASSERT(cJSON_IsObject(d));
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "content"), *tc = cJSON_GetObjectItemCaseSensitive(d, "tool_calls");
        FZ_ASSERT(cJSON_IsString(c) || (cJSON_IsArray(tc) && cJSON_GetArraySize(tc) == 1));
        if (!tc) continue;
        const cJSON *x = tc->child, *f = cJSON_GetObjectItemCaseSensitive(x, "function");
        const int k = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "index"));
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "id"));
        const char *ty = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "type"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments"));
        FZ_ASSERT(k >= 0 && k <= a->n && k < FZ_TS_CALLS && args != NULL);
        if (k == a->n) {
            FZ_ASSERT(id && ty && !strcmp(ty, "function") && name &&
                      (!strcmp(name, "get_weather") || !strcmp(name, "get_time")));
            snprintf(a->name[k], sizeof a->name[k], "%s", name);
            a->args[k] = calloc(1, 1);
            a->n++;
        } else {
            FZ_ASSERT(!id && !ty && !name);
        }
        char *t = a->args[k] ? realloc(a->args[k], strlen(a->args[k]) + strlen(args) + 1) : NULL;
        if (t) strcat(t, args), a->args[k] = t;
    }
}

af_status fz_tool_stream_one(const uint8_t *data, size_t size) {
    if (size < 1) return AF_OK;
    static const char body[] = "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}, "
                               "{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]}";
    static const af_chat_family fams[6] = {AF_CHAT_CHATML, AF_CHAT_QWEN3, AF_CHAT_LLAMA3, AF_CHAT_MISTRAL, AF_CHAT_MISTRAL7,
                                           AF_CHAT_CHATML};
    const int mode = data[0] % 6;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    cJSON *b = cJSON_Parse(body);
    srv_tools *t = NULL;
    srv_grammar *g = NULL;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!b || !srv_tools_parse(b, &t, &g, &e) || !t) {
        cJSON_Delete(b);
        return AF_ERR_NOMEM;
    }
    t->native = mode >= 1 && mode <= 4;
    t->fam = fams[mode];
    srv_tool_stream *ts = srv_tool_stream_new();
    fz_ts_acc acc;
    memset(&acc, 0, sizeof acc);
    int calls = 0;
    size_t n = 0;
    while (n < len) {
        n += mode == 5 ? 1 : 1 + (size_t)(data[n % size] % 7);
        if (n > len) n = len;
        while (n < len && ((unsigned char)text[n] & 0xC0) == 0x80) n++; /* whole characters */
        cJSON *d = srv_tool_stream_step(ts, t, text, n, 0, 7, &calls);
        fz_ts_take(&acc, d);
        cJSON_Delete(d);
    }
    cJSON *d = srv_tool_stream_step(ts, t, text, len, 1, 7, &calls);
    fz_ts_take(&acc, d);
    cJSON_Delete(d);
    char *content = NULL;
    cJSON *ref = srv_tools_extract(t, text, len, 7, &content);
    FZ_ASSERT(calls == (ref != NULL));
    int same_names = ref && cJSON_GetArraySize(ref) == acc.n;
    for (int k = 0; same_names && k < acc.n; k++)
        same_names = !strcmp(acc.name[k], cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                              cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ref, k), "function"), "name")));
    const int param_first = memmem(text, len, "\"parameters\"", 12) && memmem(text, len, "\"arguments\"", 11);
    for (int k = 0; same_names && !param_first && k < acc.n; k++) {
        const char *want = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ref, k), "function"), "arguments"));
        FZ_ASSERT(acc.args[k] && want && !strcmp(acc.args[k], want));
    }
    for (int k = 0; k < acc.n; k++) free(acc.args[k]);
    cJSON_Delete(ref);
    free(content);
    srv_tool_stream_free(ts);
    srv_tools_free(t);
    srv_grammar_free(g);
    cJSON_Delete(b);
    return AF_OK;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_tool_stream_one(data, size);
    return 0;
}
#endif
