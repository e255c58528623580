/*
 * gguf.h — GGUF container reader (versions 2 and 3), memory-mapped.
 *
 * Format: ggml docs/gguf.md (see docs/FORMATS.md §1). Everything is little-endian.
 * On open, the whole header (metadata KVs incl. nested arrays, tensor infos) is parsed and every
 * count, length, offset and size is bounds-checked against the file size before use; after a
 * successful open, every accessor below is safe (no further validation needed by callers).
 * Memory used by parsing is bounded by a small multiple of the file's header size.
 */
#ifndef AF_GGUF_H
#define AF_GGUF_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

/* Deepest array nesting accepted on open (1 = a plain array value; 2 = an array of arrays). */
#define AF_GGUF_MAX_DEPTH 8

typedef enum af_gguf_vtype {
    AF_GGUF_UINT8 = 0,
    AF_GGUF_INT8 = 1,
    AF_GGUF_UINT16 = 2,
    AF_GGUF_INT16 = 3,
    AF_GGUF_UINT32 = 4,
    AF_GGUF_INT32 = 5,
    AF_GGUF_FLOAT32 = 6,
    AF_GGUF_BOOL = 7,
    AF_GGUF_STRING = 8,
    AF_GGUF_ARRAY = 9,
    AF_GGUF_UINT64 = 10,
    AF_GGUF_INT64 = 11,
    AF_GGUF_FLOAT64 = 12,
    AF_GGUF_VTYPE_COUNT = 13
} af_gguf_vtype;

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct af_gguf_str {
    const char *ptr;
    uint64_t len;
} af_gguf_str;

/* A metadata value. For arrays: `arr_type` is the element type, `arr_n` the element count and
 * `arr_data` points at the first element inside the mapping. For arrays of strings,
 * `str_offsets[i]` (allocated by the reader) is the byte offset of element i's u64 length
 * prefix relative to arr_data, so element access is O(1). Nested arrays are validated on open
 * and accessed with af_gguf_arr_sub(). */
typedef struct af_gguf_value {
    af_gguf_vtype type;
    union {
        uint64_t u64; /* UINT8/16/32/64, BOOL (0/1) */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        af_gguf_str str;
    } v;
    af_gguf_vtype arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;
    uint64_t arr_bytes;    /* total bytes of the elements */
    uint64_t *str_offsets; /* owned by the reader; only for arrays of strings (else NULL) */
} af_gguf_value;

typedef struct af_gguf_kv {
    af_gguf_str key;
    af_gguf_value val;
} af_gguf_kv;

typedef struct af_gguf_tensor {
    char name[64];     /* NUL-terminated (GGUF limit: < 64 bytes) */
    uint32_t n_dims;   /* 1..4 */
    int64_t ne[4];     /* ne[0] = contiguous (fastest) dimension; missing dims are 1 */
    uint32_t type;     /* ggml type id (af_type in kernels/quant.h) */
    uint64_t offset;   /* relative to the data section */
    uint64_t nbytes;   /* row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] */
    const void *data;  /* inside the mapping */
} af_gguf_tensor;

typedef struct af_gguf {
    char *path;                /* owned copy, for messages */
    const uint8_t *base;       /* mapping */
    uint64_t size;             /* file size */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    af_gguf_kv *kv;            /* [n_kv], owned */
    uint64_t n_tensors;
    af_gguf_tensor *tensors;   /* [n_tensors], owned */
    uint64_t data_offset;      /* start of the tensor data section in the file */
    int fd;                    /* -1: the descriptor is closed once the file is mapped */
} af_gguf;
/* An af_gguf is only ever created by af_gguf_open() (the reader keeps private lookup tables
 * behind it); never build one by hand. */

