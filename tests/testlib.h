/*
 * testlib.h — a tiny test harness. Every check counts as passed or failed; a failing check prints
 * where and the worst difference. test_main_end() prints one "RESULT passed=P failed=F skipped=S"
 * line that tests/run_all.sh sums, and returns the exit code (non-zero on any failure).
 */
#ifndef AF_TESTLIB_H
#define AF_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int tl_passed, tl_failed, tl_skipped;

/* Record one check. Prints "FAIL file:line: message" on failure. Returns cond. */
bool tl_check(bool cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CHECK(cond, ...) tl_check((cond), __FILE__, __LINE__, __VA_ARGS__)

/* Compare n floats: |a-b| <= atol + rtol*|b| everywhere. On failure prints the worst element
 * (index, a, b, abs and rel difference). Always prints max abs diff when verbose env TL_VERBOSE=1. */
bool tl_close(const char *what, const float *a, const float *b, size_t n, double atol, double rtol,
              const char *file, int line);
#define CHECK_CLOSE(what, a, b, n, atol, rtol) tl_close((what), (a), (b), (n), (atol), (rtol), __FILE__, __LINE__)

/* Max |a-b| over n floats, and its index (if idx non-NULL). */
double tl_max_abs_diff(const float *a, const float *b, size_t n, size_t *idx);

/* Mark a check (or a group of checks) skipped with a reason printed as "SKIP: reason". */
void tl_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Path of a real model file under models/ (or $AF_MODEL_DIR); NULL (and a SKIP) if absent. */
const char *tl_model_path(const char *file_name);
/* The SmolLM2-135M GGUF of the model-level tests: $AF_SMOLLM2 (a file name under the model folder;
 * the device kit sets its smaller copy) or SmolLM2-135M-Instruct.Q4_1.gguf; AF_SMOLLM2=none skips
 * (NULL and a SKIP), as does a missing file. */
const char *tl_smollm2_path(void);
/* "dir/name" in one of 256 rotating static buffers of 512 bytes (valid for the next 255 calls;
 * not thread-safe): the tests' path helper. */
const char *tl_join(const char *dir, const char *name);

/* Read a whole file into a malloc'ed buffer (NUL-terminated); NULL if missing. */
char *tl_read_file(const char *path, size_t *len);

/* Small deterministic RNG for tests. */
uint64_t tl_rand_u64(uint64_t *s);
float tl_rand_uniform(uint64_t *s, float lo, float hi);
float tl_rand_normal(uint64_t *s);

/* 1 when the environment variable AF_TEST_SANITIZE is set to a non-empty value other than "0"
 * (`make sanitize` sets it): slow tests then do less of the same work (fewer prompts, tokens,
 * kills...) so the whole suite fits CI's budget under ASan/UBSan, while every code path still runs. */
int tl_sanitized(void);

int tl_finish(const char *test_name);

/* ---- the context (af_ctx) of a test's kernel calls and model loads ----
 * T_CTX: the current one (created with default params at first use). tl_ctx_set replaces it by a
 * new context with the current settings changed where given (kernel path: NULL keeps it;
 * n_threads, int8_act: -1 keeps; precision: NULL keeps); the hooks (AF_CTX_FUSED_DECODE, AF_CTX_DECODE_GROUPS,
 * AF_CTX_ATT_GEMM) are carried over. Tests that loop over kernel paths thus create one context
 * per path. Replaced contexts stay alive until exit (models and engines built on them stay
 * valid). Returns af_ctx_new's status; T_CTX is unchanged on error. */
struct af_ctx;
struct af_ctx *tl_ctx(void);
#define T_CTX tl_ctx()
int tl_ctx_set(const char *kernel_path, int n_threads, const char *precision, int int8_act);
/* Likewise with the device changed (af_ctx_params.device: "cpu", "guard", ...). */
int tl_ctx_set_device(const char *device);

#endif
