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
    AF_ERR_INTERNAL = 8,    /* an internal invariant failed (a bug: please report) */
    AF_ERR_CANCELLED = 9,   /* the caller's cancel flag was set (af_session_set_control,
                               af_lora_trainer_set_control, af_trainer_opts.cancel): the work stopped
                               at a layer boundary; nothing is wrong with the input */
    AF_ERR_INTERRUPTED = 10, /* stopped on request between two batches (af_ctx_set_interrupt) */
    AF_ERR_DEVICE = 11      /* a compute device failed: lost, out of device memory during a run,
                             * a shader or queue error (the message names the device and the op) */
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
    /* Compute threads (the calling thread and n_threads - 1 workers of the context's pool, started
     * at the first parallel operation and joined by af_ctx_free). <= 0: one per CPU this process
     * may run on (sched_getaffinity). */
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
    /* Waiting policy of the pool's workers: microseconds a worker keeps spinning (CPU pause hint)
     * after an operation, waiting for the next, before it sleeps in the kernel. While spinning,
     * dispatching the next operation costs no system call and no wake-up (the decode of one token
     * runs hundreds of operations); once asleep, an idle process uses no CPU. 0: sleep at once
     * (lowest CPU use, slowest dispatch); < 0: the default, 1000 (1 ms). Results do not depend
     * on it. */
    int poll_us;
    /* Base weights of the models loaded with this context (af_model_load), converted once after
     * loading, whatever the file: NULL or "none" (as stored), "nf4" (QLoRA's NormalFloat4: blocks
     * of 64 with an f32 absmax, codes and scales bit-identical to bitsandbytes' quantize_4bit;
     * no double quantization), "q8_0" (ggml's Q8_0), "f16", "bf16". Converted: the attention and
     * feed-forward projections of every layer (what bitsandbytes' Linear4bit replaces), from
     * F32/F16/BF16; embeddings, LM head, norms and biases stay as stored. A projection already in
     * another quantized type (Q4_K ...) makes af_model_load fail with AF_ERR_UNSUPPORTED naming
     * it. Training (LoRA) and inference run on the converted weights. */
    const char *quantize;
    /* Compute device (issue 14): NULL or "cpu"; "vulkan" (the first Vulkan device) or "vulkan:N";
     * "auto" (a Vulkan device when one is present, else the CPU; a run that does not fit the device
     * or whose device fails goes on on the CPU, saying so). Contexts opened on the same device
     * share it (its memory and the weights imported by models loaded with either).
     * `afinar devices` / af_backend_devices list what there is. */
    const char *device;
} af_ctx_params;

/* Defaults: n_threads 0 (all), kernel_path "auto", matmul_precision "f32", int8_activations 0,
 * poll_us 1000, quantize "none". */
void af_ctx_params_default(af_ctx_params *p);

/* New context from `p` (NULL: defaults). `*out`: caller frees with af_ctx_free() after every
 * model loaded with it. Errors: AF_ERR_INVALID_ARG (unknown kernel path, precision or quantize name),
 * AF_ERR_UNSUPPORTED (a kernel path this CPU cannot run; "bf16" where the CPU lacks AVX512_BF16
 * or the kernel path is not avx512), AF_ERR_NOMEM. */
af_status af_ctx_new(const af_ctx_params *p, af_ctx **out);

/* Frees a context. NULL is ignored. */
void af_ctx_free(af_ctx *ctx);

/* What `afinar devices` prints about one device and what the memory guard reads. */
typedef struct af_device_info {
    char backend[16];     /* "cpu", "vulkan", "guard" (debug) */
    int32_t index;        /* within its backend: --device vulkan:INDEX */
    char name[128];       /* "AMD EPYC 7B13 (avx2, 2 threads)", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char kind[32];        /* "cpu", "discrete GPU", "integrated GPU", "virtual GPU", "software (CPU)" */
    char driver[128];     /* driver name and version ("" for the CPU) */
    char features[256];   /* space-separated: "fp16 int8 subgroup=8 coopmat bf16 ..." */
    uint64_t mem_total;   /* bytes of device memory the backend may use (CPU: RAM or cgroup limit) */
    uint64_t mem_free;    /* bytes free now (0 = unknown) */
    uint64_t max_alloc;   /* bytes of the largest single allocation (UINT64_MAX: no limit) */
    int host_memory;      /* 1: device addresses are host addresses (the CPU backend only) */
} af_device_info;

/* The context's device: "cpu", "vulkan:0", "guard" (backend:index; the CPU as "cpu"). Borrowed:
 * valid while ctx lives. */
const char *af_ctx_device(const af_ctx *ctx);
/* Its description (af_device_info of the open device: name, memory, features). */
void af_ctx_device_info(const af_ctx *ctx, af_device_info *out);
/* 1 when the context computes on the CPU (its device memory is host memory). */
int af_ctx_on_cpu(const af_ctx *ctx);
/* 1 when the context was made with device "auto" (a run that does not fit or fails on the device
 * may go on on the CPU). */
int af_ctx_device_auto(const af_ctx *ctx);

/* Backends built into this library, as `afinar devices` lists them: cpu, vulkan (always listed;
 * without devices when it is not built in or no device is found). */
int32_t af_backend_count(void);
/* Name of listed backend i ("cpu", "vulkan"); NULL outside [0, af_backend_count()). */
const char *af_backend_name(int32_t i);
/* The devices of listed backend i: up to `cap` into out (may be NULL with cap 0), *n the number
 * there is. No device: AF_OK, *n = 0 and why [why_cap] says why ("not built in ...", "no Vulkan
 * loader", "no device"). Errors: AF_ERR_INVALID_ARG (bad i). */
af_status af_backend_devices(int32_t i, af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap);

/* The settings in use, as params that af_ctx_new() accepts (to derive a context that differs in
 * one setting). kernel_path is the resolved path name ("scalar", "avx2" or "avx512"), n_threads
 * the resolved count; strings are static. */
void af_ctx_get_params(const af_ctx *ctx, af_ctx_params *p);

int af_ctx_n_threads(const af_ctx *ctx);
/* "scalar", "avx2" or "avx512". Static string. */
const char *af_ctx_kernel_path(const af_ctx *ctx);
/* Ask the long loops that run with `ctx` to stop between two batches once *flag is non-zero:
 * af_classifier_probs (per forward batch), af_lm_evaluate (per batch), af_gen_eval_run (per prompt
 * and per generated token). They then return AF_ERR_INTERRUPTED ("interrupted after N of M ...")
 * and write nothing. `flag` is typically a signal handler's `volatile sig_atomic_t` (int on the
 * platforms afinar builds on); NULL (the default) disables the check. The training loop has its
 * own flag (af_trainer_opts.interrupt: it finishes the step and saves). */
void af_ctx_set_interrupt(af_ctx *ctx, volatile int *flag);
/* 1 when ctx's interrupt flag is set (NULL ctx or no flag: 0). */
int af_ctx_interrupted(const af_ctx *ctx);
/* "f32" or "bf16". Static string. */
const char *af_ctx_matmul_precision(const af_ctx *ctx);
int af_ctx_int8_activations(const af_ctx *ctx);
/* The pool's spin window in microseconds (af_ctx_params.poll_us, resolved). */
int af_ctx_poll_us(const af_ctx *ctx);

/* Measures the throughput of the large matrix products (the packed GEMM of training steps and
 * prompts: a 256 x 576 · (1536 x 576)ᵀ product, the shape of a SmolLM2-135M MLP projection,
 * best of 5 after one warm-up) in f32 and in bf16 on this CPU with ctx's threads and kernel path,
 * in GFLOP/s (2·m·n·k / seconds); takes ~0.1 s. *bf16_gflops is 0 where bf16 products are not
 * available (no AVX512_BF16, or a kernel path other than avx512). Use: tell a user whether
 * --bf16 pays here (issue 20: VDPBF16PS ran at 0.46x the f32 FMA rate on an Intel Xeon, while on
 * AMD Zen 4/5 bf16 is faster). Errors: AF_ERR_INVALID_ARG (NULL), AF_ERR_NOMEM. */
af_status af_ctx_measure_precision(const af_ctx *ctx, double *f32_gflops, double *bf16_gflops);

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

/* Load a model from a GGUF file or a Hugging Face checkpoint directory (config.json,
 * model.safetensors or model-0000N-of-0000M.safetensors + model.safetensors.index.json with F32, F16
 * or BF16 tensors, tokenizer.json + tokenizer_config.json; docs/FORMATS.md §12): the same in-memory
 * model either way. The file(s) are memory-mapped; quantized / f16 / bf16 weights are used in place.
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

/* Shape of projection `proj` of layer `layer` (0 q_proj, 1 k_proj, 2 v_proj, 3 o_proj, 4 gate_proj,
 * 5 up_proj, 6 down_proj): *in = in_features, *out = out_features. Returns 1 when the layer has
 * that projection, 0 when it has none (gemma4: k/v of a layer that reuses an earlier layer's K/V,
 * v of an attention_k_eq_v layer) or the arguments are out of range (*in = *out = 0). The sizes are
 * per layer (gemma4: head_dim, KV heads and FFN width differ between layers); af_model_config holds
 * layer 0's. */
int af_model_proj_shape(const af_model *model, int32_t layer, int32_t proj, int64_t *in, int64_t *out);

/* Print a human-readable description of a GGUF file to `fp`: architecture, hyper-parameters,
 * tokenizer kind and a table of tensors (name, type, shape, bytes). Works on any valid GGUF,
 * including architectures afinar cannot run. Errors as af_model_load() for the container. */
af_status af_gguf_describe(const char *path, FILE *fp);

/* `afinar info`: af_gguf_describe() for a file; for a Hugging Face directory (config.json,
 * model.safetensors or shards + index, tokenizer.json) its config.json hyper-parameters, tokenizer
 * summary and tensor table (name, dtype, shape, bytes, shard). A config.json afinar cannot run is
 * reported (the rest is still printed) and its error returned. Errors: those of af_gguf_describe,
 * of reading the directory's weights (AF_ERR_NOT_FOUND, AF_ERR_FORMAT, ...), AF_ERR_INVALID_ARG. */
af_status af_model_describe(const char *path, FILE *fp);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer (read from the model file)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_tokenizer af_tokenizer;

/* Borrowed: the model's tokenizer, valid while `model` lives. NULL if the file has none. */
const af_tokenizer *af_model_tokenizer(const af_model *model);
/* Why af_model_tokenizer is NULL, in words (borrowed): the tokenizer loader's message (the missing
 * or malformed tokenizer.ggml.* key) or "the file has no tokenizer.ggml.* keys"; NULL when the
 * model has a tokenizer. */
const char *af_model_tokenizer_error(const af_model *model);

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
/* af_chat_format with the layout chosen: `chat_template` "chatml" or "gemma" instead of the model's
 * own template (NULL or "auto": the model's). Errors: those of af_chat_format, AF_ERR_INVALID_ARG /
 * AF_ERR_UNSUPPORTED for an unknown name (the message lists chatml and gemma). */
af_status af_chat_format_template(const af_model *model, const char *chat_template, const char *system,
                                  const char *user, char **out);

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

/* Progress of long work (prompt evaluation, training): `phase` names it ("prompt": tokens of an
 * af_session_eval call evaluated so far, called after each chunk of 256; "train": optimizer steps
 * done of the run; "eval": samples of an evaluation done), `current` of `total` units. Called on
 * the thread doing the work; keep it short. */
typedef void (*af_progress_fn)(void *user, const char *phase, int64_t current, int64_t total);

/* Cancellation and progress of a session's evaluations (each may be NULL: none; borrowed, they
 * must outlive their use). `*cancel` is read before every layer of every forward (prompt chunks,
 * decode steps, af_session_eval_batch): once non-zero the call stops at the next layer boundary and
 * returns AF_ERR_CANCELLED; the positions of the chunks completed before it stay in the cache
 * (af_session_n_past says how many), the interrupted chunk is not counted. Set it from another
 * thread or a signal handler (a `volatile sig_atomic_t`-sized int); clear it to evaluate again.
 * `progress(user, "prompt", done, n)` is called after each chunk of an af_session_eval of n > 1
 * tokens. */
