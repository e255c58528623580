/*
 * engine_probe.c — where a training forward first produces a non-finite value
 * (engine.h af_engine_locate_nonfinite): the layer walk calls engine_probe after every stage.
 */
#include "train/engine_internal.h"

#include "kernels/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* When no stage was named yet and x [n] (device) holds a non-finite value, name this one:
 * "model.layers.L.<what><what2>" (l >= 0) or "<what><what2>". */
void engine_probe(void *ctx, const float *x, int64_t n, int32_t l, const char *what, const char *what2) {
    af_engine *e = ctx;
    if (!e->probe || e->probe_at[0]) return;
    if (af_be(e->ctx)->count_nonfinite(e->ctx, x, n) != 0) { /* -1: a device error, reported by the caller */
        if (l >= 0) snprintf(e->probe_at, sizeof e->probe_at, "model.layers.%d.%s%s", (int)l, what, what2);
        else snprintf(e->probe_at, sizeof e->probe_at, "%s%s", what, what2);
    }
}

af_status af_engine_locate_nonfinite(af_engine *e, const float *P, const af_batch *b, const af_step_opts *o,
                                     char *where, size_t cap) {
    if (!e || !P || !b || !o || !where || !cap) return af_fail(AF_ERR_INVALID_ARG, "engine probe: NULL argument");
    where[0] = 0;
    AF_TRY(engine_check_batch(e, b, 0));
    AF_TRY(engine_reserve(e, b->n_tok, 1));
    const int64_t H = e->m->cfg.hidden_size;
    e->probe = 1;
    e->probe_at[0] = 0;
    af_tf_run R = engine_run(e, P, b->seq_start, b->n_samples, b->n_tok, o->train && e->lay->lora.dropout > 0,
                             o->dropout_seed);
    af_status st;
    if (b->targets) { /* causal LM: the layers, then the final norm (the head loss follows it) */
        st = engine_forward_all(e, &R, b, 0, 0, o->pooling);
        if (st == AF_OK) {
            af_tf_final_norm(e->ctx, e->m, e->hN, e->rstdN, engine_xs_at(e, e->m->cfg.num_hidden_layers, b->n_tok),
                             b->n_tok);
            engine_probe(e, e->hN, b->n_tok * H, -1, "model.norm output", "");
        }
    } else
        st = engine_forward_all(e, &R, b, 0, 1, o->pooling);
    e->probe = 0;
    snprintf(where, cap, "%s", e->probe_at);
    return st == AF_OK ? af_device_status(e->ctx->dev) : st;
}
