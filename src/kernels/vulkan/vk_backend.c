/*
 * vk_backend.c — the Vulkan backend behind the backend table (kernels/backend.h): the registry
 * entry (enumerate, open, close: `--device vulkan[:N]`, `afinar devices`) and every entry of the
 * table mapped onto the ops of kernels/vulkan/vk.h, with the table's fault injection (AFINAR_FAULT
 * alloc=, lost=, nan=, mem=) at the points backend.h names. Device errors are forwarded to the
 * af_device (af_device_fail): AF_ERR_NOMEM stays, every other device failure is AF_ERR_DEVICE.
 */
#include "kernels/backend.h"

#include "core/blocks.h"
#include "core/core.h"
#include "kernels/quant.h"
#include "kernels/train_ops.h"
#include "kernels/vulkan/vk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static af_vk_dev *V(const af_ctx *ctx) { return (af_vk_dev *)ctx->dev->impl; }

/* The table's own fault point of every op: the device is lost here (AFINAR_FAULT lost=N). */
static int lost(const af_ctx *ctx, const char *op) {
    if (__atomic_load_n(&ctx->dev->err, __ATOMIC_ACQUIRE)) return 1;
    if (af_fault_op_lost()) {
        af_vk_lose(V(ctx), op);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- buffers */

static void *vb_alloc(const af_ctx *ctx, size_t bytes) {
    if (af_fault_alloc()) {
        af_fail(AF_ERR_NOMEM, "device %s: out of device memory for %.1f MiB (fault injection)", ctx->device_id,
                (double)bytes / 1048576.0);
        return NULL;
    }
    return af_vk_alloc(V(ctx), bytes);
}

static void vb_free(const af_ctx *ctx, void *p) { af_vk_free(V(ctx), p); }

/* Weights in their stored block format; a type without a shader (none today: every type
 * af_type_can_dequantize accepts has one) would be dequantized to F32 on the host first. */
static const void *vb_import_weight(const af_ctx *ctx, const void *host, uint32_t type, int64_t rows, int64_t cols,
                                    uint32_t *dev_type) {
    if (af_fault_alloc()) {
        af_fail(AF_ERR_NOMEM, "device %s: out of device memory for a weight [%lld, %lld] (fault injection)",
                ctx->device_id, (long long)rows, (long long)cols);
        return NULL;
    }
    af_vk_dev *d = V(ctx);
    uint32_t t = type;
    if (!af_vk_type_supported(type)) {
        if (!af_type_can_dequantize(type)) {
            af_fail(AF_ERR_UNSUPPORTED, "device %s: weight type %s cannot be used", ctx->device_id, af_type_name(type));
            return NULL;
        }
        t = AF_TYPE_F32;
    }
    const size_t rb = af_row_bytes(t, cols), bytes = rb * (size_t)rows;
    void *p = af_vk_alloc(d, bytes);
    if (!p) return NULL;
    af_status st = AF_OK;
    if (t == type)
        st = af_vk_upload(d, p, host, bytes);
    else { /* row by row through a host buffer */
        float *row = malloc(rb);
        const size_t hb = af_row_bytes(type, cols);
        if (!row) st = af_fail(AF_ERR_NOMEM, "out of host memory converting a weight");
        for (int64_t r = 0; r < rows && st == AF_OK; r++) {
            af_dequantize_row(type, (const char *)host + (size_t)r * hb, row, cols);
            st = af_vk_upload(d, (char *)p + (size_t)r * rb, row, rb);
        }
        free(row);
    }
    if (st != AF_OK) {
        af_vk_free(d, p);
        return NULL;
    }
    *dev_type = t;
    return p;
}

static void vb_release_weight(const af_ctx *ctx, const void *dev) { af_vk_free(V(ctx), (void *)(uintptr_t)dev); }

static af_status vb_upload(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (lost(ctx, "upload")) return af_device_status(ctx->dev);
    af_status st = af_vk_upload(V(ctx), dst, src, bytes);
    return st == AF_OK ? AF_OK : af_device_status(ctx->dev);
}

static af_status vb_download(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (lost(ctx, "download")) return af_device_status(ctx->dev);
    af_status st = af_vk_download(V(ctx), dst, src, bytes);
    return st == AF_OK ? AF_OK : af_device_status(ctx->dev);
}

static af_status vb_sync(const af_ctx *ctx) {
    af_vk_sync(V(ctx)); /* a failure is in ctx->dev already (forward_fail) */
    return af_device_status(ctx->dev);
}

static void vb_copy(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (!lost(ctx, "copy")) af_vk_copy(V(ctx), dst, src, bytes);
}

static void vb_fill(const af_ctx *ctx, float *x, float value, int64_t n) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    if (value == 0.0f) bits = 0; /* +0.0 for either zero */
    if (!lost(ctx, "fill")) af_vk_fill(V(ctx), x, bits, 4 * (size_t)n);
}

static void vb_memory(const af_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
    uint64_t used, total;
    af_vk_meminfo(V(ctx), &used, &total);
    const uint64_t cap = af_fault_mem();
    if (cap && cap < total) total = cap;
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
}

/* ---------------------------------------------------------------- products */

/* AFINAR_FAULT nan=N: the N-th product's output poisoned with NaN (a device computing garbage). */
static void poison(const af_ctx *ctx, float *y, int64_t n) {
    if (af_fault_matmul_nan()) af_vk_fill(V(ctx), y, 0x7fc00000u, 4 * (size_t)n);
}

static void vb_matmul_xwt(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                          int64_t in, int64_t out, int accumulate) {
    if (lost(ctx, "matmul_xwt")) return;
    af_vk_matmul_xwt(V(ctx), y, x, w, type, n, in, out, accumulate);
    poison(ctx, y, n * out);
}

static void vb_matmul_dyw(const af_ctx *ctx, float *dx, const float *dy, const void *w, uint32_t type, int64_t n,
                          int64_t in, int64_t out, int accumulate) {
    if (lost(ctx, "matmul_dyw")) return;
    af_vk_matmul_dyw(V(ctx), dx, dy, w, type, n, in, out, accumulate);
    poison(ctx, dx, n * in);
}

/* The training products: one call (the device needs no token blocks for its caches). */
/* The products one after the other (one queued dispatch each, as separate calls). */
static void vb_matmul_xwt_parts(const af_ctx *ctx, const af_mm_part *parts, int n_parts) {
    for (int i = 0; i < n_parts; i++)
        vb_matmul_xwt(ctx, parts[i].y, parts[i].x, parts[i].w, parts[i].type, parts[i].n, parts[i].in, parts[i].out, 0);
}

static void vb_matmul_rows(const af_ctx *ctx, int dyw, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                           int64_t in, int64_t out, int accumulate, int64_t block_rows) {
    (void)block_rows;
    if (lost(ctx, "matmul_rows")) return;
    if (dyw) af_vk_matmul_dyw(V(ctx), y, x, w, type, n, in, out, accumulate);
    else af_vk_matmul_xwt(V(ctx), y, x, w, type, n, in, out, accumulate);
    poison(ctx, y, n * (dyw ? in : out));
}

/* ---------------------------------------------------------------- the other ops: the device's, after the fault point */

#define VB(name, params, call)                                                                                 \
    static void vb_##name params {                                                                             \
        if (!lost(ctx, #name)) call;                                                                           \
    }
#define VBR(type, bad, name, params, call)                                                                     \
    static type vb_##name params {                                                                             \
        if (lost(ctx, #name)) return bad;                                                                      \
        return call;                                                                                           \
    }

VB(gemm_abt, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int acc),
   af_vk_gemm_abt(V(ctx), c, a, b, m, n, k, acc))
VB(gemm_ab, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int acc),
   af_vk_gemm_ab(V(ctx), c, a, b, m, n, k, acc))
VB(gemm_atb, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, int acc),
   af_vk_gemm_atb(V(ctx), c, a, b, m, n, k, acc))
