/*
 * vk.h — the Vulkan backend: devices, device memory addressed by ordinary pointers, and every op
 * of the compute path as GLSL compute shaders (src/kernels/vulkan/shaders/, compiled to SPIR-V by
 * glslc at build time and embedded in the library). docs/VULKAN.md describes the design, the ops
 * and formats covered, the tolerances against the CPU kernels and the fast paths.
 *
 * Pointers. af_vk_alloc returns an address inside a host address range reserved with PROT_NONE:
 * it names device memory and must never be dereferenced on the host (that faults at once), but
 * pointer arithmetic inside an allocation is valid, so the ops take the same pointer arguments as
 * the CPU kernels (ops.h, matmul.h, lora.h, head.h, optim.h) and mean the same elements.
 *
 * Ops. Each af_vk_<op> has the argument list of the CPU kernel af_<op> with the device in place of
 * the context, and the same semantics (row-major shapes, ADD into gradient buffers, optional
 * NULL arguments). Every pointer argument is device memory of that device, except where a
 * comment says "host". Ops are recorded into a command stream and run asynchronously; a
 * synchronization point (af_vk_download, af_vk_sync, the ops that return a host scalar) submits
 * and waits. Ops return nothing: a failure (device lost, out of memory, a shader the driver
 * refused, an argument that is not device memory) is recorded in the device, every later op is
 * skipped, and the next synchronization point returns it with a message naming the device
 * ("vulkan:0 (llvmpipe ...)") and the operation. Threads: each call locks the device; calls from
 * several threads are serialized.
 *
 * Numerics: f32 like the CPU kernels with another summation order; double where the CPU kernels
 * use double (RMSNorm row sums, losses, norms) when the device has shaderFloat64, else f32.
 * Tolerances against the CPU: docs/VULKAN.md §4 and tests/test_backend_ops.c.
 */
#ifndef AF_KERNELS_VK_H
#define AF_KERNELS_VK_H

#include "afinar.h"

#include <stddef.h>
#include <stdint.h>

typedef struct af_vk_dev af_vk_dev;

/* What one device is and has. */
typedef struct af_vk_info {
    char name[256];         /* VkPhysicalDeviceProperties.deviceName */
    char driver[256];       /* driverName + driverInfo */
    uint32_t api_version;   /* VK_MAKE_API_VERSION */
    uint32_t vendor_id, device_id;
    int type;               /* VkPhysicalDeviceType: 1 integrated, 2 discrete, 3 virtual, 4 cpu */
    uint64_t mem_total;     /* bytes of the device-local heap */
    uint64_t max_range;     /* maxStorageBufferRange */
    uint32_t subgroup_size; /* 0 when subgroup arithmetic in compute shaders is unavailable */
    int fp16, fp64, int64;  /* shaderFloat16, shaderFloat64, shaderInt64 */
    int subgroup_arith;     /* VK_SUBGROUP_FEATURE_ARITHMETIC_BIT in compute */
    uint32_t subgroup_min, subgroup_max; /* minSubgroupSize..maxSubgroupSize (subgroup size control), else 0 */
    int subgroup_control;   /* subgroupSizeControl with compute in requiredSubgroupSizeStages: the subgroup
                               shaders are created with a required size (vk_exec.c) */
    int full_subgroups;     /* computeFullSubgroups: the subgroup shaders require full subgroups */
    int coopmat;            /* VK_KHR_cooperative_matrix extension present (not used: see VULKAN.md) */
} af_vk_info;

/* 1 when this build has the Vulkan backend (the Makefile found the headers and glslc). */
int af_vk_built(void);

/* The Vulkan devices of this machine: up to cap entries into out, their number into *n.
 * Errors: AF_ERR_UNSUPPORTED "Vulkan: no loader ..." (no libvulkan.so.1), "Vulkan: ... no driver"
 * (vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER), "built without Vulkan". A machine with a
 * loader but no device gives AF_OK and *n = 0. */
af_status af_vk_enumerate(af_vk_info *out, int cap, int *n);

/* Open device `index` (the N of vulkan:N) with a compute queue. Errors: those of af_vk_enumerate,
 * AF_ERR_NOT_FOUND "no Vulkan device N (the machine has M)", AF_ERR_UNSUPPORTED when the device
 * lacks Vulkan 1.1 or a compute queue. Close with af_vk_close (waits for the device). */
af_status af_vk_open(int index, af_vk_dev **out);
void af_vk_close(af_vk_dev *d);
const af_vk_info *af_vk_dev_info(const af_vk_dev *d);
/* "vulkan:0 (llvmpipe (LLVM 15.0.6, 256 bits))" */
const char *af_vk_dev_name(const af_vk_dev *d);
/* A note for the user from opening the device ("" when none), e.g. that the pipeline cache file
 * was corrupt and was ignored. */
