/*
 * test_qwen.c — the qwen2 and qwen3 architectures against transformers + PEFT on tiny random models
 * (tests/ref/make_qwen_ref.py: tests/fixtures/tiny_{qwen2,qwen3}.gguf, f32, written with the gguf
 * package under llama.cpp's names and metadata, and the references qwen_{qwen2,qwen3}_ref.bin).
 *   qwen2: hidden 48, 6 heads of 8, ONE KV head, 2 layers, random q/k/v biases, tied head.
 *   qwen3: hidden 40, 4 heads of head_dim 16 (!= 40/4), 2 KV heads, 3 layers, q/k norms, untied head.
 * Checked per model:
 *   - hyper-parameters and the architecture description read from the file;
 *   - logits of every position and vocabulary entry of 2 sequences (batched session eval);
 *   - greedy continuation (10 tokens, KV-cache decode) identical to transformers' argmax;
 *   - token-by-token decode with the KV cache equals the batched forward;
 *   - PEFT LoRA (r 4, alpha 8, all 7 projections) gradients, every entry of every adapter, for a
 *     classification loss (mean pooling + Linear head, 3 samples packed) and a causal-LM loss (3
 *     samples packed, masked targets); the classification step again with checkpointing
 *     (forward recomputed in the backward: the biases / q-k norms in that mode too) gives the same
 *     gradients;
 *   - tokenizer ids of the qwen2 pre-tokenizer against Hugging Face tokenizers;
 *   - chat: the Qwen2.5-style template (default system prompt inside a Jinja literal) renders as
 *     transformers' apply_chat_template; the <think> template (qwen3) is refused with a message;
 *   - qwen3: a PEFT adapter (save_pretrained) loads into GGUF row order unchanged (no q/k
 *     permutation for RoPE-NEOX architectures), and afinar's export of the same parameters holds
 *     the same tensors as PEFT's file.
 * Tolerances (both sides f32; differences are summation order and expf): logits 1e-4 absolute;
 * decode vs batched 1e-5 absolute; losses 1e-5 relative; LoRA / head gradients
 * |diff| <= 1e-4·max|ref| + 1e-3·|ref| per tensor. Measured values print (worst over both models).
 */
#include "afinar.h"
#include "testlib.h"

#include "formats/safetensors.h"
#include "lora/adapter_io.h"
#include "lora/lora.h"
#include "model/model.h"
#include "train/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peft_fixture.h" /* rd/take/u32/f64, lora_a/lora_b */
#include "tinymodel.c"    /* tm_write: a file of an unsupported architecture */

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m > 0 ? m : 1e-30;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double w_logits, w_dec, w_loss, w_grad;

/* P: LoRA A/B from the formulas (HF row order = GGUF row order for these architectures). */
static void fill_lora(const af_param_layout *lay, float *P, int nl, int rank) {
    for (int l = 0; l < nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            for (int64_t j = 0; j < rank; j++)
                for (int64_t i = 0; i < s->in; i++) P[s->a_off + j * s->in + i] = lora_a(l, p, j, i);
            for (int64_t o = 0; o < s->out; o++)
                for (int64_t j = 0; j < rank; j++) P[s->b_off + o * rank + j] = lora_b(l, p, o, j);
        }
}

