/*
 * transformer.c — the one layer walk (transformer.h): forward for inference and training, backward
 * for training, with LoRA on every projection; also the embedding. The final norm, the LM head
 * and its loss are in transformer_head.c, the inference state (KV cache, the decode walk) in
 * transformer_infer.c, the walk's buffers (activations, scratch) in transformer_mem.c. Every kernel call of the model's forward and backward is in these files,
 * and every one goes through the context's backend table (kernels/backend.h af_be): activations, parameters and gradients are
 * device memory, read and written only by the table's ops.
 *
 * Architecture differences are read from m->desc (model.h af_arch_desc), never from the
 * architecture's name.
 *
 * Training backward: the reverse of the forward (ops.h backward functions, af_matmul_dyw for the
 * frozen weights, af_lora_backward for the adapters). act = glu(gate, up) and the norm outputs h1,
 * h2 are not saved: the backward recomputes them from saved inputs and rstd (one pass each, same
 * bits; "selective recomputation", Korthikanti et al. 2022). Dropout masks come from a
 * counter-based RNG keyed by (seed, layer, proj, token), so a recomputation regenerates the same
 * masks (checkpointing: Chen et al. 2016).
 *
 * Training MLP, where the backend has the optional fused ops (backend.h mlp_gate_up,
 * mlp_down_back; the CPU): act = glu(gate, up) is formed in the epilogue of the up product, and
 * d gate, d up in the epilogue of d act = dy·W_down, unless adapters sit on those projections
 * (then the sequence below; bit for bit the same results either way).
 */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/ctx.h"
#include "lora/dora.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* AF_TF_MIN_ROWS: when the context has int8_activations on, af_matmul_xwt quantizes the
 * activations to int8 for very small n (matmul.c decode regime, n <= AF_MM_DECODE_N = 4): not
 * differentiable and not f32-exact. Training products with fewer than AF_TF_MIN_ROWS rows are
 * computed on a zero-padded copy so the training forward is f32-exact for every row count and
 * every process setting. Inference calls the kernel on its rows as they are (decode speed). */
#define MIN_ROWS AF_TF_MIN_ROWS

/* One layer's sizes (transformer.h af_tf_dims; maxd 0). */
static af_tf_dims layer_dims(const af_model *m, int32_t l) {
    const af_layer *L = &m->layers[l];
    af_tf_dims d;
    d.H = m->cfg.hidden_size;
    d.F = L->n_ff;
    d.nh = L->n_head;
    d.nkv = L->n_kv_head;
    d.hd = L->head_dim;
    d.qd = d.nh * d.hd;
    d.kvd = d.nkv * d.hd;
    d.P = m->desc.ple_dim;
    d.maxd = 0;
    return d;
}

/* Device views of a layer's vectors and weights: the host ones on a host-memory device (the CPU:
 * the walk then reads exactly what it read before the table), else the model's imports. */
#define LV(R, Ly, f) ((R)->ctx->dev->info.host_memory ? (Ly)->f : (Ly)->dv.f)
#define ONES(R) ((R)->ctx->dev->info.host_memory ? (R)->m->ones : (R)->m->ones_dev)

/* ---------------------------------------------------------------- frozen products */

/* Training frozen-weight product over n >= MIN_ROWS rows (token-blocked by the backend, R->block_rows):
 *   dyw = 0: y[n, out] (+)= x[n, in] · Wᵀ;   dyw = 1: y[n, in] (+)= x[n, out] · W */
static void mm_blocks(const af_tf_run *R, int dyw, float *y, const float *x, const af_weight *w, int64_t n,
                      int accumulate) {
    uint32_t type;
    const void *wd = af_weight_dev(R->ctx, w, &type);
    af_be(R->ctx)->matmul_rows(R->ctx, dyw, y, x, wd, type, n, w->cols, w->rows, accumulate, R->block_rows);
}

/* Parts flushed per matmul_xwt_parts call (several sequences: products x row groups); products
 * of one input handed together (q, k, v). */
#define GROUP_PARTS 48
#define GROUP_MAX 3

/* 1 when the inference product of weight w stays exact f32 under int8 activations: its class
 * (a layer's q/k/v, o, gate/up, down, or other, found from w's place in m->layers) is not in
 * ctx->int8_roles (kernels/ctx.h; a benchmark setting, all classes by default). */
static int int8_exact(const af_tf_run *R, const af_weight *w) {
    const int roles = R->ctx->int8_roles;
    if (!R->ctx->int8_act || roles == AF_INT8_ALL) return 0;
    const uintptr_t a = (uintptr_t)w, b = (uintptr_t)R->m->layers;
    int role = AF_INT8_OTHER;
    if (a >= b && a < b + sizeof(af_layer) * (size_t)R->m->cfg.num_hidden_layers) {
        const size_t off = (a - b) % sizeof(af_layer);
        if (off == offsetof(af_layer, wq) || off == offsetof(af_layer, wk) || off == offsetof(af_layer, wv))
            role = AF_INT8_QKV;
        else if (off == offsetof(af_layer, wo)) role = AF_INT8_O;
        else if (off == offsetof(af_layer, w_gate) || off == offsetof(af_layer, w_up)) role = AF_INT8_GATEUP;
        else if (off == offsetof(af_layer, w_down)) role = AF_INT8_DOWN;
    }
    return !(roles & role);
}

/* Inference: y[k] [n, out_k] = x[n, in] · W[k]ᵀ for np products of one input, handed to the
 * backend together (matmul_xwt_parts: on the CPU one parallel region for the decode-sized ones).
 * Several sequences (af_tf_infer_forward_multi): short ones packed into decode-regime products of
 * <= AF_TF_DECODE_ROWS rows, consecutive longer ones (prompt pieces) into one blocked product (its
 * per-row bits do not depend on the row count, matmul.h): each row's bits as alone. */
static void mm_infer(const af_tf_run *R, int np, float *const *y, const float *x, const af_weight *const *w) {
    const af_backend *be = af_be(R->ctx);
    const int64_t in = w[0]->cols;
    const void *wd[GROUP_MAX];
    uint32_t type[GROUP_MAX];
    int exact[GROUP_MAX];
    for (int k = 0; k < np; k++) { /* once per product, not per row group */
        wd[k] = af_weight_dev(R->ctx, w[k], &type[k]);
        exact[k] = int8_exact(R, w[k]);
    }
    af_mm_part parts[GROUP_PARTS];
    int n_parts = 0;
    int64_t r0 = 0;
    for (int32_t i = 0; i < (R->n_seq > 0 ? R->n_seq : 1);) {
        int64_t rows = R->n_seq > 0 ? R->seq[i].n : R->n;
        int32_t j = i + 1;
        if (R->n_seq > 0 && rows <= AF_TF_DECODE_ROWS)
            while (j < R->n_seq && rows + R->seq[j].n <= AF_TF_DECODE_ROWS) rows += R->seq[j++].n;
        else if (R->n_seq > 0)
            while (j < R->n_seq && R->seq[j].n > AF_TF_DECODE_ROWS) rows += R->seq[j++].n;
        for (int k = 0; k < np; k++)
            parts[n_parts++] = (af_mm_part){.y = y[k] + r0 * w[k]->rows, .x = x + r0 * in, .w = wd[k], .type = type[k],
                                            .n = rows, .in = in, .out = w[k]->rows, .exact = exact[k]};
        if (n_parts + np > GROUP_PARTS) {
            be->matmul_xwt_parts(R->ctx, parts, n_parts);
            n_parts = 0;
        }
        r0 += rows;
        i = j;
    }
    if (n_parts > 0) be->matmul_xwt_parts(R->ctx, parts, n_parts);
}

