/*
 * gguf.c — GGUF container reader (versions 2 and 3): memory-maps the file, validates the whole
 * header on open (every metadata value incl. nested arrays, every tensor info) and then serves
 * lookups and typed getters without further checks.
 *
 * Format facts: ggml docs/gguf.md, summarised in docs/FORMATS.md §1 (layout, value
 * types, tensor infos, alignment). Written from the specification; no code copied.
 *
 * Hostile-input policy: every count is checked against the bytes left in the file BEFORE it is
 * used (each element of a count needs a known minimum number of bytes), every length and offset
 * before it is dereferenced, and every product with overflow-checked arithmetic. Arrays holding
 * parsed entries grow with the entries actually parsed, so memory stays a small multiple of the
 * header bytes read, whatever the counts in the file claim.
 */
#include "formats/gguf.h"
#include "core/fsutil.h"

#include "core/blocks.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Minimum encoded bytes of one KV pair: key length (8) + at least 1 key byte + value type (4) +
 * the smallest value (1 byte: u8/i8/bool). */
#define MIN_KV_BYTES 14u
/* Minimum encoded bytes of one tensor info: name length (8) + 1 name byte + n_dims (4) + one
 * dimension (8) + type (4) + offset (8). */
#define MIN_TINFO_BYTES 33u
/* Longest key accepted (the GGUF spec limits keys to 65535 bytes). */
#define MAX_KEY_LEN 65535u

/* The reader's private state; `pub` must stay the first member (af_gguf* <-> gguf_impl*). */
typedef struct gguf_impl {
    af_gguf pub;
    uint64_t *kv_tab; /* open-addressing table of kv index + 1 (0 = empty); [kv_mask + 1] */
    uint64_t kv_mask;
    uint64_t *t_tab;  /* same for tensors by name */
    uint64_t t_mask;
} gguf_impl;

/* Parsing cursor over the mapping. `ctx` names the entry being parsed for messages. */
typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    char ctx[160];
} cursor;

