/*
 * backend_cpu.c — the CPU backend (kernels/backend.h): device memory is host memory, weights are
 * used where they are mapped (no copy), and every op is the CPU kernel of the same signature
 * (kernels/ops.h, matmul.h, train_ops.h) or a thin adapter for the few that take no context.
 */
#include "kernels/backend.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *cpu_alloc(const af_ctx *ctx, size_t bytes) {
    (void)ctx;
    void *p = af_malloc_aligned(bytes ? bytes : 64);
    if (!p) af_fail(AF_ERR_NOMEM, "out of memory for %.1f MiB", (double)bytes / 1048576.0);
    return p;
}

static void cpu_free(const af_ctx *ctx, void *p) {
    (void)ctx;
    af_free_aligned(p);
}

static const void *cpu_import_weight(const af_ctx *ctx, const void *host, uint32_t type, int64_t rows, int64_t cols,
                                     uint32_t *dev_type) {
    (void)ctx, (void)rows, (void)cols;
    *dev_type = type;
    return host;
}

static void cpu_release_weight(const af_ctx *ctx, const void *dev) { (void)ctx, (void)dev; }

static af_status cpu_upload(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
    return AF_OK;
}

static af_status cpu_download(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
    return AF_OK;
}

static void cpu_copy(const af_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_fill(const af_ctx *ctx, float *x, float value, int64_t n) {
    (void)ctx;
    if (value == 0.0f) memset(x, 0, sizeof(float) * (size_t)n);
    else
        for (int64_t i = 0; i < n; i++) x[i] = value;
}

static af_status cpu_sync(const af_ctx *ctx) {
    (void)ctx;
    return AF_OK;
}

static void ram(uint64_t *free_bytes, uint64_t *total_bytes) {
    const long psz = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    *total_bytes = psz > 0 && pages > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    *free_bytes = psz > 0 && avail > 0 ? (uint64_t)avail * (uint64_t)psz : 0;
}

static void cpu_memory(const af_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)ctx;
    ram(free_bytes, total_bytes);
}

/* adapters for the kernels without a context argument */
static void cpu_add(const af_ctx *ctx, float *y, const float *a, const float *b, int64_t n) {
    (void)ctx;
    af_add(y, a, b, n);
}

static void cpu_pool_forward(const af_ctx *ctx, float *pooled, const float *hidden, const int32_t *seq_start, int32_t B,
                             int64_t H, af_head_pooling pool) {
    (void)ctx;
    af_pool_forward(pooled, hidden, seq_start, B, H, pool);
}

static void cpu_pool_backward(const af_ctx *ctx, float *d_hidden, const float *d_pooled, const int32_t *seq_start,
                              int32_t B, int64_t H, af_head_pooling pool) {
    (void)ctx;
    af_pool_backward(d_hidden, d_pooled, seq_start, B, H, pool);
}

static double cpu_ce_loss(const af_ctx *ctx, float *d_logits, float *probs, const float *logits, const int32_t *labels,
                          const float *class_w, int32_t B, int32_t C) {
    (void)ctx;
    return af_ce_loss(d_logits, probs, logits, labels, class_w, B, C);
}

static double cpu_bce_loss(const af_ctx *ctx, float *d_logits, const float *logits, const float *targets, int32_t B,
                           int32_t C) {
    (void)ctx;
    return af_bce_loss(d_logits, logits, targets, B, C);
}

const af_backend af_backend_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .import_weight = cpu_import_weight,
    .release_weight = cpu_release_weight,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .memory = cpu_memory,
    .matmul_xwt = af_matmul_xwt,
    .matmul_dyw = af_matmul_dyw,
    .matmul_xwt_parts = af_matmul_xwt_parts,
    .matmul_rows = af_matmul_rows,
    .gemm_abt = af_gemm_abt,
    .gemm_ab = af_gemm_ab,
    .gemm_atb = af_gemm_atb,
    .rmsnorm_forward = af_rmsnorm_forward,
    .rmsnorm_backward = af_rmsnorm_backward,
    .rope_forward = af_rope_ff_forward,
    .rope_backward = af_rope_ff_backward,
    .swiglu_forward = af_swiglu_forward,
    .swiglu_backward = af_swiglu_backward,
    .geglu_forward = af_geglu_forward,
    .geglu_backward = af_geglu_backward,
    .attention_forward = af_attention_forward,
    .attention_backward = af_attention_backward,
    .add = cpu_add,
    .scale = af_scale,
    .add_bias = af_add_bias,
    .embed = af_embed,
    .softcap = af_softcap,
    .rows_gather = af_rows_gather,
    .rows_scatter = af_rows_scatter,
    .count_nonfinite = af_count_nonfinite,
    .lora_forward = af_lora_forward,
    .lora_backward = af_lora_backward,
    .lora_dropout_mask = af_lora_dropout_mask,
    .pool_forward = cpu_pool_forward,
    .pool_backward = cpu_pool_backward,
    .head_forward = af_head_forward,
    .head_backward = af_head_backward,
    .ce_loss = cpu_ce_loss,
    .bce_loss = cpu_bce_loss,
    .lm_ce_rows = af_lm_ce_rows,
    .adamw_step = af_adamw_step,
    .clip_grad_norm = af_clip_grad_norm,
    .mlp_gate_up = af_mlp_gate_up,
    .proj_lora_forward = af_proj_lora_forward,
    .proj_lora_backward = af_proj_lora_backward,
    .mlp_down_back = af_mlp_down_back,
};

/* ---------------------------------------------------------------- the registry entry */

/* "model name" of /proc/cpuinfo, else "CPU". */
static void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t') c++;
                snprintf(buf, cap, "%.*s", (int)strcspn(c, "\n"), c);
            }
            break;
        }
    fclose(f);
}

static void cpu_info(af_device_info *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->backend, sizeof d->backend, "cpu");
    char nm[96];
    cpu_name(nm, sizeof nm);
    snprintf(d->name, sizeof d->name, "%s (%d CPUs)", nm, af_cpu_count());
    snprintf(d->kind, sizeof d->kind, "cpu");
    af_cpu_describe(d->features, sizeof d->features, af_kpath_best());
    ram(&d->mem_free, &d->mem_total);
    d->max_alloc = UINT64_MAX;
    d->host_memory = 1;
}

static af_status cpu_enumerate(af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap) {
    (void)why, (void)why_cap;
    *n = 1;
    if (out && cap > 0) cpu_info(&out[0]);
    return AF_OK;
}

static af_status cpu_open(int32_t index, af_device *dev) {
    if (index != 0) return af_fail(AF_ERR_NOT_FOUND, "device cpu:%d: there is one CPU device (cpu:0)", (int)index);
    cpu_info(&dev->info);
    dev->be = &af_backend_cpu;
    return AF_OK;
}

static void cpu_close(af_device *dev) { (void)dev; }

const af_backend_entry af_backend_entry_cpu = {"cpu", 0, cpu_enumerate, cpu_open, cpu_close};
