/*
 * test_nonfinite.c — no silent divergence: steps whose loss or gradient is not finite are skipped
 * (parameters and AdamW state unchanged), counted, logged (a "nonfinite" line in metrics.jsonl and
 * a "warn" line on the log) and, after max_nonfinite in a row, stop the run with AF_ERR_RANGE and a
 * message naming the step, where the non-finite value first appeared, and the last good checkpoint.
 * Non-finite values are injected into a tiny random llama model (tinymodel.c, F32 weights) held in
 * memory and passed to the trainer (opts.model):
 *  (a) one token's embedding row is NaN: exactly the steps whose sample holds that token are
 *      skipped; their checkpoints equal the previous step's bit for bit (params, adam_m, adam_v,
 *      AdamW's t); the reported place is "model.embed_tokens output";
 *  (b) one weight of layer 1's q_proj is NaN after a clean start: resumed from checkpoint-2, steps
 *      3..5 are skipped and the run stops at step 5 naming "step 3: model.layers.1.self_attn.q_proj
 *      output (frozen weight product)" and OUT/checkpoint-2;
 *  (c) af_tr_nonfinite_tensor names gradient / parameter tensors in backward / forward order;
 *  (d) the attention kernel propagates a NaN in q or k to the outputs that depend on it (its SIMD
 *      exp once clamped NaN scores to -87, i.e. turned them into zero weights: a silent NaN).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "formats/safetensors.h"
#include "kernels/ops.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

#define N_SAMPLES 12
#define POISON_TOK 5

/* 12 samples of 4..7 tokens in [10, 97); samples 3 and 8 also hold POISON_TOK. Labels i % 2. */
static af_dataset *make_data(void) {
    int32_t ids[N_SAMPLES * 8], labels[N_SAMPLES];
    int64_t off[N_SAMPLES + 1];
    uint64_t r = 99;
    int64_t n = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        off[i] = n;
        int len = 4 + (int)(tl_rand_u64(&r) % 4);
        for (int k = 0; k < len; k++) ids[n++] = 10 + (int32_t)(tl_rand_u64(&r) % 87);
        if (i == 3 || i == 8) ids[n - 2] = POISON_TOK;
        labels[i] = i % 2;
    }
    off[N_SAMPLES] = n;
    af_dataset *ds = NULL;
    af_status st = af_dataset_from_tokens(ids, off, N_SAMPLES, labels, NULL, 2, 32, &ds);
    CHECK(st == AF_OK, "dataset: %s", af_last_error());
    return ds;
}

static void opts(af_trainer_opts *o, const af_model *m, const af_dataset *ds, const char *out, FILE *log) {
    af_trainer_opts_defaults(o);
    o->model = m;
    o->train_data = ds;
    o->output_dir = out;
    o->lora_r = 4;
    o->lora_alpha = 8;
    o->lora_dropout = 0;
    o->batch = 1;
    o->grad_accum = 1;
    o->max_steps = N_SAMPLES;
    o->warmup_steps = 1;
    o->lr = 1e-2;
    o->save_every = 1;
    o->save_total_limit = 0;
    o->threads = 1;
    o->plot = 0;
    o->prefix_cache_mb = 0;
    o->log = log;
    o->progress_tty = 0;
}

static af_status run(const af_trainer_opts *o, af_train_result *res) {
    af_trainer *t = NULL;
    af_status st = af_trainer_new(o, &t);
    if (st == AF_OK) st = af_trainer_run(t, res);
    af_trainer_free(t);
    return st;
}

/* Bytes of tensor `name` of OUT/checkpoint-<step>/trainer_state.safetensors (malloc'ed), or NULL. */
static char *state_tensor(const char *out, long step, const char *name, size_t *len) {
    char p[700];
    snprintf(p, sizeof p, "%s/checkpoint-%ld/trainer_state.safetensors", out, step);
    af_st_file *f = NULL;
    if (af_st_open(p, &f) != AF_OK) return NULL;
    const af_st_tensor *t = af_st_find(f, name);
    char *b = NULL;
    if (t) {
        *len = (size_t)(t->end - t->begin);
        b = malloc(*len);
        if (b) memcpy(b, t->data, *len);
    }
    af_st_close(f);
    return b;
}

/* 1 when the tensor is byte-identical in checkpoints a and b, 0 when not, -1 when unreadable. */
static int same_tensor(const char *out, long a, long b, const char *name) {
    size_t la = 0, lb = 0;
    char *x = state_tensor(out, a, name, &la), *y = state_tensor(out, b, name, &lb);
    int r = x && y ? la == lb && !memcmp(x, y, la) : -1;
    free(x);
    free(y);
    return r;
}

static int64_t adam_t_of(const char *out, long step) {
    size_t len = 0;
    char *c = state_tensor(out, step, "counters", &len);
    int64_t v[2] = {-1, -1};
    if (c && len >= sizeof v) memcpy(v, c, sizeof v);
    free(c);
    return v[1];
}

