/*
 * test_lm_data.c — causal-LM data (include/afinar.h "Causal-LM data sets"; formats/lm_jsonl.h,
 * tokenizer/chat.c, train/lm_data.c):
 *  - chat templates: token ids and assistant masks identical to transformers' apply_chat_template
 *    on the conversations of tests/fixtures/chat_ids_{smollm2,gemma3}.txt (made by
 *    tests/ref/make_chat_fixture.py), with and without the generation prompt, conversations
 *    Gemma's template refuses refused too, and the piecewise tokenization equal to tokenizing the
 *    whole rendered text;
 *  - every bad-input file of tests/fixtures/lm_data/ refused with AF_ERR_FORMAT and a message naming
 *    FILE:LINE and the field (parser alone, no model needed; and through af_lm_dataset_read);
 *  - af_lm_dataset_read on SmolLM2 and Gemma 3: sequences and targets of every format, loss_on all,
 *    truncation / dropping / report, thread-count independence, template override and refusal.
 * Tests needing a model file skip with a message when it is absent.
 */
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "formats/lm_jsonl.h"
#include "testlib.h"
#include "tinymodel.c"
#include "tokenizer/tokenizer.h"
#include "train/data.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXDIR "tests/fixtures/lm_data/"

static char g_dir[] = "/tmp/afinar_test_lm_data_XXXXXX";

static const char *write_tmp(const char *name, const char *content) {
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    FILE *fp = fopen(p, "wb");
    if (fp) {
        fputs(content, fp);
        fclose(fp);
    }
    return p;
}

static int hexval(char c) { return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0'; }

static char *unhex(const char *h, size_t hl, size_t *len) {
    char *o = malloc(hl / 2 + 1);
    for (size_t i = 0; i + 1 < hl; i += 2) o[i / 2] = (char)(hexval(h[i]) * 16 + hexval(h[i + 1]));
    o[hl / 2] = 0;
    *len = hl / 2;
    return o;
}

static int32_t *parse_ids(const char *s, size_t *n) {
    size_t cap = 16;
    int32_t *v = malloc(cap * sizeof *v);
    *n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s) break;
        if (*n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[(*n)++] = (int32_t)x;
        s = end;
    }
    return v;
}

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

/* Render + tokenize; returns status. */
static af_status render_ids(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n, int gen,
                            int32_t **ids, uint8_t **mask, size_t *nid, char **text) {
    af_chat_doc d = {0};
    af_status st = af_chat_render(tok, fam, m, n, 0, gen, &d);
    if (st != AF_OK) return st;
    st = af_chat_doc_tokenize(tok, &d, ids, mask, nid);
    if (text) {
        *text = d.text;
        d.text = NULL;
    }
    af_chat_doc_free(&d);
    return st;
}

