/*
 * nf4.h — NormalFloat4 (NF4), the 4-bit data type of QLoRA (Dettmers et al. 2023, "QLoRA:
 * Efficient Finetuning of Quantized LLMs", §3 "4-bit NormalFloat Quantization"), stored as
 * afinar's internal block type AF_TYPE_NF4 (core/blocks.h), for frozen base weights quantized
 * at load (af_model_requantize, --quantize nf4).
 *
 * Block of AF_QK_NF4 = 64 values, 36 bytes (4.5 bits per value), little-endian:
 *     f32 absmax;  u8 qs[32];   qs[i] = (code(x[2i]) << 4) | code(x[2i+1])
 * i.e. the first of each pair in the HIGH nibble, as bitsandbytes packs them. Value:
 *     y[e] = af_nf4_code[q[e]] * absmax      (one f32 product)
 * Quantization (bitsandbytes 0.50 quantize_4bit, the torch kernel of its CPU backend):
 *     absmax = max |x| over the block;  s = clamp(x * (1 / max(absmax, 1e-38)), -1, 1)  (f32)
 *     q = number of midpoints m[k] = (code[k] + code[k+1]) / 2 with m[k] < s
 *         (torch.bucketize, right=False: a value exactly on a midpoint takes the LOWER code).
 * Codes and scales are bit-identical to bitsandbytes (tests/test_nf4.c against
 * tests/fixtures/nf4_ref.bin, made by tests/ref/make_nf4_ref.py). Double quantization of the
 * scales (QLoRA §3 "Double Quantization") is not implemented: absmax stays f32.
 */
#ifndef AF_KERNELS_NF4_H
#define AF_KERNELS_NF4_H

#include <stdint.h>

/* The 16 NF4 values, ascending (bitsandbytes.functional.get_4bit_type("nf4"), as f32). */
extern const float af_nf4_code[16];

/* Quantize n floats (n % 64 == 0) to n / 64 NF4 blocks at dst. */
void af_nf4_quantize_row(const float *src, void *dst, int64_t n);
/* Dequantize n / 64 NF4 blocks to n floats (n % 64 == 0). */
void af_nf4_dequantize_row(const void *src, float *dst, int64_t n);

#endif /* AF_KERNELS_NF4_H */
