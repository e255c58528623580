/* trainer_predict.c — evaluation probabilities, metrics, and a trained adapter as a classifier
 * (see trainer.h). */
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

void af_classifier_free(af_classifier *c) {
    if (!c) return;
    af_engine_free(c->eng);
    if (c->ctx) af_be(c->ctx)->free(c->ctx, c->P);
    af_param_layout_free(&c->lay);
    if (c->label_names) af_labels_free(c->label_names, c->num_classes);
    af_model_free(c->model_owned);
    free(c);
}

af_status af_classifier_load(const af_ctx *ctx, const char *model_path, const af_model *model, const char *adapter_dir,
                             af_classifier **out) {
    if (!out || !adapter_dir || (!model && !model_path))
        return af_fail(AF_ERR_INVALID_ARG, "classifier: NULL argument");
    *out = NULL;
    af_classifier *c = af_calloc(1, sizeof *c);
    if (!c) return af_fail(AF_ERR_NOMEM, "classifier: out of memory");
    af_adapter_info info;
    memset(&info, 0, sizeof info);
    af_status st = af_adapter_read_info(adapter_dir, &info);
    if (st != AF_OK) goto fail;
    if (info.num_classes < 1) {
        st = af_fail(AF_ERR_INVALID_ARG, "%s: the adapter has no classification head (score.weight)", adapter_dir);
        goto fail;
    }
    if (!model) {
        st = af_model_load(ctx, model_path, &c->model_owned);
        if (st != AF_OK) goto fail;
        model = c->model_owned;
    }
    c->model = model;
    c->ctx = ctx ? ctx : model->ctx;
    const af_model_config *mc = af_model_get_config(model);
    if (info.hidden != mc->hidden_size || info.n_layers > mc->num_hidden_layers) {
        st = af_fail(AF_ERR_INVALID_ARG,
                     "%s: adapter made for a model with hidden size %d and >= %d layers, but %s has hidden "
                     "size %d and %d layers",
                     adapter_dir, info.hidden, info.n_layers, model_path ? model_path : "the model",
                     mc->hidden_size, mc->num_hidden_layers);
        goto fail;
    }
    c->num_classes = info.num_classes;
    c->pooling = AF_POOL_LAST; /* transformers *ForSequenceClassification */
    c->max_seq_len = 512;
    const cJSON *a = info.afinar;
    if (!a) /* a PEFT/transformers adapter, or an afinar adapter that lost its afinar.json: say so */
        snprintf(c->note, sizeof c->note,
                 "%s/afinar.json is missing: assuming a PEFT/transformers adapter (last-token pooling, max_seq_len 512, "
                 "class ids as labels); copy the afinar.json written by 'afinar train' next to it if it came from afinar",
                 adapter_dir);
    if (a) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "pooling");
        if (cJSON_IsString(v)) {
            if (!strcmp(v->valuestring, "mean")) c->pooling = AF_POOL_MEAN;
            else if (!strcmp(v->valuestring, "last")) c->pooling = AF_POOL_LAST;
            else {
                st = af_fail(AF_ERR_FORMAT, "%s/afinar.json: field 'pooling': unknown value \"%s\" (mean, last)",
                             adapter_dir, v->valuestring);
                goto fail;
            }
        } else if (v) {
            st = af_fail(AF_ERR_FORMAT, "%s/afinar.json: field 'pooling': expected \"mean\" or \"last\"", adapter_dir);
            goto fail;
        } else {
            snprintf(c->note, sizeof c->note,
                     "%s/afinar.json has no 'pooling' field: assuming last-token pooling (transformers)", adapter_dir);
        }
        v = cJSON_GetObjectItemCaseSensitive(a, "max_seq_len");
        if (v && !(cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 1e7 && v->valuedouble == floor(v->valuedouble))) {
            st = af_fail(AF_ERR_FORMAT, "%s/afinar.json: field 'max_seq_len': expected an integer in [1, 10000000]",
                         adapter_dir);
            goto fail;
        }
        if (v) c->max_seq_len = (int32_t)v->valuedouble;
        v = cJSON_GetObjectItemCaseSensitive(a, "multi_label");
        c->multi_label = cJSON_IsTrue(v);
        v = cJSON_GetObjectItemCaseSensitive(a, "labels");
        if (v && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != c->num_classes)) {
            st = af_fail(AF_ERR_FORMAT,
                         "%s/afinar.json: field 'labels': %s%d names but the head (score.weight) has %d classes: the "
                         "label list does not belong to this adapter",
                         adapter_dir, cJSON_IsArray(v) ? "" : "not a list, ", cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0,
                         c->num_classes);
            goto fail;
        }
        if (cJSON_IsArray(v)) {
            c->label_names = af_calloc((size_t)c->num_classes, sizeof(char *));
            if (!c->label_names) {
                st = af_fail(AF_ERR_NOMEM, "classifier: out of memory");
                goto fail;
            }
            int32_t i = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, v) {
                if (!cJSON_IsString(e) || !e->valuestring[0]) {
                    st = af_fail(AF_ERR_FORMAT, "%s/afinar.json: field 'labels': entry %d is not a non-empty string",
                                 adapter_dir, i);
                    goto fail;
                }
                c->label_names[i] = strdup(e->valuestring);
                if (!c->label_names[i]) {
                    st = af_fail(AF_ERR_NOMEM, "classifier: out of memory");
                    goto fail;
                }
                i++;
            }
        }
    }
    float *hostP = NULL; /* the adapter as read, then on the engine's device */
    st = af_adapter_load_for_model(adapter_dir, &info, model, info.dropout, c->num_classes, 0, &c->lay, &hostP);
    if (st == AF_OK) {
        const size_t bytes = sizeof(float) * (size_t)c->lay.n_total;
        c->P = af_be(c->ctx)->alloc(c->ctx, bytes);
        st = c->P ? af_be(c->ctx)->upload(c->ctx, c->P, hostP, bytes) : AF_ERR_NOMEM;
    }
    free(hostP);
    if (st != AF_OK) goto fail;
    st = af_engine_new(c->ctx, model, &c->lay, &c->eng);
    if (st != AF_OK) goto fail;
    af_adapter_info_free(&info);
    *out = c;
    return AF_OK;