/* ---- chat fixture parity ---- */
static void check_chat_fixture(const af_tokenizer *tok, const char *file, const char *name) {
    size_t flen;
    char *buf = tl_read_file(file, &flen);
    if (!buf) {
        tl_skip("%s missing", file);
        return;
    }
    af_chat_family fam;
    CHECK(af_chat_family_of(tok, NULL, &fam) == AF_OK, "%s: family", name);
    af_chat_msg msgs[64];
    char *contents[64];
    int32_t nm = 0, want_n = 0;
    int convs = 0, bad = 0, refused = 0, whole_bad = 0;
    int32_t *got = NULL, *got_g = NULL;
    uint8_t *mask = NULL, *mask_g = NULL;
    size_t ngot = 0, ngot_g = 0;
    char *text = NULL;
    af_status st = AF_OK;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (line[0] == 'C') {
            for (int32_t i = 0; i < nm; i++) free(contents[i]);
            nm = 0;
            want_n = atoi(line + 2);
        } else if (line[0] == 'M' && nm < 64) {
            char *r = line + 2, *h = strchr(r, ' ');
            size_t len = 0;
            contents[nm] = unhex(h + 1, strlen(h + 1), &len);
            *h = 0;
            msgs[nm] = (af_chat_msg){!strcmp(r, "system") ? AF_ROLE_SYSTEM : !strcmp(r, "user") ? AF_ROLE_USER
                                                                                                : AF_ROLE_ASSISTANT,
                                     contents[nm], len};
            nm++;
            if (nm == want_n) { /* complete: render both ways */
                free(got), free(mask), free(got_g), free(mask_g), free(text);
                got = got_g = NULL, mask = mask_g = NULL, text = NULL;
                st = render_ids(tok, fam, msgs, nm, 0, &got, &mask, &ngot, &text);
                if (st == AF_OK) st = render_ids(tok, fam, msgs, nm, 1, &got_g, &mask_g, &ngot_g, NULL);
                convs++;
            }
        } else if (line[0] == 'X') {
            if (st != AF_ERR_FORMAT) {
                bad++;
                printf("  %s conversation %d: accepted, transformers' template refuses it\n", name, convs);
            }
            refused++;
        } else if (line[0] == 'I') {
            size_t nw;
            int32_t *want = parse_ids(line + 2, &nw);
            if (st != AF_OK || !same_ids(got, ngot, want, nw)) {
                bad++;
                printf("  %s conversation %d: ids differ (%s, %zu vs %zu ids)\n", name, convs, af_status_name(st),
                       ngot, nw);
            } else { /* the pieces tokenize like the whole text */
                int32_t *w = NULL;
                size_t nwh = 0;
                int bos = fam == AF_CHAT_GEMMA && af_token_bos(tok) >= 0;
                if (af_tokenize(tok, text, strlen(text), 0, 1, &w, &nwh) != AF_OK || nwh + (size_t)bos != ngot ||
                    (bos && got[0] != af_token_bos(tok)) || (nwh && memcmp(w, got + bos, nwh * sizeof *w)))
                    whole_bad++;
                free(w);
            }
            free(want);
        } else if (line[0] == 'A' && st == AF_OK) {
            const char *a = line + 2;
            size_t na = strlen(a), diff = 0;
            for (size_t i = 0; i < na && i < ngot; i++) diff += (size_t)((a[i] == '1') != (mask[i] != 0));
            if (na != ngot || diff) {
                bad++;
                printf("  %s conversation %d: assistant mask differs at %zu positions\n", name, convs, diff);
            }
        } else if (line[0] == 'G' && st == AF_OK) {
            size_t nw;
            int32_t *want = parse_ids(line + 2, &nw);
            if (!same_ids(got_g, ngot_g, want, nw)) {
                bad++;
                printf("  %s conversation %d: ids with the generation prompt differ\n", name, convs);
            }
            free(want);
        }
        line = nl ? nl + 1 : NULL;
    }
    for (int32_t i = 0; i < nm; i++) free(contents[i]);
    free(got), free(mask), free(got_g), free(mask_g), free(text);
    free(buf);
    printf("  chat %s: %d conversations (%d refused by the template), %d differ from transformers; pieces == "
           "whole text: %d differ\n", name, convs, refused, bad, whole_bad);
    CHECK(convs >= 50 && bad == 0, "%s: %d of %d conversations differ from apply_chat_template", name, bad, convs);
    CHECK(whole_bad == 0, "%s: piecewise tokenization differs from the whole text in %d conversations", name,
          whole_bad);
}

/* ---- bad input ---- */
typedef struct bad_case {
    const char *file;
    const char *want; /* substring of the message after "FILE" */
    int needs_gemma;  /* refused only by Gemma's template (rendering) */
} bad_case;

