/*
 * engine.c — the training engine (engine.h): workspace (the residual stream of layers lo.. and the
 * activation sets of the layer walk, model/transformer.h), batch checks and the driver of a step:
 * embedding, frozen prefix (or engine_prefix.c's cache), the walk's layers in training mode, final
 * norm, pooled classification head (head.h) and loss, then the walk's backward down to layer lo.
 * The non-finite probe is in engine_probe.c.
 *
 * Layer range: layers below lo (the lowest layer with an adapter) are frozen: they run forward
 * without keeping anything (or come from the per-sample frozen-prefix cache), and the backward
 * stops in layer lo below its lowest adapter (af_tf_layer_backward's need_* flags).
 * Memory: the residual stream entering every layer from lo up (and the final one) is kept,
 * [n_layers-lo+1, n, H]. Without checkpointing each layer >= lo keeps its own activation set
 * (training-save); with checkpointing there is ONE set, refilled by recomputing the layer's
 * forward from its saved input just before its backward (training-recompute; Chen et al. 2016).
 */
#include "train/engine_internal.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/ctx.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Token blocking of the frozen-weight products (af_engine_set_block_rows). The micro-kernel reuses
 * a dequantized weight tile for every row of its call, streaming x (or dy) once per tile: with the
 * 2048 rows of a 16 x 128 batch that stream (2 MiB per 256 columns) no longer fits the per-core L2
 * and a product runs ~1.6-2x slower per multiply-add than with 128-512 rows (measured on Zen 4,
 * SmolLM2 Q4_1 gate/down/q, one thread). The engine therefore cuts the rows into blocks of about
 * BLOCK_ROWS and, when there are at least as many blocks as threads, gives whole blocks to the
 * pool's threads (each block one single-threaded kernel call: equal shares for every matrix shape,
 * whereas the kernel's own split can be uneven, e.g. 5 column chunks of dy·W over 2 threads).
 * Every row's arithmetic is unchanged (the kernel's per-row summation order does not depend on the
 * rows beside it), so results are bitwise those of one call (transformer.c mm_blocks). */
#define BLOCK_ROWS 256

/* Lay out (or count) the whole workspace for `cap` tokens and `n_sets` activation sets (device
 * memory; the host arrays xs and sets are filled when e != NULL in the carve pass). */
static void plan(af_carver *cv, af_engine *e, const af_model *m, const af_param_layout *lay, int64_t cap,
                 int32_t n_sets) {
    const int64_t H = m->cfg.hidden_size, L = m->cfg.num_hidden_layers;
    const int64_t C = lay->num_classes > 0 ? lay->num_classes : 1;
    const int masks = lay->lora.dropout > 0;
    const int64_t lo = af_lora_lowest_layer(lay);
    af_engine tmp;
    af_tf_acts stmp;
    const int fill = e != NULL;
    if (!e) e = &tmp;
    for (int64_t l = lo; l <= L; l++) { /* one region per layer: no single buffer of [L, cap, H] */
        float *x = af_carve(cv, cap * H);
        if (fill) e->xs[l - lo] = x;
    }
    e->pos = (int32_t *)af_carve(cv, cap);
    e->tok = (int32_t *)af_carve(cv, cap);
    e->ss = (int32_t *)af_carve(cv, cap + 1);
    e->lab = (int32_t *)af_carve(cv, cap);
    e->mh = af_carve(cv, cap * C);
    e->cw = af_carve(cv, C);
    e->pooled = af_carve(cv, cap * H);
    e->dpooled = af_carve(cv, cap * H);
    e->lg = af_carve(cv, cap * C);
    e->dlg = af_carve(cv, cap * C);
    af_tf_carve_scratch(cv, &e->ws, m, lay, cap, AF_TF_TRAIN, masks);
    e->hN = af_carve(cv, cap * H);
    e->rstdN = af_carve(cv, cap);
    e->ple = m->desc.ple_dim > 0 ? af_carve(cv, cap * L * m->desc.ple_dim) : NULL;
    for (int32_t l = 0; l < L && m->desc.n_kv_shared > 0; l++) /* K/V (and their gradients) later layers reuse */
        for (int k = 0; k < 4; k++) {
            const int own = af_tf_kv_shared_src(m, l);
            float *p = own ? af_carve(cv, cap * (int64_t)m->layers[l].n_kv_head * m->layers[l].head_dim) : NULL;
            if (fill && e->kvs) e->kvs[k * L + l] = p;
        }
    for (int32_t i = 0; i < n_sets; i++)
        af_tf_carve_acts(cv, fill ? &e->sets[i] : &stmp, m, lay, cap, AF_TF_TRAIN, masks);
}

