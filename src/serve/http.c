/* http.c — the HTTP side of `afinar serve` on libmicrohttpd (one thread per connection; the
 * scheduler thread of engine.c does the compute). Routes:
 *   GET  /health, /v1/models (/models), /lora-adapters
 *   GET  /, /app.js, /style.css, /api/runs... (the web page and its run views: web.c)
 *   POST /v1/chat/completions, /v1/completions (also without /v1), /v1/classify,
 *        /lora-adapters (global scales, llama.cpp), /lora-adapters/load, /lora-adapters/unload
 * With opts.api_key every route but /health needs "Authorization: Bearer KEY" (else 401).
 * Bodies above opts.max_body: 413 (from the Content-Length header, before reading, or while
 * reading); a client that closes its connection while its request runs cancels it (poll on the
 * socket for non-streaming requests, a failed write for streams, which send an SSE comment every
 * second when no token is ready). */
#include "serve/serve.h"

#include "core/core.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
    char *body;
    size_t len, cap;
    int too_big;
} conn;

typedef struct stream {
    srv *s;
    srv_job *j;
    char *buf;
    size_t len, off;
    int done;
    double last;
} stream;

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

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *t = cls;
    while (t->off == t->len) {
        if (t->done) return MHD_CONTENT_READER_END_OF_STREAM;
        free(t->buf);
        t->buf = NULL;
        t->len = t->off = 0;
        if (!srv_job_events(t->s, t->j, 250, &t->buf, &t->len)) t->done = 1;
        if (t->len == 0 && !t->done && mono() - t->last > 1.0) { /* keep-alive: finds a client gone */
            t->buf = strdup(": keep-alive\n\n");
            t->len = t->buf ? strlen(t->buf) : 0;
        }
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

static enum MHD_Result generate(srv *s, struct MHD_Connection *c, srv_kind kind, conn *k) {
    srv_req rq;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!srv_req_parse(kind, k->body ? k->body : "", k->len, &rq, &e)) {
        srv_req_free(&rq);
        return reply_err(c, &e);
    }
    const int streaming = rq.stream && kind != SRV_CLASSIFY;
    srv_job *j = NULL;
    if (!srv_submit(s, &rq, &j, &e)) return reply_err(c, &e);
    if (streaming) {
        stream *t = calloc(1, sizeof *t);
        struct MHD_Response *r = t ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, t, stream_free) : NULL;
        if (!r) {
            free(t);
            srv_job_cancel(s, j);
            srv_job_release(s, j);
            return MHD_NO;
        }
        t->s = s, t->j = j, t->last = mono();
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        const enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    while (!srv_job_wait(s, j, 100)) {
        if (!client_alive(c)) {
            srv_job_cancel(s, j);
            while (!srv_job_wait(s, j, 100)) {
            }
            srv_job_release(s, j);
            return MHD_NO; /* close the connection: nobody reads the answer */
        }
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

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
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
    if (post) {
        const char *b = k->body ? k->body : "";
        char *r = NULL;
        if (!strcmp(url, "/chat/completions")) return generate(s, c, SRV_CHAT, k);
        if (!strcmp(url, "/completions")) return generate(s, c, SRV_COMPLETION, k);
        if (!strcmp(url, "/v1/classify") || !strcmp(url, "/classify")) return generate(s, c, SRV_CLASSIFY, k);
        if (!strcmp(url, "/lora-adapters")) r = srv_lora_post(s, b, k->len, &e);
        else if (!strcmp(url, "/lora-adapters/load")) r = srv_lora_load(s, b, k->len, &e);
        else if (!strcmp(url, "/lora-adapters/unload")) r = srv_lora_unload(s, b, k->len, &e);
        else goto not_found;
        return r ? reply(c, 200, r, NULL) : reply_err(c, &e);
    }
not_found:
    srv_err_set(&e, 404, "invalid_request_error", "not_found", NULL, "no route for %s %.200s", method, url);
    return reply_err(c, &e);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *k = *con_cls;
    if (k) {
        free(k->body);
        free(k);
    }
    *con_cls = NULL;
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
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)o->port, NULL, NULL, handler, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout_s > 0 ? o->timeout_s : 0),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_seqs + o->queue + 64), MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
        MHD_OPTION_END);
    if (!d) {
        srv_free(s);
        return af_fail(AF_ERR_IO, "cannot listen on %s:%d (address in use or not available)", host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const int port = di ? di->port : o->port;
    if (o->log) {
        fprintf(o->log, "afinar serve: listening on http://%s:%d (max %d sequences, %d positions each, queue %d)\n", host,
                port, o->max_seqs, o->n_ctx, o->queue);
        fflush(o->log);
    }
    while (!(o->stop && *o->stop)) usleep(50000);
    const int n = srv_drain(s);
    if (o->log) {
        fprintf(o->log, "afinar serve: stopping: %d request(s) in flight finish first\n", n);
        fflush(o->log);
    }
    while (srv_busy(s) > 0) usleep(20000);
    MHD_stop_daemon(d);
    srv_free(s);
    if (o->log) {
        fprintf(o->log, "afinar serve: stopped\n");
        fflush(o->log);
    }
    return AF_OK;
}
