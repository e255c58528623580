/*
 * test_batch.c — continuous batching, the prompt cache and cancellation of inference sessions,
 * on tiny random models (tests/tinymodel.c: llama, gemma3, qwen2, qwen3) and on
 * SmolLM2-135M when models/ has it:
 *  (a) af_session_eval_batch: 6 sessions with different prompts and adapters (none, and three
 *      random LoRA adapters of different ranks and targets), decoded greedily together, sessions
 *      leaving the batch at different steps, give EXACTLY (memcmp) the logits, and so the tokens,
 *      of each session decoded alone with af_session_eval;
 *  (b) af_session_keep_prefix + eval of the rest == a fresh eval of the whole prompt, bitwise, for
 *      split points around the 256-token chunk boundary and the 4-row decode regime;
 *  (c) prompt-cache files: save, load into a new session, continue == fresh, bitwise; damaged files
 *      (truncated, a flipped byte, wrong version, another adapter, a NaN value or a token id out of
 *      range with the checksum made valid again) refused with AF_ERR_FORMAT, the session unchanged;
 *  (d) the cancel flag: AF_ERR_CANCELLED before anything, and after the first chunk of a 600-token
 *      prompt when set by the progress callback (n_past = 256); progress (phase, current, total);
 *  (f) chunked prefill (af_session_eval_multi): prompts of 300 and 37 tokens evaluated in pieces
 *      (af_session_prompt_piece, budgets of 24 and 18 tokens a pass) in the same passes as the decode
 *      tokens of three running sessions, with adapters, the prompt rows between decode rows: every
 *      logit, then greedy decoding after the prompts, bitwise as each session alone; the piece rule
 *      and the refused calls (a 256 boundary crossed, a count of 0);
 *  (g) several adapters applied together (af_session_set_loras): logits equal, to f32 rounding, to
 *      one adapter of the summed rank holding both (A stacked, B side by side with the scales
 *      folded in); a list with a scale-0 entry == the list without it, bitwise; sessions with lists
 *      batched (af_session_eval_batch) == alone, bitwise;
 *  (f) and (g) again on a Vulkan device when there is one (tiny llama Q8_0);
 *  (h) the decode walk's grouped frozen products (q, k, v together; gate, up together: one
 *      parallel region each) give bitwise the logits of one product per call (hook
 *      AF_CTX_DECODE_GROUPS off): prompts, batched decode with an adapter, single decode; on
 *      SmolLM2 with 2+ threads, 4 regions per layer + 1 per decoded token (af_ctx_pool_stats).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "infer/session.h"
#include "kernels/ctx.h"
#include "lora/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct adapter {
    af_param_layout lay;
    float *P;
} adapter;

static int make_adapter(const af_model *m, int r, const char *targets, uint64_t seed, adapter *a) {
    uint32_t mask = 0;
    if (af_lora_parse_targets(targets, &mask) != AF_OK) return 0;
    af_lora_config c = {r, 2.0f * (float)r, 0.0f, 0, mask, seed, 0};
    if (af_param_layout_init(&a->lay, m, &c, 0) != AF_OK) return 0;
    a->P = malloc(sizeof(float) * (size_t)a->lay.n_total);
    uint64_t rng = seed;
    for (int64_t i = 0; i < a->lay.n_total; i++) a->P[i] = tl_rand_uniform(&rng, -0.3f, 0.3f);
    return 1;
}

static void free_adapter(adapter *a) {
    free(a->P);
    af_param_layout_free(&a->lay);
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

#define NS 6
#define STEPS 12

/* (a) batched decode == alone, bitwise. */
static void test_batch_equals_alone(const af_model *m, const char *what, int n_steps) {
    const int64_t V = m->cfg.vocab_size;
    adapter ad[3];
    memset(ad, 0, sizeof ad);
    const char *tg[3] = {"qv", "all-linear", "k,o,down"};
    const int rk[3] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        if (!CHECK(make_adapter(m, rk[i], tg[i], 100 + (uint64_t)i, &ad[i]), "%s: adapter %d", what, i)) return;
    af_session *alone[NS], *bat[NS];
    int plen[NS];
    int32_t prompt[NS][48];
    uint64_t rng = 7;
    float *la = malloc(sizeof(float) * (size_t)V * NS), *lb = malloc(sizeof(float) * (size_t)V * NS);
    int ok = 1;
    for (int i = 0; i < NS; i++) {
        plen[i] = 1 + (int)(tl_rand_u64(&rng) % 40); /* 1 .. 40 tokens: decode and GEMM prompt regimes */
        for (int t = 0; t < plen[i]; t++) prompt[i][t] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
        ok = ok && af_session_new(m, 128, &alone[i]) == AF_OK && af_session_new(m, 128, &bat[i]) == AF_OK;
        if (!ok) break;
        const int k = i % 4; /* 0: base; 1..3: adapters (two sessions share adapter 1) */
        if (k > 0) {
            ok = af_session_set_lora(alone[i], ad[k - 1].P, &ad[k - 1].lay, ad[k - 1].lay.scale * 0.7f) == AF_OK &&
                 af_session_set_lora(bat[i], ad[k - 1].P, &ad[k - 1].lay, ad[k - 1].lay.scale * 0.7f) == AF_OK;
        }
        ok = ok && af_session_eval(alone[i], prompt[i], plen[i], la + (size_t)i * V, NULL) == AF_OK &&
             af_session_eval(bat[i], prompt[i], plen[i], lb + (size_t)i * V, NULL) == AF_OK;
    }
    if (!CHECK(ok, "%s: sessions: %s", what, af_last_error())) return;
    int32_t tok[NS];
    int same = 1, same_tok = 1, moved = 0;
    for (int i = 0; i < NS; i++) tok[i] = argmax(la + (size_t)i * V, V);
    for (int step = 0; step < n_steps && ok; step++) {
        /* session i leaves after 4 + 2i steps (the batch shrinks: 6, 5, ... rows) */
        af_session *act[NS];
        int32_t at[NS];
        int idx[NS], na = 0;
        for (int i = 0; i < NS; i++)
            if (step < 4 + 2 * i) {
                act[na] = bat[i];
                at[na] = tok[i];
                idx[na++] = i;
            }
        if (na == 0) break;
        ok = af_session_eval_batch(act, na, at, lb) == AF_OK;
        if (!CHECK(ok, "%s: eval_batch: %s", what, af_last_error())) break;
        for (int j = 0; j < na; j++) {
            const int i = idx[j];
            ok = af_session_eval(alone[i], &tok[i], 1, la, NULL) == AF_OK;
            if (!ok) break;
            if (memcmp(la, lb + (size_t)j * V, sizeof(float) * (size_t)V) != 0) {
                same = 0;
                printf("%s: step %d session %d: batched logits differ by %.3g\n", what, step, i,
                       tl_max_abs_diff(la, lb + (size_t)j * V, (size_t)V, NULL));
            }
            const int32_t t1 = argmax(la, V), t2 = argmax(lb + (size_t)j * V, V);
            same_tok &= t1 == t2;
            moved += t1 != tok[i];
            tok[i] = t1;
            CHECK(af_session_n_past(bat[i]) == af_session_n_past(alone[i]), "%s: n_past", what);
        }
    }
    CHECK(ok, "%s: decode: %s", what, af_last_error());
    CHECK(same, "%s: batched decode gives each session bit-identical logits to decoding it alone", what);
    CHECK(same_tok, "%s: batched decode gives the same greedy tokens", what);
    /* tiny random models repeat one token greedily; the bitwise logits check above is what counts */
    if (!strncmp(what, "SmolLM2", 7)) CHECK(moved > 0, "%s: the test decodes more than one repeated token", what);
    printf("%s: %d sessions (3 adapters of rank 2/4/8 + base), %d steps: batched == alone bitwise: %s\n", what, NS,
           n_steps, same ? "yes" : "NO");
    for (int i = 0; i < NS; i++) {
        af_session_free(alone[i]);
        af_session_free(bat[i]);
    }
    for (int i = 0; i < 3; i++) free_adapter(&ad[i]);
    free(la);
    free(lb);
}

