/*
 * test_export.c — llama.cpp LoRA GGUF export and merged GGUF models (src/lora/adapter_gguf.c,
 * export.c, merge.c; formats/gguf_write.c af_gguf_writer_copy_kv) on tiny models (tinymodel.c):
 *  1. export -> load round trip: the parameters read back from the LoRA GGUF equal the saved ones
 *     bit for bit (llama: q/k rows converted HF -> GGUF order by the directory loader, written
 *     in that order; gemma3: no conversion), the file's keys and tensor shapes are llama.cpp's
 *     (general.type, adapter.type, adapter.lora.alpha = s*r, lora_a ne {in, r}, lora_b ne {r, out},
 *     lora_b = P's GGUF-order rows), and a session gives identical logits with either file;
 *  2. merge into an F32 model (keep): logits of the merged model equal base + adapter within 1e-4
 *     relative; every KV and every non-adapted tensor byte-identical to the base; adapted tensors
 *     keep their type and shape;
 *  3. merge into a Q8_0 model (keep) and to q4_0: logits within the re-quantization error (the
 *     difference to base + adapter is < 0.25 of what the adapter changes), stats.requant_rms > 0;
 *  4. a classification adapter merged: af_classifier_load(OUT, OUT) gives base + adapter's
 *     probabilities (f32 merge: within 1e-5);
 *  5. bad input: output exists, unknown type, head-only export, other architecture: the status,
 *     and no file written.
 */
#include "testlib.h"
#include "tinymodel.c"

#include <stdarg.h>

/* A line on stdout (measurements; shown by make test's log). */
static void tl_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tl_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

#include "formats/gguf.h"
#include "lora/adapter_gguf.h"
#include "lora/adapter_io.h"
#include "lora/lora.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* A random adapter for `m` (r 4, alpha 8, all projections, B != 0), saved as a PEFT directory the
 * way the trainer saves it (architecture + head counts: q/k rows to HF order). *lay / *P returned
 * (P in GGUF order). */
static float *make_adapter(const af_model *m, const char *dir, int32_t num_classes, af_param_layout *lay,
                           int rslora) {
    const af_model_config *mc = af_model_get_config(m);
    af_lora_config lc = {4, 8.0f, 0.0f, rslora, (1u << AF_PROJ_COUNT) - 1, 7, 0};
    if (af_param_layout_init(lay, m, &lc, num_classes) != AF_OK) return NULL;
    float *P = calloc((size_t)lay->n_total, sizeof(float));
    af_lora_init_params(lay, P);
    for (int64_t i = 0; i < lay->n_lora; i++) /* B = 0 after init: give every value a random part */
        P[i] += 0.05f * (af_ctr_u01(af_ctr_key(99, 0, 0, 0), (uint64_t)i) - 0.5f);
    for (int64_t i = lay->n_lora; i < lay->n_total; i++) P[i] += 0.3f * (af_ctr_u01(af_ctr_key(98, 0, 0, 0), (uint64_t)i) - 0.5f);
    static const char *const labels[3] = {"sport", "tech", "food"};
    af_adapter_save_opts so = {0};
    so.architecture = mc->architecture;
    so.n_head = mc->num_attention_heads;
    so.n_kv_head = mc->num_key_value_heads;
    so.head_dim = mc->head_dim;
    so.write_head_bias = num_classes > 0;
    so.pooling = num_classes > 0 ? "last" : NULL;
    if (num_classes == 3) {
        so.labels = labels;
        so.n_labels = 3;
    }
    if (af_adapter_save(dir, lay, P, &so) != AF_OK) {
        free(P);
        return NULL;
    }
    return P;
}

/* Logits [n, vocab] of tokens 1..n with the adapter at `adapter` (NULL: none). */
static float *logits_of(const char *model_path, const char *adapter, int n) {
    af_model *m = NULL;
    if (af_model_load(NULL, model_path, &m) != AF_OK) return NULL;
    const int32_t V = af_model_get_config(m)->vocab_size;
    af_session *s = NULL;
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int32_t ids[16];
    for (int i = 0; i < n; i++) ids[i] = (7 * i + 3) % V;
    af_status st = af_session_new(m, n + 1, &s);
    if (st == AF_OK && adapter) st = af_session_load_adapter(s, adapter, 1.0f);
    if (st == AF_OK) st = af_session_eval(s, ids, n, NULL, out);
    if (st != AF_OK) {
        tl_note("logits_of(%s, %s): %s", model_path, adapter ? adapter : "-", af_last_error());
        free(out);
        out = NULL;
    }
    af_session_free(s);
    af_model_free(m);
    return out;
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *amax) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    if (amax) *amax = m;
    return d;
}

