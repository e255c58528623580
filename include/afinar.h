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

/* AF_API marks the functions libafinar.so exports (it is built with -fvisibility=hidden: every
 * other function of the library stays internal). */
#ifndef AF_API
#if defined(__GNUC__) || defined(__clang__)
#define AF_API __attribute__((visibility("default")))
#else
#define AF_API
#endif
#endif

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
    AF_ERR_CANCELLED = 9,   /* the work stopped because it was asked to, through the caller's flag
                               (af_session_set_control, af_lora_trainer_set_control,
                               af_trainer_opts.cancel / .interrupt, af_ctx_set_interrupt; the CLI sets
                               it on SIGINT/SIGTERM, the server on a client's disconnect): nothing is
                               wrong with the input, nothing more was written */
    AF_ERR_INTERRUPTED = AF_ERR_CANCELLED, /* the same status under its former name (kept so callers
                               compile; 10 is no longer returned) */
    AF_ERR_DEVICE = 11      /* a compute device failed: lost, out of device memory during a run,
                             * a shader or queue error (the message names the device and the op) */
} af_status;

/* Name of a status code, e.g. "AF_ERR_FORMAT". Static string, never NULL. */
AF_API const char *af_status_name(af_status st);

/* The message describing the most recent failure on this thread ("" if none).
 * Borrowed: valid until the next afinar call on this thread. */
AF_API const char *af_last_error(void);

/* What a failure is about, when a caller must act on more than its status (an exit code, a retry):
 * recorded with the message, so callers never read the message's text to decide. */
typedef enum af_error_kind {
    AF_ERROR_KIND_NONE = 0,      /* nothing finer than the status (every failure not listed below) */
    AF_ERROR_KIND_CHECKPOINT = 1 /* a checkpoint's files do not verify or are inconsistent: the run
                                    cannot resume from it (the message names the file and the newest
                                    earlier checkpoint that verifies) */
} af_error_kind;

/* The kind of the most recent failure on this thread (AF_ERROR_KIND_NONE if none, or if the last
 * message was recorded without a kind). Set together with af_last_error()'s message. */
AF_API af_error_kind af_last_error_kind(void);

/* Library version string "MAJOR.MINOR.PATCH". Static. */
AF_API const char *af_version(void);

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
     *         softmax, norms, the loss and the optimizer stay f32.
     *  "int8": the frozen weights' products (weights in a block format or f16/bf16, not the LM
     *         head) with int8 operands and int32 sums (AVX512_VNNI VPDPBUSD), one scale per row of
     *         the activations or output gradients and per row of the weight (SwitchBack, Wortsman
     *         et al. 2023; error bound in src/kernels/cpu/gemm_int8.h); the other products as "bf16"
     *         where the CPU has AVX512_BF16, else f32. */
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
    /* Compute device: NULL or "cpu"; "vulkan" (the first Vulkan device) or "vulkan:N"; "auto" (the
     * first Vulkan device that is not a software implementation (af_device_info.software), else
     * the CPU; a run that does not fit the device or whose device fails goes on on the CPU:
     * af_ctx_falls_back). Contexts opened on the same device share it (its memory and the weights
     * imported by models loaded with either). `afinar devices` / af_backend_devices list what
     * there is. */
    const char *device;
} af_ctx_params;

/* Defaults: n_threads 0 (all), kernel_path "auto", matmul_precision "f32", int8_activations 0,
 * poll_us 1000, quantize "none". */
AF_API void af_ctx_params_default(af_ctx_params *p);

/* New context from `p` (NULL: defaults). `*out`: caller frees with af_ctx_free() after every
 * model loaded with it. Errors: AF_ERR_INVALID_ARG (unknown kernel path, precision or quantize name),
 * AF_ERR_UNSUPPORTED (a kernel path this CPU cannot run; "bf16" where the CPU lacks AVX512_BF16
 * or the kernel path is not avx512), AF_ERR_NOMEM. */
AF_API af_status af_ctx_new(const af_ctx_params *p, af_ctx **out);

/* Frees a context. NULL is ignored. */
AF_API void af_ctx_free(af_ctx *ctx);

/* The setting of af_ctx_params that af_ctx_open refused (af_ctx_report.field). */
typedef enum af_ctx_setting {
    AF_CTX_SETTING_NONE = 0,  /* no setting: success, or a failure of no setting (out of memory) */
    AF_CTX_SETTING_THREADS,   /* n_threads */
    AF_CTX_SETTING_KERNEL,    /* kernel_path */
    AF_CTX_SETTING_PRECISION, /* matmul_precision */
    AF_CTX_SETTING_QUANTIZE,  /* quantize */
    AF_CTX_SETTING_DEVICE     /* device: an unknown name (AF_ERR_INVALID_ARG) or a device that cannot
                               * be opened (other codes) */
} af_ctx_setting;

/* What af_ctx_open did, for a caller that reports it (the CLI prints these lines). */
typedef struct af_ctx_report {
    af_ctx_setting field;   /* on failure: the setting refused (NONE: none of them) */
    char value[64];         /* on failure: that setting's value as given (truncated), e.g. "avx9" */
    int bf16_fallback;      /* 1: bf16 (or int8) products were asked for and cannot run here: f32 products
                             * (bf16_why says why) */
    char bf16_why[320];
    int bf16_slower;        /* 1: bf16 products run, measured slower than f32 on this CPU */
    double f32_gflops;      /* bf16 products run: the two measured rates (af_ctx_measure_precision), */
    double bf16_gflops;     /* GFLOP/s; 0 when bf16 was not asked for or could not run */
    char device_line[640];  /* device "auto": the device chosen, "vulkan:0 (NAME, discrete GPU)",
                             * or "no accelerator (WHY); computing on the CPU"; "" for other devices */
} af_ctx_report;

