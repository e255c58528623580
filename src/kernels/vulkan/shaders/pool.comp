#version 450
// pool.comp — pooling of packed samples (head.c), one invocation per (sample b, column h); sample b
// owns tokens [ss[b], ss[b+1]). BWD = 0: pooled[b, h] = mean over its tokens (acc_t sum in token order
// / len; the CPU's double sums with AF_FP64) or the last token (LAST, or len 1); 0 for an empty sample.
// BWD = 1: d_hidden[t, h] += d_pooled[b, h]·(1/len) for each token (mean) or += d_pooled (last).
// Bindings: 0 pooled | d_hidden, 1 hidden | d_pooled, 2 seq_start [B+1] int32.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint B, H, last;
    uint bwd;
} pc;
#define BWD pc.bwd

layout(std430, binding = 0) buffer BO { float o[]; };
layout(std430, binding = 1) readonly buffer BI { float x[]; };
layout(std430, binding = 2) readonly buffer BS { int ss[]; };

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (gid >= pc.B * pc.H) return;
    const uint b = gid / pc.H, h = gid % pc.H;
    const int s = ss[(pc.off[2] >> 2) + b], e = ss[(pc.off[2] >> 2) + b + 1u], len = e - s;
    const uint oo = pc.off[0] >> 2, ox = pc.off[1] >> 2;
    if (BWD == 0u) {
        float r = 0.0;
        if (len > 0 && (pc.last != 0u || len == 1)) r = x[ox + uint(e - 1) * pc.H + h];
        else if (len > 0) {
            acc_t acc = acc_t(0);
            for (int t = s; t < e; t++) acc += acc_t(x[ox + uint(t) * pc.H + h]);
            r = float(acc / acc_t(len));
        }
        o[oo + b * pc.H + h] = r;
    } else {
        if (len <= 0) return;
        const float g = x[ox + b * pc.H + h];
        if (pc.last != 0u || len == 1) {
            precise float v = o[oo + uint(e - 1) * pc.H + h] + 1.0 * g;
            o[oo + uint(e - 1) * pc.H + h] = v;
            return;
        }
        const float inv = float(acc_t(1) / acc_t(len));
        for (int t = s; t < e; t++) {
            precise float v = o[oo + uint(t) * pc.H + h] + inv * g;
            o[oo + uint(t) * pc.H + h] = v;
        }
    }
}
