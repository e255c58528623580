/*
 * matmul.c — products with block-format weights (kernels/matmul.h): run-time dispatch between the
 * scalar / AVX2 / AVX-512 kernels (the context's table ctx->k->mm, kernels.h), the tiling and threaded drivers shared
 * by all paths, the scalar kernels, and the f32 GEMMs.
 *
 * Regimes of af_matmul_xwt (y[n,out] = x[n,in] · W[out,in]ᵀ):
 *  - n <= AF_MM_DECODE_N (decode), default: f32 decode (ops.decode_f32, matmul_avx2.c /
 *    matmul_avx512.c): each weight row is dequantized in registers to exactly the f32 values of
 *    af_dequantize_row and multiplied-added with the f32 activations. Exact up to f32 rounding
 *    (measured relative error ~5e-7, like the tile path). Rows in 16-row blocks, one contiguous range per thread.
 *  - n <= AF_MM_DECODE_N with int8 activations in the context (ctx->int8_act) on a SIMD path with a block type:
 *    x is quantized once to int8 per 32 values (matmul_internal.h af_mm_xq) and each weight row is
 *    unpacked in registers and dotted with integer instructions (vpdpbusd / vpmaddubsw), one f32
 *    scale per 16 or 32 values. Error: |y - y_exact| <= sum_k |W[o,k]| d_k / 2 with
 *    d_k = max|x| of k's 32-block / 127 (llama.cpp's scheme; moves SmolLM2 logits by up to ~0.6).
 *  - other n <= AF_MM_DECODE_N (scalar path, or the context hook AF_CTX_FUSED_DECODE off): a row chunk of W is
 *    dequantized to a stack buffer and dotted with each token in f32.
 *  - n > AF_MM_DECODE_N: a tile of ops.nr rows x KC columns of W is dequantized once into a
 *    transposed f32 panel (stack, L1/L2) and reused for every token by the register-tiled
 *    micro-kernel ops.panel. Exact up to f32 rounding.
 * af_matmul_xwt_parts runs several decode-regime products (q, k and v of a layer; gate and up) as
 * ONE parallel region over their concatenated row blocks, each product on the path and with the
 * bits a lone af_matmul_xwt gives it: one fork-join of the pool instead of one per product.
 * af_matmul_dyw dequantizes 32 KiB tiles of W and runs the same micro-kernel with P = W rows:
 * split over column chunks of dx (each thread owns its columns), or, for n <= 4 or out >= 4*in,
 * over row ranges of W streamed sequentially into per-thread dx copies summed at the end.
 * On the AVX2 and AVX-512 paths, large products (training, prompts) go to gemm_packed.c instead
 * (af_gp_usable decides): B packed once per call (dequantized; in column blocks of at most 64 MiB),
 * A packed per block, an 8x32 micro-kernel on contiguous operands.
 * Threads: the context's pool over disjoint output tiles (rows of y for xwt, columns of dx for dyw); the
 * f32 GEMMs also split tokens when there are too few column panels.
 */
#include "kernels/matmul.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

#define KC 256      /* columns of W per dequantized tile (a multiple of every block size) */
#define DOT_BUF 1024 /* floats in the dot path's row buffer (multiple of 256) */
#define PAR_MIN_WORK 200000 /* multiply-adds below which a call stays on one thread */

/* ---------------------------------------------------------------- scalar kernels */

/* C[t, j] (+)= sum_k X(t,k) P(k,j); plain C, see matmul_internal.h for the strides. */
static void panel_scalar(int64_t m, int64_t k, const float *x, int64_t sxt, int64_t sxk,
                         const float *p, int64_t spk, int nr, float *c, int64_t ldc, int accumulate) {
    for (int64_t t = 0; t < m; t++) {
        float acc[32] = {0};
        const float *xt = x + t * sxt;
        for (int64_t kk = 0; kk < k; kk++) {
            float xv = xt[kk * sxk];
            const float *pk = p + kk * spk;
            for (int j = 0; j < nr; j++) acc[j] += xv * pk[j];
        }
        float *ct = c + t * ldc;
        for (int j = 0; j < nr; j++) ct[j] = accumulate ? ct[j] + acc[j] : acc[j];
    }
}

