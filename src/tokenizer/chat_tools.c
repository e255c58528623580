/*
 * chat_tools.c — tool definitions, tool calls and tool results in the chat layouts (tokenizer.h
 * af_chat_render_ex; their JSON written as transformers' `tojson` by chat_json.c): the
 * Hermes-style blocks of the Qwen2.5 / Qwen3 / QwQ templates (<tools>, <tool_call>,
 * <tool_response>), Mistral Nemo's tools list, the QwQ layout, the Mistral v7 (tekken, Mistral
 * Small 3.x) layout with [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS], and the reverse direction:
 * a model's generated text parsed back into tool calls (af_chat_parse_tool_calls). The Llama 3 and
 * Mistral Nemo tool turns are written by their layouts in chat_layouts.c. References: the published templates in
 * tests/fixtures/chat_templates/, rendered by transformers in tests/ref/make_chat_families.py and
 * compared byte for byte and id for id by tests/test_chat_families.c.
 */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- checks ---- */

/* Whether family `fam` (with template tmpl) has tool turns, and whether its tools list may be given. */
static int family_has_tools(af_chat_family fam, const char *tmpl) {
    switch (fam) {
    case AF_CHAT_QWEN3:
    case AF_CHAT_QWQ:
    case AF_CHAT_MISTRAL7: return 1;
    case AF_CHAT_CHATML: return tmpl && strstr(tmpl, "<tool_call>") != NULL; /* Qwen2.5; not SmolLM2, Qwen1.5 */
    case AF_CHAT_LLAMA3: return tmpl && strstr(tmpl, "Environment: ipython") != NULL; /* 3.1, 3.2, 3.3 */
    case AF_CHAT_MISTRAL: return tmpl && strstr(tmpl, "[TOOL_CALLS][") != NULL;        /* Nemo's v3 */
    default: return 0;
    }
}

af_status af_chat_tools_check(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                              const af_chat_extra *x) {
    if (x && x->tools && x->tools_len) {
        size_t at = 0;
        const char *why = af_chat_json_check(x->tools, x->tools_len, '[', &at);
        if (why) return af_fail(AF_ERR_FORMAT, "tools: %s at byte %zu (a JSON array of tool definitions)", why, at);
    }
    int any = af_chat_tools_count(x) > 0; /* an empty list counts as none */
    for (int32_t i = 0; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        if (m[i].role == AF_ROLE_TOOL || (mx && mx->n_calls > 0)) any = 1;
        if (mx && mx->n_calls > 0 && m[i].role != AF_ROLE_ASSISTANT)
            return af_fail(AF_ERR_FORMAT, "messages[%d]: tool_calls in a %s message (only assistant messages make tool "
                           "calls)", (int)i, af_chat_role_name(m[i].role));
        if (mx && (mx->n_calls < 0 || (mx->n_calls > 0 && !mx->calls)))
            return af_fail(AF_ERR_INVALID_ARG, "messages[%d]: tool_calls: bad count %d", (int)i, (int)mx->n_calls);
        for (int32_t k = 0; mx && k < mx->n_calls; k++) {
            const af_chat_call *c = &mx->calls[k];
            if (!c->name || !c->name[0])
                return af_fail(AF_ERR_FORMAT, "messages[%d].tool_calls[%d].function.name: missing", (int)i, (int)k);
            size_t at = 0;
            const char *why = c->args ? af_chat_json_check(c->args, c->args_len, '{', &at) : "missing";
            if (why)
                return af_fail(AF_ERR_FORMAT, "messages[%d].tool_calls[%d].function.arguments: %s at byte %zu (a JSON "
                               "object is expected)", (int)i, (int)k, why, at);
        }
    }
    if (!any) return AF_OK;
    const char *tmpl = tok ? tok->chat_template : NULL;
    if (!family_has_tools(fam, tmpl))
        return af_fail(AF_ERR_UNSUPPORTED, "chat template: tools, tool calls or tool results with the %s layout%s, "
                       "which has no tool turns (layouts with tools: chatml of Qwen2.5, qwen3, qwq, llama3 of Llama "
                       "3.1-3.3, mistral of Mistral Nemo, mistral-v7)", af_chat_family_name(fam),
                       fam == AF_CHAT_CHATML || fam == AF_CHAT_LLAMA3 || fam == AF_CHAT_MISTRAL ? " of this template"
                                                                                                : "");
    return AF_OK;
}

