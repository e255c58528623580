/*
 * serve.h — `afinar serve`: an OpenAI-compatible HTTP server (internal; the public entry point is
 * af_server_run in afinar.h).
 *
 *   request.c  the JSON request parser and the response / error builders (cJSON); no I/O, fuzzed
 *              (tests/fuzz/fuzz_serve_req.c)
 *   engine.c   the model, the adapters, the sequence slots and the scheduler thread: continuous
 *              batching with chunked prefill (af_session_eval_multi), the prompt cache (af_session_keep_prefix),
 *              sampling, stop strings, classification (af_classifier_*)
 *   respond.c  the JSON of finished requests and the stream events (logprobs, n choices)
 *   decode.c   per request around each token: logprobs, the grammar's mask, the draw, the n choices
 *   grammar.c  response_format: JSON-schema subset compiled to a byte-level matcher (constrained decoding)
 *   embed.c    POST /v1/embeddings (mean-pooled, L2-normalised last hidden state)
 *   metrics.c  GET /metrics (Prometheus text format)
 *   tools.c    "tools" / "tool_choice": the tools' prompt, the forced call's grammar, tool_calls
 *   http.c     libmicrohttpd glue (built when the Makefile finds libmicrohttpd; http_none.c else)
 */
#ifndef AF_SERVE_H
#define AF_SERVE_H

#include "afinar.h"
#include "afinar_app.h"
#include "formats/lm_jsonl.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1, SRV_CLASSIFY = 2, SRV_EMBED = 3 } srv_kind;

#define SRV_MAX_STOP 4
#define SRV_MAX_LORA 16
#define SRV_MAX_CHOICES 16   /* "n" */
#define SRV_MAX_TOP_LOGPROBS 20 /* chat "top_logprobs" (OpenAI's limit; completions "logprobs": 5) */

typedef struct srv_grammar srv_grammar; /* grammar.c */
typedef struct srv_tools srv_tools;     /* tools.c */

/* A parsed request (srv_req_parse). Strings are owned by the request (srv_req_free). */
typedef struct srv_req {
    srv_kind kind;
    char *model;              /* "model" (NULL: the base model) */
    af_chat_msg *msgs;        /* chat: [n_msgs] (content owned in bufs) */
    int32_t n_msgs;
    char *prompt;             /* completion: "prompt" (a string, or the one string of a list) */
    char **inputs;            /* classify: "input" texts [n_inputs] */
    int32_t n_inputs;
    int stream;               /* "stream" */
    int include_usage;        /* "stream_options": {"include_usage": true} */
    double temperature;       /* "temperature" [0, 2] (default: af_sampling_default's, as generate) */
    double top_p;             /* "top_p" (0, 1] (default: af_sampling_default's) */
    int32_t top_k;            /* "top_k" >= 0 (llama.cpp extension; 0 = off; default: af_sampling_default's) */
    int64_t max_tokens;       /* "max_tokens" / "max_completion_tokens" >= 1; -1: not given */
    char *stop[SRV_MAX_STOP]; /* "stop": a string or up to 4 strings (non-empty) */
    int32_t n_stop;
    int has_seed;
    uint64_t seed;            /* "seed" (integer >= 0) */
    int32_t n_lora;           /* "lora": [{"id": N, "scale": S}] (llama.cpp) */
    int32_t lora_id[SRV_MAX_LORA];
    double lora_scale[SRV_MAX_LORA];
    char **bufs;              /* owned strings of msgs, msgx and calls */
    int32_t n_bufs, cap_bufs;
    af_chat_msg_x *msgx;      /* chat: [n_msgs] each message's tool calls / tool_call_id (NULL: the request
                                 has no assistant "tool_calls" and no "tool" message); owned */
    af_chat_call *calls;      /* the tool calls of all messages (msgx[i].calls point into it); owned */
    int32_t n_choices;        /* "n" [1, SRV_MAX_CHOICES] (default 1) */
    int logprobs;             /* chat "logprobs": true, or completions "logprobs": K given */
    int32_t top_logprobs;     /* chat "top_logprobs" [0, 20]; completions "logprobs" K [0, 5] */
    srv_grammar *grammar;     /* "response_format" json_object / json_schema (NULL: free text); owned */
    int embed_base64;         /* embeddings "encoding_format": "base64" (else "float") */
    srv_tools *tools;         /* chat "tools" / "tool_choice" (NULL: none); owned */
} srv_req;

/* (srv_err_set returns 0, for "return srv_err_set(...)".) An error of a request: HTTP status, OpenAI error type and code, the parameter, the message. */
typedef struct srv_err {
    int status;               /* 400, 401, 404, 413, 429, 500, 503 */
    const char *type;         /* "invalid_request_error", "not_found_error", "rate_limit_error", "server_error"
                                 (401: "invalid_request_error", code "invalid_api_key") */
    const char *code;         /* NULL or a code ("model_not_found", "context_length_exceeded", ...) */
    char param[64];           /* "" when none */
    char message[512];
} srv_err;

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Parse a request body body[0..len) for `kind` into *out (zeroed first; free with srv_req_free,
 * also after an error). Checks every field's type and range; unknown fields are ignored (as
 * OpenAI's server ignores what it does not use). Returns 0 and fills *err (status 400) on error. */
