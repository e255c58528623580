/*
 * test_serve_api.c — the OpenAI request fields of `afinar serve` beyond plain generation, end to end
 * on a tiny model ($AFINAR_BIN, set by `make test`; skipped without it or without libmicrohttpd);
 * the `openai` client checks the same on SmolLM2 (tests/serve_clients.py):
 *  - logprobs: completions ("logprobs": K) and chat ("logprobs", "top_logprobs") shapes; the first
 *    token's log-probability equals the log-softmax of the logits af_session_eval gives for the
 *    same prompt (computed here in-process); greedy: the chosen token is the first of the top list;
 *    streamed log-probabilities == the non-streamed ones;
 *  - "n": choices 0..n-1, choice i == a request with seed + i (the shared prompt cache changes no
 *    bit), streamed per index == non-streamed; the server log shows the choices' prompts taken
 *    from the first choice's cache;
 *  - POST /v1/embeddings: hidden-size vectors of norm 1, base64 == float, a list == its items one
 *    at a time, usage;
 *  - response_format: json_schema outputs that finish parse and validate; json_object gives an
 *    object;
 *  - GET /metrics: counters move with the requests above (200 and 400 by endpoint, tokens),
 *    latency quantiles present;
 *  - every new field with bad values: OpenAI-shaped 400 naming the field; n beyond --queue: 429;
 *  - tools in the model's own chat layout: servers with --chat-template qwen3 and mistral-v7 render a
 *    conversation with tools, an earlier call and its result exactly as af_chat_prompt_text_ex (the
 *    same prompt tokens and greedy answer as that text sent to /v1/completions); a forced call comes
 *    back as tool_calls with valid arguments, and streamed (same seed) the deltas put together equal
 *    them (also in the generic format of a chatml server); "required" with two functions (on
 *    mistral-v7 too, where the name precedes the JSON); the Llama 3.1 and Mistral Nemo templates in-process (the tiny tokenizer
 *    given the published template): prompt, forced-call grammar, parsing, unknown functions;
 *  - af_session_copy_prefix (what the choices share) and af_session_embed in-process: logits after a
 *    copied prefix are bit-identical to a fresh evaluation; the embedding has norm 1 and equals the
 *    server's.
 */
#include "testlib.h"
#include "tinymodel.c"
#include "serve_testkit.h"

#include "infer/session.h"
#include "serve/grammar.h"
#include "serve/tools.h"
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <math.h>
#include <nettle/base64.h>

static cJSON *post_json(const char *path, const char *body, int *status) {
    resp r = http("POST", path, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (!j) CHECK(0, "POST %s %s: a JSON answer (status %d): %.300s", path, body, r.status, r.body ? r.body : "");
    free(r.body);
    return j;
}

static const cJSON *at(const cJSON *o, const char *path) { /* "choices.0.logprobs" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *x = o;
    for (char *t = strtok(buf, "."); x && t; t = strtok(NULL, "."))
        x = (*t >= '0' && *t <= '9') ? cJSON_GetArrayItem(x, atoi(t)) : cJSON_GetObjectItemCaseSensitive(x, t);
    return x;
}

static const char *str_at(const cJSON *o, const char *path) {
    const cJSON *x = at(o, path);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* The log-softmax of the next-token logits of `prompt` (tokenized as the server does for
 * completions) at token id `id`, and the argmax. */
static double ref_logprob(af_model *m, const char *prompt, int32_t *argmax_out, int32_t id) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n = 0;
    af_session *s = NULL;
    const int64_t V = m->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)V);
    double out = NAN;
    if (af_tokenize(tok, prompt, strlen(prompt), 1, 1, &ids, &n) == AF_OK && af_session_new(m, 128, &s) == AF_OK &&
        af_session_eval(s, ids, (int)n, lg, NULL) == AF_OK) {
        int32_t a = 0;
        double mx = lg[0], sum = 0;
        for (int64_t i = 1; i < V; i++)
            if (lg[i] > lg[a]) a = (int32_t)i;
        mx = lg[a];
        for (int64_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
        *argmax_out = a;
        out = (double)lg[id < 0 ? a : id] - (mx + log(sum));
    }
    af_session_free(s);
    free(ids);
    free(lg);
    return out;
}

