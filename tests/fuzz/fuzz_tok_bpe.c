/*
 * fuzz_tok_bpe.c — libFuzzer target for the tokenizer's encode on arbitrary bytes, gpt2 byte-level BPE (SmolLM2 vocabulary):
 * src/tokenizer/tokenizer.c (special-token split, invalid UTF-8 cut-out), bpe.c (PCRE2 pre-tokenizer,
 * merge queue).
 * The tokenizer is built once per process (fuzz_tok.h: real model file if present, else a small
 * generated vocabulary). Input: byte 0 = flags (bit 0 add_special, bit 1 parse_special, bit 2
 * render_special for the detokenize check), the rest is the text. Oracles: fuzz_tok.h
 * fz_tok_encode (ids in range, detokenize works, round trip where it must hold).
 */
#include "fuzz/fuzz_tok.h"

af_status fz_tok_bpe_one(const uint8_t *data, size_t size) {
    int real = 0;
    const af_tokenizer *t = fz_tok_get(FZ_TOK_BPE, &real);
    FZ_ASSERT(t != NULL);
    if (!t || size == 0) return AF_OK;
    return fz_tok_encode(t, data[0], data + 1, size - 1, 1);
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    int real = 0;
    if (!fz_tok_get(FZ_TOK_BPE, &real)) return 1;
    fprintf(stderr, "fuzz_tok_bpe: %s tokenizer: %s\n", real ? "model" : "synthetic",
            af_tokenizer_describe(fz_tok_get(FZ_TOK_BPE, NULL)));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_tok_bpe_one(data, size);
    return 0;
}
#endif
