/*
 * safetensors.c — SafeTensors reader/writer. Format and validation rules: see safetensors.h
 * (huggingface/safetensors README; reference checks in safetensors/src/tensor.rs).
 */
#include "formats/safetensors.h"

#include "core/fsutil.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct af_st_file {
    char *label;           /* path or label, owned */
    void *map;             /* mmap'ed image (NULL for memory images) */
    size_t map_size;
    const uint8_t *image;  /* whole file */
    size_t size;
    const uint8_t *buf;    /* data buffer = image + 8 + N */
    uint64_t buf_size;
    cJSON *root;           /* parsed header: tensor names and metadata strings point into it */
    af_st_tensor *tensors; /* [n], sorted by (begin, end) */
    size_t n;
    size_t *by_name;       /* [n] indices into tensors, sorted by name */
    const char **meta_k, **meta_v;
    size_t n_meta;
};

static const struct {
    const char *name;
    int bits;
} k_dtypes[AF_ST_DTYPE_COUNT] = {
    [AF_ST_BOOL] = {"BOOL", 8},       [AF_ST_U8] = {"U8", 8},           [AF_ST_I8] = {"I8", 8},
    [AF_ST_F8_E5M2] = {"F8_E5M2", 8}, [AF_ST_F8_E4M3] = {"F8_E4M3", 8}, [AF_ST_F8_E8M0] = {"F8_E8M0", 8},
    [AF_ST_I16] = {"I16", 16},        [AF_ST_U16] = {"U16", 16},        [AF_ST_F16] = {"F16", 16},
    [AF_ST_BF16] = {"BF16", 16},      [AF_ST_I32] = {"I32", 32},        [AF_ST_U32] = {"U32", 32},
    [AF_ST_F32] = {"F32", 32},        [AF_ST_F64] = {"F64", 64},        [AF_ST_I64] = {"I64", 64},
    [AF_ST_U64] = {"U64", 64},        [AF_ST_C64] = {"C64", 64},        [AF_ST_F4] = {"F4", 4},
    [AF_ST_F6_E2M3] = {"F6_E2M3", 6}, [AF_ST_F6_E3M2] = {"F6_E3M2", 6},
};

const char *af_st_dtype_name(af_st_dtype t) {
    return (unsigned)t < AF_ST_DTYPE_COUNT ? k_dtypes[t].name : "?";
}
int af_st_dtype_bits(af_st_dtype t) { return (unsigned)t < AF_ST_DTYPE_COUNT ? k_dtypes[t].bits : 0; }
int af_st_dtype_from_name(const char *s) {
    for (int i = 0; i < AF_ST_DTYPE_COUNT; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) return i;
    return -1;
}

/* Index of the first byte that is not valid UTF-8 (RFC 3629: no overlongs, no surrogates,
 * max U+10FFFF), or n if all valid. */
