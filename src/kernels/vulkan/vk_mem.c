/*
 * vk_mem.c — device memory of the Vulkan backend (vk_internal.h "Memory model"): the reserved
 * PROT_NONE address range, allocations backed by VkDeviceMemory and VkBuffer windows, lookup of a
 * pointer's (buffer, offset), upload / download / copy / fill, the internal scratch.
 */
#include "kernels/vulkan/vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* ---------------------------------------------------------------- the address range */

int vk_mem_init(af_vk_dev *d) {
    uint64_t want = (uint64_t)256 << 30;
    if (d->info.mem_total * 4 > want) want = d->info.mem_total * 4;
    for (; want >= ((uint64_t)4 << 30); want /= 2) {
        void *p = mmap(NULL, (size_t)want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            d->va = p;
            d->va_size = want;
            break;
        }
    }
    if (!d->va) {
        vk_fail(d, AF_ERR_NOMEM, "cannot reserve host address space for device pointers");
        return -1;
    }
    /* alignment of buffer memory offsets, from a probe buffer */
    VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, 65536,
                             VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    VkBuffer b;
    VkResult r = d->v.vkCreateBuffer(d->dev, &bi, NULL, &b);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, "creating a probe buffer", "vkCreateBuffer");
        return -1;
    }
    VkMemoryRequirements req;
    d->v.vkGetBufferMemoryRequirements(d->dev, b, &req);
    d->v.vkDestroyBuffer(d->dev, b, NULL);
    d->buf_align = req.alignment < 256 ? 256 : req.alignment;
    return 0;
}

