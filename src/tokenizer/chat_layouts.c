/*
 * chat_layouts.c — the chat layouts of Qwen3, Llama 3.x, the DeepSeek-R1 distills, Phi-3/3.5,
 * Mistral's [INST] and SmolLM3's templates (tokenizer.h, docs/FORMATS.md §6.4). Each function writes what the
 * model's published Jinja template writes for system / user / assistant messages (and, for Llama
 * 3.1+, Qwen3 and Mistral Nemo, tool turns: docs/CHAT.md; the shared pieces are in chat_tools.c),
 * as pieces of an af_chat_doc: the assistant content and the end-of-turn marker after it are the
 * loss targets, cut next to the template's special tokens. The references are the templates
 * themselves (tests/fixtures/chat_templates/, rendered by transformers in
 * tests/ref/make_chat_families.py; tests/test_chat_families.c compares text and token ids).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* memmem-like search of a NUL-terminated needle in s[0..n): the first occurrence, or NULL. */
static const char *find(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    if (k > n) return NULL;
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

/* The last occurrence of needle in s[0..n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *needle) {
    const char *last = NULL, *p = s;
    while ((p = find(p, n - (size_t)(p - s), needle)) != NULL) {
        last = p;
        p++;
    }
    return last;
}

/* Python's str.lstrip('\n') / rstrip('\n') on s[*b..*e). */
static void lstrip_nl(const char *s, size_t *b, size_t e) {
    while (*b < e && s[*b] == '\n') (*b)++;
}
static void rstrip_nl(const char *s, size_t b, size_t *e) {
    while (*e > b && s[*e - 1] == '\n') (*e)--;
}

static void add_bos(const af_tokenizer *tok, af_chat_doc *d) {
    if (tok && tok->bos >= 0) af_chat_doc_add_id(d, tok->bos, 0);
}

/* ---- Llama 3.x ----
 * Meta's templates (3.1, 3.2, 3.3): BOS; a system turn "<|start_header_id|>system<|end_header_id|>
 * \n\nCutting Knowledge Date: December 2023\nToday Date: {date}\n\n{trim(first system message or
 * '')}<|eot_id|>"; per other message "<|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}
 * <|eot_id|>"; generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". {date}: the
 * template's date_string default ("26 Jul 2024" in 3.1/3.3); where the template calls
 * strftime_now (3.2) today's date as "%d %b %Y" in UTC, or the date of SOURCE_DATE_EPOCH (seconds)
 * when that variable is set (reproducible data). Llama 3.0's template (no "Cutting Knowledge
 * Date") has no system turn of its own: every message, a system one included, is a header turn. */
static void llama3_date(const char *tmpl, char out[32]) {
    static const char *const mon[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    strcpy(out, "26 Jul 2024");
    if (!tmpl) return;
    if (strstr(tmpl, "strftime_now")) {
        time_t t = time(NULL);
        const char *sde = getenv("SOURCE_DATE_EPOCH");
        if (sde && *sde) {
            char *end;
            long long v = strtoll(sde, &end, 10);
            if (*end == 0 && v >= 0) t = (time_t)v;
        }
        struct tm tmv;
        if (gmtime_r(&t, &tmv) && tmv.tm_mon >= 0 && tmv.tm_mon < 12)
            snprintf(out, 32, "%02d %s %04d", tmv.tm_mday, mon[tmv.tm_mon], tmv.tm_year + 1900);
        return;
    }
    const char *p = strstr(tmpl, "set date_string = \"");
    if (p) {
        p += strlen("set date_string = \"");
        const char *q = strchr(p, '"');
        if (q && q - p > 0 && q - p < 31 && !memchr(p, '{', (size_t)(q - p)) && !memchr(p, '\\', (size_t)(q - p))) {
            memcpy(out, p, (size_t)(q - p));
            out[q - p] = 0;
        }
    }
}

/* With tools (3.1-3.3 templates, tools_in_user_message as by default): "Environment: ipython\n" opens
 * the system turn; the first message after the system one becomes the user turn "Given the following
 * functions, ...Do not use variables.\n\n" + per tool json.dumps(tool, indent=4) + "\n\n" +
 * trim(content); an assistant message with a call (exactly one) is written {"name": "N",
 * "parameters": {arguments}} (its content is not written); a tool result is an "ipython" turn with
 * the content as a JSON string (the template's `tojson` of a string). */
#define LLAMA3_TOOLS_INTRO                                                                                         \
    "Given the following functions, please respond with a JSON for a function call with its proper arguments "   \
    "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "      \
    "dictionary of argument name and its value}.Do not use variables.\n\n"

af_status af_chat_render_llama3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                int32_t target_from, int gen, af_chat_doc *d) {
    const char *tmpl = tok ? tok->chat_template : NULL;
    const int tools = af_chat_tools_count(x) > 0;
    for (int32_t i = 0; x && x->msg && i < n; i++)
        if (x->msg[i].n_calls > 1)
            return af_fail(AF_ERR_FORMAT, "messages[%d]: %d tool calls in one message; Llama 3's template takes one "
                           "(\"This model only supports single tool-calls at once!\")", (int)i, (int)x->msg[i].n_calls);
    add_bos(tok, d);
    int32_t start = 0;
    if (!tmpl || strstr(tmpl, "Cutting Knowledge Date")) {
        char date[32];
        llama3_date(tmpl, date);
        af_chat_add_str(d, "<|start_header_id|>system<|end_header_id|>\n\n", 0, 0);
        if (tools) af_chat_add_str(d, "Environment: ipython\n", 0, 0);
        af_chat_add_str(d, "Cutting Knowledge Date: December 2023\nToday Date: ", 0, 0);
        af_chat_add_str(d, date, 0, 0);
        af_chat_add_str(d, "\n\n", 0, 0);
        if (m[0].role == AF_ROLE_SYSTEM) {
            size_t b, e;
            af_chat_trim(m[0].content, m[0].len, &b, &e);
            af_chat_doc_add_text(d, m[0].content + b, e - b, 0, 0);
            start = 1;
        }
        af_chat_add_str(d, "<|eot_id|>", 0, 0);
    }
    if (tools) {
        if (start >= n)
            return af_fail(AF_ERR_FORMAT, "messages: tools but no message after the system message (Llama 3's "
                           "template writes the tools into the first user message)");
        size_t b, e;
        af_chat_trim(m[start].content, m[start].len, &b, &e);
        af_chat_add_str(d, "<|start_header_id|>", 0, 0);
        size_t off = d->len;
        af_chat_put(d, "user<|end_header_id|>\n\n" LLAMA3_TOOLS_INTRO, strlen("user<|end_header_id|>\n\n" LLAMA3_TOOLS_INTRO));
        af_chat_put_tools(d, x, "", "\n\n", 4);
        af_chat_put(d, m[start].content + b, e - b);
        af_chat_put(d, "<|eot_id|>", 10);
        af_chat_end_piece(d, off, 0, 0);
        start++;
    }
    for (int32_t i = start; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const int call = mx && mx->n_calls == 1;
        const char *role = m[i].role == AF_ROLE_TOOL ? "ipython" : af_chat_role_name(m[i].role);
        int tgt = m[i].role == AF_ROLE_ASSISTANT && i >= target_from;
        size_t b, e;
        af_chat_trim(m[i].content, m[i].len, &b, &e);
        af_chat_add_str(d, "<|start_header_id|>", 0, 0);
        size_t off = d->len, head = strlen(role) + strlen("<|end_header_id|>\n\n");
        af_chat_put(d, role, strlen(role));
        af_chat_put(d, "<|end_header_id|>\n\n", strlen("<|end_header_id|>\n\n"));
        if (call) {
            af_chat_put(d, "{\"name\": \"", strlen("{\"name\": \""));
            af_chat_put(d, mx->calls[0].name, strlen(mx->calls[0].name));
            af_chat_put(d, "\", \"parameters\": ", strlen("\", \"parameters\": "));
            af_chat_put_json(d, mx->calls[0].args, mx->calls[0].args_len, 0);
            af_chat_put(d, "}", 1);
        } else if (m[i].role == AF_ROLE_TOOL) {
            af_chat_put_json_string(d, m[i].content, m[i].len);
        } else {
            af_chat_put(d, m[i].content + b, e - b);
        }
        af_chat_put(d, "<|eot_id|>", 10);
        af_chat_end_piece(d, off, tgt, tgt ? head : 0);
    }
    if (gen) af_chat_add_str(d, "<|start_header_id|>assistant<|end_header_id|>\n\n", 0, 0);
    return AF_OK;
}

/* ---- Qwen3 ----
 * ChatML without a default system prompt; a first system message is the system turn, a later one
 * a "system" turn in place. Assistant content holding "</think>" is split as the template does:
 * answer = the text after the last "</think>" (leading '\n' removed), reasoning = the text before
 * the first "</think>", trailing '\n' removed, after its last "<think>", leading '\n' removed.
 * Assistant messages after the last user message (a user message whose content is wrapped in
 * <tool_response>...</tool_response> does not count) are written "<think>\n{reasoning stripped of
 * '\n'}\n</think>\n\n{answer}" when they are the last message or have a reasoning; every other
 * assistant message is its answer only. Generation prompt "<|im_start|>assistant\n" (thinking on,
 * the template's default). */
static int is_tool_response(const af_chat_msg *m) {
    static const char o[] = "<tool_response>", c[] = "</tool_response>";
    return m->len >= sizeof o - 1 + sizeof c - 1 && !memcmp(m->content, o, sizeof o - 1) &&
           !memcmp(m->content + m->len - (sizeof c - 1), c, sizeof c - 1);
}

static void chatml_turn(af_chat_doc *d, const char *role, const char *s, size_t len, int tgt) {
    af_chat_add_str(d, "<|im_start|>", 0, 0);
    size_t off = d->len, head = strlen(role) + 1;
    af_chat_put(d, role, strlen(role));
    af_chat_put(d, "\n", 1);
    af_chat_put(d, s, len);
    af_chat_put(d, "<|im_end|>", 10);
    af_chat_end_piece(d, off, tgt, tgt ? head : 0);
    af_chat_add_str(d, "\n", 0, 0);
}

af_status af_chat_render_qwen3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                               int32_t target_from, int gen, af_chat_doc *d) {
    (void)tok;
    if (af_chat_tools_count(x) > 0) {
        const int sys = m[0].role == AF_ROLE_SYSTEM;
        af_chat_hermes_system(d, x, sys ? m[0].content : "", sys ? m[0].len : 0, 0);
    } else if (m[0].role == AF_ROLE_SYSTEM) {
        af_chat_add_str(d, "<|im_start|>system\n", 0, 0);
        af_chat_doc_add_text(d, m[0].content, m[0].len, 0, 0);
        af_chat_add_str(d, "<|im_end|>\n", 0, 0);
    }
    int32_t last_query = n - 1;
    for (int32_t i = n - 1; i >= 0; i--)
        if (m[i].role == AF_ROLE_USER && !is_tool_response(&m[i])) {
            last_query = i;
            break;
        }
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_SYSTEM && i == 0) continue;
        if (m[i].role == AF_ROLE_TOOL) {
            i = af_chat_hermes_results(d, m, n, i) - 1;
            continue;
        }
        if (m[i].role != AF_ROLE_ASSISTANT) {
            chatml_turn(d, af_chat_role_name(m[i].role), m[i].content, m[i].len, 0);
            continue;
        }
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const char *c = m[i].content;
        size_t ab = 0, ae = m[i].len, rb = 0, re = 0; /* answer c[ab..ae), reasoning c[rb..re) */
        const char *close_last = find_last(c, m[i].len, "</think>");
        if (close_last) {
            ab = (size_t)(close_last - c) + 8;
            lstrip_nl(c, &ab, ae);
            re = (size_t)(find(c, m[i].len, "</think>") - c);
            rstrip_nl(c, 0, &re);
            const char *open = find_last(c, re, "<think>");
            rb = open ? (size_t)(open - c) + 7 : 0;
            lstrip_nl(c, &rb, re);
        }
        int tgt = i >= target_from;
        af_chat_add_str(d, "<|im_start|>", 0, 0);
        size_t off = d->len;
        af_chat_put(d, "assistant\n", 10);
        const int has_content = ae > ab; /* the template's `content` before its lstrip('\n') below */
        if (i > last_query && (i == n - 1 || re > rb)) {
            size_t b = rb, e = re;
            lstrip_nl(c, &b, e);
            rstrip_nl(c, b, &e);
            af_chat_put(d, "<think>\n", 8);
            af_chat_put(d, c + b, e - b);
            af_chat_put(d, "\n</think>\n\n", 11);
            lstrip_nl(c, &ab, ae);
        }
        af_chat_put(d, c + ab, ae - ab);
        for (int32_t k = 0; mx && k < mx->n_calls; k++) {
            if (k > 0 || has_content) af_chat_put(d, "\n", 1);
            af_chat_hermes_call(d, &mx->calls[k]);
        }
        af_chat_put(d, "<|im_end|>", 10);
        af_chat_end_piece(d, off, tgt, tgt ? 10 : 0);
        af_chat_add_str(d, "\n", 0, 0);
    }
    if (gen) af_chat_add_str(d, "<|im_start|>assistant\n", 0, 0);
    return AF_OK;
}

