/*
 * backend.c — the registry of backends and open devices, device errors, fault injection and the
 * device-region carver (contracts in kernels/backend.h).
 */
#include "kernels/backend.h"

#include "core/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the Vulkan stub */

#ifndef AF_HAVE_VULKAN
#define VK_NOT_BUILT                                                                                          \
    "not built in: this afinar was compiled without the Vulkan headers or glslc (apt-get install "           \
    "libvulkan-dev glslc mesa-vulkan-drivers, then rebuild: make clean && make)"

static af_status vk_stub_enumerate(af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap) {
    (void)out, (void)cap;
    *n = 0;
    if (why && why_cap) snprintf(why, why_cap, "%s", VK_NOT_BUILT);
    return AF_OK;
}

static af_status vk_stub_open(int32_t index, af_device *dev) {
    (void)index, (void)dev;
    return af_fail(AF_ERR_UNSUPPORTED, "device vulkan: %s", VK_NOT_BUILT);
}

static void vk_stub_close(af_device *dev) { (void)dev; }

static const af_backend_entry vk_stub = {"vulkan", 0, vk_stub_enumerate, vk_stub_open, vk_stub_close};
#endif

static const af_backend_entry *const g_entries[] = {
    &af_backend_entry_cpu,
#ifdef AF_HAVE_VULKAN
    &af_backend_entry_vulkan,
#else
    &vk_stub,
#endif
    &af_backend_entry_guard,
};

int32_t af_backend_registry(const af_backend_entry *const **out) {
    if (out) *out = g_entries;
    return (int32_t)(sizeof g_entries / sizeof *g_entries);
}

/* ---------------------------------------------------------------- open devices */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static af_device *g_open[32];
static int g_n_open;

static const af_backend_entry *find_entry(const char *name, size_t len) {
    const af_backend_entry *const *e;
    const int32_t n = af_backend_registry(&e);
    for (int32_t i = 0; i < n; i++)
        if (strlen(e[i]->name) == len && !strncmp(e[i]->name, name, len)) return e[i];
    return NULL;
}

/* Take (or share) device `index` of backend `e`; caller holds g_lock. */
static af_status open_locked(const af_backend_entry *e, int32_t index, af_device **out) {
    for (int i = 0; i < g_n_open; i++)
        if (g_open[i]->entry == e && g_open[i]->info.index == index) {
            g_open[i]->refs++;
            *out = g_open[i];
            return AF_OK;
        }
    if (g_n_open == (int)(sizeof g_open / sizeof *g_open))
        return af_fail(AF_ERR_NOMEM, "device %s:%d: too many devices open at once", e->name, (int)index);
    af_device *d = af_calloc(1, sizeof *d);
    if (!d) return af_fail(AF_ERR_NOMEM, "device %s:%d: out of memory", e->name, (int)index);
    d->entry = e;
    snprintf(d->info.backend, sizeof d->info.backend, "%s", e->name);
    d->info.index = index;
    af_status st = e->open(index, d);
    if (st != AF_OK) {
        free(d);
        return st;
    }
    d->entry = e;
    d->info.index = index;
    d->refs = 1;
    g_open[g_n_open++] = d;
    *out = d;
    return AF_OK;
}

/* "auto": the first device of a listed non-CPU backend (or of the guard backend when AFINAR_FAULT
 * has auto=guard) that is not a software implementation of the device API (af_device_info.software:
 * llvmpipe / lavapipe compute on this CPU, slower than the CPU backend; AFINAR_FAULT auto=software
 * lets tests take one). *index: the device's index in its backend. NULL when there is none, with
 * the reasons in why. */
static const af_backend_entry *auto_pick(int32_t *index, char *why, size_t why_cap) {
    const af_backend_entry *const *e;
    const int32_t n = af_backend_registry(&e);
    size_t used = 0;
    *index = 0;
    if (why && why_cap) why[0] = 0;
    if (af_fault_auto_guard()) return &af_backend_entry_guard; /* the tests' accelerator, before any real one */
    for (int32_t i = 0; i < n; i++) {
        if (e[i] == &af_backend_entry_cpu || e[i]->hidden) continue;
        af_device_info d[16];
        int32_t nd = 0;
        char w[256] = "", soft[300] = "";
        if (e[i]->enumerate(d, 16, &nd, w, sizeof w) == AF_OK)
            for (int32_t k = 0; k < nd && k < 16; k++) {
                if (!d[k].software || af_fault_auto_software()) {
                    *index = d[k].index;
                    return e[i];
                }
                if (!soft[0])
                    snprintf(soft, sizeof soft, "only the software device %s:%d (%.120s), used when named: --device %s:%d",
                             e[i]->name, (int)d[k].index, d[k].name, e[i]->name, (int)d[k].index);
            }
        if (why && used + 1 < why_cap)
            used += (size_t)snprintf(why + used, why_cap - used, "%s%s: %s", used ? "; " : "", e[i]->name,
                                     soft[0] ? soft : nd > 0 ? "a device that could not be listed" : w[0] ? w : "no device");
        if (used >= why_cap) used = why_cap - 1;
    }
    return NULL;
}

