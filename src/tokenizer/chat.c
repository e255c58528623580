/*
 * chat.c — chat templates of the ChatML and Gemma families (tokenizer.h): multi-turn rendering into
 * pieces with loss targets, their tokenization, and the single-turn generation prompt
 * (af_chat_format_tok) as a special case of the same renderer. The Jinja templates are not
 * interpreted: the family is recognised and its fixed layout reproduced; tests compare the token
 * ids with transformers' apply_chat_template (tests/ref/make_chat_fixture.py).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const kFamilyName[AF_CHAT_NFAMILIES] = {"none",    "chatml", "gemma",      "gemma4",
                                                             "qwen3",   "llama3", "deepseek-r1", "phi3",
                                                             "mistral", "smollm3", "qwq",       "mistral-v7"};
#define FAMILY_NAMES "chatml, qwen3, llama3, deepseek-r1, phi3, mistral, smollm3, gemma, gemma4, qwq, mistral-v7"

const char *af_chat_family_name(af_chat_family f) {
    return f > AF_CHAT_NONE && f < AF_CHAT_NFAMILIES ? kFamilyName[f] : "none";
}

/* ---- documents ---- */
void af_chat_doc_free(af_chat_doc *d) {
    if (!d) return;
    free(d->text);
    free(d->pc);
    memset(d, 0, sizeof *d);
}

static af_chat_piece *new_piece(af_chat_doc *d) {
    if (d->n == d->pcap) {
        int32_t nc = d->pcap ? d->pcap * 2 : 16;
        af_chat_piece *np = af_realloc_array(d->pc, (size_t)nc, sizeof *np);
        if (!np) { d->oom = 1; return NULL; }
        d->pc = np;
        d->pcap = nc;
    }
    af_chat_piece *p = &d->pc[d->n++];
    memset(p, 0, sizeof *p);
    p->off = d->len;
    p->id = -1;
    return p;
}

int af_chat_put(af_chat_doc *d, const char *s, size_t n) {
    if (d->oom) return 0;
    if (n > SIZE_MAX / 4 - d->len) { d->oom = 1; return 0; }
    if (d->len + n + 1 > d->cap) {
        size_t nc = (d->len + n + 1) * 2;
        char *np = realloc(d->text, nc);
        if (!np) { d->oom = 1; return 0; }
        d->text = np;
        d->cap = nc;
    }
    if (n) memcpy(d->text + d->len, s, n);
    d->len += n;
    d->text[d->len] = 0;
    return 1;
}

/* Makes text[off..d->len) (already appended) a piece, merged into the previous piece when both are
 * non-target and adjacent. */
void af_chat_end_piece(af_chat_doc *d, size_t off, int target, size_t head) {
    if (d->oom || d->len == off) return;
    af_chat_piece *last = d->n ? &d->pc[d->n - 1] : NULL;
    if (!target && last && !last->target && last->len && last->off + last->len == off) {
        last->len = d->len - last->off;
        return;
    }
    af_chat_piece *p = new_piece(d);
    if (!p) return;
    p->off = off;
    p->len = d->len - off;
    p->target = target != 0;
    p->head = head;
}

void af_chat_doc_add_text(af_chat_doc *d, const char *s, size_t len, int target, size_t head) {
    size_t off = d->len;
    if (af_chat_put(d, s, len)) af_chat_end_piece(d, off, target, head);
}

void af_chat_doc_add_id(af_chat_doc *d, int32_t id, int target) {
    if (d->oom) return;
    if (!d->text && !af_chat_put(d, "", 0)) return; /* keep text valid (NUL-terminated) */
    af_chat_piece *p = new_piece(d);
    if (!p) return;
    p->id = id;
    p->target = target != 0;
}

/* ---- template facts ---- */
void af_chat_add_str(af_chat_doc *d, const char *s, int target, size_t head) {
    af_chat_doc_add_text(d, s, strlen(s), target, head);
}

