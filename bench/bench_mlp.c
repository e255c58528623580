/*
 * bench_mlp.c — CPU time of one layer's gated MLP in a SmolLM2-135M training step, with the fused
 * ops of kernels/train_ops.h (af_mlp_gate_up: gate and up as one packed product, SwiGLU in its
 * epilogue; af_mlp_down_back: d act = dy·W_down with SwiGLU's backward in its epilogue) against
 * the unfused sequence they replace (hook AF_CTX_MLP_FUSED off: af_matmul_rows twice + the SwiGLU
 * pass; af_matmul_rows + two zero-fills + the SwiGLU backward pass). Shapes of `bench_train
 * --max-seq-len 128 --batch 16` (n = 2048 tokens) or of `afinar train --batch 8 --max-seq-len 128`
 * (n = 1024): hidden 576, FFN 1536, weights Q4_1 (random values: speed does not depend on them).
 * The down-projection's forward product is not timed (the same in both).
 *
 * Measured as CPU time of the calling process (getrusage: user + sys), fused and unfused
 * interleaved (A B B A ...) for REPS rounds; prints the median per call of each and the ratio, and
 * checks that both give the same bits. Use 1 thread on a shared machine (the default).
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_mlp.c build/libafinar.a \
 *       -o build/bench_mlp $(make -s print-ldlibs)
 * Run: build/bench_mlp [n_tokens (2048)] [threads (1)] [reps (15)] [kernel path (auto)]
 */
#include "afinar.h"
#include "kernels/ctx.h"
#include "kernels/quant.h"
#include "kernels/train_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_ctx.h"

static uint64_t rng = 88172645463325252ull;
static float uf(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.f - 1.f;
}

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static float *fbuf(int64_t n, float scale) {
    float *p = af_malloc_aligned(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "bench_mlp: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) p[i] = uf() * scale;
    return p;
}

static uint8_t *qw(int64_t rows, int64_t cols) {
    size_t rb = af_row_bytes(AF_TYPE_Q4_1, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *row = fbuf(cols, 0.05f);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) row[k] = uf() * 0.05f;
        af_quantize_row(AF_TYPE_Q4_1, row, w + (size_t)r * rb, cols);
    }
    af_free_aligned(row);
    return w;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 2048, H = 576, F = 1536;
    const int th = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 15;
    if (n < 16 || th < 1 || reps < 1 || reps > 1000 ||
        bench_ctx(argc > 4 ? argv[4] : NULL, th, NULL, 0) != AF_OK) {
        fprintf(stderr, "usage: bench_mlp [n_tokens >= 16] [threads >= 1] [reps 1..1000] [kernel path]: %s\n",
                af_last_error());
        return 1;
    }
    uint8_t *wg = qw(F, H), *wu = qw(F, H), *wd = qw(H, F);
    float *x = fbuf(n * H, 1.f), *dy = fbuf(n * H, 1.f);
    float *g[2], *u[2], *h[2], *da[2], *dg[2], *du[2];
    for (int k = 0; k < 2; k++) {
        g[k] = fbuf(n * F, 0), u[k] = fbuf(n * F, 0), h[k] = fbuf(n * F, 0);
        da[k] = fbuf(n * F, 0), dg[k] = fbuf(n * F, 0), du[k] = fbuf(n * F, 0);
    }
    double *t[2][2]; /* [fused][fwd, bwd] */
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++) t[k][d] = malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) /* round -1: warm-up (page faults, packing buffers) */
        for (int i = 0; i < 2; i++) {
            const int k = (r & 1) ? 1 - i : i; /* A B, B A, ... */
            af_ctx_set_hook(g_ctx, AF_CTX_MLP_FUSED, k);
            double c0 = cpu_s();
            af_mlp_gate_up(g_ctx, g[k], u[k], h[k], x, wg, AF_TYPE_Q4_1, wu, AF_TYPE_Q4_1, n, H, F, 0, 0, NULL, NULL);
            double c1 = cpu_s();
            af_mlp_down_back(g_ctx, da[k], dg[k], du[k], dy, wd, AF_TYPE_Q4_1, g[k], u[k], n, F, H, 0, 0, NULL);
            double c2 = cpu_s();
            if (r >= 0) t[k][0][r] = c1 - c0, t[k][1][r] = c2 - c1;
        }
    const size_t bytes = sizeof(float) * (size_t)(n * F);
    int same = !memcmp(g[0], g[1], bytes) && !memcmp(u[0], u[1], bytes) && !memcmp(h[0], h[1], bytes) &&
               !memcmp(da[0], da[1], bytes) && !memcmp(dg[0], dg[1], bytes) && !memcmp(du[0], du[1], bytes);
    double med[2][2];
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++) {
            qsort(t[k][d], (size_t)reps, sizeof(double), cmpd);
            med[k][d] = t[k][d][reps / 2];
        }
    printf("gated MLP of one layer, n=%lld H=%lld F=%lld Q4_1, %d thread(s), %s, medians of %d interleaved rounds, "
           "CPU ms per call:\n", (long long)n, (long long)H, (long long)F, th, af_ctx_describe(g_ctx), reps);
    printf("  forward  (gate, up, act):            unfused %8.2f  fused %8.2f  fused/unfused %.4f\n",
           med[0][0] * 1e3, med[1][0] * 1e3, med[1][0] / med[0][0]);
    printf("  backward (d act, d gate, d up):      unfused %8.2f  fused %8.2f  fused/unfused %.4f\n",
           med[0][1] * 1e3, med[1][1] * 1e3, med[1][1] / med[0][1]);
    printf("  both:                                unfused %8.2f  fused %8.2f  fused/unfused %.4f\n",
           (med[0][0] + med[0][1]) * 1e3, (med[1][0] + med[1][1]) * 1e3,
           (med[1][0] + med[1][1]) / (med[0][0] + med[0][1]));
    printf("  results bit-identical: %s\n", same ? "yes" : "NO");
    return same ? 0 : 1;
}
