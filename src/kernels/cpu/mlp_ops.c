/*
 * mlp_ops.c — the gated MLP's training products with their element-wise step fused into the
 * packed GEMM's epilogue (kernels/train_ops.h af_mlp_gate_up, af_mlp_down_back): the activation
 * act(gate)·up is formed block by block (128 rows) as soon as a block of up is final, and the
 * backward of the activation as soon as a block of d act is, while the block is in cache, instead
 * of in a separate pass over the [n, F] arrays after they were written to memory (and, backward,
 * two zero-fills). Gate and up stay two products: one packed product over both weights (their
 * panels alternating, the input packed once for both) was tried and measured 6% slower on Zen 4
 * at SmolLM2's MLP (twice the packed B streamed per block of rows, 7 MiB instead of 3.5).
 *
 * Same bits as the unfused sequence (af_matmul_rows per product, then af_swiglu_* / af_geglu_*):
 * every element of gate, up and d act is the same chain of FMAs (gemm_packed.h
 * af_gp_gemm_fused), and the activation and its backward run the same per-element kernels
 * (kernels.h af_ops_rows swiglu_fwd / swiglu_bwd, af_geglu_span_*), whose result for an element
 * does not depend on where it sits in the range. Where the packed GEMM does not take the product
 * (af_gp_usable false, packed B over MAX_B, no buffer) or the context's hook AF_CTX_MLP_FUSED is
 * off (tests, A/B measurements) the ops run the unfused sequence.
 *
 * With adapters on gate, up or down (af_lora_args) the projections are af_proj_lora_forward /
 * af_proj_lora_backward, and where those run the correction in the frozen product's epilogue (bf16 on
 * AMX tiles; lora_ops.c) the activation, resp. down's input act and the activation's backward, follow
 * it in the same epilogue (af_proj_lora_forward_then / _backward_then); the same bits as the ops
 * followed by the separate passes, which run where they do not.
 */
#include "kernels/train_ops.h"

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

#include <string.h>

static int64_t g_fused_calls; /* products that ran fused (af_mlp_fused_calls) */

int64_t af_mlp_fused_calls(void) { return __atomic_load_n(&g_fused_calls, __ATOMIC_RELAXED); }

typedef struct mlp_ep {
    const af_ops_rows *K;
    int geglu;
    int64_t F;
    float *h, *dg, *du;
    const float *gate, *up, *dh;
} mlp_ep;

/* Forward epilogue (of the up product): h = act(gate) · up on rows [r0, r0 + mc) x columns
 * [j0, j0 + nr) (gate computed before). */
static void ep_fwd(void *va, int64_t r0, int64_t mc, int64_t j0, int64_t nr) {
    const mlp_ep *E = va;
    for (int64_t t = r0; t < r0 + mc; t++) {
        const int64_t o = t * E->F + j0;
        if (E->geglu) af_geglu_span_fwd(E->h + o, E->gate + o, E->up + o, nr);
        else E->K->swiglu_fwd(E->h + o, E->gate + o, E->up + o, nr);
    }
}

/* Backward epilogue: d gate, d up = 0 + the activation's backward of d act on the block (the
 * unfused walk zero-fills them and adds, so +0.0 + v here too); with h (down_proj adapted: its
 * input, which the adapter's dA needs after the product) act(gate)·up on the block first. */
static void ep_bwd(void *va, int64_t r0, int64_t mc, int64_t j0, int64_t nr) {
    const mlp_ep *E = va;
    if (E->h) ep_fwd(va, r0, mc, j0, nr);
    for (int64_t t = r0; t < r0 + mc; t++) {
        const int64_t o = t * E->F + j0;
        memset(E->dg + o, 0, sizeof(float) * (size_t)nr);
        memset(E->du + o, 0, sizeof(float) * (size_t)nr);
        if (E->geglu) af_geglu_span_bwd(E->dg + o, E->du + o, E->dh + o, E->gate + o, E->up + o, nr);
        else E->K->swiglu_bwd(E->dg + o, E->du + o, E->dh + o, E->gate + o, E->up + o, nr);
    }
}

static void glu_fwd(const af_ctx *ctx, float *h, const float *gate, const float *up, int64_t nf, int geglu) {
    if (geglu) af_geglu_forward(ctx, h, gate, up, nf);
    else af_swiglu_forward(ctx, h, gate, up, nf);
}

