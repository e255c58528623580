/*
 * test_adapter_io.c — PEFT adapter directories (src/lora/adapter_io.h):
 *   - save -> load round trip is bit-exact (F32) and PEFT's names/shapes are used;
 *   - adapters saved by PEFT itself (tests/fixtures/peft_adapter_small/{seq_cls,causal_lm}, made by
 *     tests/ref/check_peft_adapter.py make-fixture) load with the values listed in expected.json;
 *   - bad inputs give clear errors and leave P unchanged.
 *   - llama q/k row order: GGUF <-> HF row permutation by hand on small cases, in the saved file,
 *     round trip, version-1 files, gemma3 (no conversion), head counts that do not fit;
 *   - layers_to_transform written for a layer subset, read back, af_adapter_restrict_layout.
 * With AF_TEST_ADAPTER_OUT=DIR set, also writes DIR/tiny (dims of the script's TINY model),
 * DIR/tiny_layers (TINY, adapters on layer 1 only) and DIR/smollm2 (SmolLM2-135M dims) for
 * `check_peft_adapter.py check DIR/... [--gguf ...]`.
 */
#include "lora/adapter_io.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/peft_adapter_small"

static char g_dir[64];
static const char *const k_proj[AF_PROJ_COUNT] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"};

typedef struct dims {
    int32_t n_layers, hidden, q_out, kv_out, ffn;
} dims;
static const dims TINY = {2, 64, 64, 32, 96};     /* check_peft_adapter.py TINY */
static const dims SMOL = {30, 576, 576, 192, 1536}; /* SmolLM2-135M */

/* Hand-built layout in lora.h's order: per layer, per targeted projection A [r, in] then
 * B [out, r]; then head W [num_classes, hidden] and b [num_classes]. */
static void make_layout(af_param_layout *lay, dims d, uint32_t targets, int32_t r, float alpha, int rslora,
                        int32_t num_classes) {
    memset(lay, 0, sizeof *lay);
    lay->lora = (af_lora_config){.r = r, .alpha = alpha, .dropout = 0.1f, .use_rslora = rslora, .targets = targets};
    lay->scale = rslora ? alpha / sqrtf((float)r) : alpha / (float)r;
    lay->n_layers = d.n_layers;
    lay->hidden = d.hidden;
    lay->slots = calloc((size_t)d.n_layers * AF_PROJ_COUNT, sizeof *lay->slots);
    int64_t off = 0;
    for (int32_t l = 0; l < d.n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            af_lora_slot *s = &lay->slots[l * AF_PROJ_COUNT + p];
            int64_t in = p == AF_PROJ_O ? d.q_out : p == AF_PROJ_DOWN ? d.ffn : d.hidden;
            int64_t out = p == AF_PROJ_Q ? d.q_out : (p == AF_PROJ_K || p == AF_PROJ_V) ? d.kv_out
                        : (p == AF_PROJ_GATE || p == AF_PROJ_UP) ? d.ffn : d.hidden;
            *s = (af_lora_slot){-1, -1, in, out, -1};
            if (!(targets & (1u << p))) continue;
            s->a_off = off;
            off += r * in;
            s->b_off = off;
            off += out * r;
        }
    lay->n_lora = off;
    lay->num_classes = num_classes;
    lay->head_w_off = lay->head_b_off = -1;
    if (num_classes > 0) {
        lay->head_w_off = off;
        off += (int64_t)num_classes * d.hidden;
        lay->head_b_off = off;
        off += num_classes;
    }
    lay->n_total = off;
}

static float *rand_params(const af_param_layout *lay, uint64_t seed) {
    float *P = malloc((size_t)lay->n_total * sizeof *P);
    for (int64_t i = 0; i < lay->n_total; i++) P[i] = tl_rand_normal(&seed);
    return P;
}

