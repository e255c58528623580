/*
 * test_hf.c — Hugging Face checkpoint directories (config.json + SafeTensors + tokenizer.json) loaded
 * into the same in-memory model as a GGUF (src/model/model.c), against transformers.
 *
 * Fixtures (tests/ref/make_hf_dirs.py, all written by transformers' save_pretrained):
 *  - tests/fixtures/hf_tiny_llama: LlamaForCausalLM, random (seed 0), f32, hidden 64, 4 heads of
 *    head_dim 24 (!= 64/4), 1 KV head, untied head, 5 shards + model.safetensors.index.json;
 *  - tests/fixtures/hf_tiny_gemma3: Gemma3ForCausalLM, random, bf16 weights, 4 layers (sliding,
 *    sliding, global, sliding from layer_types, window 4), query_pre_attn_scalar 20, final logit
 *    soft-capping 5, tied head, norm weights ~N(0, 0.3) (used as 1 + w);
 *  - tests/fixtures/hf_tiny_qwen2 (q/k/v biases ~N(0, 0.3), 1 KV head, head_dim 16, tied) and
 *    hf_tiny_qwen3 (q/k norms, head_dim 24, 2 KV heads, untied): f32, one file each;
 *  each with ref_logits.bin: transformers' float32 logits at every position of two prompts and an
 *  8-token greedy continuation (the gemma3 weights are bf16, upcast to f32 by transformers, as
 *  afinar's kernels do).
 *  - models/SmolLM2-135M-Instruct-hf (not committed: scripts/make_hf_dirs.sh): transformers'
 *    float32 dequantization of the Q4_1 GGUF. Its logits must equal afinar's on the GGUF itself
 *    (the same f32 values; q/k rows permuted back to the GGUF order at load) and transformers'.
 *
 * Tolerances: tiny models |diff| <= 1e-4 + 1e-4·|ref| (logits ~0.1-5; only f32 summation order
 * differs; measured values printed); SmolLM2 HF vs GGUF: 1e-4 + 1e-5·|ref| (the same weights and
 * the same kernels except f32 vs Q4_1 dequantize-on-the-fly: measured printed); SmolLM2 vs
 * transformers: 2e-3 + 2e-4·|ref| as tests/test_model.c. Greedy continuations identical.
 */
#include "afinar.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "ref_reader.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Greedy continuation of `ids` [n] for `n_gen` tokens (KV cache, one token at a time). */
static int greedy(af_model *m, const int32_t *ids, int n, int n_gen, int32_t *out) {
    const int V = af_model_get_config(m)->vocab_size;
    af_session *s = NULL;
    float *lg = malloc((size_t)V * sizeof *lg);
    int ok = lg && af_session_new(m, n + n_gen + 1, &s) == AF_OK && af_session_eval(s, ids, n, lg, NULL) == AF_OK;
    for (int i = 0; ok && i < n_gen; i++) {
        out[i] = argmax(lg, V);
        ok = af_session_eval(s, &out[i], 1, lg, NULL) == AF_OK;
    }
    af_session_free(s);
    free(lg);
    return ok;
}

/* Compare a model with a ref_logits.bin (format: tests/ref/make_hf_dirs.py). all_pos: the file has
 * logits at every position, else only the last. */
