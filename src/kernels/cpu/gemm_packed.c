/*
 * gemm_packed.c — cache-blocked GEMM on packed operands for the large products of training and
 * prompt evaluation (the structure of Goto & van de Geijn, "Anatomy of high-performance matrix
 * multiplication", ACM TOMS 2008, and BLIS):
 *
 *   C[m, N] (+)= A[m, K] · B[K, N]
 *
 *  - B is packed ONCE per call into column panels of AF_GP_NR = 32 columns (zero-padded at the
 *    right edge), dequantizing the weight rows on the way: for x·Wᵀ the panel holds Wᵀ
 *    (B[k][j] = W[j][k]), for dy·W it holds W (B[k][j] = W[k][j]); f32 operands with any row
 *    stride use the same code (type F32). f32: [N/32][K][32] floats; bf16: [N/32][K/2][32]
 *    k-pairs (uint32 = bf16(B[2p][j]) | bf16(B[2p+1][j]) << 16).
 *    The buffer is kept per calling thread and only grows, so repeated calls do not fault in
 *    fresh pages (measured: page faults were ~10% of a training step when it was malloc'ed per
 *    call). A B larger than MAX_B (64 MiB: the MLP products from Llama-3.2-3B's shape up) is
 *    packed and multiplied in column blocks of at most MAX_B (the column loop of Goto's
 *    algorithm), so the buffer never exceeds MAX_B; af_gp_usable keeps vocabulary-shaped products
 *    over MAX_B (LM heads) on matmul.c's panel path, where they have always been.
 *  - A is packed per (block of MC rows, K-chunk of AF_GP_KC) into row micro-panels
 *    [MC/8][KC][8] (f32) or [MC/8][KC/2][8] (bf16 pairs), zero-padded rows, so the micro-kernel
 *    reads both operands contiguously. The block (128 KiB f32) stays in L2 while every panel of
 *    B passes through L1 (the BLIS loop order).
 *  - Micro-kernels, from the context's table (kernels.h): mm->ukernel (f32 FMA: AVX-512, 16 zmm
 *    accumulators; AVX2, three register tiles 6x16, 6x16, 2x32 of 12/12/8 ymm accumulators) or
 *    gp_bf16->ukernel (VDPBF16PS): an 8 x 32 tile of C over one K-chunk, masked at the edges.
 *    Operands are transposed into the packed layout by mm->tpack (AVX-512 or AVX2 8x8
 *    transposes) or gp_bf16->tpack.
 *  - Threads: the context's pool over tasks (block of MC rows) x (group of panels). A block is packed once per
 *    task and K-chunk, so the column groups are only split (G > 1) when the row blocks alone do
 *    not divide evenly over the threads; tasks are dealt round-robin. Each element of C is
 *    computed by one task in a fixed order (K-chunks ascending), so results do not depend on the
 *    thread count or the grouping.
 * Precision: f32 (default) is exact up to f32 summation order (each C element is a sequential f32
 * FMA chain over k, chunked by AF_GP_KC). bf16 (a context with matmul precision bf16, CPUs with
 * AVX512_BF16 only): A and B rounded to bfloat16 when packed, products accumulated in f32; error bound in
 * gemm_packed_avx512.c.
 */
#include "kernels/cpu/gemm_packed.h"

#include "kernels/cpu/gemm_int8.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/kernels.h"
#include "kernels/quant.h"

#include <string.h>

#ifndef GP_MC
#define GP_MC 128 /* rows of A per task (packed block MC x KC = 128 KiB f32, in L2; bf16 blocks of 256
                   * rows, the same bytes, were measured no faster on Zen 4) */
#endif
#ifndef GP_KC_F32
#define GP_KC_F32 256 /* k per micro-kernel call, f32 (B sliver KC x 32 floats) */
#endif
#ifndef GP_KC_BF16
#define GP_KC_BF16 256 /* k per micro-kernel call, bf16 (B sliver KC/2 x 32 pairs); even, <= 512 */
#endif
#ifndef GP_MIN_NK
/* smallest n*k (output columns x depth) that takes the packed path: LoRA products (n or k = r =
 * 16) included, where it is ~2x faster than the panel path (measured on Zen 4) */
#define GP_MIN_NK 4096
#endif
#define MC GP_MC
#define KC_MAX 512 /* largest compute chunk (bf16) of the VDPBF16PS kernel and of streamed B on AMX tiles */
/* Depth chunk of the AMX products whose B is packed whole (floats; a multiple of 32, so the 16-pair
 * steps of gemm_amx.c fall where one chunk's would): a depth up to this runs in one chunk and C is
 * written once; deeper ones in chunks of at most this. With the rows of A outside the B panels
 * (gp_run_task) the 32-row slab of A stays in L1 while B streams from L2. Measured on an Emerald Rapids
 * guest (SmolLM2's training products, m = 2048, 2 threads, interleaved A/B): 1.2-1.3x the 512-chunk,
 * panels-outside order; 512 with that order 1.1x; prefetching the next B or A tile rows in software
 * gained nothing. */
#define KC_AMX 768
/* Bytes of B chunks that one row block's 32-row slabs of A go through before the next panels (AMX,
 * B packed whole): the group stays in L2 (2 MiB per core on Sapphire / Emerald Rapids, beside the A
 * block and C's lines) while the four slabs pass, where a whole row of chunks (48 panels of the
 * SmolLM2 MLP's 1536 columns: 1.7 MiB) was fetched from L3 once per slab. The same micro-kernel
 * calls in another order: bitwise the same C. Measured on an Emerald Rapids guest (m = 8192, 2
 * threads, both orders alternated in one process, medians of 40 paired ratios): x·Wᵀ 576 -> 1536
 * and dy·W 1536 -> 576 columns 1.12-1.21x (256 KiB to 1 MiB groups), products of <= 18 panels
 * (which fit whole) unchanged. */
