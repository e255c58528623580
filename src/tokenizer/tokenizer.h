/*
 * tokenizer.h — tokenizers read from GGUF metadata (tokenizer.ggml.*), docs/FORMATS.md §6, or from a
 * Hugging Face tokenizer.json (tok_hf.c, §11.5): two front ends filling the same tables.
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
#include "formats/gguf_write.h"
#include "formats/lm_jsonl.h"

/* Build a tokenizer from an open GGUF. Copies everything it needs (does not borrow `g`).
 * `*out`: free with af_tokenizer_free().
 * Errors: AF_ERR_NOT_FOUND (no tokenizer.ggml.model / tokens), AF_ERR_UNSUPPORTED (model kind or
 * pre-tokenizer not supported), AF_ERR_FORMAT (inconsistent arrays, bad merges), AF_ERR_NOMEM. */
af_status af_tokenizer_load(const af_gguf *g, af_tokenizer **out);
void af_tokenizer_free(af_tokenizer *tok);

/* Build a tokenizer from a Hugging Face directory: tokenizer.json (required), tokenizer_config.json
 * and chat_template.jinja (optional); pipelines accepted: tok_hf.c, docs/FORMATS.md §12.3.
 * Errors: AF_ERR_NOT_FOUND (no tokenizer.json), AF_ERR_UNSUPPORTED (model type, normalizer or
 * pre-tokenizer not supported: the message names the field), AF_ERR_FORMAT, AF_ERR_IO, AF_ERR_NOMEM. */
af_status af_tokenizer_load_hf(const char *dir, af_tokenizer **out);
/* Same from memory: tokenizer.json text [len], tokenizer_config.json text [cfg_len] (may be NULL),
 * a chat template (may be NULL); labels name the files in messages. Used by af_tokenizer_load_hf
 * and the fuzz target. */
af_status af_tokenizer_load_hf_json(const char *json, size_t len, const char *cfg_json, size_t cfg_len,
                                    const char *chat_template, const char *label, const char *cfg_label,
                                    af_tokenizer **out);

/* Short description, e.g. "gpt2 BPE (pre=smollm), 49152 tokens, 48900 merges". Borrowed. */
const char *af_tokenizer_describe(const af_tokenizer *tok);

/* The chat template string from the GGUF (tokenizer.chat_template), or NULL. Borrowed. */
const char *af_tokenizer_chat_template(const af_tokenizer *tok);

/* Token id of an exact token text (as spelled in the GGUF; except that in "llama" vocabularies
 * tokens made only of spaces are respelled with U+2581, e.g. "▁▁"), or -1. */
int32_t af_tokenizer_find(const af_tokenizer *tok, const char *text, size_t len);

/* ---- chat templates (chat.c) ----
 * The Jinja templates are NOT interpreted: the family is recognised and its fixed layout reproduced.
 * Reference: transformers' apply_chat_template with the model's template (tests/ref/
 * make_chat_fixture.py, make_chat_families.py; tests/test_lm_data.c and test_chat_families.c require
 * identical text and token ids). Families:
 *  ChatML (SmolLM2, Qwen2.5): per message "<|im_start|>{role}\n{content}<|im_end|>\n"; when the
 *     first message is not a system message and the template writes a literal default system prompt
 *     ("<|im_start|>system\n" TEXT "<|im_end|>" with no Jinja inside TEXT; SmolLM2: "You are a
 *     helpful AI assistant named SmolLM, trained by Hugging Face"), that system turn comes first.
 *     Generation prompt: "<|im_start|>assistant\n". No BOS.
 *  Gemma (Gemma 3): BOS, then an optional first system message becomes a prefix "{system}\n\n" of the
 *     first user turn; the other messages must alternate user, assistant, user, ... (the template
 *     raises otherwise); per message "<start_of_turn>{user|model}\n{trim(content)}<end_of_turn>\n"
 *     where trim strips Unicode white space at both ends (Python str.strip, Jinja's `trim`).
 *     Generation prompt: "<start_of_turn>model\n".
 *  Gemma 4: BOS; per message "<|turn>{system|user|model}\n{trim(content)}<turn|>\n"; generation
 *     prompt "<|turn>model\n" plus the empty thought channel "<|channel>thought\n<channel|>"
 *     (thinking off). Refused: thinking blocks in messages, two assistant messages in a row
 *     (chat.c render_gemma4).
 *  Qwen3, Llama 3.x, DeepSeek-R1 distills, Phi-3/3.5, Mistral [INST], SmolLM3: chat_layouts.c and
 *     docs/FORMATS.md §6.4 (one layout each, as the published template writes it); QwQ and Mistral
 *     v7 ([SYSTEM_PROMPT], Mistral Small 3.x): chat_tools.c; docs/CHAT.md lists them all.
 * Family: recognised from tokenizer.chat_template by marker strings (af_chat_family_of; table in
 * chat.c), or, when the file has no template (the Gemma 3 GGUFs), from the vocabulary (a marker
 * token such as <start_of_turn>, <|im_start|>, <|start_header_id|>). A template with none of the
 * layouts' markers, or with a variant afinar does not reproduce (e.g. a ChatML template with
 * <think> blocks that is not Qwen3's), is refused naming the nearest family and --chat-template. */
