/*
 * vk_device.c — Vulkan instance and devices: enumeration (vulkan:N), opening a device with a
 * compute queue and the features the shaders may use, the sticky error, the pipeline cache file,
 * test hooks and fault injection (vk.h, vk_internal.h).
 */
#include "kernels/vulkan/vk_internal.h"

#include "core/fsutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int af_vk_built(void) { return 1; }

/* ---------------------------------------------------------------- errors */

void vk_fail(af_vk_dev *d, af_status st, const char *fmt, ...) {
    if (d->err != AF_OK) return;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    d->err = st;
    snprintf(d->errmsg, sizeof d->errmsg, "%.160s: %s", af_vk_dev_name(d), msg); /* fits: 160 + 2 + 599 < 768 */
    if (d->on_fail) d->on_fail(d->owner, st, msg);
}

void af_vk_set_owner(af_vk_dev *d, void (*on_fail)(void *owner, af_status st, const char *msg), void *owner) {
    pthread_mutex_lock(&d->mu);
    d->on_fail = on_fail;
    d->owner = owner;
    pthread_mutex_unlock(&d->mu);
}

void af_vk_lose(af_vk_dev *d, const char *op) {
    pthread_mutex_lock(&d->mu);
    if (d->err == AF_OK) {
        d->lost = 1;
        vk_fail(d, AF_ERR_IO, "device lost during %s (fault injection)", op);
    }
    pthread_mutex_unlock(&d->mu);
}

af_status af_vk_status(af_vk_dev *d) {
    pthread_mutex_lock(&d->mu);
    af_status st = vk_status(d);
    pthread_mutex_unlock(&d->mu);
    return st;
}

void vk_fail_vk(af_vk_dev *d, VkResult r, const char *what, const char *call) {
    af_status st = AF_ERR_IO;
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) st = AF_ERR_NOMEM;
    if (r == VK_ERROR_DEVICE_LOST) {
        d->lost = 1;
        vk_fail(d, st, "device lost during %s (%s returned VK_ERROR_DEVICE_LOST; last op recorded: %s); "
                       "the device's memory is gone: restart the run (or use --device cpu)",
                what, call, d->last_op ? d->last_op : "none");
        return;
    }
    vk_fail(d, st, "%s: %s returned %s", what, call, af_vk_result_name(r));
}

af_status vk_status(af_vk_dev *d) {
    if (d->err == AF_OK) return AF_OK;
    return af_fail(d->err, "%s", d->errmsg);
}

int vk_enter(af_vk_dev *d, const char *op) {
    pthread_mutex_lock(&d->mu);
    if (d->err != AF_OK) return 0;
    d->last_op = op;
    return 1;
}

void vk_leave(af_vk_dev *d) { pthread_mutex_unlock(&d->mu); }

int vk_sizes_ok(af_vk_dev *d, const char *op, int n, const int64_t *v) {
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] > 0x7FFFFFFF) {
            vk_fail(d, AF_ERR_INVALID_ARG, "%s: size %lld out of the range the shaders index (0 .. 2^31-1)", op,
                    (long long)v[i]);
            return 0;
        }
    return 1;
}

/* ---------------------------------------------------------------- instance */

typedef struct vk_inst {
    af_vk_fns f;
    VkInstance inst;
} vk_inst;