static const bad_case BAD[] = {
    {"msg_no_role.jsonl", ":2: field 'messages[0].role': missing", 0},
    {"msg_no_content.jsonl", ":1: field 'messages[0].content': missing", 0},
    {"msg_content_null.jsonl", ":1: field 'messages[0].content': expected a string, got null", 0},
    {"unknown_role.jsonl", ":1: field 'messages[1].role': unknown role \"tool\"", 0},
    {"no_assistant.jsonl", ":1: field 'messages': no assistant turn", 0},
    {"msg_not_object.jsonl", ":1: field 'messages[1]': expected a message object", 0},
    {"msg_empty_list.jsonl", ":1: field 'messages': empty list of messages", 0},
    {"prompt_not_string.jsonl", ":1: field 'prompt': expected a string or a list of messages, got number", 0},
    {"completion_not_string.jsonl", ":2: field 'completion': expected a string like 'prompt', got object", 0},
    {"pc_mixed_kinds.jsonl", ":1: field 'completion': expected a string like 'prompt', got array", 0},
    {"pc_completion_no_assistant.jsonl", ":1: field 'completion': no assistant message", 0},
    {"prompt_only.jsonl", ":1: field 'completion': missing", 0},
    {"mixed_line.jsonl", ":1: field 'messages': a line holds one format, but this one has both 'text' and 'messages'", 0},
    {"mixed_file.jsonl", ":3: field 'prompt': line is 'prompt/completion' but line 1 is 'text'", 0},
    {"label_field.jsonl", ":1: field 'label': a causal-LM data file has no labels", 0},
    {"labels_field.jsonl", ":1: field 'labels': a causal-LM data file has no labels", 0},
    {"classification_input.jsonl", ":1: field 'text': missing", 0},
    {"not_object.jsonl", ":2: expected a JSON object, got array", 0},
    {"invalid_json.jsonl", ":2: invalid JSON at column", 0},
    {"trailing_text.jsonl", ":1: invalid JSON at column 16: unexpected text after the object", 0},
    {"empty.jsonl", ": no examples (empty file)", 0},
    {"text_not_string.jsonl", ":1: field 'text': expected a string, got number", 0},
    {"gemma_not_alternating.jsonl", ":1: field 'messages': messages[1]: role 'user' where Gemma's chat template "
                                    "needs 'assistant'", 1},
};

static void check_msg(af_status st, const char *path, const bad_case *b, const char *how) {
    const char *msg = af_last_error();
    size_t pl = strlen(path);
    int ok = st == AF_ERR_FORMAT && !strncmp(msg, path, pl) && strstr(msg + pl, b->want) == msg + pl;
    if (!ok) printf("  %s %s: got %s \"%s\"\n", how, b->file, af_status_name(st), msg);
    CHECK(ok, "%s %s: AF_ERR_FORMAT \"FILE%s...\"", how, b->file, b->want);
}

static void test_bad_parse(void) {
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        if (BAD[k].needs_gemma) continue;
        char path[256];
        snprintf(path, sizeof path, FIXDIR "%s", BAD[k].file);
        af_lm_corpus *c = NULL;
        af_status st = af_lm_corpus_read(path, 0, &c);
        check_msg(st, path, &BAD[k], "parse");
        CHECK(c == NULL, "%s: nothing returned", BAD[k].file);
    }
    af_lm_corpus *c = NULL;
    CHECK(af_lm_corpus_read(FIXDIR "nope.jsonl", 0, &c) == AF_ERR_IO, "missing file: AF_ERR_IO");
    const char *p = write_tmp("long.jsonl", "{\"text\": \"0123456789012345678901234567890123456789\"}\n");
    CHECK(af_lm_corpus_read(p, 20, &c) == AF_ERR_FORMAT && strstr(af_last_error(), ":1: line longer than 20 bytes"),
          "long line refused: %s", af_last_error());
    /* good files parse into the right shapes */
    CHECK(af_lm_corpus_read(FIXDIR "good_chat_pc.jsonl", 0, &c) == AF_OK && c->format == AF_LM_CHAT_PC &&
              c->n == 1 && c->ex[0].n_msgs == 4 && c->ex[0].n_prompt_msgs == 3 &&
              c->ex[0].msgs[3].role == AF_ROLE_ASSISTANT && !strcmp(c->ex[0].msgs[3].content, "9"),
          "conversational prompt/completion parsed");
    af_lm_corpus_free(c);
    c = NULL;
    CHECK(af_lm_corpus_read(FIXDIR "good_pc.jsonl", 0, &c) == AF_OK && c->n == 2 && c->ex[1].line_no == 2 &&
              !strcmp(c->ex[1].completion, " Paris, of course.") && c->ex[1].text_len == 18,
          "prompt/completion parsed (extra keys ignored)");
    af_lm_corpus_free(c);
}

static void test_bad_read(const af_model *m, int gemma) {
    af_lm_data_opts o;
    af_lm_data_opts_init(&o);
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        if (BAD[k].needs_gemma && !gemma) continue;
        char path[256];
        snprintf(path, sizeof path, FIXDIR "%s", BAD[k].file);
        af_dataset *ds = (af_dataset *)1;
        af_status st = af_lm_dataset_read(NULL, path, m, &o, &ds);
        check_msg(st, path, &BAD[k], gemma ? "gemma read" : "smollm2 read");
        CHECK(ds == NULL, "%s: *out NULL on error", BAD[k].file);
    }
}

