/*
 * adapter_internal.h — what adapter_io.c (writing adapters) and adapter_load.c (reading them)
 * share. Not part of any API.
 */
#ifndef AF_ADAPTER_INTERNAL_H
#define AF_ADAPTER_INTERNAL_H

#include "lora/lora.h"

/* PEFT's module names of the projections ("q_proj" ... "down_proj": the strings of af_proj_name,
 * kept here so the adapter files need no lora.c) and their blocks ("self_attn", "mlp"). */
extern const char *const af_adapter_proj_name[AF_PROJ_COUNT];
extern const char *const af_adapter_proj_block[AF_PROJ_COUNT];

/* Heads of the q (p = AF_PROJ_Q) or k projection for the row conversion into *nh, checked against
 * the slot's `out` rows: n_head (q) or n_kv_head (k) heads of head_dim (even) rows. Errors:
 * AF_ERR_INVALID_ARG naming `where`, the layer and the projection. */
af_status af_adapter_qk_heads(const char *where, int32_t layer, int p, int64_t out, int32_t n_head, int32_t n_kv_head,
                              int32_t head_dim, int64_t *nh);

#endif
