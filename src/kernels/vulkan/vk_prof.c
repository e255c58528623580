/*
 * vk_prof.c — where the device's time goes: GPU timestamps around every dispatch and transfer of
 * the command stream ($AF_VULKAN_PROFILE=1 when the device is opened; vk_internal.h).
 *
 * Each frame owns a timestamp query pool of VK_MAX_DISPATCH + 1 queries. When a frame begins, one
 * timestamp is written after its opening barrier (BOTTOM_OF_PIPE: everything before it is done);
 * after each dispatch, copy or fill recorded into it, another one, tagged with the shader (or
 * "transfers"). When the frame's fence has been waited for, the differences of consecutive
 * timestamps (times VkPhysicalDeviceLimits.timestampPeriod ns, masked to the queue family's
 * timestampValidBits) are added to per-shader totals. Work that overlaps on the device is charged
 * to the later command; a barrier's wait is charged to the command after it: the totals add up to
 * the device's busy time between the frame's start and its last command, not to kernel durations
 * measured in isolation. Costs two queries per command and a readback per frame: for profiling
 * runs only (the device kit's bench.log), not for timings.
 */
#include "kernels/vulkan/vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NQ (VK_MAX_DISPATCH + 1u)

int vk_prof_init(af_vk_dev *d) {
    const char *e = getenv("AF_VULKAN_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return 0;
    uint32_t nq = 0;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    VkPhysicalDeviceProperties pr;
    d->f.vkGetPhysicalDeviceProperties(d->phys, &pr);
    const uint32_t bits = d->qfam < nq ? qf[d->qfam].timestampValidBits : 0;
    if (bits == 0 || pr.limits.timestampPeriod <= 0) {
        fprintf(stderr, "vulkan: AF_VULKAN_PROFILE: %s has no timestamps on its compute queue: not profiled\n",
                af_vk_dev_name(d));
        return 0;
    }
    d->prof_mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    d->prof_period = pr.limits.timestampPeriod;
    d->prof_ns = calloc((size_t)af_vk_nshaders + 1, sizeof *d->prof_ns);
    d->prof_n = calloc((size_t)af_vk_nshaders + 1, sizeof *d->prof_n);
    if (!d->prof_ns || !d->prof_n) return -1;
    for (int i = 0; i < VK_NFRAMES; i++) {
        vk_frame *f = &d->fr[i];
        VkQueryPoolCreateInfo qi = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, NULL, 0, VK_QUERY_TYPE_TIMESTAMP, NQ, 0};
        VkResult r = d->v.vkCreateQueryPool(d->dev, &qi, NULL, &f->qpool);
        f->qtag = calloc(NQ, sizeof *f->qtag);
        f->qop = calloc(NQ, sizeof *f->qop);
        if (r != VK_SUCCESS || !f->qtag || !f->qop) {
            if (r == VK_SUCCESS) d->v.vkDestroyQueryPool(d->dev, f->qpool, NULL);
            f->qpool = VK_NULL_HANDLE;
            vk_fail_vk(d, r, "setting up the profiler", "vkCreateQueryPool");
            return -1;
        }
    }
    d->prof = 1;
    return 0;
}

void vk_prof_begin(af_vk_dev *d, vk_frame *f) {
    if (!d->prof) return;
    d->v.vkCmdResetQueryPool(f->cb, f->qpool, 0, NQ);
    d->v.vkCmdWriteTimestamp(f->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, f->qpool, 0);
    f->nq = 1;
}

void vk_prof_mark(af_vk_dev *d, vk_frame *f, int tag, const char *op) {
    if (!d->prof || f->nq == 0 || f->nq >= NQ) return;
    d->v.vkCmdWriteTimestamp(f->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, f->qpool, f->nq);
    f->qop[f->nq] = op;
    f->qtag[f->nq++] = tag;
}

/* the totals of (shader, op): op strings are static, compared by content */
static void prof_add_op(af_vk_dev *d, int shader, const char *op, double ns) {
    if (shader < 0 || !op) return;
    for (int i = 0; i < d->prof_nop; i++)
        if (d->prof_op[i].shader == shader && !strcmp(d->prof_op[i].op, op)) {
            d->prof_op[i].ns += ns;
            d->prof_op[i].n++;
            return;
        }
    if (d->prof_nop < VK_PROF_OPS) d->prof_op[d->prof_nop++] = (struct vk_prof_op){shader, op, ns, 1};
}

