/*
 * settings.c — the settings of a training run by key, and their JSON form (declared in
 * include/afinar.h, "Training settings by key"). The keys are the long flags of `afinar train`;
 * a settings object is a cJSON object holding, per key, a string (flag text), a number or a
 * boolean as given, checked and converted only by af_train_settings_to_opts.
 */
#include "train/optim.h"
#include "train/settings_internal.h"
#include "train/settings_yaml.h"

#include "core/core.h"
#include "core/fsutil.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* af_trainer_opts.interrupt is a `volatile int *` (afinar.h stays free of <signal.h>, which brings
 * POSIX names such as dup() into the caller's namespace); a signal handler's flag is a
 * `volatile sig_atomic_t`, so the two must be the same type. */
_Static_assert(_Generic((sig_atomic_t)0, int: 1, default: 0), "sig_atomic_t is not int");

struct af_train_settings {
    cJSON *obj; /* the keys in order; owns the strings af_train_settings_to_opts hands out */
};

#define BIG 1e15
static const af_setting_info k_keys[] = {
    {"model", AF_SETTING_TEXT, 'm', 0, 0, "FILE", "GGUF base model (needs its tokenizer)"},
    {"recipe", AF_SETTING_TEXT, 0, 0, 0, "auto|fixed", "auto (default): epochs, class weights, max_seq_len, LoRA layers, warm-up and evaluation interval chosen from the data within a compute budget (each choice printed with its reason; flags you give win); fixed: the documented defaults"},
    {"time-budget", AF_SETTING_NUMBER, 0, 0.1, 1e6, "MIN", "finish within MIN minutes (setup, training, evaluations): auto fits layers, max_seq_len and passes to the measured speed; the run re-plans after its first steps and stops, evaluated and saved, at the budget"},
    {"task", AF_SETTING_TEXT, 0, 0, 0, "NAME", "classification (default) | causal-lm: next-token LoRA SFT on text, prompt/completion or messages JSONL; causal-lm defaults --targets all-linear --lora-layers all --lr 2e-4 (all linear layers as in QLoRA, Dettmers et al. 2023, and PEFT/TRL's SFT guides)"},
    {"loss-on", AF_SETTING_TEXT, 0, 0, 0, "auto|all", "causal-lm: tokens with a loss: auto (default: completion only for prompt/completion, assistant turns for messages, all for text) or all"},
    {"chat-template", AF_SETTING_TEXT, 0, 0, 0, "NAME", "causal-lm: render messages with chatml, gemma or gemma4 instead of the model's own template"},
    {"packing", AF_SETTING_BOOL, 0, 0, 0, NULL, "causal-lm: pack samples into micro-batches of --batch x --max-seq-len tokens by best-fit decreasing (default on; --no-packing: --batch samples each)"},
    {"train", AF_SETTING_TEXT, 0, 0, 0, "FILE", "training data: JSONL {\"text\": ..., \"label\": id|name} (or \"labels\": [...]), CSV or TSV with a header (docs/DATA.md)"},
    {"val", AF_SETTING_TEXT, 0, 0, 0, "FILE", "validation data (JSONL, CSV or TSV); evaluation, best checkpoint and early stopping use it"},
    {"val-split", AF_SETTING_NUMBER, 0, 0, 0.99, "F", "hold out fraction F of train (stratified, seeded) as validation (default 0: none)"},
    {"text-field", AF_SETTING_TEXT, 0, 0, 0, "NAME", "field (or column) holding the text (default: the first of text, sentence, content, input)"},
    {"label-field", AF_SETTING_TEXT, 0, 0, 0, "NAME", "field (or column) holding the label(s) (default label / labels)"},
    {"labels", AF_SETTING_TEXT, 0, 0, 0, "FILE|a,b,c", "label names: a file with one per line, or a comma list (fixes the ids)"},
    {"num-classes", AF_SETTING_INT, 0, 0, 1e6, "N", "number of classes for integer labels (default: max label + 1)"},
    {"multi-label", AF_SETTING_BOOL, 0, 0, 0, NULL, "require multi-label data (BCE loss; the data decide otherwise)"},
    {"targets", AF_SETTING_TEXT, 0, 0, 0, "SPEC", "LoRA targets: qv (default), qkv, all-linear, or a list of q,k,v,o,gate,up,down"},
    {"lora-layers", AF_SETTING_TEXT, 0, 0, 0, "A-B|topN", "layers with adapters, 0-based: all, A-B, A-, topN (default top10; the backward stops at the lowest)"},
    {"lora-r", AF_SETTING_INT, 0, 1, 4096, "R", "LoRA rank (default 16)"},
    {"lora-alpha", AF_SETTING_NUMBER, 0, 1e-9, 1e6, "A", "LoRA alpha (default 32; scale alpha/r)"},
    {"lora-dropout", AF_SETTING_NUMBER, 0, 0, 0.99, "P", "dropout on the LoRA input (default 0.05)"},
    {"rslora", AF_SETTING_BOOL, 0, 0, 0, NULL, "rank-stabilised scale alpha/sqrt(r)"},
    {"pooling", AF_SETTING_TEXT, 0, 0, 0, "mean|last", "sequence pooling for the head (default mean; last = transformers/PEFT)"},
    {"head-bias", AF_SETTING_BOOL, 0, 0, 0, NULL, "train a head bias (PEFT's score layer has none: lost outside afinar)"},
    {"class-weights", AF_SETTING_TEXT, 0, 0, 0, "SPEC", "uniform (default), inverse-freq, sqrt-inverse, or w1,w2,..."},
    {"lr", AF_SETTING_NUMBER, 0, 0, 10, "LR", "peak learning rate (default 5e-4)"},
    {"lr-min", AF_SETTING_NUMBER, 0, 0, 10, "LR", "floor of the cosine/linear decay (default 0)"},
    {"schedule", AF_SETTING_TEXT, 0, 0, 0, "NAME", "constant | cosine (default) | linear, after a linear warm-up"},
    {"warmup", AF_SETTING_TEXT, 0, 0, 0, "N|F|P%", "warm-up: N steps, or a fraction F < 1 / P% of all steps (default 6%)"},
    {"epochs", AF_SETTING_NUMBER, 0, 0, 1e6, "E", "passes over the training data, may be fractional (default 1)"},
    {"max-steps", AF_SETTING_INT, 0, 0, BIG, "N", "optimizer steps; sets the length instead of --epochs"},
    {"batch", AF_SETTING_INT, 0, 1, 1e6, "N", "samples per micro-batch (default 8)"},
    {"grad-accum", AF_SETTING_INT, 0, 1, 1e6, "N", "micro-batches per optimizer step (default 2)"},
    {"max-grad-norm", AF_SETTING_NUMBER, 0, 0, 1e9, "X", "clip the global gradient norm (default 1.0; 0 = off)"},
    {"weight-decay", AF_SETTING_NUMBER, 0, 0, 10, "X", "AdamW weight decay (default 0.01; not on the head bias)"},
    {"seed", AF_SETTING_INT, 0, 0, 9007199254740991.0, "N", "seed of init, shuffles, split and dropout (default 42)"},
    {"max-seq-len", AF_SETTING_INT, 0, 1, 1 << 20, "N", "truncate samples to N tokens (default 128)"},
    {"prefix-cache", AF_SETTING_INT, 0, 0, 1 << 24, "MIB", "keep the frozen layers' output per sample (default 2048; 0 = off)"},
    {"checkpointing", AF_SETTING_BOOL, 0, 0, 0, NULL, "recompute activations in the backward (less memory, ~1.3x time)"},
    {"eval-every", AF_SETTING_INT, 0, 0, BIG, "N", "evaluate every N steps (default 0: at each epoch end)"},
    {"eval-batch", AF_SETTING_INT, 0, 0, 1e6, "N", "samples per evaluation batch (default: --batch)"},
    {"patience", AF_SETTING_INT, 0, 0, 1e9, "N", "stop after N evaluations without macro-F1 gain (default 0: off)"},
    {"save-every", AF_SETTING_INT, 0, 0, BIG, "N", "checkpoint every N steps (default 0: at each evaluation / epoch end)"},
    {"save-total-limit", AF_SETTING_INT, 0, 0, 1e6, "N", "checkpoints kept, newest first (default 2; 0 = all)"},
    {"output", AF_SETTING_TEXT, 'o', 0, 0, "DIR", "output directory (checkpoints, best/, final/, metrics.jsonl)"},
    {"overwrite", AF_SETTING_BOOL, 0, 0, 0, NULL, "replace the run already in the output directory"},
    {"resume", AF_SETTING_TEXT, 0, 0, 0, "DIR", "continue exactly from a checkpoint (or a run directory's newest one)"},
    {"threads", AF_SETTING_INT, 't', 0, 1024, "N", "compute threads (default 0: all cores)"},
    {"poll", AF_SETTING_INT, 0, 0, 1e7, "US", "microseconds threads spin between operations before sleeping (default 1000; 0 = sleep at once)"},
    {"memory-limit", AF_SETTING_NUMBER, 0, 0, 1e9, "MIB", "refuse to start above this estimated peak (default: RAM or cgroup limit)"},
    {"bf16", AF_SETTING_BOOL, 0, 0, 0, NULL, "bfloat16 operands, f32 accumulation in the large products (AVX512_BF16; ~1.4x faster)"},
    {"device", AF_SETTING_TEXT, 0, 0, 0, "DEV", "compute device: cpu (default), vulkan, vulkan:N, auto (a Vulkan device when present and the run fits it, else the CPU); 'afinar devices' lists them"},
    {"quantize", AF_SETTING_TEXT, 0, 0, 0, "TYPE", "quantize the base model's f32/f16/bf16 projections at load: nf4 (QLoRA NormalFloat4, bitsandbytes-exact) | q8_0 | f16 | bf16 | none (default)"},
    {"max-nonfinite", AF_SETTING_INT, 0, 1, 1e6, "N", "stop after N consecutive non-finite steps (default 5)"},
    {"log-every", AF_SETTING_INT, 0, 0, BIG, "N", "progress line every N steps when stderr is not a terminal"},
    {"plot", AF_SETTING_BOOL, 0, 0, 0, NULL, "write curves.png with gnuplot at the end (default on; --no-plot)"},
};
#undef BIG
#define N_KEYS ((int32_t)(sizeof k_keys / sizeof *k_keys))