static void logprobs(af_model *m) {
    int st;
    cJSON *j = post_json("/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":3}", &st);
    const cJSON *lp = at(j, "choices.0.logprobs");
    const int ntok = cJSON_GetArraySize(at(lp, "tokens")), ngen = (int)at(j, "usage.completion_tokens")->valuedouble;
    CHECK(st == 200 && ntok == ngen && ntok > 0 && cJSON_GetArraySize(at(lp, "token_logprobs")) == ntok &&
              cJSON_GetArraySize(at(lp, "top_logprobs")) == ntok && cJSON_GetArraySize(at(lp, "text_offset")) == ntok,
          "completions logprobs: tokens, token_logprobs, top_logprobs, text_offset, one per generated token (%d, %d)", ntok, ngen);
    int32_t amax = -1;
    const double ref = ref_logprob(m, "hello world", &amax, -1);
    const double got = at(lp, "token_logprobs.0")->valuedouble;
    CHECK(fabs(got - ref) < 1e-4, "the first token's logprob == log-softmax of af_session_eval's logits (%.6f vs %.6f)", got, ref);
    int top_ok = 1;
    for (int i = 0; i < ntok; i++) {
        const cJSON *tl = cJSON_GetArrayItem(at(lp, "top_logprobs"), i), *x;
        double best = -INFINITY;
        top_ok &= cJSON_GetArraySize(tl) >= 1 && cJSON_GetArraySize(tl) <= 3;
        cJSON_ArrayForEach(x, tl) best = x->valuedouble > best ? x->valuedouble : best;
        const double chosen = cJSON_GetArrayItem(at(lp, "token_logprobs"), i)->valuedouble;
        top_ok &= chosen <= 0 && fabs(chosen - best) < 1e-6; /* greedy: the chosen token is the most likely */
    }
    CHECK(top_ok, "greedy: each chosen token's logprob is the best of its top_logprobs (<= 3 entries)");
    cJSON_Delete(j);

    /* chat shape, and the stream carries the same numbers */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,\"temperature\":0.9,\"seed\":3,"
                       "\"logprobs\":true,\"top_logprobs\":2%s}";
    char b1[512], b2[512];
    snprintf(b1, sizeof b1, body, "");
    snprintf(b2, sizeof b2, body, ",\"stream\":true");
    j = post_json("/v1/chat/completions", b1, &st);
    const cJSON *c = at(j, "choices.0.logprobs.content");
    const int n = cJSON_GetArraySize(c);
    CHECK(st == 200 && n == (int)at(j, "usage.completion_tokens")->valuedouble && cJSON_IsString(at(c, "0.token")) &&
              cJSON_IsArray(at(c, "0.bytes")) && cJSON_GetArraySize(at(c, "0.top_logprobs")) == 2 &&
              cJSON_IsNumber(at(c, "0.top_logprobs.1.logprob")),
          "chat logprobs: content [{token, logprob, bytes, top_logprobs [2]}] per token (%d)", n);
    resp r = http("POST", "/v1/chat/completions", b2);
    int k = 0, same = r.status == 200;
    for (const char *p = r.body ? r.body : ""; (p = strstr(p, "\"logprob\":")); p++) {
        /* every "logprob" of the stream in order: token then its top entries, as in the non-streamed list */
        const cJSON *e = cJSON_GetArrayItem(c, k / 3);
        const cJSON *want = k % 3 == 0 ? at(e, "logprob") : cJSON_GetArrayItem(at(e, "top_logprobs"), k % 3 - 1);
        if (k % 3) want = at(want, "logprob");
        same &= want && fabs(strtod(p + 10, NULL) - want->valuedouble) < 1e-9;
        k++;
    }
    CHECK(same && k == 3 * n, "streamed logprobs == non-streamed (%d numbers, want %d)", k, 3 * n);
    free(r.body);
    cJSON_Delete(j);
}

static void choices(void) {
    int st;
    cJSON *j = post_json("/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":12,\"temperature\":0.9,\"seed\":40,\"n\":3}", &st);
    int ok = st == 200 && cJSON_GetArraySize(at(j, "choices")) == 3;
    int tot = 0;
    for (int i = 0; ok && i < 3; i++) {
        char path[64], body[256];
        snprintf(path, sizeof path, "choices.%d.index", i);
        ok &= (int)at(j, path)->valuedouble == i;
        snprintf(body, sizeof body, "{\"prompt\":\"hello world\",\"max_tokens\":12,\"temperature\":0.9,\"seed\":%d}", 40 + i);
        int s1;
        cJSON *one = post_json("/v1/completions", body, &s1);
        snprintf(path, sizeof path, "choices.%d.text", i);
        const int eq = !strcmp(str_at(j, path), str_at(one, "choices.0.text"));
        CHECK(eq, "n=3: choice %d == a request with seed %d: [%s] vs [%s]", i, 40 + i, str_at(j, path), str_at(one, "choices.0.text"));
        tot += (int)at(one, "usage.completion_tokens")->valuedouble;
        cJSON_Delete(one);
    }
    CHECK(ok && (int)at(j, "usage.completion_tokens")->valuedouble == tot && (int)at(j, "usage.prompt_tokens")->valuedouble > 0,
          "n=3: three choices with indexes 0..2; usage counts the prompt once and every choice's tokens (%d)", tot);
    /* streamed: the deltas of each index == its non-streamed text */
    resp r = http("POST", "/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":12,\"temperature\":0.9,\"seed\":40,\"n\":3,\"stream\":true}");
    char acc[3][1024] = {"", "", ""};
    int fin[3] = {0, 0, 0};
    for (const char *p = r.body ? r.body : ""; (p = strstr(p, "data: {"));) {
        const char *e = strstr(p, "\n\n");
        char *ev = strndup(p + 6, e ? (size_t)(e - p - 6) : strlen(p + 6));
        cJSON *x = cJSON_Parse(ev);
        const int i = x ? (int)cJSON_GetNumberValue(at(x, "choices.0.index")) : -1;
        if (i >= 0 && i < 3) {
            strncat(acc[i], str_at(x, "choices.0.text"), sizeof acc[i] - strlen(acc[i]) - 1);
            fin[i] += cJSON_IsString(at(x, "choices.0.finish_reason"));
        }
        cJSON_Delete(x);
        free(ev);
        p = e ? e : p + 6;
    }
    int seq = r.status == 200 && strstr(r.body, "data: [DONE]") != NULL;
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "choices.%d.text", i);
        seq &= !strcmp(acc[i], str_at(j, path)) && fin[i] == 1;
    }
    CHECK(seq, "n=3 streamed: each index's deltas == its text, one finish_reason each, then [DONE]");
    free(r.body);
    cJSON_Delete(j);
    /* greedy choices are equal; the later ones take the prompt from the first's cache (log) */
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a b a b a b\"}],\"max_tokens\":4,"
                                          "\"temperature\":0,\"n\":2}", &st);
    CHECK(st == 200 && !strcmp(str_at(j, "choices.0.message.content"), str_at(j, "choices.1.message.content")),
          "n=2 greedy: the same text twice");
    cJSON_Delete(j);
    r = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":9}");
    CHECK(r.status == 429 && strstr(r.body, "--queue"), "n beyond --queue: 429 naming --queue (%d %s)", r.status, r.body);
    free(r.body);
}

