/*
 * test_transformer.c — the one layer walk (src/model/transformer.c) in its inference and training
 * modes, with LoRA adapters applied unmerged, on tiny random models (tests/tinymodel.c), llama
 * and gemma3 (qwen2 and qwen3 in (a) and (c)):
 *  (a) unmerged vs merged: a session with an adapter (af_session_set_lora: y = x·Wᵀ +
 *      s·(x·Aᵀ)·Bᵀ) gives the logits of a model whose F32 weights were merged (W + s·B·A,
 *      af_lora_merge), for a batched prompt and for the same tokens decoded one by one through
 *      the KV cache. Tolerance: the two differ only in the f32 rounding of the products (x·W' with
 *      W' = W + sBA rounded once per weight vs two products added); every dot product has length
 *      <= 128, so each differs by at most ~128·2^-24 ≈ 8e-6 relative to the sum of |terms|, and
 *      two layers with norms carry that to the logits; 2e-5 relative to the largest |logit| (plus
 *      2e-5 absolute) keeps a margin of ~2x over that bound (measured: ~1e-5 of ~60 for llama,
 *      3e-6 for gemma3) while the adapter itself moves the logits by > 50x the tolerance
 *      (checked: a missing or mis-scaled projection fails).
 *  (b) scale 0 (and no adapter) gives exactly the base logits (bitwise).
 *  (c) training walk vs inference walk: the final hidden states of the training mode (packed batch
 *      of one sample, f32-exact padded/blocked products, saved activations) equal those of the
 *      inference mode for the same tokens and adapter, within 1e-5 relative to the largest value
 *      (both run the same kernels on the same rows; only the product/attention code paths chosen
 *      for the row count may differ in summation order).
 *  (d) final-logit soft-capping (desc.final_logit_softcap, off for llama and gemma3): c·tanh(z/c).
 *  (e) af_session_load_adapter on a directory written by af_lora_trainer_save_adapter gives the
 *      logits of af_session_set_lora with the trainer's parameters (bitwise: the q/k row order
 *      round trip and F32 storage are exact).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "infer/session.h"
#include "core/core.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NTOK 12

static void fill_params(const af_param_layout *lay, float *P, uint64_t seed) {
    af_lora_init_params(lay, P);
    uint64_t rng = seed;
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *sl = af_lora_slot_at(lay, l, (af_proj)p);
            if (sl->a_off < 0) continue;
            for (int64_t i = 0; i < sl->out * lay->lora.r; i++) P[sl->b_off + i] = tl_rand_uniform(&rng, -0.2f, 0.2f);
        }
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static af_weight *proj_weight(af_layer *L, int p) {
    af_weight *w[AF_PROJ_COUNT] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[p];
}

/* A shallow copy of m whose projection weights are F32 copies with the adapter merged in
 * (W + scale·B·A). *bufs: the allocations to free ([n_layers * AF_PROJ_COUNT]). */
static af_model merged_copy(const af_model *m, const af_param_layout *lay, const float *P, float scale, float ***bufs) {
    af_model mm = *m;
    const int32_t nl = m->cfg.num_hidden_layers;
    mm.layers = malloc(sizeof(af_layer) * (size_t)nl);
    memcpy(mm.layers, m->layers, sizeof(af_layer) * (size_t)nl);
    *bufs = calloc((size_t)nl * AF_PROJ_COUNT, sizeof(float *));
    for (int32_t l = 0; l < nl; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            af_weight *w = proj_weight(&mm.layers[l], p);
            float *Wd = malloc(sizeof(float) * (size_t)(w->rows * w->cols));
            for (int64_t r = 0; r < w->rows; r++) af_weight_row(w, r, Wd + r * w->cols);
            const af_lora_slot *sl = af_lora_slot_at(lay, l, (af_proj)p);
            if (sl->a_off >= 0)
                af_lora_merge(Wd, P + sl->a_off, P + sl->b_off, sl->in, sl->out, lay->lora.r, scale, 1);
            w->data = Wd;
            w->type = AF_TYPE_F32;
            (*bufs)[l * AF_PROJ_COUNT + p] = Wd;
        }
    return mm;
}

