/*
 * recipe.h — the automatic recipe of `afinar train --recipe auto`: from the statistics of
 * the training data (the scan `afinar check` prints), choose what the user did not give: the number
 * of epochs, class weights, max_seq_len, the layers that carry LoRA, the warm-up and the evaluation
 * interval, within a compute budget (a default, or --time-budget MINUTES at a measured speed).
 * Pure functions of the statistics: no I/O, no model; tests/test_recipe.c checks them on synthetic
 * statistics. trainer.c applies the choices, prints them with their reasons and records them in the
 * run's settings (train_config.json), so a resume is exact and `check` shows them.
 *
 * The rules (constants below; sources in brackets; docs/RECIPE.md has the measurements):
 *   epochs (classification): E = ceil(3000 / N) samples seen, clamped to [1, 5]: small sets get more
 *     passes [own measurement: BBC News, 1,558 samples: 1 epoch 95.7% test accuracy; a 2,283-sample
 *     8-class set: 1 epoch 70.5%, 3 epochs + weights + 256 tokens 79.5% (measured on BBC News); Mosbach et al.
 *     2021, "On the Stability of Fine-tuning BERT": small data sets need more steps]. Above 20,000
 *     samples: 20,000 samples seen (E = 20000/N < 1: large sets see fewer than one pass). When the
 *     classes are imbalanced beyond 5:1 (max/min class count; single-label), at least 2 epochs and
 *     enough for the smallest class to be seen 300 times (capped at 5) [the epochs-imbalance
 *     diagnostic, hparams.h].
 *   epochs (causal LM): E = ceil(1,000,000 / target tokens), clamped to [1, 3] [1-3 epochs is the
 *     SFT practice: Stanford Alpaca 3 epochs, QLoRA (Dettmers et al. 2023) ~1-3 epochs; small sets
 *     more: LIMA (Zhou et al. 2023)].
 *   class weights: sqrt-inverse (w_c ∝ 1/sqrt(n_c), mean 1) when imbalance > 5:1 (single-label)
 *     [Cui et al. 2019, "Class-Balanced Loss Based on Effective Number of Samples": re-weighting
 *     between none and inverse frequency; Mahajan et al. 2018 square-root re-sampling; the
 *     measured gain]; otherwise uniform.
 *   max_seq_len (classification): the p95 token length rounded up to a multiple of 64, within
 *     [64, 512], capped by the model's context and by the memory limit (mem_tokens / batch);
 *     only the longest 5% are truncated [the seq-len diagnostics; Sun et al. 2019, "How to
 *     Fine-Tune BERT for Text Classification?": truncating long documents to their head works].
 *     The budget may shorten it, not below 128 (BBC News: 128-token heads give 95.7%).
 *     Causal LM: af_recipe_lm_max_seq_len (the p99 of the data, whatever --recipe), applied when
     the data are read; the budget then counts that length (it is in max_seq_len here).
 *   layers (classification): as many of the top layers as the budget allows, from the
 *     top 10 up to all (all layers is PEFT / QLoRA practice; the set gained 6 points from
 *     all layers; the top layers first because the backward stops at the lowest adapted layer and
 *     the layers below it run once per sample with the prefix cache). Causal LM: not chosen
 *     (all layers, the task default).
 *   LoRA dropout (causal LM, not given; decided in trainer_recipe.c around this plan): 0 when the
 *     run makes at most one pass over its data (no example is seen twice, so there is nothing for
 *     dropout to regularise [Srivastava et al. 2014: dropout against co-adaptation on repeated
 *     data]; PEFT's LoraConfig default is 0, unsloth's too), else the default 0.05 [QLoRA]. The
 *     masked inputs cost about a third of a SmolLM2 step (the masked LoRA input cannot share the
 *     frozen product's); measured on the headline job, 3 seeds (docs/RECIPE.md).
 *   learning rate (causal LM, --lr not given; decided in trainer_recipe.c with the dropout): 4e-4
 *     (AF_RECIPE_LM_ONE_PASS_LR) when the run makes at most one pass over its data, else the default
 *     2e-4 [QLoRA, Dettmers et al. 2023]. A short LoRA run's best learning rate is higher than a
 *     long one's [Schulman et al. 2025, "LoRA Without Regret": ~15x full fine-tuning's in short runs,
 *     ~10x in long ones]; the headline job's settings, which PyTorch + PEFT runs in bench/, use 4e-4.
 *     Measured: 1 epoch at 4e-4 against 2e-4, 3 seeds, SmolLM2-135M (two sets) and Gemma 3 270M:
 *     completion loss lower on all 9 seed pairs, ROUGE-L about even (+0.007, +0.0003, -0.005)
 *     (bench/sft_lr_seeds.sh; docs/RECIPE.md).
 *   gradient accumulation (causal LM, not given): 1, an optimizer step per packed micro-batch of
 *     --batch x max_seq_len tokens (~13 headline examples), about the 8 sequences per step of TRL's
 *     SFTConfig default (per_device_train_batch_size 8, gradient_accumulation_steps 1): twice the
 *     updates of the fixed default 2 in the same time, which a short or budgeted run needs (the
 *     headline job under a 5.1-minute budget: ROUGE-L 0.2675 vs 0.2528; docs/RECIPE.md).
 *   warm-up: 6% of the steps [RoBERTa's fine-tuning recipe, Liu et al. 2019] (= the fixed
 *     default, applied to the chosen length).
 *   evaluation: with validation data, at least 2 evaluations per run (every epoch when there are
 *     more epochs; one, at the end, when a time budget leaves less than a pass) so the best checkpoint can be picked [transformers Trainer's
 *     load_best_model_at_end with step evaluation; Prechelt 1998, "Early Stopping - But When?"].
 *     For early stopping, every quarter epoch (4 per epoch; 3 or 2 when the evaluations would cost more
 *     than a quarter of the training compute by af_recipe_eval_cost; never fewer than above).
 *   early stopping (with validation data, the epochs chosen or given, --eval-every not given, and at
 *     least patience + 2 evaluations): patience 2 evaluations (half an epoch at quarter-epoch
 *     evaluations) without a gain above the threshold: 1/n_val of macro-F1 (about one validation sample
 *     of a balanced set) or 0.005 nats of eval loss (causal LM, preference) [transformers'
 *     EarlyStoppingCallback early_stopping_patience / early_stopping_threshold; Prechelt 1998: stop
 *     after s successive strips without progress]; and the schedule wsd (warmup-stable-decay: constant
 *     lr, a linear cool-down over the last fifth), so that at the plateau the run is re-planned to end
 *     with a cool-down of a quarter of the steps done, then one last evaluation [Hu et al. 2024
 *     (MiniCPM); Hägele et al. 2024: the cool-down can start at any point and matches cosine]. A
 *     time budget that leaves one evaluation turns it off.
 * The compute budget (FLOPs, see af_recipe_cost): AF_RECIPE_DEFAULT_FLOPS, or --time-budget
 *   minutes x the measured speed. When the choices above cost more, they are given up in this
 *   order, each said in the output: (time budget: evaluations down to one, at the end) max_seq_len
 *   down to 128, layers down to the top 10, epochs down to 1, layers down to 1, max_seq_len down to
 *   64, then (time budget only) no evaluation when the validation data alone cost more than half
 *   the budget (n_evals 0: the last step is the best), then fewer than one pass.
 *   When the budget allows, layers grow up to all.
 * Every value the user gave (the `given` mask) is kept as given and the other choices are made
 * around it.
 */
