/* train_opts.c — flags and --config of `afinar train` / `afinar check` (see train_opts.h). */
#include "train_opts.h"

#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum { K_STR, K_INT, K_NUM, K_BOOL } kind;

typedef struct opt_def {
    const char *name;
    kind k;
    int short_opt;
    double lo, hi;     /* K_INT / K_NUM range */
    const char *arg;   /* placeholder in the help */
    const char *help;
} opt_def;

#define BIG 1e15
static const opt_def k_defs[] = {
    {"model", K_STR, 'm', 0, 0, "FILE", "GGUF base model (needs its tokenizer)"},
    {"train", K_STR, 0, 0, 0, "FILE", "training data, JSONL: {\"input\": text, \"label\": id|name} or \"labels\": [...]"},
    {"val", K_STR, 0, 0, 0, "FILE", "validation data (JSONL); evaluation, best checkpoint and early stopping use it"},
    {"val-split", K_NUM, 0, 0, 0.99, "F", "hold out fraction F of train (stratified, seeded) as validation (default 0: none)"},
    {"text-field", K_STR, 0, 0, 0, "NAME", "JSON field holding the text (default input)"},
    {"label-field", K_STR, 0, 0, 0, "NAME", "JSON field holding the label(s) (default label / labels)"},
    {"labels", K_STR, 0, 0, 0, "FILE|a,b,c", "label names: a file with one per line, or a comma list (fixes the ids)"},
    {"num-classes", K_INT, 0, 0, 1e6, "N", "number of classes for integer labels (default: max label + 1)"},
    {"multi-label", K_BOOL, 0, 0, 0, NULL, "require multi-label data (BCE loss; the data decide otherwise)"},
    {"targets", K_STR, 0, 0, 0, "SPEC", "LoRA targets: qv (default), qkv, all-linear, or a list of q,k,v,o,gate,up,down"},
    {"lora-layers", K_STR, 0, 0, 0, "A-B|topN", "layers with adapters, 0-based: all, A-B, A-, topN (default top10; the backward stops at the lowest)"},
    {"lora-r", K_INT, 0, 1, 4096, "R", "LoRA rank (default 16)"},
    {"lora-alpha", K_NUM, 0, 1e-9, 1e6, "A", "LoRA alpha (default 32; scale alpha/r)"},
    {"lora-dropout", K_NUM, 0, 0, 0.99, "P", "dropout on the LoRA input (default 0.05)"},
    {"rslora", K_BOOL, 0, 0, 0, NULL, "rank-stabilised scale alpha/sqrt(r)"},
    {"pooling", K_STR, 0, 0, 0, "mean|last", "sequence pooling for the head (default mean; last = transformers/PEFT)"},
    {"head-bias", K_BOOL, 0, 0, 0, NULL, "train a head bias (PEFT's score layer has none: lost outside afinar)"},
    {"class-weights", K_STR, 0, 0, 0, "SPEC", "uniform (default), inverse-freq, sqrt-inverse, or w1,w2,..."},
    {"lr", K_NUM, 0, 0, 10, "LR", "peak learning rate (default 5e-4)"},
    {"lr-min", K_NUM, 0, 0, 10, "LR", "floor of the cosine/linear decay (default 0)"},
    {"schedule", K_STR, 0, 0, 0, "NAME", "constant | cosine (default) | linear, after a linear warm-up"},
    {"warmup", K_STR, 0, 0, 0, "N|F|P%", "warm-up: N steps, or a fraction F < 1 / P% of all steps (default 6%)"},
    {"epochs", K_NUM, 0, 0, 1e6, "E", "passes over the training data, may be fractional (default 1)"},
    {"max-steps", K_INT, 0, 0, BIG, "N", "optimizer steps; sets the length instead of --epochs"},
    {"batch", K_INT, 0, 1, 1e6, "N", "samples per micro-batch (default 8)"},
    {"grad-accum", K_INT, 0, 1, 1e6, "N", "micro-batches per optimizer step (default 2)"},
    {"max-grad-norm", K_NUM, 0, 0, 1e9, "X", "clip the global gradient norm (default 1.0; 0 = off)"},
    {"weight-decay", K_NUM, 0, 0, 10, "X", "AdamW weight decay (default 0.01; not on the head bias)"},
    {"seed", K_INT, 0, 0, 9007199254740991.0, "N", "seed of init, shuffles, split and dropout (default 42)"},
    {"max-seq-len", K_INT, 0, 1, 1 << 20, "N", "truncate samples to N tokens (default 128)"},
    {"prefix-cache", K_INT, 0, 0, 1 << 24, "MIB", "keep the frozen layers' output per sample (default 2048; 0 = off)"},
    {"checkpointing", K_BOOL, 0, 0, 0, NULL, "recompute activations in the backward (less memory, ~1.3x time)"},
    {"eval-every", K_INT, 0, 0, BIG, "N", "evaluate every N steps (default 0: at each epoch end)"},
    {"eval-batch", K_INT, 0, 0, 1e6, "N", "samples per evaluation batch (default: --batch)"},
    {"patience", K_INT, 0, 0, 1e9, "N", "stop after N evaluations without macro-F1 gain (default 0: off)"},
    {"save-every", K_INT, 0, 0, BIG, "N", "checkpoint every N steps (default 0: at each evaluation / epoch end)"},
    {"save-total-limit", K_INT, 0, 0, 1e6, "N", "checkpoints kept, newest first (default 2; 0 = all)"},
    {"output", K_STR, 'o', 0, 0, "DIR", "output directory (checkpoints, best/, final/, metrics.jsonl)"},
    {"overwrite", K_BOOL, 0, 0, 0, NULL, "replace the run already in the output directory"},
    {"resume", K_STR, 0, 0, 0, "DIR", "continue exactly from a checkpoint (or a run directory's newest one)"},
    {"threads", K_INT, 't', 0, 1024, "N", "compute threads (default 0: all cores)"},
    {"memory-limit", K_NUM, 0, 0, 1e9, "MIB", "refuse to start above this estimated peak (default: RAM or cgroup limit)"},
    {"bf16", K_BOOL, 0, 0, 0, NULL, "bfloat16 operands, f32 accumulation in the large products (AVX512_BF16; ~1.4x faster)"},
    {"max-nonfinite", K_INT, 0, 1, 1e6, "N", "stop after N consecutive non-finite steps (default 5)"},
    {"log-every", K_INT, 0, 0, BIG, "N", "progress line every N steps when stderr is not a terminal"},
    {"plot", K_BOOL, 0, 0, 0, NULL, "write curves.png with gnuplot at the end (default on; --no-plot)"},
};
#define N_DEFS ((int)(sizeof k_defs / sizeof *k_defs))
#define O_CONFIG 2000
#define O_HELP 2001
#define O_NO 3000 /* O_NO + i: --no-<bool i> */

