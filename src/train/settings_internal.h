/*
 * settings_internal.h — what settings.c (the settings object) shares with the table of settings
 * (settings_table.c), the trainer and the checkpoint reader (ckpt_check.c,
 * af_train_settings_read_checkpoint). Not part of any API.
 */
#ifndef AF_SETTINGS_INTERNAL_H
#define AF_SETTINGS_INTERNAL_H

#include "afinar.h"
#include "afinar_app.h"

#include "train/defaults.h"

#include <cJSON.h>

/* The key of a checkpoint's train_config.json that records where the run's files are (not a
 * setting): {"model": {"absolute": "/abs/path", "from_checkpoint": "../../models/m.gguf"}, ...}
 * for the keys model, train, val and labels (when it is a file). Written by the trainer
 * (af_tr_ckpt_config_json), read by af_train_settings_read_checkpoint; any other reader of a
 * settings file (--config) drops it. */
#define AF_CKPT_PATHS_KEY "checkpoint_paths"

/* af_train_settings_read, and the AF_CKPT_PATHS_KEY object (detached, caller frees with
 * cJSON_Delete; NULL when absent) in *ckpt_paths when it is not NULL. The object is only checked
 * to be an object. */
af_status af_train_settings_read_ext(const char *path, const char *what, af_train_settings **out, cJSON **ckpt_paths);

/* Remove `key` from `s` (nothing when absent). */
void af_train_settings_unset(af_train_settings *s, const char *key);

/* Set `key` to the text `value` keeping the origin it has (a number given for a text key, stored
 * as text). Errors: AF_ERR_NOMEM. */
af_status af_train_settings_restate(af_train_settings *s, const char *key, const char *value);
/* The value of `key` (any JSON type) or NULL; the first key in order (walk with ->next); the origin
 * of `key` (AF_ORIGIN_FLAG when none was recorded). Borrowed. */
const cJSON *af_train_settings_item(const af_train_settings *s, const char *key);
const cJSON *af_train_settings_first(const af_train_settings *s);
af_setting_origin af_train_settings_origin(const af_train_settings *s, const char *key);

/* 1 for the tasks that train a causal LM without a head (causal-lm, dpo, orpo): they share the
 * causal-LM defaults, data reader and step machinery. */
#define AF_TASK_IS_LM(task) ((task) == AF_TASK_CAUSAL_LM || (task) == AF_TASK_DPO || (task) == AF_TASK_ORPO)
/* 1 for the preference tasks (dpo, orpo). */
#define AF_TASK_IS_PREF(task) ((task) == AF_TASK_DPO || (task) == AF_TASK_ORPO)

/* ---- settings_table.c: the one table of settings (key -> af_trainer_opts field) ---- */
/* Index of `name` in af_train_setting_keys, or -1. */
int32_t af_setting_index(const char *name);
/* The value of key `i` in `o` as text ("16", "on", "cosine", "6%", "none", or the key's meaning of
 * an unset value such as "all cores") into buf (cap bytes, NUL-terminated); NULL for a bad index. */
char *af_setting_format(int32_t i, const af_trainer_opts *o, char *buf, size_t cap);
/* The task's own defaults over af_trainer_opts_defaults (causal-lm: targets all-linear, every layer,
 * lr AF_DEFAULT_LR_CAUSAL_LM); sets o->task. */
void af_trainer_opts_task_defaults(af_trainer_opts *o, af_task task);
/* Options filled by a C caller (every origin still AF_ORIGIN_DEFAULT; af_train_settings_to_opts
 * records at least the model's and the data's): mark AF_ORIGIN_CALLER every key whose field differs
 * from its default. Options from a settings object are left as they are. */
void af_trainer_opts_mark_caller(af_trainer_opts *o);
/* The table's range check (the one of af_train_settings_to_opts, with a flag's message: "--batch:
 * expected an integer in [1, 1000000], got '0'") of the fields a run cannot start with out of range
 * (batch, grad-accum, max-seq-len, weight-decay, lr-min, val-split) when they differ from their
 * defaults; the others are judged by the diagnostics (hparams.c). Errors: AF_ERR_INVALID_ARG. */
af_status af_trainer_opts_check(const af_trainer_opts *o);

#endif /* AF_SETTINGS_INTERNAL_H */