/* ---- Hermes-style tool turns (Qwen2.5, Qwen3, QwQ) ---- */

#define HERMES_TOOLS_HEAD                                                                                          \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "       \
    "function signatures within <tools></tools> XML tags:\n<tools>"
#define HERMES_TOOLS_TAIL                                                                                          \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "          \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "                   \
    "<args-json-object>}\n</tool_call><|im_end|>\n"

void af_chat_hermes_system(af_chat_doc *d, const af_chat_extra *x, const char *pre, size_t pre_len, int sep) {
    af_chat_add_str(d, "<|im_start|>", 0, 0);
    size_t off = d->len;
    af_chat_put(d, "system\n", 7);
    if (pre_len) af_chat_put(d, pre, pre_len);
    if (pre_len || sep) af_chat_put(d, "\n\n", 2);
    af_chat_put(d, HERMES_TOOLS_HEAD, strlen(HERMES_TOOLS_HEAD));
    af_chat_put_tools(d, x, "\n", "", 0);
    af_chat_put(d, HERMES_TOOLS_TAIL, strlen(HERMES_TOOLS_TAIL));
    af_chat_end_piece(d, off, 0, 0);
}

void af_chat_hermes_call(af_chat_doc *d, const af_chat_call *c) {
    af_chat_put(d, "<tool_call>\n{\"name\": \"", strlen("<tool_call>\n{\"name\": \""));
    af_chat_put(d, c->name, strlen(c->name));
    af_chat_put(d, "\", \"arguments\": ", strlen("\", \"arguments\": "));
    af_chat_put_json(d, c->args, c->args_len, 0);
    af_chat_put(d, "}\n</tool_call>", strlen("}\n</tool_call>"));
}

int32_t af_chat_hermes_results(af_chat_doc *d, const af_chat_msg *m, int32_t n, int32_t i) {
    af_chat_add_str(d, "<|im_start|>", 0, 0);
    size_t off = d->len;
    af_chat_put(d, "user", 4);
    for (; i < n && m[i].role == AF_ROLE_TOOL; i++) {
        af_chat_put(d, "\n<tool_response>\n", strlen("\n<tool_response>\n"));
        af_chat_put(d, m[i].content, m[i].len);
        af_chat_put(d, "\n</tool_response>", strlen("\n</tool_response>"));
    }
    af_chat_put(d, "<|im_end|>", 10);
    af_chat_end_piece(d, off, 0, 0);
    af_chat_add_str(d, "\n", 0, 0);
    return i;
}

/* ---- Mistral Nemo's tools list ---- */
af_status af_chat_mistral3_tools(af_chat_doc *d, const af_chat_extra *x) {
    int32_t nt = af_chat_tools_count(x);
    size_t *b = malloc(sizeof *b * (size_t)(nt > 0 ? nt : 1)), *e = malloc(sizeof *e * (size_t)(nt > 0 ? nt : 1));
    af_chat_json_member *mem = NULL;
    af_status st = AF_OK;
    if (!b || !e) {
        st = af_fail(AF_ERR_NOMEM, "chat render: out of memory");
        goto done;
    }
    af_chat_tools_spans(x, b, e, nt);
    af_chat_put(d, "[AVAILABLE_TOOLS][", 18);
    for (int32_t k = 0; k < nt; k++) {
        const char *t = x->tools + b[k];
        const size_t tl = e[k] - b[k];
        int32_t nm = af_chat_json_members(t, tl, NULL, 0), fi = -1;
        free(mem);
        mem = malloc(sizeof *mem * (size_t)(nm > 0 ? nm : 1));
        if (!mem) {
            st = af_fail(AF_ERR_NOMEM, "chat render: out of memory");
            goto done;
        }
        af_chat_json_members(t, tl, mem, nm);
        for (int32_t j = 0; j < nm && fi < 0; j++)
            if (af_chat_json_key_is(t, &mem[j], "function") && t[mem[j].vb] == '{') fi = j;
        if (fi < 0) {
            st = af_fail(AF_ERR_FORMAT, "tools[%d]: no \"function\" object (Mistral's template lists each tool's "
                         "function)", (int)k);
            goto done;
        }
        const char *f = t + mem[fi].vb;
        const size_t fl = mem[fi].ve - mem[fi].vb;
        int32_t nf = af_chat_json_members(f, fl, NULL, 0);
        af_chat_json_member *fm = malloc(sizeof *fm * (size_t)(nf > 0 ? nf : 1));
        if (!fm) {
            st = af_fail(AF_ERR_NOMEM, "chat render: out of memory");
            goto done;
        }
        af_chat_json_members(f, fl, fm, nf);
        static const char head[] = "{\"type\": \"function\", \"function\": {";
        af_chat_put(d, head, sizeof head - 1);
        int first = 1;
        for (int32_t j = 0; j < nf; j++) {
            if (af_chat_json_key_is(f, &fm[j], "return")) continue;
            if (!first) af_chat_put(d, ", ", 2);
            first = 0;
            af_chat_put(d, "\"", 1);
            af_chat_put_json_raw(d, f + fm[j].kb, fm[j].ke - fm[j].kb);
            af_chat_put(d, "\": ", 3);
            if (f[fm[j].vb] == '"') {
                af_chat_put(d, "\"", 1);
                af_chat_put_json_raw(d, f + fm[j].vb, fm[j].ve - fm[j].vb);
                af_chat_put(d, "\"", 1);
            } else {
                af_chat_put_json(d, f + fm[j].vb, fm[j].ve - fm[j].vb, 0);
            }
        }
        free(fm);
        af_chat_put(d, k + 1 < nt ? "}}, " : "}}]", k + 1 < nt ? 4 : 3);
    }
    af_chat_put(d, "[/AVAILABLE_TOOLS]", 18);
done:
    free(b);
    free(e);
    free(mem);
    return st;
}

