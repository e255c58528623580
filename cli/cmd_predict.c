/* afinar predict — classify texts with a trained adapter: one JSON line per input,
 *   {"label": NAME, "label_id": ID, "probs": [...]}                      (single-label)
 *   {"labels": [NAMES], "label_ids": [IDS], "probs": [...]}              (multi-label: probs >= threshold)
 * Input: --input FILE.jsonl (text in --text-field, default "input"; "-" reads JSONL from stdin), or,
 * without --input, raw text lines from stdin (one sample per line; processed line by line when
 * stdin is a terminal, in chunks of 256 lines otherwise). */
#include "cli.h"

#include "formats/jsonl.h"
#include "train/trainer.h"

#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void) {
    printf("usage: afinar predict -m MODEL.gguf -a ADAPTER_DIR [--input FILE.jsonl] [options] [< lines.txt]\n"
           "\n"
           "  -m, --model FILE       GGUF base model (with its tokenizer)\n"
           "  -a, --adapter DIR      adapter directory written by 'afinar train'\n"
           "  -i, --input FILE       JSONL input ('-' = JSONL on stdin); without it, stdin lines are raw texts\n"
           "      --text-field NAME  JSON field with the text (default input)\n"
           "      --threshold P      multi-label decision threshold (default 0.5)\n"
           "      --batch N          samples per forward batch (default 16)\n"
           "      --bf16             bfloat16 operands, f32 accumulation in the large products (AVX512_BF16)\n"
           "  -t, --threads N        compute threads (default: all cores)\n"
           "Output: one JSON line per input on stdout: {\"label\", \"label_id\", \"probs\"} (multi-label:\n"
           "{\"labels\", \"label_ids\", \"probs\"}).\n");
}