/* Rows [r0, r0+nr) x columns [k0, k0+kc) of W to f32 (af_dequantize_row per row segment). */
static void dequant_scalar(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t r0,
                           int64_t nr, int64_t k0, int64_t kc, float *out, int64_t ldo) {
    int64_t bs = (int64_t)af_type_block_size(type), bb = (int64_t)af_type_block_bytes(type);
    for (int64_t r = 0; r < nr; r++)
        af_dequantize_row(type, w + (r0 + r) * row_bytes + k0 / bs * bb, out + r * ldo, kc);
}

static void dot_scalar(int64_t n, int64_t k, const float *x, int64_t ldx, const float *w, float *acc) {
    for (int64_t t = 0; t < n; t++) {
        float s = 0.f;
        for (int64_t i = 0; i < k; i++) s += x[t * ldx + i] * w[i];
        acc[t] += s;
    }
}

const af_mm_ops af_mm_ops_scalar = {16, panel_scalar, dequant_scalar, dot_scalar, NULL, NULL, NULL, NULL};

static bool is_block_type(uint32_t t) {
    return t != AF_TYPE_F32 && t != AF_TYPE_F16 && t != AF_TYPE_BF16 && af_type_block_size(t) >= 32;
}

static int threads_for(const af_ctx *ctx, double work) { return work >= PAR_MIN_WORK ? ctx->n_threads : 1; }

/* Arguments of the row-parallel jobs below (one struct for all; each job reads its fields). */
typedef struct mm_job {
    const af_mm_ops *ops;
    float *y;
    const float *x;
    const uint8_t *w;
    uint32_t type;
    int64_t n, in, out, rb, RB, mb, ntb;
    int accumulate;
    /* gemm_strided */
    int64_t ldc, sxt, sxk, spk;
    const float *p;
    /* dyw_rows */
    float *priv;
    int64_t nrb;
    int nt;
} mm_job;

/* ---------------------------------------------------------------- activation quantization */

/* x[n, in] -> af_mm_xq (see matmul_internal.h). `in` is a multiple of 32. */
static void quantize_x(const float *x, int64_t n, int64_t in, af_mm_xq *q) {
    for (int64_t t = 0; t < n; t++) {
        for (int64_t b = 0; b < q->nb32; b++) {
            const float *xb = x + t * in + 32 * b;
            float amax = 0.f;
            for (int j = 0; j < 32; j++) {
                float a = xb[j] < 0 ? -xb[j] : xb[j];
                if (a > amax) amax = a;
            }
            float d = amax / 127.f, id = amax > 0 ? 127.f / amax : 0.f;
            int8_t *qb = q->q + t * in + 32 * b;
            for (int g = 0; g < 2; g++) {
                int sq = 0;
                for (int j = 16 * g; j < 16 * g + 16; j++) {
                    float v = xb[j] * id;
                    int qi = (int)(v + (v >= 0 ? 0.5f : -0.5f));
                    qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
                    qb[j] = (int8_t)qi;
                    sq += qi;
                }
                q->sq[t * q->nb16 + 2 * b + g] = d * (float)sq;
            }
            q->d[t * q->nb32 + b] = d;
        }
    }
}

/* ---------------------------------------------------------------- drivers */

/* How a decode product is computed (chosen per product as af_matmul_xwt documents): int8
 * activations (ops.decode), f32 in-register dequantization (ops.decode_f32), or the dequant + dot
 * fallback (ops.dequant + ops.dot, DOT_BUF columns of a row at a time). */
enum { DEC_Q, DEC_F32, DEC_DOT };

/* One product of a decode region: y[n, out] (+)= x[n, in] · Wᵀ, its rows cut into blocks of RB
 * rows (16 for DEC_F32, 8 for DEC_Q, 1 for DEC_DOT); blocks [b0, b0 + nb) of the region's index
 * space are this product's. */
typedef struct dec_part {
    float *y;
    const float *x;
    const uint8_t *w;
    uint32_t type;
    int mode, accumulate, exact; /* exact: never DEC_Q */
    int64_t n, in, out, rb, RB, b0, nb;
    af_mm_xq q; /* DEC_Q: x quantized (matmul_internal.h) */
} dec_part;

