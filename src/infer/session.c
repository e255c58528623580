/* session.c — an inference session: KV cache for one sequence and batched evaluation through the
 * layer walk (model/transformer.h), optionally with a LoRA adapter applied unmerged. */
#include "infer/session.h"

#include "lora/adapter_io.h"
#include "model/transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-layer KV caches, each a region of its own (so no allocation exceeds the device's limit): a
 * layer with its own K/V gets [n_ctx][kvd(l)], a KV-sharing layer (gemma4) its kv_src's. */
static void kv_plan(af_carver *cv, af_session *s, int32_t L) {
    for (int32_t l = 0; l < L; l++) {
        const af_layer *Ly = &s->m->layers[l];
        if (Ly->kv_src != l) {
            if (s->k_cache) s->k_cache[l] = s->k_cache[Ly->kv_src], s->v_cache[l] = s->v_cache[Ly->kv_src];
            continue;
        }
        const int64_t kvd = (int64_t)Ly->n_kv_head * Ly->head_dim;
        float *k = af_carve(cv, s->n_ctx * kvd), *v = af_carve(cv, s->n_ctx * kvd);
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
    s->kv_dim = m->kv_floats; /* Σ over the layers with their own K/V of n_kv_head·head_dim */
    size_t n_kv, bytes;
    if (!af_mul_ok((size_t)s->kv_dim, (size_t)n_ctx, &n_kv) ||
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
    if (st == AF_OK) {
        s->toks = af_malloc(sizeof(int32_t) * (size_t)n_ctx);
        s->blocked = af_malloc((size_t)n_ctx);
        if (!s->toks || !s->blocked) st = af_fail(AF_ERR_NOMEM, "out of memory");
    }
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
    for (int32_t k = 0; k < s->n_lora; k++) af_be(s->ctx)->free(s->ctx, s->dev_P[k]);
    af_be(s->ctx)->free(s->ctx, s->xa);
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    af_be(s->ctx)->free(s->ctx, s->logits_dev);
    free(s->toks);
    free(s->blocked);
    free(s);
}

void af_session_reset(af_session *s) { s->n_past = 0; }

int af_session_n_past(const af_session *s) { return (int)s->n_past; }

const af_model *af_session_model(const af_session *s) { return s ? s->m : NULL; }

int64_t af_session_n_ctx(const af_session *s) { return s ? s->n_ctx : 0; }

void af_session_set_control(af_session *s, const volatile int *cancel, af_progress_fn progress, void *user) {
    if (!s) return;
    s->cancel = cancel;
    s->progress = progress;
    s->progress_user = user;
}

const int32_t *af_session_tokens(const af_session *s, int *n) {
    if (n) *n = s ? (int)s->n_past : 0;
    return s ? s->toks : NULL;
}

/* Prompt chunks start at absolute positions that are multiples of AF_EVAL_CHUNK, so the rows of a
 * sequence fall into the same chunks whether it is evaluated in one call or continued after a
 * kept prefix (af_session_keep_prefix); every product of a chunk of > AF_TF_DECODE_ROWS rows gives
 * each row the same bits whatever the row count (matmul.h), and a chunk of fewer rows runs the
 * per-row decode regime. */
static int64_t chunk_len(int64_t pos, int64_t left) {
    const int64_t room = AF_EVAL_CHUNK - pos % AF_EVAL_CHUNK;
    return left < room ? left : room;
}

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
    const af_tf_control ctl = {&s->cancel, 1};
    for (int done = 0; done < n;) {
        int64_t chunk = chunk_len(s->n_past, n - done);
        /* the multi-sequence walk with one sequence: the path of af_session_eval_multi (adapter lists) */
        const af_tf_seq q = {chunk, s->n_past, s->k_cache, s->v_cache, s->n_ctx, s->lora, s->n_lora};
        AF_TRY(af_tf_infer_forward_multi(s->ctx, m, &s->s, &q, 1, tokens + done, s->xa, &ctl));
        memcpy(s->toks + s->n_past, tokens + done, sizeof(int32_t) * (size_t)chunk);
        memset(s->blocked + s->n_past, chunk > AF_TF_DECODE_ROWS, (size_t)chunk);
        s->n_past += chunk;
        if (all_logits) {
            AF_TRY(head_rows(s, all_logits + (size_t)done * (size_t)V, s->s.x, chunk));
            if (logits && done + chunk == n)
                memcpy(logits, all_logits + (size_t)(n - 1) * (size_t)V, sizeof(float) * (size_t)V);
        } else if (logits && done + chunk == n) {
            AF_TRY(head_rows(s, logits, s->s.x + (chunk - 1) * H, 1));
        }
        done += (int)chunk;
        if (s->progress && n > 1) s->progress(s->progress_user, "prompt", done, n);
    }
    return af_be(s->ctx)->sync(s->ctx);
}

/* 1 when position p of an n-token prompt evaluated in one call takes the blocked products (its
 * 256-chunk has > AF_TF_DECODE_ROWS rows), 0 when the per-row decode regime. */
static int blocked_at(int64_t p, int64_t n) {
    const int64_t c0 = p / AF_EVAL_CHUNK * AF_EVAL_CHUNK, e = c0 + AF_EVAL_CHUNK < n ? c0 + AF_EVAL_CHUNK : n;
    return e - c0 > AF_TF_DECODE_ROWS;
}

int af_session_keep_prefix(af_session *s, const int32_t *tokens, int n) {
    if (!s) return 0;
    s->n_past = af_session_reusable(s, tokens, n);
    return (int)s->n_past;
}

int af_session_reusable(const af_session *s, const int32_t *tokens, int n) {
    if (!s) return 0;
    int64_t c = 0;
    const int64_t lim = s->n_past < n ? s->n_past : n;
    /* a cached position is reused only when it holds the same token AND was computed in the regime
     * a one-call evaluation of the new prompt gives it (decode tokens, a shorter old prompt) */
    while (tokens && c < lim && s->toks[c] == tokens[c] && s->blocked[c] == blocked_at(c, n)) c++;
    if (c >= n) c = n - 1; /* the last token is evaluated again: its logits are needed */
    if (c > 0) {
        /* rows [c, e) of the chunk [c0, e) must stay in the regime the whole chunk has */
        const int64_t c0 = c / AF_EVAL_CHUNK * AF_EVAL_CHUNK, e = c0 + AF_EVAL_CHUNK < n ? c0 + AF_EVAL_CHUNK : n;
        if (c != c0 && e - c0 > AF_TF_DECODE_ROWS && e - c <= AF_TF_DECODE_ROWS) c = e - AF_TF_DECODE_ROWS - 1;
    }
    if (c < 0) c = 0;
    return (int)c;
}

int af_session_prompt_piece(const af_session *s, int n, int budget) {
    if (!s || budget < 1 || s->n_past >= n) return 0;
    const int64_t p = s->n_past, c0 = p / AF_EVAL_CHUNK * AF_EVAL_CHUNK;
    const int64_t e = c0 + AF_EVAL_CHUNK < n ? c0 + AF_EVAL_CHUNK : n, r = e - p;
    int64_t k = r < budget ? r : budget;
    /* a chunk of the blocked regime: pieces of > AF_TF_DECODE_ROWS rows, and no tail of 1-4 rows
     * left (a cache that already ends 1-4 rows before the chunk's end cannot be helped: the rest) */
    if (e - c0 > AF_TF_DECODE_ROWS && r > AF_TF_DECODE_ROWS) {
        if (r - k > 0 && r - k <= AF_TF_DECODE_ROWS) k = r - AF_TF_DECODE_ROWS - 1;
        if (k <= AF_TF_DECODE_ROWS) return 0;
    }
    return (int)k;
}

#define MULTI_MAX_ROWS 4096 /* tokens of one af_session_eval_multi call */

/* Check the arguments of af_session_eval_multi; *rows = Σ counts, *rmax = the largest adapter rank. */
static af_status multi_check(af_session *const *ss, int32_t n, const int32_t *counts, const int32_t *tokens,
                             int64_t *rows, int32_t *rmax) {
    const af_model *m = ss[0] ? ss[0]->m : NULL;
    const int64_t V = m ? m->cfg.vocab_size : 0;
    *rows = 0, *rmax = 0;
    for (int32_t i = 0; i < n; i++) {
        const af_session *s = ss[i];
        const int64_t c = counts ? counts[i] : 1;
        if (!s || s->m != m) return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: session %d is NULL or of another model", i);
        for (int32_t j = 0; j < i; j++)
            if (ss[j] == s) return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: session %d given twice", i);
        if (c < 1 || *rows + c > MULTI_MAX_ROWS)
            return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: session %d: %lld tokens (expected >= 1, at most %d in all)",
                           i, (long long)c, MULTI_MAX_ROWS);
        if (s->n_past + c > s->n_ctx)
            return af_fail(AF_ERR_RANGE, "session %d: context full (%lld cached + %lld new > %lld positions)", i,
                           (long long)s->n_past, (long long)c, (long long)s->n_ctx);
        if (s->n_past % AF_EVAL_CHUNK + c > AF_EVAL_CHUNK)
            return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: session %d: positions %lld..%lld cross a multiple of %d",
                           i, (long long)s->n_past, (long long)(s->n_past + c - 1), AF_EVAL_CHUNK);
        for (int64_t t = *rows; t < *rows + c; t++)
            if (tokens[t] < 0 || tokens[t] >= V)
                return af_fail(AF_ERR_RANGE, "token id %d (index %lld) of session %d outside the vocabulary [0, %lld)",
                               tokens[t], (long long)(t - *rows), i, (long long)V);
        if (s->cancel && *s->cancel) return af_fail(AF_ERR_CANCELLED, "session %d: cancelled", i);
        for (int32_t k = 0; k < s->n_lora; k++)
            if (s->lora[k].lay->lora.r > *rmax) *rmax = s->lora[k].lay->lora.r;
        *rows += c;
    }
    return AF_OK;
}