static char *path2(const char *a, const char *b) {
    static char buf[4][512];
    static int k;
    char *s = buf[k++ % 4];
    snprintf(s, 512, "%s/%s", a, b);
    return s;
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

/* Make an afinar-written directory an unverified one (as a PEFT-made directory is): remove its
 * manifest.json and the "manifest" claim of its afinar.json, so hand edits reach the parsers. */
static void unverify(const char *dir) {
    unlink(path2(dir, "manifest.json"));
    size_t n;
    char *s = tl_read_file(path2(dir, AF_ADAPTER_AFINAR_FILE), &n);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    if (!j) return;
    cJSON_DeleteItemFromObjectCaseSensitive(j, "manifest");
    char *o = cJSON_Print(j);
    write_text(path2(dir, AF_ADAPTER_AFINAR_FILE), o);
    free(o);
    cJSON_Delete(j);
}

/* Replace the first `from` in DIR/adapter_config.json with `to` (the directory made unverified). */
static void edit_config(const char *dir, const char *from, const char *to) {
    unverify(dir);
    size_t n;
    char *s = tl_read_file(path2(dir, AF_ADAPTER_CONFIG_FILE), &n);
    char *at = s ? strstr(s, from) : NULL;
    CHECK(at != NULL, "test setup: '%s' in config", from);
    if (!at) {
        free(s);
        return;
    }
    size_t lf = strlen(from), lt = strlen(to);
    char *o = malloc(n + lt + 1);
    memcpy(o, s, (size_t)(at - s));
    memcpy(o + (at - s), to, lt);
    strcpy(o + (at - s) + lt, at + lf);
    write_text(path2(dir, AF_ADAPTER_CONFIG_FILE), o);
    free(o);
    free(s);
}

static void test_round_trip(void) {
    af_param_layout lay;
    make_layout(&lay, TINY, 0x7f, 2, 16.0f, 0, 3);
    float *P = rand_params(&lay, 7);
    const char *labels[] = {"neg", "neu", "pos"};
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddStringToObject(extra, "dataset", "unit-test");
    cJSON_AddNumberToObject(extra, "num_classes", 3);
    af_adapter_save_opts o = {.base_model_name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct",
                              .write_head_bias = 1, .architecture = "llama", .pooling = "last",
                              .max_seq_len = 256, .labels = labels, .n_labels = 3, .extra = extra};
    char dir[256], dir2[256];
    snprintf(dir, sizeof dir, "%s/rt/sub", g_dir);
    snprintf(dir2, sizeof dir2, "%s/rt_bf16", g_dir);
    CHECK(af_adapter_save(dir, &lay, P, &o) == AF_OK, "save: %s", af_last_error());

    af_st_file *f = NULL;
    CHECK(af_st_open(path2(dir, AF_ADAPTER_WEIGHTS_FILE), &f) == AF_OK, "weights open: %s", af_last_error());
    if (f) {
        CHECK(af_st_count(f) == 2 * 7 * 2 + 2, "tensor count %zu", af_st_count(f));
        const af_st_tensor *t = af_st_find(f, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
        CHECK(t && t->shape[0] == 2 && t->shape[1] == 96, "down_proj A [r, ffn]");
        t = af_st_find(f, "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight");
        CHECK(t && t->shape[0] == 32 && t->shape[1] == 2, "k_proj B [kv_out, r]");
        t = af_st_find(f, "base_model.model.score.weight");
        CHECK(t && t->shape[0] == 3 && t->shape[1] == 64, "score.weight [3, 64]");
        CHECK(af_st_find(f, "base_model.model.score.bias") != NULL, "score.bias written on request");
        CHECK(af_st_meta_get(f, "format") && strcmp(af_st_meta_get(f, "format"), "pt") == 0, "format=pt");
        af_st_close(f);
    }
    size_t n;
    char *cfg = tl_read_file(path2(dir, AF_ADAPTER_CONFIG_FILE), &n);
    cJSON *c = cfg ? cJSON_Parse(cfg) : NULL;
    CHECK(c && strcmp(cJSON_GetObjectItem(c, "task_type")->valuestring, "SEQ_CLS") == 0 &&
              cJSON_GetObjectItem(c, "lora_alpha")->valuedouble == 16 &&
              strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "modules_to_save"), 0)->valuestring, "score") == 0 &&
              cJSON_GetArraySize(cJSON_GetObjectItem(c, "target_modules")) == 7,
          "adapter_config.json fields");
    CHECK(cfg && strstr(cfg, "\"lora_dropout\":\t0.1,"), "dropout written as 0.1");
    cJSON_Delete(c);
    free(cfg);

    float *Q = calloc((size_t)lay.n_total, sizeof *Q);
    af_adapter_info info;
    CHECK(af_adapter_load(dir, &lay, Q, 0, &info) == AF_OK, "load: %s", af_last_error());
    CHECK(memcmp(P, Q, (size_t)lay.n_total * sizeof *P) == 0, "round trip bit-exact (%lld floats)",
          (long long)lay.n_total);
    CHECK(info.r == 2 && info.alpha == 16.0f && info.targets == 0x7f && info.n_layers == 2 &&
              info.num_classes == 3 && info.hidden == 64 && info.has_head_bias && !info.use_rslora,
          "info from directory");
    CHECK(info.task_type && strcmp(info.task_type, "SEQ_CLS") == 0 && info.base_model &&
              strstr(info.base_model, "SmolLM2"), "info strings");
    const cJSON *lab = cJSON_GetObjectItem(info.afinar, "labels");
    CHECK(cJSON_GetArraySize(lab) == 3 && strcmp(cJSON_GetArrayItem(lab, 2)->valuestring, "pos") == 0 &&
              strcmp(cJSON_GetObjectItem(info.afinar, "dataset")->valuestring, "unit-test") == 0 &&
              cJSON_GetObjectItem(info.afinar, "max_seq_len")->valueint == 256,
          "afinar.json labels / extras");
    af_adapter_info_free(&info);

    /* No bias in the file -> b = 0; BF16 storage -> values within bf16 rounding. */
    o.write_head_bias = 0;
    o.dtype = AF_ST_BF16;
    CHECK(af_adapter_save(dir2, &lay, P, &o) == AF_OK, "save bf16: %s", af_last_error());
    for (int64_t i = 0; i < lay.n_total; i++) Q[i] = 99.0f;
    CHECK(af_adapter_load(dir2, &lay, Q, 0, NULL) == AF_OK, "load bf16: %s", af_last_error());
    CHECK_CLOSE("bf16 round trip", Q, P, (size_t)lay.head_b_off, 0, 1.0 / 128);
    CHECK(Q[lay.head_b_off] == 0.0f && Q[lay.n_total - 1] == 0.0f, "missing bias loads as 0");
    cJSON_Delete(extra);
    free(Q);
    free(P);
    free(lay.slots);
}

