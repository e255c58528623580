/*
 * gen_eval.c — generation-based evaluation of causal-LM data: read {"prompt", "completion"} JSONL
 * examples, generate greedily from each prompt through a session (adapter applied unmerged, as the
 * session holds it) and score the generation against the completion with exact match and ROUGE-L
 * (text_metrics.c). Contracts: include/afinar_app.h (af_gen_eval_*).
 *
 * Prompt rendering for plain prompt/completion data is the one of training (TRL's SFTTrainer
 * tokenizes the prompt alone for the prompt part: prompt ids = tokenizer(prompt), the completion
 * follows): af_tokenize(prompt, add_special = 1, parse_special = 0). Conversations (single- or
 * multi-turn) are parsed by the causal-LM reader (formats/lm_jsonl.c) and their prompt rendered by
 * the training renderer (tokenizer/chat.c af_chat_render) with the generation prompt; the last
 * assistant turn is the reference.
 */
#include "afinar_app.h"
#include "infer/session.h"
#include "model/model.h"

#include "formats/lm_jsonl.h"
#include "tokenizer/tokenizer.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void af_gen_eval_opts_init(af_gen_eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 64;
}

void af_gen_eval_result_free(af_gen_eval_result *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n; i++) {
        af_gen_example *e = &r->ex[i];
        free(e->prompt);
        free(e->reference);
        free(e->generated);
        free(e->prediction);
    }
    free(r->ex);
    memset(r, 0, sizeof *r);
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* The prompt and the reference of one example parsed by the causal-LM reader (formats/lm_jsonl.c:
 * one parser for training, evaluation and generation scoring). Plain prompt/completion: both as
 * read. Conversations (messages, or prompt/completion message lists): the reference is the last
 * assistant turn, the prompt every message before it rendered with the model's chat template and
 * the generation prompt (af_chat_render, the renderer of training) as text without BOS. */
static af_status from_example(const af_tokenizer *tok, const char *tmpl, const char *path, const af_lm_example *x,
                              af_gen_example *e) {
    e->line = x->line_no;
    if (x->format == AF_LM_TEXT)
        return af_fail(AF_ERR_FORMAT, "%s:%d: field 'text': plain text has no reference to score; generation scoring "
                       "reads {\"prompt\", \"completion\"} or conversations", path, x->line_no);
    if (x->format == AF_LM_PROMPT_COMPLETION) {
        e->prompt = dup_n(x->text, x->text_len);
        e->reference = dup_n(x->completion, x->completion_len);
        return e->prompt && e->reference ? AF_OK : af_fail(AF_ERR_NOMEM, "%s:%d: out of memory", path, x->line_no);
    }
    const char *field = x->format == AF_LM_MESSAGES ? "messages" : "completion";
    int32_t k = x->n_msgs - 1;
    if (x->msgs[k].role != AF_ROLE_ASSISTANT)
        return af_fail(AF_ERR_FORMAT, "%s:%d: field '%s': the last message is a %s turn; generation scoring needs the "
                       "conversation to end with the assistant turn it scores", path, x->line_no, field,
                       af_chat_role_name(x->msgs[k].role));
    int32_t u = 0;
    while (u < k && x->msgs[u].role != AF_ROLE_USER) u++;
    if (u == k)
        return af_fail(AF_ERR_FORMAT, "%s:%d: field '%s': the scored assistant turn has no user turn before it", path,
                       x->line_no, x->format == AF_LM_MESSAGES ? "messages" : "prompt");
    af_chat_family fam;
    af_status st = af_chat_family_of(tok, tmpl, &fam);
    if (st == AF_OK) st = af_chat_prompt_text(tok, fam, x->msgs, k, &e->prompt);
    if (st != AF_OK) { /* af_last_error's buffer is rewritten by af_fail: copy the message first */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        return af_fail(st, "%s:%d: %s", path, x->line_no, msg);
    }
    e->chat = 1;
    e->reference = dup_n(x->msgs[k].content, x->msgs[k].len);
    return e->reference ? AF_OK : af_fail(AF_ERR_NOMEM, "%s:%d: out of memory", path, x->line_no);
}

/* The first max_n examples (<= 0: all) of the file into r->ex / r->n; the whole file is parsed
 * (its errors are the reader's, with FILE:LINE and the field). */
static af_status read_examples(const af_tokenizer *tok, const char *tmpl, const char *path, int32_t max_n,
                               af_gen_eval_result *r) {
    af_lm_corpus *c = NULL;
    AF_TRY(af_lm_corpus_read(path, 0, &c));
    int32_t n = max_n > 0 && max_n < c->n ? max_n : c->n;
    af_status st = AF_OK;
    r->ex = calloc((size_t)n, sizeof *r->ex);
    if (!r->ex) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    for (int32_t i = 0; st == AF_OK && i < n; i++) {
        r->n++; /* counted before filling so a half-filled example is freed with the result */
        st = from_example(tok, tmpl, path, &c->ex[i], &r->ex[i]);
    }
    af_lm_corpus_free(c);
    return st;
}

