/* hf_config.c — config.json and the SafeTensors weights of a Hugging Face directory (hf_config.h). */
#include "formats/hf_config.h"

#include "core/fsutil.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

af_status af_hf_read_json_file(const char *dir, const char *name, size_t max, char **out, size_t *len) {
    *out = NULL;
    char *path = af_path_join(dir, name);
    if (!path) return af_fail(AF_ERR_NOMEM, "%s/%s: out of memory", dir, name);
    struct stat sb;
    af_status st = AF_OK;
    if (stat(path, &sb) != 0) {
        st = af_fail(errno == ENOENT ? AF_ERR_NOT_FOUND : AF_ERR_IO, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = af_fail(AF_ERR_IO, "%s: not a regular file", path);
    } else if ((uint64_t)sb.st_size > max) {
        st = af_fail(AF_ERR_FORMAT, "%s: %lld bytes, larger than the limit of %zu", path, (long long)sb.st_size, max);
    } else if (!(*out = af_read_file(path, len))) {
        st = af_fail(errno == ENOMEM ? AF_ERR_NOMEM : AF_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    } else if (*len > max) {
        free(*out);
        *out = NULL;
        st = af_fail(AF_ERR_FORMAT, "%s: larger than the limit of %zu bytes", path, max);
    }
    free(path);
    return st;
}

/* ---- config.json ---- */

/* model_type -> architecture, and the transformers class default of tie_word_embeddings. */
static const struct {
    const char *model_type, *arch;
    int tie_default;
    const char *act; /* the activation the architecture's walk implements */
} k_types[] = {
    {"llama", "llama", 0, "silu"},
    {"gemma3_text", "gemma3", 1, "gelu_pytorch_tanh"},
    {"qwen2", "qwen2", 0, "silu"},
    {"qwen3", "qwen3", 0, "silu"},
    {"gemma4_text", "gemma4", 1, "gelu_pytorch_tanh"},
};

/* Keys whose presence means a mixture-of-experts or multimodal model. */
static const char *const k_moe_keys[] = {"num_experts", "num_local_experts", "n_routed_experts",
                                         "num_experts_per_tok", "moe_intermediate_size"};
static const char *const k_vision_keys[] = {"vision_config", "audio_config", "text_config", "vision_tower"};

typedef struct cfgp {
    const cJSON *root;
    const char *L;
} cfgp;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static af_status get_int(const cfgp *p, const cJSON *o, const char *key, const char *field, int req, int64_t def,
                         int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = item(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (req) return af_fail(AF_ERR_FORMAT, "%s: field '%s': missing", p->L, field);
        *out = def;
        return AF_OK;
    }
    if (!cJSON_IsNumber(v) || floor(v->valuedouble) != v->valuedouble || !(v->valuedouble >= (double)lo) ||
        !(v->valuedouble <= (double)hi))
        return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected an integer in [%lld, %lld]", p->L, field,
                       (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return AF_OK;
}

static af_status get_i32(const cfgp *p, const char *key, int req, int64_t def, int64_t lo, int64_t hi, int32_t *out) {
    int64_t v;
    AF_TRY(get_int(p, p->root, key, key, req, def, lo, hi, &v));
    *out = (int32_t)v;
    return AF_OK;
}

static af_status get_float(const cfgp *p, const cJSON *o, const char *key, const char *field, int req, double def,
                           float *out) {
    const cJSON *v = item(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (req) return af_fail(AF_ERR_FORMAT, "%s: field '%s': missing", p->L, field);
        *out = (float)def;
        return AF_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !((float)v->valuedouble > 0) ||
        !isfinite((float)v->valuedouble))
        return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected a positive number", p->L, field);
    *out = (float)v->valuedouble;
    return AF_OK;
}

static af_status get_bool(const cfgp *p, const char *key, int def, int32_t *out) {
    const cJSON *v = item(p->root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return AF_OK;
    }
    if (!cJSON_IsBool(v)) return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected true or false", p->L, key);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return AF_OK;
}

/* bos/eos/pad: an integer or a list of integers (first one); -1 when absent or of another type. */
static int32_t token_id(const cJSON *v) {
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > INT32_MAX ||
        floor(v->valuedouble) != v->valuedouble)
        return -1;
    return (int32_t)v->valuedouble;
}

/* A rope-scaling object: only none / "default" / linear with factor 1 keep plain RoPE. */
static af_status check_rope_scaling(const cfgp *p, const cJSON *rs, const char *field) {
    if (!rs || cJSON_IsNull(rs)) return AF_OK;
    if (!cJSON_IsObject(rs)) return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected an object or null", p->L, field);
    const cJSON *t = item(rs, "rope_type");
    if (!t) t = item(rs, "type");
    if (t && !cJSON_IsString(t))
        return af_fail(AF_ERR_FORMAT, "%s: field '%s.rope_type': expected a string", p->L, field);
    const char *ty = t ? t->valuestring : "default";
    if (!strcmp(ty, "default")) return AF_OK;
    const cJSON *f = item(rs, "factor");
    if (!strcmp(ty, "linear") && (!f || (cJSON_IsNumber(f) && f->valuedouble == 1.0))) return AF_OK;
    return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s': rope scaling '%.40s' is not supported (only default RoPE)",
                   p->L, field, ty);
}

/* gemma4 rope_parameters.full_attention: "proportional" (transformers _compute_proportional_rope_parameters:
 * the first int(partial_rotary_factor·head_dim/2) NEOX pairs rotate, the others do not) or "default". */
static af_status gemma4_full_rope(const cfgp *p, const cJSON *full, af_hf_config *c) {
    const char *field = "rope_parameters.full_attention";
    if (!cJSON_IsObject(full)) return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected an object", p->L, field);
    const cJSON *t = item(full, "rope_type");
    if (t && !cJSON_IsString(t)) return af_fail(AF_ERR_FORMAT, "%s: field '%s.rope_type': expected a string", p->L, field);
    c->rope_partial_full = 1.0f;
    if (!t || !strcmp(t->valuestring, "default")) return AF_OK;
    if (strcmp(t->valuestring, "proportional"))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s.rope_type': '%.40s' is not supported (proportional, default)",
                       p->L, field, t->valuestring);
    const cJSON *f = item(full, "factor");
    if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 1.0))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s.factor': only 1 is supported", p->L, field);
    const cJSON *pr = item(full, "partial_rotary_factor");
    if (pr && !cJSON_IsNull(pr)) {
        if (!cJSON_IsNumber(pr) || !(pr->valuedouble > 0) || !(pr->valuedouble <= 1))
            return af_fail(AF_ERR_FORMAT, "%s: field '%s.partial_rotary_factor': expected a number in (0, 1]", p->L,
                           field);
        c->rope_partial_full = (float)pr->valuedouble;
    }
    return AF_OK;
}