/* Compare G's adapters with the fixture's per-(l, p) dA, dB. Returns 0 on a malformed fixture. */
static int check_grads(rd *r, const af_param_layout *lay, const float *G, int nl, int rank, const char *what) {
    for (int l = 0; l < nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            uint32_t din = u32(r), dout = u32(r);
            const float *gA = take(r, 4 * (size_t)rank * din), *gB = take(r, 4 * (size_t)dout * rank);
            if (!CHECK(gA && gB && din == s->in && dout == s->out, "%s: fixture gradient %d/%d shape", what, l, p))
                return 0;
            char w[96];
            const double ma = max_abs(gA, (size_t)rank * din), mb = max_abs(gB, (size_t)dout * rank);
            snprintf(w, sizeof w, "%s dA layer %d %s", what, l, af_proj_name((af_proj)p));
            CHECK_CLOSE(w, G + s->a_off, gA, (size_t)rank * din, 1e-4 * ma, 1e-3);
            snprintf(w, sizeof w, "%s dB layer %d %s", what, l, af_proj_name((af_proj)p));
            CHECK_CLOSE(w, G + s->b_off, gB, (size_t)dout * rank, 1e-4 * mb, 1e-3);
            w_grad = fmax(w_grad, tl_max_abs_diff(G + s->a_off, gA, (size_t)rank * din, NULL) / ma);
            w_grad = fmax(w_grad, tl_max_abs_diff(G + s->b_off, gB, (size_t)dout * rank, NULL) / mb);
        }
    return 1;
}

/* Logits, greedy continuation, decode vs batched. */
static int check_inference(rd *r, af_model *m, int V) {
    uint32_t n_seq = u32(r);
    if (!CHECK(n_seq >= 1 && n_seq < 8, "fixture sequences")) return 0;
    af_session *s = NULL;
    if (!CHECK(af_session_new(m, 64, &s) == AF_OK, "session: %s", af_last_error())) return 0;
    float *all = malloc(sizeof(float) * 64 * (size_t)V), *last = malloc(sizeof(float) * (size_t)V),
          *dl = malloc(sizeof(float) * (size_t)V);
    int ok = 1;
    for (uint32_t k = 0; k < n_seq && ok; k++) {
        uint32_t n = u32(r);
        const int32_t *ids = n < 64 ? take(r, 4 * (size_t)n) : NULL;
        const float *ref = ids ? take(r, 4 * (size_t)n * V) : NULL;
        if (!(ok = CHECK(ref != NULL, "fixture sequence %u", k))) break;
        af_session_reset(s);
        CHECK(af_session_eval(s, ids, (int)n, last, all) == AF_OK, "eval: %s", af_last_error());
        char w[128];
        snprintf(w, sizeof w, "%s sequence %u logits (all positions)", m->cfg.architecture, k);
        CHECK_CLOSE(w, all, ref, (size_t)n * V, 1e-4, 0);
        w_logits = fmax(w_logits, tl_max_abs_diff(all, ref, (size_t)n * V, NULL));
        /* token-by-token with the KV cache */
        af_session_reset(s);
        for (uint32_t t = 0; t < n; t++) {
            af_session_eval(s, &ids[t], 1, dl, NULL);
            w_dec = fmax(w_dec, tl_max_abs_diff(dl, all + (size_t)t * V, (size_t)V, NULL));
        }
        snprintf(w, sizeof w, "%s sequence %u decode vs batched", m->cfg.architecture, k);
        CHECK_CLOSE(w, dl, last, (size_t)V, 1e-5, 0);
    }
    uint32_t np = u32(r);
    const int32_t *prompt = np < 32 ? take(r, 4 * (size_t)np) : NULL;
    uint32_t ng = u32(r);
    const int32_t *gen = ng < 32 ? take(r, 4 * (size_t)ng) : NULL;
    if (ok && CHECK(prompt && gen, "fixture greedy")) {
        af_session_reset(s);
        CHECK(af_session_eval(s, prompt, (int)np, last, NULL) == AF_OK, "prompt eval");
        int32_t next = argmax(last, V);
        int same = 1;
        for (uint32_t g = 0; g < ng; g++) {
            if (next != gen[g]) {
                fprintf(stderr, "%s: greedy token %u: %d, transformers %d\n", m->cfg.architecture, g, next, gen[g]);
                same = 0;
                break;
            }
            af_session_eval(s, &next, 1, dl, NULL);
            next = argmax(dl, V);
        }
        CHECK(same, "%s: greedy continuation of %u tokens identical to transformers", m->cfg.architecture, ng);
    } else
        ok = 0;
    free(all);
    free(last);
    free(dl);
    af_session_free(s);
    return ok;
}

