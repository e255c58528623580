/*
 * fuzz_tok_bpe.c — libFuzzer target for the tokenizer's encode on arbitrary bytes, gpt2 byte-level BPE (SmolLM2 vocabulary):
 * src/tokenizer/tokenizer.c (special-token split, invalid UTF-8 cut-out), bpe.c (PCRE2 pre-tokenizer,
 * merge queue).
 * The tokenizer is built once per process (fuzz_tok.h: real model file if present, else a small
 * generated vocabulary). Input: byte 0 = flags (bit 0 add_special, bit 1 parse_special, bit 2
 * render_special for the detokenize check), the rest is the text. Oracles: fuzz_tok.h
 * fz_tok_encode (ids in range, detokenize works, round trip where it must hold); the body is
 * fuzz_tok.h fz_tok_one / fz_tok_init.
 */
#include "fuzz/fuzz_tok.h"

af_status fz_tok_bpe_one(const uint8_t *data, size_t size) {
    return fz_tok_one(FZ_TOK_BPE, data, size);
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    return fz_tok_init(FZ_TOK_BPE, "fuzz_tok_bpe");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_tok_bpe_one(data, size);
    return 0;
}
#endif
