#version 450
// mm.comp — tiled GEMM C[M, N] (+)= A'(M, K) · B'(K, N), 64 x 64 tiles of C per workgroup of 64
// invocations (8 x 8 outputs each, in registers), K in steps of 16 through shared memory.
//   A(m, k) = a[m·sam + k·sak], f32 (activations, LoRA factors: any strides).
//   B by MODE: 0  B(k, n) = W[n][k], the weight rows (matmul_xwt: y = x·Wᵀ), dequantized in the shader
//              1  B(k, n) = W[k][n]                (matmul_dyw: dx = dy·W)
//              2  B(k, n) = b[k·sbk + n·sbn], f32 (the dense GEMMs abt/ab/atb)
//   Weight rows are `sbk` bytes apart (MODE 0/1), stored as TYPE (dequant.glsl).
// Operand transforms for the LoRA products (lora.c's exact roundings), push constant `flags`: bit 1: A' = (A ⊙ am)·alpha_a
// (am laid out like A), else A·alpha_a; bit 2: B' = (B ⊙ bm)·alpha_b (MODE 2; bm laid out like B);
// bit 3: the product is multiplied element-wise by cm (laid out like C) before it is stored or added;
// the product is multiplied by alpha_c first. bit 0: accumulate (C += ...), else C = ....
// Summation over k in order per output (f32 accumulator).
// Bindings: 0 C, 1 A, 2 B / W, 3 am, 4 bm, 5 cm.
#include "common.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
layout(constant_id = 0) const uint TYPE = 0u;

layout(push_constant) uniform PC {
    uint off[8];
    uint M, N, K;
    uint sam, sak, sbk, sbn, ldc;
    float alpha_a, alpha_b, alpha_c;
    uint flags, mode;
} pc;
#define MODE pc.mode

layout(std430, binding = 0) buffer BC { float c[]; };
layout(std430, binding = 1) readonly buffer BA { float a[]; };
layout(std430, binding = 2) readonly buffer BW { uint wq[]; };
layout(std430, binding = 3) readonly buffer BAM { float am[]; };
layout(std430, binding = 4) readonly buffer BBM { float bm[]; };
layout(std430, binding = 5) readonly buffer BCM { float cm[]; };

#include "dequant.glsl"

#define BM 64u
#define BN 64u
#define BK 16u

shared float As[BK][BM];
shared float Bs[BK][BN];

float load_a(uint m, uint k) {
    uint idx = m * pc.sam + k * pc.sak;
    float v = a[(pc.off[1] >> 2) + idx];
    if ((pc.flags & 2u) != 0u) v = v * am[(pc.off[3] >> 2) + idx];
    if (pc.alpha_a != 1.0) v = v * pc.alpha_a;
    return v;
}

float load_b(uint k, uint n) {
    if (MODE == 2u) {
        uint idx = k * pc.sbk + n * pc.sbn;
        float v = uintBitsToFloat(wq[(pc.off[2] >> 2) + idx]);
        if ((pc.flags & 4u) != 0u) v = v * bm[(pc.off[4] >> 2) + idx];
        if (pc.alpha_b != 1.0) v = v * pc.alpha_b;
        return v;
    }
    if (MODE == 0u) return dq(pc.off[2] + n * pc.sbk, k);
    return dq(pc.off[2] + k * pc.sbk, n);
}

void main() {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 8u + tx;
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    float acc[8][8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) [[unroll]] for (uint j = 0u; j < 8u; j++) acc[i][j] = 0.0;
    // B tiles along the contiguous direction of its storage
    const bool b_kfast = MODE == 0u || (MODE == 2u && pc.sbk == 1u);
    const bool a_kfast = pc.sak == 1u;
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        [[dont_unroll]] for (uint r = 0u; r < 16u; r++) {
            uint idx = tid + 64u * r;
            uint mm = a_kfast ? idx / BK : idx % BM, kk = a_kfast ? idx % BK : idx / BM;
            uint m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < pc.M && k < pc.K) ? load_a(m, k) : 0.0;
            uint nn = b_kfast ? idx / BK : idx % BN, kb = b_kfast ? idx % BK : idx / BN;
            uint n = n0 + nn, kq = k0 + kb;
            Bs[kb][nn] = (n < pc.N && kq < pc.K) ? load_b(kq, n) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float av[8], bv[8];
            [[unroll]] for (uint i = 0u; i < 8u; i++) av[i] = As[kk][ty + 8u * i];
            [[unroll]] for (uint j = 0u; j < 8u; j++) bv[j] = Bs[kk][tx + 8u * j];
            [[unroll]] for (uint i = 0u; i < 8u; i++) [[unroll]] for (uint j = 0u; j < 8u; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        uint m = m0 + ty + 8u * i;
        if (m >= pc.M) continue;
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            uint n = n0 + tx + 8u * j;
            if (n >= pc.N) continue;
            uint ci = (pc.off[0] >> 2) + m * pc.ldc + n;
            precise float v = acc[i][j];
            if (pc.alpha_c != 1.0) v = v * pc.alpha_c;
            if ((pc.flags & 8u) != 0u) v = v * cm[(pc.off[5] >> 2) + m * pc.ldc + n];
            c[ci] = (pc.flags & 1u) != 0u ? c[ci] + v : v;
        }
    }
}