#define AMX_B_GROUP ((int64_t)512 << 10)
#define MAX_B ((size_t)64 << 20) /* largest packed B (bytes) of one block of columns */
/* f32 products whose packed B exceeds MAX_B run in column blocks (af_gp_gemm) only when
 * max(n, k) <= GP_MAX_ASPECT * min(n, k): the layer projections of transformers (the MLP's
 * intermediate / hidden is 2.7-5.4 in Llama 3, Qwen2/3, Gemma 3). The LM head and its backward
 * (vocabulary x hidden: 16-85 for Llama 3, 85 for SmolLM2-135M, 410 for Gemma 3 270M) stay on the
 * panel path of matmul.c in f32, where they were before the column blocks: their f32 results stay
 * bit-identical (the two paths sum in different orders). In bf16 (a training context with
 * bf16 frozen products) they take the packed path in blocks of at most GP_VOCAB_B bytes of B:
 * ~1.3x the f32 panel path's speed per LM head product on Zen 4, and the packing buffer it leaves
 * behind (grow-only, per thread) bounded at 32 MiB instead of the whole bf16 head (56 MiB for
 * SmolLM2, 335 MiB for Gemma 3 270M). */
#define GP_MAX_ASPECT 8
#define GP_VOCAB_B ((size_t)32 << 20)
/* columns of one block are a multiple of this when B comes from rows of W (b_trans = 0, block
 * type): the column offset into a row of W must fall on a block boundary (AF_GP_KC is a multiple
 * of every block size) */
#define GP_COL_ALIGN AF_GP_KC
/* Streamed B (gp_streams): products x·Wᵀ whose rows fit in one block of MC are not packed whole
 * before the tasks; each task packs one chunk of one panel (KC x 32, 32 KiB f32) right before the
 * micro-kernels that use it, so the packed B never goes to memory and back (a prompt of 128 tokens
 * reads each panel once). The micro-kernel calls are those of the packed-whole path, so the result
 * is bitwise the same. Chunks are whole multiples of AF_GP_KC (block boundaries). */
#define GP_STREAM ((GP_KC_F32 % AF_GP_KC) == 0 && (GP_KC_BF16 % AF_GP_KC) == 0)
#define STREAM_DW (GP_KC_F32 > KC_MAX / 2 ? GP_KC_F32 * AF_GP_NR : KC_MAX / 2 * AF_GP_NR) /* AMX chunks: KC_MAX */

int64_t af_gp_packed_b_floats(int64_t k, int64_t n) { return (n + AF_GP_NR - 1) / AF_GP_NR * AF_GP_NR * k; }

static size_t max_b(const af_ctx *ctx) { return ctx->gp_max_b ? ctx->gp_max_b : MAX_B; }

void af_gp_set_max_b(af_ctx *ctx, size_t bytes) { ctx->gp_max_b = bytes; }

/* bf16 is used for this product: ctx's precision (only set where the table has bf16 kernels), and
 * K even (pairs). */
static bool use_bf16(const af_ctx *ctx, int64_t k) { return ctx->bf16 && k % 2 == 0; }

static bool vocab_shaped(int64_t n, int64_t k) { return n > GP_MAX_ASPECT * k || k > GP_MAX_ASPECT * n; }

/* The largest packed B (bytes) of one block of this product: MAX_B (ctx->gp_max_b), at most
 * GP_VOCAB_B for a vocabulary-shaped bf16 one. */
static size_t block_cap(const af_ctx *ctx, int64_t n, int64_t k, bool bf) {
    const size_t cap = max_b(ctx);
    return bf && vocab_shaped(n, k) && cap > GP_VOCAB_B ? GP_VOCAB_B : cap;
}

bool af_gp_amx(const af_ctx *ctx, int64_t k) {
    return use_bf16(ctx, k) && ctx->k->gp_bf16 && ctx->k->gp_bf16->amx_ukernel;
}

bool af_gp_usable(const af_ctx *ctx, int64_t m, int64_t n, int64_t k) {
    const af_mm_ops *ops = ctx->k->mm;
    /* The choice must not depend on m: the engine splits the rows of a product into blocks and
     * relies on getting bitwise the same result as one call (tests/test_engine.c). */
    if (!ops->ukernel || m <= AF_MM_DECODE_N || n < 16 || k < 16 || n * k < GP_MIN_NK) return false;
    const double cap = (double)max_b(ctx);
    if ((double)af_gp_packed_b_floats(k, n) * sizeof(float) <= cap) return true; /* one block */
    /* column blocks: projection-shaped products, and a block of GP_COL_ALIGN columns fits */
    if (!vocab_shaped(n, k)) return (double)k * GP_COL_ALIGN * sizeof(float) <= cap;
    /* vocabulary-shaped: bf16 only (f32 stays on the panel path), in blocks (af_gp_gemm) of
     * GP_COL_ALIGN columns or, when those are over the cap, of one compute chunk of depth */
    const double vcap = (double)block_cap(ctx, n, k, true);
    return use_bf16(ctx, k) && ((double)k * GP_COL_ALIGN * sizeof(uint16_t) <= vcap ||
                                (double)af_gp_packed_b_floats(GP_KC_BF16, n) * sizeof(uint16_t) <= vcap);
}

/* ---------------------------------------------------------------- buffers */

/* Grow-only buffer of the calling thread for the packed B (freed at thread exit by nobody: it
 * lives as long as the thread, like a BLAS library's packing arena; at most MAX_B bytes). */
