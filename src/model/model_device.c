/*
 * model_device.c — a model's weights on its context's device (model.h af_model_import): every
 * projection, the embeddings, the LM head and the norm/bias vectors imported once through the
 * backend table (kernels/backend.h import_weight; the CPU backend returns the host addresses, so
 * nothing is copied there).
 */
#include "model/model.h"

#include "core/blocks.h"
#include "core/core.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <string.h>

const void *af_weight_dev(const af_ctx *ctx, const af_weight *w, uint32_t *type) {
    if (ctx->dev->info.host_memory) {
        *type = w->type;
        return w->data;
    }
    *type = w->dev_type;
    return w->dev;
}

/* The weights of m (each once: a tied head is the embedding). */
#define N_LAYER_W 9
static af_weight *layer_w(af_layer *L, int i) {
    af_weight *w[N_LAYER_W] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->ple_gate, &L->ple_proj};
    return w[i];
}

#define N_LAYER_V 11
static void layer_v(af_layer *L, int i, const float **host, const float ***dev, int64_t *len, const af_model *m) {
    const int64_t H = m->cfg.hidden_size, hd = L->head_dim, qd = (int64_t)L->n_head * hd, kvd = (int64_t)L->n_kv_head * hd;
    const float **hv[N_LAYER_V] = {&L->attn_norm, &L->bq, &L->bk, &L->bv, &L->q_norm, &L->k_norm,
                                   &L->post_attn_norm, &L->ffn_norm, &L->post_ffw_norm, &L->rope_freq_factors,
                                   &L->ple_post_norm};
    const float **dv[N_LAYER_V] = {&L->dv.attn_norm, &L->dv.bq, &L->dv.bk, &L->dv.bv, &L->dv.q_norm, &L->dv.k_norm,
                                   &L->dv.post_attn_norm, &L->dv.ffn_norm, &L->dv.post_ffw_norm,
                                   &L->dv.rope_freq_factors, &L->dv.ple_post_norm};
    const int64_t lens[N_LAYER_V] = {H, qd, kvd, kvd, hd, hd, H, H, H, hd / 2, H};
    *host = *hv[i];
    *dev = dv[i];
    *len = lens[i];
}

void af_model_release(af_model *m) {
    if (!m || !m->imported) return;
    const af_ctx *ctx = m->ctx;
    const af_backend *be = af_be(ctx);
    if (m->output.dev != m->tok_embd.dev) be->release_weight(ctx, m->output.dev);
    be->release_weight(ctx, m->tok_embd.dev);
    m->output.dev = m->tok_embd.dev = NULL;
    be->release_weight(ctx, m->output_norm_dev);
    be->release_weight(ctx, m->ones_dev);
    be->release_weight(ctx, m->ple_proj_norm_dev);
    be->release_weight(ctx, m->ple_tok_embd.dev);
    be->release_weight(ctx, m->ple_model_proj.dev);
    m->output_norm_dev = m->ones_dev = m->ple_proj_norm_dev = NULL;
    m->ple_tok_embd.dev = m->ple_model_proj.dev = NULL;
    for (int32_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        af_layer *L = &m->layers[l];
        for (int i = 0; i < N_LAYER_W; i++) {
            be->release_weight(ctx, layer_w(L, i)->dev);
            layer_w(L, i)->dev = NULL;
        }
        for (int i = 0; i < N_LAYER_V; i++) {
            const float *h, **d;
            int64_t len;
            layer_v(L, i, &h, &d, &len, m);
            be->release_weight(ctx, *d);
            *d = NULL;
        }
    }
    m->imported = 0;
}

static af_status import_w(af_model *m, af_weight *w, const char *what, int32_t layer) {
    const af_ctx *ctx = m->ctx;
    if (!w->data) { /* absent (gemma4: K/V of a KV-sharing layer, v of k_eq_v, no PLE) */
        w->dev = NULL;
        w->dev_type = w->type;
        return AF_OK;
    }
    w->dev = af_be(ctx)->import_weight(ctx, w->data, w->type, w->rows, w->cols, &w->dev_type);
    if (!w->dev) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        if (layer >= 0)
            return af_fail(AF_ERR_NOMEM, "loading layer %d %s [%lld, %lld] %s on device %s: %s", (int)layer, what,
                           (long long)w->rows, (long long)w->cols, af_type_name(w->type), af_ctx_device(ctx), msg);
        return af_fail(AF_ERR_NOMEM, "loading %s [%lld, %lld] %s on device %s: %s", what, (long long)w->rows,
                       (long long)w->cols, af_type_name(w->type), af_ctx_device(ctx), msg);
    }
    if (w->dev_type != w->type) m->weights_converted++;
    return AF_OK;
}

static af_status import_v(af_model *m, const float *host, const float **dev, int64_t len, const char *what) {
    if (!host) {
        *dev = NULL;
        return AF_OK;
    }
    uint32_t t = AF_TYPE_F32;
    *dev = af_be(m->ctx)->import_weight(m->ctx, host, AF_TYPE_F32, 1, len, &t);
    if (!*dev) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        return af_fail(AF_ERR_NOMEM, "loading %s on device %s: %s", what, af_ctx_device(m->ctx), msg);
    }
    return AF_OK;
}

