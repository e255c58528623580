/*
 * gen_eval.c — generation-based evaluation of causal-LM data: read {"prompt", "completion"} JSONL
 * examples, generate greedily from each prompt through a session (adapter applied unmerged, as the
 * session holds it) and score the generation against the completion with exact match and ROUGE-L
 * (text_metrics.c). Contracts: include/afinar.h (af_gen_eval_*).
 *
 * Prompt rendering for plain prompt/completion data is the one of training (TRL's SFTTrainer
 * tokenizes the prompt alone for the prompt part: prompt ids = tokenizer(prompt), the completion
 * follows): af_tokenize(prompt, add_special = 1, parse_special = 0). When the SFT data reader
 * (af_lm_dataset_read) lands, the prompts of conversational data come from its chat-template
 * rendering with the generation prompt; until then single-turn conversations are rendered with
 * af_chat_format (the model's template: [system,] user, then the assistant header) and multi-turn
 * ones are refused.
 */
#include "infer/session.h"
#include "core/fsutil.h"

#include "formats/jsonl.h"

#include <cJSON.h>
#include <errno.h>
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

static const char *json_type(const cJSON *v) {
    if (!v) return "missing";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* Reads message `v` (an element of field `field`) into role / content (borrowed from the JSON). */
static af_status message(const char *path, long ln, const char *field, int k, const cJSON *v, const char **role,
                         const char **content) {
    if (!cJSON_IsObject(v))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': message %d: expected an object, got %s", path, ln, field, k,
                       json_type(v));
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(v, "role"), *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(r) || !cJSON_IsString(c))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': message %d: '%s' %s, expected a string", path, ln, field, k,
                       !cJSON_IsString(r) ? "role" : "content", json_type(!cJSON_IsString(r) ? r : c));
    if (strcmp(r->valuestring, "system") && strcmp(r->valuestring, "user") && strcmp(r->valuestring, "assistant"))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': message %d: unknown role \"%s\" (system, user, assistant)",
                       path, ln, field, k, r->valuestring);
    *role = r->valuestring;
    *content = c->valuestring;
    return AF_OK;
}

/* A single-turn conversation's prompt rendered with the model's chat template and the generation
 * prompt (af_chat_format: [system], user, then the assistant header), and the assistant reply as
 * the reference. `pm` holds the prompt messages ([system,] user), `cm` the reply (assistant). */
static af_status conversation(const af_model *m, const char *path, long ln, const char *pfield, const cJSON *pm, int np,
                              const char *cfield, const cJSON *cm, af_gen_example *e) {
    const char *sys = NULL, *user = NULL, *role, *content;
    for (int k = 0; k < np; k++) {
        af_status st = message(path, ln, pfield, k, cJSON_GetArrayItem(pm, k), &role, &content);
        if (st != AF_OK) return st;
        if (!strcmp(role, "system") && k == 0 && np == 2) sys = content;
        else if (!strcmp(role, "user") && k == np - 1) user = content;
        else
            return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': message %d: role \"%s\" here: generation scoring reads "
                           "single-turn conversations ([system,] user, assistant); multi-turn data are not read yet",
                           path, ln, pfield, k, role);
    }
    af_status st = message(path, ln, cfield, np, cm, &role, &content);
    if (st != AF_OK) return st;
    if (strcmp(role, "assistant"))
        return af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': the reply's role is \"%s\", expected \"assistant\"", path,
                       ln, cfield, role);
    st = af_chat_format(m, sys, user, &e->prompt);
    if (st != AF_OK) { /* af_last_error's buffer is rewritten by af_fail: copy the message first */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        return af_fail(st, "%s:%ld: %s", path, ln, msg);
    }
    e->reference = strdup(content);
    e->chat = 1;
    return e->reference ? AF_OK : af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
}

/* Parses one non-blank line into e->prompt / e->reference (owned copies). Forms (TRL's):
 *   {"prompt": str, "completion": str}                       the prompt as is
 *   {"messages": [[system,] user, assistant]}                single-turn conversation
 *   {"prompt": [[system,] user], "completion": [assistant]}  the same as message lists */
