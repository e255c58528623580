// dequant.glsl — elements of a weight row stored in a ggml block format, decoded exactly to the f32
// values of af_dequantize_row (src/kernels/quant.c, docs/FORMATS.md §2): the same float operations
// in the same order, `precise` so that no multiply-add is fused.
// The including shader declares `uint wq[]` (the weight buffer, bytes little-endian in 32-bit words)
// and the specialization constant TYPE (the ggml type id). A row starts at byte `rb` (2-byte aligned;
// 4-byte for F32); element i of the row is dq(rb, i); dq32(rb, i0, v) decodes elements i0 .. i0+31
// (i0 a multiple of 32, inside the row) with the block header read once.

#define T_F32 0u
#define T_F16 1u
#define T_Q4_0 2u
#define T_Q4_1 3u
#define T_Q5_0 6u
#define T_Q5_1 7u
#define T_Q8_0 8u
#define T_Q2_K 10u
#define T_Q3_K 11u
#define T_Q4_K 12u
#define T_Q5_K 13u
#define T_Q6_K 14u
#define T_BF16 30u
#define T_NF4 65536u

uint rd8(uint b) { return (wq[b >> 2] >> ((b & 3u) << 3)) & 0xFFu; }
uint rd16(uint b) { return (wq[b >> 2] >> ((b & 2u) << 3)) & 0xFFFFu; } // b even
uint rd32u(uint b) { return rd16(b) | (rd16(b + 2u) << 16); }           // b even
int rds8(uint b) { return int(rd8(b) << 24) >> 24; }

// IEEE binary16 bits -> float, exactly (subnormals normalised), as af_fp16_to_f32.
float h2f(uint h) {
    uint sgn = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0u) {
        if (m == 0u) return uintBitsToFloat(sgn);
        int msb = findMSB(m); // 0..9
        uint sh = uint(10 - msb);
        return uintBitsToFloat(sgn | (uint(127 - 15 + 1 - int(sh)) << 23) | (((m << sh) & 0x3FFu) << 13));
    }
    if (e == 31u) return uintBitsToFloat(sgn | 0x7F800000u | (m << 13));
    return uintBitsToFloat(sgn | ((e + 112u) << 23) | (m << 13));
}
float rdh(uint b) { return h2f(rd16(b)); }

const float NF4_CODE[16] = float[16](-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                     -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                     0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                                     0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                                     0.7229568362236023, 1.0);

// K-quant 6-bit scale/min of sub-block k (Q4_K, Q5_K), the 12 bytes at s
void scale_min_k4(uint k, uint s, out uint sc, out uint mn) {
    if (k < 4u) {
        sc = rd8(s + k) & 63u;
        mn = rd8(s + k + 4u) & 63u;
    } else {
        sc = (rd8(s + k + 4u) & 0xFu) | ((rd8(s + k - 4u) >> 6) << 4);
        mn = (rd8(s + k + 4u) >> 4) | ((rd8(s + k) >> 6) << 4);
    }
}
int q3k_scale(uint k, uint s) {
    uint lo = k < 8u ? (rd8(s + k) & 0xFu) : (rd8(s + k - 8u) >> 4);
    uint hi = (rd8(s + 8u + (k & 3u)) >> (2u * (k >> 2))) & 3u;
    return int(lo | (hi << 4)) - 32;
}

float dq(uint rb, uint i) {
    if (TYPE == T_F32) return uintBitsToFloat(wq[(rb >> 2) + i]);
    if (TYPE == T_F16) return rdh(rb + 2u * i);
    if (TYPE == T_BF16) return uintBitsToFloat(rd16(rb + 2u * i) << 16);
    if (TYPE == T_Q4_0 || TYPE == T_Q4_1 || TYPE == T_Q5_0 || TYPE == T_Q5_1 || TYPE == T_Q8_0) {
        uint j = i & 31u;
        if (TYPE == T_Q8_0) {
            uint b = rb + (i >> 5) * 34u;
            precise float y = float(rds8(b + 2u + j)) * rdh(b);
            return y;
        }
        uint bs = TYPE == T_Q4_0 ? 18u : TYPE == T_Q4_1 ? 20u : TYPE == T_Q5_0 ? 22u : 24u;
        uint b = rb + (i >> 5) * bs;
        uint qsoff = TYPE == T_Q4_0 ? 2u : TYPE == T_Q4_1 ? 4u : TYPE == T_Q5_0 ? 6u : 8u;
        uint qb = rd8(b + qsoff + (j & 15u));
        uint q = j < 16u ? (qb & 15u) : (qb >> 4);
        if (TYPE == T_Q5_0 || TYPE == T_Q5_1) q |= ((rd32u(b + (TYPE == T_Q5_0 ? 2u : 4u)) >> j) & 1u) << 4;
        float d = rdh(b);
        if (TYPE == T_Q4_0) {
            precise float y = float(int(q) - 8) * d;
            return y;
        }
        if (TYPE == T_Q5_0) {
            precise float y = float(int(q) - 16) * d;
            return y;
        }
        precise float y = float(q) * d + rdh(b + 2u);
        return y;
    }
    if (TYPE == T_NF4) {
        uint b = rb + (i >> 6) * 36u, j = i & 63u;
        uint qb = rd8(b + 4u + (j >> 1));
        float amax = uintBitsToFloat(rd32u(b));
        precise float y = NF4_CODE[(j & 1u) == 0u ? (qb >> 4) : (qb & 15u)] * amax;
        return y;
    }
    uint e = i & 255u;
    if (TYPE == T_Q2_K) {
        uint b = rb + (i >> 8) * 84u;
        uint sc = rd8(b + e / 16u);
        precise float dl = rdh(b + 80u) * float(sc & 15u);
        precise float ml = rdh(b + 82u) * float(sc >> 4);
        uint q = (rd8(b + 16u + 32u * (e / 128u) + (e & 31u)) >> (2u * ((e & 127u) / 32u))) & 3u;
        precise float y = dl * float(q) - ml;
        return y;
    }
    if (TYPE == T_Q3_K) {
        uint b = rb + (i >> 8) * 110u;
        precise float dl = rdh(b + 108u) * float(q3k_scale(e / 16u, b + 96u));
        int lo = int((rd8(b + 32u + 32u * (e / 128u) + (e & 31u)) >> (2u * ((e & 127u) / 32u))) & 3u);
        int v = lo - (((rd8(b + (e & 31u)) >> (e / 32u)) & 1u) != 0u ? 0 : 4);
        precise float y = dl * float(v);
        return y;
    }
    if (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        uint b = rb + (i >> 8) * (TYPE == T_Q4_K ? 144u : 176u);
        uint k = e / 32u, sc, mn;
        scale_min_k4(k, b + 4u, sc, mn);
        precise float dl = rdh(b) * float(sc);
        precise float ml = rdh(b + 2u) * float(mn);
        uint qs = b + (TYPE == T_Q4_K ? 16u : 48u);
        uint q = (rd8(qs + 32u * (k / 2u) + (e & 31u)) >> (4u * (k & 1u))) & 15u;
        if (TYPE == T_Q5_K) q |= ((rd8(b + 16u + (e & 31u)) >> k) & 1u) << 4;
        precise float y = dl * float(q) - ml;
        return y;
    }
    if (TYPE == T_Q6_K) {
        uint b = rb + (i >> 8) * 210u;
        uint h = e / 128u, r = e & 127u;
        uint lo = (rd8(b + 64u * h + (r & 63u)) >> (4u * (r / 64u))) & 15u;
        uint hi = (rd8(b + 128u + 32u * h + (r & 31u)) >> (2u * (r / 32u))) & 3u;
        precise float dl = rdh(b + 208u) * float(rds8(b + 192u + e / 16u));
        precise float y = dl * float(int(lo | (hi << 4)) - 32);
        return y;
    }
    return 0.0;
}

