/*
 * api.c — the public LoRA training API of afinar.h (af_lora_trainer_*), a thin layer over the
 * internal modules:
 *   lora/lora.h         target parsing, the flat parameter layout, PEFT-like initialisation
 *   train/engine.h      forward + loss + backward of a packed batch (gradients ADDED into G)
 *   train/optim.h       global-norm clipping and AdamW
 *   lora/adapter_io     PEFT adapter directories (api_state.c: adapter_save_peft / adapter_load_peft)
 * This is the one optimizer step of afinar: `afinar train` (src/train/trainer_run.c) drives an
 * af_lora_trainer through the internal entry points of train/api_internal.h, so gradient
 * accumulation, the dropout seed per micro-batch, dropping the head-bias gradient, clipping, AdamW
 * without decay on the head bias, the skip of a non-finite step and the report of where its first
 * non-finite value appeared are implemented here only. The trainer's parameters and optimizer
 * state seen from outside (the view, named tensors, state, adapter directories) are api_state.c's.
 *
 * Row order of q/k: on llama GGUF models (af_adapter_qk_permuted) the converter permuted the rows
 * of Wq/Wk per head, and the engine's LoRA acts on that order (docs/FORMATS.md §3.3):
 *   GGUF row (h·hd + 2b + a)  <->  HF row (h·hd + a·hd/2 + b),  a ∈ {0,1}, b ∈ [0, hd/2)
 * (af_adapter_qk_hf_row). Tensors handed out by name are converted here (copy_rows); adapter
 * files are converted by adapter_io (given the architecture and head counts); the flat vector of
 * af_lora_trainer_get_params stays in the internal (GGUF) order.
 */
#include "afinar.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "lora/adapter_io.h"
#include "lora/dora.h"
#include "lora/lora.h"
#include "model/model.h"
#include "train/api_internal.h"
#include "train/api_trainer.h"
#include "train/defaults.h"
#include "train/engine.h"
#include "train/head.h"
#include "train/optim.h"
#include "train/pref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)AF_POOLING_MEAN == (int)AF_POOL_MEAN && (int)AF_POOLING_LAST == (int)AF_POOL_LAST,
               "public and internal pooling enums must agree");

/* The RNG tag of the dropout masks: the seed of micro-batch j of step g is af_ctr_key(seed, g, j, TAG)
 * (api_internal.h: af_lora_trainer_accumulate_batch). */
#define DROPOUT_TAG 0x64726f70u

af_status af_lt_refail(af_status st, const char *fn) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", af_last_error());
    return af_fail(st, "%s: %s", fn, buf);
}

void af_lora_trainer_opts_defaults(af_lora_trainer_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->r = AF_DEFAULT_LORA_R;
    o->lora_alpha = (float)AF_DEFAULT_LORA_ALPHA;
    o->lora_dropout = (float)AF_DEFAULT_LORA_DROPOUT;
    o->targets = "qv";
    o->seed = AF_DEFAULT_SEED;
    o->pooling = AF_POOLING_MEAN;
    o->lr = (float)AF_DEFAULT_LR_CAUSAL_LM; /* num_classes 0: a causal-LM trainer (train/defaults.h) */
    o->weight_decay = (float)AF_DEFAULT_WEIGHT_DECAY;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->max_grad_norm = (float)AF_DEFAULT_MAX_GRAD_NORM;
}

static af_status add_tensor(af_lora_trainer *tr, const char *name, int64_t rows, int64_t cols, int64_t off,
                            int qk_rows) {
    tensor_desc *t = &tr->tensors[tr->n_tensors];
    size_t len = strlen(name) + 1;
    t->name = af_malloc(len);
    if (!t->name) return af_fail(AF_ERR_NOMEM, "af_lora_trainer_new: out of memory");
    memcpy(t->name, name, len);
    t->rows = rows;
    t->cols = cols;
    t->off = off;
    t->qk_rows = qk_rows;
    tr->n_tensors++;
    return AF_OK;
}

