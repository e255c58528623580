/*
 * quant.c — ggml tensor types: dequantization to f32 (the reference quantizers are quantize.c, the
 * block geometry core/blocks.c; byte helpers shared by both: quant_le.h).
 *
 * Sources of the layouts and formulas: ggml src/ggml-common.h (block structs), src/ggml-quants.c
 * (dequantize_row_* / quantize_row_*_ref), summarised in docs/FORMATS.md §2 and
 * cross-checked against the numpy implementation in the `gguf` Python package (gguf/quants.py),
 * which tests/ref/make_quant_vectors.py uses to produce the bit-exact fixtures for tests/test_quant.c.
 *
 * Everything is little-endian. Blocks are read/written byte-wise (no packed structs, no alignment
 * requirements on `src`/`dst`). Every block format is described element by element: for a block of
 * 256 values "element e" is y[e] of that block.
 *
 * Bit-exactness: the dequantizers evaluate the float expressions in the same order as ggml and
 * gguf-py (e.g. Q4_K: (d*sc)*q - (dmin*m), two products and one subtraction, each rounded to f32).
 * This relies on the compiler NOT contracting a*b+c into an FMA: GCC does not contract in ISO C
 * mode (-std=c11, as the Makefile uses: -ffp-contract=off is implied); under -std=gnu11 together
 * with an FMA-capable -march the results may differ by 1 ulp from the reference.
 */
#include "kernels/quant.h"

#include "core/core.h"
#include "kernels/nf4.h"
#include "kernels/quant_le.h"

#include <math.h>
#include <string.h>

bool af_type_can_dequantize(uint32_t type) {
    switch (type) {
    case AF_TYPE_F32: case AF_TYPE_F16: case AF_TYPE_BF16:
    case AF_TYPE_Q4_0: case AF_TYPE_Q4_1: case AF_TYPE_Q5_0: case AF_TYPE_Q5_1: case AF_TYPE_Q8_0:
    case AF_TYPE_Q2_K: case AF_TYPE_Q3_K: case AF_TYPE_Q4_K: case AF_TYPE_Q5_K: case AF_TYPE_Q6_K:
    case AF_TYPE_NF4: /* afinar-internal, kernels/nf4.h */
        return true;
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Dequantization, one block at a time: `b` = block bytes, `y` = block_size outputs.            */
/* ------------------------------------------------------------------------------------------ */

static void dq_q4_0(const uint8_t *b, float *y) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void dq_q4_1(const uint8_t *b, float *y) {
    const float d = h2f(b), m = h2f(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

static void dq_q5_0(const uint8_t *b, float *y) {
    const float d = h2f(b);
    const uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < QK / 2; j++) {
        int q0 = (qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
        int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)(q0 - 16) * d;
        y[j + QK / 2] = (float)(q1 - 16) * d;
    }
}

static void dq_q5_1(const uint8_t *b, float *y) {
    const float d = h2f(b), m = h2f(b + 2);
    const uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < QK / 2; j++) {
        int q0 = (qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
        int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)q0 * d + m;
        y[j + QK / 2] = (float)q1 * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y) {
    const float d = h2f(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < QK; j++) y[j] = (float)qs[j] * d;
}

/* Q2_K: scales[16] qs[64] d dmin. Element e: sub-block e/16, 2-bit field (qs[32*(e/128) + e%32]
 * >> 2*((e%128)/32)) & 3; y = (d*sc)*q - (dmin*m). */
static void dq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *qs = b + 16;
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int e = 0; e < QK_K; e += 16) {
        const float dl = d * (float)(sc[e / 16] & 0x0F);
        const float ml = dmin * (float)(sc[e / 16] >> 4);
        const uint8_t *q = qs + 32 * (e / 128) + (e % 32);
        const int shift = 2 * ((e % 128) / 32);
        for (int l = 0; l < 16; l++) y[e + l] = dl * (float)((q[l] >> shift) & 3) - ml;
    }
}

/* Q3_K: hmask[32] qs[64] scales[12] d. Element e: low 2 bits as Q2_K, high bit = bit e/32 of
 * hmask[e%32]; q = low2 - (high ? 0 : 4); y = (d*(raw_scale-32))*q. */
static void dq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float d = h2f(b + 108);
    for (int e = 0; e < QK_K; e += 16) {
        const float dl = d * (float)q3k_scale(e / 16, sc);
        const uint8_t *q = qs + 32 * (e / 128) + (e % 32);
        const uint8_t *h = hm + (e % 32);
        const int shift = 2 * ((e % 128) / 32), bit = e / 32;
        for (int l = 0; l < 16; l++) {
            int v = ((q[l] >> shift) & 3) - (((h[l] >> bit) & 1) ? 0 : 4);
            y[e + l] = dl * (float)v;
        }
    }
}

