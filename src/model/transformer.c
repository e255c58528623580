/*
 * transformer.c — the one layer walk (transformer.h): forward for inference and training, backward
 * for training, with LoRA on every projection; also the embedding, final norm and LM head. Every
 * kernel call of the model's forward and backward is in this file.
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
 */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/matmul.h"
#include "kernels/ctx.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* AF_TF_MIN_ROWS: when the context has int8_activations on, af_matmul_xwt quantizes the
 * activations to int8 for very small n (matmul.c decode regime, n <= AF_MM_DECODE_N = 4): not
 * differentiable and not f32-exact. Training products with fewer than AF_TF_MIN_ROWS rows are
 * computed on a zero-padded copy so the training forward is f32-exact for every row count and
 * every process setting. Inference calls the kernel on its rows as they are (decode speed). */
#define MIN_ROWS AF_TF_MIN_ROWS

/* Sizes of one layer (per layer: gemma4's global layers have another head_dim and KV-head count,
 * its KV-sharing layers a double-width FFN), or the largest over the layers (max_dims: the buffers
 * are carved for those). P: the per-layer input width (desc.ple_dim, 0 = none). */
typedef struct dims {
    int64_t H, F, nh, nkv, hd, qd, kvd, P, maxd;
} dims;

static dims layer_dims(const af_model *m, int32_t l) {
    const af_layer *L = &m->layers[l];
    dims d;
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

static dims max_dims(const af_model *m) {
    dims d;
    d.H = m->cfg.hidden_size;
    d.F = m->max_ff;
    d.nh = m->max_n_head;
    d.nkv = m->max_n_kv_head;
    d.hd = m->max_head_dim;
    d.qd = m->max_qd;
    d.kvd = m->max_kvd;
    d.P = m->desc.ple_dim;
    d.maxd = d.H > d.qd ? d.H : d.qd;
    if (d.F > d.maxd) d.maxd = d.F;
    if (d.P > 0 && d.P * m->cfg.num_hidden_layers > d.maxd) d.maxd = d.P * m->cfg.num_hidden_layers; /* PLE projection */
    return d;
}

float *af_tf_kv_layer(const af_model *m, float *cache, int64_t n_ctx, int32_t l) {
    return cache + (size_t)n_ctx * (size_t)m->layers[l].kv_off;
}

int af_tf_kv_shared_src(const af_model *m, int32_t l) {
    for (int32_t j = l + 1; j < m->cfg.num_hidden_layers; j++)
        if (m->layers[j].kv_src == l) return 1;
    return 0;
}

/* ---------------------------------------------------------------- workspace */

float *af_carve(af_carver *cv, int64_t nfloats) {
    size_t b = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
    float *p = cv->base ? (float *)(cv->base + cv->used) : NULL;
    cv->used += b;
    return p;
}

void af_tf_carve_acts(af_carver *cv, af_tf_acts *S, const af_model *m, const af_param_layout *lay, int64_t cap,
                      af_tf_mode mode, int masks) {
    const dims d = max_dims(m);
    const af_arch_desc *D = &m->desc;
    const int tr = mode == AF_TF_TRAIN;
    memset(S, 0, sizeof *S);
    S->rstd1 = tr ? af_carve(cv, cap) : NULL;
    S->q = af_carve(cv, cap * d.qd);
    S->k = af_carve(cv, cap * d.kvd);
    S->v = af_carve(cv, cap * d.kvd);
    S->attn = af_carve(cv, cap * d.qd);
    S->lse = tr ? af_carve(cv, cap * d.nh) : NULL;
    S->xmid = af_carve(cv, cap * d.H);
    S->rstd2 = tr ? af_carve(cv, cap) : NULL;
    S->gate = af_carve(cv, cap * d.F);
    S->up = af_carve(cv, cap * d.F);
    if (D->qk_norm) {
        S->qraw = af_carve(cv, cap * d.qd);
        S->rstdq = tr ? af_carve(cv, cap * d.nh) : NULL;
        S->kraw = af_carve(cv, cap * d.kvd);
        S->rstdk = tr ? af_carve(cv, cap * d.nkv) : NULL;
    }
    if (D->sandwich_norm) {
        S->oraw = af_carve(cv, cap * d.H);
        S->rstdpa = tr ? af_carve(cv, cap) : NULL;
        S->draw = af_carve(cv, cap * d.H);
        S->rstdpf = tr ? af_carve(cv, cap) : NULL;
    }
    if (D->v_norm) {
        S->vraw = af_carve(cv, cap * d.kvd);
        S->rstdv = tr ? af_carve(cv, cap * d.nkv) : NULL;
    }
    if (d.P > 0) {
        S->ple_g = af_carve(cv, cap * d.P);
        S->ple_raw = af_carve(cv, cap * d.H);
        S->rstdple = tr ? af_carve(cv, cap) : NULL;
    }
    if (!lay) return;
    float *xa_shared = tr ? NULL : af_carve(cv, cap * lay->lora.r); /* inference: nothing is kept */
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        if (!(lay->lora.targets & (1u << p))) continue;
        int64_t in_max = 0; /* the widest input of projection p over the layers */
        for (int32_t l = 0; l < lay->n_layers; l++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->in > in_max) in_max = s->in;
        }
        S->xa[p] = tr ? af_carve(cv, cap * lay->lora.r) : xa_shared;
        if (tr && masks) S->mask[p] = af_carve(cv, cap * in_max);
    }
}

