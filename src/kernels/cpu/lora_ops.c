/*
 * lora_ops.c — the CPU kernels of the LoRA correction (kernels/train_ops.h): the forward
 * s·(dropout(x)·Aᵀ)·Bᵀ, its backward, and the dropout mask from the counter-based RNG
 * (core/core.h af_ctr_key). Moved from lora/lora.c (every op on activation memory is
 * a kernel the backend table points at). PEFT conventions: peft/tuners/lora/layer.py. Also a frozen
 * projection with its correction in one call (af_proj_lora_forward / af_proj_lora_backward: the
 * correction in the epilogue of the packed frozen product on AMX tiles).
 */
#include "kernels/train_ops.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

typedef struct dropout_job {
    float *mask;
    uint64_t seed;
    int32_t layer;
    int32_t proj;
    int64_t t0, in;
    float p;
} dropout_job;

/* Mask rows [r0, r1). */
static void dropout_rows(void *va, int64_t r0, int64_t r1, int tid) {
    const dropout_job *J = va;
    const float keep = 1.0f / (1.0f - J->p);
    for (int64_t t = r0; t < r1; t++) {
        uint64_t key = af_ctr_key(J->seed, (uint64_t)J->layer, (uint64_t)J->proj, (uint64_t)(J->t0 + t + 1));
        float *m = J->mask + t * J->in;
        for (int64_t i = 0; i < J->in; i++) m[i] = af_ctr_u01(key, (uint64_t)i) >= J->p ? keep : 0.0f;
    }
}

void af_lora_dropout_mask(const af_ctx *ctx, float *mask, uint64_t seed, int32_t layer, int32_t proj, int64_t t0, int64_t n,
                          int64_t in, float p) {
    /* every element is a pure function of its indices: threads cannot change the result */
    dropout_job J = {mask, seed, layer, proj, t0, in, p};
    af_threadpool_run(ctx->pool, n * in >= 65536 ? ctx->n_threads : 1, n, 0, dropout_rows, &J);
}

#define DROP_CHUNK_FLOATS 16384 /* stack floats for masked input rows in the forward (64 KiB) */
#define DROP_BLOCK_FLOATS (1 << 20) /* heap floats for them (4 MiB), whole chunks of the above */

/* xa[n, r] = dropout(x) · Aᵀ (af_lora_forward's first half). */
static void lora_xa(const af_ctx *ctx, float *xa, const float *x, const float *drop_mask, const float *A, int64_t n,
                    int64_t in, int32_t r) {
    if (!drop_mask) {
        af_gemm_abt(ctx, xa, x, A, n, r, in, 0); /* xa[n, r] = x · Aᵀ */
    } else {
        float buf[DROP_CHUNK_FLOATS];
        int64_t rows = DROP_CHUNK_FLOATS / in;
        if (rows < 1) {
            /* very wide input: one dot product at a time (accumulated in double) */
            for (int64_t t = 0; t < n; t++)
                for (int32_t j = 0; j < r; j++) {
                    double s = 0;
                    for (int64_t i = 0; i < in; i++) s += (double)x[t * in + i] * drop_mask[t * in + i] * A[j * in + i];
                    xa[t * r + j] = (float)s;
                }
        } else {
            /* Blocks of whole chunks of `rows` (up to DROP_BLOCK_FLOATS, heap): one product per block
             * instead of per chunk (chunks of 28 rows were ~12,700 products of a SmolLM2 SFT step at
             * ~50 GFLOP/s). The rows of a product do not depend on the rows beside it (kernels/matmul.h)
             * except in a product of <= AF_MM_DECODE_N rows (the decode path): a last chunk that short
             * stays a product of its own, so xa is bitwise that of one product per chunk. */
            const int64_t tail = n % rows <= AF_MM_DECODE_N ? n % rows : 0, main_rows = n - tail;
            int64_t per = rows > AF_MM_DECODE_N ? DROP_BLOCK_FLOATS / in / rows * rows : rows;
            float *blk = per > rows ? malloc(sizeof(float) * (size_t)(per * in)) : NULL;
            if (!blk) blk = buf, per = rows;
            for (int64_t t0 = 0; t0 < n;) {
                int64_t m = t0 < main_rows ? (main_rows - t0 < per ? main_rows - t0 : per) : n - t0;
                af_mul_elementwise(ctx, blk, x + t0 * in, drop_mask + t0 * in, m * in, 0);
                af_gemm_abt(ctx, xa + t0 * r, blk, A, m, r, in, 0);
                t0 += m;
            }
            if (blk != buf) free(blk);
        }
    }
}

