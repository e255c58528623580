/*
 * spm.c — SentencePiece-style BPE by scores with <0xNN> byte fallback (tokenizer.ggml.model =
 * "llama", Gemma 3), docs/FORMATS.md §6.3.
 *
 * Encoding of one piece of plain text (special tokens were split out by the caller):
 *  1. optional ' ' prefix (tokenizer.ggml.add_space_prefix, first piece only), every ' ' becomes
 *     U+2581 '▁' (HF normalizer Replace(" ", "▁"));
 *  2. one symbol per UTF-8 character;
 *  3. BPE: repeatedly merge the adjacent pair of tokens whose concatenation is a token with the
 *     best priority. This reproduces the Hugging Face fast tokenizer that transformers builds from
 *     such a GGUF (integrations/gguf: merges = every split of every token into two tokens, ranked
 *     by the merged token's score, highest first; for Gemma files by the merged token's position in
 *     the vocabulary, lowest id first, because Gemma's scores do not follow its merge order; then
 *     longer left piece first), ties at equal rank resolved leftmost. (llama.cpp's SPM tokenizer
 *     ranks by score only; it differs from HF on runs of spaces.)
 *     With explicit merges (a tokenizer.json BPE model) the priority is the merge rank of the pair
 *     instead (HF BPE::merge_word: lowest rank first, ties leftmost).
 *  4. a final symbol that is not a token is emitted as byte tokens <0xNN> (uppercase hex), or as
 *     the unknown token when the vocabulary has no byte tokens.
 * Decoding: '▁' -> ' ', <0xNN> -> byte NN, other tokens verbatim.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of a hex digit, or -1. */
static int hexdigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t af_spm_decode_token(const af_tokenizer *t, int32_t id, char *out) {
    const char *s = t->text + t->off[id];
    size_t len = t->off[id + 1] - t->off[id];
    /* Token texts are not NUL-terminated, so the two hex digits are decoded by hand (sscanf would
     * scan on for a NUL past the end of the text buffer). */
    if (t->type[id] == AF_TT_BYTE && len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        int hi = hexdigit(s[3]), lo = hexdigit(s[4]);
        if (hi >= 0 && lo >= 0) {
            out[0] = (char)(hi << 4 | lo);
            return 1;
        }
    }
    if (t->type[id] != AF_TT_NORMAL && t->type[id] != AF_TT_USER) {
        memcpy(out, s, len);
        return len;
    }
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

typedef struct ssym { uint32_t start, len; int32_t prev, next, id; } ssym;
/* A merge candidate: priority `key` (higher first), then longer left piece, then leftmost. */
typedef struct scand { float key; uint32_t lenl, len; int32_t left, right, id; } scand;

typedef struct swork {
    scand *h;
    size_t n, cap;
} swork;

static bool scand_better(const scand *a, const scand *b) {
    if (a->key != b->key) return a->key > b->key;
    if (a->lenl != b->lenl) return a->lenl > b->lenl;
    return a->left < b->left;
}

static af_status spush(swork *w, scand c) {
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        scand *nh = af_realloc_array(w->h, nc, sizeof *nh);
        if (!nh) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (merge queue)");
        w->h = nh;
        w->cap = nc;
    }
    size_t i = w->n++;
    w->h[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!scand_better(&w->h[i], &w->h[p])) break;
        scand x = w->h[i]; w->h[i] = w->h[p]; w->h[p] = x;
        i = p;
    }
    return AF_OK;
}

static scand spop(swork *w) {
    scand top = w->h[0];
    w->h[0] = w->h[--w->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->n && scand_better(&w->h[l], &w->h[m])) m = l;
        if (r < w->n && scand_better(&w->h[r], &w->h[m])) m = r;
        if (m == i) break;
        scand x = w->h[i]; w->h[i] = w->h[m]; w->h[m] = x;
        i = m;
    }
    return top;
}

/* Both pieces must be tokens and their concatenation a token (HF generate_merges). */
static af_status try_pair(const af_tokenizer *t, swork *w, const char *buf, const ssym *s, int32_t a,
                          int32_t b) {
    if (a < 0 || b < 0 || s[a].id < 0 || s[b].id < 0) return AF_OK;
    uint32_t len = s[a].len + s[b].len;
    int32_t id, rank;
    float key;
    if (t->n_merges > 0) { /* explicit merges (tokenizer.json): the pair's rank, lowest first */
        if (!af_pair_get(&t->merges, s[a].id, s[b].id, &rank, &id)) return AF_OK;
        key = -(float)rank;
    } else {
        id = af_strmap_get(&t->vocab, t->text, t->off, buf + s[a].start, len);
        if (id < 0) return AF_OK;
        key = t->spm_rank_by_id ? -(float)id : t->score[id];
    }
    return spush(w, (scand){key, s[a].len, len, a, b, id});
}

static af_status emit_symbol(const af_tokenizer *t, int32_t id, const char *p, size_t len, af_ids *out) {
    if (id >= 0) return af_ids_push(out, id);
    for (size_t i = 0; i < len; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)p[i]);
        int32_t b = af_strmap_get(&t->vocab, t->text, t->off, name, 6);
        if (b < 0) return t->unk >= 0 ? af_ids_push(out, t->unk) : AF_OK;
        AF_TRY(af_ids_push(out, b));
    }
    return AF_OK;
}

af_status af_spm_encode(const af_tokenizer *t, const char *s, size_t len, bool first, af_ids *out) {
    if (len == 0) return AF_OK;
    size_t cap = 3 * len + 3;
    char *buf = af_malloc(cap);
    ssym *sy = af_malloc((len + 1) * sizeof *sy);
    swork w = {0};
    af_status st = AF_OK;
    if (!buf || !sy) { st = af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", len); goto done; }
    size_t n = 0;
    if (first && t->add_space_prefix && !(t->prefix_unless_space && s[0] == ' ')) { memcpy(buf, "\xE2\x96\x81", 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') { memcpy(buf + n, "\xE2\x96\x81", 3); n += 3; }
        else buf[n++] = s[i];
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        int k = af_utf8_valid_len((const unsigned char *)buf + i, n - i);
        if (k <= 0) k = 1;
        sy[ns] = (ssym){(uint32_t)i, (uint32_t)k, ns - 1, -1,
                        af_strmap_get(&t->vocab, t->text, t->off, buf + i, (size_t)k)};
        if (ns > 0) sy[ns - 1].next = ns;
        ns++;
        i += (size_t)k;
    }
    for (int32_t i = 0; i + 1 < ns && st == AF_OK; i++) st = try_pair(t, &w, buf, sy, i, i + 1);
    while (st == AF_OK && w.n) {
        scand c = spop(&w);
        ssym *L = &sy[c.left], *R = &sy[c.right];
        if (L->len != c.lenl || R->len == 0 || L->next != c.right || L->len + R->len != c.len) continue;
        L->len += R->len;
        L->id = c.id;
        L->next = R->next;
        if (R->next >= 0) sy[R->next].prev = c.left;
        R->len = 0;
        st = try_pair(t, &w, buf, sy, L->prev, c.left);
        if (st == AF_OK) st = try_pair(t, &w, buf, sy, c.left, L->next);
    }
    for (int32_t i = 0; st == AF_OK && i >= 0 && ns > 0; i = sy[i].next)
        st = emit_symbol(t, sy[i].id, buf + sy[i].start, sy[i].len, out);
done:
    free(buf);
    free(sy);
    free(w.h);
    return st;
}