static void embeddings(int64_t H, const float *ref) {
    int st;
    cJSON *a = post_json("/v1/embeddings", "{\"input\":[\"hello world\",\"ab ab\"],\"model\":\"tiny\"}", &st);
    const cJSON *e0 = at(a, "data.0.embedding"), *e1 = at(a, "data.1.embedding");
    double n0 = 0, d01 = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, e0) n0 += x->valuedouble * x->valuedouble;
    for (int i = 0; e0 && e1 && i < cJSON_GetArraySize(e0); i++)
        d01 += fabs(cJSON_GetArrayItem(e0, i)->valuedouble - cJSON_GetArrayItem(e1, i)->valuedouble);
    CHECK(st == 200 && !strcmp(str_at(a, "object"), "list") && !strcmp(str_at(a, "data.1.object"), "embedding") &&
              (int)cJSON_GetNumberValue(at(a, "data.1.index")) == 1 && cJSON_GetArraySize(e0) == H && fabs(n0 - 1) < 1e-5 &&
              d01 > 1e-3 && cJSON_GetNumberValue(at(a, "usage.prompt_tokens")) > 0,
          "embeddings: %lld floats of norm 1 (%.7f), two texts differ, usage", (long long)H, n0);
    cJSON *b = post_json("/v1/embeddings", "{\"input\":\"ab ab\",\"encoding_format\":\"base64\"}", &st);
    const char *b64 = str_at(b, "data.0.embedding");
    struct base64_decode_ctx dc;
    base64_decode_init(&dc);
    uint8_t *raw = malloc(BASE64_DECODE_LENGTH(strlen(b64)) + 4);
    size_t rl = BASE64_DECODE_LENGTH(strlen(b64));
    int ok = base64_decode_update(&dc, &rl, raw, strlen(b64), b64) && base64_decode_final(&dc) && rl == (size_t)H * 4;
    for (int64_t i = 0; ok && i < H; i++) {
        float f;
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&f, &u, 4);
        ok &= f == (float)cJSON_GetArrayItem(e1, (int)i)->valuedouble; /* a list item == the text alone */
        ok &= f == ref[i];                                               /* == af_session_embed in-process */
    }
    CHECK(st == 200 && ok, "base64 (little-endian float32) == the float list; a list's item == the same text alone; "
                           "== af_session_embed in-process");
    free(raw);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void structured(void) {
    /* small enough that the tiny model, which loves whitespace (at most 21 bytes per gap), ends
     * within its 256 positions; arrays, nesting and the rest: test_grammar's fuzz */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"x\",\"yy\",3]},\"b\":{\"type\":\"boolean\"}},"
                         "\"required\":[\"a\",\"b\"]}";
    int n_stop = 0, n_valid = 0, n = 0;
    for (int seed = 1; seed <= 4; seed++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"prompt\":\"hello world\",\"max_tokens\":240,\"temperature\":1,\"seed\":%d,\"n\":2,"
                 "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":%s}}}", seed, schema);
        int st;
        cJSON *j = post_json("/v1/completions", body, &st);
        for (int i = 0; i < 2; i++) {
            char p[64];
            snprintf(p, sizeof p, "choices.%d.finish_reason", i);
            if (strcmp(str_at(j, p), "stop")) {
                snprintf(p, sizeof p, "choices.%d.text", i);
                printf("json_schema, seed %d, choice %d not finished (%d bytes): %.120s\n", seed, i, (int)strlen(str_at(j, p)), str_at(j, p));
                continue;
            }
            n_stop++;
            snprintf(p, sizeof p, "choices.%d.text", i);
            cJSON *d = cJSON_Parse(str_at(j, p));
            const cJSON *a = at(d, "a"), *b = at(d, "b"), *c = at(d, "c"), *x;
            int v = cJSON_IsObject(d) && (cJSON_IsString(a) ? !strcmp(a->valuestring, "x") || !strcmp(a->valuestring, "yy")
                                                            : cJSON_IsNumber(a) && a->valuedouble == 3) &&
                    cJSON_IsBool(b) && (!c || (cJSON_IsArray(c) && cJSON_GetArraySize(c) <= 2));
            cJSON_ArrayForEach(x, c) v &= cJSON_IsNumber(x) && x->valuedouble == floor(x->valuedouble);
            int keys = 0;
            cJSON_ArrayForEach(x, d) keys++;
            v &= keys == 2 + (c != NULL);
            if (!v) CHECK(0, "schema output: %s", str_at(j, p));
            n_valid += v;
            cJSON_Delete(d);
        }
        n += 2;
        cJSON_Delete(j);
    }
    CHECK(n_stop >= 1 && n_valid == n_stop, "json_schema: %d of %d outputs finished, all valid (%d)", n_stop, n, n_valid);
    int st;
    cJSON *j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":60,"
                                                 "\"temperature\":0,\"response_format\":{\"type\":\"json_object\"}}", &st);
    const char *t = str_at(j, "choices.0.message.content");
    cJSON *d = cJSON_Parse(t);
    CHECK(st == 200 && t[strspn(t, " \n\t\r")] == '{' && (strcmp(str_at(j, "choices.0.finish_reason"), "stop") || cJSON_IsObject(d)),
          "json_object: an object (finished: it parses): %s", t);
    cJSON_Delete(d);
    cJSON_Delete(j);
}

