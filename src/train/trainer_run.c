/* trainer_run.c — the training loop: steps, when to evaluate, best/early stopping, checkpoints,
 * resume, progress and the metrics log (see trainer.h); one evaluation is in trainer_eval.c. One step's micro-batches are in trainer_step.c; the
 * optimizer step itself (accumulation, dropout seeds, clipping, AdamW, the non-finite skip and its
 * report) is the public trainer's (af_lora_trainer, api.c), driven through train/api_internal.h. */
#include "train/trainer_internal.h"
#include "train/run_lock.h"

#include "core/fsutil.h"
#include "train/dist.h"
#include "train/optim.h"

#include <cJSON.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

static double now(void) { return af_time_sec(); }

static double ema_shown(double v, int64_t n) { return n > 0 ? v / (1.0 - pow(AF_EMA_BETA, (double)n)) : NAN; }

static void fmt_time(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "?");
    else if (s < 60) snprintf(buf, cap, "%.0fs", s);
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void af_tr_end_live(loop *L) {
    FILE *lg = L->t->log;
    if (L->live && lg) fputc('\n', lg);
    L->live = 0;
}

static void progress(loop *L, double lr, double gn, int force) {
    af_trainer *t = L->t;
    FILE *lg = t->log;
    if (!lg) return;
    const af_run_state *rs = &L->rs;
    if (!L->tty && !force && rs->step % L->log_every != 0) return;
    double el = now() - L->t0;
    double sps = el > 0 ? (double)L->session_samples / el : 0;
    double eta = L->session_steps > 0 ? el / (double)L->session_steps * (double)(t->total - rs->step) : NAN;
    char e[32];
    fmt_time(eta, e, sizeof e);
    if (t->pref) { /* TRL's names: the loss, rewards/accuracies (EMA), the last step's rewards/margins */
        fprintf(lg, "%sepoch %.2f | step %lld/%lld | loss %.4f | rewards/acc %.3f | margin %.3f | lr %.2e | "
                    "grad-norm %.3g | %.1f pairs/s | ETA %s%s",
                L->tty ? "\r\033[K" : "", (double)rs->step / (double)t->spe, (long long)rs->step, (long long)t->total,
                ema_shown(rs->ema_loss, rs->ema_n), ema_shown(rs->ema_acc, rs->ema_n), L->pm.reward_margin, lr, gn, sps,
                e, L->tty ? "" : "\n");
        fflush(lg);
        L->live = L->tty;
        return;
    }
    if (t->lm) {
        const double l = ema_shown(rs->ema_loss, rs->ema_n);
        fprintf(lg, "%sepoch %.2f | step %lld/%lld | loss %.4f | ppl %.4g | token-acc %.3f | lr %.2e | grad-norm %.3g | "
                    "%.0f tokens/s | ETA %s%s",
                L->tty ? "\r\033[K" : "", (double)rs->step / (double)t->spe, (long long)rs->step, (long long)t->total, l,
                exp(l), ema_shown(rs->ema_acc, rs->ema_n), lr, gn, el > 0 ? (double)L->session_tokens / el : 0, e,
                L->tty ? "" : "\n");
        fflush(lg);
        L->live = L->tty;
        return;
    }
    fprintf(lg, "%sepoch %.2f | step %lld/%lld | loss %.4f | acc %.3f | lr %.2e | grad-norm %.3g | %.1f samples/s | ETA %s%s",
            L->tty ? "\r\033[K" : "", (double)rs->step / (double)t->spe, (long long)rs->step, (long long)t->total,
            ema_shown(rs->ema_loss, rs->ema_n), ema_shown(rs->ema_acc, rs->ema_n), lr, gn, sps, e,
            L->tty ? "" : "\n");
    fflush(lg);
    L->live = L->tty;
}

void af_tr_log_line(loop *L, const char *s) {
    if (!L->mf) return;
    errno = 0;
    if ((fputs(s, L->mf) < 0 || fputc('\n', L->mf) == EOF || fflush(L->mf) != 0) && !L->mf_errno)
        L->mf_errno = errno ? errno : EIO;
}

/* OUT/<name> (af_tr_save_dir) from host copies of the trainer's parameters (and, with `state`, its
 * AdamW moments), read back from the device just now. */
static af_status save_dir(loop *L, const char *name, int state, const af_run_state *rs, const char *selected_by) {
    AF_TRY(af_lora_trainer_download_state(L->lt, L->hP, state ? L->hM : NULL, state ? L->hV : NULL));
    return af_tr_save_dir(L->t, name, L->hP, state ? L->hM : NULL, state ? L->hV : NULL, rs, selected_by);
}

static af_status save_checkpoint(loop *L) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)L->rs.step);
    af_run_state rs = L->rs;
    rs.elapsed += now() - L->t0; /* total training seconds so far */
    if (L->writer) { /* the other ranks of a data-parallel run only keep the name */
        af_status st = save_dir(L, name, 1, &rs, NULL);
        if (st != AF_OK) return st;
    }
    snprintf(L->last_ckpt, sizeof L->last_ckpt, "%s/%s", L->t->out_dir, name);
    if (L->rs.nonfinite_run == 0) snprintf(L->good_ckpt, sizeof L->good_ckpt, "%s", L->last_ckpt);
    if (L->writer) af_tr_rotate(L->t);
    return AF_OK;
}

