/* session.c — an inference session: KV cache for one sequence and batched evaluation through the
 * layer walk (model/transformer.h), optionally with a LoRA adapter applied unmerged. */
#include "infer/session.h"

#include "kernels/backend.h"
#include "lora/adapter_io.h"
#include "model/transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AF_EVAL_CHUNK 256 /* tokens per forward chunk: bounds scratch memory for long prompts */

/* Device memory (the model's context, kernels/backend.h): the KV caches, the forward state, the
 * logits of a chunk and the adapter's parameters; the caller's token ids and logits are host
 * arrays, uploaded / downloaded through the table. */
struct af_session {
    const af_model *m;
    const af_ctx *ctx;        /* the model's context (borrowed) */
    int64_t n_ctx, n_past, kv_dim;
    float **k_cache, **v_cache; /* host arrays [layers] of device buffers [n_ctx][kv_dim] */
    af_devmem kv;             /* their memory */
    af_tf_infer s;
    /* adapter (P == NULL: none): a device copy of the caller's parameters (af_session_set_lora) or
     * of an adapter directory (af_session_load_adapter) */
    const float *P;
    const af_param_layout *lay;
    float lora_scale;       /* the correction's scale s (adapter scale times the caller's factor) */
    float *dev_P;           /* device copy of the parameters [lay->n_total] */
    af_param_layout own_lay;
    int has_own_lay;
    float *logits_dev;      /* device logits [logit_rows, vocab] (NULL on a host-memory device) */
    int64_t logit_rows;
};

/* Per-layer KV caches, each a region of its own (so no allocation exceeds the device's limit). */
static void kv_plan(af_carver *cv, af_session *s, int32_t L) {
    for (int32_t l = 0; l < L; l++) {
        float *k = af_carve(cv, s->n_ctx * s->kv_dim), *v = af_carve(cv, s->n_ctx * s->kv_dim);
        if (s->k_cache) s->k_cache[l] = k, s->v_cache[l] = v;
    }
}

static size_t dev_limit(const af_ctx *ctx) {
    const uint64_t m = ctx->dev->info.max_alloc;
    return m == UINT64_MAX ? 0 : (size_t)m;
}