/* ---- DeepSeek-R1 distills (Qwen and Llama bases) ----
 * BOS; the content of the LAST system message, verbatim; per user message "<｜User｜>{content}";
 * per assistant message "<｜Assistant｜>{content after its last '</think>', or all of it}
 * <｜end▁of▁sentence｜>"; system messages write nothing in place. Generation prompt
 * "<｜Assistant｜><think>\n". */
#define DS_USER "\xEF\xBD\x9CUser\xEF\xBD\x9C"
#define DS_ASSISTANT "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"
#define DS_EOS "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"

af_status af_chat_render_deepseek_r1(const af_tokenizer *tok, const af_chat_msg *m, int32_t n,
                                     int32_t target_from, int gen, af_chat_doc *d) {
    add_bos(tok, d);
    for (int32_t i = n - 1; i >= 0; i--)
        if (m[i].role == AF_ROLE_SYSTEM) {
            af_chat_doc_add_text(d, m[i].content, m[i].len, 0, 0);
            break;
        }
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_USER) {
            af_chat_add_str(d, "<" DS_USER ">", 0, 0);
            af_chat_doc_add_text(d, m[i].content, m[i].len, 0, 0);
        } else if (m[i].role == AF_ROLE_ASSISTANT) {
            const char *c = m[i].content, *cl = find_last(c, m[i].len, "</think>");
            size_t b = cl ? (size_t)(cl - c) + 8 : 0;
            af_chat_add_str(d, DS_ASSISTANT, 0, 0);
            size_t off = d->len;
            af_chat_put(d, c + b, m[i].len - b);
            af_chat_put(d, DS_EOS, strlen(DS_EOS));
            af_chat_end_piece(d, off, i >= target_from, 0);
        }
    }
    if (gen) af_chat_add_str(d, DS_ASSISTANT "<think>\n", 0, 0);
    return AF_OK;
}

