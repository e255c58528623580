/*
 * merge.c — fold an adapter into a GGUF model (af_merge_adapter, afinar_app.h): W' = quant(W + s·B·A)
 * for each adapted tensor, every other tensor and KV copied byte for byte (docs/FORMATS.md §8).
 */
#include "afinar.h"
#include "afinar_app.h"
#include "core/core.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "kernels/quant.h"
#include "lora/adapter_gguf.h"
#include "lora/dora.h"
#include "app/export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP AF_TYPE_KEEP

/* "blk.{l}.{proj}.weight" -> slot index; -1 otherwise. */
static int64_t slot_of(const char *name, int32_t n_layers) {
    int l = -1, off = 0;
    if (sscanf(name, "blk.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l >= n_layers) return -1;
    char want[96];
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        snprintf(want, sizeof want, "blk.%d.%s.weight", l, af_proj_gguf_name(p));
        if (strcmp(name, want) == 0) return (int64_t)l * AF_PROJ_COUNT + p;
    }
    return -1;
}

typedef struct acc {
    double delta2, req2, base2;
    int64_t n;
} acc;

/* quant(W + s·B·A) of one tensor into *out (af_malloc'ed, *nbytes). */
static af_status merge_tensor(const af_gguf_tensor *t, const af_lora_slot *s, const af_param_layout *lay,
                              const float *P, uint32_t ty, uint8_t **out, size_t *nbytes, acc *a) {
    const int64_t rows = t->ne[1], cols = t->ne[0];
    const size_t in_rb = af_row_bytes(t->type, cols), out_rb = af_row_bytes(ty, cols);
    float *W = af_malloc(sizeof(float) * (size_t)(rows * cols));
    float *M = af_malloc(sizeof(float) * (size_t)(rows * cols));
    float *row = af_malloc(sizeof(float) * (size_t)cols);
    uint8_t *q = af_malloc(out_rb * (size_t)rows), *qb = af_malloc(out_rb);
    if (!W || !M || !row || !q || !qb) {
        free(W), free(M), free(row), free(q), free(qb);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory (%lld x %lld)", t->name, (long long)rows, (long long)cols);
    }
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < rows; r++) af_dequantize_row(t->type, src + (size_t)r * in_rb, W + r * cols, cols);
    memcpy(M, W, sizeof(float) * (size_t)(rows * cols));
    if (lay->lora.use_dora) /* m / ||W + s·B·A||_row ⊙ (W + s·B·A) (PEFT merge_safe) */
        af_dora_merge(M, P + s->a_off, P + s->b_off, P + s->m_off, s->in, s->out, lay->lora.r, lay->scale);
    else
        af_lora_merge(M, P + s->a_off, P + s->b_off, s->in, s->out, lay->lora.r, lay->scale, 1);
    const int same = ty == t->type;
    for (int64_t r = 0; r < rows; r++) {
        const float *m = M + r * cols, *w = W + r * cols;
        af_quantize_row(ty, m, q + (size_t)r * out_rb, cols);
        af_dequantize_row(ty, q + (size_t)r * out_rb, row, cols);
        for (int64_t c = 0; c < cols; c++) {
            const double d = (double)m[c] - w[c], e = (double)row[c] - m[c];
            a->delta2 += d * d;
            a->req2 += e * e;
        }
        if (!same) { /* the base alone in the output type: the error a plain conversion would make */
            af_quantize_row(ty, w, qb, cols);
            af_dequantize_row(ty, qb, row, cols);
            for (int64_t c = 0; c < cols; c++) {
                const double e = (double)row[c] - w[c];
                a->base2 += e * e;
            }
        }
    }
    a->n += rows * cols;
    free(W), free(M), free(row), free(qb);
    *out = q;
    *nbytes = out_rb * (size_t)rows;
    return AF_OK;
}

