/*
 * test_quant.c — block geometry, dequantization and reference quantizers (src/kernels/quant.c).
 *
 * 1. Geometry/name table against docs/FORMATS.md §1.4.
 * 2. tests/fixtures/quant_vectors.bin (written by tests/ref/make_quant_vectors.py with the gguf
 *    Python package): af_dequantize_row must reproduce gguf's numpy dequantization BIT-EXACTLY
 *    (0 ulp) for random blocks of all 13 weight types and for rows of real tensors of the two
 *    models; af_quantize_row for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F16/BF16 must produce the same bytes
 *    as gguf's numpy quantize.
 * 3. Quantize -> dequantize round trip on random normal data with per-type error bounds
 *    (derivations next to each bound below).
 */
#include "kernels/quant.h"
#include "core/core.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/quant_vectors.bin"
#define KQ_FIXTURE "tests/fixtures/kquant_vectors.bin"

static uint32_t u32_at(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Distance in units in the last place between two finite floats of any sign. */
static int64_t ulp_diff(float a, float b) {
    int64_t ia = (int32_t)fbits(a), ib = (int32_t)fbits(b);
    if (ia < 0) ia = (int64_t)INT32_MIN - ia;
    if (ib < 0) ib = (int64_t)INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

static void test_geometry(void) {
    static const struct { uint32_t id; const char *name; size_t bs, bb; } want[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},     {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},     {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {24, "I8", 1, 1},
        {25, "I16", 1, 2},       {26, "I32", 1, 4},       {27, "I64", 1, 8},
        {28, "F64", 1, 8},       {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},   {16, "IQ2_XXS", 0, 0},
        {23, "IQ4_XS", 0, 0},    {29, "IQ1_M", 0, 0},     {4, "Q4_2", 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(af_type_block_size(want[i].id) == want[i].bs, "block size of %s: %zu", want[i].name,
              af_type_block_size(want[i].id));
        CHECK(af_type_block_bytes(want[i].id) == want[i].bb, "block bytes of %s: %zu", want[i].name,
              af_type_block_bytes(want[i].id));
        CHECK(strcmp(af_type_name(want[i].id), want[i].name) == 0, "name of %u: %s", want[i].id,
              af_type_name(want[i].id));
    }
    CHECK(strcmp(af_type_name(43), "unknown") == 0, "name of 43");
    CHECK(strcmp(af_type_name(1000), "unknown") == 0, "name of 1000");
    CHECK(af_type_block_size(43) == 0 && af_type_block_bytes(1000) == 0, "unknown ids have no size");
    CHECK(af_row_bytes(AF_TYPE_Q4_K, 1024) == 4 * 144, "row bytes Q4_K 1024");
    CHECK(af_row_bytes(AF_TYPE_Q4_K, 640) == 0, "row bytes Q4_K 640 (not a multiple)");
    CHECK(af_row_bytes(AF_TYPE_Q5_0, 640) == 20 * 22, "row bytes Q5_0 640");
    CHECK(af_row_bytes(AF_TYPE_F32, 576) == 2304, "row bytes F32 576");
    CHECK(af_row_bytes(AF_TYPE_BF16, -1) == 0, "row bytes of negative n");
    CHECK(af_row_bytes(20, 256) == 0, "row bytes of IQ4_NL (unknown geometry)");
    const uint32_t deq[] = {0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14};
    for (size_t i = 0; i < sizeof deq / sizeof deq[0]; i++)
        CHECK(af_type_can_dequantize(deq[i]), "can dequantize %s", af_type_name(deq[i]));
    CHECK(!af_type_can_dequantize(9) && !af_type_can_dequantize(15) && !af_type_can_dequantize(20) &&
              !af_type_can_dequantize(26) && !af_type_can_dequantize(500),
          "cannot dequantize Q8_1/Q8_K/IQ4_NL/I32/500");
    float x[256] = {0};
    unsigned char buf[512];
    CHECK(!af_quantize_row(AF_TYPE_Q8_1, x, buf, 32), "quantize Q8_1 unsupported");
    CHECK(!af_quantize_row(20, x, buf, 32), "quantize IQ4_NL unsupported");
    CHECK(!af_quantize_row(AF_TYPE_Q4_K, x, buf, 100), "quantize Q4_K with n=100");
}

/* One fixture record: dequantize (kind 0) or quantize (kind 1) check. */
static void check_record(uint32_t kind, uint32_t type, uint32_t rows, uint32_t cols, const char *label,
                         const unsigned char *raw, const float *f32, uint32_t nbytes, bool *seen_deq) {
    const size_t rb = af_row_bytes(type, cols);
    if (!CHECK(rb != 0 && (size_t)rows * rb == nbytes, "%s: row bytes %zu x %u != %u", label, rb, rows,
               nbytes))
        return;
    float *out = malloc((size_t)cols * sizeof(float));
    unsigned char *q = malloc(rb);
    if (kind == 0) {
        if (!CHECK(af_type_can_dequantize(type), "%s: type %u not dequantizable", label, type)) goto done;
        if (strncmp(label, "random", 6) == 0) seen_deq[type] = true;
        size_t bad = 0, worst_i = 0;
        int64_t worst = 0;
        for (uint32_t r = 0; r < rows; r++) {
            af_dequantize_row(type, raw + r * rb, out, cols);
            for (uint32_t i = 0; i < cols; i++) {
                const float want = f32[(size_t)r * cols + i];
                if (fbits(out[i]) != fbits(want)) {
                    bad++;
                    int64_t u = ulp_diff(out[i], want);
                    if (u > worst) {
                        worst = u;
                        worst_i = (size_t)r * cols + i;
                    }
                }
            }
        }
        if (!CHECK(bad == 0, "%s (%s): %zu of %u values differ in bits from gguf; worst %lld ulp at [%zu]",
                   label, af_type_name(type), bad, rows * cols, (long long)worst, worst_i))
            ;
        else if (getenv("TL_VERBOSE"))
            printf("ok   %s (%s, %u x %u): bit-exact\n", label, af_type_name(type), rows, cols);
    } else {
        size_t bad_rows = 0, first = 0;
        for (uint32_t r = 0; r < rows; r++) {
            memset(q, 0xAB, rb);
            if (!CHECK(af_quantize_row(type, f32 + (size_t)r * cols, q, cols), "%s: quantize failed", label))
                goto done;
            if (memcmp(q, raw + r * rb, rb) != 0) {
                if (bad_rows++ == 0)
                    for (first = 0; first < rb && q[first] == raw[r * rb + first]; first++) {}
            }
        }
        CHECK(bad_rows == 0, "%s: %zu rows differ from gguf's quantize (first differing byte %zu)", label,
              bad_rows, first);
    }
done:
    free(out);
    free(q);
}

/* Read and check every record of an AFQV fixture; *n_real / *n_quant count the records. */
static void check_fixture_file(const char *path, bool *seen_deq, int *n_real, int *n_quant) {
    size_t len = 0;
    unsigned char *buf = (unsigned char *)tl_read_file(path, &len);
    if (!CHECK(buf != NULL, "cannot read %s (run from the repository root)", path)) return;
    if (!CHECK(len >= 12 && memcmp(buf, "AFQV", 4) == 0 && u32_at(buf + 4) == 1, "bad fixture header")) {
        free(buf);
        return;
    }
    const uint32_t n_rec = u32_at(buf + 8);
    size_t pos = 12;
    for (uint32_t k = 0; k < n_rec; k++) {
        if (!CHECK(pos + 68 <= len, "fixture truncated at record %u", k)) break;
        const unsigned char *h = buf + pos;
        const uint32_t kind = u32_at(h), type = u32_at(h + 4), rows = u32_at(h + 8), cols = u32_at(h + 12);
        char label[49];
        memcpy(label, h + 16, 48);
        label[48] = 0;
        const uint32_t nbytes = u32_at(h + 64);
        const size_t nf = (size_t)rows * cols * sizeof(float);
        pos += 68;
        if (!CHECK(kind <= 1 && type < AF_TYPE_COUNT && pos + nbytes + nf <= len, "record %u malformed", k))
            break;
        /* Copy the floats out: they are not 4-byte aligned inside the file buffer. */
        float *f32 = malloc(nf ? nf : 1);
        const unsigned char *raw = kind == 0 ? buf + pos : buf + pos + nf;
        memcpy(f32, kind == 0 ? buf + pos + nbytes : buf + pos, nf);
        check_record(kind, type, rows, cols, label, raw, f32, nbytes, seen_deq);
        free(f32);
        pos += nbytes + nf;
        if (kind == 0 && strncmp(label, "random", 6) != 0) (*n_real)++;
        if (kind == 1) (*n_quant)++;
    }
    free(buf);
}

static void test_fixture(void) {
    bool seen_deq[AF_TYPE_COUNT] = {false};
    int n_real = 0, n_quant = 0;
    check_fixture_file(FIXTURE, seen_deq, &n_real, &n_quant);
    const uint32_t deq[] = {0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14};
    for (size_t i = 0; i < sizeof deq / sizeof deq[0]; i++)
        CHECK(seen_deq[deq[i]], "fixture has no random %s record", af_type_name(deq[i]));
    CHECK(n_real >= 6, "fixture has %d real-tensor records", n_real);
    CHECK(n_quant >= 7, "fixture has %d quantize records", n_quant);
}

/* Q4_K / Q6_K quantization equals ggml's quantize_row_q4_K_ref / quantize_row_q6_K_ref bit for bit
 * (fixture made by tests/ref/make_kquant_vectors.py with ggml's own library). */
static void test_fixture_kquant(void) {
    bool seen[AF_TYPE_COUNT] = {false};
    int n_real = 0, n_quant = 0;
    check_fixture_file(KQ_FIXTURE, seen, &n_real, &n_quant);
    CHECK(n_quant >= 6, "%s has %d quantize records", KQ_FIXTURE, n_quant);
}

/* ---- round trip ---- */

static float absmax(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Rounding error of storing v as fp16: half an ulp, 2^-11 relative in the normal range and
 * 2^-25 absolute in the subnormal range (|v| < 2^-14). */
static double fp16_err(double v) { return fmax(fabs(v) / 2048.0, ldexp(1.0, -25)); }

/* Largest per-element error allowed for element i of a block x[0..bs) (legacy formats, Q8_K,
 * F16, BF16). e16 = 2^-11 is the relative rounding error of an fp16 value. */
static double legacy_bound(uint32_t type, const float *blk, int bs, int i) {
    const double e16 = 1.0 / 2048.0;
    double lo = blk[0], hi = blk[0];
    for (int j = 1; j < bs; j++) {
        lo = fmin(lo, blk[j]);
        hi = fmax(hi, blk[j]);
    }
    const double amax = absmax(blk, bs), tiny = 1e-6 * amax;
    switch (type) {
    /* q*d with |x/d| <= 127, rounding <= d/2, fp16(d) off by fp16_err(d) times |q| <= 127. */
    case AF_TYPE_Q8_0: return (amax / 127) * 0.5 + 127 * fp16_err(amax / 127) + tiny;
    /* |d| = amax/8: x = -vmax maps to 16 and is clamped to 15 (error |d|); others <= |d|/2. */
    case AF_TYPE_Q4_0: return (amax / 8) + 16 * fp16_err(amax / 8) + tiny;
    case AF_TYPE_Q5_0: return (amax / 16) + 32 * fp16_err(amax / 16) + tiny;
    /* d = (max-min)/(2^b-1): rounding <= d/2, plus fp16 error of d (x q<=15/31) and of m. */
    case AF_TYPE_Q4_1: return ((hi - lo) / 15) * 0.5 + 15 * fp16_err((hi - lo) / 15) + fp16_err(lo) + tiny;
    case AF_TYPE_Q5_1: return ((hi - lo) / 31) * 0.5 + 31 * fp16_err((hi - lo) / 31) + fp16_err(lo) + tiny;
    /* f32 d = amax/127: -vmax maps to exactly +127, rounding <= d/2. */
    case AF_TYPE_Q8_K: return (amax / 127) * 0.5 * (1 + 1e-5) + tiny;
    /* Round to nearest: half an ulp, relative 2^-11 (fp16 normal range; 2^-25 absolute below). */
    case AF_TYPE_F16: return fabs(blk[i]) * e16 + ldexp(1.0, -25);
    case AF_TYPE_BF16: return fabs(blk[i]) * (1.0 / 256);
    case AF_TYPE_F32: return 0;
    default: return -1;
    }
}

static void fill_normal(uint64_t *rng, float *x, int n) {
    /* Mix of scales per 32-block: most N(0,1), some x100, some x1e-3, a few with an outlier. */
    for (int b = 0; b < n / 32; b++) {
        const uint64_t r = tl_rand_u64(rng) % 8;
        const float s = r == 0 ? 100.0f : (r == 1 ? 1e-3f : 1.0f);
        for (int j = 0; j < 32; j++) x[32 * b + j] = s * tl_rand_normal(rng);
        if (r == 2) x[32 * b + (int)(tl_rand_u64(rng) % 32)] *= 8.0f;
    }
}

static void test_roundtrip_legacy(void) {
    enum { N = 8192 };
    static float x[N], y[N];
    static unsigned char q[N * 4];
    const uint32_t types[] = {AF_TYPE_F32, AF_TYPE_F16, AF_TYPE_BF16, AF_TYPE_Q4_0, AF_TYPE_Q4_1,
                              AF_TYPE_Q5_0, AF_TYPE_Q5_1, AF_TYPE_Q8_0, AF_TYPE_Q8_K};
    uint64_t rng = 12345;
    fill_normal(&rng, x, N);
    for (int j = 0; j < 32; j++) x[64 + j] = 0.0f; /* an all-zero block */
    for (int j = 0; j < 32; j++) x[96 + j] = -2.5f; /* a constant block */
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t ty = types[t];
        const int bs = ty == AF_TYPE_Q8_K ? 256 : 32; /* bound evaluated per 32 (or 256) values */
        if (!CHECK(af_quantize_row(ty, x, q, N), "quantize %s", af_type_name(ty))) continue;
        if (ty == AF_TYPE_Q8_K) {
            af_dequantize_row_q8_k(q, y, N);
            /* bsums: sum of each group of 16 quants */
            bool ok = true;
            for (int b = 0; b < N / 256; b++) {
                const unsigned char *blk = q + (size_t)b * 292;
                for (int g = 0; g < 16; g++) {
                    int s = 0;
                    for (int l = 0; l < 16; l++) s += (int8_t)blk[4 + 16 * g + l];
                    int16_t bsum = (int16_t)(blk[260 + 2 * g] | (blk[261 + 2 * g] << 8));
                    if (bsum != s) ok = false;
                }
            }
            CHECK(ok, "Q8_K bsums");
        } else {
            af_dequantize_row(ty, q, y, N);
        }
        double worst_ratio = 0, worst_err = 0;
        int worst_i = 0;
        for (int i = 0; i < N; i++) {
            const int b0 = (i / bs) * bs;
            const double lim = legacy_bound(ty, x + b0, bs, i - b0);
            const double err = fabs((double)y[i] - x[i]);
            const double ratio = lim > 0 ? err / lim : (err > 0 ? INFINITY : 0);
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_err = err;
                worst_i = i;
            }
        }
        CHECK(worst_ratio <= 1.0, "%s round trip: error %.3g at [%d] (x=%.6g y=%.6g) is %.3f x the bound",
              af_type_name(ty), worst_err, worst_i, x[worst_i], y[worst_i], worst_ratio);
        if (getenv("TL_VERBOSE"))
            printf("ok   %s round trip: worst error / bound = %.3f\n", af_type_name(ty), worst_ratio);
        CHECK(ty == AF_TYPE_Q4_1 || ty == AF_TYPE_Q5_1 || (y[64] == 0.0f && y[95] == 0.0f),
              "%s: zero block stays zero", af_type_name(ty));
    }
}

/* K-quants: our simple quantizers. Bounds on N(0,1) rows (relative RMS error = rms(y-x)/rms(x))
 * and on the worst element relative to its 256-block absmax; measured values are printed with
 * TL_VERBOSE=1 and the limits are ~1.3x the measured ones (rel rms / rel max when last measured:
 * Q2_K 0.281/0.302, Q3_K 0.145/0.223, Q4_K 0.070/0.065, Q5_K 0.034/0.032, Q6_K 0.017/0.020). */
static void test_roundtrip_k(void) {
    enum { N = 256 * 32 };
    static float x[N], y[N];
    static unsigned char q[N];
    static const struct { uint32_t type; double rel_rms, rel_max; } lim[] = {
        {AF_TYPE_Q2_K, 0.37, 0.40}, {AF_TYPE_Q3_K, 0.19, 0.29}, {AF_TYPE_Q4_K, 0.09, 0.085},
        {AF_TYPE_Q5_K, 0.044, 0.042}, {AF_TYPE_Q6_K, 0.023, 0.027},
    };
    uint64_t rng = 777;
    for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&rng);
    for (int i = 256; i < 512; i++) x[i] = 0.0f;            /* zero super-block */
    for (int i = 512; i < 768; i++) x[i] *= 1e-3f;          /* small scale */
    for (int i = 768; i < 1024; i++) x[i] = fabsf(x[i]) + 1; /* all positive */
    for (int i = 1024; i < 1280; i++) x[i] = -fabsf(x[i]);  /* all non-positive */
    for (size_t t = 0; t < sizeof lim / sizeof lim[0]; t++) {
        const uint32_t ty = lim[t].type;
        if (!CHECK(af_quantize_row(ty, x, q, N), "quantize %s", af_type_name(ty))) continue;
        af_dequantize_row(ty, q, y, N);
        double se = 0, sx = 0, worst_rel = 0;
        int worst_i = 0;
        bool zero_ok = true;
        for (int b = 0; b < N / 256; b++) {
            const float am = absmax(x + 256 * b, 256);
            for (int i = 256 * b; i < 256 * (b + 1); i++) {
                const double e = (double)y[i] - x[i];
                se += e * e;
                sx += (double)x[i] * x[i];
                const double rel = am > 0 ? fabs(e) / am : fabs(e);
                if (rel > worst_rel) {
                    worst_rel = rel;
                    worst_i = i;
                }
                if (b == 1 && y[i] != 0.0f) zero_ok = false;
            }
        }
        const double rel_rms = sqrt(se / sx);
        CHECK(rel_rms <= lim[t].rel_rms, "%s round trip: relative rms error %.4f > %.3f", af_type_name(ty),
              rel_rms, lim[t].rel_rms);
        CHECK(worst_rel <= lim[t].rel_max, "%s round trip: worst error %.4f of block absmax at [%d] > %.3f",
              af_type_name(ty), worst_rel, worst_i, lim[t].rel_max);
        CHECK(zero_ok, "%s: zero super-block stays zero", af_type_name(ty));
        if (getenv("TL_VERBOSE"))
            printf("ok   %s round trip: rel rms %.4f, worst/absmax %.4f\n", af_type_name(ty), rel_rms, worst_rel);
    }
}

int main(void) {
    test_geometry();
    test_fixture();
    test_fixture_kquant();
    test_roundtrip_legacy();
    test_roundtrip_k();
    return tl_finish("test_quant");
}