/* Index of the first allocation with addr > a (binary search). */
static int upper(af_vk_dev *d, uintptr_t a) {
    int lo = 0, hi = d->nalloc;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (d->allocs[mid]->addr <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

vk_alloc *vk_find(af_vk_dev *d, const void *p) {
    uintptr_t a = (uintptr_t)p;
    int i = upper(d, a) - 1;
    if (i < 0) return NULL;
    vk_alloc *al = d->allocs[i];
    return a < al->addr + al->size ? al : NULL;
}

uint64_t af_vk_bytes_from(af_vk_dev *d, const void *p) {
    pthread_mutex_lock(&d->mu);
    vk_alloc *a = vk_find(d, p);
    uint64_t r = a && (uintptr_t)p < a->addr + a->req ? a->addr + a->req - (uintptr_t)p : 0;
    pthread_mutex_unlock(&d->mu);
    return r;
}

int af_vk_owns(af_vk_dev *d, const void *p) {
    pthread_mutex_lock(&d->mu);
    int r = vk_find(d, p) != NULL;
    pthread_mutex_unlock(&d->mu);
    return r;
}

/* First fit of `span` bytes in the reserved range; inserts a into the sorted table. */
static int place(af_vk_dev *d, vk_alloc *a) {
    uintptr_t base = (uintptr_t)d->va, end = base + d->va_size, at = base;
    int i = 0;
    for (; i < d->nalloc; i++) {
        if (d->allocs[i]->addr - at >= a->span) break;
        at = d->allocs[i]->addr + d->allocs[i]->span;
    }
    if (i == d->nalloc && end - at < a->span) return -1;
    if (d->nalloc == d->capalloc) {
        int cap = d->capalloc ? 2 * d->capalloc : 64;
        vk_alloc **n = af_realloc_array(d->allocs, (size_t)cap, sizeof *n);
        if (!n) return -1;
        d->allocs = n;
        d->capalloc = cap;
    }
    memmove(d->allocs + i + 1, d->allocs + i, (size_t)(d->nalloc - i) * sizeof *d->allocs);
    d->allocs[i] = a;
    d->nalloc++;
    a->addr = at;
    return 0;
}

static void unplace(af_vk_dev *d, vk_alloc *a) {
    for (int i = 0; i < d->nalloc; i++)
        if (d->allocs[i] == a) {
            memmove(d->allocs + i, d->allocs + i + 1, (size_t)(d->nalloc - i - 1) * sizeof *d->allocs);
            d->nalloc--;
            return;
        }
}

/* ---------------------------------------------------------------- allocations */

void vk_alloc_destroy(af_vk_dev *d, vk_alloc *a) {
    if (!a) return;
    for (int i = 0; i < a->nwin; i++)
        if (a->wins[i].buf) d->v.vkDestroyBuffer(d->dev, a->wins[i].buf, NULL);
    for (int i = 0; i < a->nmem; i++) {
        if (a->mems[i].map) d->v.vkUnmapMemory(d->dev, a->mems[i].mem);
        if (a->mems[i].mem) d->v.vkFreeMemory(d->dev, a->mems[i].mem, NULL);
    }
    free(a->wins);
    free(a->mems);
    free(a);
}

/* Window limit R and stride S for allocations made now. */
static void window_geometry(af_vk_dev *d, uint64_t *R, uint64_t *S) {
    uint64_t r = d->max_range;
    if (d->hook_range && d->hook_range < r) r = d->hook_range;
    uint64_t s = r / 2 / d->buf_align * d->buf_align;
    if (s < d->buf_align) s = d->buf_align;
    if (r < s) r = s;
    *R = r;
    *S = s;
}

/* One memory object of `size` bytes backing allocation bytes [off, off+size), with its windows. */
static int make_memory(af_vk_dev *d, vk_alloc *a, uint64_t off, uint64_t size, uint64_t R, uint64_t S,
                       const char *what, af_status *st) {
    int mi = a->nmem;
    vk_mem *m = &a->mems[mi];
    m->off = off;
    m->size = size;
    /* windows: one covering everything when it fits, else every S bytes, R long */
    uint64_t starts[4096];
    int nw = 0;
    if (size <= R) starts[nw++] = 0;
    else
        for (uint64_t s = 0;; s += S) {
            if (nw == 4096) {
                *st = af_fail(AF_ERR_UNSUPPORTED, "%s: %llu bytes need more than 4096 buffer windows", what,
                        (unsigned long long)size);
                return -1;
            }
            starts[nw++] = s;
            if (s + R >= size) break;
        }
    vk_win *w = af_realloc_array(a->wins, (size_t)(a->nwin + nw), sizeof *w);
    if (!w) {
        *st = af_fail(AF_ERR_NOMEM, "%s: out of host memory", what);
        return -1;
    }
    a->wins = w;
    uint64_t need = 0;
    uint32_t type_bits = ~0u;
    for (int j = 0; j < nw; j++) {
        vk_win *win = &a->wins[a->nwin + j];
        win->off = off + starts[j];
        win->size = starts[j] + R < size ? R : size - starts[j];
        win->mem = mi;
        VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, win->size,
                                 VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                 VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
        VkResult r = d->v.vkCreateBuffer(d->dev, &bi, NULL, &win->buf);
        if (r != VK_SUCCESS) {
            win->buf = VK_NULL_HANDLE;
            a->nwin += j;
            *st = af_fail(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? AF_ERR_NOMEM : AF_ERR_IO,
                    "%s: vkCreateBuffer returned %s", what, af_vk_result_name(r));
            return -1;
        }
        VkMemoryRequirements req;
        d->v.vkGetBufferMemoryRequirements(d->dev, win->buf, &req);
        type_bits &= req.memoryTypeBits;
        if (starts[j] % req.alignment) {
            a->nwin += j + 1;
            *st = af_fail(AF_ERR_UNSUPPORTED, "%s: buffer window offset %llu not aligned to %llu", what,
                    (unsigned long long)starts[j], (unsigned long long)req.alignment);
            return -1;
        }
        if (starts[j] + req.size > need) need = starts[j] + req.size;
    }
    a->nwin += nw;
    a->nmem++;
    uint32_t mt = d->mt_device;
    if (!(type_bits & (1u << mt))) {
        *st = af_fail(AF_ERR_UNSUPPORTED, "%s: buffers cannot use the device-local memory type", what);
        return -1;
    }
    VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, need, mt};
    VkResult r = af_vk_fault_hit(d->fault, AF_VK_FAULT_ALLOC) ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                                                              : d->v.vkAllocateMemory(d->dev, &ai, NULL, &m->mem);
    if (r != VK_SUCCESS) {
        m->mem = VK_NULL_HANDLE;
        uint64_t used = d->bytes_alloc;
        *st = af_fail(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? AF_ERR_NOMEM : AF_ERR_IO,
                "%s: vkAllocateMemory(%llu bytes) returned %s (%.1f MiB already allocated of a %.1f MiB heap)", what, (unsigned long long)need, af_vk_result_name(r), used / 1048576.0,
                d->info.mem_total / 1048576.0);
        return -1;
    }
    for (int j = a->nwin - nw; j < a->nwin; j++) {
        r = d->v.vkBindBufferMemory(d->dev, a->wins[j].buf, m->mem, a->wins[j].off - off);
        if (r != VK_SUCCESS) {
            *st = af_fail(AF_ERR_IO, "%s: vkBindBufferMemory returned %s", what, af_vk_result_name(r));
            return -1;
        }
    }
    if (d->device_host_visible) {
        r = d->v.vkMapMemory(d->dev, m->mem, 0, VK_WHOLE_SIZE, 0, &m->map);
        if (r != VK_SUCCESS) m->map = NULL;
    }
    return 0;
}

/* The allocation (lock held). NULL on failure with the message set (not sticky; without the
 * device's name) and *st its status. */
static vk_alloc *alloc_locked(af_vk_dev *d, uint64_t bytes, af_status *st) {
    char what[96];
    snprintf(what, sizeof what, "allocating %llu bytes", (unsigned long long)bytes);
    *st = AF_ERR_NOMEM;
    if (bytes == 0) bytes = 4;
    uint64_t size = align_up(bytes, 256);
    vk_alloc *a = calloc(1, sizeof *a);
    if (!a) {
        af_fail(AF_ERR_NOMEM, "%s: out of host memory", what);
        return NULL;
    }
    a->size = size;
    a->req = bytes;
    a->span = align_up(size, VK_ADDR_ALIGN);
    uint64_t R, S;
    window_geometry(d, &R, &S);
    a->stride = S;
    uint64_t mo = d->max_alloc / S * S; /* memory object size when the allocation is larger */
    if (mo < S) mo = S;
    int nmem = (int)((size + mo - 1) / mo);
    a->mems = calloc((size_t)nmem, sizeof *a->mems);
    if (!a->mems) {
        free(a);
        af_fail(AF_ERR_NOMEM, "%s: out of host memory", what);
        return NULL;
    }
    for (uint64_t off = 0; off < size; off += mo)
        if (make_memory(d, a, off, size - off < mo ? size - off : mo, R, S, what, st)) {
            vk_alloc_destroy(d, a);
            return NULL;
        }
    a->host_visible = 1;
    for (int i = 0; i < a->nmem; i++) a->host_visible &= a->mems[i].map != NULL;
    if (place(d, a)) {
        vk_alloc_destroy(d, a);
        af_fail(AF_ERR_NOMEM, "%s: the reserved address range (%llu GiB) is full", what,
                (unsigned long long)(d->va_size >> 30));
        return NULL;
    }
    d->bytes_alloc += size;
    return a;
}

void *af_vk_alloc(af_vk_dev *d, size_t bytes) {
    pthread_mutex_lock(&d->mu);
    vk_alloc *a = NULL;
    af_status st;
    if (d->err != AF_OK) vk_status(d);
    else if (!(a = alloc_locked(d, bytes, &st))) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        af_fail(st, "%s: %s", af_vk_dev_name(d), msg);
    }
    pthread_mutex_unlock(&d->mu);
    return a ? (void *)a->addr : NULL;
}

