/*
 * gguf_write.c — GGUF v3 writer (see gguf_write.h for the layout and the API contract).
 * Format: ggml docs/gguf.md / docs/FORMATS.md §1. Written from the specification.
 */
#include "formats/gguf_write.h"

#include "core/blocks.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wtensor {
    char name[64];
    uint32_t type, n_dims;
    int64_t ne[4];
    const void *data; /* borrowed or == owned */
    uint8_t *owned;
    uint64_t nbytes;
} wtensor;

struct af_gguf_writer {
    af_gguf_enc kvs;        /* encoded KVs, back to back */
    uint64_t n_kv;
    char **keys;            /* [n_kv] copies, for the duplicate check */
    uint64_t keys_cap;
    wtensor *t;             /* [n_t] */
    uint64_t n_t, t_cap;
    uint32_t alignment;
    size_t align_pos;       /* offset in kvs of the general.alignment u32 value (when align_kv) */
    bool align_kv;
    af_status err;          /* sticky */
    char errmsg[256];
};

/* ---- encoder ---- */
void af_gguf_enc_bytes(af_gguf_enc *e, const void *p, size_t n) {
    if (e->oom || n == 0) return;
    if (n > e->cap - e->len) {
        size_t nc = e->cap ? e->cap : 256;
        while (nc - e->len < n) {
            if (nc > SIZE_MAX / 2) {
                e->oom = true;
                return;
            }
            nc *= 2;
        }
        uint8_t *q = realloc(e->data, nc);
        if (!q) {
            e->oom = true;
            return;
        }
        e->data = q;
        e->cap = nc;
    }
    memcpy(e->data + e->len, p, n);
    e->len += n;
}

static void enc_le(af_gguf_enc *e, uint64_t v, int nbytes) {
    uint8_t b[8];
    for (int i = 0; i < nbytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    af_gguf_enc_bytes(e, b, (size_t)nbytes);
}

void af_gguf_enc_u8(af_gguf_enc *e, uint8_t v) { enc_le(e, v, 1); }
void af_gguf_enc_u16(af_gguf_enc *e, uint16_t v) { enc_le(e, v, 2); }
void af_gguf_enc_u32(af_gguf_enc *e, uint32_t v) { enc_le(e, v, 4); }
void af_gguf_enc_u64(af_gguf_enc *e, uint64_t v) { enc_le(e, v, 8); }
void af_gguf_enc_f32(af_gguf_enc *e, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    enc_le(e, u, 4);
}
void af_gguf_enc_f64(af_gguf_enc *e, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    enc_le(e, u, 8);
}
void af_gguf_enc_str(af_gguf_enc *e, const char *s, size_t len) {
    af_gguf_enc_u64(e, len);
    af_gguf_enc_bytes(e, s, len);
}
void af_gguf_enc_arr_header(af_gguf_enc *e, uint32_t elem_type, uint64_t n) {
    af_gguf_enc_u32(e, elem_type);
    af_gguf_enc_u64(e, n);
}
void af_gguf_enc_free(af_gguf_enc *e) {
    free(e->data);
    memset(e, 0, sizeof *e);
}

/* ---- writer ---- */
static af_status wfail(af_gguf_writer *w, af_status st, const char *fmt, ...) AF_PRINTF(3, 4);
static af_status wfail(af_gguf_writer *w, af_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
    w->err = st;
    return af_fail(st, "%s", w->errmsg);
}

static af_status sticky(const af_gguf_writer *w) {
    return w->err == AF_OK ? AF_OK : af_fail(w->err, "%s", w->errmsg);
}

af_status af_gguf_writer_new(af_gguf_writer **out) {
    *out = af_calloc(1, sizeof **out);
    if (!*out) return af_fail(AF_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = 32;
    return AF_OK;
}

void af_gguf_writer_free(af_gguf_writer *w) {
    if (!w) return;
    af_gguf_enc_free(&w->kvs);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].owned);
    free(w->t);
    free(w);
}