/* (b) keep_prefix + the rest == fresh, bitwise. */
static void test_keep_prefix(const af_model *m, const char *what, int few) {
    const int64_t V = m->cfg.vocab_size;
    enum { N = 300 };
    int32_t a[N], b[N];
    uint64_t rng = 11;
    for (int i = 0; i < N; i++) a[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
    af_session *s = NULL, *f = NULL;
    if (!CHECK(af_session_new(m, 512, &s) == AF_OK && af_session_new(m, 512, &f) == AF_OK, "sessions")) return;
    float *l1 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    /* common prefix c of prompts a and b (b differs from position c on), b of length nb */
    const int cases[][2] = {{0, 20}, {10, 20}, {17, 20}, {19, 20}, {20, 20}, {3, 5}, {4, 4}, {200, 258},
                            {255, 258}, {256, 258}, {257, 258}, {100, 300}, {254, 300}, {299, 300}, {260, 263}};
    /* few (a real model): the cases at the regime boundaries only */
    static const int few_idx[] = {2, 6, 8, 10, 14};
    const size_t n_cases = few ? sizeof few_idx / sizeof few_idx[0] : sizeof cases / sizeof cases[0];
    int all_same = 1, kept_any = 0;
    for (size_t kk = 0; kk < n_cases; kk++) {
        const size_t k = few ? (size_t)few_idx[kk] : kk;
        const int c = cases[k][0], nb = cases[k][1];
        memcpy(b, a, sizeof b);
        for (int i = c; i < nb; i++) b[i] = (a[i] + 1 + i) % (int32_t)V;
        af_session_reset(s);
        CHECK(af_session_eval(s, a, N, NULL, NULL) == AF_OK, "eval a");
        const int kept = af_session_keep_prefix(s, b, nb);
        CHECK(kept <= c && kept < nb, "%s: kept %d of a common prefix %d (prompt %d)", what, kept, c, nb);
        kept_any += kept > 0;
        CHECK(af_session_eval(s, b + kept, nb - kept, l1, NULL) == AF_OK, "eval rest");
        af_session_reset(f);
        CHECK(af_session_eval(f, b, nb, l2, NULL) == AF_OK, "eval fresh");
        const int same = !memcmp(l1, l2, sizeof(float) * (size_t)V);
        if (!same) printf("%s: prefix %d of %d (kept %d): differs by %.3g\n", what, c, nb, kept, tl_max_abs_diff(l1, l2, (size_t)V, NULL));
        all_same &= same;
    }
    CHECK(all_same, "%s: kept prefix + rest == fresh evaluation, bitwise (%zu split points)", what, n_cases);
    CHECK(kept_any >= (int)n_cases * 2 / 3, "%s: the prefix was reused in most cases (%d of %zu)", what, kept_any, n_cases);
    af_session_free(s);
    af_session_free(f);
    free(l1);
    free(l2);
}

static void patch_checksum(unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n - 8; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    memcpy(b + n - 8, &h, 8);
}

static void write_bytes(const char *p, const unsigned char *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

/* (c) prompt-cache files. */
static void test_file(const af_model *m, const char *what) {
    const int64_t V = m->cfg.vocab_size;
    enum { N = 40 };
    int32_t a[N];
    uint64_t rng = 5;
    for (int i = 0; i < N; i++) a[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
    adapter ad;
    if (!CHECK(make_adapter(m, 4, "qv", 9, &ad), "adapter")) return;
    char dir[] = "/tmp/af_test_batch_XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp")) return;
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/p.kv", dir);
    snprintf(bad, sizeof bad, "%s/bad.kv", dir);
    af_session *s = NULL, *t = NULL, *u = NULL;
    float *l1 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    if (!CHECK(af_session_new(m, 64, &s) == AF_OK && af_session_new(m, 64, &t) == AF_OK && af_session_new(m, 64, &u) == AF_OK,
               "sessions"))
        return;
    af_session_set_lora(s, ad.P, &ad.lay, ad.lay.scale);
    af_session_set_lora(t, ad.P, &ad.lay, ad.lay.scale);
    CHECK(af_session_eval(s, a, 30, NULL, NULL) == AF_OK, "eval");
    CHECK(af_session_save_file(s, path) == AF_OK, "save: %s", af_last_error());
    CHECK(af_session_load_file(t, path) == AF_OK, "%s: load: %s", what, af_last_error());
    CHECK(af_session_n_past(t) == 30, "loaded 30 positions");
    const int kept = af_session_keep_prefix(t, a, N);
    CHECK(kept == 30, "%s: the whole cached prefix is kept (%d)", what, kept);
    CHECK(af_session_eval(t, a + kept, N - kept, l1, NULL) == AF_OK, "eval rest");
    af_session_reset(s);
    CHECK(af_session_eval(s, a, N, l2, NULL) == AF_OK, "eval fresh");
    CHECK(!memcmp(l1, l2, sizeof(float) * (size_t)V), "%s: loaded cache + rest == fresh, bitwise", what);
    /* another adapter (u has none): refused by the layout hash */
    CHECK(af_session_load_file(u, path) == AF_ERR_FORMAT && strstr(af_last_error(), "layout_hash"),
          "%s: a cache made with another adapter is refused: %s", what, af_last_error());
    size_t n = 0;
    unsigned char *orig = (unsigned char *)tl_read_file(path, &n);
    unsigned char *b = malloc(n);
    struct {
        const char *name;
        int kind;
    } bads[] = {{"truncated", 0}, {"flipped byte", 1}, {"version", 2}, {"NaN value", 3}, {"token id", 4}, {"size", 5}};
    for (size_t k = 0; orig && k < sizeof bads / sizeof bads[0]; k++) {
        memcpy(b, orig, n);
        size_t len = n;
        switch (bads[k].kind) {
        case 0: len = n - 13; break;
        case 1: b[n / 2] ^= 0x10; break;
        case 2: b[4] = 7; break;
        case 3: { float nan = NAN; memcpy(b + n - 8 - 4 * 5, &nan, 4); patch_checksum(b, n); } break;
        case 4: { int32_t big = (int32_t)V; memcpy(b + 32 + 4 * 3, &big, 4); patch_checksum(b, n); } break;
        case 5: { uint32_t nt = 29; memcpy(b + 24, &nt, 4); patch_checksum(b, n); } break;
        }
        write_bytes(bad, b, len);
        af_session_reset(t);
        CHECK(af_session_eval(t, a, 3, NULL, NULL) == AF_OK, "eval 3");
        const af_status st = af_session_load_file(t, bad);
        CHECK(st == AF_ERR_FORMAT && af_session_n_past(t) == 3, "%s: %s refused (%s: %s), session unchanged", what,
              bads[k].name, af_status_name(st), af_last_error());
        if (tl_sanitized() || getenv("TL_VERBOSE")) printf("  %s: %s\n", bads[k].name, af_last_error());
    }
    CHECK(af_session_load_file(t, "/nonexistent/x.kv") == AF_ERR_IO, "missing file: AF_ERR_IO");
    free(orig);
    free(b);
    unlink(path);
    unlink(bad);
    rmdir(dir);
    af_session_free(s);
    af_session_free(t);
    af_session_free(u);
    free_adapter(&ad);
    free(l1);
    free(l2);
}

typedef struct prog {
    int calls;
    int64_t last_cur, last_total;
    int cancel_after; /* set the flag after this many calls (0: never) */
    volatile int *flag;
    char phase[16];
} prog;

static void on_progress(void *user, const char *phase, int64_t cur, int64_t total) {
    prog *p = user;
    p->calls++;
    p->last_cur = cur;
    p->last_total = total;
    snprintf(p->phase, sizeof p->phase, "%s", phase);
    if (p->cancel_after && p->calls == p->cancel_after) *p->flag = 1;
}

/* (d) cancel and progress. */
static void test_cancel(const af_model *m) {
    const int64_t V = m->cfg.vocab_size;
    enum { N = 600 };
    int32_t *a = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) a[i] = (int32_t)(i * 7 % V);
    af_session *s = NULL;
    if (!CHECK(af_session_new(m, 700, &s) == AF_OK, "session")) return;
    volatile int flag = 0;
    prog p = {0, 0, 0, 0, &flag, ""};
    af_session_set_control(s, &flag, on_progress, &p);
    CHECK(af_session_eval(s, a, N, NULL, NULL) == AF_OK, "eval 600");
    CHECK(p.calls == 3 && p.last_cur == N && p.last_total == N && !strcmp(p.phase, "prompt"),
          "progress: %d calls, last (%s, %lld, %lld)", p.calls, p.phase, (long long)p.last_cur, (long long)p.last_total);
    af_session_reset(s);
    flag = 1;
    CHECK(af_session_eval(s, a, 10, NULL, NULL) == AF_ERR_CANCELLED && af_session_n_past(s) == 0,
          "cancel before: AF_ERR_CANCELLED, nothing cached");
    flag = 0;
    p = (prog){0, 0, 0, 1, &flag, ""};
    CHECK(af_session_eval(s, a, N, NULL, NULL) == AF_ERR_CANCELLED, "cancel during the prompt");
    CHECK(af_session_n_past(s) == 256, "the first chunk stays cached (%d)", af_session_n_past(s));
    flag = 0;
    float *l = malloc(sizeof(float) * (size_t)V);
    CHECK(af_session_eval(s, a + 256, N - 256, l, NULL) == AF_OK, "continue after a cancel");
    af_session *t = NULL;
    float *l2 = malloc(sizeof(float) * (size_t)V);
    if (af_session_new(m, 700, &t) == AF_OK && af_session_eval(t, a, N, l2, NULL) == AF_OK)
        CHECK(!memcmp(l, l2, sizeof(float) * (size_t)V), "continuing after a cancel == uninterrupted, bitwise");
    /* a cancelled session stops a batch step */
    af_session *two[2] = {s, t};
    int32_t tk[2] = {1, 2};
    float *lb = malloc(sizeof(float) * 2 * (size_t)V);
    flag = 1;
    const int np = af_session_n_past(t);
    CHECK(af_session_eval_batch(two, 2, tk, lb) == AF_ERR_CANCELLED && af_session_n_past(t) == np,
          "a cancelled session stops the batch step, no session advances");
    flag = 0;
    CHECK(af_session_eval_batch(two, 2, tk, lb) == AF_OK, "batch after clearing the flag");
    two[1] = s;
    CHECK(af_session_eval_batch(two, 2, tk, lb) == AF_ERR_INVALID_ARG, "a session twice is refused");
    free(lb);
    free(l);
    free(l2);
    af_session_free(t);
    af_session_free(s);
    free(a);
}

