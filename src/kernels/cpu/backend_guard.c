/*
 * backend_guard.c — the "guard" debug backend (kernels/backend.h; `--device guard`, hidden from
 * `afinar devices` and from auto): the CPU kernels, but device memory is an arena that stays
 * PROT_NONE except while one of the table's ops (or upload / download / copy / fill) runs. Host
 * code that touches activation, parameter or weight memory outside the table therefore faults at
 * once; the fault handler names the address as device memory, prints a backtrace and aborts. It is
 * the proof that model, training and inference code reach the device only through the table
 * (test_backend runs the tiny-model paths on it and compares every result with the CPU bit for
 * bit: the same kernels on the same values). It also hosts the fault injection of AFINAR_FAULT
 * (alloc=, lost=, nan=, mem=), so the memory guard and the fallback paths have tests without a GPU.
 *
 * Memory: one reservation of ARENA bytes (PROT_NONE, MAP_NORESERVE), first-fit blocks of 64-byte
 * granularity whose bookkeeping lives outside the arena; the protected range is the arena up to
 * its high-water mark. max_alloc is 128 MiB (lavapipe's maxStorageBufferRange), so workspaces are
 * carved into chunks as on a GPU. Ops of several threads may overlap: the arena is open while any
 * op runs (a depth count under a lock).
 */
#include "kernels/backend.h"

#include "core/blocks.h"
#include "core/core.h"
#include "kernels/train_ops.h"

#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARENA ((size_t)4 << 30)
#define GUARD_MAX_ALLOC ((uint64_t)128 << 20)

typedef struct gblock {
    size_t off, size;
    int used;
} gblock;

typedef struct guard {
    char *base;
    size_t cap;        /* usable bytes (ARENA, or AFINAR_FAULT mem=) */
    size_t top;        /* end of the last block */
    size_t hw;         /* page-rounded high-water mark: the range mprotect toggles */
    size_t used;       /* bytes in used blocks */
    gblock *b;         /* sorted by offset */
    int32_t nb, capb;
    int depth;         /* ops running (the arena is open while > 0) */
    pthread_mutex_t lock;
} guard;

static guard *g_guard; /* one arena per process (the guard backend has one device) */
static struct sigaction g_old_segv;

static void segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const char *a = si ? (const char *)si->si_addr : NULL;
    guard *g = g_guard;
    if (g && a >= g->base && a < g->base + ARENA) {
        static const char msg[] = "afinar: guard backend: host access to device memory outside the backend "
                                  "table (a model/training/inference code path read or wrote activation, "
                                  "parameter or weight memory directly); backtrace:\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        void *bt[48];
        int n = backtrace(bt, 48);
        backtrace_symbols_fd(bt, n, STDERR_FILENO);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    sigaction(sig, &g_old_segv, NULL); /* not ours: the previous handler (ASan's, or the default) */
}