/* Append key + value type to the KV buffer after the key checks. */
static af_status begin_kv(af_gguf_writer *w, const char *key, uint32_t type, bool allow_dup) {
    AF_TRY(sticky(w));
    size_t kl = key ? strlen(key) : 0;
    if (kl == 0 || kl > 65535) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: key: empty or longer than 65535 bytes");
    if (!allow_dup)
        for (uint64_t i = 0; i < w->n_kv; i++)
            if (strcmp(w->keys[i], key) == 0) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: duplicate key", key);
    if (w->n_kv == w->keys_cap) {
        uint64_t nc = w->keys_cap ? w->keys_cap * 2 : 32;
        char **q = af_realloc_array(w->keys, (size_t)nc, sizeof *q);
        if (!q) return wfail(w, AF_ERR_NOMEM, "gguf writer: %s: out of memory", key);
        w->keys = q;
        w->keys_cap = nc;
    }
    char *kc = strdup(key);
    if (!kc) return wfail(w, AF_ERR_NOMEM, "gguf writer: %s: out of memory", key);
    w->keys[w->n_kv++] = kc;
    af_gguf_enc_str(&w->kvs, key, kl);
    af_gguf_enc_u32(&w->kvs, type);
    return AF_OK;
}

static af_status end_kv(af_gguf_writer *w, const char *key) {
    if (w->kvs.oom) return wfail(w, AF_ERR_NOMEM, "gguf writer: %s: out of memory", key);
    return AF_OK;
}

#define SCALAR_ADD(fn, ctype, vt, encfn, conv)                                                   \
    af_status fn(af_gguf_writer *w, const char *key, ctype v) {                                \
        AF_TRY(begin_kv(w, key, vt, false));                                                    \
        encfn(&w->kvs, conv);                                                                   \
        return end_kv(w, key);                                                                  \
    }
SCALAR_ADD(af_gguf_writer_add_u8, uint8_t, AF_GGUF_UINT8, af_gguf_enc_u8, v)
SCALAR_ADD(af_gguf_writer_add_i8, int8_t, AF_GGUF_INT8, af_gguf_enc_u8, (uint8_t)v)
SCALAR_ADD(af_gguf_writer_add_u16, uint16_t, AF_GGUF_UINT16, af_gguf_enc_u16, v)
SCALAR_ADD(af_gguf_writer_add_i16, int16_t, AF_GGUF_INT16, af_gguf_enc_u16, (uint16_t)v)
SCALAR_ADD(af_gguf_writer_add_i32, int32_t, AF_GGUF_INT32, af_gguf_enc_u32, (uint32_t)v)
SCALAR_ADD(af_gguf_writer_add_f32, float, AF_GGUF_FLOAT32, af_gguf_enc_f32, v)
SCALAR_ADD(af_gguf_writer_add_bool, bool, AF_GGUF_BOOL, af_gguf_enc_u8, (uint8_t)(v ? 1 : 0))
SCALAR_ADD(af_gguf_writer_add_u64, uint64_t, AF_GGUF_UINT64, af_gguf_enc_u64, v)
SCALAR_ADD(af_gguf_writer_add_i64, int64_t, AF_GGUF_INT64, af_gguf_enc_u64, (uint64_t)v)
SCALAR_ADD(af_gguf_writer_add_f64, double, AF_GGUF_FLOAT64, af_gguf_enc_f64, v)

static bool is_pow2(uint64_t a) { return a && !(a & (a - 1)); }

af_status af_gguf_writer_add_u32(af_gguf_writer *w, const char *key, uint32_t v) {
    bool is_align = key && strcmp(key, "general.alignment") == 0;
    if (is_align) {
        AF_TRY(sticky(w));
        if (!is_pow2(v) || v > (1u << 30))
            return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: general.alignment: %u is not a power of two <= 2^30", v);
    }
    AF_TRY(begin_kv(w, key, AF_GGUF_UINT32, false));
    if (is_align) {
        w->align_pos = w->kvs.len;
        w->align_kv = true;
        w->alignment = v;
    }
    af_gguf_enc_u32(&w->kvs, v);
    return end_kv(w, key);
}

af_status af_gguf_writer_set_alignment(af_gguf_writer *w, uint32_t alignment) {
    AF_TRY(sticky(w));
    if (!is_pow2(alignment) || alignment > (1u << 30))
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: alignment %u is not a power of two <= 2^30", alignment);
    if (w->align_kv) {
        for (int i = 0; i < 4; i++) w->kvs.data[w->align_pos + i] = (uint8_t)(alignment >> (8 * i));
        w->alignment = alignment;
        return AF_OK;
    }
    if (alignment == 32) return AF_OK;
    return af_gguf_writer_add_u32(w, "general.alignment", alignment);
}

