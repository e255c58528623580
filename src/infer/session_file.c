/* session_file.c — prompt-cache files: a session's cached tokens and keys/values on disk
 * (af_session_save_file / af_session_load_file; docs/FORMATS.md §13).
 *
 * Layout (little-endian, no padding):
 *   0   char[4]  magic "AFKV"
 *   4   u32      version (1)
 *   8   u64      layout hash (kv_layout_hash below)
 *   16  u32      n_layers
 *   20  u32      kv_dim: K floats per position over the layers that own their K/V (model kv_floats)
 *   24  u32      n_tokens (positions cached)
 *   28  u32      reserved, 0
 *   32  i32      tokens [n_tokens]
 *       u8       regime [n_tokens]: 1 = computed by blocked products, 0 = the per-row decode regime
 *                (af_session_keep_prefix), then zero bytes up to a multiple of 4
 *       f32      K: for each layer that owns its K/V, [n_tokens][its kv width]; then V likewise
 *       u64      FNV-1a 64 of every byte before it
 * A reader checks everything (size first, from the header's counts) before it writes anything
 * into the session. */
#include "infer/session.h"

#include "core/fsutil.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAGIC "AFKV"
#define KV_VERSION 1u
#define KV_HEADER 32u

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV0 0xcbf29ce484222325ull

static uint64_t hash_weight(uint64_t h, const af_weight *w) {
    h = fnv(h, &w->type, sizeof w->type);
    h = fnv(h, &w->rows, sizeof w->rows);
    h = fnv(h, &w->cols, sizeof w->cols);
    if (w->data) h = fnv(h, w->data, 64); /* every weight has >= 64 bytes (rows x a block) */
    return h;
}

/* What the cached values depend on: the model (architecture, hyper-parameters, every weight's
 * type, shape and first 64 bytes, the norms' first values), the context's numerics and the
 * session's adapter (all of its parameters and its scale). */
