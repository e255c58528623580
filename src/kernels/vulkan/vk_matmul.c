/*
 * vk_matmul.c — products on the Vulkan backend (vk.h, matmul.h semantics): x·Wᵀ and dy·W on the
 * stored block formats (mm.comp, mv.comp), the dense f32 GEMMs, and the general product with the
 * operand transforms the LoRA ops need. Arguments longer than a buffer window are split (rows of x
 * and y, rows of W, or the summed dimension) until every piece is bindable.
 */
#include "kernels/vulkan/vk_internal.h"
#include "kernels/vulkan/vk_ops.h"

#include "core/blocks.h"

#include <string.h>

#define MV_MAX_N 8 /* rows of x that take the decode product (mv.comp) */

int af_vk_type_supported(uint32_t type) {
    switch (type) {
    case AF_TYPE_F32: case AF_TYPE_F16: case AF_TYPE_BF16:
    case AF_TYPE_Q4_0: case AF_TYPE_Q4_1: case AF_TYPE_Q5_0: case AF_TYPE_Q5_1: case AF_TYPE_Q8_0:
    case AF_TYPE_Q2_K: case AF_TYPE_Q3_K: case AF_TYPE_Q4_K: case AF_TYPE_Q5_K: case AF_TYPE_Q6_K:
    case AF_TYPE_NF4:
        return 1;
    default:
        return 0;
    }
}

typedef struct mm_push {
    uint32_t off[8];
    uint32_t M, N, K, sam, sak, sbk, sbn, ldc;
    float alpha_a, alpha_b, alpha_c;
    uint32_t flags, mode, kz;
} mm_push;

typedef struct red_push {
    uint32_t off[8];
    uint32_t M, N, ldc, S;
    float alpha_c;
    uint32_t flags;
} red_push;

typedef struct mv_push {
    uint32_t off[8];
    uint32_t N, K, OUT, rb, ldx, ldy, accumulate;
    float alpha;
} mv_push;

static int fits(af_vk_dev *d, const void *p, uint64_t bytes) { return !p || !bytes || vk_fit(d, p) >= bytes; }

/* Bytes of the span of each argument of a product. */
static uint64_t span_a(const vk_mm *c) { return 4 * ((uint64_t)(c->M - 1) * c->sam + (uint64_t)(c->K - 1) * c->sak + 1); }
static uint64_t span_c(const vk_mm *c) { return 4 * ((uint64_t)(c->M - 1) * c->ldc + (uint64_t)c->N); }
static uint64_t span_b(const vk_mm *c) {
    if (c->mode == 0) return (uint64_t)c->N * c->sbk;
    if (c->mode == 1) return (uint64_t)c->K * c->sbk;
    return 4 * ((uint64_t)(c->K - 1) * c->sbk + (uint64_t)(c->N - 1) * c->sbn + 1);
}

/* Split-K slices for a product whose 32-tile grid leaves a GPU mostly idle and whose k is long (the
 * LoRA weight gradients: [r, in] and [out, r] summed over the tokens): enough slices of >= 128 k for
 * ~256 workgroups, at most VK_MM_SPLIT_MAX; 1 = no split. Only where the 32-tile shader is chosen. */
#define VK_MM_SPLIT_MAX 32
static uint32_t mm_split(const af_vk_dev *d, const vk_mm *c, uint64_t g32) {
    if (d->mm_small_below == 0 || g32 >= 64 || c->K < 256) return 1;
    uint64_t s = (uint64_t)c->K / 128, want = vk_div(256, g32);
    if (s > want) s = want;
    if (s > VK_MM_SPLIT_MAX) s = VK_MM_SPLIT_MAX;
    return s < 2 ? 1 : (uint32_t)s;
}

