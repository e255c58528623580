/*
 * bpe.c — GPT-2 style byte-level BPE (tokenizer.ggml.model = "gpt2"), docs/FORMATS.md §6.2.
 *
 *  1. Pre-tokenization: the regexes named by tokenizer.ggml.pre are applied in sequence, each
 *     splitting every piece of the previous one into matches and the gaps between them (HF
 *     `Split(behavior = Isolated)`; each piece is its own regex subject, so look-aheads stop at
 *     the piece's end). Regexes run with PCRE2 (UTF + UCP, JIT when available).
 *     Patterns (facts from HF tokenizers' ByteLevel and llama.cpp src/llama-vocab.cpp):
 *       default/gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *       smollm:       \p{N} (every digit alone, HF Digits(individual_digits)), then gpt2
 *       llama3/llama-bpe, qwen2: see kPre below.
 *  2. Each piece's UTF-8 bytes are mapped through the GPT-2 byte-to-unicode table; one symbol
 *     per byte. Adjacent symbol pairs are merged, lowest merge rank first (ties: leftmost), until
 *     no pair has a merge (HF tokenizers BPE::merge_word). A priority queue keyed by
 *     (rank, position) with lazy invalidation makes this O(n log n) in the piece length.
 *     With ignore_merges (HF BPE option, Llama 3's tokenizer.json) a piece whose byte-mapped text is
 *     a vocabulary token is emitted as that token without merging.
 */
#include "tokenizer/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#define AF_MAX_PRE 2

struct af_bpe_pre {
    int n;
    pcre2_code *re[AF_MAX_PRE];
};

const char af_bpe_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char kLlama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char kQwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char af_bpe_digit_regex[] = "\\p{N}";

static const struct {
    const char *name;
    const char *re[AF_MAX_PRE];
} kPre[] = {
    {"default", {af_bpe_gpt2_regex, NULL}},  {"gpt2", {af_bpe_gpt2_regex, NULL}},       {"smollm", {af_bpe_digit_regex, af_bpe_gpt2_regex}},
    {"llama3", {kLlama3, NULL}}, {"llama-bpe", {kLlama3, NULL}}, {"qwen2", {kQwen2, NULL}},
};

/* ---- GPT-2 byte-to-unicode map (docs/FORMATS.md §6.2) ----
 * Printable bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68 bytes, in
 * increasing order, map to U+0100.. U+0143: 0x00-0x20 -> U+0100-U+0120, 0x7F-0xA0 -> U+0121-U+0142,
 * 0xAD -> U+0143. */
static uint32_t byte_cp(unsigned b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F);
    if (b == 0xAD) return 0x143;
    return b;
}

/* Inverse of byte_cp, or -1 for a code point outside the map. */
static int cp_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143) return 0xAD;
    return -1;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

size_t af_bpe_decode_token(const char *s, size_t len, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        const unsigned char *p = (const unsigned char *)s + i;
        int k = af_utf8_valid_len(p, len - i);
        if (k <= 0) { out[o++] = (char)p[0]; i++; continue; }
        uint32_t cp = k == 1 ? p[0] : k == 2 ? ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu) : 0x10000;
        int b = cp_byte(cp);
        if (b >= 0) out[o++] = (char)b;
        else { memcpy(out + o, p, (size_t)k); o += (size_t)k; }
        i += (size_t)k;
    }
    return o;
}

/* ---- merges: (left, right) -> (rank, result) ---- */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

bool af_pair_get(const af_pairmap *m, int32_t l, int32_t r, int32_t *rank, int32_t *res) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == UINT64_MAX) return false;
        if (m->keys[i] == key) { *rank = m->rank[i]; *res = m->res[i]; return true; }
    }
}

