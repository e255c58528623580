/*
 * test_gemm_amx.c — the AMX tile kernels of the bf16 packed GEMM (src/kernels/cpu/gemm_amx.c) on CPUs
 * that have AMX-BF16 and whose kernel grants the tile data (af_cpu()->amx_ready; skipped elsewhere):
 *  - af_gp_amx_pack_a: rows of A as bf16 pairs (round to nearest even), zero pairs and rows past the
 *    data, for depths that are and are not multiples of 32; af_gp_amx_pack_at the same from A stored
 *    by columns (the gradient products' transposed operand), partial blocks of 16 rows and pairs;
 *  - af_gp_amx_ukernel: C (+)= A·B for blocks of 1..32 rows and 1..32 columns and depths of 16..200
 *    pairs (a tail of fewer than 16 pairs included) against a scalar sum of the same bf16 products
 *    in double, within k 2^-23 sum |a'b'| (f32 accumulation), accumulate on and off; nothing outside
 *    the mr x nr block is written;
 *  - af_i8_amx_ukernel (AMX-INT8, the int8 products) gives bitwise the C of the VPDPBUSD micro-kernel;
 *  - the table in use takes them (the bf16 products of tests/test_matmul.c then run on AMX too).
 */
#include "testlib.h"
#include "kernels/ctx.h"

#include "core/core.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0xa11ce5eedull;

static uint16_t bf16_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static double bf16_val(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_pack(void) {
    const int64_t mc = 37, kc = 70, sat = 80, lda = 48; /* 35 pairs: two tiles of 16 + 3 */
    float *a = malloc(sizeof(float) * (size_t)(mc * sat));
    uint32_t *d = malloc(sizeof(uint32_t) * (size_t)(64 * lda));
    for (int64_t i = 0; i < mc * sat; i++) a[i] = tl_rand_normal(&g_rng);
    memset(d, 0xAB, sizeof(uint32_t) * (size_t)(64 * lda));
    af_gp_amx_pack_a(a, sat, 6, kc, mc, d, lda);
    int bad = 0;
    for (int64_t i = 0; i < 64; i++)
        for (int64_t q = 0; q < lda; q++) {
            uint32_t want = 0;
            if (i < mc && q < kc / 2)
                want = bf16_bits(a[i * sat + 6 + 2 * q]) | (uint32_t)bf16_bits(a[i * sat + 7 + 2 * q]) << 16;
            bad += d[i * lda + q] != want;
        }
    CHECK(bad == 0, "amx_pack_a: 37 rows x 35 pairs, zero padding to 64 rows x 48 pairs (%d wrong)", bad);
    free(a);
    free(d);
}

/* af_gp_amx_pack_at: A stored by columns, A(i, k) = a[i + k·sak], from column k0 = 6: mc rows x kc
 * depth into rows of pairs, against the scalar packing; mc = 37 (16 + 16 + 5: a partial row block),
 * 8 and 32, kc = 70 (a partial block of 16 pairs) and 32. */
static void test_pack_at(int64_t mc, int64_t kc) {
    const int64_t sak = 45, k0 = 6, lda = (kc / 2 + 15) / 16 * 16, rows = (mc + 31) / 32 * 32;
    float *a = malloc(sizeof(float) * (size_t)((k0 + kc) * sak));
    uint32_t *d = malloc(sizeof(uint32_t) * (size_t)(rows * lda));
    for (int64_t i = 0; i < (k0 + kc) * sak; i++) a[i] = tl_rand_normal(&g_rng);
    memset(d, 0xAB, sizeof(uint32_t) * (size_t)(rows * lda));
    af_gp_amx_pack_at(a, sak, k0, kc, mc, d, lda);
    int bad = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t q = 0; q < lda; q++) {
            uint32_t want = 0;
            if (i < mc && q < kc / 2)
                want = bf16_bits(a[i + (k0 + 2 * q) * sak]) | (uint32_t)bf16_bits(a[i + (k0 + 2 * q + 1) * sak]) << 16;
            bad += d[i * lda + q] != want;
        }
    CHECK(bad == 0, "amx_pack_at: %lld rows x %lld pairs, zero padding to %lld rows x %lld pairs (%d wrong)",
          (long long)mc, (long long)(kc / 2), (long long)rows, (long long)lda, bad);
    free(a);
    free(d);
}

