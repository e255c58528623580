/*
 * tok_hf.c — the tokenizer.json front end (Hugging Face `tokenizers` serialisation, as written by
 * transformers' save_pretrained), docs/FORMATS.md §12.3. It fills an af_tok_spec for the one
 * builder (tokenizer.c); encoding is done by the same bpe.c / spm.c as for GGUF files.
 *
 * Accepted pipelines (anything else is refused naming the field):
 *  byte-level BPE ("gpt2" kind): model BPE without byte_fallback; pre_tokenizer ByteLevel, or a
 *    Sequence of Digits(individual_digits=true) / Split(Regex, Isolated) / ByteLevel whose regex
 *    sequence is one of bpe.c's pre-tokenizers (gpt2, smollm, llama3, qwen2); normalizer null or
 *    NFC (Unicode canonical composition with libutf8proc, applied to the text between special tokens).
 *  SentencePiece-style BPE ("llama" kind): model BPE with byte_fallback; normalizer
 *    Replace(" ", "▁") (optionally after Prepend("▁")) with pre_tokenizer null or
 *    Split(" ", MergedWithPrevious) (Gemma), or pre_tokenizer Metaspace(split=false) (Llama 2 style).
 *  merges: "a b" strings or ["a", "b"] pairs; ranks = position; ignore_merges (byte-level only). added_tokens: special -> control
 *  (matched with parse_special), others -> user-defined (always matched).
 *  post_processor TemplateProcessing: a leading special token -> add BOS (that token); a trailing one
 *  -> add EOS. tokenizer_config.json: chat_template (or chat_template.jinja), bos/eos/unk token,
 *  add_bos_token / add_eos_token when there is no post_processor.
 */
#include "tokenizer/tok_internal.h"

#include "formats/hf_config.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 24)

typedef struct hfp {
    const char *L;  /* label: the tokenizer.json path */
    const char *LC; /* tokenizer_config.json label */
} hfp;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int is_type(const cJSON *o, const char *t) {
    const cJSON *ty = item(o, "type");
    return cJSON_IsString(ty) && !strcmp(ty->valuestring, t);
}

static const char *type_of(const cJSON *o) {
    const cJSON *ty = item(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "?";
}

/* Token text of a tokenizer_config.json entry: "text" or {"content": "text"}. */
static const char *tok_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v) && cJSON_IsString(item(v, "content"))) return item(v, "content")->valuestring;
    return NULL;
}

/* A Split/Replace pattern: {"String": s} or {"Regex": r}; `*regex` tells which. */
static const char *pattern(const cJSON *o, int *regex) {
    const cJSON *p = item(o, "pattern");
    if (cJSON_IsString(item(p, "Regex"))) { *regex = 1; return item(p, "Regex")->valuestring; }
    if (cJSON_IsString(item(p, "String"))) { *regex = 0; return item(p, "String")->valuestring; }
    return NULL;
}

typedef struct pipe {
    int byte_level;            /* a ByteLevel pre-tokenizer was seen */
    const char *re[4];
    int n_re;
    int spm_spaces;            /* the normalizer turns ' ' into U+2581 */
    int prefix;                /* add_space_prefix */
    int prefix_each;           /* the prefix on every split between added tokens, not only the first */
    int metaspace;
    int nfc;                   /* an NFC normalizer */
} pipe;