void *vk_alloc_internal(af_vk_dev *d, uint64_t bytes) {
    af_status st;
    vk_alloc *a = alloc_locked(d, bytes, &st);
    if (!a) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", af_last_error());
        vk_fail(d, st, "internal: %s", msg);
        return NULL;
    }
    return (void *)a->addr;
}

void vk_unplace_free(af_vk_dev *d, vk_alloc *a) {
    unplace(d, a);
    d->bytes_alloc -= a->size;
    vk_defer_free(d, a);
}

void af_vk_free(af_vk_dev *d, void *p) {
    if (!p) return;
    pthread_mutex_lock(&d->mu);
    vk_alloc *a = vk_find(d, p);
    if (a && (uintptr_t)p == a->addr) {
        vk_rope_forget(d, a->addr, a->addr + a->size);
        unplace(d, a);
        d->bytes_alloc -= a->size;
        vk_defer_free(d, a);
    }
    pthread_mutex_unlock(&d->mu);
}

void vk_mem_release_all(af_vk_dev *d) {
    for (int i = 0; i < d->nalloc; i++) vk_alloc_destroy(d, d->allocs[i]);
    free(d->allocs);
    d->allocs = NULL;
    d->nalloc = d->capalloc = 0;
    if (d->va) munmap(d->va, (size_t)d->va_size);
    d->va = NULL;
}

