/* ckpt_check.c — a checkpoint is never trusted blindly (see trainer.h "Checkpoint checks"): its
 * manifest, the values of its trainer state, its adapter against the run's layout, the advice a
 * failure gives (the newest earlier checkpoint that verifies), and the paths of its settings
 * (stored absolute and relative to the checkpoint, resolved when a moved run resumes). */
#include "train/settings_internal.h"
#include "train/trainer_internal.h"

#include "core/fsutil.h"
#include "formats/manifest.h"
#include "formats/safetensors.h"
#include "lora/adapter_io.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const af_ckpt_files[AF_CKPT_N_FILES] = {AF_ADAPTER_WEIGHTS_FILE, AF_ADAPTER_CONFIG_FILE,
                                                    AF_ADAPTER_AFINAR_FILE, AF_CKPT_STATE_FILE, AF_CKPT_CONFIG_FILE};

/* Parent directory and last component of `path` (malloc'ed, caller frees both). */
static int split_path(const char *path, char **parent, char **base) {
    char *a = strdup(path), *b = strdup(path);
    *parent = a ? strdup(dirname(a)) : NULL;
    *base = b ? strdup(basename(b)) : NULL;
    free(a);
    free(b);
    if (*parent && *base) return 1;
    free(*parent);
    free(*base);
    *parent = *base = NULL;
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

void af_tr_older_good(const char *ckpt, char *out, size_t cap) {
    if (cap) out[0] = 0;
    char *parent = NULL, *base = NULL;
    if (!split_path(ckpt, &parent, &base)) return;
    const int64_t self = af_tr_ckpt_step(base);
    DIR *d = opendir(parent);
    int64_t steps[512];
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 512) {
        int64_t s = af_tr_ckpt_step(e->d_name);
        if (s >= 0 && strcmp(e->d_name, base) != 0 && (self < 0 || s < self)) steps[n++] = s;
    }
    if (d) closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    char *saved = strdup(af_last_error()); /* the caller's message survives the probing below */
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%lld", (long long)steps[i]);
        char *dir = af_path_join(parent, name), *sf = dir ? af_path_join(dir, AF_CKPT_STATE_FILE) : NULL;
        int present = 0;
        struct stat sb;
        const int ok = sf && stat(sf, &sb) == 0 && S_ISREG(sb.st_mode) &&
                       af_manifest_verify(dir, af_ckpt_files, AF_CKPT_N_FILES, &present) == AF_OK;
        if (ok) snprintf(out, cap, "%s%s", dir, present ? "" : " (written before checksums: not verifiable)");
        free(dir);
        free(sf);
        if (ok) break;
    }
    if (saved) af_fail(AF_ERR_IO, "%s", saved);
    free(saved);
    free(parent);
    free(base);
}

af_status af_tr_ckpt_fail(af_status st, const char *ckpt, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char older[1200];
    af_tr_older_good(ckpt, older, sizeof older);
    if (older[0])
        return af_fail_kind(st, AF_ERROR_KIND_CHECKPOINT,
                            "%s; cannot resume from %s: resume from %s instead (the newest earlier checkpoint whose "
                            "files verify), or start the run again (--overwrite)", what, ckpt, older);
    return af_fail_kind(st, AF_ERROR_KIND_CHECKPOINT,
                        "%s; cannot resume from %s, and no earlier checkpoint next to it verifies: start the run "
                        "again (--overwrite)", what, ckpt);
}

af_status af_tr_ckpt_verify(const char *ckpt, int *present) {
    af_status st = af_manifest_verify(ckpt, af_ckpt_files, AF_CKPT_N_FILES, present);
    if (st != AF_OK) return af_tr_ckpt_fail(st, ckpt, "%s", af_last_error());
    if (*present) return AF_OK;
    /* no manifest: a checkpoint of an afinar before checksums, or one that lost its manifest (its
     * trainer state then says it was written with one) */
    char *sp = af_path_join(ckpt, AF_CKPT_STATE_FILE);
    af_st_file *f = NULL;
    st = sp ? af_st_open(sp, &f) : af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK && af_st_meta_get(f, "manifest"))
        st = af_tr_ckpt_fail(AF_ERR_IO, ckpt, "%s/%s is missing, but %s says the checkpoint was written with one (a "
                             "file was lost: an incomplete copy?)", ckpt, AF_MANIFEST_FILE, AF_CKPT_STATE_FILE);
    else if (st != AF_OK)
        st = af_tr_ckpt_fail(st, ckpt, "%s", af_last_error());
    af_st_close(f);
    free(sp);
    return st;
}