static size_t dev_limit(const af_ctx *ctx) {
    const uint64_t m = ctx->dev->info.max_alloc;
    return m == UINT64_MAX ? 0 : (size_t)m;
}

size_t af_engine_bytes(const af_model *model, const af_param_layout *lay, int64_t n_tok, int checkpointing) {
    af_carver cv;
    af_carver_count(&cv, 0);
    const int32_t n_adapted = model->cfg.num_hidden_layers - af_lora_lowest_layer(lay);
    plan(&cv, NULL, model, lay, n_tok, checkpointing || n_adapted < 1 ? 1 : n_adapted);
    af_carver_done(&cv);
    /* a layout without a classification head is a causal-LM run: + the LM head's logits chunk */
    if (lay->num_classes <= 0) cv.used += sizeof(float) * (size_t)af_lm_head_scratch_floats(model);
    return cv.used;
}

af_status af_engine_new(const af_ctx *ctx, const af_model *model, const af_param_layout *lay, af_engine **out) {
    if (!model || !lay || !out) return af_fail(AF_ERR_INVALID_ARG, "engine: NULL argument");
    *out = NULL;
    if (lay->n_layers != model->cfg.num_hidden_layers || lay->hidden != model->cfg.hidden_size)
        return af_fail(AF_ERR_INVALID_ARG, "engine: parameter layout (%d layers, hidden %d) does not match the "
                                           "model (%d layers, hidden %d)",
                       lay->n_layers, lay->hidden, model->cfg.num_hidden_layers, model->cfg.hidden_size);
    if (!ctx) ctx = model->ctx;
    AF_TRY(af_model_check_ctx(model, ctx));
    af_engine *e = af_calloc(1, sizeof *e);
    if (!e) return af_fail(AF_ERR_NOMEM, "engine: out of memory");
    e->ctx = ctx;
    e->m = model;
    e->lay = lay;
    e->lo = af_lora_lowest_layer(lay);
    e->block_rows = BLOCK_ROWS;
    if (model->desc.n_kv_shared > 0 &&
        !(e->kvs = af_calloc(4 * (size_t)model->cfg.num_hidden_layers, sizeof *e->kvs))) {
        free(e);
        return af_fail(AF_ERR_NOMEM, "engine: out of memory");
    }
    if (lay->init_P) { /* PiSSA / OLoRA: the frozen initial adapter, subtracted in every forward */
        const af_backend *be = af_be(ctx);
        const size_t bytes = sizeof(float) * (size_t)lay->n_lora;
        af_status st = (e->P0 = be->alloc(ctx, bytes)) ? be->upload(ctx, e->P0, lay->init_P, bytes)
                                                      : af_fail(AF_ERR_NOMEM, "engine: out of device memory");
        if (st != AF_OK) {
            af_engine_free(e);
            return st;
        }
    }
    *out = e;
    return AF_OK;
}

static void free_work(af_engine *e) {
    af_devmem_free(&e->mem);
    free(e->sets), free(e->xs), free(e->pos_host), free(e->sub_tok), free(e->sub_ss), free(e->sub_idx);
    e->sets = NULL, e->xs = NULL, e->pos_host = e->sub_tok = e->sub_ss = e->sub_idx = NULL;
    e->cap = 0;
    e->n_sets = 0;
}

