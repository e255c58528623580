/*
 * trainer.h — the LoRA sequence-classification training loop (what `afinar train` runs), and
 * loading a trained adapter back as a classifier (what `afinar eval` / `afinar predict` run).
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
 *   Dropout masks use af_ctr_key(seed, g, micro-batch, 0x64726f70) as the engine's dropout seed,
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
 *                           "skipped_total"}; "step" counts optimizer steps from 1.
 *   run.json                the caller's resolved configuration (config_json) + data summary.
 *   checkpoint-STEP/        PEFT adapter (adapter_model.safetensors, adapter_config.json,
 *                           afinar.json) + trainer_state.safetensors (params, AdamW m and v as F32;
 *                           counters as I64, EMA/best values as F64: everything a bit-exact resume
 *                           needs) + train_config.json (config_json). Written into a hidden temp
 *                           directory, every file fsync'ed, then renamed into place (an existing
 *                           directory of the same name is swapped atomically with renameat2
 *                           RENAME_EXCHANGE where available), so a checkpoint directory is always
 *                           complete. Only the newest save_total_limit are kept (an old one is renamed
 *                           to a hidden name before it is deleted). A killed run leaves at most
 *                           hidden temporaries (".NAME.tmp-*"), removed when it resumes in place.
 *   best/, final/           adapters (same layout, no trainer state): best validation macro-F1
 *                           (the last step when there is no validation data) and the last step.
 *   curves.png              loss / accuracy curves via gnuplot when it is installed.
 * Resume (`resume` = a checkpoint directory, or a run directory: its newest checkpoint) restores
 *   params, AdamW state, counters, EMAs, best metric and patience, checks that the run-shaping
 *   settings match (data size, batch, accumulation, seed, total steps, schedule, lr, layout size:
 *   a mismatch is AF_ERR_INVALID_ARG naming the field and both values), drops metrics.jsonl lines
 *   of later steps, and continues so that the result is bit-identical to an uninterrupted run
 *   (same thread count; tests/test_trainer.c checks it).
 * The library prints only to opts.log (progress, data statistics, diagnostics, summary).
 */
#ifndef AF_TRAINER_H
#define AF_TRAINER_H

#include "train/data.h"
#include "train/engine.h"
#include "train/hparams.h"
#include "train/metrics.h"
#include "train/optim.h"

#include <signal.h>
#include <stdio.h>

