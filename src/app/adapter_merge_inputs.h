/*
 * adapter_merge_inputs.h — one input adapter of a merge, read and checked (adapter_merge_inputs.c),
 * for adapter_merge.c. Not part of any API.
 */
#ifndef AF_ADAPTER_MERGE_INPUTS_H
#define AF_ADAPTER_MERGE_INPUTS_H

#include "afinar_app.h"
#include "lora/adapter_io.h"
#include "lora/lora.h"

/* One input: its directory (borrowed), info, a layout from its own tensor shapes and its parameters. */
typedef struct in_adapter {
    const char *dir;
    af_adapter_info info;
    af_param_layout lay; /* built from the file's own shapes */
    float *P;
    double scale;        /* s = alpha / r (or / sqrt(r)), in double */
    const cJSON *labels; /* afinar.json "labels" (in info.afinar) or NULL */
} in_adapter;

/* Free what af_merge_in_read allocated (a is zeroed). */
void af_merge_in_free(in_adapter *a);
/* afinar.json's string / non-negative integer `key` of the input (NULL / 0 when absent). */
const char *af_merge_afj_string(const in_adapter *a, const char *key);
int32_t af_merge_afj_int(const in_adapter *a, const char *key);
/* Read `dir` into *a: info, a layout from the tensor shapes, then every tensor (af_adapter_load's
 * checks). Errors: those of af_adapter_read_info / af_adapter_load, AF_ERR_FORMAT (a layer index
 * beyond 65536), AF_ERR_NOMEM. On failure the caller frees *a with af_merge_in_free. */
af_status af_merge_in_read(const char *dir, in_adapter *a);
/* The n inputs against each other (what a merge needs them to share). Errors: AF_ERR_INVALID_ARG /
 * AF_ERR_FORMAT naming the two adapters. */
af_status af_merge_check_inputs(const in_adapter *a, int32_t n);

#endif