const af_ctx *af_engine_ctx(const af_engine *e) { return e ? e->ctx : NULL; }

int64_t af_engine_capacity(const af_engine *e) { return e && e->mem.n ? e->cap : 0; }

void af_engine_free(af_engine *e) {
    if (!e) return;
    engine_pc_clear(&e->pc);
    free_work(e);
    af_be(e->ctx)->free(e->ctx, e->lm_scr);
    af_be(e->ctx)->free(e->ctx, e->P0);
    free(e->kvs);
    free(e);
}

/* engine_reserve for a capacity of `cap` tokens and `n_sets` sets (the workspace re-made). */
static af_status engine_reserve_cap(af_engine *e, int64_t cap, int32_t n_sets) {
    free_work(e);
    af_carver cv;
    af_carver_count(&cv, dev_limit(e->ctx));
    plan(&cv, NULL, e->m, e->lay, cap, n_sets);
    const int64_t nx = e->m->cfg.num_hidden_layers - e->lo + 1;
    e->sets = af_calloc((size_t)n_sets, sizeof(af_tf_acts));
    e->xs = af_calloc((size_t)nx, sizeof(float *));
    e->pos_host = af_malloc(sizeof(int32_t) * (size_t)cap);
    e->sub_tok = af_malloc(sizeof(int32_t) * (size_t)cap);
    e->sub_ss = af_malloc(sizeof(int32_t) * (size_t)(cap + 1));
    e->sub_idx = af_malloc(sizeof(int32_t) * (size_t)cap);
    const size_t bytes = cv.used;
    af_status st = e->sets && e->xs && e->pos_host && e->sub_tok && e->sub_ss && e->sub_idx
                       ? af_carver_alloc(&cv, e->ctx, &e->mem)
                       : af_fail(AF_ERR_NOMEM, "out of memory");
    if (st != AF_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        af_carver_done(&cv);
        free_work(e);
        return af_fail(st, "engine: a workspace of %.1f MiB (%lld tokens) on device %s: %s", (double)bytes / 1048576.0,
                       (long long)cap, af_ctx_device(e->ctx), msg);
    }
    plan(&cv, e, e->m, e->lay, cap, n_sets);
    e->cap = cap;
    e->n_sets = n_sets;
    return AF_OK;
}

/* Make room for n tokens and at least `n_sets` activation sets. A workspace that must grow for
 * more tokens grows by at least an eighth (batches of uneven length, --no-packing or evaluation,
 * would otherwise re-allocate it, and fault its pages in again, at each longer batch: 3 of the first
 * 6 steps of the suite's SFT run, ~700 MB of page faults each), or to exactly n when that larger
 * workspace cannot be had. */
af_status engine_reserve(af_engine *e, int64_t n, int32_t n_sets) {
    if (e->mem.n && n <= e->cap && n_sets <= e->n_sets) return AF_OK;
    const int64_t need = n > e->cap ? n : e->cap;
    const int64_t grown = e->mem.n && n > e->cap && e->cap + e->cap / 8 > n ? e->cap + e->cap / 8 : need;
    if (n_sets < e->n_sets) n_sets = e->n_sets;
    af_status st = engine_reserve_cap(e, grown, n_sets);
    if (st != AF_OK && grown > need) st = engine_reserve_cap(e, need, n_sets);
    return st;
}

af_tf_run engine_run(af_engine *e, const float *P, const int32_t *ss, int32_t B, int64_t n, int drop, uint64_t seed) {
    af_tf_run R;
    memset(&R, 0, sizeof R);
    R.ctx = e->ctx;
    R.m = e->m;
    R.mode = AF_TF_TRAIN;
    R.n = n;
    R.pos = e->pos;
    R.ws = &e->ws;
    R.P = P;
    R.lay = e->lay;
    R.lora_scale = e->lay->scale;
    R.P0 = e->P0;
    R.drop = drop;
    R.seed = seed;
    R.ss = ss;
    R.B = B;
    R.block_rows = e->block_rows;
    R.probe = e->probe ? engine_probe : NULL;
    R.probe_ctx = e;
    R.ple = e->ple; /* filled by engine_forward_all */
    if (e->kvs) {
        const int64_t L = e->m->cfg.num_hidden_layers;
        R.kv_k = e->kvs;
        R.kv_v = e->kvs + L;
        R.kv_dk = e->kvs + 2 * L;
        R.kv_dv = e->kvs + 3 * L;
    }
    return R;
}

