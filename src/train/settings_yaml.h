/*
 * settings_yaml.h — training settings as YAML (`afinar train|check --config FILE.yaml`, and the
 * config.yaml a run writes), with the parameter names of Hugging Face TRL / transformers'
 * TrainingArguments / PEFT's LoraConfig accepted beside afinar's own keys. docs/DATA.md has the
 * table of names; k_yaml_alias in settings_yaml.c is that table.
 *
 * The YAML layer sits on the by-key interface (af_train_settings_set / _set_bool, include/afinar.h):
 * every YAML key is mapped to one afinar key and its value to that key's text (or boolean); the
 * values are then checked by af_train_settings_to_opts like those of the command line and of JSON
 * --config files, with the same messages. Parsing: libyaml (Debian libyaml-dev), event API.
 *
 * Accepted documents: one mapping of scalars (a "---" document marker and comments are fine);
 * target_modules may also be a sequence of scalars. Keys: afinar's key ("grad-accum"), the same
 * with '_' for '-' ("grad_accum"), or an alias of the table. Values: YAML scalars; for boolean keys
 * true/false/yes/no/on/off (any case); null ("~", empty) leaves the key unset, as does max_steps -1
 * (transformers' "not set"). A key of the mapping given twice (directly or by two names of one
 * setting) is refused naming both lines.
 */
#ifndef AF_SETTINGS_YAML_H
#define AF_SETTINGS_YAML_H

#include "afinar_app.h"

#include <stddef.h>

/* 1 when `path` ends in ".yaml" or ".yml" (any case). */
int af_settings_is_yaml_path(const char *path);

/* Read a YAML settings file (what names it in messages: "config file"). `*out`: caller frees with
 * af_train_settings_free(). Errors: AF_ERR_IO ("PATH: cannot read WHAT: ..."), AF_ERR_FORMAT with
 * PATH:LINE:COLUMN (1-based) for: invalid YAML (libyaml's problem text), "WHAT is empty", not a
 * mapping, a nested mapping, a sequence where a scalar is expected, an alias/anchor, an unknown key
 * ("unknown key \"lerning_rate\" (nearest known key: learning_rate)"), a key given twice, a value
 * the alias table cannot translate (e.g. lr_scheduler_type "polynomial", the known ones named);
 * AF_ERR_NOMEM. The file is at most 16 MiB. */
af_status af_train_settings_read_yaml(const char *path, const char *what, af_train_settings **out);

/* Same, from text[0..len) (`name` stands for the file name in messages). Used by the fuzz target. */
af_status af_train_settings_parse_yaml(const char *name, const char *what, const char *text, size_t len,
                                       af_train_settings **out);

/* Write the settings held in `config_json` (a JSON object {"key": value}, as af_train_settings_to_json
 * makes) as a YAML mapping with afinar's keys to `path`, atomically (af_write_file_atomic). Numbers
 * and booleans are plain scalars, strings are quoted when YAML would read them otherwise.
 * af_train_settings_read_yaml reads the file back to the same settings.
 * Errors: AF_ERR_FORMAT (config_json not a JSON object), AF_ERR_IO, AF_ERR_NOMEM. */
af_status af_train_settings_write_yaml(const char *config_json, const char *path);

#endif /* AF_SETTINGS_YAML_H */
