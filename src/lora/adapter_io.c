/*
 * adapter_io.c — writing PEFT-compatible LoRA adapter directories, and the q/k row order and
 * layer restriction shared with reading (adapter_load.c). Naming, files and checks: see
 * adapter_io.h (facts from peft 0.21.2: utils/save_and_load.py get_peft_model_state_dict,
 * tuners/lora/config.py LoraConfig, utils/constants.py).
 */
#include "lora/adapter_io.h"
#include "lora/adapter_gguf.h"
#include "lora/adapter_internal.h"

#include "core/fsutil.h"
#include "formats/manifest.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Same strings as af_proj_name() (lora.c); kept here so this module does not need lora.c. */
const char *const af_adapter_proj_name[AF_PROJ_COUNT] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                         "gate_proj", "up_proj", "down_proj"};
const char *const af_adapter_proj_block[AF_PROJ_COUNT] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                          "mlp",       "mlp",       "mlp"};

const char *const AF_ADAPTER_FILES[AF_ADAPTER_N_FILES] = {AF_ADAPTER_WEIGHTS_FILE, AF_ADAPTER_CONFIG_FILE,
                                                         AF_ADAPTER_AFINAR_FILE};

/* Index of the first NaN/Inf of x [n], or -1. */
static int64_t first_nonfinite_f32(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* Shortest decimal that round-trips the float, as a double (so JSON shows 0.05, not 0.0500000007). */
static double clean_double(float x) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)x);
        if (strtof(buf, NULL) == x) return strtod(buf, NULL);
    }
    return (double)x;
}

static af_status write_json(const char *dir, const char *name, const cJSON *root) {
    char *path = af_path_join(dir, name);
    char *text = cJSON_Print(root);
    af_status st;
    if (!path || !text) st = af_fail(AF_ERR_NOMEM, "%s/%s: out of memory", dir, name);
    else {
        size_t n = strlen(text);
        text[n] = '\n'; /* replace the terminator: the file ends with a newline */
        st = af_write_file_atomic(path, text, n + 1);
    }
    free(path);
    free(text);
    return st;
}

static cJSON *targets_array(uint32_t mask) {
    cJSON *a = cJSON_CreateArray();
    for (int p = 0; a && p < AF_PROJ_COUNT; p++)
        if (mask & (1u << p)) cJSON_AddItemToArray(a, cJSON_CreateString(af_adapter_proj_name[p]));
    return a;
}

