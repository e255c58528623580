/*
 * quant.h — ggml tensor types: block geometry and dequantization to float32.
 *
 * Block layouts and formulas: ggml src/ggml-common.h and src/ggml-quants.c
 * (dequantize_row_*), summarised in shared/reference/FORMATS.md §2.
 * A row of `n` elements of type T is n / block_size(T) consecutive blocks.
 */
#ifndef AF_QUANT_H
#define AF_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum af_type {
    AF_TYPE_F32 = 0,
    AF_TYPE_F16 = 1,
    AF_TYPE_Q4_0 = 2,
    AF_TYPE_Q4_1 = 3,
    AF_TYPE_Q5_0 = 6,
    AF_TYPE_Q5_1 = 7,
    AF_TYPE_Q8_0 = 8,
    AF_TYPE_Q8_1 = 9,
    AF_TYPE_Q2_K = 10,
    AF_TYPE_Q3_K = 11,
    AF_TYPE_Q4_K = 12,
    AF_TYPE_Q5_K = 13,
    AF_TYPE_Q6_K = 14,
    AF_TYPE_Q8_K = 15,
    AF_TYPE_I8 = 24,
    AF_TYPE_I16 = 25,
    AF_TYPE_I32 = 26,
    AF_TYPE_I64 = 27,
    AF_TYPE_F64 = 28,
    AF_TYPE_BF16 = 30,
    AF_TYPE_COUNT = 43 /* ids below this are known to ggml; sizes unknown to us return 0 */
} af_type;

/* Elements per block (1 for plain types); 0 when the id is unknown or has no fixed geometry
 * that afinar knows (e.g. IQ* types). */
size_t af_type_block_size(uint32_t type);
/* Bytes per block; 0 when unknown. */
size_t af_type_block_bytes(uint32_t type);
/* "F32", "Q4_K", ...; "unknown" for unknown ids. */
const char *af_type_name(uint32_t type);
/* True when af_dequantize_row() and the matmul kernels support this type as weights:
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. */
bool af_type_can_dequantize(uint32_t type);
/* Bytes of one row of n elements; 0 if n is not a multiple of the block size or type unknown. */
size_t af_row_bytes(uint32_t type, int64_t n);

/* Dequantize one row: `src` holds n / block_size blocks of `type`; writes n floats to `dst`.
 * Precondition: af_type_can_dequantize(type) and n % block_size == 0 (asserted by callers). */
void af_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantize a row of f32 to `type` (reference, round-to-nearest as ggml's quantize_row_*_ref).
 * Used by tests to build models and by the activation side of integer dot products.
 * Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K, Q2_K..Q6_K.
 * Returns false for unsupported types. */
bool af_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* Dequantize a row of Q8_K blocks (activation-side format, not a weight type, so not handled by
 * af_dequantize_row): y = d * qs per block. n must be a multiple of 256. Used by tests. */
void af_dequantize_row_q8_k(const void *src, float *dst, int64_t n);

#endif /* AF_QUANT_H */
