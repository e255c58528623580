/*
 * gguf_shrink.c — a smaller copy of a llama-family GGUF for the device kit (bench/kit/make_kit.sh):
 * the first N transformer blocks only, and the layer projections whose rows are a whole number of
 * a K-quant block re-quantized to that type. Everything else (metadata, tokenizer, embeddings,
 * norms, the projections whose rows do not fit the block) is copied byte for byte.
 *
 * usage: gguf_shrink IN.gguf OUT.gguf --layers N [--type KTYPE] [--small-type TYPE]
 *
 *   --layers N  keep blocks 0..N-1 (tensors "blk.I.*" with I >= N are dropped) and write
 *               ARCH.block_count = N (ARCH = general.architecture). 1 <= N <= the file's count.
 *   --type T    re-quantize the 2-D "blk.*.weight" tensors whose row length ne[0] is a multiple of
 *               T's block (256 for the K-quants), dequantized row by row (af_dequantize_row) then
 *               quantized (af_quantize_row: afinar's own round-to-nearest search for Q2_K/Q3_K/Q5_K,
 *               ggml's reference rule for Q4_K/Q6_K; kernels/quant.h). Default keep.
 *   --small-type T  re-quantize the other 2-D weights (token_embd.weight and the "blk.*.weight"
 *               projections whose rows do not fit --type's block) to T, one of q4_0 q4_1 q5_0 q5_1
 *               q8_0 (ggml's reference quantizers), when their rows are a multiple of 32. Default keep.
 *
 * The result is a different, smaller model (its text is not SmolLM2's): what the kit needs is a
 * real model's shapes and formats that fit the device tool's 64 MiB transfer, and the same file on
 * both devices, so that --device vulkan is compared with --device cpu on identical weights.
 * Prints one summary line on stderr. Exit 0 on success, 1 on any error (message names the file and
 * the tensor), 2 on bad usage. OUT is written atomically (af_gguf_writer_write_file).
 */
#include "core/blocks.h"
#include "core/core.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "kernels/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KEEP UINT32_MAX

static int usage(void) {
    fprintf(stderr, "usage: gguf_shrink IN.gguf OUT.gguf --layers N [--type q2_k|q3_k|q4_k|q5_k|q6_k|keep]\n"
                    "                   [--small-type q4_0|q4_1|q5_0|q5_1|q8_0|keep]\n");
    return 2;
}

/* "q3_k" -> AF_TYPE_Q3_K: the K-quants (small = 0) or the 32-value block types (small = 1); KEEP for
 * "keep". Returns 0 when unknown. */
static int parse_type(const char *s, int small, uint32_t *out) {
    static const uint32_t ks[] = {AF_TYPE_Q2_K, AF_TYPE_Q3_K, AF_TYPE_Q4_K, AF_TYPE_Q5_K, AF_TYPE_Q6_K};
    static const uint32_t ss[] = {AF_TYPE_Q4_0, AF_TYPE_Q4_1, AF_TYPE_Q5_0, AF_TYPE_Q5_1, AF_TYPE_Q8_0};
    const uint32_t *l = small ? ss : ks;
    if (!strcasecmp(s, "keep")) return *out = KEEP, 1;
    for (size_t i = 0; i < 5; i++)
        if (!strcasecmp(s, af_type_name(l[i]))) return *out = l[i], 1;
    return 0;
}

/* Block index of "blk.I.rest", or -1 for any other name. */
static long block_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *e = NULL;
    long i = strtol(name + 4, &e, 10);
    return (e != name + 4 && *e == '.') ? i : -1;
}

/* Dequantize `t` row by row and quantize it to `ty` into a new buffer (*out, *nbytes). */
static af_status requant(const af_gguf_tensor *t, uint32_t ty, uint8_t **out, size_t *nbytes) {
    const int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t in_rb = af_row_bytes(t->type, cols), out_rb = af_row_bytes(ty, cols);
    float *row = malloc(sizeof(float) * (size_t)cols);
    uint8_t *dst = malloc(out_rb * (size_t)rows);
    if (!row || !dst) {
        free(row), free(dst);
        return af_fail(AF_ERR_NOMEM, "tensor %s: out of memory", t->name);
    }
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < rows; r++) {
        af_dequantize_row(t->type, src + (size_t)r * in_rb, row, cols);
        if (!af_quantize_row(ty, row, dst + (size_t)r * out_rb, cols)) {
            free(row), free(dst);
            return af_fail(AF_ERR_UNSUPPORTED, "tensor %s: cannot quantize to %s", t->name, af_type_name(ty));
        }
    }
    free(row);
    *out = dst;
    *nbytes = out_rb * (size_t)rows;
    return AF_OK;
}

