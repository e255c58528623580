/*
 * tokenizer.c — loading a tokenizer from GGUF metadata (docs/FORMATS.md §6) and the public encode /
 * decode entry points of afinar.h. The model-specific segment encoders live in bpe.c (gpt2
 * byte-level BPE) and spm.c (SentencePiece-style BPE by scores, byte fallback).
 *
 * Encoding follows the Hugging Face `tokenizers` pipeline: added/special tokens are split out of
 * the text first (leftmost, longest match; control tokens only when parse_special, user-defined
 * ones always), every remaining piece is pre-tokenized and BPE-encoded independently.
 * Invalid UTF-8 bytes are cut out of the text and emitted one byte token each (an error when the
 * vocabulary has no token for such a byte).
 */
#include "tokenizer/tok_internal.h"

#include <utf8proc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

af_status af_ids_push(af_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 64;
        int32_t *nv = af_realloc_array(o->v, nc, sizeof *nv);
        if (!nv) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (%zu ids)", nc);
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = id;
    return AF_OK;
}

int af_utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* ---- string -> id hash (FNV-1a) ---- */
static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

int32_t af_strmap_get(const af_strmap *m, const char *texts, const uint32_t *off, const char *s,
                      size_t len) {
    if (!m->slots) return -1;
    for (uint32_t i = fnv1a(s, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        int32_t id = (int32_t)(v - 1);
        if (off[id + 1] - off[id] == len && memcmp(texts + off[id], s, len) == 0) return id;
    }
}

/* Insert ids for which keep(type) is true; the first id wins on duplicate texts. */
static af_status strmap_build(af_strmap *m, const af_tokenizer *t, bool specials_only) {
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2u) cap *= 2;
    m->slots = af_calloc(cap, sizeof *m->slots);
    if (!m->slots) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (hash of %u)", cap);
    m->mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->type[id];
        if (specials_only && !(ty == AF_TT_CONTROL || ty == AF_TT_USER || ty == AF_TT_UNKNOWN))
            continue;
        const char *s = t->text + t->off[id];
        size_t len = t->off[id + 1] - t->off[id];
        if (specials_only && len == 0) continue;
        uint32_t i = fnv1a(s, len) & m->mask;
        bool dup = false;
        for (; m->slots[i]; i = (i + 1) & m->mask) {
            int32_t o = (int32_t)(m->slots[i] - 1);
            if (t->off[o + 1] - t->off[o] == len && memcmp(t->text + t->off[o], s, len) == 0) {
                dup = true;
                break;
            }
        }
        if (!dup) m->slots[i] = (uint32_t)id + 1;
    }
    return AF_OK;
}

/* Per first byte, the distinct lengths of special tokens, longest first. */
static af_status special_index(af_tokenizer *t) {
    uint32_t count[256] = {0};
    /* upper bound: one entry per special token */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len = t->off[id + 1] - t->off[id];
        int ty = t->type[id];
        if (len && (ty == AF_TT_CONTROL || ty == AF_TT_USER || ty == AF_TT_UNKNOWN))
            count[(unsigned char)t->text[t->off[id]]]++;
    }
    uint32_t total = 0;
    for (int b = 0; b < 256; b++) {
        t->special_lens_off[b] = total;
        total += count[b] + 1;
    }
    t->special_lens_off[256] = total;
    uint32_t *lens = af_calloc(total, sizeof *lens);
    if (!lens) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (special index)");
    uint32_t fill[256] = {0};
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len = t->off[id + 1] - t->off[id];
        int ty = t->type[id];
        if (!len || !(ty == AF_TT_CONTROL || ty == AF_TT_USER || ty == AF_TT_UNKNOWN)) continue;
        unsigned b = (unsigned char)t->text[t->off[id]];
        uint32_t *L = lens + t->special_lens_off[b];
        bool seen = false;
        for (uint32_t k = 0; k < fill[b]; k++) seen |= L[k] == len;
        if (!seen) L[fill[b]++] = len;
        if (len > t->special_max_len) t->special_max_len = len;
    }
    for (int b = 0; b < 256; b++) { /* sort descending (few entries: insertion sort) */
        uint32_t *L = lens + t->special_lens_off[b];
        for (uint32_t i = 1; i < fill[b]; i++)
            for (uint32_t j = i; j > 0 && L[j - 1] < L[j]; j--) {
                uint32_t x = L[j]; L[j] = L[j - 1]; L[j - 1] = x;
            }
    }
    t->special_lens = lens;
    return AF_OK;
}