/* y[n, out] = x[n, in] · Wᵀ: inference mm_infer; training f32-exact for every n (MIN_ROWS) and
 * token-blocked. */
static void mm_xwt(const af_tf_run *R, float *y, const float *x, const af_weight *w) {
    const int64_t in = w->cols, out = w->rows, n = R->n;
    const af_backend *be = af_be(R->ctx);
    if (R->mode == AF_TF_INFER) {
        mm_infer(R, 1, &y, x, &w);
        return;
    }
    uint32_t type;
    const void *wd = af_weight_dev(R->ctx, w, &type);
    if (n >= MIN_ROWS) {
        mm_blocks(R, 0, y, x, w, n, 0);
        return;
    }
    af_tf_scratch *ws = R->ws;
    be->copy(R->ctx, ws->padx, x, sizeof(float) * (size_t)(n * in));
    be->fill(R->ctx, ws->padx + n * in, 0.0f, (MIN_ROWS - n) * in);
    be->matmul_xwt(R->ctx, ws->pady, ws->padx, wd, type, MIN_ROWS, in, out, 0);
    be->copy(R->ctx, y, ws->pady, sizeof(float) * (size_t)(n * out));
}

static void probe(const af_tf_run *R, const float *x, int64_t n, int32_t l, const char *what, const char *what2) {
    if (R->probe) R->probe(R->probe_ctx, x, n, l, what, what2);
}

/* The adapter slot of (l, p), or NULL when the run has no adapter there. */
static const af_lora_slot *lora_slot(const af_tf_run *R, int32_t l, af_proj p) {
    if (!R->P || !R->lay) return NULL;
    const af_lora_slot *s = af_lora_slot_at(R->lay, l, p);
    return s->a_off >= 0 ? s : NULL;
}

static int adapted(const af_tf_run *R, int32_t l, af_proj p) { return lora_slot(R, l, p) != NULL; }

/* The dropout mask of adapter slot s at (l, p) for this forward, filled into S->mask[p]; NULL when the
 * run has no dropout there. */
static float *lora_mask(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_lora_slot *s) {
    if (!R->drop || !S->mask[p]) return NULL;
    af_be(R->ctx)->lora_dropout_mask(R->ctx, S->mask[p], R->seed, l, p, 0, R->n, s->in, R->lay->lora.dropout);
    return S->mask[p];
}

/* The plain adapter of (l, p) (no DoRA, no PiSSA / OLoRA residual) as the backend's one-call ops
 * take it (kernels/train_ops.h af_lora_args) in *a, and its slot; NULL when p has none or it is not
 * plain. G: the
 * gradients (backward: its mask as the forward left it, dA, dB, scratch, and the MLP's act as down's
 * input), NULL in the forward, which fills the dropout mask (lora_mask). */
static const af_lora_slot *lora_args(const af_tf_run *R, af_tf_acts *S, float *G, int32_t l, af_proj p,
                                     af_lora_args *a) {
    const af_lora_slot *s = lora_slot(R, l, p);
    if (!s || R->lay->lora.use_dora || R->P0) return NULL;
    *a = (af_lora_args){.A = R->P + s->a_off, .B = R->P + s->b_off, .xa = S->xa[p], .r = R->lay->lora.r,
                        .scale = R->lora_scale};
    if (G) {
        a->drop_mask = R->drop ? S->mask[p] : NULL;
        a->dA = G + s->a_off, a->dB = G + s->b_off, a->tmp = R->ws->ltmp, a->x = R->ws->act;
    } else
        a->drop_mask = lora_mask(R, S, l, p, s);
    return s;
}

/* DoRA projection (lora/dora.h; PEFT DoraLinearVariant.forward), y = x·Wᵀ on entry (no bias yet):
 *   no dropout:  y_pre = y + s·x·Aᵀ·Bᵀ,  y = g ⊙ y_pre
 *   dropout:     y_pre = x_d·Wᵀ + s·x_d·Aᵀ·Bᵀ,  y = x·Wᵀ − x_d·Wᵀ + g ⊙ y_pre
 * with g = m / ||W + s·B·A||_row (norm and y_pre kept in S for the backward). Host memory (the CPU
 * backend: DoRA runs nowhere else). */
static void dora_fwd(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_lora_slot *s,
                     const af_weight *w, float *y, const float *x, const float *mask) {
    const af_param_layout *lay = R->lay;
    const int64_t n = R->n, in = s->in, out = s->out;
    const int32_t r = lay->lora.r;
    const float *A = R->P + s->a_off, *B = R->P + s->b_off, *m = R->P + s->m_off;
    float *nrm = S->dora_n[p], *yp = S->dora_y[p];
    af_tf_infer *c = out <= (R->dora_cache ? R->dora_cache->dora_stride : 0) ? R->dora_cache : NULL;
    const int64_t slot = (int64_t)l * AF_PROJ_COUNT + p;
    if (c && c->dora_nrm && (c->dora_P != R->P || c->dora_scale != R->lora_scale)) { /* another adapter or scale */
        memset(c->dora_ok, 0, (size_t)R->lay->n_layers * AF_PROJ_COUNT);
        c->dora_P = R->P, c->dora_scale = R->lora_scale;
    }
    if (c && c->dora_nrm) nrm = c->dora_nrm + slot * c->dora_stride; /* inference: once per adapter */
    uint32_t type;
    const void *wd = af_weight_dev(R->ctx, w, &type);
    if (!c || !c->dora_nrm || !c->dora_ok[slot])
        af_dora_weight_norm(R->ctx, nrm, wd, type, A, B, in, out, r, R->lora_scale);
    if (c && c->dora_nrm) c->dora_ok[slot] = 1;
    if (!mask) {
        memcpy(yp, y, sizeof(float) * (size_t)(n * out));
        af_be(R->ctx)->lora_forward(R->ctx, yp, S->xa[p], x, NULL, A, B, n, in, out, r, R->lora_scale);
        af_dora_scale(y, yp, m, nrm, n, out, 0.0f);
        return;
    }
    float *xd = R->ws->dora_a, *gy = R->ws->dora_b;
    for (int64_t k = 0; k < n * in; k++) xd[k] = x[k] * mask[k];
    mm_xwt(R, yp, xd, w);
    for (int64_t k = 0; k < n * out; k++) y[k] -= yp[k];
    af_be(R->ctx)->lora_forward(R->ctx, yp, S->xa[p], x, mask, A, B, n, in, out, r, R->lora_scale);
    af_dora_scale(gy, yp, m, nrm, n, out, 0.0f);
    for (int64_t k = 0; k < n * out; k++) y[k] += gy[k];
}