/* "a > b" style range check of one counter: message naming it. */
static af_status counter(const af_trainer *t, const char *ckpt, const char *name, int64_t v, int64_t lo, int64_t hi,
                         const char *what_hi) {
    if (v >= lo && v <= hi) return AF_OK;
    return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s/%s: counters.%s = %lld, outside [%lld, %lld] (%s)", ckpt,
                           AF_CKPT_STATE_FILE, name, (long long)v, (long long)lo, (long long)hi, what_hi);
}

af_status af_tr_check_state(const af_trainer *t, const char *ckpt, const float *P, const float *M, const float *V,
                            const af_run_state *rs, const char *world_size) {
    const int64_t n = t->lay.n_total;
    const char *sf = AF_CKPT_STATE_FILE;
    char nm[192];
    for (int64_t i = 0; i < n; i++) {
        const char *bad = !isfinite(P[i]) ? "params" : !isfinite(M[i]) ? "adam_m" : !isfinite(V[i]) ? "adam_v" : NULL;
        if (bad) {
            af_tr_param_name(&t->lay, i, nm, sizeof nm);
            return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s/%s: %s: %s is not finite (%g): the state of a diverged or "
                                   "corrupted run", ckpt, sf, bad, nm,
                                   (double)(bad[0] == 'p' ? P[i] : bad[5] == 'm' ? M[i] : V[i]));
        }
        if (V[i] < 0) {
            af_tr_param_name(&t->lay, i, nm, sizeof nm);
            return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s/%s: adam_v: %s is negative (%g); AdamW's second moment is "
                                   "a running mean of squares, never below 0", ckpt, sf, nm, (double)V[i]);
        }
    }
    const int64_t s = rs->step;
    af_status st = counter(t, ckpt, "step", s, 0, t->total, "the run's steps");
    if (st == AF_OK) st = counter(t, ckpt, "adam_t", rs->adam_t, 0, s, "AdamW updates cannot exceed the steps");
    if (st == AF_OK) st = counter(t, ckpt, "best_step", rs->best_step, 0, s, "the best step is a past step");
    if (st == AF_OK) st = counter(t, ckpt, "bad_evals", rs->bad_evals, 0, s, "evaluations happen after steps");
    if (st == AF_OK) st = counter(t, ckpt, "nonfinite_run", rs->nonfinite_run, 0, s, "skipped steps are steps");
    if (st == AF_OK) st = counter(t, ckpt, "n_nonfinite", rs->n_nonfinite, rs->nonfinite_run, s, "skipped steps in all");
    if (st == AF_OK) st = counter(t, ckpt, "ema_n", rs->ema_n, 0, s, "one EMA value per finite step");
    if (st == AF_OK) st = counter(t, ckpt, "last_eval_step", rs->last_eval_step, 0, s, "a past step");
    if (st == AF_OK) st = counter(t, ckpt, "samples_seen", rs->samples_seen, 0, INT64_MAX, "a count");
    if (st == AF_OK) st = counter(t, ckpt, "tokens_seen", rs->tokens_seen, 0, INT64_MAX, "a count");
    if (st != AF_OK) return st;
    const char *vbad = !isfinite(rs->ema_loss) ? "ema_loss" : !isfinite(rs->ema_acc) ? "ema_acc"
                     : !(rs->elapsed >= 0) || !isfinite(rs->elapsed) ? "elapsed"
                     : rs->best_step > 0 && !isfinite(rs->best) ? "best" : NULL;
    if (vbad)
        return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s/%s: values.%s is not a finite value", ckpt, sf, vbad);
    if (world_size) { /* informational (any process count resumes), but it must be one */
        char *end;
        errno = 0;
        long w = strtol(world_size, &end, 10);
        if (errno || end == world_size || *end || w < 1 || w > (1L << 20))
            return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s/%s: __metadata__.world_size = '%.40s' is not a process "
                                   "count (1 to %ld)", ckpt, sf, world_size, 1L << 20);
    }
    char *parent = NULL, *base = NULL;
    if (!split_path(ckpt, &parent, &base)) return af_fail(AF_ERR_NOMEM, "out of memory");
    const int64_t named = af_tr_ckpt_step(base);
    free(parent);
    free(base);
    if (named >= 0 && named != s)
        return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: the directory is named for step %lld but %s holds step %lld "
                               "(renamed, or files of another checkpoint)", ckpt, (long long)named, sf, (long long)s);
    return AF_OK;
}

