/*
 * trainer_device.c — the training run's device guard and CPU fallback (contracts in
 * trainer_internal.h): does the run fit the device's memory, and what happens when the device fails
 * or computes non-finite values where the CPU does not. With `--device auto` the run goes on on the
 * CPU (said on the log); with an explicit device it stops with a message naming the device, the step
 * and what to do. The CPU path is the same code on a CPU context: the model's weights are read
 * through their host views, the state (parameters, AdamW moments, counters) is carried over from the
 * device, or from the last checkpoint when the device can no longer be read.
 */
#include "train/trainer_internal.h"

#include "kernels/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* t->ctx becomes a CPU context with the same threads, waiting policy and precision; the device
 * context is kept (an owned model holds it) until the trainer is freed. */
static af_status switch_ctx_to_cpu(af_trainer *t) {
    af_ctx *cpu = NULL;
    AF_TRY(af_ctx_new_cpu(t->ctx, 0, &cpu)); /* quantize "none": the model is loaded already */
    af_ctx_free(t->ctx_dev); /* (only one switch per run) */
    t->ctx_dev = t->ctx;
    t->ctx = cpu;
    return AF_OK;
}

static void say(const af_trainer *t, const char *fmt, const char *a, const char *b) {
    if (!t->log) return;
    fprintf(t->log, fmt, a, b);
    fflush(t->log);
}

af_status af_tr_device_fit(af_trainer *t) {
    const af_ctx *ctx = t->ctx;
    if (af_ctx_on_cpu(ctx)) return AF_OK;
    const af_trainer_opts *o = t->o;
    size_t act = af_engine_bytes(t->model, &t->lay, t->max_mb_tokens, o->checkpointing);
    const size_t act_ev = t->val ? af_engine_bytes(t->model, &t->lay, t->max_ev_tokens, 1) : 0;
    if (act_ev > act) act = act_ev;
    const size_t par = (size_t)t->lay.n_total * (4 * sizeof(float) + 1);
    uint64_t free_b = 0, total_b = 0;
    af_be(ctx)->memory(ctx, &free_b, &total_b);
    if ((uint64_t)(act + par) <= free_b) return AF_OK;
    const size_t ck = af_engine_bytes(t->model, &t->lay, t->max_mb_tokens, 1);
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[40] = "", full[1000];
    if (!o->checkpointing && ck + par <= free_b) {
        char b7[32];
        snprintf(b6, sizeof b6, " (it fits: activations %s)", af_fmt_bytes(b7, sizeof b7, ck));
    }
    snprintf(full, sizeof full,
             "training needs about %s on device %s (%s): activations of %lld tokens per micro-batch %s, parameters, "
             "gradients and AdamW state %s; the device has %s free of %s after the model's weights. What would fit: "
             "fewer tokens per micro-batch (--batch, --max-seq-len)%s%s, or --device cpu",
             af_fmt_bytes(b1, sizeof b1, act + par), af_ctx_device(ctx), ctx->dev->info.name, (long long)t->max_mb_tokens,
             af_fmt_bytes(b2, sizeof b2, act), af_fmt_bytes(b3, sizeof b3, par), af_fmt_bytes(b4, sizeof b4, free_b),
             af_fmt_bytes(b5, sizeof b5, total_b), o->checkpointing ? "" : ", --checkpointing", b6);
    if (!af_ctx_falls_back(ctx, AF_ERR_NOMEM)) return af_fail(AF_ERR_NOMEM, "%s", full);
    say(t, "warning: %s; --device %s: training on the CPU\n", full, "auto");
    return switch_ctx_to_cpu(t);
}

/* The loop's optimizer replaced by one on the CPU (t->ctx switched first): the old one is freed. */
static af_status new_cpu_optimizer(struct af_tr_loop *L) {
    af_lora_trainer *old = L->lt;
    L->lt = NULL;
    af_status st = switch_ctx_to_cpu(L->t);
    if (st == AF_OK) st = af_tr_new_optimizer(L->t, L);
    if (st != AF_OK) {
        af_lora_trainer_free(L->lt);
        L->lt = old;
        return st;
    }
    af_lora_trainer_free(old);
    return AF_OK;
}

/* The device can no longer be read: the CPU continues from the last good checkpoint (or from the
 * start), rewinding the run's counters and the metrics log to it. */
static af_status resume_on_cpu(struct af_tr_loop *L) {
    af_trainer *t = L->t;
    AF_TRY(new_cpu_optimizer(L));
    const int64_t n = t->lay.n_total;
    af_run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.best = rs.last_val_acc = rs.last_val_f1 = NAN;
    if (L->good_ckpt[0]) {
        AF_TRY(af_tr_load_state(t, L->good_ckpt, L->hP, L->hM, L->hV, &rs));
        AF_TRY(af_lora_trainer_upload_state(L->lt, L->hP, L->hM, L->hV));
    }
    AF_TRY(af_lora_trainer_set_optim_state(L->lt, NULL, NULL, &rs.adam_t, &rs.step));
    (void)n;
    if (L->writer) AF_TRY(af_tr_truncate_metrics(t->out_dir, rs.step));
    rs.elapsed = L->rs.elapsed;
    L->rs = rs;
    L->perm_epoch = -1; /* the epoch's order and packing are made again */
    return AF_OK;
}