/* (e) the training step's cancel flag (af_lora_trainer_set_control). */
static void test_train_cancel(const af_model *m) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.num_classes = 3;
    o.lora_dropout = 0;
    af_lora_trainer *tr = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "trainer: %s", af_last_error())) return;
    int32_t tok[24], ss[3] = {0, 10, 24}, lab[2] = {0, 2};
    for (int i = 0; i < 24; i++) tok[i] = (int32_t)(i * 5 % m->cfg.vocab_size);
    const int64_t np = af_lora_trainer_n_params(tr);
    float *g = malloc(sizeof(float) * (size_t)np);
    double loss = 0;
    volatile int flag = 0;
    af_lora_trainer_set_control(tr, &flag);
    CHECK(af_lora_trainer_accumulate(tr, tok, ss, 2, lab, 0.5f, &loss, NULL) == AF_OK, "accumulate");
    flag = 1;
    CHECK(af_lora_trainer_accumulate(tr, tok, ss, 2, lab, 0.5f, &loss, NULL) == AF_ERR_CANCELLED,
          "a set cancel flag: accumulate returns AF_ERR_CANCELLED");
    int32_t nm = -1;
    CHECK(af_lora_trainer_collect_gradients(tr, g, &nm, NULL) == AF_OK && nm == 0, "cancel discards the step's gradient");
    int nz = 0;
    for (int64_t i = 0; i < np; i++) nz += g[i] != 0;
    CHECK(nz == 0, "the gradient is zero after a cancel (%d non-zero)", nz);
    CHECK(af_lora_trainer_forward(tr, tok, ss, 2, g) == AF_ERR_CANCELLED, "forward cancelled too");
    flag = 0;
    CHECK(af_lora_trainer_accumulate(tr, tok, ss, 2, lab, 0.5f, &loss, NULL) == AF_OK && isfinite(loss),
          "accumulate after clearing the flag");
    CHECK(af_lora_trainer_step(tr, 1e-3f, NULL) == AF_OK, "step");
    free(g);
    af_lora_trainer_free(tr);
}

