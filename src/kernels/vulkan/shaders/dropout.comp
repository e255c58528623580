#version 450
// dropout.comp — the LoRA dropout mask (lora.c af_lora_dropout_mask) from the counter-based RNG
// (af_ctr_key / af_ctr_u01: splitmix64 finaliser), in 64-bit arithmetic emulated with 32-bit words
// so no shaderInt64 is needed: bit-identical masks. The host passes h3 = the key state after
// (seed, layer, proj); row t gets key = mix64(h3 ^ ((t0 + t + 1)·K3 + 3)), element i is `keep` when
// (mix64(key + (i + 1)·φ) >> 40)·2^-24 >= p, else 0. Binding 0 mask [n, in].
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n, in_;
    uvec2 h3;   // (lo, hi)
    uvec2 t0p1; // t0 + 1 as 64 bits
    float p, keep;
} pc;

layout(std430, binding = 0) buffer BM { float mask[]; };

uvec2 add64(uvec2 a, uvec2 b) {
    uint c;
    uint lo = uaddCarry(a.x, b.x, c);
    return uvec2(lo, a.y + b.y + c);
}
uvec2 mul64(uvec2 a, uvec2 b) {
    uint hi, lo;
    umulExtended(a.x, b.x, hi, lo);
    return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}
uvec2 shr64(uvec2 a, uint s) { // 0 < s < 32
    return uvec2((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}
uvec2 mix64(uvec2 z) {
    z ^= shr64(z, 30u);
    z = mul64(z, uvec2(0x1ce4e5b9u, 0xbf58476du));
    z ^= shr64(z, 27u);
    z = mul64(z, uvec2(0x133111ebu, 0x94d049bbu));
    z ^= shr64(z, 31u);
    return z;
}

void main() {
    const uint total = pc.n * pc.in_;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * 256u;
    for (uint e = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x; e < total;
         e += stride) {
        const uint t = e / pc.in_, i = e % pc.in_;
        uvec2 c = add64(pc.t0p1, uvec2(t, 0u));
        uvec2 key = mix64(pc.h3 ^ add64(mul64(c, uvec2(0x5b1b1b4du, 0xf58f7a5cu)), uvec2(3u, 0u)));
        uvec2 h = mix64(add64(key, mul64(uvec2(i + 1u, 0u), uvec2(0x7f4a7c15u, 0x9e3779b9u))));
        float u = float(h.y >> 8) * (1.0 / 16777216.0);
        mask[(pc.off[0] >> 2) + e] = u >= pc.p ? pc.keep : 0.0;
    }
}
