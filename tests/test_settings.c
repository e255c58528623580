/*
 * test_settings.c — the table of training settings (src/train/settings_table.c) and the origins of
 * their values, without a model:
 *  (a) every key names a help group and fits af_trainer_opts.origin; a value given as a flag, in
 *      a config file and from a checkpoint's settings lands in its typed field with its origin
 *      (flag > config > resume, as train_opts.c merges them); untouched keys stay "default";
 *  (b) per-task defaults for the help texts: lr 0.0005 / causal-lm 0.0002, targets qv / all-linear,
 *      the recipe's keys "auto: from the data" with the fixed recipe's value, causal-lm's
 *      max-seq-len not the recipe's;
 *  (c) the one range check: a flag out of range and a C caller's field out of range give the same
 *      message; a caller's field is marked "caller", a settings object's are left as given;
 *  (d) value formatting (af_setting_format): enums, warm-up share, unset meanings;
 *  (e) `afinar train --help` / `check --help` (when AFINAR_BIN is set): every line within 100
 *      columns, the group headers present, check lists no -o, --resume, --save-*, --overwrite.
 */
#include "testlib.h"

#include "train/settings_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int origin_of(const af_trainer_opts *o, const char *key) { return o->origin[af_setting_index(key)]; }

static void test_origins(void) {
    int32_t n = 0;
    const af_setting_info *keys = af_train_setting_keys(&n);
    CHECK(n > 0 && n <= AF_SETTINGS_MAX, "%d keys, room for %d", n, AF_SETTINGS_MAX);
    for (int32_t i = 0; i < n; i++) CHECK(keys[i].group && keys[i].help, "key %s: group and help", keys[i].name);
    af_train_settings *resume = NULL, *file = NULL, *cli = NULL, *m = NULL;
    if (!CHECK(af_train_settings_new(&resume) == AF_OK && af_train_settings_new(&file) == AF_OK &&
                   af_train_settings_new(&cli) == AF_OK && af_train_settings_new(&m) == AF_OK,
               "new: %s", af_last_error()))
        return;
    af_train_settings_set(resume, "lr", "0.001");
    af_train_settings_set(resume, "batch", "4");
    af_train_settings_set(resume, "lora-r", "8");
    af_train_settings_set_origin(resume, AF_ORIGIN_RESUME);
    af_train_settings_set(file, "lr", "0.002");
    af_train_settings_set(file, "epochs", "3");
    af_train_settings_set_origin(file, AF_ORIGIN_CONFIG);
    af_train_settings_set(cli, "lr", "0.003");
    af_train_settings_set(cli, "model", "m.gguf");
    af_train_settings_set(cli, "schedule", "linear");
    af_train_settings_set(cli, "warmup", "10%");
    af_train_settings_merge(m, resume);
    af_train_settings_merge(m, file);
    af_train_settings_merge(m, cli);
    af_trainer_opts o;
    if (CHECK(af_train_settings_to_opts(m, &o) == AF_OK, "to_opts: %s", af_last_error())) {
        CHECK(o.lr == 0.003 && origin_of(&o, "lr") == AF_ORIGIN_FLAG, "lr %g origin %d", o.lr, origin_of(&o, "lr"));
        CHECK(o.epochs == 3 && origin_of(&o, "epochs") == AF_ORIGIN_CONFIG, "epochs from the config file");
        CHECK(o.batch == 4 && o.lora_r == 8 && origin_of(&o, "batch") == AF_ORIGIN_RESUME &&
                  origin_of(&o, "lora-r") == AF_ORIGIN_RESUME,
              "batch, lora-r from the checkpoint");
        CHECK(o.model_path && !strcmp(o.model_path, "m.gguf") && origin_of(&o, "model") == AF_ORIGIN_FLAG, "model");
        CHECK(o.schedule == AF_SCHED_LINEAR && o.warmup_steps < 0 && o.warmup_ratio == 0.1, "schedule, warm-up share");
        CHECK(origin_of(&o, "seed") == AF_ORIGIN_DEFAULT && o.seed == 42, "seed untouched: default 42");
        CHECK(o.recipe == AF_RECIPE_AUTO && (o.given & AF_GIVEN_LENGTH) && (o.given & AF_GIVEN_WARMUP) &&
                  !(o.given & AF_GIVEN_MAX_SEQ_LEN),
              "given bits 0x%x", o.given);
        af_trainer_opts_mark_caller(&o); /* a settings object's origins are complete: nothing changes */
        CHECK(origin_of(&o, "recipe") == AF_ORIGIN_DEFAULT, "recipe auto of a settings object stays default");
    }
    /* the task's own defaults apply before the keys */
    af_train_settings *lm = NULL;
    af_train_settings_new(&lm);
    af_train_settings_set(lm, "task", "causal-lm");
    if (CHECK(af_train_settings_to_opts(lm, &o) == AF_OK, "causal-lm: %s", af_last_error()))
        CHECK(o.task == AF_TASK_CAUSAL_LM && o.lr == 2e-4 && !strcmp(o.targets, "all-linear") &&
                  !strcmp(o.lora_layers, "all") && origin_of(&o, "task") == AF_ORIGIN_FLAG,
              "causal-lm defaults: lr %g targets %s", o.lr, o.targets);
    af_train_settings_set(lm, "pooling", "max");
    CHECK(af_train_settings_to_opts(lm, &o) == AF_ERR_INVALID_ARG &&
              !strcmp(af_last_error(), "--pooling: expected mean or last, got 'max'"),
          "enum message: %s", af_last_error());
    af_train_settings_free(lm);
    af_train_settings_free(resume);
    af_train_settings_free(file);
    af_train_settings_free(cli);
    af_train_settings_free(m);
}