/* 1. export -> load round trip. */
static void test_roundtrip(const char *arch, uint32_t wtype, int rslora) {
    tm_spec ts = tm_default(arch, wtype);
    const char *mp = P_("rt_model.gguf"), *dir = P_("rt_adapter"), *out = P_("rt_lora.gguf");
    unlink(out);
    if (!CHECK(tm_write(&ts, mp) == AF_OK, "%s: model: %s", arch, af_last_error())) return;
    af_model *m = NULL;
    if (!CHECK(af_model_load(NULL, mp, &m) == AF_OK, "load: %s", af_last_error())) return;
    af_param_layout lay;
    float *P = make_adapter(m, dir, 0, &lay, rslora);
    if (!CHECK(P != NULL, "%s: adapter: %s", arch, af_last_error())) {
        af_model_free(m);
        return;
    }
    CHECK(af_adapter_export_gguf(mp, dir, out, 0) == AF_OK, "%s: export: %s", arch, af_last_error());
    /* read back through the generic adapter loader */
    af_adapter_info info;
    af_param_layout lay2;
    float *Q = NULL;
    if (CHECK(af_adapter_read_info(out, &info) == AF_OK, "read_info: %s", af_last_error())) {
        CHECK(info.r == 4 && info.targets == (1u << AF_PROJ_COUNT) - 1 && info.qk_rows_gguf && !info.use_rslora &&
                  info.architecture && !strcmp(info.architecture, arch) && info.n_layers == ts.n_layer,
              "%s: info r %d targets %x arch %s layers %d", arch, info.r, info.targets,
              info.architecture ? info.architecture : "(null)", info.n_layers);
        if (CHECK(af_adapter_load_for_model(out, &info, m, 0.0f, 0, 0, &lay2, &Q) == AF_OK, "load: %s", af_last_error())) {
            CHECK(fabsf(lay2.scale - lay.scale) <= 1e-6f * lay.scale, "%s: scale %g vs %g", arch, (double)lay2.scale,
                  (double)lay.scale);
            CHECK(lay2.n_lora == lay.n_lora && memcmp(P, Q, sizeof(float) * (size_t)lay.n_lora) == 0,
                  "%s%s: parameters differ after export -> load", arch, rslora ? " rslora" : "");
            free(Q);
            af_param_layout_free(&lay2);
        }
        af_adapter_info_free(&info);
    }
    /* the file as llama.cpp reads it */
    af_gguf *g = NULL;
    if (CHECK(af_gguf_open(out, &g) == AF_OK, "open: %s", af_last_error())) {
        af_gguf_str s;
        float alpha = 0;
        CHECK(af_gguf_get_str(g, "general.type", &s) == AF_OK && af_gguf_str_eq(s, "adapter") &&
                  af_gguf_get_str(g, "adapter.type", &s) == AF_OK && af_gguf_str_eq(s, "lora") &&
                  af_gguf_get_str(g, "general.architecture", &s) == AF_OK && af_gguf_str_eq(s, arch),
              "%s: general.type / adapter.type / general.architecture", arch);
        CHECK(af_gguf_get_f32(g, "adapter.lora.alpha", &alpha) == AF_OK && fabsf(alpha / 4 - lay.scale) < 1e-6f,
              "%s: adapter.lora.alpha %g: alpha / r must be the scale %g", arch, (double)alpha, (double)lay.scale);
        CHECK(g->n_tensors == (uint64_t)ts.n_layer * AF_PROJ_COUNT * 2, "%s: %llu tensors", arch,
              (unsigned long long)g->n_tensors);
        const af_lora_slot *sq = af_lora_slot_at(&lay, 1, AF_PROJ_Q);
        const af_gguf_tensor *ta = af_gguf_find_tensor(g, "blk.1.attn_q.weight.lora_a"),
                             *tb = af_gguf_find_tensor(g, "blk.1.attn_q.weight.lora_b");
        CHECK(ta && tb && ta->type == AF_TYPE_F32 && ta->ne[0] == sq->in && ta->ne[1] == 4 && tb->ne[0] == 4 &&
                  tb->ne[1] == sq->out,
              "%s: lora_a / lora_b shapes", arch);
        /* lora_b holds P's rows (GGUF order), not the directory's HF order */
        CHECK(tb && memcmp(tb->data, P + sq->b_off, sizeof(float) * (size_t)(4 * sq->out)) == 0,
              "%s: lora_b of attn_q is not in the GGUF row order", arch);
        af_gguf_close(g);
    }
    /* identical logits from the directory and from the LoRA GGUF */
    float *a = logits_of(mp, dir, 5), *b = logits_of(mp, out, 5), *base = logits_of(mp, NULL, 5);
    const size_t nl = (size_t)5 * (size_t)ts.vocab;
    if (CHECK(a && b && base, "logits")) {
        CHECK(memcmp(a, b, sizeof(float) * nl) == 0, "%s: logits with the LoRA GGUF differ from the directory's", arch);
        CHECK(max_abs_diff(a, base, nl, NULL) > 1e-3, "%s: the adapter changes nothing (test cannot fail)", arch);
    }
    free(a), free(b), free(base);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
}