static size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return i;
        if (i + len > n) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += len;
    }
    return n;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is a non-negative integer exactly representable in a double (<= 2^53). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_offset(const void *a, const void *b) {
    const af_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const af_st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

void af_st_close(af_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    cJSON_Delete(f->root);
    free(f->tensors);
    free(f->by_name);
    free(f->meta_k);
    free(f->meta_v);
    free(f->label);
    free(f);
}

/* Parse one tensor entry `e` (named e->string) into t. */
static af_status parse_entry(const af_st_file *f, const cJSON *e, af_st_tensor *t) {
    const char *L = f->label, *nm = e->string;
    if (!cJSON_IsObject(e)) return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': entry is not a JSON object", L, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': missing or non-string \"dtype\"", L, nm);
    if (!cJSON_IsArray(sh)) return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': missing or non-array \"shape\"", L, nm);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': \"data_offsets\" must be an array [begin, end]", L, nm);
    int d = af_st_dtype_from_name(dt->valuestring);
    if (d < 0) return af_fail(AF_ERR_UNSUPPORTED, "%s: header: tensor '%s': unknown dtype \"%s\"", L, nm, dt->valuestring);
    t->name = nm;
    t->dtype = (af_st_dtype)d;
    int nd = cJSON_GetArraySize(sh);
    if (nd > AF_ST_MAX_DIMS)
        return af_fail(AF_ERR_UNSUPPORTED, "%s: header: tensor '%s': %d dimensions (at most %d supported)", L, nm, nd,
                       AF_ST_MAX_DIMS);
    t->n_dims = nd;
    uint64_t n_elem = 1;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, sh) {
        uint64_t dim;
        if (!json_uint(v, &dim))
            return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': shape[%d] is not a non-negative integer", L, nm, i);
        if (__builtin_mul_overflow(n_elem, dim, &n_elem))
            return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': shape product overflows", L, nm);
        t->shape[i++] = (int64_t)dim;
    }
    t->n_elem = n_elem;
    if (!json_uint(cJSON_GetArrayItem(off, 0), &t->begin) || !json_uint(cJSON_GetArrayItem(off, 1), &t->end))
        return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': data_offsets are not non-negative integers", L, nm);
    if (t->end < t->begin)
        return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': data_offsets end %llu < begin %llu", L, nm,
                       (unsigned long long)t->end, (unsigned long long)t->begin);
    uint64_t bits;
    if (__builtin_mul_overflow(n_elem, (uint64_t)k_dtypes[d].bits, &bits))
        return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': byte size overflows", L, nm);
    if (bits % 8 != 0)
        return af_fail(AF_ERR_FORMAT, "%s: header: tensor '%s': %llu elements of %s do not fill whole bytes", L, nm,
                       (unsigned long long)n_elem, k_dtypes[d].name);
    if (bits / 8 != t->end - t->begin)
        return af_fail(AF_ERR_FORMAT,
                       "%s: header: tensor '%s': shape x dtype %s gives %llu bytes but data_offsets [%llu, %llu] span %llu",
                       L, nm, k_dtypes[d].name, (unsigned long long)(bits / 8), (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    return AF_OK;
}

static af_status parse_image(af_st_file *f) {
    const char *L = f->label;
    if (f->size < 8)
        return af_fail(AF_ERR_FORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length", L, f->size);
    uint64_t N = le64(f->image);
    if (N > AF_ST_MAX_HEADER)
        return af_fail(AF_ERR_FORMAT, "%s: header length %llu at offset 0 exceeds the limit of %llu bytes", L,
                       (unsigned long long)N, AF_ST_MAX_HEADER);
    if (N > f->size - 8)
        return af_fail(AF_ERR_FORMAT, "%s: header length %llu at offset 0 runs past the end of the file (%zu bytes)", L,
                       (unsigned long long)N, f->size);
    const uint8_t *h = f->image + 8;
    if (N < 2 || h[0] != '{')
        return af_fail(AF_ERR_FORMAT, "%s: header at offset 8 does not start with '{'", L);
    size_t bad = utf8_invalid_at(h, (size_t)N);
    if (bad != N) return af_fail(AF_ERR_FORMAT, "%s: header: invalid UTF-8 at offset %zu", L, 8 + bad);
    const char *end = NULL;
    f->root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)N, &end, 0);
    if (!f->root) {
        size_t at = end ? (size_t)((const uint8_t *)end - h) : 0;
        return af_fail(AF_ERR_FORMAT, "%s: header: malformed JSON at offset %zu", L, 8 + at);
    }
    for (const uint8_t *p = (const uint8_t *)end; p < h + N; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return af_fail(AF_ERR_FORMAT, "%s: header: unexpected byte 0x%02x after the JSON object at offset %zu", L,
                           *p, (size_t)(p - f->image));
    if (!cJSON_IsObject(f->root)) return af_fail(AF_ERR_FORMAT, "%s: header: not a JSON object", L);
    f->buf = h + N;
    f->buf_size = f->size - 8 - N;

    size_t n = 0, n_meta = 0;
    const cJSON *e;
    int seen_meta = 0;
    cJSON_ArrayForEach(e, f->root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) return af_fail(AF_ERR_FORMAT, "%s: header: duplicate \"__metadata__\"", L);
            if (!cJSON_IsObject(e)) return af_fail(AF_ERR_FORMAT, "%s: header: \"__metadata__\" is not an object", L);
            const cJSON *m;
            cJSON_ArrayForEach(m, e) {
                if (!cJSON_IsString(m))
                    return af_fail(AF_ERR_FORMAT, "%s: header: __metadata__ value of '%s' is not a string", L, m->string);
                n_meta++;
            }
        } else {
            n++;
        }
    }
    f->tensors = af_calloc(n ? n : 1, sizeof *f->tensors);
    f->by_name = af_calloc(n ? n : 1, sizeof *f->by_name);
    f->meta_k = af_calloc(n_meta ? n_meta : 1, sizeof *f->meta_k);
    f->meta_v = af_calloc(n_meta ? n_meta : 1, sizeof *f->meta_v);
    if (!f->tensors || !f->by_name || !f->meta_k || !f->meta_v) return af_fail(AF_ERR_NOMEM, "%s: out of memory", L);
    size_t i = 0;
    cJSON_ArrayForEach(e, f->root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            const cJSON *m;
            cJSON_ArrayForEach(m, e) {
                f->meta_k[f->n_meta] = m->string;
                f->meta_v[f->n_meta++] = m->valuestring;
            }
            continue;
        }
        AF_TRY(parse_entry(f, e, &f->tensors[i]));
        i++;
    }
    f->n = n;
    qsort(f->tensors, n, sizeof *f->tensors, cmp_offset);
    uint64_t expect = 0;
    for (i = 0; i < n; i++) {
        af_st_tensor *t = &f->tensors[i];
        if (t->begin != expect)
            return af_fail(AF_ERR_FORMAT,
                           "%s: header: tensor '%s': data_offsets begin %llu but the previous tensor ends at %llu (%s)",
                           L, t->name, (unsigned long long)t->begin, (unsigned long long)expect,
                           t->begin < expect ? "overlap" : "gap");
        expect = t->end;
        t->data = f->buf + t->begin;
        f->by_name[i] = i;
    }
    if (expect != f->buf_size)
        return af_fail(AF_ERR_FORMAT,
                       "%s: tensors cover %llu bytes but the data buffer at offset %llu holds %llu bytes", L,
                       (unsigned long long)expect, (unsigned long long)(8 + N), (unsigned long long)f->buf_size);
    qsort_r(f->by_name, n, sizeof *f->by_name, cmp_name_idx, f->tensors);
    for (i = 1; i < n; i++)
        if (strcmp(f->tensors[f->by_name[i - 1]].name, f->tensors[f->by_name[i]].name) == 0)
            return af_fail(AF_ERR_FORMAT, "%s: header: duplicate tensor name '%s'", L, f->tensors[f->by_name[i]].name);
    return AF_OK;
}