af_status af_gguf_writer_add_strn(af_gguf_writer *w, const char *key, const char *v, size_t len) {
    AF_TRY(begin_kv(w, key, AF_GGUF_STRING, false));
    af_gguf_enc_str(&w->kvs, v, len);
    return end_kv(w, key);
}

af_status af_gguf_writer_add_str(af_gguf_writer *w, const char *key, const char *v) {
    return af_gguf_writer_add_strn(w, key, v ? v : "", v ? strlen(v) : 0);
}

static size_t elem_size(af_gguf_vtype t) {
    switch (t) {
    case AF_GGUF_UINT8: case AF_GGUF_INT8: case AF_GGUF_BOOL: return 1;
    case AF_GGUF_UINT16: case AF_GGUF_INT16: return 2;
    case AF_GGUF_UINT32: case AF_GGUF_INT32: case AF_GGUF_FLOAT32: return 4;
    case AF_GGUF_UINT64: case AF_GGUF_INT64: case AF_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

af_status af_gguf_writer_add_arr(af_gguf_writer *w, const char *key, af_gguf_vtype et, const void *data, uint64_t n) {
    AF_TRY(sticky(w));
    size_t es = elem_size(et);
    if (es == 0) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: array element type %d is not a scalar", key, (int)et);
    if (n && !data) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: NULL array data", key);
    const uint8_t *p = data;
    if (et == AF_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (p[i] > 1) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: bool element %llu is %u", key, (unsigned long long)i, p[i]);
    AF_TRY(begin_kv(w, key, AF_GGUF_ARRAY, false));
    af_gguf_enc_arr_header(&w->kvs, et, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        switch (es) {
        case 1: v = p[i]; break;
        case 2: { uint16_t x; memcpy(&x, p + 2 * i, 2); v = x; } break;
        case 4: { uint32_t x; memcpy(&x, p + 4 * i, 4); v = x; } break;
        default: memcpy(&v, p + 8 * i, 8); break;
        }
        enc_le(&w->kvs, v, (int)es);
    }
    return end_kv(w, key);
}

af_status af_gguf_writer_add_arr_str(af_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    AF_TRY(sticky(w));
    if (n && !strs) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: NULL string array", key);
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: string %llu is NULL", key, (unsigned long long)i);
    AF_TRY(begin_kv(w, key, AF_GGUF_ARRAY, false));
    af_gguf_enc_arr_header(&w->kvs, AF_GGUF_STRING, n);
    for (uint64_t i = 0; i < n; i++) af_gguf_enc_str(&w->kvs, strs[i], strlen(strs[i]));
    return end_kv(w, key);
}

af_status af_gguf_writer_add_raw(af_gguf_writer *w, const char *key, uint32_t type, const af_gguf_enc *e,
                                 bool allow_dup_key) {
    AF_TRY(sticky(w));
    if (!e || e->oom) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: encoded value missing or incomplete", key ? key : "?");
    AF_TRY(begin_kv(w, key, type, allow_dup_key));
    af_gguf_enc_bytes(&w->kvs, e->data, e->len);
    return end_kv(w, key);
}

static af_status add_tensor(af_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                            const void *data, size_t nbytes, bool copy) {
    AF_TRY(sticky(w));
    size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl >= 64) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor name '%s': must be 1..63 bytes", name ? name : "");
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': duplicate name", name);
    if (n_dims < 1 || n_dims > 4 || !ne)
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u not in 1..4", name, n_dims);
    size_t bs = type < AF_TYPE_COUNT ? af_type_block_size(type) : 0; /* NF4 has no GGUF id */
    if (bs == 0) return wfail(w, AF_ERR_UNSUPPORTED, "gguf writer: tensor '%s': unknown type id %u", name, type);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    memcpy(t.name, name, nl + 1);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%u] = %lld < 1", name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
    }
    uint64_t nb = af_row_bytes(type, t.ne[0]);
    if (nb == 0)
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] = %lld not a multiple of the %s block size %zu",
                     name, (long long)t.ne[0], af_type_name(type), bs);
    for (int d = 1; d < 4; d++)
        if (__builtin_mul_overflow(nb, (uint64_t)t.ne[d], &nb)) return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
    if (nb != nbytes || !data)
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: tensor '%s': %zu bytes given, %llu expected", name, nbytes, (unsigned long long)nb);
    t.nbytes = nb;
    if (copy) {
        t.owned = af_malloc(nbytes ? nbytes : 1);
        if (!t.owned) return wfail(w, AF_ERR_NOMEM, "gguf writer: tensor '%s': out of memory", name);
        memcpy(t.owned, data, nbytes);
        t.data = t.owned;
    } else {
        t.data = data;
    }
    if (w->n_t == w->t_cap) {
        uint64_t nc = w->t_cap ? w->t_cap * 2 : 16;
        wtensor *q = af_realloc_array(w->t, (size_t)nc, sizeof *q);
        if (!q) {
            free(t.owned);
            return wfail(w, AF_ERR_NOMEM, "gguf writer: tensor '%s': out of memory", name);
        }
        w->t = q;
        w->t_cap = nc;
    }
    w->t[w->n_t++] = t;
    return AF_OK;
}

