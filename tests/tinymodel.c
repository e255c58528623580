/* tinymodel.c — see tinymodel.h. */
#include "tinymodel.h"

#include "formats/gguf_write.h"
#include "kernels/quant.h"
#include "model/model.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

tm_spec tm_default(const char *arch, uint32_t wtype) {
    tm_spec s;
    memset(&s, 0, sizeof s);
    s.arch = arch;
    s.wtype = wtype;
    s.vocab = 97;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_kv_head = 2;
    s.window = 5;
    s.seed = 1234;
    if (af_type_block_size(wtype) >= 256) {
        s.hidden = 256;
        s.ffn = 256;
        s.head_dim = 64;
    } else {
        s.hidden = 64;
        s.ffn = 128;
        s.head_dim = 16;
    }
    return s;
}

/* Add a [rows, cols] matrix of `type` with uniform random values (bound * wscale). */
static af_status tm_matrix(af_gguf_writer *w, const char *name, uint32_t type, int64_t rows, int64_t cols,
                           float bound, uint64_t *rng) {
    size_t rb = af_row_bytes(type, cols);
    if (!rb) return af_fail(AF_ERR_INVALID_ARG, "%s: %lld columns do not fit type %s", name, (long long)cols,
                            af_type_name(type));
    unsigned char *q = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    af_status st = (q && row) ? AF_OK : AF_ERR_NOMEM;
    for (int64_t r = 0; st == AF_OK && r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) row[i] = tl_rand_uniform(rng, -bound, bound);
        if (!af_quantize_row(type, row, q + (size_t)r * rb, cols)) st = AF_ERR_UNSUPPORTED;
    }
    int64_t ne[2] = {cols, rows};
    if (st == AF_OK) st = af_gguf_writer_add_tensor(w, name, type, 2, ne, q, rb * (size_t)rows);
    free(q);
    free(row);
    return st;
}

/* A 1-D F32 vector [n] of center + U(-0.2, 0.2) (norm weights: center 1; biases: center 0). */
static af_status tm_vector_at(af_gguf_writer *w, const char *name, int64_t n, float center, uint64_t *rng) {
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return AF_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) v[i] = center + tl_rand_uniform(rng, -0.2f, 0.2f);
    int64_t ne[1] = {n};
    af_status st = af_gguf_writer_add_tensor(w, name, AF_TYPE_F32, 1, ne, v, sizeof(float) * (size_t)n);
    free(v);
    return st;
}

static af_status tm_vector(af_gguf_writer *w, const char *name, int64_t n, uint64_t *rng) {
    return tm_vector_at(w, name, n, 1.0f, rng);
}

/* Byte-level gpt2 tokenizer of tm_write_bpe. */
typedef struct tm_bpe {
    const char *const *extra, *const *merges;
    int n_extra, n_merges;
} tm_bpe;

/* GPT-2 byte -> unicode code point (printable bytes map to themselves, the rest to 256 + k). */
static unsigned tm_byte_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
    return 256 + k;
}

/* Add the tokenizer.* keys of `b` (see tm_write_bpe) for a vocabulary of 256 + b->n_extra. */
/* ... with the stored BOS / EOS ids `bos` / `eos` (< 0: the last extra token's id). */
static af_status tm_add_bpe_ids(af_gguf_writer *w, const tm_bpe *b, int64_t bos, int64_t eos) {
    const int n = 256 + b->n_extra;
    char(*sym)[4] = malloc(sizeof *sym * 256);
    const char **tp = malloc(sizeof *tp * (size_t)n);
    int32_t *types = malloc(sizeof *types * (size_t)n);
    af_status st = (sym && tp && types) ? AF_OK : AF_ERR_NOMEM;
    for (int i = 0; st == AF_OK && i < n; i++) {
        if (i < 256) { /* code points < 0x800: one or two UTF-8 bytes */
            const unsigned cp = tm_byte_cp((unsigned)i);
            if (cp < 0x80) sym[i][0] = (char)cp, sym[i][1] = 0;
            else sym[i][0] = (char)(0xC0 | (cp >> 6)), sym[i][1] = (char)(0x80 | (cp & 0x3F)), sym[i][2] = 0;
        }
        tp[i] = i < 256 ? sym[i] : b->extra[i - 256];
        types[i] = i == n - 1 ? 3 : 1; /* the last extra token: control (type 3), else normal */
    }
    if (st == AF_OK) st = af_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (st == AF_OK) st = af_gguf_writer_add_str(w, "tokenizer.ggml.pre", "gpt2");
    if (st == AF_OK) st = af_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tp, (uint64_t)n);
    if (st == AF_OK) st = af_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", AF_GGUF_INT32, types, (uint64_t)n);
    if (st == AF_OK) st = af_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", b->merges, (uint64_t)b->n_merges);
    if (st == AF_OK) st = af_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(bos < 0 ? n - 1 : bos));
    if (st == AF_OK) st = af_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(eos < 0 ? n - 1 : eos));
    free(sym);
    free(tp);
    free(types);
    return st;
}

static __attribute__((unused)) af_status tm_add_bpe(af_gguf_writer *w, const tm_bpe *b) {
    return tm_add_bpe_ids(w, b, -1, -1);
}

/* tm_write, plus the tokenizer keys of `tok` (NULL: none) after the model keys, with the BOS / EOS
 * ids of tm_add_bpe_ids. */
