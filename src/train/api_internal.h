/*
 * api_internal.h — library-internal entry points of the public LoRA trainer (af_lora_trainer,
 * include/afinar.h, implemented in api.c) for the training loop of `afinar train`
 * (trainer_run.c). Not part of any public API.
 *
 * The optimizer step exists once, in api.c: zeroing and accumulating gradients (loss scaled by the
 * caller's grad_scale), the dropout seed of a micro-batch (the one RNG tag, see
 * af_lora_trainer_accumulate_batch), dropping the head-bias gradient, global-norm clipping, AdamW
 * with the weight-decay mask (no decay on the head bias), the skip of a non-finite step and the
 * report of where its first non-finite value appeared. trainer_run.c drives one af_lora_trainer
 * for every step and reads the trainer's buffers for evaluation and checkpoints through
 * af_lora_trainer_view.
 */
#ifndef AF_API_INTERNAL_H
#define AF_API_INTERNAL_H

#include "afinar.h"
#include "lora/lora.h"
#include "train/engine.h"

#include <stddef.h>

/* What `afinar train` sets beyond af_lora_trainer_opts. */
typedef struct af_lora_trainer_ext {
    int32_t layer_min, layer_end; /* adapters only on layers [layer_min, layer_end)
                                     (af_param_layout_init_layers; 0, 0: every layer) */
    double max_grad_norm;         /* replaces opts->max_grad_norm: the trainer's threshold is a double and
                                     is used unrounded (<= 0: no clipping) */
    const af_ctx *ctx;            /* context of every computation (borrowed, must outlive the trainer; e.g.
                                     the af_trainer's own with its threads and precision); NULL: the model's */
    const af_param_layout *layout;/* the layout built by the caller (copied; its LoRA config and head replace
                                     opts' r, alpha, dropout, rsLoRA, targets, num_classes, and its seed
                                     initialises the parameters; opts' seed keys the dropout masks; the layer
                                     range above is then not used), or NULL: built from opts */
} af_lora_trainer_ext;

/* af_lora_trainer_new with `ext` (NULL: every layer, opts->max_grad_norm). The layout is built by
 * af_param_layout_init_layers(model, {opts r, lora_alpha, lora_dropout, use_rslora, targets, seed},
 * opts->num_classes, layer_min, layer_end), so it equals a layout built with the same arguments
 * elsewhere (the af_trainer's). Errors: those of af_lora_trainer_new and of
 * af_param_layout_init_layers (empty or out-of-range layer range). */
af_status af_lora_trainer_new_ext(const af_model *model, const af_lora_trainer_opts *opts,
                                  const af_lora_trainer_ext *ext, af_lora_trainer **out);

/* Borrowed views of a trainer's state, valid while it lives; the training loop evaluates with the
 * engine and the device parameters, and uses the engine's prefix cache. */
typedef struct af_lora_trainer_view {
    const af_param_layout *lay; /* the trainer's layout */
    af_engine *eng;             /* its engine (built on *lay) */
    const float *P;             /* [lay->n_total] parameters (device memory of ctx: for the engine only) */
    const af_ctx *ctx;          /* the trainer's context (its device holds P, G, M, V) */
} af_lora_trainer_view;
void af_lora_trainer_get_view(af_lora_trainer *tr, af_lora_trainer_view *v);

/* Host copies of the parameters and AdamW moments [lay->n_total] each (NULL: not that one), e.g.
 * for a checkpoint; and back (no checks: the checkpoint reader validated them). Errors: the
 * device's (AF_ERR_DEVICE). */
af_status af_lora_trainer_download_state(const af_lora_trainer *tr, float *P, float *M, float *V);
af_status af_lora_trainer_upload_state(af_lora_trainer *tr, const float *P, const float *M, const float *V);

/* One micro-batch of the current optimizer step (what af_lora_trainer_accumulate[_multilabel] do
 * after checking their arguments): forward + loss + backward of the packed batch `b` (labels or
 * multi_hot set, as af_engine_step takes it; not re-validated here beyond what the engine checks),
 * ADDING the gradient of grad_scale · mean loss. *loss (required) and logits [n_samples,
 * num_classes] (may be NULL) as af_engine_step writes them.
 * Dropout seed (the one RNG tag of training):
 *     af_ctr_key(opts.seed, af_lora_trainer_step_count(tr), micro_batch, 0x64726f70)
 * Every caller numbers micro-batches with af_lora_trainer_micro_id (the public accumulate: the
 * micro-batches accumulated so far in this step, af_lora_trainer_zero_grad included; `afinar
 * train`: the micro-batch's index within the step, also on a data-parallel rank that computes only
 * some of them).
 * A non-finite loss (first of the step) records where the first non-finite value appeared (see
 * af_lora_trainer_nonfinite_where; this costs one probing forward) and makes the next
 * af_lora_trainer_step skip. Errors: those of af_engine_step and af_engine_locate_nonfinite. */
