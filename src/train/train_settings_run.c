/* train_settings_run.c — one training run (or dry run) from a settings object, for callers that
 * are not the command line (the Python package): what `afinar train` / `afinar check` do after
 * parsing their flags — the checkpoint's own settings under given ones when resuming, the settings
 * turned into options, the report, the refusal on error diagnostics, the run — with the caller's
 * log descriptor, progress callback and interrupt / cancel flags, and the outcome as JSON (so the
 * caller needs no mirror of af_train_result). */
#include "afinar_app.h"

#include "core/core.h"
#include "core/fsutil.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* merged = (with "resume": the checkpoint's train_config.json) + s. */
static af_status resolve_settings(const af_train_settings *s, af_train_settings **merged, char **note) {
    *merged = NULL;
    *note = NULL;
    af_train_settings *base = NULL, *m = NULL;
    const char *res = af_train_settings_get(s, "resume");
    if (res) {
        char *ck = NULL;
        AF_TRY(af_trainer_find_checkpoint(res, &ck));
        char *cfg = af_path_join(ck, "train_config.json");
        struct stat sb;
        af_status st = cfg ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
        if (st == AF_OK && stat(cfg, &sb) == 0) st = af_train_settings_read_checkpoint(ck, &base, note);
        /* without train_config.json the given settings must be the original run's (the trainer
         * checks that they match the checkpoint's state) */
        free(cfg);
        free(ck);
        if (st != AF_OK) return st;
    }
    af_status st = af_train_settings_new(&m);
    if (st == AF_OK && base) st = af_train_settings_merge(m, base);
    if (st == AF_OK) st = af_train_settings_merge(m, s);
    af_train_settings_free(base);
    if (st != AF_OK) {
        af_train_settings_free(m);
        return st;
    }
    *merged = m;
    return AF_OK;
}

