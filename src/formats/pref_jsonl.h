/*
 * pref_jsonl.h — preference pairs (chosen / rejected) in the dataset formats of Hugging Face TRL
 * (https://huggingface.co/docs/trl/dataset_formats, "preference"), one JSON object per line:
 *   explicit prompt          {"prompt": "...", "chosen": "...", "rejected": "..."}
 *   implicit prompt          {"chosen": "...", "rejected": "..."}
 *   conversational           {"prompt": [messages], "chosen": [messages], "rejected": [messages]}
 *   conversational implicit  {"chosen": [messages], "rejected": [messages]}
 * or CSV / TSV with the columns prompt (optional), chosen, rejected (strings only).
 *
 * Each pair becomes TWO causal-LM examples of the corpus (formats/lm_jsonl.h): example 2i = the
 * prompt with the chosen completion, 2i + 1 = the prompt with the rejected completion, as
 * "prompt/completion" (strings) or "prompt/completion (messages)" (lists), so the causal-LM reader
 * renders and tokenizes them (loss targets: the completion / its assistant turns).
 *
 * Implicit prompt (TRL's extract_prompt): the longest common prefix of chosen and rejected —
 * characters of strings (a space just before the first difference goes to the completions; the
 * cut never splits a UTF-8 character), whole messages of lists (equal role and content). When
 * one side is a prefix of the other (or they are equal), the prompt stops one element before the
 * shorter side's end, as TRL's loop does, so both completions keep at least that last element.
 *
 * Rules (AF_ERR_FORMAT "FILE:LINE: field 'F': ..."): 'chosen' and 'rejected' both present, both
 * strings or both message lists; 'prompt', when present, of the same kind; message lists as
 * lm_jsonl.h checks them, and each completion (after the prompt) holds an assistant message;
 * every line of a file has the format of the first; a line with 'completion', 'messages' or
 * 'text' but no 'chosen' names --task causal-lm; other keys are ignored.
 * Parsing only (no tokenizer): linked into the fuzz targets.
 */
#ifndef AF_PREF_JSONL_H
#define AF_PREF_JSONL_H

#include "formats/lm_jsonl.h"

typedef enum af_pref_format {
    AF_PREF_EXPLICIT = 1,      /* prompt, chosen, rejected strings */
    AF_PREF_IMPLICIT = 2,      /* chosen, rejected strings: the prompt is their common prefix */
    AF_PREF_CHAT = 3,          /* prompt, chosen, rejected message lists */
    AF_PREF_CHAT_IMPLICIT = 4  /* chosen, rejected message lists: the prompt is their common first messages */
} af_pref_format;

/* "prompt/chosen/rejected", "chosen/rejected (implicit prompt)", "prompt/chosen/rejected (messages)",
 * "chosen/rejected (messages, implicit prompt)". */
const char *af_pref_format_name(af_pref_format f);

/* Read a preference file (delim as af_lm_corpus_read_as: 0 JSON Lines, ',' CSV, '\t' TSV; -1: from
 * the file name, af_data_file_delim) into a corpus of 2n examples (pair i: examples 2i chosen and
 * 2i + 1 rejected, both with the pair's line number); *fmt (may be NULL) the file's format.
 * max_line_bytes 0: AF_JSONL_DEFAULT_MAX_LINE. `*out`: free with af_lm_corpus_free.
 * Errors: AF_ERR_IO (cannot open), AF_ERR_FORMAT (as in the header comment, invalid JSON, mixed
 * formats "FILE:LINE: line is 'X' but line N is 'Y' (one format per file)", an empty file),
 * AF_ERR_RANGE (more than INT32_MAX / 2 - 1 pairs), AF_ERR_NOMEM. */
af_status af_pref_corpus_read(const char *path, int delim, size_t max_line_bytes, af_lm_corpus **out,
                              af_pref_format *fmt);

#endif /* AF_PREF_JSONL_H */
