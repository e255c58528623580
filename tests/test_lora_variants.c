/*
 * test_lora_variants.c — the LoRA variants besides DoRA (docs/LORA.md), against PEFT 0.21 on the tiny Hugging
 * Face llama of tests/fixtures/hf_tiny_llama:
 *  (a) PiSSA and OLoRA initialisation against PEFT on the tiny HF llama (tests/ref/make_pissa_ref.py): A0,
 *      B0 (1e-4 of the largest entry; PiSSA up to the sign of each singular pair, aligned by A0's rows;
 *      OLoRA with LAPACK's QR signs, none flipped), the base model's loss at initialisation, then with
 *      PEFT's moved A, B the summed loss (2e-5) and all gradients (1e-4); the saved adapter is a rank-2r
 *      plain LoRA (r 8, lora_alpha 16) whose loss on the unmodified base equals the training loss, and
 *      it loads back into a pissa/olora trainer exactly;
 *  (b) LoRA+ against PEFT's create_loraplus_optimizer (tests/ref/make_loraplus_ref.py): three AdamW steps
 *      from PEFT's saved adapter, plain LoRA and DoRA (magnitudes in the lr x ratio group): losses (1e-4
 *      relative) and the final parameters;
 *  (c) af_lora_identity_params (the "adapter off" of a reference model, e.g. DPO's) gives the base model's
 *      loss for DoRA and PiSSA layouts, where all-zero parameters do not.
 */
#include "afinar.h"
#include "testlib.h"
#include "variants_common.h" /* rel_err, session_loss */