/* ---- Phi-3.5 / Phi-3 ----
 * Phi-3.5-mini's template: per message "<|{system|user|assistant}|>\n{content}<|end|>\n" (a system
 * message only when its content is not empty); then the generation prompt "<|assistant|>\n", or
 * without it the EOS token. No BOS. */
/* Phi-3-mini's first template ("{{ bos_token }}" and no system branch): BOS; system messages are
 * dropped; per user message "<|user|>\n{content}<|end|>\n<|assistant|>\n"; per assistant message
 * "{content}<|end|>\n"; no separate generation prompt (a user turn ends with the assistant header). */
static void render_phi3_mini(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                             af_chat_doc *d) {
    add_bos(tok, d);
    int pending_nl = 0; /* a "\n" after "<|assistant|>" or "<|end|>": the head of a following assistant piece */
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_SYSTEM) continue;
        if (m[i].role == AF_ROLE_USER) {
            if (pending_nl) af_chat_add_str(d, "\n", 0, 0);
            af_chat_add_str(d, "<|user|>", 0, 0);
            size_t off = d->len;
            af_chat_put(d, "\n", 1);
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, "<|end|>", 7);
            af_chat_end_piece(d, off, 0, 0);
            af_chat_add_str(d, "\n", 0, 0);
            af_chat_add_str(d, "<|assistant|>", 0, 0);
            pending_nl = 1;
            continue;
        }
        int tgt = i >= target_from;
        size_t off = d->len, head = pending_nl ? 1 : 0;
        if (pending_nl) af_chat_put(d, "\n", 1);
        pending_nl = 0;
        af_chat_put(d, m[i].content, m[i].len);
        af_chat_put(d, "<|end|>", 7);
        af_chat_end_piece(d, off, tgt, tgt ? head : 0);
        pending_nl = 1; /* its "\n" heads a following assistant piece (cut only at special tokens) */
    }
    if (pending_nl) af_chat_add_str(d, "\n", 0, 0);
}