/* Projection p of layer l after its frozen product (y = x·Wᵀ on entry): the bias and the LoRA /
 * DoRA correction when p has an adapter (proj_fwd). */
static void proj_finish(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_weight *w,
                        const float *bias, float *y, const float *x) {
    const af_backend *be = af_be(R->ctx);
    if (R->n_seq == 0 && R->lay && R->lay->lora.use_dora && lora_slot(R, l, p)) { /* DoRA: the bias stays unscaled */
        const af_lora_slot *s = lora_slot(R, l, p);
        dora_fwd(R, S, l, p, s, w, y, x, lora_mask(R, S, l, p, s));
        if (bias) be->add_bias(R->ctx, y, bias, R->n, w->rows);
        if (R->probe) {
            char md[48];
            snprintf(md, sizeof md, "%s%s", p <= AF_PROJ_O ? "self_attn." : "mlp.", af_proj_name(p));
            probe(R, y, R->n * w->rows, l, md, " output (DoRA)");
        }
        return;
    }
    if (bias) be->add_bias(R->ctx, y, bias, R->n, w->rows);
    char mod[48] = "";
    if (R->probe) snprintf(mod, sizeof mod, "%s%s", p <= AF_PROJ_O ? "self_attn." : "mlp.", af_proj_name(p));
    probe(R, y, R->n * w->rows, l, mod, " output (frozen weight product)");
    if (R->n_seq > 0) { /* several sequences: each one's own adapters on its rows, in order */
        int64_t r0 = 0;
        for (int32_t i = 0; i < R->n_seq; i++) {
            const af_tf_seq *q = &R->seq[i];
            for (int32_t k = 0; k < q->n_lora; k++) {
                const af_tf_lora *a = &q->lora[k];
                const af_lora_slot *qs = a->P && a->lay ? af_lora_slot_at(a->lay, l, p) : NULL;
                if (qs && qs->a_off >= 0)
                    af_be(R->ctx)->lora_forward(R->ctx, y + r0 * w->rows, R->xa, x + r0 * qs->in, NULL, a->P + qs->a_off,
                                                a->P + qs->b_off, q->n, qs->in, qs->out, a->lay->lora.r, a->scale);
            }
            r0 += q->n;
        }
        return;
    }
    const af_lora_slot *s = lora_slot(R, l, p);
    if (!s) return;
    const af_param_layout *lay = R->lay;
    const float *mask = lora_mask(R, S, l, p, s);
    af_be(R->ctx)->lora_forward(R->ctx, y, S->xa[p], x, mask, R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r,
                    R->lora_scale);
    if (R->P0) /* PiSSA / OLoRA: the frozen residual W − s·B0·A0, on the undropped input as PEFT's base layer */
        af_be(R->ctx)->lora_forward(R->ctx, y, R->ws->xa0, x, NULL, R->P0 + s->a_off, R->P0 + s->b_off, R->n, s->in,
                                    s->out, lay->lora.r, -R->lora_scale);
    probe(R, y, R->n * w->rows, l, mod, " output (after adding the LoRA correction)");
}

/* Training, a backend with the fused op (backend.h proj_lora_forward): y = x·Wᵀ plus the LoRA
 * correction of (l, p) in one call, for a plain adapter (no DoRA, no PiSSA / OLoRA residual) on a
 * projection without bias, no probe to see the frozen product alone. Returns 0 when it does not apply
 * (the caller runs mm_xwt, then proj_finish: what the CPU's op runs in f32, bit for bit). */
static int lora_fused_fwd(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_weight *w,
                          const float *bias, float *y, const float *x) {
    const af_backend *be = af_be(R->ctx);
    af_lora_args a;
    const af_lora_slot *s;
    if (!be->proj_lora_forward || R->mode != AF_TF_TRAIN || R->n_seq > 0 || R->n < MIN_ROWS || R->probe || bias ||
        !(s = lora_args(R, S, NULL, l, p, &a)))
        return 0;
    uint32_t type;
    const void *wd = af_weight_dev(R->ctx, w, &type);
    be->proj_lora_forward(R->ctx, y, a.xa, x, a.drop_mask, wd, type, a.A, a.B, R->n, s->in, s->out, a.r, a.scale,
                          R->block_rows);
    return 1;
}

/* Projection p of layer l: y = x·Wᵀ (+ bias) plus the LoRA correction when p has an adapter. */
static void proj_fwd(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_weight *w,
                     const float *bias, float *y, const float *x) {
    if (lora_fused_fwd(R, S, l, p, w, bias, y, x)) return;
    mm_xwt(R, y, x, w);
    proj_finish(R, S, l, p, w, bias, y, x);
}

/* The q, k and v products of h1 (np of them: ys, ws, biases as the layer has them): in training
 * each one with its LoRA correction in one call where lora_fused_fwd applies (done[k] = 1: the
 * caller skips its proj_finish), the others' frozen products alone (done[k] = 0); in inference
 * one group (one parallel region in decode). */
static void qkv_products(const af_tf_run *R, af_tf_acts *S, int32_t l, int np, float *const *ys, const float *h1,
                         const af_weight *const *ws, const float *const *bias, int done[3]) {
    static const af_proj P[3] = {AF_PROJ_Q, AF_PROJ_K, AF_PROJ_V};
    for (int k = 0; k < 3; k++) done[k] = 0;
    if (R->mode == AF_TF_INFER) {
        mm_infer(R, np, ys, h1, ws); /* one parallel region in decode */
        return;
    }
    for (int k = 0; k < np; k++)
        if (!(done[k] = lora_fused_fwd(R, S, l, P[k], ws[k], bias[k], ys[k], h1))) mm_xwt(R, ys[k], h1, ws[k]);
}

/* Output projection p of a branch (o_proj, down_proj) of input `in`, followed by the sandwich
 * post-norm when the description has one (raw: the projection output kept for its backward, rstd
 * its norm statistics): returns the branch output to add to the residual stream (ws->tH). */
static const float *branch_out(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_weight *w,
                               const float *in, float *raw, float *rstd, const float *post_norm) {
    af_tf_scratch *ws = R->ws;
    if (!R->m->desc.sandwich_norm) {
        proj_fwd(R, S, l, p, w, NULL, ws->tH, in);
        return ws->tH;
    }
    proj_fwd(R, S, l, p, w, NULL, raw, in);
    af_be(R->ctx)->rmsnorm_forward(R->ctx, ws->tH, rstd, raw, post_norm, R->n, R->m->cfg.hidden_size, R->m->cfg.rms_norm_eps);
    return ws->tH;
}