/* ---- QwQ ----
 * Qwen's QwQ-32B template: ChatML without a default system prompt (with tools: "<|im_start|>system\n
 * {system or ''}\n\n# Tools..."); assistant messages other than the last keep only the text after
 * their last "</think>" (leading '\n' removed); with tool calls "<|im_start|>assistant" + ("\n" +
 * content when the message has content) + per call "\n<tool_call>...</tool_call>" + "<|im_end|>\n";
 * tool results grouped in one user turn; generation prompt "<|im_start|>assistant\n<think>\n". */
static const char *find_last_of(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    const char *last = NULL;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) last = s + i;
    return last;
}

af_status af_chat_render_qwq(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                             int32_t target_from, int gen, af_chat_doc *d) {
    (void)tok;
    if (af_chat_tools_count(x) > 0) {
        int sys = m[0].role == AF_ROLE_SYSTEM;
        af_chat_hermes_system(d, x, sys ? m[0].content : "", sys ? m[0].len : 0, 1);
    } else if (m[0].role == AF_ROLE_SYSTEM) {
        af_chat_add_str(d, "<|im_start|>system\n", 0, 0);
        af_chat_doc_add_text(d, m[0].content, m[0].len, 0, 0);
        af_chat_add_str(d, "<|im_end|>\n", 0, 0);
    }
    for (int32_t i = 0; i < n;) {
        if (m[i].role == AF_ROLE_TOOL) {
            i = af_chat_hermes_results(d, m, n, i);
            continue;
        }
        if (m[i].role != AF_ROLE_ASSISTANT) {
            if (!(m[i].role == AF_ROLE_SYSTEM && i == 0)) {
                af_chat_add_str(d, "<|im_start|>", 0, 0);
                size_t off = d->len;
                af_chat_put(d, af_chat_role_name(m[i].role), strlen(af_chat_role_name(m[i].role)));
                af_chat_put(d, "\n", 1);
                af_chat_put(d, m[i].content, m[i].len);
                af_chat_put(d, "<|im_end|>", 10);
                af_chat_end_piece(d, off, 0, 0);
                af_chat_add_str(d, "\n", 0, 0);
            }
            i++;
            continue;
        }
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const char *c = m[i].content;
        size_t b = 0;
        if (i != n - 1) {
            const char *cl = find_last_of(c, m[i].len, "</think>");
            if (cl) b = (size_t)(cl - c) + 8;
            while (b < m[i].len && c[b] == '\n') b++;
        }
        int tgt = i >= target_from;
        af_chat_add_str(d, "<|im_start|>", 0, 0);
        size_t off = d->len;
        if (mx && mx->n_calls > 0) {
            af_chat_put(d, "assistant", 9);
            if (m[i].len) {
                af_chat_put(d, "\n", 1);
                af_chat_put(d, c + b, m[i].len - b);
            }
            for (int32_t k = 0; k < mx->n_calls; k++) {
                af_chat_put(d, "\n", 1);
                af_chat_hermes_call(d, &mx->calls[k]);
            }
        } else {
            af_chat_put(d, "assistant\n", 10);
            af_chat_put(d, c + b, m[i].len - b);
        }
        af_chat_put(d, "<|im_end|>", 10);
        af_chat_end_piece(d, off, tgt, tgt ? 10 : 0);
        af_chat_add_str(d, "\n", 0, 0);
        i++;
    }
    if (gen) af_chat_add_str(d, "<|im_start|>assistant\n<think>\n", 0, 0);
    return AF_OK;
}