typedef enum af_chat_family {
    AF_CHAT_NONE = 0,
    AF_CHAT_CHATML = 1,
    AF_CHAT_GEMMA = 2,
    AF_CHAT_GEMMA4 = 3,
    AF_CHAT_QWEN3 = 4,
    AF_CHAT_LLAMA3 = 5,
    AF_CHAT_DEEPSEEK_R1 = 6,
    AF_CHAT_PHI3 = 7,
    AF_CHAT_MISTRAL = 8,
    AF_CHAT_SMOLLM3 = 9,
    AF_CHAT_QWQ = 10,      /* Qwen's QwQ-32B (chat_tools.c) */
    AF_CHAT_MISTRAL7 = 11, /* Mistral v7 / tekken with [SYSTEM_PROMPT] (Mistral Small 3.x; chat_tools.c) */
    AF_CHAT_NFAMILIES = 12
} af_chat_family;

/* "none", "chatml", "gemma", "gemma4", "qwen3", "llama3", "deepseek-r1", "phi3", "mistral", "smollm3",
 * "qwq", "mistral-v7". */
const char *af_chat_family_name(af_chat_family f);

/* The family to render with: `override` one of the names above forces it; NULL or "auto"
 * recognises the model's (see above). Errors: AF_ERR_INVALID_ARG (unknown override name; the
 * message lists the names), AF_ERR_UNSUPPORTED (no recognisable template; the message names the
 * nearest family and --chat-template NAME). */
af_status af_chat_family_of(const af_tokenizer *tok, const char *override, af_chat_family *fam);
/* The same for a template string `tmpl` (may be NULL: then the vocabulary of `tok` decides; `tok`
 * may be NULL when tmpl is not). Used by af_chat_family_of and the tests/fuzz target. */
af_status af_chat_family_of_template(const af_tokenizer *tok, const char *tmpl, af_chat_family *fam);

/* A rendered document: its text and the pieces it is tokenized in. Each piece is tokenized on its
 * own (af_tokenize with add_special = 0, parse_special = 1, as transformers tokenizes a rendered
 * template) and the ids are concatenated. The renderer cuts the text only next to a special token
 * (the tokenizer splits there anyway), so the ids equal those of the whole text. A piece with
 * len 0 is the single token `id` (BOS, EOS). `target` marks the tokens of the piece as loss targets,
 * except the leading tokens lying wholly inside the first `head` bytes (a role header such as
 * "assistant\n"): a token holding any byte past `head` is a target. */
typedef struct af_chat_piece {
    size_t off, len, head;
    int32_t id;
    int target;
} af_chat_piece;

typedef struct af_chat_doc {
    char *text;        /* NUL-terminated, owned */
    size_t len, cap;
    af_chat_piece *pc; /* [n] owned */
    int32_t n, pcap;
    int oom;           /* an append failed: the document is incomplete */
} af_chat_doc;

/* Append text s[0..len) as a piece (non-target text merges into a preceding non-target piece), or one
 * token id. Allocation failures set d->oom (checked by af_chat_render / af_chat_doc_tokenize). */
void af_chat_doc_add_text(af_chat_doc *d, const char *s, size_t len, int target, size_t head);
void af_chat_doc_add_id(af_chat_doc *d, int32_t id, int target);
void af_chat_doc_free(af_chat_doc *d);

/* Render messages m[0..n) (n >= 1) with family `fam` into `*d` (zero-initialised by the caller; on
 * error it is freed). Assistant messages with index >= target_from are targets: their content and
 * end-of-turn token ("<|im_end|>" / "<end_of_turn>"), not the role header and not the "\n" after
 * the end-of-turn token. add_generation_prompt appends the assistant header. `tok` supplies the
 * default system prompt (ChatML) and BOS (Gemma); it may be NULL (neither).
 * Errors: AF_ERR_FORMAT "messages[i]: ..." (Gemma: turns that do not alternate), AF_ERR_INVALID_ARG
 * (fam NONE, n < 1), AF_ERR_NOMEM. */
