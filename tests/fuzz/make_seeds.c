/*
 * make_seeds.c — writes the GGUF seed inputs of tests/fuzz/corpus/{gguf,gguf_tok}/ from the real
 * models (not part of the build; run once when the seeds need refreshing):
 *     make BUILD=/tmp/b lib && gcc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests \
 *         tests/fuzz/make_seeds.c /tmp/b/libafinar.a $(make -s print-ldlibs) -lpthread -o /tmp/make_seeds
 *     /tmp/make_seeds models tests/fuzz/corpus
 * gguf/<model>-slice.gguf: every KV of the model re-written by the library's GGUF writer, arrays
 *   cut to their first 16 elements and strings to 2 KiB, plus the model's first 8 tensors as tiny
 *   tensors of the same type (one block each).
 * gguf_tok/<model>-vocab.gguf: the tokenizer keys with the first N tokens (types, scores) and the
 *   merges among them, so the tokenizer loads and encodes.
 * gguf_tok/synth-{bpe,spm}.gguf: the synthetic tokenizers of fuzz_tok.h.
 */
#include "fuzz/fuzz_tok.h"
#include "kernels/quant.h"

#include <stdio.h>

static int save(const char *dir, const char *name, af_gguf_writer *w) {
    uint8_t *buf;
    size_t len;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (af_gguf_writer_write_mem(w, &buf, &len) != AF_OK) {
        fprintf(stderr, "%s: %s\n", name, af_last_error());
        return 1;
    }
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, len, fp) != len) return 1;
    fclose(fp);
    printf("%s: %zu bytes\n", path, len);
    free(buf);
    return 0;
}

static char *cstr(af_gguf_str s, size_t max) {
    size_t n = s.len < max ? (size_t)s.len : max;
    char *c = malloc(n + 1);
    memcpy(c, s.ptr, n);
    c[n] = 0;
    return c;
}

/* Copy one KV, arrays cut to `max_n` elements, strings to `max_s` bytes. */
static void copy_kv(af_gguf_writer *w, const af_gguf_kv *kv, uint64_t max_n, size_t max_s) {
    char *key = cstr(kv->key, 65535);
    const af_gguf_value *v = &kv->val;
    switch (v->type) {
    case AF_GGUF_UINT8: af_gguf_writer_add_u8(w, key, (uint8_t)v->v.u64); break;
    case AF_GGUF_INT8: af_gguf_writer_add_i8(w, key, (int8_t)v->v.i64); break;
    case AF_GGUF_UINT16: af_gguf_writer_add_u16(w, key, (uint16_t)v->v.u64); break;
    case AF_GGUF_INT16: af_gguf_writer_add_i16(w, key, (int16_t)v->v.i64); break;
    case AF_GGUF_UINT32:
        if (strcmp(key, "general.alignment") == 0) af_gguf_writer_set_alignment(w, (uint32_t)v->v.u64);
        else af_gguf_writer_add_u32(w, key, (uint32_t)v->v.u64);
        break;
    case AF_GGUF_INT32: af_gguf_writer_add_i32(w, key, (int32_t)v->v.i64); break;
    case AF_GGUF_UINT64: af_gguf_writer_add_u64(w, key, v->v.u64); break;
    case AF_GGUF_INT64: af_gguf_writer_add_i64(w, key, v->v.i64); break;
    case AF_GGUF_FLOAT32: af_gguf_writer_add_f32(w, key, (float)v->v.f64); break;
    case AF_GGUF_FLOAT64: af_gguf_writer_add_f64(w, key, v->v.f64); break;
    case AF_GGUF_BOOL: af_gguf_writer_add_bool(w, key, v->v.u64 != 0); break;
    case AF_GGUF_STRING:
        af_gguf_writer_add_strn(w, key, v->v.str.ptr, v->v.str.len < max_s ? (size_t)v->v.str.len : max_s);
        break;
    case AF_GGUF_ARRAY: {
        uint64_t n = v->arr_n < max_n ? v->arr_n : max_n;
        if (v->arr_type == AF_GGUF_STRING) {
            char **s = calloc(n ? n : 1, sizeof *s);
            for (uint64_t i = 0; i < n; i++) s[i] = cstr(af_gguf_arr_str(v, i), max_s);
            af_gguf_writer_add_arr_str(w, key, (const char *const *)s, n);
            for (uint64_t i = 0; i < n; i++) free(s[i]);
            free(s);
        } else if (v->arr_type != AF_GGUF_ARRAY) {
            af_gguf_writer_add_arr(w, key, v->arr_type, v->arr_data, n); /* host is little-endian */
        } else if (v->arr_bytes < 4096) {
            af_gguf_enc e = {0};
            af_gguf_enc_bytes(&e, v->arr_data - 12, (size_t)v->arr_bytes + 12);
            af_gguf_writer_add_raw(w, key, AF_GGUF_ARRAY, &e, false);
            af_gguf_enc_free(&e);
        }
        break;
    }
    default: break;
    }
    free(key);
}