static void ukernel_case(int mr, int nr, int64_t kp, int accumulate) {
    const int64_t lda = (kp + 15) / 16 * 16, ldc = 40;
    uint32_t *ap = calloc((size_t)(32 * lda), sizeof(uint32_t));
    uint32_t *bp = aligned_alloc(64, (size_t)((kp * 32 * 4 + 63) / 64 * 64));
    float *c = malloc(sizeof(float) * 34 * ldc);
    double *ref = malloc(sizeof(double) * 32 * 32), *tol = malloc(sizeof(double) * 32 * 32);
    for (int i = 0; i < mr; i++)
        for (int64_t q = 0; q < kp; q++)
            ap[i * lda + q] = bf16_bits(tl_rand_normal(&g_rng)) | (uint32_t)bf16_bits(tl_rand_normal(&g_rng)) << 16;
    for (int64_t q = 0; q < kp; q++)
        for (int j = 0; j < 32; j++)
            bp[q * 32 + j] = bf16_bits(tl_rand_normal(&g_rng)) | (uint32_t)bf16_bits(tl_rand_normal(&g_rng)) << 16;
    for (int i = 0; i < 34 * ldc; i++) c[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            double s = accumulate ? c[i * ldc + j] : 0.0, ab = fabs(s);
            for (int64_t q = 0; q < kp; q++)
                for (int h = 0; h < 2; h++) {
                    double p = bf16_val((uint16_t)(ap[i * lda + q] >> (16 * h))) *
                               bf16_val((uint16_t)(bp[q * 32 + j] >> (16 * h)));
                    s += p;
                    ab += fabs(p);
                }
            ref[i * 32 + j] = s;
            tol[i * 32 + j] = (double)(2 * kp + 1) * ldexp(1, -23) * ab + 1e-30;
        }
    float *c0 = malloc(sizeof(float) * 34 * ldc);
    memcpy(c0, c, sizeof(float) * 34 * ldc);
    /* one configuration state across all cases, as a job's calls share it: each case's depth either
     * reuses the tiles' configuration or reloads it */
    static int tilecfg = 0;
    af_gp_amx_ukernel(mr, kp, ap, lda, bp, c, ldc, nr, accumulate, &tilecfg);
    double worst = 0;
    int outside = 0;
    for (int i = 0; i < 34; i++)
        for (int j = 0; j < ldc; j++) {
            if (i < mr && j < nr) {
                double r = fabs(c[i * ldc + j] - ref[i * 32 + j]) / tol[i * 32 + j];
                if (!(r <= worst)) worst = r;
            } else
                outside += c[i * ldc + j] != c0[i * ldc + j];
        }
    CHECK(worst <= 1 && outside == 0, "amx_ukernel mr=%d nr=%d kp=%lld acc=%d: within k 2^-23 sum|ab| (worst %.3g), "
          "%d written outside", mr, nr, (long long)kp, accumulate, worst, outside);
    free(ap); free(bp); free(c); free(c0); free(ref); free(tol);
}

/* af_i8_amx_ukernel against the AVX512-VNNI micro-kernel of the int8 products (gemm_int8_avx512.c) on the
 * same operands: s8 A (rows for the tiles, [kq][8] micro-panels of 8 rows for VPDPBUSD), u8 B panels,
 * row sums, scales; C must be the same bits (exact integer sums, the same scaling). */