static void free_loop(loop *L) {
    free(L->perm), free(L->logits), free(L->vprobs), free(L->bin_idx), free(L->bin_off);
    free(L->ref_tc), free(L->ref_tr), free(L->ref_vc), free(L->ref_vr), free(L->pidx), free(L->prc), free(L->prr);
    af_batcher_free(L->bt_val);
    free(L->rows), free(L->gsum), free(L->counts);
    free(L->hP), free(L->hM), free(L->hV);
    af_lora_trainer_free(L->lt);
    af_batcher_free(L->bt);
    if (L->mf) fclose(L->mf);
}

/* The public trainer that takes the steps, on t's layout (handed over, not built again), options
 * and class weights; L's views of its buffers and engine. */
af_status af_tr_new_optimizer(const af_trainer *t, loop *L) {
    const af_trainer_opts *o = t->o;
    const af_param_layout *lay = &t->lay;
    af_lora_trainer_opts lo;
    af_lora_trainer_opts_defaults(&lo);
    lo.r = lay->lora.r;
    lo.lora_alpha = lay->lora.alpha;
    lo.lora_dropout = lay->lora.dropout;
    lo.use_rslora = lay->lora.use_rslora;
    lo.targets = o->targets;
    lo.seed = o->seed;
    lo.num_classes = lay->num_classes;
    lo.pooling = (af_head_pooling)o->pooling;
    lo.head_bias = o->head_bias;
    lo.checkpointing = o->checkpointing;
    lo.lr = (float)o->lr;
    lo.weight_decay = (float)o->weight_decay;
    lo.loraplus_lr_ratio = (float)o->loraplus_lr_ratio;
    lo.init_lora_weights = o->init_lora_weights;
    lo.steps_per_epoch = t->spe; /* micro-batches numbered within the epoch (af_lora_trainer_micro_id) */
    lo.grad_accum = o->grad_accum;
    const af_lora_trainer_ext ext = {0, 0, o->max_grad_norm, t->ctx, lay}; /* the run's layout, as built */
    AF_TRY(af_lora_trainer_new_ext(t->model, &lo, &ext, &L->lt));
    if (t->class_w) AF_TRY(af_lora_trainer_set_class_weights(L->lt, t->class_w));
    af_lora_trainer_set_control(L->lt, o->cancel); /* every layer of every step and evaluation */
    af_lora_trainer_view v;
    af_lora_trainer_get_view(L->lt, &v);
    L->P = v.P;
    L->eng = v.eng;
    if (o->prefix_cache_mb > 0) { /* layers below --lora-layers: run once per sample */
        size_t cb = (size_t)o->prefix_cache_mb << 20;
        if (t->mem_ram > t->mem_need && cb > (t->mem_ram - t->mem_need) / 2) cb = (t->mem_ram - t->mem_need) / 2;
        AF_TRY(af_engine_set_prefix_cache(L->eng, cb));
    }
    if (L->hP) return AF_OK; /* a new optimizer of a running loop (trainer_device.c) */
    const size_t n = (size_t)(lay->n_total ? lay->n_total : 1);
    L->hP = af_malloc(sizeof(float) * n);
    L->hM = af_malloc(sizeof(float) * n);
    L->hV = af_malloc(sizeof(float) * n);
    if (!L->hP || !L->hM || !L->hV) return af_fail(AF_ERR_NOMEM, "trainer: out of memory (%zu parameters)", n);
    return AF_OK;
}

af_status af_tr_take_step(loop *L, af_tr_step *S) {
    S->finite = 0;
    S->loss = NAN, S->acc = 0, S->gn = NAN, S->lr = 0;
    S->n_step = S->n_tok = 0;
    if (L->t->pref) return af_tr_train_step_pref(L, &S->finite, &S->loss, &S->acc, &S->gn, &S->lr, &S->n_step, &S->n_tok);
    return L->t->lm ? af_tr_train_step_lm(L, &S->finite, &S->loss, &S->acc, &S->gn, &S->lr, &S->n_step, &S->n_tok)
                    : af_tr_train_step(L, &S->finite, &S->loss, &S->acc, &S->gn, &S->lr, &S->n_step);
}

/* The closing line of the log: where the run stopped, or what it gave and where. */
static void log_summary(const loop *L, af_status st, const af_train_result *res) {
    const af_trainer *t = L->t;
    char tb[32];
    fmt_time(res->seconds, tb, sizeof tb);
    if (res->stop == AF_STOP_INTERRUPTED) {
        fprintf(t->log, "stopped at step %lld of %lld; checkpoint %s (continue with --resume %s)\n",
                (long long)L->rs.step, (long long)t->total, L->last_ckpt, L->last_ckpt);
        return;
    }
    if (st != AF_OK) return;
    fprintf(t->log, "done: %lld steps in %s%s", (long long)L->rs.step, tb,
            res->stop == AF_STOP_BUDGET ? " (stopped at the time budget)"
            : L->plateau               ? " (early stopping: the plateau's cool-down)"
            : res->stop == AF_STOP_EARLY ? " (early stopping)"
                                         : "");
    if (res->best_step > 0 && t->pref)
        fprintf(t->log, "; best eval loss %.4f at step %lld -> %s/best", res->best_eval_loss, (long long)res->best_step,
                t->out_dir);
    else if (res->best_step > 0 && t->lm)
        fprintf(t->log, "; best eval loss %.4f (perplexity %.4g) at step %lld -> %s/best", res->best_eval_loss,
                exp(res->best_eval_loss), (long long)res->best_step, t->out_dir);
    else if (res->best_step > 0)
        fprintf(t->log, "; best val macro-F1 %.4f at step %lld -> %s/best", res->best_macro_f1, (long long)res->best_step,
                t->out_dir);
    else fprintf(t->log, "; %s: %s/best is the last step",
                 af_tr_no_eval(t) ? "no evaluation (the time budget)" : "no validation data", t->out_dir);
    fprintf(t->log, "; final adapter %s/final; log %s/metrics.jsonl\n", t->out_dir, t->out_dir);
    if (L->rs.n_nonfinite) fprintf(t->log, "note: %lld non-finite steps were skipped\n", (long long)L->rs.n_nonfinite);
}

