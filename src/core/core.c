/* core.c — error messages, allocation helpers, fp16 conversion, clock. */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char tl_msg[1024];
static _Thread_local af_error_kind tl_kind;

/* Records the message and its kind for af_last_error / af_last_error_kind; returns st. */
static AF_PRINTF(3, 0) af_status record(af_status st, af_error_kind kind, const char *fmt, va_list ap) {
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    tl_kind = kind;
    return st;
}

af_status af_fail(af_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(st, AF_ERROR_KIND_NONE, fmt, ap);
    va_end(ap);
    return st;
}

af_status af_fail_kind(af_status st, af_error_kind kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(st, kind, fmt, ap);
    va_end(ap);
    return st;
}

void af_clear_error(void) {
    tl_msg[0] = 0;
    tl_kind = AF_ERROR_KIND_NONE;
}

const char *af_last_error(void) { return tl_msg; }

af_error_kind af_last_error_kind(void) { return tl_kind; }

const char *af_status_name(af_status st) {
    switch (st) {
    case AF_OK: return "AF_OK";
    case AF_ERR_IO: return "AF_ERR_IO";
    case AF_ERR_FORMAT: return "AF_ERR_FORMAT";
    case AF_ERR_UNSUPPORTED: return "AF_ERR_UNSUPPORTED";
    case AF_ERR_NOMEM: return "AF_ERR_NOMEM";
    case AF_ERR_INVALID_ARG: return "AF_ERR_INVALID_ARG";
    case AF_ERR_NOT_FOUND: return "AF_ERR_NOT_FOUND";
    case AF_ERR_RANGE: return "AF_ERR_RANGE";
    case AF_ERR_INTERNAL: return "AF_ERR_INTERNAL";
    case AF_ERR_CANCELLED: return "AF_ERR_CANCELLED";
    case AF_ERR_DEVICE: return "AF_ERR_DEVICE";
    }
    return "AF_ERR_UNKNOWN";
}

const char *af_version(void) { return "0.1.0"; }

void *af_malloc(size_t n) { return malloc(n ? n : 1); }

void *af_calloc(size_t count, size_t size) {
    if (count == 0 || size == 0) return calloc(1, 1);
    return calloc(count, size);
}

void *af_realloc_array(void *p, size_t count, size_t size) {
    size_t n;
    if (!af_mul_ok(count, size, &n)) return NULL;
    return realloc(p, n ? n : 1);
}

void *af_malloc_aligned(size_t n) {
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (sz < n) return NULL;
    if (posix_memalign(&p, 64, sz ? sz : 64) != 0) return NULL;
    return p;
}

void af_free_aligned(void *p) { free(p); }

float af_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            man &= 0x3FF;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v;
    v.u = bits;
    return v.f;
}

uint16_t af_f32_to_fp16(float f) {
    union { float f; uint32_t u; } v;
    v.f = f;
    uint32_t x = v.u;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7C00 | (absx > 0x7F800000u ? 0x200 : 0));
    if (absx >= 0x477FF000u) return (uint16_t)(sign | 0x7C00); /* overflow -> inf */
    if (absx < 0x38800000u) { /* subnormal or zero in fp16 */
        if (absx < 0x33000000u) return sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e; /* 14 - (e - 127) + 13 - 1 ... */
        uint32_t hm = m >> (shift - 0);
        /* m has 24 bits; fp16 subnormal value = m * 2^(e-150) / 2^-24 = m >> (126 - e) */
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7FFFFF;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

const char *af_fmt_bytes(char *buf, size_t cap, uint64_t b) {
    if (b < 1024) snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else if (b < ((uint64_t)1 << 20)) snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
    else if (b < ((uint64_t)1 << 30)) snprintf(buf, cap, "%.1f MiB", (double)b / 1048576.0);
    else snprintf(buf, cap, "%.2f GiB", (double)b / 1073741824.0);
    return buf;
}

double af_time_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- counter RNG (core.h) */

static inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

uint64_t af_ctr_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ (a * 0xd1b54a32d192ed03ULL + 1));
    h = mix64(h ^ (b * 0xaef17502108ef2d9ULL + 2));
    h = mix64(h ^ (c * 0xf58f7a5c5b1b1b4dULL + 3));
    return h;
}

float af_ctr_u01(uint64_t key, uint64_t i) {
    uint64_t h = mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}
