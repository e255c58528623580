/*
 * gemm_amx.c — the bf16 products of the packed GEMM (gemm_packed.c) on Intel AMX tiles (Intel SDM
 * vol. 1 ch. 3 "Intel Advanced Matrix Extensions" and the TDPBF16PS entry: for each element of a
 * 16 x 16 f32 tile, acc += sum over 16 pairs of a.lo·b.lo + a.hi·b.hi, bf16 products accumulated in
 * f32, denormal inputs and outputs flushed). Same operands as the VDPBF16PS micro-kernel (bf16 pairs
 * of consecutive k, rounded to nearest even when packed), so the same error bound
 * (gemm_packed_avx512.c); the sums run in another order, so the bits differ from that kernel's.
 *
 * A 32 x 32 block of C is four 16 x 16 f32 tiles (tmm0-3) fed by two A tiles (tmm4-5: 16 rows x 16
 * pairs, rows of A as bf16 pairs, row stride lda) and two B tiles (tmm6-7: 16 pairs x 16 columns of
 * the B panel, [kp][32] pairs, row stride 128 bytes): 4 TDPBF16PS per 16 pairs of depth. C is loaded
 * into the tiles and stored back once per call (a depth chunk), through a 32 x 32 buffer at the
 * edges. LDTILECFG is slow (measured on an Emerald Rapids guest: a fifth of a training step when it ran
 * at every call), so the caller keeps the thread's configuration in *tilecfg and it is loaded only when
 * the depth of the A and B tiles changes (the last < 16 pairs of a depth, or a product of depth < 32).
 * A is packed from rows (af_gp_amx_pack_a: activations, output gradients) or from columns
 * (af_gp_amx_pack_at: the transposed operand of the weight-gradient products, e.g. dyᵀ in dW = dyᵀ·x
 * of LoRA's A and B), so every bf16 product of gemm_packed.c with either stride 1 runs on the tiles.
 * Reached only through the AMX variant of the AVX-512 table (kernels.c), chosen when the CPU has
 * AMX-TILE, AMX-BF16 and AMX-INT8 and Linux granted the process the tile data (af_cpu()->amx_ready).
 */
#if defined(__x86_64__)

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"

#include <immintrin.h>
#include <string.h>

/* af_cpu()->amx_ready implies AMX-TILE, AMX-BF16 and AMX-INT8 */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512bf16,avx512dq")))

typedef struct __attribute__((packed)) amx_cfg {
    uint8_t palette, start_row;
    uint8_t rsvd[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* tiles 0-3: C (16 x 64 bytes); 4-5: A (16 rows x 4·kq bytes); 6-7: B (kq rows x 64 bytes) */
AMX_TARGET static void amx_config(int kq) {
    amx_cfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)(4 * kq), cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)kq;
    /* not _tile_loadconfig: GCC 12's declares an 8-byte read, so the stores above were dropped as dead */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");
}

/* The 32 x 32 block of C at cc (row stride ldcc floats) into tiles 0-3 (load) or back (store). */
AMX_TARGET static inline void c_tiles(float *cc, int64_t ldcc, int load) {
    if (load) {
        _tile_loadd(0, cc, ldcc * 4);
        _tile_loadd(1, cc + 16, ldcc * 4);
        _tile_loadd(2, cc + 16 * ldcc, ldcc * 4);
        _tile_loadd(3, cc + 16 * ldcc + 16, ldcc * 4);
    } else {
        _tile_stored(0, cc, ldcc * 4);
        _tile_stored(1, cc + 16, ldcc * 4);
        _tile_stored(2, cc + 16 * ldcc, ldcc * 4);
        _tile_stored(3, cc + 16 * ldcc + 16, ldcc * 4);
    }
}

/* The depth loop of both micro-kernels: tiles 0-3 (C, already loaded or zeroed) += A tiles (rows of ap,
 * stride lda dwords) x B tiles (bp's [kd][32] dwords) over kd dwords of depth (bf16 pairs, or int8 quads
 * with i8: TDPBSUD), 16 at a time; the last kd % 16 with tiles reconfigured for that depth, C passing
 * through cc (row stride ldcc floats) meanwhile. Blocks of <= 16 rows or columns (rows2 / cols2 false:
 * LoRA's r = 16 side of the gradient products) leave out the tiles of the other half, whose inputs are
 * zero padding. */
AMX_TARGET static inline void amx_depth(int i8, int64_t kd, const uint32_t *ap, int64_t lda, const uint32_t *bp,
                                        float *cc, int64_t ldcc, int rows2, int cols2, int *tilecfg) {
    for (int64_t q = 0; q < kd; q += 16) {
        const int64_t kq = kd - q < 16 ? kd - q : 16;
        if (kq != *tilecfg) {
            c_tiles(cc, ldcc, 0);
            amx_config(*tilecfg = (int)kq);
            c_tiles(cc, ldcc, 1);
        }
        _tile_loadd(4, ap + q, lda * 4);
        if (rows2) _tile_loadd(5, ap + 16 * lda + q, lda * 4);
        _tile_loadd(6, bp + q * 32, 128);
        if (cols2) _tile_loadd(7, bp + q * 32 + 16, 128);
        if (i8) {
            _tile_dpbsud(0, 4, 6);
            if (cols2) _tile_dpbsud(1, 4, 7);
            if (rows2) _tile_dpbsud(2, 5, 6);
            if (rows2 && cols2) _tile_dpbsud(3, 5, 7);
        } else {
            _tile_dpbf16ps(0, 4, 6);
            if (cols2) _tile_dpbf16ps(1, 4, 7);
            if (rows2) _tile_dpbf16ps(2, 5, 6);
            if (rows2 && cols2) _tile_dpbf16ps(3, 5, 7);
        }
    }
}