/* ---- Mistral v7 (tekken; Mistral Small 3.x) ----
 * Mistral-Small-3.2-24B-Instruct-2506's template: BOS; "[SYSTEM_PROMPT]{first system message, else
 * the template's default text with today's date}[/SYSTEM_PROMPT]"; the other messages, where those
 * that are neither tool results nor tool calls must alternate user, assistant, ...; a later system
 * message "[SYSTEM_PROMPT]{c}[/SYSTEM_PROMPT]"; a user message "[INST]{c}[/INST]", preceded by
 * "[AVAILABLE_TOOLS]{tools|tojson}[/AVAILABLE_TOOLS]" when tools are given and it equals the last
 * user message; an assistant message "{c}" + EOS, or with tool calls per call
 * "[TOOL_CALLS]{name}[CALL_ID]{id}[ARGS]{arguments|tojson}" + EOS (ids of 9 characters); a tool
 * result "[TOOL_RESULTS]{tool_call_id}[TOOL_CONTENT]{c}[/TOOL_RESULTS]". No generation prompt (a
 * conversation ending in "[/INST]" is the prompt). The default system text is read from the
 * template (`default_system_message = "..." + today + "..."`); today is strftime("%Y-%m-%d") of the
 * current UTC time, or of SOURCE_DATE_EPOCH (seconds) when set. */

/* The Jinja string literal starting at p (p[0] == '"'): escapes \n \t \" \\ undone, appended to d
 * without a piece; the end of the literal (after the closing quote), or NULL. */
static const char *put_literal(af_chat_doc *d, const char *p) {
    if (*p != '"') return NULL;
    for (p++; *p && *p != '"'; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            p++;
            c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        }
        af_chat_put(d, &c, 1);
    }
    return *p == '"' ? p + 1 : NULL;
}

static void today_ymd(char out[16]) {
    time_t t = time(NULL);
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) {
        char *end;
        long long v = strtoll(sde, &end, 10);
        if (*end == 0 && v >= 0) t = (time_t)v;
    }
    struct tm tmv;
    if (!gmtime_r(&t, &tmv)) {
        strcpy(out, "1970-01-01");
        return;
    }
    snprintf(out, 16, "%04d-%02d-%02d", (tmv.tm_year + 1900) % 10000, (tmv.tm_mon + 1) % 100, tmv.tm_mday % 100);
}

/* The default system prompt of the template, written into d as text (no piece); 0 when the template
 * has none in the expected form. */
static int mistral7_default_system(af_chat_doc *d, const char *tmpl) {
    static const char key[] = "set default_system_message = ";
    const char *p = tmpl ? strstr(tmpl, key) : NULL;
    if (!p) return 0;
    p += sizeof key - 1;
    for (;;) {
        p = put_literal(d, p);
        if (!p) return 0;
        while (*p == ' ') p++;
        if (*p != '+') return 1;
        p++;
        while (*p == ' ') p++;
        if (!strncmp(p, "today", 5)) {
            char day[16];
            today_ymd(day);
            af_chat_put(d, day, strlen(day));
            p += 5;
            while (*p == ' ') p++;
            if (*p != '+') return 1;
            p++;
            while (*p == ' ') p++;
        }
    }
}

static void eos_piece(const af_tokenizer *tok, af_chat_doc *d, int tgt) {
    if (tok && tok->eos >= 0) af_chat_doc_add_id(d, tok->eos, tgt);
    else af_chat_add_str(d, "</s>", tgt, 0);
}

/* Mistral's templates (v3 and v7) need a tool call's id and a tool result's tool_call_id of exactly
 * 9 characters (they raise otherwise); AF_ERR_FORMAT naming messages[i]'s field. */