void af_tf_carve_scratch(af_carver *cv, af_tf_scratch *w, const af_model *m, const af_param_layout *lay,
                         int64_t cap, af_tf_mode mode, int masks) {
    const dims d = max_dims(m);
    const af_arch_desc *D = &m->desc;
    memset(w, 0, sizeof *w);
    if (d.P > 0) {
        w->ple_in = af_carve(cv, cap * d.P);
        w->ple_act = af_carve(cv, cap * d.P);
        w->ple_tok = af_carve(cv, (int64_t)m->cfg.num_hidden_layers * d.P);
    }
    if (mode == AF_TF_INFER) {
        w->hs = af_carve(cv, cap * d.H);
        w->tH = af_carve(cv, cap * d.H);
        w->act = af_carve(cv, cap * d.F);
        return;
    }
    const int64_t r = lay ? lay->lora.r : 0;
    w->dX = af_carve(cv, cap * d.H);
    w->dT = af_carve(cv, cap * d.H);
    w->dh = af_carve(cv, cap * d.H);
    w->tH = af_carve(cv, cap * d.H);
    w->hs = af_carve(cv, cap * d.H);
    w->dattn = af_carve(cv, cap * d.qd);
    w->dq = af_carve(cv, cap * d.qd);
    w->dk = af_carve(cv, cap * d.kvd);
    w->dv = af_carve(cv, cap * d.kvd);
    w->dqr = D->qk_norm ? af_carve(cv, cap * d.qd) : NULL;
    w->dkr = D->qk_norm ? af_carve(cv, cap * d.kvd) : NULL;
    w->dvr = D->v_norm ? af_carve(cv, cap * d.kvd) : NULL;
    if (d.P > 0) {
        w->ple_dact = af_carve(cv, cap * d.P);
        w->ple_dg = af_carve(cv, cap * d.P);
    }
    w->act = af_carve(cv, cap * d.F);
    w->dact = af_carve(cv, cap * d.F);
    w->dgate = af_carve(cv, cap * d.F);
    w->dup = af_carve(cv, cap * d.F);
    w->ltmp = af_carve(cv, cap * (r + (masks ? d.maxd : 0)));
    w->padx = af_carve(cv, MIN_ROWS * d.maxd);
    w->pady = af_carve(cv, MIN_ROWS * d.maxd);
}

/* ---------------------------------------------------------------- frozen products */

/* Threads for a block-parallel product: the context's when the call is not itself inside a pool
 * job (the kernel calls inside the blocks then run single-threaded: nested calls are serial),
 * else 1 (blocks are then run one after the other). */
static int block_threads(const af_ctx *ctx) { return af_threadpool_in_job() ? 1 : ctx->n_threads; }

typedef struct blocks_job {
    const af_tf_run *R;
    int dyw, accumulate;
    float *y;
    const float *x;
    const af_weight *w;
    int64_t n, nb, xw, yw;
} blocks_job;

/* Row blocks [b0, b1) of mm_blocks, one kernel call each. */
static void blocks_run(void *va, int64_t b0, int64_t b1, int tid) {
    const blocks_job *J = va;
    const int64_t n = J->n, nb = J->nb, xw = J->xw, yw = J->yw;
    const af_weight *w = J->w;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t t0 = n * b / nb, m = n * (b + 1) / nb - t0;
        if (J->dyw) af_matmul_dyw(J->R->ctx, J->y + t0 * yw, J->x + t0 * xw, w->data, w->type, m, yw, xw, J->accumulate);
        else af_matmul_xwt(J->R->ctx, J->y + t0 * yw, J->x + t0 * xw, w->data, w->type, m, xw, yw, J->accumulate);
    }
}

/* Training frozen-weight product over n rows in token blocks (R->block_rows; engine.h
 * af_engine_set_block_rows explains why):
 *   dyw = 0: y[n, out] (+)= x[n, in] · Wᵀ      (af_matmul_xwt; out = W rows, in = W cols)
 *   dyw = 1: y[n, in]  (+)= x[n, out] · W      (af_matmul_dyw)
 * n >= MIN_ROWS (every block then has >= MIN_ROWS rows too). Every row's arithmetic is that of
 * one call (the kernel's per-row summation order does not depend on the rows beside it). */
static void mm_blocks(const af_tf_run *R, int dyw, float *y, const float *x, const af_weight *w, int64_t n,
                      int accumulate) {
    const int64_t xw = dyw ? w->rows : w->cols, yw = dyw ? w->cols : w->rows;
    /* the packed GEMM blocks rows and threads by itself and packs W once per call: one call */
    const int64_t br = af_matmul_packed_path(R->ctx, n, xw, yw) ? 0 : R->block_rows;
    int64_t nb = br > 0 ? (n + br / 2) / br : 1;
    const int nth = nb >= 2 ? block_threads(R->ctx) : 1;
    if (nth > 1 && nb >= nth) nb = (nb + nth - 1) / nth * nth; /* equal shares */
    if (nb < 2) {
        if (dyw) af_matmul_dyw(R->ctx, y, x, w->data, w->type, n, yw, xw, accumulate);
        else af_matmul_xwt(R->ctx, y, x, w->data, w->type, n, xw, yw, accumulate);
        return;
    }
    const int par = nth > 1 && nb >= nth;
    blocks_job J = {R, dyw, accumulate, y, x, w, n, nb, xw, yw};
    af_threadpool_run(R->ctx->pool, par ? nth : 1, nb, 1, blocks_run, &J);
}

/* y[n, out] = x[n, in] · Wᵀ: inference one kernel call; training f32-exact for every n (MIN_ROWS)
 * and token-blocked. */