static af_status inst_open(vk_inst *I) {
    char err[400];
    if (af_vk_load(&I->f, err, sizeof err)) return af_fail(AF_ERR_UNSUPPORTED, "%s", err);
    uint32_t ver = VK_API_VERSION_1_0;
    if (I->f.vkEnumerateInstanceVersion) I->f.vkEnumerateInstanceVersion(&ver);
    if (VK_API_VERSION_MINOR(ver) < 1 && VK_API_VERSION_MAJOR(ver) == 1)
        return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: the loader supports Vulkan %u.%u; afinar needs 1.1",
                       VK_API_VERSION_MAJOR(ver), VK_API_VERSION_MINOR(ver));
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "afinar", 1, "afinar", 1, VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
    VkResult r = I->f.vkCreateInstance(&ci, NULL, &I->inst);
    if (r != VK_SUCCESS)
        return af_fail(AF_ERR_UNSUPPORTED,
                       "Vulkan: vkCreateInstance returned %s: no usable Vulkan driver (Debian: apt-get install "
                       "mesa-vulkan-drivers for lavapipe, or the GPU vendor's driver)",
                       af_vk_result_name(r));
    af_vk_pin_modules();
    if (af_vk_load_instance(&I->f, I->inst, err, sizeof err)) {
        PFN_vkDestroyInstance des = (PFN_vkDestroyInstance)I->f.vkGetInstanceProcAddr(I->inst, "vkDestroyInstance");
        if (des) des(I->inst, NULL);
        return af_fail(AF_ERR_UNSUPPORTED, "%s", err);
    }
    return AF_OK;
}

static int has_ext(const vk_inst *I, VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (I->f.vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    if (!e) return 0;
    int found = 0;
    if (I->f.vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* Properties and features of one physical device into *info. */
static void describe(const vk_inst *I, VkPhysicalDevice p, af_vk_info *info) {
    memset(info, 0, sizeof *info);
    VkPhysicalDeviceSubgroupProperties sg = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, NULL, 0, 0, 0, 0};
    VkPhysicalDeviceDriverProperties drv;
    memset(&drv, 0, sizeof drv);
    drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    VkPhysicalDeviceProperties base;
    I->f.vkGetPhysicalDeviceProperties(p, &base);
    const int v12 = VK_API_VERSION_MINOR(base.apiVersion) >= 2 || has_ext(I, p, "VK_KHR_driver_properties");
    const int szc = VK_API_VERSION_MINOR(base.apiVersion) >= 3 || has_ext(I, p, "VK_EXT_subgroup_size_control");
    VkPhysicalDeviceSubgroupSizeControlProperties scp;
    memset(&scp, 0, sizeof scp);
    scp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES;
    drv.pNext = szc ? &scp : NULL;
    sg.pNext = v12 ? (void *)&drv : szc ? (void *)&scp : NULL;
    VkPhysicalDeviceProperties2 pr = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sg, base};
    I->f.vkGetPhysicalDeviceProperties2(p, &pr);
    snprintf(info->name, sizeof info->name, "%s", base.deviceName);
    if (v12)
        snprintf(info->driver, sizeof info->driver, "%.120s %.120s", drv.driverName, drv.driverInfo);
    else
        snprintf(info->driver, sizeof info->driver, "driver version 0x%x", base.driverVersion);
    info->api_version = base.apiVersion;
    info->vendor_id = base.vendorID;
    info->device_id = base.deviceID;
    info->type = (int)base.deviceType;
    info->max_range = base.limits.maxStorageBufferRange;
    info->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                           (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    info->subgroup_size = info->subgroup_arith ? sg.subgroupSize : 0;
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
                                                     NULL, 0, 0};
    const int has_f16 = VK_API_VERSION_MINOR(base.apiVersion) >= 2 || has_ext(I, p, "VK_KHR_shader_float16_int8");
    VkPhysicalDeviceSubgroupSizeControlFeatures scf;
    memset(&scf, 0, sizeof scf);
    scf.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
    f16.pNext = szc ? &scf : NULL;
    VkPhysicalDeviceFeatures2 ft = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    has_f16 ? (void *)&f16 : szc ? (void *)&scf : NULL, {0}};
    I->f.vkGetPhysicalDeviceFeatures2(p, &ft);
    if (szc && info->subgroup_arith) {
        info->subgroup_min = scp.minSubgroupSize;
        info->subgroup_max = scp.maxSubgroupSize;
        info->subgroup_control = scf.subgroupSizeControl && (scp.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                 scp.minSubgroupSize > 0 && scp.maxSubgroupSize >= scp.minSubgroupSize;
        info->full_subgroups = scf.computeFullSubgroups != 0;
    }
    info->fp64 = ft.features.shaderFloat64 != 0;
    info->int64 = ft.features.shaderInt64 != 0;
    info->fp16 = has_f16 && f16.shaderFloat16;
    info->coopmat = has_ext(I, p, "VK_KHR_cooperative_matrix");
    VkPhysicalDeviceMemoryProperties mp;
    I->f.vkGetPhysicalDeviceMemoryProperties(p, &mp);
    for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
        if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[h].size > info->mem_total)
            info->mem_total = mp.memoryHeaps[h].size;
}