VB(rmsnorm_forward, (const af_ctx *ctx, float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                     float eps), af_vk_rmsnorm_forward(V(ctx), y, rstd, x, w, n, dim, eps))
VB(rmsnorm_backward, (const af_ctx *ctx, float *dx, float *dw, const float *dy, const float *x, const float *w,
                      const float *rstd, int64_t n, int64_t dim), af_vk_rmsnorm_backward(V(ctx), dx, dw, dy, x, w, rstd, n, dim))
VB(rope_forward, (const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t nh, int64_t hd, float base,
                  int neox, const float *ff), af_vk_rope_forward(V(ctx), x, pos, n, nh, hd, base, neox, ff))
VB(rope_backward, (const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t nh, int64_t hd, float base,
                   int neox, const float *ff), af_vk_rope_backward(V(ctx), dx, pos, n, nh, hd, base, neox, ff))
VB(swiglu_forward, (const af_ctx *ctx, float *h, const float *g, const float *u, int64_t n),
   af_vk_swiglu_forward(V(ctx), h, g, u, n))
VB(swiglu_backward, (const af_ctx *ctx, float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n),
   af_vk_swiglu_backward(V(ctx), dg, du, dh, g, u, n))
VB(geglu_forward, (const af_ctx *ctx, float *h, const float *g, const float *u, int64_t n),
   af_vk_geglu_forward(V(ctx), h, g, u, n))
