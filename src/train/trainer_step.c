/* trainer_step.c — one optimizer step of the training loop (trainer_run.c): the step's micro-batches
 * (classification or causal LM), computed one gradient row each, gathered over data-parallel ranks,
 * summed in micro-batch order, and handed to the public trainer's optimizer step (af_lora_trainer,
 * api.c). Shares the loop's state (`loop`) through trainer_internal.h. */
#include "train/trainer_internal.h"

#include <math.h>
#include <string.h>

/* Micro-batch j of the current epoch of a classification step of n_step samples: accumulated with
 * grad_scale m / n_step (dropout keyed by j); st[]: its loss · m (the loss itself when not finite),
 * correct predictions, non-finite flag. */
static af_status micro_cls(loop *L, int64_t j, int64_t n_step, double st[DIST_STATS]) {
    af_trainer *t = L->t;
    const af_dataset *ds = t->train;
    const int32_t B = t->o->batch, C = t->num_classes;
    const int64_t i0 = j * B;
    const int32_t m = (int32_t)(ds->n - i0 < B ? ds->n - i0 : B);
    af_packed_batch pb;
    AF_TRY(af_batcher_pack(L->bt, L->perm + i0, m, &pb));
    af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, pb.labels, pb.multi_hot, pb.targets};
    double l = 0;
    AF_TRY(af_lora_trainer_accumulate_batch(L->lt, &b, (float)((double)m / (double)n_step),
                                            af_lora_trainer_micro_id(L->lt, j % t->o->grad_accum), &l, L->logits));
    memset(st, 0, sizeof(double) * DIST_STATS);
    if (!isfinite(l)) {
        st[ST_LOSS] = l;
        st[ST_NONFINITE] = 1;
        return AF_OK;
    }
    st[ST_LOSS] = l * m;
    int64_t correct = 0;
    for (int32_t i = 0; i < m; i++) {
        const float *x = L->logits + (size_t)i * C;
        if (pb.labels) {
            int32_t am = 0;
            for (int32_t c = 1; c < C; c++) am = x[c] > x[am] ? c : am;
            correct += am == pb.labels[i];
        } else {
            int ok = 1;
            for (int32_t c = 0; c < C; c++) ok &= (x[c] > 0) == (pb.multi_hot[(size_t)i * C + c] > 0.5f);
            correct += ok;
        }
    }
    st[ST_CORRECT] = (double)correct;
    return AF_OK;
}

static af_status micro_lm(loop *L, int64_t j, float gs, double st[DIST_STATS]);
static af_status micro_pref(loop *L, int64_t j, int64_t n_step, double st[DIST_STATS]);

/* The micro-batches [mb0, mb1) of this step — the one path of one process and of W data-parallel
 * ranks: the K = mb1 − mb0 micro-batches are split over the W ranks in contiguous blocks (rank r:
 * [mb0 + ⌊K·r/W⌋, mb0 + ⌊K·(r+1)/W⌋); one process: all of them); each micro-batch's gradient is
 * computed alone (from a zeroed gradient) into its row with its statistics; the ranks agree on
 * errors, gather every row to every rank, and each rank sums the rows in micro-batch order and hands
 * the sum to the optimizer (af_lora_trainer_apply_gradients). The sum's float additions happen in the
 * same order whatever W is, so one process (MPI or not) and W = 2, 4 ... give the same bits. The
 * statistics are folded in micro-batch order; a non-finite micro-batch skips the step (its loss is
 * the one reported). */