static void glu_forward(const af_ctx *ctx, const af_model *m, float *act, const float *gate, const float *up, int64_t n) {
    if (m->desc.act == AF_ACT_GEGLU_TANH) af_be(ctx)->geglu_forward(ctx, act, gate, up, n);
    else af_be(ctx)->swiglu_forward(ctx, act, gate, up, n);
}

/* ---------------------------------------------------------------- forward */

void af_tf_embed(const af_ctx *ctx, const af_model *m, const int32_t *tokens, int64_t n, float *x) {
    uint32_t type;
    const void *w = af_weight_dev(ctx, &m->tok_embd, &type);
    af_be(ctx)->embed(ctx, x, tokens, n, w, type, m->cfg.hidden_size, m->desc.embd_scale);
}

void af_tf_ple_inputs(const af_tf_run *R, const int32_t *tokens, const float *xemb, float *out) {
    const af_model *m = R->m;
    const af_backend *be = af_be(R->ctx);
    const int32_t L = m->cfg.num_hidden_layers;
    const int64_t n = R->n, P = m->desc.ple_dim, LP = (int64_t)L * P;
    const float ps = (float)(1.0 / sqrt((double)m->cfg.hidden_size)), ts = (float)sqrt((double)P),
                is = (float)(1.0 / sqrt(2.0));
    mm_xwt(R, out, xemb, &m->ple_model_proj); /* [n, L·P] */
    be->scale(R->ctx, out, ps, n * LP);
    be->rmsnorm_forward(R->ctx, out, NULL, out, R->ctx->dev->info.host_memory ? m->ple_proj_norm : m->ple_proj_norm_dev,
                        n * L, P, m->cfg.rms_norm_eps);
    /* out = (out + token row · ts) · is, MIN_ROWS tokens at a time (the rows gathered into ple_tok) */
    float *tok = R->ws->ple_tok;
    uint32_t type;
    const void *w = af_weight_dev(R->ctx, &m->ple_tok_embd, &type);
    for (int64_t t0 = 0; t0 < n; t0 += MIN_ROWS) {
        const int64_t k = n - t0 < MIN_ROWS ? n - t0 : MIN_ROWS;
        be->embed(R->ctx, tok, tokens + t0, k, w, type, LP, ts);
        be->add(R->ctx, out + t0 * LP, out + t0 * LP, tok, k * LP);
        be->scale(R->ctx, out + t0 * LP, is, k * LP);
    }
    /* the row indices of every layer's slice (ple_slice): row t·L + l of out seen as [n·L, P] */
    int32_t *idx = af_malloc(sizeof(int32_t) * (size_t)(n * L));
    if (!idx) return; /* (a host allocation of n·L ints; the slices then stay unset) */
    for (int32_t l = 0; l < L; l++)
        for (int64_t t = 0; t < n; t++) idx[l * n + t] = (int32_t)(t * L + l);
    be->upload(R->ctx, R->ws->ple_idx, idx, sizeof(int32_t) * (size_t)(n * L)); /* errors: sticky on the device */
    free(idx);
}

/* The layer's slice of the per-layer inputs, R->ple [n, L, P] -> dst [n, P] (rows gathered by the
 * indices af_tf_ple_inputs uploaded). */
static void ple_slice(const af_tf_run *R, int32_t l, float *dst) {
    af_be(R->ctx)->rows_gather(R->ctx, dst, R->ple, R->ws->ple_idx + (int64_t)l * R->n, R->n, R->m->desc.ple_dim);
}

/* K and V the layer attends to in training (its own, or the stored ones of layer kv_src). */
static void train_kv(const af_tf_run *R, int32_t l, af_tf_acts *S, const float **k, const float **v) {
    const int32_t src = R->m->layers[l].kv_src;
    *k = src == l ? S->k : R->kv_k[src];
    *v = src == l ? S->v : R->kv_v[src];
}

/* Attention of the layer: training per packed sample over its own (or layer kv_src's) q/k/v
 * (keeping lse); inference appends k/v to the layer's cache slot (a KV-sharing layer reads the slot
 * of kv_src, filled earlier in the same call) and attends over positions [0, n_past + n). */
static void attention(const af_tf_run *R, int32_t l, af_tf_acts *S, const af_tf_dims *d) {
    const af_model *m = R->m;
    const af_layer *Ly = &m->layers[l];
    const float scale = m->desc.attn_scale;
    const int64_t n = R->n;
    const af_backend *be = af_be(R->ctx);
    if (R->mode == AF_TF_INFER && R->n_seq > 0) { /* several sequences: each over its own cache */
        int64_t r0 = 0;
        for (int32_t i = 0; i < R->n_seq; i++) {
            const af_tf_seq *q = &R->seq[i];
            float *kc = af_tf_kv_layer(m, q->k_cache, l), *vc = af_tf_kv_layer(m, q->v_cache, l);
            if (Ly->kv_src == l) { /* a layer that reuses an earlier layer's K/V appends nothing */
                be->copy(R->ctx, kc + (size_t)q->n_past * (size_t)d->kvd, S->k + r0 * d->kvd, sizeof(float) * (size_t)(q->n * d->kvd));
                be->copy(R->ctx, vc + (size_t)q->n_past * (size_t)d->kvd, S->v + r0 * d->kvd, sizeof(float) * (size_t)(q->n * d->kvd));
            }
            af_be(R->ctx)->attention_forward(R->ctx, S->attn + r0 * d->qd, NULL, S->q + r0 * d->qd, kc, vc, q->n, q->n_past,
                                 q->n_past + q->n, d->kvd, d->nh, d->nkv, d->hd, scale, Ly->window);
            r0 += q->n;
        }
        return;
    }
    if (R->mode == AF_TF_INFER) {
        float *kc = af_tf_kv_layer(m, R->k_cache, l), *vc = af_tf_kv_layer(m, R->v_cache, l);
        if (Ly->kv_src == l) {
            be->copy(R->ctx, kc + (size_t)R->n_past * (size_t)d->kvd, S->k, sizeof(float) * (size_t)(n * d->kvd));
            be->copy(R->ctx, vc + (size_t)R->n_past * (size_t)d->kvd, S->v, sizeof(float) * (size_t)(n * d->kvd));
        }
        af_be(R->ctx)->attention_forward(R->ctx, S->attn, NULL, S->q, kc, vc, n, R->n_past, R->n_past + n, d->kvd, d->nh, d->nkv,
                             d->hd, scale, Ly->window);
        return;
    }
    const float *k, *v;
    train_kv(R, l, S, &k, &v);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_be(R->ctx)->attention_forward(R->ctx, S->attn + s0 * d->qd, S->lse + s0 * d->nh, S->q + s0 * d->qd, k + s0 * d->kvd,
                             v + s0 * d->kvd, len, 0, len, d->kvd, d->nh, d->nkv, d->hd, scale, Ly->window);
    }
}