/* FNV-1a over `n` bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* What every rank of a data-parallel run must have the same: the training samples (tokens, labels,
 * loss targets), the step plan, the parameter count and the frozen products' precision. */
static uint64_t run_fingerprint(const af_trainer *t) {
    const af_dataset *d = t->train;
    uint64_t h = 0xcbf29ce484222325ull;
    const int64_t plan[9] = {d->n, t->total, t->spe, t->n_micro, t->lay.n_total, t->o->batch, t->o->grad_accum,
                             (int64_t)t->o->seed, (int64_t)t->ctx->bf16};
    h = fnv(h, plan, sizeof plan);
    h = fnv(h, d->tok_off, sizeof(int64_t) * ((size_t)d->n + 1));
    h = fnv(h, d->tokens, sizeof(int32_t) * (size_t)d->tok_off[d->n]);
    if (d->labels) h = fnv(h, d->labels, sizeof(int32_t) * (size_t)d->n);
    if (d->multi_hot) h = fnv(h, d->multi_hot, (size_t)d->n * (size_t)d->num_classes);
    if (d->target_mask) h = fnv(h, d->target_mask, (size_t)d->tok_off[d->n]);
    return h;
}

/* Data parallelism, before the first step: every rank agrees that setup went fine everywhere (a
 * rank that failed names itself) and that its data and plan equal rank 0's. */
static af_status dist_setup_agree(loop *L, af_status st) {
    char msg[768] = "";
    if (st != AF_OK) snprintf(msg, sizeof msg, "%s", af_last_error());
    int32_t bad = -1;
    AF_TRY(af_dist_agree(st != AF_OK, &bad, &L->comm));
    if (st != AF_OK) return af_fail(st, "%s", msg);
    if (bad >= 0)
        return af_fail(AF_ERR_IO, "rank %d failed before its first step (its message is on its own output); stopping "
                                  "every rank", (int)bad);
    const uint64_t mine = run_fingerprint(L->t);
    int64_t fp = (int64_t)mine;
    AF_TRY(af_dist_bcast_i64(&fp, 1, &L->comm));
    const int differs = (uint64_t)fp != mine;
    AF_TRY(af_dist_agree(differs, &bad, &L->comm));
    if (bad >= 0)
        return af_fail(AF_ERR_INVALID_ARG, "rank %d has other training data or settings than rank 0 (the samples, "
                                           "their tokens, the step plan or the frozen products' precision differ); "
                                           "every rank must read the same "
                                           "data with the same settings", (int)bad);
    return AF_OK;
}

/* The loop's buffers: data order, logits, validation probabilities, packed bins, the step's
 * per-micro-batch gradient rows and their sum (one process too). */
static af_status loop_alloc(loop *L) {
    const af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const int64_t n = t->lay.n_total;
    const int32_t C = t->num_classes;
    L->perm = af_malloc(sizeof(int32_t) * (size_t)t->train->n);
    if (t->lm) { /* no logits kept: the LM head loss works a chunk at a time */
        L->logits = af_malloc(sizeof(float));
        L->vprobs = t->val ? af_malloc(sizeof(float)) : NULL;
        if (t->packing) {
            L->bin_idx = af_malloc(sizeof(int32_t) * (size_t)t->train->n);
            L->bin_off = af_malloc(sizeof(int32_t) * (size_t)(t->train->n + 1));
        }
    } else {
        L->logits = af_malloc(sizeof(float) * (size_t)o->batch * (size_t)C);
        L->vprobs = t->val ? af_malloc(sizeof(float) * (size_t)t->val->n * (size_t)C) : NULL;
    }
    if (t->pref) { /* a micro-batch's pairs: sample indices and reference log-probabilities */
        const size_t cap = (size_t)(o->batch > AF_PREF_MAX_EVAL_BATCH ? o->batch : AF_PREF_MAX_EVAL_BATCH);
        L->pidx = af_malloc(sizeof(int32_t) * 2 * cap);
        L->prc = af_malloc(sizeof(double) * cap);
        L->prr = af_malloc(sizeof(double) * cap);
        if (!L->pidx || !L->prc || !L->prr) return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    }
    L->row = n + DIST_STAT_F;
    L->rows = af_malloc(sizeof(float) * (size_t)L->row * (size_t)o->grad_accum);
    L->gsum = af_malloc(sizeof(float) * (size_t)n);
    L->counts = af_malloc(sizeof(int32_t) * (size_t)L->world);
    if (!L->perm || !L->logits || (t->val && !L->vprobs) || (t->packing && (!L->bin_idx || !L->bin_off)) || !L->rows ||
        !L->gsum || !L->counts)
        return af_fail(AF_ERR_NOMEM, "trainer: out of memory (%lld parameters)", (long long)n);
    return AF_OK;
}