/* (f) chunked prefill: prompt pieces and decode tokens in one af_session_eval_multi pass == alone. */
#define NP 2 /* sessions in their prompt */
#define ND 3 /* sessions decoding */
static void test_chunked_prefill(const af_model *m, const char *what) {
    const int64_t V = m->cfg.vocab_size;
    adapter ad[2];
    memset(ad, 0, sizeof ad);
    if (!CHECK(make_adapter(m, 4, "all-linear", 41, &ad[0]) && make_adapter(m, 2, "qv", 42, &ad[1]), "%s: adapters", what))
        return;
    const int plen[NP + ND] = {300, 37, 9, 3, 21};
    int32_t *prompt[NP + ND];
    af_session *alone[NP + ND], *bat[NP + ND];
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V * (NP + ND));
    float *first = malloc(sizeof(float) * (size_t)V * (NP + ND)); /* alone: logits after each prompt */
    uint64_t rng = 99;
    int ok = la && lb && first;
    for (int i = 0; ok && i < NP + ND; i++) {
        prompt[i] = malloc(sizeof(int32_t) * (size_t)plen[i]);
        for (int t = 0; t < plen[i]; t++) prompt[i][t] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
        ok = af_session_new(m, 400, &alone[i]) == AF_OK && af_session_new(m, 400, &bat[i]) == AF_OK;
        const adapter *a = i % 3 == 1 ? NULL : &ad[i % 2];
        if (ok && a)
            ok = af_session_set_lora(alone[i], a->P, &a->lay, a->lay.scale * 0.8f) == AF_OK &&
                 af_session_set_lora(bat[i], a->P, &a->lay, a->lay.scale * 0.8f) == AF_OK;
        ok = ok && af_session_eval(alone[i], prompt[i], plen[i], first + (size_t)i * V, NULL) == AF_OK;
        /* the decoding sessions start with their prompt already in (as alone) */
        if (ok && i >= NP) ok = af_session_eval(bat[i], prompt[i], plen[i], lb, NULL) == AF_OK;
    }
    if (!CHECK(ok, "%s: sessions: %s", what, af_last_error())) return;
    int32_t tok[NP + ND];
    for (int i = 0; i < NP + ND; i++) tok[i] = argmax(first + (size_t)i * V, V);
    int same = 1, passes = 0, mixed = 0, prompt_done[NP] = {0, 0};
    for (int pass = 0; ok && pass < 40; pass++) {
        /* rows: decode 0, prompt 0, prompt 1, decode 1, decode 2 (the two prompt pieces share a
         * blocked product, between decode rows), budgets of 24 and 18 tokens a pass */
        static const int order[NP + ND] = {2, 0, 1, 3, 4};
        af_session *act[NP + ND];
        int32_t cnt[NP + ND], rows[512], idx[NP + ND], na = 0, nr = 0, nprompt = 0, npseq = 0;
        for (int k = 0; k < NP + ND; k++) {
            const int i = order[k];
            if (i < NP && prompt_done[i] == 0) {
                const int np = af_session_n_past(bat[i]), c = af_session_prompt_piece(bat[i], plen[i], 24 - 6 * i);
                if (c == 0) continue;
                memcpy(rows + nr, prompt[i] + np, sizeof(int32_t) * (size_t)c);
                nprompt += c, npseq++;
                cnt[na] = c;
                nr += c;
            } else {
                rows[nr++] = tok[i];
                cnt[na] = 1;
            }
            act[na] = bat[i];
            idx[na++] = i;
        }
        if (nprompt == 0 && pass > 30) break;
        mixed += npseq > 0 && na > npseq;
        ok = af_session_eval_multi(act, na, cnt, rows, lb) == AF_OK;
        if (!CHECK(ok, "%s: eval_multi: %s", what, af_last_error())) break;
        passes++;
        for (int j = 0; j < na; j++) {
            const int i = idx[j];
            const float *ref = NULL;
            if (i < NP && prompt_done[i] == 0) { /* in its prompt: compared once the prompt is in */
                if (af_session_n_past(bat[i]) < plen[i]) continue;
                prompt_done[i] = 1;
                ref = first + (size_t)i * V;
            } else {
                ok = af_session_eval(alone[i], &tok[i], 1, la, NULL) == AF_OK;
                if (!ok) break;
                ref = la;
            }
            if (memcmp(ref, lb + (size_t)j * V, sizeof(float) * (size_t)V) != 0) {
                same = 0;
                printf("%s: pass %d session %d (n_past %d): logits differ by %.3g\n", what, pass, i,
                       af_session_n_past(bat[i]), tl_max_abs_diff(ref, lb + (size_t)j * V, (size_t)V, NULL));
            }
            tok[i] = argmax(lb + (size_t)j * V, V);
            CHECK(af_session_n_past(bat[i]) == af_session_n_past(alone[i]), "%s: n_past of session %d", what, i);
        }
    }
    CHECK(ok && prompt_done[0] && prompt_done[1], "%s: both prompts evaluated in pieces", what);
    CHECK(mixed >= 13, "%s: %d passes mixed prompt pieces with decode tokens", what, mixed);
    CHECK(same, "%s: chunked prefill gives every session bit-identical logits to evaluating it alone", what);
    printf("%s: chunked prefill, prompts of 300 and 37 tokens in pieces of <= 24 and 18 with 3 decoding sessions, %d passes "
           "(%d mixed): == alone bitwise: %s\n", what, passes, mixed, same ? "yes" : "NO");
    /* the piece rule (af_session_prompt_piece) and refused calls */
    af_session *s = bat[1];
    af_session_reset(s);
    CHECK(af_session_prompt_piece(s, 300, 24) == 24 && af_session_prompt_piece(s, 300, 4) == 0 &&
              af_session_prompt_piece(s, 3, 2) == 2 && af_session_prompt_piece(NULL, 300, 24) == 0,
          "%s: pieces from position 0", what);
    CHECK(af_session_eval(s, prompt[0], 232, NULL, NULL) == AF_OK, "%s: 232 tokens", what);
    CHECK(af_session_prompt_piece(s, 300, 20) == 19, "%s: no tail of 1-4 rows left in a blocked chunk (%d)", what,
          af_session_prompt_piece(s, 300, 20));
    CHECK(af_session_prompt_piece(s, 300, 100) == 24, "%s: a piece stops at 256", what);
    CHECK(af_session_prompt_piece(s, 234, 100) == 2, "%s: the prompt's end", what);
    CHECK(af_session_eval(s, prompt[0], 24, NULL, NULL) == AF_OK && af_session_prompt_piece(s, 258, 100) == 2 &&
              af_session_prompt_piece(s, 258, 1) == 1,
          "%s: a decode-regime chunk: any piece", what);
    int32_t c30 = 30, c0 = 0;
    af_session_reset(s);
    CHECK(af_session_eval(s, prompt[0], 240, NULL, NULL) == AF_OK &&
              af_session_eval_multi(&s, 1, &c30, prompt[0], lb) == AF_ERR_INVALID_ARG && af_session_n_past(s) == 240,
          "%s: a piece across position 256 is refused", what);
    CHECK(af_session_eval_multi(&s, 1, &c0, prompt[0], lb) == AF_ERR_INVALID_ARG, "%s: a count of 0 is refused", what);
    for (int i = 0; i < NP + ND; i++) {
        af_session_free(alone[i]);
        af_session_free(bat[i]);
        free(prompt[i]);
    }
    for (int i = 0; i < 2; i++) free_adapter(&ad[i]);
    free(la);
    free(lb);
    free(first);
}

