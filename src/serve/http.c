/* http.c — the HTTP side of `afinar serve` on libmicrohttpd; the scheduler thread of engine.c does
 * the compute. Routes:
 *   GET  /health, /v1/models (/models), /lora-adapters, /metrics (Prometheus text)
 *   GET  /, /app.js, /style.css, /api/runs... (the web page and its run views: web.c)
 *   POST /v1/chat/completions, /v1/completions, /v1/embeddings (also without /v1), /v1/classify,
 *        /lora-adapters (global scales, llama.cpp), /lora-adapters/load, /lora-adapters/unload
 * With opts.api_key every route but /health needs "Authorization: Bearer KEY" (else 401).
 *
 * Connections: libmicrohttpd's event loop (epoll on Linux) in a small pool of worker threads, so an
 * idle or slow connection costs one socket and a few kilobytes, not a thread: /health and new
 * requests are answered while thousands of connections sit idle (the thread-per-connection mode
 * this replaced stopped answering at its thread cap). No worker thread ever waits for the model:
 * a completion is handed to the scheduler and its connection suspended (MHD_suspend_connection);
 * one "waker" thread resumes it when the job ends, when a stream has new events, or once a second
 * for a stream's keep-alive comment. Open connections are counted; above `shed_at` (3/4 of the
 * connection cap, which is the open-files limit less a reserve, raised to the hard limit at start)
 * a new connection is answered at once with HTTP 503 and closed; a connection idle for --timeout
 * seconds is closed by libmicrohttpd.
 * Bodies above opts.max_body: 413 (from the Content-Length header, before reading, or while
 * reading); a client that closes its connection while its request runs cancels it (the waker polls
 * the socket of a suspended non-streaming request; a stream finds out by a failed write, and sends
 * an SSE comment every second when no token is ready). */
#include "serve/serve.h"

#include "core/core.h"
#include "core/threadpool.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define POOL_THREADS 4      /* libmicrohttpd worker threads (each an epoll loop) */
#define FD_RESERVE 64       /* descriptors kept for model files, adapters loaded later, logs */
#define MAX_CONNECTIONS 65536

struct waker;

/* One request: its body, and while it waits for the scheduler, its job (suspended). */
typedef struct conn {
    char *body;
    size_t len, cap;
    int too_big;
    srv_job *job;           /* non-streaming job handed to the scheduler; NULL before */
    int gone;               /* the client closed its socket while the job ran: job cancelled */
} conn;

typedef struct stream {
    srv *s;
    srv_job *j;
    struct waker *w;
    struct MHD_Connection *c;
    char *buf;
    size_t len, off;
    int done;
    double last;
} stream;

/* A suspended connection the waker watches: a non-streaming request (k) or a stream (t). */
typedef struct parked {
    struct MHD_Connection *c;
    conn *k;
    stream *t;
} parked;

typedef struct waker {
    srv *s;
    pthread_mutex_t mu;
    parked *v;
    size_t n, cap;
    int quit;
    pthread_t th;
    int th_started;
    int shed_at;            /* open connections above this: a new one gets 503 and is closed */
    int open;               /* open connections (atomic) */
} waker;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, char *body, const char *type) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type ? type : "application/json");
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, const srv_err *e) {
    return reply(c, e->status, srv_err_json(e), NULL);
}

/* 1 while the client's socket is open (no hang-up, no EOF pending). */
static int client_alive(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {ci->connect_fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 1;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return 0;
    char b;
    const ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r != 0;
}

/* Suspend connection c (called from the access handler or the content reader) and hand it to the
 * waker. 0: out of memory (nothing suspended). */
static int park(waker *w, struct MHD_Connection *c, conn *k, stream *t) {
    pthread_mutex_lock(&w->mu);
    if (w->n == w->cap) {
        const size_t nc = w->cap ? 2 * w->cap : 64;
        parked *v = realloc(w->v, nc * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&w->mu);
            return 0;
        }
        w->v = v, w->cap = nc;
    }
    MHD_suspend_connection(c);
    w->v[w->n++] = (parked){c, k, t};
    pthread_mutex_unlock(&w->mu);
    return 1;
}