int main(int argc, char **argv) {
    if (argc < 5) return usage();
    const char *in = argv[1], *outp = argv[2];
    long layers = -1;
    uint32_t ty = KEEP, ty_small = KEEP;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            char *e = NULL;
            layers = strtol(argv[++i], &e, 10);
            if (!*argv[i] || *e || layers < 1) return fprintf(stderr, "gguf_shrink: --layers: '%s' is not a count >= 1\n", argv[i]), 2;
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            if (!parse_type(argv[++i], 0, &ty)) return fprintf(stderr, "gguf_shrink: --type: unknown '%s'\n", argv[i]), 2;
        } else if (!strcmp(argv[i], "--small-type") && i + 1 < argc) {
            if (!parse_type(argv[++i], 1, &ty_small))
                return fprintf(stderr, "gguf_shrink: --small-type: unknown '%s'\n", argv[i]), 2;
        } else
            return usage();
    }
    if (layers < 1) return usage();
    af_gguf *g = NULL;
    af_gguf_writer *w = NULL;
    uint8_t **bufs = NULL;
    af_gguf_str arch = {0};
    char key[160] = "";
    int64_t n_layers = 0;
    af_status st = af_gguf_open(in, &g);
    if (st == AF_OK) st = af_gguf_get_str(g, "general.architecture", &arch);
    if (st == AF_OK) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)(arch.len < 100 ? arch.len : 100), arch.ptr);
        st = af_gguf_get_i64(g, key, &n_layers);
    }
    if (st == AF_OK && layers > n_layers)
        st = af_fail(AF_ERR_INVALID_ARG, "%s: --layers %ld: the file has %lld blocks", in, layers, (long long)n_layers);
    if (st == AF_OK) st = af_gguf_writer_new(&w);
    if (st == AF_OK && !(bufs = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *bufs)))
        st = af_fail(AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK && g->alignment != 32) st = af_gguf_writer_set_alignment(w, g->alignment);
    for (uint64_t i = 0; st == AF_OK && i < g->n_kv; i++) {
        const af_gguf_kv *kv = &g->kv[i];
        if (af_gguf_str_eq(kv->key, key)) st = af_gguf_writer_add_u32(w, key, (uint32_t)layers);
        else if (af_gguf_str_eq(kv->key, "general.alignment")) continue; /* set above */
        else st = af_gguf_writer_copy_kv(w, kv);
    }
    int n_req = 0, n_copied = 0, n_dropped = 0;
    for (uint64_t i = 0; st == AF_OK && i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        const long b = block_of(t->name);
        if (b >= layers) {
            n_dropped++;
            continue;
        }
        const size_t nl = strlen(t->name);
        const int mat = t->n_dims == 2 && nl > 7 && !strcmp(t->name + nl - 7, ".weight") && !strstr(t->name, "norm") &&
                        af_type_can_dequantize(t->type);
        const int proj = mat && b >= 0, embd = mat && !strcmp(t->name, "token_embd.weight");
        uint32_t to = KEEP;
        if (proj && ty != KEEP && t->ne[0] % (int64_t)af_type_block_size(ty) == 0) to = ty;
        else if ((proj || embd) && ty_small != KEEP && t->ne[0] % (int64_t)af_type_block_size(ty_small) == 0)
            to = ty_small;
        if (to != KEEP && to != t->type) {
            size_t nb = 0;
            st = requant(t, to, &bufs[i], &nb);
            if (st == AF_OK) st = af_gguf_writer_add_tensor_ref(w, t->name, to, t->n_dims, t->ne, bufs[i], nb);
            n_req++;
        } else {
            st = af_gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, (size_t)t->nbytes);
            n_copied++;
        }
    }
    uint64_t size = 0;
    if (st == AF_OK) size = af_gguf_writer_size(w), st = af_gguf_writer_write_file(w, outp);
    if (st == AF_OK)
        fprintf(stderr, "gguf_shrink: wrote %s: %ld of %lld blocks, %d tensors re-quantized (%s / %s), %d copied, %d dropped, %.1f MiB\n",
                outp, layers, (long long)n_layers, n_req, ty == KEEP ? "keep" : af_type_name(ty),
                ty_small == KEEP ? "keep" : af_type_name(ty_small), n_copied, n_dropped,
                (double)size / 1048576.0);
    else
        fprintf(stderr, "gguf_shrink: %s\n", af_last_error());
    for (uint64_t i = 0; bufs && i < g->n_tensors; i++) free(bufs[i]);
    free(bufs);
    af_gguf_writer_free(w);
    af_gguf_close(g);
    return st == AF_OK ? 0 : 1;
}
