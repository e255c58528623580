/* ctx.c — af_ctx (afinar.h, kernels/ctx.h): settings resolved and checked once, the kernel table
 * chosen once. */
#include "kernels/ctx.h"

#include "core/blocks.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void af_ctx_params_default(af_ctx_params *p) {
    memset(p, 0, sizeof *p);
    p->kernel_path = "auto";
    p->matmul_precision = "f32";
    p->quantize = "none";
    p->poll_us = AF_THREADPOOL_POLL_US;
}

/* A failure of setting `field` (value `v`), recorded in rep (may be NULL): returns st. */
static af_status refused(af_ctx_report *rep, af_ctx_setting field, const char *v, af_status st) {
    if (rep) {
        rep->field = field;
        snprintf(rep->value, sizeof rep->value, "%s", v ? v : "");
    }
    return st;
}

/* Fills *c from p (c zeroed by the caller); a refused setting is named in rep (may be NULL);
 * pick (may be NULL) gets what the device spec chose. */
static af_status ctx_init(af_ctx *c, const af_ctx_params *p, af_ctx_report *rep, af_device_pick *pick) {
    af_ctx_params d;
    if (!p) {
        af_ctx_params_default(&d);
        p = &d;
    }
    af_status st = af_kpath_parse(p->kernel_path, &c->path);
    if (st != AF_OK) return refused(rep, AF_CTX_SETTING_KERNEL, p->kernel_path, st);
    c->k = af_kernels_for(c->path);
    const char *prec = p->matmul_precision ? p->matmul_precision : "f32";
    const int is_bf16 = !strcmp(prec, "bf16"), is_i8 = !strcmp(prec, "int8");
    if ((is_bf16 && (!c->k->gp_bf16 || !af_cpu()->avx512_bf16)) || (is_i8 && !c->k->gp_i8)) {
        char buf[200];
        af_cpu_describe(buf, sizeof buf, c->path);
        return refused(rep, AF_CTX_SETTING_PRECISION, prec,
                       af_fail(AF_ERR_UNSUPPORTED, "matmul precision %s: needs %s and the avx512 kernel path (this CPU/path: %s)",
                               prec, is_i8 ? "AVX512_VNNI" : "AVX512_BF16", buf));
    }
    if (is_bf16) {
        c->bf16 = 1;
    } else if (is_i8) {
        /* the frozen weights' products in int8; the other packed products bf16 where the CPU has it */
        c->i8 = 1;
        c->bf16 = c->k->gp_bf16 && af_cpu()->avx512_bf16;
    } else if (strcmp(prec, "f32"))
        return refused(rep, AF_CTX_SETTING_PRECISION, prec,
                       af_fail(AF_ERR_INVALID_ARG, "matmul precision '%s': expected f32, bf16 or int8", prec));
    const char *qz = p->quantize ? p->quantize : "none";
    if (!strcmp(qz, "none")) c->quantize = AF_TYPE_F32;
    else if (!strcmp(qz, "nf4")) c->quantize = AF_TYPE_NF4;
    else if (!strcmp(qz, "q8_0")) c->quantize = AF_TYPE_Q8_0;
    else if (!strcmp(qz, "f16")) c->quantize = AF_TYPE_F16;
    else if (!strcmp(qz, "bf16")) c->quantize = AF_TYPE_BF16;
    else
        return refused(rep, AF_CTX_SETTING_QUANTIZE, qz,
                       af_fail(AF_ERR_INVALID_ARG, "quantize '%s': expected none, nf4, q8_0, f16 or bf16", qz));
    /* an absurd thread count (-t 1000 on 2 CPUs runs ~100x slower, threads fighting for cores) */
    const int cpus = af_cpu_count(), max_threads = 4 * cpus > 8 ? 4 * cpus : 8;
    if (p->n_threads > max_threads) {
        char v[16];
        snprintf(v, sizeof v, "%d", p->n_threads);
        return refused(rep, AF_CTX_SETTING_THREADS, v,
                       af_fail(AF_ERR_INVALID_ARG,
                               "threads %d: more than 4x the %d CPUs this process may use (at most %d; 0 = one per CPU)",
                               p->n_threads, cpus, max_threads));
    }
    c->n_threads = p->n_threads > 0 ? p->n_threads : cpus;
    const char *dspec = p->device && *p->device ? p->device : "cpu";
    if (strlen(dspec) >= sizeof c->device_spec)
        return refused(rep, AF_CTX_SETTING_DEVICE, dspec,
                       af_fail(AF_ERR_INVALID_ARG, "device '%.40s...': unknown (expected cpu, vulkan, vulkan:N or auto)",
                               dspec));
    snprintf(c->device_spec, sizeof c->device_spec, "%s", dspec);
    af_device_pick pk;
    st = af_device_acquire(dspec, &c->dev, &pk);
    if (st != AF_OK) return refused(rep, AF_CTX_SETTING_DEVICE, dspec, st);
    c->device_auto = pk.is_auto;
    if (pick) *pick = pk;
    c->be = c->dev->be;
    if (!strcmp(c->dev->info.backend, "cpu") || !strcmp(c->dev->info.backend, "guard"))
        snprintf(c->device_id, sizeof c->device_id, "%s", c->dev->info.backend);
    else snprintf(c->device_id, sizeof c->device_id, "%s:%d", c->dev->info.backend, (int)c->dev->info.index);
    st = af_threadpool_new(c->n_threads, p->poll_us, af_kernels_thread_release, &c->pool);
    if (st != AF_OK) {
        af_device_release(c->dev);
        c->dev = NULL;
        return st;
    }
    c->int8_act = p->int8_activations != 0;
    c->fused_decode = 1;
    c->att_gemm = 1;
    c->mlp_fused = 1;
    c->decode_groups = 1;
    c->int8_roles = AF_INT8_ALL;
    af_cpu_describe(c->desc, sizeof c->desc, c->path);
    return AF_OK;
}

