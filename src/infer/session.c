/* session.c — an inference session: KV cache for one sequence and batched evaluation. */
#include "model/model.h"

#include "kernels/matmul.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

#define AF_EVAL_CHUNK 256 /* tokens per forward chunk: bounds scratch memory for long prompts */

struct af_session {
    const af_model *m;
    int64_t n_ctx, n_past, kv_dim;
    float *k_cache, *v_cache; /* [layers][n_ctx][kv_dim] */
    af_fwd_scratch s;
    float *logit_tmp; /* [vocab] when only the last logits are requested of a multi-chunk eval */
};

af_status af_session_new(const af_model *m, int n_ctx, af_session **out) {
    if (!m || !out) return af_fail(AF_ERR_INVALID_ARG, "af_session_new: NULL argument");
    *out = NULL;
    const af_model_config *c = &m->cfg;
    if (n_ctx <= 0) n_ctx = c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096;
    af_session *s = af_calloc(1, sizeof *s);
    if (!s) return af_fail(AF_ERR_NOMEM, "out of memory for session");
    s->m = m;
    s->n_ctx = n_ctx;
    s->kv_dim = (int64_t)c->num_key_value_heads * c->head_dim;
    size_t n_kv, bytes;
    if (!af_mul_ok((size_t)c->num_hidden_layers * (size_t)s->kv_dim, (size_t)n_ctx, &n_kv) ||
        !af_mul_ok(n_kv, sizeof(float), &bytes)) {
        free(s);
        return af_fail(AF_ERR_INVALID_ARG, "KV cache for n_ctx %d overflows", n_ctx);
    }
    s->k_cache = af_malloc_aligned(bytes);
    s->v_cache = af_malloc_aligned(bytes);
    af_status st = (s->k_cache && s->v_cache)
                       ? af_fwd_scratch_init(&s->s, m, AF_EVAL_CHUNK)
                       : af_fail(AF_ERR_NOMEM, "out of memory for a KV cache of %d positions (%zu MiB)", n_ctx,
                                 2 * bytes >> 20);
    if (st == AF_OK) {
        s->logit_tmp = af_malloc(sizeof(float) * (size_t)c->vocab_size);
        if (!s->logit_tmp) st = af_fail(AF_ERR_NOMEM, "out of memory");
    }
    if (st != AF_OK) {
        af_session_free(s);
        return st;
    }
    *out = s;
    return AF_OK;
}

void af_session_free(af_session *s) {
    if (!s) return;
    af_free_aligned(s->k_cache);
    af_free_aligned(s->v_cache);
    af_fwd_scratch_free(&s->s);
    free(s->logit_tmp);
    free(s);
}

void af_session_reset(af_session *s) { s->n_past = 0; }

int af_session_n_past(const af_session *s) { return (int)s->n_past; }

af_status af_session_eval(af_session *s, const int32_t *tokens, int n, float *logits, float *all_logits) {
    const af_model *m = s->m;
    const int64_t V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    if (n <= 0 || !tokens) return af_fail(AF_ERR_INVALID_ARG, "af_session_eval: no tokens");
    if (s->n_past + n > s->n_ctx)
        return af_fail(AF_ERR_RANGE, "context full: %lld cached + %d new tokens > n_ctx %lld", (long long)s->n_past,
                       n, (long long)s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return af_fail(AF_ERR_RANGE, "token id %d at index %d outside the vocabulary [0, %lld)", tokens[i], i,
                           (long long)V);
    for (int done = 0; done < n;) {
        int64_t chunk = n - done < AF_EVAL_CHUNK ? n - done : AF_EVAL_CHUNK;
        af_forward_tokens(m, &s->s, tokens + done, chunk, s->n_past, s->k_cache, s->v_cache, s->n_ctx);
        s->n_past += chunk;
        if (all_logits) {
            af_forward_logits(m, all_logits + (size_t)done * (size_t)V, s->s.x, chunk);
            if (logits && done + chunk == n)
                memcpy(logits, all_logits + (size_t)(n - 1) * (size_t)V, sizeof(float) * (size_t)V);
        } else if (logits && done + chunk == n) {
            af_forward_logits(m, logits, s->s.x + (chunk - 1) * H, 1);
        }
        done += (int)chunk;
    }
    return AF_OK;
}
