/*
 * test_gemma4.c — the gemma4 architecture against transformers + PEFT on a tiny random model
 * (tests/ref/make_gemma4_ref.py), in both forms: tests/fixtures/tiny_gemma4.gguf (f32, written with the
 * gguf package under llama.cpp's gemma4 names and metadata) and the Hugging Face directory
 * tests/fixtures/hf_tiny_gemma4/ (save_pretrained), with the reference tests/fixtures/gemma4_ref.bin.
 * The model: hidden 32, 4 heads, 6 layers S S S G S G (sliding window 4); sliding layers head_dim 12
 * (!= 32/4) with ONE KV head, global layers head_dim 16 with 2 KV heads and attention_k_eq_v (no
 * v_proj); the last 2 layers reuse the K/V of layers 2 and 3 (KV sharing) and have a double-width
 * FFN (48 vs 24); per-layer input embeddings (PLE, width 8); proportional RoPE on global layers
 * (2 of 8 pairs rotate: rope_freqs / partial_rotary_factor 0.25); random per-layer output scales;
 * final logit soft-capping 8; tied head.
 * Checked for each form:
 *   - the description and per-layer fields read from the file (sizes, window, kv_src, v_from_k, RoPE
 *     factors, output scales, KV-cache floats per position);
 *   - logits of every position of 2 sequences, decode vs batched, a greedy continuation of 10 tokens
 *     (tests/parity.h, tolerances there: logits 1e-4 abs, decode 1e-5 abs);
 *   - PEFT LoRA gradients (r 4, all 37 modules PEFT creates: no k/v on the KV-sharing layers, no v
 *     on the global layers) for a classification and a causal-LM loss (1e-5 relative loss,
 *     1e-4·max|ref| + 1e-3·|ref| gradients), and the checkpointed classification step;
 *   - tokenizer ids against HF tokenizers (GGUF tokenizer.ggml.model "gemma4" and tokenizer.json);
 *   - the Gemma 4 chat layout against apply_chat_template on 3 conversations (a template in the style
 *     of Gemma 4's, written by the reference script), thinking blocks and continued model turns refused;
 * and across the forms: GGUF and HF directory give the same logits bit for bit.
 * Bad input: a MoE GGUF (expert_count), a GGUF without the sliding pattern, a per-layer KV-head
 * array of the wrong length, KV sharing without an earlier layer of the type, HF configs with
 * enable_moe_block, bidirectional attention, an unknown per_layer_config key, a vision config.
 */
#include "afinar.h"
#include "testlib.h"

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "kernels/quant.h"
#include "lora/lora.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peft_fixture.h" /* rd/take/u32/f64, lora_a/lora_b */
#include "parity.h"       /* fill_lora, check_grads, check_inference, check_cls, check_lm, check_tok_ids */

static const char *const GGUF = "tests/fixtures/tiny_gemma4.gguf";
static const char *const HFDIR = "tests/fixtures/hf_tiny_gemma4";
static const char *const REF = "tests/fixtures/gemma4_ref.bin";

