/*
 * fuzz_tok.h — shared by the tokenizer targets (fuzz_tok_bpe.c, fuzz_tok_spm.c, fuzz_gguf_tok.c)
 * and test_fuzz_regress.c.
 *
 *  fz_tok_get(kind): the tokenizer of one kind, built once per process: from the real model in
 *    $AF_MODEL_DIR (default models/): SmolLM2-135M-Instruct.Q4_1.gguf (gpt2 byte-level BPE) and
 *    gemma-3-270m-Q4_K_M.gguf (SentencePiece-BPE); when the file is absent, from a small GGUF
 *    written here (fz_tok_synth) so the targets still run without the models.
 *  fz_tok_encode(tok, flags, text, len): af_tokenize on arbitrary bytes (valid or invalid UTF-8),
 *    flags bit 0 = add_special, bit 1 = parse_special. Oracles: status AF_OK (or AF_ERR_FORMAT
 *    naming "not valid UTF-8" when a byte that is not UTF-8 has no byte token), every id in
 *    [0, n_vocab), af_detokenize succeeds, and the round trip decode(encode(x)) == x whenever it
 *    must hold (see fz_tok_roundtrip_applies).
 *  fz_tok_one(kind, data, size), fz_tok_init(kind, name): the bodies of the fuzz_tok_bpe and
 *    fuzz_tok_spm targets, which differ only in `kind`.
 */
#ifndef AF_FUZZ_TOK_H
#define AF_FUZZ_TOK_H

#include "fuzz/fuzz_common.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "tokenizer/tok_internal.h"

enum { FZ_TOK_BPE = 0, FZ_TOK_SPM = 1 };

/* GPT-2 byte-to-unicode symbol of byte b, as UTF-8 (docs/FORMATS.md §6.2). */
static inline size_t fz_tok_byte_sym(unsigned b, char *o) {
    unsigned cp = b <= 0x20 ? 0x100 + b : (b >= 0x7F && b <= 0xA0) ? 0x121 + (b - 0x7F) : b == 0xAD ? 0x143 : b;
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* A small tokenizer GGUF of `kind` (no tensors) in memory; *buf: caller frees. */
static inline af_status fz_tok_synth(int kind, uint8_t **buf, size_t *len) {
    af_gguf_writer *w;
    AF_TRY(af_gguf_writer_new(&w));
    char store[400][16];
    const char *toks[400];
    int32_t types[400];
    float scores[400];
    int n = 0;
    if (kind == FZ_TOK_BPE) {
        for (unsigned b = 0; b < 256; b++) {
            size_t k = fz_tok_byte_sym(b, store[n]);
            store[n][k] = 0;
            types[n] = AF_TT_NORMAL;
            toks[n] = store[n];
            n++;
        }
        static const char *const extra[] = {"Ġt", "he", "Ġthe", "in", "Ġa", "er", "<|endoftext|>", "<|im_start|>",
                                            "<|im_end|>", "<tool>"};
        for (int i = 0; i < 10; i++) {
            toks[n] = extra[i];
            types[n] = i < 6 ? AF_TT_NORMAL : i < 9 ? AF_TT_CONTROL : AF_TT_USER;
            n++;
        }
        static const char *const merges[] = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r"};
        af_gguf_writer_add_str(w, "general.architecture", "llama");
        af_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
        af_gguf_writer_add_str(w, "tokenizer.ggml.pre", "smollm");
        af_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 6);
        af_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 257);
        af_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 258);
        af_gguf_writer_add_str(w, "tokenizer.chat_template", "{% for m in messages %}<|im_start|>{% endfor %}");
    } else {
        static const char *const head[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
        for (int i = 0; i < 4; i++) {
            toks[n] = head[i];
            types[n] = i == 3 ? AF_TT_UNKNOWN : AF_TT_CONTROL;
            scores[n++] = 0;
        }
        for (unsigned b = 0; b < 256; b++) {
            snprintf(store[n], sizeof store[n], "<0x%02X>", b);
            toks[n] = store[n];
            types[n] = AF_TT_BYTE;
            scores[n++] = 0;
        }
        static const char *const extra[] = {"▁", "a", "b", "▁a", "ab", "▁ab", "  ", "<start_of_turn>",
                                            "<end_of_turn>", "é"};
        for (int i = 0; i < 10; i++) {
            toks[n] = extra[i];
            types[n] = i == 6 ? AF_TT_USER : (i == 7 || i == 8) ? AF_TT_CONTROL : AF_TT_NORMAL;
            scores[n++] = -(float)i;
        }
        af_gguf_writer_add_str(w, "general.architecture", "gemma3");
        af_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
        af_gguf_writer_add_arr(w, "tokenizer.ggml.scores", AF_GGUF_FLOAT32, scores, (uint64_t)n);
        af_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
        af_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
        af_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
        af_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
    }
    af_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    af_status st = af_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", AF_GGUF_INT32, types, (uint64_t)n);
    if (st == AF_OK) st = af_gguf_writer_write_mem(w, buf, len);
    af_gguf_writer_free(w);
    return st;
}

/* Build a tokenizer from GGUF bytes (through a memfd). */
static inline af_status fz_tok_from_bytes(const uint8_t *data, size_t size, af_tokenizer **out) {
    char path[64];
    int fd = fz_memfd(data, size, path);
    if (fd < 0) return AF_ERR_IO;
    af_gguf *g = NULL;
    af_status st = af_gguf_open(path, &g);
    if (st == AF_OK) st = af_tokenizer_load(g, out);
    af_gguf_close(g);
    close(fd);
    return st;
}

