/*
 * test_peft_parity.c — the training step on SmolLM2-135M-Instruct (Q4_1) against PyTorch + PEFT
 * (fixture tests/fixtures/peft_smollm2_ref.bin from tests/ref/make_peft_ref.py): LoRA r=4, alpha 8
 * on all 7 projections with A, B and the head set from closed-form formulas (mirrored below),
 * mean pooling + Linear head, mean CE over a packed batch of 3 samples; then 5 AdamW steps.
 *
 * transformers dequantizes the same GGUF blocks to f32, so both sides run the same math in f32;
 * differences are summation order and expf/sin implementations, amplified through 30 layers.
 * Tolerances: loss 2e-5 relative; logits 1e-4 absolute; per-tensor gradient norms 5e-4 relative;
 * full gradients of 6 adapters |diff| <= 5e-4 * max|ref| + 1e-2 * |ref|; head gradients 1e-4
 * relative to max|ref|; losses after each AdamW step 5e-5 relative. Measured (AVX-512 path):
 * loss 2e-7, gradient norms 2e-5, full gradients 1e-5 of max, AdamW-step losses 4e-7, i.e. a
 * margin of >= 20x everywhere. Measured values print with TL_VERBOSE=1.
 *
 * LoRA on q and k: Hugging Face un-permutes q/k rows that the GGUF converter permuted (docs/FORMATS.md
 * §3.3); afinar keeps GGUF order, so B rows of q/k (and their gradients) are mapped through
 *   GGUF row (h·hd + 2b + a) = HF row (h·hd + a·hd/2 + b).
 */
#include "afinar.h"
#include "testlib.h"

#include <cJSON.h>

#include "lora/lora.h"
#include "model/model.h"
#include "train/engine.h"
#include "train/head.h"
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "peft_fixture.h" /* rd/take/u32/f64, lora_a/lora_b (the formulas of make_peft_ref.py) */