/* Products per parallel region (af_matmul_xwt_parts runs more in several regions). */
#define DEC_MAX 16

typedef struct dec_job {
    const af_mm_ops *ops;
    int np;
    dec_part p[DEC_MAX];
} dec_job;

/* Rows [o0, o1) of a DEC_DOT product: per row, dequantize DOT_BUF columns to the stack and dot
 * with each token (f32). */
static void dot_rows(const af_mm_ops *ops, const dec_part *P, int64_t o0, int64_t o1) {
    const int64_t n = P->n, in = P->in, out = P->out;
    const size_t rb = (size_t)P->rb;
    for (int64_t o = o0; o < o1; o++) {
        float buf[DOT_BUF];
        float acc[AF_MM_DECODE_N] = {0};
        for (int64_t k0 = 0; k0 < in; k0 += DOT_BUF) {
            int64_t kc = in - k0 < DOT_BUF ? in - k0 : DOT_BUF;
            const float *wr = buf;
            if (P->type == AF_TYPE_F32)
                wr = (const float *)(const void *)(P->w + o * rb) + k0;
            else
                ops->dequant(P->type, P->w, (int64_t)rb, o, 1, k0, kc, buf, kc);
            ops->dot(n, kc, P->x + k0, in, wr, acc);
        }
        for (int64_t t = 0; t < n; t++) P->y[t * out + o] = P->accumulate ? P->y[t * out + o] + acc[t] : acc[t];
    }
}

/* Blocks [b0, b1) of the region: each block is RB rows of one product, computed by that
 * product's kernel. A row's arithmetic does not depend on the block or thread that computes it. */
static void dec_job_run(void *va, int64_t b0, int64_t b1, int tid) {
    const dec_job *J = va;
    int i = 0;
    while (b0 < b1) {
        while (b0 >= J->p[i].b0 + J->p[i].nb) i++;
        const dec_part *P = &J->p[i];
        const int64_t e = b1 < P->b0 + P->nb ? b1 : P->b0 + P->nb;
        const int64_t o0 = (b0 - P->b0) * P->RB, o1 = (e - P->b0) * P->RB < P->out ? (e - P->b0) * P->RB : P->out;
        if (P->mode == DEC_Q)
            J->ops->decode(P->type, P->w, P->rb, o0, o1, &P->q, P->n, P->y, P->out, P->accumulate);
        else if (P->mode == DEC_F32)
            J->ops->decode_f32(P->type, P->w, P->rb, o0, o1, P->x, P->in, P->n, P->y, P->out, P->accumulate);
        else
            dot_rows(J->ops, P, o0, o1);
        b0 = e;
    }
}

/* The path of a decode product (af_matmul_xwt's order: int8 activations when the context asks for
 * them (int8 != 0) and the kernel handles the type, else the fused f32 kernel when it handles the
 * type, else dequant + dot) and its block size. */
static void dec_choose(const af_ctx *ctx, const af_mm_ops *ops, dec_part *P, int int8) {
    P->mode = DEC_DOT;
    af_mm_xq probe = {.in = P->in, .nb32 = P->in / 32, .nb16 = P->in / 16};
    if (int8 && ctx->int8_act && !P->exact && ops->decode && is_block_type(P->type) &&
        ops->decode(P->type, P->w, P->rb, 0, 0, &probe, P->n, P->y, P->out, P->accumulate))
        P->mode = DEC_Q;
    else if (ctx->fused_decode && ops->decode_f32 &&
             ops->decode_f32(P->type, P->w, P->rb, 0, 0, P->x, P->in, P->n, P->y, P->out, P->accumulate))
        P->mode = DEC_F32;
    P->RB = P->mode == DEC_Q ? 8 : P->mode == DEC_F32 ? 16 : 1;
}

/* Quantizes the x of J's DEC_Q products (once per distinct x, n, in) into one allocation, returned
 * for af_free_aligned (NULL when none is needed). On allocation failure those products take their
 * f32 path instead (as a lone af_matmul_xwt does). */
