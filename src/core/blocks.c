/*
 * blocks.c — geometry of the ggml tensor types (see blocks.h): elements and bytes per block,
 * names. Ids, names and sizes as in ggml.c type_traits, summarised in docs/FORMATS.md
 * §1.4 and §2.
 */
#include "core/blocks.h"

#include "core/core.h"

/* Type table (docs/FORMATS.md §1.4; ids and sizes as in ggml.c type_traits). */
typedef struct type_info {
    const char *name;
    uint16_t block_size; /* 0: geometry not known to afinar */
    uint16_t block_bytes;
} type_info;

static const type_info k_types[AF_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", AF_QK, 18},
    [3] = {"Q4_1", AF_QK, 20},
    [4] = {"Q4_2", 0, 0}, /* removed from ggml */
    [5] = {"Q4_3", 0, 0}, /* removed from ggml */
    [6] = {"Q5_0", AF_QK, 22},
    [7] = {"Q5_1", AF_QK, 24},
    [8] = {"Q8_0", AF_QK, 34},
    [9] = {"Q8_1", AF_QK, 36}, /* fp16 d, fp16 s, 32 x int8 (gguf-py's table still says 40: stale) */
    [10] = {"Q2_K", AF_QK_K, 84},
    [11] = {"Q3_K", AF_QK_K, 110},
    [12] = {"Q4_K", AF_QK_K, 144},
    [13] = {"Q5_K", AF_QK_K, 176},
    [14] = {"Q6_K", AF_QK_K, 210},
    [15] = {"Q8_K", AF_QK_K, 292},
    [16] = {"IQ2_XXS", 0, 0},
    [17] = {"IQ2_XS", 0, 0},
    [18] = {"IQ3_XXS", 0, 0},
    [19] = {"IQ1_S", 0, 0},
    [20] = {"IQ4_NL", 0, 0},
    [21] = {"IQ3_S", 0, 0},
    [22] = {"IQ2_S", 0, 0},
    [23] = {"IQ4_XS", 0, 0},
    [24] = {"I8", 1, 1},
    [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 0, 0},
    [30] = {"BF16", 1, 2},
    [31] = {"Q4_0_4_4", 0, 0}, /* removed from ggml */
    [32] = {"Q4_0_4_8", 0, 0}, /* removed from ggml */
    [33] = {"Q4_0_8_8", 0, 0}, /* removed from ggml */
    [34] = {"TQ1_0", AF_QK_K, 54},
    [35] = {"TQ2_0", AF_QK_K, 66},
    [36] = {"IQ4_NL_4_4", 0, 0}, /* removed from ggml */
    [37] = {"IQ4_NL_4_8", 0, 0}, /* removed from ggml */
    [38] = {"IQ4_NL_8_8", 0, 0}, /* removed from ggml */
    [39] = {"MXFP4", AF_QK, 17},
    [40] = {"NVFP4", 0, 0},
    [41] = {"Q1_0", 0, 0},
    [42] = {"Q2_0", 0, 0},
};

/* NF4 (afinar-internal id, blocks.h): f32 absmax + 32 bytes of 4-bit codes per 64 values. */
size_t af_type_block_size(uint32_t type) {
    if (type == AF_TYPE_NF4) return AF_QK_NF4;
    return type < AF_TYPE_COUNT ? k_types[type].block_size : 0;
}

size_t af_type_block_bytes(uint32_t type) {
    if (type == AF_TYPE_NF4) return 4 + AF_QK_NF4 / 2;
    return type < AF_TYPE_COUNT ? k_types[type].block_bytes : 0;
}

const char *af_type_name(uint32_t type) {
    if (type == AF_TYPE_NF4) return "NF4";
    if (type < AF_TYPE_COUNT && k_types[type].name) return k_types[type].name;
    return "unknown";
}

size_t af_row_bytes(uint32_t type, int64_t n) {
    size_t bs = af_type_block_size(type), bb = af_type_block_bytes(type);
    if (bs == 0 || n < 0 || (uint64_t)n % bs != 0) return 0;
    size_t out;
    if (!af_mul_ok((size_t)((uint64_t)n / bs), bb, &out)) return 0;
    return out;
}
