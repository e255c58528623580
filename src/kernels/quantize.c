/*
 * quantize.c — reference quantizers f32 -> ggml block types (af_quantize_row) and the --type
 * parser of export/merge/convert. Same sources and the same bit-exactness rules as quant.c (whose
 * header states them): legacy formats and Q4_K/Q6_K bit for bit as ggml's quantize_row_*_ref,
 * Q2_K/Q3_K/Q5_K simple quantizers (valid blocks, not ggml's bits).
 */
#include "kernels/quant.h"

#include "core/core.h"
#include "kernels/nf4.h"
#include "kernels/quant_le.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------------------------ */
/* Reference quantizers for the legacy formats: same formulas as ggml's quantize_row_*_ref     */
/* (and gguf-py's numpy quantize), so their output matches those bit for bit.                  */
/* ------------------------------------------------------------------------------------------ */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
/* Round half to even (current FP environment: round-to-nearest). NaN/huge give an unspecified int. */
static inline int nearest(float v) { return (int)lrintf(v); }
/* Truncation toward zero clamped to [0, hi] (the "(int8_t)(v) then MIN(hi, .)" of ggml's refs
 * for the non-negative v that occur there), defined for any float including NaN. */
static inline int trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    return v >= (float)hi ? hi : (int)v;
}

/* Value with the largest magnitude (the first one on ties), keeping its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            vmax = x[j];
        }
    }
    return vmax;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Q4_0: d = vmax / -8 (vmax = signed absmax), q = min(15, (int)(x/d + 8.5)). */
