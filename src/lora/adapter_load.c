/*
 * adapter_load.c — reading PEFT-compatible LoRA adapter directories: adapter_config.json (and
 * afinar.json), the tensor names of adapter_model.safetensors mapped to layers and projections,
 * the weights loaded into a layout (adapter_io.h; facts from peft 0.21.2: utils/save_and_load.py
 * set_peft_model_state_dict, tuners/lora/config.py LoraConfig). Writing: adapter_io.c.
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

#define MAX_JSON_FILE (64u << 20)

void af_adapter_info_free(af_adapter_info *info) {
    if (!info) return;
    free(info->peft_type);
    free(info->task_type);
    free(info->base_model);
    free(info->layers_to_transform);
    free(info->architecture);
    cJSON_Delete(info->afinar);
    memset(info, 0, sizeof *info);
}

/* Read and parse a JSON file; *out NULL with AF_OK when `optional` and the file is missing. */
static af_status read_json(const char *dir, const char *name, int optional, cJSON **out) {
    *out = NULL;
    char *path = af_path_join(dir, name);
    if (!path) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    af_status st = AF_OK;
    FILE *fp = af_fopen_regular(path, NULL); /* records "<path>: cannot open: ..." / "not a regular file" */
    char *text = NULL;
    if (!fp) {
        st = (optional && errno == ENOENT) ? AF_OK : AF_ERR_IO;
        free(path);
        return st;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > MAX_JSON_FILE)
        st = af_fail(AF_ERR_FORMAT, "%s: unreadable or larger than %u bytes", path, MAX_JSON_FILE);
    size_t n = st == AF_OK ? (size_t)sb.st_size : 0;
    if (st == AF_OK && !(text = af_malloc(n + 1))) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    if (st == AF_OK && fread(text, 1, n, fp) != n) st = af_fail(AF_ERR_IO, "%s: short read", path);
    fclose(fp);
    if (st == AF_OK) {
        text[n] = '\0';
        const char *end = NULL;
        *out = cJSON_ParseWithLengthOpts(text, n, &end, 0);
        if (!*out)
            st = af_fail(AF_ERR_FORMAT, "%s: malformed JSON at offset %zu", path, end ? (size_t)(end - text) : 0);
        else if (!cJSON_IsObject(*out)) {
            st = af_fail(AF_ERR_FORMAT, "%s: top level is not a JSON object", path);
            cJSON_Delete(*out);
            *out = NULL;
        }
    }
    free(text);
    free(path);
    return st;
}

static af_status dup_str(char **dst, const char *s, const char *dir) {
    if (!s) return AF_OK;
    *dst = strdup(s);
    return *dst ? AF_OK : af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
}