af_status af_chat_render_phi3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                              int gen, af_chat_doc *d) {
    const char *tmpl = tok ? tok->chat_template : NULL;
    if (tmpl && strstr(tmpl, "bos_token") && !strstr(tmpl, "'system'")) {
        render_phi3_mini(tok, m, n, target_from, d);
        return AF_OK;
    }
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_SYSTEM && !m[i].len) continue;
        int tgt = m[i].role == AF_ROLE_ASSISTANT && i >= target_from;
        const char *open = m[i].role == AF_ROLE_SYSTEM ? "<|system|>" : m[i].role == AF_ROLE_USER ? "<|user|>"
                                                                                                 : "<|assistant|>";
        af_chat_add_str(d, open, 0, 0);
        size_t off = d->len;
        af_chat_put(d, "\n", 1);
        af_chat_put(d, m[i].content, m[i].len);
        af_chat_put(d, "<|end|>", 7);
        af_chat_end_piece(d, off, tgt, tgt ? 1 : 0);
        af_chat_add_str(d, "\n", 0, 0);
    }
    if (gen) af_chat_add_str(d, "<|assistant|>\n", 0, 0);
    else if (tok && tok->eos >= 0) af_chat_doc_add_id(d, tok->eos, 0);
    return AF_OK;
}

/* ---- Mistral [INST] (v3 / Nemo) ----
 * BOS; an optional first system message; the other messages, except tool results and messages with
 * tool calls, must alternate user, assistant, ... (the template raises otherwise); per user message
 * "[INST]{content}[/INST]", where the LAST message, when it is a user message and there is a system
 * message, is "[INST]{system}\n\n{content}[/INST]" (a system message is written only then); per
 * assistant message "{content}" + EOS. The template has no separate generation prompt: the
 * conversation ending in "[/INST]" is the prompt. Tool turns (Nemo's template): the tools list
 * before the last user message (chat_tools.c af_chat_mistral3_tools); an assistant message with
 * calls "[TOOL_CALLS][" + per call {"name": N, "arguments": {...}, "id": "ID"} joined by ", " + "]" +
 * EOS; a tool result "[TOOL_RESULTS]{"content": {content}, "call_id": "ID"}[/TOOL_RESULTS]"; ids of
 * 9 characters (the template raises otherwise). */
