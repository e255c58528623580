/*
 * lm_jsonl.h — causal-LM (SFT) examples in JSON Lines, in the dataset formats of Hugging Face TRL
 * (https://huggingface.co/docs/trl/dataset_formats), one JSON object per line:
 *   language modelling      {"text": "..."}
 *   prompt / completion     {"prompt": "...", "completion": "..."}
 *   conversational          {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
 *   conversational p/c      {"prompt": [messages...], "completion": [messages...]}
 * Parsing only (no tokenizer): the pure part of the causal-LM reader, linked into the fuzz
 * targets. Rendering and tokenization: tokenizer/chat.c; the data set: train/lm_data.c.
 *
 * Rules (each violation is AF_ERR_FORMAT with "FILE:LINE: field 'F': ..."):
 *  - blank lines (spaces, tabs, CR) are skipped; every other line is one JSON object;
 *  - the format is decided per line by its keys; exactly one of "text", "messages",
 *    "prompt"+"completion" may be present ("a line mixing formats"), and every line of a file has
 *    the format of the first one (the error names both lines' formats);
 *  - "label"/"labels" on a line is refused (classification data: use --task classification); other
 *    keys are ignored;
 *  - text, prompt and completion are strings, or (prompt and completion) both lists of messages;
 *  - a message is an object with a string "role" (system, user or assistant) and a string
 *    "content"; messages need at least one assistant turn (for conversational p/c: in the
 *    completion); an empty list is refused;
 *  - a "\u0000" escape ends a string there (cJSON strings are NUL-terminated).
 * Memory: the strings of every line are kept (about the file size) plus O(messages) bookkeeping;
 * lines longer than max_line_bytes are refused before they are read whole.
 */
#ifndef AF_LM_JSONL_H
#define AF_LM_JSONL_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* AF_ROLE_TOOL: a tool result (OpenAI "role": "tool"); rendered only by the chat layouts that have
 * tool turns (tokenizer.h af_chat_render_ex); the JSONL reader never produces it. */
typedef enum af_chat_role { AF_ROLE_SYSTEM = 0, AF_ROLE_USER = 1, AF_ROLE_ASSISTANT = 2, AF_ROLE_TOOL = 3 } af_chat_role;

/* "system", "user", "assistant", "tool". */
const char *af_chat_role_name(af_chat_role r);

/* One chat message; `content[0..len)` is UTF-8, borrowed (NUL at content[len]). */
typedef struct af_chat_msg {
    af_chat_role role;
    const char *content;
    size_t len;
} af_chat_msg;

typedef enum af_lm_format {
    AF_LM_TEXT = 1,              /* {"text"} */
    AF_LM_PROMPT_COMPLETION = 2, /* {"prompt": string, "completion": string} */
    AF_LM_MESSAGES = 3,          /* {"messages": [...]} */
    AF_LM_CHAT_PC = 4            /* {"prompt": [...], "completion": [...]} */
} af_lm_format;

/* "text", "prompt/completion", "messages", "prompt/completion (messages)". */
const char *af_lm_format_name(af_lm_format f);

/* One parsed line. All strings live in `buf` (owned, one allocation). */
typedef struct af_lm_example {
    af_lm_format format;
    int32_t line_no;        /* 1-based source line */
    const char *text;       /* TEXT: the text; PROMPT_COMPLETION: the prompt; else NULL */
    size_t text_len;
    const char *completion; /* PROMPT_COMPLETION: the completion; else NULL */
    size_t completion_len;
    af_chat_msg *msgs;      /* MESSAGES / CHAT_PC: [n_msgs] (owned); else NULL */
    int32_t n_msgs;
    int32_t n_prompt_msgs;  /* CHAT_PC: msgs[0..n_prompt_msgs) are the prompt, the rest the completion;
                               MESSAGES: 0 */
    char *buf;              /* owned storage of the strings */
} af_lm_example;

typedef struct af_lm_corpus {
    char *path;             /* owned copy of the file name */
    af_lm_format format;    /* of every example */
    int32_t n;
    af_lm_example *ex;      /* [n] */
} af_lm_corpus;

/* Parse one non-blank line (line `ln` of `path`, for messages) into `*ex` (overwritten; release with
 * af_lm_example_clear). Errors: AF_ERR_FORMAT as in the header comment (and the messages of
 * af_jsonl_parse_object for invalid JSON / non-objects), AF_ERR_NOMEM; on error `*ex` holds nothing. */
af_status af_lm_example_parse(const char *path, long ln, const char *line, size_t len, af_lm_example *ex);
void af_lm_example_clear(af_lm_example *ex);

/* One list of messages of field `f` (a cJSON array; line `ln` of `P` for the messages) checked as
 * the rules above say; adds its messages to *n, their bytes (+ a NUL each) to *bytes and its
 * assistant turns to *n_asst. Errors: AF_ERR_FORMAT "P:LN: field 'F[K].role': ...", AF_ERR_RANGE. */
af_status af_lm_msgs_check(const char *P, long ln, const char *f, const struct cJSON *arr, int32_t *n, size_t *bytes,
                           int32_t *n_asst);
/* Copies the messages of a checked list into ex->msgs[*n...] (advancing *n) and their text into
 * ex->buf at byte *o (advancing it); both arrays sized from af_lm_msgs_check's counts. */
void af_lm_msgs_copy(af_lm_example *ex, const struct cJSON *arr, int32_t *n, size_t *o);

/* Read a whole file (max_line_bytes 0: AF_JSONL_DEFAULT_MAX_LINE). `*out`: free with
 * af_lm_corpus_free. Errors: AF_ERR_IO "FILE: cannot open: ...", AF_ERR_FORMAT (a line as above,
 * mixed formats across lines "FILE:LINE: line is 'messages' but line 1 is 'text' (one format per
 * file)", "FILE:LINE: line longer than N bytes", "FILE: no examples (empty file)"), AF_ERR_RANGE
 * (more than INT32_MAX - 1 examples), AF_ERR_NOMEM. */
af_status af_lm_corpus_read(const char *path, size_t max_line_bytes, af_lm_corpus **out);
void af_lm_corpus_free(af_lm_corpus *c);

/* af_lm_corpus_read with the layout given instead of taken from the file name (af_lm_corpus_read
 * uses af_data_file_delim: ".csv" / ".tsv" are tables): delim 0 = JSON Lines, ',' = CSV, '\t' = TSV.
 * A table's header names the fields of a line ("text", or "prompt" and "completion"; other columns
 * are ignored); its cells are strings, so conversations ("messages") need JSON Lines. The file is
 * UTF-8, a byte-order mark skipped; UTF-16/32 are refused naming the encoding (formats/csv.h).
 * Errors: those of af_lm_corpus_read and af_csv_read. */
af_status af_lm_corpus_read_as(const char *path, int delim, size_t max_line_bytes, af_lm_corpus **out);

#endif /* AF_LM_JSONL_H */
