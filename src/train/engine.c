/*
 * engine.c — training forward/backward through the frozen (quantized) transformer with LoRA
 * corrections, a pooled classification head and its loss (engine.h).
 *
 * Per layer (llama; gemma3 additions in brackets), the forward of forward.c with LoRA on the
 * targeted projections (lora.h) and per-sample attention over a packed batch:
 *   h1 = rmsnorm(x)·attn_norm
 *   q = h1·Wqᵀ (+lora) [q = rmsnorm_head(q)·q_norm]; k likewise; v = h1·Wvᵀ (+lora); rope(q), rope(k)
 *   attn = attention(q, k, v) per sample;  o = attn·Woᵀ (+lora) [o = rmsnorm(o)·post_attn_norm]
 *   x_mid = x + o;  h2 = rmsnorm(x_mid)·ffn_norm
 *   gate, up = h2·W{gate,up}ᵀ (+lora);  act = silu(gate)·up [gelu_tanh];  d = act·Wdownᵀ (+lora)
 *   [d = rmsnorm(d)·post_ffw_norm];  x_out = x_mid + d
 * and the backward through each of these in reverse (ops.h backward functions, af_matmul_dyw for
 * the frozen weights, af_lora_backward for the adapters). Norm weights are frozen (dw = NULL).
 *
 * Layer range: layers below lo (the lowest layer with an adapter) are frozen: they run forward
 * without keeping anything (or come from the per-sample frozen-prefix cache), and the backward
 * stops in layer lo below its lowest adapter (layer_backward's need_* flags).
 * Memory: the residual stream entering every layer from lo up (and the final one) is kept,
 * [n_layers-lo+1, n, H]. Without checkpointing each layer >= lo keeps its own activation set;
 * with checkpointing there is ONE set, refilled by recomputing the layer's forward from its saved
 * input just before its backward (Chen et al. 2016). `act` is never saved: the backward
 * recomputes it from gate and up (one elementwise pass); nor are the norm outputs h1 and h2
 * (the inputs of the q/k/v and gate/up adapters): the backward recomputes them from the saved
 * norm inputs and rstd (one pass each, same bits; "selective recomputation" in Korthikanti et
 * al. 2022, "Reducing Activation Recomputation in Large Transformer Models"), 2·H floats per
 * token and layer fewer. Dropout masks come from a counter-based
 * RNG keyed by (dropout_seed, layer, proj, token) so a recomputation regenerates the same masks.
 */
#include "train/engine.h"

#include "core/core.h"
#include "core/threads.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* When the context has int8 activations on, af_matmul_xwt quantizes the activations to int8
 * for very small n (matmul.c decode regime, n <= AF_MM_DECODE_N = 4): not differentiable and not
 * f32-exact. Training products with fewer than MIN_ROWS rows are computed on a zero-padded copy so
 * the training forward is f32-exact for every row count and every process setting. */
#define MIN_ROWS 16

/* Token blocking of the frozen-weight products (af_engine_set_block_rows). The micro-kernel reuses
 * a dequantized weight tile for every row of its call, streaming x (or dy) once per tile: with the
 * 2048 rows of a 16 x 128 batch that stream (2 MiB per 256 columns) no longer fits the per-core L2
 * and a product runs ~1.6-2x slower per multiply-add than with 128-512 rows (measured on Zen 4,
 * SmolLM2 Q4_1 gate/down/q, one thread). The engine therefore cuts the rows into blocks of about
 * BLOCK_ROWS and, when there are at least as many blocks as threads, gives whole blocks to the
 * OpenMP threads (each block one single-threaded kernel call: equal shares for every matrix shape,
 * whereas the kernel's own split can be uneven, e.g. 5 column chunks of dy·W over 2 threads).
 * Every row's arithmetic is unchanged (the kernel's per-row summation order does not depend on the
 * rows beside it), so results are bitwise those of one call. */
#define BLOCK_ROWS 256

/* One layer's saved activations; every field is [cap, width] (width in floats per token). */
typedef struct lset {
    float *rstd1, *q, *k, *v, *attn, *lse, *xmid, *rstd2, *gate, *up;
    float *qraw, *rstdq, *kraw, *rstdk, *oraw, *rstdpa, *draw, *rstdpf; /* gemma3 only */
    float *xa[AF_PROJ_COUNT], *mask[AF_PROJ_COUNT];                       /* targeted only */
} lset;

/* Frozen-prefix cache (af_engine_set_prefix_cache): residual stream entering layer lo per sample,
 * keyed by the sample's tokens. Open addressing with linear probing; no eviction. */
typedef struct pc_entry {
    uint64_t h;    /* hash of the tokens; 0 = empty slot */
    int32_t len;
    int32_t *tok;  /* [len], then x [len, H] in the same allocation */
    float *x;
} pc_entry;

typedef struct prefix_cache {
    pc_entry *tab;
    int64_t cap, used;   /* slots (a power of two), entries */
    size_t bytes, max_bytes;
    int64_t hits, misses;
} prefix_cache;

