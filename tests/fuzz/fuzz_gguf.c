/*
 * fuzz_gguf.c — libFuzzer target for the GGUF container reader (src/formats/gguf.c,
 * gguf_describe.c): header, metadata KVs (all value types, nested arrays), tensor infos.
 * The input is the whole file; it is put in a memfd and opened through /proc/self/fd/N, so the
 * real af_gguf_open path (open, fstat, mmap) runs. After a successful open every accessor is
 * exercised: af_gguf_find for every key, the typed getters, every array element (capped),
 * nested sub-arrays, af_gguf_find_tensor for every tensor, and af_gguf_describe (to /dev/null).
 * Oracles: lookups return the entry itself; every string / array / tensor byte range lies inside
 * the file. Also: every KV copied with af_gguf_writer_copy_kv (what `afinar merge` does) must
 * re-open with the same keys and types, and af_adapter_gguf_read_info (LoRA GGUF adapters) runs on
 * the file. Returns af_gguf_open's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "lora/adapter_gguf.h"

/* True when [p, p+n) lies inside [base, base+size). */
static int fz_gguf_inside(const af_gguf *g, const void *p, uint64_t n) {
    const uint8_t *q = p;
    if (n == 0) return 1;
    return q >= g->base && q <= g->base + g->size && n <= (uint64_t)(g->base + g->size - q);
}

static void fz_gguf_array(const af_gguf *g, const af_gguf_value *v, int depth) {
    FZ_ASSERT(fz_gguf_inside(g, v->arr_data, v->arr_bytes));
    uint64_t n = v->arr_n < 64 ? v->arr_n : 64;
    for (uint64_t k = 0; k <= n; k++) {
        uint64_t i = k < n ? k : v->arr_n - 1; /* the first 64 and the last (or an out-of-range 0) */
        if (v->arr_n == 0) i = 0;
        if (v->arr_type == AF_GGUF_STRING) {
            af_gguf_str s = af_gguf_arr_str(v, i);
            if (i < v->arr_n) FZ_ASSERT(fz_gguf_inside(g, s.ptr, s.len));
        } else if (v->arr_type == AF_GGUF_ARRAY) {
            af_gguf_value sub;
            af_status st = af_gguf_arr_sub(v, i, &sub);
            FZ_ASSERT((st == AF_OK) == (i < v->arr_n));
            if (st == AF_OK && depth < 3 && k < 8) fz_gguf_array(g, &sub, depth + 1);
            if (st != AF_OK) af_clear_error();
        } else {
            (void)af_gguf_arr_int(v, i);
            (void)af_gguf_arr_float(v, i);
        }
    }
    /* out of range: must not read */
    (void)af_gguf_arr_int(v, v->arr_n);
    (void)af_gguf_arr_str(v, v->arr_n);
}

af_status fz_gguf_one(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fz_memfd(data, size, path);
    if (fd < 0) return AF_ERR_IO;
    af_gguf *g = NULL;
    af_status st = af_gguf_open(path, &g);
    if (st == AF_OK) {
        FZ_ASSERT(g->size == size && g->data_offset <= size + g->alignment);
        char key[300];
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const af_gguf_kv *kv = &g->kv[i];
            FZ_ASSERT(kv->key.len > 0 && fz_gguf_inside(g, kv->key.ptr, kv->key.len));
            if (kv->key.len < sizeof key && !memchr(kv->key.ptr, 0, (size_t)kv->key.len)) {
                memcpy(key, kv->key.ptr, (size_t)kv->key.len);
                key[kv->key.len] = 0;
                FZ_ASSERT(af_gguf_find(g, key) == &kv->val);
                int64_t i64;
                float f;
                bool b;
                af_gguf_str s;
                (void)af_gguf_get_i64(g, key, &i64);
                (void)af_gguf_get_f32(g, key, &f);
                (void)af_gguf_get_bool(g, key, &b);
                if (af_gguf_get_str(g, key, &s) == AF_OK) FZ_ASSERT(fz_gguf_inside(g, s.ptr, s.len));
                af_clear_error();
            }
            if (kv->val.type == AF_GGUF_STRING) FZ_ASSERT(fz_gguf_inside(g, kv->val.v.str.ptr, kv->val.v.str.len));
            if (kv->val.type == AF_GGUF_ARRAY) fz_gguf_array(g, &kv->val, 0);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const af_gguf_tensor *t = &g->tensors[i];
            FZ_ASSERT(af_gguf_find_tensor(g, t->name) == t);
            FZ_ASSERT(t->n_dims >= 1 && t->n_dims <= 4);
            FZ_ASSERT(fz_gguf_inside(g, t->data, t->nbytes));
            if (t->nbytes) {
                volatile uint8_t x = ((const uint8_t *)t->data)[0];
                x = ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)x;
            }
        }
        (void)af_gguf_find(g, "no.such.key");
        (void)af_gguf_find_tensor(g, "no.such.tensor");
        int64_t d;
        (void)af_gguf_get_i64_or(g, "general.alignment", 32, &d);
        af_clear_error();
        /* the merge's metadata copy: every KV re-encoded must give the same KVs back */
        af_gguf_writer *w = NULL;
        if (af_gguf_writer_new(&w) == AF_OK) {
            af_status cs = AF_OK;
            for (uint64_t i = 0; cs == AF_OK && i < g->n_kv; i++) cs = af_gguf_writer_copy_kv(w, &g->kv[i]);
            uint8_t *buf = NULL;
            size_t len = 0;
            if (cs == AF_OK && af_gguf_writer_write_mem(w, &buf, &len) == AF_OK) {
                char p2[64];
                int fd2 = fz_memfd(buf, len, p2);
                af_gguf *g2 = NULL;
                if (fd2 >= 0) {
                    FZ_ASSERT(af_gguf_open(p2, &g2) == AF_OK && g2->n_kv == g->n_kv);
                    for (uint64_t i = 0; g2 && i < g->n_kv; i++)
                        FZ_ASSERT(g2->kv[i].val.type == g->kv[i].val.type && g2->kv[i].key.len == g->kv[i].key.len);
                    af_gguf_close(g2);
                    close(fd2);
                }
                free(buf);
            }
            af_gguf_writer_free(w);
            af_clear_error();
        }
        af_gguf_close(g);
        /* the LoRA GGUF / merged-head adapter reader on top of the container */
        af_adapter_info ai;
        if (af_adapter_gguf_read_info(path, &ai) == AF_OK) af_adapter_info_free(&ai);
        af_clear_error();
        FILE *nul = fz_devnull();
        if (nul) FZ_ASSERT(af_gguf_describe(path, nul) == AF_OK);
    }
    close(fd);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_gguf_one(data, size);
    return 0;
}
#endif