static void print_pred(const af_classifier *c, const float *p, double thr) {
    cJSON *o = cJSON_CreateObject();
    const int32_t C = c->num_classes;
    char idbuf[32];
    if (c->multi_label) {
        cJSON *names = cJSON_AddArrayToObject(o, "labels"), *ids = cJSON_AddArrayToObject(o, "label_ids");
        for (int32_t k = 0; k < C; k++)
            if (p[k] >= thr) {
                snprintf(idbuf, sizeof idbuf, "%d", k);
                cJSON_AddItemToArray(names, cJSON_CreateString(c->label_names ? c->label_names[k] : idbuf));
                cJSON_AddItemToArray(ids, cJSON_CreateNumber(k));
            }
    } else {
        int32_t am = 0;
        for (int32_t k = 1; k < C; k++) am = p[k] > p[am] ? k : am;
        snprintf(idbuf, sizeof idbuf, "%d", am);
        cJSON_AddStringToObject(o, "label", c->label_names ? c->label_names[am] : idbuf);
        cJSON_AddNumberToObject(o, "label_id", am);
    }
    cJSON *pa = cJSON_AddArrayToObject(o, "probs");
    for (int32_t k = 0; k < C; k++) {
        char b[32];
        snprintf(b, sizeof b, "%.6g", (double)p[k]);
        cJSON_AddItemToArray(pa, cJSON_CreateNumber(strtod(b, NULL)));
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

/* Classify every sample of a corpus and print the predictions. */
static af_status run_corpus(af_classifier *c, const af_corpus *corp, int32_t batch, double thr) {
    af_dataset *ds = NULL;
    AF_TRY(af_dataset_build(c->ctx, corp, af_model_tokenizer(c->model), c->max_seq_len, &ds));
    float *probs = malloc(sizeof(float) * (size_t)ds->n * (size_t)c->num_classes);
    af_status st = probs ? af_classifier_probs(c, ds, batch, probs) : AF_ERR_NOMEM;
    for (int32_t i = 0; st == AF_OK && i < ds->n; i++) print_pred(c, probs + (size_t)i * c->num_classes, thr);
    fflush(stdout);
    free(probs);
    af_dataset_free(ds);
    return st;
}

/* A corpus of raw lines (owned arrays, freed by af_corpus_free). */
static af_corpus *lines_corpus(char **lines, size_t *lens, int32_t n, int32_t first_line, int32_t C) {
    af_corpus *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->path = strdup("<stdin>");
    k->n = n;
    k->texts = lines;
    k->text_len = lens;
    k->line_no = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    k->labels = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    k->num_classes = C;
    if (!k->path || !k->line_no || !k->labels) {
        af_corpus_free(k);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) k->line_no[i] = first_line + i, k->labels[i] = -1;
    return k;
}

static af_status run_stdin_lines(af_classifier *c, int32_t batch, double thr) {
    const int32_t chunk = isatty(STDIN_FILENO) ? 1 : 256;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int32_t line_no = 1;
    af_status st = AF_OK;
    while (st == AF_OK) {
        char **texts = calloc((size_t)chunk, sizeof(char *));
        size_t *lens = calloc((size_t)chunk, sizeof(size_t));
        if (!texts || !lens) {
            free(texts), free(lens);
            return af_fail(AF_ERR_NOMEM, "out of memory");
        }
        int32_t n = 0;
        while (n < chunk && (len = getline(&line, &cap, stdin)) >= 0) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            texts[n] = strdup(line);
            lens[n] = (size_t)len;
            if (!texts[n]) break;
            n++;
        }
        af_corpus *k = lines_corpus(texts, lens, n, line_no, c->num_classes);
        if (!k) {
            for (int32_t i = 0; i < n; i++) free(texts[i]);
            free(texts), free(lens);
            st = af_fail(AF_ERR_NOMEM, "out of memory");
            break;
        }
        line_no += n;
        if (n > 0) st = run_corpus(c, k, batch, thr);
        af_corpus_free(k);
        if (n < chunk) break;
    }
    free(line);
    return st;
}

int cmd_predict(int argc, char **argv) {
    const char *C = "predict";
    const char *model_path = NULL, *adapter = NULL, *input = NULL, *text_field = NULL;
    long batch = 16, threads = 0;
    double thr = 0.5;
    enum { O_TEXT = 1000, O_THR, O_BATCH, O_BF16 };
    int bf16 = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"adapter", required_argument, 0, 'a'},
        {"input", required_argument, 0, 'i'},     {"text-field", required_argument, 0, O_TEXT},
        {"threshold", required_argument, 0, O_THR}, {"batch", required_argument, 0, O_BATCH},
        {"threads", required_argument, 0, 't'},   {"help", no_argument, 0, 'h'}, {"bf16", no_argument, 0, O_BF16},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:i:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'a': adapter = optarg; break;
        case 'i': input = optarg; break;
        case O_TEXT: text_field = optarg; break;
        case O_THR: if (!cli_parse_float(C, "--threshold", optarg, 1e-6, 1 - 1e-6, &thr)) return 2; break;
        case O_BATCH: if (!cli_parse_int(C, "--batch", optarg, 1, 1 << 20, &batch)) return 2; break;
        case 't': if (!cli_parse_int(C, "--threads", optarg, 0, 1024, &threads)) return 2; break;
        case O_BF16: bf16 = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar predict --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!model_path || !adapter) {
        cli_error(C, "missing %s", !model_path ? "-m MODEL.gguf" : "-a ADAPTER_DIR");
        return 2;
    }
    af_ctx *ctx = NULL;
    if (!cli_make_ctx(C, threads, NULL, bf16, 0, &ctx)) return 2;
    af_classifier *c = NULL;
    af_corpus *corp = NULL;
    af_status st = af_classifier_load(ctx, model_path, NULL, adapter, &c);
    int rc = 0;
    if (st == AF_OK && !af_model_tokenizer(c->model)) {
        cli_error(C, "%s: the model has no usable tokenizer, so text cannot be read", model_path);
        rc = 1;
        goto done;
    }
    if (st == AF_OK && input) {
        af_corpus_opts co;
        af_corpus_opts_init(&co);
        co.text_field = text_field;
        co.labels_optional = 1;
        co.label_names = (const char *const *)c->label_names;
        co.n_label_names = c->label_names ? c->num_classes : 0;
        co.num_classes = c->num_classes;
        st = af_corpus_read(strcmp(input, "-") ? input : "/dev/stdin", &co, &corp);
        if (st == AF_OK) st = run_corpus(c, corp, (int32_t)batch, thr);
    } else if (st == AF_OK) {
        st = run_stdin_lines(c, (int32_t)batch, thr);
    }
    if (st != AF_OK) rc = cli_fail(C, st);
done:
    af_corpus_free(corp);
    af_classifier_free(c);
    af_ctx_free(ctx);
    return rc;
}