/* Where the k and v projections of layer l write (before their norms; v is k's with v_from_k). */
static float *k_out(const af_tf_run *R, af_tf_acts *S) { return R->m->desc.qk_norm ? S->kraw : S->k; }
static float *v_out(const af_tf_run *R, int32_t l, af_tf_acts *S) {
    if (R->m->layers[l].v_from_k) return k_out(R, S); /* attention_k_eq_v: v is the k projection */
    return R->m->desc.v_norm ? S->vraw : S->v;
}

/* K and V of a layer with its own K/V after their frozen products (in k_out / v_out): bias and
 * LoRA, k norm, unweighted v norm, RoPE of k; stored for later layers when they reuse them
 * (training). */
static void own_kv_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const af_tf_dims *d, const float *h1,
                           const int done[3]) {
    const af_model *m = R->m;
    const af_arch_desc *D = &m->desc;
    const af_layer *Ly = &m->layers[l];
    const float eps = m->cfg.rms_norm_eps;
    const int64_t n = R->n;
    if (!done[1]) proj_finish(R, S, l, AF_PROJ_K, &Ly->wk, D->qkv_bias ? LV(R, Ly, bk) : NULL, k_out(R, S), h1);
    float *vr = v_out(R, l, S);
    if (!Ly->v_from_k && !done[2])
        proj_finish(R, S, l, AF_PROJ_V, &Ly->wv, D->qkv_bias ? LV(R, Ly, bv) : NULL, vr, h1);
    if (D->v_norm) af_be(R->ctx)->rmsnorm_forward(R->ctx, S->v, S->rstdv, vr, ONES(R), n * d->nkv, d->hd, eps);
    if (D->qk_norm) af_be(R->ctx)->rmsnorm_forward(R->ctx, S->k, S->rstdk, S->kraw, LV(R, Ly, k_norm), n * d->nkv, d->hd, eps);
    af_be(R->ctx)->rope_forward(R->ctx, S->k, R->pos, n, d->nkv, d->hd, Ly->rope_base, D->rope_neox, LV(R, Ly, rope_freq_factors));
    if (R->mode == AF_TF_TRAIN && R->kv_k && R->kv_k[l]) {
        af_be(R->ctx)->copy(R->ctx, R->kv_k[l], S->k, sizeof(float) * (size_t)(n * d->kvd));
        af_be(R->ctx)->copy(R->ctx, R->kv_v[l], S->v, sizeof(float) * (size_t)(n * d->kvd));
    }
}

/* The per-layer input branch (desc.ple_dim): x [n, H] += rmsnorm((gelu(x·Wgᵀ)·pl)·Wpᵀ)·post_norm. */
static void ple_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const af_tf_dims *d, float *x) {
    const af_layer *Ly = &R->m->layers[l];
    af_tf_scratch *ws = R->ws;
    mm_xwt(R, S->ple_g, x, &Ly->ple_gate);
    ple_slice(R, l, ws->ple_in);
    af_be(R->ctx)->geglu_forward(R->ctx, ws->ple_act, S->ple_g, ws->ple_in, R->n * d->P);
    mm_xwt(R, S->ple_raw, ws->ple_act, &Ly->ple_proj);
    af_be(R->ctx)->rmsnorm_forward(R->ctx, ws->tH, S->rstdple, S->ple_raw, LV(R, Ly, ple_post_norm), R->n, d->H, R->m->cfg.rms_norm_eps);
    af_be(R->ctx)->add(R->ctx, x, x, ws->tH, R->n * d->H);
}

/* lora_args for the backend's fused MLP ops: *out = a, or NULL when p has no adapter; 0 when the ops
 * cannot take it (DoRA, a PiSSA / OLoRA residual). */
static int mlp_lora(const af_tf_run *R, af_tf_acts *S, float *G, int32_t l, af_proj p, af_lora_args *a,
                    const af_lora_args **out) {
    *out = NULL;
    if (!adapted(R, l, p)) return 1;
    if (!lora_args(R, S, G, l, p, a)) return 0;
    *out = a;
    return 1;
}

/* Training: gate, up (with their adapters) and act = glu(gate, up) as one fused op of the backend
 * (backend.h mlp_gate_up: the activation in the epilogue of the up product; the same bits as the
 * two projections, as proj_fwd runs them, and glu_forward) when it has one and no probe is to see
 * their outputs. Returns 0 when the caller must run the sequence. */
static int mlp_fused_fwd(const af_tf_run *R, int32_t l, af_tf_acts *S, const af_tf_dims *d, const float *h2) {
    const af_backend *be = af_be(R->ctx);
    if (!be->mlp_gate_up || R->mode != AF_TF_TRAIN || R->n_seq > 0 || R->n < MIN_ROWS || R->probe) return 0;
    if ((adapted(R, l, AF_PROJ_GATE) || adapted(R, l, AF_PROJ_UP)) && !be->proj_lora_forward) return 0;
    af_lora_args ag, au;
    const af_lora_args *lg, *lu;
    if (!mlp_lora(R, S, NULL, l, AF_PROJ_GATE, &ag, &lg) || !mlp_lora(R, S, NULL, l, AF_PROJ_UP, &au, &lu)) return 0;
    const af_layer *Ly = &R->m->layers[l];
    uint32_t tg, tu;
    const void *wg = af_weight_dev(R->ctx, &Ly->w_gate, &tg), *wu = af_weight_dev(R->ctx, &Ly->w_up, &tu);
    be->mlp_gate_up(R->ctx, S->gate, S->up, R->ws->act, h2, wg, tg, wu, tu, R->n, d->H, d->F,
                    R->m->desc.act == AF_ACT_GEGLU_TANH, R->block_rows, lg, lu);
    return 1;
}

