/* afinar eval on causal-LM data: greedy generation for the first N prompts of a {"prompt",
 * "completion"} JSONL file (the adapter applied unmerged) scored against the completions with
 * exact match and ROUGE-L (af_gen_eval_run), a few examples printed, JSON on request. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Prints `s` on one line, newlines shown as "\n", cut after `max` bytes (on a UTF-8 boundary). */
static void print_oneline(const char *s, size_t max) {
    size_t n = strlen(s), k = 0;
    if (n > max) {
        k = max;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        n = k;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') fputs("\\n", stdout);
        else if (s[i] == '\r' || s[i] == '\t') fputc(' ', stdout);
        else fputc(s[i], stdout);
    }
    if (n < strlen(s)) fputs(" [...]", stdout);
}

/* The loss figures as text, for the JSON of both kinds of evaluation. */
typedef struct loss_text {
    char loss[32], ppl[32], acc[32], targets[32];
} loss_text;

/* Loss, perplexity and token accuracy over every target token of the file (the trainer's
 * eval_loss) into *lr; *ds: the file as read (caller frees). From here on SIGINT / SIGTERM stop
 * after the current batch (prompt). Errors: those of af_lm_dataset_read and af_lm_evaluate. */
static af_status eval_loss(af_ctx *ctx, const af_model *model, const eval_gen_args *a, af_dataset **ds,
                           af_lm_eval_result *lr) {
    af_lm_data_opts lo;
    af_lm_data_opts_init(&lo);
    lo.max_seq_len = (int32_t)a->max_seq_len;
    lo.loss_on = a->loss_on;
    lo.chat_template = a->chat_template;
    af_status st = af_lm_dataset_read(ctx, a->data, model, &lo, ds);
    /* SIGINT / SIGTERM from here on: stop after the current batch (prompt), print and write nothing
     * more, 130 / 143 */
    af_ctx_set_interrupt(ctx, cli_stop_flag());
    cli_graceful_stop(1);
    if (st == AF_OK) st = af_lm_evaluate(ctx, model, a->adapter, (float)a->lora_scale, *ds, (int32_t)a->batch, lr);
    return st;
}

/* The loss block on stdout; its figures as text into t. */
static void print_loss(const eval_gen_args *a, const af_lm_eval_result *lr, loss_text *t) {
    printf("%s on %s: %d examples, %lld target tokens (max_seq_len %ld)\n", a->adapter ? a->adapter : "base model",
           a->data, lr->n_examples, (long long)lr->n_targets, a->max_seq_len);
    printf("loss           %.4f  (mean cross-entropy per target token, nats)\n", lr->loss);
    printf("perplexity     %.4g\n", lr->perplexity);
    printf("token accuracy %.4f  (mean_token_accuracy: argmax = target)\n", lr->mean_token_accuracy);
    snprintf(t->loss, sizeof t->loss, "%.6f", lr->loss);
    snprintf(t->ppl, sizeof t->ppl, "%.6g", lr->perplexity);
    snprintf(t->acc, sizeof t->acc, "%.6f", lr->mean_token_accuracy);
    snprintf(t->targets, sizeof t->targets, "%lld", (long long)lr->n_targets);
}

/* --json without --generate: the loss figures (atomically). Errors: AF_ERR_NOMEM, those of
 * af_write_file_atomic. */
static af_status write_loss_json(const eval_gen_args *a, const af_lm_eval_result *lr, const loss_text *t) {
    char *js = NULL;
    /* numbers only: no path to escape */
    if (asprintf(&js, "{\"loss\": %s, \"perplexity\": %s, \"mean_token_accuracy\": %s, "
                      "\"num_target_tokens\": %s, \"examples\": %d, \"adapter\": %s}\n",
                 t->loss, t->ppl, t->acc, t->targets, lr->n_examples, a->adapter ? "true" : "false") < 0)
        return AF_ERR_NOMEM;
    af_status st = af_write_file_atomic(a->json_out, js, strlen(js));
    free(js);
    return st;
}

