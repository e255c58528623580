/*
 * afinar.h — the public C API of afinar.
 *
 * afinar loads pretrained transformer language models (GGUF), runs them (prompt evaluation,
 * incremental decoding with a KV cache, sampling) and fine-tunes them with LoRA.
 *
 * Conventions (apply to every declaration below):
 *  - Every symbol starts with `af_`; every handle is opaque.
 *  - Functions that can fail return `af_status`. On failure a human-readable message
 *    ("FILE: field: problem at offset N") is kept per thread and read with af_last_error().
 *    The library never exits the process and never prints on its own (except where a
 *    function says it writes to a FILE* it was given).
 *  - Ownership is stated at each declaration: "caller frees with X" or "borrowed: valid while Y".
 *  - Tensors are row-major float32; shapes are written [rows, cols].
 */
#ifndef AFINAR_H
#define AFINAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AF_VERSION_MAJOR 0
#define AF_VERSION_MINOR 1
#define AF_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */
typedef enum af_status {
    AF_OK = 0,
    AF_ERR_IO = 1,          /* file missing, unreadable, short read, write failure */
    AF_ERR_FORMAT = 2,      /* malformed or truncated file, bad magic, out-of-bounds field */
    AF_ERR_UNSUPPORTED = 3, /* well-formed but not supported (architecture, tensor type, ...) */
    AF_ERR_NOMEM = 4,       /* allocation failed */
    AF_ERR_INVALID_ARG = 5, /* caller passed an invalid argument */
    AF_ERR_NOT_FOUND = 6,   /* a required key/tensor/token is missing */
    AF_ERR_RANGE = 7,       /* a value is outside its allowed range (e.g. context full) */
    AF_ERR_INTERNAL = 8     /* an internal invariant failed (a bug: please report) */
} af_status;

/* Name of a status code, e.g. "AF_ERR_FORMAT". Static string, never NULL. */
const char *af_status_name(af_status st);

/* The message describing the most recent failure on this thread ("" if none).
 * Borrowed: valid until the next afinar call on this thread. */
const char *af_last_error(void);

/* Library version string "MAJOR.MINOR.PATCH". Static. */
const char *af_version(void);

/* ---------------------------------------------------------------------------------------------
 * Runtime: CPU features and threads
 * ------------------------------------------------------------------------------------------- */

/* Human-readable summary of the CPU features detected at run time and the kernel path chosen,
 * e.g. "avx512f avx512bw avx512_bf16 avx2 fma -> avx512". Static string. */
const char *af_cpu_features(void);

/* Kernel path override: "auto" (default), "scalar", "avx2", "avx512". Paths the CPU cannot run
 * are refused with AF_ERR_UNSUPPORTED. Not thread-safe: call before any model work. */
af_status af_set_kernel_path(const char *name);

/* Single-token (decode) products with int8-quantized activations, as llama.cpp does: faster, but
 * logits move by up to ~0.5 on SmolLM2 compared with exact f32 (greedy text can then differ from
 * the reference stack). Off by default. Process-wide; set before any model work. */
void af_set_int8_activations(int on);

/* Number of threads used by compute kernels (OpenMP). n <= 0 selects all available cores.
 * Without OpenMP support compiled in, this is a no-op and kernels run on one thread. */
void af_set_num_threads(int n);
int af_get_num_threads(void);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */
typedef struct af_model af_model;

/* Hyper-parameters of a loaded model, named as in Hugging Face config.json. */
typedef struct af_model_config {
    char architecture[32];    /* "llama", "gemma3", ... (GGUF general.architecture) */
    int32_t vocab_size;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_hidden_layers;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;
    int32_t head_dim;
    int32_t max_position_embeddings; /* trained context length */
    float rms_norm_eps;
    float rope_theta;
    int32_t tie_word_embeddings; /* 1 when the output head reuses the token embedding */
} af_model_config;

/* Load a model from a GGUF file. The file is memory-mapped; quantized weights are used in place.
 * `*out` receives a new model; caller frees with af_model_free().
 * Errors: AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_UNSUPPORTED (architecture or tensor type),
 *         AF_ERR_NOT_FOUND (required key or tensor), AF_ERR_NOMEM. */
af_status af_model_load(const char *path, af_model **out);

/* Frees a model and unmaps its file. NULL is ignored. */
void af_model_free(af_model *model);

/* Borrowed: valid while `model` lives. */
const af_model_config *af_model_get_config(const af_model *model);

/* Print a human-readable description of a GGUF file to `fp`: architecture, hyper-parameters,
 * tokenizer kind and a table of tensors (name, type, shape, bytes). Works on any valid GGUF,
 * including architectures afinar cannot run. Errors as af_model_load() for the container. */