/* The KVs of two files equal (same keys in the same order, same value bytes). */
static int same_kvs(const af_gguf *a, const af_gguf *b, const char *skip_prefix) {
    uint64_t j = 0;
    for (uint64_t i = 0; i < a->n_kv; i++, j++) {
        const af_gguf_kv *x = &a->kv[i];
        while (j < b->n_kv && skip_prefix && b->kv[j].key.len >= strlen(skip_prefix) &&
               !memcmp(b->kv[j].key.ptr, skip_prefix, strlen(skip_prefix)))
            j++;
        if (j >= b->n_kv) return 0;
        const af_gguf_kv *y = &b->kv[j];
        if (x->key.len != y->key.len || memcmp(x->key.ptr, y->key.ptr, x->key.len) || x->val.type != y->val.type)
            return 0;
        const af_gguf_value *u = &x->val, *v = &y->val;
        if (u->type == AF_GGUF_ARRAY) {
            if (u->arr_type != v->arr_type || u->arr_n != v->arr_n || u->arr_bytes != v->arr_bytes ||
                memcmp(u->arr_data, v->arr_data, u->arr_bytes))
                return 0;
        } else if (u->type == AF_GGUF_STRING) {
            if (u->v.str.len != v->v.str.len || memcmp(u->v.str.ptr, v->v.str.ptr, u->v.str.len)) return 0;
        } else if (memcmp(&u->v, &v->v, sizeof u->v) != 0) {
            return 0;
        }
    }
    return 1;
}

