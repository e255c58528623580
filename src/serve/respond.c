/* respond.c — the answers of `afinar serve` (serve.h): the JSON of a finished request, the
 * server-sent events of a stream, and the model / adapter endpoints (GET /v1/models,
 * /lora-adapters; POST /lora-adapters, /lora-adapters/load, /lora-adapters/unload). Field names:
 * OpenAI's API reference (chat.completion, text_completion, their chunks, usage) and llama.cpp's
 * server README (/lora-adapters). */
#include "serve/engine_internal.h"

#include "core/core.h"
#include "formats/json_nul.h"
#include "serve/tools.h"
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int tools_on(const srv_job *j) { return j->rq.tools && j->rq.tools->choice != SRV_TOOL_NONE; }

/* Bytes of j->text that may be streamed now: whole UTF-8 characters, and not the tail that could
 * still become a stop string (with tools, tool_stream.c holds back what may be a call). */
static size_t sendable(const srv_job *j) {
    size_t n = j->len;
    if (j->phase != 3) {
        size_t hold = 0;
        for (int k = 0; k < j->rq.n_stop; k++) {
            const size_t sl = strlen(j->rq.stop[k]);
            if (sl - 1 > hold) hold = sl - 1;
        }
        n = n > hold ? n - hold : 0;
    }
    return srv_utf8_complete(j->text ? j->text : "", n);
}

/* Wait (lock held) up to timeout_ms for the scheduler's next "something changed" signal. */
static void wait_done(srv *s, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)timeout_ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->done, &s->mu, &ts);
}

void srv_wait_change(srv *s, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    wait_done(s, timeout_ms);
    pthread_mutex_unlock(&s->mu);
}

/* The choices of a request: the lead (index 0) and its kids. */
static srv_job *choice(srv_job *j, int i) { return i ? j->kids[i - 1] : j; }

/* 1 when every choice ended (lock held). */
static int all_ended(const srv_job *j) {
    if (j->phase != 3) return 0;
    for (int i = 0; i < j->n_kids; i++)
        if (j->kids[i]->phase != 3) return 0;
    return 1;
}

/* The first failed choice's error, or NULL (lock held). */
static const srv_err *job_error(const srv_job *j) {
    if (j->err.status) return &j->err;
    for (int i = 0; i < j->n_kids; i++)
        if (j->kids[i]->err.status) return &j->kids[i]->err;
    return NULL;
}

int srv_job_wait(srv *s, srv_job *j, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    if (!all_ended(j)) wait_done(s, timeout_ms);
    const int ended = all_ended(j);
    pthread_mutex_unlock(&s->mu);
    return ended;
}

/* ---------------------------------------------------------------- responses */

static void add_usage(cJSON *o, const srv_job *j) {
    int gen = j->n_gen; /* the prompt is counted once, the tokens of every choice */
    for (int i = 0; i < j->n_kids; i++) gen += j->kids[i]->n_gen;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + gen);
}

/* A token's text as OpenAI shows it: its bytes when they are valid UTF-8, else "bytes:\\xNN..."
 * (a piece of a multi-byte character); with its byte values in *bytes when asked. */
static cJSON *token_str(srv *s, int32_t id, cJSON **bytes) {
    char piece[256], out[256 * 4 + 8];
    int n = af_token_to_bytes(s->tok, id, 0, piece, sizeof piece);
    if (n < 0) n = 0;
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    int valid = 1;
    for (int i = 0; i < n && valid;) {
        const int k = af_utf8_valid_len((const unsigned char *)piece + i, (size_t)(n - i));
        if (k <= 0) valid = 0;
        else i += k;
    }
    if (valid) {
        memcpy(out, piece, (size_t)n);
        out[n] = 0;
    } else {
        size_t o = (size_t)snprintf(out, sizeof out, "bytes:");
        for (int i = 0; i < n; i++) o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", (unsigned char)piece[i]);
    }
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    }
    return cJSON_CreateString(out);
}

/* How many log-probability entries of j lie in its text's first `len` bytes (a token cut by a stop
 * string is dropped with its text). */
static int lp_count(const srv_job *j, size_t len) {
    int n = 0;
    while (n < j->n_lp && j->lp[n].end <= len) n++;
    if (j->phase == 3 && n < j->n_lp && (n ? j->lp[n - 1].end : 0) < len) n++; /* the token a stop string cut */
    return n;
}

