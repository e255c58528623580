/*
 * model.h — a loaded transformer: hyper-parameters, the per-architecture table, and views of the
 * frozen weights inside the memory-mapped GGUF (quantized blocks are used in place).
 *
 * Architectures: "llama" (SmolLM2, Llama 2/3 style: pre-norm, SwiGLU, RoPE NORM mode because the
 * GGUF converter permuted q/k rows) and "gemma3" (sandwich norms, q/k norms, GeGLU, embedding
 * scaled by sqrt(hidden), RoPE NEOX mode, sliding-window layers with their own RoPE base),
 * "qwen2" (Qwen2/2.5: llama's layer + q/k/v biases, RoPE NEOX mode) and "qwen3" (llama's layer +
 * per-head q/k RMSNorm, RoPE NEOX mode, head_dim from attention.key_length).
 * Sources: llama.cpp src/models/{llama,gemma3,qwen2,qwen3}.cpp, transformers
 * modeling_{llama,gemma3,qwen2,qwen3}.py, summarised in docs/FORMATS.md §3-§5.
 */
#ifndef AF_MODEL_H
#define AF_MODEL_H

#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "tokenizer/tokenizer.h"

/* Gated feed-forward activation: act = f(gate)·up. */
typedef enum af_act {
    AF_ACT_SWIGLU = 0,     /* f = silu (llama) */
    AF_ACT_GEGLU_TANH = 1, /* f = gelu with the tanh approximation (gemma3 gelu_pytorch_tanh) */
} af_act;

/* What one architecture does differently, filled once by af_model_load from the architecture
 * table in model.c (plus the values the file gives) and read by the layer walk
 * (transformer.c), which never tests the architecture's name. */
typedef struct af_arch_desc {
    const char *name;          /* GGUF general.architecture: "llama", "gemma3", "qwen2", "qwen3" */
    /* norm placement: always pre-norm (attn_norm, ffn_norm on the branch inputs); sandwich_norm
     * adds post-norms on both branch outputs before the residual add (post_attention_norm,
     * post_ffw_norm: gemma3) */
    int sandwich_norm;
    int qk_norm;               /* per-head RMSNorm of q and k before RoPE (attn_q_norm/attn_k_norm) */
    af_act act;
    int rope_neox;             /* 0: NORM pairs (2i, 2i+1); 1: NEOX pairs (i, i + d/2) */
    float embd_scale;          /* multiplies token embeddings (gemma3: sqrt(hidden)), else 1 */
    float attn_scale;          /* multiplies q·k (1/sqrt(head_dim)) */
    /* sliding-window pattern: with swa_period > 0, layer il is global when il % swa_period ==
     * swa_period - 1 and the others attend to the last sliding_window keys (incl. self) with RoPE
     * base rope_base_swa; 0: every layer global with rope_theta (af_layer.window/rope_base) */
    int32_t swa_period;
    int64_t sliding_window;
    float rope_base_swa;
    int qkv_bias;              /* q/k/v projections have biases (attn_{q,k,v}.bias: qwen2) */
    float final_logit_softcap; /* LM head logits c·tanh(z/c); 0 = off */
    int tied_head;             /* the LM head reuses token_embd (no output.weight in the file) */
} af_arch_desc;

/* A frozen weight matrix W [rows = out_features, cols = in_features] in its stored type.
 * Row r starts at (const char *)data + r * af_row_bytes(type, cols). `data` is the host view (the
 * mapping, or a copy made at load): export, merge and requantize read it. The layer walk reads the
 * device address `dev` (blocks of `dev_type`) imported once by af_model_load under the model's
 * context (kernels/backend.h import_weight); on a context whose device memory is host memory (the
 * CPU) it reads `data` / `type` (af_weight_dev). */
typedef struct af_weight {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    const void *dev;   /* device address (NULL before the import) */
    uint32_t dev_type; /* block type on the device (== type unless the backend converted it) */
} af_weight;

/* Device addresses of a layer's vectors (norm weights, biases) [same shapes as the host fields];
 * NULL where the host field is NULL. */
typedef struct af_layer_dev {
    const float *attn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
} af_layer_dev;

