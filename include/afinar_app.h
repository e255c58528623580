/*
 * afinar_app.h — the application layer of afinar, over the library API of afinar.h: training runs
 * (what `afinar train` and `afinar check` run) and their settings by key, classifiers for
 * prediction, generation-based evaluation, adapter merging, multi-process runs, export, merge,
 * serve and convert. Same conventions as afinar.h.
 */
#ifndef AFINAR_APP_H
#define AFINAR_APP_H

#include "afinar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Training runs: what `afinar train` and `afinar check` run
 *
 * A run fine-tunes LoRA adapters and a classification head on a labelled corpus: optimizer steps
 * of grad_accum micro-batches of `batch` packed samples (the gradient of the mean loss over the
 * step's samples), global-norm clipping, AdamW with a warm-up then constant / cosine / linear
 * schedule, steps with a non-finite loss or gradient skipped (max_nonfinite in a row stop the run),
 * evaluation on the validation data (best macro-F1 selects OUT/best, `patience` stops early), and
 * checkpoints from which a resumed run continues bit for bit. Output directory OUT:
 *   metrics.jsonl        one JSON line per step, per evaluation and per skipped step
 *   run.json             the caller's configuration (config_json) and a data summary
 *   checkpoint-STEP/     PEFT adapter + trainer state + train_config.json (config_json, with the
 *                        paths of the model and data also relative to the checkpoint) +
 *                        manifest.json (size and SHA-256 of each file), written to a hidden
 *                        temporary directory and renamed into place; the newest save_total_limit
 *                        are kept. A resume verifies the manifest and the state's values before
 *                        anything is written (a damaged checkpoint is refused, naming the newest
 *                        earlier one that verifies)
 *   best/, final/        PEFT adapters of the best evaluation and of the last step
 *   curves.png           loss / accuracy curves (gnuplot, when installed and plot is on)
 * The library prints only to opts.log.
 * ------------------------------------------------------------------------------------------- */

/* Learning-rate schedule after the linear warm-up (transformers get_*_schedule_with_warmup shapes,
 * with a floor lr_min): constant lr, cosine decay or linear decay from lr to lr_min. */
/* AF_SCHED_WSD: warmup-stable-decay, constant after the warm-up and a linear decay to lr_min over the last
 * fifth of the steps (src/train/optim.h af_lr_at); the length may be re-planned at a plateau. */
typedef enum af_sched { AF_SCHED_CONSTANT = 0, AF_SCHED_COSINE = 1, AF_SCHED_LINEAR = 2, AF_SCHED_WSD = 3 } af_sched;

/* Diagnostics of a configuration against the data and published practice (af_trainer_diags). */
typedef enum af_diag_severity { AF_DIAG_INFO = 0, AF_DIAG_WARN = 1, AF_DIAG_ERROR = 2 } af_diag_severity;

typedef struct af_diag {
    af_diag_severity severity;
    char code[32];            /* stable identifier, e.g. "lr-model-size" */
    char message[512];        /* what is wrong, with the numbers and the source */
    char recommendation[256]; /* what to do, e.g. "use --lr 2e-4" ("" when none) */
} af_diag;

typedef struct af_diag_list {
    af_diag *items;           /* [n] owned */
    int32_t n, cap;
} af_diag_list;

/* Run options. Fill with af_trainer_opts_defaults() and change what you need; defaults in the
 * comments. Strings and objects are borrowed: they must outlive the trainer. */
/* What a training run learns (af_trainer_opts.task; settings key "task"). */
typedef enum af_task {
    AF_TASK_CLASSIFICATION = 0, /* sequence classification: pooled hidden state -> linear head */
    AF_TASK_CAUSAL_LM = 1,      /* causal-LM fine-tuning (SFT): next-token cross-entropy on the target tokens */
    AF_TASK_DPO = 2,            /* preference tuning of a causal LM on chosen/rejected pairs: DPO (sigmoid) or IPO
                                   loss against the base model with the adapter off (docs/PREFERENCE.md) */
    AF_TASK_ORPO = 3            /* ORPO (Hong et al. 2024): SFT loss on the chosen side plus an odds-ratio term,
                                   no reference model */
} af_task;

#define AF_SETTINGS_MAX 96 /* room of af_trainer_opts.origin: at least the number of settings keys */

/* af_trainer_opts.recipe (settings key "recipe"). */
typedef enum af_recipe_kind {
    AF_RECIPE_FIXED = 0, /* the options as set, defaults as documented on each field */
    AF_RECIPE_AUTO = 1   /* the automatic recipe chooses what `given` does not mark */
} af_recipe_kind;

/* af_trainer_opts.frozen_precision (settings key "frozen-precision"). */
typedef enum af_frozen_precision {
    AF_PRECISION_AUTO = 0, /* the recipe's choice (auto recipe), else the base context's precision */
    AF_PRECISION_F32 = 1,  /* f32 operands: the exact products */
    AF_PRECISION_BF16 = 2, /* bfloat16 operands, f32 accumulation (AVX512_BF16) */
    AF_PRECISION_INT8 = 3  /* the frozen weights' products in int8, row scales (AVX512_VNNI; af_ctx_params
                              matmul_precision "int8"); attention and LoRA as bf16 where the CPU has it */
} af_frozen_precision;

/* af_trainer_opts.given bits. */
enum {
    AF_GIVEN_LENGTH = 1u << 0,        /* epochs or max_steps */
    AF_GIVEN_CLASS_WEIGHTS = 1u << 1, /* class_weights */
    AF_GIVEN_MAX_SEQ_LEN = 1u << 2,   /* max_seq_len */
    AF_GIVEN_LAYERS = 1u << 3,        /* lora_layers */
    AF_GIVEN_WARMUP = 1u << 4,        /* warmup_steps / warmup_ratio */
    AF_GIVEN_EVAL_EVERY = 1u << 5,    /* eval_every */
    AF_GIVEN_SCHEDULE = 1u << 6,      /* schedule */
    AF_GIVEN_PATIENCE = 1u << 7,      /* patience */
    AF_GIVEN_THRESHOLD = 1u << 8      /* early_stopping_threshold */
};

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
    const char *targets;         /* "qv" (default), "qkv", "all-linear" or a list of q,k,v,o,gate,up,down */
    const char *lora_layers;     /* layers with adapters, 0-based: "all", "A-B", "A-", "topN"; default "top10";
                                    NULL -> every layer; topN with N > the model's layers: every layer */
    const char *layers_to_transform; /* NULL (default): lora_layers decides; else PEFT's layers_to_transform: a
                                    comma list of 0-based layer indices, any set ("0,2,5"), the only layers
                                    with adapters; replaces lora_layers (a settings object with both is
                                    refused) and keeps the automatic recipe from choosing layers */
    int32_t lora_r;              /* 16 */
    double lora_alpha;           /* 32 */
    double lora_dropout;         /* 0.05 */
    int use_rslora;              /* 0 */
    double loraplus_lr_ratio;    /* 0 (off): LoRA+, lora_B and the head bias at lr x ratio (af_lora_trainer_opts) */
    int use_dora;                /* 0: 1 = DoRA (af_lora_trainer_opts.use_dora; CPU only) */
    int init_lora_weights;       /* 0 "default", 1 "gaussian", 2 "pissa", 3 "olora" (af_lora_trainer_opts) */
    af_head_pooling pooling;     /* AF_POOLING_MEAN */
    int head_bias;               /* 0: b stays 0 (PEFT's score has no bias) */
    const char *class_weights;   /* "uniform" (NULL), "inverse-freq", "sqrt-inverse" or w1,w2,... */
    /* ---- optimisation ---- */
    double lr;                   /* 5e-4 */
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
    int32_t max_seq_len;         /* 128 */
    int checkpointing;           /* recompute activations in the backward */
    int32_t prefix_cache_mb;     /* 2048: MiB (at most half the free RAM) to keep, per sample, the output of the
                                    frozen layers below lora_layers; 0: off */
    /* ---- evaluation and checkpoints ---- */
    int64_t eval_every;          /* 0: every epoch end; N: every N steps */
    int32_t eval_batch;          /* 0 -> batch */
    int32_t patience;            /* evaluations without macro-F1 improvement before stopping; 0 off */
    double early_stopping_threshold; /* 0: an evaluation resets the patience count when its metric beats the best
                                    so far by more than this (macro-F1; causal LM: eval loss, lower); best/
                                    still follows any improvement (transformers' EarlyStoppingCallback) */
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
    int poll_us;                 /* < 0 (default -1): the base context's; >= 0: af_ctx_params.poll_us of the
                                    run's context (microseconds the pool's threads spin between operations) */
    double memory_limit_mb;      /* 0: the machine's RAM, or the cgroup limit (memory.max) when lower; N: refuse
                                    to start when the estimated peak exceeds N MiB */
    int bf16;                    /* 1: the same as frozen_precision AF_PRECISION_BF16 (transformers' `bf16`) */
    af_frozen_precision frozen_precision; /* operands of the large products (the frozen weights, attention):
                                    AF_PRECISION_AUTO (default): under AF_RECIPE_AUTO the recipe's choice (bf16
                                    for classification where the CPU runs bf16 products and measures them
                                    faster than f32, src/train/recipe.h), else the base context's precision;
                                    F32: f32; BF16: matmul_precision "bf16" (falls back to f32 with a warning
                                    where the CPU lacks AVX512_BF16); INT8: matmul_precision "int8" (the same
                                    fallback where it lacks AVX512_VNNI). The LoRA path, gradients and optimizer
                                    stay f32. Resolved by af_trainer_new (AUTO never remains). */
    const char *quantize;        /* NULL: the base context's; else af_ctx_params.quantize of the run's context
                                    ("nf4", "q8_0", "f16", "bf16", "none"), applied when it loads model_path
                                    (QLoRA: LoRA on an NF4 base) */
    const char *device;          /* NULL: the base context's device; else af_ctx_params.device of the run's
                                    context ("cpu", "vulkan", "vulkan:N", "auto"). With "auto" the run takes the
                                    Vulkan device when one is present and the run fits it (else the CPU, said in
                                    the log), and goes on on the CPU when the device fails or computes non-finite
                                    values where the CPU does not. */
    /* ---- causal LM (task AF_TASK_CAUSAL_LM) ---- */
    af_task task;                /* AF_TASK_CLASSIFICATION (default) */
    int packing;                 /* causal LM: -1 (default) or 1: micro-batches packed by best-fit decreasing to
                                    batch x max_seq_len tokens; 0: `batch` samples per micro-batch */
    const char *loss_on;         /* causal LM, JSONL data: NULL/"auto" or "all" (af_lm_data_opts.loss_on) */
    const char *chat_template;   /* causal LM, JSONL data: NULL (the model's), "chatml" or "gemma" */
    /* ---- preference tuning (task AF_TASK_DPO / AF_TASK_ORPO; docs/PREFERENCE.md) ---- */
    double pref_beta;            /* 0.1: DPO/IPO beta; ORPO: lambda, the weight of the odds-ratio term */
    int pref_loss_type;          /* dpo: 0 sigmoid (default), 1 ipo */
    double label_smoothing;      /* dpo sigmoid: 0 (conservative DPO epsilon in [0, 0.5)) */
    int precompute_ref;          /* dpo: -1 (default) or 1: reference log-probabilities computed once per pair before
                                    training and kept; 0: computed again in every step */
    /* ---- reporting and control ---- */
    FILE *log;                   /* progress and reports (NULL: silent) */
    int progress_tty;            /* -1 auto (isatty of log), 0 newline lines, 1 '\r' live line */
    int64_t log_every;           /* non-TTY progress line every N steps (0: auto ~ total/20) */
    int plot;                    /* 1: curves.png via gnuplot at the end */
    const char *config_json;     /* caller's resolved configuration (stored, not parsed); may be NULL */
    volatile int *interrupt;     /* non-zero (e.g. set by a SIGINT handler) -> finish the step, save a
                                    checkpoint, stop; a `volatile sig_atomic_t` flag (int on the
                                    platforms afinar builds on: checked at compile time) or NULL */
    int64_t stop_after;          /* > 0: behave as if interrupted after this many steps (tests) */
    /* ---- automatic recipe (rules and sources: src/train/recipe.h, README "Automatic recipe") ---- */
    af_recipe_kind recipe;       /* AF_RECIPE_FIXED (this struct's default: the fields as set) or AF_RECIPE_AUTO:
                                    choose epochs, class weights, max_seq_len, lora_layers, warm-up and eval_every
                                    from the training data, and with validation data early stopping (patience,
                                    early_stopping_threshold, schedule AF_SCHED_WSD), except those marked in
                                    `given` (settings objects, hence `afinar train`, default to auto) */
    unsigned given;              /* AF_GIVEN_* bits: the recipe settings the caller set (kept as set) */
    double time_budget_min;      /* > 0: the run (setup, training, evaluations) should take at most this many
                                    minutes: with AF_RECIPE_AUTO the choices are fitted to it at a measured speed;
                                    in any recipe the loop re-plans its length from the first steps' speed and
                                    stops (evaluated, saved) before the deadline (AF_STOP_BUDGET) */
    int check_only;              /* 1: a dry run (afinar check): the report says what train "would use" */
    const volatile int *cancel;  /* non-zero: stop at the next layer of the step in progress, save nothing
                                    more, af_trainer_run returns AF_ERR_CANCELLED (res->stop
                                    AF_STOP_INTERRUPTED); checkpoints already written stay; NULL: none */
    af_progress_fn progress;     /* called after every optimizer step ("train", steps done, total steps)
                                    and before and after every evaluation ("eval", 0 or n, n validation
                                    samples); NULL: none */
    void *progress_user;         /* passed to progress */
    unsigned char origin[AF_SETTINGS_MAX]; /* af_setting_origin of each key by its index in
                                    af_train_setting_keys: filled by af_train_settings_to_opts; left 0 by a C
                                    caller (the trainer then marks CALLER each field that differs from its
                                    default, and RECIPE what the automatic recipe chose) */
} af_trainer_opts;