static void mm_dispatch(af_vk_dev *d, const char *op, const vk_mm *c) {
    uint32_t flags = (c->accumulate ? 1u : 0u) | (c->am ? 2u : 0u) | (c->bm ? 4u : 0u) | (c->cm ? 8u : 0u);
    mm_push p = {{0}, (uint32_t)c->M, (uint32_t)c->N, (uint32_t)c->K, (uint32_t)c->sam, (uint32_t)c->sak,
                 (uint32_t)c->sbk, (uint32_t)c->sbn, (uint32_t)c->ldc, c->alpha_a, c->alpha_b, c->alpha_c, flags,
                 (uint32_t)c->mode, (uint32_t)c->K};
    const uint64_t sa = span_a(c), sb = span_b(c), sc = span_c(c);
    vk_arg args[6] = {{c->c, sc, 1}, {c->a, sa, 0}, {c->b, sb, 0}, {c->am, c->am ? sa : 0, 0},
                      {c->bm, c->bm ? sb : 0, 0}, {c->cm, c->cm ? sc : 0, 0}};
    uint32_t spec[VK_NSPEC] = {c->type};
    /* the 32-tile variant when the 64-tile grid is small for the device (same bits either way) */
    const uint64_t g64 = vk_div((uint64_t)c->N, 64) * vk_div((uint64_t)c->M, 64);
    const uint32_t tile = g64 < d->mm_small_below ? 32 : 64;
    const uint32_t S = tile == 32 ? mm_split(d, c, vk_div((uint64_t)c->N, 32) * vk_div((uint64_t)c->M, 32)) : 1;
    const uint64_t slice = 4 * (uint64_t)c->M * (uint64_t)c->N;
    float *part = S > 1 ? vk_scratch(d, S * slice) : NULL;
    if (S > 1 && part && vk_fit(d, part) >= S * slice) {
        /* slices of k (a multiple of the 16-deep k-step) into the scratch, no output transform */
        mm_push q = p;
        q.kz = (uint32_t)(vk_div((uint64_t)c->K, (uint64_t)S * 16) * 16);
        q.flags = flags & 6u, q.alpha_c = 1.0f, q.ldc = (uint32_t)c->N;
        const uint32_t nz = (uint32_t)vk_div((uint64_t)c->K, q.kz);
        vk_arg pa[6] = {{part, nz * slice, 1}, args[1], args[2], args[3], args[4], {NULL, 0, 0}};
        vk_dispatch(d, op, AF_VKS_MM_S, spec, pa, 6, &q, sizeof q, vk_div((uint64_t)c->N, 32), vk_div((uint64_t)c->M, 32), nz);
        red_push r = {{0}, (uint32_t)c->M, (uint32_t)c->N, (uint32_t)c->ldc, nz, c->alpha_c, flags & 9u};
        vk_arg ra[6] = {args[0], {part, nz * slice, 0}, {NULL, 0, 0}, {NULL, 0, 0}, {NULL, 0, 0}, args[5]};
        uint32_t gx, gy;
        vk_grid(vk_div((uint64_t)c->M * (uint64_t)c->N, 64), &gx, &gy);
        vk_dispatch(d, op, AF_VKS_MM_RED, NULL, ra, 6, &r, sizeof r, gx, gy, 1);
        return;
    }
    if (d->err != AF_OK) return;
    vk_dispatch(d, op, tile == 32 ? AF_VKS_MM_S : AF_VKS_MM, spec, args, 6, &p, sizeof p, vk_div((uint64_t)c->N, tile),
                vk_div((uint64_t)c->M, tile), 1);
}

/* Split until every argument fits a window (halving rows of C, rows of W, or the summed dimension). */
static void mm_exec(af_vk_dev *d, const char *op, const vk_mm *c) {
    if (d->err != AF_OK || c->M <= 0 || c->N <= 0) return;
    if (c->K <= 0) { /* an empty sum: C = 0 (or kept) */
        if (!c->accumulate)
            for (int64_t m = 0; m < c->M; m++) vk_cmd_fill(d, op, c->c + m * c->ldc, 0, 4 * (uint64_t)c->N);
        return;
    }
    const uint64_t sa = span_a(c), sb = span_b(c), sc = span_c(c);
    const int fa = fits(d, c->a, sa) && fits(d, c->am, c->am ? sa : 0);
    const int fb = fits(d, c->b, sb) && fits(d, c->bm, c->bm ? sb : 0);
    const int fc = fits(d, c->c, sc) && fits(d, c->cm, c->cm ? sc : 0);
    if (fa && fb && fc) {
        mm_dispatch(d, op, c);
        return;
    }
    vk_mm x = *c, y = *c;
    if ((!fc || !fa) && c->M > 1 && c->sam > 0) { /* rows of A and C */
        int64_t h = c->M / 2;
        x.M = h, y.M = c->M - h;
        y.c = c->c + h * c->ldc, y.a = c->a + h * c->sam;
        if (c->am) y.am = c->am + h * c->sam;
        if (c->cm) y.cm = c->cm + h * c->ldc;
    } else if ((!fb && c->mode == 0) || (!fc && c->N > 1 && c->mode == 2 && c->sbn > 0)) { /* columns of C */
        if (c->N <= 1) goto fail;
        int64_t h = c->N / 2;
        x.N = h, y.N = c->N - h;
        y.c = c->c + h, y.b = c->mode == 0 ? (const char *)c->b + h * c->sbk : (const char *)c->b + 4 * h * c->sbn;
        if (c->bm) y.bm = c->bm + h * c->sbn;
        if (c->cm) y.cm = c->cm + h;
    } else if (c->K > 1 && (!fb || !fa)) { /* the summed dimension: the second half adds */
        int64_t h = c->K / 2;
        if (c->mode != 2) { /* weight rows (mode 1) or columns (mode 0) stay whole blocks */
            const int64_t bs = (int64_t)af_type_block_size(c->type);
            if (c->mode == 0) h = h / bs * bs;
            if (h <= 0) goto fail;
        }
        x.K = h, y.K = c->K - h;
        y.a = c->a + h * c->sak;
        if (c->am) y.am = c->am + h * c->sak;
        if (c->mode == 1) y.b = (const char *)c->b + h * c->sbk;
        else if (c->mode == 0) y.b = (const char *)c->b + af_row_bytes(c->type, h);
        else y.b = (const char *)c->b + 4 * h * c->sbk, y.bm = c->bm ? c->bm + h * c->sbk : NULL;
        y.accumulate = 1;
        if (c->alpha_c != 1.0f || c->cm) goto fail; /* the output transform would apply to each half */
    } else
        goto fail;
    mm_exec(d, op, &x);
    mm_exec(d, op, &y);
    return;
fail:
    if (vk_not_device(d, op, 6, c->c, c->a, c->b, c->am, c->bm, c->cm)) return;
    vk_fail(d, AF_ERR_UNSUPPORTED,
            "%s: a [%lld x %lld x %lld] product whose arguments cannot be split into buffer windows of this device",
            op, (long long)c->M, (long long)c->N, (long long)c->K);
}

