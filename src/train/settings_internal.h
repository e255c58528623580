/*
 * settings_internal.h — what settings.c shares with the checkpoint reader (ckpt_check.c,
 * af_train_settings_read_checkpoint). Not part of any API.
 */
#ifndef AF_SETTINGS_INTERNAL_H
#define AF_SETTINGS_INTERNAL_H

#include "afinar.h"
#include "afinar_app.h"

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

#endif /* AF_SETTINGS_INTERNAL_H */
