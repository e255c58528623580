/*
 * trainer_internal.h — state shared by trainer.c (setup, report), trainer_run.c (the loop),
 * trainer_step.c (one optimizer step: its micro-batches) and trainer_ckpt.c (checkpoints, output
 * directory, metrics log, plot). Not part of any API. The loop
 * takes its optimizer steps with the public af_lora_trainer (train/api_internal.h).
 */
#ifndef AF_TRAINER_INTERNAL_H
#define AF_TRAINER_INTERNAL_H

#include "train/api_internal.h" /* the optimizer step (af_lora_trainer); af_tr_nonfinite_tensor */
#include "train/recipe.h"
#include "train/dist.h"
#include "train/pref.h"
#include "train/trainer.h"

#include <cJSON.h>
#include <stdio.h>

struct af_trainer {
    const af_trainer_opts *o;          /* the plan: the caller's options resolved once by af_trainer_new (the
                                          task's defaults, checks, the data's max_seq_len, the recipe's choices,
                                          origins), read-only afterwards (owned: freed by af_trainer_free;
                                          strings borrowed from the caller). Only af_trainer_new's resolution
                                          steps hold it writable (their `af_trainer_opts *plan` argument). */
    /* what the run derives from the plan without changing it */
    FILE *log;                         /* progress and reports: the plan's log, NULL on a rank that does not write */
    int plot;                          /* the plan's plot, 0 on a rank that does not write */
    const char *out_dir;               /* the output directory: the plan's, or the resumed checkpoint's run
                                          directory when the plan names none (af_tr_prepare_output) */
    int64_t eval_every;                /* the evaluation interval: the plan's, re-planned with the length under
                                          a time budget (af_tr_budget_replan) */
    af_ctx *ctx;                       /* owned: the run's context (trainer.c make_ctx) */
    af_ctx *ctx_dev;                   /* owned: the device context the run left for the CPU (--device auto;
                                          an owned model keeps it as its context), or NULL */
    af_lm_data_report lm_rep_train, lm_rep_val; /* causal-LM files: the reader's reports */
    int have_lm_rep;                   /* 0 none, 1 train, 2 train + val */
    af_model *model_owned;
    const af_model *model;
    af_dataset *train_owned, *val_owned;
    const af_dataset *train, *val;     /* val may be NULL */
    char **label_names;                /* [num_classes] owned, or NULL */
    int32_t num_classes;
    int multi_label;
    af_data_stats st_train, st_val;
    int have_st_train, have_st_val;
    af_lora_config lora;               /* the run's LoRA: rank, alpha, dropout, rsLoRA, target mask, seed */
    int32_t layer_min, layer_end;      /* the adapted layers [layer_min, layer_end) (end 0: through the last):
                                          --lora-layers resolved once (trainer.c), or the recipe's choice */
    int32_t *layer_list, n_layer_list; /* o->layers_to_transform parsed (owned; ascending), or NULL: the range */
    af_param_layout lay;               /* built once from lora and the layers; handed to the optimizer */
    int have_lay;
    float *class_w;                    /* [num_classes] or NULL (uniform) */
    af_diag_list diags;
    int64_t n_micro;                   /* micro-batches per epoch */
    int64_t spe;                       /* optimizer steps per epoch */
    int64_t total;                     /* optimizer steps of the run */
    int64_t warmup;                    /* warm-up steps */
    int64_t max_mb_tokens;             /* tokens of the largest possible micro-batch */
    int64_t max_ev_tokens;             /* tokens of the largest evaluation batch (0: no validation set) */
    size_t mem_need, mem_ram; /* estimated peak; limit (RAM, cgroup or --memory-limit) */
    const char *mem_what;     /* which limit mem_ram is (static string) */
    int64_t n_model_params;
    int ran;
    /* causal LM (o.task == AF_TASK_CAUSAL_LM) */
    int lm;                            /* 1: causal-LM run (no head; next-token loss) */
    int packing;                       /* 1: micro-batches = best-fit-decreasing bins of `budget` tokens */
    int64_t budget;                    /* packing: tokens per micro-batch (batch x max_seq_len) */
    int lm_len_chosen;                 /* 1: max_seq_len came from the data (af_tr_lm_read) */
    char lm_len_why[256];              /* its reason (af_recipe_lm_max_seq_len) */
    /* preference tuning (o.task AF_TASK_DPO / AF_TASK_ORPO; lm is 1 too): micro-batches of `batch`
       pairs of the train set (pairs = 1: samples 2i chosen, 2i + 1 rejected), never packed */
    int pref;
    af_pref_opts po;                   /* the loss: sigmoid / ipo (dpo), orpo; beta, label smoothing */
    af_pref_data_report pref_rep_train, pref_rep_val; /* the reader's pair reports (have_lm_rep) */
    /* the automatic recipe (o.recipe == AF_RECIPE_AUTO; trainer_recipe.c) and the time budget */
    af_recipe recipe;
    int have_recipe;                   /* 1: recipe holds the choices applied to o */
    char why_precision[240];           /* the recipe's frozen-product precision and why ("" when not its choice) */
    char why_dropout[320];             /* the recipe's LoRA dropout and why ("" when not its choice) */
    char why_accum[320];               /* the recipe's gradient accumulation and why ("" when not its choice) */
    char why_lr[400];                  /* the recipe's learning rate and why ("" when not its choice) */
    char *config_owned;                /* o->config_json with the recipe's choices added (owned) */
    const char *config_json;           /* the run's settings record: config_owned, else o->config_json */
    double t_created;                  /* af_time_sec() when af_trainer_new started (the time budget's start) */
    double flops_token_layer;          /* forward FLOPs of one token through one layer */
    double rate_flops;                 /* time budget: FLOP/s assumed by the plan (0: no time budget) */
};

