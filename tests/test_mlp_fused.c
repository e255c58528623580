/*
 * test_mlp_fused.c — the gated MLP's fused training ops (kernels/train_ops.h af_mlp_gate_up,
 * af_mlp_down_back: the activation in the epilogue of the up product; d act with the activation's
 * backward in its epilogue) against the unfused sequence they replace, BIT
 * FOR BIT (the fusion must not change a single result):
 *  (a) the ops alone, hook AF_CTX_MLP_FUSED on vs off (off = af_matmul_rows, fills, SwiGLU/GeGLU
 *      kernels), on every kernel path of this CPU, 1 and 2 threads, f32 and (where the CPU has it)
 *      bf16 products, several weight types, shapes with partial panels and several row blocks
 *      (column groups), SwiGLU and GeGLU; d_gate / d_up overwritten (NaN on entry); and that the
 *      fused path was taken exactly where the packed GEMM takes the product (af_mlp_fused_calls),
 *      and not when the packed B exceeds the cap (af_gp_set_max_b): then the same results unfused;
 *  (b) whole training steps of tiny llama / gemma3 models (engine: forward, loss, backward) with the
 *      hook on vs off: the same loss, logits and gradients bit for bit, for adapter targets where
 *      both epilogues apply (q,v), where one does (down; gate+up) and where none does (all), with
 *      LoRA and DoRA.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/train_ops.h"
#include "train/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x5eed0f3412ull;

static float *rnd(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = tl_rand_normal(&g_rng) * scale;
    return p;
}

/* W [rows, cols] of `type` from random normal values (af_quantize_row; F32 stored as is). */
static uint8_t *make_w(uint32_t type, int64_t rows, int64_t cols) {
    size_t rb = af_row_bytes(type, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *tmp = rnd(cols, 0.2f);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = tl_rand_normal(&g_rng) * 0.2f;
        if (type == AF_TYPE_F32) memcpy(w + (size_t)r * rb, tmp, rb);
        else if (!af_quantize_row(type, tmp, w + (size_t)r * rb, cols)) memset(w + (size_t)r * rb, 0, rb);
    }
    free(tmp);
    return w;
}

static int same(const float *a, const float *b, int64_t n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

/* One (type, shape, activation) case of both ops on T_CTX: fused (hook on) vs unfused (hook off). */
static void op_case(const char *tag, uint32_t type, int64_t n, int64_t H, int64_t F, int geglu, size_t cap) {
    uint8_t *wg = make_w(type, F, H), *wu = make_w(type, F, H), *wd = make_w(type, H, F);
    float *x = rnd(n * H, 1.0f), *dy = rnd(n * H, 1.0f);
    const int64_t nf = n * F;
    float *g[2], *u[2], *h[2], *dh[2], *dg[2], *du[2];
    af_gp_set_max_b(T_CTX, cap);
    const double esz = T_CTX->bf16 && H % 2 == 0 ? 2 : 4; /* bytes per packed B value */
    const double bbytes = (double)af_gp_packed_b_floats(H, F) * esz, capb = (double)(cap ? cap : 64u << 20);
    const int packed = n > AF_MM_DECODE_N && af_gp_usable(T_CTX, n, F, H);
    /* fused: each op when its product's packed B fits in one block */
    const int usable = 2 * (packed && bbytes <= capb);
    int64_t fused = 0;
    for (int on = 0; on < 2; on++) {
        g[on] = malloc(sizeof(float) * (size_t)nf), u[on] = malloc(sizeof(float) * (size_t)nf);
        h[on] = malloc(sizeof(float) * (size_t)nf), dh[on] = malloc(sizeof(float) * (size_t)nf);
        dg[on] = malloc(sizeof(float) * (size_t)nf), du[on] = malloc(sizeof(float) * (size_t)nf);
        for (int64_t i = 0; i < nf; i++) dg[on][i] = du[on][i] = NAN; /* overwritten, not added to */
        af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, on);
        const int64_t c0 = af_mlp_fused_calls();
        af_mlp_gate_up(T_CTX, g[on], u[on], h[on], x, wg, type, wu, type, n, H, F, geglu, 64, NULL, NULL);
        af_mlp_down_back(T_CTX, dh[on], dg[on], du[on], dy, wd, type, g[on], u[on], n, F, H, geglu, 64, NULL);
        if (on) fused = af_mlp_fused_calls() - c0;
        else CHECK(af_mlp_fused_calls() == c0, "%s: hook off: nothing fused", tag);
    }
    af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, 1);
    af_gp_set_max_b(T_CTX, 0);
    int fin = 1;
    for (int64_t i = 0; i < nf; i++) fin &= isfinite(h[1][i]) && isfinite(dg[1][i]) && isfinite(du[1][i]);
    CHECK(fused == usable, "%s: %lld of 2 ops fused (expected %d)", tag, (long long)fused, usable);
    CHECK(fin && same(g[0], g[1], nf) && same(u[0], u[1], nf) && same(h[0], h[1], nf),
          "%s: gate, up, act bitwise (max |d act| %.3g)", tag, tl_max_abs_diff(h[0], h[1], (size_t)nf, NULL));
    CHECK(same(dh[0], dh[1], nf) && same(dg[0], dg[1], nf) && same(du[0], du[1], nf),
          "%s: d act, d gate, d up bitwise (max |d gate| diff %.3g)", tag,
          tl_max_abs_diff(dg[0], dg[1], (size_t)nf, NULL));
    for (int on = 0; on < 2; on++) free(g[on]), free(u[on]), free(h[on]), free(dh[on]), free(dg[on]), free(du[on]);
    free(wg), free(wu), free(wd), free(x), free(dy);
}