/* A rows [0, mc) of `a` (row stride sat floats, depth k0 .. k0 + kc) as bf16 pairs: dst[i*lda + q] =
 * bf16(a[i][k0 + 2q]) | bf16(a[i][k0 + 2q + 1]) << 16 for q < kc/2 (kc even), zero pairs up to lda and
 * zero rows up to mc rounded up to 32. */
AMX_TARGET void af_gp_amx_pack_a(const float *a, int64_t sat, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst,
                                 int64_t lda) {
    const int64_t rows = (mc + 31) / 32 * 32;
    for (int64_t i = 0; i < rows; i++) {
        uint32_t *d = dst + i * lda;
        if (i >= mc) {
            memset(d, 0, (size_t)lda * sizeof(uint32_t));
            continue;
        }
        const float *x = a + i * sat + k0;
        int64_t q = 0;
        for (int64_t k = 0; k < kc; k += 32, q += 16) {
            const int64_t left = kc - k;
            const __mmask16 m0 = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
            const __mmask16 m1 = (__mmask16)(left >= 32 ? 0xFFFF : left > 16 ? (1u << (left - 16)) - 1 : 0);
            const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + k + 16), _mm512_maskz_loadu_ps(m0, x + k));
            const __mmask16 mq = (__mmask16)(left >= 32 ? 0xFFFF : (1u << (left / 2)) - 1);
            _mm512_mask_storeu_epi32(d + q, mq, (__m512i)v);
        }
        for (q = kc / 2; q < lda; q++) d[q] = 0;
    }
}

/* The row of the 16 x 16 block that the j-th vector holds after the three stages of unpack / shuffle in
 * af_gp_amx_pack_at (each stage swaps the middle bits of the row index). */
static const int amx_tr_row[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};

/* The same packing for A stored by columns (A(i, k) = a[i + k·sak]: the transposed operands of the
 * gradient products, e.g. dyᵀ of dW = dyᵀ·x): 16 rows x 16 pairs at a time, each pair of k rows
 * (16 values of i) converted and interleaved into 16 pairs, then the 16 x 16 block of pairs
 * transposed in registers so that each row of dst is written whole. */
AMX_TARGET void af_gp_amx_pack_at(const float *a, int64_t sak, int64_t k0, int64_t kc, int64_t mc, uint32_t *dst,
                                  int64_t lda) {
    const int64_t rows = (mc + 31) / 32 * 32, kp = kc / 2;
    /* (lo, hi) bf16 of cvtne2ps_pbh(hi, lo) -> dword i = lo[i] | hi[i] << 16 */
    const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        const __mmask16 mi = (__mmask16)(mc - i0 >= 16 ? 0xFFFF : mc > i0 ? (1u << (mc - i0)) - 1 : 0);
        for (int64_t q0 = 0; q0 < lda; q0 += 16) {
            __m512i v[16];
            for (int qq = 0; qq < 16; qq++) {
                const int64_t q = q0 + qq;
                const __mmask16 m = q < kp ? mi : 0;
                const float *lo = m ? a + i0 + (k0 + 2 * q) * sak : a, *hi = m ? lo + sak : a;
                const __m512bh p = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m, hi), _mm512_maskz_loadu_ps(m, lo));
                v[qq] = _mm512_permutexvar_epi16(ilv, (__m512i)p);
            }
            /* 16 x 16 dwords: v[q][i] -> row i = (v[0][i], ..., v[15][i]) */
            __m512i t[16], u[16];
            for (int r = 0; r < 16; r += 2) {
                t[r] = _mm512_unpacklo_epi32(v[r], v[r + 1]);
                t[r + 1] = _mm512_unpackhi_epi32(v[r], v[r + 1]);
            }
            for (int r = 0; r < 16; r += 4)
                for (int h = 0; h < 2; h++) {
                    u[r + h] = _mm512_unpacklo_epi64(t[r + h], t[r + 2 + h]);
                    u[r + 2 + h] = _mm512_unpackhi_epi64(t[r + h], t[r + 2 + h]);
                }
            for (int r = 0; r < 16; r += 8)
                for (int h = 0; h < 4; h++) {
                    t[r + h] = _mm512_shuffle_i32x4(u[r + h], u[r + 4 + h], 0x88);
                    t[r + 4 + h] = _mm512_shuffle_i32x4(u[r + h], u[r + 4 + h], 0xDD);
                }
            for (int h = 0; h < 8; h++) {
                u[h] = _mm512_shuffle_i32x4(t[h], t[h + 8], 0x88);
                u[h + 8] = _mm512_shuffle_i32x4(t[h], t[h + 8], 0xDD);
            }
            for (int j = 0; j < 16; j++) /* u[j] is row amx_tr_row[j], pairs q0 .. q0 + 15 in order */
                _mm512_storeu_si512(dst + (i0 + amx_tr_row[j]) * lda + q0, u[j]);
        }
    }
}

