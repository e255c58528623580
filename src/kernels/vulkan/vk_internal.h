/*
 * vk_internal.h — the Vulkan backend's device object and the helpers its op files share:
 * memory (the reserved address range, allocations split into buffer windows), the command
 * stream (frames, barriers, descriptors, pipelines) and the sticky error. Only
 * the .c files of src/kernels/vulkan include it. The public side is kernels/vulkan/vk.h.
 *
 * Memory model (docs/VULKAN.md §2): the device reserves a range of host address space with
 * PROT_NONE (nothing is ever mapped there, so a host dereference of a device pointer faults at
 * once). Every allocation gets a sub-range of it, 64 KiB aligned; a pointer p inside an allocation
 * stands for the byte (p − base) of that allocation, so pointer arithmetic works as on the host.
 * An allocation is backed by one or more VkDeviceMemory objects (each <= maxMemoryAllocationSize),
 * and each memory object by VkBuffer *windows* of R = min(maxStorageBufferRange, the test hook)
 * bytes starting every S = R/2 bytes: any span of at most S bytes lies inside one window, so an
 * op argument of up to S bytes is always bindable; ops that can be split (products by weight rows,
 * element-wise ops) split longer arguments themselves.
 */
#ifndef AF_VK_INTERNAL_H
#define AF_VK_INTERNAL_H

#include "kernels/vulkan/vk.h"
#include "kernels/vulkan/vk_loader.h"
#include <vk_shader_ids.h> /* generated in $(BUILD)/gen by scripts/vk_shaders.sh: AF_VKS_* ids of the embedded SPIR-V */

#include "core/core.h"

#include <pthread.h>
#include <stdint.h>

#define VK_NBIND 8           /* storage-buffer bindings of the one descriptor set layout */
#define VK_PUSH_BYTES 128    /* push constants of every pipeline: uint off[8] + op fields */
#define VK_MM_SMALL_BELOW 1024 /* see af_vk_dev.mm_small_below */
#define VK_PROF_OPS 48     /* (shader, operation) pairs the profiler tells apart */
#define VK_NSPEC 8           /* specialization constants (constant_id 0..7) of every pipeline */
#define VK_NFRAMES 2         /* command streams in flight (one recording, one executing) */
#define VK_ADDR_ALIGN 65536u /* alignment of allocations in the reserved range */
#define VK_STAGING_BYTES (8u << 20) /* per-frame host-visible staging for recorded uploads */
#define VK_MAX_DISPATCH 4096 /* dispatches per frame before it is submitted without waiting */

typedef struct vk_mem {
    VkDeviceMemory mem;
    uint64_t off, size; /* the bytes [off, off+size) of the allocation it backs */
    void *map;          /* persistent mapping when host-visible, else NULL */
} vk_mem;

typedef struct vk_win {
    VkBuffer buf;
    uint64_t off, size; /* bytes of the allocation the window covers */
    int mem;            /* index of its memory object */
} vk_win;

typedef struct vk_alloc {
    uintptr_t addr;    /* first byte in the reserved range */
    uint64_t size;     /* bytes asked for, rounded up to 256 */
    uint64_t req;      /* bytes asked for */
    uint64_t span;     /* address space taken (multiple of VK_ADDR_ALIGN) */
    int nmem, nwin;
    vk_mem *mems;
    vk_win *wins;
    uint64_t stride;   /* window stride S of this allocation (windows j cover [j·S, j·S + R) per memory) */
    int host_visible;  /* every memory object mapped */
} vk_alloc;

/* A host-visible staging buffer (one per frame; grown on demand for downloads). */
typedef struct vk_staging {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
    uint64_t size, used;
    int coherent;
} vk_staging;

typedef struct vk_range {
    uintptr_t a, b; /* [a, b) in the reserved range */
} vk_range;

