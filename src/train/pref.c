/*
 * pref.c — preference losses (DPO sigmoid, IPO, ORPO) and their step on the training engine (pref.h).
 * Formulas: pref.h; their derivatives below are exact (checked by finite differences in
 * tests/test_pref.c) and the losses, rewards and LoRA gradients are checked against TRL.
 */
#include "train/pref.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* log σ(x), stable for large |x|. */
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

af_status af_pref_loss(const af_pref_opts *o, const af_pref_logps *lp, int32_t n, double *loss, double *d_c,
                       double *d_r, af_pref_metrics *m) {
    if (!o || !lp || !loss || n < 1) return af_fail(AF_ERR_INVALID_ARG, "af_pref_loss: NULL argument or n < 1");
    if (!(o->beta > 0) || !isfinite(o->beta)) return af_fail(AF_ERR_INVALID_ARG, "preference beta %g: must be > 0", o->beta);
    if (!(o->label_smoothing >= 0 && o->label_smoothing < 0.5))
        return af_fail(AF_ERR_INVALID_ARG, "label_smoothing %g: must be in [0, 0.5)", o->label_smoothing);
    if (o->type != AF_PREF_SIGMOID && o->type != AF_PREF_IPO && o->type != AF_PREF_ORPO)
        return af_fail(AF_ERR_INVALID_ARG, "unknown preference loss type %d", (int)o->type);
    for (int32_t i = 0; i < n; i++) {
        const af_pref_logps *p = &lp[i];
        if (p->nc < 1 || p->nr < 1) return af_fail(AF_ERR_INVALID_ARG, "pair %d: a completion without tokens", i);
        if (!isfinite(p->c) || !isfinite(p->r) || (o->type != AF_PREF_ORPO && (!isfinite(p->c0) || !isfinite(p->r0))))
            return af_fail(AF_ERR_INVALID_ARG, "pair %d: a non-finite log-probability", i);
        if (o->type == AF_PREF_ORPO && (p->c >= 0 || p->r >= 0))
            return af_fail(AF_ERR_INVALID_ARG, "pair %d: log-probability >= 0 (log(1 - p) undefined for ORPO)", i);
    }
    const double b = o->beta, eps = o->label_smoothing, inv_n = 1.0 / (double)n;
    af_pref_metrics M;
    memset(&M, 0, sizeof M);
    double L = 0;
    for (int32_t i = 0; i < n; i++) {
        const af_pref_logps *p = &lp[i];
        double dc = 0, dr = 0, rc = 0, rr = 0;
        if (o->type == AF_PREF_SIGMOID) {
            const double z = b * ((p->c - p->r) - (p->c0 - p->r0));
            L += (-(1 - eps) * log_sigmoid(z) - eps * log_sigmoid(-z)) * inv_n;
            const double dz = (-(1 - eps) * sigmoid(-z) + eps * sigmoid(z)) * inv_n;
            dc = b * dz, dr = -b * dz;
            rc = b * (p->c - p->c0), rr = b * (p->r - p->r0);
        } else if (o->type == AF_PREF_IPO) {
            const double ac = p->c / (double)p->nc, ar = p->r / (double)p->nr;
            const double a0c = p->c0 / (double)p->nc, a0r = p->r0 / (double)p->nr;
            const double z = (ac - ar) - (a0c - a0r), t = z - 1.0 / (2.0 * b);
            L += t * t * inv_n;
            const double dz = 2.0 * t * inv_n;
            dc = dz / (double)p->nc, dr = -dz / (double)p->nr;
            rc = b * (p->c - p->c0), rr = b * (p->r - p->r0); /* TRL: rewards of the summed log-ratios */
        } else { /* ORPO */
            const double ac = p->c / (double)p->nc, ar = p->r / (double)p->nr;
            /* log(1 - e^x) = log(-expm1(x)) for x < 0 */
            const double lo = (ac - ar) - (log(-expm1(ac)) - log(-expm1(ar)));
            L += -b * log_sigmoid(lo) * inv_n;
            /* d lo / d ac = 1 + e^ac / (1 - e^ac) = 1 / (1 - e^ac) = -1 / expm1(ac) */
            const double dlo = -b * sigmoid(-lo) * inv_n, dac = -1.0 / expm1(ac), dar = 1.0 / expm1(ar);
            dc = dlo * dac / (double)p->nc, dr = dlo * dar / (double)p->nr;
            rc = b * ac, rr = b * ar; /* the NLL term is af_pref_step's (a plain causal-LM loss) */
        }
        if (d_c) d_c[i] = dc;
        if (d_r) d_r[i] = dr;
        M.reward_chosen += rc * inv_n;
        M.reward_rejected += rr * inv_n;
        M.reward_accuracy += (rc > rr ? 1.0 : 0.0) * inv_n;
        M.reward_margin += (rc - rr) * inv_n;
        M.logp_chosen += p->c * inv_n;
        M.logp_rejected += p->r * inv_n;
    }
    M.loss = L;
    *loss = L;
    if (m) *m = M;
    return AF_OK;
}

