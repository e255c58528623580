/*
 * fuzz_tok_json.c — libFuzzer target for the tokenizer.json front end (src/tokenizer/tok_hf.c)
 * and the encoders it feeds. The input is the whole tokenizer.json text (no tokenizer_config.json).
 * After a successful load: a fixed set of strings (ASCII, digits, spaces, special-looking tokens,
 * invalid UTF-8, text not in NFC) is encoded with and without special tokens and decoded again. Oracles: every id
 * inside the vocabulary, decode succeeds. Returns af_tokenizer_load_hf_json's status.
 */
#include "fuzz/fuzz_common.h"
#include "tokenizer/tokenizer.h"

af_status fz_tok_json_one(const uint8_t *data, size_t size) {
    af_tokenizer *t = NULL;
    af_status st = af_tokenizer_load_hf_json((const char *)data, size, NULL, 0, NULL, "fuzz/tokenizer.json", NULL, &t);
    if (st != AF_OK) {
        af_clear_error();
        return st;
    }
    static const char *const texts[] = {"Hello world", "  a  b\n\n12345 x", "<s>ab</s><|im_end|>", "\xC3\x28\xFF ok",
                                        "\xE2\x96\x81\xE2\x96\x81x", "Cafe\xCC\x81 \xE1\x84\x80\xE1\x85\xA1 (not NFC)", ""};
    const int32_t nv = af_tokenizer_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (af_tokenize(t, texts[i], strlen(texts[i]), sp, sp, &ids, &n) == AF_OK) {
                for (size_t k = 0; k < n; k++) FZ_ASSERT(ids[k] >= 0 && ids[k] < nv);
                char *back = NULL;
                FZ_ASSERT(af_detokenize(t, ids, n, 1, &back) == AF_OK);
                free(back);
            }
            free(ids);
            af_clear_error();
        }
    (void)af_tokenizer_describe(t);
    af_tokenizer_free(t);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_tok_json_one(data, size);
    return 0;
}
#endif
