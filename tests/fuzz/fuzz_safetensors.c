/*
 * fuzz_safetensors.c — libFuzzer target for the SafeTensors reader (src/formats/safetensors.c):
 * 8-byte header length, JSON header (tensor entries, __metadata__), offsets and coverage checks.
 * The input is the whole file, opened with af_st_open_memory (the same parse_image as af_st_open).
 * After a successful open: every tensor by index and by name, the metadata entries and lookups,
 * and af_st_read_f32 of every tensor of a readable dtype. Oracles: names unique and found again,
 * each tensor's bytes inside the input, tensors contiguous. Returns af_st_open_memory's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/safetensors.h"

af_status fz_safetensors_one(const uint8_t *data, size_t size) {
    af_st_file *f = NULL;
    af_status st = af_st_open_memory(data, size, "fuzz.safetensors", &f);
    if (st != AF_OK) return st;
    size_t n = af_st_count(f);
    uint64_t prev_end = 0;
    for (size_t i = 0; i < n; i++) {
        const af_st_tensor *t = af_st_tensor_at(f, i);
        FZ_ASSERT(t != NULL && t->name != NULL);
        FZ_ASSERT(af_st_find(f, t->name) == t);
        FZ_ASSERT(t->begin == prev_end && t->end >= t->begin);
        prev_end = t->end;
        FZ_ASSERT(t->data >= data && t->data <= data + size && t->end - t->begin <= (uint64_t)(data + size - t->data));
        FZ_ASSERT(t->n_dims >= 0 && t->n_dims <= AF_ST_MAX_DIMS);
        if (t->dtype == AF_ST_F32 || t->dtype == AF_ST_F16 || t->dtype == AF_ST_BF16 || t->dtype == AF_ST_F64) {
            FZ_ASSERT(t->n_elem <= size); /* >= 2 bytes per element and all inside the input */
            float *dst = malloc((size_t)(t->n_elem ? t->n_elem : 1) * sizeof *dst);
            if (dst) {
                FZ_ASSERT(af_st_read_f32(f, t, dst, (size_t)t->n_elem) == AF_OK);
                FZ_ASSERT(af_st_read_f32(f, t, dst, (size_t)t->n_elem + 1) == AF_ERR_INVALID_ARG);
                free(dst);
            }
        } else {
            float x;
            FZ_ASSERT(af_st_read_f32(f, t, &x, (size_t)t->n_elem) != AF_OK);
        }
    }
    FZ_ASSERT(af_st_tensor_at(f, n) == NULL);
    for (size_t i = 0; i < af_st_meta_count(f); i++) {
        const char *k = NULL, *v = NULL;
        af_st_meta_at(f, i, &k, &v);
        FZ_ASSERT(k && v);
        FZ_ASSERT(af_st_meta_get(f, k) != NULL);
    }
    (void)af_st_find(f, "no.such.tensor");
    (void)af_st_meta_get(f, "format");
    af_clear_error();
    af_st_close(f);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_safetensors_one(data, size);
    return 0;
}
#endif