int srv_req_parse(srv_kind kind, const char *body, size_t len, srv_req *out, srv_err *err);
void srv_req_free(srv_req *r);

/* The OpenAI error object {"error": {"message", "type", "param", "code"}}; malloc'ed (NULL: out of
 * memory). */
char *srv_err_json(const srv_err *e);

/* JSON string literal of s[0..len) (quotes included, UTF-8 kept, control characters escaped);
 * malloc'ed. */
char *srv_json_string(const char *s, size_t len);

/* A float as the double whose shortest decimal form reads back as that float (printf "%.9g"), so
 * that cJSON prints it in at most 9 significant digits, not the 17 of its exact double value. */
double srv_json_float(float f);

/* Bytes of s[0..len) that end on a whole UTF-8 character (an incomplete sequence at the end is
 * held back until its continuation bytes arrive). */
size_t srv_utf8_complete(const char *s, size_t len);

/* ---- engine.c: the server state shared by the HTTP threads and the scheduler thread ---- */
typedef struct srv srv;
typedef struct srv_job srv_job;

/* Load the model and the adapters, start the scheduler thread. NULL + message on error. */
af_status srv_new(const af_server_opts *o, srv **out);
/* Stop the scheduler (after the jobs in flight end) and free everything. */
void srv_free(srv *s);
/* Refuse new jobs (503) from now on; returns the number of jobs still queued or running. */
int srv_drain(srv *s);
int srv_busy(srv *s);

/* Hand a parsed request to the scheduler (the request moves into the job, also on error). On success
 * *out is a job with two references (the caller's and the scheduler's). 0 + *err on error. */
int srv_submit(srv *s, srv_req *rq, srv_job **out, srv_err *err);
/* Wait up to timeout_ms for the scheduler's next change (a token, a job ended or failed). */
void srv_wait_change(srv *s, int timeout_ms);
/* Wait up to timeout_ms for the job to end (0: just look). 1: ended. */
int srv_job_wait(srv *s, srv_job *j, int timeout_ms);
/* The job's result when it ended: 200 and the JSON body (malloc'ed), or an error status and the
 * error object. */
char *srv_job_result(srv *s, srv_job *j, int *status);
/* Streaming: server-sent events produced since the last call, appended to *buf (malloc'ed, *len);
 * waits up to timeout_ms for something new. Returns 1 while the stream goes on, 0 once its last
 * event ("data: [DONE]") is in *buf. */
int srv_job_events(srv *s, srv_job *j, int timeout_ms, char **buf, size_t *len);
/* The client went away: stop generating for it. */
void srv_job_cancel(srv *s, srv_job *j);
/* Drop the caller's reference. */
void srv_job_release(srv *s, srv_job *j);

/* GET /metrics: the Prometheus text (metrics.c; malloc'ed, NULL when out of memory). */
char *srv_metrics_text(srv *s);
/* Count a request refused before it reached the scheduler (parse or submit error) in /metrics. */
void srv_count_error(srv *s, srv_kind kind, int status);
/* GET /v1/models, GET /lora-adapters, GET /health bodies (malloc'ed). */
char *srv_models_json(srv *s);
char *srv_lora_json(srv *s);
/* POST /lora-adapters (scales), POST /lora-adapters/load ({"name","path"}), /lora-adapters/unload
 * ({"id"} or {"name"}): the response body (malloc'ed) or NULL + *err. */
char *srv_lora_post(srv *s, const char *body, size_t len, srv_err *err);
char *srv_lora_load(srv *s, const char *body, size_t len, srv_err *err);
char *srv_lora_unload(srv *s, const char *body, size_t len, srv_err *err);
/* The log stream (NULL: none) and the options. */
FILE *srv_log(srv *s);
const af_server_opts *srv_opts(srv *s);

/* ---- web.c: the web page (embedded assets) and the read-only API over --runs DIR ---- */
typedef struct srv_web_reply {
    int status;                /* 200 when handled without error */
    const unsigned char *data; /* an embedded asset (static; not freed), or NULL */
    size_t len;                /* bytes of data */
    const char *type;          /* its content type */
    char *body;                /* else a JSON body (malloc'ed; the caller frees or hands it on) */
} srv_web_reply;

/* Route GET /, /index.html, /app.js, /style.css and /api/runs[/NAME[/metrics|/load]] (see web.c).
 * `from_arg` is the "from" query argument (NULL: none). Returns 0 when `url` is none of these (the
 * caller goes on routing), 1 when handled: *out holds the asset or body, or *err the error (its
 * status >= 400 and out->body NULL). */
int srv_web_route(srv *s, const char *method, const char *url, const char *from_arg, const char *body, size_t len,
                  srv_web_reply *out, srv_err *err);

#endif /* AF_SERVE_H */