#include "formats/safetensors.h"
#include "lora/lora.h"
#include "train/api_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* (a) PiSSA and OLoRA initialisation against PEFT on the tiny HF llama (tests/fixtures/pissa_ref.safetensors):
 * A0, B0 (per rank up to the sign of a singular pair: aligned by A0's rows), then with PEFT's moved A, B
 * the summed loss and the gradients; the saved adapter is the rank-2r plain LoRA of the base (a session
 * on the unmodified model gives the same loss) and loads back into a pissa trainer exactly. */
static void test_pissa(int init) {
    const char *mname = init == AF_LORA_INIT_PISSA ? "pissa" : "olora";
    af_model *m = NULL;
    af_st_file *f = NULL;
    af_lora_trainer *tr = NULL, *back = NULL;
    float *G = NULL, *P = NULL, *x = NULL, *ref = NULL, *Q = NULL, *signs = NULL;
    if (!CHECK(af_model_load(NULL, "tests/fixtures/hf_tiny_llama", &m) == AF_OK, "hf_tiny_llama: %s", af_last_error()))
        return;
    if (!CHECK(af_st_open("tests/fixtures/pissa_ref.safetensors", &f) == AF_OK, "fixture: %s", af_last_error()))
        goto out;
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4, o.lora_alpha = 8.0f, o.lora_dropout = 0.0f, o.targets = "all-linear", o.init_lora_weights = init;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "%s trainer: %s", mname, af_last_error())) goto out;
    float tokf[18], ssf[3];
    af_st_read_f32(f, af_st_find(f, "tokens"), tokf, 18), af_st_read_f32(f, af_st_find(f, "seq_start"), ssf, 3);
    int32_t tok[18], tgt[18], ss[3] = {(int32_t)ssf[0], (int32_t)ssf[1], (int32_t)ssf[2]};
    for (int i = 0; i < 18; i++) tok[i] = (int32_t)tokf[i];
    for (int b = 0; b < 2; b++)
        for (int32_t t = ss[b]; t < ss[b + 1]; t++) tgt[t] = t + 1 < ss[b + 1] ? tok[t + 1] : -1;
    /* the base model's loss is unchanged at initialisation */
    double l_init = 0, l_base = session_loss("tests/fixtures/hf_tiny_llama", NULL, tok, ss, 2);
    af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &l_init, NULL, NULL);
    CHECK(fabs(l_init - l_base) <= 1e-4 * fabs(l_base), "%s: at initialisation the loss is the base model's: %.7g vs %.7g",
          mname, l_init, l_base);
    const int32_t nt = af_lora_trainer_n_tensors(tr), r = 4;
    double worst_init = 0;
    int flips = 0;
    float sign[4] = {1, 1, 1, 1};
    signs = calloc((size_t)nt * 4, sizeof(float)); /* [slot][rank] */
    char key[300];
    for (int32_t i = 0; i < nt; i++) { /* A then B of each slot: the A fixes the signs the B uses */
        const char *name;
        int64_t sh[2];
        af_lora_trainer_tensor_info(tr, i, &name, sh, NULL);
        const int is_a = strstr(name, "lora_A") != NULL;
        const size_t cnt = (size_t)(sh[0] * sh[1]);
        x = realloc(x, 4 * cnt), ref = realloc(ref, 4 * cnt);
        snprintf(key, sizeof key, "%s.init.%s", mname, name);
        const af_st_tensor *t = af_st_find(f, key);
        if (!CHECK(t && t->n_elem == cnt, "%s missing", key)) continue;
        af_lora_trainer_get_tensor(tr, i, x);
        af_st_read_f32(f, t, ref, cnt);
        if (is_a)
            for (int32_t j = 0; j < r; j++) {
                double d = 0;
                for (int64_t c = 0; c < sh[1]; c++) d += (double)x[j * sh[1] + c] * ref[j * sh[1] + c];
                sign[j] = d < 0 ? -1.0f : 1.0f;
                signs[(size_t)(i / 2) * 4 + (size_t)j] = sign[j];
                flips += d < 0;
            }
        for (size_t k = 0; k < cnt; k++) x[k] *= sign[is_a ? k / (size_t)sh[1] : k % (size_t)r];
        worst_init = fmax(worst_init, rel_err(x, ref, cnt));
        /* PEFT's moved parameters, in afinar's signs */
        snprintf(key, sizeof key, "%s.param.%s", mname, name);
        af_st_read_f32(f, af_st_find(f, key), ref, cnt);
        for (size_t k = 0; k < cnt; k++) ref[k] *= sign[is_a ? k / (size_t)sh[1] : k % (size_t)r];
        af_lora_trainer_set_tensor(tr, i, ref);
    }
    printf("  %s: A0, B0 vs PEFT max |diff| / max |ref| %.2e (%d of %d singular pairs with the other sign)\n", mname,
           worst_init, flips, nt / 2 * r);
    CHECK(worst_init < 1e-4, "%s: A0, B0 = PEFT's (up to pair signs): %.2e", mname, worst_init);
    if (init == AF_LORA_INIT_OLORA) CHECK(flips == 0, "olora: LAPACK's QR signs (%d flipped)", flips);
    double lsum = 0, lref = 0;
    const af_st_tensor *tl = af_st_find(f, init == AF_LORA_INIT_PISSA ? "pissa.loss" : "olora.loss");
    float lf = 0;
    if (tl) af_st_read_f32(f, tl, &lf, 1);
    lref = lf;
    CHECK(af_lora_trainer_accumulate_lm(tr, tok, ss, 2, tgt, 1.0f, &lsum, NULL, NULL) == AF_OK, "accumulate: %s",
          af_last_error());
    CHECK(fabs(lsum - lref) <= 2e-5 * fabs(lref), "%s: summed loss %.7g vs PEFT %.7g", mname, lsum, lref);
    const int64_t n = af_lora_trainer_n_params(tr);
    G = malloc(4 * (size_t)n), P = malloc(4 * (size_t)n), Q = malloc(4 * (size_t)n);
    af_lora_trainer_collect_gradients(tr, G, NULL, NULL);
    af_lora_trainer_zero_grad(tr);
    af_lora_trainer_get_params(tr, P);
    af_lora_trainer_set_params(tr, G);
    double worst = 0;
    for (int32_t i = 0; i < nt; i++) {
        const char *name;
        int64_t sh[2];
        af_lora_trainer_tensor_info(tr, i, &name, sh, NULL);
        const int is_a = strstr(name, "lora_A") != NULL;
        const size_t cnt = (size_t)(sh[0] * sh[1]);
        x = realloc(x, 4 * cnt), ref = realloc(ref, 4 * cnt);
        snprintf(key, sizeof key, "%s.grad.%s", mname, name);
        af_lora_trainer_get_tensor(tr, i, x);
        af_st_read_f32(f, af_st_find(f, key), ref, cnt);
        const float *sg = signs + (size_t)(i / 2) * 4; /* a gradient flips with its parameter */
        for (size_t k = 0; k < cnt; k++) ref[k] *= sg[is_a ? k / (size_t)sh[1] : k % (size_t)r];
        const double md = rel_err(x, ref, cnt);
        worst = fmax(worst, md);
    }
    af_lora_trainer_set_params(tr, P);
    printf("  %s: loss %.7g (PEFT %.7g), gradients worst max|diff|/max|ref| %.2e\n", mname, lsum, lref, worst);
    CHECK(worst < 1e-4, "%s: gradients = PEFT's: %.2e", mname, worst);
    /* the saved adapter: a rank-2r plain LoRA of the unmodified base */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/af_%s_%d", mname, (int)getpid());
    if (CHECK(af_lora_trainer_save_adapter(tr, dir, "tiny") == AF_OK, "save: %s", af_last_error())) {
        char *cfg = tl_read_file(tl_join(dir, "adapter_config.json"), NULL);
        CHECK(cfg && strstr(cfg, "\"r\":\t8") && strstr(cfg, "\"lora_alpha\":\t16") &&
                  strstr(cfg, "\"init_lora_weights\":\ttrue"),
              "%s: saved as r 8, lora_alpha 16, init_lora_weights true", mname);
        free(cfg);
        const double ls = session_loss("tests/fixtures/hf_tiny_llama", dir, tok, ss, 2);
        CHECK(fabs(ls - lsum) <= 1e-4 * fabs(lsum), "%s: the saved adapter on the base model: loss %.7g vs training %.7g",
              mname, ls, lsum);
        if (CHECK(af_lora_trainer_new(m, &o, &back) == AF_OK, "fresh: %s", af_last_error())) {
            CHECK(af_lora_trainer_load_adapter(back, dir) == AF_OK, "load back: %s", af_last_error());
            af_lora_trainer_get_params(back, Q);
            CHECK(!memcmp(P, Q, 4 * (size_t)n), "%s: save + load gives the trained A, B exactly", mname);
        }
        static const char *const files[] = {"adapter_config.json", "adapter_model.safetensors", "afinar.json",
                                            "manifest.json"};
        for (int i = 0; i < 4; i++) unlink(tl_join(dir, files[i]));
        rmdir(dir);
    }
