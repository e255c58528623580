/* engine.c — the state of `afinar serve` and its scheduler thread (serve.h); requests come in
 * through admit.c (srv_submit).
 *
 * One scheduler thread runs every forward pass. Policy (docs/SERVING.md): a request waits in a
 * FIFO queue (at most opts.queue) until one of opts.max_seqs sequence slots is free; the slot whose
 * cached tokens share the longest prefix with its prompt (same adapter) is taken, and the cache is
 * kept as far as af_session_keep_prefix allows (bit-identical results). Each iteration of the loop
 * runs ONE pass of the walk (af_session_eval_multi, chunked prefill): the next token of every
 * request past its prompt, plus pieces of the prompts of the others, in order of admission, within
 * opts.batch_tokens prompt tokens (af_session_prompt_piece keeps each piece in the regime a
 * one-call evaluation gives it), so a long prompt delays the running streams by one pass of at
 * most batch_tokens prompt tokens; different adapters share the pass, each sequence's bits as alone.
 * Classification requests run between iterations. A cancelled request (client gone) is dropped at
 * the next iteration. Sampling: af_sample with the request's seed (or a clock-derived one). */
#include "serve/serve.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "infer/session.h"
#include "kernels/cpu/kernels.h"
#include "lora/adapter_io.h"
#include "serve/engine_internal.h"
#include "serve/tools.h"
#include "tokenizer/tokenizer.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(SRV_MAX_LORA <= AF_SESSION_MAX_LORA, "a request's adapters must fit a session's list");

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

FILE *srv_log(srv *s) { return s->o.log; }
const af_server_opts *srv_opts(srv *s) { return &s->o; }

/* 1 when slot sl's cached positions were computed with j's adapters and scales (lock held). */
static int slot_matches(const srv *s, const slot *sl, const srv_job *j) {
    if (sl->n_key != j->n_ad) return 0;
    for (int k = 0; k < j->n_ad; k++)
        if (sl->gen[k] != s->ad[j->ad[k]].gen || sl->scale[k] != j->scale[k]) return 0;
    return 1;
}

/* ---------------------------------------------------------------- jobs */

void srv_job_free(srv_job *j) {
    for (int i = 0; i < j->n_kids; i++) srv_job_free(j->kids[i]);
    free(j->kids);
    if (!j->lead) srv_req_free(&j->rq); /* a later choice borrows its lead's request */
    free(j->prompt);
    free(j->text);
    free(j->result);
    free(j->lp);
    free(j->emb);
    srv_gstate_free(j->gs);
    srv_tool_stream_free(j->ts);
    free(j);
}

/* Caller holds the lock. */
static void job_unref(srv *s, srv_job *j) {
    (void)s;
    if (--j->refs == 0) srv_job_free(j);
}

void srv_job_release(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    job_unref(s, j);
    pthread_mutex_unlock(&s->mu);
}

void srv_job_cancel(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (j->phase != 3) j->cancel = 1;
    for (int i = 0; i < j->n_kids; i++)
        if (j->kids[i]->phase != 3) j->kids[i]->cancel = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
}

