/* embed.c — POST /v1/embeddings of `afinar serve` (engine_internal.h): each input text is tokenized
 * as a prompt (with the model's BOS when it adds one), evaluated from position 0 on a session of its
 * own, and its final hidden states (after the final norm) are mean-pooled and L2-normalised
 * (af_session_embed). The answer is OpenAI's {"object": "list", "data": [{"object": "embedding",
 * "index", "embedding"}], "model", "usage"}; with "encoding_format": "base64" each embedding is the
 * base64 (RFC 4648, Nettle) of its little-endian float32 values, as the `openai` client decodes it. */
#include "serve/engine_internal.h"

#include "core/core.h"

#include <cJSON.h>
#include <nettle/base64.h>
#include <stdlib.h>
#include <string.h>

void srv_embed_run(srv *s, srv_job *j) {
    const int64_t H = s->m->cfg.hidden_size;
    const int32_t n = j->rq.n_inputs;
    af_status st = AF_OK;
    if (!s->emb) st = af_session_new(s->m, s->o.n_ctx, &s->emb); /* only this thread touches s->emb */
    if (st == AF_OK && !(j->emb = malloc(sizeof(float) * (size_t)n * (size_t)H))) st = af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK) af_session_set_control(s->emb, &j->cancel, NULL, NULL);
    for (int32_t i = 0; st == AF_OK && i < n; i++) {
        int32_t *ids = NULL;
        size_t k = 0;
        st = af_tokenize(s->tok, j->rq.inputs[i], strlen(j->rq.inputs[i]), 1, 0, &ids, &k);
        if (st == AF_OK && k == 0) {
            srv_err_set(&j->err, 400, "invalid_request_error", NULL, "input", "input[%d] is empty after tokenization", i);
            st = AF_ERR_INVALID_ARG;
        } else if (st == AF_OK && (int64_t)k > s->o.n_ctx) {
            srv_err_set(&j->err, 400, "invalid_request_error", "context_length_exceeded", "input",
                        "input[%d] has %zu tokens; the context per sequence is %d (--ctx)", i, k, s->o.n_ctx);
            st = AF_ERR_INVALID_ARG;
        } else if (st == AF_OK) {
            st = af_session_embed(s->emb, ids, (int)k, j->emb + (size_t)i * (size_t)H);
            j->emb_tokens += (int64_t)k;
        }
        free(ids);
    }
    if (s->emb) af_session_set_control(s->emb, NULL, NULL, NULL);
    if (st != AF_OK && !j->err.status && st != AF_ERR_CANCELLED)
        srv_err_set(&j->err, st == AF_ERR_INVALID_ARG ? 400 : 500,
                    st == AF_ERR_INVALID_ARG ? "invalid_request_error" : "server_error", NULL, NULL, "%s", af_last_error());
}

char *srv_embed_json(srv *s, const srv_job *j) {
    const int64_t H = s->m->cfg.hidden_size;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    int ok = o && d;
    for (int32_t i = 0; ok && i < j->rq.n_inputs; i++) {
        const float *e = j->emb + (size_t)i * (size_t)H;
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(d, x);
        if (!ok) break;
        cJSON_AddStringToObject(x, "object", "embedding");
        cJSON_AddNumberToObject(x, "index", i);
        if (j->rq.embed_base64) {
            uint8_t *raw = malloc(sizeof(float) * (size_t)H);
            char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(sizeof(float) * (size_t)H) + 1);
            if (raw && b64) {
                for (int64_t k = 0; k < H; k++) { /* little-endian bytes whatever the host's order */
                    uint32_t u;
                    memcpy(&u, &e[k], 4);
                    for (int b = 0; b < 4; b++) raw[4 * k + b] = (uint8_t)(u >> (8 * b));
                }
                const size_t bl = BASE64_ENCODE_RAW_LENGTH(sizeof(float) * (size_t)H);
                base64_encode_raw(b64, sizeof(float) * (size_t)H, raw);
                b64[bl] = 0;
                ok = cJSON_AddStringToObject(x, "embedding", b64) != NULL;
            } else {
                ok = 0;
            }
            free(raw);
            free(b64);
        } else {
            cJSON *a = cJSON_AddArrayToObject(x, "embedding");
            for (int64_t k = 0; ok && a && k < H; k++) ok = cJSON_AddItemToArray(a, cJSON_CreateNumber(srv_json_float(e[k])));
            ok = ok && a;
        }
    }
    cJSON_AddStringToObject(o, "model", j->rq.model ? j->rq.model : s->model_id);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->emb_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)j->emb_tokens);
    char *js = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return js;
}