af_status af_chat_render_mistral(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                 int32_t target_from, int gen, af_chat_doc *d) {
    (void)gen;
    int32_t start = m[0].role == AF_ROLE_SYSTEM ? 1 : 0, idx = 0, last_user = -1;
    for (int32_t i = start; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        if (m[i].role == AF_ROLE_TOOL || (mx && mx->n_calls > 0)) {
            AF_TRY(af_chat_mistral_tool_ids(&m[i], mx, i));
            continue;
        }
        af_chat_role want = idx % 2 == 0 ? AF_ROLE_USER : AF_ROLE_ASSISTANT;
        if (m[i].role != want)
            return af_fail(AF_ERR_FORMAT, "messages[%d]: role '%s' where Mistral's chat template needs '%s' (after an "
                           "optional first system message, turns must alternate user, assistant, user, ...)",
                           (int)i, af_chat_role_name(m[i].role), af_chat_role_name(want));
        if (want == AF_ROLE_USER) last_user = i;
        idx++;
    }
    const int tools = af_chat_tools_count(x) > 0;
    add_bos(tok, d);
    for (int32_t i = start; i < n; i++) {
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const int tgt = i >= target_from;
        size_t off = d->len;
        if (mx && mx->n_calls > 0) {
            af_chat_put(d, "[TOOL_CALLS][", 13);
            for (int32_t k = 0; k < mx->n_calls; k++) {
                if (k) af_chat_put(d, ", ", 2);
                af_chat_put(d, "{\"name\": ", 9);
                af_chat_put_json_string(d, mx->calls[k].name, strlen(mx->calls[k].name));
                af_chat_put(d, ", \"arguments\": ", 15);
                af_chat_put_json(d, mx->calls[k].args, mx->calls[k].args_len, 0);
                af_chat_put(d, ", \"id\": \"", 9);
                af_chat_put(d, mx->calls[k].id, strlen(mx->calls[k].id));
                af_chat_put(d, "\"}", 2);
            }
            af_chat_put(d, "]", 1);
            af_chat_end_piece(d, off, tgt, 0);
            if (tok && tok->eos >= 0) af_chat_doc_add_id(d, tok->eos, tgt);
            else af_chat_add_str(d, "</s>", tgt, 0);
        } else if (m[i].role == AF_ROLE_TOOL) {
            af_chat_put(d, "[TOOL_RESULTS]{\"content\": ", 26);
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, ", \"call_id\": \"", 14);
            af_chat_put(d, mx->call_id, strlen(mx->call_id));
            af_chat_put(d, "\"}[/TOOL_RESULTS]", 17);
            af_chat_end_piece(d, off, 0, 0);
        } else if (m[i].role == AF_ROLE_USER) {
            if (tools && m[i].len == m[last_user].len && !memcmp(m[i].content, m[last_user].content, m[i].len))
                AF_TRY(af_chat_mistral3_tools(d, x));
            af_chat_put(d, "[INST]", 6);
            if (start && i == n - 1) {
                af_chat_put(d, m[0].content, m[0].len);
                af_chat_put(d, "\n\n", 2);
            }
            af_chat_put(d, m[i].content, m[i].len);
            af_chat_put(d, "[/INST]", 7);
            af_chat_end_piece(d, off, 0, 0);
        } else {
            af_chat_doc_add_text(d, m[i].content, m[i].len, tgt, 0);
            if (tok && tok->eos >= 0) af_chat_doc_add_id(d, tok->eos, tgt);
            else af_chat_add_str(d, "</s>", tgt, 0);
        }
    }
    return AF_OK;
}