/* The ops with LoRA adapters on gate, up and down (af_lora_args): hook on (the activation and its
 * backward in the epilogue after the correction, bf16 on AMX tiles) vs off (af_proj_lora_forward /
 * af_proj_lora_backward, then the separate passes): every output bitwise, the adapters' xa, dA,
 * dB and down's input act included; with a dropout mask the backward is not fused. */
static void op_lora_case(const char *tag, int64_t n, int64_t H, int64_t F, int32_t r, int masked, int expect) {
    uint8_t *wg = make_w(AF_TYPE_Q4_1, F, H), *wu = make_w(AF_TYPE_Q4_1, F, H), *wd = make_w(AF_TYPE_Q4_1, H, F);
    float *x = rnd(n * H, 1.0f), *dy = rnd(n * H, 1.0f);
    float *A[3] = {rnd(r * H, 0.1f), rnd(r * H, 0.1f), rnd(r * F, 0.1f)};
    float *B[3] = {rnd(F * r, 0.1f), rnd(F * r, 0.1f), rnd(H * r, 0.1f)};
    float *mk[3] = {NULL, NULL, NULL};
    if (masked) {
        mk[0] = malloc(sizeof(float) * (size_t)(n * H)), mk[1] = malloc(sizeof(float) * (size_t)(n * H));
        mk[2] = malloc(sizeof(float) * (size_t)(n * F));
        af_lora_dropout_mask(T_CTX, mk[0], 7, 0, AF_PROJ_GATE, 0, n, H, 0.1f);
        af_lora_dropout_mask(T_CTX, mk[1], 7, 0, AF_PROJ_UP, 0, n, H, 0.1f);
        af_lora_dropout_mask(T_CTX, mk[2], 7, 0, AF_PROJ_DOWN, 0, n, F, 0.1f);
    }
    const int64_t nf = n * F, ng = 2 * r * H + r * F + 2 * F * r + H * r;
    float *o[2][8], *grad[2];
    int64_t fused = 0;
    for (int on = 0; on < 2; on++) {
        for (int k = 0; k < 6; k++) o[on][k] = malloc(sizeof(float) * (size_t)nf); /* g u h dh dg du */
        o[on][6] = malloc(sizeof(float) * (size_t)nf);                              /* act, down's input */
        o[on][7] = malloc(sizeof(float) * (size_t)(3 * n * r));                     /* xa of gate, up, down */
        grad[on] = calloc((size_t)ng, sizeof(float));
        float *tmp = malloc(sizeof(float) * (size_t)(n * (r + F)));
        float *dA[3] = {grad[on], grad[on] + r * H, grad[on] + 2 * r * H};
        float *dB[3] = {dA[2] + r * F, dA[2] + r * F + F * r, dA[2] + r * F + 2 * F * r};
        af_lora_args la[3];
        for (int k = 0; k < 3; k++)
            la[k] = (af_lora_args){.A = A[k], .B = B[k], .xa = o[on][7] + k * n * r, .drop_mask = mk[k], .dA = dA[k],
                                   .dB = dB[k], .tmp = tmp, .x = o[on][6], .r = r, .scale = 2.0f};
        af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, on);
        const int64_t c0 = af_mlp_fused_calls();
        af_mlp_gate_up(T_CTX, o[on][0], o[on][1], o[on][2], x, wg, AF_TYPE_Q4_1, wu, AF_TYPE_Q4_1, n, H, F, 0, 64,
                       &la[0], &la[1]);
        /* down's forward correction only for its xa (unfused in both: the walk's proj_fwd) */
        float *y = malloc(sizeof(float) * (size_t)(n * H));
        af_lora_forward(T_CTX, memset(y, 0, sizeof(float) * (size_t)(n * H)), la[2].xa, o[on][2], mk[2], A[2], B[2], n,
                        F, H, r, 2.0f);
        free(y);
        af_mlp_down_back(T_CTX, o[on][3], o[on][4], o[on][5], dy, wd, AF_TYPE_Q4_1, o[on][0], o[on][1], n, F, H, 0, 64,
                         &la[2]);
        if (on) fused = af_mlp_fused_calls() - c0;
        free(tmp);
    }
    af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, 1);
    CHECK(fused == expect, "%s: %lld of 2 ops fused (expected %d)", tag, (long long)fused, expect);
    static const char *nm[8] = {"gate", "up", "act", "d act", "d gate", "d up", "down's input", "xa"};
    for (int k = 0; k < 8; k++) {
        const int64_t len = k == 7 ? 3 * n * r : nf;
        CHECK(same(o[0][k], o[1][k], len), "%s: %s bitwise (max diff %.3g)", tag, nm[k],
              tl_max_abs_diff(o[0][k], o[1][k], (size_t)len, NULL));
    }
    CHECK(same(grad[0], grad[1], ng), "%s: dA, dB bitwise (max diff %.3g)", tag,
          tl_max_abs_diff(grad[0], grad[1], (size_t)ng, NULL));
    for (int on = 0; on < 2; on++) {
        for (int k = 0; k < 8; k++) free(o[on][k]);
        free(grad[on]);
    }
    for (int k = 0; k < 3; k++) free(A[k]), free(B[k]), free(mk[k]);
    free(wg), free(wu), free(wd), free(x), free(dy);
}

