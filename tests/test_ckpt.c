/*
 * test_ckpt.c — a checkpoint is never trusted blindly (a reliability class: damaged or foreign checkpoints), through the CLI
 * ($AFINAR_BIN, set by `make test`; skipped without it) on the tiny llama of tests/cli_harness.c:
 *   - manifest.json units: SHA-256 of FIPS 180-2's examples, parse refusals, write/verify, the
 *     temporaries a signal handler removes (af_remove_temporaries);
 *   - the corrupted-checkpoint matrix: a run with a checkpoint after every step, copies of it with
 *     checkpoint-3 damaged one way each (a flipped byte in each of its six files, a truncated or
 *     missing manifest, a listed file missing, NaN parameters, Inf in AdamW's m, a negative v,
 *     wrong shapes, a wrong world size, inconsistent counters, a directory renamed to another step,
 *     an adapter that disagrees with the state). `train --resume` must exit 1 with one message
 *     naming the file and field and the checkpoint to resume from instead (checkpoint-2), and
 *     write nothing: the run directory byte-identical afterwards, no final/ or best/. An old
 *     checkpoint (no manifest, no claim) resumes with a warning, bit-identical to the
 *     uninterrupted run;
 *   - every command that loads an adapter refuses one whose files no longer match its manifest
 *     (predict, eval, eval --generate, generate -a, export, merge, merge-adapters, train --resume)
 *     or that lost its manifest;
 *   - a moved run resumes: train 2 steps with paths relative to the working directory, move the
 *     whole project (and resume from another working directory), or the run directory alone;
 *     the result is bit-identical to an unmoved resume, written into the moved directory;
 *   - the gnuplot of --plot cannot end or hang the run: fake gnuplots on PATH that exit at once
 *     without reading, kill themselves, hang (AFINAR_PLOT_TIMEOUT 1 s), or write no image.
 * TL_KEEP=1 keeps the directory; CLI_DUMP=1 prints every case.
 */
#include "cli_harness.c"

#include "core/fsutil.h"
#include "formats/manifest.h"
#include "formats/safetensors.h"
#include "train/trainer_internal.h"

/* ---------------------------------------------------------------- units */

