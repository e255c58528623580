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

int cmd_eval(int argc, char **argv) {
    const char *C = "eval";
    const char *model_path = NULL, *adapter = NULL, *data = NULL, *json_out = NULL, *text_field = NULL,
               *label_field = NULL;
    long batch = 16;
    cli_compute cc = CLI_COMPUTE_INIT;
    enum { O_DATA = 1000, O_JSON, O_BATCH, O_TEXT, O_LABEL, O_GEN, O_MAXNEW, O_FIRST, O_SHOW, O_SCALE, O_TASK,
           O_MSL, O_LOSSON, O_TMPL };
    int lm = 0;
    long max_seq_len = 1024;
    const char *loss_on = NULL, *chat_template = NULL;
    int first_line = 0;
    long n_generate = -1, max_new = 64, show = 3;
    double lora_scale = 1.0;
    const char *lm_only = NULL; /* the first causal-LM-only flag given (refused without --generate) */
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
        const int co = cli_compute_opt(C, o, optarg, &cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'a': adapter = optarg; break;
        case O_DATA: data = optarg; break;
        case O_JSON: json_out = optarg; break;
        case O_TEXT: text_field = optarg; break;
        case O_LABEL: label_field = optarg; break;
        case O_BATCH: if (!cli_parse_int(C, "--batch", optarg, 1, 1 << 20, &batch)) return 2; break;
        case O_GEN: if (!cli_parse_int(C, "--generate", optarg, 0, 1 << 30, &n_generate)) return 2; break;
        case O_MAXNEW:
            if (!cli_parse_int(C, "--max-new-tokens", optarg, 1, 1 << 16, &max_new)) return 2;
            if (!lm_only) lm_only = "--max-new-tokens";
            break;
        case O_FIRST: first_line = 1; if (!lm_only) lm_only = "--first-line"; break;
        case O_SHOW:
            if (!cli_parse_int(C, "--show", optarg, 0, 1 << 30, &show)) return 2;
            if (!lm_only) lm_only = "--show";
            break;
        case O_SCALE:
            if (!cli_parse_float(C, "--lora-scale", optarg, -100, 100, &lora_scale)) return 2;
            if (!lm_only) lm_only = "--lora-scale";
            break;
        case O_TASK:
            if (!strcmp(optarg, "causal-lm")) lm = 1;
            else if (!strcmp(optarg, "classification")) lm = 0;
            else {
                cli_error(C, "--task: unknown task '%s' (classification, causal-lm)", optarg);
                return 2;
            }
            break;
        case O_MSL:
            if (!cli_parse_int(C, "--max-seq-len", optarg, 1, 1 << 20, &max_seq_len)) return 2;
            if (!lm_only) lm_only = "--max-seq-len";
            break;
        case O_LOSSON: loss_on = optarg; if (!lm_only) lm_only = "--loss-on"; break;
        case O_TMPL: chat_template = optarg; if (!lm_only) lm_only = "--chat-template"; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar eval --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (n_generate >= 0 || lm) {
        if (!model_path || !data) {
            cli_error(C, "missing %s", !model_path ? "-m MODEL (a GGUF file or HF directory)" : "--data FILE.jsonl");
            return 2;
        }
        if (text_field || label_field) {
            cli_error(C, "%s applies to classification data, not to causal-LM data", text_field ? "--text-field" : "--label-field");
            return 2;
        }
        eval_gen_args g = {model_path, adapter, data, json_out, lora_scale, n_generate, max_new, show,
                           first_line, batch, max_seq_len, loss_on, chat_template, cc};
        return cmd_eval_generate(&g);
    }
    if (lm_only) {
        cli_error(C, "%s needs --task causal-lm or --generate N (causal-LM data)", lm_only);
        return 2;
    }
    if (!model_path || !adapter || !data) {
        cli_error(C, "missing %s", !model_path ? "-m MODEL (a GGUF file or HF directory)" : !adapter ? "-a ADAPTER_DIR" : "--data FILE.jsonl");
        return 2;
    }
    int rc = 1;
    /* a --json destination that cannot be written fails now, not after the evaluation; the file
     * itself is written atomically at the end (never half-written) */
    af_status st = json_out ? af_check_writable(json_out) : AF_OK;
    if (st != AF_OK) return cli_fail(C, st);
    af_ctx *ctx = NULL;
    int mrc = cli_compute_ctx(C, &cc, &ctx);
    if (mrc) return mrc;
    af_classifier *c = NULL;
    af_corpus *corp = NULL;
    af_dataset *ds = NULL;
    float *probs = NULL;
    af_metrics *m = NULL;
    char *js = NULL;
    af_ctx *dev_ctx = NULL; /* --device auto that fell back to the CPU */
retry:
    st = af_classifier_load(ctx, model_path, NULL, adapter, &c);
    if (st != AF_OK && cli_fallback_cpu(C, &ctx, &dev_ctx, st)) goto retry;
    if (st == AF_OK && af_classifier_note(c) && !dev_ctx) fprintf(stderr, "afinar %s: warning: %s\n", C, af_classifier_note(c));
    if (st != AF_OK) goto fail;
    const af_tokenizer *tok = af_model_tokenizer(af_classifier_model(c));
    if (!tok) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so text cannot be read", model_path,
                  tok_reason(af_classifier_model(c), model_path));
        goto done;
    }
    af_corpus_opts co;
    af_corpus_opts_init(&co);
    co.text_field = text_field;
    co.label_field = label_field;
    const char *const *names = af_classifier_label_names(c);
    const int32_t n_classes = af_classifier_num_classes(c);
    const int multi = af_classifier_multi_label(c);
    co.label_names = names;
    co.n_label_names = names ? n_classes : 0;
    co.num_classes = n_classes;
    st = af_corpus_read(data, &co, &corp);
    if (st != AF_OK) goto fail;
    if (af_corpus_multi_label(corp) != multi) {
        cli_error(C, "%s: the data are %s but the adapter is %s", data,
                  af_corpus_multi_label(corp) ? "multi-label" : "single-label", multi ? "multi-label" : "single-label");
        goto done;
    }
    st = af_dataset_build(ctx, corp, tok, af_classifier_max_seq_len(c), &ds);
    if (st != AF_OK) goto fail;
    probs = malloc(sizeof(float) * (size_t)af_dataset_size(ds) * (size_t)n_classes);
    if (!probs) {
        cli_error(C, "out of memory");
        goto done;
    }
    /* SIGINT / SIGTERM from here on: stop after the current batch, print and write nothing, 130 / 143 */
    af_ctx_set_interrupt(ctx, cli_stop_flag());
    cli_graceful_stop(1);
    st = af_classifier_probs(c, ds, (int32_t)batch, probs);
    if (st != AF_OK && st != AF_ERR_INTERRUPTED && cli_fallback_cpu(C, &ctx, &dev_ctx, st)) {
        /* the same evaluation on the CPU */
        free(probs), af_dataset_free(ds), af_corpus_free(corp), af_classifier_free(c);
        probs = NULL, ds = NULL, corp = NULL, c = NULL;
        goto retry;
    }
    cli_graceful_stop(0);
    if (st == AF_ERR_INTERRUPTED) {
        rc = cli_stopped(C, af_last_error());
        goto done;
    }
    if (st == AF_OK) st = af_eval_metrics(ds, probs, &m);
    if (st != AF_OK) goto fail;
    printf("%s on %s (%d samples)\n", adapter, data, af_dataset_size(ds));
    af_metrics_print(m, names, stdout);
    if (json_out) {
        const char *extra[] = {"data", data, "adapter", adapter, NULL};
        if (af_metrics_json(m, names, extra, &js) != AF_OK) {
            cli_error(C, "out of memory");
            goto done;
        }
        st = af_write_file_atomic(json_out, js, strlen(js));
        if (st != AF_OK) goto fail;
    }
    rc = 0;
    goto done;
fail:
    rc = cli_fail(C, st);
done:
    free(js);
    af_metrics_free(m);
    free(probs);
    af_dataset_free(ds);
    af_corpus_free(corp);
    af_classifier_free(c);
    af_ctx_free(ctx);
    af_ctx_free(dev_ctx);
    return rc;
}