/* Fill `o` with the defaults noted on each field above. */
AF_API void af_trainer_opts_defaults(af_trainer_opts *o);

typedef enum af_stop_reason {
    AF_STOP_DONE = 0,         /* reached the last step */
    AF_STOP_EARLY = 1,        /* early stopping (patience) */
    AF_STOP_INTERRUPTED = 2,  /* interrupt flag or stop_after: a checkpoint was saved */
    AF_STOP_NONFINITE = 3,    /* too many non-finite steps (the run returns AF_ERR_RANGE) */
    AF_STOP_BUDGET = 4        /* time_budget_min reached: evaluated and saved (best/, final/) like a finished run */
} af_stop_reason;

typedef struct af_train_result {
    af_stop_reason stop;
    int64_t steps_done;       /* optimizer steps completed (incl. resumed ones) */
    int64_t total_steps;
    int64_t best_step;        /* 0 when no evaluation happened */
    double best_macro_f1;     /* NaN when no evaluation happened */
    double last_val_accuracy, last_val_macro_f1; /* NaN when none */
    double last_train_loss;   /* smoothed (EMA) */
    double best_eval_loss;    /* causal LM: lowest validation loss (nats per target token); NaN when none */
    double last_eval_loss;    /* causal LM: last validation loss; NaN when none */
    int64_t n_nonfinite;      /* skipped steps over the whole run */
    double seconds;           /* wall time of this call */
    char last_checkpoint[1024]; /* "" when none was saved */
} af_train_result;

