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
 * Context: threads, kernel path, precision (created once, passed to models)
 *
 * An af_ctx holds every run-time setting of the compute kernels. It is created once, is read-only
 * afterwards (safe to share between threads), and is borrowed by the models loaded with it (it
 * must outlive them); sessions and trainers use their model's context. The CPU kernel variant
 * (scalar / AVX2 / AVX-512, bf16 where present) is chosen once, when the context is created.
 * ------------------------------------------------------------------------------------------- */
typedef struct af_ctx af_ctx;

typedef struct af_ctx_params {
    /* Compute threads. <= 0: all available (OpenMP's default: OMP_NUM_THREADS, else the cores).
     * Without OpenMP compiled in, always 1. */
    int n_threads;
    /* Kernel path: NULL or "auto" (best the CPU runs), "scalar", "avx2", "avx512". */
    const char *kernel_path;
    /* Precision of the large matrix products (training steps, prompt evaluation; n > 4 rows):
     *  NULL or "f32": f32 operands and accumulation, exact up to f32 summation order;
     *  "bf16": operands rounded to bfloat16 (round to nearest even), products accumulated in f32
     *         with AVX512_BF16 VDPBF16PS, about 2x the f32 throughput; per product
     *         |y - y_exact| <= (2^-8 + k 2^-24) sum_k |x_k||w_k|, like PyTorch's CPU bf16
     *         autocast of Linear layers. It applies to every product on the packed GEMM path:
     *         frozen weights, LoRA factors (n·k >= 4096) and the blocked attention of training
     *         sequences (QKᵀ, PV and their gradients, as autocast does for bmm). Elementwise ops,
     *         softmax, norms, the loss and the optimizer stay f32. */
    const char *matmul_precision;
    /* 1: single-token (decode) products with int8-quantized activations, as llama.cpp does:
     * faster, but logits move by up to ~0.5 on SmolLM2 compared with exact f32 (greedy text can
     * then differ from the reference stack). 0 (default): exact f32 decode. */
    int int8_activations;
} af_ctx_params;

/* Defaults: n_threads 0 (all), kernel_path "auto", matmul_precision "f32", int8_activations 0. */
void af_ctx_params_default(af_ctx_params *p);

/* New context from `p` (NULL: defaults). `*out`: caller frees with af_ctx_free() after every
 * model loaded with it. Errors: AF_ERR_INVALID_ARG (unknown kernel path or precision name),
 * AF_ERR_UNSUPPORTED (a kernel path this CPU cannot run; "bf16" where the CPU lacks AVX512_BF16
 * or the kernel path is not avx512), AF_ERR_NOMEM. */
af_status af_ctx_new(const af_ctx_params *p, af_ctx **out);

/* Frees a context. NULL is ignored. */
void af_ctx_free(af_ctx *ctx);

/* The settings in use, as params that af_ctx_new() accepts (to derive a context that differs in
 * one setting). kernel_path is the resolved path name ("scalar", "avx2" or "avx512"), n_threads
 * the resolved count; strings are static. */
void af_ctx_get_params(const af_ctx *ctx, af_ctx_params *p);

int af_ctx_n_threads(const af_ctx *ctx);
/* "scalar", "avx2" or "avx512". Static string. */
const char *af_ctx_kernel_path(const af_ctx *ctx);
/* "f32" or "bf16". Static string. */
const char *af_ctx_matmul_precision(const af_ctx *ctx);
int af_ctx_int8_activations(const af_ctx *ctx);

/* Human-readable summary of the CPU features detected at run time and the kernel path of `ctx`,
 * e.g. "avx512f avx512bw avx512_bf16 avx2 fma -> avx512". Borrowed: valid while ctx lives. */
const char *af_ctx_describe(const af_ctx *ctx);

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
 * `ctx`: the context its computations run under (borrowed: it must outlive the model); NULL =
 * the process default context (auto kernel path, all threads, f32, exact decode), created at
 * first use and never freed. Sessions and trainers of the model use its context.
 * `*out` receives a new model; caller frees with af_model_free().
 * Errors: AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_UNSUPPORTED (architecture or tensor type),
 *         AF_ERR_NOT_FOUND (required key or tensor), AF_ERR_NOMEM. */
af_status af_model_load(const af_ctx *ctx, const char *path, af_model **out);

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
 * Borrows `model`, which must outlive the session; runs under the model's context.
 * Errors: AF_ERR_NOMEM, AF_ERR_INVALID_ARG. */
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

