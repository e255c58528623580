/*
 * engine.h — the training step: forward through the frozen (quantized) transformer with LoRA
 * corrections, classification head and loss, then backward to LoRA A/B and head gradients only.
 *
 * Batches are PACKED, not padded: sample b owns tokens [seq_start[b], seq_start[b+1]) of the
 * concatenated token array; RoPE positions restart at 0 for every sample and attention never
 * crosses a sample boundary (causal within each sample). Pooling is per sample (head.h).
 *
 * Saved activations per adapted layer and above (layers >= lo, see "Layer range" below; when
 * checkpointing is off) — floats per token:
 *   x_in [H], rstd1 [1], q [qd] (after RoPE), k [kvd] (after RoPE), v [kvd], attn [qd],
 *   lse [n_head], x_mid [H], rstd2 [1], gate [F], up [F]
 *   + LoRA xa [r] for each targeted projection (+ dropout masks [in] when dropout > 0).
 *   (act = glu(gate, up) and the norm outputs h1 = rmsnorm(x_in), h2 = rmsnorm(x_mid) are
 *   recomputed in the backward rather than saved: one elementwise pass each, same bits.)
 * With checkpointing on, only x_in of each layer is kept (one shared activation set is refilled by
 * recomputing the layer's forward just before its backward: Chen et al. 2016, "Training Deep Nets
 * with Sublinear Memory Cost"); results are bitwise identical to checkpointing off.
 * Gemma 3 adds the q/k-norm inputs q_raw [qd], k_raw [kvd] with their rstd [n_head + n_kv_head],
 * and the post-norm inputs o_raw [H], d_raw [H] with their rstd [2].
 * SmolLM2-135M, r = 16 on all 7 projections: ~735 KiB per token without checkpointing, ~136 KiB
 * with (af_engine_bytes).
 *
 * LoRA on q/k of llama GGUF models acts on the GGUF (permuted) row order of Wq/Wk (docs/FORMATS.md §3.3):
 * B rows of q_proj/k_proj must be mapped GGUF row (h·hd + 2b + a) <-> HF row (h·hd + a·hd/2 + b)
 * when exporting to / importing from PEFT (A is unaffected).
 *
 * dx through every frozen matrix is dy·W computed by af_matmul_dyw on the stored blocks; no f32
 * copy of the model is ever made.
 */
#ifndef AF_ENGINE_H
#define AF_ENGINE_H

#include "lora/lora.h"
#include "model/model.h"
#include "model/transformer.h"
#include "train/head.h"

typedef struct af_batch {
    const int32_t *tokens;    /* [n_tok] */
    const int32_t *seq_start; /* [n_samples + 1], seq_start[0] = 0, strictly increasing */
    int32_t n_samples;
    int64_t n_tok;
    const int32_t *labels;    /* [n_samples] single-label, or NULL when multi_hot is used */
    const float *multi_hot;   /* [n_samples, num_classes] multi-label targets, or NULL */
    const int32_t *targets;   /* causal-LM: [n_tok] next-token target of each position, -1 = no loss
                                 (data.h af_packed_batch.targets); NULL for classification */
} af_batch;

typedef struct af_step_opts {
    af_pooling pooling;
    const float *class_w;     /* [num_classes] CE class weights, NULL = uniform */
    int checkpointing;        /* recompute activations layer by layer in the backward */
    int train;                /* 1: dropout active; 0: eval (no dropout) */
    uint64_t dropout_seed;    /* per-step seed for dropout masks */
} af_step_opts;

typedef struct af_engine af_engine;

/* Create an engine for `model` with the given parameter layout (borrowed; both must outlive it).
 * `ctx`: the context its kernels run under (borrowed; NULL: the model's), e.g. a trainer's bf16
 * context. Workspace grows on demand to the largest batch seen. Errors: AF_ERR_NOMEM,
 * AF_ERR_INVALID_ARG. */
af_status af_engine_new(const af_ctx *ctx, const af_model *model, const af_param_layout *lay, af_engine **out);
void af_engine_free(af_engine *e);
/* The context the engine's kernels run under (its interrupt flag stops the evaluation loops). */
const af_ctx *af_engine_ctx(const af_engine *e);

/* Forward only: logits [n_samples, num_classes] for the batch (labels ignored). */
/* Cancel flag read before every layer of the forward and backward (NULL: none): once set, the
 * step / forward in progress stops at the next layer and returns AF_ERR_CANCELLED (outputs and the
 * gradient G are then partial: the caller discards them). */
void af_engine_set_cancel(af_engine *e, const volatile int *cancel);

/* Tokens the engine's workspace holds now (0 before the first step): it grows, by an eighth at
 * least, when a batch needs more, and never shrinks. For tests and memory reports. */
int64_t af_engine_capacity(const af_engine *e);

af_status af_engine_forward(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o, float *logits);

/* Forward + loss + backward. ADDS gradients into G [n_total] (accumulation over micro-batches is
 * free; zero G yourself at the start of an optimizer step). The loss gradient is scaled by
 * `grad_scale` (e.g. 1/accumulation_steps). Writes the mean loss of the batch to *loss and, if
 * `logits` is not NULL, the logits [n_samples, num_classes].
 * A non-finite loss is returned with AF_OK and NO gradient is added (the trainer skips the step).
 * Dropout (o->train and lora.dropout > 0): masks from af_lora_dropout_mask keyed by
 * (o->dropout_seed, layer, proj, token index in the packed batch), so they are independent of
 * threads and regenerated identically when checkpointing recomputes a layer.
 * Errors: AF_ERR_INVALID_ARG (empty sample, label out of range, token out of range, no labels, no
 * head in the layout), AF_ERR_NOMEM. */