/* ---- data sets on a real model ---- */
static int32_t *tok_of(const af_tokenizer *tok, const char *s, int add_special, size_t *n) {
    int32_t *ids = NULL;
    af_tokenize(tok, s, strlen(s), add_special, 1, &ids, n);
    return ids;
}

static int64_t count_targets(const af_dataset *ds, int32_t i) {
    int64_t t = 0;
    for (int64_t k = ds->tok_off[i]; k < ds->tok_off[i + 1]; k++) t += ds->target_mask[k];
    return t;
}

static void test_smollm2_sets(const af_model *m) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    int32_t eos = af_token_eos(tok);
    af_lm_data_opts o;
    af_lm_data_report rep;
    af_lm_data_opts_init(&o);
    o.report = &rep;
    af_dataset *ds = NULL;

    /* text: tokens + EOS (unless the text ends with EOS's text), every token but the first a target */
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_text.jsonl", m, &o, &ds) == AF_OK, "text: %s", af_last_error());
    if (ds) {
        size_t n0;
        int32_t *t0 = tok_of(tok, "Hello world. This is plain text.", 1, &n0);
        CHECK(ds->n == 2 && rep.n_read == 3 && rep.n_dropped_empty == 1 && rep.first_dropped_line == 2,
              "text: empty text (only EOS) dropped as no-target (n %d, read %d, empty %d)", ds->n, rep.n_read,
              rep.n_dropped_empty);
        CHECK(af_dataset_len(ds, 0) == (int32_t)n0 + 1 && !memcmp(ds->tokens, t0, n0 * 4) && ds->tokens[n0] == eos,
              "text: tokens then EOS");
        CHECK(ds->target_mask[0] == 0 && count_targets(ds, 0) == (int64_t)n0, "text: all but the first are targets");
        CHECK(ds->line_no[1] == 3 && ds->tokens[ds->tok_off[2] - 1] == eos &&
                  ds->tokens[ds->tok_off[2] - 2] != eos, "text already ending with <|im_end|>: no second EOS");
        CHECK(ds->num_classes == 0 && !ds->labels && !ds->multi_hot && ds->path && !strcmp(rep.loss_on, "all") &&
                  !strcmp(rep.format, "text"), "text: causal-LM data set shape and report");
        free(t0);
        af_dataset_free(ds);
        ds = NULL;
    }
    /* prompt/completion: prompt tokens, completion tokens, EOS; targets = completion + EOS */
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_pc.jsonl", m, &o, &ds) == AF_OK, "p/c: %s", af_last_error());
    if (ds) {
        size_t np, nc;
        int32_t *p = tok_of(tok, "Capital of France?", 1, &np), *cc = tok_of(tok, " Paris, of course.", 0, &nc);
        const int32_t *s1 = ds->tokens + ds->tok_off[1];
        const uint8_t *m1 = ds->target_mask + ds->tok_off[1];
        int ok = af_dataset_len(ds, 1) == (int32_t)(np + nc + 1) && !memcmp(s1, p, np * 4) &&
                 !memcmp(s1 + np, cc, nc * 4) && s1[np + nc] == eos;
        for (size_t k = 0; ok && k < np + nc + 1; k++) ok = m1[k] == (k >= np);
        CHECK(ok, "p/c: prompt (no target), completion + EOS (targets)");
        CHECK(!strcmp(rep.loss_on, "completion") && rep.n_target_tokens == count_targets(ds, 0) + count_targets(ds, 1),
              "p/c: report");
        free(p), free(cc);
        af_dataset_free(ds);
        ds = NULL;
        o.loss_on = "all";
        CHECK(af_lm_dataset_read(NULL, FIXDIR "good_pc.jsonl", m, &o, &ds) == AF_OK && ds &&
                  count_targets(ds, 1) == af_dataset_len(ds, 1) - 1 && !strcmp(rep.loss_on, "all"),
              "p/c with loss_on all: every token but the first");
        af_dataset_free(ds);
        ds = NULL;
        o.loss_on = NULL;
    }
    /* messages: ids == rendered conversation; targets = assistant content + <|im_end|> */
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_OK, "messages: %s",
          af_last_error());
    if (ds) {
        int32_t im_end = af_tokenizer_find(tok, "<|im_end|>", 10);
        size_t na;
        int32_t *ans = tok_of(tok, "Hello there, how can I help you today?", 0, &na);
        /* sample 1: the targets are exactly the answer's tokens then <|im_end|>, at the end before "\n" */
        const int32_t *s1 = ds->tokens + ds->tok_off[1];
        const uint8_t *m1 = ds->target_mask + ds->tok_off[1];
        int32_t L = af_dataset_len(ds, 1);
        int ok = L > (int32_t)na + 2 && s1[L - 2] == im_end && m1[L - 2] == 1 && m1[L - 1] == 0 &&
                 !memcmp(s1 + L - 2 - na, ans, na * 4) && count_targets(ds, 1) == (int64_t)na + 1;
        CHECK(ok, "messages: assistant content + <|im_end|> are the targets, the trailing newline is not");
        /* sample 0: two assistant turns "4" and "9" -> 2 x (1 + 1) targets */
        CHECK(count_targets(ds, 0) == 4, "messages: two assistant turns -> 4 targets (got %lld)",
              (long long)count_targets(ds, 0));
        CHECK(!strcmp(rep.chat_template, "chatml") && !strcmp(rep.loss_on, "assistant"), "messages: report");
        free(ans);
        /* truncation: keep the first L tokens; an example whose targets are all cut is dropped */
        int32_t first_t = 0;
        while (!m1[first_t]) first_t++;
        af_dataset_free(ds);
        ds = NULL;
        o.max_seq_len = first_t; /* sample 1 loses every target; sample 0 (shorter prefix?) */
        af_status st = af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds);
        if (st == AF_OK) {
            CHECK(rep.n_dropped_cut >= 1 && rep.n_kept + rep.n_dropped_cut == 2 && rep.first_dropped_line >= 1,
                  "truncation: example with every target cut is dropped and counted");
            for (int32_t i = 0; i < ds->n; i++)
                CHECK(af_dataset_len(ds, i) <= first_t, "truncation keeps at most max_seq_len tokens");
        } else {
            CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), "no example left"),
                  "truncation: every example dropped -> error: %s", af_last_error());
        }
        af_dataset_free(ds);
        ds = NULL;
        o.max_seq_len = 3;
        st = af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds);
        CHECK(st == AF_ERR_FORMAT && ds == NULL && strstr(af_last_error(), "no example left: all 2 were dropped"),
              "max_seq_len 3: empty data set after dropping is an error: %s", af_last_error());
        o.max_seq_len = 1024;
    }
    /* conversational prompt/completion: only the completion's assistant turn is a target */
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_chat_pc.jsonl", m, &o, &ds) == AF_OK && ds && count_targets(ds, 0) == 2,
          "chat p/c: only the completion's assistant turn (\"9\" + <|im_end|>) is a target");
    af_dataset_free(ds);
    ds = NULL;

    /* thread-count independence */
    af_ctx_params cp;
    af_ctx_params_default(&cp);
    cp.n_threads = 1;
    af_ctx *c1 = NULL, *c3 = NULL;
    af_ctx_new(&cp, &c1);
    cp.n_threads = 3;
    af_ctx_new(&cp, &c3);
    char big[1 << 16];
    size_t o2 = 0;
    for (int i = 0; i < 200 && o2 + 300 < sizeof big; i++)
        o2 += (size_t)snprintf(big + o2, sizeof big - o2, "{\"messages\": [{\"role\": \"user\", \"content\": \"q%d %s\"}, "
                               "{\"role\": \"assistant\", \"content\": \"answer %d é 😀\"}]}\n", i, i % 3 ? "x" : "", i * 7);
    const char *bp = write_tmp("many.jsonl", big);
    af_dataset *d1 = NULL, *d3 = NULL;
    CHECK(af_lm_dataset_read(c1, bp, m, &o, &d1) == AF_OK && af_lm_dataset_read(c3, bp, m, &o, &d3) == AF_OK &&
              d1->n == 200 && d3->n == 200 && d1->tok_off[200] == d3->tok_off[200] &&
              !memcmp(d1->tokens, d3->tokens, (size_t)d1->tok_off[200] * 4) &&
              !memcmp(d1->target_mask, d3->target_mask, (size_t)d1->tok_off[200]),
          "1 and 3 threads give identical data sets");
    af_dataset_free(d1), af_dataset_free(d3);
    af_ctx_free(c1), af_ctx_free(c3);

    /* the report printer */
    o.report = &rep;
    if (af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_OK) {
        af_lm_data_report_print(&rep, "train data:", stdout);
        af_dataset_free(ds);
        ds = NULL;
    }
    /* template override and option errors */
    o.chat_template = "gemma";
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_OK && ds &&
              !strcmp(rep.chat_template, "gemma"), "chat_template override gemma on SmolLM2 renders");
    af_dataset_free(ds);
    ds = NULL;
    o.chat_template = "vicuna";
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "expected auto, chatml, qwen3, llama3"), "unknown chat_template refused");
    o.chat_template = NULL;
    o.loss_on = "prompt";
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_ERR_INVALID_ARG,
          "unknown loss_on refused");
    o.loss_on = NULL;
    o.max_seq_len = 0;
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_ERR_INVALID_ARG,
          "max_seq_len 0 refused");
}

