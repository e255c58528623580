/*
 * fuzz_serve_req.c — libFuzzer target for the request parser of `afinar serve` (src/serve/request.c:
 * srv_req_parse, srv_err_json, srv_json_string, srv_utf8_complete).
 * Input: byte 0 selects the endpoint (% 4: chat completions, completions, classify, embeddings), the rest is the
 * HTTP body. Oracles: on success every field is in its documented range (messages >= 1 with a role
 * and a NUL-terminated content, tool calls only in assistant messages with a name and their arguments'
 * text, tool_call_id only in tool messages, temperature [0, 2], top_p [0, 1], max_tokens -1 or >= 1, <= 4
 * non-empty stop strings, <= 16 lora entries, >= 1 classify/embeddings input, n in [1, 16],
 * top_logprobs in [0, 20] and only with logprobs, tools only in chat); on failure the error has a
 * 400/500 status and a message, and its OpenAI error object parses back as JSON with
 * error.message; the JSON string of the body parses back to the same bytes up to the first NUL;
 * srv_utf8_complete never cuts more than 3 bytes. Returns AF_OK (parsed) or AF_ERR_FORMAT.
 */
#include "fuzz/fuzz_common.h"
#include "serve/serve.h"

#include <cJSON.h>

af_status fz_serve_req_one(const uint8_t *data, size_t size) {
    if (size == 0) return AF_ERR_INVALID_ARG;
    const srv_kind kind = (srv_kind)(data[0] % 4);
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    srv_req r;
    srv_err e;
    memset(&e, 0, sizeof e);
    const int ok = srv_req_parse(kind, body, len, &r, &e);
    if (ok) {
        FZ_ASSERT(r.kind == kind);
        if (kind == SRV_CHAT) {
            FZ_ASSERT(r.n_msgs >= 1 && r.msgs);
            for (int32_t i = 0; i < r.n_msgs; i++) {
                FZ_ASSERT(r.msgs[i].role <= AF_ROLE_TOOL && r.msgs[i].content);
                FZ_ASSERT(strlen(r.msgs[i].content) == r.msgs[i].len);
                const af_chat_msg_x *x = r.msgx ? &r.msgx[i] : NULL; /* calls only in assistant messages */
                FZ_ASSERT(!x || x->n_calls == 0 || (r.msgs[i].role == AF_ROLE_ASSISTANT && x->calls));
                for (int32_t k = 0; x && k < x->n_calls; k++)
                    FZ_ASSERT(x->calls[k].name[0] && strlen(x->calls[k].args) == x->calls[k].args_len);
                FZ_ASSERT(!x || !x->call_id || r.msgs[i].role == AF_ROLE_TOOL);
            }
        }
        if (kind == SRV_COMPLETION) FZ_ASSERT(r.prompt != NULL);
        if (kind == SRV_CLASSIFY || kind == SRV_EMBED) FZ_ASSERT(r.n_inputs >= 1 && r.n_inputs <= 256 && r.inputs[r.n_inputs - 1]);
        FZ_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p >= 0 && r.top_p <= 1 && r.top_k >= 0);
        FZ_ASSERT(r.max_tokens == -1 || r.max_tokens >= 1);
        FZ_ASSERT(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP && r.n_lora >= 0 && r.n_lora <= SRV_MAX_LORA);
        for (int32_t i = 0; i < r.n_stop; i++) FZ_ASSERT(r.stop[i] && r.stop[i][0]);
        for (int32_t i = 0; i < r.n_lora; i++) FZ_ASSERT(r.lora_id[i] >= 0 && r.lora_scale[i] >= -100 && r.lora_scale[i] <= 100);
        FZ_ASSERT(r.n_choices >= 1 && r.n_choices <= SRV_MAX_CHOICES && r.top_logprobs >= 0 &&
                  r.top_logprobs <= SRV_MAX_TOP_LOGPROBS && (r.logprobs || !r.top_logprobs));
        FZ_ASSERT(kind == SRV_CHAT || !r.tools);
    } else {
        FZ_ASSERT((e.status == 400 || e.status == 500) && e.message[0] && e.type);
        char *js = srv_err_json(&e);
        if (js) {
            cJSON *o = cJSON_Parse(js);
            FZ_ASSERT(o != NULL);
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "error");
            FZ_ASSERT(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(x, "message")));
            cJSON_Delete(o);
            free(js);
        }
    }
    srv_req_free(&r);
    const size_t n0 = strnlen(body, len);
    char *q = srv_json_string(body, n0);
    if (q) {
        cJSON *v = cJSON_Parse(q);
        FZ_ASSERT(v && cJSON_IsString(v) && strlen(v->valuestring) == n0 && !memcmp(v->valuestring, body, n0));
        cJSON_Delete(v);
        free(q);
    }
    const size_t k = srv_utf8_complete(body, len);
    FZ_ASSERT(k <= len && len - k <= 3);
    return ok ? AF_OK : AF_ERR_FORMAT;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_serve_req_one(data, size);
    return 0;
}
#endif