af_status af_engine_step(af_engine *e, const float *P, float *G, const af_batch *b, const af_step_opts *o,
                         float grad_scale, double *loss, float *logits);

/* Causal-LM step (the same walk, workspace, dropout and checkpointing as af_engine_step; no
 * pooling or classification head): b->targets [n_tok] must be set (next-token target of each
 * position, -1 = no loss; data.h af_packed_batch.targets), labels/multi_hot are ignored. Runs the
 * layers, then the LM head loss of model/transformer.h (af_lm_head_loss: final norm, logits in
 * chunks of af_lm_chunk_rows rows, soft-cap, softmax cross-entropy) and, when G != NULL, the
 * backward: ADDS the gradient of grad_scale · loss_sum into G [n_total] (the trainer passes
 * grad_scale = 1 / target tokens of the whole accumulated batch: transformers PR #34191).
 * G == NULL: forward only (evaluation; no activation set per layer is kept whatever o says).
 * *res: loss_sum (nats, Σ over target positions), n_targets, n_correct (argmax == target).
 * A non-finite loss_sum is returned with AF_OK and NO gradient is added. A batch without any
 * target gives loss_sum 0, n_targets 0 and no gradient.
 * Errors: AF_ERR_INVALID_ARG (NULL targets, empty sample, token or target out of range),
 * AF_ERR_NOMEM. */
af_status af_engine_lm_step(af_engine *e, const float *P, float *G, const af_batch *b, const af_step_opts *o,
                            float grad_scale, af_lm_loss *res);

/* Where a forward first produces a non-finite value (for the trainer's report of a skipped step;
 * costs one forward with a scan after every stage, so call it only after a non-finite loss).
 * Runs the forward of `b` as af_engine_step does (same P and dropout seed; the prefix cache is
 * bypassed so every layer is recomputed) and writes to where [cap] the first stage, in
 * computation order, whose output holds a NaN or Inf, named after transformers' modules:
 * "model.embed_tokens output", "model.layers.3.input_layernorm output",
 * "model.layers.3.self_attn.q_proj output (frozen weight product)" or "... output (after adding
 * the LoRA correction)", "model.layers.3.self_attn attention output (softmax(q·kᵀ)·v)",
 * "model.layers.3.mlp activation (act(gate)·up)", "model.layers.3.output (residual stream after
 * mlp)", "model.norm output", "pooled hidden state", "score output (logits)"; "" when every stage
 * is finite (then only the loss itself overflowed). Errors: as af_engine_forward. */
af_status af_engine_locate_nonfinite(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o,
                                     char *where, size_t cap);

/* Layer range and frozen prefix. Layers below lo = af_lora_lowest_layer(lay) (the first layer
 * with an adapter; af_engine_first_layer) are frozen: the step runs them forward without keeping
 * activations, keeps the residual stream only from layer lo up, and stops the backward at layer lo
 * (inside layer lo it stops below its lowest adapter: e.g. q/v adapters need no dy·W of Wq/Wk/Wv
 * and no input-norm backward). Cost of a step ~ L forward + (L - lo) backward layers.
 *
 * The frozen prefix of a sample (embedding + layers 0..lo-1) depends only on its tokens, not on P,
 * dropout or the other samples of the batch. af_engine_set_prefix_cache(e, max_bytes) keeps it
 * per sample (keyed by the exact token sequence, verified on lookup), up to max_bytes (about
 * 4·H bytes per token: SmolLM2-135M 2.3 KiB/token, so BBC's 1558 samples x 128 tokens ~ 0.45 GiB);
 * later forwards/steps of the same sample start at layer lo: epochs after the first and repeated
 * evaluations then cost ~ (L - lo) forward layers. Samples missing from the cache are computed as
 * one sub-batch; once the budget is reached no new sample is added (no eviction). Results equal
 * the uncached computation (the same per-row arithmetic). max_bytes = 0 (default) disables and
 * frees it. No effect when lo = 0. Errors: AF_ERR_INVALID_ARG (NULL engine). */
af_status af_engine_set_prefix_cache(af_engine *e, size_t max_bytes);
/* Entries, bytes held, lookups that hit / missed since the cache was enabled. Any pointer may be NULL. */
void af_engine_prefix_cache_stats(const af_engine *e, int64_t *entries, size_t *bytes, int64_t *hits, int64_t *misses);
/* lo: the first layer the backward reaches (n_layers when the layout has no adapter). */
int32_t af_engine_first_layer(const af_engine *e);

/* Rows per call of the frozen-weight products (default 256, the best measured on Zen 4 for
 * SmolLM2; values below 64 are raised to 64; 0: the whole batch in one call). With at least as many
 * blocks as threads, each thread of the context's pool takes whole blocks (dynamic schedule) and
 * the kernel calls inside run single-threaded (nested pool calls are serial); when the engine is
 * itself called from inside a pool job, the blocks run in turn on that thread.
 * Results do not depend on it (bitwise). For benchmarks and tests. */
void af_engine_set_block_rows(af_engine *e, int64_t rows);

/* Bytes of workspace the engine would use for a batch of n_tok tokens (activations + scratch),
 * with or without checkpointing; for a layout without a classification head (causal LM) plus the
 * LM head's scratch (one logits chunk [af_lm_chunk_rows, vocab] and two [chunk, H]). */
size_t af_engine_bytes(const af_model *model, const af_param_layout *lay, int64_t n_tok, int checkpointing);

#endif /* AF_ENGINE_H */