af_status af_merge_adapter(const char *model_path, const char *adapter, const char *out_path,
                           const af_merge_opts *opts, af_merge_stats *stats) {
    const af_merge_opts zero = {0};
    const af_merge_opts *o = opts ? opts : &zero;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!model_path || !adapter || !out_path || !*out_path)
        return af_fail(AF_ERR_INVALID_ARG, "af_merge_adapter: NULL argument");
    uint32_t target = KEEP;
    AF_TRY(af_quant_type_parse(o->type, &target));
    AF_TRY(af_export_check_out(out_path, o->overwrite));
    af_loaded_adapter la;
    AF_TRY(af_export_load(model_path, adapter, &la));
    af_gguf *g = NULL;
    af_gguf_writer *w = NULL;
    uint8_t **bufs = NULL;
    af_merge_stats ms = {0};
    acc a = {0};
    af_status st = af_gguf_open(model_path, &g);
    if (st == AF_OK) st = af_gguf_writer_new(&w);
    if (st == AF_OK && !(bufs = af_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *bufs)))
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", model_path);
    const af_param_layout *lay = &la.lay;
    const int new_head = lay->num_classes > 0, new_json = la.info.afinar != NULL;
    /* 1. check every merged tensor before any work */
    for (uint64_t i = 0; st == AF_OK && i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        const int64_t k = slot_of(t->name, lay->n_layers);
        if (k < 0 || lay->slots[k].a_off < 0) continue;
        const af_lora_slot *s = &lay->slots[k];
        const uint32_t ty = target == KEEP ? t->type : target;
        if (t->n_dims != 2 || t->ne[0] != s->in || t->ne[1] != s->out)
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor %s is {%lld, %lld}, the adapter needs {%lld, %lld}", model_path,
                         t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)s->in, (long long)s->out);
        else if (!af_type_can_dequantize(t->type) || ty == AF_TYPE_Q8_K)
            st = af_fail(AF_ERR_UNSUPPORTED, "%s: tensor %s: type %s cannot be dequantized", model_path, t->name,
                         af_type_name(t->type));
        else if (t->ne[0] % (int64_t)af_type_block_size(ty) != 0)
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor %s has rows of %lld values, not a multiple of %s's block of %zu",
                         model_path, t->name, (long long)t->ne[0], af_type_name(ty), af_type_block_size(ty));
        else {
            float x[256] = {0};
            uint8_t tmp[512];
            if (!af_quantize_row(ty, x, tmp, (int64_t)af_type_block_size(ty)))
                st = af_fail(AF_ERR_UNSUPPORTED, "%s: tensor %s: afinar cannot quantize to %s (use --type)", model_path,
                             t->name, af_type_name(ty));
        }
    }
    /* 2. metadata, in order; the adapter's head / afinar.json replace the base's */
    for (uint64_t i = 0; st == AF_OK && i < g->n_kv; i++) {
        const af_gguf_kv *kv = &g->kv[i];
        const size_t pl = strlen(AF_GGUF_KEY_HEAD_PREFIX);
        if (new_head && kv->key.len >= pl && memcmp(kv->key.ptr, AF_GGUF_KEY_HEAD_PREFIX, pl) == 0) continue;
        if ((new_json || new_head) && af_gguf_str_eq(kv->key, AF_GGUF_KEY_ADAPTER_JSON)) continue;
        st = af_gguf_writer_copy_kv(w, kv);
    }
    char *json = NULL;
    if (st == AF_OK && new_json && !(json = cJSON_PrintUnformatted(la.info.afinar)))
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", adapter);
    if (st == AF_OK && (new_head || new_json)) st = af_adapter_gguf_add_head(w, lay, la.P, la.info.has_head_bias, json);
    free(json);
    /* 3. tensors, in order */
    for (uint64_t i = 0; st == AF_OK && i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        const int64_t k = slot_of(t->name, lay->n_layers);
        if (k < 0 || lay->slots[k].a_off < 0) {
            st = af_gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, (size_t)t->nbytes);
            ms.copied++;
            continue;
        }
        const uint32_t ty = target == KEEP ? t->type : target;
        size_t nb = 0;
        st = merge_tensor(t, &lay->slots[k], lay, la.P, ty, &bufs[i], &nb, &a);
        if (st == AF_OK) st = af_gguf_writer_add_tensor_ref(w, t->name, ty, t->n_dims, t->ne, bufs[i], nb);
        ms.merged++;
    }
    if (st == AF_OK && ms.merged == 0)
        st = af_fail(AF_ERR_INVALID_ARG, "%s: no tensor of %s is adapted by %s (nothing to merge)", adapter, model_path,
                     adapter);
    if (st == AF_OK) st = af_gguf_writer_write_file(w, out_path);
    if (st == AF_OK && stats) {
        ms.delta_rms = a.n ? sqrt(a.delta2 / (double)a.n) : 0;
        ms.requant_rms = a.n ? sqrt(a.req2 / (double)a.n) : 0;
        ms.base_requant_rms = a.n ? sqrt(a.base2 / (double)a.n) : 0;
        *stats = ms;
    }
    for (uint64_t i = 0; bufs && i < g->n_tensors; i++) free(bufs[i]);
    free(bufs);
    af_gguf_writer_free(w);
    af_gguf_close(g);
    af_export_unload(&la);
    return st;
}
