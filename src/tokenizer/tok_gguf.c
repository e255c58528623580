/*
 * tok_gguf.c — a loaded tokenizer written back as GGUF tokenizer.ggml.* metadata (tokenizer.h
 * af_tokenizer_gguf_write; `afinar convert`), in the form llama.cpp's convert_hf_to_gguf.py writes
 * and llama.cpp's llama-vocab.cpp reads (docs/FORMATS.md §6.1):
 *   byte-level BPE      model "gpt2", pre = the pre-tokenizer's llama.cpp name, tokens (byte-level
 *                       spelling), token_type, merges ("left right", by rank)
 *   SentencePiece-style model "llama" (SPM: merges by piece score; the score of a piece made by a merge
 *                       is -(rank of its first merge), others -1e9) or "gemma4" (BPE over the
 *                       U+2581 spelling, arch gemma4), tokens, scores, token_type, merges, and
 *                       add_space_prefix
 * plus bos / eos / unknown / padding ids, add_bos_token, add_eos_token and the chat template.
 */
#include "formats/gguf_write.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct merge_ent {
    int32_t rank, l, r, res;
} merge_ent;

static int by_rank(const void *a, const void *b) {
    const merge_ent *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The merges in rank order (those whose pieces are tokens: the others were dropped at load). */
static af_status collect_merges(const af_tokenizer *t, merge_ent **out, size_t *n) {
    *out = NULL;
    *n = 0;
    const af_pairmap *m = &t->merges;
    if (!m->keys) return AF_OK;
    size_t cnt = 0;
    for (uint64_t i = 0; i <= m->mask; i++) cnt += m->keys[i] != UINT64_MAX;
    merge_ent *e = af_malloc((cnt ? cnt : 1) * sizeof *e);
    if (!e) return af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (merges)");
    size_t k = 0;
    for (uint64_t i = 0; i <= m->mask; i++)
        if (m->keys[i] != UINT64_MAX)
            e[k++] = (merge_ent){m->rank[i], (int32_t)(m->keys[i] >> 32), (int32_t)(uint32_t)m->keys[i], m->res[i]};
    qsort(e, k, sizeof *e, by_rank);
    *out = e;
    *n = k;
    return AF_OK;
}

/* llama.cpp's name of one of bpe.c's pre-tokenizers (llama-vocab.cpp tokenizer_pre). */
static const char *llamacpp_pre(const char *ours) {
    if (!strcmp(ours, "llama3")) return "llama-bpe";
    if (!strcmp(ours, "gpt2")) return "gpt-2";
    return ours; /* default, smollm, llama-bpe, qwen2 */
}

static af_status add_id(af_gguf_writer *w, const char *key, int32_t id) {
    return id >= 0 ? af_gguf_writer_add_u32(w, key, (uint32_t)id) : AF_OK;
}

af_status af_tokenizer_gguf_write(const af_tokenizer *t, af_gguf_writer *w, const char *arch, int32_t pad_id) {
    if (!t || !w || !arch) return af_fail(AF_ERR_INVALID_ARG, "af_tokenizer_gguf_write: NULL argument");
    const int32_t n = t->n_vocab;
    const int spm = t->kind == AF_TOK_SPM;
    const char *model = !spm ? "gpt2" : !strcmp(arch, "gemma4") ? "gemma4" : "llama";
    merge_ent *mg = NULL;
    size_t n_mg = 0;
    const char **toks = af_malloc((size_t)n * sizeof *toks);
    char *tbuf = af_malloc((size_t)t->off[n] + (size_t)n);
    int32_t *types = af_malloc((size_t)n * sizeof *types);
    float *scores = spm ? af_malloc((size_t)n * sizeof *scores) : NULL;
    char **mstr = NULL;
    char *mbuf = NULL;
    af_status st = (toks && tbuf && types && (!spm || scores)) ? AF_OK
                                                               : af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (%d tokens)", n);
    if (st == AF_OK) st = collect_merges(t, &mg, &n_mg);
    if (st == AF_OK) {
        size_t pos = 0;
        for (int32_t i = 0; i < n; i++) { /* NUL-terminated copies (token texts never hold NUL in practice) */
            const size_t len = t->off[i + 1] - t->off[i];
            memcpy(tbuf + pos, t->text + t->off[i], len);
            tbuf[pos + len] = 0;
            toks[i] = tbuf + pos;
            pos += len + 1;
            types[i] = t->type[i];
        }
        if (spm) {
            int have = 0;
            for (int32_t i = 0; t->score && i < n; i++) have |= t->score[i] != 0;
            for (int32_t i = 0; i < n; i++) scores[i] = have ? t->score[i] : -1e9f;
            for (size_t k = n_mg; !have && k-- > 0;) scores[mg[k].res] = -(float)mg[k].rank; /* lowest rank wins */
        }
        mstr = af_malloc((n_mg ? n_mg : 1) * sizeof *mstr);
        size_t total = 0;
        for (size_t k = 0; k < n_mg; k++)
            total += (t->off[mg[k].l + 1] - t->off[mg[k].l]) + (t->off[mg[k].r + 1] - t->off[mg[k].r]) + 2;
        mbuf = af_malloc(total ? total : 1);
        if (!mstr || !mbuf) st = af_fail(AF_ERR_NOMEM, "tokenizer: out of memory (merges)");
        size_t p = 0;
        for (size_t k = 0; st == AF_OK && k < n_mg; k++) {
            const size_t ll = t->off[mg[k].l + 1] - t->off[mg[k].l], rl = t->off[mg[k].r + 1] - t->off[mg[k].r];
            mstr[k] = mbuf + p;
            memcpy(mbuf + p, t->text + t->off[mg[k].l], ll);
            mbuf[p + ll] = ' ';
            memcpy(mbuf + p + ll + 1, t->text + t->off[mg[k].r], rl);
            mbuf[p + ll + 1 + rl] = 0;
            p += ll + rl + 2;
        }
    }
    if (st == AF_OK) st = af_gguf_writer_add_str(w, "tokenizer.ggml.model", model);
    if (st == AF_OK && !spm) st = af_gguf_writer_add_str(w, "tokenizer.ggml.pre", llamacpp_pre(t->pre_name));
    if (st == AF_OK) st = af_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    if (st == AF_OK && spm) st = af_gguf_writer_add_arr(w, "tokenizer.ggml.scores", AF_GGUF_FLOAT32, scores, (uint64_t)n);
    if (st == AF_OK) st = af_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", AF_GGUF_INT32, types, (uint64_t)n);
    if (st == AF_OK && n_mg)
        st = af_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mstr, (uint64_t)n_mg);
    if (st == AF_OK) st = add_id(w, "tokenizer.ggml.bos_token_id", t->bos);
    if (st == AF_OK) st = add_id(w, "tokenizer.ggml.eos_token_id", t->eos);
    if (st == AF_OK) st = add_id(w, "tokenizer.ggml.unknown_token_id", t->unk);
    if (st == AF_OK) st = add_id(w, "tokenizer.ggml.eot_token_id", t->eot);
    if (st == AF_OK && pad_id >= 0 && pad_id < n) st = add_id(w, "tokenizer.ggml.padding_token_id", pad_id);
    if (st == AF_OK) st = af_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    if (st == AF_OK) st = af_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", t->add_eos);
    if (st == AF_OK && spm) st = af_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    if (st == AF_OK && t->chat_template) st = af_gguf_writer_add_str(w, "tokenizer.chat_template", t->chat_template);
    free(toks);
    free(tbuf);
    free(types);
    free(scores);
    free(mg);
    free(mstr);
    free(mbuf);
    return st;
}