static void mm_xwt(const af_tf_run *R, float *y, const float *x, const af_weight *w) {
    const int64_t in = w->cols, out = w->rows, n = R->n;
    if (R->mode == AF_TF_INFER && R->n_seq > 0) {
        /* several sequences (af_tf_infer_forward_multi): short ones packed into decode-regime
         * products of <= AF_TF_DECODE_ROWS rows, a longer one alone: each row's bits as alone */
        int64_t r0 = 0;
        for (int32_t i = 0; i < R->n_seq;) {
            int64_t rows = R->seq[i].n;
            int32_t j = i + 1;
            if (rows <= AF_TF_DECODE_ROWS)
                while (j < R->n_seq && rows + R->seq[j].n <= AF_TF_DECODE_ROWS) rows += R->seq[j++].n;
            af_matmul_xwt(R->ctx, y + r0 * out, x + r0 * in, w->data, w->type, rows, in, out, 0);
            r0 += rows;
            i = j;
        }
        return;
    }
    if (R->mode == AF_TF_INFER) {
        af_matmul_xwt(R->ctx, y, x, w->data, w->type, n, in, out, 0);
        return;
    }
    if (n >= MIN_ROWS) {
        mm_blocks(R, 0, y, x, w, n, 0);
        return;
    }
    af_tf_scratch *ws = R->ws;
    memcpy(ws->padx, x, sizeof(float) * (size_t)(n * in));
    memset(ws->padx + n * in, 0, sizeof(float) * (size_t)((MIN_ROWS - n) * in));
    af_matmul_xwt(R->ctx, ws->pady, ws->padx, w->data, w->type, MIN_ROWS, in, out, 0);
    memcpy(y, ws->pady, sizeof(float) * (size_t)(n * out));
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

/* y[t, :] += b for every row t of y [n, out]. */
static void add_bias(float *y, const float *b, int64_t n, int64_t out) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < out; j++) y[t * out + j] += b[j];
}

/* Projection p of layer l: y = x·Wᵀ (+ bias) plus the LoRA correction when p has an adapter. */
static void proj_fwd(const af_tf_run *R, af_tf_acts *S, int32_t l, af_proj p, const af_weight *w,
                     const float *bias, float *y, const float *x) {
    mm_xwt(R, y, x, w);
    if (bias) add_bias(y, bias, R->n, w->rows);
    char mod[48] = "";
    if (R->probe) snprintf(mod, sizeof mod, "%s%s", p <= AF_PROJ_O ? "self_attn." : "mlp.", af_proj_name(p));
    probe(R, y, R->n * w->rows, l, mod, " output (frozen weight product)");
    if (R->n_seq > 0) { /* several sequences: each one's own adapter on its rows */
        int64_t r0 = 0;
        for (int32_t i = 0; i < R->n_seq; i++) {
            const af_tf_seq *q = &R->seq[i];
            const af_lora_slot *qs = q->P && q->lay ? af_lora_slot_at(q->lay, l, p) : NULL;
            if (qs && qs->a_off >= 0)
                af_lora_forward(R->ctx, y + r0 * w->rows, R->xa, x + r0 * qs->in, NULL, q->P + qs->a_off,
                                q->P + qs->b_off, q->n, qs->in, qs->out, q->lay->lora.r, q->lora_scale);
            r0 += q->n;
        }
        return;
    }
    const af_lora_slot *s = lora_slot(R, l, p);
    if (!s) return;
    const af_param_layout *lay = R->lay;
    float *mask = NULL;
    if (R->drop && S->mask[p]) {
        mask = S->mask[p];
        af_lora_dropout_mask(R->ctx, mask, R->seed, l, p, 0, R->n, s->in, lay->lora.dropout);
    }
    af_lora_forward(R->ctx, y, S->xa[p], x, mask, R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r,
                    R->lora_scale);
    probe(R, y, R->n * w->rows, l, mod, " output (after adding the LoRA correction)");
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
    af_rmsnorm_forward(R->ctx, ws->tH, rstd, raw, post_norm, R->n, R->m->cfg.hidden_size, R->m->cfg.rms_norm_eps);
    return ws->tH;
}

static void glu_forward(const af_ctx *ctx, const af_model *m, float *act, const float *gate, const float *up, int64_t n) {
    if (m->desc.act == AF_ACT_GEGLU_TANH) af_geglu_forward(ctx, act, gate, up, n);
    else af_swiglu_forward(ctx, act, gate, up, n);
}

/* ---------------------------------------------------------------- forward */

void af_tf_embed(const af_model *m, const int32_t *tokens, int64_t n, float *x) {
    const int64_t H = m->cfg.hidden_size;
    const float sc = m->desc.embd_scale;
    for (int64_t t = 0; t < n; t++) {
        float *row = x + t * H;
        af_weight_row(&m->tok_embd, tokens[t], row);
        if (sc != 1.0f)
            for (int64_t i = 0; i < H; i++) row[i] *= sc;
    }
}

void af_tf_ple_inputs(const af_tf_run *R, const int32_t *tokens, const float *xemb, float *out) {
    const af_model *m = R->m;
    const int64_t n = R->n, P = m->desc.ple_dim, LP = (int64_t)m->cfg.num_hidden_layers * P;
    const float ps = (float)(1.0 / sqrt((double)m->cfg.hidden_size)), ts = (float)sqrt((double)P),
                is = (float)(1.0 / sqrt(2.0));
    mm_xwt(R, out, xemb, &m->ple_model_proj); /* [n, L·P] */
    for (int64_t i = 0; i < n * LP; i++) out[i] *= ps;
    af_rmsnorm_forward(R->ctx, out, NULL, out, m->ple_proj_norm, n * m->cfg.num_hidden_layers, P, m->cfg.rms_norm_eps);
    float *tok = R->ws->ple_tok;
    for (int64_t t = 0; t < n; t++) {
        af_weight_row(&m->ple_tok_embd, tokens[t], tok);
        float *o = out + t * LP;
        for (int64_t i = 0; i < LP; i++) o[i] = (o[i] + tok[i] * ts) * is;
    }
}

