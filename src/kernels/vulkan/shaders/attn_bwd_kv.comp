#version 450
// attn_bwd_kv.comp — attention backward, pass B (ops_attention.c bwd_item_kv), one workgroup of 64
// per (key j, kv head g): over the heads of the group and the queries i that see key j, in blocks of
// 64: p = e^(k_j·q_i·scale − lse_i), ds = p·(v_j·dout_i − D_i)·scale, dv_j += Σ p·dout_i,
// dk_j += Σ ds·q_i. Bindings: 0 dk, 1 dv, 2 q, 3 k, 4 v, 5 dout, 6 lse, 7 D (from pass A).
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

layout(std430, binding = 0) buffer BDK { float dk[]; };
layout(std430, binding = 1) buffer BDV { float dv[]; };
layout(std430, binding = 2) readonly buffer BQ { float q[]; };
layout(std430, binding = 3) readonly buffer BK { float k[]; };
layout(std430, binding = 4) readonly buffer BV { float v[]; };
layout(std430, binding = 5) readonly buffer BDO { float dout[]; };
layout(std430, binding = 6) readonly buffer BL { float lse[]; };
layout(std430, binding = 7) readonly buffer BD { float Dv[]; };

shared float kj[HD_MAX];
shared float vj[HD_MAX];
shared float ps[64];
shared float dss[64];

void main() {
    const uint item = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (item >= pc.n_kv * pc.n_kv_heads) return;
    const uint j = item / pc.n_kv_heads, g = item % pc.n_kv_heads, t = gl_LocalInvocationID.x;
    const uint hd = pc.hd, group = pc.n_heads / pc.n_kv_heads;
    const uint qs_ = pc.n_heads * hd, ks = pc.n_kv_heads * hd;
    const uint okj = (pc.off[3] >> 2) + j * ks + g * hd, ovj = (pc.off[4] >> 2) + j * ks + g * hd;
    for (uint d = t; d < hd; d += 64u) {
        kj[d] = k[okj + d];
        vj[d] = v[ovj + d];
    }
    const int i0 = max(int(j) - int(pc.q_pos0), 0);
    int i1 = int(pc.n_q) - 1;
    if (pc.window > 0u && int(j) + int(pc.window) - 1 - int(pc.q_pos0) < i1) i1 = int(j) + int(pc.window) - 1 - int(pc.q_pos0);
    float adk[HD_R], adv[HD_R];
    [[unroll]] for (uint r = 0u; r < HD_R; r++) adk[r] = 0.0, adv[r] = 0.0;
    for (uint h = g * group; h < (g + 1u) * group; h++) {
        for (int c0 = i0; c0 <= i1; c0 += 64) {
            const int nb = min(64, i1 - c0 + 1);
            barrier();
            if (int(t) < nb) {
                const uint ii = uint(c0 + int(t));
                const uint qr = (pc.off[2] >> 2) + ii * qs_ + h * hd, dr = (pc.off[5] >> 2) + ii * qs_ + h * hd;
                float sq = 0.0, sv = 0.0;
                for (uint d = 0u; d < hd; d++) {
                    sq += kj[d] * q[qr + d];
                    sv += vj[d] * dout[dr + d];
                }
                const float pr = af_expf(sq * pc.scale - lse[(pc.off[6] >> 2) + h * pc.n_q + ii]);
                precise float ds = pr * (sv - Dv[(pc.off[7] >> 2) + h * pc.n_q + ii]) * pc.scale;
                ps[t] = pr;
                dss[t] = ds;
            }
            barrier();
            [[unroll]] for (uint r = 0u; r < HD_R; r++) {
                const uint d = t + 64u * r;
                if (d < hd)
                    for (int b = 0; b < nb; b++) {
                        const uint ii = uint(c0 + b);
                        adv[r] += ps[b] * dout[(pc.off[5] >> 2) + ii * qs_ + h * hd + d];
                        adk[r] += dss[b] * q[(pc.off[2] >> 2) + ii * qs_ + h * hd + d];
                    }
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < HD_R; r++) {
        const uint d = t + 64u * r;
        if (d < hd) {
            dk[(pc.off[0] >> 2) + j * ks + g * hd + d] += adk[r];
            dv[(pc.off[1] >> 2) + j * ks + g * hd + d] += adv[r];
        }
    }
}
