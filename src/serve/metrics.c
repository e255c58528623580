/* metrics.c — GET /metrics of `afinar serve` in the Prometheus text exposition format (version
 * 0.0.4: "# HELP", "# TYPE", then `name{label="v"} value` lines; prometheus.io, "Exposition
 * formats"). Counters: requests by endpoint and status, prompt tokens (and those from the prompt
 * cache), completion tokens, batched decode passes and the sequences they carried; gauges: queued
 * and running requests, sequence slots, the mean batch fill (sequences per decode pass / slots);
 * summaries: the p50 / p99 of the request latency and of the time to the first token over the
 * most recent SRV_MET_RING requests (nearest-rank quantiles). */
#include "serve/engine_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int codes[SRV_MET_CODES - 1] = {200, 400, 401, 404, 405, 413, 429, 500, 503};
static const char *const kinds[SRV_MET_KINDS] = {"chat", "completion", "classify", "embeddings"};

void srv_metrics_request(srv_metrics *m, srv_kind kind, int status) {
    int c = 0;
    while (c < SRV_MET_CODES - 1 && codes[c] != status) c++;
    if ((int)kind >= 0 && (int)kind < SRV_MET_KINDS) m->requests[kind][c]++;
}

void srv_metrics_ring_add(srv_ring *r, double v) {
    r->v[r->next] = v;
    r->next = (r->next + 1) % SRV_MET_RING;
    if (r->n < SRV_MET_RING) r->n++;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double srv_metrics_quantile(const srv_ring *r, double q) {
    if (r->n == 0) return NAN;
    double t[SRV_MET_RING];
    memcpy(t, r->v, sizeof(double) * (size_t)r->n);
    qsort(t, (size_t)r->n, sizeof *t, cmp_d);
    int k = (int)ceil(q * r->n) - 1; /* nearest rank */
    if (k < 0) k = 0;
    if (k >= r->n) k = r->n - 1;
    return t[k];
}

void srv_count_error(srv *s, srv_kind kind, int status) {
    pthread_mutex_lock(&s->mu);
    srv_metrics_request(&s->met, kind, status);
    pthread_mutex_unlock(&s->mu);
}

typedef struct sbuf {
    char *b;
    size_t len, cap;
    int bad; /* out of memory: the text is dropped */
} sbuf;

/* printf at the end of a growing buffer. */
static void put(sbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *o, const char *fmt, ...) {
    while (!o->bad) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(o->b ? o->b + o->len : NULL, o->b ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) o->bad = 1;
        if (k < 0 || (o->b && o->len + (size_t)k < o->cap)) {
            o->len += k < 0 ? 0 : (size_t)k;
            return;
        }
        size_t c = o->cap ? o->cap * 2 : 4096;
        while (c < o->len + (size_t)k + 1) c *= 2;
        char *t = realloc(o->b, c);
        if (!t) o->bad = 1;
        else o->b = t, o->cap = c;
    }
}

static void summary(sbuf *o, const char *name, const char *help, const srv_ring *r) {
    put(o, "# HELP %s %s\n# TYPE %s summary\n", name, help, name);
    const double q[2] = {0.5, 0.99};
    for (int i = 0; i < 2; i++) {
        const double v = srv_metrics_quantile(r, q[i]);
        if (isnan(v)) put(o, "%s{quantile=\"%g\"} NaN\n", name, q[i]);
        else put(o, "%s{quantile=\"%g\"} %.6f\n", name, q[i], v);
    }
    double sum = 0;
    for (int i = 0; i < r->n; i++) sum += r->v[i];
    put(o, "%s_sum %.6f\n%s_count %d\n", name, sum, name, r->n);
}

char *srv_metrics_text(srv *s) {
    sbuf ob = {0}, *o = &ob;
    pthread_mutex_lock(&s->mu);
    const srv_metrics *m = &s->met;
    put(o, "# HELP afinar_requests_total Requests answered, by endpoint and HTTP status.\n"
                        "# TYPE afinar_requests_total counter\n");
    for (int k = 0; k < SRV_MET_KINDS; k++)
        for (int c = 0; c < SRV_MET_CODES; c++) {
            char code[16];
            snprintf(code, sizeof code, "%d", codes[c < SRV_MET_CODES - 1 ? c : 0]);
            if (c == SRV_MET_CODES - 1) snprintf(code, sizeof code, "other");
            if (m->requests[k][c] || c == 0)
                put(o, "afinar_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", kinds[k], code,
                    (unsigned long long)m->requests[k][c]);
        }
    put(o,
        "# HELP afinar_prompt_tokens_total Prompt tokens of the generation requests.\n"
        "# TYPE afinar_prompt_tokens_total counter\nafinar_prompt_tokens_total %llu\n"
        "# HELP afinar_prompt_tokens_cached_total Prompt tokens taken from the prompt cache (not evaluated).\n"
        "# TYPE afinar_prompt_tokens_cached_total counter\nafinar_prompt_tokens_cached_total %llu\n"
        "# HELP afinar_completion_tokens_total Tokens generated (end-of-generation tokens excluded).\n"
        "# TYPE afinar_completion_tokens_total counter\nafinar_completion_tokens_total %llu\n"
        "# HELP afinar_decode_steps_total Batched decode passes.\n"
        "# TYPE afinar_decode_steps_total counter\nafinar_decode_steps_total %llu\n"
        "# HELP afinar_decode_sequences_total Sequences carried by the batched decode passes.\n"
        "# TYPE afinar_decode_sequences_total counter\nafinar_decode_sequences_total %llu\n"
        "# HELP afinar_prompt_chunks_total Prompt chunks evaluated.\n"
        "# TYPE afinar_prompt_chunks_total counter\nafinar_prompt_chunks_total %llu\n",
        (unsigned long long)m->prompt_tokens, (unsigned long long)m->cached_tokens,
        (unsigned long long)m->completion_tokens, (unsigned long long)m->decode_steps,
        (unsigned long long)m->decode_rows, (unsigned long long)m->prompt_chunks);
    const double fill = m->decode_steps ? (double)m->decode_rows / ((double)m->decode_steps * s->n_slots) : 0.0;
    put(o,
        "# HELP afinar_queue_requests Requests waiting for a sequence slot.\n"
        "# TYPE afinar_queue_requests gauge\nafinar_queue_requests %d\n"
        "# HELP afinar_running_requests Sequences being generated.\n"
        "# TYPE afinar_running_requests gauge\nafinar_running_requests %d\n"
        "# HELP afinar_slots Sequence slots (--parallel).\n"
        "# TYPE afinar_slots gauge\nafinar_slots %d\n"
        "# HELP afinar_batch_fill Mean sequences per decode pass over the slots, since the start (0..1).\n"
        "# TYPE afinar_batch_fill gauge\nafinar_batch_fill %.6f\n",
        s->nq, s->na, s->n_slots, fill);
    summary(o, "afinar_request_latency_seconds", "Request latency, submitted to last token (recent requests).",
            &m->latency);
    summary(o, "afinar_time_to_first_token_seconds", "Time from submission to the first token (recent requests).",
            &m->ttft);
    pthread_mutex_unlock(&s->mu);
    if (ob.bad) {
        free(ob.b);
        return NULL;
    }
    return ob.b;
}