static void hex32(const uint8_t *d, char *out) {
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_units(void) {
    /* FIPS 180-2 appendix B.1 and the empty message */
    write_text(P_("abc.txt"), "abc");
    write_text(P_("empty.txt"), "");
    uint8_t d[32];
    uint64_t n = 0;
    char h[65];
    CHECK(af_sha256_file(P_("abc.txt"), d, &n) == AF_OK && n == 3, "sha256 abc: %s", af_last_error());
    hex32(d, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "SHA-256(abc) = %s", h);
    CHECK(af_sha256_file(P_("empty.txt"), d, &n) == AF_OK && n == 0, "sha256 empty");
    hex32(d, h);
    CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "SHA-256('') = %s", h);
    if (CHECK(mkfifo(P_("fifo"), 0600) == 0, "mkfifo"))
        CHECK(af_sha256_file(P_("fifo"), d, &n) == AF_ERR_IO && strstr(af_last_error(), "not a regular file"),
              "a FIFO is refused without blocking: %s", af_last_error());

    /* parse refusals, each naming the field */
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {", "invalid JSON at byte"},
        {"[1]", "expected a JSON object"},
        {"{\"format\": \"x\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {}}", "format: expected"},
        {"{\"format\": \"afinar-manifest\", \"version\": 2, \"algorithm\": \"sha256\", \"files\": {\"a\": {}}}", "version"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"md5\", \"files\": {\"a\": {}}}", "algorithm"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {}}", "non-empty"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"../x\": "
         "{\"bytes\": 1, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "not a plain file name"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\".h\": "
         "{\"bytes\": 1, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "not a plain file name"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": "
         "{\"bytes\": -1, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "files.a.bytes"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": "
         "{\"bytes\": 1.5, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "files.a.bytes"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": "
         "{\"bytes\": 1, \"sha256\": \"zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "files.a.sha256"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": "
         "{\"bytes\": 1, \"sha256\": \"ba78\"}}}", "files.a.sha256"},
        {"{\"format\": \"afinar-manifest\", \"version\": 1, \"algorithm\": \"sha256\", \"files\": {\"a\": "
         "{\"bytes\": 1, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}, \"a\": "
         "{\"bytes\": 1, \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}}}",
         "listed twice"},
    };
    af_manifest *m = malloc(sizeof *m);
    for (size_t i = 0; m && i < sizeof bad / sizeof *bad; i++) {
        af_status st = af_manifest_parse(bad[i].text, strlen(bad[i].text), "m.json", m);
        CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), bad[i].needle) && m->n == 0,
              "manifest case %zu: %s (want '%s')", i, af_last_error(), bad[i].needle);
    }
    /* write + verify; then each kind of mismatch */
    mkdir(P_("md"), 0777);
    write_text(P_("md/a.bin"), "hello");
    write_text(P_("md/b.json"), "{}");
    static const char *const names[] = {"a.bin", "b.json"};
    int present = 0;
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_OK && !present, "no manifest: present 0");
    CHECK(af_manifest_write(P_("md"), names, 2) == AF_OK, "write: %s", af_last_error());
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_OK && present, "verify: %s", af_last_error());
    write_text(P_("md/c.txt"), "not ours");
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_OK, "an unlisted, unnamed file is ignored");
    static const char *const more[] = {"a.bin", "b.json", "c.txt"};
    CHECK(af_manifest_verify(P_("md"), more, 3, &present) == AF_ERR_FORMAT && strstr(af_last_error(), "c.txt: not listed"),
          "a named file not listed: %s", af_last_error());
    write_text(P_("md/a.bin"), "hellO");
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_ERR_FORMAT &&
              strstr(af_last_error(), "a.bin: SHA-256 differs from manifest.json"),
          "a changed byte: %s", af_last_error());
    write_text(P_("md/a.bin"), "hell");
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_ERR_FORMAT &&
              strstr(af_last_error(), "a.bin: 4 bytes, manifest.json says 5"),
          "a truncated file: %s", af_last_error());
    unlink(P_("md/a.bin"));
    CHECK(af_manifest_verify(P_("md"), names, 2, &present) == AF_ERR_IO &&
              strstr(af_last_error(), "a.bin: missing, but listed in manifest.json"),
          "a missing file: %s", af_last_error());
    free(m);

    /* the temporaries a SIGINT / SIGTERM handler removes */
    af_atomic_file *f = NULL;
    CHECK(af_atomic_open(P_("md/out.bin"), &f) == AF_OK && af_atomic_write(f, "x", 1) == AF_OK, "atomic open");
    CHECK(count_named(P_("md"), ".tmp-") == 1, "a temporary exists");
    mkdir(P_("md/.tmpdir"), 0777);
    write_text(P_("md/.tmpdir/adapter_model.safetensors"), "x");
    static const char *const tn[] = {"adapter_model.safetensors", "manifest.json"};
    int slot = af_temp_dir_register(P_("md/.tmpdir"), tn, 2);
    af_remove_temporaries();
    CHECK(slot >= 0 && count_named(P_("md"), ".tmp") == 0, "af_remove_temporaries removed the temporary file and dir");
    af_temp_dir_unregister(slot);
    af_atomic_abort(f); /* its temporary is already gone: no error */
    CHECK(!exists(P_("md/out.bin")), "the target was never written");
}

/* ---------------------------------------------------------------- the corrupted-checkpoint matrix */

/* Listing of a tree: "path size fnv" lines (sorted by readdir order per directory, stable here). */
static void tree_sig(const char *dir, const char *rel, char **buf, size_t *len) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = strdup(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++) /* sort: readdir order may differ between two listings */
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (int i = 0; i < n; i++) {
        char p[1300], r[1300], line[1500];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        snprintf(r, sizeof r, "%s/%s", rel, names[i]);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            snprintf(line, sizeof line, "%s/\n", r);
            tree_sig(p, r, buf, len);
        } else {
            size_t fl = 0;
            char *c = tl_read_file(p, &fl);
            uint64_t hsh = 0xcbf29ce484222325ull;
            for (size_t k = 0; c && k < fl; k++) hsh = (hsh ^ (unsigned char)c[k]) * 0x100000001b3ull;
            free(c);
            snprintf(line, sizeof line, "%s %zu %016llx\n", r, fl, (unsigned long long)hsh);
        }
        size_t ll = strlen(line);
        *buf = realloc(*buf, *len + ll + 1);
        memcpy(*buf + *len, line, ll + 1);
        *len += ll;
        free(names[i]);
    }
}