/* Names as adapter_io writes them (AF_ADAPTER_DEFAULT_*_PREFIX). */
static af_status build_tensors(af_lora_trainer *tr) {
    const af_param_layout *lay = &tr->lay;
    int32_t n = lay->num_classes > 0 ? 2 : 0;
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++)
            n += af_lora_slot_at(lay, l, (af_proj)p)->a_off >= 0 ? (lay->lora.use_dora ? 3 : 2) : 0;
    tr->tensors = af_calloc((size_t)n, sizeof(tensor_desc));
    if (!tr->tensors) return af_fail(AF_ERR_NOMEM, "af_lora_trainer_new: out of memory");
    /* same criterion as adapter_io, so tensors by name and adapter files always agree */
    const int permuted = af_adapter_qk_permuted(af_model_get_config(tr->model)->architecture);
    const int64_t r = lay->lora.r;
    char name[256];
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const char *block = p <= AF_PROJ_O ? "self_attn" : "mlp";
            const int qk = permuted && (p == AF_PROJ_Q || p == AF_PROJ_K);
            snprintf(name, sizeof name, "%s.%d.%s.%s.lora_A.weight", AF_ADAPTER_DEFAULT_LAYERS_PREFIX, l, block,
                     af_proj_name((af_proj)p));
            AF_TRY(add_tensor(tr, name, r, s->in, s->a_off, 0));
            snprintf(name, sizeof name, "%s.%d.%s.%s.lora_B.weight", AF_ADAPTER_DEFAULT_LAYERS_PREFIX, l, block,
                     af_proj_name((af_proj)p));
            AF_TRY(add_tensor(tr, name, s->out, r, s->b_off, qk));
            if (lay->lora.use_dora) { /* PEFT's name: no ".weight" (a 1-D [out] tensor) */
                snprintf(name, sizeof name, "%s.%d.%s.%s.lora_magnitude_vector", AF_ADAPTER_DEFAULT_LAYERS_PREFIX, l,
                         block, af_proj_name((af_proj)p));
                AF_TRY(add_tensor(tr, name, s->out, 1, s->m_off, qk));
            }
        }
    if (lay->num_classes > 0) {
        AF_TRY(add_tensor(tr, AF_ADAPTER_DEFAULT_HEAD_PREFIX ".weight", lay->num_classes, lay->hidden,
                          lay->head_w_off, 0));
        AF_TRY(add_tensor(tr, AF_ADAPTER_DEFAULT_HEAD_PREFIX ".bias", lay->num_classes, 1, lay->head_b_off, 0));
    }
    return AF_OK;
}

static af_status check_opts(const af_lora_trainer_opts *o) {
    static const char *fn = "af_lora_trainer_new";
    if (o->pooling != AF_POOLING_MEAN && o->pooling != AF_POOLING_LAST)
        return af_fail(AF_ERR_INVALID_ARG, "%s: pooling = %d is not AF_POOLING_MEAN or AF_POOLING_LAST", fn,
                       (int)o->pooling);
    if (o->num_classes < 0) return af_fail(AF_ERR_INVALID_ARG, "%s: num_classes = %d < 0", fn, o->num_classes);
    if (!(o->lr >= 0) || !isfinite(o->lr))
        return af_fail(AF_ERR_INVALID_ARG, "%s: lr = %g must be finite and >= 0", fn, (double)o->lr);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return af_fail(AF_ERR_INVALID_ARG, "%s: weight_decay = %g must be finite and >= 0", fn, (double)o->weight_decay);
    if (!(o->eps >= 0) || !isfinite(o->eps))
        return af_fail(AF_ERR_INVALID_ARG, "%s: eps = %g must be finite and >= 0", fn, (double)o->eps);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return af_fail(AF_ERR_INVALID_ARG, "%s: beta1 = %g, beta2 = %g must be in [0, 1)", fn, (double)o->beta1,
                       (double)o->beta2);
    if (isnan(o->max_grad_norm)) return af_fail(AF_ERR_INVALID_ARG, "%s: max_grad_norm is NaN", fn);
    if (o->init_lora_weights < AF_LORA_INIT_DEFAULT || o->init_lora_weights > AF_LORA_INIT_OLORA)
        return af_fail(AF_ERR_INVALID_ARG, "%s: init_lora_weights = %d (0 default, 1 gaussian, 2 pissa, 3 olora)", fn,
                       (int)o->init_lora_weights);
    if (!(o->loraplus_lr_ratio >= 0) || !isfinite(o->loraplus_lr_ratio))
        return af_fail(AF_ERR_INVALID_ARG, "%s: loraplus_lr_ratio = %g must be finite and >= 0 (0: off)", fn,
                       (double)o->loraplus_lr_ratio);
    if (o->steps_per_epoch < 0 || (o->steps_per_epoch > 0 && o->grad_accum < 1))
        return af_fail(AF_ERR_INVALID_ARG, "%s: steps_per_epoch = %lld, grad_accum = %d: need steps_per_epoch >= 0 and "
                                           "grad_accum >= 1 with it", fn, (long long)o->steps_per_epoch, (int)o->grad_accum);
    return AF_OK;
}

af_status af_lora_trainer_new(const af_model *model, const af_lora_trainer_opts *opts, af_lora_trainer **out) {
    return af_lora_trainer_new_ext(model, opts, NULL, out);
}

