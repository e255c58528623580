/*
 * test_safetensors.c — SafeTensors reader/writer (src/formats/safetensors.h) and atomic file
 * helpers (src/core/fsutil.h): write/read round trip, hand-built images of the README example,
 * every validation error, atomic replace (no temp left, no half-written target on failure).
 */
#include "core/fsutil.h"
#include "formats/safetensors.h"
#include "testlib.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static char *tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

/* Number of entries of g_dir whose name contains ".tmp-" (atomic-write temporaries). */
static int count_temps(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

/* Build an image: u64 header length, header, data. Returns malloc'ed bytes. */
static uint8_t *mk(const char *header, const void *data, size_t n_data, size_t *size) {
    size_t h = strlen(header);
    uint8_t *p = malloc(8 + h + n_data + 1);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, header, h);
    if (n_data) memcpy(p + 8 + h, data, n_data);
    *size = 8 + h + n_data;
    return p;
}

/* Expect opening the image to fail with `want` and a message containing `needle`. */
static void expect_bad(const char *what, const char *header, size_t n_data, af_status want, const char *needle) {
    uint8_t zeros[64] = {0};
    size_t size;
    uint8_t *img = mk(header, zeros, n_data, &size);
    af_st_file *f = NULL;
    af_status st = af_st_open_memory(img, size, "bad.safetensors", &f);
    CHECK(st == want && f == NULL, "%s: status %s (want %s)", what, af_status_name(st), af_status_name(want));
    CHECK(strstr(af_last_error(), needle) && strstr(af_last_error(), "bad.safetensors"),
          "%s: message '%s' lacks '%s'", what, af_last_error(), needle);
    af_st_close(f);
    free(img);
}

static void test_readme_example(void) {
    /* The README's example header, with an I32 tensor and metadata, padded with spaces. */
    int32_t data[4] = {1, -2, 3, 4};
    size_t size;
    uint8_t *img = mk("{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                      "\"__metadata__\":{\"foo\":\"bar\"}}    ",
                      data, sizeof data, &size);
    af_st_file *f = NULL;
    CHECK(af_st_open_memory(img, size, "mem", &f) == AF_OK, "README example: %s", af_last_error());
    if (f) {
        const af_st_tensor *t = af_st_find(f, "test");
        CHECK(t && t->dtype == AF_ST_I32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 2 &&
                  t->n_elem == 4 && memcmp(t->data, data, 16) == 0,
              "README example tensor");
        CHECK(af_st_meta_count(f) == 1 && strcmp(af_st_meta_get(f, "foo"), "bar") == 0, "metadata foo=bar");
        CHECK(af_st_find(f, "nope") == NULL, "absent name gives NULL");
        float x[4];
        CHECK(af_st_read_f32(f, t, x, 4) == AF_ERR_UNSUPPORTED, "I32 cannot be read as f32");
    }
    af_st_close(f);
    free(img);

    /* F16 / BF16 / F64 conversion, scalar and empty tensors, unaligned data. */
    uint8_t buf[2 * 2 + 2 * 2 + 8 + 4];
    uint16_t h16[2] = {0x3c00, 0xc100};  /* 1.0, -2.5 */
    uint16_t b16[2] = {0x3f80, 0x4049};  /* 1.0, 3.140625 */
    double f64 = 0.1;
    float f32 = 7.5f;
    memcpy(buf, h16, 4);
    memcpy(buf + 4, b16, 4);
    memcpy(buf + 8, &f64, 8);
    memcpy(buf + 16, &f32, 4);
    img = mk("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[4,8]},"
             "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[16,16]},"
             "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[16,20]}}",
             buf, sizeof buf, &size);
    CHECK(af_st_open_memory(img, size, "mem", &f) == AF_OK, "mixed dtypes: %s", af_last_error());
    if (f) {
        float v[2];
        CHECK(af_st_read_f32(f, af_st_find(f, "a"), v, 2) == AF_OK && v[0] == 1.0f && v[1] == -2.5f, "F16 values");
        CHECK(af_st_read_f32(f, af_st_find(f, "b"), v, 2) == AF_OK && v[0] == 1.0f && v[1] == 3.140625f, "BF16");
        CHECK(af_st_read_f32(f, af_st_find(f, "c"), v, 1) == AF_OK && v[0] == 0.1f, "F64 -> f32");
        CHECK(af_st_read_f32(f, af_st_find(f, "s"), v, 1) == AF_OK && v[0] == 7.5f, "scalar F32");
        CHECK(af_st_find(f, "e")->n_elem == 0, "empty tensor");
        CHECK(af_st_read_f32(f, af_st_find(f, "a"), v, 1) == AF_ERR_INVALID_ARG, "count mismatch refused");
        CHECK(af_st_count(f) == 5 && strcmp(af_st_tensor_at(f, 0)->name, "a") == 0, "count and order");
    }
    af_st_close(f);
    free(img);
}