/* Fields of adapter_config.json. */
static af_status parse_config(const char *dir, const cJSON *c, af_adapter_info *info) {
    const char *F = AF_ADAPTER_CONFIG_FILE;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "peft_type");
    if (!cJSON_IsString(v)) return af_fail(AF_ERR_FORMAT, "%s/%s: peft_type: missing or not a string", dir, F);
    AF_TRY(dup_str(&info->peft_type, v->valuestring, dir));
    if (strcmp(v->valuestring, "LORA") != 0)
        return af_fail(AF_ERR_UNSUPPORTED, "%s/%s: peft_type: \"%s\" (only LORA is supported)", dir, F, v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(c, "task_type");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return af_fail(AF_ERR_FORMAT, "%s/%s: task_type: not a string", dir, F);
    if (cJSON_IsString(v)) AF_TRY(dup_str(&info->task_type, v->valuestring, dir));
    v = cJSON_GetObjectItemCaseSensitive(c, "base_model_name_or_path");
    if (cJSON_IsString(v)) AF_TRY(dup_str(&info->base_model, v->valuestring, dir));

    v = cJSON_GetObjectItemCaseSensitive(c, "r");
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e6 || floor(v->valuedouble) != v->valuedouble)
        return af_fail(AF_ERR_FORMAT, "%s/%s: r: missing or not a positive integer", dir, F);
    info->r = (int32_t)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha");
    if (!v) info->alpha = 8.0f; /* LoraConfig default */
    else if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return af_fail(AF_ERR_FORMAT, "%s/%s: lora_alpha: not a positive number", dir, F);
    else info->alpha = (float)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(c, "lora_dropout");
    if (v && (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1)))
        return af_fail(AF_ERR_FORMAT, "%s/%s: lora_dropout: not a number in [0, 1)", dir, F);
    info->dropout = v ? (float)v->valuedouble : 0.0f;

    v = cJSON_GetObjectItemCaseSensitive(c, "init_lora_weights");
    if (cJSON_IsString(v)) { /* these inits rewrite the base weights: the adapter holds only a part of ΔW */
        static const char *const mutated[] = {"pissa", "olora", "corda", "loftq"};
        for (size_t i = 0; i < sizeof mutated / sizeof *mutated; i++)
            if (!strncmp(v->valuestring, mutated[i], strlen(mutated[i])))
                return af_fail(AF_ERR_UNSUPPORTED,
                               "%s/%s: init_lora_weights \"%.40s\": the adapter is relative to the base weights "
                               "PEFT rewrote at initialisation (a residual model), not to the base model; save it with "
                               "PEFT's save_pretrained(path_initial_model_for_weight_conversion=...) to get a plain "
                               "LoRA adapter of the base", dir, F, v->valuestring);
    }
    v = cJSON_GetObjectItemCaseSensitive(c, "use_dora");
    if (v && !cJSON_IsBool(v)) return af_fail(AF_ERR_FORMAT, "%s/%s: use_dora: not a boolean", dir, F);
    info->use_dora = cJSON_IsTrue(v);
    static const char *const flags_off[] = {"fan_in_fan_out", "lora_bias"};
    for (size_t i = 0; i < sizeof flags_off / sizeof *flags_off; i++) {
        v = cJSON_GetObjectItemCaseSensitive(c, flags_off[i]);
        if (v && !cJSON_IsBool(v)) return af_fail(AF_ERR_FORMAT, "%s/%s: %s: not a boolean", dir, F, flags_off[i]);
        if (cJSON_IsTrue(v)) return af_fail(AF_ERR_UNSUPPORTED, "%s/%s: %s: true is not supported", dir, F, flags_off[i]);
    }
    v = cJSON_GetObjectItemCaseSensitive(c, "use_rslora");
    if (v && !cJSON_IsBool(v)) return af_fail(AF_ERR_FORMAT, "%s/%s: use_rslora: not a boolean", dir, F);
    info->use_rslora = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(c, "bias");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0))
        return af_fail(AF_ERR_UNSUPPORTED, "%s/%s: bias: only \"none\" is supported", dir, F);
    v = cJSON_GetObjectItemCaseSensitive(c, "layers_to_transform");
    if (v && !cJSON_IsNull(v)) {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
        if (!cJSON_IsArray(v) && !cJSON_IsNumber(v))
            return af_fail(AF_ERR_FORMAT, "%s/%s: layers_to_transform: not an integer or a list", dir, F);
        if (n > 0) {
            info->layers_to_transform = af_calloc((size_t)n, sizeof(int32_t));
            if (!info->layers_to_transform) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
            const cJSON *e = cJSON_IsArray(v) ? v->child : v;
            for (int i = 0; i < n; i++, e = e->next) {
                if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e6 ||
                    floor(e->valuedouble) != e->valuedouble)
                    return af_fail(AF_ERR_FORMAT, "%s/%s: layers_to_transform[%d]: not a layer index", dir, F, i);
                int32_t x = (int32_t)e->valuedouble, k = info->n_layers_to_transform;
                while (k > 0 && info->layers_to_transform[k - 1] > x) { /* insertion: ascending */
                    info->layers_to_transform[k] = info->layers_to_transform[k - 1];
                    k--;
                }
                info->layers_to_transform[k] = x;
                info->n_layers_to_transform++;
            }
        }
    }
    static const char *const patterns[] = {"rank_pattern", "alpha_pattern"};
    for (size_t i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(c, patterns[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && !v->child))
            return af_fail(AF_ERR_UNSUPPORTED, "%s/%s: %s: per-module ranks/alphas are not supported", dir, F,
                           patterns[i]);
    }
    return AF_OK;
}