/* An int32 array [n] of config.json values, every element `v` (owned by c). */
static af_status fill_layers(const cfgp *p, int32_t **arr, int32_t n, int32_t v) {
    *arr = af_malloc((size_t)n * sizeof **arr);
    if (!*arr) return af_fail(AF_ERR_NOMEM, "%s: out of memory", p->L);
    for (int32_t i = 0; i < n; i++) (*arr)[i] = v;
    return AF_OK;
}

/* gemma4_text: per-layer sizes, KV sharing, PLE, attention_k_eq_v (hf_config.h lists the keys). Runs
 * after the common keys (layer_types already parsed). */
static af_status parse_gemma4(const cfgp *p, af_hf_config *c) {
    const cJSON *r = p->root;
    const int32_t L = c->num_hidden_layers;
    const cJSON *moe = item(r, "enable_moe_block");
    if (cJSON_IsTrue(moe))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'enable_moe_block': mixture-of-experts Gemma 4 models are not "
                       "supported (dense models only, e.g. E2B/E4B)", p->L);
    const cJSON *bi = item(r, "use_bidirectional_attention");
    if (bi && !cJSON_IsNull(bi) && !(cJSON_IsString(bi) && !strcmp(bi->valuestring, "vision")))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'use_bidirectional_attention': bidirectional attention is not "
                       "supported (causal text models only)", p->L);
    const cJSON *srp = item(item(r, "rope_parameters"), "sliding_attention");
    const cJSON *spr = srp ? item(srp, "partial_rotary_factor") : NULL;
    if (spr && !cJSON_IsNull(spr) && !(cJSON_IsNumber(spr) && spr->valuedouble == 1.0))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'rope_parameters.sliding_attention.partial_rotary_factor': "
                       "partial RoPE on sliding layers is not supported", p->L);
    if (!item(item(r, "rope_parameters"), "full_attention")) c->rope_partial_full = 1.0f;
    /* transformers' default layer_types: every 6th layer global, the last one always global */
    if (!c->layer_sliding) {
        c->layer_sliding = af_calloc((size_t)L, 1);
        if (!c->layer_sliding) return af_fail(AF_ERR_NOMEM, "%s: out of memory", p->L);
        for (int32_t i = 0; i < L; i++) c->layer_sliding[i] = (i + 1) % 6 != 0;
    }
    c->layer_sliding[L - 1] = 0;
    int any_sliding = 0;
    for (int32_t i = 0; i < L; i++) any_sliding |= c->layer_sliding[i];
    if (any_sliding && c->sliding_window <= 0)
        return af_fail(AF_ERR_FORMAT, "%s: field 'sliding_window': missing while layers are sliding", p->L);
    int64_t v;
    AF_TRY(get_int(p, r, "num_kv_shared_layers", "num_kv_shared_layers", 0, 0, 0, L - 1, &v));
    c->num_kv_shared_layers = (int32_t)v;
    AF_TRY(get_int(p, r, "hidden_size_per_layer_input", "hidden_size_per_layer_input", 0, 0, 0, 1 << 16, &v));
    c->hidden_size_per_layer_input = (int32_t)v;
    AF_TRY(get_int(p, r, "vocab_size_per_layer_input", "vocab_size_per_layer_input", 0, c->vocab_size, 1, 1 << 24, &v));
    c->vocab_size_per_layer_input = (int32_t)v;
    if (c->hidden_size_per_layer_input > 0 && c->vocab_size_per_layer_input != c->vocab_size)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'vocab_size_per_layer_input': %d differs from vocab_size %d "
                       "(not supported)", p->L, c->vocab_size_per_layer_input, c->vocab_size);
    AF_TRY(get_bool(p, "attention_k_eq_v", 0, &c->attention_k_eq_v));
    int32_t dw = 0;
    AF_TRY(get_bool(p, "use_double_wide_mlp", 0, &dw));
    AF_TRY(fill_layers(p, &c->layer_head_dim, L, c->head_dim));
    AF_TRY(fill_layers(p, &c->layer_kv_heads, L, c->num_key_value_heads));
    AF_TRY(fill_layers(p, &c->layer_ff, L, c->intermediate_size));
    const cJSON *plc = item(r, "per_layer_config");
    if (plc && !cJSON_IsNull(plc)) {
        if (!cJSON_IsObject(plc)) return af_fail(AF_ERR_FORMAT, "%s: field 'per_layer_config': expected an object", p->L);
        const cJSON *e;
        cJSON_ArrayForEach(e, plc) {
            char *end = NULL;
            long il = strtol(e->string, &end, 10);
            if (!e->string[0] || *end || il < 0 || il >= L || !cJSON_IsObject(e))
                return af_fail(AF_ERR_FORMAT, "%s: field 'per_layer_config.%.20s': expected a layer index in [0, %d) "
                               "with an object", p->L, e->string, L);
            const cJSON *o;
            cJSON_ArrayForEach(o, e) {
                /* (transformers' MLP reads the global intermediate_size: no per-layer FFN override) */
                int32_t *dst = !strcmp(o->string, "head_dim")              ? &c->layer_head_dim[il]
                               : !strcmp(o->string, "num_key_value_heads") ? &c->layer_kv_heads[il]
                                                                           : NULL;
                char field[96];
                snprintf(field, sizeof field, "per_layer_config.%ld.%.40s", il, o->string);
                if (!dst)
                    return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s': per-layer override not supported "
                                   "(head_dim, num_key_value_heads)", p->L, field);
                AF_TRY(get_int(p, e, o->string, field, 1, 0, 1, 1 << 20, &v));
                *dst = (int32_t)v;
            }
        }
    } else {
        AF_TRY(get_int(p, r, "global_head_dim", "global_head_dim", 0, 512, 1, 4096, &v));
        int64_t gkv = 0;
        AF_TRY(get_int(p, r, "num_global_key_value_heads", "num_global_key_value_heads", 0, 0, 1, 1024, &gkv));
        for (int32_t i = 0; i < L; i++)
            if (!c->layer_sliding[i]) {
                c->layer_head_dim[i] = (int32_t)v;
                if (c->attention_k_eq_v && gkv > 0) c->layer_kv_heads[i] = (int32_t)gkv;
            }
    }
    if (dw)
        for (int32_t i = L - c->num_kv_shared_layers; i < L; i++) c->layer_ff[i] *= 2;
    return AF_OK;
}