af_status af_session_new(const af_model *m, int n_ctx, af_session **out) {
    if (!m || !out) return af_fail(AF_ERR_INVALID_ARG, "af_session_new: NULL argument");
    *out = NULL;
    const af_model_config *c = &m->cfg;
    if (n_ctx <= 0) n_ctx = c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096;
    af_session *s = af_calloc(1, sizeof *s);
    if (!s) return af_fail(AF_ERR_NOMEM, "out of memory for session");
    s->m = m;
    s->ctx = m->ctx;
    s->n_ctx = n_ctx;
    s->kv_dim = (int64_t)c->num_key_value_heads * c->head_dim;
    size_t n_kv, bytes;
    if (!af_mul_ok((size_t)c->num_hidden_layers * (size_t)s->kv_dim, (size_t)n_ctx, &n_kv) ||
        !af_mul_ok(n_kv, sizeof(float), &bytes)) {
        free(s);
        return af_fail(AF_ERR_INVALID_ARG, "KV cache for n_ctx %d overflows", n_ctx);
    }
    const int32_t L = c->num_hidden_layers;
    af_carver cv;
    af_carver_count(&cv, dev_limit(s->ctx));
    kv_plan(&cv, s, L);
    if (!s->ctx->dev->info.host_memory) { /* the memory guard: KV cache + forward state + logits must fit */
        af_carver fs;
        af_carver_count(&fs, 0);
        af_tf_infer tmp;
        memset(&tmp, 0, sizeof tmp);
        af_tf_carve_acts(&fs, &tmp.S, m, NULL, AF_EVAL_CHUNK, AF_TF_INFER, 0);
        af_tf_carve_scratch(&fs, &tmp.w, m, NULL, AF_EVAL_CHUNK, AF_TF_INFER, 0);
        af_carver_done(&fs);
        const uint64_t need = cv.used + fs.used + (uint64_t)AF_EVAL_CHUNK * (uint64_t)(c->hidden_size + c->vocab_size) * 4;
        uint64_t free_b = 0, total_b = 0;
        af_be(s->ctx)->memory(s->ctx, &free_b, &total_b);
        if (need > free_b) {
            af_carver_done(&cv);
            char b1[32], b2[32], b3[32];
            af_status st = af_fail(AF_ERR_NOMEM, "a session of %d positions needs about %s on device %s (KV cache %s) "
                                                 "but it has %s free: use a smaller context (--ctx), or --device cpu",
                                   n_ctx, af_fmt_bytes(b1, sizeof b1, need), af_ctx_device(s->ctx),
                                   af_fmt_bytes(b2, sizeof b2, cv.used), af_fmt_bytes(b3, sizeof b3, free_b));
            free(s);
            return st;
        }
    }
    s->k_cache = af_calloc((size_t)L + 1, sizeof(float *));
    s->v_cache = af_calloc((size_t)L + 1, sizeof(float *));
    af_status st = s->k_cache && s->v_cache ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory for session");
    if (st == AF_OK) {
        st = af_carver_alloc(&cv, s->ctx, &s->kv);
        if (st != AF_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", af_last_error());
            st = af_fail(st, "a KV cache of %d positions (%zu MiB): %s", n_ctx, 2 * bytes >> 20, msg);
        }
    }
    if (st == AF_OK) kv_plan(&cv, s, L);
    else af_carver_done(&cv);
    if (st == AF_OK) st = af_tf_infer_init(&s->s, s->ctx, m, NULL, AF_EVAL_CHUNK);
    if (st == AF_OK && !s->ctx->dev->info.host_memory) {
        const uint64_t lim = s->ctx->dev->info.max_alloc / (sizeof(float) * (uint64_t)c->vocab_size);
        s->logit_rows = lim < 1 ? 1 : lim > AF_EVAL_CHUNK ? AF_EVAL_CHUNK : (int64_t)lim;
        s->logits_dev = af_be(s->ctx)->alloc(s->ctx, sizeof(float) * (size_t)s->logit_rows * (size_t)c->vocab_size);
        if (!s->logits_dev) st = AF_ERR_NOMEM;
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
    af_devmem_free(&s->kv);
    free(s->k_cache);
    free(s->v_cache);
    af_tf_infer_free(&s->s);
    af_be(s->ctx)->free(s->ctx, s->dev_P);
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    af_be(s->ctx)->free(s->ctx, s->logits_dev);
    free(s);
}

void af_session_reset(af_session *s) { s->n_past = 0; }

int af_session_n_past(const af_session *s) { return (int)s->n_past; }

const af_model *af_session_model(const af_session *s) { return s ? s->m : NULL; }

int64_t af_session_n_ctx(const af_session *s) { return s ? s->n_ctx : 0; }

/* LM head of rows x [n, H] into the caller's host logits [n, V]: written in place on a host-memory
 * device; else through the device buffer, logit_rows rows at a time, and downloaded. */
static af_status head_rows(af_session *s, float *logits, float *x, int64_t n) {
    const af_ctx *ctx = s->ctx;
    const af_model *m = s->m;
    const int64_t V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    if (ctx->dev->info.host_memory) {
        af_lm_head_forward(ctx, m, logits, x, n);
        return AF_OK;
    }
    const int64_t parts = (n + s->logit_rows - 1) / s->logit_rows;
    for (int64_t p = 0; p < parts; p++) { /* equal parts: never a lone small tail */
        const int64_t r0 = n * p / parts, r1 = n * (p + 1) / parts;
        af_lm_head_forward(ctx, m, s->logits_dev, x + r0 * H, r1 - r0);
        AF_TRY(af_be(ctx)->download(ctx, logits + r0 * V, s->logits_dev, sizeof(float) * (size_t)((r1 - r0) * V)));
    }
    /* a device that computes NaN/Inf (the CPU would be needed to tell a model that overflows): a
     * device failure, so that --device auto goes on on the CPU */
    for (int64_t i = 0; i < n * V; i++)
        if (!isfinite(logits[i]))
            return af_fail(AF_ERR_DEVICE, "device %s (%s) computed non-finite logits (position %lld, token id %lld: "
                                          "%g); run with --device cpu to compare with the CPU",
                           af_ctx_device(ctx), ctx->dev->info.name, (long long)(s->n_past - n + i / V),
                           (long long)(i % V), (double)logits[i]);
    return AF_OK;
}

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
        AF_TRY(af_tf_infer_forward(s->ctx, m, &s->s, s->P, s->lay, s->lora_scale, tokens + done, chunk, s->n_past,
                                   s->k_cache, s->v_cache, s->n_ctx));
        s->n_past += chunk;
        if (all_logits) {
            AF_TRY(head_rows(s, all_logits + (size_t)done * (size_t)V, s->s.x, chunk));
            if (logits && done + chunk == n)
                memcpy(logits, all_logits + (size_t)(n - 1) * (size_t)V, sizeof(float) * (size_t)V);
        } else if (logits && done + chunk == n) {
            AF_TRY(head_rows(s, logits, s->s.x + (chunk - 1) * H, 1));
        }
        done += (int)chunk;
    }
    return af_be(s->ctx)->sync(s->ctx);
}

/* Drop the adapter's device copy and the owned layout. */
static void drop_adapter(af_session *s) {
    af_be(s->ctx)->free(s->ctx, s->dev_P);
    s->dev_P = NULL;
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    s->has_own_lay = 0;
}

af_status af_session_set_lora(af_session *s, const float *P, const af_param_layout *lay, float scale) {
    if (!s) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: NULL session");
    if (P && (!lay || lay->n_layers != s->m->cfg.num_hidden_layers || lay->lora.r < 1))
        return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: the layout does not match the model");
    if (!isfinite(scale)) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: scale is not finite");
    const int on = P && scale != 0;
    const af_backend *be = af_be(s->ctx);
    float *dp = NULL;
    if (on) {
        dp = be->alloc(s->ctx, sizeof(float) * (size_t)lay->n_total);
        if (!dp) return AF_ERR_NOMEM;
        af_status st = be->upload(s->ctx, dp, P, sizeof(float) * (size_t)lay->n_total);
        if (st != AF_OK) {
            be->free(s->ctx, dp);
            return st;
        }
    }
    af_tf_infer ns;
    af_status st = af_tf_infer_init(&ns, s->ctx, s->m, on ? lay : NULL, AF_EVAL_CHUNK);
    if (st != AF_OK) {
        be->free(s->ctx, dp);
        return st;
    }
    af_tf_infer_free(&s->s);
    s->s = ns;
    drop_adapter(s);
    s->dev_P = dp;
    s->P = dp;
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
    free(P);
    if (st == AF_OK) {
        s->own_lay = lay;
        s->has_own_lay = 1;
        if (s->lay) s->lay = &s->own_lay;
        return AF_OK;
    }
    if (have_lay) af_param_layout_free(&lay);
    return st;
}