VB(geglu_backward, (const af_ctx *ctx, float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n),
   af_vk_geglu_backward(V(ctx), dg, du, dh, g, u, n))
VB(attention_forward, (const af_ctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                       int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t nh, int64_t nkv,
                       int64_t hd, float scale, int64_t window),
   af_vk_attention_forward(V(ctx), out, lse, q, k, v, n_q, q_pos0, n_kv, kv_stride, nh, nkv, hd, scale, window))
VB(attention_backward, (const af_ctx *ctx, float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, int64_t n_q, int64_t q_pos0,
                        int64_t n_kv, int64_t nh, int64_t nkv, int64_t hd, float scale, int64_t window),
   af_vk_attention_backward(V(ctx), dq, dk, dv, dout, out, lse, q, k, v, n_q, q_pos0, n_kv, nh, nkv, hd, scale, window))
VB(add, (const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n), af_vk_add(V(ctx), y, a, b, n))
VB(scale, (const af_ctx *ctx, float *x, float s, int64_t n), af_vk_scale(V(ctx), x, x, s, n))
VB(add_bias, (const af_ctx *ctx, float *y, const float *b, int64_t n, int64_t out), af_vk_bias_add(V(ctx), y, b, n, out))
VB(softcap, (const af_ctx *ctx, float *x, int64_t n, float c), af_vk_softcap(V(ctx), x, n, c))
VB(rows_gather, (const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W),
   af_vk_gather_rows(V(ctx), dst, src, idx, k, W))
VB(rows_scatter, (const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W),
   af_vk_scatter_rows(V(ctx), dst, src, idx, k, W))
VBR(int64_t, -1, count_nonfinite, (const af_ctx *ctx, const float *x, int64_t n), af_vk_count_nonfinite(V(ctx), x, n))
VB(lora_forward, (const af_ctx *ctx, float *y, float *xa, const float *x, const float *mask, const float *A,
                  const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float s),
   af_vk_lora_forward(V(ctx), y, xa, x, mask, A, B, n, in, out, r, s))
VB(lora_backward, (const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x,
                   const float *xa, const float *mask, const float *A, const float *B, int64_t n, int64_t in,
                   int64_t out, int32_t r, float s),
   af_vk_lora_backward(V(ctx), dx, dA, dB, tmp, dy, x, xa, mask, A, B, n, in, out, r, s))
VB(lora_dropout_mask, (const af_ctx *ctx, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0, int64_t n,
                       int64_t in, float p), af_vk_lora_dropout_mask(V(ctx), mask, seed, layer, proj, t0, n, in, p))
VB(pool_forward, (const af_ctx *ctx, float *pooled, const float *hidden, const int32_t *ss, int32_t B, int64_t H,
                  af_head_pooling pool), af_vk_pool_forward(V(ctx), pooled, hidden, ss, B, H, (int)pool))
VB(pool_backward, (const af_ctx *ctx, float *dh, const float *dp, const int32_t *ss, int32_t B, int64_t H,
                   af_head_pooling pool), af_vk_pool_backward(V(ctx), dh, dp, ss, B, H, (int)pool))
VB(head_forward, (const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias, int32_t B,
                  int64_t H, int32_t C), af_vk_head_forward(V(ctx), logits, pooled, W, bias, B, H, C))
