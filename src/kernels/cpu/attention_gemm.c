/*
 * attention_gemm.c — causal grouped-query attention of a whole training sequence as blocked
 * matrix products on the packed GEMM (gemm_packed.c), for the AVX-512 and AVX2 paths. Same contract as
 * af_attention_forward / af_attention_backward (ops.h) restricted to q_pos0 = 0, n_q = n_kv.
 *
 * Forward, per (query head h, block of AR query rows r0..): S = Q_blk · K[c0:c1]ᵀ (the key
 * columns the block can see, c0 aligned down to AR), softmax per row with the causal / sliding
 * window mask and the scale, lse saved, O_blk = P · V[c0:c1]. One task per (h, block), each on one
 * thread, so results do not depend on the thread count.
 * Backward (Dao, "FlashAttention-2", 2023, Algorithm 2, with P and dS kept per head instead of
 * recomputed per key block): pass A per (h, row block): P = exp(scale·S − lse) recomputed,
 * dP = dO_blk · V[c0:c1]ᵀ, dS = scale · P ⊙ (dP − rowsum(dO ⊙ O)), dQ_blk += dS · K[c0:c1];
 * P and dS stored for the head ([n_q, n_kv], zero where masked). Pass B per (kv head g, block
 * of AR keys j0..): dK[j0..] += Σ_h dS_h[:, j0..]ᵀ · Q_h and dV[j0..] += Σ_h P_h[:, j0..]ᵀ · dO_h over
 * the rows that see the block, heads in a fixed order. Buffers: 2 · heads · n_q · n_kv floats for a
 * chunk of kv groups (at most AG_MAX_BUF bytes; a single group above that is not handled here).
 * Numerics: f32 (or bf16 operands with af_matmul precision bf16, as PyTorch's autocast does for
 * bmm), exp via vexp.h (<= 1 ulp); equal to the row kernels of ops_attention.c up to summation
 * order (tests/test_ops.c compares them).
 */
#include "kernels/cpu/attention_gemm.h"

#include "core/core.h"
#include "kernels/ctx.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/vexp.h"

#define AR 64                   /* query rows per block = keys per key block */
#define AG_MAX_BUF (256u << 20) /* P + dS bytes of one chunk of kv groups */
#define AG_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

static size_t group_bytes(int64_t n_q, int64_t n_kv, int64_t group) {
    return (size_t)group * (size_t)n_q * (size_t)n_kv * 2 * sizeof(float);
}

bool af_att_gemm_usable(const af_ctx *ctx,
                        int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                        int64_t hd) {
    if (!ctx->att_gemm || !ctx->k->ag || !ctx->k->mm->ukernel) return false;
    if (q_pos0 != 0 || n_q != n_kv || n_q < 32 || hd < 16 || n_kv_heads <= 0 || n_heads % n_kv_heads) return false;
    return group_bytes(n_q, n_kv, n_heads / n_kv_heads) <= AG_MAX_BUF;
}

/* Grow-only buffers of the calling thread (kept between calls like the packed GEMM's: a fresh
 * malloc per call faulted in ~20 MB of pages per layer at 512 tokens). */
static _Thread_local float *g_buf[2];
static _Thread_local size_t g_cap[2];

/* bf16 contexts: each thread packs the B operands that every block of a head reads (K and V of a kv
 * head, Q and dO of the heads of a group) once per call into bf16 panels (af_gp_pack_bf16_panels) and
 * multiplies each block against its range of them, instead of converting the same keys again for every
 * block (K rows were packed 4.5 times per head at 512 tokens). Slots: 0 K (for Q·Kᵀ), 1 V (P·V), 2 V
 * (dO·Vᵀ), 3 K (dS·K), 4 + 2i / 5 + 2i Q / dO of the i-th head of the group (dSᵀ·Q, Pᵀ·dO). A slot
 * holds what it was packed from (pointer, call) and is packed again when either changes. */
#define AG_SLOTS (4 + 2 * 8)
typedef struct ag_slot {
    const float *w;
    uint64_t call;
    uint32_t *bp;
    size_t cap; /* dwords */
} ag_slot;
static _Thread_local ag_slot g_slot[AG_SLOTS];
static uint64_t g_calls; /* calls of af_att_gemm_forward / _backward: a slot's data belongs to one */

