/*
 * vk_ops.c — the transformer ops of the Vulkan backend (vk.h; ops.h semantics): element-wise ops,
 * RMSNorm, RoPE, attention, softmax, row moves (gather, scatter, bias, embedding), reductions the
 * host reads (non-finite count). Shaders: src/kernels/vulkan/shaders/.
 */
#include "kernels/vulkan/vk_ops.h"

#include "core/blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int fits(af_vk_dev *d, const void *p, uint64_t bytes) { return !p || !bytes || vk_fit(d, p) >= bytes; }

/* ---------------------------------------------------------------- element-wise */

typedef struct ew_push {
    uint32_t off[8];
    uint32_t n;
    float s;
    uint32_t op;
} ew_push;

void vk_ew(af_vk_dev *d, const char *op, int kind, float *y, float *y2, const float *a, const float *b, const float *c,
           int64_t n, float s) {
    if (d->err != AF_OK || n <= 0) return;
    const uint64_t by = 4 * (uint64_t)n;
    if (!fits(d, y, by) || !fits(d, y2, by) || !fits(d, a, by) || !fits(d, b, by) || !fits(d, c, by)) {
        if (vk_not_device(d, op, 5, y, y2, a, b, c)) return;
        if (n < 2) {
            vk_fail(d, AF_ERR_INTERNAL, "%s: cannot split", op);
            return;
        }
        int64_t h = n / 2;
        vk_ew(d, op, kind, y, y2, a, b, c, h, s);
        vk_ew(d, op, kind, y + h, y2 ? y2 + h : NULL, a ? a + h : NULL, b ? b + h : NULL, c ? c + h : NULL, n - h, s);
        return;
    }
    if (n > 0x7FFFFFFF) {
        vk_fail(d, AF_ERR_INVALID_ARG, "%s: %lld elements", op, (long long)n);
        return;
    }
    const int ry = kind == VK_EW_SWIGLU_BWD || kind == VK_EW_GEGLU_BWD || kind == VK_EW_AXPY;
    vk_arg args[5] = {{y, by, 1}, {y2, y2 ? by : 0, 1}, {a, a ? by : 0, 0}, {b, b ? by : 0, 0}, {c, c ? by : 0, 0}};
    (void)ry;
    ew_push p = {{0}, (uint32_t)n, s, (uint32_t)kind};
    uint64_t groups = vk_div((uint64_t)n, 256);
    if (groups > 65535u * 4) groups = 65535u * 4; /* the shader strides over the rest */
    uint32_t gx, gy;
    vk_grid(groups, &gx, &gy);
    vk_dispatch(d, op, AF_VKS_EW, NULL, args, 5, &p, sizeof p, gx, gy, 1);
}

#define EW_OP(name, body)                                                                           \
    {                                                                                              \
        if (vk_enter(d, name)) body;                                                              \
        vk_leave(d);                                                                               \
    }

void af_vk_vexpf(af_vk_dev *d, float *y, const float *x, int64_t n)
    EW_OP("exp", vk_ew(d, "exp", VK_EW_EXP, y, NULL, x, NULL, NULL, n, 0))
void af_vk_swiglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n)
    EW_OP("swiglu_forward", vk_ew(d, "swiglu_forward", VK_EW_SWIGLU, h, NULL, gate, up, NULL, n, 0))
void af_vk_swiglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate,
                           const float *up, int64_t n)
    EW_OP("swiglu_backward", vk_ew(d, "swiglu_backward", VK_EW_SWIGLU_BWD, d_gate, d_up, gate, up, dh, n, 0))
void af_vk_geglu_forward(af_vk_dev *d, float *h, const float *gate, const float *up, int64_t n)
    EW_OP("geglu_forward", vk_ew(d, "geglu_forward", VK_EW_GEGLU, h, NULL, gate, up, NULL, n, 0))
void af_vk_geglu_backward(af_vk_dev *d, float *d_gate, float *d_up, const float *dh, const float *gate,
                          const float *up, int64_t n)
    EW_OP("geglu_backward", vk_ew(d, "geglu_backward", VK_EW_GEGLU_BWD, d_gate, d_up, gate, up, dh, n, 0))