/* A configured run (opaque). */
typedef struct af_trainer af_trainer;

/* Load the model (unless given), read and tokenize the data, split, compute statistics, class
 * weights and diagnostics, build the parameter layout. Nothing is written to disk.
 * `*out`: free with af_trainer_free (also on failure a partially built trainer is freed).
 * Errors: AF_ERR_IO / AF_ERR_FORMAT (model or data, naming file:line:field), AF_ERR_NOT_FOUND
 * (model without tokenizer when text data are given), AF_ERR_INVALID_ARG (bad option naming it),
 * AF_ERR_NOMEM. Diagnostics with errors do NOT fail here: see af_trainer_has_errors. */
AF_API af_status af_trainer_new(const af_trainer_opts *o, af_trainer **out);
/* Frees the trainer (the borrowed model and data stay). NULL is ignored. */
AF_API void af_trainer_free(af_trainer *t);

/* Print data statistics (train, val), the run plan (steps, warm-up, trainable parameters),
 * the memory estimate and the diagnostics to fp. */
AF_API void af_trainer_report(const af_trainer *t, FILE *fp);
/* 1 when a diagnostic is an error or the memory estimate exceeds physical RAM. */
AF_API int af_trainer_has_errors(const af_trainer *t);
/* The number of errors af_trainer_report prints: error diagnostics plus the memory estimate when
 * it exceeds the limit (so a summary line counts what was printed). */
AF_API int af_trainer_n_errors(const af_trainer *t);
/* Diagnostics of the configuration. Borrowed: valid while `t` lives. */
AF_API const af_diag_list *af_trainer_diags(const af_trainer *t);

/* Train (see the section comment). Refuses (AF_ERR_INVALID_ARG) when af_trainer_has_errors, when
 * output_dir holds another run and overwrite is off, or when the resume state does not match.
 * `res` (may be NULL) receives the summary. Returns AF_OK also for early stop and interruption
 * (see res->stop); AF_ERR_RANGE for the non-finite stop; AF_ERR_IO when a file cannot be written
 * (the previous checkpoints stay intact). Call once per trainer. */
AF_API af_status af_trainer_run(af_trainer *t, af_train_result *res);

/* Resolve a resume argument to a checkpoint directory: `arg` itself when it holds
 * trainer_state.safetensors, else its newest checkpoint-N subdirectory holding one. `*ckpt`:
 * malloc'ed, caller frees. Errors: AF_ERR_NOT_FOUND (naming arg), AF_ERR_NOMEM. */
AF_API af_status af_trainer_find_checkpoint(const char *arg, char **ckpt);

/* ---------------------------------------------------------------------------------------------
 * Training settings by key: the flags of `afinar train` / `afinar check` and their JSON form
 *
 * Every option of a run has a key, the flag's long name without dashes ("lr", "grad-accum", ...).
 * A settings object maps keys to values (text, or a boolean) in insertion order; a --config
 * FILE.json or a checkpoint's train_config.json is such an object written as JSON
 * {"key": value, ...} (values: JSON numbers, booleans, or strings holding them). Messages name
 * the keys as flags ("--batch: expected an integer in [1, 1000000], got '0'").
 * ------------------------------------------------------------------------------------------- */
typedef enum af_setting_kind {
    AF_SETTING_TEXT = 0,   /* a string (file name, spec) */
    AF_SETTING_INT = 1,    /* an integral number in [lo, hi] */
    AF_SETTING_NUMBER = 2, /* a number in [lo, hi] */
    AF_SETTING_BOOL = 3    /* true / false (flags: --key and --no-key) */
} af_setting_kind;

typedef struct af_setting_info {
    const char *name;      /* key = long flag name */
    af_setting_kind kind;
    int short_opt;         /* one-letter flag ('m', 'o', 't') or 0 */
    double lo, hi;         /* range of INT / NUMBER keys */
    const char *arg;       /* placeholder of the value in a usage text ("FILE", "N"), NULL for BOOL */
    const char *help;      /* one-line description (the default: af_train_setting_default) */
    const char *group;     /* the help section: "model and data", "task", "LoRA and head", "optimisation",
                              "schedule", "evaluation", "checkpoints", "compute", "output" */
    int train_only;        /* 1: no meaning to a dry run (`afinar check` does not list it) */
} af_setting_info;

/* Where a setting's value came from, lowest precedence first (recorded per key in
 * af_trainer_opts.origin, shown by `afinar check`, written to run.json). */
typedef enum af_setting_origin {
    AF_ORIGIN_DEFAULT = 0, /* the built-in default (of the task) */
    AF_ORIGIN_CALLER = 1,  /* set in af_trainer_opts by a C caller, not through a settings object */
    AF_ORIGIN_RESUME = 2,  /* the checkpoint's train_config.json (--resume) */
    AF_ORIGIN_CONFIG = 3,  /* a --config file (af_train_settings_read) */
    AF_ORIGIN_FLAG = 4,    /* the command line, or af_train_settings_set by a program */
    AF_ORIGIN_RECIPE = 5   /* chosen by the automatic recipe (or the time budget) */
} af_setting_origin;

/* "default", "caller", "resume", "config", "flag", "recipe"; "?" for anything else. Static. */
AF_API const char *af_setting_origin_name(af_setting_origin origin);

/* The default of `key` as it applies to a run of `task` with the automatic recipe when `auto_recipe`
 * is 1 ("auto: from the data" and the fixed recipe's value for the keys the recipe decides), into
 * buf (NUL-terminated, truncated to cap). Returns buf, or NULL for an unknown key. The values are
 * those of af_trainer_opts_defaults after the task's own defaults (causal-lm: targets all-linear,
 * lora-layers all, lr 2e-4). */
AF_API char *af_train_setting_default(const char *key, af_task task, int auto_recipe, char *buf, size_t cap);

/* The keys in reference order; `*n` receives their count. Static. */
AF_API const af_setting_info *af_train_setting_keys(int32_t *n);

/* An empty settings object. `*out`: caller frees with af_train_settings_free().
 * Errors: AF_ERR_NOMEM. */
typedef struct af_train_settings af_train_settings;
AF_API af_status af_train_settings_new(af_train_settings **out);
/* Frees settings. NULL is ignored. */
AF_API void af_train_settings_free(af_train_settings *s);

/* Mark every key `s` holds now as coming from `origin` (af_train_settings_set marks AF_ORIGIN_FLAG;
 * af_train_settings_read AF_ORIGIN_CONFIG; af_train_settings_read_checkpoint AF_ORIGIN_RESUME;
 * af_train_settings_merge keeps the source's). NULL is ignored. */
AF_API void af_train_settings_set_origin(af_train_settings *s, af_setting_origin origin);

/* Set `key` to the text `value` (copied) or to a boolean; an earlier value of the key is dropped
 * and the key moves to the end of the order. Values are checked by af_train_settings_to_opts.
 * Errors: AF_ERR_INVALID_ARG (NULL argument), AF_ERR_NOMEM. */
AF_API af_status af_train_settings_set(af_train_settings *s, const char *key, const char *value);
AF_API af_status af_train_settings_set_bool(af_train_settings *s, const char *key, int value);

/* The value of `key` when it is text, else NULL. Borrowed: valid until `s` changes. */
AF_API const char *af_train_settings_get(const af_train_settings *s, const char *key);

/* Read a JSON settings file; `what` names it in messages ("config file"). Every key must be a
 * known key other than "resume", every value a string, number or boolean. `*out`: caller frees
 * with af_train_settings_free(). Errors: AF_ERR_IO ("PATH: cannot read WHAT: <strerror>"),
 * AF_ERR_FORMAT ("PATH:LINE: invalid JSON at column C (byte B) in the WHAT", "PATH: WHAT is
 * empty", "PATH: WHAT must be a JSON object", "PATH: unknown key \"K\"", "PATH: key \"K\":
 * expected a string, number or boolean"), AF_ERR_NOMEM. */