static void test_gemma_sets(const af_model *m) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    af_lm_data_opts o;
    af_lm_data_opts_init(&o);
    af_dataset *ds = NULL;
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_OK && ds, "gemma messages: %s",
          af_last_error());
    if (ds) {
        int32_t eot = af_tokenizer_find(tok, "<end_of_turn>", 13);
        int32_t L = af_dataset_len(ds, 1);
        const int32_t *s1 = ds->tokens + ds->tok_off[1];
        const uint8_t *m1 = ds->target_mask + ds->tok_off[1];
        CHECK(s1[0] == af_token_bos(tok) && m1[0] == 0, "gemma: BOS first, not a target");
        CHECK(s1[L - 2] == eot && m1[L - 2] && !m1[L - 1] && count_targets(ds, 0) == 4,
              "gemma: <end_of_turn> is a target, the newline after it is not");
        af_dataset_free(ds);
        ds = NULL;
    }
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_text.jsonl", m, &o, &ds) == AF_OK && ds && ds->n == 3 &&
              ds->tokens[0] == af_token_bos(tok) && ds->tokens[ds->tok_off[1] - 1] == af_token_eos(tok) &&
              af_dataset_len(ds, 1) == 2,
          "gemma text: BOS ... EOS; the empty text keeps BOS + EOS (EOS is a target)");
    af_dataset_free(ds);
}