/* Sequence s of the batch as a one-sample af_batch (positions from 0). */
static af_batch one_seq(const af_pref_batch *b, int32_t s, int32_t *ss2) {
    const int32_t a = b->seq_start[s], e = b->seq_start[s + 1];
    ss2[0] = 0, ss2[1] = e - a;
    af_batch x = {b->tokens + a, ss2, 1, (int64_t)(e - a), NULL, NULL, b->targets + a};
    return x;
}

static af_status check_batch(const af_pref_batch *b) {
    if (!b || !b->tokens || !b->seq_start || !b->targets || b->n_pairs < 1)
        return af_fail(AF_ERR_INVALID_ARG, "preference batch: NULL array or no pair");
    for (int32_t s = 0; s < 2 * b->n_pairs; s++)
        if (b->seq_start[s + 1] <= b->seq_start[s])
            return af_fail(AF_ERR_INVALID_ARG, "preference batch: sequence %d is empty", s);
    return AF_OK;
}

/* Log-probability (−loss_sum) and completion tokens of sequence s under parameters P (forward only). */
static af_status seq_logp(af_engine *e, const float *P, const af_pref_batch *b, int32_t s, const af_step_opts *so,
                          double *logp, int64_t *nt) {
    int32_t ss2[2];
    const af_batch x = one_seq(b, s, ss2);
    af_lm_loss r;
    AF_TRY(af_engine_lm_step(e, P, NULL, &x, so, 1.0f, &r));
    if (r.n_targets < 1)
        return af_fail(AF_ERR_INVALID_ARG, "preference pair %d: the %s completion has no target token (prompt too long?)",
                       s / 2, s % 2 ? "rejected" : "chosen");
    *logp = -r.loss_sum;
    *nt = r.n_targets;
    return AF_OK;
}

af_status af_pref_ref_logps(af_engine *e, const float *zero, const af_pref_batch *b, double *ref_c, double *ref_r) {
    if (!e || !zero || !ref_c || !ref_r) return af_fail(AF_ERR_INVALID_ARG, "af_pref_ref_logps: NULL argument");
    AF_TRY(check_batch(b));
    const af_step_opts so = {AF_POOL_MEAN, NULL, 0, 0, 0};
    for (int32_t i = 0; i < b->n_pairs; i++) {
        int64_t nt;
        AF_TRY(seq_logp(e, zero, b, 2 * i, &so, &ref_c[i], &nt));
        AF_TRY(seq_logp(e, zero, b, 2 * i + 1, &so, &ref_r[i], &nt));
    }
    return AF_OK;
}

