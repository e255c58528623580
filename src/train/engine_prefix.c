/*
 * engine_prefix.c — the training engine's frozen-prefix cache (engine.h af_engine_set_prefix_cache):
 * the residual stream entering layer lo of each sample, keyed by the sample's exact tokens, so
 * later forwards/steps of the same sample start at layer lo.
 */
#include "train/engine_internal.h"

#include "kernels/backend.h"

#include <stdlib.h>
#include <string.h>

/* splitmix64 finaliser (Steele et al. 2014) chained over the tokens; never 0. */
static uint64_t tok_hash(const int32_t *tok, int32_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    for (int32_t i = 0; i < len; i++) {
        h ^= (uint64_t)(uint32_t)tok[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 27;
    }
    return h ? h : 1;
}

/* Slot of (tok, len): the matching entry, or the empty slot where it would go. */
static pc_entry *pc_slot(prefix_cache *pc, uint64_t h, const int32_t *tok, int32_t len) {
    for (int64_t i = (int64_t)(h & (uint64_t)(pc->cap - 1));; i = (i + 1) & (pc->cap - 1)) {
        pc_entry *en = &pc->tab[i];
        if (!en->h || (en->h == h && en->len == len && !memcmp(en->tok, tok, sizeof(int32_t) * (size_t)len)))
            return en;
    }
}

/* Insert a copy of (tok, x [len, H]: device memory of ctx, downloaded) if the byte budget allows;
 * silently skipped otherwise (also on allocation failure: the cache is an optimisation only).
 * Errors: the device's (the download). */
static af_status pc_insert(const af_ctx *ctx, prefix_cache *pc, uint64_t h, const int32_t *tok, int32_t len,
                           const float *x, int64_t H) {
    const size_t sz = sizeof(int32_t) * (size_t)len + sizeof(float) * (size_t)(len * H) + 64;
    if (pc->bytes + sz > pc->max_bytes) return AF_OK;
    if (2 * (pc->used + 1) > pc->cap) { /* grow to keep the load <= 1/2 */
        int64_t ncap = pc->cap ? 2 * pc->cap : 1024;
        pc_entry *nt = calloc((size_t)ncap, sizeof *nt);
        if (!nt) return AF_OK;
        prefix_cache g = *pc;
        g.tab = nt;
        g.cap = ncap;
        for (int64_t i = 0; i < pc->cap; i++)
            if (pc->tab[i].h) *pc_slot(&g, pc->tab[i].h, pc->tab[i].tok, pc->tab[i].len) = pc->tab[i];
        free(pc->tab);
        pc->tab = nt;
        pc->cap = ncap;
    }
    pc_entry *en = pc_slot(pc, h, tok, len);
    if (en->h) return AF_OK; /* already there */
    int32_t *mem = malloc(sz);
    if (!mem) return AF_OK;
    memcpy(mem, tok, sizeof(int32_t) * (size_t)len);
    float *xc = (float *)(((uintptr_t)(mem + len) + 63) & ~(uintptr_t)63);
    af_status st = af_be(ctx)->download(ctx, xc, x, sizeof(float) * (size_t)(len * H));
    if (st != AF_OK) {
        free(mem);
        return st;
    }
    en->h = h;
    en->len = len;
    en->tok = mem;
    en->x = xc;
    pc->used++;
    pc->bytes += sz;
    return AF_OK;
}

/* Residual stream entering layer lo for the batch, into xs_at(lo): from the prefix cache for the
 * samples it holds, computed (and cached) for the others as one sub-batch. Samples are independent
 * (positions restart, attention stays inside a sample), so this equals computing the whole batch. */
af_status engine_prefix_cached(af_engine *e, const af_tf_run *R, const af_batch *b) {
    prefix_cache *pc = &e->pc;
    const af_ctx *ctx = e->ctx;
    const af_backend *be = af_be(ctx);
    const int64_t H = e->m->cfg.hidden_size;
    float *dst = engine_xs_at(e, e->lo, R->n);
    int32_t nmiss = 0;
    int64_t nt = 0;
    e->sub_ss[0] = 0;
    for (int32_t s = 0; s < b->n_samples; s++) {
        const int32_t s0 = b->seq_start[s], len = b->seq_start[s + 1] - s0;
        const uint64_t h = tok_hash(b->tokens + s0, len);
        pc_entry *en = pc->cap ? pc_slot(pc, h, b->tokens + s0, len) : NULL;
        if (en && en->h) {
            AF_TRY(be->upload(ctx, dst + (int64_t)s0 * H, en->x, sizeof(float) * (size_t)(len * H)));
            pc->hits++;
            continue;
        }
        pc->misses++;
        memcpy(e->sub_tok + nt, b->tokens + s0, sizeof(int32_t) * (size_t)len);
        nt += len;
        e->sub_idx[nmiss] = s;
        e->sub_ss[++nmiss] = (int32_t)nt;
    }
    if (!nmiss) return AF_OK;
    af_tf_run Rs = *R;
    Rs.ss = e->sub_ss;
    Rs.B = nmiss;
    Rs.n = nt;
    Rs.pos = e->pos;
    AF_TRY(engine_frozen_prefix(e, &Rs, e->sub_tok, e->hN)); /* hN is free until the final norm */
    for (int32_t k = 0; k < nmiss; k++) {
        const int32_t s = e->sub_idx[k], s0 = b->seq_start[s], len = b->seq_start[s + 1] - s0;
        const float *src = e->hN + (int64_t)e->sub_ss[k] * H;
        be->copy(ctx, dst + (int64_t)s0 * H, src, sizeof(float) * (size_t)(len * H));
        AF_TRY(pc_insert(ctx, pc, tok_hash(b->tokens + s0, len), b->tokens + s0, len, src, H));
    }
    return AF_OK;
}

void engine_pc_clear(prefix_cache *pc) {
    for (int64_t i = 0; i < pc->cap; i++) free(pc->tab[i].tok);
    free(pc->tab);
    pc->tab = NULL;
    pc->cap = pc->used = 0;
    pc->bytes = 0;
    pc->hits = pc->misses = 0;
}

af_status af_engine_set_prefix_cache(af_engine *e, size_t max_bytes) {
    if (!e) return af_fail(AF_ERR_INVALID_ARG, "engine: NULL argument");
    if (max_bytes == 0) engine_pc_clear(&e->pc);
    e->pc.max_bytes = max_bytes;
    return AF_OK;
}

void af_engine_prefix_cache_stats(const af_engine *e, int64_t *entries, size_t *bytes, int64_t *hits, int64_t *misses) {
    if (entries) *entries = e->pc.used;
    if (bytes) *bytes = e->pc.bytes;
    if (hits) *hits = e->pc.hits;
    if (misses) *misses = e->pc.misses;
}