static void test_unknown_template(void) {
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    const char *extra[2] = {"ab", "<|endoftext|>"};
    const char *merges[1] = {"a b"};
    s.vocab = 258;
    char path[512];
    snprintf(path, sizeof path, "%s/tiny.gguf", g_dir);
    af_model *m = NULL;
    if (tm_write_bpe(&s, path, extra, 2, merges, 1) != AF_OK || af_model_load(NULL, path, &m) != AF_OK) {
        CHECK(0, "tiny model with a tokenizer: %s", af_last_error());
        return;
    }
    af_lm_data_opts o;
    af_lm_data_opts_init(&o);
    af_dataset *ds = NULL;
    af_status st = af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds);
    CHECK(st == AF_ERR_UNSUPPORTED && strstr(af_last_error(), "--chat-template NAME") &&
              !strncmp(af_last_error(), FIXDIR "good_messages.jsonl: ", strlen(FIXDIR) + 20),
          "no recognisable template: refused naming --chat-template (%s)", af_last_error());
    o.chat_template = "chatml";
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_messages.jsonl", m, &o, &ds) == AF_OK && ds && ds->n == 2,
          "--chat-template chatml renders anyway: %s", af_last_error());
    af_dataset_free(ds);
    ds = NULL;
    o.chat_template = NULL;
    CHECK(af_lm_dataset_read(NULL, FIXDIR "good_pc.jsonl", m, &o, &ds) == AF_OK && ds,
          "string prompt/completion needs no template");
    af_dataset_free(ds);
    char *p = NULL;
    CHECK(af_chat_format(m, NULL, "hi", &p) == AF_ERR_UNSUPPORTED && !p, "af_chat_format: unknown template refused");
    af_model_free(m);
}