static void metrics(void) {
    resp r = http("GET", "/metrics", NULL);
    const char *b = r.body ? r.body : "";
    const char *c200 = strstr(b, "afinar_requests_total{endpoint=\"completion\",code=\"200\"} ");
    const char *e200 = strstr(b, "afinar_requests_total{endpoint=\"embeddings\",code=\"200\"} ");
    const char *c400 = strstr(b, "afinar_requests_total{endpoint=\"chat\",code=\"400\"} ");
    const char *tok = strstr(b, "\nafinar_completion_tokens_total ");
    CHECK(r.status == 200 && c200 && atoi(strchr(c200, '}') + 2) >= 5 && e200 && atoi(strchr(e200, '}') + 2) == 2 && c400 &&
              atoi(strchr(c400, '}') + 2) >= 3 && tok && atoi(tok + 32) > 20 &&
              strstr(b, "# TYPE afinar_request_latency_seconds summary") &&
              strstr(b, "afinar_time_to_first_token_seconds{quantile=\"0.99\"} ") && strstr(b, "afinar_batch_fill ") &&
              strstr(b, "afinar_queue_requests 0"),
          "GET /metrics: requests by endpoint and code, tokens, latency quantiles, batch fill, queue:\n%s", b);
    free(r.body);
}

static void bad_fields(void) {
    static const struct {
        const char *path, *body, *needle;
    } bad[] = {
        {"/v1/completions", "{\"prompt\":\"x\",\"n\":0}", "\"param\":\"n\""},
        {"/v1/completions", "{\"prompt\":\"x\",\"n\":17}", "outside [1, 16]"},
        {"/v1/completions", "{\"prompt\":\"x\",\"n\":\"2\"}", "'n' must be an integer"},
        {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":6}", "\"param\":\"logprobs\""},
        {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":true}", "'logprobs' must be an integer"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "'logprobs' must be true or false"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}",
         "\"param\":\"top_logprobs\""},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "needs \\\"logprobs\\\": true"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}",
         "\"param\":\"response_format\""},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                                 "\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":\"string\",\"pattern\":\"a+\"}}}}",
         "\"param\":\"response_format.json_schema.schema\""},
        {"/v1/completions", "{\"prompt\":\"x\",\"response_format\":\"json\"}", "must be an object"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
         "\"param\":\"tools[0]\""},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "needs 'tools'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                                 "{\"name\":\"f\"}}],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
         "cannot be combined"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":1}}]}]}",
         "\"param\":\"messages[0].tool_calls\""},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "assistant or tool"},
        {"/v1/embeddings", "{}", "'input' is required"},
        {"/v1/embeddings", "{\"input\":[]}", "'input' is an empty list"},
        {"/v1/embeddings", "{\"input\":[1,2]}", "'input[0]' must be a string"},
        {"/v1/embeddings", "{\"input\":\"\"}", "'input' is an empty string"},
        {"/v1/embeddings", "{\"input\":\"x\",\"encoding_format\":\"hex\"}", "\"param\":\"encoding_format\""},
        {"/v1/embeddings", "{\"input\":\"x\",\"dimensions\":8}", "\"param\":\"dimensions\""},
    };
    int ok = 0;
    const int n = (int)(sizeof bad / sizeof *bad);
    for (int i = 0; i < n; i++) {
        resp r = http("POST", bad[i].path, bad[i].body);
        ok += CHECK(r.status == 400 && r.body && strstr(r.body, "{\"error\":{\"message\":") &&
                        strstr(r.body, "\"type\":\"invalid_request_error\"") && strstr(r.body, bad[i].needle),
                    "%s %s: want 400 with '%s', got %d %s", bad[i].path, bad[i].body, bad[i].needle, r.status, r.body ? r.body : "");
        free(r.body);
    }
    /* a conversation with an earlier tool call and its result (tools off: the prompt stays short) */
    resp r = http("POST", "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
                  "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"9\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\"}}],\"tool_choice\":\"none\",\"max_tokens\":2,\"temperature\":0}");
    CHECK(r.status == 200 && strstr(r.body, "\"finish_reason\":"), "assistant tool_calls and a tool message are accepted: %d %s",
          r.status, r.body);
    free(r.body);
    r = http("GET", "/v1/embeddings", NULL);
    CHECK(r.status == 405, "GET /v1/embeddings: 405 (%d)", r.status);
    free(r.body);
    r = http("POST", "/metrics", "{}");
    CHECK(r.status == 405, "POST /metrics: 405 (%d)", r.status);
    free(r.body);
    printf("serve api: %d of %d bad requests answered with the right 400\n", ok, n);
}

/* ---- tools in the model's own chat layout (a server with --chat-template qwen3 or mistral-v7) ---- */

#define TOOLS_JSON                                                                                                     \
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"the weather\",\"parameters\":{\"type\":"     \
    "\"object\",\"properties\":{\"city\":{\"enum\":[\"Paris\",\"Oslo\"]}},\"required\":[\"city\"]}}},{\"type\":"          \
    "\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]"

/* A conversation with an earlier call of f and its result, rendered by the server (usage.prompt_tokens
 * and the greedy answer of the chat request) and by af_chat_prompt_text_ex in-process (sent as a
 * plain completion): the same prompt gives the same tokens and the same answer. */