af_status af_bpe_merges(af_tokenizer *t, const af_tok_spec *s) {
    const char *path = s->label;
    uint64_t cap = 16;
    while (cap < (uint64_t)s->n_merges * 2) cap *= 2;
    af_pairmap *m = &t->merges;
    m->keys = af_malloc(cap * sizeof *m->keys);
    m->rank = af_malloc(cap * sizeof *m->rank);
    m->res = af_malloc(cap * sizeof *m->res);
    if (!m->keys || !m->rank || !m->res) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory (merges)", path);
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    m->mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (int64_t i = 0; i < s->n_merges; i++) {
        const af_tok_str L = s->merge[2 * i], R = s->merge[2 * i + 1];
        if (L.len + R.len > buf_cap) {
            char *nb = realloc(buf, L.len + R.len);
            if (!nb) { free(buf); return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory", path); }
            buf = nb;
            buf_cap = L.len + R.len;
        }
        if (L.len) memcpy(buf, L.ptr, L.len);
        if (R.len) memcpy(buf + L.len, R.ptr, R.len);
        int32_t l = af_strmap_get(&t->vocab, t->text, t->off, L.ptr, L.len);
        int32_t r = af_strmap_get(&t->vocab, t->text, t->off, R.ptr, R.len);
        int32_t res = af_strmap_get(&t->vocab, t->text, t->off, buf, L.len + R.len);
        if (l < 0 || r < 0 || res < 0) continue; /* can never fire: its pieces are not tokens */
        uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
        uint64_t h = mix64(key) & m->mask;
        while (m->keys[h] != UINT64_MAX && m->keys[h] != key) h = (h + 1) & m->mask;
        if (m->keys[h] == key) continue; /* duplicate: the first (lowest rank) wins */
        m->keys[h] = key;
        m->rank[h] = (int32_t)i;
        m->res[h] = res;
    }
    free(buf);
    t->n_merges = (int32_t)s->n_merges;
    return AF_OK;
}

const char *af_bpe_pre_from_regex(const char *const *re, int n) {
    for (size_t k = 0; k < sizeof kPre / sizeof *kPre; k++) {
        int m = 0;
        while (m < AF_MAX_PRE && kPre[k].re[m]) m++;
        if (m != n) continue;
        int same = 1;
        for (int i = 0; i < n; i++) same &= strcmp(re[i], kPre[k].re[i]) == 0;
        if (same) return kPre[k].name;
    }
    return NULL;
}

af_status af_bpe_load(af_tokenizer *t, const char *path, const char *pre, size_t pre_len) {
    int which = -1;
    for (size_t k = 0; k < sizeof kPre / sizeof *kPre; k++)
        if (strlen(kPre[k].name) == pre_len && memcmp(kPre[k].name, pre, pre_len) == 0) which = (int)k;
    if (which < 0)
        return af_fail(AF_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.pre: '%.*s' not supported (default, gpt2, smollm, llama3, "
                       "llama-bpe, qwen2)", path, (int)(pre_len > 40 ? 40 : pre_len), pre);
    snprintf(t->pre_name, sizeof t->pre_name, "%s", kPre[which].name);
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t n = put_utf8(byte_cp(b), u);
        t->byte_tok[b] = af_strmap_get(&t->vocab, t->text, t->off, u, n);
    }
    t->pre = af_calloc(1, sizeof *t->pre);
    if (!t->pre) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory", path);
    for (int k = 0; k < AF_MAX_PRE && kPre[which].re[k]; k++) {
        int err;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)kPre[which].re[k], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            return af_fail(AF_ERR_INTERNAL, "tokenizer: pre-tokenizer '%s' regex %d: %s at %zu",
                           t->pre_name, k, (const char *)msg, (size_t)eoff);
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        t->pre->re[t->pre->n++] = re;
    }
    return AF_OK;
}

void af_bpe_free(af_tokenizer *t) {
    if (t->pre) {
        for (int k = 0; k < t->pre->n; k++) pcre2_code_free(t->pre->re[k]);
        free(t->pre);
        t->pre = NULL;
    }
    free(t->merges.keys); free(t->merges.rank); free(t->merges.res);
    memset(&t->merges, 0, sizeof t->merges);
}

/* ---- the merge loop for one piece ---- */
typedef struct sym { int32_t id, next, prev; } sym;
typedef struct cand { int32_t rank, pos, right, lid, rid, res; } cand;

typedef struct work {
    const af_tokenizer *t;
    pcre2_match_data *md;
    sym *s;
    cand *h;
    size_t s_cap, h_cap, h_n;
    af_ids *out;
} work;

static bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(work *w, cand c) {
    size_t i = w->h_n++;
    w->h[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&w->h[i], &w->h[p])) break;
        cand x = w->h[i]; w->h[i] = w->h[p]; w->h[p] = x;
        i = p;
    }
}

static cand heap_pop(work *w) {
    cand top = w->h[0];
    w->h[0] = w->h[--w->h_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->h_n && cand_less(&w->h[l], &w->h[m])) m = l;
        if (r < w->h_n && cand_less(&w->h[r], &w->h[m])) m = r;
        if (m == i) break;
        cand x = w->h[i]; w->h[i] = w->h[m]; w->h[m] = x;
        i = m;
    }
    return top;
}

