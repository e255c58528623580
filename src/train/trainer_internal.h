/*
 * trainer_internal.h — state shared by trainer.c (setup, report), trainer_run.c (the loop) and
 * trainer_ckpt.c (checkpoints, output directory, metrics log, plot). Not part of any API. The loop
 * takes its optimizer steps with the public af_lora_trainer (train/api_internal.h).
 */
#ifndef AF_TRAINER_INTERNAL_H
#define AF_TRAINER_INTERNAL_H

#include "train/api_internal.h" /* the optimizer step (af_lora_trainer); af_tr_nonfinite_tensor */
#include "train/recipe.h"
#include "train/trainer.h"

struct af_trainer {
    af_trainer_opts o;                 /* copy; strings borrowed from the caller */
    af_ctx *ctx;                       /* owned: the run's context (trainer.c make_ctx) */
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
    af_param_layout lay;
    int have_lay;
    float *class_w;                    /* [num_classes] or NULL (uniform) */
    af_diag_list diags;
    int64_t n_micro;                   /* micro-batches per epoch */
    int64_t spe;                       /* optimizer steps per epoch */
    int64_t total;                     /* optimizer steps of the run */
    int64_t warmup;                    /* warm-up steps */
    int64_t max_mb_tokens;             /* tokens of the largest possible micro-batch */
    size_t mem_need, mem_ram; /* estimated peak; limit (RAM, cgroup or --memory-limit) */
    const char *mem_what;     /* which limit mem_ram is (static string) */
    int64_t n_model_params;
    int ran;
    /* causal LM (o.task == AF_TASK_CAUSAL_LM) */
    int lm;                            /* 1: causal-LM run (no head; next-token loss) */
    int packing;                       /* 1: micro-batches = best-fit-decreasing bins of `budget` tokens */
    int64_t budget;                    /* packing: tokens per micro-batch (batch x max_seq_len) */
    /* the automatic recipe (o.recipe == AF_RECIPE_AUTO; trainer_recipe.c) and the time budget */
    af_recipe recipe;
    int have_recipe;                   /* 1: recipe holds the choices applied to o */
    char layers_spec[24];              /* o.lora_layers when the recipe chose it ("all", "topK") */
    char *config_owned;                /* o.config_json with the recipe's choices added (owned) */
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

/* ---- trainer_recipe.c ---- */
/* The automatic recipe on a trainer whose data and statistics are loaded (before the layout and
 * the plan): choose, apply to t->o (only what o.given does not mark), truncate the data to the
 * chosen max_seq_len, recompute the statistics. No-op for AF_RECIPE_FIXED. */
af_status af_tr_recipe_apply(af_trainer *t);
/* After the plan: the evaluation interval, the settings record (t->config_owned) . */
af_status af_tr_recipe_finish(af_trainer *t);
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
/* Time budget: the run's new length when the steps measured so far (`done` steps in `step_s` seconds
 * each, evaluations of `eval_s` seconds every `eval_every` steps) cannot finish `t->total` steps in
 * `left` seconds (keeping `reserve` for the last evaluation and saves); records it as max-steps in
 * t->config_owned. Returns the new total (t->total when it fits). */
int64_t af_tr_budget_replan(af_trainer *t, int64_t done, double step_s, double eval_s, double left, double reserve);

/* ---- trainer_ckpt.c ---- */
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

#endif /* AF_TRAINER_INTERNAL_H */