af_status af_session_eval_multi(af_session *const *ss, int32_t n, const int32_t *counts, const int32_t *tokens,
                                float *logits) {
    if (!ss || !tokens || !logits || n < 1) return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: NULL argument or n < 1");
    if (n > AF_EVAL_CHUNK) return af_fail(AF_ERR_INVALID_ARG, "af_session_eval_multi: %d sessions, more than %d", n, AF_EVAL_CHUNK);
    int64_t rows;
    int32_t rmax;
    AF_TRY(multi_check(ss, n, counts, tokens, &rows, &rmax));
    const af_model *m = ss[0]->m;
    const int64_t V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    const af_ctx *ctx = ss[0]->ctx;
    af_tf_seq *seq = af_calloc((size_t)n, sizeof *seq);
    const volatile int **flags = af_calloc((size_t)n, sizeof *flags);
    float *xa = rmax ? af_be(ctx)->alloc(ctx, sizeof(float) * (size_t)rows * (size_t)rmax) : NULL; /* device scratch */
    /* the forward state: the first session's (scratch between calls) when the rows fit, else one of its own */
    af_tf_infer own;
    memset(&own, 0, sizeof own);
    af_tf_infer *fs = rows <= ss[0]->s.cap ? &ss[0]->s : &own;
    af_status st = (!seq || !flags || (rmax && !xa)) ? af_fail(AF_ERR_NOMEM, "out of memory")
                   : fs == &own                      ? af_tf_infer_init(&own, ctx, m, NULL, rows)
                                                     : AF_OK;
    for (int32_t i = 0; st == AF_OK && i < n; i++) {
        const af_session *s = ss[i];
        seq[i] = (af_tf_seq){counts ? counts[i] : 1, s->n_past, s->k_cache, s->v_cache, s->n_ctx, s->lora, s->n_lora};
        flags[i] = s->cancel;
    }
    /* any session's cancel flag stops the whole step (checked before every layer) */
    const af_tf_control ctl = {(const volatile int *const *)flags, n};
    if (st == AF_OK) st = af_tf_infer_forward_multi(ctx, m, fs, seq, n, tokens, xa, &ctl);
    if (st == AF_OK) {
        /* each session's last row moved to row i (rows only move down, into rows already read), then
         * the LM head in groups of <= AF_TF_DECODE_ROWS rows: each row's bits as alone (on a device
         * through the first session's logits buffer, downloaded) */
        int64_t r = 0;
        for (int32_t i = 0; i < n; i++) {
            r += seq[i].n;
            if (r - 1 != i)
                af_be(ctx)->copy(ctx, fs->x + (size_t)i * (size_t)H, fs->x + (size_t)(r - 1) * (size_t)H,
                                      sizeof(float) * (size_t)H);
        }
        for (int32_t i = 0; st == AF_OK && i < n; i += AF_TF_DECODE_ROWS) {
            const int32_t k = n - i < AF_TF_DECODE_ROWS ? n - i : AF_TF_DECODE_ROWS;
            st = head_rows(ss[0], logits + (size_t)i * (size_t)V, fs->x + (size_t)i * (size_t)H, k);
        }
    }
    if (st == AF_OK) {
        int64_t r = 0;
        for (int32_t i = 0; i < n; i++) {
            af_session *s = ss[i];
            const int64_t c = seq[i].n;
            memcpy(s->toks + s->n_past, tokens + r, sizeof(int32_t) * (size_t)c);
            memset(s->blocked + s->n_past, c > AF_TF_DECODE_ROWS, (size_t)c);
            s->n_past += c;
            r += c;
        }
    }
    af_tf_infer_free(&own);
    af_be(ctx)->free(ctx, xa);
    free(flags);
    free(seq);
    return st;
}

