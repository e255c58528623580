/* lora_layout.c — the LoRA parameter layout of a model (af_param_layout_init*, lora/lora.h): the
 * model's layer count, hidden size and per-layer projection shapes handed to af_param_layout_build,
 * so that the LoRA code (lora/) does not depend on the model (model/ uses lora/, not the reverse). */
#include "lora/lora.h"

#include "afinar.h"
#include "kernels/quant.h"
#include "lora/adapter_io.h"
#include "lora/dora.h"
#include "lora/svd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"

static int model_proj_shape(const void *user, int32_t l, af_proj p, int64_t *in, int64_t *out) {
    return af_model_proj_shape((const af_model *)user, l, (int32_t)p, in, out);
}

af_status af_param_layout_init_layers(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                                      int32_t num_classes, int32_t layer_min, int32_t layer_end) {
    if (!model) return af_fail(AF_ERR_INVALID_ARG, "lora layout: NULL argument");
    const af_model_config *c = af_model_get_config(model);
    const af_layout_shapes sh = {c->num_hidden_layers, c->hidden_size, model, model_proj_shape};
    return af_param_layout_build(lay, &sh, cfg, num_classes, layer_min, layer_end);
}

/* The model's shapes with only the listed layers' projections present. */
typedef struct listed_shapes {
    const af_model *model;
    const int32_t *layers;
    int32_t n;
} listed_shapes;

static int listed_proj_shape(const void *user, int32_t l, af_proj p, int64_t *in, int64_t *out) {
    const listed_shapes *u = user;
    int listed = 0;
    for (int32_t i = 0; i < u->n && !listed; i++) listed = u->layers[i] == l;
    return af_model_proj_shape(u->model, l, (int32_t)p, in, out) && listed;
}

af_status af_param_layout_init_list(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                                    int32_t num_classes, const int32_t *layers, int32_t n) {
    if (!model || !layers || n < 1) return af_fail(AF_ERR_INVALID_ARG, "lora layout: NULL argument or no layer listed");
    const af_model_config *c = af_model_get_config(model);
    for (int32_t i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] >= c->num_hidden_layers || (i > 0 && layers[i] <= layers[i - 1]))
            return af_fail(AF_ERR_INVALID_ARG, "lora layout: the layer list must be ascending, distinct, in [0, %d)",
                           c->num_hidden_layers);
    const listed_shapes u = {model, layers, n};
    const af_layout_shapes sh = {c->num_hidden_layers, c->hidden_size, &u, listed_proj_shape};
    return af_param_layout_build(lay, &sh, cfg, num_classes, layers[0], layers[n - 1] + 1);
}

af_status af_param_layout_init(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                               int32_t num_classes) {
    return af_param_layout_init_layers(lay, model, cfg, num_classes, 0, 0);
}

/* The frozen weight of projection p of layer l (NULL when the layer has none). */
static const af_weight *proj_weight(const af_model *m, int32_t l, af_proj p) {
    const af_layer *L = &m->layers[l];
    const af_weight *w[AF_PROJ_COUNT] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[p]->data ? w[p] : NULL;
}

af_status af_dora_init_magnitudes(const af_model *model, const af_param_layout *lay, float *P) {
    if (!model || !lay || !P || !lay->lora.use_dora)
        return af_fail(AF_ERR_INVALID_ARG, "af_dora_init_magnitudes: NULL argument or no DoRA layout");
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const af_weight *w = l < model->cfg.num_hidden_layers ? proj_weight(model, l, (af_proj)p) : NULL;
            if (!w || w->rows != s->out || w->cols != s->in)
                return af_fail(AF_ERR_INVALID_ARG, "DoRA: layer %d %s: the model has no [%lld, %lld] weight there", l,
                               af_proj_name((af_proj)p), (long long)s->out, (long long)s->in);
            if (!af_type_can_dequantize(w->type))
                return af_fail(AF_ERR_UNSUPPORTED, "DoRA: layer %d %s: weight type %u has no dequantizer", l,
                               af_proj_name((af_proj)p), (unsigned)w->type);
            af_dora_weight_norm(model->ctx, P + s->m_off, w->data, w->type, P + s->a_off, P + s->b_off, s->in, s->out,
                                lay->lora.r, lay->scale);
        }
    return AF_OK;
}

/* A0 [r, in], B0 [out, r] of one weight (af_lora_init_residual). hd > 0: W's rows are in the GGUF q/k
 * order (adapter_io.h): the decomposition runs on the Hugging Face row order, as PEFT sees the weight, so
 * that Householder's signs (OLoRA) are PEFT's; B0's rows are mapped back. */