typedef struct vk_frame {
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    int recording, submitted;
    uint32_t ndispatch;
    VkDescriptorPool *dpools;
    int ndpool, dpool_cur;
    vk_staging st;
    vk_alloc **defer; /* allocations freed while this frame could use them: released when it completes */
    int ndefer, capdefer;
    /* the last descriptor set written in this frame, reused when the next dispatch binds the same buffers */
    VkDescriptorSet last_set;
    VkBuffer last_bufs[VK_NBIND];
    VkPipeline last_pipe; /* bound pipeline */
    /* profiler (vk_prof.c): timestamp queries of this frame and the shader of each (-1: a transfer) */
    VkQueryPool qpool;
    int *qtag;
    const char **qop; /* the operation of each query (a static string; NULL: a transfer) */
    uint32_t nq;
} vk_frame;

typedef struct vk_pipe {
    uint32_t shader;
    uint32_t spec[VK_NSPEC];
    uint32_t sg_size; /* required subgroup size it was created with (subgroup shaders; 0: none) */
    VkPipeline pipe; /* VK_NULL_HANDLE: creation failed (the error was reported) */
} vk_pipe;

struct af_vk_dev {
    pthread_mutex_t mu;
    int index;
    af_vk_info info;
    af_vk_fns f;
    af_vk_dfns v;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties memprops;
    uint32_t mt_device, mt_host;   /* memory type indices: device-local, host-visible staging */
    int device_host_visible;       /* the device-local type is host-visible (lavapipe, UMA) */
    int mt_host_coherent;
    uint64_t n_submit;             /* queue submissions so far (af_vk_submissions) */
    /* profiler ($AF_VULKAN_PROFILE, vk_prof.c): totals per shader id, [af_vk_nshaders] = transfers */
    int prof;
    uint64_t prof_mask, prof_frames;
    float prof_period; /* ns per timestamp tick */
    double *prof_ns;
    uint64_t *prof_n;
    /* totals per (shader, operation) pair, the first VK_PROF_OPS pairs seen (the product shaders
     * serve a dozen operations: matmul_xwt, gemm_atb, the LoRA products...) */
    struct vk_prof_op { int shader; const char *op; double ns; uint64_t n; } prof_op[VK_PROF_OPS];
    int prof_nop;
    uint64_t max_range;            /* maxStorageBufferRange (rounded down to 256) */
    uint64_t max_alloc;            /* maxMemoryAllocationSize */
    uint64_t buf_align;            /* alignment of buffer memory offsets */
    uint64_t min_sb_align;         /* minStorageBufferOffsetAlignment (offsets we bind are 0) */
    int fp64, int64, fp16, subgroup_arith;
    uint32_t subgroup_size;
    uint64_t mm_small_below;       /* products whose 64-tile grid has fewer workgroups take the 32-tile
                                      shader (mm_s): VK_MM_SMALL_BELOW on GPUs, 0 on CPU devices */
    uint32_t sg_required;          /* required subgroup size of the subgroup shaders (0: the driver's) */
    /* feature switches (hooks): what the shaders may use; start as the device's features */
    int use_fp64, use_subgroup, use_fp16;
    int force_staging;             /* hook: never write device memory through a mapping */
    uint64_t hook_range;           /* hook: per-buffer window limit (0: the device's) */
    /* the reserved address range */
    char *va;
    uint64_t va_size;
    vk_alloc **allocs; /* sorted by addr */
    int nalloc, capalloc;
    uint64_t bytes_alloc;
    /* command stream */
    vk_frame fr[VK_NFRAMES];
    int cur; /* recording frame */
    vk_range *pend_w, *pend_r; /* ranges written / read since the last barrier */
    int npend_w, npend_r, cappend_w, cappend_r;
    /* pipelines */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipelineCache pcache;
    char pcache_path[512];
    VkShaderModule *modules; /* [af_vk_nshaders], created on first use */
    vk_pipe *pipes;
    int npipe, cappipe;
    VkBuffer dummy;          /* bound to unused bindings */
    vk_alloc *dummy_alloc;
    /* internal device scratch (attention's D, reductions) and cached constant tables */
    void *scratch;
    uint64_t scratch_size;
    struct vk_rope_tab { int hd; float base; const float *ff; void *p; } rope[8];
    int nrope;
    /* errors */
    af_status err;
    char errmsg[768];
    int lost;
    const char *last_op;
    int fault[AF_VK_FAULT_COUNT];
    char note[700]; /* af_vk_dev_note */
    void (*on_fail)(void *owner, af_status st, const char *msg); /* af_vk_set_owner */
    void *owner;
};