AF_API af_status af_train_settings_read(const char *path, const char *what, af_train_settings **out);

/* Copy every key of `src` into `dst` (src's values win; new keys are appended in src's order).
 * Errors: AF_ERR_NOMEM (dst may then hold part of src). */
AF_API af_status af_train_settings_merge(af_train_settings *dst, const af_train_settings *src);

/* Fill `o`: af_trainer_opts_defaults(), recipe AF_RECIPE_AUTO (settings, hence the command line,
 * default to the automatic recipe; "recipe": "fixed" turns it off), then every key of `s` in order;
 * o->given marks the recipe's keys present in `s` ("epochs" / "max-steps" > 0, "class-weights",
 * "max-seq-len", "lora-layers", "warmup", "eval-every", "schedule", "patience",
 * "early-stopping-threshold"). The strings of `o` are
 * borrowed from `s` (valid while `s` lives and is not changed). "warmup" takes N steps, a fraction
 * F < 1 or P%; "pooling" mean | last; "schedule" constant | cosine | linear | wsd. With "max-steps" and
 * no "epochs", epochs is 0 (max-steps sets the length). "time-budget" is in minutes.
 * Errors: AF_ERR_INVALID_ARG (a value of the wrong type or out of its key's range, naming the flag
 * and the value; "val" with "val-split"; no epochs and no max-steps), AF_ERR_NOMEM. */
AF_API af_status af_train_settings_to_opts(af_train_settings *s, af_trainer_opts *o);

/* The settings as pretty-printed JSON without the keys "resume" and "overwrite" (what a run stores
 * as config_json). `*out`: malloc'ed, caller frees with free(). Errors: AF_ERR_NOMEM. */
AF_API af_status af_train_settings_to_json(const af_train_settings *s, char **out);

/* The settings of checkpoint `ckpt` (a directory from af_trainer_find_checkpoint) for resuming it:
 * its manifest.json is verified first (every file's size and SHA-256; a checkpoint written before
 * manifests existed is read unverified, one that lost its manifest is refused), then its
 * train_config.json is read as by af_train_settings_read, with two changes for a run directory that
 * was moved: "output" is dropped (a resumed run writes next to its checkpoint unless the caller
 * sets it again), and the files of "model", "train", "val" and "labels" are looked up first
 * relative to the checkpoint (the run and its files moved together), then at the absolute path
 * they had when the run started (the run moved alone), else the value stays as it was given.
 * `note` (may be NULL) receives a malloc'ed text (caller frees; NULL when there is nothing to say)
 * with one line per path that was changed or not found. `*out`: free with af_train_settings_free.
 * Errors: those of af_train_settings_read; AF_ERR_FORMAT / AF_ERR_IO for a checkpoint whose files
 * do not match its manifest (the message names the file and the newest earlier checkpoint that
 * verifies; af_last_error_kind() says AF_ERROR_KIND_CHECKPOINT, and only for these), AF_ERR_NOMEM. */
AF_API af_status af_train_settings_read_checkpoint(const char *ckpt, af_train_settings **out, char **note);

/* ---------------------------------------------------------------------------------------------
 * Classifiers: a trained adapter loaded for prediction (`afinar eval` / `afinar predict`)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_classifier af_classifier;

/* Load an adapter directory written by the trainer (or any PEFT SEQ_CLS LoRA adapter with a
 * score head: pooling then defaults to "last", max_seq_len to 512; or a LoRA GGUF with afinar's
 * head keys, af_adapter_export_gguf; or a model file merged by af_merge_adapter, which carries the
 * head itself: pass its path as both model_path and adapter_dir) on top of `model` (borrowed:
 * must outlive the classifier) or, when NULL, the GGUF at model_path (loaded with `ctx` and owned).
 * Computations run under `ctx` (borrowed, must outlive the classifier; NULL: the model's).
 * `*out`: caller frees with af_classifier_free(). Errors: those of af_model_load and of reading
 * the adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND, AF_ERR_UNSUPPORTED), AF_ERR_INVALID_ARG
 * (adapter made for another model shape, no classification head), AF_ERR_NOMEM. */
AF_API af_status af_classifier_load(const af_ctx *ctx, const char *model_path, const af_model *model,
                             const char *adapter_dir, af_classifier **out);
/* Frees the classifier (and the model it loaded itself). NULL is ignored. */
AF_API void af_classifier_free(af_classifier *c);

/* The base model (borrowed: valid while `c` lives), the number of classes C, 1 for a multi-label
 * head (else 0), the truncation length of the samples, and the class names [C] (borrowed; NULL for
 * integer labels). */
AF_API const af_model *af_classifier_model(const af_classifier *c);
AF_API int32_t af_classifier_num_classes(const af_classifier *c);
AF_API int af_classifier_multi_label(const af_classifier *c);
AF_API int32_t af_classifier_max_seq_len(const af_classifier *c);
AF_API const char *const *af_classifier_label_names(const af_classifier *c);
/* What the loader had to assume because the adapter's afinar.json is missing or lacks a field (a
 * PEFT/transformers adapter: last-token pooling, max_seq_len 512, label ids as names), as one
 * sentence naming the file; NULL when nothing was assumed. Commands print it as a warning. */
AF_API const char *af_classifier_note(const af_classifier *c);

/* probs [af_dataset_size(ds), C] (C = af_classifier_num_classes): softmax (single-label) or
 * sigmoid (multi-label) of the logits of every sample of `ds`, batches of `batch` samples in
 * data-set order (no dropout). Errors: AF_ERR_INVALID_ARG (NULL argument, batch < 1, data with more
 * classes than the adapter, multi-label data for a single-label adapter), AF_ERR_NOMEM. */
AF_API af_status af_classifier_probs(af_classifier *c, const af_dataset *ds, int32_t batch, float *probs);

/* One prediction as a single-line JSON object (what `afinar predict` prints), from probs [C]:
 *   single-label  {"label": NAME, "label_id": ID, "probs": [...]}       (ID = argmax, ties -> lowest)
 *   multi-label   {"labels": [NAMES], "label_ids": [IDS], "probs": [...]}  (classes with p >= threshold)
 * NAME is the class name, or the id as text for integer labels; probabilities are printed with 6
 * significant digits. `*out`: malloc'ed, caller frees with free(). Errors: AF_ERR_INVALID_ARG
 * (NULL argument), AF_ERR_NOMEM. */
AF_API af_status af_classifier_prediction_json(const af_classifier *c, const float *probs, double threshold, char **out);

/* ---------------------------------------------------------------------------------------------
 * Text-generation metrics and generation-based evaluation (what `afinar eval --generate N` runs)
 * ------------------------------------------------------------------------------------------- */

/* Exact match of a generated text against its reference: 1 when `pred` and `ref` are byte-for-byte
 * equal after removing leading and trailing ASCII whitespace (space, \t, \n, \r, \v, \f) from
 * each; case, inner whitespace and every other byte are kept (no lowercasing, no punctuation
 * stripping). NULL counts as "". Never fails. */
AF_API int af_exact_match(const char *pred, const char *ref);

/* ROUGE-L of one prediction against one reference (C.-Y. Lin 2004, section 3.1: sentence-level
 * LCS, F with beta = 1): R = LCS/|ref tokens|, P = LCS/|pred tokens|, F = 2PR/(P+R); all three 0
 * when either side has no token. Tokens as the `rouge_score` package's default tokenizer (no
 * stemming): lowercase, every character other than a-z, 0-9 separates, tokens are the runs of
 * [a-z0-9] (so non-ASCII letters separate too; U+0130 and U+212A map to "i" and "k" as Python's
 * str.lower() does). Values are fractions in [0, 1]. */