static void free_merged(af_model *mm, float **bufs) {
    for (int32_t i = 0; i < mm->cfg.num_hidden_layers * AF_PROJ_COUNT; i++) free(bufs[i]);
    free(bufs);
    free(mm->layers);
}

/* all_logits [NTOK, V] of tokens through a fresh session on m (adapter: P, lay, scale; P NULL: none). */
static int session_logits(const af_model *m, const float *P, const af_param_layout *lay, float scale,
                          const int32_t *tok, int one_by_one, float *out) {
    af_session *s = NULL;
    if (!CHECK(af_session_new(m, 64, &s) == AF_OK, "session: %s", af_last_error())) return 0;
    int ok = CHECK(af_session_set_lora(s, P, lay, scale) == AF_OK, "set_lora: %s", af_last_error());
    const int64_t V = m->cfg.vocab_size;
    if (ok && !one_by_one) ok = CHECK(af_session_eval(s, tok, NTOK, NULL, out) == AF_OK, "eval: %s", af_last_error());
    for (int i = 0; ok && one_by_one && i < NTOK; i++)
        ok = CHECK(af_session_eval(s, tok + i, 1, out + (size_t)i * (size_t)V, NULL) == AF_OK, "eval: %s",
                   af_last_error());
    af_session_free(s);
    return ok;
}

/* Tiny model of `arch` / `wtype`, an all-linear r = 4 layout without head and parameters with
 * random B (seeded). Returns 0 (nothing to free) on failure. */
static int fixture(const char *arch, uint32_t wtype, uint64_t seed, af_model **m, af_param_layout *lay, float **P) {
    tm_spec spec = tm_default(arch, wtype);
    *m = NULL;
    if (!CHECK(tm_load(&spec, m) == AF_OK, "tiny %s: %s", arch, af_last_error())) return 0;
    uint32_t targets = 0;
    CHECK(af_lora_parse_targets("all-linear", &targets) == AF_OK, "targets");
    af_lora_config c = {4, 8.0f, 0.0f, 0, targets, 11, 0};
    if (!CHECK(af_param_layout_init(lay, *m, &c, 0) == AF_OK, "layout: %s", af_last_error())) {
        af_model_free(*m);
        return 0;
    }
    *P = malloc(sizeof(float) * (size_t)lay->n_total);
    fill_params(lay, *P, seed);
    return 1;
}

static void test_merged(const char *arch) {
    af_model *m;
    af_param_layout lay;
    float *P;
    if (!fixture(arch, AF_TYPE_F32, 3, &m, &lay, &P)) return;
    const int64_t V = m->cfg.vocab_size;
    const size_t nl = (size_t)NTOK * (size_t)V;
    float *base = malloc(sizeof(float) * nl), *base0 = malloc(sizeof(float) * nl), *ad = malloc(sizeof(float) * nl),
          *ad1 = malloc(sizeof(float) * nl), *mer = malloc(sizeof(float) * nl), *mer1 = malloc(sizeof(float) * nl);
    int32_t tok[NTOK];
    uint64_t rng = 5;
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
    const float scale = lay.scale;
    float **bufs = NULL;
    af_model mm = merged_copy(m, &lay, P, scale, &bufs);
    if (session_logits(m, NULL, NULL, 0, tok, 0, base) && session_logits(m, P, &lay, 0.0f, tok, 0, base0) &&
        session_logits(m, P, &lay, scale, tok, 0, ad) && session_logits(m, P, &lay, scale, tok, 1, ad1) &&
        session_logits(&mm, NULL, NULL, 0, tok, 0, mer) && session_logits(&mm, NULL, NULL, 0, tok, 1, mer1)) {
        const double tol = 2e-5 * (1.0 + max_abs(mer, nl));
        const double d_ad = tl_max_abs_diff(ad, mer, nl, NULL), d_ad1 = tl_max_abs_diff(ad1, mer1, nl, NULL);
        const double d_base = tl_max_abs_diff(base, mer, nl, NULL);
        CHECK(d_ad <= tol, "%s: unmerged vs merged logits (prompt): max diff %.3g > %.3g", arch, d_ad, tol);
        CHECK(d_ad1 <= tol, "%s: unmerged vs merged logits (decode): max diff %.3g > %.3g", arch, d_ad1, tol);
        CHECK(d_base > 50 * tol, "%s: the adapter moves the logits (%.3g, tolerance %.3g)", arch, d_base, tol);
        CHECK(!memcmp(base, base0, sizeof(float) * nl), "%s: scale 0 gives exactly the base logits", arch);
        printf("%s: adapter vs merged max |diff| prompt %.3g decode %.3g (tolerance %.3g; adapter effect %.3g)\n", arch,
               d_ad, d_ad1, tol, d_base);
    }
    free_merged(&mm, bufs);
    free(base);
    free(base0);
    free(ad);
    free(ad1);
    free(mer);
    free(mer1);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
}