static void *dec_quantize(const af_ctx *ctx, const af_mm_ops *ops, dec_job *J) {
    size_t bytes = 0;
    for (int i = 0; i < J->np; i++) {
        const dec_part *P = &J->p[i];
        if (P->mode == DEC_Q) /* d, sq (floats), q (bytes), room to align the next */
            bytes += (size_t)(P->n * (P->in / 32 + P->in / 16)) * sizeof(float) + (size_t)(P->n * P->in) + 64;
    }
    if (!bytes) return NULL;
    uint8_t *mem = af_malloc_aligned(bytes), *at = mem;
    for (int i = 0; i < J->np; i++) {
        dec_part *P = &J->p[i];
        if (P->mode != DEC_Q) continue;
        if (!mem) {
            dec_choose(ctx, ops, P, 0);
            continue;
        }
        int same = -1;
        for (int j = 0; j < i && same < 0; j++)
            if (J->p[j].mode == DEC_Q && J->p[j].x == P->x && J->p[j].n == P->n && J->p[j].in == P->in) same = j;
        if (same >= 0) {
            P->q = J->p[same].q;
            continue;
        }
        af_mm_xq *q = &P->q;
        q->in = P->in;
        q->nb32 = P->in / 32;
        q->nb16 = P->in / 16;
        q->d = (float *)(void *)at;
        q->sq = q->d + P->n * q->nb32;
        q->q = (int8_t *)(q->sq + P->n * q->nb16);
        at = (uint8_t *)(q->q + P->n * P->in);
        at += (64 - (uintptr_t)at % 64) % 64;
        quantize_x(P->x, P->n, P->in, q);
    }
    return mem;
}

/* Runs the np (<= DEC_MAX) decode products of J (fields y .. accumulate and rb set) as one parallel
 * region over their concatenated row blocks: threads when their multiply-adds together reach
 * PAR_MIN_WORK. Each product's rows get the bits a lone call gives them (same kernel, same
 * per-row order; a row never depends on how the rows are split). */
static void dec_run(const af_ctx *ctx, dec_job *J) {
    const af_mm_ops *ops = J->ops;
    for (int i = 0; i < J->np; i++) dec_choose(ctx, ops, &J->p[i], 1);
    void *mem = dec_quantize(ctx, ops, J);
    int64_t blocks = 0;
    double work = 0;
    for (int i = 0; i < J->np; i++) {
        dec_part *P = &J->p[i];
        P->b0 = blocks;
        P->nb = (P->out + P->RB - 1) / P->RB;
        blocks += P->nb;
        work += (double)P->n * (double)P->in * (double)P->out;
    }
    af_threadpool_run(ctx->pool, threads_for(ctx, work), blocks, 0, dec_job_run, J);
    af_free_aligned(mem);
}

/* Tiles [i0, i1) of gemm_strided (n = m rows, out = n columns, in = k). */
static void strided_job(void *va, int64_t i0, int64_t i1, int tid) {
    const mm_job *J = va;
    const af_mm_ops *ops = J->ops;
    const int NR = ops->nr;
    const int64_t m = J->n, n = J->out, k = J->in, mb = J->mb, ntb = J->ntb;
    for (int64_t idx = i0; idx < i1; idx++) {
        int64_t j0 = idx / ntb * NR, t0 = idx % ntb * mb;
        int nr = (int)(n - j0 < NR ? n - j0 : NR);
        int64_t mm = m - t0 < mb ? m - t0 : mb;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            int64_t kc = k - k0 < KC ? k - k0 : KC;
            ops->panel(mm, kc, J->x + t0 * J->sxt + k0 * J->sxk, J->sxt, J->sxk, J->p + k0 * J->spk + j0, J->spk,
                       nr, J->y + t0 * J->ldc + j0, J->ldc, k0 ? 1 : J->accumulate);
        }
    }
}

/* Generic strided GEMM on panels: C[m, n] (+)= X[m, k] · P[k, n] with X(t,kk) = x[t*sxt + kk*sxk],
 * P(kk,j) = p[kk*spk + j]. Threads over (panel of nr columns) x (block of tokens). */