static af_status tm_write_tok(const tm_spec *s, const char *path, const tm_bpe *tok, int64_t bos, int64_t eos) {
    af_gguf_writer *w;
    af_status st = af_gguf_writer_new(&w);
    if (st != AF_OK) return st;
    const char *a = s->arch;
    const int gem = !strcmp(a, "gemma3"), qwen2 = !strcmp(a, "qwen2"), qwen3 = !strcmp(a, "qwen3");
    char k[128];
    uint64_t rng = s->seed * 2654435761u + 17;
    const int64_t H = s->hidden, F = s->ffn, qd = (int64_t)s->n_head * s->head_dim,
                  kvd = (int64_t)s->n_kv_head * s->head_dim;
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", a, x), k)
    af_gguf_writer_add_str(w, "general.architecture", a);
    af_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)H);
    af_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    af_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    af_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    af_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_head);
    af_gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    af_gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    af_gguf_writer_add_u32(w, KEY("context_length"), s->n_ctx > 0 ? (uint32_t)s->n_ctx : 256);
    af_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    af_gguf_writer_add_f32(w, KEY("rope.freq_base"), gem ? 1000000.0f : 10000.0f);
    if (gem) {
        af_gguf_writer_add_u32(w, KEY("attention.sliding_window"), (uint32_t)s->window);
        af_gguf_writer_add_f32(w, KEY("rope.freq_base_swa"), 10000.0f);
    }
#undef KEY
    if (tok) st = tm_add_bpe_ids(w, tok, bos, eos);
    /* embeddings: F32, std ~ 1 (llama) or 1/sqrt(H) (gemma3 scales them by sqrt(H)) */
    if (st == AF_OK)
        st = tm_matrix(w, "token_embd.weight", AF_TYPE_F32, s->vocab, H, gem ? 1.7f / sqrtf((float)H) : 1.7f, &rng);
    if (st == AF_OK) st = tm_vector(w, "output_norm.weight", H, &rng);
    const float wb = 1.0f; /* bound multiplier on 1/sqrt(in) */
    for (int l = 0; st == AF_OK && l < s->n_layer; l++) {
        char n[96];
#define NM(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        st = tm_vector(w, NM("attn_norm.weight"), H, &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("attn_q.weight"), s->wtype, qd, H, wb / sqrtf((float)H), &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("attn_k.weight"), s->wtype, kvd, H, wb / sqrtf((float)H), &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("attn_v.weight"), s->wtype, kvd, H, wb / sqrtf((float)H), &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("attn_output.weight"), s->wtype, H, qd, wb / sqrtf((float)qd), &rng);
        if (st == AF_OK) st = tm_vector(w, NM("ffn_norm.weight"), H, &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("ffn_gate.weight"), s->wtype, F, H, wb / sqrtf((float)H), &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("ffn_up.weight"), s->wtype, F, H, wb / sqrtf((float)H), &rng);
        if (st == AF_OK) st = tm_matrix(w, NM("ffn_down.weight"), s->wtype, H, F, wb / sqrtf((float)F), &rng);
        if (qwen2) {
            if (st == AF_OK) st = tm_vector_at(w, NM("attn_q.bias"), qd, 0.0f, &rng);
            if (st == AF_OK) st = tm_vector_at(w, NM("attn_k.bias"), kvd, 0.0f, &rng);
            if (st == AF_OK) st = tm_vector_at(w, NM("attn_v.bias"), kvd, 0.0f, &rng);
        }
        if (qwen3) {
            if (st == AF_OK) st = tm_vector(w, NM("attn_q_norm.weight"), s->head_dim, &rng);
            if (st == AF_OK) st = tm_vector(w, NM("attn_k_norm.weight"), s->head_dim, &rng);
        }
        if (gem) {
            if (st == AF_OK) st = tm_vector(w, NM("attn_q_norm.weight"), s->head_dim, &rng);
            if (st == AF_OK) st = tm_vector(w, NM("attn_k_norm.weight"), s->head_dim, &rng);
            if (st == AF_OK) st = tm_vector(w, NM("post_attention_norm.weight"), H, &rng);
            if (st == AF_OK) st = tm_vector(w, NM("post_ffw_norm.weight"), H, &rng);
        }
#undef NM
    }
    if (st == AF_OK) st = af_gguf_writer_write_file(w, path);
    af_gguf_writer_free(w);
    return st;
}

af_status tm_write(const tm_spec *s, const char *path) {
    return tm_write_tok(s, path, NULL, -1, -1);
}

af_status tm_write_bpe(const tm_spec *s, const char *path, const char *const *extra, int n_extra,
                       const char *const *merges, int n_merges) {
    if (n_extra < 1 || n_merges < 0 || s->vocab != 256 + n_extra)
        return af_fail(AF_ERR_INVALID_ARG, "tm_write_bpe: vocab %d != 256 + %d extra tokens", s->vocab, n_extra);
    const tm_bpe tok = {.extra = extra, .merges = merges, .n_extra = n_extra, .n_merges = n_merges};
    return tm_write_tok(s, path, &tok, -1, -1);
}

af_status tm_write_bpe_misfit(const tm_spec *s, const char *path, const char *const *extra, int n_extra, uint32_t bos,
                              uint32_t eos) {
    if (n_extra < 1) return af_fail(AF_ERR_INVALID_ARG, "tm_write_bpe_misfit: n_extra %d < 1", n_extra);
    const tm_bpe tok = {.extra = extra, .n_extra = n_extra};
    return tm_write_tok(s, path, &tok, bos, eos);
}

af_status tm_load(const tm_spec *s, af_model **out) {
    static int counter;
    char path[256];
    snprintf(path, sizeof path, "/tmp/afinar_tiny_%ld_%d.gguf", (long)getpid(), counter++);
    af_status st = tm_write(s, path);
    if (st == AF_OK) st = af_model_load(T_CTX, path, out);
    unlink(path);
    return st;
}