/* The layer's slice of the per-layer inputs, R->ple [n, L, P] -> dst [n, P]. */
static void ple_slice(const af_tf_run *R, int32_t l, float *dst) {
    const int64_t P = R->m->desc.ple_dim, LP = (int64_t)R->m->cfg.num_hidden_layers * P;
    for (int64_t t = 0; t < R->n; t++) memcpy(dst + t * P, R->ple + t * LP + l * P, sizeof(float) * (size_t)P);
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
static void attention(const af_tf_run *R, int32_t l, af_tf_acts *S, const dims *d) {
    const af_model *m = R->m;
    const af_layer *Ly = &m->layers[l];
    const float scale = m->desc.attn_scale;
    const int64_t n = R->n;
    if (R->mode == AF_TF_INFER && R->n_seq > 0) { /* several sequences: each over its own cache */
        int64_t r0 = 0;
        for (int32_t i = 0; i < R->n_seq; i++) {
            const af_tf_seq *q = &R->seq[i];
            float *kc = af_tf_kv_layer(m, q->k_cache, q->n_ctx, l);
            float *vc = af_tf_kv_layer(m, q->v_cache, q->n_ctx, l);
            if (Ly->kv_src == l) { /* a layer that reuses an earlier layer's K/V appends nothing */
                memcpy(kc + (size_t)q->n_past * (size_t)d->kvd, S->k + r0 * d->kvd, sizeof(float) * (size_t)(q->n * d->kvd));
                memcpy(vc + (size_t)q->n_past * (size_t)d->kvd, S->v + r0 * d->kvd, sizeof(float) * (size_t)(q->n * d->kvd));
            }
            af_attention_forward(R->ctx, S->attn + r0 * d->qd, NULL, S->q + r0 * d->qd, kc, vc, q->n, q->n_past,
                                 q->n_past + q->n, d->kvd, d->nh, d->nkv, d->hd, scale, Ly->window);
            r0 += q->n;
        }
        return;
    }
    if (R->mode == AF_TF_INFER) {
        float *kc = af_tf_kv_layer(m, R->k_cache, R->n_ctx, l);
        float *vc = af_tf_kv_layer(m, R->v_cache, R->n_ctx, l);
        if (Ly->kv_src == l) {
            memcpy(kc + (size_t)R->n_past * (size_t)d->kvd, S->k, sizeof(float) * (size_t)(n * d->kvd));
            memcpy(vc + (size_t)R->n_past * (size_t)d->kvd, S->v, sizeof(float) * (size_t)(n * d->kvd));
        }
        af_attention_forward(R->ctx, S->attn, NULL, S->q, kc, vc, n, R->n_past, R->n_past + n, d->kvd, d->nh, d->nkv,
                             d->hd, scale, Ly->window);
        return;
    }
    const float *k, *v;
    train_kv(R, l, S, &k, &v);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_attention_forward(R->ctx, S->attn + s0 * d->qd, S->lse + s0 * d->nh, S->q + s0 * d->qd, k + s0 * d->kvd,
                             v + s0 * d->kvd, len, 0, len, d->kvd, d->nh, d->nkv, d->hd, scale, Ly->window);
    }
}

/* K and V of a layer with its own K/V: projections (+ LoRA), k norm, unweighted v norm, RoPE of k;
 * stored for later layers when they reuse them (training). */
static void own_kv_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const dims *d, const float *h1) {
    const af_model *m = R->m;
    const af_arch_desc *D = &m->desc;
    const af_layer *Ly = &m->layers[l];
    const float eps = m->cfg.rms_norm_eps;
    const int64_t n = R->n;
    proj_fwd(R, S, l, AF_PROJ_K, &Ly->wk, D->qkv_bias ? Ly->bk : NULL, D->qk_norm ? S->kraw : S->k, h1);
    float *vr = D->v_norm ? S->vraw : S->v;
    if (Ly->v_from_k) vr = D->qk_norm ? S->kraw : S->k; /* attention_k_eq_v: v is the k projection */
    else proj_fwd(R, S, l, AF_PROJ_V, &Ly->wv, D->qkv_bias ? Ly->bv : NULL, vr, h1);
    if (D->v_norm) af_rmsnorm_forward(R->ctx, S->v, S->rstdv, vr, m->ones, n * d->nkv, d->hd, eps);
    if (D->qk_norm) af_rmsnorm_forward(R->ctx, S->k, S->rstdk, S->kraw, Ly->k_norm, n * d->nkv, d->hd, eps);
    af_rope_ff_forward(R->ctx, S->k, R->pos, n, d->nkv, d->hd, Ly->rope_base, D->rope_neox, Ly->rope_freq_factors);
    if (R->mode == AF_TF_TRAIN && R->kv_k && R->kv_k[l]) {
        memcpy(R->kv_k[l], S->k, sizeof(float) * (size_t)(n * d->kvd));
        memcpy(R->kv_v[l], S->v, sizeof(float) * (size_t)(n * d->kvd));
    }
}

/* The per-layer input branch (desc.ple_dim): x [n, H] += rmsnorm((gelu(x·Wgᵀ)·pl)·Wpᵀ)·post_norm. */
static void ple_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const dims *d, float *x) {
    const af_layer *Ly = &R->m->layers[l];
    af_tf_scratch *ws = R->ws;
    mm_xwt(R, S->ple_g, x, &Ly->ple_gate);
    ple_slice(R, l, ws->ple_in);
    af_geglu_forward(R->ctx, ws->ple_act, S->ple_g, ws->ple_in, R->n * d->P);
    mm_xwt(R, S->ple_raw, ws->ple_act, &Ly->ple_proj);
    af_rmsnorm_forward(R->ctx, ws->tH, S->rstdple, S->ple_raw, Ly->ple_post_norm, R->n, d->H, R->m->cfg.rms_norm_eps);
    af_add(x, x, ws->tH, R->n * d->H);
}

