/*
 * vk_loader.c — dlopen of the Vulkan loader and the function tables (vk_loader.h).
 */
#include "kernels/vulkan/vk_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static void *lib_handle;

int af_vk_load(af_vk_fns *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    pthread_mutex_lock(&load_mu);
    if (!lib_handle) {
        const char *name = getenv("AF_VULKAN_LOADER");
        if (!name || !*name) name = "libvulkan.so.1";
        /* never unloaded: the driver's threads may outlive a device */
        lib_handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib_handle) {
            const char *e = dlerror();
            snprintf(err, errlen,
                     "Vulkan: no loader: cannot open %s (%s); install the Vulkan loader and a driver "
                     "(Debian: apt-get install libvulkan1 mesa-vulkan-drivers)",
                     name, e ? e : "unknown error");
            pthread_mutex_unlock(&load_mu);
            return -1;
        }
    }
    void *h = lib_handle;
    pthread_mutex_unlock(&load_mu);
    *(void **)&f->vkGetInstanceProcAddr = dlsym(h, "vkGetInstanceProcAddr");
    if (!f->vkGetInstanceProcAddr) {
        snprintf(err, errlen, "Vulkan: the loader has no vkGetInstanceProcAddr (not a Vulkan loader?)");
        return -1;
    }
#define AF_VK_LOAD(fn) f->fn = (PFN_##fn)f->vkGetInstanceProcAddr(NULL, #fn);
    AF_VK_GLOBAL_FNS(AF_VK_LOAD)
#undef AF_VK_LOAD
    if (!f->vkCreateInstance) {
        snprintf(err, errlen, "Vulkan: the loader has no vkCreateInstance");
        return -1;
    }
    return 0;
}

/* Every module loaded now (the driver the loader opened for the instance, its LLVM, ...) made
 * unloadable: the loader would dlclose the driver with the last instance and load it (and initialise
 * it) again for the next one. It also keeps the driver's code mapped until exit, so that leak
 * reports of its one-time allocations name it (tests/lsan.supp). */
static int pin_one(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size, (void)arg;
    if (info->dlpi_name && info->dlpi_name[0]) {
        void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (h) dlclose(h); /* NODELETE stays: the module is never unmapped */
    }
    return 0;
}

void af_vk_pin_modules(void) {
    pthread_mutex_lock(&load_mu);
    dl_iterate_phdr(pin_one, NULL);
    pthread_mutex_unlock(&load_mu);
}

int af_vk_load_instance(af_vk_fns *f, VkInstance inst, char *err, size_t errlen) {
#define AF_VK_LOAD(fn)                                                                             \
    f->fn = (PFN_##fn)f->vkGetInstanceProcAddr(inst, #fn);                                         \
    if (!f->fn) {                                                                                  \
        snprintf(err, errlen, "Vulkan: the loader has no %s (needs Vulkan 1.1)", #fn);              \
        return -1;                                                                                 \
    }
    AF_VK_INSTANCE_FNS(AF_VK_LOAD)
#undef AF_VK_LOAD
    return 0;
}

int af_vk_load_device(const af_vk_fns *f, VkDevice dev, af_vk_dfns *d, char *err, size_t errlen) {
#define AF_VK_LOAD(fn)                                                                             \
    d->fn = (PFN_##fn)f->vkGetDeviceProcAddr(dev, #fn);                                            \
    if (!d->fn) {                                                                                  \
        snprintf(err, errlen, "Vulkan: the driver has no %s", #fn);                                 \
        return -1;                                                                                 \
    }
    AF_VK_DEVICE_FNS(AF_VK_LOAD)
#undef AF_VK_LOAD
    return 0;
}

const char *af_vk_result_name(VkResult r) {
    switch (r) {
#define N(x) case x: return #x;
        N(VK_SUCCESS) N(VK_NOT_READY) N(VK_TIMEOUT) N(VK_EVENT_SET) N(VK_EVENT_RESET) N(VK_INCOMPLETE)
        N(VK_ERROR_OUT_OF_HOST_MEMORY) N(VK_ERROR_OUT_OF_DEVICE_MEMORY) N(VK_ERROR_INITIALIZATION_FAILED)
        N(VK_ERROR_DEVICE_LOST) N(VK_ERROR_MEMORY_MAP_FAILED) N(VK_ERROR_LAYER_NOT_PRESENT)
        N(VK_ERROR_EXTENSION_NOT_PRESENT) N(VK_ERROR_FEATURE_NOT_PRESENT) N(VK_ERROR_INCOMPATIBLE_DRIVER)
        N(VK_ERROR_TOO_MANY_OBJECTS) N(VK_ERROR_FORMAT_NOT_SUPPORTED) N(VK_ERROR_FRAGMENTED_POOL)
        N(VK_ERROR_UNKNOWN) N(VK_ERROR_OUT_OF_POOL_MEMORY) N(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        N(VK_ERROR_FRAGMENTATION) N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS) N(VK_PIPELINE_COMPILE_REQUIRED)
        N(VK_ERROR_INVALID_SHADER_NV)
#undef N
    default: {
        static _Thread_local char buf[32];
        snprintf(buf, sizeof buf, "VkResult %d", (int)r);
        return buf;
    }
    }
}

int af_vk_fault_hit(int *armed, af_vk_fault kind) {
    if (armed[kind] <= 0) return 0;
    return --armed[kind] == 0;
}
