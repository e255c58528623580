/*
 * test_api_train.c — the public LoRA training API (af_lora_trainer_*, include/afinar.h, implemented
 * in src/train/api.c) on tiny random models (tests/tinymodel.c):
 *  (a) tensor names, shapes and offsets (PEFT names; the tensors tile the flat parameter vector);
 *  (b) bit-for-bit equality with the internal modules driven by hand the way src/train/trainer_run.c
 *      does it (layout + init, engine step per micro-batch with the trainer's dropout seeds, head
 *      bias gradient dropped, clip, AdamW without decay on the bias): losses, pre-clip gradient norms
 *      and final parameters must be identical (memcmp), with dropout on and clipping active, with
 *      the head bias off (its gradient dropped) and on (trained, not weight-decayed);
 *  (c) training decreases the loss on a small packed batch;
 *  (d) get/set of tensors: exact round trip, and q/k lora_B rows of llama come out in Hugging Face
 *      order (GGUF row h·hd + 2b + a = HF row h·hd + a·hd/2 + b); gemma3 keeps the order;
 *  (e) checkpoint by another program: params + AdamW state copied into a fresh trainer continue the
 *      run bit for bit;
 *  (f) a non-finite loss skips the update (AF_ERR_RANGE, parameters unchanged, step still counted);
 *  (g) PEFT adapter save/load round trip (and the file holds the PEFT row order);
 *  (h) errors with their messages: rank 0, unknown target, label out of range, NULL arguments, no
 *      head, step without accumulation, bad tensor index / name, non-finite input;
 *  (i) gradients for an outside transport (af_lora_trainer_collect_gradients / _apply_gradients): two
 *      "workers" each accumulate one micro-batch, their collected vectors are summed and applied to
 *      both: both end with the parameters of one trainer that summed the same per-micro-batch vectors
 *      (bit for bit); collecting keeps the gradient; applying a trainer's own gradient changes
 *      nothing; a non-finite flag or element makes the step skip; argument errors;
 *  (j) LoRA+ (loraplus_lr_ratio): equal to AdamW by hand with lr on A / head W and lr·ratio on B / head
 *      bias; ratio 1 equals none; a negative ratio refused.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "lora/adapter_io.h"
#include "kernels/quant.h"
#include "lora/lora.h"
#include "train/engine.h"
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A packed batch of 4 samples of lengths 6, 9, 4, 7 (two micro-batches of 2 use halves of it). */
static int32_t g_tok[26];
static const int32_t g_ss[5] = {0, 6, 15, 19, 26}, g_lab[4] = {2, 0, 1, 2};
static const int32_t g_ss_lo[3] = {0, 6, 15}, g_ss_hi[3] = {0, 4, 11};

static void make_tokens(int vocab) {
    uint64_t rng = 11;
    for (int i = 0; i < 26; i++) g_tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)vocab);
}

static int contains(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static af_lora_trainer_opts base_opts(void) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.lora_alpha = 8.0f;
    o.lora_dropout = 0.1f;
    o.targets = "all-linear";
    o.seed = 5;
    o.num_classes = 3;
    o.lr = 1e-2f;
    o.max_grad_norm = 0.05f; /* small: clipping is active */
    return o;
}

#define DROPOUT_TAG 0x64726f70u

/* One optimizer step with two micro-batches through the API. */
static af_status api_step(af_lora_trainer *tr, double loss[2], double *gn) {
    AF_TRY(af_lora_trainer_accumulate(tr, g_tok, g_ss_lo, 2, g_lab, 0.5f, &loss[0], NULL));
    AF_TRY(af_lora_trainer_accumulate(tr, g_tok + 15, g_ss_hi, 2, g_lab + 2, 0.5f, &loss[1], NULL));
    return af_lora_trainer_step(tr, -1.0f, gn);
}