out:
    free(G), free(P), free(x), free(ref), free(Q), free(signs);
    af_lora_trainer_free(tr), af_lora_trainer_free(back);
    af_st_close(f);
    af_model_free(m);
}

/* (b) LoRA+ against PEFT's create_loraplus_optimizer (tests/fixtures/loraplus_ref.safetensors): from PEFT's saved
 * starting adapter, three AdamW steps (lr 1e-2, ratio 16, weight decay 0.01, no clipping) of a plain LoRA and
 * of a DoRA adapter (magnitudes in the lr x ratio group); the loss before each step and after the last, and
 * the final parameters. */
static void test_loraplus(int dora) {
    const char *kind = dora ? "dora" : "lora";
    af_model *m = NULL;
    af_st_file *f = NULL;
    af_lora_trainer *tr = NULL;
    float *x = NULL, *ref = NULL;
    if (!CHECK(af_model_load(NULL, "tests/fixtures/hf_tiny_llama", &m) == AF_OK, "hf_tiny_llama: %s", af_last_error()))
        return;
    if (!CHECK(af_st_open("tests/fixtures/loraplus_ref.safetensors", &f) == AF_OK, "fixture: %s", af_last_error()))
        goto out;
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4, o.lora_alpha = 8.0f, o.lora_dropout = 0.0f, o.targets = "all-linear", o.use_dora = dora;
    o.lr = 1e-2f, o.weight_decay = 0.01f, o.max_grad_norm = 0.0f, o.loraplus_lr_ratio = 16.0f;
    char dir[96], key[300];
    snprintf(dir, sizeof dir, "tests/fixtures/loraplus_adapter_%s", kind);
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK && af_lora_trainer_load_adapter(tr, dir) == AF_OK,
               "%s: trainer from PEFT's starting adapter: %s", kind, af_last_error()))
        goto out;
    float tokf[18], ssf[3], lref[4];
    af_st_read_f32(f, af_st_find(f, "tokens"), tokf, 18), af_st_read_f32(f, af_st_find(f, "seq_start"), ssf, 3);
    snprintf(key, sizeof key, "%s.losses", kind);
    af_st_read_f32(f, af_st_find(f, key), lref, 4);
    int32_t tok[18], tgt[18], ss[3] = {(int32_t)ssf[0], (int32_t)ssf[1], (int32_t)ssf[2]};
    for (int i = 0; i < 18; i++) tok[i] = (int32_t)tokf[i];
    for (int b = 0; b < 2; b++)
        for (int32_t t = ss[b]; t < ss[b + 1]; t++) tgt[t] = t + 1 < ss[b + 1] ? tok[t + 1] : -1;
    double lw = 0, l[4];
    for (int step = 0; step < 4; step++) {
        if (step < 3) {
            af_lora_trainer_accumulate_lm(tr, tok, ss, 2, tgt, 1.0f, &l[step], NULL, NULL);
            CHECK(af_lora_trainer_step(tr, 1e-2f, NULL) == AF_OK, "step: %s", af_last_error());
        } else {
            af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &l[step], NULL, NULL);
        }
        lw = fmax(lw, fabs(l[step] - lref[step]) / fabs((double)lref[step]));
    }
    double pw = 0;
    for (int32_t i = 0; i < af_lora_trainer_n_tensors(tr); i++) {
        const char *name;
        int64_t sh[2];
        af_lora_trainer_tensor_info(tr, i, &name, sh, NULL);
        const size_t cnt = (size_t)(sh[0] * sh[1]);
        x = realloc(x, 4 * cnt), ref = realloc(ref, 4 * cnt);
        snprintf(key, sizeof key, "%s.final.%s", kind, name);
        const af_st_tensor *t = af_st_find(f, key);
        if (!CHECK(t && t->n_elem == cnt, "%s missing", key)) continue;
        af_lora_trainer_get_tensor(tr, i, x);
        af_st_read_f32(f, t, ref, cnt);
        pw = fmax(pw, tl_max_abs_diff(x, ref, cnt, NULL));
    }
    printf("  LoRA+ (%s) vs PEFT create_loraplus_optimizer: losses %.5f %.5f %.5f %.5f (max rel. diff %.2e), "
           "final params max |diff| %.2e\n", kind, l[0], l[1], l[2], l[3], lw, pw);
    CHECK(lw <= 1e-4, "LoRA+ %s: losses of 3 steps = PEFT's: %.2e", kind, lw);
    /* AdamW moves an element whose gradient is at rounding level by up to lr_B per step either way */
    CHECK(pw <= 0.05 * 0.16 * 3, "LoRA+ %s: parameters after 3 steps = PEFT's: %.2e", kind, pw);