/* 1 when parked entry p may go on: its job ended (non-streaming; a client gone meanwhile cancels
 * the job first), or its stream has events, has ended, or owes a keep-alive. Only the waker
 * touches a parked entry's conn / stream. */
static int ready(srv *s, const parked *p) {
    if (p->k) {
        if (srv_job_wait(s, p->k->job, 0)) return 1;
        if (!p->k->gone && !client_alive(p->c)) {
            p->k->gone = 1;
            srv_job_cancel(s, p->k->job);
        }
        return 0;
    }
    stream *t = p->t;
    if (!t->done && t->off == t->len) {
        free(t->buf);
        t->buf = NULL;
        t->len = t->off = 0;
        if (!srv_job_events(s, t->j, 0, &t->buf, &t->len)) t->done = 1;
    }
    return t->done || t->len > t->off || mono() - t->last > 1.0;
}

static void *waker_main(void *arg) {
    waker *w = arg;
    struct MHD_Connection *go[256];
    for (;;) {
        size_t ng = 0;
        pthread_mutex_lock(&w->mu);
        const int quit = w->quit && w->n == 0;
        for (size_t i = 0; i < w->n && ng < 256;) {
            if (ready(w->s, &w->v[i])) {
                go[ng++] = w->v[i].c;
                w->v[i] = w->v[--w->n];
            } else {
                i++;
            }
        }
        pthread_mutex_unlock(&w->mu);
        for (size_t i = 0; i < ng; i++) MHD_resume_connection(go[i]);
        if (quit) return NULL;
        if (!ng) srv_wait_change(w->s, 20); /* the scheduler signals each token and each end */
    }
}

