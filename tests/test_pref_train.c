/*
 * test_pref_train.c — preference tuning as a training task (`afinar train --task dpo|orpo`):
 *   1. the preference reader (src/formats/pref_jsonl.c): TRL's explicit and implicit prompts, strings
 *      and conversations, CSV; the implicit prompt's rules (a space before the first difference, a
 *      UTF-8 character never split, equal sides); every refusal names file, line and field;
 *   2. af_pref_dataset_read on a tiny model with a byte-level BPE tokenizer: pairs kept or dropped
 *      whole, the pair report (identical pairs, prompts that fill max_seq_len, lengths);
 *   3. trainer-level parity: 4 optimizer steps of the af_trainer (what `afinar train --task dpo|orpo`
 *      runs) on the tiny random llama and qwen2 of tests/fixtures/hf_tiny_*: the loss, rewards/margins and
 *      logps/chosen of every step equal those of PyTorch + PEFT + TRL's loss expressions with the same
 *      LoRA initialisation (tests/ref/make_pref_train_ref.py -> tests/fixtures/pref_train_ref.bin), for
 *      DPO sigmoid, IPO and ORPO, and for DPO with the step's pairs over 3 accumulated micro-batches;
 *   4. exact resume (stop after 2 steps, resume: the final adapter byte-identical), reference
 *      log-probabilities on the fly (--no-precompute-ref) giving the same bits as the cached ones, the
 *      run on the guard device (every device access through the backend table) giving the CPU's bits,
 *      evaluation lines with TRL's names, the pair-wise --val-split, and the refusals.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "formats/pref_jsonl.h"
#include "train/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peft_fixture.h"

static char g_dir[256];

static const char *path_in(const char *name) {
    static char buf[8][600];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static const char *write_file(const char *name, const char *text) {
    const char *p = path_in(name);
    FILE *f = fopen(p, "w");
    if (f) fputs(text, f), fclose(f);
    return p;
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = tl_read_file(a, &la), *y = tl_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x), free(y);
    return eq;
}

/* the error of reading `text` as a preference file contains `want` (and the file:line prefix) */
static void refused(const char *name, const char *text, const char *want) {
    const char *p = write_file(name, text);
    af_lm_corpus *c = NULL;
    af_status st = af_pref_corpus_read(p, -1, 0, &c, NULL);
    CHECK(st == AF_ERR_FORMAT && !c && strstr(af_last_error(), want) && strstr(af_last_error(), p),
          "%s refused with '%s': %s", name, want, af_last_error());
    af_lm_corpus_free(c);
}

static int ex_is(const af_lm_example *e, const char *prompt, const char *completion) {
    return e->format == AF_LM_PROMPT_COMPLETION && !strcmp(e->text, prompt) && e->text_len == strlen(prompt) &&
           !strcmp(e->completion, completion) && e->completion_len == strlen(completion);
}