af_status af_tr_device_failed(struct af_tr_loop *L, af_status st, const char *during) {
    af_trainer *t = L->t;
    const af_ctx *ctx = t->ctx;
    if (st != AF_ERR_DEVICE || af_ctx_on_cpu(ctx) || L->dist) return st;
    char msg[700], when[64];
    snprintf(msg, sizeof msg, "%s", af_last_error());
    if (during) snprintf(when, sizeof when, "%s after step %lld", during, (long long)L->rs.step);
    else snprintf(when, sizeof when, "step %lld", (long long)L->rs.step + 1);
    const char *ck = L->good_ckpt[0] ? L->good_ckpt : NULL;
    if (!af_ctx_falls_back(ctx, st)) {
        if (ck)
            return af_fail(AF_ERR_DEVICE, "%s: %s. The last good checkpoint is %s: continue it on the CPU with "
                                          "--resume %s --device cpu", when, msg, ck, ck);
        return af_fail(AF_ERR_DEVICE, "%s: %s. No checkpoint was saved yet: run again with --device cpu (or "
                                      "--device auto to go on on the CPU by itself)", when, msg);
    }
    char where[1100];
    snprintf(where, sizeof where, "%s (%s)", msg, when);
    say(t, "warning: %s; --device auto: going on on the CPU from %s\n", where,
        ck ? ck : "the start (no checkpoint yet; the same bits as a CPU run)");
    return resume_on_cpu(L);
}

af_status af_tr_device_step(struct af_tr_loop *L, af_tr_step *S, af_status st) {
    af_trainer *t = L->t;
    const af_ctx *ctx = t->ctx;
    if (af_ctx_on_cpu(ctx) || L->dist) return st;
    const long long step = (long long)L->rs.step + 1;
    char msg[700];
    if (st == AF_ERR_DEVICE) {
        AF_TRY(af_tr_device_failed(L, st, NULL));
        return af_tr_take_step(L, S);
    }
    if (st != AF_OK || S->finite) return st;
    /* a non-finite step on the device: the same step on the CPU, from the same state */
    char where[224];
    snprintf(where, sizeof where, "%s", L->nf_where);
    const int64_t g = L->rs.step, adam_t = L->rs.adam_t;
    AF_TRY(af_lora_trainer_download_state(L->lt, L->hP, L->hM, L->hV));
    af_lora_trainer *dev_lt = L->lt;
    af_ctx *dev_ctx = t->ctx, *keep_prev = t->ctx_dev;
    af_lora_trainer_view dv;
    af_lora_trainer_get_view(dev_lt, &dv);
    t->ctx_dev = NULL;
    af_ctx *cpu = NULL;
    af_status s2 = af_ctx_new_cpu(dev_ctx, 0, &cpu);
    af_tr_step C;
    if (s2 == AF_OK) {
        t->ctx = cpu;
        L->lt = NULL;
        s2 = af_tr_new_optimizer(t, L);
        if (s2 == AF_OK) s2 = af_lora_trainer_upload_state(L->lt, L->hP, L->hM, L->hV);
        if (s2 == AF_OK) s2 = af_lora_trainer_set_optim_state(L->lt, NULL, NULL, &adam_t, &g);
        if (s2 == AF_OK) s2 = af_tr_take_step(L, &C);
    }
    if (s2 != AF_OK || !C.finite) { /* back to the device: a real non-finite step (or no CPU to ask) */
        af_lora_trainer_free(L->lt);
        L->lt = dev_lt;
        af_ctx_free(cpu);
        t->ctx = dev_ctx;
        t->ctx_dev = keep_prev;
        L->rs.adam_t = adam_t;
        snprintf(L->nf_where, sizeof L->nf_where, "%s", where);
        af_lora_trainer_view v;
        af_lora_trainer_get_view(L->lt, &v);
        L->P = v.P;
        L->eng = v.eng;
        return s2;
    }
    snprintf(msg, sizeof msg,
             "step %lld: device %s (%s) computed non-finite values (first in %s) where the CPU computes a finite step "
             "(loss %.6g)",
             step, af_ctx_device(dev_ctx), dev_ctx->dev->info.name, where, C.loss);
    if (!af_ctx_falls_back(dev_ctx, AF_ERR_DEVICE)) { /* non-finite values: the device failed */
        af_lora_trainer_free(L->lt);
        L->lt = dev_lt;
        L->P = dv.P;
        L->eng = dv.eng;
        af_ctx_free(cpu);
        t->ctx = dev_ctx;
        t->ctx_dev = keep_prev;
        return af_fail(AF_ERR_DEVICE, "%s; the device is not to be trusted: run with --device cpu (or --device auto "
                                      "to go on on the CPU by itself)", msg);
    }
    say(t, "warning: %s; --device %s: going on on the CPU\n", msg, "auto");
    af_lora_trainer_free(dev_lt);
    af_ctx_free(keep_prev);
    t->ctx_dev = dev_ctx;
    *S = C;
    return AF_OK;
}