static void q_q4_0(const float *x, uint8_t *b) {
    const float d = signed_absmax(x, QK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, af_f32_to_fp16(d));
    for (int j = 0; j < QK / 2; j++) {
        const int q0 = trunc_clamp(x[j] * id + 8.5f, 15), q1 = trunc_clamp(x[j + QK / 2] * id + 8.5f, 15);
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

/* Q4_1: d = (max-min)/15, m = min, q = min(15, (int)((x-min)/d + 0.5)). */
static void q_q4_1(const float *x, uint8_t *b) {
    float lo, hi;
    min_max(x, QK, &lo, &hi);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, af_f32_to_fp16(d));
    wr16(b + 2, af_f32_to_fp16(lo));
    for (int j = 0; j < QK / 2; j++) {
        const int q0 = trunc_clamp((x[j] - lo) * id + 0.5f, 15);
        const int q1 = trunc_clamp((x[j + QK / 2] - lo) * id + 0.5f, 15);
        b[4 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

/* Q5_0: d = vmax / -16, q = min(31, (int)(x/d + 16.5)); bit 4 of q(j) goes to bit j of qh. */
static void q_q5_0(const float *x, uint8_t *b) {
    const float d = signed_absmax(x, QK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    wr16(b, af_f32_to_fp16(d));
    for (int j = 0; j < QK / 2; j++) {
        const int q0 = trunc_clamp(x[j] * id + 16.5f, 31), q1 = trunc_clamp(x[j + QK / 2] * id + 16.5f, 31);
        b[6 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
    }
    wr32(b + 2, qh);
}

/* Q5_1: d = (max-min)/31, m = min, q = min(31, (int)((x-min)/d + 0.5)). */
static void q_q5_1(const float *x, uint8_t *b) {
    float lo, hi;
    min_max(x, QK, &lo, &hi);
    const float d = (hi - lo) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    wr16(b, af_f32_to_fp16(d));
    wr16(b + 2, af_f32_to_fp16(lo));
    for (int j = 0; j < QK / 2; j++) {
        const int q0 = trunc_clamp((x[j] - lo) * id + 0.5f, 31);
        const int q1 = trunc_clamp((x[j + QK / 2] - lo) * id + 0.5f, 31);
        b[8 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
    }
    wr32(b + 4, qh);
}

/* Q8_0: d = amax/127, q = roundf(x/d) (half away from zero). */
static void q_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, af_f32_to_fp16(d));
    for (int j = 0; j < QK; j++) {
        const float r = roundf(x[j] * id); /* in [-127, 127] for finite input */
        b[2 + j] = (uint8_t)(int8_t)(r >= -127.0f && r <= 127.0f ? (int)r : 0);
    }
}

/* Q8_K (activation format): f32 d, int8 qs[256], int16 bsums[16]. iscale = -127/vmax
 * (vmax = signed absmax), q = min(127, nearest-even(iscale*x)), d = 1/iscale. */
static void q_q8_k(const float *x, uint8_t *b) {
    const float vmax = signed_absmax(x, QK_K);
    int8_t qs[QK_K];
    float d = 0.0f;
    if (vmax == 0.0f) {
        memset(qs, 0, sizeof qs);
    } else {
        const float iscale = -127.0f / vmax;
        for (int j = 0; j < QK_K; j++) {
            long v = lrintf(iscale * x[j]);
            qs[j] = (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v));
        }
        d = 1.0f / iscale;
    }
    wr32(b, f32_bits(d));
    memcpy(b + 4, qs, QK_K);
    for (int g = 0; g < QK_K / 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += qs[16 * g + l];
        wr16(b + 4 + QK_K + 2 * g, (uint16_t)(int16_t)s);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Simple K-quant quantizers. Not ggml's (which search scales iteratively): per sub-block       */
/* they take the min/max, quantize the sub-block scales against one fp16 super-scale, then     */
/* try the neighbouring integer scale (and min) and keep the choice with the smallest squared  */
/* error. Output blocks are valid and dequantize close to the input (see tests/test_quant.c).  */
/* ------------------------------------------------------------------------------------------ */


/* Asymmetric scheme y = (D*sc)*q - (M*mn), q in [0,qmax], sc/mn in [0,smax].
 * x: nsub*len values. Writes sc[nsub], mn[nsub], q[nsub*len], and the fp16 D and M. */
static void kq_asym(const float *x, int nsub, int len, int qmax, int smax, uint8_t *sc,
                    uint8_t *mn, uint8_t *q, uint16_t *dh, uint16_t *mh) {
    float scale[16], offs[16], smx = 0.0f, omx = 0.0f;
    for (int s = 0; s < nsub; s++) {
        float lo, hi;
        min_max(x + s * len, len, &lo, &hi);
        if (lo > 0.0f) lo = 0.0f; /* the offset -M*mn can only lower values */
        scale[s] = (hi - lo) / (float)qmax;
        offs[s] = -lo;
        smx = fmaxf(smx, scale[s]);
        omx = fmaxf(omx, offs[s]);
    }
    *dh = af_f32_to_fp16(smx / (float)smax);
    *mh = af_f32_to_fp16(omx / (float)smax);
    const float D = af_fp16_to_f32(*dh), M = af_fp16_to_f32(*mh);
    for (int s = 0; s < nsub; s++) {
        const float *xs = x + s * len;
        int s0 = D > 0.0f ? (int)floorf(scale[s] / D) : 0;
        int m0 = M > 0.0f ? (int)floorf(offs[s] / M) : 0;
        float best = INFINITY;
        int bsc = 0, bmn = 0;
        for (int a = 0; a < 2; a++) {
            for (int c = 0; c < 2; c++) {
                const int tsc = clampi(s0 + a, 0, smax), tmn = clampi(m0 + c, 0, smax);
                const float dl = D * (float)tsc, ml = M * (float)tmn;
                float err = 0.0f;
                for (int l = 0; l < len; l++) {
                    int v = dl > 0.0f ? clampi(nearest((xs[l] + ml) / dl), 0, qmax) : 0;
                    float r = dl * (float)v - ml - xs[l];
                    err += r * r;
                }
                if (err < best) {
                    best = err;
                    bsc = tsc;
                    bmn = tmn;
                }
            }
        }
        sc[s] = (uint8_t)bsc;
        mn[s] = (uint8_t)bmn;
        const float dl = D * (float)bsc, ml = M * (float)bmn;
        for (int l = 0; l < len; l++)
            q[s * len + l] = (uint8_t)(dl > 0.0f ? clampi(nearest((xs[l] + ml) / dl), 0, qmax) : 0);
    }
}

/* Symmetric scheme y = (D*sc)*q, q in [-qneg, qpos], sc in [-sneg, spos]. Sub-block scale maps its
 * largest-magnitude value to -qneg; D maps the largest-magnitude sub-block scale to -sneg. */
static void kq_sym(const float *x, int nsub, int len, int qneg, int qpos, int sneg, int spos,
                   int *sc, int *q, uint16_t *dh) {
    float scale[16], smax = 0.0f, amax = 0.0f;
    for (int s = 0; s < nsub; s++) {
        scale[s] = signed_absmax(x + s * len, len) / (float)-qneg;
        if (fabsf(scale[s]) > amax) {
            amax = fabsf(scale[s]);
            smax = scale[s];
        }
    }
    *dh = af_f32_to_fp16(smax / (float)-sneg);
    const float D = af_fp16_to_f32(*dh);
    for (int s = 0; s < nsub; s++) {
        const float *xs = x + s * len;
        const int s0 = D != 0.0f ? nearest(scale[s] / D) : 0;
        float best = INFINITY;
        int bsc = 0;
        for (int a = -1; a <= 1; a++) {
            const int t = clampi(s0 + a, -sneg, spos);
            const float dl = D * (float)t;
            float err = 0.0f;
            for (int l = 0; l < len; l++) {
                int v = dl != 0.0f ? clampi(nearest(xs[l] / dl), -qneg, qpos) : 0;
                float r = dl * (float)v - xs[l];
                err += r * r;
            }
            if (err < best) {
                best = err;
                bsc = t;
            }
        }
        sc[s] = bsc;
        const float dl = D * (float)bsc;
        for (int l = 0; l < len; l++)
            q[s * len + l] = dl != 0.0f ? clampi(nearest(xs[l] / dl), -qneg, qpos) : 0;
    }
}

static void q_q2_k(const float *x, uint8_t *b) {
    uint8_t sc[16], mn[16], q[QK_K];
    uint16_t dh, mh;
    kq_asym(x, 16, 16, 3, 15, sc, mn, q, &dh, &mh);
    memset(b, 0, 84);
    for (int k = 0; k < 16; k++) b[k] = (uint8_t)(sc[k] | (mn[k] << 4));
    for (int e = 0; e < QK_K; e++)
        b[16 + 32 * (e / 128) + (e % 32)] |= (uint8_t)(q[e] << (2 * ((e % 128) / 32)));
    wr16(b + 80, dh);
    wr16(b + 82, mh);
}

static void q_q3_k(const float *x, uint8_t *b) {
    int sc[16], q[QK_K];
    uint16_t dh;
    kq_sym(x, 16, 16, 4, 3, 32, 31, sc, q, &dh);
    memset(b, 0, 110);
    for (int e = 0; e < QK_K; e++) {
        const int u = q[e] + 4; /* 0..7: low 2 bits in qs, bit 2 in hmask */
        b[32 + 32 * (e / 128) + (e % 32)] |= (uint8_t)((u & 3) << (2 * ((e % 128) / 32)));
        b[e % 32] |= (uint8_t)((u >> 2) << (e / 32));
    }
    uint8_t *s = b + 96;
    for (int k = 0; k < 16; k++) {
        const int r = sc[k] + 32;
        if (k < 8)
            s[k] |= (uint8_t)(r & 0x0F);
        else
            s[k - 8] |= (uint8_t)((r & 0x0F) << 4);
        s[8 + (k & 3)] |= (uint8_t)(((r >> 4) & 3) << (2 * (k >> 2)));
    }
    wr16(b + 108, dh);
}

/* Pack 8 six-bit scales and mins into the 12 bytes used by Q4_K/Q5_K (inverse of
 * get_scale_min_k4). */
static void pack_scale_min_k4(const uint8_t *sc, const uint8_t *mn, uint8_t *s) {
    for (int k = 0; k < 4; k++) {
        s[k] = (uint8_t)(sc[k] | ((sc[k + 4] >> 4) << 6));
        s[k + 4] = (uint8_t)(mn[k] | ((mn[k + 4] >> 4) << 6));
        s[k + 8] = (uint8_t)((sc[k + 4] & 0x0F) | ((mn[k + 4] & 0x0F) << 4));
    }
}

/* ---- ggml's reference K-quantizers (quantize_row_q4_K_ref / quantize_row_q6_K_ref in ggml
 * src/ggml-quants.c), re-implemented from their description so that the bytes are identical: same
 * search, same float operations in the same order (no FMA contraction: see the top of this file),
 * round-half-to-even (lrintf, as ggml's nearest_int for |x| < 2^22). Checked against the library
 * built by llama-cpp-python (tests/ref/make_kquant_vectors.py, tests/test_quant.c). */

/* Weighted asymmetric fit of n values to q in [0, nmax]: x ~ scale*q - the_min (ggml
 * make_qkx2_quants with use_mad = false). Starts from the min/max grid and tries nstep + 1
 * rescalings iscale = (rmin + rdelta*is + nmax) / (max - min), keeping the least weighted squared
 * error of a least-squares (scale, min) for each. Returns scale; *the_min = -min (>= 0). */
static float fit_asym_weighted(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                               uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *the_min = -mn;
        return 0.0f;
    }
    float iscale = (float)nmax / (mx - mn), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - mn)), 0, nmax);
        const float d = scale * L[i] + mn - x[i];
        best += w[i] * (d * d);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sl2 - sl * sl;
        if (D > 0) {
            float ts = (sum_w * sxl - sum_x * sl) / D, tm = (sl2 * sum_x - sl * sxl) / D;
            if (tm > 0) {
                tm = 0;
                ts = sxl / sl2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float d = ts * Laux[i] + tm - x[i];
                err += w[i] * (d * d);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = ts;
                mn = tm;
            }
        }
    }
    *the_min = -mn;
    return scale;
}

static void q_q4_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K], Laux[32], sc[8], mn[8];
    float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_asym_weighted(32, 15, xs, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = (uint8_t)nearest(inv_scale * scales[j]), lm = (uint8_t)nearest(inv_min * mins[j]);
        sc[j] = ls < 63 ? ls : 63;
        mn[j] = lm < 63 ? lm : 63;
    }
    const uint16_t dh = af_f32_to_fp16(max_scale / 63.f), mh = af_f32_to_fp16(max_min / 63.f);
    wr16(b, dh);
    wr16(b + 2, mh);
    pack_scale_min_k4(sc, mn, b + 4);
    for (int j = 0; j < 8; j++) {
        const float d = af_fp16_to_f32(dh) * sc[j];
        if (!d) continue; /* L keeps the fit's values, as ggml */
        const float dm = af_fp16_to_f32(mh) * mn[j];
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clampi(nearest((x[32 * j + i] + dm) / d), 0, 15);
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b[16 + 32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

static void q_q5_k(const float *x, uint8_t *b) {
    uint8_t sc[8], mn[8], q[QK_K];
    uint16_t dh, mh;
    kq_asym(x, 8, 32, 31, 63, sc, mn, q, &dh, &mh);
    wr16(b, dh);
    wr16(b + 2, mh);
    pack_scale_min_k4(sc, mn, b + 4);
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0x0F) | ((q[64 * c + 32 + l] & 0x0F) << 4));
    for (int e = 0; e < QK_K; e++) qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
}