/* The one way from a device request to a context: af_ctx_new(p) where bf16 products
 * (p->matmul_precision "bf16") that this CPU or kernel path cannot run fall back to f32 products
 * (rep->bf16_fallback) and bf16 products that run are measured against f32 (rep->bf16_slower, ~0.1 s);
 * with device "auto", rep->device_line says which device was taken. `rep` may be NULL. On failure
 * rep->field / rep->value name the setting refused (no message text to parse). Errors: those of
 * af_ctx_new. */
AF_API af_status af_ctx_open(const af_ctx_params *p, af_ctx **out, af_ctx_report *rep);

/* The one CPU-fallback rule: 1 when work on `ctx` that failed with `st` may go on on the CPU: ctx
 * was made with device "auto", computes on a device (not the CPU), and st says the work does not
 * fit the device's memory (AF_ERR_NOMEM), is something the device cannot run (AF_ERR_UNSUPPORTED)
 * or the device failed (AF_ERR_DEVICE). Else 0 (an explicitly named device never falls back). */
AF_API int af_ctx_falls_back(const af_ctx *ctx, af_status st);

/* A CPU context with ctx's threads, kernel path, precision and waiting policy; the quantize setting
 * too when keep_quantize (models will be loaded again), else "none" (a model already loaded is
 * read through its host views). `*out`: caller frees with af_ctx_free(). Errors: those of
 * af_ctx_new. */
AF_API af_status af_ctx_new_cpu(const af_ctx *ctx, int keep_quantize, af_ctx **out);

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
    int software;         /* 1: a software implementation of the device API computing on this CPU
                           * (Vulkan VK_PHYSICAL_DEVICE_TYPE_CPU: llvmpipe, lavapipe); device "auto"
                           * never takes it, "vulkan:N" does */
} af_device_info;

/* The context's device: "cpu", "vulkan:0", "guard" (backend:index; the CPU as "cpu"). Borrowed:
 * valid while ctx lives. */
AF_API const char *af_ctx_device(const af_ctx *ctx);
/* Its description (af_device_info of the open device: name, memory, features). */
AF_API void af_ctx_device_info(const af_ctx *ctx, af_device_info *out);
/* 1 when the context computes on the CPU (its device memory is host memory). */
AF_API int af_ctx_on_cpu(const af_ctx *ctx);
/* 1 when the context was made with device "auto" (a run that does not fit or fails on the device
 * may go on on the CPU). */
AF_API int af_ctx_device_auto(const af_ctx *ctx);

/* Backends built into this library, as `afinar devices` lists them: cpu, vulkan (always listed;
 * without devices when it is not built in or no device is found). */
AF_API int32_t af_backend_count(void);
/* Name of listed backend i ("cpu", "vulkan"); NULL outside [0, af_backend_count()). */
AF_API const char *af_backend_name(int32_t i);
/* The devices of listed backend i: up to `cap` into out (may be NULL with cap 0), *n the number
 * there is. No device: AF_OK, *n = 0 and why [why_cap] says why ("not built in ...", "no Vulkan
 * loader", "no device"). Errors: AF_ERR_INVALID_ARG (bad i). */
AF_API af_status af_backend_devices(int32_t i, af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap);

/* The settings in use, as params that af_ctx_new() accepts (to derive a context that differs in
 * one setting). kernel_path is the resolved path name ("scalar", "avx2" or "avx512"), n_threads
 * the resolved count; strings are static. */
AF_API void af_ctx_get_params(const af_ctx *ctx, af_ctx_params *p);

AF_API int af_ctx_n_threads(const af_ctx *ctx);
/* "scalar", "avx2" or "avx512". Static string. */
AF_API const char *af_ctx_kernel_path(const af_ctx *ctx);
/* Ask the long loops that run with `ctx` to stop between two batches once *flag is non-zero:
 * af_classifier_probs (per forward batch), af_lm_evaluate (per batch), af_gen_eval_run (per prompt
 * and per generated token). They then return AF_ERR_CANCELLED ("stopped after N of M ...")
 * and write nothing. `flag` is typically a signal handler's `volatile sig_atomic_t` (int on the
 * platforms afinar builds on); NULL (the default) disables the check. The training loop has its
 * own flag (af_trainer_opts.interrupt: it finishes the step and saves). */
AF_API void af_ctx_set_interrupt(af_ctx *ctx, volatile int *flag);
/* 1 when ctx's interrupt flag is set (NULL ctx or no flag: 0). */
AF_API int af_ctx_interrupted(const af_ctx *ctx);
/* "f32" or "bf16". Static string. */
AF_API const char *af_ctx_matmul_precision(const af_ctx *ctx);
AF_API int af_ctx_int8_activations(const af_ctx *ctx);
/* The pool's spin window in microseconds (af_ctx_params.poll_us, resolved). */
AF_API int af_ctx_poll_us(const af_ctx *ctx);
/* Parallel regions the context's worker pool has run since the context was made (counters only
 * grow: subtract two readings, e.g. around a decode, for the regions per token). regions: parallel
 * loops with more than one thread asked for and granted (operations too small to split stay on
 * the calling thread and are not counted); forks: those of them that woke the workers and waited
 * for them (each costs a few µs of hand-over; fewer than regions when the pool runs a region on
 * the caller alone, e.g. on an oversubscribed machine). Zeros for a context without a pool. */
typedef struct af_pool_stats {
    uint64_t regions, forks;
} af_pool_stats;
AF_API void af_ctx_pool_stats(const af_ctx *ctx, af_pool_stats *out);