/* 1 */
static void test_reader(void) {
    af_lm_corpus *c = NULL;
    af_pref_format f = 0;
    const char *p = write_file("explicit.jsonl", "{\"prompt\": \"P1\", \"chosen\": \" good\", \"rejected\": \" bad\", \"x\": 1}\n\n"
                                                 "{\"prompt\": \"P2\", \"chosen\": \"c\", \"rejected\": \"r\"}\n");
    if (CHECK(af_pref_corpus_read(p, -1, 0, &c, &f) == AF_OK && c->n == 4 && f == AF_PREF_EXPLICIT, "explicit: %s",
              af_last_error()))
        CHECK(ex_is(&c->ex[0], "P1", " good") && ex_is(&c->ex[1], "P1", " bad") && ex_is(&c->ex[2], "P2", "c") &&
                  ex_is(&c->ex[3], "P2", "r") && c->ex[0].line_no == 1 && c->ex[1].line_no == 1 && c->ex[3].line_no == 3,
              "explicit: chosen / rejected sides in order, with their line numbers");
    af_lm_corpus_free(c);
    p = write_file("implicit.jsonl", "{\"chosen\": \"The answer is yes\", \"rejected\": \"The answer is no\"}\n"
                                     "{\"chosen\": \"caf\\u00e9 ok\", \"rejected\": \"caf\\u00e8 ok\"}\n"
                                     "{\"chosen\": \"abc\", \"rejected\": \"abc\"}\n"
                                     "{\"chosen\": \"x\", \"rejected\": \"y\"}\n");
    if (CHECK(af_pref_corpus_read(p, -1, 0, &c, &f) == AF_OK && c->n == 8 && f == AF_PREF_IMPLICIT, "implicit: %s",
              af_last_error())) {
        CHECK(ex_is(&c->ex[0], "The answer is", " yes") && ex_is(&c->ex[1], "The answer is", " no"),
              "implicit: the common prefix, the space before the difference goes to the completions");
        CHECK(ex_is(&c->ex[2], "caf", "\xc3\xa9 ok") && ex_is(&c->ex[3], "caf", "\xc3\xa8 ok"),
              "implicit: the prefix never splits a UTF-8 character");
        CHECK(ex_is(&c->ex[4], "ab", "c") && ex_is(&c->ex[5], "ab", "c"), "implicit: equal sides keep their last character");
        CHECK(ex_is(&c->ex[6], "", "x") && ex_is(&c->ex[7], "", "y"), "implicit: no common prefix, an empty prompt");
    }
    af_lm_corpus_free(c);
    p = write_file("chat.jsonl",
                   "{\"prompt\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Q\"}], "
                   "\"chosen\": [{\"role\": \"assistant\", \"content\": \"A\"}], \"rejected\": [{\"role\": \"assistant\", "
                   "\"content\": \"B\"}]}\n");
    if (CHECK(af_pref_corpus_read(p, -1, 0, &c, &f) == AF_OK && c->n == 2 && f == AF_PREF_CHAT, "chat: %s", af_last_error()))
        CHECK(c->ex[0].format == AF_LM_CHAT_PC && c->ex[0].n_msgs == 3 && c->ex[0].n_prompt_msgs == 2 &&
                  !strcmp(c->ex[0].msgs[2].content, "A") && !strcmp(c->ex[1].msgs[2].content, "B") &&
                  !strcmp(c->ex[1].msgs[1].content, "Q") && c->ex[1].msgs[2].role == AF_ROLE_ASSISTANT,
              "chat: prompt messages then each side's completion");
    af_lm_corpus_free(c);
    p = write_file("chat_implicit.jsonl",
                   "{\"chosen\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"hello\"}], "
                   "\"rejected\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"go\"}]}\n");
    if (CHECK(af_pref_corpus_read(p, -1, 0, &c, &f) == AF_OK && c->n == 2 && f == AF_PREF_CHAT_IMPLICIT,
              "chat implicit: %s", af_last_error()))
        CHECK(c->ex[0].n_msgs == 2 && c->ex[0].n_prompt_msgs == 1 && !strcmp(c->ex[0].msgs[1].content, "hello") &&
                  !strcmp(c->ex[1].msgs[1].content, "go") && !strcmp(c->ex[1].msgs[0].content, "hi"),
              "chat implicit: the common first messages are the prompt");
    af_lm_corpus_free(c);
    p = write_file("pairs.csv", "prompt,chosen,rejected,score\nQ1,yes,no,3\n\"Q2, long\",\"a\",\"b\",1\n");
    if (CHECK(af_pref_corpus_read(p, -1, 0, &c, &f) == AF_OK && c->n == 4 && f == AF_PREF_EXPLICIT, "csv: %s", af_last_error()))
        CHECK(ex_is(&c->ex[0], "Q1", "yes") && ex_is(&c->ex[3], "Q2, long", "b") && c->ex[2].line_no == 3,
              "csv: columns prompt, chosen, rejected");
    af_lm_corpus_free(c);
    /* refusals: file, line and field named */
    refused("no_rejected.jsonl", "{\"prompt\": \"p\", \"chosen\": \"c\"}\n", ":1: field 'rejected': missing");
    refused("sft.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n", "use --task causal-lm");
    refused("kinds.jsonl", "{\"chosen\": \"c\", \"rejected\": [{\"role\": \"assistant\", \"content\": \"r\"}]}\n",
            ":1: field 'rejected': expected a string like 'chosen'");
    refused("prompt_kind.jsonl", "{\"prompt\": 3, \"chosen\": \"c\", \"rejected\": \"r\"}\n", "field 'prompt': expected a string");
    refused("mixed.jsonl", "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"r\"}\n{\"chosen\": \"c\", \"rejected\": \"r\"}\n",
            ":2: field 'chosen': line is 'chosen/rejected (implicit prompt)' but line 1 is 'prompt/chosen/rejected'");
    refused("no_assistant.jsonl",
            "{\"prompt\": [{\"role\": \"user\", \"content\": \"x\"}], \"chosen\": [{\"role\": \"user\", \"content\": \"y\"}], "
            "\"rejected\": [{\"role\": \"assistant\", \"content\": \"z\"}]}\n",
            ":1: field 'chosen': no assistant message after the prompt");
    refused("bad_role.jsonl",
            "{\"chosen\": [{\"role\": \"robot\", \"content\": \"y\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"z\"}]}\n",
            ":1: field 'chosen[0].role': unknown role");
    refused("bad_json.jsonl", "{\"chosen\": \"c\", \"rejected\": \n", ":1: invalid JSON");
    refused("empty.jsonl", "\n\n", "no preference pairs");
}