static void test_names(const af_model *m, af_lora_trainer *tr) {
    const af_lora_trainer_opts o = base_opts();
    const af_model_config *mc = af_model_get_config(m);
    const int32_t L = mc->num_hidden_layers, H = mc->hidden_size, F = mc->intermediate_size;
    const int32_t qd = mc->num_attention_heads * mc->head_dim, kvd = mc->num_key_value_heads * mc->head_dim;
    const int32_t nt = af_lora_trainer_n_tensors(tr);
    CHECK(nt == L * 14 + 2, "n_tensors %d, expected %d", nt, L * 14 + 2);
    const char *name = NULL;
    int64_t shape[2] = {0, 0}, off = -1, total = 0;
    int tiles = 1;
    for (int32_t i = 0; i < nt; i++) {
        if (!CHECK(af_lora_trainer_tensor_info(tr, i, &name, shape, &off) == AF_OK, "tensor_info %d", i)) return;
        tiles &= off == total; /* tensors are in flat-vector order, back to back */
        total += shape[0] * shape[1];
        int32_t idx = -1;
        CHECK(af_lora_trainer_find_tensor(tr, name, &idx) == AF_OK && idx == i, "find_tensor(%s) = %d", name, idx);
    }
    CHECK(tiles && total == af_lora_trainer_n_params(tr), "tensors tile the %lld params (sum %lld)",
          (long long)af_lora_trainer_n_params(tr), (long long)total);
    static const struct {
        int32_t i;
        const char *name;
    } want[] = {
        {0, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"},
        {1, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"},
        {3, "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"},
        {8, "base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight"},
        {13, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"},
        {14, "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"},
    };
    const int64_t shapes[][2] = {{o.r, H}, {qd, o.r}, {kvd, o.r}, {o.r, H}, {H, o.r}, {o.r, H}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        af_lora_trainer_tensor_info(tr, want[k].i, &name, shape, NULL);
        CHECK(!strcmp(name, want[k].name) && shape[0] == shapes[k][0] && shape[1] == shapes[k][1],
              "tensor %d: '%s' [%lld, %lld], expected '%s' [%lld, %lld]", want[k].i, name, (long long)shape[0],
              (long long)shape[1], want[k].name, (long long)shapes[k][0], (long long)shapes[k][1]);
    }
    af_lora_trainer_tensor_info(tr, 12, &name, shape, NULL);
    CHECK(!strcmp(name, "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight") && shape[1] == F,
          "down_proj A [r, ffn]: %s [%lld, %lld]", name, (long long)shape[0], (long long)shape[1]);
    af_lora_trainer_tensor_info(tr, nt - 2, &name, shape, NULL);
    CHECK(!strcmp(name, "base_model.model.score.weight") && shape[0] == 3 && shape[1] == H, "head: %s", name);
    af_lora_trainer_tensor_info(tr, nt - 1, &name, shape, NULL);
    CHECK(!strcmp(name, "base_model.model.score.bias") && shape[0] == 3 && shape[1] == 1, "bias: %s", name);
}

/* (b): the same run through the internal modules, as trainer_run.c does it. */
static void test_equal_internal(const af_model *m, int steps, int head_bias) {
    af_lora_trainer_opts o = base_opts();
    o.head_bias = head_bias;
    af_lora_trainer *tr = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "new: %s", af_last_error())) return;
    uint32_t mask = 0;
    af_lora_parse_targets(o.targets, &mask);
    af_lora_config c = {o.r, o.lora_alpha, o.lora_dropout, o.use_rslora, mask, o.seed, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    CHECK(af_param_layout_init(&lay, m, &c, o.num_classes) == AF_OK, "layout");
    CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine");
    const int64_t n = lay.n_total;
    CHECK(n == af_lora_trainer_n_params(tr), "n_params %lld vs layout %lld", (long long)af_lora_trainer_n_params(tr),
          (long long)n);
    float *P = calloc((size_t)n, 4), *G = calloc((size_t)n, 4), *M = calloc((size_t)n, 4), *V = calloc((size_t)n, 4);
    float *Q = calloc((size_t)n, 4);
    uint8_t *decay = malloc((size_t)n);
    memset(decay, 1, (size_t)n);
    memset(decay + lay.head_b_off, 0, 3);
    af_lora_init_params(&lay, P);
    af_lora_trainer_get_params(tr, Q);
    CHECK(!memcmp(P, Q, sizeof(float) * (size_t)n), "initial params equal af_lora_init_params");
    af_adamw opt;
    af_adamw_defaults(&opt, o.lr);
    int same = 1;
    double first = NAN, last = NAN;
    for (int g = 0; g < steps; g++) {
        double la[2] = {0, 0}, gna = 0, li[2] = {0, 0};
        af_status st = api_step(tr, la, &gna);
        if (!CHECK(st == AF_OK, "api step %d: %s", g, af_last_error())) break;
        af_batch b0 = {g_tok, g_ss_lo, 2, 15, g_lab, NULL, NULL}, b1 = {g_tok + 15, g_ss_hi, 2, 11, g_lab + 2, NULL, NULL};
        for (int j = 0; j < 2; j++) {
            af_step_opts so = {AF_POOL_MEAN, NULL, 0, 1, af_ctr_key(o.seed, (uint64_t)g, (uint64_t)j, DROPOUT_TAG)};
            af_engine_step(e, P, G, j ? &b1 : &b0, &so, 0.5f, &li[j], NULL);
        }
        if (!head_bias) memset(G + lay.head_b_off, 0, 3 * sizeof(float));
        double gni = af_clip_grad_norm(T_CTX, G, n, o.max_grad_norm);
        af_adamw_step(T_CTX, &opt, P, G, M, V, n, o.lr, decay);
        memset(G, 0, sizeof(float) * (size_t)n);
        if (la[0] != li[0] || la[1] != li[1] || gna != gni) {
            same = 0;
            printf("  step %d: loss %.17g %.17g vs %.17g %.17g, norm %.17g vs %.17g\n", g, la[0], la[1], li[0], li[1],
                   gna, gni);
        }
        if (g == 0) first = 0.5 * (la[0] + la[1]);
        last = 0.5 * (la[0] + la[1]);
        if (g == 0) CHECK(gna > o.max_grad_norm, "clipping active (pre-clip norm %g)", gna);
    }
    af_lora_trainer_get_params(tr, Q);
    CHECK(same, "head_bias %d: API losses and gradient norms equal the internal modules' bit for bit", head_bias);
    CHECK(!memcmp(P, Q, sizeof(float) * (size_t)n),
          "head_bias %d: API params after %d steps equal the internal run (max diff %g)", head_bias, steps,
          tl_max_abs_diff(P, Q, (size_t)n, NULL));
    CHECK((P[lay.head_b_off] != 0) == (head_bias != 0), "head bias %g trained iff head_bias %d",
          (double)P[lay.head_b_off], head_bias);
    CHECK(af_lora_trainer_step_count(tr) == steps, "step_count %lld", (long long)af_lora_trainer_step_count(tr));
    /* (c) the loss decreases */
    CHECK(last < 0.7 * first, "training loss %.5f -> %.5f after %d steps (expected a clear decrease)", first, last,
          steps);
    if (getenv("TL_VERBOSE")) printf("  loss %.5f -> %.5f over %d steps\n", first, last, steps);
    free(P);
    free(G);
    free(M);
    free(V);
    free(Q);
    free(decay);
    af_engine_free(e);
    af_param_layout_free(&lay);
    af_lora_trainer_free(tr);
}

/* (d) tensors round trip and the q/k row order. */
static void test_tensors(const af_model *m, af_lora_trainer *tr, int permuted) {
    const int64_t n = af_lora_trainer_n_params(tr), hd = af_model_get_config(m)->head_dim;
    float *P0 = malloc(sizeof(float) * (size_t)n), *P1 = malloc(sizeof(float) * (size_t)n);
    float *buf = malloc(sizeof(float) * (size_t)n);
    uint64_t rng = 99;
    for (int64_t i = 0; i < n; i++) P0[i] = tl_rand_uniform(&rng, -1, 1);
    CHECK(af_lora_trainer_set_params(tr, P0) == AF_OK, "set_params");
    int32_t iq = -1, ik = -1, iv = -1;
    af_lora_trainer_find_tensor(tr, "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", &iq);
    af_lora_trainer_find_tensor(tr, "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight", &ik);
    af_lora_trainer_find_tensor(tr, "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight", &iv);
    const int32_t which[3] = {iq, ik, iv};
    for (int w = 0; w < 3; w++) {
        int64_t shape[2], off;
        if (!CHECK(af_lora_trainer_tensor_info(tr, which[w], NULL, shape, &off) == AF_OK, "info")) continue;
        af_lora_trainer_get_tensor(tr, which[w], buf);
        int ok = 1;
        for (int64_t o = 0; o < shape[0]; o++) {
            int64_t h = o / hd, x = o % hd, e = (permuted && w < 2) ? h * hd + (x % 2) * (hd / 2) + x / 2 : o;
            ok &= !memcmp(buf + e * shape[1], P0 + off + o * shape[1], sizeof(float) * (size_t)shape[1]);
        }
        CHECK(ok, "%s lora_B rows in %s order", w == 0 ? "q" : w == 1 ? "k" : "v",
              permuted && w < 2 ? "HF (un-permuted)" : "unchanged");
    }
    /* set(get) of every tensor is the identity; a changed tensor lands only in its block */
    for (int32_t i = 0; i < af_lora_trainer_n_tensors(tr); i++) {
        af_lora_trainer_get_tensor(tr, i, buf);
        af_lora_trainer_set_tensor(tr, i, buf);
    }
    af_lora_trainer_get_params(tr, P1);
    CHECK(!memcmp(P0, P1, sizeof(float) * (size_t)n), "set_tensor(get_tensor) round trip is exact");
    int64_t shape[2], off;
    af_lora_trainer_tensor_info(tr, iq, NULL, shape, &off);
    af_lora_trainer_get_tensor(tr, iq, buf);
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) buf[i] += 1.0f;
    CHECK(af_lora_trainer_set_tensor(tr, iq, buf) == AF_OK, "set_tensor");
    af_lora_trainer_get_params(tr, P1);
    int64_t changed_out = 0, changed_in = 0;
    for (int64_t i = 0; i < n; i++) {
        int inside = i >= off && i < off + shape[0] * shape[1];
        if (P0[i] != P1[i]) *(inside ? &changed_in : &changed_out) += 1;
    }
    CHECK(changed_in == shape[0] * shape[1] && changed_out == 0, "set_tensor changed %lld inside, %lld outside",
          (long long)changed_in, (long long)changed_out);
    free(P0);
    free(P1);
    free(buf);
}

/* (e) checkpoint by another program: copy params + optimizer state into a new trainer. */
static void test_resume(const af_model *m) {
    const af_lora_trainer_opts o = base_opts();
    af_lora_trainer *a = NULL, *b = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &a) == AF_OK && af_lora_trainer_new(m, &o, &b) == AF_OK, "new")) goto out;
    double l[2], gn;
    for (int g = 0; g < 2; g++) api_step(a, l, &gn);
    const int64_t n = af_lora_trainer_n_params(a);
    float *p = malloc(4 * (size_t)n), *mm = malloc(4 * (size_t)n), *vv = malloc(4 * (size_t)n);
    float *pa = malloc(4 * (size_t)n), *pb = malloc(4 * (size_t)n);
    int64_t t = -1, s = -1;
    af_lora_trainer_get_params(a, p);
    af_lora_trainer_get_optim_state(a, mm, vv, &t, &s);
    CHECK(t == 2 && s == 2, "optim state counters %lld %lld", (long long)t, (long long)s);
    CHECK(af_lora_trainer_set_params(b, p) == AF_OK && af_lora_trainer_set_optim_state(b, mm, vv, &t, &s) == AF_OK,
          "restore: %s", af_last_error());
    double la[2], lb[2], ga, gb;
    api_step(a, la, &ga);
    api_step(b, lb, &gb);
    af_lora_trainer_get_params(a, pa);
    af_lora_trainer_get_params(b, pb);
    CHECK(la[0] == lb[0] && la[1] == lb[1] && ga == gb && !memcmp(pa, pb, 4 * (size_t)n),
          "resumed trainer continues bit for bit (loss %.9g vs %.9g, max param diff %g)", la[0], lb[0],
          tl_max_abs_diff(pa, pb, (size_t)n, NULL));
    int64_t bad_t = 5, bad_s = 3;
    CHECK(af_lora_trainer_set_optim_state(b, NULL, NULL, &bad_t, &bad_s) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "adam_t <= step_count"),
          "adam_t > step_count refused: %s", af_last_error());
    free(p);
    free(mm);
    free(vv);
    free(pa);
    free(pb);