VB(head_backward, (const af_ctx *ctx, float *dp, float *dW, float *db, const float *dl, const float *pooled,
                   const float *W, int32_t B, int64_t H, int32_t C),
   af_vk_head_backward(V(ctx), dp, dW, db, dl, pooled, W, B, H, C))
VBR(double, NAN, ce_loss, (const af_ctx *ctx, float *dl, float *probs, const float *logits, const int32_t *labels,
                           const float *cw, int32_t B, int32_t C),
    af_vk_ce_loss(V(ctx), dl, probs, logits, labels, cw, B, C))
VBR(double, NAN, bce_loss, (const af_ctx *ctx, float *dl, const float *logits, const float *targets, int32_t B, int32_t C),
    af_vk_bce_loss(V(ctx), dl, logits, targets, B, C))
VB(lm_ce_rows, (const af_ctx *ctx, float *z, const int32_t *tgt, int64_t k, int64_t Vn, float cap, float gs, int grad,
                double *loss, int32_t *correct), af_vk_lm_rows(V(ctx), z, Vn, tgt, k, cap, gs, grad, loss, correct))
VBR(double, NAN, clip_grad_norm, (const af_ctx *ctx, float *G, int64_t n, double max_norm),
    af_vk_clip_grad_norm(V(ctx), G, n, max_norm))

static void vb_embed(const af_ctx *ctx, float *x, const int32_t *tokens, int64_t n, const void *w, uint32_t type,
                     int64_t H, float scale) {
    if (lost(ctx, "embed")) return;
    const uint64_t rb = af_row_bytes(type, H);
    const int64_t rows = rb ? (int64_t)(af_vk_bytes_from(V(ctx), w) / rb) : 0; /* the imported matrix's rows */
    af_vk_embed(V(ctx), x, w, type, tokens, n, H, rows, scale);
}

static void vb_adamw_step(const af_ctx *ctx, af_adamw *o, float *P, const float *G, float *M, float *Vm, int64_t n,
                          float lr, const uint8_t *decay_mask) {
    if (lost(ctx, "adamw_step")) {
        o->t++; /* the step is counted as on every backend */
        return;
    }
    af_vk_adamw_step(V(ctx), &o->t, o->beta1, o->beta2, o->eps, o->weight_decay, P, G, M, Vm, n, lr, decay_mask);
}

static const af_backend vk_be = {
    .name = "vulkan",
    .alloc = vb_alloc,
    .free = vb_free,
    .import_weight = vb_import_weight,
    .release_weight = vb_release_weight,
    .upload = vb_upload,
    .download = vb_download,
    .copy = vb_copy,
    .fill = vb_fill,
    .sync = vb_sync,
    .memory = vb_memory,
    .matmul_xwt = vb_matmul_xwt,
    .matmul_dyw = vb_matmul_dyw,
    .matmul_xwt_parts = vb_matmul_xwt_parts,
    .matmul_rows = vb_matmul_rows,
    .gemm_abt = vb_gemm_abt,
    .gemm_ab = vb_gemm_ab,
    .gemm_atb = vb_gemm_atb,
    .rmsnorm_forward = vb_rmsnorm_forward,
    .rmsnorm_backward = vb_rmsnorm_backward,
    .rope_forward = vb_rope_forward,
    .rope_backward = vb_rope_backward,
    .swiglu_forward = vb_swiglu_forward,
    .swiglu_backward = vb_swiglu_backward,
    .geglu_forward = vb_geglu_forward,
    .geglu_backward = vb_geglu_backward,
    .attention_forward = vb_attention_forward,
    .attention_backward = vb_attention_backward,
    .add = vb_add,
    .scale = vb_scale,
    .add_bias = vb_add_bias,
    .embed = vb_embed,
    .softcap = vb_softcap,
    .rows_gather = vb_rows_gather,
    .rows_scatter = vb_rows_scatter,
    .count_nonfinite = vb_count_nonfinite,
    .lora_forward = vb_lora_forward,
    .lora_backward = vb_lora_backward,
    .lora_dropout_mask = vb_lora_dropout_mask,
    .pool_forward = vb_pool_forward,
    .pool_backward = vb_pool_backward,
    .head_forward = vb_head_forward,
    .head_backward = vb_head_backward,
    .ce_loss = vb_ce_loss,
    .bce_loss = vb_bce_loss,
    .lm_ce_rows = vb_lm_ce_rows,
    .adamw_step = vb_adamw_step,
    .clip_grad_norm = vb_clip_grad_norm,
};