/* Caller holds the lock. The job leaves the scheduler: its slot and adapter are released. */
static void job_end(srv *s, srv_job *j) {
    if (j->phase == 3) return;
    j->phase = 3;
    if (j->slot >= 0) s->slots[j->slot].busy = 0;
    srv_adapters_unref(s, j);
    for (int i = 0; i < s->na; i++)
        if (s->active[i] == j) {
            s->active[i] = s->active[--s->na];
            break;
        }
    if (s->o.log) {
        if (j->err.status)
            fprintf(s->o.log, "serve: request %llu: %d %s\n", (unsigned long long)j->id, j->err.status, j->err.message);
        else if (j->rq.kind != SRV_CLASSIFY)
            fprintf(s->o.log, "serve: request %llu: %s, %d prompt tokens (%d from the cache) in %d passes, %d generated, %s, %.3f s\n",
                    (unsigned long long)j->id, j->cancel ? "cancelled" : "done", j->n_prompt,
                    j->cancel ? 0 : j->n_done, j->n_passes, j->n_gen, j->finish ? j->finish : "-", srv_now() - j->t0);
        fflush(s->o.log);
    }
    srv_metrics *m = &s->met;
    if (j->rq.kind == SRV_CHAT || j->rq.kind == SRV_COMPLETION) {
        m->completion_tokens += (uint64_t)j->n_gen;
        if (!j->lead) m->prompt_tokens += (uint64_t)j->n_prompt;
        if (!j->lead && !j->cancel) m->cached_tokens += (uint64_t)j->n_done;
        if (j->t_first > 0 && !j->lead) srv_metrics_ring_add(&m->ttft, j->t_first - j->t0);
    }
    if (j->err.status) /* a failed choice fails the request: the others stop */
        for (int i = 0; i < (j->lead ? j->lead->n_kids : j->n_kids); i++) {
            srv_job *q = j->lead ? j->lead->kids[i] : j->kids[i];
            if (q->phase != 3) q->cancel = 1;
        }
    if (j->err.status && j->lead && j->lead->phase != 3) j->lead->cancel = 1;
    if (!j->lead) { /* one request (its other choices are counted in its tokens only) */
        srv_metrics_request(m, j->rq.kind, j->err.status ? j->err.status : j->cancel ? 499 : 200);
        if (!j->err.status && !j->cancel) srv_metrics_ring_add(&m->latency, srv_now() - j->t0);
    }
    pthread_cond_broadcast(&s->done);
    job_unref(s, j->lead ? j->lead : j); /* a later choice holds a reference to its lead */
}

static int append(srv_job *j, const char *p, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t c = j->cap ? 2 * j->cap : 256;
        while (c < j->len + n + 1) c *= 2;
        char *t = realloc(j->text, c);
        if (!t) return 0;
        j->text = t, j->cap = c;
    }
    memcpy(j->text + j->len, p, n);
    j->len += n;
    j->text[j->len] = 0;
    return 1;
}

/* The token sampled for j: append its text, apply stop strings, EOG and max_tokens. Returns 1 when
 * the job goes on (then `id` is the next token to evaluate). Caller holds the lock. */
static int take_token(srv *s, srv_job *j, int32_t id) {
    if (!j->t_first) j->t_first = srv_now();
    if (af_token_is_eog(s->tok, id)) {
        j->finish = "stop";
        return 0;
    }
    char piece[256];
    int n = af_token_to_bytes(s->tok, id, 0, piece, sizeof piece);
    if (n == 0 && srv_job_marked(j)) { /* a control token: kept when it is a tool-call marker */
        n = af_token_to_bytes(s->tok, id, 1, piece, sizeof piece);
        if (n < 0 || n > (int)sizeof piece || !srv_tools_marker(piece, (size_t)n)) n = 0;
    }
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    j->n_gen++;
    if (n > 0 && !append(j, piece, (size_t)n)) {
        srv_err_set(&j->err, 500, "server_error", NULL, NULL, "out of memory");
        return 0;
    }
    if (j->n_lp > 0 && j->lp[j->n_lp - 1].id == id) j->lp[j->n_lp - 1].end = j->len;
    if (j->gs && n > 0 && srv_gstate_feed(j->gs, piece, (size_t)n) && srv_gstate_done(j->gs)) {
        j->finish = "stop"; /* the document is complete: nothing but the end can follow */
        return 0;
    }
    for (int k = 0; k < j->rq.n_stop; k++) {
        const size_t sl = strlen(j->rq.stop[k]);
        const size_t from = j->len > (size_t)n + sl ? j->len - (size_t)n - sl : 0; /* only new matches */
        const char *hit = strstr(j->text + from, j->rq.stop[k]);
        if (hit) {
            j->len = (size_t)(hit - j->text);
            j->text[j->len] = 0;
            j->finish = "stop";
            return 0;
        }
    }
    if (j->n_gen >= j->max_tokens) {
        j->finish = "length";
        return 0;
    }
    j->pending = id;
    return 1;
}