static _Thread_local void *g_bp;
static _Thread_local size_t g_bp_size;

static void *bp_get(size_t bytes) {
    if (bytes <= g_bp_size) return g_bp;
    af_free_aligned(g_bp);
    g_bp_size = 0;
    g_bp = af_malloc_aligned(bytes);
    if (g_bp) g_bp_size = bytes;
    return g_bp;
}

void *af_gp_buffer(size_t bytes) { return bp_get(bytes); }

void af_gp_release(void) {
    af_free_aligned(g_bp);
    g_bp = NULL;
    g_bp_size = 0;
}

#if defined(__x86_64__)
/* ---------------------------------------------------------------- packing (gemm_packed_avx512.c transposes) */

/* One chunk of one B panel from W[N, K] (rows of W are columns of B): depth k0 .. k0 + kc of
 * panel p (rows 32p .. 32p + 31 of W) into dst, dst[kk*32 + j%32] = W[j][k0 + kk] (f32) or pairs
 * dst[q*32 + j%32] = pair(W[j][k0 + 2q], W[j][k0 + 2q + 1]) (bf16, kc even); columns past n zero.
 * k0 is a multiple of AF_GP_KC, kc <= AF_GP_KC. 8 rows at a time are dequantized (a multiple of
 * every block size) and transposed into the panel (mm->tpack or gp_bf16->tpack). */
static void pack_b_trans_chunk(const af_kernels *kt, uint32_t *dst, const uint8_t *w, uint32_t type, size_t rb,
                               int64_t n, int64_t p, int64_t k0, int64_t kc, bool bf) {
    float rows[8 * AF_GP_KC] __attribute__((aligned(64)));
    const int64_t j0 = p * AF_GP_NR, nr = n - j0 < AF_GP_NR ? n - j0 : AF_GP_NR;
    if (nr < AF_GP_NR) memset(dst, 0, (size_t)(bf ? kc / 2 : kc) * AF_GP_NR * sizeof(uint32_t));
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int64_t rr = nr - r0 < 8 ? nr - r0 : 8;
        const float *src[8];
        if (type == AF_TYPE_F32) /* f32 rows are read in place */
            for (int i = 0; i < 8; i++) src[i] = i < rr ? (const float *)(w + (size_t)(j0 + r0 + i) * rb) + k0 : NULL;
        else {
            kt->mm->dequant(type, w, (int64_t)rb, j0 + r0, rr, k0, kc, rows, AF_GP_KC);
            for (int i = 0; i < 8; i++) src[i] = i < rr ? rows + i * AF_GP_KC : NULL;
        }
        if (bf) kt->gp_bf16->tpack(src, kc, dst + r0, AF_GP_NR);
        else kt->mm->tpack(src, kc, dst + r0, AF_GP_NR);
    }
}

/* B panels pan0 .. pan1 - 1 from W[N, K]: bp[(j/32)*K*32 + kk*32 + j%32] = W[j][kk] (f32), or
 * pairs bp[(j/32)*(K/2)*32 + p*32 + j%32] = pair(W[j][2p], W[j][2p+1]) (bf16), chunk by chunk. */
static void pack_b_trans(const af_kernels *kt, void *bpv, const uint8_t *w, uint32_t type, size_t rb,
                         int64_t n, int64_t k, bool bf, int64_t pan0, int64_t pan1) {
    const int64_t pstride = bf ? k / 2 * AF_GP_NR : k * AF_GP_NR; /* dwords per panel */
    for (int64_t p = pan0; p < pan1; p++)
        for (int64_t k0 = 0; k0 < k; k0 += AF_GP_KC) {
            const int64_t kc = k - k0 < AF_GP_KC ? k - k0 : AF_GP_KC;
            pack_b_trans_chunk(kt, (uint32_t *)bpv + p * pstride + (bf ? k0 / 2 : k0) * AF_GP_NR, w, type, rb, n, p,
                               k0, kc, bf);
        }
}

/* B panels from W[K, N] (rows of W are rows of B): bp[(j/32)*K*32 + kk*32 + j%32] = W[kk][j]. */
static void pack_b_rows(const af_kernels *kt, float *bp, const uint8_t *w, uint32_t type, size_t rb,
                        int64_t n, int64_t k, int64_t k0, int64_t k1) {
    for (int64_t kk = k0; kk < k1; kk++) {
        float row[AF_GP_KC] __attribute__((aligned(64)));
        for (int64_t c0 = 0; c0 < n; c0 += AF_GP_KC) {
            int64_t cc = n - c0 < AF_GP_KC ? n - c0 : AF_GP_KC;
            const float *src = row;
            if (type == AF_TYPE_F32) src = (const float *)(w + (size_t)kk * rb) + c0; /* read in place */
            else kt->mm->dequant(type, w, (int64_t)rb, kk, 1, c0, cc, row, cc);
            for (int64_t j = 0; j < cc; j += AF_GP_NR) {
                int64_t p = (c0 + j) / AF_GP_NR, nr = cc - j < AF_GP_NR ? cc - j : AF_GP_NR;
                float *dst = bp + p * k * AF_GP_NR + kk * AF_GP_NR;
                if (nr == AF_GP_NR)
                    for (int q = 0; q < AF_GP_NR; q++) dst[q] = src[j + q];
                else
                    memcpy(dst, src + j, (size_t)nr * sizeof(float));
                if (nr < AF_GP_NR) memset(dst + nr, 0, (size_t)(AF_GP_NR - nr) * sizeof(float));
            }
        }
    }
}