static void test_bad_inputs(void) {
    const char *ok_entry = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    af_st_file *f = NULL;
    size_t size;
    uint8_t zeros[8] = {0}, *img = mk(ok_entry, zeros, 8, &size);
    CHECK(af_st_open_memory(img, size, "ok", &f) == AF_OK, "control image opens: %s", af_last_error());
    af_st_close(f);
    f = NULL;
    free(img);
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    CHECK(af_st_open_memory(tiny, 5, "bad.safetensors", &f) == AF_ERR_FORMAT &&
              strstr(af_last_error(), "shorter than"), "short file: %s", af_last_error());
    uint8_t big[16] = {0};
    big[4] = 1; /* 2^32 */
    CHECK(af_st_open_memory(big, 16, "bad.safetensors", &f) == AF_ERR_FORMAT && strstr(af_last_error(), "limit"),
          "huge header length: %s", af_last_error());
    big[4] = 0;
    big[0] = 100;
    CHECK(af_st_open_memory(big, 16, "bad.safetensors", &f) == AF_ERR_FORMAT &&
              strstr(af_last_error(), "past the end"), "header past EOF: %s", af_last_error());
    expect_bad("no brace", " {\"t\":1}", 0, AF_ERR_FORMAT, "does not start with '{'");
    expect_bad("bad utf8", "{\"t\xff\":{}}", 0, AF_ERR_FORMAT, "invalid UTF-8 at offset 11");
    expect_bad("malformed", "{\"t\":{\"dtype\":\"F32\",}", 0, AF_ERR_FORMAT, "malformed JSON");
    expect_bad("trailing", "{}x", 0, AF_ERR_FORMAT, "after the JSON object at offset 10");
    expect_bad("not object entry", "{\"t\":[1]}", 0, AF_ERR_FORMAT, "tensor 't': entry is not");
    expect_bad("unknown dtype", "{\"t\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               AF_ERR_UNSUPPORTED, "unknown dtype \"F31\"");
    expect_bad("no dtype", "{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, AF_ERR_FORMAT, "\"dtype\"");
    expect_bad("neg dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, AF_ERR_FORMAT,
               "shape[0]");
    expect_bad("frac dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,8]}}", 8, AF_ERR_FORMAT,
               "shape[1]");
    expect_bad("overflow", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
               8, AF_ERR_FORMAT, "overflows");
    expect_bad("bytes overflow", "{\"t\":{\"dtype\":\"F64\",\"shape\":[4503599627370496,1024],\"data_offsets\":[0,8]}}",
               8, AF_ERR_FORMAT, "overflows");
    expect_bad("size mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, AF_ERR_FORMAT,
               "gives 12 bytes but data_offsets [0, 8] span 8");
    expect_bad("offsets arity", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, AF_ERR_FORMAT,
               "data_offsets");
    expect_bad("end < begin", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, AF_ERR_FORMAT,
               "end 0 < begin 8");
    expect_bad("overlap",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, AF_ERR_FORMAT, "overlap");
    expect_bad("gap",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               12, AF_ERR_FORMAT, "gap");
    expect_bad("offset past buffer", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
               AF_ERR_FORMAT, "cover 8 bytes but the data buffer");
    expect_bad("trailing bytes", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
               AF_ERR_FORMAT, "holds 12 bytes");
    expect_bad("duplicate",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, AF_ERR_FORMAT, "duplicate tensor name 'a'");
    expect_bad("meta not string", "{\"__metadata__\":{\"k\":1}}", 0, AF_ERR_FORMAT, "__metadata__ value of 'k'");
    expect_bad("too many dims",
               "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               AF_ERR_UNSUPPORTED, "9 dimensions");
    expect_bad("sub-byte", "{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, AF_ERR_FORMAT,
               "whole bytes");
    CHECK(af_st_open(tmp_path("missing.safetensors"), &f) == AF_ERR_IO && strstr(af_last_error(), "missing"),
          "missing file: %s", af_last_error());
}

static void test_write_read(void) {
    uint64_t rng = 42;
    float w[6], h[5], b[4];
    for (int i = 0; i < 6; i++) w[i] = tl_rand_normal(&rng);
    for (int i = 0; i < 5; i++) h[i] = tl_rand_normal(&rng);
    for (int i = 0; i < 4; i++) b[i] = tl_rand_normal(&rng);
    h[4] = 1e-6f; /* fp16 subnormal */
    int64_t raw[2] = {-5, 1ll << 40};
    af_st_write_tensor t[5] = {
        {.name = "w.weight", .dtype = AF_ST_F32, .n_dims = 2, .shape = {2, 3}, .f32 = w},
        {.name = "half \"q\"", .dtype = AF_ST_F16, .n_dims = 1, .shape = {5}, .f32 = h},
        {.name = "bf", .dtype = AF_ST_BF16, .n_dims = 2, .shape = {2, 2}, .f32 = b},
        {.name = "ids", .dtype = AF_ST_I64, .n_dims = 1, .shape = {2}, .raw = raw},
        {.name = "empty", .dtype = AF_ST_F32, .n_dims = 2, .shape = {0, 3}, .f32 = w},
    };
    const char *mk_[] = {"format", "note"}, *mv[] = {"pt", "line\nbreak"};
    const char *path = tmp_path("rt.safetensors");
    CHECK(af_st_write(path, t, 5, mk_, mv, 2) == AF_OK, "write: %s", af_last_error());
    CHECK(count_temps() == 0, "no temporary left after a successful write");
    size_t len = 0;
    char *img = tl_read_file(path, &len);
    uint64_t N = 0;
    for (int i = 7; img && i >= 0; i--) N = (N << 8) | (uint8_t)img[i];
    CHECK(img && N % 8 == 0 && img[8] == '{', "header length %llu is a multiple of 8", (unsigned long long)N);
    free(img);
    af_st_file *f = NULL;
    CHECK(af_st_open(path, &f) == AF_OK, "reopen: %s", af_last_error());
    if (!f) return;
    float x[6];
    const af_st_tensor *tw = af_st_find(f, "w.weight");
    CHECK(tw && tw->dtype == AF_ST_F32 && tw->shape[0] == 2 && tw->shape[1] == 3, "w meta");
    CHECK(tw && af_st_read_f32(f, tw, x, 6) == AF_OK && memcmp(x, w, sizeof w) == 0, "F32 bit-exact");
    CHECK(((uintptr_t)tw->data - (uintptr_t)af_st_tensor_at(f, 0)->data) % 8 == 0 &&
              af_st_tensor_at(f, 0)->dtype == AF_ST_I64, "largest dtype first");
    const af_st_tensor *th = af_st_find(f, "half \"q\"");
    float he[5], be[4];
    for (int i = 0; i < 5; i++) he[i] = af_fp16_to_f32(af_f32_to_fp16(h[i]));
    CHECK(th && af_st_read_f32(f, th, x, 5) == AF_OK && memcmp(x, he, sizeof he) == 0, "F16 = fp16 rounding");
    CHECK(x[4] != 0.0f, "fp16 subnormal kept (%g)", (double)x[4]);
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        memcpy(&u, &b[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&be[i], &u, 4);
    }
    CHECK(af_st_read_f32(f, af_st_find(f, "bf"), x, 4) == AF_OK && memcmp(x, be, sizeof be) == 0, "BF16 RNE");
    CHECK_CLOSE("bf16 vs f32", x, b, 4, 0, 1.0 / 128);
    const af_st_tensor *ti = af_st_find(f, "ids");
    CHECK(ti && memcmp(ti->data, raw, 16) == 0, "raw I64 bytes");
    CHECK(af_st_find(f, "empty") && af_st_find(f, "empty")->n_elem == 0, "empty tensor");
    CHECK(af_st_meta_get(f, "note") && strcmp(af_st_meta_get(f, "note"), "line\nbreak") == 0, "escaped metadata");
    af_st_close(f);

    /* writer refusals */
    af_st_write_tensor d[2] = {t[0], t[0]};
    CHECK(af_st_write(path, d, 2, NULL, NULL, 0) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "duplicate"),
          "duplicate names refused: %s", af_last_error());
    d[0].name = "__metadata__";
    CHECK(af_st_write(path, d, 1, NULL, NULL, 0) == AF_ERR_INVALID_ARG, "reserved name refused");
    d[0] = t[0];
    d[0].dtype = AF_ST_I32;
    CHECK(af_st_write(path, d, 1, NULL, NULL, 0) == AF_ERR_INVALID_ARG, "f32 -> I32 refused");
    CHECK(af_st_open(path, &f) == AF_OK && af_st_count(f) == 5, "refused writes left the file intact");
    af_st_close(f);
    CHECK(af_st_write(tmp_path("nodir/x.safetensors"), t, 1, NULL, NULL, 0) == AF_ERR_IO &&
              strstr(af_last_error(), "nodir"), "missing directory: %s", af_last_error());
}