const af_setting_info *af_train_setting_keys(int32_t *n) {
    if (n) *n = N_KEYS;
    return k_keys;
}

static const af_setting_info *find_key(const char *name) {
    for (int32_t i = 0; name && i < N_KEYS; i++)
        if (!strcmp(k_keys[i].name, name)) return &k_keys[i];
    return NULL;
}

af_status af_train_settings_new(af_train_settings **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_new: NULL out");
    *out = calloc(1, sizeof **out);
    if (*out) (*out)->obj = cJSON_CreateObject();
    if (!*out || !(*out)->obj) {
        af_train_settings_free(*out);
        *out = NULL;
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return AF_OK;
}

void af_train_settings_free(af_train_settings *s) {
    if (!s) return;
    cJSON_Delete(s->obj);
    free(s);
}

/* Replace `key` by `item` (taken over; NULL = allocation failed) at the end of the order. */
static af_status put(af_train_settings *s, const char *key, cJSON *item) {
    if (!item) return af_fail(AF_ERR_NOMEM, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(s->obj, key);
    if (!cJSON_AddItemToObject(s->obj, key, item)) {
        cJSON_Delete(item);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return AF_OK;
}

af_status af_train_settings_set(af_train_settings *s, const char *key, const char *value) {
    if (!s || !key || !value) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_set: NULL argument");
    return put(s, key, cJSON_CreateString(value));
}

af_status af_train_settings_set_bool(af_train_settings *s, const char *key, int value) {
    if (!s || !key) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_set_bool: NULL argument");
    return put(s, key, cJSON_CreateBool(value != 0));
}

void af_train_settings_unset(af_train_settings *s, const char *key) {
    if (s && key) cJSON_DeleteItemFromObjectCaseSensitive(s->obj, key);
}

const char *af_train_settings_get(const af_train_settings *s, const char *key) {
    if (!s || !key) return NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s->obj, key);
    return cJSON_IsString(e) ? e->valuestring : NULL;
}

af_status af_train_settings_merge(af_train_settings *dst, const af_train_settings *src) {
    if (!dst || !src) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_merge: NULL argument");
    const cJSON *e;
    cJSON_ArrayForEach(e, src->obj) {
        cJSON *dup = cJSON_Duplicate(e, 1);
        if (!dup) return af_fail(AF_ERR_NOMEM, "out of memory");
        if (cJSON_GetObjectItemCaseSensitive(dst->obj, e->string))
            cJSON_ReplaceItemInObjectCaseSensitive(dst->obj, e->string, dup);
        else
            cJSON_AddItemToObject(dst->obj, e->string, dup);
    }
    return AF_OK;
}

af_status af_train_settings_read(const char *path, const char *what, af_train_settings **out) {
    if (af_settings_is_yaml_path(path)) return af_train_settings_read_yaml(path, what, out); /* .yaml / .yml */
    return af_train_settings_read_ext(path, what, out, NULL);
}

af_status af_train_settings_read_ext(const char *path, const char *what, af_train_settings **out, cJSON **ckpt_paths) {
    if (!path || !what || !out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_read: NULL argument");
    *out = NULL;
    if (ckpt_paths) *ckpt_paths = NULL;
    const char *why = NULL;
    char *txt = af_read_file_max(path, (size_t)16 << 20, NULL, &why); /* never blocks; 16 MiB at most */
    if (!txt) return af_fail(AF_ERR_IO, "%s: cannot read %s: %s", path, what, why ? why : strerror(errno));
    cJSON *j = cJSON_Parse(txt);
    if (!j) {
        /* cJSON points at the first byte it could not parse; report it as line:column (1-based) */
        const char *ep = cJSON_GetErrorPtr();
        size_t len = strlen(txt), off = (ep && ep >= txt && ep <= txt + len) ? (size_t)(ep - txt) : len;
        long line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (txt[i] == '\n') line++, col = 1;
            else col++;
        }
        af_status st;
        if (len == 0 || strspn(txt, " \t\r\n") == len)
            st = af_fail(AF_ERR_FORMAT, "%s: %s is empty (expected a JSON object)", path, what);
        else
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: invalid JSON at column %ld (byte %zu) in the %s", path, line, col, off,
                         what);
        free(txt);
        return st;
    }
    free(txt);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return af_fail(AF_ERR_FORMAT, "%s: %s must be a JSON object {\"flag-name\": value, ...}", path, what);
    }
    cJSON *cp = cJSON_DetachItemFromObjectCaseSensitive(j, AF_CKPT_PATHS_KEY); /* a checkpoint's own record */
    if (cp && !cJSON_IsObject(cp)) {
        cJSON_Delete(cp);
        cJSON_Delete(j);
        return af_fail(AF_ERR_FORMAT, "%s: key \"%s\": expected an object", path, AF_CKPT_PATHS_KEY);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        const af_setting_info *d = find_key(e->string);
        if (!d || !strcmp(e->string, "resume")) {
            af_status st = af_fail(AF_ERR_FORMAT, "%s: unknown key \"%s\"%s", path, e->string,
                                   d ? " (give --resume on the command line)"
                                     : " (keys are the flag names without dashes, e.g. \"grad-accum\")");
            cJSON_Delete(j);
            cJSON_Delete(cp);
            return st;
        }
        if (!(cJSON_IsString(e) || cJSON_IsNumber(e) || cJSON_IsBool(e))) {
            af_status st = af_fail(AF_ERR_FORMAT, "%s: key \"%s\": expected a string, number or boolean", path, e->string);
            cJSON_Delete(j);
            cJSON_Delete(cp);
            return st;
        }
    }
    *out = calloc(1, sizeof **out);
    if (!*out) {
        cJSON_Delete(j);
        cJSON_Delete(cp);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    (*out)->obj = j;
    if (ckpt_paths) *ckpt_paths = cp;
    else cJSON_Delete(cp);
    return AF_OK;
}

/* Value of `e` as text for a TEXT key (numbers are printed). */
static int get_str(const cJSON *e, const char **s, char *buf, size_t cap) {
    if (cJSON_IsString(e)) *s = e->valuestring;
    else if (cJSON_IsNumber(e)) snprintf(buf, cap, "%.17g", e->valuedouble), *s = buf;
    else return 0;
    return 1;
}

/* Numeric value of an INT / NUMBER key, checked against the key's range. Messages quote the value
 * as given: "--batch: expected an integer in [1, 1000000], got '0'". */
static af_status get_num(const af_setting_info *d, const cJSON *e, double *v) {
    char given[64];
    const char *what = d->kind == AF_SETTING_INT ? "an integer" : "a number";
    if (cJSON_IsNumber(e)) {
        *v = e->valuedouble;
        snprintf(given, sizeof given, "%.17g", *v);
    } else if (cJSON_IsString(e)) {
        char *end;
        errno = 0;
        *v = strtod(e->valuestring, &end);
        snprintf(given, sizeof given, "%.60s", e->valuestring);
        if (errno || end == e->valuestring || *end)
            return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s, got '%s'", d->name, what, given);
    } else {
        return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s", d->name, what);
    }
    if (!isfinite(*v) || *v < d->lo || *v > d->hi || (d->kind == AF_SETTING_INT && *v != floor(*v)))
        return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s in [%.15g, %.15g], got '%s'", d->name, what, d->lo, d->hi,
                       given);
    return AF_OK;
}