/* The checkpoint's kind: a JSON object, not multimodal, not mixture-of-experts, a supported
 * model_type (its index in k_types into *ti; c->model_type and c->architecture set). */
static af_status parse_type(const cfgp *p, af_hf_config *c, int *ti_out) {
    const cJSON *r = p->root;
    if (!cJSON_IsObject(r)) return af_fail(AF_ERR_FORMAT, "%s: not a JSON object", p->L);
    for (size_t i = 0; i < sizeof k_vision_keys / sizeof *k_vision_keys; i++)
        if (item(r, k_vision_keys[i]))
            return af_fail(AF_ERR_UNSUPPORTED,
                           "%s: field '%s': multimodal (vision/audio) checkpoints are not supported; use the text-only "
                           "model", p->L, k_vision_keys[i]);
    for (size_t i = 0; i < sizeof k_moe_keys / sizeof *k_moe_keys; i++) {
        const cJSON *v = item(r, k_moe_keys[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s': mixture-of-experts models are not supported", p->L,
                           k_moe_keys[i]);
    }
    const cJSON *mt = item(r, "model_type");
    if (!mt) return af_fail(AF_ERR_FORMAT, "%s: field 'model_type': missing", p->L);
    if (!cJSON_IsString(mt)) return af_fail(AF_ERR_FORMAT, "%s: field 'model_type': expected a string", p->L);
    int ti = -1;
    for (size_t i = 0; i < sizeof k_types / sizeof *k_types; i++)
        if (!strcmp(mt->valuestring, k_types[i].model_type)) ti = (int)i;
    if (ti < 0) {
        const char *hint = strstr(mt->valuestring, "moe") ? " (mixture-of-experts)" : "";
        return af_fail(AF_ERR_UNSUPPORTED,
                       "%s: field 'model_type': '%.40s'%s is not supported (llama, gemma3_text, qwen2, qwen3, gemma4_text)", p->L,
                       mt->valuestring, hint);
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", k_types[ti].model_type);
    snprintf(c->architecture, sizeof c->architecture, "%s", k_types[ti].arch);
    *ti_out = ti;
    return AF_OK;
}

/* The sizes: hidden, layers, heads, head_dim, FFN, vocabulary, positions; tied embeddings, norm eps. */
static af_status parse_sizes(const cfgp *p, af_hf_config *c, int ti) {
    const cJSON *r = p->root;
    AF_TRY(get_i32(p, "hidden_size", 1, 0, 1, 1 << 16, &c->hidden_size));
    AF_TRY(get_i32(p, "num_hidden_layers", 1, 0, 1, AF_HF_MAX_LAYERS, &c->num_hidden_layers));
    AF_TRY(get_i32(p, "num_attention_heads", 1, 0, 1, 1024, &c->num_attention_heads));
    AF_TRY(get_i32(p, "num_key_value_heads", 0, c->num_attention_heads, 1, 1024, &c->num_key_value_heads));
    AF_TRY(get_i32(p, "head_dim", 0, c->hidden_size / c->num_attention_heads, 1, 4096, &c->head_dim));
    if (c->head_dim < 1) return af_fail(AF_ERR_FORMAT, "%s: field 'head_dim': missing and hidden_size < heads", p->L);
    AF_TRY(get_i32(p, "intermediate_size", 1, 0, 1, 1 << 20, &c->intermediate_size));
    AF_TRY(get_i32(p, "vocab_size", 1, 0, 1, 1 << 24, &c->vocab_size));
    AF_TRY(get_i32(p, "max_position_embeddings", 0, 2048, 1, INT32_MAX, &c->max_position_embeddings));
    AF_TRY(get_bool(p, "tie_word_embeddings", k_types[ti].tie_default, &c->tie_word_embeddings));
    AF_TRY(get_float(p, r, "rms_norm_eps", "rms_norm_eps", 1, 0, &c->rms_norm_eps));
    return AF_OK;
}

/* RoPE: 4.x top-level keys, 5.x rope_parameters (flat, or per layer type for gemma3; gemma4's
 * proportional full-attention RoPE); no scaling, no partial rotary factor. */
static af_status parse_rope(const cfgp *p, af_hf_config *c, int gemma4) {
    const cJSON *r = p->root;
    AF_TRY(get_float(p, r, "rope_theta", "rope_theta", 0, 10000.0, &c->rope_theta));
    AF_TRY(get_float(p, r, "rope_local_base_freq", "rope_local_base_freq", 0, 10000.0, &c->rope_theta_swa));
    AF_TRY(check_rope_scaling(p, item(r, "rope_scaling"), "rope_scaling"));
    const cJSON *rp = item(r, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) return af_fail(AF_ERR_FORMAT, "%s: field 'rope_parameters': expected an object", p->L);
        const cJSON *full = item(rp, "full_attention"), *slide = item(rp, "sliding_attention");
        if (full || slide) {
            if (full && gemma4) {
                AF_TRY(gemma4_full_rope(p, full, c));
                AF_TRY(get_float(p, full, "rope_theta", "rope_parameters.full_attention.rope_theta", 0, c->rope_theta,
                                 &c->rope_theta));
            } else if (full) {
                AF_TRY(check_rope_scaling(p, full, "rope_parameters.full_attention"));
                AF_TRY(get_float(p, full, "rope_theta", "rope_parameters.full_attention.rope_theta", 0, c->rope_theta,
                                 &c->rope_theta));
            }
            if (slide) {
                AF_TRY(check_rope_scaling(p, slide, "rope_parameters.sliding_attention"));
                AF_TRY(get_float(p, slide, "rope_theta", "rope_parameters.sliding_attention.rope_theta", 0,
                                 c->rope_theta_swa, &c->rope_theta_swa));
            }
        } else {
            AF_TRY(check_rope_scaling(p, rp, "rope_parameters"));
            AF_TRY(get_float(p, rp, "rope_theta", "rope_parameters.rope_theta", 0, c->rope_theta, &c->rope_theta));
        }
    }
    const cJSON *prf = item(r, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'partial_rotary_factor': partial RoPE is not supported", p->L);
    return AF_OK;
}

/* The activation (the type's own), attention biases; no MLP biases. */
static af_status parse_activation(const cfgp *p, af_hf_config *c, int ti, int gemma) {
    const cJSON *r = p->root;
    const cJSON *act = item(r, gemma ? "hidden_activation" : "hidden_act");
    if (!act && gemma) act = item(r, "hidden_act");
    if (act && !cJSON_IsNull(act)) {
        if (!cJSON_IsString(act))
            return af_fail(AF_ERR_FORMAT, "%s: field '%s': expected a string", p->L, act->string);
        if (strcmp(act->valuestring, k_types[ti].act))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: field '%s': activation '%.40s' is not supported for %s (%s)", p->L,
                           act->string, act->valuestring, c->model_type, k_types[ti].act);
    }
    int32_t mlp_bias = 0;
    AF_TRY(get_bool(p, "attention_bias", 0, &c->attention_bias));
    AF_TRY(get_bool(p, "mlp_bias", 0, &mlp_bias));
    if (mlp_bias) return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'mlp_bias': MLP biases are not supported", p->L);
    return AF_OK;
}

/* Sliding-window attention (gemma3/4; read for every type, checked by the model): the window, its
 * pattern, the per-layer types. */
static af_status parse_sliding(const cfgp *p, af_hf_config *c, int gemma) {
    const cJSON *r = p->root;
    int64_t sw = 0;
    AF_TRY(get_int(p, r, "sliding_window", "sliding_window", 0, 0, 1, INT32_MAX, &sw));
    c->sliding_window = sw;
    const cJSON *usw = item(r, "use_sliding_window");
    if (cJSON_IsTrue(usw))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'use_sliding_window': sliding-window attention is not supported "
                       "for %s", p->L, c->model_type);
    if (!gemma) c->sliding_window = 0; /* qwen2 writes sliding_window even when use_sliding_window is false */
    int64_t pat = 0;
    AF_TRY(get_int(p, r, "sliding_window_pattern", "sliding_window_pattern", 0, 0, 1, AF_HF_MAX_LAYERS, &pat));
    if (!pat) AF_TRY(get_int(p, r, "_sliding_window_pattern", "_sliding_window_pattern", 0, 0, 1, AF_HF_MAX_LAYERS, &pat));
    c->sliding_window_pattern = (int32_t)pat;
    const cJSON *lt = item(r, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->num_hidden_layers)
            return af_fail(AF_ERR_FORMAT, "%s: field 'layer_types': expected an array of %d strings", p->L,
                           c->num_hidden_layers);
        c->layer_sliding = af_calloc((size_t)c->num_hidden_layers, 1);
        if (!c->layer_sliding) return af_fail(AF_ERR_NOMEM, "%s: out of memory", p->L);
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt) {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention")) c->layer_sliding[i] = 1;
            else if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
                return af_fail(AF_ERR_FORMAT,
                               "%s: field 'layer_types[%d]': expected \"sliding_attention\" or \"full_attention\"",
                               p->L, i);
            i++;
        }
    }
    return AF_OK;
}

