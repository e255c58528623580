/* session_share.c — two uses of a session's cache beyond one generation (session.h): copying the
 * reusable prompt prefix of one session into another (the choices of one `afinar serve` request
 * with "n" > 1 share their prompt's keys and values), and the pooled final hidden state of a text
 * (the embeddings endpoint). */
#include "infer/session.h"

#include "model/transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int af_session_copy_prefix(af_session *dst, const af_session *src, const int32_t *tokens, int n) {
    const int own = af_session_keep_prefix(dst, tokens, n);
    const int c = af_session_reusable(src, tokens, n);
    if (c <= own || dst->m != src->m || dst->n_ctx < c) return own;
    const af_backend *be = af_be(dst->ctx);
    for (int32_t l = 0; l < dst->m->cfg.num_hidden_layers; l++) {
        const af_layer *Ly = &dst->m->layers[l];
        if (Ly->kv_src != l) continue; /* a KV-sharing layer reads its source's cache */
        const size_t bytes = sizeof(float) * (size_t)c * (size_t)Ly->n_kv_head * (size_t)Ly->head_dim;
        be->copy(dst->ctx, dst->k_cache[l], src->k_cache[l], bytes);
        be->copy(dst->ctx, dst->v_cache[l], src->v_cache[l], bytes);
    }
    memcpy(dst->toks, src->toks, sizeof(int32_t) * (size_t)c);
    memcpy(dst->blocked, src->blocked, (size_t)c);
    dst->n_past = c;
    return c;
}

af_status af_session_embed(af_session *s, const int32_t *tokens, int n, float *out) {
    const af_model *m = s->m;
    const int64_t H = m->cfg.hidden_size;
    double *acc = calloc((size_t)H, sizeof *acc);
    float *h = s->ctx->dev->info.host_memory ? NULL : malloc(sizeof(float) * (size_t)AF_EVAL_CHUNK * (size_t)H);
    if (!acc || (!h && !s->ctx->dev->info.host_memory)) {
        free(acc);
        free(h);
        return af_fail(AF_ERR_NOMEM, "out of memory for an embedding of %lld floats", (long long)H);
    }
    af_session_reset(s);
    af_status st = AF_OK;
    for (int done = 0; st == AF_OK && done < n;) {
        /* one forward chunk per call (chunks start at multiples of AF_EVAL_CHUNK), so that s->s.x
         * holds the final hidden states of exactly these rows */
        int k = AF_EVAL_CHUNK - done % AF_EVAL_CHUNK;
        if (k > n - done) k = n - done;
        st = af_session_eval(s, tokens + done, k, NULL, NULL);
        if (st != AF_OK) break;
        af_tf_final_norm(s->ctx, m, s->s.x, NULL, s->s.x, k);
        const float *x = s->s.x;
        if (h) {
            st = af_be(s->ctx)->download(s->ctx, h, s->s.x, sizeof(float) * (size_t)k * (size_t)H);
            x = h;
        } else {
            st = af_be(s->ctx)->sync(s->ctx);
        }
        for (int64_t r = 0; st == AF_OK && r < k; r++)
            for (int64_t i = 0; i < H; i++) acc[i] += x[r * H + i];
        done += k;
    }
    if (st == AF_OK) {
        double nn = 0;
        for (int64_t i = 0; i < H; i++) {
            acc[i] /= n;
            nn += acc[i] * acc[i];
        }
        const double inv = nn > 0 ? 1.0 / sqrt(nn) : 0.0;
        for (int64_t i = 0; i < H; i++) out[i] = (float)(acc[i] * inv);
    }
    af_session_reset(s);
    free(acc);
    free(h);
    return st;
}
