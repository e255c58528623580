/*
 * vk_exec.c — the command stream of the Vulkan backend (vk_internal.h): VK_NFRAMES frames, each a
 * command buffer with its fence, descriptor pools and staging memory. Ops record dispatches into
 * the recording frame; a frame is submitted when it is full (without waiting: the host records the
 * next one while the device runs it) or at a synchronization point (submit and wait). Barriers are
 * inserted only where a dispatch touches memory that an earlier one since the last barrier wrote
 * (or writes memory one read); each frame starts with a full barrier, which orders it after the
 * frames submitted before it. Pipelines are created on first use through the pipeline cache.
 */
#include "kernels/vulkan/vk_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DPOOL_SETS 256

/* ---------------------------------------------------------------- frames */

static void release_defers(af_vk_dev *d, vk_frame *f) {
    for (int i = 0; i < f->ndefer; i++) vk_alloc_destroy(d, f->defer[i]);
    f->ndefer = 0;
}

/* Wait for a submitted frame and release what waited for it. */
static void retire(af_vk_dev *d, vk_frame *f) {
    if (!f->submitted) return;
    VkResult r = d->v.vkWaitForFences(d->dev, 1, &f->fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS) vk_fail_vk(d, r, "waiting for submitted work", "vkWaitForFences");
    if (r == VK_SUCCESS) d->v.vkResetFences(d->dev, 1, &f->fence);
    if (r == VK_SUCCESS) vk_prof_collect(d, f);
    f->submitted = 0;
    release_defers(d, f);
}

int vk_idle(af_vk_dev *d) {
    for (int i = 0; i < VK_NFRAMES; i++) {
        vk_frame *f = &d->fr[i];
        if (f->recording) return 0;
        if (f->submitted) {
            if (d->v.vkGetFenceStatus(d->dev, f->fence) != VK_SUCCESS) return 0;
            retire(d, f);
        }
    }
    return 1;
}

static void full_barrier(af_vk_dev *d, VkCommandBuffer cb) {
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL,
                          VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT,
                          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                              VK_ACCESS_TRANSFER_WRITE_BIT};
    d->v.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                                      VK_PIPELINE_STAGE_HOST_BIT,
                              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                              NULL, 0, NULL);
    d->npend_w = d->npend_r = 0;
}

/* The recording frame, begun if needed (waits for its previous submission). NULL after a failure. */
static vk_frame *recording(af_vk_dev *d) {
    if (d->err != AF_OK) return NULL;
    vk_frame *f = &d->fr[d->cur];
    if (f->recording) return f;
    retire(d, f);
    if (d->err != AF_OK) return NULL;
    d->v.vkResetCommandPool(d->dev, f->pool, 0);
    for (int i = 0; i < f->ndpool; i++) d->v.vkResetDescriptorPool(d->dev, f->dpools[i], 0);
    f->dpool_cur = 0;
    f->st.used = 0;
    f->ndispatch = 0;
    f->last_set = VK_NULL_HANDLE;
    f->last_pipe = VK_NULL_HANDLE;
    VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                   VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    VkResult r = d->v.vkBeginCommandBuffer(f->cb, &bi);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, "starting a command buffer", "vkBeginCommandBuffer");
        return NULL;
    }
    f->recording = 1;
    full_barrier(d, f->cb);
    vk_prof_begin(d, f);
    return f;
}

void vk_flush(af_vk_dev *d, const char *why) {
    vk_frame *f = &d->fr[d->cur];
    if (!f->recording) return;
    f->recording = 0;
    VkResult r = d->v.vkEndCommandBuffer(f->cb);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, why, "vkEndCommandBuffer");
        return;
    }
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &f->cb, 0, NULL};
    r = af_vk_fault_hit(d->fault, AF_VK_FAULT_LOST) ? VK_ERROR_DEVICE_LOST
                                                    : d->v.vkQueueSubmit(d->queue, 1, &si, f->fence);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, why, "vkQueueSubmit");
        return;
    }
    f->submitted = 1;
    d->n_submit++;
    d->cur = (d->cur + 1) % VK_NFRAMES;
}

uint64_t af_vk_submissions(af_vk_dev *d) {
    pthread_mutex_lock(&d->mu);
    uint64_t n = d->n_submit;
    pthread_mutex_unlock(&d->mu);
    return n;
}

af_status vk_finish(af_vk_dev *d, const char *why) {
    vk_flush(d, why);
    for (int k = 1; k <= VK_NFRAMES; k++) retire(d, &d->fr[(d->cur + k) % VK_NFRAMES]);
    return vk_status(d);
}

