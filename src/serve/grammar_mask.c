/* grammar_mask.c — the logit mask of constrained decoding (grammar.h) over a tokenizer's
 * vocabulary: the vocabulary's byte strings and the fast mask over an index built once per
 * vocabulary (the reference mask, every token fed alone from a copy of the state: grammar.c).
 *
 * The fast mask visits the tokens in the byte order of their texts (a sorted list with the length of
 * each one's common prefix with the one before: a trie walked depth first without its nodes). It
 * keeps the matcher's state after each byte of the last token it fed (stk[p]: after p bytes), so a
 * token sharing p bytes with that one starts from stk[p] (a shared prefix is fed once), and when
 * that token was refused at byte p every following token sharing its first p + 1 bytes is refused
 * without a feed (a refused prefix prunes its subtree). Inside a string (srv_gstate_in_string) a
 * "plain" token — complete UTF-8 characters with no '"', '\\' or control byte — is accepted without
 * a feed: from a string's character boundary the matcher reads such bytes as text whatever the
 * frames below, and stays at a character boundary. Each shortcut answers what feeding the token's
 * bytes from a copy of the state answers, so the mask is srv_gstate_mask_simple's, bit for bit. */
#include "serve/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tokens in the byte order of their texts. */
typedef struct tok_list {
    int32_t n;
    int32_t *order;        /* [n] the ids, sorted by their bytes (memcmp; a prefix first) */
    uint32_t *start, *len; /* [n] their bytes: v->bytes[start[k] .. start[k] + len[k]) (read in order) */
    uint32_t *lcp;         /* [n] bytes in common with the token before (lcp[0] = 0) */
} tok_list;

struct srv_vocab_index {
    tok_list all;          /* every token with bytes that does not end the generation */
    tok_list rest;         /* those of them that are not plain string text */
    uint64_t *plain;       /* [v->n / 64 + 1] bit id: a plain token (accepted by any srv_gstate_in_string state) */
    uint32_t maxlen;       /* the longest token's bytes */
    int32_t n_out, *out;   /* the other tokens (end-of-generation or without bytes) */
};

static void list_free(tok_list *l) {
    free(l->order);
    free(l->start);
    free(l->len);
    free(l->lcp);
}

static void index_free(srv_vocab_index *x) {
    if (!x) return;
    list_free(&x->all);
    list_free(&x->rest);
    free(x->plain);
    free(x->out);
    free(x);
}

/* ---------------------------------------------------------------- the index */

