/*
 * adapter_merge_inputs.c — the inputs of af_adapter_merge (adapter_merge.c): each adapter directory
 * read against a layout built from its own tensor shapes (no model needed; every check of
 * af_adapter_load applies), and the inputs checked against each other.
 */
#include "app/adapter_merge_inputs.h"

#include "lora/adapter_io.h"
#include "lora/lora.h"

#include "core/fsutil.h"
#include "formats/manifest.h"
#include "formats/safetensors.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AF_MERGE_MAX_LAYERS 65536 /* bounds the slot table built from tensor names */


void af_merge_in_free(in_adapter *a) {
    af_adapter_info_free(&a->info);
    free(a->lay.slots);
    free(a->P);
    memset(a, 0, sizeof *a);
}

const char *af_merge_afj_string(const in_adapter *a, const char *key) {
    const cJSON *v = a->info.afinar ? cJSON_GetObjectItemCaseSensitive(a->info.afinar, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
int32_t af_merge_afj_int(const in_adapter *a, const char *key) {
    const cJSON *v = a->info.afinar ? cJSON_GetObjectItemCaseSensitive(a->info.afinar, key) : NULL;
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e9 ? (int32_t)v->valuedouble : 0;
}

/* Read `dir`: info, a layout from the tensor shapes, then every tensor (af_adapter_load's checks). */
af_status af_merge_in_read(const char *dir, in_adapter *a) {
    memset(a, 0, sizeof *a);
    a->dir = dir;
    AF_TRY(af_adapter_read_info(dir, &a->info));
    const af_adapter_info *in = &a->info;
    if (in->use_dora)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: a DoRA adapter (use_dora): its magnitude vectors have no ΔW merge "
                       "(merge it into the model with `afinar merge` instead)", dir);
    af_param_layout *lay = &a->lay;
    lay->lora = (af_lora_config){in->r, in->alpha, 0.0f, in->use_rslora, in->targets, 0, 0};
    lay->scale = in->use_rslora ? in->alpha / sqrtf((float)in->r) : in->alpha / (float)in->r;
    a->scale = in->use_rslora ? (double)in->alpha / sqrt((double)in->r) : (double)in->alpha / (double)in->r;
    if (in->n_layers > AF_MERGE_MAX_LAYERS)
        return af_fail(AF_ERR_FORMAT, "%s/%s: a LoRA tensor of layer %d (at most %d layers)", dir, AF_ADAPTER_WEIGHTS_FILE,
                       in->n_layers - 1, AF_MERGE_MAX_LAYERS);
    lay->n_layers = in->n_layers;
    lay->num_classes = in->num_classes;
    lay->hidden = in->hidden;
    lay->head_w_off = lay->head_b_off = -1;
    const size_t nslots = (size_t)(in->n_layers > 0 ? in->n_layers : 1) * AF_PROJ_COUNT;
    lay->slots = af_calloc(nslots, sizeof *lay->slots);
    if (!lay->slots) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t k = 0; k < nslots; k++) lay->slots[k] = (af_lora_slot){-1, -1, 0, 0, -1};

    char *path = af_path_join(dir, AF_ADAPTER_WEIGHTS_FILE);
    af_st_file *f = NULL;
    af_status st = path ? af_st_open(path, &f) : af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    free(path);
    for (size_t i = 0; st == AF_OK && i < af_st_count(f); i++) {
        const af_st_tensor *t = af_st_tensor_at(f, i);
        int32_t l;
        af_proj p;
        const int role = af_adapter_tensor_role(t->name, &l, &p);
        if ((role != 1 && role != 2) || l < 0 || l >= in->n_layers) continue;
        af_lora_slot *s = &lay->slots[(size_t)l * AF_PROJ_COUNT + p];
        s->a_off = 0; /* targeted; offsets below */
        /* the rank side must be r before any size is derived from the other side (bounded by the file) */
        if (t->n_dims != 2 || t->shape[role == 1 ? 0 : 1] != in->r) {
            char got[96] = "";
            for (int d = 0; d < t->n_dims && d < 4; d++) {
                size_t gl = strlen(got);
                snprintf(got + gl, sizeof got - gl, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            }
            st = af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%s], expected %s with r = %d (adapter_config.json)",
                         af_st_path(f), t->name, got, role == 1 ? "[r, in]" : "[out, r]", in->r);
            break;
        }
        if (role == 1) s->in = t->shape[1];
        else s->out = t->shape[0];
    }
    af_st_close(f);
    if (st != AF_OK) return st;
    int64_t off = 0;
    for (size_t k = 0; k < nslots; k++) {
        af_lora_slot *s = &lay->slots[k];
        if (s->a_off < 0) continue;
        if (s->in <= 0 || s->in > (1 << 24)) s->in = 1; /* A missing or malformed: af_adapter_load names it */
        if (s->out <= 0 || s->out > (1 << 24)) s->out = 1;
        s->a_off = off;
        off += (int64_t)in->r * s->in;
        s->b_off = off;
        off += s->out * (int64_t)in->r;
    }
    lay->n_lora = off;
    if (in->num_classes > 0) {
        lay->head_w_off = off;
        off += (int64_t)in->num_classes * in->hidden;
        lay->head_b_off = off;
        off += in->num_classes;
    }
    lay->n_total = off;
    a->P = af_calloc((size_t)(off > 0 ? off : 1), sizeof(float));
    if (!a->P) return af_fail(AF_ERR_NOMEM, "%s: out of memory (%lld parameters)", dir, (long long)off);
    AF_TRY(af_adapter_load(dir, lay, a->P, NULL, NULL)); /* no q/k conversion: rows stay in file order */
    const cJSON *lb = a->info.afinar ? cJSON_GetObjectItemCaseSensitive(a->info.afinar, "labels") : NULL;
    a->labels = cJSON_IsArray(lb) ? lb : NULL;
    return AF_OK;
}

