/*
 * settings_yaml.c — YAML training settings with TRL / transformers / PEFT names (settings_yaml.h).
 *
 * Name sources: transformers' TrainingArguments (learning_rate, num_train_epochs, max_steps,
 * per_device_train_batch_size, gradient_accumulation_steps, warmup_ratio, warmup_steps,
 * lr_scheduler_type, eval_steps, eval_strategy, save_steps, save_total_limit, seed, output_dir,
 * weight_decay, max_grad_norm, gradient_checkpointing, bf16, logging_steps,
 * resume_from_checkpoint), TRL's SFTConfig (max_length, the older max_seq_length,
 * dataset_text_field, packing, completion_only_loss, assistant_only_loss), PEFT's LoraConfig
 * (r, lora_alpha, lora_dropout, target_modules, use_rslora, use_dora, bias, task_type), TRL's DPOConfig /
 * ORPOConfig (beta, loss_type, label_smoothing: afinar's own keys in '_' spelling;
 * precompute_ref_log_probs), the LoRA names of
 * TRL's ModelConfig (lora_r, lora_alpha, lora_dropout, lora_target_modules) and of the example
 * scripts (model_name_or_path, train_file, validation_file), and loraplus_lr_ratio (the argument of
 * PEFT's create_loraplus_optimizer, axolotl's key), and transformers' EarlyStoppingCallback
 * (early_stopping_patience, early_stopping_threshold).
 */
#include "train/settings_yaml.h"
#include "core/fsutil.h"
#include "train/settings_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define YAML_MAX_BYTES ((size_t)16 << 20)

/* How an alias's value becomes the afinar key's value. */
typedef enum {
    V_AS_IS = 0,   /* the scalar's text */
    V_TARGETS,     /* a list or a string of module names -> "q_proj,v_proj" (the targets parser knows PEFT names) */
    V_SCHEDULE,    /* lr_scheduler_type -> constant | cosine | linear | wsd (warmup_stable_decay) */
    V_MAX_STEPS,   /* -1: not set */
    V_RESUME,      /* true: the output directory's newest checkpoint; a path; false: not set */
    V_EVAL_STRAT,  /* "steps": nothing; "epoch": eval-every 0 */
    V_LOSS_ONLY,   /* completion_only_loss / assistant_only_loss: true -> auto, false -> all */
    V_TASK_TYPE,   /* CAUSAL_LM -> causal-lm, SEQ_CLS -> classification */
    V_BIAS_NONE,   /* only "none" (afinar's LoRA has no bias terms) */
    V_LORA_INIT    /* init_lora_weights: true -> default; gaussian, pissa, olora as is; pissa_niter_N -> pissa */
} vkind;

typedef struct alias {
    const char *name; /* the YAML key */
    const char *key;  /* afinar's key */
    vkind kind;
} alias;