af_status af_tr_check_ckpt_adapter(const af_trainer *t, const char *ckpt, const float *P) {
    const af_param_layout *lay = &t->lay;
    float *A = af_calloc((size_t)lay->n_total, sizeof(float));
    if (!A) return af_fail(AF_ERR_NOMEM, "%s: out of memory", ckpt);
    const af_model_config *mc = af_model_get_config(t->model);
    const af_adapter_load_opts lo = {0, mc->architecture, mc->num_attention_heads, mc->num_key_value_heads,
                                     mc->head_dim};
    af_status st = af_adapter_load(ckpt, lay, A, &lo, NULL); /* shapes against the layout, finite values */
    if (st != AF_OK) {
        st = af_tr_ckpt_fail(st, ckpt, "%s", af_last_error());
        free(A);
        return st;
    }
    char nm[192] = "";
    for (int64_t k = 0; k < (int64_t)lay->n_layers * AF_PROJ_COUNT && !nm[0]; k++) {
        const af_lora_slot *s = &lay->slots[k];
        if (s->a_off < 0) continue;
        const int64_t len[2] = {(int64_t)lay->lora.r * s->in, s->out * lay->lora.r}, off[2] = {s->a_off, s->b_off};
        for (int b = 0; b < 2 && !nm[0]; b++)
            for (int64_t i = off[b]; i < off[b] + len[b]; i++)
                if (memcmp(&A[i], &P[i], sizeof(float)) != 0) {
                    af_tr_param_name(lay, i, nm, sizeof nm);
                    break;
                }
    }
    const int64_t hn = lay->head_w_off >= 0 ? (int64_t)lay->num_classes * lay->hidden : 0;
    for (int64_t i = lay->head_w_off; !nm[0] && hn > 0 && i < lay->head_w_off + hn; i++)
        if (memcmp(&A[i], &P[i], sizeof(float)) != 0) af_tr_param_name(lay, i, nm, sizeof nm);
    free(A);
    if (nm[0])
        return af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: %s and %s (params) disagree at %s: the two files are not of "
                               "one checkpoint", ckpt, AF_ADAPTER_WEIGHTS_FILE, AF_CKPT_STATE_FILE, nm);
    return AF_OK;
}

/* ---------------------------------------------------------------- paths of a moved run */

static const char *const k_path_keys[] = {"model", "train", "val", "labels"};
#define N_PATH_KEYS ((int)(sizeof k_path_keys / sizeof *k_path_keys))

/* `p` made absolute against the working directory and normalized lexically ("." and "x/.." removed,
 * symbolic links kept, as Python's os.path.abspath): the path as the user sees it. 0 when it does
 * not fit or the working directory is unknown. */
static int abspath_lexical(const char *p, char *out, size_t cap) {
    char buf[PATH_MAX * 2];
    if (p[0] == '/') snprintf(buf, sizeof buf, "%s", p);
    else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return 0;
        snprintf(buf, sizeof buf, "%s/%s", cwd, p);
    }
    size_t o = 0;
    out[0] = 0;
    for (char *c = buf; *c;) {
        while (*c == '/') c++;
        char *e = c;
        while (*e && *e != '/') e++;
        const size_t len = (size_t)(e - c);
        if (len == 0 || (len == 1 && c[0] == '.')) {
        } else if (len == 2 && c[0] == '.' && c[1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--;
            out[o] = 0;
        } else {
            if (o + 1 + len + 1 > cap) return 0;
            out[o++] = '/';
            memcpy(out + o, c, len);
            o += len;
            out[o] = 0;
        }
        c = e;
    }
    if (o == 0) snprintf(out, cap, "/");
    return 1;
}

/* `to` (absolute, normalized) relative to the directory `from` (absolute, normalized):
 * "../../models/m.gguf". Malloc'ed, NULL when out of memory. */
static char *relative_path(const char *from, const char *to) {
    size_t i = 0, last = 0;
    while (from[i] && to[i] && from[i] == to[i]) {
        if (from[i] == '/') last = i;
        i++;
    }
    if (!from[i] && (to[i] == '/' || !to[i])) last = i; /* `to` lies inside `from` */
    int ups = 0;
    for (const char *p = from + last; *p; p++) ups += *p == '/' && p[1];
    if (!from[last]) ups = 0;
    const char *rest = to[last] == '/' ? to + last + 1 : to + last;
    size_t need = (size_t)ups * 3 + strlen(rest) + 2;
    char *r = malloc(need);
    if (!r) return NULL;
    r[0] = 0;
    for (int u = 0; u < ups; u++) strcat(r, "../");
    strcat(r, *rest ? rest : ".");
    return r;
}

