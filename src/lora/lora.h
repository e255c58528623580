/*
 * lora.h — LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models";
 * rsLoRA: Kalajdzievski 2023) on the seven projections of every layer, in PEFT's conventions
 * (peft/tuners/lora/layer.py):
 *   y = x·Wᵀ + scale · (dropout(x)·Aᵀ)·Bᵀ,   A [r, in], B [out, r],
 *   scale = lora_alpha / r   (or lora_alpha / sqrt(r) with use_rslora),
 *   init: A ~ kaiming_uniform(a = sqrt(5)) i.e. U(-1/sqrt(in), 1/sqrt(in)); B = 0.
 *
 * All trainable parameters of a run (every LoRA A and B, then the classification head W and b)
 * live in ONE flat float buffer described by an af_param_layout. The same layout indexes the
 * parameters, their gradients and AdamW's first and second moments (llm.c ParameterTensors
 * convention), so the optimizer is a loop over one vector.
 */
#ifndef AF_LORA_H
#define AF_LORA_H

#include "core/core.h"
#include "kernels/train_ops.h"

#include <stdint.h>

typedef enum af_proj {
    AF_PROJ_Q = 0, /* self_attn.q_proj   [n_head*head_dim, hidden] */
    AF_PROJ_K,     /* self_attn.k_proj   [n_kv_head*head_dim, hidden] */
    AF_PROJ_V,     /* self_attn.v_proj   [n_kv_head*head_dim, hidden] */
    AF_PROJ_O,     /* self_attn.o_proj   [hidden, n_head*head_dim] */
    AF_PROJ_GATE,  /* mlp.gate_proj      [ffn, hidden] */
    AF_PROJ_UP,    /* mlp.up_proj        [ffn, hidden] */
    AF_PROJ_DOWN,  /* mlp.down_proj      [hidden, ffn] */
    AF_PROJ_COUNT
} af_proj;

/* PEFT module name of a projection: "q_proj", ..., "down_proj". */
const char *af_proj_name(af_proj p);
/* Parse a target list: preset "qv" (default), "qkv", "all-linear", or a comma list of
 * q,k,v,o,gate,up,down (or their PEFT names q_proj,...). Writes a bit mask (1u << af_proj).
 * Errors: AF_ERR_INVALID_ARG naming the unknown target. */
af_status af_lora_parse_targets(const char *spec, uint32_t *mask);

/* lora_A initialisation (PEFT's init_lora_weights). */
typedef enum af_lora_init {
    AF_LORA_INIT_DEFAULT = 0,  /* kaiming-uniform U(-1/sqrt(in), 1/sqrt(in)) (init_lora_weights=True) */
    AF_LORA_INIT_GAUSSIAN = 1, /* N(0, 1/r²) ("gaussian") */
    AF_LORA_INIT_PISSA = 2,    /* from the SVD of W ("pissa"; Meng et al. 2024), residual kept frozen */
    AF_LORA_INIT_OLORA = 3     /* from the QR of W ("olora"; Büyükakyüz 2024), residual kept frozen */
} af_lora_init;

typedef struct af_lora_config {
    int32_t r;           /* rank, 1 <= r <= min(in, out) of every targeted projection */
    float alpha;         /* lora_alpha */
    float dropout;       /* lora_dropout probability in [0, 1) applied to the adapter input */
    int32_t use_rslora;  /* scale = alpha / sqrt(r) instead of alpha / r */
    uint32_t targets;    /* bit mask of af_proj */
    uint64_t seed;       /* initialisation seed */
    int32_t use_dora;    /* DoRA (lora/dora.h): a magnitude vector m [out] per adapted projection */
} af_lora_config;

/* Where one adapter lives in the flat buffer. */
typedef struct af_lora_slot {
    int64_t a_off, b_off; /* float offsets of A [r, in] and B [out, r]; -1 when not targeted */
    int64_t in, out;
    int64_t m_off;        /* DoRA magnitude m [out] (right after B), meaningful only when the layout's
                             lora.use_dora is set (hand-built slots leave it 0) */
} af_lora_slot;

typedef struct af_param_layout {
    af_lora_config lora;
    float scale;             /* alpha/r or alpha/sqrt(r) */
    int32_t n_layers;
    int32_t layer_min, layer_end; /* adapted layers [layer_min, layer_end), layer_end resolved (never 0);
                                     informational (0, 0 in hand-built layouts): the slots decide */
    af_lora_slot *slots;     /* [n_layers * AF_PROJ_COUNT], owned; slot(l, p) = slots[l*AF_PROJ_COUNT + p] */
    int32_t num_classes;     /* 0 when there is no classification head */
    int32_t hidden;
    int64_t head_w_off;      /* W [num_classes, hidden], -1 if no head */
    int64_t head_b_off;      /* b [num_classes], -1 if no head */
    int64_t n_lora;          /* floats in the LoRA part (offsets [0, n_lora)) */
    int32_t init;            /* af_lora_init (AF_LORA_INIT_DEFAULT from af_param_layout_build; set by the caller) */
    float *init_P;           /* PiSSA / OLoRA (af_lora_init_residual): [n_lora] the initial A0, B0 at the slots'
                                offsets, also the frozen offset −s·B0·A0 of every forward (the residual PEFT
                                writes into the base weights); owned (af_param_layout_free, copied by
                                af_param_layout_copy); NULL otherwise */
    int64_t n_total;         /* floats in the whole buffer */
} af_param_layout;