static af_status pre_one(const hfp *p, const cJSON *o, pipe *q, const char *field) {
    if (is_type(o, "ByteLevel")) {
        if (cJSON_IsTrue(item(o, "add_prefix_space")))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: ByteLevel add_prefix_space=true is not supported", p->L, field);
        const cJSON *ur = item(o, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) {
            if (q->n_re >= 4) return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: too many splits", p->L, field);
            q->re[q->n_re++] = af_bpe_gpt2_regex;
        }
        q->byte_level = 1;
        return AF_OK;
    }
    if (is_type(o, "Digits")) {
        if (!cJSON_IsTrue(item(o, "individual_digits")))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: Digits without individual_digits is not supported", p->L, field);
        if (q->n_re >= 4) return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: too many splits", p->L, field);
        q->re[q->n_re++] = af_bpe_digit_regex;
        return AF_OK;
    }
    if (is_type(o, "Split")) {
        int rx = 0;
        const char *pat = pattern(o, &rx);
        const cJSON *beh = item(o, "behavior");
        if (!pat || cJSON_IsTrue(item(o, "invert")) || !cJSON_IsString(beh))
            return af_fail(AF_ERR_FORMAT, "%s: %s: Split needs a pattern, a behavior and invert=false", p->L, field);
        if (!rx && !strcmp(pat, " ") && !strcmp(beh->valuestring, "MergedWithPrevious")) return AF_OK; /* Gemma: no-op after Replace */
        if (!rx || strcmp(beh->valuestring, "Isolated"))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: Split '%.40s' with behavior %.20s is not supported", p->L, field,
                           pat, beh->valuestring);
        if (q->n_re >= 4) return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: too many splits", p->L, field);
        q->re[q->n_re++] = pat;
        return AF_OK;
    }
    if (is_type(o, "Metaspace")) {
        const cJSON *rep = item(o, "replacement"), *ps = item(o, "prepend_scheme");
        if (!cJSON_IsString(rep) || strcmp(rep->valuestring, "\xE2\x96\x81") || cJSON_IsTrue(item(o, "split")))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: Metaspace other than replacement U+2581, split=false", p->L,
                           field);
        q->metaspace = q->spm_spaces = 1;
        q->prefix = !cJSON_IsString(ps) || strcmp(ps->valuestring, "never") != 0;
        q->prefix_each = cJSON_IsString(ps) && !strcmp(ps->valuestring, "always");
        if (cJSON_IsFalse(item(o, "add_prefix_space"))) q->prefix = 0;
        return AF_OK;
    }
    return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: pre-tokenizer type '%.40s' is not supported", p->L, field, type_of(o));
}

static af_status norm_one(const hfp *p, const cJSON *o, pipe *q, const char *field) {
    if (is_type(o, "NFC")) {
        q->nfc = 1;
        return AF_OK;
    }
    int rx = 1;
    if (is_type(o, "Replace")) {
        const char *pat = pattern(o, &rx);
        const cJSON *c = item(o, "content");
        if (pat && !rx && !strcmp(pat, " ") && cJSON_IsString(c) && !strcmp(c->valuestring, "\xE2\x96\x81")) {
            q->spm_spaces = 1;
            return AF_OK;
        }
    }
    if (is_type(o, "Prepend")) {
        const cJSON *pp = item(o, "prepend");
        if (cJSON_IsString(pp) && !strcmp(pp->valuestring, "\xE2\x96\x81")) {
            q->prefix = q->prefix_each = 1; /* a normalizer runs on each split between added tokens */
            return AF_OK;
        }
    }
    return af_fail(AF_ERR_UNSUPPORTED, "%s: %s: normalizer '%.40s' is not supported", p->L, field, type_of(o));
}

/* Run `fn` on `o` or, for a Sequence, on each element of `key`. */
static af_status walk(const hfp *p, const cJSON *o, const char *key, const char *field, pipe *q,
                      af_status (*fn)(const hfp *, const cJSON *, pipe *, const char *)) {
    if (!o || cJSON_IsNull(o)) return AF_OK;
    if (!cJSON_IsObject(o)) return af_fail(AF_ERR_FORMAT, "%s: %s: expected an object or null", p->L, field);
    if (is_type(o, "Sequence")) {
        const cJSON *a = item(o, key), *e;
        if (!cJSON_IsArray(a)) return af_fail(AF_ERR_FORMAT, "%s: %s.%s: expected an array", p->L, field, key);
        char f[96];
        int i = 0;
        cJSON_ArrayForEach(e, a) {
            snprintf(f, sizeof f, "%s.%s[%d]", field, key, i++);
            if (!cJSON_IsObject(e)) return af_fail(AF_ERR_FORMAT, "%s: %s: expected an object", p->L, f);
            AF_TRY(fn(p, e, q, f));
        }
        return AF_OK;
    }
    return fn(p, o, q, field);
}

/* One merge: "a b" or ["a", "b"]. */
static int merge_pair(const cJSON *e, af_tok_str *l, af_tok_str *r) {
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring;
        size_t n = strlen(s);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) return 0;
        *l = (af_tok_str){s, (size_t)(sp - s)};
        *r = (af_tok_str){sp + 1, n - (size_t)(sp - s) - 1};
        return 1;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2) {
        const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(a) || !cJSON_IsString(b)) return 0;
        *l = (af_tok_str){a->valuestring, strlen(a->valuestring)};
        *r = (af_tok_str){b->valuestring, strlen(b->valuestring)};
        return 1;
    }
    return 0;
}

