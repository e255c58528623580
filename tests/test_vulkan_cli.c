/*
 * test_vulkan_cli.c — the command-line tool on a Vulkan device against --device cpu,
 * through $AFINAR_BIN (set by `make test`; skipped without it) and skipped with a message where no
 * Vulkan device exists (CI: lavapipe):
 *   (a) head_dim beyond the attention shaders (AF_VK_ATTN_HD_MAX = 512): a tiny model with
 *       head_dim 520 is refused at load (AF_ERR_UNSUPPORTED, the layer, its head_dim and the limit
 *       named); `generate --device vulkan` exits 1 with that message, `--device auto` prints the CPU's
 *       text exactly and `train --device auto` trains on the CPU. A tiny model with head_dim 512
 *       generates the CPU's text on the device;
 *   (b) the memory guard on the device (AFINAR_FAULT mem=: the device's memory capped): weights that
 *       do not fit (generate exits 1 saying what they need and what the device has; auto: the CPU's
 *       text), a session that does not fit, a training run whose weights fit but whose activations do
 *       not (exit 1 saying what would fit: fewer tokens per micro-batch, --checkpointing, --device cpu;
 *       auto: trained on the CPU, bit for bit the CPU run's adapter);
 *   (c) SmolLM2-135M end to end (models/SmolLM2-135M-Instruct.Q4_1.gguf, data/bbc; skipped with a
 *       message without them, and under the sanitizers): `generate --temp 0` text == the CPU's while
 *       the CPU's top-2 logit gaps are clear (every gap > 0.05, 50x the logits' measured difference
 *       ~1e-4: test_vulkan_model; else the comparison is skipped, said), `train` 2 steps on 2 BBC
 *       articles (losses relative 1e-4 and final adapters 1e-3·max|p| of the CPU's, the tolerances of
 *       test_vulkan_model), `eval` (same accuracy, NLL within 1e-3) and `predict` (same label, probs
 *       within 1e-4) of the device-trained adapter on one BBC validation article on both devices. Sized for CI: 4 tokens per
 *       sample (every micro-batch takes lavapipe's matrix-vector path), 2 new tokens.
 * TL_KEEP=1 keeps the directory; CLI_DUMP=1 prints every command's stderr.
 */
#include "cli_harness.c"

#include "infer/session.h"
#include "kernels/backend.h"
#include "model/model.h"

#include <math.h>

static char g_fault[128];

/* Run `afinar CMDLINE` ("@" = the test directory; single spaces separate arguments) with
 * AFINAR_FAULT=fault (NULL: none). */
static run_result run(const char *fault, const char *cmdline) {
    g_env[0] = NULL;
    if (fault) {
        snprintf(g_fault, sizeof g_fault, "AFINAR_FAULT=%s", fault);
        g_env[0] = g_fault;
        g_env[1] = NULL;
    }
    char **av = split_args(cmdline);
    const double t0 = af_time_sec();
    run_result r = run_argv(NULL, 0, av);
    if (g_dump) fprintf(stderr, "---- %s%s (%.1f s, exit %d)\n%s", fault ? g_fault : "", cmdline,
                        af_time_sec() - t0, r.rc, r.err);
    free_args(av);
    g_env[0] = NULL;
    return r;
}

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* s on one line (newlines as \\n), at most 200 bytes, in one of 2 static buffers. */
static const char *one_line(const char *s) {
    static char buf[2][256];
    static int k;
    char *o = buf[k = !k];
    size_t n = 0;
    for (; s && *s && n + 3 < 200; s++) {
        if (*s == '\n') o[n++] = '\\', o[n++] = 'n';
        else o[n++] = *s;
    }
    o[n] = 0;
    return o;
}

/* The F32 payload of an afinar-written adapter_model.safetensors. */
static float *adapter_floats(const char *path, size_t *n) {
    size_t len = 0;
    char *b = tl_read_file(path, &len);
    uint64_t hl = 0;
    if (b && len >= 8) memcpy(&hl, b, 8);
    if (!b || len < 8 || hl > len - 8) {
        free(b);
        return NULL;
    }
    *n = (len - 8 - hl) / 4;
    float *f = malloc(sizeof(float) * (*n ? *n : 1));
    memcpy(f, b + 8 + hl, *n * 4);
    free(b);
    return f;
}

