/* session.c — an inference session: KV cache for one sequence and batched evaluation through the
 * layer walk (model/transformer.h), optionally with a LoRA adapter applied unmerged. */
#include "infer/session.h"

#include "lora/adapter_io.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AF_EVAL_CHUNK 256 /* tokens per forward chunk: bounds scratch memory for long prompts */

struct af_session {
    const af_model *m;
    int64_t n_ctx, n_past, kv_dim;
    float *k_cache, *v_cache; /* [n_ctx · kv_dim], kv_dim = m->kv_floats: per layer a [n_ctx][kvd(l)] slot (af_tf_kv_layer) */
    af_tf_infer s;
    /* adapter (P == NULL: none): borrowed (af_session_set_lora) or owned (af_session_load_adapter) */
    const float *P;
    const af_param_layout *lay;
    float lora_scale;       /* the correction's scale s (adapter scale times the caller's factor) */
    float *own_P;           /* owned copies */
    af_param_layout own_lay;
    int has_own_lay;
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
    s->kv_dim = m->kv_floats; /* Σ over the layers with their own K/V of n_kv_head·head_dim */
    size_t n_kv, bytes;
    if (!af_mul_ok((size_t)s->kv_dim, (size_t)n_ctx, &n_kv) ||
        !af_mul_ok(n_kv, sizeof(float), &bytes)) {
        free(s);
        return af_fail(AF_ERR_INVALID_ARG, "KV cache for n_ctx %d overflows", n_ctx);
    }
    s->k_cache = af_malloc_aligned(bytes);
    s->v_cache = af_malloc_aligned(bytes);
    af_status st = (s->k_cache && s->v_cache)
                       ? af_tf_infer_init(&s->s, m, NULL, AF_EVAL_CHUNK)
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
    af_tf_infer_free(&s->s);
    free(s->own_P);
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    free(s->logit_tmp);
    free(s);
}

void af_session_reset(af_session *s) { s->n_past = 0; }

int af_session_n_past(const af_session *s) { return (int)s->n_past; }

const af_model *af_session_model(const af_session *s) { return s ? s->m : NULL; }

int64_t af_session_n_ctx(const af_session *s) { return s ? s->n_ctx : 0; }

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
        af_tf_infer_forward(m->ctx, m, &s->s, s->P, s->lay, s->lora_scale, tokens + done, chunk, s->n_past, s->k_cache,
                            s->v_cache, s->n_ctx);
        s->n_past += chunk;
        if (all_logits) {
            af_lm_head_forward(m->ctx, m, all_logits + (size_t)done * (size_t)V, s->s.x, chunk);
            if (logits && done + chunk == n)
                memcpy(logits, all_logits + (size_t)(n - 1) * (size_t)V, sizeof(float) * (size_t)V);
        } else if (logits && done + chunk == n) {
            af_lm_head_forward(m->ctx, m, logits, s->s.x + (chunk - 1) * H, 1);
        }
        done += (int)chunk;
    }
    return AF_OK;
}

/* Drop the owned adapter copies (not the borrowed ones). */
static void drop_owned(af_session *s) {
    free(s->own_P);
    s->own_P = NULL;
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    s->has_own_lay = 0;
}

af_status af_session_set_lora(af_session *s, const float *P, const af_param_layout *lay, float scale) {
    if (!s) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: NULL session");
    if (P && (!lay || lay->n_layers != s->m->cfg.num_hidden_layers || lay->lora.r < 1))
        return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: the layout does not match the model");
    if (!isfinite(scale)) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: scale is not finite");
    const int on = P && scale != 0;
    af_tf_infer ns;
    AF_TRY(af_tf_infer_init(&ns, s->m, on ? lay : NULL, AF_EVAL_CHUNK));
    af_tf_infer_free(&s->s);
    s->s = ns;
    if (!(P && P == s->own_P)) drop_owned(s);
    s->P = on ? P : NULL;
    s->lay = on ? lay : NULL;
    s->lora_scale = on ? scale : 0;
    return AF_OK;
}

af_status af_session_load_adapter(af_session *s, const char *dir, float scale) {
    if (!s || !dir) return af_fail(AF_ERR_INVALID_ARG, "af_session_load_adapter: NULL argument");
    if (!isfinite(scale)) return af_fail(AF_ERR_INVALID_ARG, "af_session_load_adapter: scale is not finite");
    const af_model_config *mc = &s->m->cfg;
    af_adapter_info info;
    AF_TRY(af_adapter_read_info(dir, &info));
    af_param_layout lay;
    memset(&lay, 0, sizeof lay);
    float *P = NULL;
    af_status st = AF_OK;
    if (info.n_layers > mc->num_hidden_layers)
        st = af_fail(AF_ERR_INVALID_ARG, "%s: the adapter has layer %d but the model only %d layers", dir,
                     info.n_layers - 1, mc->num_hidden_layers);
    int have_lay = 0;
    if (st == AF_OK) {
        /* a classification head in the file is not used by generation */
        st = af_adapter_load_for_model(dir, &info, s->m, 0.0f, 0, AF_ADAPTER_IGNORE_HEAD, &lay, &P);
        have_lay = st == AF_OK;
    }
    af_adapter_info_free(&info);
    if (st == AF_OK) st = af_session_set_lora(s, P, &lay, scale * lay.scale); /* drops the old copies */
    if (st == AF_OK) {
        s->own_lay = lay;
        s->has_own_lay = 1;
        s->own_P = P;
        if (s->lay) s->lay = &s->own_lay;
        return AF_OK;
    }
    free(P);
    if (have_lay) af_param_layout_free(&lay);
    return st;
}