/* 2 + 3. merge: exact for F32, within re-quantization error for quantized types. */
static void test_merge(const char *arch, uint32_t wtype, const char *type, double rel_tol) {
    tm_spec ts = tm_default(arch, wtype);
    const char *mp = P_("mg_model.gguf"), *dir = P_("mg_adapter"), *out = P_("mg_out.gguf");
    unlink(out);
    if (!CHECK(tm_write(&ts, mp) == AF_OK, "model: %s", af_last_error())) return;
    af_model *m = NULL;
    if (!CHECK(af_model_load(NULL, mp, &m) == AF_OK, "load: %s", af_last_error())) return;
    af_param_layout lay;
    float *P = make_adapter(m, dir, 0, &lay, 0);
    af_model_free(m);
    if (!CHECK(P != NULL, "adapter: %s", af_last_error())) return;
    af_merge_opts mo = {type, 0};
    af_merge_stats ms;
    if (!CHECK(af_merge_adapter(mp, dir, out, &mo, &ms) == AF_OK, "%s %s merge %s: %s", arch, af_type_name(wtype), type,
               af_last_error()))
        goto done;
    CHECK(ms.merged == ts.n_layer * AF_PROJ_COUNT && ms.delta_rms > 0, "%s: stats merged %d delta %g", arch, ms.merged,
          ms.delta_rms);
    const int exact = !strcmp(type, "f32") || (!strcmp(type, "keep") && wtype == AF_TYPE_F32);
    CHECK(exact ? ms.requant_rms == 0 : ms.requant_rms > 0, "%s %s: requant rms %g", arch, type, ms.requant_rms);
    float *un = logits_of(mp, dir, 6), *mg = logits_of(out, NULL, 6), *base = logits_of(mp, NULL, 6);
    const size_t nl = (size_t)6 * (size_t)ts.vocab;
    if (CHECK(un && mg && base, "logits")) {
        double amax, effect = max_abs_diff(un, base, nl, NULL), d = max_abs_diff(mg, un, nl, &amax);
        tl_note("merge %s %s -> %s: max|merged - unmerged| %.3g, max|adapter effect| %.3g, requant rms %.3g "
               "(delta rms %.3g)", arch, af_type_name(wtype), type, d, effect, ms.requant_rms, ms.delta_rms);
        if (exact)
            CHECK(d <= rel_tol * (1 + amax), "%s %s: merged vs unmerged %g > %g", arch, type, d, rel_tol * (1 + amax));
        else
            CHECK(d <= rel_tol * effect, "%s %s %s: merged vs unmerged %g > %g x adapter effect %g", arch,
                  af_type_name(wtype), type, d, rel_tol, effect);
    }
    free(un), free(mg), free(base);
    /* byte copies */
    af_gguf *a = NULL, *b = NULL;
    if (CHECK(af_gguf_open(mp, &a) == AF_OK && af_gguf_open(out, &b) == AF_OK, "open: %s", af_last_error())) {
        CHECK(a->n_kv + 1 == b->n_kv && same_kvs(a, b, "afinar.") && af_gguf_find(b, "afinar.adapter_json"),
              "%s: metadata not copied byte for byte (+ afinar.adapter_json)", arch);
        CHECK(a->n_tensors == b->n_tensors, "tensor count");
        int bad = 0, adapted = 0;
        for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
            const af_gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
            const int ad = strstr(x->name, "attn_") && !strstr(x->name, "norm") ? 1
                           : strstr(x->name, "ffn_") && !strstr(x->name, "norm") ? 1
                                                                                  : 0;
            adapted += ad;
            if (strcmp(x->name, y->name) || x->n_dims != y->n_dims || memcmp(x->ne, y->ne, sizeof x->ne)) bad++;
            else if (!ad && (x->type != y->type || x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes))) bad++;
            else if (ad && !strcmp(type, "keep") && x->type != y->type) bad++;
        }
        CHECK(bad == 0 && adapted == ts.n_layer * AF_PROJ_COUNT, "%s: %d tensors differ (adapted %d)", arch, bad, adapted);
    }
    af_gguf_close(a);
    af_gguf_close(b);
done:
    free(P);
    af_param_layout_free(&lay);
}