typedef struct af_trainer_opts {
    /* ---- model and data ---- */
    const char *model_path;      /* GGUF file (ignored when `model` is set) */
    const af_model *model;       /* borrowed, already loaded (tests / embedding), or NULL */
    const char *train_path;      /* JSONL corpus (ignored when train_data is set) */
    const char *val_path;        /* JSONL validation corpus, or NULL */
    const af_dataset *train_data, *val_data; /* borrowed pre-tokenized sets, or NULL */
    double val_split;            /* (0, 1): stratified split of train when there is no val; 0: none */
    const char *text_field;      /* NULL -> "input" */
    const char *label_field;     /* NULL -> "label" / "labels" */
    const char *labels;          /* label names: a file (one per line) if it exists, else "a,b,c" */
    int32_t num_classes;         /* 0: from the labels / data */
    int multi_label;             /* 1: require multi-label data (the data decide otherwise) */
    /* ---- LoRA and head ---- */
    const char *targets;         /* af_lora_parse_targets spec; NULL -> "qv" */
    const char *lora_layers;     /* af_lora_parse_layers spec ("all", "A-B", "topN"); default "top10";
                                    NULL -> every layer; topN with N > the model's layers: every layer */
    int32_t lora_r;              /* 16 */
    double lora_alpha;           /* 32 */
    double lora_dropout;         /* 0.05 */
    int use_rslora;              /* 0 */
    af_pooling pooling;          /* AF_POOL_MEAN */
    int head_bias;               /* 0: b stays 0 (PEFT's score has no bias) */
    const char *class_weights;   /* af_class_weights spec; NULL -> "uniform" */
    /* ---- optimisation ---- */
    double lr;                   /* 2e-4 */
    double lr_min;               /* 0 */
    af_sched schedule;           /* cosine */
    int64_t warmup_steps;        /* >= 0: steps; < 0: use warmup_ratio (default -1) */
    double warmup_ratio;         /* 0.06: warm-up = ceil(ratio * total steps) */
    double epochs;               /* 1 (used when max_steps <= 0; may be fractional) */
    int64_t max_steps;           /* > 0 overrides epochs */
    int32_t batch;               /* 8 samples per micro-batch */
    int32_t grad_accum;          /* 2 micro-batches per optimizer step */
    double max_grad_norm;        /* 1.0; <= 0 disables clipping */
    double weight_decay;         /* 0.01 */
    uint64_t seed;               /* 42: LoRA/head init, shuffles, split, dropout */
    int32_t max_seq_len;         /* 256 */
    int checkpointing;           /* recompute activations in the backward */
    int32_t prefix_cache_mb;     /* 2048: MiB (at most half the free RAM) to keep, per sample, the output of the
                                    frozen layers below lora_layers (af_engine_set_prefix_cache); 0: off */
    /* ---- evaluation and checkpoints ---- */
    int64_t eval_every;          /* 0: every epoch end; N: every N steps */
    int32_t eval_batch;          /* 0 -> batch */
    int32_t patience;            /* evaluations without macro-F1 improvement before stopping; 0 off */
    int64_t save_every;          /* 0: at every evaluation (every epoch end without val); N: every N steps */
    int32_t save_total_limit;    /* 2: checkpoints kept (best/ and final/ are extra) */
    const char *output_dir;      /* required (default derived from `resume` when NULL) */
    int overwrite;               /* replace the artifacts of a run already in output_dir */
    const char *resume;          /* checkpoint or run directory, or NULL */
    int32_t max_nonfinite;       /* 5 consecutive non-finite steps stop the run */
    const af_ctx *ctx;           /* base context of the run (borrowed), or NULL: the model's when `model` is
                                    given, else the defaults. The trainer derives its own from it with
                                    `threads` and `bf16` applied. */
    int threads;                 /* 0: the base context's */
    double memory_limit_mb;      /* 0: the machine's RAM, or the cgroup limit (memory.max) when lower; N: refuse
                                    to start when the estimated peak exceeds N MiB */
    int bf16;                    /* 1: matmul precision bf16 for the run (falls back to f32 with a warning
                                    where the CPU lacks AVX512_BF16); 0: the base context's precision */
    /* ---- reporting and control ---- */
    FILE *log;                   /* progress and reports (NULL: silent) */
    int progress_tty;            /* -1 auto (isatty of log), 0 newline lines, 1 '\r' live line */
    int64_t log_every;           /* non-TTY progress line every N steps (0: auto ~ total/20) */
    int plot;                    /* 1: curves.png via gnuplot at the end */
    const char *config_json;     /* caller's resolved configuration (stored, not parsed); may be NULL */
    volatile sig_atomic_t *interrupt; /* set (e.g. by SIGINT) -> finish the step, checkpoint, stop */
    int64_t stop_after;          /* > 0: behave as if interrupted after this many steps (tests) */
} af_trainer_opts;

/* The defaults noted on each field above. */
void af_trainer_opts_defaults(af_trainer_opts *o);

typedef enum af_stop_reason {
    AF_STOP_DONE = 0,         /* reached the last step */
    AF_STOP_EARLY = 1,        /* early stopping (patience) */
    AF_STOP_INTERRUPTED = 2,  /* interrupt flag or stop_after: a checkpoint was saved */
    AF_STOP_NONFINITE = 3     /* too many non-finite steps (the run returns AF_ERR_RANGE) */
} af_stop_reason;

typedef struct af_train_result {
    af_stop_reason stop;
    int64_t steps_done;       /* optimizer steps completed (incl. resumed ones) */
    int64_t total_steps;
    int64_t best_step;        /* 0 when no evaluation happened */
    double best_macro_f1;     /* NaN when no evaluation happened */
    double last_val_accuracy, last_val_macro_f1; /* NaN when none */
    double last_train_loss;   /* smoothed (EMA) */
    int64_t n_nonfinite;      /* skipped steps over the whole run */
    double seconds;           /* wall time of this call */
    char last_checkpoint[1024]; /* "" when none was saved */
} af_train_result;

typedef struct af_trainer af_trainer;

/* Load the model (unless given), read and tokenize the data, split, compute statistics, class
 * weights and diagnostics, build the parameter layout. Nothing is written to disk.
 * `*out`: free with af_trainer_free (also on failure a partially built trainer is freed).
 * Errors: AF_ERR_IO / AF_ERR_FORMAT (model or data, naming file:line:field), AF_ERR_NOT_FOUND
 * (model without tokenizer when text data are given), AF_ERR_INVALID_ARG (bad option naming it),
 * AF_ERR_NOMEM. Diagnostics with errors do NOT fail here: see af_trainer_has_errors. */