/* The log's header: resume point, length, output, data parallelism. */
static void log_start(const loop *L, const char *ckpt) {
    const af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    if (!t->log) return;
    if (ckpt) fprintf(t->log, "resuming from %s at step %lld of %lld\n", ckpt, (long long)L->rs.step, (long long)t->total);
    fprintf(t->log, "training: %lld steps, output %s\n", (long long)t->total, t->out_dir);
    if (L->dist) {
        const int32_t A = o->grad_accum;
        fprintf(t->log, "data parallel: %d process%s (%s); effective batch %d = %d per micro-batch x %d "
                        "micro-batches per step (%.3g per process x %d processes); gradients gathered per "
                        "micro-batch and summed in micro-batch order (the same bits for any process count)\n",
                (int)L->world, L->world > 1 ? "es" : "", af_dist_library(), (int)(o->batch * A), (int)o->batch, (int)A,
                (double)A / (double)L->world, (int)L->world);
        if (A < L->world)
            fprintf(t->log, "warning: --grad-accum %d < %d processes: %d process%s idle in every step (give "
                            "--grad-accum a multiple of the process count)\n",
                    (int)A, (int)L->world, (int)(L->world - A), L->world - A > 1 ? "es are" : " is");
    }
    fflush(t->log);
}

/* Everything before the first step: the device's memory, the optimizer on the run's layout, the
 * buffers, the resumed state (ckpt, or NULL), the output directory, run.json, metrics.jsonl, the
 * ranks' agreement (also on a failure so far, st0); then the log's header. *owned_out: the output
 * directory derived from the checkpoint (caller frees); *run_lock: the directory's lock (run_lock.h;
 * the caller releases it with af_run_unlock, also after an error). */
static af_status loop_start(loop *L, af_status st0, const char *ckpt, char **owned_out, int *run_lock) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    af_status st = st0;
    if (st == AF_OK) st = af_tr_device_fit(t); /* the device's memory, before anything is allocated on it */
    if (st == AF_OK) st = af_tr_new_optimizer(t, L);
    if (st == AF_OK) st = loop_alloc(L);
    if (st == AF_OK && ckpt) { /* parameters, AdamW state and the counters that key the dropout masks */
        st = af_tr_load_state(t, ckpt, L->hP, L->hM, L->hV, &L->rs); /* verified and checked before anything is written */
        if (st == AF_OK) st = af_lora_trainer_upload_state(L->lt, L->hP, L->hM, L->hV);
        if (st == AF_OK) st = af_lora_trainer_set_optim_state(L->lt, NULL, NULL, &L->rs.adam_t, &L->rs.step);
    }
    if (st == AF_OK) st = af_tr_prepare_output(t, ckpt, L->writer, owned_out, run_lock);
    if (st == AF_OK && ckpt && L->writer) st = af_tr_truncate_metrics(t->out_dir, L->rs.step);
    if (st == AF_OK) st = af_batcher_new(t->train, NULL, t->train->n, o->batch, &L->bt);
    if (st == AF_OK && t->pref) st = af_tr_pref_setup(L);
    if (st == AF_OK && L->writer) st = af_tr_write_run_json(t);
    if (st == AF_OK && L->writer) {
        char *mp = af_path_join(t->out_dir, "metrics.jsonl");
        L->mf = mp ? fopen(mp, "a") : NULL;
        if (!L->mf) st = af_fail(AF_ERR_IO, "%s/metrics.jsonl: cannot open for writing", t->out_dir);
        free(mp);
    }
    if (L->dist) st = dist_setup_agree(L, st);
    if (st != AF_OK) return st;
    if (ckpt) snprintf(L->last_ckpt, sizeof L->last_ckpt, "%s", ckpt);
    if (ckpt) snprintf(L->good_ckpt, sizeof L->good_ckpt, "%s", ckpt);
    /* a checkpoint saved after the plateau's decision: the cool-down goes on to the recorded end */
    L->plateau = ckpt && o->schedule == AF_SCHED_WSD && o->patience > 0 && L->rs.bad_evals >= o->patience;
    L->tty = o->progress_tty >= 0 ? o->progress_tty : (t->log && isatty(fileno(t->log)));
    L->log_every = o->log_every > 0 ? o->log_every : (t->total >= 20 ? t->total / 20 : 1);
    log_start(L, ckpt);
    L->t0 = now();
    return AF_OK;
}

/* A step's line of metrics.jsonl (TRL's names for a causal LM: loss, mean_token_accuracy,
 * num_tokens, grad_norm, learning_rate). */