/* A rows [t0, t0+mc) x columns [k0, k0+kc) -> ap[(t/8)][kk][t%8] (f32) or, bf16, pairs
 * ap[(t/8)][kk/2][t%8] (kc even); zero rows past mc. Rows contiguous in k (sak == 1) go through
 * the transposing packer; other strides are gathered into a row first. */
static void pack_a(const af_kernels *kt, uint32_t *ap, const float *a, int64_t sat, int64_t sak, int64_t t0,
                   int64_t mc, int64_t k0, int64_t kc, bool bf) {
    int64_t nb = (mc + 7) / 8, bstride = bf ? kc / 2 * 8 : kc * 8;
    if (sat == 1 && sak != 1) { /* columns of A contiguous (Aᵀ stored row-major): 8 rows = 8 floats */
        for (int64_t b = 0; b < nb; b++) {
            int64_t nrow = mc - 8 * b < 8 ? mc - 8 * b : 8;
            const float *src = a + t0 + 8 * b + k0 * sak;
            uint32_t *dst = ap + b * bstride;
            if (bf) {
                kt->gp_bf16->pair_cols(src, sak, kc / 2, nrow, dst);
            } else {
                float *df = (float *)dst;
                if (nrow == 8)
                    for (int64_t kk = 0; kk < kc; kk++)
                        memcpy(df + kk * 8, src + kk * sak, 8 * sizeof(float));
                else
                    for (int64_t kk = 0; kk < kc; kk++)
                        for (int64_t i = 0; i < 8; i++) df[kk * 8 + i] = i < nrow ? src[kk * sak + i] : 0.0f;
            }
        }
        return;
    }
    float rows[8 * KC_MAX] __attribute__((aligned(64)));
    for (int64_t b = 0; b < nb; b++) {
        int64_t nrow = mc - 8 * b < 8 ? mc - 8 * b : 8;
        const float *src[8];
        for (int64_t i = 0; i < 8; i++) {
            const float *ri = i < nrow ? a + (t0 + 8 * b + i) * sat + k0 * sak : NULL;
            if (ri && sak != 1) {
                for (int64_t kk = 0; kk < kc; kk++) rows[i * KC_MAX + kk] = ri[kk * sak];
                ri = rows + i * KC_MAX;
            }
            src[i] = ri;
        }
        if (bf) kt->gp_bf16->tpack(src, kc, ap + b * bstride, 8);
        else kt->mm->tpack(src, kc, ap + b * bstride, 8);
    }
}

/* B pairs from W[K, N]: bp[(j/32)*(K/2)*32 + p*32 + j%32] = pair(W[2p][j], W[2p+1][j]). */
static void pack_b_rows_bf16(const af_kernels *kt, uint32_t *bp, const uint8_t *w, uint32_t type, size_t rb,
                             int64_t n, int64_t k, int64_t q0, int64_t q1) {
    int64_t kp = k / 2;
    for (int64_t q = q0; q < q1; q++) {
        float r0[AF_GP_KC] __attribute__((aligned(64))), r1[AF_GP_KC] __attribute__((aligned(64)));
        for (int64_t c0 = 0; c0 < n; c0 += AF_GP_KC) {
            int64_t cc = n - c0 < AF_GP_KC ? n - c0 : AF_GP_KC;
            const float *lo = r0, *hi = r1;
            if (type == AF_TYPE_F32) { /* f32 rows are read in place */
                lo = (const float *)(const void *)(w + (size_t)(2 * q) * rb) + c0;
                hi = (const float *)(const void *)(w + (size_t)(2 * q + 1) * rb) + c0;
            } else {
                kt->mm->dequant(type, w, (int64_t)rb, 2 * q, 1, c0, cc, r0, cc);
                kt->mm->dequant(type, w, (int64_t)rb, 2 * q + 1, 1, c0, cc, r1, cc);
            }
            for (int64_t j = 0; j < cc; j += AF_GP_NR) { /* pairs straight into each panel's row q */
                int64_t p = (c0 + j) / AF_GP_NR, nr = cc - j < AF_GP_NR ? cc - j : AF_GP_NR;
                uint32_t *dst = bp + p * kp * AF_GP_NR + q * AF_GP_NR;
                kt->gp_bf16->pair_rows(lo + j, hi + j, dst, nr);
                if (nr < AF_GP_NR) memset(dst + nr, 0, (size_t)(AF_GP_NR - nr) * sizeof(uint32_t));
            }
        }
    }
}

/* ---------------------------------------------------------------- driver */

af_gp_claim *af_gp_deal_init(af_gp_claim next[AF_GP_SHARES], int team) {
    if (team <= 1 || team > AF_GP_SHARES) return NULL;
    for (int t = 0; t < team; t++) next[t].n = 0;
    return next;
}

int64_t af_gp_deal_next(af_gp_claim *next, int64_t team, int64_t ntask, int64_t th, int64_t *o) {
    if (!next) { /* static: the share's own tasks */
        const int64_t task = th + team * (*o)++;
        return task < ntask ? task : -1;
    }
    for (; *o < team; ++*o) { /* its own share first, then what is left of the others' */
        const int64_t sh = (th + *o) % team;
        const int64_t task = sh + team * __atomic_fetch_add(&next[sh].n, 1, __ATOMIC_RELAXED);
        if (task < ntask) return task;
    }
    return -1;
}