out:
    free(x), free(ref);
    af_lora_trainer_free(tr);
    af_st_close(f);
    af_model_free(m);
}

/* (c) af_lora_identity_params: the "adapter off" parameters of a DoRA and of a PiSSA layout give the base
 * model's loss (all-zero parameters would not: g = 0 for DoRA, the residual model for PiSSA). */
static void test_identity(int dora, int init) {
    af_model *m = NULL;
    af_lora_trainer *tr = NULL;
    float *P = NULL;
    if (!CHECK(af_model_load(NULL, "tests/fixtures/hf_tiny_llama", &m) == AF_OK, "hf_tiny_llama: %s", af_last_error()))
        return;
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4, o.lora_alpha = 8.0f, o.lora_dropout = 0.0f, o.targets = "all-linear", o.use_dora = dora;
    o.init_lora_weights = init;
    int32_t tok[18], tgt[18], ss[3] = {0, 7, 18};
    for (int i = 0; i < 18; i++) tok[i] = (i * 37 + 11) % 250 + 3;
    for (int b = 0; b < 2; b++)
        for (int32_t t = ss[b]; t < ss[b + 1]; t++) tgt[t] = t + 1 < ss[b + 1] ? tok[t + 1] : -1;
    if (CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "trainer: %s", af_last_error())) {
        af_lora_trainer_view v;
        af_lora_trainer_get_view(tr, &v);
        const int64_t n = af_lora_trainer_n_params(tr);
        P = malloc(4 * (size_t)n);
        for (int s = 0; s < 2; s++) { /* move away from the initialisation */
            double l;
            af_lora_trainer_accumulate_lm(tr, tok, ss, 2, tgt, 1.0f, &l, NULL, NULL);
            af_lora_trainer_step(tr, 5e-2f, NULL);
        }
        double moved = 0, off = 0, zero = 0;
        af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &moved, NULL, NULL);
        af_lora_trainer_get_params(tr, P);
        CHECK(af_lora_identity_params(m, v.lay, P) == AF_OK, "identity: %s", af_last_error());
        af_lora_trainer_set_params(tr, P);
        af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &off, NULL, NULL);
        memset(P, 0, 4 * (size_t)v.lay->n_lora);
        af_lora_trainer_set_params(tr, P);
        af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &zero, NULL, NULL);
        const double base = session_loss("tests/fixtures/hf_tiny_llama", NULL, tok, ss, 2);
        printf("  identity parameters (%s): loss %.6f = base %.6f (trained %.6f, all-zero %.6f)\n",
               dora ? "DoRA" : "pissa", off, base, moved, zero);
        CHECK(fabs(off - base) <= 1e-5 * fabs(base) && fabs(moved - base) > 1e-3 && fabs(zero - base) > 1e-3,
              "%s: adapter-off parameters give the base loss %.6f (got %.6f)", dora ? "DoRA" : "pissa", base, off);
    }
    free(P);
    af_lora_trainer_free(tr);
    af_model_free(m);
}

int main(void) {
    test_pissa(AF_LORA_INIT_PISSA);
    test_pissa(AF_LORA_INIT_OLORA);
    test_loraplus(0);
    test_loraplus(1);
    test_identity(1, 0);
    test_identity(0, AF_LORA_INIT_PISSA);
    return tl_finish("lora_variants");
}