static uint64_t kv_layout_hash(const af_session *s) {
    const af_model *m = s->m;
    const af_model_config *c = &m->cfg;
    uint64_t h = fnv(FNV0, "afinar-kv-1", 11);
    h = fnv(h, c->architecture, strnlen(c->architecture, sizeof c->architecture));
    const int32_t ints[] = {c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
                            c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->max_position_embeddings};
    h = fnv(h, ints, sizeof ints);
    h = fnv(h, &c->rms_norm_eps, sizeof c->rms_norm_eps);
    h = fnv(h, &c->rope_theta, sizeof c->rope_theta);
    h = hash_weight(h, &m->tok_embd);
    h = hash_weight(h, &m->output);
    for (int32_t l = 0; l < c->num_hidden_layers; l++) {
        const af_layer *L = &m->layers[l];
        h = hash_weight(h, &L->wq), h = hash_weight(h, &L->wk), h = hash_weight(h, &L->wv), h = hash_weight(h, &L->wo);
        h = hash_weight(h, &L->w_gate), h = hash_weight(h, &L->w_up), h = hash_weight(h, &L->w_down);
        h = fnv(h, L->attn_norm, sizeof(float) * 4);
        h = fnv(h, &L->rope_base, sizeof L->rope_base);
        h = fnv(h, &L->window, sizeof L->window);
    }
    const char *kp = af_ctx_kernel_path(m->ctx), *pr = af_ctx_matmul_precision(m->ctx);
    const int i8 = af_ctx_int8_activations(m->ctx);
    h = fnv(h, kp, strlen(kp));
    h = fnv(h, pr, strlen(pr));
    h = fnv(h, &i8, sizeof i8);
    const char *dev = af_ctx_device(m->ctx); /* values computed on another device may differ in the last bits */
    if (strcmp(dev, "cpu") != 0) h = fnv(h, dev, strlen(dev));
    for (int32_t k = 0; k < s->n_lora; k++) { /* each adapter, in the order they are applied */
        const af_tf_lora *a = &s->lora[k];
        h = fnv(h, "lora", 4);
        h = fnv(h, &a->scale, sizeof a->scale);
        h = fnv(h, &a->lay->lora.r, sizeof a->lay->lora.r);
        h = fnv(h, &a->lay->lora.targets, sizeof a->lay->lora.targets);
        h = fnv(h, &s->P_hash[k], sizeof s->P_hash[k]); /* the parameters' own FNV-1a (they live on the device) */
    }
    return h;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Bytes of a file holding n tokens (no overflow for n <= n_ctx: the cache itself was allocated). */
static size_t regime_bytes(int64_t n) { return ((size_t)n + 3) / 4 * 4; }
/* kvf: K (or V) floats per position summed over the layers that own their K/V (m->kv_floats). */
static size_t file_bytes(int64_t kvf, int64_t n) {
    return KV_HEADER + 4 * (size_t)n + regime_bytes(n) + 2 * sizeof(float) * (size_t)n * (size_t)kvf + 8;
}

af_status af_session_save_file(const af_session *s, const char *path) {
    if (!s || !path) return af_fail(AF_ERR_INVALID_ARG, "af_session_save_file: NULL argument");
    const int64_t L = s->m->cfg.num_hidden_layers, kvd = s->kv_dim, n = s->n_past;
    const size_t bytes = file_bytes(kvd, n);
    unsigned char *buf = af_malloc(bytes);
    if (!buf) return af_fail(AF_ERR_NOMEM, "%s: out of memory for %zu bytes", path, bytes);
    memcpy(buf, KV_MAGIC, 4);
    put32(buf + 4, KV_VERSION);
    put64(buf + 8, kv_layout_hash(s));
    put32(buf + 16, (uint32_t)L);
    put32(buf + 20, (uint32_t)kvd);
    put32(buf + 24, (uint32_t)n);
    put32(buf + 28, 0);
    size_t o = KV_HEADER;
    memcpy(buf + o, s->toks, 4 * (size_t)n);
    o += 4 * (size_t)n;
    memset(buf + o, 0, regime_bytes(n));
    memcpy(buf + o, s->blocked, (size_t)n);
    o += regime_bytes(n);
    float *const *caches[2] = {s->k_cache, s->v_cache};
    af_status st = AF_OK;
    for (int c = 0; c < 2 && st == AF_OK; c++)
        for (int64_t l = 0; l < L && st == AF_OK; l++) {
            const af_layer *Ly = &s->m->layers[l];
            if (Ly->kv_src != l) continue; /* reads an earlier layer's slot */
            const size_t row = sizeof(float) * (size_t)(n * Ly->n_kv_head * Ly->head_dim);
            st = af_be(s->ctx)->download(s->ctx, buf + o, af_tf_kv_layer(s->m, caches[c], (int32_t)l), row); /* from the device */
            o += row;
        }
    put64(buf + o, fnv(FNV0, buf, o));
    if (st == AF_OK) st = af_write_file_atomic(path, buf, bytes);
    free(buf);
    return st;
}

af_status af_session_load_file(af_session *s, const char *path) {
    if (!s || !path) return af_fail(AF_ERR_INVALID_ARG, "af_session_load_file: NULL argument");
    const int64_t L = s->m->cfg.num_hidden_layers, kvd = s->kv_dim, V = s->m->cfg.vocab_size;
    const char *why = NULL;
    size_t len = 0;
    /* never more than a full cache of this session could need */
    unsigned char *buf = (unsigned char *)af_read_file_max(path, file_bytes(kvd, s->n_ctx) + 1, &len, &why);
    if (!buf) {
        if (errno == EFBIG)
            return af_fail(AF_ERR_RANGE, "%s: prompt cache larger than a cache of %lld positions of this model could be",
                           path, (long long)s->n_ctx);
        return af_fail(AF_ERR_IO, "%s: cannot read the prompt cache: %s", path, why ? why : "error");
    }
    af_status st = AF_OK;
    if (len < KV_HEADER + 8) st = af_fail(AF_ERR_FORMAT, "%s: %zu bytes, too short for a prompt cache (header %u + checksum 8)", path, len, KV_HEADER);
    else if (memcmp(buf, KV_MAGIC, 4) != 0) st = af_fail(AF_ERR_FORMAT, "%s: not an afinar prompt cache (magic at byte 0 is not \"AFKV\")", path);
    else if (get32(buf + 4) != KV_VERSION)
        st = af_fail(AF_ERR_FORMAT, "%s: field 'version' (byte 4): %u, this afinar reads version %u", path, get32(buf + 4), KV_VERSION);
    else if (get64(buf + 8) != kv_layout_hash(s))
        st = af_fail(AF_ERR_FORMAT, "%s: field 'layout_hash' (byte 8): made for another model, adapter or kernel setting "
                     "(the cached values would not be this session's); delete the file or name another one", path);
    else if (get32(buf + 16) != (uint32_t)L || get32(buf + 20) != (uint32_t)kvd)
        st = af_fail(AF_ERR_FORMAT, "%s: fields 'n_layers'/'kv_dim' (bytes 16-23): %u x %u, the model has %lld x %lld", path,
                     get32(buf + 16), get32(buf + 20), (long long)L, (long long)kvd);
    else if (get32(buf + 28) != 0)
        st = af_fail(AF_ERR_FORMAT, "%s: field 'reserved' (byte 28) is not 0", path);
    const int64_t n = st == AF_OK ? (int64_t)get32(buf + 24) : 0;
    if (st == AF_OK && n > s->n_ctx)
        st = af_fail(AF_ERR_RANGE, "%s: field 'n_tokens' (byte 24): %lld positions, more than the session's %lld", path,
                     (long long)n, (long long)s->n_ctx);
    if (st == AF_OK && len != file_bytes(kvd, n))
        st = af_fail(AF_ERR_FORMAT, "%s: %zu bytes, but %lld tokens of %lld K and %lld V values need exactly %zu", path, len,
                     (long long)n, (long long)kvd, (long long)kvd, file_bytes(kvd, n));
    if (st == AF_OK && get64(buf + len - 8) != fnv(FNV0, buf, len - 8))
        st = af_fail(AF_ERR_FORMAT, "%s: checksum (byte %zu) does not match the contents (a damaged file)", path, len - 8);
    const unsigned char *tk = buf + KV_HEADER;
    for (int64_t i = 0; st == AF_OK && i < n; i++) {
        const int32_t id = (int32_t)get32(tk + 4 * i);
        if (id < 0 || id >= V)
            st = af_fail(AF_ERR_FORMAT, "%s: token %lld (byte %lld): id %d outside the vocabulary [0, %lld)", path, (long long)i,
                         (long long)(KV_HEADER + 4 * i), id, (long long)V);
    }
    const unsigned char *rg = tk + 4 * n;
    for (int64_t i = 0; st == AF_OK && i < (int64_t)regime_bytes(n); i++)
        if (rg[i] > (i < n))
            st = af_fail(AF_ERR_FORMAT, "%s: regime byte %lld (byte %lld): %u, expected %s", path, (long long)i,
                         (long long)(rg - buf + i), rg[i], i < n ? "0 or 1" : "0 (padding)");
    const unsigned char *vals = rg + regime_bytes(n);
    const size_t nv = 2 * (size_t)n * (size_t)kvd;
    for (size_t i = 0; st == AF_OK && i < nv; i++) {
        float f;
        memcpy(&f, vals + 4 * i, 4);
        if (!isfinite(f))
            st = af_fail(AF_ERR_FORMAT, "%s: value %zu (byte %zu) of the %s cache is not finite", path, i,
                         (size_t)(vals - buf) + 4 * i, i < nv / 2 ? "key" : "value");
    }
    if (st == AF_OK) { /* everything checked: now the session changes */
        memcpy(s->toks, tk, 4 * (size_t)n);
        memcpy(s->blocked, rg, (size_t)n);
        float *const *caches[2] = {s->k_cache, s->v_cache};
        size_t o = 0;
        for (int c = 0; c < 2 && st == AF_OK; c++)
            for (int64_t l = 0; l < L && st == AF_OK; l++) {
                const af_layer *Ly = &s->m->layers[l];
                if (Ly->kv_src != l) continue;
                const size_t row = sizeof(float) * (size_t)(n * Ly->n_kv_head * Ly->head_dim);
                st = af_be(s->ctx)->upload(s->ctx, af_tf_kv_layer(s->m, caches[c], (int32_t)l), vals + o, row); /* onto the device */
                o += row;
            }
        if (st == AF_OK) s->n_past = n;
    }
    free(buf);
    return st;
}
