/*
 * session.h — internal part of the inference session (the public part is in afinar.h).
 */
#ifndef AF_SESSION_H
#define AF_SESSION_H

#include "lora/lora.h"

/* Apply a LoRA adapter, unmerged, to every later af_session_eval of `s`:
 *   y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ on every projection with a slot in `lay` (no dropout),
 * where A, B live in P [lay->n_total] (lora.h layout; q/k B rows in the GGUF row order of the
 * model, as the trainer holds them). `scale` is the correction's full scale (the layout's own
 * lay->scale = alpha/r for the adapter as trained). P and lay are borrowed and must outlive their
 * use by the session (until the next af_session_set_lora / af_session_free). P == NULL or
 * scale == 0: no adapter (exactly the base model's outputs). The KV cache is not touched: call
 * af_session_reset before evaluating a new sequence. Replaces an adapter loaded by
 * af_session_load_adapter. Errors: AF_ERR_INVALID_ARG (NULL session, layout for another layer
 * count, non-finite scale), AF_ERR_NOMEM (nothing changes). */
af_status af_session_set_lora(af_session *s, const float *P, const af_param_layout *lay, float scale);

/* The model a session runs (borrowed; NULL for NULL) and its KV-cache capacity in positions. */
const af_model *af_session_model(const af_session *s);
int64_t af_session_n_ctx(const af_session *s);

#endif /* AF_SESSION_H */