static af_status step_micro_batches(loop *L, int64_t mb0, int64_t mb1, int64_t n_step, float gs, double *lsum,
                                    int64_t *correct, int64_t *n_tok, int *finite) {
    const int64_t K = mb1 - mb0, n = L->t->lay.n_total, g = L->rs.step + 1;
    const int32_t W = L->world, r = L->rank;
    for (int32_t k = 0; k < W; k++) L->counts[k] = (int32_t)(K * (k + 1) / W - K * k / W);
    const int64_t a = mb0 + K * r / W, b = mb0 + K * (r + 1) / W;
    const double t0 = af_time_sec();
    af_status st = AF_OK;
    for (int64_t j = a; j < b && st == AF_OK; j++) {
        float *row = L->rows + (size_t)(j - mb0) * (size_t)L->row;
        double stt[DIST_STATS];
        af_lora_trainer_zero_grad(L->lt);
        st = L->t->pref ? micro_pref(L, j, n_step, stt) : L->t->lm ? micro_lm(L, j, gs, stt) : micro_cls(L, j, n_step, stt);
        if (st == AF_OK) st = af_lora_trainer_collect_gradients(L->lt, row, NULL, NULL);
        memcpy(row + n, stt, sizeof stt);
    }
    L->compute_s = af_time_sec() - t0;
    char msg[768] = "";
    if (st != AF_OK) snprintf(msg, sizeof msg, "%s", af_last_error());
    if (!L->dist) { /* one process: every row is here */
        if (st != AF_OK) return st;
    } else {
        int32_t bad = -1;
        AF_TRY(af_dist_agree(st != AF_OK, &bad, &L->wait));
        if (st != AF_OK) return af_fail(st, "%s", msg);
        if (bad >= 0)
            return af_fail(AF_ERR_IO, "rank %d failed in step %lld (its message is on its own output); stopping every "
                           "rank", (int)bad, (long long)g);
        AF_TRY(af_dist_allgather_rows(L->rows + (size_t)(a - mb0) * (size_t)L->row, L->rows, L->counts,
                                      sizeof(float) * (size_t)L->row, &L->comm));
        L->comm_bytes_all = K * (int64_t)sizeof(float) * L->row * (W - 1);
    }
    memcpy(L->gsum, L->rows, sizeof(float) * (size_t)n);
    for (int64_t k = 1; k < K; k++) {
        const float *x = L->rows + (size_t)k * (size_t)L->row;
        for (int64_t i = 0; i < n; i++) L->gsum[i] += x[i];
    }
    *finite = 1;
    memset(L->pref_sum, 0, sizeof L->pref_sum);
    L->nll_sum = 0;
    for (int64_t k = 0; k < K; k++) {
        double stt[DIST_STATS];
        memcpy(stt, L->rows + (size_t)k * (size_t)L->row + n, sizeof stt);
        if (n_tok) *n_tok += (int64_t)stt[ST_NTOK];
        if (stt[ST_NONFINITE] != 0) {
            *finite = 0;
            *lsum = stt[ST_LOSS];
            break;
        }
        *lsum += stt[ST_LOSS];
        *correct += llround(stt[ST_CORRECT]);
        for (int q = 0; q < 4; q++) L->pref_sum[q] += stt[ST_RC + q];
        L->nll_sum += stt[ST_NLL];
    }
    return af_lora_trainer_apply_gradients(L->lt, L->gsum, (int32_t)K, !*finite);
}

/* One optimizer step (global step rs.step): its micro-batches through af_lora_trainer_accumulate_batch
 * (dropout keyed by the micro-batch index within the epoch), then af_lora_trainer_step. */
af_status af_tr_train_step(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr,
                            int64_t *n_step_out) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const af_dataset *ds = t->train;
    const int64_t g = L->rs.step, e = g / t->spe, k = g % t->spe;
    const int32_t B = o->batch;
    if (af_lora_trainer_step_count(L->lt) != g)
        return af_fail(AF_ERR_INVALID_ARG, "trainer: internal error: step %lld, optimizer at step %lld", (long long)g,
                       (long long)af_lora_trainer_step_count(L->lt));
    if (L->perm_epoch != e) {
        af_shuffle_perm(L->perm, ds->n, o->seed, (uint64_t)e);
        L->perm_epoch = e;
    }
    const int64_t mb0 = k * o->grad_accum, mb1 = mb0 + o->grad_accum < t->n_micro ? mb0 + o->grad_accum : t->n_micro;
    const int64_t i_end = mb1 * B < ds->n ? mb1 * B : ds->n, n_step = i_end - mb0 * B;
    double lsum = 0;
    int64_t correct = 0;
    *finite = 1;
    AF_TRY(step_micro_batches(L, mb0, mb1, n_step, 0.0f, &lsum, &correct, NULL, finite));
    *loss = *finite ? lsum / (double)n_step : lsum;
    *acc = (double)correct / (double)n_step;
    *n_step_out = n_step;
    *lr = af_lr_at(o->schedule, (float)o->lr, (float)o->lr_min, g, t->warmup, t->total);
    af_status st = af_lora_trainer_step(L->lt, (float)*lr, gn);
    if (st != AF_OK && st != AF_ERR_RANGE) return st; /* AF_ERR_RANGE: skipped (non-finite loss or norm) */
    *finite = st == AF_OK;
    if (!*finite) snprintf(L->nf_where, sizeof L->nf_where, "%s", af_lora_trainer_nonfinite_where(L->lt));
    AF_TRY(af_lora_trainer_get_optim_state(L->lt, NULL, NULL, &L->rs.adam_t, NULL));
    return AF_OK;
}