typedef struct af_rouge_score {
    double precision, recall, fmeasure;
} af_rouge_score;

/* `pred`, `ref`: NUL-terminated UTF-8 (NULL counts as ""); `*out` receives the scores.
 * Time O(|pred|·|ref|) tokens, memory O(|pred| + |ref|) bytes. Errors: AF_ERR_INVALID_ARG (NULL
 * out), AF_ERR_NOMEM (then *out is zero). */
AF_API af_status af_rouge_l(const char *pred, const char *ref, af_rouge_score *out);

/* Options of af_gen_eval_run. */
typedef struct af_gen_eval_opts {
    int32_t max_examples;   /* score the first N examples of the file; <= 0: all of them */
    int32_t max_new_tokens; /* greedy tokens generated per example (stops earlier at an
                               end-of-generation token, af_token_is_eog); <= 0: 64 */
    int first_line;         /* 1: score only the generation's first non-empty line (leading
                               whitespace and newlines skipped, cut at the next '\n');
                               generation then stops at that '\n' (what is scored is the
                               same); 0: the whole generation */
    FILE *log;              /* one progress line per example ("\r"-updated); NULL: silent */
    const char *chat_template; /* conversations: "chatml" | "gemma" instead of the model's own
                               template; NULL or "auto": the model's (as training's setting) */
} af_gen_eval_opts;

/* Fill `o` with the defaults: all examples, 64 new tokens, whole generation, no log, the model's
 * chat template. */
AF_API void af_gen_eval_opts_init(af_gen_eval_opts *o);

/* One scored example. Strings are owned by the result (NUL-terminated UTF-8). */
typedef struct af_gen_example {
    int32_t line;               /* 1-based line of the example in the data file */
    char *prompt;               /* the prompt text as read, or the rendered chat prompt */
    char *reference;            /* the reference completion / last assistant turn as read */
    int chat;                   /* 1: a conversation rendered with the chat template */
    char *generated;            /* the decoded greedy generation (special tokens not rendered) */
    char *prediction;           /* what was scored: `generated`, or its first line (first_line) */
    int32_t prompt_tokens;      /* tokens of the rendered prompt (BOS included when added) */
    int32_t new_tokens;         /* tokens generated (the end-of-generation token included) */
    int exact;                  /* af_exact_match(prediction, reference) */
    af_rouge_score rouge_l;     /* af_rouge_l(prediction, reference) */
} af_gen_example;

/* Result of af_gen_eval_run; free with af_gen_eval_result_free. */
typedef struct af_gen_eval_result {
    int32_t n;                  /* examples scored */
    af_gen_example *ex;         /* [n], file order */
    double exact_match;         /* mean of ex[i].exact, in [0, 1] */
    double rouge_l_precision;   /* means over the examples of ex[i].rouge_l (macro average, as */
    double rouge_l_recall;      /*   rouge_score's per-pair scores averaged) */
    double rouge_l_f;
    int64_t prompt_tokens, new_tokens; /* sums over the examples */
    double prompt_seconds, decode_seconds; /* wall time of the prompt evaluations / of decoding */
} af_gen_eval_result;

/* Greedy generation for the first examples of a causal-LM JSONL file and their scores.
 * Data: the causal-LM reader's (af_lm_dataset_read; FORMATS.md §10): TRL's forms, one per file,
 * parsed whole (every line is checked, also beyond max_examples):
 *   {"prompt": STRING, "completion": STRING}: the prompt is rendered as training renders plain
 *     prompt/completion data: the prompt text alone, af_tokenize(add_special = 1, parse_special
 *     = 0), i.e. with BOS when the model's metadata adds one, special-token texts as plain text;
 *   {"messages": [...]} or {"prompt": [...], "completion": [...]} (single- or multi-turn): the
 *     reference is the last assistant turn's content; every message before it is rendered with
 *     the model's chat template and the generation prompt (the renderer of training, with the
 *     template's default system message when none is given), tokenized with parse_special = 1.
 * Refused: plain {"text"} data (no reference), a conversation that does not end with an
 * assistant turn or has no user turn before it.
 * Each example: af_session_reset, the prompt evaluated in one batch, then argmax decoding
 * (ties -> lowest id) until an end-of-generation token or opts.max_new_tokens. The session `s`
 * (borrowed) carries the adapter, if any (af_session_load_adapter: applied unmerged), and must
 * hold prompt + max_new_tokens positions for every example (an af_session_new n_ctx of 0 gives
 * the model's maximum, capped at 4096). `opts` may be NULL (defaults). `*out` is filled (zeroed
 * first); free it with af_gen_eval_result_free (also after an error).
 * Errors (messages name FILE:LINE and the field): AF_ERR_INVALID_ARG (NULL argument), AF_ERR_IO
 * (cannot open/read), AF_ERR_FORMAT (the reader's errors: invalid JSON, a missing or mistyped
 * field, an unknown role, mixed formats, no example; the refusals above; Gemma turns that do not
 * alternate; an empty prompt after tokenization), AF_ERR_UNSUPPORTED (a conversation and a model
 * without a chat template afinar renders, and no opts.chat_template), AF_ERR_RANGE (prompt + max_new_tokens longer than the
 * session), AF_ERR_NOMEM. */
AF_API af_status af_gen_eval_run(af_session *s, const char *data_path, const af_gen_eval_opts *opts,
                          af_gen_eval_result *out);

/* Frees what `r` owns and zeroes it. NULL is ignored. */
AF_API void af_gen_eval_result_free(af_gen_eval_result *r);

/* The result as a pretty-printed JSON object:
 *   {"n", "exact_match", "rouge_l": {"precision", "recall", "f"}, "prompt_tokens", "new_tokens",
 *    "prompt_seconds", "decode_seconds",
 *    "examples": [{"line", "reference", "prediction", "generated", "exact", "rouge_l_f"}]}
 * followed by the string members of `extra` (may be NULL): {key0, value0, ..., NULL}.
 * `*out`: malloc'ed NUL-terminated text, caller frees with free().
 * Errors: AF_ERR_INVALID_ARG (NULL r or out), AF_ERR_NOMEM. */
AF_API af_status af_gen_eval_json(const af_gen_eval_result *r, const char *const *extra, char **out);

