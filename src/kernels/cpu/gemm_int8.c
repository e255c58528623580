/*
 * gemm_int8.c — int8 products of the frozen weights for training contexts with matmul precision
 * "int8" (gemm_int8.h: the method, its error bound and its source). The loop structure is
 * gemm_packed.c's (Goto & van de Geijn, BLIS):
 *  - B is quantized and packed once per call, by all threads, into column panels of 32 columns:
 *    [N/32][K4][32] dwords, a dword holding four consecutive k of one column as u8 (q + 128), K4 =
 *    ceil(K/4), with one scale per column (x·Wᵀ) or per depth index (dy·W, then folded into A).
 *  - Each task (a block of at most 128 rows of A x a group of panels) quantizes its rows of A
 *    whole (s8 micro-panels [K4][8] dwords, one scale and, per depth chunk, one row sum per row),
 *    then runs the 8 x 32 VPDPBUSD micro-kernel chunk by chunk (AF_I8_KC deep, one scale per row and chunk);
 *    with AMX (the table's amx_ukernel, gemm_amx.c) the rows stay whole (row-major s8, the tiles' A
 *    layout) and 32 x 32 blocks run on AMX-INT8 tiles, bitwise the same C (exact int32 sums, the same
 *    scaling)
 *  - The u8 offset of B is removed with 128 x the row sums of A's chunk; the tile is scaled and
 *    stored (or added) in f32 after each chunk, so C is final after the last chunk (af_gp_fused's
 *    epilogue runs then, as in gemm_packed.c).
 * Each C element is computed by one task in a fixed order, so results do not depend on nth, and
 * rows are quantized independently, so they do not depend on how the rows are split either.
 */
#include "kernels/cpu/gemm_int8.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/kernels.h"
#include "kernels/quant.h"

#include <string.h>

#define I8_MC 128                        /* rows of A per task */
#define I8_MAX_B ((size_t)64 << 20)      /* the packing cap of gemm_packed.c (MAX_B) */
#define I8_ASPECT 8                      /* gemm_packed.c GP_MAX_ASPECT: vocabulary-shaped beyond */

static int64_t quads(int64_t k) { return (k + 3) / 4; }
static int64_t panels(int64_t n) { return (n + AF_GP_NR - 1) / AF_GP_NR; }

bool af_gp_i8_applies(const af_ctx *ctx, int64_t n, int64_t k, uint32_t type) {
    if (!ctx->i8 || !ctx->k->gp_i8 || type == AF_TYPE_F32) return false;
    if (n > I8_ASPECT * k || k > I8_ASPECT * n) return false;
    const size_t cap = ctx->gp_max_b ? ctx->gp_max_b : I8_MAX_B;
    return (size_t)panels(n) * AF_GP_NR * (size_t)quads(k) * 4 <= cap;
}

#if defined(__x86_64__)

typedef struct i8_job {
    const af_kernels *kt;
    const af_gp_i8_ops *op;
    uint32_t *bp;  /* [npan][k4][32] */
    float *sb;     /* [npan * 32]: column scales (ones for dy·W) */
    float *sw;     /* [k4 * 4]: dy·W's depth scales, folded into A (NULL for x·Wᵀ) */
    const uint8_t *w;
    uint32_t type;
    size_t ldw;
    int b_trans, acc, team;
    float *c;
    const float *a;
    int64_t ldc, sat, sak, m, n, k, k4, nch, npan, nmb, ngr, gsz;
    const af_gp_fused *f;
    uint8_t *scratch; /* team slots of `slot` bytes (64-byte multiples), by tid */
    af_gp_claim *next; /* af_gp_deal_next's claim counters (NULL: static dealing) */
    size_t slot;
} i8_job;

/* 1 / scale of a row of max |value| amax: 0 for a zero row (all q = 0), NaN stays NaN. */
static float inv_of(float amax) { return amax > 0.0f ? 127.0f / amax : amax == 0.0f ? 0.0f : amax; }

/* Panels [p0, p1) of Wᵀ from W[N, K], 8 rows of W (columns of B) at a time: the row dequantized
 * whole, scaled by its own max, transposed as dwords into the panel (mm->tpack moves bits). */