static void check_ref(af_model *m, const char *ref, int all_pos, double atol, double rtol, const char *name) {
    size_t len;
    char *buf = tl_read_file(ref, &len);
    if (!CHECK(buf != NULL, "%s missing", ref)) return;
    rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    uint32_t np = 0, V = 0;
    const void *mg = rd_bytes(&r, 4);
    const int32_t Vm = af_model_get_config(m)->vocab_size;
    if (!CHECK(mg && !memcmp(mg, "AFHR", 4) && rd_u32(&r, &np) && rd_u32(&r, &V) && (int32_t)V == Vm,
               "%s header (vocab %u vs model %d)", ref, V, Vm)) {
        free(buf);
        return;
    }
    double worst = 0;
    for (uint32_t p = 0; p < np; p++) {
        uint32_t n = 0, ng = 0;
        if (!CHECK(rd_u32(&r, &n) && n > 0 && n < 4096, "%s prompt %u", ref, p)) break;
        int32_t *ids = malloc(n * sizeof *ids);
        const void *pi = rd_bytes(&r, n * sizeof *ids);
        const uint32_t rows = all_pos ? n : 1;
        float *want = malloc((size_t)rows * V * sizeof *want);
        const void *pl = rd_bytes(&r, (size_t)rows * V * sizeof(float));
        if (!CHECK(ids && want && pi && pl && rd_u32(&r, &ng) && ng < 4096, "%s prompt %u body", ref, p)) {
            free(ids);
            free(want);
            break;
        }
        memcpy(ids, pi, n * sizeof *ids);
        memcpy(want, pl, (size_t)rows * V * sizeof *want);
        int32_t *gen_want = malloc((ng + 1) * sizeof *gen_want), *gen = malloc((ng + 1) * sizeof *gen);
        const void *pg = rd_bytes(&r, ng * sizeof *gen_want);
        if (pg) memcpy(gen_want, pg, ng * sizeof *gen_want);
        float *got = malloc((size_t)n * V * sizeof *got);
        af_session *s = NULL;
        if (CHECK(pg && got && af_session_new(m, (int)n + 1, &s) == AF_OK &&
                      af_session_eval(s, ids, (int)n, NULL, got) == AF_OK,
                  "%s: eval prompt %u: %s", name, p, af_last_error())) {
            const float *g = all_pos ? got : got + (size_t)(n - 1) * V;
            worst = fmax(worst, tl_max_abs_diff(g, want, (size_t)rows * V, NULL));
            CHECK_CLOSE(name, g, want, (size_t)rows * V, atol, rtol);
        }
        af_session_free(s);
        if (CHECK(greedy(m, ids, (int)n, (int)ng, gen), "%s: greedy %u", name, p))
            CHECK(!memcmp(gen, gen_want, ng * sizeof *gen), "%s: greedy continuation of prompt %u (%u tokens)", name,
                  p, ng);
        free(ids);
        free(want);
        free(got);
        free(gen);
        free(gen_want);
    }
    printf("  %s: %u prompts, max |logit diff| vs transformers %.3g\n", name, np, worst);
    free(buf);
}

static void test_tiny(const char *dir, const char *arch, int tied, int kv_heads) {
    af_model *m = NULL;
    if (!CHECK(af_model_load(T_CTX, dir, &m) == AF_OK, "load %s: %s", dir, af_last_error())) return;
    const af_model_config *c = af_model_get_config(m);
    CHECK(!strcmp(c->architecture, arch) && c->head_dim == (strcmp(arch, "qwen2") ? 24 : 16) && c->num_attention_heads == 4 &&
              c->num_key_value_heads == kv_heads && c->hidden_size == 64 && c->vocab_size == 256 &&
              c->tie_word_embeddings == tied,
          "%s config: %s head_dim %d heads %d/%d tied %d", dir, c->architecture, c->head_dim, c->num_attention_heads,
          c->num_key_value_heads, c->tie_word_embeddings);
    char ref[512];
    snprintf(ref, sizeof ref, "%s/ref_logits.bin", dir);
    check_ref(m, ref, 1, 1e-4, 1e-4, dir);
    af_model_free(m);
}

