/*
 * trainer.h — the LoRA sequence-classification training loop (what `afinar train` runs), and
 * loading a trained adapter back as a classifier (what `afinar eval` / `afinar predict` run).
 * The loop takes every optimizer step with the public trainer af_lora_trainer (include/afinar.h,
 * src/train/api.c, through train/api_internal.h); this file describes what one step does.
 *
 * One optimizer step (global step g = 0, 1, ..., total-1):
 *   epoch e = g / steps_per_epoch, k = g % steps_per_epoch; the epoch's sample order is
 *   af_shuffle_perm(seed, e); micro-batch j of the epoch holds order[j*batch .. (j+1)*batch);
 *   step k uses micro-batches [k*grad_accum, min((k+1)*grad_accum, n_micro)) — the last step of an
 *   epoch may have fewer. Each micro-batch's loss gradient is scaled by n_mb / n_step (its samples
 *   over the step's samples), so G is the gradient of the MEAN loss over the step's samples
 *   whatever the batch sizes. Then: head bias gradient zeroed when the bias is off; global-norm
 *   clip (the PRE-clip norm is reported); AdamW (optim.h) with lr = af_lr_at(schedule, g) and weight
 *   decay on everything except the head bias (transformers Trainer: no decay on biases / norms;
 *   LoRA A/B and the head weight are decayed). A step whose loss or gradient norm is not finite is
 *   skipped (no update; AdamW's t does not advance), counted and logged (a "nonfinite" line in
 *   metrics.jsonl and a "warn" line on the log) with WHERE the non-finite value appeared: for a
 *   non-finite loss, the first parameter tensor holding one, else the first forward stage that
 *   produced one (af_engine_locate_nonfinite: e.g. "model.layers.3.self_attn.q_proj output (frozen
 *   weight product)"); for a non-finite gradient, the first gradient tensor in backward order
 *   (af_tr_nonfinite_tensor: e.g. "model.layers.3.mlp.down_proj.lora_B gradient"). max_nonfinite in
 *   a row stop the run with AF_ERR_RANGE naming the step, the place of the first non-finite value
 *   of that run of steps, and the last checkpoint saved after a finite step.
 *   Dropout masks use af_ctr_key(seed, g, j, 0x64726f70) as the engine's dropout seed, j the index
 *   of the micro-batch within the epoch (af_lora_trainer_accumulate_batch, train/api_internal.h),
 *   so there is no random-number stream state: shuffles and masks are pure functions of (seed,
 *   epoch/step), which is what makes an exact resume possible.
 * Evaluation (validation set; every `eval_every` steps, or at every epoch end when 0, and always
 *   after the last step): probabilities (softmax; sigmoid for multi-label) -> metrics.h; the best
 *   validation macro-F1 (strictly greater) selects OUT/best; `patience` evaluations without
 *   improvement stop the run early (0 = never).
 * Output directory OUT:
 *   metrics.jsonl           one JSON line per optimizer step {"type":"train","step","epoch","loss",
 *                           "acc","lr","grad_norm","samples_per_s","elapsed"[,"skipped":true]} and
 *                           per evaluation {"type":"eval","split":"val","step","epoch","accuracy",
 *                           "macro_f1","loss","ece"}; per skipped step {"type":"nonfinite","step",
 *                           "where","loss","grad_norm" (strings: may be nan/inf),"consecutive",
 *                           "skipped_total"}; "step" counts optimizer steps from 1. Under MPI
 *                           (data parallel, trainer_run.c step_micro_batches) train lines add
 *                           "world_size","compute_s","wait_s","comm_s","comm_bytes","comm_bytes_all";
 *                           rank 0 alone writes this directory.
 *   run.json                the caller's resolved configuration (config_json; with the automatic
 *                           recipe, its choices added as settings) + data summary; "recipe": the
 *                           recipe's choices, reasons, cost and budget (trainer_recipe.c).
 * Time budget (opts.time_budget_min, one process): after the first steps of a fresh run the loop
 *   measures its step time and re-plans the length when it would not fit (recorded as max-steps,
 *   warmup, eval-every in train_config.json); before every step it stops (AF_STOP_BUDGET: evaluated
 *   when the recipe did not give the evaluation up, best/ and final/ saved) when one more step, the
 *   last evaluation and the saves would pass the deadline (README "Automatic recipe").
 *   checkpoint-STEP/        PEFT adapter (adapter_model.safetensors, adapter_config.json,
 *                           afinar.json) + trainer_state.safetensors (params, AdamW m and v as F32;
 *                           counters as I64, EMA/best values as F64: everything a bit-exact resume
 *                           needs; metadata world_size and gradient_sum, informational) +
 *                           train_config.json (config_json, with the paths of the model and
 *                           data recorded absolute and relative to the checkpoint:
 *                           "checkpoint_paths", ckpt_check.c) + manifest.json (size and SHA-256
 *                           of the five, written last; formats/manifest.h). Written into a hidden temp
 *                           directory, every file fsync'ed, then renamed into place (an existing
 *                           directory of the same name is swapped atomically with renameat2
 *                           RENAME_EXCHANGE where available), so a checkpoint directory is always
 *                           complete. Only the newest save_total_limit are kept (an old one is renamed
 *                           to a hidden name before it is deleted). A killed run leaves at most
 *                           hidden temporaries (".NAME.tmp-*"), removed when it resumes in place.
 *   best/, final/           adapters (same layout and manifest, no trainer state): best validation
 *                           macro-F1 (the last step when there is no validation data) and the last
 *                           step. No file holding a NaN/Inf parameter is ever written (refused).
 *   curves.png              loss / accuracy curves via gnuplot when it is installed.
 * Resume (`resume` = a checkpoint directory, or a run directory: its newest checkpoint) restores
 *   params, AdamW state, counters, EMAs, best metric and patience, checks that the run-shaping
 *   settings match (data size, batch, accumulation, seed, total steps, schedule, lr, layout size:
 *   a mismatch is AF_ERR_INVALID_ARG naming the field and both values), after checking the
 *   checkpoint before anything is written (Checkpoint checks below), drops metrics.jsonl lines
 *   of later steps, and continues so that the result is bit-identical to an uninterrupted run
 *   (same thread count; tests/test_trainer.c checks it).
 * Checkpoint checks (ckpt_check.c; docs/RELIABILITY.md 6): the manifest is verified (every file;
 *   none: a checkpoint before manifests resumes with a warning on opts.log, one whose state says it
 *   had one is refused), then the state's values (params and adam_m finite, adam_v finite and >= 0,
 *   shapes of the run's layout, counters consistent, world_size a process count, the directory's
 *   step), then the checkpoint's adapter against the layout and the state's params. A failure names
 *   the file and field and the newest earlier checkpoint that verifies (af_tr_older_good).
 * The library prints only to opts.log (progress, data statistics, diagnostics, summary).
 *
 * Causal LM (opts.task = AF_TASK_CAUSAL_LM; docs/ARCHITECTURE.md §4b): the data set carries
 *   target_mask instead of labels, the layout has no head. The epoch's shuffled order is packed
 *   (opts.packing, default) by best-fit decreasing into micro-batches of batch x max_seq_len tokens
 *   (af_pack_bfd, data.h; the bins in a seeded order; the same bin count every epoch), else
 *   `batch` samples each. A step counts the target tokens N of all its micro-batches first and
 *   accumulates each with grad_scale 1/N (Σ token losses / N; transformers PR #34191).
 *   metrics.jsonl train lines {"type":"train","step","epoch","loss","mean_token_accuracy",
 *   "num_tokens","grad_norm","learning_rate","perplexity","tokens_per_s","elapsed"[,"skipped"]}
 *   (TRL's names), eval lines {"type":"eval","split":"val","step","epoch","eval_loss",
 *   "eval_mean_token_accuracy","perplexity","eval_num_tokens"}; best/ is the lowest eval_loss and
 *   patience counts evaluations without a lower one. trainer_state.safetensors adds
 *   "lm_counters" (num_tokens). Adapters: PEFT CAUSAL_LM (no head; afinar.json "task").
 */
