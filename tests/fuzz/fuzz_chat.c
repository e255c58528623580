/*
 * fuzz_chat.c — libFuzzer target for chat-template recognition and rendering (src/tokenizer/chat.c,
 * chat_layouts.c, chat_tools.c, chat_json.c). Input: a template text, a NUL byte, then messages
 * separated by 0x1E bytes; the first byte of each message picks its role (byte % 4: system, user,
 * assistant, tool), the rest is its content (any bytes). Tool turns: bit 0x40 of that byte on an
 * assistant message adds a tool call whose arguments are the content (any bytes: the JSON check),
 * bit 0x80 on the first message makes its content the tools list; tool messages answer call id
 * "abcdefghi". Every content is also parsed as generated text (af_chat_parse_tool_calls). The template is recognised (af_chat_family_of_template); when it is refused,
 * the family comes from the first input byte. The messages are rendered by that family with and
 * without the generation prompt, with every target_from, through a tokenizer-less stand-in whose
 * chat_template is the input template (BOS/EOS absent). Oracles: recognition returns a valid
 * family or an error with a message; a rendered document's text is NUL-terminated at len, every
 * text piece lies inside it with head <= len, the pieces cover the text in order; a refused
 * conversation leaves the document freed. Returns the status of the last render.
 */
#include "fuzz/fuzz_common.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static void fz_chat_check_doc(const af_chat_doc *d) {
    FZ_ASSERT(d->text != NULL && d->text[d->len] == 0);
    size_t pos = 0;
    for (int32_t k = 0; k < d->n; k++) {
        const af_chat_piece *p = &d->pc[k];
        if (!p->len) continue;
        FZ_ASSERT(p->off == pos && p->off + p->len <= d->len);
        FZ_ASSERT(p->head <= p->len);
        pos = p->off + p->len;
    }
    FZ_ASSERT(pos == d->len);
}

af_status fz_chat_one(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tl = nul ? (size_t)(nul - data) : size;
    char *tmpl = malloc(tl + 1);
    if (!tmpl) return AF_ERR_NOMEM;
    memcpy(tmpl, data, tl);
    tmpl[tl] = 0;
    af_chat_family fam = AF_CHAT_NONE;
    af_status st = af_chat_family_of_template(NULL, tmpl, &fam);
    if (st == AF_OK) {
        FZ_ASSERT(fam > AF_CHAT_NONE && fam < AF_CHAT_NFAMILIES);
    } else {
        FZ_ASSERT(fam == AF_CHAT_NONE && af_last_error()[0]);
        af_clear_error();
        fam = (af_chat_family)(1 + (size ? data[0] : 0) % (AF_CHAT_NFAMILIES - 1));
    }
    af_chat_msg m[32];
    af_chat_msg_x mx[32];
    af_chat_call calls[32];
    af_chat_extra x = {NULL, 0, mx};
    int32_t n = 0;
    const uint8_t *p = nul ? nul + 1 : data + size, *end = data + size;
    while (p < end && n < 32) {
        const uint8_t *q = memchr(p, 0x1E, (size_t)(end - p));
        if (!q) q = end;
        size_t seg = (size_t)(q - p); /* an empty record is an empty user message */
        m[n].role = seg ? (af_chat_role)(p[0] % 4) : AF_ROLE_USER;
        m[n].content = (const char *)p + (seg ? 1 : 0);
        m[n].len = seg ? seg - 1 : 0;
        memset(&mx[n], 0, sizeof mx[n]);
        if (seg && (p[0] & 0x40) && m[n].role == AF_ROLE_ASSISTANT) {
            calls[n] = (af_chat_call){"abcdefghi", "f", m[n].content, m[n].len};
            mx[n].calls = &calls[n];
            mx[n].n_calls = 1;
        }
        if (m[n].role == AF_ROLE_TOOL) mx[n].call_id = "abcdefghi";
        if (n == 0 && seg && (p[0] & 0x80)) {
            x.tools = m[n].content;
            x.tools_len = m[n].len;
        }
        n++;
        p = q + 1;
    }
    af_tokenizer stand_in;
    memset(&stand_in, 0, sizeof stand_in);
    stand_in.bos = stand_in.eos = -1;
    stand_in.chat_template = tmpl;
    st = AF_OK;
    for (int32_t tf = 0; n > 0 && tf <= n; tf++)
        for (int gen = 0; gen < 2; gen++) {
            af_chat_doc d = {0};
            st = af_chat_render_ex(&stand_in, fam, m, n, &x, tf, gen, &d);
            if (st == AF_OK) {
                fz_chat_check_doc(&d);
            } else {
                FZ_ASSERT(d.text == NULL && d.pc == NULL && af_last_error()[0]);
                af_clear_error();
            }
            af_chat_doc_free(&d);
        }
    for (int32_t i = 0; i < n; i++) {
        af_chat_tool_output o;
        if (af_chat_parse_tool_calls(&stand_in, fam, m[i].content, m[i].len, &o) == AF_OK) {
            FZ_ASSERT(o.content && o.content_len <= m[i].len && o.n_calls >= 0);
            for (int32_t k = 0; k < o.n_calls; k++) FZ_ASSERT(o.calls[k].name && o.calls[k].arguments);
        } else {
            af_clear_error();
        }
        af_chat_tool_output_free(&o);
    }
    free(tmpl);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_chat_one(data, size);
    return 0;
}
#endif