af_status af_chat_mistral_tool_ids(const af_chat_msg *mi, const af_chat_msg_x *mx, int32_t i) {
    for (int32_t k = 0; mx && k < mx->n_calls; k++)
        if (!mx->calls[k].id || strlen(mx->calls[k].id) != 9)
            return af_fail(AF_ERR_FORMAT, "messages[%d].tool_calls[%d].id: Mistral's template needs an id of 9 characters",
                           (int)i, (int)k);
    if (mi->role == AF_ROLE_TOOL && (!mx || !mx->call_id || strlen(mx->call_id) != 9))
        return af_fail(AF_ERR_FORMAT, "messages[%d].tool_call_id: Mistral's template needs an id of 9 characters", (int)i);
    return AF_OK;
}

af_status af_chat_render_mistral7(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                  int32_t target_from, int gen, af_chat_doc *d) {
    (void)gen;
    const int32_t start = m[0].role == AF_ROLE_SYSTEM ? 1 : 0;
    int32_t idx = 0, last_user = -1;
    for (int32_t i = start; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        if (m[i].role == AF_ROLE_USER) last_user = i;
        if (m[i].role == AF_ROLE_TOOL || (mx && mx->n_calls > 0)) {
            AF_TRY(af_chat_mistral_tool_ids(&m[i], mx, i));
            continue;
        }
        if ((m[i].role == AF_ROLE_USER) != (idx % 2 == 0))
            return af_fail(AF_ERR_FORMAT, "messages[%d]: role '%s' where Mistral's chat template needs %s (after an "
                           "optional first system message, turns must alternate user, assistant, user, ...)", (int)i,
                           af_chat_role_name(m[i].role), idx % 2 == 0 ? "'user'" : "a message other than 'user'");
        idx++;
    }
    const char *tmpl = tok ? tok->chat_template : NULL;
    if (tok && tok->bos >= 0) af_chat_doc_add_id(d, tok->bos, 0);
    size_t off = d->len;
    af_chat_put(d, "[SYSTEM_PROMPT]", 15);
    if (start) af_chat_put(d, m[0].content, m[0].len);
    else if (!mistral7_default_system(d, tmpl))
        return af_fail(AF_ERR_UNSUPPORTED, "chat template: mistral-v7 without a system message needs the template's "
                       "default system prompt (default_system_message), which this template does not have");
    af_chat_put(d, "[/SYSTEM_PROMPT]", 16);
    af_chat_end_piece(d, off, 0, 0);
    const int has_tools = af_chat_tools_count(x) > 0;
    for (int32_t i = start; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const int tgt = i >= target_from;
        off = d->len;
        switch (m[i].role) {
        case AF_ROLE_SYSTEM:
            af_chat_put(d, "[SYSTEM_PROMPT]", 15);
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, "[/SYSTEM_PROMPT]", 16);
            af_chat_end_piece(d, off, 0, 0);
            break;
        case AF_ROLE_USER:
            if (has_tools && m[i].len == m[last_user].len && !memcmp(m[i].content, m[last_user].content, m[i].len)) {
                af_chat_put(d, "[AVAILABLE_TOOLS]", 17);
                af_chat_put_json(d, x->tools, x->tools_len, 0);
                af_chat_put(d, "[/AVAILABLE_TOOLS]", 18);
            }
            af_chat_put(d, "[INST]", 6);
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, "[/INST]", 7);
            af_chat_end_piece(d, off, 0, 0);
            break;
        case AF_ROLE_ASSISTANT:
            if (mx && mx->n_calls > 0) {
                for (int32_t k = 0; k < mx->n_calls; k++) {
                    af_chat_put(d, "[TOOL_CALLS]", 12);
                    af_chat_put(d, mx->calls[k].name, strlen(mx->calls[k].name));
                    af_chat_put(d, "[CALL_ID]", 9);
                    af_chat_put(d, mx->calls[k].id, strlen(mx->calls[k].id));
                    af_chat_put(d, "[ARGS]", 6);
                    af_chat_put_json(d, mx->calls[k].args, mx->calls[k].args_len, 0);
                }
            } else {
                af_chat_put(d, m[i].content, m[i].len);
            }
            af_chat_end_piece(d, off, tgt, 0);
            eos_piece(tok, d, tgt);
            break;
        case AF_ROLE_TOOL:
            af_chat_put(d, "[TOOL_RESULTS]", 14);
            af_chat_put(d, mx->call_id, strlen(mx->call_id));
            af_chat_put(d, "[TOOL_CONTENT]", 14);
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, "[/TOOL_RESULTS]", 15);
            af_chat_end_piece(d, off, 0, 0);
            break;
        }
    }
    return AF_OK;
}

