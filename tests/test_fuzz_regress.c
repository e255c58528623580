/*
 * test_fuzz_regress.c — replays the fuzzing inputs under the normal `make test` (no clang needed):
 *
 *  1. every file of tests/fuzz/corpus/<target>/ (seeds) and tests/fuzz/regress/<target>/ (inputs
 *     that once crashed or broke an invariant) through the SAME entry points as the libFuzzer
 *     targets (tests/fuzz/fuzz_<target>.c are #included with FZ_NO_MAIN; their invariant checks
 *     become CHECKs here). A regress file is named <what>.<STATUS>, STATUS being the af_status
 *     the entry point must return without the AF_ERR_ prefix (OK, FORMAT, UNSUPPORTED, ...).
 *  2. limits before allocation: tiny crafted files that claim absurd sizes (billions of
 *     metadata entries or array elements, a 1 TB string, tensor data far past the end of the file,
 *     a huge SafeTensors header length, an oversized adapter JSON) must be refused with
 *     AF_ERR_FORMAT. Without AddressSanitizer each case runs in a forked child whose address space
 *     is capped (RLIMIT_AS = current size + 256 MiB), so a reader that allocated what the file
 *     claims would fail with AF_ERR_NOMEM or die instead; a dense valid GGUF (many KVs) checks
 *     that memory stays a small multiple of the file size. Under ASan (which reserves terabytes of
 *     virtual memory) the cap is skipped and only the statuses are checked.
 * Run from the repository root (as tests/run_all.sh does).
 */
#include "testlib.h"

static void fz_regress_fail(const char *msg, const char *file, int line) {
    tl_check(false, file, line, "fuzz invariant: %s", msg);
}
#define FZ_NO_MAIN
#define FZ_FAIL(msg, file, line) fz_regress_fail((msg), (file), (line))

#include "fuzz/fuzz_adapter.c"
#include "fuzz/fuzz_gguf.c"
#include "fuzz/fuzz_gguf_tok.c"
#include "fuzz/fuzz_hf_config.c"
#include "fuzz/fuzz_jsonl.c"
#include "fuzz/fuzz_lm_jsonl.c"
#include "fuzz/fuzz_manifest.c"
#include "fuzz/fuzz_safetensors.c"
#include "fuzz/fuzz_tok_bpe.c"
#include "fuzz/fuzz_tok_json.c"
#include "fuzz/fuzz_tok_spm.c"
#include "fuzz/fuzz_serve_req.c"
#include "fuzz/fuzz_chat.c"
#include "fuzz/fuzz_csv.c"
#include "fuzz/fuzz_yaml.c"
#include "fuzz/fuzz_grammar.c"
#include "fuzz/fuzz_tool_stream.c"

#include "formats/jsonl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#ifndef FZ_ASAN
#define FZ_ASAN 0
#endif

typedef af_status (*fz_entry)(const uint8_t *, size_t);

static const struct {
    const char *name;
    fz_entry fn;
} k_targets[] = {
    {"gguf", fz_gguf_one},       {"safetensors", fz_safetensors_one}, {"jsonl", fz_jsonl_one},
    {"tok_bpe", fz_tok_bpe_one}, {"tok_spm", fz_tok_spm_one},         {"adapter", fz_adapter_one},
    {"gguf_tok", fz_gguf_tok_one}, {"lm_jsonl", fz_lm_jsonl_one},
    {"hf_config", fz_hf_config_one}, {"tok_json", fz_tok_json_one},   {"manifest", fz_manifest_one},
    {"serve_req", fz_serve_req_one}, {"chat", fz_chat_one},
    {"csv", fz_csv_one},             {"yaml", fz_yaml_one},
    {"grammar", fz_grammar_one},     {"tool_stream", fz_tool_stream_one},
};

/* Expected status from a regress file name "<what>.<STATUS>"; -1 if the suffix is unknown. */
static int expected_status(const char *file) {
    const char *dot = strrchr(file, '.');
    if (!dot) return -1;
    for (int st = AF_OK; st <= AF_ERR_INTERRUPTED; st++) {
        const char *nm = af_status_name((af_status)st);
        const char *bare = st == AF_OK ? "OK" : nm + strlen("AF_ERR_");
        if (strcmp(dot + 1, bare) == 0) return st;
    }
    return -1;
}