out:
    af_lora_trainer_free(a);
    af_lora_trainer_free(b);
}

/* (f) non-finite loss: huge head weights overflow the logits. */
static void test_nonfinite(af_lora_trainer *tr) {
    const int64_t n = af_lora_trainer_n_params(tr);
    int32_t ih = -1;
    af_lora_trainer_find_tensor(tr, "base_model.model.score.weight", &ih);
    int64_t shape[2];
    af_lora_trainer_tensor_info(tr, ih, NULL, shape, NULL);
    float *w = malloc(sizeof(float) * (size_t)(shape[0] * shape[1])), *p0 = malloc(4 * (size_t)n),
          *p1 = malloc(4 * (size_t)n);
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) w[i] = (i % 3 ? 3e38f : -3e38f);
    af_lora_trainer_set_tensor(tr, ih, w);
    af_lora_trainer_get_params(tr, p0);
    int64_t t0 = 0, s0 = 0, t1 = 0, s1 = 0;
    af_lora_trainer_get_optim_state(tr, NULL, NULL, &t0, &s0);
    double loss = 0, gn = 0;
    CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1.0f, &loss, NULL) == AF_OK, "accumulate: %s",
          af_last_error());
    CHECK(!isfinite(loss), "loss is not finite (%g)", loss);
    af_status st = af_lora_trainer_step(tr, 1e-3f, &gn);
    CHECK(st == AF_ERR_RANGE && contains(af_last_error(), "skipped"), "non-finite step skipped: %s %s",
          af_status_name(st), af_last_error());
    af_lora_trainer_get_params(tr, p1);
    af_lora_trainer_get_optim_state(tr, NULL, NULL, &t1, &s1);
    CHECK(!memcmp(p0, p1, 4 * (size_t)n) && t1 == t0 && s1 == s0 + 1 && isnan(gn),
          "skipped step: params unchanged, adam_t %lld -> %lld, steps %lld -> %lld, norm %g", (long long)t0,
          (long long)t1, (long long)s0, (long long)s1, gn);
    free(w);
    free(p0);
    free(p1);
}