static void log_step(loop *L, const af_tr_step *S) {
    const af_trainer *t = L->t;
    const af_run_state *rs = &L->rs;
    char dl[256] = "", line[1024]; /* data parallelism: this step's compute and communication (rank 0's view) */
    if (L->dist)
        snprintf(dl, sizeof dl, ",\"world_size\":%d,\"compute_s\":%.6f,\"wait_s\":%.6f,\"comm_s\":%.6f,"
                                "\"comm_bytes\":%lld,\"comm_bytes_all\":%lld",
                 (int)L->world, L->compute_s, L->wait.seconds, L->comm.seconds, (long long)(L->comm.bytes + L->wait.bytes),
                 (long long)L->comm_bytes_all);
    const double el = rs->elapsed + (now() - L->t0), dt = now() - L->t0, loss = S->loss, gn = S->gn;
    if (t->pref) {
        const af_pref_metrics *m = &L->pm;
        char nll[64] = "";
        if (t->po.type == AF_PREF_ORPO) snprintf(nll, sizeof nll, ",\"nll_loss\":%.9g", m->nll);
        snprintf(line, sizeof line,
                 "{\"type\":\"train\",\"step\":%lld,\"epoch\":%.6g,\"loss\":%.17g,\"rewards/chosen\":%.9g,"
                 "\"rewards/rejected\":%.9g,\"rewards/accuracies\":%.9g,\"rewards/margins\":%.9g,\"logps/chosen\":%.9g,"
                 "\"logps/rejected\":%.9g%s,\"num_tokens\":%lld,\"grad_norm\":%.9g,\"learning_rate\":%.9g,"
                 "\"pairs_per_s\":%.4g,\"elapsed\":%.3f%s%s}",
                 (long long)rs->step, (double)rs->step / (double)t->spe, isfinite(loss) ? loss : -1.0, m->reward_chosen,
                 m->reward_rejected, m->reward_accuracy, m->reward_margin, m->logp_chosen, m->logp_rejected, nll,
                 (long long)rs->tokens_seen, isfinite(gn) ? gn : -1.0, S->lr,
                 dt > 0 ? (double)L->session_samples / dt : 0.0, el, dl, S->finite ? "" : ",\"skipped\":true");
    } else if (t->lm)
        snprintf(line, sizeof line,
                 "{\"type\":\"train\",\"step\":%lld,\"epoch\":%.6g,\"loss\":%.17g,\"mean_token_accuracy\":%.9g,"
                 "\"num_tokens\":%lld,\"grad_norm\":%.9g,\"learning_rate\":%.9g,\"perplexity\":%.9g,"
                 "\"tokens_per_s\":%.4g,\"elapsed\":%.3f%s%s}",
                 (long long)rs->step, (double)rs->step / (double)t->spe, isfinite(loss) ? loss : -1.0, S->acc,
                 (long long)rs->tokens_seen, isfinite(gn) ? gn : -1.0, S->lr, isfinite(loss) ? exp(loss) : -1.0,
                 dt > 0 ? (double)L->session_tokens / dt : 0.0, el, dl, S->finite ? "" : ",\"skipped\":true");
    else
        snprintf(line, sizeof line,
                 "{\"type\":\"train\",\"step\":%lld,\"epoch\":%.6g,\"loss\":%.17g,\"acc\":%.9g,\"lr\":%.9g,"
                 "\"grad_norm\":%.9g,\"samples_per_s\":%.4g,\"elapsed\":%.3f%s%s}",
                 (long long)rs->step, (double)rs->step / (double)t->spe, isfinite(loss) ? loss : -1.0, S->acc, S->lr,
                 isfinite(gn) ? gn : -1.0, dt > 0 ? (double)L->session_samples / dt : 0.0, el, dl,
                 S->finite ? "" : ",\"skipped\":true");
    af_tr_log_line(L, line);
}

/* After optimizer step rs.step + 1: the counters, its metrics line, the EMAs or the non-finite
 * bookkeeping. Too many non-finite steps in a row: *stop AF_STOP_NONFINITE and AF_ERR_RANGE. */
static af_status record_step(loop *L, const af_tr_step *S, af_stop_reason *stop) {
    const af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    af_run_state *rs = &L->rs;
    rs->step++;
    rs->samples_seen += S->n_step;
    rs->tokens_seen += S->n_tok;
    L->session_steps++;
    L->session_samples += S->n_step;
    L->session_tokens += S->n_tok;
    log_step(L, S);
    if (S->finite) {
        rs->nonfinite_run = 0;
        L->nf_first[0] = 0;
        rs->ema_loss = AF_EMA_BETA * rs->ema_loss + (1 - AF_EMA_BETA) * S->loss;
        rs->ema_acc = AF_EMA_BETA * rs->ema_acc + (1 - AF_EMA_BETA) * S->acc;
        rs->ema_n++;
        return AF_OK;
    }
    rs->nonfinite_run++;
    rs->n_nonfinite++;
    if (rs->nonfinite_run == 1 || !L->nf_first[0])
        snprintf(L->nf_first, sizeof L->nf_first, "step %lld: %s", (long long)rs->step, L->nf_where);
    char line[1024];
    snprintf(line, sizeof line,
             "{\"type\":\"nonfinite\",\"step\":%lld,\"where\":\"%s\",\"loss\":\"%g\",\"grad_norm\":\"%g\","
             "\"consecutive\":%lld,\"skipped_total\":%lld}",
             (long long)rs->step, L->nf_where, S->loss, S->gn, (long long)rs->nonfinite_run, (long long)rs->n_nonfinite);
    af_tr_log_line(L, line);
    if (t->log) {
        af_tr_end_live(L);
        fprintf(t->log, "warn  step %lld: not finite in %s (loss %g, grad-norm %g): step skipped, parameters "
                        "unchanged (%lld in a row)\n",
                (long long)rs->step, L->nf_where, S->loss, S->gn, (long long)rs->nonfinite_run);
        fflush(t->log);
    }
    if (rs->nonfinite_run < (o->max_nonfinite > 0 ? o->max_nonfinite : 1)) return AF_OK;
    *stop = AF_STOP_NONFINITE;
    return af_fail(AF_ERR_RANGE,
                   "step %lld: loss or gradient not finite for %lld consecutive steps; stopped. First "
                   "non-finite value: %s. Last good checkpoint (saved after a finite step): %s. Try a lower --lr (now %g) or "
                   "--max-grad-norm 1",
                   (long long)rs->step, (long long)rs->nonfinite_run, L->nf_first,
                   L->good_ckpt[0] ? L->good_ckpt : "none (no checkpoint saved yet)", o->lr);
}