/* ---------------------------------------------------------------------------------------------
 * Adapter merging (`afinar merge-adapters`)
 *
 * Several LoRA adapters of the same base model become one adapter. Every method works on each
 * adapted projection's ΔW_i = s_i·B_i·A_i [out, in] (s_i = lora_alpha/r, or lora_alpha/sqrt(r) with
 * use_rslora), never on A and B separately (which would add cross terms B_i·A_j between adapters);
 * the merged ΔW is then written as a PEFT adapter directory (af_lora_trainer_save_adapter's format)
 * of rank r with lora_alpha = r (scale 1): B = U_r·diag(σ_r), A = V_rᵀ from the truncated SVD of ΔW
 * (Eckart–Young: the best rank-r approximation), as PEFT's svd combinations write it
 * (peft 0.21 tuners/lora/model.py _svd_generalized_task_arithmetic_weighted_adapter). The method
 * definitions are those of peft/utils/merge_utils.py, applied to the ΔW_i with weights w_i:
 *   linear, svd     ΔW = Σ w_i ΔW_i (task arithmetic; PEFT's "svd"; afinar's "linear" is the same
 *                   computation — PEFT's own "linear" mixes A and B separately, which afinar does not)
 *   cat             ΔW = Σ w_i ΔW_i written EXACTLY at rank Σ r_i: A = [w_1 s_1 A_1; w_2 s_2 A_2; ...]
 *                   (rows concatenated), B = [B_1 B_2 ...] (columns), projections missing in an
 *                   adapter zero-padded (PEFT's "cat")
 *   ties            T_i = magnitude-prune(ΔW_i, density): keep the k = floor(density·out·in) largest
 *                   |entries| (ties at the threshold: lowest row-major index first), zero the rest;
 *                   elected sign e = sign(Σ_i T_i) ("total") or sign(Σ_i sign(T_i)) ("frequency"),
 *                   +1 where that sum is 0; ΔW = Σ_i w_i T_i [sign(T_i) = e] / max(1, Σ_i [sign(T_i) = e])
 *                   (disjoint merge; zero entries never count); PEFT's "ties_svd"
 *   dare-linear     T_i = random-prune(ΔW_i, density) / density, ΔW = Σ w_i T_i (PEFT "dare_linear_svd")
 *   dare-ties       random-prune as dare-linear, then sign election and disjoint merge as ties
 *   magnitude-prune T_i = magnitude-prune(ΔW_i, density), ΔW = Σ w_i T_i
 *   slerp           two adapters, t in [0, 1], per projection (Shoemake 1985 spherical interpolation as
 *                   mergekit's slerp applies it to flattened tensors): u_i = ΔW_i / |ΔW_i|_F (a ΔW_i
 *                   with |ΔW_i|_F <= 1e-8, e.g. a projection one adapter lacks, stays as it is),
 *                   d = <u_0, u_1>_F; |d| > 0.9995: ΔW = (1-t) ΔW_0 + t ΔW_1; else θ = acos(d),
 *                   ΔW = sin((1-t)θ)/sin θ · ΔW_0 + sin(tθ)/sin θ · ΔW_1 (a projection only one
 *                   adapter has: d = 0, θ = π/2, its ΔW scaled by sin(tθ) or sin((1-t)θ)). The inner
 *                   products come from the factors (BᵢᵀBⱼ and AᵢAⱼᵀ, no dense ΔW), then rank r by SVD as
 *                   linear. Heads: W = (1-t) W_0 + t W_1. No weights (t decides them). PEFT has no
 *                   slerp; reimplemented in tests/ref/make_merge_ref.py (NumPy, dense ΔW)
 * Random pruning (DARE) keeps entry (o, j) of adapter i's ΔW [out, in] when
 *   af_ctr_u01(af_ctr_key(seed, layer, proj, i), o·in + j) < density
 * with the splitmix64 counter RNG of src/lora/lora.h (proj: 0 q, 1 k, 2 v, 3 o, 4 gate, 5 up,
 * 6 down; i: 0-based adapter position; rows in the file's row order, HF for q/k) — deterministic
 * for a seed, reimplemented in tests/ref/make_merge_ref.py. density >= 1 prunes nothing.
 * Adapters may target different projections and layers: the result covers the union, an adapter
 * without a projection contributing ΔW_i = 0 there (for every method this equals PEFT's rule of
 * merging only the adapters that have the module). Ranks, lora_alpha and rsLoRA may differ. A
 * projection present in several adapters must have the same [out, in] everywhere.
 * Classification heads (modules_to_save "score"): every adapter has one or none; merged heads need
 * the same [num_classes, hidden] and the same label names (afinar.json "labels"); the head is
 * combined linearly, W = Σ w_i W_i (and the bias likewise, a missing bias counting as 0). PEFT has no
 * head merge (add_weighted_adapter refuses adapters that share a modules_to_save module).
 * ------------------------------------------------------------------------------------------- */
typedef enum af_merge_method {
    AF_MERGE_LINEAR = 0,
    AF_MERGE_SVD,
    AF_MERGE_CAT,
    AF_MERGE_TIES,
    AF_MERGE_DARE_TIES,
    AF_MERGE_DARE_LINEAR,
    AF_MERGE_MAGNITUDE_PRUNE,
    AF_MERGE_SLERP,
    AF_MERGE_METHOD_COUNT
} af_merge_method;

/* "linear", "svd", "cat", "ties", "dare-ties", "dare-linear", "magnitude-prune", "slerp" (also accepted
 * with '_' for '-'). Errors: AF_ERR_INVALID_ARG naming the unknown method and listing the known
 * ones. af_merge_method_name returns the first spelling (static), "unknown" out of range. */
AF_API af_status af_merge_method_parse(const char *name, af_merge_method *out);
AF_API const char *af_merge_method_name(af_merge_method m);

typedef struct af_adapter_merge_opts {
    af_merge_method method;  /* (AF_MERGE_LINEAR) */
    const double *weights;   /* [n_weights] w_i (any sign), borrowed; NULL: every w_i = 1 */
    int32_t n_weights;       /* must equal the number of adapters when weights != NULL */
    double density;          /* ties, dare-*, magnitude-prune: fraction of entries kept, in (0, 1]
                                (required: 0 = not given); the other methods: must be 0 */
    int32_t rank;            /* rank of the result, 1..min(out, in) of every projection; 0: the
                                largest input rank (PEFT's default); cat: 0 or Σ r_i */
    uint64_t seed;           /* DARE masks (0) */
    int majority_sign_frequency; /* ties / dare-ties sign election: 0 "total" (PEFT default),
                                    1 "frequency" */
    int overwrite;           /* 1: replace an existing output adapter directory */
    int n_threads;           /* projections merged at the same time (0: one per CPU this process may
                                run on); the result does not depend on it */
    double t;                /* slerp: interpolation position in [0, 1] (0: the first adapter, 1: the second) */
} af_adapter_merge_opts;

/* Defaults as marked above (method linear, weights 1, rank 0, seed 0, total, no overwrite, all CPUs). */
AF_API void af_adapter_merge_opts_default(af_adapter_merge_opts *o);

/* What a merge did (filled on success). */
typedef struct af_adapter_merge_report {
    int32_t rank;            /* rank written */
    int32_t n_projections;   /* adapted (layer, projection) pairs written */
    int has_head;            /* 1: a merged classification head was written */
    double max_rel_error;    /* max over projections of |ΔW - B·A|_F / |ΔW|_F, the truncation error
                                (0 for cat, and where ΔW = 0) */
    int32_t worst_layer;     /* where max_rel_error occurs (-1 when none) */
    char worst_proj[16];     /* "q_proj", ... ("" when none) */
} af_adapter_merge_report;

/* Merge the adapter directories `dirs` [n] (n >= 1; PEFT LoRA adapters as afinar or PEFT write them)
 * into a new adapter directory `out_dir` (see the section comment for the methods). Written as a
 * whole or not at all: into a temporary directory next to `out_dir`, then renamed; an existing
 * `out_dir` is an error unless opts->overwrite, and then it must be an adapter directory (it has
 * adapter_config.json and no sub-directory), which is replaced after the new one is complete.
 * adapter_config.json: r = lora_alpha = rank, use_rslora false, target_modules the union,
 * layers_to_transform when not every layer is adapted, task_type and base_model_name_or_path of the
 * first adapter; afinar.json: the first adapter's architecture / pooling / max_seq_len / labels,
 * q/k row order as the inputs, and "merge": {method, adapters, weights, density, seed, rank,
 * majority_sign}. Memory: the inputs' parameters, plus for ties / dare / magnitude-prune n + 2 dense
 * double matrices [out, in] per projection being merged (n_threads at a time). Time: the dense
 * methods take the SVD of each [out, in] ΔW (Householder QR + one-sided Jacobi, src/lora/svd.h):
 * about 2·out·in·min + 4·min³ flops per sweep, ~11 sweeps (min = min(out, in)): seconds for a
 * 576 x 576 projection; the factored methods (linear, svd, cat) never form ΔW and take milliseconds.
 * `opts` NULL: defaults; `report` may be NULL.
 * Errors (messages name the adapter directory and the field): AF_ERR_INVALID_ARG (NULL, n < 1,
 * weights count != n, non-finite weight, slerp with n != 2, with weights or with t outside [0, 1],
 * density outside (0, 1] or given for a method without
 * pruning or missing for one with pruning, rank < 0 or above min(out, in) of a projection, cat with
 * a rank other than Σ r_i, adapters for different architectures / numbers of layers, a projection
 * or head of different shapes, heads in some adapters only, different label names, q/k row orders
 * that differ), AF_ERR_IO (output exists without overwrite, or is not an adapter directory; write
 * failures), the errors of reading an adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND,
 * AF_ERR_UNSUPPORTED), AF_ERR_NOMEM. */