/* Compare P against expected.json (PEFT-side values) for every tensor of a fixture. */
static void check_expected(const char *dir, const af_param_layout *lay, const float *P) {
    size_t n;
    char *s = tl_read_file(path2(dir, "expected.json"), &n);
    cJSON *exp = s ? cJSON_Parse(s) : NULL;
    free(s);
    CHECK(exp != NULL, "%s/expected.json readable", dir);
    int n_checked = 0;
    double worst = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, exp) {
        const char *name = e->string;
        const float *v = NULL;
        int64_t cnt = 0;
        if (strstr(name, "score.weight")) {
            v = P + lay->head_w_off;
            cnt = (int64_t)lay->num_classes * lay->hidden;
        } else {
            const char *lp = strstr(name, "layers.");
            int layer = lp ? atoi(lp + 7) : -1;
            for (int p = 0; p < AF_PROJ_COUNT && layer >= 0; p++)
                if (strstr(name, k_proj[p]) && (p != AF_PROJ_UP || !strstr(name, "gate"))) {
                    const af_lora_slot *sl = af_lora_slot_at(lay, layer, (af_proj)p);
                    int isA = strstr(name, "lora_A") != NULL;
                    v = P + (isA ? sl->a_off : sl->b_off);
                    cnt = lay->lora.r * (isA ? sl->in : sl->out);
                }
        }
        if (!CHECK(v != NULL, "expected tensor %s maps to the layout", name)) continue;
        const cJSON *first = cJSON_GetObjectItem(e, "first");
        int ok = 1;
        for (int i = 0; i < cJSON_GetArraySize(first); i++)
            ok &= v[i] == (float)cJSON_GetArrayItem(first, i)->valuedouble;
        ok &= v[cnt - 1] == (float)cJSON_GetObjectItem(e, "last")->valuedouble;
        double sum = 0;
        for (int64_t i = 0; i < cnt; i++) sum += v[i];
        double d = fabs(sum - cJSON_GetObjectItem(e, "sum")->valuedouble);
        if (d > worst) worst = d;
        CHECK(ok && d < 1e-9, "%s: values match PEFT's (sum diff %g)", name, d);
        n_checked++;
    }
    printf("  %s: %d tensors match PEFT's values (worst sum diff %.3g)\n", dir, n_checked, worst);
    cJSON_Delete(exp);
}