/* Default system prompt written literally in a ChatML template: the first "<|im_start|>system" +
 * newline + TEXT + "<|im_end|>" whose TEXT has no Jinja syntax or quote ({ } ' " +), or NULL. The
 * newline is either a real one (SmolLM2: template text) or the two characters backslash-n inside a
 * Jinja string literal (Qwen2.5: '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n'); in the
 * latter TEXT must also have no backslash (no escape to undo). */
static const char *default_system(const char *tmpl, size_t *len) {
    static const char *const open[2] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    const char *best = NULL, *best_open = NULL;
    size_t best_len = 0;
    for (int form = 0; form < 2 && tmpl; form++) {
        const size_t ol = strlen(open[form]);
        for (const char *p = strstr(tmpl, open[form]); p; p = strstr(p + 1, open[form])) {
            const char *s = p + ol, *e = strstr(s, "<|im_end|>");
            if (!e) break;
            if (e == s) continue;
            const char *q = s;
            while (q < e && *q != '{' && *q != '}' && *q != '\'' && *q != '"' && *q != '+' && (form == 0 || *q != '\\'))
                q++;
            if (q < e) continue;
            if (!best || p < best_open) { /* the earliest in the template */
                best = s;
                best_open = p;
                best_len = (size_t)(e - s);
            }
            break;
        }
    }
    *len = best_len;
    return best;
}

/* Recognition: the first row whose markers all occur in the template. A row with a `refuse` text is
 * a variant whose layout afinar does not reproduce: refused, naming the row's family as the nearest. */
typedef struct {
    const char *m[3];     /* markers, all required (NULL-terminated) */
    af_chat_family fam;
    const char *refuse;   /* NULL: render with fam */
} family_rule;

#define DS_ASSISTANT_MARK "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"
static const family_rule kRules[] = {
    {{"<|turn>"}, AF_CHAT_GEMMA4, NULL},
    {{"<start_of_turn>"}, AF_CHAT_GEMMA, NULL},
    {{DS_ASSISTANT_MARK, "is_output_first=true", "if message['role'] == 'assistant' and message['content'] is not none"},
     AF_CHAT_DEEPSEEK_R1, NULL},
    {{DS_ASSISTANT_MARK}, AF_CHAT_DEEPSEEK_R1, "a DeepSeek template other than the R1 distills' (e.g. DeepSeek "
      "V3.1 and later, llama.cpp's DeepSeek-R1 template; closest supported layout: deepseek-r1)"},
    {{"<|start_header_id|>", "<|eot_id|>", "message['content'] | trim"}, AF_CHAT_LLAMA3, NULL},
    {{"<|start_header_id|>", "<|eot_id|>"}, AF_CHAT_LLAMA3, "a Llama 3 header template other than Meta's (e.g. "
      "functionary's; closest supported layout: llama3)"},
    {{"<|im_start|>", "last_query_index", "if '</think>' in message.content"}, AF_CHAT_QWEN3, NULL},
    {{"<|im_start|>", "last_query_index"}, AF_CHAT_QWEN3, "a ChatML template with Qwen3-style reasoning that "
      "is not Qwen3's (e.g. Qwen3.5's, MiniCPM5's; closest supported layout: qwen3)"},
    {{"<|im_start|>", "Reasoning Mode: ", "Knowledge Cutoff Date:"}, AF_CHAT_SMOLLM3, NULL},
    {{"<|im_start|>", "<|im_start|>assistant\\n<think>\\n", "message.content.split('</think>')[-1].lstrip('\\n')"},
     AF_CHAT_QWQ, NULL},
    {{"<|im_start|>", "<think>"}, AF_CHAT_QWEN3, "a ChatML template with reasoning (<think>) blocks other than those "
      "of Qwen3, QwQ and SmolLM3"},
    {{"<|im_start|>"}, AF_CHAT_CHATML, NULL},
    {{"<|user|>", "<|assistant|>", "message['role'] == 'system' and message['content']"}, AF_CHAT_PHI3, NULL},
    {{"<|user|>", "'<|end|>' + '\n' + '<|assistant|>'", "bos_token"}, AF_CHAT_PHI3, NULL}, /* Phi-3-mini's first */
    {{"<|end|>"}, AF_CHAT_PHI3, "a Phi template other than Phi-3's and Phi-3.5's (e.g. Phi-4-mini's "
      "<|system|>...<|end|> without newlines and with <|tool|> blocks; closest supported layout: phi3)"},
    {{"[SYSTEM_PROMPT]", "default_system_message", "[CALL_ID]"}, AF_CHAT_MISTRAL7, NULL},
    {{"[SYSTEM_PROMPT]"}, AF_CHAT_MISTRAL7, "a Mistral [SYSTEM_PROMPT] template other than Mistral Small 3.x's "
      "(e.g. Devstral's or Ministral's, which write tool calls without [CALL_ID] and assistant content before "
      "them; closest supported layout: mistral-v7)"},
    {{"[INST] "}, AF_CHAT_MISTRAL, "Mistral's v1 template (spaces inside [INST] ... [/INST], e.g. "
      "Mistral-7B-Instruct-v0.1/v0.2; closest supported layout: mistral, the v3 layout without the spaces)"},
    {{"[INST]", "[/INST]"}, AF_CHAT_MISTRAL, NULL},
    {{"[INST]"}, AF_CHAT_MISTRAL, "an [INST] template without [/INST]"},
};