static cJSON *nullable_string(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

/* layers: JSON array for layers_to_transform (ownership taken), or NULL -> null. */
static cJSON *make_adapter_config(const af_param_layout *lay, const af_adapter_save_opts *o, const char *task,
                                  const char *head_module, uint32_t mask, cJSON *layers) {
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddItemToObject(c, "alpha_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(c, "auto_mapping", cJSON_CreateNull());
    cJSON_AddItemToObject(c, "base_model_name_or_path", nullable_string(o->base_model_name_or_path));
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddBoolToObject(c, "fan_in_fan_out", 0);
    cJSON_AddBoolToObject(c, "inference_mode", 1); /* save_pretrained always writes true */
    if (lay->init == AF_LORA_INIT_GAUSSIAN) cJSON_AddStringToObject(c, "init_lora_weights", "gaussian");
    else cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    cJSON_AddItemToObject(c, "layers_pattern", cJSON_CreateNull());
    cJSON_AddItemToObject(c, "layers_to_transform", layers ? layers : cJSON_CreateNull());
    cJSON_AddNumberToObject(c, "lora_alpha", clean_double(lay->lora.alpha));
    cJSON_AddBoolToObject(c, "lora_bias", 0);
    cJSON_AddNumberToObject(c, "lora_dropout", clean_double(lay->lora.dropout));
    if (lay->num_classes > 0) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(head_module));
        cJSON_AddItemToObject(c, "modules_to_save", m);
    } else {
        cJSON_AddItemToObject(c, "modules_to_save", cJSON_CreateNull());
    }
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddNumberToObject(c, "r", lay->lora.r);
    cJSON_AddItemToObject(c, "rank_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(c, "revision", cJSON_CreateNull());
    cJSON_AddItemToObject(c, "target_modules", targets_array(mask));
    cJSON_AddStringToObject(c, "task_type", task);
    cJSON_AddBoolToObject(c, "use_dora", lay->lora.use_dora != 0);
    cJSON_AddBoolToObject(c, "use_rslora", lay->lora.use_rslora != 0);
    return c;
}

static cJSON *make_afinar_json(const af_param_layout *lay, const af_adapter_save_opts *o, uint32_t mask) {
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "format", "afinar-adapter");
    cJSON_AddNumberToObject(c, "version", 2);
    cJSON_AddStringToObject(c, "qk_row_order", "hf"); /* version >= 2: B rows of q/k in HF order */
    if (o->architecture) cJSON_AddStringToObject(c, "architecture", o->architecture);
    cJSON_AddNumberToObject(c, "n_layers", lay->n_layers);
    cJSON_AddNumberToObject(c, "num_classes", lay->num_classes);
    cJSON_AddNumberToObject(c, "hidden", lay->hidden);
    if (o->labels) {
        cJSON *a = cJSON_CreateArray();
        for (int32_t i = 0; i < o->n_labels; i++) cJSON_AddItemToArray(a, cJSON_CreateString(o->labels[i]));
        cJSON_AddItemToObject(c, "labels", a);
    }
    if (o->pooling) cJSON_AddStringToObject(c, "pooling", o->pooling);
    if (o->max_seq_len > 0) cJSON_AddNumberToObject(c, "max_seq_len", o->max_seq_len);
    cJSON_AddBoolToObject(c, "head_bias", o->write_head_bias != 0);
    cJSON_AddStringToObject(c, "manifest", AF_MANIFEST_FILE); /* written last (by the caller when it adds files) */
    cJSON *l = cJSON_AddObjectToObject(c, "lora");
    if (l) {
        cJSON_AddNumberToObject(l, "r", lay->lora.r);
        cJSON_AddNumberToObject(l, "alpha", clean_double(lay->lora.alpha));
        cJSON_AddNumberToObject(l, "dropout", clean_double(lay->lora.dropout));
        cJSON_AddBoolToObject(l, "use_rslora", lay->lora.use_rslora != 0);
        if (lay->lora.use_dora) cJSON_AddBoolToObject(l, "use_dora", 1);
        cJSON_AddNumberToObject(l, "scale", clean_double(lay->scale));
        cJSON_AddItemToObject(l, "targets", targets_array(mask));
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, o->extra) {
        cJSON *dup = cJSON_Duplicate(e, 1);
        if (!dup) {
            cJSON_Delete(c);
            return NULL;
        }
        if (cJSON_GetObjectItemCaseSensitive(c, e->string)) cJSON_ReplaceItemInObjectCaseSensitive(c, e->string, dup);
        else cJSON_AddItemToObject(c, e->string, dup);
    }
    return c;
}

int af_adapter_qk_permuted(const char *architecture) {
    return architecture && strcmp(architecture, "llama") == 0;
}

int64_t af_adapter_qk_hf_row(int64_t row, int64_t head_dim) {
    const int64_t h = row / head_dim, w = row % head_dim; /* w = GGUF row in the head = 2b + a */
    return h * head_dim + (w % 2) * (head_dim / 2) + w / 2; /* HF row a*hd/2 + b */
}

void af_adapter_qk_rows(float *B, int64_t n_heads, int64_t head_dim, int64_t r, int to_hf, float *tmp) {
    const size_t row = (size_t)r * sizeof(float);
    for (int64_t h = 0; h < n_heads; h++) {
        float *hb = B + h * head_dim * r;
        memcpy(tmp, hb, (size_t)head_dim * row);
        for (int64_t w = 0; w < head_dim; w++) { /* w: GGUF row in the head */
            const int64_t hf = af_adapter_qk_hf_row(w, head_dim);
            if (to_hf) memcpy(hb + hf * r, tmp + w * r, row);
            else memcpy(hb + w * r, tmp + hf * r, row);
        }
    }
}

void af_adapter_restrict_layout(af_param_layout *lay, const af_adapter_info *info) {
    if (!lay || !info || !info->layers_to_transform) return;
    for (int32_t l = 0; l < lay->n_layers; l++) {
        int listed = 0;
        for (int32_t i = 0; i < info->n_layers_to_transform; i++) listed |= info->layers_to_transform[i] == l;
        if (listed) continue;
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            af_lora_slot *s = &lay->slots[(int64_t)l * AF_PROJ_COUNT + p];
            s->a_off = s->b_off = -1;
        }
    }
}