/* Everything that changes during training besides P, M, V (saved in trainer_state). */
typedef struct af_run_state {
    int64_t step;            /* optimizer steps completed */
    int64_t adam_t;          /* AdamW updates applied (skipped steps excluded) */
    int64_t best_step;       /* 0: none */
    int64_t bad_evals;       /* evaluations since the last improvement */
    int64_t nonfinite_run;   /* consecutive skipped steps */
    int64_t n_nonfinite;     /* skipped steps in total */
    int64_t ema_n;           /* values folded into the EMAs */
    int64_t last_eval_step;  /* 0: none */
    int64_t samples_seen;
    double best;             /* best validation macro-F1; causal LM: lowest eval loss (NaN: none) */
    double ema_loss, ema_acc;/* raw EMAs (bias-corrected when shown) */
    double elapsed;          /* training seconds before this session */
    double last_val_acc, last_val_f1; /* causal LM: last eval mean token accuracy, last eval loss */
    int64_t tokens_seen;     /* causal LM: tokens of all micro-batches so far (TRL num_tokens) */
} af_run_state;

#define AF_EMA_BETA 0.98

/* The memory limit into t->mem_ram, t->mem_what: RAM, the cgroup's memory.max when lower, or
 * o.memory_limit_mb (trainer.c). */
void af_tr_mem_limit(af_trainer *t);
/* Tokens per micro-batch the memory limit allows (af_tr_mem_limit, the engine's bytes per token with
 * every layer adapted), 0 when unknown. trainer_recipe.c. */
int64_t af_tr_mem_tokens(af_trainer *t);
/* Read the causal-LM training and validation files into t->train_owned / t->val_owned with their
 * reports. With the automatic recipe and no max_seq_len given, max_seq_len comes from the data
 * (af_recipe_lm_max_seq_len; plan->max_seq_len, t->budget and t->lm_len_chosen are set, the reason
 * is logged). Called by af_trainer_new only (the plan is writable there). trainer_lmdata.c. Errors: those of af_lm_dataset_read. */
af_status af_tr_lm_read(af_trainer *t, af_trainer_opts *plan);

/* ---- trainer_plan.c: the plan as settings with their origins ---- */
/* The adapted layers as --lora-layers text: "all", "topK" (through the last layer) or "A-B"; with
 * --layers-to-transform its list ("0,2,5"; cut at cap). */
void af_tr_layers_text(const af_trainer *t, char *buf, size_t cap);
/* Every setting's value as the run uses it, with its origin, grouped (`afinar check` leaves out the
 * keys a dry run has no use for). */
void af_tr_plan_print(const af_trainer *t, FILE *fp);
/* The settings that did not keep their default, as {"key": "value (origin)", ...} (run.json
 * "settings"; a key left out has its default); NULL: no memory. */
cJSON *af_tr_plan_json(const af_trainer *t);

/* ---- trainer_recipe.c ---- */
/* The automatic recipe on a trainer whose data and statistics are loaded (before the layout and
 * the step plan): choose, write the choices into `plan` (t->o, writable in af_trainer_new only; not
 * what plan->given marks), truncate the data to the chosen max_seq_len, recompute the statistics.
 * No-op for AF_RECIPE_FIXED. */
