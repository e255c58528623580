/*
 * test_gguf.c — GGUF reader, writer and describe.
 *  1. Real models (skipped when absent): key facts checked against the files (values cross-checked
 *     with gguf-py 0.19's GGUFReader when this test was written).
 *  2. Writer round trip: every scalar type with edge values, strings with NUL bytes, arrays of
 *     every scalar type and of strings, nested arrays, alignment 64, tensors of several types.
 *  3. Bad-input matrix built with the writer plus byte surgery: every case must fail with the
 *     expected status and a message naming the file; every prefix of a valid file must fail
 *     cleanly; random byte flips must never crash (run under ASan/LSan for memory errors/leaks).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "kernels/quant.h"
#include "testlib.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static void write_bytes(const char *path, const void *p, size_t n) {
    /* unlink first: truncating an existing file makes ext4 flush it (auto_da_alloc), slow */
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "cannot create %s", path);
        return;
    }
    if (n) CHECK(fwrite(p, 1, n, f) == n, "short write to %s", path);
    fclose(f);
}

/* Opening g_path must fail with `want` (or `alt` when alt != AF_OK) and name the file. */
static void expect_fail_file(const char *label, af_status want, af_status alt) {
    af_gguf *g = (af_gguf *)0x1;
    af_status st = af_gguf_open(g_path, &g);
    bool ok = st == want || (alt != AF_OK && st == alt);
    CHECK(ok, "%s: got %s, want %s (%s)", label, af_status_name(st), af_status_name(want), af_last_error());
    CHECK(g == NULL, "%s: *out not NULL on failure", label);
    CHECK(strstr(af_last_error(), g_path) != NULL, "%s: message does not name the file: %s", label, af_last_error());
    if (getenv("TL_VERBOSE")) printf("  %-28s -> %s: %s\n", label, af_status_name(st), af_last_error());
    if (st == AF_OK) af_gguf_close(g);
}

static void expect_fail(const char *label, const uint8_t *buf, size_t n, af_status want) {
    write_bytes(g_path, buf, n);
    expect_fail_file(label, want, AF_OK);
}

/* ---- little-endian patching helpers for byte surgery ---- */
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
/* Offset of gguf string `s` (u64 length + bytes) in buf; aborts the check when absent. */
static size_t find_gstr(const uint8_t *buf, size_t n, const char *s) {
    uint8_t pat[80];
    size_t l = strlen(s);
    put64(pat, l);
    memcpy(pat + 8, s, l);
    const uint8_t *hit = memmem(buf, n, pat, 8 + l);
    if (!hit) {
        CHECK(0, "pattern '%s' not found", s);
        return 0;
    }
    return (size_t)(hit - buf);
}

/* ---------------------------------------------------------------------------------------------
 * 1. Real models
 * ------------------------------------------------------------------------------------------- */
static int64_t geti(const af_gguf *g, const char *key) {
    int64_t v = -1;
    CHECK(af_gguf_get_i64(g, key, &v) == AF_OK, "%s: %s", key, af_last_error());
    return v;
}

typedef struct model_facts {
    const char *file, *arch, *tok0, *tok_last, *last_tensor;
    int64_t blocks, embd, heads, heads_kv, ctx, n_tensors, n_tokens, n_merges, bos, eos;
    uint64_t data_offset, last_tensor_pos;
    float eps, rope;
    uint32_t types[6]; /* tensor types present (0-terminated list except F32 first) */
    int n_types;
} model_facts;

static void check_describe(const char *path, const char *const *needles, int n) {
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    af_status st = af_gguf_describe(path, fp);
    fclose(fp);
    CHECK(st == AF_OK, "describe %s: %s", path, af_last_error());
    for (int i = 0; i < n; i++) CHECK(text && strstr(text, needles[i]), "describe %s: missing \"%s\"", path, needles[i]);
    free(text);
}

