/*
 * api_state.c — the public LoRA trainer's parameters and optimizer state seen from outside
 * (afinar.h af_lora_trainer_*): the internal view (api_internal.h), host copies of the whole state,
 * the trainable tensors by PEFT name (q/k lora_B rows in PEFT's order), the AdamW state and step
 * counters, and PEFT adapter directories (the only calls into lora/adapter_io). The optimizer step
 * itself is api.c's.
 */
#include "afinar.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "lora/adapter_io.h"
#include "model/model.h"
#include "train/api_internal.h"
#include "train/api_trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy the [rows, cols] block of tensor t from `src` to `dst` (block bases): internal -> PEFT row
 * order (to_peft) or back; rows move only for permuted q/k lora_B. */
static void copy_rows(float *dst, const float *src, const tensor_desc *t, int64_t hd, int to_peft) {
    const size_t row = sizeof(float) * (size_t)t->cols;
    for (int64_t o = 0; o < t->rows; o++) {
        const int64_t e = t->qk_rows ? af_adapter_qk_hf_row(o, hd) : o;
        if (to_peft)
            memcpy(dst + e * t->cols, src + o * t->cols, row);
        else
            memcpy(dst + o * t->cols, src + e * t->cols, row);
    }
}

void af_lora_trainer_get_view(af_lora_trainer *tr, af_lora_trainer_view *v) {
    v->lay = &tr->lay;
    v->eng = tr->eng;
    v->P = tr->P;
    v->ctx = tr->ctx;
}

af_status af_lora_trainer_download_state(const af_lora_trainer *tr, float *P, float *M, float *V) {
    const af_backend *be = af_be(tr->ctx);
    const size_t bytes = sizeof(float) * (size_t)tr->lay.n_total;
    if (P) AF_TRY(be->download(tr->ctx, P, tr->P, bytes));
    if (M) AF_TRY(be->download(tr->ctx, M, tr->M, bytes));
    if (V) AF_TRY(be->download(tr->ctx, V, tr->V, bytes));
    return AF_OK;
}

af_status af_lora_trainer_upload_state(af_lora_trainer *tr, const float *P, const float *M, const float *V) {
    const af_backend *be = af_be(tr->ctx);
    const size_t bytes = sizeof(float) * (size_t)tr->lay.n_total;
    if (P) AF_TRY(be->upload(tr->ctx, tr->P, P, bytes));
    if (M) AF_TRY(be->upload(tr->ctx, tr->M, M, bytes));
    if (V) AF_TRY(be->upload(tr->ctx, tr->V, V, bytes));
    return AF_OK;
}

/* A host copy of tensor t's block of the device vector X ([rows, cols] floats) into buf. */
static af_status tensor_down(const af_lora_trainer *tr, const tensor_desc *t, const float *X, float *buf) {
    return af_be(tr->ctx)->download(tr->ctx, buf, X + t->off, sizeof(float) * (size_t)(t->rows * t->cols));
}

int32_t af_lora_trainer_n_tensors(const af_lora_trainer *tr) {
    return tr ? tr->n_tensors : 0;
}

static af_status tensor_at(const af_lora_trainer *tr, int32_t i, const char *fn, const tensor_desc **t) {
    if (!tr) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    if (i < 0 || i >= tr->n_tensors)
        return af_fail(AF_ERR_RANGE, "%s: tensor index %d is outside [0, %d)", fn, i, tr->n_tensors);
    *t = &tr->tensors[i];
    return AF_OK;
}

af_status af_lora_trainer_tensor_info(const af_lora_trainer *tr, int32_t i, const char **name, int64_t shape[2],
                                      int64_t *offset) {
    const tensor_desc *t = NULL;
    AF_TRY(tensor_at(tr, i, "af_lora_trainer_tensor_info", &t));
    if (name) *name = t->name;
    if (shape) {
        shape[0] = t->rows;
        shape[1] = t->cols;
    }
    if (offset) *offset = t->off;
    return AF_OK;
}