void af_tf_layer_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const float *x, float *xo) {
    const af_model *m = R->m;
    const af_arch_desc *D = &m->desc;
    const af_layer *Ly = &m->layers[l];
    const af_tf_dims d = layer_dims(m, l);
    const float eps = m->cfg.rms_norm_eps;
    const int64_t n = R->n;
    af_tf_scratch *ws = R->ws;
    float *h1 = ws->hs; /* scratch: recomputed from x and rstd1 by the backward when needed */
    af_be(R->ctx)->rmsnorm_forward(R->ctx, h1, S->rstd1, x, LV(R, Ly, attn_norm), n, d.H, eps);
    probe(R, h1, n * d.H, l, "input_layernorm output", "");
    /* the q, k and v products of h1 */
    float *qo = D->qk_norm ? S->qraw : S->q, *ys[3] = {qo, k_out(R, S), v_out(R, l, S)};
    const af_weight *ws3[3] = {&Ly->wq, &Ly->wk, &Ly->wv};
    const float *b3[3] = {D->qkv_bias ? LV(R, Ly, bq) : NULL, D->qkv_bias ? LV(R, Ly, bk) : NULL,
                          D->qkv_bias ? LV(R, Ly, bv) : NULL};
    int done[3];
    qkv_products(R, S, l, Ly->kv_src != l ? 1 : Ly->v_from_k ? 2 : 3, ys, h1, ws3, b3, done);
    if (!done[0]) proj_finish(R, S, l, AF_PROJ_Q, &Ly->wq, b3[0], qo, h1);
    if (D->qk_norm) af_be(R->ctx)->rmsnorm_forward(R->ctx, S->q, S->rstdq, S->qraw, LV(R, Ly, q_norm), n * d.nh, d.hd, eps);
    af_be(R->ctx)->rope_forward(R->ctx, S->q, R->pos, n, d.nh, d.hd, Ly->rope_base, D->rope_neox, LV(R, Ly, rope_freq_factors));
    if (Ly->kv_src == l) own_kv_forward(R, l, S, &d, h1, done);
    attention(R, l, S, &d);
    probe(R, S->q, n * d.qd, l, "self_attn q after norm/RoPE", "");
    if (Ly->kv_src == l) probe(R, S->k, n * d.kvd, l, "self_attn k after norm/RoPE", "");
    probe(R, S->attn, n * d.qd, l, "self_attn attention output (softmax(q·kᵀ)·v)", "");
    const float *o = branch_out(R, S, l, AF_PROJ_O, &Ly->wo, S->attn, S->oraw, S->rstdpa, LV(R, Ly, post_attn_norm));
    af_be(R->ctx)->add(R->ctx, S->xmid, x, o, n * d.H);
    probe(R, S->xmid, n * d.H, l, "residual stream after self_attn", "");
    float *h2 = ws->hs; /* likewise (h1 is no longer needed) */
    af_be(R->ctx)->rmsnorm_forward(R->ctx, h2, S->rstd2, S->xmid, LV(R, Ly, ffn_norm), n, d.H, eps);
    probe(R, h2, n * d.H, l, "post_attention_layernorm output", "");
    if (!mlp_fused_fwd(R, l, S, &d, h2)) {
        float *gu[2] = {S->gate, S->up};
        const af_weight *wgu[2] = {&Ly->w_gate, &Ly->w_up};
        if (R->mode == AF_TF_INFER) {
            mm_infer(R, 2, gu, h2, wgu);
            proj_finish(R, S, l, AF_PROJ_GATE, &Ly->w_gate, NULL, S->gate, h2);
            proj_finish(R, S, l, AF_PROJ_UP, &Ly->w_up, NULL, S->up, h2);
        } else { /* training: one product each, the adapters' fused where they can be */
            proj_fwd(R, S, l, AF_PROJ_GATE, &Ly->w_gate, NULL, S->gate, h2);
            proj_fwd(R, S, l, AF_PROJ_UP, &Ly->w_up, NULL, S->up, h2);
        }
        glu_forward(R->ctx, m, ws->act, S->gate, S->up, n * d.F);
    }
    probe(R, ws->act, n * d.F, l, "mlp activation (act(gate)·up)", "");
    const float *dn = branch_out(R, S, l, AF_PROJ_DOWN, &Ly->w_down, ws->act, S->draw, S->rstdpf, LV(R, Ly, post_ffw_norm));
    af_be(R->ctx)->add(R->ctx, xo, S->xmid, dn, n * d.H);
    if (d.P > 0) {
        ple_forward(R, l, S, &d, xo);
        probe(R, xo, n * d.H, l, "residual stream after the per-layer input", "");
    }
    if (Ly->out_scale != 1.0f)
        af_be(R->ctx)->scale(R->ctx, xo, Ly->out_scale, n * d.H);
    probe(R, xo, n * d.H, l, "output (residual stream after mlp)", "");
}

/* ---------------------------------------------------------------- backward */

/* dx[n, in] (+)= dy[n, out]·W for a frozen weight W [out, in] (training: f32-exact, token-blocked). */
static void frozen_bwd(const af_tf_run *R, float *dx, const float *dy, const af_weight *w, int accumulate) {
    if (R->n >= MIN_ROWS) mm_blocks(R, 1, dx, dy, w, R->n, accumulate);
    else {
        uint32_t type;
        const void *wd = af_weight_dev(R->ctx, w, &type);
        af_be(R->ctx)->matmul_dyw(R->ctx, dx, dy, wd, type, R->n, w->cols, w->rows, accumulate);
    }
}

/* DoRA backward (lora/dora.h), the norm detached: dm += Σ_t dy·y_pre / nrm; dy' = g ⊙ dy drives the LoRA
 * gradients; dx (+)= dy'·W without dropout, dy·W + (((g − 1) ⊙ dy)·W) ⊙ mask with it, + LoRA dx of dy'. */
static void dora_bwd(const af_tf_run *R, af_tf_acts *S, float *G, af_proj p, const af_lora_slot *s,
                     const af_weight *w, float *dx, const float *dy, const float *x, int accumulate) {
    const af_param_layout *lay = R->lay;
    const int64_t n = R->n, in = s->in, out = s->out;
    const float *m = R->P + s->m_off, *nrm = S->dora_n[p], *mask = R->drop ? S->mask[p] : NULL;
    af_dora_dmag(G + s->m_off, dy, S->dora_y[p], nrm, n, out);
    float *dyg = R->ws->dora_a;
    af_dora_scale(dyg, dy, m, nrm, n, out, 0.0f);
    if (dx && !mask) {
        frozen_bwd(R, dx, dyg, w, accumulate);
    } else if (dx) {
        frozen_bwd(R, dx, dy, w, accumulate);
        float *t = R->ws->dora_b, *tmp = R->ws->dora_c;
        af_dora_scale(t, dy, m, nrm, n, out, 1.0f);
        frozen_bwd(R, tmp, t, w, 0);
        for (int64_t k = 0; k < n * in; k++) dx[k] += tmp[k] * mask[k];
    }
    af_be(R->ctx)->lora_backward(R->ctx, dx, G + s->a_off, G + s->b_off, R->ws->ltmp, dyg, x, S->xa[p], mask,
                                 R->P + s->a_off, R->P + s->b_off, n, in, out, lay->lora.r, R->lora_scale);
}

/* Backward of projection p: dx[n, in] (+)= dy·W (+ LoRA dx), LoRA grads into G.
 * dx = NULL: the input gradient is not needed (nothing trainable below): only the LoRA grads. */