void af_session_set_control(af_session *s, const volatile int *cancel, af_progress_fn progress, void *user);

/* The tokens whose keys and values are in the cache, [*n = af_session_n_past(s)] (borrowed: valid
 * until the next call that changes the session). */
const int32_t *af_session_tokens(const af_session *s, int *n);

/* Prompt cache within a session: keep the longest cached prefix of `tokens [n]` (n >= 1) that can
 * be reused without changing any result, drop the rest of the cache, and return the number of
 * positions kept; the caller then evaluates tokens[kept .. n). What is kept is the common prefix of
 * the cached tokens and `tokens`, less what makes the result differ in the last bit from
 * evaluating all n tokens at once: the last token is always evaluated again (its logits are
 * needed), and the kept length is lowered, when needed, so that every 256-token chunk of the
 * prompt runs the same kind of matrix product as in a one-call evaluation (a chunk's tail of 1-4
 * rows would otherwise take the per-row decode kernels instead of the blocked product). So
 * logits after af_session_keep_prefix + af_session_eval of the rest are bit-identical to
 * af_session_reset + af_session_eval of all n tokens. The adapter is not part of the match: the
 * caller keeps a session's adapter fixed while reusing its cache. 0 for NULL. */
int af_session_keep_prefix(af_session *s, const int32_t *tokens, int n);

/* Continuous batching: decode one token in each of `n` sessions of the same model in ONE pass
 * through the layers (sessions may carry different adapters, af_session_load_adapter /
 * af_session_set_lora: LoRA is applied unmerged, so the frozen products run over the rows of
 * several sessions and each session's rows get its own adapter's correction). tokens [n]: the
 * token appended to session i; logits [n, vocab_size] receive each session's next-token logits.
 * Every session's logits, cache and positions are bit-identical to af_session_eval(ss[i],
 * &tokens[i], 1, ...) alone: the products group at most 4 rows (the per-row decode kernels) and
 * each session attends to its own cache. Any session's cancel flag (af_session_set_control) stops
 * the whole step before the next layer (AF_ERR_CANCELLED, no session advances). n <= 256;
 * scratch of about n x 40 KiB (SmolLM2) is allocated per call.
 * Errors: AF_ERR_INVALID_ARG (NULL, n < 1 or > 256, sessions of different models, a session given
 * twice), AF_ERR_RANGE (a session's cache full, a token id outside the vocabulary; nothing is
 * evaluated), AF_ERR_CANCELLED, AF_ERR_NOMEM. */
af_status af_session_eval_batch(af_session *const *s, int32_t n, const int32_t *tokens, float *logits);

/* Prompt-cache files (`afinar generate --prompt-cache FILE`; docs/FORMATS.md §13): the session's
 * cached tokens and their keys and values, with a layout hash of the model (architecture,
 * hyper-parameters, every tensor's type and shape and its first bytes), the context's numerics
 * (kernel path, matmul precision, int8 decode) and the session's adapter (every parameter, the
 * scale), so a file is only ever loaded into a session that would have computed the same values.
 * af_session_save_file writes it atomically (temporary file + rename). af_session_load_file reads
 * the whole file and checks everything before it touches the session: size (exactly the header's
 * counts), magic, version, layout hash, layer count and KV width, token count (<= n_ctx), every
 * token id in the vocabulary, the trailing checksum, every value finite; then the session holds
 * those tokens (n_past = the count; call af_session_keep_prefix with the new prompt next).
 * Errors: AF_ERR_INVALID_ARG (NULL), AF_ERR_IO (cannot read / write, naming the file),
 * AF_ERR_FORMAT (any check above, naming the file and the field or byte offset; the session is
 * unchanged), AF_ERR_RANGE (more tokens than the session's n_ctx), AF_ERR_NOMEM. */
af_status af_session_save_file(const af_session *s, const char *path);
af_status af_session_load_file(af_session *s, const char *path);

/* Load a LoRA adapter directory (PEFT layout: adapter_config.json + adapter_model.safetensors, as
 * written by `afinar train` / af_lora_trainer_save_adapter or PEFT's save_pretrained) or a llama.cpp
 * LoRA GGUF file (af_adapter_export_gguf, convert_lora_to_gguf.py; refused when its
 * general.architecture is not the model's) and apply it
 * UNMERGED to every later af_session_eval: on each adapted projection y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with
 * s = scale · lora_alpha/r (lora_alpha/sqrt(r) with use_rslora). scale = 1 applies the adapter as
 * trained, 0 gives exactly the base model's outputs. A classification head in the directory is
 * ignored. The session owns the loaded weights; a second call replaces them. The KV cache is not
 * touched: call af_session_reset before evaluating a new sequence.
 * Errors: AF_ERR_INVALID_ARG (NULL argument, non-finite scale, adapter for more layers than the
 * model), AF_ERR_IO, AF_ERR_FORMAT (shapes that do not match the model), AF_ERR_NOT_FOUND,
 * AF_ERR_UNSUPPORTED (as af_lora_trainer_load_adapter), AF_ERR_NOMEM; on error the session is as
 * before. */
af_status af_session_load_adapter(af_session *s, const char *dir, float scale);

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
 * `afinar train` does exactly this with two refinements that a program can repeat bit for bit:
 * micro-batches numbered within the epoch (af_lora_trainer_opts.steps_per_epoch, grad_accum: their
 * dropout masks), and each micro-batch's gradient computed alone (af_lora_trainer_zero_grad,
 * accumulate, af_lora_trainer_collect_gradients), the gradients summed in micro-batch order and
 * handed back with af_lora_trainer_apply_gradients before the step (the order a data-parallel run
 * keeps for any process count).
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
    int32_t num_classes;     /* (0) 0: no head: a causal-LM trainer (af_lora_trainer_accumulate_lm /
                                forward_lm; the classification accumulate/forward then fail) */
    af_head_pooling pooling; /* (AF_POOLING_MEAN) */
    int32_t head_bias;       /* (0) 0: b stays 0 (its gradient is dropped), as PEFT's bias-less score */
    int32_t checkpointing;   /* (0) 1: recompute activations layer by layer in the backward: far less
                                memory, one more forward of compute, bitwise identical results */
    /* ---- optimizer ---- */
    float lr;                /* (2e-4) used by af_lora_trainer_step when it is given lr < 0 */
    float weight_decay;      /* (0.01) decoupled; applied to LoRA A, B and head W, never to b */
    float beta1, beta2, eps; /* (0.9, 0.999, 1e-8) */
    float max_grad_norm;     /* (1.0) global L2 clipping threshold; <= 0 disables clipping */
    /* ---- micro-batch numbering (the dropout masks' key) ---- */
    int64_t steps_per_epoch; /* (0) with grad_accum: micro-batch i of step g is numbered
                                (g mod steps_per_epoch) * grad_accum + i, its index within the epoch, as
                                `afinar train` numbers them (same masks, same adapter); 0: i, its index
                                within the step */
    int32_t grad_accum;      /* (0) micro-batches per step (>= 1 when steps_per_epoch > 0) */
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
 * Dropout masks are keyed by (opts.seed, optimizer step index, micro-batch index within the step);
 * `afinar train` runs this same step with the micro-batch index within the epoch instead.
 * A non-finite loss is reported in *loss with AF_OK; no gradient is added and the next
 * af_lora_trainer_step() skips its update. The first such micro-batch of a step also runs one
 * probing forward to find where the first non-finite value appeared (a parameter tensor, or the
 * first forward stage, e.g. "model.layers.3.self_attn.q_proj output (frozen weight product)"),
 * which af_lora_trainer_step()'s message names; an error of that probe is returned.
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

/* Causal-LM (SFT) micro-batch for a trainer made with num_classes = 0: forward + next-token loss +
 * backward of one packed micro-batch (training mode), ADDING the gradient of
 * (grad_scale · loss_sum) into the trainer's gradient.
 *   tokens [seq_start[n_samples]], seq_start [n_samples + 1] as af_lora_trainer_accumulate
 *   targets [seq_start[n_samples]] the token position t must predict (normally tokens[t + 1] of the
 *          same sample), or -1 for no loss at t (prompt tokens, the last token of a sample)
 *   loss_sum  Σ over target positions of −log softmax(logits_t)[targets[t]] (nats); may be NULL
 *   n_targets positions with targets[t] >= 0; n_correct those whose argmax logit is the target
 *          (mean_token_accuracy = n_correct / n_targets); either may be NULL
 * Loss normalisation: to get the gradient of the mean token loss over a whole optimizer step
 * (Σ token losses / target tokens of ALL its micro-batches, as transformers after PR #34191, not a
 * mean of per-micro-batch means), count the targets of every micro-batch of the step first and
 * pass grad_scale = 1 / that total to each call. Logits are computed a chunk of rows at a time,
 * never [tokens, vocab] whole; final-logit soft-capping (Gemma) is applied when the model has it.
 * Dropout, non-finite handling and errors as af_lora_trainer_accumulate (AF_ERR_INVALID_ARG also
 * for a trainer with a classification head and for a target outside [-1, vocab)). */
af_status af_lora_trainer_accumulate_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                        int32_t n_samples, const int32_t *targets, float grad_scale,
                                        double *loss_sum, int64_t *n_targets, int64_t *n_correct);

/* Forward only of af_lora_trainer_accumulate_lm (evaluation: no dropout, no gradient). */
af_status af_lora_trainer_forward_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                     int32_t n_samples, const int32_t *targets, double *loss_sum,
                                     int64_t *n_targets, int64_t *n_correct);

/* One optimizer step on the accumulated gradient, then the gradient is zeroed:
 *   head-bias gradient dropped unless opts.head_bias; global L2 norm clipped to opts.max_grad_norm
 *   (torch.nn.utils.clip_grad_norm_); AdamW with learning rate `lr` (lr >= 0, e.g. from your
 *   schedule; lr < 0: opts.lr).
 * `grad_norm` (may be NULL) receives the PRE-clip global gradient norm (NaN when a micro-batch loss
 * was non-finite).
 * Non-finite loss or gradient: the update is SKIPPED (parameters and AdamW moments unchanged, the
 * gradient is still zeroed, the step still counts for af_lora_trainer_step_count) and
 * AF_ERR_RANGE is returned with a message naming where the first non-finite value appeared (for a
 * gradient: the first tensor in backward order, e.g. "score.weight gradient"); the trainer stays
 * usable, so a caller may count and continue.
 * Errors: AF_ERR_INVALID_ARG (NULL tr, lr NaN, nothing accumulated since the last step),
 * AF_ERR_RANGE (skipped, as above). */
af_status af_lora_trainer_step(af_lora_trainer *tr, float lr, double *grad_norm);

/* Discard the gradient accumulated since the last step (and a pending non-finite flag). */
void af_lora_trainer_zero_grad(af_lora_trainer *tr);

/* Cancel flag of the trainer's forwards and backwards (NULL: none; borrowed): read before every
 * layer of af_lora_trainer_accumulate*, _forward* and evaluation; once non-zero the call stops at
 * the next layer and returns AF_ERR_CANCELLED. A cancelled accumulate DISCARDS the whole gradient
 * accumulated since the last step (as af_lora_trainer_zero_grad: the interrupted micro-batch had
 * added part of its gradient); parameters and AdamW state are never touched. Clear the flag to go
 * on (redo the step's micro-batches). */
void af_lora_trainer_set_control(af_lora_trainer *tr, const volatile int *cancel);

/* Evaluation forward (no dropout, no gradient): logits [n_samples, num_classes] of a packed batch.
 * Errors: as af_lora_trainer_accumulate() (labels are not needed). */
af_status af_lora_trainer_forward(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                  int32_t n_samples, float *logits);

/* Optimizer steps taken so far (updates applied + skipped), 0 for NULL. */
int64_t af_lora_trainer_step_count(const af_lora_trainer *tr);