/* ---- parsing generated text back into tool calls ---- */

void af_chat_tool_output_free(af_chat_tool_output *o) {
    if (!o) return;
    for (int32_t k = 0; k < o->n_calls; k++) {
        free(o->calls[k].name);
        free(o->calls[k].arguments);
        free(o->calls[k].id);
    }
    free(o->calls);
    free(o->content);
    memset(o, 0, sizeof *o);
}

static char *dup_n(const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    if (n) memcpy(o, s, n);
    o[n] = 0;
    return o;
}

/* Appends a call named name (NUL-terminated) with arguments `args` (a cJSON object, printed compact)
 * and id (may be NULL). */
static af_status add_call(af_chat_tool_output *o, const char *name, const cJSON *args, const char *id, size_t id_len) {
    af_chat_parsed_call *nc = af_realloc_array(o->calls, (size_t)o->n_calls + 1, sizeof *nc);
    if (!nc) return af_fail(AF_ERR_NOMEM, "tool calls: out of memory");
    o->calls = nc;
    af_chat_parsed_call *c = &o->calls[o->n_calls];
    memset(c, 0, sizeof *c);
    c->name = dup_n(name, strlen(name));
    c->arguments = cJSON_PrintUnformatted(args);
    c->id = id ? dup_n(id, id_len) : NULL;
    o->n_calls++;
    if (!c->name || !c->arguments || (id && !c->id)) return af_fail(AF_ERR_NOMEM, "tool calls: out of memory");
    return AF_OK;
}

/* A JSON object s[0..n) {"name": string, "<args_key>": object} (args_key "arguments", or for Llama
 * "parameters" too) as a call; 0 when it is not one. */
static int json_call(af_chat_tool_output *o, const char *s, size_t n, af_status *st) {
    cJSON *j = cJSON_ParseWithLength(s, n);
    int ok = 0;
    if (cJSON_IsObject(j)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
        if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
        if (cJSON_IsString(name) && name->valuestring[0] && cJSON_IsObject(args)) {
            *st = add_call(o, name->valuestring, args, NULL, 0);
            ok = 1;
        }
    }
    cJSON_Delete(j);
    return ok;
}

static af_status parse_hermes(const char *s, size_t n, af_chat_tool_output *o, size_t *content_end) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    af_status st = AF_OK;
    const char *p = s, *end = s + n;
    *content_end = n;
    for (;;) {
        const char *a = NULL;
        for (const char *q = p; q + sizeof open - 1 <= end; q++)
            if (!memcmp(q, open, sizeof open - 1)) { a = q; break; }
        if (!a) break;
        const char *b = a + sizeof open - 1, *e = NULL;
        for (const char *q = b; q + sizeof close - 1 <= end; q++)
            if (!memcmp(q, close, sizeof close - 1)) { e = q; break; }
        const char *stop = e ? e : end;
        if (!json_call(o, b, (size_t)(stop - b), &st)) break; /* not a call: the text stays content */
        if (st != AF_OK) return st;
        if (o->n_calls == 1) *content_end = (size_t)(a - s);
        p = e ? e + sizeof close - 1 : end;
    }
    return st;
}

static af_status parse_mistral7(const char *s, size_t n, af_chat_tool_output *o, size_t *content_end) {
    static const char tc[] = "[TOOL_CALLS]", ci[] = "[CALL_ID]", ar[] = "[ARGS]";
    const char *end = s + n, *p = NULL;
    *content_end = n;
    for (const char *q = s; q + sizeof tc - 1 <= end; q++)
        if (!memcmp(q, tc, sizeof tc - 1)) { p = q; break; }
    if (!p) return AF_OK;
    size_t cend = (size_t)(p - s);
    while (p && p + sizeof tc - 1 <= end && !memcmp(p, tc, sizeof tc - 1)) {
        const char *name = p + sizeof tc - 1, *a = NULL, *id = NULL;
        for (const char *q = name; q + sizeof ar - 1 <= end; q++)
            if (!memcmp(q, ar, sizeof ar - 1)) { a = q; break; }
        if (!a) break;
        const char *name_end = a;
        for (const char *q = name; q + sizeof ci - 1 <= a; q++)
            if (!memcmp(q, ci, sizeof ci - 1)) { name_end = q; id = q + sizeof ci - 1; break; }
        const char *args = a + sizeof ar - 1, *next = NULL;
        for (const char *q = args; q + sizeof tc - 1 <= end; q++)
            if (!memcmp(q, tc, sizeof tc - 1)) { next = q; break; }
        const char *aend = next ? next : end;
        cJSON *j = cJSON_ParseWithLength(args, (size_t)(aend - args));
        if (!cJSON_IsObject(j) || name_end == name) {
            cJSON_Delete(j);
            break;
        }
        char *nm = dup_n(name, (size_t)(name_end - name));
        af_status st = nm ? add_call(o, nm, j, id, id ? (size_t)(a - id) : 0) : af_fail(AF_ERR_NOMEM, "out of memory");
        free(nm);
        cJSON_Delete(j);
        if (st != AF_OK) return st;
        p = next;
    }
    if (o->n_calls) *content_end = cend;
    return AF_OK;
}