struct af_engine {
    const af_ctx *ctx; /* borrowed: the context of every kernel call (af_engine_new) */
    const af_model *m;
    const af_param_layout *lay;
    int32_t lo;     /* lowest layer with an adapter (af_lora_lowest_layer): layers below are frozen */
    int64_t block_rows; /* token block of the frozen-weight products (BLOCK_ROWS; 0: one call) */
    int64_t cap;    /* tokens the workspace holds */
    int32_t n_sets; /* 1 (checkpointing / forward only) or n_layers - lo */
    void *mem;
    float *xs;      /* [n_layers-lo+1, cap, H] residual stream at the input of layers lo..L-1 and the output */
    lset *sets;     /* [n_sets]; set i belongs to layer lo + i (set 0 is also the frozen layers' scratch) */
    int32_t *pos;   /* [cap] per-sample positions */
    /* scratch [cap, width] */
    float *dX, *dT, *dh, *tH, *hs, *dattn, *dq, *dk, *dv, *dqr, *dkr, *act, *dact, *dgate, *dup, *ltmp, *hN, *rstdN;
    float *padx, *pady; /* [MIN_ROWS, maxdim] */
    int32_t *sub_tok, *sub_ss, *sub_idx; /* [cap], [cap + 1], [cap]: the samples of a batch missing from the
                                            prefix cache: their tokens, sample starts, batch indices */
    prefix_cache pc;
    int probe;            /* af_engine_locate_nonfinite: check every stage of the forward */
    char probe_at[160];   /* the first stage holding a non-finite value ("" = none yet) */
};

typedef struct dims {
    int64_t H, F, nh, nkv, hd, qd, kvd, L, maxd, r;
    int gem;
} dims;

static dims get_dims(const af_model *m, const af_param_layout *lay) {
    const af_model_config *c = &m->cfg;
    dims d;
    d.H = c->hidden_size;
    d.F = c->intermediate_size;
    d.nh = c->num_attention_heads;
    d.nkv = c->num_key_value_heads;
    d.hd = c->head_dim;
    d.qd = d.nh * d.hd;
    d.kvd = d.nkv * d.hd;
    d.L = c->num_hidden_layers;
    d.maxd = d.H > d.qd ? d.H : d.qd;
    if (d.F > d.maxd) d.maxd = d.F;
    d.r = lay->lora.r;
    d.gem = m->arch == AF_ARCH_GEMMA3;
    return d;
}

/* Bump allocator over `base` (NULL: only count). Every region is rounded to 64 bytes. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static float *carve(carver *cv, int64_t nfloats) {
    size_t b = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
    float *p = cv->base ? (float *)(cv->base + cv->used) : NULL;
    cv->used += b;
    return p;
}

/* Lay out (or count) the whole workspace for `cap` tokens and `n_sets` activation sets. */
static void plan(carver *cv, af_engine *e, const af_model *m, const af_param_layout *lay, int64_t cap,
                 int32_t n_sets) {
    dims d = get_dims(m, lay);
    const int masks = lay->lora.dropout > 0;
    const int64_t lo = af_lora_lowest_layer(lay);
    af_engine tmp;
    lset stmp;
    if (!e) e = &tmp;
    e->xs = carve(cv, (d.L - lo + 1) * cap * d.H);
    e->pos = (int32_t *)carve(cv, cap);
    e->dX = carve(cv, cap * d.H);
    e->dT = carve(cv, cap * d.H);
    e->dh = carve(cv, cap * d.H);
    e->tH = carve(cv, cap * d.H);
    e->hs = carve(cv, cap * d.H);
    e->hN = carve(cv, cap * d.H);
    e->rstdN = carve(cv, cap);
    e->dattn = carve(cv, cap * d.qd);
    e->dq = carve(cv, cap * d.qd);
    e->dk = carve(cv, cap * d.kvd);
    e->dv = carve(cv, cap * d.kvd);
    e->dqr = d.gem ? carve(cv, cap * d.qd) : NULL;
    e->dkr = d.gem ? carve(cv, cap * d.kvd) : NULL;
    e->act = carve(cv, cap * d.F);
    e->dact = carve(cv, cap * d.F);
    e->dgate = carve(cv, cap * d.F);
    e->dup = carve(cv, cap * d.F);
    e->ltmp = carve(cv, cap * (d.r + (masks ? d.maxd : 0)));
    e->padx = carve(cv, MIN_ROWS * d.maxd);
    e->pady = carve(cv, MIN_ROWS * d.maxd);
    e->sub_tok = (int32_t *)carve(cv, cap);
    e->sub_ss = (int32_t *)carve(cv, cap + 1);
    e->sub_idx = (int32_t *)carve(cv, cap);
    for (int32_t i = 0; i < n_sets; i++) {
        lset *S = (cv->base && e->sets) ? &e->sets[i] : &stmp;
        memset(S, 0, sizeof *S);
        S->rstd1 = carve(cv, cap);
        S->q = carve(cv, cap * d.qd);
        S->k = carve(cv, cap * d.kvd);
        S->v = carve(cv, cap * d.kvd);
        S->attn = carve(cv, cap * d.qd);
        S->lse = carve(cv, cap * d.nh);
        S->xmid = carve(cv, cap * d.H);
        S->rstd2 = carve(cv, cap);
        S->gate = carve(cv, cap * d.F);
        S->up = carve(cv, cap * d.F);
        if (d.gem) {
            S->qraw = carve(cv, cap * d.qd);
            S->rstdq = carve(cv, cap * d.nh);
            S->kraw = carve(cv, cap * d.kvd);
            S->rstdk = carve(cv, cap * d.nkv);
            S->oraw = carve(cv, cap * d.H);
            S->rstdpa = carve(cv, cap);
            S->draw = carve(cv, cap * d.H);
            S->rstdpf = carve(cv, cap);
        }
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, 0, (af_proj)p);
            if (!(lay->lora.targets & (1u << p))) continue;
            S->xa[p] = carve(cv, cap * d.r);
            if (masks) S->mask[p] = carve(cv, cap * s->in);
        }
    }
}