/* 2 */
static void test_dataset(void) {
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    const char *extra[2] = {"ab", "<|endoftext|>"};
    const char *merges[1] = {"a b"};
    s.vocab = 258;
    af_model *m = NULL;
    if (!CHECK(tm_write_bpe(&s, path_in("tiny.gguf"), extra, 2, merges, 1) == AF_OK &&
                   af_model_load(NULL, path_in("tiny.gguf"), &m) == AF_OK,
               "tiny model with a tokenizer: %s", af_last_error()))
        return;
    const char *p = write_file("ds.jsonl", "{\"prompt\": \"ab\", \"chosen\": \"cd\", \"rejected\": \"efgh\"}\n"
                                           "{\"prompt\": \"abcdefghijklmnopqrstuvwxyz\", \"chosen\": \"c\", \"rejected\": \"d\"}\n"
                                           "{\"prompt\": \"x\", \"chosen\": \"same\", \"rejected\": \"same\"}\n"
                                           "{\"prompt\": \"y\", \"chosen\": \"a long answer here\", \"rejected\": \"no\"}\n");
    af_lm_data_opts o;
    af_lm_data_opts_init(&o);
    o.max_seq_len = 12;
    af_lm_data_report lr;
    o.report = &lr;
    af_pref_data_report pr;
    af_dataset *ds = NULL;
    if (CHECK(af_pref_dataset_read(NULL, p, m, &o, &pr, &ds) == AF_OK && ds, "read: %s", af_last_error())) {
        CHECK(ds->pairs == 1 && ds->n == 6 && pr.n_read == 4 && pr.n_kept == 3 && pr.n_prompt_too_long == 1 &&
                  pr.first_dropped_line == 2 && ds->line_no[2] == 3 && ds->line_no[3] == 3,
              "the pair whose prompt fills max_seq_len is dropped whole (%d pairs kept, %d too long, %d sides)", pr.n_kept,
              pr.n_prompt_too_long, ds->n);
        CHECK(pr.n_identical == 1 && pr.first_identical_line == 3 && pr.n_length_far == 1,
              "report: 1 identical pair (line 3), 1 pair with one side over twice the other (%d, %d)", pr.n_identical,
              pr.n_length_far);
        CHECK(!strcmp(lr.format, "prompt/chosen/rejected") && lr.n_read == 8 && lr.n_kept == 6,
              "the sides' report: format %s, %d read, %d kept", lr.format, lr.n_read, lr.n_kept);
        int targets_ok = 1;
        for (int32_t i = 0; i < ds->n; i++) targets_ok &= af_dataset_n_targets(ds, i) > 0;
        CHECK(targets_ok, "every kept side has completion targets");
        FILE *tf = tmpfile();
        if (tf) {
            af_pref_data_report_print(&pr, 12, "pairs", tf);
            rewind(tf);
            char buf[2048] = "";
            size_t k = fread(buf, 1, sizeof buf - 1, tf);
            buf[k] = 0;
            CHECK(strstr(buf, "chosen == rejected (first at line 3)") && strstr(buf, "raise --max-seq-len"),
                  "the report warns of identical pairs and long prompts");
            fclose(tf);
        }
    }
    af_dataset_free(ds);
    ds = NULL;
    o.loss_on = "all";
    CHECK(af_pref_dataset_read(NULL, p, m, &o, &pr, &ds) == AF_ERR_INVALID_ARG && !ds, "loss_on all refused for pairs: %s",
          af_last_error());
    af_model_free(m);
}