static const opt_def *find_def(const char *name) {
    for (int i = 0; i < N_DEFS; i++)
        if (!strcmp(k_defs[i].name, name)) return &k_defs[i];
    return NULL;
}

void train_cli_help(const char *cmd, FILE *fp) {
    fprintf(fp, "usage: afinar %s -m MODEL.gguf --train FILE.jsonl %s[options]\n\n", cmd,
            strcmp(cmd, "train") ? "" : "-o DIR ");
    if (!strcmp(cmd, "check"))
        fprintf(fp, "Reads the model's tokenizer and the data, prints statistics and diagnostics of the configuration;\n"
                    "exit status 1 when any of them is an error, else 0. Takes the same options as 'afinar train'.\n\n");
    for (int i = 0; i < N_DEFS; i++) {
        const opt_def *d = &k_defs[i];
        char left[64];
        if (d->short_opt) snprintf(left, sizeof left, "-%c, --%s%s%s", d->short_opt, d->name, d->arg ? " " : "", d->arg ? d->arg : "");
        else snprintf(left, sizeof left, "    --%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
        fprintf(fp, "  %-30s %s\n", left, d->help);
    }
    fprintf(fp, "      --config FILE.json         settings as {\"flag-name\": value, ...}; command-line flags win\n"
                "  -h, --help                     this help\n\n"
                "Boolean flags have a --no-FLAG form. With --resume, the checkpoint's own settings are the base.\n"
                "Exit status: 0 done, 1 failure, 2 usage error, 130 interrupted (Ctrl-C saves a checkpoint first).\n");
}

/* Merge `src` into `dst` (src wins); both objects. */
static int merge_into(cJSON *dst, const cJSON *src) {
    const cJSON *e;
    cJSON_ArrayForEach(e, src) {
        cJSON *dup = cJSON_Duplicate(e, 1);
        if (!dup) return 0;
        if (cJSON_GetObjectItemCaseSensitive(dst, e->string)) cJSON_ReplaceItemInObjectCaseSensitive(dst, e->string, dup);
        else cJSON_AddItemToObject(dst, e->string, dup);
    }
    return 1;
}

/* Whole file as a NUL-terminated string; NULL with errno set when it cannot be opened or read
 * (a directory gives EISDIR). */
static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, r;
    char *b = malloc(cap + 1);
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) { free(b); b = NULL; errno = ENOMEM; break; }
            b = nb;
            cap *= 2;
        }
    }
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (b && e) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    else if (e) errno = e;
    return b;
}