size_t af_engine_bytes(const af_model *model, const af_param_layout *lay, int64_t n_tok, int checkpointing) {
    carver cv = {NULL, 0};
    const int32_t n_adapted = model->cfg.num_hidden_layers - af_lora_lowest_layer(lay);
    plan(&cv, NULL, model, lay, n_tok, checkpointing || n_adapted < 1 ? 1 : n_adapted);
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
    *out = e;
    return AF_OK;
}

static void pc_clear(prefix_cache *pc) {
    for (int64_t i = 0; i < pc->cap; i++) free(pc->tab[i].tok);
    free(pc->tab);
    pc->tab = NULL;
    pc->cap = pc->used = 0;
    pc->bytes = 0;
    pc->hits = pc->misses = 0;
}

void af_engine_free(af_engine *e) {
    if (!e) return;
    pc_clear(&e->pc);
    af_free_aligned(e->mem);
    free(e->sets);
    free(e);
}

/* Make room for n tokens and at least `n_sets` activation sets. */
static af_status reserve(af_engine *e, int64_t n, int32_t n_sets) {
    if (e->mem && n <= e->cap && n_sets <= e->n_sets) return AF_OK;
    int64_t cap = n > e->cap ? n : e->cap;
    if (n_sets < e->n_sets) n_sets = e->n_sets;
    carver cv = {NULL, 0};
    plan(&cv, NULL, e->m, e->lay, cap, n_sets);
    af_free_aligned(e->mem);
    free(e->sets);
    e->mem = NULL;
    e->cap = 0;
    e->n_sets = 0;
    e->sets = af_calloc((size_t)n_sets, sizeof(lset));
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

/* ---------------------------------------------------------------- forward */

typedef struct run {
    const float *P;
    const int32_t *ss; /* seq_start [B+1] */
    int32_t B;
    int64_t n;
    int drop;          /* dropout active */
    uint64_t seed;
} run;

/* Threads for a block-parallel product: the OpenMP team size when an outer parallel region can
 * be opened without nesting active regions (the kernel calls inside then run single-threaded),
 * else 1 (blocks are then run one after the other, each call threaded by the kernel). */
static int block_threads(const af_ctx *ctx) {
    if (AF_OMP_IN_PARALLEL() || AF_OMP_MAX_ACTIVE_LEVELS() > 1) return 1;
    return ctx->n_threads;
}

/* Frozen-weight product over n rows in token blocks (BLOCK_ROWS):
 *   dyw = 0: y[n, out] (+)= x[n, in] · Wᵀ      (af_matmul_xwt; out = W rows, in = W cols)
 *   dyw = 1: y[n, in]  (+)= x[n, out] · W      (af_matmul_dyw)
 * n >= MIN_ROWS (every block then has >= MIN_ROWS rows too). */
static void mm_blocks(const af_engine *e, int dyw, float *y, const float *x, const af_weight *w, int64_t n,
                      int accumulate) {
    const int64_t xw = dyw ? w->rows : w->cols, yw = dyw ? w->cols : w->rows;
    /* the packed GEMM blocks rows and threads by itself and packs W once per call: one call */
    const int64_t br = af_matmul_packed_path(e->ctx, n, xw, yw) ? 0 : e->block_rows;
    int64_t nb = br > 0 ? (n + br / 2) / br : 1;
    const int nth = nb >= 2 ? block_threads(e->ctx) : 1;
    if (nth > 1 && nb >= nth) nb = (nb + nth - 1) / nth * nth; /* equal shares */
    if (nb < 2) {
        if (dyw) af_matmul_dyw(e->ctx, y, x, w->data, w->type, n, yw, xw, accumulate);
        else af_matmul_xwt(e->ctx, y, x, w->data, w->type, n, xw, yw, accumulate);
        return;
    }
    const int par = nth > 1 && nb >= nth;
    AF_OMP(parallel for schedule(dynamic, 1) num_threads(nth) if (par))
    for (int64_t b = 0; b < nb; b++) {
        const int64_t t0 = n * b / nb, m = n * (b + 1) / nb - t0;
        if (dyw) af_matmul_dyw(e->ctx, y + t0 * yw, x + t0 * xw, w->data, w->type, m, yw, xw, accumulate);
        else af_matmul_xwt(e->ctx, y + t0 * yw, x + t0 * xw, w->data, w->type, m, xw, yw, accumulate);
    }
    (void)par;
}

/* y[n, out] = x[n, in] · Wᵀ, f32-exact for every n (see MIN_ROWS). */
static void mm_xwt(af_engine *e, float *y, const float *x, const af_weight *w, int64_t n) {
    const int64_t in = w->cols, out = w->rows;
    if (n >= MIN_ROWS) {
        mm_blocks(e, 0, y, x, w, n, 0);
        return;
    }
    memcpy(e->padx, x, sizeof(float) * (size_t)(n * in));
    memset(e->padx + n * in, 0, sizeof(float) * (size_t)((MIN_ROWS - n) * in));
    af_matmul_xwt(e->ctx, e->pady, e->padx, w->data, w->type, MIN_ROWS, in, out, 0);
    memcpy(y, e->pady, sizeof(float) * (size_t)(n * out));
}

/* Probe mode only (af_engine_locate_nonfinite): when no stage was named yet and x [n] holds a
 * non-finite value, name this one: "model.layers.L.<what><what2>" (l >= 0) or "<what><what2>". */
static void probe(af_engine *e, const float *x, int64_t n, int32_t l, const char *what, const char *what2) {
    if (!e->probe || e->probe_at[0]) return;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (l >= 0) snprintf(e->probe_at, sizeof e->probe_at, "model.layers.%d.%s%s", (int)l, what, what2);
            else snprintf(e->probe_at, sizeof e->probe_at, "%s%s", what, what2);
            return;
        }
}