/* ---- Gradients for a transport of your own (data parallelism over NCCL, sockets, MPI ...) ----
 * A worker accumulates its share of a step's micro-batches, collects the flat gradient, sends it
 * to be reduced (e.g. summed over workers), and every worker applies the reduced vector, then
 * calls af_lora_trainer_step. Each micro-batch's grad_scale must already use the GLOBAL count
 * (samples or target tokens of the whole step over all workers), so that the reduction is a plain
 * sum. `afinar train` under mpirun does exactly this (src/train/trainer_run.c): every micro-batch
 * is collected on its own and the gathered per-micro-batch vectors are summed in micro-batch index
 * order, which makes the sum independent of the number of workers (a float sum in an order that
 * depends on the transport, e.g. MPI_Allreduce, is not reproducible). */

/* Copy the gradient accumulated since the last step (or the last af_lora_trainer_apply_gradients)
 * into out[af_lora_trainer_n_params(tr)]: the flat vector in the order of af_lora_trainer_get_params
 * (every LoRA A then B by layer and projection, head W [num_classes, hidden], head b), floats, the
 * gradient of Σ grad_scale · loss over the accumulated micro-batches. The accumulated gradient is
 * kept (call af_lora_trainer_zero_grad to start the next share). *n_micro (may be NULL): micro-
 * batches accumulated; *nonfinite (may be NULL): 1 when one of their losses was not finite (the
 * step would be skipped; send the flag with the vector).
 * Errors: AF_ERR_INVALID_ARG (NULL tr or out). */
af_status af_lora_trainer_collect_gradients(const af_lora_trainer *tr, float *out, int32_t *n_micro,
                                            int *nonfinite);

/* Replace the accumulated gradient by grad[af_lora_trainer_n_params(tr)] (same layout as
 * af_lora_trainer_collect_gradients; copied), standing for `n_micro` >= 1 micro-batches;
 * `nonfinite` non-zero marks a micro-batch loss of the step as non-finite somewhere (the next
 * af_lora_trainer_step then skips, as if the loss had been seen here). The next
 * af_lora_trainer_step clips, updates and zeroes it as usual; non-finite elements make that step
 * skip with "gradient" as the place.
 * Errors: AF_ERR_INVALID_ARG (NULL tr or grad, n_micro < 1). */
af_status af_lora_trainer_apply_gradients(af_lora_trainer *tr, const float *grad, int32_t n_micro, int nonfinite);

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

/* ---------------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------------- */

/* Write `n` bytes of `data` to `path` atomically: into a hidden temporary file next to it
 * (".<name>.tmp-<pid>-<counter>"), fsync'ed, renamed over `path`, then the directory fsync'ed, so
 * a reader sees the old complete file or the new complete file, never a half-written one; on
 * failure the temporary is removed and `path` is untouched. Permissions 0666 & ~umask.
 * Errors: AF_ERR_INVALID_ARG (NULL/empty path, path ending in '/'), AF_ERR_IO ("<path>: is a
 * directory, cannot be replaced by a file", directory missing or not writable, "<path>: write
 * failed at offset N: <strerror>", ...), AF_ERR_NOMEM. */
af_status af_write_file_atomic(const char *path, const void *data, size_t n);

/* Cheap early check that `path` could be written by af_write_file_atomic: its directory exists,
 * is a directory and is writable (access(2) W_OK|X_OK), and `path` itself is not a directory.
 * Nothing is created. A later write can still fail (disk full, races): this only lets a command
 * refuse a bad destination before long work. Errors: AF_ERR_INVALID_ARG (NULL/empty), AF_ERR_IO
 * ("<path>: is a directory, cannot be replaced by a file", "<path>: directory <dir>: <strerror>"),
 * AF_ERR_NOMEM. */
af_status af_check_writable(const char *path);

/* For a SIGINT / SIGTERM handler that ends the process: remove the temporaries afinar is writing
 * right now (the hidden ".NAME.tmp-PID-N" files of af_write_file_atomic and the other atomic
 * writers, and the temporary directories of checkpoints and merged adapters), so that a process
 * stopped by a signal leaves nothing half-written. Async-signal-safe (unlink(2) and rmdir(2)
 * only); call _exit afterwards. */
void af_remove_temporaries(void);

/* Read a whole input file (a prompt, a config) into a malloc'ed, NUL-terminated buffer (`*text`,
 * caller frees with free(); `*len`, may be NULL, gets the byte count). Never blocks: the file is
 * opened with O_NONBLOCK and refused unless it is a regular file (a FIFO, a directory, /dev/zero
 * ...), except "/dev/stdin", which may also be a pipe or a terminal. At most `max_bytes` are read
 * (0: 64 MiB). Errors: AF_ERR_INVALID_ARG (NULL/empty), AF_ERR_IO ("<path>: cannot open:
 * <strerror>", "<path>: not a regular file (a FIFO or pipe)"), AF_ERR_RANGE ("<path>: larger than
 * the limit of N bytes"), AF_ERR_NOMEM. */
af_status af_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Data sets: labelled JSONL corpora and their tokenized form
 *
 * A corpus is read from JSON Lines, one object per line:
 *   single-label  {"input": "text", "label": 3}  or  {"input": "text", "label": "sport"}
 *   multi-label   {"input": "text", "labels": [0, 4]}  or  {"input": "text", "labels": ["a", "b"]}
 * (field names configurable; blank lines skipped; other keys ignored). Integer labels are class
 * ids >= 0; string labels map to their position in a given label list, or, without one, to their
 * rank among the file's distinct names sorted by byte value. A file uses one label form throughout.
 * A data set is a corpus tokenized for one model: af_tokenize(add_special = 1, parse_special = 0),
 * truncated to the first max_seq_len tokens; a text that gives no token becomes one BOS (or EOS).
 * ------------------------------------------------------------------------------------------- */
typedef struct af_corpus af_corpus;
typedef struct af_dataset af_dataset;

typedef struct af_corpus_opts {
    const char *text_field;   /* NULL -> "input" */
    const char *label_field;  /* NULL -> "label" (single) and "labels" (multi) are both accepted;
                                 when set, only this key is read, in either form */
    const char *const *label_names; /* [n_label_names] optional label list (borrowed), NULL = none */
    int32_t n_label_names;
    int32_t num_classes;      /* > 0: integer labels must be < num_classes; 0: unknown */
    int labels_optional;      /* 1: a line without a label is kept with label -1 / no labels
                                 (e.g. for `predict`); 0: a missing label is an error */
    size_t max_line_bytes;    /* 0 -> 16 MiB; a longer line is refused */
} af_corpus_opts;

/* Fill `o` with the defaults (all zero / NULL). */
void af_corpus_opts_init(af_corpus_opts *o);

/* Read a JSONL corpus. `opts` may be NULL (defaults). `*out`: caller frees with af_corpus_free().
 * Errors (the message names FILE:LINE and the field): AF_ERR_IO (cannot open), AF_ERR_FORMAT
 * (invalid JSON with its column, not an object, missing field, wrong type, label out of range or
 * unknown name, mixed label forms, line longer than max_line_bytes, no sample), AF_ERR_INVALID_ARG
 * (bad options, e.g. duplicate names in the label list), AF_ERR_NOMEM. */
af_status af_corpus_read(const char *path, const af_corpus_opts *opts, af_corpus **out);

/* An unlabelled single-label corpus of `n` (>= 0) texts: texts[i] holds lens[i] bytes (copied; a
 * text need not be NUL-terminated), label -1 each, source line first_line + i in messages, `name`
 * as its file name in messages (e.g. "<stdin>"; copied; NULL: "<texts>"), num_classes (>= 0)
 * recorded as is.
 * `*out`: caller frees with af_corpus_free(). Errors: AF_ERR_INVALID_ARG (NULL argument with
 * n > 0, n or num_classes < 0), AF_ERR_NOMEM. */
af_status af_corpus_from_texts(const char *name, const char *const *texts, const size_t *lens, int32_t n,
                               int32_t first_line, int32_t num_classes, af_corpus **out);

/* Samples of the corpus; 1 when it uses the multi-label form, else 0 (both 0 for NULL). */
int32_t af_corpus_size(const af_corpus *c);
int af_corpus_multi_label(const af_corpus *c);

/* Frees a corpus. NULL is ignored. */
void af_corpus_free(af_corpus *c);

/* Tokenize a corpus (threads of `ctx`; NULL: the process default context). `c` and `tok` are
 * borrowed for the call only (labels and names are copied). `*out`: caller frees with af_dataset_free(). Errors: AF_ERR_INVALID_ARG (max_seq_len < 1, NULL
 * tokenizer), AF_ERR_FORMAT (empty text and no BOS/EOS token: "FILE:LINE: field 'input': ..."),
 * AF_ERR_NOMEM. */
af_status af_dataset_build(const af_ctx *ctx, const af_corpus *c, const af_tokenizer *tok, int32_t max_seq_len,
                          af_dataset **out);

/* Samples of the data set (0 for NULL). */
int32_t af_dataset_size(const af_dataset *ds);

/* Frees a data set. NULL is ignored. */
void af_dataset_free(af_dataset *ds);

/* ---------------------------------------------------------------------------------------------
 * Causal-LM data sets (supervised fine-tuning with a next-token loss)
 *
 * JSON Lines in Hugging Face TRL's dataset formats, one example per line, one format per file:
 *   {"text": "..."}                                   language modelling
 *   {"prompt": "...", "completion": "..."}            prompt / completion
 *   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}
 *   {"prompt": [messages...], "completion": [messages...]}   conversational prompt / completion
 * Roles: system, user, assistant. Conversations are rendered with the model's chat template
 * (ChatML: SmolLM2, Qwen2.5; Gemma 3's turn format), token ids identical to transformers'
 * apply_chat_template (tests/test_lm_data.c); special-token texts inside strings are parsed as the
 * special tokens, as transformers does. Token sequences and loss targets (docs/FORMATS.md §10):
 *   text                 [BOS] text EOS                        targets: every token
 *   prompt/completion    [BOS] prompt completion EOS           targets: completion + EOS
 *                        (prompt and completion tokenized separately; EOS appended unless the
 *                        string already ends with the EOS token's text, as TRL does)
 *   messages             the rendered conversation             targets: each assistant message's
 *                        content and end-of-turn token (<|im_end|> / <end_of_turn>), not the role
 *                        header, not the "\n" after the end-of-turn token
 *   conversational p/c   prompt + completion messages rendered targets: the completion's
 *                        assistant messages, as above
 *   loss_on "all": every token is a target. The first token of a sample never is (nothing
 *   precedes it). BOS: when the model's tokenizer adds one (Gemma; SmolLM2 has none).
 * Truncation keeps the first max_seq_len tokens. An example left with no target token (all cut,
 * or none to begin with) is dropped and counted in the report; none left is an error.
 * ------------------------------------------------------------------------------------------- */

/* What af_lm_dataset_read found (all counts over the file's examples). */
typedef struct af_lm_data_report {
    const char *format;        /* "text", "prompt/completion", "messages", "prompt/completion (messages)" */
    const char *chat_template; /* "chatml", "gemma"; "none" for text and string prompt/completion */
    const char *loss_on;       /* "all", "completion" or "assistant" (the rule applied) */
    int32_t max_seq_len;
    int32_t n_read;            /* examples in the file */
    int32_t n_kept;            /* examples in the data set */
    int32_t n_dropped_cut;     /* dropped: every target token lies beyond max_seq_len */
    int32_t n_dropped_empty;   /* dropped: no target token at all (e.g. empty text, no BOS) */
    int32_t first_dropped_line; /* source line of the first dropped example, 0 if none */
    int32_t n_truncated;       /* kept examples longer than max_seq_len */
    int64_t n_tokens;          /* tokens kept (after truncation) */
    int64_t n_target_tokens;   /* target tokens kept */
    int64_t n_target_cut;      /* target tokens lost to truncation in kept examples */
    /* tokens per kept example BEFORE truncation; nearest-rank percentiles as af_data_stats */
    int32_t len_min, len_p50, len_p95, len_p99, len_max;
    double len_mean;
} af_lm_data_report;