/* What a tensor name means. kind: 0 unknown, 1 LoRA A, 2 LoRA B, 3 head weight, 4 head bias. */
typedef struct name_map {
    int kind;
    int32_t layer;
    af_proj proj;
} name_map;

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0 && (a == b || s[a - b - 1] == '.');
}

static name_map map_name(const char *name) {
    name_map m = {0, -1, AF_PROJ_Q};
    static const char *const heads[] = {"score", "classifier"};
    for (int h = 0; h < 2; h++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%s.weight", heads[h]);
        if (ends_with(name, buf)) return (name_map){3, -1, AF_PROJ_Q};
        snprintf(buf, sizeof buf, "%s.bias", heads[h]);
        if (ends_with(name, buf)) return (name_map){4, -1, AF_PROJ_Q};
    }
    /* last "layers." that starts a component */
    const char *at = NULL;
    for (const char *p = strstr(name, "layers."); p; p = strstr(p + 1, "layers."))
        if (p == name || p[-1] == '.') at = p;
    if (!at) return m;
    const char *p = at + 7;
    char *end;
    if (*p < '0' || *p > '9') return m;
    errno = 0;
    long layer = strtol(p, &end, 10);
    if (errno || layer > 1000000 || *end != '.') return m;
    p = end + 1;
    for (int q = 0; q < AF_PROJ_COUNT; q++) {
        size_t lb = strlen(af_adapter_proj_block[q]), ln = strlen(af_adapter_proj_name[q]);
        if (strncmp(p, af_adapter_proj_block[q], lb) || p[lb] != '.' || strncmp(p + lb + 1, af_adapter_proj_name[q], ln)) continue;
        const char *rest = p + lb + 1 + ln;
        if (strcmp(rest, ".lora_A.weight") == 0) return (name_map){1, (int32_t)layer, (af_proj)q};
        if (strcmp(rest, ".lora_B.weight") == 0) return (name_map){2, (int32_t)layer, (af_proj)q};
        if (strcmp(rest, ".lora_magnitude_vector") == 0 || strcmp(rest, ".lora_magnitude_vector.weight") == 0)
            return (name_map){5, (int32_t)layer, (af_proj)q}; /* DoRA (PEFT writes it without ".weight") */
    }
    return m;
}

int af_adapter_tensor_role(const char *name, int32_t *layer, af_proj *proj) {
    if (!name) return 0;
    name_map m = map_name(name);
    if (layer) *layer = m.layer;
    if (proj) *proj = m.proj;
    return m.kind;
}

static int readable_dtype(af_st_dtype d) {
    return d == AF_ST_F32 || d == AF_ST_F16 || d == AF_ST_BF16 || d == AF_ST_F64;
}

/* Index of the first NaN/Inf element of a readable float tensor (raw bytes, little-endian), or -1.
 * Checked on the file's own dtype so that P is written only after every check passed. */
static int64_t first_nonfinite(const af_st_tensor *t) {
    const uint8_t *d = t->data;
    for (uint64_t i = 0; i < t->n_elem; i++) {
        int bad = 0;
        if (t->dtype == AF_ST_F32) {
            uint32_t u;
            memcpy(&u, d + 4 * i, 4);
            bad = (u & 0x7f800000u) == 0x7f800000u;
        } else if (t->dtype == AF_ST_F16) {
            uint16_t u;
            memcpy(&u, d + 2 * i, 2);
            bad = (u & 0x7c00u) == 0x7c00u;
        } else if (t->dtype == AF_ST_BF16) {
            uint16_t u;
            memcpy(&u, d + 2 * i, 2);
            bad = (u & 0x7f80u) == 0x7f80u;
        } else if (t->dtype == AF_ST_F64) {
            uint64_t u;
            memcpy(&u, d + 8 * i, 8);
            bad = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
        }
        if (bad) return (int64_t)i;
    }
    return -1;
}