af_status af_lora_trainer_new_ext(const af_model *model, const af_lora_trainer_opts *opts,
                                  const af_lora_trainer_ext *ext, af_lora_trainer **out) {
    static const char *fn = "af_lora_trainer_new";
    if (out) *out = NULL;
    if (!model || !out) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL model or out", fn);
    af_lora_trainer_opts o;
    if (opts)
        o = *opts;
    else
        af_lora_trainer_opts_defaults(&o);
    const af_param_layout *given = ext ? ext->layout : NULL;
    if (given) { /* the caller's layout decides the LoRA and the head */
        o.r = given->lora.r, o.lora_alpha = given->lora.alpha, o.lora_dropout = given->lora.dropout;
        o.use_rslora = given->lora.use_rslora, o.num_classes = given->num_classes; /* (opts' seed: dropout) */
        o.use_dora = given->lora.use_dora;
    }
    AF_TRY(check_opts(&o));
    uint32_t mask = 0;
    af_status st = given ? AF_OK : af_lora_parse_targets(o.targets ? o.targets : "qv", &mask);
    if (st != AF_OK) return af_lt_refail(st, fn);
    o.targets = NULL;
    af_lora_trainer *tr = af_calloc(1, sizeof *tr);
    if (!tr) return af_fail(AF_ERR_NOMEM, "%s: out of memory", fn);
    tr->model = model;
    tr->o = o;
    tr->head_dim = model->cfg.head_dim;
    tr->max_grad_norm = ext ? ext->max_grad_norm : (double)o.max_grad_norm;
    tr->ctx = ext && ext->ctx ? ext->ctx : model->ctx;
    const af_backend *be = af_be(tr->ctx);
    af_lora_config cfg = {o.r, o.lora_alpha, o.lora_dropout, o.use_rslora != 0, mask, o.seed, o.use_dora != 0};
    if (o.use_dora && !af_ctx_on_cpu(tr->ctx)) {
        af_lora_trainer_free(tr);
        return af_fail(AF_ERR_UNSUPPORTED, "%s: DoRA runs on the CPU only (device %s): train with --device cpu", fn,
                       af_ctx_device(ext && ext->ctx ? ext->ctx : model->ctx));
    }
    st = given ? af_param_layout_copy(&tr->lay, given)
               : af_param_layout_init_layers(&tr->lay, model, &cfg, o.num_classes, ext ? ext->layer_min : 0,
                                             ext ? ext->layer_end : 0);
    if (st != AF_OK) {
        st = af_lt_refail(st, fn);
        af_lora_trainer_free(tr);
        return st;
    }
    if (!given) {
        tr->lay.init = o.init_lora_weights;
        if (tr->lay.init == AF_LORA_INIT_PISSA || tr->lay.init == AF_LORA_INIT_OLORA)
            st = af_lora_init_residual(model, &tr->lay); /* the SVD / QR of every adapted weight */
        if (st != AF_OK) {
            st = af_lt_refail(st, fn);
            af_lora_trainer_free(tr);
            return st;
        }
    }
    const size_t n = (size_t)tr->lay.n_total;
    float *hostP = af_malloc(sizeof(float) * (n ? n : 1));
    uint8_t *hdecay = tr->lay.num_classes > 0 ? af_malloc(n) : NULL;
    tr->P = be->alloc(tr->ctx, sizeof(float) * n);
    tr->G = tr->P ? be->alloc(tr->ctx, sizeof(float) * n) : NULL;
    tr->M = tr->G ? be->alloc(tr->ctx, sizeof(float) * n) : NULL;
    tr->V = tr->M ? be->alloc(tr->ctx, sizeof(float) * n) : NULL;
    if (tr->V && tr->lay.num_classes > 0) tr->decay = be->alloc(tr->ctx, n);
    if (!hostP || !tr->V || (tr->lay.num_classes > 0 && (!hdecay || !tr->decay))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tr->V ? "out of host memory" : af_last_error());
        free(hostP);
        free(hdecay);
        af_lora_trainer_free(tr);
        return af_fail(AF_ERR_NOMEM, "%s: %zu parameters on device %s: %s", fn, n, af_ctx_device(tr->ctx ? tr->ctx : model->ctx), msg);
    }
    be->fill(tr->ctx, tr->G, 0.0f, (int64_t)n);
    be->fill(tr->ctx, tr->M, 0.0f, (int64_t)n);
    be->fill(tr->ctx, tr->V, 0.0f, (int64_t)n);
    af_lora_init_params(&tr->lay, hostP);
    st = tr->lay.lora.use_dora ? af_dora_init_magnitudes(model, &tr->lay, hostP) : AF_OK;
    if (st == AF_OK) st = be->upload(tr->ctx, tr->P, hostP, sizeof(float) * n);
    if (st == AF_OK && hdecay) {
        memset(hdecay, 1, n);
        memset(hdecay + tr->lay.head_b_off, 0, (size_t)tr->lay.num_classes); /* no decay on the bias */
        st = be->upload(tr->ctx, tr->decay, hdecay, n);
    }
    free(hostP);
    free(hdecay);
    if (st == AF_OK) st = build_tensors(tr);
    if (st == AF_OK) {
        st = af_engine_new(tr->ctx, model, &tr->lay, &tr->eng);
        if (st != AF_OK) st = af_lt_refail(st, fn);
    }
    if (st != AF_OK) {
        af_lora_trainer_free(tr);
        return st;
    }
    *out = tr;
    return AF_OK;
}

void af_lora_trainer_free(af_lora_trainer *tr) {
    if (!tr) return;
    af_engine_free(tr->eng);
    if (tr->tensors)
        for (int32_t i = 0; i < tr->n_tensors; i++) free(tr->tensors[i].name);
    free(tr->tensors);
    af_param_layout_free(&tr->lay);
    if (tr->ctx) {
        const af_backend *be = af_be(tr->ctx);
        be->free(tr->ctx, tr->P);
        be->free(tr->ctx, tr->G);
        be->free(tr->ctx, tr->M);
        be->free(tr->ctx, tr->V);
        be->free(tr->ctx, tr->decay);
    }
    free(tr->class_w);
    free(tr);
}