/* The scored text: the whole generation, or its first non-empty line. Owned copy. */
static char *scored_text(const char *gen, int first_line) {
    if (!first_line) return strdup(gen);
    const char *p = gen;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == '\v' || *p == '\f') p++;
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    return strndup(p, n);
}

/* Greedy continuation of prompt ids[0..n_ids) in `s` (reset first): the generated ids in gen
 * [max_new] (the end-of-generation token included when reached), their number in *n_gen. */
static af_status generate(af_session *s, const af_tokenizer *tok, int32_t vocab, const int32_t *ids, int32_t n_ids,
                          int32_t max_new, int first_line, float *logits, int32_t *gen, int32_t *n_gen,
                          double *t_prompt, double *t_decode) {
    af_session_reset(s);
    *n_gen = 0;
    double t0 = now_sec();
    af_status st = af_session_eval(s, ids, n_ids, logits, NULL);
    *t_prompt += now_sec() - t0;
    if (st != AF_OK) return st;
    const af_sampling greedy = {0.0f, 0, 1.0f, 0};
    uint64_t rng = af_rng_seed(0);
    t0 = now_sec();
    int seen_text = 0; /* first_line: a non-whitespace byte was generated (the line has started) */
    while (*n_gen < max_new) {
        if (af_ctx_interrupted(af_session_model(s)->ctx)) {
            st = af_fail(AF_ERR_INTERRUPTED, "stopped while generating");
            break;
        }
        int32_t id = af_sample(logits, vocab, &greedy, &rng);
        gen[(*n_gen)++] = id;
        if (af_token_is_eog(tok, id) || *n_gen == max_new) break;
        if (first_line) { /* the scored line is complete once a newline follows text: stop there */
            char piece[256];
            int len = af_token_to_bytes(tok, id, 0, piece, sizeof piece);
            int done = 0;
            for (int k = 0; k < len && k < (int)sizeof piece && !done; k++) {
                char c = piece[k];
                if (c == '\n' && seen_text) done = 1;
                else if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') seen_text = 1;
            }
            if (done) break;
        }
        st = af_session_eval(s, &id, 1, logits, NULL);
        if (st != AF_OK) break;
    }
    *t_decode += now_sec() - t0;
    return st;
}

af_status af_gen_eval_run(af_session *s, const char *data_path, const af_gen_eval_opts *opts, af_gen_eval_result *out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_gen_eval_run: NULL result");
    memset(out, 0, sizeof *out);
    if (!s || !data_path) return af_fail(AF_ERR_INVALID_ARG, "af_gen_eval_run: NULL argument");
    af_gen_eval_opts def;
    if (!opts) {
        af_gen_eval_opts_init(&def);
        opts = &def;
    }
    const int32_t max_new = opts->max_new_tokens > 0 ? opts->max_new_tokens : 64;
    const af_model *m = af_session_model(s);
    const af_tokenizer *tok = af_model_tokenizer(m);
    if (!tok) return af_fail(AF_ERR_UNSUPPORTED, "af_gen_eval_run: the model has no usable tokenizer");
    const int32_t vocab = af_model_get_config(m)->vocab_size;
    const int64_t n_ctx = af_session_n_ctx(s);
    af_status st = read_examples(tok, opts->chat_template, data_path, opts->max_examples, out);
    if (st != AF_OK) return st;
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)max_new);
    if (!logits || !gen) {
        st = af_fail(AF_ERR_NOMEM, "af_gen_eval_run: out of memory");
        goto done;
    }
    double sum_em = 0, sum_p = 0, sum_r = 0, sum_f = 0;
    for (int32_t i = 0; i < out->n && st == AF_OK; i++) {
        af_gen_example *e = &out->ex[i];
        if (af_ctx_interrupted(m->ctx)) { /* a signal: stop between prompts, no result */
            st = af_fail(AF_ERR_INTERRUPTED, "stopped after %d of %d prompts", (int)i, (int)out->n);
            break;
        }
        int32_t *ids = NULL;
        size_t n_ids = 0;
        /* plain prompts: as training tokenizes text (special-token texts stay text); rendered
         * conversations: the template's special tokens are tokens */
        st = af_tokenize(tok, e->prompt, strlen(e->prompt), 1, e->chat, &ids, &n_ids);
        if (st != AF_OK) break;
        if (n_ids == 0) {
            free(ids);
            st = af_fail(AF_ERR_FORMAT, "%s:%d: field 'prompt': empty after tokenization", data_path, e->line);
            break;
        }
        if ((int64_t)n_ids + max_new > n_ctx) {
            free(ids);
            st = af_fail(AF_ERR_RANGE, "%s:%d: field 'prompt': %zu tokens + %d new tokens exceed the session's %lld positions",
                         data_path, e->line, n_ids, max_new, (long long)n_ctx);
            break;
        }
        int32_t n_gen = 0;
        st = generate(s, tok, vocab, ids, (int32_t)n_ids, max_new, opts->first_line, logits, gen, &n_gen, &out->prompt_seconds,
                      &out->decode_seconds);
        free(ids);
        if (st != AF_OK) break;
        e->prompt_tokens = (int32_t)n_ids;
        e->new_tokens = n_gen;
        out->prompt_tokens += (int64_t)n_ids;
        out->new_tokens += n_gen;
        int32_t n_text = n_gen;
        if (n_text > 0 && af_token_is_eog(tok, gen[n_text - 1])) n_text--;
        st = af_detokenize(tok, gen, (size_t)n_text, 0, &e->generated);
        if (st != AF_OK) break;
        e->prediction = scored_text(e->generated, opts->first_line);
        if (!e->prediction) {
            st = af_fail(AF_ERR_NOMEM, "af_gen_eval_run: out of memory");
            break;
        }
        e->exact = af_exact_match(e->prediction, e->reference);
        st = af_rouge_l(e->prediction, e->reference, &e->rouge_l);
        if (st != AF_OK) break;
        sum_em += e->exact;
        sum_p += e->rouge_l.precision;
        sum_r += e->rouge_l.recall;
        sum_f += e->rouge_l.fmeasure;
        if (opts->log) {
            double t = out->prompt_seconds + out->decode_seconds;
            fprintf(opts->log, "\rgenerate: %d/%d  exact %.3f  ROUGE-L F %.3f  %.1f s", i + 1, out->n,
                    sum_em / (i + 1), sum_f / (i + 1), t);
            fflush(opts->log);
        }
    }
    if (opts->log) fputc('\n', opts->log);
    if (st == AF_OK) {
        out->exact_match = sum_em / out->n;
        out->rouge_l_precision = sum_p / out->n;
        out->rouge_l_recall = sum_r / out->n;
        out->rouge_l_f = sum_f / out->n;
    }
