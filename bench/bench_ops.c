/*
 * bench_ops.c — micro-benchmark of the non-GEMM ops of one SmolLM2-135M training step
 * (kernels/ops.h): RMSNorm forward/backward, RoPE forward/backward, SwiGLU forward/backward, causal
 * GQA attention forward/backward, and af_vexpf, at the shapes of `bench_train --max-seq-len 128
 * --batch 16`: n = 2048 tokens (16 packed samples of 128), hidden 576, FFN 1536, 9 query heads,
 * 3 kv heads, head_dim 64. Times are per call of one layer's op (attention: the 16 per-sample calls
 * of one layer together), per kernel path and thread count. Not built by `make test`.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_ops.c build/libafinar.a \
 *       -o build/bench_ops $(make -s print-ldlibs)
 * (-DAF_BENCH_BASELINE builds it against a library from before af_vexpf: "vexpf" then times a libm
 * expf loop.)
 * Run: build/bench_ops [filter]   (filter: substring of the label "<op> <path> th=<threads>")
 * Each line is the minimum time over AF_BENCH_SEC seconds (default 0.5) of repetitions; the
 * inputs stay the same between repetitions (ops that add into gradients keep adding: the speed
 * does not depend on the values). Buffers are 64-byte aligned, as the engine's are.
 * AF_BENCH_PRECISION=bf16: contexts with bf16 products (the attention's blocked products; the other
 * ops are f32 either way); AF_BENCH_SEQ=512: the attention over 4 sequences of 512 instead of 16 of 128.
 */
#include "afinar.h"
#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ctx.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t xs(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uf(void) { return (float)(xs() >> 40) / (float)(1 << 24) * 2.f - 1.f; }

