/*
 * tokenizer.h — tokenizers read from GGUF metadata (tokenizer.ggml.*), FORMATS.md §6.
 *  - "gpt2": byte-level BPE (GPT-2 byte-to-unicode map, merge ranks from tokenizer.ggml.merges),
 *    pre-tokenizer regex chosen by tokenizer.ggml.pre, run with PCRE2 (UTF + UCP).
 *  - "llama": SentencePiece-style BPE by scores with <0xNN> byte fallback (Gemma) — optional.
 * Special / user-defined tokens are matched as literal strings before BPE (longest first).
 * The public encode/decode functions are declared in afinar.h (af_tokenize, af_detokenize, ...).
 */
#ifndef AF_TOKENIZER_H
#define AF_TOKENIZER_H

#include "formats/gguf.h"

/* Build a tokenizer from an open GGUF. Copies everything it needs (does not borrow `g`).
 * `*out`: free with af_tokenizer_free().
 * Errors: AF_ERR_NOT_FOUND (no tokenizer.ggml.model / tokens), AF_ERR_UNSUPPORTED (model kind or
 * pre-tokenizer not supported), AF_ERR_FORMAT (inconsistent arrays, bad merges), AF_ERR_NOMEM. */
af_status af_tokenizer_load(const af_gguf *g, af_tokenizer **out);
void af_tokenizer_free(af_tokenizer *tok);

/* Short description, e.g. "gpt2 BPE (pre=smollm), 49152 tokens, 48900 merges". Borrowed. */
const char *af_tokenizer_describe(const af_tokenizer *tok);

/* The chat template string from the GGUF (tokenizer.chat_template), or NULL. Borrowed. */
const char *af_tokenizer_chat_template(const af_tokenizer *tok);

/* Token id of an exact token text, or -1. */
int32_t af_tokenizer_find(const af_tokenizer *tok, const char *text, size_t len);

#endif /* AF_TOKENIZER_H */