void af_tf_layer_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const float *x, float *xo) {
    const af_model *m = R->m;
    const af_arch_desc *D = &m->desc;
    const af_layer *Ly = &m->layers[l];
    const dims d = layer_dims(m, l);
    const float eps = m->cfg.rms_norm_eps;
    const int64_t n = R->n;
    af_tf_scratch *ws = R->ws;
    float *h1 = ws->hs; /* scratch: recomputed from x and rstd1 by the backward when needed */
    af_rmsnorm_forward(R->ctx, h1, S->rstd1, x, Ly->attn_norm, n, d.H, eps);
    probe(R, h1, n * d.H, l, "input_layernorm output", "");
    proj_fwd(R, S, l, AF_PROJ_Q, &Ly->wq, D->qkv_bias ? Ly->bq : NULL, D->qk_norm ? S->qraw : S->q, h1);
    if (D->qk_norm) af_rmsnorm_forward(R->ctx, S->q, S->rstdq, S->qraw, Ly->q_norm, n * d.nh, d.hd, eps);
    af_rope_ff_forward(R->ctx, S->q, R->pos, n, d.nh, d.hd, Ly->rope_base, D->rope_neox, Ly->rope_freq_factors);
    if (Ly->kv_src == l) own_kv_forward(R, l, S, &d, h1);
    attention(R, l, S, &d);
    probe(R, S->q, n * d.qd, l, "self_attn q after norm/RoPE", "");
    if (Ly->kv_src == l) probe(R, S->k, n * d.kvd, l, "self_attn k after norm/RoPE", "");
    probe(R, S->attn, n * d.qd, l, "self_attn attention output (softmax(q·kᵀ)·v)", "");
    const float *o = branch_out(R, S, l, AF_PROJ_O, &Ly->wo, S->attn, S->oraw, S->rstdpa, Ly->post_attn_norm);
    af_add(S->xmid, x, o, n * d.H);
    probe(R, S->xmid, n * d.H, l, "residual stream after self_attn", "");
    float *h2 = ws->hs; /* likewise (h1 is no longer needed) */
    af_rmsnorm_forward(R->ctx, h2, S->rstd2, S->xmid, Ly->ffn_norm, n, d.H, eps);
    probe(R, h2, n * d.H, l, "post_attention_layernorm output", "");
    proj_fwd(R, S, l, AF_PROJ_GATE, &Ly->w_gate, NULL, S->gate, h2);
    proj_fwd(R, S, l, AF_PROJ_UP, &Ly->w_up, NULL, S->up, h2);
    glu_forward(R->ctx, m, ws->act, S->gate, S->up, n * d.F);
    probe(R, ws->act, n * d.F, l, "mlp activation (act(gate)·up)", "");
    const float *dn = branch_out(R, S, l, AF_PROJ_DOWN, &Ly->w_down, ws->act, S->draw, S->rstdpf, Ly->post_ffw_norm);
    af_add(xo, S->xmid, dn, n * d.H);
    if (d.P > 0) {
        ple_forward(R, l, S, &d, xo);
        probe(R, xo, n * d.H, l, "residual stream after the per-layer input", "");
    }
    if (Ly->out_scale != 1.0f)
        for (int64_t i = 0; i < n * d.H; i++) xo[i] *= Ly->out_scale;
    probe(R, xo, n * d.H, l, "output (residual stream after mlp)", "");
}

/* ---------------------------------------------------------------- backward */

/* dx[n, in] (+)= dy[n, out]·W for a frozen weight W [out, in] (training: f32-exact, token-blocked). */
static void frozen_bwd(const af_tf_run *R, float *dx, const float *dy, const af_weight *w, int accumulate) {
    if (R->n >= MIN_ROWS) mm_blocks(R, 1, dx, dy, w, R->n, accumulate);
    else af_matmul_dyw(R->ctx, dx, dy, w->data, w->type, R->n, w->cols, w->rows, accumulate);
}

/* Backward of projection p: dx[n, in] (+)= dy·W (+ LoRA dx), LoRA grads into G.
 * dx = NULL: the input gradient is not needed (nothing trainable below): only the LoRA grads. */
static void proj_bwd(const af_tf_run *R, af_tf_acts *S, float *G, int32_t l, af_proj p, const af_weight *w,
                     float *dx, const float *dy, const float *x, int accumulate) {
    if (dx) frozen_bwd(R, dx, dy, w, accumulate);
    const af_lora_slot *s = lora_slot(R, l, p);
    if (!s) return;
    const af_param_layout *lay = R->lay;
    af_lora_backward(R->ctx, dx, G + s->a_off, G + s->b_off, R->ws->ltmp, dy, x, S->xa[p], R->drop ? S->mask[p] : NULL,
                     R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r, R->lora_scale);
}

static void zero(float *p, int64_t n) { memset(p, 0, sizeof(float) * (size_t)n); }