/* ---------------------------------------------------------------- scheduler */

/* A free slot for j: the longest reusable cached prefix with the same adapter, else the least
 * useful one. Lock held. */
static int pick_slot(srv *s, const srv_job *j) {
    int best = -1, best_len = -1;
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].busy) continue;
        int n = 0, len = 0;
        const int32_t *t = af_session_tokens(s->slots[i].s, &n);
        if (slot_matches(s, &s->slots[i], j))
            while (len < n && len < j->n_prompt && t[len] == j->prompt[len]) len++;
        if (len > best_len) best = i, best_len = len;
    }
    return best;
}

static void classify(srv *s, srv_job *j) {
    adapter *a = &s->ad[j->ad[0]];
    const int32_t n = j->rq.n_inputs, C = af_classifier_num_classes(a->cls);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    float *probs = malloc(sizeof(float) * (size_t)n * (size_t)C);
    af_corpus *c = NULL;
    af_dataset *ds = NULL;
    af_status st = lens && probs ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; st == AF_OK && i < n; i++) lens[i] = strlen(j->rq.inputs[i]);
    if (st == AF_OK) st = af_corpus_from_texts("input", (const char *const *)j->rq.inputs, lens, n, 0, C, &c);
    if (st == AF_OK) st = af_dataset_build(s->m->ctx, c, s->tok, af_classifier_max_seq_len(a->cls), &ds);
    if (st == AF_OK) st = af_classifier_probs(a->cls, ds, 16, probs);
    if (st != AF_OK) {
        srv_err_set(&j->err, st == AF_ERR_NOMEM ? 500 : 400, st == AF_ERR_NOMEM ? "server_error" : "invalid_request_error",
                    NULL, "input", "%s", af_last_error());
    } else {
        const char *const *names = af_classifier_label_names(a->cls);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(o, "model", a->name);
        cJSON *d = cJSON_AddArrayToObject(o, "data");
        int64_t ntok = 0;
        for (int32_t i = 0; i < n; i++) {
            char *line = NULL;
            if (af_classifier_prediction_json(a->cls, probs + (size_t)i * C, 0.5, &line) != AF_OK) continue;
            cJSON *e = cJSON_Parse(line);
            free(line);
            if (!e) continue;
            cJSON_AddNumberToObject(e, "index", i);
            cJSON *pm = cJSON_AddObjectToObject(e, "probabilities");
            for (int32_t k = 0; k < C; k++) {
                char idb[16];
                snprintf(idb, sizeof idb, "%d", k);
                char b[32];
                snprintf(b, sizeof b, "%.6g", (double)probs[(size_t)i * C + k]);
                cJSON_AddNumberToObject(pm, names ? names[k] : idb, strtod(b, NULL));
            }
            cJSON_AddItemToArray(d, e);
        }
        for (int32_t i = 0; i < n; i++) {
            int32_t *ids = NULL;
            size_t k = 0;
            if (af_tokenize(s->tok, j->rq.inputs[i], lens[i], 1, 0, &ids, &k) == AF_OK) ntok += (int64_t)k;
            free(ids);
        }
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)ntok);
        cJSON_AddNumberToObject(u, "total_tokens", (double)ntok);
        j->result = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!j->result) srv_err_set(&j->err, 500, "server_error", NULL, NULL, "out of memory");
    }
    af_dataset_free(ds);
    af_corpus_free(c);
    free(lens);
    free(probs);
}

