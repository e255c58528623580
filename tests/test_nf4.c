/*
 * test_nf4.c — NF4 blocks (kernels/nf4.h) against bitsandbytes, bit for bit.
 *
 * tests/fixtures/nf4_ref.bin (tests/ref/make_nf4_ref.py, bitsandbytes 0.50.2 on CPU) holds
 * inputs, bitsandbytes' packed 4-bit codes, its per-block absmax and its dequantization. Checks:
 *  - af_nf4_code equals bitsandbytes' get_4bit_type("nf4") bit for bit;
 *  - af_quantize_row(AF_TYPE_NF4): every code byte and every absmax identical (the fixture has
 *    values exactly on the midpoints between codes, their neighbours, an all-zero block, a block
 *    with one negative nonzero, tiny and huge magnitudes);
 *  - af_dequantize_row and the kernels' ops.dequant on each kernel path (scalar / AVX2 / AVX-512):
 *    identical f32 to bitsandbytes' dequantize_4bit.
 * Matmul products on NF4 weights are in test_matmul (as for the GGUF block types), LoRA training
 * and finite differences through NF4 weights in test_engine.
 */
#include "testlib.h"

#include "afinar.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ctx.h"
#include "kernels/nf4.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/nf4_ref.bin"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int same_bits(const float *a, const float *b, size_t n, size_t *bad) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4) != 0) {
            *bad = i;
            return 0;
        }
    return 1;
}

static void test_geometry(void) {
    CHECK(af_type_block_size(AF_TYPE_NF4) == 64 && af_type_block_bytes(AF_TYPE_NF4) == 36,
          "NF4 geometry 64 values / 36 bytes");
    CHECK(af_row_bytes(AF_TYPE_NF4, 192) == 108 && af_row_bytes(AF_TYPE_NF4, 100) == 0, "NF4 row bytes");
    CHECK(!strcmp(af_type_name(AF_TYPE_NF4), "NF4") && af_type_can_dequantize(AF_TYPE_NF4), "NF4 name");
    float x[64] = {0};
    unsigned char b[36];
    CHECK(!af_quantize_row(AF_TYPE_NF4, x, b, 32), "a row that is not a whole number of blocks is refused");
}

static void test_fixture(void) {
    size_t len = 0;
    unsigned char *buf = (unsigned char *)tl_read_file(FIXTURE, &len);
    if (!CHECK(buf != NULL, "%s is missing (run tests/ref/make_nf4_ref.py)", FIXTURE)) return;
    if (!CHECK(len >= 16 && !memcmp(buf, "AFN4", 4) && rd32(buf + 4) == 1, "%s: bad header", FIXTURE)) goto done;
    const uint32_t rows = rd32(buf + 8), cols = rd32(buf + 12);
    const size_t n = (size_t)rows * cols, nb = n / 64;
    if (!CHECK(cols % 64 == 0 && len == 16 + 64 + 4 * n + n / 2 + 4 * nb + 4 * n, "%s: size %zu", FIXTURE, len))
        goto done;
    const unsigned char *p = buf + 16;
    float code[16], *x = malloc(4 * n), *absmax = malloc(4 * nb), *deq = malloc(4 * n);
    memcpy(code, p, 64);
    p += 64;
    memcpy(x, p, 4 * n);
    p += 4 * n;
    const unsigned char *packed = p;
    p += n / 2;
    memcpy(absmax, p, 4 * nb);
    p += 4 * nb;
    memcpy(deq, p, 4 * n);
    size_t bad = 0;
    int ok = same_bits(code, af_nf4_code, 16, &bad); /* before CHECK reads `bad` (argument order) */
    CHECK(ok, "NF4 code table differs from bitsandbytes at %zu", bad);

    /* quantize: our rows of blocks [absmax f32][32 code bytes] vs bitsandbytes' flat codes + absmax */
    const size_t rb = af_row_bytes(AF_TYPE_NF4, cols);
    unsigned char *q = malloc(rb * rows);
    for (uint32_t r = 0; r < rows; r++) af_quantize_row(AF_TYPE_NF4, x + (size_t)r * cols, q + r * rb, cols);
    size_t code_bad = 0, scale_bad = 0, first = (size_t)-1;
    for (size_t blk = 0; blk < nb; blk++) {
        const unsigned char *ours = q + blk * 36;
        if (memcmp(ours, absmax + blk, 4)) scale_bad++;
        for (int j = 0; j < 32; j++)
            if (ours[4 + j] != packed[blk * 32 + j]) {
                if (first == (size_t)-1) first = blk * 64 + 2 * (size_t)j;
                code_bad++;
            }
    }
    CHECK(code_bad == 0, "NF4 codes: %zu of %zu bytes differ from bitsandbytes (first near element %zu)", code_bad,
          n / 2, first);
    CHECK(scale_bad == 0, "NF4 absmax: %zu of %zu blocks differ from bitsandbytes", scale_bad, nb);
    printf("NF4 quantize vs bitsandbytes: %zu code bytes, %zu absmax: %zu + %zu differ\n", n / 2, nb, code_bad,
           scale_bad);

    /* dequantize: reference row function and every kernel path's ops.dequant */
    float *y = malloc(4 * n);
    for (uint32_t r = 0; r < rows; r++) af_dequantize_row(AF_TYPE_NF4, q + r * rb, y + (size_t)r * cols, cols);
    ok = same_bits(y, deq, n, &bad);
    CHECK(ok, "af_dequantize_row(NF4) differs from bitsandbytes at %zu: %g vs %g", bad,
          y[bad], deq[bad]);
    static const char *paths[] = {"scalar", "avx2", "avx512"};
    for (int pi = 0; pi < 3; pi++) {
        af_ctx_params cp;
        af_ctx_params_default(&cp);
        cp.kernel_path = paths[pi];
        cp.n_threads = 1;
        af_ctx *ctx = NULL;
        if (af_ctx_new(&cp, &ctx) != AF_OK) {
            tl_skip("kernel path %s not available on this CPU", paths[pi]);
            continue;
        }
        for (size_t i = 0; i < n; i++) y[i] = -12345.f;
        /* all rows, columns from 64 (a k0 offset inside the row) and from 0 */
        ctx->k->mm->dequant(AF_TYPE_NF4, q, (int64_t)rb, 0, rows, 0, 64, y, cols);
        ctx->k->mm->dequant(AF_TYPE_NF4, q, (int64_t)rb, 0, rows, 64, cols - 64, y + 64, cols);
        ok = same_bits(y, deq, n, &bad);
        CHECK(ok, "%s ops.dequant(NF4) differs from bitsandbytes at %zu: %g vs %g",
              paths[pi], bad, y[bad], deq[bad]);
        af_ctx_free(ctx);
    }
    free(y);
    free(q);
    free(x);
    free(absmax);
    free(deq);
done:
    free(buf);
}

int main(void) {
    test_geometry();
    test_fixture();
    return tl_finish("test_nf4");
}