/* The generation scores and the first examples on stdout. */
static void print_generation(const eval_gen_args *a, const af_gen_eval_result *r) {
    printf("%s on %s: greedy generation for the first %d prompts (max %ld new tokens, %s scored)\n",
           a->adapter ? a->adapter : "base model", a->data, r->n, a->max_new_tokens,
           a->first_line ? "first line" : "whole generation");
    if (a->adapter) printf("adapter %s applied unmerged, scale %g x lora_alpha/r\n", a->adapter, a->lora_scale);
    int n_exact = 0;
    for (int32_t i = 0; i < r->n; i++) n_exact += r->ex[i].exact;
    printf("exact match    %.4f  (%d/%d; outer whitespace trimmed, case kept)\n", r->exact_match, n_exact, r->n);
    printf("ROUGE-L F      %.4f  (P %.4f, R %.4f; mean over examples; rouge_score tokenization, no stemming)\n",
           r->rouge_l_f, r->rouge_l_precision, r->rouge_l_recall);
    double tg = r->prompt_seconds + r->decode_seconds;
    printf("tokens         prompt %lld, generated %lld; %.1f s (prompt %.1f tok/s, decode %.1f tok/s)\n",
           (long long)r->prompt_tokens, (long long)r->new_tokens, tg,
           r->prompt_seconds > 0 ? (double)r->prompt_tokens / r->prompt_seconds : 0.0,
           r->decode_seconds > 0 ? (double)r->new_tokens / r->decode_seconds : 0.0);
    int show = (int)(a->show < r->n ? a->show : r->n);
    if (show > 0) printf("examples (first %d):\n", show);
    for (int i = 0; i < show; i++) {
        const af_gen_example *e = &r->ex[i];
        printf("  [line %d] reference: ", e->line);
        print_oneline(e->reference, 200);
        printf("\n            generated: ");
        print_oneline(e->prediction, 200);
        printf("\n            exact %d, ROUGE-L F %.3f\n", e->exact, e->rouge_l.fmeasure);
    }
}

/* --generate: greedy generation for the first prompts in a session (*sess, with the adapter;
 * caller frees) scored into *r (caller frees), printed, and with --json written with the loss
 * figures t. Errors: those of the session, af_gen_eval_run, af_gen_eval_json, af_write_file_atomic. */
static af_status eval_generation(const eval_gen_args *a, const af_model *model, const loss_text *t,
                                 af_session **sess, af_gen_eval_result *r) {
    af_status st = af_session_new(model, 0, sess);
    if (st == AF_OK && a->adapter) st = af_session_load_adapter(*sess, a->adapter, (float)a->lora_scale);
    if (st != AF_OK) return st;
    af_gen_eval_opts o;
    af_gen_eval_opts_init(&o);
    o.max_examples = (int32_t)a->n_generate;
    o.max_new_tokens = (int32_t)a->max_new_tokens;
    o.first_line = a->first_line;
    o.chat_template = a->chat_template;
    o.log = isatty(fileno(stderr)) ? stderr : NULL; /* "\r" progress only on a terminal */
    st = af_gen_eval_run(*sess, a->data, &o, r);
    if (st != AF_OK) return st;
    print_generation(a, r);
    if (!a->json_out) return AF_OK;
    char nbuf[32], sbuf[32], *js = NULL;
    snprintf(nbuf, sizeof nbuf, "%ld", a->max_new_tokens);
    snprintf(sbuf, sizeof sbuf, "%g", a->lora_scale);
    const char *extra[] = {"data", a->data, "adapter", a->adapter ? a->adapter : "", "max_new_tokens", nbuf,
                           "lora_scale", sbuf, "scored", a->first_line ? "first_line" : "whole",
                           "loss", t->loss, "perplexity", t->ppl, "mean_token_accuracy", t->acc,
                           "num_target_tokens", t->targets, NULL};
    st = af_gen_eval_json(r, extra, &js);
    if (st == AF_OK) st = af_write_file_atomic(a->json_out, js, strlen(js));
    free(js);
    return st;
}

int cmd_eval_generate(const eval_gen_args *a) {
    const char *C = "eval";
    af_status st = a->json_out ? af_check_writable(a->json_out) : AF_OK;
    if (st != AF_OK) return cli_fail(C, st);
    af_ctx *ctx = NULL;
    int mrc = cli_compute_ctx(C, &a->cc, &ctx);
    if (mrc) return mrc;
    af_model *model = NULL;
    af_session *sess = NULL;
    af_dataset *ds = NULL;
    af_gen_eval_result r;
    memset(&r, 0, sizeof r);
    af_lm_eval_result lr;
    memset(&lr, 0, sizeof lr);
    loss_text t;
    st = af_model_load(ctx, a->model, &model);
    if (st == AF_OK) st = eval_loss(ctx, model, a, &ds, &lr);
    if (st == AF_OK) {
        print_loss(a, &lr, &t);
        if (a->n_generate >= 0) st = eval_generation(a, model, &t, &sess, &r);
        else if (a->json_out) st = write_loss_json(a, &lr, &t);
    }
    const int rc = st == AF_OK ? 0 : st == AF_ERR_INTERRUPTED ? cli_stopped(C, af_last_error()) : cli_fail(C, st);
    af_gen_eval_result_free(&r);
    af_dataset_free(ds);
    af_session_free(sess);
    af_model_free(model);
    af_ctx_free(ctx);
    return rc;
}