/* (g) PEFT adapter directory round trip. */
static void test_adapter(const af_model *m, af_lora_trainer *tr) {
    char dir[] = "/tmp/af_test_api_XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp")) return;
    const int64_t n = af_lora_trainer_n_params(tr);
    float *p0 = malloc(4 * (size_t)n), *p1 = malloc(4 * (size_t)n), *f = calloc((size_t)n, 4);
    uint64_t rng = 7;
    for (int64_t i = 0; i < n; i++) p0[i] = tl_rand_uniform(&rng, -1, 1);
    af_lora_trainer_set_params(tr, p0);
    CHECK(af_lora_trainer_save_adapter(tr, dir, "tiny-llama") == AF_OK, "save: %s", af_last_error());
    af_lora_trainer_opts o = base_opts();
    o.seed = 1234; /* different init */
    af_lora_trainer *t2 = NULL;
    if (CHECK(af_lora_trainer_new(m, &o, &t2) == AF_OK, "new")) {
        CHECK(af_lora_trainer_load_adapter(t2, dir) == AF_OK, "load: %s", af_last_error());
        af_lora_trainer_get_params(t2, p1);
        /* head bias is not written (head_bias = 0): loaded as 0 */
        int32_t ib = -1;
        int64_t boff = 0;
        af_lora_trainer_find_tensor(t2, "base_model.model.score.bias", &ib);
        af_lora_trainer_tensor_info(t2, ib, NULL, NULL, &boff);
        memset(p0 + boff, 0, 3 * sizeof(float));
        CHECK(!memcmp(p0, p1, 4 * (size_t)n), "adapter save/load round trip exact (max diff %g)",
              tl_max_abs_diff(p0, p1, (size_t)n, NULL));
        /* the file holds PEFT order: load it raw into a layout and compare with get_tensor */
        af_lora_config c = {o.r, o.lora_alpha, o.lora_dropout, 0, (1u << AF_PROJ_COUNT) - 1, 0, 0};
        af_param_layout lay;
        int32_t iq = -1;
        af_lora_trainer_find_tensor(t2, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", &iq);
        int64_t shape[2], off;
        af_lora_trainer_tensor_info(t2, iq, NULL, shape, &off);
        float *buf = malloc(4 * (size_t)(shape[0] * shape[1]));
        af_lora_trainer_get_tensor(t2, iq, buf);
        if (CHECK(af_param_layout_init(&lay, m, &c, 3) == AF_OK, "layout")) {
            CHECK(af_adapter_load(dir, &lay, f, 0, NULL) == AF_OK, "raw load: %s", af_last_error());
            CHECK(!memcmp(f + off, buf, 4 * (size_t)(shape[0] * shape[1])), "file q_proj lora_B in PEFT row order");
            af_param_layout_free(&lay);
        }
        free(buf);
        /* mismatched rank */
        af_lora_trainer *t3 = NULL;
        o.r = 2;
        if (CHECK(af_lora_trainer_new(m, &o, &t3) == AF_OK, "new r=2")) {
            af_status st = af_lora_trainer_load_adapter(t3, dir);
            CHECK(st != AF_OK && contains(af_last_error(), "af_lora_trainer_load_adapter"), "rank mismatch: %s",
                  af_last_error());
        }
        af_lora_trainer_free(t3);
    }
    af_lora_trainer_free(t2);
    static const char *files[] = {AF_ADAPTER_WEIGHTS_FILE, AF_ADAPTER_CONFIG_FILE, AF_ADAPTER_AFINAR_FILE,
                                  "manifest.json"};
    char path[256];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    CHECK(rmdir(dir) == 0, "adapter dir holds only the 4 expected files (3 + manifest.json)");
    free(p0);
    free(p1);
    free(f);
}