AF_API af_status af_adapter_merge(const char *const *dirs, int32_t n, const char *out_dir, const af_adapter_merge_opts *opts,
                           af_adapter_merge_report *report);

/* ---------------------------------------------------------------------------------------------
 * Multi-process runs (MPI)
 * `mpirun -np N afinar train ...` (or `srun`) trains one model data-parallel over N processes,
 * each with the whole data set: the global sample order, the split of every step's micro-batches
 * over the ranks and the dropout keys do not depend on N, and the per-micro-batch gradients are
 * gathered to every rank and summed in micro-batch order, so N = 1, 2, 4 ... give byte-identical
 * adapters (af_trainer_run). Built only when the build finds Open MPI (Makefile: MPI=1).
 * --------------------------------------------------------------------------------------------- */

/* What af_dist_init found. */
typedef struct af_dist_info {
    int32_t rank;       /* this process, 0 .. world_size - 1 (0 when not launched by MPI) */
    int32_t world_size; /* processes of the job (1 when not launched by MPI) */
    int active;         /* 1: launched by an MPI launcher (mpirun, srun) and MPI is built in: af_trainer_run
                           runs data-parallel over the job; 0: one process, nothing changes */
} af_dist_info;

/* The MPI library afinar was built with ("Open MPI v4.1.4, ..." as MPI_Get_library_version says,
 * first line), or NULL when MPI is not built in. Static string. */
AF_API const char *af_dist_library(void);

/* Initialise MPI when this process was started by an MPI launcher (Open MPI's mpirun sets
 * OMPI_COMM_WORLD_SIZE; PMIx / PMI launchers such as Slurm's srun set PMIX_RANK / PMI_RANK) and MPI
 * is built in; otherwise one process of one. Idempotent; call it before reading data so that a rank
 * that fails can stop the job (af_dist_abort). Under MPI, SIGTERM (what the launcher sends when
 * another rank died) prints "rank R: stopped by the MPI launcher at step S ..." before exiting.
 * Errors: AF_ERR_IO (MPI_Init failed). */
AF_API af_status af_dist_init(af_dist_info *info);

/* Stop every process of the job now (MPI_Abort with `exit_code`) when af_dist_init found a job of
 * more than one process; otherwise return (the caller exits as usual). Print the reason first. */
AF_API void af_dist_abort(int exit_code);

/* End MPI (MPI_Finalize) if af_dist_init started it; every rank must call it at a clean exit. */
AF_API void af_dist_finalize(void);

/* ---------------------------------------------------------------------------------------------
 * Taking an adapter elsewhere: llama.cpp LoRA GGUF export, merging into a GGUF model
 * (`afinar export`, `afinar merge`; file layouts in docs/FORMATS.md §8)
 * ------------------------------------------------------------------------------------------- */

/* Write the adapter `adapter` (a PEFT/afinar adapter directory, or a LoRA GGUF) for the base model
 * at `model_path` as a llama.cpp LoRA GGUF file `out_path` (general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha = s·r where s is the adapter's scale alpha/r or alpha/sqrt(r), so
 * llama.cpp's alpha/r gives s; general.architecture of the base; for every adapted projection
 * blk.{i}.{attn_q,...,ffn_down}.weight.lora_a (ggml ne {in, r}, f32) and .lora_b (ne {r, out}),
 * the lora_b rows of llama q/k in the GGUF's permuted order). The model is needed for its
 * architecture, its q/k head geometry and to check every shape. A classification head, the labels
 * and afinar.json travel as afinar.* metadata (llama.cpp ignores them). Written atomically (temp
 * file + rename). Errors: AF_ERR_INVALID_ARG (NULL argument; out_path exists and !overwrite;
 * adapter made for another architecture or shape; an adapter without LoRA tensors), those of
 * af_model_load and of reading the adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND,
 * AF_ERR_UNSUPPORTED), AF_ERR_IO (writing), AF_ERR_NOMEM. Nothing is written on error. */
AF_API af_status af_adapter_export_gguf(const char *model_path, const char *adapter, const char *out_path, int overwrite);

/* Options of af_merge_adapter; zero-initialised = keep each tensor's type, refuse to overwrite. */
typedef struct af_merge_opts {
    /* Type of the merged (adapted) tensors: NULL or "keep" = each tensor's original type, or one of
     * "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q6_k" (ggml's
     * reference quantizers, bit for bit). Tensors the adapter does not touch keep their type and
     * bytes whatever this says. */
    const char *type;
    int overwrite;          /* 1: replace an existing out_path */
} af_merge_opts;

/* What af_merge_adapter did (all zero on error). */
typedef struct af_merge_stats {
    int32_t merged;         /* tensors W + s·B·A re-quantized */
    int32_t copied;         /* tensors copied byte for byte */
    double delta_rms;       /* RMS of s·B·A over the merged tensors' elements */
    double requant_rms;     /* RMS of dequant(quant(W + s·B·A)) - (W + s·B·A) (the re-quantization error;
                               0 for "f32") */
    double base_requant_rms;/* RMS of dequant(quant(W)) - W with the same output type, for comparison
                               (0 when the type is kept: W is then stored exactly) */
} af_merge_stats;

/* Fold the adapter into the model at `model_path` and write the result to `out_path` (a GGUF llama.cpp
 * and afinar load like the base): every adapted tensor W [out, in] becomes quant(W + s·B·A), in
 * f32 (Wd dequantized, the product accumulated in f32, then quantized with af_quantize_row);
 * every other tensor and every metadata KV is copied byte for byte, in the same order (the
 * tensor infos differ only in the merged tensors' types and the data offsets). A classification
 * head travels as the afinar.classifier.* keys (and afinar.adapter_json), replacing such keys of
 * the base, so af_classifier_load(model = OUT, adapter = OUT) / `afinar predict -m OUT` runs the
 * merged classifier. Written atomically (temp file + rename). `opts` may be NULL (defaults);
 * `stats` may be NULL.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; unknown type, naming the known ones; out_path exists
 * and !overwrite; adapter for another architecture or shape; a merged tensor whose row length is
 * not a multiple of the output type's block size, naming the tensor), AF_ERR_UNSUPPORTED (a tensor
 * type afinar cannot dequantize or re-quantize), those of af_model_load and of reading the adapter,
 * AF_ERR_IO, AF_ERR_NOMEM. Nothing is written on error. */
