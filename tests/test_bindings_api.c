/* test_bindings_api — the two functions the Python package needs beyond the rest of the API:
 *  - af_chat_apply_template: a one-user-turn conversation renders as af_chat_format does, a
 *    multi-turn one as training renders it (ChatML turns, no generation prompt when asked), and bad
 *    arguments (unknown role, NUL inside a content, no message, unknown template) are refused;
 *  - af_train_settings_run: missing model / train / output refused naming the setting, a dry run
 *    returns its diagnostics as JSON, a 2-step run gives the result JSON and the adapter files,
 *    the progress callback sees every step, an interrupt flag set from the callback stops after the
 *    step with a checkpoint, and "resume" continues that run to its end.
 * Runs on SmolLM2 (skipped when models/ lacks it). */
#include "afinar_app.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/af_bindings_XXXXXX";

static void test_chat(const af_model *m) {
    char *a = NULL, *b = NULL;
    const char *roles1[] = {"user"}, *cont1[] = {"Hi there"};
    size_t lens1[] = {8};
    CHECK(af_chat_apply_template(m, NULL, roles1, cont1, lens1, 1, 1, &a) == AF_OK, "one user turn: %s",
          af_last_error());
    CHECK(af_chat_format(m, NULL, "Hi there", &b) == AF_OK, "af_chat_format");
    CHECK(a && b && !strcmp(a, b), "one user turn renders as af_chat_format");
    free(a);
    free(b);
    a = NULL;
    const char *roles3[] = {"system", "user", "assistant"}, *cont3[] = {"S", "Q", "A"};
    size_t lens3[] = {1, 1, 1};
    CHECK(af_chat_apply_template(m, NULL, roles3, cont3, lens3, 3, 0, &a) == AF_OK, "three turns");
    const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA"
                       "<|im_end|>\n";
    CHECK(a && !strcmp(a, want), "three turns, ChatML, no generation prompt: got '%s'", a ? a : "(null)");
    free(a);
    a = NULL;
    CHECK(af_chat_apply_template(m, NULL, roles3, cont3, lens3, 2, 1, &a) == AF_OK && a &&
              strstr(a, "<|im_start|>assistant\n") == a + strlen(a) - strlen("<|im_start|>assistant\n"),
          "generation prompt ends with the assistant header");
    free(a);
    a = NULL;
    const char *bad_role[] = {"robot"};
    CHECK(af_chat_apply_template(m, NULL, bad_role, cont1, lens1, 1, 1, &a) == AF_ERR_INVALID_ARG && !a &&
              strstr(af_last_error(), "messages[0]") && strstr(af_last_error(), "robot"),
          "unknown role refused naming it: %s", af_last_error());
    const char nul_content[] = "a\0b";
    const char *cont_nul[] = {nul_content};
    size_t len_nul[] = {3};
    CHECK(af_chat_apply_template(m, NULL, roles1, cont_nul, len_nul, 1, 1, &a) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "NUL"),
          "NUL inside a content refused: %s", af_last_error());
    CHECK(af_chat_apply_template(m, NULL, roles1, cont1, lens1, 0, 1, &a) == AF_ERR_INVALID_ARG, "no message");
    CHECK(af_chat_apply_template(m, "klingon", roles1, cont1, lens1, 1, 1, &a) != AF_OK, "unknown template");
    CHECK(af_chat_apply_template(m, "gemma", roles1, cont1, lens1, 1, 1, &a) == AF_OK && a &&
              strstr(a, "<start_of_turn>user\nHi there"),
          "template override gemma");
    free(a);
}

typedef struct {
    int calls, last;
    volatile int *stop_flag; /* set after step 1 when not NULL */
} progress_log;

static void on_progress(void *user, const char *phase, int64_t cur, int64_t tot) {
    progress_log *p = user;
    if (strcmp(phase, "train")) return;
    p->calls++;
    p->last = (int)cur;
    if (p->stop_flag && cur == 1) *p->stop_flag = 1;
}