/* Streams: events are fetched without waiting; with none ready the connection is parked until the
 * waker finds some (or a second passes: then a keep-alive comment, which finds a client gone). */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *t = cls;
    if (t->off == t->len) {
        if (t->done) return MHD_CONTENT_READER_END_OF_STREAM;
        free(t->buf);
        t->buf = NULL;
        t->len = t->off = 0;
        if (!srv_job_events(t->s, t->j, 0, &t->buf, &t->len)) t->done = 1;
        if (t->len == 0 && !t->done) {
            if (mono() - t->last > 1.0) { /* keep-alive: finds a client gone */
                t->buf = strdup(": keep-alive\n\n");
                t->len = t->buf ? strlen(t->buf) : 0;
            } else {
                return park(t->w, t->c, NULL, t) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        if (t->off == t->len) return t->done ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = t->len - t->off < max ? t->len - t->off : max;
    memcpy(out, t->buf + t->off, n);
    t->off += n;
    t->last = mono();
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *t = cls;
    if (!t->done) srv_job_cancel(t->s, t->j); /* the client went away mid-stream */
    srv_job_release(t->s, t->j);
    free(t->buf);
    free(t);
}

static enum MHD_Result generate(srv *s, waker *w, struct MHD_Connection *c, srv_kind kind, conn *k) {
    srv_req rq;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!srv_req_parse(kind, k->body ? k->body : "", k->len, &rq, &e)) {
        srv_req_free(&rq);
        srv_count_error(s, kind, e.status);
        return reply_err(c, &e);
    }
    const int streaming = rq.stream && (kind == SRV_CHAT || kind == SRV_COMPLETION);
    srv_job *j = NULL;
    if (!srv_submit(s, &rq, &j, &e)) {
        srv_count_error(s, kind, e.status);
        return reply_err(c, &e);
    }
    if (streaming) {
        stream *t = calloc(1, sizeof *t);
        struct MHD_Response *r = t ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, t, stream_free) : NULL;
        if (!r) {
            free(t);
            srv_job_cancel(s, j);
            srv_job_release(s, j);
            return MHD_NO;
        }
        t->s = s, t->j = j, t->w = w, t->c = c, t->last = mono();
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        const enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    k->job = j;
    if (park(w, c, k, NULL)) return MHD_YES; /* the handler is called again when the job ends */
    srv_job_cancel(s, j);
    while (!srv_job_wait(s, j, 100)) {
    }
    srv_job_release(s, j);
    k->job = NULL;
    return MHD_NO;
}

/* The handler's call after the waker resumed a non-streaming request: its answer. */
static enum MHD_Result finish(srv *s, struct MHD_Connection *c, conn *k) {
    srv_job *j = k->job;
    k->job = NULL;
    if (k->gone) {
        srv_job_release(s, j);
        return MHD_NO; /* close the connection: nobody reads the answer */
    }
    int status = 200;
    char *body = srv_job_result(s, j, &status);
    srv_job_release(s, j);
    return reply(c, status, body, NULL);
}

/* 1 when the request carries "Authorization: Bearer <key>" (or no key is set). The header and the key
 * are compared as SHA-256 digests with Nettle's memeql_sec: the time taken does not depend on where
 * they differ nor on their lengths. */
static int authorized(struct MHD_Connection *c, const char *key) {
    if (!key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    uint8_t dh[SHA256_DIGEST_SIZE], dk[SHA256_DIGEST_SIZE];
    struct sha256_ctx x;
    sha256_init(&x);
    sha256_update(&x, strlen(h), (const uint8_t *)h);
    sha256_digest(&x, sizeof dh, dh);
    sha256_init(&x);
    sha256_update(&x, strlen(key), (const uint8_t *)key);
    sha256_digest(&x, sizeof dk, dk);
    return memeql_sec(dh, dk, sizeof dh);
}

int af_server_available(void) { return 1; }

/* The methods route `url` (the /v1 prefix already dropped) answers, for a 405; NULL: no such route. */
static const char *allowed_methods(const char *url) {
    static const char *const get[] = {"/models", "/metrics"},
                             *const post[] = {"/chat/completions", "/completions", "/v1/classify", "/classify",
                                              "/lora-adapters/load", "/lora-adapters/unload", "/embeddings"};
    if (!strcmp(url, "/lora-adapters")) return "GET, POST";
    for (size_t i = 0; i < sizeof get / sizeof *get; i++)
        if (!strcmp(url, get[i])) return "GET";
    for (size_t i = 0; i < sizeof post / sizeof *post; i++)
        if (!strcmp(url, post[i])) return "POST";
    return NULL;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    waker *w = cls;
    srv *s = w->s;
    const af_server_opts *o = srv_opts(s);
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!*con_cls) {
        conn *k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        *con_cls = k;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)o->max_body) {
            k->too_big = 1;
            srv_err_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                        "the body has %s bytes, more than the limit of %lld (--max-body)", cl, (long long)o->max_body);
            return reply_err(c, &e);
        }
        return MHD_YES;
    }
    conn *k = *con_cls;
    if (k->job) return finish(s, c, k);
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size > (size_t)o->max_body) {
            k->too_big = 1;
            free(k->body);
            k->body = NULL;
            k->len = k->cap = 0;
        }
        if (!k->too_big) {
            if (k->len + *upload_size + 1 > k->cap) {
                size_t nc = k->cap ? k->cap : 4096;
                while (nc < k->len + *upload_size + 1) nc *= 2;
                char *b = realloc(k->body, nc);
                if (!b) return MHD_NO;
                k->body = b, k->cap = nc;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
            k->body[k->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_big) {
        srv_err_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                    "the body is larger than the limit of %lld bytes (--max-body)", (long long)o->max_body);
        return reply_err(c, &e);
    }
    if (!strncmp(url, "/api/", 5) && !authorized(c, o->api_key)) { /* the page's data; the page itself is open */
        srv_err_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                    "missing or wrong API key: send the header 'Authorization: Bearer KEY' (--api-key)");
        return reply_err(c, &e);
    }
    srv_web_reply wr;
    if (srv_web_route(s, method, url, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from"),
                      k->body ? k->body : "", k->len, &wr, &e)) {
        if (wr.data) {
            struct MHD_Response *r = MHD_create_response_from_buffer(wr.len, (void *)wr.data, MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, "Content-Type", wr.type);
            MHD_add_response_header(r, "Cache-Control", "no-cache");
            const enum MHD_Result ok = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r);
            return ok;
        }
        return wr.body ? reply(c, wr.status, wr.body, NULL) : reply_err(c, &e);
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    const char *path = url; /* as the client wrote it, for messages */
    if (!strncmp(url, "/v1/", 4) && strcmp(url, "/v1/classify")) url += 3; /* /v1/x == /x */
    if (!strcmp(url, "/health")) {
        const int busy = srv_busy(s);
        (void)busy;
        const int draining = o->stop && *o->stop;
        return reply(c, draining ? 503 : 200, strdup(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}"), NULL);
    }
    if (!authorized(c, o->api_key)) { /* every route but /health (as llama-server) */
        srv_err_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                    "missing or wrong API key: send the header 'Authorization: Bearer KEY' (--api-key)");
        return reply_err(c, &e);
    }
    if (get && !strcmp(url, "/models")) return reply(c, 200, srv_models_json(s), NULL);
    if (get && !strcmp(url, "/lora-adapters")) return reply(c, 200, srv_lora_json(s), NULL);
    if (get && !strcmp(url, "/metrics")) return reply(c, 200, srv_metrics_text(s), "text/plain; version=0.0.4");
    if (post) {
        const char *b = k->body ? k->body : "";
        char *r = NULL;
        if (!strcmp(url, "/chat/completions")) return generate(s, w, c, SRV_CHAT, k);
        if (!strcmp(url, "/completions")) return generate(s, w, c, SRV_COMPLETION, k);
        if (!strcmp(url, "/embeddings")) return generate(s, w, c, SRV_EMBED, k);
        if (!strcmp(url, "/v1/classify") || !strcmp(url, "/classify")) return generate(s, w, c, SRV_CLASSIFY, k);
        if (!strcmp(url, "/lora-adapters")) r = srv_lora_post(s, b, k->len, &e);
        else if (!strcmp(url, "/lora-adapters/load")) r = srv_lora_load(s, b, k->len, &e);
        else if (!strcmp(url, "/lora-adapters/unload")) r = srv_lora_unload(s, b, k->len, &e);
        else goto not_found;
        return r ? reply(c, 200, r, NULL) : reply_err(c, &e);
    }