#ifndef AF_TRAINER_H
#define AF_TRAINER_H

#include "afinar_app.h"
#include "train/data.h"
#include "train/engine.h"
#include "train/hparams.h"
#include "train/metrics.h"
#include "train/optim.h"

#include <signal.h>
#include <stdio.h>

/* af_trainer_opts, af_trainer_opts_defaults, af_stop_reason, af_train_result, af_trainer_new /
 * free / report / has_errors / diags / run, af_trainer_find_checkpoint, af_classifier_load / free /
 * probs and its accessors, af_eval_metrics: include/afinar.h ("Training runs"). */

/* Estimated peak memory of training in bytes, and physical RAM (0 when unknown). */
void af_trainer_memory(const af_trainer *t, size_t *need, size_t *ram);

/* ---- inference with a trained adapter ---- */
typedef struct af_classifier {
    const af_ctx *ctx;        /* borrowed: the context of the engine */
    const af_model *model;    /* borrowed or == model_owned */
    af_model *model_owned;
    af_param_layout lay;
    float *P;                 /* [lay.n_total] on the device of ctx */
    af_engine *eng;
    af_pooling pooling;
    int32_t max_seq_len;
    int multi_label;
    int32_t num_classes;
    char **label_names;       /* [num_classes] or NULL (integer labels) */
    char note[512];           /* what was assumed for lack of afinar.json fields ("" when nothing) */
} af_classifier;

/* Shared by the trainer's evaluation: probabilities of every sample of ds with parameters P
 * (sigmoid when multi_label, else softmax), lay->num_classes columns.
 * If `loss` is not NULL it receives the mean unweighted CE (BCE for multi-label) over labelled
 * samples (NaN when none). */
af_status af_eval_probs(af_engine *e, const float *P, const af_param_layout *lay, const af_dataset *ds,
                        int32_t batch, af_pooling pooling, int multi_label, float *probs, double *loss);

/* Causal LM: token loss sum, target and correct counts of every sample of ds (ds->target_mask set)
 * with parameters P, forward only (no dropout), `batch` samples per call in data-set order.
 * eval_loss = loss_sum / n_targets, eval_mean_token_accuracy = n_correct / n_targets,
 * perplexity = exp(eval_loss). Errors: AF_ERR_INVALID_ARG, AF_ERR_NOMEM (af_engine_lm_step). */
af_status af_lm_eval(af_engine *e, const float *P, const af_dataset *ds, int32_t batch, af_lm_loss *out);

#endif /* AF_TRAINER_H */