/* ---------------------------------------------------------------------------------------------
 * LoRA training engine
 *
 * A trainer holds LoRA adapters (Hu et al. 2021; PEFT conventions: y = x·Wᵀ + scale·(dropout(x)·Aᵀ)·Bᵀ,
 * A [r, in], B [out, r], scale = lora_alpha/r or lora_alpha/sqrt(r) with rsLoRA) on the chosen
 * projections of every layer of a loaded model, an optional sequence-classification head
 * (logits = pool(final hidden states)·Wᵀ + b, W [num_classes, hidden], b [num_classes]), their
 * gradients and AdamW state (PyTorch torch.optim.AdamW semantics). The model stays frozen and
 * quantized. One optimizer step is:
 *     af_lora_trainer_accumulate() once per micro-batch   (forward + loss + backward, ADDS gradients)
 *     af_lora_trainer_step()                               (clip, AdamW, zero the gradients)
 * which is exactly what `afinar train` does.
 *
 * Packed batches (every function taking tokens): the samples of a batch are concatenated without
 * padding; sample b owns tokens [seq_start[b], seq_start[b+1]) of `tokens`:
 *     tokens    [seq_start[n_samples]]   token ids in [0, vocab_size)
 *     seq_start [n_samples + 1]          seq_start[0] = 0, strictly increasing (no empty sample)
 * RoPE positions restart at 0 for every sample; attention never crosses a sample boundary.
 * All arrays are borrowed for the duration of the call.
 *
 * Losses are means over the batch's samples: weighted softmax cross-entropy for single-label data
 * (sum_b w[y_b]·(-log softmax(logits_b)[y_b]) / n_samples) and BCE-with-logits averaged over the
 * [n_samples, num_classes] entries for multi-label data.
 *
 * Determinism: results depend only on the options, the data and the call sequence (not on the
 * thread count). LoRA A is initialised from U(-1/sqrt(in), 1/sqrt(in)) with a counter-based RNG keyed
 * by opts.seed, B = 0, the head W from U(-1/sqrt(hidden), 1/sqrt(hidden)), b = 0.
 * Threading: a trainer is used by one thread at a time; several trainers may share one model.
 * ------------------------------------------------------------------------------------------- */
typedef struct af_lora_trainer af_lora_trainer;

/* Pooling of a sample's final hidden states before the head. */
typedef enum af_head_pooling {
    AF_POOLING_MEAN = 0, /* mean over the sample's tokens */
    AF_POOLING_LAST = 1  /* the sample's last token (transformers *ForSequenceClassification) */
} af_head_pooling;

/* Trainer options. Fill with af_lora_trainer_opts_defaults() and change what you need (a
 * zero-filled struct is NOT valid: r = 0 is refused). Defaults in parentheses. */
typedef struct af_lora_trainer_opts {
    /* ---- adapters ---- */
    int32_t r;               /* LoRA rank (16); 1 <= r <= min(in, out) of every targeted projection */
    float lora_alpha;        /* (32) > 0 */
    float lora_dropout;      /* (0.05) in [0, 1), on the adapter input during accumulate only */
    int32_t use_rslora;      /* (0) 1: scale = lora_alpha / sqrt(r) instead of lora_alpha / r */
    const char *targets;     /* ("qv") "qv", "qkv", "all-linear", or a comma list of
                                q,k,v,o,gate,up,down (or q_proj, ...); borrowed for af_lora_trainer_new */
    uint64_t seed;           /* (42) initialisation and dropout masks */
    /* ---- head ---- */
    int32_t num_classes;     /* (0) 0: no head (adapters only; accumulate/forward then fail) */
    af_head_pooling pooling; /* (AF_POOLING_MEAN) */
    int32_t head_bias;       /* (0) 0: b stays 0 (its gradient is dropped), as PEFT's bias-less score */
    int32_t checkpointing;   /* (0) 1: recompute activations layer by layer in the backward: far less
                                memory, one more forward of compute, bitwise identical results */
    /* ---- optimizer ---- */
    float lr;                /* (2e-4) used by af_lora_trainer_step when it is given lr < 0 */
    float weight_decay;      /* (0.01) decoupled; applied to LoRA A, B and head W, never to b */
    float beta1, beta2, eps; /* (0.9, 0.999, 1e-8) */
    float max_grad_norm;     /* (1.0) global L2 clipping threshold; <= 0 disables clipping */
} af_lora_trainer_opts;

/* Fill `o` with the defaults listed above. */
void af_lora_trainer_opts_defaults(af_lora_trainer_opts *o);

/* Create a trainer on `model` (borrowed: must outlive the trainer; the trainer runs under the
 * model's context) with `opts` (NULL: defaults;
 * copied, `targets` is parsed here). Parameters are initialised from opts.seed; gradients and AdamW
 * state start at zero. `*out`: caller frees with af_lora_trainer_free().
 * Errors: AF_ERR_INVALID_ARG (NULL model/out, r < 1 or above min(in, out) of a target, lora_alpha
 * <= 0, lora_dropout outside [0, 1), unknown target, num_classes < 0, pooling not an
 * af_head_pooling, lr / weight_decay / eps negative or not finite, beta outside [0, 1)),
 * AF_ERR_NOMEM. */