/* Classification step (and again with checkpointing) against PEFT. */
static int check_cls(rd *r, af_model *m, int nl, int H) {
    const uint32_t B = u32(r), C = u32(r), rank = u32(r);
    float alpha;
    const void *pa = take(r, 4);
    if (!CHECK(pa && B >= 1 && B < 16 && C >= 2 && C < 16 && rank >= 1 && rank <= 16, "fixture classification"))
        return 0;
    memcpy(&alpha, pa, 4);
    const int32_t *ss = take(r, 4 * (size_t)(B + 1));
    if (!CHECK(ss && ss[0] == 0 && ss[B] > 0 && ss[B] < 512, "fixture seq_start")) return 0;
    const int32_t *tok = take(r, 4 * (size_t)ss[B]), *lab = take(r, 4 * (size_t)B);
    const double ref_loss = f64(r);
    const float *ref_logits = take(r, 4 * (size_t)B * C);
    if (!CHECK(tok && lab && ref_logits, "fixture classification body")) return 0;
    af_lora_config cfg = {(int32_t)rank, alpha, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    if (!CHECK(af_param_layout_init(&lay, m, &cfg, (int32_t)C) == AF_OK, "layout: %s", af_last_error())) return 0;
    if (!CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine: %s", af_last_error())) {
        af_param_layout_free(&lay);
        return 0;
    }
    float *P = malloc(sizeof(float) * (size_t)lay.n_total), *G = calloc((size_t)lay.n_total, sizeof(float)),
          *G2 = calloc((size_t)lay.n_total, sizeof(float));
    fill_lora(&lay, P, nl, (int)rank);
    for (int64_t c = 0; c < C; c++) {
        for (int64_t k = 0; k < H; k++)
            P[lay.head_w_off + c * H + k] = (float)(0.05 * sin(0.9 * (double)c + 0.031 * (double)k + 0.2));
        P[lay.head_b_off + c] = (float)(0.1 * (double)c - 0.1);
    }
    af_batch b = {tok, ss, (int32_t)B, ss[B], lab, NULL, NULL};
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    double loss = 0, loss2 = 0;
    float logits[256];
    CHECK(af_engine_step(e, P, G, &b, &o, 1.0f, &loss, logits) == AF_OK, "step: %s", af_last_error());
    CHECK(rel(loss, ref_loss) < 1e-5, "%s classification loss %.8f vs PEFT %.8f", m->cfg.architecture, loss, ref_loss);
    w_loss = fmax(w_loss, rel(loss, ref_loss));
    CHECK_CLOSE("classification logits", logits, ref_logits, (size_t)B * C, 1e-5, 1e-4);
    int ok = check_grads(r, &lay, G, nl, (int)rank, "classification");
    const float *dW = take(r, 4 * (size_t)C * H), *db = take(r, 4 * (size_t)C);
    if (ok && CHECK(dW && db, "fixture head gradients")) {
        CHECK_CLOSE("head dW", G + lay.head_w_off, dW, (size_t)C * H, 1e-4 * max_abs(dW, (size_t)C * H), 1e-3);
        CHECK_CLOSE("head db", G + lay.head_b_off, db, C, 1e-4 * max_abs(db, C), 1e-3);
    } else
        ok = 0;
    o.checkpointing = 1;
    CHECK(af_engine_step(e, P, G2, &b, &o, 1.0f, &loss2, NULL) == AF_OK, "checkpointed step: %s", af_last_error());
    CHECK(loss2 == loss, "checkpointing: same loss");
    CHECK_CLOSE("checkpointing: same gradients", G2, G, (size_t)lay.n_total, 0, 1e-6);
    free(P);
    free(G);
    free(G2);
    af_engine_free(e);
    af_param_layout_free(&lay);
    return ok;
}

/* Causal-LM step (3 samples packed in one batch, grad_scale 1/targets) against PEFT. */
static int check_lm(rd *r, af_model *m, int nl) {
    const uint32_t B = u32(r), rank = u32(r);
    float alpha;
    const void *pa = take(r, 4);
    if (!CHECK(pa && B >= 1 && B < 16 && rank >= 1 && rank <= 16, "fixture causal LM")) return 0;
    memcpy(&alpha, pa, 4);
    const int32_t *ss = take(r, 4 * (size_t)(B + 1));
    if (!CHECK(ss && ss[0] == 0 && ss[B] > 0 && ss[B] < 512, "fixture seq_start")) return 0;
    const int32_t *tok = take(r, 4 * (size_t)ss[B]), *tg = take(r, 4 * (size_t)ss[B]);
    const double ref_loss = f64(r);
    const uint32_t ref_nt = u32(r);
    if (!CHECK(tok && tg && ref_nt > 0, "fixture causal-LM body")) return 0;
    af_lora_config cfg = {(int32_t)rank, alpha, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    if (!CHECK(af_param_layout_init(&lay, m, &cfg, 0) == AF_OK, "layout: %s", af_last_error())) return 0;
    if (!CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine: %s", af_last_error())) {
        af_param_layout_free(&lay);
        return 0;
    }
    float *P = malloc(sizeof(float) * (size_t)lay.n_total), *G = calloc((size_t)lay.n_total, sizeof(float));
    fill_lora(&lay, P, nl, (int)rank);
    const af_batch b = {tok, ss, (int32_t)B, ss[B], NULL, NULL, tg};
    const af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0};
    af_lm_loss res;
    CHECK(af_engine_lm_step(e, P, G, &b, &o, (float)(1.0 / ref_nt), &res) == AF_OK, "lm step: %s", af_last_error());
    const double loss = res.loss_sum / (double)res.n_targets;
    CHECK(res.n_targets == (int64_t)ref_nt, "targets %lld vs %u", (long long)res.n_targets, ref_nt);
    CHECK(rel(loss, ref_loss) < 1e-5, "%s causal-LM loss %.8f vs PEFT %.8f", m->cfg.architecture, loss, ref_loss);
    w_loss = fmax(w_loss, rel(loss, ref_loss));
    int ok = check_grads(r, &lay, G, nl, (int)rank, "causal-LM");
    free(P);
    free(G);
    af_engine_free(e);
    af_param_layout_free(&lay);
    return ok;
}

static int check_tokenizer_chat(rd *r, af_model *m) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    if (!CHECK(tok != NULL, "%s: tokenizer loaded (%s)", m->cfg.architecture, m->tok_error)) return 0;
    uint32_t ns = u32(r);
    if (!CHECK(ns < 32, "fixture strings")) return 0;
    for (uint32_t k = 0; k < ns; k++) {
        uint32_t len = u32(r);
        const char *str = take(r, len);
        uint32_t n = u32(r);
        const int32_t *ref = n < 4096 ? take(r, 4 * (size_t)n) : NULL;
        if (!CHECK(str && ref, "fixture string %u", k)) return 0;
        int32_t *ids = NULL;
        size_t nid = 0;
        CHECK(af_tokenize(tok, str, len, 0, 1, &ids, &nid) == AF_OK, "tokenize: %s", af_last_error());
        int same = nid == n && (n == 0 || memcmp(ids, ref, 4 * (size_t)n) == 0);
        CHECK(same, "%s: tokenizer ids of \"%.*s\" identical to HF tokenizers (%zu vs %u ids)", m->cfg.architecture,
              (int)len, str, nid, n);
        free(ids);
    }
    uint32_t len = u32(r);
    const char *want = take(r, len);
    char *got = NULL;
    af_status st = af_chat_format(m, NULL, "What is 2+2?", &got);
    if (len == 0) {
        CHECK(st == AF_ERR_UNSUPPORTED && strstr(af_last_error(), "<think>"),
              "%s: a <think> template is refused with a message: %s", m->cfg.architecture, af_last_error());
    } else if (CHECK(st == AF_OK && want, "chat format: %s", af_last_error())) {
        CHECK(strlen(got) == len && !memcmp(got, want, len), "%s: chat prompt as transformers renders it:\n%s\nwant:\n%.*s",
              m->cfg.architecture, got, (int)len, want);
    }
    free(got);
    return 1;
}

