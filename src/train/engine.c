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
#include "kernels/ctx.h"

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

/* Lay out (or count) the whole workspace for `cap` tokens and `n_sets` activation sets. */
static void plan(af_carver *cv, af_engine *e, const af_model *m, const af_param_layout *lay, int64_t cap,
                 int32_t n_sets) {
    const int64_t H = m->cfg.hidden_size, L = m->cfg.num_hidden_layers;
    const int masks = lay->lora.dropout > 0;
    const int64_t lo = af_lora_lowest_layer(lay);
    af_engine tmp;
    af_tf_acts stmp;
    if (!e) e = &tmp;
    e->xs = af_carve(cv, (L - lo + 1) * cap * H);
    e->pos = (int32_t *)af_carve(cv, cap);
    af_tf_carve_scratch(cv, &e->ws, m, lay, cap, AF_TF_TRAIN, masks);
    e->hN = af_carve(cv, cap * H);
    e->rstdN = af_carve(cv, cap);
    e->ple = m->desc.ple_dim > 0 ? af_carve(cv, cap * L * m->desc.ple_dim) : NULL;
    for (int32_t l = 0; l < L && m->desc.n_kv_shared > 0; l++) /* K/V (and their gradients) later layers reuse */
        for (int k = 0; k < 4; k++) {
            const int own = af_tf_kv_shared_src(m, l);
            float *p = own ? af_carve(cv, cap * (int64_t)m->layers[l].n_kv_head * m->layers[l].head_dim) : NULL;
            if (cv->base && e->kvs) e->kvs[k * L + l] = p;
        }
    e->sub_tok = (int32_t *)af_carve(cv, cap);
    e->sub_ss = (int32_t *)af_carve(cv, cap + 1);
    e->sub_idx = (int32_t *)af_carve(cv, cap);
    for (int32_t i = 0; i < n_sets; i++)
        af_tf_carve_acts(cv, (cv->base && e->sets) ? &e->sets[i] : &stmp, m, lay, cap, AF_TF_TRAIN, masks);
}

size_t af_engine_bytes(const af_model *model, const af_param_layout *lay, int64_t n_tok, int checkpointing) {
    af_carver cv = {NULL, 0};
    const int32_t n_adapted = model->cfg.num_hidden_layers - af_lora_lowest_layer(lay);
    plan(&cv, NULL, model, lay, n_tok, checkpointing || n_adapted < 1 ? 1 : n_adapted);
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
    af_engine *e = af_calloc(1, sizeof *e);
    if (!e) return af_fail(AF_ERR_NOMEM, "engine: out of memory");
    e->ctx = ctx ? ctx : model->ctx;
    e->m = model;
    e->lay = lay;
    e->lo = af_lora_lowest_layer(lay);
    e->block_rows = BLOCK_ROWS;
    if (model->desc.n_kv_shared > 0 &&
        !(e->kvs = af_calloc(4 * (size_t)model->cfg.num_hidden_layers, sizeof *e->kvs))) {
        free(e);
        return af_fail(AF_ERR_NOMEM, "engine: out of memory");
    }
    *out = e;
    return AF_OK;
}

const af_ctx *af_engine_ctx(const af_engine *e) { return e ? e->ctx : NULL; }

void af_engine_free(af_engine *e) {
    if (!e) return;
    engine_pc_clear(&e->pc);
    af_free_aligned(e->mem);
    af_free_aligned(e->lm_scr);
    free(e->sets);
    free(e->kvs);
    free(e);
}