af_status af_vk_enumerate(af_vk_info *out, int cap, int *n) {
    *n = 0;
    vk_inst I;
    memset(&I, 0, sizeof I);
    AF_TRY(inst_open(&I));
    uint32_t cnt = 0;
    VkResult r = I.f.vkEnumeratePhysicalDevices(I.inst, &cnt, NULL);
    VkPhysicalDevice *pd = cnt ? calloc(cnt, sizeof *pd) : NULL;
    if (r == VK_SUCCESS && cnt) r = pd ? I.f.vkEnumeratePhysicalDevices(I.inst, &cnt, pd) : VK_ERROR_OUT_OF_HOST_MEMORY;
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(pd);
        I.f.vkDestroyInstance(I.inst, NULL);
        return af_fail(AF_ERR_UNSUPPORTED, "Vulkan: vkEnumeratePhysicalDevices returned %s", af_vk_result_name(r));
    }
    for (uint32_t i = 0; i < cnt && (int)i < cap; i++) describe(&I, pd[i], &out[i]);
    *n = (int)cnt;
    free(pd);
    I.f.vkDestroyInstance(I.inst, NULL);
    return AF_OK;
}

/* ---------------------------------------------------------------- open / close */

const af_vk_info *af_vk_dev_info(const af_vk_dev *d) { return &d->info; }

const char *af_vk_dev_name(const af_vk_dev *d) {
    static _Thread_local char buf[300];
    snprintf(buf, sizeof buf, "vulkan:%d (%s)", d->index, d->info.name);
    return buf;
}

int af_vk_pick_memory(const af_vk_memtype *t, int n, int device_type, af_vk_mempick *out) {
    const uint32_t DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                   HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    const int discrete = device_type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    int best = -1, best_pref = 0, host = -1, host_score = -1;
    uint64_t best_heap = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t fl = t[i].flags;
        if (!(fl & DL)) continue;
        const int hv = (fl & HV) && (fl & HC);
        const int pref = discrete ? !(fl & HV) : hv; /* the preferred kind on this device */
        if (best < 0 || t[i].heap_size > best_heap || (t[i].heap_size == best_heap && pref && !best_pref))
            best = i, best_heap = t[i].heap_size, best_pref = pref;
    }
    for (int i = 0; i < n; i++) {
        const uint32_t fl = t[i].flags;
        if (!(fl & HV)) continue;
        const int score = 2 * ((fl & HC) != 0) + ((fl & CA) != 0);
        if (score > host_score) host = i, host_score = score;
    }
    if (best < 0 || host < 0) return -1;
    out->device = best;
    out->host = host;
    out->device_host_visible = !discrete && (t[best].flags & HV) && (t[best].flags & HC);
    out->host_coherent = (t[host].flags & HC) != 0;
    out->host_cached = (t[host].flags & CA) != 0;
    return 0;
}

uint32_t af_vk_pick_subgroup_size(uint32_t min_size, uint32_t max_size) {
    if (min_size == 0 || max_size < min_size) return 0;
    uint32_t s = 32;
    if (s < min_size) s = min_size;
    if (s > max_size) s = max_size;
    return s;
}

