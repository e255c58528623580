/*
 * dora.c — DoRA's weight norm, output scaling, magnitude gradient and merge (dora.h; formulas from
 * peft 0.21 tuners/lora/dora.py DoraLinearLayer.get_weight_norm / forward and variants.py
 * DoraLinearVariant.merge_safe, re-derived for the backward with the norm detached).
 */
#include "lora/dora.h"

#include "core/blocks.h"
#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct norm_job {
    float *nrm;
    const unsigned char *W;
    uint32_t wtype;
    size_t row_bytes;
    const float *A, *B;
    int64_t in;
    int32_t r;
    float scale;
} norm_job;

/* Rows [o0, o1) of af_dora_weight_norm; each row on its own (threads cannot change it). */
static void norm_rows(void *arg, int64_t o0, int64_t o1, int tid) {
    (void)tid;
    const norm_job *J = arg;
    float row[4096], *buf = J->in <= 4096 ? row : af_malloc(sizeof(float) * (size_t)J->in);
    double *acc = af_malloc(sizeof(double) * (size_t)J->in);
    if (!buf || !acc) { /* no memory: NaN rows (the training step then reports a non-finite loss) */
        for (int64_t o = o0; o < o1; o++) J->nrm[o] = NAN;
        if (buf != row) free(buf);
        free(acc);
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        af_dequantize_row(J->wtype, J->W + (size_t)o * J->row_bytes, buf, J->in);
        for (int64_t i = 0; i < J->in; i++) acc[i] = buf[i];
        for (int32_t j = 0; j < J->r; j++) {
            const double c = (double)J->scale * J->B[o * J->r + j];
            const float *a = J->A + (int64_t)j * J->in;
            for (int64_t i = 0; i < J->in; i++) acc[i] += c * a[i];
        }
        double ss = 0;
        for (int64_t i = 0; i < J->in; i++) ss += acc[i] * acc[i];
        J->nrm[o] = (float)sqrt(ss);
    }
    if (buf != row) free(buf);
    free(acc);
}

void af_dora_weight_norm(const af_ctx *ctx, float *nrm, const void *W, uint32_t wtype, const float *A, const float *B,
                         int64_t in, int64_t out, int32_t r, float scale) {
    norm_job J = {nrm, W, wtype, af_row_bytes(wtype, in), A, B, in, r, scale};
    if (ctx && ctx->pool)
        af_threadpool_run(ctx->pool, out * in >= (1 << 16) ? ctx->n_threads : 1, out, 0, norm_rows, &J);
    else
        norm_rows(&J, 0, out, 0);
}

void af_dora_scale(float *dst, const float *src, const float *m, const float *nrm, int64_t n, int64_t out, float sub) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) dst[t * out + o] = (m[o] / nrm[o] - sub) * src[t * out + o];
}

void af_dora_dmag(float *dm, const float *dy, const float *y_pre, const float *nrm, int64_t n, int64_t out) {
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t t = 0; t < n; t++) s += (double)dy[t * out + o] * y_pre[t * out + o];
        dm[o] += (float)(s / nrm[o]);
    }
}

void af_dora_merge(float *Wd, const float *A, const float *B, const float *m, int64_t in, int64_t out, int32_t r,
                   float scale) {
    for (int64_t o = 0; o < out; o++) {
        float *w = Wd + o * in;
        for (int32_t j = 0; j < r; j++) {
            const float c = scale * B[o * r + j];
            const float *a = A + (int64_t)j * in;
            for (int64_t i = 0; i < in; i++) w[i] += c * a[i];
        }
        double ss = 0;
        for (int64_t i = 0; i < in; i++) ss += (double)w[i] * w[i];
        const float g = (float)(m[o] / sqrt(ss));
        for (int64_t i = 0; i < in; i++) w[i] *= g;
    }
}