void vk_defer_free(af_vk_dev *d, vk_alloc *a) {
    vk_frame *f = NULL;
    /* the newest frame that may use it: the recording one, else the last submitted one */
    vk_frame *rec = &d->fr[d->cur], *prev = &d->fr[(d->cur + VK_NFRAMES - 1) % VK_NFRAMES];
    if (rec->recording) f = rec;
    else if (prev->submitted) f = prev;
    else if (rec->submitted) f = rec;
    if (!f) {
        vk_alloc_destroy(d, a);
        return;
    }
    if (f->ndefer == f->capdefer) {
        int cap = f->capdefer ? 2 * f->capdefer : 16;
        vk_alloc **n = af_realloc_array(f->defer, (size_t)cap, sizeof *n);
        if (!n) { /* no memory to remember it: wait until the device is done with it */
            vk_finish(d, "freeing device memory");
            vk_alloc_destroy(d, a);
            return;
        }
        f->defer = n;
        f->capdefer = cap;
    }
    f->defer[f->ndefer++] = a;
}

/* ---------------------------------------------------------------- hazards */

static int overlaps(const vk_range *r, int n, uintptr_t a, uintptr_t b) {
    for (int i = 0; i < n; i++)
        if (r[i].a < b && a < r[i].b) return 1;
    return 0;
}

static int push_range(vk_range **r, int *n, int *cap, uintptr_t a, uintptr_t b) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        vk_range *nr = af_realloc_array(*r, (size_t)c, sizeof *nr);
        if (!nr) return -1;
        *r = nr;
        *cap = c;
    }
    (*r)[(*n)++] = (vk_range){a, b};
    return 0;
}

/* Before recording a command with these ranges: a barrier when needed; then remember them. */
static void hazards(af_vk_dev *d, vk_frame *f, const uintptr_t *a, const uintptr_t *b, const int *w, int n) {
    int need = 0;
    for (int i = 0; i < n && !need; i++) {
        if (a[i] == b[i]) continue;
        need = overlaps(d->pend_w, d->npend_w, a[i], b[i]) || (w[i] && overlaps(d->pend_r, d->npend_r, a[i], b[i]));
    }
    /* long lists cost more to scan than a barrier costs */
    if (need || d->npend_w > 48 || d->npend_r > 96) full_barrier(d, f->cb);
    for (int i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        int bad = w[i] ? push_range(&d->pend_w, &d->npend_w, &d->cappend_w, a[i], b[i])
                       : push_range(&d->pend_r, &d->npend_r, &d->cappend_r, a[i], b[i]);
        if (bad) full_barrier(d, f->cb); /* no memory to track: order everything */
    }
}

/* ---------------------------------------------------------------- pipelines */

