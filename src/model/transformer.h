/*
 * transformer.h — THE layer walk of afinar: one decoder layer as a forward/backward pair, used by
 * inference (src/infer/session.c: KV cache, batched prompt and single-token decode) and by training
 * (src/train/engine.c: packed per-sample attention, saved activations or checkpoint recompute).
 * Every kernel call of a layer (and of the embedding, the final norm and the LM head) is in
 * transformer.c.
 *
 * Per layer l, reading the architecture description m->desc (model.h af_arch_desc) and the layer's
 * own sizes and fields (af_layer: head_dim, KV heads, FFN width, window, RoPE base/factors, kv_src,
 * out_scale), with [..] only when the description field named in brackets is set:
 *   h1 = rmsnorm(x)·attn_norm
 *   q = h1·Wqᵀ [+ bq: qkv_bias] (+ LoRA);  [q = rmsnorm_head(q)·q_norm: qk_norm];  k, v likewise
 *     (v = the k projection when af_layer.v_from_k);  [v = rmsnorm_head(v) without weight: v_norm]
 *   rope(q), rope(k)   (layout desc.rope_neox, base af_layer.rope_base, factors rope_freq_factors)
 *   attn = attention(q, K, V)   (causal, window af_layer.window; scale desc.attn_scale); a layer with
 *     kv_src != l computes no k/v and attends to layer kv_src's K/V (KV sharing, gemma4)
 *   o = attn·Woᵀ (+ LoRA);  [o = rmsnorm(o)·post_attn_norm: sandwich_norm];  x_mid = x + o
 *   h2 = rmsnorm(x_mid)·ffn_norm;  gate, up = h2·W{gate,up}ᵀ (+ LoRA)
 *   act = silu(gate)·up or gelu_tanh(gate)·up (desc.act);  d = act·Wdownᵀ (+ LoRA)
 *   [d = rmsnorm(d)·post_ffw_norm: sandwich_norm];  x_ffn = x_mid + d
 *   [x_ffn += rmsnorm((gelu_tanh(x_ffn·Wgateᵀ)·pl_l)·Wprojᵀ)·post_norm: ple_dim, with pl_l the
 *     layer's per-layer input, af_tf_ple_inputs];  x_out = out_scale·x_ffn
 * Sources: llama.cpp src/models/llama.cpp, gemma3.cpp, gemma4.cpp; transformers modeling_llama.py,
 * modeling_gemma3.py, modeling_gemma4.py (docs/FORMATS.md §3-§5c).
 *
 * LoRA (lora.h; PEFT's unmerged form) on every projection p with an adapter slot:
 *   y = x·Wᵀ + s·(dropout(x)·Aᵀ)·Bᵀ,  s = af_tf_run.lora_scale,  dropout only in training.
 *
 * Modes (af_tf_run.mode):
 *   AF_TF_INFER  n tokens at positions n_past.. of ONE sequence; K/V appended to the cache and
 *                attention reads the cache. Frozen products are one af_matmul_xwt call of n rows
 *                (decode n = 1 may use int8 activations when the context enables them).
 *   AF_TF_TRAIN  a packed batch of B samples (positions restart per sample, attention inside a
 *                sample); frozen products are f32-exact for every row count (rows < AF_TF_MIN_ROWS
 *                go through a zero-padded copy) and split into token blocks (block_rows); the
 *                activation set keeps what the backward needs. Training-save: one set per layer;
 *                training-recompute (checkpointing): one set refilled by calling the forward again
 *                on the layer's saved input just before its backward (same bits).
 *
 * Memory: every activation, scratch, KV-cache, parameter (P) and gradient (G) pointer
 * below is DEVICE memory of the run's context (kernels/backend.h), allocated through its table
 * (af_carver_alloc) and touched only by the table's ops; token ids and positions are uploaded
 * into device buffers. Host arrays are said so ("host").
 */
#ifndef AF_TRANSFORMER_H
#define AF_TRANSFORMER_H