static char *tree_listing(const char *dir) {
    char *b = calloc(1, 1);
    size_t l = 0;
    tree_sig(dir, "", &b, &l);
    return b;
}

enum { MUT_NAN_P, MUT_INF_M, MUT_NEG_V, MUT_SHAPE, MUT_WORLD, MUT_ADAM_T, MUT_PARAM_DIFF, MUT_NO_CLAIM };

/* Rewrite DIR/trainer_state.safetensors with one change, then (unless MUT_NO_CLAIM) its manifest as a
 * writer that made the change would: only the value checks can tell. */
static int mutate_state(const char *dir, int mut) {
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, AF_CKPT_STATE_FILE);
    af_st_file *f = NULL;
    if (af_st_open(path, &f) != AF_OK) return 0;
    const size_t nt = af_st_count(f), nm = af_st_meta_count(f);
    af_st_write_tensor *t = calloc(nt, sizeof *t);
    void **copies = calloc(nt, sizeof *copies);
    const char **mk = calloc(nm + 1, sizeof *mk), **mv = calloc(nm + 1, sizeof *mv);
    size_t nmo = 0;
    for (size_t i = 0; i < nm; i++) {
        const char *k, *v;
        af_st_meta_at(f, i, &k, &v);
        if (mut == MUT_NO_CLAIM && !strcmp(k, "manifest")) continue;
        mk[nmo] = k;
        mv[nmo++] = mut == MUT_WORLD && !strcmp(k, "world_size") ? "0" : v;
    }
    for (size_t i = 0; i < nt; i++) {
        const af_st_tensor *s = af_st_tensor_at(f, i);
        const size_t bytes = (size_t)(s->end - s->begin);
        copies[i] = malloc(bytes ? bytes : 1);
        memcpy(copies[i], s->data, bytes);
        t[i].name = s->name;
        t[i].dtype = s->dtype;
        t[i].n_dims = s->n_dims;
        for (int k = 0; k < s->n_dims; k++) t[i].shape[k] = s->shape[k];
        t[i].raw = copies[i];
        float *x = copies[i];
        if (mut == MUT_NAN_P && !strcmp(s->name, "params")) x[s->n_elem / 2] = NAN;
        if (mut == MUT_PARAM_DIFF && !strcmp(s->name, "params")) x[0] = x[0] * 1.5f + 0.25f;
        if (mut == MUT_INF_M && !strcmp(s->name, "adam_m")) x[3] = INFINITY;
        if (mut == MUT_NEG_V && !strcmp(s->name, "adam_v")) x[7] = -1e-8f;
        if (mut == MUT_SHAPE && s->n_dims == 1 && s->shape[0] > 100) t[i].shape[0] = s->shape[0] - 1;
        if (mut == MUT_ADAM_T && !strcmp(s->name, "counters")) ((int64_t *)copies[i])[1] = 9;
    }
    af_status st = af_st_write(path, t, nt, mk, mv, nmo);
    af_st_close(f);
    for (size_t i = 0; i < nt; i++) free(copies[i]);
    free(copies), free(t), free(mk), free(mv);
    if (st == AF_OK && mut != MUT_NO_CLAIM) st = af_manifest_write(dir, af_ckpt_files, AF_CKPT_N_FILES);
    if (st != AF_OK) fprintf(stderr, "mutate_state: %s\n", af_last_error());
    return st == AF_OK;
}

/* XOR one byte in the middle of a file. */
static int flip_byte(const char *path, long at_from_end) {
    size_t n = 0;
    char *b = tl_read_file(path, &n);
    if (!b || n < 4) {
        free(b);
        return 0;
    }
    size_t at = at_from_end > 0 ? n - (size_t)at_from_end : n / 2;
    b[at] ^= 0x01;
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    free(b);
    return ok;
}

#define TRAIN_ARGS "--batch 4 --grad-accum 1 --lora-r 2 --lora-layers all --max-seq-len 16 -t 1 --no-plot"