/* Info from an open weights file. */
static af_status scan_tensors(const af_st_file *f, af_adapter_info *info) {
    info->n_layers = 0;
    info->targets = 0;
    for (size_t i = 0; i < af_st_count(f); i++) {
        const af_st_tensor *t = af_st_tensor_at(f, i);
        name_map m = map_name(t->name);
        if (m.kind == 1 || m.kind == 2) {
            info->targets |= 1u << m.proj;
            if (m.layer + 1 > info->n_layers) info->n_layers = m.layer + 1;
        } else if (m.kind == 3) {
            if (t->n_dims != 2 || t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX)
                return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': head weight must be 2-D [num_classes, hidden]",
                               af_st_path(f), t->name);
            info->num_classes = (int32_t)t->shape[0];
            info->hidden = (int32_t)t->shape[1];
        } else if (m.kind == 4) {
            info->has_head_bias = 1;
        }
    }
    return AF_OK;
}

static af_status open_weights(const char *dir, af_st_file **f) {
    char *path = af_path_join(dir, AF_ADAPTER_WEIGHTS_FILE);
    if (!path) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    struct stat sb;
    af_status st;
    if (stat(path, &sb) != 0) {
        char *bin = af_path_join(dir, "adapter_model.bin");
        struct stat sb2;
        if (bin && stat(bin, &sb2) == 0)
            st = af_fail(AF_ERR_UNSUPPORTED, "%s: only adapter_model.bin (pickle) found; re-save the adapter with "
                                             "safe_serialization=True", dir);
        else
            st = af_fail(AF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        free(bin);
    } else {
        st = af_st_open(path, f);
    }
    free(path);
    return st;
}

static af_status read_info_open(const char *dir, af_adapter_info *info, af_st_file **fout) {
    memset(info, 0, sizeof *info);
    *fout = NULL;
    cJSON *cfg = NULL;
    int verified = 0; /* every file checked against manifest.json before any of it is parsed */
    struct stat sd;
    if (stat(dir, &sd) == 0 && !S_ISDIR(sd.st_mode)) /* not a LoRA GGUF (checked first) and not a directory */
        return af_fail(AF_ERR_IO, "%s: not an adapter directory or LoRA GGUF file (%s)", dir,
                       S_ISREG(sd.st_mode) ? "a file of another kind" : af_file_kind((unsigned)sd.st_mode));
    af_status st = af_manifest_verify(dir, AF_ADAPTER_FILES, AF_ADAPTER_N_FILES, &verified);
    if (st == AF_OK) st = read_json(dir, AF_ADAPTER_CONFIG_FILE, 0, &cfg);
    if (st == AF_OK) st = parse_config(dir, cfg, info);
    cJSON_Delete(cfg);
    if (st == AF_OK) st = read_json(dir, AF_ADAPTER_AFINAR_FILE, 1, &info->afinar);
    if (st == AF_OK && !verified && info->afinar &&
        cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info->afinar, "manifest")))
        st = af_fail(AF_ERR_IO, "%s: %s is missing, but %s says the directory was written with one (a file was lost: "
                                "an incomplete copy?); copy the directory again, or delete the \"manifest\" field of "
                                "%s to use it unverified", dir, AF_MANIFEST_FILE, AF_ADAPTER_AFINAR_FILE,
                     AF_ADAPTER_AFINAR_FILE);
    if (st == AF_OK && info->afinar) {
        const cJSON *ord = cJSON_GetObjectItemCaseSensitive(info->afinar, "qk_row_order");
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(info->afinar, "format");
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(info->afinar, "version");
        if (cJSON_IsString(ord)) {
            if (!strcmp(ord->valuestring, "gguf")) info->qk_rows_gguf = 1;
            else if (strcmp(ord->valuestring, "hf") != 0)
                st = af_fail(AF_ERR_FORMAT, "%s/%s: qk_row_order: \"%s\" (hf or gguf)", dir, AF_ADAPTER_AFINAR_FILE,
                             ord->valuestring);
        } else if (cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "afinar-adapter") && cJSON_IsNumber(ver) &&
                   ver->valuedouble < 2) {
            info->qk_rows_gguf = 1; /* written before the HF-order export existed */
        }
    }
    if (st == AF_OK) st = open_weights(dir, fout);
    if (st == AF_OK) st = scan_tensors(*fout, info);
    if (st != AF_OK) {
        af_st_close(*fout);
        *fout = NULL;
        af_adapter_info_free(info);
    }
    return st;
}