/* PEFT's adapter for the qwen3 model loads unpermuted; afinar's export equals PEFT's tensors. */
static void check_adapter(af_model *m) {
    const char *dir = "tests/fixtures/peft_adapter_qwen3";
    af_adapter_info info;
    if (!CHECK(af_adapter_read_info(dir, &info) == AF_OK, "%s: %s", dir, af_last_error())) return;
    af_param_layout lay;
    float *P = NULL;
    if (CHECK(af_adapter_load_for_model(dir, &info, m, 0.0f, 0, 0, &lay, &P) == AF_OK, "load %s: %s", dir,
              af_last_error())) {
        float *want = calloc((size_t)lay.n_total, sizeof(float));
        fill_lora(&lay, want, m->cfg.num_hidden_layers, lay.lora.r);
        CHECK_CLOSE("PEFT adapter loaded into GGUF order (no q/k permutation)", P, want, (size_t)lay.n_total, 0, 0);
        char out[64] = "/tmp/afinar_qwen3_XXXXXX";
        if (!CHECK(mkdtemp(out) != NULL, "mkdtemp")) out[0] = 0;
        af_adapter_save_opts so = {0};
        so.architecture = m->cfg.architecture;
        so.n_head = m->cfg.num_attention_heads;
        so.n_kv_head = m->cfg.num_key_value_heads;
        so.head_dim = m->cfg.head_dim;
        if (out[0] && CHECK(af_adapter_save(out, &lay, P, &so) == AF_OK, "save: %s", af_last_error())) {
            char a[300], b[300];
            snprintf(a, sizeof a, "%s/adapter_model.safetensors", dir);
            snprintf(b, sizeof b, "%s/adapter_model.safetensors", out);
            af_st_file *fa = NULL, *fb = NULL;
            if (CHECK(af_st_open(a, &fa) == AF_OK && af_st_open(b, &fb) == AF_OK, "open: %s", af_last_error())) {
                size_t n = af_st_count(fa), same = 0;
                CHECK(af_st_count(fb) == n, "afinar's export has PEFT's %zu tensors (%zu)", n, af_st_count(fb));
                for (size_t i = 0; i < n; i++) {
                    const af_st_tensor *ta = af_st_tensor_at(fa, i), *tb = af_st_find(fb, ta->name);
                    if (!CHECK(tb && tb->n_elem == ta->n_elem, "export: tensor %s", ta->name)) continue;
                    float *x = malloc(sizeof(float) * ta->n_elem), *y = malloc(sizeof(float) * ta->n_elem);
                    af_st_read_f32(fa, ta, x, ta->n_elem);
                    af_st_read_f32(fb, tb, y, tb->n_elem);
                    same += memcmp(x, y, sizeof(float) * ta->n_elem) == 0;
                    free(x);
                    free(y);
                }
                CHECK(same == n, "export: %zu of %zu tensors bit-identical to PEFT's", same, n);
            }
            af_st_close(fa);
            af_st_close(fb);
            remove(b);
            snprintf(b, sizeof b, "%s/adapter_config.json", out);
            remove(b);
            snprintf(b, sizeof b, "%s/afinar.json", out);
            remove(b);
            remove(out);
        }
        free(want);
        free(P);
        af_param_layout_free(&lay);
    }
    af_adapter_info_free(&info);
}