/* C[i][j] (+)= sum_q dot(ap[i*lda + q], bp[q*32 + j]) for i < mr <= 32, j < nr <= 32, q < kp (bf16 pairs,
 * f32 sums): ap 32 rows of at least kp pairs (rows past mr zero), bp [kp][32] pairs. *tilecfg: the pairs per
 * A/B tile row the calling thread's tiles are configured for, 0 when unknown (set 0 at the start of each
 * job: other code on the thread may have changed or released them); updated here. */
AMX_TARGET void af_gp_amx_ukernel(int mr, int64_t kp, const uint32_t *ap, int64_t lda, const uint32_t *bp, float *c,
                                  int64_t ldc, int nr, int accumulate, int *tilecfg) {
    float tmp[32 * 32] __attribute__((aligned(64)));
    const int full = mr == 32 && nr == 32, rows2 = mr > 16, cols2 = nr > 16;
    float *cc = full ? c : tmp;
    const int64_t ldcc = full ? ldc : 32;
    if (!full && accumulate) {
        memset(tmp, 0, sizeof tmp);
        for (int i = 0; i < mr; i++) memcpy(tmp + i * 32, c + i * ldc, (size_t)nr * sizeof(float));
    }
    const int kq0 = kp < 16 ? (int)kp : 16;
    if (*tilecfg != kq0) amx_config(*tilecfg = kq0);
    /* C's 64 lines requested now, so that their misses overlap the products instead of stalling the
     * tile stores at the end (C of a training product is megabytes, out of cache): 1.02-1.07x on
     * SmolLM2's training products (Emerald Rapids guest, 2 threads, interleaved A/B) */
    if (full)
        for (int i = 0; i < 32; i++) {
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
        }
    if (accumulate) {
        c_tiles(cc, ldcc, 1);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    amx_depth(0, kp, ap, lda, bp, cc, ldcc, rows2, cols2, tilecfg);
    c_tiles(cc, ldcc, 0);
    if (!full)
        for (int i = 0; i < mr; i++) memcpy(c + i * ldc, tmp + i * 32, (size_t)nr * sizeof(float));
}

/* The int8 products' micro-kernel on AMX-INT8 tiles (gemm_int8.c, gemm_int8.h: the method). C[i][j] (+)=
 * float(S[i][j] - comp[i]) · (sb[j]·sa[i]) for i < mr <= 32, j < nr <= 32, with S[i][j] = sum_q dot(ap[i*lda + q],
 * bp[q*32 + j]) over kq <= 64 quads (one depth chunk): A s8 quads, rows of ap (row stride lda dwords, rows past
 * mr zero), B u8 quads in the panels of gemm_int8.c ([kq][32] dwords). TDPBSUD (Intel SDM: s8 x u8 products,
 * four per 32-bit lane, summed exactly in int32) gives the VPDPBUSD kernel's integer sums exactly, and the
 * scaling below is that kernel's to the operation (af_i8_ukernel), so C is bitwise the same. comp and sa
 * are in gemm_int8.c's groups of 8 rows: row i at [(i / 8)·gs + i % 8]. *tilecfg as af_gp_amx_ukernel's. */
AMX_TARGET void af_i8_amx_ukernel(int mr, int64_t kq, const uint32_t *ap, int64_t lda, const uint32_t *bp,
                                  const int32_t *comp, const float *sa, int64_t gs, const float *sb, float *c,
                                  int64_t ldc, int nr, int accumulate, int *tilecfg) {
    int32_t s[32 * 32] __attribute__((aligned(64)));
    const int rows2 = mr > 16, cols2 = nr > 16;
    const int kq0 = kq < 16 ? (int)kq : 16;
    if (*tilecfg != kq0) amx_config(*tilecfg = kq0);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    amx_depth(1, kq, ap, lda, bp, (float *)(void *)s, 32, rows2, cols2, tilecfg); /* int32 sums through s */
    c_tiles((float *)(void *)s, 32, 0);
    const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    const __m512 s0 = _mm512_maskz_loadu_ps(m0, sb), s1 = _mm512_maskz_loadu_ps(m1, sb + 16);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        const int64_t g = (i / 8) * gs + i % 8;
        const __m512i ci32 = _mm512_set1_epi32(comp[g]);
        const __m512 si = _mm512_set1_ps(sa[g]);
        const __m512i a0 = _mm512_load_si512(s + i * 32), a1 = _mm512_load_si512(s + i * 32 + 16);
        __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0, ci32)), _mm512_mul_ps(s0, si));
        __m512 v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1, ci32)), _mm512_mul_ps(s1, si));
        if (accumulate) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), v1);
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}

#else
typedef int af_gemm_amx_empty; /* ISO C forbids an empty translation unit */
#endif