af_status af_lora_trainer_set_class_weights(af_lora_trainer *tr, const float *w) {
    static const char *fn = "af_lora_trainer_set_class_weights";
    if (!tr) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    const int32_t C = tr->lay.num_classes;
    if (C <= 0) return af_fail(AF_ERR_INVALID_ARG, "%s: the trainer has no classification head", fn);
    if (!w) {
        free(tr->class_w);
        tr->class_w = NULL;
        return AF_OK;
    }
    for (int32_t c = 0; c < C; c++)
        if (!(w[c] >= 0) || !isfinite(w[c]))
            return af_fail(AF_ERR_INVALID_ARG, "%s: weight %g of class %d must be finite and >= 0", fn, (double)w[c], c);
    if (!tr->class_w) tr->class_w = af_malloc(sizeof(float) * (size_t)C);
    if (!tr->class_w) return af_fail(AF_ERR_NOMEM, "%s: out of memory", fn);
    memcpy(tr->class_w, w, sizeof(float) * (size_t)C);
    return AF_OK;
}

/* ---------------------------------------------------------------- non-finite report */

/* Name of the parameter tensor k (0-based, in forward order: every LoRA A, B by layer and
 * projection, then score.weight, score.bias) of `lay`, with its [off, off + len) range; 0 when k is
 * past the last tensor or its slot is not targeted. */
static int layout_tensor_at(const af_param_layout *lay, int64_t k, char *name, size_t cap, int64_t *off,
                            int64_t *len) {
    const int64_t n_lora = (int64_t)lay->n_layers * AF_PROJ_COUNT * 2;
    if (k < n_lora) {
        const int32_t l = (int32_t)(k / (AF_PROJ_COUNT * 2));
        const af_proj p = (af_proj)(k / 2 % AF_PROJ_COUNT);
        const int b = (int)(k % 2);
        const af_lora_slot *s = af_lora_slot_at(lay, l, p);
        if (s->a_off < 0) return 0;
        snprintf(name, cap, "model.layers.%d.%s%s.lora_%c", (int)l, p <= AF_PROJ_O ? "self_attn." : "mlp.",
                 af_proj_name(p), b ? 'B' : 'A');
        *off = b ? s->b_off : s->a_off;
        *len = b ? s->out * lay->lora.r : (int64_t)lay->lora.r * s->in;
        return 1;
    }
    if (lay->head_w_off < 0 || k >= n_lora + 2) return 0;
    snprintf(name, cap, k == n_lora ? "score.weight" : "score.bias");
    *off = k == n_lora ? lay->head_w_off : lay->head_b_off;
    *len = k == n_lora ? (int64_t)lay->num_classes * lay->hidden : lay->num_classes;
    return 1;
}

int af_tr_param_name(const af_param_layout *lay, int64_t idx, char *name, size_t cap) {
    const int64_t nt = (int64_t)lay->n_layers * AF_PROJ_COUNT * 2 + 2;
    for (int64_t k = 0; k < nt; k++) {
        char nm[128];
        int64_t off = 0, len = 0;
        if (!layout_tensor_at(lay, k, nm, sizeof nm, &off, &len) || off < 0 || idx < off || idx >= off + len) continue;
        snprintf(name, cap, "%s element %lld", nm, (long long)(idx - off));
        return 1;
    }
    snprintf(name, cap, "element %lld", (long long)idx);
    return 0;
}

int af_tr_nonfinite_tensor(const af_ctx *ctx, const af_param_layout *lay, const float *X, int backward, char *name,
                           size_t cap) {
    if (!ctx) ctx = af_ctx_default();
    const int64_t nt = (int64_t)lay->n_layers * AF_PROJ_COUNT * 2 + 2;
    int found = 0;
    if (cap) name[0] = 0;
    for (int64_t i = 0; i < nt; i++) {
        /* backward order: the head, then layers from the top; in a layer down..q, B before A */
        const int64_t k = backward ? (i < 2 ? nt - 2 + i : nt - 3 - (i - 2)) : i;
        char nm[128];
        int64_t off = 0, len = 0;
        if (!layout_tensor_at(lay, k, nm, sizeof nm, &off, &len)) continue;
        const int bad = af_be(ctx)->count_nonfinite(ctx, X + off, len) != 0;
        if (bad && !found++ && cap) snprintf(name, cap, "%s", nm);
    }
    return found;
}

/* Where a non-finite loss of micro-batch `b` (run with `so`) came from: a non-finite parameter, else
 * the first forward stage that produced one (the engine's probe). */
