/*
 * test_vulkan_model.c — whole models on the Vulkan backend against the CPU backend: the
 * logits of a prompt (one batched call, with a LoRA adapter) and of a token-by-token decode, the
 * greedy continuation, the LoRA + head gradients of a classification micro-batch and of a causal-LM
 * micro-batch, five optimizer steps, and training runs of `afinar train`'s loop whose checkpoints
 * resume across devices — on tiny random models of llama, gemma3, qwen2 and qwen3 (tinymodel.c), the
 * tiny gemma4 fixture (tests/fixtures/tiny_gemma4.gguf: per-layer head_dim, KV sharing, PLE, RoPE
 * frequency factors, soft-capping), and on
 * SmolLM2-135M (skipped with a message when models/ lacks it). Skips everything with a message
 * where no Vulkan device exists.
 *
 * Tolerances. The device computes every op with the CPU kernels' semantics but sums in another
 * order (tests/test_backend_ops.c bounds each op), so results differ by f32 rounding that the
 * layers carry forward:
 *   - logits: |Δ| <= 2e-4·(1 + max|logit|) on the tiny models (2 layers; measured ~1e-6 relative),
 *     1e-3·(1 + max|logit|) on SmolLM2 (30 layers, hidden 576; measured ~2e-5 relative);
 *   - greedy continuation: identical ids while the CPU's top-2 logit gap exceeds 10x the logits'
 *     measured difference (a closer call is not a disagreement of the backends);
 *   - gradients: ||Δg||₂ <= 1e-3·||g||₂ over the flat vector (a loss differing in the last bits
 *     moves every gradient element by about the same relative amount; measured: printed);
 *   - losses of five steps: relative 1e-4 (AdamW amplifies a gradient difference at most by
 *     lr/(sqrt(v)+eps) per step: measured ~1e-6);
 *   - the same training with the PiSSA initialisation (llama, causal LM): the frozen −s·B0·A0 on the device;
 *     and DoRA refused on the device;
 *   - parameters after five steps: max |Δp| <= 5% of lr·steps (AdamW divides each gradient element
 *     by its RMS, so an element whose gradient is at rounding level may move by up to lr per step
 *     either way on either device; measured ~1e-5·lr·steps).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "infer/session.h"
#include "kernels/ctx.h"
#include "lora/lora.h"
#include "train/api_internal.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NTOK 12

static char g_dir[256];

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* ||a − b||₂ / ||b||₂ */
static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* Logits of tok[0..n) on model m: one batched call with the adapter (P, lay) into out[0, n·V), then
 * token by token without it into out[n·V, 2n·V). */
static int logits_of(const af_model *m, const float *P, const af_param_layout *lay, const int32_t *tok, int n,
                     float *out) {
    const int64_t V = m->cfg.vocab_size;
    af_session *s = NULL;
    if (!CHECK(af_session_new(m, 64, &s) == AF_OK, "session: %s", af_last_error())) return 0;
    int ok = CHECK(af_session_set_lora(s, P, lay, lay ? lay->scale : 0) == AF_OK, "set_lora: %s", af_last_error());
    ok = ok && CHECK(af_session_eval(s, tok, n, NULL, out) == AF_OK, "eval: %s", af_last_error());
    af_session_reset(s);
    ok = ok && CHECK(af_session_set_lora(s, NULL, NULL, 0) == AF_OK, "unset lora");
    for (int i = 0; ok && i < n; i++)
        ok = CHECK(af_session_eval(s, tok + i, 1, out + (size_t)(n + i) * (size_t)V, NULL) == AF_OK, "decode: %s",
                   af_last_error());
    af_session_free(s);
    return ok;
}

