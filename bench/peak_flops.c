/*
 * peak_flops.c — peak arithmetic throughput of this CPU, the denominator of the MFU numbers of
 * bench/train_vs_peft, plus afinar's own GEMM-shaped kernels at training shapes for reference.
 *
 *   f32 AVX-512 FMA : chains of _mm512_fmadd_ps on 16 independent accumulators (16 lanes,
 *                     2 FLOPs per lane per FMA)
 *   f32 AVX2 FMA    : the same with _mm256_fmadd_ps (8 lanes)
 *   bf16 AVX512_BF16: _mm512_dpbf16_ps (VDPBF16PS: 32 bf16 pairs -> 16 f32 lanes, each lane
 *                     acc += a0*b0 + a1*b1), counted as 2 FLOPs per bf16 pair product-add, i.e.
 *                     64 FLOPs per instruction (the usual convention for dot-product units)
 * 16 accumulators (12 for AVX2) hide an FMA latency of 4 cycles on 2 pipes (Zen 4/5: 4 cycles, 2 FMA
 * pipes: 8 chains are the minimum). Each measurement is the best of REPS = 8 runs of ~0.1 s (the
 * best, because a peak is wanted and neighbours only slow runs down), for 1 thread and for T
 * threads (OpenMP, each thread runs the same loop; FLOP/s summed).
 * Instruction sets are detected at run time with cpuid (leaf 7: AVX2 ebx5, AVX-512F ebx16;
 * leaf 7 subleaf 1: AVX512_BF16 eax5) and XGETBV (the OS saves the ZMM/YMM state).
 *
 * With -DAF_LINKED (built against libafinar.a, -Iinclude -Isrc) it also times afinar's kernels on
 * the shapes of one SmolLM2 training step (n = 2048 tokens, 576 -> 1536): af_gemm_abt (f32 x f32ᵀ),
 * af_matmul_xwt with f32 and Q4_1 weights (forward) and af_matmul_dyw (backward dx).
 *
 * Usage: peak_flops [threads (default 2)]   -> one JSON object on stdout.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef AF_LINKED
#include "afinar.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#endif

#define REPS 8

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t xgetbv0(void) {
    uint32_t a, d;
    __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    return ((uint64_t)d << 32) | a;
}

static int has_avx2, has_avx512, has_bf16;

static void detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
    const uint64_t x = xgetbv0();
    const int ymm = (x & 6) == 6, zmm = (x & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    has_avx2 = ymm && (b & (1u << 5));
    has_avx512 = zmm && (b & (1u << 16));
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) has_bf16 = has_avx512 && (a & (1u << 5));
}

/* Each kernel keeps its accumulators in named variables (an array with an asm barrier made gcc
 * store every accumulator to the stack each iteration, which halved the rate) and returns a value
 * derived from all of them so nothing is optimised away. */
#define REP16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

