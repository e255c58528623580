/* trainer_ckpt.c — the trainer's checkpoints and output directory: output-directory checks,
 * atomic checkpoint directories, trainer state (save / load / compatibility check), checkpoint
 * rotation (see trainer.h for the layout). The run directory's other files (metrics.jsonl on
 * resume, curves.png, run.json, config.yaml, eval.json) are trainer_outputs.c's. */
#include "train/trainer_internal.h"
#include "train/run_lock.h"

#include "core/fsutil.h"
#include "train/dist.h"
#include "lora/adapter_io.h"
#include "formats/manifest.h"
#include "formats/safetensors.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_FILE AF_CKPT_STATE_FILE
#define CONFIG_FILE AF_CKPT_CONFIG_FILE

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int64_t af_tr_ckpt_step(const char *name) {
    if (strncmp(name, "checkpoint-", 11) != 0 || !name[11]) return -1;
    int64_t v = 0;
    for (const char *p = name + 11; *p; p++) {
        if (*p < '0' || *p > '9' || v > (int64_t)1e15) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int is_artifact(const char *n) {
    return !strcmp(n, "metrics.jsonl") || !strcmp(n, "run.json") || !strcmp(n, "eval.json") || !strcmp(n, "best") ||
           !strcmp(n, "final") ||
           !strcmp(n, "curves.png") || af_tr_ckpt_step(n) >= 0;
}
static int is_stale_tmp(const char *n) {
    return n[0] == '.' && (strstr(n, ".tmp-") != NULL || strstr(n, ".old-") != NULL || !strcmp(n, ".curves.png.tmp") ||
                             !strcmp(n, ".curves.gp.tmp"));
}

int af_tr_dir_has_run(const char *dir, char *what, size_t cap) {
    if (cap) what[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_artifact(e->d_name)) continue;
        if (found < 4 && cap) {
            size_t l = strlen(what);
            snprintf(what + l, cap - l, "%s%s", found ? ", " : "", e->d_name);
        }
        found++;
    }
    closedir(d);
    if (found > 4 && cap) {
        size_t l = strlen(what);
        snprintf(what + l, cap - l, ", ...");
    }
    return found > 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p) ? -1 : 0;
}
static af_status rm_tree(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return AF_OK;
    if (nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return af_fail(AF_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
    return AF_OK;
}

af_status af_tr_clear_run(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return AF_OK;
    af_status st = AF_OK;
    struct dirent *e;
    while (st == AF_OK && (e = readdir(d))) {
        if (!is_artifact(e->d_name) && !is_stale_tmp(e->d_name)) continue;
        char *p = af_path_join(dir, e->d_name);
        if (!p) st = af_fail(AF_ERR_NOMEM, "out of memory");
        else st = rm_tree(p);
        free(p);
    }
    closedir(d);
    return st;
}

af_status af_tr_clear_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return AF_OK;
    af_status st = AF_OK;
    struct dirent *e;
    while (st == AF_OK && (e = readdir(d))) {
        if (!is_stale_tmp(e->d_name)) continue;
        char *p = af_path_join(dir, e->d_name);
        st = p ? rm_tree(p) : af_fail(AF_ERR_NOMEM, "out of memory");
        free(p);
    }
    closedir(d);
    return st;
}

af_status af_trainer_find_checkpoint(const char *arg, char **ckpt) {
    *ckpt = NULL;
    char *f = af_path_join(arg, STATE_FILE);
    if (!f) return af_fail(AF_ERR_NOMEM, "out of memory");
    int direct = is_file(f);
    free(f);
    if (direct) {
        *ckpt = strdup(arg);
        return *ckpt ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
    }
    DIR *d = opendir(arg);
    if (!d) return af_fail(AF_ERR_NOT_FOUND, "--resume %s: cannot open: %s", arg, strerror(errno));
    int64_t best = -1;
    char name[300] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = af_tr_ckpt_step(e->d_name);
        if (s <= best) continue;
        char *dn = af_path_join(arg, e->d_name), *sf = dn ? af_path_join(dn, STATE_FILE) : NULL;
        if (sf && is_file(sf)) {
            best = s;
            snprintf(name, sizeof name, "%s", e->d_name);
        }
        free(dn);
        free(sf);
    }
    closedir(d);
    if (best < 0)
        return af_fail(AF_ERR_NOT_FOUND, "--resume %s: no %s there and no checkpoint-N directory holding one", arg,
                       STATE_FILE);
    *ckpt = af_path_join(arg, name);
    return *ckpt ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Compatibility fields stored in the state metadata; all must match to resume. */
#define N_CHECK 11
static void check_fields(const af_trainer *t, const char *key[N_CHECK], char val[N_CHECK][48]) {
    const af_trainer_opts *o = t->o;
    static const char *const k[N_CHECK] = {"n_train", "num_classes", "n_params", "batch", "grad_accum", "seed",
                                           "total_steps", "warmup_steps", "schedule", "lr", "lr_min"};
    for (int i = 0; i < N_CHECK; i++) key[i] = k[i];
    snprintf(val[0], 48, "%d", t->train->n);
    snprintf(val[1], 48, "%d", t->num_classes);
    snprintf(val[2], 48, "%lld", (long long)t->lay.n_total);
    snprintf(val[3], 48, "%d", o->batch);
    snprintf(val[4], 48, "%d", o->grad_accum);
    snprintf(val[5], 48, "%llu", (unsigned long long)o->seed);
    snprintf(val[6], 48, "%lld", (long long)t->total);
    snprintf(val[7], 48, "%lld", (long long)t->warmup);
    snprintf(val[8], 48, "%d", (int)o->schedule);
    snprintf(val[9], 48, "%.9g", (double)(float)o->lr);
    snprintf(val[10], 48, "%.9g", (double)(float)o->lr_min);
}

#define N_I64 9
#define N_F64 6
static void pack_state(const af_run_state *rs, int64_t *c, double *v) {
    int64_t ci[N_I64] = {rs->step,  rs->adam_t, rs->best_step,      rs->bad_evals,   rs->nonfinite_run,
                         rs->n_nonfinite, rs->ema_n, rs->last_eval_step, rs->samples_seen};
    double vi[N_F64] = {rs->best, rs->ema_loss, rs->ema_acc, rs->elapsed, rs->last_val_acc, rs->last_val_f1};
    memcpy(c, ci, sizeof ci);
    memcpy(v, vi, sizeof vi);
}
static void unpack_state(af_run_state *rs, const int64_t *c, const double *v) {
    rs->step = c[0], rs->adam_t = c[1], rs->best_step = c[2], rs->bad_evals = c[3], rs->nonfinite_run = c[4];
    rs->n_nonfinite = c[5], rs->ema_n = c[6], rs->last_eval_step = c[7], rs->samples_seen = c[8];
    rs->best = v[0], rs->ema_loss = v[1], rs->ema_acc = v[2], rs->elapsed = v[3], rs->last_val_acc = v[4];
    rs->last_val_f1 = v[5];
}

static af_status write_state(const af_trainer *t, const char *dir, const float *P, const float *M, const float *V,
                             const af_run_state *rs) {
    for (int64_t i = 0; i < t->lay.n_total; i++) /* never a state that could not be resumed */
        if (!isfinite(P[i]) || !isfinite(M[i]) || !isfinite(V[i]) || V[i] < 0) {
            char nm[192];
            af_tr_param_name(&t->lay, i, nm, sizeof nm);
            return af_fail(AF_ERR_RANGE, "%s: not saved: %s of %s is %g (not finite%s)", dir,
                           !isfinite(P[i]) ? "params" : !isfinite(M[i]) ? "adam_m" : "adam_v", nm,
                           (double)(!isfinite(P[i]) ? P[i] : !isfinite(M[i]) ? M[i] : V[i]),
                           isfinite(V[i]) && V[i] < 0 ? ", or a negative second moment" : "");
        }
    int64_t c[N_I64];
    double v[N_F64];
    pack_state(rs, c, v);
    const int64_t n = t->lay.n_total;
    af_st_write_tensor ts[6];
    memset(ts, 0, sizeof ts);
    const int64_t lmc[1] = {rs->tokens_seen}; /* causal LM only: TRL's num_tokens */
    const char *nm[3] = {"params", "adam_m", "adam_v"};
    const float *src[3] = {P, M, V};
    for (int i = 0; i < 3; i++) {
        ts[i].name = nm[i];
        ts[i].dtype = AF_ST_F32;
        ts[i].n_dims = 1;
        ts[i].shape[0] = n;
        ts[i].f32 = src[i];
    }
    ts[3] = (af_st_write_tensor){"counters", AF_ST_I64, 1, {N_I64}, NULL, c};
    ts[4] = (af_st_write_tensor){"values", AF_ST_F64, 1, {N_F64}, NULL, v};
    const char *keys[N_CHECK + 5], *vals[N_CHECK + 5];
    char buf[N_CHECK][48];
    check_fields(t, keys, buf);
    for (int i = 0; i < N_CHECK; i++) vals[i] = buf[i];
    keys[N_CHECK] = "format", vals[N_CHECK] = "afinar-trainer-state";
    keys[N_CHECK + 1] = "version", vals[N_CHECK + 1] = "1";
    /* Informational (not checked on resume: any process count continues the run identically):
     * the processes that wrote it and how a step's micro-batch gradients were summed. */
    char ws[16];
    snprintf(ws, sizeof ws, "%d", (int)af_dist_size());
    keys[N_CHECK + 2] = "world_size", vals[N_CHECK + 2] = ws;
    keys[N_CHECK + 3] = "gradient_sum", vals[N_CHECK + 3] = "per-micro-batch rows, summed in micro-batch order";
    /* the checkpoint is written with a manifest (af_tr_save_dir): one that lost it is refused */
    keys[N_CHECK + 4] = "manifest", vals[N_CHECK + 4] = AF_MANIFEST_FILE;
    char *path = af_path_join(dir, STATE_FILE);
    if (!path) return af_fail(AF_ERR_NOMEM, "out of memory");
    if (t->lm) ts[5] = (af_st_write_tensor){"lm_counters", AF_ST_I64, 1, {1}, NULL, lmc};
    af_status st = af_st_write(path, ts, t->lm ? 6 : 5, keys, vals, N_CHECK + 5);
    free(path);
    return st;
}

/* The flag behind a compatibility field, for the messages (" (--batch)"), or "". */
static const char *flag_of(const char *key) {
    static const char *const map[][2] = {{"n_train", " (the training samples: --train / --val-split)"},
                                         {"num_classes", " (the classes of the data / --labels)"},
                                         {"batch", " (--batch)"}, {"grad_accum", " (--grad-accum)"}, {"seed", " (--seed)"},
                                         {"total_steps", " (--epochs / --max-steps)"}, {"warmup_steps", " (--warmup)"},
                                         {"schedule", " (--schedule)"}, {"lr", " (--lr)"}, {"lr_min", " (--lr-min)"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(map[i][0], key)) return map[i][1];
    return "";
}

/* A parameter-count mismatch in words: which LoRA setting differs between the checkpoint's
 * adapter_config.json and this run (rank, targets, layers, head bias). `why` stays "" when the
 * checkpoint's adapter cannot be read or no difference is found. */
static void explain_params(const af_trainer *t, const char *ckpt, char *why, size_t cap) {
    af_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    if (af_adapter_read_info(ckpt, &ai) != AF_OK) return;
    const af_param_layout *l = &t->lay;
    if (ai.r != l->lora.r)
        snprintf(why, cap, "--lora-r is %d in the checkpoint (adapter_config.json r) but %d now", ai.r, l->lora.r);
    else if (ai.targets != l->lora.targets)
        snprintf(why, cap, "--targets differ: the checkpoint adapts projections mask 0x%x, this run 0x%x (see "
                 "target_modules in adapter_config.json)", ai.targets, l->lora.targets);
    else if (ai.n_layers != l->layer_end ||
             (ai.layers_to_transform && ai.n_layers_to_transform > 0 && ai.layers_to_transform[0] != l->layer_min))
        snprintf(why, cap, "--lora-layers differ: the checkpoint adapts layers %d-%d, this run %d-%d",
                 ai.layers_to_transform && ai.n_layers_to_transform > 0 ? ai.layers_to_transform[0] : 0, ai.n_layers - 1,
                 l->layer_min, l->layer_end - 1);
    else if (ai.num_classes > 0 && ai.has_head_bias != (t->o->head_bias != 0))
        snprintf(why, cap, "--head-bias is %s in the checkpoint but %s now", ai.has_head_bias ? "on" : "off",
                 t->o->head_bias ? "on" : "off");
    af_adapter_info_free(&ai);
}

af_status af_tr_load_state(const af_trainer *t, const char *ckpt, float *P, float *M, float *V, af_run_state *rs) {
    int present = 0;
    AF_TRY(af_tr_ckpt_verify(ckpt, &present)); /* every file against the manifest, before any is read */
    if (!present && t->log)
        fprintf(t->log, "warning: %s has no %s (written by an afinar before checkpoints carried checksums): its "
                          "files cannot be verified; its values are checked\n", ckpt, AF_MANIFEST_FILE);
    char *path = af_path_join(ckpt, STATE_FILE);
    if (!path) return af_fail(AF_ERR_NOMEM, "out of memory");
    af_st_file *f = NULL;
    af_status st = af_st_open(path, &f);
    if (st != AF_OK) {
        free(path);
        return af_tr_ckpt_fail(st, ckpt, "%s", af_last_error());
    }
    const char *fmt = af_st_meta_get(f, "format");
    if (!fmt || strcmp(fmt, "afinar-trainer-state") != 0) {
        st = af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: __metadata__.format: not an afinar trainer state", path);
        goto done;
    }
    const char *keys[N_CHECK];
    char buf[N_CHECK][48];
    check_fields(t, keys, buf);
    for (int i = 0; i < N_CHECK; i++) {
        const char *v = af_st_meta_get(f, keys[i]);
        if (!v || strcmp(v, buf[i]) != 0) {
            char why[300] = "";
            if (!strcmp(keys[i], "n_params")) explain_params(t, ckpt, why, sizeof why);
            if (why[0])
                st = af_fail(AF_ERR_INVALID_ARG, "%s: cannot resume: %s (resume with the checkpoint's settings)", ckpt, why);
            else
                st = af_fail(AF_ERR_INVALID_ARG,
                             "%s: cannot resume exactly: %s%s is %s in the checkpoint but %s now (resume with the same "
                             "data and settings)",
                             path, keys[i], flag_of(keys[i]), v ? v : "(missing)", buf[i]);
            goto done;
        }
    }
    const size_t n = (size_t)t->lay.n_total;
    static const char *const big[3] = {"params", "adam_m", "adam_v"};
    const af_st_tensor *tb[3];
    for (int i = 0; i < 3; i++) { /* the run's layout: one F32 vector of n_params values each */
        tb[i] = af_st_find(f, big[i]);
        if (!tb[i] || tb[i]->dtype != AF_ST_F32 || tb[i]->n_dims != 1 || tb[i]->n_elem != (uint64_t)n) {
            st = af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: tensor %s: %s, expected F32 [%zu] (the run's trainable "
                                 "parameters)", path, big[i], !tb[i] ? "missing" : tb[i]->dtype != AF_ST_F32 ? "not F32"
                                 : "another shape", n);
            goto done;
        }
    }
    const af_st_tensor *tc = af_st_find(f, "counters"), *tf = af_st_find(f, "values");
    if (!tc || !tf || tc->dtype != AF_ST_I64 || tc->n_elem != N_I64 || tf->dtype != AF_ST_F64 || tf->n_elem != N_F64) {
        st = af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: missing or malformed tensors (counters I64 [%d]; values F64 "
                             "[%d])", path, N_I64, N_F64);
        goto done;
    }
    st = af_st_read_f32(f, tb[0], P, n);
    if (st == AF_OK) st = af_st_read_f32(f, tb[1], M, n);
    if (st == AF_OK) st = af_st_read_f32(f, tb[2], V, n);
    if (st != AF_OK) goto done;
    int64_t c[N_I64];
    double v[N_F64];
    memcpy(c, tc->data, sizeof c); /* little-endian host assumed (x86-64, aarch64) */
    memcpy(v, tf->data, sizeof v);
    unpack_state(rs, c, v);
    if (t->lm) {
        const af_st_tensor *tl = af_st_find(f, "lm_counters");
        if (!tl || tl->dtype != AF_ST_I64 || tl->n_elem != 1) {
            st = af_tr_ckpt_fail(AF_ERR_FORMAT, ckpt, "%s: missing or malformed tensor lm_counters (I64 [1]) of a "
                                 "causal-LM run", path);
            goto done;
        }
        memcpy(&rs->tokens_seen, tl->data, sizeof rs->tokens_seen);
    }
    /* values: finite, v >= 0, counters consistent, world size, the directory's step */
    st = af_tr_check_state(t, ckpt, P, M, V, rs, af_st_meta_get(f, "world_size"));
done:
    af_st_close(f);
    free(path);
    /* the checkpoint's adapter: the run's shapes, and the same values as the state's params */
    if (st == AF_OK) st = af_tr_check_ckpt_adapter(t, ckpt, P);
    return st;
}

/* The name of the newest checkpoint-N directory in out_dir (1) or 0 when there is none. */
static int newest_ckpt(const char *out_dir, char *name, size_t cap) {
    DIR *d = opendir(out_dir);
    if (!d) return 0;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (af_tr_ckpt_step(e->d_name) > best) best = af_tr_ckpt_step(e->d_name);
    closedir(d);
    if (best < 0) return 0;
    snprintf(name, cap, "checkpoint-%lld", (long long)best);
    return 1;
}

/* Numbers the temporary and set-aside directories of this process's saves. */
static unsigned save_counter;

/* The adapter of P into tmp with the run's record (extra: afinar.json's fields; causal LM: a PEFT
 * CAUSAL_LM adapter, no head; classification: the head, labels, pooling and their notes). M != NULL
 * (a checkpoint): the manifest is written by the caller, over every file. */
static af_status save_adapter(const af_trainer *t, const char *tmp, const float *P, const float *M,
                              const af_run_state *rs, const char *selected_by, cJSON *extra) {
    const af_trainer_opts *o = t->o;
    const af_model_config *mc = af_model_get_config(t->model);
    af_adapter_save_opts ao;
    memset(&ao, 0, sizeof ao);
    if (t->lm) { /* causal LM: PEFT CAUSAL_LM adapter (no head, no pooling) */
        cJSON_AddStringToObject(extra, "task", "causal-lm");
        if (t->pref) cJSON_AddStringToObject(extra, "trained_with", o->task == AF_TASK_ORPO ? "orpo" : "dpo");
        cJSON_AddNumberToObject(extra, "step", (double)rs->step);
        if (selected_by) cJSON_AddStringToObject(extra, "selected_by", selected_by);
        if (rs->best_step > 0 && isfinite(rs->best)) cJSON_AddNumberToObject(extra, "best_eval_loss", rs->best);
        if (o->model_path) cJSON_AddStringToObject(extra, "base_model_path", o->model_path);
        if (o->loss_on) cJSON_AddStringToObject(extra, "loss_on", o->loss_on);
        if (o->chat_template) cJSON_AddStringToObject(extra, "chat_template", o->chat_template);
    } else {
        cJSON_AddBoolToObject(extra, "multi_label", t->multi_label);
        cJSON_AddNumberToObject(extra, "step", (double)rs->step);
        if (selected_by) cJSON_AddStringToObject(extra, "selected_by", selected_by);
        if (rs->best_step > 0 && isfinite(rs->best)) cJSON_AddNumberToObject(extra, "best_val_macro_f1", rs->best);
        if (o->model_path) cJSON_AddStringToObject(extra, "base_model_path", o->model_path);
        cJSON_AddStringToObject(extra, "text_field", o->text_field ? o->text_field : "input");
        if (o->head_bias)
            cJSON_AddStringToObject(extra, "head_bias_note",
                                    "score.bias is stored, but transformers' *ForSequenceClassification score layer "
                                    "has no bias and PEFT drops the tensor on load: outside afinar the bias is lost");
        if (o->pooling == AF_POOL_MEAN)
            cJSON_AddStringToObject(extra, "pooling_note",
                                    "mean pooling has no transformers equivalent (*ForSequenceClassification pools "
                                    "the last token); train with --pooling last for a faithful PEFT export");
        ao.write_head_bias = o->head_bias;
        ao.pooling = o->pooling == AF_POOL_LAST ? "last" : "mean";
        ao.labels = (const char *const *)t->label_names;
        ao.n_labels = t->label_names ? t->num_classes : 0;
    }
    ao.base_model_name_or_path = o->model_path;
    ao.architecture = mc->architecture;
    ao.n_head = mc->num_attention_heads; /* q/k B rows exported in HF order (adapter_io.h) */
    ao.n_kv_head = mc->num_key_value_heads;
    ao.head_dim = mc->head_dim;
    ao.max_seq_len = o->max_seq_len;
    ao.extra = extra;
    ao.caller_writes_manifest = M != NULL; /* a checkpoint: written below, over every file */
    return af_adapter_save(tmp, &t->lay, P, &ao);
}

/* The complete temporary tmp renamed to fin (an existing fin swapped atomically, or set aside and
 * removed), the directory synced. */
static af_status install_dir(const char *out_dir, const char *name, char *tmp, const char *fin) {
    af_status st = AF_OK;
    if (is_dir(fin)) {
        /* swap atomically, then delete the old one (now at tmp) */
#ifdef RENAME_EXCHANGE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) == 0) {
            st = rm_tree(tmp);
        } else
#endif
        {
            char old[300];
            snprintf(old, sizeof old, ".%s.old-%ld-%u", name, (long)getpid(), save_counter++);
            char *op = af_path_join(out_dir, old);
            if (!op) st = af_fail(AF_ERR_NOMEM, "out of memory");
            else if (rename(fin, op) != 0 || rename(tmp, fin) != 0)
                st = af_fail(AF_ERR_IO, "%s: cannot replace: %s", fin, strerror(errno));
            else st = rm_tree(op);
            free(op);
        }
    } else if (rename(tmp, fin) != 0) {
        st = af_fail(AF_ERR_IO, "%s: cannot rename %s into place: %s", fin, tmp, strerror(errno));
    }
    if (st == AF_OK) fsync_dir(out_dir);
    return st;
}

/* A failed save's message (af_last_error) as it names the final directory fin, not the temporary
 * tmp the user never sees, with what is kept (the previous one, the last good checkpoint, or
 * nothing), into keep. */
static void name_final(const char *out_dir, const char *name, const char *tmp, const char *fin, int had_old,
                       char *keep, size_t cap) {
    const char *m = af_last_error();
    size_t lt = strlen(tmp);
    char last[64];
    if (fin && !strncmp(m, tmp, lt) && had_old)
        snprintf(keep, cap, "%s%s (not saved; the previous %s is kept)", fin, m + lt, name);
    else if (fin && !strncmp(m, tmp, lt) && newest_ckpt(out_dir, last, sizeof last))
        snprintf(keep, cap, "%s%s (not saved; the last good checkpoint is %s/%s)", fin, m + lt, out_dir, last);
    else if (fin && !strncmp(m, tmp, lt))
        snprintf(keep, cap, "%s%s (not saved; there is no earlier checkpoint)", fin, m + lt);
    else
        snprintf(keep, cap, "%s", m);
}

af_status af_tr_save_dir(const af_trainer *t, const char *name, const float *P, const float *M, const float *V,
                         const af_run_state *rs, const char *selected_by) {
    char tmpname[256];
    snprintf(tmpname, sizeof tmpname, ".%s.tmp-%ld-%u", name, (long)getpid(), save_counter++);
    char *tmp = af_path_join(t->out_dir, tmpname), *fin = af_path_join(t->out_dir, name);
    const int had_old = fin && is_dir(fin); /* for the failure message: is there an earlier one to keep? */
    cJSON *extra = cJSON_CreateObject();
    af_status st = (tmp && fin && extra) ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK) st = rm_tree(tmp);
    if (st == AF_OK) st = af_mkdir_p(tmp);
    static const char *const files[] = {AF_ADAPTER_WEIGHTS_FILE, AF_ADAPTER_CONFIG_FILE, AF_ADAPTER_AFINAR_FILE,
                                        STATE_FILE, CONFIG_FILE, AF_MANIFEST_FILE};
    const int slot = st == AF_OK ? af_temp_dir_register(tmp, files, 6) : -1; /* a second Ctrl-C removes it */
    if (st == AF_OK) st = save_adapter(t, tmp, P, M, rs, selected_by, extra);
    if (st == AF_OK && M) st = write_state(t, tmp, P, M, V, rs);
    if (st == AF_OK && M && t->config_json) { /* paths recorded absolute and relative to the checkpoint */
        char *cp = af_path_join(tmp, CONFIG_FILE), *cj = af_tr_ckpt_config_json(t->config_json, t->out_dir, name);
        st = cp && cj ? af_write_file_atomic(cp, cj, strlen(cj)) : af_fail(AF_ERR_NOMEM, "out of memory");
        free(cp);
        free(cj);
    }
    if (st == AF_OK && M) /* last: the sizes and SHA-256 of every file of the checkpoint */
        st = af_manifest_write(tmp, af_ckpt_files, t->config_json ? AF_CKPT_N_FILES : AF_CKPT_N_FILES - 1);
    if (st == AF_OK) st = install_dir(t->out_dir, name, tmp, fin);
    if (st != AF_OK && tmp) {
        char keep[1024];
        name_final(t->out_dir, name, tmp, fin, had_old, keep, sizeof keep);
        (void)rm_tree(tmp);
        af_fail(st, "%s", keep);
    }
    af_temp_dir_unregister(slot);
    cJSON_Delete(extra);
    free(tmp);
    free(fin);
    return st;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void af_tr_rotate(const af_trainer *t) {
    const int32_t keep = t->o->save_total_limit;
    if (keep <= 0) return;
    DIR *d = opendir(t->out_dir);
    if (!d) return;
    int64_t steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        int64_t s = af_tr_ckpt_step(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_i64);
    static unsigned counter;
    for (int i = 0; i + keep < n; i++) {
        /* Rename out of sight first (atomic), then delete: a kill during the deletion leaves a
         * hidden temporary (removed by the next resume), never a half-deleted checkpoint-N. */
        char name[64], hidden[128];
        snprintf(name, sizeof name, "checkpoint-%lld", (long long)steps[i]);
        snprintf(hidden, sizeof hidden, ".%s.tmp-del-%ld-%u", name, (long)getpid(), counter++);
        char *p = af_path_join(t->out_dir, name), *h = af_path_join(t->out_dir, hidden);
        if (p && h && rename(p, h) == 0) (void)rm_tree(h);
        free(p);
        free(h);
    }
}

/* Output directory: derive from the checkpoint, refuse another run unless overwrite/resume-in-place. */
af_status af_tr_prepare_output(af_trainer *t, const char *ckpt, int writer, char **owned_out, int *lock_fd) {
    const af_trainer_opts *o = t->o;
    *owned_out = NULL;
    *lock_fd = -1;
    char *parent = NULL;
    if (ckpt) {
        char *c = strdup(ckpt);
        if (!c) return af_fail(AF_ERR_NOMEM, "out of memory");
        parent = strdup(dirname(c));
        free(c);
        if (!parent) return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    if (!t->out_dir) {
        if (!parent) return af_fail(AF_ERR_INVALID_ARG, "no output directory (-o DIR)");
        t->out_dir = *owned_out = strdup(parent);
        if (!*owned_out) {
            free(parent);
            return af_fail(AF_ERR_NOMEM, "out of memory");
        }
    }
    char what[256];
    af_status st = AF_OK;
    if (!writer) { /* another rank of a data-parallel run: rank 0 prepares the directory */
        free(parent);
        return AF_OK;
    }
    st = af_run_lock(t->out_dir, lock_fd); /* before looking: one writer at a time */
    if (st != AF_OK) {
        free(parent);
        return st;
    }
    if (af_tr_dir_has_run(t->out_dir, what, sizeof what)) {
        char a[PATH_MAX], b[PATH_MAX];
        int same = parent && realpath(parent, a) && realpath(t->out_dir, b) && !strcmp(a, b);
        if (same) st = af_tr_clear_stale(t->out_dir); /* resuming in place: a killed run's temporaries */
        else if (o->overwrite) st = af_tr_clear_run(t->out_dir);
        else
            st = af_fail(AF_ERR_INVALID_ARG,
                         "%s: holds another run (%s); use --overwrite to replace it, --resume %s to continue it, or "
                         "another -o DIR",
                         t->out_dir, what, t->out_dir);
    }
    free(parent);
    if (st == AF_OK) st = af_mkdir_p(t->out_dir);
    return st;
}