static void probe(const af_tf_run *R, const float *x, int64_t n, const char *what) {
    if (R->probe) R->probe(R->probe_ctx, x, n, -1, what, "");
}

af_status engine_check_batch(const af_engine *e, const af_batch *b, int need_labels) {
    const af_model *m = e->m;
    const af_param_layout *lay = e->lay;
    if (!b || !b->tokens || !b->seq_start) return af_fail(AF_ERR_INVALID_ARG, "batch: NULL tokens or seq_start");
    if (!b->targets && (lay->num_classes <= 0 || lay->head_w_off < 0))
        return af_fail(AF_ERR_INVALID_ARG, "batch: the parameter layout has no classification head");
    if (b->n_samples < 1) return af_fail(AF_ERR_INVALID_ARG, "batch: n_samples = %d < 1", b->n_samples);
    if (b->seq_start[0] != 0) return af_fail(AF_ERR_INVALID_ARG, "batch: seq_start[0] = %d, expected 0", b->seq_start[0]);
    for (int32_t i = 0; i < b->n_samples; i++)
        if (b->seq_start[i + 1] <= b->seq_start[i])
            return af_fail(AF_ERR_INVALID_ARG, "batch: sample %d is empty or seq_start decreases (%d -> %d)", i,
                           b->seq_start[i], b->seq_start[i + 1]);
    if (b->seq_start[b->n_samples] != b->n_tok)
        return af_fail(AF_ERR_INVALID_ARG, "batch: seq_start[%d] = %d but n_tok = %lld", b->n_samples,
                       b->seq_start[b->n_samples], (long long)b->n_tok);
    for (int64_t t = 0; t < b->n_tok; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= m->cfg.vocab_size)
            return af_fail(AF_ERR_INVALID_ARG, "batch: token %d at position %lld is outside the vocabulary [0, %d)",
                           b->tokens[t], (long long)t, m->cfg.vocab_size);
    if (b->targets) {
        for (int64_t t = 0; t < b->n_tok; t++)
            if (b->targets[t] < -1 || b->targets[t] >= m->cfg.vocab_size)
                return af_fail(AF_ERR_INVALID_ARG,
                               "batch: target %d at position %lld is neither -1 nor in the vocabulary [0, %d)",
                               b->targets[t], (long long)t, m->cfg.vocab_size);
        return AF_OK;
    }
    if (need_labels) {
        if (!b->labels && !b->multi_hot) return af_fail(AF_ERR_INVALID_ARG, "batch: no labels and no multi_hot targets");
        if (b->labels)
            for (int32_t i = 0; i < b->n_samples; i++)
                if (b->labels[i] < 0 || b->labels[i] >= lay->num_classes)
                    return af_fail(AF_ERR_INVALID_ARG, "batch: label %d of sample %d is outside [0, %d)", b->labels[i],
                                   i, lay->num_classes);
    }
    return AF_OK;
}

af_status engine_set_pos(af_engine *e, const int32_t *ss, int32_t B) {
    for (int32_t s = 0; s < B; s++)
        for (int32_t t = ss[s]; t < ss[s + 1]; t++) e->pos_host[t] = t - ss[s];
    return af_be(e->ctx)->upload(e->ctx, e->pos, e->pos_host, sizeof(int32_t) * (size_t)ss[B]);
}

/* The frozen prefix for the R->B samples of R (host tokens [R->n]): embedding and layers 0..lo-1
 * into out [R->n, H] (out must not be dT or dh). Nothing is kept: the residual stream ping-pongs
 * between the scratch buffers dT and dh (unused in the forward) and the activations go to set 0,
 * which layer lo overwrites next. Leaves e->pos set for R. */
