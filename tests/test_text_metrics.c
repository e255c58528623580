/*
 * test_text_metrics.c — exact match and ROUGE-L (src/infer/text_metrics.c) against hand-computed
 * cases and against the `rouge_score` package on tests/fixtures/rouge_pairs.jsonl
 * (tests/ref/make_rouge_ref.py: 52 pairs incl. empty strings and non-ASCII text), and the
 * generation-based evaluation (src/infer/gen_eval.c): bad data files refused with FILE:LINE and
 * the field, and on SmolLM2 (skipped when the model is absent) the greedy text equal to an
 * independent argmax loop over the session, scores recomputed from the predictions, JSON output.
 */
#include "testlib.h"

#include "afinar.h"
#include "afinar_app.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_exact_match(void) {
    CHECK(af_exact_match("Ad sales", "Ad sales"), "identical strings match");
    CHECK(af_exact_match("  Ad sales\n", "\tAd sales "), "outer ASCII whitespace is trimmed");
    CHECK(!af_exact_match("ad sales", "Ad sales"), "case is kept");
    CHECK(!af_exact_match("Ad  sales", "Ad sales"), "inner whitespace is kept");
    CHECK(!af_exact_match("Ad sales.", "Ad sales"), "punctuation is kept");
    CHECK(af_exact_match("", "  \n") && af_exact_match(NULL, "") && af_exact_match(NULL, NULL),
          "empty, whitespace-only and NULL are all the empty string");
    CHECK(!af_exact_match("x", NULL), "non-empty vs NULL");
}

static void test_rouge_hand(void) {
    af_rouge_score s;
    /* ref "the cat sat on the mat" (6), pred "the cat on mat" (4): LCS 4 -> P 1, R 4/6 */
    CHECK(af_rouge_l("the cat on mat", "The cat sat on the mat.", &s) == AF_OK, "rouge: %s", af_last_error());
    CHECK(near(s.precision, 1, 1e-15) && near(s.recall, 4.0 / 6, 1e-15) && near(s.fmeasure, 0.8, 1e-15),
          "P %g R %g F %g want 1 0.6667 0.8", s.precision, s.recall, s.fmeasure);
    /* order matters: LCS of "a b c d" and "d c b a" is 1 */
    CHECK(af_rouge_l("d c b a", "a b c d", &s) == AF_OK && near(s.fmeasure, 0.25, 1e-15), "reversed: F %g want 0.25",
          s.fmeasure);
    /* tokenization: punctuation and non-ASCII separate, case folds */
    CHECK(af_rouge_l("U.S.-based", "u s based", &s) == AF_OK && near(s.fmeasure, 1, 0), "'U.S.-based' = 'u s based'");
    CHECK(af_rouge_l("caf\xc3\xa9", "caf", &s) == AF_OK && near(s.fmeasure, 1, 0), "'café' tokenizes to 'caf'");
    CHECK(af_rouge_l("", "x", &s) == AF_OK && s.precision == 0 && s.recall == 0 && s.fmeasure == 0, "empty prediction: 0");
    CHECK(af_rouge_l("!!", "??", &s) == AF_OK && s.fmeasure == 0, "no tokens on either side: 0");
    CHECK(af_rouge_l("x", "y", NULL) == AF_ERR_INVALID_ARG, "NULL output refused");
    /* invalid UTF-8 and a truncated U+0130 at the end: bytes separate, no read past the end */
    CHECK(af_rouge_l("ab\xc4", "ab", &s) == AF_OK && near(s.fmeasure, 1, 0), "truncated sequence at the end");
    CHECK(af_rouge_l("a\xff\xfe" "b", "a b", &s) == AF_OK && near(s.fmeasure, 1, 0), "invalid bytes separate");
}

