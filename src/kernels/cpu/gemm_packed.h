/* gemm_packed.h — cache-blocked GEMM on packed operands (gemm_packed.c), used by matmul.c for
 * large products when the kernel path has a packed micro-kernel (ops.ukernel). */
#ifndef AF_GEMM_PACKED_H
#define AF_GEMM_PACKED_H

#include "afinar.h"
#include "kernels/cpu/matmul_internal.h"

#include <stdbool.h>
#include <stdint.h>

#define AF_GP_NR 32  /* columns per packed B panel (= micro-tile width) */
#define AF_GP_KC 256 /* K-chunk: a multiple of every block size (32, 256) */

/* Floats of the packed B for B[k, n]: ceil(n/32)*32*k. */
int64_t af_gp_packed_b_floats(int64_t k, int64_t n);

/* True when af_gp_gemm should be used for C[m,n] = A[m,k]·B[k,n] on ctx's path: ctx->k->mm->ukernel
 * present (AVX-512 and AVX2 paths), m > AF_MM_DECODE_N, n >= 16, k >= 16, n*k >= 4096 (GP_MIN_NK in
 * gemm_packed.c: LoRA products with r = 16 included), and either the packed B (n rounded up to 32,
 * x k x 4 bytes) fits in MAX_B = 64 MiB (ctx->gp_max_b when set), or the product is
 * projection-shaped, max(n, k) <= 8 min(n, k) (GP_MAX_ASPECT), and k x 256 x 4 bytes fit: then
 * af_gp_gemm runs it in column blocks of at most MAX_B. Vocabulary-shaped products (LM heads and
 * their backward, ratio >= 16 in every supported model) over MAX_B stay on matmul.c's panel path.
 * Apart from m > AF_MM_DECODE_N the choice does not depend on m, so a product split into row
 * blocks gives bitwise the result of one call. */
bool af_gp_usable(const af_ctx *ctx, int64_t m, int64_t n, int64_t k);

/* True when af_gp_gemm's bf16 products of depth k run on AMX tiles on ctx (bf16 precision, k even,
 * a path with the tile kernels) for operands with contiguous rows or columns. */
bool af_gp_amx(const af_ctx *ctx, int64_t k);

/* Tests only: the largest packed B (bytes) of ctx's products, 0 for the default MAX_B (64 MiB),
 * so that the column blocks are exercised on small matrices. Call while no kernel uses ctx. */
void af_gp_set_max_b(af_ctx *ctx, size_t bytes);

/* C[m, n] (+)= A[m, k] · B[k, n], f32, row-major C with row stride ldc (floats).
 *  A(t, kk) = a[t*sat + kk*sak] (f32, any strides).
 *  B from rows of W (type `type`, any block format af_type_can_dequantize accepts, or F32), W's
 *  row stride ldw_bytes: b_trans = 1: B[kk][j] = W[j][kk] (W is [n, k], x·Wᵀ);
 *  b_trans = 0: B[kk][j] = W[kk][j] (W is [k, n], dy·W). Block types need the dequantized
 *  index (kk for b_trans, j otherwise) to start at multiples of AF_GP_KC, which holds.
 *  accumulate: add to C instead of overwriting it. nth: threads of ctx's pool (>= 1; a nested call runs on one).
 *  A packed B over MAX_B is packed and multiplied in column blocks of at most MAX_B bytes (widths
 *  a multiple of 32 columns, of 256 when b_trans = 0 with a block type), so the packing buffer
 *  stays <= MAX_B; the result is bitwise that of one block. x·Wᵀ (b_trans = 1) with m <= 128
 *  rows (one row block: prompts, small batches) is not packed whole: each task packs the chunk of
 *  a panel it is about to use (no buffer, no column blocks), bitwise the same result.
 * Returns false (C untouched) when the packed B cannot be allocated. Results do not depend on nth.
 * Precision: f32, or bf16 operands when ctx->bf16 and k is even (packed B pairs; error bound
 * in gemm_packed_avx512.c; on AMX tiles, gemm_amx.c, where ctx->k has them and A's rows or columns are
 * contiguous (stride 1)), or int8 for the frozen weights' products when ctx->i8 (af_gp_i8_applies:
 * gemm_int8.h, its own driver). Kernels: ctx->k (mm->ukernel, mm->tpack, gp_bf16, gp_i8). */