#include "kernels/backend.h"
#include "lora/lora.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* Training products with fewer rows are computed on a zero-padded copy (see transformer.c). */
#define AF_TF_MIN_ROWS 16

/* Sizes of one layer (per layer: gemma4's global layers have another head_dim and KV-head count,
 * its KV-sharing layers a double-width FFN), or the largest over the layers (transformer_mem.c:
 * the buffers are carved for those). H hidden_size, F intermediate size, nh / nkv attention / KV
 * heads, hd head_dim, qd = nh*hd, kvd = nkv*hd, P the per-layer input width (desc.ple_dim, 0 =
 * none), maxd the widest product row (0 for one layer's sizes). Internal to the walk's files. */
typedef struct af_tf_dims {
    int64_t H, F, nh, nkv, hd, qd, kvd, P, maxd;
} af_tf_dims;

typedef enum af_tf_mode { AF_TF_INFER = 0, AF_TF_TRAIN = 1 } af_tf_mode;

/* One layer's activations, each [cap, width] floats (width per token in brackets). Buffers a mode
 * or description does not use are NULL. Inference: the rstd*, lse and mask fields are NULL (not
 * kept) and the xa[p] of every adapted projection may share one buffer [cap, r]. */
typedef struct af_tf_acts {
    float *rstd1, *q, *k, *v, *attn, *lse, *xmid, *rstd2, *gate, *up; /* [1] [qd] [kvd] [kvd] [qd] [nh] [H] [1] [F] [F] */
    float *qraw, *rstdq, *kraw, *rstdk;  /* desc.qk_norm: q, k before their norm [qd] [nh] [kvd] [nkv] */
    float *oraw, *rstdpa, *draw, *rstdpf; /* desc.sandwich_norm: o, d before their post-norm [H] [1] [H] [1] */
    float *vraw, *rstdv;                  /* desc.v_norm: v before its norm [kvd] [nkv] */
    float *ple_g, *ple_raw, *rstdple;     /* desc.ple_dim: gate pre-activation [P], projection before its norm [H], [1] */
    float *xa[AF_PROJ_COUNT];             /* adapted projections: x·Aᵀ [r] */
    float *mask[AF_PROJ_COUNT];           /* training with dropout: the masks [in] */
    float *dora_y[AF_PROJ_COUNT];         /* DoRA layouts: the projection's y_pre [out] (lora/dora.h) */
    float *dora_n[AF_PROJ_COUNT];         /* DoRA layouts: the weight norms, [out] once (not per token) */
} af_tf_acts;

/* Scratch shared by the layers, each [cap, width]. The backward-only ones are NULL in inference. */
typedef struct af_tf_scratch {
    float *hs;   /* [H] normed layer input (h1, then h2) */
    float *tH;   /* [H] branch output added to the residual stream */
    float *act;  /* [F] glu(gate, up) */
    /* backward (training) */
    float *dX, *dT, *dh, *dattn, *dq, *dk, *dv, *dqr, *dkr, *dvr, *dact, *dgate, *dup;
    /* desc.ple_dim: the layer's per-layer input [P], gelu(gate)·input [P], the tokens' packed PLE row
     * [L·P] (af_tf_ple_inputs); backward: d act, d gate [P] */
    float *ple_in, *ple_act, *ple_tok, *ple_dact, *ple_dg;
    int32_t *ple_idx; /* desc.ple_dim: [L, cap] the rows of each layer's slice of the per-layer inputs */
    float *ltmp;       /* [r (+ max width with dropout masks)] af_lora_backward scratch */
    float *padx, *pady; /* [AF_TF_MIN_ROWS, max(H, qd, F)] */
    float *dora_a, *dora_b, *dora_c; /* training with a DoRA layout: [max(H, qd, F)] each */
    float *xa0, *g0;   /* training with lay->init_P (PiSSA / OLoRA): [r] x·A0ᵀ, and [2·r·max width] discarded dA0, dB0 */
} af_tf_scratch;