af_status af_gguf_describe(const char *path, FILE *fp);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer (read from the model file)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_tokenizer af_tokenizer;

/* Borrowed: the model's tokenizer, valid while `model` lives. NULL if the file has none. */
const af_tokenizer *af_model_tokenizer(const af_model *model);

/* Encode UTF-8 `text[0..len)` into token ids.
 *  add_special:   prepend BOS / append EOS as the model's metadata asks (add_bos_token ...).
 *  parse_special: match control/special token texts (e.g. "<|im_start|>") in `text` as single
 *                 tokens; when 0 they are tokenized as plain text.
 * `*ids` receives a malloc'ed array of `*n_ids` ids; caller frees with free().
 * Invalid UTF-8 is tokenized byte by byte (never an error). Errors: AF_ERR_NOMEM. */
af_status af_tokenize(const af_tokenizer *tok, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n_ids);

/* Text of one token as bytes (byte-level BPE symbols mapped back to bytes).
 * Writes up to `cap` bytes into `buf` (not NUL-terminated) and returns the full byte length,
 * or -1 if `id` is out of range. Control tokens render as their text only if `render_special`. */
int af_token_to_bytes(const af_tokenizer *tok, int32_t id, int render_special, char *buf, size_t cap);

/* Decode ids into a malloc'ed NUL-terminated string in `*text` (caller frees with free()).
 * Errors: AF_ERR_RANGE (an id out of range), AF_ERR_NOMEM. */
af_status af_detokenize(const af_tokenizer *tok, const int32_t *ids, size_t n_ids, int render_special,
                        char **text);

int32_t af_tokenizer_vocab_size(const af_tokenizer *tok);
int32_t af_token_bos(const af_tokenizer *tok); /* -1 when the model has none */
int32_t af_token_eos(const af_tokenizer *tok); /* -1 when the model has none */
/* 1 when `id` ends generation (EOS, EOT, <|im_end|>, <end_of_turn>, ...). */
int af_token_is_eog(const af_tokenizer *tok, int32_t id);

/* Chat template application for a single user turn, ready for generation.
 * Supports ChatML (<|im_start|>role ... <|im_end|>) and Gemma (<start_of_turn>) families,
 * chosen from the model's tokenizer.chat_template. `system` may be NULL.
 * `*out` receives a malloc'ed NUL-terminated prompt; caller frees with free().
 * Errors: AF_ERR_UNSUPPORTED (no known template), AF_ERR_NOMEM. */
af_status af_chat_format(const af_model *model, const char *system, const char *user, char **out);

/* ---------------------------------------------------------------------------------------------
 * Inference sessions: KV cache, evaluation, sampling
 * ------------------------------------------------------------------------------------------- */
typedef struct af_session af_session;

/* A session holds a KV cache of `n_ctx` positions (<= 0: the model's max_position_embeddings,
 * capped at 4096) for one sequence. `*out`: caller frees with af_session_free().
 * Borrows `model`, which must outlive the session. Errors: AF_ERR_NOMEM, AF_ERR_INVALID_ARG. */
af_status af_session_new(const af_model *model, int n_ctx, af_session **out);
void af_session_free(af_session *s);

/* Forget all cached positions (the next eval starts at position 0). */
void af_session_reset(af_session *s);

/* Number of positions currently in the cache. */
int af_session_n_past(const af_session *s);

/* Evaluate `n` tokens appended at the current position (batched prompt evaluation when n > 1).
 * If `logits` is not NULL it receives the logits of the LAST token, [vocab_size] floats;
 * if `all_logits` is not NULL it receives logits of every token, [n, vocab_size] row-major.
 * Errors: AF_ERR_RANGE (cache full or token id out of range), AF_ERR_NOMEM. */
af_status af_session_eval(af_session *s, const int32_t *tokens, int n, float *logits, float *all_logits);

/* Sampling parameters. temperature <= 0 is greedy (argmax; ties -> lowest id). top_k <= 0 and
 * top_p >= 1 disable those filters. Order: top-k, then temperature, then top-p (llama.cpp order). */
typedef struct af_sampling {
    float temperature;
    int32_t top_k;
    float top_p;
    uint64_t seed;
} af_sampling;

/* Sample a token id from `logits [vocab_size]`. `rng_state` is updated (a 64-bit state seeded
 * from af_sampling.seed by the caller; see af_rng_seed). Never fails for finite input. */
int32_t af_sample(const float *logits, int32_t vocab_size, const af_sampling *p, uint64_t *rng_state);
uint64_t af_rng_seed(uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* AFINAR_H */
