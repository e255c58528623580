/*
 * test_tool_stream.c — tool calls streamed as they are generated (src/serve/tool_stream.c,
 * srv_tool_stream_step), in-process for every call format: the generic <tool_call> blocks (and a
 * bare JSON call), Qwen's own, Llama 3.x's whole-answer JSON (with and without <|python_tag|>),
 * Mistral Nemo's [TOOL_CALLS][...] and mistral-v7's [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}. Each
 * answer is fed as it grows, one UTF-8 character at a time, and the deltas are put together as the
 * openai client does (content concatenated; per call index: id, type and name from its first delta,
 * arguments concatenated). Checks: the result equals the non-streamed answer (srv_tools_extract:
 * the same calls, ids, names and arguments byte for byte; the same content up to leading
 * whitespace); the calls' first deltas carry id, type and name; the arguments of a well-formed call
 * come in several pieces before the end (streamed, not at the end); no content delta holds call
 * marker text; answers without calls stream as text.
 */
#include "testlib.h"

#include "serve/tools.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const TOOLS_BODY =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]}";

typedef struct assembled {
    char content[4096];
    int n;
    char id[8][64], name[8][64], args[8][1024];
    int pieces[8];  /* argument deltas before the end */
    int first_ok;   /* every call's first delta had index, id, type, name */
    int leak;       /* a content delta sent while generating held marker text */
} assembled;

static void take(assembled *a, cJSON *deltas, int final) {
    const cJSON *d;
    cJSON_ArrayForEach(d, deltas) {
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "content"));
        if (c) {
            strncat(a->content, c, sizeof a->content - strlen(a->content) - 1);
            a->leak |= !final && (strstr(c, "<tool_call>") || strstr(c, "[TOOL_CALLS]") || strstr(c, "<|python_tag|>") ||
                       strstr(c, "[ARGS]"));
        }
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "tool_calls")) {
            const int k = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "index"));
            if (k < 0 || k >= 8) continue;
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
            const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "id"));
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
            const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments"));
            if (k >= a->n) { /* its first delta */
                const char *ty = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "type"));
                a->first_ok &= k == a->n && id && name && ty && !strcmp(ty, "function");
                a->n = k + 1;
                snprintf(a->id[k], sizeof a->id[k], "%s", id ? id : "");
                snprintf(a->name[k], sizeof a->name[k], "%s", name ? name : "");
            }
            if (args && *args) {
                strncat(a->args[k], args, sizeof a->args[k] - strlen(a->args[k]) - 1);
                a->pieces[k] += !final;
            }
        }
    }
}

/* Stream `text` in format (native, fam) and compare with the non-streamed answer. want_calls: the
 * answer has calls; streamed: their arguments must come in pieces before the end. */
static void check(const char *what, int native, af_chat_family fam, const char *text, int want_calls, int streamed) {
    cJSON *body = cJSON_Parse(TOOLS_BODY);
    srv_tools *t = NULL;
    srv_grammar *g = NULL;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!CHECK(body && srv_tools_parse(body, &t, &g, &e) && t, "%s: tools parsed (%s)", what, e.message)) {
        cJSON_Delete(body);
        return;
    }
    t->native = native;
    t->fam = fam;
    srv_tool_stream *ts = srv_tool_stream_new();
    assembled a;
    memset(&a, 0, sizeof a);
    a.first_ok = 1;
    const size_t len = strlen(text);
    int calls = 0;
    for (size_t n = 0; n <= len; n++) {
        if (n < len && ((unsigned char)text[n] & 0xC0) == 0x80) continue; /* whole characters only */
        cJSON *d = srv_tool_stream_step(ts, t, text, n, 0, 42, &calls);
        take(&a, d, 0);
        cJSON_Delete(d);
    }
    cJSON *d = srv_tool_stream_step(ts, t, text, len, 1, 42, &calls);
    take(&a, d, 1);
    cJSON_Delete(d);

    char *content = NULL;
    cJSON *ref = srv_tools_extract(t, text, len, 42, &content);
    CHECK(calls == (ref != NULL) && calls == want_calls, "%s: has calls %d (non-streamed %d, expected %d)", what, calls,
          ref != NULL, want_calls);
    const char *rc = ref ? (content ? content : "") : text;
    while (*rc == ' ' || *rc == '\n') rc++;
    CHECK(!strcmp(a.content, rc), "%s: streamed content '%s' == non-streamed '%s'", what, a.content, rc);
    CHECK(a.n == cJSON_GetArraySize(ref) && a.first_ok, "%s: %d calls streamed, %d non-streamed; first deltas whole", what,
          a.n, cJSON_GetArraySize(ref));
    int k = 0, same = 1, pieces = 1;
    const cJSON *x;
    cJSON_ArrayForEach(x, ref) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
        same &= k < a.n && !strcmp(a.id[k], cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "id"))) &&
                !strcmp(a.name[k], cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"))) &&
                !strcmp(a.args[k], cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments")));
        if (k < a.n && !same) printf("  call %d: streamed %s %s %s\n", k, a.id[k], a.name[k], a.args[k]);
        pieces &= k < a.n && (strlen(a.args[k]) <= 2 || a.pieces[k] > 1);
        k++;
    }
    CHECK(same, "%s: the streamed calls (id, name, arguments) equal the non-streamed ones", what);
    if (streamed) CHECK(pieces, "%s: the arguments came in pieces while generating", what);
    CHECK(!a.leak, "%s: no call marker in the content streamed while generating", what);
    cJSON_Delete(ref);
    free(content);
    srv_tool_stream_free(ts);
    srv_tools_free(t);
    srv_grammar_free(g);
    cJSON_Delete(body);
}

int main(void) {
    static const char hermes[] =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
        "\"x\": [1.50, true, null, \"a\\u00e9\\n\\/\", 1e2, -0.25], \"o\": {}}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Zoë\"}}\n</tool_call>";
    check("generic format, two calls after text", 0, AF_CHAT_CHATML, hermes, 1, 1);
    check("qwen3 format, two calls after text", 1, AF_CHAT_QWEN3, hermes, 1, 1);
    check("generic format, a bare JSON call", 0, AF_CHAT_CHATML,
          "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"n\": 12}}", 1, 1);
    check("generic format, a JSON list of calls (sent at the end)", 0, AF_CHAT_CHATML,
          "[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
          1, 0);
    check("generic format, text only", 0, AF_CHAT_CHATML, "  The weather is <b>nice</b> today: 20 °C.\n", 0, 0);
    check("generic format, an unknown function stays text", 0, AF_CHAT_CHATML,
          "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", 0, 0);
    check("qwen3 format, text that is not a call", 1, AF_CHAT_QWEN3, "I cannot call <tools> here, sorry.", 0, 0);
    check("llama3 format, python tag", 1, AF_CHAT_LLAMA3,
          "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\", \"deep\": {\"a\": [1, 2]}}}", 1, 1);
    check("llama3 format, bare JSON", 1, AF_CHAT_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}", 1, 1);
    check("llama3 format, text", 1, AF_CHAT_LLAMA3, "It is sunny in Lima.", 0, 0);
    check("mistral nemo format", 1, AF_CHAT_MISTRAL,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}, \"id\": \"abc123XYZ\"}, "
          "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
          1, 0);
    check("mistral-v7 format, two calls", 1, AF_CHAT_MISTRAL7,
          "Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Quito\", \"days\": 2}"
          "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"ECT\"}",
          1, 1);
    check("mistral-v7 format, text", 1, AF_CHAT_MISTRAL7, "No call [TOOL here.", 0, 0);
    return tl_finish("test_tool_stream");
}
