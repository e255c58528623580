/* sample.c — token sampling: greedy, top-k, temperature, top-p (nucleus; Holtzman et al. 2020).
 * Order of filters as llama.cpp's default chain: top-k -> temperature -> top-p -> draw. */
#include "core/core.h"

#include <math.h>
#include <stdlib.h>

uint64_t af_rng_seed(uint64_t seed) { return seed ^ 0x853C49E6748FEA9Bull; }

void af_sampling_default(af_sampling *p) { *p = (af_sampling){0.8f, 40, 0.95f, 42}; }

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct cand {
    float logit;
    int32_t id;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Keep the k best candidates with a min-heap (O(n log k)); returns the count kept. */
static int32_t select_top_k(const float *logits, int32_t n, int32_t k, cand *heap) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        cand x = {logits[i], i};
        if (m < k) {
            int32_t j = m++;
            while (j > 0 && cand_cmp(&heap[(j - 1) / 2], &x) < 0) { /* parent better than x: move down */
                heap[j] = heap[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            heap[j] = x;
        } else if (cand_cmp(&x, &heap[0]) < 0) { /* x better than the worst kept */
            int32_t j = 0;
            for (;;) {
                int32_t l = 2 * j + 1, r = l + 1, w = j;
                const cand *wc = &x;
                if (l < m && cand_cmp(&heap[l], wc) > 0) { w = l; wc = &heap[l]; }
                if (r < m && cand_cmp(&heap[r], wc) > 0) { w = r; }
                if (w == j) break;
                heap[j] = heap[w];
                j = w;
            }
            heap[j] = x;
        }
    }
    return m;
}

int32_t af_sample(const float *logits, int32_t n, const af_sampling *p, uint64_t *rng) {
    if (!p || p->temperature <= 0 || p->top_k == 1) return argmax(logits, n);
    cand *c = malloc(sizeof(cand) * (size_t)n);
    double *pr = malloc(sizeof(double) * (size_t)n);
    if (!c || !pr) { /* out of memory: degrade to greedy rather than fail */
        free(c);
        free(pr);
        return argmax(logits, n);
    }
    int32_t k;
    if (p->top_k > 0 && p->top_k < n) {
        k = select_top_k(logits, n, p->top_k, c);
    } else {
        /* No top-k: keep candidates within 30 nats (after temperature) of the best; the dropped ones
         * carry at most n * e^-30 < 1e-8 of the probability mass, so this is exact in practice. */
        float maxl = logits[argmax(logits, n)];
        k = 0;
        for (int32_t i = 0; i < n; i++)
            if (((double)logits[i] - maxl) / p->temperature > -30.0) c[k++] = (cand){logits[i], i};
    }
    qsort(c, (size_t)k, sizeof(cand), cand_cmp);
    double maxl = c[0].logit, sum = 0;
    for (int32_t i = 0; i < k; i++) {
        pr[i] = exp(((double)c[i].logit - maxl) / p->temperature);
        sum += pr[i];
    }
    if (p->top_p > 0 && p->top_p < 1) {
        double cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += pr[i] / sum;
            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }
        sum = 0;
        for (int32_t i = 0; i < k; i++) sum += pr[i];
    }
    double r = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    int32_t id = c[k - 1].id;
    for (int32_t i = 0; i < k; i++) {
        r -= pr[i];
        if (r < 0) {
            id = c[i].id;
            break;
        }
    }
    free(pr);
    free(c);
    return id;
}