/* y[n, out] += scale · xa · Bᵀ (af_lora_forward's second half). */
static void lora_add_b(const af_ctx *ctx, float *y, const float *xa, const float *B, int64_t n, int64_t out, int32_t r,
                       float scale) {
    if (scale == 1.0f) {
        af_gemm_abt(ctx, y, xa, B, n, out, r, 1); /* y += xa · Bᵀ */
        return;
    }
    /* y += scale · xa · Bᵀ: scale the (small) xa, multiply, and restore xa exactly by re-forming it
     * would lose bits, so instead scale a copy chunk-wise on the stack. */
    float buf[DROP_CHUNK_FLOATS];
    int64_t rows = DROP_CHUNK_FLOATS / r;
    for (int64_t t0 = 0; t0 < n; t0 += rows) {
        int64_t m = n - t0 < rows ? n - t0 : rows;
        for (int64_t i = 0; i < m * r; i++) buf[i] = scale * xa[t0 * r + i];
        af_gemm_abt(ctx, y + t0 * out, buf, B, m, out, r, 1);
    }
}

void af_lora_forward(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask, const float *A, const float *B,
                     int64_t n, int64_t in, int64_t out, int32_t r, float scale) {
    if (n <= 0) return;
    lora_xa(ctx, xa, x, drop_mask, A, n, in, r);
    lora_add_b(ctx, y, xa, B, n, out, r, scale);
}

/* The epilogue of the fused products below: C += a · Bp on a task's rows x columns while they are in
 * cache, on the AMX tiles: af_proj_lora_forward's y += xa · (scale·B)ᵀ and af_proj_lora_backward's
 * dx += t · A. a [n, r] (xa, or t = scale·dy·B: a_scale multiplies its rows first, in place) has its
 * rows packed as bf16 pairs (r/2 <= 16 per row) per task; the [r, C's columns] side is packed once as
 * bf16 panels. */
typedef struct lora_ep {
    const af_gp_bf16_ops *K;
    float *c;
    float *a;
    const uint32_t *bp; /* af_gp_pack_bf16_panels of scale·B (b_trans 1) or of A (b_trans 0): n = ldc, k = r */
    int64_t ldc, pstride;
    int32_t r;
    float a_scale;
    const af_gp_fused *then; /* an epilogue of the caller's after the correction (NULL: none) */
} lora_ep;

static void lora_ep_run(void *va, int64_t r0, int64_t mc, int64_t j0, int64_t nc) {
    const lora_ep *E = va;
    uint32_t ap[128 * 16] __attribute__((aligned(64))); /* mc <= 128 rows (gemm_packed.h), 16 dwords each */
    if (E->a_scale != 1.0f) /* one call per row block: the side product covers all columns (af_gp_fused) */
        for (int64_t i = r0 * E->r; i < (r0 + mc) * E->r; i++) E->a[i] *= E->a_scale;
    E->K->amx_pack_a(E->a + r0 * E->r, E->r, 0, E->r, mc, ap, 16);
    int cfg = 0;
    for (int64_t i0 = 0; i0 < mc; i0 += 32)
        for (int64_t j = j0; j < j0 + nc; j += AF_GP_NR)
            E->K->amx_ukernel((int)(mc - i0 < 32 ? mc - i0 : 32), E->r / 2, ap + i0 * 16, 16,
                              E->bp + j / AF_GP_NR * E->pstride, E->c + (r0 + i0) * E->ldc + j, E->ldc,
                              (int)(j0 + nc - j < AF_GP_NR ? j0 + nc - j : AF_GP_NR), 1, &cfg);
    if (E->then) E->then->ep(E->then->arg, r0, mc, j0, nc);
}

/* Whether a frozen product of n rows, ncols output columns and depth k (W of `type`) can carry a rank-r
 * correction in its epilogue: bf16 products on AMX tiles for both, r even and <= 32 (one tile row of
 * pairs), the packed path, not the int8 driver. */
static bool lora_fusable(const af_ctx *ctx, int64_t n, int64_t ncols, int64_t k, uint32_t type, int32_t r) {
    return n > AF_MM_DECODE_N && r % 2 == 0 && r <= 32 && af_gp_amx(ctx, k) && af_gp_amx(ctx, r) &&
           af_gp_usable(ctx, n, ncols, k) && !af_gp_i8_applies(ctx, ncols, k, type);
}