/* ---- little-endian decoding (portable: no unaligned loads, any host byte order) ---- */
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }
static float lef32(const uint8_t *p) {
    uint32_t u = le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double lef64(const uint8_t *p) {
    uint64_t u = le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Record "<path>: <ctx>: <problem> at offset <off>" and return st. */
static af_status bad(const cursor *c, af_status st, uint64_t off, const char *fmt, ...) AF_PRINTF(4, 5);
static af_status bad(const cursor *c, af_status st, uint64_t off, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return af_fail(st, "%s: %s: %s at offset %llu", c->path, c->ctx, msg, (unsigned long long)off);
}

static void set_ctx(cursor *c, const char *fmt, ...) AF_PRINTF(2, 3);
static void set_ctx(cursor *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->ctx, sizeof c->ctx, fmt, ap);
    va_end(ap);
}

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static af_status need(cursor *c, uint64_t n, const char *field) {
    if (n > left(c))
        return bad(c, AF_ERR_FORMAT, c->pos, "%s: truncated (needs %llu bytes, %llu left)", field,
                   (unsigned long long)n, (unsigned long long)left(c));
    return AF_OK;
}

static af_status rd_u32(cursor *c, uint32_t *v, const char *field) {
    AF_TRY(need(c, 4, field));
    *v = le32(c->base + c->pos);
    c->pos += 4;
    return AF_OK;
}

static af_status rd_u64(cursor *c, uint64_t *v, const char *field) {
    AF_TRY(need(c, 8, field));
    *v = le64(c->base + c->pos);
    c->pos += 8;
    return AF_OK;
}

/* A gguf string: u64 length, then that many bytes (length checked against the bytes left). */
static af_status rd_str(cursor *c, af_gguf_str *s, const char *field) {
    uint64_t at = c->pos, len;
    AF_TRY(rd_u64(c, &len, field));
    if (len > left(c))
        return bad(c, AF_ERR_FORMAT, at, "%s: string length %llu exceeds the %llu bytes left in the file",
                   field, (unsigned long long)len, (unsigned long long)left(c));
    s->ptr = (const char *)(c->base + c->pos);
    s->len = len;
    c->pos += len;
    return AF_OK;
}

/* Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown ids. */
static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case AF_GGUF_UINT8: case AF_GGUF_INT8: case AF_GGUF_BOOL: return 1;
    case AF_GGUF_UINT16: case AF_GGUF_INT16: return 2;
    case AF_GGUF_UINT32: case AF_GGUF_INT32: case AF_GGUF_FLOAT32: return 4;
    case AF_GGUF_UINT64: case AF_GGUF_INT64: case AF_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest encoded size of one value of type t (string: its length; array: type + count). */
static uint64_t min_value_size(uint32_t t) {
    if (t == AF_GGUF_STRING) return 8;
    if (t == AF_GGUF_ARRAY) return 12;
    return scalar_size(t);
}

const char *af_gguf_vtype_name(af_gguf_vtype t) {
    static const char *const names[AF_GGUF_VTYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                           "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < AF_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

/* Validate the elements of an array (element type et, n elements) starting at c->pos and
 * advance past them. `depth` is the nesting level of this array (1 = a top-level value).
 * When `str_off` is not NULL (arrays of strings), it receives each element's offset relative
 * to the first element. */
static af_status walk_array(cursor *c, uint32_t et, uint64_t n, int depth, uint64_t *str_off) {
    uint64_t start = c->pos;
    if (et == AF_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            af_gguf_str s;
            if (str_off) str_off[i] = c->pos - start;
            AF_TRY(rd_str(c, &s, "array string element"));
        }
    } else if (et == AF_GGUF_ARRAY) {
        if (depth >= AF_GGUF_MAX_DEPTH)
            return bad(c, AF_ERR_FORMAT, c->pos, "arrays nested deeper than %d levels", AF_GGUF_MAX_DEPTH);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t at = c->pos, sn;
            uint32_t set;
            AF_TRY(rd_u32(c, &set, "nested array element type"));
            if (set >= AF_GGUF_VTYPE_COUNT)
                return bad(c, AF_ERR_FORMAT, at, "unknown nested array element type %u", set);
            AF_TRY(rd_u64(c, &sn, "nested array count"));
            if (sn > left(c) / min_value_size(set))
                return bad(c, AF_ERR_FORMAT, at + 4, "nested array count %llu of %s cannot fit in the %llu bytes left",
                           (unsigned long long)sn, af_gguf_vtype_name(set), (unsigned long long)left(c));
            AF_TRY(walk_array(c, set, sn, depth + 1, NULL));
        }
    } else {
        uint64_t sz = scalar_size(et); /* n <= left / sz was checked by the caller */
        if (et == AF_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->base[c->pos + i] > 1)
                    return bad(c, AF_ERR_FORMAT, c->pos + i, "invalid bool value %u in array element %llu",
                               c->base[c->pos + i], (unsigned long long)i);
        }
        c->pos += n * sz;
    }
    return AF_OK;
}

/* Parse one top-level value of type `t` at c->pos into *v (allocating str_offsets for arrays of
 * strings). `t` has already been read. */
static af_status parse_value(cursor *c, uint32_t t, af_gguf_value *v) {
    uint64_t at = c->pos;
    memset(v, 0, sizeof *v);
    if (t >= AF_GGUF_VTYPE_COUNT) return bad(c, AF_ERR_FORMAT, at - 4, "unknown value type %u", t);
    v->type = (af_gguf_vtype)t;
    if (t == AF_GGUF_STRING) return rd_str(c, &v->v.str, "string value");
    if (t != AF_GGUF_ARRAY) {
        uint64_t sz = scalar_size(t);
        AF_TRY(need(c, sz, af_gguf_vtype_name(v->type)));
        const uint8_t *p = c->base + c->pos;
        switch (t) {
        case AF_GGUF_UINT8: v->v.u64 = p[0]; break;
        case AF_GGUF_INT8: v->v.i64 = (int8_t)p[0]; break;
        case AF_GGUF_UINT16: v->v.u64 = le16(p); break;
        case AF_GGUF_INT16: v->v.i64 = (int16_t)le16(p); break;
        case AF_GGUF_UINT32: v->v.u64 = le32(p); break;
        case AF_GGUF_INT32: v->v.i64 = (int32_t)le32(p); break;
        case AF_GGUF_UINT64: v->v.u64 = le64(p); break;
        case AF_GGUF_INT64: v->v.i64 = (int64_t)le64(p); break;
        case AF_GGUF_FLOAT32: v->v.f64 = lef32(p); break;
        case AF_GGUF_FLOAT64: v->v.f64 = lef64(p); break;
        case AF_GGUF_BOOL:
            if (p[0] > 1) return bad(c, AF_ERR_FORMAT, at, "invalid bool value %u (must be 0 or 1)", p[0]);
            v->v.u64 = p[0];
            break;
        }
        c->pos += sz;
        return AF_OK;
    }
    uint32_t et;
    uint64_t n;
    AF_TRY(rd_u32(c, &et, "array element type"));
    if (et >= AF_GGUF_VTYPE_COUNT) return bad(c, AF_ERR_FORMAT, at, "unknown array element type %u", et);
    AF_TRY(rd_u64(c, &n, "array count"));
    if (n > left(c) / min_value_size(et))
        return bad(c, AF_ERR_FORMAT, at + 4, "array count %llu of %s cannot fit in the %llu bytes left",
                   (unsigned long long)n, af_gguf_vtype_name((af_gguf_vtype)et), (unsigned long long)left(c));
    v->arr_type = (af_gguf_vtype)et;
    v->arr_n = n;
    v->arr_data = c->base + c->pos;
    if (et == AF_GGUF_STRING && n > 0) {
        /* n <= bytes left / 8, so this allocation is at most the size of the file's remainder. */
        v->str_offsets = af_malloc((size_t)n * sizeof(uint64_t));
        if (!v->str_offsets) return bad(c, AF_ERR_NOMEM, at, "cannot allocate %llu string offsets", (unsigned long long)n);
    }
    af_status st = walk_array(c, et, n, 1, v->str_offsets);
    v->arr_bytes = (uint64_t)(c->base + c->pos - v->arr_data);
    return st;
}

