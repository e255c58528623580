#version 450
// attn_bwd_q.comp — attention backward, pass A (ops_attention.c bwd_item_q), one workgroup of 64
// per (query row i, head h): D_i = dout_i·out_i (saved for pass B), then over the visible keys in
// blocks of 64: p = e^(s·scale − lse_i), ds = p·(dout_i·v_j − D_i)·scale, dq_i += Σ_j ds·k_j.
// Bindings: 0 dq, 1 D [n_heads, n_q], 2 q, 3 k, 4 v, 5 dout, 6 lse, 7 out.
#include "common.glsl"

// head_dim up to HD_MAX (512: Gemma 4's global layers): HD_R dimensions per invocation of 64
#define HD_MAX 512u
#define HD_R 8u

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n_q, q_pos0, n_kv, n_heads, n_kv_heads, hd, window;
    float scale;
} pc;

layout(std430, binding = 0) buffer BDQ { float dq[]; };
layout(std430, binding = 1) buffer BD { float Dv[]; };
layout(std430, binding = 2) readonly buffer BQ { float q[]; };
layout(std430, binding = 3) readonly buffer BK { float k[]; };
layout(std430, binding = 4) readonly buffer BV { float v[]; };
layout(std430, binding = 5) readonly buffer BDO { float dout[]; };
layout(std430, binding = 6) readonly buffer BL { float lse[]; };
layout(std430, binding = 7) readonly buffer BO { float out_[]; };

shared float qs[HD_MAX];
shared float dos[HD_MAX];
shared float ps[64];
shared float red[64];

void main() {
    const uint item = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (item >= pc.n_q * pc.n_heads) return;
    const uint i = item / pc.n_heads, h = item % pc.n_heads, t = gl_LocalInvocationID.x;
    const uint hd = pc.hd, g = h / (pc.n_heads / pc.n_kv_heads);
    const uint qs_ = pc.n_heads * hd, ks = pc.n_kv_heads * hd;
    const uint oq = i * qs_ + h * hd;
    float dsum = 0.0;
    for (uint d = t; d < hd; d += 64u) {
        qs[d] = q[(pc.off[2] >> 2) + oq + d];
        dos[d] = dout[(pc.off[5] >> 2) + oq + d];
        dsum += dos[d] * out_[(pc.off[7] >> 2) + oq + d];
    }
    red[t] = dsum;
    barrier();
    [[unroll]] for (uint s = 32u; s >= 1u; s /= 2u) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    const float D = red[0];
    if (t == 0u) Dv[(pc.off[1] >> 2) + h * pc.n_q + i] = D;
    const float L = lse[(pc.off[6] >> 2) + h * pc.n_q + i];
    const int p = int(pc.q_pos0 + i);
    const int hi = min(p, int(pc.n_kv) - 1);
    const int lo = (pc.window > 0u && p - int(pc.window) + 1 > 0) ? p - int(pc.window) + 1 : 0;
    const uint ok = (pc.off[3] >> 2) + g * hd, ov = (pc.off[4] >> 2) + g * hd;
    float acc[HD_R];
    [[unroll]] for (uint r = 0u; r < HD_R; r++) acc[r] = 0.0;
    for (int j0 = lo; j0 <= hi; j0 += 64) {
        const int nb = min(64, hi - j0 + 1);
        barrier();
        if (int(t) < nb) {
            const uint kr = ok + uint(j0 + int(t)) * ks, vr = ov + uint(j0 + int(t)) * ks;
            float sq = 0.0, sv = 0.0;
            for (uint d = 0u; d < hd; d++) {
                sq += qs[d] * k[kr + d];
                sv += dos[d] * v[vr + d];
            }
            const float pr = af_expf(sq * pc.scale - L);
            precise float ds = pr * (sv - D) * pc.scale;
            ps[t] = ds;
        }
        barrier();
        [[unroll]] for (uint r = 0u; r < HD_R; r++) {
            const uint d = t + 64u * r;
            if (d < hd)
                for (int b = 0; b < nb; b++) acc[r] += ps[b] * k[ok + uint(j0 + b) * ks + d];
        }
    }
    [[unroll]] for (uint r = 0u; r < HD_R; r++) {
        const uint d = t + 64u * r;
        if (d < hd) dq[(pc.off[0] >> 2) + oq + d] += acc[r];
    }
}