typedef struct af_layer {
    const float *attn_norm;      /* [hidden] */
    af_weight wq;                /* [n_head*head_dim, hidden] */
    af_weight wk;                /* [n_kv_head*head_dim, hidden] */
    af_weight wv;                /* [n_kv_head*head_dim, hidden] */
    af_weight wo;                /* [hidden, n_head*head_dim] */
    const float *bq, *bk, *bv;   /* [q_dim], [kv_dim], [kv_dim] with desc.qkv_bias, else NULL */
    const float *q_norm;         /* [head_dim] with desc.qk_norm, else NULL */
    const float *k_norm;         /* [head_dim] with desc.qk_norm, else NULL */
    const float *post_attn_norm; /* [hidden] with desc.sandwich_norm, else NULL */
    const float *ffn_norm;       /* [hidden] (pre-FFN norm) */
    af_weight w_gate;            /* [ffn, hidden] */
    af_weight w_up;              /* [ffn, hidden] */
    af_weight w_down;            /* [hidden, ffn] */
    const float *post_ffw_norm;  /* [hidden] with desc.sandwich_norm, else NULL */
    float rope_base;             /* RoPE theta of this layer */
    int64_t window;              /* sliding window (keys seen incl. self), 0 = global */
    af_layer_dev dv;             /* the vectors above on the model's device (af_model_import) */
} af_layer;

struct af_model {
    const af_ctx *ctx;      /* borrowed (af_model_load): threads, kernel table, precision */
    af_gguf *gguf;          /* owned: the mapping the weights point into (GGUF file), or NULL */
    af_hf_weights *hf;      /* owned: the SafeTensors mappings (Hugging Face directory), or NULL */
    uint64_t file_bytes;    /* bytes of the mapped weight file(s) */
    void **owned_w;         /* owned: weight copies made at load (HF llama q/k rows permuted to the
                             * GGUF order, misaligned tensors) [n_owned_w] */
    int32_t n_owned_w;
    af_tokenizer *tok;      /* owned; NULL if the file has no (supported) tokenizer */
    af_model_config cfg;
    af_arch_desc desc;      /* what the layer walk does for this architecture */
    af_weight tok_embd;     /* [vocab, hidden] */
    af_weight output;       /* [vocab, hidden] (== tok_embd when tied) */
    const float *output_norm; /* [hidden] */
    af_layer *layers;       /* [num_hidden_layers], owned */
    float *owned_f32;       /* owned: norms that were stored as F16/BF16, converted */
    void *owned_quant;      /* owned (af_free_aligned): projections requantized at load (af_model_requantize) */
    size_t owned_quant_bytes;
    char tok_error[256];    /* why `tok` is NULL (message of the failed tokenizer load) */
    const float *output_norm_dev; /* output_norm on the device */
    int imported;           /* 1: the dev addresses are set (af_model_import) */
    int weights_converted;  /* projections whose type the device converted at import (said once) */
};

/* Import every weight and vector of m into m->ctx's device (kernels/backend.h import_weight; the
 * CPU backend returns the host addresses, no copy); called by af_model_load after the optional
 * requantization, and again by af_model_requantize when the weights changed (the previous imports
 * released first). Errors: those of import_weight (AF_ERR_NOMEM, AF_ERR_UNSUPPORTED), naming the
 * tensor; on error nothing stays imported. */
af_status af_model_import(af_model *m);
/* Release what af_model_import imported (af_model_free calls it). */
void af_model_release(af_model *m);
/* Whether ctx may run model m: its device is the model's, or its memory is host memory (the CPU
 * reads the host views: a CPU fallback runs any model). Errors: AF_ERR_INVALID_ARG naming both
 * devices. */
af_status af_model_check_ctx(const af_model *m, const af_ctx *ctx);

/* The address and block type of w that ctx's ops read: the host view on a host-memory device
 * (the CPU), else the imported device address. */
const void *af_weight_dev(const af_ctx *ctx, const af_weight *w, uint32_t *type);

/* Quantize the frozen projection weights of every layer (attn q/k/v/o, ffn gate/up/down; not the
 * embeddings, LM head, norms or biases) from F32/F16/BF16 to `type` (AF_TYPE_NF4, AF_TYPE_Q8_0,
 * AF_TYPE_F16 or AF_TYPE_BF16) into one buffer owned by the model, releasing the mapped pages of
 * the originals. Called by af_model_load when the context asks for it (af_ctx_params.quantize);
 * model/requantize.c. Projections already of `type`, or whose in_features is not a multiple of its
 * block size, are kept (*n_kept); *n_done counts the converted ones (either may be NULL).
 * Errors: AF_ERR_UNSUPPORTED (a projection already in another quantized type: refused, naming it),
 * AF_ERR_INVALID_ARG (other target type, or already requantized), AF_ERR_NOMEM; on error the
 * model is unchanged. */
af_status af_model_requantize(af_model *m, uint32_t type, int *n_done, int *n_kept);

/* Dequantize row `r` of W into dst [W.cols]. */
void af_weight_row(const af_weight *w, int64_t r, float *dst);

/* The layer walk, the LM head and the inference forward are in model/transformer.h. */

#endif /* AF_MODEL_H */
