/* admit.c — what `afinar serve` serves and what it lets in (engine_internal.h): the adapters by id
 * (loaded, least-recently-used eviction under --max-adapters, unloaded, their references held by
 * requests) and the admission of a request (srv_submit: the model or adapters it names, its prompt
 * rendered and tokenized outside the lock and checked against the context, its sampling, its
 * choices, then the FIFO queue of the scheduler, engine.c, or an OpenAI-shaped error). */
#include "serve/serve.h"

#include "core/core.h"
#include "lora/adapter_io.h"
#include "serve/engine_internal.h"
#include "serve/tools.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- adapters */

void srv_adapter_free(adapter *a) {
    af_classifier_free(a->cls);
    free(a->P);
    af_param_layout_free(&a->lay);
    memset(a, 0, sizeof *a);
}

/* The least recently used loaded adapter that no request is using, or -1 (lock held). */
static int lru_adapter(const srv *s) {
    int best = -1;
    for (int i = 0; i < s->n_ad; i++)
        if (s->ad[i].used && !s->ad[i].removed && s->ad[i].refs == 0 && (best < 0 || s->ad[i].last_use < s->ad[best].last_use))
            best = i;
    return best;
}

/* Load adapter `path` as `name` into a free entry (caller holds the lock or is single-threaded). */
af_status srv_adapter_load(srv *s, const char *name, const char *path, int evict, int *id, int *evicted) {
    *evicted = -1;
    if (!name[0] || strlen(name) >= sizeof s->ad[0].name || strlen(path) >= sizeof s->ad[0].path)
        return af_fail(AF_ERR_INVALID_ARG, "adapter name '%s' or path too long or empty", name);
    if (!strcmp(name, s->model_id)) return af_fail(AF_ERR_INVALID_ARG, "adapter name '%s' is the base model's id", name);
    for (int i = 0; i < s->n_ad; i++)
        if (s->ad[i].used && !s->ad[i].removed && !strcmp(s->ad[i].name, name))
            return af_fail(AF_ERR_INVALID_ARG, "an adapter named '%s' is already loaded (id %d)", name, i);
    if (s->n_ad >= MAX_ADAPTERS) return af_fail(AF_ERR_RANGE, "at most %d adapters per server run", MAX_ADAPTERS);
    int loaded = 0;
    for (int i = 0; i < s->n_ad; i++) loaded += s->ad[i].used && !s->ad[i].removed;
    const int lru = loaded >= s->o.max_adapters ? lru_adapter(s) : -1;
    if (loaded >= s->o.max_adapters && !evict)
        return af_fail(AF_ERR_RANGE, "%d adapters are loaded (--max-adapters %d): unload one, or load with "
                                     "\"evict\": true to unload the least recently used one", loaded, s->o.max_adapters);
    if (loaded >= s->o.max_adapters && lru < 0)
        return af_fail(AF_ERR_RANGE, "%d adapters are loaded (--max-adapters %d) and every one is in use by a request",
                       loaded, s->o.max_adapters);
    adapter a;
    memset(&a, 0, sizeof a);
    af_adapter_info info;
    AF_TRY(af_adapter_read_info(path, &info));
    af_status st = info.n_layers > s->m->cfg.num_hidden_layers
                       ? af_fail(AF_ERR_INVALID_ARG, "%s: the adapter has %d layers, the model %d", path, info.n_layers,
                                 s->m->cfg.num_hidden_layers)
                       : af_adapter_load_for_model(path, &info, s->m, 0.0f, 0, AF_ADAPTER_IGNORE_HEAD, &a.lay, &a.P);
    const int has_head = info.num_classes > 0;
    af_adapter_info_free(&info);
    if (st == AF_OK && a.lay.lora.use_dora) /* its norm is not a correction the batch walk can add */
        st = af_fail(AF_ERR_UNSUPPORTED, "%s: a DoRA adapter is not served unmerged: merge it into the model with "
                                         "`afinar merge` and serve that", path);
    if (st == AF_OK && has_head) st = af_classifier_load(s->m->ctx, NULL, s->m, path, &a.cls);
    if (st != AF_OK) {
        srv_adapter_free(&a);
        return st;
    }
    if (lru >= 0) { /* evicted only once the new one loaded */
        srv_adapter_unload(s, lru);
        *evicted = lru;
    }
    a.used = 1;
    a.gen = ++s->next_gen;
    a.last_use = ++s->use_clock;
    a.scale = 0.0f; /* not applied to requests that name no adapter until POST /lora-adapters says so */
    snprintf(a.name, sizeof a.name, "%s", name);
    snprintf(a.path, sizeof a.path, "%s", path);
    *id = s->n_ad;
    s->ad[s->n_ad++] = a;
    return AF_OK;
}