static void try_pair(work *w, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return;
    int32_t lid = w->s[a].id, rid = w->s[b].id, rank, res;
    if (lid < 0 || rid < 0) return;
    if (!af_pair_get(&w->t->merges, lid, rid, &rank, &res)) return;
    heap_push(w, (cand){rank, a, b, lid, rid, res});
}

static af_status bpe_piece(work *w, const unsigned char *p, size_t n) {
    if (n == 0) return AF_OK;
    if (n > w->s_cap || n > w->h_cap / 2) {
        size_t c = n < 256 ? 256 : n;
        sym *ns = af_realloc_array(w->s, c, sizeof *ns);
        if (ns) w->s = ns;
        cand *nh = af_realloc_array(w->h, 2 * c, sizeof *nh);
        if (nh) w->h = nh;
        if (!ns || !nh) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (piece of %zu bytes)", n);
        w->s_cap = c;
        w->h_cap = 2 * c;
    }
    const af_tokenizer *t = w->t;
    if (t->ignore_merges) { /* HF BPE ignore_merges: the whole pre-token, if it is a token */
        char stackbuf[512], *m = 2 * n <= sizeof stackbuf ? stackbuf : af_malloc(2 * n);
        if (!m) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (piece of %zu bytes)", n);
        size_t ml = 0;
        for (size_t i = 0; i < n; i++) ml += put_utf8(byte_cp(p[i]), m + ml);
        int32_t id = af_strmap_get(&t->vocab, t->text, t->off, m, ml);
        if (m != stackbuf) free(m);
        if (id >= 0) return af_ids_push(w->out, id);
    }
    sym *s = w->s;
    for (size_t i = 0; i < n; i++)
        s[i] = (sym){t->byte_tok[p[i]], i + 1 < n ? (int32_t)i + 1 : -1, (int32_t)i - 1};
    w->h_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(w, (int32_t)i, (int32_t)i + 1);
    /* Each merge pops one entry and pushes at most two (the heap grows when needed). */
    while (w->h_n) {
        cand c = heap_pop(w);
        sym *L = &s[c.pos];
        if (L->id != c.lid || L->next != c.right || s[c.right].id != c.rid) continue; /* stale */
        L->id = c.res;
        int32_t nx = s[c.right].next;
        s[c.right].id = -2;
        s[c.right].next = -1;
        L->next = nx;
        if (nx >= 0) s[nx].prev = c.pos;
        if (w->h_n + 2 > w->h_cap) {
            cand *nh = af_realloc_array(w->h, w->h_cap * 2, sizeof *nh);
            if (!nh) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (merge queue)");
            w->h = nh;
            w->h_cap *= 2;
        }
        try_pair(w, L->prev, c.pos);
        try_pair(w, c.pos, nx);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (s[i].id >= 0) AF_TRY(af_ids_push(w->out, s[i].id));
    return AF_OK;
}

/* Split s[0..n) with regex `level` (matches and the gaps between them, in order), recursing. */
static af_status split(work *w, int level, const char *s, size_t n) {
    if (n == 0) return AF_OK;
    if (level >= w->t->pre->n) return bpe_piece(w, (const unsigned char *)s, n);
    pcre2_code *re = w->t->pre->re[level];
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, w->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return af_fail(AF_ERR_INTERNAL, "tokenizer: pre-tokenizer regex failed (PCRE2 error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match (not produced by our patterns): skip one character */
            size_t k = pos + 1;
            while (k < n && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
            AF_TRY(split(w, level + 1, s + pos, k - pos));
            pos = k;
            continue;
        }
        AF_TRY(split(w, level + 1, s + pos, ms - pos));
        AF_TRY(split(w, level + 1, s + ms, me - ms));
        pos = me;
    }
    return split(w, level + 1, s + pos, n - pos);
}

af_status af_bpe_encode(const af_tokenizer *t, const char *s, size_t len, af_ids *out) {
    if (len == 0) return AF_OK;
    work w = {.t = t, .out = out};
    w.md = pcre2_match_data_create(1, NULL);
    if (!w.md) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (match data)");
    af_status st = split(&w, 0, s, len);
    pcre2_match_data_free(w.md);
    free(w.s);
    free(w.h);
    return st;
}