static const alias k_alias[] = {
    {"model_name_or_path", "model", V_AS_IS},
    {"train_file", "train", V_AS_IS},
    {"validation_file", "val", V_AS_IS},
    {"eval_file", "val", V_AS_IS},
    {"dataset_text_field", "text-field", V_AS_IS},
    {"learning_rate", "lr", V_AS_IS},
    {"num_train_epochs", "epochs", V_AS_IS},
    {"max_steps", "max-steps", V_MAX_STEPS},
    {"per_device_train_batch_size", "batch", V_AS_IS},
    {"per_device_eval_batch_size", "eval-batch", V_AS_IS},
    {"gradient_accumulation_steps", "grad-accum", V_AS_IS},
    {"max_length", "max-seq-len", V_AS_IS},
    {"max_seq_length", "max-seq-len", V_AS_IS},
    {"r", "lora-r", V_AS_IS},
    {"lora_r", "lora-r", V_AS_IS},
    {"lora_alpha", "lora-alpha", V_AS_IS},
    {"lora_dropout", "lora-dropout", V_AS_IS},
    {"use_rslora", "rslora", V_AS_IS},
    {"loraplus_lr_ratio", "loraplus-lr-ratio", V_AS_IS},
    {"use_dora", "dora", V_AS_IS},
    {"init_lora_weights", "init-lora-weights", V_LORA_INIT},
    {"target_modules", "targets", V_TARGETS},
    {"lora_target_modules", "targets", V_TARGETS},
    {"bias", NULL, V_BIAS_NONE},
    {"task_type", "task", V_TASK_TYPE},
    {"warmup_ratio", "warmup", V_AS_IS},
    {"warmup_steps", "warmup", V_AS_IS},
    {"lr_scheduler_type", "schedule", V_SCHEDULE},
    {"eval_steps", "eval-every", V_AS_IS},
    {"eval_strategy", "eval-every", V_EVAL_STRAT},
    {"evaluation_strategy", "eval-every", V_EVAL_STRAT},
    {"save_steps", "save-every", V_AS_IS},
    {"save_total_limit", "save-total-limit", V_AS_IS},
    {"early_stopping_patience", "patience", V_AS_IS},
    {"early_stopping_threshold", "early-stopping-threshold", V_AS_IS},
    {"resume_from_checkpoint", "resume", V_RESUME},
    {"seed", "seed", V_AS_IS},
    {"output_dir", "output", V_AS_IS},
    {"weight_decay", "weight-decay", V_AS_IS},
    {"max_grad_norm", "max-grad-norm", V_AS_IS},
    {"gradient_checkpointing", "checkpointing", V_AS_IS},
    {"logging_steps", "log-every", V_AS_IS},
    {"completion_only_loss", "loss-on", V_LOSS_ONLY},
    {"assistant_only_loss", "loss-on", V_LOSS_ONLY},
    {"precompute_ref_log_probs", "precompute-ref", V_AS_IS},
};
#define N_ALIAS (sizeof k_alias / sizeof k_alias[0])

int af_settings_is_yaml_path(const char *path) {
    if (!path) return 0;
    size_t n = strlen(path);
    return (n >= 5 && !strcasecmp(path + n - 5, ".yaml")) || (n >= 4 && !strcasecmp(path + n - 4, ".yml"));
}

/* Levenshtein distance of a and b (both at most 64 bytes are compared). */
static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 64) n = 64;
    if (m > 64) m = 64;
    int row[65];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

/* The afinar key info of `key` (afinar's spelling, or with '_' for '-'), or NULL. */
static const af_setting_info *find_afinar_key(const char *key) {
    int32_t n = 0;
    const af_setting_info *k = af_train_setting_keys(&n);
    char norm[80];
    size_t l = strlen(key);
    if (l >= sizeof norm) return NULL;
    for (size_t i = 0; i <= l; i++) norm[i] = key[i] == '_' ? '-' : key[i];
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(k[i].name, norm)) return &k[i];
    return NULL;
}

static const af_setting_info *info_of(const char *key) {
    int32_t n = 0;
    const af_setting_info *k = af_train_setting_keys(&n);
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(k[i].name, key)) return &k[i];
    return NULL;
}

/* The known name nearest to `key` (aliases and afinar keys in their '_' spelling). */
static void nearest_name(const char *key, char *buf, size_t cap) {
    int best = 1 << 30;
    buf[0] = 0;
    for (size_t i = 0; i < N_ALIAS; i++) {
        int d = edit_distance(key, k_alias[i].name);
        if (d < best) best = d, snprintf(buf, cap, "%s", k_alias[i].name);
    }
    int32_t n = 0;
    const af_setting_info *k = af_train_setting_keys(&n);
    for (int32_t i = 0; i < n; i++) {
        char u[80];
        snprintf(u, sizeof u, "%s", k[i].name);
        for (char *p = u; *p; p++)
            if (*p == '-') *p = '_';
        int d = edit_distance(key, u);
        if (d < best) best = d, snprintf(buf, cap, "%s", u);
    }
}

typedef struct yctx {
    const char *name, *what;
    yaml_parser_t p;
    af_train_settings *s;
    int32_t n_keys;
    long *set_line; /* [n_keys] line where each afinar key was set (0: not yet) */
    char **set_by;  /* [n_keys] the YAML name that set it (owned) */
    int eval_epoch; /* eval_strategy: epoch was given */
} yctx;