void af_vk_add(af_vk_dev *d, float *y, const float *a, const float *b, int64_t n)
    EW_OP("add", vk_ew(d, "add", VK_EW_ADD, y, NULL, a, b, NULL, n, 0))
void af_vk_scale(af_vk_dev *d, float *y, const float *x, float s, int64_t n)
    EW_OP("scale", vk_ew(d, "scale", VK_EW_SCALE, y, NULL, x, NULL, NULL, n, s))
void af_vk_softcap(af_vk_dev *d, float *x, int64_t n, float cap)
    EW_OP("softcap", vk_ew(d, "softcap", VK_EW_SOFTCAP, x, NULL, x, NULL, NULL, n, cap))

/* ---------------------------------------------------------------- RMSNorm */

typedef struct norm_push {
    uint32_t off[8];
    uint32_t n, dim;
    float eps;
    uint32_t bwd;
} norm_push;

static void rms_rows(af_vk_dev *d, const char *op, int bwd, float *y, float *rstd, const float *x, const float *w,
                     const float *dy, int64_t n, int64_t dim, float eps) {
    if (d->err != AF_OK || n <= 0) return;
    const uint64_t rows = 4 * (uint64_t)n * dim;
    if (!fits(d, y, rows) || !fits(d, x, rows) || !fits(d, dy, rows) || !fits(d, rstd, 4 * (uint64_t)n)) {
        if (vk_not_device(d, op, 5, y, rstd, x, w, dy)) return;
        if (n < 2) {
            vk_fail(d, AF_ERR_UNSUPPORTED, "%s: a row of %lld floats longer than a buffer window", op, (long long)dim);
            return;
        }
        int64_t h = n / 2;
        rms_rows(d, op, bwd, y, rstd, x, w, dy, h, dim, eps);
        rms_rows(d, op, bwd, y + h * dim, rstd ? rstd + h : NULL, x + h * dim, w, dy ? dy + h * dim : NULL, n - h, dim,
                 eps);
        return;
    }
    norm_push p = {{0}, (uint32_t)n, (uint32_t)dim, eps, (uint32_t)bwd};
    vk_arg args[5] = {{y, rows, 1}, {rstd, rstd ? 4 * (uint64_t)n : 0, !bwd}, {x, rows, 0}, {w, 4 * (uint64_t)dim, 0},
                      {dy, dy ? rows : 0, 0}};
    uint32_t gx, gy;
    vk_grid((uint64_t)n, &gx, &gy);
    vk_dispatch(d, op, d->use_fp64 ? AF_VKS_RMSNORM_F64 : AF_VKS_RMSNORM_F32, NULL, args, 5, &p, sizeof p, gx, gy, 1);
}

void af_vk_rmsnorm_forward(af_vk_dev *d, float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                           float eps) {
    int64_t sz[2] = {n, dim};
    if (vk_enter(d, "rmsnorm_forward") && vk_sizes_ok(d, "rmsnorm_forward", 2, sz) && dim > 0)
        rms_rows(d, "rmsnorm_forward", 0, y, rstd, x, w, NULL, n, dim, eps);
    vk_leave(d);
}

typedef struct dw_push {
    uint32_t off[8];
    uint32_t n, dim;
} dw_push;