/* Marker tokens of each family, tried in order when the file has no template. */
static const struct { const char *tok; af_chat_family fam; } kTokenRules[] = {
    {"<|turn>", AF_CHAT_GEMMA4},          {"<start_of_turn>", AF_CHAT_GEMMA},   {"<|im_start|>", AF_CHAT_CHATML},
    {"<|start_header_id|>", AF_CHAT_LLAMA3}, {DS_ASSISTANT_MARK, AF_CHAT_DEEPSEEK_R1}, {"<|assistant|>", AF_CHAT_PHI3},
    {"[INST]", AF_CHAT_MISTRAL},
};

af_status af_chat_family_of_template(const af_tokenizer *tok, const char *tmpl, af_chat_family *fam) {
    if (!fam) return af_fail(AF_ERR_INVALID_ARG, "chat template: NULL argument");
    *fam = AF_CHAT_NONE;
    if (tmpl) {
        for (size_t r = 0; r < sizeof kRules / sizeof kRules[0]; r++) {
            const family_rule *f = &kRules[r];
            int all = 1;
            for (int k = 0; k < 3 && f->m[k] && all; k++) all = strstr(tmpl, f->m[k]) != NULL;
            if (!all) continue;
            if (f->refuse)
                return af_fail(AF_ERR_UNSUPPORTED, "chat template: the model's template is %s, a layout afinar does "
                               "not reproduce (nearest family: %s); choose a layout with --chat-template NAME (%s)",
                               f->refuse, af_chat_family_name(f->fam), FAMILY_NAMES);
            *fam = f->fam;
            return AF_OK;
        }
        /* nearest: a family whose end-of-turn word or role syntax occurs */
        const char *near = strstr(tmpl, "eos_token") && strstr(tmpl, "[") ? "mistral"
                           : strstr(tmpl, "im_end") || strstr(tmpl, "im_start") ? "chatml"
                           : strstr(tmpl, "header_id") || strstr(tmpl, "eot_id")  ? "llama3"
                           : strstr(tmpl, "turn")                                 ? "gemma"
                                                                                  : "chatml";
        return af_fail(AF_ERR_UNSUPPORTED, "chat template: the model's tokenizer.chat_template matches none of the "
                       "layouts afinar reproduces (nearest family: %s); choose a layout with --chat-template NAME "
                       "(%s)", near, FAMILY_NAMES);
    }
    if (!tok) return af_fail(AF_ERR_INVALID_ARG, "chat template: no tokenizer");
    for (size_t r = 0; r < sizeof kTokenRules / sizeof kTokenRules[0]; r++)
        if (af_tokenizer_find(tok, kTokenRules[r].tok, strlen(kTokenRules[r].tok)) >= 0) {
            *fam = kTokenRules[r].fam;
            return AF_OK;
        }
    return af_fail(AF_ERR_UNSUPPORTED, "chat template: the model has no chat template and no marker token of a known "
                   "layout (<|im_start|>, <start_of_turn>, <|start_header_id|>, ...); choose a layout with "
                   "--chat-template NAME (%s)", FAMILY_NAMES);
}