static void test_ops_lora(void) {
    for (int bf = 0; bf < 2; bf++)
        for (int th = 1; th <= 2; th++) {
            if (tl_ctx_set("auto", th, bf ? "bf16" : "f32", -1) != AF_OK) continue;
            /* fused only with bf16 products on AMX tiles (the LoRA correction in the epilogue) */
            const int amx = bf && af_gp_amx(T_CTX, 256);
            for (int masked = 0; masked < 2; masked++) {
                char tag[160];
                snprintf(tag, sizeof tag, "LoRA on gate, up, down: %d thr %s %s", th, bf ? "bf16" : "f32",
                         masked ? "dropout" : "no dropout");
                op_lora_case(tag, 300, 256, 512, 16, masked, amx ? (masked ? 1 : 2) : 0);
            }
        }
    tl_ctx_set("auto", -1, "f32", -1);
}

static void test_ops(void) {
    static const char *paths[] = {"scalar", "avx2", "avx512"};
    static const struct {
        uint32_t type;
        int64_t n, H, F;
    } C[] = {
        {AF_TYPE_F32, 37, 64, 80},   /* a partial last panel (80 = 2·32 + 16) */
        {AF_TYPE_F32, 300, 48, 112}, /* three row blocks of 128: column groups with 2 threads */
        {AF_TYPE_Q4_1, 150, 64, 96},
        {AF_TYPE_Q4_K, 40, 256, 256},
        {AF_TYPE_Q8_0, 20, 96, 160},
        {AF_TYPE_F32, 33, 16, 8},    /* F < 16: not on the packed GEMM, unfused */
    };
    for (int p = 0; p < 3; p++)
        for (int th = 1; th <= 2; th++)
            for (int bf = 0; bf < 2; bf++) {
                if (tl_ctx_set(paths[p], th, bf ? "bf16" : "f32", -1) != AF_OK) {
                    if (th == 1) tl_skip("%s %s: not available on this CPU", paths[p], bf ? "bf16" : "f32");
                    continue;
                }
                for (size_t c = 0; c < sizeof C / sizeof C[0]; c++)
                    for (int geglu = 0; geglu < 2; geglu++) {
                        char tag[160];
                        snprintf(tag, sizeof tag, "%s %d thr %s %s n=%lld H=%lld F=%lld %s", paths[p], th,
                                 bf ? "bf16" : "f32", af_type_name(C[c].type), (long long)C[c].n, (long long)C[c].H,
                                 (long long)C[c].F, geglu ? "geglu" : "swiglu");
                        op_case(tag, C[c].type, C[c].n, C[c].H, C[c].F, geglu, 0);
                    }
                /* packed B over the cap: the ops fall back to the sequence (column-blocked products) */
                char tag[160];
                snprintf(tag, sizeof tag, "%s %d thr %s packed B over the cap", paths[p], th, bf ? "bf16" : "f32");
                op_case(tag, AF_TYPE_F32, 70, 64, 128, 0, 24 * 1024);
            }
    tl_ctx_set("auto", -1, "f32", -1);
}