void af_att_gemm_release(void) {
    for (int i = 0; i < 2; i++) {
        free(g_buf[i]);
        g_buf[i] = NULL;
        g_cap[i] = 0;
    }
    for (int i = 0; i < AG_SLOTS; i++) {
        af_free_aligned(g_slot[i].bp);
        memset(&g_slot[i], 0, sizeof g_slot[i]);
    }
}

static float *buf_get(int i, size_t floats) {
    if (floats <= g_cap[i]) return g_buf[i];
    free(g_buf[i]);
    g_cap[i] = 0;
    g_buf[i] = malloc(floats * sizeof(float));
    if (g_buf[i]) g_cap[i] = floats;
    return g_buf[i];
}

/* Key columns [c0, c1) computed for the query rows [r0, r0 + AR): from the first key the block's
 * first row sees, aligned down to AR, to the block's last row (causal). */
static void blk_cols(int64_t r0, int64_t n_kv, int64_t window, int64_t *c0, int64_t *c1) {
    int64_t lo = (window > 0 && r0 - window + 1 > 0) ? r0 - window + 1 : 0;
    *c0 = lo / AR * AR;
    *c1 = r0 + AR < n_kv ? r0 + AR : n_kv;
}

/* Keys [lo, hi] seen by query p, clipped to [c0, c1); returns false when none. */
static bool row_keys(int64_t p, int64_t window, int64_t c0, int64_t c1, int64_t *lo, int64_t *hi) {
    *lo = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
    if (*lo < c0) *lo = c0;
    *hi = p < c1 - 1 ? p : c1 - 1;
    return *hi >= *lo;
}

/* Zero x[a, b). */
static void zero(float *x, int64_t a, int64_t b) {
    if (b > a) memset(x + a, 0, (size_t)(b - a) * sizeof(float));
}

/* Forward softmax of one row s[0, nc) (columns c0..): visible keys [lo, hi] relative to c0 get
 * p = exp(scale·s − m) / l, the others 0; returns lse = m + log l (-inf when nothing is visible). A
 * NaN score makes the whole row NaN (as the row kernels). */
AG_T static float softmax_row512(float *s, int64_t nc, int64_t lo, int64_t hi, float scale) {
    zero(s, 0, lo);
    zero(s, hi + 1, nc);
    if (hi < lo) return -INFINITY;
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int64_t j = lo; j <= hi; j += 16) {
        __mmask16 mk = (__mmask16)(hi - j + 1 >= 16 ? 0xFFFF : (1u << (hi - j + 1)) - 1);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s + j), vs);
        _mm512_mask_storeu_ps(s + j, mk, x);
        vm = _mm512_mask_max_ps(vm, mk, vm, x);
    }
    float m = _mm512_reduce_max_ps(vm);
    if (m == -INFINITY) m = 0.0f; /* all scores -inf: exp gives 0s and lse -inf */
    const __m512 mm = _mm512_set1_ps(m);
    __m512 vl = _mm512_setzero_ps();
    for (int64_t j = lo; j <= hi; j += 16) {
        __mmask16 mk = (__mmask16)(hi - j + 1 >= 16 ? 0xFFFF : (1u << (hi - j + 1)) - 1);
        __m512 e = af_vexp_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), mm));
        e = _mm512_maskz_mov_ps(mk, e);
        _mm512_mask_storeu_ps(s + j, mk, e);
        vl = _mm512_add_ps(vl, e);
    }
    float l = _mm512_reduce_add_ps(vl);
    const __m512 inv = _mm512_set1_ps(1.0f / l);
    for (int64_t j = lo; j <= hi; j += 16) {
        __mmask16 mk = (__mmask16)(hi - j + 1 >= 16 ? 0xFFFF : (1u << (hi - j + 1)) - 1);
        _mm512_mask_storeu_ps(s + j, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s + j), inv));
    }
    return m + logf(l);
}

/* Backward row: p = exp(scale·s − L) over the visible keys (0 elsewhere) in s; then, with dp in d,
 * d = scale · p ⊙ (dp − D) over the visible keys (0 elsewhere). */
AG_T static void grad_row512(float *s, float *d, int64_t nc, int64_t lo, int64_t hi, float scale, float L, float D) {
    zero(s, 0, lo);
    zero(s, hi + 1, nc);
    zero(d, 0, lo);
    zero(d, hi + 1, nc);
    const __m512 vs = _mm512_set1_ps(scale), vL = _mm512_set1_ps(L), vD = _mm512_set1_ps(D);
    for (int64_t j = lo; j <= hi; j += 16) {
        __mmask16 mk = (__mmask16)(hi - j + 1 >= 16 ? 0xFFFF : (1u << (hi - j + 1)) - 1);
        __m512 p = af_vexp_512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(mk, s + j), vs, vL));
        __m512 g = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, d + j), vD)), vs);
        _mm512_mask_storeu_ps(s + j, mk, p);
        _mm512_mask_storeu_ps(d + j, mk, g);
    }
}

