/*
 * peft_fixture.h — what the PEFT parity tests (test_peft_parity.c: classification,
 * test_peft_lm_parity.c: causal LM) share: a bounds-checked little-endian reader of the binary
 * fixtures written by tests/ref/make_peft_ref.py / make_peft_lm_ref.py, and the deterministic LoRA
 * initialisation formulas both scripts use (float64, rounded to float32).
 */
#ifndef AF_TESTS_PEFT_FIXTURE_H
#define AF_TESTS_PEFT_FIXTURE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct rd {
    const unsigned char *p, *end;
} rd;
/* The next n bytes, or NULL (reader unchanged) past the end. */
static inline const void *take(rd *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) return NULL;
    const void *q = r->p;
    r->p += n;
    return q;
}
/* Next u32 (0 past the end) / f64 (NaN past the end); memcpy: fixtures need not be aligned. */
static inline uint32_t u32(rd *r) {
    const void *p = take(r, 4);
    uint32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}
static inline double f64(rd *r) {
    const void *p = take(r, 8);
    double v = NAN;
    if (p) memcpy(&v, p, 8);
    return v;
}

/* lora_A [r, in] entry (j, i) and lora_B [out, r] entry (o, j) of layer l, projection p. */
static inline float lora_a(int l, int p, int64_t j, int64_t i) {
    return (float)(0.02 * sin(0.37 * l + 1.1 * p + 0.71 * (double)j + 0.0173 * (double)i + 0.0029 * ((double)i * (double)j) + 0.3));
}
static inline float lora_b(int l, int p, int64_t o, int64_t j) {
    return (float)(0.01 * cos(0.29 * l + 0.83 * p + 1.3 * (double)j + 0.017 * (double)o + 0.1));
}

#endif /* AF_TESTS_PEFT_FIXTURE_H */