af_status af_lora_trainer_new(const af_model *model, const af_lora_trainer_opts *opts, af_lora_trainer **out);

/* Frees the trainer and everything it owns. NULL is ignored. */
void af_lora_trainer_free(af_lora_trainer *tr);

/* Class weights of the cross-entropy: `w` [num_classes] (copied; each finite and >= 0), or NULL for
 * uniform weights (the default). Errors: AF_ERR_INVALID_ARG (NULL tr, no head, a bad weight). */
af_status af_lora_trainer_set_class_weights(af_lora_trainer *tr, const float *w);

/* Forward + loss + backward of one packed micro-batch (training mode: LoRA dropout active),
 * ADDING the gradient of (grad_scale · mean loss) into the trainer's gradient. For the gradient of
 * the mean over a whole step of several micro-batches, pass grad_scale = n_samples / step_samples.
 *   labels [n_samples] class ids in [0, num_classes)
 *   *loss   receives the batch's mean loss (unscaled); required
 *   logits  [n_samples, num_classes] receives the logits when not NULL
 * Dropout masks are keyed by (opts.seed, optimizer step index, micro-batch index within the step),
 * so they are the same masks `afinar train` uses.
 * A non-finite loss is reported in *loss with AF_OK; no gradient is added and the next
 * af_lora_trainer_step() skips its update.
 * Errors: AF_ERR_INVALID_ARG (NULL argument, no head, n_samples < 1, bad seq_start, token or label
 * out of range: the message names the sample/position), AF_ERR_NOMEM (activations of the batch:
 * see opts.checkpointing). On error the gradient is unchanged. */
af_status af_lora_trainer_accumulate(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                     int32_t n_samples, const int32_t *labels, float grad_scale, double *loss,
                                     float *logits);

/* As af_lora_trainer_accumulate() for multi-label data: `targets` [n_samples, num_classes] with
 * entries in [0, 1] (multi-hot), loss BCE-with-logits. */
af_status af_lora_trainer_accumulate_multilabel(af_lora_trainer *tr, const int32_t *tokens,
                                                const int32_t *seq_start, int32_t n_samples, const float *targets,
                                                float grad_scale, double *loss, float *logits);

/* One optimizer step on the accumulated gradient, then the gradient is zeroed:
 *   head-bias gradient dropped unless opts.head_bias; global L2 norm clipped to opts.max_grad_norm
 *   (torch.nn.utils.clip_grad_norm_); AdamW with learning rate `lr` (lr >= 0, e.g. from your
 *   schedule; lr < 0: opts.lr).
 * `grad_norm` (may be NULL) receives the PRE-clip global gradient norm (NaN when a micro-batch loss
 * was non-finite).
 * Non-finite loss or gradient: the update is SKIPPED (parameters and AdamW moments unchanged, the
 * gradient is still zeroed, the step still counts for af_lora_trainer_step_count) and
 * AF_ERR_RANGE is returned; the trainer stays usable, so a caller may count and continue.
 * Errors: AF_ERR_INVALID_ARG (NULL tr, lr NaN, nothing accumulated since the last step),
 * AF_ERR_RANGE (skipped, as above). */
af_status af_lora_trainer_step(af_lora_trainer *tr, float lr, double *grad_norm);

/* Discard the gradient accumulated since the last step (and a pending non-finite flag). */
void af_lora_trainer_zero_grad(af_lora_trainer *tr);

/* Evaluation forward (no dropout, no gradient): logits [n_samples, num_classes] of a packed batch.
 * Errors: as af_lora_trainer_accumulate() (labels are not needed). */
af_status af_lora_trainer_forward(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                  int32_t n_samples, float *logits);

/* Optimizer steps taken so far (updates applied + skipped), 0 for NULL. */
int64_t af_lora_trainer_step_count(const af_lora_trainer *tr);

/* Number of trainable floats (all LoRA A and B, then head W and b), 0 for NULL. */
int64_t af_lora_trainer_n_params(const af_lora_trainer *tr);

/* ---- Tensors, by their Hugging Face PEFT names ----
 * Tensor i in [0, n_tensors): for every layer l and every targeted projection in the order
 * q, k, v, o, gate, up, down: lora_A then lora_B, then (with a head) score.weight and score.bias:
 *   base_model.model.model.layers.{l}.self_attn.{q,k,v,o}_proj.lora_A.weight    [r, in]
 *   base_model.model.model.layers.{l}.self_attn.{q,k,v,o}_proj.lora_B.weight    [out, r]
 *   base_model.model.model.layers.{l}.mlp.{gate,up,down}_proj.lora_{A,B}.weight  same
 *   base_model.model.score.weight                                                [num_classes, hidden]
 *   base_model.model.score.bias      [num_classes] (reported as shape {num_classes, 1})
 * These are the names af_lora_trainer_save_adapter() writes. Contents are in PEFT's convention:
 * for llama GGUF models (q/k rows permuted by the GGUF converter), the rows of q_proj/k_proj lora_B
 * are given and taken in Hugging Face order, as PEFT holds them. The tensors together hold exactly
 * the n_params floats of the flat parameter vector. */
