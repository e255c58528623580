/* tools.h — function calling in `afinar serve` (tools.c): the request's "tools" and "tool_choice",
 * the text that tells the model about the tools, the grammar that forces a call, and the parsing of
 * the model's answer into OpenAI "tool_calls".
 *
 * Call format (one for every chat family): the tools are described in a system turn (own wording,
 * their JSON schemas one per line between <tools> and </tools>) that asks for calls as
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * (the format of Qwen2.5/Qwen3's templates and Hermes-style fine-tunes). An earlier assistant turn
 * with "tool_calls" is rendered in that format, a "tool" message as a user turn
 * <tool_response>\n...\n</tool_response>. The answer is parsed in that format, and also as Llama
 * 3.x's bare JSON object {"name", "parameters" | "arguments"} and Mistral's [TOOL_CALLS] JSON list
 * (its control token is not part of the text), so that models trained on those formats work too. */
#ifndef AF_SERVE_TOOLS_H
#define AF_SERVE_TOOLS_H

#include "serve/grammar.h"
#include "serve/serve.h"

#include <cJSON.h>

#define SRV_MAX_TOOLS 64

enum { SRV_TOOL_NONE = 0, SRV_TOOL_AUTO = 1, SRV_TOOL_REQUIRED = 2, SRV_TOOL_NAMED = 3 };

struct srv_tools {
    int32_t n;
    char **name;   /* [n] function names ([A-Za-z0-9_.-], 1..64 bytes) */
    char **spec;   /* [n] compact JSON {"name", "description"?, "parameters"?} as shown to the model */
    char **params; /* [n] compact JSON of "parameters" ("{}" when absent) */
    int choice;    /* SRV_TOOL_*: "tool_choice" (default auto with tools) */
    int32_t named; /* SRV_TOOL_NAMED: the index of the function */
};

/* Parse "tools" and "tool_choice" of a chat request body `o` into *out (NULL when there is no "tools"
 * field; "tool_choice" without "tools" is a 400 unless "none"). With tool_choice "required" or a
 * named function, *grammar receives the grammar that forces one call (its arguments validated
 * against that function's "parameters", which must then be in the schema subset of grammar.h; with
 * several functions and "required", any object). Returns 1, or 0 and *err (400 naming
 * "tools[i].function.name" etc.). */
int srv_tools_parse(const cJSON *o, srv_tools **out, srv_grammar **grammar, srv_err *err);
void srv_tools_free(srv_tools *t);

/* The system text that describes the tools and the call format (malloc'ed; NULL when out of memory). */
char *srv_tools_prompt(const srv_tools *t);

/* One earlier assistant call as the model writes it: "<tool_call>\n{json}\n</tool_call>" with json =
 * {"name": NAME, "arguments": ARGS} (ARGS: the JSON text of "arguments", an object). malloc'ed. */
char *srv_tool_call_text(const char *name, const char *args_json);

/* Parse the generated text[0..len) into OpenAI tool calls: a cJSON array of {"id", "type":
 * "function", "function": {"name", "arguments": JSON text}} (ids "call_<req>_<k>"), or NULL when the
 * text holds no call of a known function. *content: the text outside the calls, trimmed (malloc'ed;
 * NULL when empty). */
cJSON *srv_tools_extract(const srv_tools *t, const char *text, size_t len, uint64_t req_id, char **content);

#endif
