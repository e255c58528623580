/*
 * export.h — helpers shared by export.c (af_adapter_export_gguf) and merge.c (af_merge_adapter).
 */
#ifndef AF_APP_EXPORT_H
#define AF_APP_EXPORT_H

#include "lora/adapter_io.h"
#include "lora/lora.h"

/* An adapter loaded for a model file: the model (default context), the adapter's info, the layout
 * and the parameters P (q/k B rows in GGUF order). */
typedef struct af_loaded_adapter {
    af_model *model;
    af_adapter_info info;
    af_param_layout lay;
    float *P;
} af_loaded_adapter;

/* AF_ERR_INVALID_ARG "<out>: exists (use --overwrite to replace it)" when out_path exists and
 * !overwrite; then af_check_writable(out_path). */
af_status af_export_check_out(const char *out_path, int overwrite);

/* af_model_load(NULL, model_path) + af_adapter_read_info + af_adapter_load_for_model (head loaded
 * when the adapter has one). On error *la is zeroed. Free with af_export_unload. */
af_status af_export_load(const char *model_path, const char *adapter, af_loaded_adapter *la);
void af_export_unload(af_loaded_adapter *la);

#endif /* AF_APP_EXPORT_H */
