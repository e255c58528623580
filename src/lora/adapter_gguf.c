/*
 * adapter_gguf.c — llama.cpp LoRA GGUF adapters and the afinar head in GGUF metadata (layout and
 * sources: adapter_gguf.h).
 */
#include "lora/adapter_gguf.h"

#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const k_gguf_proj[AF_PROJ_COUNT] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                       "ffn_gate", "ffn_up", "ffn_down"};

const char *af_proj_gguf_name(int p) { return p >= 0 && p < AF_PROJ_COUNT ? k_gguf_proj[p] : NULL; }

int af_adapter_is_gguf(const char *path) {
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    char m[4] = {0};
    size_t n = fread(m, 1, 4, fp);
    fclose(fp);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

/* "blk.{i}.{proj}.weight.lora_{a,b}" -> layer, proj, b (0 = A, 1 = B); 0 when the name is not one. */
static int parse_lora_name(const char *name, int32_t *layer, int *proj, int *is_b) {
    int l = -1, off = 0;
    if (sscanf(name, "blk.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l > 1000000) return 0;
    char want[96];
    for (int p = 0; p < AF_PROJ_COUNT; p++)
        for (int b = 0; b < 2; b++) {
            snprintf(want, sizeof want, "blk.%d.%s.weight.lora_%c", l, k_gguf_proj[p], b ? 'b' : 'a');
            if (strcmp(name, want) == 0) {
                *layer = l;
                *proj = p;
                *is_b = b;
                return 1;
            }
        }
    return 0;
}

static af_status dup_gstr(char **dst, af_gguf_str s, const char *path) {
    *dst = af_malloc(s.len + 1);
    if (!*dst) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    memcpy(*dst, s.ptr, s.len);
    (*dst)[s.len] = '\0';
    return AF_OK;
}

/* Head keys: C, H and the weight array checked; *has_head 0 when the keys are absent. */
static af_status read_head_keys(const af_gguf *g, int32_t *C, int32_t *H, int *has_bias, int *has_head) {
    const char *path = g->path;
    const af_gguf_value *w = af_gguf_find(g, AF_GGUF_KEY_HEAD_W);
    *has_head = 0;
    *has_bias = 0;
    if (!w) return AF_OK;
    int64_t c = 0, h = 0;
    AF_TRY(af_gguf_get_i64(g, AF_GGUF_KEY_HEAD_C, &c));
    AF_TRY(af_gguf_get_i64(g, AF_GGUF_KEY_HEAD_H, &h));
    if (c < 1 || c > 1000000 || h < 1 || h > 1000000)
        return af_fail(AF_ERR_FORMAT, "%s: %s = %lld, %s = %lld: out of range", path, AF_GGUF_KEY_HEAD_C, (long long)c,
                       AF_GGUF_KEY_HEAD_H, (long long)h);
    if (w->type != AF_GGUF_ARRAY || w->arr_type != AF_GGUF_FLOAT32 || w->arr_n != (uint64_t)(c * h))
        return af_fail(AF_ERR_FORMAT, "%s: %s: expected an f32 array of %lld values (num_classes x hidden)", path,
                       AF_GGUF_KEY_HEAD_W, (long long)(c * h));
    const af_gguf_value *b = af_gguf_find(g, AF_GGUF_KEY_HEAD_B);
    if (b && (b->type != AF_GGUF_ARRAY || b->arr_type != AF_GGUF_FLOAT32 || b->arr_n != (uint64_t)c))
        return af_fail(AF_ERR_FORMAT, "%s: %s: expected an f32 array of %lld values", path, AF_GGUF_KEY_HEAD_B,
                       (long long)c);
    *C = (int32_t)c;
    *H = (int32_t)h;
    *has_bias = b != NULL;
    *has_head = 1;
    return AF_OK;
}

static af_status info_from_gguf(const af_gguf *g, af_adapter_info *info) {
    const char *path = g->path;
    memset(info, 0, sizeof *info);
    af_gguf_str s;
    if (af_gguf_get_str(g, "general.architecture", &s) != AF_OK)
        return af_fail(AF_ERR_FORMAT, "%s: general.architecture: missing or not a string", path);
    AF_TRY(dup_gstr(&info->architecture, s, path));
    int is_adapter = af_gguf_get_str(g, "general.type", &s) == AF_OK && af_gguf_str_eq(s, "adapter");
    int has_head = 0, has_bias = 0;
    AF_TRY(read_head_keys(g, &info->num_classes, &info->hidden, &has_bias, &has_head));
    info->has_head_bias = has_bias;
    info->qk_rows_gguf = 1;
    const char *peft = "LORA", *task = has_head ? "SEQ_CLS" : "CAUSAL_LM";
    info->peft_type = strdup(peft);
    info->task_type = strdup(task);
    if (!info->peft_type || !info->task_type) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    const af_gguf_value *js = af_gguf_find(g, AF_GGUF_KEY_ADAPTER_JSON);
    if (js) {
        if (js->type != AF_GGUF_STRING)
            return af_fail(AF_ERR_FORMAT, "%s: %s: not a string", path, AF_GGUF_KEY_ADAPTER_JSON);
        info->afinar = cJSON_ParseWithLength(js->v.str.ptr, (size_t)js->v.str.len);
        if (!info->afinar || !cJSON_IsObject(info->afinar))
            return af_fail(AF_ERR_FORMAT, "%s: %s: not a JSON object", path, AF_GGUF_KEY_ADAPTER_JSON);
    }
    if (!is_adapter) { /* a model file: only an afinar head makes it usable as an "adapter" */
        if (!has_head)
            return af_fail(AF_ERR_FORMAT,
                           "%s: a GGUF model without an afinar classification head (%s*), not a LoRA adapter "
                           "(general.type \"adapter\")",
                           path, AF_GGUF_KEY_HEAD_PREFIX);
        return AF_OK; /* r = 0, targets = 0 */
    }
    if (af_gguf_get_str(g, "adapter.type", &s) != AF_OK || !af_gguf_str_eq(s, "lora"))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: adapter.type: only \"lora\" adapters are supported", path);
    /* tensors: names, shapes, one rank */
    int32_t *layers = af_calloc(1, sizeof(int32_t)); /* grown below; at least one element */
    if (!layers) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    info->layers_to_transform = layers;
    int32_t cap = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        int32_t l;
        int p, b;
        if (!parse_lora_name(t->name, &l, &p, &b))
            return af_fail(AF_ERR_FORMAT, "%s: tensor %llu '%s': not blk.N.<projection>.weight.lora_a/lora_b", path,
                           (unsigned long long)i, t->name);
        if (t->n_dims != 2 || !(t->type == AF_TYPE_F32 || t->type == AF_TYPE_F16 || t->type == AF_TYPE_BF16))
            return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': expected a 2-d F32/F16/BF16 tensor (type %s, %u dims)",
                           path, t->name, af_type_name(t->type), t->n_dims);
        const int64_t r = b ? t->ne[0] : t->ne[1];
        if (r < 1 || r > 1000000) return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': rank %lld", path, t->name, (long long)r);
        if (info->r == 0) info->r = (int32_t)r;
        else if (info->r != r)
            return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s' has rank %lld, others %d (one rank per adapter)", path,
                           t->name, (long long)r, info->r);
        info->targets |= 1u << p;
        if (l + 1 > info->n_layers) info->n_layers = l + 1;
        int32_t k = 0;
        while (k < info->n_layers_to_transform && info->layers_to_transform[k] < l) k++;
        if (k < info->n_layers_to_transform && info->layers_to_transform[k] == l) continue;
        if (info->n_layers_to_transform == cap) {
            int32_t *nl = realloc(info->layers_to_transform, sizeof(int32_t) * (size_t)cap * 2);
            if (!nl) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
            info->layers_to_transform = nl;
            cap *= 2;
        }
        memmove(info->layers_to_transform + k + 1, info->layers_to_transform + k,
                sizeof(int32_t) * (size_t)(info->n_layers_to_transform - k));
        info->layers_to_transform[k] = l;
        info->n_layers_to_transform++;
    }
    if (info->r == 0) return af_fail(AF_ERR_FORMAT, "%s: a LoRA GGUF without lora_a/lora_b tensors", path);
    float alpha = 0.0f;
    AF_TRY(af_gguf_get_f32_or(g, "adapter.lora.alpha", 0.0f, &alpha));
    if (!isfinite(alpha) || alpha < 0)
        return af_fail(AF_ERR_FORMAT, "%s: adapter.lora.alpha = %g", path, (double)alpha);
    info->alpha = alpha > 0 ? alpha : (float)info->r; /* llama.cpp: alpha 0 -> scale 1 */
    return AF_OK;
}