static void test_real(const model_facts *m) {
    const char *path = tl_model_path(m->file);
    if (!path) return;
    af_gguf *g = NULL;
    af_status st = af_gguf_open(path, &g);
    if (!CHECK(st == AF_OK, "open %s: %s", path, af_last_error())) return;
    CHECK(g->version == 3 && g->alignment == 32, "%s: version %u alignment %u", m->file, g->version, g->alignment);
    af_gguf_str s;
    CHECK(af_gguf_get_str(g, "general.architecture", &s) == AF_OK && af_gguf_str_eq(s, m->arch), "%s: arch", m->file);
    char key[128];
#define ARCHKEY(k) (snprintf(key, sizeof key, "%s.%s", m->arch, k), key)
    CHECK(geti(g, ARCHKEY("block_count")) == m->blocks, "%s: block_count", m->file);
    CHECK(geti(g, ARCHKEY("embedding_length")) == m->embd, "%s: embedding_length", m->file);
    CHECK(geti(g, ARCHKEY("attention.head_count")) == m->heads, "%s: head_count", m->file);
    CHECK(geti(g, ARCHKEY("attention.head_count_kv")) == m->heads_kv, "%s: head_count_kv", m->file);
    CHECK(geti(g, ARCHKEY("context_length")) == m->ctx, "%s: context_length", m->file);
    float f = 0;
    CHECK(af_gguf_get_f32(g, ARCHKEY("attention.layer_norm_rms_epsilon"), &f) == AF_OK && f == m->eps,
          "%s: eps %g want %g", m->file, f, m->eps);
    CHECK(af_gguf_get_f32(g, ARCHKEY("rope.freq_base"), &f) == AF_OK && f == m->rope, "%s: rope %g", m->file, f);
    CHECK(geti(g, "tokenizer.ggml.bos_token_id") == m->bos && geti(g, "tokenizer.ggml.eos_token_id") == m->eos,
          "%s: bos/eos", m->file);
    CHECK((int64_t)g->n_tensors == m->n_tensors, "%s: %llu tensors, want %lld", m->file,
          (unsigned long long)g->n_tensors, (long long)m->n_tensors);
    CHECK(g->data_offset == m->data_offset, "%s: data offset %llu", m->file, (unsigned long long)g->data_offset);
    const af_gguf_value *tok = af_gguf_find(g, "tokenizer.ggml.tokens");
    if (CHECK(tok && tok->type == AF_GGUF_ARRAY && tok->arr_type == AF_GGUF_STRING, "%s: tokens array", m->file)) {
        CHECK((int64_t)tok->arr_n == m->n_tokens, "%s: %llu tokens", m->file, (unsigned long long)tok->arr_n);
        CHECK(af_gguf_str_eq(af_gguf_arr_str(tok, 0), m->tok0), "%s: token 0", m->file);
        CHECK(af_gguf_str_eq(af_gguf_arr_str(tok, tok->arr_n - 1), m->tok_last), "%s: last token", m->file);
    }
    const af_gguf_value *mer = af_gguf_find(g, "tokenizer.ggml.merges");
    CHECK(m->n_merges ? (mer && (int64_t)mer->arr_n == m->n_merges) : mer == NULL, "%s: merges", m->file);
    const af_gguf_value *tt = af_gguf_find(g, "tokenizer.ggml.token_type");
    CHECK(tt && tt->arr_type == AF_GGUF_INT32 && (int64_t)tt->arr_n == m->n_tokens, "%s: token_type", m->file);
    /* Tensor types present: exactly the expected set. */
    int seen[64] = {0};
    bool in_bounds = true;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        if (t->type < 64) seen[t->type]++;
        const uint8_t *d = t->data;
        in_bounds &= d >= g->base + g->data_offset && d + t->nbytes <= g->base + g->size &&
                     (uint64_t)(d - g->base) % g->alignment == 0;
        CHECK(af_gguf_find_tensor(g, t->name) == t, "%s: find_tensor(%s)", m->file, t->name);
    }
    CHECK(in_bounds, "%s: tensor data out of bounds or misaligned", m->file);
    int n_types = 0;
    for (int t = 0; t < 64; t++) n_types += seen[t] > 0;
    CHECK(n_types == m->n_types, "%s: %d tensor types present, want %d", m->file, n_types, m->n_types);
    for (int i = 0; i < m->n_types; i++)
        CHECK(seen[m->types[i]] > 0, "%s: no tensor of type %s", m->file, af_type_name(m->types[i]));
    const af_gguf_tensor *emb = af_gguf_find_tensor(g, "token_embd.weight");
    CHECK(emb && emb->n_dims == 2 && emb->ne[0] == m->embd && emb->ne[1] == m->n_tokens && emb->type == AF_TYPE_Q8_0,
          "%s: token_embd.weight", m->file);
    const af_gguf_tensor *lt = af_gguf_find_tensor(g, m->last_tensor);
    CHECK(lt && (uint64_t)((const uint8_t *)lt->data - g->base) == m->last_tensor_pos && lt->type == AF_TYPE_F32 &&
              lt->ne[0] == m->embd && lt->n_dims == 1,
          "%s: %s position", m->file, m->last_tensor);
    CHECK(af_gguf_find_tensor(g, "output.weight") == NULL, "%s: tied (no output.weight)", m->file);
    CHECK(af_gguf_find(g, "no.such.key") == NULL && af_gguf_find_tensor(g, "nope") == NULL, "%s: absent", m->file);
    af_gguf_close(g);
    char hs[64], nl[64];
    snprintf(hs, sizeof hs, "%lld", (long long)m->embd);
    snprintf(nl, sizeof nl, "%lld", (long long)m->n_tokens);
    const char *needles[] = {"hidden_size", hs, "num_hidden_layers", "num_key_value_heads", "head_dim", "rope_theta",
                             "token_embd.weight", nl, m->arch, "totals:", "[string x", "bytes"};
    check_describe(path, needles, (int)(sizeof needles / sizeof needles[0]));
}

/* ---------------------------------------------------------------------------------------------
 * 2. Writer round trip
 * ------------------------------------------------------------------------------------------- */
