#version 450
// adamw.comp — one AdamW step (optim.c adamw_range, PyTorch's single-tensor AdamW), one invocation
// per element with the CPU's float expressions; the scalar factors come from the host, formed as
// af_adamw_step forms them. With AF_FP64 the square root and the division are taken in double and
// rounded once (Vulkan allows float sqrt/division a few ulp of error; double then float gives the
// correctly rounded float result when the driver's double operations are IEEE).
//   p *= decay (when weight decay is on and decay_mask[i] != 0 or there is no mask)
//   m = m + w1·(g − m);  v = v·b2;  v = v + (w2·g)·g
//   p = p + (neg_step·m) / (sqrt(v)/bc2_sqrt + eps)
// Bindings: 0 P, 1 M, 2 V, 3 G, 4 decay_mask (bytes, optional).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, wd_on;
    float decay, w1, b2, w2, neg_step, bc2_sqrt, eps;
} pc;

layout(std430, binding = 0) buffer BP { float P[]; };
layout(std430, binding = 1) buffer BM { float M[]; };
layout(std430, binding = 2) buffer BV { float V[]; };
layout(std430, binding = 3) readonly buffer BG { float G[]; };
layout(std430, binding = 4) readonly buffer BK { uint mask[]; };

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * 256u;
    for (uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x; i < pc.n;
         i += stride) {
        float p = P[(pc.off[0] >> 2) + i];
        const float g = G[(pc.off[3] >> 2) + i];
        if (pc.wd_on != 0u) {
            bool dec = true;
            if (pc.off[4] != ABSENT) {
                uint b = pc.off[4] + i;
                dec = ((mask[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu) != 0u;
            }
            if (dec) p *= pc.decay;
        }
        precise float m = M[(pc.off[1] >> 2) + i];
        m = m + pc.w1 * (g - m);
        precise float v = V[(pc.off[2] >> 2) + i] * pc.b2;
        v = v + (pc.w2 * g) * g;
#if AF_FP64
        const float sq = float(sqrt(double(v)));
        const float q = float(double(sq) / double(pc.bc2_sqrt));
        precise float denom = q + pc.eps;
        const float nm = pc.neg_step * m;
        precise float np = p + float(double(nm) / double(denom));
#else
        precise float denom = sqrt(v) / pc.bc2_sqrt + pc.eps;
        precise float np = p + pc.neg_step * m / denom;
#endif
        M[(pc.off[1] >> 2) + i] = m;
        V[(pc.off[2] >> 2) + i] = v;
        P[(pc.off[0] >> 2) + i] = np;
    }
}