af_status af_merge_check_inputs(const in_adapter *a, int32_t n) {
    const in_adapter *h = NULL; /* first with a head */
    for (int32_t i = 0; i < n; i++)
        if (a[i].info.num_classes > 0 && !h) h = &a[i];
    for (int32_t i = 1; i < n; i++) {
        const in_adapter *x = &a[0], *y = &a[i];
        const char *ax = af_merge_afj_string(x, "architecture"), *ay = af_merge_afj_string(y, "architecture");
        if (ax && ay && strcmp(ax, ay))
            return af_fail(AF_ERR_INVALID_ARG, "%s: architecture \"%s\", but %s is for \"%s\" (adapters of one base model only)",
                           y->dir, ay, x->dir, ax);
        static const char *const dims[] = {"n_layers", "hidden"};
        for (int d = 0; d < 2; d++) {
            int32_t vx = af_merge_afj_int(x, dims[d]), vy = af_merge_afj_int(y, dims[d]);
            if (vx > 0 && vy > 0 && vx != vy)
                return af_fail(AF_ERR_INVALID_ARG, "%s/afinar.json: %s = %d, but %s has %d (adapters of one base model only)",
                               y->dir, dims[d], vy, x->dir, vx);
        }
    }
    /* the same projection has the same shape everywhere; q/k row orders agree where q/k are adapted */
    const in_adapter *qk = NULL;
    for (int32_t i = 0; i < n; i++) {
        const in_adapter *y = &a[i];
        for (int32_t l = 0; l < y->lay.n_layers; l++)
            for (int p = 0; p < AF_PROJ_COUNT; p++) {
                const af_lora_slot *s = af_lora_slot_at(&y->lay, l, (af_proj)p);
                if (s->a_off < 0) continue;
                if (p == AF_PROJ_Q || p == AF_PROJ_K) {
                    if (!qk) qk = y;
                    else if (qk->info.qk_rows_gguf != y->info.qk_rows_gguf)
                        return af_fail(AF_ERR_INVALID_ARG,
                                       "%s: q/k rows in %s order, but %s has them in %s order (re-save the older adapter "
                                       "with a current afinar)",
                                       y->dir, y->info.qk_rows_gguf ? "GGUF" : "HF", qk->dir,
                                       qk->info.qk_rows_gguf ? "GGUF" : "HF");
                }
                for (int32_t j = 0; j < i; j++) {
                    const in_adapter *x = &a[j];
                    if (l >= x->lay.n_layers) continue;
                    const af_lora_slot *t = af_lora_slot_at(&x->lay, l, (af_proj)p);
                    if (t->a_off >= 0 && (t->in != s->in || t->out != s->out))
                        return af_fail(AF_ERR_INVALID_ARG,
                                       "%s: layer %d %s is [%lld, %lld] (out, in), but [%lld, %lld] in %s "
                                       "(adapters of one base model only)",
                                       y->dir, l, af_proj_name((af_proj)p), (long long)s->out, (long long)s->in,
                                       (long long)t->out, (long long)t->in, x->dir);
                }
            }
    }
    if (!h) return AF_OK;
    for (int32_t i = 0; i < n; i++) {
        const in_adapter *y = &a[i];
        if (y->info.num_classes <= 0)
            return af_fail(AF_ERR_INVALID_ARG,
                           "%s: no classification head, but %s has one (merge classifiers with classifiers only)", y->dir,
                           h->dir);
        if (y->info.num_classes != h->info.num_classes || y->info.hidden != h->info.hidden)
            return af_fail(AF_ERR_INVALID_ARG, "%s: head [%d, %d] (num_classes, hidden), but %s has [%d, %d]", y->dir,
                           y->info.num_classes, y->info.hidden, h->dir, h->info.num_classes, h->info.hidden);
        const int same_labels = (!y->labels && !h->labels) ||
                                (y->labels && h->labels && cJSON_Compare(y->labels, h->labels, 1));
        if (!same_labels) {
            char *ly = y->labels ? cJSON_PrintUnformatted(y->labels) : NULL;
            char *lh = h->labels ? cJSON_PrintUnformatted(h->labels) : NULL;
            af_status st = af_fail(AF_ERR_INVALID_ARG,
                                   "%s/afinar.json: labels %s, but %s has %s (merged heads need the same label set, in "
                                   "the same order)",
                                   y->dir, ly ? ly : "(integer ids)", h->dir, lh ? lh : "(integer ids)");
            free(ly), free(lh);
            return st;
        }
        const char *py = af_merge_afj_string(y, "pooling"), *ph = af_merge_afj_string(h, "pooling");
        if (py && ph && strcmp(py, ph))
            return af_fail(AF_ERR_INVALID_ARG, "%s/afinar.json: pooling \"%s\", but %s has \"%s\"", y->dir, py, h->dir, ph);
    }
    return AF_OK;
}