/* A copy of the good run whose newest checkpoint is checkpoint-3 (4, final/ and best/ removed). */
static int fresh_copy(const char *name) {
    rm_tree(P_(name));
    char p[700];
    int ok = copy_tree(P_("run"), P_(name));
    snprintf(p, sizeof p, "%s/checkpoint-4", P_(name));
    rm_tree(p);
    snprintf(p, sizeof p, "%s/final", P_(name));
    rm_tree(p);
    snprintf(p, sizeof p, "%s/best", P_(name));
    rm_tree(p);
    return ok;
}

/* Resume `name` (a fresh copy damaged by the caller): exit 1, the last stderr line matching `want`,
 * the directory unchanged, no final/ or best/. */
static void expect_refused(const char *name, const char *want) {
    char cmd[700], dir[700];
    snprintf(dir, sizeof dir, "%s", P_(name));
    char *before = tree_listing(dir);
    snprintf(cmd, sizeof cmd, "train --resume @/%s -t 1", name);
    EXPECT_MULTI(cmd, 1, want);
    char *after = tree_listing(dir);
    CHECK(!strcmp(before, after), "%s: the refused resume changed the run directory:\nbefore:\n%s\nafter:\n%s", name,
          before, after);
    free(before);
    free(after);
}

static void test_matrix(void) {
    /* the good run: a checkpoint after every step, all kept; and its resume from checkpoint-3 */
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl --val @/val.jsonl -o @/run --max-steps 4 --save-every 1 "
                 "--save-total-limit 0 " TRAIN_ARGS, 0, "done: 4 steps in *");
    if (!CHECK(exists(P_("run/checkpoint-3/manifest.json")) && exists(P_("run/final/manifest.json")),
               "checkpoints and final/ carry manifest.json"))
        return;
    CHECK(fresh_copy("ok"), "copy");
    EXPECT_MULTI("train --resume @/ok -t 1", 0, "done: 4 steps in *");
    size_t na = 0, nb = 0;
    char *a = tl_read_file(P_("run/final/adapter_model.safetensors"), &na);
    char *b = tl_read_file(P_("ok/final/adapter_model.safetensors"), &nb);
    CHECK(a && b && na == nb && !memcmp(a, b, na), "resume from checkpoint-3: final/ bit-identical to the run's");
    free(b);

    const char *adv = "; cannot resume from @/%s/checkpoint-3: resume from @/%s/checkpoint-2 instead (the newest earlier "
                      "checkpoint whose files verify), or start the run again (--overwrite)";
    char want[1600], tail[800], name[64];
    /* a flipped byte in each file of the checkpoint */
    for (int k = 0; k < AF_CKPT_N_FILES; k++) {
        snprintf(name, sizeof name, "flip%d", k);
        char p[900];
        snprintf(p, sizeof p, "%s/checkpoint-3/%s", P_(name), af_ckpt_files[k]);
        if (!CHECK(fresh_copy(name) && flip_byte(p, 0), "damage %s", af_ckpt_files[k])) continue;
        snprintf(tail, sizeof tail, adv, name, name);
        snprintf(want, sizeof want, "afinar train: @/%s/checkpoint-3/%s: SHA-256 differs from manifest.json (the file "
                                    "changed after it was written: corrupted or edited)%s", name, af_ckpt_files[k], tail);
        expect_refused(name, want);
        if (k == 0) { /* the library says which kind of failure it is: the caller needs no message text */
            af_train_settings *got = NULL;
            snprintf(p, sizeof p, "%s/checkpoint-3", P_(name));
            CHECK(af_train_settings_read_checkpoint(p, &got, NULL) != AF_OK && !got &&
                      af_last_error_kind() == AF_ERROR_KIND_CHECKPOINT,
                  "a damaged checkpoint fails with the kind AF_ERROR_KIND_CHECKPOINT (got %d: %s)",
                  (int)af_last_error_kind(), af_last_error());
        }
    }
    /* the manifest itself: a changed digit of a hash, truncated, missing */
    if (CHECK(fresh_copy("man_flip"), "copy")) {
        size_t n = 0;
        char *m = tl_read_file(P_("man_flip/checkpoint-3/manifest.json"), &n);
        char *at = m ? strstr(m, "\"sha256\":") : NULL;
        at = at ? strchr(at + 9, '"') : NULL;
        if (CHECK(at != NULL, "a hash in the manifest")) {
            at[1] = at[1] == '0' ? '1' : '0';
            write_text(P_("man_flip/checkpoint-3/manifest.json"), m);
        }
        free(m);
        snprintf(tail, sizeof tail, adv, "man_flip", "man_flip");
        snprintf(want, sizeof want, "afinar train: @/man_flip/checkpoint-3/*: SHA-256 differs from manifest.json*%s", tail);
        expect_refused("man_flip", want);
    }
    if (CHECK(fresh_copy("man_trunc"), "copy")) {
        CHECK(truncate(P_("man_trunc/checkpoint-3/manifest.json"), 120) == 0, "truncate");
        snprintf(tail, sizeof tail, adv, "man_trunc", "man_trunc");
        snprintf(want, sizeof want, "afinar train: @/man_trunc/checkpoint-3/manifest.json: invalid JSON at byte * of 120 "
                                    "(truncated or corrupted?)%s", tail);
        expect_refused("man_trunc", want);
    }
    if (CHECK(fresh_copy("man_gone"), "copy")) {
        unlink(P_("man_gone/checkpoint-3/manifest.json"));
        snprintf(tail, sizeof tail, adv, "man_gone", "man_gone");
        snprintf(want, sizeof want, "afinar train: @/man_gone/checkpoint-3/manifest.json is missing, but "
                                    "trainer_state.safetensors says the checkpoint was written with one (a file was "
                                    "lost: an incomplete copy?)%s", tail);
        expect_refused("man_gone", want);
    }
    if (CHECK(fresh_copy("file_gone"), "copy")) {
        unlink(P_("file_gone/checkpoint-3/adapter_config.json"));
        snprintf(tail, sizeof tail, adv, "file_gone", "file_gone");
        snprintf(want, sizeof want, "afinar train: @/file_gone/checkpoint-3/adapter_config.json: missing, but listed in "
                                    "manifest.json (an incomplete copy?)%s", tail);
        expect_refused("file_gone", want);
    }
    /* values a writer could have put there (the manifest rewritten to match) */
    static const struct {
        int mut;
        const char *name, *msg;
    } vals[] = {
        {MUT_NAN_P, "nan_p", "trainer_state.safetensors: params: model.layers.* element * is not finite (nan): the "
                             "state of a diverged or corrupted run"},
        {MUT_INF_M, "inf_m", "trainer_state.safetensors: adam_m: model.layers.0.self_attn.q_proj.lora_A element 3 is "
                             "not finite (inf): the state of a diverged or corrupted run"},
        {MUT_NEG_V, "neg_v", "trainer_state.safetensors: adam_v: model.layers.0.self_attn.q_proj.lora_A element 7 is "
                             "negative (-1e-08); AdamW's second moment is a running mean of squares, never below 0"},
        {MUT_SHAPE, "shape", "trainer_state.safetensors: tensor params: another shape, expected F32 [*] (the run's "
                             "trainable parameters)"},
        {MUT_WORLD, "world", "trainer_state.safetensors: __metadata__.world_size = '0' is not a process count (1 to "
                             "1048576)"},
        {MUT_ADAM_T, "adam_t", "trainer_state.safetensors: counters.adam_t = 9, outside [0, 3] (AdamW updates cannot "
                               "exceed the steps)"},
        {MUT_PARAM_DIFF, "pdiff", "adapter_model.safetensors and trainer_state.safetensors (params) disagree at "
                                  "model.layers.0.self_attn.q_proj.lora_A element 0: the two files are not of one "
                                  "checkpoint"},
    };
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/checkpoint-3", P_(vals[i].name));
        if (!CHECK(fresh_copy(vals[i].name) && mutate_state(p, vals[i].mut), "%s: make the state", vals[i].name)) continue;
        snprintf(tail, sizeof tail, adv, vals[i].name, vals[i].name);
        snprintf(want, sizeof want, "afinar train: @/%s/checkpoint-3%s%s%s", vals[i].name,
                 vals[i].mut == MUT_PARAM_DIFF ? ": " : "/", vals[i].msg, tail);
        expect_refused(vals[i].name, want);
        CHECK(!exists(P_("nan_p/final")) && !exists(P_("nan_p/best")), "NaN parameters never reach final/ or best/");
    }
    /* a checkpoint directory renamed to another step */
    if (CHECK(fresh_copy("renamed"), "copy") &&
        CHECK(rename(P_("renamed/checkpoint-3"), P_("renamed/checkpoint-5")) == 0, "rename")) {
        snprintf(want, sizeof want, "afinar train: @/renamed/checkpoint-5: the directory is named for step 5 but "
                                    "trainer_state.safetensors holds step 3 (renamed, or files of another checkpoint); "
                                    "cannot resume from @/renamed/checkpoint-5: resume from @/renamed/checkpoint-2 "
                                    "instead*");
        expect_refused("renamed", want);
    }
    /* no earlier checkpoint that verifies: say so */
    if (CHECK(fresh_copy("none_ok"), "copy")) {
        for (int s = 1; s <= 2; s++) {
            char p[900];
            snprintf(p, sizeof p, "%s/checkpoint-%d/trainer_state.safetensors", P_("none_ok"), s);
            flip_byte(p, 0);
        }
        flip_byte(P_("none_ok/checkpoint-3/trainer_state.safetensors"), 0);
        expect_refused("none_ok", "afinar train: @/none_ok/checkpoint-3/trainer_state.safetensors: SHA-256 differs *; "
                                  "cannot resume from @/none_ok/checkpoint-3, and no earlier checkpoint next to it "
                                  "verifies: start the run again (--overwrite)");
    }
    /* an old checkpoint whose settings are bad: a usage error (2), of no kind beyond its status */
    if (CHECK(fresh_copy("old_cfg") && mutate_state(P_("old_cfg/checkpoint-3"), MUT_NO_CLAIM), "old checkpoint")) {
        unverify(P_("old_cfg/checkpoint-3"));
        write_text(P_("old_cfg/checkpoint-3/train_config.json"), "{\"lora_r\": -3}");
        af_train_settings *got = NULL;
        CHECK(af_train_settings_read_checkpoint(P_("old_cfg/checkpoint-3"), &got, NULL) != AF_OK && !got &&
                  af_last_error_kind() == AF_ERROR_KIND_NONE,
              "bad settings in a checkpoint: no checkpoint kind (got %d: %s)", (int)af_last_error_kind(),
              af_last_error());
        EXPECT_MULTI("train --resume @/old_cfg -t 1", 2, "afinar train: @/old_cfg/checkpoint-3/train_config.json: *");
    }
    /* an old checkpoint (before manifests: none, and no claim): a warning, and the same result */
    if (CHECK(fresh_copy("old") && mutate_state(P_("old/checkpoint-3"), MUT_NO_CLAIM), "old checkpoint")) {
        unverify(P_("old/checkpoint-3"));
        char **av = split_args("train --resume @/old -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && strstr(r.err, "old/checkpoint-3 has no manifest.json (written by an afinar before checkpoints "
                                         "carried checksums): its files cannot be verified; its values are checked"),
              "old checkpoint resumes with a warning: rc %d, %s", r.rc, r.err);
        run_free(&r);
        b = tl_read_file(P_("old/final/adapter_model.safetensors"), &nb);
        CHECK(a && b && na == nb && !memcmp(a, b, na), "old checkpoint: final/ bit-identical to the run's");
        free(b);
    }
    free(a);
}

