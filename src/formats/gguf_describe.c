/*
 * gguf_describe.c — af_gguf_describe(): a human-readable summary of any GGUF file.
 *
 * Prints the container facts, the architecture's hyper-parameters under their Hugging Face
 * config.json names (mapping of GGUF keys to HF names: docs/FORMATS.md §3.1), the
 * tokenizer metadata, the remaining keys with short values, a tensor table (shapes in PyTorch
 * order [out, in], i.e. GGUF dims reversed) and totals. Needs only the container reader.
 */
#include "formats/gguf.h"
#include "core/blocks.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Up to `max` bytes of s, escaped (\n, \t, \", non-printable as \xNN), "..." when cut. */
static void fmt_str(char *buf, size_t cap, af_gguf_str s, size_t max) {
    size_t o = 0;
    if (cap < 8) return;
    buf[o++] = '"';
    for (uint64_t i = 0; i < s.len; i++) {
        if (i >= max || o + 8 >= cap) {
            snprintf(buf + o, cap - o, "\"... (%" PRIu64 " bytes)", s.len);
            return;
        }
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch == '\n') o += (size_t)snprintf(buf + o, cap - o, "\\n");
        else if (ch == '\t') o += (size_t)snprintf(buf + o, cap - o, "\\t");
        else if (ch == '"' || ch == '\\') o += (size_t)snprintf(buf + o, cap - o, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
        else buf[o++] = (char)ch;
    }
    snprintf(buf + o, cap - o, "\"");
}

/* Short rendering of a value: scalars as numbers, strings quoted (cut at 60 bytes), arrays as
 * "[type x N]" (with the first strings/numbers when the array is short). */
static void fmt_value(char *buf, size_t cap, const af_gguf_value *v) {
    switch (v->type) {
    case AF_GGUF_UINT8: case AF_GGUF_UINT16: case AF_GGUF_UINT32: case AF_GGUF_UINT64:
        snprintf(buf, cap, "%" PRIu64, v->v.u64);
        break;
    case AF_GGUF_INT8: case AF_GGUF_INT16: case AF_GGUF_INT32: case AF_GGUF_INT64:
        snprintf(buf, cap, "%" PRId64, v->v.i64);
        break;
    case AF_GGUF_FLOAT32: case AF_GGUF_FLOAT64: snprintf(buf, cap, "%g", v->v.f64); break;
    case AF_GGUF_BOOL: snprintf(buf, cap, "%s", v->v.u64 ? "true" : "false"); break;
    case AF_GGUF_STRING: fmt_str(buf, cap, v->v.str, 60); break;
    case AF_GGUF_ARRAY: {
        int o = snprintf(buf, cap, "[%s x %" PRIu64 "]", af_gguf_vtype_name(v->arr_type), v->arr_n);
        if (v->arr_n > 0 && v->arr_n <= 8 && v->arr_type != AF_GGUF_ARRAY && o > 0 && (size_t)o < cap) {
            size_t p = (size_t)o;
            for (uint64_t i = 0; i < v->arr_n && p + 80 < cap; i++) {
                char el[72];
                if (v->arr_type == AF_GGUF_STRING) fmt_str(el, sizeof el, af_gguf_arr_str(v, i), 24);
                else if (v->arr_type == AF_GGUF_FLOAT32 || v->arr_type == AF_GGUF_FLOAT64)
                    snprintf(el, sizeof el, "%g", af_gguf_arr_float(v, i));
                else snprintf(el, sizeof el, "%" PRId64, af_gguf_arr_int(v, i));
                p += (size_t)snprintf(buf + p, cap - p, "%s%s", i ? ", " : " ", el);
            }
        }
        break;
    }
    default: snprintf(buf, cap, "?"); break;
    }
}

/* The keys printed in the structured sections (skipped in "other metadata"). */
static const char *const ARCH_KEYS[] = {
    "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.layer_norm_rms_epsilon",
    "rope.freq_base", "context_length", "attention.sliding_window", "vocab_size"};
static const char *const TOK_KEYS[] = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                       "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                                       "tokenizer.ggml.eos_token_id"};