done:
    free(logits);
    free(gen);
    return st;
}

af_status af_gen_eval_json(const af_gen_eval_result *r, const char *const *extra, char **out) {
    if (!r || !out) return af_fail(AF_ERR_INVALID_ARG, "af_gen_eval_json: NULL argument");
    *out = NULL;
    cJSON *j = cJSON_CreateObject(), *rl = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    int ok = j && rl && arr;
    if (ok) {
        cJSON_AddNumberToObject(j, "n", r->n);
        cJSON_AddNumberToObject(j, "exact_match", r->exact_match);
        cJSON_AddNumberToObject(rl, "precision", r->rouge_l_precision);
        cJSON_AddNumberToObject(rl, "recall", r->rouge_l_recall);
        cJSON_AddNumberToObject(rl, "f", r->rouge_l_f);
        cJSON_AddItemToObject(j, "rouge_l", rl);
        rl = NULL;
        cJSON_AddNumberToObject(j, "prompt_tokens", (double)r->prompt_tokens);
        cJSON_AddNumberToObject(j, "new_tokens", (double)r->new_tokens);
        cJSON_AddNumberToObject(j, "prompt_seconds", r->prompt_seconds);
        cJSON_AddNumberToObject(j, "decode_seconds", r->decode_seconds);
        for (int32_t i = 0; ok && i < r->n; i++) {
            const af_gen_example *e = &r->ex[i];
            cJSON *o = cJSON_CreateObject();
            ok = o && cJSON_AddNumberToObject(o, "line", e->line) &&
                 cJSON_AddStringToObject(o, "reference", e->reference ? e->reference : "") &&
                 cJSON_AddStringToObject(o, "prediction", e->prediction ? e->prediction : "") &&
                 cJSON_AddStringToObject(o, "generated", e->generated ? e->generated : "") &&
                 cJSON_AddBoolToObject(o, "exact", e->exact) &&
                 cJSON_AddNumberToObject(o, "rouge_l_f", e->rouge_l.fmeasure);
            if (o) cJSON_AddItemToArray(arr, o);
        }
        cJSON_AddItemToObject(j, "examples", arr);
        arr = NULL;
        for (int k = 0; ok && extra && extra[k] && extra[k + 1]; k += 2)
            ok = cJSON_AddStringToObject(j, extra[k], extra[k + 1]) != NULL;
    }
    char *txt = ok ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    cJSON_Delete(rl);
    cJSON_Delete(arr);
    if (!txt) return af_fail(AF_ERR_NOMEM, "af_gen_eval_json: out of memory");
    *out = txt;
    return AF_OK;
}