/* ---------------------------------------------------------------- adapters: every entry point */

static void test_adapter_entry_points(void) {
    CHECK(copy_tree(P_("run/final"), P_("ad_flip")) && copy_tree(P_("run/final"), P_("ad_gone")), "copy adapters");
    CHECK(flip_byte(P_("ad_flip/adapter_model.safetensors"), 0), "flip");
    unlink(P_("ad_gone/manifest.json"));
    write_text(P_("pc.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"ab\"}\n");
    static const char *const cmds[][2] = {
        {"predict", "predict -m @/tiny.gguf -a @/%s -t 1"},
        {"eval", "eval -m @/tiny.gguf -a @/%s --data @/val.jsonl -t 1"},
        {"eval", "eval -m @/tiny.gguf -a @/%s --data @/pc.jsonl --generate 1 -t 1"},
        {"generate", "generate -m @/tiny.gguf -a @/%s -p ab -n 2 -t 1"},
        {"export", "export -m @/tiny.gguf -a @/%s -o @/x.gguf"},
        {"merge", "merge -m @/tiny.gguf -a @/%s -o @/x.gguf"},
        {"merge-adapters", "merge-adapters @/run/final @/%s -o @/xm"},
    };
    char cmd[600], want[900];
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        snprintf(cmd, sizeof cmd, cmds[i][1], "ad_flip");
        snprintf(want, sizeof want, "afinar %s: @/ad_flip/adapter_model.safetensors: SHA-256 differs from manifest.json "
                                    "(the file changed after it was written: corrupted or edited)", cmds[i][0]);
        EXPECT(cmd, 1, want);
        snprintf(cmd, sizeof cmd, cmds[i][1], "ad_gone");
        snprintf(want, sizeof want, "afinar %s: @/ad_gone: manifest.json is missing, but afinar.json says the directory "
                                    "was written with one (a file was lost: an incomplete copy?); copy the directory "
                                    "again, or delete the \"manifest\" field of afinar.json to use it unverified",
                 cmds[i][0]);
        EXPECT(cmd, 1, want);
    }
    CHECK(!exists(P_("x.gguf")) && !exists(P_("xm")) && count_named(g_dir, ".tmp-") == 0, "nothing written");
    /* merge-adapters' output carries a manifest and loads */
    char **av = split_args("merge-adapters @/run/final @/run/final -o @/xm2");
    run_result r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && exists(P_("xm2/manifest.json")), "merge-adapters writes manifest.json: rc %d %s", r.rc, r.err);
    run_free(&r);
    av = split_args("predict -m @/tiny.gguf -a @/xm2 --input @/val.jsonl -t 1");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && strstr(r.out, "\"label\""), "the merged adapter loads: rc %d %s", r.rc, r.err);
    run_free(&r);
}