static af_status locate_nonfinite_loss(af_lora_trainer *tr, const af_batch *b, const af_step_opts *so) {
    char nm[128];
    const int np = af_tr_nonfinite_tensor(tr->ctx, &tr->lay, tr->P, 0, nm, sizeof nm);
    if (np) {
        snprintf(tr->nf_where, sizeof tr->nf_where, "%s parameter (%d tensor%s not finite)", nm, np, np > 1 ? "s" : "");
        return AF_OK;
    }
    char at[160];
    AF_TRY(af_engine_locate_nonfinite(tr->eng, tr->P, b, so, at, sizeof at));
    snprintf(tr->nf_where, sizeof tr->nf_where, "%s (forward, micro-batch %lld)", at[0] ? at : "loss",
             (long long)tr->n_micro);
    return AF_OK;
}

const char *af_lora_trainer_nonfinite_where(const af_lora_trainer *tr) {
    return tr ? tr->nf_where : "";
}

/* ---------------------------------------------------------------- the optimizer step */

/* Checks shared by accumulate and forward that the engine does not make (it validates the batch
 * itself: seq_start, tokens, labels). */
static af_status check_call(const af_lora_trainer *tr, const char *fn, const int32_t *tokens,
                            const int32_t *seq_start, int32_t n_samples) {
    if (!tr || !tokens || !seq_start) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (tr->lay.num_classes <= 0)
        return af_fail(AF_ERR_INVALID_ARG, "%s: the trainer has no classification head (num_classes = 0)", fn);
    if (n_samples < 1) return af_fail(AF_ERR_INVALID_ARG, "%s: n_samples = %d < 1", fn, n_samples);
    return AF_OK;
}

/* The engine options of micro-batch `micro_batch` of the current step (training mode, its dropout seed). */
static af_step_opts micro_opts(af_lora_trainer *tr, uint64_t micro_batch) {
    if (tr->n_micro == 0) tr->nf_where[0] = 0; /* the first micro-batch of a step */
    const af_step_opts so = {(af_pooling)tr->o.pooling, tr->class_w, tr->o.checkpointing != 0, 1,
                             af_ctr_key(tr->o.seed, (uint64_t)tr->step_count, micro_batch, DROPOUT_TAG)};
    return so;
}

/* After a micro-batch: record a non-finite loss (first of the step) and count the micro-batch. */
static af_status micro_done(af_lora_trainer *tr, const af_batch *b, const af_step_opts *so, double loss) {
    if (!isfinite(loss) && !tr->nonfinite) {
        AF_TRY(locate_nonfinite_loss(tr, b, so));
        tr->nonfinite = 1;
    }
    tr->n_micro++;
    tr->mb_in_step++;
    return AF_OK;
}

af_status af_lora_trainer_accumulate_batch(af_lora_trainer *tr, const af_batch *b, float grad_scale,
                                           uint64_t micro_batch, double *loss, float *logits) {
    const af_step_opts so = micro_opts(tr, micro_batch);
    af_status st = af_engine_step(tr->eng, tr->P, tr->G, b, &so, grad_scale, loss, logits);
    if (st == AF_ERR_CANCELLED) af_lora_trainer_zero_grad(tr); /* a partial gradient is never kept */
    AF_TRY(st);
    return micro_done(tr, b, &so, *loss);
}

void af_lora_trainer_set_control(af_lora_trainer *tr, const volatile int *cancel) {
    if (tr) af_engine_set_cancel(tr->eng, cancel);
}

af_status af_lora_trainer_accumulate_lm_batch(af_lora_trainer *tr, const af_batch *b, float grad_scale,
                                              uint64_t micro_batch, af_lm_loss *res) {
    const af_step_opts so = micro_opts(tr, micro_batch);
    af_status st = af_engine_lm_step(tr->eng, tr->P, tr->G, b, &so, grad_scale, res);
    if (st == AF_ERR_CANCELLED) af_lora_trainer_zero_grad(tr); /* a partial gradient is never kept */
    AF_TRY(st);
    return micro_done(tr, b, &so, res->loss_sum);
}

af_status af_lora_trainer_accumulate_pref_batch(af_lora_trainer *tr, const af_pref_batch *b, const af_pref_opts *po,
                                                float scale, uint64_t micro_batch, af_pref_metrics *m) {
    if (!tr || !b || !po || !m) return af_fail(AF_ERR_INVALID_ARG, "af_lora_trainer_accumulate_pref_batch: NULL argument");
    const af_step_opts so = micro_opts(tr, micro_batch);
    af_status st = af_pref_step(tr->eng, tr->P, tr->G, b, &so, po, scale, m);
    if (st == AF_ERR_CANCELLED) af_lora_trainer_zero_grad(tr); /* a partial gradient is never kept */
    AF_TRY(st);
    const af_batch all = {b->tokens, b->seq_start, 2 * b->n_pairs, b->seq_start[2 * b->n_pairs], NULL, NULL, b->targets};
    af_step_opts fo = so;
    fo.train = 0; /* af_pref_step's forward: no dropout */
    return micro_done(tr, &all, &fo, m->loss);
}

