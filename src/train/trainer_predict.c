/* trainer_predict.c — evaluation probabilities and metrics of the training loop, and af_lm_evaluate
 * (see trainer.h; the classifier of `afinar eval` / `predict` built on them: app/classifier.c). */
#include "train/trainer.h"

#include "kernels/backend.h"
#include "lora/adapter_io.h"
#include "formats/jsonl.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

af_status af_eval_probs(af_engine *e, const float *P, const af_param_layout *lay, const af_dataset *ds,
                        int32_t batch, af_pooling pooling, int multi_label, float *probs, double *loss) {
    if (!e || !P || !lay || !ds || !probs || batch < 1)
        return af_fail(AF_ERR_INVALID_ARG, "evaluation: NULL argument or batch < 1");
    const int32_t C = lay->num_classes;
    af_batcher *bt = NULL;
    AF_TRY(af_batcher_new(ds, NULL, ds->n, batch, &bt));
    float *logits = af_malloc(sizeof(float) * (size_t)batch * (size_t)C * 2);
    if (!logits) {
        af_batcher_free(bt);
        return af_fail(AF_ERR_NOMEM, "evaluation: out of memory");
    }
    float *dl = logits + (size_t)batch * (size_t)C;
    af_step_opts so = {pooling, NULL, 0, 0, 0};
    double lsum = 0;
    int64_t lcount = 0;
    af_status st = AF_OK;
    int32_t done = 0;
    af_packed_batch pb;
    int r;
    while ((r = af_batcher_next(bt, &pb)) == 1) {
        if (af_ctx_interrupted(af_engine_ctx(e))) { /* a signal: stop between batches, nothing half-done */
            st = af_fail(AF_ERR_INTERRUPTED, "stopped after %d of %d samples", (int)done, (int)ds->n);
            break;
        }
        af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, NULL, NULL, NULL};
        st = af_engine_forward(e, P, &b, &so, logits);
        if (st != AF_OK) break;
        float *out = probs + (size_t)done * (size_t)C;
        for (int32_t i = 0; i < pb.n_samples; i++) {
            const float *x = logits + (size_t)i * C;
            float *p = out + (size_t)i * C;
            if (multi_label) {
                for (int32_t c = 0; c < C; c++) p[c] = (float)(1.0 / (1.0 + exp(-(double)x[c])));
            } else {
                double mx = x[0], s = 0;
                for (int32_t c = 1; c < C; c++) mx = x[c] > mx ? x[c] : mx;
                for (int32_t c = 0; c < C; c++) s += exp((double)x[c] - mx);
                for (int32_t c = 0; c < C; c++) p[c] = (float)(exp((double)x[c] - mx) / s);
            }
        }
        if (loss) {
            if (multi_label) {
                if (!pb.multi_hot) continue;
                lsum += af_bce_loss(dl, logits, pb.multi_hot, pb.n_samples, C) * pb.n_samples;
                lcount += pb.n_samples;
            } else {
                for (int32_t i = 0; i < pb.n_samples; i++) {
                    int32_t y = pb.labels ? pb.labels[i] : -1;
                    if (y < 0 || y >= C) continue;
                    lsum += af_ce_loss(dl, NULL, logits + (size_t)i * C, &y, NULL, 1, C);
                    lcount++;
                }
            }
        }
        done += pb.n_samples;
    }
    if (r < 0 && st == AF_OK) st = AF_ERR_NOMEM;
    if (loss) *loss = lcount ? lsum / (double)lcount : NAN;
    free(logits);
    af_batcher_free(bt);
    return st;
}

af_status af_lm_eval(af_engine *e, const float *P, const af_dataset *ds, int32_t batch, af_lm_loss *out) {
    memset(out, 0, sizeof *out);
    if (!e || !P || !ds || batch < 1) return af_fail(AF_ERR_INVALID_ARG, "LM evaluation: NULL argument or batch < 1");
    af_batcher *bt = NULL;
    AF_TRY(af_batcher_new(ds, NULL, ds->n, batch, &bt));
    af_packed_batch pb;
    af_status st = AF_OK;
    int r;
    const af_step_opts so = {AF_POOL_MEAN, NULL, 0, 0, 0};
    while (st == AF_OK && (r = af_batcher_next(bt, &pb)) != 0) {
        if (r < 0) {
            st = AF_ERR_NOMEM;
            break;
        }
        if (af_ctx_interrupted(af_engine_ctx(e))) {
            st = af_fail(AF_ERR_INTERRUPTED, "stopped after %lld target tokens", (long long)out->n_targets);
            break;
        }
        const af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, NULL, NULL, pb.targets};
        af_lm_loss l;
        st = af_engine_lm_step(e, P, NULL, &b, &so, 0.0f, &l);
        out->loss_sum += l.loss_sum;
        out->n_targets += l.n_targets;
        out->n_correct += l.n_correct;
    }
    af_batcher_free(bt);
    return st;
}