/* Projection p of layer l: y = x·Wᵀ plus the LoRA correction when p is targeted. */
static void proj_fwd(af_engine *e, const run *R, lset *S, int32_t l, af_proj p, const af_weight *w, float *y,
                     const float *x) {
    mm_xwt(e, y, x, w, R->n);
    const af_param_layout *lay = e->lay;
    const af_lora_slot *s = af_lora_slot_at(lay, l, p);
    char mod[48] = "";
    if (e->probe) snprintf(mod, sizeof mod, "%s%s", p <= AF_PROJ_O ? "self_attn." : "mlp.", af_proj_name(p));
    probe(e, y, R->n * w->rows, l, mod, " output (frozen weight product)");
    if (s->a_off < 0) return;
    float *mask = NULL;
    if (R->drop && S->mask[p]) {
        mask = S->mask[p];
        af_lora_dropout_mask(e->ctx, mask, R->seed, l, p, 0, R->n, s->in, lay->lora.dropout);
    }
    af_lora_forward(e->ctx, y, S->xa[p], x, mask, R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r,
                    lay->scale);
    probe(e, y, R->n * w->rows, l, mod, " output (after adding the LoRA correction)");
}

/* Layer l: x [n, H] -> xo [n, H], filling the activation set S. */
static void layer_forward(af_engine *e, const run *R, int32_t l, lset *S, const float *x, float *xo) {
    const af_model *m = e->m;
    const af_layer *Ly = &m->layers[l];
    const dims d = get_dims(m, e->lay);
    const float eps = m->cfg.rms_norm_eps;
    const int64_t n = R->n;
    float *h1 = e->hs; /* scratch: recomputed from x and rstd1 by the backward when needed */
    af_rmsnorm_forward(e->ctx, h1, S->rstd1, x, Ly->attn_norm, n, d.H, eps);
    probe(e, h1, n * d.H, l, "input_layernorm output", "");
    proj_fwd(e, R, S, l, AF_PROJ_Q, &Ly->wq, d.gem ? S->qraw : S->q, h1);
    proj_fwd(e, R, S, l, AF_PROJ_K, &Ly->wk, d.gem ? S->kraw : S->k, h1);
    proj_fwd(e, R, S, l, AF_PROJ_V, &Ly->wv, S->v, h1);
    if (d.gem) {
        af_rmsnorm_forward(e->ctx, S->q, S->rstdq, S->qraw, Ly->q_norm, n * d.nh, d.hd, eps);
        af_rmsnorm_forward(e->ctx, S->k, S->rstdk, S->kraw, Ly->k_norm, n * d.nkv, d.hd, eps);
    }
    af_rope_forward(e->ctx, S->q, e->pos, n, d.nh, d.hd, Ly->rope_base, m->rope_neox);
    af_rope_forward(e->ctx, S->k, e->pos, n, d.nkv, d.hd, Ly->rope_base, m->rope_neox);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_attention_forward(e->ctx, S->attn + s0 * d.qd, S->lse + s0 * d.nh, S->q + s0 * d.qd, S->k + s0 * d.kvd,
                             S->v + s0 * d.kvd, len, 0, len, d.kvd, d.nh, d.nkv, d.hd, m->attn_scale, Ly->window);
    }
    probe(e, S->q, n * d.qd, l, "self_attn q after norm/RoPE", "");
    probe(e, S->k, n * d.kvd, l, "self_attn k after norm/RoPE", "");
    probe(e, S->attn, n * d.qd, l, "self_attn attention output (softmax(q·kᵀ)·v)", "");
    float *o = d.gem ? S->oraw : e->tH;
    proj_fwd(e, R, S, l, AF_PROJ_O, &Ly->wo, o, S->attn);
    if (d.gem) {
        af_rmsnorm_forward(e->ctx, e->tH, S->rstdpa, S->oraw, Ly->post_attn_norm, n, d.H, eps);
        o = e->tH;
    }
    af_add(S->xmid, x, o, n * d.H);
    probe(e, S->xmid, n * d.H, l, "residual stream after self_attn", "");
    float *h2 = e->hs; /* likewise (h1 is no longer needed) */
    af_rmsnorm_forward(e->ctx, h2, S->rstd2, S->xmid, Ly->ffn_norm, n, d.H, eps);
    probe(e, h2, n * d.H, l, "post_attention_layernorm output", "");
    proj_fwd(e, R, S, l, AF_PROJ_GATE, &Ly->w_gate, S->gate, h2);
    proj_fwd(e, R, S, l, AF_PROJ_UP, &Ly->w_up, S->up, h2);
    if (m->act_gelu) af_geglu_forward(e->ctx, e->act, S->gate, S->up, n * d.F);
    else af_swiglu_forward(e->ctx, e->act, S->gate, S->up, n * d.F);
    probe(e, e->act, n * d.F, l, "mlp activation (act(gate)·up)", "");
    float *dn = d.gem ? S->draw : e->tH;
    proj_fwd(e, R, S, l, AF_PROJ_DOWN, &Ly->w_down, dn, e->act);
    if (d.gem) {
        af_rmsnorm_forward(e->ctx, e->tH, S->rstdpf, S->draw, Ly->post_ffw_norm, n, d.H, eps);
        dn = e->tH;
    }
    af_add(xo, S->xmid, dn, n * d.H);
    probe(e, xo, n * d.H, l, "output (residual stream after mlp)", "");
}

/* ---------------------------------------------------------------- backward */

/* Backward of projection p: dx[n, in] (+)= dy·W (+ LoRA dx), LoRA grads into G.
 * dx = NULL: the input gradient is not needed (nothing trainable below): only the LoRA grads. */