not_found:;
    const char *allow = allowed_methods(url);
    if (allow) {
        srv_err_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%.200s takes %s, not %.20s", path,
                    allow, method);
        char *js = srv_err_json(&e);
        struct MHD_Response *r = js ? MHD_create_response_from_buffer(strlen(js), js, MHD_RESPMEM_MUST_FREE) : NULL;
        if (!r) {
            free(js);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "Allow", allow);
        const enum MHD_Result ok = MHD_queue_response(c, 405, r);
        MHD_destroy_response(r);
        return ok;
    }
    srv_err_set(&e, 404, "invalid_request_error", "not_found", NULL, "no route for %s %.200s", method, path);
    return reply_err(c, &e);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    waker *w = cls;
    conn *k = *con_cls;
    if (k) {
        if (k->job) { /* ended before its answer was sent */
            srv_job_cancel(w->s, k->job);
            srv_job_release(w->s, k->job);
        }
        free(k->body);
        free(k);
    }
    *con_cls = NULL;
}

/* Counts open connections; one opened above the shedding mark is answered with 503 at once (before
 * its request is read: HTTP lets a server answer early and close) and shut down, so libmicrohttpd
 * closes it on its next read. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    (void)socket_context;
    waker *w = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        __atomic_sub_fetch(&w->open, 1, __ATOMIC_RELAXED);
        return;
    }
    if (__atomic_add_fetch(&w->open, 1, __ATOMIC_RELAXED) <= w->shed_at) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    static const char body[] = "{\"error\":{\"message\":\"the server has too many open connections; try again later\","
                               "\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}";
    char msg[512];
    const int n = snprintf(msg, sizeof msg,
                           "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                           "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                           sizeof body - 1, body);
    if (n > 0 && (size_t)n < sizeof msg) (void)!send(ci->connect_fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(ci->connect_fd, SHUT_RDWR);
}

/* Raise the open-files limit to its hard limit (one descriptor per connection) and return the
 * connection cap it allows: the limit less FD_RESERVE, at most MAX_CONNECTIONS, at least 16. */