static af_status at(const yctx *y, const yaml_mark_t *m, const char *fmt, const char *a, const char *b) {
    char msg[600];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return af_fail(AF_ERR_FORMAT, "%s:%lu:%lu: %s", y->name, (unsigned long)m->line + 1, (unsigned long)m->column + 1,
                   msg);
}

static af_status next_event(yctx *y, yaml_event_t *ev) {
    if (yaml_parser_parse(&y->p, ev)) return AF_OK;
    const yaml_mark_t *m = &y->p.problem_mark;
    return af_fail(AF_ERR_FORMAT, "%s:%lu:%lu: invalid YAML in the %s: %s%s%s", y->name, (unsigned long)m->line + 1,
                   (unsigned long)m->column + 1, y->what, y->p.problem ? y->p.problem : "parse error",
                   y->p.context ? " " : "", y->p.context ? y->p.context : "");
}

static int is_null_scalar(const yaml_event_t *ev) {
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)ev->data.scalar.value;
    return !v[0] || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* YAML 1.1 booleans: 1/0 for true/false, -1 for anything else. */
static int yaml_bool(const char *v) {
    static const char *const t[] = {"true", "yes", "on", "y"}, *const f[] = {"false", "no", "off", "n"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, t[i])) return 1;
        if (!strcasecmp(v, f[i])) return 0;
    }
    return -1;
}

/* Store key = value (text) or the boolean, checking the key is set once. */
static af_status put(yctx *y, const yaml_mark_t *m, const char *yname, const char *key, const char *value) {
    const af_setting_info *d = info_of(key);
    if (!d) return at(y, m, "key '%s': no setting '%s'", yname, key); /* the table names only real keys */
    int32_t nk = 0;
    const int32_t idx = (int32_t)(d - af_train_setting_keys(&nk));
    if (y->set_line[idx]) {
        char other[160];
        snprintf(other, sizeof other, "%s' (line %ld", y->set_by[idx], y->set_line[idx]);
        return at(y, m, "key '%s': the setting is already given by '%s); give it once", yname, other);
    }
    af_status st;
    if (d->kind == AF_SETTING_BOOL) {
        int b = yaml_bool(value);
        if (b < 0) return at(y, m, "key '%s': expected true or false, got '%.60s'", yname, value);
        st = af_train_settings_set_bool(y->s, key, b);
    } else {
        st = af_train_settings_set(y->s, key, value);
    }
    if (st != AF_OK) return st;
    y->set_line[idx] = (long)m->line + 1;
    y->set_by[idx] = strdup(yname);
    return y->set_by[idx] ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
}

/* Translate and store one key whose value is the scalar `v` (NULL: a sequence already joined in
 * `v`... see read_value) following the alias kind. */