typedef struct tok_ref {
    const char *p;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int is_plain(const uint64_t *plain, int32_t id) { return (int)((plain[id >> 6] >> (id & 63)) & 1); }

/* The list of the sorted tokens r[0..n) (plain == NULL: all; else those not plain). 0: out of memory. */
static int list_build(tok_list *l, const tok_ref *r, int32_t n, const char *bytes, const uint64_t *plain) {
    l->order = malloc(sizeof(int32_t) * ((size_t)n + 1));
    l->start = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    l->len = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    l->lcp = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    if (!l->order || !l->start || !l->len || !l->lcp) return 0;
    const tok_ref *prev = NULL;
    for (int32_t k = 0; k < n; k++) {
        if (plain && is_plain(plain, r[k].id)) continue;
        uint32_t c = 0;
        if (prev)
            while (c < r[k].len && c < prev->len && r[k].p[c] == prev->p[c]) c++;
        l->order[l->n] = r[k].id;
        l->start[l->n] = (uint32_t)(r[k].p - bytes);
        l->len[l->n] = r[k].len;
        l->lcp[l->n++] = c;
        prev = &r[k];
    }
    return 1;
}

/* The plain bits: a token is plain when it holds no '"' or '\\' and the matcher, inside a string
 * of the schema {"type": "string"}, accepts it and is at a character boundary after it. */
static int mark_plain(const tok_ref *r, int32_t n, uint64_t *plain) {
    cJSON *sc = cJSON_CreateObject();
    srv_grammar *g = NULL;
    srv_err err;
    memset(&err, 0, sizeof err);
    int ok = sc && cJSON_AddStringToObject(sc, "type", "string") && srv_grammar_compile(sc, "schema", &g, &err);
    srv_gstate *s0 = ok ? srv_gstate_new(g) : NULL, *t = s0 ? srv_gstate_clone(s0) : NULL;
    ok = t && srv_gstate_feed(s0, "\"", 1);
    for (int32_t k = 0; ok && k < n; k++) {
        if (memchr(r[k].p, '"', r[k].len) || memchr(r[k].p, '\\', r[k].len)) continue;
        srv_gstate_copy(t, s0);
        if (srv_gstate_feed(t, r[k].p, r[k].len) && srv_gstate_in_string(t))
            plain[r[k].id >> 6] |= (uint64_t)1 << (r[k].id & 63);
    }
    srv_gstate_free(t);
    srv_gstate_free(s0);
    srv_grammar_free(g);
    cJSON_Delete(sc);
    return ok;
}

int srv_vocab_build_index(srv_vocab *v) {
    index_free(v->idx);
    v->idx = NULL;
    srv_vocab_index *x = calloc(1, sizeof *x);
    tok_ref *r = malloc(sizeof *r * ((size_t)v->n + 1));
    int32_t n = 0;
    int ok = x && r && (x->plain = calloc((size_t)v->n / 64 + 1, sizeof(uint64_t))) &&
             (x->out = malloc(sizeof(int32_t) * ((size_t)v->n + 1)));
    for (int32_t i = 0; ok && i < v->n; i++) {
        const uint32_t len = v->off[i + 1] - v->off[i];
        if (v->eog[i] || !len) {
            x->out[x->n_out++] = i;
            continue;
        }
        r[n++] = (tok_ref){v->bytes + v->off[i], len, i};
        if (len > x->maxlen) x->maxlen = len;
    }
    if (ok) qsort(r, (size_t)n, sizeof *r, cmp_tok);
    ok = ok && mark_plain(r, n, x->plain) && list_build(&x->all, r, n, v->bytes, NULL) &&
         list_build(&x->rest, r, n, v->bytes, x->plain);
    free(r);
    if (!ok) {
        index_free(x);
        return 0;
    }
    v->idx = x;
    return 1;
}

/* ---------------------------------------------------------------- the fast mask */

/* The verdicts of the tokens of l as bits of ok_bits (bit id set: allowed; the others untouched).
 * stk: [maxlen + 1] scratch states (the NULL ones made here). 0 when out of memory. */
static int walk_list(const srv_gstate *st, const srv_vocab *v, const tok_list *l, srv_gstate **stk, uint64_t *ok_bits) {
    /* ref: the last token fed; m: bytes it shares with token k (the least lcp since it); fail: the
     * byte at which it was refused (-1: accepted). stk[p] holds the state after its first p bytes
     * up to min(its length, fail). */
    int have_ref = 0;
    int64_t fail = -1;
    uint32_t m = 0;
    for (int32_t k = 0; k < l->n; k++) {
        if (l->lcp[k] < m) m = l->lcp[k];
        if (have_ref && fail >= 0 && (int64_t)m > fail) continue; /* shares the refused prefix */
        const char *b = v->bytes + l->start[k];
        int ok = 1;
        for (uint32_t p = have_ref ? m : 0; p < l->len[k]; p++) {
            if (!stk[p + 1] && !(stk[p + 1] = srv_gstate_clone(st))) return 0;
            srv_gstate_copy(stk[p + 1], p ? stk[p] : st);
            if (!srv_gstate_feed(stk[p + 1], b + p, 1)) {
                ok = 0, fail = p;
                break;
            }
        }
        if (ok) fail = -1, ok_bits[l->order[k] >> 6] |= (uint64_t)1 << (l->order[k] & 63);
        have_ref = 1, m = UINT32_MAX;
    }
    return 1;
}

int32_t srv_gstate_mask(const srv_gstate *st, const srv_vocab *v, float *logits, int32_t n_logits) {
    const srv_vocab_index *x = v->idx;
    const size_t words = (size_t)v->n / 64 + 1;
    srv_gstate **stk = x ? calloc((size_t)x->maxlen + 1, sizeof *stk) : NULL;
    uint64_t *ok_bits = stk ? calloc(words, sizeof(uint64_t)) : NULL;
    int done = ok_bits != NULL;
    if (done && srv_gstate_in_string(st)) { /* the plain tokens are allowed; feed the rest */
        memcpy(ok_bits, x->plain, words * sizeof(uint64_t));
        done = walk_list(st, v, &x->rest, stk, ok_bits);
    } else if (done) {
        done = walk_list(st, v, &x->all, stk, ok_bits);
    }
    if (done && srv_gstate_can_end(st))
        for (int32_t o = 0; o < x->n_out; o++)
            if (v->eog[x->out[o]]) ok_bits[x->out[o] >> 6] |= (uint64_t)1 << (x->out[o] & 63);
    int32_t left = 0;
    if (done) { /* one pass in order over the logits (the verdicts came in the tokens' byte order) */
        for (int32_t i = 0; i < n_logits; i++) {
            if (i < v->n && ((ok_bits[i >> 6] >> (i & 63)) & 1)) left++;
            else logits[i] = -INFINITY; /* refused, or a padding row of the LM head */
        }
    }
    for (uint32_t p = 0; stk && p <= x->maxlen; p++) srv_gstate_free(stk[p]);
    free(stk);
    free(ok_bits);
    return done ? left : srv_gstate_mask_simple(st, v, logits, n_logits);
}

/* ---------------------------------------------------------------- vocabulary */

srv_vocab *srv_vocab_new(const af_tokenizer *tok, int (*keep)(const char *s, size_t n)) {
    const int32_t n = af_tokenizer_vocab_size(tok);
    srv_vocab *v = calloc(1, sizeof *v);
    size_t cap = (size_t)n * 8 + 256, len = 0;
    if (v) {
        v->n = n;
        v->off = malloc(sizeof(uint32_t) * ((size_t)n + 1));
        v->eog = calloc((size_t)n + 1, 1);
        v->bytes = malloc(cap);
    }
    if (!v || !v->off || !v->eog || !v->bytes) {
        srv_vocab_free(v);
        return NULL;
    }
    char piece[256];
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = (uint32_t)len;
        v->eog[i] = (uint8_t)af_token_is_eog(tok, i);
        int k = v->eog[i] ? 0 : af_token_to_bytes(tok, i, 0, piece, sizeof piece);
        if (k == 0 && keep && !v->eog[i]) { /* a control token: allowed when keep says so */
            k = af_token_to_bytes(tok, i, 1, piece, sizeof piece);
            if (k < 0 || k > (int)sizeof piece || !keep(piece, (size_t)k)) k = 0;
        }
        if (k < 0 || k > (int)sizeof piece) k = 0; /* a special token or one longer than a piece: never allowed */
        if (len + (size_t)k > cap) {
            char *t = realloc(v->bytes, cap * 2);
            if (!t) {
                srv_vocab_free(v);
                return NULL;
            }
            v->bytes = t, cap *= 2;
        }
        memcpy(v->bytes + len, piece, (size_t)k);
        len += (size_t)k;
    }
    v->off[n] = (uint32_t)len;
    if (!srv_vocab_build_index(v)) {
        srv_vocab_free(v);
        return NULL;
    }
    return v;
}

void srv_vocab_free(srv_vocab *v) {
    if (!v) return;
    index_free(v->idx);
    free(v->off);
    free(v->bytes);
    free(v->eog);
    free(v);
}