/* ---- 3, 4: the trainer ---- */
typedef struct fixture {
    char *buf;
    uint32_t n, r, steps, ntok;
    double lr;
    const int32_t *ss, *tok, *mask;
    rd rest;
} fixture;

static int load_fixture(fixture *F, const char *path) {
    size_t len = 0;
    F->buf = tl_read_file(path, &len);
    if (!CHECK(F->buf != NULL, "fixture %s missing (tests/ref/make_pref_train_ref.py)", path)) return 0;
    rd r = {(const unsigned char *)F->buf, (const unsigned char *)F->buf + len};
    const void *magic = take(&r, 4);
    const uint32_t ver = u32(&r);
    F->n = u32(&r), F->r = u32(&r), F->steps = u32(&r), F->lr = f64(&r), F->ntok = u32(&r);
    if (!CHECK(magic && !memcmp(magic, "AFPT", 4) && ver == 1 && F->n >= 1 && F->n <= 16 && F->steps >= 1 && F->steps <= 16 &&
                   F->ntok < 4096,
               "pref_train_ref.bin: header"))
        return 0;
    F->ss = take(&r, 4 * (size_t)(2 * F->n + 1));
    F->tok = take(&r, 4 * (size_t)F->ntok);
    F->mask = take(&r, 4 * (size_t)F->ntok);
    F->rest = r;
    return CHECK(F->ss && F->tok && F->mask, "pref_train_ref.bin: body");
}

static af_dataset *fixture_set(const fixture *F) {
    int64_t off[33];
    uint8_t *mk = malloc(F->ntok);
    for (uint32_t i = 0; i <= 2 * F->n; i++) off[i] = F->ss[i];
    for (uint32_t i = 0; i < F->ntok; i++) mk[i] = (uint8_t)F->mask[i];
    af_dataset *ds = NULL;
    af_status st = af_dataset_from_tokens_lm(F->tok, off, (int32_t)(2 * F->n), mk, 64, &ds);
    free(mk);
    if (!CHECK(st == AF_OK, "pairs from tokens: %s", af_last_error())) return NULL;
    ds->pairs = 1;
    return ds;
}