typedef struct af_lm_data_opts {
    int32_t max_seq_len;        /* truncation length in tokens (> 0); default 1024 (TRL's max_length) */
    const char *loss_on;        /* NULL/"auto": completion-only for prompt/completion, assistant-only for
                                   messages, all for text; "all": every token */
    const char *chat_template;  /* NULL: the model's own (GGUF tokenizer.chat_template); "chatml" |
                                   "gemma": override */
    af_lm_data_report *report;  /* optional (NULL: none): filled on success */
    size_t max_line_bytes;      /* 0 -> 16 MiB; a longer line is refused */
} af_lm_data_opts;

/* Fill `o` with the defaults (max_seq_len 1024, everything else NULL / 0). */
void af_lm_data_opts_init(af_lm_data_opts *o);

/* Read a causal-LM JSONL file and tokenize it for `model` (borrowed for the call) with the threads
 * of `ctx` (NULL: the process default context); the result does not depend on the thread count.
 * `o` may be NULL (defaults). `*out`: a data set with num_classes 0, labels and multi_hot NULL,
 * tokens truncated to max_seq_len, orig_len, line_no, path and target_mask [tok_off[n]]
 * (1 = the token is a loss target); caller frees with af_dataset_free().
 * Errors (nothing is returned on error; the message names FILE:LINE and the field):
 *   AF_ERR_IO (cannot open), AF_ERR_FORMAT (invalid JSON with its column, a non-object line, a
 *   message without role or content, an unknown role, no assistant turn, prompt/completion not
 *   strings or message lists, a line mixing formats or a file mixing them, a "label"/"labels" field
 *   (use --task classification), a conversation the template refuses (Gemma: turns that do not
 *   alternate), an empty file, every example dropped), AF_ERR_UNSUPPORTED (conversations and a
 *   chat template afinar cannot render: the message names --chat-template chatml|gemma),
 *   AF_ERR_INVALID_ARG (NULL path/model/out, max_seq_len < 1, unknown loss_on or chat_template,
 *   a model without a tokenizer), AF_ERR_NOMEM. */
af_status af_lm_dataset_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                             af_dataset **out);

/* Print a report as a few indented lines to `fp` (`title`, may be NULL, heads it). */
void af_lm_data_report_print(const af_lm_data_report *r, const char *title, FILE *fp);

/* Next-token evaluation of a causal-LM data set (read by af_lm_dataset_read). */
typedef struct af_lm_eval_result {
    double loss;                /* mean cross-entropy over every target token of the set, nats */
    double perplexity;          /* exp(loss) */
    double mean_token_accuracy; /* fraction of target tokens whose argmax prediction is the target */
    int64_t n_targets;          /* target tokens */
    int32_t n_examples;
} af_lm_eval_result;

/* Evaluate `model` (borrowed) with the LoRA adapter in `adapter_dir` applied unmerged (NULL: the
 * base model) on `ds`: the training step's forward (af_engine_lm_step without gradients, no
 * dropout) in packed batches of `batch` examples; the loss is the sum of token losses divided by
 * the number of target tokens of the whole set (as the trainer's eval_loss). `lora_scale`
 * multiplies the adapter's scale (1: as trained). `ctx`: its threads (NULL: the model's).
 * Errors: AF_ERR_INVALID_ARG (NULL argument, batch < 1, a set without targets), the adapter
 * loader's errors (AF_ERR_IO, AF_ERR_FORMAT naming the file), AF_ERR_NOMEM. */
af_status af_lm_evaluate(const af_ctx *ctx, const af_model *model, const char *adapter_dir, float lora_scale,
                         const af_dataset *ds, int32_t batch, af_lm_eval_result *out);

/* ---------------------------------------------------------------------------------------------
 * Evaluation metrics of a classifier
 *
 * Single-label: prediction = argmax (ties -> lowest id); accuracy; per class precision, recall,
 * F1 and support (a zero denominator gives 0, as scikit-learn zero_division=0); macro-F1 over the
 * classes present in gold or predictions; weighted-F1; the confusion matrix (row = gold, column =
 * predicted); expected calibration error over 15 equal-width confidence bins (Guo et al. 2017,
 * eq. 3); NLL. Multi-label: predicted set {c : p >= 0.5}; micro- and macro-F1; subset accuracy.
 * ------------------------------------------------------------------------------------------- */
typedef struct af_metrics af_metrics;

/* Metrics of probs [af_dataset_size(ds), C] (C = the data set's classes) against ds's labels
 * (single-label: samples with label -1 are skipped; multi-label: all). `*out`: caller frees with
 * af_metrics_free(). Errors: AF_ERR_INVALID_ARG (no labelled sample, a non-finite probability
 * naming the row), AF_ERR_NOMEM. */
af_status af_eval_metrics(const af_dataset *ds, const float *probs, af_metrics **out);

/* Frees metrics. NULL is ignored. */
void af_metrics_free(af_metrics *m);

/* Report: headline numbers, a per-class table (precision, recall, F1, support) and the confusion
 * matrix (class names abbreviated to 8 characters in its columns). `names` [C] may be NULL (ids). */
void af_metrics_print(const af_metrics *m, const char *const *names, FILE *fp);

/* The metrics as a JSON object, pretty-printed (tab-indented, as cJSON_Print):
 *   {"n", "num_classes", "multi_label", "accuracy", "macro_f1", "weighted_f1", "micro_f1",
 *    "macro_precision", "macro_recall", "ece" and "nll" (single-label), "threshold" (multi-label),
 *    "per_class": [{"label", "id", "precision", "recall", "f1", "support", "predicted"}],
 *    "confusion": [[...]] (single-label; rows = gold)}
 * followed by the string members of `extra` (may be NULL): {key0, value0, key1, value1, ..., NULL}.
 * `names` [C] may be NULL (labels are then the ids). `*out`: malloc'ed NUL-terminated text, caller
 * frees with free(). Errors: AF_ERR_INVALID_ARG (NULL m or out), AF_ERR_NOMEM. */
af_status af_metrics_json(const af_metrics *m, const char *const *names, const char *const *extra, char **out);

/* ---------------------------------------------------------------------------------------------
 * Training runs: what `afinar train` and `afinar check` run
 *
 * A run fine-tunes LoRA adapters and a classification head on a labelled corpus: optimizer steps
 * of grad_accum micro-batches of `batch` packed samples (the gradient of the mean loss over the
 * step's samples), global-norm clipping, AdamW with a warm-up then constant / cosine / linear
 * schedule, steps with a non-finite loss or gradient skipped (max_nonfinite in a row stop the run),
 * evaluation on the validation data (best macro-F1 selects OUT/best, `patience` stops early), and
 * checkpoints from which a resumed run continues bit for bit. Output directory OUT:
 *   metrics.jsonl        one JSON line per step, per evaluation and per skipped step
 *   run.json             the caller's configuration (config_json) and a data summary
 *   checkpoint-STEP/     PEFT adapter + trainer state + train_config.json (config_json, with the
 *                        paths of the model and data also relative to the checkpoint) +
 *                        manifest.json (size and SHA-256 of each file), written to a hidden
 *                        temporary directory and renamed into place; the newest save_total_limit
 *                        are kept. A resume verifies the manifest and the state's values before
 *                        anything is written (a damaged checkpoint is refused, naming the newest
 *                        earlier one that verifies)
 *   best/, final/        PEFT adapters of the best evaluation and of the last step
 *   curves.png           loss / accuracy curves (gnuplot, when installed and plot is on)
 * The library prints only to opts.log.
 * ------------------------------------------------------------------------------------------- */

/* Learning-rate schedule after the linear warm-up (transformers get_*_schedule_with_warmup shapes,
 * with a floor lr_min): constant lr, cosine decay or linear decay from lr to lr_min. */
typedef enum af_sched { AF_SCHED_CONSTANT = 0, AF_SCHED_COSINE = 1, AF_SCHED_LINEAR = 2 } af_sched;

/* Diagnostics of a configuration against the data and published practice (af_trainer_diags). */
typedef enum af_diag_severity { AF_DIAG_INFO = 0, AF_DIAG_WARN = 1, AF_DIAG_ERROR = 2 } af_diag_severity;

typedef struct af_diag {
    af_diag_severity severity;
    char code[32];            /* stable identifier, e.g. "lr-model-size" */
    char message[512];        /* what is wrong, with the numbers and the source */
    char recommendation[256]; /* what to do, e.g. "use --lr 2e-4" ("" when none) */
} af_diag;

typedef struct af_diag_list {
    af_diag *items;           /* [n] owned */
    int32_t n, cap;
} af_diag_list;

/* Run options. Fill with af_trainer_opts_defaults() and change what you need; defaults in the
 * comments. Strings and objects are borrowed: they must outlive the trainer. */
/* What a training run learns (af_trainer_opts.task; settings key "task"). */
typedef enum af_task {
    AF_TASK_CLASSIFICATION = 0, /* sequence classification: pooled hidden state -> linear head */
    AF_TASK_CAUSAL_LM = 1       /* causal-LM fine-tuning (SFT): next-token cross-entropy on the target tokens */
} af_task;

#define AF_SETTINGS_MAX 64 /* room of af_trainer_opts.origin: at least the number of settings keys */

/* af_trainer_opts.recipe (settings key "recipe"). */
typedef enum af_recipe_kind {
    AF_RECIPE_FIXED = 0, /* the options as set, defaults as documented on each field */
    AF_RECIPE_AUTO = 1   /* the automatic recipe chooses what `given` does not mark */
} af_recipe_kind;

/* af_trainer_opts.given bits. */
enum {
    AF_GIVEN_LENGTH = 1u << 0,        /* epochs or max_steps */
    AF_GIVEN_CLASS_WEIGHTS = 1u << 1, /* class_weights */
    AF_GIVEN_MAX_SEQ_LEN = 1u << 2,   /* max_seq_len */
    AF_GIVEN_LAYERS = 1u << 3,        /* lora_layers */
    AF_GIVEN_WARMUP = 1u << 4,        /* warmup_steps / warmup_ratio */
    AF_GIVEN_EVAL_EVERY = 1u << 5     /* eval_every */
};