static af_train_settings *settings(const char *model, const char *train, const char *out) {
    af_train_settings *s = NULL;
    CHECK(af_train_settings_new(&s) == AF_OK, "settings");
    const char *kv[][2] = {{"recipe", "fixed"},   {"max-steps", "3"}, {"batch", "2"},         {"grad-accum", "1"},
                           {"max-seq-len", "16"}, {"lora-layers", "top2"}, {"threads", "2"}, {"save-every", "1"}};
    if (model) af_train_settings_set(s, "model", model);
    if (train) af_train_settings_set(s, "train", train);
    if (out) af_train_settings_set(s, "output", out);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) af_train_settings_set(s, kv[i][0], kv[i][1]);
    af_train_settings_set_bool(s, "plot", 0);
    return s;
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void test_train(const char *model) {
    const char *train = tl_join(g_dir, "train.jsonl");
    FILE *f = fopen(train, "w");
    if (!f) {
        CHECK(0, "write %s", train);
        return;
    }
    for (int i = 0; i < 8; i++)
        fprintf(f, "{\"input\": \"%s %d\", \"label\": \"%s\"}\n", i % 2 ? "great film" : "awful film", i,
                i % 2 ? "pos" : "neg");
    fclose(f);
    char *js = NULL;
    af_train_settings *s = settings(NULL, train, tl_join(g_dir, "run"));
    CHECK(af_train_settings_run(s, NULL, 0, &js) == AF_ERR_INVALID_ARG && !js && strstr(af_last_error(), "\"model\""),
          "no model: refused naming the setting: %s", af_last_error());
    af_train_settings_free(s);
    s = settings(model, NULL, tl_join(g_dir, "run"));
    CHECK(af_train_settings_run(s, NULL, 0, &js) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "\"train\""),
          "no train data: refused: %s", af_last_error());
    af_train_settings_free(s);
    s = settings(model, train, NULL);
    CHECK(af_train_settings_run(s, NULL, 0, &js) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "\"output\""),
          "no output: refused: %s", af_last_error());
    /* dry run: no output needed, diagnostics as JSON */
    CHECK(af_train_settings_run(s, NULL, 1, &js) == AF_OK && js && strstr(js, "\"diagnostics\"") &&
              strstr(js, "\"ready\":true"),
          "dry run: %s", js ? js : af_last_error());
    free(js);
    js = NULL;
    af_train_settings_free(s);
    /* a run interrupted from the progress callback after step 1: a checkpoint, stop "interrupted" */
    const char *out = tl_join(g_dir, "run");
    s = settings(model, train, out);
    volatile int interrupt = 0;
    progress_log pl = {0, 0, &interrupt};
    af_train_hooks h = {-1, &interrupt, NULL, on_progress, &pl};
    af_status st = af_train_settings_run(s, &h, 0, &js);
    CHECK(st == AF_OK && js && strstr(js, "\"stop\":\"interrupted\"") && strstr(js, "\"steps_done\":1"),
          "interrupted after step 1: %s", js ? js : af_last_error());
    CHECK(pl.calls == 1 && pl.last == 1, "progress called once (step 1 of 3): %d calls", pl.calls);
    CHECK(exists(tl_join(out, "checkpoint-1/adapter_model.safetensors")), "checkpoint-1 written");
    free(js);
    js = NULL;
    af_train_settings_free(s);
    /* resume: the checkpoint's settings are the base; the run goes on to step 3 */
    af_train_settings_new(&s);
    af_train_settings_set(s, "resume", out);
    progress_log p2 = {0, 0, NULL};
    af_train_hooks h2 = {-1, NULL, NULL, on_progress, &p2};
    st = af_train_settings_run(s, &h2, 0, &js);
    CHECK(st == AF_OK && js && strstr(js, "\"stop\":\"done\"") && strstr(js, "\"steps_done\":3") &&
              strstr(js, "\"total_steps\":3"),
          "resumed to the end: %s", js ? js : af_last_error());
    CHECK(p2.calls == 2 && p2.last == 3, "progress of the resumed run: steps 2 and 3 (%d calls, last %d)", p2.calls,
          p2.last);
    CHECK(exists(tl_join(out, "final/adapter_model.safetensors")), "final adapter written");
    free(js);
    af_train_settings_free(s);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("test_bindings_api");
    }
    const char *path = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (path) {
        af_model *m = NULL;
        if (af_model_load(T_CTX, path, &m) == AF_OK) {
            test_chat(m);
            af_model_free(m);
        } else {
            CHECK(0, "load: %s", af_last_error());
        }
        test_train(path);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tl_finish("test_bindings_api");
}