/* Start a job on a slot (lock held; no compute here). 0: the adapters could not be set (j->err). */
static int job_start(srv *s, srv_job *j, int slot_id) {
    slot *sl = &s->slots[slot_id];
    sl->busy = 1;
    j->slot = slot_id;
    j->phase = 1;
    if (!slot_matches(s, sl, j)) {
        const float *P[SRV_MAX_LORA];
        const af_param_layout *lay[SRV_MAX_LORA];
        float sc[SRV_MAX_LORA];
        for (int k = 0; k < j->n_ad; k++) {
            const adapter *a = &s->ad[j->ad[k]];
            P[k] = a->P, lay[k] = &a->lay, sc[k] = a->lay.scale * j->scale[k];
        }
        af_session_reset(sl->s);
        sl->n_key = -1;
        if (af_session_set_loras(sl->s, j->n_ad, P, lay, sc) != AF_OK) {
            srv_err_set(&j->err, 500, "server_error", NULL, NULL, "%s", af_last_error());
            return 0;
        }
        sl->n_key = j->n_ad;
        for (int k = 0; k < j->n_ad; k++) sl->gen[k] = s->ad[j->ad[k]].gen, sl->scale[k] = j->scale[k];
    }
    af_session_set_control(sl->s, &j->cancel, NULL, NULL);
    j->n_done = af_session_keep_prefix(sl->s, j->prompt, j->n_prompt);
    if (j->lead && j->lead->phase == 2 && j->lead->slot >= 0) /* the prompt's keys and values, from its lead */
        j->n_done = af_session_copy_prefix(sl->s, s->slots[j->lead->slot].s, j->prompt, j->n_prompt);
    s->active[s->na++] = j;
    return 1;
}