static void test_peft_fixtures(void) {
    struct stat sb;
    if (stat(FIX "/seq_cls/adapter_model.safetensors", &sb) != 0) {
        CHECK(0, "fixture " FIX " missing (run tests/ref/check_peft_adapter.py make-fixture)");
        return;
    }
    af_param_layout lay;
    make_layout(&lay, TINY, 0x7f, 2, 4.0f, 0, 3);
    float *P = calloc((size_t)lay.n_total, sizeof *P);
    af_adapter_info info;
    CHECK(af_adapter_load(FIX "/seq_cls", &lay, P, 0, &info) == AF_OK, "PEFT seq_cls: %s", af_last_error());
    CHECK(info.num_classes == 3 && !info.has_head_bias && info.targets == 0x7f && info.afinar == NULL &&
              fabsf(info.dropout - 0.1f) < 1e-7f, "seq_cls info");
    af_adapter_info_free(&info);
    check_expected(FIX "/seq_cls", &lay, P);
    /* Saving the same values gives a byte-identical weights file (same names, order, header
     * padding and data as the Python safetensors writer used by PEFT). */
    char re[256];
    snprintf(re, sizeof re, "%s/resaved", g_dir);
    CHECK(af_adapter_save(re, &lay, P, NULL) == AF_OK, "re-save: %s", af_last_error());
    size_t na = 0, nb = 0;
    char *a = tl_read_file(FIX "/seq_cls/" AF_ADAPTER_WEIGHTS_FILE, &na);
    char *b = tl_read_file(path2(re, AF_ADAPTER_WEIGHTS_FILE), &nb);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "re-saved file is byte-identical to PEFT's (%zu vs %zu bytes)",
          na, nb);
    free(a);
    free(b);
    free(P);
    free(lay.slots);

    /* CAUSAL_LM adapter: r=4, alpha=8, rsLoRA, q/k/v/o, no head. */
    CHECK(af_adapter_read_info(FIX "/causal_lm", &info) == AF_OK, "read_info: %s", af_last_error());
    CHECK(info.r == 4 && info.alpha == 8.0f && info.use_rslora && info.targets == 0xf && info.n_layers == 2 &&
              info.num_classes == 0 && strcmp(info.task_type, "CAUSAL_LM") == 0, "causal_lm info");
    af_adapter_info_free(&info);
    make_layout(&lay, TINY, 0xf, 4, 8.0f, 1, 0);
    P = calloc((size_t)lay.n_total, sizeof *P);
    CHECK(af_adapter_load(FIX "/causal_lm", &lay, P, 0, NULL) == AF_OK, "PEFT causal_lm: %s", af_last_error());
    check_expected(FIX "/causal_lm", &lay, P);
    free(P);
    free(lay.slots);

    /* ... into a classification layout: missing head unless allowed (head stays as it was). */
    make_layout(&lay, TINY, 0xf, 4, 8.0f, 1, 3);
    P = calloc((size_t)lay.n_total, sizeof *P);
    P[lay.head_w_off] = 0.5f;
    CHECK(af_adapter_load(FIX "/causal_lm", &lay, P, 0, NULL) == AF_ERR_NOT_FOUND &&
              strstr(af_last_error(), "score.weight"), "missing head reported: %s", af_last_error());
    CHECK(af_adapter_load(FIX "/causal_lm", &lay, P, &(af_adapter_load_opts){.flags = AF_ADAPTER_ALLOW_MISSING_HEAD}, NULL) == AF_OK &&
              P[lay.head_w_off] == 0.5f && P[0] != 0.0f, "ALLOW_MISSING_HEAD keeps the head");
    free(P);
    free(lay.slots);

    /* A SEQ_CLS adapter into a layout without head: unexpected unless IGNORE_HEAD. */
    make_layout(&lay, TINY, 0x7f, 2, 4.0f, 0, 0);
    P = calloc((size_t)lay.n_total, sizeof *P);
    CHECK(af_adapter_load(FIX "/seq_cls", &lay, P, 0, NULL) == AF_ERR_FORMAT &&
              strstr(af_last_error(), "1 unexpected tensor(s)") && strstr(af_last_error(), "score.weight"),
          "head unexpected: %s", af_last_error());
    CHECK(af_adapter_load(FIX "/seq_cls", &lay, P, &(af_adapter_load_opts){.flags = AF_ADAPTER_IGNORE_HEAD}, NULL) == AF_OK, "IGNORE_HEAD");
    free(P);
    free(lay.slots);
}

