/*
 * trainer_pref.c — the preference tasks' part of the training loop (`afinar train --task dpo|orpo`;
 * docs/PREFERENCE.md): a micro-batch of pairs packed with its reference log-probabilities, and the
 * reference log-probabilities of every pair computed once before the first step. The step itself is
 * trainer_step.c's (af_tr_train_step_pref), the evaluation trainer_run.c's. See trainer_internal.h.
 */
#include "train/trainer_internal.h"

#include <string.h>

af_status af_tr_pref_pack(loop *L, af_batcher *bt, const int32_t *idx, int32_t m, const double *cache_c,
                          const double *cache_r, af_pref_batch *b) {
    for (int32_t k = 0; k < m; k++) L->pidx[2 * k] = 2 * idx[k], L->pidx[2 * k + 1] = 2 * idx[k] + 1;
    af_packed_batch pb;
    AF_TRY(af_batcher_pack(bt, L->pidx, 2 * m, &pb));
    *b = (af_pref_batch){pb.tokens, pb.seq_start, pb.targets, m, NULL, NULL};
    if (L->t->po.type == AF_PREF_ORPO) return AF_OK; /* no reference model */
    b->ref_c = L->prc, b->ref_r = L->prr;
    if (!cache_c) return af_lora_trainer_pref_ref(L->lt, b, L->prc, L->prr);
    for (int32_t k = 0; k < m; k++) L->prc[k] = cache_c[idx[k]], L->prr[k] = cache_r[idx[k]];
    return AF_OK;
}

/* Reference log-probabilities (the base model: the adapter off) of every pair of ds, in batches of
 * `batch` pairs, into *c, *r [pairs] (allocated). */
static af_status pref_ref_cache(loop *L, af_batcher *bt, const af_dataset *ds, double **c, double **r) {
    const int32_t np = ds->n / 2, B = L->t->o->batch < AF_PREF_MAX_EVAL_BATCH ? L->t->o->batch : AF_PREF_MAX_EVAL_BATCH;
    *c = af_malloc(sizeof(double) * (size_t)np);
    *r = af_malloc(sizeof(double) * (size_t)np);
    if (!*c || !*r) return af_fail(AF_ERR_NOMEM, "trainer: out of memory (reference log-probabilities)");
    int32_t idx[AF_PREF_MAX_EVAL_BATCH];
    for (int32_t i0 = 0, m; i0 < np; i0 += m) {
        m = np - i0 < B ? np - i0 : B;
        for (int32_t k = 0; k < m; k++) idx[k] = i0 + k;
        af_pref_batch b;
        AF_TRY(af_tr_pref_pack(L, bt, idx, m, NULL, NULL, &b));
        memcpy(*c + i0, L->prc, sizeof(double) * (size_t)m);
        memcpy(*r + i0, L->prr, sizeof(double) * (size_t)m);
    }
    return AF_OK;
}

/* Preference runs, before the first step: the validation batcher; the reference log-probabilities of
 * the validation pairs and (precompute-ref, the default) of the training pairs, computed once: the
 * base is frozen, so they never change (orpo: no reference). */
af_status af_tr_pref_setup(loop *L) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    if (t->val) AF_TRY(af_batcher_new(t->val, NULL, t->val->n, 2, &L->bt_val));
    if (t->po.type == AF_PREF_ORPO) return AF_OK;
    const double t0 = af_time_sec();
    if (o->precompute_ref != 0) AF_TRY(pref_ref_cache(L, L->bt, t->train, &L->ref_tc, &L->ref_tr));
    if (t->val) AF_TRY(pref_ref_cache(L, L->bt_val, t->val, &L->ref_vc, &L->ref_vr));
    if (t->log && L->writer && (L->ref_tc || L->ref_vc)) {
        fprintf(t->log, "reference log-probabilities (adapter off): %d training + %d validation pairs in %.1f s%s\n",
                L->ref_tc ? (int)(t->train->n / 2) : 0, t->val ? (int)(t->val->n / 2) : 0, af_time_sec() - t0,
                L->ref_tc ? "" : " (training pairs: computed in every step, --no-precompute-ref)");
        fflush(t->log);
    }
    return AF_OK;
}