static int32_t get_id(const af_gguf *g, const char *key, int32_t def, int32_t n_vocab) {
    int64_t v;
    /* a key of the wrong type counts as absent; the default is range-checked like a stored id (a
     * vocabulary smaller than the default id has no such token: found by fuzz_gguf_tok) */
    if (af_gguf_get_i64_or(g, key, def, &v) != AF_OK) {
        af_clear_error();
        v = def;
    }
    return (v >= 0 && v < n_vocab) ? (int32_t)v : -1;
}

/* The token types and texts into t (t->type, t->text, t->off; t->dec, t->doff and t->eog allocated):
 * whitespace-only SPM tokens respelled with U+2581 (sp->respell_spaces). */
static af_status build_texts(af_tokenizer *t, const af_tok_spec *sp) {
    const char *path = sp->label;
    const int32_t n = sp->n;
    t->type = af_malloc((size_t)n * sizeof *t->type);
    if (!t->type) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory (%d tokens)", path, n);
    memcpy(t->type, sp->type, (size_t)n * sizeof *t->type);

    /* SPM: llama.cpp's converter writes the whitespace tokens ("▁▁", ...) as real spaces, marked
     * user-defined; SentencePiece (and the HF tokenizer transformers builds from the GGUF) has them
     * as ordinary pieces spelled with U+2581. Respell tokens made only of spaces and treat them as
     * normal, so they take part in BPE instead of being matched literally (HF parity). */
    bool *respell = sp->respell_spaces ? af_calloc((size_t)n, sizeof *respell) : NULL;
    if (sp->respell_spaces && !respell) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory", path);
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        af_tok_str s = sp->tok[i];
        total += s.len;
        uint64_t k = 0;
        while (respell && k < s.len && s.ptr[k] == ' ') k++;
        if (respell && s.len && k == s.len) {
            respell[i] = true;
            total += 2 * s.len;
            if (t->type[i] == AF_TT_USER) t->type[i] = AF_TT_NORMAL;
        }
    }
    if (total >= UINT32_MAX) {
        free(respell);
        return af_fail(AF_ERR_FORMAT, "%s: tokenizer: %llu bytes of token text", path, (unsigned long long)total);
    }
    t->text = af_malloc(total + 1);
    t->dec = af_malloc(total + 1);
    t->off = af_calloc((size_t)n + 1, sizeof *t->off);
    t->doff = af_calloc((size_t)n + 1, sizeof *t->doff);
    t->eog = af_calloc((size_t)n, 1);
    if (!t->text || !t->dec || !t->off || !t->doff || !t->eog) {
        free(respell);
        return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory (%d tokens)", path, n);
    }
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        af_tok_str s = sp->tok[i];
        t->off[i] = pos;
        for (uint64_t k = 0; k < s.len; k++) {
            if (respell && respell[i]) { memcpy(t->text + pos, "\xE2\x96\x81", 3); pos += 3; }
            else t->text[pos++] = s.ptr[k];
        }
    }
    t->off[n] = pos;
    free(respell);
    return AF_OK;
}

/* The end-of-generation tokens: the usual end-of-turn texts when special, EOS, EOT, EOM. */
static void mark_eog(af_tokenizer *t, const af_tok_spec *sp) {
    static const char *const eog_texts[] = {"<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<turn|>", "<eos>",
                                            "<|eot_id|>", "<|end|>", "<|eom_id|>", "<EOT>"};
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++) {
        int32_t id = af_strmap_get(&t->vocab, t->text, t->off, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0 && t->type[id] != AF_TT_NORMAL) t->eog[id] = 1;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (sp->eom >= 0) t->eog[sp->eom] = 1;
}

/* The merges, the pre-tokenizer (GPT-2), each token's decoded bytes (t->dec, t->doff) and the
 * description. */