/* c [n, ncols] (+)= the frozen product of a (b_trans 1: x·Wᵀ, a [n, k]; 0: dy·W) with c += e·P added in
 * its epilogue (lora_ep): e [n, r], P [r, ncols] from p, bf16 panels packed here (p_trans 1: p is
 * [ncols, r], P = pᵀ; 0: p is [r, ncols]). With q (non-NULL) e is first computed by the product's
 * side product (af_gp_fused) from the same packed rows of a: e = a·Q, Q [k, r] from q (q_trans 1: q
 * is [r, k], Q = qᵀ: LoRA's A in x·Aᵀ; 0: q is [k, r]: B in dy·B), then multiplied by e_scale. The
 * separate products give the same bits when they take the packed path (af_gp_usable(n, r, k)); the
 * caller checks that. false: nothing written (no memory, or the packed GEMM declined:
 * af_gp_gemm_fused); the caller then runs the products apart. then (NULL: none) runs after the
 * correction on each block, as af_gp_fused's epilogue would; yb (with q; NULL: none) receives a's rows
 * in pairs (af_gp_fused). */
static bool lora_fused(const af_ctx *ctx, float *c, int64_t ncols, const float *a, int64_t k, const void *w,
                       uint32_t type, int b_trans, int64_t n, int accumulate, float *e, const float *p, int p_trans,
                       const float *q, int q_trans, float e_scale, int32_t r, const af_gp_fused *then,
                       uint32_t *yb) {
    const size_t pd = (size_t)af_gp_bf16_panels_dwords(ncols, r), qd = q ? (size_t)af_gp_bf16_panels_dwords(r, k) : 0;
    uint32_t *bp = af_malloc_aligned(sizeof(uint32_t) * (pd + qd));
    if (!bp) return false;
    lora_ep E = {.K = ctx->k->gp_bf16, .c = c, .a = e, .bp = bp, .ldc = ncols, .pstride = r / 2 * AF_GP_NR, .r = r,
                 .a_scale = q ? e_scale : 1.0f, .then = then};
    af_gp_fused f = {.ep = lora_ep_run, .arg = &E, .xbp = q ? bp + pd : NULL, .xc = q ? e : NULL, .xn = r, .yb = yb};
    const bool done = af_gp_pack_bf16_panels(ctx, bp, p, p_trans ? r : ncols, p_trans, ncols, r) &&
                      (!q || af_gp_pack_bf16_panels(ctx, bp + pd, q, q_trans ? k : r, q_trans, r, k)) &&
                      af_gp_gemm_fused(ctx, c, ncols, a, k, 1, w, type,
                                       (int64_t)af_row_bytes(type, b_trans ? k : ncols), b_trans, n, ncols, k,
                                       accumulate, ctx->n_threads, &f);
    af_free_aligned(bp);
    return done;
}

/* af_proj_lora_forward where lora_fusable holds, with `then` after the correction on each block:
 * false when the fused product declined (y not written; xa may be). */
static bool proj_lora_fwd_fused(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                                const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                                int64_t out, int32_t r, float scale, const af_gp_fused *then) {
    /* xa = x·Aᵀ from the frozen product's packed x when there is no dropout, else apart */
    const bool side = !drop_mask && af_gp_usable(ctx, n, r, in);
    if (!side) lora_xa(ctx, xa, x, drop_mask, A, n, in, r);
    float *bs = malloc(sizeof(float) * (size_t)(out * r)); /* scale·B, [out, r] */
    if (!bs) return false;
    for (int64_t i = 0; i < out * r; i++) bs[i] = scale * B[i];
    const bool done = lora_fused(ctx, y, out, x, in, w, type, 1, n, 0, xa, bs, 1, side ? A : NULL, 1, 1.0f, r, then, NULL);
    free(bs);
    return done;
}

void af_proj_lora_forward(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                          const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                          int64_t out, int32_t r, float scale, int64_t block_rows) {
    if (n <= 0) return;
    if (lora_fusable(ctx, n, out, in, type, r) &&
        proj_lora_fwd_fused(ctx, y, xa, x, drop_mask, w, type, A, B, n, in, out, r, scale, NULL))
        return;
    /* the composition: bit for bit what the walk runs without this op */
    af_matmul_rows(ctx, 0, y, x, w, type, n, in, out, 0, block_rows);
    af_lora_forward(ctx, y, xa, x, drop_mask, A, B, n, in, out, r, scale);
}