static void proj_bwd(af_engine *e, const run *R, lset *S, float *G, int32_t l, af_proj p, const af_weight *w,
                     float *dx, const float *dy, const float *x, int accumulate) {
    if (dx) {
        if (R->n >= MIN_ROWS) mm_blocks(e, 1, dx, dy, w, R->n, accumulate);
        else af_matmul_dyw(e->ctx, dx, dy, w->data, w->type, R->n, w->cols, w->rows, accumulate);
    }
    const af_param_layout *lay = e->lay;
    const af_lora_slot *s = af_lora_slot_at(lay, l, p);
    if (s->a_off < 0) return;
    af_lora_backward(e->ctx, dx, G + s->a_off, G + s->b_off, e->ltmp, dy, x, S->xa[p], R->drop ? S->mask[p] : NULL,
                     R->P + s->a_off, R->P + s->b_off, R->n, s->in, s->out, lay->lora.r, lay->scale);
}

static void zero(float *p, int64_t n) { memset(p, 0, sizeof(float) * (size_t)n); }

static int adapted(const af_param_layout *lay, int32_t l, af_proj p) { return af_lora_slot_at(lay, l, p)->a_off >= 0; }

/* dX [n, H]: gradient w.r.t. the layer output on entry, w.r.t. its input x on return when
 * `need_in`. Without need_in (the lowest adapted layer) the backward stops as soon as every
 * adapter of the layer has its gradient: no dx is formed for inputs that lead only to frozen
 * parameters (e.g. with adapters on q/v only: no dy·W of Wq/Wk/Wv, no input rmsnorm backward). */
static void layer_backward(af_engine *e, const run *R, int32_t l, lset *S, float *G, const float *x, int need_in) {
    const af_model *m = e->m;
    const af_layer *Ly = &m->layers[l];
    const af_param_layout *lay = e->lay;
    const dims d = get_dims(m, lay);
    const int64_t n = R->n;
    const float eps = m->cfg.rms_norm_eps;
    float *dX = e->dX;
    /* which gradients below each point are still needed */
    const int need_qkv = need_in || adapted(lay, l, AF_PROJ_Q) || adapted(lay, l, AF_PROJ_K) ||
                         adapted(lay, l, AF_PROJ_V);                         /* d attn (input of o_proj) */
    const int need_mid = need_qkv || adapted(lay, l, AF_PROJ_O);             /* d x_mid */
    const int need_ffn = need_mid || adapted(lay, l, AF_PROJ_GATE) || adapted(lay, l, AF_PROJ_UP); /* d act */
    /* FFN branch */
    const float *dd = dX;
    if (d.gem) {
        zero(e->dT, n * d.H);
        af_rmsnorm_backward(e->ctx, e->dT, NULL, dX, S->draw, Ly->post_ffw_norm, S->rstdpf, n, d.H);
        dd = e->dT;
    }
    if (adapted(lay, l, AF_PROJ_DOWN)) { /* act is the input of down_proj's adapter */
        if (m->act_gelu) af_geglu_forward(e->ctx, e->act, S->gate, S->up, n * d.F);
        else af_swiglu_forward(e->ctx, e->act, S->gate, S->up, n * d.F);
    }
    proj_bwd(e, R, S, G, l, AF_PROJ_DOWN, &Ly->w_down, need_ffn ? e->dact : NULL, dd, e->act, 0);
    if (!need_ffn) return;
    zero(e->dgate, n * d.F);
    zero(e->dup, n * d.F);
    if (m->act_gelu) af_geglu_backward(e->ctx, e->dgate, e->dup, e->dact, S->gate, S->up, n * d.F);
    else af_swiglu_backward(e->ctx, e->dgate, e->dup, e->dact, S->gate, S->up, n * d.F);
    /* h2, the input of gate/up's adapters, recomputed (same function, same inputs: same bits) */
    if (adapted(lay, l, AF_PROJ_GATE) || adapted(lay, l, AF_PROJ_UP))
        af_rmsnorm_forward(e->ctx, e->hs, S->rstd2, S->xmid, Ly->ffn_norm, n, d.H, eps);
    proj_bwd(e, R, S, G, l, AF_PROJ_GATE, &Ly->w_gate, need_mid ? e->dh : NULL, e->dgate, e->hs, 0);
    proj_bwd(e, R, S, G, l, AF_PROJ_UP, &Ly->w_up, need_mid ? e->dh : NULL, e->dup, e->hs, 1);
    if (!need_mid) return;
    af_rmsnorm_backward(e->ctx, dX, NULL, e->dh, S->xmid, Ly->ffn_norm, S->rstd2, n, d.H); /* dX = d x_mid */
    /* attention branch */
    const float *dob = dX;
    if (d.gem) {
        zero(e->dT, n * d.H);
        af_rmsnorm_backward(e->ctx, e->dT, NULL, dX, S->oraw, Ly->post_attn_norm, S->rstdpa, n, d.H);
        dob = e->dT;
    }
    proj_bwd(e, R, S, G, l, AF_PROJ_O, &Ly->wo, need_qkv ? e->dattn : NULL, dob, S->attn, 0);
    if (!need_qkv) return;
    zero(e->dq, n * d.qd);
    zero(e->dk, n * d.kvd);
    zero(e->dv, n * d.kvd);
    for (int32_t b = 0; b < R->B; b++) {
        const int64_t s0 = R->ss[b], len = R->ss[b + 1] - s0;
        af_attention_backward(e->ctx, e->dq + s0 * d.qd, e->dk + s0 * d.kvd, e->dv + s0 * d.kvd, e->dattn + s0 * d.qd,
                              S->attn + s0 * d.qd, S->lse + s0 * d.nh, S->q + s0 * d.qd, S->k + s0 * d.kvd,
                              S->v + s0 * d.kvd, len, 0, len, d.nh, d.nkv, d.hd, m->attn_scale, Ly->window);
    }
    af_rope_backward(e->ctx, e->dq, e->pos, n, d.nh, d.hd, Ly->rope_base, m->rope_neox);
    af_rope_backward(e->ctx, e->dk, e->pos, n, d.nkv, d.hd, Ly->rope_base, m->rope_neox);
    const float *gq = e->dq, *gk = e->dk;
    if (d.gem) {
        zero(e->dqr, n * d.qd);
        zero(e->dkr, n * d.kvd);
        af_rmsnorm_backward(e->ctx, e->dqr, NULL, e->dq, S->qraw, Ly->q_norm, S->rstdq, n * d.nh, d.hd);
        af_rmsnorm_backward(e->ctx, e->dkr, NULL, e->dk, S->kraw, Ly->k_norm, S->rstdk, n * d.nkv, d.hd);
        gq = e->dqr;
        gk = e->dkr;
    }
    float *dh = need_in ? e->dh : NULL;
    /* h1, the input of q/k/v's adapters, recomputed from the layer input likewise */
    if (adapted(lay, l, AF_PROJ_Q) || adapted(lay, l, AF_PROJ_K) || adapted(lay, l, AF_PROJ_V))
        af_rmsnorm_forward(e->ctx, e->hs, S->rstd1, x, Ly->attn_norm, n, d.H, eps);
    proj_bwd(e, R, S, G, l, AF_PROJ_Q, &Ly->wq, dh, gq, e->hs, 0);
    proj_bwd(e, R, S, G, l, AF_PROJ_K, &Ly->wk, dh, gk, e->hs, 1);
    proj_bwd(e, R, S, G, l, AF_PROJ_V, &Ly->wv, dh, e->dv, e->hs, 1);
    if (!need_in) return;
    af_rmsnorm_backward(e->ctx, dX, NULL, e->dh, x, Ly->attn_norm, S->rstd1, n, d.H); /* dX = d x_in */
}

