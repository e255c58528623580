/*
 * text_metrics.c — scores of generated text against a reference: exact match and ROUGE-L
 * (af_exact_match, af_rouge_l; contracts in include/afinar_app.h, "Text-generation metrics").
 *
 * ROUGE-L (C.-Y. Lin, "ROUGE: A Package for Automatic Evaluation of Summaries", ACL workshop 2004,
 * section 3.1, sentence-level LCS): with X the reference (m tokens), Y the prediction (n tokens)
 * and LCS(X, Y) the length of their longest common subsequence of tokens,
 *     R = LCS/m,  P = LCS/n,  F = 2PR/(P + R)   (Lin's F_lcs with beta = 1),
 * and P = R = F = 0 when either side has no token (or P + R = 0). This is what the `rouge_score`
 * package (google-research, 0.1.2) computes for "rougeL"; the tokenization is its default one
 * (tokenize.tokenize without a stemmer): lowercase, every character outside [a-z0-9] becomes a
 * separator, tokens are the maximal runs of [a-z0-9]. On UTF-8 text Python's str.lower() maps only
 * two non-ASCII characters to ASCII letters: U+0130 (to "i" + U+0307, a separator) and U+212A
 * KELVIN SIGN (to "k"); both are reproduced here, every other non-ASCII character separates.
 * Checked against rouge_score on tests/fixtures/rouge_pairs.jsonl (tests/ref/make_rouge_ref.py).
 */
#include "afinar_app.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static int is_trim_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static void trim(const char *s, const char **b, size_t *n) {
    size_t len = s ? strlen(s) : 0;
    const char *p = s ? s : "";
    while (len && is_trim_space((unsigned char)*p)) p++, len--;
    while (len && is_trim_space((unsigned char)p[len - 1])) len--;
    *b = p;
    *n = len;
}

int af_exact_match(const char *pred, const char *ref) {
    const char *a, *b;
    size_t na, nb;
    trim(pred, &a, &na);
    trim(ref, &b, &nb);
    return na == nb && memcmp(a, b, na) == 0;
}

/* rouge_score's default tokens of `s`: the normalised text in `*buf` (malloc'ed: [a-z0-9] runs
 * separated by NUL bytes), token starts in `*tok` (malloc'ed, [*n]). Returns 0 when out of memory. */
static int rouge_tokens(const char *s, char **buf, const char ***tok, size_t *n) {
    size_t len = s ? strlen(s) : 0;
    *buf = malloc(len + 1);
    *tok = malloc(sizeof(char *) * (len / 2 + 1)); /* tokens are separated: at most ceil(len/2) */
    *n = 0;
    if (!*buf || !*tok) {
        free(*buf);
        free(*tok);
        *buf = NULL;
        *tok = NULL;
        return 0;
    }
    char *o = *buf;
    int in_tok = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char a = 0; /* the ASCII character this position contributes, 0: separator */
        if (c >= 'A' && c <= 'Z') a = (char)(c - 'A' + 'a');
        else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) a = (char)c;
        else if (c == 0xC4 && i + 1 < len && (unsigned char)s[i + 1] == 0xB0) { /* U+0130 -> "i" U+0307 */
            a = 'i';
            i += 1;
        } else if (c == 0xE2 && i + 2 < len && (unsigned char)s[i + 1] == 0x84 && (unsigned char)s[i + 2] == 0xAA) {
            a = 'k'; /* U+212A KELVIN SIGN -> "k" */
            i += 2;
        }
        if (a) {
            if (!in_tok) (*tok)[(*n)++] = o;
            *o++ = a;
            in_tok = 1;
            /* U+0130 lowercases to "i" followed by U+0307, which is not alphanumeric: the token ends */
            if (c == 0xC4) {
                *o++ = 0;
                in_tok = 0;
            }
        } else if (in_tok) {
            *o++ = 0;
            in_tok = 0;
        }
    }
    if (in_tok) *o++ = 0;
    return 1;
}

af_status af_rouge_l(const char *pred, const char *ref, af_rouge_score *out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_rouge_l: NULL output");
    memset(out, 0, sizeof *out);
    char *bp = NULL, *br = NULL;
    const char **tp = NULL, **tr = NULL;
    size_t np = 0, nr = 0;
    int32_t *row = NULL;
    af_status st = AF_OK;
    if (!rouge_tokens(pred, &bp, &tp, &np) || !rouge_tokens(ref, &br, &tr, &nr)) {
        st = af_fail(AF_ERR_NOMEM, "af_rouge_l: out of memory");
        goto done;
    }
    if (np == 0 || nr == 0) goto done;
    /* LCS by dynamic programming over the prediction (rows) and the reference (one row of nr + 1
     * entries kept; `diag` holds the previous row's entry left of the current column). */
    row = calloc(nr + 1, sizeof *row);
    if (!row) {
        st = af_fail(AF_ERR_NOMEM, "af_rouge_l: out of memory for %zu tokens", nr);
        goto done;
    }
    for (size_t i = 0; i < np; i++) {
        int32_t diag = 0;
        for (size_t j = 1; j <= nr; j++) {
            int32_t up = row[j];
            if (strcmp(tp[i], tr[j - 1]) == 0) row[j] = diag + 1;
            else if (row[j - 1] > row[j]) row[j] = row[j - 1];
            diag = up;
        }
    }
    double lcs = row[nr];
    out->precision = lcs / (double)np;
    out->recall = lcs / (double)nr;
    out->fmeasure = out->precision + out->recall > 0 ? 2 * out->precision * out->recall / (out->precision + out->recall) : 0;
done:
    free(row);
    free(bp);
    free(br);
    free(tp);
    free(tr);
    return st;
}
