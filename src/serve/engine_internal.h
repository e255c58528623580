/* engine_internal.h — the state of `afinar serve` shared by engine.c (scheduler, submission, setup)
 * and respond.c (responses, streams, the model and adapter endpoints). Every field is guarded by
 * srv.mu except those only the scheduler thread touches (marked). */
#ifndef AF_SERVE_ENGINE_INTERNAL_H
#define AF_SERVE_ENGINE_INTERNAL_H

#include "infer/session.h"
#include "serve/grammar.h"
#include "serve/metrics.h"
#include "serve/serve.h"

#include <pthread.h>

#define MAX_ADAPTERS 1024 /* adapters loaded over a server run (ids are never reused); at most
                            opts.max_adapters of them loaded at once */

typedef struct adapter {
    int used;              /* 0: a free entry (ids are never reused while the server runs) */
    int removed;           /* unloaded: no new requests; freed when refs reaches 0 */
    int refs;              /* jobs using it */
    uint64_t gen;          /* unique per load: keys the prompt cache of the slots */
    uint64_t last_use;     /* srv.use_clock at its load or at the last request that applied it (LRU) */
    char name[128], path[1024];
    float scale;           /* global scale (POST /lora-adapters; 0 at load): applied to requests that name no
                              model and give no "lora"; a request naming the adapter uses it, or 1 when 0 */
    af_param_layout lay;
    float *P;
    af_classifier *cls;    /* with a classification head: for /v1/classify; else NULL */
} adapter;

/* The log-probabilities of one generated token (the model's distribution before sampling
 * filters and the grammar's mask: log-softmax of the logits). */
typedef struct srv_lp {
    int32_t id;
    float logprob;
    size_t end;                /* bytes of the job's text once this token was appended */
    int32_t n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
} srv_lp;

struct srv_job {
    srv_req rq;                /* a choice > 0 of an "n" request: a shallow copy of its lead's (not freed) */
    int refs;
    int32_t *prompt;
    int n_prompt, n_done;      /* prompt tokens, and those in the slot's cache */
    int64_t max_tokens;
    int n_ad;                  /* adapters applied together (0: the base model); classify: 1, its head's */
    int ad[SRV_MAX_LORA];      /* their ids, ascending */
    float scale[SRV_MAX_LORA]; /* their scales (non-zero; times the adapter's alpha/r in the session) */
    af_sampling sp;
    uint64_t rng;
    int slot;                  /* -1 while queued */
    int phase;                 /* 0 queued, 1 prompt, 2 decoding, 3 ended */
    int32_t pending;           /* decoding: the token to evaluate next */
    int piece;                 /* prompt: tokens of the piece in the scheduler's current pass */
    int n_passes;              /* passes that evaluated a piece of the prompt (the log line) */
    int n_gen;                 /* tokens generated (EOG excluded) */
    char *text;                /* generated text */
    size_t len, cap, sent;     /* sent: bytes already handed to the stream */
    const char *finish;        /* "stop" | "length" when ended normally */
    srv_err err;               /* err.status != 0: failed */
    volatile int cancel;
    char *result;              /* classify: the JSON body */
    int stream_started, stream_done;
    long created;
    uint64_t id;
    double t0, t_first;        /* submitted; first token sampled (0: not yet) */
    srv_lp *lp;                /* "logprobs": one per generated token [n_lp] */
    int n_lp, cap_lp, lp_sent; /* lp_sent: entries already streamed */
    int fin_sent;              /* streaming: the finish chunk of this choice was sent */
    srv_gstate *gs;            /* response_format: the matcher of the text so far (NULL: free text) */
    struct srv_tool_stream *ts; /* a streamed chat with tools: what of the calls was sent (tools.h) */
    int choice;                /* index in "choices" */
    srv_job *lead;             /* choices > 0: the request's first choice (holds a reference to it) */
    srv_job **kids;            /* the lead: choices 1 .. n_kids (owned: freed with the lead) */
    int n_kids;
    float *emb;                /* embeddings: [n_inputs, hidden] */
    int64_t emb_tokens;
};