/* One projection of the gated MLP's forward: y = x·Wᵀ, + its LoRA correction with l. */
static void proj(const af_ctx *ctx, float *y, const float *x, const void *w, uint32_t t, int64_t n, int64_t in,
                 int64_t F, int64_t block_rows, const af_lora_args *l) {
    if (l) af_proj_lora_forward(ctx, y, l->xa, x, l->drop_mask, w, t, l->A, l->B, n, in, F, l->r, l->scale, block_rows);
    else af_matmul_rows(ctx, 0, y, x, w, t, n, in, F, 0, block_rows);
}

void af_mlp_gate_up(const af_ctx *ctx, float *gate, float *up, float *h, const float *x, const void *wg, uint32_t tg,
                    const void *wu, uint32_t tu, int64_t n, int64_t in, int64_t F, int geglu, int64_t block_rows,
                    const af_lora_args *lg, const af_lora_args *lu) {
    if (n <= 0 || F <= 0) return;
    proj(ctx, gate, x, wg, tg, n, in, F, block_rows, lg);
    if (ctx->mlp_fused && n > AF_MM_DECODE_N && in > 0 && af_gp_usable(ctx, n, F, in)) {
        mlp_ep E = {.K = ctx->k->ops, .geglu = geglu, .F = F, .h = h, .gate = gate, .up = up};
        af_gp_fused f = {.ep = ep_fwd, .arg = &E};
        if (lu ? af_proj_lora_forward_then(ctx, up, lu->xa, x, lu->drop_mask, wu, tu, lu->A, lu->B, n, in, F, lu->r,
                                           lu->scale, &f)
               : af_gp_gemm_fused(ctx, up, F, x, in, 1, wu, tu, (int64_t)af_row_bytes(tu, in), 1, n, F, in, 0,
                                  ctx->n_threads, &f)) {
            __atomic_add_fetch(&g_fused_calls, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    proj(ctx, up, x, wu, tu, n, in, F, block_rows, lu);
    glu_fwd(ctx, h, gate, up, n * F, geglu);
}

void af_mlp_down_back(const af_ctx *ctx, float *dh, float *d_gate, float *d_up, const float *dy, const void *wd,
                      uint32_t td, const float *gate, const float *up, int64_t n, int64_t F, int64_t H, int geglu,
                      int64_t block_rows, const af_lora_args *ld) {
    if (n <= 0 || F <= 0) return;
    if (ctx->mlp_fused && n > AF_MM_DECODE_N && H > 0 && af_gp_usable(ctx, n, F, H)) {
        mlp_ep E = {.K = ctx->k->ops, .geglu = geglu, .F = F, .dg = d_gate, .du = d_up, .gate = gate, .up = up,
                    .dh = dh, .h = ld ? ld->x : NULL};
        af_gp_fused f = {.ep = ep_bwd, .arg = &E};
        if (ld ? af_proj_lora_backward_then(ctx, dh, ld->dA, ld->dB, ld->tmp, dy, ld->x, ld->xa, ld->drop_mask, wd, td,
                                            ld->A, ld->B, n, F, H, ld->r, ld->scale, &f)
               : af_gp_gemm_fused(ctx, dh, F, dy, H, 1, wd, td, (int64_t)af_row_bytes(td, F), 0, n, F, H, 0,
                                  ctx->n_threads, &f)) {
            __atomic_add_fetch(&g_fused_calls, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    if (ld) {
        glu_fwd(ctx, ld->x, gate, up, n * F, geglu);
        af_proj_lora_backward(ctx, dh, ld->dA, ld->dB, ld->tmp, dy, ld->x, ld->xa, ld->drop_mask, wd, td, ld->A, ld->B,
                              n, F, H, ld->r, ld->scale, 0, block_rows);
    } else
        af_matmul_rows(ctx, 1, dh, dy, wd, td, n, F, H, 0, block_rows);
    memset(d_gate, 0, sizeof(float) * (size_t)(n * F));
    memset(d_up, 0, sizeof(float) * (size_t)(n * F));
    if (geglu) af_geglu_backward(ctx, d_gate, d_up, dh, gate, up, n * F);
    else af_swiglu_backward(ctx, d_gate, d_up, dh, gate, up, n * F);
}
