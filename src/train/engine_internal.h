/*
 * engine_internal.h — what the three files of the training engine share: the engine object, its
 * workspace (engine.c), the frozen-prefix cache (engine_prefix.c) and the non-finite probe
 * (engine_probe.c). The layers themselves are model/transformer.h's walk.
 */
#ifndef AF_ENGINE_INTERNAL_H
#define AF_ENGINE_INTERNAL_H

#include "model/transformer.h"
#include "train/engine.h"

/* Frozen-prefix cache (af_engine_set_prefix_cache): residual stream entering layer lo per sample,
 * keyed by the sample's tokens, in host memory (uploaded to / downloaded from the device through
 * the backend table). Open addressing with linear probing; no eviction. */
typedef struct pc_entry {
    uint64_t h;    /* hash of the tokens; 0 = empty slot */
    int32_t len;
    int32_t *tok;  /* [len], then x [len, H] in the same allocation */
    float *x;
} pc_entry;

typedef struct prefix_cache {
    pc_entry *tab;
    int64_t cap, used;   /* slots (a power of two), entries */
    size_t bytes, max_bytes;
    int64_t hits, misses;
} prefix_cache;

/* Device memory (kernels/backend.h: the engine context's device) unless marked "host". */
struct af_engine {
    const af_ctx *ctx; /* borrowed: the context of every kernel call (af_engine_new) */
    const af_model *m;
    const af_param_layout *lay;
    int32_t lo;     /* lowest layer with an adapter (af_lora_lowest_layer): layers below are frozen */
    int64_t block_rows; /* token block of the frozen-weight products (BLOCK_ROWS; 0: one call) */
    int64_t cap;    /* tokens the workspace holds */
    int32_t n_sets; /* 1 (checkpointing / forward only) or n_layers - lo */
    af_devmem mem;  /* the workspace below (chunks of at most the device's largest allocation) */
    float **xs;     /* host [n_layers-lo+1] of [cap, H]: residual stream at the input of layers lo..L-1 and the output */
    af_tf_acts *sets; /* host [n_sets]; set i belongs to layer lo + i (set 0 is also the frozen layers' scratch) */
    int32_t *pos;   /* [cap] per-sample positions */
    int32_t *tok;   /* [cap] token ids of the current (sub-)batch */
    int32_t *ss;    /* [cap + 1] sample starts of the batch (pooling) */
    int32_t *lab;   /* [cap] labels (classification) */
    float *mh;      /* [cap, C] multi-hot targets (multi-label) */
    float *cw;      /* [C] class weights */
    float *pooled, *dpooled; /* [cap, H] pooled states of the samples and their gradient */
    float *lg, *dlg;         /* [cap, C] logits and their gradient */
    af_tf_scratch ws; /* the layer walk's scratch [cap, width] */
    float *hN, *rstdN; /* [cap, H], [cap]: final norm output and its rstd */
    int32_t *pos_host;  /* host [cap]: positions before their upload */
    int32_t *sub_tok, *sub_ss, *sub_idx; /* host [cap], [cap + 1], [cap]: the samples of a batch missing from the
                                            prefix cache: their tokens, sample starts, batch indices */
    prefix_cache pc;
    float *lm_scr;        /* causal LM: af_lm_head_loss scratch [af_lm_head_scratch_floats], made on first use */
    const volatile int *cancel; /* af_engine_set_cancel: read before every layer (NULL: none) */
    float *ple;           /* [cap, L·P] the batch's per-layer inputs (desc.ple_dim), else NULL */
    float **kvs;          /* [4·L] KV sharing (desc.n_kv_shared): K, V, dK, dV [cap, kvd(l)] of each layer whose
                             K/V later layers reuse (af_tf_run.kv_k ...), NULL elsewhere; owned array */
    int probe;            /* af_engine_locate_nonfinite: check every stage of the forward */
    float *P0;            /* device copy of lay->init_P (PiSSA / OLoRA: the frozen −s·B0·A0), else NULL */
    char probe_at[160];   /* the first stage holding a non-finite value ("" = none yet) */
};

/* Residual stream at the input of layer l (lo <= l <= L; l = L: the last layer's output), [n, H]. */
static inline float *engine_xs_at(const af_engine *e, int64_t l, int64_t n) {
    (void)n;
    return e->xs[l - e->lo];
}

/* 1 when the engine's cancel flag is set (the layer loops stop; the step returns AF_ERR_CANCELLED). */
static inline int engine_cancelled(const af_engine *e) { return e->cancel && *e->cancel; }

/* engine.c */
af_status engine_check_batch(const af_engine *e, const af_batch *b, int need_labels);
af_status engine_reserve(af_engine *e, int64_t n, int32_t n_sets);
/* The walk's run of a packed batch (training mode, the engine's adapter, scratch and probe). */
af_tf_run engine_run(af_engine *e, const float *P, const int32_t *ss, int32_t B, int64_t n, int drop, uint64_t seed);
/* Positions restarting at every sample start ss [B + 1] (host), uploaded into e->pos. */
af_status engine_set_pos(af_engine *e, const int32_t *ss, int32_t B);
/* tokens: host ids of the R->n tokens. */
af_status engine_frozen_prefix(af_engine *e, const af_tf_run *R, const int32_t *tokens, float *out);
/* The forward of batch b (tokens uploaded here); with `head`, the final norm, pooling and the
 * classification head into e->pooled, e->lg. Errors: the device's (uploads). */
af_status engine_forward_all(af_engine *e, const af_tf_run *R, const af_batch *b, int save, int head, af_pooling pool);

/* engine_prefix.c */
af_status engine_prefix_cached(af_engine *e, const af_tf_run *R, const af_batch *b);
void engine_pc_clear(prefix_cache *pc);

/* engine_probe.c: the walk's probe hook (ctx = the engine) */
void engine_probe(void *ctx, const float *x, int64_t n, int32_t l, const char *what, const char *what2);

#endif /* AF_ENGINE_INTERNAL_H */
