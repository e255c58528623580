/*
 * safetensors.h — SafeTensors reader (memory-mapped, fully validated) and atomic writer.
 *
 * Format (huggingface/safetensors README, "Format" section; checks mirror the reference Rust
 * implementation, safetensors/src/tensor.rs `Metadata::validate`):
 *   bytes [0, 8)        N, u64 little-endian: length of the JSON header
 *   bytes [8, 8+N)      UTF-8 JSON object, may be padded at the end with spaces (0x20):
 *                         {"NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [BEGIN, END]},
 *                          ..., "__metadata__": {"key": "value", ...}}     (__metadata__ optional, str->str)
 *   bytes [8+N, EOF)    the byte buffer; BEGIN/END are relative to its start; data little-endian,
 *                       row-major (C order). Tensors must not overlap and must cover the buffer
 *                       exactly (no holes, nothing after the last tensor).
 * Validation on open (all before any tensor is exposed): file >= 8 bytes, N <= 100,000,000
 * (AF_ST_MAX_HEADER, as the reference), 8+N <= file size, header is valid UTF-8 and a JSON object
 * starting with '{' followed only by whitespace, each entry has a known dtype, a shape of
 * non-negative integers (at most AF_ST_MAX_DIMS), integer offsets BEGIN <= END; product(shape) *
 * bits(dtype) / 8 == END - BEGIN computed without overflow; after sorting by offset, each tensor
 * starts where the previous ends and the last ends at the buffer end; names are unique.
 * Every error message names the file, the tensor/field and (where one exists) the byte offset.
 */
#ifndef AF_SAFETENSORS_H
#define AF_SAFETENSORS_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

#define AF_ST_MAX_HEADER 100000000ull /* same limit as the reference implementation */
#define AF_ST_MAX_DIMS 8

/* Element types named in the header ("dtype"). Sub-byte types F4/F6 are validated for size
 * (bits per element) but cannot be read as f32. */
typedef enum af_st_dtype {
    AF_ST_BOOL = 0,
    AF_ST_U8,
    AF_ST_I8,
    AF_ST_F8_E5M2,
    AF_ST_F8_E4M3,
    AF_ST_F8_E8M0,
    AF_ST_I16,
    AF_ST_U16,
    AF_ST_F16,
    AF_ST_BF16,
    AF_ST_I32,
    AF_ST_U32,
    AF_ST_F32,
    AF_ST_F64,
    AF_ST_I64,
    AF_ST_U64,
    AF_ST_C64,
    AF_ST_F4,
    AF_ST_F6_E2M3,
    AF_ST_F6_E3M2,
    AF_ST_DTYPE_COUNT
} af_st_dtype;

/* Header spelling ("F32", ...) of a dtype; "?" if out of range. */
const char *af_st_dtype_name(af_st_dtype t);
/* Bits per element (1 ... 128). */
int af_st_dtype_bits(af_st_dtype t);
/* Parse a header spelling; returns -1 if unknown. */
int af_st_dtype_from_name(const char *s);

/* One tensor of an open file. All pointers point into memory owned by the af_st_file. */
typedef struct af_st_tensor {
    const char *name;                 /* NUL-terminated */
    af_st_dtype dtype;
    int32_t n_dims;                   /* 0 = scalar (one element) */
    int64_t shape[AF_ST_MAX_DIMS];    /* row-major, outermost first */
    uint64_t n_elem;                  /* product of shape */
    uint64_t begin, end;              /* byte offsets in the data buffer */
    const uint8_t *data;              /* = buffer + begin; NOT necessarily aligned */
} af_st_tensor;

typedef struct af_st_file af_st_file;

/* Open and validate `path` (read-only mmap). On success `*out` is owned by the caller; free with
 * af_st_close(). Errors: AF_ERR_IO (missing/unreadable), AF_ERR_FORMAT (any violation listed
 * above), AF_ERR_UNSUPPORTED (unknown dtype, more than AF_ST_MAX_DIMS dims), AF_ERR_NOMEM. */
af_status af_st_open(const char *path, af_st_file **out);

/* Same validation over an in-memory image of `size` bytes (borrowed: must outlive the handle).
 * `label` names the source in messages. Used by tests and for embedded data. */
af_status af_st_open_memory(const void *data, size_t size, const char *label, af_st_file **out);

void af_st_close(af_st_file *f);

/* Tensors sorted by data offset (file order). Index i in [0, af_st_count(f)). */
size_t af_st_count(const af_st_file *f);
const af_st_tensor *af_st_tensor_at(const af_st_file *f, size_t i);
/* Lookup by exact name (binary search); NULL when absent. */
const af_st_tensor *af_st_find(const af_st_file *f, const char *name);

/* __metadata__: number of entries, entry i (key/value NUL-terminated, owned by f), lookup. */
size_t af_st_meta_count(const af_st_file *f);
void af_st_meta_at(const af_st_file *f, size_t i, const char **key, const char **value);
const char *af_st_meta_get(const af_st_file *f, const char *key); /* NULL when absent */

/* Path or label given at open. */
const char *af_st_path(const af_st_file *f);

/* Convert tensor `t` of `f` to f32 into dst [n] (n must equal t->n_elem). Supported dtypes:
 * F32 (bit copy), F16 (IEEE half incl. subnormals), BF16, F64 (rounded to nearest f32).
 * Errors: AF_ERR_INVALID_ARG (n mismatch), AF_ERR_UNSUPPORTED (other dtypes). */
af_status af_st_read_f32(const af_st_file *f, const af_st_tensor *t, float *dst, size_t n);

/* ---- writer ---- */

/* One tensor to write. Source is either `f32` (n_elem floats, converted to `dtype`, which must be
 * F32, F16 (round to nearest even) or BF16 (round to nearest even, NaN kept quiet)) or, when
 * f32 == NULL, `raw`: exactly product(shape) * bits(dtype) / 8 bytes already in `dtype`
 * (little-endian), written as they are. Borrowed for the call only. */
typedef struct af_st_write_tensor {
    const char *name;
    af_st_dtype dtype;
    int32_t n_dims;
    int64_t shape[AF_ST_MAX_DIMS];
    const float *f32;
    const void *raw;
} af_st_write_tensor;

/* Write a SafeTensors file atomically (core/fsutil.h: temp file in the same directory, fsync,
 * rename, fsync directory). Layout as the reference writer (safetensors `serialize`): tensors
 * ordered by dtype size (largest first), then by name; header JSON
 * {"__metadata__":{...},"name":{"dtype":...,"shape":[...],"data_offsets":[b,e]},...} padded with
 * spaces so that 8 + N is a multiple of 8. `meta_keys/meta_values` [n_meta] (may be 0/NULL) are
 * written as __metadata__ strings. Errors: AF_ERR_INVALID_ARG (empty or duplicate name, name
 * "__metadata__", bad dims, unsupported conversion), AF_ERR_IO, AF_ERR_NOMEM. */
af_status af_st_write(const char *path, const af_st_write_tensor *tensors, size_t n_tensors,
                      const char *const *meta_keys, const char *const *meta_values, size_t n_meta);

#endif /* AF_SAFETENSORS_H */