void af_vk_rmsnorm_backward(af_vk_dev *d, float *dx, float *dw, const float *dy, const float *x, const float *w,
                            const float *rstd, int64_t n, int64_t dim) {
    const char *op = "rmsnorm_backward";
    int64_t sz[2] = {n, dim};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 2, sz) && dim > 0 && n > 0) {
        rms_rows(d, op, 1, dx, (float *)rstd, x, w, dy, n, dim, 0.0f);
        /* dw, summed over the rows in order: pieces of rows that fit a window, one after the other */
        for (int64_t t0 = 0; dw && t0 < n && d->err == AF_OK;) {
            const uint64_t rb = 4 * (uint64_t)dim;
            uint64_t fx = vk_fit(d, x + t0 * dim) / rb, fd = vk_fit(d, dy + t0 * dim) / rb;
            int64_t m = (int64_t)(fx < fd ? fx : fd);
            if (m > n - t0) m = n - t0;
            if (m <= 0 || vk_fit(d, rstd + t0) < 4 * (uint64_t)m) {
                if (vk_not_device(d, op, 4, dw, rstd, x, dy)) break;
                vk_fail(d, AF_ERR_UNSUPPORTED, "%s: a row of %lld floats longer than a buffer window", op, (long long)dim);
                break;
            }
            dw_push p = {{0}, (uint32_t)m, (uint32_t)dim};
            vk_arg args[4] = {{dw, rb, 1}, {rstd + t0, 4 * (uint64_t)m, 0}, {x + t0 * dim, m * rb, 0},
                              {dy + t0 * dim, m * rb, 0}};
            vk_dispatch(d, op, AF_VKS_RMSNORM_DW, NULL, args, 4, &p, sizeof p, vk_div((uint64_t)dim, 64), 1, 1);
            t0 += m;
        }
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- RoPE */

typedef struct rope_push {
    uint32_t off[8];
    uint32_t n, nh, hd, neox;
    float sgn;
} rope_push;

/* The frequency table of (hd, base, freq_factors) on the device: [hd/2] doubles base^(−2i/hd),
 * divided by freq_factors[i] where given, formed as ops.c forms them, then the same as floats.
 * freq_factors is device memory (a model's constant vector, gemma4): read back once (a
 * synchronization point) when its table is made. Cached per device, keyed by the pointer; freeing
 * the allocation that holds a freq_factors vector drops its tables (vk_rope_forget), so a reused
 * address never finds a stale table. */
static const void *rope_table(af_vk_dev *d, int64_t hd, float base, const float *freq_factors) {
    for (int i = 0; i < d->nrope; i++)
        if (d->rope[i].hd == hd && d->rope[i].base == base && d->rope[i].ff == freq_factors) return d->rope[i].p;
    const int64_t half = hd / 2;
    const size_t bytes = (size_t)half * 12;
    unsigned char *h = malloc(bytes + (freq_factors ? (size_t)half * sizeof(float) : 0));
    if (!h) {
        vk_fail(d, AF_ERR_NOMEM, "rope: out of host memory");
        return NULL;
    }
    float *ffh = freq_factors ? (float *)(h + bytes) : NULL;
    if (ffh && vk_download_locked(d, ffh, freq_factors, (uint64_t)half * sizeof(float)) != AF_OK) {
        free(h);
        return NULL;
    }
    const double log_base = log((double)base);
    for (int64_t i = 0; i < half; i++) {
        double f = exp(-2.0 * (double)i / (double)hd * log_base);
        if (ffh) f /= (double)ffh[i];
        float ff = (float)f;
        memcpy(h + 8 * i, &f, 8);
        memcpy(h + 8 * half + 4 * i, &ff, 4);
    }
    if (d->nrope == (int)(sizeof d->rope / sizeof d->rope[0])) { /* full: drop the oldest */
        vk_alloc *old = vk_find(d, d->rope[0].p);
        if (old) vk_unplace_free(d, old);
        memmove(d->rope, d->rope + 1, sizeof d->rope[0] * (size_t)(d->nrope - 1));
        d->nrope--;
    }
    void *p = vk_alloc_internal(d, bytes);
    if (!p) {
        free(h);
        return NULL;
    }
    vk_cmd_upload(d, "rope", p, h, bytes);
    free(h);
    d->rope[d->nrope].hd = (int)hd;
    d->rope[d->nrope].base = base;
    d->rope[d->nrope].ff = freq_factors;
    d->rope[d->nrope].p = p;
    d->nrope++;
    return p;
}

void vk_rope_forget(af_vk_dev *d, uintptr_t lo, uintptr_t hi) {
    for (int i = 0; i < d->nrope;) {
        uintptr_t f = (uintptr_t)d->rope[i].ff;
        if (f && f >= lo && f < hi) {
            vk_alloc *a = vk_find(d, d->rope[i].p);
            if (a) vk_unplace_free(d, a);
            memmove(d->rope + i, d->rope + i + 1, sizeof d->rope[0] * (size_t)(d->nrope - i - 1));
            d->nrope--;
        } else
            i++;
    }
}

static void rope_rows(af_vk_dev *d, const char *op, float *x, const int32_t *pos, const void *tab, int64_t n,
                      int64_t nh, int64_t hd, int neox, float sgn) {
    if (d->err != AF_OK || n <= 0) return;
    const uint64_t sx = 4 * (uint64_t)n * nh * hd;
    if (!fits(d, x, sx) || !fits(d, pos, 4 * (uint64_t)n)) {
        if (vk_not_device(d, op, 2, x, pos)) return;
        if (n < 2) {
            vk_fail(d, AF_ERR_UNSUPPORTED, "%s: a token's heads do not fit a buffer window", op);
            return;
        }
        int64_t h = n / 2;
        rope_rows(d, op, x, pos, tab, h, nh, hd, neox, sgn);
        rope_rows(d, op, x + h * nh * hd, pos + h, tab, n - h, nh, hd, neox, sgn);
        return;
    }
    rope_push p = {{0}, (uint32_t)n, (uint32_t)nh, (uint32_t)hd, (uint32_t)(neox != 0), sgn};
    vk_arg args[3] = {{x, sx, 1}, {pos, 4 * (uint64_t)n, 0}, {tab, (uint64_t)(hd / 2) * 12, 0}};
    uint32_t gx, gy;
    vk_grid(vk_div((uint64_t)n * (hd / 2), 64), &gx, &gy);
    vk_dispatch(d, op, d->use_fp64 ? AF_VKS_ROPE_F64 : AF_VKS_ROPE_F32, NULL, args, 3, &p, sizeof p, gx, gy, 1);
}

static void rope(af_vk_dev *d, const char *op, float *x, const int32_t *pos, int64_t n, int64_t nh, int64_t hd,
                 float base, int neox, const float *freq_factors, float sgn) {
    int64_t sz[3] = {n, nh, hd};
    if (vk_enter(d, op) && vk_sizes_ok(d, op, 3, sz) && n > 0 && nh > 0 && hd >= 2) {
        const void *tab = rope_table(d, hd, base, freq_factors);
        if (tab) rope_rows(d, op, x, pos, tab, n, nh, hd, neox, sgn);
    }
    vk_leave(d);
}

void af_vk_rope_forward(af_vk_dev *d, float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                        float base, int neox, const float *freq_factors) {
    rope(d, "rope_forward", x, pos, n, n_heads, head_dim, base, neox, freq_factors, 1.0f);
}

void af_vk_rope_backward(af_vk_dev *d, float *dx, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim,
                         float base, int neox, const float *freq_factors) {
    rope(d, "rope_backward", dx, pos, n, n_heads, head_dim, base, neox, freq_factors, -1.0f);
}

/* ---------------------------------------------------------------- attention */

typedef struct attf_push {
    uint32_t off[8];
    uint32_t n_q, q_pos0, n_kv, kv_stride, n_heads, n_kv_heads, hd, window;
    float scale;
} attf_push;

typedef struct attb_push {
    uint32_t off[8];
    uint32_t n_q, q_pos0, n_kv, n_heads, n_kv_heads, hd, window;
    float scale;
} attb_push;

static int att_args_ok(af_vk_dev *d, const char *op, int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads,
                       int64_t n_kv_heads, int64_t hd, int64_t window) {
    int64_t sz[7] = {n_q, q_pos0, n_kv, n_heads, n_kv_heads, hd, window < 0 ? 0 : window};
    if (!vk_sizes_ok(d, op, 7, sz)) return 0;
    if (n_kv_heads <= 0 || n_heads % n_kv_heads || hd > AF_VK_ATTN_HD_MAX) {
        vk_fail(d, AF_ERR_UNSUPPORTED, "%s: %lld heads over %lld kv heads of dim %lld (needs a whole group per kv head, "
                                       "head_dim <= %d)", op, (long long)n_heads, (long long)n_kv_heads, (long long)hd,
                AF_VK_ATTN_HD_MAX);
        return 0;
    }
    return 1;
}

void af_vk_attention_forward(af_vk_dev *d, float *out, float *lse, const float *q, const float *k, const float *v,
                             int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride, int64_t n_heads,
                             int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window) {
    const char *op = "attention_forward";
    if (vk_enter(d, op) && n_q > 0 && n_heads > 0 && head_dim > 0 &&
        att_args_ok(d, op, n_q, q_pos0, n_kv, n_heads, n_kv_heads, head_dim, window)) {
        const int64_t rows = n_kv < q_pos0 + n_q ? n_kv : q_pos0 + n_q; /* keys that can be read */
        const uint64_t sq = 4 * (uint64_t)n_q * n_heads * head_dim;
        const uint64_t skv = rows > 0 ? 4 * ((uint64_t)(rows - 1) * kv_stride + (uint64_t)n_kv_heads * head_dim) : 0;
        attf_push p = {{0}, (uint32_t)n_q, (uint32_t)q_pos0, (uint32_t)n_kv, (uint32_t)kv_stride, (uint32_t)n_heads,
                       (uint32_t)n_kv_heads, (uint32_t)head_dim, (uint32_t)(window > 0 ? window : 0), scale};
        vk_arg args[5] = {{out, sq, 1}, {lse, lse ? 4 * (uint64_t)n_q * n_heads : 0, 1}, {q, sq, 0}, {k, skv, 0}, {v, skv, 0}};
        uint32_t gx, gy;
        vk_grid((uint64_t)n_q * n_heads, &gx, &gy);
        vk_dispatch(d, op, AF_VKS_ATTN_FWD, NULL, args, 5, &p, sizeof p, gx, gy, 1);
    }
    vk_leave(d);
}

void af_vk_attention_backward(af_vk_dev *d, float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                              int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                              float scale, int64_t window) {
    const char *op = "attention_backward";
    if (vk_enter(d, op) && n_q > 0 && n_heads > 0 && head_dim > 0 &&
        att_args_ok(d, op, n_q, q_pos0, n_kv, n_heads, n_kv_heads, head_dim, window)) {
        const uint64_t sq = 4 * (uint64_t)n_q * n_heads * head_dim, skv = 4 * (uint64_t)n_kv * n_kv_heads * head_dim;
        const uint64_t sl = 4 * (uint64_t)n_q * n_heads;
        float *D = vk_scratch(d, sl);
        if (D) {
            attb_push p = {{0}, (uint32_t)n_q, (uint32_t)q_pos0, (uint32_t)n_kv, (uint32_t)n_heads,
                           (uint32_t)n_kv_heads, (uint32_t)head_dim, (uint32_t)(window > 0 ? window : 0), scale};
            vk_arg a[8] = {{dq, sq, 1}, {D, sl, 1}, {q, sq, 0}, {k, skv, 0}, {v, skv, 0}, {dout, sq, 0}, {lse, sl, 0},
                           {out, sq, 0}};
            uint32_t gx, gy;
            vk_grid((uint64_t)n_q * n_heads, &gx, &gy);
            vk_dispatch(d, op, AF_VKS_ATTN_BWD_Q, NULL, a, 8, &p, sizeof p, gx, gy, 1);
            vk_arg b[8] = {{dk, skv, 1}, {dv, skv, 1}, {q, sq, 0}, {k, skv, 0}, {v, skv, 0}, {dout, sq, 0}, {lse, sl, 0},
                           {D, sl, 0}};
            vk_grid((uint64_t)n_kv * n_kv_heads, &gx, &gy);
            vk_dispatch(d, op, AF_VKS_ATTN_BWD_KV, NULL, b, 8, &p, sizeof p, gx, gy, 1);
        }
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- softmax */

typedef struct sm_push {
    uint32_t off[8];
    uint32_t rows, n;
} sm_push;

void af_vk_softmax_rows(af_vk_dev *d, float *x, int64_t rows, int64_t n) {
    int64_t sz[2] = {rows, n};
    if (vk_enter(d, "softmax") && vk_sizes_ok(d, "softmax", 2, sz) && rows > 0 && n > 0) {
        sm_push p = {{0}, (uint32_t)rows, (uint32_t)n};
        vk_arg a[1] = {{x, 4 * (uint64_t)rows * n, 1}};
        uint32_t gx, gy;
        vk_grid((uint64_t)rows, &gx, &gy);
        vk_dispatch(d, "softmax", d->use_fp64 ? AF_VKS_SOFTMAX_F64 : AF_VKS_SOFTMAX_F32, NULL, a, 1, &p, sizeof p, gx, gy,
                    1);
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- row moves */

typedef struct rows_push {
    uint32_t off[8];
    uint32_t rows, width, rb;
    float scale;
    int32_t lo, hi;
    uint32_t op, type;
} rows_push;

enum { ROWS_GATHER = 0, ROWS_SCATTER = 1, ROWS_BIAS = 2, ROWS_EMBED = 3, ROWS_ZERO = 4 };

/* dst/src extents: the caller's (gather and scatter address rows anywhere in their matrices). */
static void rows_op(af_vk_dev *d, const char *op, int kind, float *dst, uint64_t dst_bytes, const void *src,
                    uint64_t src_bytes, const int32_t *idx, int64_t k, int64_t width, uint32_t type, uint64_t rb,
                    float scale, int32_t lo, int32_t hi) {
    int64_t sz[2] = {k, width};
    if (!vk_sizes_ok(d, op, 2, sz) || k == 0 || width == 0) return;
    rows_push p = {{0}, (uint32_t)k, (uint32_t)width, (uint32_t)rb, scale, lo, hi, (uint32_t)kind, type};
    vk_arg a[3] = {{dst, dst_bytes, 1}, {src, src_bytes, 0}, {idx, idx ? 4 * (uint64_t)k : 0, 0}};
    uint64_t groups = vk_div((uint64_t)k * width, 256);
    if (groups > 65535u * 4) groups = 65535u * 4;
    uint32_t gx, gy;
    vk_grid(groups, &gx, &gy);
    vk_dispatch(d, op, AF_VKS_ROWS, NULL, a, 3, &p, sizeof p, gx, gy, 1);
}

/* The extent of the rows a gather reads / a scatter writes depends on the indices (device data):
 * everything bindable from the base pointer (the rows must lie in one buffer window of it). */
static uint64_t reach(af_vk_dev *d, const void *p) {
    uint64_t f = vk_fit(d, p);
    return f ? f : 4;
}

void af_vk_gather_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width) {
    if (vk_enter(d, "gather_rows"))
        rows_op(d, "gather_rows", ROWS_GATHER, dst, 4 * (uint64_t)k * width, src, reach(d, src), idx, k, width, 0, 0,
                1.0f, 0, 0);
    vk_leave(d);
}

void af_vk_scatter_rows(af_vk_dev *d, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t width) {
    if (vk_enter(d, "scatter_rows"))
        rows_op(d, "scatter_rows", src ? ROWS_SCATTER : ROWS_ZERO, dst, reach(d, dst), src,
                src ? 4 * (uint64_t)k * width : 0, idx, k, width, 0, 0, 1.0f, 0, 0);
    vk_leave(d);
}

void af_vk_bias_add(af_vk_dev *d, float *y, const float *b, int64_t n, int64_t dim) {
    if (vk_enter(d, "bias_add")) {
        /* split rows when y is longer than a window */
        int64_t t0 = 0;
        while (t0 < n && d->err == AF_OK) {
            uint64_t fit = vk_fit(d, y + t0 * dim) / (4 * (uint64_t)(dim ? dim : 1));
            int64_t m = fit < (uint64_t)(n - t0) ? (int64_t)fit : n - t0;
            if (m <= 0) {
                if (vk_not_device(d, "bias_add", 2, y, b)) break;
                vk_fail(d, AF_ERR_UNSUPPORTED, "bias_add: a row longer than a buffer window");
                break;
            }
            rows_op(d, "bias_add", ROWS_BIAS, y + t0 * dim, 4 * (uint64_t)m * dim, b, 4 * (uint64_t)dim, NULL, m, dim, 0,
                    0, 1.0f, 0, 0);
            t0 += m;
        }
    }
    vk_leave(d);
}

void af_vk_embed(af_vk_dev *d, float *x, const void *w, uint32_t type, const int32_t *tokens, int64_t n, int64_t dim,
                 int64_t rows, float scale) {
    const char *op = "embed";
    if (vk_enter(d, op)) {
        const uint64_t rb = af_row_bytes(type, dim);
        if (!af_vk_type_supported(type) || !rb)
            vk_fail(d, AF_ERR_UNSUPPORTED, "%s: weight type %s with %lld columns", op, af_type_name(type), (long long)dim);
        /* one dispatch per piece of the weight that one buffer window holds (each token is in one) */
        for (int64_t r0 = 0; r0 < rows && d->err == AF_OK;) {
            const char *wp = (const char *)w + r0 * rb;
            int64_t m = (int64_t)(vk_fit(d, wp) / rb);
            if (m > rows - r0) m = rows - r0;
            if (m <= 0) {
                if (vk_not_device(d, op, 3, x, w, tokens)) break;
                vk_fail(d, AF_ERR_UNSUPPORTED, "%s: a weight row (%llu bytes) longer than a buffer window", op,
                        (unsigned long long)rb);
                break;
            }
            rows_op(d, op, ROWS_EMBED, x, 4 * (uint64_t)n * dim, wp, m * rb, tokens, n, dim, type, rb, scale,
                    (int32_t)r0, (int32_t)(r0 + m));
            r0 += m;
        }
    }
    vk_leave(d);
}

/* ---------------------------------------------------------------- reductions read by the host */

typedef struct red_push {
    uint32_t off[8];
    uint32_t n, parts, chunk, op;
} red_push;

/* Partials of reduce.comp OP over x [n] into scratch; returns the number of parts (0 on failure). */
static uint32_t reduce_parts(af_vk_dev *d, const char *op, int kind, const float *x, int64_t n, void **partials) {
    int64_t sz[1] = {n};
    if (!vk_sizes_ok(d, op, 1, sz)) return 0;
    uint64_t parts = vk_div((uint64_t)n, 4096);
    if (parts > 256) parts = 256;
    if (parts == 0) parts = 1;
    const uint64_t chunk = vk_div((uint64_t)n, parts);
    if (!fits(d, x, 4 * (uint64_t)n)) {
        if (vk_not_device(d, op, 1, x)) return 0;
        vk_fail(d, AF_ERR_UNSUPPORTED, "%s: %lld floats do not fit one buffer window", op, (long long)n);
        return 0;
    }
    void *part = vk_scratch(d, 8 * parts);
    if (!part) return 0;
    red_push p = {{0}, (uint32_t)n, (uint32_t)parts, (uint32_t)chunk, (uint32_t)kind};
    vk_arg a[2] = {{part, 8 * parts, 1}, {x, 4 * (uint64_t)n, 0}};
    vk_dispatch(d, op, d->use_fp64 ? AF_VKS_REDUCE_F64 : AF_VKS_REDUCE_F32, NULL, a, 2, &p, sizeof p, (uint32_t)parts,
                1, 1);
    *partials = part;
    return (uint32_t)parts;
}


int64_t af_vk_count_nonfinite(af_vk_dev *d, const float *x, int64_t n) {
    int64_t total = -1;
    if (vk_enter(d, "count_nonfinite")) {
        if (n <= 0) total = 0;
        void *part = NULL;
        uint32_t parts = n > 0 ? reduce_parts(d, "count_nonfinite", 1, x, n, &part) : 0;
        uint32_t cnt[256];
        if (parts && vk_download_locked(d, cnt, part, 4 * (uint64_t)parts) == AF_OK) {
            total = 0;
            for (uint32_t i = 0; i < parts; i++) total += cnt[i];
        }
    }
    vk_leave(d);
    return total;
}

double vk_sumsq(af_vk_dev *d, const char *op, const float *x, int64_t n) {
    void *part = NULL;
    uint32_t parts = reduce_parts(d, op, 0, x, n, &part);
    double v[256];
    if (!parts || vk_download_locked(d, v, part, 8 * (uint64_t)parts) != AF_OK) return NAN;
    double s = 0;
    for (uint32_t i = 0; i < parts; i++) s += v[i];
    return s;
}