af_status af_gguf_writer_add_tensor(af_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, size_t nbytes) {
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, true);
}

af_status af_gguf_writer_add_tensor_ref(af_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                        const int64_t *ne, const void *data, size_t nbytes) {
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, false);
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

/* Header bytes (magic .. tensor infos, padded to the alignment). */
static af_status build_head(const af_gguf_writer *w, af_gguf_enc *h) {
    memset(h, 0, sizeof *h);
    af_gguf_enc_bytes(h, "GGUF", 4);
    af_gguf_enc_u32(h, 3);
    af_gguf_enc_u64(h, w->n_t);
    af_gguf_enc_u64(h, w->n_kv);
    af_gguf_enc_bytes(h, w->kvs.data, w->kvs.len);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        af_gguf_enc_str(h, t->name, strlen(t->name));
        af_gguf_enc_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) af_gguf_enc_u64(h, (uint64_t)t->ne[d]);
        af_gguf_enc_u32(h, t->type);
        af_gguf_enc_u64(h, off);
        off += t->nbytes + pad_to(t->nbytes, w->alignment);
    }
    static const uint8_t zeros[64];
    for (uint64_t p = pad_to(h->len, w->alignment); p > 0;) {
        size_t k = p > sizeof zeros ? sizeof zeros : (size_t)p;
        af_gguf_enc_bytes(h, zeros, k);
        p -= k;
    }
    if (h->oom) {
        af_gguf_enc_free(h);
        return af_fail(AF_ERR_NOMEM, "gguf writer: header: out of memory");
    }
    return AF_OK;
}

uint64_t af_gguf_writer_size(const af_gguf_writer *w) {
    uint64_t n = 24 + w->kvs.len;
    for (uint64_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->t[i].name) + 4 + 8ull * w->t[i].n_dims + 4 + 8;
    n += pad_to(n, w->alignment);
    for (uint64_t i = 0; i < w->n_t; i++) n += w->t[i].nbytes + pad_to(w->t[i].nbytes, w->alignment);
    return n;
}

af_status af_gguf_writer_write_mem(const af_gguf_writer *w, uint8_t **buf, size_t *len) {
    AF_TRY(sticky(w));
    uint64_t total = af_gguf_writer_size(w);
    af_gguf_enc h;
    AF_TRY(build_head(w, &h));
    uint8_t *out = af_calloc(1, (size_t)total);
    if (!out) {
        af_gguf_enc_free(&h);
        return af_fail(AF_ERR_NOMEM, "gguf writer: cannot allocate %llu bytes", (unsigned long long)total);
    }
    memcpy(out, h.data, h.len);
    uint64_t pos = h.len;
    for (uint64_t i = 0; i < w->n_t; i++) {
        if (w->t[i].nbytes) memcpy(out + pos, w->t[i].data, (size_t)w->t[i].nbytes);
        pos += w->t[i].nbytes + pad_to(w->t[i].nbytes, w->alignment);
    }
    af_gguf_enc_free(&h);
    AF_CHECK(pos == total);
    *buf = out;
    *len = (size_t)total;
    return AF_OK;
}