/* Final hidden states of the training walk (one sample) and of the inference walk. */
static void test_train_vs_infer(const char *arch, uint32_t wtype) {
    af_model *m;
    af_param_layout lay;
    float *P;
    if (!fixture(arch, wtype, 9, &m, &lay, &P)) return;
    const int64_t H = m->cfg.hidden_size, NL = m->cfg.num_hidden_layers;
    const int64_t kvd = (int64_t)m->cfg.num_key_value_heads * m->cfg.head_dim;
    int32_t tok[NTOK], ss[2] = {0, NTOK}, pos[NTOK];
    uint64_t rng = 8;
    for (int i = 0; i < NTOK; i++) {
        tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)m->cfg.vocab_size);
        pos[i] = i;
    }
    /* training mode: embedding, then every layer with its own activation set */
    af_carver cv;
    af_carver_count(&cv, 0);
    af_tf_acts S;
    af_tf_scratch ws;
    af_tf_carve_scratch(&cv, &ws, m, &lay, NTOK, AF_TF_TRAIN, 0);
    af_tf_carve_acts(&cv, &S, m, &lay, NTOK, AF_TF_TRAIN, 0);
    af_devmem mem;
    float *xt = malloc(sizeof(float) * (size_t)((NL + 1) * NTOK * H));
    if (!CHECK(af_carver_alloc(&cv, m->ctx, &mem) == AF_OK, "workspace")) return;
    af_tf_carve_scratch(&cv, &ws, m, &lay, NTOK, AF_TF_TRAIN, 0);
    af_tf_carve_acts(&cv, &S, m, &lay, NTOK, AF_TF_TRAIN, 0);
    af_tf_run R;
    memset(&R, 0, sizeof R);
    R.ctx = m->ctx;
    R.m = m;
    R.mode = AF_TF_TRAIN;
    R.n = NTOK;
    R.pos = pos;
    R.ws = &ws;
    R.P = P;
    R.lay = &lay;
    R.lora_scale = lay.scale;
    R.ss = ss;
    R.B = 1;
    R.block_rows = 256;
    af_tf_embed(m->ctx, m, tok, NTOK, xt);
    for (int32_t l = 0; l < NL; l++) af_tf_layer_forward(&R, l, &S, xt + l * NTOK * H, xt + (l + 1) * NTOK * H);
    /* inference mode */
    af_tf_infer inf;
    float *kc = calloc((size_t)(NL * NTOK * kvd), sizeof(float)), *vc = calloc((size_t)(NL * NTOK * kvd), sizeof(float));
    float *kl[64], *vl[64]; /* the per-layer caches (host memory: the CPU backend) */
    for (int64_t l = 0; l < NL && l < 64; l++) kl[l] = kc + l * NTOK * kvd, vl[l] = vc + l * NTOK * kvd;
    if (CHECK(NL <= 64 && af_tf_infer_init(&inf, m->ctx, m, &lay, NTOK) == AF_OK, "infer init")) {
        af_tf_infer_forward(m->ctx, m, &inf, P, &lay, lay.scale, tok, NTOK, 0, kl, vl, NTOK, NULL);
        const float *xf = xt + NL * NTOK * H;
        const double d = tl_max_abs_diff(inf.x, xf, (size_t)(NTOK * H), NULL);
        const double tol = 1e-5 * (1.0 + max_abs(xf, (size_t)(NTOK * H)));
        CHECK(d <= tol, "%s %s: training vs inference final hidden states: max diff %.3g > %.3g", arch,
              af_type_name(wtype), d, tol);
        printf("%s %s: training vs inference walk max |diff| %.3g (%s)\n", arch, af_type_name(wtype), d,
               d == 0 ? "bitwise equal" : "within tolerance");
        af_tf_infer_free(&inf);
    }
    free(kc);
    free(vc);
    free(xt);
    af_devmem_free(&mem);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
}