static void test_rouge_fixture(void) {
    const char *path = "tests/fixtures/rouge_pairs.jsonl";
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s present (tests/ref/make_rouge_ref.py)", path);
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, bad = 0, em_bad = 0;
    double worst = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            CHECK(0, "%s:%d: invalid JSON", path, n + 1);
            break;
        }
        const char *pred = cJSON_GetObjectItem(j, "pred")->valuestring, *ref = cJSON_GetObjectItem(j, "ref")->valuestring;
        double p = cJSON_GetObjectItem(j, "p")->valuedouble, r = cJSON_GetObjectItem(j, "r")->valuedouble,
               fm = cJSON_GetObjectItem(j, "f")->valuedouble;
        int em = cJSON_GetObjectItem(j, "em")->valueint;
        af_rouge_score s;
        n++;
        if (af_rouge_l(pred, ref, &s) != AF_OK) {
            CHECK(0, "pair %d: %s", n, af_last_error());
        } else {
            double d = fmax(fabs(s.precision - p), fmax(fabs(s.recall - r), fabs(s.fmeasure - fm)));
            if (d > worst) worst = d;
            if (d > 1e-12) {
                bad++;
                if (bad <= 5)
                    CHECK(0, "pair %d (pred \"%s\", ref \"%s\"): P %.17g R %.17g F %.17g, rouge_score %.17g %.17g %.17g", n,
                          pred, ref, s.precision, s.recall, s.fmeasure, p, r, fm);
            }
        }
        if (af_exact_match(pred, ref) != em) {
            em_bad++;
            CHECK(0, "pair %d: exact match %d, reference %d", n, af_exact_match(pred, ref), em);
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    CHECK(n >= 50 && bad == 0 && em_bad == 0, "rouge_score fixture: %d pairs, %d ROUGE-L mismatches (worst |diff| %.3g), "
          "%d exact-match mismatches", n, bad, worst, em_bad);
    printf("  ROUGE-L vs rouge_score 0.1.2: %d pairs, max |diff| of P/R/F %.3g\n", n, worst);
}

static char *write_tmp(const char *text) {
    static char name[8][64];
    static int k;
    char *p = name[k++ & 7];
    snprintf(p, sizeof name[0], "/tmp/af_gen_eval_%d_%d.jsonl", (int)getpid(), k);
    FILE *f = fopen(p, "wb");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return p;
}

static void expect_error(af_session *s, const char *text, af_status want, const char *needle) {
    char *p = write_tmp(text);
    af_gen_eval_result r;
    af_gen_eval_opts o;
    af_gen_eval_opts_init(&o);
    o.max_new_tokens = 2;
    af_status st = af_gen_eval_run(s, p, &o, &r);
    const char *msg = af_last_error();
    CHECK(st == want && strstr(msg, needle) && strstr(msg, p), "bad data refused: want %s containing '%s', got %s: %s",
          af_status_name(want), needle, af_status_name(st), msg);
    af_gen_eval_result_free(&r);
    unlink(p);
}