/* The "logprobs" object of entries [a, b) of j: chat {"content": [...]}, completions {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}. */
static cJSON *logprobs_json(srv *s, const srv_job *j, int a, int b) {
    cJSON *o = cJSON_CreateObject();
    if (j->rq.kind == SRV_CHAT) {
        cJSON *c = cJSON_AddArrayToObject(o, "content");
        for (int i = a; i < b; i++) {
            const srv_lp *e = &j->lp[i];
            cJSON *x = cJSON_CreateObject(), *by = NULL;
            cJSON_AddItemToObject(x, "token", token_str(s, e->id, &by));
            cJSON_AddNumberToObject(x, "logprob", srv_json_float(e->logprob));
            cJSON_AddItemToObject(x, "bytes", by);
            cJSON *t = cJSON_AddArrayToObject(x, "top_logprobs");
            for (int k = 0; k < e->n_top; k++) {
                cJSON *y = cJSON_CreateObject(), *yb = NULL;
                cJSON_AddItemToObject(y, "token", token_str(s, e->top_id[k], &yb));
                cJSON_AddNumberToObject(y, "logprob", srv_json_float(e->top_lp[k]));
                cJSON_AddItemToObject(y, "bytes", yb);
                cJSON_AddItemToArray(t, y);
            }
            cJSON_AddItemToArray(c, x);
        }
        return o;
    }
    cJSON *tk = cJSON_AddArrayToObject(o, "tokens"), *lp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tl = cJSON_AddArrayToObject(o, "top_logprobs"), *of = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = a; i < b; i++) {
        const srv_lp *e = &j->lp[i];
        cJSON_AddItemToArray(tk, token_str(s, e->id, NULL));
        cJSON_AddItemToArray(lp, cJSON_CreateNumber(srv_json_float(e->logprob)));
        cJSON *m = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            cJSON *key = token_str(s, e->top_id[k], NULL);
            if (key && !cJSON_GetObjectItemCaseSensitive(m, key->valuestring))
                cJSON_AddNumberToObject(m, key->valuestring, srv_json_float(e->top_lp[k]));
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(tl, m);
        cJSON_AddItemToArray(of, cJSON_CreateNumber(i == 0 ? 0 : (double)j->lp[i - 1].end));
    }
    return o;
}

static cJSON *base_obj(srv *s, const srv_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-%llu", j->rq.kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)j->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->rq.model ? j->rq.model : s->model_id);
    return o;
}