/* ---- errors (vk_device.c) ----
 * Record the first failure of the device (sticky: later ops do nothing, the next synchronization
 * point returns it). The message is prefixed with "vulkan:N (name): ". */
void vk_fail(af_vk_dev *d, af_status st, const char *fmt, ...) AF_PRINTF(3, 4);
/* A failed Vulkan call during `what`: the message names the call's VkResult; DEVICE_LOST marks
 * the device lost, OUT_OF_*_MEMORY gives AF_ERR_NOMEM. */
void vk_fail_vk(af_vk_dev *d, VkResult r, const char *what, const char *call);
/* The sticky error as a status with its message set for this thread (AF_OK when none). */
af_status vk_status(af_vk_dev *d);

/* ---- memory (vk_mem.c) ---- */
/* The allocation holding address p, or NULL. */
vk_alloc *vk_find(af_vk_dev *d, const void *p);
/* Bytes from p to the end of the window holding p that reaches furthest (0 if p is not device memory). */
uint64_t vk_fit(af_vk_dev *d, const void *p);
/* The window holding [p, p+bytes): buffer and byte offset in it. 0 on success, -1 when p is not
 * device memory, -2 when the span crosses every window (longer than the window stride). */
int vk_resolve(af_vk_dev *d, const void *p, uint64_t bytes, VkBuffer *buf, uint64_t *off);
/* Reserve the address range and learn the buffer alignment (device open). -1 on failure (reported). */
int vk_mem_init(af_vk_dev *d);
/* Free every allocation (device close). */
void vk_mem_release_all(af_vk_dev *d);
void vk_alloc_destroy(af_vk_dev *d, vk_alloc *a);
/* An allocation for the backend's own use (lock held); NULL after a failure (sticky). */
void *vk_alloc_internal(af_vk_dev *d, uint64_t bytes);
/* Remove an allocation from the table and release it once queued work is done. */
void vk_unplace_free(af_vk_dev *d, vk_alloc *a);
/* Drops the cached RoPE tables made from a freq_factors vector inside [lo, hi) (lock held). */
void vk_rope_forget(af_vk_dev *d, uintptr_t lo, uintptr_t hi);
/* af_vk_download with the lock held (a synchronization point). */
af_status vk_download_locked(af_vk_dev *d, void *dst, const void *src, uint64_t bytes);
/* Internal grow-only scratch of at least `bytes` (device memory); NULL after a failure (reported). */
void *vk_scratch(af_vk_dev *d, uint64_t bytes);
int vk_staging_make(af_vk_dev *d, vk_staging *s, uint64_t size);
void vk_staging_free(af_vk_dev *d, vk_staging *s);

/* ---- command stream (vk_exec.c) ---- */
typedef struct vk_arg {
    const void *p;  /* device pointer; NULL: an absent optional argument (a dummy buffer is bound) */
    uint64_t bytes; /* extent read/written from p */
    int write;      /* 1: written (or read and written) */
} vk_arg;

/* Record one dispatch of `shader` with specialization constants spec[0..7] (NULL: all 0).
 * Argument i is bound at binding i; push[0..7] (uint32) are overwritten with the arguments' byte
 * offsets inside their bound buffers (0xFFFFFFFF for an absent one); the op's own fields follow.
 * Inserts a barrier when an argument overlaps what an earlier dispatch since the last barrier wrote
 * (or writes what it read). `op` names the operation in error messages. Does nothing once the
 * device has failed. */
void vk_dispatch(af_vk_dev *d, const char *op, int shader, const uint32_t *spec, const vk_arg *args, int nargs,
                 void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz);
