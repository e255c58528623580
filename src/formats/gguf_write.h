/*
 * gguf_write.h — build a GGUF v3 file in memory or on disk.
 *
 * Layout written (docs/FORMATS.md §1, ggml docs/gguf.md): magic "GGUF", version 3, tensor count,
 * KV count, the KVs in the order they were added, the tensor infos in the order they were added
 * (offsets assigned back to back, each padded to the alignment), zero padding to the alignment,
 * then each tensor's bytes followed by zero padding to the alignment (as gguf-py does, so the
 * file ends on an alignment boundary).
 *
 * Typical use (a tiny model for a test):
 *     af_gguf_writer *w;
 *     AF_TRY(af_gguf_writer_new(&w));
 *     af_gguf_writer_add_str(w, "general.architecture", "llama");
 *     af_gguf_writer_add_u32(w, "llama.block_count", 2);
 *     const char *toks[] = {"<s>", "a"};
 *     af_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 2);
 *     int64_t ne[2] = {64, 2};                    // ne[0] = contiguous dim = PyTorch in_features
 *     af_gguf_writer_add_tensor(w, "token_embd.weight", AF_TYPE_F32, 2, ne, data, 64 * 2 * 4);
 *     st = af_gguf_writer_write_file(w, path);    // atomic: temp file + fsync + rename
 *     af_gguf_writer_free(w);
 *
 * Errors are sticky: after the first failing add, later adds return the same status and
 * write_file/write_mem refuse to write, so a sequence of adds may be checked once at the end.
 * All values are encoded little-endian. Messages follow "<what>: <problem>".
 */
#ifndef AF_GGUF_WRITE_H
#define AF_GGUF_WRITE_H

#include "core/core.h"
#include "formats/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct af_gguf_writer af_gguf_writer;

/* New empty writer (no KVs, no tensors, alignment 32). `*out`: free with af_gguf_writer_free().
 * Errors: AF_ERR_NOMEM. */
af_status af_gguf_writer_new(af_gguf_writer **out);
/* Frees the writer, its copies of keys/values and of tensor data added with copy semantics.
 * NULL is ignored. */
void af_gguf_writer_free(af_gguf_writer *w);

/* Scalar and string KVs. `key` is copied; it must be non-empty, <= 65535 bytes and not added
 * before (AF_ERR_INVALID_ARG otherwise). Errors: AF_ERR_INVALID_ARG, AF_ERR_NOMEM. */
af_status af_gguf_writer_add_u8(af_gguf_writer *w, const char *key, uint8_t v);
af_status af_gguf_writer_add_i8(af_gguf_writer *w, const char *key, int8_t v);
af_status af_gguf_writer_add_u16(af_gguf_writer *w, const char *key, uint16_t v);
af_status af_gguf_writer_add_i16(af_gguf_writer *w, const char *key, int16_t v);
af_status af_gguf_writer_add_u32(af_gguf_writer *w, const char *key, uint32_t v);
af_status af_gguf_writer_add_i32(af_gguf_writer *w, const char *key, int32_t v);
af_status af_gguf_writer_add_f32(af_gguf_writer *w, const char *key, float v);
af_status af_gguf_writer_add_bool(af_gguf_writer *w, const char *key, bool v);
af_status af_gguf_writer_add_u64(af_gguf_writer *w, const char *key, uint64_t v);
af_status af_gguf_writer_add_i64(af_gguf_writer *w, const char *key, int64_t v);
af_status af_gguf_writer_add_f64(af_gguf_writer *w, const char *key, double v);
/* NUL-terminated string value. */
af_status af_gguf_writer_add_str(af_gguf_writer *w, const char *key, const char *v);
/* String value of `len` bytes (may contain NUL bytes). */
af_status af_gguf_writer_add_strn(af_gguf_writer *w, const char *key, const char *v, size_t len);

/* Array of `n` scalars of element type `et` (any type except STRING and ARRAY). `data` holds n
 * packed host values of that C type (uint8_t, int8_t, ..., float, bool as uint8_t 0/1, double).
 * Errors: AF_ERR_INVALID_ARG (bad type, bool byte not 0/1, bad key), AF_ERR_NOMEM. */
af_status af_gguf_writer_add_arr(af_gguf_writer *w, const char *key, af_gguf_vtype et, const void *data,
                                 uint64_t n);
