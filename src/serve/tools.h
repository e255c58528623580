/* tools.h — function calling in `afinar serve` (tools.c): the request's "tools" and "tool_choice",
 * the prompt that shows the model the tools and the earlier tool turns, the grammar that forces a
 * call, and the parsing of the model's answer into OpenAI "tool_calls".
 *
 * Call format: the model's own where its chat layout has tool turns (tokenizer.h "tool turns":
 * chatml of a Qwen2.5 template, qwen3, qwq, llama3 of a Llama 3.1-3.3 template, mistral of Mistral
 * Nemo's template, mistral-v7): the request's tools, assistant tool calls and "tool" messages are
 * rendered by af_chat_prompt_text_ex, and the answer parsed by af_chat_parse_tool_calls.
 * Other layouts (SmolLM2's chatml, Gemma, Phi-3, DeepSeek-R1, SmolLM3, Mistral [INST] before Nemo,
 * Llama 3 without tools): a generic fallback — the tools described in a system turn (own wording,
 * their JSON schemas one per line between <tools> and </tools>) asking for calls as
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * earlier calls written so in the assistant turn, a "tool" message as a user turn
 * <tool_response>\n...\n</tool_response>; the answer is parsed in that format, and also as a bare
 * JSON object {"name", "parameters" | "arguments"} or a JSON list of them. */
#ifndef AF_SERVE_TOOLS_H
#define AF_SERVE_TOOLS_H

#include "serve/grammar.h"
#include "serve/serve.h"
#include "tokenizer/tokenizer.h"

#include <cJSON.h>

#define SRV_MAX_TOOLS 64

enum { SRV_TOOL_NONE = 0, SRV_TOOL_AUTO = 1, SRV_TOOL_REQUIRED = 2, SRV_TOOL_NAMED = 3 };

struct srv_tools {
    int32_t n;
    char **name;   /* [n] function names ([A-Za-z0-9_.-], 1..64 bytes) */
    char **spec;   /* [n] compact JSON {"name", "description"?, "parameters"?} as shown to the model */
    char **params; /* [n] compact JSON of "parameters" ("{}" when absent) */
    char *json;    /* the "tools" list as compact JSON (af_chat_extra.tools of the model's own layout) */
    int choice;    /* SRV_TOOL_*: "tool_choice" (default auto with tools) */
    int32_t named; /* SRV_TOOL_NAMED: the index of the function */
    /* set by srv_tools_bind once the model's layout is known: */
    int native;              /* 1: the layout has tool turns (its own format); 0: the generic fallback */
    af_chat_family fam;
    const af_tokenizer *tok; /* the server's (outlives the request) */
};

/* Parse "tools" and "tool_choice" of a chat request body `o` into *out (NULL when there is no "tools"
 * field; "tool_choice" without "tools" is a 400 unless "none"). With tool_choice "required" or a
 * named function, *grammar receives the grammar that forces one call (its arguments validated
 * against that function's "parameters", which must then be in the schema subset of grammar.h; with
 * several functions and "required", any object). Returns 1, or 0 and *err (400 naming
 * "tools[i].function.name" etc.). */
int srv_tools_parse(const cJSON *o, srv_tools **out, srv_grammar **grammar, srv_err *err);
void srv_tools_free(srv_tools *t);

/* The generic fallback's system text that describes the tools and the call format (malloc'ed; NULL
 * when out of memory). */
char *srv_tools_prompt(const srv_tools *t);

/* One earlier call in the generic fallback's format: "<tool_call>\n{json}\n</tool_call>" with json =
 * {"name": NAME, "arguments": ARGS} (ARGS: the JSON text of "arguments", an object). malloc'ed. */
char *srv_tool_call_text(const char *name, const char *args_json);

/* 1 when layout `fam` (with tok's chat template) has tool turns of its own (tokenizer.h). */
int srv_tools_native(const af_tokenizer *tok, af_chat_family fam);

/* Bind the request's tools (when any) to the model's layout: sets t->native, fam, tok; with the
 * model's own format and tool_choice "required" / a named function, *grammar (the request's forced
 * call, from srv_tools_parse) is replaced by the grammar of one call in that format:
 *   chatml/qwen3/qwq: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   llama3:           {"name": N, "parameters": {...}}
 *   mistral (Nemo):   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *   mistral-v7:       [TOOL_CALLS]N[ARGS]{...} ("required" with several functions: one literal prefix
 *                     per function, srv_grammar_set_prefixes, and any object as arguments)
 * Returns 1, or 0 and *err (500 out of memory). */
int srv_tools_bind(srv_tools *t, const af_tokenizer *tok, af_chat_family fam, srv_grammar **grammar, srv_err *err);

/* The generation prompt of chat request rq for layout fam (text without BOS; *out malloc'ed):
 * without tool turns af_chat_prompt_text; with them (tools not "none", assistant tool_calls, "tool"
 * messages) the layout's own rendering (af_chat_prompt_text_ex) when it has tool turns, else the
 * generic fallback above. Errors: those of af_chat_prompt_text(_ex), AF_ERR_NOMEM. */
af_status srv_chat_prompt(const af_tokenizer *tok, af_chat_family fam, const srv_req *rq, char **out);

/* 1 when text s[0..n) is a tool-call marker that some layout writes as a control token
 * ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>", "<tool_call>", "</tool_call>"): with the
 * model's own tool format such tokens are kept in the generated text (rendered) for the parser. */
int srv_tools_marker(const char *s, size_t n);

/* Parse the generated text[0..len) into OpenAI tool calls: a cJSON array of {"id", "type":
 * "function", "function": {"name", "arguments": JSON text}} (ids: the model's [CALL_ID] when it
 * wrote one, else "call_<req>_<k>"), or NULL when the text holds no call, or (the model's own format)
 * a call of a function not in "tools". *content: the text before the calls (own format) / outside
 * them (fallback), trimmed (malloc'ed; NULL when empty). */
cJSON *srv_tools_extract(const srv_tools *t, const char *text, size_t len, uint64_t req_id, char **content);

/* Tool calls streamed (tool_stream.c): what of a streamed answer has been sent. */
typedef struct srv_tool_stream srv_tool_stream;
srv_tool_stream *srv_tool_stream_new(void); /* NULL when out of memory */
void srv_tool_stream_free(srv_tool_stream *ts);
/* The chunk deltas (a cJSON array of OpenAI "delta" objects: {"content"} or {"tool_calls": [{"index",
 * "id"?, "type"?, "function": {"name"?, "arguments"}}]}) for the generated text[0..n) (whole UTF-8
 * characters) that were not sent yet, and ts updated. While generating (final 0): the content
 * before the first call marker, from its first non-space byte, without a tail that may begin a
 * marker or trailing whitespace; a call's first delta (index, id, type, name, arguments "") once its
 * name is complete and in t (Nemo: once its object is complete, for its "id"); then its arguments
 * re-printed as cJSON_PrintUnformatted prints them, as far as certain. final 1 (the answer ended):
 * the text is parsed by srv_tools_extract and what was not sent is sent; *has_calls = 1 when the
 * answer has calls (finish_reason "tool_calls"). ts NULL (out of memory): nothing until final,
 * then everything. NULL when out of memory. */
cJSON *srv_tool_stream_step(srv_tool_stream *ts, const srv_tools *t, const char *text, size_t n, int final,
                            uint64_t req_id, int *has_calls);

#endif