/* Transfers recorded in the stream (ordered with the dispatches; hazards tracked the same way). */
void vk_cmd_copy(af_vk_dev *d, const char *op, void *dst, const void *src, uint64_t bytes);
void vk_cmd_fill(af_vk_dev *d, const char *op, void *dst, uint32_t pattern, uint64_t bytes);
/* Copy host bytes into device memory at dst, ordered after everything recorded so far. */
void vk_cmd_upload(af_vk_dev *d, const char *op, void *dst, const void *src, uint64_t bytes);
/* The staging buffer of the recording frame (begun if needed) and in *off where `want` bytes are free
 * in it (256-aligned, after what the frame's recorded uploads use): when they do not fit, the frame
 * is submitted first (without waiting) and a fresh one gives its whole buffer (*off = 0; `want` may
 * exceed its size: the caller then takes what fits). So a read-back of a result lands in the same
 * command buffer as the work that computes it: one submission. NULL after a failure. */
vk_staging *vk_frame_staging(af_vk_dev *d, uint64_t want, uint64_t *off);
/* Record a copy of n bytes from (b, off) into staging s at s_off, made visible to the host. */
void vk_record_to_host(af_vk_dev *d, VkBuffer b, uint64_t off, vk_staging *s, uint64_t s_off, uint64_t n);
/* The profiler (vk_prof.c; $AF_VULKAN_PROFILE=1 at open): init after the frames exist (0, or -1 with
 * the error set), begin after a frame's opening barrier, mark after each recorded command (tag: the
 * shader id, -1 a transfer), collect when the frame's fence was waited for, release (prints the
 * table on stderr) before the frames go. All are no-ops when profiling is off. */
int vk_prof_init(af_vk_dev *d);
void vk_prof_begin(af_vk_dev *d, vk_frame *f);
void vk_prof_mark(af_vk_dev *d, vk_frame *f, int tag, const char *op);
void vk_prof_collect(af_vk_dev *d, vk_frame *f);
void vk_prof_release(af_vk_dev *d);
/* Submit the recording frame (if any) without waiting; `why` names the synchronization point. */
void vk_flush(af_vk_dev *d, const char *why);
/* Submit and wait for everything; releases deferred frees. Returns the sticky status. */
af_status vk_finish(af_vk_dev *d, const char *why);
/* 1 when no frame is recording or executing. */
int vk_idle(af_vk_dev *d);
/* Frame resources (device open/close). */
int vk_exec_init(af_vk_dev *d);
void vk_exec_release(af_vk_dev *d);
/* Defer the release of an allocation until the work that may use it has completed. */
void vk_defer_free(af_vk_dev *d, vk_alloc *a);

/* Dispatch helpers: ceil(n / k), and a 2-D grid for n groups (x <= 65535). */
static inline uint32_t vk_div(uint64_t n, uint64_t k) { return (uint32_t)((n + k - 1) / k); }
void vk_grid(uint64_t groups, uint32_t *gx, uint32_t *gy);

/* Pipelines (vk_exec.c): the pipeline of (shader, spec), created on first use through the
 * pipeline cache; VK_NULL_HANDLE after a failure (reported). */
VkPipeline vk_pipeline(af_vk_dev *d, const char *op, int shader, const uint32_t *spec);
/* The embedded shaders (generated, build/gen/vk_shaders.c). */
typedef struct af_vk_spirv {
    const char *name;
    const uint32_t *code;
    size_t words;
} af_vk_spirv;
extern const af_vk_spirv af_vk_shaders[];
extern const int af_vk_nshaders;
/* Pipeline cache file (vk_device.c): load at open, save at close. */
void vk_pcache_open(af_vk_dev *d);
void vk_pcache_save(af_vk_dev *d);

/* 1 (and the op fails, naming it) when one of the n pointers (NULL allowed) is not device memory. */
int vk_not_device(af_vk_dev *d, const char *op, int n, ...);
/* Argument checks of the ops: 1 when every size fits the shaders' 32-bit indexing, else the op fails. */
int vk_sizes_ok(af_vk_dev *d, const char *op, int n, const int64_t *v);

/* Enter/leave an op: lock, and 0 when the device has already failed (the op is skipped). */
int vk_enter(af_vk_dev *d, const char *op);
void vk_leave(af_vk_dev *d);

#endif /* AF_VK_INTERNAL_H */