static af_status get_bool(const af_setting_info *d, const cJSON *e, int *b) {
    if (cJSON_IsBool(e)) *b = cJSON_IsTrue(e);
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "true") || !strcmp(e->valuestring, "1"))) *b = 1;
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "false") || !strcmp(e->valuestring, "0"))) *b = 0;
    else if (cJSON_IsNumber(e) && (e->valuedouble == 0 || e->valuedouble == 1)) *b = e->valuedouble != 0;
    else return af_fail(AF_ERR_INVALID_ARG, "--%s: expected true or false", d->name);
    return AF_OK;
}

/* Warm-up spec: "N" steps, "F" fraction < 1, "P%". */
static af_status parse_warmup(const cJSON *e, af_trainer_opts *o) {
    double v;
    char *end;
    const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
    if (cJSON_IsNumber(e)) v = e->valuedouble, end = (char *)"";
    else if (s) {
        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s) goto bad;
    } else goto bad;
    if (!isfinite(v) || v < 0) goto bad;
    if (*end == '%' && !end[1]) {
        if (v > 100) goto bad;
        o->warmup_steps = -1, o->warmup_ratio = v / 100;
    } else if (*end) goto bad;
    else if (v < 1 && v > 0) o->warmup_steps = -1, o->warmup_ratio = v;
    else if (v == floor(v) && v <= 1e15) o->warmup_steps = (int64_t)v;
    else goto bad;
    return AF_OK;