static af_status build_decoder(af_tokenizer *t, const af_tok_spec *sp) {
    const char *path = sp->label;
    const int32_t n = sp->n;
    if (sp->n_merges > 0 || t->kind == AF_TOK_GPT2) AF_TRY(af_bpe_merges(t, sp));
    const char *src = sp->source ? sp->source : "";
    if (t->kind == AF_TOK_GPT2) {
        AF_TRY(af_bpe_load(t, path, sp->pre, sp->pre_len));
        for (int32_t i = 0; i < n; i++) {
            const char *s = t->text + t->off[i];
            size_t len = t->off[i + 1] - t->off[i];
            size_t m;
            if (t->type[i] == AF_TT_NORMAL || t->type[i] == AF_TT_BYTE) m = af_bpe_decode_token(s, len, t->dec + t->doff[i]);
            else { memcpy(t->dec + t->doff[i], s, len); m = len; }
            t->doff[i + 1] = t->doff[i] + (uint32_t)m;
        }
        snprintf(t->desc, sizeof t->desc, "gpt2 BPE (pre=%s), %d tokens, %d merges%s", t->pre_name, n,
                 t->n_merges, src);
    } else {
        for (int32_t i = 0; i < n; i++) {
            size_t m = af_spm_decode_token(t, i, t->dec + t->doff[i]);
            t->doff[i + 1] = t->doff[i] + (uint32_t)m;
        }
        if (t->n_merges > 0)
            snprintf(t->desc, sizeof t->desc, "llama SentencePiece-BPE (byte fallback), %d tokens, %d merges%s", n,
                     t->n_merges, src);
        else
            snprintf(t->desc, sizeof t->desc, "llama SentencePiece-BPE (byte fallback), %d tokens%s", n, src);
    }
    return AF_OK;
}

af_status af_tok_build(af_tokenizer *t, const af_tok_spec *sp) {
    const char *path = sp->label;
    const int32_t n = sp->n;
    t->kind = sp->kind;
    t->n_vocab = n;
    AF_TRY(build_texts(t, sp));
    const bool spm = t->kind == AF_TOK_SPM;
    if (spm) {
        t->spm_rank_by_id = sp->spm_rank_by_id;
        t->score = af_calloc((size_t)n, sizeof *t->score);
        if (!t->score) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory", path);
        if (sp->score) memcpy(t->score, sp->score, (size_t)n * sizeof *t->score);
    }

    AF_TRY(strmap_build(&t->vocab, t, false));
    AF_TRY(strmap_build(&t->special, t, true));
    AF_TRY(special_index(t));

    t->bos = sp->bos;
    t->eos = sp->eos;
    t->unk = sp->unk;
    t->eot = sp->eot;
    t->add_bos = sp->add_bos;
    t->add_eos = sp->add_eos;
    t->add_space_prefix = sp->add_space_prefix;
    t->prefix_unless_space = sp->prefix_unless_space;
    t->prefix_each_segment = sp->prefix_each_segment;
    t->ignore_merges = sp->ignore_merges;
    t->nfc = sp->nfc;
    mark_eog(t, sp);

    if (sp->chat_template) {
        t->chat_template = af_malloc(sp->chat_template_len + 1);
        if (!t->chat_template) return af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory", path);
        memcpy(t->chat_template, sp->chat_template, sp->chat_template_len);
        t->chat_template[sp->chat_template_len] = 0;
    }
    return build_decoder(t, sp);
}

/* tokenizer.ggml.model -> sp->kind; *gemma4 for Gemma 4's BPE. Errors: AF_ERR_NOT_FOUND (no
 * tokenizer), AF_ERR_UNSUPPORTED. */
static af_status gguf_kind(const af_gguf *g, const char *path, af_tok_spec *sp, bool *gemma4_out) {
    af_gguf_str model;
    if (af_gguf_get_str(g, "tokenizer.ggml.model", &model) != AF_OK)
        return af_fail(AF_ERR_NOT_FOUND, "%s: tokenizer.ggml.model: missing (file has no tokenizer)", path);
    /* "gemma4" (llama.cpp convert_hf_to_gguf.py Gemma4Model): the SentencePiece-style BPE of
     * Gemma's tokenizer.json (U+2581 for spaces, byte fallback) with its merges in the file */
    if (af_gguf_str_eq(model, "none") || af_gguf_str_eq(model, "no_vocab")) /* llama.cpp: a model without a vocabulary */
        return af_fail(AF_ERR_NOT_FOUND, "%s: tokenizer.ggml.model is '%.*s': the file has no tokenizer", path,
                       (int)model.len, model.ptr);
    const bool gemma4 = af_gguf_str_eq(model, "gemma4");
    if (af_gguf_str_eq(model, "gpt2")) sp->kind = AF_TOK_GPT2;
    else if (af_gguf_str_eq(model, "llama") || gemma4) sp->kind = AF_TOK_SPM;
    else
        return af_fail(AF_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model: '%.*s' not supported (gpt2, llama, gemma4)",
                       path, (int)(model.len > 40 ? 40 : model.len), model.ptr);
    *gemma4_out = gemma4;
    return AF_OK;
}