typedef struct gp_job {
    const af_kernels *kt;
    uint32_t *bp;
    const uint8_t *w;
    uint32_t type;
    size_t ldw;
    int b_trans, acc, team;
    bool bf, stream; /* stream: B's chunks packed by the task that uses them (gp_streams) */
    /* AMX tiles (gemm_amx.c) for bf16 products whose A is contiguous in k (rows) or in i (columns: the
     * gradient products' dyᵀ), in chunks of KC_AMX (KC_MAX with streamed B; C passes through memory
     * once per chunk, exactly, so the bits do not depend on the chunk) */
    bool amx;
    float *c;
    const float *a;
    int64_t ldc, sat, sak, m, n, k, npan, pstride, nmb, ngr, gsz;
    const af_gp_fused *f; /* af_gp_gemm_fused's epilogue (NULL: none) */
    af_gp_claim *next;    /* af_gp_deal_next's claim counters (NULL: static dealing) */
} gp_job;

/* Packs panels / rows [i0, i1) of B. */
static void gp_pack_job(void *va, int64_t i0, int64_t i1, int tid) {
    const gp_job *J = va;
    if (J->b_trans) pack_b_trans(J->kt, J->bp, J->w, J->type, J->ldw, J->n, J->k, J->bf, i0, i1);
    else if (J->bf) pack_b_rows_bf16(J->kt, J->bp, J->w, J->type, J->ldw, J->n, J->k, i0, i1);
    else pack_b_rows(J->kt, (float *)J->bp, J->w, J->type, J->ldw, J->n, J->k, i0, i1);
}

/* af_gp_fused's yb: rows [r0, r0 + mc) (r0, mc even) x columns [k0, k0 + kc) of A (rows a, stride sat;
 * k columns in all, m rows) as pairs of rows in the panels of af_gp_pack_bf16_panels (b_trans 0), the
 * last panel's columns past k zero. */
static void pair_rows_out(const af_kernels *kt, uint32_t *yb, const float *a, int64_t sat, int64_t r0, int64_t mc,
                          int64_t k0, int64_t kc, int64_t k, int64_t m) {
    const int64_t ps = m / 2 * AF_GP_NR; /* dwords per panel */
    for (int64_t i = 0; i + 1 < mc; i += 2)
        for (int64_t j = k0; j < k0 + kc; j += AF_GP_NR) {
            const int64_t nr = k0 + kc - j < AF_GP_NR ? k0 + kc - j : AF_GP_NR;
            uint32_t *dst = yb + j / AF_GP_NR * ps + (r0 + i) / 2 * AF_GP_NR;
            kt->gp_bf16->pair_rows(a + i * sat + j, a + (i + 1) * sat + j, dst, nr);
            if (j + nr >= k && nr < AF_GP_NR) memset(dst + nr, 0, (size_t)(AF_GP_NR - nr) * sizeof(uint32_t));
        }
}

/* Task `task` of J: one block of MC rows x one group of B panels (mb = task / ngr, g = task % ngr).
 * ap, bs: the calling thread's packing buffers; *tilecfg: its AMX tile configuration (gemm_amx.c). */
static void gp_run_task(const gp_job *J, int64_t task, uint32_t *ap, uint32_t *bs, int *tilecfg) {
    const af_kernels *kt = J->kt;
    const bool bf = J->bf;
    const int64_t m = J->m, n = J->n, k = J->k, ngr = J->ngr, gsz = J->gsz, npan = J->npan;
    const bool amx = J->amx;
    const bool amx_rows = amx && !J->stream; /* rows of A outside the panels (KC_AMX) */
    const int64_t KCC = amx_rows ? KC_AMX : amx ? KC_MAX : bf ? GP_KC_BF16 : GP_KC_F32;
    int64_t mb = task / ngr, g = task % ngr;
    int64_t r0 = mb * MC, mc = m - r0 < MC ? m - r0 : MC;
    int64_t p0 = g * gsz, p1 = p0 + gsz < npan ? p0 + gsz : npan;
    for (int64_t k0 = 0; k0 < k; k0 += KCC) {
        int64_t kc = k - k0 < KCC ? k - k0 : KCC;
        int acc = k0 > 0 || J->acc;
        const bool last = k0 + kc >= k; /* the tiles are final after this chunk */
        int64_t ka = bf ? kc / 2 : kc; /* dwords per row of a micro-panel */
        const int64_t lda = (ka + 15) / 16 * 16; /* AMX: dwords per row of A */
        if (amx && J->sak == 1) kt->gp_bf16->amx_pack_a(J->a + r0 * J->sat, J->sat, k0, kc, mc, ap, lda);
        else if (amx) kt->gp_bf16->amx_pack_at(J->a + r0, J->sak, k0, kc, mc, ap, lda);
        else pack_a(kt, ap, J->a, J->sat, J->sak, r0, mc, k0, kc, bf);
        if (J->f && J->f->yb) /* A's rows in pairs for a later product (af_gp_fused) */
            pair_rows_out(kt, J->f->yb, J->a + r0 * J->sat, J->sat, r0, mc, k0, kc, k, J->m);
        if (J->f && J->f->xc) /* the side product's rows (af_gp_fused), ready before the epilogue */
            for (int64_t i0 = 0; i0 < mc; i0 += 32)
                kt->gp_bf16->amx_ukernel((int)(mc - i0 < 32 ? mc - i0 : 32), ka, ap + i0 * lda, lda,
                                         J->f->xbp + k0 / 2 * AF_GP_NR, J->f->xc + (r0 + i0) * J->f->xn, J->f->xn,
                                         (int)J->f->xn, k0 > 0, tilecfg);
        if (amx_rows) { /* each 32-row slab of A (in L1) against the chunks of B of a group of panels (in L2) */
            int64_t pg = AMX_B_GROUP / (ka * AF_GP_NR * (int64_t)sizeof(uint32_t));
            if (pg < 1) pg = 1;
            for (int64_t g0 = p0; g0 < p1; g0 += pg)
                for (int64_t i0 = 0; i0 < mc; i0 += 32)
                    for (int64_t p = g0; p < p1 && p < g0 + pg; p++) {
                        const int64_t j0 = p * AF_GP_NR;
                        kt->gp_bf16->amx_ukernel((int)(mc - i0 < 32 ? mc - i0 : 32), ka, ap + i0 * lda, lda,
                                                 J->bp + p * J->pstride + k0 / 2 * AF_GP_NR,
                                                 J->c + (r0 + i0) * J->ldc + j0, J->ldc,
                                                 (int)(n - j0 < AF_GP_NR ? n - j0 : AF_GP_NR), acc, tilecfg);
                    }
        } else {
            for (int64_t p = p0; p < p1; p++) {
                int64_t j0 = p * AF_GP_NR;
                int nr = (int)(n - j0 < AF_GP_NR ? n - j0 : AF_GP_NR);
                const uint32_t *bpp = bs;
                if (J->stream)
                    for (int64_t q0 = k0; q0 < k0 + kc; q0 += AF_GP_KC)
                        pack_b_trans_chunk(kt, bs + (bf ? (q0 - k0) / 2 : q0 - k0) * AF_GP_NR, J->w, J->type, J->ldw, n,
                                           p, q0, k0 + kc - q0 < AF_GP_KC ? k0 + kc - q0 : AF_GP_KC, bf);
                else
                    bpp = J->bp + p * J->pstride + (bf ? k0 / 2 : k0) * AF_GP_NR;
                if (amx) {
                    for (int64_t i0 = 0; i0 < mc; i0 += 32)
                        kt->gp_bf16->amx_ukernel((int)(mc - i0 < 32 ? mc - i0 : 32), ka, ap + i0 * lda, lda, bpp,
                                                 J->c + (r0 + i0) * J->ldc + j0, J->ldc, nr, acc, tilecfg);
                    continue;
                }
                for (int64_t i0 = 0; i0 < mc; i0 += 8) {
                    int mr = (int)(mc - i0 < 8 ? mc - i0 : 8);
                    const uint32_t *api = ap + (i0 / 8) * ka * 8;
                    float *ci = J->c + (r0 + i0) * J->ldc + j0;
                    if (bf) kt->gp_bf16->ukernel(mr, ka, api, bpp, ci, J->ldc, nr, acc);
                    else kt->mm->ukernel(mr, kc, (const float *)api, (const float *)bpp, ci, J->ldc, nr, acc);
                }
            }
        }
        if (last && J->f) { /* the task's rows x columns of C are final */
            const int64_t j0 = p0 * AF_GP_NR, j1 = p1 * AF_GP_NR;
            J->f->ep(J->f->arg, r0, mc, j0, (j1 < n ? j1 : n) - j0);
            *tilecfg = 0; /* the epilogue may have configured the tiles for its own products */
        }
    }
}

