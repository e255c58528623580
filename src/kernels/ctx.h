/*
 * ctx.h — the af_ctx object (public opaque type of afinar.h) as the kernels see it: every
 * run-time setting of the compute kernels, fixed when the context is created and read at every
 * call. Kernel entry points take `const af_ctx *ctx` as their first argument.
 * Implementation: src/kernels/ctx.c.
 *
 * The context owns the worker pool (core/threadpool.h) that every parallel loop of the compute path runs
 * on: kernels call af_threadpool_run(ctx->pool, nth, ...) with nth = ctx->n_threads or 1 (small ops).
 */
#ifndef AF_KERNELS_CTX_H
#define AF_KERNELS_CTX_H

#include "afinar.h"
#include "core/core.h"
#include "core/threadpool.h"

struct af_kernels; /* kernels/cpu/kernels.h: the table of ISA variants */
struct af_backend; /* kernels/backend.h: the ops table of the context's device */
struct af_device;  /* kernels/backend.h: the open device (shared by the contexts on it) */

struct af_ctx {
    int n_threads;                /* >= 1: threads of every parallel loop (the pool's size) */
    struct af_threadpool *pool;         /* owned; workers started at the first parallel loop */
    af_kpath path;                /* kernel path of `k` */
    const struct af_kernels *k;   /* ISA variants of every kernel, chosen at creation */
    const struct af_backend *be;  /* the device's ops table (kernels/backend.h af_be); never NULL */
    struct af_device *dev;        /* the device (held: af_device_acquire / release); never NULL */
    int device_auto;              /* 1: made with device "auto": a device failure may fall back to the CPU */
    char device_spec[32];         /* af_ctx_params.device as given ("cpu" when NULL) */
    char device_id[40];           /* the device: "cpu", "vulkan:0", "guard" (af_ctx_device) */
    int bf16;                     /* 1: packed-GEMM products with bf16 operands (k has them) */
    int i8;                       /* 1: the frozen weights' products in int8 (gemm_int8.h; k has gp_i8) */
    int int8_act;                 /* 1: int8 activations in decode products */
    uint32_t quantize;            /* af_model_load requantizes projections to this af_type (NF4, Q8_0,
                                   * F16, BF16); AF_TYPE_F32: keep them as stored */
    /* test and benchmark hooks (af_ctx_set_hook), on by default: */
    int fused_decode;             /* 0: f32 decode through the dequant + dot fallback */
    int att_gemm;                 /* 0: attention of training sequences on the row kernels */
    int mlp_fused;                /* 0: the MLP ops of train_ops.h run their unfused sequence */
    int decode_groups;            /* 0: af_matmul_xwt_parts runs each product as its own call */
    int int8_roles;               /* with int8_act: the product classes that take int8 activations
                                   * (AF_INT8_* bits; default AF_INT8_ALL), the others exact f32 */
    size_t gp_max_b;              /* bytes of the largest packed B of gemm_packed.c; 0: its MAX_B
                                   * (64 MiB). Tests lower it (af_gp_set_max_b) */
    volatile int *interrupt;      /* af_ctx_set_interrupt (NULL: none) */
    char desc[256];               /* af_ctx_describe */
};

/* The process default context (af_model_load with a NULL ctx): auto path, all threads, f32.
 * Created at first use (thread-safe), never freed. NULL only when it cannot be allocated. */
const af_ctx *af_ctx_default(void);

/* Tests and benchmarks only: switch a hook of a context that no kernel is using. */
typedef enum af_ctx_hook { AF_CTX_FUSED_DECODE, AF_CTX_ATT_GEMM, AF_CTX_MLP_FUSED, AF_CTX_DECODE_GROUPS } af_ctx_hook;
void af_ctx_set_hook(af_ctx *ctx, af_ctx_hook hook, int on);

/* Product classes of a decode step (bits of ctx->int8_roles): which products take int8
 * activations when the context has int8_act on (mixed-precision decode, measured by
 * bench/decode_agree.c). The walk marks the other products exact (af_mm_part.exact). */
enum {
    AF_INT8_QKV = 1,    /* q, k, v projections */
    AF_INT8_O = 2,      /* attention output projection */
    AF_INT8_GATEUP = 4, /* MLP gate and up */
    AF_INT8_DOWN = 8,   /* MLP down */
    AF_INT8_HEAD = 16,  /* LM head */
    AF_INT8_OTHER = 32, /* every other product (per-layer inputs, DoRA) */
    AF_INT8_ALL = 63
};
/* Tests and benchmarks only: sets ctx->int8_roles (bits outside AF_INT8_ALL ignored) of a context no
 * kernel is using. */
void af_ctx_set_int8_roles(af_ctx *ctx, int roles);

#endif /* AF_KERNELS_CTX_H */