static float *buf(int64_t n, float scale) {
    float *p = af_malloc_aligned(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = scale * uf();
    return p;
}

enum { N = 2048, H = 576, F = 1536, NH = 9, NKV = 3, HD = 64 };
static int B = 16, T = 128; /* N = B x T: AF_BENCH_SEQ sets T (a divisor of N), B follows */

static struct {
    float *x, *y, *w, *rstd, *dy, *dx, *dw;     /* [N, H] and [H] */
    float *gate, *up, *h, *dgate, *dup, *dh;    /* [N, F] */
    float *q, *k, *v, *out, *lse, *dq, *dk, *dv, *dout; /* [N, NH|NKV, HD], lse [B][NH, T] */
    int32_t *pos;
} g;

typedef void (*op_fn)(void);

static void op_rms_fwd(void) { af_rmsnorm_forward(g_ctx, g.y, g.rstd, g.x, g.w, N, H, 1e-5f); }
static void op_rms_bwd(void) { af_rmsnorm_backward(g_ctx, g.dx, NULL, g.dy, g.x, g.w, g.rstd, N, H); }
static void op_rms_bwd_dw(void) { af_rmsnorm_backward(g_ctx, g.dx, g.dw, g.dy, g.x, g.w, g.rstd, N, H); }
static void op_rope_fwd(void) {
    af_rope_forward(g_ctx, g.q, g.pos, N, NH, HD, 10000.0f, 0);
    af_rope_forward(g_ctx, g.k, g.pos, N, NKV, HD, 10000.0f, 0);
}
static void op_rope_bwd(void) {
    af_rope_backward(g_ctx, g.dq, g.pos, N, NH, HD, 10000.0f, 0);
    af_rope_backward(g_ctx, g.dk, g.pos, N, NKV, HD, 10000.0f, 0);
}
static void op_rope_neox(void) {
    af_rope_forward(g_ctx, g.q, g.pos, N, NH, HD, 10000.0f, 1);
    af_rope_forward(g_ctx, g.k, g.pos, N, NKV, HD, 10000.0f, 1);
}
static void op_swiglu_fwd(void) { af_swiglu_forward(g_ctx, g.h, g.gate, g.up, (int64_t)N * F); }
static void op_swiglu_bwd(void) { af_swiglu_backward(g_ctx, g.dgate, g.dup, g.dh, g.gate, g.up, (int64_t)N * F); }
#ifdef AF_BENCH_BASELINE /* a library without af_vexpf: the libm loop it replaces */
static void op_vexp(void) {
    for (int64_t i = 0; i < (int64_t)N * F; i++) g.h[i] = expf(g.gate[i]);
}
#else
static void op_vexp(void) { af_vexpf(g_ctx, g.h, g.gate, (int64_t)N * F); }
#endif
static void op_att_fwd(void) {
    for (int b = 0; b < B; b++)
        af_attention_forward(g_ctx, g.out + b * T * NH * HD, g.lse + b * NH * T, g.q + b * T * NH * HD,
                             g.k + b * T * NKV * HD, g.v + b * T * NKV * HD, T, 0, T, NKV * HD, NH, NKV, HD,
                             0.125f, 0);
}
static void op_att_bwd(void) {
    for (int b = 0; b < B; b++)
        af_attention_backward(g_ctx, g.dq + b * T * NH * HD, g.dk + b * T * NKV * HD, g.dv + b * T * NKV * HD,
                              g.dout + b * T * NH * HD, g.out + b * T * NH * HD, g.lse + b * NH * T,
                              g.q + b * T * NH * HD, g.k + b * T * NKV * HD, g.v + b * T * NKV * HD, T, 0, T,
                              NH, NKV, HD, 0.125f, 0);
}

static const struct { const char *name; op_fn fn; double bytes; } OPS[] = {
    {"rmsnorm_fwd", op_rms_fwd, 3.0 * N * H * 4},
    {"rmsnorm_bwd", op_rms_bwd, 4.0 * N * H * 4},
    {"rmsnorm_bwd+dw", op_rms_bwd_dw, 6.0 * N * H * 4},
    {"rope_fwd(q+k)", op_rope_fwd, 2.0 * N * (NH + NKV) * HD * 4},
    {"rope_bwd(q+k)", op_rope_bwd, 2.0 * N * (NH + NKV) * HD * 4},
    {"rope_neox(q+k)", op_rope_neox, 2.0 * N * (NH + NKV) * HD * 4},
    {"swiglu_fwd", op_swiglu_fwd, 3.0 * N * F * 4},
    {"swiglu_bwd", op_swiglu_bwd, 7.0 * N * F * 4},
    {"vexpf", op_vexp, 2.0 * N * F * 4},
    {"attention_fwd", op_att_fwd, 0},
    {"attention_bwd", op_att_bwd, 0},
};

static double g_sec = 0.5;

static double time_op(op_fn fn) {
    double best = 1e30, total = 0;
    int reps = 0;
    fn(); /* warm-up: first-touch page faults, thread start */
    while (total < g_sec || reps < 5) {
        double t0 = af_time_sec();
        fn();
        double dt = af_time_sec() - t0;
        total += dt;
        reps++;
        if (dt < best) best = dt;
        if (reps > 100000) break;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    if (getenv("AF_BENCH_SEC")) g_sec = atof(getenv("AF_BENCH_SEC"));
    const char *prec = getenv("AF_BENCH_PRECISION");
    if (getenv("AF_BENCH_SEQ")) T = atoi(getenv("AF_BENCH_SEQ"));
    if (T < 16 || N % T) {
        fprintf(stderr, "bench_ops: AF_BENCH_SEQ must divide %d (and be >= 16)\n", N);
        return 1;
    }
    B = N / T;
    g.x = buf((int64_t)N * H, 2), g.y = buf((int64_t)N * H, 1), g.w = buf(H, 1), g.rstd = buf(N, 1);
    g.dy = buf((int64_t)N * H, 1), g.dx = buf((int64_t)N * H, 1), g.dw = buf(H, 1);
    for (int i = 0; i < H; i++) g.w[i] = 1.0f + 0.5f * g.w[i];
    g.gate = buf((int64_t)N * F, 6), g.up = buf((int64_t)N * F, 2), g.h = buf((int64_t)N * F, 1);
    g.dgate = buf((int64_t)N * F, 1), g.dup = buf((int64_t)N * F, 1), g.dh = buf((int64_t)N * F, 1);
    g.q = buf((int64_t)N * NH * HD, 1.5f), g.k = buf((int64_t)N * NKV * HD, 1.5f), g.v = buf((int64_t)N * NKV * HD, 1);
    g.out = buf((int64_t)N * NH * HD, 1), g.lse = buf((int64_t)N * NH, 1), g.dout = buf((int64_t)N * NH * HD, 1);
    g.dq = buf((int64_t)N * NH * HD, 1), g.dk = buf((int64_t)N * NKV * HD, 1), g.dv = buf((int64_t)N * NKV * HD, 1);
    g.pos = malloc(sizeof(int32_t) * N);
    for (int t = 0; t < N; t++) g.pos[t] = t % T;
    if (bench_ctx(NULL, 0, NULL, 0) != AF_OK) return 1;
    af_rmsnorm_forward(g_ctx, g.y, g.rstd, g.x, g.w, N, H, 1e-5f); /* realistic rstd */
    op_att_fwd();                                          /* realistic lse */

    static const char *PATHS[] = {"scalar", "avx2", "avx512"};
    const char *only = getenv("AF_BENCH_PATH");
    printf("cpu: %s\n", af_ctx_describe(g_ctx));
    printf("shapes: n=%d tokens (%d x %d), hidden %d, ffn %d, heads %d/%d x %d; products %s\n", N, B, T, H, F, NH, NKV,
           HD, prec ? prec : "f32");
    printf("%-16s %-7s %3s %10s %8s\n", "op", "path", "thr", "us", "GB/s");
    for (size_t o = 0; o < sizeof OPS / sizeof OPS[0]; o++)
        for (int p = 0; p < 3; p++) {
            if (only && strcmp(only, PATHS[p])) continue;
            if (bench_ctx(PATHS[p], 0, prec, 0) != AF_OK) continue;
            for (int th = 1; th <= 2; th++) {
                char label[96];
                snprintf(label, sizeof label, "%s %s th=%d", OPS[o].name, PATHS[p], th);
                if (filter && !strstr(label, filter)) continue;
                bench_ctx(PATHS[p], th, prec, 0);
                double t = time_op(OPS[o].fn);
                printf("%-16s %-7s %3d %10.1f", OPS[o].name, PATHS[p], th, t * 1e6);
                if (OPS[o].bytes > 0) printf(" %8.1f", OPS[o].bytes / t / 1e9);
                printf("\n");
                fflush(stdout);
            }
        }
    af_ctx_free(g_ctx);
    return 0;
}