char *srv_job_result(srv *s, srv_job *j, int *status) {
    pthread_mutex_lock(&s->mu);
    char *out = NULL;
    const srv_err *err = job_error(j);
    if (err) {
        *status = err->status;
        out = srv_err_json(err);
    } else if (j->rq.kind == SRV_CLASSIFY) {
        *status = 200;
        out = j->result;
        j->result = NULL;
    } else if (j->rq.kind == SRV_EMBED) {
        *status = 200;
        out = srv_embed_json(s, j);
    } else {
        *status = 200;
        cJSON *o = base_obj(s, j, j->rq.kind == SRV_CHAT ? "chat.completion" : "text_completion");
        cJSON *ch = cJSON_AddArrayToObject(o, "choices");
        for (int i = 0; i <= j->n_kids; i++) {
            const srv_job *q = choice(j, i);
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToArray(ch, c);
            cJSON_AddNumberToObject(c, "index", i);
            const size_t n = srv_utf8_complete(q->text ? q->text : "", q->len);
            char *t = malloc(n + 1);
            if (t) {
                memcpy(t, q->text ? q->text : "", n);
                t[n] = 0;
            }
            cJSON *calls = NULL;
            if (j->rq.kind == SRV_CHAT) {
                cJSON *msg = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(msg, "role", "assistant");
                char *content = NULL;
                if (tools_on(q) && t) calls = srv_tools_extract(q->rq.tools, t, n, j->id, &content);
                if (calls) {
                    if (content) cJSON_AddStringToObject(msg, "content", content);
                    else cJSON_AddNullToObject(msg, "content");
                    cJSON_AddItemToObject(msg, "tool_calls", calls);
                } else {
                    cJSON_AddStringToObject(msg, "content", t ? t : "");
                }
                free(content);
            } else {
                cJSON_AddStringToObject(c, "text", t ? t : "");
            }
            free(t);
            if (j->rq.logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, q, 0, lp_count(q, n)));
            else cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddStringToObject(c, "finish_reason", calls ? "tool_calls" : q->finish ? q->finish : "stop");
        }
        add_usage(o, j);
        out = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

static int buf_add(char **buf, size_t *len, const char *a, const char *b, const char *c) {
    const size_t na = strlen(a), nb = b ? strlen(b) : 0, nc = c ? strlen(c) : 0;
    char *t = realloc(*buf, *len + na + nb + nc + 1);
    if (!t) return 0;
    memcpy(t + *len, a, na);
    if (nb) memcpy(t + *len + na, b, nb);
    if (nc) memcpy(t + *len + na + nb, c, nc);
    *len += na + nb + nc;
    t[*len] = 0;
    *buf = t;
    return 1;
}

/* One chunk event of the stream for choice q of request j (lock held); lp_to > q->lp_sent: the
 * log-probabilities of entries [q->lp_sent, lp_to) go with it. */
static int chunk_event(srv *s, srv_job *j, srv_job *q, const char *text, size_t n, const char *finish, int role,
                       int usage, int lp_to, char **buf, size_t *len) {
    cJSON *o = base_obj(s, j, j->rq.kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    if (!usage) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", q->choice);
        char *t = malloc(n + 1);
        if (t) {
            memcpy(t, text, n);
            t[n] = 0;
        }
        if (j->rq.kind == SRV_CHAT) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (role) cJSON_AddStringToObject(d, "role", "assistant");
            if (n || !finish) cJSON_AddStringToObject(d, "content", t ? t : "");
        } else {
            cJSON_AddStringToObject(c, "text", t ? t : "");
        }
        free(t);
        if (j->rq.logprobs && lp_to > q->lp_sent) {
            cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, q, q->lp_sent, lp_to));
            q->lp_sent = lp_to;
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
    } else {
        add_usage(o, j);
    }
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    const int ok = js && buf_add(buf, len, "data: ", js, "\n\n");
    free(js);
    return ok;
}

/* The stream of choice q of a chat request with tools (lock held): the deltas of the text [0, n) not
 * sent yet (srv_tool_stream_step: content before the calls, each call's first delta, then pieces of
 * its arguments), and at the end the finish chunk ("tool_calls" when the answer has calls, with
 * the log-probabilities). */
static void tool_chunks(srv *s, srv_job *j, srv_job *q, size_t n, char **buf, size_t *len) {
    const int final = q->phase == 3;
    if (q->fin_sent || (!final && q->stream_started && n <= q->sent)) return;
    if (!q->ts) q->ts = srv_tool_stream_new(); /* NULL: everything at the end */
    int calls = 0;
    cJSON *deltas = srv_tool_stream_step(q->ts, q->rq.tools, q->text, n, final, j->id, &calls);
    if (!q->stream_started) chunk_event(s, j, q, "", 0, NULL, 1, 0, 0, buf, len); /* the role */
    q->stream_started = 1;
    q->sent = n;
    cJSON *d;
    while (deltas && (d = cJSON_DetachItemFromArray(deltas, 0)) != NULL) {
        cJSON *o = base_obj(s, j, "chat.completion.chunk");
        cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", q->choice);
        cJSON_AddItemToObject(c, "delta", d);
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        char *js = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (js) buf_add(buf, len, "data: ", js, "\n\n");
        free(js);
    }
    cJSON_Delete(deltas);
    if (!final) return;
    chunk_event(s, j, q, "", 0, calls ? "tool_calls" : q->finish ? q->finish : "stop", 0, 0, lp_count(q, n), buf, len);
    q->fin_sent = 1;
}

/* 1 when some choice of j has text to stream or a finish to send (lock held). */
static int stream_news(const srv_job *j) {
    for (int i = 0; i <= j->n_kids; i++) {
        const srv_job *q = i ? j->kids[i - 1] : j;
        if (!q->stream_started || sendable(q) > q->sent || (q->phase == 3 && !q->fin_sent)) return 1;
    }
    return 0;
}