#ifndef AF_RECIPE_H
#define AF_RECIPE_H

#include "afinar.h"
#include "afinar_app.h"

#include <stddef.h>
#include <stdint.h>

/* Default compute budget of --recipe auto without --time-budget: 1.0e14 FLOPs, about 1.6x the fixed
 * recipe's BBC News main job (6.2e13 by af_recipe_cost) and about 15 minutes of SmolLM2-135M
 * training on 2 quiet Zen 3 cores. */
#define AF_RECIPE_DEFAULT_FLOPS 1.0e14
/* The peak learning rate of a causal-LM run of at most one pass when --lr is not given (the
 * default AF_DEFAULT_LR_CAUSAL_LM, 2e-4, otherwise): see the rule above. */
#define AF_RECIPE_LM_ONE_PASS_LR 4e-4
/* The longest max_seq_len the recipe chooses (data are tokenized at this length, then truncated). */
#define AF_RECIPE_MAX_LEN 512

/* af_recipe_in.given bits: the settings the user gave (command line, --config, checkpoint); the same
 * bits as af_trainer_opts.given (include/afinar.h). */
enum {
    AF_RECIPE_GIVEN_LENGTH = AF_GIVEN_LENGTH,               /* --epochs or --max-steps */
    AF_RECIPE_GIVEN_CLASS_WEIGHTS = AF_GIVEN_CLASS_WEIGHTS, /* --class-weights */
    AF_RECIPE_GIVEN_MAX_SEQ_LEN = AF_GIVEN_MAX_SEQ_LEN,     /* --max-seq-len */
    AF_RECIPE_GIVEN_LAYERS = AF_GIVEN_LAYERS,               /* --lora-layers */
    AF_RECIPE_GIVEN_WARMUP = AF_GIVEN_WARMUP,               /* --warmup */
    AF_RECIPE_GIVEN_EVAL_EVERY = AF_GIVEN_EVAL_EVERY,       /* --eval-every */
    AF_RECIPE_GIVEN_SCHEDULE = AF_GIVEN_SCHEDULE,           /* --schedule */
    AF_RECIPE_GIVEN_PATIENCE = AF_GIVEN_PATIENCE,           /* --patience */
    AF_RECIPE_GIVEN_THRESHOLD = AF_GIVEN_THRESHOLD          /* --early-stopping-threshold */
};