/* Replay every file of dir through fn; `regress` = check the status named in the file name. */
static int replay_dir(const char *target, fz_entry fn, const char *dir, int regress) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        char *buf = tl_read_file(path, &len);
        if (!CHECK(buf != NULL, "%s: readable", path)) continue;
        int failed_before = tl_failed;
        af_status st = fn((const uint8_t *)buf, len);
        af_clear_error();
        free(buf);
        n++;
        if (regress) {
            int want = expected_status(e->d_name);
            if (CHECK(want >= 0, "%s: file name must end in .<STATUS> (OK, FORMAT, ...)", path))
                CHECK((int)st == want, "%s [%s]: status %s, expected %s", path, target, af_status_name(st),
                      af_status_name((af_status)want));
        } else {
            CHECK(st != AF_ERR_INTERNAL && st != AF_ERR_NOMEM, "%s [%s]: status %s", path, target, af_status_name(st));
        }
        if (tl_failed != failed_before) printf("  (input: %s)\n", path);
    }
    closedir(d);
    return n;
}

static void test_replay(void) {
    for (size_t i = 0; i < sizeof k_targets / sizeof *k_targets; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", k_targets[i].name);
        int n = replay_dir(k_targets[i].name, k_targets[i].fn, dir, 0);
        CHECK(n > 0, "%s: seed corpus present (run from the repository root)", dir);
        snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", k_targets[i].name);
        int r = replay_dir(k_targets[i].name, k_targets[i].fn, dir, 1);
        printf("replayed %-12s %3d seeds, %3d regression inputs\n", k_targets[i].name, n, r);
    }
    int real = 0;
    fz_tok_get(FZ_TOK_BPE, &real);
    if (!real) tl_skip("tokenizer targets replayed on the synthetic vocabularies (models/ absent)");
}

/* ---------------------------------------------------------------------------------------------
 * Limits before allocation
 * ------------------------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put32(buf *b, uint32_t v) { put(b, &v, 4); } /* little-endian host (x86-64, aarch64) */
static void put64(buf *b, uint64_t v) { put(b, &v, 8); }
static void putstr(buf *b, const char *s) {
    put64(b, strlen(s));
    put(b, s, strlen(s));
}
static void gguf_head(buf *b, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put32(b, 3);
    put64(b, n_tensors);
    put64(b, n_kv);
}

/* Run fn(b) in a child with the address space capped at current + extra_mb (skipped under ASan:
 * then in-process) and return its status, or -1 if the child died. */
static int run_capped(af_status (*fn)(const buf *), const buf *b, size_t extra_mb) {
    if (FZ_ASAN) {
        af_status st = fn(b);
        af_clear_error();
        return (int)st;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        long pages = 0;
        FILE *fp = fopen("/proc/self/statm", "r");
        if (fp && fscanf(fp, "%ld", &pages) != 1) pages = 0;
        if (fp) fclose(fp);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)extra_mb << 20);
        if (pages > 0) setrlimit(RLIMIT_AS, &rl);
        _exit((int)fn(b));
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static af_status open_gguf_buf(const buf *b) {
    char path[64];
    int fd = fz_memfd(b->p, b->n, path);
    if (fd < 0) return AF_ERR_IO;
    af_gguf *g = NULL;
    af_status st = af_gguf_open(path, &g);
    af_gguf_close(g);
    close(fd);
    return st;
}

static af_status open_st_buf(const buf *b) {
    af_st_file *f = NULL;
    af_status st = af_st_open_memory(b->p, b->n, "limits.safetensors", &f);
    af_st_close(f);
    return st;
}

static af_status open_tok_buf(const buf *b) {
    af_tokenizer *t = NULL;
    af_status st = fz_tok_from_bytes(b->p, b->n, &t);
    af_tokenizer_free(t);
    return st;
}