/* desc.final_logit_softcap = c: the LM head's logits are c·tanh(z/c) of the uncapped z (same
 * arithmetic as the head computes: exact). */
static void test_softcap(const char *arch) {
    af_model *m;
    af_param_layout lay;
    float *P;
    if (!fixture(arch, AF_TYPE_Q8_0, 4, &m, &lay, &P)) return;
    const size_t nl = (size_t)NTOK * (size_t)m->cfg.vocab_size;
    float *z = malloc(sizeof(float) * nl), *capped = malloc(sizeof(float) * nl);
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(i * 7 + 1);
    const float c = 3.0f;
    if (session_logits(m, P, &lay, lay.scale, tok, 0, z)) {
        m->desc.final_logit_softcap = c;
        if (session_logits(m, P, &lay, lay.scale, tok, 0, capped)) {
            int ok = 1;
            for (size_t i = 0; i < nl; i++) ok &= capped[i] == c * tanhf(z[i] / c);
            CHECK(ok, "%s: soft-capped logits are c·tanh(z/c)", arch);
            CHECK(max_abs(capped, nl) <= c, "%s: soft-capped logits within [-c, c]", arch);
        }
        m->desc.final_logit_softcap = 0;
    }
    free(z);
    free(capped);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
}

/* af_lm_head_loss: loss, counts and argmax against a plain double reference on the full logits,
 * and its backward dL/dx against central finite differences of the loss (double sums; f32 products,
 * so relative tolerance 2e-2 at step 1e-2·max(1, |x|)). Tied head (token_embd F32, the tiny
 * models have no output tensor) or an untied Q8_0 output matrix; soft-cap off or c = 2 (small, so
 * the cap bends the logits). n = 600 rows with two thirds targets: more than one chunk of
 * af_lm_chunk_rows (256 for vocab 97) and rows without a target in between. */
static uint64_t lm_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double lm_ref(const af_model *m, const float *x, const int32_t *tg, int64_t n, int64_t *nt, int64_t *nc) {
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    float *h = malloc(sizeof(float) * (size_t)(n * H)), *row = malloc(sizeof(float) * (size_t)V);
    af_tf_final_norm(m->ctx, m, h, NULL, x, n);
    double L = 0;
    *nt = *nc = 0;
    const float cap = m->desc.final_logit_softcap;
    for (int64_t i = 0; i < n; i++) {
        if (tg[i] < 0) continue;
        /* one row at a time, zero-padded to 16 rows (the f32-exact regime of the training products) */
        float hp[16 * 256];
        memset(hp, 0, sizeof hp);
        memcpy(hp, h + i * H, sizeof(float) * (size_t)H);
        float *zz = malloc(sizeof(float) * (size_t)(16 * V));
        af_matmul_xwt(m->ctx, zz, hp, m->output.data, m->output.type, 16, H, V, 0);
        memcpy(row, zz, sizeof(float) * (size_t)V);
        free(zz);
        double mx = -1e300, s = 0;
        int64_t am = 0;
        for (int64_t v = 0; v < V; v++) {
            double z = cap > 0 ? cap * tanh(row[v] / cap) : row[v];
            if (z > mx) {
                mx = z;
                am = v;
            }
        }
        for (int64_t v = 0; v < V; v++) s += exp((cap > 0 ? cap * tanh(row[v] / cap) : row[v]) - mx);
        const double zt = cap > 0 ? cap * tanh(row[tg[i]] / cap) : row[tg[i]];
        L += mx + log(s) - zt;
        (*nt)++;
        *nc += am == tg[i];
    }
    free(h);
    free(row);
    return L;
}