af_status engine_frozen_prefix(af_engine *e, const af_tf_run *R, const int32_t *tokens, float *out) {
    const af_model *m = e->m;
    const int64_t H = m->cfg.hidden_size, n = R->n;
    const int32_t lo = e->lo;
    AF_TRY(engine_set_pos(e, R->ss, R->B));
    AF_TRY(af_be(e->ctx)->upload(e->ctx, e->tok, tokens, sizeof(int32_t) * (size_t)n));
    float *x = lo == 0 ? out : e->ws.dT;
    af_tf_embed(e->ctx, m, e->tok, n, x);
    probe(R, x, n * H, "model.embed_tokens output");
    for (int32_t l = 0; l < lo; l++) {
        if (engine_cancelled(e)) return AF_OK; /* the caller reads the flag */
        float *xo = l == lo - 1 ? out : x == e->ws.dT ? e->ws.dh : e->ws.dT;
        af_tf_layer_forward(R, l, &e->sets[0], x, xo);
        x = xo;
    }
    return AF_OK;
}

af_status engine_forward_all(af_engine *e, const af_tf_run *R, const af_batch *b, int save, int head, af_pooling pool) {
    const af_model *m = e->m;
    const af_backend *be = af_be(e->ctx);
    const int64_t n = R->n, H = m->cfg.hidden_size, L = m->cfg.num_hidden_layers;
    const int32_t lo = e->lo;
    if (e->ple) { /* per-layer inputs of every token (hN is free until the final norm) */
        AF_TRY(be->upload(e->ctx, e->tok, b->tokens, sizeof(int32_t) * (size_t)n));
        af_tf_embed(e->ctx, m, e->tok, n, e->hN);
        af_tf_ple_inputs(R, e->tok, e->hN, e->ple);
    }
    /* the prefix cache keeps only the residual stream: not with PLE inputs or K/V reused above lo */
    const int cache_ok = !m->desc.ple_dim && !m->desc.n_kv_shared;
    if (lo > 0 && e->pc.max_bytes > 0 && !e->probe && cache_ok) AF_TRY(engine_prefix_cached(e, R, b));
    else AF_TRY(engine_frozen_prefix(e, R, b->tokens, engine_xs_at(e, lo, n)));
    AF_TRY(engine_set_pos(e, b->seq_start, b->n_samples));
    for (int32_t l = lo; l < L; l++) {
        if (engine_cancelled(e)) return AF_OK; /* the caller reads the flag */
        af_tf_acts *S = &e->sets[save ? l - lo : 0];
        af_tf_layer_forward(R, l, S, engine_xs_at(e, l, n), engine_xs_at(e, l + 1, n));
    }
    if (!head || engine_cancelled(e)) return AF_OK;
    af_tf_final_norm(e->ctx, m, e->hN, e->rstdN, engine_xs_at(e, L, n), n);
    probe(R, e->hN, n * H, "model.norm output");
    AF_TRY(be->upload(e->ctx, e->ss, b->seq_start, sizeof(int32_t) * (size_t)(b->n_samples + 1)));
    be->pool_forward(e->ctx, e->pooled, e->hN, e->ss, b->n_samples, H, pool);
    probe(R, e->pooled, b->n_samples * H, "pooled hidden state");
    const af_param_layout *lay = e->lay;
    be->head_forward(e->ctx, e->lg, e->pooled, R->P + lay->head_w_off, R->P + lay->head_b_off, b->n_samples, H,
                     lay->num_classes);
    probe(R, e->lg, (int64_t)b->n_samples * lay->num_classes, "score output (logits)");
    return AF_OK;
}

int32_t af_engine_first_layer(const af_engine *e) { return e->lo; }

void af_engine_set_block_rows(af_engine *e, int64_t rows) {
    if (e) e->block_rows = rows <= 0 ? 0 : rows < 4 * AF_TF_MIN_ROWS ? 4 * AF_TF_MIN_ROWS : rows;
}

