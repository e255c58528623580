/* decode.c — what `afinar serve` does per request around each sampled token (engine_internal.h):
 * the log-probabilities of "logprobs" / "top_logprobs" (log-softmax of the model's logits), the
 * mask of a "response_format" or forced tool call (grammar.c), the draw (af_sample), and the
 * other choices of an "n" > 1 request (jobs of their own with seed + i, sharing the prompt). */
#include "serve/engine_internal.h"

#include "core/core.h"
#include "serve/tools.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A new log-probability entry of j from logits [V]: the top ones; *lse = log Σ exp(logits) for the
 * chosen token's (set by the caller once sampled). 0 when out of memory. */
static int record_logprobs(srv_job *j, const float *logits, int32_t V, double *lse_out) {
    if (j->n_lp == j->cap_lp) {
        const int c = j->cap_lp ? 2 * j->cap_lp : 16;
        srv_lp *t = realloc(j->lp, sizeof *t * (size_t)c);
        if (!t) return 0;
        j->lp = t, j->cap_lp = c;
    }
    srv_lp *e = &j->lp[j->n_lp++];
    memset(e, 0, sizeof *e);
    float mx = logits[0];
    for (int32_t i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    *lse_out = lse;
    e->id = -1;
    const int32_t k = j->rq.top_logprobs;
    for (int32_t i = 0; i < V && k > 0; i++) { /* insertion into the k best (ties: the lower id first) */
        if (e->n_top == k && logits[i] <= logits[e->top_id[k - 1]]) continue;
        int32_t p = e->n_top < k ? e->n_top++ : k - 1;
        while (p > 0 && logits[e->top_id[p - 1]] < logits[i]) {
            e->top_id[p] = e->top_id[p - 1];
            p--;
        }
        e->top_id[p] = i;
    }
    for (int32_t t = 0; t < e->n_top; t++) e->top_lp[t] = (float)(logits[e->top_id[t]] - lse);
    return 1;
}

int srv_job_marked(const srv_job *j) {
    return j->rq.tools && j->rq.tools->native && j->rq.tools->choice != SRV_TOOL_NONE;
}

/* Choose j's next token from its logits row [V] (modified: the grammar's mask): the log-probs
 * when asked (from the model's distribution, before the mask), then af_sample. Returns the token, or
 * -1 with j->err set. Lock held. */
int32_t srv_next_token(srv *s, srv_job *j, float *logits, int32_t V) {
    double lse = 0;
    if (j->rq.logprobs && !record_logprobs(j, logits, V, &lse)) {
        srv_err_set(&j->err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    int32_t allowed = V;
    if (j->gs) allowed = srv_gstate_mask(j->gs, srv_job_marked(j) ? s->vocab_tools : s->vocab, logits, V);
    if (!allowed) {
        srv_err_set(&j->err, 500, "server_error", NULL, "response_format",
                    "no token of the vocabulary continues the required JSON here");
        return -1;
    }
    int32_t id = af_sample(logits, V, &j->sp, &j->rng);
    if (!isfinite(logits[id])) { /* a masked token (rounding at the tail of the draw): the best allowed */
        id = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[id]) id = i;
    }
    if (j->rq.logprobs) {
        if (af_token_is_eog(s->tok, id)) j->n_lp--; /* the end is no token of the text */
        else j->lp[j->n_lp - 1].id = id, j->lp[j->n_lp - 1].logprob = (float)(logits[id] - lse);
    }
    return id;
}

/* The matcher of a response_format (when any) and the other choices of an "n" > 1 request: jobs of
 * their own (seed + i, the same prompt, a shallow copy of the request). The lead gets a reference per
 * choice, dropped when that choice ends. 0 when out of memory. */
int srv_make_choices(srv_job *j) {
    if (j->rq.grammar && !(j->gs = srv_gstate_new(j->rq.grammar))) return 0;
    const int nk = j->rq.n_choices - 1;
    if (nk < 1) return 1;
    if (!(j->kids = calloc((size_t)nk, sizeof *j->kids))) return 0;
    for (int i = 0; i < nk; i++) {
        srv_job *k = calloc(1, sizeof *k);
        if (!k) return 0;
        j->kids[j->n_kids++] = k;
        k->rq = j->rq;
        k->lead = j;
        k->choice = i + 1;
        k->slot = -1;
        k->n_ad = j->n_ad;
        memcpy(k->ad, j->ad, sizeof k->ad);
        memcpy(k->scale, j->scale, sizeof k->scale);
        k->n_prompt = j->n_prompt;
        k->max_tokens = j->max_tokens;
        k->sp = j->sp;
        k->sp.seed = j->sp.seed + (uint64_t)(i + 1);
        k->rng = af_rng_seed(k->sp.seed);
        k->created = j->created;
        k->t0 = j->t0;
        if (!(k->prompt = malloc(sizeof(int32_t) * (size_t)j->n_prompt))) return 0;
        memcpy(k->prompt, j->prompt, sizeof(int32_t) * (size_t)j->n_prompt);
        if (j->rq.grammar && !(k->gs = srv_gstate_new(j->rq.grammar))) return 0;
    }
    j->refs += nk;
    return 1;
}

