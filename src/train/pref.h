/*
 * pref.h — preference losses (DPO sigmoid, IPO, ORPO) and their step on the training engine.
 *
 * A preference pair is a prompt with a chosen and a rejected completion. Each side is one causal-LM
 * sequence (prompt + completion) whose targets are the completion tokens only (prompt positions -1),
 * so the engine's causal-LM loss_sum of a sequence is −logπ(completion | prompt) summed over its
 * completion tokens (nats). The reference log-probabilities are those of the frozen base model: LoRA
 * is applied unmerged, so the reference is the same walk with the identity adapter (every LoRA
 * parameter zero for plain LoRA; af_lora_identity_params for DoRA, PiSSA, OLoRA)
 * (af_pref_ref_logps), the way TRL evaluates a PEFT model's reference with the adapter disabled.
 *
 * Losses (mean over the n pairs of a batch; c, r: policy log-probabilities of chosen / rejected;
 * c0, r0: the reference's; |c|, |r|: completion token counts):
 *   sigmoid (DPO, Rafailov et al. 2023; TRL DPOTrainer loss_type "sigmoid" with label_smoothing ε,
 *            the conservative DPO of Mitchell 2023):
 *            z = β((c − r) − (c0 − r0)),  loss = −(1 − ε)·logσ(z) − ε·logσ(−z)
 *   ipo     (Azar et al. 2023; TRL loss_type "ipo": log-probabilities averaged over the completion):
 *            z = (c/|c| − r/|r|) − (c0/|c| − r0/|r|),  loss = (z − 1/(2β))²
 *   orpo    (Hong et al. 2024; TRL ORPOTrainer: no reference; ĉ = c/|c|, r̂ = r/|r|):
 *            log_odds = (ĉ − r̂) − (log(1 − e^ĉ) − log(1 − e^r̂)),
 *            loss = NLL − β·mean(logσ(log_odds)); NLL is the token-mean cross-entropy of the chosen
 *            sequences over every position, prompt included, as TRL's (af_pref_step adds it;
 *            af_pref_loss computes the odds-ratio term only)
 * Implicit rewards as TRL logs them: sigmoid and ipo β(c − c0), β(r − r0) (summed log-ratios);
 * orpo β·ĉ, β·r̂. Label smoothing ε on sigmoid is the conservative DPO of older TRL versions
 * (Mitchell 2023): −(1 − ε)·logσ(z) − ε·logσ(−z).
 */
#ifndef AF_PREF_H
#define AF_PREF_H

#include "train/engine.h"

typedef enum af_pref_type { AF_PREF_SIGMOID = 0, AF_PREF_IPO = 1, AF_PREF_ORPO = 2 } af_pref_type;

typedef struct af_pref_opts {
    af_pref_type type;
    double beta;            /* β (TRL's default 0.1), > 0 */
    double label_smoothing; /* ε in [0, 0.5), sigmoid only (TRL's default 0) */
} af_pref_opts;

/* Per-pair log-probabilities (nats, summed over the completion's tokens) and token counts. */
typedef struct af_pref_logps {
    double c, r;       /* policy: chosen, rejected */
    double c0, r0;     /* reference (ignored by orpo) */
    int64_t nc, nr;    /* completion tokens of chosen / rejected (>= 1) */
} af_pref_logps;

/* Batch metrics, means over the pairs (TRL's names in the comments). */
typedef struct af_pref_metrics {
    double loss;              /* the batch loss above */
    double reward_chosen;     /* rewards/chosen */
    double reward_rejected;   /* rewards/rejected */
    double reward_accuracy;   /* rewards/accuracies: fraction with reward_chosen > reward_rejected */
    double reward_margin;     /* rewards/margins */
    double logp_chosen;       /* logps/chosen (policy, summed over the completion) */
    double logp_rejected;     /* logps/rejected */
    double nll;               /* orpo: the NLL term (af_pref_step); else 0 */
} af_pref_metrics;

/* The batch loss of n pairs lp[n] under o, its metrics (*m, may be NULL), and the derivatives of the
 * loss with respect to each pair's policy log-probabilities: d_c[i] = ∂loss/∂c_i, d_r[i] = ∂loss/∂r_i
 * (may be NULL). Errors: AF_ERR_INVALID_ARG (n < 1, NULL lp/loss, β <= 0 or not finite, ε outside
 * [0, 0.5), a token count < 1, a non-finite log-probability, orpo with a log-probability >= 0 average,
 * where log(1 − e^x) is undefined). */
af_status af_pref_loss(const af_pref_opts *o, const af_pref_logps *lp, int32_t n, double *loss, double *d_c,
                       double *d_r, af_pref_metrics *m);

/* A batch of n pairs as 2n causal-LM sequences: sequence 2i is pair i's chosen side, 2i + 1 its
 * rejected side (prompt + completion tokens); targets as af_batch.targets (−1 on prompt positions). */
typedef struct af_pref_batch {
    const int32_t *tokens;    /* [seq_start[2n]] */
    const int32_t *seq_start; /* [2n + 1] */
    const int32_t *targets;   /* [seq_start[2n]] */
    int32_t n_pairs;
    const double *ref_c;      /* [n] reference log-probabilities (af_pref_ref_logps); NULL for orpo */
    const double *ref_r;      /* [n] */
} af_pref_batch;

/* Reference log-probabilities of each pair's chosen / rejected completion (ref_c[n], ref_r[n]): the
 * engine's causal-LM forward with the identity adapter (the frozen base model). `zero` is a caller's
 * buffer of the layout's n_total floats holding af_lora_identity_params (all 0 for plain LoRA; DoRA's
 * magnitudes are the weights' column norms, PiSSA / OLoRA's A, B their A0, B0). Errors: those of
 * af_engine_lm_step. */
af_status af_pref_ref_logps(af_engine *e, const float *zero, const af_pref_batch *b, double *ref_c, double *ref_r);

/* One preference micro-batch: the policy log-probabilities of the 2n sequences (forward), the loss
 * and its derivatives (af_pref_loss), then for each sequence the causal-LM backward ADDING
 * grad_scale_s · ∇(loss_sum_s) into G with grad_scale_s = −∂loss/∂logp_s · `scale` (so G receives
 * scale · ∇loss; pass scale = 1 / micro-batches per step to average). Dropout must be off in `so`
 * (the log-probabilities of the loss must be those the gradient is taken of: TRL disables dropout
 * for DPO by default). *m: the metrics. Sequences run one at a time (batches of one sample). G NULL:
 * forward only (the loss and metrics of an evaluation). A non-finite log-probability (orpo: one >= 0,
 * where log(1 − p) is undefined) gives m->loss NaN and adds nothing to G (the trainer skips the step).
 * Errors: AF_ERR_INVALID_ARG (NULL argument, n_pairs < 1, a side without a target token, so->train
 * with dropout), those of af_pref_loss and af_engine_lm_step. */
af_status af_pref_step(af_engine *e, const float *P, float *G, const af_pref_batch *b, const af_step_opts *so,
                       const af_pref_opts *po, float scale, af_pref_metrics *m);

#endif /* AF_PREF_H */
