/*
 * bench_matmul.c — micro-benchmark of kernels/matmul.h: GFLOP/s and GB/s of weight traffic for
 * decode (n = 1) and prompt (n = 128) shapes of SmolLM2-135M (Q4_1 / Q8_0) and Gemma-3-270m
 * (Q4_K, Q5_0, Q6_K, Q8_0), per type, kernel path and thread count. Weights are random blocks
 * with finite scales (speed does not depend on the values). Not built by `make test`.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_matmul.c build/libafinar.a \
 *       -o build/bench_matmul $(make -s print-ldlibs)
 * Run: build/bench_matmul [filter]   (filter: substring of the line label, e.g. "Q4_1" or "n=1 ";
 *      a label is "<shape> <type> <op> <path> <mode> th=<threads> n=<tokens> ")
 * AF_BENCH_COLD=1 cycles through copies of W (> 128 MiB in all) so W streams from DRAM as in a
 * real decode step; otherwise one copy is reused and stays in L2/L3 when it fits.
 * Each line is the minimum time over AF_BENCH_SEC seconds (default 0.3) of repetitions.
 * Decode (n = 1, xwt, SIMD paths) is timed in three modes: f32 (fused in-register dequantization,
 * the default), int8 (a context with int8_activations) and dot (dequantize a row chunk to the
 * stack, then f32 dot: the earlier default, context hook AF_CTX_FUSED_DECODE off).
 * Also prints, for n = 1, ||y_path - y_scalar|| / ||y_scalar|| (int8 activation error).
 */
#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

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

static void put_h(uint8_t *p, float v) {
    uint16_t h = af_f32_to_fp16(v);
    memcpy(p, &h, 2);
}

static uint8_t *make_w(uint32_t type, int64_t out, int64_t in) {
    size_t rb = af_row_bytes(type, in), bb = af_type_block_bytes(type), n = rb * (size_t)out;
    uint8_t *w = af_malloc_aligned(n);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)xs();
    for (size_t off = 0; off < n; off += bb) {
        uint8_t *b = w + off;
        switch (type) {
        case AF_TYPE_F32: { float v = uf(); memcpy(b, &v, 4); } break;
        case AF_TYPE_F16: put_h(b, uf()); break;
        case AF_TYPE_Q4_0: case AF_TYPE_Q5_0: case AF_TYPE_Q8_0: put_h(b, 0.01f * uf()); break;
        case AF_TYPE_Q4_1: case AF_TYPE_Q5_1: case AF_TYPE_Q4_K: case AF_TYPE_Q5_K:
            put_h(b, 0.01f * uf()); put_h(b + 2, 0.01f * uf()); break;
        case AF_TYPE_Q2_K: put_h(b + 80, 0.01f * uf()); put_h(b + 82, 0.01f * uf()); break;
        case AF_TYPE_Q3_K: put_h(b + 108, 0.01f * uf()); break;
        case AF_TYPE_Q6_K: put_h(b + 208, 0.01f * uf()); break;
        default: break;
        }
    }
    return w;
}

typedef struct shape { uint32_t type; int64_t out, in; const char *what; } shape;

static const shape SHAPES[] = {
    {AF_TYPE_Q4_1, 576, 576, "smol q/o"},      {AF_TYPE_Q4_1, 1536, 576, "smol gate/up"},
    {AF_TYPE_Q4_1, 576, 1536, "smol down"},    {AF_TYPE_Q8_0, 49152, 576, "smol lm_head"},
    {AF_TYPE_Q8_0, 576, 576, "q8 576"},        {AF_TYPE_Q4_0, 576, 576, "q4_0 576"},
    {AF_TYPE_Q5_0, 1024, 640, "gemma q"},      {AF_TYPE_Q5_0, 2048, 640, "gemma gate"},
    {AF_TYPE_Q4_K, 640, 1024, "gemma o"},      {AF_TYPE_Q4_K, 640, 2048, "gemma down"},
    {AF_TYPE_Q6_K, 640, 2048, "gemma down6"},  {AF_TYPE_Q8_0, 256, 640, "gemma k/v"},
    {AF_TYPE_F16, 576, 576, "f16 576"},        {AF_TYPE_F32, 576, 576, "f32 576"},
};

static double g_sec = 0.3; /* seconds of repetitions per line (env AF_BENCH_SEC); the min is kept */

/* Cold mode (env AF_BENCH_COLD=1): calls cycle through g_ncopy copies of W totalling >= 128 MiB,
 * so every call streams W from DRAM as in real decode (the model does not fit in the caches). */
static int g_ncopy = 1;
static uint8_t *g_copy[512];

