/*
 * quant_le.h — private to quant.c / quantize.c: little-endian byte helpers and the K-quant scale
 * packing shared by the dequantizers and the reference quantizers (docs/FORMATS.md §2).
 */
#ifndef AF_QUANT_LE_H
#define AF_QUANT_LE_H

#include "core/core.h"

#include <stdint.h>
#include <string.h>

#define QK AF_QK     /* elements per block of the legacy formats Q4_0 .. Q8_1 */
#define QK_K AF_QK_K /* elements per super-block of the K-quants */

/* ------------------------------------------------------------------------------------------ */
/* Little-endian byte helpers.                                                                 */
/* ------------------------------------------------------------------------------------------ */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline float h2f(const uint8_t *p) { return af_fp16_to_f32(rd16(p)); }
static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* K-quant 6-bit scale/min unpacking shared by Q4_K and Q5_K (docs/FORMATS.md §2 Q4_K):
 * sub-block k = 0..7 of a super-block; s = the 12 packed bytes. */
static inline void get_scale_min_k4(int k, const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    if (k < 4) {
        *sc = s[k] & 63;
        *mn = s[k + 4] & 63;
    } else {
        *sc = (uint8_t)((s[k + 4] & 0x0F) | ((s[k - 4] >> 6) << 4));
        *mn = (uint8_t)((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
    }
}

/* Q3_K 6-bit raw scale k = 0..15 from the 12 packed bytes (value = raw - 32). */
static inline int q3k_scale(int k, const uint8_t *s) {
    int lo = k < 8 ? (s[k] & 0x0F) : (s[k - 8] >> 4);
    int hi = (s[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}


#endif