af_status af_adapter_read_info(const char *dir, af_adapter_info *info) {
    if (!dir || !info) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_read_info: NULL argument");
    if (af_adapter_is_gguf(dir)) return af_adapter_gguf_read_info(dir, info); /* LoRA GGUF / merged model */
    af_st_file *f = NULL;
    AF_TRY(read_info_open(dir, info, &f));
    af_st_close(f);
    return AF_OK;
}

/* Append "name" to a bounded comma list used in error messages. */
static void note(char *buf, size_t cap, size_t *count, const char *name) {
    if (*count < 4) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", l ? ", " : "", name);
    }
    (*count)++;
}

static int shape_is(const af_st_tensor *t, int64_t d0, int64_t d1, int nd) {
    return t->n_dims == nd && t->shape[0] == d0 && (nd == 1 || t->shape[1] == d1);
}

/* A PiSSA / OLoRA layout (lay->init_P): the file is the rank-2r plain LoRA af_adapter_save writes for it
 * (af_lora_residual_layout); its second half must be this model's −A0, B0, its first half is the
 * trained A, B. */
static af_status load_residual(const char *dir, const af_param_layout *lay, float *P, const af_adapter_load_opts *lo,
                               af_adapter_info *info_out) {
    af_param_layout plain;
    AF_TRY(af_lora_residual_layout(lay, NULL, &plain, NULL));
    float *Q = af_calloc((size_t)(plain.n_total > 0 ? plain.n_total : 1), sizeof(float));
    af_status st = Q ? af_adapter_load(dir, &plain, Q, lo, info_out) : af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    const int32_t r = lay->lora.r, r2 = 2 * r;
    const int64_t nslot = (int64_t)lay->n_layers * AF_PROJ_COUNT;
    int64_t bad = -1; /* the first slot whose frozen half is not this model's initialisation */
    for (int64_t k = 0; st == AF_OK && k < nslot && bad < 0; k++) {
        const af_lora_slot *s = &lay->slots[k], *d = &plain.slots[k];
        if (s->a_off < 0) continue;
        const int64_t na = (int64_t)r * s->in;
        for (int64_t i = 0; i < na && bad < 0; i++) {
            const float want = -lay->init_P[s->a_off + i];
            if (fabsf(Q[d->a_off + na + i] - want) > 1e-5f * (1.0f + fabsf(want))) bad = k;
        }
        for (int64_t o = 0; o < s->out && bad < 0; o++)
            for (int32_t j = 0; j < r; j++) {
                const float want = lay->init_P[s->b_off + o * r + j];
                if (fabsf(Q[d->b_off + o * r2 + r + j] - want) > 1e-5f * (1.0f + fabsf(want))) bad = k;
            }
        if (bad >= 0) break;
        memcpy(P + s->a_off, Q + d->a_off, sizeof(float) * (size_t)na);
        for (int64_t o = 0; o < s->out; o++) memcpy(P + s->b_off + o * r, Q + d->b_off + o * r2, sizeof(float) * (size_t)r);
    }
    if (st == AF_OK && bad >= 0)
        st = af_fail(AF_ERR_INVALID_ARG, "%s: layer %lld %s: the adapter's frozen half (B0, -A0: rank %d..%d) is not this "
                     "model's %s initialisation (an adapter of another base model, or not of a %s run?)", dir,
                     (long long)(bad / AF_PROJ_COUNT), af_adapter_proj_name[bad % AF_PROJ_COUNT], r, r2 - 1,
                     lay->init == AF_LORA_INIT_PISSA ? "pissa" : "olora", lay->init == AF_LORA_INIT_PISSA ? "pissa" : "olora");
    if (st == AF_OK && lay->head_w_off >= 0)
        memcpy(P + lay->head_w_off, Q + plain.head_w_off,
               sizeof(float) * (size_t)((int64_t)lay->num_classes * lay->hidden + lay->num_classes));
    if (st != AF_OK && info_out && Q && bad >= 0) af_adapter_info_free(info_out);
    free(Q);
    af_param_layout_free(&plain);
    return st;
}