static double time_call(float *y, const float *x, const uint8_t *w0, uint32_t type, int64_t n,
                        int64_t in, int64_t out, int dyw) {
    double best = 1e30, total = 0;
    int reps = 0;
    while (total < g_sec || reps < 3) {
        const uint8_t *w = g_ncopy > 1 ? g_copy[reps % g_ncopy] : w0;
        double t0 = af_time_sec();
        if (dyw) af_matmul_dyw(g_ctx, y, x, w, type, n, in, out, 0);
        else af_matmul_xwt(g_ctx, y, x, w, type, n, in, out, 0);
        double dt = af_time_sec() - t0;
        total += dt;
        reps++;
        if (dt < best) best = dt;
        if (reps > 20000) break;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    if (getenv("AF_BENCH_SEC")) g_sec = atof(getenv("AF_BENCH_SEC"));
    const int cold = getenv("AF_BENCH_COLD") && atoi(getenv("AF_BENCH_COLD"));
    printf("weights: %s\n", cold ? "cold (cycling through copies > 128 MiB: streamed from DRAM)"
                                  : "warm (one copy: cache-resident when it fits)");
    static const char *PATHS[] = {"scalar", "avx2", "avx512"};
    if (bench_ctx(NULL, 0, NULL, 0) != AF_OK) return 1;
    printf("cpu: %s\n", af_ctx_describe(g_ctx));
    printf("%-14s %-5s %-6s %-8s %-4s %3s %4s %10s %9s %8s %s\n", "shape", "type", "op", "path", "mode",
           "thr", "n", "us", "GFLOP/s", "GB/s(w)", "rel-err-vs-scalar");
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *s = &SHAPES[si];
        uint8_t *w = make_w(s->type, s->out, s->in);
        double wbytes = (double)af_row_bytes(s->type, s->in) * (double)s->out;
        g_ncopy = 1;
        if (cold) {
            g_ncopy = (int)(128.0 * 1048576.0 / wbytes) + 1;
            if (g_ncopy > 512) g_ncopy = 512;
            if (g_ncopy < 2) g_ncopy = 2;
            for (int c = 0; c < g_ncopy; c++) {
                g_copy[c] = af_malloc_aligned((size_t)wbytes);
                memcpy(g_copy[c], w, (size_t)wbytes);
            }
        }
        for (int op = 0; op < 2; op++)
            for (int ni = 0; ni < 2; ni++) {
                int64_t n = ni ? 128 : 1;
                int64_t in = op ? s->out : s->in, out = op ? s->in : s->out; /* dyw: x is dy */
                float *x = af_malloc_aligned(sizeof(float) * (size_t)(n * in));
                float *y = af_malloc_aligned(sizeof(float) * (size_t)(n * out));
                float *yref = af_malloc_aligned(sizeof(float) * (size_t)(n * out));
                for (int64_t i = 0; i < n * in; i++) x[i] = uf();
                bench_ctx("scalar", 0, NULL, 0);
                if (op) af_matmul_dyw(g_ctx, yref, x, w, s->type, n, s->in, s->out, 0);
                else af_matmul_xwt(g_ctx, yref, x, w, s->type, n, s->in, s->out, 0);
                for (int p = 0; p < 3; p++) {
                    if (bench_ctx(PATHS[p], 0, NULL, 0) != AF_OK) continue;
                    if (p == 0 && (n > 1 || op)) continue; /* scalar: decode only */
                    /* decode modes: f32 (fused, default), int8 activations, dot (dequant + dot) */
                    static const char *MODES[] = {"f32", "int8", "dot"};
                    int nmode = (n == 1 && !op && p > 0) ? 3 : 1;
                    for (int th = 1; th <= 2; th++)
                    for (int md = 0; md < nmode; md++) {
                        char label[128];
                        snprintf(label, sizeof label, "%s %s %s %s %s th=%d n=%lld ", s->what, af_type_name(s->type),
                                 op ? "dyw" : "xwt", PATHS[p], MODES[md], th, (long long)n);
                        if (filter && !strstr(label, filter)) continue;
                        bench_ctx(PATHS[p], th, NULL, md == 1);
                        af_ctx_set_hook(g_ctx, AF_CTX_FUSED_DECODE, md != 2);
                        double t = time_call(y, x, w, s->type, n, op ? s->in : in, op ? s->out : out, op);
                        double e2 = 0, r2 = 0;
                        for (int64_t i = 0; i < n * out; i++) {
                            e2 += ((double)y[i] - yref[i]) * ((double)y[i] - yref[i]);
                            r2 += (double)yref[i] * yref[i];
                        }
                        printf("%-14s %-5s %-6s %-8s %-4s %3d %4lld %10.1f %9.1f %8.1f %.2e\n", s->what,
                               af_type_name(s->type), op ? "dyw" : "xwt", PATHS[p], nmode > 1 ? MODES[md] : "-",
                               th, (long long)n, t * 1e6,
                               2.0 * (double)n * (double)s->in * (double)s->out / t * 1e-9, wbytes / t * 1e-9,
                               r2 > 0 ? sqrt(e2 / r2) : 0.0);
                        fflush(stdout);
                    }
                }
                af_free_aligned(x);
                af_free_aligned(y);
                af_free_aligned(yref);
            }
        if (cold)
            for (int c = 0; c < g_ncopy; c++) af_free_aligned(g_copy[c]);
        af_free_aligned(w);
    }
    af_ctx_free(g_ctx);
    return 0;
}