/* Open and fully validate a GGUF file. `*out` receives a new reader; free with af_gguf_close().
 * The file is mapped read-only (MAP_PRIVATE) and its descriptor closed (fd is -1); every
 * pointer into the file (strings, arrays, tensor data) is borrowed: valid until af_gguf_close().
 * Checks: magic "GGUF"; version 2 or 3 (1, >3 and byte-swapped versions are refused); counts
 * plausible for the bytes left (each KV needs >= 14 bytes, each tensor info >= 33) before any
 * allocation; every value type incl. arrays nested up to AF_GGUF_MAX_DEPTH; bools 0/1; keys
 * non-empty and <= 65535 bytes, unique; general.alignment (u32, power of two, default 32);
 * tensor names 1..63 bytes, unique; n_dims 1..4; dims >= 1 without overflow; type known to
 * af_type_block_size(); ne[0] % block size == 0; offset % alignment == 0; data inside the file.
 * The data section starts at align_up(end of the tensor infos, alignment).
 * A reader (after open) is read-only and may be shared between threads.
 * Errors (message names the file, the field and the byte offset):
 *  AF_ERR_IO (cannot open/stat/map), AF_ERR_FORMAT (bad magic, version, truncation, counts or
 *  offsets past the end, duplicate keys/tensors, bad string lengths, invalid bool, alignment not a
 *  power of two, tensor data out of bounds, ne[0] not a multiple of the block size),
 *  AF_ERR_UNSUPPORTED (unknown tensor type id), AF_ERR_NOMEM. */
af_status af_gguf_open(const char *path, af_gguf **out);
void af_gguf_close(af_gguf *g);

/* Lookup by key (hashed, O(1)); NULL when absent. Borrowed: valid until af_gguf_close(). */
const af_gguf_value *af_gguf_find(const af_gguf *g, const char *key);
/* Lookup tensor by name (hashed, O(1)); NULL when absent. Borrowed like af_gguf_find(). */
const af_gguf_tensor *af_gguf_find_tensor(const af_gguf *g, const char *name);

/* Typed getters. Integers accept any integer type (and bool) whose value fits; floats accept
 * FLOAT32/FLOAT64 and integer types. Return AF_ERR_NOT_FOUND when absent (message names the key),
 * AF_ERR_FORMAT when present with an incompatible type or out-of-range value. */
af_status af_gguf_get_i64(const af_gguf *g, const char *key, int64_t *out);
af_status af_gguf_get_f32(const af_gguf *g, const char *key, float *out);
af_status af_gguf_get_bool(const af_gguf *g, const char *key, bool *out);
af_status af_gguf_get_str(const af_gguf *g, const char *key, af_gguf_str *out);
/* Same, but a missing key yields `def` and AF_OK. */
af_status af_gguf_get_i64_or(const af_gguf *g, const char *key, int64_t def, int64_t *out);
af_status af_gguf_get_f32_or(const af_gguf *g, const char *key, float def, float *out);
af_status af_gguf_get_bool_or(const af_gguf *g, const char *key, bool def, bool *out);

/* Array element access (no bounds errors possible after open if i < arr_n; callers check i).
 * Wrong element type or i >= arr_n yields an empty string / 0. af_gguf_arr_str is O(1) for
 * top-level arrays (str_offsets) and a linear walk for sub-arrays from af_gguf_arr_sub. */
af_gguf_str af_gguf_arr_str(const af_gguf_value *arr, uint64_t i);
int64_t af_gguf_arr_int(const af_gguf_value *arr, uint64_t i);   /* any integer element type */
double af_gguf_arr_float(const af_gguf_value *arr, uint64_t i);  /* FLOAT32/64 or integer */
/* Nested array element i as a value view (its str_offsets is NULL: use linear walk helpers).
 * O(size of elements 0..i-1). Errors: AF_ERR_INVALID_ARG (not an array of arrays, i >= arr_n). */
af_status af_gguf_arr_sub(const af_gguf_value *arr, uint64_t i, af_gguf_value *out);

/* Name of a metadata value type ("u32", "string", ...). */
const char *af_gguf_vtype_name(af_gguf_vtype t);

/* Compare a GGUF string with a C string. */
bool af_gguf_str_eq(af_gguf_str s, const char *c);

#endif /* AF_GGUF_H */