void vk_prof_collect(af_vk_dev *d, vk_frame *f) {
    if (!d->prof || f->nq < 2) return;
    uint64_t ts[NQ];
    VkResult r = d->v.vkGetQueryPoolResults(d->dev, f->qpool, 0, f->nq, sizeof(uint64_t) * f->nq, ts,
                                            sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS) {
        for (uint32_t i = 1; i < f->nq; i++) {
            const uint64_t dt = ((ts[i] & d->prof_mask) - (ts[i - 1] & d->prof_mask)) & d->prof_mask;
            const int k = f->qtag[i] < 0 ? af_vk_nshaders : f->qtag[i];
            d->prof_ns[k] += (double)dt * d->prof_period;
            d->prof_n[k]++;
            prof_add_op(d, f->qtag[i], f->qop[i], (double)dt * d->prof_period);
        }
        d->prof_frames++;
    }
    f->nq = 0;
}

size_t af_vk_profile_text(af_vk_dev *d, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    pthread_mutex_lock(&d->mu);
    size_t len = 0;
    if (d->prof) {
        double total = 0;
        for (int i = 0; i <= af_vk_nshaders; i++) total += d->prof_ns[i];
        len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                                "vulkan profile of %s (GPU timestamps): %llu submissions, %llu frames read, %.3f ms "
                                "busy\n  %-14s %10s %12s %10s %6s\n",
                                af_vk_dev_name(d), (unsigned long long)d->n_submit, (unsigned long long)d->prof_frames,
                                total * 1e-6, "shader", "commands", "total ms", "mean us", "share");
        char done[512] = {0}; /* af_vk_nshaders + 1 <= 512: printed ones, in decreasing total */
        for (;;) {
            int best = -1;
            for (int i = 0; i <= af_vk_nshaders && i < 512; i++)
                if (!done[i] && d->prof_n[i] && (best < 0 || d->prof_ns[i] > d->prof_ns[best])) best = i;
            if (best < 0) break;
            done[best] = 1;
            const char *name = best == af_vk_nshaders ? "transfers" : af_vk_shaders[best].name;
            len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                                    "  %-14s %10llu %12.3f %10.2f %5.1f%%\n", name,
                                    (unsigned long long)d->prof_n[best], d->prof_ns[best] * 1e-6,
                                    d->prof_ns[best] * 1e-3 / (double)d->prof_n[best],
                                    total > 0 ? 100.0 * d->prof_ns[best] / total : 0.0);
        }
        /* the same time by (shader, operation), the 16 largest */
        if (d->prof_nop > 0)
            len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0, "  %-14s %-22s %10s %12s %10s %6s\n",
                                    "shader", "operation", "commands", "total ms", "mean us", "share");
        char odone[VK_PROF_OPS] = {0};
        for (int shown = 0; shown < 16; shown++) {
            int best = -1;
            for (int i = 0; i < d->prof_nop; i++)
                if (!odone[i] && (best < 0 || d->prof_op[i].ns > d->prof_op[best].ns)) best = i;
            if (best < 0) break;
            odone[best] = 1;
            const struct vk_prof_op *o = &d->prof_op[best];
            len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                                    "  %-14s %-22s %10llu %12.3f %10.2f %5.1f%%\n", af_vk_shaders[o->shader].name, o->op,
                                    (unsigned long long)o->n, o->ns * 1e-6, o->ns * 1e-3 / (double)o->n,
                                    total > 0 ? 100.0 * o->ns / total : 0.0);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return len;
}

void vk_prof_release(af_vk_dev *d) {
    if (d->prof) {
        char buf[8192];
        if (af_vk_profile_text(d, buf, sizeof buf)) fputs(buf, stderr);
    }
    for (int i = 0; i < VK_NFRAMES; i++) {
        vk_frame *f = &d->fr[i];
        if (f->qpool) d->v.vkDestroyQueryPool(d->dev, f->qpool, NULL);
        f->qpool = VK_NULL_HANDLE;
        free(f->qtag);
        free(f->qop);
        f->qtag = NULL;
        f->qop = NULL;
    }
    free(d->prof_ns);
    free(d->prof_n);
    d->prof_ns = NULL;
    d->prof_n = NULL;
    d->prof_nop = 0;
    d->prof = 0;
}