static void *scheduler(void *arg) {
    srv *s = arg;
    const int64_t V = s->m->cfg.vocab_size;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* admit queued jobs: classification at once (it needs no slot), generation into free slots */
        while (s->nq > 0) {
            srv_job *j = s->queue[0];
            const int gen = j->rq.kind == SRV_CHAT || j->rq.kind == SRV_COMPLETION;
            if (gen && !j->cancel && j->lead && j->lead->phase < 2 && !j->lead->cancel) break; /* its lead's prompt first */
            if (gen && (j->cancel ? 0 : pick_slot(s, j) < 0)) break;
            memmove(s->queue, s->queue + 1, sizeof(srv_job *) * (size_t)--s->nq);
            if (j->cancel) {
                j->slot = -1;
                job_end(s, j);
            } else if (!gen) {
                pthread_mutex_unlock(&s->mu);
                if (j->rq.kind == SRV_CLASSIFY) classify(s, j);
                else srv_embed_run(s, j);
                pthread_mutex_lock(&s->mu);
                job_end(s, j);
            } else {
                if (!job_start(s, j, pick_slot(s, j))) job_end(s, j);
            }
        }
        for (int i = 0; i < s->na;) { /* clients gone */
            if (s->active[i]->cancel) job_end(s, s->active[i]);
            else i++;
        }
        if (s->na == 0) {
            if (s->quit && s->nq == 0) break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        /* one pass: the next token of every decoding job, then pieces of the prompts of the
         * others (in order of admission) within --batch-tokens prompt tokens */
        srv_job *bj[64];
        int nb = 0, nd = 0, budget = s->o.batch_tokens;
        for (int i = 0; i < s->na; i++)
            if (s->active[i]->phase == 2) bj[nb++] = s->active[i];
        nd = nb;
        srv_job *pq[64]; /* the jobs in their prompt, oldest request first */
        int np = 0;
        for (int i = 0; i < s->na; i++) {
            if (s->active[i]->phase != 1) continue;
            int k = np++;
            for (; k > 0 && pq[k - 1]->id > s->active[i]->id; k--) pq[k] = pq[k - 1];
            pq[k] = s->active[i];
        }
        for (int i = 0; i < np && budget > 0; i++) {
            srv_job *j = pq[i];
            const int c = af_session_prompt_piece(s->slots[j->slot].s, j->n_prompt, budget);
            if (c == 0) continue;
            j->piece = c;
            j->n_passes++;
            budget -= c;
            bj[nb++] = j;
        }
        pthread_mutex_unlock(&s->mu);
        af_status st = AF_OK;
        af_session *bs[64];
        int32_t cnt[64], nt = 0;
        for (int i = 0; i < nb; i++) {
            bs[i] = s->slots[bj[i]->slot].s;
            cnt[i] = i < nd ? 1 : bj[i]->piece;
            if (i < nd) s->toks[nt] = bj[i]->pending;
            else memcpy(s->toks + nt, bj[i]->prompt + af_session_n_past(bs[i]), sizeof(int32_t) * (size_t)cnt[i]);
            nt += cnt[i];
        }
        if (nb > 0) st = af_session_eval_multi(bs, nb, cnt, s->toks, s->logits);
        pthread_mutex_lock(&s->mu);
        if (nb > nd) s->met.prompt_chunks += (uint64_t)(nb - nd);
        if (nd > 0) s->met.decode_steps++, s->met.decode_rows += (uint64_t)nd;
        if (st != AF_OK) {
            /* a client went away during the pass (its flag stopped it): nothing advanced; the
             * cancelled jobs are dropped at the top of the loop and the others go again */
            if (st != AF_ERR_CANCELLED)
                for (int i = 0; i < nb; i++) {
                    srv_err_set(&bj[i]->err, 500, "server_error", NULL, NULL, "%s", af_last_error());
                    job_end(s, bj[i]);
                }
        } else {
            for (int i = 0; i < nb; i++) {
                srv_job *j = bj[i];
                float *lg = s->logits + (size_t)i * (size_t)V;
                if (j->cancel) {
                    job_end(s, j);
                } else if (j->phase == 1) { /* a prompt piece: sample once the whole prompt is in */
                    if (af_session_n_past(bs[i]) < j->n_prompt) continue;
                    j->phase = 2;
                    const int32_t id = srv_next_token(s, j, lg, (int32_t)V);
                    if (id < 0 || !take_token(s, j, id)) job_end(s, j);
                } else if (af_session_n_past(bs[i]) >= s->o.n_ctx) {
                    j->finish = "length";
                    job_end(s, j);
                } else {
                    const int32_t id = srv_next_token(s, j, lg, (int32_t)V);
                    if (id < 0 || !take_token(s, j, id)) job_end(s, j);
                }
            }
        }
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    af_kernels_thread_release(); /* the kernels' thread-local buffers of this thread (not a pool worker) */
    return NULL;
}

/* ---------------------------------------------------------------- setup */

void af_server_opts_default(af_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_seqs = 4;
    o->n_ctx = 2048;
    o->queue = 16;
    o->max_body = (int64_t)1 << 20;
    o->timeout_s = 60;
    o->batch_tokens = 256;
    o->max_adapters = 64;
}

af_status srv_new(const af_server_opts *o, srv **out) {
    *out = NULL;
    if (!o || !o->model_path) return af_fail(AF_ERR_INVALID_ARG, "serve: no model");
    if (o->max_seqs < 1 || o->max_seqs > 64) return af_fail(AF_ERR_INVALID_ARG, "--parallel %d: expected 1..64", o->max_seqs);
    if (o->queue < 0 || o->queue > 100000) return af_fail(AF_ERR_INVALID_ARG, "--queue %d: expected 0..100000", o->queue);
    if (o->n_ctx < 8) return af_fail(AF_ERR_INVALID_ARG, "--ctx %d: expected >= 8", o->n_ctx);
    if (o->max_adapters < 1 || o->max_adapters > MAX_ADAPTERS)
        return af_fail(AF_ERR_INVALID_ARG, "--max-adapters %d: expected 1..%d", o->max_adapters, MAX_ADAPTERS);
    if (o->batch_tokens < 16 || o->batch_tokens > 2048)
        return af_fail(AF_ERR_INVALID_ARG, "--batch-tokens %d: expected 16..2048", o->batch_tokens);
    srv *s = calloc(1, sizeof *s);
    if (!s) return af_fail(AF_ERR_NOMEM, "out of memory");
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    af_status st = AF_OK;
    const af_ctx *ctx = o->ctx;
    if (!ctx) {
        st = af_ctx_new(NULL, &s->own_ctx);
        ctx = s->own_ctx;
    }
    if (st == AF_OK) st = af_model_load(ctx, o->model_path, &s->m);
    if (st == AF_OK && !(s->tok = af_model_tokenizer(s->m)))
        st = af_fail(AF_ERR_NOT_FOUND, "%s: the model has no usable tokenizer", o->model_path);
    if (st == AF_OK && o->n_ctx > s->m->cfg.max_position_embeddings)
        st = af_fail(AF_ERR_INVALID_ARG, "--ctx %d exceeds the model's %d positions", o->n_ctx, s->m->cfg.max_position_embeddings);
    if (st == AF_OK && o->chat_template && strcmp(o->chat_template, "auto")) {
        af_chat_family fam;
        st = af_chat_family_of(s->tok, o->chat_template, &fam);
    }
    if (st == AF_OK && o->alias) {
        if (!o->alias[0] || strlen(o->alias) >= sizeof s->model_id)
            st = af_fail(AF_ERR_INVALID_ARG, "--alias '%.40s': expected 1 to %d characters", o->alias,
                         (int)sizeof s->model_id - 1);
        else snprintf(s->model_id, sizeof s->model_id, "%s", o->alias);
    } else if (st == AF_OK) {
        const char *b = strrchr(o->model_path, '/');
        b = b && b[1] ? b + 1 : o->model_path;
        snprintf(s->model_id, sizeof s->model_id, "%s", b);
        char *dot = strstr(s->model_id, ".gguf");
        if (dot && !dot[5]) *dot = 0;
    }
    for (int32_t i = 0; st == AF_OK && i < o->n_adapters; i++) {
        int id, ev;
        st = srv_adapter_load(s, o->adapter_names[i], o->adapter_paths[i], 0, &id, &ev);
    }
    s->n_slots = o->max_seqs;
    if (st == AF_OK) {
        s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
        s->queue = calloc((size_t)o->queue + 1, sizeof *s->queue);
        s->active = calloc((size_t)s->n_slots, sizeof *s->active);
        s->logits = malloc(sizeof(float) * (size_t)(s->n_slots + 1) * (size_t)s->m->cfg.vocab_size);
        s->toks = malloc(sizeof(int32_t) * (size_t)(o->batch_tokens + s->n_slots));
        if (!s->slots || !s->queue || !s->active || !s->logits || !s->toks) st = af_fail(AF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == AF_OK && i < s->n_slots; i++) st = af_session_new(s->m, o->n_ctx, &s->slots[i].s);
    if (st == AF_OK) {
        if (af_thread_start(&s->th, scheduler, s) != 0) st = af_fail(AF_ERR_NOMEM, "cannot start the scheduler thread");
        else s->th_started = 1;
    }
    if (st != AF_OK) {
        srv_free(s);
        return st;
    }
    *out = s;
    return AF_OK;
}

int srv_busy(srv *s) {
    pthread_mutex_lock(&s->mu);
    const int n = s->nq + s->na;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int srv_drain(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    const int n = s->nq + s->na;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void srv_free(srv *s) {
    if (!s) return;
    if (s->th_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        s->draining = 1;
        pthread_cond_broadcast(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    for (int i = 0; s->slots && i < s->n_slots; i++) af_session_free(s->slots[i].s);
    af_session_free(s->emb);
    srv_vocab_free(s->vocab);
    srv_vocab_free(s->vocab_tools);
    for (int i = 0; i < s->n_ad; i++) srv_adapter_free(&s->ad[i]);
    free(s->slots);
    free(s->queue);
    free(s->active);
    free(s->logits);
    free(s->toks);
    af_model_free(s->m);
    af_ctx_free(s->own_ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s);
}