/* ---------------------------------------------------------------- (a) head_dim */

static af_status write_hd_model(const char *path, int head_dim) {
    static const char *const extra[2] = {"ab", "<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec s = tm_default("llama", AF_TYPE_F32);
    s.vocab = 256 + 2;
    s.n_head = 2;
    s.n_kv_head = 1;
    s.head_dim = head_dim;
    s.n_layer = 1;
    s.seed = 9;
    return tm_write_bpe(&s, path, extra, 2, merges, 1);
}

static void test_head_dim(void) {
    if (!CHECK(write_hd_model(P_("hd520.gguf"), 520) == AF_OK && write_hd_model(P_("hd512.gguf"), 512) == AF_OK,
               "head_dim models: %s", af_last_error()))
        return;
    /* the library: refused at load, naming the layer, its head_dim and the limit */
    af_model *m = NULL;
    if (CHECK(tl_ctx_set_device("vulkan") == AF_OK, "vulkan ctx: %s", af_last_error())) {
        af_status st = af_model_load(T_CTX, P_("hd520.gguf"), &m);
        const char *e = af_last_error();
        CHECK(st == AF_ERR_UNSUPPORTED && has(e, "layer 0 has head_dim 520") && has(e, "head_dim <= 512") &&
                  has(e, "vulkan:0"),
              "head_dim 520 on vulkan: %d %s", (int)st, e);
        printf("head_dim 520 on vulkan: %s\n", e);
        af_model_free(m);
    }
    tl_ctx_set_device("cpu");
    const char *gen = "generate -m @/%s -f @/p.txt -n 8 --temp 0 --ignore-eos -t 1 --device %s";
    char cmd[512];
    snprintf(cmd, sizeof cmd, gen, "hd520.gguf", "cpu");
    run_result ref = run(NULL, cmd);
    CHECK(ref.rc == 0 && strlen(ref.out) > 1, "cpu generate (head_dim 520): %d\n%s", ref.rc, ref.err);
    snprintf(cmd, sizeof cmd, gen, "hd520.gguf", "vulkan");
    run_result r = run(NULL, cmd);
    CHECK(r.rc == 1 && has(r.err, "head_dim 520") && has(r.err, "use --device cpu"),
          "generate head_dim 520 --device vulkan: exit %d\n%s", r.rc, r.err);
    run_free(&r);
    snprintf(cmd, sizeof cmd, gen, "hd520.gguf", "auto");
    r = run("auto=software", cmd); /* auto takes lavapipe only when told to (a software device) */
    CHECK(r.rc == 0 && !strcmp(r.out, ref.out) && has(r.err, "head_dim 520") &&
              has(r.err, "--device auto: going on on the CPU"),
          "generate head_dim 520 --device auto: exit %d, the CPU's text %d\n%s", r.rc, !strcmp(r.out, ref.out), r.err);
    run_free(&r);
    run_free(&ref);
    r = run("auto=software", "train -m @/hd520.gguf --train @/train.jsonl --recipe fixed --batch 4 --grad-accum 1 "
                             "--max-steps 2 --max-seq-len 16 --lora-r 2 -t 1 --no-plot -o @/hd_auto --device auto");
    CHECK(r.rc == 0 && has(r.err, "head_dim 520") && has(r.err, "training on the CPU") &&
              exists(P_("hd_auto/final/adapter_model.safetensors")),
          "train head_dim 520 --device auto: exit %d\n%s", r.rc, r.err);
    run_free(&r);
    /* head_dim 512, the largest the shaders take: the device's text */
    snprintf(cmd, sizeof cmd, gen, "hd512.gguf", "cpu");
    ref = run(NULL, cmd);
    snprintf(cmd, sizeof cmd, gen, "hd512.gguf", "vulkan");
    r = run(NULL, cmd);
    CHECK(ref.rc == 0 && r.rc == 0 && strlen(r.out) > 1 && !strcmp(r.out, ref.out),
          "generate head_dim 512: vulkan exit %d, cpu exit %d, same text %d\n%s", r.rc, ref.rc, !strcmp(r.out, ref.out),
          r.err);
    run_free(&r);
    run_free(&ref);
}

/* ---------------------------------------------------------------- (b) memory guard */

static void test_memory_guard(void) {
    const char *gen = "generate -m @/tiny.gguf -f @/p.txt -n 8 --temp 0 --ignore-eos -t 1 --device";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s cpu", gen);
    run_result ref = run(NULL, cmd);
    if (!CHECK(ref.rc == 0 && strlen(ref.out) > 1, "cpu generate: %d\n%s", ref.rc, ref.err)) {
        run_free(&ref);
        return;
    }
    static const struct {
        const char *fault, *msg;
    } f[] = {{"mem=16K", "the model's weights need"}, {"mem=300K", "a session of"}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        snprintf(cmd, sizeof cmd, "%s vulkan", gen);
        run_result r = run(f[i].fault, cmd);
        CHECK(r.rc == 1 && has(r.err, f[i].msg) && has(r.err, "vulkan:0") && has(r.err, "--device cpu"),
              "AFINAR_FAULT=%s generate --device vulkan: exit %d\n%s", f[i].fault, r.rc, r.err);
        if (i == 0) printf("weights that do not fit: %s", r.err);
        run_free(&r);
        snprintf(cmd, sizeof cmd, "%s auto", gen);
        char fa[64];
        snprintf(fa, sizeof fa, "%s,auto=software", f[i].fault);
        r = run(fa, cmd);
        CHECK(r.rc == 0 && !strcmp(r.out, ref.out) && has(r.err, f[i].msg) &&
                  has(r.err, "--device auto: going on on the CPU"),
              "AFINAR_FAULT=%s generate --device auto: exit %d, the CPU's text %d\n%s", f[i].fault, r.rc,
              !strcmp(r.out, ref.out), r.err);
        run_free(&r);
    }
    run_free(&ref);
    /* training: the weights fit, the activations of 4 x 16 tokens do not */
    const char *train = "train -m @/tiny.gguf --train @/train.jsonl --recipe fixed --batch 4 --grad-accum 1 "
                        "--max-steps 2 --max-seq-len 16 --lora-r 2 --lora-layers all -t 1 --no-plot --device";
    snprintf(cmd, sizeof cmd, "%s cpu -o @/mem_cpu", train);
    ref = run(NULL, cmd);
    CHECK(ref.rc == 0, "cpu run: %d\n%s", ref.rc, ref.err);
    run_free(&ref);
    snprintf(cmd, sizeof cmd, "%s vulkan -o @/mem_vk", train);
    run_result r = run("mem=400K", cmd);
    CHECK(r.rc == 1 && has(r.err, "training needs about") && has(r.err, "vulkan:0") && has(r.err, "What would fit") &&
              has(r.err, "--max-seq-len") && has(r.err, "--device cpu") && !exists(P_("mem_vk/final")),
          "AFINAR_FAULT=mem=400K train --device vulkan: exit %d\n%s", r.rc, r.err);
    printf("a run that does not fit: %s\n", last_line(r.err));
    run_free(&r);
    snprintf(cmd, sizeof cmd, "%s auto -o @/mem_auto", train);
    r = run("mem=400K,auto=software", cmd);
    size_t na = 0, nb = 0;
    float *a = adapter_floats(P_("mem_auto/final/adapter_model.safetensors"), &na),
          *b = adapter_floats(P_("mem_cpu/final/adapter_model.safetensors"), &nb);
    CHECK(r.rc == 0 && has(r.err, "training on the CPU") && a && b && na == nb && !memcmp(a, b, 4 * na),
          "AFINAR_FAULT=mem=400K train --device auto: exit %d, the CPU run's adapter %d\n%s", r.rc,
          a && b && na == nb && !memcmp(a, b, 4 * na), r.err);
    free(a), free(b);
    run_free(&r);
}

/* ---------------------------------------------------------------- (c) SmolLM2 end to end */

/* The CPU's greedy continuation of `prompt` for n tokens: the smallest top-2 logit gap. */
static double greedy_min_gap(const char *model, const char *prompt, int n) {
    tl_ctx_set_device("cpu");
    af_model *m = NULL;
    af_session *s = NULL;
    double gap = -1;
    int32_t *tok = NULL;
    size_t nt = 0;
    if (af_model_load(T_CTX, model, &m) != AF_OK ||
        af_tokenize(af_model_tokenizer(m), prompt, strlen(prompt), 1, 0, &tok, &nt) != AF_OK ||
        af_session_new(m, (int)nt + n + 1, &s) != AF_OK) {
        CHECK(0, "greedy gaps: %s", af_last_error());
        goto done;
    }
    const int64_t V = m->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)V);
    af_status st = af_session_eval(s, tok, (int)nt, lg, NULL);
    gap = INFINITY;
    for (int i = 0; st == AF_OK && i < n; i++) {
        int32_t best = 0;
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            if (lg[v] > b1) b2 = b1, b1 = lg[v], best = (int32_t)v;
            else if (lg[v] > b2) b2 = lg[v];
        gap = fmin(gap, (double)b1 - b2);
        st = af_session_eval(s, &best, 1, lg, NULL);
    }
    free(lg);