/* Backward of the per-layer input branch: dX [n, H] (d of the branch's output) += d through it. */
static void ple_backward(const af_tf_run *R, int32_t l, af_tf_acts *S, const dims *d) {
    const af_layer *Ly = &R->m->layers[l];
    af_tf_scratch *ws = R->ws;
    const int64_t n = R->n;
    zero(ws->dT, n * d->H);
    af_rmsnorm_backward(R->ctx, ws->dT, NULL, ws->dX, S->ple_raw, Ly->ple_post_norm, S->rstdple, n, d->H);
    frozen_bwd(R, ws->ple_dact, ws->dT, &Ly->ple_proj, 0);
    ple_slice(R, l, ws->ple_in);
    zero(ws->ple_dg, n * d->P);
    zero(ws->ple_act, n * d->P); /* d of the per-layer input: not needed (frozen), written to scratch */
    af_geglu_backward(R->ctx, ws->ple_dg, ws->ple_act, ws->ple_dact, S->ple_g, ws->ple_in, n * d->P);
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
    const dims d = layer_dims(m, l);
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
        for (int64_t i = 0; i < n * d.H; i++) dX[i] *= Ly->out_scale;
    if (d.P > 0) ple_backward(R, l, S, &d);
    /* FFN branch */
    const float *dd = dX;
    if (D->sandwich_norm) {
        zero(ws->dT, n * d.H);
        af_rmsnorm_backward(R->ctx, ws->dT, NULL, dX, S->draw, Ly->post_ffw_norm, S->rstdpf, n, d.H);
        dd = ws->dT;
    }
    if (adapted(R, l, AF_PROJ_DOWN)) glu_forward(R->ctx, m, ws->act, S->gate, S->up, n * d.F); /* down's adapter input */
    proj_bwd(R, S, G, l, AF_PROJ_DOWN, &Ly->w_down, need_ffn ? ws->dact : NULL, dd, ws->act, 0);
    if (!need_ffn) return;
    zero(ws->dgate, n * d.F);
    zero(ws->dup, n * d.F);
    if (D->act == AF_ACT_GEGLU_TANH) af_geglu_backward(R->ctx, ws->dgate, ws->dup, ws->dact, S->gate, S->up, n * d.F);
    else af_swiglu_backward(R->ctx, ws->dgate, ws->dup, ws->dact, S->gate, S->up, n * d.F);
    /* h2, the input of gate/up's adapters, recomputed (same function, same inputs: same bits) */
    if (adapted(R, l, AF_PROJ_GATE) || adapted(R, l, AF_PROJ_UP))
        af_rmsnorm_forward(R->ctx, ws->hs, S->rstd2, S->xmid, Ly->ffn_norm, n, d.H, eps);
    proj_bwd(R, S, G, l, AF_PROJ_GATE, &Ly->w_gate, need_mid ? ws->dh : NULL, ws->dgate, ws->hs, 0);
    proj_bwd(R, S, G, l, AF_PROJ_UP, &Ly->w_up, need_mid ? ws->dh : NULL, ws->dup, ws->hs, 1);
    if (!need_mid) return;
    af_rmsnorm_backward(R->ctx, dX, NULL, ws->dh, S->xmid, Ly->ffn_norm, S->rstd2, n, d.H); /* dX = d x_mid */
    /* attention branch */
    const float *dob = dX;
    if (D->sandwich_norm) {
        zero(ws->dT, n * d.H);
        af_rmsnorm_backward(R->ctx, ws->dT, NULL, dX, S->oraw, Ly->post_attn_norm, S->rstdpa, n, d.H);
        dob = ws->dT;
    }
    proj_bwd(R, S, G, l, AF_PROJ_O, &Ly->wo, need_qkv ? ws->dattn : NULL, dob, S->attn, 0);
    if (!need_qkv) return;
    /* d K / d V: into this layer's buffers, or (KV sharing) added to the stored ones of kv_src */
    float *dk = own_kv ? ws->dk : R->kv_dk[Ly->kv_src], *dv = own_kv ? ws->dv : R->kv_dv[Ly->kv_src];
    zero(ws->dq, n * d.qd);
    if (own_kv) {
        zero(ws->dk, n * d.kvd);
        zero(ws->dv, n * d.kvd);
    }
    const float *k, *v;
    train_kv(R, l, S, &k, &v);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_attention_backward(R->ctx, ws->dq + s0 * d.qd, dk + s0 * d.kvd, dv + s0 * d.kvd, ws->dattn + s0 * d.qd,
                              S->attn + s0 * d.qd, S->lse + s0 * d.nh, S->q + s0 * d.qd, k + s0 * d.kvd,
                              v + s0 * d.kvd, len, 0, len, d.nh, d.nkv, d.hd, D->attn_scale, Ly->window);
    }
    if (own_kv && R->kv_dk && R->kv_dk[l]) { /* the later layers' gradients w.r.t. this layer's K/V */
        af_add(ws->dk, ws->dk, R->kv_dk[l], n * d.kvd);
        af_add(ws->dv, ws->dv, R->kv_dv[l], n * d.kvd);
    }
    af_rope_ff_backward(R->ctx, ws->dq, R->pos, n, d.nh, d.hd, Ly->rope_base, D->rope_neox, Ly->rope_freq_factors);
    if (own_kv)
        af_rope_ff_backward(R->ctx, ws->dk, R->pos, n, d.nkv, d.hd, Ly->rope_base, D->rope_neox, Ly->rope_freq_factors);
    const float *gq = ws->dq, *gk = ws->dk, *gv = ws->dv;
    if (D->qk_norm) {
        zero(ws->dqr, n * d.qd);
        af_rmsnorm_backward(R->ctx, ws->dqr, NULL, ws->dq, S->qraw, Ly->q_norm, S->rstdq, n * d.nh, d.hd);
        gq = ws->dqr;
        if (own_kv) {
            zero(ws->dkr, n * d.kvd);
            af_rmsnorm_backward(R->ctx, ws->dkr, NULL, ws->dk, S->kraw, Ly->k_norm, S->rstdk, n * d.nkv, d.hd);
            gk = ws->dkr;
        }
    }
    if (own_kv && D->v_norm) {
        /* v = rmsnorm(vraw); attention_k_eq_v: vraw is the k projection, its gradient joins k's */
        float *dvr = Ly->v_from_k ? (float *)gk : ws->dvr;
        const float *vr = Ly->v_from_k ? (D->qk_norm ? S->kraw : S->k) : S->vraw;
        if (!Ly->v_from_k) zero(ws->dvr, n * d.kvd);
        af_rmsnorm_backward(R->ctx, dvr, NULL, ws->dv, vr, m->ones, S->rstdv, n * d.nkv, d.hd);
        gv = ws->dvr;
    }
    float *dh = need_in ? ws->dh : NULL;
    /* h1, the input of q/k/v's adapters, recomputed from the layer input likewise */
    if (adapted(R, l, AF_PROJ_Q) || adapted(R, l, AF_PROJ_K) || adapted(R, l, AF_PROJ_V))
        af_rmsnorm_forward(R->ctx, ws->hs, S->rstd1, x, Ly->attn_norm, n, d.H, eps);
    proj_bwd(R, S, G, l, AF_PROJ_Q, &Ly->wq, dh, gq, ws->hs, 0);
    if (own_kv) {
        proj_bwd(R, S, G, l, AF_PROJ_K, &Ly->wk, dh, gk, ws->hs, 1);
        if (!Ly->v_from_k) proj_bwd(R, S, G, l, AF_PROJ_V, &Ly->wv, dh, gv, ws->hs, 1);
    }
    if (!need_in) return;
    af_rmsnorm_backward(R->ctx, dX, NULL, ws->dh, x, Ly->attn_norm, S->rstd1, n, d.H); /* dX = d x_in */
}