/* The time budget's bookkeeping (--time-budget): evaluation seconds so far and of the last one,
 * whether the length is still re-planned and at which step of this session next, and the clock
 * (and evaluation seconds) after the session's first step. */
typedef struct {
    double eval_total_s, eval_last_s;
    int replan_done;
    int64_t replan_at;
    double t1, eval_at_t1;
} budget_clock;

/* Time budget, after a step (one process only): re-plan the length of a fresh run after its first
 * steps and again each time the steps done double, until 80% of the planned length (the measured
 * speed settles after the first steps: the first step pays one-time costs and is left out of it;
 * one re-plan at step 3 of the lede set's run left 27 s of 192 unused,
 * bench/results/sft_ttq-lede-amd-epyc-zen4-2c.md);
 * 1 when the next step and the last evaluation would pass the deadline. */
static int budget_check(loop *L, budget_clock *B) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const af_run_state *rs = &L->rs;
    if (!(o->time_budget_min > 0) || L->dist || rs->step >= t->total) return 0;
    const double tn = now();
    if (L->session_steps == 1) B->t1 = tn, B->eval_at_t1 = B->eval_total_s;
    const double step_s = L->session_steps >= 2
                              ? (tn - B->t1 - (B->eval_total_s - B->eval_at_t1)) / (double)(L->session_steps - 1)
                              : (tn - L->t0 - B->eval_total_s) / (double)L->session_steps;
    const double ev = t->val ? (B->eval_last_s > 0 ? B->eval_last_s : step_s * af_tr_eval_steps(t)) : 0.0;
    const double reserve = 1.2 * ev + 3.0, left = af_tr_budget_left(t, tn, rs->elapsed);
    if (!B->replan_done && L->session_steps >= B->replan_at) {
        const int64_t was = t->total;
        B->replan_at *= 2;
        if (5 * rs->step >= 4 * t->total) B->replan_done = 1;
        else if (af_tr_budget_replan(t, rs->step, step_s, ev, left, reserve) != was && t->log) {
            af_tr_end_live(L);
            fprintf(t->log, "time budget: %.2f s per step measured; %lld steps instead of %lld fit the %g min "
                            "(%.0f s left)\n", step_s, (long long)t->total, (long long)was, o->time_budget_min, left);
        }
    }
    return rs->step < t->total && left < 1.5 * step_s + reserve;
}

/* The evaluation due after this step (the last one, every eval_every steps, or each epoch end) on
 * the writer: best/ when it improved, early stopping (*stop AF_STOP_EARLY). *rewound: a device
 * failure moved the run to the CPU from its last good checkpoint (the caller goes on with the loop). */
static af_status maybe_evaluate(loop *L, int last, int epoch_end, budget_clock *B, af_stop_reason *stop, int *evaluated,
                                int *rewound) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const af_run_state *rs = &L->rs;
    *evaluated = *rewound = 0;
    if (!L->writer || !t->val || af_tr_no_eval(t) ||
        !(last || (t->eval_every > 0 ? rs->step % t->eval_every == 0 : epoch_end)))
        return AF_OK;
    int improved = 0;
    const int64_t nval = af_dataset_size(t->val);
    if (o->progress) o->progress(o->progress_user, "eval", 0, nval);
    const double te = now();
    af_status st = af_tr_evaluate(L, &improved);
    if (st == AF_ERR_DEVICE && (st = af_tr_device_failed(L, st, "the evaluation")) == AF_OK) { /* on the CPU now */
        *rewound = 1;
        return AF_OK;
    }
    if (st == AF_ERR_CANCELLED) *stop = AF_STOP_INTERRUPTED;
    if (st != AF_OK) return st;
    if (o->progress) o->progress(o->progress_user, "eval", nval, nval);
    B->eval_last_s = now() - te;
    B->eval_total_s += B->eval_last_s;
    *evaluated = 1;
    if (improved) {
        st = save_dir(L, "best", 0, rs, t->lm ? "eval_loss" : "val_macro_f1");
        if (st == AF_ERR_DEVICE && (st = af_tr_device_failed(L, st, "saving best/")) == AF_OK) *rewound = 1;
        if (st != AF_OK || *rewound) return st;
    }
    if (o->patience > 0 && rs->bad_evals >= o->patience && !L->plateau) {
        const char *what = t->pref || t->lm ? "eval-loss" : "macro-F1";
        const int64_t was_total = t->total;
        char thr[48] = "";
        if (o->early_stopping_threshold > 0) snprintf(thr, sizeof thr, " above %.3g", o->early_stopping_threshold);
        if (o->schedule != AF_SCHED_WSD) {
            *stop = AF_STOP_EARLY;
            if (t->log)
                fprintf(t->log, "early stop: no %s improvement%s in %lld evaluations (best %.4f at step %lld)\n", what,
                        thr, (long long)rs->bad_evals, rs->best, (long long)rs->best_step);
        } else if (af_tr_plateau_replan(t, rs->step) != was_total) {
            L->plateau = 1; /* wsd: cool down from here, evaluate at the new end, stop */
            if (af_tr_write_run_json(t) != AF_OK && t->log) /* the new length; train_config.json has it too */
                fprintf(t->log, "warning: run.json not updated: %s\n", af_last_error());
            if (t->log)
                fprintf(t->log, "plateau: no %s improvement%s in %lld evaluations (best %.4f at step %lld): cool-down "
                                "to step %lld (lr linear to %g over %lld steps), then the last evaluation\n",
                        what, thr, (long long)rs->bad_evals, rs->best, (long long)rs->best_step, (long long)t->total,
                        o->lr_min, (long long)(t->total - rs->step));
        }
    }
    return AF_OK;
}