int srv_job_events(srv *s, srv_job *j, int timeout_ms, char **buf, size_t *len) {
    pthread_mutex_lock(&s->mu);
    if (j->stream_done) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (!stream_news(j) && !job_error(j)) wait_done(s, timeout_ms);
    const srv_err *err = job_error(j);
    if (err) { /* an error after the headers: an error event, then the end */
        char *e = srv_err_json(err);
        buf_add(buf, len, "data: ", e ? e : "{}", "\n\ndata: [DONE]\n\n");
        free(e);
        j->stream_done = 1;
        for (int i = 0; i < j->n_kids; i++) /* the other choices stop too */
            if (j->kids[i]->phase != 3) j->kids[i]->cancel = 1;
        if (j->phase != 3) j->cancel = 1;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    for (int i = 0; i <= j->n_kids; i++) {
        srv_job *q = choice(j, i);
        const size_t n = sendable(q);
        if (tools_on(q) && j->rq.kind == SRV_CHAT) {
            tool_chunks(s, j, q, n, buf, len);
            continue;
        }
        if (!q->stream_started || n > q->sent) {
            chunk_event(s, j, q, q->text ? q->text + q->sent : "", n - q->sent, NULL, !q->stream_started, 0,
                        lp_count(q, n), buf, len);
            q->stream_started = 1;
            q->sent = n;
        }
        if (q->phase == 3 && !q->fin_sent) {
            chunk_event(s, j, q, "", 0, q->finish ? q->finish : "stop", 0, 0, lp_count(q, n), buf, len);
            q->fin_sent = 1;
        }
    }
    if (all_ended(j)) {
        if (j->rq.include_usage) chunk_event(s, j, j, "", 0, NULL, 0, 1, 0, buf, len);
        buf_add(buf, len, "data: [DONE]\n\n", NULL, NULL);
        j->stream_done = 1;
    }
    const int more = !j->stream_done;
    pthread_mutex_unlock(&s->mu);
    return more;
}

/* ---------------------------------------------------------------- models and adapters */

char *srv_models_json(srv *s) {
    pthread_mutex_lock(&s->mu);
    cJSON *o = cJSON_CreateObject(), *d;
    cJSON_AddStringToObject(o, "object", "list");
    d = cJSON_AddArrayToObject(o, "data");
    for (int i = -1; i < s->n_ad; i++) {
        if (i >= 0 && (!s->ad[i].used || s->ad[i].removed)) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", i < 0 ? s->model_id : s->ad[i].name);
        cJSON_AddStringToObject(e, "object", "model");
        cJSON_AddNumberToObject(e, "created", 0);
        cJSON_AddStringToObject(e, "owned_by", "afinar");
        if (i >= 0) {
            cJSON_AddStringToObject(e, "parent", s->model_id);
            cJSON_AddNumberToObject(e, "lora_id", i);
            cJSON_AddStringToObject(e, "kind", s->ad[i].cls ? "classifier" : "lora");
        }
        cJSON_AddItemToArray(d, e);
    }
    pthread_mutex_unlock(&s->mu);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

char *srv_lora_json(srv *s) {
    pthread_mutex_lock(&s->mu);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < s->n_ad; i++) {
        if (!s->ad[i].used || s->ad[i].removed) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", i);
        cJSON_AddStringToObject(e, "name", s->ad[i].name);
        cJSON_AddStringToObject(e, "path", s->ad[i].path);
        cJSON_AddNumberToObject(e, "scale", s->ad[i].scale);
        cJSON_AddItemToArray(a, e);
    }
    pthread_mutex_unlock(&s->mu);
    char *js = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return js;
}

static cJSON *parse_body(const char *body, size_t len, srv_err *err) {
    cJSON *o = cJSON_ParseWithLength(body, len);
    char where[64];
    if (!o) {
        srv_err_set(err, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON");
    } else if (af_json_nul_path(body, len, where, sizeof where)) { /* a path cut at a NUL names another file */
        srv_err_set(err, 400, "invalid_request_error", NULL, where,
                    "'%s' holds a NUL character (\\u0000); text with NUL characters is not accepted", where);
        cJSON_Delete(o);
        o = NULL;
    }
    return o;
}

char *srv_lora_post(srv *s, const char *body, size_t len, srv_err *err) {
    cJSON *a = parse_body(body, len, err);
    if (!a) return NULL;
    float sc[MAX_ADAPTERS];
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_ad; i++) sc[i] = s->ad[i].scale;
    int ok = cJSON_IsArray(a);
    if (!ok) srv_err_set(err, 400, "invalid_request_error", NULL, NULL, "expected a list of {\"id\": N, \"scale\": S}");
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, a) {
        if (!ok) break;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *scv = cJSON_GetObjectItemCaseSensitive(e, "scale");
        const int i = cJSON_IsNumber(id) ? (int)id->valuedouble : -1;
        if (i < 0 || i >= s->n_ad || !s->ad[i].used || s->ad[i].removed || (double)i != id->valuedouble) {
            srv_err_set(err, 404, "invalid_request_error", "adapter_not_found", "id", "[%d]: no adapter with that id", k);
            ok = 0;
        } else if (!cJSON_IsNumber(scv) || !isfinite(scv->valuedouble) || fabs(scv->valuedouble) > 100) {
            srv_err_set(err, 400, "invalid_request_error", NULL, "scale", "[%d]: 'scale' must be a number in [-100, 100]", k);
            ok = 0;
        } else {
            sc[i] = (float)scv->valuedouble;
        }
        k++;
    }
    if (ok) /* global scales: every adapter with a non-zero one applies to requests that name none */
        for (int i = 0; i < s->n_ad; i++) s->ad[i].scale = sc[i];
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(a);
    return ok ? srv_lora_json(s) : NULL;
}