/* ---- SmolLM3 ----
 * ChatML with a generated system turn (the template HuggingFaceTB/SmolLM3-3B as edited by Unsloth,
 * tests/fixtures/chat_templates/): "<|im_start|>system\n## Metadata\n\n{cutoff line}Reasoning Mode:
 * {mode}\n\n## Custom Instructions\n\n{instructions}<|im_end|>\n". mode is "/think" unless the
 * first (system) message contains "/no_think" (or, failing that, "/think" keeps it on);
 * instructions: that message without "/no_think" and "/think", right-stripped, plus "\n\n"; when
 * empty, the template's default text for the mode. The cut-off line and the default texts are
 * read from the template's string literals. Then user messages "<|im_start|>user\n{c}<|im_end|>\n",
 * assistant ones "<|im_start|>assistant\n" (+ "<think>\n\n</think>\n" in /no_think mode, part of
 * the header) "{c without leading '\n'}<|im_end|>\n"; system messages write nothing in place.
 * Generation prompt: the assistant header. */

/* The Jinja string literal starting at the first '"' at or after p (escapes \n \" \\ undone), or
 * NULL; malloc'ed. */
static char *jinja_literal(const char *p, size_t *len) {
    const char *q = p ? strchr(p, '"') : NULL;
    if (!q) return NULL;
    q++;
    size_t n = 0, cap = 256;
    char *o = malloc(cap);
    if (!o) return NULL;
    for (; *q && *q != '"'; q++) {
        char c = *q;
        if (c == '\\' && q[1]) {
            q++;
            c = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
        }
        if (n + 1 >= cap) {
            char *no = realloc(o, cap *= 2);
            if (!no) { free(o); return NULL; }
            o = no;
        }
        o[n++] = c;
    }
    if (*q != '"') { free(o); return NULL; }
    o[n] = 0;
    *len = n;
    return o;
}