/* ---------------------------------------------------------------- final norm, LM head */

void af_tf_final_norm(const af_ctx *ctx, const af_model *m, float *y, float *rstd, const float *x, int64_t n) {
    af_rmsnorm_forward(ctx, y, rstd, x, m->output_norm, n, m->cfg.hidden_size, m->cfg.rms_norm_eps);
}

void af_tf_final_norm_backward(const af_ctx *ctx, const af_model *m, float *dx, const float *dy, const float *x, const float *rstd,
                               int64_t n) {
    af_rmsnorm_backward(ctx, dx, NULL, dy, x, m->output_norm, rstd, n, m->cfg.hidden_size);
}

void af_lm_head_forward(const af_ctx *ctx, const af_model *m, float *logits, float *x, int64_t n) {
    const af_model_config *c = &m->cfg;
    af_tf_final_norm(ctx, m, x, NULL, x, n);
    af_matmul_xwt(ctx, logits, x, m->output.data, m->output.type, n, c->hidden_size, c->vocab_size, 0);
    const float cap = m->desc.final_logit_softcap;
    if (cap > 0) {
        const int64_t nv = n * c->vocab_size;
        for (int64_t i = 0; i < nv; i++) logits[i] = cap * tanhf(logits[i] / cap);
    }
}

/* ---------------------------------------------------------------- LM head loss (causal LM) */

int64_t af_lm_chunk_rows(const af_model *m) {
    const int64_t v = m->cfg.vocab_size > 0 ? m->cfg.vocab_size : 1;
    int64_t c = ((int64_t)1 << 23) / v;
    return c < MIN_ROWS ? MIN_ROWS : c > 256 ? 256 : c;
}

int64_t af_lm_head_scratch_floats(const af_model *m) {
    const int64_t c = af_lm_chunk_rows(m), V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    /* each region rounded up to 16 floats (64 bytes) */
    return ((c * V + 15) / 16 + 2 * ((c * H + 15) / 16)) * 16;
}

/* Forward: z [V] in place = softcap(z); returns loss = lse(z) − z[t] and whether argmax == t.
 * With grad: z becomes grad_scale·(softmax − onehot)·softcap'. */
static double lm_row(float *z, int64_t V, int32_t t, float cap, float gs, int grad, int *correct) {
    if (cap > 0)
        for (int64_t v = 0; v < V; v++) z[v] = cap * tanhf(z[v] / cap);
    int64_t am = 0;
    float mx = z[0];
    for (int64_t v = 1; v < V; v++)
        if (z[v] > mx) {
            mx = z[v];
            am = v;
        }
    *correct = am == t;
    double s = 0;
    for (int64_t v = 0; v < V; v++) s += exp((double)(z[v] - mx));
    const double lse = (double)mx + log(s);
    const double loss = lse - (double)z[t];
    if (grad) {
        for (int64_t v = 0; v < V; v++) {
            const float zv = z[v];
            float g = (float)exp((double)zv - lse);
            if (v == t) g -= 1.0f;
            g *= gs;
            if (cap > 0) {
                const float th = zv / cap;
                g *= 1.0f - th * th;
            }
            z[v] = g;
        }
    }
    return loss;
}

/* rows [i0, i1) of a logits chunk: loss, gradient in place, argmax hit (one row per index, so the
 * results do not depend on the team) */
typedef struct lm_rows_job {
    float *z;
    int64_t V;
    const int32_t *targets;
    const int64_t *rows;
    float cap, grad_scale;
    int grad;
    double *rl;
    int *rc;
} lm_rows_job;

static void lm_rows_run(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const lm_rows_job *J = arg;
    for (int64_t j = i0; j < i1; j++)
        J->rl[j] = lm_row(J->z + j * J->V, J->V, J->targets[J->rows[j]], J->cap, J->grad_scale, J->grad, &J->rc[j]);
}