af_status af_ctx_new(const af_ctx_params *p, af_ctx **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_ctx_new: NULL argument");
    *out = NULL;
    af_ctx *c = af_calloc(1, sizeof *c);
    if (!c) return af_fail(AF_ERR_NOMEM, "out of memory for a context");
    af_status st = ctx_init(c, p, NULL, NULL);
    if (st != AF_OK) {
        free(c);
        return st;
    }
    *out = c;
    return AF_OK;
}

/* af_ctx_new with the report of af_ctx_open (pick: the device choice). */
static af_status ctx_new_rep(const af_ctx_params *p, af_ctx **out, af_ctx_report *rep, af_device_pick *pick) {
    af_ctx *c = af_calloc(1, sizeof *c);
    if (!c) return af_fail(AF_ERR_NOMEM, "out of memory for a context");
    af_status st = ctx_init(c, p, rep, pick);
    if (st != AF_OK) {
        free(c);
        return st;
    }
    *out = c;
    return AF_OK;
}

af_status af_ctx_open(const af_ctx_params *p, af_ctx **out, af_ctx_report *rep) {
    af_ctx_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_ctx_open: NULL argument");
    *out = NULL;
    af_ctx_params q;
    if (p) q = *p;
    else af_ctx_params_default(&q);
    af_device_pick pick;
    memset(&pick, 0, sizeof pick);
    af_status st;
    if (q.matmul_precision && (!strcmp(q.matmul_precision, "bf16") || !strcmp(q.matmul_precision, "int8"))) {
        st = ctx_new_rep(&q, out, rep, &pick);
        if (st == AF_OK && !(*out)->i8) {
            double f32 = 0, bf = 0; /* bf16 where it is slower: the caller says so with the figures */
            if (af_ctx_measure_precision(*out, &f32, &bf) == AF_OK && bf > 0) {
                rep->bf16_slower = bf < f32;
                rep->f32_gflops = f32;
                rep->bf16_gflops = bf;
            }
        } else if (rep->field == AF_CTX_SETTING_PRECISION && st == AF_ERR_UNSUPPORTED) {
            rep->bf16_fallback = 1;
            snprintf(rep->bf16_why, sizeof rep->bf16_why, "%s", af_last_error());
            rep->field = AF_CTX_SETTING_NONE;
            rep->value[0] = 0;
            q.matmul_precision = "f32";
        } else
            return st;
    }
    if (!*out) AF_TRY(ctx_new_rep(&q, out, rep, &pick));
    const af_ctx *c = *out;
    if (pick.is_auto && pick.chose_cpu)
        snprintf(rep->device_line, sizeof rep->device_line, "no accelerator (%s); computing on the CPU",
                 pick.why[0] ? pick.why : "none");
    else if (pick.is_auto)
        snprintf(rep->device_line, sizeof rep->device_line, "running on %s (%.200s, %s)", c->device_id, c->dev->info.name,
                 c->dev->info.kind);
    return AF_OK;
}

