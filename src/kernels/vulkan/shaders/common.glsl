// common.glsl — shared by every compute shader of the Vulkan backend (docs/VULKAN.md).
// Conventions: every shader's push constants start with `uint off[8]`, the byte offset of
// argument i inside the buffer bound at binding i (0xFFFFFFFF when the optional argument is absent);
// float arrays index from off[i] >> 2. Arithmetic that must round exactly like the CPU kernels is
// `precise` (no contraction into fused multiply-adds).
// AF_FP64 (a build variant): 1 = the double accumulations of the CPU kernels in double
// (shaderFloat64), 0 = the same code in float for devices without it.
#extension GL_EXT_control_flow_attributes : enable

#ifndef AF_FP64
#define AF_FP64 0
#endif
#if AF_FP64
#define acc_t double
#else
#define acc_t float
#endif

#define ABSENT 0xFFFFFFFFu

// An acc_t value as the two 32-bit words (low, high) of an IEEE double, the storage of every value
// the host reads back as a double: a double's own bits, or a float widened exactly by bit operations.
#if AF_FP64
uvec2 acc_bits(double v) { return unpackDouble2x32(v); }
#else
uvec2 acc_bits(float f) {
    uint u = floatBitsToUint(f), sgn = u & 0x80000000u, e = (u >> 23) & 0xFFu, m = u & 0x7FFFFFu;
    if (e == 0xFFu) return uvec2(m << 29, sgn | 0x7FF00000u | (m >> 3));
    if (e == 0u) {
        if (m == 0u) return uvec2(0u, sgn);
        int msb = findMSB(m); // subnormal float: normal as a double
        uint sh = uint(23 - msb);
        m = (m << sh) & 0x7FFFFFu;
        e = uint(1 - int(sh) + 896);
        return uvec2(m << 29, sgn | (e << 20) | (m >> 3));
    }
    return uvec2(m << 29, sgn | ((e + 896u) << 20) | (m >> 3));
}
#endif

// ---- e^x, float: the CPU's vexp.h algorithm (Cody-Waite reduction, Cephes degree-5 polynomial,
// scaling by 2^k in two steps), with separate multiplies and adds where vexp.h fuses them:
// <= ~2 ulp (measured: tests/test_backend_ops.c).
float af_expf(float x0) {
    precise float x = min(89.0, max(-104.0, x0));
    precise float k = roundEven(x * 1.44269504088896341);
    // x − k·ln2 in two exact-ish steps (C1 has 9 significant bits, so k·C1 is exact); every step
    // `precise` so that the compiler does not fold them back into one rounded k·ln2
    precise float r = x - k * 0.693359375;
    r = r - k * -2.12194440e-4;
    precise float p = 1.9875691500e-4;
    p = p * r + 1.3981999507e-3;
    p = p * r + 8.3334519073e-3;
    p = p * r + 4.1665795894e-2;
    p = p * r + 1.6666665459e-1;
    p = p * r + 5.0000001201e-1;
    precise float e = (p * (r * r) + r) + 1.0;
    int ki = int(k), k1 = ki >> 1, k2 = ki - k1;
    precise float y = (e * intBitsToFloat((k1 + 127) << 23)) * intBitsToFloat((k2 + 127) << 23);
    return isnan(x0) ? x0 : y;
}

// tanh, float: an odd Taylor polynomial near 0 (where 1 - 2/(e^2u + 1) cancels), else through af_expf.
float af_tanhf(float u) {
    float a = abs(u);
    if (a < 0.0004) return u;
    if (a < 0.55) {
        float z = u * u;
        // tanh u = u (1 - z/3 + 2z²/15 - 17z³/315 + 62z⁴/2835 - 1382z⁵/155925 + 21844z⁶/6081075 - 929569z⁷/638512875)
        float p = -929569.0 / 638512875.0;
        p = p * z + 21844.0 / 6081075.0;
        p = p * z - 1382.0 / 155925.0;
        p = p * z + 62.0 / 2835.0;
        p = p * z - 17.0 / 315.0;
        p = p * z + 2.0 / 15.0;
        p = p * z - 1.0 / 3.0;
        return u + u * (z * p);
    }
    if (a > 9.0) return sign(u);
    float t = 1.0 - 2.0 / (af_expf(2.0 * a) + 1.0);
    return u < 0.0 ? -t : t;
}