bool af_gp_gemm(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                int accumulate, int nth);

/* The epilogue of af_gp_gemm_fused: ep(arg, r0, mc, j0, nc) is called once per task, rows
 * r0 .. r0 + mc (a block of at most 128) x columns j0 .. j0 + nc (all n, or a group of whole
 * 32-column panels when the row blocks do not divide over the threads), as soon as that part of C
 * is final, while it is still in cache (L2); the callee walks whole rows (prefetch-friendly: a
 * callback per 32-column tile, each row's segment in another page, missed cache on every row).
 * Calls for disjoint parts run concurrently on the pool's threads, so ep writes only inside its
 * part (of any array it owns, e.g. the activation of gate and up). It may run AMX tile products of its
 * own (the task configures the tiles again after it). */
typedef struct af_gp_fused {
    void (*ep)(void *arg, int64_t r0, int64_t mc, int64_t j0, int64_t nc);
    void *arg;
    /* Optional side product from the same packed rows of A (products on AMX tiles only; xc NULL:
     * none): xc [m, xn] = A·X, X [k, xn] (xn <= AF_GP_NR) given as one bf16 panel (xbp:
     * af_gp_pack_bf16_panels with the product's depth k). Each task computes its rows of xc (every
     * column, every depth chunk) before its epilogue, so ep may read them: LoRA's x·Aᵀ or dy·B, whose
     * separate product would pack the same activations again. The tasks then cover all columns (one
     * column group). Bitwise what af_gp_gemm gives for A·X alone when that takes the packed path on
     * the tiles (the same micro-kernel calls over the same depth chunks). */
    const uint32_t *xbp;
    float *xc;
    int64_t xn;
    /* Optional second layout of A (with the side product only, A given by rows, m even; yb NULL:
     * none): A's rows in pairs as the B operand of a later product over them (af_gp_pack_bf16_panels
     * b_trans 0 of A [m, k]: panels of m/2·32 dwords, columns past k zero), written by each task from
     * its rows while they are in cache: LoRA's dB = dyᵀ·(s·xa), which would read dy again. */
    uint32_t *yb;
} af_gp_fused;

/* af_gp_gemm with the epilogue of `f` (af_gp_fused), on the same conditions (af_gp_usable), for
 * products whose packed B fits in one block of MAX_B: false (C untouched, ep not called) when it
 * does not or when the buffer cannot be allocated; the caller then computes the same thing
 * unfused. C equals af_gp_gemm's bit for bit, for any nth. */
bool af_gp_gemm_fused(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                      const void *w, uint32_t type, int64_t ldw_bytes, int b_trans, int64_t m, int64_t n, int64_t k,
                      int accumulate, int nth, const af_gp_fused *f);

/* Task dealing of the packed GEMMs' task jobs (gemm_packed.c, gemm_int8.c): share th of a team owns
 * tasks th, th + team, ... (round-robin); a thread runs its own share's tasks, then takes the tasks the
 * other shares have not started, so a thread slowed by another process on its core (or a late worker)
 * holds up only the task it is running. One claim counter per share, each on its own cache line.
 * af_gp_deal_init: zeroes next[0 .. team) and returns it; NULL (static dealing: each share runs its
 * own tasks only) for a team of 1 or of more than AF_GP_SHARES.
 * af_gp_deal_next: the next task for share th (< ntask), or -1 when none is left; *o is the walk's
 * state, 0 before the first call. Tasks must not depend on the thread that runs them. */
#define AF_GP_SHARES 64
typedef struct af_gp_claim {
    _Alignas(64) int64_t n;
} af_gp_claim;
af_gp_claim *af_gp_deal_init(af_gp_claim next[AF_GP_SHARES], int team);
int64_t af_gp_deal_next(af_gp_claim *next, int64_t team, int64_t ntask, int64_t th, int64_t *o);