static void test_roundtrip(void) {
    af_gguf_writer *w;
    if (!CHECK(af_gguf_writer_new(&w) == AF_OK, "writer_new")) return;
    af_gguf_writer_add_str(w, "general.architecture", "toy");
    af_gguf_writer_add_u8(w, "v.u8", 255);
    af_gguf_writer_add_i8(w, "v.i8", -128);
    af_gguf_writer_add_u16(w, "v.u16", 65535);
    af_gguf_writer_add_i16(w, "v.i16", -32768);
    af_gguf_writer_add_u32(w, "v.u32", 0xFFFFFFFFu);
    af_gguf_writer_add_i32(w, "v.i32", INT32_MIN);
    af_gguf_writer_add_f32(w, "v.f32", 1.5e-7f);
    af_gguf_writer_add_bool(w, "v.bool", true);
    af_gguf_writer_add_u64(w, "v.u64", UINT64_MAX);
    af_gguf_writer_add_i64(w, "v.i64", INT64_MIN);
    af_gguf_writer_add_f64(w, "v.f64", -2.25e300);
    af_gguf_writer_add_strn(w, "v.strnul", "a\0b", 3);
    af_gguf_writer_add_str(w, "v.empty", "");
    CHECK(af_gguf_writer_set_alignment(w, 64) == AF_OK, "set_alignment 64");
    const uint8_t a_u8[] = {0, 7, 255};
    const int8_t a_i8[] = {-1, 0, 127};
    const uint16_t a_u16[] = {1, 2, 65535};
    const int16_t a_i16[] = {-300, 0, 300};
    const uint32_t a_u32[] = {1, 0x80000000u, 3};
    const int32_t a_i32[] = {-5, 6, INT32_MAX};
    const float a_f32[] = {0.5f, -1.25f, 3e38f};
    const uint8_t a_bool[] = {1, 0, 1};
    const uint64_t a_u64[] = {1, UINT64_MAX, 0};
    const int64_t a_i64[] = {INT64_MIN, -1, INT64_MAX};
    const double a_f64[] = {1e-300, -0.0, 42.0};
    const void *arrs[] = {a_u8, a_i8, a_u16, a_i16, a_u32, a_i32, a_f32, a_bool, NULL, NULL, a_u64, a_i64, a_f64};
    for (int t = 0; t < AF_GGUF_VTYPE_COUNT; t++) {
        if (!arrs[t]) continue;
        char key[32];
        snprintf(key, sizeof key, "arr.%s", af_gguf_vtype_name((af_gguf_vtype)t));
        CHECK(af_gguf_writer_add_arr(w, key, (af_gguf_vtype)t, arrs[t], 3) == AF_OK, "add_arr %s", key);
    }
    const char *strs[] = {"alpha", "", "\xc4\xa0t"};
    af_gguf_writer_add_arr_str(w, "arr.string", strs, 3);
    af_gguf_writer_add_arr(w, "arr.empty", AF_GGUF_UINT32, NULL, 0);
    /* nested: [[1, 2], [], [["x", "yz"]]] as arrays of u32 / u32 / arrays of strings */
    af_gguf_enc e = {0};
    af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 3);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT32, 2);
    af_gguf_enc_u32(&e, 1);
    af_gguf_enc_u32(&e, 2);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT32, 0);
    af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 1);
    af_gguf_enc_arr_header(&e, AF_GGUF_STRING, 2);
    af_gguf_enc_str(&e, "x", 1);
    af_gguf_enc_str(&e, "yz", 2);
    CHECK(af_gguf_writer_add_raw(w, "arr.nested", AF_GGUF_ARRAY, &e, false) == AF_OK, "add_raw nested");
    af_gguf_enc_free(&e);

    /* tensors */
    float f32d[24];
    for (int i = 0; i < 24; i++) f32d[i] = (float)i - 3.5f;
    uint8_t q8[2 * 34], q4k[144], f16d[8];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof q4k; i++) q4k[i] = (uint8_t)(i * 13 + 5);
    for (size_t i = 0; i < sizeof f16d; i++) f16d[i] = (uint8_t)i;
    int64_t ne_a[2] = {8, 3}, ne_b[2] = {32, 2}, ne_c[1] = {256}, ne_d[4] = {1, 2, 1, 2};
    CHECK(af_gguf_writer_add_tensor(w, "a.weight", AF_TYPE_F32, 2, ne_a, f32d, sizeof f32d) == AF_OK, "add a");
    CHECK(af_gguf_writer_add_tensor(w, "b.weight", AF_TYPE_Q8_0, 2, ne_b, q8, sizeof q8) == AF_OK, "add b");
    CHECK(af_gguf_writer_add_tensor_ref(w, "c", AF_TYPE_Q4_K, 1, ne_c, q4k, sizeof q4k) == AF_OK, "add c");
    CHECK(af_gguf_writer_add_tensor(w, "d", AF_TYPE_F16, 4, ne_d, f16d, sizeof f16d) == AF_OK, "add d");
    /* writer-side validation (does not poison the writer: checked on a second writer) */
    af_gguf_writer *w2;
    af_gguf_writer_new(&w2);
    int64_t ne_bad[1] = {16};
    CHECK(af_gguf_writer_add_tensor(w2, "q", AF_TYPE_Q8_0, 1, ne_bad, q8, 17) == AF_ERR_INVALID_ARG, "writer: ne0 %% block");
    CHECK(af_gguf_writer_add_u8(w2, "x", 1) == AF_ERR_INVALID_ARG, "writer: sticky error");
    af_gguf_writer_free(w2);
    af_gguf_writer_new(&w2);
    af_gguf_writer_add_u8(w2, "x", 1);
    CHECK(af_gguf_writer_add_u8(w2, "x", 2) == AF_ERR_INVALID_ARG, "writer: duplicate key refused");
    af_gguf_writer_free(w2);

    uint8_t *mem = NULL;
    size_t mlen = 0;
    CHECK(af_gguf_writer_write_mem(w, &mem, &mlen) == AF_OK, "write_mem: %s", af_last_error());
    CHECK(mlen == af_gguf_writer_size(w) && mlen % 64 == 0, "size %zu", mlen);
    CHECK(af_gguf_writer_write_file(w, g_path) == AF_OK, "write_file: %s", af_last_error());
    af_gguf_writer_free(w);
    size_t flen = 0;
    char *fbytes = tl_read_file(g_path, &flen);
    CHECK(fbytes && flen == mlen && memcmp(fbytes, mem, mlen) == 0, "file bytes == memory bytes");
    free(fbytes);
    free(mem);

    af_gguf *g = NULL;
    if (!CHECK(af_gguf_open(g_path, &g) == AF_OK, "open round trip: %s", af_last_error())) return;
    CHECK(g->version == 3 && g->alignment == 64 && g->n_tensors == 4 && g->data_offset % 64 == 0, "header");
    int64_t i = 0;
    uint64_t u = 0;
    const af_gguf_value *v;
    CHECK(af_gguf_get_i64(g, "v.u8", &i) == AF_OK && i == 255, "u8");
    CHECK(af_gguf_get_i64(g, "v.i8", &i) == AF_OK && i == -128, "i8");
    CHECK(af_gguf_get_i64(g, "v.u16", &i) == AF_OK && i == 65535, "u16");
    CHECK(af_gguf_get_i64(g, "v.i16", &i) == AF_OK && i == -32768, "i16");
    CHECK(af_gguf_get_i64(g, "v.u32", &i) == AF_OK && i == 0xFFFFFFFFll, "u32");
    CHECK(af_gguf_get_i64(g, "v.i32", &i) == AF_OK && i == INT32_MIN, "i32");
    CHECK(af_gguf_get_i64(g, "v.i64", &i) == AF_OK && i == INT64_MIN, "i64");
    v = af_gguf_find(g, "v.u64");
    u = v ? v->v.u64 : 0;
    CHECK(v && v->type == AF_GGUF_UINT64 && u == UINT64_MAX, "u64");
    CHECK(af_gguf_get_i64(g, "v.u64", &i) == AF_ERR_FORMAT && strstr(af_last_error(), "v.u64"), "u64 out of i64 range");
    float f = 0;
    CHECK(af_gguf_get_f32(g, "v.f32", &f) == AF_OK && f == 1.5e-7f, "f32");
    CHECK(af_gguf_get_f32(g, "v.i32", &f) == AF_OK && f == (float)INT32_MIN, "f32 from i32");
    CHECK(af_gguf_get_f32(g, "v.f64", &f) == AF_ERR_FORMAT, "f64 beyond float range");
    v = af_gguf_find(g, "v.f64");
    CHECK(v && v->type == AF_GGUF_FLOAT64 && v->v.f64 == -2.25e300, "f64");
    bool b = false;
    CHECK(af_gguf_get_bool(g, "v.bool", &b) == AF_OK && b, "bool");
    af_gguf_str s;
    CHECK(af_gguf_get_str(g, "v.strnul", &s) == AF_OK && s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0, "string with NUL");
    CHECK(af_gguf_get_str(g, "v.empty", &s) == AF_OK && s.len == 0 && af_gguf_str_eq(s, ""), "empty string");
    CHECK(af_gguf_get_str(g, "v.u8", &s) == AF_ERR_FORMAT && strstr(af_last_error(), "v.u8"), "string getter on u8");
    CHECK(af_gguf_get_i64(g, "v.f32", &i) == AF_ERR_FORMAT, "int getter on f32");
    CHECK(af_gguf_get_i64(g, "missing.key", &i) == AF_ERR_NOT_FOUND && strstr(af_last_error(), "missing.key"), "missing");
    CHECK(af_gguf_get_i64_or(g, "missing.key", 77, &i) == AF_OK && i == 77, "_or default");
    CHECK(af_gguf_get_f32_or(g, "missing.key", 2.5f, &f) == AF_OK && f == 2.5f, "_or default f32");
    CHECK(af_gguf_get_bool_or(g, "missing.key", true, &b) == AF_OK && b, "_or default bool");
    CHECK(af_gguf_get_i64_or(g, "v.i8", 77, &i) == AF_OK && i == -128, "_or present");
    v = af_gguf_find(g, "general.alignment");
    CHECK(v && v->type == AF_GGUF_UINT32 && v->v.u64 == 64, "general.alignment KV written");
    /* arrays */
    const double want[13][3] = {{0, 7, 255}, {-1, 0, 127}, {1, 2, 65535}, {-300, 0, 300}, {1, 2147483648.0, 3},
                                {-5, 6, INT32_MAX}, {0.5, -1.25, 3e38f}, {1, 0, 1}, {0}, {0},
                                {1, 18446744073709551615.0, 0}, {(double)INT64_MIN, -1, (double)INT64_MAX}, {1e-300, -0.0, 42}};
    for (int t = 0; t < AF_GGUF_VTYPE_COUNT; t++) {
        if (!arrs[t]) continue;
        char key[32];
        snprintf(key, sizeof key, "arr.%s", af_gguf_vtype_name((af_gguf_vtype)t));
        v = af_gguf_find(g, key);
        if (!CHECK(v && v->type == AF_GGUF_ARRAY && (int)v->arr_type == t && v->arr_n == 3, "%s header", key)) continue;
        for (int k = 0; k < 3; k++)
            CHECK(af_gguf_arr_float(v, (uint64_t)k) == want[t][k], "%s[%d] = %.17g want %.17g", key, k,
                  af_gguf_arr_float(v, (uint64_t)k), want[t][k]);
    }
    v = af_gguf_find(g, "arr.i64");
    CHECK(v && af_gguf_arr_int(v, 0) == INT64_MIN && af_gguf_arr_int(v, 2) == INT64_MAX, "i64 array exact");
    v = af_gguf_find(g, "arr.string");
    CHECK(v && v->arr_n == 3 && v->str_offsets && af_gguf_str_eq(af_gguf_arr_str(v, 0), "alpha") &&
              af_gguf_arr_str(v, 1).len == 0 && af_gguf_str_eq(af_gguf_arr_str(v, 2), "\xc4\xa0t"),
          "string array");
    CHECK(v && af_gguf_arr_str(v, 3).len == 0 && af_gguf_arr_int(v, 0) == 0, "out-of-range / wrong-type element");
    v = af_gguf_find(g, "arr.empty");
    CHECK(v && v->arr_n == 0 && v->arr_type == AF_GGUF_UINT32, "empty array");
    v = af_gguf_find(g, "arr.nested");
    af_gguf_value sub, sub2;
    if (CHECK(v && v->arr_type == AF_GGUF_ARRAY && v->arr_n == 3 && v->str_offsets == NULL, "nested header")) {
        CHECK(af_gguf_arr_sub(v, 0, &sub) == AF_OK && sub.arr_type == AF_GGUF_UINT32 && sub.arr_n == 2 &&
                  af_gguf_arr_int(&sub, 0) == 1 && af_gguf_arr_int(&sub, 1) == 2,
              "nested[0]");
        CHECK(af_gguf_arr_sub(v, 1, &sub) == AF_OK && sub.arr_n == 0, "nested[1]");
        CHECK(af_gguf_arr_sub(v, 2, &sub) == AF_OK && sub.arr_type == AF_GGUF_ARRAY && sub.arr_n == 1 &&
                  af_gguf_arr_sub(&sub, 0, &sub2) == AF_OK && sub2.arr_type == AF_GGUF_STRING && sub2.arr_n == 2 &&
                  af_gguf_str_eq(af_gguf_arr_str(&sub2, 0), "x") && af_gguf_str_eq(af_gguf_arr_str(&sub2, 1), "yz"),
              "nested[2][0]");
        CHECK(af_gguf_arr_sub(v, 3, &sub) == AF_ERR_INVALID_ARG, "nested index out of range");
    }
    /* tensors */
    const af_gguf_tensor *ta = af_gguf_find_tensor(g, "a.weight"), *tb = af_gguf_find_tensor(g, "b.weight"),
                         *tc = af_gguf_find_tensor(g, "c"), *td = af_gguf_find_tensor(g, "d");
    if (CHECK(ta && tb && tc && td, "tensors found")) {
        CHECK(ta->n_dims == 2 && ta->ne[0] == 8 && ta->ne[1] == 3 && ta->ne[2] == 1 && ta->type == AF_TYPE_F32 &&
                  ta->nbytes == sizeof f32d && memcmp(ta->data, f32d, sizeof f32d) == 0,
              "tensor a");
        CHECK(tb->type == AF_TYPE_Q8_0 && tb->nbytes == 68 && memcmp(tb->data, q8, 68) == 0 && tb->offset % 64 == 0, "tensor b");
        CHECK(tc->type == AF_TYPE_Q4_K && tc->nbytes == 144 && memcmp(tc->data, q4k, 144) == 0, "tensor c");
        CHECK(td->n_dims == 4 && td->ne[3] == 2 && td->nbytes == 8 && memcmp(td->data, f16d, 8) == 0, "tensor d");
        for (uint64_t k = 0; k < g->n_tensors; k++)
            CHECK((uint64_t)((const uint8_t *)g->tensors[k].data - g->base) % 64 == 0, "tensor %llu aligned",
                  (unsigned long long)k);
    }
    af_gguf_close(g);
    const char *needles[] = {"architecture:  toy", "[string x 3]", "v.strnul", "arr.nested", "[array x 3]",
                             "a.weight", "[3, 8]", "[2, 1, 2, 1]", "Q4_K", "alignment:     64"};
    check_describe(g_path, needles, (int)(sizeof needles / sizeof needles[0]));
}