/* Carve (or count: af_carver, kernels/backend.h) one activation set / the scratch for `cap` tokens. lay: the adapter layout
 * (NULL: none). masks: room for dropout masks (training). */
void af_tf_carve_acts(af_carver *cv, af_tf_acts *S, const af_model *m, const af_param_layout *lay, int64_t cap,
                      af_tf_mode mode, int masks);
void af_tf_carve_scratch(af_carver *cv, af_tf_scratch *w, const af_model *m, const af_param_layout *lay,
                         int64_t cap, af_tf_mode mode, int masks);

/* Non-finite probe hook (training's af_engine_locate_nonfinite): called after each stage with its
 * output x [n] and the stage's name "<what><what2>" of layer l (l = -1: not a layer stage). */
typedef void (*af_tf_probe_fn)(void *ctx, const float *x, int64_t n, int32_t l, const char *what,
                               const char *what2);

/* One LoRA adapter applied unmerged at inference: parameters P (device) laid out by lay, the
 * correction's scale (y += scale·(x·Aᵀ)·Bᵀ on every projection with a slot in lay). */
typedef struct af_tf_lora {
    const float *P;
    const af_param_layout *lay;
    float scale;
} af_tf_lora;

/* One sequence of a multi-sequence inference call (AF_TF_INFER with af_tf_run.n_seq > 0: continuous
 * batching). Its rows are contiguous in the call, in the order of the af_tf_run.seq table. */
typedef struct af_tf_seq {
    int64_t n;                /* tokens of this sequence in the call (>= 1) */
    int64_t n_past;           /* positions already in its cache; the tokens go to n_past .. n_past+n-1 */
    float *const *k_cache, *const *v_cache; /* its caches: [n_layers] device buffers [n_ctx][kvd(l)] (af_tf_kv_layer) */
    int64_t n_ctx;
    const af_tf_lora *lora;   /* its adapters [n_lora] (0: none), their corrections added in this order */
    int32_t n_lora;
} af_tf_seq;

/* Rows per frozen product of a multi-sequence call: the matmul decode regime (n <= 4 rows,
 * kernels/cpu/matmul_internal.h AF_MM_DECODE_N) computes every row alone in the order of a
 * one-row call, so rows batched in groups of at most this many get the bits they get alone. */
#define AF_TF_DECODE_ROWS 4

/* Everything one forward/backward call of a layer reads besides the layer index and buffers. */
struct af_tf_run {
    const af_ctx *ctx;         /* context of every kernel call (borrowed): the engine's or the session's */
    const af_model *m;
    af_tf_mode mode;
    int64_t n;                 /* tokens in this call */
    const int32_t *pos;        /* [n] RoPE positions (device) */
    af_tf_scratch *ws;
    /* adapter (P == NULL: none): parameters P laid out by lay, scale s of the correction */
    const float *P;
    const af_param_layout *lay;
    float lora_scale;
    struct af_tf_infer *dora_cache; /* AF_TF_INFER with a DoRA adapter: the state whose cached norms it uses, else NULL */
    const float *P0;           /* training with lay->init_P (PiSSA / OLoRA): its device copy; every adapted
                                  product also gets −s·x·A0ᵀ·B0ᵀ (no dropout, no gradient), else NULL */
    int drop;                  /* training: dropout active (masks from af_lora_dropout_mask) */
    uint64_t seed;             /* dropout seed */
    /* AF_TF_TRAIN: packed samples, seq_start [B + 1] (host: the walk loops over the samples); token
     * block of the frozen products (0: one call) */
    const int32_t *ss;
    int32_t B;
    int64_t block_rows;
    /* AF_TF_INFER: KV caches, host arrays [n_layers] of device buffers [n_ctx][kvd(l)] (a KV-sharing
     * layer reads kv_src's: af_tf_kv_layer), past length */
    float *const *k_cache, *const *v_cache;
    int64_t n_ctx, n_past;
    /* desc.ple_dim: the per-layer inputs of this call's tokens [n, L, P] (af_tf_ple_inputs) */
    const float *ple;
    /* AF_TF_TRAIN with KV sharing (desc.n_kv_shared): per layer l, NULL unless later layers attend to
     * l's K/V (af_tf_kv_shared_src): kv_k/kv_v [n, kvd(l)] K (after norm and RoPE) and V, written by
     * l's forward, read by the later layers; kv_dk/kv_dv their gradients, ADDED to by the later
     * layers' backward and consumed by l's (the caller zeroes them before a backward). */
    float **kv_k, **kv_v, **kv_dk, **kv_dv;
    /* optional probe (NULL: none) */
    af_tf_probe_fn probe;
    void *probe_ctx;
    /* AF_TF_INFER over several sequences (n_seq > 0; then P/lay/lora_scale and the cache fields
     * above are unused): seq [n_seq] with n = Σ seq[i].n; xa [n, max r of the adapters] scratch */
    const af_tf_seq *seq;
    int32_t n_seq;
    float *xa;
};
typedef struct af_tf_run af_tf_run;