const char *af_vk_dev_note(const af_vk_dev *d);

/* Call on_fail(owner, status, message without the device name) when the device records its first
 * failure (the backend table forwards it to af_device_fail). */
void af_vk_set_owner(af_vk_dev *d, void (*on_fail)(void *owner, af_status st, const char *msg), void *owner);
/* The sticky error (AF_OK when none), message set. Does not wait. */
af_status af_vk_status(af_vk_dev *d);
/* Mark the device lost now, as if during `op` (fault injection of the backend table). */
void af_vk_lose(af_vk_dev *d, const char *op);

/* ---- memory ---- */
/* bytes of device memory (any size: larger than a buffer window it is split, see vk_internal.h).
 * NULL on failure (af_last_error: "vulkan:N (...): allocating B bytes: VK_ERROR_OUT_OF_DEVICE_MEMORY").
 * Contents are undefined. */
void *af_vk_alloc(af_vk_dev *d, size_t bytes);
/* p: NULL or a pointer af_vk_alloc returned. The memory is released once queued work is done. */
void af_vk_free(af_vk_dev *d, void *p);
/* 1 when p lies inside one of d's allocations. */
int af_vk_owns(af_vk_dev *d, const void *p);
/* Bytes from p to the end of the bytes its allocation was asked for (0: not device memory). */
uint64_t af_vk_bytes_from(af_vk_dev *d, const void *p);
/* Host -> device (src host), ordered after every op recorded before. Errors: the sticky error. */
af_status af_vk_upload(af_vk_dev *d, void *dst, const void *src, size_t bytes);
/* Device -> host (dst host): a synchronization point. */
af_status af_vk_download(af_vk_dev *d, void *dst, const void *src, size_t bytes);
/* Device -> device copy; fill with a 32-bit pattern (bytes % 4 == 0; 0 for zeros, a float's bits). */
void af_vk_copy(af_vk_dev *d, void *dst, const void *src, size_t bytes);
void af_vk_fill(af_vk_dev *d, void *dst, uint32_t pattern, size_t bytes);
/* Wait for every recorded op; returns the sticky error (AF_OK when none). */
af_status af_vk_sync(af_vk_dev *d);
/* Bytes allocated through this device, and the device-local heap size (budget when the driver
 * reports one). */
void af_vk_meminfo(af_vk_dev *d, uint64_t *used, uint64_t *total);

/* ---- memory policy (a pure function of the device's memory properties: tested with made-up ones) ----
 * One memory type as the device reports it: its VkMemoryPropertyFlags (bit 0 DEVICE_LOCAL, 1
 * HOST_VISIBLE, 2 HOST_COHERENT, 3 HOST_CACHED) and the size in bytes of its heap. */
typedef struct af_vk_memtype {
    uint32_t flags;
    uint64_t heap_size;
} af_vk_memtype;
typedef struct af_vk_mempick {
    int device;              /* index of the type of every allocation */
    int host;                /* index of the type of the staging buffers */
    int device_host_visible; /* allocations are mapped: the host reads and writes them directly */
    int host_coherent, host_cached;
} af_vk_mempick;
/* Memory types for a device of VkPhysicalDeviceType `device_type` (2: discrete) from its `n` types:
 *  - device: a DEVICE_LOCAL type on the largest such heap. On a discrete GPU one that is not
 *    HOST_VISIBLE is preferred and allocations are never mapped (device_host_visible 0): a
 *    host-visible device-local type there is VRAM behind the PCIe BAR (resizable BAR), which the
 *    host reads uncached, far slower than a staged copy, so every transfer goes through staging
 *    buffers recorded in the command stream. Elsewhere (integrated, CPU such as lavapipe, virtual)
 *    a HOST_VISIBLE + HOST_COHERENT one is preferred and mapped (no copies).
 *  - host (staging): a HOST_VISIBLE type, preferring HOST_COHERENT + HOST_CACHED (the host reads
 *    downloads from cached memory), then HOST_COHERENT, then HOST_CACHED, then any.
 * Returns 0, or -1 when the device has no DEVICE_LOCAL or no HOST_VISIBLE type (*out unchanged). */
int af_vk_pick_memory(const af_vk_memtype *t, int n, int device_type, af_vk_mempick *out);
/* The required subgroup size of the subgroup shaders (mv_sg: one subgroup per weight row, lanes
 * striding 32-value chunks) on a device whose size control allows [min_size, max_size]: 32 clamped
 * to that range (NVIDIA: 32; AMD RDNA 32..64: 32, the smaller wave keeps more lanes busy on rows of
 * 576..2048 values = 18..64 chunks; Intel 8..32: 32; lavapipe 8..8: 8). 0 when the range is empty. */