/* Mistral Nemo: "[TOOL_CALLS]" followed by a JSON array of {"name", "arguments", "id"?} objects. */
static af_status parse_mistral3(const char *s, size_t n, af_chat_tool_output *o, size_t *content_end) {
    static const char tc[] = "[TOOL_CALLS]";
    *content_end = n;
    const char *p = NULL;
    for (size_t i = 0; i + sizeof tc - 1 <= n; i++)
        if (!memcmp(s + i, tc, sizeof tc - 1)) { p = s + i; break; }
    if (!p) return AF_OK;
    const char *a = p + sizeof tc - 1;
    cJSON *j = cJSON_ParseWithLength(a, n - (size_t)(a - s));
    const cJSON *c;
    af_status st = AF_OK;
    const cJSON *arr = cJSON_IsArray(j) ? j : NULL;
    cJSON_ArrayForEach(c, arr) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsString(name) || !name->valuestring[0] || !cJSON_IsObject(args)) break;
        st = add_call(o, name->valuestring, args, cJSON_IsString(id) ? id->valuestring : NULL,
                      cJSON_IsString(id) ? strlen(id->valuestring) : 0);
        if (st != AF_OK) break;
    }
    cJSON_Delete(j);
    if (o->n_calls) *content_end = (size_t)(p - s);
    return st;
}

af_status af_chat_parse_tool_calls(const af_tokenizer *tok, af_chat_family fam, const char *text, size_t len,
                                   af_chat_tool_output *out) {
    if (!out || (!text && len)) return af_fail(AF_ERR_INVALID_ARG, "tool calls: NULL argument");
    memset(out, 0, sizeof *out);
    (void)tok;
    if (fam != AF_CHAT_QWEN3 && fam != AF_CHAT_QWQ && fam != AF_CHAT_MISTRAL7 && fam != AF_CHAT_CHATML &&
        fam != AF_CHAT_LLAMA3 && fam != AF_CHAT_MISTRAL)
        return af_fail(AF_ERR_UNSUPPORTED, "tool calls: the %s layout has no tool calls (chatml, qwen3, qwq, llama3, "
                       "mistral, mistral-v7 have)", af_chat_family_name(fam));
    size_t cend = len;
    af_status st = AF_OK;
    if (fam == AF_CHAT_MISTRAL7) {
        st = parse_mistral7(text, len, out, &cend);
    } else if (fam == AF_CHAT_MISTRAL) {
        st = parse_mistral3(text, len, out, &cend);
    } else if (fam == AF_CHAT_LLAMA3) {
        size_t b, e;
        af_chat_trim(text, len, &b, &e);
        static const char tag[] = "<|python_tag|>";
        if (e - b >= sizeof tag - 1 && !memcmp(text + b, tag, sizeof tag - 1)) b += sizeof tag - 1;
        if (e > b && text[b] == '{' && json_call(out, text + b, e - b, &st) && st == AF_OK) cend = 0;
    } else {
        st = parse_hermes(text, len, out, &cend);
    }
    if (st == AF_OK) {
        while (cend > 0 && (text[cend - 1] == '\n' || text[cend - 1] == ' ') && out->n_calls) cend--;
        out->content = dup_n(text ? text : "", cend);
        out->content_len = cend;
        if (!out->content) st = af_fail(AF_ERR_NOMEM, "tool calls: out of memory");
    }
    if (st != AF_OK) af_chat_tool_output_free(out);
    return st;
}