/* x [n, H] = token embeddings of tokens[n] (device; ids in [0, vocab), checked by the caller) times
 * desc.embd_scale. */
void af_tf_embed(const af_ctx *ctx, const af_model *m, const int32_t *tokens, int64_t n, float *x);

/* Per-layer inputs (PLE, desc.ple_dim = P > 0) of R->n tokens, out [n, L, P] (transformers
 * Gemma4TextModel.get_per_layer_inputs + project_per_layer_inputs; llama.cpp gemma4.cpp
 * build_inp_per_layer / project_per_layer_inputs):
 *   proj = rmsnorm_P((xemb·Wpmpᵀ)·H^-1/2)·per_layer_proj_norm     (norm over each layer's P values)
 *   out  = (proj + per_layer_token_embd[token]·P^1/2)·2^-1/2
 * xemb [n, H]: the scaled token embeddings (af_tf_embed); tokens [n] (device). Uses R->ws->ple_tok and
 * fills R->ws->ple_idx (the rows of each layer's slice). */
void af_tf_ple_inputs(const af_tf_run *R, const int32_t *tokens, const float *xemb, float *out);

/* Layer l's buffer of a KV cache (host array [n_layers] of device buffers [n_ctx][kvd(l)]): the
 * buffer of layer kv_src for a KV-sharing layer. */
float *af_tf_kv_layer(const af_model *m, float *const *cache, int32_t l);
/* 1 when a later layer attends to layer l's K/V (gemma4 KV sharing), else 0. */
int af_tf_kv_shared_src(const af_model *m, int32_t l);

/* Layer l forward: x [R->n, H] -> xo [R->n, H] (xo may equal x), filling S. Inference appends the
 * tokens' K/V to the caches at R->n_past. */
void af_tf_layer_forward(const af_tf_run *R, int32_t l, af_tf_acts *S, const float *x, float *xo);

/* Layer l backward (AF_TF_TRAIN; S as filled by the forward of the same x). On entry ws->dX [n, H]
 * holds dL/d(x_out); on return dL/dx when need_in (else the backward stops below the layer's
 * lowest adapter). LoRA gradients are ADDED into G (offsets of R->lay). Norm weights are frozen. */
void af_tf_layer_backward(const af_tf_run *R, int32_t l, af_tf_acts *S, float *G, const float *x, int need_in);

/* Final norm: y [n, H] = rmsnorm(x)·output_norm, rstd [n] (may be NULL); y may equal x. */
void af_tf_final_norm(const af_ctx *ctx, const af_model *m, float *y, float *rstd, const float *x, int64_t n);
/* Its backward: dx [n, H] += d rmsnorm given dy and the forward's x, rstd. */
void af_tf_final_norm_backward(const af_ctx *ctx, const af_model *m, float *dx, const float *dy, const float *x, const float *rstd,
                               int64_t n);

/* LM head: logits [n, vocab] = softcap(output_norm(x)·Woutᵀ) for the final hidden states x [n, H]
 * (normalised in place). softcap(z) = c·tanh(z/c) with c = desc.final_logit_softcap, off when 0. */
