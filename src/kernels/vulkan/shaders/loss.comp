#version 450
// loss.comp — the classification losses of head.c, the per-sample (CE) or per-element (BCE) terms in
// acc_t (double with AF_FP64, with our own exp/log: common.glsl), written to `terms` for the host to
// sum in order (the CPU's summation order).
// OP 0 weighted softmax CE, one invocation per sample b:
//   m = max logits, z = Σ e^(x−m), term = −w[y]·(x_y − m − log z),
//   d[c] = float(w[y]/B·(p_c − [c = y])), p_c = e^(x_c − m − log z) (probs, optional);
//   a label outside [0, C): term NaN, d row 0.
// OP 1 BCE-with-logits, one invocation per element: term = max(x,0) − x·t + log(1 + e^−|x|),
//   d = float((σ(x) − t)/(B·C)).
// Bindings: 0 d_logits, 1 probs (optional), 2 terms (doubles), 3 logits,
//           4 labels int32 | targets, 5 class weights (optional).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint B, C;
    uint op;
} pc;
#define OP pc.op

layout(std430, binding = 0) buffer BD { float dl[]; };
layout(std430, binding = 1) buffer BP { float probs[]; };
layout(std430, binding = 2) buffer BT { uint terms[]; };
layout(std430, binding = 3) readonly buffer BX { float x[]; };
layout(std430, binding = 4) readonly buffer BL { uint lab[]; };
layout(std430, binding = 5) readonly buffer BW { float cw[]; };

void put(uint i, acc_t v) {
    uvec2 u = acc_bits(v);
    terms[(pc.off[2] >> 2) + 2u * i] = u.x;
    terms[(pc.off[2] >> 2) + 2u * i + 1u] = u.y;
}

#if AF_FP64
double log1p_d(double u) { // log(1 + u), 0 <= u <= 1, with the rounding of 1 + u corrected
    double w = 1.0 + u;
    if (w == 1.0) return u;
    return af_log_d(w) - ((w - 1.0) - u) / w;
}
#else
float log1p_d(float u) { return log(1.0 + u); }
#endif

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    const uint ox = pc.off[3] >> 2, od = pc.off[0] >> 2;
    if (OP == 0u) {
        if (gid >= pc.B) return;
        const uint b = gid, C = pc.C, r = ox + b * C;
        const int y = int(lab[(pc.off[4] >> 2) + b]);
        acc_t m = acc_t(-1.0 / 0.0);
        for (uint c = 0u; c < C; c++)
            if (acc_t(x[r + c]) > m) m = acc_t(x[r + c]);
        acc_t z = acc_t(0);
        for (uint c = 0u; c < C; c++) z += acc_exp(acc_t(x[r + c]) - m);
        const acc_t logz = acc_log(z);
        if (y < 0 || y >= int(C)) {
            put(b, acc_t(0.0 / 0.0));
            for (uint c = 0u; c < C; c++) {
                dl[od + b * C + c] = 0.0;
                if (pc.off[1] != ABSENT) probs[(pc.off[1] >> 2) + b * C + c] = float(acc_exp(acc_t(x[r + c]) - m - logz));
            }
            return;
        }
        const acc_t w = pc.off[5] != ABSENT ? acc_t(cw[(pc.off[5] >> 2) + uint(y)]) : acc_t(1);
        precise acc_t term = -w * (acc_t(x[r + uint(y)]) - m - logz);
        put(b, term);
        const acc_t gs = w * (acc_t(1) / acc_t(pc.B));
        for (uint c = 0u; c < C; c++) {
            const acc_t p = acc_exp(acc_t(x[r + c]) - m - logz);
            if (pc.off[1] != ABSENT) probs[(pc.off[1] >> 2) + b * C + c] = float(p);
            precise acc_t g = gs * (p - (int(c) == y ? acc_t(1) : acc_t(0)));
            dl[od + b * C + c] = float(g);
        }
    } else {
        const uint n = pc.B * pc.C;
        if (gid >= n) return;
        const acc_t xv = acc_t(x[ox + gid]), t = acc_t(uintBitsToFloat(lab[(pc.off[4] >> 2) + gid]));
        const acc_t ax = abs(xv);
        const acc_t en = acc_exp(-ax);
        precise acc_t term = (xv > acc_t(0) ? xv : acc_t(0)) - xv * t + log1p_d(en);
        put(gid, term);
        const acc_t sig = xv >= acc_t(0) ? acc_t(1) / (acc_t(1) + en) : en / (acc_t(1) + en);
        dl[od + gid] = float((sig - t) * (acc_t(1) / acc_t(n)));
    }
}