/* Read a settings file into an object, checking every key. 0 ok, 1 unreadable, 2 bad content. */
static int load_settings(const char *cmd, const char *path, const char *what, cJSON **out) {
    *out = NULL;
    char *txt = read_all(path);
    if (!txt) {
        cli_error(cmd, "%s: cannot read %s: %s", path, what, strerror(errno));
        return 1;
    }
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
        if (len == 0 || strspn(txt, " \t\r\n") == len)
            cli_error(cmd, "%s: %s is empty (expected a JSON object)", path, what);
        else
            cli_error(cmd, "%s:%ld: invalid JSON at column %ld (byte %zu) in the %s", path, line, col, off, what);
        free(txt);
        return 2;
    }
    if (!cJSON_IsObject(j)) {
        cli_error(cmd, "%s: %s must be a JSON object {\"flag-name\": value, ...}", path, what);
        cJSON_Delete(j);
        free(txt);
        return 2;
    }
    free(txt);
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        const opt_def *d = find_def(e->string);
        if (!d || !strcmp(e->string, "resume")) {
            cli_error(cmd, "%s: unknown key \"%s\"%s", path, e->string,
                      d ? " (give --resume on the command line)" : " (keys are the flag names without dashes, e.g. \"grad-accum\")");
            cJSON_Delete(j);
            return 2;
        }
        if (!(cJSON_IsString(e) || cJSON_IsNumber(e) || cJSON_IsBool(e))) {
            cli_error(cmd, "%s: key \"%s\": expected a string, number or boolean", path, e->string);
            cJSON_Delete(j);
            return 2;
        }
    }
    *out = j;
    return 0;
}

/* Value of `e` as text for K_STR (numbers are printed). */
static int get_str(const cJSON *e, const char **s, char *buf, size_t cap) {
    if (cJSON_IsString(e)) *s = e->valuestring;
    else if (cJSON_IsNumber(e)) snprintf(buf, cap, "%.17g", e->valuedouble), *s = buf;
    else return 0;
    return 1;
}

/* Numeric value of a K_INT / K_NUM key, checked against the key's range. Messages quote the value
 * as given: "--batch: expected an integer in [1, 1000000], got '0'". */
static int get_num(const char *cmd, const opt_def *d, const cJSON *e, double *v) {
    char given[64];
    const char *what = d->k == K_INT ? "an integer" : "a number";
    if (cJSON_IsNumber(e)) {
        *v = e->valuedouble;
        snprintf(given, sizeof given, "%.17g", *v);
    } else if (cJSON_IsString(e)) {
        char *end;
        errno = 0;
        *v = strtod(e->valuestring, &end);
        snprintf(given, sizeof given, "%.60s", e->valuestring);
        if (errno || end == e->valuestring || *end) {
            cli_error(cmd, "--%s: expected %s, got '%s'", d->name, what, given);
            return 0;
        }
    } else {
        cli_error(cmd, "--%s: expected %s", d->name, what);
        return 0;
    }
    if (!isfinite(*v) || *v < d->lo || *v > d->hi || (d->k == K_INT && *v != floor(*v))) {
        cli_error(cmd, "--%s: expected %s in [%.15g, %.15g], got '%s'", d->name, what, d->lo, d->hi, given);
        return 0;
    }
    return 1;
}

static int get_bool(const char *cmd, const opt_def *d, const cJSON *e, int *b) {
    if (cJSON_IsBool(e)) *b = cJSON_IsTrue(e);
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "true") || !strcmp(e->valuestring, "1"))) *b = 1;
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "false") || !strcmp(e->valuestring, "0"))) *b = 0;
    else if (cJSON_IsNumber(e) && (e->valuedouble == 0 || e->valuedouble == 1)) *b = e->valuedouble != 0;
    else {
        cli_error(cmd, "--%s: expected true or false", d->name);
        return 0;
    }
    return 1;
}

/* Warm-up spec: "N" steps, "F" fraction < 1, "P%". */
static int parse_warmup(const char *cmd, const cJSON *e, af_trainer_opts *o) {
    double v;
    char *end;
    const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
    if (cJSON_IsNumber(e)) v = e->valuedouble, end = (char *)"";
    else if (s) {
        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s) goto bad;
    } else goto bad;
    if (!isfinite(v) || v < 0) goto bad;
    if (*end == '%' && !end[1]) {
        if (v > 100) goto bad;
        o->warmup_steps = -1, o->warmup_ratio = v / 100;
    } else if (*end) goto bad;
    else if (v < 1 && v > 0) o->warmup_steps = -1, o->warmup_ratio = v;
    else if (v == floor(v) && v <= 1e15) o->warmup_steps = (int64_t)v;
    else goto bad;
    return 1;
