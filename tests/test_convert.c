/*
 * test_convert.c — af_model_convert (`afinar convert`): Hugging Face directories to GGUF.
 *   - every tiny HF fixture (llama f32 in 5 shards, gemma3 bf16 with query_pre_attn_scalar 20 and
 *     soft-capping, qwen2 with biases, qwen3 with q/k norms, gemma4 with PLE / KV sharing / k_eq_v)
 *     converted with --type keep: the GGUF loads with the directory's description and its logits equal
 *     the directory's bit for bit (gemma3: within 2e-6, its attention scale folded into attn_q_norm),
 *     the stored types are kept (gemma3: BF16), and re-converting is deterministic (same bytes);
 *   - gemma4: the tokenizer written as tokenizer.ggml.* ("gemma4", merges) gives tokenizer.json's ids;
 *   - --type f16 / q8_0 / q4_k / q6_k on the tiny llama and gemma4: the types of the matrices, the
 *     fallback count (rows of 32..64 values cannot hold 256-blocks: q8_0), logits within the rounding
 *     (f16 1e-2, the others 0.5 absolute on logits of magnitude ~5);
 *   - SmolLM2 HF directory (models/SmolLM2-135M-Instruct-hf when present, scripts/make_hf_dirs.sh): keep
 *     -> logits bit for bit equal to the directory's, the written tokenizer gives tokenizer.json's ids on
 *     the 1,160 strings of tests/fixtures/tokenizer_smollm2.txt;
 *   - bad input: unknown type, not a directory, no config.json, existing output without overwrite:
 *     an error naming the path, nothing written.
 */
#include "afinar.h"
#include "afinar_app.h"
#include "testlib.h"

#include "formats/gguf.h"
#include "kernels/quant.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Logits of every position of `n` fixed ids. */
static float *logits_of(af_model *m, const int32_t *ids, int n) {
    const int V = af_model_get_config(m)->vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
    af_session *s = NULL;
    if (!lg || af_session_new(m, n, &s) != AF_OK || af_session_eval(s, ids, n, NULL, lg) != AF_OK) {
        CHECK(0, "eval: %s", af_last_error());
        free(lg);
        lg = NULL;
    }
    af_session_free(s);
    return lg;
}

/* Convert `dir` with `type` to `out`, load both and compare logits of 12 ids (max |diff| <= tol;
 * tol 0 = bit for bit). Returns the max |diff| (-1 on failure). */
static double convert_compare(const char *dir, const char *type, const char *out, double tol, af_convert_stats *cs) {
    af_convert_opts o = {type, 1, NULL};
    if (!CHECK(af_model_convert(dir, out, &o, cs) == AF_OK, "convert %s --type %s: %s", dir, type ? type : "keep",
               af_last_error()))
        return -1;
    af_model *a = NULL, *b = NULL;
    if (!CHECK(af_model_load(T_CTX, dir, &a) == AF_OK && af_model_load(T_CTX, out, &b) == AF_OK, "load: %s",
               af_last_error())) {
        af_model_free(a);
        af_model_free(b);
        return -1;
    }
    const af_model_config *ca = af_model_get_config(a), *cb = af_model_get_config(b);
    CHECK(!strcmp(ca->architecture, cb->architecture) && ca->vocab_size == cb->vocab_size &&
              ca->num_hidden_layers == cb->num_hidden_layers && ca->hidden_size == cb->hidden_size &&
              ca->tie_word_embeddings == cb->tie_word_embeddings && a->kv_floats == b->kv_floats &&
              a->desc.final_logit_softcap == b->desc.final_logit_softcap && a->desc.ple_dim == b->desc.ple_dim &&
              a->desc.n_kv_shared == b->desc.n_kv_shared,
          "%s -> %s: same architecture, sizes, soft-cap, PLE, KV sharing", dir, out);
    int same_layers = 1;
    for (int l = 0; l < ca->num_hidden_layers; l++) {
        const af_layer *x = &a->layers[l], *y = &b->layers[l];
        same_layers &= x->head_dim == y->head_dim && x->n_kv_head == y->n_kv_head && x->n_ff == y->n_ff &&
                       x->window == y->window && x->kv_src == y->kv_src && x->rope_base == y->rope_base &&
                       x->out_scale == y->out_scale && x->v_from_k == y->v_from_k &&
                       !x->rope_freq_factors == !y->rope_freq_factors;
    }
    CHECK(same_layers, "%s: every layer's sizes, window, RoPE base/factors, kv_src, output scale", out);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (int32_t)((i * 37 + 11) % ca->vocab_size);
    float *la = logits_of(a, ids, 12), *lb = logits_of(b, ids, 12);
    double d = -1;
    if (la && lb) {
        d = tl_max_abs_diff(la, lb, (size_t)12 * ca->vocab_size, NULL);
        CHECK(d <= tol, "%s --type %s: logits of the GGUF vs the directory: max |diff| %.3g (tolerance %.3g)", dir,
              type ? type : "keep", d, tol);
    }
    free(la);
    free(lb);
    af_model_free(a);
    af_model_free(b);
    return d;
}