#if AF_FP64
// e^x and log x in double (GLSL has no double exp/log): range reduction by ln2, Taylor series to
// degree 13 on |r| <= ln2/2 (error < 2e-17); log through atanh on [sqrt(1/2), sqrt(2)).
double af_exp_d(double x) {
    if (x < -745.0) return 0.0;
    if (x > 709.0) return 1.0 / 0.0;
    double k = floor(x * 1.4426950408889634 + 0.5);
    precise double r = (x - k * 0.6931471803691238) - k * 1.9082149292705877e-10;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int ki = int(k);
    // 2^k in two factors (k down to -1074 stays representable)
    int k1 = ki / 2, k2 = ki - k1;
    return p * ldexp(1.0, k1) * ldexp(1.0, k2);
}
double af_log_d(double x) {
    if (x <= 0.0) return x == 0.0 ? -1.0 / 0.0 : 0.0 / 0.0;
    if (isinf(x)) return x;
    int e;
    double m = frexp(x, e); // x = m 2^e, m in [0.5, 1)
    if (m < 0.7071067811865476) m *= 2.0, e -= 1;
    double z = (m - 1.0) / (m + 1.0), z2 = z * z;
    double s = 1.0 / 23.0;
    [[unroll]] for (int k = 21; k >= 1; k -= 2) s = s * z2 + 1.0 / double(k);
    return 2.0 * z * s + double(e) * 0.6931471805599453;
}
#define acc_exp(x) af_exp_d(x)
#define acc_log(x) af_log_d(x)
#else
#define acc_exp(x) af_expf(x)
#define acc_log(x) log(x)
#endif

// sin and cos of a float angle (|t| < 2π after the caller's reduction), rounded once to float:
// with AF_FP64 evaluated in double (octant reduction, Taylor polynomials, error < 1e-16), so the
// result is the correctly rounded value almost always (the CPU's glibc sinf/cosf are too);
// otherwise the driver's sin/cos (Vulkan bounds their error by 2^-11 absolute: see VULKAN.md).
#if AF_FP64
void af_sincos(float tf, out float sn, out float cs) {
    double t = double(tf);
    double q = floor(t * 0.6366197723675814 + 0.5); // nearest multiple of π/2
    precise double r = (t - q * 1.5707963267341256) - q * 6.077100506506192e-11;
    double r2 = r * r;
    double s = -1.0 / 1307674368000.0;
    s = s * r2 + 1.0 / 6227020800.0;
    s = s * r2 - 1.0 / 39916800.0;
    s = s * r2 + 1.0 / 362880.0;
    s = s * r2 - 1.0 / 5040.0;
    s = s * r2 + 1.0 / 120.0;
    s = s * r2 - 1.0 / 6.0;
    s = r + r * r2 * s;
    double c = 1.0 / 20922789888000.0;
    c = c * r2 - 1.0 / 87178291200.0;
    c = c * r2 + 1.0 / 479001600.0;
    c = c * r2 - 1.0 / 3628800.0;
    c = c * r2 + 1.0 / 40320.0;
    c = c * r2 - 1.0 / 720.0;
    c = c * r2 + 1.0 / 24.0;
    c = c * r2 - 0.5;
    c = 1.0 + r2 * c;
    int qi = int(q) & 3;
    double S = qi == 0 ? s : qi == 1 ? c : qi == 2 ? -s : -c;
    double C = qi == 0 ? c : qi == 1 ? -s : qi == 2 ? -c : s;
    sn = float(S);
    cs = float(C);
}
#else
void af_sincos(float t, out float sn, out float cs) {
    sn = sin(t);
    cs = cos(t);
}
#endif
