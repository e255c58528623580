#include "testlib.h"

#include "kernels/ctx.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int tl_passed, tl_failed, tl_skipped;

bool tl_check(bool cond, const char *file, int line, const char *fmt, ...) {
    if (cond) {
        tl_passed++;
        return true;
    }
    tl_failed++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return false;
}

double tl_max_abs_diff(const float *a, const float *b, size_t n, size_t *idx) {
    double m = 0;
    size_t mi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) d = INFINITY;
        if (d > m) {
            m = d;
            mi = i;
        }
    }
    if (idx) *idx = mi;
    return m;
}

bool tl_close(const char *what, const float *a, const float *b, size_t n, double atol, double rtol,
              const char *file, int line) {
    size_t worst = 0;
    double worst_excess = -1, worst_abs = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double lim = atol + rtol * fabs((double)b[i]);
        if (!(d <= lim)) ok = false;
        double ex = (d != d) ? INFINITY : d - lim;
        if (ex > worst_excess) {
            worst_excess = ex;
            worst = i;
            worst_abs = d;
        }
    }
    if (getenv("TL_VERBOSE") || !ok) {
        fprintf(ok ? stdout : stderr, "%s %s: n=%zu worst at [%zu]: got %.8g want %.8g (|diff| %.3g, atol %.3g rtol %.3g)\n",
                ok ? "ok  " : "FAIL", what, n, worst, n ? a[worst] : 0.0, n ? b[worst] : 0.0, worst_abs, atol, rtol);
    }
    return tl_check(ok, file, line, "%s not close", what);
}

int tl_sanitized(void) {
    const char *v = getenv("AF_TEST_SANITIZE");
    return v && v[0] && strcmp(v, "0") != 0;
}

void tl_skip(const char *fmt, ...) {
    tl_skipped++;
    fprintf(stdout, "SKIP: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

const char *tl_model_path(const char *file_name) {
    static char buf[8][1024];
    static int slot;
    const char *dir = getenv("AF_MODEL_DIR");
    if (!dir) dir = "models";
    char *p = buf[slot++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", dir, file_name);
    struct stat st;
    if (stat(p, &st) != 0) {
        tl_skip("%s not found (run scripts/setup.sh to fetch it; HF directories: scripts/make_hf_dirs.sh)", p);
        return NULL;
    }
    return p;
}

const char *tl_smollm2_path(void) {
    const char *name = getenv("AF_SMOLLM2");
    if (name && !strcmp(name, "none")) {
        tl_skip("SmolLM2: AF_SMOLLM2=none");
        return NULL;
    }
    return tl_model_path(name && *name ? name : "SmolLM2-135M-Instruct.Q4_1.gguf");
}

char *tl_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

uint64_t tl_rand_u64(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
float tl_rand_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((tl_rand_u64(s) >> 40) * (1.0 / 16777216.0));
}
float tl_rand_normal(uint64_t *s) {
    double u1 = ((tl_rand_u64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (tl_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int tl_finish(const char *test_name) {
    printf("RESULT %s passed=%d failed=%d skipped=%d\n", test_name, tl_passed, tl_failed, tl_skipped);
    /* flushed now: LeakSanitizer's report at exit ends the process with _exit, which would drop a
     * buffered RESULT line (the runner then still counts the non-zero exit status as a failure) */
    fflush(stdout);
    return tl_failed ? 1 : 0;
}

/* ---------------------------------------------------------------- contexts */

static af_ctx **tl_ctxs;
static int tl_n_ctx, tl_cap_ctx;

static void tl_ctx_push(af_ctx *c) {
    if (tl_n_ctx == tl_cap_ctx) {
        tl_cap_ctx = tl_cap_ctx ? 2 * tl_cap_ctx : 16;
        tl_ctxs = realloc(tl_ctxs, (size_t)tl_cap_ctx * sizeof *tl_ctxs);
        if (!tl_ctxs) {
            fprintf(stderr, "testlib: out of memory for contexts\n");
            exit(1);
        }
    }
    tl_ctxs[tl_n_ctx++] = c;
}

static void tl_ctx_free_all(void) {
    for (int i = 0; i < tl_n_ctx; i++) af_ctx_free(tl_ctxs[i]);
    free(tl_ctxs);
    tl_ctxs = NULL;
    tl_n_ctx = tl_cap_ctx = 0;
}

af_ctx *tl_ctx(void) {
    if (tl_n_ctx == 0) {
        af_ctx *c = NULL;
        if (af_ctx_new(NULL, &c) != AF_OK) {
            fprintf(stderr, "testlib: cannot create a context: %s\n", af_last_error());
            exit(1);
        }
        tl_ctx_push(c);
        atexit(tl_ctx_free_all);
    }
    return tl_ctxs[tl_n_ctx - 1];
}

int tl_ctx_set_device(const char *device) {
    af_ctx *cur = tl_ctx();
    af_ctx_params p;
    af_ctx_get_params(cur, &p);
    p.device = device;
    af_ctx *c = NULL;
    af_status st = af_ctx_new(&p, &c);
    if (st != AF_OK) return st;
    c->fused_decode = cur->fused_decode;
    c->att_gemm = cur->att_gemm;
    c->mlp_fused = cur->mlp_fused;
    c->decode_groups = cur->decode_groups;
    tl_ctx_push(c);
    return AF_OK;
}

int tl_ctx_set(const char *kernel_path, int n_threads, const char *precision, int int8_act) {
    af_ctx *cur = tl_ctx();
    af_ctx_params p;
    af_ctx_get_params(cur, &p);
    if (kernel_path) p.kernel_path = kernel_path;
    if (n_threads >= 0) p.n_threads = n_threads;
    if (precision) p.matmul_precision = precision;
    if (int8_act >= 0) p.int8_activations = int8_act;
    af_ctx *c = NULL;
    af_status st = af_ctx_new(&p, &c);
    if (st != AF_OK) return st;
    c->fused_decode = cur->fused_decode;
    c->att_gemm = cur->att_gemm;
    c->mlp_fused = cur->mlp_fused;
    c->decode_groups = cur->decode_groups;
    tl_ctx_push(c);
    return AF_OK;
}

const char *tl_join(const char *dir, const char *name) {
    static char buf[256][512];
    static int k;
    k = (k + 1) % 256;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}
