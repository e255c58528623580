/*
 * vk_loader.h — the Vulkan entry points afinar uses, loaded at run time from the system's loader
 * (libvulkan.so.1, Debian package libvulkan1) with dlopen, so that a binary built with Vulkan
 * still starts, and says why, on a machine without a loader. Only vk_*.c of this folder include
 * it. Also the names of VkResult codes for messages, and the fault-injection switch of the tests.
 */
#ifndef AF_VK_LOADER_H
#define AF_VK_LOADER_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

/* Functions reached through vkGetInstanceProcAddr(NULL, ...). */
#define AF_VK_GLOBAL_FNS(X)                                                                        \
    X(vkCreateInstance)                                                                            \
    X(vkEnumerateInstanceVersion)

/* Functions of an instance. */
#define AF_VK_INSTANCE_FNS(X)                                                                      \
    X(vkDestroyInstance)                                                                           \
    X(vkEnumeratePhysicalDevices)                                                                  \
    X(vkGetPhysicalDeviceProperties)                                                               \
    X(vkGetPhysicalDeviceProperties2)                                                              \
    X(vkGetPhysicalDeviceFeatures)                                                                 \
    X(vkGetPhysicalDeviceFeatures2)                                                                \
    X(vkGetPhysicalDeviceMemoryProperties)                                                         \
    X(vkGetPhysicalDeviceMemoryProperties2)                                                        \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                    \
    X(vkEnumerateDeviceExtensionProperties)                                                        \
    X(vkCreateDevice)                                                                              \
    X(vkGetDeviceProcAddr)

/* Functions of a device. */
#define AF_VK_DEVICE_FNS(X)                                                                        \
    X(vkDestroyDevice)                                                                             \
    X(vkGetDeviceQueue)                                                                            \
    X(vkDeviceWaitIdle)                                                                            \
    X(vkCreateBuffer)                                                                              \
    X(vkDestroyBuffer)                                                                             \
    X(vkGetBufferMemoryRequirements)                                                               \
    X(vkAllocateMemory)                                                                            \
    X(vkFreeMemory)                                                                                \
    X(vkBindBufferMemory)                                                                          \
    X(vkMapMemory)                                                                                 \
    X(vkUnmapMemory)                                                                               \
    X(vkFlushMappedMemoryRanges)                                                                   \
    X(vkInvalidateMappedMemoryRanges)                                                              \
    X(vkCreateShaderModule)                                                                        \
    X(vkDestroyShaderModule)                                                                       \
    X(vkCreatePipelineCache)                                                                       \
    X(vkGetPipelineCacheData)                                                                      \
    X(vkDestroyPipelineCache)                                                                      \
    X(vkCreateComputePipelines)                                                                    \
    X(vkDestroyPipeline)                                                                           \
    X(vkCreatePipelineLayout)                                                                      \
    X(vkDestroyPipelineLayout)                                                                     \
    X(vkCreateDescriptorSetLayout)                                                                 \
    X(vkDestroyDescriptorSetLayout)                                                                \
    X(vkCreateDescriptorPool)                                                                      \
    X(vkDestroyDescriptorPool)                                                                     \
    X(vkResetDescriptorPool)                                                                       \
    X(vkAllocateDescriptorSets)                                                                    \
    X(vkUpdateDescriptorSets)                                                                      \
    X(vkCreateCommandPool)                                                                         \
    X(vkDestroyCommandPool)                                                                        \
    X(vkResetCommandPool)                                                                          \
    X(vkAllocateCommandBuffers)                                                                    \
    X(vkBeginCommandBuffer)                                                                        \
    X(vkEndCommandBuffer)                                                                          \
    X(vkCmdBindPipeline)                                                                           \
    X(vkCmdBindDescriptorSets)                                                                     \
    X(vkCmdPushConstants)                                                                          \
    X(vkCmdDispatch)                                                                               \
    X(vkCmdPipelineBarrier)                                                                        \
    X(vkCmdCopyBuffer)                                                                             \
    X(vkCmdFillBuffer)                                                                             \
    X(vkQueueSubmit)                                                                               \
    X(vkCreateFence)                                                                               \
    X(vkDestroyFence)                                                                              \
    X(vkWaitForFences)                                                                             \
    X(vkResetFences)                                                                               \
    X(vkGetFenceStatus)                                                                            \
    X(vkCreateQueryPool)                                                                           \
    X(vkDestroyQueryPool)                                                                          \
    X(vkCmdResetQueryPool)                                                                         \
    X(vkCmdWriteTimestamp)                                                                         \
    X(vkGetQueryPoolResults)

typedef struct af_vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define AF_VK_DECL(f) PFN_##f f;
    AF_VK_GLOBAL_FNS(AF_VK_DECL)
    AF_VK_INSTANCE_FNS(AF_VK_DECL)
#undef AF_VK_DECL
} af_vk_fns;

typedef struct af_vk_dfns {
#define AF_VK_DECL(f) PFN_##f f;
    AF_VK_DEVICE_FNS(AF_VK_DECL)
#undef AF_VK_DECL
} af_vk_dfns;

/* Open the loader (once per process; $AF_VULKAN_LOADER names another library file, which tests use
 * to simulate a machine without one) and fill the global functions into *f. Errors:
 * AF_ERR_UNSUPPORTED "Vulkan: no loader ..." naming the file and dlerror(). */
int af_vk_load(af_vk_fns *f, char *err, size_t errlen);
/* After vkCreateInstance: the instance functions. Returns 0 on success, else the name of the first
 * missing function is written to err. */
int af_vk_load_instance(af_vk_fns *f, VkInstance inst, char *err, size_t errlen);
/* After vkCreateInstance: keep every loaded module (the driver) loaded until exit. */
void af_vk_pin_modules(void);
int af_vk_load_device(const af_vk_fns *f, VkDevice dev, af_vk_dfns *d, char *err, size_t errlen);

/* "VK_ERROR_DEVICE_LOST" etc.; "VkResult <n>" for codes it does not know (static or thread-local). */
const char *af_vk_result_name(VkResult r);

/* ---- Fault injection (tests of the bad-input cases) ----
 * Kinds: allocation failure (vkAllocateMemory returns VK_ERROR_OUT_OF_DEVICE_MEMORY), device lost
 * (vkQueueSubmit / vkWaitForFences return VK_ERROR_DEVICE_LOST from then on), shader load failure
 * (vkCreateShaderModule returns VK_ERROR_INVALID_SHADER_NV, i.e. the driver refused the SPIR-V).
 * Each is armed with a count n >= 1: the n-th call of that kind from now on fails (0 disarms).
 * Set from the environment when a device is opened ($AF_VULKAN_FAULT="alloc:N", "lost:N",
 * "shader:N", comma-separated) or by af_vk_fault_arm (kernels/vulkan/vk.h). */
typedef enum af_vk_fault { AF_VK_FAULT_ALLOC = 0, AF_VK_FAULT_LOST, AF_VK_FAULT_SHADER, AF_VK_FAULT_COUNT } af_vk_fault;
/* Counts one call of `kind`; returns 1 when this call must fail. */
int af_vk_fault_hit(int *armed, af_vk_fault kind);

#endif /* AF_VK_LOADER_H */