/* Parse a layer selection for n_layers layers into [*layer_min, *layer_end) (layer_end = 0 means
 * "through the last layer"; see af_param_layout_init_layers):
 *   NULL, "" or "all": every layer (0, 0);  "A-B": layers A..B inclusive;  "A-": A to the last;
 *   "A": layer A only;  "topN" (or "last:N"): the N highest layers (n_layers-N .. n_layers-1).
 * Layers are 0-based (transformers' model.layers.{i}). When the range reaches the last layer,
 * *layer_end is written as 0. Errors: AF_ERR_INVALID_ARG naming the spec (syntax, A > B, a
 * layer >= n_layers, N < 1 or N > n_layers). */
af_status af_lora_parse_layers(const char *spec, int32_t n_layers, int32_t *layer_min, int32_t *layer_end);

/* Parse PEFT's layers_to_transform for n_layers layers: a comma list of 0-based layer indices ("0,2,5",
 * any order) into *layers (malloc'ed, caller frees; ascending) and *n. Errors: AF_ERR_INVALID_ARG
 * naming the spec (an empty list or item, not a number, a layer >= n_layers, a layer listed twice),
 * AF_ERR_NOMEM. */
af_status af_lora_parse_layer_list(const char *spec, int32_t n_layers, int32_t **layers, int32_t *n);

/* The model facts a layout is built from: layer count, hidden size and, per layer and projection,
 * the projection's shape (proj_shape returns 0 when the layer has no such projection: a gemma4
 * KV-sharing layer has no k/v, an attention_k_eq_v layer no v). model/lora_layout.c fills it from
 * an af_model (af_model_proj_shape), so that lora/ needs nothing of model/. */
typedef struct af_layout_shapes {
    int32_t n_layers;
    int32_t hidden;
    const void *user; /* passed to proj_shape */
    int (*proj_shape)(const void *user, int32_t layer, af_proj p, int64_t *in, int64_t *out);
} af_layout_shapes;

/* Build the layout: adapters on cfg->targets of every layer in [layer_min, layer_end) (layer_end 0:
 * through the last layer) that has the projection (the other slots stay empty, as PEFT has no
 * module there), then (if num_classes > 0) the head. Errors: AF_ERR_INVALID_ARG (r <= 0,
 * r > min(in, out) of a target, alpha <= 0, dropout outside [0, 1), no target, an empty range or
 * one outside [0, n_layers]), AF_ERR_NOMEM. Free with af_param_layout_free(). */
af_status af_param_layout_build(af_param_layout *lay, const af_layout_shapes *sh, const af_lora_config *cfg,
                                int32_t num_classes, int32_t layer_min, int32_t layer_end);

/* af_param_layout_build for `model` (shapes per layer, af_model_proj_shape), every layer.
 * Defined in model/lora_layout.c (it reads the model). */
af_status af_param_layout_init(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                               int32_t num_classes);

/* A copy of `src` into `dst` (its own slots; free with af_param_layout_free). Errors: AF_ERR_NOMEM
 * (dst then holds no slots). */
af_status af_param_layout_copy(af_param_layout *dst, const af_param_layout *src);

/* Same, with adapters only on the layers [layer_min, layer_end) (PEFT's layers_to_transform as a
 * contiguous range; layer_end = 0 means "through the last layer", so (0, 0) is every layer and
 * equals af_param_layout_init). Slots of the other layers have a_off = b_off = -1. Layers below
 * layer_min are frozen completely: the engine keeps no activations for them and stops its backward
 * at layer_min (engine.h). The A matrices of a layer are initialised identically whatever the range
 * (the RNG is keyed by (seed, layer, proj)). Extra error: AF_ERR_INVALID_ARG when the range is
 * empty or outside [0, n_layers]. Defined in model/lora_layout.c. */
af_status af_param_layout_init_layers(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                                      int32_t num_classes, int32_t layer_min, int32_t layer_end);
/* Same, with adapters only on the `n` listed layers (ascending, distinct, each < the model's layers:
 * af_lora_parse_layer_list), any set (PEFT's layers_to_transform as a list): the slots of the other
 * layers are empty as where a model has no such projection, so the layout (offsets, n_total) is
 * the one PEFT's module walk gives; the backward stops at the lowest listed layer and passes through
 * the unlisted ones above it. Extra error: AF_ERR_INVALID_ARG (an empty, unsorted or out-of-range
 * list). Defined in model/lora_layout.c. */
af_status af_param_layout_init_list(af_param_layout *lay, const af_model *model, const af_lora_config *cfg,
                                    int32_t num_classes, const int32_t *layers, int32_t n);
void af_param_layout_free(af_param_layout *lay);