static void pref_opts(af_trainer_opts *o, const af_model *m, const af_dataset *tr, af_task task, const fixture *F, const char *out) {
    af_trainer_opts_defaults(o);
    o->task = task;
    o->model = m;
    o->train_data = tr;
    o->output_dir = out;
    o->overwrite = 1;
    o->targets = "all-linear";
    o->lora_layers = "all";
    o->lora_r = (int32_t)F->r;
    o->lora_alpha = 2.0 * F->r;
    o->lora_dropout = 0;
    o->lr = F->lr;
    o->schedule = AF_SCHED_CONSTANT;
    o->warmup_steps = 0;
    o->max_grad_norm = 0;
    o->batch = (int32_t)F->n;
    o->grad_accum = 1;
    o->max_seq_len = 64;
    o->max_steps = F->steps;
    o->threads = 1;
    o->plot = 0;
    o->save_total_limit = 0;
    o->log = getenv("TL_VERBOSE") ? stderr : NULL;
    o->progress_tty = 0;
}

static af_status run_opts(const af_trainer_opts *o, af_train_result *res) {
    af_trainer *t = NULL;
    af_status st = af_trainer_new(o, &t);
    if (st == AF_OK) st = af_trainer_run(t, res);
    af_trainer_free(t);
    return st;
}