static int slice(const char *model_path, const char *out_dir, const char *name) {
    af_gguf *g;
    if (af_gguf_open(model_path, &g) != AF_OK) return 1;
    af_gguf_writer *w;
    af_gguf_writer_new(&w);
    for (uint64_t i = 0; i < g->n_kv; i++) copy_kv(w, &g->kv[i], 16, 2048);
    static uint8_t zeros[4096];
    for (uint64_t i = 0; i < g->n_tensors && i < 8; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        int64_t ne[2] = {(int64_t)af_type_block_size(t->type), 1};
        af_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims >= 2 ? 2 : 1, ne, zeros, af_type_block_bytes(t->type));
    }
    int rc = save(out_dir, name, w);
    af_gguf_writer_free(w);
    af_gguf_close(g);
    return rc;
}

/* Tokenizer keys with the first n tokens (and the merges among them). */
static int vocab(const char *model_path, const char *out_dir, const char *name, uint64_t n) {
    af_gguf *g;
    af_tokenizer *tok;
    if (af_gguf_open(model_path, &g) != AF_OK || af_tokenizer_load(g, &tok) != AF_OK) return 1;
    af_gguf_writer *w;
    af_gguf_writer_new(&w);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const af_gguf_kv *kv = &g->kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) {
            if (af_gguf_str_eq(kv->key, "general.architecture")) copy_kv(w, kv, 0, 64);
            continue;
        }
        if (af_gguf_str_eq(kv->key, "tokenizer.ggml.merges")) {
            const af_gguf_value *mv = &kv->val;
            char **keep = calloc(mv->arr_n, sizeof *keep);
            uint64_t nk = 0;
            for (uint64_t m = 0; m < mv->arr_n && m < 20000; m++) {
                af_gguf_str s = af_gguf_arr_str(mv, m);
                const char *sp = memchr(s.ptr + 1, ' ', (size_t)s.len - 1);
                if (!sp) continue;
                size_t ll = (size_t)(sp - s.ptr), rl = (size_t)s.len - ll - 1;
                char cat[256];
                if (ll + rl >= sizeof cat) continue;
                memcpy(cat, s.ptr, ll);
                memcpy(cat + ll, sp + 1, rl);
                int32_t a = af_tokenizer_find(tok, s.ptr, ll), b = af_tokenizer_find(tok, sp + 1, rl),
                        c = af_tokenizer_find(tok, cat, ll + rl);
                if (a >= 0 && b >= 0 && c >= 0 && (uint64_t)a < n && (uint64_t)b < n && (uint64_t)c < n)
                    keep[nk++] = cstr(s, 256);
            }
            af_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)keep, nk);
            for (uint64_t k = 0; k < nk; k++) free(keep[k]);
            free(keep);
            continue;
        }
        copy_kv(w, kv, n, 4096);
    }
    int rc = save(out_dir, name, w);
    af_gguf_writer_free(w);
    af_tokenizer_free(tok);
    af_gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_seeds MODEL_DIR CORPUS_DIR\n");
        return 2;
    }
    char p[1024], d[1024];
    int rc = 0;
    static const struct { const char *file, *tag; uint64_t n; } models[] = {
        {"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", 600}, {"gemma-3-270m-Q4_K_M.gguf", "gemma3", 1200}};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", argv[1], models[i].file);
        char name[128];
        snprintf(d, sizeof d, "%s/gguf", argv[2]);
        snprintf(name, sizeof name, "%s-slice.gguf", models[i].tag);
        rc |= slice(p, d, name);
        snprintf(d, sizeof d, "%s/gguf_tok", argv[2]);
        snprintf(name, sizeof name, "%s-vocab.gguf", models[i].tag);
        rc |= vocab(p, d, name, models[i].n);
    }
    for (int k = 0; k < 2; k++) {
        uint8_t *buf;
        size_t len;
        if (fz_tok_synth(k, &buf, &len) != AF_OK) return 1;
        snprintf(p, sizeof p, "%s/gguf_tok/synth-%s.gguf", argv[2], k ? "spm" : "bpe");
        FILE *fp = fopen(p, "wb");
        if (!fp) return 1;
        fwrite(buf, 1, len, fp);
        fclose(fp);
        free(buf);
        printf("%s: %zu bytes\n", p, len);
    }
    if (rc) fprintf(stderr, "make_seeds: %s\n", af_last_error());
    return rc;
}