af_status af_tr_recipe_apply(af_trainer *t, af_trainer_opts *plan);
/* After the step plan (in af_trainer_new): the evaluation interval into `plan`, the settings record
 * (t->config_owned, t->config_json). */
af_status af_tr_recipe_finish(af_trainer *t, af_trainer_opts *plan);
/* The recipe block of the report ("recipe auto: the run uses" / "train would use"). */
void af_tr_recipe_report(const af_trainer *t, FILE *fp);
/* The choices and reasons as a JSON object text (run.json "recipe"); NULL without a recipe. Caller frees. */
char *af_tr_recipe_json(const af_trainer *t);
/* 1 when the recipe gave up evaluating the validation data (a time budget it alone would exhaust). */
int af_tr_no_eval(const af_trainer *t);
/* The cost of one evaluation of the validation data in training steps of this run (the FLOP
 * model of recipe.h: every layer forward over the validation tokens vs a step's tokens through the
 * adapted layers forward and backward and the layers below forward). */
double af_tr_eval_steps(const af_trainer *t);
/* Time budget: seconds left before the deadline at time `now` (training seconds of earlier sessions
 * `elapsed_before` count against it); +inf without a time budget. */
double af_tr_budget_left(const af_trainer *t, double now, double elapsed_before);
/* Time budget: the run's new length from the speed measured so far (`done` steps done, `step_s`
 * seconds each, evaluations of `eval_s` seconds every `eval_every` steps): the steps that fit in
 * `left` seconds (keeping `reserve` for the last evaluation and saves), shorter or, up to the passes
 * the recipe's rules asked, longer; changes under 5% are not made. Records it as max-steps in
 * t->config_owned. Returns the new total (t->total when unchanged). Called after the first steps and
 * again as they double (trainer_run.c budget_check). */
int64_t af_tr_budget_replan(af_trainer *t, int64_t done, double step_s, double eval_s, double left, double reserve);
/* Early stopping with the wsd schedule, at step `done` where patience ran out: when the cool-down has
 * not begun (done < af_wsd_decay_start(t->total)), shorten the run to af_wsd_total_ending(done) steps
 * (a linear cool-down over about a quarter of the steps done, then the last evaluation) and record it
 * as max-steps (and the warm-up in steps) in t->config_owned, so a resume keeps the plan. Returns the
 * new total (t->total when nothing changed: already cooling down, or the planned end comes first). */
int64_t af_tr_plateau_replan(af_trainer *t, int64_t done);
/* The training loop's state (trainer_run.c), shared with the step functions (trainer_step.c) and
 * the device fallback (trainer_device.c). */
typedef struct af_tr_loop {
    af_trainer *t;
    af_lora_trainer *lt;  /* the optimizer step: parameters, gradients, AdamW state, engine */
    const float *P;       /* lt's parameters [t->lay.n_total] on its device (for the engine) */
    float *hP, *hM, *hV;  /* host copies [t->lay.n_total] made for checkpoints and saves */
    af_engine *eng;       /* lt's engine */
    af_batcher *bt;
    int32_t *perm;
    int64_t perm_epoch;
    float *logits;       /* [batch, C] */
    float *vprobs;       /* [n_val, C] */
    FILE *mf;            /* metrics.jsonl */
    int mf_errno;        /* the first failed write to metrics.jsonl (0: none); the run then fails */
    af_run_state rs;
    double t0;           /* session start */
    int64_t session_steps, session_samples;
    int tty;
    int64_t log_every;
    int live;            /* a '\r' line is on screen */
    int plateau;         /* early stopping re-planned the wsd run to cool down and end (af_tr_plateau_replan) */
    char last_ckpt[1024];
    char good_ckpt[1024];  /* newest checkpoint saved after a finite step (or the resumed one) */
    char nf_where[224];  /* where the current step's non-finite value appeared ("" when finite) */
    char nf_first[288];  /* "step N: <where>" of the first step of the current non-finite run */
    /* causal LM */
    int32_t *bin_idx, *bin_off; /* packing: the epoch's micro-batches (af_pack_bfd), [n_train], [n_micro + 1] */
    int64_t session_tokens;
    /* preference tuning */
    double *ref_tc, *ref_tr;  /* [train pairs] reference log-probabilities (chosen, rejected) computed once
                                 (precompute-ref, not orpo), or NULL: computed in every micro-batch */
    double *ref_vc, *ref_vr;  /* [val pairs] the validation set's (always precomputed; not orpo) */
    int32_t *pidx;            /* [2 max(batch, eval batch)] sample indices of a micro-batch's pairs */
    double *prc, *prr;        /* [max(batch, eval batch)] its reference log-probabilities */
    af_batcher *bt_val;       /* the validation set's batcher (evaluation) */
    af_pref_metrics pm;       /* the last step's metrics (means over its pairs) */
    double pref_sum[4];       /* the step being gathered: sums over its pairs of rewards/chosen,
                                 rewards/rejected, logps/chosen, logps/rejected (ST_RC.. of the rows) */
    double nll_sum;           /* orpo: sum over its micro-batches of NLL x pairs */
    /* data parallelism (af_dist_on(): launched by mpirun / srun; see dist_step) */
    int dist;              /* 1: every step's micro-batches are split over the ranks */
    int32_t rank, world;   /* this process, processes (0, 1 without MPI) */
    int writer;            /* rank 0: the one that writes output, metrics and progress */
    float *rows;           /* [grad_accum, row] per-micro-batch gradient rows of the step (gathered) */
    int64_t row;           /* floats per row: n_total gradient + DIST_STAT_F (DIST_STATS doubles) */
    float *gsum;           /* [n_total] the step's gradient: rows summed in micro-batch order */
    int32_t *counts;       /* [world] micro-batches of the step per rank */
    af_dist_counters comm; /* this step's communication: the gather (and rank 0's decisions) */
    af_dist_counters wait; /* this step's error agreement = waiting for the slowest rank to finish its micro-batches */
    double compute_s;      /* this step's micro-batch compute seconds (this rank) */
    int64_t comm_bytes_all;/* this step's bytes received over all ranks (rows × row bytes × (world − 1)) */
} loop;

