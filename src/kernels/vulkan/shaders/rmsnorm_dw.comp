#version 450
// rmsnorm_dw.comp — the weight gradient of RMSNorm, dw[i] += Σ_t (dy[t,i]·x[t,i])·rstd[t], one
// invocation per column summing the rows in order (ops.c rmsnorm_dw_job: the same bits).
// Bindings: 0 dw, 1 rstd, 2 x, 3 dy.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, dim;
} pc;

layout(std430, binding = 0) buffer BW { float dw[]; };
layout(std430, binding = 1) readonly buffer BR { float rs[]; };
layout(std430, binding = 2) readonly buffer BX { float x[]; };
layout(std430, binding = 3) readonly buffer BD { float dy[]; };

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= pc.dim) return;
    const uint ox = pc.off[2] >> 2, od = pc.off[3] >> 2, orr = pc.off[1] >> 2;
    float acc = dw[(pc.off[0] >> 2) + i];
    for (uint t = 0u; t < pc.n; t++) {
        precise float v = acc + (dy[od + t * pc.dim + i] * x[ox + t * pc.dim + i]) * rs[orr + t];
        acc = v;
    }
    dw[(pc.off[0] >> 2) + i] = acc;
}