/* Measures the throughput of the large matrix products (the packed GEMM of training steps and
 * prompts: a 256 x 576 · (1536 x 576)ᵀ product, the shape of a SmolLM2-135M MLP projection,
 * best of 5 after one warm-up) in f32 and in bf16 on this CPU with ctx's threads and kernel path,
 * in GFLOP/s (2·m·n·k / seconds); takes ~0.1 s. *bf16_gflops is 0 where bf16 products are not
 * available (no AVX512_BF16, or a kernel path other than avx512). Use: tell a user whether
 * --bf16 pays here (VDPBF16PS ran at 0.46x the f32 FMA rate on an Intel Xeon, while on
 * AMD Zen 4/5 bf16 is faster). Errors: AF_ERR_INVALID_ARG (NULL), AF_ERR_NOMEM. */
AF_API af_status af_ctx_measure_precision(const af_ctx *ctx, double *f32_gflops, double *bf16_gflops);

/* Human-readable summary of the CPU features detected at run time and the kernel path of `ctx`,
 * e.g. "avx512f avx512bw avx512_bf16 avx2 fma -> avx512". Borrowed: valid while ctx lives. */
AF_API const char *af_ctx_describe(const af_ctx *ctx);

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
AF_API af_status af_model_load(const af_ctx *ctx, const char *path, af_model **out);

/* Frees a model and unmaps its file. NULL is ignored. */
AF_API void af_model_free(af_model *model);

/* Borrowed: valid while `model` lives. */
AF_API const af_model_config *af_model_get_config(const af_model *model);

/* Shape of projection `proj` of layer `layer` (0 q_proj, 1 k_proj, 2 v_proj, 3 o_proj, 4 gate_proj,
 * 5 up_proj, 6 down_proj): *in = in_features, *out = out_features. Returns 1 when the layer has
 * that projection, 0 when it has none (gemma4: k/v of a layer that reuses an earlier layer's K/V,
 * v of an attention_k_eq_v layer) or the arguments are out of range (*in = *out = 0). The sizes are
 * per layer (gemma4: head_dim, KV heads and FFN width differ between layers); af_model_config holds
 * layer 0's. */
AF_API int af_model_proj_shape(const af_model *model, int32_t layer, int32_t proj, int64_t *in, int64_t *out);

/* Print a human-readable description of a GGUF file to `fp`: architecture, hyper-parameters,
 * tokenizer kind and a table of tensors (name, type, shape, bytes). Works on any valid GGUF,
 * including architectures afinar cannot run. Errors as af_model_load() for the container. */
AF_API af_status af_gguf_describe(const char *path, FILE *fp);

/* `afinar info`: af_gguf_describe() for a file; for a Hugging Face directory (config.json,
 * model.safetensors or shards + index, tokenizer.json) its config.json hyper-parameters, tokenizer
 * summary and tensor table (name, dtype, shape, bytes, shard). A config.json afinar cannot run is
 * reported (the rest is still printed) and its error returned. Errors: those of af_gguf_describe,
 * of reading the directory's weights (AF_ERR_NOT_FOUND, AF_ERR_FORMAT, ...), AF_ERR_INVALID_ARG. */
AF_API af_status af_model_describe(const char *path, FILE *fp);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer (read from the model file)
 * ------------------------------------------------------------------------------------------- */
typedef struct af_tokenizer af_tokenizer;

/* Borrowed: the model's tokenizer, valid while `model` lives. NULL if the file has none. */
AF_API const af_tokenizer *af_model_tokenizer(const af_model *model);
/* Why af_model_tokenizer is NULL, in words (borrowed): the tokenizer loader's message (the missing
 * or malformed tokenizer.ggml.* key) or "the file has no tokenizer.ggml.* keys"; NULL when the
 * model has a tokenizer. */
AF_API const char *af_model_tokenizer_error(const af_model *model);

/* Encode UTF-8 `text[0..len)` into token ids.
 *  add_special:   prepend BOS / append EOS as the model's metadata asks (add_bos_token ...).
 *  parse_special: match control/special token texts (e.g. "<|im_start|>") in `text` as single
 *                 tokens; when 0 they are tokenized as plain text.
 * `*ids` receives a malloc'ed array of `*n_ids` ids; caller frees with free().
 * Bytes that are not valid UTF-8 become one byte token each (the byte-level symbol of gpt2
 * vocabularies, <0xNN> of SentencePiece ones), so such text round-trips through af_detokenize.
 * Errors: AF_ERR_FORMAT (an invalid byte the vocabulary has no byte token for; the message names
 * the byte and its offset), AF_ERR_INVALID_ARG (NULL argument), AF_ERR_NOMEM. */
AF_API af_status af_tokenize(const af_tokenizer *tok, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n_ids);

/* Text of one token as bytes (byte-level BPE symbols mapped back to bytes).
 * Writes up to `cap` bytes into `buf` (not NUL-terminated) and returns the full byte length,
 * or -1 if `id` is out of range. Control tokens render as their text only if `render_special`. */
AF_API int af_token_to_bytes(const af_tokenizer *tok, int32_t id, int render_special, char *buf, size_t cap);

/* Decode ids into a malloc'ed NUL-terminated string in `*text` (caller frees with free()).
 * Errors: AF_ERR_RANGE (an id out of range), AF_ERR_NOMEM. */
AF_API af_status af_detokenize(const af_tokenizer *tok, const int32_t *ids, size_t n_ids, int render_special,
                        char **text);

AF_API int32_t af_tokenizer_vocab_size(const af_tokenizer *tok);
AF_API int32_t af_token_bos(const af_tokenizer *tok); /* -1 when the model has none */
AF_API int32_t af_token_eos(const af_tokenizer *tok); /* -1 when the model has none */
/* 1 when `id` ends generation (EOS, EOT, <|im_end|>, <end_of_turn>, ...). */
AF_API int af_token_is_eog(const af_tokenizer *tok, int32_t id);