static void tools_prompt_same(af_model *m, af_chat_family fam, const char *name) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    static const char id[] = "abcDEF123"; /* 9 characters: mistral-v7's ids */
    const af_chat_call call = {id, "f", "{\"city\":\"Oslo\"}", 15};
    const af_chat_msg msgs[4] = {{AF_ROLE_SYSTEM, "be brief", 8},
                                 {AF_ROLE_USER, "weather in Oslo?", 16},
                                 {AF_ROLE_ASSISTANT, "", 0},
                                 {AF_ROLE_TOOL, "-3 C", 4}};
    const af_chat_msg_x mx[4] = {{NULL, 0, NULL}, {NULL, 0, NULL}, {&call, 1, NULL}, {NULL, 0, id}};
    const af_chat_extra x = {TOOLS_JSON, strlen(TOOLS_JSON), mx};
    char *text = NULL;
    if (!CHECK(af_chat_prompt_text_ex(tok, fam, msgs, 4, &x, &text) == AF_OK, "%s: af_chat_prompt_text_ex: %s", name,
               af_last_error()))
        return;
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"weather in Oslo?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"%s\",\"type\":\"function\",\"function\":"
             "{\"name\":\"f\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"%s\","
             "\"content\":\"-3 C\"}],\"tools\":%s,\"max_tokens\":6,\"temperature\":0}",
             id, id, TOOLS_JSON);
    int st, st2;
    cJSON *j = post_json("/v1/chat/completions", body, &st);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "prompt", text);
    cJSON_AddNumberToObject(p, "max_tokens", 6);
    cJSON_AddNumberToObject(p, "temperature", 0);
    char *pb = cJSON_PrintUnformatted(p);
    cJSON *c = post_json("/v1/completions", pb, &st2);
    const cJSON *pt = at(j, "usage.prompt_tokens"), *pt2 = at(c, "usage.prompt_tokens");
    int32_t *ids = NULL;
    size_t n = 0;
    af_tokenize(tok, text, strlen(text), 1, 1, &ids, &n);
    CHECK(st == 200 && st2 == 200 && cJSON_IsNumber(pt) && cJSON_IsNumber(pt2) && pt->valueint == pt2->valueint &&
              pt->valueint == (int)n && !strcmp(str_at(j, "choices.0.message.content"), str_at(c, "choices.0.text")),
          "%s: a tools request is rendered as af_chat_prompt_text_ex renders it (%d and %d prompt tokens, want %zu; "
          "answers '%s' and '%s'): %.200s", name, pt ? pt->valueint : -1, pt2 ? pt2->valueint : -1, n,
          str_at(j, "choices.0.message.content"), str_at(c, "choices.0.text"), st == 200 ? "" : cJSON_PrintUnformatted(j));
    free(ids);
    free(pb);
    cJSON_Delete(p);
    cJSON_Delete(c);
    cJSON_Delete(j);
    free(text);
}

/* The tool calls of choice `choice_index` of a streamed chat answer put together as the openai client does (per index: id,
 * type and name from the first delta, the arguments concatenated) as [{id, type, function: {name,
 * arguments}}]; *pieces: the most argument deltas of one call; *leak: a content delta holds call
 * marker text; *finish: the last finish_reason (a static copy). */
static cJSON *sse_tool_calls(const char *body, int choice_index, int *pieces, int *leak, char *finish, size_t fcap) {
    cJSON *calls = cJSON_CreateArray();
    int np[16] = {0};
    *pieces = *leak = 0;
    snprintf(finish, fcap, "(none)");
    for (const char *p = body ? strstr(body, "data: ") : NULL; p; p = strstr(p + 1, "data: ")) {
        const char *e = strstr(p, "\n\n");
        cJSON *o = cJSON_ParseWithLength(p + 6, e ? (size_t)(e - p - 6) : strlen(p + 6));
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
        if (!c || (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(c, "index")) != choice_index) {
            cJSON_Delete(o);
            continue;
        }
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "delta"), *x;
        const char *fr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "finish_reason"));
        if (fr) snprintf(finish, fcap, "%s", fr);
        const char *ct = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "content"));
        if (ct && (strstr(ct, "<tool_call>") || strstr(ct, "[TOOL_CALLS]") || strstr(ct, "[ARGS]"))) *leak = 1;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(d, "tool_calls")) {
            const int k = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "index"));
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
            const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments"));
            if (k < 0 || k >= 16 || k > cJSON_GetArraySize(calls)) continue;
            if (k == cJSON_GetArraySize(calls)) { /* its first delta */
                cJSON *y = cJSON_CreateObject(), *g;
                cJSON_AddItemToObject(y, "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(x, "id"), 1));
                cJSON_AddItemToObject(y, "type", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(x, "type"), 1));
                g = cJSON_AddObjectToObject(y, "function");
                cJSON_AddItemToObject(g, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(f, "name"), 1));
                cJSON_AddStringToObject(g, "arguments", "");
                cJSON_AddItemToArray(calls, y);
            }
            if (args && *args) {
                cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(calls, k), "function");
                const char *old = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(g, "arguments"));
                char *cat = malloc(strlen(old) + strlen(args) + 1);
                strcpy(cat, old);
                strcat(cat, args);
                cJSON_ReplaceItemInObjectCaseSensitive(g, "arguments", cJSON_CreateString(cat));
                free(cat);
                if (++np[k] > *pieces) *pieces = np[k];
            }
        }
        cJSON_Delete(o);
    }
    return calls;
}

/* 1 when the streamed calls equal the non-streamed ones: type, name and arguments byte for byte;
 * ids of the same kind (the server's "call_<request>_<k>" names each request's calls). */