/* The special ids and flags (llama.cpp defaults when absent, docs/FORMATS.md §6.1), the chat
 * template and the pre-tokenizer with what it implies (NFC, ignore_merges) into sp. Errors: those
 * of the GGUF getters (a key of the wrong type). */
static af_status gguf_special(const af_gguf *g, af_tok_spec *sp, bool gemma4) {
    const int32_t n = sp->n;
    const bool spm = sp->kind == AF_TOK_SPM;
    af_status st;
    if (spm) {
        af_gguf_str arch;
        if (af_gguf_find(g, "general.architecture") &&
            af_gguf_get_str(g, "general.architecture", &arch) == AF_OK && arch.len >= 5 &&
            memcmp(arch.ptr, "gemma", 5) == 0)
            sp->spm_rank_by_id = true;
    }
    sp->bos = get_id(g, "tokenizer.ggml.bos_token_id", spm ? 1 : 11, n);
    sp->eos = get_id(g, "tokenizer.ggml.eos_token_id", spm ? 2 : 11, n);
    sp->unk = get_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n);
    sp->eot = get_id(g, "tokenizer.ggml.eot_token_id", -1, n);
    sp->eom = get_id(g, "tokenizer.ggml.eom_token_id", -1, n);
    if ((st = af_gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", spm, &sp->add_bos)) != AF_OK) return st;
    if (gemma4) sp->add_bos = true; /* as llama.cpp (llama-vocab.cpp: overridden to true for Gemma 4) */
    if ((st = af_gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", false, &sp->add_eos)) != AF_OK) return st;
    /* missing key: llama.cpp's default (true for SentencePiece: Llama 2, Phi-3, Mistral v1 files) */
    if ((st = af_gguf_get_bool_or(g, "tokenizer.ggml.add_space_prefix", spm, &sp->add_space_prefix)) != AF_OK)
        return st;
    sp->prefix_each_segment = spm; /* llama.cpp: the SPM prefix also after each special token */
    af_gguf_str tmpl;
    if (af_gguf_find(g, "tokenizer.chat_template")) {
        if ((st = af_gguf_get_str(g, "tokenizer.chat_template", &tmpl)) != AF_OK) return st;
        sp->chat_template = tmpl.ptr;
        sp->chat_template_len = (size_t)tmpl.len;
    }
    af_gguf_str pre = {"default", 7};
    if (!spm && af_gguf_find(g, "tokenizer.ggml.pre") &&
        (st = af_gguf_get_str(g, "tokenizer.ggml.pre", &pre)) != AF_OK)
        return st;
    sp->pre = pre.ptr;
    sp->pre_len = (size_t)pre.len;
    /* Qwen2/2.5/3 tokenizer.json normalise to NFC; their GGUF pre-tokenizer name says so */
    sp->nfc = !spm && af_gguf_str_eq(pre, "qwen2");
    /* Llama 3's tokenizer.json sets BPE ignore_merges (llama.cpp: pre llama-bpe does the same) */
    sp->ignore_merges = !spm && (af_gguf_str_eq(pre, "llama-bpe") || af_gguf_str_eq(pre, "llama3"));
    return AF_OK;
}

/* The GGUF front end: tokenizer.ggml.* -> af_tok_spec (docs/FORMATS.md §6.1). */
static af_status load(af_tokenizer *t, const af_gguf *g) {
    const char *path = g->path ? g->path : "(gguf)";
    af_tok_spec sp = {0};
    sp.label = path;
    bool gemma4 = false;
    AF_TRY(gguf_kind(g, path, &sp, &gemma4));

    const af_gguf_value *tv = af_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tv || tv->type != AF_GGUF_ARRAY || tv->arr_type != AF_GGUF_STRING)
        return af_fail(AF_ERR_NOT_FOUND, "%s: tokenizer.ggml.tokens: missing or not an array of strings", path);
    if (tv->arr_n == 0 || tv->arr_n > (1u << 24))
        return af_fail(AF_ERR_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens (expected 1..16M)", path,
                       (unsigned long long)tv->arr_n);
    const int32_t n = (int32_t)tv->arr_n;
    sp.n = n;
    const af_gguf_value *ty = af_gguf_find(g, "tokenizer.ggml.token_type");
    if (ty && (ty->type != AF_GGUF_ARRAY || ty->arr_n != (uint64_t)n || ty->arr_type == AF_GGUF_STRING ||
               ty->arr_type == AF_GGUF_ARRAY || ty->arr_type == AF_GGUF_FLOAT32 || ty->arr_type == AF_GGUF_FLOAT64))
        return af_fail(AF_ERR_FORMAT, "%s: tokenizer.ggml.token_type: not an integer array of %d", path, n);
    const bool spm = sp.kind == AF_TOK_SPM;
    const af_gguf_value *sc = spm ? af_gguf_find(g, "tokenizer.ggml.scores") : NULL;
    if (sc && (sc->type != AF_GGUF_ARRAY || sc->arr_n != (uint64_t)n || sc->arr_type == AF_GGUF_STRING ||
               sc->arr_type == AF_GGUF_ARRAY))
        return af_fail(AF_ERR_FORMAT, "%s: tokenizer.ggml.scores: not a numeric array of %d", path, n);
    /* merges: required for gpt2 and gemma4; optional for llama (SPM), where they replace the
     * merge order of the scores (afinar convert writes both for a tokenizer.json BPE) */
    const af_gguf_value *mv = af_gguf_find(g, "tokenizer.ggml.merges");
    if (mv || !spm || gemma4) {
        if (!mv) return af_fail(AF_ERR_NOT_FOUND, "%s: tokenizer.ggml.merges: missing (%s vocabulary)", path,
                                gemma4 ? "gemma4" : "gpt2");
        if (mv->type != AF_GGUF_ARRAY || mv->arr_type != AF_GGUF_STRING || mv->arr_n >= (1u << 30))
            return af_fail(AF_ERR_FORMAT, "%s: tokenizer.ggml.merges: not an array of strings", path);
    }
    af_tok_str *tok = af_malloc((size_t)n * sizeof *tok);
    int32_t *type = af_malloc((size_t)n * sizeof *type);
    float *score = sc ? af_malloc((size_t)n * sizeof *score) : NULL;
    af_tok_str *merge = mv && mv->arr_n ? af_malloc((size_t)mv->arr_n * 2 * sizeof *merge) : NULL;
    af_status st = AF_OK;
    if (!tok || !type || (sc && !score) || (mv && mv->arr_n && !merge)) {
        st = af_fail(AF_ERR_NOMEM, "%s: tokenizer: out of memory (%d tokens)", path, n);
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        af_gguf_str s = af_gguf_arr_str(tv, (uint64_t)i);
        tok[i] = (af_tok_str){s.ptr, (size_t)s.len};
        type[i] = ty ? (int32_t)af_gguf_arr_int(ty, (uint64_t)i) : AF_TT_NORMAL;
        if (score) score[i] = (float)af_gguf_arr_float(sc, (uint64_t)i);
    }
    for (uint64_t i = 0; mv && i < mv->arr_n; i++) {
        af_gguf_str s = af_gguf_arr_str(mv, i);
        const char *spc = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!spc) {
            st = af_fail(AF_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: no space separator in '%.*s'", path,
                         (unsigned long long)i, (int)(s.len > 40 ? 40 : s.len), s.ptr);
            goto done;
        }
        merge[2 * i] = (af_tok_str){s.ptr, (size_t)(spc - s.ptr)};
        merge[2 * i + 1] = (af_tok_str){spc + 1, (size_t)(s.len - (uint64_t)(spc - s.ptr) - 1)};
    }
    sp.tok = tok;
    sp.type = type;
    sp.score = score;
    sp.respell_spaces = spm;
    sp.n_merges = mv ? (int64_t)mv->arr_n : 0;
    sp.merge = merge;
    st = gguf_special(g, &sp, gemma4);
    if (st == AF_OK) st = af_tok_build(t, &sp);
done:
    free(tok);
    free(type);
    free(score);
    free(merge);
    return st;
}

af_status af_tokenizer_load(const af_gguf *g, af_tokenizer **out) {
    if (!g || !out) return af_fail(AF_ERR_INVALID_ARG, "af_tokenizer_load: NULL argument");
    *out = NULL;
    af_tokenizer *t = af_calloc(1, sizeof *t);
    if (!t) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory");
    af_status st = load(t, g);
    if (st != AF_OK) {
        af_tokenizer_free(t);
        return st;
    }
    *out = t;
    return AF_OK;
}

void af_tokenizer_free(af_tokenizer *t) {
    if (!t) return;
    af_bpe_free(t);
    free(t->text); free(t->dec); free(t->off); free(t->doff); free(t->type); free(t->score);
    free(t->eog); free(t->vocab.slots); free(t->special.slots); free(t->special_lens);
    free(t->chat_template);
    free(t);
}

const char *af_tokenizer_describe(const af_tokenizer *t) { return t ? t->desc : ""; }
const char *af_tokenizer_chat_template(const af_tokenizer *t) { return t ? t->chat_template : NULL; }

int32_t af_tokenizer_find(const af_tokenizer *t, const char *text, size_t len) {
    if (!t || !text) return -1;
    return af_strmap_get(&t->vocab, t->text, t->off, text, len);
}

int32_t af_tokenizer_vocab_size(const af_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t af_token_bos(const af_tokenizer *t) { return t ? t->bos : -1; }
int32_t af_token_eos(const af_tokenizer *t) { return t ? t->eos : -1; }
int af_token_is_eog(const af_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->eog[id];
}

/* ---- encoding ---- */

/* The byte token of a byte that is not valid UTF-8 at text offset `at`: the byte-level symbol (gpt2
 * vocabularies) or <0xNN> (SentencePiece byte fallback). A vocabulary without that token cannot
 * represent the byte: an error naming byte and offset, never a silent drop. */
static af_status emit_raw_byte(const af_tokenizer *t, unsigned char b, size_t at, af_ids *out) {
    int32_t id = -1;
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    if (t->kind == AF_TOK_GPT2) id = t->byte_tok[b];
    else id = af_strmap_get(&t->vocab, t->text, t->off, name, 6);
    if (id < 0)
        return af_fail(AF_ERR_FORMAT, "tokenizer: byte 0x%02X at offset %zu of the text is not valid UTF-8 and the "
                       "vocabulary has no byte token for it (%s); convert the text to UTF-8", b, at,
                       t->kind == AF_TOK_GPT2 ? "byte-level symbol" : name);
    return af_ids_push(out, id);
}

/* A valid UTF-8 run without special tokens: NFC first when the tokenizer normalises (HF normalizers
 * "NFC": utf8proc_map with UTF8PROC_STABLE | UTF8PROC_COMPOSE is utf8proc_NFC; ASCII is its own NFC). */
static af_status encode_run(const af_tokenizer *t, const char *s, size_t len, bool first, af_ids *out) {
    utf8proc_uint8_t *nf = NULL;
    if (t->nfc && len) {
        size_t i = 0;
        while (i < len && !((unsigned char)s[i] & 0x80)) i++;
        if (i < len) {
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &nf,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0)
                return af_fail(r == UTF8PROC_ERROR_NOMEM ? AF_ERR_NOMEM : AF_ERR_FORMAT, "tokenizer: NFC: %s",
                               utf8proc_errmsg(r));
            s = (const char *)nf;
            len = (size_t)r;
        }
    }
    af_status st = t->kind == AF_TOK_GPT2 ? af_bpe_encode(t, s, len, out) : af_spm_encode(t, s, len, first, out);
    free(nf);
    return st;
}

/* Plain text s[0..len) at offset `base` of the whole text (no special tokens): split off invalid UTF-8
 * bytes (one byte token each, emit_raw_byte), encode the valid runs. */
static af_status encode_plain(const af_tokenizer *t, const char *s, size_t len, size_t base, bool at_start,
                              af_ids *out) {
    size_t i = 0, run = 0;
    while (i < len) {
        int k = af_utf8_valid_len((const unsigned char *)s + i, len - i);
        if (k > 0) { i += (size_t)k; continue; }
        if (i > run) AF_TRY(encode_run(t, s + run, i - run, at_start && run == 0, out));
        AF_TRY(emit_raw_byte(t, (unsigned char)s[i], base + i, out));
        run = ++i;
    }
    if (len > run) AF_TRY(encode_run(t, s + run, len - run, at_start && run == 0, out));
    return AF_OK;
}

/* Longest special token starting at s[0..n), or -1. */
static int32_t match_special(const af_tokenizer *t, const char *s, size_t n, bool parse_special,
                             size_t *mlen) {
    const uint32_t *lens = t->special_lens;
    unsigned b = (unsigned char)s[0];
    for (uint32_t k = t->special_lens_off[b]; lens[k]; k++) {
        size_t L = lens[k];
        if (L > n) continue;
        int32_t id = af_strmap_get(&t->special, t->text, t->off, s, L);
        if (id < 0) continue;
        if (!parse_special && t->type[id] != AF_TT_USER) continue;
        *mlen = L;
        return id;
    }
    return -1;
}

static af_status tokenize(const af_tokenizer *t, const char *text, size_t len, int add_special,
                          int parse_special, af_ids *out) {
    if (add_special && t->add_bos && t->bos >= 0) AF_TRY(af_ids_push(out, t->bos));
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        size_t mlen = 0;
        int32_t id = match_special(t, text + i, len - i, parse_special != 0, &mlen);
        if (id < 0) { i++; continue; }
        if (i > seg) AF_TRY(encode_plain(t, text + seg, i - seg, seg, seg == 0 || t->prefix_each_segment, out));
        AF_TRY(af_ids_push(out, id));
        i += mlen;
        seg = i;
    }
    if (len > seg) AF_TRY(encode_plain(t, text + seg, len - seg, seg, seg == 0 || t->prefix_each_segment, out));
    if (add_special && t->add_eos && t->eos >= 0) AF_TRY(af_ids_push(out, t->eos));
    return AF_OK;
}