/* After a step's evaluation: why to stop (interrupt, budget; a data-parallel run takes rank 0's
 * decision and evaluation flag), then a checkpoint when due or stopping. *rewound as maybe_evaluate. */
static af_status decide_and_save(loop *L, int last, int budget_end, int epoch_end, int evaluated, af_stop_reason *stop,
                                 int *rewound) {
    const af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    const af_run_state *rs = &L->rs;
    *rewound = 0;
    const int interrupted = (o->interrupt && *o->interrupt) || (o->stop_after > 0 && rs->step >= o->stop_after);
    if (interrupted && *stop == AF_STOP_DONE && !last) *stop = AF_STOP_INTERRUPTED;
    if (budget_end && *stop == AF_STOP_DONE) *stop = AF_STOP_BUDGET;
    if (L->dist) { /* rank 0 evaluated and decides: every rank stops (and names checkpoints) alike */
        int64_t dec[3] = {(int64_t)*stop, evaluated, t->total}; /* the length: a plateau re-plans it */
        AF_TRY(af_dist_bcast_i64(dec, 3, NULL));
        *stop = (af_stop_reason)dec[0];
        evaluated = (int)dec[1];
        if (dec[2] != t->total) L->t->total = dec[2], L->plateau = 1;
    }
    const int save = o->save_every > 0 ? rs->step % o->save_every == 0 : (t->val ? evaluated : epoch_end);
    if (!(save || last || *stop != AF_STOP_DONE)) return AF_OK;
    af_tr_end_live(L);
    af_status st = save_checkpoint(L);
    if (st == AF_ERR_DEVICE && (st = af_tr_device_failed(L, st, "saving the checkpoint")) == AF_OK) *rewound = 1;
    return st;
}

/* The steps from rs.step to the end: step, record, budget, progress, evaluation, checkpoint. */
static af_status loop_steps(loop *L, int resumed, af_stop_reason *stop) {
    af_trainer *t = L->t;
    const af_trainer_opts *o = t->o;
    /* time budget (--time-budget): re-plan the length after the first steps of a fresh run (and as
       the steps done double), stop
       (evaluated, saved) when the next step and the last evaluation would pass the deadline */
    budget_clock B = {0, 0, resumed || !(o->time_budget_min > 0) || L->dist,
                      t->total / 20 > 20 ? 20 : t->total / 20 > 3 ? t->total / 20 : 3, 0, 0};
    af_status st = AF_OK;
    while (L->rs.step < t->total) {
        if (L->dist) {
            char sl[1200];
            snprintf(sl, sizeof sl, "step %lld of %lld; last good checkpoint: %s", (long long)L->rs.step + 1,
                     (long long)t->total, L->good_ckpt[0] ? L->good_ckpt : "none yet");
            af_dist_set_status(sl);
            memset(&L->comm, 0, sizeof L->comm);
            memset(&L->wait, 0, sizeof L->wait);
            L->comm_bytes_all = 0;
        }
        af_tr_step S;
        st = af_tr_device_step(L, &S, af_tr_take_step(L, &S)); /* a device failure: trainer_device.c */
        if (st == AF_ERR_CANCELLED) *stop = AF_STOP_INTERRUPTED;
        if (st != AF_OK) return st;
        st = record_step(L, &S, stop);
        if (st != AF_OK) return st;
        const int budget_end = budget_check(L, &B);
        const int last = L->rs.step == t->total || budget_end;
        progress(L, S.lr, S.gn, last);
        if (o->progress) o->progress(o->progress_user, "train", L->rs.step, t->total);
        const int epoch_end = L->rs.step % t->spe == 0;
        int evaluated = 0, rewound = 0;
        st = maybe_evaluate(L, last, epoch_end, &B, stop, &evaluated, &rewound);
        if (st != AF_OK) return st;
        if (rewound) continue;
        st = decide_and_save(L, last, budget_end, epoch_end, evaluated, stop, &rewound);
        if (st != AF_OK) return st;
        if (rewound) continue;
        if (*stop != AF_STOP_DONE) break;
    }
    af_tr_end_live(L);
    if (st == AF_OK && *stop == AF_STOP_DONE && L->plateau) *stop = AF_STOP_EARLY; /* ended by the cool-down */
    if (L->writer && (*stop == AF_STOP_DONE || *stop == AF_STOP_EARLY || *stop == AF_STOP_BUDGET)) {
        st = save_dir(L, "final", 0, &L->rs, "last_step");
        if (st == AF_OK && (!t->val || af_tr_no_eval(t))) st = save_dir(L, "best", 0, &L->rs, "last_step");
    }
    return st;
}