af_status af_st_open_memory(const void *data, size_t size, const char *label, af_st_file **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_st_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return af_fail(AF_ERR_INVALID_ARG, "af_st_open_memory: NULL data");
    af_st_file *f = af_calloc(1, sizeof *f);
    if (!f) return af_fail(AF_ERR_NOMEM, "out of memory");
    f->label = strdup(label ? label : "<memory>");
    if (!f->label) {
        free(f);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    f->image = data;
    f->size = size;
    af_status st = parse_image(f);
    if (st != AF_OK) {
        af_st_close(f);
        return st;
    }
    *out = f;
    return AF_OK;
}

af_status af_st_open(const char *path, af_st_file **out) {
    if (!out || !path) return af_fail(AF_ERR_INVALID_ARG, "af_st_open: NULL argument");
    *out = NULL;
    int fd = af_open_regular(path, NULL); /* never blocks on a FIFO; refuses non-regular files */
    if (fd < 0) return AF_ERR_IO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return af_fail(AF_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return af_fail(AF_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
    }
    close(fd);
    af_st_file *f = af_calloc(1, sizeof *f);
    if (!f || !(f->label = strdup(path))) {
        free(f);
        if (map) munmap(map, size);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    f->map = map;
    f->map_size = size;
    f->image = map;
    f->size = size;
    af_status st = parse_image(f);
    if (st != AF_OK) {
        af_st_close(f);
        return st;
    }
    *out = f;
    return AF_OK;
}

size_t af_st_count(const af_st_file *f) { return f->n; }
const af_st_tensor *af_st_tensor_at(const af_st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }
const char *af_st_path(const af_st_file *f) { return f->label; }
size_t af_st_meta_count(const af_st_file *f) { return f->n_meta; }

void af_st_meta_at(const af_st_file *f, size_t i, const char **key, const char **value) {
    *key = i < f->n_meta ? f->meta_k[i] : NULL;
    *value = i < f->n_meta ? f->meta_v[i] : NULL;
}

const char *af_st_meta_get(const af_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
    return NULL;
}

const af_st_tensor *af_st_find(const af_st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const af_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

af_status af_st_read_f32(const af_st_file *f, const af_st_tensor *t, float *dst, size_t n) {
    if (!t || (uint64_t)n != t->n_elem)
        return af_fail(AF_ERR_INVALID_ARG, "%s: tensor '%s': asked for %zu elements, tensor has %llu", f->label,
                       t ? t->name : "?", n, t ? (unsigned long long)t->n_elem : 0ull);
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case AF_ST_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                         (uint32_t)p[4 * i + 3] << 24;
            memcpy(&dst[i], &u, 4);
        }
        return AF_OK;
    case AF_ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = af_fp16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return AF_OK;
    case AF_ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = af_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return AF_OK;
    case AF_ST_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = le64(p + 8 * i);
            double d;
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
        }
        return AF_OK;
    default:
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s cannot be read as f32", f->label, t->name,
                       af_st_dtype_name(t->dtype));
    }
}