/* Greedy continuation of `prompt` for n_new tokens into ids; gaps[i]: the top-2 logit gap. */
static int greedy(const af_model *m, const int32_t *prompt, int np, int n_new, int32_t *ids, float *gaps) {
    const int64_t V = m->cfg.vocab_size;
    af_session *s = NULL;
    if (!CHECK(af_session_new(m, np + n_new + 1, &s) == AF_OK, "session: %s", af_last_error())) return 0;
    float *lg = malloc(sizeof(float) * (size_t)V);
    int ok = CHECK(af_session_eval(s, prompt, np, lg, NULL) == AF_OK, "prompt: %s", af_last_error());
    for (int i = 0; ok && i < n_new; i++) {
        int32_t best = 0;
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            if (lg[v] > b1) b2 = b1, b1 = lg[v], best = (int32_t)v;
            else if (lg[v] > b2) b2 = lg[v];
        ids[i] = best;
        gaps[i] = b1 - b2;
        ok = CHECK(af_session_eval(s, &best, 1, lg, NULL) == AF_OK, "decode: %s", af_last_error());
    }
    free(lg);
    af_session_free(s);
    return ok;
}

/* Identical ids while the CPU's top-2 gap exceeds 10x the logits' measured difference `diff` (a
 * closer call is not a disagreement of the backends: comparing further proves nothing). */
static int same_greedy(const char *what, const int32_t *a, const int32_t *b, const float *gaps, int n, double diff) {
    int i = 0;
    for (; i < n; i++) {
        if (gaps[i] < 10 * diff) break;
        if (a[i] != b[i]) break;
    }
    const int near_tie = i < n && gaps[i] < 10 * diff;
    printf("%s: greedy continuation identical for %d of %d tokens%s\n", what, i, n,
           near_tie ? " (then a near tie on the CPU)" : "");
    return CHECK(i == n || near_tie, "%s: greedy token %d differs (vulkan %d, cpu %d)", what, i, i < n ? a[i] : -1,
                 i < n ? b[i] : -1); /* the message's arguments are evaluated when the check passes too */
}

/* Load a tiny model on the current test context's device. */
static af_model *tiny(const char *arch, uint32_t wtype) {
    tm_spec spec = tm_default(arch, wtype);
    af_model *m = NULL;
    if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny %s %s: %s", arch, af_type_name(wtype), af_last_error())) return NULL;
    return m;
}

/* Random adapter parameters for an all-linear r = 4 layout (B not zero, so the adapter matters). */
static float *random_params(const af_model *m, af_param_layout *lay) {
    uint32_t targets = 0;
    af_lora_parse_targets("all-linear", &targets);
    af_lora_config c = {4, 8.0f, 0.0f, 0, targets, 11, 0};
    if (!CHECK(af_param_layout_init(lay, m, &c, 0) == AF_OK, "layout: %s", af_last_error())) return NULL;
    float *P = malloc(sizeof(float) * (size_t)lay->n_total);
    uint64_t r = 99;
    for (int64_t i = 0; i < lay->n_total; i++) P[i] = tl_rand_uniform(&r, -0.2f, 0.2f);
    return P;
}

/* ---------------------------------------------------------------- sessions */

/* Logits of tok[0, n) (with an adapter, batched; without, decoded) and the greedy continuation of
 * tok[0, n_prompt) for n_greedy (<= 16) tokens, vulkan vs cpu. */
static void test_session(const char *arch, uint32_t wtype, af_model *mc, af_model *mv, const int32_t *tok, int n,
                         int n_prompt, int n_greedy, double rel_tol) {
    char what[128];
    snprintf(what, sizeof what, "%s %s", arch, af_type_name(wtype));
    const int64_t V = mc->cfg.vocab_size;
    af_param_layout lay;
    float *P = random_params(mc, &lay);
    if (!P) return;
    float *a = malloc(sizeof(float) * (size_t)(2 * n * V)), *b = malloc(sizeof(float) * (size_t)(2 * n * V));
    if (logits_of(mc, P, &lay, tok, n, a) && logits_of(mv, P, &lay, tok, n, b)) {
        const double scale = 1 + max_abs(a, (size_t)(2 * n * V)), tol = rel_tol * scale;
        const double d1 = tl_max_abs_diff(b, a, (size_t)(n * V), NULL), d2 = tl_max_abs_diff(b + n * V, a + n * V, (size_t)(n * V), NULL);
        printf("%s: logits vulkan vs cpu (%d tokens): prompt with adapter max|diff| %.3g, decode %.3g (tolerance %.3g)\n",
               what, n, d1, d2, tol);
        CHECK(d1 <= tol && d2 <= tol, "%s: logits differ: %.3g / %.3g > %.3g", what, d1, d2, tol);
        int32_t ga[16], gb[16];
        float gaps[16], gaps_v[16];
        if (greedy(mc, tok, n_prompt, n_greedy, ga, gaps) && greedy(mv, tok, n_prompt, n_greedy, gb, gaps_v))
            same_greedy(what, gb, ga, gaps, n_greedy, fmax(d1, d2));
    }
    free(a), free(b), free(P);
    af_param_layout_free(&lay);
}