uint32_t af_vk_pick_subgroup_size(uint32_t min_size, uint32_t max_size);
/* The profile of a device opened with $AF_VULKAN_PROFILE=1 (vk_prof.c: GPU timestamps after every
 * command, totals per shader, largest first) as text into buf (cap bytes, NUL-terminated,
 * truncated to fit); also printed on stderr when the device is closed. Returns the full length
 * (0: not profiling). */
size_t af_vk_profile_text(af_vk_dev *d, char *buf, size_t cap);
/* Queue submissions made by this device so far (command buffers: one per synchronization point or
 * full frame; tests and AF_VULKAN_TRACE count them per decode step). */
uint64_t af_vk_submissions(af_vk_dev *d);

/* ---- test hooks ---- */
typedef enum af_vk_hook {
    AF_VK_HOOK_BUFFER_LIMIT, /* value: bytes per buffer window for allocations made from now on (0: the device's) */
    AF_VK_HOOK_FP64,         /* value 0: the f32 variants of the shaders that use double */
    AF_VK_HOOK_SUBGROUP,     /* value 0: no subgroup-arithmetic variants */
    AF_VK_HOOK_FP16,         /* value 1: fp16-arithmetic products (opt-in precision, needs shaderFloat16) */
    AF_VK_HOOK_STAGING,      /* value 1: uploads/downloads through staging copies even on host-visible memory */
    AF_VK_HOOK_SUBGROUP_SIZE, /* value: the required subgroup size of the subgroup shaders' pipelines created from
                                now on (0: none, the driver's choice); a value outside the device's
                                [subgroup_min, subgroup_max], not a power of two, or on a device without
                                subgroup size control is refused (-1) */
    AF_VK_HOOK_MM_SMALL,     /* value: products whose 64 x 64-tile grid has fewer workgroups use the 32 x 32-tile
                                shader (0: never; UINT64_MAX: always; default 1024 on GPUs, 0 on CPU devices) */
} af_vk_hook;
/* Returns the previous value; AF_ERR-free (an unsupported switch to 1 stays 0 and returns -1). */
int af_vk_set_hook(af_vk_dev *d, af_vk_hook h, uint64_t value);
/* Fault injection: the n-th allocation / queue submission / shader module from now on fails
 * (kind 0 alloc, 1 device lost, 2 shader; vk_loader.h). n = 0 disarms. Also $AF_VULKAN_FAULT. */
void af_vk_fault_arm(af_vk_dev *d, int kind, int n);

/* ---- ops: matmul.h ---- */
void af_vk_matmul_xwt(af_vk_dev *d, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in,
                      int64_t out, int accumulate);
void af_vk_matmul_dyw(af_vk_dev *d, float *dx, const float *dy, const void *w, uint32_t type, int64_t n, int64_t in,
                      int64_t out, int accumulate);
void af_vk_gemm_abt(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                    int accumulate);
void af_vk_gemm_ab(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                   int accumulate);
void af_vk_gemm_atb(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                    int accumulate);
/* 1 when products on weights of this type run in a shader (every type af_type_can_dequantize accepts). */
int af_vk_type_supported(uint32_t type);

/* ---- ops: ops.h ---- */
void af_vk_vexpf(af_vk_dev *d, float *y, const float *x, int64_t n);
void af_vk_rmsnorm_forward(af_vk_dev *d, float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                           float eps);
void af_vk_rmsnorm_backward(af_vk_dev *d, float *dx, float *dw, const float *dy, const float *x, const float *w,
                            const float *rstd, int64_t n, int64_t dim);
/* pos: [n] int32 positions (device); freq_factors: [head_dim/2] (device; NULL: none), theta_i divided by
 * freq_factors[i] (af_rope_ff_forward; gemma4), read back once per vector and cached in the device's table */
void af_vk_rope_forward(af_vk_dev *d, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                        float base, int neox, const float *freq_factors);
void af_vk_rope_backward(af_vk_dev *d, float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                         float base, int neox, const float *freq_factors);
void af_vk_swiglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n);
void af_vk_swiglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate,
                           const float *up, int64_t n);
void af_vk_geglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n);
void af_vk_geglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate,
                          const float *up, int64_t n);
/* The attention shaders keep a query (and dout) row of head_dim floats in shared memory: head_dim <=
 * AF_VK_ATTN_HD_MAX (Gemma 4's global layers have 512); a larger one is refused (AF_ERR_UNSUPPORTED). */