/* PiSSA / OLoRA (lay->init AF_LORA_INIT_PISSA / _OLORA; PEFT 0.21 LoraLayer.pissa_init / olora_init):
 * lay->init_P [n_lora] (allocated here, owned by the layout) receives, per adapted slot with W [out, in]
 * (dequantized to double) and s = lay->scale:
 *   pissa: W = U·diag(σ)·Vᵀ (af_svd_lowrank, top r), A0 = diag(sqrt(σ_r / s))·V_rᵀ, B0 = U_r·diag(sqrt(σ_r / s))
 *   olora: W = Q·R (af_qr_thin; for out < in the QR of W's first `out` columns and R = Qᵀ·W),
 *          A0 = R[:r, :], B0 = Q[:, :r]
 * so that s·B0·A0 is the part of W the adapter starts with; PEFT writes W − s·B0·A0 into the base,
 * afinar keeps W and subtracts s·B0·A0 in every forward (the same function without re-rounding a
 * quantized base). Singular vectors are defined up to a simultaneous sign of u_i and v_i: afinar's may
 * differ from LAPACK's (B0·A0 does not). Time: an SVD (or QR) of every adapted [out, in] weight
 * (seconds per 576 x 1536 projection for pissa). Errors: AF_ERR_INVALID_ARG (no such init, a DoRA layout,
 * a slot the model lacks), AF_ERR_UNSUPPORTED (a weight type without a dequantizer), AF_ERR_NOMEM, those
 * of the SVD. Defined in model/lora_layout.c. */
af_status af_lora_init_residual(const af_model *model, af_param_layout *lay);

/* Parameters with which the adapters of `lay` change nothing (the "adapter off" of a reference model, e.g.
 * DPO's): plain LoRA and gaussian: A = B = 0; DoRA: A = B = 0 and m = the row norms of W (g = 1; all-zero
 * parameters would make g = 0, i.e. zero outputs); PiSSA / OLoRA: A = A0, B = B0 (cancelling the frozen
 * −s·B0·A0; zeros would leave the residual model). The LoRA part of P [lay->n_total] is written, the head
 * is left as it is. Errors: those of af_dora_init_magnitudes. Defined in model/lora_layout.c. */
af_status af_lora_identity_params(const af_model *model, const af_param_layout *lay, float *P);

/* The plain LoRA of a PiSSA / OLoRA layout (lay->init_P), as PEFT's
 * save_pretrained(path_initial_model_for_weight_conversion=...) converts it: rank 2r,
 *   A' = [A; −A0] [2r, in],  B' = [B, B0] [out, 2r],  lora_alpha' = 2·alpha (√2·alpha with rsLoRA)
 * so that s'·B'·A' = s·(B·A − B0·A0), the adapter's whole change of the ORIGINAL weights. *out gets that
 * layout (own slots, no init_P, init default; the head copied) and, when P != NULL, *Pout [out->n_total]
 * (malloc'ed) the parameters. Errors: AF_ERR_INVALID_ARG (no init_P), AF_ERR_NOMEM. */
af_status af_lora_residual_layout(const af_param_layout *lay, const float *P, af_param_layout *out, float **Pout);

/* Lowest layer holding at least one adapter, or n_layers when there is none. Everything below it
 * is frozen: the engine needs neither saved activations nor a backward there. */
int32_t af_lora_lowest_layer(const af_param_layout *lay);

static inline const af_lora_slot *af_lora_slot_at(const af_param_layout *lay, int32_t layer, af_proj p) {
    return &lay->slots[(int64_t)layer * AF_PROJ_COUNT + p];
}

/* Initialise parameters P [n_total] like PEFT: every A row-major [r, in] from
 * U(-1/sqrt(in), 1/sqrt(in)) with a counter-based RNG keyed by (seed, layer, proj), every B = 0
 * (lay->init AF_LORA_INIT_GAUSSIAN: A from N(0, 1/r²), PEFT's nn.init.normal_(std = 1/r), the normal
 * deviates by the Box-Muller transform of consecutive pairs of the same stream; with lay->init_P: A and B
 * copied from it);
 * head W from U(-1/sqrt(hidden), 1/sqrt(hidden)) (nn.Linear default), b = 0. Deterministic for a
 * seed, independent of thread count. */
void af_lora_init_params(const af_param_layout *lay, float *P);
/* (With cfg.use_dora the layout holds, after each slot's B, its magnitude m [out]: af_lora_init_params
 * leaves it 0; af_dora_init_magnitudes (lora/dora.h, defined in model/lora_layout.c) sets it from the
 * model's weights.) */

/* Merge: Wd[out, in] += scale · B·A (Wd is a dequantized f32 copy); unmerge subtracts it. */
void af_lora_merge(float *Wd, const float *A, const float *B, int64_t in, int64_t out, int32_t r, float scale,
                   int sign);

/* The counter-based RNG (af_ctr_key, af_ctr_u01) is in core/core.h; the LoRA products and the
 * dropout mask (af_lora_forward, af_lora_backward, af_lora_dropout_mask) are kernels of every
 * backend: kernels/train_ops.h. */

#endif /* AF_LORA_H */