/* The adapter's config against the layout: rank, alpha, rsLoRA and DoRA must agree. */
static af_status check_config(const char *dir, const af_adapter_info *info, const af_param_layout *lay) {
    if (info->r != lay->lora.r)
        return af_fail(AF_ERR_INVALID_ARG, "%s/%s: r = %d but the layout has r = %d", dir, AF_ADAPTER_CONFIG_FILE,
                       info->r, lay->lora.r);
    if (fabsf(info->alpha - lay->lora.alpha) > 1e-6f * fabsf(lay->lora.alpha))
        return af_fail(AF_ERR_INVALID_ARG, "%s/%s: lora_alpha = %g but the layout has %g", dir, AF_ADAPTER_CONFIG_FILE,
                       (double)info->alpha, (double)lay->lora.alpha);
    if (!info->use_rslora != !lay->lora.use_rslora)
        return af_fail(AF_ERR_INVALID_ARG, "%s/%s: use_rslora = %s but the layout has %s", dir, AF_ADAPTER_CONFIG_FILE,
                       info->use_rslora ? "true" : "false", lay->lora.use_rslora ? "true" : "false");
    if (!info->use_dora != !lay->lora.use_dora)
        return af_fail(AF_ERR_INVALID_ARG, "%s/%s: use_dora = %s but the layout has %s", dir, AF_ADAPTER_CONFIG_FILE,
                       info->use_dora ? "true" : "false", lay->lora.use_dora ? "true" : "false");
    return AF_OK;
}

/* The file's tensors matched to the layout: src [nslots*3 + 2] (A, B, DoRA m per slot, then head
 * W, b), unexpected names collected. */
typedef struct load_match {
    const af_st_tensor **src;
    size_t nslots;
    char unexpected[512];
    size_t n_unexp;
} load_match;

/* The shape error of tensor t (kind m.kind) expected [e0, e1] (or [e0]); a LoRA tensor whose rank
 * matches belongs to another model's projection (named when the config says which). */
static af_status shape_error(const char *W, const af_st_tensor *t, name_map m, int64_t e0, int64_t e1, int32_t r,
                             const af_adapter_info *info) {
    char got[96] = "";
    for (int d = 0; d < t->n_dims && d < 4; d++) {
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    }
    if (m.kind == 4 || m.kind == 5)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%s], expected [%lld]", W, t->name, got, (long long)e0);
    /* the rank matches: a LoRA tensor of another model's projection */
    const int same_r = m.kind <= 2 && (t->shape[0] == r || t->n_dims < 2 || t->shape[1] == r);
    char why[600] = " (different LoRA rank or model?)";
    if (same_r && info->base_model)
        snprintf(why, sizeof why, " (an adapter for another model: it was trained on %s)", info->base_model);
    else if (same_r)
        why[0] = 0;
    return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': shape [%s], expected [%lld, %lld]%s", W, t->name, got,
                   (long long)e0, (long long)e1, why);
}

/* Tensor t matched to its parameter in M->src: once each, of the expected shape, a readable dtype,
 * finite; a tensor of no parameter is noted as unexpected (a head ignored with IGNORE_HEAD). */
static af_status match_tensor(const char *W, const af_st_tensor *t, const af_param_layout *lay,
                              const af_adapter_info *info, unsigned flags, load_match *M) {
    const int32_t r = lay->lora.r;
    const int dora = lay->lora.use_dora != 0;
    const int has_head = lay->num_classes > 0 && lay->head_w_off >= 0;
    name_map m = map_name(t->name);
    const af_st_tensor **dst = NULL;
    int ok_shape = 0;
    int64_t e0 = 0, e1 = 0;
    if ((m.kind == 1 || m.kind == 2 || (m.kind == 5 && dora)) && m.layer < lay->n_layers) {
        const af_lora_slot *s = af_lora_slot_at(lay, m.layer, m.proj);
        if (s->a_off >= 0) {
            dst = &M->src[((size_t)m.layer * AF_PROJ_COUNT + m.proj) * 3 + (size_t)(m.kind == 5 ? 2 : m.kind - 1)];
            e0 = m.kind == 1 ? r : s->out;
            e1 = m.kind == 1 ? s->in : r;
            ok_shape = m.kind == 5 ? shape_is(t, s->out, 1, 1) || shape_is(t, s->out, 1, 2) : shape_is(t, e0, e1, 2);
        }
    } else if ((m.kind == 3 || m.kind == 4) && (flags & AF_ADAPTER_IGNORE_HEAD) && !has_head) {
        return AF_OK;
    } else if ((m.kind == 3 || m.kind == 4) && has_head && (m.kind == 3 || lay->head_b_off >= 0)) {
        dst = &M->src[M->nslots * 3 + (size_t)(m.kind - 3)];
        e0 = lay->num_classes;
        e1 = lay->hidden;
        ok_shape = shape_is(t, e0, e1, m.kind == 3 ? 2 : 1);
    }
    if (!dst) {
        note(M->unexpected, sizeof M->unexpected, &M->n_unexp, t->name);
        return AF_OK;
    }
    if (*dst)
        return af_fail(AF_ERR_FORMAT, "%s: tensors '%s' and '%s' both map to the same parameter", W, (*dst)->name,
                       t->name);
    if (!ok_shape) return shape_error(W, t, m, e0, e1, r, info);
    if (!readable_dtype(t->dtype))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported for adapters", W, t->name,
                       af_st_dtype_name(t->dtype));
    /* a diverged run's adapter: refused wherever it is loaded (predict, eval, generate, resume) */
    if (first_nonfinite(t) >= 0)
        return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': element %lld is not finite (NaN or Inf): the adapter is "
                       "unusable (saved from a diverged run?)", W, t->name, (long long)first_nonfinite(t));
    *dst = t;
    return AF_OK;
}