/* What make_gemma4_ref.py built. */
static void check_desc(const af_model *m, const char *what) {
    const af_arch_desc *D = &m->desc;
    const af_model_config *c = &m->cfg;
    CHECK(!strcmp(c->architecture, "gemma4") && c->hidden_size == 32 && c->num_hidden_layers == 6 &&
              c->tie_word_embeddings && D->tied_head,
          "%s: gemma4, hidden 32, 6 layers, tied head", what);
    CHECK(D->sandwich_norm && D->qk_norm && D->v_norm && D->rope_neox && D->act == AF_ACT_GEGLU_TANH &&
              D->attn_scale == 1.0f && D->ple_dim == 8 && D->n_kv_shared == 2 && D->final_logit_softcap == 8.0f &&
              fabsf(D->embd_scale - sqrtf(32.0f)) < 1e-6f,
          "%s: sandwich and q/k norms, unweighted v norm, NEOX, GeGLU, attention scale 1, PLE 8, 2 KV-sharing "
          "layers, soft-cap 8, embedding scale sqrt(32)",
          what);
    static const int slide[6] = {1, 1, 1, 0, 1, 0}, src[6] = {0, 1, 2, 3, 2, 3}, ff[6] = {24, 24, 24, 24, 48, 48};
    int ok = 1;
    for (int l = 0; l < 6; l++) {
        const af_layer *L = &m->layers[l];
        ok &= L->n_head == 4 && L->head_dim == (slide[l] ? 12 : 16) && L->n_kv_head == (slide[l] ? 1 : 2) &&
              L->n_ff == ff[l] && L->window == (slide[l] ? 4 : 0) && L->kv_src == src[l] &&
              L->rope_base == (slide[l] ? 1e4f : 1e6f) && L->out_scale > 0.59f && L->out_scale < 1.41f &&
              L->out_scale != 1.0f && L->ple_gate.data && L->ple_proj.data && L->ple_post_norm;
        ok &= (src[l] == l) == (L->wk.data != NULL);
        ok &= L->v_from_k == (!slide[l] && src[l] == l) && (L->wv.data != NULL) == (slide[l] && src[l] == l);
        if (slide[l]) ok &= L->rope_freq_factors == NULL;
        else
            ok &= L->rope_freq_factors && L->rope_freq_factors[0] == 1.0f && L->rope_freq_factors[1] == 1.0f &&
                  L->rope_freq_factors[2] == 1e30f && L->rope_freq_factors[7] == 1e30f;
    }
    CHECK(ok, "%s: per-layer head_dim 12/16, KV heads 1/2, FFN 24/48, window 4/0, kv_src 0 1 2 3 2 3, v = k on "
              "global layers, RoPE factors 1 1 1e30.. on global layers, random output scales",
          what);
    CHECK(m->kv_floats == 3 * 12 + 2 * 16, "%s: KV cache %lld floats per position (layers 0-3 only)", what,
          (long long)m->kv_floats);
    int64_t in, out;
    CHECK(af_model_proj_shape(m, 4, 1, &in, &out) == 0 && af_model_proj_shape(m, 3, 2, &in, &out) == 0 &&
              af_model_proj_shape(m, 3, 1, &in, &out) == 1 && in == 32 && out == 32 &&
              af_model_proj_shape(m, 5, 6, &in, &out) == 1 && in == 48 && out == 32,
          "%s: af_model_proj_shape: no k on layer 4, no v on layer 3, k of layer 3 [32, 32], down of layer 5 [32, 48]",
          what);
}

static double w_forms;

/* The Gemma 4 chat layout (chat.c render_gemma4) against transformers' apply_chat_template text
 * (generation prompt) of the fixture's conversations; afinar's text has no "<bos>" (added as an id). */
static void check_chat(rd *r, const af_tokenizer *tok, const char *what) {
    af_chat_family fam;
    CHECK(af_chat_family_of(tok, NULL, &fam) == AF_OK && fam == AF_CHAT_GEMMA4, "%s: chat family gemma4 from the "
          "template (<|turn>)", what);
    const uint32_t nc = u32(r);
    for (uint32_t k = 0; k < nc && k < 16; k++) {
        const uint32_t nm = u32(r);
        af_chat_msg msg[8];
        if (!CHECK(nm >= 1 && nm <= 8, "fixture chat %u", k)) return;
        for (uint32_t i = 0; i < nm; i++) {
            const uint32_t role = u32(r), len = u32(r);
            msg[i].role = role == 0 ? AF_ROLE_SYSTEM : role == 1 ? AF_ROLE_USER : AF_ROLE_ASSISTANT;
            msg[i].content = take(r, len);
            msg[i].len = len;
        }
        const uint32_t len = u32(r);
        const char *want = take(r, len);
        if (!CHECK(want && len > 5 && !memcmp(want, "<bos>", 5), "fixture chat text %u", k)) return;
        char *got = NULL;
        CHECK(af_chat_prompt_text(tok, fam, msg, (int32_t)nm, &got) == AF_OK, "chat: %s", af_last_error());
        CHECK(got && strlen(got) == len - 5 && !memcmp(got, want + 5, len - 5),
              "%s: conversation %u rendered as transformers' apply_chat_template:\n%s\nwant:\n%.*s", what, k,
              got ? got : "", (int)len - 5, want + 5);
        free(got);
    }
    /* refused layouts */
    af_chat_msg two[3] = {{AF_ROLE_USER, "a", 1}, {AF_ROLE_ASSISTANT, "b", 1}, {AF_ROLE_ASSISTANT, "c", 1}};
    char *got = NULL;
    CHECK(af_chat_prompt_text(tok, fam, two, 3, &got) == AF_ERR_FORMAT && strstr(af_last_error(), "messages[2]"),
          "two assistant messages in a row refused: %s", af_last_error());
    free(got);
    got = NULL;
    af_chat_msg th[2] = {{AF_ROLE_USER, "a", 1}, {AF_ROLE_ASSISTANT, "<|channel>x<channel|>y", 22}};
    CHECK(af_chat_prompt_text(tok, fam, th, 2, &got) == AF_ERR_FORMAT && strstr(af_last_error(), "thinking block"),
          "a thinking block refused: %s", af_last_error());
    free(got);
    CHECK(af_token_is_eog(tok, af_tokenizer_find(tok, "<turn|>", 7)), "%s: <turn|> ends generation", what);
}