static af_status parse(const cfgp *p, af_hf_config *c) {
    const cJSON *r = p->root;
    int ti = -1;
    AF_TRY(parse_type(p, c, &ti));
    const int gemma4 = !strcmp(c->architecture, "gemma4");
    const int gemma = gemma4 || !strcmp(c->architecture, "gemma3");
    AF_TRY(parse_sizes(p, c, ti));
    AF_TRY(parse_rope(p, c, gemma4));
    AF_TRY(parse_activation(p, c, ti, gemma));
    /* sliding window, attention scale, soft-capping (gemma3; read for every type, checked by the model) */
    AF_TRY(parse_sliding(p, c, gemma));
    if (gemma4) AF_TRY(parse_gemma4(p, c));
    if (gemma && !gemma4) {
        AF_TRY(get_float(p, r, "query_pre_attn_scalar", "query_pre_attn_scalar", 0, c->head_dim,
                         &c->query_pre_attn_scalar));
        int any_sliding = 0;
        for (int i = 0; c->layer_sliding && i < c->num_hidden_layers; i++) any_sliding |= c->layer_sliding[i];
        if (!c->layer_sliding && c->sliding_window_pattern > 1) any_sliding = 1;
        if (any_sliding && c->sliding_window <= 0)
            return af_fail(AF_ERR_FORMAT, "%s: field 'sliding_window': missing while layers are sliding", p->L);
    }
    const cJSON *flc = item(r, "final_logit_softcapping");
    if (flc && !cJSON_IsNull(flc))
        AF_TRY(get_float(p, r, "final_logit_softcapping", "final_logit_softcapping", 0, 0, &c->final_logit_softcapping));
    const cJSON *alc = item(r, "attn_logit_softcapping");
    if (alc && !cJSON_IsNull(alc))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'attn_logit_softcapping': soft-capped attention logits are not "
                       "supported", p->L);
    c->bos_token_id = token_id(item(r, "bos_token_id"));
    c->eos_token_id = token_id(item(r, "eos_token_id"));
    c->pad_token_id = token_id(item(r, "pad_token_id"));
    const cJSON *dt = item(r, "torch_dtype");
    if (!cJSON_IsString(dt)) dt = item(r, "dtype");
    if (cJSON_IsString(dt)) snprintf(c->dtype, sizeof c->dtype, "%.15s", dt->valuestring);
    return AF_OK;
}

