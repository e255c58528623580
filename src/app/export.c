/*
 * export.c — an adapter as a llama.cpp LoRA GGUF (af_adapter_export_gguf, afinar_app.h; layout in
 * lora/adapter_gguf.h and docs/FORMATS.md §8). Shared with merge.c: loading an adapter for a model
 * file and the "output exists" rule.
 */
#include "app/export.h"

#include "afinar.h"
#include "afinar_app.h"
#include "core/core.h"
#include "lora/adapter_gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

af_status af_export_check_out(const char *out_path, int overwrite) {
    struct stat sb;
    if (lstat(out_path, &sb) == 0 && !overwrite)
        return af_fail(AF_ERR_INVALID_ARG, "%s: exists (use --overwrite to replace it)", out_path);
    return af_check_writable(out_path);
}

af_status af_export_load(const char *model_path, const char *adapter, af_loaded_adapter *la) {
    memset(la, 0, sizeof *la);
    AF_TRY(af_model_load(NULL, model_path, &la->model));
    af_status st = af_adapter_read_info(adapter, &la->info);
    if (st == AF_OK) {
        st = af_adapter_load_for_model(adapter, &la->info, la->model, 0.0f, la->info.num_classes, 0, &la->lay, &la->P);
        if (st != AF_OK) af_adapter_info_free(&la->info);
    }
    if (st != AF_OK) {
        af_model_free(la->model);
        memset(la, 0, sizeof *la);
    }
    return st;
}

void af_export_unload(af_loaded_adapter *la) {
    if (!la) return;
    free(la->P);
    if (la->lay.slots) af_param_layout_free(&la->lay);
    af_adapter_info_free(&la->info);
    af_model_free(la->model);
    memset(la, 0, sizeof *la);
}

af_status af_adapter_export_gguf(const char *model_path, const char *adapter, const char *out_path, int overwrite) {
    if (!model_path || !adapter || !out_path || !*out_path)
        return af_fail(AF_ERR_INVALID_ARG, "af_adapter_export_gguf: NULL argument");
    AF_TRY(af_export_check_out(out_path, overwrite));
    af_loaded_adapter la;
    AF_TRY(af_export_load(model_path, adapter, &la));
    af_status st = AF_OK;
    char *json = NULL;
    if (la.info.targets == 0)
        st = af_fail(AF_ERR_INVALID_ARG, "%s: has no LoRA tensors (only a classification head): nothing to export",
                     adapter);
    if (st == AF_OK && la.info.use_dora)
        st = af_fail(AF_ERR_UNSUPPORTED, "%s: a DoRA adapter (use_dora) has no llama.cpp LoRA GGUF form (its magnitude "
                     "rescales each whole weight row): merge it into the model instead (afinar merge), then use the "
                     "merged GGUF", adapter);
    if (st == AF_OK && la.info.afinar && !(json = cJSON_PrintUnformatted(la.info.afinar)))
        st = af_fail(AF_ERR_NOMEM, "%s: out of memory", adapter);
    if (st == AF_OK)
        st = af_adapter_gguf_write(out_path, &la.lay, la.P, af_model_get_config(la.model)->architecture,
                                   la.info.has_head_bias, json);
    free(json);
    af_export_unload(&la);
    return st;
}
