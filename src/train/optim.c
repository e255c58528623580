/*
 * optim.c — learning-rate schedules (contracts in optim.h; AdamW and clipping are kernels of every
 * backend: kernels/train_ops.h, kernels/cpu/optim_ops.c). Schedules: transformers' get_cosine_schedule_with_warmup /
 * get_linear_schedule_with_warmup shapes with the warm-up counted from step+1 and a floor lr_min.
 */
#include "train/optim.h"

#include <math.h>
#include <string.h>

float af_lr_at(af_sched s, float lr, float lr_min, int64_t step, int64_t warmup, int64_t total) {
    if (step < 0) step = 0;
    if (warmup > 0 && step < warmup) return (float)((double)lr * (double)(step + 1) / (double)warmup);
    if (s == AF_SCHED_CONSTANT) return lr;
    if (warmup < 0) warmup = 0;
    const int64_t span = total - 1 - warmup;
    if (span <= 0) return lr;
    double progress = (double)(step - warmup) / (double)span;
    if (progress > 1.0) progress = 1.0;
    const double hi = (double)lr, lo = (double)lr_min;
    double f;
    if (s == AF_SCHED_COSINE)
        f = 0.5 * (1.0 + cos(M_PI * progress));
    else
        f = 1.0 - progress;
    return (float)(lo + (hi - lo) * f);
}

int af_sched_parse(const char *name, af_sched *out) {
    if (!name) return -1;
    if (strcmp(name, "constant") == 0) *out = AF_SCHED_CONSTANT;
    else if (strcmp(name, "cosine") == 0) *out = AF_SCHED_COSINE;
    else if (strcmp(name, "linear") == 0) *out = AF_SCHED_LINEAR;
    else return -1;
    return 0;
}