static void test_errors(const af_model *m) {
    af_lora_trainer *tr = NULL;
    af_lora_trainer_opts o = base_opts();
    o.r = 0;
    af_status st = af_lora_trainer_new(m, &o, &tr);
    CHECK(st == AF_ERR_INVALID_ARG && !tr && contains(af_last_error(), "af_lora_trainer_new") &&
              contains(af_last_error(), "rank r = 0"),
          "rank 0: %s", af_last_error());
    o = base_opts();
    o.targets = "q,x";
    st = af_lora_trainer_new(m, &o, &tr);
    CHECK(st == AF_ERR_INVALID_ARG && contains(af_last_error(), "unknown target 'x'"), "unknown target: %s",
          af_last_error());
    o = base_opts();
    o.pooling = (af_head_pooling)7;
    CHECK(af_lora_trainer_new(m, &o, &tr) == AF_ERR_INVALID_ARG && contains(af_last_error(), "pooling"),
          "bad pooling: %s", af_last_error());
    CHECK(af_lora_trainer_new(NULL, NULL, &tr) == AF_ERR_INVALID_ARG && contains(af_last_error(), "NULL"),
          "NULL model: %s", af_last_error());
    CHECK(af_lora_trainer_new(m, NULL, NULL) == AF_ERR_INVALID_ARG, "NULL out");
    /* defaults (NULL opts): no head */
    if (CHECK(af_lora_trainer_new(m, NULL, &tr) == AF_OK, "defaults: %s", af_last_error())) {
        double loss;
        float lg[12];
        CHECK(af_lora_trainer_n_tensors(tr) == 2 * 2 * 2, "qv on 2 layers: %d tensors", af_lora_trainer_n_tensors(tr));
        CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1, &loss, NULL) == AF_ERR_INVALID_ARG &&
                  contains(af_last_error(), "no classification head"),
              "no head: %s", af_last_error());
        CHECK(af_lora_trainer_forward(tr, g_tok, g_ss, 4, lg) == AF_ERR_INVALID_ARG, "no head forward");
        af_lora_trainer_free(tr);
    }
    tr = NULL;
    o = base_opts();
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "new")) return;
    double loss = 0;
    float lg[12];
    const int32_t bad_lab[4] = {2, 7, 1, 0};
    st = af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, bad_lab, 1, &loss, NULL);
    CHECK(st == AF_ERR_INVALID_ARG && contains(af_last_error(), "af_lora_trainer_accumulate") &&
              contains(af_last_error(), "label 7 of sample 1"),
          "label out of range: %s", af_last_error());
    int32_t bad_tok[26];
    memcpy(bad_tok, g_tok, sizeof bad_tok);
    bad_tok[20] = 100000;
    CHECK(af_lora_trainer_forward(tr, bad_tok, g_ss, 4, lg) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "position 20"),
          "token out of range: %s", af_last_error());
    const int32_t bad_ss[5] = {0, 6, 6, 19, 26};
    CHECK(af_lora_trainer_forward(tr, g_tok, bad_ss, 4, lg) == AF_ERR_INVALID_ARG && contains(af_last_error(), "empty"),
          "empty sample: %s", af_last_error());
    CHECK(af_lora_trainer_accumulate(tr, NULL, g_ss, 4, g_lab, 1, &loss, NULL) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "NULL"),
          "NULL tokens: %s", af_last_error());
    CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, NULL, 1, &loss, NULL) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "NULL labels"),
          "NULL labels: %s", af_last_error());
    CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1, NULL, NULL) == AF_ERR_INVALID_ARG, "NULL loss");
    CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 0, g_lab, 1, &loss, NULL) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "n_samples = 0"),
          "0 samples: %s", af_last_error());
    CHECK(af_lora_trainer_step(tr, -1, NULL) == AF_ERR_INVALID_ARG && contains(af_last_error(), "no micro-batch"),
          "step without accumulation: %s", af_last_error());
    CHECK(af_lora_trainer_step(NULL, -1, NULL) == AF_ERR_INVALID_ARG, "step NULL");
    const float bad_t[12] = {0, 1, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0};
    CHECK(af_lora_trainer_accumulate_multilabel(tr, g_tok, g_ss, 4, bad_t, 1, &loss, NULL) == AF_ERR_INVALID_ARG &&
              contains(af_last_error(), "sample 2, class 2"),
          "multi-label target out of range: %s", af_last_error());
    const float mh[12] = {0, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1};
    CHECK(af_lora_trainer_accumulate_multilabel(tr, g_tok, g_ss, 4, mh, 1, &loss, lg) == AF_OK && isfinite(loss) &&
              loss > 0,
          "multi-label accumulate: loss %g (%s)", loss, af_last_error());
    double gn = 0;
    CHECK(af_lora_trainer_step(tr, 1e-3f, &gn) == AF_OK && gn > 0, "multi-label step, norm %g", gn);
    const char *name = NULL;
    CHECK(af_lora_trainer_tensor_info(tr, af_lora_trainer_n_tensors(tr), &name, NULL, NULL) == AF_ERR_RANGE &&
              contains(af_last_error(), "outside"),
          "tensor index out of range: %s", af_last_error());
    CHECK(af_lora_trainer_tensor_info(tr, -1, &name, NULL, NULL) == AF_ERR_RANGE, "negative index");
    int32_t idx = 0;
    CHECK(af_lora_trainer_find_tensor(tr, "lm_head.weight", &idx) == AF_ERR_NOT_FOUND &&
              contains(af_last_error(), "lm_head.weight"),
          "unknown name: %s", af_last_error());
    float w[12] = {0};
    w[1] = NAN;
    int32_t ib = -1;
    af_lora_trainer_find_tensor(tr, "base_model.model.score.bias", &ib);
    CHECK(af_lora_trainer_set_tensor(tr, ib, w) == AF_ERR_INVALID_ARG && contains(af_last_error(), "not finite"),
          "NaN into set_tensor: %s", af_last_error());
    CHECK(af_lora_trainer_get_tensor(tr, 0, NULL) == AF_ERR_INVALID_ARG, "get_tensor NULL out");
    CHECK(af_lora_trainer_set_class_weights(tr, w) == AF_ERR_INVALID_ARG, "NaN class weight");
    const float cw[3] = {1, 2, 0.5f};
    CHECK(af_lora_trainer_set_class_weights(tr, cw) == AF_OK, "class weights");
    CHECK(af_lora_trainer_save_adapter(tr, NULL, NULL) == AF_ERR_INVALID_ARG, "save NULL dir");
    CHECK(af_lora_trainer_load_adapter(tr, "/nonexistent/afinar-adapter") != AF_OK &&
              contains(af_last_error(), "af_lora_trainer_load_adapter"),
          "load missing dir: %s", af_last_error());
    CHECK(af_lora_trainer_n_params(NULL) == 0 && af_lora_trainer_n_tensors(NULL) == 0 &&
              af_lora_trainer_step_count(NULL) == 0,
          "NULL queries");
    af_lora_trainer_free(NULL);
    af_lora_trainer_free(tr);
}

