/*
 * optim.c — learning-rate schedules (contracts in optim.h; AdamW and clipping are kernels of every
 * backend: kernels/train_ops.h, kernels/cpu/optim_ops.c). Schedules: transformers' get_cosine_schedule_with_warmup /
 * get_linear_schedule_with_warmup shapes with the warm-up counted from step+1 and a floor lr_min;
 * warmup-stable-decay as get_wsd_schedule (linear decay).
 */
#include "train/optim.h"

#include <math.h>
#include <string.h>

float af_lr_at(af_sched s, float lr, float lr_min, int64_t step, int64_t warmup, int64_t total) {
    if (step < 0) step = 0;
    if (warmup > 0 && step < warmup) return (float)((double)lr * (double)(step + 1) / (double)warmup);
    if (s == AF_SCHED_CONSTANT) return lr;
    if (warmup < 0) warmup = 0;
    if (s == AF_SCHED_WSD) {
        const int64_t d = af_wsd_decay_start(total);
        if (step < d || total <= d) return lr;
        const double progress = (double)(step - d) / (double)(total - d);
        return (float)((double)lr_min + ((double)lr - (double)lr_min) * (1.0 - (progress > 1.0 ? 1.0 : progress)));
    }
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

/* The schedules' names, indexed by af_sched. */
static const char *const k_sched_names[] = {[AF_SCHED_CONSTANT] = "constant", [AF_SCHED_COSINE] = "cosine",
                                            [AF_SCHED_LINEAR] = "linear", [AF_SCHED_WSD] = "wsd"};
#define N_SCHED ((int)(sizeof k_sched_names / sizeof *k_sched_names))

int af_sched_parse(const char *name, af_sched *out) {
    for (int i = 0; name && i < N_SCHED; i++)
        if (strcmp(name, k_sched_names[i]) == 0) {
            *out = (af_sched)i;
            return 0;
        }
    return -1;
}

const char *af_sched_name(af_sched s) { return (int)s >= 0 && (int)s < N_SCHED ? k_sched_names[s] : "?"; }

int64_t af_wsd_decay_start(int64_t total) { return total <= 0 ? 0 : total - total / 5; }

int64_t af_wsd_total_ending(int64_t s) {
    if (s <= 0) return 0;
    int64_t t = s + s / 4;
    while (t > s && af_wsd_decay_start(t - 1) >= s) t--;
    while (af_wsd_decay_start(t) < s) t++;
    return t;
}
