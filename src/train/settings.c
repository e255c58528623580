/*
 * settings.c — the settings object of a training run by key, and its JSON form (declared in
 * include/afinar.h, "Training settings by key"). The keys are the long flags of `afinar train`
 * (the table: settings_table.c); a settings object is a cJSON object holding, per key, a string
 * (flag text), a number or a boolean as given, and where it came from; values are checked and
 * converted only by af_train_settings_to_opts (settings_table.c).
 */
#include "train/settings_internal.h"
#include "train/settings_yaml.h"

#include "core/core.h"
#include "core/fsutil.h"

#include <cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* af_trainer_opts.interrupt is a `volatile int *` (afinar.h stays free of <signal.h>, which brings
 * POSIX names such as dup() into the caller's namespace); a signal handler's flag is a
 * `volatile sig_atomic_t`, so the two must be the same type. */
_Static_assert(_Generic((sig_atomic_t)0, int: 1, default: 0), "sig_atomic_t is not int");

struct af_train_settings {
    cJSON *obj;    /* the keys in order; owns the strings af_train_settings_to_opts hands out */
    cJSON *origin; /* key -> af_setting_origin (a number); a key without one: AF_ORIGIN_FLAG */
};

static int known_key(const char *name) { return af_setting_index(name) >= 0; }

const cJSON *af_train_settings_item(const af_train_settings *s, const char *key) {
    return s && key ? cJSON_GetObjectItemCaseSensitive(s->obj, key) : NULL;
}

const cJSON *af_train_settings_first(const af_train_settings *s) { return s && s->obj ? s->obj->child : NULL; }

af_setting_origin af_train_settings_origin(const af_train_settings *s, const char *key) {
    const cJSON *o = s && key ? cJSON_GetObjectItemCaseSensitive(s->origin, key) : NULL;
    return cJSON_IsNumber(o) ? (af_setting_origin)o->valueint : AF_ORIGIN_FLAG;
}

/* Record `origin` for `key` (0 on allocation failure). */
static int put_origin(af_train_settings *s, const char *key, af_setting_origin origin) {
    cJSON *n = cJSON_CreateNumber((double)origin);
    if (!n) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(s->origin, key);
    if (!cJSON_AddItemToObject(s->origin, key, n)) {
        cJSON_Delete(n);
        return 0;
    }
    return 1;
}

void af_train_settings_set_origin(af_train_settings *s, af_setting_origin origin) {
    if (!s) return;
    const cJSON *e;
    cJSON_ArrayForEach(e, s->obj) put_origin(s, e->string, origin); /* (a failure leaves AF_ORIGIN_FLAG) */
}

af_status af_train_settings_new(af_train_settings **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_new: NULL out");
    *out = calloc(1, sizeof **out);
    if (*out) (*out)->obj = cJSON_CreateObject(), (*out)->origin = cJSON_CreateObject();
    if (!*out || !(*out)->obj || !(*out)->origin) {
        af_train_settings_free(*out);
        *out = NULL;
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return AF_OK;
}

void af_train_settings_free(af_train_settings *s) {
    if (!s) return;
    cJSON_Delete(s->obj);
    cJSON_Delete(s->origin);
    free(s);
}

/* Replace `key` by `item` (taken over; NULL = allocation failed) at the end of the order. */
static af_status put(af_train_settings *s, const char *key, cJSON *item, af_setting_origin origin) {
    if (!item) return af_fail(AF_ERR_NOMEM, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(s->obj, key);
    if (!cJSON_AddItemToObject(s->obj, key, item)) {
        cJSON_Delete(item);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return put_origin(s, key, origin) ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
}

af_status af_train_settings_restate(af_train_settings *s, const char *key, const char *value) {
    return put(s, key, cJSON_CreateString(value), af_train_settings_origin(s, key));
}

af_status af_train_settings_set(af_train_settings *s, const char *key, const char *value) {
    if (!s || !key || !value) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_set: NULL argument");
    return put(s, key, cJSON_CreateString(value), AF_ORIGIN_FLAG);
}

af_status af_train_settings_set_bool(af_train_settings *s, const char *key, int value) {
    if (!s || !key) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_set_bool: NULL argument");
    return put(s, key, cJSON_CreateBool(value != 0), AF_ORIGIN_FLAG);
}

void af_train_settings_unset(af_train_settings *s, const char *key) {
    if (!s || !key) return;
    cJSON_DeleteItemFromObjectCaseSensitive(s->obj, key);
    cJSON_DeleteItemFromObjectCaseSensitive(s->origin, key);
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
        if (!put_origin(dst, e->string, af_train_settings_origin(src, e->string)))
            return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return AF_OK;
}

af_status af_train_settings_read(const char *path, const char *what, af_train_settings **out) {
    if (af_settings_is_yaml_path(path)) { /* .yaml / .yml: the origin of a config file, as a JSON one's */
        AF_TRY(af_train_settings_read_yaml(path, what, out));
        af_train_settings_set_origin(*out, AF_ORIGIN_CONFIG);
        return AF_OK;
    }
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
        const int d = known_key(e->string);
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
    (*out)->origin = cJSON_CreateObject();
    if (!(*out)->origin) {
        af_train_settings_free(*out);
        *out = NULL;
        cJSON_Delete(cp);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    af_train_settings_set_origin(*out, AF_ORIGIN_CONFIG);
    if (ckpt_paths) *ckpt_paths = cp;
    else cJSON_Delete(cp);
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