bad:
    return af_fail(AF_ERR_INVALID_ARG, "--warmup: expected N steps, a fraction below 1 or P%%, got '%s'",
                   s ? s : (cJSON_IsNumber(e) ? "a number out of range" : "a non-number"));
}

af_status af_train_settings_to_opts(af_train_settings *ts, af_trainer_opts *o) {
    if (!ts || !o) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_to_opts: NULL argument");
    af_trainer_opts_defaults(o);
    o->recipe = AF_RECIPE_AUTO; /* settings (the command line, --config) default to the automatic recipe */
    const cJSON *e;
    int have_epochs = 0, have_steps = 0;
    /* the task first: causal-lm changes the defaults of the keys below (see the "task" help) */
    e = cJSON_GetObjectItemCaseSensitive(ts->obj, "task");
    if (e) {
        const char *task = cJSON_IsString(e) ? e->valuestring : NULL;
        if (task && !strcmp(task, "causal-lm")) {
            o->task = AF_TASK_CAUSAL_LM;
            o->targets = "all-linear";
            o->lora_layers = "all";
            o->lr = 2e-4;
        } else if (!task || strcmp(task, "classification") != 0)
            return af_fail(AF_ERR_INVALID_ARG, "--task: expected classification or causal-lm, got '%s'",
                           task ? task : "a non-string");
    }
    cJSON_ArrayForEach(e, ts->obj) {
        const af_setting_info *d = find_key(e->string);
        if (!d) continue;
        const char *s = NULL;
        char buf[64];
        double v = 0;
        int b = 0;
        if (d->kind == AF_SETTING_TEXT) {
            if (!get_str(e, &s, buf, sizeof buf)) return af_fail(AF_ERR_INVALID_ARG, "--%s: expected a string", d->name);
            if (s == buf) { /* keep numbers given for strings alive: store the text in the object */
                cJSON *t = cJSON_CreateString(buf);
                if (!t) return af_fail(AF_ERR_NOMEM, "out of memory");
                cJSON_ReplaceItemInObjectCaseSensitive(ts->obj, d->name, t);
                return af_train_settings_to_opts(ts, o);
            }
        } else if (d->kind == AF_SETTING_BOOL) {
            AF_TRY(get_bool(d, e, &b));
        } else {
            AF_TRY(get_num(d, e, &v));
        }
        const char *n = d->name;
#define IS(x) (!strcmp(n, x))
        if (IS("model")) o->model_path = s;
        else if (IS("recipe")) {
            if (!strcmp(s, "auto")) o->recipe = AF_RECIPE_AUTO;
            else if (!strcmp(s, "fixed")) o->recipe = AF_RECIPE_FIXED;
            else return af_fail(AF_ERR_INVALID_ARG, "--recipe: expected auto or fixed, got '%s'", s);
        } else if (IS("time-budget")) o->time_budget_min = v;
        else if (IS("task")) continue; /* read above */
        else if (IS("loss-on")) o->loss_on = s;
        else if (IS("chat-template")) o->chat_template = s;
        else if (IS("packing")) o->packing = b;
        else if (IS("train")) o->train_path = s;
        else if (IS("val")) o->val_path = s;
        else if (IS("val-split")) o->val_split = v;
        else if (IS("text-field")) o->text_field = s;
        else if (IS("label-field")) o->label_field = s;
        else if (IS("labels")) o->labels = s;
        else if (IS("num-classes")) o->num_classes = (int32_t)v;
        else if (IS("multi-label")) o->multi_label = b;
        else if (IS("targets")) o->targets = s;
        else if (IS("lora-layers")) o->lora_layers = s;
        else if (IS("lora-r")) o->lora_r = (int32_t)v;
        else if (IS("lora-alpha")) o->lora_alpha = v;
        else if (IS("lora-dropout")) o->lora_dropout = v;
        else if (IS("rslora")) o->use_rslora = b;
        else if (IS("pooling")) {
            if (!strcmp(s, "mean")) o->pooling = AF_POOLING_MEAN;
            else if (!strcmp(s, "last")) o->pooling = AF_POOLING_LAST;
            else return af_fail(AF_ERR_INVALID_ARG, "--pooling: expected mean or last, got '%s'", s);
        } else if (IS("head-bias")) o->head_bias = b;
        else if (IS("class-weights")) o->class_weights = s;
        else if (IS("lr")) o->lr = v;
        else if (IS("lr-min")) o->lr_min = v;
        else if (IS("schedule")) {
            if (af_sched_parse(s, &o->schedule) != 0)
                return af_fail(AF_ERR_INVALID_ARG, "--schedule: expected constant, cosine or linear, got '%s'", s);
        } else if (IS("warmup")) {
            AF_TRY(parse_warmup(e, o));
        } else if (IS("epochs")) o->epochs = v, have_epochs = 1;
        else if (IS("max-steps")) o->max_steps = (int64_t)v, have_steps = v > 0;
        else if (IS("batch")) o->batch = (int32_t)v;
        else if (IS("grad-accum")) o->grad_accum = (int32_t)v;
        else if (IS("max-grad-norm")) o->max_grad_norm = v;
        else if (IS("weight-decay")) o->weight_decay = v;
        else if (IS("seed")) o->seed = (uint64_t)v;
        else if (IS("max-seq-len")) o->max_seq_len = (int32_t)v;
        else if (IS("checkpointing")) o->checkpointing = b;
        else if (IS("prefix-cache")) o->prefix_cache_mb = (int32_t)v;
        else if (IS("eval-every")) o->eval_every = (int64_t)v;
        else if (IS("eval-batch")) o->eval_batch = (int32_t)v;
        else if (IS("patience")) o->patience = (int32_t)v;
        else if (IS("save-every")) o->save_every = (int64_t)v;
        else if (IS("save-total-limit")) o->save_total_limit = (int32_t)v;
        else if (IS("output")) o->output_dir = s;
        else if (IS("overwrite")) o->overwrite = b;
        else if (IS("resume")) o->resume = s;
        else if (IS("threads")) o->threads = (int)v;
        else if (IS("poll")) o->poll_us = (int)v;
        else if (IS("bf16")) o->bf16 = b;
        else if (IS("quantize")) o->quantize = s;
        else if (IS("device")) o->device = s;
        else if (IS("memory-limit")) o->memory_limit_mb = v;
        else if (IS("max-nonfinite")) o->max_nonfinite = (int32_t)v;
        else if (IS("log-every")) o->log_every = (int64_t)v;
        else if (IS("plot")) o->plot = b;
#undef IS
    }
    /* which of the automatic recipe's settings were given (they win over its choices) */
    static const struct { const char *key; unsigned bit; } given[] = {
        {"class-weights", AF_GIVEN_CLASS_WEIGHTS},
        {"max-seq-len", AF_GIVEN_MAX_SEQ_LEN}, {"lora-layers", AF_GIVEN_LAYERS}, {"warmup", AF_GIVEN_WARMUP},
        {"eval-every", AF_GIVEN_EVAL_EVERY}};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++)
        if (cJSON_GetObjectItemCaseSensitive(ts->obj, given[i].key)) o->given |= given[i].bit;
    if (have_epochs || have_steps) o->given |= AF_GIVEN_LENGTH;
    if (o->val_path && o->val_split > 0)
        return af_fail(AF_ERR_INVALID_ARG,
                       "--val and --val-split conflict: give a validation file or a split fraction, not both");
    if (have_steps && !have_epochs) o->epochs = 0; /* --max-steps alone: the default epochs play no part */
    if (!(o->epochs > 0) && o->max_steps <= 0)
        return af_fail(AF_ERR_INVALID_ARG, "--epochs 0 trains nothing: give --epochs E > 0 or --max-steps N");
    return AF_OK;
}

af_status af_train_settings_to_json(const af_train_settings *s, char **out) {
    if (!s || !out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_to_json: NULL argument");
    *out = NULL;
    cJSON *saved = cJSON_Duplicate(s->obj, 1);
    if (saved) {
        cJSON_DeleteItemFromObjectCaseSensitive(saved, "resume");
        cJSON_DeleteItemFromObjectCaseSensitive(saved, "overwrite");
        *out = cJSON_Print(saved);
        cJSON_Delete(saved);
    }
    return *out ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
}