af_status af_device_acquire(const char *spec, af_device **out, af_device_pick *pick) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_device_acquire: NULL argument");
    *out = NULL;
    if (pick) memset(pick, 0, sizeof *pick);
    const char *s = spec && *spec ? spec : "cpu";
    const af_backend_entry *e = NULL;
    int32_t index = 0;
    if (!strcmp(s, "auto")) { /* the one place "auto" is recognised */
        if (pick) pick->is_auto = 1;
        e = auto_pick(&index, pick ? pick->why : NULL, pick ? sizeof pick->why : 0);
        if (!e) {
            e = &af_backend_entry_cpu;
            if (pick) pick->chose_cpu = 1;
        }
    } else {
        const char *colon = strchr(s, ':');
        const size_t len = colon ? (size_t)(colon - s) : strlen(s);
        e = find_entry(s, len);
        if (colon) {
            char *end = NULL;
            errno = 0;
            long v = strtol(colon + 1, &end, 10);
            if (!colon[1] || errno || !end || *end || v < 0 || v > 1000000)
                return af_fail(AF_ERR_INVALID_ARG, "device '%s': the index after ':' must be a number >= 0 (e.g. vulkan:1)",
                               s);
            index = (int32_t)v;
        }
        if (!e)
            return af_fail(AF_ERR_INVALID_ARG, "device '%s': unknown (expected cpu, vulkan, vulkan:N or auto; "
                                               "'afinar devices' lists them)", s);
        if (e == &af_backend_entry_cpu && index != 0)
            return af_fail(AF_ERR_NOT_FOUND, "device '%s': there is one CPU device (cpu or cpu:0)", s);
    }
    pthread_mutex_lock(&g_lock);
    af_status st = open_locked(e, index, out);
    pthread_mutex_unlock(&g_lock);
    return st;
}

void af_device_release(af_device *dev) {
    if (!dev) return;
    pthread_mutex_lock(&g_lock);
    if (--dev->refs <= 0) {
        for (int i = 0; i < g_n_open; i++)
            if (g_open[i] == dev) {
                g_open[i] = g_open[--g_n_open];
                break;
            }
        dev->entry->close(dev);
        free(dev);
    }
    pthread_mutex_unlock(&g_lock);
}

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;