/* Every parameter of the layout found: the missing tensors named (the head unless ALLOW_MISSING_HEAD). */
static af_status check_missing(const char *W, const af_param_layout *lay, unsigned flags, const load_match *M) {
    const int dora = lay->lora.use_dora != 0;
    const int has_head = lay->num_classes > 0 && lay->head_w_off >= 0;
    char missing[512] = "";
    size_t n_miss = 0;
    for (size_t k = 0; k < M->nslots; k++) {
        const af_lora_slot *s = &lay->slots[k];
        if (s->a_off < 0) continue;
        for (int ab = 0; ab < 2 + dora; ab++) {
            if (M->src[k * 3 + (size_t)ab]) continue;
            char nm[96];
            if (ab == 2)
                snprintf(nm, sizeof nm, "layers.%zu.%s.%s.lora_magnitude_vector", k / AF_PROJ_COUNT,
                         af_adapter_proj_block[k % AF_PROJ_COUNT], af_adapter_proj_name[k % AF_PROJ_COUNT]);
            else
                snprintf(nm, sizeof nm, "layers.%zu.%s.%s.lora_%c.weight", k / AF_PROJ_COUNT,
                         af_adapter_proj_block[k % AF_PROJ_COUNT], af_adapter_proj_name[k % AF_PROJ_COUNT], ab ? 'B' : 'A');
            note(missing, sizeof missing, &n_miss, nm);
        }
    }
    if (has_head && !M->src[M->nslots * 3] && !(flags & AF_ADAPTER_ALLOW_MISSING_HEAD))
        note(missing, sizeof missing, &n_miss, "score.weight (classification head)");
    if (n_miss)
        return af_fail(AF_ERR_NOT_FOUND, "%s: %zu missing tensor(s): %s%s", W, n_miss, missing, n_miss > 4 ? ", ..." : "");
    return AF_OK;
}

/* q/k rows HF -> GGUF: head counts checked and the scratch (*ptmp, caller frees) allocated before P
 * is touched. */
static af_status qk_scratch(const char *dir, const af_param_layout *lay, const af_adapter_load_opts *lo, int perm,
                            float **ptmp) {
    af_status st = AF_OK;
    for (int32_t l = 0; st == AF_OK && perm && l < lay->n_layers; l++)
        for (int p = AF_PROJ_Q; st == AF_OK && p <= AF_PROJ_K; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            int64_t nh;
            if (s->a_off < 0) continue;
            st = af_adapter_qk_heads(dir, l, p, s->out, lo->n_head, lo->n_kv_head, lo->head_dim, &nh);
            if (st == AF_OK && !*ptmp &&
                !(*ptmp = af_malloc((size_t)lo->head_dim * (size_t)(lay->lora.r + 1) * sizeof(float))))
                st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
        }
    return st;
}

/* Everything checked: P filled from the matched tensors (q/k rows to the GGUF order when perm; a
 * head bias the file lacks is 0). */