static int same_calls(const cJSON *a, const cJSON *b) {
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b) || !cJSON_GetArraySize(a)) return 0;
    for (int k = 0; k < cJSON_GetArraySize(a); k++) {
        const cJSON *x = cJSON_GetArrayItem(a, k), *y = cJSON_GetArrayItem(b, k);
        if (strcmp(str_at(x, "type"), "function") || strcmp(str_at(y, "type"), "function") ||
            strcmp(str_at(x, "function.name"), str_at(y, "function.name")) ||
            strcmp(str_at(x, "function.arguments"), str_at(y, "function.arguments")) ||
            strncmp(str_at(x, "id"), "call_", 5) || strncmp(str_at(y, "id"), "call_", 5))
            return 0;
    }
    return 1;
}

/* A forced call (tool_choice names f, or "required"): the grammar makes the model write the layout's
 * own call markers; the answer comes back as tool_calls (of f with arguments valid for it when named;
 * of f or g with an object when "required"), and
 * the same request streamed (same seed) gives the same calls. */
static void tools_forced(const char *name, const char *choice) {
    int done = 0, good = 0, n = 0, same = 0, streamed = 0, leaks = 0;
    char last[600] = "", slast[600] = "";
    for (int seed = 1; seed <= 3; seed++, n++) {
        char body[4096];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"weather?\"}],"
                 "\"tools\":%s,\"tool_choice\":%s,\"max_tokens\":400,\"temperature\":1,\"seed\":%d",
                 TOOLS_JSON, choice, seed);
        int st;
        char *plain = malloc(strlen(body) + 40);
        sprintf(plain, "%s}", body);
        cJSON *j = post_json("/v1/chat/completions", plain, &st);
        free(plain);
        const char *fr = str_at(j, "choices.0.finish_reason");
        if (!strcmp(fr, "length")) { /* the tiny model's whitespace can run past max_tokens */
            done++;
            cJSON_Delete(j);
            continue;
        }
        cJSON *args = cJSON_Parse(str_at(j, "choices.0.message.tool_calls.0.function.arguments"));
        const char *city = str_at(args, "city");
        const char *fname = str_at(j, "choices.0.message.tool_calls.0.function.name");
        const int named = strstr(choice, "\"name\"") != NULL; /* f named: its arguments validate; "required": any object */
        good += st == 200 && !strcmp(fr, "tool_calls") && (!strcmp(fname, "f") || (!named && !strcmp(fname, "g"))) &&
                !strcmp(str_at(j, "choices.0.message.tool_calls.0.type"), "function") &&
                cJSON_IsString(at(j, "choices.0.message.tool_calls.0.id")) && cJSON_IsNull(at(j, "choices.0.message.content")) &&
                (named ? (!strcmp(city, "Paris") || !strcmp(city, "Oslo")) && cJSON_GetArraySize(args) == 1 : cJSON_IsObject(args));
        char *js = cJSON_PrintUnformatted(j);
        snprintf(last, sizeof last, "%.590s", js ? js : "");
        free(js);
        /* the same request streamed */
        char sbody[4200];
        snprintf(sbody, sizeof sbody, "%s,\"stream\":true}", body);
        resp r = http("POST", "/v1/chat/completions", sbody);
        int pieces = 0, leak = 0;
        char sfin[32];
        cJSON *sc = sse_tool_calls(r.body, 0, &pieces, &leak, sfin, sizeof sfin);
        const int eq = !strcmp(sfin, "tool_calls") && same_calls(sc, at(j, "choices.0.message.tool_calls"));
        same += eq;
        streamed += eq && pieces > 1;
        leaks += leak;
        char *sj = cJSON_PrintUnformatted(sc);
        snprintf(slast, sizeof slast, "%.590s", sj ? sj : "");
        free(sj);
        cJSON_Delete(sc);
        free(r.body);
        cJSON_Delete(args);
        cJSON_Delete(j);
    }
    CHECK(good >= 1 && good == n - done,
          "%s: tool_choice %s: %d of %d answers are tool_calls of f with valid arguments (%d ran out of tokens); last: %s",
          name, choice, good, n, done, last);
    /* how many deltas the arguments take depends on how many tokens the scheduler made between two
     * reads of the stream (the pieces themselves: tests/test_tool_stream.c) */
    CHECK(same == n - done && !leaks,
          "%s: tool_choice %s streamed: %d of %d equal the non-streamed tool_calls (%d with the arguments in several "
          "deltas), %d with marker text in content; last streamed: %s",
          name, choice, same, n - done, streamed, leaks, slast);
}

/* Two choices of a forced call streamed: each choice's deltas put together equal that choice of
 * the same request not streamed. */
static void tools_forced_n2(const char *name) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"tools\":%s,\"tool_choice\":"
             "{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"max_tokens\":400,\"temperature\":1,\"seed\":7,\"n\":2",
             TOOLS_JSON);
    char *plain = malloc(strlen(body) + 40), *streamed = malloc(strlen(body) + 40);
    sprintf(plain, "%s}", body);
    sprintf(streamed, "%s,\"stream\":true}", body);
    int st, same = 0, n = 0;
    cJSON *j = post_json("/v1/chat/completions", plain, &st);
    resp r = http("POST", "/v1/chat/completions", streamed);
    char last[400] = "";
    for (int i = 0; i < 2; i++) {
        char p[64], sfin[32];
        snprintf(p, sizeof p, "choices.%d.finish_reason", i);
        if (strcmp(str_at(j, p), "tool_calls")) continue; /* cut by max_tokens: not a call */
        n++;
        snprintf(p, sizeof p, "choices.%d.message.tool_calls", i);
        int pieces = 0, leak = 0;
        cJSON *sc = sse_tool_calls(r.body, i, &pieces, &leak, sfin, sizeof sfin);
        same += !strcmp(sfin, "tool_calls") && same_calls(sc, at(j, p)) && !leak;
        char *t = cJSON_PrintUnformatted(sc);
        snprintf(last, sizeof last, "%.390s", t ? t : "");
        free(t);
        cJSON_Delete(sc);
    }
    CHECK(st == 200 && r.status == 200 && n >= 1 && same == n,
          "%s: n=2 forced calls streamed: each choice's deltas == its non-streamed tool_calls (%d of %d); last: %s", name,
          same, n, last);
    free(r.body);
    cJSON_Delete(j);
    free(plain);
    free(streamed);
}