bad:
    cli_error(cmd, "--warmup: expected N steps, a fraction below 1 or P%%, got '%s'",
              s ? s : (cJSON_IsNumber(e) ? "a number out of range" : "a non-number"));
    return 0;
}

/* Fill tc->opts from tc->merged. 0 ok, 2 usage error. */
static int to_opts(const char *cmd, train_cli *tc) {
    af_trainer_opts *o = &tc->opts;
    af_trainer_opts_defaults(o);
    const cJSON *e;
    int have_epochs = 0, have_steps = 0;
    cJSON_ArrayForEach(e, tc->merged) {
        const opt_def *d = find_def(e->string);
        if (!d) continue;
        const char *s = NULL;
        char buf[64];
        double v = 0;
        int b = 0;
        if (d->k == K_STR) {
            if (!get_str(e, &s, buf, sizeof buf)) {
                cli_error(cmd, "--%s: expected a string", d->name);
                return 2;
            }
            if (s == buf) { /* keep numbers given for strings alive: store the text in the object */
                cJSON_ReplaceItemInObjectCaseSensitive(tc->merged, d->name, cJSON_CreateString(buf));
                return to_opts(cmd, tc);
            }
        } else if (d->k == K_BOOL) {
            if (!get_bool(cmd, d, e, &b)) return 2;
        } else if (!get_num(cmd, d, e, &v)) return 2;
        const char *n = d->name;
#define IS(x) (!strcmp(n, x))
        if (IS("model")) o->model_path = s;
        else if (IS("train")) o->train_path = s;
        else if (IS("val")) o->val_path = s;
        else if (IS("val-split")) o->val_split = v;
        else if (IS("text-field")) o->text_field = s;
        else if (IS("label-field")) o->label_field = s;
        else if (IS("labels")) o->labels = s;
        else if (IS("num-classes")) o->num_classes = (int32_t)v;
        else if (IS("multi-label")) o->multi_label = b;
        else if (IS("targets")) o->targets = s;
        else if (IS("lora-layers")) o->lora_layers = s;
        else if (IS("lora-r")) o->lora_r = (int32_t)v;
        else if (IS("lora-alpha")) o->lora_alpha = v;
        else if (IS("lora-dropout")) o->lora_dropout = v;
        else if (IS("rslora")) o->use_rslora = b;
        else if (IS("pooling")) {
            if (!strcmp(s, "mean")) o->pooling = AF_POOL_MEAN;
            else if (!strcmp(s, "last")) o->pooling = AF_POOL_LAST;
            else {
                cli_error(cmd, "--pooling: expected mean or last, got '%s'", s);
                return 2;
            }
        } else if (IS("head-bias")) o->head_bias = b;
        else if (IS("class-weights")) o->class_weights = s;
        else if (IS("lr")) o->lr = v;
        else if (IS("lr-min")) o->lr_min = v;
        else if (IS("schedule")) {
            if (af_sched_parse(s, &o->schedule) != 0) {
                cli_error(cmd, "--schedule: expected constant, cosine or linear, got '%s'", s);
                return 2;
            }
        } else if (IS("warmup")) {
            if (!parse_warmup(cmd, e, o)) return 2;
        } else if (IS("epochs")) o->epochs = v, have_epochs = 1;
        else if (IS("max-steps")) o->max_steps = (int64_t)v, have_steps = v > 0;
        else if (IS("batch")) o->batch = (int32_t)v;
        else if (IS("grad-accum")) o->grad_accum = (int32_t)v;
        else if (IS("max-grad-norm")) o->max_grad_norm = v;
        else if (IS("weight-decay")) o->weight_decay = v;
        else if (IS("seed")) o->seed = (uint64_t)v;
        else if (IS("max-seq-len")) o->max_seq_len = (int32_t)v;
        else if (IS("checkpointing")) o->checkpointing = b;
        else if (IS("prefix-cache")) o->prefix_cache_mb = (int32_t)v;
        else if (IS("eval-every")) o->eval_every = (int64_t)v;
        else if (IS("eval-batch")) o->eval_batch = (int32_t)v;
        else if (IS("patience")) o->patience = (int32_t)v;
        else if (IS("save-every")) o->save_every = (int64_t)v;
        else if (IS("save-total-limit")) o->save_total_limit = (int32_t)v;
        else if (IS("output")) o->output_dir = s;
        else if (IS("overwrite")) o->overwrite = b;
        else if (IS("resume")) o->resume = s;
        else if (IS("threads")) o->threads = (int)v;
        else if (IS("bf16")) o->bf16 = b;
        else if (IS("memory-limit")) o->memory_limit_mb = v;
        else if (IS("max-nonfinite")) o->max_nonfinite = (int32_t)v;
        else if (IS("log-every")) o->log_every = (int64_t)v;
        else if (IS("plot")) o->plot = b;
#undef IS
    }
    if (o->val_path && o->val_split > 0) {
        cli_error(cmd, "--val and --val-split conflict: give a validation file or a split fraction, not both");
        return 2;
    }
    if (have_steps && !have_epochs) o->epochs = 0; /* --max-steps alone: the default epochs play no part */
    if (!(o->epochs > 0) && o->max_steps <= 0) {
        cli_error(cmd, "--epochs 0 trains nothing: give --epochs E > 0 or --max-steps N");
        return 2;
    }
    return 0;
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

int train_cli_parse(const char *cmd, int argc, char **argv, train_cli *tc) {
    memset(tc, 0, sizeof *tc);
    static struct option lopts[2 * N_DEFS + 3];
    char shorts[64] = ":";
    int nl = 0;
    for (int i = 0; i < N_DEFS; i++) {
        const opt_def *d = &k_defs[i];
        lopts[nl++] = (struct option){d->name, d->k == K_BOOL ? no_argument : required_argument, 0, 1000 + i};
        if (d->k == K_BOOL) {
            static char names[N_DEFS][40];
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
    cJSON *cli = cJSON_CreateObject();
    const char *config = NULL;
    optind = 1;
    opterr = 0;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
        int idx = -1;
        if (c >= 1000 && c < 1000 + N_DEFS) idx = c - 1000;
        else if (c >= O_NO && c < O_NO + N_DEFS) {
            cJSON_DeleteItemFromObjectCaseSensitive(cli, k_defs[c - O_NO].name);
            cJSON_AddBoolToObject(cli, k_defs[c - O_NO].name, 0);
            continue;
        } else if (c == O_CONFIG) {
            config = optarg;
            continue;
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
            for (int i = 0; i < N_DEFS; i++)
                if (k_defs[i].short_opt == c) idx = i;
        }
        if (idx < 0) continue;
        const opt_def *d = &k_defs[idx];
        cJSON_DeleteItemFromObjectCaseSensitive(cli, d->name);
        if (d->k == K_BOOL) cJSON_AddBoolToObject(cli, d->name, 1);
        else cJSON_AddStringToObject(cli, d->name, optarg);
    }
    if (rc == 0 && optind < argc) {
        cli_error(cmd, "unexpected argument '%s'", argv[optind]);
        rc = 2;
    }
    cJSON *file = NULL, *base = NULL;
    if (rc == 0 && config) rc = load_settings(cmd, config, "config file", &file);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(cli, "resume");
    if (rc == 0 && res && cJSON_IsString(res)) {
        char *ck = NULL;
        if (af_trainer_find_checkpoint(res->valuestring, &ck) != AF_OK) {
            rc = cli_fail(cmd, AF_ERR_NOT_FOUND);
        } else {
            char path[4096];
            snprintf(path, sizeof path, "%s/train_config.json", ck);
            FILE *f = fopen(path, "rb");
            if (f) {
                fclose(f);
                rc = load_settings(cmd, path, "checkpoint settings", &base);
            }
            free(ck);
        }
    }
    tc->merged = cJSON_CreateObject();
    if (rc == 0 && !(tc->merged && (!base || merge_into(tc->merged, base)) && (!file || merge_into(tc->merged, file)) &&
                     merge_into(tc->merged, cli))) {
        cli_error(cmd, "out of memory");
        rc = 1;
    }
    cJSON_Delete(cli);
    cJSON_Delete(file);
    cJSON_Delete(base);
    if (rc != 0) return rc;
    rc = to_opts(cmd, tc);
    if (rc == 0) rc = check_labels_spec(cmd, tc->opts.labels);
    if (rc != 0) return rc;
    cJSON *saved = cJSON_Duplicate(tc->merged, 1);
    if (saved) {
        cJSON_DeleteItemFromObjectCaseSensitive(saved, "resume");
        cJSON_DeleteItemFromObjectCaseSensitive(saved, "overwrite");
        tc->config_json = cJSON_Print(saved);
        cJSON_Delete(saved);
    }
    tc->opts.config_json = tc->config_json;
    return 0;
}

void train_cli_free(train_cli *tc) {
    cJSON_Delete(tc->merged);
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