static int connection_cap(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024 - FD_RESERVE;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = rl;
        if (up.rlim_max != RLIM_INFINITY && up.rlim_max > 1048576) up.rlim_cur = 1048576;
        else up.rlim_cur = up.rlim_max == RLIM_INFINITY ? 1048576 : up.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    }
    const rlim_t n = rl.rlim_cur == RLIM_INFINITY ? MAX_CONNECTIONS : rl.rlim_cur;
    if (n < FD_RESERVE + 16) return 16;
    return n - FD_RESERVE > MAX_CONNECTIONS ? MAX_CONNECTIONS : (int)(n - FD_RESERVE);
}

af_status af_server_run(const af_server_opts *o) {
    if (!o) return af_fail(AF_ERR_INVALID_ARG, "af_server_run: NULL options");
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)o->port);
    const char *host = o->host ? o->host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return af_fail(AF_ERR_INVALID_ARG, "--host %s: expected an IPv4 address (127.0.0.1, 0.0.0.0) or localhost", host);
    if (o->port < 0 || o->port > 65535) return af_fail(AF_ERR_INVALID_ARG, "--port %d: expected 0..65535", o->port);
    if (o->max_body < 1024) return af_fail(AF_ERR_INVALID_ARG, "--max-body %lld: expected >= 1024", (long long)o->max_body);
    srv *s = NULL;
    AF_TRY(srv_new(o, &s));
    waker w;
    memset(&w, 0, sizeof w);
    w.s = s;
    pthread_mutex_init(&w.mu, NULL);
    const int cap = connection_cap();
    w.shed_at = cap - cap / 4;
    if (af_thread_start(&w.th, waker_main, &w) != 0) {
        pthread_mutex_destroy(&w.mu);
        srv_free(s);
        return af_fail(AF_ERR_NOMEM, "cannot start the server's waker thread");
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME, (uint16_t)o->port, NULL, NULL, handler,
        &w, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)POOL_THREADS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout_s > 0 ? o->timeout_s : 0), MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)cap, MHD_OPTION_NOTIFY_COMPLETED, completed, &w, MHD_OPTION_NOTIFY_CONNECTION, on_connection, &w,
        MHD_OPTION_END);
    af_status st = AF_OK;
    if (!d) {
        st = af_fail(AF_ERR_IO, "cannot listen on %s:%d (address in use or not available)", host, o->port);
    } else {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        const int port = di ? di->port : o->port;
        if (o->log) {
            fprintf(o->log, "afinar serve: listening on http://%s:%d (max %d sequences, %d positions each, queue %d, %d connections)\n",
                    host, port, o->max_seqs, o->n_ctx, o->queue, w.shed_at);
            fflush(o->log);
        }
        while (!(o->stop && *o->stop)) usleep(50000);
        const int n = srv_drain(s);
        if (o->log) {
            fprintf(o->log, "afinar serve: stopping: %d request(s) in flight finish first\n", n);
            fflush(o->log);
        }
        while (srv_busy(s) > 0) usleep(20000);
    }
    /* the waker ends once every suspended connection is resumed (libmicrohttpd must not be
     * stopped with one suspended) */
    pthread_mutex_lock(&w.mu);
    w.quit = 1;
    pthread_mutex_unlock(&w.mu);
    pthread_join(w.th, NULL);
    if (d) MHD_stop_daemon(d);
    pthread_mutex_destroy(&w.mu);
    free(w.v);
    srv_free(s);
    if (d && o->log) {
        fprintf(o->log, "afinar serve: stopped\n");
        fflush(o->log);
    }
    return st;
}
