#version 450
// head.comp — the linear classification head (head.c), C and B small, H up to a few thousand.
// OP 0 forward:  logits[b, c] = float(Σ pooled[b,:]·W[c,:] + bias[c]), the dot in 16 float lanes
//                (elements i ≡ j mod 16 in order) + the tail in acc_t, lanes added in order (head.c
//                dot_f32); one invocation per (b, c).
// OP 1 dW:       dW[c, h] += Σ_b d_logits[b, c]·pooled[b, h] (b in order), one invocation per (c, h)
// OP 2 d_pooled: d_pooled[b, h] += Σ_c d_logits[b, c]·W[c, h] (c in order), one per (b, h)
// OP 3 dbias:    dbias[c] += float(Σ_b d_logits[b, c]) in acc_t, one per c
// Bindings: 0 out, 1 pooled, 2 W, 3 bias | d_logits.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint B, H, C;
    uint op;
} pc;
#define OP pc.op

layout(std430, binding = 0) buffer BO { float o[]; };
layout(std430, binding = 1) readonly buffer BP { float pooled[]; };
layout(std430, binding = 2) readonly buffer BW { float W[]; };
layout(std430, binding = 3) readonly buffer BB { float bd[]; };

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    const uint oo = pc.off[0] >> 2, op = pc.off[1] >> 2, ow = pc.off[2] >> 2, ob = pc.off[3] >> 2;
    const uint H = pc.H, C = pc.C;
    if (OP == 0u) {
        if (gid >= pc.B * C) return;
        const uint b = gid / C, c = gid % C;
        float lane[16];
        [[unroll]] for (uint j = 0u; j < 16u; j++) lane[j] = 0.0;
        uint i = 0u;
        for (; i + 16u <= H; i += 16u)
            [[unroll]] for (uint j = 0u; j < 16u; j++) {
                precise float v = lane[j] + pooled[op + b * H + i + j] * W[ow + c * H + i + j];
                lane[j] = v;
            }
        precise acc_t s = acc_t(0);
        for (; i < H; i++) s += acc_t(pooled[op + b * H + i]) * acc_t(W[ow + c * H + i]);
        [[unroll]] for (uint j = 0u; j < 16u; j++) s += acc_t(lane[j]);
        if (pc.off[3] != ABSENT) s += acc_t(bd[ob + c]);
        o[oo + gid] = float(s);
    } else if (OP == 1u) {
        if (gid >= C * H) return;
        const uint c = gid / H, h = gid % H;
        float acc = o[oo + gid];
        for (uint b = 0u; b < pc.B; b++) {
            precise float v = acc + bd[ob + b * C + c] * pooled[op + b * H + h];
            acc = v;
        }
        o[oo + gid] = acc;
    } else if (OP == 2u) {
        if (gid >= pc.B * H) return;
        const uint b = gid / H, h = gid % H;
        float acc = o[oo + gid];
        for (uint c = 0u; c < C; c++) {
            precise float v = acc + bd[ob + b * C + c] * W[ow + c * H + h];
            acc = v;
        }
        o[oo + gid] = acc;
    } else {
        if (gid >= C) return;
        acc_t s = acc_t(0);
        for (uint b = 0u; b < pc.B; b++) s += acc_t(bd[ob + b * C + gid]);
        precise float v = o[oo + gid] + float(s);
        o[oo + gid] = v;
    }
}