/* ---------------------------------------------------------------- gradients and steps */

typedef struct run_out {
    double loss[5];
    float *grad0; /* gradient of the first micro-batch */
    float *params;
    int64_t n;
} run_out;

static int32_t g_init; /* af_lora_trainer_opts.init_lora_weights of train5 */

/* A trainer on m: one classification (num_classes 3, dropout 0.1, all-linear) or causal-LM micro-batch
 * per step for 5 steps; the gradient of the first step and the parameters at the end. */
static int train5(const af_model *m, int lm, run_out *o) {
    af_lora_trainer_opts to;
    af_lora_trainer_opts_defaults(&to);
    to.init_lora_weights = g_init;
    to.r = 4;
    to.lora_alpha = 8;
    to.lora_dropout = 0.1f;
    to.targets = "all-linear";
    to.num_classes = lm ? 0 : 3;
    to.lr = 1e-2f;
    af_lora_trainer *tr = NULL;
    if (!CHECK(af_lora_trainer_new(m, &to, &tr) == AF_OK, "trainer: %s", af_last_error())) return 0;
    o->n = af_lora_trainer_n_params(tr);
    o->grad0 = malloc(sizeof(float) * (size_t)o->n);
    o->params = malloc(sizeof(float) * (size_t)o->n);
    const int64_t V = m->cfg.vocab_size;
    int ok = 1;
    for (int step = 0; ok && step < 5; step++) {
        /* 3 packed samples of 5, 7 and 4 tokens */
        int32_t ss[4] = {0, 5, 12, 16}, tok[16], tgt[16], lab[3];
        uint64_t r = 1000 + (uint64_t)step;
        for (int i = 0; i < 16; i++) tok[i] = (int32_t)(tl_rand_u64(&r) % (uint64_t)V);
        for (int s = 0; s < 3; s++) {
            lab[s] = (int32_t)(tl_rand_u64(&r) % 3);
            for (int t = ss[s]; t < ss[s + 1]; t++) tgt[t] = t + 1 < ss[s + 1] ? tok[t + 1] : -1;
        }
        double loss = 0;
        if (lm) {
            int64_t nt = 0, nc = 0;
            ok = CHECK(af_lora_trainer_accumulate_lm(tr, tok, ss, 3, tgt, 1.0f / 13, &loss, &nt, &nc) == AF_OK,
                       "accumulate_lm: %s", af_last_error());
        } else
            ok = CHECK(af_lora_trainer_accumulate(tr, tok, ss, 3, lab, 1.0f, &loss, NULL) == AF_OK, "accumulate: %s",
                       af_last_error());
        o->loss[step] = loss;
        if (ok && step == 0) af_lora_trainer_collect_gradients(tr, o->grad0, NULL, NULL);
        double gn = 0;
        ok = ok && CHECK(af_lora_trainer_step(tr, -1, &gn) == AF_OK, "step: %s", af_last_error());
    }
    if (ok) af_lora_trainer_get_params(tr, o->params);
    af_lora_trainer_free(tr);
    return ok;
}