af_status af_chat_render(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                         int32_t target_from, int add_generation_prompt, af_chat_doc *d);

/* ---- tool turns (chat_tools.c) ----
 * A conversation with tools, as an OpenAI chat request carries them: a `tools` list of function
 * definitions, assistant messages with `tool_calls`, and messages of role AF_ROLE_TOOL holding a
 * tool's result. Layouts that have tool turns (each as its published template writes them, checked
 * against transformers in tests/test_chat_families.c): chatml with Qwen2.5's template, qwen3, qwq
 * (Hermes style: a "# Tools" system block listing the tools inside <tools></tools>, calls
 * "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>", results in a user turn inside
 * <tool_response></tool_response>), llama3 with a 3.1-3.3 template (tools in the first user
 * message, json.dumps(indent=4); a call is the assistant message {"name": ..., "parameters": ...};
 * results in an "ipython" turn as a JSON string; one call per message), mistral with Mistral Nemo's
 * template ([AVAILABLE_TOOLS][...], [TOOL_CALLS][{...}], [TOOL_RESULTS]{"content": ...}) and mistral-v7
 * ([AVAILABLE_TOOLS] before the last user message, [TOOL_CALLS]name[CALL_ID]id[ARGS]{...},
 * [TOOL_RESULTS]id[TOOL_CONTENT]...[/TOOL_RESULTS]; ids of 9 characters). JSON is written as Jinja's
 * `tojson` in transformers writes it (Python json.dumps, ensure_ascii=False: ", " and ": "
 * separators, keys in the given order, floats as Python's repr). Other layouts refuse tools. */
typedef struct af_chat_call {
    const char *id;   /* the call's id (NUL-terminated), or NULL; mistral-v7 needs 9 characters */
    const char *name; /* function name, NUL-terminated, not empty */
    const char *args; /* the arguments: a JSON object, args[0..args_len), UTF-8 */
    size_t args_len;
} af_chat_call;

/* What message i carries besides role and content. */
typedef struct af_chat_msg_x {
    const af_chat_call *calls; /* assistant: [n_calls] tool calls (content may be empty); else NULL */
    int32_t n_calls;
    const char *call_id;       /* AF_ROLE_TOOL: the id of the call answered (mistral-v7 needs it), or NULL */
} af_chat_msg_x;

typedef struct af_chat_extra {
    const char *tools;        /* JSON array of tool definitions tools[0..tools_len) (OpenAI "tools", each
                                 written as given), or NULL; an empty array counts as no tools */
    size_t tools_len;
    const af_chat_msg_x *msg; /* [n] parallel to the messages, or NULL (no tool calls) */
} af_chat_extra;

/* af_chat_render with tools (x may be NULL: then exactly af_chat_render). Assistant messages with tool
 * calls are loss targets like any other assistant message (their calls and end-of-turn marker);
 * tool results are not. Errors: those of af_chat_render, AF_ERR_UNSUPPORTED (tools, tool calls or
 * tool messages with a layout that has none; the message lists the layouts that have),
 * AF_ERR_FORMAT ("tools: ..." / "messages[i].tool_calls[k]...: ..." for JSON that does not parse,
 * arguments that are not an object, a missing name, Mistral ids not of 9 characters, Llama's one
 * call per message). */
af_status af_chat_render_ex(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                            const af_chat_extra *x, int32_t target_from, int add_generation_prompt, af_chat_doc *d);

/* af_chat_prompt_text with tools: the generation prompt of m[0..n) as text without BOS, for a server
 * that renders a chat request with `tools` / `tool_calls` / role "tool" messages. `*out`:
 * malloc'ed, NUL-terminated, caller frees (NULL on error). Errors: those of af_chat_render_ex. */
af_status af_chat_prompt_text_ex(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                                 const af_chat_extra *x, char **out);

/* A tool call found in generated text: all strings malloc'ed, NUL-terminated. */
typedef struct af_chat_parsed_call {
    char *name;
    char *arguments; /* the arguments object as compact JSON text (OpenAI's function.arguments) */
    char *id;        /* mistral-v7 "[CALL_ID]" when the model wrote one, else NULL */
} af_chat_parsed_call;

typedef struct af_chat_tool_output {
    char *content;              /* the text before the first call (trailing '\n' / ' ' removed when
                                   there are calls), or all of it; malloc'ed */
    size_t content_len;
    af_chat_parsed_call *calls; /* [n_calls], malloc'ed; n_calls 0: no call in the text */
    int32_t n_calls;
} af_chat_tool_output;