static const af_step_opts default_opts = {AF_POOL_MEAN, NULL, 0, 0, 0};

af_status af_engine_forward(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o, float *logits) {
    if (!e || !P || !logits) return af_fail(AF_ERR_INVALID_ARG, "engine forward: NULL argument");
    if (!o) o = &default_opts;
    AF_TRY(engine_check_batch(e, b, 0));
    AF_TRY(engine_reserve(e, b->n_tok, 1));
    af_tf_run R = engine_run(e, P, b->seq_start, b->n_samples, b->n_tok, o->train && e->lay->lora.dropout > 0,
                             o->dropout_seed);
    AF_TRY(engine_forward_all(e, &R, b, 0, 1, o->pooling));
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine forward: cancelled");
    return af_be(e->ctx)->download(e->ctx, logits, e->lg, sizeof(float) * (size_t)b->n_samples * (size_t)e->lay->num_classes);
}

/* The walk's backward from e->ws.dX = dL/d(last layer output) down to the lowest adapted layer
 * only (nothing below it is trainable), recomputing each layer's activations first when
 * checkpointing. LoRA gradients are ADDED into G. */
static void backward_layers(af_engine *e, const af_tf_run *R, float *G, int ckpt) {
    const int64_t NL = e->m->cfg.num_hidden_layers, n = R->n;
    const int32_t lo = e->lo;
    for (int64_t l = 0; e->kvs && l < NL; l++) /* gradients w.r.t. reused K/V: summed over their readers */
        if (R->kv_dk[l]) {
            const int64_t kvd = (int64_t)e->m->layers[l].n_kv_head * e->m->layers[l].head_dim;
            af_be(e->ctx)->fill(e->ctx, R->kv_dk[l], 0.0f, n * kvd);
            af_be(e->ctx)->fill(e->ctx, R->kv_dv[l], 0.0f, n * kvd);
        }
    for (int32_t l = (int32_t)NL - 1; l >= lo; l--) {
        if (engine_cancelled(e)) return;
        const float *x = engine_xs_at(e, l, n);
        af_tf_acts *S = &e->sets[ckpt ? 0 : l - lo];
        if (ckpt) af_tf_layer_forward(R, l, S, x, engine_xs_at(e, l + 1, n)); /* recompute */
        af_tf_layer_backward(R, l, S, G, x, l > lo);
    }
}

af_status af_engine_step(af_engine *e, const float *P, float *G, const af_batch *b, const af_step_opts *o,
                         float grad_scale, double *loss, float *logits) {
    if (!e || !P || !G || !loss) return af_fail(AF_ERR_INVALID_ARG, "engine step: NULL argument");
    if (!o) o = &default_opts;
    AF_TRY(engine_check_batch(e, b, 1));
    const af_model *m = e->m;
    const af_param_layout *lay = e->lay;
    const af_backend *be = af_be(e->ctx);
    const af_ctx *ctx = e->ctx;
    const int64_t H = m->cfg.hidden_size, NL = m->cfg.num_hidden_layers;
    const int ckpt = o->checkpointing != 0;
    const int32_t lo = e->lo;
    AF_TRY(engine_reserve(e, b->n_tok, ckpt || lo >= NL - 1 ? 1 : (int32_t)NL - lo));
    const int32_t B = b->n_samples, C = lay->num_classes;
    const int64_t n = b->n_tok;
    af_tf_run R = engine_run(e, P, b->seq_start, B, n, o->train && lay->lora.dropout > 0, o->dropout_seed);
    AF_TRY(engine_forward_all(e, &R, b, !ckpt, 1, o->pooling));
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine step: cancelled in the forward");
    if (logits) AF_TRY(be->download(ctx, logits, e->lg, sizeof(float) * (size_t)(B * C)));
    double L;
    if (b->labels) {
        AF_TRY(be->upload(ctx, e->lab, b->labels, sizeof(int32_t) * (size_t)B));
        if (o->class_w) AF_TRY(be->upload(ctx, e->cw, o->class_w, sizeof(float) * (size_t)C));
        L = be->ce_loss(ctx, e->dlg, NULL, e->lg, e->lab, o->class_w ? e->cw : NULL, B, C);
    } else {
        AF_TRY(be->upload(ctx, e->mh, b->multi_hot, sizeof(float) * (size_t)(B * C)));
        L = be->bce_loss(ctx, e->dlg, e->lg, e->mh, B, C);
    }
    *loss = L;
    if (!isfinite(L)) return af_device_status(ctx->dev); /* the caller decides (skip the step); no gradient is added */
    be->scale(ctx, e->dlg, grad_scale, (int64_t)B * C);
    be->fill(ctx, e->dpooled, 0.0f, B * H);
    be->head_backward(ctx, e->dpooled, G + lay->head_w_off, G + lay->head_b_off, e->dlg, e->pooled, P + lay->head_w_off,
                      B, H, C);
    af_tf_scratch *ws = &e->ws;
    be->fill(ctx, ws->dT, 0.0f, n * H);
    be->pool_backward(ctx, ws->dT, e->dpooled, e->ss, B, H, o->pooling);
    be->fill(ctx, ws->dX, 0.0f, n * H);
    af_tf_final_norm_backward(ctx, m, ws->dX, ws->dT, engine_xs_at(e, NL, n), e->rstdN, n);
    backward_layers(e, &R, G, ckpt);
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine step: cancelled in the backward");
    return be->sync(ctx);
}