void vk_mm_run(af_vk_dev *d, const char *op, const vk_mm *c) { mm_exec(d, op, c); }

/* ---------------------------------------------------------------- decode product */

static void mv_exec(af_vk_dev *d, const char *op, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                    int64_t in, int64_t out, int64_t ldx, int64_t ldy, int accumulate, float alpha) {
    if (d->err != AF_OK || out <= 0) return;
    const uint64_t rb = af_row_bytes(type, in);
    const uint64_t sy = 4 * ((uint64_t)(n - 1) * ldy + out), sx = 4 * ((uint64_t)(n - 1) * ldx + in), sw = out * rb;
    if (!fits(d, y, sy) || !fits(d, w, sw)) {
        if (out <= 1) {
            if (vk_not_device(d, op, 3, y, x, w)) return;
            vk_fail(d, AF_ERR_UNSUPPORTED, "%s: one weight row (%llu bytes) longer than a buffer window", op,
                    (unsigned long long)rb);
            return;
        }
        int64_t h = out / 2;
        mv_exec(d, op, y, x, w, type, n, in, h, ldx, ldy, accumulate, alpha);
        mv_exec(d, op, y + h, x, (const char *)w + h * rb, type, n, in, out - h, ldx, ldy, accumulate, alpha);
        return;
    }
    if (!fits(d, x, sx)) {
        if (vk_not_device(d, op, 3, y, x, w)) return;
        vk_fail(d, AF_ERR_UNSUPPORTED, "%s: an input row longer than a buffer window", op);
        return;
    }
    mv_push p = {{0}, (uint32_t)n, (uint32_t)in, (uint32_t)out, (uint32_t)rb, (uint32_t)ldx, (uint32_t)ldy,
                 (uint32_t)(accumulate != 0), alpha};
    vk_arg args[3] = {{y, sy, 1}, {x, sx, 0}, {w, sw, 0}};
    /* mv_sg's workgroup: one subgroup per output row of its 8, at most 256 invocations */
    uint32_t sg = d->sg_required ? d->sg_required : d->subgroup_size, wg = 8 * (sg ? sg : 8);
    if (wg > 256) wg = 256;
    if (wg < 64) wg = 64;
    uint32_t spec[VK_NSPEC] = {type, wg};
    uint32_t gx, gy;
    vk_grid(vk_div((uint64_t)out, 8), &gx, &gy);
    vk_dispatch(d, op, d->use_subgroup ? AF_VKS_MV_SG : AF_VKS_MV, spec, args, 3, &p, sizeof p, gx, gy, 1);
}

/* ---------------------------------------------------------------- public products */