/* Samples of micro-batch j of the current epoch: a packed bin, or `batch` samples of the shuffle. */
static void lm_micro(const loop *L, int64_t j, const int32_t **idx, int32_t *m) {
    const af_trainer *t = L->t;
    if (t->packing) {
        *idx = L->bin_idx + L->bin_off[j];
        *m = L->bin_off[j + 1] - L->bin_off[j];
    } else {
        const int64_t i0 = j * t->o->batch, n = t->train->n;
        *idx = L->perm + i0;
        *m = (int32_t)(n - i0 < t->o->batch ? n - i0 : t->o->batch);
    }
}

/* Causal-LM micro-batch j of the current epoch, accumulated with grad_scale gs (1 / the step's target
 * tokens); st[]: its loss sum, correct next-token predictions, tokens, non-finite flag. */
static af_status micro_lm(loop *L, int64_t j, float gs, double st[DIST_STATS]) {
    const int32_t *idx;
    int32_t m;
    lm_micro(L, j, &idx, &m);
    af_packed_batch pb;
    AF_TRY(af_batcher_pack(L->bt, idx, m, &pb));
    const af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, NULL, NULL, pb.targets};
    af_lm_loss r;
    AF_TRY(af_lora_trainer_accumulate_lm_batch(L->lt, &b, gs, af_lora_trainer_micro_id(L->lt, j % L->t->o->grad_accum), &r));
    memset(st, 0, sizeof(double) * DIST_STATS);
    st[ST_LOSS] = r.loss_sum;
    st[ST_CORRECT] = (double)r.n_correct;
    st[ST_NTOK] = (double)pb.n_tok;
    st[ST_NONFINITE] = !isfinite(r.loss_sum);
    return AF_OK;
}

/* Causal-LM optimizer step (global step rs.step): the epoch's micro-batches (shuffle, then packing),
 * the target tokens N of ALL the step's micro-batches counted first, each micro-batch accumulated with
 * grad_scale 1/N (so G = gradient of Σ token losses / N: transformers PR #34191), then
 * af_lora_trainer_step. loss = Σ token losses / N, acc = mean token accuracy. */
af_status af_tr_train_step_lm(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr,
                               int64_t *n_step_out, int64_t *n_tok_out) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const af_dataset *ds = t->train;
    const int64_t g = L->rs.step, e = g / t->spe, k = g % t->spe;
    if (af_lora_trainer_step_count(L->lt) != g)
        return af_fail(AF_ERR_INVALID_ARG, "trainer: internal error: step %lld, optimizer at step %lld", (long long)g,
                       (long long)af_lora_trainer_step_count(L->lt));
    if (L->perm_epoch != e) {
        af_shuffle_perm(L->perm, ds->n, o->seed, (uint64_t)e);
        if (t->packing) {
            int32_t nb = 0;
            uint64_t mix = o->seed ^ ((uint64_t)(e + 1) * 0xD1B54A32D192ED03ull);
            AF_TRY(af_pack_bfd(ds, L->perm, ds->n, t->budget, af_splitmix64(&mix), L->bin_idx, L->bin_off, &nb));
            if (nb != t->n_micro)
                return af_fail(AF_ERR_INVALID_ARG, "trainer: internal error: epoch %lld packs into %d micro-batches, "
                                                   "planned %lld", (long long)e, (int)nb, (long long)t->n_micro);
        }
        L->perm_epoch = e;
    }
    const int64_t mb0 = k * o->grad_accum, mb1 = mb0 + o->grad_accum < t->n_micro ? mb0 + o->grad_accum : t->n_micro;
    int64_t N = 0, n_step = 0;
    for (int64_t j = mb0; j < mb1; j++) {
        const int32_t *idx;
        int32_t m;
        lm_micro(L, j, &idx, &m);
        for (int32_t i = 0; i < m; i++) N += af_dataset_n_targets(ds, idx[i]);
        n_step += m;
    }
    const float gs = N > 0 ? (float)(1.0 / (double)N) : 0.0f;
    double lsum = 0;
    int64_t correct = 0, n_tok = 0;
    *finite = 1;
    AF_TRY(step_micro_batches(L, mb0, mb1, n_step, gs, &lsum, &correct, &n_tok, finite));
    *loss = !*finite ? lsum : N > 0 ? lsum / (double)N : 0.0;
    *acc = N > 0 ? (double)correct / (double)N : 0.0;
    *n_step_out = n_step;
    *n_tok_out = n_tok;
    *lr = af_lr_at(o->schedule, (float)o->lr, (float)o->lr_min, g, t->warmup, t->total);
    af_status st = af_lora_trainer_step(L->lt, (float)*lr, gn);
    if (st != AF_OK && st != AF_ERR_RANGE) return st;
    *finite = st == AF_OK;
    if (!*finite) snprintf(L->nf_where, sizeof L->nf_where, "%s", af_lora_trainer_nonfinite_where(L->lt));
    AF_TRY(af_lora_trainer_get_optim_state(L->lt, NULL, NULL, &L->rs.adam_t, NULL));
    return AF_OK;
}

