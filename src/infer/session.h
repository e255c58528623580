/*
 * session.h — internal part of the inference session (the public part is in afinar.h).
 */
#ifndef AF_SESSION_H
#define AF_SESSION_H

#include "kernels/backend.h"
#include "lora/lora.h"
#include "model/transformer.h"

#define AF_EVAL_CHUNK 256 /* tokens per forward chunk: bounds scratch memory for long prompts */
#define AF_SESSION_MAX_LORA 16 /* adapters applied together in one session */

/* One sequence: its KV cache, the tokens in it, its adapter (session.c; the prompt-cache file of
 * session_file.c reads and writes the cache). Device memory (the model's context,
 * kernels/backend.h): the KV caches, the forward state, the logits of a chunk and the adapter's
 * parameters; the caller's token ids and logits are host arrays, uploaded / downloaded through the
 * backend table. */
struct af_session {
    const af_model *m;
    const af_ctx *ctx;        /* the model's context (borrowed) */
    int64_t n_ctx, n_past, kv_dim;
    float **k_cache, **v_cache; /* host arrays [layers] of device buffers [n_ctx][kvd(l)] (a KV-sharing layer
                                 * points at its kv_src's); kv_dim = m->kv_floats (Σ kvd(l) over the
                                 * layers with their own K/V) */
    af_devmem kv;             /* their memory */
    af_tf_infer s;
    /* adapters applied together, unmerged (n_lora 0: none), their corrections added in this order:
     * lora[k].P is dev_P[k], a device copy of the caller's parameters (af_session_set_loras) or of an
     * adapter directory (af_session_load_adapter: lora[0].lay is own_lay); lora[k].scale the
     * correction's scale (adapter scale times the caller's factor) */
    af_tf_lora lora[AF_SESSION_MAX_LORA];
    int32_t n_lora;
    float *dev_P[AF_SESSION_MAX_LORA];
    uint64_t P_hash[AF_SESSION_MAX_LORA]; /* FNV-1a of each adapter's parameters as given (the prompt cache's layout hash) */
    float *xa;              /* device scratch [AF_EVAL_CHUNK, max r of the adapters] (NULL: no adapter) */
    af_param_layout own_lay;
    int has_own_lay;
    float *logits_dev;      /* device logits [logit_rows, vocab] (NULL on a host-memory device) */
    int64_t logit_rows;
    int32_t *toks;    /* [n_ctx] the tokens whose K/V are in the cache (positions 0 .. n_past-1) */
    uint8_t *blocked; /* [n_ctx] 1: the position's K/V came from a chunk of > AF_TF_DECODE_ROWS rows
                         (blocked products), 0: from the per-row decode regime (af_session_keep_prefix) */
    /* af_session_set_control (NULL: none) */
    const volatile int *cancel;
    af_progress_fn progress;
    void *progress_user;
};

/* Apply a LoRA adapter, unmerged, to every later af_session_eval of `s`:
 *   y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ on every projection with a slot in `lay` (no dropout),
 * where A, B live in P [lay->n_total] (lora.h layout; q/k B rows in the GGUF row order of the
 * model, as the trainer holds them). `scale` is the correction's full scale (the layout's own
 * lay->scale = alpha/r for the adapter as trained). P (host) is copied to the session's device;
 * lay is borrowed and must outlive its use by the session (until the next af_session_set_lora /
 * af_session_free). P == NULL or
 * scale == 0: no adapter (exactly the base model's outputs). The KV cache is not touched: call
 * af_session_reset before evaluating a new sequence. Replaces an adapter loaded by
 * af_session_load_adapter. Errors: AF_ERR_INVALID_ARG (NULL session, layout for another layer
 * count, non-finite scale), AF_ERR_NOMEM (nothing changes). */
af_status af_session_set_lora(af_session *s, const float *P, const af_param_layout *lay, float scale);

/* Several adapters applied together, unmerged, to every later evaluation of `s`:
 *   y = x·Wᵀ + Σ_k scale[k]·(x·A_kᵀ)·B_kᵀ (added in the order k = 0, 1, ...)
 * with P[k] [lay[k]->n_total] laid out by lay[k] (as af_session_set_lora; each P[k] copied to the
 * device, each lay[k] borrowed). An entry with P[k] == NULL or scale[k] == 0 is off; n == 0 or all
 * off: the base model. af_session_set_lora is the list of one. Errors: AF_ERR_INVALID_ARG (NULL
 * session, n outside 0..AF_SESSION_MAX_LORA, a layout for another model, a non-finite scale),
 * AF_ERR_NOMEM (nothing changes). */
af_status af_session_set_loras(af_session *s, int32_t n, const float *const *P, const af_param_layout *const *lay,
                               const float *scale);

/* The model a session runs (borrowed; NULL for NULL) and its KV-cache capacity in positions. */
const af_model *af_session_model(const af_session *s);
int64_t af_session_n_ctx(const af_session *s);

/* The number of cached positions af_session_keep_prefix(s, tokens, n) would keep (s unchanged). */
int af_session_reusable(const af_session *s, const int32_t *tokens, int n);

/* session_share.c: make dst's cache hold the reusable prefix of src's for the prompt tokens[0..n)
 * (af_session_reusable(src, ...) positions: keys, values, tokens and their regime copied on the
 * device) when it is longer than what dst keeps of its own (af_session_keep_prefix(dst, ...));
 * returns dst's new n_past. Both sessions must run the same model, adapter and scale (the caller's
 * duty: the copied values are those dst would compute, bit for bit). */
int af_session_copy_prefix(af_session *dst, const af_session *src, const int32_t *tokens, int n);

/* session_share.c: evaluate tokens[0..n) from position 0 (the cache is reset first) and write the
 * mean over the n positions of the final hidden states (after the model's final norm: what
 * transformers calls last_hidden_state) into out[hidden_size], L2-normalised (a zero vector stays
 * zero). Errors: those of af_session_eval (AF_ERR_RANGE beyond n_ctx, AF_ERR_CANCELLED, device
 * errors), AF_ERR_NOMEM. */
af_status af_session_embed(af_session *s, const int32_t *tokens, int n, float *out);

#endif /* AF_SESSION_H */