/* Memory types of the device (af_vk_pick_memory's policy). */
static int pick_memory(af_vk_dev *d) {
    const VkPhysicalDeviceMemoryProperties *mp = &d->memprops;
    af_vk_memtype t[VK_MAX_MEMORY_TYPES];
    const int n = (int)(mp->memoryTypeCount < VK_MAX_MEMORY_TYPES ? mp->memoryTypeCount : VK_MAX_MEMORY_TYPES);
    for (int i = 0; i < n; i++)
        t[i] = (af_vk_memtype){mp->memoryTypes[i].propertyFlags, mp->memoryHeaps[mp->memoryTypes[i].heapIndex].size};
    af_vk_mempick pk;
    if (af_vk_pick_memory(t, n, d->info.type, &pk)) return -1;
    d->mt_device = (uint32_t)pk.device;
    d->mt_host = (uint32_t)pk.host;
    d->device_host_visible = pk.device_host_visible;
    d->mt_host_coherent = pk.host_coherent;
    return 0;
}

static void parse_fault_env(af_vk_dev *d) {
    const char *e = getenv("AF_VULKAN_FAULT");
    if (!e) return;
    static const char *const names[AF_VK_FAULT_COUNT] = {"alloc", "lost", "shader"};
    for (int k = 0; k < AF_VK_FAULT_COUNT; k++) {
        const char *s = strstr(e, names[k]);
        if (s && s[strlen(names[k])] == ':') d->fault[k] = atoi(s + strlen(names[k]) + 1);
    }
}

/* d->qfam: the first queue family with compute. Errors: AF_ERR_UNSUPPORTED (none). */
static af_status pick_compute_queue(af_vk_dev *d) {
    uint32_t nq = 0;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    int fam = -1;
    for (uint32_t i = 0; i < nq; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            fam = (int)i;
            break;
        }
    if (fam < 0) return af_fail(AF_ERR_UNSUPPORTED, "%s: no compute queue", af_vk_dev_name(d));
    d->qfam = (uint32_t)fam;
    return AF_OK;
}

/* What the shaders may use on d (from its description) and the tile choice of its kind. */
static void set_capabilities(af_vk_dev *d) {
    d->fp64 = d->info.fp64;
    d->int64 = d->info.int64;
    d->fp16 = d->info.fp16;
    d->subgroup_arith = d->info.subgroup_arith;
    d->subgroup_size = d->info.subgroup_size;
    d->use_fp64 = d->fp64;
    d->use_subgroup = d->subgroup_arith;
    d->use_fp16 = 0; /* opt-in precision */
    /* a GPU has tens of compute units, each wanting several workgroups; a CPU device (lavapipe) has a
     * few threads, and the 64-tile shader does more work per workgroup */
    d->mm_small_below = d->info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0 : VK_MM_SMALL_BELOW;
    d->sg_required = d->info.subgroup_control ? af_vk_pick_subgroup_size(d->info.subgroup_min, d->info.subgroup_max) : 0;
}

/* The logical device with one compute queue and only the features and extensions the shaders use;
 * its functions loaded, its queue. Errors: AF_ERR_UNSUPPORTED (vkCreateDevice failed, a function
 * missing). */
static af_status create_device(af_vk_dev *d) {
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
                                                     NULL, d->fp16 ? VK_TRUE : VK_FALSE, VK_FALSE};
    VkPhysicalDeviceFeatures feat;
    memset(&feat, 0, sizeof feat);
    feat.shaderFloat64 = d->fp64 ? VK_TRUE : VK_FALSE;
    feat.shaderInt64 = d->int64 ? VK_TRUE : VK_FALSE;
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, d->qfam, 1, &prio};
    const char *exts[2];
    uint32_t next = 0;
    if (d->fp16 && VK_API_VERSION_MINOR(d->info.api_version) < 2) exts[next++] = "VK_KHR_shader_float16_int8";
    /* subgroup size control: only the two features the subgroup shaders' pipelines use */
    const int szc = d->info.subgroup_control || d->info.full_subgroups;
    VkPhysicalDeviceSubgroupSizeControlFeatures scf;
    memset(&scf, 0, sizeof scf);
    scf.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
    scf.subgroupSizeControl = d->info.subgroup_control ? VK_TRUE : VK_FALSE;
    scf.computeFullSubgroups = d->info.full_subgroups ? VK_TRUE : VK_FALSE;
    if (szc && VK_API_VERSION_MINOR(d->info.api_version) < 3) exts[next++] = "VK_EXT_subgroup_size_control";
    f16.pNext = szc ? &scf : NULL;
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              d->fp16 ? (void *)&f16 : szc ? (void *)&scf : NULL, 0, 1, &qci, 0, NULL, next,
                              exts, &feat};
    VkResult r = d->f.vkCreateDevice(d->phys, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        d->dev = VK_NULL_HANDLE;
        return af_fail(AF_ERR_UNSUPPORTED, "%s: vkCreateDevice returned %s", af_vk_dev_name(d), af_vk_result_name(r));
    }
    char err[300];
    if (af_vk_load_device(&d->f, d->dev, &d->v, err, sizeof err))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: %s", af_vk_dev_name(d), err);
    d->v.vkGetDeviceQueue(d->dev, d->qfam, 0, &d->queue);
    return AF_OK;
}