static void run(const char *arch) {
    char gpath[128], fpath[128];
    snprintf(gpath, sizeof gpath, "tests/fixtures/tiny_%s.gguf", arch);
    snprintf(fpath, sizeof fpath, "tests/fixtures/qwen_%s_ref.bin", arch);
    size_t len = 0;
    char *buf = tl_read_file(fpath, &len);
    if (!CHECK(buf != NULL, "fixture %s missing (tests/ref/make_qwen_ref.py)", fpath)) return;
    rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    const void *magic = take(&r, 4);
    const uint32_t ver = u32(&r), V = u32(&r), nl = u32(&r), H = u32(&r);
    af_model *m = NULL;
    if (!CHECK(magic && !memcmp(magic, "AFQW", 4) && ver == 1, "%s: header", fpath) ||
        !CHECK(af_model_load(T_CTX, gpath, &m) == AF_OK, "load %s: %s", gpath, af_last_error())) {
        free(buf);
        return;
    }
    const af_model_config *c = &m->cfg;
    const af_arch_desc *D = &m->desc;
    const int q3 = !strcmp(arch, "qwen3");
    CHECK(!strcmp(c->architecture, arch) && c->vocab_size == (int32_t)V && c->num_hidden_layers == (int32_t)nl &&
              c->hidden_size == (int32_t)H,
          "%s: architecture, vocab %d, layers %d, hidden %d", arch, c->vocab_size, c->num_hidden_layers, c->hidden_size);
    if (q3)
        CHECK(c->num_attention_heads == 4 && c->num_key_value_heads == 2 && c->head_dim == 16 && !c->tie_word_embeddings &&
                  D->qk_norm && !D->qkv_bias && D->rope_neox && !D->sandwich_norm && D->act == AF_ACT_SWIGLU,
              "qwen3: heads 4/2, head_dim 16 from key_length, separate head, q/k norms, no bias, NEOX");
    else
        CHECK(c->num_attention_heads == 6 && c->num_key_value_heads == 1 && c->head_dim == 8 && c->tie_word_embeddings &&
                  !D->qk_norm && D->qkv_bias && D->rope_neox && !D->sandwich_norm && D->act == AF_ACT_SWIGLU &&
                  m->layers[0].bq && m->layers[1].bv,
              "qwen2: heads 6/1, head_dim 8, tied head, q/k/v biases, NEOX");
    CHECK(fabsf(c->rope_theta - 1e6f) < 1 && fabsf(c->rms_norm_eps - 1e-6f) < 1e-9f, "%s: rope_theta %g, eps %g", arch,
          (double)c->rope_theta, (double)c->rms_norm_eps);
    if (check_inference(&r, m, (int)V) && check_cls(&r, m, (int)nl, (int)H) && check_lm(&r, m, (int)nl))
        check_tokenizer_chat(&r, m);
    if (q3) check_adapter(m);
    af_model_free(m);
    free(buf);
}