static void set_prot(guard *g, int open) {
    if (g->hw && mprotect(g->base, g->hw, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) abort();
}

static void enter(guard *g) {
    pthread_mutex_lock(&g->lock);
    if (g->depth++ == 0) set_prot(g, 1);
    pthread_mutex_unlock(&g->lock);
}

static void leave(guard *g) {
    pthread_mutex_lock(&g->lock);
    if (--g->depth == 0) set_prot(g, 0);
    pthread_mutex_unlock(&g->lock);
}

static guard *G(const af_ctx *ctx) { return (guard *)ctx->dev->impl; }

/* Every pointer an op is given must be device memory of this arena (or NULL): a host pointer handed
 * to an op would be garbage on a real device. Aborts naming the op and the argument. */
static void dev_args(const af_ctx *ctx, const char *op, const void *const *p, int n) {
    const guard *g = G(ctx);
    for (int i = 0; i < n; i++) {
        const char *a = p[i];
        if (!a || (a >= g->base && a < g->base + ARENA)) continue;
        fprintf(stderr, "afinar: guard backend: op %s was given a host pointer (argument %d of its device pointers: %p) "
                        "instead of device memory\n", op, i + 1, (const void *)a);
        void *bt[48];
        backtrace_symbols_fd(bt, backtrace(bt, 48), STDERR_FILENO);
        abort();
    }
}


/* ---------------------------------------------------------------- blocks */

static int insert_block(guard *g, int32_t at, gblock nb) {
    if (g->nb == g->capb) {
        int32_t nc = g->capb ? 2 * g->capb : 256;
        gblock *x = af_realloc_array(g->b, (size_t)nc, sizeof *x);
        if (!x) return 0;
        g->b = x;
        g->capb = nc;
    }
    memmove(g->b + at + 1, g->b + at, sizeof *g->b * (size_t)(g->nb - at));
    g->b[at] = nb;
    g->nb++;
    return 1;
}

static void *g_alloc_bytes(const af_ctx *ctx, size_t bytes, const char *what) {
    guard *g = G(ctx);
    const size_t sz = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
    if (af_fault_alloc()) {
        af_fail(AF_ERR_NOMEM, "device guard:0: out of device memory for %s of %.1f MiB (fault injection)", what,
                (double)bytes / 1048576.0);
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    char *p = NULL;
    for (int32_t i = 0; i < g->nb && !p; i++) {
        gblock *b = &g->b[i];
        if (b->used || b->size < sz) continue;
        if (b->size > sz && !insert_block(g, i + 1, (gblock){b->off + sz, b->size - sz, 0})) break;
        b = &g->b[i];
        b->size = sz;
        b->used = 1;
        p = g->base + b->off;
    }
    if (!p && g->top + sz <= g->cap && insert_block(g, g->nb, (gblock){g->top, sz, 1})) {
        p = g->base + g->top;
        g->top += sz;
        const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
        const size_t hw = (g->top + ps - 1) / ps * ps;
        if (hw > g->hw) {
            if (g->depth > 0 && mprotect(g->base + g->hw, hw - g->hw, PROT_READ | PROT_WRITE) != 0) abort();
            g->hw = hw;
        }
    }
    if (p) g->used += sz;
    pthread_mutex_unlock(&g->lock);
    if (!p)
        af_fail(AF_ERR_NOMEM, "device guard:0: out of device memory for %s of %.1f MiB (%.1f of %.1f MiB in use)", what,
                (double)bytes / 1048576.0, (double)g->used / 1048576.0, (double)g->cap / 1048576.0);
    return p;
}

static void g_free(const af_ctx *ctx, void *ptr) {
    if (!ptr) return;
    guard *g = G(ctx);
    pthread_mutex_lock(&g->lock);
    const size_t off = (size_t)((char *)ptr - g->base);
    int32_t i = 0;
    while (i < g->nb && g->b[i].off != off) i++;
    if (i == g->nb || !g->b[i].used) abort(); /* not an allocation of this arena: a bug */
    g->b[i].used = 0;
    g->used -= g->b[i].size;
    if (i + 1 < g->nb && !g->b[i + 1].used) { /* merge with the next */
        g->b[i].size += g->b[i + 1].size;
        memmove(g->b + i + 1, g->b + i + 2, sizeof *g->b * (size_t)(g->nb - i - 2));
        g->nb--;
    }
    if (i > 0 && !g->b[i - 1].used) { /* and with the previous */
        g->b[i - 1].size += g->b[i].size;
        memmove(g->b + i, g->b + i + 1, sizeof *g->b * (size_t)(g->nb - i - 1));
        g->nb--;
        i--;
    }
    if (i == g->nb - 1) { /* the last block: give it back to the top */
        g->top = g->b[i].off;
        g->nb--;
    }
    pthread_mutex_unlock(&g->lock);
}

static void *g_alloc(const af_ctx *ctx, size_t bytes) { return g_alloc_bytes(ctx, bytes, "a buffer"); }

/* ---------------------------------------------------------------- buffers */

static int lost(const af_ctx *ctx, const char *op) {
    af_device *d = ctx->dev;
    if (__atomic_load_n(&d->err, __ATOMIC_ACQUIRE)) return 1;
    if (af_fault_op_lost()) {
        af_device_fail(d, AF_ERR_DEVICE, "device lost during %s (fault injection)", op);
        return 1;
    }
    return 0;
}

static const void *g_import_weight(const af_ctx *ctx, const void *host, uint32_t type, int64_t rows, int64_t cols,
                                   uint32_t *dev_type) {
    const size_t bytes = af_row_bytes(type, cols) * (size_t)rows;
    void *p = g_alloc_bytes(ctx, bytes, "a weight");
    if (!p) return NULL;
    enter(G(ctx));
    memcpy(p, host, bytes);
    leave(G(ctx));
    *dev_type = type;
    return p;
}

static void g_release_weight(const af_ctx *ctx, const void *dev) { g_free(ctx, (void *)(uintptr_t)dev); }

static af_status g_upload(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    const void *p_[] = {dst};
    dev_args(ctx, "upload", p_, 1);
    if (lost(ctx, "upload")) return af_device_status(ctx->dev);
    enter(G(ctx));
    if (bytes) memcpy(dst, src, bytes);
    leave(G(ctx));
    return AF_OK;
}

static af_status g_download(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    const void *p_[] = {src};
    dev_args(ctx, "download", p_, 1);
    if (lost(ctx, "download")) return af_device_status(ctx->dev);
    enter(G(ctx));
    if (bytes) memcpy(dst, src, bytes);
    leave(G(ctx));
    return AF_OK;
}

static af_status g_sync(const af_ctx *ctx) { return af_device_status(ctx->dev); }

static void g_memory(const af_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
    guard *g = G(ctx);
    pthread_mutex_lock(&g->lock);
    *total_bytes = g->cap;
    *free_bytes = g->cap - g->used;
    pthread_mutex_unlock(&g->lock);
}

/* ---------------------------------------------------------------- ops: the CPU's, with the arena open */

#define UNPAREN(...) __VA_ARGS__
#define GUARD_VOID(name, params, args, ptrs)                                                                   \
    static void g_##name params {                                                                              \
        const void *p_[] = {UNPAREN ptrs};                                                                     \
        dev_args(ctx, #name, p_, (int)(sizeof p_ / sizeof *p_));                                               \
        if (lost(ctx, #name)) return;                                                                          \
        enter(G(ctx));                                                                                         \
        af_backend_cpu.name args;                                                                              \
        leave(G(ctx));                                                                                         \
    }
#define GUARD_RET(type, bad, name, params, args, ptrs)                                                         \
    static type g_##name params {                                                                              \
        const void *p_[] = {UNPAREN ptrs};                                                                     \
        dev_args(ctx, #name, p_, (int)(sizeof p_ / sizeof *p_));                                               \
        if (lost(ctx, #name)) return bad;                                                                      \
        enter(G(ctx));                                                                                         \
        type r_ = af_backend_cpu.name args;                                                                    \
        leave(G(ctx));                                                                                         \
        return r_;                                                                                             \
    }

/* A product's output poisoned with NaN (AFINAR_FAULT nan=N: a device computing garbage). */
static void poison(const af_ctx *ctx, float *y, int64_t n) {
    if (!af_fault_matmul_nan()) return;
    enter(G(ctx));
    for (int64_t i = 0; i < n; i++) y[i] = NAN;
    leave(G(ctx));
}

GUARD_VOID(copy, (const af_ctx *ctx, void *dst, const void *src, size_t bytes), (ctx, dst, src, bytes), (dst, src))
GUARD_VOID(fill, (const af_ctx *ctx, float *x, float value, int64_t n), (ctx, x, value, n), (x))

static void g_matmul_xwt(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in,
                         int64_t out, int accumulate) {
    const void *p_[] = {y, x, w};
    dev_args(ctx, "matmul_xwt", p_, 3);
    if (lost(ctx, "matmul_xwt")) return;
    enter(G(ctx));
    af_backend_cpu.matmul_xwt(ctx, y, x, w, type, n, in, out, accumulate);
    leave(G(ctx));
    poison(ctx, y, n * out);
}

static void g_matmul_dyw(const af_ctx *ctx, float *dx, const float *dy, const void *w, uint32_t type, int64_t n,
                         int64_t in, int64_t out, int accumulate) {
    const void *p_[] = {dx, dy, w};
    dev_args(ctx, "matmul_dyw", p_, 3);
    if (lost(ctx, "matmul_dyw")) return;
    enter(G(ctx));
    af_backend_cpu.matmul_dyw(ctx, dx, dy, w, type, n, in, out, accumulate);
    leave(G(ctx));
    poison(ctx, dx, n * in);
}

static void g_matmul_xwt_parts(const af_ctx *ctx, const af_mm_part *parts, int n_parts) {
    for (int i = 0; i < n_parts; i++) {
        const void *p_[] = {parts[i].y, parts[i].x, parts[i].w};
        dev_args(ctx, "matmul_xwt_parts", p_, 3);
    }
    if (lost(ctx, "matmul_xwt_parts")) return;
    enter(G(ctx));
    af_backend_cpu.matmul_xwt_parts(ctx, parts, n_parts);
    leave(G(ctx));
    for (int i = 0; i < n_parts; i++) poison(ctx, parts[i].y, parts[i].n * parts[i].out);
}

static void g_matmul_rows(const af_ctx *ctx, int dyw, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                          int64_t in, int64_t out, int accumulate, int64_t block_rows) {
    const void *p_[] = {y, x, w};
    dev_args(ctx, "matmul_rows", p_, 3);
    if (lost(ctx, "matmul_rows")) return;
    enter(G(ctx));
    af_backend_cpu.matmul_rows(ctx, dyw, y, x, w, type, n, in, out, accumulate, block_rows);
    leave(G(ctx));
    poison(ctx, y, n * (dyw ? in : out));
}

GUARD_VOID(gemm_abt, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                      int accumulate), (ctx, c, a, b, m, n, k, accumulate), (c, a, b))
GUARD_VOID(gemm_ab, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                     int accumulate), (ctx, c, a, b, m, n, k, accumulate), (c, a, b))
GUARD_VOID(gemm_atb, (const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                      int accumulate), (ctx, c, a, b, m, n, k, accumulate), (c, a, b))
GUARD_VOID(rmsnorm_forward, (const af_ctx *ctx, float *y, float *rstd, const float *x, const float *w, int64_t n,
                             int64_t dim, float eps), (ctx, y, rstd, x, w, n, dim, eps), (y, rstd, x, w))
GUARD_VOID(rmsnorm_backward, (const af_ctx *ctx, float *dx, float *dw, const float *dy, const float *x, const float *w,
                              const float *rstd, int64_t n, int64_t dim), (ctx, dx, dw, dy, x, w, rstd, n, dim), (dx, dw, dy, x, w, rstd))
GUARD_VOID(rope_forward, (const af_ctx *ctx, float *x, const int32_t *pos, int64_t n, int64_t n_heads,
                          int64_t head_dim, float base, int neox, const float *ff),
           (ctx, x, pos, n, n_heads, head_dim, base, neox, ff), (x, pos, ff))
GUARD_VOID(rope_backward, (const af_ctx *ctx, float *dx, const int32_t *pos, int64_t n, int64_t n_heads,
                           int64_t head_dim, float base, int neox, const float *ff),
           (ctx, dx, pos, n, n_heads, head_dim, base, neox, ff), (dx, pos, ff))
GUARD_VOID(swiglu_forward, (const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n),
           (ctx, h, gate, up, n), (h, gate, up))
GUARD_VOID(swiglu_backward, (const af_ctx *ctx, float *d_gate, float *d_up, const float *dh, const float *gate,
                             const float *up, int64_t n), (ctx, d_gate, d_up, dh, gate, up, n), (d_gate, d_up, dh, gate, up))
GUARD_VOID(geglu_forward, (const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t n),
           (ctx, h, gate, up, n), (h, gate, up))
GUARD_VOID(geglu_backward, (const af_ctx *ctx, float *d_gate, float *d_up, const float *dh, const float *gate,
                            const float *up, int64_t n), (ctx, d_gate, d_up, dh, gate, up, n), (d_gate, d_up, dh, gate, up))
GUARD_VOID(attention_forward, (const af_ctx *ctx, float *out, float *lse, const float *q, const float *k,
                               const float *v, int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t kv_stride,
                               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window),
           (ctx, out, lse, q, k, v, n_q, q_pos0, n_kv, kv_stride, n_heads, n_kv_heads, head_dim, scale, window), (out, lse, q, k, v))
GUARD_VOID(attention_backward, (const af_ctx *ctx, float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *lse, const float *q, const float *k, const float *v,
                                int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                                int64_t head_dim, float scale, int64_t window),
           (ctx, dq, dk, dv, dout, out, lse, q, k, v, n_q, q_pos0, n_kv, n_heads, n_kv_heads, head_dim, scale, window), (dq, dk, dv, dout, out, lse, q, k, v))
GUARD_VOID(add, (const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n), (ctx, y, a, b, n), (y, a, b))
GUARD_VOID(scale, (const af_ctx *ctx, float *x, float s, int64_t n), (ctx, x, s, n), (x))
GUARD_VOID(add_bias, (const af_ctx *ctx, float *y, const float *b, int64_t n, int64_t out), (ctx, y, b, n, out), (y, b))
GUARD_VOID(embed, (const af_ctx *ctx, float *x, const int32_t *tokens, int64_t n, const void *w, uint32_t type,
                   int64_t H, float sc), (ctx, x, tokens, n, w, type, H, sc), (x, tokens, w))
GUARD_VOID(softcap, (const af_ctx *ctx, float *x, int64_t n, float c), (ctx, x, n, c), (x))
GUARD_VOID(rows_gather, (const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W),
           (ctx, dst, src, idx, k, W), (dst, src, idx))
GUARD_VOID(rows_scatter, (const af_ctx *ctx, float *dst, const float *src, const int32_t *idx, int64_t k, int64_t W),
           (ctx, dst, src, idx, k, W), (dst, src, idx))
GUARD_RET(int64_t, -1, count_nonfinite, (const af_ctx *ctx, const float *x, int64_t n), (ctx, x, n), (x))
GUARD_VOID(lora_forward, (const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                          const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float sc),
           (ctx, y, xa, x, drop_mask, A, B, n, in, out, r, sc), (y, xa, x, drop_mask, A, B))
GUARD_VOID(lora_backward, (const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                           const float *x, const float *xa, const float *drop_mask, const float *A, const float *B,
                           int64_t n, int64_t in, int64_t out, int32_t r, float sc),
           (ctx, dx, dA, dB, tmp, dy, x, xa, drop_mask, A, B, n, in, out, r, sc), (dx, dA, dB, tmp, dy, x, xa, drop_mask, A, B))
GUARD_VOID(lora_dropout_mask, (const af_ctx *ctx, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0,
                               int64_t n, int64_t in, float p), (ctx, mask, seed, layer, proj, t0, n, in, p), (mask))
GUARD_VOID(pool_forward, (const af_ctx *ctx, float *pooled, const float *hidden, const int32_t *seq_start, int32_t B,
                          int64_t H, af_head_pooling pool), (ctx, pooled, hidden, seq_start, B, H, pool), (pooled, hidden, seq_start))
GUARD_VOID(pool_backward, (const af_ctx *ctx, float *d_hidden, const float *d_pooled, const int32_t *seq_start,
                           int32_t B, int64_t H, af_head_pooling pool), (ctx, d_hidden, d_pooled, seq_start, B, H, pool), (d_hidden, d_pooled, seq_start))
GUARD_VOID(head_forward, (const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias,
                          int32_t B, int64_t H, int32_t C), (ctx, logits, pooled, W, bias, B, H, C), (logits, pooled, W, bias))
GUARD_VOID(head_backward, (const af_ctx *ctx, float *d_pooled, float *dW, float *dbias, const float *d_logits,
                           const float *pooled, const float *W, int32_t B, int64_t H, int32_t C),
           (ctx, d_pooled, dW, dbias, d_logits, pooled, W, B, H, C), (d_pooled, dW, dbias, d_logits, pooled, W))
GUARD_RET(double, NAN, ce_loss, (const af_ctx *ctx, float *d_logits, float *probs, const float *logits,
                                 const int32_t *labels, const float *class_w, int32_t B, int32_t C),
          (ctx, d_logits, probs, logits, labels, class_w, B, C), (d_logits, probs, logits, labels, class_w))
GUARD_RET(double, NAN, bce_loss, (const af_ctx *ctx, float *d_logits, const float *logits, const float *targets,
                                  int32_t B, int32_t C), (ctx, d_logits, logits, targets, B, C), (d_logits, logits, targets))
GUARD_VOID(lm_ce_rows, (const af_ctx *ctx, float *z, const int32_t *tgt, int64_t k, int64_t V, float cap,
                        float grad_scale, int grad, double *loss, int32_t *correct),
           (ctx, z, tgt, k, V, cap, grad_scale, grad, loss, correct), (z, tgt, loss, correct))
GUARD_VOID(adamw_step, (const af_ctx *ctx, af_adamw *o, float *P, const float *Gr, float *M, float *V, int64_t n,
                        float lr, const uint8_t *decay_mask), (ctx, o, P, Gr, M, V, n, lr, decay_mask), (P, Gr, M, V, decay_mask))
GUARD_RET(double, NAN, clip_grad_norm, (const af_ctx *ctx, float *Gr, int64_t n, double max_norm),
          (ctx, Gr, n, max_norm), (Gr))

static const af_backend guard_be = {
    .name = "guard",
    .alloc = g_alloc,
    .free = g_free,
    .import_weight = g_import_weight,
    .release_weight = g_release_weight,
    .upload = g_upload,
    .download = g_download,
    .copy = g_copy,
    .fill = g_fill,
    .sync = g_sync,
    .memory = g_memory,
    .matmul_xwt = g_matmul_xwt,
    .matmul_dyw = g_matmul_dyw,
    .matmul_xwt_parts = g_matmul_xwt_parts,
    .matmul_rows = g_matmul_rows,
    .gemm_abt = g_gemm_abt,
    .gemm_ab = g_gemm_ab,
    .gemm_atb = g_gemm_atb,
    .rmsnorm_forward = g_rmsnorm_forward,
    .rmsnorm_backward = g_rmsnorm_backward,
    .rope_forward = g_rope_forward,
    .rope_backward = g_rope_backward,
    .swiglu_forward = g_swiglu_forward,
    .swiglu_backward = g_swiglu_backward,
    .geglu_forward = g_geglu_forward,
    .geglu_backward = g_geglu_backward,
    .attention_forward = g_attention_forward,
    .attention_backward = g_attention_backward,
    .add = g_add,
    .scale = g_scale,
    .add_bias = g_add_bias,
    .embed = g_embed,
    .softcap = g_softcap,
    .rows_gather = g_rows_gather,
    .rows_scatter = g_rows_scatter,
    .count_nonfinite = g_count_nonfinite,
    .lora_forward = g_lora_forward,
    .lora_backward = g_lora_backward,
    .lora_dropout_mask = g_lora_dropout_mask,
    .pool_forward = g_pool_forward,
    .pool_backward = g_pool_backward,
    .head_forward = g_head_forward,
    .head_backward = g_head_backward,
    .ce_loss = g_ce_loss,
    .bce_loss = g_bce_loss,
    .lm_ce_rows = g_lm_ce_rows,
    .adamw_step = g_adamw_step,
    .clip_grad_norm = g_clip_grad_norm,
};

/* ---------------------------------------------------------------- the registry entry */

static void guard_info(af_device_info *d, size_t cap) {
    memset(d, 0, sizeof *d);
    snprintf(d->backend, sizeof d->backend, "guard");
    snprintf(d->name, sizeof d->name, "guard (CPU kernels, device memory PROT_NONE between ops)");
    snprintf(d->kind, sizeof d->kind, "debug");
    snprintf(d->features, sizeof d->features, "fault-injection");
    d->mem_total = d->mem_free = cap;
    d->max_alloc = GUARD_MAX_ALLOC;
}

static size_t guard_cap(void) {
    const uint64_t m = af_fault_mem();
    return m > 0 && m < ARENA ? (size_t)m : ARENA;
}

static af_status guard_enumerate(af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap) {
    (void)why, (void)why_cap;
    *n = 1;
    if (out && cap > 0) guard_info(&out[0], guard_cap());
    return AF_OK;
}

static af_status guard_open(int32_t index, af_device *dev) {
    if (index != 0) return af_fail(AF_ERR_NOT_FOUND, "device guard:%d: there is one guard device (guard)", (int)index);
    guard *g = af_calloc(1, sizeof *g);
    if (!g) return af_fail(AF_ERR_NOMEM, "device guard: out of memory");
    g->base = mmap(NULL, ARENA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g->base == MAP_FAILED) {
        free(g);
        return af_fail(AF_ERR_NOMEM, "device guard: cannot reserve %zu MiB of address space", ARENA >> 20);
    }
    g->cap = guard_cap();
    pthread_mutex_init(&g->lock, NULL);
    guard_info(&dev->info, g->cap);
    dev->be = &guard_be;
    dev->impl = g;
    g_guard = g;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    return AF_OK;
}

static void guard_close(af_device *dev) {
    guard *g = dev->impl;
    sigaction(SIGSEGV, &g_old_segv, NULL);
    g_guard = NULL;
    munmap(g->base, ARENA);
    pthread_mutex_destroy(&g->lock);
    free(g->b);
    free(g);
}

const af_backend_entry af_backend_entry_guard = {"guard", 1, guard_enumerate, guard_open, guard_close};