VkPipeline vk_pipeline(af_vk_dev *d, const char *op, int shader, const uint32_t *spec) {
    static const uint32_t zero[VK_NSPEC];
    if (!spec) spec = zero;
    if (shader < 0 || shader >= af_vk_nshaders) {
        vk_fail(d, AF_ERR_INTERNAL, "%s: no shader %d", op, shader);
        return VK_NULL_HANDLE;
    }
    const af_vk_spirv *sp = &af_vk_shaders[shader];
    /* the subgroup variants ("*_sg") stride their lanes by gl_SubgroupSize: full subgroups where the
     * device can promise them, and the required size where it can be chosen */
    const size_t nl = strlen(sp->name);
    const int sgv = nl > 3 && !strcmp(sp->name + nl - 3, "_sg");
    const uint32_t sgs = sgv ? d->sg_required : 0;
    for (int i = 0; i < d->npipe; i++)
        if (d->pipes[i].shader == (uint32_t)shader && d->pipes[i].sg_size == sgs &&
            !memcmp(d->pipes[i].spec, spec, sizeof zero))
            return d->pipes[i].pipe;
    if (!d->modules[shader]) {
        VkShaderModuleCreateInfo mi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, sp->words * 4, sp->code};
        VkResult r = af_vk_fault_hit(d->fault, AF_VK_FAULT_SHADER)
                         ? VK_ERROR_INVALID_SHADER_NV
                         : d->v.vkCreateShaderModule(d->dev, &mi, NULL, &d->modules[shader]);
        if (r != VK_SUCCESS) {
            d->modules[shader] = VK_NULL_HANDLE;
            vk_fail(d, AF_ERR_UNSUPPORTED, "%s: the driver refused shader '%s' (vkCreateShaderModule returned %s)", op,
                    sp->name, af_vk_result_name(r));
            return VK_NULL_HANDLE;
        }
    }
    VkSpecializationMapEntry me[VK_NSPEC];
    for (int i = 0; i < VK_NSPEC; i++) me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)(4 * i), 4};
    VkSpecializationInfo si = {VK_NSPEC, me, sizeof zero, spec};
    VkComputePipelineCreateInfo ci;
    memset(&ci, 0, sizeof ci);
    ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = d->modules[shader];
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = &si;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rs;
    memset(&rs, 0, sizeof rs);
    rs.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO;
    rs.requiredSubgroupSize = sgs;
    if (sgv && d->info.full_subgroups) ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    if (sgs) ci.stage.pNext = &rs;
    ci.layout = d->layout;
    VkPipeline p = VK_NULL_HANDLE;
    double t0 = af_time_sec();
    VkResult r = d->v.vkCreateComputePipelines(d->dev, d->pcache, 1, &ci, NULL, &p);
    if (getenv("AF_VULKAN_TRACE"))
        fprintf(stderr, "vulkan: pipeline %s [%u %u %u] for %s%s%.0u: %.3f s\n", sp->name, spec[0], spec[1], spec[2], op,
                sgs ? ", subgroup size " : "", sgs, af_time_sec() - t0);
    if (r != VK_SUCCESS) {
        vk_fail(d, r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? AF_ERR_NOMEM
                                                                                           : AF_ERR_UNSUPPORTED,
                "%s: creating the pipeline of shader '%s' failed (vkCreateComputePipelines returned %s)", op, sp->name,
                af_vk_result_name(r));
        return VK_NULL_HANDLE;
    }
    if (d->npipe == d->cappipe) {
        int cap = d->cappipe ? 2 * d->cappipe : 64;
        vk_pipe *n = af_realloc_array(d->pipes, (size_t)cap, sizeof *n);
        if (!n) {
            d->v.vkDestroyPipeline(d->dev, p, NULL);
            vk_fail(d, AF_ERR_NOMEM, "%s: out of host memory for a pipeline", op);
            return VK_NULL_HANDLE;
        }
        d->pipes = n;
        d->cappipe = cap;
    }
    vk_pipe *e = &d->pipes[d->npipe++];
    e->shader = (uint32_t)shader;
    e->sg_size = sgs;
    memcpy(e->spec, spec, sizeof zero);
    e->pipe = p;
    return p;
}

/* ---------------------------------------------------------------- dispatch */

static VkDescriptorSet alloc_set(af_vk_dev *d, vk_frame *f) {
    for (;;) {
        if (f->dpool_cur == f->ndpool) {
            VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, DPOOL_SETS * VK_NBIND};
            VkDescriptorPoolCreateInfo pi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, DPOOL_SETS, 1, &ps};
            VkDescriptorPool *np = af_realloc_array(f->dpools, (size_t)f->ndpool + 1, sizeof *np);
            if (!np) {
                vk_fail(d, AF_ERR_NOMEM, "out of host memory for descriptor pools");
                return VK_NULL_HANDLE;
            }
            f->dpools = np;
            VkResult r = d->v.vkCreateDescriptorPool(d->dev, &pi, NULL, &f->dpools[f->ndpool]);
            if (r != VK_SUCCESS) {
                vk_fail_vk(d, r, "creating a descriptor pool", "vkCreateDescriptorPool");
                return VK_NULL_HANDLE;
            }
            f->ndpool++;
        }
        VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL,
                                          f->dpools[f->dpool_cur], 1, &d->dsl};
        VkDescriptorSet s;
        VkResult r = d->v.vkAllocateDescriptorSets(d->dev, &ai, &s);
        if (r == VK_SUCCESS) return s;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
            vk_fail_vk(d, r, "allocating a descriptor set", "vkAllocateDescriptorSets");
            return VK_NULL_HANDLE;
        }
        f->dpool_cur++;
    }
}

void vk_grid(uint64_t groups, uint32_t *gx, uint32_t *gy) {
    if (groups <= 65535) {
        *gx = (uint32_t)(groups ? groups : 1);
        *gy = 1;
        return;
    }
    *gy = (uint32_t)((groups + 65534) / 65535);
    *gx = (uint32_t)((groups + *gy - 1) / *gy);
}