/* Parse a model's generated text[0..len) (decoded with special tokens rendered, up to but without
 * the end-of-turn token) into content and tool calls, in the format of family `fam`: chatml / qwen3
 * / qwq: each "<tool_call>{json}</tool_call>" holding {"name": string, "arguments": object} (a
 * block left open at the end is read to the end); llama3: the whole text (trimmed, an optional
 * leading <|python_tag|>) being {"name": string, "parameters" or "arguments": object};
 * mistral-v7: "[TOOL_CALLS]name[CALL_ID]id[ARGS]{json}" repeated ([CALL_ID] optional). A block that
 * does not parse as such a call ends the calls; it and what follows stays content only when no
 * call came before it. `*out` is overwritten; free with af_chat_tool_output_free (also on error).
 * Errors: AF_ERR_INVALID_ARG (NULL), AF_ERR_UNSUPPORTED (a layout without tool calls), AF_ERR_NOMEM. */
af_status af_chat_parse_tool_calls(const af_tokenizer *tok, af_chat_family fam, const char *text, size_t len,
                                   af_chat_tool_output *out);
void af_chat_tool_output_free(af_chat_tool_output *o);

/* Document of a plain (non-chat) example into `*d` (zero-initialised by the caller; freed on error):
 * [BOS when the tokenizer adds one (add_bos_token)], `prompt` (not a target; NULL/plen 0: none),
 * `text` (targets), then EOS (a target) unless `text` already ends with the EOS token's text (TRL's
 * rule for its eos_token); prompt and text are separate pieces (tokenized separately).
 * Errors: AF_ERR_INVALID_ARG (NULL tok/d), AF_ERR_NOMEM. */
af_status af_chat_doc_plain(const af_tokenizer *tok, const char *prompt, size_t plen, const char *text, size_t len,
                            af_chat_doc *d);

/* Token ids of `d` (`*ids` [*n]) and per id 1 = loss target (`*mask` [*n]); both malloc'ed, caller
 * frees. Thread-safe on a shared tokenizer. Errors: AF_ERR_INVALID_ARG (NULL, d->oom -> AF_ERR_NOMEM),
 * AF_ERR_NOMEM. */
af_status af_chat_doc_tokenize(const af_tokenizer *tok, const af_chat_doc *d, int32_t **ids, uint8_t **mask,
                               size_t *n);

/* Generation prompt of a conversation: af_chat_render of m[0..n) (no targets) with the generation
 * prompt, as text without the BOS (af_tokenize adds it; tokenize with parse_special = 1). `*out`:
 * malloc'ed, NUL-terminated, caller frees (NULL on error). Errors: those of af_chat_render
 * (AF_ERR_FORMAT "messages[i]: ..." for Gemma turns that do not alternate), AF_ERR_INVALID_ARG. */
af_status af_chat_prompt_text(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                              char **out);

/* Chat prompt for one (optional) system turn and one user turn, ready for generation; the engine
 * behind af_chat_format(): af_chat_prompt_text of [system?, user]. With system == NULL the ChatML
 * default system prompt is used when the template has one. `user` must not be NULL. `*out`: malloc'ed, NUL-terminated, caller
 * frees. Errors: AF_ERR_INVALID_ARG, AF_ERR_UNSUPPORTED (unknown template), AF_ERR_NOMEM. */
af_status af_chat_format_tok(const af_tokenizer *tok, const char *system, const char *user, char **out);
/* The same with the template family given: `tmpl` "chatml" or "gemma" (NULL or "auto": the model's,
 * as af_chat_family_of). Errors: those of af_chat_format_tok and af_chat_family_of. */
af_status af_chat_format_tok_as(const af_tokenizer *tok, const char *tmpl, const char *system, const char *user,
                                char **out);

/* Add the tokenizer's GGUF metadata (tokenizer.ggml.*, tokenizer.chat_template) to `w`, as llama.cpp's
 * converter writes them (tok_gguf.c lists the keys): byte-level BPE as "gpt2", SentencePiece-style
 * BPE as "gemma4" when `arch` is "gemma4", else "llama" with scores from the merge ranks; merges in
 * rank order. pad_id: tokenizer.ggml.padding_token_id (-1: none). Loading the result with
 * af_tokenizer_load gives the same ids as `t`. Errors: AF_ERR_INVALID_ARG, AF_ERR_NOMEM, the writer's. */
af_status af_tokenizer_gguf_write(const af_tokenizer *t, af_gguf_writer *w, const char *arch, int32_t pad_id);

#endif /* AF_TOKENIZER_H */