void *vk_scratch(af_vk_dev *d, uint64_t bytes) {
    if (d->scratch && d->scratch_size >= bytes) return d->scratch;
    if (d->scratch) {
        vk_unplace_free(d, vk_find(d, d->scratch));
        d->scratch = NULL;
    }
    uint64_t want = bytes + bytes / 2 < ((uint64_t)1 << 20) ? ((uint64_t)1 << 20) : bytes + bytes / 2;
    void *p = vk_alloc_internal(d, want);
    if (!p) return NULL;
    d->scratch = p;
    d->scratch_size = vk_find(d, p)->size;
    return d->scratch;
}

void af_vk_meminfo(af_vk_dev *d, uint64_t *used, uint64_t *total) {
    pthread_mutex_lock(&d->mu);
    *used = d->bytes_alloc;
    *total = d->info.mem_total;
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- lookup */

uint64_t vk_fit(af_vk_dev *d, const void *p) {
    vk_alloc *a = vk_find(d, p);
    if (!a) return 0;
    uint64_t rel = (uintptr_t)p - a->addr, best = 0;
    for (int i = 0; i < a->nwin; i++) {
        const vk_win *w = &a->wins[i];
        if (w->off <= rel && rel < w->off + w->size && w->off + w->size - rel > best) best = w->off + w->size - rel;
    }
    uint64_t left = a->size - rel;
    return best < left ? best : left;
}

int vk_resolve(af_vk_dev *d, const void *p, uint64_t bytes, VkBuffer *buf, uint64_t *off) {
    vk_alloc *a = vk_find(d, p);
    if (!a) return -1;
    uint64_t rel = (uintptr_t)p - a->addr;
    if (rel + bytes > a->size) return -3;
    for (int i = 0; i < a->nwin; i++) {
        const vk_win *w = &a->wins[i];
        if (w->off <= rel && rel + bytes <= w->off + w->size) {
            *buf = w->buf;
            *off = rel - w->off;
            return 0;
        }
    }
    return -2;
}

/* ---------------------------------------------------------------- transfers */

int vk_staging_make(af_vk_dev *d, vk_staging *s, uint64_t size) {
    memset(s, 0, sizeof *s);
    VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, size,
                             VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    VkResult r = d->v.vkCreateBuffer(d->dev, &bi, NULL, &s->buf);
    if (r != VK_SUCCESS) {
        s->buf = VK_NULL_HANDLE;
        vk_fail_vk(d, r, "creating a staging buffer", "vkCreateBuffer");
        return -1;
    }
    VkMemoryRequirements req;
    d->v.vkGetBufferMemoryRequirements(d->dev, s->buf, &req);
    VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, d->mt_host};
    r = d->v.vkAllocateMemory(d->dev, &ai, NULL, &s->mem);
    if (r == VK_SUCCESS) r = d->v.vkBindBufferMemory(d->dev, s->buf, s->mem, 0);
    if (r == VK_SUCCESS) r = d->v.vkMapMemory(d->dev, s->mem, 0, VK_WHOLE_SIZE, 0, &s->map);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, "allocating host-visible staging memory", "vkAllocateMemory/vkMapMemory");
        vk_staging_free(d, s);
        return -1;
    }
    s->size = size;
    s->coherent = d->mt_host_coherent;
    return 0;
}

void vk_staging_free(af_vk_dev *d, vk_staging *s) {
    if (s->map) d->v.vkUnmapMemory(d->dev, s->mem);
    if (s->buf) d->v.vkDestroyBuffer(d->dev, s->buf, NULL);
    if (s->mem) d->v.vkFreeMemory(d->dev, s->mem, NULL);
    memset(s, 0, sizeof *s);
}

/* The argument checks of a transfer: [p, p+bytes) inside one allocation. */
static int span_ok(af_vk_dev *d, const char *op, const void *p, uint64_t bytes) {
    vk_alloc *a = vk_find(d, p);
    if (!a || (uintptr_t)p - a->addr + bytes > a->size) {
        vk_fail(d, AF_ERR_INVALID_ARG, "%s: %llu bytes at %p are not inside one allocation of this device", op,
                (unsigned long long)bytes, p);
        return 0;
    }
    return 1;
}