typedef struct af_trainer_opts {
    /* ---- model and data ---- */
    const char *model_path;      /* GGUF file (ignored when `model` is set) */
    const af_model *model;       /* borrowed, already loaded (tests / embedding), or NULL */
    const char *train_path;      /* JSONL corpus (ignored when train_data is set) */
    const char *val_path;        /* JSONL validation corpus, or NULL */
    const af_dataset *train_data, *val_data; /* borrowed pre-tokenized sets, or NULL */
    double val_split;            /* (0, 1): stratified split of train when there is no val; 0: none */
    const char *text_field;      /* NULL -> "input" */
    const char *label_field;     /* NULL -> "label" / "labels" */
    const char *labels;          /* label names: a file (one per line) if it exists, else "a,b,c" */
    int32_t num_classes;         /* 0: from the labels / data */
    int multi_label;             /* 1: require multi-label data (the data decide otherwise) */
    /* ---- LoRA and head ---- */
    const char *targets;         /* "qv" (default), "qkv", "all-linear" or a list of q,k,v,o,gate,up,down */
    const char *lora_layers;     /* layers with adapters, 0-based: "all", "A-B", "A-", "topN"; default "top10";
                                    NULL -> every layer; topN with N > the model's layers: every layer */
    int32_t lora_r;              /* 16 */
    double lora_alpha;           /* 32 */
    double lora_dropout;         /* 0.05 */
    int use_rslora;              /* 0 */
    af_head_pooling pooling;     /* AF_POOLING_MEAN */
    int head_bias;               /* 0: b stays 0 (PEFT's score has no bias) */
    const char *class_weights;   /* "uniform" (NULL), "inverse-freq", "sqrt-inverse" or w1,w2,... */
    /* ---- optimisation ---- */
    double lr;                   /* 5e-4 */
    double lr_min;               /* 0 */
    af_sched schedule;           /* cosine */
    int64_t warmup_steps;        /* >= 0: steps; < 0: use warmup_ratio (default -1) */
    double warmup_ratio;         /* 0.06: warm-up = ceil(ratio * total steps) */
    double epochs;               /* 1 (used when max_steps <= 0; may be fractional) */
    int64_t max_steps;           /* > 0 overrides epochs */
    int32_t batch;               /* 8 samples per micro-batch */
    int32_t grad_accum;          /* 2 micro-batches per optimizer step */
    double max_grad_norm;        /* 1.0; <= 0 disables clipping */
    double weight_decay;         /* 0.01 */
    uint64_t seed;               /* 42: LoRA/head init, shuffles, split, dropout */
    int32_t max_seq_len;         /* 128 */
    int checkpointing;           /* recompute activations in the backward */
    int32_t prefix_cache_mb;     /* 2048: MiB (at most half the free RAM) to keep, per sample, the output of the
                                    frozen layers below lora_layers; 0: off */
    /* ---- evaluation and checkpoints ---- */
    int64_t eval_every;          /* 0: every epoch end; N: every N steps */
    int32_t eval_batch;          /* 0 -> batch */
    int32_t patience;            /* evaluations without macro-F1 improvement before stopping; 0 off */
    int64_t save_every;          /* 0: at every evaluation (every epoch end without val); N: every N steps */
    int32_t save_total_limit;    /* 2: checkpoints kept (best/ and final/ are extra) */
    const char *output_dir;      /* required (default derived from `resume` when NULL) */
    int overwrite;               /* replace the artifacts of a run already in output_dir */
    const char *resume;          /* checkpoint or run directory, or NULL */
    int32_t max_nonfinite;       /* 5 consecutive non-finite steps stop the run */
    const af_ctx *ctx;           /* base context of the run (borrowed), or NULL: the model's when `model` is
                                    given, else the defaults. The trainer derives its own from it with
                                    `threads` and `bf16` applied. */
    int threads;                 /* 0: the base context's */
    int poll_us;                 /* < 0 (default -1): the base context's; >= 0: af_ctx_params.poll_us of the
                                    run's context (microseconds the pool's threads spin between operations) */
    double memory_limit_mb;      /* 0: the machine's RAM, or the cgroup limit (memory.max) when lower; N: refuse
                                    to start when the estimated peak exceeds N MiB */
    int bf16;                    /* 1: the run's context gets matmul_precision "bf16" (falls back to f32 with a
                                    warning where the CPU lacks AVX512_BF16); 0: the base context's precision */
    const char *quantize;        /* NULL: the base context's; else af_ctx_params.quantize of the run's context
                                    ("nf4", "q8_0", "f16", "bf16", "none"), applied when it loads model_path
                                    (QLoRA: LoRA on an NF4 base) */
    const char *device;          /* NULL: the base context's device; else af_ctx_params.device of the run's
                                    context ("cpu", "vulkan", "vulkan:N", "auto"). With "auto" the run takes the
                                    Vulkan device when one is present and the run fits it (else the CPU, said in
                                    the log), and goes on on the CPU when the device fails or computes non-finite
                                    values where the CPU does not. */
    /* ---- causal LM (task AF_TASK_CAUSAL_LM) ---- */
    af_task task;                /* AF_TASK_CLASSIFICATION (default) */
    int packing;                 /* causal LM: -1 (default) or 1: micro-batches packed by best-fit decreasing to
                                    batch x max_seq_len tokens; 0: `batch` samples per micro-batch */
    const char *loss_on;         /* causal LM, JSONL data: NULL/"auto" or "all" (af_lm_data_opts.loss_on) */
    const char *chat_template;   /* causal LM, JSONL data: NULL (the model's), "chatml" or "gemma" */
    /* ---- reporting and control ---- */
    FILE *log;                   /* progress and reports (NULL: silent) */
    int progress_tty;            /* -1 auto (isatty of log), 0 newline lines, 1 '\r' live line */
    int64_t log_every;           /* non-TTY progress line every N steps (0: auto ~ total/20) */
    int plot;                    /* 1: curves.png via gnuplot at the end */
    const char *config_json;     /* caller's resolved configuration (stored, not parsed); may be NULL */
    volatile int *interrupt;     /* non-zero (e.g. set by a SIGINT handler) -> finish the step, save a
                                    checkpoint, stop; a `volatile sig_atomic_t` flag (int on the
                                    platforms afinar builds on: checked at compile time) or NULL */
    int64_t stop_after;          /* > 0: behave as if interrupted after this many steps (tests) */
    /* ---- automatic recipe (issue 19; rules and sources: src/train/recipe.h, README "Automatic recipe") ---- */
    af_recipe_kind recipe;       /* AF_RECIPE_FIXED (this struct's default: the fields as set) or AF_RECIPE_AUTO:
                                    choose epochs, class weights, max_seq_len, lora_layers, warm-up and eval_every
                                    from the training data, except those marked in `given` (settings objects,
                                    hence `afinar train`, default to auto) */
    unsigned given;              /* AF_GIVEN_* bits: the recipe settings the caller set (kept as set) */
    double time_budget_min;      /* > 0: the run (setup, training, evaluations) should take at most this many
                                    minutes: with AF_RECIPE_AUTO the choices are fitted to it at a measured speed;
                                    in any recipe the loop re-plans its length from the first steps' speed and
                                    stops (evaluated, saved) before the deadline (AF_STOP_BUDGET) */
    int check_only;              /* 1: a dry run (afinar check): the report says what train "would use" */
    const volatile int *cancel;  /* non-zero: stop at the next layer of the step in progress, save nothing
                                    more, af_trainer_run returns AF_ERR_CANCELLED (res->stop
                                    AF_STOP_INTERRUPTED); checkpoints already written stay; NULL: none */
    af_progress_fn progress;     /* called after every optimizer step ("train", steps done, total steps)
                                    and before and after every evaluation ("eval", 0 or n, n validation
                                    samples); NULL: none */
    void *progress_user;         /* passed to progress */
    unsigned char origin[AF_SETTINGS_MAX]; /* af_setting_origin of each key by its index in
                                    af_train_setting_keys: filled by af_train_settings_to_opts; left 0 by a C
                                    caller (the trainer then marks CALLER each field that differs from its
                                    default, and RECIPE what the automatic recipe chose) */
} af_trainer_opts;

/* Fill `o` with the defaults noted on each field above. */
void af_trainer_opts_defaults(af_trainer_opts *o);

typedef enum af_stop_reason {
    AF_STOP_DONE = 0,         /* reached the last step */
    AF_STOP_EARLY = 1,        /* early stopping (patience) */
    AF_STOP_INTERRUPTED = 2,  /* interrupt flag or stop_after: a checkpoint was saved */
    AF_STOP_NONFINITE = 3,    /* too many non-finite steps (the run returns AF_ERR_RANGE) */
    AF_STOP_BUDGET = 4        /* time_budget_min reached: evaluated and saved (best/, final/) like a finished run */
} af_stop_reason;

typedef struct af_train_result {
    af_stop_reason stop;
    int64_t steps_done;       /* optimizer steps completed (incl. resumed ones) */
    int64_t total_steps;
    int64_t best_step;        /* 0 when no evaluation happened */
    double best_macro_f1;     /* NaN when no evaluation happened */
    double last_val_accuracy, last_val_macro_f1; /* NaN when none */
    double last_train_loss;   /* smoothed (EMA) */
    double best_eval_loss;    /* causal LM: lowest validation loss (nats per target token); NaN when none */
    double last_eval_loss;    /* causal LM: last validation loss; NaN when none */
    int64_t n_nonfinite;      /* skipped steps over the whole run */
    double seconds;           /* wall time of this call */
    char last_checkpoint[1024]; /* "" when none was saved */
} af_train_result;

/* A configured run (opaque). */
typedef struct af_trainer af_trainer;

/* Load the model (unless given), read and tokenize the data, split, compute statistics, class
 * weights and diagnostics, build the parameter layout. Nothing is written to disk.
 * `*out`: free with af_trainer_free (also on failure a partially built trainer is freed).
 * Errors: AF_ERR_IO / AF_ERR_FORMAT (model or data, naming file:line:field), AF_ERR_NOT_FOUND
 * (model without tokenizer when text data are given), AF_ERR_INVALID_ARG (bad option naming it),
 * AF_ERR_NOMEM. Diagnostics with errors do NOT fail here: see af_trainer_has_errors. */
af_status af_trainer_new(const af_trainer_opts *o, af_trainer **out);
/* Frees the trainer (the borrowed model and data stay). NULL is ignored. */
void af_trainer_free(af_trainer *t);

/* Print data statistics (train, val), the run plan (steps, warm-up, trainable parameters),
 * the memory estimate and the diagnostics to fp. */
void af_trainer_report(const af_trainer *t, FILE *fp);
/* 1 when a diagnostic is an error or the memory estimate exceeds physical RAM. */
int af_trainer_has_errors(const af_trainer *t);
/* The number of errors af_trainer_report prints: error diagnostics plus the memory estimate when
 * it exceeds the limit (so a summary line counts what was printed). */
int af_trainer_n_errors(const af_trainer *t);
/* Diagnostics of the configuration. Borrowed: valid while `t` lives. */
const af_diag_list *af_trainer_diags(const af_trainer *t);

/* Train (see the section comment). Refuses (AF_ERR_INVALID_ARG) when af_trainer_has_errors, when
 * output_dir holds another run and overwrite is off, or when the resume state does not match.
 * `res` (may be NULL) receives the summary. Returns AF_OK also for early stop and interruption
 * (see res->stop); AF_ERR_RANGE for the non-finite stop; AF_ERR_IO when a file cannot be written
 * (the previous checkpoints stay intact). Call once per trainer. */
af_status af_trainer_run(af_trainer *t, af_train_result *res);

/* Resolve a resume argument to a checkpoint directory: `arg` itself when it holds
 * trainer_state.safetensors, else its newest checkpoint-N subdirectory holding one. `*ckpt`:
 * malloc'ed, caller frees. Errors: AF_ERR_NOT_FOUND (naming arg), AF_ERR_NOMEM. */
af_status af_trainer_find_checkpoint(const char *arg, char **ckpt);

/* ---------------------------------------------------------------------------------------------
 * Training settings by key: the flags of `afinar train` / `afinar check` and their JSON form
 *
 * Every option of a run has a key, the flag's long name without dashes ("lr", "grad-accum", ...).
 * A settings object maps keys to values (text, or a boolean) in insertion order; a --config
 * FILE.json or a checkpoint's train_config.json is such an object written as JSON
 * {"key": value, ...} (values: JSON numbers, booleans, or strings holding them). Messages name
 * the keys as flags ("--batch: expected an integer in [1, 1000000], got '0'").
 * ------------------------------------------------------------------------------------------- */
typedef enum af_setting_kind {
    AF_SETTING_TEXT = 0,   /* a string (file name, spec) */
    AF_SETTING_INT = 1,    /* an integral number in [lo, hi] */
    AF_SETTING_NUMBER = 2, /* a number in [lo, hi] */
    AF_SETTING_BOOL = 3    /* true / false (flags: --key and --no-key) */
} af_setting_kind;

typedef struct af_setting_info {
    const char *name;      /* key = long flag name */
    af_setting_kind kind;
    int short_opt;         /* one-letter flag ('m', 'o', 't') or 0 */
    double lo, hi;         /* range of INT / NUMBER keys */
    const char *arg;       /* placeholder of the value in a usage text ("FILE", "N"), NULL for BOOL */
    const char *help;      /* one-line description (the default: af_train_setting_default) */
    const char *group;     /* the help section: "model and data", "task", "LoRA and head", "optimisation",
                              "schedule", "evaluation", "checkpoints", "compute", "output" */
    int train_only;        /* 1: no meaning to a dry run (`afinar check` does not list it) */
} af_setting_info;

/* Where a setting's value came from, lowest precedence first (recorded per key in
 * af_trainer_opts.origin, shown by `afinar check`, written to run.json). */