/* What the rules read. Lengths are token counts BEFORE truncation, ascending (af_data_stats). */
typedef struct af_recipe_in {
    int64_t n;                     /* training samples (> 0) */
    const int32_t *sorted_len;     /* [n] ascending */
    int64_t n_val;                 /* validation samples (0: none) */
    const int32_t *val_sorted_len; /* [n_val] ascending, or NULL */
    int causal_lm;                 /* 1: causal-LM run */
    int preference;                /* 1: dpo / orpo run (causal_lm too): 1 epoch */
    int64_t n_targets;             /* causal LM: loss target tokens of the training set */
    int32_t num_classes;
    int multi_label;
    const int64_t *class_count;    /* [num_classes] samples (multi-label: positives) per class, or NULL */
    int32_t n_layers;              /* the model's layers */
    int32_t max_positions;         /* the model's context (<= 0: unknown) */
    double flops_token_layer;      /* forward FLOPs of one token through one layer (2 x its parameters) */
    int64_t hidden;                /* hidden size (the prefix cache stores [tokens, hidden] floats) */
    int64_t prefix_cache_bytes;    /* bytes of the prefix cache (0: off) */
    int64_t mem_tokens;            /* tokens per micro-batch the memory limit allows (<= 0: no cap) */
    int32_t batch, grad_accum;     /* samples per micro-batch, micro-batches per step */
    double budget_flops;           /* compute budget (<= 0: AF_RECIPE_DEFAULT_FLOPS) */
    int time_budget;               /* 1: the budget comes from --time-budget (fewer than one pass allowed) */
    unsigned given;                /* AF_RECIPE_GIVEN_* */
    /* the given values (read for the bits set in `given`; the others are chosen) */
    double epochs;                 /* given epochs (0 with max_steps) */
    int64_t max_steps;             /* given optimizer steps (0: none) */
    int32_t max_seq_len;           /* given or task-default max_seq_len (causal LM: always kept) */
    int32_t layers;                /* given number of adapted layers from the top (causal LM: kept) */
    int32_t patience;              /* given --patience (read when AF_RECIPE_GIVEN_PATIENCE is set) */
} af_recipe_in;