static int id_of(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v) || floor(v->valuedouble) != v->valuedouble || !(v->valuedouble >= 0) ||
        v->valuedouble >= MAX_TOKENS)
        return 0;
    *id = (int32_t)v->valuedouble;
    return 1;
}

typedef struct build {
    af_tok_str *tok;
    int32_t *type;
    af_tok_str *merge;
} build;

/* The "model" object: a BPE with a vocabulary object and a merges array, none of the options afinar
 * lacks; *byte_fallback its flag. */
static af_status parse_model(const hfp *p, const cJSON *root, const cJSON **model, int *byte_fallback) {
    if (!cJSON_IsObject(root)) return af_fail(AF_ERR_FORMAT, "%s: not a JSON object", p->L);
    *model = item(root, "model");
    if (!cJSON_IsObject(*model)) return af_fail(AF_ERR_FORMAT, "%s: field 'model': missing or not an object", p->L);
    const cJSON *mt = item(*model, "type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "BPE")))
        return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'model.type': '%.40s' is not supported (BPE)", p->L,
                       cJSON_IsString(mt) ? mt->valuestring : "?");
    const cJSON *vocab = item(*model, "vocab"), *merges = item(*model, "merges");
    if (!cJSON_IsObject(vocab)) return af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab': missing or not an object", p->L);
    if (!cJSON_IsArray(merges)) return af_fail(AF_ERR_FORMAT, "%s: field 'model.merges': missing or not an array", p->L);
    static const char *const unsup[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (size_t i = 0; i < 3; i++) {
        const cJSON *v = item(*model, unsup[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'model.%s' is not supported", p->L, unsup[i]);
    }
    *byte_fallback = cJSON_IsTrue(item(*model, "byte_fallback"));
    return AF_OK;
}

/* The vocabulary size (largest id + 1 over vocab and added_tokens) into *n_out; ids must be dense
 * (checked before n slots are allocated). */
static af_status vocab_size(const hfp *p, const cJSON *vocab, const cJSON *added, int64_t *n_out) {
    int64_t n = 0;
    const cJSON *e;
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return af_fail(AF_ERR_FORMAT, "%s: field 'added_tokens': expected an array", p->L);
    cJSON_ArrayForEach(e, vocab) {
        int32_t id;
        if (!id_of(e, &id))
            return af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab[\"%.40s\"]': expected an id in [0, %d)", p->L,
                           e->string, MAX_TOKENS);
        if (id + 1 > n) n = id + 1;
    }
    int ai = 0;
    cJSON_ArrayForEach(e, added) {
        int32_t id;
        if (!id_of(item(e, "id"), &id) || !cJSON_IsString(item(e, "content")))
            return af_fail(AF_ERR_FORMAT, "%s: field 'added_tokens[%d]': needs an integer id and a string content",
                           p->L, ai);
        if (id + 1 > n) n = id + 1;
        ai++;
    }
    if (n < 1) return af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab': empty", p->L);
    /* ids are dense: more ids than entries means a gap (checked before allocating n slots) */
    const int64_t entries = (int64_t)cJSON_GetArraySize(vocab) + ai;
    if (n > entries)
        return af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab': largest id %lld but only %lld tokens (ids must be 0..n-1)",
                       p->L, (long long)(n - 1), (long long)entries);
    *n_out = n;
    return AF_OK;
}

/* The n tokens (vocab, then added_tokens with their types; every id once, an added token agreeing
 * with the vocab's) and the merges into b. */
static af_status fill_vocab(const hfp *p, const cJSON *vocab, const cJSON *added, const cJSON *merges, int64_t n,
                            build *b) {
    const cJSON *e;
    b->tok = af_calloc((size_t)n, sizeof *b->tok);
    b->type = af_malloc((size_t)n * sizeof *b->type);
    int nm = cJSON_GetArraySize(merges);
    b->merge = nm ? af_malloc((size_t)nm * 2 * sizeof *b->merge) : NULL;
    if (!b->tok || !b->type || (nm && !b->merge)) return af_fail(AF_ERR_NOMEM, "%s: out of memory (%lld tokens)", p->L, (long long)n);
    uint8_t *seen = af_calloc((size_t)n, 1);
    if (!seen) return af_fail(AF_ERR_NOMEM, "%s: out of memory", p->L);
    af_status st = AF_OK;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        if (seen[id]) {
            st = af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab': id %d is given to two tokens", p->L, id);
            break;
        }
        seen[id] = 1;
        b->tok[id] = (af_tok_str){e->string, strlen(e->string)};
        b->type[id] = AF_TT_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        if (st != AF_OK) break;
        int32_t id = (int32_t)item(e, "id")->valuedouble;
        const char *c = item(e, "content")->valuestring;
        if (seen[id] && (b->tok[id].len != strlen(c) || memcmp(b->tok[id].ptr, c, b->tok[id].len)))
            st = af_fail(AF_ERR_FORMAT, "%s: field 'added_tokens': id %d is '%.40s' but model.vocab has '%.40s'", p->L,
                         id, c, b->tok[id].ptr);
        seen[id] = 1;
        b->tok[id] = (af_tok_str){c, strlen(c)};
        b->type[id] = cJSON_IsTrue(item(e, "special")) ? AF_TT_CONTROL : AF_TT_USER;
    }
    for (int64_t i = 0; st == AF_OK && i < n; i++)
        if (!seen[i]) st = af_fail(AF_ERR_FORMAT, "%s: field 'model.vocab': no token has id %lld", p->L, (long long)i);
    free(seen);
    if (st != AF_OK) return st;
    int mi = 0;
    cJSON_ArrayForEach(e, merges) {
        if (!merge_pair(e, &b->merge[2 * mi], &b->merge[2 * mi + 1]))
            return af_fail(AF_ERR_FORMAT, "%s: field 'model.merges[%d]': expected \"a b\" or [\"a\", \"b\"]", p->L, mi);
        mi++;
    }
    return AF_OK;
}

/* The kind from the normalizer / pre-tokenizer pipeline q: byte-level BPE (its split regex known)
 * or SentencePiece-style BPE (Metaspace or Replace(' ', U+2581) with byte_fallback; <0xNN> tokens
 * typed as bytes); anything else is refused. */
static af_status choose_kind(const hfp *p, const cJSON *model, const pipe *q, int byte_fallback, build *b,
                             af_tok_spec *sp) {
    if (q->byte_level) {
        if (byte_fallback || q->spm_spaces)
            return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'pre_tokenizer': ByteLevel mixed with byte_fallback/Metaspace",
                           p->L);
        sp->kind = AF_TOK_GPT2;
        sp->ignore_merges = cJSON_IsTrue(item(model, "ignore_merges"));
        sp->pre = af_bpe_pre_from_regex(q->re, q->n_re);
        if (!sp->pre)
            return af_fail(AF_ERR_UNSUPPORTED,
                           "%s: field 'pre_tokenizer': this split regex sequence is not supported (gpt2, smollm, "
                           "llama3, qwen2)", p->L);
        sp->pre_len = strlen(sp->pre);
    } else if (byte_fallback && q->spm_spaces && q->n_re == 0) {
        if (cJSON_IsTrue(item(model, "ignore_merges")))
            return af_fail(AF_ERR_UNSUPPORTED, "%s: field 'model.ignore_merges': not supported with byte_fallback", p->L);
        sp->kind = AF_TOK_SPM;
        sp->add_space_prefix = q->prefix;
        sp->prefix_unless_space = q->metaspace;
        sp->prefix_each_segment = q->prefix && q->prefix_each;
        for (int32_t i = 0; i < sp->n; i++) {
            const af_tok_str s = b->tok[i];
            if (b->type[i] == AF_TT_NORMAL && s.len == 6 && !memcmp(s.ptr, "<0x", 3) && s.ptr[5] == '>')
                b->type[i] = AF_TT_BYTE;
        }
    } else {
        return af_fail(AF_ERR_UNSUPPORTED,
                       "%s: fields 'normalizer'/'pre_tokenizer'/'model.byte_fallback': neither byte-level BPE nor "
                       "SentencePiece-style BPE (Metaspace or Replace(' ', U+2581) with byte_fallback)", p->L);
    }
    return AF_OK;
}