static void test_gen_eval(void) {
    const char *path = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!path) return;
    af_model *m = NULL;
    af_session *s = NULL;
    if (af_model_load(T_CTX, path, &m) != AF_OK || af_session_new(m, 256, &s) != AF_OK) {
        CHECK(0, "load: %s", af_last_error());
        af_model_free(m);
        return;
    }
    /* the causal-LM reader's errors (tested in full by test_lm_data) reach the caller with FILE:LINE */
    expect_error(s, "\n{\"prompt\": \"a\", \"completion\": 3}\n", AF_ERR_FORMAT, ":2: field 'completion': expected a string");
    expect_error(s, "{\"messages\": [{\"role\": \"bot\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n",
                 AF_ERR_FORMAT, ":1: field 'messages[0].role': unknown role \"bot\"");
    expect_error(s, "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, "
                    "{\"role\": \"assistant\", \"content\": \"b\"}]}\n", AF_ERR_FORMAT, ":2: field 'messages': line is 'messages' but line 1");
    /* what generation scoring cannot score */
    expect_error(s, "{\"text\": \"a b c\"}\n", AF_ERR_FORMAT, ":1: field 'text': plain text has no reference to score");
    expect_error(s, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
                    "{\"role\": \"user\", \"content\": \"c\"}]}\n",
                 AF_ERR_FORMAT, ":1: field 'messages': the last message is a user turn; generation scoring needs");
    expect_error(s, "{\"messages\": [{\"role\": \"system\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n",
                 AF_ERR_FORMAT, ":1: field 'messages': the scored assistant turn has no user turn before it");
    expect_error(s, "{\"prompt\": [{\"role\": \"assistant\", \"content\": \"a\"}], \"completion\": [{\"role\": \"assistant\", "
                    "\"content\": \"b\"}]}\n", AF_ERR_FORMAT, ":1: field 'prompt': the scored assistant turn has no user turn");
    expect_error(s, "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\" \"completion\": \"b\"}\n", AF_ERR_FORMAT,
                 ":2: invalid JSON at column");
    expect_error(s, "[1]\n", AF_ERR_FORMAT, ":1: expected a JSON object");
    expect_error(s, "\n  \n", AF_ERR_FORMAT, "no examples");
    char big[700];
    snprintf(big, sizeof big, "{\"prompt\": \"%0600d\", \"completion\": \"b\"}\n", 0); /* 600 digits: > 256 positions */
    expect_error(s, big, AF_ERR_RANGE, ":1: field 'prompt'");
    {
        af_gen_eval_result r;
        CHECK(af_gen_eval_run(s, "/nonexistent/x.jsonl", NULL, &r) == AF_ERR_IO && strstr(af_last_error(), "cannot open"),
              "missing file: %s", af_last_error());
        af_gen_eval_result_free(&r);
    }

    const char *data = "{\"prompt\": \"The capital of France is\", \"completion\": \" Paris\"}\n"
                       "{\"prompt\": \"Write one word: hello.\\nWord:\", \"completion\": \"hello\", \"other\": 1}\n"
                       "{\"prompt\": \"1, 2, 3, 4,\", \"completion\": \"5, 6, 7\"}\n";
    char *p = write_tmp(data);
    af_gen_eval_opts o;
    af_gen_eval_opts_init(&o);
    o.max_examples = 2;
    o.max_new_tokens = 12;
    af_gen_eval_result r;
    af_status st = af_gen_eval_run(s, p, &o, &r);
    CHECK(st == AF_OK && r.n == 2, "gen eval on 2 of 3 examples: %s (n %d)", st == AF_OK ? "ok" : af_last_error(), r.n);
    if (st == AF_OK && r.n == 2) {
        const af_tokenizer *tok = af_model_tokenizer(m);
        const int32_t V = af_model_get_config(m)->vocab_size;
        float *lg = malloc(sizeof(float) * (size_t)V);
        double sf = 0, sem = 0;
        for (int i = 0; i < r.n; i++) {
            const af_gen_example *e = &r.ex[i];
            /* independent greedy loop: argmax (lowest id on ties) over the session's logits */
            int32_t *ids = NULL;
            size_t n_ids = 0;
            af_tokenize(tok, e->prompt, strlen(e->prompt), 1, 0, &ids, &n_ids);
            af_session_reset(s);
            af_session_eval(s, ids, (int)n_ids, lg, NULL);
            int32_t gen[12];
            int ng = 0;
            while (ng < 12) {
                int32_t best = 0;
                for (int32_t v = 1; v < V; v++)
                    if (lg[v] > lg[best]) best = v;
                gen[ng++] = best;
                if (af_token_is_eog(tok, best) || ng == 12) break;
                af_session_eval(s, &best, 1, lg, NULL);
            }
            int nt = ng > 0 && af_token_is_eog(tok, gen[ng - 1]) ? ng - 1 : ng;
            char *txt = NULL;
            af_detokenize(tok, gen, (size_t)nt, 0, &txt);
            CHECK(txt && !strcmp(txt, e->generated) && e->new_tokens == ng && e->prompt_tokens == (int32_t)n_ids,
                  "example %d: greedy text \"%s\" (%d tokens) == independent loop \"%s\" (%d)", i, e->generated,
                  e->new_tokens, txt ? txt : "", ng);
            CHECK(!strcmp(e->prediction, e->generated), "example %d: whole generation scored by default", i);
            af_rouge_score rs;
            af_rouge_l(e->prediction, e->reference, &rs);
            CHECK(rs.fmeasure == e->rouge_l.fmeasure && e->exact == af_exact_match(e->prediction, e->reference),
                  "example %d: scores recomputed", i);
            sf += rs.fmeasure;
            sem += e->exact;
            free(txt);
            free(ids);
        }
        CHECK(r.ex[0].line == 1 && r.ex[1].line == 2 && !strcmp(r.ex[1].reference, "hello"), "lines and references");
        CHECK(near(r.rouge_l_f, sf / 2, 1e-15) && near(r.exact_match, sem / 2, 1e-15), "means over the examples");
        printf("  SmolLM2 greedy: \"%s\" / \"%s\"; ROUGE-L F %.3f, EM %.2f\n", r.ex[0].generated, r.ex[1].generated,
               r.rouge_l_f, r.exact_match);
        free(lg);
        /* first_line: the scored text is the first non-empty line of the same generation */
        af_gen_eval_result r2;
        o.first_line = 1;
        st = af_gen_eval_run(s, p, &o, &r2);
        CHECK(st == AF_OK && r2.n == 2, "first_line run");
        for (int i = 0; st == AF_OK && i < r2.n; i++) {
            /* the first line of the whole generation of the first run; this run stopped at its end */
            const char *g = r.ex[i].generated;
            while (*g == ' ' || *g == '\n' || *g == '\t' || *g == '\r') g++;
            size_t k = strcspn(g, "\n");
            const char *g2 = r2.ex[i].generated;
            CHECK(strlen(r2.ex[i].prediction) == k && !strncmp(r2.ex[i].prediction, g, k) &&
                      !strncmp(g2, r.ex[i].generated, strlen(g2)) && r2.ex[i].new_tokens <= r.ex[i].new_tokens &&
                      (g[k] != '\n' || strlen(g2) < (size_t)(g - r.ex[i].generated) + k ||
                       strchr(g2 + (g - r.ex[i].generated) + k, '\n') || r2.ex[i].new_tokens == 12),
                  "example %d: first line \"%s\" (generation stopped after %d tokens at the newline, whole run %d)", i,
                  r2.ex[i].prediction, r2.ex[i].new_tokens, r.ex[i].new_tokens);
        }
        /* JSON */
        char *js = NULL;
        const char *extra[] = {"data", p, NULL};
        CHECK(af_gen_eval_json(&r, extra, &js) == AF_OK, "json: %s", af_last_error());
        cJSON *j = js ? cJSON_Parse(js) : NULL;
        CHECK(j && cJSON_GetObjectItem(j, "n")->valueint == 2 &&
                  near(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rouge_l"), "f")->valuedouble, r.rouge_l_f, 1e-12) &&
                  cJSON_GetArraySize(cJSON_GetObjectItem(j, "examples")) == 2 &&
                  !strcmp(cJSON_GetObjectItem(j, "data")->valuestring, p),
              "JSON parsed back with n, rouge_l.f, examples, extra keys");
        cJSON_Delete(j);
        free(js);
        af_gen_eval_result_free(&r2);
    }
    af_gen_eval_result_free(&r);
    unlink(p);
    /* conversations: both TRL forms render the same chat prompt as af_chat_format (tokenized with
     * special tokens), the assistant content is the reference */
    p = write_tmp("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
                  "\"Capital of France?\"}, {\"role\": \"assistant\", \"content\": \"Paris\"}]}\n"
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Capital of France?\"}, {\"role\": \"assistant\", "
                  "\"content\": \"Paris\"}]}\n"
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Capital of France?\"}, {\"role\": \"assistant\", "
                  "\"content\": \"Paris\"}, {\"role\": \"user\", \"content\": \"And of Italy?\"}, {\"role\": "
                  "\"assistant\", \"content\": \"Rome\"}]}\n");
    /* the conversational prompt/completion form (one format per file: its own file) */
    char *p2 = write_tmp("{\"prompt\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                         "\"content\": \"Capital of France?\"}], \"completion\": [{\"role\": \"assistant\", \"content\": "
                         "\"Paris\"}]}\n");
    o.max_new_tokens = 8;
    o.first_line = 0;
    o.max_examples = 0;
    af_gen_eval_result r2;
    st = af_gen_eval_run(s, p2, &o, &r2);
    CHECK(st == AF_OK && r2.n == 1, "conversational prompt/completion: %s", st == AF_OK ? "ok" : af_last_error());
    st = af_gen_eval_run(s, p, &o, &r);
    CHECK(st == AF_OK && r.n == 3, "conversational examples: %s", st == AF_OK ? "ok" : af_last_error());
    if (st == AF_OK && r.n == 3 && r2.n == 1) {
        char *want = NULL, *want_nosys = NULL;
        af_chat_format(m, "Be brief.", "Capital of France?", &want);
        af_chat_format(m, NULL, "Capital of France?", &want_nosys);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        af_tokenize(af_model_tokenizer(m), want, strlen(want), 1, 1, &ids, &n_ids);
        /* multi-turn: every message before the last assistant turn, then the generation prompt */
        size_t wl = want_nosys ? strlen(want_nosys) : 0;
        char *want_multi = malloc(wl + 128);
        if (want_multi)
            snprintf(want_multi, wl + 128, "%sParis<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n"
                     "<|im_start|>assistant\n", want_nosys ? want_nosys : "");
        CHECK(want && !strcmp(r.ex[0].prompt, want) && !strcmp(r2.ex[0].prompt, want) && want_nosys &&
                  !strcmp(r.ex[1].prompt, want_nosys) && want_multi && !strcmp(r.ex[2].prompt, want_multi) &&
                  r.ex[0].chat && r2.ex[0].chat && r.ex[1].chat && r.ex[2].chat && !strcmp(r.ex[2].reference, "Rome"),
              "chat prompts rendered by the template (\"%s\"; multi-turn \"%s\")", r.ex[0].prompt, r.ex[2].prompt);
        free(want_multi);
        CHECK(r.ex[0].prompt_tokens == (int32_t)n_ids && !strcmp(r.ex[0].generated, r2.ex[0].generated) &&
                  !strcmp(r.ex[0].reference, "Paris"),
              "special tokens parsed (%d prompt tokens, want %zu); both forms generate the same text \"%s\"",
              r.ex[0].prompt_tokens, n_ids, r.ex[0].generated);
        printf("  SmolLM2 chat greedy: \"%s\"\n", r.ex[0].generated);
        /* the layout chosen by name (afinar generate --chat --chat-template) */
        char *g = NULL, *a = NULL;
        CHECK(af_chat_format_template(m, "gemma", NULL, "Capital of France?", &g) == AF_OK && g &&
                  !strcmp(g, "<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>model\n"),
              "gemma layout on SmolLM2: \"%s\"", g ? g : af_last_error());
        CHECK(af_chat_format_template(m, "auto", NULL, "Capital of France?", &a) == AF_OK && a && want_nosys &&
                  !strcmp(a, want_nosys), "auto = the model's template");
        char *bad = NULL;
        CHECK(af_chat_format_template(m, "foo", NULL, "x", &bad) != AF_OK && !bad &&
                  strstr(af_last_error(), "'foo'"), "unknown layout refused: %s", af_last_error());
        free(g);
        free(a);
        free(ids);
        free(want);
        free(want_nosys);
    }
    af_gen_eval_result_free(&r);
    af_gen_eval_result_free(&r2);
    unlink(p);
    unlink(p2);
    af_session_free(s);
    af_model_free(m);
}

int main(void) {
    test_exact_match();
    test_rouge_hand();
    test_rouge_fixture();
    test_gen_eval();
    return tl_finish("test_text_metrics");
}