void srv_adapters_unref(srv *s, const srv_job *j) {
    for (int k = 0; k < j->n_ad; k++) {
        adapter *a = &s->ad[j->ad[k]];
        if (--a->refs == 0 && a->removed) {
            srv_adapter_free(a);
            a->used = 1, a->removed = 1; /* the id stays taken */
        }
    }
}

void srv_adapter_unload(srv *s, int id) {
    adapter *a = &s->ad[id];
    a->removed = 1; /* freed when the last job using it ends */
    srv_slots_forget(s, a->gen); /* its cached positions can never be reused */
    if (a->refs == 0) {
        srv_adapter_free(a);
        a->used = 1, a->removed = 1; /* the id stays taken */
    }
}

void srv_slots_forget(srv *s, uint64_t gen) {
    for (int i = 0; i < s->n_slots; i++)
        for (int k = 0; k < s->slots[i].n_key; k++)
            if (!s->slots[i].busy && s->slots[i].gen[k] == gen) {
                s->slots[i].n_key = -1;
                break;
            }
}

/* ---------------------------------------------------------------- submit */

static uint64_t clock_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
}

/* 1 when a request's "model" names the base model: its id, the id + ".gguf", or any name that is
 * no loaded adapter's while no adapter is loaded (one model served: llama-server's rule). Lock held. */
static int names_base(const srv *s, const char *name) {
    const size_t n = strlen(s->model_id);
    if (!strcmp(name, s->model_id) || (!strncmp(name, s->model_id, n) && !strcmp(name + n, ".gguf"))) return 1;
    for (int i = 0; i < s->n_ad; i++)
        if (s->ad[i].used && !s->ad[i].removed) return 0;
    return 1;
}

/* Which adapters and scales a request asks for (j->n_ad, j->ad, j->scale): "model" names the base
 * or an adapter; "lora" (ids and scales, llama.cpp) overrides; without either the global scales of
 * POST /lora-adapters apply. Every adapter with a non-zero scale is applied (scale 0 = off). Lock held. */
static int pick_adapters(srv *s, srv_job *j, srv_err *err) {
    const srv_req *rq = &j->rq;
    j->n_ad = 0;
    int by_model = -1;
    if (rq->model && !names_base(s, rq->model)) {
        for (int i = 0; i < s->n_ad; i++)
            if (s->ad[i].used && !s->ad[i].removed && !strcmp(s->ad[i].name, rq->model)) by_model = i;
        if (by_model < 0) {
            srv_err_set(err, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist (GET /v1/models lists the base model and the adapters)",
                        rq->model);
            return 0;
        }
    }
    float sc[MAX_ADAPTERS];
    for (int i = 0; i < s->n_ad; i++) sc[i] = s->ad[i].used && !s->ad[i].removed && !rq->model ? s->ad[i].scale : 0;
    if (rq->model && by_model < 0)
        for (int i = 0; i < s->n_ad; i++) sc[i] = 0; /* the base model named explicitly */
    if (by_model >= 0) sc[by_model] = s->ad[by_model].scale != 0 ? s->ad[by_model].scale : 1.0f;
    for (int k = 0; k < rq->n_lora; k++) {
        const int i = rq->lora_id[k];
        if (i < 0 || i >= s->n_ad || !s->ad[i].used || s->ad[i].removed) {
            srv_err_set(err, 404, "invalid_request_error", "adapter_not_found", "lora",
                        "lora[%d]: no adapter with id %d (GET /lora-adapters)", k, i);
            return 0;
        }
        sc[i] = (float)rq->lora_scale[k];
    }
    for (int i = 0; i < s->n_ad; i++) {
        if (sc[i] == 0 || !s->ad[i].used || s->ad[i].removed) continue;
        if (j->n_ad == SRV_MAX_LORA) {
            srv_err_set(err, 400, "invalid_request_error", NULL, "lora",
                        "more than %d adapters with a non-zero scale in one request", SRV_MAX_LORA);
            return 0;
        }
        j->ad[j->n_ad] = i;
        j->scale[j->n_ad++] = sc[i];
    }
    return 1;
}