/* SmolLM2: HF directory (transformers' f32 dequantization of the Q4_1 GGUF) vs the GGUF. */
static void test_smollm2(void) {
    const char *dir = tl_model_path("SmolLM2-135M-Instruct-hf");
    const char *gguf = dir ? tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf") : NULL;
    if (!dir || !gguf) return;
    char dirc[1024], ref[1100];
    snprintf(dirc, sizeof dirc, "%s", dir);
    af_model *h = NULL, *g = NULL;
    if (!CHECK(af_model_load(T_CTX, dirc, &h) == AF_OK, "load %s: %s", dirc, af_last_error())) return;
    if (!CHECK(af_model_load(T_CTX, gguf, &g) == AF_OK, "load %s: %s", gguf, af_last_error())) {
        af_model_free(h);
        return;
    }
    const af_model_config *ch = af_model_get_config(h), *cg = af_model_get_config(g);
    CHECK(!strcmp(ch->architecture, cg->architecture) && ch->hidden_size == cg->hidden_size &&
              ch->num_hidden_layers == cg->num_hidden_layers && ch->num_key_value_heads == cg->num_key_value_heads &&
              ch->head_dim == cg->head_dim && ch->vocab_size == cg->vocab_size &&
              ch->intermediate_size == cg->intermediate_size && ch->tie_word_embeddings == cg->tie_word_embeddings &&
              ch->rms_norm_eps == cg->rms_norm_eps && ch->rope_theta == cg->rope_theta,
          "SmolLM2 HF config equals the GGUF's");
    CHECK(af_model_tokenizer(h) != NULL, "HF tokenizer loaded");
    /* the same ids through both: every position's logits */
    static const char *texts[] = {"The capital of France is", "def fibonacci(n):\n    return n"};
    const int V = ch->vocab_size;
    double worst = 0;
    for (int t = 0; t < 2; t++) {
        int32_t *ids = NULL, *ids2 = NULL;
        size_t n = 0, n2 = 0;
        if (!CHECK(af_tokenize(af_model_tokenizer(h), texts[t], strlen(texts[t]), 1, 1, &ids, &n) == AF_OK &&
                       af_tokenize(af_model_tokenizer(g), texts[t], strlen(texts[t]), 1, 1, &ids2, &n2) == AF_OK &&
                       n == n2 && !memcmp(ids, ids2, n * sizeof *ids),
                   "same ids from tokenizer.json and the GGUF tokenizer")) {
            free(ids);
            free(ids2);
            continue;
        }
        float *a = malloc(n * V * sizeof *a), *b = malloc(n * V * sizeof *b);
        af_session *sa = NULL, *sb = NULL;
        if (CHECK(a && b && af_session_new(h, (int)n, &sa) == AF_OK && af_session_new(g, (int)n, &sb) == AF_OK &&
                      af_session_eval(sa, ids, (int)n, NULL, a) == AF_OK &&
                      af_session_eval(sb, ids, (int)n, NULL, b) == AF_OK,
                  "eval: %s", af_last_error())) {
            worst = fmax(worst, tl_max_abs_diff(a, b, n * V, NULL));
            CHECK_CLOSE("SmolLM2 HF vs GGUF logits", a, b, n * V, 1e-4, 1e-5);
        }
        int32_t ga[16], gb[16];
        CHECK(greedy(h, ids, (int)n, 16, ga) && greedy(g, ids, (int)n, 16, gb) && !memcmp(ga, gb, sizeof ga),
              "SmolLM2 HF vs GGUF: identical greedy continuation of prompt %d", t);
        af_session_free(sa);
        af_session_free(sb);
        free(a);
        free(b);
        free(ids);
        free(ids2);
    }
    printf("  SmolLM2 HF dir vs GGUF: max |logit diff| %.3g\n", worst);
    snprintf(ref, sizeof ref, "%s/ref_logits.bin", dirc);
    check_ref(h, ref, 0, 2e-3, 2e-4, "SmolLM2 HF vs transformers");
    af_model_free(h);
    af_model_free(g);
}

/* F16 weights: the tiny llama rewritten as one F16 model.safetensors (af_st_write rounds to nearest
 * even) runs through the same kernels; its logits equal the f32 model's within the f16 rounding of
 * the weights (|diff| <= 2e-3 + 1e-2·|ref|; relative weight error <= 2^-11) and differ from them
 * (the f16 values are really used). */