AF_API af_status af_merge_adapter(const char *model_path, const char *adapter, const char *out_path,
                           const af_merge_opts *opts, af_merge_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * `afinar serve`: an OpenAI-compatible HTTP server (libmicrohttpd; built when the Makefile finds
 * it, else af_server_run returns AF_ERR_UNSUPPORTED). Endpoints, limits and the batching policy:
 * README "Serving (afinar serve)".
 * ------------------------------------------------------------------------------------------- */
typedef struct af_server_opts {
    const char *model_path;        /* GGUF file or HF directory (required) */
    const char *const *adapter_names; /* [n_adapters] model ids of the adapters (borrowed) */
    const char *const *adapter_paths; /* [n_adapters] their directories / LoRA GGUF files */
    int32_t n_adapters;
    const char *host;              /* ("127.0.0.1") address to listen on: an IPv4 address or "localhost" */
    int32_t port;                  /* (8080) 0: any free port (the log's "listening on" line names it) */
    int32_t max_seqs;              /* (4) sequences decoded together (continuous batching), 1..64 */
    int32_t n_ctx;                 /* (2048) positions per sequence (prompt + generated); <= the model's */
    int32_t queue;                 /* (16) requests waiting for a sequence slot; more: HTTP 429 */
    int64_t max_body;              /* (1 MiB) request body limit in bytes; more: HTTP 413 */
    int32_t timeout_s;             /* (60) a connection idle this long (slow client) is closed */
    const char *chat_template;     /* NULL/"auto": the model's; "chatml" | "gemma" */
    const af_ctx *ctx;             /* NULL: defaults (all threads) */
    FILE *log;                     /* one line per request and the "listening on" line; NULL: silent */
    const volatile int *stop;      /* non-zero (a SIGINT/SIGTERM handler): refuse new requests (503),
                                      finish the ones in flight, return */
    const char *alias;             /* NULL: the model id is the file / directory name (".gguf" removed);
                                      else this id (GET /v1/models). A request's "model" matches the id
                                      with or without ".gguf"; with no adapter loaded any id is the model */
    const char *api_key;           /* NULL: open; else every route but /health needs the header
                                      "Authorization: Bearer <api_key>" (else HTTP 401) */
    const char *runs_dir;          /* NULL, or a directory whose run directories (one level down) the
                                      web page shows read-only (GET /api/runs...) */
    int32_t batch_tokens;          /* (256) prompt tokens evaluated per scheduler pass, in the same pass
                                      as the running requests' next tokens (chunked prefill), 16..2048 */
    int32_t max_adapters;          /* (64) adapters loaded at once, 1..1024: POST /lora-adapters/load beyond
                                      it is refused (HTTP 409) unless it asks "evict": true, which unloads
                                      the least recently used adapter no request is using */
} af_server_opts;

/* Defaults as marked above. */
AF_API void af_server_opts_default(af_server_opts *o);

/* Load the model and adapters and serve until *o->stop (returns AF_OK then). Raises the process's
 * open-files soft limit to its hard limit (one descriptor per connection; docs/RELIABILITY.md
 * "The server" for the connection cap and the 503 shedding). Errors: those of
 * loading the model and adapters, AF_ERR_INVALID_ARG (an option out of range, a duplicate adapter
 * name), AF_ERR_IO (the address cannot be bound), AF_ERR_UNSUPPORTED (built without
 * libmicrohttpd). */
AF_API af_status af_server_run(const af_server_opts *o);
/* 1 when afinar was built with the HTTP server (libmicrohttpd), else 0 (af_server_run fails). */
AF_API int af_server_available(void);

/* ---------------------------------------------------------------------------------------------
 * Conversion of a Hugging Face checkpoint to GGUF (`afinar convert`)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_convert_opts {
    /* Type of the 2-D weights: NULL or "keep" = each tensor's stored type (F32/F16/BF16: the
     * conversion is exact), or "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
     * "q6_k" (ggml's reference quantizers). A matrix whose rows are not a multiple of the type's block
     * falls back to q8_0 (rows a multiple of 32) or f16 (counted in af_convert_stats.fallback).
     * 1-D tensors (norms, biases, RoPE factors, output scales) are always F32. */
    const char *type;
    int overwrite;          /* 1: replace an existing out_path */
    FILE *log;              /* progress and notes (NULL: quiet) */
} af_convert_opts;

typedef struct af_convert_stats {
    int32_t tensors;        /* tensors written */
    int32_t converted;      /* 2-D weights stored in another type than the checkpoint's */
    int32_t fallback;       /* of those, stored in q8_0 / f16 because of their row length */
    int32_t folded_q_scale; /* 1: the attention scale (query_pre_attn_scalar) was folded into attn_q_norm */
    uint64_t bytes;         /* size of the written file */
} af_convert_stats;

/* Convert the Hugging Face checkpoint directory `dir` (what af_model_load accepts: llama, gemma3,
 * qwen2, qwen3, gemma4) to the GGUF `out_path` with llama.cpp's tensor names and metadata
 * (general.*, {arch}.* hyper-parameters as llama.cpp's convert_hf_to_gguf.py writes them, per-layer
 * arrays where layers differ, the sliding pattern, gemma4's KV sharing / PLE / RoPE factors) and the
 * tokenizer (tokenizer.ggml.*: af_tokenizer_gguf_write; none when the directory has no usable
 * tokenizer). The weights are those af_model_load made of the directory: llama q/k rows in llama.cpp's
 * order, Gemma 3 norms as 1 + w, so loading the file gives the directory's model (bit for bit with
 * "keep" and F32/F16 checkpoints). A gemma3 query_pre_attn_scalar other than head_dim, which llama.cpp
 * cannot store, is folded into attn_q_norm (exact up to one f32 rounding). Written atomically.
 * `opts`, `stats` may be NULL. Errors: AF_ERR_INVALID_ARG (NULL argument, unknown type, not a
 * directory, out_path exists and !overwrite), those of af_model_load, AF_ERR_NOMEM, AF_ERR_IO. */
AF_API af_status af_model_convert(const char *dir, const char *out_path, const af_convert_opts *opts,
                           af_convert_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * For bindings (the Python package, python/): a training run driven by a settings object with the
 * caller's log, progress and stop flags
 * ------------------------------------------------------------------------------------------- */

/* What af_train_settings_run passes to the run (every member may be 0 / NULL). */
typedef struct af_train_hooks {
    int log_fd;                 /* >= 0: the report and progress lines are written to a duplicate of this
                                   file descriptor; < 0: silent */
    volatile int *interrupt;    /* af_trainer_opts.interrupt: finish the step, save a checkpoint, stop */
    const volatile int *cancel; /* af_trainer_opts.cancel: stop at the next layer, save nothing more */
    af_progress_fn progress;    /* af_trainer_opts.progress ("train": steps done of total; "eval") */
    void *progress_user;
} af_train_hooks;

/* What `afinar train` (check_only = 0) or `afinar check` (check_only = 1) do with the settings `s`
 * (keys of af_train_setting_keys): with "resume", the checkpoint's own settings
 * (af_train_settings_read_checkpoint) under those of `s`; af_train_settings_to_opts; the settings
 * stored as the run's config_json; af_trainer_new; the report to the log; then, for a run, a refusal
 * when a diagnostic is an error (AF_ERR_INVALID_ARG listing them) or af_trainer_run. `h` may be NULL.
 * `*result_json` (malloc'ed, caller frees with free(); NULL when nothing ran): for a run
 *   {"stop": "done"|"early_stopping"|"interrupted"|"nonfinite"|"time_budget", "steps_done",
 *    "total_steps", "best_step", "best_macro_f1", "eval_accuracy", "eval_macro_f1", "train_loss",
 *    "best_eval_loss", "eval_loss" (null when not measured), "n_nonfinite", "train_runtime"
 *    (seconds), "last_checkpoint", "output_dir"}, also when af_trainer_run fails (cancelled,
 *   non-finite stop, a write error);
 *   for a dry run {"diagnostics": [{"severity", "code", "message", "recommendation"}], "n_errors",
 *    "ready"}.
 * Errors: those of the settings (AF_ERR_INVALID_ARG naming the flag), of resuming
 * (AF_ERR_NOT_FOUND, AF_ERR_FORMAT, AF_ERR_IO; af_last_error_kind() AF_ERROR_KIND_CHECKPOINT for a
 * checkpoint that does not verify), of af_trainer_new and af_trainer_run
 * (AF_ERR_CANCELLED after h->cancel), AF_ERR_INVALID_ARG (no "model", "train" or, for a run,
 * "output"; error diagnostics), AF_ERR_IO (a log_fd that cannot be written). */
AF_API af_status af_train_settings_run(const af_train_settings *s, const af_train_hooks *h, int check_only,
                                char **result_json);

#ifdef __cplusplus
}
#endif
#endif /* AFINAR_APP_H */