af_status af_vk_upload(af_vk_dev *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return AF_OK;
    if (!vk_enter(d, "upload")) goto out;
    if (!span_ok(d, "upload", dst, bytes)) goto out;
    vk_alloc *a = vk_find(d, dst);
    if (a->host_visible && !d->force_staging && vk_idle(d)) {
        /* nothing queued can touch it: write through the mapping */
        uint64_t rel = (uintptr_t)dst - a->addr, left = bytes;
        const char *s = src;
        for (int i = 0; i < a->nmem && left; i++) {
            const vk_mem *m = &a->mems[i];
            if (rel >= m->off + m->size) continue;
            uint64_t o = rel - m->off, n = m->size - o < left ? m->size - o : left;
            memcpy((char *)m->map + o, s, n);
            s += n, rel += n, left -= n;
        }
    } else
        vk_cmd_upload(d, "upload", dst, src, bytes);
out:;
    af_status st = vk_status(d);
    vk_leave(d);
    return st;
}

af_status vk_download_locked(af_vk_dev *d, void *dst, const void *src, uint64_t bytes) {
    if (d->err != AF_OK) return vk_status(d);
    if (!span_ok(d, "download", src, bytes)) goto out;
    vk_alloc *a = vk_find(d, src);
    if (a->host_visible && !d->force_staging) {
        if (vk_finish(d, "download") != AF_OK) goto out;
        uint64_t rel = (uintptr_t)src - a->addr, left = bytes;
        char *o = dst;
        for (int i = 0; i < a->nmem && left; i++) {
            const vk_mem *m = &a->mems[i];
            if (rel >= m->off + m->size) continue;
            uint64_t mo = rel - m->off, n = m->size - mo < left ? m->size - mo : left;
            memcpy(o, (const char *)m->map + mo, n);
            o += n, rel += n, left -= n;
        }
        goto out;
    }
    /* through the staging buffer of a frame, one chunk per submission; the first chunk is copied in
     * the frame that holds the work recorded so far (vk_frame_staging), so a result read back after
     * its computation (a decode step's logits) costs one submission */
    const char *s = src;
    char *o = dst;
    uint64_t left = bytes;
    while (left && d->err == AF_OK) {
        uint64_t soff = 0;
        vk_staging *st = vk_frame_staging(d, left, &soff);
        if (!st) break;
        uint64_t n = st->size - soff < left ? st->size - soff : left;
        uint64_t fit = vk_fit(d, s);
        if (fit < n) n = fit;
        VkBuffer b;
        uint64_t off;
        if (vk_resolve(d, s, n, &b, &off)) {
            vk_fail(d, AF_ERR_INTERNAL, "download: cannot resolve %p", (const void *)s);
            break;
        }
        vk_record_to_host(d, b, off, st, soff, n);
        if (vk_finish(d, "download") != AF_OK) break;
        if (!st->coherent) {
            VkMappedMemoryRange mr = {VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, NULL, st->mem, 0, VK_WHOLE_SIZE};
            d->v.vkInvalidateMappedMemoryRanges(d->dev, 1, &mr);
        }
        memcpy(o, (const char *)st->map + soff, n);
        s += n, o += n, left -= n;
    }
out:
    return vk_status(d);
}

af_status af_vk_download(af_vk_dev *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return af_vk_sync(d);
    vk_enter(d, "download");
    af_status st = vk_download_locked(d, dst, src, bytes);
    vk_leave(d);
    return st;
}

void af_vk_copy(af_vk_dev *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (vk_enter(d, "copy") && span_ok(d, "copy", dst, bytes) && span_ok(d, "copy", src, bytes))
        vk_cmd_copy(d, "copy", dst, src, bytes);
    vk_leave(d);
}

void af_vk_fill(af_vk_dev *d, void *dst, uint32_t pattern, size_t bytes) {
    if (!bytes) return;
    if (!vk_enter(d, "fill")) {
        vk_leave(d);
        return;
    }
    if ((uintptr_t)dst % 4 || bytes % 4)
        vk_fail(d, AF_ERR_INVALID_ARG, "fill: address and size must be multiples of 4 (%p, %zu)", dst, bytes);
    else if (span_ok(d, "fill", dst, bytes))
        vk_cmd_fill(d, "fill", dst, pattern, bytes);
    vk_leave(d);
}

af_status af_vk_sync(af_vk_dev *d) {
    pthread_mutex_lock(&d->mu);
    af_status st = d->err == AF_OK ? vk_finish(d, "synchronize") : vk_status(d);
    pthread_mutex_unlock(&d->mu);
    return st;
}