af_status af_lora_trainer_accumulate_batch(af_lora_trainer *tr, const af_batch *b, float grad_scale,
                                           uint64_t micro_batch, double *loss, float *logits);

/* The number of micro-batch `i` (0-based within the current step) in the one numbering of
 * af_lora_trainer_opts: (step_count mod steps_per_epoch) * grad_accum + i, its index within the
 * epoch; i when steps_per_epoch is 0. */
uint64_t af_lora_trainer_micro_id(const af_lora_trainer *tr, int64_t i);

/* Causal-LM micro-batch (as af_lora_trainer_accumulate_batch, through af_engine_lm_step): b->targets
 * set; ADDS the gradient of grad_scale · loss_sum; *res as af_engine_lm_step writes it. Same
 * dropout seed, non-finite handling and micro-batch count. */
af_status af_lora_trainer_accumulate_lm_batch(af_lora_trainer *tr, const af_batch *b, float grad_scale,
                                              uint64_t micro_batch, af_lm_loss *res);

/* One preference micro-batch (af_pref_step: the 2n sequences of b, the loss of `po`, the gradient
 * of scale · loss ADDED to the trainer's; no dropout: the log-probabilities of the loss are those
 * differentiated), counted as a micro-batch like the others (a non-finite loss recorded). *m: the
 * batch's metrics. Errors: AF_ERR_INVALID_ARG (NULL argument), those of af_pref_step. */
struct af_pref_batch;
struct af_pref_opts;
struct af_pref_metrics;
af_status af_lora_trainer_accumulate_pref_batch(af_lora_trainer *tr, const struct af_pref_batch *b,
                                                const struct af_pref_opts *po, float scale, uint64_t micro_batch,
                                                struct af_pref_metrics *m);
/* The reference log-probabilities (the base model: every LoRA parameter 0, in a zeroed buffer on the
 * trainer's device) of each pair of b into ref_c[n_pairs], ref_r[n_pairs] (af_pref_ref_logps).
 * Errors: AF_ERR_INVALID_ARG, AF_ERR_NOMEM, those of af_pref_ref_logps. */
af_status af_lora_trainer_pref_ref(af_lora_trainer *tr, const struct af_pref_batch *b, double *ref_c, double *ref_r);

/* Where the first non-finite value of the current step (or, after af_lora_trainer_step, of the
 * step just taken) appeared; "" when the step is finite. Borrowed, valid until the next
 * accumulate or zero_grad. Forms:
 *   "<tensor> parameter (N tensor(s) not finite)"           a parameter is already non-finite
 *   "<stage> (forward, micro-batch K)"                      af_engine_locate_nonfinite's stage, K the
 *                                                           index within the step ("loss" when
 *                                                           every stage was finite)
 *   "<tensor> gradient (first in backward order; N tensor(s) not finite)", or "gradient norm"
 * with <tensor> as af_tr_nonfinite_tensor names it. */
const char *af_lora_trainer_nonfinite_where(const af_lora_trainer *tr);

/* Scan X [lay->n_total] (parameters or gradients, device memory of ctx; NULL ctx: the default CPU
 * context, X host memory) per tensor for NaN/Inf. Returns the number of
 * tensors holding one and writes the first one's name to name [cap]: "model.layers.3.self_attn.
 * q_proj.lora_A", "model.layers.3.mlp.down_proj.lora_B", "score.weight", "score.bias". Order:
 * forward (backward = 0: layers upwards, q..down, A before B, then the head), or the order in which
 * the backward computes gradients (backward = 1: the head, then layers downwards, down..q, B
 * before A), so the name is where the non-finite value appeared first. */
int af_tr_nonfinite_tensor(const af_ctx *ctx, const af_param_layout *lay, const float *X, int backward, char *name,
                           size_t cap);

/* The tensor of `lay` holding flat parameter index idx, as "model.layers.3.self_attn.q_proj.lora_A
 * element 17" ("score.weight element 5"); 0 (and "element IDX") when no tensor holds it. */
int af_tr_param_name(const af_param_layout *lay, int64_t idx, char *name, size_t cap);

#endif /* AF_API_INTERNAL_H */