/* the value of "key" in each train (or eval) line of DIR/metrics.jsonl into v[] (at most cap); count */
static int metric(const char *dir, const char *type, const char *key, double *v, int cap) {
    char path[700], pat[96], tp[64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    snprintf(tp, sizeof tp, "\"type\":\"%s\"", type);
    char *b = tl_read_file(path, NULL);
    int n = 0;
    for (char *l = b ? strtok(b, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        const char *q = strstr(l, tp) ? strstr(l, pat) : NULL;
        if (q && n < cap) v[n++] = strtod(q + strlen(pat), NULL);
    }
    free(b);
    return n;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-3); }

static void test_parity(const af_model *m, fixture *F, const af_dataset *ds, const char *arch) {
    rd r = F->rest;
    const uint32_t n_types = u32(&r);
    const char *names[3] = {"dpo sigmoid", "ipo", "orpo"};
    for (uint32_t k = 0; k < n_types && k < 4; k++) {
        const uint32_t type = u32(&r);
        const double beta = f64(&r);
        double want[3][16];
        for (int q = 0; q < 3; q++)
            for (uint32_t s = 0; s < F->steps; s++) want[q][s] = f64(&r);
        if (!CHECK(type <= 2 && isfinite(beta), "fixture entry %u", k)) return;
        for (int accum = 0; accum < (type == 0 ? 2 : 1); accum++) {
            char out[64];
            snprintf(out, sizeof out, "parity_%s_%u_%d", arch, type, accum);
            af_trainer_opts o;
            af_train_result res;
            pref_opts(&o, m, ds, type == 2 ? AF_TASK_ORPO : AF_TASK_DPO, F, path_in(out));
            o.pref_loss_type = type == 1;
            o.pref_beta = beta;
            if (accum) o.batch = 1, o.grad_accum = (int32_t)F->n;
            if (!CHECK(run_opts(&o, &res) == AF_OK && res.steps_done == (int64_t)F->steps, "%s run: %s", names[type],
                       af_last_error()))
                continue;
            double got[3][16];
            const char *keys[3] = {"loss", "rewards/margins", "logps/chosen"};
            int cnt = 1;
            for (int q = 0; q < 3; q++) cnt &= metric(path_in(out), "train", keys[q], got[q], 16) == (int)F->steps;
            if (!CHECK(cnt, "%s: %u train lines with loss, rewards/margins, logps/chosen", names[type], F->steps)) continue;
            double worst = 0;
            for (int q = 0; q < 3; q++)
                for (uint32_t s = 0; s < F->steps; s++)
                    worst = fmax(worst, q == 1 ? fabs(got[q][s] - want[q][s]) / fmax(fabs(want[q][s]), 1e-2)
                                               : rel(got[q][s], want[q][s]));
            CHECK(worst < 2e-4, "%s %s%s: %u steps' loss, rewards/margins, logps/chosen vs PyTorch + PEFT + TRL's loss: worst "
                  "rel %.2e (losses %.6f .. %.6f, reference %.6f .. %.6f)", arch, names[type],
                  accum ? " (3 accumulated micro-batches)" : "", F->steps, worst, got[0][0], got[0][F->steps - 1],
                  want[0][0], want[0][F->steps - 1]);
            printf("  %s %s%s: step losses %.6f -> %.6f (reference %.6f -> %.6f), worst rel %.2e\n", arch, names[type],
                   accum ? " accum" : "", got[0][0], got[0][F->steps - 1], want[0][0], want[0][F->steps - 1], worst);
        }
    }
}

static void test_run_features(const af_model *m, const fixture *F, af_dataset *ds) {
    af_trainer_opts o;
    af_train_result res;
    /* exact resume */
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("res_a"));
    CHECK(run_opts(&o, &res) == AF_OK, "res_a: %s", af_last_error());
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("res_b"));
    o.stop_after = 2;
    CHECK(run_opts(&o, &res) == AF_OK && res.stop == AF_STOP_INTERRUPTED && res.steps_done == 2, "res_b stopped: %s",
          af_last_error());
    pref_opts(&o, m, ds, AF_TASK_DPO, F, NULL);
    o.overwrite = 0;
    o.resume = path_in("res_b");
    CHECK(run_opts(&o, &res) == AF_OK && res.steps_done == (int64_t)F->steps, "res_b resumed: %s", af_last_error());
    CHECK(files_equal(path_in("res_a/final/adapter_model.safetensors"), path_in("res_b/final/adapter_model.safetensors")),
          "dpo: the final adapter after a resume is byte-identical to the uninterrupted run's");
    /* reference on the fly */
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("fly"));
    o.precompute_ref = 0;
    CHECK(run_opts(&o, &res) == AF_OK, "fly: %s", af_last_error());
    CHECK(files_equal(path_in("res_a/final/adapter_model.safetensors"), path_in("fly/final/adapter_model.safetensors")),
          "reference log-probabilities on the fly give the cached run's bits");
    /* the same run on the guard device (device memory PROT_NONE between the backend table's ops: a host
       access outside the table kills this program) ends with the CPU run's bits */
    if (CHECK(tl_ctx_set_device("guard") == AF_OK, "guard context: %s", af_last_error())) {
        af_model *g = NULL;
        if (CHECK(af_model_load(T_CTX, "tests/fixtures/hf_tiny_llama", &g) == AF_OK, "tiny llama on guard: %s", af_last_error())) {
            pref_opts(&o, g, ds, AF_TASK_DPO, F, path_in("guard"));
            CHECK(run_opts(&o, &res) == AF_OK, "guard run: %s", af_last_error());
            CHECK(files_equal(path_in("res_a/final/adapter_model.safetensors"), path_in("guard/final/adapter_model.safetensors")),
                  "dpo on the guard device: the final adapter equals the CPU run's");
        }
        af_model_free(g);
        tl_ctx_set_device("cpu");
    }
    /* evaluation on a validation set, best on eval_loss */
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("eval"));
    o.val_data = ds;
    o.eval_every = 2;
    double acc[8], loss[8];
    if (CHECK(run_opts(&o, &res) == AF_OK, "eval run: %s", af_last_error())) {
        const int ne = metric(path_in("eval"), "eval", "eval_rewards/accuracies", acc, 8);
        metric(path_in("eval"), "eval", "eval_loss", loss, 8);
        CHECK(ne == 2 && acc[1] >= 0 && acc[1] <= 1 && loss[1] < loss[0] && res.best_step == (int64_t)F->steps &&
                  fabs(res.best_eval_loss - loss[1]) < 1e-6,
              "2 eval lines with eval_rewards/accuracies (%.3f) and a falling eval_loss (%.5f -> %.5f), best on it",
              ne ? acc[ne - 1] : -1, loss[0], loss[1]);
    }
    /* the pair-wise validation split */
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("split"));
    o.val_split = 0.34;
    o.max_steps = 1;
    double vp[2];
    CHECK(run_opts(&o, &res) == AF_OK && metric(path_in("split"), "eval", "eval_pairs", vp, 2) == 1 && vp[0] == 1,
          "--val-split 0.34 of 3 pairs holds out 1 whole pair: %s", af_last_error());
    /* the reference with the LoRA variants is the base model (the identity adapter, not zeros): at
     * step 1 the untrained DoRA / PiSSA / OLoRA adapter is the base, so the rewards are 0 and the
     * loss is log 2 */
    const char *vname[3] = {"dora", "pissa", "olora"};
    for (int v = 0; v < 3; v++) {
        pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in(vname[v]));
        o.max_steps = 1;
        if (v == 0) o.use_dora = 1;
        else o.init_lora_weights = v == 1 ? 2 : 3;
        double rc[2] = {1, 1}, lo[2] = {0, 0};
        const int ok = run_opts(&o, &res) == AF_OK && metric(path_in(vname[v]), "train", "rewards/chosen", rc, 2) == 1 &&
                       metric(path_in(vname[v]), "train", "loss", lo, 2) == 1;
        CHECK(ok && fabs(rc[0]) < 1e-5 && fabs(lo[0] - log(2.0)) < 1e-5,
              "dpo with %s: step 1 rewards/chosen %.3g, loss %.7f (the reference is the base model): %s", vname[v], rc[0],
              lo[0], ok ? "" : af_last_error());
    }
    /* refusals */
    pref_opts(&o, m, ds, AF_TASK_CAUSAL_LM, F, path_in("bad"));
    CHECK(run_opts(&o, &res) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "use --task dpo or orpo"),
          "pairs given to causal-lm refused: %s", af_last_error());
    ds->pairs = 0;
    pref_opts(&o, m, ds, AF_TASK_DPO, F, path_in("bad"));
    CHECK(run_opts(&o, &res) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "holds no preference pairs"),
          "a causal-LM set given to dpo refused: %s", af_last_error());
    ds->pairs = 1;
    pref_opts(&o, m, ds, AF_TASK_CAUSAL_LM, F, path_in("bad"));
    o.pref_loss_type = 1;
    CHECK(run_opts(&o, &res) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "--loss-type applies to --task dpo"),
          "--loss-type on causal-lm refused: %s", af_last_error());
    pref_opts(&o, m, ds, AF_TASK_ORPO, F, path_in("bad"));
    o.label_smoothing = 0.1;
    CHECK(run_opts(&o, &res) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "--label-smoothing"),
          "--label-smoothing on orpo refused: %s", af_last_error());
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_pref_%ld", (long)getpid());
    if (!CHECK(mkdir(g_dir, 0777) == 0, "mkdir %s", g_dir)) return tl_finish("test_pref_train");
    test_reader();
    test_dataset();
    const char *arch[2] = {"llama", "qwen2"};
    for (int a = 0; a < 2; a++) {
        fixture F = {0};
        af_model *m = NULL;
        char fx[128], md[128];
        snprintf(fx, sizeof fx, "tests/fixtures/pref_train_ref%s%s.bin", a ? "_" : "", a ? arch[a] : "");
        snprintf(md, sizeof md, "tests/fixtures/hf_tiny_%s", arch[a]);
        if (load_fixture(&F, fx) && CHECK(af_model_load(T_CTX, md, &m) == AF_OK, "load %s: %s", md, af_last_error())) {
            af_dataset *ds = fixture_set(&F);
            if (ds) {
                test_parity(m, &F, ds, arch[a]);
                if (a == 0) test_run_features(m, &F, ds);
            }
            af_dataset_free(ds);
        }
        af_model_free(m);
        free(F.buf);
    }
    if (!tl_failed && !getenv("TL_KEEP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) printf("could not remove %s\n", g_dir);
    } else
        printf("test files kept in %s\n", g_dir);
    return tl_finish("test_pref_train");
}