AG_T static float dot_row512(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* The same three row functions with AVX2+FMA (8 lanes; vmaskmovps at the right edge, lanes past
 * the edge masked out of the sums). */
#define AG_T2 __attribute__((target("avx2,fma")))
static const int32_t ag_mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* Lane mask of the first min(n, 8) lanes (n >= 1), for vmaskmovps. */
AG_T2 static inline __m256i ag_mask(int64_t n) {
    return _mm256_loadu_si256((const __m256i *)(ag_mask_tab + 8 - (n < 8 ? n : 8)));
}

AG_T2 static inline float ag_hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

AG_T2 static inline float ag_hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

AG_T2 static float softmax_row256(float *s, int64_t nc, int64_t lo, int64_t hi, float scale) {
    zero(s, 0, lo);
    zero(s, hi + 1, nc);
    if (hi < lo) return -INFINITY;
    const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256 vm = ninf;
    for (int64_t j = lo; j <= hi; j += 8) {
        __m256i mk = ag_mask(hi - j + 1);
        __m256 x = _mm256_mul_ps(_mm256_maskload_ps(s + j, mk), vs);
        _mm256_maskstore_ps(s + j, mk, x);
        /* lanes past the edge: -inf. A NaN score may be dropped by vmaxps here, but it makes its
         * exp, hence l and the whole row, NaN below (as the row kernels) */
        vm = _mm256_max_ps(vm, _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(mk)));
    }
    float m = ag_hmax(vm);
    if (m == -INFINITY) m = 0.0f;
    const __m256 mm = _mm256_set1_ps(m);
    __m256 vl = _mm256_setzero_ps();
    for (int64_t j = lo; j <= hi; j += 8) {
        __m256i mk = ag_mask(hi - j + 1);
        __m256 e = af_vexp_256(_mm256_sub_ps(_mm256_maskload_ps(s + j, mk), mm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(s + j, mk, e);
        vl = _mm256_add_ps(vl, e);
    }
    float l = ag_hsum(vl);
    const __m256 inv = _mm256_set1_ps(1.0f / l);
    for (int64_t j = lo; j <= hi; j += 8) {
        __m256i mk = ag_mask(hi - j + 1);
        _mm256_maskstore_ps(s + j, mk, _mm256_mul_ps(_mm256_maskload_ps(s + j, mk), inv));
    }
    return m + logf(l);
}

AG_T2 static void grad_row256(float *s, float *d, int64_t nc, int64_t lo, int64_t hi, float scale, float L, float D) {
    zero(s, 0, lo);
    zero(s, hi + 1, nc);
    zero(d, 0, lo);
    zero(d, hi + 1, nc);
    const __m256 vs = _mm256_set1_ps(scale), vL = _mm256_set1_ps(L), vD = _mm256_set1_ps(D);
    for (int64_t j = lo; j <= hi; j += 8) {
        __m256i mk = ag_mask(hi - j + 1);
        __m256 p = af_vexp_256(_mm256_fmsub_ps(_mm256_maskload_ps(s + j, mk), vs, vL));
        __m256 g = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_sub_ps(_mm256_maskload_ps(d + j, mk), vD)), vs);
        _mm256_maskstore_ps(s + j, mk, p);
        _mm256_maskstore_ps(d + j, mk, g);
    }
}

AG_T2 static float dot_row256(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256i mk = ag_mask(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mk), _mm256_maskload_ps(b + i, mk), acc);
    }
    return ag_hsum(acc);
}

/* The af_ag_rows parts of the dispatch tables (kernels.h): AVX-512 (16 lanes) or AVX2 (8 lanes). */
const af_ag_rows af_ag_rows_avx512 = {softmax_row512, grad_row512, dot_row512};
const af_ag_rows af_ag_rows_avx2 = {softmax_row256, grad_row256, dot_row256};