/* Pairs per reference / evaluation batch of a preference run at most (stack index arrays). */
#define AF_PREF_MAX_EVAL_BATCH 256

/* Statistics of one micro-batch, carried at the end of its gathered gradient row (doubles). */
enum { ST_LOSS, ST_CORRECT, ST_NTOK, ST_NONFINITE, ST_RC, ST_RR, ST_LPC, ST_LPR, ST_NLL, DIST_STATS };
#define DIST_STAT_F (DIST_STATS * (int64_t)(sizeof(double) / sizeof(float)))

/* ---- trainer_run.c ---- */
/* The public trainer that takes the steps (L->lt) on t->ctx, with t's layout, options and class
 * weights; L's views of its parameters and engine, host buffers for saves. Errors: those of
 * af_lora_trainer_new_ext, AF_ERR_NOMEM. */
af_status af_tr_new_optimizer(const af_trainer *t, struct af_tr_loop *L);
/* What one optimizer step gave. */
typedef struct af_tr_step {
    int finite;              /* 0: skipped (a non-finite loss or gradient norm) */
    double loss, acc, gn, lr;
    int64_t n_step, n_tok;   /* samples, tokens of the step */
} af_tr_step;
/* Optimizer step L->rs.step on L->lt (its micro-batches, then af_lora_trainer_step). */
af_status af_tr_take_step(struct af_tr_loop *L, af_tr_step *S);

/* Ends the live progress line on the log (a newline) before another line is written. */
void af_tr_end_live(struct af_tr_loop *L);
/* One line s (JSON, no newline) appended to metrics.jsonl and flushed; a write error is kept in
 * L->mf_errno (reported at the end of the run), never fatal here. */
void af_tr_log_line(struct af_tr_loop *L, const char *s);

/* ---- trainer_eval.c ---- */
/* One evaluation after step L->rs.step on t->val (classification, causal LM or preference pairs by
 * the task): the run state's last/best metric and patience count (transformers'
 * EarlyStoppingCallback: the patience restarts only on a gain above early_stopping_threshold), a
 * metrics.jsonl line, a log line; *improved = 1 when it is the best so far. Errors: the engine's
 * (AF_ERR_NOMEM, AF_ERR_DEVICE). */
af_status af_tr_evaluate(struct af_tr_loop *L, int *improved);

/* ---- trainer_device.c (the device guard and the CPU fallback) ---- */
/* Whether the run fits its device (t->ctx): activations of the largest micro-batch (and of an
 * evaluation batch), parameters, gradients and AdamW state, against the device's free memory
 * (its weights are already there). On the CPU: nothing (the RAM check is af_trainer_run's). Not
 * fitting: with device "auto" a line on the log and t->ctx becomes a CPU context; else
 * AF_ERR_NOMEM saying what would fit (fewer tokens per micro-batch, --checkpointing, --device cpu). */
