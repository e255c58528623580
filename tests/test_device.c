/*
 * test_device.c — devices and the backend table (src/kernels/backend.h):
 *  (a) the registry: `afinar devices` / af_backend_devices list the CPU and say why Vulkan has no
 *      device (not built in, no loader, no device); device names accepted and refused by
 *      af_ctx_new and `--device` (usage errors exit 2, a device that cannot be opened exits 1);
 *      --device auto without an accelerator says so in one line and computes on the CPU;
 *      af_ctx_open names the refused setting (af_ctx_report.field / value) and the CPU-fallback
 *      rule (af_ctx_falls_back) holds for "auto" on a device only;
 *  (a2) --device auto never takes a software device (VK_PHYSICAL_DEVICE_TYPE_CPU: llvmpipe,
 *      lavapipe): with only such devices it computes on the CPU and says so in one line on stderr
 *      naming the device, which `--device vulkan:N` still takes; with AFINAR_FAULT auto=software it
 *      takes it (one line naming it); skipped without a Vulkan device;
 *  (b) the carver packs regions into chunks of at most the device's largest allocation;
 *  (c) the guard device's proof has teeth: a host read of its memory outside the table, and a host
 *      pointer handed to one of its ops, kill a child process (SIGABRT, with the message);
 *  (d) fault injection (AFINAR_FAULT, kernels/backend.h) through the CLI on a tiny model:
 *      - an allocation failure at load, a device lost mid-generation, a device that does not fit
 *        (mem=): `--device guard` exits 1 with the device and the operation named; `--device auto`
 *        goes on on the CPU and prints the CPU's text exactly;
 *      - training: the run fits / does not fit the device (a message saying what would: fewer
 *        tokens per micro-batch, --checkpointing, cpu); a device lost mid-run (exit 1 naming the
 *        last good checkpoint, which is intact; auto: the run goes on on the CPU from it and ends
 *        with the CPU run's adapter bit for bit); a device computing NaN where the CPU does not
 *        (exit 1; auto: the CPU's step, the CPU run's adapter bit for bit);
 *      - serve: the memory guard at load (exit 1); auto: the server starts on the CPU.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "kernels/backend.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];
static const char *g_bin;

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

/* Run `afinar ARGS` (ARGS: printf format; "@" is the test directory) with AFINAR_FAULT=fault (NULL:
 * unset); stdout and stderr into <dir>/out, <dir>/err, read into *out / *err (malloc'ed). Returns
 * the exit status (128 + signal when killed). */
