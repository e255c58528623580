/* attention_gemm.h — causal GQA attention of a whole training sequence as blocked products on the
 * packed GEMM (attention_gemm.c). Used by ops_attention.c's af_attention_forward (when an lse is
 * requested, i.e. training) and af_attention_backward when af_att_gemm_usable(). */
#ifndef AF_ATTENTION_GEMM_H
#define AF_ATTENTION_GEMM_H

#include "afinar.h"

#include <stdbool.h>
#include <stdint.h>

/* True on ctx's AVX-512 and AVX2 paths (kernel tables with af_ag_rows), unless ctx's hook
 * AF_CTX_ATT_GEMM is off (tests and benchmarks: the row kernels then run), for q_pos0 == 0, n_q == n_kv >= 32, head_dim >= 16, n_heads a multiple
 * of n_kv_heads, and P + dS of one kv group ([n_heads/n_kv_heads, n_q, n_kv] f32 each) <= 256 MiB. */
/* Frees the calling thread's score buffers (grow-only, kept between calls). */
void af_att_gemm_release(void);

bool af_att_gemm_usable(const af_ctx *ctx,
                        int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                        int64_t hd);

/* af_attention_forward (ops.h) for q_pos0 = 0, n_q = n_kv; lse may be NULL. Returns false (nothing
 * written) when its scratch (threads x 64 x n_kv floats) cannot be allocated. */
bool af_att_gemm_forward(const af_ctx *ctx,
                         float *out, float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                         int64_t n_kv, int64_t kv_stride, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         float scale, int64_t window);

/* af_attention_backward (ops.h) for q_pos0 = 0, n_q = n_kv (gradients added into dq, dk, dv).
 * Returns false (nothing written) when its P/dS buffers cannot be allocated. */
bool af_att_gemm_backward(const af_ctx *ctx,
                          float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int64_t n_q, int64_t n_kv,
                          int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, int64_t window);

#endif