/* Chat template application for a single user turn, ready for generation.
 * Supports ChatML (<|im_start|>role ... <|im_end|>) and Gemma (<start_of_turn>) families,
 * chosen from the model's tokenizer.chat_template. `system` may be NULL.
 * `*out` receives a malloc'ed NUL-terminated prompt; caller frees with free().
 * Errors: AF_ERR_UNSUPPORTED (no known template), AF_ERR_NOMEM. */
AF_API af_status af_chat_format(const af_model *model, const char *system, const char *user, char **out);
/* af_chat_format with the layout chosen: `chat_template` "chatml" or "gemma" instead of the model's
 * own template (NULL or "auto": the model's). Errors: those of af_chat_format, AF_ERR_INVALID_ARG /
 * AF_ERR_UNSUPPORTED for an unknown name (the message lists chatml and gemma). */
AF_API af_status af_chat_format_template(const af_model *model, const char *chat_template, const char *system,
                                  const char *user, char **out);
/* Generation prompt of a whole conversation (multi-turn chat): turns roles[i] ("system", "user",
 * "assistant") with texts contents[i], i < n (n >= 1), rendered with `chat_template` (as in
 * af_chat_format_template) and the assistant header appended, without the BOS (af_tokenize adds it).
 * The one-turn case equals af_chat_format_template. The same renderer as af_chat_apply_template with
 * add_generation_prompt = 1 (contents NUL-terminated). `*out`: malloc'ed, caller frees. Errors: those
 * of af_chat_apply_template (AF_ERR_INVALID_ARG for an unknown role or n < 1, AF_ERR_FORMAT
 * "messages[i]: ..." where the template needs alternating user / assistant turns, as Gemma's does). */
AF_API af_status af_chat_format_turns(const af_model *model, const char *chat_template, const char *const *roles,
                               const char *const *contents, int32_t n, char **out);

/* ---------------------------------------------------------------------------------------------
 * Inference sessions: KV cache, evaluation, sampling
 * ------------------------------------------------------------------------------------------- */
typedef struct af_session af_session;

/* A session holds a KV cache of `n_ctx` positions (<= 0: the model's max_position_embeddings,
 * capped at 4096) for one sequence. `*out`: caller frees with af_session_free().
 * Borrows `model`, which must outlive the session; runs under the model's context.
 * Errors: AF_ERR_NOMEM, AF_ERR_INVALID_ARG. */
AF_API af_status af_session_new(const af_model *model, int n_ctx, af_session **out);
AF_API void af_session_free(af_session *s);

/* Forget all cached positions (the next eval starts at position 0). */
AF_API void af_session_reset(af_session *s);

/* Number of positions currently in the cache. */
AF_API int af_session_n_past(const af_session *s);

/* Evaluate `n` tokens appended at the current position (batched prompt evaluation when n > 1).
 * If `logits` is not NULL it receives the logits of the LAST token, [vocab_size] floats;
 * if `all_logits` is not NULL it receives logits of every token, [n, vocab_size] row-major.
 * Errors: AF_ERR_RANGE (cache full or token id out of range), AF_ERR_NOMEM. */
AF_API af_status af_session_eval(af_session *s, const int32_t *tokens, int n, float *logits, float *all_logits);

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
AF_API void af_session_set_control(af_session *s, const volatile int *cancel, af_progress_fn progress, void *user);

/* The tokens whose keys and values are in the cache, [*n = af_session_n_past(s)] (borrowed: valid
 * until the next call that changes the session). */
AF_API const int32_t *af_session_tokens(const af_session *s, int *n);

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
AF_API int af_session_keep_prefix(af_session *s, const int32_t *tokens, int n);

/* Continuous batching: decode one token in each of `n` sessions of the same model in ONE pass
 * through the layers (sessions may carry different adapters, af_session_load_adapter /
 * af_session_set_lora: LoRA is applied unmerged, so the frozen products run over the rows of
 * several sessions and each session's rows get its own adapter's correction). tokens [n]: the
 * token appended to session i; logits [n, vocab_size] receive each session's next-token logits.
 * Every session's logits, cache and positions are bit-identical to af_session_eval(ss[i],
 * &tokens[i], 1, ...) alone: the products group at most 4 rows (the per-row decode kernels) and
 * each session attends to its own cache. Any session's cancel flag (af_session_set_control) stops
 * the whole step before the next layer (AF_ERR_CANCELLED, no session advances). n <= 256; the
 * first session's forward state serves as scratch when the rows fit its 256, else scratch of about
 * rows x 40 KiB (SmolLM2) is allocated for the call.
 * Errors: AF_ERR_INVALID_ARG (NULL, n < 1 or > 256, sessions of different models, a session given
 * twice), AF_ERR_RANGE (a session's cache full, a token id outside the vocabulary; nothing is
 * evaluated), AF_ERR_CANCELLED, AF_ERR_NOMEM. */
AF_API af_status af_session_eval_batch(af_session *const *s, int32_t n, const int32_t *tokens, float *logits);

/* Prompt chunks and decode tokens in ONE pass (chunked prefill; what `afinar serve` runs): session
 * i appends counts[i] >= 1 tokens (tokens holds those of session 0, then of session 1, ...; Σ
 * counts <= 4096) and logits row i [vocab_size] receives the logits of its LAST token. A session's
 * tokens may not cross a multiple of 256 positions (the chunk boundaries of af_session_eval), so
 * its logits, cache and positions are bit-identical to af_session_eval(ss[i], its tokens, counts[i],
 * ...) alone: a session of <= 4 tokens shares per-row decode products (groups of at most 4 rows)
 * with others, a longer one gets a blocked product of its own; each attends to its own cache and
 * gets its own adapter. A prompt evaluated in such pieces gives the bits of one
 * af_session_eval call when every piece keeps its positions in the regime that call gives them
 * (af_session_prompt_piece picks such pieces). af_session_eval_batch is the case counts[i] = 1.
 * Cancel flags, scratch and errors as af_session_eval_batch; AF_ERR_INVALID_ARG also for a count
 * < 1, a 256-boundary crossed, or more than 4096 tokens. */