#define AF_VK_ATTN_HD_MAX 512
void af_vk_attention_forward(af_vk_dev *d, float *out, float *lse, const float *q, const float *k, const float *v,
                             int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t n_heads,
                             int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
void af_vk_attention_backward(af_vk_dev *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                              int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                              float scale, int64_t window);
void af_vk_add(af_vk_dev *d, float *y, const float *a, const float *b, int64_t n);
/* softmax of each of `rows` rows of n floats in place (af_softmax_inplace per row) */
void af_vk_softmax_rows(af_vk_dev *d, float *x, int64_t rows, int64_t n);

/* ---- ops the callers ran as host loops ---- */
/* y[i] = s·x[i] (y may alias x) */
void af_vk_scale(af_vk_dev *d, float *y, const float *x, float s, int64_t n);
/* y[t, j] += b[j] for y [n, dim] */
void af_vk_bias_add(af_vk_dev *d, float *y, const float *b, int64_t n, int64_t dim);
/* x[n, dim] = rows tokens[t] of the weight w [rows, dim] (stored as `type`), dequantized, times
 * scale when scale != 1 (af_tf_embed with af_weight_row). tokens: [n] int32 (device), each in
 * [0, rows) (checked by the caller; a token outside leaves its row of x unwritten). */
void af_vk_embed(af_vk_dev *d, float *x, const void *w, uint32_t type, const int32_t *tokens, int64_t n, int64_t dim,
                 int64_t rows, float scale);
/* x[i] = cap·tanh(x[i]/cap) (the final logit soft-cap) */
void af_vk_softcap(af_vk_dev *d, float *x, int64_t n, float cap);
/* dst[j, :] = src[idx[j], :] (gather) or dst[idx[j], :] = src[j, :] (scatter; zeros when src is
 * NULL), rows of `width` floats, idx [k] int32 (device) */
void af_vk_gather_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width);
void af_vk_scatter_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width);
/* Number of non-finite values in x [n] (a synchronization point; -1 after a device failure). */
int64_t af_vk_count_nonfinite(af_vk_dev *d, const float *x, int64_t n);

/* ---- ops: lora.h ---- */
void af_vk_lora_forward(af_vk_dev *d, float *y, float *xa, const float *x, const float *drop_mask, const float *A,
                        const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale);
void af_vk_lora_backward(af_vk_dev *d, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x,
                         const float *xa, const float *drop_mask, const float *A, const float *B, int64_t n,
                         int64_t in, int64_t out, int32_t r, float scale);
void af_vk_lora_dropout_mask(af_vk_dev *d, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0,
                             int64_t n, int64_t in, float p);

/* ---- ops: head.h (seq_start, labels: int32, device) ---- */
void af_vk_pool_forward(af_vk_dev *d, float *pooled, const float *hidden, const int32_t *seq_start, int32_t B,
                        int64_t H, int pool);
void af_vk_pool_backward(af_vk_dev *d, float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B,
                         int64_t H, int pool);
void af_vk_head_forward(af_vk_dev *d, float *logits, const float *pooled, const float *W, const float *bias, int32_t B,
                        int64_t H, int32_t C);
void af_vk_head_backward(af_vk_dev *d, float *d_pooled, float *dW, float *dbias, const float *d_logits,
                         const float *pooled, const float *W, int32_t B, int64_t H, int32_t C);
/* Return the mean loss (synchronization points; NaN after a device failure). */
double af_vk_ce_loss(af_vk_dev *d, float *d_logits, float *probs, const float *logits, const int32_t *labels,
                     const float *class_w, int32_t B, int32_t C);
double af_vk_bce_loss(af_vk_dev *d, float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C);

/* ---- the LM-head loss rows (transformer.c lm_row over a chunk of logits) ----
 * z [k, V]: logits of k rows, in place: soft-capped (cap > 0), then with grad the gradient
 * grad_scale·(softmax − onehot)·softcap'. targets [k] int32 (device), each in [0, V).
 * loss [k] doubles (as 2·k floats of storage: double bits) = lse − z[target]; correct [k] int32 =
 * argmax (lowest index on ties) == target. Sum them with af_vk_sum_f64 or download them. */
void af_vk_lm_rows(af_vk_dev *d, float *z, int64_t V, const int32_t *targets, int64_t k, float cap, float grad_scale,
                   int grad, void *loss, int32_t *correct);
/* Σ of n doubles at x in index order into *out (host; a synchronization point). */
af_status af_vk_sum_f64(af_vk_dev *d, const void *x, int64_t n, double *out);

/* ---- ops: optim.h ----
 * AdamW over P, G, M, V [n] (device); decay_mask [n] bytes (device) or NULL. The scalar factors
 * are formed on the host exactly as af_adamw_step does; o->t is incremented. o: host. */
void af_vk_adamw_step(af_vk_dev *d, int64_t *t, float beta1, float beta2, float eps, float weight_decay, float *P,
                      const float *G, float *M, float *V, int64_t n, float lr, const uint8_t *decay_mask);
/* af_clip_grad_norm: the global L2 norm of G (a synchronization point) and G scaled on the device
 * when it exceeds max_norm. NaN after a device failure. */
double af_vk_clip_grad_norm(af_vk_dev *d, float *G, int64_t n, double max_norm);

#endif /* AF_KERNELS_VK_H */