static af_status tokenize_prompt(srv *s, const srv_req *rq, int32_t **ids, size_t *n) {
    char *text = NULL;
    af_status st = AF_OK;
    if (rq->kind == SRV_CHAT) {
        af_chat_family fam;
        st = af_chat_family_of(s->tok, s->o.chat_template, &fam);
        if (st == AF_OK) st = srv_chat_prompt(s->tok, fam, rq, &text); /* tools: the layout's own turns (tools.h) */
    }
    const char *t = rq->kind == SRV_CHAT ? text : rq->prompt;
    if (st == AF_OK) st = af_tokenize(s->tok, t, strlen(t), 1, 1, ids, n);
    free(text);
    return st;
}

/* The model of an embeddings request (the base model only) and the adapter of a classification
 * request (one with a head). 0 and *err when it names none. Lock held. */
static int check_model(srv *s, srv_job *j, srv_err *err) {
    if (j->rq.kind == SRV_EMBED) {
        if (!j->rq.model || names_base(s, j->rq.model)) return 1;
        int is_ad = 0;
        for (int i = 0; i < s->n_ad; i++) is_ad |= s->ad[i].used && !s->ad[i].removed && !strcmp(s->ad[i].name, j->rq.model);
        if (is_ad)
            return srv_err_set(err, 400, "invalid_request_error", NULL, "model",
                               "'%.200s' is an adapter: embeddings come from the base model ('%s')", j->rq.model, s->model_id);
        return srv_err_set(err, 404, "invalid_request_error", "model_not_found", "model",
                           "The model '%.200s' does not exist (GET /v1/models)", j->rq.model);
    }
    if (j->rq.kind != SRV_CLASSIFY) return pick_adapters(s, j, err);
    int id = -1;
    for (int i = 0; i < s->n_ad; i++)
        if (s->ad[i].used && !s->ad[i].removed && j->rq.model && !strcmp(s->ad[i].name, j->rq.model)) id = i;
    if (!j->rq.model || id < 0)
        return srv_err_set(err, 404, "invalid_request_error", "model_not_found", "model",
                           "'model' must name a loaded classification adapter ('%.200s' is not one)",
                           j->rq.model ? j->rq.model : "");
    if (!s->ad[id].cls)
        return srv_err_set(err, 400, "invalid_request_error", NULL, "model",
                           "the adapter '%s' has no classification head (score.weight)", s->ad[id].name);
    j->n_ad = 1;
    j->ad[0] = id;
    j->scale[0] = 1.0f;
    return 1;
}

/* A completion's prompt (lock NOT held): the tools bound to the layout, the prompt rendered and
 * tokenized and checked against the context, max_tokens, the sampling, the other choices. 0 and *err. */