/* Symmetric fit of n values to l in [-nmax, nmax-1] with weights x^2 (ggml make_qx_quants,
 * rmse_type 1, no importance weights): scale from the largest-magnitude value, then 18 rescalings
 * iscale = -(nmax + 0.1*is) / max, keeping the best least-squares scale. L receives l + nmax. */
static float fit_sym_x2(int n, int nmax, const float *x, int8_t *L) {
    float mx = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            mx = x[i];
        }
    }
    if (amax < 1e-15f) { /* ggml GROUP_MAX_EPS */
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / mx, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / mx;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void q_q6_k(const float *x, uint8_t *b) {
    int8_t L[QK_K];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = fit_sym_x2(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs) {
            max_abs = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    memset(b, 0, 210);
    if (max_abs < 1e-15f) return; /* an all-zero block (d = +0) */
    const float iscale = -128.f / max_scale;
    const uint16_t dh = af_f32_to_fp16(1 / iscale);
    int8_t sc[16];
    for (int ib = 0; ib < 16; ib++) {
        const int v = nearest(iscale * scales[ib]);
        sc[ib] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; j++) {
        const float d = af_fp16_to_f32(dh) * sc[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest(x[16 * j + i] / d), -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int e = 0; e < QK_K; e++) {
        const int u = L[e], h = e / 128, r = e % 128;
        ql[64 * h + (r % 64)] |= (uint8_t)((u & 0x0F) << (4 * (r / 64)));
        qh[32 * h + (r % 32)] |= (uint8_t)((u >> 4) << (2 * (r / 32)));
    }
    for (int k = 0; k < 16; k++) b[192 + k] = (uint8_t)sc[k];
    wr16(b + 208, dh);
}

/* f32 -> bf16, round to nearest even, NaN forced quiet (as ggml_compute_fp32_to_bf16). */
static uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

bool af_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    uint8_t *p = (uint8_t *)dst;
    void (*blk)(const float *, uint8_t *) = NULL;
    if (n < 0) return false;
    switch (type) {
    case AF_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    case AF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) wr16(p + 2 * i, af_f32_to_fp16(src[i]));
        return true;
    case AF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) wr16(p + 2 * i, f32_to_bf16(src[i]));
        return true;
    case AF_TYPE_NF4:
        if (n % AF_QK_NF4 != 0) return false;
        af_nf4_quantize_row(src, dst, n);
        return true;
    case AF_TYPE_Q4_0: blk = q_q4_0; break;
    case AF_TYPE_Q4_1: blk = q_q4_1; break;
    case AF_TYPE_Q5_0: blk = q_q5_0; break;
    case AF_TYPE_Q5_1: blk = q_q5_1; break;
    case AF_TYPE_Q8_0: blk = q_q8_0; break;
    case AF_TYPE_Q8_K: blk = q_q8_k; break;
    case AF_TYPE_Q2_K: blk = q_q2_k; break;
    case AF_TYPE_Q3_K: blk = q_q3_k; break;
    case AF_TYPE_Q4_K: blk = q_q4_k; break;
    case AF_TYPE_Q5_K: blk = q_q5_k; break;
    case AF_TYPE_Q6_K: blk = q_q6_k; break;
    default:
        return false;
    }
    const int64_t bs = (int64_t)af_type_block_size(type);
    const size_t bb = af_type_block_bytes(type);
    if (n % bs != 0) return false;
    for (int64_t i = 0; i < n; i += bs, p += bb) blk(src + i, p);
    return true;
}

static const struct {
    const char *name;
    uint32_t type;
} k_out_types[] = {{"f32", AF_TYPE_F32},   {"f16", AF_TYPE_F16},   {"bf16", AF_TYPE_BF16}, {"q8_0", AF_TYPE_Q8_0},
                   {"q4_0", AF_TYPE_Q4_0}, {"q4_1", AF_TYPE_Q4_1}, {"q5_0", AF_TYPE_Q5_0}, {"q5_1", AF_TYPE_Q5_1},
                   {"q4_k", AF_TYPE_Q4_K}, {"q6_k", AF_TYPE_Q6_K}};

af_status af_quant_type_parse(const char *s, uint32_t *out) {
    if (!s || strcasecmp(s, "keep") == 0) {
        *out = AF_TYPE_KEEP;
        return AF_OK;
    }
    for (size_t i = 0; i < sizeof k_out_types / sizeof *k_out_types; i++)
        if (strcasecmp(s, k_out_types[i].name) == 0) {
            *out = k_out_types[i].type;
            return AF_OK;
        }
    return af_fail(AF_ERR_INVALID_ARG,
                   "unknown --type '%s' (keep, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k)", s);
}