/* Make room for n tokens and at least `n_sets` activation sets. */
af_status engine_reserve(af_engine *e, int64_t n, int32_t n_sets) {
    if (e->mem && n <= e->cap && n_sets <= e->n_sets) return AF_OK;
    int64_t cap = n > e->cap ? n : e->cap;
    if (n_sets < e->n_sets) n_sets = e->n_sets;
    af_carver cv = {NULL, 0};
    plan(&cv, NULL, e->m, e->lay, cap, n_sets);
    af_free_aligned(e->mem);
    free(e->sets);
    e->mem = NULL;
    e->cap = 0;
    e->n_sets = 0;
    e->sets = af_calloc((size_t)n_sets, sizeof(af_tf_acts));
    e->mem = af_malloc_aligned(cv.used);
    if (!e->mem || !e->sets) {
        af_free_aligned(e->mem);
        free(e->sets);
        e->mem = NULL;
        e->sets = NULL;
        return af_fail(AF_ERR_NOMEM, "engine: out of memory for a workspace of %zu bytes (%lld tokens)", cv.used,
                       (long long)cap);
    }
    cv.base = e->mem;
    cv.used = 0;
    plan(&cv, e, e->m, e->lay, cap, n_sets);
    e->cap = cap;
    e->n_sets = n_sets;
    return AF_OK;
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

void engine_set_pos(af_engine *e, const int32_t *ss, int32_t B) {
    for (int32_t s = 0; s < B; s++)
        for (int32_t t = ss[s]; t < ss[s + 1]; t++) e->pos[t] = t - ss[s];
}

/* The frozen prefix for the R->B samples of R (tokens [R->n]): embedding and layers 0..lo-1 into
 * out [R->n, H] (out must not be dT or dh). Nothing is kept: the residual stream ping-pongs between
 * the scratch buffers dT and dh (unused in the forward) and the activations go to set 0, which
 * layer lo overwrites next. Leaves e->pos set for R. */
void engine_frozen_prefix(af_engine *e, const af_tf_run *R, const int32_t *tokens, float *out) {
    const af_model *m = e->m;
    const int64_t H = m->cfg.hidden_size, n = R->n;
    const int32_t lo = e->lo;
    engine_set_pos(e, R->ss, R->B);
    float *x = lo == 0 ? out : e->ws.dT;
    af_tf_embed(m, tokens, n, x);
    probe(R, x, n * H, "model.embed_tokens output");
    for (int32_t l = 0; l < lo; l++) {
        if (engine_cancelled(e)) return;
        float *xo = l == lo - 1 ? out : x == e->ws.dT ? e->ws.dh : e->ws.dT;
        af_tf_layer_forward(R, l, &e->sets[0], x, xo);
        x = xo;
    }
}

/* Embedding, positions and every layer; final normed states in e->hN, pooled [B, H] and logits
 * (pooled == NULL, causal LM: stops after the last layer; the LM head loss does the final norm).
 * The frozen layers below e->lo run without keeping anything (engine_frozen_prefix), or come from
 * the prefix cache. Only layers lo.. keep their input (xs) and, with `save`, their own activation
 * set. */
void engine_forward_all(af_engine *e, const af_tf_run *R, const af_batch *b, int save, float *pooled, float *logits,
                        af_pooling pool) {
    const af_model *m = e->m;
    const int64_t n = R->n, H = m->cfg.hidden_size, L = m->cfg.num_hidden_layers;
    const int32_t lo = e->lo;
    if (e->ple) { /* per-layer inputs of every token (hN is free until the final norm) */
        af_tf_embed(m, b->tokens, n, e->hN);
        af_tf_ple_inputs(R, b->tokens, e->hN, e->ple);
    }
    /* the prefix cache keeps only the residual stream: not with PLE inputs or K/V reused above lo */
    const int cache_ok = !m->desc.ple_dim && !m->desc.n_kv_shared;
    if (lo > 0 && e->pc.max_bytes > 0 && !e->probe && cache_ok) engine_prefix_cached(e, R, b);
    else engine_frozen_prefix(e, R, b->tokens, engine_xs_at(e, lo, n));
    engine_set_pos(e, b->seq_start, b->n_samples);
    for (int32_t l = lo; l < L; l++) {
        if (engine_cancelled(e)) return;
        af_tf_acts *S = &e->sets[save ? l - lo : 0];
        af_tf_layer_forward(R, l, S, engine_xs_at(e, l, n), engine_xs_at(e, l + 1, n));
    }
    if (!pooled || engine_cancelled(e)) return;
    af_tf_final_norm(e->ctx, m, e->hN, e->rstdN, engine_xs_at(e, L, n), n);
    probe(R, e->hN, n * H, "model.norm output");
    af_pool_forward(pooled, e->hN, b->seq_start, b->n_samples, H, pool);
    probe(R, pooled, b->n_samples * H, "pooled hidden state");
    const af_param_layout *lay = e->lay;
    af_head_forward(e->ctx, logits, pooled, R->P + lay->head_w_off, R->P + lay->head_b_off, b->n_samples, H,
                    lay->num_classes);
    probe(R, logits, (int64_t)b->n_samples * lay->num_classes, "score output (logits)");
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
    const int64_t H = e->m->cfg.hidden_size;
    float *pooled = af_malloc(sizeof(float) * (size_t)(b->n_samples * H));
    if (!pooled) return af_fail(AF_ERR_NOMEM, "engine forward: out of memory");
    af_tf_run R = engine_run(e, P, b->seq_start, b->n_samples, b->n_tok, o->train && e->lay->lora.dropout > 0,
                             o->dropout_seed);
    engine_forward_all(e, &R, b, 0, pooled, logits, o->pooling);
    free(pooled);
    return engine_cancelled(e) ? af_fail(AF_ERR_CANCELLED, "engine forward: cancelled") : AF_OK;
}

static void zero(float *p, int64_t n) { memset(p, 0, sizeof(float) * (size_t)n); }

/* The walk's backward from e->ws.dX = dL/d(last layer output) down to the lowest adapted layer
 * only (nothing below it is trainable), recomputing each layer's activations first when
 * checkpointing. LoRA gradients are ADDED into G. */
static void backward_layers(af_engine *e, const af_tf_run *R, float *G, int ckpt) {
    const int64_t NL = e->m->cfg.num_hidden_layers, n = R->n;
    const int32_t lo = e->lo;
    for (int64_t l = 0; e->kvs && l < NL; l++) /* gradients w.r.t. reused K/V: summed over their readers */
        if (R->kv_dk[l]) {
            const int64_t kvd = (int64_t)e->m->layers[l].n_kv_head * e->m->layers[l].head_dim;
            zero(R->kv_dk[l], n * kvd);
            zero(R->kv_dv[l], n * kvd);
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
    const int64_t H = m->cfg.hidden_size, NL = m->cfg.num_hidden_layers;
    const int ckpt = o->checkpointing != 0;
    const int32_t lo = e->lo;
    AF_TRY(engine_reserve(e, b->n_tok, ckpt || lo >= NL - 1 ? 1 : (int32_t)NL - lo));
    const int32_t B = b->n_samples, C = lay->num_classes;
    const int64_t n = b->n_tok;
    float *small = af_malloc(sizeof(float) * (size_t)(2 * B * H + 2 * B * C));
    if (!small) return af_fail(AF_ERR_NOMEM, "engine step: out of memory");
    float *pooled = small, *dpooled = small + B * H, *lg = dpooled + B * H, *dlg = lg + B * C;
    af_tf_run R = engine_run(e, P, b->seq_start, B, n, o->train && lay->lora.dropout > 0, o->dropout_seed);
    engine_forward_all(e, &R, b, !ckpt, pooled, lg, o->pooling);
    if (engine_cancelled(e)) {
        free(small);
        return af_fail(AF_ERR_CANCELLED, "engine step: cancelled in the forward");
    }
    if (logits) memcpy(logits, lg, sizeof(float) * (size_t)(B * C));
    double L = b->labels ? af_ce_loss(dlg, NULL, lg, b->labels, o->class_w, B, C)
                         : af_bce_loss(dlg, lg, b->multi_hot, B, C);
    *loss = L;
    if (!isfinite(L)) { /* the caller decides (skip the step); no gradient is added */
        free(small);
        return AF_OK;
    }
    for (int64_t i = 0; i < (int64_t)B * C; i++) dlg[i] *= grad_scale;
    zero(dpooled, B * H);
    af_head_backward(e->ctx, dpooled, G + lay->head_w_off, G + lay->head_b_off, dlg, pooled, P + lay->head_w_off, B, H, C);
    af_tf_scratch *ws = &e->ws;
    zero(ws->dT, n * H);
    af_pool_backward(ws->dT, dpooled, b->seq_start, B, H, o->pooling);
    zero(ws->dX, n * H);
    af_tf_final_norm_backward(e->ctx, m, ws->dX, ws->dT, engine_xs_at(e, NL, n), e->rstdN, n);
    backward_layers(e, &R, G, ckpt);
    free(small);
    return engine_cancelled(e) ? af_fail(AF_ERR_CANCELLED, "engine step: cancelled in the backward") : AF_OK;
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
    const int64_t NL = m->cfg.num_hidden_layers, n = b->n_tok;
    const int grad = G != NULL, ckpt = o->checkpointing != 0 || !grad;
    const int32_t lo = e->lo;
    AF_TRY(engine_reserve(e, n, ckpt || lo >= NL - 1 ? 1 : (int32_t)NL - lo));
    if (!e->lm_scr) {
        e->lm_scr = af_malloc_aligned(sizeof(float) * (size_t)af_lm_head_scratch_floats(m));
        if (!e->lm_scr) return af_fail(AF_ERR_NOMEM, "engine LM step: out of memory for the logits chunk");
    }
    af_tf_run R = engine_run(e, P, b->seq_start, b->n_samples, n, o->train && e->lay->lora.dropout > 0,
                             o->dropout_seed);
    engine_forward_all(e, &R, b, !ckpt, NULL, NULL, o->pooling);
    if (engine_cancelled(e)) return af_fail(AF_ERR_CANCELLED, "engine LM step: cancelled in the forward");
    af_tf_scratch *ws = &e->ws;
    if (grad) zero(ws->dX, n * m->cfg.hidden_size);
    af_lm_head_loss(e->ctx, m, engine_xs_at(e, NL, n), b->targets, n, e->hN, e->rstdN, grad ? ws->dX : NULL,
                    grad_scale, e->lm_scr, res);
    if (!grad || !isfinite(res->loss_sum)) return AF_OK; /* non-finite: no gradient added (caller skips) */
    backward_layers(e, &R, G, o->checkpointing != 0);
    return engine_cancelled(e) ? af_fail(AF_ERR_CANCELLED, "engine LM step: cancelled in the backward") : AF_OK;
}