static void i8_case(int mr, int nr, int64_t kq, int accumulate) {
    const af_gp_i8_ops *vn = &af_gp_i8_ops_avx512;
    const int64_t lda = (kq + 15) / 16 * 16, ldc = 35, gs = 3 * 8; /* 3 chunks per row group, chunk 1 used */
    uint32_t *ap = calloc((size_t)(32 * lda), 4), *ap8 = calloc((size_t)(4 * kq * 8), 4);
    uint32_t *bp = aligned_alloc(64, (size_t)((kq * 32 * 4 + 63) / 64 * 64));
    int32_t comp[4 * 24];
    float sa[4 * 24], sb[32];
    float *c1 = malloc(sizeof(float) * 32 * ldc), *c2 = malloc(sizeof(float) * 32 * ldc);
    for (int i = 0; i < mr; i++)
        for (int64_t q = 0; q < kq; q++) {
            uint32_t v = 0;
            for (int b = 0; b < 4; b++) v |= (uint32_t)(uint8_t)(int8_t)((int)(tl_rand_u64(&g_rng) % 255) - 127) << (8 * b);
            ap[i * lda + q] = v;
            ap8[((i / 8) * kq + q) * 8 + i % 8] = v;
        }
    for (int64_t q = 0; q < kq * 32; q++) bp[q] = (uint32_t)tl_rand_u64(&g_rng);
    for (int i = 0; i < 4 * 24; i++) comp[i] = (int)(tl_rand_u64(&g_rng) % 100000) - 50000, sa[i] = tl_rand_normal(&g_rng);
    for (int j = 0; j < 32; j++) sb[j] = tl_rand_normal(&g_rng);
    for (int i = 0; i < 32 * ldc; i++) c1[i] = c2[i] = tl_rand_normal(&g_rng);
    for (int g = 0; g * 8 < mr; g++)
        vn->ukernel(mr - 8 * g < 8 ? mr - 8 * g : 8, kq, ap8 + g * kq * 8, bp, comp + g * gs + 8, sa + g * gs + 8, sb,
                    c1 + 8 * g * ldc, ldc, nr, accumulate);
    static int tilecfg = 0;
    af_i8_amx_ukernel(mr, kq, ap, lda, bp, comp + 8, sa + 8, gs, sb, c2, ldc, nr, accumulate, &tilecfg);
    CHECK(!memcmp(c1, c2, sizeof(float) * 32 * ldc), "i8 amx_ukernel mr=%d nr=%d kq=%lld acc=%d: bitwise the VPDPBUSD kernel's C",
          mr, nr, (long long)kq, accumulate);
    free(ap); free(ap8); free(bp); free(c1); free(c2);
}

int main(void) {
    if (!af_cpu()->amx_ready) {
        tl_skip("AMX: this CPU has no AMX-BF16 or the kernel did not grant the tile data");
        return tl_finish("test_gemm_amx");
    }
    if (tl_ctx_set("avx512", -1, "bf16", -1) != AF_OK) {
        tl_skip("bf16 products: %s", af_last_error());
        return tl_finish("test_gemm_amx");
    }
    CHECK(T_CTX->k->gp_bf16 && T_CTX->k->gp_bf16->amx_ukernel, "the avx512 table of this CPU has the AMX kernels");
    test_pack();
    test_pack_at(37, 70);
    test_pack_at(8, 32);
    test_pack_at(32, 70);
    const int shapes[][2] = {{32, 32}, {1, 1}, {17, 32}, {32, 5}, {31, 31}, {16, 16}};
    const int64_t depths[] = {16, 128, 35, 7, 200, 256};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++)
            for (int acc = 0; acc < 2; acc++) ukernel_case(shapes[s][0], shapes[s][1], depths[d], acc);
    const int64_t quads[] = {64, 16, 7, 40};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < sizeof quads / sizeof quads[0]; d++)
            for (int acc = 0; acc < 2; acc++) i8_case(shapes[s][0], shapes[s][1], quads[d], acc);
    return tl_finish("test_gemm_amx");
}