char *af_tr_ckpt_config_json(const char *config_json, const char *output_dir, const char *name) {
    cJSON *j = cJSON_Parse(config_json);
    if (!j || !cJSON_IsObject(j)) { /* not ours to judge: stored as the caller gave it */
        cJSON_Delete(j);
        return strdup(config_json);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(j, AF_CKPT_PATHS_KEY);
    char out_abs[PATH_MAX], file_abs[PATH_MAX];
    cJSON *paths = NULL;
    if (abspath_lexical(output_dir, out_abs, sizeof out_abs)) {
        size_t l = strlen(out_abs);
        snprintf(out_abs + l, sizeof out_abs - l, "%s%s", l > 1 ? "/" : "", name);
        for (int k = 0; k < N_PATH_KEYS; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k_path_keys[k]);
            struct stat sb;
            if (!cJSON_IsString(v) || !v->valuestring[0] || stat(v->valuestring, &sb) != 0 ||
                !abspath_lexical(v->valuestring, file_abs, sizeof file_abs))
                continue; /* "labels": a,b,c list, or a file gone since it was read */
            char *rel = relative_path(out_abs, file_abs);
            cJSON *e = cJSON_CreateObject();
            if (!paths) paths = cJSON_CreateObject();
            if (rel && e && paths) {
                cJSON_AddStringToObject(e, "absolute", file_abs);
                cJSON_AddStringToObject(e, "from_checkpoint", rel);
                cJSON_AddItemToObject(paths, k_path_keys[k], e);
            } else cJSON_Delete(e);
            free(rel);
        }
    }
    if (paths) cJSON_AddItemToObject(j, AF_CKPT_PATHS_KEY, paths);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

/* Append to a growing note. */
static void add_note(char **note, const char *fmt, ...) {
    char line[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t have = *note ? strlen(*note) : 0, add = strlen(line);
    char *n = realloc(*note, have + add + 2);
    if (!n) return;
    if (have) n[have++] = '\n';
    memcpy(n + have, line, add + 1);
    *note = n;
}

static int exists(const char *p) {
    struct stat sb;
    return p && stat(p, &sb) == 0;
}

af_status af_train_settings_read_checkpoint(const char *ckpt, af_train_settings **out, char **note) {
    if (!ckpt || !out) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_read_checkpoint: NULL argument");
    *out = NULL;
    if (note) *note = NULL;
    int present = 0;
    AF_TRY(af_tr_ckpt_verify(ckpt, &present)); /* every file checked before any is read */
    char *cf = af_path_join(ckpt, AF_CKPT_CONFIG_FILE);
    if (!cf) return af_fail(AF_ERR_NOMEM, "out of memory");
    cJSON *paths = NULL;
    af_status st = af_train_settings_read_ext(cf, "checkpoint settings", out, &paths);
    free(cf);
    if (st != AF_OK) return st;
    /* a resumed run writes next to its checkpoint (the run directory may have moved) unless -o is
     * given again: the stored output directory is not a setting of the resume */
    af_train_settings *s = *out;
    af_train_settings_unset(s, "output");
    for (int k = 0; k < N_PATH_KEYS && st == AF_OK; k++) {
        char given[PATH_MAX];
        const char *g = af_train_settings_get(s, k_path_keys[k]);
        if (!g) continue;
        snprintf(given, sizeof given, "%s", g); /* a copy: the setting is replaced below */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(paths, k_path_keys[k]);
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(e, "absolute");
        const cJSON *rl = cJSON_GetObjectItemCaseSensitive(e, "from_checkpoint");
        if (!cJSON_IsObject(e)) continue; /* an older checkpoint: paths as given */
        char *from_ckpt = cJSON_IsString(rl) && rl->valuestring[0] != '/' ? af_path_join(ckpt, rl->valuestring) : NULL;
        const char *abs_p = cJSON_IsString(ab) && ab->valuestring[0] == '/' ? ab->valuestring : NULL;
        char chosen[PATH_MAX] = "", given_real[PATH_MAX] = "";
        const char *how = NULL;
        char chosen_real[PATH_MAX] = "";
        if (exists(from_ckpt) && abspath_lexical(from_ckpt, chosen, sizeof chosen)) how = "relative to the checkpoint";
        else if (exists(abs_p) && abspath_lexical(abs_p, chosen, sizeof chosen)) how = "at its absolute path";
        if (how) {
            const int same = realpath(given, given_real) && realpath(chosen, chosen_real) && !strcmp(given_real, chosen_real);
            if (!same) {
                st = af_train_settings_set(s, k_path_keys[k], chosen);
                if (note)
                    add_note(note, "--%s: using %s (found %s; the run was started with '%s'%s%s)", k_path_keys[k],
                             chosen, how, given, abs_p && strcmp(abs_p, given) ? " = " : "",
                             abs_p && strcmp(abs_p, given) ? abs_p : "");
            }
        } else if (note && !exists(given)) {
            add_note(note, "--%s: the run's file is not found: not as '%s'%s%s%s%s; give --%s PATH", k_path_keys[k],
                     given, from_ckpt ? ", not as " : "", from_ckpt ? from_ckpt : "", abs_p ? ", not as " : "",
                     abs_p ? abs_p : "", k_path_keys[k]);
        }
        free(from_ckpt);
    }
    cJSON_Delete(paths);
    af_train_settings_set_origin(s, AF_ORIGIN_RESUME);
    if (st != AF_OK) {
        af_train_settings_free(*out);
        *out = NULL;
    }
    return st;
}