static void test_f16(void) {
    const char *src = "tests/fixtures/hf_tiny_llama";
    char tmpl[] = "/tmp/af_test_hf16_XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!CHECK(dir != NULL, "mkdtemp")) return;
    af_hf_weights *w = NULL;
    if (!CHECK(af_hf_weights_open(src, &w) == AF_OK, "open %s: %s", src, af_last_error())) return;
    size_t nt = 0;
    for (size_t i = 0; i < af_hf_weights_n_files(w); i++) nt += af_st_count(af_hf_weights_file(w, i));
    af_st_write_tensor *wt = calloc(nt, sizeof *wt);
    float **bufs = calloc(nt, sizeof *bufs);
    size_t k = 0;
    int ok = wt && bufs;
    for (size_t i = 0; ok && i < af_hf_weights_n_files(w); i++) {
        const af_st_file *f = af_hf_weights_file(w, i);
        for (size_t j = 0; ok && j < af_st_count(f); j++, k++) {
            const af_st_tensor *t = af_st_tensor_at(f, j);
            bufs[k] = malloc((size_t)t->n_elem * sizeof(float));
            ok = bufs[k] && af_st_read_f32(f, t, bufs[k], (size_t)t->n_elem) == AF_OK;
            wt[k] = (af_st_write_tensor){.name = t->name, .dtype = AF_ST_F16, .n_dims = t->n_dims, .f32 = bufs[k]};
            memcpy(wt[k].shape, t->shape, sizeof wt[k].shape);
        }
    }
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ok = ok && af_st_write(path, wt, nt, NULL, NULL, 0) == AF_OK;
    size_t cl = 0;
    char *cfg = tl_read_file("tests/fixtures/hf_tiny_llama/config.json", &cl);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fc = cfg ? fopen(path, "wb") : NULL;
    ok = ok && fc && fwrite(cfg, 1, cl, fc) == cl;
    if (fc) ok = (fclose(fc) == 0) && ok;
    free(cfg);
    for (size_t i = 0; i < k; i++) free(bufs[i]);
    free(bufs);
    free(wt);
    af_hf_weights_close(w);
    af_model *a = NULL, *b = NULL;
    if (CHECK(ok, "write the f16 copy: %s", af_last_error()) &&
        CHECK(af_model_load(T_CTX, src, &a) == AF_OK && af_model_load(T_CTX, dir, &b) == AF_OK, "load: %s",
              af_last_error())) {
        const int32_t ids[] = {1, 5, 77, 200, 3, 9, 150, 42};
        const int n = 8, V = 256;
        float *la = malloc(n * V * sizeof *la), *lb = malloc(n * V * sizeof *lb);
        af_session *sa = NULL, *sb = NULL;
        if (CHECK(la && lb && af_session_new(a, n, &sa) == AF_OK && af_session_new(b, n, &sb) == AF_OK &&
                      af_session_eval(sa, ids, n, NULL, la) == AF_OK && af_session_eval(sb, ids, n, NULL, lb) == AF_OK,
                  "eval f32 / f16")) {
            double d = tl_max_abs_diff(la, lb, (size_t)n * V, NULL);
            printf("  tiny llama F16 weights vs F32: max |logit diff| %.3g\n", d);
            CHECK_CLOSE("F16 weights vs F32", lb, la, (size_t)n * V, 2e-3, 1e-2);
            CHECK(d > 0, "the F16 copy gives different logits (its rounded weights are used)");
        }
        af_session_free(sa);
        af_session_free(sb);
        free(la);
        free(lb);
    }
    af_model_free(a);
    af_model_free(b);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* ---- bad input: a copy of the tiny llama directory with one thing broken ---- */

static char *slurp(const char *dir, const char *name, size_t *len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return tl_read_file(p, len);
}

static int put(const char *dir, const char *name, const char *data, size_t len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* Make `dst` a copy of the tiny llama fixture, with config.json's `from` replaced by `to` (when from
 * != NULL). */
static int make_copy(const char *dst, const char *from, const char *to) {
    static const char *files[] = {"config.json",
                                  "model.safetensors.index.json",
                                  "model-00001-of-00005.safetensors",
                                  "model-00002-of-00005.safetensors",
                                  "model-00003-of-00005.safetensors",
                                  "model-00004-of-00005.safetensors",
                                  "model-00005-of-00005.safetensors"};
    mkdir(dst, 0755);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        size_t len;
        char *b = slurp("tests/fixtures/hf_tiny_llama", files[i], &len);
        if (!b) return 0;
        int ok;
        char *at = i == 0 && from ? strstr(b, from) : NULL;
        if (at) {
            size_t fl = strlen(from), tl = strlen(to);
            char *nb = malloc(len - fl + tl + 1);
            memcpy(nb, b, (size_t)(at - b));
            memcpy(nb + (at - b), to, tl);
            memcpy(nb + (at - b) + tl, at + fl, len - (size_t)(at - b) - fl);
            ok = put(dst, files[i], nb, len - fl + tl);
            free(nb);
        } else {
            ok = (!from || i != 0) && put(dst, files[i], b, len);
        }
        free(b);
        if (!ok) return 0;
    }
    return 1;
}

static void expect_fail(const char *dir, af_status want, const char *msg1, const char *msg2, const char *what) {
    af_model *m = NULL;
    af_status st = af_model_load(T_CTX, dir, &m);
    CHECK(st == want && !m && strstr(af_last_error(), msg1) && strstr(af_last_error(), msg2),
          "%s: status %d (want %d), message '%s'", what, (int)st, (int)want, af_last_error());
    af_model_free(m);

}

