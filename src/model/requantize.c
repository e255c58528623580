/*
 * requantize.c — af_model_requantize: quantize a loaded model's frozen projection weights at load
 * (--quantize nf4 / q8_0 / f16 / bf16, af_ctx_params.quantize), whatever file they came from.
 *
 * Which tensors: the seven linear projections of every layer (attn q/k/v/o, ffn gate/up/down),
 * as bitsandbytes' Linear4bit replaces the nn.Linear layers of the decoder (transformers'
 * BitsAndBytes integration keeps the LM head and the embeddings in their dtype). Token embeddings,
 * the LM head, norms and biases stay as loaded.
 * Which source types: F32, F16, BF16 (dequantized to f32 row by row, then af_quantize_row).
 * A projection already in the target type is kept. A projection in another quantized GGUF type
 * (Q4_1, Q4_K, ...) is refused (AF_ERR_UNSUPPORTED): requantizing would add a second rounding
 * error on top of the first, for a model that is already small; use the file as it is.
 * A projection whose in_features is not a multiple of the target's block size (64 for NF4, 32 for
 * Q8_0) is kept in its stored type (counted in *n_kept).
 * The quantized copies are owned by the model (one allocation); the pages of the mapped file that
 * held the replaced weights are released (madvise MADV_DONTNEED on the read-only private mapping:
 * they are never read again, and would be re-read from the file if they were), so the resident
 * size drops to the quantized size.
 */
#include "model/model.h"

#include "core/core.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int is_float_type(uint32_t t) { return t == AF_TYPE_F32 || t == AF_TYPE_F16 || t == AF_TYPE_BF16; }

/* The projections of layer il, in a fixed order. */
static int layer_weights(af_layer *L, af_weight *w[7]) {
    w[0] = &L->wq;
    w[1] = &L->wk;
    w[2] = &L->wv;
    w[3] = &L->wo;
    w[4] = &L->w_gate;
    w[5] = &L->w_up;
    w[6] = &L->w_down;
    return 7;
}

static const char *const k_proj_names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                            "ffn_down"};

/* Drop the whole pages of [p, p + n) from the resident set when they lie in the file mapping. */
static void release_mapped(const af_model *m, const void *p, size_t n) {
    if (!m->gguf || !m->gguf->base) return;
    const uint8_t *b = m->gguf->base, *s = p;
    if (s < b || s + n > b + m->gguf->size) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t lo = ((uintptr_t)s + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    uintptr_t hi = ((uintptr_t)s + n) / (uintptr_t)pg * (uintptr_t)pg;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

af_status af_model_requantize(af_model *m, uint32_t type, int *n_done, int *n_kept) {
    if (n_done) *n_done = 0;
    if (n_kept) *n_kept = 0;
    if (!m) return af_fail(AF_ERR_INVALID_ARG, "af_model_requantize: NULL model");
    if (type != AF_TYPE_NF4 && type != AF_TYPE_Q8_0 && type != AF_TYPE_F16 && type != AF_TYPE_BF16)
        return af_fail(AF_ERR_INVALID_ARG, "quantize: target type %s is not one of nf4, q8_0, f16, bf16",
                       af_type_name(type));
    if (m->owned_quant) return af_fail(AF_ERR_INVALID_ARG, "quantize: the model's weights are already requantized");
    const int64_t bs = (int64_t)af_type_block_size(type);
    const int nl = m->cfg.num_hidden_layers;
    /* pass 1: check every projection and size the allocation */
    size_t total = 0, cols_max = 0;
    for (int il = 0; il < nl; il++) {
        af_weight *w[7];
        layer_weights(&m->layers[il], w);
        for (int k = 0; k < 7; k++) {
            if (w[k]->type == type) continue;
            if (!is_float_type(w[k]->type))
                return af_fail(AF_ERR_UNSUPPORTED,
                               "quantize %s: blk.%d.%s.weight is already quantized (%s): --quantize converts "
                               "f32/f16/bf16 weights only (a second rounding on top of %s is refused); "
                               "load the file without --quantize",
                               af_type_name(type), il, k_proj_names[k], af_type_name(w[k]->type),
                               af_type_name(w[k]->type));
            if (w[k]->cols % bs != 0) continue;
            size_t rb = af_row_bytes(type, w[k]->cols), sz;
            if (!af_mul_ok(rb, (size_t)w[k]->rows, &sz) || total + sz < total)
                return af_fail(AF_ERR_NOMEM, "quantize: size overflow");
            total += (sz + 63) / 64 * 64;
            if ((size_t)w[k]->cols > cols_max) cols_max = (size_t)w[k]->cols;
        }
    }
    if (total == 0) {
        for (int il = 0; il < nl && n_kept; il++) {
            af_weight *w[7];
            layer_weights(&m->layers[il], w);
            for (int k = 0; k < 7; k++) *n_kept += w[k]->type != type;
        }
        return AF_OK;
    }
    uint8_t *buf = af_malloc_aligned(total);
    float *row = malloc(cols_max * sizeof(float));
    if (!buf || !row) {
        af_free_aligned(buf);
        free(row);
        return af_fail(AF_ERR_NOMEM, "quantize: out of memory for %zu bytes of %s weights", total, af_type_name(type));
    }
    /* pass 2: quantize row by row into buf, then point the weights at it */
    size_t off = 0;
    for (int il = 0; il < nl; il++) {
        af_weight *w[7];
        layer_weights(&m->layers[il], w);
        for (int k = 0; k < 7; k++) {
            af_weight *W = w[k];
            if (W->type == type) continue;
            if (W->cols % bs != 0) {
                if (n_kept) (*n_kept)++;
                continue;
            }
            const size_t rb_src = af_row_bytes(W->type, W->cols), rb = af_row_bytes(type, W->cols);
            uint8_t *dst = buf + off;
            for (int64_t r = 0; r < W->rows; r++) {
                af_dequantize_row(W->type, (const uint8_t *)W->data + (size_t)r * rb_src, row, W->cols);
                af_quantize_row(type, row, dst + (size_t)r * rb, W->cols);
            }
            release_mapped(m, W->data, rb_src * (size_t)W->rows);
            W->data = dst;
            W->type = type;
            off += (rb * (size_t)W->rows + 63) / 64 * 64;
            if (n_done) (*n_done)++;
        }
    }
    free(row);
    m->owned_quant = buf;
    m->owned_quant_bytes = total;
    return m->imported ? af_model_import(m) : AF_OK; /* the device copies follow the new blocks */
}