/* Grow *p (of *cap elements of `elem` bytes) to hold at least `need_n` elements. */
static bool grow(void **p, uint64_t *cap, uint64_t need_n, size_t elem) {
    if (need_n <= *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need_n) nc *= 2;
    void *q = af_realloc_array(*p, (size_t)nc, elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* FNV-1a 64-bit over bytes. */
static uint64_t hash_bytes(const void *s, size_t n) {
    const uint8_t *p = s;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static bool alloc_table(uint64_t n, uint64_t **tab, uint64_t *mask) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    *tab = af_calloc((size_t)cap, sizeof(uint64_t));
    *mask = cap - 1;
    return *tab != NULL;
}

static const char *tensor_name_of(const af_gguf *g, uint64_t i) { return g->tensors[i].name; }

/* Build the key table; a duplicate key fails with its offset. */
static af_status index_keys(gguf_impl *im, cursor *c) {
    af_gguf *g = &im->pub;
    if (!alloc_table(g->n_kv, &im->kv_tab, &im->kv_mask)) return af_fail(AF_ERR_NOMEM, "%s: key index: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        af_gguf_str k = g->kv[i].key;
        uint64_t h = hash_bytes(k.ptr, (size_t)k.len) & im->kv_mask;
        while (im->kv_tab[h]) {
            af_gguf_str o = g->kv[im->kv_tab[h] - 1].key;
            if (o.len == k.len && memcmp(o.ptr, k.ptr, (size_t)k.len) == 0) {
                set_ctx(c, "key '%.*s'", (int)(k.len > 100 ? 100 : k.len), k.ptr);
                return bad(c, AF_ERR_FORMAT, (uint64_t)((const uint8_t *)k.ptr - c->base) - 8,
                           "duplicate key (also kv[%llu])", (unsigned long long)(im->kv_tab[h] - 1));
            }
            h = (h + 1) & im->kv_mask;
        }
        im->kv_tab[h] = i + 1;
    }
    return AF_OK;
}

static af_status index_tensors(gguf_impl *im, cursor *c) {
    af_gguf *g = &im->pub;
    if (!alloc_table(g->n_tensors, &im->t_tab, &im->t_mask))
        return af_fail(AF_ERR_NOMEM, "%s: tensor index: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *nm = tensor_name_of(g, i);
        uint64_t h = hash_bytes(nm, strlen(nm)) & im->t_mask;
        while (im->t_tab[h]) {
            if (strcmp(tensor_name_of(g, im->t_tab[h] - 1), nm) == 0) {
                set_ctx(c, "tensor '%s'", nm);
                return bad(c, AF_ERR_FORMAT, g->data_offset + g->tensors[i].offset,
                           "duplicate tensor name (tensor infos %llu and %llu)",
                           (unsigned long long)(im->t_tab[h] - 1), (unsigned long long)i);
            }
            h = (h + 1) & im->t_mask;
        }
        im->t_tab[h] = i + 1;
    }
    return AF_OK;
}

/* Parse the metadata KVs (count already validated against the bytes left). */
static af_status parse_kvs(gguf_impl *im, cursor *c, uint64_t n_kv) {
    af_gguf *g = &im->pub;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        set_ctx(c, "kv[%llu]", (unsigned long long)i);
        if (!grow((void **)&g->kv, &cap, i + 1, sizeof(af_gguf_kv)))
            return bad(c, AF_ERR_NOMEM, c->pos, "out of memory");
        af_gguf_kv *kv = &g->kv[i];
        memset(kv, 0, sizeof *kv);
        uint64_t at = c->pos;
        AF_TRY(rd_str(c, &kv->key, "key"));
        if (kv->key.len == 0) return bad(c, AF_ERR_FORMAT, at, "empty key");
        if (kv->key.len > MAX_KEY_LEN)
            return bad(c, AF_ERR_FORMAT, at, "key length %llu exceeds %u", (unsigned long long)kv->key.len, MAX_KEY_LEN);
        set_ctx(c, "key '%.*s'", (int)(kv->key.len > 100 ? 100 : kv->key.len), kv->key.ptr);
        uint32_t t;
        AF_TRY(rd_u32(c, &t, "value type"));
        uint64_t vat = c->pos;
        g->n_kv = i + 1; /* so close() frees this entry's str_offsets even on failure */
        AF_TRY(parse_value(c, t, &kv->val));
        if (af_gguf_str_eq(kv->key, "general.alignment")) {
            if (kv->val.type != AF_GGUF_UINT32)
                return bad(c, AF_ERR_FORMAT, vat - 4, "must be u32, found %s", af_gguf_vtype_name(kv->val.type));
            uint64_t a = kv->val.v.u64;
            if (a == 0 || (a & (a - 1)) != 0) return bad(c, AF_ERR_FORMAT, vat, "alignment %llu is not a power of two", (unsigned long long)a);
            g->alignment = (uint32_t)a;
        }
    }
    return AF_OK;
}

/* Parse the tensor infos (count already validated) and compute sizes; data bounds are checked
 * afterwards, once the data section offset is known. */
static af_status parse_tensor_infos(gguf_impl *im, cursor *c, uint64_t n_t) {
    af_gguf *g = &im->pub;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        set_ctx(c, "tensor[%llu]", (unsigned long long)i);
        if (!grow((void **)&g->tensors, &cap, i + 1, sizeof(af_gguf_tensor)))
            return bad(c, AF_ERR_NOMEM, c->pos, "out of memory");
        af_gguf_tensor *t = &g->tensors[i];
        memset(t, 0, sizeof *t);
        uint64_t at = c->pos;
        af_gguf_str nm = {0};
        AF_TRY(rd_str(c, &nm, "name"));
        if (nm.len == 0) return bad(c, AF_ERR_FORMAT, at, "empty tensor name");
        if (nm.len >= sizeof t->name)
            return bad(c, AF_ERR_FORMAT, at, "name of %llu bytes exceeds the limit of %zu",
                       (unsigned long long)nm.len, sizeof t->name - 1);
        if (memchr(nm.ptr, 0, (size_t)nm.len)) return bad(c, AF_ERR_FORMAT, at, "name contains a NUL byte");
        memcpy(t->name, nm.ptr, (size_t)nm.len);
        t->name[nm.len] = 0;
        set_ctx(c, "tensor '%s'", t->name);
        g->n_tensors = i + 1;
        at = c->pos;
        AF_TRY(rd_u32(c, &t->n_dims, "n_dims"));
        if (t->n_dims < 1 || t->n_dims > 4) return bad(c, AF_ERR_FORMAT, at, "n_dims %u not in 1..4", t->n_dims);
        int64_t nel = 1;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t u;
            at = c->pos;
            AF_TRY(rd_u64(c, &u, "dimension"));
            if (u == 0 || u > (uint64_t)INT64_MAX)
                return bad(c, AF_ERR_FORMAT, at, "dimension %u is %lld (must be >= 1)", d, (long long)u);
            t->ne[d] = (int64_t)u;
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                return bad(c, AF_ERR_FORMAT, at, "element count overflows (dimension %u = %llu)", d, (unsigned long long)u);
        }
        at = c->pos;
        AF_TRY(rd_u32(c, &t->type, "type"));
        size_t bs = t->type < AF_TYPE_COUNT ? af_type_block_size(t->type) : 0; /* no afinar-internal ids */
        if (bs == 0)
            return bad(c, AF_ERR_UNSUPPORTED, at, "unsupported tensor type id %u (%s)", t->type,
                       t->type < AF_TYPE_COUNT ? af_type_name(t->type) : "unknown");
        if (t->ne[0] % (int64_t)bs != 0)
            return bad(c, AF_ERR_FORMAT, at, "ne[0] = %lld is not a multiple of the %s block size %zu",
                       (long long)t->ne[0], af_type_name(t->type), bs);
        uint64_t row;
        if (__builtin_mul_overflow((uint64_t)(t->ne[0] / (int64_t)bs), (uint64_t)af_type_block_bytes(t->type), &row))
            return bad(c, AF_ERR_FORMAT, at, "row size overflows");
        uint64_t nb = row;
        for (int d = 1; d < 4; d++)
            if (__builtin_mul_overflow(nb, (uint64_t)t->ne[d], &nb)) return bad(c, AF_ERR_FORMAT, at, "byte size overflows");
        t->nbytes = nb;
        at = c->pos;
        AF_TRY(rd_u64(c, &t->offset, "offset"));
        if (t->offset % g->alignment != 0)
            return bad(c, AF_ERR_FORMAT, at, "data offset %llu is not a multiple of the alignment %u",
                       (unsigned long long)t->offset, g->alignment);
    }
    return AF_OK;
}

