/*
 * core.h — internal helpers shared by every module: error messages, invariants, CPU features,
 * small allocation helpers. Not part of the public API.
 */
#ifndef AF_CORE_H
#define AF_CORE_H

#include "afinar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define AF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AF_PRINTF(a, b)
#endif

/* Record a failure message for this thread (printf-style) and return `st`, so callers write
 *   return af_fail(AF_ERR_FORMAT, "%s: tensor '%s': offset %llu past end of file", path, ...);
 * Convention for messages: "<file>: <field>: <problem>[ at offset N]". */
af_status af_fail(af_status st, const char *fmt, ...) AF_PRINTF(2, 3);

/* As af_fail, and record `kind` (af_last_error_kind) with the message; af_fail records
 * AF_ERROR_KIND_NONE. */
af_status af_fail_kind(af_status st, af_error_kind kind, const char *fmt, ...) AF_PRINTF(3, 4);

/* Clear this thread's message (and its kind). */
void af_clear_error(void);

/* Internal invariant (a bug if it fails): records AF_ERR_INTERNAL with file:line and returns it
 * from the enclosing function, which must return af_status. */
#define AF_CHECK(cond)                                                                          \
    do {                                                                                        \
        if (!(cond))                                                                            \
            return af_fail(AF_ERR_INTERNAL, "%s:%d: internal check failed: %s", __FILE__,       \
                           __LINE__, #cond);                                                    \
    } while (0)

/* Propagate a non-OK status. */
#define AF_TRY(expr)                                                                            \
    do {                                                                                        \
        af_status af_try_st_ = (expr);                                                          \
        if (af_try_st_ != AF_OK) return af_try_st_;                                             \
    } while (0)

/* Allocation helpers: return NULL on overflow or failure (never abort). */
void *af_malloc(size_t n);
void *af_calloc(size_t count, size_t size);
void *af_realloc_array(void *p, size_t count, size_t size);
/* 64-byte aligned allocation for SIMD kernels; free with af_free_aligned(). */
void *af_malloc_aligned(size_t n);
void af_free_aligned(void *p);

/* Checked arithmetic: return false on overflow. */
static inline bool af_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool af_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- CPU features (detected once, at first use; thread-safe after that) ---- */
typedef struct af_cpu_info {
    bool sse3, ssse3, avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16, avx512_vnni, avx_vnni;
    bool amx_tile, amx_bf16, amx_int8;
    bool amx_ready; /* AMX-TILE, -BF16 and -INT8 (and AVX-512) and Linux granted this process the tile data */
    bool neon, arm_dotprod; /* ARM */
    /* bf16 products run faster than f32 ones: AVX512_BF16 whose VDPBF16PS does twice the f32 FMA's
     * multiply-adds per cycle, AMD Zen 4 and later (measured 1.9x the f32 rate on a Zen 4,
     * bench/results/train_vs_peft.md), or AMX-BF16 tiles ready to use (amx_ready: Intel Sapphire /
     * Emerald Rapids; the packed GEMM's bf16 products run on them, gemm_amx.c: a classification step
     * 2.0-2.6x f32 on an Emerald Rapids, bench/results/cpu-intel-xeon-emerald-rapids-2c.md). Intel
     * Xeons without AMX run VDPBF16PS on one port, at or below the f32 FMA rate (measured 0.46x), so
     * false there. From the CPU's identity, never from a timing: a run's numerics must not depend on
     * the machine's load. */
    bool bf16_dot_fast;
} af_cpu_info;

const af_cpu_info *af_cpu(void);

/* Kernel paths (ISA variants of the CPU kernels; the one in use is a property of the af_ctx). */
typedef enum af_kpath { AF_KPATH_SCALAR = 0, AF_KPATH_AVX2 = 1, AF_KPATH_AVX512 = 2 } af_kpath;
/* The widest path this CPU runs (avx512 needs AVX-512 F/BW/VL + FMA, avx2 needs AVX2 + FMA). */
af_kpath af_kpath_best(void);
/* "scalar", "avx2", "avx512". */
const char *af_kpath_name(af_kpath p);
/* Path from its name; NULL or "auto": af_kpath_best(). Errors: AF_ERR_INVALID_ARG (unknown name),
 * AF_ERR_UNSUPPORTED (this CPU cannot run it). */
af_status af_kpath_parse(const char *name, af_kpath *out);
/* "avx avx2 fma ... -> <path>" into buf (truncated to size). */
void af_cpu_describe(char *buf, size_t size, af_kpath p);

/* ---- fp16 / bf16 conversion (IEEE binary16 incl. subnormals; bf16 = top half of f32) ---- */
float af_fp16_to_f32(uint16_t h);
uint16_t af_f32_to_fp16(float f); /* round to nearest even */
static inline float af_bf16_to_f32(uint16_t b) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

/* `bytes` as "512 B", "12.3 KiB", "96.0 MiB" or "1.50 GiB" into buf [cap]; returns buf. */
const char *af_fmt_bytes(char *buf, size_t cap, uint64_t bytes);

/* Monotonic wall clock in seconds. */
double af_time_sec(void);

/* ---- Counter-based RNG (LoRA initialisation, dropout masks; implemented in core.c) ----
 * af_ctr_key mixes (seed, a, b, c) into a 64-bit stream key with the splitmix64 finaliser
 * (Steele et al. 2014, "Fast splittable pseudorandom number generators"); af_ctr_u01 returns the
 * i-th uniform of that stream in [0, 1) with 24 random bits (exact in f32). Pure functions of
 * their arguments: results never depend on thread count or call order.
 * Keys used: LoRA A of (layer, proj): af_ctr_key(seed, layer, proj, 0), index = row-major element;
 * head W: af_ctr_key(seed, n_layers, AF_PROJ_COUNT, 0); dropout mask of (layer, proj, token):
 * af_ctr_key(dropout_seed, layer, proj, token + 1), index = input feature. */
uint64_t af_ctr_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
float af_ctr_u01(uint64_t key, uint64_t i);


#endif /* AF_CORE_H */
