/*
 * bench_batch.c — decode throughput of continuous batching (af_session_eval_batch) against the same
 * sequences decoded one after the other (af_session_eval, one token each), on one model: B
 * sequences with different short prompts (and, with --adapter DIR, every other sequence carrying
 * the adapter), greedy, STEPS decode steps each; the two modes are interleaved REPS times and the
 * medians reported. Also checks that both modes give the same tokens. Not built by `make test`.
 *
 * Build (from the repository root, after `make lib`):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_batch.c build/libafinar.a \
 *       $(make -s print-ldlibs) -o build/bench_batch
 *   build/bench_batch MODEL.gguf [B=4] [STEPS=32] [REPS=3] [THREADS=2] [ADAPTER_DIR]
 */
#include "afinar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Greedy choice: the library's (af_sample with no parameters: argmax, ties -> lowest id). */
static int32_t argmax(const float *x, int32_t n) { return af_sample(x, n, NULL, NULL); }

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_batch MODEL [B] [STEPS] [REPS] [THREADS] [ADAPTER]\n");
        return 2;
    }
    const int B = argc > 2 ? atoi(argv[2]) : 4, STEPS = argc > 3 ? atoi(argv[3]) : 32, REPS = argc > 4 ? atoi(argv[4]) : 3;
    af_ctx_params cp;
    af_ctx_params_default(&cp);
    cp.n_threads = argc > 5 ? atoi(argv[5]) : 2;
    const char *adapter = argc > 6 ? argv[6] : NULL;
    af_ctx *ctx = NULL;
    af_model *m = NULL;
    if (af_ctx_new(&cp, &ctx) != AF_OK || af_model_load(ctx, argv[1], &m) != AF_OK) {
        fprintf(stderr, "%s\n", af_last_error());
        return 1;
    }
    const af_tokenizer *tok = af_model_tokenizer(m);
    const int32_t V = af_model_get_config(m)->vocab_size;
    static const char *prompts[] = {"The capital of France is", "Once upon a time", "The best way to learn", "In 1969,",
                                    "My favourite food is", "The weather today", "Python is a", "The ocean"};
    af_session **s = calloc((size_t)B, sizeof *s);
    int32_t **ids = calloc((size_t)B, sizeof *ids);
    size_t *nid = calloc((size_t)B, sizeof *nid);
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)B);
    int32_t *cur = calloc((size_t)B, sizeof *cur), *out_a = calloc((size_t)(B * STEPS), 4), *out_b = calloc((size_t)(B * STEPS), 4);
    double *ta = calloc((size_t)REPS, sizeof(double)), *tb = calloc((size_t)REPS, sizeof(double));
    for (int i = 0; i < B; i++) {
        const char *p = prompts[i % 8];
        af_tokenize(tok, p, strlen(p), 1, 1, &ids[i], &nid[i]);
        if (af_session_new(m, (int)nid[i] + STEPS + 1, &s[i]) != AF_OK ||
            (adapter && i % 2 && af_session_load_adapter(s[i], adapter, 1.0f) != AF_OK)) {
            fprintf(stderr, "%s\n", af_last_error());
            return 1;
        }
    }
    for (int rep = 0; rep < REPS; rep++) {
        for (int mode = 0; mode < 2; mode++) {
            for (int i = 0; i < B; i++) { /* prompts (not timed) */
                af_session_reset(s[i]);
                af_session_eval(s[i], ids[i], (int)nid[i], lg, NULL);
                cur[i] = argmax(lg, V);
            }
            const double t0 = now();
            for (int t = 0; t < STEPS; t++) {
                if (mode == 0) {
                    for (int i = 0; i < B; i++) {
                        af_session_eval(s[i], &cur[i], 1, lg, NULL);
                        out_a[i * STEPS + t] = cur[i] = argmax(lg, V);
                    }
                } else {
                    af_session_eval_batch(s, B, cur, lg);
                    for (int i = 0; i < B; i++) out_b[i * STEPS + t] = cur[i] = argmax(lg + (size_t)i * V, V);
                }
            }
            (mode == 0 ? ta : tb)[rep] = now() - t0;
        }
    }
    qsort(ta, (size_t)REPS, sizeof(double), cmpd);
    qsort(tb, (size_t)REPS, sizeof(double), cmpd);
    const double a = ta[REPS / 2], b = tb[REPS / 2];
    const int same = !memcmp(out_a, out_b, sizeof(int32_t) * (size_t)(B * STEPS));
    printf("{\"sequences\": %d, \"steps\": %d, \"reps\": %d, \"threads\": %d, \"adapter\": %s, "
           "\"alone_tok_s\": %.2f, \"batched_tok_s\": %.2f, \"speedup\": %.2f, \"same_tokens\": %s}\n",
           B, STEPS, REPS, cp.n_threads, adapter ? "true" : "false", B * STEPS / a, B * STEPS / b, a / b,
           same ? "true" : "false");
    for (int i = 0; i < B; i++) {
        af_session_free(s[i]);
        free(ids[i]);
    }
    free(s), free(ids), free(nid), free(lg), free(cur), free(out_a), free(out_b), free(ta), free(tb);
    af_model_free(m);
    af_ctx_free(ctx);
    return same ? 0 : 1;
}