af_status af_hf_config_parse(const char *json, size_t len, const char *label, af_hf_config *c) {
    memset(c, 0, sizeof *c);
    const char *L = label ? label : "config.json";
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - json) : 0;
        return af_fail(AF_ERR_FORMAT, "%s: malformed JSON at byte %zu", L, at);
    }
    cfgp p = {root, L};
    af_status st = parse(&p, c);
    cJSON_Delete(root);
    if (st != AF_OK) af_hf_config_free(c);
    return st;
}

void af_hf_config_free(af_hf_config *c) {
    if (!c) return;
    free(c->layer_sliding);
    c->layer_sliding = NULL;
    free(c->layer_head_dim);
    free(c->layer_kv_heads);
    free(c->layer_ff);
    c->layer_head_dim = c->layer_kv_heads = c->layer_ff = NULL;
}

/* ---- weights ---- */

struct af_hf_weights {
    af_st_file **files;
    size_t n;
    uint64_t bytes;
};

/* Open shard `name` of `dir` into w->files[w->n]. AF_ERR_NOT_FOUND (no message) when the file does
 * not exist; the reader's errors otherwise. */
static af_status open_shard(af_hf_weights *w, const char *dir, const char *name) {
    char *path = af_path_join(dir, name);
    if (!path) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    struct stat sb;
    af_status st;
    if (stat(path, &sb) != 0 && errno == ENOENT) st = AF_ERR_NOT_FOUND;
    else st = af_st_open(path, &w->files[w->n]);
    if (st == AF_OK) {
        w->bytes += (uint64_t)sb.st_size;
        w->n++;
    }
    free(path);
    return st;
}