static void test_lm_head_loss(const char *arch, int untied, float cap) {
    tm_spec spec = tm_default(arch, AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny %s: %s", arch, af_last_error())) return;
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, n = 600;
    void *wq = NULL;
    const af_weight saved = m->output;
    if (untied) { /* a separate Q8_0 output matrix [V, H] */
        uint64_t st = 99;
        float *wf = malloc(sizeof(float) * (size_t)(V * H));
        for (int64_t i = 0; i < V * H; i++) wf[i] = (float)((double)(lm_rand(&st) >> 11) / 9007199254740992.0 - 0.5) * 0.6f;
        wq = malloc((size_t)(V * (H / 32) * 34)); /* Q8_0: 34 bytes per block of 32 */
        for (int64_t r = 0; r < V; r++) af_quantize_row(AF_TYPE_Q8_0, wf + r * H, (char *)wq + r * (H / 32) * 34, H);
        free(wf);
        m->output.data = wq;
        m->output.type = AF_TYPE_Q8_0;
    }
    m->desc.final_logit_softcap = cap;
    float *x = malloc(sizeof(float) * (size_t)(n * H)), *hN = malloc(sizeof(float) * (size_t)(n * H));
    float *rstd = malloc(sizeof(float) * (size_t)n), *dx = calloc((size_t)(n * H), sizeof(float));
    float *scr = af_malloc_aligned(sizeof(float) * (size_t)af_lm_head_scratch_floats(m));
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t st = 7 + (uint64_t)untied;
    for (int64_t i = 0; i < n * H; i++) x[i] = (float)((double)(lm_rand(&st) >> 11) / 9007199254740992.0 * 2 - 1);
    for (int64_t i = 0; i < n; i++) tg[i] = i % 3 == 2 ? -1 : (int32_t)(lm_rand(&st) % (uint64_t)V);
    const float gs = 0.37f;
    af_lm_loss r, r2;
    af_lm_head_loss(m->ctx, m, x, tg, n, hN, rstd, dx, gs, scr, &r);
    af_lm_head_loss(m->ctx, m, x, tg, n, hN, rstd, NULL, gs, scr, &r2);
    int64_t nt, nc;
    const double L = lm_ref(m, x, tg, n, &nt, &nc);
    CHECK(r.n_targets == 400 && nt == 400 && r.n_correct == nc && r2.n_correct == nc,
          "%s untied=%d cap=%g: counts %lld/%lld targets, %lld/%lld correct", arch, untied, (double)cap,
          (long long)r.n_targets, (long long)nt, (long long)r.n_correct, (long long)nc);
    CHECK(fabs(r.loss_sum - L) <= 1e-4 * fabs(L) && r.loss_sum == r2.loss_sum,
          "%s untied=%d cap=%g: loss %.9g vs reference %.9g (forward-only %.9g)", arch, untied, (double)cap,
          r.loss_sum, L, r2.loss_sum);
    /* finite differences on coordinates spread over rows with and without targets */
    double worst = 0;
    for (int k = 0; k < 24; k++) {
        const int64_t i = (int64_t)(k * 97 % n) * H + (k * 13) % H;
        const float x0 = x[i], hstep = 1e-2f;
        x[i] = x0 + hstep;
        af_lm_head_loss(m->ctx, m, x, tg, n, hN, rstd, NULL, gs, scr, &r2);
        const double lp = r2.loss_sum;
        x[i] = x0 - hstep;
        af_lm_head_loss(m->ctx, m, x, tg, n, hN, rstd, NULL, gs, scr, &r2);
        const double lm = r2.loss_sum;
        x[i] = x0;
        const double fd = gs * (lp - lm) / (2.0 * hstep);
        const double err = fabs(fd - dx[i]) / (fabs(fd) + 1e-3);
        if (err > worst) worst = err;
    }
    CHECK(worst < 2e-2, "%s untied=%d cap=%g: LM head backward vs finite differences, worst relative error %.3g",
          arch, untied, (double)cap, worst);
    m->desc.final_logit_softcap = 0;
    m->output = saved;
    free(wq);
    free(x);
    free(hN);
    free(rstd);
    free(dx);
    af_free_aligned(scr);
    free(tg);
    af_model_free(m);
}

/* af_session_load_adapter of a directory saved by the trainer == af_session_set_lora with its params. */
static void test_load_adapter(const char *arch) {
    tm_spec spec = tm_default(arch, AF_TYPE_Q8_0);
    af_model *m = NULL;
    if (!CHECK(tm_load(&spec, &m) == AF_OK, "tiny %s: %s", arch, af_last_error())) return;
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.lora_alpha = 8;
    o.targets = "all-linear";
    af_lora_trainer *tr = NULL;
    if (!CHECK(af_lora_trainer_new(m, &o, &tr) == AF_OK, "trainer: %s", af_last_error())) {
        af_model_free(m);
        return;
    }
    const int64_t np = af_lora_trainer_n_params(tr);
    float *P = malloc(sizeof(float) * (size_t)np);
    uint64_t rng = 21;
    for (int64_t i = 0; i < np; i++) P[i] = tl_rand_uniform(&rng, -0.2f, 0.2f);
    CHECK(af_lora_trainer_set_params(tr, P) == AF_OK, "set params");
    char dir[] = "/tmp/af_test_tf_XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp")) goto out;
    if (!CHECK(af_lora_trainer_save_adapter(tr, dir, NULL) == AF_OK, "save: %s", af_last_error())) goto out;
    uint32_t targets = 0;
    af_lora_parse_targets("all-linear", &targets);
    af_lora_config c = {4, 8.0f, 0.0f, 0, targets, 42, 0};
    af_param_layout lay;
    if (!CHECK(af_param_layout_init(&lay, m, &c, 0) == AF_OK, "layout") ||
        !CHECK(lay.n_total == np, "layout of %lld params, trainer %lld", (long long)lay.n_total, (long long)np))
        goto out;
    const int64_t V = m->cfg.vocab_size;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V),
          *z = malloc(sizeof(float) * (size_t)V), *base = malloc(sizeof(float) * (size_t)V);
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
    af_session *s = NULL;
    if (CHECK(af_session_new(m, 64, &s) == AF_OK, "session")) {
        CHECK(af_session_eval(s, tok, NTOK, base, NULL) == AF_OK, "eval base");
        af_session_reset(s);
        CHECK(af_session_load_adapter(s, dir, 1.0f) == AF_OK, "load adapter: %s", af_last_error());
        CHECK(af_session_eval(s, tok, NTOK, a, NULL) == AF_OK, "eval a");
        af_session_reset(s);
        CHECK(af_session_set_lora(s, P, &lay, lay.scale) == AF_OK, "set_lora");
        CHECK(af_session_eval(s, tok, NTOK, b, NULL) == AF_OK, "eval b");
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)V), "%s: loaded adapter == set_lora with the same params", arch);
        CHECK(tl_max_abs_diff(a, base, (size_t)V, NULL) > 1e-3, "%s: the loaded adapter changes the logits", arch);
        af_session_reset(s);
        CHECK(af_session_load_adapter(s, dir, 0.0f) == AF_OK, "load adapter scale 0");
        CHECK(af_session_eval(s, tok, NTOK, z, NULL) == AF_OK, "eval z");
        CHECK(!memcmp(z, base, sizeof(float) * (size_t)V), "%s: --lora-scale 0 gives the base logits", arch);
        CHECK(af_session_load_adapter(s, "/nonexistent/adapter", 1.0f) != AF_OK, "missing directory fails");
        af_session_free(s);
    }
    free(a);
    free(b);
    free(z);
    free(base);
    af_param_layout_free(&lay);