/* 4. a merged classifier carries its head: the same probabilities as base + adapter. */
static void test_merge_classifier(void) {
    static const char *const extra[2] = {"ab", "<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec ts = tm_default("llama", AF_TYPE_F32);
    ts.vocab = 258;
    const char *mp = P_("cl_model.gguf"), *dir = P_("cl_adapter"), *out = P_("cl_merged.gguf"), *lg = P_("cl_lora.gguf");
    if (!CHECK(tm_write_bpe(&ts, mp, extra, 2, merges, 1) == AF_OK, "model: %s", af_last_error())) return;
    af_model *m = NULL;
    if (!CHECK(af_model_load(NULL, mp, &m) == AF_OK, "load: %s", af_last_error())) return;
    af_param_layout lay;
    float *P = make_adapter(m, dir, 3, &lay, 0);
    if (!CHECK(P != NULL, "adapter: %s", af_last_error())) {
        af_model_free(m);
        return;
    }
    af_merge_opts mo = {"f32", 0};
    CHECK(af_merge_adapter(mp, dir, out, &mo, NULL) == AF_OK, "merge classifier: %s", af_last_error());
    CHECK(af_adapter_export_gguf(mp, dir, lg, 0) == AF_OK, "export classifier: %s", af_last_error());
    const char *texts[4] = {"ab ab", "hello", "zz top", "a"};
    size_t lens[4] = {5, 5, 6, 1};
    af_corpus *c = NULL;
    af_dataset *ds = NULL;
    af_classifier *c0 = NULL, *c1 = NULL, *c2 = NULL;
    float p0[12], p1[12], p2[12];
    af_ctx_params cp;
    af_ctx_params_default(&cp);
    cp.n_threads = 1;
    af_ctx *ctx = NULL;
    if (CHECK(af_ctx_new(&cp, &ctx) == AF_OK && af_corpus_from_texts("t", texts, lens, 4, 1, 3, &c) == AF_OK &&
                  af_dataset_build(ctx, c, af_model_tokenizer(m), 16, &ds) == AF_OK,
              "data: %s", af_last_error()) &&
        CHECK(af_classifier_load(NULL, NULL, m, dir, &c0) == AF_OK, "classifier dir: %s", af_last_error()) &&
        CHECK(af_classifier_load(NULL, out, NULL, out, &c1) == AF_OK, "classifier merged: %s", af_last_error()) &&
        CHECK(af_classifier_load(NULL, NULL, m, lg, &c2) == AF_OK, "classifier lora gguf: %s", af_last_error())) {
        const char *const *names = af_classifier_label_names(c1);
        CHECK(af_classifier_num_classes(c1) == 3 && names && !strcmp(names[1], "tech"), "merged labels");
        CHECK(af_classifier_probs(c0, ds, 4, p0) == AF_OK && af_classifier_probs(c1, ds, 4, p1) == AF_OK &&
                  af_classifier_probs(c2, ds, 4, p2) == AF_OK,
              "probs: %s", af_last_error());
        double d = max_abs_diff(p1, p0, 12, NULL);
        CHECK(d <= 1e-5, "merged classifier probabilities differ by %g", d);
        CHECK(memcmp(p0, p2, sizeof p0) == 0, "classifier from the LoRA GGUF differs");
    }
    af_classifier_free(c0);
    af_classifier_free(c1);
    af_classifier_free(c2);
    af_dataset_free(ds);
    af_corpus_free(c);
    free(P);
    af_param_layout_free(&lay);
    af_model_free(m);
    af_ctx_free(ctx);
}

static int temporaries_left(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

/* 5. bad input. */
static void test_bad(void) {
    tm_spec ts = tm_default("llama", AF_TYPE_F32), gs = tm_default("gemma3", AF_TYPE_F32);
    const char *mp = P_("bd_model.gguf"), *gp = P_("bd_gemma.gguf"), *dir = P_("bd_adapter"), *out = P_("bd_out.gguf");
    if (!CHECK(tm_write(&ts, mp) == AF_OK && tm_write(&gs, gp) == AF_OK, "models: %s", af_last_error())) return;
    af_model *m = NULL;
    if (!CHECK(af_model_load(NULL, mp, &m) == AF_OK, "load")) return;
    af_param_layout lay;
    float *P = make_adapter(m, dir, 0, &lay, 0);
    af_model_free(m);
    if (!P) return;
    af_merge_opts mo = {"q9_9", 0};
    CHECK(af_merge_adapter(mp, dir, out, &mo, NULL) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "q9_9"),
          "unknown type: %s", af_last_error());
    CHECK(af_merge_adapter(gp, dir, out, NULL, NULL) != AF_OK, "adapter for llama merged into gemma3");
    CHECK(af_adapter_export_gguf(gp, dir, out, 0) != AF_OK, "adapter for llama exported for gemma3");
    CHECK(!exists(out) && temporaries_left() == 0, "a failed call wrote something");
    CHECK(af_adapter_export_gguf(mp, dir, out, 0) == AF_OK, "export: %s", af_last_error());
    struct stat s0, s1;
    stat(out, &s0);
    CHECK(af_adapter_export_gguf(mp, dir, out, 0) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "exists"),
          "existing output: %s", af_last_error());
    CHECK(af_merge_adapter(mp, dir, out, NULL, NULL) == AF_ERR_INVALID_ARG, "existing output (merge)");
    stat(out, &s1);
    CHECK(s0.st_ino == s1.st_ino && s0.st_mtime == s1.st_mtime, "the existing output was touched");
    CHECK(af_merge_adapter(gp, out, P_("bd_m.gguf"), NULL, NULL) == AF_ERR_INVALID_ARG &&
              strstr(af_last_error(), "architecture"),
          "LoRA GGUF for llama into gemma3: %s", af_last_error());
    CHECK(temporaries_left() == 0, "temporaries left");
    free(P);
    af_param_layout_free(&lay);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_export_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp")) return tl_finish("export");
    test_roundtrip("llama", AF_TYPE_Q8_0, 0);
    test_roundtrip("llama", AF_TYPE_F32, 1);
    test_roundtrip("gemma3", AF_TYPE_F32, 0);
    test_merge("llama", AF_TYPE_F32, "keep", 1e-4);
    test_merge("gemma3", AF_TYPE_F32, "keep", 1e-4);
    test_merge("llama", AF_TYPE_Q8_0, "keep", 0.25);
    test_merge("llama", AF_TYPE_Q8_0, "f32", 1e-4);
    test_merge("llama", AF_TYPE_Q4_K, "keep", 0.9);
    test_merge_classifier();
    test_bad();
    if (!tl_failed) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0) tl_note("could not remove %s", g_dir);
    }
    return tl_finish("export");
}