static bool shown_elsewhere(const af_gguf_kv *kv, const char *arch) {
    if (af_gguf_str_eq(kv->key, "general.architecture") || af_gguf_str_eq(kv->key, "general.alignment")) return true;
    for (size_t i = 0; i < sizeof TOK_KEYS / sizeof TOK_KEYS[0]; i++)
        if (af_gguf_str_eq(kv->key, TOK_KEYS[i])) return true;
    size_t al = strlen(arch);
    if (al == 0 || kv->key.len <= al + 1 || memcmp(kv->key.ptr, arch, al) != 0 || kv->key.ptr[al] != '.') return false;
    af_gguf_str rest = {kv->key.ptr + al + 1, kv->key.len - al - 1};
    for (size_t i = 0; i < sizeof ARCH_KEYS / sizeof ARCH_KEYS[0]; i++)
        if (af_gguf_str_eq(rest, ARCH_KEYS[i])) return true;
    return false;
}

/* One hyper-parameter line: "  hf_name  value  (gguf key)" when the key exists. */
static void hp_line(FILE *fp, const af_gguf *g, const char *arch, const char *hf, const char *suffix) {
    char key[256], val[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const af_gguf_value *v = af_gguf_find(g, key);
    if (!v) return;
    fmt_value(val, sizeof val, v);
    fprintf(fp, "  %-26s %-12s (%s)\n", hf, val, key);
}

static int64_t get_int(const af_gguf *g, const char *arch, const char *suffix, int64_t def) {
    char key[256];
    int64_t v = def;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (af_gguf_get_i64_or(g, key, def, &v) != AF_OK) v = def;
    return v;
}

static void print_hparams(FILE *fp, const af_gguf *g, const char *arch) {
    fprintf(fp, "\nhyper-parameters (Hugging Face names):\n");
    hp_line(fp, g, arch, "hidden_size", "embedding_length");
    hp_line(fp, g, arch, "num_hidden_layers", "block_count");
    hp_line(fp, g, arch, "intermediate_size", "feed_forward_length");
    hp_line(fp, g, arch, "num_attention_heads", "attention.head_count");
    char key[256];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (af_gguf_find(g, key)) hp_line(fp, g, arch, "num_key_value_heads", "attention.head_count_kv");
    else if (get_int(g, arch, "attention.head_count", 0) > 0)
        fprintf(fp, "  %-26s %-12" PRId64 " (= num_attention_heads)\n", "num_key_value_heads",
                get_int(g, arch, "attention.head_count", 0));
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    if (af_gguf_find(g, key)) {
        hp_line(fp, g, arch, "head_dim", "attention.key_length");
    } else {
        int64_t h = get_int(g, arch, "embedding_length", 0), n = get_int(g, arch, "attention.head_count", 0);
        if (h > 0 && n > 0) fprintf(fp, "  %-26s %-12" PRId64 " (hidden_size / num_attention_heads)\n", "head_dim", h / n);
    }
    hp_line(fp, g, arch, "rms_norm_eps", "attention.layer_norm_rms_epsilon");
    hp_line(fp, g, arch, "rope_theta", "rope.freq_base");
    hp_line(fp, g, arch, "max_position_embeddings", "context_length");
    hp_line(fp, g, arch, "sliding_window", "attention.sliding_window");
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    const af_gguf_value *tok = af_gguf_find(g, "tokenizer.ggml.tokens");
    const af_gguf_tensor *emb = af_gguf_find_tensor(g, "token_embd.weight");
    if (af_gguf_find(g, key)) hp_line(fp, g, arch, "vocab_size", "vocab_size");
    else if (tok && tok->type == AF_GGUF_ARRAY)
        fprintf(fp, "  %-26s %-12" PRIu64 " (tokenizer.ggml.tokens length)\n", "vocab_size", tok->arr_n);
    else if (emb && emb->n_dims >= 2)
        fprintf(fp, "  %-26s %-12" PRId64 " (token_embd.weight rows)\n", "vocab_size", emb->ne[1]);
    if (emb)
        fprintf(fp, "  %-26s %-12s (%s)\n", "tie_word_embeddings", af_gguf_find_tensor(g, "output.weight") ? "false" : "true",
                af_gguf_find_tensor(g, "output.weight") ? "output.weight present" : "no output.weight");
}

static void print_tokenizer(FILE *fp, const af_gguf *g) {
    const af_gguf_value *m = af_gguf_find(g, "tokenizer.ggml.model");
    if (!m) {
        fprintf(fp, "\ntokenizer: none\n");
        return;
    }
    fprintf(fp, "\ntokenizer:\n");
    char val[128];
    for (size_t i = 0; i < sizeof TOK_KEYS / sizeof TOK_KEYS[0]; i++) {
        const af_gguf_value *v = af_gguf_find(g, TOK_KEYS[i]);
        if (!v) continue;
        if (v->type == AF_GGUF_ARRAY) snprintf(val, sizeof val, "%" PRIu64 " entries", v->arr_n);
        else fmt_value(val, sizeof val, v);
        fprintf(fp, "  %-26s %s\n", TOK_KEYS[i] + strlen("tokenizer.ggml."), val);
    }
}

af_status af_gguf_describe(const char *path, FILE *fp) {
    if (!fp) return af_fail(AF_ERR_INVALID_ARG, "af_gguf_describe: NULL FILE*");
    af_gguf *g;
    AF_TRY(af_gguf_open(path, &g));
    char arch[64] = "";
    af_gguf_str as;
    if (af_gguf_get_str(g, "general.architecture", &as) == AF_OK)
        snprintf(arch, sizeof arch, "%.*s", (int)(as.len < 63 ? as.len : 63), as.ptr);
    fprintf(fp, "file:          %s\n", path);
    fprintf(fp, "version:       %u\n", g->version);
    fprintf(fp, "alignment:     %u\n", g->alignment);
    fprintf(fp, "tensors:       %" PRIu64 "\n", g->n_tensors);
    fprintf(fp, "metadata keys: %" PRIu64 "\n", g->n_kv);
    fprintf(fp, "data offset:   %" PRIu64 "\n", g->data_offset);
    fprintf(fp, "architecture:  %s\n", arch[0] ? arch : "(none: general.architecture missing)");
    if (arch[0]) print_hparams(fp, g, arch);
    print_tokenizer(fp, g);

    fprintf(fp, "\nother metadata:\n");
    char val[512];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const af_gguf_kv *kv = &g->kv[i];
        if (shown_elsewhere(kv, arch)) continue;
        fmt_value(val, sizeof val, &kv->val);
        fprintf(fp, "  %-44.*s %s\n", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, val);
    }

    fprintf(fp, "\ntensors (shape in PyTorch order [out, in] = GGUF dims reversed):\n");
    fprintf(fp, "  %-40s %-6s %-24s %12s\n", "name", "type", "shape", "bytes");
    uint64_t params = 0, bytes = 0, by_type[256] = {0}, count_type[256] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        int o = snprintf(shape, sizeof shape, "[");
        for (int d = (int)t->n_dims - 1; d >= 0; d--)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%" PRId64 "%s", t->ne[d], d ? ", " : "]");
        uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]); /* no overflow: checked on open */
        params += n;
        bytes += t->nbytes;
        by_type[t->type & 255] += t->nbytes;
        count_type[t->type & 255]++;
        fprintf(fp, "  %-40s %-6s %-24s %12" PRIu64 "\n", t->name, af_type_name(t->type), shape, t->nbytes);
    }
    fprintf(fp, "\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters (%.1f M), %" PRIu64 " bytes (%.1f MiB)\n",
            g->n_tensors, params, (double)params / 1e6, bytes, (double)bytes / (1024.0 * 1024.0));
    for (int ty = 0; ty < 256; ty++)
        if (count_type[ty])
            fprintf(fp, "  %-6s %4" PRIu64 " tensors %14" PRIu64 " bytes\n", af_type_name((uint32_t)ty), count_type[ty],
                    by_type[ty]);
    af_gguf_close(g);
    if (ferror(fp)) return af_fail(AF_ERR_IO, "%s: describe: error writing the output", path);
    return AF_OK;
}
