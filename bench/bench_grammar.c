/*
 * bench_grammar.c — the cost of constrained decoding's logit mask (src/serve/grammar_mask.c) per
 * decode step, on a model's real vocabulary: a realistic structured answer (a customer record of 8
 * fields with a nested object, an array and a sentence of free text, indented by 2 spaces, as models
 * write it) is tokenized by the model's tokenizer and walked token by token; at each step the mask
 * of the state is computed by srv_gstate_mask_simple (one copy of the state and a feed per token
 * whose first byte can come next) and by srv_gstate_mask (the indexed vocabulary), REPS times
 * interleaved, and the two masks are compared (they must be equal at every step, else exit 1).
 * Reported: the vocabulary, the index's build time (once per vocabulary), and per step the median
 * over the repetitions of the mean time of each mask, for all steps and split into steps inside a
 * string and the others. Compare with one decode step of the model (`afinar generate`'s ms/token).
 *
 * Build and run (from the repository root):
 *   make build/bench_grammar
 *   build/bench_grammar models/gemma-3-270m-Q4_K_M.gguf [REPS=5]
 */
#include "afinar.h"
#include "serve/grammar.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},\"email\":{\"type\":\"string\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\"}},\"required\":[\"street\",\"city\"]},"
    "\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"},"
    "\"tier\":{\"enum\":[\"free\",\"pro\",\"enterprise\"]},\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"address\",\"active\"]}";

static const char *const DOC =
    "{\n"
    "  \"name\": \"Margaret Okonkwo-Larsen\",\n"
    "  \"age\": 47,\n"
    "  \"email\": \"m.okonkwo@example.org\",\n"
    "  \"tags\": [\"priority\", \"returning customer\", \"newsletter\"],\n"
    "  \"address\": {\n"
    "    \"street\": \"14 Rue des Petites Écuries\",\n"
    "    \"city\": \"Paris\",\n"
    "    \"zip\": \"75010\"\n"
    "  },\n"
    "  \"score\": 8.75,\n"
    "  \"active\": true,\n"
    "  \"tier\": \"enterprise\",\n"
    "  \"notes\": \"Called on 3 March about a delayed delivery of two desk lamps; offered a 10% discount "
    "on the next order, which she accepted. Prefers to be contacted by e-mail in the afternoon.\"\n"
    "}";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmpd);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL [REPS=5]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 100) {
        fprintf(stderr, "bench_grammar: REPS must be 1..100\n");
        return 2;
    }
    af_model *model = NULL;
    if (af_model_load(NULL, argv[1], &model) != AF_OK) {
        fprintf(stderr, "bench_grammar: %s: %s\n", argv[1], af_last_error());
        return 1;
    }
    const af_tokenizer *tok = af_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "bench_grammar: %s has no tokenizer\n", argv[1]);
        return 1;
    }
    double t0 = now();
    srv_vocab *v = srv_vocab_new(tok, NULL);
    const double t_vocab = now() - t0;
    t0 = now();
    const int idx_ok = v && srv_vocab_build_index(v);
    const double t_index = now() - t0;
    cJSON *sc = cJSON_Parse(SCHEMA);
    srv_grammar *g = NULL;
    srv_err err;
    memset(&err, 0, sizeof err);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (!idx_ok || !sc || !srv_grammar_compile(sc, "schema", &g, &err) ||
        af_tokenize(tok, DOC, strlen(DOC), 0, 0, &ids, &n_ids) != AF_OK) {
        fprintf(stderr, "bench_grammar: setup failed: %s\n", err.message[0] ? err.message : "out of memory");
        return 1;
    }
    const int32_t V = v->n;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    double *t_simple = calloc((size_t)reps * 3, sizeof(double)), *t_fast = calloc((size_t)reps * 3, sizeof(double));
    int n_str = 0, bad = 0;
    long allowed_sum = 0;
    for (int r = 0; r < reps && !bad; r++) {
        srv_gstate *w = srv_gstate_new(g);
        double ts[3] = {0}, tf[3] = {0}; /* all steps, in a string, others */
        n_str = 0;
        allowed_sum = 0;
        for (size_t i = 0; i <= n_ids && !bad; i++) { /* the step after the last token: the end */
            const int in_str = srv_gstate_in_string(w);
            n_str += in_str;
            for (int32_t k = 0; k < V; k++) a[k] = b[k] = 0;
            double s0 = now();
            const int32_t na = srv_gstate_mask_simple(w, v, a, V);
            double s1 = now();
            const int32_t nb = srv_gstate_mask(w, v, b, V);
            double s2 = now();
            ts[0] += s1 - s0, tf[0] += s2 - s1;
            ts[in_str ? 1 : 2] += s1 - s0, tf[in_str ? 1 : 2] += s2 - s1;
            allowed_sum += na;
            int same = na == nb;
            for (int32_t k = 0; k < V; k++) same &= isfinite(a[k]) == isfinite(b[k]);
            if (!same) {
                fprintf(stderr, "bench_grammar: the masks differ at step %zu\n", i);
                bad = 1;
            }
            if (i == n_ids) break;
            char piece[512];
            const int k = af_token_to_bytes(tok, ids[i], 0, piece, sizeof piece);
            if (k < 0 || k > (int)sizeof piece || !isfinite(a[ids[i]]) || !srv_gstate_feed(w, piece, (size_t)k)) {
                fprintf(stderr, "bench_grammar: the document's token %zu is refused\n", i);
                bad = 1;
            }
        }
        if (!bad && !srv_gstate_can_end(w)) {
            fprintf(stderr, "bench_grammar: the document is not complete\n");
            bad = 1;
        }
        const int n_steps = (int)n_ids + 1, n_other = n_steps - n_str;
        t_simple[r] = ts[0] / n_steps, t_fast[r] = tf[0] / n_steps;
        t_simple[reps + r] = n_str ? ts[1] / n_str : 0, t_fast[reps + r] = n_str ? tf[1] / n_str : 0;
        t_simple[2 * reps + r] = n_other ? ts[2] / n_other : 0, t_fast[2 * reps + r] = n_other ? tf[2] / n_other : 0;
        srv_gstate_free(w);
    }
    if (!bad) {
        printf("model: %s\nvocabulary: %d tokens; srv_vocab_new %.1f ms (index included), the index alone %.1f ms (once per vocabulary)\n", argv[1],
               V, 1e3 * t_vocab, 1e3 * t_index);
        printf("document: %zu bytes, %zu tokens, %zu + 1 mask steps (%d inside a string); mean allowed tokens per step: "
               "%.0f\n",
               strlen(DOC), n_ids, n_ids, n_str, (double)allowed_sum / (double)(n_ids + 1));
        static const char *const what[3] = {"all steps", "inside a string", "other steps"};
        printf("ms per step (median of %d):  simple     fast   speed-up\n", reps);
        for (int k = 0; k < 3; k++) {
            const double s = median(t_simple + k * reps, reps), f = median(t_fast + k * reps, reps);
            printf("  %-16s         %8.3f %8.3f   %6.1fx\n", what[k], 1e3 * s, 1e3 * f, f > 0 ? s / f : 0);
        }
    }
    free(a);
    free(b);
    free(t_simple);
    free(t_fast);
    free(ids);
    srv_grammar_free(g);
    cJSON_Delete(sc);
    srv_vocab_free(v);
    af_model_free(model);
    return bad;
}