static af_status apply(yctx *y, const yaml_mark_t *m, const char *yname, const alias *a, const char *key,
                       const char *v) {
    if (y->eval_epoch && !strcmp(key, "eval-every")) return AF_OK; /* eval_strategy: epoch decides */
    switch (a ? a->kind : V_AS_IS) {
    case V_AS_IS:
    case V_TARGETS: return put(y, m, yname, key, v);
    case V_SCHEDULE: {
        const char *to = !strcmp(v, "cosine") ? "cosine" : !strcmp(v, "linear") ? "linear"
                       : (!strcmp(v, "constant") || !strcmp(v, "constant_with_warmup")) ? "constant"
                       : (!strcmp(v, "warmup_stable_decay") || !strcmp(v, "wsd")) ? "wsd" : NULL;
        if (!to)
            return at(y, m, "key '%s': scheduler '%.60s' is not available (afinar has cosine, linear, constant, "
                            "constant_with_warmup and warmup_stable_decay, all after a linear warm-up)", yname, v);
        return put(y, m, yname, key, to);
    }
    case V_MAX_STEPS: return !strcmp(v, "-1") ? AF_OK : put(y, m, yname, key, v);
    case V_RESUME: {
        int b = yaml_bool(v);
        if (b == 0) return AF_OK;
        if (b == 1) { /* transformers: the newest checkpoint of output_dir */
            const char *out = af_train_settings_get(y->s, "output");
            if (!out) return at(y, m, "key '%s': true needs output_dir before it (or give the checkpoint's path)", yname, NULL);
            return put(y, m, yname, key, out);
        }
        return put(y, m, yname, key, v);
    }
    case V_EVAL_STRAT:
        if (!strcmp(v, "steps")) return AF_OK; /* eval_steps gives the interval */
        if (!strcmp(v, "epoch")) { /* every epoch (eval-every 0); eval_steps, before or after, is ignored as in transformers */
            const af_setting_info *d = info_of(key);
            int32_t nk = 0;
            const int32_t idx = (int32_t)(d - af_train_setting_keys(&nk));
            af_train_settings_unset(y->s, key);
            free(y->set_by[idx]);
            y->set_by[idx] = NULL;
            y->set_line[idx] = 0;
            y->eval_epoch = 1;
            return put(y, m, yname, key, "0");
        }
        return at(y, m, "key '%s': '%.60s' is not available (steps or epoch; afinar evaluates whenever validation data "
                        "are given)", yname, v);
    case V_LOSS_ONLY: {
        int b = yaml_bool(v);
        if (b < 0) return at(y, m, "key '%s': expected true or false, got '%.60s'", yname, v);
        if (af_train_settings_get(y->s, "loss-on")) return AF_OK; /* the other name of the pair said it */
        return put(y, m, yname, key, b ? "auto" : "all");
    }
    case V_TASK_TYPE:
        if (!strcasecmp(v, "CAUSAL_LM")) return put(y, m, yname, key, "causal-lm");
        if (!strcasecmp(v, "SEQ_CLS")) return put(y, m, yname, key, "classification");
        return at(y, m, "key '%s': '%.60s' is not available (CAUSAL_LM or SEQ_CLS)", yname, v);
    case V_BIAS_NONE:
        if (!strcmp(v, "none")) return AF_OK;
        return at(y, m, "key '%s': '%.60s' is not available (afinar's LoRA has no bias terms: none)", yname, v);
    case V_LORA_INIT:
        if (yaml_bool(v) == 1) return put(y, m, yname, key, "default");
        if (!strcmp(v, "gaussian") || !strcmp(v, "pissa") || !strcmp(v, "olora")) return put(y, m, yname, key, v);
        if (!strncmp(v, "pissa_niter_", 12)) return put(y, m, yname, key, "pissa"); /* afinar's SVD is exact */
        return at(y, m, "key '%s': '%.60s' is not available (true, gaussian, pissa, pissa_niter_N (an exact SVD) or "
                        "olora; PEFT's loftq, eva, corda, orthogonal and false are not implemented)", yname, v);
    }
    return AF_OK;
}

/* A sequence of scalars (after its SEQUENCE_START) joined with ','; *out malloc'ed. */
static af_status read_list(yctx *y, const char *yname, char **out) {
    size_t cap = 64, len = 0;
    char *b = malloc(cap);
    if (!b) return af_fail(AF_ERR_NOMEM, "out of memory");
    b[0] = 0;
    for (;;) {
        yaml_event_t ev;
        af_status st = next_event(y, &ev);
        if (st != AF_OK) {
            free(b);
            return st;
        }
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            st = at(y, &ev.start_mark, "key '%s': expected a list of names", yname, NULL);
            yaml_event_delete(&ev);
            free(b);
            return st;
        }
        const char *v = (const char *)ev.data.scalar.value;
        size_t vl = strlen(v);
        if (len + vl + 2 > cap) {
            while (len + vl + 2 > cap) cap *= 2;
            char *nb = realloc(b, cap);
            if (!nb) {
                yaml_event_delete(&ev);
                free(b);
                return af_fail(AF_ERR_NOMEM, "out of memory");
            }
            b = nb;
        }
        if (len) b[len++] = ',';
        memcpy(b + len, v, vl + 1);
        len += vl;
        yaml_event_delete(&ev);
    }
    *out = b;
    return AF_OK;
}

