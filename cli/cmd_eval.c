/* afinar eval — accuracy, macro-F1, per-class precision/recall/F1/support, confusion matrix and
 * calibration (ECE) of a trained adapter on labelled JSONL data; text to stdout, JSON to a file.
 * With --generate N (causal-LM data): greedy generation scored by exact match and ROUGE-L
 * (cmd_eval_gen.c). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: afinar eval -m MODEL -a ADAPTER --data FILE.jsonl [options]\n"
           "       afinar eval --task causal-lm -m MODEL [-a ADAPTER] --data FILE.jsonl [--generate N] [options]\n"
           "\n"
           "model and data:\n"
           "  -m, --model PATH       GGUF file or Hugging Face checkpoint directory (with its tokenizer)\n"
           "  -a, --adapter DIR      adapter directory written by 'afinar train' (OUT/best, OUT/final, a\n"
           "                         checkpoint)\n"
           "      --data FILE        labelled data: JSONL ({\"text\": ..., \"label\": ...}), CSV or TSV (header)\n"
           "      --text-field NAME  field (or CSV/TSV column) with the text (default: the first of text,\n"
           "                         sentence, content, input)\n"
           "      --label-field NAME JSON field with the label(s) (default label / labels)\n"
           "      --batch N          samples per forward batch (default 16)\n"
           "      --json FILE        also write the metrics as JSON\n"
           CLI_COMPUTE_HELP
           "\n"
           "causal-LM data (--task causal-lm, implied by --generate; TRL formats as for 'afinar train --task\n"
           "causal-lm'; -a optional: the base model without it): loss, perplexity and mean token accuracy over\n"
           "every target token of the file (the trainer's eval_loss), then with --generate the generation scores\n"
           "      --task NAME        classification (default) | causal-lm\n"
           "      --max-seq-len N    causal-LM: truncate examples to N tokens (default 1024)\n"
           "      --loss-on MODE     causal-LM: auto (default: completion / assistant tokens) | all\n"
           "      --chat-template T  causal-LM: chatml | gemma | gemma4 instead of the model's own\n"
           "      --generate N       greedy generation for the first N prompts (0 = all; prompt/completion\n"
           "                         strings, or conversations scored on their last assistant turn), scored\n"
           "                         against the completions: exact match (outer whitespace trimmed, case\n"
           "                         kept) and ROUGE-L F (Lin 2004; rouge_score's tokenization: lowercase,\n"
           "                         [a-z0-9] runs, no stemming)\n"
           "      --max-new-tokens N tokens generated per prompt (default 64; stops at end-of-generation)\n"
           "      --first-line       score only the first non-empty line of each generation (generation stops\n"
           "                         there)\n"
           "      --show N           examples printed (default 3)\n"
           "      --lora-scale S     multiply the adapter's scale lora_alpha/r by S (default 1; 0 = base model)\n"
           "\n"
           "Ctrl-C / SIGTERM: stop after the current batch, print and write nothing, exit 130 / 143.\n");
}

/* The command line. */
typedef struct eval_opts {
    const char *model_path, *adapter, *data, *json_out, *text_field, *label_field;
    long batch;
    cli_compute cc;
    int lm;
    long max_seq_len;
    const char *loss_on, *chat_template;
    int first_line;
    long n_generate, max_new, show;
    double lora_scale;
    const char *lm_only; /* the first causal-LM-only flag given (refused without --generate) */
} eval_opts;

#define EV_GO_ON (-1) /* a step's return: continue */
#define EV_RETRY (-2) /* the device failed with --device auto: again on the CPU */