/* C[m, n] (+)= A · B on one thread (the callers parallelize over blocks). */
static void mm(const af_ctx *ctx,
               float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak, const float *w, int64_t ldw,
               int b_trans, int64_t m, int64_t n, int64_t k, int acc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!acc)
            for (int64_t i = 0; i < m; i++) zero(c + i * ldc, 0, n);
        return;
    }
    af_gp_gemm(ctx, c, ldc, a, sat, sak, w, AF_TYPE_F32,
               ldw * (int64_t)sizeof(float), b_trans, m, n, k, acc, 1);
}

/* Arguments of the blocked-attention jobs. */
typedef struct ag_job {
    const af_ctx *ctx;
    uint64_t call; /* this call's number (g_calls): the bf16 slots' key */
    const af_ag_rows *ag;
    float *out, *lse, *scr, *dq, *dk, *dv, *Pb, *Db;
    const float *q, *k, *v, *dout, *outc, *lsec;
    int64_t n_q, n_kv, kv_stride, group, qs, ks, nrb, nkb, hd, window, h0, g0, nh, ng;
    size_t per_head;
    float scale;
} ag_job;

/* The bf16 panels of slot `slot` for W [n, k] (b_trans) or [k, n] (row stride ldw floats), packed by
 * the calling thread unless it holds them for this call already; NULL where the context has no bf16
 * products, k is odd, the slot does not exist or memory is short (the caller then uses mm). */
static const uint32_t *ag_panels(const ag_job *J, int slot, const float *w, int64_t ldw, int b_trans, int64_t n,
                                 int64_t k) {
    if (!J->ctx->bf16 || k % 2 || slot >= AG_SLOTS) return NULL;
    ag_slot *S = &g_slot[slot];
    if (S->w == w && S->call == J->call) return S->bp;
    const size_t dw = (size_t)af_gp_bf16_panels_dwords(n, k);
    if (dw > S->cap) {
        af_free_aligned(S->bp);
        S->cap = 0;
        S->bp = af_malloc_aligned(dw * sizeof(uint32_t));
        if (!S->bp) return NULL;
        S->cap = dw;
    }
    S->w = NULL;
    if (!af_gp_pack_bf16_panels(J->ctx, S->bp, w, ldw, b_trans, n, k)) return NULL;
    S->w = w, S->call = J->call;
    return S->bp;
}

/* mm with B taken from slot `slot`'s panels of all of W (n_all columns or depths, see ag_panels): the
 * columns j0 .. j0 + n (b_trans: keys; a multiple of 32) or depths d0 .. d0 + k (rows of W; even) of
 * them; mm itself where the panels cannot be had (bitwise the same C either way). */
static void mm_panels(const ag_job *J, int slot, float *c, int64_t ldc, const float *a, int64_t sat, int64_t sak,
                      const float *w_all, int64_t ldw, int b_trans, int64_t n_all, int64_t k_all, int64_t off,
                      int64_t m, int64_t n, int64_t k, int acc) {
    const uint32_t *bp = m > 0 && n > 0 && k > 0 ? ag_panels(J, slot, w_all, ldw, b_trans, n_all, k_all) : NULL;
    if (b_trans) { /* W [n_all, k]: columns off .. off + n, whole panels from off on */
        if (bp && off % AF_GP_NR == 0 &&
            af_gp_gemm_bf16_panels(J->ctx, c, ldc, a, sat, sak, bp + off / AF_GP_NR * (k_all / 2) * AF_GP_NR,
                                   k_all / 2 * AF_GP_NR, 0, m, n, k, acc))
            return;
        mm(J->ctx, c, ldc, a, sat, sak, w_all + off * ldw, ldw, 1, m, n, k, acc);
    } else { /* W [k_all, n]: depths off .. off + k */
        if (bp && af_gp_gemm_bf16_panels(J->ctx, c, ldc, a, sat, sak, bp, k_all / 2 * AF_GP_NR, off, m, n, k, acc))
            return;
        mm(J->ctx, c, ldc, a, sat, sak, w_all + off * ldw, ldw, 0, m, n, k, acc);
    }
}