static void test_training(const char *arch, uint32_t wtype, af_model *mc, af_model *mv, int lm) {
    char what[128];
    snprintf(what, sizeof what, "%s %s %s%s", arch, af_type_name(wtype), lm ? "causal-LM" : "classification",
             g_init == AF_LORA_INIT_PISSA ? " (pissa init)" : "");
    run_out c = {{0}, NULL, NULL, 0}, v = {{0}, NULL, NULL, 0};
    if (train5(mc, lm, &c) && train5(mv, lm, &v) && CHECK(c.n == v.n, "parameter counts")) {
        const double g = rel_l2(v.grad0, c.grad0, (size_t)c.n);
        double lw = 0;
        for (int s = 0; s < 5; s++) lw = fmax(lw, fabs(v.loss[s] - c.loss[s]) / fabs(c.loss[s]));
        const double pd = tl_max_abs_diff(v.params, c.params, (size_t)c.n, NULL), pm = max_abs(c.params, (size_t)c.n);
        printf("%s: gradient rel. L2 diff %.3g; 5 steps: losses %.4f .. %.4f, max rel. loss diff %.3g; "
               "params max|diff| %.3g (max|p| %.3g)\n", what, g, c.loss[0], c.loss[4], lw, pd, pm);
        CHECK(g <= 1e-3, "%s: LoRA/head gradient differs: %.3g", what, g);
        CHECK(lw <= 1e-4, "%s: losses of 5 steps differ: %.3g", what, lw);
        /* AdamW divides each gradient element by its own RMS: an element whose gradient is at rounding
         * level moves by up to lr per step either way. Allowed: 5% of lr·steps. */
        CHECK(pd <= 0.05 * 1e-2 * 5, "%s: parameters after 5 steps differ: %.3g", what, pd);
    }
    free(c.grad0), free(c.params), free(v.grad0), free(v.params);
}

static void test_tiny(const char *arch, uint32_t wtype) {
    if (!CHECK(tl_ctx_set_device("cpu") == AF_OK, "cpu ctx")) return;
    af_model *mc = tiny(arch, wtype);
    if (!CHECK(tl_ctx_set_device("vulkan") == AF_OK, "vulkan ctx: %s", af_last_error())) {
        af_model_free(mc);
        return;
    }
    af_model *mv = tiny(arch, wtype);
    if (mc && mv) {
        CHECK(!strcmp(af_ctx_device(mv->ctx), "vulkan:0"), "model on %s", af_ctx_device(mv->ctx));
        int32_t tok[NTOK];
        uint64_t r = 7;
        for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(tl_rand_u64(&r) % (uint64_t)mc->cfg.vocab_size);
        test_session(arch, wtype, mc, mv, tok, NTOK, 4, 16, 2e-4);
        test_training(arch, wtype, mc, mv, 0);
        test_training(arch, wtype, mc, mv, 1);
        if (!strcmp(arch, "llama")) { /* PiSSA's frozen −s·B0·A0 runs on the device's LoRA kernels; DoRA is refused */
            g_init = AF_LORA_INIT_PISSA;
            test_training(arch, wtype, mc, mv, 1);
            g_init = 0;
            af_lora_trainer_opts to;
            af_lora_trainer_opts_defaults(&to);
            to.use_dora = 1;
            af_lora_trainer *tr = NULL;
            CHECK(af_lora_trainer_new(mv, &to, &tr) == AF_ERR_UNSUPPORTED && strstr(af_last_error(), "CPU only"),
                  "DoRA on Vulkan refused: %s", af_last_error());
            af_lora_trainer_free(tr);
        }
    }
    af_model_free(mv);
    af_model_free(mc);
    tl_ctx_set_device("cpu");
}

/* The tiny gemma4 fixture (tests/fixtures/tiny_gemma4.gguf, f32, made by tests/ref/make_gemma4_ref.py;
 * tests/test_gemma4.c checks it against transformers): per-layer head_dim (12 sliding / 16 global) and
 * KV heads, KV sharing (the last 2 layers read layers 2 and 3's caches), k_eq_v global layers, PLE
 * inputs, proportional RoPE (frequency factors 1e30), unweighted v norm, per-layer output scales and
 * final logit soft-capping — the same checks as the generated tiny models. */