/* One key of the top mapping (its SCALAR event `kev`) and its value. */
static af_status one_pair(yctx *y, const yaml_event_t *kev) {
    const char *yname = (const char *)kev->data.scalar.value;
    const yaml_mark_t *m = &kev->start_mark;
    const alias *a = NULL;
    for (size_t i = 0; i < N_ALIAS && !a; i++)
        if (!strcmp(k_alias[i].name, yname)) a = &k_alias[i];
    const af_setting_info *d = a ? NULL : find_afinar_key(yname);
    if (!a && !d) {
        char near[80];
        nearest_name(yname, near, sizeof near);
        return at(y, m, "unknown key '%.80s' (nearest known key: %s; docs/DATA.md lists the names)", yname, near);
    }
    const char *key = a ? a->key : d->name;
    yaml_event_t ev;
    AF_TRY(next_event(y, &ev));
    af_status st = AF_OK;
    if (ev.type == YAML_SCALAR_EVENT) {
        if (!is_null_scalar(&ev)) st = apply(y, m, yname, a, key, (const char *)ev.data.scalar.value);
    } else if (ev.type == YAML_SEQUENCE_START_EVENT && (a ? a->kind == V_TARGETS : d->kind == AF_SETTING_TEXT)) {
        /* a list for a text setting: its comma list (targets, labels, class weights, layers_to_transform) */
        char *list = NULL;
        st = read_list(y, yname, &list);
        if (st == AF_OK) st = put(y, m, yname, key, list);
        free(list);
    } else if (ev.type == YAML_ALIAS_EVENT) {
        st = at(y, &ev.start_mark, "key '%s': YAML aliases (*name) are not accepted in a settings file", yname, NULL);
    } else {
        st = at(y, &ev.start_mark, "key '%s': expected a single value, got a %s", yname,
                ev.type == YAML_MAPPING_START_EVENT ? "mapping (nested settings are not accepted)" : "list");
    }
    yaml_event_delete(&ev);
    return st;
}

static af_status empty_doc(const yctx *y) {
    return af_fail(AF_ERR_FORMAT, "%s: %s is empty (expected a YAML mapping, name: value per line)", y->name, y->what);
}

/* The whole stream: STREAM_START DOCUMENT_START MAPPING_START (key value)* MAPPING_END DOCUMENT_END
 * STREAM_END; an empty stream or an empty document is "empty". */
static af_status parse_stream(yctx *y) {
    yaml_event_t ev;
    af_status st = AF_OK;
    int stage = 0; /* 0 stream start, 1 document start, 2 the top node, 3 in the mapping, 4 document end, 5 stream end */
    while (st == AF_OK && stage < 6) {
        AF_TRY(next_event(y, &ev));
        const yaml_event_type_t t = ev.type;
        switch (stage) {
        case 0: stage = 1; break; /* STREAM_START (libyaml always starts with it) */
        case 1:
            if (t == YAML_STREAM_END_EVENT) st = empty_doc(y);
            stage = 2; /* DOCUMENT_START */
            break;
        case 2:
            if (t == YAML_MAPPING_START_EVENT) stage = 3;
            else if (t == YAML_SCALAR_EVENT && is_null_scalar(&ev)) st = empty_doc(y);
            else st = at(y, &ev.start_mark, "the %s must be a YAML mapping (name: value, one per line)", y->what, NULL);
            break;
        case 3:
            if (t == YAML_MAPPING_END_EVENT) stage = 4;
            else if (t == YAML_SCALAR_EVENT) st = one_pair(y, &ev);
            else st = at(y, &ev.start_mark, "expected a key (name: value)", NULL, NULL);
            break;
        case 4: stage = 5; break; /* DOCUMENT_END */
        default:
            if (t != YAML_STREAM_END_EVENT) st = at(y, &ev.start_mark, "one YAML document per settings file", NULL, NULL);
            stage = 6;
        }
        yaml_event_delete(&ev);
    }
    return st;
}

