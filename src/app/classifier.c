/* classifier.c — a trained adapter loaded for prediction (af_classifier_*, afinar_app.h): what
 * `afinar eval`, `afinar predict` and the server's classification run, on the training code's
 * evaluation probabilities (train/trainer_predict.c af_eval_probs). */
#include "afinar_app.h"
#include "train/trainer.h"

#include "kernels/backend.h"
#include "lora/adapter_io.h"
#include "formats/jsonl.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    AF_TRY(af_eval_probs(c->eng, c->P, &c->lay, ds, batch, c->pooling, c->multi_label, probs, NULL));
    /* never a prediction of NaN: the adapter is checked at load, the model's weights are not */
    for (int64_t i = 0; i < (int64_t)ds->n * c->num_classes; i++)
        if (!isfinite(probs[i]))
            return af_fail(AF_ERR_RANGE, "%s: sample %lld: the classifier's probabilities are not finite (NaN or Inf): "
                                         "the model's weights or activations overflow; no prediction is made",
                           ds->path ? ds->path : "data", (long long)(i / c->num_classes) + 1);
    return AF_OK;
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