static void test_gemma4(void) {
    const char *path = "tests/fixtures/tiny_gemma4.gguf";
    af_model *mc = NULL, *mv = NULL;
    tl_ctx_set_device("cpu");
    if (!CHECK(af_model_load(T_CTX, path, &mc) == AF_OK, "load %s: %s", path, af_last_error())) return;
    if (CHECK(tl_ctx_set_device("vulkan") == AF_OK, "vulkan ctx: %s", af_last_error()) &&
        CHECK(af_model_load(T_CTX, path, &mv) == AF_OK, "load %s on vulkan: %s", path, af_last_error())) {
        int32_t tok[NTOK];
        uint64_t r = 17;
        for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(tl_rand_u64(&r) % (uint64_t)mc->cfg.vocab_size);
        CHECK(!strcmp(af_ctx_device(mv->ctx), "vulkan:0"), "gemma4 on %s", af_ctx_device(mv->ctx));
        test_session("gemma4", AF_TYPE_F32, mc, mv, tok, NTOK, 4, 16, 2e-4);
        test_training("gemma4", AF_TYPE_F32, mc, mv, 0);
        test_training("gemma4", AF_TYPE_F32, mc, mv, 1);
    }
    af_model_free(mv);
    af_model_free(mc);
    tl_ctx_set_device("cpu");
}

/* ---------------------------------------------------------------- training runs, resume across devices */

static void write_corpus(const char *path, int n) {
    static const char *const keys[3] = {"goal", "chip", "soup"};
    FILE *f = fopen(path, "w");
    uint64_t r = 5;
    for (int i = 0; i < n; i++) {
        int c = (int)(tl_rand_u64(&r) % 3);
        char text[128] = "";
        for (int w = 0; w < 3; w++) {
            char word[6];
            for (int k = 0; k < 4; k++) word[k] = (char)('d' + tl_rand_u64(&r) % 20);
            word[4] = 0;
            strcat(text, word);
            strcat(text, w == 1 ? " " : " ");
            if (w == 1) strcat(text, keys[c]), strcat(text, " ");
        }
        fprintf(f, "{\"input\": \"%s\", \"label\": %d}\n", text, c);
    }
    fclose(f);
}

static af_status train_run(const char *name, const char *device, int64_t stop, int resume) {
    af_trainer_opts o;
    af_train_result r;
    af_trainer_opts_defaults(&o);
    o.model_path = P_("tiny.gguf");
    o.train_path = P_("train.jsonl");
    o.output_dir = resume ? NULL : P_(name);
    if (resume) o.resume = P_(name);
    o.lr = 1e-2;
    o.lora_r = 4;
    o.lora_alpha = 8;
    o.lora_dropout = 0.1;
    o.batch = 4;
    o.grad_accum = 2;
    o.max_steps = 6;
    o.warmup_steps = 1;
    o.max_seq_len = 32;
    o.eval_every = 0;
    o.save_every = 2;
    o.threads = 1;
    o.plot = 0;
    o.device = device;
    o.stop_after = stop;
    o.log = getenv("TL_VERBOSE") ? stderr : NULL;
    o.progress_tty = 0;
    af_trainer *t = NULL;
    af_status st = af_trainer_new(&o, &t);
    if (st == AF_OK) st = af_trainer_run(t, &r);
    af_trainer_free(t);
    return st;
}

/* The final adapter of run `name` as floats (safetensors F32 payload). */
static float *adapter(const char *name, size_t *n) {
    char p[600];
    snprintf(p, sizeof p, "%s/final/adapter_model.safetensors", P_(name));
    size_t len = 0;
    char *b = tl_read_file(p, &len);
    if (!b || len < 8) {
        free(b);
        return NULL;
    }
    uint64_t hl;
    memcpy(&hl, b, 8);
    *n = (len - 8 - hl) / 4;
    float *f = malloc(sizeof(float) * (*n ? *n : 1));
    memcpy(f, b + 8 + hl, *n * 4);
    free(b);
    return f;
}

static void check_close_adapters(const char *what, const char *a, const char *b) {
    size_t na = 0, nb = 0;
    float *x = adapter(a, &na), *y = adapter(b, &nb);
    if (CHECK(x && y && na == nb && na > 0, "%s: adapters %s / %s", what, a, b)) {
        const double d = tl_max_abs_diff(x, y, na, NULL), m = max_abs(y, na);
        printf("%s: final adapters max|diff| %.3g (max|p| %.3g)\n", what, d, m);
        CHECK(d <= 1e-3 * m, "%s: adapters differ: %.3g", what, d);
    }
    free(x), free(y);
}