/* Bytes the weights and vectors take on a device that copies them (as stored). */
static uint64_t device_bytes(af_model *m) {
    uint64_t b = 0;
    const af_weight *te = &m->tok_embd, *out = &m->output;
    b += af_row_bytes(te->type, te->cols) * (uint64_t)te->rows;
    if (out->data != te->data) b += af_row_bytes(out->type, out->cols) * (uint64_t)out->rows;
    b += sizeof(float) * (uint64_t)m->cfg.hidden_size;
    const af_weight *pw[2] = {&m->ple_tok_embd, &m->ple_model_proj};
    for (int i = 0; i < 2; i++)
        if (pw[i]->data) b += af_row_bytes(pw[i]->type, pw[i]->cols) * (uint64_t)pw[i]->rows;
    for (int32_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        af_layer *L = &m->layers[l];
        for (int i = 0; i < N_LAYER_W; i++)
            if (layer_w(L, i)->data)
                b += af_row_bytes(layer_w(L, i)->type, layer_w(L, i)->cols) * (uint64_t)layer_w(L, i)->rows;
        for (int i = 0; i < N_LAYER_V; i++) {
            const float *h, **d;
            int64_t len;
            layer_v(L, i, &h, &d, &len, m);
            if (h) b += sizeof(float) * (uint64_t)len;
        }
    }
    return b;
}

af_status af_model_import(af_model *m) {
    af_model_release(m);
    if (!m->ctx->dev->info.host_memory) { /* the memory guard: the weights must fit before anything is copied */
        uint64_t free_b = 0, total_b = 0;
        af_be(m->ctx)->memory(m->ctx, &free_b, &total_b);
        const uint64_t need = device_bytes(m);
        char b1[32], b2[32], b3[32];
        if (need > free_b)
            return af_fail(AF_ERR_NOMEM, "the model's weights need %s on device %s (%s) but it has %s free of %s: use "
                                         "--device cpu",
                           af_fmt_bytes(b1, sizeof b1, need), af_ctx_device(m->ctx), m->ctx->dev->info.name,
                           af_fmt_bytes(b2, sizeof b2, free_b), af_fmt_bytes(b3, sizeof b3, total_b));
    }
    const int32_t hd_max = m->ctx->dev->max_head_dim;
    for (int32_t l = 0; hd_max > 0 && l < m->cfg.num_hidden_layers; l++)
        if (m->layers[l].head_dim > hd_max)
            return af_fail(AF_ERR_UNSUPPORTED, "layer %d has head_dim %d; the attention of device %s (%s) takes head_dim "
                                               "<= %d: use --device cpu (--device auto does)",
                           (int)l, (int)m->layers[l].head_dim, af_ctx_device(m->ctx), m->ctx->dev->info.name, (int)hd_max);
    m->weights_converted = 0;
    m->imported = 1; /* release() undoes a partial import */
    static const char *const wn[N_LAYER_W] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                              "ffn_down", "inp_gate", "proj"};
    af_status st = import_w(m, &m->tok_embd, "token_embd", -1);
    if (st == AF_OK) {
        if (m->output.data == m->tok_embd.data && m->output.type == m->tok_embd.type) {
            m->output.dev = m->tok_embd.dev;
            m->output.dev_type = m->tok_embd.dev_type;
        } else st = import_w(m, &m->output, "output", -1);
    }
    if (st == AF_OK) st = import_v(m, m->output_norm, &m->output_norm_dev, m->cfg.hidden_size, "output_norm");
    if (st == AF_OK) st = import_v(m, m->ones, &m->ones_dev, m->max_head_dim, "the v norm's ones");
    if (st == AF_OK) st = import_v(m, m->ple_proj_norm, &m->ple_proj_norm_dev, m->desc.ple_dim, "per_layer_proj_norm");
    if (st == AF_OK) st = import_w(m, &m->ple_tok_embd, "per_layer_token_embd", -1);
    if (st == AF_OK) st = import_w(m, &m->ple_model_proj, "per_layer_model_proj", -1);
    for (int32_t l = 0; st == AF_OK && l < m->cfg.num_hidden_layers; l++) {
        af_layer *L = &m->layers[l];
        for (int i = 0; st == AF_OK && i < N_LAYER_W; i++) st = import_w(m, layer_w(L, i), wn[i], l);
        for (int i = 0; st == AF_OK && i < N_LAYER_V; i++) {
            const float *h, **d;
            int64_t len;
            layer_v(L, i, &h, &d, &len, m);
            st = import_v(m, h, d, len, "a norm or bias vector");
        }
    }
    if (st != AF_OK) af_model_release(m);
    return st;
}

af_status af_model_check_ctx(const af_model *m, const af_ctx *ctx) {
    if (ctx->dev->info.host_memory || ctx->dev == m->ctx->dev) return AF_OK;
    return af_fail(AF_ERR_INVALID_ARG, "the model was loaded on device %s but the computation runs on %s: load the "
                                       "model with a context of the same device",
                   af_ctx_device(m->ctx), af_ctx_device(ctx));
}