af_status af_tr_device_fit(af_trainer *t);
/* After a step on a device (st: af_tr_take_step's status, S its results):
 *  - AF_ERR_DEVICE (lost, out of memory mid-run): with "auto", a line on the log, then the run goes
 *    on on the CPU from the last good checkpoint (or from the start: the same bits as a CPU run) and
 *    the step is taken there; else the error, naming the checkpoint to resume on the CPU;
 *  - a non-finite step: the same step is taken on the CPU from the same state; finite there: with
 *    "auto" the run goes on on the CPU (S gets the CPU's step), else AF_ERR_DEVICE ("the device
 *    computes non-finite values where the CPU does not"); non-finite there too: a real non-finite
 *    step, left to the usual skip.
 * On the CPU, or in a data-parallel run: returns st. */
af_status af_tr_device_step(struct af_tr_loop *L, af_tr_step *S, af_status st);
/* A device failure (AF_ERR_DEVICE) of step rs.step + 1 (during NULL) or of `during` ("the
 * evaluation", "saving best/") after step rs.step: with "auto" the run goes on on the CPU from the
 * last good checkpoint (rewound: the caller continues its loop), AF_OK; else the error naming the
 * checkpoint. Any other status is returned as is. */
af_status af_tr_device_failed(struct af_tr_loop *L, af_status st, const char *during);

/* ---- trainer_step.c ---- */
/* One classification optimizer step (global step L->rs.step): its micro-batches through
 * af_lora_trainer_accumulate_batch (dropout keyed by the micro-batch index within the epoch), then
 * af_lora_trainer_step. *finite 0: skipped (non-finite loss or gradient; L->nf_where says where). */
af_status af_tr_train_step(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr, int64_t *n_step_out);
/* One causal-LM optimizer step: grad_scale 1 / (target tokens of the whole step) (transformers
 * PR #34191); loss = Σ token losses / N, acc = mean token accuracy, *n_tok_out the step's tokens. */
af_status af_tr_train_step_lm(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr,
                              int64_t *n_step_out, int64_t *n_tok_out);

/* One preference optimizer step (global step L->rs.step): `batch` pairs per micro-batch
 * (af_lora_trainer_accumulate_pref_batch with scale pairs / pairs of the step, so the gradient is
 * that of the mean loss over the step's pairs); loss = that mean, acc = rewards/accuracies, L->pm
 * the step's metrics (means over its pairs). */
af_status af_tr_train_step_pref(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr,
                                int64_t *n_step_out, int64_t *n_tok_out);
/* ---- trainer_pref.c ---- */
/* Preference runs, before the first step: the validation batcher (L->bt_val); the reference
 * log-probabilities of the validation pairs and (precompute-ref, the default) of the training pairs
 * into L->ref_* (not orpo), logged with their time. Errors: AF_ERR_NOMEM, af_tr_pref_pack's. */
af_status af_tr_pref_setup(loop *L);
/* Pairs idx[0..m) (m <= max(batch, eval batch)) of the preference set ds packed by bt into *b
 * (borrowed from bt and L), with the reference log-probabilities of cache_c / cache_r (by pair
 * index) or, NULL, computed now with the adapter off; orpo: none. Errors: those of af_batcher_pack
 * and af_lora_trainer_pref_ref. */
af_status af_tr_pref_pack(loop *L, af_batcher *bt, const int32_t *idx, int32_t m, const double *cache_c,
                          const double *cache_r, af_pref_batch *b);

/* ---- ckpt_check.c: a checkpoint is never trusted blindly ---- */
#define AF_CKPT_STATE_FILE "trainer_state.safetensors"
#define AF_CKPT_CONFIG_FILE "train_config.json"
#define AF_CKPT_N_FILES 5
/* The files of a checkpoint directory, as its manifest lists them: the adapter's three, the
 * trainer state, the settings. */
extern const char *const af_ckpt_files[AF_CKPT_N_FILES];
/* The newest checkpoint-M next to `ckpt` (M below ckpt's step) whose files verify, into out
 * ("" when none). af_last_error() is kept. */
void af_tr_older_good(const char *ckpt, char *out, size_t cap);
/* Record "<what>; cannot resume from CKPT: resume from <older good> instead ..., or start the run
 * again (--overwrite)" with the kind AF_ERROR_KIND_CHECKPOINT (af_last_error_kind) and return st. */