/* post_processor: TemplateProcessing's single template decides BOS / EOS (*bos_text, *eos_text:
 * their texts, NULL when not added; *have_pp: a template was found). */
static af_status post_processor(const hfp *p, const cJSON *root, const char **bos_text, const char **eos_text,
                                int *have_pp) {
    const cJSON *pp = item(root, "post_processor");
    *have_pp = 0;
    *bos_text = *eos_text = NULL;
    for (int k = 0; pp && !cJSON_IsNull(pp) && k < 2; k++) {
        const cJSON *tp = pp;
        if (is_type(pp, "Sequence")) {
            const cJSON *x;
            tp = NULL;
            cJSON_ArrayForEach(x, item(pp, "processors")) if (is_type(x, "TemplateProcessing")) tp = x;
        }
        if (!tp || !is_type(tp, "TemplateProcessing")) break;
        const cJSON *single = item(tp, "single");
        if (!cJSON_IsArray(single))
            return af_fail(AF_ERR_FORMAT, "%s: field 'post_processor.single': expected an array", p->L);
        *have_pp = 1;
        int ns = cJSON_GetArraySize(single);
        const cJSON *first = cJSON_GetArrayItem(single, 0), *last = cJSON_GetArrayItem(single, ns - 1);
        const cJSON *fs = item(first, "SpecialToken"), *ls = item(last, "SpecialToken");
        if (fs && cJSON_IsString(item(fs, "id"))) *bos_text = item(fs, "id")->valuestring;
        if (ns > 1 && ls && cJSON_IsString(item(ls, "id"))) *eos_text = item(ls, "id")->valuestring;
        break;
    }
    return AF_OK;
}