/* Forward (eval) logits equal the accumulate logits when dropout is off; gemma3 keeps row order. */
static void test_forward_gemma(void) {
    tm_spec s = tm_default("gemma3", AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (!CHECK(tm_load(&s, &m) == AF_OK, "tiny gemma3: %s", af_last_error())) return;
    af_lora_trainer_opts o = base_opts();
    o.lora_dropout = 0;
    o.pooling = AF_POOLING_LAST;
    o.checkpointing = 1;
    af_lora_trainer *tr = NULL;
    if (CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "new gemma3: %s", af_last_error())) {
        float l1[12], l2[12];
        double loss = 0;
        CHECK(af_lora_trainer_accumulate(tr, g_tok, g_ss, 4, g_lab, 1, &loss, l1) == AF_OK, "accumulate: %s",
              af_last_error());
        CHECK(af_lora_trainer_forward(tr, g_tok, g_ss, 4, l2) == AF_OK, "forward: %s", af_last_error());
        CHECK(!memcmp(l1, l2, sizeof l1), "forward logits equal accumulate logits (max diff %g)",
              tl_max_abs_diff(l1, l2, 12, NULL));
        af_lora_trainer_zero_grad(tr);
        CHECK(af_lora_trainer_step(tr, -1, NULL) == AF_ERR_INVALID_ARG, "zero_grad discards the accumulation");
        test_tensors(m, tr, 0);
    }
    af_lora_trainer_free(tr);
    af_model_free(m);
}


/* (i) collect / apply gradients (dropout off: the public accumulate keys masks by the index within
 * the step, which differs between a worker and a single trainer). */