af_status af_lora_trainer_pref_ref(af_lora_trainer *tr, const af_pref_batch *b, double *ref_c, double *ref_r) {
    if (!tr || !b || !ref_c || !ref_r) return af_fail(AF_ERR_INVALID_ARG, "af_lora_trainer_pref_ref: NULL argument");
    const af_backend *be = af_be(tr->ctx);
    const size_t n = (size_t)(tr->lay.n_total ? tr->lay.n_total : 1);
    /* the adapter off: the parameters of the identity adapter (zero for plain LoRA; DoRA's magnitudes
     * = the weights' column norms; PiSSA / OLoRA: A0, B0, cancelling the frozen -s·B0·A0), so the
     * reference is the base model with every variant (af_lora_identity_params) */
    float *Zh = calloc(n, sizeof(float));
    float *Z = Zh ? be->alloc(tr->ctx, sizeof(float) * n) : NULL;
    af_status st = Z ? AF_OK : af_fail(AF_ERR_NOMEM, "preference reference: out of memory (%zu parameters)", n);
    if (st == AF_OK && tr->lay.n_total > 0) st = af_lora_identity_params(tr->model, &tr->lay, Zh);
    if (st == AF_OK) st = be->upload(tr->ctx, Z, Zh, sizeof(float) * n);
    if (st == AF_OK) st = af_pref_ref_logps(tr->eng, Z, b, ref_c, ref_r);
    if (Z) be->free(tr->ctx, Z);
    free(Zh);
    return st;
}

static af_status accumulate(af_lora_trainer *tr, const char *fn, const int32_t *tokens, const int32_t *seq_start,
                            int32_t n_samples, const int32_t *labels, const float *targets, float grad_scale,
                            double *loss, float *logits) {
    AF_TRY(check_call(tr, fn, tokens, seq_start, n_samples));
    if (!loss || (!labels && !targets)) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (!isfinite(grad_scale)) return af_fail(AF_ERR_INVALID_ARG, "%s: grad_scale = %g is not finite", fn, (double)grad_scale);
    const int32_t C = tr->lay.num_classes;
    if (targets)
        for (int64_t i = 0; i < (int64_t)n_samples * C; i++)
            if (!(targets[i] >= 0 && targets[i] <= 1))
                return af_fail(AF_ERR_INVALID_ARG, "%s: target %g of sample %lld, class %lld is outside [0, 1]", fn,
                               (double)targets[i], (long long)(i / C), (long long)(i % C));
    const af_batch b = {tokens, seq_start, n_samples, seq_start[n_samples], labels, labels ? NULL : targets, NULL};
    af_status st =
        af_lora_trainer_accumulate_batch(tr, &b, grad_scale, af_lora_trainer_micro_id(tr, tr->mb_in_step), loss, logits);
    return st == AF_OK ? AF_OK : af_lt_refail(st, fn);
}

af_status af_lora_trainer_accumulate(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                     int32_t n_samples, const int32_t *labels, float grad_scale, double *loss,
                                     float *logits) {
    static const char *fn = "af_lora_trainer_accumulate";
    if (!labels) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL labels", fn);
    return accumulate(tr, fn, tokens, seq_start, n_samples, labels, NULL, grad_scale, loss, logits);
}

af_status af_lora_trainer_accumulate_multilabel(af_lora_trainer *tr, const int32_t *tokens,
                                                const int32_t *seq_start, int32_t n_samples, const float *targets,
                                                float grad_scale, double *loss, float *logits) {
    static const char *fn = "af_lora_trainer_accumulate_multilabel";
    if (!targets) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL targets", fn);
    return accumulate(tr, fn, tokens, seq_start, n_samples, NULL, targets, grad_scale, loss, logits);
}

/* Checks of the causal-LM entry points (the engine validates seq_start, tokens and targets). */
static af_status check_lm_call(const af_lora_trainer *tr, const char *fn, const int32_t *tokens,
                               const int32_t *seq_start, int32_t n_samples, const int32_t *targets) {
    if (!tr || !tokens || !seq_start || !targets) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (tr->lay.num_classes > 0)
        return af_fail(AF_ERR_INVALID_ARG, "%s: the trainer has a classification head (num_classes = %d); a causal-LM "
                                           "trainer is made with num_classes = 0", fn, tr->lay.num_classes);
    if (n_samples < 1) return af_fail(AF_ERR_INVALID_ARG, "%s: n_samples = %d < 1", fn, n_samples);
    return AF_OK;
}

static void lm_out(const af_lm_loss *r, double *loss_sum, int64_t *n_targets, int64_t *n_correct) {
    if (loss_sum) *loss_sum = r->loss_sum;
    if (n_targets) *n_targets = r->n_targets;
    if (n_correct) *n_correct = r->n_correct;
}

af_status af_lora_trainer_accumulate_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                        int32_t n_samples, const int32_t *targets, float grad_scale,
                                        double *loss_sum, int64_t *n_targets, int64_t *n_correct) {
    static const char *fn = "af_lora_trainer_accumulate_lm";
    AF_TRY(check_lm_call(tr, fn, tokens, seq_start, n_samples, targets));
    if (!isfinite(grad_scale)) return af_fail(AF_ERR_INVALID_ARG, "%s: grad_scale = %g is not finite", fn, (double)grad_scale);
    const af_batch b = {tokens, seq_start, n_samples, seq_start[n_samples], NULL, NULL, targets};
    af_lm_loss r;
    af_status st = af_lora_trainer_accumulate_lm_batch(tr, &b, grad_scale, af_lora_trainer_micro_id(tr, tr->mb_in_step), &r);
    if (st != AF_OK) return af_lt_refail(st, fn);
    lm_out(&r, loss_sum, n_targets, n_correct);
    return AF_OK;
}

