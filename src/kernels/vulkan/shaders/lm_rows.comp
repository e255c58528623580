#version 450
// lm_rows.comp — the rows of the LM-head loss (transformer.c lm_row), one workgroup of 256 per row of
// a logits chunk z [k, V], in place: soft-cap z = cap·tanh(z/cap) (cap > 0); argmax (lowest index on
// ties); lse = max + log Σ e^(z − max) in acc_t; loss = lse − z[target];
// with GRAD: z = grad_scale·(e^(z − lse) − [v = target])·(1 − (z/cap)²).
// Bindings: 0 z, 1 loss [k] (doubles: 2 words each), 2 correct [k] int32, 3 targets [k] int32.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint k, V, grad;
    float cap, gs;
} pc;

layout(std430, binding = 0) buffer BZ { float z[]; };
layout(std430, binding = 1) buffer BL { uint loss[]; };
layout(std430, binding = 2) buffer BC { int correct[]; };
layout(std430, binding = 3) readonly buffer BT { int targets[]; };

shared float smx[256];
shared uint sidx[256];
shared acc_t ssum[256];

void main() {
    const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.k) return;
    const uint t = gl_LocalInvocationID.x, V = pc.V, o = (pc.off[0] >> 2) + row * V;
    const float cap = pc.cap;
    float mx = -1.0 / 0.0;
    uint am = 0xFFFFFFFFu;
    for (uint v = t; v < V; v += 256u) {
        float zv = z[o + v];
        if (cap > 0.0) {
            precise float c = cap * af_tanhf(zv / cap);
            zv = c;
            z[o + v] = zv;
        }
        if (am == 0xFFFFFFFFu || zv > mx) mx = zv, am = v; // the lane's first, or a strictly larger one
    }
    smx[t] = mx;
    sidx[t] = am;
    barrier();
    [[unroll]] for (uint s = 128u; s >= 1u; s /= 2u) {
        if (t < s) {
            float a = smx[t], b = smx[t + s];
            uint ia = sidx[t], ib = sidx[t + s];
            // the CPU's scan keeps the first index whose value exceeds every earlier one
            bool take_b = ib != 0xFFFFFFFFu && (ia == 0xFFFFFFFFu || b > a || (b == a && ib < ia));
            if (take_b) smx[t] = b, sidx[t] = ib;
        }
        barrier();
    }
    const float M = smx[0];
    const uint AM = sidx[0];
    barrier();
    acc_t s = acc_t(0);
    for (uint v = t; v < V; v += 256u) s += acc_exp(acc_t(z[o + v] - M));
    ssum[t] = s;
    barrier();
    [[unroll]] for (uint h = 128u; h >= 1u; h /= 2u) {
        if (t < h) ssum[t] += ssum[t + h];
        barrier();
    }
    const acc_t lse = acc_t(M) + acc_log(ssum[0]);
    const int tg = targets[(pc.off[3] >> 2) + row];
    if (t == 0u) {
        const acc_t l = lse - acc_t(z[o + uint(tg)]);
        uvec2 u = acc_bits(l);
        loss[(pc.off[1] >> 2) + 2u * row] = u.x;
        loss[(pc.off[1] >> 2) + 2u * row + 1u] = u.y;
        correct[(pc.off[2] >> 2) + row] = AM == uint(tg) ? 1 : 0;
    }
    if (pc.grad == 0u) return;
    barrier(); // z[target] read above before it is overwritten
    for (uint v = t; v < V; v += 256u) {
        const float zv = z[o + v];
        float g = float(acc_exp(acc_t(zv) - lse));
        if (v == uint(tg)) g -= 1.0;
        g *= pc.gs;
        if (cap > 0.0) {
            precise float th = zv / cap;
            precise float gg = g * (1.0 - th * th);
            g = gg;
        }
        z[o + v] = g;
    }
}
