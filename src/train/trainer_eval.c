/* trainer_eval.c — one evaluation of the training loop on the validation data (trainer_run.c
 * decides when): classification (accuracy, macro-F1, loss, ECE), causal LM (eval_loss, token
 * accuracy, perplexity), preference pairs (TRL's eval_rewards/..., eval_logps/...); the metric into
 * the run state (best so far, early stopping's patience count), a line of metrics.jsonl and of the log. */
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>

/* One evaluation's metric v into the run state: the best so far follows any gain (best/); the patience
 * count restarts only on a gain above the threshold --early-stopping-threshold (transformers'
 * EarlyStoppingCallback). lower: 1 when lower is better (eval loss). Returns 1 when v is the best so far. */
static int note_metric(loop *L, double v, int lower) {
    af_run_state *rs = &L->rs;
    const double was = rs->best;
    const int improved = lower ? isfinite(v) && !(was <= v) : !(was >= v); /* NaN best: first evaluation */
    const double gain = lower ? was - v : v - was;
    if (improved) {
        rs->best = v;
        rs->best_step = rs->step;
    }
    if (improved && (isnan(was) || gain > L->t->o->early_stopping_threshold)) rs->bad_evals = 0;
    else rs->bad_evals++;
    return improved;
}

/* Causal-LM evaluation: eval_loss (nats per target token), eval_mean_token_accuracy, perplexity;
 * the lowest eval_loss is the best. */
static af_status evaluate_lm(loop *L, int *improved) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    af_run_state *rs = &L->rs;
    af_lm_loss r;
    AF_TRY(af_lm_eval(L->eng, L->P, t->val, o->eval_batch > 0 ? o->eval_batch : o->batch, &r));
    const double vl = r.n_targets > 0 ? r.loss_sum / (double)r.n_targets : NAN;
    const double va = r.n_targets > 0 ? (double)r.n_correct / (double)r.n_targets : NAN;
    rs->last_eval_step = rs->step;
    rs->last_val_acc = va;
    rs->last_val_f1 = vl;
    *improved = note_metric(L, vl, 1);
    char line[512];
    snprintf(line, sizeof line,
             "{\"type\":\"eval\",\"split\":\"val\",\"step\":%lld,\"epoch\":%.6g,\"eval_loss\":%.9g,"
             "\"eval_mean_token_accuracy\":%.9g,\"perplexity\":%.9g,\"eval_num_tokens\":%lld}",
             (long long)rs->step, (double)rs->step / (double)t->spe, isfinite(vl) ? vl : -1.0, isfinite(va) ? va : -1.0,
             isfinite(vl) ? exp(vl) : -1.0, (long long)r.n_targets);
    af_tr_log_line(L, line);
    if (t->log) {
        af_tr_end_live(L);
        fprintf(t->log, "eval  step %lld (epoch %.2f): eval_loss %.4f  perplexity %.4g  mean_token_accuracy %.4f (%lld "
                        "target tokens)%s\n",
                (long long)rs->step, (double)rs->step / (double)t->spe, vl, exp(vl), va, (long long)r.n_targets,
                *improved ? "  (best so far)" : "");
        fflush(t->log);
    }
    return AF_OK;
}

/* Preference evaluation on the validation pairs (batches of --eval-batch pairs, forward only):
 * eval_loss (the task's loss; orpo with its NLL) and TRL's eval_rewards/... and eval_logps/...,
 * means over the pairs; the lowest eval_loss is the best. */