void af_engine_set_cancel(af_engine *e, const volatile int *cancel) {
    if (e) e->cancel = cancel;
}

/* ---------------------------------------------------------------- causal LM */

af_status af_engine_lm_step(af_engine *e, const float *P, float *G, const af_batch *b, const af_step_opts *o,
                            float grad_scale, af_lm_loss *res) {
    if (!e || !P || !b || !res) return af_fail(AF_ERR_INVALID_ARG, "engine LM step: NULL argument");
    if (!b->targets) return af_fail(AF_ERR_INVALID_ARG, "engine LM step: the batch has no next-token targets");
    if (!o) o = &default_opts;
    AF_TRY(engine_check_batch(e, b, 0));
    const af_model *m = e->m;
    const af_backend *be = af_be(e->ctx);
    const int64_t NL = m->cfg.num_hidden_layers, n = b->n_tok;
    const int grad = G != NULL, ckpt = o->checkpointing != 0 || !grad;
    const int32_t lo = e->lo;
    AF_TRY(engine_reserve(e, n, ckpt || lo >= NL - 1 ? 1 : (int32_t)NL - lo));
    if (!e->lm_scr) {
        e->lm_scr = be->alloc(e->ctx, sizeof(float) * (size_t)af_lm_head_scratch_floats(m));
        if (!e->lm_scr) return af_fail(AF_ERR_NOMEM, "engine LM step: the logits chunk: %s", af_last_error());
    }
    af_tf_run R = engine_run(e, P, b->seq_start, b->n_samples, n, o->train && e->lay->lora.dropout > 0,
                             o->dropout_seed);
    AF_TRY(engine_forward_all(e, &R, b, !ckpt, 0, o->pooling));
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine LM step: cancelled in the forward");
    af_tf_scratch *ws = &e->ws;
    if (grad) be->fill(e->ctx, ws->dX, 0.0f, n * m->cfg.hidden_size);
    af_lm_head_loss(e->ctx, m, engine_xs_at(e, NL, n), b->targets, n, e->hN, e->rstdN, grad ? ws->dX : NULL,
                    grad_scale, e->lm_scr, res);
    if (!grad || !isfinite(res->loss_sum)) /* non-finite: no gradient added (caller skips) */
        return af_device_status(e->ctx->dev);
    backward_layers(e, &R, G, o->checkpointing != 0);
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine LM step: cancelled in the backward");
    return be->sync(e->ctx);
}
