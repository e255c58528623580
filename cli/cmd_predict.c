/* afinar predict — classify texts with a trained adapter: one JSON line per input,
 *   {"label": NAME, "label_id": ID, "probs": [...]}                      (single-label)
 *   {"labels": [NAMES], "label_ids": [IDS], "probs": [...]}              (multi-label: probs >= threshold)
 * Input: --data FILE.jsonl (alias -i/--input; text in --text-field, default "input"; "-" reads JSONL
 * from stdin), or, without --data, raw text lines from stdin (one sample per line; processed line by line when
 * stdin is a terminal, in chunks of 256 lines otherwise). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void) {
    printf("usage: afinar predict -m MODEL [-a ADAPTER] [--data FILE.jsonl] [options] [< lines.txt]\n"
           "\n"
           "model:\n"
           "  -m, --model PATH       GGUF file or Hugging Face checkpoint directory (with its tokenizer)\n"
           "  -a, --adapter PATH     adapter directory written by 'afinar train', or its LoRA GGUF ('afinar\n"
           "                         export'); without -a, MODEL must be a classifier merged by 'afinar merge'\n"
           "input:\n"
           "      --data FILE        JSONL input ('-' = JSONL on stdin); without it, stdin lines are raw texts\n"
           "                         (-i / --input FILE is the same)\n"
           "      --text-field NAME  field (or CSV/TSV column) with the text (default: the first of text,\n"
           "                         sentence, content, input)\n"
           "      --threshold P      multi-label decision threshold (default 0.5)\n"
           "      --batch N          samples per forward batch (default 16)\n"
           CLI_COMPUTE_HELP
           "Output: one JSON line per input on stdout: {\"label\", \"label_id\", \"probs\"} (multi-label:\n"
           "{\"labels\", \"label_ids\", \"probs\"}).\n"
           "Ctrl-C / SIGTERM: stop after the current batch (the lines printed are complete), exit 130 / 143.\n");
}

static int g_reported; /* the failure's message is already printed */

/* Classify every sample of a corpus and print the predictions. */
static af_status run_corpus(const af_ctx *ctx, af_classifier *c, const af_corpus *corp, int32_t batch, double thr) {
    af_dataset *ds = NULL;
    af_status st =
        af_dataset_build(ctx, corp, af_model_tokenizer(af_classifier_model(c)), af_classifier_max_seq_len(c), &ds);
    if (st != AF_OK) return st;
    const int32_t n = af_dataset_size(ds), n_classes = af_classifier_num_classes(c);
    float *probs = malloc(sizeof(float) * (size_t)n * (size_t)n_classes);
    st = probs ? af_classifier_probs(c, ds, batch, probs) : AF_ERR_NOMEM;
    for (int32_t i = 0; st == AF_OK && i < n; i++) {
        char *line = NULL;
        st = af_classifier_prediction_json(c, probs + (size_t)i * n_classes, thr, &line);
        if (st == AF_OK) puts(line);
        free(line);
        if (ferror(stdout)) break;
    }
    if (st == AF_OK && cli_stdout_failed("predict")) { /* /dev/full, a closed pipe: stop, exit 1 */
        st = AF_ERR_IO;
        g_reported = 1;
    }
    free(probs);
    af_dataset_free(ds);
    return st;
}

/* The longest raw text line read from stdin: a classifier reads at most its max_seq_len tokens, so
 * a longer line is a mistake (a binary file, a missing newline), never read whole into memory. */
#define MAX_RAW_LINE ((size_t)1 << 20)

/* One line of stdin into *line (grown up to MAX_RAW_LINE + 1 bytes), without its newline. Returns
 * the length, -1 at end of input, -2 when the line is longer than MAX_RAW_LINE (the rest of it is
 * not read), -3 out of memory. */
