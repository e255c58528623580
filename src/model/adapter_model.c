/* adapter_model.c — load an adapter directory against a loaded model (the layout from the
 * adapter's config, PEFT layers_to_transform, q/k rows to GGUF order). Kept apart from
 * adapter_io.c so the format code (fuzzed alone) does not depend on the model. */
#include "lora/adapter_io.h"
#include "core/core.h"
#include "afinar.h"
#include "lora/lora.h"
#include <stdlib.h>
#include <string.h>

af_status af_adapter_load_for_model(const char *dir, const af_adapter_info *info, const af_model *model,
                                    float dropout, int32_t num_classes, unsigned flags, af_param_layout *lay,
                                    float **P) {
    *P = NULL;
    const af_model_config *mc = af_model_get_config(model);
    /* the architecture the adapter was made for: a GGUF's general.architecture, or afinar.json's */
    const char *arch = info->architecture;
    const cJSON *ja = info->afinar ? cJSON_GetObjectItemCaseSensitive(info->afinar, "architecture") : NULL;
    if (!arch && cJSON_IsString(ja)) arch = ja->valuestring;
    if (arch && strcmp(arch, mc->architecture) != 0)
        return af_fail(AF_ERR_INVALID_ARG, "%s: adapter for architecture \"%s\", the model is \"%s\"", dir, arch,
                       mc->architecture);
    if (info->targets == 0) { /* head only (a merged classifier's GGUF): a layout without active slots */
        af_lora_config lc = {1, 1.0f, 0.0f, 0, 1u << AF_PROJ_Q, 0, 0};
        AF_TRY(af_param_layout_init(lay, model, &lc, num_classes));
        for (int64_t k = 0; k < (int64_t)lay->n_layers * AF_PROJ_COUNT; k++) lay->slots[k].a_off = lay->slots[k].b_off = -1;
    } else {
        af_lora_config lc = {info->r, info->alpha, dropout, info->use_rslora, info->targets, 0, info->use_dora};
        AF_TRY(af_param_layout_init(lay, model, &lc, num_classes));
        af_adapter_restrict_layout(lay, info); /* PEFT layers_to_transform */
    }
    float *p = af_calloc((size_t)lay->n_total, sizeof(float));
    af_status st = p ? AF_OK
                     : af_fail(AF_ERR_NOMEM, "%s: out of memory (%lld parameters)", dir, (long long)lay->n_total);
    if (st == AF_OK) {
        af_adapter_load_opts lo = {flags, mc->architecture, mc->num_attention_heads, mc->num_key_value_heads,
                                   mc->head_dim};
        st = af_adapter_load(dir, lay, p, &lo, NULL); /* q/k rows HF -> GGUF order */
    }
    if (st != AF_OK) {
        free(p);
        af_param_layout_free(lay);
        return st;
    }
    *P = p;
    return AF_OK;
}