static void test_defaults(void) {
    char b[160];
    CHECK(!strcmp(af_train_setting_default("lr", AF_TASK_CLASSIFICATION, 1, b, sizeof b), "0.0005"), "lr: %s", b);
    CHECK(!strcmp(af_train_setting_default("lr", AF_TASK_CAUSAL_LM, 1, b, sizeof b), "0.0002"), "lm lr: %s", b);
    CHECK(!strcmp(af_train_setting_default("targets", AF_TASK_CAUSAL_LM, 1, b, sizeof b), "all-linear"), "%s", b);
    CHECK(!strcmp(af_train_setting_default("epochs", AF_TASK_CLASSIFICATION, 1, b, sizeof b),
                  "auto: from the data; fixed recipe: 1"),
          "epochs: %s", b);
    CHECK(!strcmp(af_train_setting_default("epochs", AF_TASK_CLASSIFICATION, 0, b, sizeof b), "1"), "fixed: %s", b);
    CHECK(!strcmp(af_train_setting_default("max-seq-len", AF_TASK_CAUSAL_LM, 1, b, sizeof b), "128"),
          "causal-lm max-seq-len is not the recipe's: %s", b);
    CHECK(!strcmp(af_train_setting_default("warmup", AF_TASK_CAUSAL_LM, 1, b, sizeof b),
                  "auto: from the data; fixed recipe: 6%"),
          "warmup: %s", b);
    CHECK(!strcmp(af_train_setting_default("recipe", AF_TASK_CLASSIFICATION, 1, b, sizeof b), "auto"), "%s", b);
    CHECK(!strcmp(af_train_setting_default("threads", AF_TASK_CLASSIFICATION, 1, b, sizeof b), "all cores"), "%s", b);
    CHECK(af_train_setting_default("no-such-key", AF_TASK_CLASSIFICATION, 1, b, sizeof b) == NULL, "unknown key");
    af_lora_trainer_opts lo;
    af_lora_trainer_opts_defaults(&lo); /* one default per setting: the public trainer's are the table's */
    af_trainer_opts d;
    af_trainer_opts_defaults(&d);
    af_trainer_opts_task_defaults(&d, AF_TASK_CAUSAL_LM); /* its default num_classes 0: a causal-LM trainer */
    CHECK(lo.r == d.lora_r && lo.lora_alpha == (float)d.lora_alpha && lo.lora_dropout == (float)d.lora_dropout &&
              lo.lr == (float)d.lr && lo.weight_decay == (float)d.weight_decay && lo.seed == d.seed &&
              lo.max_grad_norm == (float)d.max_grad_norm,
          "af_lora_trainer_opts_defaults equals the run's causal-LM defaults");
}