/* The result, the closing line of the log, curves.png. */
static af_status loop_finish(loop *L, af_status st, af_stop_reason stop, double t_start, af_train_result *res) {
    const af_trainer *t = L->t;
    if (st == AF_OK && L->mf_errno) /* no silent loss of the metrics log */
        st = af_fail(AF_ERR_IO, "%s/metrics.jsonl: write failed: %s", t->out_dir, strerror(L->mf_errno));
    af_tr_end_live(L);
    if (st != AF_OK && L->dist && L->world > 1) { /* name the rank, the step and the last good checkpoint */
        char msg[768];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        st = af_fail(st, "rank %d of %d, step %lld of %lld: %s; last good checkpoint: %s", (int)L->rank, (int)L->world,
                     (long long)L->rs.step + (stop == AF_STOP_DONE), (long long)t->total, msg,
                     L->good_ckpt[0] ? L->good_ckpt : "none (no checkpoint saved yet)");
    }
    res->stop = stop;
    res->steps_done = L->rs.step;
    res->total_steps = t->total;
    res->best_step = L->rs.best_step;
    res->best_macro_f1 = L->rs.best_step > 0 && !t->lm ? L->rs.best : NAN;
    res->last_val_accuracy = L->rs.last_val_acc;
    res->last_val_macro_f1 = t->lm ? NAN : L->rs.last_val_f1;
    res->best_eval_loss = L->rs.best_step > 0 && t->lm ? L->rs.best : NAN;
    res->last_eval_loss = t->lm ? L->rs.last_val_f1 : NAN;
    res->last_train_loss = ema_shown(L->rs.ema_loss, L->rs.ema_n);
    res->n_nonfinite = L->rs.n_nonfinite;
    res->seconds = now() - t_start;
    snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s", L->last_ckpt);
    if (t->log && L->mf) log_summary(L, st, res);
    if (L->mf && t->plot && (st == AF_OK || stop == AF_STOP_NONFINITE)) {
        fclose(L->mf);
        L->mf = NULL;
        af_tr_plot(t->out_dir, t->log);
    }
    return st;
}

af_status af_trainer_run(af_trainer *t, af_train_result *res) {
    if (!t) return af_fail(AF_ERR_INVALID_ARG, "trainer: NULL argument");
    af_train_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    res->best_macro_f1 = res->last_val_accuracy = res->last_val_macro_f1 = NAN;
    res->best_eval_loss = res->last_eval_loss = NAN;
    if (t->ran) return af_fail(AF_ERR_INVALID_ARG, "trainer: af_trainer_run may be called once");
    t->ran = 1;
    const af_trainer_opts *o = t->o;
    if (af_diag_has_error(&t->diags))
        return af_fail(AF_ERR_INVALID_ARG, "the configuration has errors (see the diagnostics); not training");
    if (t->mem_ram > 0 && t->mem_need > t->mem_ram)
        return af_fail(AF_ERR_NOMEM, "training needs about %.0f MiB but the limit is %.0f MiB (%s); %s",
                       (double)t->mem_need / 1048576.0, (double)t->mem_ram / 1048576.0, t->mem_what,
                       o->checkpointing ? "use a smaller --batch or --max-seq-len"
                                        : "use --checkpointing, or a smaller --batch or --max-seq-len");
    const double t_start = now();
    char *ckpt = NULL, *owned_out = NULL;
    int run_lock = -1; /* the output directory's lock (run_lock.h), held to the end */
    loop L;
    memset(&L, 0, sizeof L);
    L.t = t;
    L.dist = af_dist_on();
    L.rank = af_dist_rank();
    L.world = af_dist_size();
    L.writer = L.rank == 0;
    if (!L.writer) { /* one writer: the other ranks print nothing and write nothing */
        t->log = NULL;
        t->plot = 0;
    }
    L.perm_epoch = -1;
    L.rs.best = L.rs.last_val_acc = L.rs.last_val_f1 = NAN;
    af_stop_reason stop = AF_STOP_DONE;
    af_status st = o->resume ? af_trainer_find_checkpoint(o->resume, &ckpt) : AF_OK;
    st = loop_start(&L, st, ckpt, &owned_out, &run_lock);
    if (st == AF_OK) st = loop_steps(&L, ckpt != NULL, &stop);
    st = loop_finish(&L, st, stop, t_start, res);
    free_loop(&L);
    af_run_unlock(t->out_dir, run_lock);
    if (owned_out) t->out_dir = t->o->output_dir; /* the derived directory is freed below */
    free(owned_out);
    free(ckpt);
    return st;
}