static void gemm_strided(const af_ctx *ctx, const af_mm_ops *ops, float *c, int64_t ldc, const float *x, int64_t sxt,
                         int64_t sxk, const float *p, int64_t spk, int64_t m, int64_t n, int64_t k,
                         int accumulate) {
    const int NR = ops->nr;
    int64_t npan = (n + NR - 1) / NR;
    int nth = threads_for(ctx, (double)m * n * k);
    int64_t mb = m;
    if (npan < 2 * nth) mb = ((m + nth - 1) / nth + 7) / 8 * 8;
    if (mb < 1) mb = 1;
    int64_t ntb = (m + mb - 1) / mb;
    mm_job J = {.ops = ops, .y = c, .ldc = ldc, .x = x, .sxt = sxt, .sxk = sxk, .p = p, .spk = spk,
                .n = m, .out = n, .in = k, .mb = mb, .ntb = ntb, .accumulate = accumulate};
    af_threadpool_run(ctx->pool, nth, npan * ntb, 0, strided_job, &J);
}

static void zero_or_keep(float *c, int64_t m, int64_t n, int accumulate) {
    if (!accumulate && m > 0 && n > 0) memset(c, 0, (size_t)(m * n) * sizeof(float));
}

/* n > AF_MM_DECODE_N: dequantize ops.nr rows x KC columns, transpose into a stack panel, run the
 * micro-kernel over the tokens. */
static void tiles_job(void *va, int64_t i0, int64_t i1, int tid);
static void xwt_tiles(const af_ctx *ctx, const af_mm_ops *ops, float *y, const float *x, const uint8_t *w,
                      uint32_t type, int64_t n, int64_t in, int64_t out, size_t rb, int accumulate) {
    const int NR = ops->nr;
    int64_t ntile = (out + NR - 1) / NR;
    int nth = threads_for(ctx, (double)n * in * out);
    int64_t mb = n;
    if (ntile < 2 * nth) mb = ((n + nth - 1) / nth + 7) / 8 * 8;
    int64_t ntb = (n + mb - 1) / mb;
    mm_job J = {.ops = ops, .y = y, .x = x, .w = w, .type = type, .n = n, .in = in, .out = out,
                .rb = (int64_t)rb, .mb = mb, .ntb = ntb, .accumulate = accumulate};
    af_threadpool_run(ctx->pool, nth, ntile * ntb, 0, tiles_job, &J);
}

/* Tiles [i0, i1) of xwt_tiles. */
static void tiles_job(void *va, int64_t i0, int64_t i1, int tid) {
    const mm_job *J = va;
    const af_mm_ops *ops = J->ops;
    const int NR = ops->nr;
    const int64_t n = J->n, in = J->in, out = J->out, mb = J->mb, ntb = J->ntb;
    const uint8_t *w = J->w;
    const uint32_t type = J->type;
    const size_t rb = (size_t)J->rb;
    const float *x = J->x;
    float *y = J->y;
    const int accumulate = J->accumulate;
    for (int64_t idx = i0; idx < i1; idx++) {
        float pk[KC * 32] __attribute__((aligned(64)));
        float row[KC] __attribute__((aligned(64)));
        int64_t o0 = idx / ntb * NR, t0 = idx % ntb * mb;
        int nr = (int)(out - o0 < NR ? out - o0 : NR);
        int64_t mm = n - t0 < mb ? n - t0 : mb;
        for (int64_t k0 = 0; k0 < in; k0 += KC) {
            int64_t kc = in - k0 < KC ? in - k0 : KC;
            for (int r = 0; r < nr; r++) {
                ops->dequant(type, w, (int64_t)rb, o0 + r, 1, k0, kc, row, kc);
                for (int64_t k = 0; k < kc; k++) pk[k * NR + r] = row[k];
            }
            ops->panel(mm, kc, x + t0 * in + k0, in, 1, pk, NR, nr, y + t0 * out + o0, out,
                       k0 ? 1 : accumulate);
        }
    }
}

/* ---------------------------------------------------------------- public API */

int af_matmul_packed_path(const af_ctx *ctx, int64_t n, int64_t in, int64_t out) {
    return af_gp_usable(ctx, n, out, in);
}