__attribute__((target("avx512f"))) static float k_avx512(int64_t iters) {
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)(i) * 1e-3f);
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
#define SUM(i) s = _mm512_add_ps(s, c##i);
    REP16(DECL)
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++) {
        REP16(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    REP16(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static float k_avx2(int64_t iters) {
#define DECL(i) __m256 c##i = _mm256_set1_ps((float)(i) * 1e-3f);
#define STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
#define SUM(i) s = _mm256_add_ps(s, c##i);
    REP12(DECL)
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; it++) {
        REP12(STEP)
    }
    __m256 s = _mm256_setzero_ps();
    REP12(SUM)
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx512f,avx512bf16"))) static float k_bf16(int64_t iters) {
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)(i) * 1e-3f);
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
#define SUM(i) s = _mm512_add_ps(s, c##i);
    REP16(DECL)
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380); /* 1, ~6e-8 */
    for (int64_t it = 0; it < iters; it++) {
        REP16(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    REP16(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

typedef float (*kern)(int64_t);
static volatile float sink;

/* GFLOP/s of `k` with `threads` threads; flops_per_iter per thread per iteration. */
static double measure(kern k, double flops_per_iter, int threads) {
    int64_t iters = 1 << 16;
    for (;;) { /* calibrate to ~0.1 s on one thread */
        double t = now();
        sink = k(iters);
        t = now() - t;
        if (t > 0.05) {
            iters = (int64_t)((double)iters * 0.1 / t) + 1;
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            float v = k(iters);
#pragma omp atomic
            sink += v;
        }
        double g = flops_per_iter * (double)iters * threads / (now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

#ifdef AF_LINKED
static double time_best(void (*f)(void *), void *ctx, int reps) {
    double best = 1e30;
    f(ctx); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t = now();
        f(ctx);
        t = now() - t;
        if (t < best) best = t;
    }
    return best;
}

typedef struct mmctx {
    float *y, *x, *w32;
    void *wq;
    int64_t n, in, out;
    int op; /* 0 gemm_abt, 1 xwt f32, 2 xwt q4_1, 3 dyw q4_1, 4 dyw f32 */
} mmctx;

static void run_mm(void *p) {
    mmctx *c = p;
    switch (c->op) {
    case 0: af_gemm_abt(c->y, c->x, c->w32, c->n, c->out, c->in, 0); break;
    case 1: af_matmul_xwt(c->y, c->x, c->w32, AF_TYPE_F32, c->n, c->in, c->out, 0); break;
    case 2: af_matmul_xwt(c->y, c->x, c->wq, AF_TYPE_Q4_1, c->n, c->in, c->out, 0); break;
    case 3: af_matmul_dyw(c->x, c->y, c->wq, AF_TYPE_Q4_1, c->n, c->in, c->out, 0); break;
    default: af_matmul_dyw(c->x, c->y, c->w32, AF_TYPE_F32, c->n, c->in, c->out, 0); break;
    }
}

static void afinar_kernels(int threads) {
    const int64_t n = 2048, in = 576, out = 1536;
    af_set_num_threads(threads);
    mmctx c = {.n = n, .in = in, .out = out};
    c.x = malloc(sizeof(float) * (size_t)(n * (in > out ? in : out)));
    c.y = malloc(sizeof(float) * (size_t)(n * (in > out ? in : out)));
    c.w32 = malloc(sizeof(float) * (size_t)(in * out));
    const size_t rb = af_row_bytes(AF_TYPE_Q4_1, in);
    c.wq = malloc(rb * (size_t)out);
    uint64_t s = 1;
    for (int64_t i = 0; i < n * in; i++) c.x[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) * 1e-7f - 0.5f;
    for (int64_t i = 0; i < n * out; i++) c.y[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) * 1e-7f - 0.5f;
    for (int64_t i = 0; i < in * out; i++) c.w32[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) * 1e-8f;
    /* Q4_1 block (32 weights): f16 d, f16 m, 16 bytes of nibbles: d = 0.01, m = -0.05 */
    uint8_t *q = c.wq;
    for (size_t bi = 0; bi < rb * (size_t)out / 20; bi++) {
        uint8_t *bk = q + bi * 20;
        bk[0] = 0x1f, bk[1] = 0x21, bk[2] = 0x66, bk[3] = 0xaa; /* f16 0.01, f16 -0.05 */
        for (int j = 0; j < 16; j++) bk[4 + j] = (uint8_t)((s = s * 6364136223846793005ull + 1) >> 56);
    }
    const char *names[5] = {"af_gemm_abt f32", "af_matmul_xwt F32 weights", "af_matmul_xwt Q4_1 weights",
                            "af_matmul_dyw Q4_1 weights", "af_matmul_dyw F32 weights"};
    printf(", \"afinar_kernels\": {\"shape\": \"n=%lld in=%lld out=%lld\", \"threads\": %d", (long long)n,
           (long long)in, (long long)out, threads);
    for (int op = 0; op < 5; op++) {
        c.op = op;
        double t = time_best(run_mm, &c, 5);
        printf(", \"%s\": %.1f", names[op], 2.0 * (double)(n * in * out) / t * 1e-9);
    }
    printf("}");
    free(c.x), free(c.y), free(c.w32), free(c.wq);
}
#endif

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 2;
    detect();
    char model[64] = "";
    unsigned r[12];
    if (__get_cpuid(0x80000000, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004) {
        for (int i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(model, r, 48);
    }
    printf("{\"cpu\": \"%s\", \"threads\": %d, \"avx2\": %d, \"avx512f\": %d, \"avx512_bf16\": %d", model, T,
           has_avx2, has_avx512, has_bf16);
    if (has_avx512) {
        double g1 = measure(k_avx512, 16 * 16 * 2.0, 1), gT = measure(k_avx512, 16 * 16 * 2.0, T);
        printf(", \"f32_avx512_gflops_1t\": %.1f, \"f32_avx512_gflops\": %.1f", g1, gT);
    }
    if (has_avx2) {
        double g1 = measure(k_avx2, 12 * 8 * 2.0, 1), gT = measure(k_avx2, 12 * 8 * 2.0, T);
        printf(", \"f32_avx2_gflops_1t\": %.1f, \"f32_avx2_gflops\": %.1f", g1, gT);
    }
    if (has_bf16) {
        double g1 = measure(k_bf16, 16 * 32 * 2.0, 1), gT = measure(k_bf16, 16 * 32 * 2.0, T);
        printf(", \"bf16_avx512_gflops_1t\": %.1f, \"bf16_avx512_gflops\": %.1f", g1, gT);
    }
#ifdef AF_LINKED
    afinar_kernels(T);
#endif
    printf("}\n");
    return 0;
}