/* ---- (b) training steps ---- */

static void step_case(const char *arch, uint32_t type, uint32_t targets, const char *tname, int dora,
                      int expect_fused) {
    tm_spec s = tm_default(arch, type);
    s.n_layer = 3;
    af_model *m = NULL;
    af_engine *e = NULL;
    af_param_layout lay;
    memset(&lay, 0, sizeof lay);
    char tag[128];
    snprintf(tag, sizeof tag, "%s/%s step, %s on %s, %d thr", arch, af_type_name(type), dora ? "DoRA" : "LoRA",
             tname, af_ctx_n_threads(T_CTX));
    if (!CHECK(tm_load(&s, &m) == AF_OK, "%s: load: %s", tag, af_last_error())) return;
    af_lora_config c = {4, 8.0f, 0.1f, 0, targets, 5, dora};
    if (!CHECK(af_param_layout_init_layers(&lay, m, &c, 3, 0, 0) == AF_OK && af_engine_new(NULL, m, &lay, &e) == AF_OK,
               "%s: engine: %s", tag, af_last_error())) {
        af_param_layout_free(&lay);
        af_model_free(m);
        return;
    }
    const int64_t nt = lay.n_total;
    float *P = malloc(sizeof(float) * (size_t)nt), *G[2];
    af_lora_init_params(&lay, P);
    for (int64_t i = 0; i < nt; i++) P[i] += tl_rand_uniform(&g_rng, -0.05f, 0.05f); /* B != 0 */
    int32_t tok[90], ss[4] = {0, 30, 71, 90}, lab[3] = {2, 0, 1};
    for (int i = 0; i < 90; i++) tok[i] = (int32_t)(tl_rand_u64(&g_rng) % (uint64_t)s.vocab);
    af_batch b = {tok, ss, 3, 90, lab, NULL, NULL};
    af_step_opts o = {AF_POOL_MEAN, NULL, 0, 1, 3};
    double L[2];
    float lg[2][9];
    int64_t fused = 0;
    for (int on = 0; on < 2; on++) {
        G[on] = calloc((size_t)nt, sizeof(float));
        af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, on);
        const int64_t c0 = af_mlp_fused_calls();
        L[on] = NAN;
        CHECK(af_engine_step(e, P, G[on], &b, &o, 1.0f, &L[on], lg[on]) == AF_OK, "%s: step: %s", tag,
              af_last_error());
        if (on) fused = af_mlp_fused_calls() - c0;
    }
    af_ctx_set_hook(T_CTX, AF_CTX_MLP_FUSED, 1);
    if (!T_CTX->k->mm->ukernel) expect_fused = 0; /* no packed GEMM on this path: never fused */
    CHECK(expect_fused ? fused > 0 : fused == 0, "%s: %lld fused MLP ops", tag, (long long)fused);
    CHECK(isfinite(L[1]) && L[0] == L[1] && !memcmp(lg[0], lg[1], sizeof lg[0]) &&
              !memcmp(G[0], G[1], sizeof(float) * (size_t)nt),
          "%s: loss %.9g vs %.9g, max |dG| %.3g", tag, L[1], L[0], tl_max_abs_diff(G[0], G[1], (size_t)nt, NULL));
    free(G[0]), free(G[1]), free(P);
    af_engine_free(e);
    af_param_layout_free(&lay);
    af_model_free(m);
}

static void test_steps(void) {
    const uint32_t QV = (1u << AF_PROJ_Q) | (1u << AF_PROJ_V), DOWN = 1u << AF_PROJ_DOWN,
                   GU = (1u << AF_PROJ_GATE) | (1u << AF_PROJ_UP);
    for (int th = 1; th <= 2; th++) {
        tl_ctx_set("auto", th, "f32", -1);
        step_case("llama", AF_TYPE_Q4_1, QV, "q,v", 0, 1);
        step_case("gemma3", AF_TYPE_Q4_K, QV, "q,v", 0, 1);
        step_case("llama", AF_TYPE_F32, DOWN, "down", 0, 1);
        step_case("gemma3", AF_TYPE_Q8_0, GU, "gate,up", 0, 1);
        step_case("gemma3", AF_TYPE_Q8_0, GU, "gate,up", 1, 1);
        step_case("llama", AF_TYPE_Q4_1, 127, "all", 0, 0);
        step_case("llama", AF_TYPE_Q4_1, 127, "all", 1, 0);
    }
    tl_ctx_set("auto", -1, "f32", -1);
}

int main(void) {
    test_ops();
    test_ops_lora();
    test_steps();
    return tl_finish("mlp_fused");
}
