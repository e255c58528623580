/*
 * model_load.h — private to src/model/: what the loader's two files share. model_hparams.c reads the
 * hyper-parameters (GGUF metadata or config.json) into the model's config and description and a
 * per-layer plan; model.c reads the weights with that plan (load_weights). Not part of any contract.
 */
#ifndef AF_MODEL_LOAD_H
#define AF_MODEL_LOAD_H

#include "formats/hf_config.h"
#include "model/model.h"

/* Per-layer sizes and attention type, filled by either container before the weights are read. */
typedef struct lplan {
    int32_t *nh, *nkv, *hd, *ff; /* [L] each */
    uint8_t *sliding;            /* [L] 1 = sliding-window layer */
    float rope_partial_full;     /* HF gemma4: proportional RoPE fraction on global layers (1 = all pairs) */
    int v_from_k_global;         /* HF gemma4 attention_k_eq_v: global layers with their own K/V have no v_proj */
} lplan;

/* m->gguf's metadata -> m->cfg, m->desc and *pl (allocated; free with model_plan_free, also on error).
 * Errors name the file and the key (AF_ERR_FORMAT, AF_ERR_NOT_FOUND, AF_ERR_UNSUPPORTED, AF_ERR_NOMEM). */
af_status model_hparams_gguf(af_model *m, lplan *pl);
/* config.json (parsed into *h, `label` names it) -> m->cfg, m->desc and *pl; errors as above. */
af_status model_hparams_hf(af_model *m, const af_hf_config *h, const char *label, lplan *pl);
void model_plan_free(lplan *pl);
/* 1 when the architecture's HF checkpoints store norm weights as w used as 1 + w (gemma3). */
int model_arch_hf_norm_plus_one(const char *arch);

/* model_tokcheck.c: refuse a tokenizer that does not fit m (m->tok NULL: nothing to check): more
 * tokens than embedding rows, fewer than half as many, or one of ids[0..n_ids) (special-token ids
 * as stored, named by names[i]) outside [0, tokens) (-1 and 2^32-1 mean "none"). Errors:
 * AF_ERR_FORMAT naming `label`, the count or the key and the value. model_tok_check_gguf reads the
 * tokenizer.ggml.*_token_id keys present in m->gguf and checks them. */
af_status model_tok_check(const af_model *m, const char *label, const char *const *names, const int64_t *ids, int n_ids);
af_status model_tok_check_gguf(const af_model *m, const char *path);

#endif /* AF_MODEL_LOAD_H */