// Elements i0 .. i0+31 of the row into v (i0 % 32 == 0): the header of their block read once.
void dq32(uint rb, uint i0, out float v[32]) {
    if (TYPE == T_Q4_0 || TYPE == T_Q4_1 || TYPE == T_Q8_0) {
        uint bs = TYPE == T_Q4_0 ? 18u : TYPE == T_Q4_1 ? 20u : 34u;
        uint b = rb + (i0 >> 5) * bs;
        float d = rdh(b);
        if (TYPE == T_Q8_0) {
            [[unroll]] for (uint j = 0u; j < 32u; j++) {
                precise float y = float(rds8(b + 2u + j)) * d;
                v[j] = y;
            }
            return;
        }
        float m = TYPE == T_Q4_1 ? rdh(b + 2u) : 0.0;
        uint qs = b + (TYPE == T_Q4_0 ? 2u : 4u);
        [[unroll]] for (uint j = 0u; j < 16u; j++) {
            uint qb = rd8(qs + j);
            if (TYPE == T_Q4_0) {
                precise float y0 = float(int(qb & 15u) - 8) * d;
                precise float y1 = float(int(qb >> 4) - 8) * d;
                v[j] = y0;
                v[j + 16u] = y1;
            } else {
                precise float y0 = float(qb & 15u) * d + m;
                precise float y1 = float(qb >> 4) * d + m;
                v[j] = y0;
                v[j + 16u] = y1;
            }
        }
        return;
    }
    if (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        uint b = rb + (i0 >> 8) * (TYPE == T_Q4_K ? 144u : 176u);
        uint k = (i0 & 255u) / 32u, sc, mn;
        scale_min_k4(k, b + 4u, sc, mn);
        precise float dl = rdh(b) * float(sc);
        precise float ml = rdh(b + 2u) * float(mn);
        uint qs = b + (TYPE == T_Q4_K ? 16u : 48u) + 32u * (k / 2u);
        uint sh = 4u * (k & 1u);
        [[unroll]] for (uint j = 0u; j < 32u; j++) {
            uint q = (rd8(qs + j) >> sh) & 15u;
            if (TYPE == T_Q5_K) q |= ((rd8(b + 16u + j) >> k) & 1u) << 4;
            precise float y = dl * float(q) - ml;
            v[j] = y;
        }
        return;
    }
    if (TYPE == T_Q6_K) {
        uint b = rb + (i0 >> 8) * 210u;
        uint e0 = i0 & 255u, h = e0 / 128u, r0 = e0 & 127u;
        float d = rdh(b + 208u);
        precise float dl0 = d * float(rds8(b + 192u + e0 / 16u));
        precise float dl1 = d * float(rds8(b + 192u + e0 / 16u + 1u));
        uint ql = b + 64u * h + (r0 & 63u), qh = b + 128u + 32u * h + (r0 & 31u);
        uint ls = 4u * (r0 / 64u), hs = 2u * (r0 / 32u);
        [[unroll]] for (uint j = 0u; j < 32u; j++) {
            uint q = ((rd8(ql + j) >> ls) & 15u) | (((rd8(qh + j) >> hs) & 3u) << 4);
            precise float y = (j < 16u ? dl0 : dl1) * float(int(q) - 32);
            v[j] = y;
        }
        return;
    }
    [[unroll]] for (uint j = 0u; j < 32u; j++) v[j] = dq(rb, i0 + j);
}
