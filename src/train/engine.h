/*
 * engine.h — the training step: forward through the frozen (quantized) transformer with LoRA
 * corrections, classification head and loss, then backward to LoRA A/B and head gradients only.
 *
 * Batches are PACKED, not padded: sample b owns tokens [seq_start[b], seq_start[b+1]) of the
 * concatenated token array; RoPE positions restart at 0 for every sample and attention never
 * crosses a sample boundary (causal within each sample). Pooling is per sample (head.h).
 *
 * Saved activations per layer (when checkpointing is off) — floats per token:
 *   x_in [H], rstd1 [1], h1 [H], q [qd] (after RoPE), k [kvd] (after RoPE), v [kvd], attn [qd],
 *   lse [n_head], x_mid [H], rstd2 [1], h2 [H], gate [F], up [F]
 *   + LoRA xa [r] for each targeted projection (+ dropout masks [in] when dropout > 0).
 *   (act = glu(gate, up) is recomputed in the backward rather than saved.)
 * With checkpointing on, only x_in of each layer is kept (one shared activation set is refilled by
 * recomputing the layer's forward just before its backward: Chen et al. 2016, "Training Deep Nets
 * with Sublinear Memory Cost"); results are bitwise identical to checkpointing off.
 * Gemma 3 adds the q/k-norm inputs q_raw [qd], k_raw [kvd] with their rstd [n_head + n_kv_head],
 * and the post-norm inputs o_raw [H], d_raw [H] with their rstd [2].
 * SmolLM2-135M, r = 16 on all 7 projections: ~868 KiB per token without checkpointing, ~136 KiB
 * with (af_engine_bytes).
 *
 * LoRA on q/k of llama GGUF models acts on the GGUF (permuted) row order of Wq/Wk (FORMATS.md §3.3):
 * B rows of q_proj/k_proj must be mapped GGUF row (h·hd + 2b + a) <-> HF row (h·hd + a·hd/2 + b)
 * when exporting to / importing from PEFT (A is unaffected).
 *
 * dx through every frozen matrix is dy·W computed by af_matmul_dyw on the stored blocks; no f32
 * copy of the model is ever made.
 */
#ifndef AF_ENGINE_H
#define AF_ENGINE_H

#include "lora/lora.h"
#include "train/head.h"

typedef struct af_batch {
    const int32_t *tokens;    /* [n_tok] */
    const int32_t *seq_start; /* [n_samples + 1], seq_start[0] = 0, strictly increasing */
    int32_t n_samples;
    int64_t n_tok;
    const int32_t *labels;    /* [n_samples] single-label, or NULL when multi_hot is used */
    const float *multi_hot;   /* [n_samples, num_classes] multi-label targets, or NULL */
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
 * Workspace grows on demand to the largest batch seen. Errors: AF_ERR_NOMEM, AF_ERR_INVALID_ARG. */
af_status af_engine_new(const af_model *model, const af_param_layout *lay, af_engine **out);
void af_engine_free(af_engine *e);

/* Forward only: logits [n_samples, num_classes] for the batch (labels ignored). */
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

/* Bytes of workspace the engine would use for a batch of n_tok tokens (activations + scratch),
 * with or without checkpointing. */
size_t af_engine_bytes(const af_model *model, const af_param_layout *lay, int64_t n_tok, int checkpointing);

#endif /* AF_ENGINE_H */
