/*
 * hparams.h — hyper-parameter diagnostics for a LoRA classification run: before training, compare
 * the configuration with the data statistics and with published practice, and say what to change.
 *
 * Rules (code: severity — when it fires; the source):
 *   lr-invalid, batch-invalid, accum-invalid, rank-invalid, alpha-invalid, seq-len-invalid,
 *   length-invalid, classes-invalid, labels-range, data-empty: error — refuse to train
 *     (lr <= 0 or non-finite; batch < 1; accumulation < 1; r < 1; alpha <= 0 or non-finite;
 *      max_seq_len < 1; neither epochs > 0 nor max_steps > 0; num_classes < 2; the data have
 *      more classes than the configuration; no (labelled) sample).
 *   lr-model-size: warn — lr differs by MORE than 3x (either way) from 2e-4 for models of at most
 *     13B parameters, 1e-4 above (QLoRA, Dettmers et al. 2023, "QLoRA: Efficient Finetuning of
 *     Quantized LLMs", Appendix B, hyper-parameter table: 2e-4 for 7B/13B, 1e-4 for 33B/65B).
 *     Unknown size (n_model_params <= 0) counts as <= 13B.
 *   effective-batch: warn — batch x accumulation < half or > twice the QLoRA batch (16 for <= 13B,
 *     32 for <= 33B, 64 above; same table); says which --grad-accum reaches it. Packed causal-LM
 *     runs (step_samples > 0) count the samples a step actually holds (a packed micro-batch holds
 *     batch x max_seq_len tokens, i.e. many short samples), not --batch.
 *   lora-alpha: info when alpha/r != 2 but within [0.5, 8], warn outside — alpha = 2r is common
 *     practice (S. Raschka 2023, "Practical Tips for Finetuning LLMs Using LoRA"); states the scale
 *     alpha/r (alpha/sqrt(r) with rsLoRA, Kalajdzievski 2023).
 *   grad-clip: warn — max_grad_norm <= 0 (clipping off; QLoRA used 0.3, 1.0 is the transformers
 *     Trainer default).
 *   seq-len-long: warn — max_seq_len > 2 x p99 token length. The suggested length L' is p99 rounded
 *     UP to a multiple of 64; the message gives the drop of the worst-case per-sample attention cost
 *     (∝ L², L capped by the longest sample) and activation memory (∝ L), and of the total attention
 *     cost over the data set (Σ min(len, L)², exact from the sorted lengths). Batches are packed, so
 *     short samples cost the same either way: only the longest ones gain.
 *   seq-len-short: warn — max_seq_len < p95: says how many samples are truncated.
 *   Both seq-len rules are info, not warn, when the automatic recipe chose max_seq_len
 *   (max_seq_len_why): the message gives the recipe's reason and what the flag would change.
 *   epochs-imbalance: warn — fewer than 2 epochs (epochs, or max_steps x effective batch / N) with
 *     class imbalance (max/min class count) above 5:1: says how often the minority class is seen.
 *   class-weights: info — imbalance above 5:1 and uniform class weights.
 *   class-empty: warn — a class has no training sample.   empty-texts: info — some texts gave no token.
 * Boundaries are strict: exactly 3x, exactly 2 x p99, exactly 5:1 do not fire.
 */
#ifndef AF_HPARAMS_H
#define AF_HPARAMS_H

#include "afinar_app.h"
#include "train/data.h"

#include <stdio.h>

typedef struct af_train_config {
    double lr;
    int32_t lora_r;
    double lora_alpha;
    int use_rslora;
    int32_t batch_size;       /* samples per micro-batch */
    int32_t grad_accum;       /* micro-batches per optimizer step */
    double max_grad_norm;     /* <= 0: clipping off */
    double epochs;            /* used when max_steps <= 0 */
    int64_t max_steps;        /* optimizer steps; > 0 overrides epochs */
    int32_t max_seq_len;
    int64_t n_model_params;   /* parameters of the base model (<= 0: unknown) */
    int32_t num_classes;
    const char *const *label_names; /* [num_classes] for messages, or NULL */
    const char *class_weights;      /* spec as given to af_class_weights, NULL = "uniform" */
    int causal_lm;                  /* 1: causal-LM run (no classes: the class rules are skipped) */
    int preference;                 /* 1: dpo / orpo run (causal_lm too): lr-model-size is skipped (its
                                       QLoRA rate is an SFT rate) */
    double lr_min;                  /* floor of the decay (--lr-min); must not exceed lr */
    int lr_decays;                  /* 1: a cosine/linear schedule that uses lr_min */
    int32_t max_positions;          /* the model's positions (context_length); <= 0: unknown */
    int has_val;                    /* validation data given (--val or --val-split) */
    int64_t patience;               /* --patience (0: off) */
    int64_t eval_every;             /* --eval-every (0: per epoch) */
    int64_t warmup_steps, total_steps; /* the plan (total <= 0: unknown) */
    double step_samples;            /* packed causal LM: mean samples per optimizer step (samples / steps per
                                       epoch); 0: batch x grad_accum */
    const char *max_seq_len_why;    /* the automatic recipe chose max_seq_len: its reason (the seq-len rules
                                       then say so at info level instead of asking to override it); NULL:
                                       given by --max-seq-len or a task default */
} af_train_config;

/* af_diag_severity, af_diag, af_diag_list: include/afinar.h ("Training runs"). */

/* Append the diagnostics for `cfg` against the training data statistics `stats` (may be NULL:
 * data-empty error) to `out` (zero-initialise it first; free with af_diag_list_free). Flags in
 * messages follow the CLI: --lr, --batch, --grad-accum, --lora-r, --lora-alpha, --max-grad-norm,
 * --epochs, --max-seq-len, --class-weights. Errors: AF_ERR_NOMEM only. */
af_status af_hparams_check(const af_train_config *cfg, const af_data_stats *stats, af_diag_list *out);

/* One line per diagnostic: "warn  [code] message -> recommendation". */
void af_diag_print(const af_diag_list *l, FILE *fp);
/* 1 when any diagnostic is an error (training must not start). */
int af_diag_has_error(const af_diag_list *l);
/* Index of the first diagnostic with `code`, or -1. */
int32_t af_diag_find(const af_diag_list *l, const char *code);
void af_diag_list_free(af_diag_list *l);

/* "info" / "warn" / "error". */
const char *af_diag_severity_name(af_diag_severity s);

#endif /* AF_HPARAMS_H */