/* B packed once and used by many products (the blocked attention's K and V, gemm_packed.c): bf16
 * panels of an f32 matrix W (row stride ldw floats) in af_gp_gemm's layout, for C = A·Wᵀ (b_trans = 1:
 * W [n, k]) or C = A·W (b_trans = 0: W [k, n]); panel p (columns 32p ..) holds pairs of depth
 * (q = 0 .. k/2 - 1) at bp + p·(k/2)·32 + q·32 + j % 32, columns past n zero. k even.
 * af_gp_bf16_panels_dwords: the dwords of that buffer. af_gp_pack_bf16_panels: packs it (calling
 * thread only); false when ctx has no bf16 products (f32 context, or a path without them).
 * af_gp_gemm_bf16_panels: C[m, n] (+)= A · B on the calling thread, A as in af_gp_gemm (strides sat, sak),
 * B the depths d0 .. d0 + k of such a buffer (panels of pstride dwords; d0 even) — bitwise the C of
 * af_gp_gemm on the same operands (the same packed values, micro-kernels and depth chunks); false
 * (C untouched) when ctx has no bf16 products or k is odd. */
int64_t af_gp_bf16_panels_dwords(int64_t n, int64_t k);
bool af_gp_pack_bf16_panels(const af_ctx *ctx, uint32_t *bp, const float *w, int64_t ldw, int b_trans, int64_t n,
                            int64_t k);
bool af_gp_gemm_bf16_panels(const af_ctx *ctx, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                            const uint32_t *bp, int64_t pstride, int64_t d0, int64_t m, int64_t n, int64_t k,
                            int accumulate);

/* The calling thread's packed-B buffer, grown to at least `bytes` (contents undefined; NULL when it
 * cannot be had), for the int8 products (gemm_int8.c), which run instead of af_gp_gemm, never inside it. */
void *af_gp_buffer(size_t bytes);

/* Frees the calling thread's packed-B buffer (kept between calls, grow-only, <= MAX_B = 64 MiB). */
void af_gp_release(void);

#if defined(__x86_64__)
/* gemm_packed_avx512.c (reached through kernels.h tables: af_mm_ops_avx512.tpack,
 * af_gp_bf16_ops_avx512). bf16(x) = round-to-nearest-even of f32 x; a pair packs two consecutive k
 * in 32 bits: bf16(x[k]) | bf16(x[k+1]) << 16.
 * af_gp_tpack_f32:  dst[q*ldd + i] = src[i][q] for q < kc, i < 8 (AVX-512 path);
 * af_gp_tpack_bf16: dst[q*ldd + i] = pair(src[i][2q], src[i][2q+1]) for q < kc/2, kc even
 *                   (AVX512_BF16 only); src[i] NULL: zeros in column i.
 * af_gp_bf16_pair_rows: dst[j] = pair(lo[j], hi[j]), j < n (AVX512_BF16 only).
 * af_gp_bf16_pair_cols: dst[q*8 + i] = pair(src[2q*s + i], src[(2q+1)*s + i]), q < kp, i < nrow <= 8,
 *                   0 for i >= nrow (AVX512_BF16 only).
 * af_gp_ukernel_bf16: C[i][j] (+)= sum_p ap[p*8+i] . bp[p*32+j] (bf16 pair dot products, f32
 * accumulation, VDPBF16PS) for i < mr <= 8, j < nr <= 32, p < kp; ap [kp][8], bp [kp][32]
 * 64-byte aligned (AVX512_BF16 only). */
void af_gp_tpack_f32(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd);
void af_gp_tpack_bf16(const float *const src[8], int64_t kc, uint32_t *dst, int64_t ldd);
void af_gp_bf16_pair_rows(const float *lo, const float *hi, uint32_t *dst, int64_t n);
void af_gp_bf16_pair_cols(const float *src, int64_t s, int64_t kp, int64_t nrow, uint32_t *dst);
void af_gp_ukernel_bf16(int mr, int64_t kp, const uint32_t *ap, const uint32_t *bp, float *c, int64_t ldc,
                        int nr, int accumulate);
/* gemm_amx.c (AMX-TILE + AMX-BF16 + AMX-INT8 only: af_cpu()->amx_ready; layouts there). */
void af_gp_amx_pack_a(const float *a, int64_t sat, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst, int64_t lda);
void af_gp_amx_pack_at(const float *a, int64_t sak, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst, int64_t lda);
void af_gp_amx_ukernel(int mr, int64_t kp, const uint32_t *ap, int64_t lda, const uint32_t *bp, float *c, int64_t ldc,
                       int nr, int accumulate, int *tilecfg);
#endif

#endif /* AF_GEMM_PACKED_H */
