/* cpu.c — run-time CPU feature detection (cpuid + xgetbv on x86-64) and kernel path names. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Detected once (idempotent: two racing first calls write the same values). */
static af_cpu_info g_cpu;
static int g_cpu_done;

static void detect(void) {
    memset(&g_cpu, 0, sizeof g_cpu);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    g_cpu.sse3 = c & (1u << 0);
    g_cpu.ssse3 = c & (1u << 9);
    g_cpu.fma = c & (1u << 12);
    g_cpu.f16c = c & (1u << 29);
    int osxsave = (c >> 27) & 1;
    int avx_hw = (c >> 28) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    int os_avx = (xcr0 & 0x6) == 0x6;
    int os_avx512 = (xcr0 & 0xE6) == 0xE6;
    g_cpu.avx = avx_hw && os_avx;
    if (!g_cpu.avx) g_cpu.fma = g_cpu.f16c = false;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        g_cpu.avx2 = g_cpu.avx && (b & (1u << 5));
        if (os_avx512) {
            g_cpu.avx512f = b & (1u << 16);
            g_cpu.avx512dq = b & (1u << 17);
            g_cpu.avx512bw = b & (1u << 30);
            g_cpu.avx512vl = b & (1u << 31);
            g_cpu.avx512_vnni = c & (1u << 11);
        }
        g_cpu.amx_bf16 = d & (1u << 22);
        g_cpu.amx_tile = d & (1u << 24);
        g_cpu.amx_int8 = d & (1u << 25);
#if defined(__x86_64__) && defined(__linux__)
        /* Linux hands out the 8 KiB of tile data only on request (ARCH_REQ_XCOMP_PERM 0x1023 for
         * XFEATURE_XTILEDATA 18, Documentation/arch/x86/xstate.rst); the grant is per process. */
        if (g_cpu.amx_tile && g_cpu.amx_bf16 && g_cpu.amx_int8 && g_cpu.avx512_vnni)
            g_cpu.amx_ready = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        g_cpu.avx_vnni = g_cpu.avx2 && (a1 & (1u << 4));
        if (os_avx512) g_cpu.avx512_bf16 = a1 & (1u << 5);
    }
    unsigned vendor[4] = {0, 0, 0, 0};
    __cpuid(0, vendor[3], vendor[0], vendor[2], vendor[1]); /* the 12-byte name is in ebx, edx, ecx */
    g_cpu.bf16_dot_fast = g_cpu.avx512_bf16 && (!memcmp(vendor, "AuthenticAMD", 12) || g_cpu.amx_ready);
#elif defined(__aarch64__)
    g_cpu.neon = true;
#endif
}

const af_cpu_info *af_cpu(void) {
    if (!__atomic_load_n(&g_cpu_done, __ATOMIC_ACQUIRE)) {
        detect();
        __atomic_store_n(&g_cpu_done, 1, __ATOMIC_RELEASE);
    }
    return &g_cpu;
}

static bool can_run(const af_cpu_info *c, af_kpath p) {
    if (p == AF_KPATH_AVX512) return c->avx512f && c->avx512bw && c->avx512vl && c->fma;
    if (p == AF_KPATH_AVX2) return c->avx2 && c->fma;
    return true;
}

af_kpath af_kpath_best(void) {
    const af_cpu_info *c = af_cpu();
    return can_run(c, AF_KPATH_AVX512) ? AF_KPATH_AVX512 : can_run(c, AF_KPATH_AVX2) ? AF_KPATH_AVX2 : AF_KPATH_SCALAR;
}

const char *af_kpath_name(af_kpath p) {
    return p == AF_KPATH_AVX512 ? "avx512" : p == AF_KPATH_AVX2 ? "avx2" : "scalar";
}

af_status af_kpath_parse(const char *name, af_kpath *out) {
    if (!name || !strcmp(name, "auto")) {
        *out = af_kpath_best();
        return AF_OK;
    }
    af_kpath p;
    if (!strcmp(name, "scalar")) p = AF_KPATH_SCALAR;
    else if (!strcmp(name, "avx2")) p = AF_KPATH_AVX2;
    else if (!strcmp(name, "avx512")) p = AF_KPATH_AVX512;
    else
        return af_fail(AF_ERR_INVALID_ARG, "kernel path '%s': expected auto, scalar, avx2 or avx512", name);
#if !defined(__x86_64__)
    if (p != AF_KPATH_SCALAR) return af_fail(AF_ERR_UNSUPPORTED, "kernel path '%s': not built for this CPU", name);
#endif
    if (!can_run(af_cpu(), p))
        return af_fail(AF_ERR_UNSUPPORTED, p == AF_KPATH_AVX2 ? "kernel path 'avx2': this CPU lacks AVX2/FMA"
                                                              : "kernel path 'avx512': this CPU lacks AVX-512 F/BW/VL");
    *out = p;
    return AF_OK;
}

void af_cpu_describe(char *buf, size_t size, af_kpath p) {
    const af_cpu_info *c = af_cpu();
    snprintf(buf, size, "%s%s%s%s%s%s%s%s%s%s%s-> %s",
             c->avx ? "avx " : "", c->avx2 ? "avx2 " : "", c->fma ? "fma " : "", c->f16c ? "f16c " : "",
             c->avx512f ? "avx512f " : "", c->avx512bw ? "avx512bw " : "", c->avx512vl ? "avx512vl " : "",
             c->avx512_vnni ? "avx512_vnni " : "", c->avx512_bf16 ? "avx512_bf16 " : "",
             c->amx_tile ? "amx " : "", c->neon ? "neon " : "", af_kpath_name(p));
}