af_status af_lora_trainer_find_tensor(const af_lora_trainer *tr, const char *name, int32_t *index) {
    static const char *fn = "af_lora_trainer_find_tensor";
    if (!tr || !name || !index) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    for (int32_t i = 0; i < tr->n_tensors; i++)
        if (!strcmp(tr->tensors[i].name, name)) {
            *index = i;
            return AF_OK;
        }
    return af_fail(AF_ERR_NOT_FOUND, "%s: no tensor named '%s' (%d tensors)", fn, name, tr->n_tensors);
}

af_status af_lora_trainer_get_tensor(const af_lora_trainer *tr, int32_t i, float *out) {
    static const char *fn = "af_lora_trainer_get_tensor";
    const tensor_desc *t = NULL;
    AF_TRY(tensor_at(tr, i, fn, &t));
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL out", fn);
    float *buf = af_malloc(sizeof(float) * (size_t)(t->rows * t->cols));
    if (!buf) return af_fail(AF_ERR_NOMEM, "%s: out of memory", fn);
    af_status st = tensor_down(tr, t, tr->P, buf);
    if (st == AF_OK) copy_rows(out, buf, t, tr->head_dim, 1);
    free(buf);
    return st;
}

static af_status check_finite(const float *x, int64_t n, const char *fn, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return af_fail(AF_ERR_INVALID_ARG, "%s: %s: element %lld is not finite (%g)", fn, what, (long long)i,
                           (double)x[i]);
    return AF_OK;
}

af_status af_lora_trainer_set_tensor(af_lora_trainer *tr, int32_t i, const float *in) {
    static const char *fn = "af_lora_trainer_set_tensor";
    const tensor_desc *t = NULL;
    AF_TRY(tensor_at(tr, i, fn, &t));
    if (!in) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL in", fn);
    AF_TRY(check_finite(in, t->rows * t->cols, fn, t->name));
    float *buf = af_malloc(sizeof(float) * (size_t)(t->rows * t->cols));
    if (!buf) return af_fail(AF_ERR_NOMEM, "%s: out of memory", fn);
    copy_rows(buf, in, t, tr->head_dim, 0);
    af_status st = af_be(tr->ctx)->upload(tr->ctx, tr->P + t->off, buf, sizeof(float) * (size_t)(t->rows * t->cols));
    free(buf);
    return st;
}

af_status af_lora_trainer_get_params(const af_lora_trainer *tr, float *out) {
    if (!tr || !out) return af_fail(AF_ERR_INVALID_ARG, "af_lora_trainer_get_params: NULL argument");
    return af_lora_trainer_download_state(tr, out, NULL, NULL);
}

af_status af_lora_trainer_set_params(af_lora_trainer *tr, const float *in) {
    static const char *fn = "af_lora_trainer_set_params";
    if (!tr || !in) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL argument", fn);
    AF_TRY(check_finite(in, tr->lay.n_total, fn, "params"));
    return af_lora_trainer_upload_state(tr, in, NULL, NULL);
}

af_status af_lora_trainer_get_optim_state(const af_lora_trainer *tr, float *m, float *v, int64_t *adam_t,
                                          int64_t *step_count) {
    if (!tr) return af_fail(AF_ERR_INVALID_ARG, "af_lora_trainer_get_optim_state: NULL trainer");
    AF_TRY(af_lora_trainer_download_state(tr, NULL, m, v));
    if (adam_t) *adam_t = tr->adam_t;
    if (step_count) *step_count = tr->step_count;
    return AF_OK;
}

af_status af_lora_trainer_set_optim_state(af_lora_trainer *tr, const float *m, const float *v,
                                          const int64_t *adam_t, const int64_t *step_count) {
    static const char *fn = "af_lora_trainer_set_optim_state";
    if (!tr) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    const int64_t n = tr->lay.n_total;
    const int64_t t = adam_t ? *adam_t : tr->adam_t, s = step_count ? *step_count : tr->step_count;
    if (t < 0 || s < 0 || t > s)
        return af_fail(AF_ERR_INVALID_ARG, "%s: adam_t = %lld, step_count = %lld: need 0 <= adam_t <= step_count", fn,
                       (long long)t, (long long)s);
    if (m) AF_TRY(check_finite(m, n, fn, "m"));
    if (v) {
        AF_TRY(check_finite(v, n, fn, "v"));
        for (int64_t i = 0; i < n; i++)
            if (v[i] < 0)
                return af_fail(AF_ERR_INVALID_ARG, "%s: v: element %lld = %g is negative", fn, (long long)i, (double)v[i]);
    }
    AF_TRY(af_lora_trainer_upload_state(tr, NULL, m, v));
    tr->adam_t = t;
    tr->step_count = s;
    tr->mb_in_step = 0;
    return AF_OK;
}