af_status af_hf_weights_open(const char *dir, af_hf_weights **out) {
    *out = NULL;
    af_hf_weights *w = af_calloc(1, sizeof *w);
    if (!w) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    char *js = NULL;
    size_t jl = 0;
    cJSON *root = NULL;
    af_status st = af_hf_read_json_file(dir, "model.safetensors.index.json", (size_t)64 << 20, &js, &jl);
    if (st == AF_ERR_NOT_FOUND) {
        af_clear_error();
        w->files = af_calloc(1, sizeof *w->files);
        if (!w->files) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
        else {
            st = open_shard(w, dir, "model.safetensors");
            if (st == AF_ERR_NOT_FOUND)
                st = af_fail(AF_ERR_NOT_FOUND, "%s: no model.safetensors and no model.safetensors.index.json", dir);
        }
        goto done;
    }
    if (st != AF_OK) goto done;
    const char *L = "model.safetensors.index.json";
    root = cJSON_ParseWithLength(js, jl);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root) { st = af_fail(AF_ERR_FORMAT, "%s/%s: malformed JSON", dir, L); goto done; }
    if (!cJSON_IsObject(wm)) { st = af_fail(AF_ERR_FORMAT, "%s/%s: field 'weight_map': missing or not an object", dir, L); goto done; }
    int n = cJSON_GetArraySize(wm);
    if (n < 1 || n > 1000000) { st = af_fail(AF_ERR_FORMAT, "%s/%s: field 'weight_map': %d entries", dir, L, n); goto done; }
    /* distinct shard names, in order of first appearance */
    const char **names = af_calloc((size_t)n, sizeof *names);
    w->files = af_calloc((size_t)n, sizeof *w->files);
    if (!names || !w->files) { free(names); st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir); goto done; }
    size_t nn = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
            free(names);
            st = af_fail(AF_ERR_FORMAT, "%s/%s: weight_map['%.80s']: expected a file name in the directory", dir, L,
                         e->string);
            goto done;
        }
        size_t k = 0;
        while (k < nn && strcmp(names[k], e->valuestring)) k++;
        if (k == nn) names[nn++] = e->valuestring;
    }
    for (size_t k = 0; k < nn && st == AF_OK; k++) {
        st = open_shard(w, dir, names[k]);
        if (st == AF_ERR_NOT_FOUND)
            st = af_fail(AF_ERR_NOT_FOUND, "%s/%s: weight_map names shard '%.80s', which is missing", dir, L, names[k]);
    }
    free(names);
    if (st != AF_OK) goto done;
    cJSON_ArrayForEach(e, wm) {
        const af_st_file *f = NULL;
        const af_st_tensor *t = af_hf_weights_find(w, e->string, &f);
        const char *fp = t ? af_st_path(f) : "";
        const size_t fl = strlen(fp), vl = strlen(e->valuestring);
        if (!t || fl <= vl || fp[fl - vl - 1] != '/' || strcmp(fp + fl - vl, e->valuestring)) {
            st = af_fail(AF_ERR_FORMAT, "%s/%s: weight_map: tensor '%.80s' is not in shard '%.80s'", dir, L, e->string,
                         e->valuestring);
            goto done;
        }
    }
    /* a tensor stored in two shards would make lookups ambiguous */
    for (size_t i = 0; i < w->n && st == AF_OK; i++)
        for (size_t k = 0; k < af_st_count(w->files[i]) && st == AF_OK; k++) {
            const af_st_tensor *t = af_st_tensor_at(w->files[i], k);
            for (size_t j = i + 1; j < w->n; j++)
                if (af_st_find(w->files[j], t->name)) {
                    st = af_fail(AF_ERR_FORMAT, "%s: tensor '%.80s' is stored in both %s and %s", dir, t->name,
                                 af_st_path(w->files[i]), af_st_path(w->files[j]));
                    break;
                }
        }
done:
    cJSON_Delete(root);
    free(js);
    if (st != AF_OK) {
        af_hf_weights_close(w);
        return st;
    }
    *out = w;
    return AF_OK;
}

void af_hf_weights_close(af_hf_weights *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) af_st_close(w->files[i]);
    free(w->files);
    free(w);
}

const af_st_tensor *af_hf_weights_find(const af_hf_weights *w, const char *name, const af_st_file **file) {
    for (size_t i = 0; i < w->n; i++) {
        const af_st_tensor *t = af_st_find(w->files[i], name);
        if (t) {
            if (file) *file = w->files[i];
            return t;
        }
    }
    return NULL;
}

size_t af_hf_weights_n_files(const af_hf_weights *w) { return w->n; }
const af_st_file *af_hf_weights_file(const af_hf_weights *w, size_t i) { return i < w->n ? w->files[i] : NULL; }
uint64_t af_hf_weights_bytes(const af_hf_weights *w) { return w->bytes; }