af_status af_adapter_qk_heads(const char *where, int32_t layer, int p, int64_t out, int32_t n_head, int32_t n_kv_head,
                          int32_t head_dim, int64_t *nh) {
    *nh = p == AF_PROJ_Q ? n_head : n_kv_head;
    if (head_dim <= 0 || head_dim % 2 || *nh <= 0 || *nh * head_dim != out)
        return af_fail(AF_ERR_INVALID_ARG,
                       "%s: layer %d %s: %lld rows, but %s = %lld and head_dim = %d (even) are needed for the llama "
                       "q/k row order (set n_head, n_kv_head, head_dim)",
                       where, layer, af_adapter_proj_name[p], (long long)out, p == AF_PROJ_Q ? "n_head" : "n_kv_head",
                       (long long)*nh, head_dim);
    return AF_OK;
}

/* The tensors of adapter_model.safetensors being listed: names in one buffer, the q/k rows moved to
 * PEFT's order in another, the projections and layers seen. */
typedef struct save_list {
    af_st_write_tensor *t;
    char *names;
    size_t name_len, n;
    float *pnext, *ptmp;       /* next free float of the permuted copies; scratch of af_adapter_qk_rows */
    uint32_t mask;             /* projections with an adapter */
    unsigned char *has_layer;  /* [n_layers]: layers with an adapter */
} save_list;

/* Floats of the q/k rows to permute (B and DoRA magnitudes of q/k), checking the head geometry. */
static af_status perm_floats(const char *dir, const af_param_layout *lay, const af_adapter_save_opts *o, int perm,
                             size_t *n_perm) {
    const int32_t r = lay->lora.r;
    const int dora = lay->lora.use_dora != 0;
    *n_perm = 0;
    for (int32_t l = 0; perm && l < lay->n_layers; l++)
        for (int p = AF_PROJ_Q; p <= AF_PROJ_K; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            int64_t nh;
            if (s->a_off < 0 || s->out <= 0) continue;
            AF_TRY(af_adapter_qk_heads(dir, l, p, s->out, o->n_head, o->n_kv_head, o->head_dim, &nh));
            *n_perm += (size_t)s->out * (size_t)(r + (dora ? 1 : 0));
        }
    return AF_OK;
}

/* Every adapted slot's lora_A, lora_B (and DoRA magnitude) under PEFT's names (prefix lp), refusing
 * a bad slot or a non-finite value; q/k rows in PEFT's order when perm. */
static af_status list_slots(const char *dir, const af_param_layout *lay, const float *P, const af_adapter_save_opts *o,
                            const char *lp, af_st_dtype dt, int perm, save_list *L) {
    const int32_t r = lay->lora.r;
    const int dora = lay->lora.use_dora != 0; /* + lora_magnitude_vector [out] per slot */
    for (int32_t l = 0; l < lay->n_layers; l++) {
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            if (s->in <= 0 || s->out <= 0 || s->b_off < 0 || s->a_off + r * s->in > lay->n_total ||
                s->b_off + s->out * r > lay->n_total || (dora && (s->m_off < 0 || s->m_off + s->out > lay->n_total)))
                return af_fail(AF_ERR_INVALID_ARG, "%s: layout: layer %d %s: bad slot (in %lld, out %lld)", dir, l,
                               af_adapter_proj_name[p], (long long)s->in, (long long)s->out);
            L->mask |= 1u << p;
            L->has_layer[l] = 1;
            for (int ab = 0; ab < 2 + dora; ab++) {
                af_st_write_tensor *t = &L->t[L->n];
                char *nm = L->names + L->n * L->name_len;
                if (ab == 2) /* PEFT's DoRA magnitude: 1-D, no ".weight" */
                    snprintf(nm, L->name_len, "%s.%d.%s.%s.lora_magnitude_vector", lp, l, af_adapter_proj_block[p],
                             af_adapter_proj_name[p]);
                else
                    snprintf(nm, L->name_len, "%s.%d.%s.%s.lora_%c.weight", lp, l, af_adapter_proj_block[p],
                             af_adapter_proj_name[p], ab ? 'B' : 'A');
                t->name = nm;
                t->dtype = dt;
                t->n_dims = ab == 2 ? 1 : 2;
                t->shape[0] = ab ? s->out : r;
                t->shape[1] = ab == 2 ? 1 : ab ? r : s->in;
                t->f32 = P + (ab == 2 ? s->m_off : ab ? s->b_off : s->a_off);
                const int64_t bad = first_nonfinite_f32(t->f32, t->shape[0] * t->shape[1]);
                if (bad >= 0) /* a diverged run's parameters: never written as an adapter */
                    return af_fail(AF_ERR_RANGE, "%s: not saved: %s element %lld is not finite (NaN or Inf)", dir, nm,
                                   (long long)bad);
                if (ab && perm && (p == AF_PROJ_Q || p == AF_PROJ_K)) {
                    const int32_t w = ab == 2 ? 1 : r; /* columns of the rows moved */
                    memcpy(L->pnext, t->f32, (size_t)s->out * (size_t)w * sizeof(float));
                    af_adapter_qk_rows(L->pnext, s->out / o->head_dim, o->head_dim, w, 1, L->ptmp);
                    t->f32 = L->pnext;
                    L->pnext += (size_t)s->out * (size_t)w;
                }
                L->n++;
            }
        }
    }
    return AF_OK;
}