/* (g) several adapters in one session. */
static void test_lora_list(const af_model *m, const char *what) {
    const int64_t V = m->cfg.vocab_size;
    adapter a, b, c;
    memset(&c, 0, sizeof c);
    if (!CHECK(make_adapter(m, 2, "all-linear", 51, &a) && make_adapter(m, 3, "all-linear", 52, &b) &&
                   make_adapter(m, 5, "all-linear", 53, &c),
               "%s: adapters", what))
        return;
    const float sa = a.lay.scale * 0.7f, sb = b.lay.scale * -1.3f;
    /* c = [a; b]: A_c rows = A_a's then A_b's, B_c [out, 5] = [sa·B_a | sb·B_b] (applied with scale 1) */
    for (int32_t l = 0; l < c.lay.n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *qa = af_lora_slot_at(&a.lay, l, (af_proj)p), *qb = af_lora_slot_at(&b.lay, l, (af_proj)p),
                               *qc = af_lora_slot_at(&c.lay, l, (af_proj)p);
            if (qc->a_off < 0) continue;
            memcpy(c.P + qc->a_off, a.P + qa->a_off, sizeof(float) * (size_t)(2 * qa->in));
            memcpy(c.P + qc->a_off + 2 * qa->in, b.P + qb->a_off, sizeof(float) * (size_t)(3 * qb->in));
            for (int64_t o = 0; o < qc->out; o++) {
                for (int k = 0; k < 2; k++) c.P[qc->b_off + o * 5 + k] = sa * a.P[qa->b_off + o * 2 + k];
                for (int k = 0; k < 3; k++) c.P[qc->b_off + o * 5 + 2 + k] = sb * b.P[qb->b_off + o * 3 + k];
            }
        }
    af_session *s2 = NULL, *s1 = NULL, *s3 = NULL, *t[3] = {NULL, NULL, NULL};
    int ok = af_session_new(m, 64, &s2) == AF_OK && af_session_new(m, 64, &s1) == AF_OK && af_session_new(m, 64, &s3) == AF_OK;
    for (int i = 0; i < 3; i++) ok = ok && af_session_new(m, 64, &t[i]) == AF_OK;
    const float *P2[3] = {a.P, b.P, c.P};
    const af_param_layout *L2[3] = {&a.lay, &b.lay, &c.lay};
    const float S2[3] = {sa, sb, 0.0f}, S3[2] = {sb, sa};
    const float *P3[2] = {b.P, a.P};
    const af_param_layout *L3[2] = {&b.lay, &a.lay};
    ok = ok && af_session_set_loras(s2, 2, P2, L2, S2) == AF_OK && af_session_set_lora(s1, c.P, &c.lay, 1.0f) == AF_OK &&
         af_session_set_loras(s3, 3, P2, L2, S2) == AF_OK && af_session_set_loras(t[0], 2, P2, L2, S2) == AF_OK &&
         af_session_set_loras(t[2], 2, P3, L3, S3) == AF_OK;
    if (!CHECK(ok, "%s: sessions with adapter lists: %s", what, af_last_error())) return;
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)((i * 37 + 5) % V);
    float *l2 = malloc(sizeof(float) * (size_t)V), *l1 = malloc(sizeof(float) * (size_t)V), *l3 = malloc(sizeof(float) * (size_t)V);
    float *lb = malloc(sizeof(float) * (size_t)V * 3), *la = malloc(sizeof(float) * (size_t)V);
    ok = af_session_eval(s2, prompt, 20, l2, NULL) == AF_OK && af_session_eval(s1, prompt, 20, l1, NULL) == AF_OK &&
         af_session_eval(s3, prompt, 20, l3, NULL) == AF_OK;
    double mx = 0, ref = 0;
    for (int64_t i = 0; ok && i < V; i++) {
        mx = fmax(mx, fabs((double)l2[i] - l1[i]));
        ref = fmax(ref, fabs((double)l1[i]));
    }
    CHECK(ok && mx <= 1e-4 * (1 + ref), "%s: two adapters together == one adapter holding both (max diff %.3g, max |logit| %.3g)",
          what, mx, ref);
    CHECK(ok && memcmp(l2, l3, sizeof(float) * (size_t)V) == 0, "%s: a scale-0 entry is off (bitwise)", what);
    /* batched: [a, b], base, [b, a] == each alone (the same prompt, then the same tokens one by one) */
    int same = 1;
    af_session *al[3] = {NULL, NULL, NULL};
    for (int i = 0; ok && i < 3; i++) ok = af_session_new(m, 64, &al[i]) == AF_OK;
    ok = ok && af_session_set_loras(al[0], 2, P2, L2, S2) == AF_OK && af_session_set_loras(al[2], 2, P3, L3, S3) == AF_OK;
    for (int i = 0; ok && i < 3; i++)
        ok = af_session_eval(t[i], prompt, 20 - 3 * i, la, NULL) == AF_OK && af_session_eval(al[i], prompt, 20 - 3 * i, la, NULL) == AF_OK;
    int32_t tok[3] = {7, 9, 11};
    for (int step = 0; ok && step < 3; step++) {
        ok = af_session_eval_batch(t, 3, tok, lb) == AF_OK;
        for (int i = 0; ok && i < 3; i++) {
            ok = af_session_eval(al[i], &tok[i], 1, la, NULL) == AF_OK;
            same &= ok && memcmp(la, lb + (size_t)i * V, sizeof(float) * (size_t)V) == 0;
        }
        for (int i = 0; i < 3; i++) tok[i] = argmax(lb + (size_t)i * V, V);
    }
    for (int i = 0; i < 3; i++) af_session_free(al[i]);
    CHECK(ok, "%s: batched lists: %s", what, af_last_error());
    CHECK(same, "%s: sessions with adapter lists batched == alone, bitwise", what);
    printf("%s: adapter lists: [a, b] vs one stacked adapter max diff %.3g; batched == alone: %s\n", what, mx, same ? "yes" : "NO");
    af_session_free(s1), af_session_free(s2), af_session_free(s3);
    for (int i = 0; i < 3; i++) af_session_free(t[i]);
    free(l1), free(l2), free(l3), free(la), free(lb);
    free_adapter(&a), free_adapter(&b), free_adapter(&c);
}