void af_matmul_xwt(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in,
                   int64_t out, int accumulate) {
    if (n <= 0 || out <= 0) return;
    if (in <= 0) {
        zero_or_keep(y, n, out, accumulate);
        return;
    }
    const af_mm_ops *ops = ctx->k->mm;
    size_t rb = af_row_bytes(type, in);
    if (n <= AF_MM_DECODE_N) {
        dec_job J = {.ops = ops, .np = 1};
        J.p[0] = (dec_part){.y = y, .x = x, .w = (const uint8_t *)w, .type = type, .accumulate = accumulate,
                            .n = n, .in = in, .out = out, .rb = (int64_t)rb};
        dec_run(ctx, &J);
        return;
    }
    if (af_gp_usable(ctx, n, out, in) &&
        af_gp_gemm(ctx, y, out, x, in, 1, w, type, (int64_t)rb, 1, n, out, in, accumulate,
                   threads_for(ctx, (double)n * in * out)))
        return;
    xwt_tiles(ctx, ops, y, x, (const uint8_t *)w, type, n, in, out, rb, accumulate);
}

void af_matmul_xwt_parts(const af_ctx *ctx, const af_mm_part *parts, int n_parts) {
    dec_job J = {.ops = ctx->k->mm};
    for (int i = 0; i < n_parts; i++) {
        const af_mm_part *a = &parts[i];
        if (a->n <= 0 || a->out <= 0) continue;
        if (a->n > AF_MM_DECODE_N || a->in <= 0) { /* a call of its own */
            af_matmul_xwt(ctx, a->y, a->x, a->w, a->type, a->n, a->in, a->out, 0);
            continue;
        }
        const dec_part P = {.y = a->y, .x = a->x, .w = (const uint8_t *)a->w, .type = a->type, .n = a->n,
                            .in = a->in, .out = a->out, .rb = (int64_t)af_row_bytes(a->type, a->in), .exact = a->exact};
        if (!ctx->decode_groups) { /* a region of its own */
            dec_job J1 = {.ops = ctx->k->mm, .np = 1, .p = {P}};
            dec_run(ctx, &J1);
            continue;
        }
        J.p[J.np++] = P;
        if (J.np == DEC_MAX) {
            dec_run(ctx, &J);
            J.np = 0;
        }
    }
    if (J.np > 0) dec_run(ctx, &J);
}

/* Thread `tid` of dyw_rows (one index per thread): its contiguous range of RB-row blocks into its
 * own dx copy (thread 0: dx itself). */
static void dyw_rows_job(void *va, int64_t t0, int64_t t1, int tid) {
    const mm_job *J = va;
    const af_mm_ops *ops = J->ops;
    const int NR = ops->nr;
    const int64_t RB = 32, CW = 256; /* 32 KiB dequantized tile */
    const int64_t n = J->n, in = J->in, out = J->out, nrb = J->nrb;
    const size_t per = (size_t)(n * in);
    const int nt = J->nt;
    float buf[RB * CW] __attribute__((aligned(64)));
    for (int64_t t = t0; t < t1; t++) { /* t is the share (== tid, or all shares on one thread) */
        float *dst = t == 0 ? J->y : J->priv + (size_t)(t - 1) * per;
        if (t != 0 || !J->accumulate) memset(dst, 0, per * sizeof(float));
        for (int64_t b = nrb * t / nt; b < nrb * (t + 1) / nt; b++) {
            int64_t o0 = b * RB, ob = out - o0 < RB ? out - o0 : RB;
            for (int64_t k0 = 0; k0 < in; k0 += CW) {
                int64_t kc = in - k0 < CW ? in - k0 : CW;
                ops->dequant(J->type, J->w, J->rb, o0, ob, k0, kc, buf, kc);
                for (int64_t p0 = 0; p0 < kc; p0 += NR) {
                    int nr = (int)(kc - p0 < NR ? kc - p0 : NR);
                    ops->panel(n, ob, J->x + o0, out, 1, buf + p0, kc, nr, dst + k0 + p0, in, 1);
                }
            }
        }
    }
}