static ssize_t read_raw_line(char **line, size_t *cap) {
    size_t n = 0;
    int ch = EOF;
    while ((ch = getc(stdin)) != EOF && ch != '\n') {
        if (n >= MAX_RAW_LINE) return -2;
        if (n + 2 > *cap) {
            size_t nc = *cap ? 2 * *cap : 256;
            if (nc > MAX_RAW_LINE + 2) nc = MAX_RAW_LINE + 2;
            char *p = realloc(*line, nc);
            if (!p) return -3;
            *line = p, *cap = nc;
        }
        (*line)[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) return -1;
    if (!*line && !(*line = malloc(1))) return -3;
    if (!*cap) *cap = 1;
    (*line)[n] = 0;
    return (ssize_t)n;
}

static af_status run_stdin_lines(const af_ctx *ctx, af_classifier *c, int32_t batch, double thr) {
    const int32_t chunk = isatty(STDIN_FILENO) ? 1 : 256;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int32_t line_no = 1;
    af_status st = AF_OK;
    while (st == AF_OK && !cli_stop_signal()) {
        char **texts = calloc((size_t)chunk, sizeof(char *));
        size_t *lens = calloc((size_t)chunk, sizeof(size_t));
        if (!texts || !lens) {
            free(texts), free(lens);
            st = AF_ERR_NOMEM;
            break;
        }
        int32_t n = 0;
        while (n < chunk && (len = read_raw_line(&line, &cap)) != -1) {
            if (len < 0) {
                st = len == -2 ? AF_ERR_RANGE : AF_ERR_NOMEM;
                if (len == -2)
                    cli_error("predict", "<stdin>:%d: line longer than %zu bytes (the limit for a raw text line; "
                              "split the text or pass it as JSONL with --data)", line_no + n, MAX_RAW_LINE);
                else
                    cli_error("predict", "<stdin>:%d: out of memory", line_no + n);
                g_reported = 1;
                break;
            }
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            texts[n] = strdup(line);
            lens[n] = (size_t)len;
            if (!texts[n]) break;
            n++;
        }
        if (st != AF_OK || cli_stop_signal()) { /* a signal while reading: this chunk is not classified */
            for (int32_t i = 0; i < n; i++) free(texts[i]);
            free(texts), free(lens);
            break;
        }
        af_corpus *k = NULL;
        st = af_corpus_from_texts("<stdin>", (const char *const *)texts, lens, n, line_no, af_classifier_num_classes(c),
                                  &k);
        for (int32_t i = 0; i < n; i++) free(texts[i]);
        free(texts), free(lens);
        if (st != AF_OK) break;
        line_no += n;
        if (n > 0) st = run_corpus(ctx, c, k, batch, thr);
        af_corpus_free(k);
        if (n < chunk) break;
    }
    free(line);
    return st;
}

int cmd_predict(int argc, char **argv) {
    const char *C = "predict";
    const char *model_path = NULL, *adapter = NULL, *input = NULL, *text_field = NULL;
    long batch = 16;
    double thr = 0.5;
    cli_compute cc = CLI_COMPUTE_INIT;
    enum { O_TEXT = 1000, O_THR, O_BATCH };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"adapter", required_argument, 0, 'a'},
        {"data", required_argument, 0, 'i'},      {"input", required_argument, 0, 'i'},
        {"text-field", required_argument, 0, O_TEXT},
        {"threshold", required_argument, 0, O_THR}, {"batch", required_argument, 0, O_BATCH},
        CLI_COMPUTE_OPTIONS,                      {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:i:t:h", opts, NULL)) != -1) {
        const int co = cli_compute_opt(C, o, optarg, &cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'a': adapter = optarg; break;
        case 'i': input = optarg; break;
        case O_TEXT: text_field = optarg; break;
        case O_THR: if (!cli_parse_float(C, "--threshold", optarg, 1e-6, 1 - 1e-6, &thr)) return 2; break;
        case O_BATCH: if (!cli_parse_int(C, "--batch", optarg, 1, 1 << 20, &batch)) return 2; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar predict --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!model_path) {
        cli_error(C, "missing -m MODEL (a GGUF file or HF directory)");
        return 2;
    }
    if (!adapter) adapter = model_path; /* a merged classifier (afinar merge) carries its head */
    af_ctx *ctx = NULL;
    int mrc = cli_compute_ctx(C, &cc, &ctx);
    if (mrc) return mrc;
    af_classifier *c = NULL;
    af_corpus *corp = NULL;
    af_ctx *dev_ctx = NULL; /* --device auto that fell back to the CPU */
    af_status st = af_classifier_load(ctx, model_path, NULL, adapter, &c);
    if (st != AF_OK && cli_fallback_cpu(C, &ctx, &dev_ctx, st)) st = af_classifier_load(ctx, model_path, NULL, adapter, &c);
    if (st == AF_OK && af_classifier_note(c)) fprintf(stderr, "afinar %s: warning: %s\n", C, af_classifier_note(c));
    int rc = 0;
    /* SIGINT / SIGTERM from here on: stop after the current batch; the lines printed so far are
     * complete, nothing else is printed; exit 130 / 143 */
    af_ctx_set_interrupt(ctx, cli_stop_flag());
    cli_graceful_stop(1);
    if (st == AF_OK && !af_model_tokenizer(af_classifier_model(c))) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so text cannot be read", model_path,
                  tok_reason(af_classifier_model(c), model_path));
        rc = 1;
        goto done;
    }
    if (st == AF_OK && input) {
        af_corpus_opts co;
        af_corpus_opts_init(&co);
        co.text_field = text_field;
        co.labels_optional = 1;
        co.label_names = af_classifier_label_names(c);
        co.n_label_names = co.label_names ? af_classifier_num_classes(c) : 0;
        co.num_classes = af_classifier_num_classes(c);
        st = af_corpus_read(strcmp(input, "-") ? input : "/dev/stdin", &co, &corp);
        if (st == AF_OK) st = run_corpus(ctx, c, corp, (int32_t)batch, thr);
    } else if (st == AF_OK) {
        st = run_stdin_lines(ctx, c, (int32_t)batch, thr);
    }
    if (st == AF_ERR_INTERRUPTED || cli_stop_signal()) { /* a read cut by the signal (EINTR) too */
        cli_stdout_failed(C); /* the complete lines out first */
        rc = cli_stopped(C, st == AF_ERR_INTERRUPTED ? af_last_error() : NULL);
    } else if (st != AF_OK) rc = g_reported ? 1 : cli_fail(C, st);
done:
    af_corpus_free(corp);
    af_classifier_free(c);
    af_ctx_free(ctx);
    af_ctx_free(dev_ctx);
    return rc;
}