static af_status evaluate_pref(loop *L, int *improved) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    af_run_state *rs = &L->rs;
    const int32_t np = t->val->n / 2, eb = o->eval_batch > 0 ? o->eval_batch : o->batch;
    const af_step_opts so = {AF_POOL_MEAN, NULL, o->checkpointing != 0, 0, 0};
    double sum[8] = {0};
    int32_t idx[AF_PREF_MAX_EVAL_BATCH];
    for (int32_t i0 = 0, m; i0 < np; i0 += m) {
        m = np - i0 < eb ? np - i0 : eb;
        if (m > AF_PREF_MAX_EVAL_BATCH) m = AF_PREF_MAX_EVAL_BATCH;
        for (int32_t k = 0; k < m; k++) idx[k] = i0 + k;
        af_pref_batch b;
        AF_TRY(af_tr_pref_pack(L, L->bt_val, idx, m, L->ref_vc, L->ref_vr, &b));
        af_pref_metrics mt;
        AF_TRY(af_pref_step(L->eng, L->P, NULL, &b, &so, &t->po, 1.0f, &mt));
        const double v[8] = {mt.loss, mt.reward_chosen, mt.reward_rejected, mt.reward_accuracy, mt.reward_margin,
                             mt.logp_chosen, mt.logp_rejected, mt.nll};
        for (int q = 0; q < 8; q++) sum[q] += v[q] * m;
    }
    for (int q = 0; q < 8; q++) sum[q] /= np;
    const double vl = sum[0];
    rs->last_eval_step = rs->step;
    rs->last_val_acc = sum[3];
    rs->last_val_f1 = vl;
    *improved = note_metric(L, vl, 1);
    char line[768], nll[64] = "";
    if (t->po.type == AF_PREF_ORPO) snprintf(nll, sizeof nll, ",\"eval_nll_loss\":%.9g", sum[7]);
    snprintf(line, sizeof line,
             "{\"type\":\"eval\",\"split\":\"val\",\"step\":%lld,\"epoch\":%.6g,\"eval_loss\":%.9g,"
             "\"eval_rewards/chosen\":%.9g,\"eval_rewards/rejected\":%.9g,\"eval_rewards/accuracies\":%.9g,"
             "\"eval_rewards/margins\":%.9g,\"eval_logps/chosen\":%.9g,\"eval_logps/rejected\":%.9g%s,"
             "\"eval_pairs\":%d}",
             (long long)rs->step, (double)rs->step / (double)t->spe, isfinite(vl) ? vl : -1.0, sum[1], sum[2], sum[3],
             sum[4], sum[5], sum[6], nll, (int)np);
    af_tr_log_line(L, line);
    if (t->log) {
        af_tr_end_live(L);
        fprintf(t->log, "eval  step %lld (epoch %.2f): eval_loss %.4f  rewards/accuracies %.4f  rewards/margins %.4f  "
                        "rewards chosen %.4f / rejected %.4f (%d pairs)%s\n",
                (long long)rs->step, (double)rs->step / (double)t->spe, vl, sum[3], sum[4], sum[1], sum[2], (int)np,
                *improved ? "  (best so far)" : "");
        fflush(t->log);
    }
    return AF_OK;
}

/* Classification evaluation: accuracy, macro-F1, loss, ECE (eval.json); the highest macro-F1 is the best. */
static af_status evaluate_cls(loop *L, int *improved) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    af_run_state *rs = &L->rs;
    double vloss = NAN;
    AF_TRY(af_eval_probs(L->eng, L->P, &t->lay, t->val, o->eval_batch > 0 ? o->eval_batch : o->batch, o->pooling,
                         t->multi_label, L->vprobs, &vloss));
    af_metrics *m = NULL;
    AF_TRY(af_eval_metrics(t->val, L->vprobs, &m));
    rs->last_eval_step = rs->step;
    rs->last_val_acc = m->accuracy;
    rs->last_val_f1 = m->macro_f1;
    *improved = note_metric(L, m->macro_f1, 0);
    char line[512];
    snprintf(line, sizeof line,
             "{\"type\":\"eval\",\"split\":\"val\",\"step\":%lld,\"epoch\":%.6g,\"accuracy\":%.9g,\"macro_f1\":%.9g,"
             "\"loss\":%.9g,\"ece\":%.9g}",
             (long long)rs->step, (double)rs->step / (double)t->spe, m->accuracy, m->macro_f1,
             isfinite(vloss) ? vloss : -1.0, isfinite(m->ece) ? m->ece : -1.0);
    af_tr_log_line(L, line);
    if (L->writer && af_tr_write_eval_json(t, m, rs->step) != AF_OK && t->log) /* a view, not the run's state */
        fprintf(t->log, "warning: eval.json not written: %s\n", af_last_error());
    if (t->log) {
        af_tr_end_live(L);
        fprintf(t->log, "eval  step %lld (epoch %.2f): accuracy %.4f  macro-F1 %.4f  loss %.4f", (long long)rs->step,
                (double)rs->step / (double)t->spe, m->accuracy, m->macro_f1, vloss);
        if (isfinite(m->ece)) fprintf(t->log, "  ECE %.4f", m->ece);
        fprintf(t->log, "%s\n", *improved ? "  (best so far)" : "");
        fflush(t->log);
    }
    af_metrics_free(m);
    return AF_OK;
}

af_status af_tr_evaluate(loop *L, int *improved) {
    return L->t->pref ? evaluate_pref(L, improved) : L->t->lm ? evaluate_lm(L, improved) : evaluate_cls(L, improved);
}
