/*
 * bench_ctx.h — the af_ctx of a benchmark program, shared by the programs in bench/ (each includes
 * it once). g_ctx is the context of the benchmarked calls; bench_ctx replaces it (the old one is
 * freed) for each setting: kernel path (NULL: auto), threads (0: all), matmul precision (NULL:
 * f32), int8 decode activations. Errors: those of af_ctx_new (g_ctx is then unchanged).
 */
#ifndef AF_BENCH_CTX_H
#define AF_BENCH_CTX_H

#include "afinar.h"

static af_ctx *g_ctx;
static af_status bench_ctx(const char *path, int threads, const char *precision, int int8_act) {
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.kernel_path = path;
    p.n_threads = threads;
    if (precision) p.matmul_precision = precision;
    p.int8_activations = int8_act;
    af_ctx *c = NULL;
    af_status st = af_ctx_new(&p, &c);
    if (st != AF_OK) return st;
    af_ctx_free(g_ctx);
    g_ctx = c;
    return AF_OK;
}

#endif /* AF_BENCH_CTX_H */
