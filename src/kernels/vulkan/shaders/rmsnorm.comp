#version 450
// rmsnorm.comp — RMSNorm forward and the per-row part of its backward (ops.c), one row per
// workgroup of 32 invocations: invocation j sums the elements i ≡ j (mod 32) in order and the 32
// lanes are added by the tree of ops.c (16, 8, 4, 2, 1), so with AF_FP64 the row sums are the CPU
// kernel's (double lanes), and so are the results, when the device's double arithmetic is IEEE.
//   BWD = 0: rstd = 1/sqrt(Σx²/dim + eps) (stored when rstd is given), y = (x·r)·w
//   BWD = 1: c = r³/dim·Σ(w·dy)·x, dx += r·(w·dy) − c·x           (dw: rmsnorm_dw.comp)
// Bindings: 0 y | dx, 1 rstd, 2 x, 3 w, 4 dy.
#include "common.glsl"

layout(local_size_x = 32) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, dim;
    float eps;
    uint bwd;
} pc;
#define BWD pc.bwd

layout(std430, binding = 0) buffer BY { float y[]; };
layout(std430, binding = 1) buffer BR { float rs[]; };
layout(std430, binding = 2) readonly buffer BX { float x[]; };
layout(std430, binding = 3) readonly buffer BW { float w[]; };
layout(std430, binding = 4) readonly buffer BD { float dy[]; };

shared acc_t lanes[32];

void main() {
    const uint t = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (t >= pc.n) return;
    const uint j = gl_LocalInvocationID.x, dim = pc.dim;
    const uint ox = (pc.off[2] >> 2) + t * dim, oy = (pc.off[0] >> 2) + t * dim, ow = pc.off[3] >> 2;
    const uint od = (pc.off[4] >> 2) + t * dim;
    precise acc_t s = acc_t(0);
    for (uint i = j; i < dim; i += 32u) {
        if (BWD == 0u) {
            s += acc_t(x[ox + i]) * acc_t(x[ox + i]);
        } else {
            precise float g = w[ow + i] * dy[od + i];
            s += acc_t(g) * acc_t(x[ox + i]);
        }
    }
    lanes[j] = s;
    barrier();
    [[unroll]] for (uint h = 16u; h >= 1u; h /= 2u) {
        if (j < h) lanes[j] += lanes[j + h];
        barrier();
    }
    const acc_t ss = lanes[0];
    if (BWD == 0u) {
        const float r = float(acc_t(1) / sqrt(ss / acc_t(dim) + acc_t(pc.eps)));
        if (j == 0u && pc.off[1] != ABSENT) rs[(pc.off[1] >> 2) + t] = r;
        for (uint i = j; i < dim; i += 32u) {
            precise float v = (x[ox + i] * r) * w[ow + i];
            y[oy + i] = v;
        }
    } else {
        const float r = rs[(pc.off[1] >> 2) + t];
        const float c = float(acc_t(r) * acc_t(r) * acc_t(r) / acc_t(dim) * ss);
        for (uint i = j; i < dim; i += 32u) {
            precise float v = y[oy + i] + (r * (w[ow + i] * dy[od + i]) - c * x[ox + i]);
            y[oy + i] = v;
        }
    }
}