/* Mixture-of-experts variants are refused by name, with the supported list. */
static void check_refused(void) {
    tm_spec s = tm_default("qwen3moe", AF_TYPE_F32);
    char path[64] = "/tmp/afinar_qwen3moe_XXXXXX";
    int fd = mkstemp(path);
    if (!CHECK(fd >= 0, "mkstemp")) return;
    close(fd);
    af_model *m = NULL;
    if (CHECK(tm_write(&s, path) == AF_OK, "write: %s", af_last_error())) {
        af_status st = af_model_load(T_CTX, path, &m);
        CHECK(st == AF_ERR_UNSUPPORTED && m == NULL && strstr(af_last_error(), "'qwen3moe' is not supported") &&
                  strstr(af_last_error(), "qwen2, qwen3") && strstr(af_last_error(), "mixture-of-experts"),
              "qwen3moe refused: %s", af_last_error());
    }
    af_model_free(m);
    unlink(path);
}

int main(void) {
    run("qwen2");
    run("qwen3");
    check_refused();
    printf("qwen2/qwen3 vs transformers/PEFT (worst of both): logits %.2e abs, decode vs batched %.2e abs, loss %.2e "
           "rel, LoRA/head gradients %.2e of max|ref|\n",
           w_logits, w_dec, w_loss, w_grad);
    return tl_finish("qwen");
}