char *srv_lora_load(srv *s, const char *body, size_t len, srv_err *err) {
    cJSON *o = parse_body(body, len, err);
    if (!o) return NULL;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name"), *p = cJSON_GetObjectItemCaseSensitive(o, "path");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "evict");
    char *res = NULL;
    if (!cJSON_IsString(n) || !cJSON_IsString(p)) {
        srv_err_set(err, 400, "invalid_request_error", NULL, !cJSON_IsString(n) ? "name" : "path",
                    "expected {\"name\": MODEL_ID, \"path\": ADAPTER_DIR, \"evict\": false}");
    } else if (ev && !cJSON_IsBool(ev)) {
        srv_err_set(err, 400, "invalid_request_error", NULL, "evict", "'evict' must be true or false");
    } else {
        pthread_mutex_lock(&s->mu); /* loading under the lock: requests wait, the scheduler too */
        int id = -1, evicted = -1;
        af_status st = srv_adapter_load(s, n->valuestring, p->valuestring, cJSON_IsTrue(ev), &id, &evicted);
        pthread_mutex_unlock(&s->mu);
        if (st != AF_OK) {
            srv_err_set(err, st == AF_ERR_NOMEM ? 500 : st == AF_ERR_RANGE ? 409 : 400,
                        st == AF_ERR_NOMEM ? "server_error" : "invalid_request_error", st == AF_ERR_RANGE ? "adapter_limit" : NULL,
                        st == AF_ERR_RANGE ? "name" : "path", "%s", af_last_error());
        } else {
            char b[96];
            if (evicted >= 0) snprintf(b, sizeof b, "{\"id\":%d,\"evicted\":%d}", id, evicted);
            else snprintf(b, sizeof b, "{\"id\":%d}", id);
            res = strdup(b);
            if (s->o.log) {
                fprintf(s->o.log, "serve: adapter %d '%s' loaded from %s\n", id, n->valuestring, p->valuestring);
                if (evicted >= 0) fprintf(s->o.log, "serve: adapter %d unloaded (least recently used; --max-adapters)\n", evicted);
            }
        }
    }
    cJSON_Delete(o);
    return res;
}

char *srv_lora_unload(srv *s, const char *body, size_t len, srv_err *err) {
    cJSON *o = parse_body(body, len, err);
    if (!o) return NULL;
    const cJSON *idv = cJSON_GetObjectItemCaseSensitive(o, "id"), *n = cJSON_GetObjectItemCaseSensitive(o, "name");
    pthread_mutex_lock(&s->mu);
    int id = -1;
    for (int i = 0; i < s->n_ad; i++)
        if (s->ad[i].used && !s->ad[i].removed &&
            ((cJSON_IsNumber(idv) && idv->valuedouble == i) || (cJSON_IsString(n) && !strcmp(n->valuestring, s->ad[i].name))))
            id = i;
    char *res = NULL;
    if (id < 0) {
        srv_err_set(err, 404, "invalid_request_error", "adapter_not_found", "id", "no loaded adapter with that id or name");
    } else {
        srv_adapter_unload(s, id);
        char b[64];
        snprintf(b, sizeof b, "{\"id\":%d,\"unloaded\":true}", id);
        res = strdup(b);
    }
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(o);
    return res;
}