/* ---------------------------------------------------------------- writer */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* f32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN. */
static uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

typedef struct wt_info {
    const af_st_write_tensor *t;
    uint64_t n_elem, bytes;
} wt_info;

static int cmp_write_order(const void *a, const void *b) {
    const wt_info *x = a, *y = b;
    int bx = af_st_dtype_bits(x->t->dtype), by = af_st_dtype_bits(y->t->dtype);
    if (bx != by) return bx > by ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static af_status write_tensor_data(af_atomic_file *af, const wt_info *w) {
    const af_st_write_tensor *t = w->t;
    if (!t->f32) return af_atomic_write(af, t->raw, (size_t)w->bytes);
    uint8_t tmp[4096 * 4];
    int esz = af_st_dtype_bits(t->dtype) / 8;
    size_t per = sizeof tmp / (size_t)esz;
    for (uint64_t i = 0; i < w->n_elem; i += per) {
        size_t m = (size_t)(w->n_elem - i < per ? w->n_elem - i : per);
        for (size_t k = 0; k < m; k++) {
            float x = t->f32[i + k];
            if (t->dtype == AF_ST_F32) {
                uint32_t u;
                memcpy(&u, &x, 4);
                for (int s = 0; s < 4; s++) tmp[4 * k + (size_t)s] = (uint8_t)(u >> (8 * s));
            } else {
                uint16_t h = t->dtype == AF_ST_F16 ? af_f32_to_fp16(x) : f32_to_bf16(x);
                tmp[2 * k] = (uint8_t)h;
                tmp[2 * k + 1] = (uint8_t)(h >> 8);
            }
        }
        AF_TRY(af_atomic_write(af, tmp, m * (size_t)esz));
    }
    return AF_OK;
}

af_status af_st_write(const char *path, const af_st_write_tensor *tensors, size_t n_tensors,
                      const char *const *meta_keys, const char *const *meta_values, size_t n_meta) {
    if (!path || (!tensors && n_tensors)) return af_fail(AF_ERR_INVALID_ARG, "af_st_write: NULL argument");
    wt_info *w = af_calloc(n_tensors ? n_tensors : 1, sizeof *w);
    if (!w) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    af_status st = AF_OK;
    for (size_t i = 0; i < n_tensors && st == AF_OK; i++) {
        const af_st_write_tensor *t = &tensors[i];
        w[i].t = t;
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 ||
            utf8_invalid_at((const uint8_t *)t->name, strlen(t->name)) != strlen(t->name)) {
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor %zu: empty, reserved or non-UTF-8 name", path, i);
            break;
        }
        if ((unsigned)t->dtype >= AF_ST_DTYPE_COUNT || t->n_dims < 0 || t->n_dims > AF_ST_MAX_DIMS) {
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor '%s': bad dtype or number of dims", path, t->name);
            break;
        }
        if (t->f32 ? (t->dtype != AF_ST_F32 && t->dtype != AF_ST_F16 && t->dtype != AF_ST_BF16) : !t->raw) {
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor '%s': %s", path, t->name,
                         t->f32 ? "f32 source can only be stored as F32, F16 or BF16" : "no data");
            break;
        }
        uint64_t ne = 1, bits = 0;
        for (int d = 0; d < t->n_dims && st == AF_OK; d++)
            if (t->shape[d] < 0 || __builtin_mul_overflow(ne, (uint64_t)t->shape[d], &ne))
                st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor '%s': bad shape[%d]", path, t->name, d);
        if (st == AF_OK && (__builtin_mul_overflow(ne, (uint64_t)af_st_dtype_bits(t->dtype), &bits) || bits % 8))
            st = af_fail(AF_ERR_INVALID_ARG, "%s: tensor '%s': size overflows or is not whole bytes", path, t->name);
        w[i].n_elem = ne;
        w[i].bytes = bits / 8;
    }
    if (st == AF_OK) {
        qsort(w, n_tensors, sizeof *w, cmp_write_order);
        /* duplicates: sort a copy of the names */
        const char **names = af_calloc(n_tensors ? n_tensors : 1, sizeof *names);
        if (!names) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
        for (size_t i = 0; names && i < n_tensors; i++) names[i] = w[i].t->name;
        if (names) qsort(names, n_tensors, sizeof *names, cmp_str_ptr);
        for (size_t i = 1; names && i < n_tensors && st == AF_OK; i++)
            if (strcmp(names[i - 1], names[i]) == 0)
                st = af_fail(AF_ERR_INVALID_ARG, "%s: duplicate tensor name '%s'", path, names[i]);
        free(names);
    }
    sbuf h = {0};
    if (st == AF_OK) {
        sb_str(&h, "{");
        int first = 1;
        if (n_meta) {
            sb_str(&h, "\"__metadata__\":{");
            for (size_t i = 0; i < n_meta; i++) {
                if (i) sb_str(&h, ",");
                sb_json_string(&h, meta_keys[i]);
                sb_str(&h, ":");
                sb_json_string(&h, meta_values[i]);
            }
            sb_str(&h, "}");
            first = 0;
        }
        uint64_t off = 0;
        for (size_t i = 0; i < n_tensors; i++) {
            const af_st_write_tensor *t = w[i].t;
            char num[64];
            if (!first) sb_str(&h, ",");
            first = 0;
            sb_json_string(&h, t->name);
            sb_str(&h, ":{\"dtype\":\"");
            sb_str(&h, af_st_dtype_name(t->dtype));
            sb_str(&h, "\",\"shape\":[");
            for (int d = 0; d < t->n_dims; d++) {
                snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
                sb_str(&h, num);
            }
            snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                     (unsigned long long)(off + w[i].bytes));
            sb_str(&h, num);
            off += w[i].bytes;
        }
        sb_str(&h, "}");
        while (!h.oom && h.len % 8) sb_str(&h, " ");
        if (h.oom) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    af_atomic_file *af = NULL;
    if (st == AF_OK) st = af_atomic_open(path, &af);
    if (st == AF_OK) {
        uint8_t len8[8];
        for (int s = 0; s < 8; s++) len8[s] = (uint8_t)((uint64_t)h.len >> (8 * s));
        st = af_atomic_write(af, len8, 8);
        if (st == AF_OK) st = af_atomic_write(af, h.p, h.len);
        for (size_t i = 0; i < n_tensors && st == AF_OK; i++) st = write_tensor_data(af, &w[i]);
        if (st == AF_OK) st = af_atomic_commit(af);
        else af_atomic_abort(af);
    }
    free(h.p);
    free(w);
    return st;
}