af_status af_adapter_gguf_read_info(const char *path, af_adapter_info *info) {
    if (!path || !info) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_gguf_read_info: NULL argument");
    af_gguf *g = NULL;
    memset(info, 0, sizeof *info);
    AF_TRY(af_gguf_open(path, &g));
    af_status st = info_from_gguf(g, info);
    af_gguf_close(g);
    if (st != AF_OK) af_adapter_info_free(info);
    return st;
}

static void to_f32(const af_gguf_tensor *t, float *dst) {
    const int64_t n = t->ne[0] * t->ne[1];
    af_dequantize_row(t->type, t->data, dst, n); /* F32/F16/BF16: one "row" of n elements */
}

af_status af_adapter_gguf_load(const char *path, const af_param_layout *lay, float *P, unsigned flags,
                               af_adapter_info *info_out) {
    if (!path || !lay || !P) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_gguf_load: NULL argument");
    af_gguf *g = NULL;
    af_adapter_info info;
    memset(&info, 0, sizeof info);
    AF_TRY(af_gguf_open(path, &g));
    af_status st = info_from_gguf(g, &info);
    const size_t nslots = (size_t)lay->n_layers * AF_PROJ_COUNT;
    const af_gguf_tensor **ta = NULL, **tb = NULL;
    if (st == AF_OK && info.r > 0 && (info.r != lay->lora.r || fabsf(info.alpha - lay->lora.alpha) > 1e-6f * info.alpha ||
                                      lay->lora.use_rslora))
        st = af_fail(AF_ERR_INVALID_ARG, "%s: r = %d, alpha = %g in the file, but the layout has r = %d, alpha = %g%s",
                     path, info.r, (double)info.alpha, lay->lora.r, (double)lay->lora.alpha,
                     lay->lora.use_rslora ? " (rsLoRA)" : "");
    if (st == AF_OK) {
        ta = af_calloc(nslots ? nslots : 1, sizeof *ta);
        tb = af_calloc(nslots ? nslots : 1, sizeof *tb);
        if (!ta || !tb) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    /* every tensor must belong to an active slot of the layout, with its shape */
    for (uint64_t i = 0; st == AF_OK && info.r > 0 && i < g->n_tensors; i++) { /* r = 0: a model file, head only */
        const af_gguf_tensor *t = &g->tensors[i];
        int32_t l;
        int p, b;
        parse_lora_name(t->name, &l, &p, &b); /* checked by info_from_gguf */
        const af_lora_slot *s = l < lay->n_layers ? af_lora_slot_at(lay, l, (af_proj)p) : NULL;
        if (!s || s->a_off < 0) {
            st = af_fail(AF_ERR_FORMAT, "%s: tensor '%s': the model has no such adapted projection (%s)", path, t->name,
                         l < lay->n_layers ? "projection not targeted" : "layer beyond the model's");
            break;
        }
        const int64_t e0 = b ? lay->lora.r : s->in, e1 = b ? s->out : lay->lora.r;
        if (t->ne[0] != e0 || t->ne[1] != e1) {
            st = af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape {%lld, %lld}, the model needs {%lld, %lld}", path, t->name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)e0, (long long)e1);
            break;
        }
        (b ? tb : ta)[(size_t)l * AF_PROJ_COUNT + (size_t)p] = t;
    }
    for (size_t k = 0; st == AF_OK && k < nslots; k++) {
        const af_lora_slot *s = &lay->slots[k];
        if (s->a_off >= 0 && (!ta[k] || !tb[k]))
            st = af_fail(AF_ERR_NOT_FOUND, "%s: no blk.%zu.%s.weight.lora_%s tensor", path, k / AF_PROJ_COUNT,
                         k_gguf_proj[k % AF_PROJ_COUNT], ta[k] ? "b" : "a");
    }
    int load_head = 0;
    if (st == AF_OK) {
        if (lay->num_classes > 0 && info.num_classes == 0 && !(flags & AF_ADAPTER_ALLOW_MISSING_HEAD))
            st = af_fail(AF_ERR_NOT_FOUND, "%s: no classification head (%s*), the layout needs %d classes", path,
                         AF_GGUF_KEY_HEAD_PREFIX, lay->num_classes);
        else if (lay->num_classes == 0 && info.num_classes > 0 && !(flags & AF_ADAPTER_IGNORE_HEAD))
            st = af_fail(AF_ERR_FORMAT, "%s: the file has a %d-class head, the layout none", path, info.num_classes);
        else if (lay->num_classes > 0 && info.num_classes > 0) {
            if (info.num_classes != lay->num_classes || info.hidden != lay->hidden)
                st = af_fail(AF_ERR_FORMAT, "%s: head [%d, %d], the layout needs [%d, %d]", path, info.num_classes,
                             info.hidden, lay->num_classes, lay->hidden);
            else load_head = 1;
        }
    }
    /* finite values only (as af_adapter_load): every tensor converted into scratch and checked
     * before P is written */
    int64_t most = 0;
    for (size_t k = 0; st == AF_OK && k < nslots; k++)
        for (int b = 0; b < 2 && lay->slots[k].a_off >= 0; b++) {
            const af_gguf_tensor *t = b ? tb[k] : ta[k];
            most = t->ne[0] * t->ne[1] > most ? t->ne[0] * t->ne[1] : most;
        }
    float *scratch = st == AF_OK && most > 0 ? af_malloc(sizeof(float) * (size_t)most) : NULL;
    if (st == AF_OK && most > 0 && !scratch) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    for (size_t k = 0; st == AF_OK && k < nslots; k++)
        for (int b = 0; st == AF_OK && b < 2 && lay->slots[k].a_off >= 0; b++) {
            const af_gguf_tensor *t = b ? tb[k] : ta[k];
            to_f32(t, scratch);
            for (int64_t i = 0; i < t->ne[0] * t->ne[1]; i++)
                if (!isfinite(scratch[i])) {
                    st = af_fail(AF_ERR_FORMAT, "%s: tensor '%s': element %lld is not finite (NaN or Inf): the adapter "
                                                "is unusable (saved from a diverged run?)", path, t->name, (long long)i);
                    break;
                }
        }
    free(scratch);
    if (st == AF_OK && load_head) {
        const af_gguf_value *w = af_gguf_find(g, AF_GGUF_KEY_HEAD_W), *b = af_gguf_find(g, AF_GGUF_KEY_HEAD_B);
        for (uint64_t i = 0; st == AF_OK && i < w->arr_n; i++)
            if (!isfinite(af_gguf_arr_float(w, i)))
                st = af_fail(AF_ERR_FORMAT, "%s: %s element %llu is not finite (NaN or Inf): the head is unusable", path,
                             AF_GGUF_KEY_HEAD_W, (unsigned long long)i);
        for (int32_t c = 0; st == AF_OK && b && c < lay->num_classes; c++)
            if (!isfinite(af_gguf_arr_float(b, (uint64_t)c)))
                st = af_fail(AF_ERR_FORMAT, "%s: %s element %d is not finite (NaN or Inf): the head is unusable", path,
                             AF_GGUF_KEY_HEAD_B, (int)c);
    }
    if (st == AF_OK) {
        for (size_t k = 0; k < nslots; k++) {
            const af_lora_slot *s = &lay->slots[k];
            if (s->a_off < 0) continue;
            to_f32(ta[k], P + s->a_off);
            to_f32(tb[k], P + s->b_off);
        }
        if (load_head) {
            const af_gguf_value *w = af_gguf_find(g, AF_GGUF_KEY_HEAD_W), *b = af_gguf_find(g, AF_GGUF_KEY_HEAD_B);
            for (uint64_t i = 0; i < w->arr_n; i++) P[lay->head_w_off + (int64_t)i] = (float)af_gguf_arr_float(w, i);
            for (int32_t c = 0; c < lay->num_classes; c++)
                P[lay->head_b_off + c] = b ? (float)af_gguf_arr_float(b, (uint64_t)c) : 0.0f;
        }
    }
    free(ta);
    free(tb);
    af_gguf_close(g);
    if (st == AF_OK && info_out) *info_out = info;
    else af_adapter_info_free(&info);
    return st;
}

af_status af_adapter_gguf_add_head(af_gguf_writer *w, const af_param_layout *lay, const float *P, int write_bias,
                                   const char *afinar_json) {
    if (afinar_json) AF_TRY(af_gguf_writer_add_str(w, AF_GGUF_KEY_ADAPTER_JSON, afinar_json));
    if (lay->num_classes <= 0 || lay->head_w_off < 0) return AF_OK;
    AF_TRY(af_gguf_writer_add_u32(w, AF_GGUF_KEY_HEAD_C, (uint32_t)lay->num_classes));
    AF_TRY(af_gguf_writer_add_u32(w, AF_GGUF_KEY_HEAD_H, (uint32_t)lay->hidden));
    AF_TRY(af_gguf_writer_add_arr(w, AF_GGUF_KEY_HEAD_W, AF_GGUF_FLOAT32, P + lay->head_w_off,
                                  (uint64_t)lay->num_classes * (uint64_t)lay->hidden));
    if (write_bias && lay->head_b_off >= 0)
        AF_TRY(af_gguf_writer_add_arr(w, AF_GGUF_KEY_HEAD_B, AF_GGUF_FLOAT32, P + lay->head_b_off,
                                      (uint64_t)lay->num_classes));
    return AF_OK;
}

af_status af_adapter_gguf_write(const char *path, const af_param_layout *lay, const float *P,
                                const char *architecture, int write_bias, const char *afinar_json) {
    if (!path || !lay || !P || !architecture || lay->lora.r <= 0)
        return af_fail(AF_ERR_INVALID_ARG, "af_adapter_gguf_write: NULL argument or r <= 0");
    af_gguf_writer *w = NULL;
    AF_TRY(af_gguf_writer_new(&w));
    const int32_t r = lay->lora.r;
    af_gguf_writer_add_str(w, "general.architecture", architecture);
    af_gguf_writer_add_str(w, "general.type", "adapter");
    af_gguf_writer_add_str(w, "adapter.type", "lora");
    /* llama.cpp applies alpha / r (llama_adapter_lora_weight::get_scale): store scale * r */
    af_gguf_writer_add_f32(w, "adapter.lora.alpha", lay->scale * (float)r);
    af_status st = af_adapter_gguf_add_head(w, lay, P, write_bias, afinar_json);
    char name[96];
    for (int32_t l = 0; st == AF_OK && l < lay->n_layers; l++)
        for (int p = 0; st == AF_OK && p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const int64_t nea[2] = {s->in, r}, neb[2] = {r, s->out};
            snprintf(name, sizeof name, "blk.%d.%s.weight.lora_a", l, k_gguf_proj[p]);
            st = af_gguf_writer_add_tensor_ref(w, name, AF_TYPE_F32, 2, nea, P + s->a_off,
                                               sizeof(float) * (size_t)(s->in * r));
            snprintf(name, sizeof name, "blk.%d.%s.weight.lora_b", l, k_gguf_proj[p]);
            if (st == AF_OK)
                st = af_gguf_writer_add_tensor_ref(w, name, AF_TYPE_F32, 2, neb, P + s->b_off,
                                                   sizeof(float) * (size_t)(s->out * r));
        }
    if (st == AF_OK) st = af_gguf_writer_write_file(w, path);
    af_gguf_writer_free(w);
    return st;
}
