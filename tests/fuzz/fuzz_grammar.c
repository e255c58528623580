/*
 * fuzz_grammar.c — libFuzzer target for the "response_format" grammar of `afinar serve`
 * (src/serve/grammar.c: srv_grammar_compile, srv_gstate_feed / _can_end / _mask).
 * Input: a JSON schema, a NUL byte, then a document. Oracles: a refused schema gives a 400 with a
 * message and a param starting with "schema"; with a compiled schema, the document is fed byte by
 * byte, and whenever the bytes fed so far are a complete document (srv_gstate_can_end) they parse as
 * JSON (cJSON); at every position the mask over a vocabulary of the 256 single bytes plus an end
 * token allows exactly the bytes the matcher accepts, and the end token exactly when can_end; and
 * the fast mask over an indexed vocabulary of those bytes plus pieces of the document (shared
 * prefixes, multi-byte tokens) equals the simple mask (srv_gstate_mask_simple). The same again
 * with two alternatives of a literal prefix, the document's first bytes and a variant of them.
 * Returns AF_OK (schema compiled) or AF_ERR_FORMAT.
 */
#include "fuzz/fuzz_common.h"
#include "serve/grammar.h"

#include <cJSON.h>
#include <math.h>

static srv_vocab *fz_byte_vocab(void) {
    static srv_vocab v;
    static uint32_t off[258];
    static char bytes[256];
    static uint8_t eog[257];
    if (!v.n) {
        for (int i = 0; i < 256; i++) bytes[i] = (char)i, off[i] = (uint32_t)i;
        off[256] = off[257] = 256;
        eog[256] = 1;
        v = (srv_vocab){257, off, bytes, eog, NULL};
    }
    return &v;
}

/* The 256 bytes, up to 96 pieces of doc[0..dl) (1 to 6 bytes from every 3rd byte) and an end token,
 * indexed (srv_vocab_free). NULL when out of memory. */
static srv_vocab *fz_doc_vocab(const char *doc, size_t dl) {
    srv_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->off = malloc(sizeof(uint32_t) * (256 + 96 + 2));
    v->eog = calloc(256 + 96 + 1, 1);
    v->bytes = malloc(256 + 96 * 6);
    if (!v->off || !v->eog || !v->bytes) {
        srv_vocab_free(v);
        return NULL;
    }
    uint32_t len = 0;
    for (int i = 0; i < 256; i++) v->off[v->n++] = len, v->bytes[len++] = (char)i;
    for (size_t i = 0; i < dl && v->n < 256 + 96; i += 3) {
        const size_t k = 1 + i % 6 < dl - i ? 1 + i % 6 : dl - i;
        v->off[v->n++] = len;
        memcpy(v->bytes + len, doc + i, k);
        len += (uint32_t)k;
    }
    v->eog[v->n] = 1;
    v->off[v->n++] = len;
    v->off[v->n] = len;
    if (!srv_vocab_build_index(v)) {
        srv_vocab_free(v);
        return NULL;
    }
    return v;
}

/* Feed doc[0..dl) to g byte by byte (the first `pre` bytes are its literal prefix), checking the
 * masks on the way (every 7th byte). */
static void fz_grammar_walk(const srv_grammar *g, const char *doc, size_t dl, size_t pre, srv_vocab *dv) {
    srv_gstate *st = srv_gstate_new(g), *t = srv_gstate_new(g);
    const srv_vocab *v = fz_byte_vocab();
    float lg[257], fa[256 + 96 + 1], fb[256 + 96 + 1];
    for (size_t i = 0; st && t && i <= dl && i < 512; i++) {
        if (srv_gstate_can_end(st) && i >= pre) {
            cJSON *d = cJSON_ParseWithLength(doc + pre, i - pre);
            FZ_ASSERT(d != NULL);
            cJSON_Delete(d);
        }
        if (i % 7 == 0) { /* the mask agrees with feeding each byte */
            for (int k = 0; k < 257; k++) lg[k] = 0;
            srv_gstate_mask(st, v, lg, 257);
            for (int b = 0; b < 256; b++) {
                srv_gstate_copy(t, st);
                const char c = (char)b;
                FZ_ASSERT(srv_gstate_feed(t, &c, 1) == isfinite(lg[b]));
            }
            FZ_ASSERT(srv_gstate_can_end(st) == isfinite(lg[256]));
            if (dv) {
                for (int k = 0; k < dv->n; k++) fa[k] = fb[k] = 0;
                FZ_ASSERT(srv_gstate_mask(st, dv, fa, dv->n) == srv_gstate_mask_simple(st, dv, fb, dv->n));
                for (int k = 0; k < dv->n; k++) FZ_ASSERT(isfinite(fa[k]) == isfinite(fb[k]));
            }
        }
        if (i == dl || !srv_gstate_feed(st, doc + i, 1)) break;
    }
    srv_gstate_free(st);
    srv_gstate_free(t);
}

af_status fz_grammar_one(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t sl = nul ? (size_t)(nul - data) : size;
    const char *doc = nul ? (const char *)nul + 1 : "";
    const size_t dl = nul ? size - sl - 1 : 0;
    cJSON *sc = cJSON_ParseWithLength((const char *)data, sl);
    if (!sc) return AF_ERR_FORMAT;
    srv_grammar *g = NULL;
    srv_err e;
    memset(&e, 0, sizeof e);
    const int ok = srv_grammar_compile(sc, "schema", &g, &e);
    cJSON_Delete(sc);
    if (!ok) {
        FZ_ASSERT(e.status == 400 && e.message[0] && !strncmp(e.param, "schema", 6));
        return AF_ERR_FORMAT;
    }
    srv_vocab *dv = fz_doc_vocab(doc, dl);
    fz_grammar_walk(g, doc, dl, 0, dv);
    /* again with two alternatives of a literal prefix: the document's first k bytes, and the same
     * with another last byte (srv_grammar_set_prefixes; mistral-v7's forced calls) */
    const size_t k = dl >= 2 ? 1 + (size_t)(unsigned char)doc[0] % (dl < 6 ? dl - 1 : 5) : 0;
    if (k && !memchr(doc, 0, k)) {
        char p0[8], p1[8];
        memcpy(p0, doc, k), p0[k] = 0;
        memcpy(p1, doc, k), p1[k - 1] = doc[k - 1] == 1 ? 2 : 1, p1[k] = 0;
        const char *alt[2] = {p1, p0};
        FZ_ASSERT(srv_grammar_set_prefixes(g, alt, 2, NULL));
        fz_grammar_walk(g, doc, dl, k, dv);
    }
    srv_vocab_free(dv);
    srv_grammar_free(g);
    return AF_OK;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_grammar_one(data, size);
    return 0;
}
#endif