af_status af_tokenize(const af_tokenizer *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n_ids) {
    if (!t || !ids || !n_ids || (!text && len))
        return af_fail(AF_ERR_INVALID_ARG, "af_tokenize: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    af_ids out = {0};
    af_status st = tokenize(t, text, len, add_special, parse_special, &out);
    if (st != AF_OK) {
        free(out.v);
        return st;
    }
    if (!out.v) { /* always hand back a valid (freeable) pointer */
        out.v = af_malloc(sizeof *out.v);
        if (!out.v) return af_fail(AF_ERR_NOMEM, "af_tokenize: out of memory");
    }
    *ids = out.v;
    *n_ids = out.n;
    return AF_OK;
}

/* ---- decoding ---- */

int af_token_to_bytes(const af_tokenizer *t, int32_t id, int render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    int ty = t->type[id];
    if (!render_special && (ty == AF_TT_CONTROL || ty == AF_TT_UNKNOWN || ty == AF_TT_UNUSED)) return 0;
    size_t n = t->doff[id + 1] - t->doff[id];
    if (buf && cap) memcpy(buf, t->dec + t->doff[id], n < cap ? n : cap);
    return (int)n;
}

af_status af_detokenize(const af_tokenizer *t, const int32_t *ids, size_t n_ids, int render_special,
                        char **text) {
    if (!t || !text || (!ids && n_ids)) return af_fail(AF_ERR_INVALID_ARG, "af_detokenize: NULL argument");
    *text = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int k = af_token_to_bytes(t, ids[i], render_special, NULL, 0);
        if (k < 0)
            return af_fail(AF_ERR_RANGE, "af_detokenize: id %d at position %zu out of range [0, %d)",
                           ids[i], i, t->n_vocab);
        total += (size_t)k;
    }
    char *s = af_malloc(total + 1);
    if (!s) return af_fail(AF_ERR_NOMEM, "af_detokenize: out of memory (%zu bytes)", total + 1);
    size_t pos = 0;
    for (size_t i = 0; i < n_ids; i++)
        pos += (size_t)af_token_to_bytes(t, ids[i], render_special, s + pos, total - pos);
    s[pos] = 0;
    *text = s;
    return AF_OK;
}