/* The process-wide tokenizer of `kind` (see the header comment); NULL only if even the synthetic
 * one fails. `*real` (may be NULL) tells whether it came from the model file. */
static inline const af_tokenizer *fz_tok_get(int kind, int *real) {
    static af_tokenizer *tok[2];
    static int is_real[2], tried[2];
    if (!tried[kind]) {
        tried[kind] = 1;
        const char *dir = getenv("AF_MODEL_DIR");
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir ? dir : "models",
                 kind == FZ_TOK_BPE ? "SmolLM2-135M-Instruct.Q4_1.gguf" : "gemma-3-270m-Q4_K_M.gguf");
        af_gguf *g = NULL;
        if (access(path, R_OK) == 0 && af_gguf_open(path, &g) == AF_OK && af_tokenizer_load(g, &tok[kind]) == AF_OK)
            is_real[kind] = 1;
        af_gguf_close(g);
        if (!tok[kind]) {
            uint8_t *buf = NULL;
            size_t len = 0;
            if (fz_tok_synth(kind, &buf, &len) == AF_OK) (void)fz_tok_from_bytes(buf, len, &tok[kind]);
            free(buf);
        }
        af_clear_error();
    }
    if (real) *real = is_real[kind];
    return tok[kind];
}

/* Whether decode(encode(x)) must give x back: no BOS/EOS added; gpt2: every byte of x has its
 * byte-level symbol in the vocabulary (SmolLM2 lacks 21; af_tokenize refuses them);
 * SentencePiece: no space prefix added and no U+2581 in x (' ' and '▁' both encode to '▁'). */
static inline int fz_tok_roundtrip_applies(const af_tokenizer *t, unsigned flags, const uint8_t *s, size_t n) {
    if (flags & 1) return 0;
    if (t->kind == AF_TOK_GPT2) {
        for (size_t i = 0; i < n; i++)
            if (t->byte_tok[s[i]] < 0) return 0;
        return 1;
    }
    if (t->add_space_prefix || af_tokenizer_find(t, "<0x41>", 6) < 0) return 0;
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) return 0;
    return 1;
}

static inline af_status fz_tok_encode(const af_tokenizer *t, unsigned flags, const uint8_t *s, size_t n, int oracle) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    af_status st = af_tokenize(t, (const char *)s, n, flags & 1, (flags >> 1) & 1, &ids, &n_ids);
    if (st == AF_ERR_FORMAT) { /* only a byte that is not UTF-8 and has no byte token */
        FZ_ASSERT(ids == NULL && strstr(af_last_error(), "not valid UTF-8") != NULL);
        af_clear_error();
        return st;
    }
    FZ_ASSERT(st == AF_OK);
    if (st != AF_OK) return st;
    int32_t nv = af_tokenizer_vocab_size(t);
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        FZ_ASSERT(ids[i] >= 0 && ids[i] < nv);
        int k = af_token_to_bytes(t, ids[i], 1, NULL, 0);
        FZ_ASSERT(k >= 0);
        total += (size_t)k;
    }
    char *text = NULL;
    FZ_ASSERT(af_detokenize(t, ids, n_ids, (flags >> 2) & 1, &text) == AF_OK);
    free(text);
    if (oracle && fz_tok_roundtrip_applies(t, flags, s, n)) {
        char *dec = malloc(total + 1);
        size_t pos = 0;
        if (dec) {
            for (size_t i = 0; i < n_ids; i++)
                pos += (size_t)af_token_to_bytes(t, ids[i], 1, dec + pos, total - pos);
            if (pos != n || memcmp(dec, s, n) != 0) FZ_FAIL("round trip decode(encode(x)) != x", __FILE__, __LINE__);
            free(dec);
        }
    }
    free(ids);
    return st;
}

/* The whole work for one input of fuzz_tok_bpe / fuzz_tok_spm (fz_tok_bpe_one / fz_tok_spm_one):
 * byte 0 = flags (bit 0 add_special, bit 1 parse_special, bit 2 render_special), the rest = text,
 * encoded with fz_tok_get(kind) through fz_tok_encode with the round-trip oracle on. An empty
 * input does nothing. Returns fz_tok_encode's status (AF_OK when there is nothing to do). */
static inline af_status fz_tok_one(int kind, const uint8_t *data, size_t size) {
    int real = 0;
    const af_tokenizer *t = fz_tok_get(kind, &real);
    FZ_ASSERT(t != NULL);
    if (!t || size == 0) return AF_OK;
    return fz_tok_encode(t, data[0], data + 1, size - 1, 1);
}

/* LLVMFuzzerInitialize of the target `name` ("fuzz_tok_bpe" / "fuzz_tok_spm"): builds the
 * tokenizer of `kind` once and prints on stderr whether it came from the model file, with its
 * af_tokenizer_describe line. Returns 0, or 1 when no tokenizer could be built. */
static inline int fz_tok_init(int kind, const char *name) {
    int real = 0;
    if (!fz_tok_get(kind, &real)) return 1;
    fprintf(stderr, "%s: %s tokenizer: %s\n", name, real ? "model" : "synthetic",
            af_tokenizer_describe(fz_tok_get(kind, NULL)));
    return 0;
}

#endif /* AF_FUZZ_TOK_H */