static void test_runs(void) {
    tm_spec s = tm_default("llama", AF_TYPE_Q4_1);
    s.vocab = 256 + 3;
    static const char *const extra[3] = {"ab", "\xC4\xA0x", "<|endoftext|>"};
    static const char *const merges[2] = {"a b", "\xC4\xA0 x"};
    if (!CHECK(tm_write_bpe(&s, P_("tiny.gguf"), extra, 3, merges, 2) == AF_OK, "tiny model: %s", af_last_error())) return;
    write_corpus(P_("train.jsonl"), 24);
    if (!CHECK(train_run("run_cpu", "cpu", 0, 0) == AF_OK, "cpu run: %s", af_last_error())) return;
    CHECK(train_run("run_vk", "vulkan", 0, 0) == AF_OK, "vulkan run: %s", af_last_error());
    check_close_adapters("afinar train's loop on vulkan vs cpu", "run_vk", "run_cpu");
    CHECK(train_run("run_v2c", "vulkan", 3, 0) == AF_OK && train_run("run_v2c", "cpu", 0, 1) == AF_OK,
          "vulkan -> cpu resume: %s", af_last_error());
    check_close_adapters("checkpoint written on vulkan, resumed on cpu", "run_v2c", "run_cpu");
    CHECK(train_run("run_c2v", "cpu", 3, 0) == AF_OK && train_run("run_c2v", "vulkan", 0, 1) == AF_OK,
          "cpu -> vulkan resume: %s", af_last_error());
    check_close_adapters("checkpoint written on cpu, resumed on vulkan", "run_c2v", "run_cpu");
}

/* ---------------------------------------------------------------- SmolLM2 */

/* SmolLM2-135M (Q4_1): logits, greedy continuation and a gradient, short enough for `make test` on
 * lavapipe (every token through 30 layers costs ~3 s there): 4 tokens, 2 greedy tokens, the gradient
 * of adapters on the top 2 layers; AF_TEST_SLOW=1: 16 tokens, 16 greedy tokens, and five optimizer
 * steps of a classification and of a causal-LM trainer on every layer (a quarter of an hour there). */