done:
    af_session_free(s);
    free(tok);
    af_model_free(m);
    return gap;
}

/* Losses of the "train" records of a metrics.jsonl, in order (at most cap). */
static int read_losses(const char *path, double *loss, int cap) {
    char *t = tl_read_file(path, NULL);
    int n = 0;
    for (char *p = t; p && n < cap && (p = strstr(p, "\"type\":\"train\"")); p++) {
        char *l = strstr(p, "\"loss\":");
        if (l) loss[n++] = strtod(l + 7, NULL);
    }
    free(t);
    return n;
}

/* The numbers after `key` in text, in order (at most cap). */
static int numbers_after(const char *text, const char *key, double *x, int cap) {
    int n = 0;
    for (const char *p = text; p && n < cap && (p = strstr(p, key)); p++) {
        const char *q = p + strlen(key);
        while (*q == ' ' || *q == '[' || *q == ':') q++;
        while (n < cap) {
            char *e;
            double v = strtod(q, &e);
            if (e == q) break;
            x[n++] = v;
            q = e;
            if (*q != ',') break;
            q++;
        }
    }
    return n;
}

static void copy_lines(const char *from, const char *to, int n) {
    char *t = tl_read_file(from, NULL);
    FILE *f = fopen(to, "w");
    if (t && f) {
        char *p = t;
        for (int i = 0; i < n && *p; i++) {
            char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p + 1) : strlen(p);
            fwrite(p, 1, len, f);
            p += len;
        }
    }
    if (f) fclose(f);
    free(t);
}

