/*
 * nf4.c — NF4 block quantization and dequantization (layout, rounding rule and sources in nf4.h;
 * docs/FORMATS.md §2 NF4). Scalar reference; the AVX2 dequantization of the matmul kernels
 * (cpu/matmul_unpack.h mm_deq_nf4) gives the same f32 values.
 */
#include "kernels/nf4.h"

#include "core/blocks.h"

#include <string.h>

/* bitsandbytes.functional.get_4bit_type("nf4") as f32 (bit patterns checked by tests/test_nf4.c
 * against the fixture; QLoRA appendix: quantiles of N(0, 1) normalized to [-1, 1] with an exact 0). */
const float af_nf4_code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/* Code of a scaled value s in [-1, 1]: the count of midpoints strictly below s (bucketize). */
static int nf4_code_of(float s, const float mid[15]) {
    int q = 0;
    for (int k = 0; k < 15; k++) q += mid[k] < s;
    return q;
}

void af_nf4_quantize_row(const float *src, void *dst, int64_t n) {
    uint8_t *b = (uint8_t *)dst;
    float mid[15];
    for (int k = 0; k < 15; k++) mid[k] = (af_nf4_code[k] + af_nf4_code[k + 1]) / 2.0f;
    for (int64_t i = 0; i + AF_QK_NF4 <= n; i += AF_QK_NF4, b += 4 + AF_QK_NF4 / 2) {
        const float *x = src + i;
        float amax = 0.0f;
        for (int j = 0; j < AF_QK_NF4; j++) {
            float a = x[j] < 0 ? -x[j] : x[j];
            if (a > amax) amax = a;
        }
        const float r = 1.0f / (amax < 1e-38f ? 1e-38f : amax);
        memcpy(b, &amax, 4); /* little-endian hosts only (as the rest of afinar) */
        for (int j = 0; j < AF_QK_NF4 / 2; j++) {
            float s0 = x[2 * j] * r, s1 = x[2 * j + 1] * r;
            s0 = s0 < -1.0f ? -1.0f : s0 > 1.0f ? 1.0f : s0;
            s1 = s1 < -1.0f ? -1.0f : s1 > 1.0f ? 1.0f : s1;
            b[4 + j] = (uint8_t)((nf4_code_of(s0, mid) << 4) | nf4_code_of(s1, mid));
        }
    }
}

void af_nf4_dequantize_row(const void *src, float *dst, int64_t n) {
    const uint8_t *b = (const uint8_t *)src;
    for (int64_t i = 0; i + AF_QK_NF4 <= n; i += AF_QK_NF4, b += 4 + AF_QK_NF4 / 2) {
        float d;
        memcpy(&d, b, 4);
        for (int j = 0; j < AF_QK_NF4 / 2; j++) {
            dst[i + 2 * j] = af_nf4_code[b[4 + j] >> 4] * d;
            dst[i + 2 * j + 1] = af_nf4_code[b[4 + j] & 0x0F] * d;
        }
    }
}