af_status af_trainer_new(const af_trainer_opts *o, af_trainer **out);
void af_trainer_free(af_trainer *t);

/* Print data statistics (train, val), the run plan (steps, warm-up, trainable parameters),
 * the memory estimate and the diagnostics to fp. */
void af_trainer_report(const af_trainer *t, FILE *fp);
/* 1 when a diagnostic is an error or the memory estimate exceeds physical RAM. */
int af_trainer_has_errors(const af_trainer *t);
/* Diagnostics of the configuration (borrowed). */
const af_diag_list *af_trainer_diags(const af_trainer *t);
/* Estimated peak memory of training in bytes, and physical RAM (0 when unknown). */
void af_trainer_memory(const af_trainer *t, size_t *need, size_t *ram);

/* Train (see the header comment). Refuses (AF_ERR_INVALID_ARG) when af_trainer_has_errors, when
 * output_dir holds another run and overwrite is off, or when the resume state does not match.
 * `res` (may be NULL) receives the summary. Returns AF_OK also for early stop and interruption
 * (see res->stop); AF_ERR_RANGE for the non-finite stop; AF_ERR_IO when a file cannot be written
 * (the previous checkpoints stay intact). Call once per trainer. */
af_status af_trainer_run(af_trainer *t, af_train_result *res);

/* Resolve a resume argument to a checkpoint directory: `arg` itself when it holds
 * trainer_state.safetensors, else its newest checkpoint-N subdirectory holding one. `*ckpt`:
 * malloc'ed, caller frees. Errors: AF_ERR_NOT_FOUND (naming arg), AF_ERR_NOMEM. */
af_status af_trainer_find_checkpoint(const char *arg, char **ckpt);

/* ---- inference with a trained adapter ---- */
typedef struct af_classifier {
    const af_ctx *ctx;        /* borrowed: the context of the engine */
    const af_model *model;    /* borrowed or == model_owned */
    af_model *model_owned;
    af_param_layout lay;
    float *P;                 /* [lay.n_total] */
    af_engine *eng;
    af_pooling pooling;
    int32_t max_seq_len;
    int multi_label;
    int32_t num_classes;
    char **label_names;       /* [num_classes] or NULL (integer labels) */
} af_classifier;

/* Load an adapter directory written by the trainer (or any PEFT SEQ_CLS LoRA adapter with a
 * score head: pooling then defaults to "last", max_seq_len to 512) on top of `model` (borrowed)
 * or, when NULL, the GGUF at model_path loaded with `ctx`. Computations run under `ctx` (borrowed,
 * must outlive the classifier; NULL: the model's). Errors: those of af_model_load /
 * af_adapter_load; AF_ERR_INVALID_ARG (adapter made for another model shape, no classification
 * head). */
af_status af_classifier_load(const af_ctx *ctx, const char *model_path, const af_model *model, const char *adapter_dir,
                             af_classifier **out);
void af_classifier_free(af_classifier *c);

/* probs [ds->n, C]: softmax (single-label) or sigmoid (multi-label) of the logits of every sample
 * of `ds`, batches of `batch` samples in data-set order (af_engine_forward, no dropout).
 * Errors: those of af_engine_forward. */
af_status af_classifier_probs(af_classifier *c, const af_dataset *ds, int32_t batch, float *probs);

/* Shared by the trainer's evaluation: probabilities of every sample of ds with parameters P
 * (sigmoid when multi_label, else softmax), lay->num_classes columns.
 * If `loss` is not NULL it receives the mean unweighted CE (BCE for multi-label) over labelled
 * samples (NaN when none). */
af_status af_eval_probs(af_engine *e, const float *P, const af_param_layout *lay, const af_dataset *ds,
                        int32_t batch, af_pooling pooling, int multi_label, float *probs, double *loss);

/* Metrics of probs [ds->n, C] against ds's labels (single: samples with label -1 are skipped;
 * multi: all). Errors: AF_ERR_INVALID_ARG (no labelled sample), AF_ERR_NOMEM. */
af_status af_eval_metrics(const af_dataset *ds, const float *probs, af_metrics **out);

#endif /* AF_TRAINER_H */
