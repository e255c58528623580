/*
 * backend.h — the backend table: device buffers and every operation the transformer
 * walk, the training engine, the heads and losses, the optimizer step and the inference session run
 * on activation and parameter memory. Model and training code (src/model, src/train, src/infer)
 * reach the device ONLY through this table; the table is reached from the context:
 *
 *     const af_backend *be = ctx->be;      be->rmsnorm_forward(ctx, y, rstd, x, w, n, dim, eps);
 *
 * (af_be(ctx) below). Design (docs/ARCHITECTURE.md "Backends"):
 *
 *  1. DEVICE MEMORY IS ADDRESSED BY ORDINARY C POINTERS. Every op keeps the argument list of the
 *     CPU kernel it stands for (kernels/ops.h, kernels/matmul.h, kernels/train_ops.h): on the CPU
 *     backend the pointers are host memory and the entries ARE those kernels (or thin adapters);
 *     on a device backend they are addresses inside a range the backend reserves (PROT_NONE on the
 *     host) and maps back to (buffer, offset). Pointer arithmetic on device addresses is valid
 *     inside one allocation (`S->q + s0 * qd`). A host dereference of a device address is a bug;
 *     the "guard" debug backend (kernels/cpu/backend_guard.c) makes it fault in tests.
 *     One allocation is never split across two device buffers, so it is at most
 *     af_device_info.max_alloc bytes; callers that need more carve several (af_carver below).
 *  2. OPS DO NOT FAIL and do not return a status (the CPU kernels cannot fail). A device backend
 *     queues them; an error (device lost, out of memory during a run, a shader that fails) is
 *     recorded ONCE on the device (sticky, af_device_fail) and returned by the next sync, upload or
 *     download (AF_ERR_DEVICE, message naming the device and the operation). After an error the
 *     remaining ops of the run may be skipped; their outputs are then undefined. Ops that give a
 *     scalar to the host (the losses, the gradient norm, the non-finite count) return it, which
 *     waits for the queued work; on a device error they return NaN (count: -1).
 *  3. WEIGHTS are imported once per model (af_model_load under a device context): import_weight
 *     returns the device address of the stored blocks (the CPU backend returns the host address:
 *     no copy). A backend may convert a block type it cannot read in its shaders (it reports the
 *     type it keeps through *dev_type, said once by the caller) and may split a tensor larger than
 *     max_alloc internally; the address it returns is only ever passed back to the table.
 *  4. THREADS: ops run on the context's worker pool (CPU) or the device's queue; a context's ops
 *     are issued by one host thread at a time (as today: two threads sharing a context take turns).
 *  5. Scalars that travel with an op (sizes, eps, scales, lr, the AdamW hyper-parameters) are host
 *     values passed by value or through a small host struct (af_adamw); arrays are device memory
 *     unless the field says "host".
 *
 * Units: sizes in elements unless named *bytes; shapes [rows, cols], row-major; "device" = memory
 * from this table's alloc (or import_weight for weights). Ownership: whoever allocates frees with
 * the same context's table (or a context of the same device: contexts of one device share it).
 */
#ifndef AF_KERNELS_BACKEND_H
#define AF_KERNELS_BACKEND_H

#include "afinar.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"

#include <stddef.h>
#include <stdint.h>

typedef struct af_lora_args af_lora_args; /* kernels/train_ops.h */

/* AdamW hyper-parameters and step count, a host struct read by adamw_step (train_ops.h). */
typedef struct af_adamw af_adamw;

/* ---------------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------------- */

/* af_device_info (what `afinar devices` prints about one device and what the memory guard reads)
 * is public: include/afinar.h. */

/* An open device: shared by every context opened on the same backend and index (reference
 * counted by the registry in backend.c), so contexts derived from one another (a trainer's own
 * context, a CPU fallback) see the same memory. Read-only after opening except `err` and
 * `errmsg`, which backends set through af_device_fail. */