AF_API af_status af_session_eval_multi(af_session *const *s, int32_t n, const int32_t *counts, const int32_t *tokens,
                                       float *logits);

/* The length of the next piece of an n-token prompt (positions af_session_n_past(s) .. n-1 still
 * to evaluate) that af_session_eval_multi may evaluate within a budget of `budget` tokens with the
 * bits of a one-call af_session_eval of the whole prompt: at most budget, never across a
 * multiple of 256, and never leaving 1-4 rows of a 256-token chunk whose one-call evaluation takes
 * the blocked product (nor taking only 1-4 of them). 0 when no such piece fits the budget (or
 * nothing is left, or s is NULL). */
AF_API int af_session_prompt_piece(const af_session *s, int n, int budget);

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
AF_API af_status af_session_save_file(const af_session *s, const char *path);
AF_API af_status af_session_load_file(af_session *s, const char *path);

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
AF_API af_status af_session_load_adapter(af_session *s, const char *dir, float scale);

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
AF_API int32_t af_sample(const float *logits, int32_t vocab_size, const af_sampling *p, uint64_t *rng_state);
AF_API uint64_t af_rng_seed(uint64_t seed);
/* The sampling defaults of `afinar generate`, `afinar chat` and of a serve request that gives none:
 * temperature 0.8, top_k 40, top_p 0.95, seed 42 (llama.cpp's llama-cli / llama-server defaults). */
AF_API void af_sampling_default(af_sampling *p);

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
    /* ---- LoRA+ (Hayou et al. 2024; PEFT's create_loraplus_optimizer) ---- */
    float loraplus_lr_ratio; /* (0) > 0 and != 1: every lora_B and every 1-D parameter (the head bias) is
                                updated with lr · ratio (its weight decay too: AdamW's decay is lr·wd),
                                lora_A and the head W with lr; 0 or 1: one learning rate */
    /* ---- DoRA (Liu et al. 2024; PEFT's use_dora) ---- */
    int32_t use_dora;        /* (0) 1: every adapted projection also trains a magnitude vector m [out]:
                                y = m / ||W + s·B·A||_row ⊙ (x·Wᵀ + s·x·Aᵀ·Bᵀ), the norm detached in the
                                backward as PEFT does (docs/LORA.md); m starts at the row norms of W.
                                CPU contexts only (AF_ERR_UNSUPPORTED on another device) */
    int32_t init_lora_weights; /* (0) PEFT's init_lora_weights: 0 default (kaiming-uniform A, B = 0); 1 "gaussian"
                                (A ~ N(0, 1/r²), B = 0); 2 "pissa" (A, B from the SVD of each frozen W: the top r
                                singular triplets, B·A·s = their part of W); 3 "olora" (from the QR of W). With 2 and
                                3 the rest W − s·B0·A0 stays frozen: every forward subtracts s·B0·A0 from the
                                correction, and saved adapters are the plain LoRA of rank 2r that PEFT's
                                path_initial_model_for_weight_conversion writes (docs/LORA.md); not with use_dora */
} af_lora_trainer_opts;

/* Fill `o` with the defaults listed above. */
AF_API void af_lora_trainer_opts_defaults(af_lora_trainer_opts *o);

/* Create a trainer on `model` (borrowed: must outlive the trainer; the trainer runs under the
 * model's context) with `opts` (NULL: defaults;
 * copied, `targets` is parsed here). Parameters are initialised from opts.seed; gradients and AdamW
 * state start at zero. `*out`: caller frees with af_lora_trainer_free().
 * Errors: AF_ERR_INVALID_ARG (NULL model/out, r < 1 or above min(in, out) of a target, lora_alpha
 * <= 0, lora_dropout outside [0, 1), unknown target, num_classes < 0, pooling not an
 * af_head_pooling, lr / weight_decay / eps negative or not finite, beta outside [0, 1)),
 * AF_ERR_NOMEM. */
AF_API af_status af_lora_trainer_new(const af_model *model, const af_lora_trainer_opts *opts, af_lora_trainer **out);

/* Frees the trainer and everything it owns. NULL is ignored. */
AF_API void af_lora_trainer_free(af_lora_trainer *tr);

/* Class weights of the cross-entropy: `w` [num_classes] (copied; each finite and >= 0), or NULL for
 * uniform weights (the default). Errors: AF_ERR_INVALID_ARG (NULL tr, no head, a bad weight). */
AF_API af_status af_lora_trainer_set_class_weights(af_lora_trainer *tr, const float *w);

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
AF_API af_status af_lora_trainer_accumulate(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                     int32_t n_samples, const int32_t *labels, float grad_scale, double *loss,
                                     float *logits);

/* As af_lora_trainer_accumulate() for multi-label data: `targets` [n_samples, num_classes] with
 * entries in [0, 1] (multi-hot), loss BCE-with-logits. */
AF_API af_status af_lora_trainer_accumulate_multilabel(af_lora_trainer *tr, const int32_t *tokens,
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
AF_API af_status af_lora_trainer_accumulate_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                        int32_t n_samples, const int32_t *targets, float grad_scale,
                                        double *loss_sum, int64_t *n_targets, int64_t *n_correct);