/* ---------------------------------------------------------------- adapter directories */

/* The only calls into adapter_io. P is in the internal (GGUF) row order; adapter_io converts the
 * q/k lora_B rows to / from PEFT's HF order when it is given the architecture and head counts. */
static void qk_geometry(const af_lora_trainer *tr, const char **arch, int32_t *nh, int32_t *nkv, int32_t *hd) {
    const af_model_config *mc = af_model_get_config(tr->model);
    *arch = mc->architecture;
    *nh = mc->num_attention_heads;
    *nkv = mc->num_key_value_heads;
    *hd = mc->head_dim;
}

static af_status adapter_save_peft(const af_lora_trainer *tr, const char *dir, const char *base_model_name) {
    af_adapter_save_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.base_model_name_or_path = base_model_name;
    ao.write_head_bias = tr->o.head_bias != 0 && tr->lay.num_classes > 0;
    qk_geometry(tr, &ao.architecture, &ao.n_head, &ao.n_kv_head, &ao.head_dim);
    ao.pooling = tr->lay.num_classes > 0 ? (tr->o.pooling == AF_POOLING_LAST ? "last" : "mean") : NULL;
    float *P = af_malloc(sizeof(float) * (size_t)(tr->lay.n_total ? tr->lay.n_total : 1));
    if (!P) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    af_status st = af_lora_trainer_download_state(tr, P, NULL, NULL);
    if (st == AF_OK) st = af_adapter_save(dir, &tr->lay, P, &ao);
    free(P);
    return st;
}

static af_status adapter_load_peft(const af_lora_trainer *tr, const char *dir, float *P) {
    af_adapter_load_opts lo;
    memset(&lo, 0, sizeof lo);
    qk_geometry(tr, &lo.architecture, &lo.n_head, &lo.n_kv_head, &lo.head_dim);
    return af_adapter_load(dir, &tr->lay, P, &lo, NULL);
}

af_status af_lora_trainer_save_adapter(const af_lora_trainer *tr, const char *dir, const char *base_model_name) {
    static const char *fn = "af_lora_trainer_save_adapter";
    if (!tr || !dir || !*dir) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer or directory", fn);
    af_status st = adapter_save_peft(tr, dir, base_model_name);
    return st == AF_OK ? AF_OK : af_lt_refail(st, fn);
}

af_status af_lora_trainer_load_adapter(af_lora_trainer *tr, const char *dir) {
    static const char *fn = "af_lora_trainer_load_adapter";
    if (!tr || !dir || !*dir) return af_fail(AF_ERR_INVALID_ARG, "%s: NULL trainer or directory", fn);
    const size_t n = (size_t)tr->lay.n_total;
    float *X = af_malloc(sizeof(float) * n);
    if (!X) return af_fail(AF_ERR_NOMEM, "%s: out of memory", fn);
    af_status st = af_lora_trainer_download_state(tr, X, NULL, NULL);
    if (st == AF_OK) st = adapter_load_peft(tr, dir, X);
    if (st != AF_OK) st = af_lt_refail(st, fn);
    for (size_t i = 0; st == AF_OK && i < n; i++)
        if (!isfinite(X[i])) st = af_fail(AF_ERR_FORMAT, "%s: %s: parameter %zu is not finite", fn, dir, i);
    if (st == AF_OK) st = af_lora_trainer_upload_state(tr, X, NULL, NULL);
    if (st == AF_OK) {
        af_be(tr->ctx)->fill(tr->ctx, tr->M, 0.0f, (int64_t)n);
        af_be(tr->ctx)->fill(tr->ctx, tr->V, 0.0f, (int64_t)n);
        tr->adam_t = tr->step_count = 0;
        af_lora_trainer_zero_grad(tr);
    }
    free(X);
    return st;
}
