/*
 * ref_reader.h — bounds-checked reading of the binary reference fixtures of tests/ref/ (little-endian
 * u32 counts, then raw arrays) and the argmax of a logit row; shared by test_model.c and test_hf.c.
 * (tests/peft_fixture.h reads the PEFT fixtures, which abort on truncation instead.)
 */
#ifndef AF_TEST_REF_READER_H
#define AF_TEST_REF_READER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct rd {
    const unsigned char *p, *end;
} rd;

/* Next u32 into *v; 0 when fewer than 4 bytes are left. */
static inline int rd_u32(rd *r, uint32_t *v) {
    if (r->end - r->p < 4) return 0;
    memcpy(v, r->p, 4);
    r->p += 4;
    return 1;
}

/* The next n bytes (borrowed), or NULL when fewer are left. */
static inline const void *rd_bytes(rd *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) return NULL;
    const void *q = r->p;
    r->p += n;
    return q;
}

/* Index of the largest of x[0..n) (the lowest index on ties: greedy decoding's rule). */
static inline int32_t argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#endif /* AF_TEST_REF_READER_H */