/* One decode of (h): three sessions (base, an adapter, base) eval their prompts, then 4 batched
 * greedy steps, then 3 steps of session 0 alone; every logit appended to out (18 rows of
 * V); *regions: the pool's parallel regions of the 3 lone steps. */
static int groups_run(const af_model *m, const adapter *ad, float *out, uint64_t *regions) {
    const int64_t V = m->cfg.vocab_size;
    af_session *s[3] = {NULL, NULL, NULL};
    int ok = 1, rows = 0;
    int32_t tok[3];
    for (int i = 0; i < 3 && ok; i++) {
        int32_t prompt[9];
        const int len = i == 0 ? 5 : i == 1 ? 3 : 9;
        for (int t = 0; t < len; t++) prompt[t] = (int32_t)((7 + 31 * t + 13 * i) % V);
        ok = af_session_new(m, 64, &s[i]) == AF_OK &&
             (i != 1 || af_session_set_lora(s[i], ad->P, &ad->lay, ad->lay.scale) == AF_OK) &&
             af_session_eval(s[i], prompt, len, out + (size_t)rows * V, NULL) == AF_OK;
        if (ok) tok[i] = argmax(out + (size_t)rows++ * V, V);
    }
    for (int step = 0; step < 4 && ok; step++) {
        ok = af_session_eval_batch(s, 3, tok, out + (size_t)rows * V) == AF_OK;
        for (int i = 0; i < 3 && ok; i++) tok[i] = argmax(out + (size_t)rows++ * V, V);
    }
    af_pool_stats a, b;
    af_ctx_pool_stats(m->ctx, &a);
    for (int step = 0; step < 3 && ok; step++) {
        ok = af_session_eval(s[0], &tok[0], 1, out + (size_t)rows * V, NULL) == AF_OK;
        if (ok) tok[0] = argmax(out + (size_t)rows++ * V, V);
    }
    af_ctx_pool_stats(m->ctx, &b);
    *regions = b.regions - a.regions;
    for (int i = 0; i < 3; i++) af_session_free(s[i]);
    return ok;
}

