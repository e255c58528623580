#version 450
// mm.comp — tiled GEMM C[M, N] (+)= A'(M, K) · B'(K, N), MM_TILE x MM_TILE tiles of C per workgroup
// of 64 invocations ((MM_TILE/8)^2 outputs each, in registers: TM consecutive rows x TM consecutive
// columns), K in steps of 16 through shared
// memory. MM_TILE 64 (`mm`), or 32 (`mm_s`: four times the workgroups, for products whose 64-grid
// leaves a GPU's compute units idle; vk_matmul.c picks). Both sum each output over k in the same
// order, so they give the same bits.
//   A(m, k) = a[m·sam + k·sak], f32 (activations, LoRA factors: any strides).
//   B by MODE: 0  B(k, n) = W[n][k], the weight rows (matmul_xwt: y = x·Wᵀ), dequantized in the shader
//              1  B(k, n) = W[k][n]                (matmul_dyw: dx = dy·W)
//              2  B(k, n) = b[k·sbk + n·sbn], f32 (the dense GEMMs abt/ab/atb)
//   Weight rows are `sbk` bytes apart (MODE 0/1), stored as TYPE (dequant.glsl).
// Operand transforms for the LoRA products (lora.c's exact roundings), push constant `flags`: bit 1: A' = (A ⊙ am)·alpha_a
// (am laid out like A), else A·alpha_a; bit 2: B' = (B ⊙ bm)·alpha_b (MODE 2; bm laid out like B);
// bit 3: the product is multiplied element-wise by cm (laid out like C) before it is stored or added;
// the product is multiplied by alpha_c first. bit 0: accumulate (C += ...), else C = ....
// Summation over k in order per output (f32 accumulator). Split-K (vk_matmul.c, products with few
// output tiles and a long k): workgroup z sums its range of k into slice z of a scratch C, with no
// output transform; mm_red.comp adds the slices in order and applies the transforms.
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
    uint kz; // split-K: workgroup z sums k in [z·kz, min(K, (z+1)·kz)) into slice z of C (M·ldc apart)
} pc;
#define MODE pc.mode

layout(std430, binding = 0) buffer BC { float c[]; };
layout(std430, binding = 1) readonly buffer BA { float a[]; };
layout(std430, binding = 2) readonly buffer BW { uint wq[]; };
layout(std430, binding = 3) readonly buffer BAM { float am[]; };
layout(std430, binding = 4) readonly buffer BBM { float bm[]; };
layout(std430, binding = 5) readonly buffer BCM { float cm[]; };

#include "dequant.glsl"

#ifndef MM_TILE
#define MM_TILE 64
#endif
#define BM uint(MM_TILE)
#define BN uint(MM_TILE)
#define BK 16u
#define TM (BM / 8u) /* outputs per invocation along m and along n */
#define TR (BK * BM / 64u) /* tile elements each invocation loads per operand */

// the tiles as vec4 along m and n: an invocation reads its TM consecutive rows (columns) of a k-step
// in TM/4 wide loads
shared vec4 As[BK][BM / 4u];
shared vec4 Bs[BK][BN / 4u];

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
    float acc[TM][TM];
    [[unroll]] for (uint i = 0u; i < TM; i++) [[unroll]] for (uint j = 0u; j < TM; j++) acc[i][j] = 0.0;
    // B tiles along the contiguous direction of its storage
    const bool b_kfast = MODE == 0u || (MODE == 2u && pc.sbk == 1u);
    const bool a_kfast = pc.sak == 1u;
    const uint kb = gl_WorkGroupID.z * pc.kz, ke = min(pc.K, kb + pc.kz);
    for (uint k0 = kb; k0 < ke; k0 += BK) {
        [[dont_unroll]] for (uint r = 0u; r < TR; r++) {
            uint idx = tid + 64u * r;
            uint mm = a_kfast ? idx / BK : idx % BM, kk = a_kfast ? idx % BK : idx / BM;
            uint m = m0 + mm, k = k0 + kk;
            As[kk][mm >> 2][mm & 3u] = (m < pc.M && k < ke) ? load_a(m, k) : 0.0;
            uint nn = b_kfast ? idx / BK : idx % BN, kr = b_kfast ? idx % BK : idx / BN;
            uint n = n0 + nn, kq = k0 + kr;
            Bs[kr][nn >> 2][nn & 3u] = (n < pc.N && kq < ke) ? load_b(kq, n) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float av[TM], bv[TM];
            [[unroll]] for (uint q = 0u; q < TM / 4u; q++) {
                const vec4 a4 = As[kk][ty * (TM / 4u) + q], b4 = Bs[kk][tx * (TM / 4u) + q];
                [[unroll]] for (uint e = 0u; e < 4u; e++) av[4u * q + e] = a4[e], bv[4u * q + e] = b4[e];
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) [[unroll]] for (uint j = 0u; j < TM; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        uint m = m0 + ty * TM + i;
        if (m >= pc.M) continue;
        [[unroll]] for (uint j = 0u; j < TM; j++) {
            uint n = n0 + tx * TM + j;
            if (n >= pc.N) continue;
            uint ci = (pc.off[0] >> 2) + gl_WorkGroupID.z * pc.M * pc.ldc + m * pc.ldc + n;
            precise float v = acc[i][j];
            if (pc.alpha_c != 1.0) v = v * pc.alpha_c;
            if ((pc.flags & 8u) != 0u) v = v * cm[(pc.off[5] >> 2) + m * pc.ldc + n];
            c[ci] = (pc.flags & 1u) != 0u ? c[ci] + v : v;
        }
    }
}