static void test_bad_input(void) {
    char tmpl[] = "/tmp/af_test_hf_XXXXXX";
    char *root = mkdtemp(tmpl);
    if (!CHECK(root != NULL, "mkdtemp")) return;
    char d[256];
    static const struct { const char *from, *to, *m1, *m2; af_status st; const char *what; } cases[] = {
        {"\"hidden_size\": 64,", "", "config.json", "'hidden_size': missing", AF_ERR_FORMAT, "missing key"},
        {"\"hidden_size\": 64", "\"hidden_size\": \"64\"", "config.json", "'hidden_size': expected an integer",
         AF_ERR_FORMAT, "wrong type"},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1", "config.json", "rms_norm_eps", AF_ERR_FORMAT, "negative eps"},
        {"\"model_type\": \"llama\"", "\"model_type\": \"mixtral\"", "config.json", "model_type", AF_ERR_UNSUPPORTED,
         "unknown model type"},
        {"\"vocab_size\": 256", "\"vocab_size\": 256, \"num_local_experts\": 8", "config.json", "num_local_experts",
         AF_ERR_UNSUPPORTED, "MoE"},
        {"\"vocab_size\": 256", "\"vocab_size\": 256, \"vision_config\": {}", "config.json", "vision_config",
         AF_ERR_UNSUPPORTED, "vision"},
        {"\"intermediate_size\": 96", "\"intermediate_size\": 97", "model.layers.0.mlp", "shape", AF_ERR_FORMAT,
         "shape disagrees with config"},
        {"\"vocab_size\": 256", "\"vocab_size\": 300", "model.embed_tokens.weight", "vocab_size", AF_ERR_FORMAT,
         "vocab disagrees"},
        {"\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "config.json", "rope", AF_ERR_UNSUPPORTED,
         "rope scaling"},
        {"{", "[", "config.json", "malformed", AF_ERR_FORMAT, "not JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(d, sizeof d, "%s/c%zu", root, i);
        if (!CHECK(make_copy(d, cases[i].from, cases[i].to), "copy for case '%s'", cases[i].what)) continue;
        expect_fail(d, cases[i].st, cases[i].m1, cases[i].m2, cases[i].what);
    }
    /* an index naming a missing shard */
    snprintf(d, sizeof d, "%s/shard", root);
    if (make_copy(d, NULL, NULL)) {
        char p[300];
        snprintf(p, sizeof p, "%s/model-00003-of-00005.safetensors", d);
        unlink(p);
        expect_fail(d, AF_ERR_NOT_FOUND, "model.safetensors.index.json", "model-00003-of-00005.safetensors",
                    "missing shard");
    }
    /* unsupported dtype: an I32 tensor in place of a norm (same byte size as F32) */
    snprintf(d, sizeof d, "%s/dtype", root);
    if (make_copy(d, NULL, NULL)) {
        size_t len;
        char *b = slurp(d, "model-00005-of-00005.safetensors", &len);
        char *at = b ? memmem(b, len, "\"F32\"", 5) : NULL;
        if (CHECK(at != NULL, "dtype case: F32 in shard 5 header")) {
            memcpy(at, "\"I32\"", 5);
            put(d, "model-00005-of-00005.safetensors", b, len);
            expect_fail(d, AF_ERR_UNSUPPORTED, "dtype I32", "F32, F16, BF16", "unsupported dtype");
        }
        free(b);
    }
    /* no weights at all */
    snprintf(d, sizeof d, "%s/empty", root);
    mkdir(d, 0755);
    {
        size_t len;
        char *b = slurp("tests/fixtures/hf_tiny_llama", "config.json", &len);
        if (b && put(d, "config.json", b, len))
            expect_fail(d, AF_ERR_NOT_FOUND, "model.safetensors", "index.json", "no weights");
        free(b);
    }
    /* unknown tokenizer model type: the model loads, the tokenizer is reported missing */
    snprintf(d, sizeof d, "%s/tok", root);
    if (make_copy(d, NULL, NULL)) {
        const char *tj = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}";
        put(d, "tokenizer.json", tj, strlen(tj));
        af_model *m = NULL;
        if (CHECK(af_model_load(T_CTX, d, &m) == AF_OK, "load with a WordPiece tokenizer.json: %s", af_last_error())) {
            CHECK(af_model_tokenizer(m) == NULL, "WordPiece tokenizer refused");
            af_model_free(m);
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    struct stat sb;
    if (stat("tests/fixtures/hf_tiny_llama/config.json", &sb) != 0) {
        tl_skip("tests/fixtures/hf_tiny_llama missing (run from the repository root)");
        return tl_finish("test_hf");
    }
    test_tiny("tests/fixtures/hf_tiny_llama", "llama", 0, 1);
    test_tiny("tests/fixtures/hf_tiny_gemma3", "gemma3", 1, 1);
    test_tiny("tests/fixtures/hf_tiny_qwen2", "qwen2", 1, 1);
    test_tiny("tests/fixtures/hf_tiny_qwen3", "qwen3", 0, 2);
    test_f16();
    test_bad_input();
    test_smollm2();
    return tl_finish("test_hf");
}