static void test_smollm2(void) {
    if (tl_sanitized()) { /* the tiny models run the same code; lavapipe is no faster under ASan */
        tl_skip("SmolLM2 on Vulkan under the sanitizers (the tiny models cover the same code)");
        return;
    }
    const char *path = tl_smollm2_path();
    if (!path) return;
    const int slow = getenv("AF_TEST_SLOW") && atoi(getenv("AF_TEST_SLOW")) > 0;
    af_model *mc = NULL, *mv = NULL;
    tl_ctx_set_device("cpu");
    if (!CHECK(af_model_load(T_CTX, path, &mc) == AF_OK, "load: %s", af_last_error())) return;
    if (CHECK(tl_ctx_set_device("vulkan") == AF_OK, "vulkan ctx: %s", af_last_error()) &&
        CHECK(af_model_load(T_CTX, path, &mv) == AF_OK, "load on vulkan: %s", af_last_error())) {
        int32_t *tok = NULL;
        size_t nt = 0;
        const char *text = "The capital of France is Paris, and the capital of Italy is";
        CHECK(af_tokenize(af_model_tokenizer(mc), text, strlen(text), 1, 0, &tok, &nt) == AF_OK, "tokenize: %s",
              af_last_error());
        const int n = slow ? ((int)nt < 16 ? (int)nt : 16) : 4;
        double t0 = af_time_sec();
        test_session("SmolLM2-135M", mc->layers[0].wq.type, mc, mv, tok, n, slow ? (int)nt : 6, slow ? 16 : 2, 1e-3);
        printf("SmolLM2 logits and greedy: %.1f s\n", af_time_sec() - t0);
        t0 = af_time_sec();
        if (slow) {
            test_training("SmolLM2-135M", AF_TYPE_Q4_1, mc, mv, 0);
            test_training("SmolLM2-135M", AF_TYPE_Q4_1, mc, mv, 1);
        } else { /* one classification micro-batch's gradient, adapters on every projection of the top 2 layers */
            af_lora_trainer_opts to;
            af_lora_trainer_opts_defaults(&to);
            to.num_classes = 5;
            to.lora_dropout = 0;
            to.targets = "all-linear";
            af_lora_trainer_ext ext = {mc->cfg.num_hidden_layers - 2, 0, 1.0, NULL, NULL};
            af_lora_trainer *tc = NULL, *tv = NULL;
            if (CHECK(af_lora_trainer_new_ext(mc, &to, &ext, &tc) == AF_OK &&
                          af_lora_trainer_new_ext(mv, &to, &ext, &tv) == AF_OK,
                      "trainers: %s", af_last_error())) {
                int32_t ss[2] = {0, 4}, lab[1] = {3};
                double lc = 0, lv = 0;
                const int64_t np = af_lora_trainer_n_params(tc);
                float *gc = malloc(sizeof(float) * (size_t)np), *gv = malloc(sizeof(float) * (size_t)np);
                if (CHECK(af_lora_trainer_accumulate(tc, tok, ss, 1, lab, 1.0f, &lc, NULL) == AF_OK &&
                              af_lora_trainer_accumulate(tv, tok, ss, 1, lab, 1.0f, &lv, NULL) == AF_OK,
                          "accumulate: %s", af_last_error())) {
                    af_lora_trainer_collect_gradients(tc, gc, NULL, NULL);
                    af_lora_trainer_collect_gradients(tv, gv, NULL, NULL);
                    const double g = rel_l2(gv, gc, (size_t)np);
                    printf("SmolLM2: classification loss vulkan %.7f cpu %.7f; LoRA/head gradient rel. L2 diff %.3g\n",
                           lv, lc, g);
                    CHECK(fabs(lv - lc) <= 1e-4 * fabs(lc), "SmolLM2 loss differs");
                    CHECK(g <= 1e-3, "SmolLM2 gradient differs: %.3g", g);
                }
                free(gc), free(gv);
            }
            af_lora_trainer_free(tc), af_lora_trainer_free(tv);
        }
        printf("SmolLM2 training checks: %.1f s%s\n", af_time_sec() - t0,
               slow ? "" : " (AF_TEST_SLOW=1: 16 tokens and five optimizer steps)");
        free(tok);
    }
    af_model_free(mv);
    af_model_free(mc);
    tl_ctx_set_device("cpu");
}

int main(void) {
    af_device_info inf[4];
    int32_t nd = 0;
    char why[300] = "";
    int32_t vk = -1;
    for (int32_t i = 0; i < af_backend_count(); i++)
        if (!strcmp(af_backend_name(i), "vulkan")) vk = i;
    if (vk < 0 || af_backend_devices(vk, inf, 4, &nd, why, sizeof why) != AF_OK || nd == 0) {
        tl_skip("no Vulkan device: %s", why[0] ? why : af_last_error());
        return tl_finish("test_vulkan_model");
    }
    printf("device vulkan:0: %s (%s)\n", inf[0].name, inf[0].driver);
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_vkmodel_%d", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd) != 0) return 1;
    double t0 = af_time_sec();
    test_tiny("llama", AF_TYPE_Q4_K);
    if (!tl_sanitized()) { /* the same host code as llama's and gemma4's on the device; ~45 s under ASan */
        test_tiny("gemma3", AF_TYPE_F32);
        test_tiny("qwen2", AF_TYPE_Q4_1);
        test_tiny("qwen3", AF_TYPE_Q8_0);
    } else
        tl_skip("tiny gemma3, qwen2, qwen3 on Vulkan under the sanitizers (llama and gemma4 run the same host code)");
    test_gemma4();
    printf("tiny models: %.1f s\n", af_time_sec() - t0);
    t0 = af_time_sec();
    test_runs();
    printf("training runs: %.1f s\n", af_time_sec() - t0);
    test_smollm2();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tl_finish("test_vulkan_model");
}