typedef struct af_device {
    const struct af_backend *be;          /* its ops */
    const struct af_backend_entry *entry; /* its backend (enumerate/open/close) */
    af_device_info info;
    void *impl;                           /* the backend's own state (owned by the backend) */
    int refs;                             /* contexts holding it (registry lock) */
    int32_t max_head_dim;                 /* largest attention head_dim its ops take (0: any); a model with
                                           * a larger one is refused at load (af_model_import) */
    int err;                              /* sticky af_status of the first device error (0: none) */
    char errmsg[512];                     /* its message */
} af_device;

/* Record a device error (the first one is kept; later ones are dropped). For backends. */
void af_device_fail(af_device *dev, af_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* AF_OK, or the sticky error re-raised with af_fail (message "device NAME: ..."). */
af_status af_device_status(const af_device *dev);

/* ---------------------------------------------------------------------------------------------
 * The table. Every op's first argument is the context (its device: ctx->dev; its pool and kernel
 * path: ctx->pool, ctx->k). Shapes and formulas: the CPU declaration named after each entry.
 * ------------------------------------------------------------------------------------------- */
typedef struct af_backend {
    const char *name; /* "cpu", "vulkan", "guard" */

    /* ---- buffers ---- */
    /* `bytes` of device memory, 64-byte aligned, uninitialised; bytes <= info.max_alloc.
     * NULL on failure with af_fail(AF_ERR_NOMEM, "device NAME: out of device memory for N bytes ..."). */
    void *(*alloc)(const af_ctx *ctx, size_t bytes);
    /* Free an alloc'ed pointer (NULL: nothing). */
    void (*free)(const af_ctx *ctx, void *p);
    /* Device address of a read-only weight tensor stored at `host` [rows, cols] in block type
     * `type` (af_row_bytes(type, cols) bytes per row), imported for the life of the model; the host
     * bytes must outlive it. *dev_type: the type the device keeps (== type unless the backend
     * converts it). CPU: returns `host` (no copy). NULL on failure (af_fail: AF_ERR_NOMEM,
     * AF_ERR_UNSUPPORTED naming the type). */
    const void *(*import_weight)(const af_ctx *ctx, const void *host, uint32_t type, int64_t rows, int64_t cols,
                                 uint32_t *dev_type);
    /* Release an import_weight result (NULL: nothing). */
    void (*release_weight)(const af_ctx *ctx, const void *dev);
    /* Copy `bytes` host -> device / device -> host; both wait for queued work (download also for
     * the ops that produce `src`). Errors: the device's sticky error (AF_ERR_DEVICE). */
    af_status (*upload)(const af_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes);
    af_status (*download)(const af_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes);
    /* dst[0, bytes) = src[0, bytes) on the device (regions do not overlap). */
    void (*copy)(const af_ctx *ctx, void *dst, const void *src, size_t bytes);
    /* x[0, n) = value (floats; value 0 writes +0.0 bit patterns). */
    void (*fill)(const af_ctx *ctx, float *x, float value, int64_t n);
    /* Wait until every queued op has finished. Errors: the sticky device error. */
    af_status (*sync)(const af_ctx *ctx);
    /* Bytes of device memory free now and in all (as af_device_info.mem_free / mem_total). */
    void (*memory)(const af_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes);

    /* ---- frozen-weight products on stored blocks (kernels/matmul.h) ----
     * y [n, out] (+)= x [n, in] · W[out, in]ᵀ;  dx [n, in] (+)= dy [n, out] · W;  w: import_weight
     * address, type its *dev_type. */
    void (*matmul_xwt)(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                       int64_t in, int64_t out, int accumulate);
    void (*matmul_dyw)(const af_ctx *ctx, float *dx, const float *dy, const void *w, uint32_t type, int64_t n,
                       int64_t in, int64_t out, int accumulate);
    /* Several products y_i = x_i · W_iᵀ (kernels/matmul.h af_matmul_xwt_parts: x, y device memory,
     * w import_weight addresses), each with the bits of its own matmul_xwt call (accumulate 0): on
     * the CPU the decode-regime ones share one parallel region. */
    void (*matmul_xwt_parts)(const af_ctx *ctx, const af_mm_part *parts, int n_parts);
    /* The training form of the two products above (n >= AF_TF_MIN_ROWS rows): dyw = 0 is
     * matmul_xwt, dyw = 1 matmul_dyw (then `in`/`out` keep their meaning: y is [n, in]); the rows
     * may be cut into token blocks of about block_rows (0: one call) spread over the threads: the
     * CPU backend's cache blocking (transformer.c used to do it). Results equal one call, bitwise. */
    void (*matmul_rows)(const af_ctx *ctx, int dyw, float *y, const float *x, const void *w, uint32_t type,
                        int64_t n, int64_t in, int64_t out, int accumulate, int64_t block_rows);

    /* ---- dense f32 GEMMs (kernels/matmul.h): activations and LoRA factors ----
     * abt: C[m, n] (+)= A[m, k]·B[n, k]ᵀ;  ab: C[m, n] (+)= A[m, k]·B[k, n];  atb: C[m, n] (+)= A[k, m]ᵀ·B[k, n] */
    void (*gemm_abt)(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                     int accumulate);
    void (*gemm_ab)(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                    int accumulate);
    void (*gemm_atb)(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                     int accumulate);

    /* ---- row ops (kernels/ops.h) ---- */
    /* y, x [n, dim], w [dim], rstd [n] (may be NULL); y may alias x. */
    void (*rmsnorm_forward)(const af_ctx *ctx, float *y, float *rstd, const float *x, const float *w, int64_t n,
                            int64_t dim, float eps);
    /* dx [n, dim] +=, dw [dim] += (may be NULL); dy, x [n, dim]; rstd [n] of the forward. */
    void (*rmsnorm_backward)(const af_ctx *ctx, float *dx, float *dw, const float *dy, const float *x,
                             const float *w, const float *rstd, int64_t n, int64_t dim);
    /* x [n, n_heads, head_dim] rotated in place; pos [n] int32 (device); freq_factors [head_dim/2]
     * (device; NULL: none): theta_i divided by freq_factors[i] (af_rope_ff_forward; gemma4). */
    void (*rope_forward)(const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads,
                         int64_t head_dim, float base, int neox, const float *freq_factors);
    void (*rope_backward)(const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads,
                          int64_t head_dim, float base, int neox, const float *freq_factors);
    /* h, gate, up [n]; backward ADDS into d_gate, d_up. */
    void (*swiglu_forward)(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n);
    void (*swiglu_backward)(const af_ctx *ctx, float *d_gate, float *d_up, const float *dh, const float *gate,
                            const float *up, int64_t n);
    void (*geglu_forward)(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n);
    void (*geglu_backward)(const af_ctx *ctx, float *d_gate, float *d_up, const float *dh, const float *gate,
                           const float *up, int64_t n);
    /* Causal GQA attention of one sequence; q/out [n_q, n_heads, head_dim], k/v [n_kv, ...] rows
     * kv_stride floats apart (the KV-cache form: n_q new queries at q_pos0 over a cache), lse
     * [n_heads, n_q] (may be NULL). */
    void (*attention_forward)(const af_ctx *ctx, float *out, float *lse, const float *q, const float *k,
                              const float *v, int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride,
                              int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
    /* ADDS into dq, dk, dv (kv_stride = n_kv_heads·head_dim). */
    void (*attention_backward)(const af_ctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q, const float *k, const float *v,
                               int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, float scale, int64_t window);
    /* y[i] = a[i] + b[i], n floats (y may alias a or b). */
    void (*add)(const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n);

    /* ---- loops that model code ran on the host (kernels/train_ops.h) ---- */
    /* x[i] *= s, n floats. */
    void (*scale)(const af_ctx *ctx, float *x, float s, int64_t n);
    /* y[t, :] += b for every row t of y [n, out]; b [out]. */
    void (*add_bias)(const af_ctx *ctx, float *y, const float *b, int64_t n, int64_t out);
    /* x [n, H] = rows tokens[t] of W [vocab, H] (blocks of `type`, import_weight address)
     * dequantized, times `scale` (skipped when 1); tokens [n] int32 (device), in [0, vocab). */
    void (*embed)(const af_ctx *ctx, float *x, const int32_t *tokens, int64_t n, const void *w, uint32_t type,
                  int64_t H, float scale);
    /* x[i] = c·tanh(x[i]/c), n floats (LM-head soft-cap, c > 0). */
    void (*softcap)(const af_ctx *ctx, float *x, int64_t n, float c);
    /* dst [k, W] row j = src row idx[j] (src [*, W]); idx [k] int32 (device). */
    void (*rows_gather)(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W);
    /* dst row idx[j] = src row j (src [k, W]), or zeros when src is NULL; idx [k] int32 (device). */
    void (*rows_scatter)(const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W);
    /* Number of NaN/Inf among x [n] (-1 on a device error). Waits for queued work. */
    int64_t (*count_nonfinite)(const af_ctx *ctx, const float *x, int64_t n);

    /* ---- LoRA (kernels/train_ops.h; PEFT's unmerged form) ---- */
    /* xa [n, r] = (x ⊙ drop_mask) · Aᵀ;  y [n, out] += scale · xa · Bᵀ. A [r, in], B [out, r];
     * drop_mask [n, in] or NULL. */
    void (*lora_forward)(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                         const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale);
    /* dB += scale·dyᵀ·xa; dA += tᵀ·(x ⊙ mask) with t = scale·dy·B; dx [n, in] += (t·A) ⊙ mask
     * (dx may be NULL); tmp: n·r floats (+ n·in with a mask). */
    void (*lora_backward)(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                          const float *x, const float *xa, const float *drop_mask, const float *A, const float *B,
                          int64_t n, int64_t in, int64_t out, int32_t r, float scale);
    /* mask [n, in]: element (t, i) = 1/(1-p) when u(seed, layer, proj, t0 + t, i) >= p else 0
     * (lora.h af_ctr_key / af_ctr_u01: the same bits on every backend). proj: an af_proj value. */
    void (*lora_dropout_mask)(const af_ctx *ctx, float *mask, uint64_t seed, int32_t layer, int32_t proj,
                              int64_t t0, int64_t n, int64_t in, float p);

    /* ---- classification head and losses (kernels/train_ops.h) ---- */
    /* pooled [B, H] from hidden [n_tok, H]; seq_start [B + 1] int32 (device). */
    void (*pool_forward)(const af_ctx *ctx, float *pooled, const float *hidden, const int32_t *seq_start,
                         int32_t B, int64_t H, af_head_pooling pool);
    /* d_hidden [n_tok, H] += scatter of d_pooled [B, H]. */
    void (*pool_backward)(const af_ctx *ctx, float *d_hidden, const float *d_pooled, const int32_t *seq_start,
                          int32_t B, int64_t H, af_head_pooling pool);
    /* logits [B, C] = pooled [B, H]·W[C, H]ᵀ + bias [C] (bias may be NULL). */
    void (*head_forward)(const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias,
                         int32_t B, int64_t H, int32_t C);
    /* dW [C, H] +=, dbias [C] += (may be NULL), d_pooled [B, H] += (may be NULL). */
    void (*head_backward)(const af_ctx *ctx, float *d_pooled, float *dW, float *dbias, const float *d_logits,
                          const float *pooled, const float *W, int32_t B, int64_t H, int32_t C);
    /* Weighted softmax CE: d_logits [B, C] (overwritten), probs [B, C] (may be NULL), labels [B]
     * int32, class_w [C] (may be NULL). Returns the mean loss (host double; waits). */
    double (*ce_loss)(const af_ctx *ctx, float *d_logits, float *probs, const float *logits, const int32_t *labels,
                      const float *class_w, int32_t B, int32_t C);
    /* BCE-with-logits: d_logits [B, C] (overwritten), targets [B, C]. Returns the mean loss (waits). */
    double (*bce_loss)(const af_ctx *ctx, float *d_logits, const float *logits, const float *targets, int32_t B,
                       int32_t C);
    /* LM-head loss of k gathered rows (model/transformer.h af_lm_head_loss): z [k, V] logits in
     * place (soft-capped when cap > 0; with grad: replaced by grad_scale·(softmax − onehot)·cap'),
     * tgt [k] int32 in [0, V); loss [k] (double, nats: logsumexp(z) − z[tgt]) and correct [k]
     * (int32: argmax, lowest index on ties, == tgt) written per row (device). */
    void (*lm_ce_rows)(const af_ctx *ctx, float *z, const int32_t *tgt, int64_t k, int64_t V, float cap,
                       float grad_scale, int grad, double *loss, int32_t *correct);

    /* ---- optimizer (kernels/train_ops.h) ---- */
    /* One AdamW update of P, M, V [n] with G [n]; o (host) gives the hyper-parameters and t (incremented
     * here); decay_mask [n] uint8 (device; NULL: decay everything). */
    void (*adamw_step)(const af_ctx *ctx, af_adamw *o, float *P, const float *G, float *M, float *V, int64_t n,
                       float lr, const uint8_t *decay_mask);
    /* Global L2 norm of G [n] (double, fixed order), G scaled by max_norm/(norm+1e-6) when that is
     * below 1 and max_norm > 0. Returns the pre-clip norm (waits; NaN/Inf: G untouched). */
    double (*clip_grad_norm)(const af_ctx *ctx, float *G, int64_t n, double max_norm);

    /* ---- optional fused ops (kernels/train_ops.h); NULL: the walk composes the same result from
     * the ops above (matmul_rows, swiglu/geglu_forward/backward, fill), which is what a backend
     * without them runs (Vulkan, guard). The CPU's equal that composition bit for bit. ---- */
    /* gate, up [n, F] = x·Wgᵀ, x·Wuᵀ (each + its LoRA correction where lg / lu is given, as
     * proj_lora_forward); h = act(gate)·up (geglu 0: SwiGLU, 1: tanh GELU); n >= AF_TF_MIN_ROWS. */
    void (*mlp_gate_up)(const af_ctx *ctx, float *gate, float *up, float *h, const float *x, const void *wg,
                        uint32_t tg, const void *wu, uint32_t tu, int64_t n, int64_t in, int64_t F, int geglu,
                        int64_t block_rows, const af_lora_args *lg, const af_lora_args *lu);
    /* A projection with its LoRA correction: xa [n, r] = (x ⊙ drop_mask)·Aᵀ, y [n, out] = x·Wᵀ +
     * scale·xa·Bᵀ (W of `type`, n >= AF_TF_MIN_ROWS). The CPU's is matmul_rows then lora_forward bit for
     * bit in f32; with bf16 products on AMX tiles the correction runs in the frozen product's epilogue. */
    void (*proj_lora_forward)(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                              const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                              int64_t out, int32_t r, float scale, int64_t block_rows);
    /* Its backward: dx [n, in] (+)= dy·W (accumulate) plus lora_backward's dx, dA, dB (dx may be NULL).
     * The CPU's is matmul_rows (dyw) then lora_backward bit for bit in f32; with bf16 products on AMX
     * tiles and no mask, dx += t·A runs in the epilogue of dy·W. */
    void (*proj_lora_backward)(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                               const float *x, const float *xa, const float *drop_mask, const void *w, uint32_t type,
                               const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r,
                               float scale, int accumulate, int64_t block_rows);
    /* dh [n, F] = dy [n, H]·Wd; d_gate, d_up [n, F] = (overwritten) the activation's backward of dh.
     * With ld (down_proj's adapter): ld->x = act(gate)·up, and dh gets the LoRA dx as
     * proj_lora_backward (not accumulated) with ld's dA, dB. */
    void (*mlp_down_back)(const af_ctx *ctx, float *dh, float *d_gate, float *d_up, const float *dy, const void *wd,
                          uint32_t td, const float *gate, const float *up, int64_t n, int64_t F, int64_t H,
                          int geglu, int64_t block_rows, const af_lora_args *ld);
} af_backend;

/* The table of a context (never NULL: contexts without a device have the CPU's). */
static inline const af_backend *af_be(const af_ctx *ctx) { return ctx->be; }

/* ---------------------------------------------------------------------------------------------
 * Backends and the registry (backend.c)
 * ------------------------------------------------------------------------------------------- */

/* What each backend provides to the registry. */
typedef struct af_backend_entry {
    const char *name; /* "cpu", "vulkan", "guard" */
    int hidden;       /* 1: not listed by `afinar devices` and not chosen by auto (debug backends) */
    /* Devices this backend can open: up to `cap` infos into out (may be NULL when cap is 0), the
     * number in *n. A backend without devices returns AF_OK with *n = 0 and says why in why[cap]
     * ("not built (no Vulkan headers or glslc at build time)", "no Vulkan loader (libvulkan.so.1)",
     * "the loader found no device"). */
    af_status (*enumerate)(af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap);
    /* Open device `index` into dev (dev->entry, dev->info.backend/index set by the registry): fill
     * dev->be, dev->info and dev->impl. Errors: AF_ERR_NOT_FOUND (no such index), AF_ERR_DEVICE,
     * AF_ERR_UNSUPPORTED, AF_ERR_NOMEM, each naming the device. */
    af_status (*open)(int32_t index, af_device *dev);
    /* Free dev->impl (every buffer of the device is already freed). */
    void (*close)(af_device *dev);
} af_backend_entry;

/* The backends built in, in the order `afinar devices` lists them: cpu, vulkan (a stub that says
 * "not built" when the Vulkan backend is not compiled in), then hidden ones (guard). */
int32_t af_backend_registry(const af_backend_entry *const **out);

/* The CPU backend (kernels/cpu/backend_cpu.c) and the debug guard backend (backend_guard.c). */
extern const af_backend_entry af_backend_entry_cpu;
extern const af_backend_entry af_backend_entry_guard;
#ifdef AF_HAVE_VULKAN
/* The Vulkan backend (kernels/vulkan/, built when the Makefile finds vulkan.h and glslc). */
extern const af_backend_entry af_backend_entry_vulkan;
#endif
/* The CPU ops table (also what the guard backend wraps). */
extern const af_backend af_backend_cpu;

/* What af_device_acquire chose for a spec (filled when the pointer is not NULL). */
typedef struct af_device_pick {
    int is_auto;     /* 1: the spec was "auto" */
    int chose_cpu;   /* 1: "auto" found no accelerator and took the CPU (why says why) */
    char why[512];   /* chose_cpu: why each backend gave none ("vulkan: only the software device ...") */
} af_device_pick;

/* Open (or share: reference counted) the device named by `spec`:
 *   NULL, "" or "cpu"   the CPU
 *   "vulkan", "vulkan:N" the first / N-th Vulkan device (af_device_info.index), software ones too
 *   "guard"              the debug backend (CPU kernels, device memory kept PROT_NONE between ops)
 *   "auto"               the first device of a non-hidden, non-CPU backend that is not a software
 *                        implementation (af_device_info.software), else the CPU (pick->chose_cpu
 *                        says so; pick->why says why no accelerator was taken)
 * `pick` may be NULL. Errors: AF_ERR_INVALID_ARG (unknown backend or a bad index, naming the spec
 * and the accepted forms), AF_ERR_UNSUPPORTED ("vulkan: not built ..."), AF_ERR_NOT_FOUND (no
 * device N), the backend's open errors. Release with af_device_release. */
af_status af_device_acquire(const char *spec, af_device **out, af_device_pick *pick);
void af_device_release(af_device *dev);

/* ---------------------------------------------------------------------------------------------
 * Fault injection (tests and debugging only): the environment variable AFINAR_FAULT, read once,
 * a comma list of
 *   alloc=N   the N-th device allocation (alloc, import_weight; counted from 1 over the process)
 *             of a non-CPU device fails (AF_ERR_NOMEM, "... (fault injection)")
 *   lost=N    the device is lost at its N-th op (sticky AF_ERR_DEVICE; later ops do nothing)
 *   nan=N     the N-th frozen-weight product (matmul_xwt/dyw/rows) writes NaN into its output
 *   mem=B     the device reports B bytes of memory (total and free; suffix K, M, G allowed)
 *   auto=guard `--device auto` takes the guard device as the accelerator (tests of the fallback)
 *   auto=software `--device auto` may take a software device (llvmpipe, lavapipe: tests of the
 *             fallback on a machine without a GPU)
 * The CPU backend ignores it; device backends call these at the named points.
 * ------------------------------------------------------------------------------------------- */
int af_fault_alloc(void);        /* 1: this allocation must fail */
int af_fault_op_lost(void);      /* 1: the device is lost at this op (counts ops) */
int af_fault_matmul_nan(void);   /* 1: this product must write NaN (counts products) */
uint64_t af_fault_mem(void);     /* bytes to report (0: no override) */
int af_fault_auto_guard(void);   /* 1: auto may take the guard device */
int af_fault_auto_software(void); /* 1: auto may take a software device */

/* ---------------------------------------------------------------------------------------------
 * Planning and allocating many device regions (the engine's workspace, the session's state)
 * ------------------------------------------------------------------------------------------- */

/* Bump allocator in two passes: count (af_carver_count), allocate (af_carver_alloc), then carve
 * again with the same calls in the same order to get the addresses. Every region is 64-byte
 * aligned. Regions are packed into chunks of at most `limit` bytes (the device's max_alloc; one
 * chunk on the CPU); a region larger than the limit gets a chunk of its own and makes
 * af_carver_alloc fail (AF_ERR_NOMEM naming the size and the limit). */
typedef struct af_carver {
    size_t used;        /* bytes of every region so far (64-byte rounded): the estimate */
    size_t limit;       /* chunk size limit (0: unlimited) */
    size_t chunk_used;  /* bytes in the current chunk */
    int32_t chunk;      /* index of the current chunk (-1 before the first region) */
    int32_t n_chunks;   /* chunks counted (count pass) */
    size_t *sizes;      /* [n_chunks] chunk sizes (count pass; owned) */
    char **base;        /* [n_chunks] chunk addresses (carve pass; NULL: count) */
} af_carver;

/* Start a count pass; `limit` 0 = one chunk. */
void af_carver_count(af_carver *cv, size_t limit);
/* float region of n floats (NULL in the count pass). */
float *af_carve(af_carver *cv, int64_t nfloats);
/* Memory of a counted plan: its chunks allocated on ctx's device. Owned by the caller: release
 * with af_devmem_free. Errors: AF_ERR_NOMEM (device message), AF_ERR_INVALID_ARG (a region above
 * the device's max_alloc). On success cv is reset for the carve pass over that memory. */
typedef struct af_devmem {
    const af_ctx *ctx; /* the context the chunks were allocated with (borrowed) */
    int32_t n;
    void **chunk;      /* [n] */
    size_t bytes;      /* sum of the chunk sizes */
} af_devmem;
af_status af_carver_alloc(af_carver *cv, const af_ctx *ctx, af_devmem *mem);
/* Drop a count pass without allocating (frees cv->sizes). */
void af_carver_done(af_carver *cv);
void af_devmem_free(af_devmem *mem);

#endif /* AF_KERNELS_BACKEND_H */