void af_lm_head_forward(const af_ctx *ctx, const af_model *m, float *logits, float *x, int64_t n);

/* ---- LM head loss (causal-LM training; forward and backward side by side in transformer.c) ----
 *
 * For the final hidden states x [n, H] (before the output norm) and next-token targets [n]
 * (target[i] in [0, vocab) = the token position i must predict, -1 = no loss at i):
 *   h = rmsnorm(x)·output_norm                    (af_tf_final_norm; every row)
 *   z_i = softcap(h_i·Woutᵀ) [vocab], softcap(u) = c·tanh(u/c) with c = desc.final_logit_softcap
 *         (off when 0; Gemma 2/3 final_logit_softcapping, transformers modeling_gemma3.py)
 *   loss_i = logsumexp(z_i) − z_i[target_i]        (softmax cross-entropy in nats)
 * Only rows with a target are projected, af_lm_chunk_rows(m) rows at a time, so
 * [n, vocab] is never held whole (Gemma 3: vocab 262,144 -> 1 MiB per row).
 * Backward (dx != NULL), the gradient of grad_scale·Σ_i loss_i:
 *   dz_i = grad_scale·(softmax(z_i) − onehot(target_i)),  du = dz·(1 − (z/c)²) when capped
 *   dh_i = du_i·Wout  (af_matmul_dyw on the stored, possibly quantized / tied token_embd blocks)
 *   dx  += rmsnorm backward of dh (af_tf_final_norm_backward)
 * Source: the standard softmax cross-entropy gradient (e.g. Goodfellow et al. 2016, §6.2.2.3);
 * tanh'(u) = 1 − tanh²(u); RMSNorm backward: ops.h. */
typedef struct af_lm_loss {
    double loss_sum;    /* Σ over target rows of loss_i, nats, accumulated in double */
    int64_t n_targets;  /* rows with target >= 0 */
    int64_t n_correct;  /* target rows whose argmax_v z_i[v] (lowest index on ties) == target_i */
} af_lm_loss;

/* Rows per logits chunk for model m: clamp(2^23 / vocab, AF_TF_MIN_ROWS, 256), i.e. <= 32 MiB of
 * logits (SmolLM2 vocab 49,152: 170 rows; Gemma 3: 32 rows). */
int64_t af_lm_chunk_rows(const af_model *m);
/* Floats of scratch af_lm_head_loss needs for model m: one chunk of logits [chunk, vocab] and two
 * chunks of rows [chunk, H] (gathered normed rows, their dh), each rounded up to 64 bytes. The
 * per-token buffers hN [n, H], rstd [n] are the caller's. */
int64_t af_lm_head_scratch_floats(const af_model *m);

/* Forward (+ backward when dx != NULL) of the LM head loss above for n rows.
 *   x       [n, H]  final hidden states (read only)
 *   targets [n]     host: -1 or a token id in [0, vocab) (checked by the caller)
 *   hN      [n, H]  out: normed states; then, with dx, overwritten by dL/dh (scratch)
 *   rstd    [n]     out: the norm's 1/rms per row
 *   dx      [n, H]  ADDED to: dL/dx (NULL: forward only)
 *   scratch [af_lm_head_scratch_floats(m)] floats (64-byte aligned)
 * Results in *res (overwritten). A non-finite loss is returned as is; the gradient is then
 * meaningless (the caller must not use it). A device error gives loss_sum NaN (the sticky error
 * is then in af_device_status). Threads: the context's (kernel calls and per-row
 * softmax); the result does not depend on the thread count. */
void af_lm_head_loss(const af_ctx *ctx, const af_model *m, const float *x, const int32_t *targets, int64_t n,
                     float *hN, float *rstd, float *dx, float grad_scale, float *scratch, af_lm_loss *res);

/* Inference state of up to `cap` tokens per call: residual stream, one activation set, scratch
 * (device memory of the context given to af_tf_infer_init). */