/* (h) the decode walk's grouped products (q, k, v in one matmul_xwt_parts call; gate, up in
 * another): logits bitwise those of one product per call (the hook AF_CTX_DECODE_GROUPS off), for
 * one session, a batch with an adapter, and prompts; on SmolLM2 with 2+ threads, 4 parallel
 * regions per layer + the LM head per decoded token, fewer than one call per product. */
static void test_groups(const af_model *m, const char *what) {
    const int64_t V = m->cfg.vocab_size;
    if (m->ctx != T_CTX) {
        tl_skip("%s: decode groups: the model is not on the test context", what);
        return;
    }
    adapter ad;
    memset(&ad, 0, sizeof ad);
    if (!CHECK(make_adapter(m, 4, "all-linear", 42, &ad), "%s: adapter", what)) return;
    float *on = calloc((size_t)V * 18, sizeof(float)), *off = calloc((size_t)V * 18, sizeof(float));
    uint64_t r_on = 0, r_off = 0;
    af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, 0);
    int ok = groups_run(m, &ad, off, &r_off);
    af_ctx_set_hook(T_CTX, AF_CTX_DECODE_GROUPS, 1);
    ok = ok && groups_run(m, &ad, on, &r_on);
    if (CHECK(ok, "%s: decode groups: %s", what, af_last_error())) {
        CHECK(memcmp(on, off, sizeof(float) * (size_t)V * 18) == 0,
              "%s: grouped q/k/v and gate/up products give bitwise the logits of one call per product", what);
        const int64_t L = m->cfg.num_hidden_layers;
        printf("%s: decode: %.1f parallel regions per token grouped, %.1f one call per product (%d threads)\n", what,
               (double)r_on / 3, (double)r_off / 3, af_ctx_n_threads(T_CTX));
        if (!strncmp(what, "SmolLM2", 7) && af_ctx_n_threads(T_CTX) >= 2)
            CHECK(r_on == (uint64_t)(3 * (4 * L + 1)) && r_off > r_on,
                  "%s: %llu regions in 3 decoded tokens grouped (want %lld: 4 per layer + the head), %llu ungrouped",
                  what, (unsigned long long)r_on, (long long)(3 * (4 * L + 1)), (unsigned long long)r_off);
    }
    free(on);
    free(off);
    free_adapter(&ad);
}

/* Mixed int8 decode (kernels/ctx.h int8_roles, a benchmark setting): with int8 activations on and
 * no product class in int8_roles, every decode product is marked exact and the logits of a prompt
 * and 3 decoded tokens equal those of the exact context bitwise; with all classes (the default)
 * they differ (SIMD paths: the scalar path has no int8 decode), as with all classes but the head. */