static af_status residual_slot(const af_weight *w, int32_t r, float scale, int init, int64_t hd, float *A0, float *B0) {
    const int64_t out = w->rows, in = w->cols;
    double *W = af_malloc(sizeof(double) * (size_t)(out * in));
    float *row = af_malloc(sizeof(float) * (size_t)in);
    af_status st = W && row ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory (%lld x %lld)", (long long)out, (long long)in);
    for (int64_t o = 0; st == AF_OK && o < out; o++) {
        af_weight_row(w, o, row);
        const int64_t h = hd > 0 ? af_adapter_qk_hf_row(o, hd) : o;
        for (int64_t i = 0; i < in; i++) W[h * in + i] = row[i];
    }
    free(row);
    float *Bh = st == AF_OK && hd > 0 ? af_malloc(sizeof(float) * (size_t)(out * r)) : NULL;
    if (st == AF_OK && hd > 0 && !Bh) st = af_fail(AF_ERR_NOMEM, "out of memory");
    float *const B_int = B0;
    if (Bh) B0 = Bh; /* B0 in HF row order first */
    if (st == AF_OK && init == AF_LORA_INIT_PISSA) {
        double *Bd = af_malloc(sizeof(double) * (size_t)(out * r)), *Ad = af_malloc(sizeof(double) * (size_t)(r * in));
        double *S = af_calloc((size_t)r, sizeof(double));
        st = Bd && Ad && S ? af_svd_lowrank(W, out, in, r, Bd, Ad, S) : af_fail(AF_ERR_NOMEM, "out of memory");
        for (int32_t j = 0; st == AF_OK && j < r; j++) { /* Bd = U·σ, Ad = Vᵀ */
            const double g = S[j] > 0 ? sqrt(S[j] / (double)scale) : 0.0, ginv = S[j] > 0 ? g / S[j] : 0.0;
            for (int64_t i = 0; i < in; i++) A0[(int64_t)j * in + i] = (float)(g * Ad[(int64_t)j * in + i]);
            for (int64_t o = 0; o < out; o++) B0[o * r + j] = (float)(ginv * Bd[o * r + j]);
        }
        free(Bd), free(Ad), free(S);
    } else if (st == AF_OK) { /* olora */
        const int64_t k = out < in ? out : in;
        double *W1 = af_malloc(sizeof(double) * (size_t)(out * k)), *Q = af_malloc(sizeof(double) * (size_t)(out * k));
        double *R = af_malloc(sizeof(double) * (size_t)(k * k));
        st = W1 && Q && R ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
        for (int64_t o = 0; st == AF_OK && o < out; o++)
            for (int64_t c = 0; c < k; c++) W1[o * k + c] = W[o * in + c];
        if (st == AF_OK) st = af_qr_thin(W1, out, k, Q, R);
        for (int32_t j = 0; st == AF_OK && j < r; j++) {
            for (int64_t o = 0; o < out; o++) B0[o * r + j] = (float)Q[o * k + j];
            for (int64_t i = 0; i < in; i++) { /* R[j, :] = Q[:, j]ᵀ·W (the triangular R for out >= in) */
                double acc = 0;
                for (int64_t o = 0; o < out; o++) acc += Q[o * k + j] * W[o * in + i];
                A0[(int64_t)j * in + i] = (float)(i < j ? 0.0 : acc);
            }
        }
        free(W1), free(Q), free(R);
    }
    if (Bh) {
        for (int64_t o = 0; st == AF_OK && o < out; o++)
            memcpy(B_int + o * r, Bh + af_adapter_qk_hf_row(o, hd) * r, sizeof(float) * (size_t)r);
        free(Bh);
    }
    free(W);
    return st;
}

af_status af_lora_init_residual(const af_model *model, af_param_layout *lay) {
    if (!model || !lay || (lay->init != AF_LORA_INIT_PISSA && lay->init != AF_LORA_INIT_OLORA))
        return af_fail(AF_ERR_INVALID_ARG, "af_lora_init_residual: NULL argument or not a pissa / olora layout");
    if (lay->lora.use_dora)
        return af_fail(AF_ERR_INVALID_ARG, "lora: %s initialisation with DoRA is not supported (train one or the other)",
                       lay->init == AF_LORA_INIT_PISSA ? "pissa" : "olora");
    float *P0 = af_calloc((size_t)(lay->n_lora > 0 ? lay->n_lora : 1), sizeof(float));
    if (!P0) return af_fail(AF_ERR_NOMEM, "lora: out of memory for the initial adapter (%lld floats)", (long long)lay->n_lora);
    af_status st = AF_OK;
    for (int32_t l = 0; st == AF_OK && l < lay->n_layers; l++)
        for (int p = 0; st == AF_OK && p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const af_weight *w = l < model->cfg.num_hidden_layers ? proj_weight(model, l, (af_proj)p) : NULL;
            if (!w || w->rows != s->out || w->cols != s->in)
                st = af_fail(AF_ERR_INVALID_ARG, "lora init: layer %d %s: the model has no [%lld, %lld] weight there", l,
                             af_proj_name((af_proj)p), (long long)s->out, (long long)s->in);
            else if (!af_type_can_dequantize(w->type))
                st = af_fail(AF_ERR_UNSUPPORTED, "lora init: layer %d %s: weight type %u has no dequantizer", l,
                             af_proj_name((af_proj)p), (unsigned)w->type);
            else {
                const int qk = (p == AF_PROJ_Q || p == AF_PROJ_K) && af_adapter_qk_permuted(model->cfg.architecture);
                st = residual_slot(w, lay->lora.r, lay->scale, lay->init, qk ? model->cfg.head_dim : 0, P0 + s->a_off,
                                   P0 + s->b_off);
                if (st != AF_OK)
                    st = af_fail(st, "lora %s init: layer %d %s: %s", lay->init == AF_LORA_INIT_PISSA ? "pissa" : "olora", l,
                                 af_proj_name((af_proj)p), af_last_error());
            }
        }
    if (st != AF_OK) {
        free(P0);
        return st;
    }
    free(lay->init_P);
    lay->init_P = P0;
    return AF_OK;
}

af_status af_lora_identity_params(const af_model *model, const af_param_layout *lay, float *P) {
    if (!model || !lay || !P) return af_fail(AF_ERR_INVALID_ARG, "af_lora_identity_params: NULL argument");
    if (lay->n_lora > 0) {
        if (lay->init_P) memcpy(P, lay->init_P, sizeof(float) * (size_t)lay->n_lora); /* A0, B0 (no DoRA with them) */
        else memset(P, 0, sizeof(float) * (size_t)lay->n_lora);
    }
    return lay->lora.use_dora ? af_dora_init_magnitudes(model, lay, P) : AF_OK; /* with B = 0: m = ||W||_row */
}