static void expect_capped(const char *what, af_status (*fn)(const buf *), buf *b, af_status want) {
    int st = run_capped(fn, b, 256);
    CHECK(st == (int)want, "%s (%zu-byte file): status %s, expected %s", what, b->n,
          st < 0 ? "crashed/killed" : af_status_name((af_status)st), af_status_name(want));
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Self-check of the cap: a 1 GiB allocation must fail in the capped child. */
static af_status alloc_1g(const buf *b) {
    (void)b;
    void *volatile p = malloc((size_t)1 << 30);
    af_status st = p ? AF_OK : AF_ERR_NOMEM;
    free(p);
    return st;
}

static void test_gguf_limits(void) {
    buf b = {0};
    if (!FZ_ASAN) expect_capped("cap self-check: malloc(1 GiB)", alloc_1g, &b, AF_ERR_NOMEM);
    gguf_head(&b, 0, 1ull << 60); /* billions of metadata entries */
    putstr(&b, "k");
    put32(&b, AF_GGUF_UINT8);
    put(&b, "\x01", 1);
    expect_capped("gguf: metadata_kv_count 2^60", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 4000000000ull, 0); /* billions of tensors */
    put(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    expect_capped("gguf: tensor_count 4e9", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* a 1 TB string value */
    putstr(&b, "general.name");
    put32(&b, AF_GGUF_STRING);
    put64(&b, 1ull << 40);
    put(&b, "abc", 3);
    expect_capped("gguf: string length 1 TB", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* a 1 TB key */
    put64(&b, 1ull << 40);
    put(&b, "key", 3);
    expect_capped("gguf: key length 1 TB", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* 1.5 billion u8 array elements (1.5 GB if allocated) */
    putstr(&b, "a");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_UINT8);
    put64(&b, 1500000000ull);
    put(&b, "\1\2\3\4", 4);
    expect_capped("gguf: u8 array count 1.5e9", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* 10^8 strings (800 MB of offsets if allocated) */
    putstr(&b, "tokenizer.ggml.tokens");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_STRING);
    put64(&b, 100000000ull);
    putstr(&b, "a");
    expect_capped("gguf: string array count 1e8", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* nested: an array of 2^62 arrays */
    putstr(&b, "n");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_ARRAY);
    put64(&b, 1ull << 62);
    put32(&b, AF_GGUF_UINT32);
    put64(&b, 0);
    expect_capped("gguf: nested array count 2^62", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 0, 1); /* inner array count past the end */
    putstr(&b, "n");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_ARRAY);
    put64(&b, 1);
    put32(&b, AF_GGUF_UINT64);
    put64(&b, 1ull << 59);
    expect_capped("gguf: inner array count 2^59", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 1, 0); /* tensor of 2^40 x 2^20 f32: data far past the end */
    putstr(&b, "t");
    put32(&b, 2);
    put64(&b, 1ull << 40);
    put64(&b, 1ull << 20);
    put32(&b, 0 /* F32 */);
    put64(&b, 0);
    put(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 32);
    expect_capped("gguf: tensor data 4 PB", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 1, 0); /* element count overflow */
    putstr(&b, "t");
    put32(&b, 4);
    for (int i = 0; i < 4; i++) put64(&b, 1ull << 62);
    put32(&b, 0);
    put64(&b, 0);
    expect_capped("gguf: dims product overflows", open_gguf_buf, &b, AF_ERR_FORMAT);

    gguf_head(&b, 1, 0); /* offset past the end */
    putstr(&b, "t");
    put32(&b, 1);
    put64(&b, 8);
    put32(&b, 0);
    put64(&b, 1ull << 62);
    expect_capped("gguf: tensor offset 2^62", open_gguf_buf, &b, AF_ERR_FORMAT);

    /* tokenizer metadata: a merges array claiming 2^29 entries (allowed count, absent bytes) */
    gguf_head(&b, 0, 3);
    putstr(&b, "tokenizer.ggml.model");
    put32(&b, AF_GGUF_STRING);
    putstr(&b, "gpt2");
    putstr(&b, "tokenizer.ggml.tokens");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_STRING);
    put64(&b, 1);
    putstr(&b, "a");
    putstr(&b, "tokenizer.ggml.merges");
    put32(&b, AF_GGUF_ARRAY);
    put32(&b, AF_GGUF_STRING);
    put64(&b, 1ull << 29);
    putstr(&b, "a a");
    expect_capped("gguf tokenizer: merges count 2^29", open_tok_buf, &b, AF_ERR_FORMAT);

    /* Dense but valid: 400k KVs in 6 MB. Memory must stay a small multiple of the file size
     * (kv table + key hash), far below the 256 MiB cap. */
    gguf_head(&b, 0, 400000);
    for (int i = 0; i < 400000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        putstr(&b, k);
        put32(&b, AF_GGUF_UINT8);
        put(&b, "\0", 1);
    }
    expect_capped("gguf: 400k KVs (memory bounded by file size)", open_gguf_buf, &b, AF_OK);
}

static void st_header(buf *b, uint64_t n, const char *json) {
    put64(b, n);
    put(b, json, strlen(json));
}

static void test_safetensors_limits(void) {
    buf b = {0};
    st_header(&b, 1ull << 63, "{}");
    expect_capped("safetensors: header length 2^63", open_st_buf, &b, AF_ERR_FORMAT);
    st_header(&b, AF_ST_MAX_HEADER + 1, "{}");
    expect_capped("safetensors: header length over the 100 MB limit", open_st_buf, &b, AF_ERR_FORMAT);
    st_header(&b, AF_ST_MAX_HEADER - 1, "{}"); /* allowed length, but past the end of the file */
    expect_capped("safetensors: header length 99,999,999 in a tiny file", open_st_buf, &b, AF_ERR_FORMAT);
    const char *j = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1048576],\"data_offsets\":[0,4]}}";
    st_header(&b, strlen(j), j);
    put(&b, "\0\0\0\0", 4);
    expect_capped("safetensors: shape claiming 4 PB", open_st_buf, &b, AF_ERR_FORMAT);
    j = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1099511627776],\"data_offsets\":[0,1099511627776]}}";
    st_header(&b, strlen(j), j);
    put(&b, "\0\0\0\0", 4);
    expect_capped("safetensors: data_offsets 1 TB past the end", open_st_buf, &b, AF_ERR_FORMAT);
    j = "{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}";
    st_header(&b, strlen(j), j);
    put(&b, "\0\0\0\0\0\0\0\0", 8);
    expect_capped("safetensors: shape product overflow", open_st_buf, &b, AF_ERR_FORMAT);
}

