/*
 * fuzz_lm_jsonl.c — libFuzzer target for the causal-LM JSONL reader and the chat renderer
 * (src/formats/lm_jsonl.c: af_lm_corpus_read; src/tokenizer/chat.c: af_chat_render).
 * Input: byte 0 bit 0 = max_line_bytes 256 (else the 16 MiB default), bit 1 = add the generation
 * prompt; the rest is the file (put in a memfd). Oracles on success: n > 0, one format for every
 * example, line numbers increasing, string lengths match, roles valid, messages hold an assistant
 * turn (conversational p/c: in the completion, after a non-empty prompt); every conversation
 * renders with ChatML and with Gemma (AF_OK, or AF_ERR_FORMAT for Gemma's alternation rule), the
 * pieces lie inside the text in order, a target piece's head is inside it. No tokenizer is used
 * (tok NULL: no default system prompt, no BOS). Returns af_lm_corpus_read's status.
 * The same file also goes through the preference reader (src/formats/pref_jsonl.c:
 * af_pref_corpus_read); oracles on success: an even n > 0, the two sides of a pair share their line
 * and format, lines increase, string lengths match, a conversational side's completion (after its
 * prompt messages) holds an assistant turn.
 */
#include "fuzz/fuzz_common.h"
#include "formats/lm_jsonl.h"
#include "formats/pref_jsonl.h"
#include "tokenizer/tokenizer.h"

static void fz_pref_check(const char *path) {
    af_lm_corpus *c = NULL;
    if (af_pref_corpus_read(path, 0, 0, &c, NULL) != AF_OK) return;
    FZ_ASSERT(c->n > 0 && c->n % 2 == 0);
    int32_t prev = 0;
    for (int32_t i = 0; i < c->n; i++) {
        const af_lm_example *e = &c->ex[i];
        FZ_ASSERT(e->format == c->ex[i & ~1].format && e->line_no == c->ex[i & ~1].line_no);
        if (i % 2 == 0) {
            FZ_ASSERT(e->line_no > prev);
            prev = e->line_no;
        }
        if (e->format == AF_LM_PROMPT_COMPLETION) {
            FZ_ASSERT(e->text && strlen(e->text) == e->text_len && e->completion && strlen(e->completion) == e->completion_len);
            continue;
        }
        FZ_ASSERT(e->format == AF_LM_CHAT_PC && e->msgs && e->n_prompt_msgs >= 0 && e->n_prompt_msgs < e->n_msgs);
        int asst = 0;
        for (int32_t k = 0; k < e->n_msgs; k++) {
            FZ_ASSERT(strlen(e->msgs[k].content) == e->msgs[k].len);
            asst |= k >= e->n_prompt_msgs && e->msgs[k].role == AF_ROLE_ASSISTANT;
        }
        FZ_ASSERT(asst);
    }
    af_lm_corpus_free(c);
}

static void fz_lm_check_doc(const af_chat_doc *d) {
    FZ_ASSERT(d->text && strlen(d->text) <= d->len);
    size_t end = 0;
    for (int32_t k = 0; k < d->n; k++) {
        const af_chat_piece *p = &d->pc[k];
        FZ_ASSERT(p->off >= end && p->off + p->len <= d->len);
        FZ_ASSERT(p->len > 0 || p->id >= 0);
        FZ_ASSERT(p->head <= p->len);
        end = p->off + p->len;
    }
}

af_status fz_lm_jsonl_one(const uint8_t *data, size_t size) {
    if (size == 0) return AF_ERR_INVALID_ARG;
    unsigned flags = data[0];
    char path[64];
    int fd = fz_memfd(data + 1, size - 1, path);
    if (fd < 0) return AF_ERR_IO;
    fz_pref_check(path);
    af_lm_corpus *c = NULL;
    af_status st = af_lm_corpus_read(path, flags & 1 ? 256 : 0, &c);
    if (st == AF_OK) {
        FZ_ASSERT(c->n > 0);
        int32_t prev = 0;
        for (int32_t i = 0; i < c->n; i++) {
            const af_lm_example *e = &c->ex[i];
            FZ_ASSERT(e->format == c->format && e->line_no > prev);
            prev = e->line_no;
            if (e->format == AF_LM_TEXT || e->format == AF_LM_PROMPT_COMPLETION) {
                FZ_ASSERT(e->text && strlen(e->text) == e->text_len);
                FZ_ASSERT((e->format == AF_LM_TEXT) == (e->completion == NULL));
                if (e->completion) FZ_ASSERT(strlen(e->completion) == e->completion_len);
                continue;
            }
            FZ_ASSERT(e->n_msgs > 0 && e->msgs);
            FZ_ASSERT(e->format == AF_LM_CHAT_PC ? e->n_prompt_msgs > 0 && e->n_prompt_msgs < e->n_msgs
                                                  : e->n_prompt_msgs == 0);
            int asst = 0;
            for (int32_t k = 0; k < e->n_msgs; k++) {
                FZ_ASSERT(e->msgs[k].role >= AF_ROLE_SYSTEM && e->msgs[k].role <= AF_ROLE_ASSISTANT);
                FZ_ASSERT(strlen(e->msgs[k].content) == e->msgs[k].len);
                asst |= k >= e->n_prompt_msgs && e->msgs[k].role == AF_ROLE_ASSISTANT;
            }
            FZ_ASSERT(asst);
            for (int fam = AF_CHAT_CHATML; fam <= AF_CHAT_GEMMA; fam++) {
                af_chat_doc d = {0};
                af_status rs = af_chat_render(NULL, (af_chat_family)fam, e->msgs, e->n_msgs, e->n_prompt_msgs,
                                              (flags >> 1) & 1, &d);
                FZ_ASSERT(rs == AF_OK || (fam == AF_CHAT_GEMMA && rs == AF_ERR_FORMAT));
                if (rs == AF_OK) {
                    fz_lm_check_doc(&d);
                    int tgt = 0;
                    for (int32_t k = 0; k < d.n; k++) tgt |= d.pc[k].target;
                    FZ_ASSERT(tgt); /* every accepted conversation has a target turn */
                }
                af_chat_doc_free(&d);
            }
        }
        af_lm_corpus_free(c);
    }
    af_clear_error();
    close(fd);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_lm_jsonl_one(data, size);
    return 0;
}
#endif