/* tokenizer_config.json (may be NULL): its BOS / EOS texts, add_bos/add_eos when no post-processor
 * decided them, the chat template (a string, or the "default" of a list); else tmpl_file. */
static af_status read_tok_config(const hfp *p, const cJSON *cfg, const char *tmpl_file, int have_pp, af_tok_spec *sp,
                                 const char **cfg_bos, const char **cfg_eos) {
    *cfg_bos = *cfg_eos = NULL;
    if (cfg) {
        if (!cJSON_IsObject(cfg)) return af_fail(AF_ERR_FORMAT, "%s: not a JSON object", p->LC);
        *cfg_bos = tok_text(item(cfg, "bos_token"));
        *cfg_eos = tok_text(item(cfg, "eos_token"));
        if (!have_pp) {
            sp->add_bos = cJSON_IsTrue(item(cfg, "add_bos_token"));
            sp->add_eos = cJSON_IsTrue(item(cfg, "add_eos_token"));
        }
        const cJSON *ct = item(cfg, "chat_template");
        if (cJSON_IsString(ct)) {
            sp->chat_template = ct->valuestring;
        } else if (cJSON_IsArray(ct)) { /* [{"name": ..., "template": ...}]: the "default" one */
            const cJSON *x;
            cJSON_ArrayForEach(x, ct) if (cJSON_IsString(item(x, "name")) && !strcmp(item(x, "name")->valuestring, "default") &&
                                          cJSON_IsString(item(x, "template"))) sp->chat_template = item(x, "template")->valuestring;
        } else if (ct && !cJSON_IsNull(ct)) {
            return af_fail(AF_ERR_FORMAT, "%s: field 'chat_template': expected a string or a list", p->LC);
        }
    }
    if (!sp->chat_template && tmpl_file) sp->chat_template = tmpl_file;
    if (sp->chat_template) sp->chat_template_len = strlen(sp->chat_template);
    return AF_OK;
}

static af_status parse(const hfp *p, const cJSON *root, const cJSON *cfg, const char *tmpl_file, af_tokenizer *t,
                       build *b) {
    const cJSON *model = NULL;
    int byte_fallback = 0;
    AF_TRY(parse_model(p, root, &model, &byte_fallback));
    const cJSON *vocab = item(model, "vocab"), *merges = item(model, "merges"), *added = item(root, "added_tokens");
    int64_t n = 0;
    AF_TRY(vocab_size(p, vocab, added, &n));
    AF_TRY(fill_vocab(p, vocab, added, merges, n, b));

    pipe q = {0};
    AF_TRY(walk(p, item(root, "normalizer"), "normalizers", "normalizer", &q, norm_one));
    AF_TRY(walk(p, item(root, "pre_tokenizer"), "pretokenizers", "pre_tokenizer", &q, pre_one));

    af_tok_spec sp = {0};
    sp.label = p->L;
    sp.n = (int32_t)n;
    sp.tok = b->tok;
    sp.type = b->type;
    sp.n_merges = cJSON_GetArraySize(merges);
    sp.merge = b->merge;
    sp.bos = sp.eos = sp.unk = sp.eot = sp.eom = -1;
    sp.source = ", from tokenizer.json";
    AF_TRY(choose_kind(p, model, &q, byte_fallback, b, &sp));
    const cJSON *unk = item(model, "unk_token"); /* resolved to an id after the build */
    int have_pp = 0;
    const char *bos_text = NULL, *eos_text = NULL;
    AF_TRY(post_processor(p, root, &bos_text, &eos_text, &have_pp));
    sp.add_bos = bos_text != NULL;
    sp.nfc = q.nfc;
    sp.add_eos = eos_text != NULL;
    const char *cfg_bos = NULL, *cfg_eos = NULL;
    AF_TRY(read_tok_config(p, cfg, tmpl_file, have_pp, &sp, &cfg_bos, &cfg_eos));

    AF_TRY(af_tok_build(t, &sp));
    /* special ids by text, now that the vocabulary hash exists */
    const char *bt = bos_text ? bos_text : cfg_bos, *et = cfg_eos ? cfg_eos : eos_text;
    t->bos = bt ? af_strmap_get(&t->vocab, t->text, t->off, bt, strlen(bt)) : -1;
    t->eos = et ? af_strmap_get(&t->vocab, t->text, t->off, et, strlen(et)) : -1;
    t->unk = cJSON_IsString(unk) ? af_strmap_get(&t->vocab, t->text, t->off, unk->valuestring, strlen(unk->valuestring))
                                 : -1;
    if (sp.add_bos && t->bos < 0)
        return af_fail(AF_ERR_FORMAT, "%s: field 'post_processor': BOS token '%.40s' is not in the vocabulary", p->L,
                       bt ? bt : "");
    if (t->unk >= 0 && t->type[t->unk] == AF_TT_NORMAL) t->type[t->unk] = AF_TT_UNKNOWN;
    if (t->eos >= 0) t->eog[t->eos] = 1;
    return AF_OK;
}