af_status af_chat_family_of(const af_tokenizer *tok, const char *override, af_chat_family *fam) {
    if (!fam) return af_fail(AF_ERR_INVALID_ARG, "chat template: NULL argument");
    *fam = AF_CHAT_NONE;
    if (override && strcmp(override, "auto")) {
        for (int f = AF_CHAT_NONE + 1; f < AF_CHAT_NFAMILIES; f++)
            if (!strcmp(override, kFamilyName[f])) {
                *fam = (af_chat_family)f;
                return AF_OK;
            }
        return af_fail(AF_ERR_INVALID_ARG, "chat template '%.40s': unknown (expected auto, " FAMILY_NAMES ")", override);
    }
    if (!tok) return af_fail(AF_ERR_INVALID_ARG, "chat template: no tokenizer");
    return af_chat_family_of_template(tok, tok->chat_template, fam);
}

/* Length of the Unicode white-space code point (Python str.isspace) starting at s[0..n), or 0. */
static size_t ws_at(const unsigned char *s, size_t n) {
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) ? 1 : 0;
    int k = af_utf8_valid_len(s, n);
    if (k < 2) return 0;
    unsigned cp = k == 2 ? ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu)
                         : k == 3 ? ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu) : 0;
    bool ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
              cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return ws ? (size_t)k : 0;
}

/* Jinja `trim` (Python str.strip()): s[*b..*e) without leading/trailing Unicode white space. */
void af_chat_trim(const char *s, size_t len, size_t *b, size_t *e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, j = len, k;
    while (i < j && (k = ws_at(u + i, j - i)) > 0) i += k;
    while (j > i) {
        size_t st = j - 1; /* start of the last code point */
        while (st > i && j - st < 4 && (u[st] & 0xC0) == 0x80) st--;
        if ((k = ws_at(u + st, j - st)) == 0 || st + k != j) break;
        j = st;
    }
    *b = i;
    *e = j;
}

/* ---- rendering ---- */
/* ChatML; with Qwen2.5's template also its tool turns (chat_tools.c): with tools the system turn is
 * "{system or the default}\n\n# Tools..."; an assistant message with calls is "<|im_start|>assistant"
 * ("\n" + content when not empty) + per call "\n<tool_call>...</tool_call>" + "<|im_end|>\n"; tool
 * results are grouped in one user turn. */
static void render_chatml(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                          int32_t target_from, int gen, af_chat_doc *d) {
    size_t dl = 0;
    const char *def = m[0].role != AF_ROLE_SYSTEM && tok ? default_system(tok->chat_template, &dl) : NULL;
    int32_t i = 0;
    if (af_chat_tools_count(x) > 0) {
        const int sys = m[0].role == AF_ROLE_SYSTEM;
        af_chat_hermes_system(d, x, sys ? m[0].content : def ? def : "", sys ? m[0].len : def ? dl : 0, 1);
        i = sys;
    } else if (def) {
        af_chat_add_str(d, "<|im_start|>system\n", 0, 0);
        af_chat_doc_add_text(d, def, dl, 0, 0);
        af_chat_add_str(d, "<|im_end|>\n", 0, 0);
    }
    while (i < n) {
        if (m[i].role == AF_ROLE_TOOL) {
            i = af_chat_hermes_results(d, m, n, i);
            continue;
        }
        const af_chat_msg_x *mx = x && x->msg ? &x->msg[i] : NULL;
        const char *role = af_chat_role_name(m[i].role);
        int tgt = m[i].role == AF_ROLE_ASSISTANT && i >= target_from;
        af_chat_add_str(d, "<|im_start|>", 0, 0);
        /* one piece from the role header to the end-of-turn token: cut only next to special tokens */
        size_t off = d->len, head = strlen(role) + 1;
        af_chat_put(d, role, strlen(role));
        if (mx && mx->n_calls > 0) {
            if (m[i].len) af_chat_put(d, "\n", 1);
            af_chat_put(d, m[i].content, m[i].len);
            for (int32_t k = 0; k < mx->n_calls; k++) {
                af_chat_put(d, "\n", 1);
                af_chat_hermes_call(d, &mx->calls[k]);
            }
        } else {
            af_chat_put(d, "\n", 1);
            af_chat_put(d, m[i].content, m[i].len);
        }
        af_chat_put(d, "<|im_end|>", 10);
        af_chat_end_piece(d, off, tgt, tgt ? head : 0);
        af_chat_add_str(d, "\n", 0, 0);
        i++;
    }
    if (gen) af_chat_add_str(d, "<|im_start|>assistant\n", 0, 0);
}