typedef struct slot {
    af_session *s;
    int busy;
    int n_key;                 /* the adapters of the cached positions: n_key generations and scales
                                  (0: the base model; -1: none can match, the cache is reset) */
    uint64_t gen[SRV_MAX_LORA];
    float scale[SRV_MAX_LORA];
} slot;

struct srv {
    af_server_opts o;
    af_ctx *own_ctx;
    af_model *m;
    const af_tokenizer *tok;
    char model_id[256];
    adapter ad[MAX_ADAPTERS];
    int n_ad;
    uint64_t next_gen;
    uint64_t use_clock;
    slot *slots;
    int n_slots;
    float *logits;             /* [max_seqs + 1, vocab] */
    int32_t *toks;             /* [batch_tokens + max_seqs] the token ids of one pass (scheduler thread) */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t th;
    int th_started, quit, draining;
    srv_job **queue;           /* FIFO [o.queue] */
    int nq;
    srv_job **active;          /* [n_slots] */
    int na;
    uint64_t next_id;
    srv_vocab *vocab;          /* response_format masks: the tokens' bytes (made at the first use) */
    srv_vocab *vocab_tools;    /* forced tool calls in the model's own format: the same with the control
                                  tokens that are tool-call markers rendered (srv_tools_marker) */
    af_session *emb;           /* embeddings: a session of their own (made at the first use; scheduler only) */
    srv_metrics met;           /* GET /metrics */
};

/* engine.c: seconds on the monotonic clock. */
double srv_now(void);
/* engine.c: free a job, its choices and its request (its last reference is gone). */
void srv_job_free(srv_job *j);
/* admit.c: drop a job's references to its adapters; an unloaded one is freed with its last (lock held). */
void srv_adapters_unref(srv *s, const srv_job *j);

/* admit.c: load adapter `path` as model id `name` into the next entry (lock held, or before the
 * scheduler starts). With opts.max_adapters loaded already: evict = 1 unloads the least recently
 * used one that no request is using first (*evicted = its id, else -1); evict = 0, or all in use:
 * AF_ERR_RANGE, nothing changes. Free an entry's weights. */
af_status srv_adapter_load(srv *s, const char *name, const char *path, int evict, int *id, int *evicted);
/* admit.c: unload adapter `id` (lock held): no new request can name it, its weights are freed when the last
 * request using it ends, no slot reuses positions computed with it. */
void srv_adapter_unload(srv *s, int id);
void srv_adapter_free(adapter *a);
/* An adapter is unloaded: no free slot's cached positions that used generation `gen` are reused
 * (lock held). */
void srv_slots_forget(srv *s, uint64_t gen);

/* decode.c: 1 when job j's generated text keeps the tool-call marker tokens (srv_tools_marker): tools
 * on (not "none") in the model's own format (srv_tools_bind). */
int srv_job_marked(const srv_job *j);
/* decode.c: choose j's next token from its logits row [V] (modified in place by the grammar's
 * mask): the log-probabilities when asked (from the model's distribution, before the mask), then
 * af_sample. Returns the token, or -1 with j->err set. Lock held. */
int32_t srv_next_token(srv *s, srv_job *j, float *logits, int32_t V);
/* decode.c: the matcher of j's response_format (when any) and the other choices of an "n" > 1
 * request: jobs of their own (seed + i, a copy of the prompt, a shallow copy of the request; each
 * holds a reference to j). 0 when out of memory (j->kids then holds those made: freed with j). */
int srv_make_choices(srv_job *j);

/* embed.c: run an embeddings job (scheduler thread, lock NOT held): fills j->emb, j->emb_tokens or
 * j->err. The JSON of its answer (lock held): malloc'ed, NULL when out of memory. */
void srv_embed_run(srv *s, srv_job *j);
char *srv_embed_json(srv *s, const srv_job *j);

#endif
