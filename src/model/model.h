/*
 * model.h — a loaded transformer: hyper-parameters, the per-architecture table, and views of the
 * frozen weights inside the memory-mapped GGUF (quantized blocks are used in place).
 *
 * Architectures: "llama" (SmolLM2, Llama 2/3 style: pre-norm, SwiGLU, RoPE NORM mode because the
 * GGUF converter permuted q/k rows) and "gemma3" (sandwich norms, q/k norms, GeGLU, embedding
 * scaled by sqrt(hidden), RoPE NEOX mode, sliding-window layers with their own RoPE base).
 * Sources: llama.cpp src/models/llama.cpp and src/models/gemma3.cpp, transformers
 * modeling_llama.py / modeling_gemma3.py, summarised in shared/reference/FORMATS.md §3-§5.
 */
#ifndef AF_MODEL_H
#define AF_MODEL_H

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

typedef enum af_arch { AF_ARCH_LLAMA = 0, AF_ARCH_GEMMA3 = 1 } af_arch;

/* A frozen weight matrix W [rows = out_features, cols = in_features] in its stored type.
 * Row r starts at (const char *)data + r * af_row_bytes(type, cols). */
typedef struct af_weight {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
} af_weight;

typedef struct af_layer {
    const float *attn_norm;      /* [hidden] */
    af_weight wq;                /* [n_head*head_dim, hidden] */
    af_weight wk;                /* [n_kv_head*head_dim, hidden] */
    af_weight wv;                /* [n_kv_head*head_dim, hidden] */
    af_weight wo;                /* [hidden, n_head*head_dim] */
    const float *q_norm;         /* [head_dim] gemma3 only, else NULL */
    const float *k_norm;         /* [head_dim] gemma3 only, else NULL */
    const float *post_attn_norm; /* [hidden] gemma3 only, else NULL */
    const float *ffn_norm;       /* [hidden] (pre-FFN norm) */
    af_weight w_gate;            /* [ffn, hidden] */
    af_weight w_up;              /* [ffn, hidden] */
    af_weight w_down;            /* [hidden, ffn] */
    const float *post_ffw_norm;  /* [hidden] gemma3 only, else NULL */
    float rope_base;             /* RoPE theta of this layer */
    int64_t window;              /* sliding window (keys seen incl. self), 0 = global */
} af_layer;

struct af_model {
    const af_ctx *ctx;      /* borrowed (af_model_load): threads, kernel table, precision */
    af_gguf *gguf;          /* owned: the mapping the weights point into */
    af_tokenizer *tok;      /* owned; NULL if the file has no (supported) tokenizer */
    af_model_config cfg;
    af_arch arch;
    int rope_neox;          /* 0: NORM pairs (2i, 2i+1); 1: NEOX pairs (i, i + d/2) */
    float attn_scale;       /* multiplies q·k */
    float embd_scale;       /* multiplies token embeddings (gemma3: sqrt(hidden)), else 1 */
    int act_gelu;           /* 0: SwiGLU (silu), 1: GeGLU (tanh gelu) */
    af_weight tok_embd;     /* [vocab, hidden] */
    af_weight output;       /* [vocab, hidden] (== tok_embd when tied) */
    const float *output_norm; /* [hidden] */
    af_layer *layers;       /* [num_hidden_layers], owned */
    float *owned_f32;       /* owned: norms that were stored as F16/BF16, converted */
    char tok_error[256];    /* why `tok` is NULL (message of the failed tokenizer load) */
};

/* Dequantize row `r` of W into dst [W.cols]. */
void af_weight_row(const af_weight *w, int64_t r, float *dst);

/* Scratch for the inference forward of up to `cap` tokens (see forward.c). */
typedef struct af_fwd_scratch {
    int64_t cap;
    float *x;    /* [cap, hidden] residual stream */
    float *h;    /* [cap, max(hidden, q_dim)] normed input / attention output */
    float *q;    /* [cap, q_dim] */
    float *k;    /* [cap, kv_dim] */
    float *v;    /* [cap, kv_dim] */
    float *o;    /* [cap, hidden] */
    float *g;    /* [cap, ffn] */
    float *u;    /* [cap, ffn] */
    int32_t *pos; /* [cap] */
} af_fwd_scratch;

af_status af_fwd_scratch_init(af_fwd_scratch *s, const af_model *m, int64_t cap);
void af_fwd_scratch_free(af_fwd_scratch *s);

/* Inference forward of n tokens at positions n_past .. n_past+n-1 (n <= s->cap), appending their
 * K/V to the caches k_cache/v_cache [num_layers][n_ctx][kv_dim] (position-major per layer).
 * On return s->x holds the final hidden states BEFORE the output norm, [n, hidden].
 * Token ids must be in [0, vocab) (checked by the caller). */
void af_forward_tokens(const af_model *m, af_fwd_scratch *s, const int32_t *tokens, int64_t n, int64_t n_past,
                       float *k_cache, float *v_cache, int64_t n_ctx);

/* logits[n, vocab] = output_norm(x[n, hidden]) · Wout^T  (x is normalised in place). */
void af_forward_logits(const af_model *m, float *logits, float *x, int64_t n);

#endif /* AF_MODEL_H */