static bool write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

af_status af_gguf_writer_write_file(const af_gguf_writer *w, const char *path) {
    AF_TRY(sticky(w));
    af_gguf_enc h;
    AF_TRY(build_head(w, &h));
    size_t pl = strlen(path);
    char *tmp = af_malloc(pl + 16);
    char *dcopy = strdup(path);
    if (!tmp || !dcopy) {
        free(tmp);
        free(dcopy);
        af_gguf_enc_free(&h);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    af_status st = AF_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = af_fail(AF_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(errno));
        goto done;
    }
    static const uint8_t zeros[256];
    bool ok = write_all(fd, h.data, h.len);
    for (uint64_t i = 0; ok && i < w->n_t; i++) {
        ok = write_all(fd, w->t[i].data, (size_t)w->t[i].nbytes);
        uint64_t p = pad_to(w->t[i].nbytes, w->alignment);
        while (ok && p > 0) {
            size_t k = p > sizeof zeros ? sizeof zeros : (size_t)p;
            ok = write_all(fd, zeros, k);
            p -= k;
        }
    }
    if (ok) ok = fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        st = af_fail(AF_ERR_IO, "%s: write failed: %s", path, strerror(e));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        st = af_fail(AF_ERR_IO, "%s: cannot rename temporary file into place: %s", path, strerror(e));
        goto done;
    }
    int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* best effort: persist the rename */
        (void)fsync(dfd);
        close(dfd);
    }
done:
    free(tmp);
    free(dcopy);
    af_gguf_enc_free(&h);
    return st;
}

/* ---- copying a KV of an open file ---- */
af_status af_gguf_writer_copy_kv(af_gguf_writer *w, const af_gguf_kv *kv) {
    AF_TRY(sticky(w));
    char key[65536];
    if (!kv || kv->key.len == 0 || kv->key.len >= sizeof key)
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: copy_kv: NULL or bad key");
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = '\0';
    if (strlen(key) != kv->key.len) /* the writer's keys are C strings: it could not copy it exactly */
        return wfail(w, AF_ERR_FORMAT, "gguf writer: copy_kv: key '%s...' contains a NUL byte", key);
    const af_gguf_value *v = &kv->val;
    if (strcmp(key, "general.alignment") == 0 && v->type == AF_GGUF_UINT32) /* keeps the writer's alignment in step */
        return af_gguf_writer_set_alignment(w, (uint32_t)v->v.u64);
    af_gguf_enc e = {0};
    switch (v->type) {
    case AF_GGUF_UINT8: case AF_GGUF_INT8: case AF_GGUF_BOOL: af_gguf_enc_u8(&e, (uint8_t)v->v.u64); break;
    case AF_GGUF_UINT16: case AF_GGUF_INT16: af_gguf_enc_u16(&e, (uint16_t)v->v.u64); break;
    case AF_GGUF_UINT32: case AF_GGUF_INT32: af_gguf_enc_u32(&e, (uint32_t)v->v.u64); break;
    case AF_GGUF_UINT64: case AF_GGUF_INT64: af_gguf_enc_u64(&e, v->v.u64); break;
    case AF_GGUF_FLOAT32: af_gguf_enc_f32(&e, (float)v->v.f64); break;
    case AF_GGUF_FLOAT64: af_gguf_enc_f64(&e, v->v.f64); break;
    case AF_GGUF_STRING: af_gguf_enc_str(&e, v->v.str.ptr, (size_t)v->v.str.len); break;
    case AF_GGUF_ARRAY:
        af_gguf_enc_arr_header(&e, (uint32_t)v->arr_type, v->arr_n);
        af_gguf_enc_bytes(&e, v->arr_data, (size_t)v->arr_bytes); /* elements verbatim (nested too) */
        break;
    default:
        return wfail(w, AF_ERR_INVALID_ARG, "gguf writer: %s: unknown value type %d", key, (int)v->type);
    }
    af_status st = af_gguf_writer_add_raw(w, key, (uint32_t)v->type, &e, false);
    af_gguf_enc_free(&e);
    return st;
}