static void test_exchange(const af_model *m) {
    af_lora_trainer_opts o = base_opts();
    o.lora_dropout = 0.0f;
    af_lora_trainer *a = NULL, *b = NULL, *r = NULL, *q = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &a) == AF_OK && af_lora_trainer_new(m, &o, &b) == AF_OK &&
                   af_lora_trainer_new(m, &o, &r) == AF_OK && af_lora_trainer_new(m, &o, &q) == AF_OK,
               "new: %s", af_last_error()))
        goto out;
    const int64_t n = af_lora_trainer_n_params(a);
    float *g0 = malloc(4 * (size_t)n), *g1 = malloc(4 * (size_t)n), *ga = malloc(4 * (size_t)n),
          *gb = malloc(4 * (size_t)n), *sum = malloc(4 * (size_t)n), *p0 = malloc(4 * (size_t)n),
          *pa = malloc(4 * (size_t)n), *pb = malloc(4 * (size_t)n), *pr = malloc(4 * (size_t)n);
    double l;
    int32_t nm = -1;
    int nf = -1;
    /* one trainer: per-micro-batch vectors, summed in order */
    af_lora_trainer_accumulate(r, g_tok, g_ss_lo, 2, g_lab, 0.5f, &l, NULL);
    CHECK(af_lora_trainer_collect_gradients(r, g0, &nm, &nf) == AF_OK && nm == 1 && nf == 0, "collect: %d micro, nf %d",
          nm, nf);
    CHECK(af_lora_trainer_collect_gradients(r, g1, NULL, NULL) == AF_OK && !memcmp(g0, g1, 4 * (size_t)n),
          "collecting keeps the gradient");
    af_lora_trainer_zero_grad(r);
    af_lora_trainer_accumulate(r, g_tok + 15, g_ss_hi, 2, g_lab + 2, 0.5f, &l, NULL);
    af_lora_trainer_collect_gradients(r, g1, NULL, NULL);
    for (int64_t i = 0; i < n; i++) sum[i] = g0[i] + g1[i];
    double gnr = 0, gna = 0, gnb = 0;
    CHECK(af_lora_trainer_apply_gradients(r, sum, 2, 0) == AF_OK && af_lora_trainer_step(r, -1.0f, &gnr) == AF_OK,
          "apply + step: %s", af_last_error());
    /* two workers */
    af_lora_trainer_accumulate(a, g_tok, g_ss_lo, 2, g_lab, 0.5f, &l, NULL);
    af_lora_trainer_accumulate(b, g_tok + 15, g_ss_hi, 2, g_lab + 2, 0.5f, &l, NULL);
    af_lora_trainer_collect_gradients(a, ga, NULL, NULL);
    af_lora_trainer_collect_gradients(b, gb, NULL, NULL);
    CHECK(!memcmp(ga, g0, 4 * (size_t)n) && !memcmp(gb, g1, 4 * (size_t)n),
          "a worker's micro-batch gradient equals the single trainer's (bitwise)");
    for (int64_t i = 0; i < n; i++) sum[i] = ga[i] + gb[i];
    CHECK(af_lora_trainer_apply_gradients(a, sum, 2, 0) == AF_OK && af_lora_trainer_apply_gradients(b, sum, 2, 0) == AF_OK,
          "apply: %s", af_last_error());
    af_lora_trainer_step(a, -1.0f, &gna);
    af_lora_trainer_step(b, -1.0f, &gnb);
    af_lora_trainer_get_params(a, pa);
    af_lora_trainer_get_params(b, pb);
    af_lora_trainer_get_params(r, pr);
    CHECK(!memcmp(pa, pr, 4 * (size_t)n) && !memcmp(pb, pr, 4 * (size_t)n) && gna == gnr && gnb == gnr && gnr > 0,
          "two workers == one trainer bit for bit (grad norm %.9g %.9g %.9g)", gna, gnb, gnr);
    /* applying a trainer's own gradient is a no-op */
    af_lora_trainer_accumulate(a, g_tok, g_ss, 4, g_lab, 1.0f, &l, NULL);
    af_lora_trainer_accumulate(r, g_tok, g_ss, 4, g_lab, 1.0f, &l, NULL);
    af_lora_trainer_collect_gradients(a, ga, &nm, NULL);
    af_lora_trainer_apply_gradients(a, ga, nm, 0);
    af_lora_trainer_step(a, -1.0f, NULL);
    af_lora_trainer_step(r, -1.0f, NULL);
    af_lora_trainer_get_params(a, pa);
    af_lora_trainer_get_params(r, pr);
    CHECK(!memcmp(pa, pr, 4 * (size_t)n), "collect + apply of the own gradient changes nothing");
    /* non-finite: flag, then an element */
    af_lora_trainer_get_params(q, p0);
    af_lora_trainer_accumulate(q, g_tok, g_ss, 4, g_lab, 1.0f, &l, NULL);
    af_lora_trainer_collect_gradients(q, ga, NULL, NULL);
    CHECK(af_lora_trainer_apply_gradients(q, ga, 1, 1) == AF_OK && af_lora_trainer_step(q, -1.0f, NULL) == AF_ERR_RANGE &&
              contains(af_last_error(), "another worker"),
          "non-finite flag: step skipped: %s", af_last_error());
    ga[n / 2] = NAN;
    CHECK(af_lora_trainer_apply_gradients(q, ga, 1, 0) == AF_OK && af_lora_trainer_step(q, -1.0f, NULL) == AF_ERR_RANGE,
          "non-finite element: step skipped: %s", af_last_error());
    af_lora_trainer_get_params(q, pa);
    CHECK(!memcmp(pa, p0, 4 * (size_t)n) && af_lora_trainer_step_count(q) == 2, "skipped steps leave the parameters");
    CHECK(af_lora_trainer_apply_gradients(q, ga, 0, 0) == AF_ERR_INVALID_ARG && contains(af_last_error(), "n_micro = 0"),
          "n_micro 0 refused: %s", af_last_error());
    CHECK(af_lora_trainer_apply_gradients(q, NULL, 1, 0) == AF_ERR_INVALID_ARG &&
              af_lora_trainer_collect_gradients(NULL, ga, NULL, NULL) == AF_ERR_INVALID_ARG &&
              af_lora_trainer_collect_gradients(q, NULL, NULL, NULL) == AF_ERR_INVALID_ARG,
          "NULL arguments refused");
    free(g0), free(g1), free(ga), free(gb), free(sum), free(p0), free(pa), free(pb), free(pr);
out:
    af_lora_trainer_free(a);
    af_lora_trainer_free(b);
    af_lora_trainer_free(r);
    af_lora_trainer_free(q);
}