typedef enum af_setting_origin {
    AF_ORIGIN_DEFAULT = 0, /* the built-in default (of the task) */
    AF_ORIGIN_CALLER = 1,  /* set in af_trainer_opts by a C caller, not through a settings object */
    AF_ORIGIN_RESUME = 2,  /* the checkpoint's train_config.json (--resume) */
    AF_ORIGIN_CONFIG = 3,  /* a --config file (af_train_settings_read) */
    AF_ORIGIN_FLAG = 4,    /* the command line, or af_train_settings_set by a program */
    AF_ORIGIN_RECIPE = 5   /* chosen by the automatic recipe (or the time budget) */
} af_setting_origin;

/* "default", "caller", "resume", "config", "flag", "recipe"; "?" for anything else. Static. */
const char *af_setting_origin_name(af_setting_origin origin);

/* The default of `key` as it applies to a run of `task` with the automatic recipe when `auto_recipe`
 * is 1 ("auto: from the data" and the fixed recipe's value for the keys the recipe decides), into
 * buf (NUL-terminated, truncated to cap). Returns buf, or NULL for an unknown key. The values are
 * those of af_trainer_opts_defaults after the task's own defaults (causal-lm: targets all-linear,
 * lora-layers all, lr 2e-4). */
char *af_train_setting_default(const char *key, af_task task, int auto_recipe, char *buf, size_t cap);

/* The keys in reference order; `*n` receives their count. Static. */
const af_setting_info *af_train_setting_keys(int32_t *n);

/* An empty settings object. `*out`: caller frees with af_train_settings_free().
 * Errors: AF_ERR_NOMEM. */
typedef struct af_train_settings af_train_settings;
af_status af_train_settings_new(af_train_settings **out);
/* Frees settings. NULL is ignored. */
void af_train_settings_free(af_train_settings *s);

/* Mark every key `s` holds now as coming from `origin` (af_train_settings_set marks AF_ORIGIN_FLAG;
 * af_train_settings_read AF_ORIGIN_CONFIG; af_train_settings_read_checkpoint AF_ORIGIN_RESUME;
 * af_train_settings_merge keeps the source's). NULL is ignored. */
void af_train_settings_set_origin(af_train_settings *s, af_setting_origin origin);

/* Set `key` to the text `value` (copied) or to a boolean; an earlier value of the key is dropped
 * and the key moves to the end of the order. Values are checked by af_train_settings_to_opts.
 * Errors: AF_ERR_INVALID_ARG (NULL argument), AF_ERR_NOMEM. */
af_status af_train_settings_set(af_train_settings *s, const char *key, const char *value);
af_status af_train_settings_set_bool(af_train_settings *s, const char *key, int value);

/* The value of `key` when it is text, else NULL. Borrowed: valid until `s` changes. */
const char *af_train_settings_get(const af_train_settings *s, const char *key);

/* Read a JSON settings file; `what` names it in messages ("config file"). Every key must be a
 * known key other than "resume", every value a string, number or boolean. `*out`: caller frees
 * with af_train_settings_free(). Errors: AF_ERR_IO ("PATH: cannot read WHAT: <strerror>"),
 * AF_ERR_FORMAT ("PATH:LINE: invalid JSON at column C (byte B) in the WHAT", "PATH: WHAT is
 * empty", "PATH: WHAT must be a JSON object", "PATH: unknown key \"K\"", "PATH: key \"K\":
 * expected a string, number or boolean"), AF_ERR_NOMEM. */
af_status af_train_settings_read(const char *path, const char *what, af_train_settings **out);

/* Copy every key of `src` into `dst` (src's values win; new keys are appended in src's order).
 * Errors: AF_ERR_NOMEM (dst may then hold part of src). */
af_status af_train_settings_merge(af_train_settings *dst, const af_train_settings *src);

/* Fill `o`: af_trainer_opts_defaults(), recipe AF_RECIPE_AUTO (settings, hence the command line,
 * default to the automatic recipe; "recipe": "fixed" turns it off), then every key of `s` in order;
 * o->given marks the recipe's keys present in `s` ("epochs" / "max-steps" > 0, "class-weights",
 * "max-seq-len", "lora-layers", "warmup", "eval-every"). The strings of `o` are
 * borrowed from `s` (valid while `s` lives and is not changed). "warmup" takes N steps, a fraction
 * F < 1 or P%; "pooling" mean | last; "schedule" constant | cosine | linear. With "max-steps" and
 * no "epochs", epochs is 0 (max-steps sets the length). "time-budget" is in minutes.
 * Errors: AF_ERR_INVALID_ARG (a value of the wrong type or out of its key's range, naming the flag
 * and the value; "val" with "val-split"; no epochs and no max-steps), AF_ERR_NOMEM. */
af_status af_train_settings_to_opts(af_train_settings *s, af_trainer_opts *o);

/* The settings as pretty-printed JSON without the keys "resume" and "overwrite" (what a run stores
 * as config_json). `*out`: malloc'ed, caller frees with free(). Errors: AF_ERR_NOMEM. */
af_status af_train_settings_to_json(const af_train_settings *s, char **out);

/* The settings of checkpoint `ckpt` (a directory from af_trainer_find_checkpoint) for resuming it:
 * its manifest.json is verified first (every file's size and SHA-256; a checkpoint written before
 * manifests existed is read unverified, one that lost its manifest is refused), then its
 * train_config.json is read as by af_train_settings_read, with two changes for a run directory that
 * was moved: "output" is dropped (a resumed run writes next to its checkpoint unless the caller
 * sets it again), and the files of "model", "train", "val" and "labels" are looked up first
 * relative to the checkpoint (the run and its files moved together), then at the absolute path
 * they had when the run started (the run moved alone), else the value stays as it was given.
 * `note` (may be NULL) receives a malloc'ed text (caller frees; NULL when there is nothing to say)
 * with one line per path that was changed or not found. `*out`: free with af_train_settings_free.
 * Errors: those of af_train_settings_read; AF_ERR_FORMAT / AF_ERR_IO for a checkpoint whose files
 * do not match its manifest (the message names the file and the newest earlier checkpoint that
 * verifies), AF_ERR_NOMEM. */
af_status af_train_settings_read_checkpoint(const char *ckpt, af_train_settings **out, char **note);

/* ---------------------------------------------------------------------------------------------
 * Classifiers: a trained adapter loaded for prediction (`afinar eval` / `afinar predict`)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_classifier af_classifier;

/* Load an adapter directory written by the trainer (or any PEFT SEQ_CLS LoRA adapter with a
 * score head: pooling then defaults to "last", max_seq_len to 512; or a LoRA GGUF with afinar's
 * head keys, af_adapter_export_gguf; or a model file merged by af_merge_adapter, which carries the
 * head itself: pass its path as both model_path and adapter_dir) on top of `model` (borrowed:
 * must outlive the classifier) or, when NULL, the GGUF at model_path (loaded with `ctx` and owned).
 * Computations run under `ctx` (borrowed, must outlive the classifier; NULL: the model's).
 * `*out`: caller frees with af_classifier_free(). Errors: those of af_model_load and of reading
 * the adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND, AF_ERR_UNSUPPORTED), AF_ERR_INVALID_ARG
 * (adapter made for another model shape, no classification head), AF_ERR_NOMEM. */
af_status af_classifier_load(const af_ctx *ctx, const char *model_path, const af_model *model,
                             const char *adapter_dir, af_classifier **out);
/* Frees the classifier (and the model it loaded itself). NULL is ignored. */
void af_classifier_free(af_classifier *c);

/* The base model (borrowed: valid while `c` lives), the number of classes C, 1 for a multi-label
 * head (else 0), the truncation length of the samples, and the class names [C] (borrowed; NULL for
 * integer labels). */
const af_model *af_classifier_model(const af_classifier *c);
int32_t af_classifier_num_classes(const af_classifier *c);
int af_classifier_multi_label(const af_classifier *c);
int32_t af_classifier_max_seq_len(const af_classifier *c);
const char *const *af_classifier_label_names(const af_classifier *c);
/* What the loader had to assume because the adapter's afinar.json is missing or lacks a field (a
 * PEFT/transformers adapter: last-token pooling, max_seq_len 512, label ids as names), as one
 * sentence naming the file; NULL when nothing was assumed. Commands print it as a warning. */
const char *af_classifier_note(const af_classifier *c);

/* probs [af_dataset_size(ds), C] (C = af_classifier_num_classes): softmax (single-label) or
 * sigmoid (multi-label) of the logits of every sample of `ds`, batches of `batch` samples in
 * data-set order (no dropout). Errors: AF_ERR_INVALID_ARG (NULL argument, batch < 1, data with more
 * classes than the adapter, multi-label data for a single-label adapter), AF_ERR_NOMEM. */
af_status af_classifier_probs(af_classifier *c, const af_dataset *ds, int32_t batch, float *probs);

/* One prediction as a single-line JSON object (what `afinar predict` prints), from probs [C]:
 *   single-label  {"label": NAME, "label_id": ID, "probs": [...]}       (ID = argmax, ties -> lowest)
 *   multi-label   {"labels": [NAMES], "label_ids": [IDS], "probs": [...]}  (classes with p >= threshold)
 * NAME is the class name, or the id as text for integer labels; probabilities are printed with 6
 * significant digits. `*out`: malloc'ed, caller frees with free(). Errors: AF_ERR_INVALID_ARG
 * (NULL argument), AF_ERR_NOMEM. */
af_status af_classifier_prediction_json(const af_classifier *c, const float *probs, double threshold, char **out);

/* ---------------------------------------------------------------------------------------------
 * Text-generation metrics and generation-based evaluation (what `afinar eval --generate N` runs)
 * ------------------------------------------------------------------------------------------- */

/* Exact match of a generated text against its reference: 1 when `pred` and `ref` are byte-for-byte
 * equal after removing leading and trailing ASCII whitespace (space, \t, \n, \r, \v, \f) from
 * each; case, inner whitespace and every other byte are kept (no lowercasing, no punctuation
 * stripping). NULL counts as "". Never fails. */
int af_exact_match(const char *pred, const char *ref);

/* ROUGE-L of one prediction against one reference (C.-Y. Lin 2004, section 3.1: sentence-level
 * LCS, F with beta = 1): R = LCS/|ref tokens|, P = LCS/|pred tokens|, F = 2PR/(P+R); all three 0
 * when either side has no token. Tokens as the `rouge_score` package's default tokenizer (no
 * stemming): lowercase, every character other than a-z, 0-9 separates, tokens are the runs of
 * [a-z0-9] (so non-ASCII letters separate too; U+0130 and U+212A map to "i" and "k" as Python's
 * str.lower() does). Values are fractions in [0, 1]. */
typedef struct af_rouge_score {
    double precision, recall, fmeasure;
} af_rouge_score;

/* `pred`, `ref`: NUL-terminated UTF-8 (NULL counts as ""); `*out` receives the scores.
 * Time O(|pred|·|ref|) tokens, memory O(|pred| + |ref|) bytes. Errors: AF_ERR_INVALID_ARG (NULL
 * out), AF_ERR_NOMEM (then *out is zero). */
af_status af_rouge_l(const char *pred, const char *ref, af_rouge_score *out);

/* Options of af_gen_eval_run. */
typedef struct af_gen_eval_opts {
    int32_t max_examples;   /* score the first N examples of the file; <= 0: all of them */
    int32_t max_new_tokens; /* greedy tokens generated per example (stops earlier at an
                               end-of-generation token, af_token_is_eog); <= 0: 64 */
    int first_line;         /* 1: score only the generation's first non-empty line (leading
                               whitespace and newlines skipped, cut at the next '\n');
                               generation then stops at that '\n' (what is scored is the
                               same); 0: the whole generation */
    FILE *log;              /* one progress line per example ("\r"-updated); NULL: silent */
    const char *chat_template; /* conversations: "chatml" | "gemma" instead of the model's own
                               template; NULL or "auto": the model's (as training's setting) */
} af_gen_eval_opts;

/* Fill `o` with the defaults: all examples, 64 new tokens, whole generation, no log, the model's
 * chat template. */
void af_gen_eval_opts_init(af_gen_eval_opts *o);

