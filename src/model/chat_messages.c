/* chat_messages.c — a whole conversation rendered with a model's chat template, for callers that
 * hold messages as (role, content) strings (the Python package's apply_chat_template). The
 * renderer is the one training and serving use (af_chat_render, chat.c); this file only checks
 * and converts the arguments. */
#include "afinar.h"

#include "core/core.h"
#include "formats/lm_jsonl.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* Role name -> role; -1 when unknown. */
static int role_of(const char *r) {
    if (!strcmp(r, "system")) return AF_ROLE_SYSTEM;
    if (!strcmp(r, "user")) return AF_ROLE_USER;
    if (!strcmp(r, "assistant")) return AF_ROLE_ASSISTANT;
    return -1;
}

af_status af_chat_apply_template(const af_model *model, const char *chat_template, const char *const *roles,
                                 const char *const *contents, const size_t *lens, int32_t n,
                                 int add_generation_prompt, char **out) {
    if (out) *out = NULL;
    if (!model || !roles || !contents || !lens || !out)
        return af_fail(AF_ERR_INVALID_ARG, "apply_chat_template: NULL argument");
    if (n < 1) return af_fail(AF_ERR_INVALID_ARG, "apply_chat_template: no message (got %d)", (int)n);
    if (n > 1000000) return af_fail(AF_ERR_INVALID_ARG, "apply_chat_template: %d messages, more than 1000000", (int)n);
    const af_tokenizer *tok = af_model_tokenizer(model);
    if (!tok) return af_fail(AF_ERR_NOT_FOUND, "model has no tokenizer, so no chat template");
    af_chat_family fam;
    AF_TRY(af_chat_family_of(tok, chat_template, &fam));
    af_chat_msg *m = malloc(sizeof *m * (size_t)n);
    if (!m) return af_fail(AF_ERR_NOMEM, "apply_chat_template: out of memory for %d messages", (int)n);
    for (int32_t i = 0; i < n; i++) {
        if (!roles[i] || !contents[i]) {
            free(m);
            return af_fail(AF_ERR_INVALID_ARG, "messages[%d]: NULL role or content", (int)i);
        }
        const int r = role_of(roles[i]);
        if (r < 0) {
            free(m);
            return af_fail(AF_ERR_INVALID_ARG, "messages[%d]: unknown role '%.40s' (system, user or assistant)", (int)i,
                           roles[i]);
        }
        if (memchr(contents[i], 0, lens[i])) {
            free(m);
            return af_fail(AF_ERR_INVALID_ARG, "messages[%d]: content holds a NUL byte at offset %zu", (int)i,
                           (size_t)((const char *)memchr(contents[i], 0, lens[i]) - contents[i]));
        }
        m[i] = (af_chat_msg){(af_chat_role)r, contents[i], lens[i]};
    }
    af_chat_doc d = {0};
    af_status st = af_chat_render(tok, fam, m, n, n, add_generation_prompt ? 1 : 0, &d);
    free(m);
    if (st != AF_OK) return st;
    *out = d.text; /* the BOS piece (Gemma) has no text: af_tokenize adds it */
    free(d.pc);
    return AF_OK;
}