/* Type of GGUF tensor `name` in `path` (UINT32_MAX when absent). */
static uint32_t type_in(const char *path, const char *name) {
    af_gguf *g = NULL;
    if (af_gguf_open(path, &g) != AF_OK) return UINT32_MAX;
    const af_gguf_tensor *t = af_gguf_find_tensor(g, name);
    uint32_t ty = t ? t->type : UINT32_MAX;
    af_gguf_close(g);
    return ty;
}

static int same_bytes(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = tl_read_file(a, &na), *y = tl_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static void test_tiny(void) {
    static const struct {
        const char *dir;
        double tol;
    } dirs[] = {{"tests/fixtures/hf_tiny_llama", 0},
                {"tests/fixtures/hf_tiny_gemma3", 2e-6},
                {"tests/fixtures/hf_tiny_qwen2", 0},
                {"tests/fixtures/hf_tiny_qwen3", 0},
                {"tests/fixtures/hf_tiny_gemma4", 0}};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        af_convert_stats cs;
        const char *out = tmp_path("keep.gguf"), *out2 = tmp_path("keep2.gguf");
        const double d = convert_compare(dirs[i].dir, NULL, out, dirs[i].tol, &cs);
        printf("  %s -> GGUF (keep): %d tensors, max |logit diff| %.3g%s\n", dirs[i].dir, cs.tensors, d,
               cs.folded_q_scale ? " (attention scale folded into attn_q_norm)" : "");
        CHECK(cs.converted == 0 && cs.fallback == 0, "%s keep: nothing converted", dirs[i].dir);
        CHECK(cs.folded_q_scale == (strstr(dirs[i].dir, "gemma3") != NULL),
              "%s: the attention scale is folded only for gemma3 (query_pre_attn_scalar 20 != head_dim 24)",
              dirs[i].dir);
        af_convert_opts o = {"keep", 1, NULL};
        CHECK(af_model_convert(dirs[i].dir, out2, &o, NULL) == AF_OK && same_bytes(out, out2),
              "%s: a second conversion writes the same bytes", dirs[i].dir);
        if (strstr(dirs[i].dir, "gemma3"))
            CHECK(type_in(out, "blk.0.attn_q.weight") == AF_TYPE_BF16 && type_in(out, "blk.0.attn_norm.weight") == AF_TYPE_F32,
                  "gemma3 keep: BF16 matrices stay BF16, norms F32");
        if (strstr(dirs[i].dir, "gemma4")) {
            CHECK(type_in(out, "blk.4.attn_k.weight") == UINT32_MAX && type_in(out, "blk.3.attn_v.weight") == UINT32_MAX &&
                      type_in(out, "rope_freqs.weight") == AF_TYPE_F32 &&
                      type_in(out, "per_layer_token_embd.weight") == AF_TYPE_F32 &&
                      type_in(out, "blk.5.layer_output_scale.weight") == AF_TYPE_F32,
                  "gemma4: no k on the KV-sharing layer 4, no v on global layer 3, rope_freqs, PLE table, output scale");
            af_model *a = NULL, *b = NULL;
            if (CHECK(af_model_load(T_CTX, dirs[i].dir, &a) == AF_OK && af_model_load(T_CTX, out, &b) == AF_OK,
                      "load") &&
                CHECK(af_model_tokenizer(a) && af_model_tokenizer(b), "gemma4 tokenizers")) {
                static const char *const s[] = {"Hello world! The quick brown fox.", "  leading spaces\tand tabs",
                                                "Über Straßen: naïve café 東京 😀", "<|turn>user\nhi<turn|>"};
                int same = 1;
                for (size_t k = 0; k < 4; k++) {
                    int32_t *x = NULL, *y = NULL;
                    size_t nx = 0, ny = 0;
                    af_tokenize(af_model_tokenizer(a), s[k], strlen(s[k]), 1, 1, &x, &nx);
                    af_tokenize(af_model_tokenizer(b), s[k], strlen(s[k]), 1, 1, &y, &ny);
                    same &= nx == ny && nx > 0 && !memcmp(x, y, nx * sizeof *x);
                    free(x);
                    free(y);
                }
                CHECK(same, "gemma4: the GGUF tokenizer (gemma4, merges) gives tokenizer.json's ids on 4 strings");
            }
            af_model_free(a);
            af_model_free(b);
        }
        unlink(out);
        unlink(out2);
    }
}

