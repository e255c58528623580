/*
 * blocks.h — geometry of the ggml tensor types: type ids, elements and bytes per block, bytes per
 * row, names. Below both the file formats (GGUF tensor sizes) and the kernels (dequantization,
 * kernels/quant.h), which is why it lives in core.
 *
 * Ids and sizes: ggml ggml.c type_traits and src/ggml-common.h (block structs), summarised in
 * docs/FORMATS.md §1.4 and §2. A row of `n` elements of type T is n / block_size(T)
 * consecutive blocks of block_bytes(T) bytes.
 */
#ifndef AF_BLOCKS_H
#define AF_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#define AF_QK 32    /* elements per block of the legacy formats Q4_0 .. Q8_1 (and MXFP4) */
#define AF_QK_K 256 /* elements per super-block of the K-quants */

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
    AF_TYPE_COUNT = 43, /* ids below this are known to ggml; sizes unknown to us return 0 */
    /* afinar-internal (not a ggml id: never read from or written to a GGUF file): the QLoRA
     * paper's NormalFloat4, blocks of AF_QK_NF4 with an f32 absmax (kernels/nf4.h,
     * docs/FORMATS.md §2 NF4). Made only by af_model_requantize at load (--quantize nf4). */
    AF_TYPE_NF4 = 0x10000,
} af_type;

#define AF_QK_NF4 64 /* elements per NF4 block (bitsandbytes' blocksize=64) */

/* Elements per block (1 for plain types); 0 when the id is unknown or has no fixed geometry
 * that afinar knows (e.g. IQ* types). */
size_t af_type_block_size(uint32_t type);
/* Bytes per block; 0 when unknown. */
size_t af_type_block_bytes(uint32_t type);
/* "F32", "Q4_K", ...; "unknown" for unknown ids. */
const char *af_type_name(uint32_t type);
/* Bytes of one row of n elements; 0 if n is not a multiple of the block size or type unknown. */
size_t af_row_bytes(uint32_t type, int64_t n);

#endif /* AF_BLOCKS_H */
