#version 450
// attn_fwd.comp — causal grouped-query attention forward (ops_attention.c), one workgroup of 64 per
// (query row i, head h): the keys visible to position q_pos0 + i (sliding window when window > 0)
// in blocks of 64 from the first one, an online softmax with the CPU's block boundaries (running
// max m and sum l, the output rescaled by e^(m_old − m_new) when the max grows), out = Σ p·v / l,
// lse = m + log l (−inf and a zero row when no key is visible). K/V rows are kv_stride floats apart
// (a KV cache); head h reads kv head h / (n_heads / n_kv_heads). Keys after the query's position are
// never read. Bindings: 0 out, 1 lse [n_heads, n_q] (optional), 2 q, 3 k, 4 v.
#include "common.glsl"

// head_dim up to HD_MAX (512: Gemma 4's global layers): HD_R dimensions per invocation of 64
#define HD_MAX 512u
#define HD_R 8u

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n_q, q_pos0, n_kv, kv_stride, n_heads, n_kv_heads, hd, window;
    float scale;
} pc;

layout(std430, binding = 0) buffer BO { float o_[]; };
layout(std430, binding = 1) buffer BL { float lse[]; };
layout(std430, binding = 2) readonly buffer BQ { float q[]; };
layout(std430, binding = 3) readonly buffer BK { float k[]; };
layout(std430, binding = 4) readonly buffer BV { float v[]; };

shared float qs[HD_MAX];
shared float ps[64];
shared float red[64];

float reduce_max(float x, uint t) {
    red[t] = x;
    barrier();
    [[unroll]] for (uint s = 32u; s >= 1u; s /= 2u) {
        if (t < s) red[t] = max(red[t], red[t + s]);
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}
float reduce_sum(float x, uint t) {
    red[t] = x;
    barrier();
    [[unroll]] for (uint s = 32u; s >= 1u; s /= 2u) {
        if (t < s) red[t] = red[t] + red[t + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    const uint item = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (item >= pc.n_q * pc.n_heads) return;
    const uint i = item / pc.n_heads, h = item % pc.n_heads, t = gl_LocalInvocationID.x;
    const uint hd = pc.hd, g = h / (pc.n_heads / pc.n_kv_heads);
    const int p = int(pc.q_pos0 + i);
    const int hi = min(p, int(pc.n_kv) - 1);
    const int lo = (pc.window > 0u && p - int(pc.window) + 1 > 0) ? p - int(pc.window) + 1 : 0;
    const uint oq = (pc.off[2] >> 2) + (i * pc.n_heads + h) * hd;
    for (uint d = t; d < hd; d += 64u) qs[d] = q[oq + d];
    barrier();
    const uint ok = (pc.off[3] >> 2) + g * hd, ov = (pc.off[4] >> 2) + g * hd;
    float o[HD_R];
    [[unroll]] for (uint r = 0u; r < HD_R; r++) o[r] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    for (int j0 = lo; j0 <= hi; j0 += 64) {
        const int nb = min(64, hi - j0 + 1);
        float s = -1.0 / 0.0;
        if (int(t) < nb) {
            const uint kr = ok + uint(j0 + int(t)) * pc.kv_stride;
            float acc = 0.0;
            for (uint d = 0u; d < hd; d++) acc += qs[d] * k[kr + d];
            s = acc * pc.scale;
        }
        const float bm = reduce_max(s, t);
        if (bm > m) {
            const float f = af_expf(m - bm);
            l *= f;
            [[unroll]] for (uint r = 0u; r < HD_R; r++) o[r] *= f;
            m = bm;
        }
        const float e = int(t) < nb ? af_expf(s - m) : 0.0;
        ps[t] = e;
        l += reduce_sum(e, t); // also the barrier that publishes ps
        [[unroll]] for (uint r = 0u; r < HD_R; r++) {
            const uint d = t + 64u * r;
            if (d < hd) {
                float acc = o[r];
                for (int b = 0; b < nb; b++) acc += ps[b] * v[ov + uint(j0 + b) * pc.kv_stride + d];
                o[r] = acc;
            }
        }
        barrier();
    }
    float L = -1.0 / 0.0;
    if (l > 0.0) {
        const float inv = 1.0 / l;
        [[unroll]] for (uint r = 0u; r < HD_R; r++) o[r] *= inv;
        L = m + log(l);
    }
    const uint oo = (pc.off[0] >> 2) + (i * pc.n_heads + h) * hd;
    [[unroll]] for (uint r = 0u; r < HD_R; r++) {
        const uint d = t + 64u * r;
        if (d < hd) o_[oo + d] = l > 0.0 ? o[r] : 0.0;
    }
    if (t == 0u && pc.off[1] != ABSENT) lse[(pc.off[1] >> 2) + h * pc.n_q + i] = L;
}