/* Forward (head, row block) items [i0, i1); scores in thread tid's slice of scr. */
static void ag_fwd_job(void *va, int64_t i0, int64_t i1, int tid) {
    const ag_job *J = va;
    const int64_t nrb = J->nrb, n_q = J->n_q, n_kv = J->n_kv, qs = J->qs, hd = J->hd, kv_stride = J->kv_stride;
    float *S = J->scr + (size_t)tid * AR * (size_t)n_kv;
    for (int64_t it = i0; it < i1; it++) {
        int64_t h = it / nrb, rb = it % nrb, g = h / J->group;
        int64_t r0 = rb * AR, R = n_q - r0 < AR ? n_q - r0 : AR, c0, c1;
        blk_cols(r0, n_kv, J->window, &c0, &c1);
        int64_t nc = c1 - c0;
        mm_panels(J, 0, S, nc, J->q + r0 * qs + h * hd, qs, 1, J->k + g * hd, kv_stride, 1, n_kv, hd, c0, R, nc, hd, 0);
        for (int64_t r = 0; r < R; r++) {
            int64_t lo, hi;
            if (!row_keys(r0 + r, J->window, c0, c1, &lo, &hi)) lo = 1, hi = 0;
            float L = J->ag->softmax_row(S + r * nc, nc, lo - c0, hi - c0, J->scale);
            if (J->lse) J->lse[h * n_q + r0 + r] = L;
        }
        mm_panels(J, 1, J->out + r0 * qs + h * hd, qs, S, nc, 1, J->v + g * hd, kv_stride, 0, hd, n_kv, c0, R, hd, nc,
                  0);
    }
}

/* Backward pass A: P, dS and dQ per (head, row block), items [i0, i1) of the chunk of heads from h0. */
static void ag_bwd_a_job(void *va, int64_t i0, int64_t i1, int tid) {
    const ag_job *J = va;
    const int64_t nrb = J->nrb, n_q = J->n_q, n_kv = J->n_kv, qs = J->qs, ks = J->ks, hd = J->hd, h0 = J->h0;
    for (int64_t it = i0; it < i1; it++) {
        int64_t h = h0 + it / nrb, rb = it % nrb, g = h / J->group;
        int64_t r0 = rb * AR, R = n_q - r0 < AR ? n_q - r0 : AR, c0, c1;
        blk_cols(r0, n_kv, J->window, &c0, &c1);
        int64_t nc = c1 - c0;
        float *P = J->Pb + (size_t)(h - h0) * J->per_head + (size_t)r0 * n_kv + c0;
        float *dS = J->Db + (size_t)(h - h0) * J->per_head + (size_t)r0 * n_kv + c0;
        mm_panels(J, 0, P, n_kv, J->q + r0 * qs + h * hd, qs, 1, J->k + g * hd, ks, 1, n_kv, hd, c0, R, nc, hd, 0);
        mm_panels(J, 2, dS, n_kv, J->dout + r0 * qs + h * hd, qs, 1, J->v + g * hd, ks, 1, n_kv, hd, c0, R, nc, hd, 0);
        for (int64_t r = 0; r < R; r++) {
            int64_t i = r0 + r, lo, hi;
            if (!row_keys(i, J->window, c0, c1, &lo, &hi)) lo = 1, hi = 0;
            float D = J->ag->dot_row(J->dout + i * qs + h * hd, J->outc + i * qs + h * hd, hd);
            J->ag->grad_row(P + r * n_kv, dS + r * n_kv, nc, lo - c0, hi - c0, J->scale, J->lsec[h * n_q + i], D);
        }
        mm_panels(J, 3, J->dq + r0 * qs + h * hd, qs, dS, n_kv, 1, J->k + g * hd, ks, 0, hd, n_kv, c0, R, hd, nc, 1);
    }
}

/* Backward pass B: dK, dV per (kv head, key block), items [i0, i1) from kv head g0; the heads of
 * a group are added in order. */
static void ag_bwd_b_job(void *va, int64_t i0, int64_t i1, int tid) {
    const ag_job *J = va;
    const int64_t nkb = J->nkb, n_q = J->n_q, n_kv = J->n_kv, qs = J->qs, ks = J->ks, hd = J->hd, h0 = J->h0;
    const int64_t group = J->group;
    for (int64_t it = i0; it < i1; it++) {
        int64_t g = J->g0 + it / nkb, j0 = (it % nkb) * AR, KB = n_kv - j0 < AR ? n_kv - j0 : AR;
        int64_t r0 = j0, r1 = J->window > 0 && j0 + KB - 1 + J->window < n_q ? j0 + KB - 1 + J->window : n_q;
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
            const float *P = J->Pb + (size_t)(h - h0) * J->per_head + (size_t)r0 * n_kv + j0;
            const float *dS = J->Db + (size_t)(h - h0) * J->per_head + (size_t)r0 * n_kv + j0;
            const int hh = (int)(h - g * group);
            mm_panels(J, 4 + 2 * hh, J->dk + j0 * ks + g * hd, ks, dS, 1, n_kv, J->q + h * hd, qs, 0, hd, n_q, r0, KB,
                      hd, r1 - r0, 1);
            mm_panels(J, 5 + 2 * hh, J->dv + j0 * ks + g * hd, ks, P, 1, n_kv, J->dout + h * hd, qs, 0, hd, n_q, r0, KB,
                      hd, r1 - r0, 1);
        }
    }
}