/* Q4_K: d dmin scales[12] qs[128]. Element e: sub-block k = e/32, nibble (e%64)/32 of
 * qs[32*(e/64) + e%32]; y = (d*sc[k])*q - (dmin*m[k]). */
static void dq_q4_k(const uint8_t *b, float *y) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *s = b + 4, *qs = b + 16;
    for (int k = 0; k < 8; k++) {
        uint8_t sc, mn;
        get_scale_min_k4(k, s, &sc, &mn);
        const float dl = d * (float)sc, ml = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (k / 2);
        const int shift = 4 * (k & 1);
        for (int l = 0; l < 32; l++) y[32 * k + l] = dl * (float)((q[l] >> shift) & 0x0F) - ml;
    }
}

/* Q5_K: d dmin scales[12] qh[32] qs[128]. As Q4_K, plus bit k of qh[l] as the 5th bit. */
static void dq_q5_k(const uint8_t *b, float *y) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
    for (int k = 0; k < 8; k++) {
        uint8_t sc, mn;
        get_scale_min_k4(k, s, &sc, &mn);
        const float dl = d * (float)sc, ml = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (k / 2);
        const int shift = 4 * (k & 1);
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> shift) & 0x0F) | (((qh[l] >> k) & 1) << 4);
            y[32 * k + l] = dl * (float)v - ml;
        }
    }
}

/* Q6_K: ql[128] qh[64] scales[16] (int8) d. Element e: half h = e/128, r = e%128;
 * low nibble (r/64) of ql[64h + r%64], high 2 bits (qh[32h + r%32] >> 2*(r/32)) & 3;
 * q = (low | high<<4) - 32; y = (d*sc[e/16])*q. */
static void dq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = h2f(b + 208);
    for (int e = 0; e < QK_K; e += 16) {
        const float dl = d * (float)sc[e / 16];
        const int h = e / 128, r = e % 128;
        const uint8_t *lo = ql + 64 * h + (r % 64), *hi = qh + 32 * h + (r % 32);
        const int lshift = 4 * (r / 64), hshift = 2 * (r / 32);
        for (int l = 0; l < 16; l++) {
            int v = ((lo[l] >> lshift) & 0x0F) | (((hi[l] >> hshift) & 3) << 4);
            y[e + l] = dl * (float)(v - 32);
        }
    }
}

void af_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    void (*blk)(const uint8_t *, float *) = NULL;
    if (n <= 0) return;
    switch (type) {
    case AF_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case AF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = af_fp16_to_f32(rd16(p + 2 * i));
        return;
    case AF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = af_bf16_to_f32(rd16(p + 2 * i));
        return;
    case AF_TYPE_NF4:
        af_nf4_dequantize_row(src, dst, n);
        return;
    case AF_TYPE_Q4_0: blk = dq_q4_0; break;
    case AF_TYPE_Q4_1: blk = dq_q4_1; break;
    case AF_TYPE_Q5_0: blk = dq_q5_0; break;
    case AF_TYPE_Q5_1: blk = dq_q5_1; break;
    case AF_TYPE_Q8_0: blk = dq_q8_0; break;
    case AF_TYPE_Q2_K: blk = dq_q2_k; break;
    case AF_TYPE_Q3_K: blk = dq_q3_k; break;
    case AF_TYPE_Q4_K: blk = dq_q4_k; break;
    case AF_TYPE_Q5_K: blk = dq_q5_k; break;
    case AF_TYPE_Q6_K: blk = dq_q6_k; break;
    default:
        /* Unsupported (precondition violated): write zeros rather than leave garbage. */
        memset(dst, 0, (size_t)n * sizeof(float));
        return;
    }
    const int64_t bs = (int64_t)af_type_block_size(type);
    const size_t bb = af_type_block_bytes(type);
    for (int64_t i = 0; i + bs <= n; i += bs, p += bb) blk(p, dst + i);
}

/* Q8_K blocks are not dequantized by af_dequantize_row (activation-only format); tests read them
 * with this helper: y = d * qs. `n` multiple of 256. */
void af_dequantize_row_q8_k(const void *src, float *dst, int64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    for (int64_t i = 0; i + QK_K <= n; i += QK_K, p += 292) {
        const float d = f32_from_bits(rd32(p));
        for (int j = 0; j < QK_K; j++) dst[i + j] = d * (float)(int8_t)p[4 + j];
    }
}
