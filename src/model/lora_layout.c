/* lora_layout.c — the LoRA parameter layout of a model (af_param_layout_init*, lora/lora.h): the
 * model's layer count, hidden size and per-layer projection shapes handed to af_param_layout_build,
 * so that the LoRA code (lora/) does not depend on the model (model/ uses lora/, not the reverse). */
#include "lora/lora.h"

#include "afinar.h"
#include "kernels/quant.h"
#include "lora/dora.h"
#include "model/model.h"

static int model_proj_shape(const void *user, int32_t l, af_proj p, int64_t *in, int64_t *out) {
    return af_model_proj_shape((const af_model *)user, l, (int32_t)p, in, out);
}

af_status af_param_layout_init_layers(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                                      int32_t num_classes, int32_t layer_min, int32_t layer_end) {
    if (!model) return af_fail(AF_ERR_INVALID_ARG, "lora layout: NULL argument");
    const af_model_config *c = af_model_get_config(model);
    const af_layout_shapes sh = {c->num_hidden_layers, c->hidden_size, model, model_proj_shape};
    return af_param_layout_build(lay, &sh, cfg, num_classes, layer_min, layer_end);
}

af_status af_param_layout_init(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                               int32_t num_classes) {
    return af_param_layout_init_layers(lay, model, cfg, num_classes, 0, 0);
}

/* The frozen weight of projection p of layer l (NULL when the layer has none). */
static const af_weight *proj_weight(const af_model *m, int32_t l, af_proj p) {
    const af_layer *L = &m->layers[l];
    const af_weight *w[AF_PROJ_COUNT] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[p]->data ? w[p] : NULL;
}

af_status af_dora_init_magnitudes(const af_model *model, const af_param_layout *lay, float *P) {
    if (!model || !lay || !P || !lay->lora.use_dora)
        return af_fail(AF_ERR_INVALID_ARG, "af_dora_init_magnitudes: NULL argument or no DoRA layout");
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const af_weight *w = l < model->cfg.num_hidden_layers ? proj_weight(model, l, (af_proj)p) : NULL;
            if (!w || w->rows != s->out || w->cols != s->in)
                return af_fail(AF_ERR_INVALID_ARG, "DoRA: layer %d %s: the model has no [%lld, %lld] weight there", l,
                               af_proj_name((af_proj)p), (long long)s->out, (long long)s->in);
            if (!af_type_can_dequantize(w->type))
                return af_fail(AF_ERR_UNSUPPORTED, "DoRA: layer %d %s: weight type %u has no dequantizer", l,
                               af_proj_name((af_proj)p), (unsigned)w->type);
            af_dora_weight_norm(model->ctx, P + s->m_off, w->data, w->type, P + s->a_off, P + s->b_off, s->in, s->out,
                                lay->lora.r, lay->scale);
        }
    return AF_OK;
}