bool af_proj_lora_forward_then(const af_ctx *ctx, float *y, float *xa, const float *x, const float *drop_mask,
                               const void *w, uint32_t type, const float *A, const float *B, int64_t n, int64_t in,
                               int64_t out, int32_t r, float scale, const af_gp_fused *then) {
    return n > 0 && lora_fusable(ctx, n, out, in, type, r) &&
           proj_lora_fwd_fused(ctx, y, xa, x, drop_mask, w, type, A, B, n, in, out, r, scale, then);
}

/* Grow-only buffer of the calling thread for dy's paired rows (proj_lora_bwd_side; kept like the
 * packed GEMM's B buffer: a fresh allocation per projection faulted in up to 25 MB of pages each
 * time), released by af_lora_ops_release. */
static _Thread_local uint32_t *g_yb;
static _Thread_local size_t g_yb_dw;

static uint32_t *yb_get(size_t dwords) {
    if (dwords <= g_yb_dw) return g_yb;
    af_free_aligned(g_yb);
    g_yb = af_malloc_aligned(dwords * sizeof(uint32_t));
    g_yb_dw = g_yb ? dwords : 0;
    return g_yb;
}

void af_lora_ops_release(void) {
    af_free_aligned(g_yb);
    g_yb = NULL;
    g_yb_dw = 0;
}

typedef struct db_job {
    const af_ctx *ctx;
    float *ct;
    const float *ts;
    const uint32_t *yb;
    int64_t n, out;
    int32_t r;
} db_job;

/* Panels [p0, p1) of ct [r, out] = tsᵀ·dy from dy's paired rows. */
static void db_panels(void *va, int64_t p0, int64_t p1, int tid) {
    const db_job *J = va;
    const int64_t j0 = p0 * AF_GP_NR, j1 = p1 * AF_GP_NR < J->out ? p1 * AF_GP_NR : J->out;
    (void)af_gp_gemm_bf16_panels(J->ctx, J->ct + j0, J->out, J->ts, 1, J->r, J->yb + p0 * (J->n / 2 * AF_GP_NR),
                                 J->n / 2 * AF_GP_NR, 0, J->r, j1 - j0, J->n, 0);
}

/* dB += tsᵀ·dy with dy given as its paired rows yb (af_gp_fused): ct [r, out] = tsᵀ·dy over the
 * panels on the pool's threads, then dB += ctᵀ — af_gemm_atb's transposed AMX product (matmul.c) on
 * the same packed operands, bit for bit. false: no memory (nothing written). */
static bool db_from_panels(const af_ctx *ctx, float *dB, const float *ts, const uint32_t *yb, int64_t n, int64_t out,
                           int32_t r) {
    float *ct = malloc(sizeof(float) * (size_t)(r * out));
    if (!ct) return false;
    db_job J = {ctx, ct, ts, yb, n, out, r};
    af_threadpool_run(ctx->pool, ctx->n_threads, (out + AF_GP_NR - 1) / AF_GP_NR, 0, db_panels, &J);
    for (int64_t i = 0; i < out; i++)
        for (int32_t j = 0; j < r; j++) dB[i * r + j] += ct[j * out + i];
    free(ct);
    return true;
}

/* dB[out, r] += dyᵀ · (scale · xa), with t [n, r] as scratch (af_lora_backward's first product); dy's
 * rows from yb (its paired rows, proj_lora_bwd_side) where given. */
static void lora_db(const af_ctx *ctx, float *dB, float *t, const float *dy, const float *xa, int64_t n, int64_t out,
                    int32_t r, float scale, const uint32_t *yb) {
    for (int64_t i = 0; i < n * r; i++) t[i] = scale * xa[i];
    if (!yb || !db_from_panels(ctx, dB, t, yb, n, out, r)) af_gemm_atb(ctx, dB, dy, t, out, r, n, 1);
}

/* t[n, r] = scale · dy · B (af_lora_backward's second product). */
static void lora_t(const af_ctx *ctx, float *t, const float *dy, const float *B, int64_t n, int64_t out, int32_t r,
                   float scale) {
    af_gemm_ab(ctx, t, dy, B, n, r, out, 0);
    for (int64_t i = 0; i < n * r; i++) t[i] *= scale;
}

/* af_proj_lora_backward without a mask where lora_fusable and the side product (af_gp_usable(n, r,
 * out)) hold: dx (+)= dy·W with t = scale·dy·B formed by its side product from the same packed dy and
 * dx += t·A in its epilogue (then `then`), after it dA += tᵀ·x and dB. false: nothing written. */