/* ---------------------------------------------------------------------------------------------
 * 3. Bad inputs
 * ------------------------------------------------------------------------------------------- */

/* A small valid file: 3 KVs, tensors t0 F32 [8] (32 B) and t1 F32 [8, 2] (64 B). The last
 * tensor's size is a multiple of 32, so the file ends exactly after its data. `extra` may add
 * a KV with raw encoded bytes (key, type, value). */
static uint8_t *base_file(size_t *n, const char *xkey, uint32_t xtype, const af_gguf_enc *xval, bool dup) {
    af_gguf_writer *w;
    af_gguf_writer_new(&w);
    af_gguf_writer_add_str(w, "general.architecture", "test");
    af_gguf_writer_add_u32(w, "test.block_count", 2);
    const char *toks[] = {"a", "bc"};
    af_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 2);
    if (xkey) af_gguf_writer_add_raw(w, xkey, xtype, xval, dup);
    float d[24] = {0};
    int64_t ne0[1] = {8}, ne1[2] = {8, 2};
    af_gguf_writer_add_tensor(w, "t0", AF_TYPE_F32, 1, ne0, d, 32);
    af_gguf_writer_add_tensor(w, "t1", AF_TYPE_F32, 2, ne1, d, 64);
    uint8_t *buf = NULL;
    *n = 0;
    af_status st = af_gguf_writer_write_mem(w, &buf, n);
    CHECK(st == AF_OK, "base_file: %s", af_last_error());
    af_gguf_writer_free(w);
    return buf;
}