static void proj_bwd(const af_tf_run *R, af_tf_acts *S, float *G, int32_t l, af_proj p, const af_weight *w,
                     float *dx, const float *dy, const float *x, int accumulate) {
    const af_lora_slot *s = lora_slot(R, l, p);
    if (s && R->lay->lora.use_dora) {
        dora_bwd(R, S, G, p, s, w, dx, dy, x, accumulate);
        return;
    }
    const af_backend *be = af_be(R->ctx);
    af_lora_args a;
    if (be->proj_lora_backward && R->n >= MIN_ROWS && lora_args(R, S, G, l, p, &a)) { /* one call (backend.h) */
        uint32_t type;
        const void *wd = af_weight_dev(R->ctx, w, &type);
        be->proj_lora_backward(R->ctx, dx, a.dA, a.dB, a.tmp, dy, x, a.xa, a.drop_mask, wd, type, a.A, a.B, R->n, s->in,
                               s->out, a.r, a.scale, accumulate, R->block_rows);
        return;
    }
    if (dx) frozen_bwd(R, dx, dy, w, accumulate);
    if (!s) return;
    const af_param_layout *lay = R->lay;
    af_be(R->ctx)->lora_backward(R->ctx, dx, G + s->a_off, G + s->b_off, R->ws->ltmp, dy, x, S->xa[p], R->drop ? S->mask[p] : NULL,
                     R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r, R->lora_scale);
    if (R->P0 && dx) { /* dx −= s·(dy·B0)·A0; the dA0, dB0 it also forms go to scratch and are dropped */
        const int64_t r = lay->lora.r;
        af_be(R->ctx)->fill(R->ctx, R->ws->g0, 0.0f, r * (s->in + s->out));
        af_be(R->ctx)->lora_backward(R->ctx, dx, R->ws->g0, R->ws->g0 + r * s->in, R->ws->ltmp, dy, x, R->ws->xa0, NULL,
                                     R->P0 + s->a_off, R->P0 + s->b_off, R->n, s->in, s->out, lay->lora.r,
                                     -R->lora_scale);
    }
}


/* Backward of the per-layer input branch: dX [n, H] (d of the branch's output) += d through it. */
static void ple_backward(const af_tf_run *R, int32_t l, af_tf_acts *S, const af_tf_dims *d) {
    const af_layer *Ly = &R->m->layers[l];
    af_tf_scratch *ws = R->ws;
    const int64_t n = R->n;
    af_be(R->ctx)->fill(R->ctx, ws->dT, 0.0f, n * d->H);
    af_be(R->ctx)->rmsnorm_backward(R->ctx, ws->dT, NULL, ws->dX, S->ple_raw, LV(R, Ly, ple_post_norm), S->rstdple, n, d->H);
    frozen_bwd(R, ws->ple_dact, ws->dT, &Ly->ple_proj, 0);
    ple_slice(R, l, ws->ple_in);
    af_be(R->ctx)->fill(R->ctx, ws->ple_dg, 0.0f, n * d->P);
    af_be(R->ctx)->fill(R->ctx, ws->ple_act, 0.0f, n * d->P); /* d of the per-layer input: not needed (frozen), written to scratch */
    af_be(R->ctx)->geglu_backward(R->ctx, ws->ple_dg, ws->ple_act, ws->ple_dact, S->ple_g, ws->ple_in, n * d->P);
    frozen_bwd(R, ws->dX, ws->ple_dg, &Ly->ple_gate, 1);
}

/* dX [n, H]: gradient w.r.t. the layer output on entry, w.r.t. its input x on return when
 * `need_in`. Without need_in (the lowest adapted layer) the backward stops as soon as every
 * adapter of the layer has its gradient: no dx is formed for inputs that lead only to frozen
 * parameters (e.g. with adapters on q/v only: no dy·W of Wq/Wk/Wv, no input rmsnorm backward). */
