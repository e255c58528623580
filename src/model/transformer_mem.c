/*
 * transformer_mem.c — the layer walk's memory (transformer.h): the activations a training or
 * inference walk keeps per layer (af_tf_carve_acts) and the scratch one layer's forward or backward
 * reuses (af_tf_carve_scratch), carved from one arena for the largest layer (gemma4's global layers
 * and double-width FFNs included); which layer's KV cache a layer reads (KV sharing).
 */
#include "model/transformer.h"

#include "core/core.h"

#include <stdint.h>
#include <string.h>

#define MIN_ROWS AF_TF_MIN_ROWS

/* The largest sizes over the layers (the buffers are carved for those); maxd: the widest row of
 * any product input or output (the per-layer-input projection's n_layers x P included). */
static af_tf_dims max_dims(const af_model *m) {
    af_tf_dims d;
    d.H = m->cfg.hidden_size;
    d.F = m->max_ff;
    d.nh = m->max_n_head;
    d.nkv = m->max_n_kv_head;
    d.hd = m->max_head_dim;
    d.qd = m->max_qd;
    d.kvd = m->max_kvd;
    d.P = m->desc.ple_dim;
    d.maxd = d.H > d.qd ? d.H : d.qd;
    if (d.F > d.maxd) d.maxd = d.F;
    if (d.P > 0 && d.P * m->cfg.num_hidden_layers > d.maxd) d.maxd = d.P * m->cfg.num_hidden_layers; /* PLE projection */
    return d;
}

float *af_tf_kv_layer(const af_model *m, float *const *cache, int32_t l) { return cache[m->layers[l].kv_src]; }

int af_tf_kv_shared_src(const af_model *m, int32_t l) {
    for (int32_t j = l + 1; j < m->cfg.num_hidden_layers; j++)
        if (m->layers[j].kv_src == l) return 1;
    return 0;
}

void af_tf_carve_acts(af_carver *cv, af_tf_acts *S, const af_model *m, const af_param_layout *lay, int64_t cap,
                      af_tf_mode mode, int masks) {
    const af_tf_dims d = max_dims(m);
    const af_arch_desc *D = &m->desc;
    const int tr = mode == AF_TF_TRAIN;
    memset(S, 0, sizeof *S);
    S->rstd1 = tr ? af_carve(cv, cap) : NULL;
    S->q = af_carve(cv, cap * d.qd);
    S->k = af_carve(cv, cap * d.kvd);
    S->v = af_carve(cv, cap * d.kvd);
    S->attn = af_carve(cv, cap * d.qd);
    S->lse = tr ? af_carve(cv, cap * d.nh) : NULL;
    S->xmid = af_carve(cv, cap * d.H);
    S->rstd2 = tr ? af_carve(cv, cap) : NULL;
    S->gate = af_carve(cv, cap * d.F);
    S->up = af_carve(cv, cap * d.F);
    if (D->qk_norm) {
        S->qraw = af_carve(cv, cap * d.qd);
        S->rstdq = tr ? af_carve(cv, cap * d.nh) : NULL;
        S->kraw = af_carve(cv, cap * d.kvd);
        S->rstdk = tr ? af_carve(cv, cap * d.nkv) : NULL;
    }
    if (D->sandwich_norm) {
        S->oraw = af_carve(cv, cap * d.H);
        S->rstdpa = tr ? af_carve(cv, cap) : NULL;
        S->draw = af_carve(cv, cap * d.H);
        S->rstdpf = tr ? af_carve(cv, cap) : NULL;
    }
    if (D->v_norm) {
        S->vraw = af_carve(cv, cap * d.kvd);
        S->rstdv = tr ? af_carve(cv, cap * d.nkv) : NULL;
    }
    if (d.P > 0) {
        S->ple_g = af_carve(cv, cap * d.P);
        S->ple_raw = af_carve(cv, cap * d.H);
        S->rstdple = tr ? af_carve(cv, cap) : NULL;
    }
    if (!lay) return;
    float *xa_shared = tr ? NULL : af_carve(cv, cap * lay->lora.r); /* inference: nothing is kept */
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        if (!(lay->lora.targets & (1u << p))) continue;
        int64_t in_max = 0; /* the widest input of projection p over the layers */
        for (int32_t l = 0; l < lay->n_layers; l++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->in > in_max) in_max = s->in;
        }
        S->xa[p] = tr ? af_carve(cv, cap * lay->lora.r) : xa_shared;
        if (tr && masks) S->mask[p] = af_carve(cv, cap * in_max);
        if (lay->lora.use_dora) {
            int64_t out_max = 0;
            for (int32_t l = 0; l < lay->n_layers; l++) {
                const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
                if (s->a_off >= 0 && s->out > out_max) out_max = s->out;
            }
            S->dora_y[p] = af_carve(cv, cap * out_max);
            S->dora_n[p] = af_carve(cv, out_max);
        }
    }
}

