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

#include "parity.h"       /* fill_lora, check_grads, check_inference, check_cls, check_lm */

static int check_tokenizer_chat(rd *r, af_model *m) {
    const af_tokenizer *tok = af_model_tokenizer(m);
    if (!CHECK(tok != NULL, "%s: tokenizer loaded (%s)", m->cfg.architecture, m->tok_error)) return 0;
    if (!check_tok_ids(r, tok, m->cfg.architecture, 0)) return 0;
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