af_status af_lora_trainer_forward_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                     int32_t n_samples, const int32_t *targets, double *loss_sum,
                                     int64_t *n_targets, int64_t *n_correct) {
    static const char *fn = "af_lora_trainer_forward_lm";
    AF_TRY(check_lm_call(tr, fn, tokens, seq_start, n_samples, targets));
    const af_batch b = {tokens, seq_start, n_samples, seq_start[n_samples], NULL, NULL, targets};
    const af_step_opts so = {(af_pooling)tr->o.pooling, NULL, 0, 0, 0};
    af_lm_loss r;
    af_status st = af_engine_lm_step(tr->eng, tr->P, NULL, &b, &so, 0.0f, &r);
    if (st != AF_OK) return af_lt_refail(st, fn);
    lm_out(&r, loss_sum, n_targets, n_correct);
    return AF_OK;
}

/* Gradient and micro-batch count of the step cleared (the non-finite report stays readable). */
static void clear_grad(af_lora_trainer *tr) {
    af_be(tr->ctx)->fill(tr->ctx, tr->G, 0.0f, tr->lay.n_total);
    tr->n_micro = 0;
    tr->nonfinite = 0;
}

void af_lora_trainer_zero_grad(af_lora_trainer *tr) {
    if (!tr) return;
    clear_grad(tr);
    tr->nf_where[0] = 0;
}

af_status af_lora_trainer_collect_gradients(const af_lora_trainer *tr, float *out, int32_t *n_micro,
                                            int *nonfinite) {
    if (!tr || !out) return af_fail(AF_ERR_INVALID_ARG, "af_lora_trainer_collect_gradients: NULL argument");
    AF_TRY(af_be(tr->ctx)->download(tr->ctx, out, tr->G, sizeof(float) * (size_t)tr->lay.n_total));
    if (n_micro) *n_micro = tr->n_micro;
    if (nonfinite) *nonfinite = tr->nonfinite;
    return AF_OK;
}

af_status af_lora_trainer_apply_gradients(af_lora_trainer *tr, const float *grad, int32_t n_micro, int nonfinite) {
    static const char *fn = "af_lora_trainer_apply_gradients";
    if (!tr || !grad) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (n_micro < 1) return af_fail(AF_ERR_INVALID_ARG, "%s: n_micro = %d < 1", fn, n_micro);
    if (grad != tr->G) AF_TRY(af_be(tr->ctx)->upload(tr->ctx, tr->G, grad, sizeof(float) * (size_t)tr->lay.n_total));
    tr->n_micro = n_micro;
    if (nonfinite && !tr->nonfinite) { /* seen by another worker: where is its report */
        tr->nonfinite = 1;
        if (!tr->nf_where[0]) snprintf(tr->nf_where, sizeof tr->nf_where, "a micro-batch loss of another worker");
    }
    return AF_OK;
}

/* One AdamW update with LoRA+'s two learning rates (PEFT peft/optimizers/loraplus.py,
 * create_loraplus_optimizer: "lora_B" in the name or a 1-D parameter -> lr·ratio, the rest -> lr; weight
 * decay as the run's, none on the head bias as always). The flat vector is cut into runs of one
 * learning rate (A, B, DoRA magnitude of each slot, head W, head b) and each run is one adamw_step call on that part of
 * P, G, M, V with the same step count t: elements are independent, so this equals one optimizer with
 * two parameter groups. */
static void adamw_loraplus(af_lora_trainer *tr, af_adamw *a, float lr, float ratio) {
    const af_backend *be = af_be(tr->ctx);
    const af_param_layout *lay = &tr->lay;
    const int64_t t0 = a->t;
    const float lr_b = (float)((double)lr * (double)ratio);
    int64_t run0 = 0, run_end = 0;
    int run_b = 0;
    for (int64_t k = 0;; k++) { /* segments in offset order: A, B per slot, then head W, head b */
        int64_t off = -1, len = 0;
        int is_b = 0;
        const int64_t nslot = (int64_t)lay->n_layers * AF_PROJ_COUNT;
        if (k < 3 * nslot) { /* A, B, DoRA magnitude (1-D: the lr x ratio group) */
            const af_lora_slot *s = &lay->slots[k / 3];
            const int part = (int)(k % 3);
            if (s->a_off < 0 || (part == 2 && !lay->lora.use_dora)) continue;
            is_b = part > 0;
            off = part == 2 ? s->m_off : part ? s->b_off : s->a_off;
            len = part == 2 ? s->out : (int64_t)lay->lora.r * (part ? s->out : s->in);
        } else if (k == 3 * nslot && lay->head_w_off >= 0) {
            off = lay->head_w_off, len = (int64_t)lay->num_classes * lay->hidden;
        } else if (k == 3 * nslot + 1 && lay->head_b_off >= 0) {
            off = lay->head_b_off, len = lay->num_classes, is_b = 1; /* 1-D: PEFT's groupB_no_decay */
        } else if (k > 3 * nslot + 1) {
            off = -2; /* end: flush */
        } else {
            continue;
        }
        if (off == run_end && off >= 0 && is_b == run_b) { /* extends the current run */
            run_end += len;
            continue;
        }
        if (run_end > run0) {
            a->t = t0;
            be->adamw_step(tr->ctx, a, tr->P + run0, tr->G + run0, tr->M + run0, tr->V + run0, run_end - run0,
                           run_b ? lr_b : lr, tr->decay ? tr->decay + run0 : NULL);
        }
        if (off < 0) break;
        run0 = off, run_end = off + len, run_b = is_b;
    }
    a->t = t0 + 1;
}

