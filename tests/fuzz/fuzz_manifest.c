/*
 * fuzz_manifest.c — libFuzzer target for the manifest.json reader (src/formats/manifest.c
 * af_manifest_parse: the sizes and SHA-256 of an adapter's or checkpoint's files). The input is the
 * whole manifest text. Oracles after a successful parse: 1..AF_MANIFEST_MAX_FILES entries, each a
 * plain, distinct, NUL-terminated file name (no '/', not hidden, < 256 bytes) with a byte count
 * of at most 2^53; a failed parse leaves no entry. Returns af_manifest_parse's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/manifest.h"

af_status fz_manifest_one(const uint8_t *data, size_t size) {
    static af_manifest m; /* 20 KB: not on the stack */
    af_status st = af_manifest_parse((const char *)data, size, "fuzz/manifest.json", &m);
    if (st != AF_OK) {
        FZ_ASSERT(m.n == 0);
        af_clear_error();
        return st;
    }
    FZ_ASSERT(m.n >= 1 && m.n <= AF_MANIFEST_MAX_FILES);
    for (int32_t i = 0; i < m.n; i++) {
        const af_manifest_entry *e = &m.files[i];
        const size_t l = strnlen(e->name, sizeof e->name);
        FZ_ASSERT(l > 0 && l < sizeof e->name && e->name[0] != '.' && !memchr(e->name, '/', l));
        FZ_ASSERT(e->bytes <= (1ull << 53));
        for (int32_t k = 0; k < i; k++) FZ_ASSERT(strcmp(m.files[k].name, e->name) != 0);
    }
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_manifest_one(data, size);
    return 0;
}
#endif