out:
    if (dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    free(P);
    af_lora_trainer_free(tr);
    af_model_free(m);
}

/* The inference session on the guard device (kernels/cpu/backend_guard.c: device memory
 * PROT_NONE between the table's ops, so a host access outside the table kills this program) gives
 * the CPU's logits bit for bit: a prompt in one call and token by token (KV-cache decode), with an
 * adapter (uploaded by af_session_set_lora) and without. */
static void test_guard_session(const char *arch, uint32_t wtype) {
    af_model *m = NULL;
    af_param_layout lay;
    float *P = NULL;
    if (!fixture(arch, wtype, 5, &m, &lay, &P)) return;
    const int64_t V = m->cfg.vocab_size;
    int32_t tok[NTOK];
    uint64_t rng = 21;
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)(tl_rand_u64(&rng) % (uint64_t)V);
    float *a = malloc(sizeof(float) * (size_t)(4 * NTOK * V));
    float *b = a + 2 * NTOK * V;
    int ok = session_logits(m, P, &lay, lay.scale, tok, 0, a) && session_logits(m, NULL, NULL, 0, tok, 1, a + NTOK * V);
    af_model *g = NULL;
    if (ok && CHECK(tl_ctx_set_device("guard") == AF_OK, "guard context: %s", af_last_error())) {
        tm_spec spec = tm_default(arch, wtype);
        if (CHECK(tm_load(&spec, &g) == AF_OK, "tiny %s on guard: %s", arch, af_last_error())) {
            CHECK(strcmp(af_ctx_device(g->ctx), "guard") == 0, "model on %s", af_ctx_device(g->ctx));
            ok = session_logits(g, P, &lay, lay.scale, tok, 0, b) && session_logits(g, NULL, NULL, 0, tok, 1, b + NTOK * V);
            CHECK(ok && !memcmp(a, b, sizeof(float) * (size_t)(2 * NTOK * V)),
                  "%s %s: guard logits differ from the CPU's (max |diff| %.3g)", arch, af_type_name(wtype),
                  tl_max_abs_diff(a, b, (size_t)(2 * NTOK * V), NULL));
            printf("%s %s: session on the guard device: logits == CPU bit for bit (prompt with adapter, decode without)\n",
                   arch, af_type_name(wtype));
        }
        af_model_free(g);
        tl_ctx_set_device("cpu");
    }
    free(a);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
}

int main(void) {
    test_guard_session("llama", AF_TYPE_Q8_0);
    test_guard_session("gemma3", AF_TYPE_F32);
    test_guard_session("qwen2", AF_TYPE_Q4_1);
    test_guard_session("qwen3", AF_TYPE_F32);
    test_merged("llama");
    test_merged("gemma3");
    test_merged("qwen2");
    test_merged("qwen3");
    test_train_vs_infer("llama", AF_TYPE_F32);
    test_train_vs_infer("gemma3", AF_TYPE_F32);
    test_train_vs_infer("llama", AF_TYPE_Q8_0);
    test_train_vs_infer("gemma3", AF_TYPE_Q8_0);
    test_train_vs_infer("qwen2", AF_TYPE_Q8_0);
    test_train_vs_infer("qwen3", AF_TYPE_F32);
    test_softcap("llama");
    test_softcap("gemma3");
    test_load_adapter("llama");
    test_load_adapter("gemma3");
    for (int u = 0; u < 2; u++) {
        test_lm_head_loss("llama", u, 0.0f);
        test_lm_head_loss("gemma3", u, 2.0f);
        test_lm_head_loss("gemma3", u, 0.0f);
    }
    return tl_finish("test_transformer");
}