/* One scored example. Strings are owned by the result (NUL-terminated UTF-8). */
typedef struct af_gen_example {
    int32_t line;               /* 1-based line of the example in the data file */
    char *prompt;               /* the prompt text as read, or the rendered chat prompt */
    char *reference;            /* the reference completion / last assistant turn as read */
    int chat;                   /* 1: a conversation rendered with the chat template */
    char *generated;            /* the decoded greedy generation (special tokens not rendered) */
    char *prediction;           /* what was scored: `generated`, or its first line (first_line) */
    int32_t prompt_tokens;      /* tokens of the rendered prompt (BOS included when added) */
    int32_t new_tokens;         /* tokens generated (the end-of-generation token included) */
    int exact;                  /* af_exact_match(prediction, reference) */
    af_rouge_score rouge_l;     /* af_rouge_l(prediction, reference) */
} af_gen_example;

/* Result of af_gen_eval_run; free with af_gen_eval_result_free. */
typedef struct af_gen_eval_result {
    int32_t n;                  /* examples scored */
    af_gen_example *ex;         /* [n], file order */
    double exact_match;         /* mean of ex[i].exact, in [0, 1] */
    double rouge_l_precision;   /* means over the examples of ex[i].rouge_l (macro average, as */
    double rouge_l_recall;      /*   rouge_score's per-pair scores averaged) */
    double rouge_l_f;
    int64_t prompt_tokens, new_tokens; /* sums over the examples */
    double prompt_seconds, decode_seconds; /* wall time of the prompt evaluations / of decoding */
} af_gen_eval_result;

/* Greedy generation for the first examples of a causal-LM JSONL file and their scores.
 * Data: the causal-LM reader's (af_lm_dataset_read; FORMATS.md §10): TRL's forms, one per file,
 * parsed whole (every line is checked, also beyond max_examples):
 *   {"prompt": STRING, "completion": STRING}: the prompt is rendered as training renders plain
 *     prompt/completion data: the prompt text alone, af_tokenize(add_special = 1, parse_special
 *     = 0), i.e. with BOS when the model's metadata adds one, special-token texts as plain text;
 *   {"messages": [...]} or {"prompt": [...], "completion": [...]} (single- or multi-turn): the
 *     reference is the last assistant turn's content; every message before it is rendered with
 *     the model's chat template and the generation prompt (the renderer of training, with the
 *     template's default system message when none is given), tokenized with parse_special = 1.
 * Refused: plain {"text"} data (no reference), a conversation that does not end with an
 * assistant turn or has no user turn before it.
 * Each example: af_session_reset, the prompt evaluated in one batch, then argmax decoding
 * (ties -> lowest id) until an end-of-generation token or opts.max_new_tokens. The session `s`
 * (borrowed) carries the adapter, if any (af_session_load_adapter: applied unmerged), and must
 * hold prompt + max_new_tokens positions for every example (an af_session_new n_ctx of 0 gives
 * the model's maximum, capped at 4096). `opts` may be NULL (defaults). `*out` is filled (zeroed
 * first); free it with af_gen_eval_result_free (also after an error).
 * Errors (messages name FILE:LINE and the field): AF_ERR_INVALID_ARG (NULL argument), AF_ERR_IO
 * (cannot open/read), AF_ERR_FORMAT (the reader's errors: invalid JSON, a missing or mistyped
 * field, an unknown role, mixed formats, no example; the refusals above; Gemma turns that do not
 * alternate; an empty prompt after tokenization), AF_ERR_UNSUPPORTED (a conversation and a model
 * without a chat template afinar renders, and no opts.chat_template), AF_ERR_RANGE (prompt + max_new_tokens longer than the
 * session), AF_ERR_NOMEM. */
af_status af_gen_eval_run(af_session *s, const char *data_path, const af_gen_eval_opts *opts,
                          af_gen_eval_result *out);

/* Frees what `r` owns and zeroes it. NULL is ignored. */
void af_gen_eval_result_free(af_gen_eval_result *r);

/* The result as a pretty-printed JSON object:
 *   {"n", "exact_match", "rouge_l": {"precision", "recall", "f"}, "prompt_tokens", "new_tokens",
 *    "prompt_seconds", "decode_seconds",
 *    "examples": [{"line", "reference", "prediction", "generated", "exact", "rouge_l_f"}]}
 * followed by the string members of `extra` (may be NULL): {key0, value0, ..., NULL}.
 * `*out`: malloc'ed NUL-terminated text, caller frees with free().
 * Errors: AF_ERR_INVALID_ARG (NULL r or out), AF_ERR_NOMEM. */
af_status af_gen_eval_json(const af_gen_eval_result *r, const char *const *extra, char **out);

/* ---------------------------------------------------------------------------------------------
 * Adapter merging (`afinar merge-adapters`)
 *
 * Several LoRA adapters of the same base model become one adapter. Every method works on each
 * adapted projection's ΔW_i = s_i·B_i·A_i [out, in] (s_i = lora_alpha/r, or lora_alpha/sqrt(r) with
 * use_rslora), never on A and B separately (which would add cross terms B_i·A_j between adapters);
 * the merged ΔW is then written as a PEFT adapter directory (af_lora_trainer_save_adapter's format)
 * of rank r with lora_alpha = r (scale 1): B = U_r·diag(σ_r), A = V_rᵀ from the truncated SVD of ΔW
 * (Eckart–Young: the best rank-r approximation), as PEFT's svd combinations write it
 * (peft 0.21 tuners/lora/model.py _svd_generalized_task_arithmetic_weighted_adapter). The method
 * definitions are those of peft/utils/merge_utils.py, applied to the ΔW_i with weights w_i:
 *   linear, svd     ΔW = Σ w_i ΔW_i (task arithmetic; PEFT's "svd"; afinar's "linear" is the same
 *                   computation — PEFT's own "linear" mixes A and B separately, which afinar does not)
 *   cat             ΔW = Σ w_i ΔW_i written EXACTLY at rank Σ r_i: A = [w_1 s_1 A_1; w_2 s_2 A_2; ...]
 *                   (rows concatenated), B = [B_1 B_2 ...] (columns), projections missing in an
 *                   adapter zero-padded (PEFT's "cat")
 *   ties            T_i = magnitude-prune(ΔW_i, density): keep the k = floor(density·out·in) largest
 *                   |entries| (ties at the threshold: lowest row-major index first), zero the rest;
 *                   elected sign e = sign(Σ_i T_i) ("total") or sign(Σ_i sign(T_i)) ("frequency"),
 *                   +1 where that sum is 0; ΔW = Σ_i w_i T_i [sign(T_i) = e] / max(1, Σ_i [sign(T_i) = e])
 *                   (disjoint merge; zero entries never count); PEFT's "ties_svd"
 *   dare-linear     T_i = random-prune(ΔW_i, density) / density, ΔW = Σ w_i T_i (PEFT "dare_linear_svd")
 *   dare-ties       random-prune as dare-linear, then sign election and disjoint merge as ties
 *   magnitude-prune T_i = magnitude-prune(ΔW_i, density), ΔW = Σ w_i T_i
 * Random pruning (DARE) keeps entry (o, j) of adapter i's ΔW [out, in] when
 *   af_ctr_u01(af_ctr_key(seed, layer, proj, i), o·in + j) < density
 * with the splitmix64 counter RNG of src/lora/lora.h (proj: 0 q, 1 k, 2 v, 3 o, 4 gate, 5 up,
 * 6 down; i: 0-based adapter position; rows in the file's row order, HF for q/k) — deterministic
 * for a seed, reimplemented in tests/ref/make_merge_ref.py. density >= 1 prunes nothing.
 * Adapters may target different projections and layers: the result covers the union, an adapter
 * without a projection contributing ΔW_i = 0 there (for every method this equals PEFT's rule of
 * merging only the adapters that have the module). Ranks, lora_alpha and rsLoRA may differ. A
 * projection present in several adapters must have the same [out, in] everywhere.
 * Classification heads (modules_to_save "score"): every adapter has one or none; merged heads need
 * the same [num_classes, hidden] and the same label names (afinar.json "labels"); the head is
 * combined linearly, W = Σ w_i W_i (and the bias likewise, a missing bias counting as 0). PEFT has no
 * head merge (add_weighted_adapter refuses adapters that share a modules_to_save module).
 * ------------------------------------------------------------------------------------------- */
typedef enum af_merge_method {
    AF_MERGE_LINEAR = 0,
    AF_MERGE_SVD,
    AF_MERGE_CAT,
    AF_MERGE_TIES,
    AF_MERGE_DARE_TIES,
    AF_MERGE_DARE_LINEAR,
    AF_MERGE_MAGNITUDE_PRUNE,
    AF_MERGE_METHOD_COUNT
} af_merge_method;

/* "linear", "svd", "cat", "ties", "dare-ties", "dare-linear", "magnitude-prune" (also accepted
 * with '_' for '-'). Errors: AF_ERR_INVALID_ARG naming the unknown method and listing the known
 * ones. af_merge_method_name returns the first spelling (static), "unknown" out of range. */
af_status af_merge_method_parse(const char *name, af_merge_method *out);
const char *af_merge_method_name(af_merge_method m);

typedef struct af_adapter_merge_opts {
    af_merge_method method;  /* (AF_MERGE_LINEAR) */
    const double *weights;   /* [n_weights] w_i (any sign), borrowed; NULL: every w_i = 1 */
    int32_t n_weights;       /* must equal the number of adapters when weights != NULL */
    double density;          /* ties, dare-*, magnitude-prune: fraction of entries kept, in (0, 1]
                                (required: 0 = not given); the other methods: must be 0 */
    int32_t rank;            /* rank of the result, 1..min(out, in) of every projection; 0: the
                                largest input rank (PEFT's default); cat: 0 or Σ r_i */
    uint64_t seed;           /* DARE masks (0) */
    int majority_sign_frequency; /* ties / dare-ties sign election: 0 "total" (PEFT default),
                                    1 "frequency" */
    int overwrite;           /* 1: replace an existing output adapter directory */
    int n_threads;           /* projections merged at the same time (0: one per CPU this process may
                                run on); the result does not depend on it */
} af_adapter_merge_opts;

/* Defaults as marked above (method linear, weights 1, rank 0, seed 0, total, no overwrite, all CPUs). */
void af_adapter_merge_opts_default(af_adapter_merge_opts *o);

/* What a merge did (filled on success). */
typedef struct af_adapter_merge_report {
    int32_t rank;            /* rank written */
    int32_t n_projections;   /* adapted (layer, projection) pairs written */
    int has_head;            /* 1: a merged classification head was written */
    double max_rel_error;    /* max over projections of |ΔW - B·A|_F / |ΔW|_F, the truncation error
                                (0 for cat, and where ΔW = 0) */
    int32_t worst_layer;     /* where max_rel_error occurs (-1 when none) */
    char worst_proj[16];     /* "q_proj", ... ("" when none) */
} af_adapter_merge_report;

/* Merge the adapter directories `dirs` [n] (n >= 1; PEFT LoRA adapters as afinar or PEFT write them)
 * into a new adapter directory `out_dir` (see the section comment for the methods). Written as a
 * whole or not at all: into a temporary directory next to `out_dir`, then renamed; an existing
 * `out_dir` is an error unless opts->overwrite, and then it must be an adapter directory (it has
 * adapter_config.json and no sub-directory), which is replaced after the new one is complete.
 * adapter_config.json: r = lora_alpha = rank, use_rslora false, target_modules the union,
 * layers_to_transform when not every layer is adapted, task_type and base_model_name_or_path of the
 * first adapter; afinar.json: the first adapter's architecture / pooling / max_seq_len / labels,
 * q/k row order as the inputs, and "merge": {method, adapters, weights, density, seed, rank,
 * majority_sign}. Memory: the inputs' parameters, plus for ties / dare / magnitude-prune n + 2 dense
 * double matrices [out, in] per projection being merged (n_threads at a time). Time: the dense
 * methods take the SVD of each [out, in] ΔW (Householder QR + one-sided Jacobi, src/lora/svd.h):
 * about 2·out·in·min + 4·min³ flops per sweep, ~11 sweeps (min = min(out, in)): seconds for a
 * 576 x 576 projection; the factored methods (linear, svd, cat) never form ΔW and take milliseconds.
 * `opts` NULL: defaults; `report` may be NULL.
 * Errors (messages name the adapter directory and the field): AF_ERR_INVALID_ARG (NULL, n < 1,
 * weights count != n, non-finite weight, density outside (0, 1] or given for a method without
 * pruning or missing for one with pruning, rank < 0 or above min(out, in) of a projection, cat with
 * a rank other than Σ r_i, adapters for different architectures / numbers of layers, a projection
 * or head of different shapes, heads in some adapters only, different label names, q/k row orders
 * that differ), AF_ERR_IO (output exists without overwrite, or is not an adapter directory; write
 * failures), the errors of reading an adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND,
 * AF_ERR_UNSUPPORTED), AF_ERR_NOMEM. */