/* One form (GGUF file or HF directory) against the whole reference; last logits of the first
 * sequence into `lg0` [vocab] for the cross-form check. */
static void run_form(const char *path, const char *what, float *lg0, int V_expect) {
    size_t len = 0;
    char *buf = tl_read_file(REF, &len);
    if (!CHECK(buf != NULL, "fixture %s missing (tests/ref/make_gemma4_ref.py)", REF)) return;
    rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    const void *magic = take(&r, 4);
    const uint32_t ver = u32(&r), V = u32(&r), nl = u32(&r), H = u32(&r);
    af_model *m = NULL;
    if (!CHECK(magic && !memcmp(magic, "AFG4", 4) && ver == 1 && (int)V == V_expect, "%s: header", REF) ||
        !CHECK(af_model_load(T_CTX, path, &m) == AF_OK, "load %s: %s", path, af_last_error())) {
        free(buf);
        return;
    }
    check_desc(m, what);
    CHECK(m->cfg.vocab_size == (int32_t)V, "%s: vocab %d", what, m->cfg.vocab_size);
    rd r0 = r; /* first sequence: its last logits for the cross-form check */
    const uint32_t n0 = (u32(&r0), u32(&r0));
    const int32_t *ids0 = n0 && n0 < 64 ? take(&r0, 4 * (size_t)n0) : NULL;
    if (ids0) {
        af_session *s = NULL;
        if (CHECK(af_session_new(m, 64, &s) == AF_OK, "session")) {
            CHECK(af_session_eval(s, ids0, (int)n0, lg0, NULL) == AF_OK, "eval: %s", af_last_error());
            af_session_free(s);
        }
    }
    if (check_inference(&r, m, (int)V) && check_cls(&r, m, (int)nl, (int)H) && check_lm(&r, m, (int)nl)) {
        const af_tokenizer *tok = af_model_tokenizer(m);
        if (CHECK(tok != NULL, "%s: tokenizer loaded (%s)", what, af_model_tokenizer_error(m)) &&
            check_tok_ids(&r, tok, what, 1))
            check_chat(&r, tok, what);
    }
    af_model_free(m);
    free(buf);
}

/* --quantize q8_0 at load (the projections that exist; a KV-sharing layer has no k/v to quantize):
 * the model runs, its logits move by the rounding only; and LoRA dropout (per-layer input widths of
 * the masks) is deterministic for a seed and changes the gradients. */