int vk_not_device(af_vk_dev *d, const char *op, int n, ...) {
    va_list ap;
    va_start(ap, n);
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        const void *p = va_arg(ap, const void *);
        if (p && !vk_find(d, p)) {
            vk_fail(d, AF_ERR_INVALID_ARG, "%s: argument %p is not device memory of this device (a host pointer, or freed?)",
                    op, p);
            bad = 1;
        }
    }
    va_end(ap);
    return bad;
}

static const char *arg_error(int code) {
    return code == -1 ? "is not device memory of this device (a host pointer, or freed?)"
           : code == -3 ? "runs past the end of its allocation"
                        : "is longer than a buffer window of this device (maxStorageBufferRange/2) and this op "
                          "cannot split it";
}

void vk_dispatch(af_vk_dev *d, const char *op, int shader, const uint32_t *spec, const vk_arg *args, int nargs,
                 void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (d->err != AF_OK || gx == 0 || gy == 0 || gz == 0) return;
    vk_frame *f = recording(d);
    if (!f) return;
    if (f->ndispatch >= VK_MAX_DISPATCH) {
        vk_flush(d, "a full command buffer");
        if (!(f = recording(d))) return;
    }
    VkPipeline pipe = vk_pipeline(d, op, shader, spec);
    if (!pipe) return;
    VkBuffer bufs[VK_NBIND];
    uint32_t *off = push;
    uintptr_t ra[VK_NBIND], rb[VK_NBIND];
    int rw[VK_NBIND];
    for (int i = 0; i < VK_NBIND; i++) {
        bufs[i] = d->dummy;
        off[i] = 0xFFFFFFFFu;
        ra[i] = rb[i] = 0;
        rw[i] = 0;
        if (i >= nargs || !args[i].p) continue;
        if (args[i].bytes == 0) {
            off[i] = 0;
            continue;
        }
        uint64_t o;
        int e = vk_resolve(d, args[i].p, args[i].bytes, &bufs[i], &o);
        if (e) {
            vk_fail(d, AF_ERR_INVALID_ARG, "%s: argument %d (%p, %llu bytes) %s", op, i, args[i].p,
                    (unsigned long long)args[i].bytes, arg_error(e));
            return;
        }
        off[i] = (uint32_t)o;
        ra[i] = (uintptr_t)args[i].p;
        rb[i] = ra[i] + args[i].bytes;
        rw[i] = args[i].write;
    }
    hazards(d, f, ra, rb, rw, VK_NBIND);
    if (!f->last_set || memcmp(bufs, f->last_bufs, sizeof bufs)) {
        VkDescriptorSet s = alloc_set(d, f);
        if (!s) return;
        VkDescriptorBufferInfo bi[VK_NBIND];
        VkWriteDescriptorSet wr[VK_NBIND];
        for (int i = 0; i < VK_NBIND; i++) {
            bi[i] = (VkDescriptorBufferInfo){bufs[i], 0, VK_WHOLE_SIZE};
            wr[i] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, s, (uint32_t)i, 0, 1,
                                           VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, &bi[i], NULL};
        }
        d->v.vkUpdateDescriptorSets(d->dev, VK_NBIND, wr, 0, NULL);
        f->last_set = s;
        memcpy(f->last_bufs, bufs, sizeof bufs);
        d->v.vkCmdBindDescriptorSets(f->cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &s, 0, NULL);
    }
    if (pipe != f->last_pipe) {
        d->v.vkCmdBindPipeline(f->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
        f->last_pipe = pipe;
    }
    d->v.vkCmdPushConstants(f->cb, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    d->v.vkCmdDispatch(f->cb, gx, gy, gz);
    vk_prof_mark(d, f, shader, op);
    f->ndispatch++;
}

/* ---------------------------------------------------------------- transfers */

/* Resolve the longest chunk (<= left) at p that one window holds. */
static uint64_t chunk_at(af_vk_dev *d, const void *p, uint64_t left, VkBuffer *b, uint64_t *off) {
    uint64_t n = vk_fit(d, p);
    if (n > left) n = left;
    if (!n || vk_resolve(d, p, n, b, off)) return 0;
    return n;
}

void vk_cmd_copy(af_vk_dev *d, const char *op, void *dst, const void *src, uint64_t bytes) {
    const char *s = src;
    char *t = dst;
    while (bytes && d->err == AF_OK) {
        vk_frame *f = recording(d);
        if (!f) return;
        VkBuffer bs, bt;
        uint64_t os, ot;
        uint64_t n = chunk_at(d, s, bytes, &bs, &os);
        n = chunk_at(d, t, n, &bt, &ot);
        if (!n || vk_resolve(d, s, n, &bs, &os)) {
            vk_fail(d, AF_ERR_INTERNAL, "%s: cannot resolve a copy at %p -> %p", op, (const void *)s, (void *)t);
            return;
        }
        uintptr_t a[2] = {(uintptr_t)s, (uintptr_t)t}, b[2] = {(uintptr_t)s + n, (uintptr_t)t + n};
        int w[2] = {0, 1};
        hazards(d, f, a, b, w, 2);
        VkBufferCopy c = {os, ot, n};
        d->v.vkCmdCopyBuffer(f->cb, bs, bt, 1, &c);
        vk_prof_mark(d, f, -1, NULL);
        s += n, t += n, bytes -= n;
    }
}

void vk_cmd_fill(af_vk_dev *d, const char *op, void *dst, uint32_t pattern, uint64_t bytes) {
    char *t = dst;
    while (bytes && d->err == AF_OK) {
        vk_frame *f = recording(d);
        if (!f) return;
        VkBuffer b;
        uint64_t o;
        uint64_t n = chunk_at(d, t, bytes, &b, &o) & ~(uint64_t)3;
        if (!n) {
            vk_fail(d, AF_ERR_INTERNAL, "%s: cannot resolve a fill at %p", op, (void *)t);
            return;
        }
        uintptr_t a = (uintptr_t)t, e = a + n;
        int w = 1;
        hazards(d, f, &a, &e, &w, 1);
        d->v.vkCmdFillBuffer(f->cb, b, o, n, pattern);
        vk_prof_mark(d, f, -1, NULL);
        t += n, bytes -= n;
    }
}

void vk_cmd_upload(af_vk_dev *d, const char *op, void *dst, const void *src, uint64_t bytes) {
    const char *s = src;
    char *t = dst;
    while (bytes && d->err == AF_OK) {
        vk_frame *f = recording(d);
        if (!f) return;
        if (f->st.size - f->st.used < 4096 && f->st.used) { /* staging full: run this frame, take the next */
            vk_flush(d, op);
            continue;
        }
        VkBuffer b;
        uint64_t o;
        uint64_t n = chunk_at(d, t, bytes, &b, &o);
        if (n > f->st.size - f->st.used) n = f->st.size - f->st.used;
        if (!n) {
            vk_fail(d, AF_ERR_INTERNAL, "%s: cannot resolve an upload to %p", op, (void *)t);
            return;
        }
        memcpy((char *)f->st.map + f->st.used, s, n);
        if (!f->st.coherent) {
            VkMappedMemoryRange mr = {VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, NULL, f->st.mem, 0, VK_WHOLE_SIZE};
            d->v.vkFlushMappedMemoryRanges(d->dev, 1, &mr);
        }
        uintptr_t a = (uintptr_t)t, e = a + n;
        int w = 1;
        hazards(d, f, &a, &e, &w, 1);
        VkBufferCopy c = {f->st.used, o, n};
        d->v.vkCmdCopyBuffer(f->cb, f->st.buf, b, 1, &c);
        vk_prof_mark(d, f, -1, NULL);
        f->st.used = (f->st.used + n + 15) & ~(uint64_t)15;
        s += n, t += n, bytes -= n;
    }
}

vk_staging *vk_frame_staging(af_vk_dev *d, uint64_t want, uint64_t *off) {
    vk_frame *f = recording(d);
    if (!f) return NULL;
    const uint64_t at = (f->st.used + 255) & ~(uint64_t)255;
    if (f->st.used && (at >= f->st.size || f->st.size - at < want)) { /* full: a fresh frame, all of it free */
        vk_flush(d, "download");
        if (!(f = recording(d))) return NULL;
    }
    *off = f->st.used ? at : 0;
    return &f->st;
}

void vk_record_to_host(af_vk_dev *d, VkBuffer b, uint64_t off, vk_staging *s, uint64_t s_off, uint64_t n) {
    vk_frame *f = recording(d);
    if (!f) return;
    full_barrier(d, f->cb);
    VkBufferCopy c = {off, s_off, n};
    d->v.vkCmdCopyBuffer(f->cb, b, s->buf, 1, &c);
    vk_prof_mark(d, f, -1, NULL);
    s->used = s_off + n;
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
    d->v.vkCmdPipelineBarrier(f->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                              NULL);
}

/* ---------------------------------------------------------------- set-up */

int vk_exec_init(af_vk_dev *d) {
    if (vk_mem_init(d)) return -1;
    VkDescriptorSetLayoutBinding b[VK_NBIND];
    for (int i = 0; i < VK_NBIND; i++)
        b[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                              VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL, 0, VK_NBIND, b};
    VkResult r = d->v.vkCreateDescriptorSetLayout(d->dev, &li, NULL, &d->dsl);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, "setting up", "vkCreateDescriptorSetLayout");
        return -1;
    }
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pi = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &d->dsl, 1, &pr};
    r = d->v.vkCreatePipelineLayout(d->dev, &pi, NULL, &d->layout);
    if (r != VK_SUCCESS) {
        vk_fail_vk(d, r, "setting up", "vkCreatePipelineLayout");
        return -1;
    }
    d->modules = calloc((size_t)af_vk_nshaders, sizeof *d->modules);
    if (!d->modules) {
        vk_fail(d, AF_ERR_NOMEM, "out of host memory");
        return -1;
    }
    for (int i = 0; i < VK_NFRAMES; i++) {
        vk_frame *f = &d->fr[i];
        VkCommandPoolCreateInfo ci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                      VK_COMMAND_POOL_CREATE_TRANSIENT_BIT, d->qfam};
        r = d->v.vkCreateCommandPool(d->dev, &ci, NULL, &f->pool);
        if (r != VK_SUCCESS) {
            f->pool = VK_NULL_HANDLE;
            vk_fail_vk(d, r, "setting up", "vkCreateCommandPool");
            return -1;
        }
        VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, f->pool,
                                          VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
        r = d->v.vkAllocateCommandBuffers(d->dev, &ai, &f->cb);
        VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
        if (r == VK_SUCCESS) r = d->v.vkCreateFence(d->dev, &fi, NULL, &f->fence);
        if (r != VK_SUCCESS) {
            vk_fail_vk(d, r, "setting up", "vkAllocateCommandBuffers/vkCreateFence");
            return -1;
        }
        if (vk_staging_make(d, &f->st, VK_STAGING_BYTES)) return -1;
    }
    /* the buffer bound to unused bindings */
    void *p = af_vk_alloc(d, 256);
    if (!p) {
        vk_fail(d, AF_ERR_NOMEM, "setting up: %s", af_last_error());
        return -1;
    }
    d->dummy_alloc = vk_find(d, p);
    uint64_t o;
    vk_resolve(d, p, 256, &d->dummy, &o);
    return vk_prof_init(d);
}