static af_status render_gemma(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                              int gen, af_chat_doc *d) {
    if (m[0].role == AF_ROLE_SYSTEM && tok && tok->chat_template && strstr(tok->chat_template, "System role not supported"))
        return af_fail(AF_ERR_FORMAT, "messages[0]: a system message, which the model's template refuses (Gemma 2: "
                       "'System role not supported')");
    if (tok && tok->bos >= 0) af_chat_doc_add_id(d, tok->bos, 0);
    int32_t start = m[0].role == AF_ROLE_SYSTEM ? 1 : 0;
    for (int32_t i = start; i < n; i++) {
        af_chat_role want = (i - start) % 2 == 0 ? AF_ROLE_USER : AF_ROLE_ASSISTANT;
        if (m[i].role != want)
            return af_fail(AF_ERR_FORMAT, "messages[%d]: role '%s' where Gemma's chat template needs '%s' (after an "
                           "optional first system message, turns must alternate user, assistant, user, ...)",
                           (int)i, af_chat_role_name(m[i].role), af_chat_role_name(want));
        int tgt = want == AF_ROLE_ASSISTANT && i >= target_from;
        const char *head = want == AF_ROLE_ASSISTANT ? "model\n" : "user\n";
        size_t b, e;
        af_chat_trim(m[i].content, m[i].len, &b, &e);
        af_chat_add_str(d, "<start_of_turn>", 0, 0);
        size_t off = d->len;
        af_chat_put(d, head, strlen(head));
        if (start && i == start) {
            af_chat_put(d, m[0].content, m[0].len);
            af_chat_put(d, "\n\n", 2);
        }
        af_chat_put(d, m[i].content + b, e - b);
        af_chat_put(d, "<end_of_turn>", 13);
        af_chat_end_piece(d, off, tgt, tgt ? strlen(head) : 0);
        af_chat_add_str(d, "\n", 0, 0);
    }
    if (gen) af_chat_add_str(d, "<start_of_turn>model\n", 0, 0);
    return AF_OK;
}

/* Gemma 4 (the plain-message part of Google's template): BOS; a system message as its own turn;
 * per message "<|turn>{user|model}\n{af_chat_trim(content)}<turn|>\n"; generation prompt "<|turn>model\n"
 * followed by an empty thought channel "<|channel>thought\n<channel|>" (thinking off). Thinking
 * blocks in messages and consecutive assistant messages (a continued model turn, written by the
 * template without a header) are refused. */
static af_status render_gemma4(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                               int gen, af_chat_doc *d) {
    if (tok && tok->bos >= 0) af_chat_doc_add_id(d, tok->bos, 0);
    for (int32_t i = 0; i < n; i++) {
        if (m[i].role == AF_ROLE_ASSISTANT && i > 0 && m[i - 1].role == AF_ROLE_ASSISTANT)
            return af_fail(AF_ERR_FORMAT, "messages[%d]: two assistant messages in a row (a continued model turn is "
                           "not reproduced)", (int)i);
        if ((m[i].len >= 10 && memmem(m[i].content, m[i].len, "<|channel>", 10)) ||
            (m[i].len >= 10 && memmem(m[i].content, m[i].len, "<channel|>", 10)))
            return af_fail(AF_ERR_FORMAT, "messages[%d]: a thinking block (<|channel>...<channel|>) is not reproduced",
                           (int)i);
        const int tgt = m[i].role == AF_ROLE_ASSISTANT && i >= target_from;
        const char *head = m[i].role == AF_ROLE_ASSISTANT ? "model\n" : m[i].role == AF_ROLE_SYSTEM ? "system\n" : "user\n";
        size_t b, e;
        af_chat_trim(m[i].content, m[i].len, &b, &e);
        af_chat_add_str(d, "<|turn>", 0, 0);
        size_t off = d->len;
        af_chat_put(d, head, strlen(head));
        af_chat_put(d, m[i].content + b, e - b);
        af_chat_put(d, "<turn|>", 7);
        af_chat_end_piece(d, off, tgt, tgt ? strlen(head) : 0);
        af_chat_add_str(d, "\n", 0, 0);
    }
    if (gen) af_chat_add_str(d, "<|turn>model\n<|channel>thought\n<channel|>", 0, 0);
    return AF_OK;
}