bool af_att_gemm_forward(const af_ctx *ctx,
                         float *out, float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                         int64_t n_kv, int64_t kv_stride, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         float scale, int64_t window) {
    const af_ag_rows *ag = ctx->k->ag;
    const int64_t group = n_heads / n_kv_heads, qs = n_heads * hd, nrb = (n_q + AR - 1) / AR;
    const int nth = af_threadpool_team(ctx->pool, ctx->n_threads);
    float *scr = buf_get(0, (size_t)nth * AR * (size_t)n_kv);
    if (!scr) return false;
    ag_job J = {.ctx = ctx, .call = __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED), .ag = ag, .out = out,
                .lse = lse, .q = q, .k = k, .v = v, .scr = scr, .n_q = n_q, .n_kv = n_kv, .kv_stride = kv_stride,
                .group = group, .qs = qs, .nrb = nrb, .hd = hd, .window = window, .scale = scale};
    af_threadpool_run(ctx->pool, nth, n_heads * nrb, 0, ag_fwd_job, &J);
    return true;
}

bool af_att_gemm_backward(const af_ctx *ctx,
                          float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int64_t n_q, int64_t n_kv,
                          int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, int64_t window) {
    const af_ag_rows *ag = ctx->k->ag;
    const int64_t group = n_heads / n_kv_heads, qs = n_heads * hd, ks = n_kv_heads * hd;
    const int64_t nrb = (n_q + AR - 1) / AR, nkb = (n_kv + AR - 1) / AR;
    int64_t gchunk = (int64_t)(AG_MAX_BUF / group_bytes(n_q, n_kv, group));
    if (gchunk < 1) return false;
    if (gchunk > n_kv_heads) gchunk = n_kv_heads;
    const size_t per_head = (size_t)n_q * (size_t)n_kv;
    float *Pb = buf_get(0, per_head * (size_t)(gchunk * group));
    float *Db = Pb ? buf_get(1, per_head * (size_t)(gchunk * group)) : NULL;
    if (!Pb || !Db) return false;
    ag_job J = {.ctx = ctx, .call = __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED), .ag = ag, .dq = dq, .dk = dk,
                .dv = dv, .dout = dout, .outc = out, .lsec = lse, .q = q, .k = k, .v = v, .Pb = Pb, .Db = Db,
                .n_q = n_q, .n_kv = n_kv, .group = group, .qs = qs, .ks = ks, .nrb = nrb, .nkb = nkb, .hd = hd,
                .window = window, .per_head = per_head, .scale = scale};
    for (int64_t g0 = 0; g0 < n_kv_heads; g0 += gchunk) {
        const int64_t g1 = g0 + gchunk < n_kv_heads ? g0 + gchunk : n_kv_heads;
        J.g0 = g0;
        J.h0 = g0 * group;
        af_threadpool_run(ctx->pool, ctx->n_threads, (g1 - g0) * group * nrb, 0, ag_bwd_a_job, &J);
        af_threadpool_run(ctx->pool, ctx->n_threads, (g1 - g0) * nkb, 0, ag_bwd_b_job, &J);
    }
    return true;
}

#else /* not x86-64 */

void af_att_gemm_release(void) {}

bool af_att_gemm_usable(const af_ctx *ctx,
                        int64_t n_q, int64_t q_pos0, int64_t n_kv, int64_t n_heads, int64_t n_kv_heads,
                        int64_t hd) {
    return false;
}
bool af_att_gemm_forward(const af_ctx *ctx,
                         float *out, float *lse, const float *q, const float *k, const float *v, int64_t n_q,
                         int64_t n_kv, int64_t kv_stride, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         float scale, int64_t window) {
    return false;
}
bool af_att_gemm_backward(const af_ctx *ctx,
                          float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int64_t n_q, int64_t n_kv,
                          int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, int64_t window) {
    return false;
}
#endif