static void test_types(void) {
    static const struct {
        const char *type;
        uint32_t want;
        double tol;
    } t[] = {{"f16", AF_TYPE_F16, 1e-2}, {"q8_0", AF_TYPE_Q8_0, 0.5}, {"q4_k", AF_TYPE_Q8_0, 0.5}, {"q6_k", AF_TYPE_Q8_0, 0.5}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        af_convert_stats cs;
        const char *out = tmp_path("typed.gguf");
        const double d = convert_compare("tests/fixtures/hf_tiny_llama", t[i].type, out, t[i].tol, &cs);
        const uint32_t ty = type_in(out, "blk.0.attn_q.weight");
        const int k_quant = !strcmp(t[i].type, "q4_k") || !strcmp(t[i].type, "q6_k");
        CHECK(ty == t[i].want && type_in(out, "blk.0.attn_norm.weight") == AF_TYPE_F32 && cs.converted == cs.tensors - 5 &&
                  cs.fallback == (k_quant ? cs.converted : 0),
              "tiny llama --type %s: matrices %s (rows of 64: %s), vectors f32, %d converted, %d fallbacks", t[i].type,
              af_type_name(ty), k_quant ? "256-blocks do not fit, q8_0" : "fits", cs.converted, cs.fallback);
        printf("  tiny llama --type %s: max |logit diff| %.3g\n", t[i].type, d);
        unlink(out);
    }
    af_convert_stats cs;
    const double d = convert_compare("tests/fixtures/hf_tiny_gemma4", "q8_0", tmp_path("g4q8.gguf"), 0.5, &cs);
    printf("  tiny gemma4 --type q8_0: max |logit diff| %.3g (%d converted, %d fallbacks)\n", d, cs.converted, cs.fallback);
    CHECK(cs.converted > 0 && cs.fallback > 0, "tiny gemma4 q8_0: rows of 24 or 12 values fall back to f16");
    unlink(tmp_path("g4q8.gguf"));
}