/* Shares t0 .. t1 - 1 of the team (one per thread, or several on one thread), dealt by
 * af_gp_deal_next: with ngr == team column groups each share owns one group, whose B panels then stay
 * in its thread's cache. Every C element is computed by one task, in the same order whichever thread
 * runs it: the result does not depend on the team or on who ran what. */
static void gp_task_job(void *va, int64_t t0, int64_t t1, int tid) {
    const gp_job *J = va;
    const int64_t team = J->team > 0 ? J->team : 1, ntask = J->nmb * J->ngr;
    /* packed A block: MC x KC f32, or MC x KC/2 bf16 pairs */
    uint32_t ap[MC * KC_AMX / 2 > MC * GP_KC_F32 ? MC * KC_AMX / 2 : MC * GP_KC_F32] __attribute__((aligned(64)));
    /* streamed B: one chunk of one panel at a time (in L1), packed right before its micro-kernels */
    uint32_t bs[STREAM_DW] __attribute__((aligned(64)));
    int tilecfg = 0; /* the thread's tile configuration is unknown at the start of a job */
    for (int64_t th = t0; th < t1; th++)
        for (int64_t o = 0, task; (task = af_gp_deal_next(J->next, team, ntask, th, &o)) >= 0;)
            gp_run_task(J, task, ap, bs, &tilecfg);
}

/* B is streamed (GP_STREAM) for x·Wᵀ with at most MC rows: one row block, so each chunk of B is
 * used by one task and packing it whole first would only move it through memory. */
static bool gp_streams(int b_trans, int64_t m) { return GP_STREAM && b_trans && m <= MC; }

/* One block of columns: B packed whole into bp (af_gp_packed_b_floats(k, n) f32 or half as many
 * bf16 pairs), then the tasks. f: af_gp_gemm_fused's epilogue (NULL: none). */