/* The classification head (prefix hp): its weight, and its bias when asked; refused when not finite. */
static af_status list_head(const char *dir, const af_param_layout *lay, const float *P, const af_adapter_save_opts *o,
                           const char *hp, af_st_dtype dt, save_list *L) {
    if (lay->num_classes <= 0 || lay->head_w_off < 0) return AF_OK;
    char *nm = L->names + L->n * L->name_len;
    snprintf(nm, L->name_len, "%s.weight", hp);
    L->t[L->n] = (af_st_write_tensor){.name = nm, .dtype = dt, .n_dims = 2, .f32 = P + lay->head_w_off};
    L->t[L->n].shape[0] = lay->num_classes;
    L->t[L->n].shape[1] = lay->hidden;
    L->n++;
    if (o->write_head_bias && lay->head_b_off >= 0) {
        nm = L->names + L->n * L->name_len;
        snprintf(nm, L->name_len, "%s.bias", hp);
        L->t[L->n] = (af_st_write_tensor){.name = nm, .dtype = dt, .n_dims = 1, .f32 = P + lay->head_b_off};
        L->t[L->n].shape[0] = lay->num_classes;
        L->n++;
    }
    const int64_t bw = first_nonfinite_f32(P + lay->head_w_off, (int64_t)lay->num_classes * lay->hidden);
    const int64_t bb = o->write_head_bias && lay->head_b_off >= 0
                           ? first_nonfinite_f32(P + lay->head_b_off, lay->num_classes) : -1;
    if (bw >= 0 || bb >= 0)
        return af_fail(AF_ERR_RANGE, "%s: not saved: %s.%s element %lld is not finite (NaN or Inf)", dir, hp,
                       bw >= 0 ? "weight" : "bias", (long long)(bw >= 0 ? bw : bb));
    return AF_OK;
}

/* adapter_config.json (layers_to_transform when some layers have adapters and others not),
 * afinar.json, then the manifest unless the caller writes it. */
static af_status write_configs(const char *dir, const af_param_layout *lay, const af_adapter_save_opts *o,
                               const char *task, const char *hm, uint32_t mask, const unsigned char *has_layer) {
    int32_t n_with = 0;
    for (int32_t l = 0; l < lay->n_layers; l++) n_with += has_layer[l];
    cJSON *layers = NULL;
    if (n_with > 0 && n_with < lay->n_layers) {
        layers = cJSON_CreateArray();
        for (int32_t l = 0; layers && l < lay->n_layers; l++)
            if (has_layer[l]) cJSON_AddItemToArray(layers, cJSON_CreateNumber(l));
    }
    cJSON *cfg = make_adapter_config(lay, o, task, hm, mask, layers);
    if (!cfg) {
        cJSON_Delete(layers);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    }
    af_status st = write_json(dir, AF_ADAPTER_CONFIG_FILE, cfg);
    cJSON_Delete(cfg);
    if (st != AF_OK) return st;
    cJSON *af = make_afinar_json(lay, o, mask);
    if (!af) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    st = write_json(dir, AF_ADAPTER_AFINAR_FILE, af);
    cJSON_Delete(af);
    if (st == AF_OK && !o->caller_writes_manifest) st = af_manifest_write(dir, AF_ADAPTER_FILES, AF_ADAPTER_N_FILES);
    return st;
}

