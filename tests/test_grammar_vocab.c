/*
 * test_grammar_vocab.c — the fast grammar mask (srv_gstate_mask over an indexed vocabulary,
 * src/serve/grammar_mask.c) equals the reference mask (srv_gstate_mask_simple: every token fed
 * alone) at every step, on the real vocabularies of SmolLM2 (49,152 tokens) and Gemma 3 270M
 * (262,144 tokens; both from scripts/fetch_models.sh, skipped when absent):
 *  - a realistic document of a schema (nested object, array, enum, numbers, free text with an
 *    accented character and escapes), walked token by token as the model's tokenizer splits it;
 *  - random walks (seeded) that draw among the allowed tokens, for that schema, for any JSON object
 *    and for a forced tool call with its prefix and suffix literals on the vocabulary that keeps
 *    the call-marker control tokens (srv_tools_marker);
 *  - the same allowed count, and the padding rows (ids >= the vocabulary) masked.
 */
#include "testlib.h"

#include "serve/grammar.h"
#include "serve/tools.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]},\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"},"
    "\"tier\":{\"enum\":[\"free\",\"pro\",null]},\"notes\":{\"type\":\"string\"}},\"required\":[\"name\",\"age\"]}";

static const char *const DOC = "{\n  \"name\": \"Zoë \\\"Z\\\" Okafor\",\n  \"age\": 31,\n  \"tags\": [\"vip\", \"a\\u00e9b\"],\n"
                               "  \"address\": {\"city\": \"Lyon\", \"zip\": \"69001\"},\n  \"score\": -2.5e-3,\n"
                               "  \"active\": false,\n  \"tier\": null,\n  \"notes\": \"Paid 12€ — twice.\\nThanks!\"\n}";

/* Both masks of st over v (with 8 padding rows): 1 when they agree. *allowed: the allowed ids, *n_allowed. */
static int masks_agree(const srv_gstate *st, const srv_vocab *v, float *a, float *b, int32_t *allowed, int32_t *n_allowed) {
    const int32_t n = v->n + 8;
    for (int32_t i = 0; i < n; i++) a[i] = b[i] = 1.0f;
    const int32_t na = srv_gstate_mask(st, v, a, n), nb = srv_gstate_mask_simple(st, v, b, n);
    int same = na == nb;
    *n_allowed = 0;
    for (int32_t i = 0; i < n; i++) {
        same &= isfinite(a[i]) == isfinite(b[i]);
        if (isfinite(a[i])) allowed[(*n_allowed)++] = i;
        if (i >= v->n) same &= !isfinite(a[i]);
    }
    return same && *n_allowed == na;
}

/* Random walks of `steps` tokens drawn among the allowed ones; returns the steps where the masks differ. */
static int random_walks(const srv_grammar *g, const srv_vocab *v, int walks, int steps, uint64_t seed, int *n_steps) {
    float *a = malloc(sizeof(float) * ((size_t)v->n + 8)), *b = malloc(sizeof(float) * ((size_t)v->n + 8));
    int32_t *allowed = malloc(sizeof(int32_t) * ((size_t)v->n + 8));
    int diff = 0;
    for (int w = 0; w < walks; w++) {
        srv_gstate *st = srv_gstate_new(g);
        for (int s = 0; s < steps; s++) {
            int32_t n_allowed = 0;
            diff += !masks_agree(st, v, a, b, allowed, &n_allowed);
            (*n_steps)++;
            if (!n_allowed) break;
            const int32_t id = allowed[tl_rand_u64(&seed) % (uint64_t)n_allowed];
            if (v->eog[id]) break;
            if (!srv_gstate_feed(st, v->bytes + v->off[id], v->off[id + 1] - v->off[id])) {
                diff++; /* an allowed token refused */
                break;
            }
        }
        srv_gstate_free(st);
    }
    free(a);
    free(b);
    free(allowed);
    return diff;
}

static srv_grammar *compile(const char *text) {
    cJSON *j = cJSON_Parse(text);
    srv_grammar *g = NULL;
    srv_err e;
    memset(&e, 0, sizeof e);
    if (!j || !srv_grammar_compile(j, "schema", &g, &e)) g = NULL;
    cJSON_Delete(j);
    return g;
}

static void check_model(const char *file) {
    char path[512];
    const char *dir = getenv("AF_MODEL_DIR");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "models", file);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tl_skip("%s not found: the fast mask on its real vocabulary is not checked (scripts/fetch_models.sh fetches it)",
                path);
        return;
    }
    af_model *m = NULL;
    if (!CHECK(af_model_load(T_CTX, path, &m) == AF_OK, "load %s: %s", path, af_last_error())) return;
    const af_tokenizer *tok = af_model_tokenizer(m);
    srv_vocab *v = srv_vocab_new(tok, NULL), *vt = srv_vocab_new(tok, srv_tools_marker);
    srv_grammar *g = compile(SCHEMA), *any = compile("{\"type\":\"object\"}"), *call = compile(SCHEMA);
    if (!CHECK(v && vt && v->idx && vt->idx && g && any && call, "%s: vocabularies and grammars", file)) goto done;
    CHECK(srv_grammar_set_affixes(call, "<tool_call>\n", "\n</tool_call>"), "affixes");

    /* the document, token by token as the tokenizer splits it */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK(af_tokenize(tok, DOC, strlen(DOC), 0, 0, &ids, &n_ids) == AF_OK, "tokenize the document");
    float *a = malloc(sizeof(float) * ((size_t)v->n + 8)), *b = malloc(sizeof(float) * ((size_t)v->n + 8));
    int32_t *allowed = malloc(sizeof(int32_t) * ((size_t)v->n + 8));
    srv_gstate *st = srv_gstate_new(g);
    int diff = 0, refused = -1;
    for (size_t i = 0; i <= n_ids; i++) {
        int32_t n_allowed = 0;
        diff += !masks_agree(st, v, a, b, allowed, &n_allowed);
        if (i == n_ids) break;
        if (!isfinite(a[ids[i]]) || !srv_gstate_feed(st, v->bytes + v->off[ids[i]], v->off[ids[i] + 1] - v->off[ids[i]])) {
            refused = (int)i;
            break;
        }
    }
    CHECK(refused < 0 && srv_gstate_can_end(st), "%s: the document's %zu tokens are allowed one by one (refused at %d)",
          file, n_ids, refused);
    CHECK(diff == 0, "%s: fast mask == simple mask at each of the document's %zu + 1 steps (%d differ)", file, n_ids, diff);
    srv_gstate_free(st);
    free(a);
    free(b);
    free(allowed);
    free(ids);

    /* random walks */
    const int walks = tl_sanitized() ? 1 : 3, steps = tl_sanitized() ? 15 : 40;
    int n_steps = 0;
    diff = random_walks(g, v, walks, steps, 7, &n_steps);
    diff += random_walks(any, v, walks, steps, 11, &n_steps);
    diff += random_walks(call, vt, walks, steps, 13, &n_steps);
    CHECK(diff == 0, "%s: fast mask == simple mask over %d steps of random walks (schema, any object, forced call "
          "with the control-token vocabulary): %d differ", file, n_steps, diff);
done:
    srv_grammar_free(g);
    srv_grammar_free(any);
    srv_grammar_free(call);
    srv_vocab_free(v);
    srv_vocab_free(vt);
    af_model_free(m);
}

int main(void) {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    check_model("gemma-3-270m-Q4_K_M.gguf");
    return tl_finish("test_grammar_vocab");
}