void vk_exec_release(af_vk_dev *d) {
    for (int i = 0; i < VK_NFRAMES && d->prof; i++) { /* the last frames' timestamps, then the table */
        vk_frame *f = &d->fr[i];
        if (f->submitted && d->v.vkWaitForFences(d->dev, 1, &f->fence, VK_TRUE, UINT64_MAX) == VK_SUCCESS)
            vk_prof_collect(d, f);
    }
    vk_prof_release(d);
    for (int i = 0; i < VK_NFRAMES; i++) {
        vk_frame *f = &d->fr[i];
        if (f->submitted) d->v.vkWaitForFences(d->dev, 1, &f->fence, VK_TRUE, UINT64_MAX);
        f->submitted = 0;
        release_defers(d, f);
        free(f->defer);
        for (int j = 0; j < f->ndpool; j++) d->v.vkDestroyDescriptorPool(d->dev, f->dpools[j], NULL);
        free(f->dpools);
        vk_staging_free(d, &f->st);
        if (f->fence) d->v.vkDestroyFence(d->dev, f->fence, NULL);
        if (f->pool) d->v.vkDestroyCommandPool(d->dev, f->pool, NULL);
        memset(f, 0, sizeof *f);
    }
    for (int i = 0; i < d->npipe; i++)
        if (d->pipes[i].pipe) d->v.vkDestroyPipeline(d->dev, d->pipes[i].pipe, NULL);
    free(d->pipes);
    d->pipes = NULL;
    d->npipe = 0;
    if (d->modules)
        for (int i = 0; i < af_vk_nshaders; i++)
            if (d->modules[i]) d->v.vkDestroyShaderModule(d->dev, d->modules[i], NULL);
    free(d->modules);
    d->modules = NULL;
    if (d->layout) d->v.vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    if (d->dsl) d->v.vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
    free(d->pend_w);
    free(d->pend_r);
    d->pend_w = d->pend_r = NULL;
}