/* Build base_file with one extra raw KV and expect `want`. */
static void raw_case(const char *label, const char *key, uint32_t type, const af_gguf_enc *e, bool dup, af_status want) {
    size_t n;
    uint8_t *buf = base_file(&n, key, type, e, dup);
    if (buf) expect_fail(label, buf, n, want);
    free(buf);
}

/* Copy of `base` with `width` bytes (1, 4 or 8, little-endian) at `off` set to `val`, expected
 * to fail with `want`. */
static void surgery(const char *label, const uint8_t *base, size_t n, size_t off, int width, uint64_t val, af_status want) {
    uint8_t *b = malloc(n);
    memcpy(b, base, n);
    if (width == 4) put32(b + off, (uint32_t)val);
    else if (width == 8) put64(b + off, val);
    else b[off] = (uint8_t)val;
    expect_fail(label, b, n, want);
    free(b);
}

static void test_bad(void) {
    size_t n;
    uint8_t *base = base_file(&n, NULL, 0, NULL, false);
    if (!base) return;
    /* the base file itself opens, also as version 2 */
    write_bytes(g_path, base, n);
    af_gguf *g = NULL;
    CHECK(af_gguf_open(g_path, &g) == AF_OK, "base file opens: %s", af_last_error());
    af_gguf_close(g);
    base[4] = 2;
    write_bytes(g_path, base, n);
    CHECK(af_gguf_open(g_path, &g) == AF_OK && g->version == 2, "version 2 opens: %s", af_last_error());
    af_gguf_close(g);
    base[4] = 3;

    const char *text = "This is not a GGUF file, just some text.\n";
    expect_fail("text file", (const uint8_t *)text, strlen(text), AF_ERR_FORMAT);
    expect_fail("empty file", base, 0, AF_ERR_FORMAT);
    surgery("wrong magic", base, n, 0, 1, 'X', AF_ERR_FORMAT);
    surgery("version 1", base, n, 4, 4, 1, AF_ERR_FORMAT);
    surgery("version 4", base, n, 4, 4, 4, AF_ERR_FORMAT);
    surgery("version byte-swapped", base, n, 4, 4, 0x03000000u, AF_ERR_FORMAT);
    surgery("kv count 2^60", base, n, 16, 8, 1ull << 60, AF_ERR_FORMAT);
    surgery("kv count +1", base, n, 16, 8, 4, AF_ERR_FORMAT);
    surgery("kv count UINT64_MAX", base, n, 16, 8, UINT64_MAX, AF_ERR_FORMAT);
    surgery("tensor count 2^60", base, n, 8, 8, 1ull << 60, AF_ERR_FORMAT);
    surgery("tensor count +1", base, n, 8, 8, 3, AF_ERR_FORMAT);
    size_t arch = find_gstr(base, n, "test");
    surgery("1 TB string length", base, n, arch, 8, 1ull << 40, AF_ERR_FORMAT);
    size_t key0 = find_gstr(base, n, "general.architecture");
    surgery("1 TB key length", base, n, key0, 8, 1ull << 40, AF_ERR_FORMAT);
    surgery("empty key", base, n, key0, 8, 0, AF_ERR_FORMAT);
    surgery("value type 13", base, n, key0 + 8 + 20, 4, 13, AF_ERR_FORMAT);
    size_t toks = find_gstr(base, n, "tokenizer.ggml.tokens") + 8 + 21 + 4;
    surgery("string array count 2^61", base, n, toks + 4, 8, 1ull << 61, AF_ERR_FORMAT);
    surgery("array elem type 99", base, n, toks, 4, 99, AF_ERR_FORMAT);

    af_gguf_enc e = {0};
    raw_case("unknown value type", "x.bad", 13, &e, false, AF_ERR_FORMAT);
    raw_case("value type 0xffffffff", "x.bad", 0xFFFFFFFFu, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_u8(&e, 2);
    raw_case("invalid bool 2", "x.bool", AF_GGUF_BOOL, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_arr_header(&e, AF_GGUF_BOOL, 3);
    af_gguf_enc_bytes(&e, "\x01\x00\xff", 3);
    raw_case("invalid bool in array", "x.bools", AF_GGUF_ARRAY, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    for (int d = 0; d < 100; d++) af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 1);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT8, 0);
    raw_case("array nested 100 deep", "x.deep", AF_GGUF_ARRAY, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    for (int d = 0; d < AF_GGUF_MAX_DEPTH - 1; d++) af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 1);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT8, 0);
    {
        size_t m;
        uint8_t *ok = base_file(&m, "x.deep_ok", AF_GGUF_ARRAY, &e, false);
        write_bytes(g_path, ok, m);
        CHECK(af_gguf_open(g_path, &g) == AF_OK, "nesting depth %d accepted: %s", AF_GGUF_MAX_DEPTH, af_last_error());
        af_gguf_close(g);
        free(ok);
    }
    af_gguf_enc_free(&e);
    af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 1ull << 60);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT8, 0);
    raw_case("array bomb: 2^60 sub-arrays", "x.bomb", AF_GGUF_ARRAY, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 2);
    af_gguf_enc_arr_header(&e, AF_GGUF_UINT64, 1ull << 62);
    raw_case("array bomb: 2^62 u64 inside", "x.bomb", AF_GGUF_ARRAY, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_arr_header(&e, AF_GGUF_ARRAY, 1);
    af_gguf_enc_arr_header(&e, 77, 1);
    raw_case("nested unknown elem type", "x.nest", AF_GGUF_ARRAY, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_str(&e, "dup", 3);
    raw_case("duplicate key", "general.architecture", AF_GGUF_STRING, &e, true, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_u32(&e, 0);
    raw_case("alignment 0", "general.alignment", AF_GGUF_UINT32, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_u32(&e, 48);
    raw_case("alignment 48", "general.alignment", AF_GGUF_UINT32, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_u64(&e, 32);
    raw_case("alignment as u64", "general.alignment", AF_GGUF_UINT64, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);
    af_gguf_enc_str(&e, "32", 2);
    raw_case("alignment as string", "general.alignment", AF_GGUF_STRING, &e, false, AF_ERR_FORMAT);
    af_gguf_enc_free(&e);

    /* tensor info surgery: t1 = name(8+2) n_dims(4) ne0(8) ne1(8) type(4) offset(8) */
    size_t t0 = find_gstr(base, n, "t0"), t1 = find_gstr(base, n, "t1");
    size_t t1_ndims = t1 + 10, t1_ne0 = t1 + 14, t1_ne1 = t1 + 22, t1_type = t1 + 30, t1_off = t1 + 34;
    surgery("duplicate tensor", base, n, t1 + 9, 1, '0', AF_ERR_FORMAT);
    surgery("unknown tensor type 1000", base, n, t1_type, 4, 1000, AF_ERR_UNSUPPORTED);
    CHECK(strstr(af_last_error(), "t1") && strstr(af_last_error(), "1000"), "message names tensor and type: %s", af_last_error());
    surgery("removed tensor type 4", base, n, t1_type, 4, 4, AF_ERR_UNSUPPORTED);
    surgery("ne0 not multiple of block", base, n, t0 + 10 + 4 + 8, 4, AF_TYPE_Q8_0, AF_ERR_FORMAT);
    surgery("tensor offset 2^40", base, n, t1_off, 8, 1ull << 40, AF_ERR_FORMAT);
    surgery("tensor offset UINT64_MAX-31", base, n, t1_off, 8, UINT64_MAX - 31, AF_ERR_FORMAT);
    surgery("tensor data past end", base, n, t1_off, 8, 64, AF_ERR_FORMAT);
    surgery("misaligned offset", base, n, t1_off, 8, 33, AF_ERR_FORMAT);
    surgery("n_dims 5", base, n, t1_ndims, 4, 5, AF_ERR_FORMAT);
    surgery("n_dims 0", base, n, t1_ndims, 4, 0, AF_ERR_FORMAT);
    surgery("dim 0", base, n, t1_ne1, 8, 0, AF_ERR_FORMAT);
    surgery("dim negative", base, n, t1_ne0, 8, (uint64_t)-8, AF_ERR_FORMAT);
    surgery("dims overflow", base, n, t1_ne1, 8, 1ull << 62, AF_ERR_FORMAT);
    surgery("bytes overflow", base, n, t1_ne1, 8, 1ull << 59, AF_ERR_FORMAT);
    surgery("tensor name length 64", base, n, t1, 8, 64, AF_ERR_FORMAT);
    surgery("tensor name NUL", base, n, t1 + 9, 1, 0, AF_ERR_FORMAT);

    /* every proper prefix fails cleanly */
    int prefix_bad = 0;
    size_t first_bad = 0;
    for (size_t k = 0; k < n; k++) {
        write_bytes(g_path, base, k);
        g = NULL;
        af_status st = af_gguf_open(g_path, &g);
        bool ok = (st == AF_ERR_FORMAT || st == AF_ERR_IO) && !g && strstr(af_last_error(), g_path);
        if (!ok && prefix_bad++ == 0) first_bad = k;
        if (st == AF_OK) af_gguf_close(g);
    }
    CHECK(prefix_bad == 0, "%d of %zu prefixes did not fail cleanly (first: %zu bytes)", prefix_bad, n, first_bad);

    /* random byte flips never crash (statuses vary); accessors on whatever opens */
    uint64_t rng = 12345;
    int opened = 0;
    uint8_t *b = malloc(n);
    for (int it = 0; it < 3000; it++) {
        memcpy(b, base, n);
        int flips = 1 + (int)(tl_rand_u64(&rng) % 4);
        for (int f = 0; f < flips; f++) {
            size_t pos = (size_t)(tl_rand_u64(&rng) % n);
            b[pos] = (it & 1) ? (uint8_t)tl_rand_u64(&rng) : (uint8_t)(b[pos] ^ (1u << (tl_rand_u64(&rng) % 8)));
        }
        write_bytes(g_path, b, n);
        g = NULL;
        if (af_gguf_open(g_path, &g) == AF_OK) {
            opened++;
            for (uint64_t k = 0; k < g->n_kv; k++) {
                const af_gguf_value *v = &g->kv[k].val;
                if (v->type == AF_GGUF_ARRAY)
                    for (uint64_t j = 0; j < v->arr_n && j < 16; j++) {
                        (void)af_gguf_arr_str(v, j);
                        (void)af_gguf_arr_float(v, j);
                    }
            }
            for (uint64_t k = 0; k < g->n_tensors; k++) {
                volatile uint8_t sink = ((const uint8_t *)g->tensors[k].data)[g->tensors[k].nbytes - 1];
                (void)sink;
            }
            af_gguf_close(g);
        } else {
            CHECK(strstr(af_last_error(), g_path) != NULL, "flip %d: message names file: %s", it, af_last_error());
        }
    }
    free(b);
    printf("random flips: %d of 3000 corrupted files still opened (no crash)\n", opened);
    free(base);

    /* directory and missing file */
    snprintf(g_path, sizeof g_path, "%s", g_dir);
    expect_fail_file("directory as path", AF_ERR_IO, AF_OK);
    snprintf(g_path, sizeof g_path, "%s/does-not-exist.gguf", g_dir);
    expect_fail_file("missing file", AF_ERR_IO, AF_OK);
    snprintf(g_path, sizeof g_path, "%s/t.gguf", g_dir);
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(af_gguf_describe(g_dir, devnull) == AF_ERR_IO, "describe on a directory");
    fclose(devnull);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_gguf_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp failed");
        return tl_finish("gguf");
    }
    snprintf(g_path, sizeof g_path, "%s/t.gguf", g_dir);

    static const model_facts smol = {
        .file = "SmolLM2-135M-Instruct.Q4_1.gguf", .arch = "llama", .tok0 = "<|endoftext|>", .tok_last = "ectable",
        .last_tensor = "output_norm.weight", .blocks = 30, .embd = 576, .heads = 9, .heads_kv = 3, .ctx = 8192,
        .n_tensors = 272, .n_tokens = 49152, .n_merges = 48900, .bos = 1, .eos = 2, .data_offset = 1785664,
        .last_tensor_pos = 98360128, .eps = 1e-5f, .rope = 100000.0f,
        .types = {AF_TYPE_F32, AF_TYPE_Q4_1, AF_TYPE_Q8_0}, .n_types = 3};
    static const model_facts gemma = {
        .file = "gemma-3-270m-Q4_K_M.gguf", .arch = "gemma3", .tok0 = "<pad>", .tok_last = "<unused6241>",
        .last_tensor = "blk.17.post_ffw_norm.weight", .blocks = 18, .embd = 640, .heads = 4, .heads_kv = 1,
        .ctx = 32768, .n_tensors = 236, .n_tokens = 262144, .n_merges = 0, .bos = 2, .eos = 1,
        .data_offset = 6525120, .last_tensor_pos = 253110464, .eps = 1e-6f, .rope = 1000000.0f,
        .types = {AF_TYPE_F32, AF_TYPE_Q5_0, AF_TYPE_Q8_0, AF_TYPE_Q4_K, AF_TYPE_Q6_K}, .n_types = 5};
    test_real(&smol);
    test_real(&gemma);
    test_roundtrip();
    test_bad();

    unlink(g_path);
    /* remove anything left (e.g. a temp file from a failed atomic write) */
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    CHECK(rmdir(g_dir) == 0, "temp dir removed");
    return tl_finish("gguf");
}