af_status af_adapter_merge(const char *const *dirs, int32_t n, const char *out_dir, const af_adapter_merge_opts *opts,
                           af_adapter_merge_report *report);

/* ---------------------------------------------------------------------------------------------
 * Multi-process runs (MPI)
 * `mpirun -np N afinar train ...` (or `srun`) trains one model data-parallel over N processes,
 * each with the whole data set: the global sample order, the split of every step's micro-batches
 * over the ranks and the dropout keys do not depend on N, and the per-micro-batch gradients are
 * gathered to every rank and summed in micro-batch order, so N = 1, 2, 4 ... give byte-identical
 * adapters (af_trainer_run). Built only when the build finds Open MPI (Makefile: MPI=1).
 * --------------------------------------------------------------------------------------------- */

/* What af_dist_init found. */
typedef struct af_dist_info {
    int32_t rank;       /* this process, 0 .. world_size - 1 (0 when not launched by MPI) */
    int32_t world_size; /* processes of the job (1 when not launched by MPI) */
    int active;         /* 1: launched by an MPI launcher (mpirun, srun) and MPI is built in: af_trainer_run
                           runs data-parallel over the job; 0: one process, nothing changes */
} af_dist_info;

/* The MPI library afinar was built with ("Open MPI v4.1.4, ..." as MPI_Get_library_version says,
 * first line), or NULL when MPI is not built in. Static string. */
const char *af_dist_library(void);

/* Initialise MPI when this process was started by an MPI launcher (Open MPI's mpirun sets
 * OMPI_COMM_WORLD_SIZE; PMIx / PMI launchers such as Slurm's srun set PMIX_RANK / PMI_RANK) and MPI
 * is built in; otherwise one process of one. Idempotent; call it before reading data so that a rank
 * that fails can stop the job (af_dist_abort). Under MPI, SIGTERM (what the launcher sends when
 * another rank died) prints "rank R: stopped by the MPI launcher at step S ..." before exiting.
 * Errors: AF_ERR_IO (MPI_Init failed). */
af_status af_dist_init(af_dist_info *info);

/* Stop every process of the job now (MPI_Abort with `exit_code`) when af_dist_init found a job of
 * more than one process; otherwise return (the caller exits as usual). Print the reason first. */
void af_dist_abort(int exit_code);

/* End MPI (MPI_Finalize) if af_dist_init started it; every rank must call it at a clean exit. */
void af_dist_finalize(void);

/* ---------------------------------------------------------------------------------------------
 * Taking an adapter elsewhere: llama.cpp LoRA GGUF export, merging into a GGUF model
 * (`afinar export`, `afinar merge`; file layouts in docs/FORMATS.md §8)
 * ------------------------------------------------------------------------------------------- */

/* Write the adapter `adapter` (a PEFT/afinar adapter directory, or a LoRA GGUF) for the base model
 * at `model_path` as a llama.cpp LoRA GGUF file `out_path` (general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha = s·r where s is the adapter's scale alpha/r or alpha/sqrt(r), so
 * llama.cpp's alpha/r gives s; general.architecture of the base; for every adapted projection
 * blk.{i}.{attn_q,...,ffn_down}.weight.lora_a (ggml ne {in, r}, f32) and .lora_b (ne {r, out}),
 * the lora_b rows of llama q/k in the GGUF's permuted order). The model is needed for its
 * architecture, its q/k head geometry and to check every shape. A classification head, the labels
 * and afinar.json travel as afinar.* metadata (llama.cpp ignores them). Written atomically (temp
 * file + rename). Errors: AF_ERR_INVALID_ARG (NULL argument; out_path exists and !overwrite;
 * adapter made for another architecture or shape; an adapter without LoRA tensors), those of
 * af_model_load and of reading the adapter (AF_ERR_IO, AF_ERR_FORMAT, AF_ERR_NOT_FOUND,
 * AF_ERR_UNSUPPORTED), AF_ERR_IO (writing), AF_ERR_NOMEM. Nothing is written on error. */
af_status af_adapter_export_gguf(const char *model_path, const char *adapter, const char *out_path, int overwrite);

/* Options of af_merge_adapter; zero-initialised = keep each tensor's type, refuse to overwrite. */
typedef struct af_merge_opts {
    /* Type of the merged (adapted) tensors: NULL or "keep" = each tensor's original type, or one of
     * "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q6_k" (ggml's
     * reference quantizers, bit for bit). Tensors the adapter does not touch keep their type and
     * bytes whatever this says. */
    const char *type;
    int overwrite;          /* 1: replace an existing out_path */
} af_merge_opts;

/* What af_merge_adapter did (all zero on error). */
typedef struct af_merge_stats {
    int32_t merged;         /* tensors W + s·B·A re-quantized */
    int32_t copied;         /* tensors copied byte for byte */
    double delta_rms;       /* RMS of s·B·A over the merged tensors' elements */
    double requant_rms;     /* RMS of dequant(quant(W + s·B·A)) - (W + s·B·A) (the re-quantization error;
                               0 for "f32") */
    double base_requant_rms;/* RMS of dequant(quant(W)) - W with the same output type, for comparison
                               (0 when the type is kept: W is then stored exactly) */
} af_merge_stats;

/* Fold the adapter into the model at `model_path` and write the result to `out_path` (a GGUF llama.cpp
 * and afinar load like the base): every adapted tensor W [out, in] becomes quant(W + s·B·A), in
 * f32 (Wd dequantized, the product accumulated in f32, then quantized with af_quantize_row);
 * every other tensor and every metadata KV is copied byte for byte, in the same order (the
 * tensor infos differ only in the merged tensors' types and the data offsets). A classification
 * head travels as the afinar.classifier.* keys (and afinar.adapter_json), replacing such keys of
 * the base, so af_classifier_load(model = OUT, adapter = OUT) / `afinar predict -m OUT` runs the
 * merged classifier. Written atomically (temp file + rename). `opts` may be NULL (defaults);
 * `stats` may be NULL.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; unknown type, naming the known ones; out_path exists
 * and !overwrite; adapter for another architecture or shape; a merged tensor whose row length is
 * not a multiple of the output type's block size, naming the tensor), AF_ERR_UNSUPPORTED (a tensor
 * type afinar cannot dequantize or re-quantize), those of af_model_load and of reading the adapter,
 * AF_ERR_IO, AF_ERR_NOMEM. Nothing is written on error. */
af_status af_merge_adapter(const char *model_path, const char *adapter, const char *out_path,
                           const af_merge_opts *opts, af_merge_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * `afinar serve`: an OpenAI-compatible HTTP server (libmicrohttpd; built when the Makefile finds
 * it, else af_server_run returns AF_ERR_UNSUPPORTED). Endpoints, limits and the batching policy:
 * README "Serving (afinar serve)".
 * ------------------------------------------------------------------------------------------- */
typedef struct af_server_opts {
    const char *model_path;        /* GGUF file or HF directory (required) */
    const char *const *adapter_names; /* [n_adapters] model ids of the adapters (borrowed) */
    const char *const *adapter_paths; /* [n_adapters] their directories / LoRA GGUF files */
    int32_t n_adapters;
    const char *host;              /* ("127.0.0.1") address to listen on: an IPv4 address or "localhost" */
    int32_t port;                  /* (8080) 0: any free port (the log's "listening on" line names it) */
    int32_t max_seqs;              /* (4) sequences decoded together (continuous batching), 1..64 */
    int32_t n_ctx;                 /* (2048) positions per sequence (prompt + generated); <= the model's */
    int32_t queue;                 /* (16) requests waiting for a sequence slot; more: HTTP 429 */
    int64_t max_body;              /* (1 MiB) request body limit in bytes; more: HTTP 413 */
    int32_t timeout_s;             /* (60) a connection idle this long (slow client) is closed */
    const char *chat_template;     /* NULL/"auto": the model's; "chatml" | "gemma" */
    const af_ctx *ctx;             /* NULL: defaults (all threads) */
    FILE *log;                     /* one line per request and the "listening on" line; NULL: silent */
    const volatile int *stop;      /* non-zero (a SIGINT/SIGTERM handler): refuse new requests (503),
                                      finish the ones in flight, return */
} af_server_opts;

/* Defaults as marked above. */
void af_server_opts_default(af_server_opts *o);

/* Load the model and adapters and serve until *o->stop (returns AF_OK then). Errors: those of
 * loading the model and adapters, AF_ERR_INVALID_ARG (an option out of range, a duplicate adapter
 * name), AF_ERR_IO (the address cannot be bound), AF_ERR_UNSUPPORTED (built without
 * libmicrohttpd). */
af_status af_server_run(const af_server_opts *o);

/* ---------------------------------------------------------------------------------------------
 * Conversion of a Hugging Face checkpoint to GGUF (`afinar convert`)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_convert_opts {
    /* Type of the 2-D weights: NULL or "keep" = each tensor's stored type (F32/F16/BF16: the
     * conversion is exact), or "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
     * "q6_k" (ggml's reference quantizers). A matrix whose rows are not a multiple of the type's block
     * falls back to q8_0 (rows a multiple of 32) or f16 (counted in af_convert_stats.fallback).
     * 1-D tensors (norms, biases, RoPE factors, output scales) are always F32. */
    const char *type;
    int overwrite;          /* 1: replace an existing out_path */
    FILE *log;              /* progress and notes (NULL: quiet) */
} af_convert_opts;

typedef struct af_convert_stats {
    int32_t tensors;        /* tensors written */
    int32_t converted;      /* 2-D weights stored in another type than the checkpoint's */
    int32_t fallback;       /* of those, stored in q8_0 / f16 because of their row length */
    int32_t folded_q_scale; /* 1: the attention scale (query_pre_attn_scalar) was folded into attn_q_norm */
    uint64_t bytes;         /* size of the written file */
} af_convert_stats;

/* Convert the Hugging Face checkpoint directory `dir` (what af_model_load accepts: llama, gemma3,
 * qwen2, qwen3, gemma4) to the GGUF `out_path` with llama.cpp's tensor names and metadata
 * (general.*, {arch}.* hyper-parameters as llama.cpp's convert_hf_to_gguf.py writes them, per-layer
 * arrays where layers differ, the sliding pattern, gemma4's KV sharing / PLE / RoPE factors) and the
 * tokenizer (tokenizer.ggml.*: af_tokenizer_gguf_write; none when the directory has no usable
 * tokenizer). The weights are those af_model_load made of the directory: llama q/k rows in llama.cpp's
 * order, Gemma 3 norms as 1 + w, so loading the file gives the directory's model (bit for bit with
 * "keep" and F32/F16 checkpoints). A gemma3 query_pre_attn_scalar other than head_dim, which llama.cpp
 * cannot store, is folded into attn_q_norm (exact up to one f32 rounding). Written atomically.
 * `opts`, `stats` may be NULL. Errors: AF_ERR_INVALID_ARG (NULL argument, unknown type, not a
 * directory, out_path exists and !overwrite), those of af_model_load, AF_ERR_NOMEM, AF_ERR_IO. */
af_status af_model_convert(const char *dir, const char *out_path, const af_convert_opts *opts,
                           af_convert_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* AFINAR_H */