static void pack_trans(const i8_job *J, int64_t p0, int64_t p1, int tid) {
    const int64_t k = J->k, k4 = J->k4, rowb = k4 * 4;
    float *rows = (float *)(void *)(J->scratch + (size_t)tid * J->slot); /* 8 x k floats, 8 x rowb bytes */
    uint8_t *q = (uint8_t *)(rows + 8 * k);
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *dst = J->bp + p * k4 * AF_GP_NR;
        for (int64_t r0 = 0; r0 < AF_GP_NR; r0 += 8) {
            const int64_t j0 = p * AF_GP_NR + r0, rr = J->n - j0 < 8 ? (J->n - j0 > 0 ? J->n - j0 : 0) : 8;
            if (rr > 0) J->kt->mm->dequant(J->type, J->w, (int64_t)J->ldw, j0, rr, 0, k, rows, k);
            const float *src[8];
            for (int64_t i = 0; i < 8; i++) {
                src[i] = NULL;
                for (int64_t c = 0; c < J->nch; c++) J->sb[c * J->npan * AF_GP_NR + j0 + i] = 0.0f;
                if (i >= rr) continue;
                for (int64_t c = 0; c < J->nch; c++) { /* one scale per chunk of depth */
                    const int64_t c0 = c * AF_I8_KC, len = k - c0 < AF_I8_KC ? k - c0 : AF_I8_KC;
                    const int64_t pad = rowb - c0 < AF_I8_KC ? rowb - c0 : AF_I8_KC;
                    const float amax = J->op->amax(rows + i * k + c0, NULL, len);
                    J->sb[c * J->npan * AF_GP_NR + j0 + i] = amax / 127.0f;
                    J->op->quant_row(rows + i * k + c0, NULL, inv_of(amax), len, pad, 128, q + i * rowb + c0, AF_I8_KC,
                                     NULL);
                }
                src[i] = (const float *)(const void *)(q + i * rowb);
            }
            J->kt->mm->tpack(src, k4, dst + r0, AF_GP_NR);
        }
    }
}

/* Quads [q0, q1) of depth rows of W[K, N] (rows of W are rows of B): four rows dequantized, each
 * scaled by its own max (sw), interleaved into each panel's row of the quad. */
static void pack_rows(const i8_job *J, int64_t q0, int64_t q1, int tid) {
    const int64_t n = J->n, k = J->k, np = J->npan * AF_GP_NR;
    float *row = (float *)(void *)(J->scratch + (size_t)tid * J->slot); /* n floats, 4 x np bytes */
    uint8_t *b = (uint8_t *)(row + n);
    for (int64_t qd = q0; qd < q1; qd++) {
        const uint8_t *r[4];
        for (int i = 0; i < 4; i++) {
            const int64_t kk = 4 * qd + i;
            uint8_t *bi = b + i * np;
            r[i] = bi;
            if (kk >= k) {
                memset(bi, 128, (size_t)np);
                J->sw[kk] = 0.0f;
                continue;
            }
            J->kt->mm->dequant(J->type, J->w, (int64_t)J->ldw, kk, 1, 0, n, row, n);
            const float amax = J->op->amax(row, NULL, n);
            J->sw[kk] = amax / 127.0f;
            J->op->quant_row(row, NULL, inv_of(amax), n, np, 128, bi, AF_I8_KC, NULL);
        }
        for (int64_t p = 0; p < J->npan; p++) {
            const uint8_t *rp[4] = {r[0] + p * AF_GP_NR, r[1] + p * AF_GP_NR, r[2] + p * AF_GP_NR, r[3] + p * AF_GP_NR};
            J->op->interleave4(rp, AF_GP_NR, J->bp + (p * J->k4 + qd) * AF_GP_NR);
        }
    }
}

static void i8_pack_job(void *va, int64_t i0, int64_t i1, int tid) {
    const i8_job *J = va;
    if (J->b_trans) pack_trans(J, i0, i1, tid);
    else pack_rows(J, i0, i1, tid);
}

/* Rows r0 .. r0 + mc of A quantized into aq ([mc/8][k4][8] dwords; amx: rows of k4 dwords, rows up to
 * mc rounded up to 32), one scale per row and chunk of depth, sa ([mc/8][nch][8]), and comp
 * ([mc/8][nch][8]: 128 x the chunk's row sums); rows past mc are zero. */