/* Forward only of af_lora_trainer_accumulate_lm (evaluation: no dropout, no gradient). */
AF_API af_status af_lora_trainer_forward_lm(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
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
AF_API af_status af_lora_trainer_step(af_lora_trainer *tr, float lr, double *grad_norm);

/* Discard the gradient accumulated since the last step (and a pending non-finite flag). */
AF_API void af_lora_trainer_zero_grad(af_lora_trainer *tr);

/* Cancel flag of the trainer's forwards and backwards (NULL: none; borrowed): read before every
 * layer of af_lora_trainer_accumulate*, _forward* and evaluation; once non-zero the call stops at
 * the next layer and returns AF_ERR_CANCELLED. A cancelled accumulate DISCARDS the whole gradient
 * accumulated since the last step (as af_lora_trainer_zero_grad: the interrupted micro-batch had
 * added part of its gradient); parameters and AdamW state are never touched. Clear the flag to go
 * on (redo the step's micro-batches). */
AF_API void af_lora_trainer_set_control(af_lora_trainer *tr, const volatile int *cancel);

/* Evaluation forward (no dropout, no gradient): logits [n_samples, num_classes] of a packed batch.
 * Errors: as af_lora_trainer_accumulate() (labels are not needed). */
AF_API af_status af_lora_trainer_forward(af_lora_trainer *tr, const int32_t *tokens, const int32_t *seq_start,
                                  int32_t n_samples, float *logits);

/* Optimizer steps taken so far (updates applied + skipped), 0 for NULL. */
AF_API int64_t af_lora_trainer_step_count(const af_lora_trainer *tr);

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
AF_API af_status af_lora_trainer_collect_gradients(const af_lora_trainer *tr, float *out, int32_t *n_micro,
                                            int *nonfinite);

/* Replace the accumulated gradient by grad[af_lora_trainer_n_params(tr)] (same layout as
 * af_lora_trainer_collect_gradients; copied), standing for `n_micro` >= 1 micro-batches;
 * `nonfinite` non-zero marks a micro-batch loss of the step as non-finite somewhere (the next
 * af_lora_trainer_step then skips, as if the loss had been seen here). The next
 * af_lora_trainer_step clips, updates and zeroes it as usual; non-finite elements make that step
 * skip with "gradient" as the place.
 * Errors: AF_ERR_INVALID_ARG (NULL tr or grad, n_micro < 1). */
AF_API af_status af_lora_trainer_apply_gradients(af_lora_trainer *tr, const float *grad, int32_t n_micro, int nonfinite);

/* Number of trainable floats (all LoRA A and B, then head W and b), 0 for NULL. */
AF_API int64_t af_lora_trainer_n_params(const af_lora_trainer *tr);

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
AF_API int32_t af_lora_trainer_n_tensors(const af_lora_trainer *tr);

/* Describe tensor i. Any output may be NULL. `*name`: borrowed, valid while `tr` lives;
 * shape {rows, cols}; `*offset`: float offset of the tensor's block in the flat parameter vector
 * (af_lora_trainer_get_params), which holds the same elements in afinar's internal row order.
 * Errors: AF_ERR_INVALID_ARG (NULL tr), AF_ERR_RANGE (i outside [0, n_tensors)). */
AF_API af_status af_lora_trainer_tensor_info(const af_lora_trainer *tr, int32_t i, const char **name, int64_t shape[2],
                                      int64_t *offset);

/* Index of the tensor called `name` (exact match) in `*index`.
 * Errors: AF_ERR_INVALID_ARG (NULL argument), AF_ERR_NOT_FOUND. */
AF_API af_status af_lora_trainer_find_tensor(const af_lora_trainer *tr, const char *name, int32_t *index);

/* Copy tensor i out to `out` [rows, cols] / in from `in` [rows, cols] (PEFT row order, see above).
 * Setting a tensor does not touch the gradient or the AdamW state.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; a non-finite value in `in`, then nothing is written),
 * AF_ERR_RANGE (bad i). */
AF_API af_status af_lora_trainer_get_tensor(const af_lora_trainer *tr, int32_t i, float *out);
AF_API af_status af_lora_trainer_set_tensor(af_lora_trainer *tr, int32_t i, const float *in);

/* ---- Whole state, for checkpoints written by other programs ----
 * The flat parameter vector [n_params] in afinar's internal order (layout: af_lora_trainer_tensor_info
 * offsets; q/k lora_B rows of llama models in GGUF order). Restoring params, AdamW moments and the
 * two counters into a trainer created with the same model and options continues a run bit for bit.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; set_params: a non-finite value, nothing written). */
AF_API af_status af_lora_trainer_get_params(const af_lora_trainer *tr, float *out);
AF_API af_status af_lora_trainer_set_params(af_lora_trainer *tr, const float *in);

/* AdamW first/second moments m, v [n_params] (either may be NULL to skip), `adam_t` (updates
 * applied; bias correction uses it) and `step_count` (af_lora_trainer_step_count; keys the dropout
 * masks); pointers may be NULL to skip. set: v must be >= 0, t and step_count >= 0, adam_t <=
 * step_count. Errors: AF_ERR_INVALID_ARG (NULL tr, an invalid value: nothing is written). */
AF_API af_status af_lora_trainer_get_optim_state(const af_lora_trainer *tr, float *m, float *v, int64_t *adam_t,
                                          int64_t *step_count);
AF_API af_status af_lora_trainer_set_optim_state(af_lora_trainer *tr, const float *m, const float *v,
                                          const int64_t *adam_t, const int64_t *step_count);

/* ---- PEFT adapter directories ----
 * Save the adapters (+ head) to `dir` (created if missing) as a Hugging Face PEFT adapter:
 * adapter_model.safetensors (F32, the names above), adapter_config.json (task_type SEQ_CLS with a
 * head, CAUSAL_LM without; base_model_name_or_path = `base_model_name`, may be NULL) and afinar.json
 * (architecture, pooling, LoRA settings). score.bias is written only with opts.head_bias (PEFT's
 * score layer has none). Each file is written atomically.
 * Errors: AF_ERR_INVALID_ARG (NULL tr/dir), AF_ERR_IO (naming the file), AF_ERR_NOMEM. */
AF_API af_status af_lora_trainer_save_adapter(const af_lora_trainer *tr, const char *dir, const char *base_model_name);

/* Load an adapter directory (written by afinar or by PEFT's save_pretrained) into the trainer's
 * parameters. The directory must match the trainer: same r, lora_alpha, use_rslora, targets and
 * head shape (a head weight without bias sets b = 0). On success the gradient, the AdamW state and
 * the step count are reset (a fresh optimizer on the loaded weights); on error nothing changes.
 * Errors: AF_ERR_INVALID_ARG (NULL argument; r / alpha / rslora mismatch), AF_ERR_IO (missing
 * files), AF_ERR_FORMAT (malformed files, unexpected tensors, wrong shapes, a non-finite value),
 * AF_ERR_NOT_FOUND (missing tensors), AF_ERR_UNSUPPORTED (not a plain LoRA adapter), AF_ERR_NOMEM. */
AF_API af_status af_lora_trainer_load_adapter(af_lora_trainer *tr, const char *dir);

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
AF_API af_status af_write_file_atomic(const char *path, const void *data, size_t n);

/* Cheap early check that `path` could be written by af_write_file_atomic: its directory exists,
 * is a directory and is writable (access(2) W_OK|X_OK), and `path` itself is not a directory.
 * Nothing is created. A later write can still fail (disk full, races): this only lets a command
 * refuse a bad destination before long work. Errors: AF_ERR_INVALID_ARG (NULL/empty), AF_ERR_IO
 * ("<path>: is a directory, cannot be replaced by a file", "<path>: directory <dir>: <strerror>"),
 * AF_ERR_NOMEM. */
AF_API af_status af_check_writable(const char *path);

/* For a SIGINT / SIGTERM handler that ends the process: remove the temporaries afinar is writing
 * right now (the hidden ".NAME.tmp-PID-N" files of af_write_file_atomic and the other atomic
 * writers, and the temporary directories of checkpoints and merged adapters), so that a process
 * stopped by a signal leaves nothing half-written. Async-signal-safe (unlink(2) and rmdir(2)
 * only); call _exit afterwards. */
AF_API void af_remove_temporaries(void);

/* Read a whole input file (a prompt, a config) into a malloc'ed, NUL-terminated buffer (`*text`,
 * caller frees with free(); `*len`, may be NULL, gets the byte count). Never blocks: the file is
 * opened with O_NONBLOCK and refused unless it is a regular file (a FIFO, a directory, /dev/zero
 * ...), except "/dev/stdin", which may also be a pipe or a terminal. At most `max_bytes` are read
 * (0: 64 MiB). Errors: AF_ERR_INVALID_ARG (NULL/empty), AF_ERR_IO ("<path>: cannot open:
 * <strerror>", "<path>: not a regular file (a FIFO or pipe)"), AF_ERR_RANGE ("<path>: larger than
 * the limit of N bytes"), AF_ERR_NOMEM. */
AF_API af_status af_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Data sets: labelled JSONL corpora and their tokenized form
 *
 * A corpus is read from JSON Lines, one object per line:
 *   single-label  {"input": "text", "label": 3}  or  {"input": "text", "label": "sport"}
 *   multi-label   {"input": "text", "labels": [0, 4]}  or  {"input": "text", "labels": ["a", "b"]}
 * (field names configurable; blank lines skipped; other keys ignored), or from a CSV / TSV table
 * whose header names the fields (docs/DATA.md). Integer labels are class
 * ids >= 0; string labels map to their position in a given label list, or, without one, to their
 * rank among the file's distinct names sorted by byte value. A file uses one label form throughout.
 * A data set is a corpus tokenized for one model: af_tokenize(add_special = 1, parse_special = 0),
 * truncated to the first max_seq_len tokens; a text that gives no token becomes one BOS (or EOS).
 * ------------------------------------------------------------------------------------------- */
typedef struct af_corpus af_corpus;
typedef struct af_dataset af_dataset;

typedef struct af_corpus_opts {
    const char *text_field;   /* NULL -> the first of "text", "sentence", "content", "input" present in the
                                 first sample (then required in every sample) */
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
AF_API void af_corpus_opts_init(af_corpus_opts *o);

/* Read a corpus: JSON Lines, or a CSV / TSV table when the name ends in .csv / .tsv / .tab (a header
 * row naming the fields, RFC 4180 quoting; docs/DATA.md). UTF-8 with or without a byte-order mark.
 * `opts` may be NULL (defaults). `*out`: caller frees with af_corpus_free().
 * Errors (the message names FILE:LINE and the field): AF_ERR_IO (cannot open), AF_ERR_FORMAT
 * (invalid JSON with its column, not an object, malformed CSV quoting, a row with the wrong number
 * of cells, a UTF-16/32 file (named), missing field (the message lists the fields present and names
 * --text-field / --label-field), wrong type, label out of range or unknown name, mixed label
 * forms, line longer than max_line_bytes, no sample), AF_ERR_INVALID_ARG (bad options, e.g.
 * duplicate names in the label list), AF_ERR_NOMEM. */
AF_API af_status af_corpus_read(const char *path, const af_corpus_opts *opts, af_corpus **out);

/* An unlabelled single-label corpus of `n` (>= 0) texts: texts[i] holds lens[i] bytes (copied; a
 * text need not be NUL-terminated), label -1 each, source line first_line + i in messages, `name`
 * as its file name in messages (e.g. "<stdin>"; copied; NULL: "<texts>"), num_classes (>= 0)
 * recorded as is.
 * `*out`: caller frees with af_corpus_free(). Errors: AF_ERR_INVALID_ARG (NULL argument with
 * n > 0, n or num_classes < 0), AF_ERR_NOMEM. */
AF_API af_status af_corpus_from_texts(const char *name, const char *const *texts, const size_t *lens, int32_t n,
                               int32_t first_line, int32_t num_classes, af_corpus **out);

/* Samples of the corpus; 1 when it uses the multi-label form, else 0 (both 0 for NULL). */
AF_API int32_t af_corpus_size(const af_corpus *c);
AF_API int af_corpus_multi_label(const af_corpus *c);

/* Frees a corpus. NULL is ignored. */
AF_API void af_corpus_free(af_corpus *c);

/* Tokenize a corpus (threads of `ctx`; NULL: the process default context). `c` and `tok` are
 * borrowed for the call only (labels and names are copied). `*out`: caller frees with af_dataset_free(). Errors: AF_ERR_INVALID_ARG (max_seq_len < 1, NULL
 * tokenizer), AF_ERR_FORMAT (empty text and no BOS/EOS token: "FILE:LINE: field 'input': ..."),
 * AF_ERR_NOMEM. */
AF_API af_status af_dataset_build(const af_ctx *ctx, const af_corpus *c, const af_tokenizer *tok, int32_t max_seq_len,
                          af_dataset **out);

/* Samples of the data set (0 for NULL). */
AF_API int32_t af_dataset_size(const af_dataset *ds);

/* Frees a data set. NULL is ignored. */
AF_API void af_dataset_free(af_dataset *ds);

/* ---------------------------------------------------------------------------------------------
 * Causal-LM data sets (supervised fine-tuning with a next-token loss)
 *
 * JSON Lines in Hugging Face TRL's dataset formats, one example per line, one format per file (or a
 * CSV / TSV table with the columns text, or prompt and completion; docs/DATA.md):
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
AF_API void af_lm_data_opts_init(af_lm_data_opts *o);

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
AF_API af_status af_lm_dataset_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                             af_dataset **out);

/* Print a report as a few indented lines to `fp` (`title`, may be NULL, heads it); a "warning:"
 * line naming --max-seq-len when more than 1% of the examples were dropped by truncation. */
AF_API void af_lm_data_report_print(const af_lm_data_report *r, const char *title, FILE *fp);

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
AF_API af_status af_lm_evaluate(const af_ctx *ctx, const af_model *model, const char *adapter_dir, float lora_scale,
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
AF_API af_status af_eval_metrics(const af_dataset *ds, const float *probs, af_metrics **out);

/* Frees metrics. NULL is ignored. */
AF_API void af_metrics_free(af_metrics *m);

/* Report: headline numbers, a per-class table (precision, recall, F1, support) and the confusion
 * matrix (class names abbreviated to 8 characters in its columns). `names` [C] may be NULL (ids). */
AF_API void af_metrics_print(const af_metrics *m, const char *const *names, FILE *fp);

/* The metrics as a JSON object, pretty-printed (tab-indented, as cJSON_Print):
 *   {"n", "num_classes", "multi_label", "accuracy", "macro_f1", "weighted_f1", "micro_f1",
 *    "macro_precision", "macro_recall", "ece" and "nll" (single-label), "threshold" (multi-label),
 *    "per_class": [{"label", "id", "precision", "recall", "f1", "support", "predicted"}],
 *    "confusion": [[...]] (single-label; rows = gold)}
 * followed by the string members of `extra` (may be NULL): {key0, value0, key1, value1, ..., NULL}.
 * `names` [C] may be NULL (labels are then the ids). `*out`: malloc'ed NUL-terminated text, caller
 * frees with free(). Errors: AF_ERR_INVALID_ARG (NULL m or out), AF_ERR_NOMEM. */
AF_API af_status af_metrics_json(const af_metrics *m, const char *const *names, const char *const *extra, char **out);

/* ---------------------------------------------------------------------------------------------
 * For bindings (the Python package, python/): a conversation rendered with the chat template
 * ------------------------------------------------------------------------------------------- */

/* Render the conversation roles[i] / contents[i], i in [0, n), with the model's chat template (or
 * `chat_template` "chatml" | "gemma" | "gemma4"; NULL or "auto": the model's), as training renders
 * {"messages": [...]} data; add_generation_prompt != 0 appends the assistant header. roles[i] is
 * "system", "user" or "assistant"; contents[i] holds lens[i] bytes of UTF-8 followed by a NUL
 * (borrowed for the call). `*out`: the text without the BOS token (af_tokenize adds it; tokenize it
 * with parse_special = 1), malloc'ed and NUL-terminated, caller frees with free().
 * Errors: AF_ERR_INVALID_ARG (NULL argument, n < 1 or > 1000000, an unknown role naming its
 * index, a NUL byte inside a content, an unknown template name), AF_ERR_NOT_FOUND (no tokenizer),
 * AF_ERR_UNSUPPORTED (no template afinar renders), AF_ERR_FORMAT ("messages[i]: ..." when the
 * template refuses the order of the turns), AF_ERR_NOMEM. */
AF_API af_status af_chat_apply_template(const af_model *model, const char *chat_template, const char *const *roles,
                                 const char *const *contents, const size_t *lens, int32_t n,
                                 int add_generation_prompt, char **out);

#ifdef __cplusplus
}
#endif
#endif /* AFINAR_H */