/* ---- preference tuning ---- */

/* Preference micro-batch j of the current epoch: `batch` pairs of the shuffle, accumulated with scale
 * m / n_step (the step's mean over pairs); st[]: loss · m, rewards/accuracies · m (correct pairs),
 * tokens, non-finite flag, and the metric sums of pref_sum (· m). */
static af_status micro_pref(loop *L, int64_t j, int64_t n_step, double st[DIST_STATS]) {
    const af_trainer *t = L->t;
    const int64_t i0 = j * t->o->batch, np = t->train->n / 2;
    const int32_t m = (int32_t)(np - i0 < t->o->batch ? np - i0 : t->o->batch);
    af_pref_batch b;
    AF_TRY(af_tr_pref_pack(L, L->bt, L->perm + i0, m, L->ref_tc, L->ref_tr, &b));
    af_pref_metrics mt;
    AF_TRY(af_lora_trainer_accumulate_pref_batch(L->lt, &b, &t->po, (float)((double)m / (double)n_step),
                                                 af_lora_trainer_micro_id(L->lt, j % t->o->grad_accum), &mt));
    memset(st, 0, sizeof(double) * DIST_STATS);
    st[ST_NTOK] = (double)b.seq_start[2 * m];
    if (!isfinite(mt.loss)) {
        st[ST_LOSS] = mt.loss;
        st[ST_NONFINITE] = 1;
        return AF_OK;
    }
    st[ST_LOSS] = mt.loss * m;
    st[ST_CORRECT] = mt.reward_accuracy * m;
    st[ST_RC] = mt.reward_chosen * m, st[ST_RR] = mt.reward_rejected * m;
    st[ST_LPC] = mt.logp_chosen * m, st[ST_LPR] = mt.logp_rejected * m;
    st[ST_NLL] = mt.nll * m;
    return AF_OK;
}

af_status af_tr_train_step_pref(loop *L, int *finite, double *loss, double *acc, double *gn, double *lr,
                                int64_t *n_step_out, int64_t *n_tok_out) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const int32_t np = t->train->n / 2;
    const int64_t g = L->rs.step, e = g / t->spe, k = g % t->spe;
    if (af_lora_trainer_step_count(L->lt) != g)
        return af_fail(AF_ERR_INVALID_ARG, "trainer: internal error: step %lld, optimizer at step %lld", (long long)g,
                       (long long)af_lora_trainer_step_count(L->lt));
    if (L->perm_epoch != e) { /* the pairs' order of this epoch */
        af_shuffle_perm(L->perm, np, o->seed, (uint64_t)e);
        L->perm_epoch = e;
    }
    const int64_t mb0 = k * o->grad_accum, mb1 = mb0 + o->grad_accum < t->n_micro ? mb0 + o->grad_accum : t->n_micro;
    const int64_t i_end = mb1 * o->batch < np ? mb1 * o->batch : np, n_step = i_end - mb0 * o->batch;
    double lsum = 0;
    int64_t correct = 0, n_tok = 0;
    *finite = 1;
    AF_TRY(step_micro_batches(L, mb0, mb1, n_step, 0.0f, &lsum, &correct, &n_tok, finite));
    *loss = *finite ? lsum / (double)n_step : lsum;
    *acc = (double)correct / (double)n_step;
    *n_step_out = n_step;
    *n_tok_out = n_tok;
    const double inv = 1.0 / (double)n_step;
    L->pm = (af_pref_metrics){*loss, L->pref_sum[0] * inv, L->pref_sum[1] * inv, *acc,
                              (L->pref_sum[0] - L->pref_sum[1]) * inv, L->pref_sum[2] * inv, L->pref_sum[3] * inv,
                              L->nll_sum * inv};
    *lr = af_lr_at(o->schedule, (float)o->lr, (float)o->lr_min, g, t->warmup, t->total);
    af_status st = af_lora_trainer_step(L->lt, (float)*lr, gn);
    if (st != AF_OK && st != AF_ERR_RANGE) return st;
    *finite = st == AF_OK;
    if (!*finite) snprintf(L->nf_where, sizeof L->nf_where, "%s", af_lora_trainer_nonfinite_where(L->lt));
    AF_TRY(af_lora_trainer_get_optim_state(L->lt, NULL, NULL, &L->rs.adam_t, NULL));
    return AF_OK;
}