/* s[0..n) with every occurrence of `a` removed, malloc'ed (NULL on OOM). */
static char *remove_all(const char *s, size_t n, const char *a, size_t *out_len) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = strlen(a), w = 0;
    for (size_t i = 0; i < n;) {
        if (i + k <= n && !memcmp(s + i, a, k)) { i += k; continue; }
        o[w++] = s[i++];
    }
    o[w] = 0;
    *out_len = w;
    return o;
}

af_status af_chat_render_smollm3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                                 int gen, af_chat_doc *d) {
    const char *tmpl = tok ? tok->chat_template : NULL;
    const char *cut = tmpl ? strstr(tmpl, "Knowledge Cutoff Date:") : NULL;
    const char *think_at = tmpl ? strstr(tmpl, "elif reasoning_mode == \"/think\"") : NULL;
    const char *else_at = think_at ? strstr(think_at, "{%- else -%}") : NULL;
    const char *cut_end = cut ? strstr(cut, "\\n") : NULL;
    if (!cut || !think_at || !else_at || !cut_end)
        return af_fail(AF_ERR_UNSUPPORTED, "chat template: smollm3 layout needs SmolLM3's template (its cut-off line "
                       "and default instructions are read from it)");
    int no_think = 0;
    size_t cl = 0;
    char *custom = NULL;
    if (m[0].role == AF_ROLE_SYSTEM) {
        if (find(m[0].content, m[0].len, "/no_think")) no_think = 1;
        size_t l1;
        char *t1 = remove_all(m[0].content, m[0].len, "/no_think", &l1);
        custom = t1 ? remove_all(t1, l1, "/think", &cl) : NULL;
        free(t1);
        if (!custom) return af_fail(AF_ERR_NOMEM, "chat render: out of memory");
        size_t b, e;
        af_chat_trim(custom, cl, &b, &e);
        cl = b == e ? 0 : e; /* Python rstrip(): all white space -> empty */
    }
    size_t dl = 0;
    char *def = cl ? NULL : jinja_literal(no_think ? else_at : think_at + strlen("elif reasoning_mode == \"/think\""), &dl);
    if (!cl && !def) {
        free(custom);
        return af_fail(AF_ERR_UNSUPPORTED, "chat template: smollm3: no default instructions found in the template");
    }
    af_chat_add_str(d, "<|im_start|>system\n## Metadata\n\n", 0, 0);
    af_chat_doc_add_text(d, cut, (size_t)(cut_end - cut), 0, 0);
    af_chat_add_str(d, no_think ? "\nReasoning Mode: /no_think\n\n## Custom Instructions\n\n"
                                : "\nReasoning Mode: /think\n\n## Custom Instructions\n\n", 0, 0);
    if (cl) {
        af_chat_doc_add_text(d, custom, cl, 0, 0);
        af_chat_add_str(d, "\n\n", 0, 0);
    } else {
        af_chat_doc_add_text(d, def, dl, 0, 0);
    }
    free(custom);
    free(def);
    af_chat_add_str(d, "<|im_end|>\n", 0, 0);
    const char *ahead = no_think ? "assistant\n<think>\n\n</think>\n" : "assistant\n";
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_SYSTEM) continue;
        if (m[i].role == AF_ROLE_USER) {
            chatml_turn(d, "user", m[i].content, m[i].len, 0);
            continue;
        }
        size_t b = 0;
        lstrip_nl(m[i].content, &b, m[i].len);
        int tgt = i >= target_from;
        af_chat_add_str(d, "<|im_start|>", 0, 0);
        size_t off = d->len;
        af_chat_put(d, ahead, strlen(ahead));
        af_chat_put(d, m[i].content + b, m[i].len - b);
        af_chat_put(d, "<|im_end|>", 10);
        af_chat_end_piece(d, off, tgt, tgt ? strlen(ahead) : 0);
        af_chat_add_str(d, "\n", 0, 0);
    }
    if (gen) {
        af_chat_add_str(d, "<|im_start|>", 0, 0);
        af_chat_add_str(d, ahead, 0, 0);
    }
    return AF_OK;
}
