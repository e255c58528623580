/*
 * kernels.h — the CPU dispatch table: one af_kernels per ISA (scalar, AVX2+FMA, AVX-512) holding
 * every ISA-specific function of src/kernels/cpu, grouped by the file that implements them.
 * af_ctx_new picks one table (af_kernels_for) when the context is created; the kernels reach it
 * as ctx->k at every call and never test the ISA themselves. Results per table are those of the
 * per-file kernels documented where they are defined.
 */
#ifndef AF_KERNELS_CPU_KERNELS_H
#define AF_KERNELS_CPU_KERNELS_H

#include "core/core.h"
#include "kernels/cpu/matmul_internal.h"

struct af_gp_i8_ops;

#include <stdint.h>

/* gemm_packed_avx512.c: bf16 operands of the packed GEMM (see gemm_packed.h for the layouts). */
typedef struct af_gp_bf16_ops {
    void (*tpack)(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd);
    void (*pair_rows)(const float *lo, const float *hi, uint32_t *dst, int64_t n);
    void (*ukernel)(int mr, int64_t kp, const uint32_t *ap, const uint32_t *bp, float *c, int64_t ldc, int nr,
                    int accumulate);
    void (*pair_cols)(const float *src, int64_t s, int64_t kp, int64_t nrow, uint32_t *dst);
    /* gemm_amx.c, NULL without AMX: rows of A as bf16 pairs, and the 32 x 32 tile micro-kernel */
    void (*amx_pack_a)(const float *a, int64_t sat, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst, int64_t lda);
    void (*amx_pack_at)(const float *a, int64_t sak, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst, int64_t lda);
    void (*amx_ukernel)(int mr, int64_t kp, const uint32_t *ap, int64_t lda, const uint32_t *bp, float *c,
                        int64_t ldc, int nr, int accumulate, int *tilecfg);
} af_gp_bf16_ops;

/* ops.c: per-row / per-chunk pieces of RMSNorm, RoPE, exp and SwiGLU (contracts in ops.c). */
typedef struct af_ops_rows {
    double (*dsum)(const float *a, const float *b, int64_t n);
    double (*dsum3)(const float *w, const float *dy, const float *x, int64_t n);
    void (*rms_scale)(float *y, const float *x, const float *w, float r, int64_t n);
    void (*rms_bwd_row)(float *dx, const float *dy, const float *x, const float *w, float r, float c, int64_t n);
    void (*rope_rot)(float *xt, const float *C, const float *S, int64_t nh, int64_t hd, int64_t i0, int64_t ni,
                     int neox);
    void (*vexp)(float *y, const float *x, int64_t n);
    void (*swiglu_fwd)(float *h, const float *gate, const float *up, int64_t n);
    void (*swiglu_bwd)(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up, int64_t n);
} af_ops_rows;

/* ops.c: GeGLU (tanh) forward / backward (adds into d_gate, d_up) of one contiguous range, the
 * per-element arithmetic of af_geglu_forward / af_geglu_backward (scalar on every path). */
void af_geglu_span_fwd(float *h, const float *gate, const float *up, int64_t n);
void af_geglu_span_bwd(float *d_gate, float *d_up, const float *dh, const float *gate, const float *up, int64_t n);

/* mlp_ops.c: how many af_mlp_gate_up / af_mlp_down_back calls ran fused so far, in this process
 * (tests: the fused path was taken). */
int64_t af_mlp_fused_calls(void);

/* lora_ops.c: af_proj_lora_forward / af_proj_lora_backward (kernels/train_ops.h) with the caller's
 * epilogue `then` (gemm_packed.h af_gp_fused: rows x columns of y / dx, final with the correction)
 * on each block, where the correction runs in the frozen product's epilogue (bf16 on AMX tiles;
 * backward: no mask, dx not accumulated, the side product for t, and dA formed after the product, so
 * `then` may write x). false: nothing done (y / dx and the gradients not written); the caller runs
 * the op and its own pass. */
struct af_gp_fused;
/* lora_ops.c: frees the calling thread's buffer of the LoRA backward (af_kernels_thread_release). */
void af_lora_ops_release(void);
bool af_proj_lora_forward_then(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                               const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                               int64_t out, int32_t r, float scale, const struct af_gp_fused *then);
bool af_proj_lora_backward_then(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                                const float *x, const float *xa, const float *drop_mask, const void *w, uint32_t type,
                                const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r,
                                float scale, const struct af_gp_fused *then);

/* ops_attention.c: the row-kernel attention passes, instantiated per ISA (args: ops_attention.c). */
struct af_att_fwd_args;
struct af_att_bwd_args;
typedef struct af_att_rows {
    /* items over ctx's pool (par: all its threads, else the caller alone) */
    void (*fwd)(const struct af_ctx *ctx, const struct af_att_fwd_args *a, int64_t items, int par);
    void (*bwd)(const struct af_ctx *ctx, const struct af_att_bwd_args *a, int par);
} af_att_rows;

/* attention_gemm.c: softmax / gradient rows of the blocked attention (contracts there). */
typedef struct af_ag_rows {
    float (*softmax_row)(float *s, int64_t nc, int64_t lo, int64_t hi, float scale);
    void (*grad_row)(float *s, float *d, int64_t nc, int64_t lo, int64_t hi, float scale, float L, float D);
    float (*dot_row)(const float *a, const float *b, int64_t n);
} af_ag_rows;

typedef struct af_kernels {
    const char *name;               /* "scalar", "avx2", "avx512" */
    af_kpath path;
    const af_mm_ops *mm;            /* matmul.c drivers' kernels + packed-GEMM f32 micro-kernel */
    const af_gp_bf16_ops *gp_bf16;  /* NULL: no bf16 products on this path */
    const af_ops_rows *ops;
    const af_att_rows *att;
    const af_ag_rows *ag;           /* NULL: no blocked attention on this path */
    const struct af_gp_i8_ops *gp_i8; /* NULL: no int8 frozen products (gemm_int8.h; AVX512_VNNI) */
} af_kernels;

/* The table of `path` (scalar when this build has no such path); for avx512, the variant with
 * or without AVX512_VNNI int8 decode, from the CPU's features. */
const af_kernels *af_kernels_for(af_kpath path);

/* Frees the grow-only thread-local buffers the kernels keep on the calling thread (packed GEMM B
 * panels, blocked-attention scores); the worker pool calls it as each worker ends (core/threadpool.h). */
void af_kernels_thread_release(void);

/* Per-file parts of the tables (defined beside their kernels). */
extern const af_mm_ops af_mm_ops_scalar;
extern const af_ops_rows af_ops_rows_scalar;
extern const af_att_rows af_att_rows_scalar;
#if defined(__x86_64__)
extern const af_mm_ops af_mm_ops_avx2, af_mm_ops_avx512, af_mm_ops_avx512_novnni;
extern const af_ops_rows af_ops_rows_avx2, af_ops_rows_avx512;
extern const af_att_rows af_att_rows_avx2, af_att_rows_avx512;
extern const af_ag_rows af_ag_rows_avx2, af_ag_rows_avx512;
extern const af_gp_bf16_ops af_gp_bf16_ops_avx512, af_gp_bf16_ops_amx;
extern const struct af_gp_i8_ops af_gp_i8_ops_avx512, af_gp_i8_ops_amx;
#endif

#endif /* AF_KERNELS_CPU_KERNELS_H */