typedef struct af_tf_infer {
    int64_t cap;
    af_devmem mem;
    float *x;         /* [cap, H] residual stream; the final hidden states (before the norm) after a call */
    int32_t *pos;     /* [cap] positions (device) */
    int32_t *tok;     /* [cap] token ids (device) */
    int32_t *pos_host;/* [cap] positions (host staging) */
    float *ple;       /* [cap, L·P] per-layer inputs (desc.ple_dim), else NULL */
    af_tf_acts S;
    af_tf_scratch w;
    /* DoRA adapter (lay->lora.use_dora; CPU): the weight norms of every (layer, projection), computed at the
     * first forward that needs them and kept while the same P and scale are used (host, owned) */
    float *dora_nrm;        /* [n_layers · AF_PROJ_COUNT · dora_stride] */
    unsigned char *dora_ok; /* [n_layers · AF_PROJ_COUNT] */
    int64_t dora_stride;    /* the largest out of the layout's slots */
    const float *dora_P;    /* the P and scale the cached norms belong to */
    float dora_scale;
} af_tf_infer;

/* lay: the adapter layout the state must serve (NULL: none); memory on ctx's device.
 * Errors: AF_ERR_NOMEM (naming the device). */
af_status af_tf_infer_init(af_tf_infer *s, const af_ctx *ctx, const af_model *m, const af_param_layout *lay,
                           int64_t cap);
void af_tf_infer_free(af_tf_infer *s);

/* Cancellation of an inference forward (NULL: none): the flags flags[0 .. n_flags) (NULL entries
 * ignored) are read before every layer; one non-zero stops the walk there with AF_ERR_CANCELLED
 * (the caches then hold K/V of some layers for this call's positions, which the caller treats as
 * not written: its n_past does not advance). */
typedef struct af_tf_control {
    const volatile int *const *flags;
    int32_t n_flags;
} af_tf_control;

/* Inference forward of n tokens (host ids, n <= s->cap) at positions n_past .. n_past+n-1 through
 * every layer, appending K/V to the per-layer caches k_cache[l], v_cache[l] [n_ctx][kvd(l)]
 * (device); s->x gets the final hidden states [n, H] before the output norm. Adapter: P (device)
 * laid out by lay (as given to af_tf_infer_init) with correction scale `scale`; P == NULL: none.
 * ctx: the context s was made with. Errors: AF_ERR_CANCELLED (ctl), the device's (AF_ERR_DEVICE
 * from the uploads). */
af_status af_tf_infer_forward(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const float *P,
                              const af_param_layout *lay, float scale, const int32_t *tokens, int64_t n,
                              int64_t n_past, float *const *k_cache, float *const *v_cache, int64_t n_ctx,
                              const af_tf_control *ctl);

/* Multi-sequence inference forward (continuous batching): tokens [n] (host) hold the rows of seq[0], then
 * seq[1], ... (n = Σ seq[i].n <= s->cap); every sequence attends to its own cache at its own
 * positions and gets its own adapter's LoRA correction, while each frozen product runs once over
 * the rows of several sequences. Rows are grouped so that every sequence gets exactly the bits of
 * a one-sequence af_tf_infer_forward of the same tokens: sequences of <= AF_TF_DECODE_ROWS rows are
 * packed into products of <= AF_TF_DECODE_ROWS rows (the decode regime, per-row exact), a longer
 * sequence is a product of its own; the adapters' corrections run per sequence. xa: device scratch
 * [n, max r over the sequences' adapters] (NULL when none has one). s->x gets the final hidden
 * states [n, H]. Returns AF_ERR_CANCELLED when ctl->cancel was set before a layer, else AF_OK. */
af_status af_tf_infer_forward_multi(const af_ctx *ctx, const af_model *m, af_tf_infer *s, const af_tf_seq *seq,
                                    int32_t n_seq, const int32_t *tokens, float *xa, const af_tf_control *ctl);

#endif /* AF_TRANSFORMER_H */