/* Expect loading `dir` into `lay` to fail with `want`, message containing `needle`, P unchanged. */
static void expect_load_fail(const char *what, const char *dir, const af_param_layout *lay, af_status want,
                             const char *needle) {
    float *P = malloc((size_t)lay->n_total * sizeof *P);
    for (int64_t i = 0; i < lay->n_total; i++) P[i] = 3.0f;
    af_status st = af_adapter_load(dir, lay, P, 0, NULL);
    CHECK(st == want, "%s: status %s (want %s): %s", what, af_status_name(st), af_status_name(want),
          af_last_error());
    CHECK(strstr(af_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, af_last_error(), needle);
    int same = 1;
    for (int64_t i = 0; i < lay->n_total; i++) same &= P[i] == 3.0f;
    CHECK(same, "%s: P unchanged on error", what);
    free(P);
}

static void test_bad_inputs(void) {
    af_param_layout lay, other;
    make_layout(&lay, TINY, 0x5, 2, 16.0f, 0, 3); /* q, v */
    float *P = rand_params(&lay, 3);
    char good[256], bad[256]; /* path2() is a small ring buffer: keep these stable */
    snprintf(good, sizeof good, "%s/good", g_dir);
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    CHECK(af_adapter_save(good, &lay, P, NULL) == AF_OK, "save: %s", af_last_error());
    char cmd[1024];

    expect_load_fail("missing dir", path2(g_dir, "nope"), &lay, AF_ERR_IO, "adapter_config.json: cannot open");
    make_layout(&other, TINY, 0x5, 4, 16.0f, 0, 3);
    expect_load_fail("wrong r", good, &other, AF_ERR_INVALID_ARG, "r = 2 but the layout has r = 4");
    free(other.slots);
    make_layout(&other, TINY, 0x5, 2, 8.0f, 0, 3);
    expect_load_fail("wrong alpha", good, &other, AF_ERR_INVALID_ARG, "lora_alpha = 16 but the layout has 8");
    free(other.slots);
    make_layout(&other, TINY, 0x5, 2, 16.0f, 1, 3);
    expect_load_fail("wrong rslora", good, &other, AF_ERR_INVALID_ARG, "use_rslora");
    free(other.slots);
    dims wide = TINY;
    wide.hidden = 80;
    make_layout(&other, wide, 0x5, 2, 16.0f, 0, 3);
    expect_load_fail("wrong shape", good, &other, AF_ERR_FORMAT, "shape [2, 64], expected [2, 80]");
    free(other.slots);
    make_layout(&other, TINY, 0x5, 2, 16.0f, 0, 4);
    expect_load_fail("wrong classes", good, &other, AF_ERR_FORMAT, "score.weight': shape [3, 64], expected [4, 64]");
    free(other.slots);
    make_layout(&other, TINY, 0x7, 2, 16.0f, 0, 3);
    expect_load_fail("missing tensors", good, &other, AF_ERR_NOT_FOUND,
                     "4 missing tensor(s): layers.0.self_attn.k_proj.lora_A.weight");
    free(other.slots);
    make_layout(&other, TINY, 0x1, 2, 16.0f, 0, 3);
    expect_load_fail("unexpected tensors", good, &other, AF_ERR_FORMAT,
                     "4 unexpected tensor(s) for this model/layout: base_model.model.model.layers.0.self_attn.v_proj");
    free(other.slots);
    dims one = TINY;
    one.n_layers = 1;
    make_layout(&other, one, 0x5, 2, 16.0f, 0, 3);
    expect_load_fail("extra layer", good, &other, AF_ERR_FORMAT, "layers.1.");
    free(other.slots);

    /* Config problems, each on a fresh copy. */
    static const struct {
        const char *what, *from, *to;
        af_status want;
        const char *needle;
    } cases[] = {
        {"malformed json", "\"r\":", "\"r\" ", AF_ERR_FORMAT, "adapter_config.json: malformed JSON at offset"},
        {"peft type", "\"LORA\"", "\"IA3\"", AF_ERR_UNSUPPORTED, "peft_type: \"IA3\""},
        {"dora", "\"use_dora\":\tfalse", "\"use_dora\": true", AF_ERR_INVALID_ARG, "use_dora = true but the layout has false"},
        {"pissa", "\"init_lora_weights\":\ttrue", "\"init_lora_weights\": \"pissa_niter_4\"", AF_ERR_UNSUPPORTED,
         "init_lora_weights \"pissa_niter_4\": the adapter is relative to the base weights PEFT rewrote"},
        {"r type", "\"r\":\t2", "\"r\": \"2\"", AF_ERR_FORMAT, "r: missing or not a positive integer"},
        {"rank pattern", "\"rank_pattern\":\t{", "\"rank_pattern\": {\"q_proj\": 4", AF_ERR_UNSUPPORTED,
         "rank_pattern"},
        {"bias", "\"bias\":\t\"none\"", "\"bias\": \"all\"", AF_ERR_UNSUPPORTED, "bias: only \"none\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
        CHECK(system(cmd) == 0, "copy");
        edit_config(bad, cases[i].from, cases[i].to);
        expect_load_fail(cases[i].what, bad, &lay, cases[i].want, cases[i].needle);
    }
    /* Weights problems. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    CHECK(system(cmd) == 0, "copy");
    CHECK(truncate(path2(bad, AF_ADAPTER_WEIGHTS_FILE), 100) == 0, "truncate");
    expect_load_fail("truncated weights (manifest)", bad, &lay, AF_ERR_FORMAT, "100 bytes, manifest.json says");
    unverify(bad);
    expect_load_fail("truncated weights", bad, &lay, AF_ERR_FORMAT, "adapter_model.safetensors");
    unlink(path2(bad, AF_ADAPTER_WEIGHTS_FILE));
    write_text(path2(bad, "adapter_model.bin"), "pickle");
    expect_load_fail("pickle only", bad, &lay, AF_ERR_UNSUPPORTED, "safe_serialization=True");
    write_text(path2(bad, AF_ADAPTER_AFINAR_FILE), "{oops");
    expect_load_fail("bad afinar.json", bad, &lay, AF_ERR_FORMAT, "afinar.json: malformed JSON");
    unlink(path2(bad, AF_ADAPTER_CONFIG_FILE));
    expect_load_fail("missing config", bad, &lay, AF_ERR_IO, "adapter_config.json: cannot open");

    /* Save refusals. */
    const char *labels[] = {"a", "b"};
    af_adapter_save_opts o = {.labels = labels, .n_labels = 2};
    CHECK(af_adapter_save(bad, &lay, P, &o) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "2 labels given"),
          "label count checked: %s", af_last_error());
    write_text(path2(g_dir, "plainfile"), "x");
    CHECK(af_adapter_save(path2(g_dir, "plainfile/x"), &lay, P, NULL) == AF_ERR_IO, "save into a file path: %s",
          af_last_error());
    free(P);
    free(lay.slots);
}


/* Hand-computed q/k row orders: GGUF row (h*hd + 2b + a) <-> HF row (h*hd + a*hd/2 + b). */
static void test_qk_rows_hand(void) {
    /* hd = 4, 2 heads, r = 1: HF row i holds GGUF row want[i]. */
    float B[8], tmp[16];
    static const float want4[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int i = 0; i < 8; i++) B[i] = (float)i;
    af_adapter_qk_rows(B, 2, 4, 1, 1, tmp);
    CHECK(memcmp(B, want4, sizeof B) == 0, "hd 4 GGUF->HF: got %g %g %g %g %g %g %g %g", B[0], B[1], B[2], B[3], B[4],
          B[5], B[6], B[7]);
    af_adapter_qk_rows(B, 2, 4, 1, 0, tmp);
    int ok = 1;
    for (int i = 0; i < 8; i++) ok &= B[i] == (float)i;
    CHECK(ok, "hd 4 HF->GGUF restores");
    /* hd = 6, 1 head, r = 2 (whole rows move): HF rows = GGUF rows 0, 2, 4, 1, 3, 5. */
    float C[12];
    static const int rows6[6] = {0, 2, 4, 1, 3, 5};
    for (int i = 0; i < 12; i++) C[i] = (float)(10 * (i / 2) + i % 2); /* row w: (10w, 10w + 1) */
    af_adapter_qk_rows(C, 1, 6, 2, 1, tmp);
    ok = 1;
    for (int i = 0; i < 6; i++) ok &= C[2 * i] == 10.0f * rows6[i] && C[2 * i + 1] == 10.0f * rows6[i] + 1;
    CHECK(ok, "hd 6, r 2 GGUF->HF: rows %g %g %g %g %g %g", C[0], C[2], C[4], C[6], C[8], C[10]);
    af_adapter_qk_rows(C, 1, 6, 2, 0, tmp);
    ok = 1;
    for (int i = 0; i < 12; i++) ok &= C[i] == (float)(10 * (i / 2) + i % 2);
    CHECK(ok, "hd 6 HF->GGUF restores");
    CHECK(af_adapter_qk_permuted("llama") && !af_adapter_qk_permuted("gemma3") && !af_adapter_qk_permuted(NULL),
          "only llama is permuted");
}

/* Read tensor `name` of DIR's weights as f32 [n]. */
static int read_tensor(const char *dir, const char *name, float *out, size_t n) {
    af_st_file *f = NULL;
    if (af_st_open(path2(dir, AF_ADAPTER_WEIGHTS_FILE), &f) != AF_OK) return 0;
    const af_st_tensor *t = af_st_find(f, name);
    int ok = t && af_st_read_f32(f, t, out, n) == AF_OK;
    af_st_close(f);
    return ok;
}

/* Save with the llama q/k conversion (TINY: 4 heads, 2 kv heads, head_dim 16): the file holds HF
 * order, loading with the same model converts back bit-exactly, loading without model info gives
 * the HF order, version-1 afinar.json files are taken as GGUF order, gemma3 is never converted. */
static void test_qk_save_load(void) {
    af_param_layout lay;
    make_layout(&lay, TINY, 0x7f, 2, 16.0f, 0, 3);
    float *P = rand_params(&lay, 21);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/qk", g_dir);
    af_adapter_save_opts o = {.architecture = "llama", .n_head = 4, .n_kv_head = 2, .head_dim = 16,
                              .write_head_bias = 1};
    CHECK(af_adapter_save(dir, &lay, P, &o) == AF_OK, "save llama: %s", af_last_error());
    float tmp[16 * 2];
    int32_t r = lay.lora.r;
    /* expected file contents: q/k B rows permuted, everything else as in P */
    float *E = malloc((size_t)lay.n_total * sizeof *E);
    memcpy(E, P, (size_t)lay.n_total * sizeof *E);
    for (int l = 0; l < 2; l++) {
        const af_lora_slot *q = af_lora_slot_at(&lay, l, AF_PROJ_Q), *k = af_lora_slot_at(&lay, l, AF_PROJ_K);
        af_adapter_qk_rows(E + q->b_off, 4, 16, r, 1, tmp);
        af_adapter_qk_rows(E + k->b_off, 2, 16, r, 1, tmp);
    }
    /* the file's q_proj B of layer 1, element by element against the formula */
    float fq[64 * 2];
    const af_lora_slot *q1 = af_lora_slot_at(&lay, 1, AF_PROJ_Q);
    int ok = read_tensor(dir, "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", fq, 64 * 2);
    for (int h = 0; ok && h < 4; h++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 8; b++)
                for (int j = 0; j < r; j++)
                    ok &= fq[(h * 16 + a * 8 + b) * r + j] == P[q1->b_off + (h * 16 + 2 * b + a) * r + j];
    CHECK(ok, "file q_proj B row HF(h*hd + a*hd/2 + b) = P row GGUF(h*hd + 2b + a)");
    float fv[32 * 2];
    const af_lora_slot *v1 = af_lora_slot_at(&lay, 1, AF_PROJ_V);
    CHECK(read_tensor(dir, "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight", fv, 32 * 2) &&
              memcmp(fv, P + v1->b_off, sizeof fv) == 0, "v_proj B unchanged");

    float *Q = calloc((size_t)lay.n_total, sizeof *Q);
    af_adapter_load_opts lo = {0, "llama", 4, 2, 16};
    CHECK(af_adapter_load(dir, &lay, Q, &lo, NULL) == AF_OK, "load llama: %s", af_last_error());
    CHECK(memcmp(P, Q, (size_t)lay.n_total * sizeof *P) == 0, "llama q/k round trip bit-exact");
    CHECK(af_adapter_load(dir, &lay, Q, NULL, NULL) == AF_OK, "load raw: %s", af_last_error());
    CHECK(memcmp(E, Q, (size_t)lay.n_total * sizeof *P) == 0, "without model info the HF order is loaded");
    CHECK(memcmp(P, Q, (size_t)lay.n_total * sizeof *P) != 0, "HF order differs from GGUF order");
    af_adapter_load_opts lg = {0, "gemma3", 4, 2, 16};
    CHECK(af_adapter_load(dir, &lay, Q, &lg, NULL) == AF_OK && memcmp(E, Q, (size_t)lay.n_total * sizeof *P) == 0,
          "gemma3: no conversion");
    size_t n;
    char *af = tl_read_file(path2(dir, AF_ADAPTER_AFINAR_FILE), &n);
    CHECK(af && strstr(af, "\"qk_row_order\":\t\"hf\"") && strstr(af, "\"version\":\t2"), "afinar.json v2, hf");
    free(af);

    /* A version-1 afinar.json (GGUF order in the file) is loaded without conversion. */
    af_adapter_info info;
    unverify(dir);
    write_text(path2(dir, AF_ADAPTER_AFINAR_FILE), "{\"format\": \"afinar-adapter\", \"version\": 1}");
    CHECK(af_adapter_load(dir, &lay, Q, &lo, &info) == AF_OK && info.qk_rows_gguf &&
              memcmp(E, Q, (size_t)lay.n_total * sizeof *P) == 0, "version 1: file order kept");
    af_adapter_info_free(&info);
    write_text(path2(dir, AF_ADAPTER_AFINAR_FILE), "{\"qk_row_order\": \"sideways\"}");
    expect_load_fail("bad qk_row_order", dir, &lay, AF_ERR_FORMAT, "qk_row_order");

    /* Head counts that do not fit the rows: refused before anything is written / changed. */
    char bad[256];
    snprintf(bad, sizeof bad, "%s/qk_bad", g_dir);
    o.n_head = 3;
    CHECK(af_adapter_save(bad, &lay, P, &o) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "q_proj: 64 rows"),
          "save with wrong n_head: %s", af_last_error());
    o.n_head = 4;
    o.head_dim = 0;
    CHECK(af_adapter_save(bad, &lay, P, &o) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "head_dim"),
          "save with head_dim 0: %s", af_last_error());
    remove(path2(dir, AF_ADAPTER_AFINAR_FILE));
    for (int64_t i = 0; i < lay.n_total; i++) Q[i] = 3.0f;
    af_adapter_load_opts lb = {0, "llama", 4, 1, 16};
    CHECK(af_adapter_load(dir, &lay, Q, &lb, NULL) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "k_proj") &&
              Q[0] == 3.0f && Q[lay.n_total - 1] == 3.0f, "load with wrong n_kv_head refused, P unchanged: %s",
          af_last_error());
    free(Q);
    free(E);
    free(P);
    free(lay.slots);
}