int af_ctx_falls_back(const af_ctx *ctx, af_status st) {
    return ctx && ctx->device_auto && !af_ctx_on_cpu(ctx) &&
           (st == AF_ERR_DEVICE || st == AF_ERR_NOMEM || st == AF_ERR_UNSUPPORTED);
}

af_status af_ctx_new_cpu(const af_ctx *ctx, int keep_quantize, af_ctx **out) {
    if (!ctx || !out) return af_fail(AF_ERR_INVALID_ARG, "af_ctx_new_cpu: NULL argument");
    af_ctx_params p;
    af_ctx_get_params(ctx, &p);
    p.device = "cpu";
    if (!keep_quantize) p.quantize = "none";
    return af_ctx_new(&p, out);
}

void af_ctx_free(af_ctx *ctx) {
    if (!ctx) return;
    af_threadpool_free(ctx->pool);
    af_device_release(ctx->dev);
    free(ctx);
}

static af_ctx g_default;
static int g_default_state; /* 0 none, 1 being built, 2 ready */

const af_ctx *af_ctx_default(void) {
    if (__atomic_load_n(&g_default_state, __ATOMIC_ACQUIRE) == 2) return &g_default;
    int expected = 0;
    if (__atomic_compare_exchange_n(&g_default_state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (ctx_init(&g_default, NULL, NULL, NULL) != AF_OK) { /* the defaults cannot fail; keep a scalar table */
            g_default.k = af_kernels_for(AF_KPATH_SCALAR);
            g_default.path = AF_KPATH_SCALAR;
            g_default.n_threads = 1;
            if (!g_default.dev) af_device_acquire("cpu", &g_default.dev, NULL);
            g_default.be = &af_backend_cpu;
            snprintf(g_default.device_spec, sizeof g_default.device_spec, "cpu");
            snprintf(g_default.device_id, sizeof g_default.device_id, "cpu");
        }
        __atomic_store_n(&g_default_state, 2, __ATOMIC_RELEASE);
    } else
        while (__atomic_load_n(&g_default_state, __ATOMIC_ACQUIRE) != 2) {
        }
    return &g_default;
}

void af_ctx_set_hook(af_ctx *ctx, af_ctx_hook hook, int on) {
    if (hook == AF_CTX_FUSED_DECODE) ctx->fused_decode = on != 0;
    else if (hook == AF_CTX_ATT_GEMM) ctx->att_gemm = on != 0;
    else if (hook == AF_CTX_MLP_FUSED) ctx->mlp_fused = on != 0;
    else if (hook == AF_CTX_DECODE_GROUPS) ctx->decode_groups = on != 0;
}

void af_ctx_set_int8_roles(af_ctx *ctx, int roles) { ctx->int8_roles = roles & AF_INT8_ALL; }

void af_ctx_get_params(const af_ctx *ctx, af_ctx_params *p) {
    af_ctx_params_default(p);
    p->n_threads = ctx->n_threads;
    p->kernel_path = af_kpath_name(ctx->path);
    p->matmul_precision = af_ctx_matmul_precision(ctx);
    p->int8_activations = ctx->int8_act;
    p->quantize = ctx->quantize == AF_TYPE_NF4 ? "nf4" : ctx->quantize == AF_TYPE_Q8_0 ? "q8_0"
                  : ctx->quantize == AF_TYPE_F16 ? "f16" : ctx->quantize == AF_TYPE_BF16 ? "bf16" : "none";
    p->poll_us = af_threadpool_poll_us(ctx->pool);
    p->device = ctx->device_spec;
}

int af_ctx_n_threads(const af_ctx *ctx) { return ctx->n_threads; }
void af_ctx_set_interrupt(af_ctx *ctx, volatile int *flag) {
    if (ctx) ctx->interrupt = flag;
}
int af_ctx_interrupted(const af_ctx *ctx) { return ctx && ctx->interrupt && *ctx->interrupt != 0; }
const char *af_ctx_kernel_path(const af_ctx *ctx) { return af_kpath_name(ctx->path); }
const char *af_ctx_matmul_precision(const af_ctx *ctx) { return ctx->i8 ? "int8" : ctx->bf16 ? "bf16" : "f32"; }
int af_ctx_int8_activations(const af_ctx *ctx) { return ctx->int8_act; }
int af_ctx_poll_us(const af_ctx *ctx) { return af_threadpool_poll_us(ctx->pool); }
void af_ctx_pool_stats(const af_ctx *ctx, af_pool_stats *out) {
    af_threadpool_counts c;
    af_threadpool_stats(ctx ? ctx->pool : NULL, &c);
    out->regions = c.regions;
    out->forks = c.forks;
}
const char *af_ctx_describe(const af_ctx *ctx) { return ctx->desc; }

/* GFLOP/s of c = a · bᵀ on ctx (best of 3 after a warm-up). */
static double gemm_rate(const af_ctx *ctx, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k) {
    double best = 0.0;
    for (int rep = 0; rep < 4; rep++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        af_gemm_abt(ctx, c, a, b, m, n, k, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double r = s > 0 ? 2.0 * (double)m * (double)n * (double)k / s * 1e-9 : 0.0;
        if (rep > 0 && r > best) best = r;
    }
    return best;
}

af_status af_ctx_measure_precision(const af_ctx *ctx, double *f32_gflops, double *bf16_gflops) {
    if (!ctx || !f32_gflops || !bf16_gflops) return af_fail(AF_ERR_INVALID_ARG, "af_ctx_measure_precision: NULL argument");
    const int64_t m = 128, n = 1536, k = 576; /* a training micro-batch's product shape (SmolLM2 gate/up) */
    float *a = malloc((size_t)(m * k + n * k + m * n) * sizeof(float));
    if (!a) return af_fail(AF_ERR_NOMEM, "out of memory for the precision measurement");
    float *b = a + m * k, *c = b + n * k;
    uint32_t s = 12345u; /* operands in [-1, 1): any values do, the timing does not depend on them */
    for (int64_t i = 0; i < m * k + n * k; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    af_ctx v = *ctx; /* the same pool and table, precision switched (not freed: it owns nothing) */
    v.bf16 = 0;
    *f32_gflops = gemm_rate(&v, c, a, b, m, n, k);
    *bf16_gflops = 0.0;
    if (ctx->k->gp_bf16 && af_cpu()->avx512_bf16) {
        v.bf16 = 1;
        *bf16_gflops = gemm_rate(&v, c, a, b, m, n, k);
    }
    free(a);
    return AF_OK;
}

const char *af_ctx_device(const af_ctx *ctx) { return ctx->device_id; }
int af_ctx_on_cpu(const af_ctx *ctx) { return ctx->dev->info.host_memory; }
int af_ctx_device_auto(const af_ctx *ctx) { return ctx->device_auto; }

void af_ctx_device_info(const af_ctx *ctx, af_device_info *out) {
    *out = ctx->dev->info;
    ctx->be->memory(ctx, &out->mem_free, &out->mem_total);
}

/* The listed (non-hidden) backends of the registry. */
static const af_backend_entry *listed(int32_t i) {
    const af_backend_entry *const *e;
    const int32_t n = af_backend_registry(&e);
    for (int32_t k = 0, j = 0; k < n; k++)
        if (!e[k]->hidden && j++ == i) return e[k];
    return NULL;
}

int32_t af_backend_count(void) {
    int32_t n = 0;
    while (listed(n)) n++;
    return n;
}

const char *af_backend_name(int32_t i) {
    const af_backend_entry *e = i >= 0 ? listed(i) : NULL;
    return e ? e->name : NULL;
}

af_status af_backend_devices(int32_t i, af_device_info *out, int32_t cap, int32_t *n, char *why, size_t why_cap) {
    const af_backend_entry *e = i >= 0 ? listed(i) : NULL;
    if (!e || !n) return af_fail(AF_ERR_INVALID_ARG, "af_backend_devices: no backend %d", (int)i);
    if (why && why_cap) why[0] = 0;
    return e->enumerate(out, cap, n, why, why_cap);
}
