#version 450
// rope.comp — RoPE in place (ops.c rope_apply): one invocation per (token, pair i), all heads.
// θ = pos·f_i with f_i = base^(−2i/head_dim) (a table of doubles made on the host with libm's exp,
// as ops.c), reduced mod 2π in double, then sin/cos of the float angle (common.glsl af_sincos), sin
// times `sgn` (−1: the backward's inverse rotation). Pairs: NORM (2i, 2i+1), NEOX (i, i + hd/2);
// (a, b) -> (a·cos − b·sin, a·sin + b·cos), no fused multiply-add (the CPU paths' bits).
// Without AF_FP64 the angle is formed and reduced in float (error ~ pos·1e-7 rad: VULKAN.md).
// Bindings: 0 x [n, n_heads, hd], 1 pos [n] int32, 2 freq: [hd/2] doubles, then the same as [hd/2] floats.
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, nh, hd, neox;
    float sgn;
} pc;

layout(std430, binding = 0) buffer BX { float x[]; };
layout(std430, binding = 1) readonly buffer BP { int pos[]; };
layout(std430, binding = 2) readonly buffer BF { uint fr[]; };

void main() {
    const uint half_ = pc.hd / 2u;
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (gid >= pc.n * half_) return;
    const uint t = gid / half_, i = gid % half_;
    const uint fo = (pc.off[2] >> 2) + 2u * i;
#if AF_FP64
    double f = packDouble2x32(uvec2(fr[fo], fr[fo + 1u]));
    const double two_pi = 6.283185307179586476925286766559LF;
    precise double th = double(pos[(pc.off[1] >> 2) + t]) * f;
    th -= two_pi * floor(th / two_pi); // ops.c's operations: no fused multiply-add
    float tf = float(th);
#else
    float f = uintBitsToFloat(fr[(pc.off[2] >> 2) + pc.hd + i]); // the table's float copy
    precise float th = float(pos[(pc.off[1] >> 2) + t]) * f;
    th -= 6.2831853 * floor(th / 6.2831853);
    float tf = th;
#endif
    float sn, cs;
    af_sincos(tf, sn, cs);
    sn = pc.sgn * sn;
    for (uint h = 0u; h < pc.nh; h++) {
        uint base = (pc.off[0] >> 2) + (t * pc.nh + h) * pc.hd;
        uint ia = pc.neox != 0u ? base + i : base + 2u * i;
        uint ib = pc.neox != 0u ? base + i + half_ : base + 2u * i + 1u;
        float a = x[ia], b = x[ib];
        precise float na = a * cs - b * sn;
        precise float nb = a * sn + b * cs;
        x[ia] = na;
        x[ib] = nb;
    }
}
