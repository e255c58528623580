#version 450
// mv.comp — the decode product y[t, o] (+)= Σ_k alpha·x[t, k] · W[o][k] for few rows t < N (<= 8):
// each weight row is read once for all N rows of x. A workgroup of 64 invocations owns 8 output rows.
// AF_SUBGROUP = 0: 8 lanes per row, partial sums reduced through shared memory;
// AF_SUBGROUP = 1 (fast path, devices with subgroup arithmetic): one subgroup per row at a time
// (rows dealt by gl_SubgroupID, any subgroup size), reduced with subgroupAdd.
// Each lane sums 32-element chunks c = lane, lane + lanes, ... (dq32: one block header per chunk);
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

layout(local_size_x = 64) in;
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
shared float red[NMAX][64];
#endif

float xv(uint t, uint k) {
    float v = x[(pc.off[1] >> 2) + t * pc.ldx + k];
    return pc.alpha != 1.0 ? v * pc.alpha : v;
}

// Partial sums of one lane over row o: lanes split the 32-chunks
void row_partial(uint o, uint lane, uint lanes, out float acc[NMAX]) {
    [[unroll]] for (uint t = 0u; t < NMAX; t++) acc[t] = 0.0;
    const uint rb = pc.off[2] + o * pc.rb;
    const uint nch = pc.K / 32u;
    for (uint ch = lane; ch < nch; ch += lanes) {
        float v[32];
        dq32(rb, ch * 32u, v);
        for (uint t = 0u; t < pc.N; t++) {
            float s = 0.0;
            for (uint j = 0u; j < 32u; j++) s += xv(t, ch * 32u + j) * v[j];
            acc[t] += s;
        }
    }
    for (uint k = nch * 32u + lane; k < pc.K; k += lanes) {
        float w = dq(rb, k);
        for (uint t = 0u; t < pc.N; t++) acc[t] += xv(t, k) * w;
    }
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
        float acc[NMAX];
        row_partial(o, gl_SubgroupInvocationID, gl_SubgroupSize, acc);
        for (uint t = 0u; t < pc.N; t++) {
            float s = subgroupAdd(acc[t]);
            if (subgroupElect()) store(o, t, s);
        }
    }
#else
    const uint lane = gl_LocalInvocationID.x & 7u, r = gl_LocalInvocationID.x >> 3;
    const uint o = row0 + r;
    float acc[NMAX];
    if (o < pc.OUT) row_partial(o, lane, 8u, acc);
    else [[unroll]] for (uint t = 0u; t < NMAX; t++) acc[t] = 0.0;
    [[unroll]] for (uint t = 0u; t < NMAX; t++) red[t][gl_LocalInvocationID.x] = acc[t];
    barrier();
    if (lane == 0u && o < pc.OUT)
        for (uint t = 0u; t < pc.N; t++) {
            uint b = r * 8u;
            float s = ((red[t][b] + red[t][b + 4u]) + (red[t][b + 1u] + red[t][b + 5u])) +
                      ((red[t][b + 2u] + red[t][b + 6u]) + (red[t][b + 3u] + red[t][b + 7u]));
            store(o, t, s);
        }
#endif
}
