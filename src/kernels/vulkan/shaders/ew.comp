#version 450
// ew.comp — element-wise ops over n elements (grid-stride), with the CPU kernels' exact float
// expressions (ops.c, lora.c, optim.c): OP (a push constant: one pipeline)
//   0 exp        y = e^a                                  (af_vexpf)
//   1 swiglu     y = (a·σ(a))·b,  σ(a) = 1/(1 + e^-a)      (af_swiglu_forward: a gate, b up)
//   2 swiglu'    y += (c·b)·(s·(1 + a·(1 − s))), y2 += (c·a)·s    (backward: c = dh)
//   3 geglu      y = ((0.5·a)·(1 + t))·b, t = tanh(K0·(a + ((K1·a)·a)·a))
//   4 geglu'     y += (c·b)·g', y2 += c·g                    (g = 0.5·a·(1 + t))
//   5 add        y = a + b
//   6 scale      y = s·a
//   7 softcap    y = s·tanh(a/s)
//   8 mul        y = a·b
//   9 axpy       y = y + s·a
// Bindings: 0 y, 1 y2, 2 a, 3 b, 4 c.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    uint off[8];
    uint n;
    float s;
    uint op;
} pc;
#define OP pc.op

layout(std430, binding = 0) buffer BY { float y[]; };
layout(std430, binding = 1) buffer BY2 { float y2[]; };
layout(std430, binding = 2) readonly buffer BA { float a[]; };
layout(std430, binding = 3) readonly buffer BB { float b[]; };
layout(std430, binding = 4) readonly buffer BC { float c[]; };

#define K0 0.7978845608028654
#define K1 0.044715

float sigm(float g) { return 1.0 / (1.0 + af_expf(-g)); }

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * 256u;
    const uint oy = pc.off[0] >> 2, oy2 = pc.off[1] >> 2, oa = pc.off[2] >> 2, ob = pc.off[3] >> 2, oc = pc.off[4] >> 2;
    for (uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x; i < pc.n;
         i += stride) {
        if (OP == 0u) {
            y[oy + i] = af_expf(a[oa + i]);
        } else if (OP == 1u) {
            float g = a[oa + i];
            precise float h = (g * sigm(g)) * b[ob + i];
            y[oy + i] = h;
        } else if (OP == 2u) {
            float g = a[oa + i], u = b[ob + i], d = c[oc + i], s = sigm(g);
            precise float ds = s * (1.0 + g * (1.0 - s));
            precise float dg = y[oy + i] + (d * u) * ds;
            precise float du = y2[oy2 + i] + (d * g) * s;
            y[oy + i] = dg;
            y2[oy2 + i] = du;
        } else if (OP == 3u) {
            float x = a[oa + i];
            precise float in_ = float(K0) * (x + ((float(K1) * x) * x) * x);
            float t = af_tanhf(in_);
            precise float h = ((0.5 * x) * (1.0 + t)) * b[ob + i];
            y[oy + i] = h;
        } else if (OP == 4u) {
            float x = a[oa + i], u = b[ob + i], dh = c[oc + i];
            precise float in_ = float(K0) * (x + ((float(K1) * x) * x) * x);
            float t = af_tanhf(in_);
            precise float g = (0.5 * x) * (1.0 + t);
            precise float dgl = 0.5 * (1.0 + t) + (((0.5 * x) * (1.0 - t * t)) * float(K0)) *
                                                      (1.0 + ((3.0 * float(K1)) * x) * x);
            precise float dg = y[oy + i] + (dh * u) * dgl;
            precise float du = y2[oy2 + i] + dh * g;
            y[oy + i] = dg;
            y2[oy2 + i] = du;
        } else if (OP == 5u) {
            precise float v = a[oa + i] + b[ob + i];
            y[oy + i] = v;
        } else if (OP == 6u) {
            precise float v = pc.s * a[oa + i];
            y[oy + i] = v;
        } else if (OP == 7u) {
            precise float v = pc.s * af_tanhf(a[oa + i] / pc.s);
            y[oy + i] = v;
        } else if (OP == 8u) {
            precise float v = a[oa + i] * b[ob + i];
            y[oy + i] = v;
        } else if (OP == 9u) {
            precise float v = y[oy + i] + pc.s * a[oa + i];
            y[oy + i] = v;
        }
    }
}
