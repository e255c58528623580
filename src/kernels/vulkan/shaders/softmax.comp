#version 450
// softmax.comp — softmax of each row in place (ops.c af_softmax_inplace), one workgroup of 64 per
// row: m = max; a row of −inf gives zeros; e = exp(x − m), Σe in acc_t (double with AF_FP64),
// x = e·(1/Σe). Binding 0 x [rows, n].
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint rows, n;
} pc;

layout(std430, binding = 0) buffer BX { float x[]; };

shared float mx[64];
shared acc_t sm[64];

void main() {
    const uint r = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (r >= pc.rows) return;
    const uint t = gl_LocalInvocationID.x, o = (pc.off[0] >> 2) + r * pc.n;
    float m = -1.0 / 0.0;
    for (uint i = t; i < pc.n; i += 64u) m = max(m, x[o + i]);
    mx[t] = m;
    barrier();
    [[unroll]] for (uint s = 32u; s >= 1u; s /= 2u) {
        if (t < s) mx[t] = max(mx[t], mx[t + s]);
        barrier();
    }
    m = mx[0];
    if (isinf(m) && m < 0.0) {
        for (uint i = t; i < pc.n; i += 64u) x[o + i] = 0.0;
        return;
    }
    acc_t s = acc_t(0);
    for (uint i = t; i < pc.n; i += 64u) {
        float e = af_expf(x[o + i] - m);
        x[o + i] = e;
        s += acc_t(e);
    }
    sm[t] = s;
    barrier();
    [[unroll]] for (uint h = 32u; h >= 1u; h /= 2u) {
        if (t < h) sm[t] += sm[t + h];
        barrier();
    }
    const float inv = float(acc_t(1) / sm[0]);
    for (uint i = t; i < pc.n; i += 64u) x[o + i] *= inv;
}