/* ---------------------------------------------------------------- the registry entry */

static void to_info(const af_vk_info *v, int32_t index, af_device_info *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->backend, sizeof d->backend, "vulkan");
    d->index = index;
    snprintf(d->name, sizeof d->name, "%.127s", v->name);
    static const char *const kinds[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "software (CPU)"};
    snprintf(d->kind, sizeof d->kind, "%s", v->type >= 0 && v->type <= 4 ? kinds[v->type] : "other");
    snprintf(d->driver, sizeof d->driver, "%.100s (Vulkan %u.%u)", v->driver, (v->api_version >> 22) & 0x7F,
             (v->api_version >> 12) & 0x3FF);
    snprintf(d->features, sizeof d->features, "%s%s%s%s%s", v->fp16 ? "fp16 " : "", v->fp64 ? "fp64 " : "",
             v->int64 ? "int64 " : "", v->subgroup_arith ? "subgroup " : "",
             v->coopmat ? "coopmat(not used) " : "");
    size_t l = strlen(d->features);
    if (v->subgroup_arith && l + 48 < sizeof d->features) {
        if (v->subgroup_control)
            snprintf(d->features + l, sizeof d->features - l, "subgroup_size=%u (control %u-%u, used %u%s)",
                     v->subgroup_size, v->subgroup_min, v->subgroup_max,
                     af_vk_pick_subgroup_size(v->subgroup_min, v->subgroup_max), v->full_subgroups ? ", full" : "");
        else
            snprintf(d->features + l, sizeof d->features - l, "subgroup_size=%u", v->subgroup_size);
    }
    else if (l) d->features[l - 1] = 0;
    const uint64_t cap = af_fault_mem();
    d->mem_total = cap && cap < v->mem_total ? cap : v->mem_total;
    d->mem_free = 0; /* unknown (no VK_EXT_memory_budget query) */
    d->max_alloc = v->max_range & ~(uint64_t)255;
    d->host_memory = 0;
    d->software = v->type == 4; /* VK_PHYSICAL_DEVICE_TYPE_CPU: llvmpipe, lavapipe, SwiftShader */
}

static af_status vk_enumerate(af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap) {
    af_vk_info inf[16];
    int cnt = 0;
    *n = 0;
    if (af_vk_enumerate(inf, 16, &cnt) != AF_OK) {
        if (why && why_cap) snprintf(why, why_cap, "%s", af_last_error());
        af_clear_error();
        return AF_OK;
    }
    if (cnt == 0 && why && why_cap) snprintf(why, why_cap, "the Vulkan loader found no device");
    for (int i = 0; i < cnt && i < 16 && i < cap && out; i++) to_info(&inf[i], i, &out[i]);
    *n = cnt;
    return AF_OK;
}

/* First device failure: into the af_device (sticky), as AF_ERR_DEVICE unless out of memory. */
static void forward_fail(void *owner, af_status st, const char *msg) {
    af_device_fail((af_device *)owner, st == AF_ERR_NOMEM ? AF_ERR_NOMEM : AF_ERR_DEVICE, "%s", msg);
}

static af_status vk_open(int32_t index, af_device *dev) {
    af_vk_dev *d = NULL;
    af_status st = af_vk_open(index, &d);
    if (st != AF_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        return af_fail(st == AF_ERR_NOT_FOUND ? AF_ERR_NOT_FOUND : AF_ERR_DEVICE, "device vulkan:%d: %s", (int)index,
                       msg);
    }
    to_info(af_vk_dev_info(d), index, &dev->info);
    af_vk_set_owner(d, forward_fail, dev);
    dev->be = &vk_be;
    dev->impl = d;
    dev->max_head_dim = AF_VK_ATTN_HD_MAX;
    return AF_OK;
}

static void vk_close(af_device *dev) {
    af_vk_close((af_vk_dev *)dev->impl);
    dev->impl = NULL;
}

const af_backend_entry af_backend_entry_vulkan = {"vulkan", 0, vk_enumerate, vk_open, vk_close};