static void quant_a(const i8_job *J, int64_t r0, int64_t mc, uint32_t *aq, int32_t *comp, float *sa, uint8_t *q,
                    float *gath, int32_t *sums, bool amx) {
    const int64_t k = J->k, k4 = J->k4, rowb = k4 * 4, nch = J->nch;
    if (amx) {
        const int64_t rows = (mc + 31) / 32 * 32;
        memset((uint8_t *)aq + mc * rowb, 0, (size_t)((rows - mc) * rowb));
    }
    for (int64_t b = 0; b < (mc + 7) / 8; b++) {
        if (amx) q = (uint8_t *)aq + 8 * b * rowb; /* the rows in place */
        const float *src[8];
        for (int64_t i = 0; i < 8; i++) {
            const int64_t t = 8 * b + i;
            src[i] = NULL;
            for (int64_t c = 0; c < nch; c++) {
                sums[i * nch + c] = 0;
                sa[(b * nch + c) * 8 + i] = 0.0f;
            }
            if (t >= mc) continue;
            const float *x = J->a + (r0 + t) * J->sat;
            if (J->sak != 1) {
                for (int64_t kk = 0; kk < k; kk++) gath[kk] = x[kk * J->sak];
                x = gath;
            }
            for (int64_t c = 0; c < nch; c++) {
                const int64_t c0 = c * AF_I8_KC, len = k - c0 < AF_I8_KC ? k - c0 : AF_I8_KC;
                const int64_t pad = rowb - c0 < AF_I8_KC ? rowb - c0 : AF_I8_KC;
                const float *s = J->sw ? J->sw + c0 : NULL;
                const float amax = J->op->amax(x + c0, s, len);
                sa[(b * nch + c) * 8 + i] = amax / 127.0f;
                J->op->quant_row(x + c0, s, inv_of(amax), len, pad, 0, q + i * rowb + c0, AF_I8_KC, sums + i * nch + c);
            }
            src[i] = (const float *)(const void *)(q + i * rowb);
        }
        if (!amx) J->kt->mm->tpack(src, k4, aq + b * k4 * 8, 8);
        for (int64_t c = 0; c < nch; c++)
            for (int i = 0; i < 8; i++) comp[(b * nch + c) * 8 + i] = 128 * sums[i * nch + c];
    }
}

/* Bytes of one thread's scratch slot (64-byte multiple): the larger of the packing's (x·Wᵀ: 8 rows
 * of k floats and of k4 x 4 bytes; dy·W: a row of n floats and 4 of np bytes) and a task's (the A
 * block, its row sums and scales, 8 rows of bytes, a gathered row, 8 x nch sums). */
static size_t slot_bytes(int64_t n, int64_t k, int64_t k4, int64_t nch, int64_t np) {
#define UP64(x) (((size_t)(x) + 63) / 64 * 64)
    const size_t pk = UP64(8 * k * 4) + UP64(8 * k4 * 4) + UP64(n * 4) + UP64(4 * np);
    const size_t tk = UP64((I8_MC / 8) * k4 * 32) + 2 * UP64((I8_MC / 8) * nch * 32) + UP64(8 * k4 * 4) +
                      UP64(k * 4) + UP64(8 * nch * 4);
    return pk > tk ? pk : tk;
#undef UP64
}

static void i8_task_job(void *va, int64_t t0, int64_t t1, int tid) {
    const i8_job *J = va;
    const af_gp_i8_ops *op = J->op;
    const int64_t k4 = J->k4, nch = J->nch, kqc = AF_I8_KC / 4, team = J->team > 0 ? J->team : 1;
    const size_t abytes = (size_t)(I8_MC / 8) * (size_t)k4 * 32, cbytes = ((size_t)(I8_MC / 8) * (size_t)nch * 32 + 63) / 64 * 64;
    const size_t qbytes = ((size_t)8 * (size_t)k4 * 4 + 63) / 64 * 64, gbytes = ((size_t)J->k * 4 + 63) / 64 * 64;
    uint8_t *blk = J->scratch + (size_t)tid * J->slot; /* abytes is a multiple of 64 (32 x k4 x 16) */
    uint32_t *aq = (uint32_t *)(void *)blk;
    int32_t *comp = (int32_t *)(void *)(blk + abytes);
    float *sa = (float *)(void *)(blk + abytes + cbytes);
    uint8_t *q = blk + abytes + 2 * cbytes;
    float *gath = (float *)(void *)(q + qbytes);
    int32_t *sums = (int32_t *)(void *)((uint8_t *)gath + gbytes);
    const bool amx = op->amx_ukernel != NULL; /* AMX-INT8 tiles: A rows in place, 32 x 32 blocks */
    int tilecfg = 0;                          /* the thread's tile configuration: unknown at first */
    for (int64_t th = t0; th < t1; th++)
        for (int64_t o = 0, task; (task = af_gp_deal_next(J->next, team, J->nmb * J->ngr, th, &o)) >= 0;) {
            const int64_t mb = task / J->ngr, g = task % J->ngr;
            const int64_t r0 = mb * I8_MC, mc = J->m - r0 < I8_MC ? J->m - r0 : I8_MC;
            const int64_t p0 = g * J->gsz, p1 = p0 + J->gsz < J->npan ? p0 + J->gsz : J->npan;
            quant_a(J, r0, mc, aq, comp, sa, q, gath, sums, amx);
            for (int64_t c = 0; c < nch; c++) {
                const int64_t q0 = c * kqc, kq = k4 - q0 < kqc ? k4 - q0 : kqc;
                const int acc = c > 0 || J->acc;
                for (int64_t p = p0; p < p1; p++) {
                    const int64_t j0 = p * AF_GP_NR;
                    const int nr = (int)(J->n - j0 < AF_GP_NR ? J->n - j0 : AF_GP_NR);
                    const uint32_t *bpp = J->bp + (p * k4 + q0) * AF_GP_NR;
                    const float *sbp = J->sb + c * J->npan * AF_GP_NR + j0;
                    if (amx) {
                        for (int64_t i0 = 0; i0 < mc; i0 += 32)
                            op->amx_ukernel((int)(mc - i0 < 32 ? mc - i0 : 32), kq, aq + i0 * k4 + q0, k4, bpp,
                                            comp + ((i0 / 8) * nch + c) * 8, sa + ((i0 / 8) * nch + c) * 8, nch * 8, sbp,
                                            J->c + (r0 + i0) * J->ldc + j0, J->ldc, nr, acc, &tilecfg);
                        continue;
                    }
                    for (int64_t i0 = 0; i0 < mc; i0 += 8) {
                        const int mr = (int)(mc - i0 < 8 ? mc - i0 : 8);
                        op->ukernel(mr, kq, aq + (i0 / 8) * k4 * 8 + q0 * 8, bpp, comp + ((i0 / 8) * nch + c) * 8,
                                    sa + ((i0 / 8) * nch + c) * 8, J->sb + c * J->npan * AF_GP_NR + j0, J->c + (r0 + i0) * J->ldc + j0, J->ldc, nr, acc);
                    }
                }
            }
            if (J->f) {
                const int64_t j0 = p0 * AF_GP_NR, j1 = p1 * AF_GP_NR;
                J->f->ep(J->f->arg, r0, mc, j0, (j1 < J->n ? j1 : J->n) - j0);
                tilecfg = 0; /* the epilogue may have configured the tiles for its own products */
            }
        }
}

