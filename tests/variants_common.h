/* variants_common.h — helpers shared by tests/test_dora.c and tests/test_lora_variants.c (included once
 * per test program): the relative error of two tensors and the summed next-token loss of a session. */
#ifndef AF_TEST_VARIANTS_COMMON_H
#define AF_TEST_VARIANTS_COMMON_H

#include "afinar.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>

/* max |a - b| / max |b| (1 as the denominator when b is all zero) */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        md = fmax(md, fabs((double)a[i] - b[i]));
    }
    return md / (mx > 0 ? mx : 1);
}

/* Summed next-token loss of samples (tokens, ss) from a session with `adapter` applied unmerged. */
static inline double session_loss(const char *model_path, const char *adapter, const int32_t *tok, const int32_t *ss, int nb) {
    af_model *m = NULL;
    af_session *s = NULL;
    if (af_model_load(NULL, model_path, &m) != AF_OK) return NAN;
    const int32_t V = af_model_get_config(m)->vocab_size;
    double sum = 0;
    float *lg = malloc(sizeof(float) * 32 * (size_t)V);
    for (int b = 0; b < nb && isfinite(sum); b++) {
        const int32_t n = ss[b + 1] - ss[b];
        af_session_free(s);
        s = NULL;
        af_status st = af_session_new(m, n + 1, &s);
        if (st == AF_OK && adapter) st = af_session_load_adapter(s, adapter, 1.0f);
        if (st == AF_OK) st = af_session_eval(s, tok + ss[b], n, NULL, lg);
        if (!CHECK(st == AF_OK, "session: %s", af_last_error())) sum = NAN;
        for (int32_t t = 0; st == AF_OK && t + 1 < n; t++) {
            const float *z = lg + (size_t)t * (size_t)V;
            double mx = z[0], se = 0;
            for (int32_t v = 1; v < V; v++) mx = fmax(mx, z[v]);
            for (int32_t v = 0; v < V; v++) se += exp((double)z[v] - mx);
            sum += mx + log(se) - z[tok[ss[b] + t + 1]];
        }
    }
    free(lg);
    af_session_free(s);
    af_model_free(m);
    return sum;
}

#endif /* AF_TEST_VARIANTS_COMMON_H */