static void num_or_null(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static const char *stop_name(af_stop_reason r) {
    switch (r) {
    case AF_STOP_DONE: return "done";
    case AF_STOP_EARLY: return "early_stopping";
    case AF_STOP_INTERRUPTED: return "interrupted";
    case AF_STOP_NONFINITE: return "nonfinite";
    case AF_STOP_BUDGET: return "time_budget";
    }
    return "unknown";
}

/* The diagnostics (and the error count) as members of `o`. */
static void add_diags(cJSON *o, const af_trainer *t) {
    const af_diag_list *d = af_trainer_diags(t);
    cJSON *arr = cJSON_AddArrayToObject(o, "diagnostics");
    static const char *sev[] = {"info", "warning", "error"};
    for (int32_t i = 0; d && arr && i < d->n; i++) {
        cJSON *x = cJSON_CreateObject();
        if (!x) break;
        const af_diag *g = &d->items[i];
        cJSON_AddStringToObject(x, "severity", g->severity <= AF_DIAG_ERROR ? sev[g->severity] : "error");
        cJSON_AddStringToObject(x, "code", g->code);
        cJSON_AddStringToObject(x, "message", g->message);
        cJSON_AddStringToObject(x, "recommendation", g->recommendation);
        cJSON_AddItemToArray(arr, x);
    }
    cJSON_AddNumberToObject(o, "n_errors", af_trainer_n_errors(t));
}

/* "not training: " + every error diagnostic's message (memory estimate: see the report). */
static af_status refuse(const af_trainer *t) {
    const af_diag_list *d = af_trainer_diags(t);
    char msg[900];
    size_t k = (size_t)snprintf(msg, sizeof msg, "not training: %d error(s) in the configuration",
                                af_trainer_n_errors(t));
    for (int32_t i = 0; d && i < d->n && k < sizeof msg; i++)
        if (d->items[i].severity == AF_DIAG_ERROR)
            k += (size_t)snprintf(msg + k, sizeof msg - k, "; %s: %s", d->items[i].code, d->items[i].message);
    if (k < sizeof msg && af_trainer_n_errors(t) > 0 && (!d || d->n == 0))
        snprintf(msg + k, sizeof msg - k, "; the memory estimate exceeds the limit (see the report)");
    return af_fail(AF_ERR_INVALID_ARG, "%s", msg);
}

af_status af_train_settings_run(const af_train_settings *s, const af_train_hooks *h, int check_only,
                                char **result_json) {
    if (result_json) *result_json = NULL;
    if (!s || !result_json) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_run: NULL argument");
    af_train_settings *m = NULL;
    char *note = NULL, *config = NULL;
    FILE *log = NULL;
    af_trainer *t = NULL;
    cJSON *out = NULL;
    af_status st = resolve_settings(s, &m, &note);
    af_trainer_opts o;
    if (st == AF_OK) st = af_train_settings_to_opts(m, &o);
    if (st == AF_OK && !o.model_path) st = af_fail(AF_ERR_INVALID_ARG, "missing the setting \"model\" (the base model)");
    if (st == AF_OK && !o.train_path) st = af_fail(AF_ERR_INVALID_ARG, "missing the setting \"train\" (the training data)");
    if (st == AF_OK && !check_only && !o.output_dir && !o.resume)
        st = af_fail(AF_ERR_INVALID_ARG, "missing the setting \"output\" (the output directory)");
    if (st == AF_OK && af_train_settings_to_json(m, &config) != AF_OK) config = NULL; /* not stored */
    if (st == AF_OK && h && h->log_fd >= 0) {
        int fd = dup(h->log_fd);
        log = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!log) {
            if (fd >= 0) close(fd);
            st = af_fail(AF_ERR_IO, "log descriptor %d: cannot open it for writing", h->log_fd);
        } else {
            setvbuf(log, NULL, _IOLBF, 0);
        }
    }
    if (st == AF_OK) {
        if (log && note) fprintf(log, "note: %s\n", note);
        o.config_json = config;
        o.log = log;
        o.progress_tty = 0;
        o.check_only = check_only ? 1 : 0;
        if (h) {
            o.interrupt = h->interrupt;
            o.cancel = h->cancel;
            o.progress = h->progress;
            o.progress_user = h->progress_user;
        }
        st = af_trainer_new(&o, &t);
    }
    if (st == AF_OK && log) af_trainer_report(t, log);
    if (st == AF_OK && !(out = cJSON_CreateObject())) st = af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK && check_only) {
        add_diags(out, t);
        cJSON_AddBoolToObject(out, "ready", !af_trainer_has_errors(t));
    } else if (st == AF_OK && af_trainer_has_errors(t)) {
        st = refuse(t);
    } else if (st == AF_OK) {
        af_train_result r;
        memset(&r, 0, sizeof r);
        st = af_trainer_run(t, &r);
        cJSON_AddStringToObject(out, "stop", stop_name(r.stop));
        cJSON_AddNumberToObject(out, "steps_done", (double)r.steps_done);
        cJSON_AddNumberToObject(out, "total_steps", (double)r.total_steps);
        cJSON_AddNumberToObject(out, "best_step", (double)r.best_step);
        num_or_null(out, "best_macro_f1", r.best_macro_f1);
        num_or_null(out, "eval_accuracy", r.last_val_accuracy);
        num_or_null(out, "eval_macro_f1", r.last_val_macro_f1);
        num_or_null(out, "train_loss", r.last_train_loss);
        num_or_null(out, "best_eval_loss", r.best_eval_loss);
        num_or_null(out, "eval_loss", r.last_eval_loss);
        cJSON_AddNumberToObject(out, "n_nonfinite", (double)r.n_nonfinite);
        cJSON_AddNumberToObject(out, "train_runtime", r.seconds);
        cJSON_AddStringToObject(out, "last_checkpoint", r.last_checkpoint);
        cJSON_AddStringToObject(out, "output_dir", o.output_dir ? o.output_dir : "");
    }
    if (out && (st == AF_OK || !check_only)) {
        char *txt = cJSON_PrintUnformatted(out);
        if (txt) {
            *result_json = malloc(strlen(txt) + 1);
            if (*result_json) strcpy(*result_json, txt);
            cJSON_free(txt);
        }
    }
    /* keep the failure's message and kind: the frees below are afinar calls on this thread */
    char msg[1024];
    const af_error_kind kind = af_last_error_kind();
    if (st != AF_OK) snprintf(msg, sizeof msg, "%s", af_last_error());
    cJSON_Delete(out);
    af_trainer_free(t);
    if (log) fclose(log);
    free(config);
    free(note);
    af_train_settings_free(m);
    if (st != AF_OK) return af_fail_kind(st, kind, "%s", msg);
    return AF_OK;
}