typedef struct {
    uint64_t off, idx;
} off_idx;
static int cmp_off_idx(const void *a, const void *b) {
    const off_idx *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Tensor data that parse but make no sense: two tensors whose bytes overlap, or a
 * tensor followed by more bytes than its type and shape account for before the next tensor (a
 * type that does not match the data: e.g. F16 data declared Q4_0) — writers pad each tensor only to
 * the alignment. The byte size of each tensor comes from its type and dimensions. */
static af_status check_layout(af_gguf *g, cursor *c) {
    const uint64_t n = g->n_tensors;
    if (n < 2) return AF_OK;
    off_idx *ord = af_malloc(n * sizeof *ord);
    if (!ord) return af_fail(AF_ERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n; i++) ord[i] = (off_idx){g->tensors[i].offset, i};
    qsort(ord, n, sizeof *ord, cmp_off_idx);
    af_status st = AF_OK;
    for (uint64_t k = 0; k + 1 < n && st == AF_OK; k++) {
        const af_gguf_tensor *a = &g->tensors[ord[k].idx], *b = &g->tensors[ord[k + 1].idx];
        const uint64_t end = a->offset + a->nbytes; /* no overflow: both were checked against the file size */
        set_ctx(c, "tensor '%s'", b->name);
        if (end > b->offset)
            st = bad(c, AF_ERR_FORMAT, g->data_offset + b->offset,
                     "data [%llu, +%llu bytes) overlaps tensor '%s' [%llu, +%llu bytes) (%s, %llu bytes by its type and "
                     "shape)", (unsigned long long)b->offset, (unsigned long long)b->nbytes, a->name,
                     (unsigned long long)a->offset, (unsigned long long)a->nbytes, af_type_name(a->type),
                     (unsigned long long)a->nbytes);
        else if (b->offset - end >= g->alignment && a->nbytes > 0) {
            set_ctx(c, "tensor '%s'", a->name);
            st = bad(c, AF_ERR_FORMAT, g->data_offset + a->offset,
                     "%s [%lld x %lld x %lld x %lld] = %llu bytes by its type and shape, but the next tensor ('%s') starts "
                     "%llu bytes after it (more than the %u-byte alignment): its type does not match its data",
                     af_type_name(a->type), (long long)a->ne[0], (long long)a->ne[1], (long long)a->ne[2],
                     (long long)a->ne[3], (unsigned long long)a->nbytes, b->name,
                     (unsigned long long)(b->offset - a->offset), g->alignment);
        }
    }
    free(ord);
    return st;
}

/* Header, KVs, tensor infos, data bounds and the lookup tables. */
static af_status parse(gguf_impl *im) {
    af_gguf *g = &im->pub;
    cursor c = {.base = g->base, .size = g->size, .pos = 0, .path = g->path};
    set_ctx(&c, "header");
    if (g->size < 4) return bad(&c, AF_ERR_FORMAT, 0, "file of %llu bytes is too small to be GGUF", (unsigned long long)g->size);
    if (memcmp(g->base, "GGUF", 4) != 0)
        return bad(&c, AF_ERR_FORMAT, 0, "bad magic %02x %02x %02x %02x (not a GGUF file)", g->base[0], g->base[1],
                   g->base[2], g->base[3]);
    c.pos = 4;
    AF_TRY(rd_u32(&c, &g->version, "version"));
    if ((g->version & 0xFFFFu) == 0)
        return bad(&c, AF_ERR_FORMAT, 4, "version 0x%08x looks byte-swapped: big-endian GGUF files are not supported",
                   g->version);
    if (g->version < 2 || g->version > 3)
        return bad(&c, AF_ERR_FORMAT, 4, "version %u is not supported (only 2 and 3)", g->version);
    uint64_t n_t, n_kv;
    AF_TRY(rd_u64(&c, &n_t, "tensor_count"));
    AF_TRY(rd_u64(&c, &n_kv, "metadata_kv_count"));
    if (n_kv > left(&c) / MIN_KV_BYTES)
        return bad(&c, AF_ERR_FORMAT, 16, "metadata_kv_count %llu cannot fit in the %llu bytes left",
                   (unsigned long long)n_kv, (unsigned long long)left(&c));
    if (n_t > (left(&c) - n_kv * MIN_KV_BYTES) / MIN_TINFO_BYTES)
        return bad(&c, AF_ERR_FORMAT, 8, "tensor_count %llu cannot fit in the %llu bytes left",
                   (unsigned long long)n_t, (unsigned long long)left(&c));
    g->alignment = 32;
    AF_TRY(parse_kvs(im, &c, n_kv));
    AF_TRY(parse_tensor_infos(im, &c, n_t));
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        af_gguf_tensor *t = &g->tensors[i];
        set_ctx(&c, "tensor '%s'", t->name);
        uint64_t room = g->data_offset <= g->size ? g->size - g->data_offset : 0;
        if (t->offset > room || t->nbytes > room - t->offset)
            return bad(&c, AF_ERR_FORMAT, g->data_offset + (t->offset <= room ? t->offset : 0),
                       "data [%llu, +%llu bytes) relative to the data section at %llu extends past the end of the file (%llu bytes)",
                       (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                       (unsigned long long)g->data_offset, (unsigned long long)g->size);
        t->data = g->base + g->data_offset + t->offset;
    }
    AF_TRY(check_layout(g, &c));
    AF_TRY(index_keys(im, &c));
    return index_tensors(im, &c);
}

af_status af_gguf_open(const char *path, af_gguf **out) {
    if (!out || !path) return af_fail(AF_ERR_INVALID_ARG, "af_gguf_open: NULL argument");
    *out = NULL;
    int fd = af_open_regular(path, NULL); /* never blocks on a FIFO; refuses non-regular files */
    if (fd < 0) return AF_ERR_IO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return af_fail(AF_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    gguf_impl *im = af_calloc(1, sizeof *im);
    char *pcopy = im ? strdup(path) : NULL;
    if (!im || !pcopy) {
        free(im);
        close(fd);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    af_gguf *g = &im->pub;
    g->path = pcopy;
    g->fd = -1;
    g->size = (uint64_t)sb.st_size;
    if (g->size > 0) {
        if ((uint64_t)(size_t)g->size != g->size) {
            close(fd);
            af_gguf_close(g);
            return af_fail(AF_ERR_IO, "%s: file too large to map", path);
        }
        void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            af_gguf_close(g);
            return af_fail(AF_ERR_IO, "%s: cannot map %llu bytes: %s", path, (unsigned long long)sb.st_size, strerror(e));
        }
        g->base = m;
    }
    close(fd); /* the mapping stays valid without the descriptor */
    af_status st = parse(im);
    if (st != AF_OK) {
        af_gguf_close(g);
        return st;
    }
    *out = g;
    return AF_OK;
}

void af_gguf_close(af_gguf *g) {
    if (!g) return;
    gguf_impl *im = (gguf_impl *)g;
    for (uint64_t i = 0; i < g->n_kv; i++) free(g->kv[i].val.str_offsets);
    free(g->kv);
    free(g->tensors);
    free(im->kv_tab);
    free(im->t_tab);
    if (g->base) munmap((void *)g->base, (size_t)g->size);
    free(g->path);
    free(im);
}

/* ---------------------------------------------------------------------------------------------
 * Lookups
 * ------------------------------------------------------------------------------------------- */
const af_gguf_value *af_gguf_find(const af_gguf *g, const char *key) {
    const gguf_impl *im = (const gguf_impl *)g;
    if (!g || !key || !im->kv_tab) return NULL;
    size_t n = strlen(key);
    for (uint64_t h = hash_bytes(key, n) & im->kv_mask; im->kv_tab[h]; h = (h + 1) & im->kv_mask) {
        const af_gguf_kv *kv = &g->kv[im->kv_tab[h] - 1];
        if (kv->key.len == n && memcmp(kv->key.ptr, key, n) == 0) return &kv->val;
    }
    return NULL;
}

const af_gguf_tensor *af_gguf_find_tensor(const af_gguf *g, const char *name) {
    const gguf_impl *im = (const gguf_impl *)g;
    if (!g || !name || !im->t_tab) return NULL;
    for (uint64_t h = hash_bytes(name, strlen(name)) & im->t_mask; im->t_tab[h]; h = (h + 1) & im->t_mask) {
        const af_gguf_tensor *t = &g->tensors[im->t_tab[h] - 1];
        if (strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

bool af_gguf_str_eq(af_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

static bool is_uint(af_gguf_vtype t) {
    return t == AF_GGUF_UINT8 || t == AF_GGUF_UINT16 || t == AF_GGUF_UINT32 || t == AF_GGUF_UINT64 || t == AF_GGUF_BOOL;
}
static bool is_sint(af_gguf_vtype t) {
    return t == AF_GGUF_INT8 || t == AF_GGUF_INT16 || t == AF_GGUF_INT32 || t == AF_GGUF_INT64;
}

static af_status missing(const af_gguf *g, const char *key) {
    return af_fail(AF_ERR_NOT_FOUND, "%s: %s: key not found", g->path, key);
}

static af_status wrong_type(const af_gguf *g, const char *key, const af_gguf_value *v, const char *want) {
    return af_fail(AF_ERR_FORMAT, "%s: %s: has type %s, expected %s", g->path, key, af_gguf_vtype_name(v->type), want);
}

af_status af_gguf_get_i64(const af_gguf *g, const char *key, int64_t *out) {
    const af_gguf_value *v = af_gguf_find(g, key);
    if (!v) return missing(g, key);
    if (is_uint(v->type)) {
        if (v->v.u64 > (uint64_t)INT64_MAX)
            return af_fail(AF_ERR_FORMAT, "%s: %s: value %llu out of range", g->path, key, (unsigned long long)v->v.u64);
        *out = (int64_t)v->v.u64;
        return AF_OK;
    }
    if (is_sint(v->type)) {
        *out = v->v.i64;
        return AF_OK;
    }
    return wrong_type(g, key, v, "an integer");
}

af_status af_gguf_get_f32(const af_gguf *g, const char *key, float *out) {
    const af_gguf_value *v = af_gguf_find(g, key);
    if (!v) return missing(g, key);
    if (v->type == AF_GGUF_FLOAT32 || v->type == AF_GGUF_FLOAT64) {
        if (isfinite(v->v.f64) && fabs(v->v.f64) > FLT_MAX)
            return af_fail(AF_ERR_FORMAT, "%s: %s: value %g out of float range", g->path, key, v->v.f64);
        *out = (float)v->v.f64;
        return AF_OK;
    }
    if (is_uint(v->type) && v->type != AF_GGUF_BOOL) {
        *out = (float)v->v.u64;
        return AF_OK;
    }
    if (is_sint(v->type)) {
        *out = (float)v->v.i64;
        return AF_OK;
    }
    return wrong_type(g, key, v, "a number");
}

af_status af_gguf_get_bool(const af_gguf *g, const char *key, bool *out) {
    const af_gguf_value *v = af_gguf_find(g, key);
    if (!v) return missing(g, key);
    if (is_uint(v->type) && v->v.u64 <= 1) {
        *out = v->v.u64 != 0;
        return AF_OK;
    }
    if (is_sint(v->type) && (v->v.i64 == 0 || v->v.i64 == 1)) {
        *out = v->v.i64 != 0;
        return AF_OK;
    }
    return wrong_type(g, key, v, "bool (or integer 0/1)");
}

af_status af_gguf_get_str(const af_gguf *g, const char *key, af_gguf_str *out) {
    const af_gguf_value *v = af_gguf_find(g, key);
    if (!v) return missing(g, key);
    if (v->type != AF_GGUF_STRING) return wrong_type(g, key, v, "string");
    *out = v->v.str;
    return AF_OK;
}

af_status af_gguf_get_i64_or(const af_gguf *g, const char *key, int64_t def, int64_t *out) {
    if (!af_gguf_find(g, key)) {
        *out = def;
        return AF_OK;
    }
    return af_gguf_get_i64(g, key, out);
}

af_status af_gguf_get_f32_or(const af_gguf *g, const char *key, float def, float *out) {
    if (!af_gguf_find(g, key)) {
        *out = def;
        return AF_OK;
    }
    return af_gguf_get_f32(g, key, out);
}

af_status af_gguf_get_bool_or(const af_gguf *g, const char *key, bool def, bool *out) {
    if (!af_gguf_find(g, key)) {
        *out = def;
        return AF_OK;
    }
    return af_gguf_get_bool(g, key, out);
}

/* ---------------------------------------------------------------------------------------------
 * Array access (the arrays were validated on open, so these walks trust the encoding)
 * ------------------------------------------------------------------------------------------- */

/* Encoded size of one already-validated value of type t at p (arrays include their 12-byte
 * element type + count header). */
static uint64_t value_span(const uint8_t *p, uint32_t t) {
    if (t == AF_GGUF_STRING) return 8 + le64(p);
    if (t != AF_GGUF_ARRAY) return scalar_size(t);
    uint32_t et = le32(p);
    uint64_t n = le64(p + 4), off = 12;
    if (scalar_size(et)) return off + n * scalar_size(et);
    for (uint64_t i = 0; i < n; i++) off += value_span(p + off, et);
    return off;
}

af_gguf_str af_gguf_arr_str(const af_gguf_value *arr, uint64_t i) {
    af_gguf_str s = {"", 0};
    if (!arr || arr->type != AF_GGUF_ARRAY || arr->arr_type != AF_GGUF_STRING || i >= arr->arr_n) return s;
    uint64_t off = 0;
    if (arr->str_offsets) {
        off = arr->str_offsets[i];
    } else {
        for (uint64_t k = 0; k < i; k++) off += 8 + le64(arr->arr_data + off);
    }
    s.len = le64(arr->arr_data + off);
    s.ptr = (const char *)arr->arr_data + off + 8;
    return s;
}

int64_t af_gguf_arr_int(const af_gguf_value *arr, uint64_t i) {
    if (!arr || arr->type != AF_GGUF_ARRAY || i >= arr->arr_n) return 0;
    uint64_t sz = scalar_size(arr->arr_type);
    const uint8_t *p = arr->arr_data + i * sz;
    switch (arr->arr_type) {
    case AF_GGUF_UINT8: case AF_GGUF_BOOL: return p[0];
    case AF_GGUF_INT8: return (int8_t)p[0];
    case AF_GGUF_UINT16: return le16(p);
    case AF_GGUF_INT16: return (int16_t)le16(p);
    case AF_GGUF_UINT32: return le32(p);
    case AF_GGUF_INT32: return (int32_t)le32(p);
    case AF_GGUF_UINT64: case AF_GGUF_INT64: return (int64_t)le64(p);
    default: return 0;
    }
}

double af_gguf_arr_float(const af_gguf_value *arr, uint64_t i) {
    if (!arr || arr->type != AF_GGUF_ARRAY || i >= arr->arr_n) return 0;
    const uint8_t *p = arr->arr_data + i * scalar_size(arr->arr_type);
    switch (arr->arr_type) {
    case AF_GGUF_FLOAT32: return lef32(p);
    case AF_GGUF_FLOAT64: return lef64(p);
    case AF_GGUF_UINT64: return (double)le64(p);
    default: return (double)af_gguf_arr_int(arr, i);
    }
}

af_status af_gguf_arr_sub(const af_gguf_value *arr, uint64_t i, af_gguf_value *out) {
    if (!arr || !out || arr->type != AF_GGUF_ARRAY || arr->arr_type != AF_GGUF_ARRAY || i >= arr->arr_n)
        return af_fail(AF_ERR_INVALID_ARG, "af_gguf_arr_sub: not an array of arrays or index %llu out of range",
                       (unsigned long long)i);
    const uint8_t *p = arr->arr_data;
    for (uint64_t k = 0; k < i; k++) p += value_span(p, AF_GGUF_ARRAY);
    memset(out, 0, sizeof *out);
    out->type = AF_GGUF_ARRAY;
    out->arr_type = (af_gguf_vtype)le32(p);
    out->arr_n = le64(p + 4);
    out->arr_data = p + 12;
    out->arr_bytes = value_span(p, AF_GGUF_ARRAY) - 12;
    out->str_offsets = NULL;
    return AF_OK;
}