static void test_int8_roles(af_model *m, const char *what) {
    af_ctx *ctx = (af_ctx *)m->ctx;
    const int64_t V = m->cfg.vocab_size;
    const int32_t prompt[5] = {1, 5, 9, 3, 7};
    const int roles[3] = {AF_INT8_ALL, 0, AF_INT8_ALL & ~AF_INT8_HEAD};
    float *ref = calloc((size_t)V * 4, sizeof(float)), *lg[3] = {ref + V, ref + 2 * V, ref + 3 * V};
    for (int c = -1; c < 3; c++) {
        float *out = c < 0 ? ref : lg[c];
        ctx->int8_act = c >= 0;
        af_ctx_set_int8_roles(ctx, c >= 0 ? roles[c] : AF_INT8_ALL);
        af_session *s = NULL;
        if (!CHECK(af_session_new(m, 32, &s) == AF_OK, "%s: session", what)) continue;
        af_session_eval(s, prompt, 5, out, NULL);
        for (int32_t k = 0; k < 3; k++) af_session_eval(s, &prompt[k], 1, out, NULL);
        af_session_free(s);
    }
    ctx->int8_act = 0;
    af_ctx_set_int8_roles(ctx, AF_INT8_ALL);
    const size_t bytes = sizeof(float) * (size_t)V;
    CHECK(!memcmp(lg[1], ref, bytes), "%s: int8 activations with no int8 product class == exact, bitwise", what);
    if (ctx->path != AF_KPATH_SCALAR)
        CHECK(memcmp(lg[0], ref, bytes) && memcmp(lg[2], ref, bytes),
              "%s: int8 everywhere, and all but the head, differ from exact", what);
    free(ref);
}

int main(void) {
    const char *archs[4] = {"llama", "gemma3", "qwen2", "qwen3"};
    for (int i = 0; i < 4; i++) {
        for (int q = 0; q < 2; q++) {
            tm_spec spec = tm_default(archs[i], q ? AF_TYPE_Q8_0 : AF_TYPE_F32);
            spec.seed = 3 + (uint64_t)i;
            af_model *m = NULL;
            if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny %s: %s", archs[i], af_last_error())) continue;
            char what[64];
            snprintf(what, sizeof what, "tiny %s %s", archs[i], q ? "Q8_0" : "F32");
            test_batch_equals_alone(m, what, STEPS);
            test_groups(m, what);
            if (q == 1) test_keep_prefix(m, what, 0);
            if (q == 1) test_int8_roles(m, what);
            if (q == 1) test_chunked_prefill(m, what);
            if (q == 1) test_lora_list(m, what);
            if (q == 1 && i < 2) test_file(m, what);
            if (i == 0 && q == 0) test_cancel(m);
            if (i == 0 && q == 1) test_train_cancel(m);
            af_model_free(m);
        }
    }
    /* gemma4: per-layer head_dim / KV heads / FFN width, KV sharing (layers without a cache slot of
     * their own), per-layer inputs: the multi-sequence walk and the prompt-cache file over its slots */
    {
        af_model *m = NULL;
        if (CHECK(af_model_load(T_CTX, "tests/fixtures/tiny_gemma4.gguf", &m) == AF_OK, "tiny gemma4: %s",
                  af_last_error())) {
            test_batch_equals_alone(m, "tiny gemma4", STEPS);
            test_groups(m, "tiny gemma4");
            test_keep_prefix(m, "tiny gemma4", 0);
            test_chunked_prefill(m, "tiny gemma4");
            test_lora_list(m, "tiny gemma4");
            test_file(m, "tiny gemma4");
            af_model_free(m);
        }
    }
    /* the same on a Vulkan device when there is one (the blocked product's per-row bits must not
     * depend on the row count there either: prompt pieces share one product) */
    {
        af_device_info inf[4];
        int32_t nd = 0, vk = -1;
        char why[300] = "";
        for (int32_t i = 0; i < af_backend_count(); i++)
            if (!strcmp(af_backend_name(i), "vulkan")) vk = i;
        if (vk < 0 || af_backend_devices(vk, inf, 4, &nd, why, sizeof why) != AF_OK || nd == 0) {
            tl_skip("chunked prefill and adapter lists on Vulkan: no Vulkan device");
        } else if (tl_sanitized()) {
            tl_skip("chunked prefill and adapter lists on Vulkan: sanitizer build (run in make test)");
        } else if (CHECK(tl_ctx_set_device("vulkan") == AF_OK, "vulkan ctx: %s", af_last_error())) {
            tm_spec spec = tm_default("llama", AF_TYPE_Q8_0);
            spec.seed = 3;
            af_model *m = NULL;
            if (CHECK(tm_load(&spec, &m) == AF_OK, "tiny llama on vulkan: %s", af_last_error())) {
                char what[160];
                snprintf(what, sizeof what, "tiny llama Q8_0 on %s (%s)", af_ctx_device(m->ctx), inf[0].name);
                test_chunked_prefill(m, what);
                test_lora_list(m, what);
            }
            af_model_free(m);
            tl_ctx_set_device("cpu");
        }
    }
    const char *sm = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (sm) {
        af_model *m = NULL;
        if (CHECK(af_model_load(T_CTX, sm, &m) == AF_OK, "SmolLM2: %s", af_last_error())) {
            test_batch_equals_alone(m, "SmolLM2-135M Q4_1", tl_sanitized() ? 5 : STEPS);
            test_groups(m, "SmolLM2-135M Q4_1");
            if (!tl_sanitized()) test_keep_prefix(m, "SmolLM2-135M Q4_1", 1);
            if (!tl_sanitized()) test_chunked_prefill(m, "SmolLM2-135M Q4_1");
            test_lora_list(m, "SmolLM2-135M Q4_1");
            af_model_free(m);
        }
    }
    return tl_finish("test_batch");
}