/* A byte-level BPE tokenizer (tinymodel's) whose GGUF carries `tmpl` as tokenizer.chat_template. */
static af_tokenizer *tok_with_template(const char *tmpl) {
    const char *extra[2] = {"ab", "<|endoftext|>"};
    const char *merges[1] = {"a b"};
    tm_bpe b = {extra, merges, 2, 1};
    char path[512];
    snprintf(path, sizeof path, "%s/tok.gguf", g_dir);
    af_gguf_writer *w = NULL;
    af_gguf *g = NULL;
    af_tokenizer *tok = NULL;
    if (af_gguf_writer_new(&w) == AF_OK && tm_add_bpe(w, &b) == AF_OK &&
        af_gguf_writer_add_str(w, "tokenizer.chat_template", tmpl) == AF_OK &&
        af_gguf_writer_write_file(w, path) == AF_OK && af_gguf_open(path, &g) == AF_OK)
        af_tokenizer_load(g, &tok);
    af_gguf_close(g);
    af_gguf_writer_free(w);
    return tok;
}

/* Template recognition on synthetic templates (our own texts, shaped like the families'). */
static void test_template_families(void) {
    /* ChatML whose first "<|im_start|>system\n" is followed by Jinja and a later one by a literal
       default system prompt (the shape of Qwen2.5's template) */
    af_tokenizer *tok = tok_with_template(
        "{%- if tools %}{{- '<|im_start|>system\n' }}{{- tools | tojson }}{%- else %}"
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + "
        "'<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are a test assistant.<|im_end|>\n' }}"
        "{%- endif %}{%- endif %}{%- for m in messages %}...{%- endfor %}");
    CHECK(tok != NULL, "tokenizer with a chat template: %s", af_last_error());
    if (!tok) return;
    af_chat_family fam = AF_CHAT_NONE;
    af_chat_msg m[2] = {{AF_ROLE_USER, "q", 1}, {AF_ROLE_ASSISTANT, "a", 1}};
    af_chat_doc d = {0};
    CHECK(af_chat_family_of(tok, NULL, &fam) == AF_OK && fam == AF_CHAT_CHATML &&
              af_chat_render(tok, fam, m, 2, 0, 0, &d) == AF_OK &&
              !strcmp(d.text, "<|im_start|>system\nYou are a test assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>"
                              "\n<|im_start|>assistant\na<|im_end|>\n"),
          "ChatML: the template's literal default system prompt is found past a Jinja one (%s)", d.text ? d.text : "-");
    af_chat_doc_free(&d);
    af_tokenizer_free(tok);
    /* a template with reasoning blocks, and one of another family, are refused naming the override */
    const char *refused[2] = {"{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' }}",
                              "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"};
    for (int k = 0; k < 2; k++) {
        tok = tok_with_template(refused[k]);
        CHECK(tok && af_chat_family_of(tok, NULL, &fam) == AF_ERR_UNSUPPORTED &&
                  strstr(af_last_error(), "--chat-template NAME") && strstr(af_last_error(), "nearest family"),
              "template %d refused naming --chat-template: %s", k, af_last_error());
        CHECK(tok && af_chat_family_of(tok, "gemma", &fam) == AF_OK && fam == AF_CHAT_GEMMA, "override wins");
        af_tokenizer_free(tok);
    }
}

static void test_model(const char *file, int gemma) {
    const char *path = tl_model_path(file);
    if (!path) return;
    af_model *m = NULL;
    if (af_model_load(NULL, path, &m) != AF_OK) {
        CHECK(0, "load %s: %s", file, af_last_error());
        return;
    }
    const af_tokenizer *tok = af_model_tokenizer(m);
    check_chat_fixture(tok, gemma ? "tests/fixtures/chat_ids_gemma3.txt" : "tests/fixtures/chat_ids_smollm2.txt",
                       gemma ? "gemma3" : "smollm2");
    test_bad_read(m, gemma);
    if (gemma)
        test_gemma_sets(m);
    else
        test_smollm2_sets(m);
    af_model_free(m);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("test_lm_data");
    }
    test_bad_parse();
    test_unknown_template();
    test_template_families();
    test_model("SmolLM2-135M-Instruct.Q4_1.gguf", 0);
    test_model("gemma-3-270m-Q4_K_M.gguf", 1);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tl_finish("test_lm_data");
}
