#version 450
// mm_red.comp — the second pass of a split-K product (mm.comp, vk_matmul.c): C[m, n] (+)=
// ((Σ_z P[z, m, n]) · alpha_c) ⊙ cm[m, n], the S slices P [S, M, N] added in order z = 0, 1, ...
// in f32, then the output transforms of mm.comp's epilogue in its order. One invocation per (m, n).
// Bindings: 0 C (row stride ldc), 1 P, 5 cm (laid out like C). flags: bit 0 accumulate, bit 3 cm.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint M, N, ldc, S;
    float alpha_c;
    uint flags;
} pc;

layout(std430, binding = 0) buffer BC { float c[]; };
layout(std430, binding = 1) readonly buffer BP { float p[]; };
layout(std430, binding = 5) readonly buffer BCM { float cm[]; };

void main() {
    const uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (g >= pc.M * pc.N) return;
    const uint m = g / pc.N, n = g % pc.N, po = pc.off[1] >> 2;
    precise float v = p[po + g];
    for (uint z = 1u; z < pc.S; z++) v = v + p[po + z * pc.M * pc.N + g];
    if (pc.alpha_c != 1.0) v = v * pc.alpha_c;
    if ((pc.flags & 8u) != 0u) v = v * cm[(pc.off[5] >> 2) + m * pc.ldc + n];
    const uint ci = (pc.off[0] >> 2) + m * pc.ldc + n;
    c[ci] = (pc.flags & 1u) != 0u ? c[ci] + v : v;
}
