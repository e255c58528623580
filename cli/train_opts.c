/* train_opts.c — flags and --config of `afinar train` / `afinar check` (see train_opts.h). */
#include "train_opts.h"

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define O_CONFIG 2000
#define O_HELP 2001
#define O_NO 3000 /* O_NO + i: --no-<bool i> */

#define HELP_COLS 100 /* help lines are wrapped at this width */
#define HELP_LEFT 30  /* the column where descriptions start */

/* Print `text` from column `col` (the cursor is there), wrapped at HELP_COLS with continuation lines
 * indented by `indent`; words longer than a line are not cut. */
static void put_wrapped(FILE *fp, int col, int indent, const char *text) {
    const char *p = text;
    int first = 1;
    while (*p) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (!first && col + 1 + (int)w > HELP_COLS) {
            fprintf(fp, "\n%*s", indent, "");
            col = indent;
        } else if (!first) {
            fputc(' ', fp);
            col++;
        }
        first = 0;
        fprintf(fp, "%.*s", (int)w, p);
        col += (int)w;
        p += w;
    }
    fputc('\n', fp);
}

/* One setting's line(s): flag, description, and its default per task ("auto: from the data" where
 * the automatic recipe decides; the causal-LM default when it differs). */
static void help_key(FILE *fp, const af_setting_info *d) {
    char left[64], text[768], dc[160], dl[160];
    if (d->short_opt) snprintf(left, sizeof left, "  -%c, --%s%s%s", d->short_opt, d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    else snprintf(left, sizeof left, "      --%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    af_train_setting_default(d->name, AF_TASK_CLASSIFICATION, 1, dc, sizeof dc);
    af_train_setting_default(d->name, AF_TASK_CAUSAL_LM, 1, dl, sizeof dl);
    if (!strcmp(d->name, "task") || !strcmp(dc, "required")) snprintf(text, sizeof text, "%s%s", d->help,
                                                                      strcmp(dc, "required") ? "" : " (required)");
    else if (!strcmp(dc, dl)) snprintf(text, sizeof text, "%s (default: %s)", d->help, dc);
    else snprintf(text, sizeof text, "%s (default: %s; causal-lm: %s)", d->help, dc, dl);
    const int len = fprintf(fp, "%s", left);
    if (len < HELP_LEFT) fprintf(fp, "%*s", HELP_LEFT - len, "");
    else fprintf(fp, "\n%*s", HELP_LEFT, ""); /* a long flag: the description on the next line */
    put_wrapped(fp, HELP_LEFT, HELP_LEFT, text);
}

void train_cli_help(const char *cmd, FILE *fp) {
    const int check = !strcmp(cmd, "check");
    fprintf(fp, "usage: afinar %s -m MODEL --train FILE.jsonl %s[options]\n\n", cmd, check ? "" : "-o DIR ");
    if (check)
        put_wrapped(fp, 0, 0, "Reads the model's tokenizer and the data, prints statistics, the plan with the origin of "
                           "every setting (default, config, flag, recipe, resume) and diagnostics; exit status 1 "
                           "when any of them is an error, else 0. Takes the options of 'afinar train' that shape a "
                           "run (those below).");
    else
        put_wrapped(fp, 0, 0, "Fine-tunes a LoRA adapter: a sequence classifier (default) or a causal LM "
                           "(--task causal-lm). The defaults shown apply to a classification run with the automatic "
                           "recipe; \"causal-lm:\" gives that task's own, \"auto: from the data\" what the recipe "
                           "decides (and its value with --recipe fixed).");
    int32_t n_keys;
    const af_setting_info *keys = af_train_setting_keys(&n_keys);
    static const char *const groups[] = {"model and data", "task", "LoRA and head", "optimisation", "schedule",
                                         "evaluation", "checkpoints", "compute", "output"};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        int shown = 0;
        for (int32_t i = 0; i < n_keys; i++) {
            if (strcmp(keys[i].group, groups[g]) != 0 || (check && keys[i].train_only)) continue;
            if (!shown++) fprintf(fp, "\n%c%s:\n", toupper((unsigned char)groups[g][0]), groups[g] + 1);
            help_key(fp, &keys[i]);
        }
    }
    fprintf(fp, "\nOther:\n"
                "      --config FILE           settings from FILE.json ({\"flag-name\": value}) or FILE.yaml (afinar's\n"
                "                              names or TRL/PEFT's: docs/DATA.md); command-line flags win\n"
                "  -h, --help                  this help\n\n");
    put_wrapped(fp, 0, 0, check ? "Boolean flags have a --no-FLAG form. Precedence: defaults < --config < flags."
                                : "Boolean flags have a --no-FLAG form. Precedence: defaults < the checkpoint's "
                                  "settings (--resume) < --config < flags.");
    if (!check)
        put_wrapped(fp, 0, 0, "Exit status: 0 done, 1 failure, 2 usage error, 130 interrupted by Ctrl-C (SIGINT), "
                           "143 by SIGTERM (both save a checkpoint first).");
}

/* Print a failed library call's message as "afinar CMD: MESSAGE"; return the exit code: 1 for
 * a file that cannot be read or memory, 2 for bad content or values (usage errors). */
static int settings_fail(const char *cmd, af_status st) {
    cli_fail(cmd, st);
    return (st == AF_ERR_IO || st == AF_ERR_NOMEM) ? 1 : 2;
}

/* --labels FILE|a,b,c: the library reads a regular file and otherwise splits the text on commas.
 * A value without a comma that is not a readable regular file would be a one-class list (never
 * valid), so it is almost surely a mistyped file name: say so here. 0 ok, 1 with a message. */
static int check_labels_spec(const char *cmd, const char *spec) {
    if (!spec || strchr(spec, ',')) return 0;
    struct stat sb;
    if (stat(spec, &sb) != 0) {
        cli_error(cmd, "--labels %s: cannot open: %s (give a file with one name per line, or names as a,b,c)", spec,
                  strerror(errno));
        return 1;
    }
    if (!S_ISREG(sb.st_mode)) {
        cli_error(cmd, "--labels %s: not a regular file", spec);
        return 1;
    }
    return 0;
}

/* With --resume: the checkpoint's own settings (verified against its manifest; paths found again if
 * the run moved) into *base, its notes on stderr; without its train_config.json, the flags alone
 * (an error when -m or --train is missing). Returns 0 or the exit code (message printed). */
static int resume_base(const char *cmd, const char *res, const af_train_settings *cli, const af_train_settings *file,
                       af_train_settings **base) {
    int rc = 0;
    char *ck = NULL;
    if (af_trainer_find_checkpoint(res, &ck) != AF_OK) {
        rc = cli_fail(cmd, AF_ERR_NOT_FOUND);
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/train_config.json", ck);
        struct stat sb; /* stat, not open: never blocks; the settings reader refuses a non-regular file */
        if (stat(path, &sb) == 0) {
            /* verified against the checkpoint's manifest; paths found again if the run moved */
            char *note = NULL;
            af_status st = af_train_settings_read_checkpoint(ck, base, &note);
            /* a checkpoint that fails its checks is a failure (1), bad settings a usage error (2) */
            if (st != AF_OK) rc = af_last_error_kind() == AF_ERROR_KIND_CHECKPOINT ? cli_fail(cmd, st) : settings_fail(cmd, st);
            for (char *ln = note; ln && *ln;) {
                char *eol = strchr(ln, '\n');
                if (eol) *eol = 0;
                fprintf(stderr, "afinar %s: note: %s\n", cmd, ln);
                ln = eol ? eol + 1 : NULL;
            }
            free(note);
        } else {
            /* without the run's settings every flag must come again: name the missing file first
             * (not a series of "missing -m", "missing --train", then a batch mismatch) */
            int has_m = af_train_settings_get(cli, "model") || (file && af_train_settings_get(file, "model"));
            int has_t = af_train_settings_get(cli, "train") || (file && af_train_settings_get(file, "train"));
            if (!has_m || !has_t) {
                cli_error(cmd,
                          "--resume %s: %s is missing (it holds the run's settings); copy it back from the run "
                          "directory, or give the original run's settings again (-m, --train, --batch, ...)",
                          res, path);
                rc = 1;
            } else {
                fprintf(stderr, "afinar %s: warning: %s is missing: using only the settings given on the command "
                                "line; they must equal the original run's (--batch, --lr, --seed, ...)\n",
                        cmd, path);
            }
        }
        free(ck);
    }
    return rc;
}

int train_cli_parse(const char *cmd, int argc, char **argv, train_cli *tc) {
    memset(tc, 0, sizeof *tc);
    int32_t n_keys;
    const af_setting_info *keys = af_train_setting_keys(&n_keys);
    enum { N_MAX = AF_SETTINGS_MAX };
    static struct option lopts[2 * N_MAX + 3];
    static char names[N_MAX][40];
    char shorts[64] = ":";
    int nl = 0;
    if (n_keys > N_MAX) {
        cli_error(cmd, "internal: %d settings, room for %d", n_keys, N_MAX);
        return 1;
    }
    for (int i = 0; i < n_keys; i++) {
        const af_setting_info *d = &keys[i];
        lopts[nl++] = (struct option){d->name, d->kind == AF_SETTING_BOOL ? no_argument : required_argument, 0, 1000 + i};
        if (d->kind == AF_SETTING_BOOL) {
            snprintf(names[i], sizeof names[i], "no-%s", d->name);
            lopts[nl++] = (struct option){names[i], no_argument, 0, O_NO + i};
        }
        if (d->short_opt) {
            size_t l = strlen(shorts);
            shorts[l] = (char)d->short_opt;
            shorts[l + 1] = ':';
            shorts[l + 2] = 0;
        }
    }
    strcat(shorts, "h");
    lopts[nl++] = (struct option){"config", required_argument, 0, O_CONFIG};
    lopts[nl++] = (struct option){"help", no_argument, 0, O_HELP};
    lopts[nl] = (struct option){0, 0, 0, 0};
    af_train_settings *cli = NULL, *file = NULL, *base = NULL;
    if (af_train_settings_new(&cli) != AF_OK) {
        cli_error(cmd, "out of memory");
        return 1;
    }
    const char *config = NULL;
    optind = 1;
    opterr = 0;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
        int idx = -1;
        af_status st = AF_OK;
        if (c >= 1000 && c < 1000 + n_keys) idx = c - 1000;
        else if (c >= O_NO && c < O_NO + n_keys) {
            st = af_train_settings_set_bool(cli, keys[c - O_NO].name, 0);
        } else if (c == O_CONFIG) {
            config = optarg;
        } else if (c == 'h' || c == O_HELP) {
            train_cli_help(cmd, stdout);
            rc = -1;
            break;
        } else if (c == ':') {
            cli_error(cmd, "option '%s' needs a value", argv[optind - 1]);
            rc = 2;
            break;
        } else if (c == '?') {
            cli_error(cmd, "unknown option '%s' (see 'afinar %s --help')", argv[optind - 1], cmd);
            rc = 2;
            break;
        } else {
            for (int i = 0; i < n_keys; i++)
                if (keys[i].short_opt == c) idx = i;
        }
        if (idx >= 0) {
            const af_setting_info *d = &keys[idx];
            st = d->kind == AF_SETTING_BOOL ? af_train_settings_set_bool(cli, d->name, 1)
                                            : af_train_settings_set(cli, d->name, optarg);
        }
        if (st != AF_OK) rc = settings_fail(cmd, st);
    }
    if (rc == 0 && optind < argc) {
        cli_error(cmd, "unexpected argument '%s'", argv[optind]);
        rc = 2;
    }
    if (rc == 0 && config) {
        af_status st = af_train_settings_read(config, "config file", &file);
        if (st != AF_OK) rc = settings_fail(cmd, st);
    }
    const char *res = af_train_settings_get(cli, "resume");
    if (!res && file) res = af_train_settings_get(file, "resume"); /* YAML: resume_from_checkpoint */
    if (rc == 0 && res) rc = resume_base(cmd, res, cli, file, &base);
    if (rc == 0 && (af_train_settings_new(&tc->merged) != AF_OK ||
                    (base && af_train_settings_merge(tc->merged, base) != AF_OK) ||
                    (file && af_train_settings_merge(tc->merged, file) != AF_OK) ||
                    af_train_settings_merge(tc->merged, cli) != AF_OK)) {
        cli_error(cmd, "out of memory");
        rc = 1;
    }
    af_train_settings_free(cli);
    af_train_settings_free(file);
    af_train_settings_free(base);
    if (rc != 0) return rc;
    af_status st = af_train_settings_to_opts(tc->merged, &tc->opts);
    if (st != AF_OK) return settings_fail(cmd, st);
    rc = check_labels_spec(cmd, tc->opts.labels);
    if (rc != 0) return rc;
    af_train_settings_to_json(tc->merged, &tc->config_json); /* NULL when out of memory: not stored */
    tc->opts.config_json = tc->config_json;
    return 0;
}

void train_cli_free(train_cli *tc) {
    af_train_settings_free(tc->merged);
    free(tc->config_json);
    memset(tc, 0, sizeof *tc);
}

int train_cli_parse_required(const char *cmd, int argc, char **argv, train_cli *tc) {
    int rc = train_cli_parse(cmd, argc, argv, tc);
    if (rc != 0) {
        train_cli_free(tc);
        return rc;
    }
    const af_trainer_opts *o = &tc->opts;
    if (!o->model_path || !o->train_path) {
        cli_error(cmd, "missing %s (see 'afinar %s --help')", !o->model_path ? "-m MODEL.gguf" : "--train FILE.jsonl",
                  cmd);
        train_cli_free(tc);
        return 2;
    }
    return 0;
}
