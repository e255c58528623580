/*
 * hf_config.h — Hugging Face checkpoint directories: config.json (transformers PretrainedConfig as
 * saved by save_pretrained) and the weights (model.safetensors, or shards listed by
 * model.safetensors.index.json), docs/FORMATS.md §12.
 *
 * config.json keys read (transformers 4.x and 5.x spellings):
 *   model_type                 "llama" | "gemma3_text" | "qwen2" | "qwen3" | "gemma4_text" -> architecture
 *                              "llama" | "gemma3" | "qwen2" | "qwen3" | "gemma4" (llama.cpp's names); other
 *                              types, mixture-of-experts keys (num_experts, num_local_experts, ...)
 *                              and vision/audio configs (vision_config, ...) are refused
 *   hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
 *   rms_norm_eps                required
 *   num_key_value_heads        default num_attention_heads
 *   head_dim                   default hidden_size / num_attention_heads (null = default)
 *   max_position_embeddings    default 2048
 *   tie_word_embeddings        default per architecture (transformers' class defaults: llama,
 *                              qwen2, qwen3 false; gemma3_text true)
 *   rope_theta                 top-level (4.x) or rope_parameters.rope_theta (5.x) or
 *                              rope_parameters.full_attention.rope_theta (5.x gemma3); default 1e4
 *   rope_local_base_freq       gemma3 sliding layers (4.x) or
 *                              rope_parameters.sliding_attention.rope_theta (5.x); default 1e4
 *   rope_scaling / rope_type   only none/"default" (or linear with factor 1) is supported
 *   query_pre_attn_scalar      gemma3 attention scale 1/sqrt(value); default head_dim
 *   sliding_window             keys seen by a sliding layer incl. itself (null = none)
 *   layer_types                per layer "sliding_attention" | "full_attention"
 *   sliding_window_pattern     (or _sliding_window_pattern) period: layer il is global when
 *                              (il + 1) % period == 0; used when layer_types is absent
 *   final_logit_softcapping    null or > 0; attn_logit_softcapping must be null
 *   hidden_act / hidden_activation, attention_bias, mlp_bias: checked against the architecture
 *   bos_token_id, eos_token_id (int or list: first), pad_token_id: informational, -1 when absent
 * gemma4_text only (transformers Gemma4TextConfig, docs/FORMATS.md §5c):
 *   per_layer_config           {"<layer>": {"head_dim", "num_key_value_heads"}}
 *                              sparse per-layer overrides; when absent, the global layers get
 *                              global_head_dim (default 512) and, with attention_k_eq_v,
 *                              num_global_key_value_heads (transformers' __post_init__)
 *   num_kv_shared_layers       the last N layers reuse the K/V of the last earlier layer of their type
 *   use_double_wide_mlp        those layers' FFN is 2 x intermediate_size
 *   attention_k_eq_v           global layers have no v_proj: v = k_proj output
 *   hidden_size_per_layer_input, vocab_size_per_layer_input   PLE (0/null = none; the vocabulary must
 *                              equal vocab_size)
 *   rope_parameters.full_attention {rope_type "proportional", partial_rotary_factor, rope_theta},
 *   rope_parameters.sliding_attention {rope_type "default", rope_theta}
 *   enable_moe_block true, use_bidirectional_attention "all": refused
 * Every error names the file and the field.
 */
#ifndef AF_HF_CONFIG_H
#define AF_HF_CONFIG_H

#include "core/core.h"
#include "formats/safetensors.h"

#include <stddef.h>
#include <stdint.h>

#define AF_HF_MAX_LAYERS 1024

typedef struct af_hf_config {
    char model_type[32];        /* as in the file */
    char architecture[32];      /* llama.cpp's name: llama, gemma3, qwen2, qwen3 */
    int32_t hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
    int32_t intermediate_size, vocab_size, max_position_embeddings;
    int32_t tie_word_embeddings;
    float rms_norm_eps, rope_theta, rope_theta_swa;
    float query_pre_attn_scalar; /* 0 when absent */
    int64_t sliding_window;      /* 0 when absent/null */
    int32_t sliding_window_pattern; /* 0 when absent */
    uint8_t *layer_sliding;      /* [num_hidden_layers] 1 = sliding layer, from layer_types; NULL if absent; owned */
    float final_logit_softcapping; /* 0 = off */
    int32_t attention_bias;      /* 1 when q/k/v/o biases are declared */
    int32_t bos_token_id, eos_token_id, pad_token_id;
    char dtype[16];              /* torch_dtype / dtype as written ("" when absent) */
    /* gemma4_text (0 / NULL for the other types) */
    int32_t *layer_head_dim;     /* [num_hidden_layers] per-layer head_dim; owned */
    int32_t *layer_kv_heads;     /* [num_hidden_layers] per-layer num_key_value_heads; owned */
    int32_t *layer_ff;           /* [num_hidden_layers] per-layer FFN width; owned */
    float rope_partial_full;     /* full_attention partial_rotary_factor of the proportional RoPE (1 = all pairs) */
    int32_t num_kv_shared_layers, hidden_size_per_layer_input, vocab_size_per_layer_input, attention_k_eq_v;
} af_hf_config;

/* Parse config.json text `json` [len] (need not be NUL-terminated); `label` names the file in
 * messages. Fills *c (free its owned parts with af_hf_config_free). Errors: AF_ERR_FORMAT (not a
 * JSON object, missing key, wrong type, value out of range), AF_ERR_UNSUPPORTED (model type, MoE,
 * vision, rope scaling, activation, softcapping of attention logits), AF_ERR_NOMEM. */
af_status af_hf_config_parse(const char *json, size_t len, const char *label, af_hf_config *c);
void af_hf_config_free(af_hf_config *c);

/* The weights of an HF directory: model.safetensors, or the shards named by
 * model.safetensors.index.json ("weight_map": tensor -> file name, a plain file name in the
 * directory). All files mmapped and validated by the SafeTensors reader (formats/safetensors.h). */
typedef struct af_hf_weights af_hf_weights;

/* Open the weights of directory `dir`. Errors: AF_ERR_IO (no model.safetensors nor index, a shard
 * missing: the message names the index and the shard), AF_ERR_FORMAT (index not JSON, weight_map
 * missing or not string -> string, a shard name with '/', a tensor the index lists missing from its
 * shard, a tensor in two shards), errors of af_st_open, AF_ERR_NOMEM. */
af_status af_hf_weights_open(const char *dir, af_hf_weights **out);
void af_hf_weights_close(af_hf_weights *w);
/* Tensor by HF name across all shards; NULL when absent. `*file` (may be NULL) gets its shard. */
const af_st_tensor *af_hf_weights_find(const af_hf_weights *w, const char *name, const af_st_file **file);
/* Number of shards, shard i, total bytes of all shard files. */
size_t af_hf_weights_n_files(const af_hf_weights *w);
const af_st_file *af_hf_weights_file(const af_hf_weights *w, size_t i);
uint64_t af_hf_weights_bytes(const af_hf_weights *w);

/* Read `dir`/`name` (a JSON file) of at most `max` bytes (size checked with stat before any
 * allocation) into a NUL-terminated malloc'ed buffer. Errors: AF_ERR_NOT_FOUND (absent), AF_ERR_IO,
 * AF_ERR_FORMAT (larger than max), AF_ERR_NOMEM; the message names the file. */
af_status af_hf_read_json_file(const char *dir, const char *name, size_t max, char **out, size_t *len);

#endif /* AF_HF_CONFIG_H */