af_status af_adapter_save(const char *dir, const af_param_layout *lay, const float *P,
                          const af_adapter_save_opts *opts) {
    af_adapter_save_opts zero = {0};
    const af_adapter_save_opts *o = opts ? opts : &zero;
    if (!dir || !*dir || !lay || !P) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_save: NULL argument");
    if (lay->init_P) { /* PiSSA / OLoRA: written as the plain rank-2r LoRA of the original weights */
        af_param_layout plain;
        float *Q = NULL;
        AF_TRY(af_lora_residual_layout(lay, P, &plain, &Q));
        af_status st = af_adapter_save(dir, &plain, Q, opts);
        free(Q);
        af_param_layout_free(&plain);
        return st;
    }
    if (lay->lora.r <= 0 || lay->n_layers < 0 || !lay->slots)
        return af_fail(AF_ERR_INVALID_ARG, "%s: layout: r = %d, n_layers = %d", dir, lay->lora.r, lay->n_layers);
    if (o->labels && o->n_labels != lay->num_classes)
        return af_fail(AF_ERR_INVALID_ARG, "%s: %d labels given for %d classes", dir, o->n_labels, lay->num_classes);
    if (o->extra && !cJSON_IsObject(o->extra))
        return af_fail(AF_ERR_INVALID_ARG, "%s: extra afinar.json fields must be a JSON object", dir);
    const char *lp = o->layers_prefix ? o->layers_prefix : AF_ADAPTER_DEFAULT_LAYERS_PREFIX;
    const char *hp = o->head_prefix ? o->head_prefix : AF_ADAPTER_DEFAULT_HEAD_PREFIX;
    const char *hm = strrchr(hp, '.') ? strrchr(hp, '.') + 1 : hp;
    const char *task = o->task_type ? o->task_type : lay->num_classes > 0 ? "SEQ_CLS" : "CAUSAL_LM";
    af_st_dtype dt = (o->dtype == AF_ST_F16 || o->dtype == AF_ST_BF16) ? o->dtype : AF_ST_F32;

    /* q/k rows GGUF -> HF: permuted copies of the q/k B matrices (and DoRA magnitudes), in slot order. */
    const int perm = af_adapter_qk_permuted(o->architecture) && (o->n_head || o->n_kv_head || o->head_dim);
    size_t n_perm = 0;
    AF_TRY(perm_floats(dir, lay, o, perm, &n_perm));
    const size_t cap = (size_t)lay->n_layers * AF_PROJ_COUNT * 3 + 2;
    save_list L = {0};
    L.name_len = strlen(lp) + strlen(hp) + 96;
    L.t = af_calloc(cap, sizeof *L.t);
    L.names = af_calloc(cap, L.name_len);
    float *pbuf = n_perm ? af_malloc((n_perm + (size_t)o->head_dim * (size_t)lay->lora.r) * sizeof(float)) : NULL;
    L.has_layer = af_calloc((size_t)lay->n_layers + 1, 1);
    if (!L.t || !L.names || (n_perm && !pbuf) || !L.has_layer) {
        free(L.t);
        free(L.names);
        free(pbuf);
        free(L.has_layer);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    }
    L.pnext = pbuf, L.ptmp = pbuf ? pbuf + n_perm : NULL;
    af_status st = list_slots(dir, lay, P, o, lp, dt, perm, &L);
    if (st == AF_OK) st = list_head(dir, lay, P, o, hp, dt, &L);
    if (st == AF_OK) st = af_mkdir_p(dir);
    char *path = st == AF_OK ? af_path_join(dir, AF_ADAPTER_WEIGHTS_FILE) : NULL;
    if (st == AF_OK && !path) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    static const char *const meta_k[] = {"format"}, *const meta_v[] = {"pt"}; /* as PEFT writes */
    if (st == AF_OK) st = af_st_write(path, L.t, L.n, meta_k, meta_v, 1);
    free(path);
    free(L.t);
    free(L.names);
    free(pbuf);
    if (st == AF_OK) st = write_configs(dir, lay, o, task, hm, L.mask, L.has_layer);
    free(L.has_layer);
    return st;
}
