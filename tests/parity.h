/*
 * parity.h — the checks the architecture parity tests share (test_qwen.c: qwen2/qwen3,
 * test_gemma4.c: gemma4), against the fixtures of tests/ref/make_qwen_ref.py and
 * make_gemma4_ref.py (same layout; gemma4's gradients are indexed by module, parity_indexed = 1):
 * logits of every position, KV-cache decode vs batched, greedy continuation, classification and
 * causal-LM LoRA gradients against PEFT (and the checkpointed step). Included by one test file each
 * (static functions); the caller includes afinar.h, testlib.h, model/model.h, lora/lora.h,
 * train/engine.h and peft_fixture.h first.
 * Tolerances (both sides f32; differences are summation order and expf): logits 1e-4 absolute;
 * decode vs batched 1e-5 absolute; losses 1e-5 relative; LoRA / head gradients
 * |diff| <= 1e-4·max|ref| + 1e-3·|ref| per tensor. The worst values are kept in w_*.
 */
#ifndef AF_TESTS_PARITY_H
#define AF_TESTS_PARITY_H

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
            if (s->a_off < 0) continue; /* no such projection in this layer (gemma4) */
            for (int64_t j = 0; j < rank; j++)
                for (int64_t i = 0; i < s->in; i++) P[s->a_off + j * s->in + i] = lora_a(l, p, j, i);
            for (int64_t o = 0; o < s->out; o++)
                for (int64_t j = 0; j < rank; j++) P[s->b_off + o * rank + j] = lora_b(l, p, o, j);
        }
}

/* Compare G's adapters with the fixture's dA, dB. Fixture layout: every (l, p) in order with
 * u32 in, out (parity_indexed = 0: qwen), or u32 count then per module u32 l, p, in, out (1: gemma4,
 * where layers lack some projections). Returns 0 on a malformed fixture. */
static int parity_indexed;
static int check_grads(rd *r, const af_param_layout *lay, const float *G, int nl, int rank, const char *what) {
    int n_slots = 0;
    for (int l = 0; l < nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) n_slots += af_lora_slot_at(lay, l, (af_proj)p)->a_off >= 0;
    const uint32_t count = parity_indexed ? u32(r) : (uint32_t)(nl * AF_PROJ_COUNT);
    if (parity_indexed && !CHECK(count == (uint32_t)n_slots, "%s: %d adapted modules, PEFT %u", what, n_slots, count))
        return 0;
    for (uint32_t k = 0; k < count; k++) {
            int l = (int)(k / AF_PROJ_COUNT), p = (int)(k % AF_PROJ_COUNT);
            if (parity_indexed) {
                l = (int)u32(r);
                p = (int)u32(r);
                if (!CHECK(l < nl && p < AF_PROJ_COUNT, "%s: fixture module %u", what, k)) return 0;
            }
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            uint32_t din = u32(r), dout = u32(r);
            const float *gA = take(r, 4 * (size_t)rank * din), *gB = take(r, 4 * (size_t)dout * rank);
            if (!CHECK(gA && gB && din == s->in && dout == s->out && s->a_off >= 0, "%s: fixture gradient %d/%d shape",
                       what, l, p))
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
    af_lora_config cfg = {(int32_t)rank, alpha, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0, 0};
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
    af_lora_config cfg = {(int32_t)rank, alpha, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 0, 0};
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

/* Tokenizer ids of the fixture's strings (u32 count; per string u32 len, bytes, u32 n, i32 ids[n])
 * against HF tokenizers (add_special: BOS as the model adds it; special tokens parsed). */
static int check_tok_ids(rd *r, const af_tokenizer *tok, const char *what, int add_special) {
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
        CHECK(af_tokenize(tok, str, len, add_special, 1, &ids, &nid) == AF_OK, "tokenize: %s", af_last_error());
        int same = nid == n && (n == 0 || memcmp(ids, ref, 4 * (size_t)n) == 0);
        CHECK(same, "%s: tokenizer ids of \"%.*s\" identical to HF tokenizers (%zu vs %u ids)", what, (int)len, str,
              nid, n);
        free(ids);
    }
    return 1;
}

#endif /* AF_TESTS_PARITY_H */
