#version 450
// mv.comp — the decode product y[t, o] (+)= Σ_k alpha·x[t, k] · W[o][k] for few rows t < N (<= 8):
// each weight row is read once for all N rows of x. A workgroup of 64 invocations owns 8 output rows.
// AF_SUBGROUP = 0: 8 lanes per row, partial sums reduced through shared memory;
// AF_SUBGROUP = 1 (fast path, devices with subgroup arithmetic): one subgroup per row at a time
// (rows dealt by gl_SubgroupID, any subgroup size), reduced with subgroupAdd; the workgroup has
// 8 subgroups where 8 x the subgroup size <= 256 (NVIDIA: 256 invocations), so the rows run side by side.
// Each lane sums 32-element chunks c = lane, lane + lanes, ... (dq32: one block header per chunk)
// for one input row at a time;
// rows whose length K is not a multiple of 32 (F32/F16/BF16) finish element by element.
// Bindings: 0 y [N, out] (row stride ldy), 1 x [N, K] (row stride ldx), 2 W.
#include "common.glsl"
#ifndef AF_SUBGROUP
#define AF_SUBGROUP 0
#endif
#if AF_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#if AF_SUBGROUP
// one subgroup per row of the workgroup's 8: vk_matmul.c sets 8 x the subgroup size (at most 256)
layout(local_size_x_id = 1) in;
#else
layout(local_size_x = 64) in;
#endif
layout(constant_id = 0) const uint TYPE = 0u;

layout(push_constant) uniform PC {
    uint off[8];
    uint N, K, OUT, rb;   // rb: bytes per weight row
    uint ldx, ldy, accumulate;
    float alpha;
} pc;

layout(std430, binding = 0) buffer BY { float y[]; };
layout(std430, binding = 1) readonly buffer BX { float x[]; };
layout(std430, binding = 2) readonly buffer BW { uint wq[]; };

#include "dequant.glsl"

#define ROWS 8u
#define NMAX 8u

#if !AF_SUBGROUP
shared float red[64];
#endif

float xv(uint t, uint k) {
    float v = x[(pc.off[1] >> 2) + t * pc.ldx + k];
    return pc.alpha != 1.0 ? v * pc.alpha : v;
}

// Partial sum of one lane for row o and input row t: lanes split the 32-chunks. Each token re-reads
// (and dequantizes) the weight row: the loop over tokens stays outside, so the code is small and
// everything is indexed statically (registers), which matters more for n <= 8 than the repeat.
float row_partial(uint o, uint t, uint lane, uint lanes) {
    float acc = 0.0;
    const uint rb = pc.off[2] + o * pc.rb;
    const uint nch = pc.K / 32u;
    const uint xo = (pc.off[1] >> 2) + t * pc.ldx;
    for (uint ch = lane; ch < nch; ch += lanes) {
        float v[32];
        dq32(rb, ch * 32u, v);
        /* (alpha·x)·w: lora.c scales the activations first; alpha = 1 changes nothing */
        float s = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; j++) s += (pc.alpha * x[xo + ch * 32u + j]) * v[j];
        acc += s;
    }
    for (uint k = nch * 32u + lane; k < pc.K; k += lanes) acc += xv(t, k) * dq(rb, k);
    return acc;
}

void store(uint o, uint t, float s) {
    uint i = (pc.off[0] >> 2) + t * pc.ldy + o;
    y[i] = pc.accumulate != 0u ? y[i] + s : s;
}

void main() {
    const uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint row0 = wg * ROWS;
#if AF_SUBGROUP
    for (uint r = gl_SubgroupID; r < ROWS; r += gl_NumSubgroups) {
        uint o = row0 + r;
        if (o >= pc.OUT) break;
        for (uint t = 0u; t < pc.N; t++) {
            float s = subgroupAdd(row_partial(o, t, gl_SubgroupInvocationID, gl_SubgroupSize));
            if (subgroupElect()) store(o, t, s);
        }
    }
#else
    const uint lane = gl_LocalInvocationID.x & 7u, r = gl_LocalInvocationID.x >> 3;
    const uint o = row0 + r;
    for (uint t = 0u; t < pc.N; t++) {
        red[gl_LocalInvocationID.x] = o < pc.OUT ? row_partial(o, t, lane, 8u) : 0.0;
        barrier();
        if (lane == 0u && o < pc.OUT) {
            uint b = gl_LocalInvocationID.x;
            float s = ((red[b] + red[b + 4u]) + (red[b + 1u] + red[b + 5u])) +
                      ((red[b + 2u] + red[b + 6u]) + (red[b + 3u] + red[b + 7u]));
            store(o, t, s);
        }
        barrier();
    }
#endif
}