af_status af_train_settings_parse_yaml(const char *name, const char *what, const char *text, size_t len,
                                       af_train_settings **out) {
    if (!name || !what || !text || !out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_parse_yaml: NULL argument");
    *out = NULL;
    yctx y;
    memset(&y, 0, sizeof y);
    y.name = name;
    y.what = what;
    af_train_setting_keys(&y.n_keys);
    y.set_line = calloc((size_t)y.n_keys, sizeof *y.set_line);
    y.set_by = calloc((size_t)y.n_keys, sizeof *y.set_by);
    af_status st = y.set_line && y.set_by ? af_train_settings_new(&y.s) : af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK && !yaml_parser_initialize(&y.p)) st = af_fail(AF_ERR_NOMEM, "out of memory");
    else if (st == AF_OK) {
        yaml_parser_set_input_string(&y.p, (const unsigned char *)text, len);
        st = parse_stream(&y);
        yaml_parser_delete(&y.p);
    }
    for (int32_t i = 0; y.set_by && i < y.n_keys; i++) free(y.set_by[i]);
    free(y.set_by);
    free(y.set_line);
    if (st != AF_OK) {
        af_train_settings_free(y.s);
        return st;
    }
    *out = y.s;
    return AF_OK;
}

af_status af_train_settings_read_yaml(const char *path, const char *what, af_train_settings **out) {
    if (!path || !what || !out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_read_yaml: NULL argument");
    *out = NULL;
    const char *why = NULL;
    size_t len = 0;
    char *txt = af_read_file_max(path, YAML_MAX_BYTES, &len, &why); /* never blocks */
    if (!txt) return af_fail(AF_ERR_IO, "%s: cannot read %s: %s", path, what, why ? why : strerror(errno));
    af_status st = af_train_settings_parse_yaml(path, what, txt, len, out);
    free(txt);
    return st;
}

/* ---- writing ---- */
typedef struct obuf {
    char *b;
    size_t len, cap;
} obuf;

static int write_cb(void *data, unsigned char *buf, size_t size) {
    obuf *o = data;
    if (o->len + size + 1 > o->cap) {
        size_t nc = o->cap ? o->cap : 1024;
        while (o->len + size + 1 > nc) nc *= 2;
        char *nb = realloc(o->b, nc);
        if (!nb) return 0;
        o->b = nb;
        o->cap = nc;
    }
    memcpy(o->b + o->len, buf, size);
    o->len += size;
    o->b[o->len] = 0;
    return 1;
}

static int emit_scalar(yaml_emitter_t *e, const char *v, int quoted) {
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), !quoted, 1,
                                      quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE))
        return 0;
    return yaml_emitter_emit(e, &ev);
}

af_status af_train_settings_write_yaml(const char *config_json, const char *path) {
    if (!config_json || !path) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_write_yaml: NULL argument");
    cJSON *j = cJSON_Parse(config_json);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return af_fail(AF_ERR_FORMAT, "%s: the settings are not a JSON object", path);
    }
    static const char head[] = "# afinar: the resolved settings of this run (afinar's keys; docs/DATA.md).\n"
                               "# Rerun or continue with: afinar train --config config.yaml [--resume DIR]\n";
    obuf o = {0};
    int ok = write_cb(&o, (unsigned char *)head, sizeof head - 1);
    yaml_emitter_t e;
    yaml_event_t ev;
    int have_e = ok && yaml_emitter_initialize(&e);
    ok = have_e;
    if (ok) {
        yaml_emitter_set_output(&e, write_cb, &o);
        yaml_emitter_set_unicode(&e, 1);
        yaml_emitter_set_width(&e, -1);
        ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(&e, &ev) &&
             yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && yaml_emitter_emit(&e, &ev) &&
             yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) &&
             yaml_emitter_emit(&e, &ev);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        if (!ok) break;
        char num[64];
        const char *v = NULL;
        int quoted = 0;
        if (cJSON_IsBool(it)) v = cJSON_IsTrue(it) ? "true" : "false";
        else if (cJSON_IsNumber(it)) snprintf(num, sizeof num, "%.17g", it->valuedouble), v = num;
        else if (cJSON_IsString(it)) v = it->valuestring, quoted = 1;
        else continue; /* nothing else is a setting */
        ok = emit_scalar(&e, it->string, 0) && emit_scalar(&e, v, quoted);
    }
    if (ok)
        ok = yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev) &&
             yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&e, &ev) &&
             yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev);
    if (have_e) yaml_emitter_delete(&e);
    cJSON_Delete(j);
    af_status st = ok ? af_write_file_atomic(path, o.b, o.len) : af_fail(AF_ERR_NOMEM, "%s: cannot make the YAML text", path);
    free(o.b);
    return st;
}