void af_tf_carve_scratch(af_carver *cv, af_tf_scratch *w, const af_model *m, const af_param_layout *lay,
                         int64_t cap, af_tf_mode mode, int masks) {
    const af_tf_dims d = max_dims(m);
    const af_arch_desc *D = &m->desc;
    memset(w, 0, sizeof *w);
    if (d.P > 0) {
        w->ple_in = af_carve(cv, cap * d.P);
        w->ple_act = af_carve(cv, cap * d.P);
        w->ple_tok = af_carve(cv, (int64_t)MIN_ROWS * m->cfg.num_hidden_layers * d.P);
        w->ple_idx = (int32_t *)af_carve(cv, cap * m->cfg.num_hidden_layers);
    }
    if (mode == AF_TF_INFER) {
        w->hs = af_carve(cv, cap * d.H);
        w->tH = af_carve(cv, cap * d.H);
        w->act = af_carve(cv, cap * d.F);
        return;
    }
    const int64_t r = lay ? lay->lora.r : 0;
    w->dX = af_carve(cv, cap * d.H);
    w->dT = af_carve(cv, cap * d.H);
    w->dh = af_carve(cv, cap * d.H);
    w->tH = af_carve(cv, cap * d.H);
    w->hs = af_carve(cv, cap * d.H);
    w->dattn = af_carve(cv, cap * d.qd);
    w->dq = af_carve(cv, cap * d.qd);
    w->dk = af_carve(cv, cap * d.kvd);
    w->dv = af_carve(cv, cap * d.kvd);
    w->dqr = D->qk_norm ? af_carve(cv, cap * d.qd) : NULL;
    w->dkr = D->qk_norm ? af_carve(cv, cap * d.kvd) : NULL;
    w->dvr = D->v_norm ? af_carve(cv, cap * d.kvd) : NULL;
    if (d.P > 0) {
        w->ple_dact = af_carve(cv, cap * d.P);
        w->ple_dg = af_carve(cv, cap * d.P);
    }
    w->act = af_carve(cv, cap * d.F);
    w->dact = af_carve(cv, cap * d.F);
    w->dgate = af_carve(cv, cap * d.F);
    w->dup = af_carve(cv, cap * d.F);
    w->ltmp = af_carve(cv, cap * (r + (masks ? d.maxd : 0)));
    w->padx = af_carve(cv, MIN_ROWS * d.maxd);
    w->pady = af_carve(cv, MIN_ROWS * d.maxd);
    if (lay && lay->init_P) {
        w->xa0 = af_carve(cv, cap * r);
        w->g0 = af_carve(cv, 2 * r * d.maxd);
    }
    if (lay && lay->lora.use_dora) {
        w->dora_a = af_carve(cv, cap * d.maxd);
        w->dora_b = af_carve(cv, cap * d.maxd);
        w->dora_c = af_carve(cv, cap * d.maxd);
    }
}