void af_lm_head_loss(const af_ctx *ctx, const af_model *m, const float *x, const int32_t *targets, int64_t n,
                     float *hN, float *rstd, float *dx, float grad_scale, float *scratch, af_lm_loss *res) {
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, C = af_lm_chunk_rows(m);
    const float cap = m->desc.final_logit_softcap;
    const int grad = dx != NULL;
    float *z = scratch, *xc = scratch + (C * V + 15) / 16 * 16, *dc = xc + (C * H + 15) / 16 * 16;
    double rl[256];
    int rc[256];
    int64_t rows[256];
    res->loss_sum = 0;
    res->n_targets = 0;
    res->n_correct = 0;
    af_tf_final_norm(ctx, m, hN, rstd, x, n);
    int64_t i = 0;
    const int nth = ctx->n_threads;
    while (i < n) {
        /* gather up to C target rows */
        int64_t k = 0;
        for (; i < n && k < C; i++)
            if (targets[i] >= 0) {
                rows[k] = i;
                memcpy(xc + k * H, hN + i * H, sizeof(float) * (size_t)H);
                k++;
            }
        if (k == 0) break;
        /* f32-exact for every row count: at least MIN_ROWS rows, the extra ones zero (transformer.c top) */
        const int64_t kk = k < MIN_ROWS ? MIN_ROWS : k;
        if (kk > k) memset(xc + k * H, 0, sizeof(float) * (size_t)((kk - k) * H));
        af_matmul_xwt(ctx, z, xc, m->output.data, m->output.type, kk, H, V, 0);
        lm_rows_job J = {z, V, targets, rows, cap, grad_scale, grad, rl, rc};
        af_threadpool_run(ctx->pool, k > 1 ? nth : 1, k, 0, lm_rows_run, &J);
        for (int64_t j = 0; j < k; j++) {
            res->loss_sum += rl[j];
            res->n_correct += rc[j];
        }
        res->n_targets += k;
        if (!grad) continue;
        if (kk > k) memset(z + k * V, 0, sizeof(float) * (size_t)((kk - k) * V));
        af_matmul_dyw(ctx, dc, z, m->output.data, m->output.type, kk, H, V, 0);
        /* dh of the chunk's rows into hN (rows before i are no longer read by the forward) */
        for (int64_t j = 0; j < k; j++) memcpy(hN + rows[j] * H, dc + j * H, sizeof(float) * (size_t)H);
    }
    if (!grad) return;
    /* rows without a target: dh = 0 (their hN still holds the normed state) */
    for (int64_t r = 0; r < n; r++)
        if (targets[r] < 0) memset(hN + r * H, 0, sizeof(float) * (size_t)H);
    af_tf_final_norm_backward(ctx, m, dx, hN, x, rstd, n);
}

/* ---------------------------------------------------------------- inference state */

static void infer_plan(af_carver *cv, af_tf_infer *s, const af_model *m, const af_param_layout *lay, int64_t cap) {
    s->x = af_carve(cv, cap * m->cfg.hidden_size);
    s->pos = (int32_t *)af_carve(cv, cap);
    s->ple = m->desc.ple_dim > 0 ? af_carve(cv, cap * m->cfg.num_hidden_layers * m->desc.ple_dim) : NULL;
    af_tf_carve_acts(cv, &s->S, m, lay, cap, AF_TF_INFER, 0);
    af_tf_carve_scratch(cv, &s->w, m, lay, cap, AF_TF_INFER, 0);
}

af_status af_tf_infer_init(af_tf_infer *s, const af_model *m, const af_param_layout *lay, int64_t cap) {
    memset(s, 0, sizeof *s);
    af_carver cv = {NULL, 0};
    infer_plan(&cv, s, m, lay, cap);
    s->mem = af_malloc_aligned(cv.used);
    if (!s->mem) return af_fail(AF_ERR_NOMEM, "out of memory for forward scratch (%lld tokens)", (long long)cap);
    cv.base = s->mem;
    cv.used = 0;
    infer_plan(&cv, s, m, lay, cap);
    s->cap = cap;
    return AF_OK;
}

void af_tf_infer_free(af_tf_infer *s) {
    af_free_aligned(s->mem);
    memset(s, 0, sizeof *s);
}

static int cancelled(const af_tf_control *ctl) {
    for (int32_t i = 0; ctl && i < ctl->n_flags; i++)
        if (ctl->flags[i] && *ctl->flags[i]) return 1;
    return 0;
}

/* The inference run shared by the one- and the multi-sequence forward, and their layer loop
 * (embedding of the call's tokens, then every layer, the cancel flags read before each). */
static af_tf_run infer_run(const af_ctx *ctx, const af_model *m, af_tf_infer *s) {
    af_tf_run R;
    memset(&R, 0, sizeof R);
    R.ctx = ctx;
    R.m = m;
    R.mode = AF_TF_INFER;
    R.pos = s->pos;
    R.ws = &s->w;
    return R;
}

static af_status infer_walk(af_tf_run *R, af_tf_infer *s, const int32_t *tokens, const af_tf_control *ctl) {
    af_tf_embed(R->m, tokens, R->n, s->x);
    if (R->m->desc.ple_dim > 0) {
        af_tf_ple_inputs(R, tokens, s->x, s->ple);
        R->ple = s->ple;
    }
    for (int32_t l = 0; l < R->m->cfg.num_hidden_layers; l++) {
        if (cancelled(ctl)) return af_fail(AF_ERR_CANCELLED, "cancelled before layer %d", l);
        af_tf_layer_forward(R, l, &s->S, s->x, s->x);
    }
    return AF_OK;
}

af_status af_tf_infer_forward(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const float *P, const af_param_layout *lay, float scale,
                              const int32_t *tokens, int64_t n, int64_t n_past, float *k_cache, float *v_cache,
                              int64_t n_ctx, const af_tf_control *ctl) {
    af_tf_run R = infer_run(ctx, m, s);
    R.n = n;
    R.P = P;
    R.lay = P ? lay : NULL;
    R.lora_scale = scale;
    R.k_cache = k_cache;
    R.v_cache = v_cache;
    R.n_ctx = n_ctx;
    R.n_past = n_past;
    for (int64_t t = 0; t < n; t++) s->pos[t] = (int32_t)(n_past + t);
    return infer_walk(&R, s, tokens, ctl);
}

af_status af_tf_infer_forward_multi(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const af_tf_seq *seq,
                                    int32_t n_seq, const int32_t *tokens, float *xa, const af_tf_control *ctl) {
    af_tf_run R = infer_run(ctx, m, s);
    R.seq = seq;
    R.n_seq = n_seq;
    R.xa = xa;
    for (int32_t i = 0; i < n_seq; i++) {
        for (int64_t t = 0; t < seq[i].n; t++) s->pos[R.n + t] = (int32_t)(seq[i].n_past + t);
        R.n += seq[i].n;
    }
    return infer_walk(&R, s, tokens, ctl);
}