/* The layouts whose tool turns need the published template (llama3 of Llama 3.1, mistral of Mistral
 * Nemo), in-process with that template set on the tiny tokenizer: the prompt of a request with an
 * earlier call == af_chat_prompt_text_ex's, the forced call's grammar takes the layout's call and
 * not the Hermes block, and the layout's call parses into tool_calls. */
static void tools_inproc(af_model *m, af_chat_family fam, const char *file, const char *call, const char *want_args) {
    af_tokenizer *tok = (af_tokenizer *)af_model_tokenizer(m);
    char *tmpl = tl_read_file(tl_join("tests/fixtures/chat_templates", file), NULL);
    if (!CHECK(tmpl != NULL, "%s: the template fixture", file)) return;
    char *save = tok->chat_template;
    tok->chat_template = tmpl;
    static const char id[] = "abcDEF123";
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"weather in Oslo?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"%s\",\"type\":\"function\",\"function\":"
             "{\"name\":\"f\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"%s\","
             "\"content\":\"-3 C\"}],\"tools\":%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
             id, id, TOOLS_JSON);
    srv_req rq;
    srv_err e;
    memset(&e, 0, sizeof e);
    char *got = NULL, *want = NULL;
    if (CHECK(srv_req_parse(SRV_CHAT, body, strlen(body), &rq, &e) && srv_tools_bind(rq.tools, tok, fam, &rq.grammar, &e),
              "%s: parse and bind: %s", file, e.message)) {
        const af_chat_call c = {id, "f", "{\"city\":\"Oslo\"}", 15};
        const af_chat_msg msgs[4] = {{AF_ROLE_SYSTEM, "be brief", 8}, {AF_ROLE_USER, "weather in Oslo?", 16},
                                     {AF_ROLE_ASSISTANT, "", 0}, {AF_ROLE_TOOL, "-3 C", 4}};
        const af_chat_msg_x mx[4] = {{NULL, 0, NULL}, {NULL, 0, NULL}, {&c, 1, NULL}, {NULL, 0, id}};
        const af_chat_extra x = {TOOLS_JSON, strlen(TOOLS_JSON), mx};
        const af_status s1 = srv_chat_prompt(tok, fam, &rq, &got), s2 = af_chat_prompt_text_ex(tok, fam, msgs, 4, &x, &want);
        CHECK(rq.tools->native && s1 == AF_OK && s2 == AF_OK && !strcmp(got, want),
              "%s: the layout's own tool turns (native %d), the server's prompt == af_chat_prompt_text_ex's:\n%s\n----\n%s",
              file, rq.tools->native, got ? got : af_last_error(), want ? want : "");
        srv_gstate *g = rq.grammar ? srv_gstate_new(rq.grammar) : NULL, *h = rq.grammar ? srv_gstate_new(rq.grammar) : NULL;
        const char *hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        CHECK(g && h && srv_gstate_feed(g, call, strlen(call)) && srv_gstate_can_end(g) && !srv_gstate_feed(h, hermes, strlen(hermes)),
              "%s: the forced call's grammar takes %s and refuses the Hermes block", file, call);
        srv_gstate_free(g);
        srv_gstate_free(h);
        char *content = NULL;
        cJSON *calls = srv_tools_extract(rq.tools, call, strlen(call), 5, &content);
        char *js = calls ? cJSON_PrintUnformatted(calls) : NULL;
        CHECK(js && cJSON_GetArraySize(calls) == 1 && !content && strstr(js, "\"name\":\"f\"") && strstr(js, want_args),
              "%s: %s comes back as tool_calls: %s", file, call, js ? js : "(none)");
        free(js);
        cJSON_Delete(calls);
        free(content);
        const char *other = fam == AF_CHAT_LLAMA3 ? "{\"name\": \"h\", \"parameters\": {}}" : "[TOOL_CALLS][{\"name\": \"h\", \"arguments\": {}}]";
        calls = srv_tools_extract(rq.tools, other, strlen(other), 5, &content);
        CHECK(!calls, "%s: a call of a function not in 'tools' stays text", file);
        cJSON_Delete(calls);
        free(content);
    }
    free(got);
    free(want);
    srv_req_free(&rq);
    tok->chat_template = save;
    free(tmpl);
}

static void tools_native(af_model *m, af_chat_family fam, const char *name) {
    tools_prompt_same(m, fam, name);
    tools_forced(name, "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}");
}