/* The memory types and the buffer limits (largest storage range, offset alignment, largest
 * allocation). Errors: AF_ERR_UNSUPPORTED (no device-local or no host-visible memory). */
static af_status read_memory(af_vk_dev *d) {
    d->f.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->memprops);
    if (pick_memory(d))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: no device-local or no host-visible memory type", af_vk_dev_name(d));
    VkPhysicalDeviceProperties pr;
    d->f.vkGetPhysicalDeviceProperties(d->phys, &pr);
    d->max_range = (uint64_t)pr.limits.maxStorageBufferRange & ~(uint64_t)255;
    d->min_sb_align = pr.limits.minStorageBufferOffsetAlignment;
    VkPhysicalDeviceMaintenance3Properties m3 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, NULL, 0, 0};
    VkPhysicalDeviceProperties2 p2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3, pr};
    d->f.vkGetPhysicalDeviceProperties2(d->phys, &p2);
    d->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : ((uint64_t)1 << 30);
    return AF_OK;
}

af_status af_vk_open(int index, af_vk_dev **out) {
    *out = NULL;
    vk_inst I;
    memset(&I, 0, sizeof I);
    AF_TRY(inst_open(&I));
    uint32_t cnt = 0;
    I.f.vkEnumeratePhysicalDevices(I.inst, &cnt, NULL);
    if (index < 0 || (uint32_t)index >= cnt) {
        I.f.vkDestroyInstance(I.inst, NULL);
        if (cnt == 0)
            return af_fail(AF_ERR_NOT_FOUND, "Vulkan: no device (the loader found no driver with a device; Debian: "
                                             "apt-get install mesa-vulkan-drivers for the CPU device lavapipe)");
        return af_fail(AF_ERR_NOT_FOUND, "Vulkan: no device vulkan:%d (this machine has %u: vulkan:0 .. vulkan:%u)",
                       index, cnt, cnt - 1);
    }
    VkPhysicalDevice *pd = calloc(cnt, sizeof *pd);
    af_vk_dev *d = calloc(1, sizeof *d);
    if (!pd || !d) {
        free(pd), free(d);
        I.f.vkDestroyInstance(I.inst, NULL);
        return af_fail(AF_ERR_NOMEM, "Vulkan: out of memory opening a device");
    }
    I.f.vkEnumeratePhysicalDevices(I.inst, &cnt, pd);
    d->f = I.f;
    d->inst = I.inst;
    d->phys = pd[index];
    free(pd);
    d->index = index;
    pthread_mutex_init(&d->mu, NULL);
    describe(&I, d->phys, &d->info);
    af_status st = AF_OK;
    if (VK_API_VERSION_MAJOR(d->info.api_version) == 1 && VK_API_VERSION_MINOR(d->info.api_version) < 1)
        st = af_fail(AF_ERR_UNSUPPORTED, "%s: supports Vulkan %u.%u; afinar needs 1.1", af_vk_dev_name(d),
                     VK_API_VERSION_MAJOR(d->info.api_version), VK_API_VERSION_MINOR(d->info.api_version));
    if (st == AF_OK) st = pick_compute_queue(d);
    if (st == AF_OK) {
        set_capabilities(d);
        st = create_device(d);
    }
    if (st == AF_OK) st = read_memory(d);
    if (st == AF_OK) {
        parse_fault_env(d);
        if (vk_exec_init(d)) {
            st = vk_status(d);
            if (st == AF_OK) st = af_fail(AF_ERR_INTERNAL, "%s: setting up the command stream failed", af_vk_dev_name(d));
        }
    }
    if (st != AF_OK) {
        af_vk_close(d);
        return st;
    }
    vk_pcache_open(d);
    *out = d;
    return AF_OK;
}