static void gp_block(const af_ctx *ctx, uint32_t *bp, float *c, int64_t ldc, const float *a, int64_t sat,
                     int64_t sak, const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m,
                     int64_t n, int64_t k, int accumulate, int nth, bool bf, const af_gp_fused *f) {
    const af_kernels *kt = ctx->k;
    const uint8_t *wb = (const uint8_t *)w;
    if (nth < 1) nth = 1;
    int64_t npan = (n + AF_GP_NR - 1) / AF_GP_NR;
    int64_t pstride = bf ? k / 2 * AF_GP_NR : k * AF_GP_NR; /* dwords per B panel */
    int64_t nmb = (m + MC - 1) / MC;
    /* column groups: 1 (A packed once per block and chunk) unless the row blocks do not divide
     * evenly over the threads (their count, or a short last block among few: 128 + 42 rows of an
     * LM head chunk); then nth groups, so that round-robin dealing is balanced */
    int64_t ngr = (nmb % nth == 0 && (m % MC == 0 || nmb >= 4 * nth)) || (f && f->xc) ? 1 : (nth < npan ? nth : npan);
    int64_t gsz = (npan + ngr - 1) / ngr;
    ngr = (npan + gsz - 1) / gsz;
    gp_job J = {.kt = kt, .bp = bp, .w = wb, .type = type, .ldw = (size_t)ldw_bytes, .b_trans = b_trans, .bf = bf,
                .c = c, .ldc = ldc, .a = a, .sat = sat, .sak = sak, .m = m, .n = n, .k = k, .acc = accumulate,
                .npan = npan, .pstride = pstride, .nmb = nmb, .ngr = ngr, .gsz = gsz, .f = f};
    /* B packed by all threads (panels, or rows of W / pairs of rows), then the tasks; or streamed
     * (bp unused: NULL) */
    J.stream = gp_streams(b_trans, m);
    J.amx = bf && kt->gp_bf16->amx_ukernel && (sak == 1 || sat == 1);
    int64_t npack = b_trans ? npan : bf ? k / 2 : k;
    if (!J.stream) af_threadpool_run(ctx->pool, nth, npack, 0, gp_pack_job, &J);
    J.team = af_threadpool_team(ctx->pool, nth);
    af_gp_claim next[AF_GP_SHARES];
    J.next = af_gp_deal_init(next, J.team);
    af_threadpool_run(ctx->pool, J.team, J.team, 0, gp_task_job, &J);
}

/* bf16 products whose one granule of columns is over `cap`, or vocabulary-shaped ones from rows of
 * W (the backward of an LM head: depth = the vocabulary, where column blocks would pack the long
 * rows of A once per block): blocks of the depth k, each a multiple of the compute chunk GP_KC_BF16
 * with all n columns packed in at most `cap` bytes, the first one onto C as asked and the others
 * accumulated. The micro-kernel calls on every tile of C are those of one call (the same chunks in
 * the same order, C stored between chunks in both), so the result is bitwise that of one call. */
static bool gp_depth_blocks(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                            const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n,
                            int64_t k, int accumulate, int nth, size_t cap) {
    const size_t per_k = (size_t)af_gp_packed_b_floats(1, n) * sizeof(uint16_t); /* bytes per depth index */
    int64_t kb = (int64_t)(cap / per_k) / GP_KC_BF16 * GP_KC_BF16;
    if (kb < GP_KC_BF16) kb = GP_KC_BF16;
    if (kb > k) kb = k;
    uint32_t *bp = bp_get((size_t)af_gp_packed_b_floats(kb, n) * sizeof(uint16_t));
    if (!bp) return false;
    const uint8_t *wb = (const uint8_t *)w;
    for (int64_t k0 = 0; k0 < k; k0 += kb) {
        const int64_t kc = k - k0 < kb ? k - k0 : kb; /* even: k is, and kb a multiple of GP_KC_BF16 */
        /* depth k0..: columns k0.. of each row of W (b_trans; k0 on a block boundary), or rows k0.. */
        const uint8_t *wk = wb + (b_trans ? af_row_bytes(type, k0) : (size_t)k0 * (size_t)ldw_bytes);
        gp_block(ctx, bp, c, ldc, a + k0 * sak, sat, sak, wk, type, ldw_bytes, b_trans, m, n, kc, k0 ? 1 : accumulate,
                 nth, true, NULL);
    }
    return true;
}

bool af_gp_gemm(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                int accumulate, int nth) {
    if (af_gp_i8_applies(ctx, n, k, type)) /* int8 frozen products (gemm_int8.h) */
        return af_gp_gemm_i8(ctx, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, NULL);
    const bool bf = use_bf16(ctx, k);
    /* bf16 packs pairs of k into 32 bits: half the bytes of f32 */
    const size_t esz = bf ? sizeof(uint16_t) : sizeof(float), cap = block_cap(ctx, n, k, bf);
    size_t bbytes = (size_t)af_gp_packed_b_floats(k, n) * esz;
    if (gp_streams(b_trans, m)) { /* no packed B: no buffer, no column blocks */
        gp_block(ctx, NULL, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, bf, NULL);
        return true;
    }
    if (bbytes <= cap) {
        uint32_t *bp = bp_get(bbytes);
        if (!bp) return false;
        gp_block(ctx, bp, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, bf, NULL);
        return true;
    }
    /* The GEMM's column loop (Goto's NC): blocks of whole panels, each packed into at most `cap`
     * bytes (or one granule when even that does not fit: af_gp_usable refuses such products),
     * widths balanced and a multiple of the granule. Every element of C is computed by the same
     * chain of FMAs as in one call (the panels keep their place in a block), so the result is
     * bitwise that of one unbounded call, for any block width. */
    const int64_t gran = (b_trans || type == AF_TYPE_F32) ? AF_GP_NR : GP_COL_ALIGN;
    if (bf && ((!b_trans && vocab_shaped(n, k)) || (size_t)k * (size_t)gran * esz > cap))
        return gp_depth_blocks(ctx, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, cap);
    const int64_t ngran = (n + gran - 1) / gran;
    int64_t per = (int64_t)(cap / ((size_t)k * esz)) / gran; /* granules per block */
    if (per < 1) per = 1;
    const int64_t nblk = (ngran + per - 1) / per;
    const int64_t width = (ngran + nblk - 1) / nblk * gran;
    /* the buffer of the widest block, before any block: C stays untouched if it cannot be had */
    uint32_t *bp = bp_get((size_t)af_gp_packed_b_floats(k, width) * esz);
    if (!bp) return false;
    const uint8_t *wb = (const uint8_t *)w;
    for (int64_t j0 = 0; j0 < n; j0 += width) {
        int64_t nb = n - j0 < width ? n - j0 : width;
        /* columns j0.. of B: rows j0.. of W (b_trans), or j0 values into each row of W */
        const uint8_t *wj = wb + (b_trans ? (size_t)j0 * (size_t)ldw_bytes : af_row_bytes(type, j0));
        gp_block(ctx, bp, c + j0, ldc, a, sat, sak, wj, type, ldw_bytes, b_trans, m, nb, k, accumulate, nth, bf,
                 NULL);
    }
    return true;
}