af_status af_eval_metrics(const af_dataset *ds, const float *probs, af_metrics **out) {
    const int32_t C = ds->num_classes;
    if (ds->multi_label) {
        float *pp = af_malloc(sizeof(float) * (size_t)ds->n * (size_t)C);
        if (!pp) return af_fail(AF_ERR_NOMEM, "metrics: out of memory");
        memcpy(pp, probs, sizeof(float) * (size_t)ds->n * (size_t)C);
        af_status st = af_metrics_compute_multi(pp, ds->multi_hot, ds->n, C, 0.5f, out);
        free(pp);
        return st;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < ds->n; i++) m += ds->labels[i] >= 0;
    if (m == 0) return af_fail(AF_ERR_INVALID_ARG, "%s: no labelled sample to evaluate", ds->path ? ds->path : "data");
    if (m == ds->n) return af_metrics_compute(probs, ds->labels, ds->n, C, out);
    float *pp = af_malloc(sizeof(float) * (size_t)m * (size_t)C);
    int32_t *ll = af_malloc(sizeof(int32_t) * (size_t)m);
    if (!pp || !ll) {
        free(pp);
        free(ll);
        return af_fail(AF_ERR_NOMEM, "metrics: out of memory");
    }
    int32_t k = 0;
    for (int32_t i = 0; i < ds->n; i++)
        if (ds->labels[i] >= 0) {
            memcpy(pp + (size_t)k * C, probs + (size_t)i * C, sizeof(float) * (size_t)C);
            ll[k++] = ds->labels[i];
        }
    af_status st = af_metrics_compute(pp, ll, m, C, out);
    free(pp);
    free(ll);
    return st;
}

af_status af_lm_evaluate(const af_ctx *ctx, const af_model *model, const char *adapter_dir, float lora_scale,
                         const af_dataset *ds, int32_t batch, af_lm_eval_result *out) {
    if (!model || !ds || !out || batch < 1)
        return af_fail(AF_ERR_INVALID_ARG, "af_lm_evaluate: NULL argument or batch < 1");
    memset(out, 0, sizeof *out);
    if (!ds->target_mask)
        return af_fail(AF_ERR_INVALID_ARG, "%s: not a causal-LM data set (no loss targets)", ds->path ? ds->path : "data");
    af_param_layout lay;
    memset(&lay, 0, sizeof lay);
    float *P = NULL;
    af_engine *eng = NULL;
    af_status st;
    if (adapter_dir) {
        af_adapter_info info;
        st = af_adapter_read_info(adapter_dir, &info);
        if (st != AF_OK) return st;
        st = af_adapter_load_for_model(adapter_dir, &info, model, 0.0f, 0, AF_ADAPTER_IGNORE_HEAD, &lay, &P);
        af_adapter_info_free(&info);
        if (st != AF_OK) return st;
        /* the correction s·B·A scales with B: --lora-scale multiplies every B */
        if (lora_scale != 1.0f)
            for (int32_t l = 0; l < lay.n_layers; l++)
                for (int p = 0; p < AF_PROJ_COUNT; p++) {
                    const af_lora_slot *sl = af_lora_slot_at(&lay, l, (af_proj)p);
                    if (sl->b_off < 0) continue;
                    for (int64_t k = 0; k < sl->out * lay.lora.r; k++) P[sl->b_off + k] *= lora_scale;
                }
    } else {
        /* base model: a rank-1 q_proj layout whose parameters are all zero adds exactly 0 */
        af_lora_config lc = {1, 1.0f, 0.0f, 0, 1u << AF_PROJ_Q, 0, 0};
        st = af_param_layout_init(&lay, model, &lc, 0);
        if (st != AF_OK) return st;
        P = af_calloc((size_t)lay.n_total, sizeof(float));
        if (!P) {
            af_param_layout_free(&lay);
            return af_fail(AF_ERR_NOMEM, "LM evaluation: out of memory");
        }
    }
    st = af_engine_new(ctx, model, &lay, &eng);
    af_lm_loss l;
    memset(&l, 0, sizeof l);
    const af_ctx *ec = ctx ? ctx : model->ctx;
    float *dP = NULL; /* the parameters on the engine's device */
    if (st == AF_OK) {
        dP = af_be(ec)->alloc(ec, sizeof(float) * (size_t)lay.n_total);
        st = dP ? af_be(ec)->upload(ec, dP, P, sizeof(float) * (size_t)lay.n_total) : AF_ERR_NOMEM;
    }
    if (st == AF_OK) st = af_lm_eval(eng, dP, ds, batch, &l);
    if (dP) af_be(ec)->free(ec, dP);
    if (st == AF_OK) {
        out->n_examples = ds->n;
        out->n_targets = l.n_targets;
        out->loss = l.n_targets ? l.loss_sum / (double)l.n_targets : NAN;
        out->perplexity = exp(out->loss);
        out->mean_token_accuracy = l.n_targets ? (double)l.n_correct / (double)l.n_targets : NAN;
    }
    af_engine_free(eng);
    free(P);
    af_param_layout_free(&lay);
    return st;
}