/* Elements [i0, i1) of dx: the private copies added in thread order (fixed for a given team). */
static void dyw_sum_job(void *va, int64_t i0, int64_t i1, int tid) {
    const mm_job *J = va;
    const size_t per = (size_t)(J->n * J->in);
    float *dx = J->y;
    for (int64_t i = i0; i < i1; i++) {
        float v = dx[i];
        for (int j = 0; j < J->nt - 1; j++) v += J->priv[(size_t)j * per + (size_t)i];
        dx[i] = v;
    }
}

/* dyw split over rows of W: each thread streams a contiguous range of rows (sequential reads of
 * W, good for many rows or few tokens) into a private dx copy; the copies are summed at the end.
 * The result depends on the team size (the number of partial sums), as it did with the OpenMP team before the pool;
 * a nested call has a team of 1. False on allocation failure. */
static bool dyw_rows(const af_ctx *ctx, const af_mm_ops *ops, float *dx, const float *dy, const uint8_t *w,
                     uint32_t type, int64_t n, int64_t in, int64_t out, size_t rb, int accumulate) {
    const int64_t RB = 32;
    int nt = af_threadpool_team(ctx->pool, threads_for(ctx, (double)n * in * out));
    size_t per = (size_t)(n * in);
    float *priv = NULL;
    if (nt > 1 && !(priv = af_malloc_aligned((size_t)(nt - 1) * per * sizeof(float)))) return false;
    mm_job J = {.ops = ops, .y = dx, .x = dy, .w = w, .type = type, .n = n, .in = in, .out = out,
                .rb = (int64_t)rb, .accumulate = accumulate, .priv = priv, .nrb = (out + RB - 1) / RB, .nt = nt};
    af_threadpool_run(ctx->pool, nt, nt, 0, dyw_rows_job, &J);
    if (nt > 1) af_threadpool_run(ctx->pool, nt, (int64_t)per, 0, dyw_sum_job, &J);
    af_free_aligned(priv);
    return true;
}

/* Column chunks x token blocks [i0, i1) of af_matmul_dyw's general path (in = W columns). */
static void dyw_chunks_job(void *va, int64_t i0, int64_t i1, int tid) {
    const mm_job *J = va;
    const af_mm_ops *ops = J->ops;
    const int NR = ops->nr;
    const int64_t n = J->n, in = J->in, out = J->out, mb = J->mb, ntb = J->ntb, CW = J->RB, OB = 8192 / CW;
    for (int64_t idx = i0; idx < i1; idx++) {
        float buf[8192] __attribute__((aligned(64)));
        int64_t k0 = idx / ntb * CW, t0 = idx % ntb * mb;
        int64_t kc = in - k0 < CW ? in - k0 : CW;
        int64_t mm = n - t0 < mb ? n - t0 : mb;
        for (int64_t o0 = 0; o0 < out; o0 += OB) {
            int64_t ob = out - o0 < OB ? out - o0 : OB;
            ops->dequant(J->type, J->w, J->rb, o0, ob, k0, kc, buf, kc);
            for (int64_t p0 = 0; p0 < kc; p0 += NR) {
                int nr = (int)(kc - p0 < NR ? kc - p0 : NR);
                ops->panel(mm, ob, J->x + t0 * out + o0, out, 1, buf + p0, kc, nr,
                           J->y + t0 * in + k0 + p0, in, (o0 > 0) || J->accumulate);
            }
        }
    }
}

