/*
 * fuzz_gguf_tok.c — libFuzzer target for the tokenizer metadata loading path: a fuzzed GGUF's
 * tokenizer.* keys (model, pre, tokens, token_type, scores, merges, special ids, add_* flags,
 * chat_template) through af_gguf_open + af_tokenizer_load (src/tokenizer/tokenizer.c, bpe.c
 * af_bpe_load / load_merges, spm.c decode tables). The input is the whole GGUF file (memfd).
 * When the tokenizer loads: describe, chat template, af_chat_format_tok, token lookups, every
 * token's bytes, and fz_tok_encode (ids in range, detokenize) on fixed strings and on the
 * input's last 64 bytes. Returns af_tokenizer_load's status (or af_gguf_open's when it fails).
 */
#include "fuzz/fuzz_tok.h"

af_status fz_gguf_tok_one(const uint8_t *data, size_t size) {
    af_tokenizer *t = NULL;
    af_status st = fz_tok_from_bytes(data, size, &t);
    if (st != AF_OK) {
        af_clear_error();
        return st;
    }
    int32_t nv = af_tokenizer_vocab_size(t);
    FZ_ASSERT(nv > 0);
    (void)af_tokenizer_describe(t);
    (void)af_tokenizer_chat_template(t);
    char *chat = NULL;
    if (af_chat_format_tok(t, NULL, " hello ", &chat) == AF_OK) FZ_ASSERT(chat != NULL);
    free(chat);
    chat = NULL;
    if (af_chat_format_tok(t, "sys", "user", &chat) == AF_OK) free(chat);
    FZ_ASSERT(af_token_bos(t) < nv && af_token_eos(t) < nv);
    char buf[64];
    for (int32_t i = 0; i < nv && i < 4096; i++) {
        int k = af_token_to_bytes(t, i, 1, buf, sizeof buf);
        FZ_ASSERT(k >= 0);
        (void)af_token_is_eog(t, i);
    }
    FZ_ASSERT(af_token_to_bytes(t, nv, 1, buf, sizeof buf) == -1);
    (void)af_tokenizer_find(t, "<|im_start|>", 12);
    static const char *const texts[] = {"Hello world! 123 4567", "  two  spaces\n\nnew\tline", "caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80",
                                        "bad \xff\xc0\x80 utf8 \xed\xa0\x80", "<|im_start|>user<|im_end|><start_of_turn>"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        (void)fz_tok_encode(t, (unsigned)i, (const uint8_t *)texts[i], strlen(texts[i]), 0);
    size_t tail = size < 64 ? size : 64;
    (void)fz_tok_encode(t, 3, data + size - tail, tail, 0);
    af_tokenizer_free(t);
    af_clear_error();
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_gguf_tok_one(data, size);
    return 0;
}
#endif