static int cli(const char *fault, char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static const char *g_wrap = ""; /* a command put before afinar (e.g. "timeout --preserve-status -s TERM 4 ") */
static int cli(const char *fault, char **out, char **err, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char exp[3072];
    size_t k = 0;
    for (const char *s = args; *s && k + 300 < sizeof exp; s++) {
        if (*s == '@') k += (size_t)snprintf(exp + k, sizeof exp - k, "%s", g_dir);
        else exp[k++] = *s;
    }
    exp[k] = 0;
    if (fault) snprintf(cmd, sizeof cmd, "AFINAR_FAULT=%s %s%s %s >%s/out 2>%s/err", fault, g_wrap, g_bin, exp, g_dir, g_dir);
    else snprintf(cmd, sizeof cmd, "env -u AFINAR_FAULT %s%s %s >%s/out 2>%s/err", g_wrap, g_bin, exp, g_dir, g_dir);
    int st = system(cmd);
    char p[600];
    snprintf(p, sizeof p, "%s/out", g_dir);
    char *o = tl_read_file(p, NULL);
    snprintf(p, sizeof p, "%s/err", g_dir);
    char *e = tl_read_file(p, NULL);
    if (out) *out = o ? o : strdup("");
    else free(o);
    if (err) *err = e ? e : strdup("");
    else free(e);
    if (getenv("TL_VERBOSE")) fprintf(stderr, "---- %s\n%s", cmd, e ? e : "");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = tl_read_file(a, &la), *y = tl_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

/* ---------------------------------------------------------------- (a) registry and names */

static void test_registry(void) {
    const int32_t nb = af_backend_count();
    CHECK(nb >= 2 && !strcmp(af_backend_name(0), "cpu") && !strcmp(af_backend_name(1), "vulkan") && !af_backend_name(nb),
          "backends: %d (%s, %s)", (int)nb, af_backend_name(0), nb > 1 ? af_backend_name(1) : "-");
    for (int32_t i = 0; i < nb; i++)
        CHECK(strcmp(af_backend_name(i), "guard") != 0, "the debug guard backend is not listed");
    af_device_info d[4];
    int32_t n = 0;
    char why[512];
    CHECK(af_backend_devices(0, d, 4, &n, why, sizeof why) == AF_OK && n == 1 && d[0].mem_total > 0 && d[0].host_memory,
          "cpu devices: %d", (int)n);
    CHECK(af_backend_devices(1, d, 4, &n, why, sizeof why) == AF_OK && (n > 0 || why[0]),
          "vulkan: %d devices or a reason ('%s')", (int)n, why);
    CHECK(af_backend_devices(99, d, 4, &n, why, sizeof why) == AF_ERR_INVALID_ARG, "backend 99");
    static const struct {
        const char *spec;
        af_status want;
        const char *msg;
    } bad[] = {{"foo", AF_ERR_INVALID_ARG, "device 'foo': unknown (expected cpu, vulkan, vulkan:N or auto"},
               {"vulkan:x", AF_ERR_INVALID_ARG, "the index after ':' must be a number"},
               {"vulkan:", AF_ERR_INVALID_ARG, "the index after ':' must be a number"},
               {"cpu:1", AF_ERR_NOT_FOUND, "there is one CPU device"},
               {"guard:1", AF_ERR_NOT_FOUND, "there is one guard device"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        af_ctx_params p;
        af_ctx_params_default(&p);
        p.device = bad[i].spec;
        af_ctx *c = NULL;
        const af_status st = af_ctx_new(&p, &c);
        CHECK(st == bad[i].want && has(af_last_error(), bad[i].msg) && !c, "device '%s': %s (%s)", bad[i].spec,
              af_status_name(st), af_last_error());
        af_ctx_free(c);
    }
    static const char *const good[] = {"cpu", "cpu:0", "guard", "auto"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        af_ctx_params p;
        af_ctx_params_default(&p);
        p.device = good[i];
        af_ctx *c = NULL;
        if (CHECK(af_ctx_new(&p, &c) == AF_OK, "device '%s': %s", good[i], af_last_error())) {
            af_ctx_params q;
            af_ctx_get_params(c, &q);
            const char *qd = q.device ? q.device : "(none)"; /* (GCC -O1 + sanitizers: -Wformat-overflow) */
            CHECK(!strcmp(qd, good[i]), "params keep the device '%s' (%s)", good[i], qd);
            CHECK(af_ctx_device_auto(c) == !strcmp(good[i], "auto"), "auto flag of '%s'", p.device);
            if (!strcmp(good[i], "guard")) CHECK(!af_ctx_on_cpu(c) && !strcmp(af_ctx_device(c), "guard"), "guard");
        }
        af_ctx_free(c);
    }
#ifndef AF_HAVE_VULKAN
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.device = "vulkan";
    af_ctx *c = NULL;
    CHECK(af_ctx_new(&p, &c) == AF_ERR_UNSUPPORTED && has(af_last_error(), "not built in"), "vulkan without the build: %s",
          af_last_error());
    p.device = "auto";
    if (CHECK(af_ctx_new(&p, &c) == AF_OK, "auto: %s", af_last_error()))
        CHECK(af_ctx_on_cpu(c) && !strcmp(af_ctx_device(c), "cpu"), "auto without Vulkan: %s", af_ctx_device(c));
    af_ctx_free(c);
#endif
    if (!g_bin) return;
    /* the CLI */
    char *out = NULL, *err = NULL;
    int rc = cli(NULL, &out, &err, "devices");
    CHECK(rc == 0 && has(out, "cpu: 1 device") && has(out, "\nvulkan: ") && !has(out, "guard"), "afinar devices: %d\n%s",
          rc, out);
    free(out), free(err);
    rc = cli(NULL, NULL, &err, "generate -m @/tiny.gguf -p ab -n 2 --temp 0 --device foo");
    CHECK(rc == 2 && has(err, "--device: device 'foo': unknown"), "--device foo: %d %s", rc, err);
    free(err);
#ifndef AF_HAVE_VULKAN
    rc = cli(NULL, NULL, &err, "generate -m @/tiny.gguf -p ab -n 2 --temp 0 --device vulkan");
    CHECK(rc == 1 && has(err, "device vulkan: not built in"), "--device vulkan (not built): %d %s", rc, err);
    free(err);
    rc = cli(NULL, NULL, &err, "generate -m @/tiny.gguf -p ab -n 2 --temp 0 --device auto");
    CHECK(rc == 0 && has(err, "--device auto: no accelerator (vulkan: not built in") && has(err, "computing on the CPU"),
          "--device auto: %d %s", rc, err);
    free(err);
#endif
}

/* ---------------------------------------------------------------- (a) af_ctx_open, the fallback rule */

static void test_ctx_open(void) {
    static const struct {
        const char *kernel, *prec, *quant, *dev;
        int threads;
        af_ctx_setting field;
        const char *value;
    } bad[] = {{"avx9", NULL, NULL, NULL, 0, AF_CTX_SETTING_KERNEL, "avx9"},
               {NULL, "f64", NULL, NULL, 0, AF_CTX_SETTING_PRECISION, "f64"},
               {NULL, NULL, "q3", NULL, 0, AF_CTX_SETTING_QUANTIZE, "q3"},
               {NULL, NULL, NULL, "foo", 0, AF_CTX_SETTING_DEVICE, "foo"},
               {NULL, NULL, NULL, "cpu:1", 0, AF_CTX_SETTING_DEVICE, "cpu:1"},
               {NULL, NULL, NULL, NULL, 100000, AF_CTX_SETTING_THREADS, "100000"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        af_ctx_params p;
        af_ctx_params_default(&p);
        if (bad[i].kernel) p.kernel_path = bad[i].kernel;
        if (bad[i].prec) p.matmul_precision = bad[i].prec;
        if (bad[i].quant) p.quantize = bad[i].quant;
        p.device = bad[i].dev;
        p.n_threads = bad[i].threads;
        af_ctx *c = NULL;
        af_ctx_report rep;
        const af_status st = af_ctx_open(&p, &c, &rep);
        CHECK(st != AF_OK && !c && rep.field == bad[i].field && !strcmp(rep.value, bad[i].value),
              "af_ctx_open case %zu: %s, field %d value '%s' (%s)", i, af_status_name(st), (int)rep.field, rep.value,
              af_last_error());
        af_ctx_free(c);
    }
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.matmul_precision = "bf16"; /* bf16 runs here, or falls back to f32 saying why: never a failure */
    af_ctx *c = NULL;
    af_ctx_report rep;
    if (CHECK(af_ctx_open(&p, &c, &rep) == AF_OK, "bf16: %s", af_last_error()))
        CHECK(rep.bf16_fallback ? !strcmp(af_ctx_matmul_precision(c), "f32") && has(rep.bf16_why, "AVX512_BF16")
                                : !strcmp(af_ctx_matmul_precision(c), "bf16"),
              "bf16: fallback %d (%s), precision %s", rep.bf16_fallback, rep.bf16_why, af_ctx_matmul_precision(c));
    CHECK(rep.field == AF_CTX_SETTING_NONE && !rep.device_line[0], "bf16 on cpu: no field, no device line");
    CHECK(!af_ctx_falls_back(c, AF_ERR_DEVICE), "a cpu context never falls back");
    af_ctx *cpu = NULL;
    if (CHECK(af_ctx_new_cpu(c, 1, &cpu) == AF_OK, "af_ctx_new_cpu: %s", af_last_error()))
        CHECK(af_ctx_on_cpu(cpu) && af_ctx_n_threads(cpu) == af_ctx_n_threads(c) &&
                  !strcmp(af_ctx_matmul_precision(cpu), af_ctx_matmul_precision(c)),
              "af_ctx_new_cpu keeps the settings");
    af_ctx_free(cpu);
    af_ctx_free(c);
    p.matmul_precision = "f32";
    p.device = "guard"; /* a device named explicitly: never falls back */
    if (CHECK(af_ctx_open(&p, &c, &rep) == AF_OK, "guard: %s", af_last_error())) {
        CHECK(!af_ctx_on_cpu(c) && !rep.device_line[0], "guard: on a device, no auto line");
        CHECK(!af_ctx_falls_back(c, AF_ERR_DEVICE) && !af_ctx_falls_back(c, AF_ERR_NOMEM), "guard: no fallback");
    }
    af_ctx_free(c);
}

/* ---------------------------------------------------------------- (a2) auto and software devices */

static int count_lines_with(const char *s, const char *sub) {
    int n = 0;
    for (const char *q = s; q && (q = strstr(q, sub)); q += strlen(sub)) n++;
    return n;
}

static void test_auto_software(void) {
    int32_t vb = -1;
    for (int32_t i = 0; i < af_backend_count(); i++)
        if (!strcmp(af_backend_name(i), "vulkan")) vb = i;
    af_device_info d[16];
    int32_t n = 0;
    char why[512];
    if (vb < 0 || af_backend_devices(vb, d, 16, &n, why, sizeof why) != AF_OK || n < 1) {
        tl_skip("--device auto and software devices: no Vulkan device (%s)", why);
        return;
    }
    int32_t soft = -1, hard = -1;
    for (int32_t i = 0; i < n && i < 16; i++) {
        if (d[i].software && soft < 0) soft = i;
        if (!d[i].software && hard < 0) hard = i;
        CHECK(d[i].software == !strcmp(d[i].kind, "software (CPU)"), "device %d: software flag %d, kind %s", (int)i,
              d[i].software, d[i].kind);
    }
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.device = "auto";
    af_ctx *c = NULL;
    af_ctx_report rep;
    if (CHECK(af_ctx_open(&p, &c, &rep) == AF_OK, "auto: %s", af_last_error())) {
        if (hard >= 0)
            CHECK(!af_ctx_on_cpu(c) && has(rep.device_line, "running on vulkan:"), "auto with a GPU: %s (%s)",
                  af_ctx_device(c), rep.device_line);
        else
            CHECK(af_ctx_on_cpu(c) && has(rep.device_line, "only the software device vulkan:") &&
                      has(rep.device_line, d[soft].name) && has(rep.device_line, "computing on the CPU"),
                  "auto with only software devices: %s (%s)", af_ctx_device(c), rep.device_line);
    }
    af_ctx_free(c);
    if (soft >= 0) { /* named explicitly, the software device is taken */
        char spec[32];
        snprintf(spec, sizeof spec, "vulkan:%d", (int)d[soft].index);
        p.device = spec;
        if (CHECK(af_ctx_open(&p, &c, &rep) == AF_OK, "%s: %s", spec, af_last_error()))
            CHECK(!af_ctx_on_cpu(c) && !strcmp(af_ctx_device(c), spec) && !rep.device_line[0], "%s: %s", spec,
                  af_ctx_device(c));
        af_ctx_free(c);
    }
    if (!g_bin || hard >= 0) return;
    /* the CLI: one line on stderr saying which device, the CPU's text */
    char *out = NULL, *err = NULL, *ref = NULL;
    int rc = cli(NULL, &ref, NULL, "generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --device cpu");
    CHECK(rc == 0, "generate --device cpu: %d", rc);
    rc = cli(NULL, &out, &err, "generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --device auto");
    CHECK(rc == 0 && !strcmp(out, ref) && count_lines_with(err, "--device auto:") == 1 &&
              has(err, "afinar generate: --device auto: no accelerator (vulkan: only the software device") &&
              has(err, "computing on the CPU"),
          "generate --device auto with only a software device: %d, the CPU's text %d\n%s", rc, !strcmp(out, ref), err);
    free(out), free(err);
    rc = cli("auto=software", &out, &err, "generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --device auto");
    CHECK(rc == 0 && count_lines_with(err, "--device auto:") == 1 && has(err, "--device auto: running on vulkan:") &&
              has(err, "software (CPU)"),
          "AFINAR_FAULT=auto=software generate --device auto: %d\n%s", rc, err);
    free(out), free(err);
    rc = cli(NULL, NULL, &err, "train -m @/tiny.gguf --train @/train.jsonl --recipe fixed --batch 4 --grad-accum 1 "
                               "--max-steps 1 --max-seq-len 16 --lora-r 2 -t 1 --no-plot -o @/auto_sw --device auto");
    CHECK(rc == 0 && count_lines_with(err, "--device auto:") == 1 && has(err, "computing on the CPU"),
          "train --device auto with only a software device: %d\n%s", rc, err);
    free(err);
    free(ref);
}

/* ---------------------------------------------------------------- (b) carver */

static void test_carver(void) {
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.device = "guard";
    af_ctx *g = NULL;
    if (!CHECK(af_ctx_new(&p, &g) == AF_OK, "guard: %s", af_last_error())) return;
    af_carver cv;
    af_carver_count(&cv, 1000); /* chunks of at most 1000 bytes */
    float *r[5];
    const int64_t n[5] = {100, 100, 10, 200, 240}; /* bytes 448 448 64 | 832 | 960 */
    for (int i = 0; i < 5; i++) r[i] = af_carve(&cv, n[i]);
    CHECK(!r[0] && cv.used == 448 + 448 + 64 + 832 + 960 && cv.n_chunks == 3, "count: %zu bytes, %d chunks", cv.used,
          (int)cv.n_chunks);
    af_devmem mem;
    if (CHECK(af_carver_alloc(&cv, g, &mem) == AF_OK, "alloc: %s", af_last_error())) {
        for (int i = 0; i < 5; i++) r[i] = af_carve(&cv, n[i]);
        CHECK(mem.n == 3 && mem.bytes == 960 + 832 + 960 && r[0] == mem.chunk[0] &&
                  r[1] == (float *)((char *)mem.chunk[0] + 448) && r[2] == (float *)((char *)mem.chunk[0] + 896) &&
                  r[3] == mem.chunk[1] && r[4] == mem.chunk[2],
              "carve pass: the counted chunks");
        af_devmem_free(&mem);
    }
    af_carver_count(&cv, (size_t)g->dev->info.max_alloc);
    af_carve(&cv, (int64_t)(g->dev->info.max_alloc / 4) + 1);
    CHECK(af_carver_alloc(&cv, g, &mem) == AF_ERR_NOMEM && has(af_last_error(), "larger than the device's largest"),
          "a region above max_alloc: %s", af_last_error());
    af_ctx_free(g);
}

/* ---------------------------------------------------------------- (c) the guard has teeth */

static void test_guard_faults(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        if (fd >= 0) dup2(fd, 2);
        af_ctx_params p;
        af_ctx_params_default(&p);
        p.device = "guard";
        af_ctx *g = NULL;
        if (af_ctx_new(&p, &g) != AF_OK) _exit(3);
        float *x = af_be(g)->alloc(g, 256);
        if (!x) _exit(4);
        af_be(g)->fill(g, x, 1.0f, 64); /* through the table: fine */
        float v = 0;
        if (af_be(g)->download(g, &v, x + 3, sizeof v) != AF_OK || v != 1.0f) _exit(5);
        volatile float *h = x;
        v = h[3]; /* a host read of device memory: the guard must kill us here */
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "a host read of guard memory: %s %d",
          WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    /* and a host pointer handed to an op (it would be garbage on a GPU) */
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        if (fd >= 0) dup2(fd, 2);
        af_ctx_params p;
        af_ctx_params_default(&p);
        p.device = "guard";
        af_ctx *g = NULL;
        if (af_ctx_new(&p, &g) != AF_OK) _exit(3);
        float *x = af_be(g)->alloc(g, 256), host[64] = {0};
        af_be(g)->add(g, x, x, x, 64); /* device memory: fine */
        af_be(g)->add(g, x, x, host, 64); /* a host pointer: the guard must abort here */
        _exit(0);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "a host pointer given to an op on the guard device: %s %d",
          WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* ---------------------------------------------------------------- (d) fault injection */

static const char *const k_keys[3] = {"goal", "chip", "soup"}, *const k_names[3] = {"sport", "tech", "food"};

static void write_data(const char *path, int n, uint64_t seed) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    uint64_t r = seed;
    for (int i = 0; i < n; i++) {
        const int c = (int)(tl_rand_u64(&r) % 3);
        fprintf(f, "{\"input\": \"xx %s yy %s ab\", \"label\": \"%s\"}\n", k_keys[c], k_keys[(c + i) % 3], k_names[c]);
    }
    fclose(f);
}

static void test_generate_faults(void) {
    char *ref = NULL, *out = NULL, *err = NULL;
    const char *gen = "generate -m @/tiny.gguf -p 'ab xx goal' -n 12 --temp 0 --ignore-eos -t 1";
    int rc = cli(NULL, &ref, NULL, "%s --device cpu", gen);
    if (!CHECK(rc == 0 && strlen(ref) > 1, "cpu generate: %d", rc)) return;
    rc = cli(NULL, &out, NULL, "%s --device guard", gen);
    CHECK(rc == 0 && !strcmp(out, ref), "guard generate == cpu: %d\n%s\n%s", rc, out, ref);
    free(out);
    static const struct {
        const char *fault, *msg;
    } f[] = {{"alloc=1", "out of device memory for a weight"},
             {"lost=400", "device lost during"},
             {"mem=16K", "the model's weights need"},
             {"mem=300K", "a session of"},
             {"nan=30", "computed non-finite logits"}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        rc = cli(f[i].fault, &out, &err, "%s --device guard", gen);
        CHECK(rc == 1 && has(err, f[i].msg) && has(err, "guard"), "AFINAR_FAULT=%s --device guard: exit %d\n%s",
              f[i].fault, rc, err);
        free(out), free(err);
        char fa[64];
        snprintf(fa, sizeof fa, "%s,auto=guard", f[i].fault);
        rc = cli(fa, &out, &err, "%s --device auto", gen);
        CHECK(rc == 0 && !strcmp(out, ref) && has(err, f[i].msg) && has(err, "--device auto: going on on the CPU"),
              "AFINAR_FAULT=%s --device auto: exit %d, same text %d\n%s", fa, rc, !strcmp(out, ref), err);
        free(out), free(err);
    }
    free(ref);
}

/* serve: the memory guard on the device at load; under --device auto the server starts on the CPU
 * (stopped by SIGTERM after a few seconds: exit 0 once it drained). */
static void test_serve_device(void) {
    char *out = NULL, *err = NULL;
    const char *serve = "serve -m @/tiny.gguf --port 0 -t 1 --parallel 1 --ctx 64";
    int rc = cli("mem=16K", &out, &err, "%s --device guard", serve);
    if (has(err, "not built in")) {
        tl_skip("serve --device: afinar serve is not built in");
        free(out), free(err);
        return;
    }
    CHECK(rc == 1 && has(err, "the model's weights need") && has(err, "guard"), "serve mem=16K --device guard: exit %d\n%s",
          rc, err);
    free(out), free(err);
    rc = cli(NULL, &out, &err, "%s --device nosuch", serve);
    CHECK(rc == 2 && has(err, "nosuch"), "serve --device nosuch: exit %d\n%s", rc, err);
    free(out), free(err);
    /* --foreground: only afinar gets the TERM (without it, timeout also signals its process group,
     * so afinar may see two TERMs, and a second signal ends the server at once with 143) */
    g_wrap = "timeout --foreground --preserve-status -s TERM 4 ";
    rc = cli("mem=16K,auto=guard", &out, &err, "%s --device auto", serve);
    g_wrap = "";
    CHECK(rc == 0 && has(err, "--device auto: going on on the CPU") && has(err, "listening on") && has(err, "stopped"),
          "serve mem=16K --device auto: exit %d\n%s", rc, err);
    free(out), free(err);
}

static void test_train_faults(void) {
    const char *train = "train -m @/tiny.gguf --train @/train.jsonl --val @/val.jsonl --batch 4 --grad-accum 2 "
                        "--lora-r 2 --lora-layers all --max-seq-len 16 --max-steps 6 --save-every 2 --eval-every 2 -t 1 "
                        "--no-plot --overwrite --lora-dropout 0.1 --save-total-limit 0 --frozen-precision f32";
    char *err = NULL;
    int rc = cli(NULL, NULL, &err, "%s -o @/cpu --device cpu", train);
    if (!CHECK(rc == 0, "cpu run: %d\n%s", rc, err)) return;
    free(err);
    const char *ref = P_("cpu/final/adapter_model.safetensors");
    rc = cli(NULL, NULL, &err, "%s -o @/gd --device guard", train);
    CHECK(rc == 0 && files_equal(ref, P_("gd/final/adapter_model.safetensors")), "guard run == cpu: %d\n%s", rc, err);
    free(err);
    /* the device lost after checkpoint-2 */
    rc = cli("lost=700", NULL, &err, "%s -o @/lost --device guard", train);
    CHECK(rc == 1 && has(err, "device lost during") && has(err, "checkpoint-2") && has(err, "--resume") &&
              files_equal(P_("cpu/checkpoint-2/adapter_model.safetensors"), P_("lost/checkpoint-2/adapter_model.safetensors")),
          "lost on guard: %d\n%s", rc, err);
    free(err);
    rc = cli("lost=700,auto=guard", NULL, &err, "%s -o @/lost_auto --device auto", train);
    CHECK(rc == 0 && has(err, "--device auto: going on on the CPU from") &&
              files_equal(ref, P_("lost_auto/final/adapter_model.safetensors")),
          "lost on auto: %d\n%s", rc, err);
    free(err);
    /* NaN from the device's products where the CPU is finite */
    rc = cli("nan=300", NULL, &err, "%s -o @/nan --device guard", train);
    CHECK(rc == 1 && has(err, "computed non-finite values") && has(err, "where the CPU computes a finite step"),
          "nan on guard: %d\n%s", rc, err);
    free(err);
    rc = cli("nan=300,auto=guard", NULL, &err, "%s -o @/nan_auto --device auto", train);
    CHECK(rc == 0 && has(err, "going on on the CPU") && files_equal(ref, P_("nan_auto/final/adapter_model.safetensors")),
          "nan on auto: %d\n%s", rc, err);
    free(err);
    /* memory: the weights fit, the run does not */
    rc = cli("mem=600K", NULL, &err, "%s -o @/mem --device guard", train);
    CHECK(rc == 1 && has(err, "training needs about") && has(err, "--max-seq-len") && has(err, "--device cpu"),
          "mem on guard: %d\n%s", rc, err);
    free(err);
    rc = cli("mem=600K,auto=guard", NULL, &err, "%s -o @/mem_auto --device auto", train);
    CHECK(rc == 0 && has(err, "training on the CPU") && files_equal(ref, P_("mem_auto/final/adapter_model.safetensors")),
          "mem on auto: %d\n%s", rc, err);
    free(err);
    /* eval: the same metrics on the guard device; a device lost mid-evaluation */
    char *eref = NULL, *out = NULL;
    const char *ev = "eval -m @/tiny.gguf -a @/cpu/final --data @/val.jsonl -t 1 --batch 2";
    rc = cli(NULL, &eref, NULL, "%s --device cpu", ev);
    CHECK(rc == 0 && has(eref, "accuracy"), "cpu eval: %d", rc);
    rc = cli(NULL, &out, NULL, "%s --device guard", ev);
    CHECK(rc == 0 && !strcmp(out, eref), "guard eval == cpu: %d\n%s", rc, out);
    free(out);
    rc = cli("lost=60", &out, &err, "%s --device guard", ev);
    CHECK(rc == 1 && has(err, "device lost during"), "eval, lost on guard: %d\n%s", rc, err);
    free(out), free(err);
    rc = cli("lost=60,auto=guard", &out, &err, "%s --device auto", ev);
    CHECK(rc == 0 && !strcmp(out, eref) && has(err, "--device auto: going on on the CPU"), "eval, lost on auto: %d\n%s",
          rc, err);
    free(out), free(err), free(eref);
}

/* causal-LM evaluation (loss over the targets; greedy generation scored) on the guard device == CPU */
static void test_lm_eval(void) {
    FILE *f = fopen(P_("lm.jsonl"), "w");
    if (!f) return;
    for (int i = 0; i < 6; i++)
        fprintf(f, "{\"prompt\": \"ab xx %s\", \"completion\": \" yy %s ab\"}\n", k_keys[i % 3], k_keys[(i + 1) % 3]);
    fclose(f);
    char *a = NULL, *b = NULL;
    const char *ev = "eval -m @/tiny.gguf --data @/lm.jsonl --task causal-lm --generate 2 --max-new-tokens 6 -t 1";
    int ra = cli(NULL, &a, NULL, "%s --device cpu", ev), rb = cli(NULL, &b, NULL, "%s --device guard", ev);
    for (int k = 0; k < 2; k++) { /* the timing line ("tokens ... tok/s)") is not compared: cut out */
        char *x = k ? b : a, *t = x ? strstr(x, " tok/s)") : NULL;
        if (!t) continue;
        char *e = t + strcspn(t, "\n");
        while (t > x && t[-1] != '\n') t--;
        memmove(t, e, strlen(e) + 1);
    }
    CHECK(ra == 0 && rb == 0 && has(a, "perplexity") && !strcmp(a, b), "causal-LM eval on guard == cpu: %d %d\n%s\n%s",
          ra, rb, a, b);
    free(a), free(b);
}

int main(void) {
    g_bin = getenv("AFINAR_BIN");
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_device_%ld", (long)getpid());
    if (!CHECK(mkdir(g_dir, 0777) == 0, "mkdir %s", g_dir)) return tl_finish("device");
    static const char *const extra[3] = {"ab", "\xC4\xA0x", "<|endoftext|>"};
    static const char *const merges[2] = {"a b", "\xC4\xA0 x"};
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    s.vocab = 256 + 3;
    s.seed = 78;
    CHECK(tm_write_bpe(&s, P_("tiny.gguf"), extra, 3, merges, 2) == AF_OK, "tiny model: %s", af_last_error());
    write_data(P_("train.jsonl"), 24, 5);
    write_data(P_("val.jsonl"), 8, 6);
    test_carver();
    test_guard_faults();
    if (g_bin && access(g_bin, X_OK) != 0) g_bin = NULL;
    test_registry();
    test_ctx_open();
    test_auto_software();
    if (!g_bin) tl_skip("CLI cases: AFINAR_BIN not set or not executable (make test sets it)");
    else {
        test_generate_faults();
        test_lm_eval();
        test_serve_device();
        test_train_faults();
    }
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf %s", g_dir);
    if (!tl_failed && !getenv("TL_KEEP") && system(rm) != 0) printf("cannot remove %s\n", g_dir);
    return tl_finish("device");
}