static af_status fill_params(af_st_file *f, const af_param_layout *lay, const af_adapter_load_opts *lo, int perm,
                             float *ptmp, const load_match *M, float *P) {
    const int32_t r = lay->lora.r;
    const int dora = lay->lora.use_dora != 0;
    const int has_head = lay->num_classes > 0 && lay->head_w_off >= 0;
    const af_st_tensor **src = M->src;
    af_status st = AF_OK;
    for (size_t k = 0; st == AF_OK && k < M->nslots; k++) {
        const af_lora_slot *s = &lay->slots[k];
        if (s->a_off < 0) continue;
        st = af_st_read_f32(f, src[3 * k], P + s->a_off, (size_t)(r * s->in));
        if (st == AF_OK) st = af_st_read_f32(f, src[3 * k + 1], P + s->b_off, (size_t)(s->out * r));
        if (st == AF_OK && dora) st = af_st_read_f32(f, src[3 * k + 2], P + s->m_off, (size_t)s->out);
        const int p = (int)(k % AF_PROJ_COUNT);
        if (st == AF_OK && perm && (p == AF_PROJ_Q || p == AF_PROJ_K)) {
            af_adapter_qk_rows(P + s->b_off, s->out / lo->head_dim, lo->head_dim, r, 0, ptmp);
            if (dora) af_adapter_qk_rows(P + s->m_off, s->out / lo->head_dim, lo->head_dim, 1, 0, ptmp);
        }
    }
    if (st == AF_OK && has_head && src[M->nslots * 3]) {
        st = af_st_read_f32(f, src[M->nslots * 3], P + lay->head_w_off, (size_t)lay->num_classes * (size_t)lay->hidden);
        if (st == AF_OK && lay->head_b_off >= 0) {
            if (src[M->nslots * 3 + 1])
                st = af_st_read_f32(f, src[M->nslots * 3 + 1], P + lay->head_b_off, (size_t)lay->num_classes);
            else
                memset(P + lay->head_b_off, 0, (size_t)lay->num_classes * sizeof(float));
        }
    }
    return st;
}

af_status af_adapter_load(const char *dir, const af_param_layout *lay, float *P, const af_adapter_load_opts *opts,
                          af_adapter_info *info_out) {
    if (!dir || !lay || !P) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_load: NULL argument");
    const af_adapter_load_opts zero = {0};
    const af_adapter_load_opts *lo = opts ? opts : &zero;
    const unsigned flags = lo->flags;
    if (af_adapter_is_gguf(dir)) return af_adapter_gguf_load(dir, lay, P, flags, info_out);
    if (lay->init_P) return load_residual(dir, lay, P, lo, info_out);
    af_adapter_info info;
    af_st_file *f = NULL;
    AF_TRY(read_info_open(dir, &info, &f));
    const char *W = af_st_path(f);
    load_match M;
    memset(&M, 0, sizeof M);
    M.nslots = (size_t)lay->n_layers * AF_PROJ_COUNT;
    af_status st = check_config(dir, &info, lay);
    if (st == AF_OK && !(M.src = af_calloc(M.nslots * 3 + 2, sizeof *M.src)))
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t i = 0; st == AF_OK && i < af_st_count(f); i++)
        st = match_tensor(W, af_st_tensor_at(f, i), lay, &info, flags, &M);
    if (st == AF_OK && M.n_unexp)
        st = af_fail(AF_ERR_FORMAT, "%s: %zu unexpected tensor(s) for this model/layout: %s%s", W, M.n_unexp,
                     M.unexpected, M.n_unexp > 4 ? ", ..." : "");
    if (st == AF_OK) st = check_missing(W, lay, flags, &M);
    const int perm = af_adapter_qk_permuted(lo->architecture) && (lo->n_head || lo->n_kv_head || lo->head_dim) &&
                     !info.qk_rows_gguf;
    float *ptmp = NULL;
    if (st == AF_OK) st = qk_scratch(dir, lay, lo, perm, &ptmp);
    if (st == AF_OK) st = fill_params(f, lay, lo, perm, ptmp, &M, P);
    free(M.src);
    free(ptmp);
    af_st_close(f);
    if (st == AF_OK && info_out) *info_out = info;
    else af_adapter_info_free(&info);
    return st;
}
