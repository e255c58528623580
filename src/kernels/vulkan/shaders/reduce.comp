#version 450
// reduce.comp — reductions whose result the host needs, in a fixed order that does not depend on
// the device: the n elements are cut into G (push constant) contiguous parts, workgroup g sums its
// part (256 invocations, a shared-memory tree) into partial g; the host adds the G partials in order.
// OP 0: Σ x² in acc_t (the gradient norm of clipping; optim.c af_clip_grad_norm), partials acc_t
// OP 1: the number of non-finite x, partials uint
// Bindings: 0 partials, 1 x.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, parts, chunk; // part g: [g·chunk, min(n, (g+1)·chunk))
    uint op;
} pc;
#define OP pc.op

layout(std430, binding = 0) buffer BO { uint part[]; };
layout(std430, binding = 1) readonly buffer BX { float x[]; };

shared acc_t red[256];
shared uint cnt[256];

void main() {
    const uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= pc.parts) return;
    const uint t = gl_LocalInvocationID.x;
    const uint i0 = g * pc.chunk, i1 = min(pc.n, i0 + pc.chunk);
    acc_t s = acc_t(0);
    uint c = 0u;
    const uint ox = pc.off[1] >> 2;
    for (uint i = i0 + t; i < i1; i += 256u) {
        float v = x[ox + i];
        if (OP == 0u) s += acc_t(v) * acc_t(v);
        else c += (isnan(v) || isinf(v)) ? 1u : 0u;
    }
    red[t] = s;
    cnt[t] = c;
    barrier();
    [[unroll]] for (uint h = 128u; h >= 1u; h /= 2u) {
        if (t < h) red[t] += red[t + h], cnt[t] += cnt[t + h];
        barrier();
    }
    if (t != 0u) return;
    if (OP == 0u) {
        uvec2 u = acc_bits(red[0]);
        part[(pc.off[0] >> 2) + 2u * g] = u.x;
        part[(pc.off[0] >> 2) + 2u * g + 1u] = u.y;
    } else {
        part[(pc.off[0] >> 2) + g] = cnt[0];
    }
}