/* Adapters on a layer subset: layers_to_transform written, read back, and a full layout
 * restricted to it loads the file. */
static void test_layers_to_transform(void) {
    dims d3 = TINY;
    d3.n_layers = 3;
    af_param_layout lay, full;
    make_layout(&lay, d3, 0x5, 2, 16.0f, 0, 3);
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        af_lora_slot *s = &lay.slots[1 * AF_PROJ_COUNT + p];
        s->a_off = s->b_off = -1;
    }
    float *P = rand_params(&lay, 5);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/subset", g_dir);
    CHECK(af_adapter_save(dir, &lay, P, NULL) == AF_OK, "save subset: %s", af_last_error());
    size_t n;
    char *cfg = tl_read_file(path2(dir, AF_ADAPTER_CONFIG_FILE), &n);
    cJSON *c = cfg ? cJSON_Parse(cfg) : NULL;
    const cJSON *lt = cJSON_GetObjectItem(c, "layers_to_transform");
    CHECK(cJSON_GetArraySize(lt) == 2 && cJSON_GetArrayItem(lt, 0)->valueint == 0 &&
              cJSON_GetArrayItem(lt, 1)->valueint == 2, "layers_to_transform [0, 2]");
    cJSON_Delete(c);
    free(cfg);
    af_adapter_info info;
    CHECK(af_adapter_read_info(dir, &info) == AF_OK && info.n_layers_to_transform == 2 &&
              info.layers_to_transform[0] == 0 && info.layers_to_transform[1] == 2, "read back: %s", af_last_error());
    make_layout(&full, d3, 0x5, 2, 16.0f, 0, 3);
    float *Q = calloc((size_t)full.n_total, sizeof *Q);
    expect_load_fail("subset into a full layout", dir, &full, AF_ERR_NOT_FOUND, "layers.1.self_attn.q_proj");
    af_adapter_restrict_layout(&full, &info);
    CHECK(af_lora_slot_at(&full, 1, AF_PROJ_Q)->a_off < 0 && af_lora_slot_at(&full, 2, AF_PROJ_V)->a_off >= 0,
          "restricted layout");
    CHECK(af_adapter_load(dir, &full, Q, NULL, NULL) == AF_OK, "load subset: %s", af_last_error());
    /* the two layouts have different offsets: compare slot by slot */
    int ok = 1;
    for (int l = 0; l < 3; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *a = af_lora_slot_at(&lay, l, (af_proj)p), *b = af_lora_slot_at(&full, l, (af_proj)p);
            if (a->a_off < 0) continue;
            ok &= !memcmp(P + a->a_off, Q + b->a_off, sizeof(float) * (size_t)(2 * a->in)) &&
                  !memcmp(P + a->b_off, Q + b->b_off, sizeof(float) * (size_t)(2 * a->out));
        }
    CHECK(ok, "subset values loaded");
    af_adapter_info_free(&info);
    /* every layer: null; an integer is accepted too */
    snprintf(dir, sizeof dir, "%s/subset_int", g_dir);
    free(full.slots);
    make_layout(&full, d3, 0x5, 2, 16.0f, 0, 3);
    free(Q);
    free(P);
    free(lay.slots);
    P = rand_params(&full, 6);
    CHECK(af_adapter_save(dir, &full, P, NULL) == AF_OK, "save full");
    cfg = tl_read_file(path2(dir, AF_ADAPTER_CONFIG_FILE), &n);
    CHECK(cfg && strstr(cfg, "\"layers_to_transform\":\tnull"), "all layers: null");
    free(cfg);
    edit_config(dir, "\"layers_to_transform\":\tnull", "\"layers_to_transform\": 2");
    CHECK(af_adapter_read_info(dir, &info) == AF_OK && info.n_layers_to_transform == 1 &&
              info.layers_to_transform[0] == 2, "integer layers_to_transform");
    af_adapter_info_free(&info);
    edit_config(dir, "\"layers_to_transform\": 2", "\"layers_to_transform\": [1.5]");
    CHECK(af_adapter_read_info(dir, &info) == AF_ERR_FORMAT && strstr(af_last_error(), "layers_to_transform[0]"),
          "bad layers_to_transform: %s", af_last_error());
    free(P);
    free(full.slots);
}

