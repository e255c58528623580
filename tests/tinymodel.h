/*
 * tinymodel.h — tiny random transformers written as GGUF files, for engine and LoRA tests.
 * Not built on its own: test files #include "tinymodel.c".
 *
 * The model has the tensors and keys model.c reads for "llama", "gemma3", "qwen2" or "qwen3"
 * (docs/FORMATS.md §3-§5b): token_embd (F32), output_norm, and per layer attn_norm,
 * attn_q/k/v/output, ffn_norm, ffn_gate/up/down (+ attn_q_norm, attn_k_norm, post_attention_norm,
 * post_ffw_norm for gemma3; + attn_q/k/v.bias U(-0.2, 0.2) for qwen2; + attn_q_norm, attn_k_norm
 * for qwen3),
 * projection matrices quantized to `wtype` with af_quantize_row. No tokenizer (af_model_load
 * accepts that) except with tm_write_bpe. Weights: U(-1/sqrt(in), 1/sqrt(in)) * wscale; norm
 * weights 1 + U(-0.2, 0.2).
 */
#ifndef AF_TINYMODEL_H
#define AF_TINYMODEL_H

#include "afinar.h"
#include "afinar_app.h"

#include <stdint.h>

typedef struct tm_spec {
    const char *arch; /* "llama", "gemma3", "qwen2" or "qwen3" */
    uint32_t wtype;   /* af_type of the projection matrices */
    int hidden, ffn, n_head, n_kv_head, head_dim, n_layer, vocab;
    int window;       /* gemma3 sliding window */
    uint64_t seed;
    int n_ctx;        /* context_length written to the file (0: 256) */
} tm_spec;

/* Small defaults: hidden 64 / ffn 128 (or 256 / 256 with head_dim 64 when wtype is a K-quant). */
tm_spec tm_default(const char *arch, uint32_t wtype);

/* Write the model to `path`. Errors: as af_gguf_writer_*. */
af_status tm_write(const tm_spec *s, const char *path);

/* Write the model to `path` (as tm_write) with a byte-level gpt2 BPE tokenizer
 * (tokenizer.ggml.model and .pre "gpt2", keys after the model's, before the tensors): token ids
 * 0..255 are the GPT-2 byte-to-unicode symbols of bytes 0..255 as UTF-8 (HF bytes_to_unicode),
 * ids 256 + i are extra[i], i in [0, n_extra); all are normal tokens (type 1) except the last
 * extra one, a control token (type 3) that is also the BOS and EOS id. merges: n_merges "left
 * right" pairs (tokenizer.ggml.merges, highest priority first). The strings are only read.
 * Errors: AF_ERR_INVALID_ARG unless s->vocab == 256 + n_extra and n_extra >= 1, n_merges >= 0;
 * else as af_gguf_writer_*. */
af_status tm_write_bpe(const tm_spec *s, const char *path, const char *const *extra, int n_extra,
                       const char *const *merges, int n_merges);

/* tm_write_bpe without merges, for tests of a tokenizer that does not fit its model: the embedding
 * has s->vocab rows whatever the tokenizer's 256 + n_extra tokens, and the stored BOS / EOS ids
 * are `bos` / `eos` (in range or not). Errors: AF_ERR_INVALID_ARG when n_extra < 1; else as
 * af_gguf_writer_*. */
af_status tm_write_bpe_misfit(const tm_spec *s, const char *path, const char *const *extra, int n_extra, uint32_t bos,
                              uint32_t eos);

/* Write to a unique temporary file and load it; the file is removed after loading (the mapping
 * stays valid). *out: free with af_model_free. */
af_status tm_load(const tm_spec *s, af_model **out);

#endif