static bool proj_lora_bwd_side(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                               const float *x, const float *xa, const void *w, uint32_t type, const float *A,
                               const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale,
                               int accumulate, const af_gp_fused *then) {
    /* dy's rows in pairs from the product's own packing of dy, for dB (where af_gemm_atb would take
     * matmul.c's transposed AMX product on these operands: the same panels, calls and bits) */
    uint32_t *yb = n % 2 == 0 && r <= 32 && out > 32 && af_gp_amx(ctx, n) && af_gp_usable(ctx, r, out, n)
                       ? yb_get((size_t)af_gp_bf16_panels_dwords(out, n))
                       : NULL;
    if (!lora_fused(ctx, dx, in, dy, out, w, type, 0, n, accumulate, tmp, A, 0, B, 0, scale, r, then, yb))
        return false;
    af_gemm_atb(ctx, dA, tmp, x, r, in, n, 1); /* dA[r, in] += tᵀ · x */
    lora_db(ctx, dB, tmp, dy, xa, n, out, r, scale, yb); /* t no longer needed: tmp is dB's scratch */
    return true;
}

void af_proj_lora_backward(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                           const float *x, const float *xa, const float *drop_mask, const void *w, uint32_t type,
                           const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r, float scale,
                           int accumulate, int64_t block_rows) {
    if (n <= 0) return;
    if (!dx || drop_mask || !lora_fusable(ctx, n, in, out, type, r)) { /* the composition, bit for bit */
        if (dx) af_matmul_rows(ctx, 1, dx, dy, w, type, n, in, out, accumulate, block_rows);
        af_lora_backward(ctx, dx, dA, dB, tmp, dy, x, xa, drop_mask, A, B, n, in, out, r, scale);
        return;
    }
    if (af_gp_usable(ctx, n, r, out) &&
        proj_lora_bwd_side(ctx, dx, dA, dB, tmp, dy, x, xa, w, type, A, B, n, in, out, r, scale, accumulate, NULL))
        return;
    /* dB, t = scale·dy·B (left in tmp) and dA; then dx (+)= dy·W with dx += t·A in its epilogue */
    af_lora_backward(ctx, NULL, dA, dB, tmp, dy, x, xa, NULL, A, B, n, in, out, r, scale);
    if (lora_fused(ctx, dx, in, dy, out, w, type, 0, n, accumulate, tmp, A, 0, NULL, 0, 1.0f, r, NULL, NULL)) return;
    af_matmul_rows(ctx, 1, dx, dy, w, type, n, in, out, accumulate, block_rows);
    af_gemm_ab(ctx, dx, tmp, A, n, in, r, 1);
}

bool af_proj_lora_backward_then(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy,
                                const float *x, const float *xa, const float *drop_mask, const void *w, uint32_t type,
                                const float *A, const float *B, int64_t n, int64_t in, int64_t out, int32_t r,
                                float scale, const af_gp_fused *then) {
    return n > 0 && dx && !drop_mask && lora_fusable(ctx, n, in, out, type, r) && af_gp_usable(ctx, n, r, out) &&
           proj_lora_bwd_side(ctx, dx, dA, dB, tmp, dy, x, xa, w, type, A, B, n, in, out, r, scale, 0, then);
}

void af_lora_backward(const af_ctx *ctx, float *dx, float *dA, float *dB, float *tmp, const float *dy, const float *x, const float *xa,
                      const float *drop_mask, const float *A, const float *B, int64_t n, int64_t in, int64_t out,
                      int32_t r, float scale) {
    if (n <= 0) return;
    float *t = tmp;           /* [n, r] */
    float *xd = tmp + n * r;  /* [n, in], only with a mask */
    lora_db(ctx, dB, t, dy, xa, n, out, r, scale, NULL);
    lora_t(ctx, t, dy, B, n, out, r, scale);
    /* dA[r, in] += tᵀ · dropout(x) */
    const float *xin = x;
    if (drop_mask) {
        af_mul_elementwise(ctx, xd, x, drop_mask, n * in, 0);
        xin = xd;
    }
    af_gemm_atb(ctx, dA, t, xin, r, in, n, 1);
    /* dx[n, in] += (t · A) ⊙ mask */
    if (!dx) return;
    if (!drop_mask) {
        af_gemm_ab(ctx, dx, t, A, n, in, r, 1);
    } else {
        af_gemm_ab(ctx, xd, t, A, n, in, r, 0);
        af_mul_elementwise(ctx, dx, xd, drop_mask, n * in, 1);
    }
}