af_status af_chat_render(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                         int32_t target_from, int add_generation_prompt, af_chat_doc *d) {
    return af_chat_render_ex(tok, fam, m, n, NULL, target_from, add_generation_prompt, d);
}

af_status af_chat_render_ex(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                            const af_chat_extra *x, int32_t target_from, int add_generation_prompt, af_chat_doc *d) {
    if (!d || !m || n < 1 || fam <= AF_CHAT_NONE || fam >= AF_CHAT_NFAMILIES)
        return af_fail(AF_ERR_INVALID_ARG, "chat render: %s", fam == AF_CHAT_NONE ? "no template family" : "no message");
    for (int32_t i = 0; i < n; i++)
        if ((unsigned)m[i].role > AF_ROLE_TOOL || (!m[i].content && m[i].len))
            return af_fail(AF_ERR_INVALID_ARG, "chat render: messages[%d]: bad role or content", (int)i);
    AF_TRY(af_chat_tools_check(tok, fam, m, n, x));
    af_status st = AF_OK;
    af_chat_put(d, "", 0);
    const int g = add_generation_prompt;
    switch (fam) {
    case AF_CHAT_CHATML: render_chatml(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_GEMMA4: st = render_gemma4(tok, m, n, target_from, g, d); break;
    case AF_CHAT_GEMMA: st = render_gemma(tok, m, n, target_from, g, d); break;
    case AF_CHAT_QWEN3: st = af_chat_render_qwen3(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_QWQ: st = af_chat_render_qwq(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_MISTRAL7: st = af_chat_render_mistral7(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_LLAMA3: st = af_chat_render_llama3(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_DEEPSEEK_R1: st = af_chat_render_deepseek_r1(tok, m, n, target_from, g, d); break;
    case AF_CHAT_PHI3: st = af_chat_render_phi3(tok, m, n, target_from, g, d); break;
    case AF_CHAT_MISTRAL: st = af_chat_render_mistral(tok, m, n, x, target_from, g, d); break;
    case AF_CHAT_SMOLLM3: st = af_chat_render_smollm3(tok, m, n, target_from, g, d); break;
    default: st = af_fail(AF_ERR_INVALID_ARG, "chat render: unknown family %d", (int)fam); break;
    }
    if (st == AF_OK && d->oom) st = af_fail(AF_ERR_NOMEM, "chat render: out of memory");
    if (st != AF_OK) af_chat_doc_free(d);
    return st;
}

af_status af_chat_doc_plain(const af_tokenizer *tok, const char *prompt, size_t plen, const char *text, size_t len,
                            af_chat_doc *d) {
    if (!tok || !d || (!text && len) || (!prompt && plen)) return af_fail(AF_ERR_INVALID_ARG, "plain document: NULL argument");
    af_chat_put(d, "", 0);
    if (tok->add_bos && tok->bos >= 0) af_chat_doc_add_id(d, tok->bos, 0);
    if (plen) af_chat_doc_add_text(d, prompt, plen, 0, 0);
    if (len) af_chat_doc_add_text(d, text, len, 1, 0);
    if (tok->eos >= 0) {
        size_t el = tok->doff[tok->eos + 1] - tok->doff[tok->eos];
        const char *et = tok->dec + tok->doff[tok->eos];
        if (!(el && len >= el && !memcmp(text + len - el, et, el))) af_chat_doc_add_id(d, tok->eos, 1);
    }
    if (d->oom) {
        af_chat_doc_free(d);
        return af_fail(AF_ERR_NOMEM, "plain document: out of memory");
    }
    return AF_OK;
}

/* ---- tokenization ---- */
af_status af_chat_doc_tokenize(const af_tokenizer *tok, const af_chat_doc *d, int32_t **ids, uint8_t **mask,
                               size_t *n) {
    if (!tok || !d || !ids || !mask || !n) return af_fail(AF_ERR_INVALID_ARG, "chat tokenize: NULL argument");
    *ids = NULL;
    *mask = NULL;
    *n = 0;
    if (d->oom) return af_fail(AF_ERR_NOMEM, "chat tokenize: incomplete document (out of memory)");
    af_ids out = {0};
    uint8_t *m = NULL;
    size_t mcap = 0;
    af_status st = AF_OK;
    for (int32_t k = 0; k < d->n && st == AF_OK; k++) {
        const af_chat_piece *p = &d->pc[k];
        size_t n0 = out.n;
        if (!p->len) {
            st = af_ids_push(&out, p->id);
        } else {
            int32_t *v = NULL;
            size_t nv = 0;
            st = af_tokenize(tok, d->text + p->off, p->len, 0, 1, &v, &nv);
            for (size_t i = 0; st == AF_OK && i < nv; i++) st = af_ids_push(&out, v[i]);
            free(v);
        }
        if (st != AF_OK) break;
        if (out.n > mcap) {
            size_t nc = out.cap > out.n ? out.cap : out.n;
            uint8_t *nm = realloc(m, nc);
            if (!nm) {
                st = af_fail(AF_ERR_NOMEM, "chat tokenize: out of memory");
                break;
            }
            m = nm;
            mcap = nc;
        }
        size_t pos = 0; /* bytes of the piece covered by the tokens so far */
        for (size_t i = n0; i < out.n; i++) {
            int b = p->len ? af_token_to_bytes(tok, out.v[i], 1, NULL, 0) : 0;
            pos += b > 0 ? (size_t)b : 0;
            m[i] = (uint8_t)(p->target && (!p->len || pos > p->head));
        }
    }
    if (st != AF_OK) {
        free(out.v);
        free(m);
        return st;
    }
    if (!out.v) out.v = malloc(sizeof *out.v);
    if (!m) m = malloc(1);
    if (!out.v || !m) {
        free(out.v);
        free(m);
        return af_fail(AF_ERR_NOMEM, "chat tokenize: out of memory");
    }
    *ids = out.v;
    *mask = m;
    *n = out.n;
    return AF_OK;
}

/* ---- generation prompts ---- */
af_status af_chat_prompt_text(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                              char **out) {
    return af_chat_prompt_text_ex(tok, fam, m, n, NULL, out);
}

af_status af_chat_prompt_text_ex(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                                 const af_chat_extra *x, char **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "chat prompt: NULL argument");
    *out = NULL;
    af_chat_doc d = {0};
    AF_TRY(af_chat_render_ex(tok, fam, m, n, x, n, 1, &d));
    *out = d.text; /* the BOS piece (Gemma) has no text: af_tokenize adds BOS */
    free(d.pc);
    return AF_OK;
}

af_status af_chat_format_tok(const af_tokenizer *tok, const char *system, const char *user, char **out) {
    return af_chat_format_tok_as(tok, NULL, system, user, out);
}

af_status af_chat_format_tok_as(const af_tokenizer *tok, const char *tmpl, const char *system, const char *user,
                                char **out) {
    if (!tok || !user || !out) return af_fail(AF_ERR_INVALID_ARG, "af_chat_format: NULL argument");
    *out = NULL;
    af_chat_family fam;
    AF_TRY(af_chat_family_of(tok, tmpl, &fam));
    af_chat_msg m[2];
    int32_t n = 0;
    if (system) m[n++] = (af_chat_msg){AF_ROLE_SYSTEM, system, strlen(system)};
    m[n++] = (af_chat_msg){AF_ROLE_USER, user, strlen(user)};
    return af_chat_prompt_text(tok, fam, m, n, out);
}