/* The sessions under the choices and the embeddings, in-process. */
static void sessions(af_model *m, float *emb_out) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "ab ab hello world, a longer prompt of some forty bytes or so";
    af_session *a = NULL, *b = NULL, *c = NULL;
    const int64_t V = m->cfg.vocab_size;
    float *la = malloc(sizeof(float) * (size_t)V * 3), *lb = la + V, *lc = lb + V;
    if (!CHECK(af_tokenize(tok, text, strlen(text), 1, 0, &ids, &n) == AF_OK && n > 20 && af_session_new(m, 128, &a) == AF_OK &&
                   af_session_new(m, 128, &b) == AF_OK && af_session_new(m, 128, &c) == AF_OK,
               "sessions: %s", af_last_error()))
        goto done;
    af_session_eval(a, ids, (int)n, la, NULL);
    const int32_t more[3] = {97, 98, 32};
    af_session_eval(a, more, 3, la, NULL); /* a's cache now runs past the prompt */
    const int kept = af_session_copy_prefix(b, a, ids, (int)n);
    af_session_eval(b, ids + kept, (int)n - kept, lb, NULL);
    af_session_eval(c, ids, (int)n, lc, NULL);
    CHECK(kept > 0 && kept < (int)n && af_session_n_past(b) == (int)n && !memcmp(lb, lc, sizeof(float) * (size_t)V),
          "af_session_copy_prefix: %d of %zu prompt positions copied; the logits then equal a fresh evaluation bit for bit",
          kept, n);
    af_session_eval(b, more, 3, lb, NULL);
    af_session_eval(c, more, 3, lc, NULL);
    CHECK(!memcmp(lb, lc, sizeof(float) * (size_t)V), "... and so do the next decode steps");
    CHECK(af_session_copy_prefix(c, a, ids, (int)n) == af_session_reusable(a, ids, (int)n),
          "a session keeping its own prefix takes the longer one");
    int32_t *e = NULL;
    size_t ne = 0;
    if (af_tokenize(tok, "ab ab", 5, 1, 0, &e, &ne) == AF_OK && af_session_embed(c, e, (int)ne, emb_out) == AF_OK) {
        double nn = 0;
        for (int64_t i = 0; i < m->cfg.hidden_size; i++) nn += (double)emb_out[i] * emb_out[i];
        CHECK(fabs(nn - 1) < 1e-5 && af_session_n_past(c) == 0, "af_session_embed: norm 1 (%.7f), the session left reset", nn);
    } else {
        CHECK(0, "af_session_embed: %s", af_last_error());
    }
    free(e);
done:
    af_session_free(a);
    af_session_free(b);
    af_session_free(c);
    free(ids);
    free(la);
}

int main(void) {
    af_model *m = NULL;
    g_bare = 1;
    /* 4096 positions: the tools prompts of the layouts with tool turns run to some 1,000 byte tokens */
    const int ready = stk_setup("test_serve_api", 4096, &m);
    if (ready == 0) return tl_finish("test_serve_api");
    if (ready < 0 && !g_dir[0]) return 1;
    if (ready < 0) goto out;
    const int s = start_server("--parallel 3 --queue 8 --ctx 256 --chat-template chatml");
    if (s < 0) {
        tl_skip("serve api: the binary was built without libmicrohttpd");
        goto out;
    }
    if (!CHECK(s == 1, "the server starts (log: %s)", P_("server.log"))) goto out;
    float *emb = calloc((size_t)m->cfg.hidden_size, sizeof(float));
    sessions(m, emb);
    logprobs(m);
    choices();
    embeddings(m->cfg.hidden_size, emb);
    free(emb);
    structured();
    bad_fields();
    metrics();
    CHECK(stop_server() == 0, "SIGTERM: exit 0 (no leak under the sanitizer build)");
    char *log = tl_read_file(P_("server.log"), NULL);
    CHECK(log && strstr(log, "prompt tokens ("), "server log: %s", log ? "present" : "missing");
    free(log);
    tools_inproc(m, AF_CHAT_LLAMA3, "meta-llama-Llama-3.1-8B-Instruct.jinja", "{\"name\": \"f\", \"parameters\": {\"city\": \"Paris\"}}",
                 "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"");
    tools_inproc(m, AF_CHAT_MISTRAL, "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                 "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"city\": \"Oslo\"}}]",
                 "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"");
    /* the generic tools format (the tiny tokenizer has no tool template): forced calls, plain and streamed */
    if (CHECK(start_server("--parallel 2 --queue 8 --ctx 2048 --max-body 65536 --chat-template chatml") == 1, "chatml server")) {
        tools_forced("chatml (generic format)", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}");
        tools_forced("chatml (generic format)", "\"required\"");
        tools_forced_n2("chatml (generic format)");
        CHECK(stop_server() == 0, "chatml server: exit 0");
    }
    /* the model's own tool format: Hermes blocks (qwen3), [TOOL_CALLS]name[ARGS]{...} (mistral-v7) */
    if (CHECK(start_server("--parallel 2 --queue 8 --ctx 2048 --max-body 65536 --chat-template qwen3") == 1, "qwen3 server")) {
        tools_native(m, AF_CHAT_QWEN3, "qwen3");
        tools_forced("qwen3", "\"required\"");
        tools_forced_n2("qwen3");
        CHECK(stop_server() == 0, "qwen3 server: exit 0");
    }
    if (CHECK(start_server("--parallel 2 --queue 8 --ctx 2048 --max-body 65536 --chat-template mistral-v7") == 1, "mistral-v7 server")) {
        tools_native(m, AF_CHAT_MISTRAL7, "mistral-v7");
        /* "required" with two functions: the name outside the JSON, one prefix per function */
        tools_forced("mistral-v7", "\"required\"");
        CHECK(stop_server() == 0, "mistral-v7 server: exit 0");
    }
out:
    af_model_free(m);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tl_finish("test_serve_api");
}