af_status af_tokenizer_load_hf_json(const char *json, size_t len, const char *cfg_json, size_t cfg_len,
                                    const char *chat_template, const char *label, const char *cfg_label,
                                    af_tokenizer **out) {
    if (!json || !out) return af_fail(AF_ERR_INVALID_ARG, "af_tokenizer_load_hf_json: NULL argument");
    *out = NULL;
    hfp p = {label ? label : "tokenizer.json", cfg_label ? cfg_label : "tokenizer_config.json"};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) return af_fail(AF_ERR_FORMAT, "%s: malformed JSON at byte %zu", p.L, end ? (size_t)(end - json) : 0);
    cJSON *cfg = NULL;
    if (cfg_json) {
        cfg = cJSON_ParseWithLengthOpts(cfg_json, cfg_len, &end, 0);
        if (!cfg) {
            cJSON_Delete(root);
            return af_fail(AF_ERR_FORMAT, "%s: malformed JSON at byte %zu", p.LC, end ? (size_t)(end - cfg_json) : 0);
        }
    }
    af_tokenizer *t = af_calloc(1, sizeof *t);
    build b = {0};
    af_status st = t ? parse(&p, root, cfg, chat_template, t, &b) : af_fail(AF_ERR_NOMEM, "tokenizer: out of memory");
    free(b.tok);
    free(b.type);
    free(b.merge);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (st != AF_OK) {
        af_tokenizer_free(t);
        return st;
    }
    *out = t;
    return AF_OK;
}

af_status af_tokenizer_load_hf(const char *dir, af_tokenizer **out) {
    if (!dir || !out) return af_fail(AF_ERR_INVALID_ARG, "af_tokenizer_load_hf: NULL argument");
    *out = NULL;
    char *js = NULL, *cj = NULL, *tj = NULL;
    size_t jl = 0, cl = 0, tl = 0;
    af_status st = af_hf_read_json_file(dir, "tokenizer.json", (size_t)512 << 20, &js, &jl);
    if (st == AF_ERR_NOT_FOUND) st = af_fail(AF_ERR_NOT_FOUND, "%s: no tokenizer.json", dir);
    if (st == AF_OK) {
        st = af_hf_read_json_file(dir, "tokenizer_config.json", (size_t)64 << 20, &cj, &cl);
        if (st == AF_ERR_NOT_FOUND) { af_clear_error(); st = AF_OK; }
    }
    if (st == AF_OK) {
        st = af_hf_read_json_file(dir, "chat_template.jinja", (size_t)16 << 20, &tj, &tl);
        if (st == AF_ERR_NOT_FOUND) { af_clear_error(); st = AF_OK; }
    }
    char label[600], clabel[600];
    snprintf(label, sizeof label, "%s/tokenizer.json", dir);
    snprintf(clabel, sizeof clabel, "%s/tokenizer_config.json", dir);
    if (st == AF_OK) st = af_tokenizer_load_hf_json(js, jl, cj, cl, tj, label, clabel, out);
    free(js);
    free(cj);
    free(tj);
    return st;
}