void af_matmul_dyw(const af_ctx *ctx, float *dx, const float *dy, const void *w, uint32_t type, int64_t n, int64_t in,
                   int64_t out, int accumulate) {
    if (n <= 0 || in <= 0) return;
    if (out <= 0) {
        zero_or_keep(dx, n, in, accumulate);
        return;
    }
    const af_mm_ops *ops = ctx->k->mm;
    size_t rb = af_row_bytes(type, in);
    int64_t bs = (int64_t)af_type_block_size(type);
    /* column chunk CW x row block OB of W dequantized per step: 32 KiB on the stack */
    const int64_t CW = bs == 256 ? 256 : 128;
    int64_t nchunk = (in + CW - 1) / CW;
    int nth = threads_for(ctx, (double)n * in * out);
    int64_t mb = n;
    if (nchunk < 2 * nth) mb = ((n + nth - 1) / nth + 7) / 8 * 8;
    int64_t ntb = (n + mb - 1) / mb;
    const uint8_t *wb = (const uint8_t *)w;
    if (n > AF_MM_DECODE_N && af_gp_usable(ctx, n, in, out) &&
        af_gp_gemm(ctx, dx, in, dy, out, 1, w, type, (int64_t)rb, 0, n, in, out, accumulate, nth))
        return;
    /* few tokens or many rows: stream W rows (private accumulators) instead of column chunks */
    if ((n <= AF_MM_DECODE_N || out >= 4 * in) && (double)n * in * nth <= 4e6 &&
        dyw_rows(ctx, ops, dx, dy, wb, type, n, in, out, rb, accumulate))
        return;
    mm_job J = {.ops = ops, .y = dx, .x = dy, .w = wb, .type = type, .n = n, .in = in, .out = out,
                .rb = (int64_t)rb, .RB = CW, .mb = mb, .ntb = ntb, .accumulate = accumulate};
    af_threadpool_run(ctx->pool, nth, nchunk * ntb, 0, dyw_chunks_job, &J);
}

void af_gemm_abt(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                 int accumulate) {
    af_matmul_xwt(ctx, c, a, b, AF_TYPE_F32, m, k, n, accumulate);
}

void af_gemm_ab(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        zero_or_keep(c, m, n, accumulate);
        return;
    }
    const af_mm_ops *ops = ctx->k->mm;
    if (af_gp_usable(ctx, m, n, k) &&
        af_gp_gemm(ctx, c, n, a, k, 1, b, AF_TYPE_F32, n * (int64_t)sizeof(float), 0, m, n, k, accumulate,
                   threads_for(ctx, (double)m * n * k)))
        return;
    gemm_strided(ctx, ops, c, n, a, k, 1, b, n, m, n, k, accumulate);
}

/* af_gemm_atb with bf16 products on AMX tiles and at most 32 columns (LoRA's dB[out, r] = dyᵀ·(s·xa)):
 * Cᵀ[n, m] = Bᵀ·A formed first, then C (+)= its transpose. The packed A of C = Aᵀ·B would be read
 * from A's columns (32 rows of A's storage per tile row, each far apart: dy's rows are `out` floats),
 * Bᵀ·A reads A by rows as the B operand of a product of n rows. Measured on an Emerald Rapids guest
 * (dy [8192, 1536] and [8192, 576], r = 16, 2 threads): 1.5-1.7x. The sums are those of the same
 * bf16 products in the same order of k; only C's own value is added after them instead of before
 * (accumulate). false when this does not apply (the caller multiplies as usual). */
static bool atb_transposed(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n,
                           int64_t k, int accumulate) {
    if (n > 32 || m <= 32 || !af_gp_amx(ctx, k) || !af_gp_usable(ctx, n, m, k)) return false;
    float *ct = malloc(sizeof(float) * (size_t)(n * m));
    if (!ct) return false;
    /* ct[n, m] = Bᵀ·A: A operand b (column-major [n, k]: sat 1, sak n), B from the rows of a [k, m] */
    if (!af_gp_gemm(ctx, ct, m, b, 1, n, a, AF_TYPE_F32, m * (int64_t)sizeof(float), 0, n, m, k, 0,
                    threads_for(ctx, (double)m * n * k))) {
        free(ct);
        return false;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * n + j] = accumulate ? c[i * n + j] + ct[j * m + i] : ct[j * m + i];
    free(ct);
    return true;
}

void af_gemm_atb(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                 int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        zero_or_keep(c, m, n, accumulate);
        return;
    }
    const af_mm_ops *ops = ctx->k->mm;
    if (atb_transposed(ctx, c, a, b, m, n, k, accumulate)) return;
    if (af_gp_usable(ctx, m, n, k) &&
        af_gp_gemm(ctx, c, n, a, 1, m, b, AF_TYPE_F32, n * (int64_t)sizeof(float), 0, m, n, k, accumulate,
                   threads_for(ctx, (double)m * n * k)))
        return;
    gemm_strided(ctx, ops, c, n, a, 1, m, b, n, m, n, k, accumulate);
}