/* SmolLM2's HF directory (when present): keep is exact; the written tokenizer gives the same ids. */
static void test_smollm2(void) {
    const char *dir = tl_model_path("SmolLM2-135M-Instruct-hf");
    if (!dir) return;
    char d[1024];
    snprintf(d, sizeof d, "%s", dir);
    af_convert_stats cs;
    const char *out = tmp_path("smollm2.gguf");
    const double diff = convert_compare(d, NULL, out, 0, &cs);
    printf("  SmolLM2 HF dir -> GGUF (keep): %d tensors, %llu bytes, max |logit diff| %.3g\n", cs.tensors,
           (unsigned long long)cs.bytes, diff);
    af_model *a = NULL, *b = NULL;
    size_t len = 0;
    char *fx = tl_read_file("tests/fixtures/tokenizer_smollm2.txt", &len);
    if (CHECK(fx && af_model_load(T_CTX, d, &a) == AF_OK && af_model_load(T_CTX, out, &b) == AF_OK, "load: %s",
              af_last_error())) {
        /* every "T <hex>" line of the fixture: the string */
        int n = 0, bad = 0;
        for (char *line = fx; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            if (line[0] == 'T' && line[1] == ' ') {
                size_t hl = strlen(line + 2), bl = hl / 2;
                char *s = malloc(bl + 1);
                for (size_t k = 0; k < bl; k++) {
                    unsigned v = 0;
                    sscanf(line + 2 + 2 * k, "%2x", &v);
                    s[k] = (char)v;
                }
                int32_t *x = NULL, *y = NULL;
                size_t nx = 0, ny = 0;
                af_tokenize(af_model_tokenizer(a), s, bl, 1, 1, &x, &nx);
                af_tokenize(af_model_tokenizer(b), s, bl, 1, 1, &y, &ny);
                bad += !(nx == ny && (nx == 0 || !memcmp(x, y, nx * sizeof *x)));
                n++;
                free(x);
                free(y);
                free(s);
            }
            line = nl ? nl + 1 : NULL;
        }
        CHECK(n >= 1000 && bad == 0, "SmolLM2: the converted GGUF's tokenizer gives tokenizer.json's ids on %d of %d "
              "fixture strings", n - bad, n);
        CHECK(af_tokenizer_chat_template(af_model_tokenizer(b)) != NULL, "SmolLM2: the chat template travels");
    }
    af_model_free(a);
    af_model_free(b);
    free(fx);
    unlink(out);
}

static void test_bad(void) {
    const char *out = tmp_path("bad.gguf");
    af_convert_opts o = {"q3_x", 0, NULL};
    CHECK(af_model_convert("tests/fixtures/hf_tiny_qwen2", out, &o, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "unknown --type 'q3_x'") && !exists(out),
          "unknown type refused, nothing written: %s", af_last_error());
    o.type = NULL;
    CHECK(af_model_convert("tests/fixtures/tiny_qwen2.gguf", out, &o, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "tests/fixtures/tiny_qwen2.gguf: not a directory") && !exists(out),
          "a GGUF file refused (not a directory): %s", af_last_error());
    CHECK(af_model_convert(g_dir, out, &o, NULL) == AF_ERR_NOT_FOUND && strstr(af_last_error(), "without config.json") &&
              !exists(out),
          "a directory without config.json refused: %s", af_last_error());
    CHECK(af_model_convert("tests/fixtures/hf_tiny_qwen2", out, &o, NULL) == AF_OK && exists(out), "good conversion");
    size_t n0 = 0;
    char *before = tl_read_file(out, &n0);
    CHECK(af_model_convert("tests/fixtures/hf_tiny_qwen3", out, &o, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "exists (use --overwrite to replace it)") && same_bytes(out, out),
          "an existing output is kept without overwrite: %s", af_last_error());
    size_t n1 = 0;
    char *after = tl_read_file(out, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0), "the existing output is unchanged");
    free(before);
    free(after);
    unlink(out);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_convert_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp")) return tl_finish("convert");
    test_tiny();
    test_types();
    test_smollm2();
    test_bad();
    rmdir(g_dir);
    return tl_finish("convert");
}