void af_tf_layer_backward(const af_tf_run *R, int32_t l, af_tf_acts *S, float *G, const float *x, int need_in) {
    const af_model *m = R->m;
    const af_arch_desc *D = &m->desc;
    const af_layer *Ly = &m->layers[l];
    const af_tf_dims d = layer_dims(m, l);
    const int64_t n = R->n;
    const float eps = m->cfg.rms_norm_eps;
    const int own_kv = Ly->kv_src == l;
    af_tf_scratch *ws = R->ws;
    float *dX = ws->dX;
    /* which gradients below each point are still needed */
    const int need_qkv = need_in || adapted(R, l, AF_PROJ_Q) || adapted(R, l, AF_PROJ_K) ||
                         adapted(R, l, AF_PROJ_V);                     /* d attn (input of o_proj) */
    const int need_mid = need_qkv || adapted(R, l, AF_PROJ_O);         /* d x_mid */
    const int need_ffn = need_mid || adapted(R, l, AF_PROJ_GATE) || adapted(R, l, AF_PROJ_UP); /* d act */
    /* output scale, per-layer input branch */
    if (Ly->out_scale != 1.0f)
        af_be(R->ctx)->scale(R->ctx, dX, Ly->out_scale, n * d.H);
    if (d.P > 0) ple_backward(R, l, S, &d);
    /* FFN branch */
    const float *dd = dX;
    if (D->sandwich_norm) {
        af_be(R->ctx)->fill(R->ctx, ws->dT, 0.0f, n * d.H);
        af_be(R->ctx)->rmsnorm_backward(R->ctx, ws->dT, NULL, dX, S->draw, LV(R, Ly, post_ffw_norm), S->rstdpf, n, d.H);
        dd = ws->dT;
    }
    af_lora_args adn;
    const af_lora_args *ldn = NULL;
    if (need_ffn && af_be(R->ctx)->mlp_down_back && n >= MIN_ROWS &&
        (!adapted(R, l, AF_PROJ_DOWN) || af_be(R->ctx)->proj_lora_backward) &&
        mlp_lora(R, S, G, l, AF_PROJ_DOWN, &adn, &ldn)) {
        /* d act = dd·W_down (+ the adapter's dx, its gradients and input act) with the activation's
         * backward in the product's epilogue (backend.h mlp_down_back; the same bits as glu_forward,
         * proj_bwd, the fills and glu's backward below) */
        uint32_t td;
        const void *wd = af_weight_dev(R->ctx, &Ly->w_down, &td);
        af_be(R->ctx)->mlp_down_back(R->ctx, ws->dact, ws->dgate, ws->dup, dd, wd, td, S->gate, S->up, n, d.F, d.H,
                                     D->act == AF_ACT_GEGLU_TANH, R->block_rows, ldn);
    } else {
        if (adapted(R, l, AF_PROJ_DOWN)) glu_forward(R->ctx, m, ws->act, S->gate, S->up, n * d.F); /* down's adapter input */
        proj_bwd(R, S, G, l, AF_PROJ_DOWN, &Ly->w_down, need_ffn ? ws->dact : NULL, dd, ws->act, 0);
        if (!need_ffn) return;
        af_be(R->ctx)->fill(R->ctx, ws->dgate, 0.0f, n * d.F);
        af_be(R->ctx)->fill(R->ctx, ws->dup, 0.0f, n * d.F);
        if (D->act == AF_ACT_GEGLU_TANH) af_be(R->ctx)->geglu_backward(R->ctx, ws->dgate, ws->dup, ws->dact, S->gate, S->up, n * d.F);
        else af_be(R->ctx)->swiglu_backward(R->ctx, ws->dgate, ws->dup, ws->dact, S->gate, S->up, n * d.F);
    }
    /* h2, the input of gate/up's adapters, recomputed (same function, same inputs: same bits) */
    if (adapted(R, l, AF_PROJ_GATE) || adapted(R, l, AF_PROJ_UP))
        af_be(R->ctx)->rmsnorm_forward(R->ctx, ws->hs, S->rstd2, S->xmid, LV(R, Ly, ffn_norm), n, d.H, eps);
    proj_bwd(R, S, G, l, AF_PROJ_GATE, &Ly->w_gate, need_mid ? ws->dh : NULL, ws->dgate, ws->hs, 0);
    proj_bwd(R, S, G, l, AF_PROJ_UP, &Ly->w_up, need_mid ? ws->dh : NULL, ws->dup, ws->hs, 1);
    if (!need_mid) return;
    af_be(R->ctx)->rmsnorm_backward(R->ctx, dX, NULL, ws->dh, S->xmid, LV(R, Ly, ffn_norm), S->rstd2, n, d.H); /* dX = d x_mid */
    /* attention branch */
    const float *dob = dX;
    if (D->sandwich_norm) {
        af_be(R->ctx)->fill(R->ctx, ws->dT, 0.0f, n * d.H);
        af_be(R->ctx)->rmsnorm_backward(R->ctx, ws->dT, NULL, dX, S->oraw, LV(R, Ly, post_attn_norm), S->rstdpa, n, d.H);
        dob = ws->dT;
    }
    proj_bwd(R, S, G, l, AF_PROJ_O, &Ly->wo, need_qkv ? ws->dattn : NULL, dob, S->attn, 0);
    if (!need_qkv) return;
    /* d K / d V: into this layer's buffers, or (KV sharing) added to the stored ones of kv_src */
    float *dk = own_kv ? ws->dk : R->kv_dk[Ly->kv_src], *dv = own_kv ? ws->dv : R->kv_dv[Ly->kv_src];
    af_be(R->ctx)->fill(R->ctx, ws->dq, 0.0f, n * d.qd);
    if (own_kv) {
        af_be(R->ctx)->fill(R->ctx, ws->dk, 0.0f, n * d.kvd);
        af_be(R->ctx)->fill(R->ctx, ws->dv, 0.0f, n * d.kvd);
    }
    const float *k, *v;
    train_kv(R, l, S, &k, &v);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_be(R->ctx)->attention_backward(R->ctx, ws->dq + s0 * d.qd, dk + s0 * d.kvd, dv + s0 * d.kvd, ws->dattn + s0 * d.qd,
                              S->attn + s0 * d.qd, S->lse + s0 * d.nh, S->q + s0 * d.qd, k + s0 * d.kvd,
                              v + s0 * d.kvd, len, 0, len, d.nh, d.nkv, d.hd, D->attn_scale, Ly->window);
    }
    if (own_kv && R->kv_dk && R->kv_dk[l]) { /* the later layers' gradients w.r.t. this layer's K/V */
        af_be(R->ctx)->add(R->ctx, ws->dk, ws->dk, R->kv_dk[l], n * d.kvd);
        af_be(R->ctx)->add(R->ctx, ws->dv, ws->dv, R->kv_dv[l], n * d.kvd);
    }
    af_be(R->ctx)->rope_backward(R->ctx, ws->dq, R->pos, n, d.nh, d.hd, Ly->rope_base, D->rope_neox, LV(R, Ly, rope_freq_factors));
    if (own_kv)
        af_be(R->ctx)->rope_backward(R->ctx, ws->dk, R->pos, n, d.nkv, d.hd, Ly->rope_base, D->rope_neox, LV(R, Ly, rope_freq_factors));
    const float *gq = ws->dq, *gk = ws->dk, *gv = ws->dv;
    if (D->qk_norm) {
        af_be(R->ctx)->fill(R->ctx, ws->dqr, 0.0f, n * d.qd);
        af_be(R->ctx)->rmsnorm_backward(R->ctx, ws->dqr, NULL, ws->dq, S->qraw, LV(R, Ly, q_norm), S->rstdq, n * d.nh, d.hd);
        gq = ws->dqr;
        if (own_kv) {
            af_be(R->ctx)->fill(R->ctx, ws->dkr, 0.0f, n * d.kvd);
            af_be(R->ctx)->rmsnorm_backward(R->ctx, ws->dkr, NULL, ws->dk, S->kraw, LV(R, Ly, k_norm), S->rstdk, n * d.nkv, d.hd);
            gk = ws->dkr;
        }
    }
    if (own_kv && D->v_norm) {
        /* v = rmsnorm(vraw); attention_k_eq_v: vraw is the k projection, its gradient joins k's */
        float *dvr = Ly->v_from_k ? (float *)gk : ws->dvr;
        const float *vr = Ly->v_from_k ? (D->qk_norm ? S->kraw : S->k) : S->vraw;
        if (!Ly->v_from_k) af_be(R->ctx)->fill(R->ctx, ws->dvr, 0.0f, n * d.kvd);
        af_be(R->ctx)->rmsnorm_backward(R->ctx, dvr, NULL, ws->dv, vr, ONES(R), S->rstdv, n * d.nkv, d.hd);
        gv = ws->dvr;
    }
    float *dh = need_in ? ws->dh : NULL;
    /* h1, the input of q/k/v's adapters, recomputed from the layer input likewise */
    if (adapted(R, l, AF_PROJ_Q) || adapted(R, l, AF_PROJ_K) || adapted(R, l, AF_PROJ_V))
        af_be(R->ctx)->rmsnorm_forward(R->ctx, ws->hs, S->rstd1, x, LV(R, Ly, attn_norm), n, d.H, eps);
    proj_bwd(R, S, G, l, AF_PROJ_Q, &Ly->wq, dh, gq, ws->hs, 0);
    if (own_kv) {
        proj_bwd(R, S, G, l, AF_PROJ_K, &Ly->wk, dh, gk, ws->hs, 1);
        if (!Ly->v_from_k) proj_bwd(R, S, G, l, AF_PROJ_V, &Ly->wv, dh, gv, ws->hs, 1);
    }
    if (!need_in) return;
    af_be(R->ctx)->rmsnorm_backward(R->ctx, dX, NULL, ws->dh, x, LV(R, Ly, attn_norm), S->rstd1, n, d.H); /* dX = d x_in */
}
