/*
 * train_opts.h — the flags of `afinar train` and `afinar check` and their --config FILE.json.
 *
 * Every flag has a config key: its long name without the dashes ("lr", "grad-accum", ...); the
 * keys, their kinds, ranges and help texts are the library's (af_train_setting_keys).
 * Precedence (lowest to highest): built-in defaults < with --resume, the checkpoint's
 * train_config.json (so `afinar train --resume OUT` continues with the run's own settings) <
 * --config FILE.json < flags on the command line. An unknown key in a config file is a usage
 * error naming the key; values may be JSON numbers / booleans or strings holding them.
 * Booleans: --flag sets true, --no-flag sets false (config: true / false).
 * --max-steps with --epochs: --max-steps sets the length (the report says so); --max-steps alone
 * ignores the default epochs.
 */
#ifndef AF_CLI_TRAIN_OPTS_H
#define AF_CLI_TRAIN_OPTS_H

#include "afinar.h"
#include "afinar_app.h"

#include <stdio.h>

typedef struct train_cli {
    af_train_settings *merged; /* effective settings by key (owns the strings opts points to) */
    af_trainer_opts opts; /* ready for af_trainer_new (log, interrupt left to the caller) */
    char *config_json;    /* merged settings without resume/overwrite/config, as JSON (owned) */
} train_cli;

/* Parse argv (argv[0] = the command name). Returns 0 on success, 2 on a usage error (message
 * printed), 1 when a file (config, checkpoint config) cannot be read, -1 when --help was printed.
 * `cmd` names the command in messages ("train" / "check"). Free with train_cli_free in all cases. */
int train_cli_parse(const char *cmd, int argc, char **argv, train_cli *tc);
void train_cli_free(train_cli *tc);
/* train_cli_parse, then require -m and --train. Returns 0 to go on; otherwise train_cli_parse's
 * codes (-1 after --help, 1, 2; a missing -m/--train is 2) with `tc` already freed. */
int train_cli_parse_required(const char *cmd, int argc, char **argv, train_cli *tc);
/* The flag reference (usage of train / check). */
void train_cli_help(const char *cmd, FILE *fp);

#endif
