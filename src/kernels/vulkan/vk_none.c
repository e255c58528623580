/*
 * vk_none.c — the Vulkan backend's entry points in a build without Vulkan (the Makefile found no
 * Vulkan headers or glslc, or VULKAN=0 was given): enumeration and opening say so; no device can
 * exist, so the other functions are never reached with one and do nothing.
 */
#include "kernels/vulkan/vk.h"

#include "core/core.h"

#include <math.h>

int af_vk_built(void) { return 0; }

af_status af_vk_enumerate(af_vk_info *out, int cap, int *n) {
    (void)out, (void)cap;
    *n = 0;
    return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: this afinar was built without Vulkan (install libvulkan-dev and glslc "
                                       "and rebuild: the build prints 'Vulkan ✓')");
}

af_status af_vk_open(int index, af_vk_dev **out) {
    int n;
    (void)index;
    *out = NULL;
    return af_vk_enumerate(NULL, 0, &n);
}

void af_vk_close(af_vk_dev *d) {}
const af_vk_info *af_vk_dev_info(const af_vk_dev *d) { return NULL; }
const char *af_vk_dev_name(const af_vk_dev *d) { return "vulkan (not built in)"; }
const char *af_vk_dev_note(const af_vk_dev *d) { return "vulkan (not built in)"; }
void *af_vk_alloc(af_vk_dev *d, size_t bytes) { return NULL; }
void af_vk_free(af_vk_dev *d, void *p) {}
int af_vk_owns(af_vk_dev *d, const void *p) { return 0; }
af_status af_vk_upload(af_vk_dev *d, void *dst, const void *src, size_t bytes) { return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: not built in"); }
af_status af_vk_download(af_vk_dev *d, void *dst, const void *src, size_t bytes) { return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: not built in"); }
void af_vk_copy(af_vk_dev *d, void *dst, const void *src, size_t bytes) {}
void af_vk_fill(af_vk_dev *d, void *dst, uint32_t pattern, size_t bytes) {}
af_status af_vk_sync(af_vk_dev *d) { return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: not built in"); }
void af_vk_meminfo(af_vk_dev *d, uint64_t *used, uint64_t *total) {}
int af_vk_set_hook(af_vk_dev *d, af_vk_hook h, uint64_t value) { return 0; }
void af_vk_fault_arm(af_vk_dev *d, int kind, int n) {}
int af_vk_pick_memory(const af_vk_memtype *t, int n, int device_type, af_vk_mempick *out) { return -1; }
uint64_t af_vk_submissions(af_vk_dev *d) { return 0; }
size_t af_vk_profile_text(af_vk_dev *d, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    return 0;
}
uint32_t af_vk_pick_subgroup_size(uint32_t min_size, uint32_t max_size) { return 0; }
void af_vk_matmul_xwt(af_vk_dev *d, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in, int64_t out, int accumulate) {}
void af_vk_matmul_dyw(af_vk_dev *d, float *dx, const float *dy, const void *w, uint32_t type, int64_t n, int64_t in, int64_t out, int accumulate) {}
void af_vk_gemm_abt(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate) {}
void af_vk_gemm_ab(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate) {}
void af_vk_gemm_atb(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int accumulate) {}
int af_vk_type_supported(uint32_t type) { return 0; }
void af_vk_vexpf(af_vk_dev *d, float *y, const float *x, int64_t n) {}
void af_vk_rmsnorm_forward(af_vk_dev *d, float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim, float eps) {}
void af_vk_rmsnorm_backward(af_vk_dev *d, float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd, int64_t n, int64_t dim) {}
void af_vk_rope_forward(af_vk_dev *d, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, float base, int neox, const float *freq_factors) {}
void af_vk_rope_backward(af_vk_dev *d, float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, float base, int neox, const float *freq_factors) {}
void af_vk_swiglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n) {}
void af_vk_swiglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate, const float *up, int64_t n) {}
void af_vk_geglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n) {}
void af_vk_geglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate, const float *up, int64_t n) {}
void af_vk_attention_forward(af_vk_dev *d, float *out, float *lse, const float *q, const float *k, const float *v, int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window) {}
void af_vk_attention_backward(af_vk_dev *d, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window) {}
void af_vk_add(af_vk_dev *d, float *y, const float *a, const float *b, int64_t n) {}
void af_vk_softmax_rows(af_vk_dev *d, float *x, int64_t rows, int64_t n) {}
void af_vk_scale(af_vk_dev *d, float *y, const float *x, float s, int64_t n) {}
void af_vk_bias_add(af_vk_dev *d, float *y, const float *b, int64_t n, int64_t dim) {}
void af_vk_embed(af_vk_dev *d, float *x, const void *w, uint32_t type, const int32_t *tokens, int64_t n, int64_t dim, int64_t rows, float scale) {}
void af_vk_softcap(af_vk_dev *d, float *x, int64_t n, float cap) {}
void af_vk_gather_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width) {}
void af_vk_scatter_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width) {}
int64_t af_vk_count_nonfinite(af_vk_dev *d, const float *x, int64_t n) { return -1; }
void af_vk_lora_forward(af_vk_dev *d, float *y, float *xa, const float *x, const float *drop_mask, const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale) {}
void af_vk_lora_backward(af_vk_dev *d, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x, const float *xa, const float *drop_mask, const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale) {}
void af_vk_lora_dropout_mask(af_vk_dev *d, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0, int64_t n, int64_t in, float p) {}
void af_vk_pool_forward(af_vk_dev *d, float *pooled, const float *hidden, const int32_t *seq_start, int32_t B, int64_t H, int pool) {}
void af_vk_pool_backward(af_vk_dev *d, float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B, int64_t H, int pool) {}
void af_vk_head_forward(af_vk_dev *d, float *logits, const float *pooled, const float *W, const float *bias, int32_t B, int64_t H, int32_t C) {}
void af_vk_head_backward(af_vk_dev *d, float *d_pooled, float *dW, float *dbias, const float *d_logits, const float *pooled, const float *W, int32_t B, int64_t H, int32_t C) {}
double af_vk_ce_loss(af_vk_dev *d, float *d_logits, float *probs, const float *logits, const int32_t *labels, const float *class_w, int32_t B, int32_t C) { return NAN; }
double af_vk_bce_loss(af_vk_dev *d, float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C) { return NAN; }
void af_vk_lm_rows(af_vk_dev *d, float *z, int64_t V, const int32_t *targets, int64_t k, float cap, float grad_scale, int grad, void *loss, int32_t *correct) {}
af_status af_vk_sum_f64(af_vk_dev *d, const void *x, int64_t n, double *out) { return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: not built in"); }
void af_vk_adamw_step(af_vk_dev *d, int64_t *t, float beta1, float beta2, float eps, float weight_decay, float *P, const float *G, float *M, float *V, int64_t n, float lr, const uint8_t *decay_mask) {}
double af_vk_clip_grad_norm(af_vk_dev *d, float *G, int64_t n, double max_norm) { return NAN; }
void af_vk_set_owner(af_vk_dev *d, void (*on_fail)(void *owner, af_status st, const char *msg), void *owner) {}
af_status af_vk_status(af_vk_dev *d) { return AF_OK; }
void af_vk_lose(af_vk_dev *d, const char *op) {}
uint64_t af_vk_bytes_from(af_vk_dev *d, const void *p) { return 0; }