af_status af_session_eval_batch(af_session *const *ss, int32_t n, const int32_t *tokens, float *logits) {
    return af_session_eval_multi(ss, n, NULL, tokens, logits);
}

/* FNV-1a 64 of n floats as given (session_file.c's layout hash reads it). */
static uint64_t fnv_floats(const float *P, int64_t n) {
    const unsigned char *b = (const unsigned char *)P;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof(float) * (size_t)n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

af_status af_session_set_loras(af_session *s, int32_t n, const float *const *P, const af_param_layout *const *lay,
                               const float *scale) {
    if (!s) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: NULL session");
    if (n < 0 || n > AF_SESSION_MAX_LORA || (n > 0 && (!P || !lay || !scale)))
        return af_fail(AF_ERR_INVALID_ARG, "af_session_set_loras: %d adapters (expected 0..%d with their arrays)", n,
                       AF_SESSION_MAX_LORA);
    for (int32_t k = 0; k < n; k++) {
        if (P[k] && (!lay[k] || lay[k]->n_layers != s->m->cfg.num_hidden_layers || lay[k]->lora.r < 1))
            return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: the layout of adapter %d does not match the model", k);
        if (!isfinite(scale[k])) return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: the scale of adapter %d is not finite", k);
        if (P[k] && lay[k]->init_P) /* the frozen −s·B0·A0 is applied by the training engine only */
            return af_fail(AF_ERR_INVALID_ARG, "af_session_set_lora: a pissa / olora training layout: save the adapter (a "
                                               "plain LoRA of the base) and load that");
    }
    /* DoRA rescales each projection by its norm: applied alone (the walk's single-adapter path with
     * the norms cached per adapter in the forward state, re-made for it), never mixed with others */
    int32_t n_on = 0, dora = -1;
    for (int32_t k = 0; k < n; k++)
        if (P[k] && scale[k] != 0) {
            n_on++;
            if (lay[k]->lora.use_dora) dora = k;
        }
    if (dora >= 0 && n_on > 1)
        return af_fail(AF_ERR_UNSUPPORTED, "a DoRA adapter is applied alone, not together with other adapters (merge it "
                                           "into the model with `afinar merge`)");
    if (dora >= 0 && !af_ctx_on_cpu(s->ctx))
        return af_fail(AF_ERR_UNSUPPORTED, "a DoRA adapter is applied on the CPU only (device %s): use --device cpu, or "
                                           "merge it into the model with `afinar merge`", af_ctx_device(s->ctx));
    if (dora >= 0) {
        af_tf_infer ns;
        AF_TRY(af_tf_infer_init(&ns, s->ctx, s->m, lay[dora], AF_EVAL_CHUNK));
        af_tf_infer_free(&s->s);
        s->s = ns;
    }
    const af_backend *be = af_be(s->ctx);
    af_tf_lora nl[AF_SESSION_MAX_LORA];
    float *dp[AF_SESSION_MAX_LORA], *xa = NULL;
    uint64_t hs[AF_SESSION_MAX_LORA];
    int32_t m = 0, rmax = 0;
    af_status st = AF_OK;
    for (int32_t k = 0; st == AF_OK && k < n; k++) {
        if (!P[k] || scale[k] == 0) continue; /* off */
        dp[m] = be->alloc(s->ctx, sizeof(float) * (size_t)lay[k]->n_total);
        if (!dp[m]) {
            st = AF_ERR_NOMEM;
            break;
        }
        st = be->upload(s->ctx, dp[m], P[k], sizeof(float) * (size_t)lay[k]->n_total);
        hs[m] = fnv_floats(P[k], lay[k]->n_total);
        nl[m] = (af_tf_lora){dp[m], lay[k], scale[k]};
        if (lay[k]->lora.r > rmax) rmax = lay[k]->lora.r;
        m++;
    }
    if (st == AF_OK && rmax > 0) {
        xa = be->alloc(s->ctx, sizeof(float) * (size_t)AF_EVAL_CHUNK * (size_t)rmax);
        if (!xa) st = AF_ERR_NOMEM;
    }
    if (st != AF_OK) {
        for (int32_t k = 0; k < m; k++) be->free(s->ctx, dp[k]);
        return st;
    }
    for (int32_t k = 0; k < s->n_lora; k++) be->free(s->ctx, s->dev_P[k]);
    be->free(s->ctx, s->xa);
    if (s->has_own_lay) af_param_layout_free(&s->own_lay);
    s->has_own_lay = 0;
    for (int32_t k = 0; k < m; k++) s->lora[k] = nl[k], s->dev_P[k] = dp[k], s->P_hash[k] = hs[k];
    s->n_lora = m;
    s->xa = xa;
    return AF_OK;
}

af_status af_session_set_lora(af_session *s, const float *P, const af_param_layout *lay, float scale) {
    return af_session_set_loras(s, 1, &P, &lay, &scale);
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
        if (s->n_lora) s->lora[0].lay = &s->own_lay;
        return AF_OK;
    }
    if (have_lay) af_param_layout_free(&lay);
    return st;
}
