/*
 * vk_ops.h — what the op files of the Vulkan backend share (vk_matmul.c, vk_ops.c, vk_train.c):
 * the general product and the lock-free forms of the public ops (called with the device lock held,
 * by composite ops such as LoRA's).
 */
#ifndef AF_VK_OPS_H
#define AF_VK_OPS_H

#include "kernels/vulkan/vk_internal.h"

/* C[M, N] (+)= A'(M, K)·B'(K, N) (mm.comp): A(m, k) = a[m·sam + k·sak]; B by mode: 0 weight rows
 * B(k, n) = W[n][k], 1 B(k, n) = W[k][n] (W of `type`, rows sbk bytes apart), 2 dense b[k·sbk + n·sbn].
 * A' = (A ⊙ am)·alpha_a, B' = (B ⊙ bm)·alpha_b (mode 2), product ·alpha_c ⊙ cm (am, bm, cm optional,
 * laid out like A, B, C). Split into pieces that fit the buffer windows. */
typedef struct vk_mm {
    float *c;
    const float *a;
    const void *b;
    const float *am, *bm, *cm;
    uint32_t type;
    int mode, accumulate;
    int64_t M, N, K, sam, sak, sbk, sbn, ldc;
    float alpha_a, alpha_b, alpha_c;
} vk_mm;
void vk_mm_run(af_vk_dev *d, const char *op, const vk_mm *c);

/* y = (alpha·x)·Wᵀ (+ y): the decode product for n <= 8 rows, else the tiled GEMM. */
void vk_matmul_xwt(af_vk_dev *d, const char *op, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                   int64_t in, int64_t out, int accumulate, float alpha);
void vk_matmul_dyw(af_vk_dev *d, const char *op, float *dx, const float *dy, const void *w, uint32_t type, int64_t n,
                   int64_t in, int64_t out, int accumulate);

/* ew.comp ops (split over buffer windows): y, y2 outputs, a, b, c inputs, n elements, scalar s. */
enum { VK_EW_EXP = 0, VK_EW_SWIGLU, VK_EW_SWIGLU_BWD, VK_EW_GEGLU, VK_EW_GEGLU_BWD, VK_EW_ADD, VK_EW_SCALE,
       VK_EW_SOFTCAP, VK_EW_MUL, VK_EW_AXPY };
void vk_ew(af_vk_dev *d, const char *op, int kind, float *y, float *y2, const float *a, const float *b, const float *c,
           int64_t n, float s);

/* Σ x² over x [n] in acc_t (reduce.comp partials summed on the host in order): a synchronization
 * point; NaN after a failure. */
double vk_sumsq(af_vk_dev *d, const char *op, const float *x, int64_t n);

#endif /* AF_VK_OPS_H */