static void test_smollm2(void) {
    if (tl_sanitized()) { /* (a) and (b) run the same code paths on the tiny models */
        tl_skip("SmolLM2 through the CLI on Vulkan under the sanitizers (lavapipe is no faster under ASan)");
        return;
    }
    const char *model = tl_smollm2_path();
    if (!model) return;
    if (access("data/bbc/train.jsonl", R_OK) != 0 || access("data/bbc/labels.txt", R_OK) != 0) {
        tl_skip("data/bbc not found (scripts/setup.sh fetches it)");
        return;
    }
    char mpath[1024], cmd[1536];
    if (!realpath(model, mpath)) return;
    g_run_timeout = 900; /* a hang still ends; lavapipe under a loaded machine is slow, not hung */
    double t_all = af_time_sec(), t_vk = 0;
    /* generate */
    const char *prompt = "The capital of France is";
    write_text(P_("smol_p.txt"), prompt);
    const double gap = greedy_min_gap(mpath, prompt, 2);
    double t0 = 0;
    run_result rc_, rv;
    snprintf(cmd, sizeof cmd, "generate -m %s -f @/smol_p.txt -n 2 --temp 0 --ignore-eos --device cpu", mpath);
    rc_ = run(NULL, cmd);
    snprintf(cmd, sizeof cmd, "generate -m %s -f @/smol_p.txt -n 2 --temp 0 --ignore-eos --device vulkan", mpath);
    t0 = af_time_sec();
    rv = run(NULL, cmd);
    t_vk += af_time_sec() - t0;
    printf("SmolLM2 generate: cpu '%s', vulkan '%s' (smallest top-2 logit gap on the CPU %.3g; vulkan %.1f s)\n",
           one_line(rc_.out), one_line(rv.out), gap, af_time_sec() - t0);
    CHECK(rc_.rc == 0 && rv.rc == 0, "generate: cpu exit %d, vulkan exit %d\n%s", rc_.rc, rv.rc, rv.err);
    if (gap > 0.05) CHECK(!strcmp(rc_.out, rv.out), "SmolLM2 greedy text differs: vulkan '%s', cpu '%s'", rv.out, rc_.out);
    else tl_skip("SmolLM2 greedy text: a near tie on the CPU (gap %.3g): not compared", gap);
    run_free(&rc_), run_free(&rv);
    /* train 2 steps */
    copy_lines("data/bbc/train.jsonl", P_("bbc_train.jsonl"), 2);
    copy_lines("data/bbc/val.jsonl", P_("bbc_val.jsonl"), 1);
    const char *train = "train -m %s --train @/bbc_train.jsonl --labels data/bbc/labels.txt --recipe fixed --max-steps 2 "
                        "--batch 1 --grad-accum 1 --max-seq-len 4 --lora-layers top2 --lora-r 4 --lora-dropout 0 "
                        "--no-plot -o @/smol_%s --device %s";
    snprintf(cmd, sizeof cmd, train, mpath, "cpu", "cpu");
    rc_ = run(NULL, cmd);
    snprintf(cmd, sizeof cmd, train, mpath, "vk", "vulkan");
    t0 = af_time_sec();
    rv = run(NULL, cmd);
    t_vk += af_time_sec() - t0;
    const double t_train = af_time_sec() - t0;
    int trained = CHECK(rc_.rc == 0 && rv.rc == 0, "train: cpu exit %d, vulkan exit %d\n%s", rc_.rc, rv.rc, rv.err);
    run_free(&rc_), run_free(&rv);
    if (trained) {
        double lc[4], lv[4], lw = 0;
        const int nc = read_losses(P_("smol_cpu/metrics.jsonl"), lc, 4), nv = read_losses(P_("smol_vk/metrics.jsonl"), lv, 4);
        for (int i = 0; i < nc && i < nv; i++) lw = fmax(lw, fabs(lv[i] - lc[i]) / fabs(lc[i]));
        size_t na = 0, nb = 0;
        float *a = adapter_floats(P_("smol_vk/final/adapter_model.safetensors"), &na),
              *b = adapter_floats(P_("smol_cpu/final/adapter_model.safetensors"), &nb);
        double pd = -1, pm = 0;
        if (a && b && na == nb) {
            pd = tl_max_abs_diff(a, b, na, NULL);
            for (size_t i = 0; i < na; i++) pm = fmax(pm, fabs(b[i]));
        }
        printf("SmolLM2 train (2 steps of 1 x 4 tokens): losses cpu %.6f %.6f, vulkan %.6f %.6f, max rel. diff %.3g; "
               "final adapters max|diff| %.3g (max|p| %.3g; vulkan %.1f s)\n",
               nc > 0 ? lc[0] : NAN, nc > 1 ? lc[1] : NAN, nv > 0 ? lv[0] : NAN, nv > 1 ? lv[1] : NAN, lw, pd, pm, t_train);
        CHECK(nc == 2 && nv == 2 && lw <= 1e-4, "SmolLM2 train losses differ: %d/%d records, %.3g", nc, nv, lw);
        CHECK(pd >= 0 && pd <= 1e-3 * pm, "SmolLM2 final adapters differ: %.3g (max|p| %.3g)", pd, pm);
        free(a), free(b);
    }
    /* eval and predict of the device-trained adapter on both devices */
    if (trained) {
        const char *ev = "eval -m %s -a @/smol_vk/final --data @/bbc_val.jsonl --batch 1 --device %s";
        snprintf(cmd, sizeof cmd, ev, mpath, "cpu");
        rc_ = run(NULL, cmd);
        snprintf(cmd, sizeof cmd, ev, mpath, "vulkan");
        t0 = af_time_sec();
        rv = run(NULL, cmd);
        t_vk += af_time_sec() - t0;
        double ac[1] = {-1}, av[1] = {-2}, nllc[1] = {0}, nllv[1] = {1e9};
        numbers_after(rc_.out, "accuracy", ac, 1), numbers_after(rv.out, "accuracy", av, 1);
        numbers_after(rc_.out, "NLL", nllc, 1), numbers_after(rv.out, "NLL", nllv, 1);
        printf("SmolLM2 eval: accuracy cpu %.4f vulkan %.4f, NLL cpu %.4f vulkan %.4f\n", ac[0], av[0], nllc[0], nllv[0]);
        CHECK(rc_.rc == 0 && rv.rc == 0 && ac[0] == av[0] && fabs(nllc[0] - nllv[0]) <= 1e-3,
              "SmolLM2 eval: exit %d/%d\n%s\n%s", rc_.rc, rv.rc, rc_.out, rv.out);
        run_free(&rc_), run_free(&rv);
        const char *pr = "predict -m %s -a @/smol_vk/final --input @/bbc_val.jsonl --batch 1 --device %s";
        snprintf(cmd, sizeof cmd, pr, mpath, "cpu");
        rc_ = run(NULL, cmd);
        snprintf(cmd, sizeof cmd, pr, mpath, "vulkan");
        t0 = af_time_sec();
        rv = run(NULL, cmd);
        t_vk += af_time_sec() - t0;
        double pc[16], pv[16], d = 0;
        const int np = numbers_after(rc_.out, "\"probs\"", pc, 16), nq = numbers_after(rv.out, "\"probs\"", pv, 16);
        for (int i = 0; i < np && i < nq; i++) d = fmax(d, fabs(pc[i] - pv[i]));
        double lc[1] = {-1}, lv[1] = {-2};
        numbers_after(rc_.out, "\"label_id\"", lc, 1), numbers_after(rv.out, "\"label_id\"", lv, 1);
        printf("SmolLM2 predict: %d probabilities, max|diff| %.3g; label cpu %g, vulkan %g\n", np, d, lc[0], lv[0]);
        CHECK(rc_.rc == 0 && rv.rc == 0 && np == 5 && nq == 5 && d <= 1e-4 && lc[0] == lv[0],
              "SmolLM2 predict: exit %d/%d\n%s\n%s", rc_.rc, rv.rc, rc_.out, rv.out);
        run_free(&rc_), run_free(&rv);
    }
    printf("SmolLM2 end to end: %.1f s (the vulkan commands %.1f s)\n", af_time_sec() - t_all, t_vk);
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || !realpath(bin, g_bin) || access(g_bin, X_OK) != 0) {
        tl_skip("Vulkan CLI checks: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("test_vulkan_cli");
    }
    af_device_info inf[4];
    int32_t nd = 0, vk = -1;
    char why[300] = "";
    for (int32_t i = 0; i < af_backend_count(); i++)
        if (!strcmp(af_backend_name(i), "vulkan")) vk = i;
    if (vk < 0 || af_backend_devices(vk, inf, 4, &nd, why, sizeof why) != AF_OK || nd == 0) {
        tl_skip("no Vulkan device: %s", why[0] ? why : af_last_error());
        return tl_finish("test_vulkan_cli");
    }
    printf("device vulkan:0: %s (%s)\n", inf[0].name, inf[0].driver);
    g_dump = getenv("CLI_DUMP") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_vkcli_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno))) return tl_finish("test_vulkan_cli");
    CHECK(write_model(P_("tiny.gguf"), 1) == AF_OK, "tiny model: %s", af_last_error());
    write_text(P_("p.txt"), "ab xx goal");
    write_corpus(P_("train.jsonl"), 12);
    double t0 = af_time_sec();
    test_head_dim();
    printf("head_dim cases: %.1f s\n", af_time_sec() - t0);
    t0 = af_time_sec();
    test_memory_guard();
    printf("memory guard cases: %.1f s\n", af_time_sec() - t0);
    test_smollm2();
    if (!tl_failed && !getenv("TL_KEEP")) rm_tree(g_dir);
    else printf("test files kept in %s\n", g_dir);
    return tl_finish("test_vulkan_cli");
}