/* The choices, each with its reason (one line, no trailing newline; "" for a value given). */
typedef struct af_recipe {
    double epochs;                 /* passes (may be < 1 under a time budget); 0 when max_steps was given */
    double epochs_rule;            /* the passes the rules asked before the budget (a time budget's run may
                                      grow back towards it when it measures itself faster than planned) */
    int32_t max_seq_len;
    int32_t layers;                /* adapted layers counted from the top (n_layers: all) */
    char class_weights[16];        /* "uniform" or "sqrt-inverse" */
    double warmup_ratio;           /* 0.06 */
    int32_t n_evals;               /* evaluations per run wanted (0: no validation data, or none affordable) */
    int32_t evals_per_epoch;       /* the cadence of n_evals (4: every quarter epoch; 0: not per epoch) */
    int early_stop;                /* 1: early stopping chosen (patience, threshold and the wsd schedule below,
                                      each applied unless given) */
    int32_t patience;              /* evaluations without a gain above es_threshold (early_stop) */
    double es_threshold;           /* the least gain that counts (macro-F1; eval loss for a causal LM) */
    double cost_flops, budget_flops; /* cost_flops: training with the budget's evaluations (af_recipe_cost of the
                                      fitted plan with max(2, ceil(epochs)) evaluations, all layers each) */
    double eval_flops;             /* the n_evals evaluations by af_recipe_eval_cost */
    char why_epochs[256], why_class_weights[192], why_max_seq_len[384], why_layers[256], why_warmup[128],
        why_eval[256], why_stop[384];
    char gave_up[384];             /* what the budget took away ("" when nothing) */
} af_recipe;

/* Σ min(len_i, L) over n ascending lengths (a length 0 counts as 1 token: the BOS stand-in). */
int64_t af_recipe_tokens(const int32_t *sorted_len, int64_t n, int32_t L);

/* Estimated FLOPs of a classification run (causal LM: no frozen layers below, all layers adapted):
 *   f · [ T(L) · (2·K·E + (n − K)·(cache ? 1 : E)) + n_evals · Tval(L) · n_layers ]
 * f = flops_token_layer, T(L) = af_recipe_tokens of the training data, K adapted layers (the
 * forward and the input-gradient backward of an adapted layer ≈ 2 forwards: the frozen weights
 * need no weight gradient), the n − K layers below run forward only, once per sample when their
 * output fits the prefix cache (T(L) · hidden · 4 bytes) and every epoch otherwise; evaluations
 * run every layer forward over the validation tokens. */
double af_recipe_cost(const af_recipe_in *in, double epochs, int32_t L, int32_t layers, int32_t n_evals);

/* FLOPs of n_evals evaluations on the validation data (Tv(L) validation tokens, f as above): the
 * first runs every layer; the later ones run only the K adapted layers when the frozen layers below
 * them are kept by the prefix cache (the training and validation outputs, (T(L) + Tv(L)) · hidden · 4
 * bytes, fit prefix_cache_bytes; engine_prefix.c keys them by the sample's tokens), else every layer:
 *   f · Tv(L) · (n_layers + (n_evals − 1) · (cache ? K : n_layers)).  0 when n_evals <= 0. */
double af_recipe_eval_cost(const af_recipe_in *in, int32_t L, int32_t layers, int32_t n_evals);

/* Choose (see the header comment). `out` is overwritten. Returns 0; -1 on invalid input
 * (n <= 0, sorted_len NULL, n_layers < 1, flops_token_layer <= 0). */
int af_recipe_choose(const af_recipe_in *in, af_recipe *out);

/* Evaluation interval in optimizer steps: ceil(total / n_evals), at most steps_per_epoch (when
 * > 0: at least one evaluation per epoch), at least 1; 0 when n_evals <= 0 or total <= 0. */
int64_t af_recipe_eval_every(int32_t n_evals, int64_t total, int64_t steps_per_epoch);

/* max_seq_len of a causal-LM run the user gave none for (the task's default, whatever --recipe):
 * the p99 token length of the training examples (nearest rank, lengths before truncation: the
 * whole rendered example) rounded up to a multiple of 64, capped by the model's context
 * (max_positions > 0) and by the memory limit (mem_tokens > 0: a packed micro-batch holds batch x L
 * tokens, so L <= mem_tokens / batch, rounded down to a multiple of 64, at least 64). So at most 1%
 * of the examples are longer than L unless a cap binds [TRL's SFTTrainer truncates at max_length
 * (default 1024) and keeps every example; the p99 keeps the micro-batch from growing to the single
 * longest example]. Returns L >= 1 and writes its reason (one line) to why[0..cap) and the
 * examples longer than L to *n_longer (may be NULL); 0 on invalid input (n < 1, sorted_len NULL,
 * batch < 1). */
int32_t af_recipe_lm_max_seq_len(const int32_t *sorted_len, int64_t n, int32_t max_positions, int64_t mem_tokens,
                                 int32_t batch, int64_t *n_longer, char *why, size_t cap);

#endif /* AF_RECIPE_H */