int32_t af_lora_trainer_n_tensors(const af_lora_trainer *tr);

/* Describe tensor i. Any output may be NULL. `*name`: borrowed, valid while `tr` lives;
 * shape {rows, cols}; `*offset`: float offset of the tensor's block in the flat parameter vector
 * (af_lora_trainer_get_params), which holds the same elements in afinar's internal row order.
 * Errors: AF_ERR_INVALID_ARG (NULL tr), AF_ERR_RANGE (i outside [0, n_tensors)). */
af_status af_lora_trainer_tensor_info(const af_lora_trainer *tr, int32_t i, const char **name, int64_t shape[2],
                                      int64_t *offset);

/* Index of the tensor called `name` (exact match) in `*index`.
 * Errors: AF_ERR_INVALID_ARG (NULL argument), AF_ERR_NOT_FOUND. */
af_status af_lora_trainer_find_tensor(const af_lora_trainer *tr, const char *name, int32_t *index);

/* Copy tensor i out to `out` [rows, cols] / in from `in` [rows, cols] (PEFT row order, see above).
 * Setting a tensor does not touch the gradient or the AdamW state.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; a non-finite value in `in`, then nothing is written),
 * AF_ERR_RANGE (bad i). */
af_status af_lora_trainer_get_tensor(const af_lora_trainer *tr, int32_t i, float *out);
af_status af_lora_trainer_set_tensor(af_lora_trainer *tr, int32_t i, const float *in);

/* ---- Whole state, for checkpoints written by other programs ----
 * The flat parameter vector [n_params] in afinar's internal order (layout: af_lora_trainer_tensor_info
 * offsets; q/k lora_B rows of llama models in GGUF order). Restoring params, AdamW moments and the
 * two counters into a trainer created with the same model and options continues a run bit for bit.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; set_params: a non-finite value, nothing written). */
af_status af_lora_trainer_get_params(const af_lora_trainer *tr, float *out);
af_status af_lora_trainer_set_params(af_lora_trainer *tr, const float *in);

/* AdamW first/second moments m, v [n_params] (either may be NULL to skip), `adam_t` (updates
 * applied; bias correction uses it) and `step_count` (af_lora_trainer_step_count; keys the dropout
 * masks); pointers may be NULL to skip. set: v must be >= 0, t and step_count >= 0, adam_t <=
 * step_count. Errors: AF_ERR_INVALID_ARG (NULL tr, an invalid value: nothing is written). */
af_status af_lora_trainer_get_optim_state(const af_lora_trainer *tr, float *m, float *v, int64_t *adam_t,
                                          int64_t *step_count);
af_status af_lora_trainer_set_optim_state(af_lora_trainer *tr, const float *m, const float *v,
                                          const int64_t *adam_t, const int64_t *step_count);

/* ---- PEFT adapter directories ----
 * Save the adapters (+ head) to `dir` (created if missing) as a Hugging Face PEFT adapter:
 * adapter_model.safetensors (F32, the names above), adapter_config.json (task_type SEQ_CLS with a
 * head, CAUSAL_LM without; base_model_name_or_path = `base_model_name`, may be NULL) and afinar.json
 * (architecture, pooling, LoRA settings). score.bias is written only with opts.head_bias (PEFT's
 * score layer has none). Each file is written atomically.
 * Errors: AF_ERR_INVALID_ARG (NULL tr/dir), AF_ERR_IO (naming the file), AF_ERR_NOMEM. */
af_status af_lora_trainer_save_adapter(const af_lora_trainer *tr, const char *dir, const char *base_model_name);

/* Load an adapter directory (written by afinar or by PEFT's save_pretrained) into the trainer's
 * parameters. The directory must match the trainer: same r, lora_alpha, use_rslora, targets and
 * head shape (a head weight without bias sets b = 0). On success the gradient, the AdamW state and
 * the step count are reset (a fresh optimizer on the loaded weights); on error nothing changes.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; r / alpha / rslora mismatch), AF_ERR_IO (missing
 * files), AF_ERR_FORMAT (malformed files, unexpected tensors, wrong shapes, a non-finite value),
 * AF_ERR_NOT_FOUND (missing tensors), AF_ERR_UNSUPPORTED (not a plain LoRA adapter), AF_ERR_NOMEM. */
af_status af_lora_trainer_load_adapter(af_lora_trainer *tr, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* AFINAR_H */