bool af_gp_gemm_i8(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak, const void *w,
                   uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k, int accumulate,
                   int nth, const af_gp_fused *f) {
    if (nth < 1) nth = 1;
    const int64_t k4 = quads(k), npan = panels(n), nmb = (m + I8_MC - 1) / I8_MC;
    const int64_t nch = (k4 * 4 + AF_I8_KC - 1) / AF_I8_KC; /* chunks of depth */
    const int team = af_threadpool_team(ctx->pool, nth);
    const size_t bbytes = (size_t)npan * AF_GP_NR * (size_t)k4 * 4; /* a multiple of 128 */
    const size_t sbytes = (size_t)nch * (size_t)npan * AF_GP_NR * sizeof(float), swbytes = ((size_t)k4 * 16 + 63) / 64 * 64;
    const size_t slot = slot_bytes(n, k, k4, nch, npan * AF_GP_NR);
    uint8_t *bufv = af_gp_buffer(bbytes + sbytes + swbytes + (size_t)team * slot);
    if (!bufv) return false;
    int64_t ngr = (nmb % nth == 0 && (m % I8_MC == 0 || nmb >= 4 * nth)) ? 1 : (nth < npan ? nth : npan);
    const int64_t gsz = (npan + ngr - 1) / ngr;
    ngr = (npan + gsz - 1) / gsz;
    i8_job J = {.kt = ctx->k, .op = ctx->k->gp_i8, .bp = (uint32_t *)(void *)bufv,
                .sb = (float *)(void *)(bufv + bbytes), .sw = b_trans ? NULL : (float *)(void *)(bufv + bbytes + sbytes),
                .w = w, .type = type, .ldw = (size_t)ldw_bytes, .b_trans = b_trans, .acc = accumulate, .c = c,
                .a = a, .ldc = ldc, .sat = sat, .sak = sak, .m = m, .n = n, .k = k, .k4 = k4, .nch = nch,
                .npan = npan, .nmb = nmb, .ngr = ngr, .gsz = gsz, .f = f, .team = team,
                .scratch = bufv + bbytes + sbytes + swbytes, .slot = slot};
    if (!b_trans)
        for (int64_t j = 0; j < nch * npan * AF_GP_NR; j++) J.sb[j] = 1.0f;
    af_threadpool_run(ctx->pool, team, b_trans ? npan : k4, 0, i8_pack_job, &J);
    af_gp_claim next[AF_GP_SHARES];
    J.next = af_gp_deal_init(next, team);
    af_threadpool_run(ctx->pool, team, team, 0, i8_task_job, &J);
    return true;
}

#else /* not x86-64: no int8 kernels (ctx->k->gp_i8 is NULL, af_gp_i8_applies is false) */

bool af_gp_gemm_i8(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak, const void *w,
                   uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k, int accumulate,
                   int nth, const af_gp_fused *f) {
    (void)ctx, (void)c, (void)ldc, (void)a, (void)sat, (void)sak, (void)w, (void)type, (void)ldw_bytes;
    (void)b_trans, (void)m, (void)n, (void)k, (void)accumulate, (void)nth, (void)f;
    return false;
}

#endif