/* ---------------------------------------------------------------- driver */

static af_status check_batch(const af_engine *e, const af_batch *b, int need_labels) {
    const af_model *m = e->m;
    const af_param_layout *lay = e->lay;
    if (!b || !b->tokens || !b->seq_start) return af_fail(AF_ERR_INVALID_ARG, "batch: NULL tokens or seq_start");
    if (lay->num_classes <= 0 || lay->head_w_off < 0)
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

/* Residual stream at the input of layer l (lo <= l <= L; l = L: the last layer's output), [n, H]. */
static float *xs_at(const af_engine *e, int64_t l, int64_t n) {
    return e->xs + (l - e->lo) * n * e->m->cfg.hidden_size;
}

static void set_pos(af_engine *e, const int32_t *ss, int32_t B) {
    for (int32_t s = 0; s < B; s++)
        for (int32_t t = ss[s]; t < ss[s + 1]; t++) e->pos[t] = t - ss[s];
}

/* The frozen prefix for the R->B samples of R (tokens [R->n]): embedding and layers 0..lo-1 into
 * out [R->n, H] (out must not be dT or dh). Nothing is kept: the residual stream ping-pongs between
 * the scratch buffers dT and dh (unused in the forward) and the activations go to set 0, which
 * layer lo overwrites next. Leaves e->pos set for R. */
static void frozen_prefix(af_engine *e, const run *R, const int32_t *tokens, float *out) {
    const af_model *m = e->m;
    const int64_t H = m->cfg.hidden_size, n = R->n;
    const int32_t lo = e->lo;
    set_pos(e, R->ss, R->B);
    float *x = lo == 0 ? out : e->dT;
    for (int64_t t = 0; t < n; t++) {
        float *row = x + t * H;
        af_weight_row(&m->tok_embd, tokens[t], row);
        if (m->embd_scale != 1.0f)
            for (int64_t i = 0; i < H; i++) row[i] *= m->embd_scale;
    }
    probe(e, x, n * H, -1, "model.embed_tokens output", "");
    for (int32_t l = 0; l < lo; l++) {
        float *xo = l == lo - 1 ? out : x == e->dT ? e->dh : e->dT;
        layer_forward(e, R, l, &e->sets[0], x, xo);
        x = xo;
    }
}

/* splitmix64 finaliser (Steele et al. 2014) chained over the tokens; never 0. */
static uint64_t tok_hash(const int32_t *tok, int32_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    for (int32_t i = 0; i < len; i++) {
        h ^= (uint64_t)(uint32_t)tok[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 27;
    }
    return h ? h : 1;
}

/* Slot of (tok, len): the matching entry, or the empty slot where it would go. */
static pc_entry *pc_slot(prefix_cache *pc, uint64_t h, const int32_t *tok, int32_t len) {
    for (int64_t i = (int64_t)(h & (uint64_t)(pc->cap - 1));; i = (i + 1) & (pc->cap - 1)) {
        pc_entry *en = &pc->tab[i];
        if (!en->h || (en->h == h && en->len == len && !memcmp(en->tok, tok, sizeof(int32_t) * (size_t)len)))
            return en;
    }
}

/* Insert a copy of (tok, x [len, H]) if the byte budget allows; silently skipped otherwise (also on
 * allocation failure: the cache is an optimisation only). */
static void pc_insert(prefix_cache *pc, uint64_t h, const int32_t *tok, int32_t len, const float *x, int64_t H) {
    const size_t sz = sizeof(int32_t) * (size_t)len + sizeof(float) * (size_t)(len * H) + 64;
    if (pc->bytes + sz > pc->max_bytes) return;
    if (2 * (pc->used + 1) > pc->cap) { /* grow to keep the load <= 1/2 */
        int64_t ncap = pc->cap ? 2 * pc->cap : 1024;
        pc_entry *nt = calloc((size_t)ncap, sizeof *nt);
        if (!nt) return;
        prefix_cache g = *pc;
        g.tab = nt;
        g.cap = ncap;
        for (int64_t i = 0; i < pc->cap; i++)
            if (pc->tab[i].h) *pc_slot(&g, pc->tab[i].h, pc->tab[i].tok, pc->tab[i].len) = pc->tab[i];
        free(pc->tab);
        pc->tab = nt;
        pc->cap = ncap;
    }
    pc_entry *en = pc_slot(pc, h, tok, len);
    if (en->h) return; /* already there */
    int32_t *mem = malloc(sz);
    if (!mem) return;
    memcpy(mem, tok, sizeof(int32_t) * (size_t)len);
    float *xc = (float *)(((uintptr_t)(mem + len) + 63) & ~(uintptr_t)63);
    memcpy(xc, x, sizeof(float) * (size_t)(len * H));
    en->h = h;
    en->len = len;
    en->tok = mem;
    en->x = xc;
    pc->used++;
    pc->bytes += sz;
}

/* Residual stream entering layer lo for the batch, into xs_at(lo): from the prefix cache for the
 * samples it holds, computed (and cached) for the others as one sub-batch. Samples are independent
 * (positions restart, attention stays inside a sample), so this equals computing the whole batch. */
static void prefix_cached(af_engine *e, const run *R, const af_batch *b) {
    prefix_cache *pc = &e->pc;
    const int64_t H = e->m->cfg.hidden_size;
    float *dst = xs_at(e, e->lo, R->n);
    int32_t nmiss = 0;
    int64_t nt = 0;
    e->sub_ss[0] = 0;
    for (int32_t s = 0; s < b->n_samples; s++) {
        const int32_t s0 = b->seq_start[s], len = b->seq_start[s + 1] - s0;
        const uint64_t h = tok_hash(b->tokens + s0, len);
        pc_entry *en = pc->cap ? pc_slot(pc, h, b->tokens + s0, len) : NULL;
        if (en && en->h) {
            memcpy(dst + (int64_t)s0 * H, en->x, sizeof(float) * (size_t)(len * H));
            pc->hits++;
            continue;
        }
        pc->misses++;
        memcpy(e->sub_tok + nt, b->tokens + s0, sizeof(int32_t) * (size_t)len);
        nt += len;
        e->sub_idx[nmiss] = s;
        e->sub_ss[++nmiss] = (int32_t)nt;
    }
    if (!nmiss) return;
    run Rs = *R;
    Rs.ss = e->sub_ss;
    Rs.B = nmiss;
    Rs.n = nt;
    frozen_prefix(e, &Rs, e->sub_tok, e->hN); /* hN is free until the final norm */
    for (int32_t k = 0; k < nmiss; k++) {
        const int32_t s = e->sub_idx[k], s0 = b->seq_start[s], len = b->seq_start[s + 1] - s0;
        const float *src = e->hN + (int64_t)e->sub_ss[k] * H;
        memcpy(dst + (int64_t)s0 * H, src, sizeof(float) * (size_t)(len * H));
        pc_insert(pc, tok_hash(b->tokens + s0, len), b->tokens + s0, len, src, H);
    }
}

/* Embedding, positions and every layer; final normed states in e->hN, pooled [B, H] and logits.
 * The frozen layers below e->lo run without keeping anything (frozen_prefix), or come from the
 * prefix cache. Only layers lo.. keep their input (xs) and, with `save`, their own activation set. */
static void forward_all(af_engine *e, const run *R, const af_batch *b, int save, float *pooled, float *logits,
                        af_pooling pool) {
    const af_model *m = e->m;
    const dims d = get_dims(m, e->lay);
    const int64_t n = R->n;
    const int32_t lo = e->lo;
    if (lo > 0 && e->pc.max_bytes > 0 && !e->probe) prefix_cached(e, R, b);
    else frozen_prefix(e, R, b->tokens, xs_at(e, lo, n));
    set_pos(e, b->seq_start, b->n_samples);
    for (int32_t l = lo; l < d.L; l++) {
        lset *S = &e->sets[save ? l - lo : 0];
        layer_forward(e, R, l, S, xs_at(e, l, n), xs_at(e, l + 1, n));
    }
    af_rmsnorm_forward(e->ctx, e->hN, e->rstdN, xs_at(e, d.L, n), m->output_norm, n, d.H, m->cfg.rms_norm_eps);
    probe(e, e->hN, n * d.H, -1, "model.norm output", "");
    af_pool_forward(pooled, e->hN, b->seq_start, b->n_samples, d.H, pool);
    probe(e, pooled, b->n_samples * d.H, -1, "pooled hidden state", "");
    const af_param_layout *lay = e->lay;
    af_head_forward(e->ctx, logits, pooled, R->P + lay->head_w_off, R->P + lay->head_b_off, b->n_samples, d.H,
                    lay->num_classes);
    probe(e, logits, (int64_t)b->n_samples * lay->num_classes, -1, "score output (logits)", "");
}

af_status af_engine_locate_nonfinite(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o,
                                     char *where, size_t cap) {
    if (!e || !P || !b || !o || !where || !cap) return af_fail(AF_ERR_INVALID_ARG, "engine probe: NULL argument");
    where[0] = 0;
    AF_TRY(check_batch(e, b, 0));
    AF_TRY(reserve(e, b->n_tok, 1));
    const int64_t H = e->m->cfg.hidden_size;
    float *buf = af_malloc(sizeof(float) * (size_t)(b->n_samples * (H + e->lay->num_classes)));
    if (!buf) return af_fail(AF_ERR_NOMEM, "engine probe: out of memory");
    run R = {P, b->seq_start, b->n_samples, b->n_tok, o->train && e->lay->lora.dropout > 0, o->dropout_seed};
    e->probe = 1;
    e->probe_at[0] = 0;
    forward_all(e, &R, b, 0, buf, buf + b->n_samples * H, o->pooling);
    e->probe = 0;
    snprintf(where, cap, "%s", e->probe_at);
    free(buf);
    return AF_OK;
}

af_status af_engine_set_prefix_cache(af_engine *e, size_t max_bytes) {
    if (!e) return af_fail(AF_ERR_INVALID_ARG, "engine: NULL argument");
    if (max_bytes == 0) pc_clear(&e->pc);
    e->pc.max_bytes = max_bytes;
    return AF_OK;
}

void af_engine_prefix_cache_stats(const af_engine *e, int64_t *entries, size_t *bytes, int64_t *hits, int64_t *misses) {
    if (entries) *entries = e->pc.used;
    if (bytes) *bytes = e->pc.bytes;
    if (hits) *hits = e->pc.hits;
    if (misses) *misses = e->pc.misses;
}

int32_t af_engine_first_layer(const af_engine *e) { return e->lo; }

void af_engine_set_block_rows(af_engine *e, int64_t rows) {
    if (e) e->block_rows = rows <= 0 ? 0 : rows < 4 * MIN_ROWS ? 4 * MIN_ROWS : rows;
}

static const af_step_opts default_opts = {AF_POOL_MEAN, NULL, 0, 0, 0};

af_status af_engine_forward(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o, float *logits) {
    if (!e || !P || !logits) return af_fail(AF_ERR_INVALID_ARG, "engine forward: NULL argument");
    if (!o) o = &default_opts;
    AF_TRY(check_batch(e, b, 0));
    AF_TRY(reserve(e, b->n_tok, 1));
    const int64_t H = e->m->cfg.hidden_size;
    float *pooled = af_malloc(sizeof(float) * (size_t)(b->n_samples * H));
    if (!pooled) return af_fail(AF_ERR_NOMEM, "engine forward: out of memory");
    run R = {P, b->seq_start, b->n_samples, b->n_tok, o->train && e->lay->lora.dropout > 0, o->dropout_seed};
    forward_all(e, &R, b, 0, pooled, logits, o->pooling);
    free(pooled);
    return AF_OK;
}

af_status af_engine_step(af_engine *e, const float *P, float *G, const af_batch *b, const af_step_opts *o,
                         float grad_scale, double *loss, float *logits) {
    if (!e || !P || !G || !loss) return af_fail(AF_ERR_INVALID_ARG, "engine step: NULL argument");
    if (!o) o = &default_opts;
    AF_TRY(check_batch(e, b, 1));
    const af_model *m = e->m;
    const af_param_layout *lay = e->lay;
    const dims d = get_dims(m, lay);
    const int ckpt = o->checkpointing != 0;
    const int32_t lo = e->lo;
    AF_TRY(reserve(e, b->n_tok, ckpt || lo >= d.L - 1 ? 1 : (int32_t)d.L - lo));
    const int32_t B = b->n_samples, C = lay->num_classes;
    const int64_t n = b->n_tok;
    float *small = af_malloc(sizeof(float) * (size_t)(2 * B * d.H + 2 * B * C));
    if (!small) return af_fail(AF_ERR_NOMEM, "engine step: out of memory");
    float *pooled = small, *dpooled = small + B * d.H, *lg = dpooled + B * d.H, *dlg = lg + B * C;
    run R = {P, b->seq_start, B, n, o->train && lay->lora.dropout > 0, o->dropout_seed};
    forward_all(e, &R, b, !ckpt, pooled, lg, o->pooling);
    if (logits) memcpy(logits, lg, sizeof(float) * (size_t)(B * C));
    double L = b->labels ? af_ce_loss(dlg, NULL, lg, b->labels, o->class_w, B, C)
                         : af_bce_loss(dlg, lg, b->multi_hot, B, C);
    *loss = L;
    if (!isfinite(L)) { /* the caller decides (skip the step); no gradient is added */
        free(small);
        return AF_OK;
    }
    for (int64_t i = 0; i < (int64_t)B * C; i++) dlg[i] *= grad_scale;
    zero(dpooled, B * d.H);
    af_head_backward(e->ctx, dpooled, G + lay->head_w_off, G + lay->head_b_off, dlg, pooled, P + lay->head_w_off, B, d.H, C);
    zero(e->dT, n * d.H);
    af_pool_backward(e->dT, dpooled, b->seq_start, B, d.H, o->pooling);
    zero(e->dX, n * d.H);
    af_rmsnorm_backward(e->ctx, e->dX, NULL, e->dT, xs_at(e, d.L, n), m->output_norm, e->rstdN, n, d.H);
    /* down to the lowest adapted layer only: nothing below it is trainable */
    for (int32_t l = (int32_t)d.L - 1; l >= lo; l--) {
        const float *x = xs_at(e, l, n);
        lset *S = &e->sets[ckpt ? 0 : l - lo];
        if (ckpt) layer_forward(e, &R, l, S, x, xs_at(e, l + 1, n)); /* recompute */
        layer_backward(e, &R, l, S, G, x, l > lo);
    }
    free(small);
    return AF_OK;
}