static af_status parse_example(const af_model *m, const char *path, long ln, const char *line, af_gen_example *e) {
    cJSON *j = cJSON_Parse(line);
    if (!j) {
        const char *ep = cJSON_GetErrorPtr();
        long col = ep && ep >= line ? (long)(ep - line) + 1 : 1;
        return af_fail(AF_ERR_FORMAT, "%s:%ld: invalid JSON at column %ld", path, ln, col);
    }
    af_status st = AF_OK;
    e->line = (int32_t)ln;
    if (!cJSON_IsObject(j)) {
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: expected a JSON object", path, ln);
        goto done;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(j, "prompt"), *cv = cJSON_GetObjectItemCaseSensitive(j, "completion");
    if (msgs) {
        if (pv || cv) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': a line holds either \"messages\" or \"prompt\"/\"completion\"",
                         path, ln, pv ? "prompt" : "completion");
            goto done;
        }
        int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
        if (n < 2 || n > 3) {
            st = n < 0 ? af_fail(AF_ERR_FORMAT, "%s:%ld: field 'messages': expected an array, got %s", path, ln, json_type(msgs))
                       : af_fail(AF_ERR_FORMAT, "%s:%ld: field 'messages': %d messages; generation scoring reads single-turn "
                                 "conversations ([system,] user, assistant)", path, ln, n);
            goto done;
        }
        st = conversation(m, path, ln, "messages", msgs, n - 1, "messages", cJSON_GetArrayItem(msgs, n - 1), e);
        goto done;
    }
    const char *names[2] = {"prompt", "completion"};
    const cJSON *vals[2] = {pv, cv};
    for (int k = 0; k < 2; k++) {
        if (!vals[k]) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': missing (generation scoring reads {\"prompt\", \"completion\"} "
                         "or {\"messages\"})", path, ln, names[k]);
            goto done;
        }
        if (!cJSON_IsString(vals[k]) && !cJSON_IsArray(vals[k])) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': expected a string or a message list, got %s", path, ln,
                         names[k], json_type(vals[k]));
            goto done;
        }
    }
    if (cJSON_IsArray(pv) != cJSON_IsArray(cv)) {
        st = af_fail(AF_ERR_FORMAT, "%s:%ld: field 'completion': %s, but 'prompt' is %s", path, ln, json_type(cv),
                     json_type(pv));
        goto done;
    }
    if (cJSON_IsArray(pv)) {
        int np = cJSON_GetArraySize(pv);
        if (np < 1 || np > 2 || cJSON_GetArraySize(cv) != 1) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: field '%s': %d messages; generation scoring reads single-turn "
                         "conversations (prompt [system,] user; completion: one assistant message)", path, ln,
                         (np < 1 || np > 2) ? "prompt" : "completion",
                         (np < 1 || np > 2) ? np : cJSON_GetArraySize(cv));
            goto done;
        }
        st = conversation(m, path, ln, "prompt", pv, np, "completion", cJSON_GetArrayItem(cv, 0), e);
        goto done;
    }
    e->prompt = strdup(pv->valuestring);
    e->reference = strdup(cv->valuestring);
    if (!e->prompt || !e->reference) st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
done:
    cJSON_Delete(j);
    return st;
}

/* The first N examples of the file into r->ex / r->n. */
static af_status read_examples(const af_model *m, const char *path, int32_t max_n, af_gen_eval_result *r) {
    FILE *fp = af_fopen_regular(path, NULL); /* never blocks; message recorded */
    if (!fp) return AF_ERR_IO;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long ln = 0;
    int32_t ex_cap = 0;
    af_status st = AF_OK;
    while ((max_n <= 0 || r->n < max_n) && (len = af_jsonl_read_line(fp, &line, &cap, AF_JSONL_DEFAULT_MAX_LINE)) != -1) {
        ln++;
        if (len == -2) {
            st = af_fail(AF_ERR_FORMAT, "%s:%ld: line longer than %zu bytes", path, ln, AF_JSONL_DEFAULT_MAX_LINE);
            break;
        }
        if (len == -3) {
            st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
            break;
        }
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)len) continue;
        if (r->n == ex_cap) {
            if (ex_cap >= INT32_MAX / 2) {
                st = af_fail(AF_ERR_RANGE, "%s:%ld: too many examples", path, ln);
                break;
            }
            int32_t nc = ex_cap ? 2 * ex_cap : 64;
            af_gen_example *ne = realloc(r->ex, sizeof *ne * (size_t)nc);
            if (!ne) {
                st = af_fail(AF_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
                break;
            }
            r->ex = ne;
            ex_cap = nc;
        }
        af_gen_example *e = &r->ex[r->n];
        memset(e, 0, sizeof *e);
        r->n++; /* counted before parsing so a half-filled example is freed with the result */
        st = parse_example(m, path, ln, line, e);
        if (st != AF_OK) break;
    }
    if (st == AF_OK && ferror(fp)) st = af_fail(AF_ERR_IO, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(fp);
    if (st == AF_OK && r->n == 0) st = af_fail(AF_ERR_FORMAT, "%s: no examples (empty data set)", path);
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
    if (!tok)
        return af_fail(AF_ERR_UNSUPPORTED, "af_gen_eval_run: the model has no usable tokenizer (%s)",
                       af_model_tokenizer_error(m));
    const int32_t vocab = af_model_get_config(m)->vocab_size;
    const int64_t n_ctx = af_session_n_ctx(s);
    af_status st = read_examples(m, data_path, opts->max_examples, out);
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