static void test_range_and_caller(void) {
    af_train_settings *s = NULL;
    af_train_settings_new(&s);
    af_train_settings_set(s, "batch", "0");
    af_trainer_opts o;
    CHECK(af_train_settings_to_opts(s, &o) == AF_ERR_INVALID_ARG, "flag --batch 0 refused");
    char flag_msg[256];
    snprintf(flag_msg, sizeof flag_msg, "%s", af_last_error());
    af_train_settings_free(s);
    af_trainer_opts_defaults(&o);
    o.batch = 0;
    CHECK(af_trainer_opts_check(&o) == AF_ERR_INVALID_ARG && !strcmp(af_last_error(), flag_msg),
          "one message: flag '%s' vs field '%s'", flag_msg, af_last_error());
    af_trainer_opts_defaults(&o);
    o.lr = 1e30; /* not a hard range: the diagnostics judge it */
    CHECK(af_trainer_opts_check(&o) == AF_OK, "lr 1e30 passes the hard check: %s", af_last_error());
    o.lora_r = 8;
    af_trainer_opts_mark_caller(&o);
    CHECK(origin_of(&o, "lr") == AF_ORIGIN_CALLER && origin_of(&o, "lora-r") == AF_ORIGIN_CALLER &&
              origin_of(&o, "batch") == AF_ORIGIN_DEFAULT,
          "a C caller's fields: lr %d, lora-r %d, batch %d", origin_of(&o, "lr"), origin_of(&o, "lora-r"),
          origin_of(&o, "batch"));
    CHECK(!strcmp(af_setting_origin_name(AF_ORIGIN_RECIPE), "recipe") && !strcmp(af_setting_origin_name(99), "?"),
          "origin names");
}

static void test_format(void) {
    af_trainer_opts o;
    af_trainer_opts_defaults(&o);
    char b[160];
    CHECK(!strcmp(af_setting_format(af_setting_index("schedule"), &o, b, sizeof b), "cosine"), "schedule: %s", b);
    CHECK(!strcmp(af_setting_format(af_setting_index("warmup"), &o, b, sizeof b), "6%"), "warmup: %s", b);
    o.warmup_steps = 12;
    CHECK(!strcmp(af_setting_format(af_setting_index("warmup"), &o, b, sizeof b), "12 steps"), "warmup: %s", b);
    CHECK(!strcmp(af_setting_format(af_setting_index("packing"), &o, b, sizeof b), "on"), "packing -1: %s", b);
    CHECK(!strcmp(af_setting_format(af_setting_index("eval-batch"), &o, b, sizeof b), "--batch"), "eval-batch: %s", b);
    CHECK(!strcmp(af_setting_format(af_setting_index("lora-dropout"), &o, b, sizeof b), "0.05"), "dropout: %s", b);
    CHECK(!strcmp(af_setting_format(af_setting_index("seed"), &o, b, sizeof b), "42"), "seed: %s", b);
    CHECK(af_setting_format(-1, &o, b, sizeof b) == NULL, "bad index");
}

/* Every line of `cmd`'s output within 100 columns; `want` and not `unwanted` (NULL-terminated lists). */
static void check_help(const char *bin, const char *cmd, const char *const *want, const char *const *unwanted) {
    char line[1024], sh[1200];
    snprintf(sh, sizeof sh, "%s %s --help", bin, cmd);
    FILE *p = popen(sh, "r");
    if (!CHECK(p != NULL, "popen %s", sh)) return;
    size_t cap = 1 << 16, len = 0;
    char *all = calloc(1, cap);
    int longest = 0;
    while (all && fgets(line, sizeof line, p)) {
        int l = (int)strcspn(line, "\n");
        if (l > longest) longest = l;
        size_t k = strlen(line);
        if (len + k + 1 < cap) memcpy(all + len, line, k + 1), len += k;
    }
    CHECK(pclose(p) == 0, "%s: exit status", sh);
    CHECK(longest <= 100, "%s: a line of %d columns", sh, longest);
    for (int i = 0; all && want[i]; i++) CHECK(strstr(all, want[i]) != NULL, "%s: missing '%s'", sh, want[i]);
    for (int i = 0; all && unwanted[i]; i++) CHECK(strstr(all, unwanted[i]) == NULL, "%s: lists '%s'", sh, unwanted[i]);
    free(all);
}

static void test_help(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        tl_skip("help texts: AFINAR_BIN not set (make test sets it)");
        return;
    }
    static const char *const train_want[] = {"Model and data:", "Task:", "LoRA and head:", "Optimisation:", "Schedule:",
                                             "Evaluation:", "Checkpoints:", "Compute:", "Output:", "--resume DIR",
                                             "(default: 0.0005; causal-lm: 0.0002)", "auto: from the data", NULL};
    static const char *const none[] = {NULL};
    check_help(bin, "train", train_want, none);
    static const char *const check_want[] = {"Model and data:", "--max-seq-len", NULL};
    static const char *const check_unwanted[] = {"-o,", "--output", "--resume", "--save-every", "--save-total-limit",
                                                 "--overwrite", NULL};
    check_help(bin, "check", check_want, check_unwanted);
}

int main(void) {
    test_origins();
    test_defaults();
    test_range_and_caller();
    test_format();
    test_help();
    return tl_finish("settings");
}