af_status af_tr_ckpt_fail(af_status st, const char *ckpt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Verify ckpt/manifest.json (every file of af_ckpt_files that exists must be listed and match).
 * No manifest: *present = 0 and AF_OK for a checkpoint written before manifests existed, an error
 * when its trainer state says it was written with one. Errors carry af_tr_ckpt_fail's advice. */
af_status af_tr_ckpt_verify(const char *ckpt, int *present);
/* The values of a loaded trainer state: P, M finite, V finite and >= 0 ([t->lay.n_total] each),
 * counters consistent with each other and the run (step <= total, adam_t <= step, ...), EMAs and
 * elapsed finite, world_size (metadata, NULL when absent) a process count, the directory name
 * checkpoint-N equal to the step. Errors (AF_ERR_FORMAT) name the file, the field and the element. */
af_status af_tr_check_state(const af_trainer *t, const char *ckpt, const float *P, const float *M, const float *V,
                            const af_run_state *rs, const char *world_size);
/* The checkpoint's adapter loads onto the run's layout (af_adapter_load: shapes, finite) and
 * equals the trainer state's params P bit for bit (LoRA A/B, head weight). */
af_status af_tr_check_ckpt_adapter(const af_trainer *t, const char *ckpt, const float *P);
/* config_json as a checkpoint stores it in train_config.json: the paths of model, train, val and a
 * labels file recorded under "checkpoint_paths" (settings_internal.h) both absolute and relative
 * to OUTPUT_DIR/NAME. Malloc'ed; NULL when out of memory. */
char *af_tr_ckpt_config_json(const char *config_json, const char *output_dir, const char *name);

/* ---- trainer_ckpt.c ---- */
/* "checkpoint-N" -> N, else -1. */
int64_t af_tr_ckpt_step(const char *name);
/* Whether `dir` holds artifacts of a run (metrics.jsonl, run.json, checkpoint-*, best, final);
 * `what` receives a short list for messages. */
int af_tr_dir_has_run(const char *dir, char *what, size_t cap);
/* Remove the run artifacts from `dir` (and stale hidden temporaries). Errors: AF_ERR_IO. */
af_status af_tr_clear_run(const char *dir);
/* Remove the hidden temporaries a killed run left in `dir` (".NAME.tmp-*", ".NAME.old-*",
 * ".curves.png.tmp"; see af_tr_save_dir, af_tr_rotate, fsutil.h). Called when a run resumes in
 * `dir`, so a second process must not be writing into the same directory. Errors: AF_ERR_IO. */
af_status af_tr_clear_stale(const char *dir);
/* Write adapter (+ state when rs != NULL) to OUT/<name> atomically (temp dir, rename/exchange). */
af_status af_tr_save_dir(const af_trainer *t, const char *name, const float *P, const float *M, const float *V,
                         const af_run_state *rs, const char *selected_by);
/* Delete the oldest checkpoint-N beyond save_total_limit. */
void af_tr_rotate(const af_trainer *t);
/* Load trainer_state.safetensors of `ckpt` into P, M, V, *rs after checking it matches `t`. */
af_status af_tr_load_state(const af_trainer *t, const char *ckpt, float *P, float *M, float *V, af_run_state *rs);
/* Keep only metrics.jsonl lines with step <= `step` (rewritten atomically). Missing file: OK. */
af_status af_tr_truncate_metrics(const char *out_dir, int64_t step);
/* curves.png from metrics.jsonl with gnuplot; prints one line to `log` either way. */
void af_tr_plot(const char *out_dir, FILE *log);
/* OUT/run.json: the resolved configuration and the plan. Errors: AF_ERR_IO, AF_ERR_NOMEM. */
af_status af_tr_write_run_json(const af_trainer *t);
/* OUT/eval.json (atomically): the metrics of the validation evaluation at `step` (per-class table,
 * confusion matrix: af_metrics_to_json), read by the web page of `afinar serve --runs`. */
af_status af_tr_write_eval_json(const af_trainer *t, const af_metrics *m, int64_t step);
/* Output directory: derived from the checkpoint when not given (*owned_out then owns it), locked
 * for this run first (run_lock.h; *lock_fd: release with af_run_unlock, also after an error; -1
 * when not taken); another run there is refused unless overwrite or resuming in place (rank 0
 * only: `writer`). */
af_status af_tr_prepare_output(af_trainer *t, const char *ckpt, int writer, char **owned_out, int *lock_fd);

#endif /* AF_TRAINER_INTERNAL_H */
