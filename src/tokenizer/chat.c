/*
 * chat.c — single-turn chat prompts for the ChatML and Gemma families (af_chat_format_tok, see
 * tokenizer.h). The Jinja templates are not interpreted: the family is recognised and its fixed
 * layout reproduced; tests compare with transformers' apply_chat_template output.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->n + n + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Default system prompt written literally in a ChatML template ("<|im_start|>system\n" TEXT
 * "<|im_end|>" with no Jinja syntax inside TEXT), or NULL/0. */
static const char *default_system(const char *tmpl, size_t *len) {
    static const char open[] = "<|im_start|>system\n";
    const char *p = tmpl ? strstr(tmpl, open) : NULL;
    if (!p) return NULL;
    p += sizeof open - 1;
    const char *e = strstr(p, "<|im_end|>");
    if (!e || e == p) return NULL;
    for (const char *q = p; q < e; q++)
        if (*q == '{' || *q == '}' || *q == '\'' || *q == '"' || *q == '+') return NULL;
    *len = (size_t)(e - p);
    return p;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

af_status af_chat_format_tok(const af_tokenizer *tok, const char *system, const char *user, char **out) {
    if (!tok || !user || !out) return af_fail(AF_ERR_INVALID_ARG, "af_chat_format: NULL argument");
    *out = NULL;
    const char *tmpl = tok->chat_template;
    enum { NONE, CHATML, GEMMA } fam = NONE;
    if (tmpl) {
        if (strstr(tmpl, "<|im_start|>")) fam = CHATML;
        else if (strstr(tmpl, "<start_of_turn>")) fam = GEMMA;
    } else if (af_tokenizer_find(tok, "<start_of_turn>", 15) >= 0) {
        fam = GEMMA;
    } else if (af_tokenizer_find(tok, "<|im_start|>", 12) >= 0) {
        fam = CHATML;
    }
    if (fam == NONE)
        return af_fail(AF_ERR_UNSUPPORTED, "af_chat_format: %s", tmpl ? "chat template is neither ChatML "
                       "(<|im_start|>) nor Gemma (<start_of_turn>)" : "model has no chat template and "
                       "no <|im_start|> / <start_of_turn> token");
    sbuf b = {0};
    if (fam == CHATML) {
        size_t dl = 0;
        const char *def = system ? NULL : default_system(tmpl, &dl);
        if (system || def) {
            puts_(&b, "<|im_start|>system\n");
            if (system) puts_(&b, system);
            else put(&b, def, dl);
            puts_(&b, "<|im_end|>\n");
        }
        puts_(&b, "<|im_start|>user\n");
        puts_(&b, user);
        puts_(&b, "<|im_end|>\n<|im_start|>assistant\n");
    } else {
        puts_(&b, "<start_of_turn>user\n");
        if (system) {
            puts_(&b, system);
            puts_(&b, "\n\n");
        }
        size_t s = 0, e = strlen(user); /* Jinja `| trim` */
        while (s < e && is_ws(user[s])) s++;
        while (e > s && is_ws(user[e - 1])) e--;
        put(&b, user + s, e - s);
        puts_(&b, "<end_of_turn>\n<start_of_turn>model\n");
    }
    if (b.oom || !b.p) {
        free(b.p);
        return af_fail(AF_ERR_NOMEM, "af_chat_format: out of memory");
    }
    *out = b.p;
    return AF_OK;
}