static int prepare_prompt(srv *s, srv_job *j, srv_err *err) {
    size_t n = 0;
    af_chat_family fam = AF_CHAT_NONE;
    af_status st = AF_OK;
    if (j->rq.tools) { /* the call format of the model's layout (tools.h) */
        st = af_chat_family_of(s->tok, s->o.chat_template, &fam);
        if (st == AF_OK && !srv_tools_bind(j->rq.tools, s->tok, fam, &j->rq.grammar, err)) return 0;
    }
    if (st == AF_OK) st = tokenize_prompt(s, &j->rq, &j->prompt, &n);
    j->n_prompt = (int)n;
    if (st != AF_OK)
        return srv_err_set(err, st == AF_ERR_NOMEM ? 500 : 400, st == AF_ERR_NOMEM ? "server_error" : "invalid_request_error",
                           NULL, j->rq.kind == SRV_CHAT ? "messages" : "prompt", "%s", af_last_error());
    if (n == 0) return srv_err_set(err, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty after tokenization");
    if ((int64_t)n >= s->o.n_ctx)
        return srv_err_set(err, 400, "invalid_request_error", "context_length_exceeded", "messages",
                           "the prompt has %zu tokens; the context per sequence is %d (--ctx)", n, s->o.n_ctx);
    if (j->rq.max_tokens > 0 && (int64_t)n + j->rq.max_tokens > s->o.n_ctx)
        return srv_err_set(err, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                           "max_tokens %lld + %zu prompt tokens exceed the context per sequence of %d (--ctx)",
                           (long long)j->rq.max_tokens, n, s->o.n_ctx);
    j->max_tokens = j->rq.max_tokens > 0 ? j->rq.max_tokens : s->o.n_ctx - (int64_t)n;
    j->sp = (af_sampling){(float)j->rq.temperature, j->rq.top_k, (float)j->rq.top_p, j->rq.has_seed ? j->rq.seed : clock_seed()};
    j->rng = af_rng_seed(j->sp.seed);
    if (!srv_make_choices(j)) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return 1;
}

/* The last checks before the queue (lock held): the grammar's vocabulary (made at the first use,
 * with the lock released meanwhile: its index takes some 0.1 s on a 262k vocabulary), draining,
 * room in the queue for the request and its choices. 0 and *err. */
static int can_queue(srv *s, srv_job *j, srv_err *err) {
    const int marked = srv_job_marked(j);
    srv_vocab **vp = marked ? &s->vocab_tools : &s->vocab;
    if (j->rq.grammar && !*vp) {
        pthread_mutex_unlock(&s->mu);
        srv_vocab *v = srv_vocab_new(s->tok, marked ? srv_tools_marker : NULL);
        pthread_mutex_lock(&s->mu);
        if (!v) return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        if (*vp) srv_vocab_free(v); /* another request made it meanwhile */
        else *vp = v;
    }
    if (s->draining) return srv_err_set(err, 503, "server_error", "unavailable", NULL, "the server is shutting down");
    if (s->nq + 1 + j->n_kids > s->o.queue)
        return srv_err_set(err, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                           "too many requests: %d waiting for %d sequence slots, and %d more would exceed --queue %d",
                           s->nq, s->n_slots, 1 + j->n_kids, s->o.queue);
    return 1;
}

int srv_submit(srv *s, srv_req *rq, srv_job **out, srv_err *err) {
    *out = NULL;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        srv_req_free(rq);
        return srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->rq = *rq;
    memset(rq, 0, sizeof *rq);
    j->slot = -1;
    j->refs = 2;
    j->created = (long)time(NULL);
    j->t0 = srv_now();
    pthread_mutex_lock(&s->mu);
    int ok = s->draining ? srv_err_set(err, 503, "server_error", "unavailable", NULL, "the server is shutting down")
                         : check_model(s, j, err);
    if (ok) {
        for (int k = 0; k < j->n_ad; k++) s->ad[j->ad[k]].refs++, s->ad[j->ad[k]].last_use = ++s->use_clock;
        pthread_mutex_unlock(&s->mu);
        if (j->rq.kind == SRV_CHAT || j->rq.kind == SRV_COMPLETION) ok = prepare_prompt(s, j, err); /* outside the lock */
        pthread_mutex_lock(&s->mu);
        if (ok) ok = can_queue(s, j, err);
        if (!ok) srv_adapters_unref(s, j);
    }
    if (!ok) {
        pthread_mutex_unlock(&s->mu);
        srv_job_free(j);
        return 0;
    }
    j->id = ++s->next_id;
    s->queue[s->nq++] = j;
    for (int i = 0; i < j->n_kids; i++) { /* the other choices right behind (each refers to its lead) */
        j->kids[i]->id = j->id;
        for (int k = 0; k < j->n_ad; k++) s->ad[j->ad[k]].refs++;
        s->queue[s->nq++] = j->kids[i];
    }
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    *out = j;
    return 1;
}
