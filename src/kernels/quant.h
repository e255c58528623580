/*
 * quant.h — ggml tensor types: dequantization to float32 and reference quantization. The block
 * geometry (af_type, block sizes, row bytes, names) is core/blocks.h, included here.
 *
 * Block layouts and formulas: ggml src/ggml-common.h and src/ggml-quants.c
 * (dequantize_row_*), summarised in docs/FORMATS.md §2.
 * A row of `n` elements of type T is n / block_size(T) consecutive blocks.
 */
#ifndef AF_QUANT_H
#define AF_QUANT_H

#include "core/blocks.h"
#include "core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when af_dequantize_row() and the matmul kernels support this type as weights:
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and NF4 (kernels/nf4.h). */
bool af_type_can_dequantize(uint32_t type);
/* Dequantize one row: `src` holds n / block_size blocks of `type`; writes n floats to `dst`.
 * Precondition: af_type_can_dequantize(type) and n % block_size == 0 (asserted by callers). */
void af_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantize a row of f32 to `type`. Used by tests to build models, by the activation side of
 * integer dot products and by af_merge_adapter (re-quantization of merged tensors).
 * Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K, Q2_K..Q6_K, NF4 (bitsandbytes' rule,
 * kernels/nf4.h).
 * Bit for bit ggml's quantize_row_*_ref (no importance matrix) for F16, BF16, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0 (tested against gguf-py) and Q4_K, Q6_K (tested against ggml's own library,
 * tests/ref/make_kquant_vectors.py). Q2_K, Q3_K, Q5_K use simpler round-to-nearest searches of
 * their own: valid blocks, not ggml's bytes.
 * Returns false for unsupported types. */
bool af_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* The output types of `afinar merge --type` and `afinar convert --type` (those whose quantizer is
 * ggml's reference one): "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
 * "q6_k" (any case), or "keep" / NULL -> AF_TYPE_KEEP (each tensor keeps its stored type).
 * Errors: AF_ERR_INVALID_ARG naming the unknown type and listing these. */
#define AF_TYPE_KEEP UINT32_MAX
af_status af_quant_type_parse(const char *name, uint32_t *out);

/* Dequantize a row of Q8_K blocks (activation-side format, not a weight type, so not handled by
 * af_dequantize_row): y = d * qs per block. n must be a multiple of 256. Used by tests. */
void af_dequantize_row_q8_k(const void *src, float *dst, int64_t n);

#endif /* AF_QUANT_H */