static void check_quantize_dropout(void) {
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.quantize = "q8_0";
    af_ctx *ctx = NULL;
    af_model *mq = NULL, *m = NULL;
    if (!CHECK(af_ctx_new(&p, &ctx) == AF_OK, "ctx") ||
        !CHECK(af_model_load(ctx, HFDIR, &mq) == AF_OK && af_model_load(T_CTX, HFDIR, &m) == AF_OK,
               "load --quantize q8_0: %s", af_last_error())) {
        af_model_free(mq);
        af_ctx_free(ctx);
        return;
    }
    CHECK(mq->layers[0].wq.type == AF_TYPE_Q8_0 && mq->layers[4].wk.data == NULL &&
              mq->layers[0].w_gate.type == AF_TYPE_Q8_0 && mq->layers[0].w_down.type == AF_TYPE_F32,
          "q8_0 at load: q and gate of layer 0 quantized (rows of 32), down kept (rows of 24), no k in layer 4");
    const int V = m->cfg.vocab_size;
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    float *a = malloc(sizeof(float) * 12 * (size_t)V), *b = malloc(sizeof(float) * 12 * (size_t)V);
    af_session *sa = NULL, *sb = NULL;
    if (CHECK(af_session_new(m, 16, &sa) == AF_OK && af_session_new(mq, 16, &sb) == AF_OK &&
                  af_session_eval(sa, ids, 12, NULL, a) == AF_OK && af_session_eval(sb, ids, 12, NULL, b) == AF_OK,
              "eval: %s", af_last_error())) {
        const double d = tl_max_abs_diff(a, b, 12 * (size_t)V, NULL);
        CHECK(d > 0 && d < 1.0, "q8_0 at load: logits move by the rounding only (max |diff| %.3g)", d);
    }
    af_session_free(sa);
    af_session_free(sb);
    free(a);
    free(b);
    /* dropout */
    af_lora_config cfg = {4, 8.0f, 0.2f, 0, (1u << AF_PROJ_COUNT) - 1, 7, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    if (CHECK(af_param_layout_init(&lay, m, &cfg, 3) == AF_OK && af_engine_new(NULL, m, &lay, &e) == AF_OK,
              "layout/engine: %s", af_last_error())) {
        float *P = malloc(sizeof(float) * (size_t)lay.n_total), *G[3];
        for (int k = 0; k < 3; k++) G[k] = calloc((size_t)lay.n_total, sizeof(float));
        af_lora_init_params(&lay, P);
        for (int64_t i = lay.n_lora; i < lay.n_total; i++) P[i] = 0.01f * (float)(i % 7);
        for (int64_t i = 0; i < lay.n_lora; i++) P[i] += 0.001f * (float)(i % 5); /* B != 0: dropout reaches dA too */
        const int32_t ss[3] = {0, 7, 12}, lab[2] = {1, 2};
        af_batch bt = {ids, ss, 2, 12, lab, NULL, NULL};
        double loss[3];
        for (int k = 0; k < 3; k++) {
            af_step_opts o = {AF_POOL_MEAN, NULL, 0, k < 2, 5};
            CHECK(af_engine_step(e, P, G[k], &bt, &o, 1.0f, &loss[k], NULL) == AF_OK && isfinite(loss[k]),
                  "dropout step %d: %s", k, af_last_error());
        }
        CHECK(!memcmp(G[0], G[1], sizeof(float) * (size_t)lay.n_total) && loss[0] == loss[1],
              "dropout 0.2: the same seed gives the same loss and gradients");
        CHECK(tl_max_abs_diff(G[0], G[2], (size_t)lay.n_total, NULL) > 0, "dropout changes the gradients");
        free(P);
        for (int k = 0; k < 3; k++) free(G[k]);
    }
    af_engine_free(e);
    af_param_layout_free(&lay);
    af_model_free(m);
    af_model_free(mq);
    af_ctx_free(ctx);
}

/* gemma4's paths (per-layer inputs, KV sharing, the unweighted v norm, RoPE frequency
 * factors, per-layer sizes) on the guard device (device memory PROT_NONE between the backend table's
 * ops, and every op argument checked to be device memory): prompt + decode logits, the batched
 * decode of three sequences, and three LoRA steps (classification, dropout) equal the CPU's bit for
 * bit. */
static void check_guard(void) {
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.device = "guard";
    af_ctx *gc = NULL;
    af_model *m[2] = {NULL, NULL};
    if (!CHECK(af_ctx_new(&p, &gc) == AF_OK && af_model_load(T_CTX, GGUF, &m[0]) == AF_OK &&
                   af_model_load(gc, GGUF, &m[1]) == AF_OK,
               "gemma4 on the guard device: %s", af_last_error())) {
        af_model_free(m[0]);
        af_model_free(m[1]);
        af_ctx_free(gc);
        return;
    }
    const int V = m[0]->cfg.vocab_size;
    int32_t ids[10];
    for (int i = 0; i < 10; i++) ids[i] = (int32_t)((i * 53 + 7) % V);
    float *lg[2], *bt[2], *par[2];
    double loss[2][3];
    for (int d = 0; d < 2; d++) {
        lg[d] = calloc((size_t)V * 12, sizeof(float));
        bt[d] = calloc((size_t)V * 3, sizeof(float));
        par[d] = NULL;
        af_session *s[3] = {NULL, NULL, NULL};
        int ok = 1;
        for (int k = 0; k < 3 && ok; k++) ok = af_session_new(m[d], 32, &s[k]) == AF_OK;
        ok = ok && af_session_eval(s[0], ids, 10, NULL, lg[d]) == AF_OK &&
             af_session_eval(s[0], ids + 3, 1, lg[d] + 10 * V, NULL) == AF_OK &&
             af_session_eval(s[1], ids + 2, 4, NULL, NULL) == AF_OK && af_session_eval(s[2], ids + 5, 2, NULL, NULL) == AF_OK;
        const int32_t nxt[3] = {ids[1], ids[7], ids[9]};
        ok = ok && af_session_eval_batch(s, 3, nxt, bt[d]) == AF_OK;
        CHECK(ok, "gemma4 sessions on %s: %s", d ? "guard" : "cpu", af_last_error());
        for (int k = 0; k < 3; k++) af_session_free(s[k]);
        af_lora_trainer_opts o;
        af_lora_trainer_opts_defaults(&o);
        o.r = 4;
        o.targets = "all-linear";
        o.num_classes = 3;
        o.lora_dropout = 0.1f;
        o.lr = 1e-2f;
        af_lora_trainer *tr = NULL;
        const int32_t ss[3] = {0, 6, 10}, lab[2] = {2, 0};
        ok = af_lora_trainer_new(m[d], &o, &tr) == AF_OK;
        for (int k = 0; k < 3 && ok; k++)
            ok = af_lora_trainer_accumulate(tr, ids, ss, 2, lab, 1.0f, &loss[d][k], NULL) == AF_OK &&
                 af_lora_trainer_step(tr, -1.0f, NULL) == AF_OK;
        if (ok) {
            par[d] = malloc(sizeof(float) * (size_t)af_lora_trainer_n_params(tr));
            ok = af_lora_trainer_get_params(tr, par[d]) == AF_OK;
        }
        CHECK(ok, "gemma4 LoRA steps on %s: %s", d ? "guard" : "cpu", af_last_error());
        if (d == 1 && ok && par[0])
            CHECK(!memcmp(par[0], par[1], sizeof(float) * (size_t)af_lora_trainer_n_params(tr)) &&
                      !memcmp(loss[0], loss[1], sizeof loss[0]),
                  "gemma4 LoRA steps: guard parameters/losses differ from the cpu's");
        af_lora_trainer_free(tr);
    }
    CHECK(!memcmp(lg[0], lg[1], sizeof(float) * (size_t)V * 11), "gemma4 prompt/decode logits: guard != cpu");
    CHECK(!memcmp(bt[0], bt[1], sizeof(float) * (size_t)V * 3), "gemma4 batched decode: guard != cpu");
    printf("gemma4 on the guard device: logits, batched decode and 3 LoRA steps equal the CPU's bit for bit\n");
    for (int d = 0; d < 2; d++) free(lg[d]), free(bt[d]), free(par[d]);
    af_model_free(m[0]);
    af_model_free(m[1]);
    af_ctx_free(gc);
}

/* ---------------------------------------------------------------- bad input */

typedef af_status (*edit_fn)(af_gguf_writer *w);

/* A copy of the tiny GGUF without key `drop` (NULL: none), with `edit`'s additions, to `dst`. */
static int rewrite_gguf(const char *dst, const char *drop, edit_fn edit) {
    af_gguf *g = NULL;
    af_gguf_writer *w = NULL;
    af_status st = af_gguf_open(GGUF, &g);
    if (st == AF_OK) st = af_gguf_writer_new(&w);
    for (uint64_t i = 0; st == AF_OK && i < g->n_kv; i++) {
        const af_gguf_kv *kv = &g->kv[i];
        if (drop && af_gguf_str_eq(kv->key, drop)) continue;
        st = af_gguf_writer_copy_kv(w, kv);
    }
    for (uint64_t i = 0; st == AF_OK && i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        st = af_gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
    }
    if (st == AF_OK && edit) st = edit(w);
    if (st == AF_OK) st = af_gguf_writer_write_file(w, dst);
    af_gguf_writer_free(w);
    af_gguf_close(g);
    return CHECK(st == AF_OK, "rewrite %s: %s", GGUF, af_last_error());
}

static af_status add_experts(af_gguf_writer *w) { return af_gguf_writer_add_u32(w, "gemma4.expert_count", 4); }
static af_status add_kv_short(af_gguf_writer *w) {
    const int32_t v[3] = {1, 1, 1};
    return af_gguf_writer_add_arr(w, "gemma4.attention.head_count_kv", AF_GGUF_INT32, v, 3);
}
static af_status add_share5(af_gguf_writer *w) { return af_gguf_writer_add_u32(w, "gemma4.attention.shared_kv_layers", 5); }

static void refused_gguf(const char *tmp, const char *drop, edit_fn edit, const char *want, const char *what) {
    char path[300];
    snprintf(path, sizeof path, "%s/bad.gguf", tmp);
    if (!rewrite_gguf(path, drop, edit)) return;
    af_model *m = NULL;
    af_status st = af_model_load(T_CTX, path, &m);
    CHECK(st != AF_OK && m == NULL && strstr(af_last_error(), want), "%s refused: %s", what, af_last_error());
    af_model_free(m);
    unlink(path);
}

/* The HF directory with config.json edited: `from` replaced by `to` (once). */
static void refused_hf(const char *tmp, const char *from, const char *to, const char *want, const char *what) {
    char dir[300], p[400], q[400];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", HFDIR);
    size_t len = 0;
    char *js = tl_read_file(p, &len);
    if (!CHECK(js != NULL, "read %s", p)) return;
    char *at = strstr(js, from);
    if (!CHECK(at != NULL, "config.json has '%s'", from)) {
        free(js);
        return;
    }
    snprintf(q, sizeof q, "%s/config.json", dir);
    FILE *f = fopen(q, "wb");
    if (f) {
        fwrite(js, 1, (size_t)(at - js), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
        fclose(f);
    }
    free(js);
    char src[400], dst[400];
    snprintf(src, sizeof src, "%s/../../%s/model.safetensors", dir, HFDIR);
    char cwd[256];
    if (getcwd(cwd, sizeof cwd)) snprintf(src, sizeof src, "%s/%s/model.safetensors", cwd, HFDIR);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    unlink(dst);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    af_model *m = NULL;
    af_status st = af_model_load(T_CTX, dir, &m);
    CHECK(st != AF_OK && m == NULL && strstr(af_last_error(), "config.json") && strstr(af_last_error(), want),
          "%s refused naming config.json: %s", what, af_last_error());
    af_model_free(m);
    unlink(dst);
    unlink(q);
    rmdir(dir);
}

static void bad_input(void) {
    char tmp[64] = "/tmp/afinar_gemma4_XXXXXX";
    if (!CHECK(mkdtemp(tmp) != NULL, "mkdtemp")) return;
    refused_gguf(tmp, NULL, add_experts, "mixture-of-experts", "GGUF with expert_count 4");
    refused_gguf(tmp, "gemma4.attention.sliding_window_pattern", NULL, "sliding_window_pattern",
                 "GGUF without the sliding pattern");
    refused_gguf(tmp, "gemma4.attention.head_count_kv", add_kv_short, "head_count_kv",
                 "GGUF with a KV-head array of 3 for 6 layers");
    refused_gguf(tmp, "gemma4.attention.shared_kv_layers", add_share5, "reuses the K/V",
                 "GGUF sharing K/V from layer 1 on (no earlier global layer)");
    refused_hf(tmp, "\"enable_moe_block\": false", "\"enable_moe_block\": true", "enable_moe_block",
               "enable_moe_block true");
    refused_hf(tmp, "\"use_bidirectional_attention\": null", "\"use_bidirectional_attention\": \"all\"",
               "use_bidirectional_attention", "bidirectional attention");
    refused_hf(tmp, "\"num_key_value_heads\": 2", "\"sliding_window\": 2", "per_layer_config",
               "an unknown per_layer_config key");
    refused_hf(tmp, "\"model_type\": \"gemma4_text\"", "\"model_type\": \"gemma4_text\", \"vision_config\": {}",
               "vision", "a vision tower");
    rmdir(tmp);
}

int main(void) {
    float *a = calloc(1024, sizeof(float)), *b = calloc(1024, sizeof(float));
    parity_indexed = 1;
    run_form(GGUF, "gemma4 GGUF", a, 464);
    run_form(HFDIR, "gemma4 HF directory", b, 464);
    w_forms = tl_max_abs_diff(a, b, 464, NULL);
    CHECK(w_forms == 0, "GGUF and HF directory: last logits of sequence 0 bit for bit equal (max |diff| %.3g)", w_forms);
    check_quantize_dropout();
    check_guard();
    bad_input();
    printf("gemma4 vs transformers/PEFT (worst of GGUF and HF forms): logits %.2e abs, decode vs batched %.2e abs, "
           "loss %.2e rel, LoRA/head gradients %.2e of max|ref|; GGUF vs HF %.2e\n",
           w_logits, w_dec, w_loss, w_grad, w_forms);
    free(a);
    free(b);
    return tl_finish("gemma4");
}