/* Array of `n` NUL-terminated strings. */
af_status af_gguf_writer_add_arr_str(af_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Setting the data alignment (a power of two, 1..2^30) also adds/updates the u32 KV
 * "general.alignment" (added as a new KV at the first call). The default 32 writes no KV.
 * Errors: AF_ERR_INVALID_ARG. */
af_status af_gguf_writer_set_alignment(af_gguf_writer *w, uint32_t alignment);

/* ---- Encoded values: nested arrays, and hand-crafted (possibly invalid) values for tests ----
 * An af_gguf_enc is a growable byte buffer of encoded GGUF value bytes (what follows a KV's value
 * type). Build it with the af_gguf_enc_* calls (each appends; an allocation failure is sticky and
 * reported by af_gguf_writer_add_raw), then add it with af_gguf_writer_add_raw.
 * Example, an array of 2 arrays of u32:
 *     af_gguf_enc e = {0};
 *     af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 2);
 *     af_gguf_enc_arr_header(&e, AF_GGUF_UINT32, 1); af_gguf_enc_u32(&e, 7);
 *     af_gguf_enc_arr_header(&e, AF_GGUF_UINT32, 0);
 *     af_gguf_writer_add_raw(w, "x.nested", AF_GGUF_ARRAY, &e, false);
 *     af_gguf_enc_free(&e); */
typedef struct af_gguf_enc {
    uint8_t *data; /* owned, [len] bytes */
    size_t len, cap;
    bool oom;      /* an append failed */
} af_gguf_enc;

void af_gguf_enc_u8(af_gguf_enc *e, uint8_t v);
void af_gguf_enc_u16(af_gguf_enc *e, uint16_t v);
void af_gguf_enc_u32(af_gguf_enc *e, uint32_t v);
void af_gguf_enc_u64(af_gguf_enc *e, uint64_t v);
void af_gguf_enc_f32(af_gguf_enc *e, float v);
void af_gguf_enc_f64(af_gguf_enc *e, double v);
/* u64 length + bytes. */
void af_gguf_enc_str(af_gguf_enc *e, const char *s, size_t len);
/* Array header: u32 element type + u64 element count; the elements follow with further calls. */
void af_gguf_enc_arr_header(af_gguf_enc *e, uint32_t elem_type, uint64_t n);
void af_gguf_enc_bytes(af_gguf_enc *e, const void *p, size_t n);
void af_gguf_enc_free(af_gguf_enc *e);

/* Add a KV whose value type is `type` (written as is, even if not a valid type id) and whose
 * value bytes are `e`'s bytes, verbatim. The bytes are NOT validated and do not change the
 * writer's alignment, so this can craft broken files for tests. `allow_dup_key` skips the
 * duplicate-key check (also for crafting). Errors: AF_ERR_INVALID_ARG (empty key or
 * e->oom), AF_ERR_NOMEM. */
af_status af_gguf_writer_add_raw(af_gguf_writer *w, const char *key, uint32_t type, const af_gguf_enc *e,
                                 bool allow_dup_key);

/* Add a copy of KV `kv` of an open file (af_gguf_open), key and value bytes exactly as stored:
 * scalars re-encoded with their type (little-endian, so byte-identical), strings and arrays
 * (nested arrays and string arrays included) copied verbatim from the mapping. A u32
 * "general.alignment" goes through af_gguf_writer_set_alignment, so the data written after it use
 * that alignment. Errors: AF_ERR_INVALID_ARG (bad key, duplicate key), AF_ERR_FORMAT (a key with a
 * NUL byte, which the writer's C-string keys cannot hold), AF_ERR_NOMEM. */
af_status af_gguf_writer_copy_kv(af_gguf_writer *w, const af_gguf_kv *kv);

/* Add a tensor: `name` (1..63 bytes, unique), ggml `type` (kernels/quant.h af_type), `n_dims`
 * (1..4) dims `ne` (ne[0] = contiguous dimension, a multiple of the type's block size; all >= 1)
 * and its raw bytes (`nbytes` must equal af_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3]).
 * add_tensor COPIES the bytes; add_tensor_ref BORROWS them (they must stay valid until the last
 * write call; use it to export large weights without a copy).
 * Errors: AF_ERR_INVALID_ARG (any rule above), AF_ERR_UNSUPPORTED (type unknown), AF_ERR_NOMEM. */
af_status af_gguf_writer_add_tensor(af_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, size_t nbytes);
af_status af_gguf_writer_add_tensor_ref(af_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                        const int64_t *ne, const void *data, size_t nbytes);

/* Total size in bytes of the file the writer would write now. */
uint64_t af_gguf_writer_size(const af_gguf_writer *w);

/* Write to memory: `*buf` receives a malloc'ed buffer of `*len` bytes (caller frees with free()).
 * Errors: the sticky error of a failed add, AF_ERR_NOMEM. */
af_status af_gguf_writer_write_mem(const af_gguf_writer *w, uint8_t **buf, size_t *len);

/* Write to `path` atomically: a temporary file in the same directory is written, fsync'ed and
 * renamed over `path` (the directory is fsync'ed too), so readers never see a partial file.
 * Errors: the sticky error of a failed add, AF_ERR_IO (message names the path), AF_ERR_NOMEM. */
af_status af_gguf_writer_write_file(const af_gguf_writer *w, const char *path);

#endif /* AF_GGUF_WRITE_H */
