/*
 * tokenizer.h — tokenizers read from GGUF metadata (tokenizer.ggml.*), docs/FORMATS.md §6.
 *  - "gpt2": byte-level BPE (GPT-2 byte-to-unicode map, merge ranks from tokenizer.ggml.merges),
 *    pre-tokenizer regex chosen by tokenizer.ggml.pre, run with PCRE2 (UTF + UCP).
 *    Supported pre values: default, gpt2, smollm, llama3, llama-bpe, qwen2 (bpe.c).
 *  - "llama": SentencePiece-style BPE with <0xNN> byte fallback (Gemma), spm.c.
 * Special / user-defined tokens are matched as literal strings before BPE (leftmost, longest
 * first; control tokens only with parse_special, user-defined ones always).
 * Reference behaviour: the Hugging Face fast tokenizer (tokenizers 0.23) of the same vocabulary;
 * tests/test_tokenizer.c requires identical ids on 1160 strings for SmolLM2 and Gemma 3.
 * Known consequence of HF parity: a byte whose byte-level symbol is missing from a gpt2 vocabulary
 * (SmolLM2 lacks 21, e.g. 0x04, 0xC0, 0xFF) produces no token, as in HF.
 * Invalid UTF-8 bytes are cut out before pre-tokenization and emitted as one byte token each.
 * The public encode/decode functions are declared in afinar.h (af_tokenize, af_detokenize, ...);
 * they are thread-safe on a shared tokenizer (no mutable state after load).
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

/* Token id of an exact token text (as spelled in the GGUF; except that in "llama" vocabularies
 * tokens made only of spaces are respelled with U+2581, e.g. "▁▁"), or -1. */
int32_t af_tokenizer_find(const af_tokenizer *tok, const char *text, size_t len);

/* Chat prompt for one (optional) system turn and one user turn, ready for generation; the engine
 * behind af_chat_format(). Family chosen from tokenizer.chat_template ("<|im_start|>" -> ChatML,
 * "<start_of_turn>" -> Gemma), or, when the file has no template, from the vocabulary.
 *  ChatML: "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
 *          "<|im_start|>assistant\n"; with system == NULL the template's default system prompt is
 *          used when it has one (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
 *          Hugging Face"), else the system turn is left out.
 *  Gemma:  "<start_of_turn>user\n{system + "\n\n" if system}{trim(user)}<end_of_turn>\n"
 *          "<start_of_turn>model\n" (no "<bos>": af_tokenize adds it).
 * `system` may be NULL (no system turn); `user` must not be. `*out`: malloc'ed, NUL-terminated,
 * caller frees. Errors: AF_ERR_INVALID_ARG, AF_ERR_UNSUPPORTED (unknown template), AF_ERR_NOMEM. */
af_status af_chat_format_tok(const af_tokenizer *tok, const char *system, const char *user, char **out);

#endif /* AF_TOKENIZER_H */
