/* model_tokcheck.c — does the tokenizer fit the model? (model_load.h). A tokenizer from another
 * model loads without complaint and then yields ids the embedding has no row for, or special ids
 * (BOS, EOS, ...) that name no token, so generation stops at once or prints nothing. Checked at
 * load, against the embedding's rows (the LM head's rows are checked equal to them by the weight
 * loader):
 *   - the tokenizer has more tokens than the embedding has rows: ids beyond the rows;
 *   - it has fewer than half as many: vocabularies are padded (to a multiple of 64 or 128, a few
 *     percent at most: Qwen2.5 151,665 tokens / 151,936 rows), never halved;
 *   - a special-token id stored in the file (GGUF tokenizer.ggml.*_token_id, config.json's
 *     bos/eos/pad_token_id) outside [0, tokens): -1 and 2^32-1 mean "none" and pass. */
#include "core/core.h"
#include "formats/gguf.h"
#include "model/model_load.h"

#include <string.h>

af_status model_tok_check(const af_model *m, const char *label, const char *const *names, const int64_t *ids, int n_ids) {
    const af_tokenizer *tok = m->tok;
    if (!tok) return AF_OK;
    const int64_t nt = af_tokenizer_vocab_size(tok), rows = m->cfg.vocab_size;
    if (nt > rows)
        return af_fail(AF_ERR_FORMAT,
                       "%s: the tokenizer has %lld tokens but the model's embedding has %lld rows (ids %lld..%lld have no "
                       "embedding): the tokenizer does not belong to this model",
                       label, (long long)nt, (long long)rows, (long long)rows, (long long)nt - 1);
    if (2 * nt < rows)
        return af_fail(AF_ERR_FORMAT,
                       "%s: the tokenizer has %lld tokens, fewer than half the model's %lld embedding rows: the tokenizer "
                       "does not belong to this model",
                       label, (long long)nt, (long long)rows);
    for (int i = 0; i < n_ids; i++) {
        const int64_t id = ids[i];
        if (id == -1 || id == 0xFFFFFFFFLL) continue;
        if (id < 0 || id >= nt)
            return af_fail(AF_ERR_FORMAT, "%s: %s is %lld, outside the tokenizer's %lld tokens [0, %lld): the tokenizer "
                                          "does not belong to this model",
                           label, names[i], (long long)id, (long long)nt, (long long)nt);
    }
    return AF_OK;
}

af_status model_tok_check_gguf(const af_model *m, const char *path) {
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                                       "tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
                                       "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.cls_token_id",
                                       "tokenizer.ggml.mask_token_id"};
    enum { NK = sizeof keys / sizeof *keys };
    const char *names[NK];
    int64_t ids[NK];
    int n = 0;
    for (int i = 0; i < NK; i++) {
        if (!af_gguf_find(m->gguf, keys[i])) continue;
        int64_t v;
        if (af_gguf_get_i64_or(m->gguf, keys[i], -1, &v) != AF_OK) { /* not an integer: the tokenizer ignores it */
            af_clear_error();
            continue;
        }
        names[n] = keys[i], ids[n++] = v;
    }
    return model_tok_check(m, path, names, ids, n);
}