static void test_skip_embedding(af_model *m, const af_dataset *ds) {
    /* NaN in the embedding row of POISON_TOK (a private copy of the mapped table) */
    const af_weight saved = m->tok_embd;
    const size_t nb = sizeof(float) * (size_t)(saved.rows * saved.cols);
    float *emb = malloc(nb);
    memcpy(emb, saved.data, nb);
    emb[POISON_TOK * saved.cols + 3] = NAN;
    m->tok_embd.data = emb;
    char *logbuf = NULL;
    size_t loglen = 0;
    FILE *log = open_memstream(&logbuf, &loglen);
    af_trainer_opts o;
    opts(&o, m, ds, P_("emb"), log);
    o.max_nonfinite = 5;
    af_train_result res;
    af_status st = run(&o, &res);
    fclose(log);
    m->tok_embd = saved;
    free(emb);
    CHECK(st == AF_OK && res.stop == AF_STOP_DONE && res.steps_done == N_SAMPLES, "run with 2 poisoned samples: %s",
          af_last_error());
    CHECK(res.n_nonfinite == 2, "skipped steps %lld, want 2 (the samples holding the poisoned token)",
          (long long)res.n_nonfinite);
    /* metrics.jsonl: one nonfinite event per skipped step, naming the embedding */
    char *mj = tl_read_file(P_("emb/metrics.jsonl"), NULL);
    long skipped[4];
    int n_ev = 0, named = 0;
    for (char *l = mj ? strtok(mj, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        if (!strstr(l, "\"type\":\"nonfinite\"")) continue;
        const char *sp = strstr(l, "\"step\":");
        if (n_ev < 4 && sp) skipped[n_ev] = strtol(sp + 7, NULL, 10);
        n_ev++;
        named += strstr(l, "\"where\":\"model.embed_tokens output (forward") != NULL;
    }
    free(mj);
    CHECK(n_ev == 2 && named == 2, "metrics.jsonl: %d nonfinite events (%d naming model.embed_tokens), want 2", n_ev,
          named);
    int warns = 0;
    for (const char *q = logbuf; q && (q = strstr(q, "warn  step")); q++) warns++;
    CHECK(warns == 2 && logbuf && strstr(logbuf, "not finite in model.embed_tokens output") &&
              strstr(logbuf, "step skipped, parameters unchanged"),
          "log: %d warn lines:\n%s", warns, logbuf ? logbuf : "");
    free(logbuf);
    /* a skipped step leaves params, AdamW moments and t exactly as the step before */
    for (int i = 0; i < n_ev && i < 2; i++) {
        const long s = skipped[i];
        if (s < 2) continue; /* no checkpoint before step 1 */
        CHECK(same_tensor(P_("emb"), s - 1, s, "params") == 1 && same_tensor(P_("emb"), s - 1, s, "adam_m") == 1 &&
                  same_tensor(P_("emb"), s - 1, s, "adam_v") == 1,
              "step %ld was skipped but its checkpoint differs from step %ld's", s, s - 1);
        CHECK(adam_t_of(P_("emb"), s) == adam_t_of(P_("emb"), s - 1), "AdamW t advanced on skipped step %ld", s);
    }
    /* a finite step does change them (so the comparison above can fail) */
    long fin = 2;
    while (fin <= N_SAMPLES && ((n_ev > 0 && skipped[0] == fin) || (n_ev > 1 && skipped[1] == fin))) fin++;
    CHECK(same_tensor(P_("emb"), fin - 1, fin, "params") == 0, "finite step %ld left the parameters unchanged", fin);
}

static void test_stop_layer(af_model *m, const af_dataset *ds) {
    af_trainer_opts o;
    af_train_result res;
    opts(&o, m, ds, P_("q"), NULL);
    o.stop_after = 2;
    af_status st = run(&o, &res);
    CHECK(st == AF_OK && res.stop == AF_STOP_INTERRUPTED && res.steps_done == 2, "clean start: %s", af_last_error());
    /* poison layer 1's q_proj and resume */
    af_weight *wq = &m->layers[1].wq;
    const af_weight saved = *wq;
    const size_t nb = sizeof(float) * (size_t)(saved.rows * saved.cols);
    float *w = malloc(nb);
    memcpy(w, saved.data, nb);
    w[7] = NAN;
    wq->data = w;
    opts(&o, m, ds, NULL, NULL);
    o.resume = P_("q");
    o.max_nonfinite = 3;
    st = run(&o, &res);
    *wq = saved;
    const char *msg = af_last_error();
    printf("non-finite stop message: %s\n", msg);
    CHECK(st == AF_ERR_RANGE && res.stop == AF_STOP_NONFINITE && res.steps_done == 5 && res.n_nonfinite == 3,
          "stop after 3 non-finite steps: status %s, stop %d, steps %lld, skipped %lld", af_status_name(st), res.stop,
          (long long)res.steps_done, (long long)res.n_nonfinite);
    CHECK(strstr(msg, "step 5:") && strstr(msg, "3 consecutive steps") &&
              strstr(msg, "step 3: model.layers.1.self_attn.q_proj output (frozen weight product)") &&
              strstr(msg, "/q/checkpoint-2"),
          "message names the step, the first place and the last good checkpoint: %s", msg);
    free(w);
}

static void test_tensor_names(const af_model *m) {
    af_lora_config cfg = {4, 8.0f, 0.0f, 0, (1u << AF_PROJ_COUNT) - 1, 1, 0};
    af_param_layout lay;
    if (!CHECK(af_param_layout_init(&lay, m, &cfg, 3) == AF_OK, "layout: %s", af_last_error())) return;
    float *G = calloc((size_t)lay.n_total, sizeof(float));
    char nm[128];
    CHECK(af_tr_nonfinite_tensor(NULL, &lay, G, 1, nm, sizeof nm) == 0 && nm[0] == 0, "all finite: '%s'", nm);
    G[af_lora_slot_at(&lay, 0, AF_PROJ_Q)->a_off + 5] = NAN;
    G[af_lora_slot_at(&lay, 1, AF_PROJ_DOWN)->b_off + 2] = INFINITY;
    int n = af_tr_nonfinite_tensor(NULL, &lay, G, 1, nm, sizeof nm);
    CHECK(n == 2 && !strcmp(nm, "model.layers.1.mlp.down_proj.lora_B"), "backward order: %d, %s", n, nm);
    n = af_tr_nonfinite_tensor(NULL, &lay, G, 0, nm, sizeof nm);
    CHECK(n == 2 && !strcmp(nm, "model.layers.0.self_attn.q_proj.lora_A"), "forward order: %d, %s", n, nm);
    G[lay.head_b_off + 1] = -INFINITY;
    n = af_tr_nonfinite_tensor(NULL, &lay, G, 1, nm, sizeof nm);
    CHECK(n == 3 && !strcmp(nm, "score.bias"), "head first in backward order: %d, %s", n, nm);
    memset(G, 0, sizeof(float) * (size_t)lay.n_total);
    G[af_lora_slot_at(&lay, 1, AF_PROJ_V)->b_off] = NAN;
    n = af_tr_nonfinite_tensor(NULL, &lay, G, 1, nm, sizeof nm);
    CHECK(n == 1 && !strcmp(nm, "model.layers.1.self_attn.v_proj.lora_B"), "one tensor: %d, %s", n, nm);
    free(G);
    af_param_layout_free(&lay);
}

/* (d): 2 heads sharing 1 kv head, head_dim 16, 24 tokens (more than one SIMD block of keys). */
static void test_attention_nan(void) {
    enum { NQ = 24, NH = 2, HD = 16 };
    static float q[NQ * NH * HD], k[NQ * HD], v[NQ * HD], out[NQ * NH * HD], lse[NQ * NH];
    uint64_t r = 3;
    for (int which = 0; which < 2; which++) {
        for (int i = 0; i < NQ * NH * HD; i++) q[i] = tl_rand_uniform(&r, -1, 1);
        for (int i = 0; i < NQ * HD; i++) k[i] = tl_rand_uniform(&r, -1, 1), v[i] = tl_rand_uniform(&r, -1, 1);
        if (which == 0) q[(5 * NH + 1) * HD + 2] = NAN; /* query row 5, head 1 */
        else k[9 * HD + 4] = NAN;                       /* key 9: every query >= 9, both heads */
        af_attention_forward(T_CTX, out, lse, q, k, v, NQ, 0, NQ, HD, NH, 1, HD, 0.25f, 0);
        int ok = 1;
        for (int t = 0; t < NQ; t++)
            for (int h = 0; h < NH; h++) {
                const int want_nan = which == 0 ? (t == 5 && h == 1) : t >= 9;
                int has_nan = 0;
                for (int d = 0; d < HD; d++) has_nan |= !isfinite(out[(t * NH + h) * HD + d]);
                if (has_nan != want_nan) {
                    if (ok) printf("attention %s: row %d head %d: non-finite %d, want %d\n", which ? "NaN key" : "NaN query",
                                   t, h, has_nan, want_nan);
                    ok = 0;
                }
            }
        CHECK(ok, "attention forward propagates a NaN %s to exactly the outputs that depend on it",
              which ? "key" : "query");
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_nonfinite_%ld", (long)getpid());
    if (!CHECK(mkdir(g_dir, 0777) == 0, "mkdir %s", g_dir)) return tl_finish("nonfinite");
    tm_spec s = tm_default("llama", AF_TYPE_F32);
    af_model *m = NULL;
    if (!CHECK(tm_load(&s, &m) == AF_OK, "tiny model: %s", af_last_error())) return tl_finish("nonfinite");
    af_dataset *ds = make_data();
    if (ds) {
        test_skip_embedding(m, ds);
        test_stop_layer(m, ds);
    }
    test_tensor_names(m);
    test_attention_nan();
    af_dataset_free(ds);
    af_model_free(m);
    if (!tl_failed && !getenv("TL_KEEP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0) printf("cannot remove %s\n", g_dir);
    } else printf("test files kept in %s\n", g_dir);
    return tl_finish("nonfinite");
}