af_status af_lora_trainer_step(af_lora_trainer *tr, float lr, double *grad_norm) {
    static const char *fn = "af_lora_trainer_step";
    if (!tr) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    if (isnan(lr) || isinf(lr)) return af_fail(AF_ERR_INVALID_ARG, "%s: lr = %g is not finite", fn, (double)lr);
    if (tr->n_micro == 0)
        return af_fail(AF_ERR_INVALID_ARG, "%s: no micro-batch accumulated since the last step", fn);
    const int64_t n = tr->lay.n_total;
    const float use_lr = lr < 0 ? tr->o.lr : lr;
    const af_backend *be = af_be(tr->ctx);
    if (!tr->o.head_bias && tr->lay.head_b_off >= 0)
        be->fill(tr->ctx, tr->G + tr->lay.head_b_off, 0.0f, tr->lay.num_classes);
    const double gn =
        tr->nonfinite ? NAN : be->clip_grad_norm(tr->ctx, tr->G, n, tr->max_grad_norm > 0 ? tr->max_grad_norm : 0);
    AF_TRY(be->sync(tr->ctx)); /* a device error is not a non-finite step */
    const int was_nonfinite_loss = tr->nonfinite;
    const int ok = isfinite(gn);
    if (!ok && !was_nonfinite_loss) {
        char nm[128];
        const int ng = af_tr_nonfinite_tensor(tr->ctx, &tr->lay, tr->G, 1, nm, sizeof nm);
        if (ng)
            snprintf(tr->nf_where, sizeof tr->nf_where, "%s gradient (first in backward order; %d tensor%s not finite)",
                     nm, ng, ng > 1 ? "s" : "");
        else snprintf(tr->nf_where, sizeof tr->nf_where, "gradient norm");
    }
    if (ok) {
        af_adamw a;
        af_adamw_defaults(&a, use_lr);
        a.beta1 = tr->o.beta1;
        a.beta2 = tr->o.beta2;
        a.eps = tr->o.eps;
        a.weight_decay = tr->o.weight_decay;
        a.t = tr->adam_t;
        const float ratio = tr->o.loraplus_lr_ratio;
        if (ratio > 0 && ratio != 1.0f)
            adamw_loraplus(tr, &a, use_lr, ratio);
        else
            be->adamw_step(tr->ctx, &a, tr->P, tr->G, tr->M, tr->V, n, use_lr, tr->decay);
        AF_TRY(be->sync(tr->ctx));
        tr->adam_t = a.t;
    }
    const int64_t step = tr->step_count++;
    tr->mb_in_step = 0;
    clear_grad(tr);
    if (grad_norm) *grad_norm = gn;
    if (!ok)
        return af_fail(AF_ERR_RANGE,
                       "%s: step %lld skipped: %s is not finite (first non-finite value: %s; parameters and "
                       "optimizer state unchanged, gradient cleared)",
                       fn, (long long)step, was_nonfinite_loss ? "a micro-batch loss" : "the gradient norm",
                       tr->nf_where);
    return AF_OK;
}

af_status af_lora_trainer_forward(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                  int32_t n_samples, float *logits) {
    static const char *fn = "af_lora_trainer_forward";
    AF_TRY(check_call(tr, fn, tokens, seq_start, n_samples));
    if (!logits) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL logits", fn);
    af_batch b = {tokens, seq_start, n_samples, seq_start[n_samples], NULL, NULL, NULL};
    af_step_opts so = {(af_pooling)tr->o.pooling, NULL, 0, 0, 0};
    af_status st = af_engine_forward(tr->eng, tr->P, &b, &so, logits);
    return st == AF_OK ? AF_OK : af_lt_refail(st, fn);
}

uint64_t af_lora_trainer_micro_id(const af_lora_trainer *tr, int64_t i) {
    const int64_t spe = tr->o.steps_per_epoch, a = tr->o.grad_accum;
    return (uint64_t)(spe > 0 && a > 0 ? (tr->step_count % spe) * a + i : i);
}

int64_t af_lora_trainer_step_count(const af_lora_trainer *tr) {
    return tr ? tr->step_count : 0;
}

int64_t af_lora_trainer_n_params(const af_lora_trainer *tr) {
    return tr ? tr->lay.n_total : 0;
}
