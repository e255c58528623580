#version 450
// rows.comp — row moves and row broadcasts over [rows, width] float matrices, one invocation per
// element (grid-stride). OP: 0 gather  dst[j, :] = src[idx[j], :]
//                             1 scatter dst[idx[j], :] = src[j, :]   (4: = 0)
//                             2 bias    dst[j, :] += src[:]            (y += b per row)
//                             3 embed   dst[j, :] = dequant(W row idx[j]) (· scale when != 1), for the
//                                       tokens in [lo, hi) only: the weight bound at binding 1 starts
//                                       at row lo (the host dispatches once per piece of a split weight)
// Bindings: 0 dst, 1 src (f32) or the weight (OP 3), 2 idx (int32).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint rows, width, rb; // rb: bytes per weight row (OP 3)
    float scale;
    int lo, hi;
    uint op, type;
} pc;
#define OP pc.op
#define TYPE pc.type // a push constant here: one pipeline for every weight type (a per-token gather)

layout(std430, binding = 0) buffer BD { float dst[]; };
layout(std430, binding = 1) readonly buffer BS { uint wq[]; };
layout(std430, binding = 2) readonly buffer BI { int idx[]; };

#include "dequant.glsl"

void main() {
    const uint total = pc.rows * pc.width;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * 256u;
    const uint od = pc.off[0] >> 2, os = pc.off[1] >> 2, oi = pc.off[2] >> 2;
    for (uint e = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x; e < total;
         e += stride) {
        const uint j = e / pc.width, c = e % pc.width;
        if (OP == 0u) {
            dst[od + j * pc.width + c] = uintBitsToFloat(wq[os + uint(idx[oi + j]) * pc.width + c]);
        } else if (OP == 1u) {
            dst[od + uint(idx[oi + j]) * pc.width + c] = uintBitsToFloat(wq[os + j * pc.width + c]);
        } else if (OP == 4u) {
            dst[od + uint(idx[oi + j]) * pc.width + c] = 0.0;
        } else if (OP == 2u) {
            precise float v = dst[od + e] + uintBitsToFloat(wq[os + c]);
            dst[od + e] = v;
        } else {
            const int tok = idx[oi + j];
            if (tok < pc.lo || tok >= pc.hi) continue;
            float v = dq(pc.off[1] + uint(tok - pc.lo) * pc.rb, c);
            if (pc.scale != 1.0) {
                precise float s = v * pc.scale;
                v = s;
            }
            dst[od + j * pc.width + c] = v;
        }
    }
}