/* ---------------------------------------------------------------- a moved run */

static int same_file(const char *p, const char *q) {
    size_t na = 0, nb = 0;
    char *a = tl_read_file(p, &na), *b = tl_read_file(q, &nb);
    int same = a && b && na == nb && !memcmp(a, b, na);
    free(a);
    free(b);
    return same;
}

static void test_moved_run(void) {
    char cwd[4096];
    if (!CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd")) return;
    mkdir(P_("proj"), 0777);
    mkdir(P_("proj/data"), 0777);
    CHECK(copy_file(P_("tiny.gguf"), P_("proj/tiny.gguf"), -1) && copy_file(P_("train.jsonl"), P_("proj/data/train.jsonl"), -1),
          "project files");
    /* the run, started in proj/ with paths relative to it: 4 steps, a checkpoint every 2 */
    if (!CHECK(chdir(P_("proj")) == 0, "chdir proj")) return;
    EXPECT_MULTI("train -m tiny.gguf --train data/train.jsonl -o runs/r --max-steps 4 --save-every 2 "
                 "--save-total-limit 0 " TRAIN_ARGS, 0, "done: 4 steps in *");
    CHECK(chdir(cwd) == 0, "chdir back");
    const char *const copies[] = {"projU", "projM", "projA"};
    for (int i = 0; i < 3; i++) {
        char p[700];
        CHECK(copy_tree(P_("proj"), P_(copies[i])), "copy %s", copies[i]);
        for (int k = 0; k < 3; k++) {
            static const char *const drop[] = {"runs/r/checkpoint-4", "runs/r/final", "runs/r/best"};
            snprintf(p, sizeof p, "%s/%s", P_(copies[i]), drop[k]);
            rm_tree(p);
        }
    }
    /* unmoved: resume in place from proj's own working directory */
    if (CHECK(chdir(P_("projU")) == 0, "chdir projU")) {
        EXPECT_MULTI("train --resume runs/r/checkpoint-2 -t 1", 0, "done: 4 steps in *");
        CHECK(chdir(cwd) == 0, "chdir back");
    }
    /* the whole project moved (the old path gone), resumed from another working directory */
    CHECK(rename(P_("projM"), P_("projM2")) == 0, "move the project");
    if (CHECK(chdir(g_dir) == 0, "chdir")) {
        char **av = split_args("train --resume projM2/runs/r/checkpoint-2 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && strstr(r.err, "afinar train: note: --model: using ") &&
                  strstr(r.err, "projM2/tiny.gguf (found relative to the checkpoint; the run was started with 'tiny.gguf' = ") &&
                  strstr(r.err, "--train: using ") && strstr(r.err, "projM2/data/train.jsonl (found relative to the checkpoint"),
              "moved project: rc %d, notes: %s", r.rc, r.err);
        run_free(&r);
        CHECK(chdir(cwd) == 0, "chdir back");
    }
    CHECK(!exists(P_("projM")), "nothing written at the old path");
    /* the run directory moved alone (the data stay in proj/): the absolute paths */
    CHECK(rename(P_("projA/runs/r"), P_("moved_r")) == 0, "move the run");
    rm_tree(P_("projA"));
    {
        char **av = split_args("train --resume @/moved_r -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && strstr(r.err, "proj/tiny.gguf (found at its absolute path"), "run moved alone: rc %d, %s", r.rc,
              r.err);
        run_free(&r);
    }
    const char *ref = P_("proj/runs/r/final/adapter_model.safetensors");
    CHECK(same_file(ref, P_("projU/runs/r/final/adapter_model.safetensors")), "unmoved resume == uninterrupted run");
    CHECK(same_file(ref, P_("projM2/runs/r/final/adapter_model.safetensors")), "moved project: bit-identical result");
    CHECK(same_file(ref, P_("moved_r/final/adapter_model.safetensors")), "moved run directory: bit-identical result");
    CHECK(!exists(P_("projA")), "the moved run wrote into its own directory, not its old path");
}

/* ---------------------------------------------------------------- gnuplot */

static void test_plot(void) {
    mkdir(P_("fakebin"), 0777);
    static const struct {
        const char *script, *msg;
    } fakes[] = {
        {"#!/bin/sh\nexit 3\n", "plot: gnuplot failed (exit status 3), no curves.png"},
        {"#!/bin/sh\nkill -9 $$\n", "plot: gnuplot failed (exit status 137), no curves.png"},
        {"#!/bin/sh\nsleep 60\n", "plot: gnuplot did not finish in time (AFINAR_PLOT_TIMEOUT) and was stopped, no curves.png"},
        {"#!/bin/sh\ncat \"$1\" > /dev/null\nexit 0\n", "plot: gnuplot wrote no image, no curves.png"},
    };
    static char path_env[5000];
    snprintf(path_env, sizeof path_env, "PATH=%s:%s", P_("fakebin"), getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    g_env[0] = path_env;
    g_env[1] = "AFINAR_PLOT_TIMEOUT=1";
    for (size_t i = 0; i < sizeof fakes / sizeof *fakes; i++) {
        write_text(P_("fakebin/gnuplot"), fakes[i].script);
        chmod(P_("fakebin/gnuplot"), 0755);
        char cmd[600], out[64];
        snprintf(out, sizeof out, "plot%zu", i);
        snprintf(cmd, sizeof cmd, "train -m @/tiny.gguf --train @/train.jsonl -o @/%s --max-steps 2 --plot --batch 4 "
                                  "--grad-accum 1 --lora-r 2 --max-seq-len 16 -t 1", out);
        EXPECT_MULTI(cmd, 0, fakes[i].msg);
        char p[700];
        snprintf(p, sizeof p, "%s/final/manifest.json", P_(out));
        CHECK(exists(p) && count_named(P_(out), "curves") == 0, "gnuplot case %zu: the run is saved, no curves.png and no "
              "temporary", i);
    }
    g_env[0] = g_env[1] = NULL;
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || !realpath(bin, g_bin) || access(g_bin, X_OK) != 0) {
        tl_skip("checkpoint checks: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("ckpt");
    }
    g_dump = getenv("CLI_DUMP") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_ckpt_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno))) return tl_finish("ckpt");
    CHECK(write_model(P_("tiny.gguf"), 1) == AF_OK, "tiny model: %s", af_last_error());
    write_corpus(P_("train.jsonl"), 12);
    write_corpus(P_("val.jsonl"), 6);
    test_units();
    test_matrix();
    test_adapter_entry_points();
    test_moved_run();
    test_plot();
    if (!tl_failed && !getenv("TL_KEEP")) rm_tree(g_dir);
    else printf("test files kept in %s\n", g_dir);
    return tl_finish("ckpt");
}