/* HF row of GGUF row o for q/k (permuted per head), identity otherwise. */
static int64_t hf_row(int p, int64_t o, int64_t hd) {
    if (p != AF_PROJ_Q && p != AF_PROJ_K) return o;
    int64_t h = o / hd, w = o % hd, b = w / 2, a = w % 2;
    return h * hd + a * (hd / 2) + b;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

int main(void) {
    const char *path = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!path) return tl_finish("peft_parity");
    size_t len = 0;
    char *buf = tl_read_file("tests/fixtures/peft_smollm2_ref.bin", &len);
    if (!CHECK(buf != NULL, "fixture tests/fixtures/peft_smollm2_ref.bin missing")) return tl_finish("peft_parity");
    rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    const void *magic = take(&r, 4);
    uint32_t ver = u32(&r), B = u32(&r), C = u32(&r), rank = u32(&r), nl = u32(&r), ntok = u32(&r);
    if (!CHECK(magic && !memcmp(magic, "AFPP", 4) && ver == 1 && B >= 1 && B < 64 && C >= 2 && C < 64 && rank == 4 &&
                   ntok < 4096,
               "fixture header")) {
        free(buf);
        return tl_finish("peft_parity");
    }
    const int32_t *ss = take(&r, 4 * (B + 1)), *tok = take(&r, 4 * (size_t)ntok), *lab = take(&r, 4 * B);
    double ref_loss = f64(&r);
    const float *ref_logits = take(&r, 4 * (size_t)B * C), *ref_norms = take(&r, 4 * (size_t)nl * 14);
    uint32_t n_full = u32(&r);
    af_model *m = NULL;
    if (!CHECK(ss && tok && lab && ref_logits && ref_norms && n_full < 64, "fixture body") ||
        !CHECK(af_model_load(T_CTX, path, &m) == AF_OK, "load: %s", af_last_error())) {
        free(buf);
        return tl_finish("peft_parity");
    }
    const int64_t H = m->cfg.hidden_size, hd = m->cfg.head_dim;
    CHECK((int)nl == m->cfg.num_hidden_layers, "layers %u", nl);
    af_lora_config cfg = {(int32_t)rank, 8.0f, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0, 0};
    af_param_layout lay;
    af_engine *e = NULL;
    if (!CHECK(af_param_layout_init(&lay, m, &cfg, (int32_t)C) == AF_OK, "layout: %s", af_last_error()) ||
        !CHECK(af_engine_new(NULL, m, &lay, &e) == AF_OK, "engine: %s", af_last_error())) {
        af_model_free(m);
        free(buf);
        return tl_finish("peft_parity");
    }
    float *P = malloc(sizeof(float) * (size_t)lay.n_total), *G = calloc((size_t)lay.n_total, sizeof(float));
    for (int l = 0; l < (int)nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(&lay, l, (af_proj)p);
            for (int64_t j = 0; j < rank; j++)
                for (int64_t i = 0; i < s->in; i++) P[s->a_off + j * s->in + i] = lora_a(l, p, j, i);
            for (int64_t o = 0; o < s->out; o++)
                for (int64_t j = 0; j < rank; j++) P[s->b_off + o * rank + j] = lora_b(l, p, hf_row(p, o, hd), j);
        }
    for (int64_t c = 0; c < C; c++) {
        for (int64_t k = 0; k < H; k++) P[lay.head_w_off + c * H + k] = (float)(0.05 * sin(0.9 * (double)c + 0.031 * (double)k + 0.2));
        P[lay.head_b_off + c] = (float)(0.1 * (double)c - 0.1);
    }
    af_batch b = {tok, ss, (int32_t)B, ntok, lab, NULL, NULL};
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 0}; /* no checkpointing: test_engine checks it gives identical gradients */
    double loss = 0;
    float logits[64 * 64];
    af_status st = af_engine_step(e, P, G, &b, &o, 1.0f, &loss, logits);
    CHECK(st == AF_OK, "step: %s", af_last_error());
    const double loss_rel0 = rel(loss, ref_loss);
    CHECK(rel(loss, ref_loss) < 2e-5, "loss %.8f vs PEFT %.8f (rel %.2e)", loss, ref_loss, rel(loss, ref_loss));
    CHECK_CLOSE("logits vs PEFT", logits, ref_logits, (size_t)B * C, 1e-4, 0);
    /* per-tensor gradient norms */
    double worst_norm = 0;
    for (int l = 0; l < (int)nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(&lay, l, (af_proj)p);
            double na = 0, nb = 0;
            for (int64_t i = 0; i < rank * s->in; i++) na += (double)G[s->a_off + i] * G[s->a_off + i];
            for (int64_t i = 0; i < s->out * rank; i++) nb += (double)G[s->b_off + i] * G[s->b_off + i];
            double ra = rel(sqrt(na), ref_norms[(l * 7 + p) * 2]), rb = rel(sqrt(nb), ref_norms[(l * 7 + p) * 2 + 1]);
            if (ra > worst_norm) worst_norm = ra;
            if (rb > worst_norm) worst_norm = rb;
            if (ra > 5e-4 || rb > 5e-4)
                fprintf(stderr, "layer %d %s: |dA| %.6g vs %.6g, |dB| %.6g vs %.6g\n", l, af_proj_name((af_proj)p),
                        sqrt(na), (double)ref_norms[(l * 7 + p) * 2], sqrt(nb), (double)ref_norms[(l * 7 + p) * 2 + 1]);
        }
    CHECK(worst_norm < 5e-4, "per-tensor LoRA gradient norms within 5e-4 relative (worst %.2e)", worst_norm);
    /* full gradients */
    double worst_full = 0;
    for (uint32_t k = 0; k < n_full; k++) {
        uint32_t l = u32(&r), p = u32(&r), din = u32(&r), dout = u32(&r);
        if (!CHECK(l < nl && p < AF_PROJ_COUNT && din < 100000 && dout < 100000, "full entry %u", k)) break;
        const float *gA = take(&r, 4 * (size_t)rank * din), *gB = take(&r, 4 * (size_t)dout * rank);
        const af_lora_slot *s = af_lora_slot_at(&lay, (int32_t)l, (af_proj)p);
        if (!CHECK(gA && gB && s->in == din && s->out == dout, "full entry %u shape", k)) break;
        float *mine = malloc(sizeof(float) * (size_t)dout * rank);
        for (int64_t oo = 0; oo < dout; oo++)
            for (int64_t j = 0; j < rank; j++) mine[hf_row((int)p, oo, hd) * rank + j] = G[s->b_off + oo * rank + j];
        double ma = 0, mb = 0;
        for (size_t i = 0; i < rank * din; i++) ma = fmax(ma, fabs(gA[i]));
        for (size_t i = 0; i < dout * rank; i++) mb = fmax(mb, fabs(gB[i]));
        char w[96];
        snprintf(w, sizeof w, "dA layer %u %s", l, af_proj_name((af_proj)p));
        CHECK_CLOSE(w, G + s->a_off, gA, rank * din, 5e-4 * ma, 1e-2);
        snprintf(w, sizeof w, "dB layer %u %s", l, af_proj_name((af_proj)p));
        CHECK_CLOSE(w, mine, gB, dout * rank, 5e-4 * mb, 1e-2);
        worst_full = fmax(worst_full, tl_max_abs_diff(G + s->a_off, gA, rank * din, NULL) / ma);
        worst_full = fmax(worst_full, tl_max_abs_diff(mine, gB, dout * rank, NULL) / mb);
        free(mine);
    }
    const float *dW = take(&r, 4 * (size_t)C * H), *db = take(&r, 4 * (size_t)C);
    if (CHECK(dW && db, "head gradients in fixture")) {
        double mw = 0;
        for (int64_t i = 0; i < C * H; i++) mw = fmax(mw, fabs(dW[i]));
        CHECK_CLOSE("head dW", G + lay.head_w_off, dW, (size_t)(C * H), 1e-4 * mw, 0);
        CHECK_CLOSE("head db", G + lay.head_b_off, db, C, 1e-5, 1e-4);
    }
    /* The same step with bf16 products (an engine on a context with matmul precision bf16: operands of the frozen-weight
     * products rounded to bfloat16, f32 accumulation) against the f32 PEFT reference, next to
     * PyTorch's own bf16 run of the same step (torch.autocast(cpu, bfloat16), fixture
     * peft_smollm2_bf16_ref.json from make_peft_ref.py --bf16). Tolerance: afinar-bf16's deviation
     * from f32 (loss, logits, per-tensor gradient norms; worst case over tensors) at most twice
     * PyTorch-bf16's deviation from f32 plus 1e-3. */
    af_engine *e_bf16 = NULL;
    if (tl_ctx_set(NULL, -1, "bf16", -1) == AF_OK &&
        CHECK(af_engine_new(T_CTX, m, &lay, &e_bf16) == AF_OK, "bf16 engine: %s", af_last_error())) {
        float *G2 = calloc((size_t)lay.n_total, sizeof(float));
        double loss2 = 0;
        float logits2[64 * 64];
        CHECK(af_engine_step(e_bf16, P, G2, &b, &o, 1.0f, &loss2, logits2) == AF_OK, "bf16 step: %s", af_last_error());
        af_engine_free(e_bf16);
        tl_ctx_set(NULL, -1, "f32", -1);
        char *js = tl_read_file("tests/fixtures/peft_smollm2_bf16_ref.json", NULL);
        cJSON *root = js ? cJSON_Parse(js) : NULL;
        const cJSON *tl = cJSON_GetObjectItem(root, "loss"), *tg = cJSON_GetObjectItem(root, "logits"),
                    *tn = cJSON_GetObjectItem(root, "grad_norms");
        if (CHECK(cJSON_IsNumber(tl) && cJSON_GetArraySize(tg) == (int)(B * C) &&
                      cJSON_GetArraySize(tn) == (int)(nl * 7 * 2),
                  "fixture tests/fixtures/peft_smollm2_bf16_ref.json")) {
            double wl = 0, wlt = 0, wn = 0, wnt = 0;
            for (int64_t i = 0; i < B * C; i++) {
                wl = fmax(wl, fabs((double)logits2[i] - ref_logits[i]));
                wlt = fmax(wlt, fabs(cJSON_GetArrayItem(tg, (int)i)->valuedouble - ref_logits[i]));
            }
            for (int l = 0; l < (int)nl; l++)
                for (int p = 0; p < AF_PROJ_COUNT; p++) {
                    const af_lora_slot *s = af_lora_slot_at(&lay, l, (af_proj)p);
                    double na = 0, nb = 0;
                    for (int64_t i = 0; i < rank * s->in; i++) na += (double)G2[s->a_off + i] * G2[s->a_off + i];
                    for (int64_t i = 0; i < s->out * rank; i++) nb += (double)G2[s->b_off + i] * G2[s->b_off + i];
                    for (int ab = 0; ab < 2; ab++) {
                        int idx = (l * 7 + p) * 2 + ab;
                        double mine = rel(sqrt(ab ? nb : na), ref_norms[idx]);
                        double theirs = rel(cJSON_GetArrayItem(tn, idx)->valuedouble, ref_norms[idx]);
                        wn = fmax(wn, mine);
                        wnt = fmax(wnt, theirs);
                        if (getenv("TL_VERBOSE"))
                            printf("  bf16 layer %d %s |d%c| rel to f32: afinar %.2e, PyTorch %.2e\n", l,
                                   af_proj_name((af_proj)p), ab ? 'B' : 'A', mine, theirs);
                    }
                }
            double lt = rel(tl->valuedouble, ref_loss), la = rel(loss2, ref_loss);
            CHECK(la <= 2 * lt + 1e-3, "bf16: loss rel to f32 %.2e (PyTorch bf16 %.2e)", la, lt);
            CHECK(wl <= 2 * wlt + 1e-3, "bf16: logits worst abs to f32 %.2e (PyTorch bf16 %.2e)", wl, wlt);
            CHECK(wn <= 2 * wnt + 1e-3, "bf16: grad norms worst rel to f32 %.2e (PyTorch bf16 %.2e)", wn, wnt);
            CHECK(wn > 1e-5 || wl > 1e-6, "bf16 products differ from f32 (precision actually changed)");
            printf("peft parity, bf16 products, deviation from f32 PEFT (afinar bf16 / PyTorch bf16 autocast): loss "
                   "rel %.2e / %.2e, logits worst abs %.2e / %.2e, grad-norm worst rel %.2e / %.2e\n",
                   la, lt, wl, wlt, wn, wnt);
        }
        cJSON_Delete(root);
        free(js);
        free(G2);
    } else
        tl_skip("bf16 parity: %s", af_last_error());
    /* AdamW steps */
    uint32_t n_steps = u32(&r);
    if (CHECK(n_steps >= 1 && n_steps < 20, "steps %u", n_steps)) {
        /* Under sanitizers (tl_sanitized): 2 AdamW steps (one more training step, then the final
         * forward-only loss) instead of all: the same code paths at ~half the cost. */
        if (tl_sanitized() && n_steps > 2) n_steps = 2;
        af_adamw opt;
        af_adamw_defaults(&opt, 1e-3f);
        opt.weight_decay = 0.01f;
        float *M = calloc((size_t)lay.n_total, sizeof(float)), *V = calloc((size_t)lay.n_total, sizeof(float));
        double worst_step = 0;
        double ref0 = f64(&r);
        CHECK(ref0 == ref_loss, "fixture losses[0] is the initial loss");
        for (uint32_t k = 0; k < n_steps; k++) {
            af_adamw_step(T_CTX, &opt, P, G, M, V, lay.n_total, 1e-3f, NULL); /* G: gradient at the current P */
            double refk = f64(&r);                                      /* PEFT loss after step k+1 */
            memset(G, 0, sizeof(float) * (size_t)lay.n_total);
            if (k + 1 < n_steps) {
                af_engine_step(e, P, G, &b, &o, 1.0f, &loss, NULL);
            } else {
                float lg[64 * 64], dl[64 * 64];
                af_engine_forward(e, P, &b, &o, lg);
                loss = af_ce_loss(dl, NULL, lg, lab, NULL, (int32_t)B, (int32_t)C);
            }
            double rr = rel(loss, refk);
            if (rr > worst_step) worst_step = rr;
            if (getenv("TL_VERBOSE")) printf("  AdamW step %u: loss %.7f vs PEFT %.7f\n", k + 1, loss, refk);
            CHECK(rr < 5e-5, "loss after AdamW step %u: %.7f vs PEFT %.7f (rel %.2e)", k + 1, loss, refk, rr);
        }
        printf("peft parity: loss rel %.2e, worst grad-norm rel %.2e, worst full-grad diff / max %.2e, worst "
               "AdamW-step loss rel %.2e\n",
               loss_rel0, worst_norm, worst_full, worst_step);
        free(M);
        free(V);
    }
    free(P);
    free(G);
    af_engine_free(e);
    af_param_layout_free(&lay);
    af_model_free(m);
    free(buf);
    return tl_finish("peft_parity");
}