static char g_tmp[64];

static af_status adapter_dir_status(const buf *b) {
    (void)b;
    af_adapter_info info;
    af_status st = af_adapter_read_info(g_tmp, &info);
    if (st == AF_OK) af_adapter_info_free(&info);
    return st;
}

static af_status corpus_status(const buf *b) {
    (void)b;
    char p[128];
    snprintf(p, sizeof p, "%s/c.jsonl", g_tmp);
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    af_corpus_free(c);
    return st;
}

static af_status labels_status(const buf *b) {
    (void)b;
    char p[128], **names = NULL;
    int32_t n = 0;
    snprintf(p, sizeof p, "%s/c.jsonl", g_tmp);
    af_status st = af_labels_read_file(p, &names, &n);
    af_labels_free(names, n);
    return st;
}

static void test_other_limits(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/afinar-limits-XXXXXX");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp")) return;
    char p[128];
    /* adapter_config.json claiming 1 TB (a sparse file): refused from its size, nothing read */
    snprintf(p, sizeof p, "%s/adapter_config.json", g_tmp);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 40) == 0, "sparse 1 TB adapter_config.json");
    if (fd >= 0) close(fd);
    buf none = {0};
    expect_capped("adapter: 1 TB adapter_config.json", adapter_dir_status, &none, AF_ERR_FORMAT);
    unlink(p);

    /* JSONL and labels.txt: one 1 TB line (a sparse file of NUL bytes) is refused once the line
     * limit is passed (16 MiB by default, 64 KiB for labels), never buffered whole. */
    snprintf(p, sizeof p, "%s/c.jsonl", g_tmp);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 40) == 0, "sparse 1 TB c.jsonl");
    if (fd >= 0) close(fd);
    expect_capped("jsonl: 1 TB line", corpus_status, &none, AF_ERR_FORMAT);
    expect_capped("labels.txt: 1 TB line", labels_status, &none, AF_ERR_FORMAT);
    FILE *fp = fopen(p, "w");
    if (fp) {
        fprintf(fp, "{\"input\": \"%0300d\", \"label\": 0}\n", 0);
        fclose(fp);
    }
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.max_line_bytes = 256;
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), "line longer than 256 bytes"), "jsonl: long line: %s (%s)",
          af_status_name(st), af_last_error());
    af_corpus_free(c);

    /* labels.txt with a NUL inside a name (fuzz_jsonl finding): refused, not cut short */
    fp = fopen(p, "wb");
    if (fp) {
        fwrite("sport\nte\0ch\n", 1, 12, fp);
        fclose(fp);
    }
    char **names = NULL;
    int32_t n = 0;
    st = af_labels_read_file(p, &names, &n);
    CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), "NUL"), "labels.txt with NUL: %s (%s)", af_status_name(st),
          af_last_error());
    af_labels_free(names, n);
    unlink(p);
    rmdir(g_tmp);
}

int main(void) {
    test_replay();
    test_gguf_limits();
    test_safetensors_limits();
    test_other_limits();
    if (FZ_ASAN) tl_skip("address-space cap (RLIMIT_AS) not applied under AddressSanitizer");
    return tl_finish("fuzz_regress");
}
