/* respond.c — the answers of `afinar serve` (serve.h): the JSON of a finished request, the
 * server-sent events of a stream, and the model / adapter endpoints (GET /v1/models,
 * /lora-adapters; POST /lora-adapters, /lora-adapters/load, /lora-adapters/unload). Field names:
 * OpenAI's API reference (chat.completion, text_completion, their chunks, usage) and llama.cpp's
 * server README (/lora-adapters). */
#include "serve/engine_internal.h"

#include "core/core.h"
#include "formats/json_nul.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bytes of j->text that may be streamed now: whole UTF-8 characters, and not the tail that could
 * still become a stop string. */
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

int srv_job_wait(srv *s, srv_job *j, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    if (j->phase != 3) wait_done(s, timeout_ms);
    const int ended = j->phase == 3;
    pthread_mutex_unlock(&s->mu);
    return ended;
}

/* ---------------------------------------------------------------- responses */

static void add_usage(cJSON *o, const srv_job *j) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
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
    if (j->err.status) {
        *status = j->err.status;
        out = srv_err_json(&j->err);
    } else if (j->rq.kind == SRV_CLASSIFY) {
        *status = 200;
        out = j->result;
        j->result = NULL;
    } else {
        *status = 200;
        cJSON *o = base_obj(s, j, j->rq.kind == SRV_CHAT ? "chat.completion" : "text_completion");
        cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", 0);
        const size_t n = srv_utf8_complete(j->text ? j->text : "", j->len);
        char *t = malloc(n + 1);
        if (t) {
            memcpy(t, j->text ? j->text : "", n);
            t[n] = 0;
        }
        if (j->rq.kind == SRV_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", t ? t : "");
        } else {
            cJSON_AddStringToObject(c, "text", t ? t : "");
            cJSON_AddNullToObject(c, "logprobs");
        }
        free(t);
        cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
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

/* One chunk event of the stream (lock held). */
static int chunk_event(srv *s, srv_job *j, const char *text, size_t n, const char *finish, int role, int usage,
                       char **buf, size_t *len) {
    cJSON *o = base_obj(s, j, j->rq.kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    if (!usage) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", 0);
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

int srv_job_events(srv *s, srv_job *j, int timeout_ms, char **buf, size_t *len) {
    pthread_mutex_lock(&s->mu);
    if (j->stream_done) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (j->phase != 3 && sendable(j) <= j->sent && j->stream_started) wait_done(s, timeout_ms);
    if (j->err.status) { /* an error after the headers: an error event, then the end */
        char *e = srv_err_json(&j->err);
        buf_add(buf, len, "data: ", e ? e : "{}", "\n\ndata: [DONE]\n\n");
        free(e);
        j->stream_done = 1;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    const size_t n = sendable(j);
    if (!j->stream_started || n > j->sent) {
        chunk_event(s, j, j->text ? j->text + j->sent : "", n - j->sent, NULL, !j->stream_started, 0, buf, len);
        j->stream_started = 1;
        j->sent = n;
    }
    if (j->phase == 3) {
        chunk_event(s, j, "", 0, j->finish ? j->finish : "stop", 0, 0, buf, len);
        if (j->rq.include_usage) chunk_event(s, j, "", 0, NULL, 0, 1, buf, len);
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