/* Parse the options into e. Returns EV_GO_ON, or the exit code (help printed, or a usage error). */
static int parse_opts(int argc, char **argv, eval_opts *e) {
    const char *C = "eval";
    memset(e, 0, sizeof *e);
    e->batch = 16;
    e->cc = (cli_compute)CLI_COMPUTE_INIT;
    e->max_seq_len = 1024;
    e->n_generate = -1, e->max_new = 64, e->show = 3;
    e->lora_scale = 1.0;
    enum { O_DATA = 1000, O_JSON, O_BATCH, O_TEXT, O_LABEL, O_GEN, O_MAXNEW, O_FIRST, O_SHOW, O_SCALE, O_TASK,
           O_MSL, O_LOSSON, O_TMPL };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"adapter", required_argument, 0, 'a'},
        {"data", required_argument, 0, O_DATA},      {"json", required_argument, 0, O_JSON},
        {"batch", required_argument, 0, O_BATCH},    {"text-field", required_argument, 0, O_TEXT},
        {"label-field", required_argument, 0, O_LABEL}, CLI_COMPUTE_OPTIONS,
        {"help", no_argument, 0, 'h'},
        {"generate", required_argument, 0, O_GEN},   {"max-new-tokens", required_argument, 0, O_MAXNEW},
        {"first-line", no_argument, 0, O_FIRST},     {"show", required_argument, 0, O_SHOW},
        {"lora-scale", required_argument, 0, O_SCALE}, {"task", required_argument, 0, O_TASK},
        {"max-seq-len", required_argument, 0, O_MSL}, {"loss-on", required_argument, 0, O_LOSSON},
        {"chat-template", required_argument, 0, O_TMPL},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:t:h", opts, NULL)) != -1) {
        const int co = cli_compute_opt(C, o, optarg, &e->cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': e->model_path = optarg; break;
        case 'a': e->adapter = optarg; break;
        case O_DATA: e->data = optarg; break;
        case O_JSON: e->json_out = optarg; break;
        case O_TEXT: e->text_field = optarg; break;
        case O_LABEL: e->label_field = optarg; break;
        case O_BATCH: if (!cli_parse_int(C, "--batch", optarg, 1, 1 << 20, &e->batch)) return 2; break;
        case O_GEN: if (!cli_parse_int(C, "--generate", optarg, 0, 1 << 30, &e->n_generate)) return 2; break;
        case O_MAXNEW:
            if (!cli_parse_int(C, "--max-new-tokens", optarg, 1, 1 << 16, &e->max_new)) return 2;
            if (!e->lm_only) e->lm_only = "--max-new-tokens";
            break;
        case O_FIRST: e->first_line = 1; if (!e->lm_only) e->lm_only = "--first-line"; break;
        case O_SHOW:
            if (!cli_parse_int(C, "--show", optarg, 0, 1 << 30, &e->show)) return 2;
            if (!e->lm_only) e->lm_only = "--show";
            break;
        case O_SCALE:
            if (!cli_parse_float(C, "--lora-scale", optarg, -100, 100, &e->lora_scale)) return 2;
            if (!e->lm_only) e->lm_only = "--lora-scale";
            break;
        case O_TASK:
            if (!strcmp(optarg, "causal-lm")) e->lm = 1;
            else if (!strcmp(optarg, "classification")) e->lm = 0;
            else {
                cli_error(C, "--task: unknown task '%s' (classification, causal-lm)", optarg);
                return 2;
            }
            break;
        case O_MSL:
            if (!cli_parse_int(C, "--max-seq-len", optarg, 1, 1 << 20, &e->max_seq_len)) return 2;
            if (!e->lm_only) e->lm_only = "--max-seq-len";
            break;
        case O_LOSSON: e->loss_on = optarg; if (!e->lm_only) e->lm_only = "--loss-on"; break;
        case O_TMPL: e->chat_template = optarg; if (!e->lm_only) e->lm_only = "--chat-template"; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar eval --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    return EV_GO_ON;
}

/* A classification evaluation: what a CPU fallback frees and builds again (besides the contexts). */
typedef struct cls_run {
    af_ctx *ctx, *dev_ctx; /* dev_ctx: --device auto that fell back to the CPU */
    af_classifier *c;
    af_corpus *corp;
    af_dataset *ds;
    float *probs;
} cls_run;

static void cls_free_data(cls_run *R) {
    free(R->probs), af_dataset_free(R->ds), af_corpus_free(R->corp), af_classifier_free(R->c);
    R->probs = NULL, R->ds = NULL, R->corp = NULL, R->c = NULL;
}

/* The classifier (model + adapter) loaded, the data read with its labels and tokenized, the
 * probabilities' buffer. EV_GO_ON, EV_RETRY (on the CPU) or the exit code. */
static int cls_load(const eval_opts *e, cls_run *R) {
    const char *C = "eval";
    af_status st = af_classifier_load(R->ctx, e->model_path, NULL, e->adapter, &R->c);
    if (st != AF_OK && cli_fallback_cpu(C, &R->ctx, &R->dev_ctx, st)) return EV_RETRY;
    if (st == AF_OK && af_classifier_note(R->c) && !R->dev_ctx)
        fprintf(stderr, "afinar %s: warning: %s\n", C, af_classifier_note(R->c));
    if (st != AF_OK) return cli_fail(C, st);
    const af_tokenizer *tok = af_model_tokenizer(af_classifier_model(R->c));
    if (!tok) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so text cannot be read", e->model_path,
                  tok_reason(af_classifier_model(R->c), e->model_path));
        return 1;
    }
    af_corpus_opts co;
    af_corpus_opts_init(&co);
    co.text_field = e->text_field;
    co.label_field = e->label_field;
    const char *const *names = af_classifier_label_names(R->c);
    const int32_t n_classes = af_classifier_num_classes(R->c);
    const int multi = af_classifier_multi_label(R->c);
    co.label_names = names;
    co.n_label_names = names ? n_classes : 0;
    co.num_classes = n_classes;
    st = af_corpus_read(e->data, &co, &R->corp);
    if (st != AF_OK) return cli_fail(C, st);
    if (af_corpus_multi_label(R->corp) != multi) {
        cli_error(C, "%s: the data are %s but the adapter is %s", e->data,
                  af_corpus_multi_label(R->corp) ? "multi-label" : "single-label", multi ? "multi-label" : "single-label");
        return 1;
    }
    st = af_dataset_build(R->ctx, R->corp, tok, af_classifier_max_seq_len(R->c), &R->ds);
    if (st != AF_OK) return cli_fail(C, st);
    R->probs = malloc(sizeof(float) * (size_t)af_dataset_size(R->ds) * (size_t)n_classes);
    if (!R->probs) {
        cli_error(C, "out of memory");
        return 1;
    }
    return EV_GO_ON;
}