static void write_for_python(const char *out) {
    af_param_layout lay;
    char d[512];
    make_layout(&lay, TINY, 0x7f, 2, 4.0f, 0, 3);
    float *P = rand_params(&lay, 11);
    snprintf(d, sizeof d, "%s/tiny", out);
    CHECK(af_adapter_save(d, &lay, P, NULL) == AF_OK, "write %s: %s", d, af_last_error());
    free(P);
    free(lay.slots);
    /* layer subset: only layer 1 of 2 (layers_to_transform [1]) */
    make_layout(&lay, TINY, 0x7f, 2, 4.0f, 0, 3);
    for (int p = 0; p < AF_PROJ_COUNT; p++) lay.slots[p].a_off = lay.slots[p].b_off = -1;
    P = rand_params(&lay, 13);
    snprintf(d, sizeof d, "%s/tiny_layers", out);
    CHECK(af_adapter_save(d, &lay, P, NULL) == AF_OK, "write %s: %s", d, af_last_error());
    free(P);
    free(lay.slots);
    make_layout(&lay, SMOL, 0x7f, 2, 4.0f, 0, 5);
    P = rand_params(&lay, 12);
    af_adapter_save_opts o = {.base_model_name_or_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                              .architecture = "llama", .pooling = "last", .n_head = 9, .n_kv_head = 3,
                              .head_dim = 64};
    snprintf(d, sizeof d, "%s/smollm2", out);
    CHECK(af_adapter_save(d, &lay, P, &o) == AF_OK, "write %s: %s", d, af_last_error());
    free(P);
    free(lay.slots);
    printf("  wrote %s/tiny, %s/tiny_layers and %s/smollm2\n", out, out, out);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/af_adapter_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("adapter_io");
    }
    test_round_trip();
    test_peft_fixtures();
    test_bad_inputs();
    test_qk_rows_hand();
    test_qk_save_load();
    test_layers_to_transform();
    if (getenv("AF_TEST_ADAPTER_OUT")) write_for_python(getenv("AF_TEST_ADAPTER_OUT"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", g_dir);
    return tl_finish("adapter_io");
}