static int check_w(af_vk_dev *d, const char *op, const void *w, uint32_t type, int64_t in) {
    if (!af_vk_type_supported(type)) {
        vk_fail(d, AF_ERR_UNSUPPORTED, "%s: weight type %s (%u) has no shader", op, af_type_name(type), type);
        return 0;
    }
    const int64_t bs = (int64_t)af_type_block_size(type);
    if (in % bs) {
        vk_fail(d, AF_ERR_INVALID_ARG, "%s: %lld columns are not whole blocks of %s", op, (long long)in, af_type_name(type));
        return 0;
    }
    if ((uintptr_t)w % (type == AF_TYPE_F32 ? 4 : 2)) {
        vk_fail(d, AF_ERR_INVALID_ARG, "%s: weight rows must start %d-byte aligned", op, type == AF_TYPE_F32 ? 4 : 2);
        return 0;
    }
    return 1;
}

void vk_matmul_xwt(af_vk_dev *d, const char *op, float *y, const float *x, const void *w, uint32_t type, int64_t n,
                   int64_t in, int64_t out, int accumulate, float alpha) {
    int64_t sz[3] = {n, in, out};
    if (!vk_sizes_ok(d, op, 3, sz) || !check_w(d, op, w, type, in) || n == 0 || out == 0) return;
    if (n <= MV_MAX_N && in > 0) {
        mv_exec(d, op, y, x, w, type, n, in, out, in, out, accumulate, alpha);
        return;
    }
    vk_mm c;
    memset(&c, 0, sizeof c);
    c.c = y, c.a = x, c.b = w, c.type = type, c.mode = 0;
    c.M = n, c.N = out, c.K = in, c.sam = in, c.sak = 1, c.sbk = (int64_t)af_row_bytes(type, in), c.ldc = out;
    c.alpha_a = alpha, c.alpha_b = 1.0f, c.alpha_c = 1.0f, c.accumulate = accumulate;
    mm_exec(d, op, &c);
}

void af_vk_matmul_xwt(af_vk_dev *d, float *y, const float *x, const void *w, uint32_t type, int64_t n, int64_t in,
                      int64_t out, int accumulate) {
    if (vk_enter(d, "matmul_xwt")) vk_matmul_xwt(d, "matmul_xwt", y, x, w, type, n, in, out, accumulate, 1.0f);
    vk_leave(d);
}

void vk_matmul_dyw(af_vk_dev *d, const char *op, float *dx, const float *dy, const void *w, uint32_t type, int64_t n,
                   int64_t in, int64_t out, int accumulate) {
    int64_t sz[3] = {n, in, out};
    if (!vk_sizes_ok(d, op, 3, sz) || !check_w(d, op, w, type, in) || n == 0 || in == 0) return;
    vk_mm c;
    memset(&c, 0, sizeof c);
    c.c = dx, c.a = dy, c.b = w, c.type = type, c.mode = 1;
    c.M = n, c.N = in, c.K = out, c.sam = out, c.sak = 1, c.sbk = (int64_t)af_row_bytes(type, in), c.ldc = in;
    c.alpha_a = 1.0f, c.alpha_b = 1.0f, c.alpha_c = 1.0f, c.accumulate = accumulate;
    mm_exec(d, op, &c);
}

void af_vk_matmul_dyw(af_vk_dev *d, float *dx, const float *dy, const void *w, uint32_t type, int64_t n, int64_t in,
                      int64_t out, int accumulate) {
    if (vk_enter(d, "matmul_dyw")) vk_matmul_dyw(d, "matmul_dyw", dx, dy, w, type, n, in, out, accumulate);
    vk_leave(d);
}

void af_vk_gemm_abt(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                    int accumulate) {
    if (vk_enter(d, "gemm_abt")) vk_matmul_xwt(d, "gemm_abt", c, a, b, AF_TYPE_F32, m, k, n, accumulate, 1.0f);
    vk_leave(d);
}

void af_vk_gemm_ab(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                   int accumulate) {
    if (vk_enter(d, "gemm_ab")) vk_matmul_dyw(d, "gemm_ab", c, a, b, AF_TYPE_F32, m, n, k, accumulate);
    vk_leave(d);
}

void af_vk_gemm_atb(af_vk_dev *d, float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k,
                    int accumulate) {
    int64_t sz[3] = {m, n, k};
    if (vk_enter(d, "gemm_atb") && vk_sizes_ok(d, "gemm_atb", 3, sz)) {
        vk_mm q;
        memset(&q, 0, sizeof q);
        q.c = c, q.a = a, q.b = b, q.type = AF_TYPE_F32, q.mode = 2;
        q.M = m, q.N = n, q.K = k, q.sam = 1, q.sak = m, q.sbk = n, q.sbn = 1, q.ldc = n;
        q.alpha_a = q.alpha_b = q.alpha_c = 1.0f, q.accumulate = accumulate;
        mm_exec(d, "gemm_atb", &q);
    }
    vk_leave(d);
}