bool af_gp_gemm_fused(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                      const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                      int accumulate, int nth, const af_gp_fused *f) {
    if (af_gp_i8_applies(ctx, n, k, type))
        return !(f && f->xc) &&
               af_gp_gemm_i8(ctx, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, f);
    const bool bf = use_bf16(ctx, k);
    const size_t bbytes = (size_t)af_gp_packed_b_floats(k, n) * (bf ? sizeof(uint16_t) : sizeof(float));
    if (bbytes > max_b(ctx)) return false; /* one block of columns only */
    if (f && f->xc && !(bf && ctx->k->gp_bf16 && ctx->k->gp_bf16->amx_ukernel && (sak == 1 || sat == 1) && f->xn <= AF_GP_NR))
        return false; /* the side product runs on the tiles only */
    if (f && f->yb && !(f->xc && sak == 1 && m % 2 == 0)) return false;
    const bool stream = gp_streams(b_trans, m);
    uint32_t *bp = stream ? NULL : bp_get(bbytes);
    if (!bp && !stream) return false;
    gp_block(ctx, bp, c, ldc, a, sat, sak, w, type, ldw_bytes, b_trans, m, n, k, accumulate, nth, bf, f);
    return true;
}

/* ---------------------------------------------------------------- B packed once, used many times */

int64_t af_gp_bf16_panels_dwords(int64_t n, int64_t k) { return (n + AF_GP_NR - 1) / AF_GP_NR * AF_GP_NR * (k / 2); }

bool af_gp_pack_bf16_panels(const af_ctx *ctx, uint32_t *bp, const float *w, int64_t ldw, int b_trans, int64_t n,
                            int64_t k) {
    if (!use_bf16(ctx, k) || !ctx->k->gp_bf16) return false;
    const size_t rb = (size_t)ldw * sizeof(float);
    if (b_trans)
        pack_b_trans(ctx->k, bp, (const uint8_t *)w, AF_TYPE_F32, rb, n, k, true, 0, (n + AF_GP_NR - 1) / AF_GP_NR);
    else pack_b_rows_bf16(ctx->k, bp, (const uint8_t *)w, AF_TYPE_F32, rb, n, k, 0, k / 2);
    return true;
}

bool af_gp_gemm_bf16_panels(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                            const uint32_t *bp, int64_t pstride, int64_t d0, int64_t m, int64_t n, int64_t k,
                            int accumulate) {
    if (!use_bf16(ctx, k) || !ctx->k->gp_bf16 || d0 % 2) return false;
    /* the driver's task on one thread with B already packed: one column group, every row block */
    gp_job J = {.kt = ctx->k, .bp = (uint32_t *)(uintptr_t)(bp + d0 / 2 * AF_GP_NR), .type = AF_TYPE_F32, .bf = true,
                .c = c, .ldc = ldc, .a = a, .sat = sat, .sak = sak, .m = m, .n = n, .k = k, .acc = accumulate,
                .npan = (n + AF_GP_NR - 1) / AF_GP_NR, .pstride = pstride, .nmb = (m + MC - 1) / MC, .ngr = 1,
                .team = 1};
    J.gsz = J.npan;
    J.amx = ctx->k->gp_bf16->amx_ukernel && (sak == 1 || sat == 1);
    gp_task_job(&J, 0, 1, 0);
    return true;
}

#else /* not x86-64: no packed micro-kernel (ctx->k->mm->ukernel is NULL), so af_gp_usable is false */

bool af_gp_gemm(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                int accumulate, int nth) {
    (void)ctx, (void)c, (void)ldc, (void)a, (void)sat, (void)sak, (void)w, (void)type, (void)ldw_bytes;
    (void)b_trans, (void)m, (void)n, (void)k, (void)accumulate, (void)nth;
    return false;
}

int64_t af_gp_bf16_panels_dwords(int64_t n, int64_t k) { return (n + AF_GP_NR - 1) / AF_GP_NR * AF_GP_NR * (k / 2); }

bool af_gp_pack_bf16_panels(const af_ctx *ctx, uint32_t *bp, const float *w, int64_t ldw, int b_trans, int64_t n,
                            int64_t k) {
    (void)ctx, (void)bp, (void)w, (void)ldw, (void)b_trans, (void)n, (void)k;
    return false;
}

bool af_gp_gemm_bf16_panels(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                            const uint32_t *bp, int64_t pstride, int64_t d0, int64_t m, int64_t n, int64_t k,
                            int accumulate) {
    (void)ctx, (void)c, (void)ldc, (void)a, (void)sat, (void)sak, (void)bp, (void)pstride, (void)d0, (void)m, (void)n;
    (void)k, (void)accumulate;
    return false;
}

bool af_gp_gemm_fused(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                      const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                      int accumulate, int nth, const af_gp_fused *f) {
    (void)ctx, (void)c, (void)ldc, (void)a, (void)sat, (void)sak, (void)w, (void)type, (void)ldw_bytes;
    (void)b_trans, (void)m, (void)n, (void)k, (void)accumulate, (void)nth, (void)f;
    return false;
}
#endif