fail:
    af_adapter_info_free(&info);
    af_classifier_free(c);
    return st;
}

af_status af_classifier_probs(af_classifier *c, const af_dataset *ds, int32_t batch, float *probs) {
    if (!c || !ds) return af_fail(AF_ERR_INVALID_ARG, "classifier: NULL argument");
    if (ds->num_classes > c->num_classes || (ds->multi_label && !c->multi_label))
        return af_fail(AF_ERR_INVALID_ARG, "%s: data have %d %s classes, the adapter %d %s",
                       ds->path ? ds->path : "data", ds->num_classes, ds->multi_label ? "multi-label" : "single-label",
                       c->num_classes, c->multi_label ? "multi-label" : "single-label");
    return af_eval_probs(c->eng, c->P, &c->lay, ds, batch, c->pooling, c->multi_label, probs, NULL);
}

const af_model *af_classifier_model(const af_classifier *c) { return c ? c->model : NULL; }
int32_t af_classifier_num_classes(const af_classifier *c) { return c ? c->num_classes : 0; }
int af_classifier_multi_label(const af_classifier *c) { return c ? c->multi_label : 0; }
int32_t af_classifier_max_seq_len(const af_classifier *c) { return c ? c->max_seq_len : 0; }
const char *af_classifier_note(const af_classifier *c) { return c && c->note[0] ? c->note : NULL; }
const char *const *af_classifier_label_names(const af_classifier *c) {
    return c ? (const char *const *)c->label_names : NULL;
}

af_status af_classifier_prediction_json(const af_classifier *c, const float *p, double thr, char **out) {
    if (!c || !p || !out) return af_fail(AF_ERR_INVALID_ARG, "af_classifier_prediction_json: NULL argument");
    *out = NULL;
    cJSON *o = cJSON_CreateObject();
    const int32_t C = c->num_classes;
    char idbuf[32];
    int ok = o != NULL;
    if (ok && c->multi_label) {
        cJSON *names = cJSON_AddArrayToObject(o, "labels"), *ids = cJSON_AddArrayToObject(o, "label_ids");
        ok = names && ids;
        for (int32_t k = 0; ok && k < C; k++)
            if (p[k] >= thr) {
                snprintf(idbuf, sizeof idbuf, "%d", k);
                ok = cJSON_AddItemToArray(names, cJSON_CreateString(c->label_names ? c->label_names[k] : idbuf)) &&
                     cJSON_AddItemToArray(ids, cJSON_CreateNumber(k));
            }
    } else if (ok) {
        int32_t am = 0;
        for (int32_t k = 1; k < C; k++) am = p[k] > p[am] ? k : am;
        snprintf(idbuf, sizeof idbuf, "%d", am);
        ok = cJSON_AddStringToObject(o, "label", c->label_names ? c->label_names[am] : idbuf) &&
             cJSON_AddNumberToObject(o, "label_id", am);
    }
    cJSON *pa = ok ? cJSON_AddArrayToObject(o, "probs") : NULL;
    ok = pa != NULL;
    for (int32_t k = 0; ok && k < C; k++) {
        char b[32];
        snprintf(b, sizeof b, "%.6g", (double)p[k]); /* 6 significant digits, then the shortest JSON form */
        ok = cJSON_AddItemToArray(pa, cJSON_CreateNumber(strtod(b, NULL)));
    }
    if (ok) *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return *out ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
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
        af_lora_config lc = {1, 1.0f, 0.0f, 0, 1u << AF_PROJ_Q, 0};
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