void af_device_fail(af_device *dev, af_status st, const char *fmt, ...) {
    pthread_mutex_lock(&g_err_lock);
    if (!dev->err) {
        int k = snprintf(dev->errmsg, sizeof dev->errmsg, "device %s:%d (%.120s): ", dev->info.backend,
                         (int)dev->info.index, dev->info.name);
        if (k < 0 || (size_t)k >= sizeof dev->errmsg) k = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(dev->errmsg + k, sizeof dev->errmsg - (size_t)k, fmt, ap);
        va_end(ap);
        __atomic_store_n(&dev->err, (int)st, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_err_lock);
}

af_status af_device_status(const af_device *dev) {
    const int e = __atomic_load_n(&dev->err, __ATOMIC_ACQUIRE);
    if (!e) return AF_OK;
    pthread_mutex_lock(&g_err_lock);
    af_status st = af_fail((af_status)e, "%s", dev->errmsg);
    pthread_mutex_unlock(&g_err_lock);
    return st;
}

/* ---------------------------------------------------------------- fault injection */

static struct {
    pthread_once_t once;
    int64_t alloc_at, lost_at, nan_at;
    uint64_t mem;
    int auto_guard, auto_software;
    int64_t n_alloc, n_op, n_mm; /* counters (atomic) */
} g_fault = {PTHREAD_ONCE_INIT, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static void fault_init(void) {
    const char *s = getenv("AFINAR_FAULT");
    if (!s) return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        const char *v = eq + 1;
        char *end = NULL;
        unsigned long long x = strtoull(v, &end, 10);
        if (end && (*end == 'K' || *end == 'k')) x <<= 10;
        else if (end && (*end == 'M' || *end == 'm')) x <<= 20;
        else if (end && (*end == 'G' || *end == 'g')) x <<= 30;
        if (!strcmp(t, "alloc")) g_fault.alloc_at = (int64_t)x;
        else if (!strcmp(t, "lost")) g_fault.lost_at = (int64_t)x;
        else if (!strcmp(t, "nan")) g_fault.nan_at = (int64_t)x;
        else if (!strcmp(t, "mem")) g_fault.mem = x;
        else if (!strcmp(t, "auto")) {
            g_fault.auto_guard = !strcmp(v, "guard");
            g_fault.auto_software = !strcmp(v, "software");
        }
    }
}

static void fault_once(void) { pthread_once(&g_fault.once, fault_init); }

int af_fault_alloc(void) {
    fault_once();
    if (!g_fault.alloc_at) return 0;
    return __atomic_add_fetch(&g_fault.n_alloc, 1, __ATOMIC_RELAXED) == g_fault.alloc_at;
}

int af_fault_op_lost(void) {
    fault_once();
    if (!g_fault.lost_at) return 0;
    return __atomic_add_fetch(&g_fault.n_op, 1, __ATOMIC_RELAXED) == g_fault.lost_at;
}

int af_fault_matmul_nan(void) {
    fault_once();
    if (!g_fault.nan_at) return 0;
    return __atomic_add_fetch(&g_fault.n_mm, 1, __ATOMIC_RELAXED) == g_fault.nan_at;
}

uint64_t af_fault_mem(void) {
    fault_once();
    return g_fault.mem;
}

int af_fault_auto_guard(void) {
    fault_once();
    return g_fault.auto_guard;
}

int af_fault_auto_software(void) {
    fault_once();
    return g_fault.auto_software;
}

/* ---------------------------------------------------------------- carver */

void af_carver_count(af_carver *cv, size_t limit) {
    memset(cv, 0, sizeof *cv);
    cv->limit = limit;
    cv->chunk = -1;
}

float *af_carve(af_carver *cv, int64_t nfloats) {
    const size_t b = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
    cv->used += b;
    if (cv->chunk < 0 || (cv->limit && cv->chunk_used > 0 && cv->chunk_used + b > cv->limit)) {
        cv->chunk++;
        cv->chunk_used = 0;
    }
    char *p = NULL;
    if (cv->base) p = cv->base[cv->chunk] + cv->chunk_used;
    else if (cv->n_chunks >= 0) { /* count pass: record the chunk's size (n_chunks -1: out of memory) */
        if (cv->chunk >= cv->n_chunks) {
            size_t *ns = af_realloc_array(cv->sizes, (size_t)cv->chunk + 16, sizeof *ns);
            if (!ns) {
                free(cv->sizes);
                cv->sizes = NULL;
                cv->n_chunks = -1;
                cv->chunk_used += b;
                return NULL;
            }
            cv->sizes = ns;
            cv->n_chunks = cv->chunk + 1;
        }
        cv->sizes[cv->chunk] = cv->chunk_used + b;
    }
    cv->chunk_used += b;
    return (float *)p;
}

void af_carver_done(af_carver *cv) {
    free(cv->sizes);
    cv->sizes = NULL;
    cv->n_chunks = 0;
}

void af_devmem_free(af_devmem *mem) {
    if (!mem) return;
    for (int32_t i = 0; i < mem->n; i++) af_be(mem->ctx)->free(mem->ctx, mem->chunk[i]);
    free(mem->chunk);
    memset(mem, 0, sizeof *mem);
}

af_status af_carver_alloc(af_carver *cv, const af_ctx *ctx, af_devmem *mem) {
    memset(mem, 0, sizeof *mem);
    mem->ctx = ctx;
    if (cv->n_chunks < 0) return af_fail(AF_ERR_NOMEM, "out of memory planning a device workspace");
    const int32_t n = cv->n_chunks;
    const uint64_t max = ctx->dev->info.max_alloc;
    for (int32_t i = 0; i < n; i++)
        if (max && cv->sizes[i] > max) {
            const size_t sz = cv->sizes[i];
            af_carver_done(cv);
            return af_fail(AF_ERR_NOMEM, "device %s: one buffer of %.1f MiB is larger than the device's largest "
                                         "allocation (%.1f MiB); use fewer tokens per micro-batch",
                           ctx->dev->info.name, (double)sz / 1048576.0, (double)max / 1048576.0);
        }
    mem->chunk = af_calloc(n > 0 ? (size_t)n : 1, sizeof(void *));
    if (!mem->chunk) {
        af_carver_done(cv);
        return af_fail(AF_ERR_NOMEM, "out of memory for a device workspace");
    }
    for (int32_t i = 0; i < n; i++) {
        mem->chunk[i] = af_be(ctx)->alloc(ctx, cv->sizes[i]);
        if (!mem->chunk[i]) {
            af_status st = AF_ERR_NOMEM;
            char msg[512];
            snprintf(msg, sizeof msg, "%s", af_last_error());
            mem->n = i;
            af_devmem_free(mem);
            af_carver_done(cv);
            return af_fail(st, "%s", msg);
        }
        mem->bytes += cv->sizes[i];
        mem->n = i + 1;
    }
    const size_t limit = cv->limit;
    af_carver_done(cv);
    af_carver_count(cv, limit);
    cv->base = (char **)mem->chunk;
    return AF_OK;
}