void af_vk_close(af_vk_dev *d) {
    if (!d) return;
    if (d->dev) {
        if (!d->lost) d->v.vkDeviceWaitIdle(d->dev);
        vk_pcache_save(d);
        vk_exec_release(d);
        vk_mem_release_all(d);
        d->v.vkDestroyDevice(d->dev, NULL);
    }
    if (d->inst) d->f.vkDestroyInstance(d->inst, NULL);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* ---------------------------------------------------------------- hooks */

int af_vk_set_hook(af_vk_dev *d, af_vk_hook h, uint64_t value) {
    pthread_mutex_lock(&d->mu);
    int prev = -1;
    switch (h) {
    case AF_VK_HOOK_BUFFER_LIMIT:
        prev = (int)(d->hook_range > 0x7FFFFFFF ? 0x7FFFFFFF : d->hook_range);
        d->hook_range = value & ~(uint64_t)255;
        break;
    case AF_VK_HOOK_FP64:
        prev = d->use_fp64;
        if (!value || d->fp64) d->use_fp64 = value != 0;
        else prev = -1;
        break;
    case AF_VK_HOOK_SUBGROUP:
        prev = d->use_subgroup;
        if (!value || d->subgroup_arith) d->use_subgroup = value != 0;
        else prev = -1;
        break;
    case AF_VK_HOOK_FP16:
        prev = d->use_fp16;
        if (!value || d->fp16) d->use_fp16 = value != 0;
        else prev = -1;
        break;
    case AF_VK_HOOK_MM_SMALL:
        prev = (int)(d->mm_small_below > 0x7FFFFFFF ? 0x7FFFFFFF : d->mm_small_below);
        d->mm_small_below = value;
        break;
    case AF_VK_HOOK_STAGING:
        prev = d->force_staging;
        d->force_staging = value != 0;
        break;
    case AF_VK_HOOK_SUBGROUP_SIZE:
        prev = (int)d->sg_required;
        if (value && (!d->info.subgroup_control || value < d->info.subgroup_min || value > d->info.subgroup_max ||
                      (value & (value - 1))))
            prev = -1;
        else d->sg_required = (uint32_t)value;
        break;
    }
    pthread_mutex_unlock(&d->mu);
    return prev;
}

void af_vk_fault_arm(af_vk_dev *d, int kind, int n) {
    if (kind < 0 || kind >= AF_VK_FAULT_COUNT) return;
    pthread_mutex_lock(&d->mu);
    d->fault[kind] = n;
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- pipeline cache file
 * $XDG_CACHE_HOME/afinar (else ~/.cache/afinar)/vulkan-<pipelineCacheUUID>.bin: the driver's
 * pipelineCacheUUID changes with the device and the driver build. The file is our 24-byte header
 * ("AFVKPC1\0", data size, FNV-1a of the data) and the driver's blob; a file that does not check out
 * (size, checksum, the blob's own header naming another device) is ignored with a note. */

#define PC_MAGIC "AFVKPC1"

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void pcache_path(af_vk_dev *d) {
    VkPhysicalDeviceProperties pr;
    d->f.vkGetPhysicalDeviceProperties(d->phys, &pr);
    char uuid[40];
    for (unsigned i = 0; i < VK_UUID_SIZE; i++) snprintf(uuid + 2 * i, 3, "%02x", pr.pipelineCacheUUID[i]);
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[400];
    if (x && *x) snprintf(dir, sizeof dir, "%s/afinar", x);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/afinar", home);
    else return;
    snprintf(d->pcache_path, sizeof d->pcache_path, "%s/vulkan-%04x-%04x-%s.bin", dir, pr.vendorID, pr.deviceID, uuid);
}

void vk_pcache_open(af_vk_dev *d) {
    pcache_path(d);
    const void *init = NULL;
    size_t init_size = 0;
    char *buf = NULL;
    if (d->pcache_path[0] && !getenv("AF_VULKAN_NO_PIPELINE_CACHE")) {
        size_t len = 0;
        const char *why = NULL;
        buf = af_read_file_max(d->pcache_path, (size_t)1 << 30, &len, &why);
        if (buf) {
            VkPhysicalDeviceProperties pr;
            d->f.vkGetPhysicalDeviceProperties(d->phys, &pr);
            uint64_t sz = 0, sum = 0;
            if (len >= 24) memcpy(&sz, buf + 8, 8), memcpy(&sum, buf + 16, 8);
            const unsigned char *blob = (const unsigned char *)buf + 24;
            int ok = len >= 24 + 32 && !memcmp(buf, PC_MAGIC, 8) && sz == len - 24 && sum == fnv1a(blob, (size_t)sz);
            if (ok) { /* VkPipelineCacheHeaderVersionOne: size, version, vendor, device, uuid */
                uint32_t hv[4];
                memcpy(hv, blob, 16);
                ok = hv[0] >= 32 && hv[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && hv[2] == pr.vendorID &&
                     hv[3] == pr.deviceID && !memcmp(blob + 16, pr.pipelineCacheUUID, VK_UUID_SIZE);
            }
            if (ok) init = blob, init_size = (size_t)sz;
            else snprintf(d->note, sizeof d->note, "pipeline cache %s is corrupt or from another driver: ignored (it will be rewritten)", d->pcache_path);
        }
    }
    VkPipelineCacheCreateInfo ci = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, NULL, 0, init_size, init};
    if (d->v.vkCreatePipelineCache(d->dev, &ci, NULL, &d->pcache) != VK_SUCCESS) {
        ci.initialDataSize = 0, ci.pInitialData = NULL;
        if (d->v.vkCreatePipelineCache(d->dev, &ci, NULL, &d->pcache) != VK_SUCCESS) d->pcache = VK_NULL_HANDLE;
    }
    free(buf);
}

void vk_pcache_save(af_vk_dev *d) {
    if (!d->pcache) return;
    size_t n = 0;
    if (d->pcache_path[0] && d->npipe > 0 && !getenv("AF_VULKAN_NO_PIPELINE_CACHE") &&
        d->v.vkGetPipelineCacheData(d->dev, d->pcache, &n, NULL) == VK_SUCCESS && n >= 32) {
        unsigned char *buf = malloc(24 + n);
        if (buf && d->v.vkGetPipelineCacheData(d->dev, d->pcache, &n, buf + 24) == VK_SUCCESS) {
            uint64_t sz = n, sum = fnv1a(buf + 24, n);
            memcpy(buf, PC_MAGIC, 8);
            memcpy(buf + 8, &sz, 8);
            memcpy(buf + 16, &sum, 8);
            char dir[512];
            snprintf(dir, sizeof dir, "%s", d->pcache_path);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            af_atomic_file *f = NULL;
            /* best effort: a cache that cannot be written costs compile time, nothing else */
            if (af_mkdir_p(dir) == AF_OK && af_atomic_open(d->pcache_path, &f) == AF_OK) {
                if (af_atomic_write(f, buf, 24 + n) == AF_OK) af_atomic_commit(f);
                else af_atomic_abort(f);
            }
            af_clear_error();
        }
        free(buf);
    }
    d->v.vkDestroyPipelineCache(d->dev, d->pcache, NULL);
    d->pcache = VK_NULL_HANDLE;
}

const char *af_vk_dev_note(const af_vk_dev *d) { return d->note; }