static void test_atomic(void) {
    const char *p = tmp_path("file.txt");
    CHECK(af_write_file_atomic(p, "old content\n", 12) == AF_OK, "first write: %s", af_last_error());
    CHECK(af_write_file_atomic(p, "new!", 4) == AF_OK, "replace");
    size_t n;
    char *s = tl_read_file(p, &n);
    CHECK(s && n == 4 && memcmp(s, "new!", 4) == 0, "replaced content");
    free(s);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) != 0600, "mode follows umask, not mkstemp's 0600 (%o)",
          (unsigned)(sb.st_mode & 0777));

    /* Abort midway: the target keeps its old content, no temporary stays. */
    af_atomic_file *a = NULL;
    CHECK(af_atomic_open(p, &a) == AF_OK && af_atomic_write(a, "partial", 7) == AF_OK, "open + write");
    CHECK(count_temps() == 1, "a temporary exists while writing");
    af_atomic_abort(a);
    s = tl_read_file(p, &n);
    CHECK(s && n == 4 && memcmp(s, "new!", 4) == 0 && count_temps() == 0, "abort leaves the old file, no temp");
    free(s);

    /* A real write failure midway (file size limit -> EFBIG) while replacing a safetensors file. */
    const char *sp = tmp_path("big.safetensors");
    static float big[65536];
    for (int i = 0; i < 65536; i++) big[i] = (float)i;
    af_st_write_tensor t = {.name = "x", .dtype = AF_ST_F32, .n_dims = 1, .shape = {16}, .f32 = big};
    CHECK(af_st_write(sp, &t, 1, NULL, NULL, 0) == AF_OK, "small original");
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 100000; /* the new file is 256 KiB */
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        t.shape[0] = 65536;
        af_status st = af_st_write(sp, &t, 1, NULL, NULL, 0);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(st == AF_ERR_IO && strstr(af_last_error(), "write failed at offset"), "EFBIG reported: %s",
              af_last_error());
        af_st_file *f = NULL;
        CHECK(af_st_open(sp, &f) == AF_OK && af_st_find(f, "x")->n_elem == 16, "old file intact after failure");
        af_st_close(f);
        CHECK(count_temps() == 0, "no temporary left after failure");
    } else {
        tl_skip("setrlimit(RLIMIT_FSIZE) not permitted");
    }
    signal(SIGXFSZ, prev);

    /* mkdir -p */
    CHECK(af_mkdir_p(tmp_path("a/b/c/")) == AF_OK && af_mkdir_p(tmp_path("a/b")) == AF_OK, "mkdir -p");
    CHECK(stat(tmp_path("a/b/c"), &sb) == 0 && S_ISDIR(sb.st_mode), "created");
    CHECK(af_mkdir_p(tmp_path("file.txt/sub")) == AF_ERR_IO && strstr(af_last_error(), "not a directory"),
          "file in the way: %s", af_last_error());
    char *j = af_path_join("dir/", "f");
    CHECK(j && strcmp(j, "dir/f") == 0, "path join");
    free(j);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/af_st_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("safetensors");
    }
    test_readme_example();
    test_bad_inputs();
    test_write_read();
    test_atomic();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", g_dir);
    return tl_finish("safetensors");
}