af_status af_pref_step(af_engine *e, const float *P, float *G, const af_pref_batch *b, const af_step_opts *so,
                       const af_pref_opts *po, float scale, af_pref_metrics *m) {
    if (!e || !P || !so || !po) return af_fail(AF_ERR_INVALID_ARG, "af_pref_step: NULL argument");
    AF_TRY(check_batch(b));
    if (po->type != AF_PREF_ORPO && (!b->ref_c || !b->ref_r))
        return af_fail(AF_ERR_INVALID_ARG, "af_pref_step: reference log-probabilities missing");
    const int32_t n = b->n_pairs;
    af_step_opts fo = *so;
    fo.train = 0; /* no dropout: the gradient is taken of the log-probabilities the loss saw */
    af_pref_logps *lp = calloc((size_t)n, sizeof *lp);
    double *dc = calloc((size_t)n, sizeof *dc), *dr = calloc((size_t)n, sizeof *dr);
    af_status st = lp && dc && dr ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; st == AF_OK && i < n; i++) {
        st = seq_logp(e, P, b, 2 * i, &fo, &lp[i].c, &lp[i].nc);
        if (st == AF_OK) st = seq_logp(e, P, b, 2 * i + 1, &fo, &lp[i].r, &lp[i].nr);
        if (st == AF_OK && po->type != AF_PREF_ORPO) lp[i].c0 = b->ref_c[i], lp[i].r0 = b->ref_r[i];
    }
    double loss = 0;
    af_pref_metrics M;
    int bad = 0; /* a non-finite log-probability (orpo: one >= 0, log(1 - p) undefined): no loss, no gradient */
    for (int32_t i = 0; st == AF_OK && i < n; i++)
        bad |= !isfinite(lp[i].c) || !isfinite(lp[i].r) ||
               (po->type == AF_PREF_ORPO ? lp[i].c >= 0 || lp[i].r >= 0 : !isfinite(lp[i].c0) || !isfinite(lp[i].r0));
    if (st == AF_OK && bad) {
        memset(&M, 0, sizeof M);
        M.loss = NAN;
        if (m) *m = M;
        free(lp), free(dc), free(dr);
        return AF_OK;
    }
    if (st == AF_OK) st = af_pref_loss(po, lp, n, &loss, dc, dr, &M);
    /* ORPO's NLL: the token-mean cross-entropy of the chosen sequences over every position, prompt
     * included (TRL ORPOTrainer's cross_entropy_loss on the chosen input ids) */
    int32_t *full = NULL;
    if (st == AF_OK && po->type == AF_PREF_ORPO) {
        const int64_t nt = b->seq_start[2 * n];
        full = malloc(sizeof(int32_t) * (size_t)nt);
        if (!full) st = af_fail(AF_ERR_NOMEM, "out of memory");
        for (int64_t t = 0; full && t < nt; t++) full[t] = -1;
        int64_t count = 0;
        double nll = 0;
        for (int32_t i = 0; st == AF_OK && i < n; i++) {
            const int32_t a = b->seq_start[2 * i], e2 = b->seq_start[2 * i + 1];
            for (int32_t t = a; t + 1 < e2; t++) full[t] = b->tokens[t + 1];
            count += e2 - a - 1;
        }
        af_pref_batch fb = *b;
        fb.targets = full;
        for (int32_t i = 0; st == AF_OK && i < n; i++) {
            int32_t ss2[2];
            const af_batch x = one_seq(&fb, 2 * i, ss2);
            af_lm_loss r;
            st = af_engine_lm_step(e, P, G, &x, &fo, count > 0 ? (float)((double)scale / (double)count) : 0.0f, &r);
            nll += r.loss_sum;
        }
        if (count > 0) nll /= (double)count;
        M.nll = nll;
        M.loss += nll;
    }
    free(full);
    if (st == AF_OK && m) *m = M;
    /* ∂loss/∂θ = Σ_s ∂loss/∂logp_s · ∇logp_s, and the engine adds grad_scale · ∇loss_sum_s = −grad_scale · ∇logp_s */
    for (int32_t s = 0; G && st == AF_OK && s < 2 * n; s++) {
        const double d = s % 2 ? dr[s / 2] : dc[s / 2];
        int32_t ss2[2];
        const af_batch x = one_seq(b, s, ss2);
        af_lm_loss r;
        st = af_engine_lm_step(e, P, G, &x, &fo, (float)(-d * (double)scale), &r);
    }
    free(lp), free(dc), free(dr);
    return st;
}
