/* lora_layout.c — the LoRA parameter layout of a model (af_param_layout_init*, lora/lora.h): the
 * model's layer count, hidden size and per-layer projection shapes handed to af_param_layout_build,
 * so that the LoRA code (lora/) does not depend on the model (model/ uses lora/, not the reverse). */
#include "lora/lora.h"

#include "afinar.h"

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