/* The metrics of the probabilities (st: af_classifier_probs' status) on stdout and, with --json,
 * in that file (atomically). The exit code. */
static int cls_report(const eval_opts *e, const cls_run *R, af_status st) {
    const char *C = "eval";
    const char *const *names = af_classifier_label_names(R->c);
    af_metrics *m = NULL;
    char *js = NULL;
    int rc = 1;
    if (st == AF_OK) st = af_eval_metrics(R->ds, R->probs, &m);
    if (st != AF_OK) goto fail;
    printf("%s on %s (%d samples)\n", e->adapter, e->data, af_dataset_size(R->ds));
    af_metrics_print(m, names, stdout);
    if (e->json_out) {
        const char *extra[] = {"data", e->data, "adapter", e->adapter, NULL};
        if (af_metrics_json(m, names, extra, &js) != AF_OK) {
            cli_error(C, "out of memory");
            goto done;
        }
        st = af_write_file_atomic(e->json_out, js, strlen(js));
        if (st != AF_OK) goto fail;
    }
    rc = 0;
    goto done;
fail:
    rc = cli_fail(C, st);
done:
    free(js);
    af_metrics_free(m);
    return rc;
}

/* eval of a classifier adapter: probabilities of every sample, then the metrics; after a device
 * failure with --device auto, the same evaluation on the CPU. The exit code. */
static int eval_classifier(const eval_opts *e) {
    const char *C = "eval";
    /* a --json destination that cannot be written fails now, not after the evaluation; the file
     * itself is written atomically at the end (never half-written) */
    af_status st = e->json_out ? af_check_writable(e->json_out) : AF_OK;
    if (st != AF_OK) return cli_fail(C, st);
    cls_run R;
    memset(&R, 0, sizeof R);
    int rc = cli_compute_ctx(C, &e->cc, &R.ctx);
    if (rc) return rc;
    for (;;) {
        rc = cls_load(e, &R);
        if (rc == EV_RETRY) continue;
        if (rc != EV_GO_ON) break;
        /* SIGINT / SIGTERM from here on: stop after the current batch, print and write nothing, 130 / 143 */
        af_ctx_set_interrupt(R.ctx, cli_stop_flag());
        cli_graceful_stop(1);
        st = af_classifier_probs(R.c, R.ds, (int32_t)e->batch, R.probs);
        if (st != AF_OK && st != AF_ERR_INTERRUPTED && cli_fallback_cpu(C, &R.ctx, &R.dev_ctx, st)) {
            cls_free_data(&R); /* the same evaluation on the CPU */
            continue;
        }
        cli_graceful_stop(0);
        rc = st == AF_ERR_INTERRUPTED ? cli_stopped(C, af_last_error()) : cls_report(e, &R, st);
        break;
    }
    cls_free_data(&R);
    af_ctx_free(R.ctx);
    af_ctx_free(R.dev_ctx);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    const char *C = "eval";
    eval_opts e;
    int rc = parse_opts(argc, argv, &e);
    if (rc != EV_GO_ON) return rc;
    if (e.n_generate >= 0 || e.lm) {
        if (!e.model_path || !e.data) {
            cli_error(C, "missing %s", !e.model_path ? "-m MODEL (a GGUF file or HF directory)" : "--data FILE.jsonl");
            return 2;
        }
        if (e.text_field || e.label_field) {
            cli_error(C, "%s applies to classification data, not to causal-LM data",
                      e.text_field ? "--text-field" : "--label-field");
            return 2;
        }
        eval_gen_args g = {e.model_path, e.adapter, e.data, e.json_out, e.lora_scale, e.n_generate, e.max_new, e.show,
                           e.first_line, e.batch, e.max_seq_len, e.loss_on, e.chat_template, e.cc};
        return cmd_eval_generate(&g);
    }
    if (e.lm_only) {
        cli_error(C, "%s needs --task causal-lm or --generate N (causal-LM data)", e.lm_only);
        return 2;
    }
    if (!e.model_path || !e.adapter || !e.data) {
        cli_error(C, "missing %s", !e.model_path ? "-m MODEL (a GGUF file or HF directory)"
                                 : !e.adapter    ? "-a ADAPTER_DIR"
                                                 : "--data FILE.jsonl");
        return 2;
    }
    return eval_classifier(&e);
}