/* (j) LoRA+: with loraplus_lr_ratio = 4 one step equals AdamW applied by hand to the same gradient with
 * lr on every lora_A and the head W and 4·lr on every lora_B and the head bias (PEFT's
 * create_loraplus_optimizer groups); ratio 1 equals no LoRA+ bit for bit; a negative ratio is refused. */
static void test_loraplus(const af_model *m) {
    af_lora_trainer_opts o = base_opts();
    o.lora_dropout = 0.0f;
    o.max_grad_norm = 0.0f; /* no clipping: the gradient given to AdamW is the collected one */
    o.head_bias = 1;
    o.loraplus_lr_ratio = 4.0f;
    af_lora_trainer *tr = NULL, *one = NULL, *plain = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "loraplus new: %s", af_last_error())) return;
    const int64_t n = af_lora_trainer_n_params(tr);
    float *p0 = malloc(4 * (size_t)n), *g = malloc(4 * (size_t)n), *pw = calloc((size_t)n, 4), *mm = calloc((size_t)n, 4),
          *vv = calloc((size_t)n, 4), *pt = malloc(4 * (size_t)n), *pp = malloc(4 * (size_t)n);
    double l[2];
    for (int step = 0; step < 2; step++) { /* two steps: B (and then A) have gradients and moments */
        af_lora_trainer_get_params(tr, p0);
        if (step == 0) memcpy(pw, p0, 4 * (size_t)n);
        af_lora_trainer_accumulate(tr, g_tok, g_ss_lo, 2, g_lab, 0.5f, &l[0], NULL);
        af_lora_trainer_accumulate(tr, g_tok + 15, g_ss_hi, 2, g_lab + 2, 0.5f, &l[1], NULL);
        af_lora_trainer_collect_gradients(tr, g, NULL, NULL);
        CHECK(af_lora_trainer_step(tr, -1.0f, NULL) == AF_OK, "loraplus step: %s", af_last_error());
        af_adamw a;
        int nb = 0, na = 0;
        for (int32_t i = 0; i < af_lora_trainer_n_tensors(tr); i++) {
            const char *name;
            int64_t sh[2], off;
            af_lora_trainer_tensor_info(tr, i, &name, sh, &off);
            const int is_b = strstr(name, "lora_B") != NULL || sh[1] == 1; /* lora_B or 1-D */
            nb += is_b, na += !is_b;
            af_adamw_defaults(&a, o.lr);
            a.weight_decay = o.weight_decay;
            a.t = step;
            uint8_t *nodecay = strstr(name, "score.bias") ? calloc((size_t)sh[0], 1) : NULL; /* never decayed */
            af_adamw_step(T_CTX, &a, pw + off, g + off, mm + off, vv + off, sh[0] * sh[1], is_b ? 4.0f * o.lr : o.lr,
                          nodecay);
            free(nodecay);
        }
        if (step == 0) CHECK(nb > 0 && na > 0, "both groups present (%d B, %d A)", nb, na);
    }
    af_lora_trainer_get_params(tr, pt);
    double md = 0;
    for (int64_t i = 0; i < n; i++) md = fmax(md, fabs((double)pt[i] - pw[i]));
    CHECK(md == 0, "LoRA+ step == AdamW by hand with lr (A, W) and 4 lr (B, bias): max |diff| %.3g", md);
    /* ratio 1 == plain */
    o.loraplus_lr_ratio = 1.0f;
    CHECK(af_lora_trainer_new(m, &o, &one) == AF_OK, "ratio 1: %s", af_last_error());
    o.loraplus_lr_ratio = 0.0f;
    CHECK(af_lora_trainer_new(m, &o, &plain) == AF_OK, "ratio 0: %s", af_last_error());
    if (one && plain) {
        double d0, d1;
        api_step(one, l, &d0);
        api_step(plain, l, &d1);
        af_lora_trainer_get_params(one, pt);
        af_lora_trainer_get_params(plain, pp);
        CHECK(!memcmp(pt, pp, 4 * (size_t)n), "ratio 1 == no LoRA+ (bitwise)");
        af_lora_trainer_get_params(tr, p0);
        CHECK(memcmp(pt, p0, 4 * (size_t)n) != 0, "ratio 4 differs from ratio 1");
    }
    af_lora_trainer_free(one), af_lora_trainer_free(plain);
    o.loraplus_lr_ratio = -1.0f;
    plain = NULL;
    CHECK(af_lora_trainer_new(m, &o, &plain) == AF_ERR_INVALID_ARG && contains(af_last_error(), "loraplus_lr_ratio"),
          "negative ratio refused: %s", af_last_error());
    af_lora_trainer_free(plain);
    af_lora_trainer_free(tr);
    free(p0), free(g), free(pw), free(mm), free(vv), free(pt), free(pp);
}

int main(void) {
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    make_tokens(s.vocab);
    af_model *m = NULL;
    if (!CHECK(tm_load(&s, &m) == AF_OK, "tiny llama: %s", af_last_error())) return tl_finish("api_train");
    af_lora_trainer_opts o = base_opts();
    af_lora_trainer *tr = NULL;
    if (CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "new: %s", af_last_error())) {
        test_names(m, tr);
        test_tensors(m, tr, 1);
        test_nonfinite(tr);
        test_adapter(m, tr);
    }
    af_lora_trainer_free(tr);
    test_equal_internal(m, 12, 0);
    test_equal_internal(m, 6, 1);
    test_resume(m);
    test_errors(m);
    test_exchange(m);
    test_loraplus(m);
    test_forward_gemma();
    af_model_free(m);
    return tl_finish("api_train");
}
