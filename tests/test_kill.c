/*
 * test_kill.c — no lost work: `afinar train` killed with SIGKILL at random moments (seeded) and
 * resumed, again and again, on a tiny random llama model (tinymodel.c + a byte-level BPE
 * tokenizer, as in test_trainer.c) and a synthetic 3-class JSONL corpus.
 *
 * The run saves a checkpoint after every step (--save-every 1, --save-total-limit 2), so many kills
 * land inside a save (temporary directory being written, fsync, rename, rotation of the oldest
 * checkpoint, best/ being replaced). After each kill:
 *   - every visible checkpoint-N directory is complete (adapter + trainer state + config): a
 *     checkpoint directory appears only by an atomic rename (trainer_ckpt.c);
 *   - the newest one (af_trainer_find_checkpoint, what --resume picks) loads as a classifier
 *     (af_classifier_load) and its trainer state opens with the expected tensors;
 *   - `afinar train --resume OUT` continues from it (or, killed before the first checkpoint, a
 *     fresh start with --overwrite).
 * When a round's run finishes, its final/ and best/ adapters must be byte-identical to an
 * uninterrupted run with the same seed, every per-step train line of metrics.jsonl (loss printed
 * with %.17g, accuracy, lr, grad-norm) identical, and no temporary left in OUT. Rounds repeat until
 * at least K_KILLS kills happened (a round may end after few kills when the delays are long).
 * Kill delays are uniform in [0, 0.6 * T], T = the measured wall time of the uninterrupted run,
 * lowered to a fresh run's time whenever one finishes before its kill (a machine quieter than during
 * the reference); this only places the kills, nothing asserts on time.
 * Needs AFINAR_BIN (make test sets it); skipped otherwise. With AF_TEST_SANITIZE=1 fewer kills.
 */
#include "testlib.h"
#include "tinymodel.c"

#include "core/fsutil.h"
#include "formats/safetensors.h"
#include "train/trainer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[256];

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

/* Tiny llama (tinymodel.c) with a byte-level gpt2 tokenizer: 256 byte tokens + <|endoftext|>. */
static af_status write_model(const char *path) {
    static const char *const extra[1] = {"<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    s.vocab = 256 + 1;
    s.seed = 91;
    return tm_write_bpe(&s, path, extra, 1, merges, 1);
}

/* n samples of 3 classes: random filler words around the class keyword (twice). */
static void write_corpus(const char *path, int n, uint64_t seed) {
    static const char *const names[3] = {"sport", "tech", "food"}, *const keys[3] = {"goal", "chip", "soup"};
    FILE *f = fopen(path, "w");
    uint64_t r = seed;
    for (int i = 0; f && i < n; i++) {
        int c = (int)(tl_rand_u64(&r) % 3), nw = 2 + (int)(tl_rand_u64(&r) % 3);
        char text[256] = "";
        for (int w = 0; w < nw; w++) {
            char word[8];
            int len = 2 + (int)(tl_rand_u64(&r) % 3);
            for (int k = 0; k < len; k++) word[k] = (char)('d' + tl_rand_u64(&r) % 20);
            word[len] = 0;
            strcat(text, word);
            strcat(text, " ");
            if (w == 0) strcat(text, keys[c]), strcat(text, " "), strcat(text, keys[c]), strcat(text, " ");
        }
        fprintf(f, "{\"input\": \"%s\", \"label\": \"%s\"}\n", text, names[c]);
    }
    if (f) fclose(f);
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = tl_read_file(a, &la), *y = tl_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static char g_bin[1024];

/* Start `afinar train` on OUT (fresh with --overwrite, or --resume OUT); output to log. */
static pid_t start_train(const char *out, int resume, const char *log) {
    char *argv[64];
    int a = 0;
    argv[a++] = g_bin;
    argv[a++] = "train";
    if (resume) {
        argv[a++] = "--resume";
        argv[a++] = (char *)out;
    } else {
        static char m[512], tr[512], va[512];
        snprintf(m, sizeof m, "%s", P_("tiny.gguf"));
        snprintf(tr, sizeof tr, "%s", P_("train.jsonl"));
        snprintf(va, sizeof va, "%s", P_("val.jsonl"));
        const char *fixed[] = {"-m", m, "--train", tr, "--val", va, "-o", out, "--overwrite", "--seed", "7",
                               "--max-steps", "24", "--batch", "4", "--grad-accum", "2", "--lora-r", "4",
                               "--lora-alpha", "8", "--lora-dropout", "0.1", "--lr", "0.01", "--warmup", "2",
                               "--max-seq-len", "32", "--eval-every", "5", "--save-every", "1",
                               "--save-total-limit", "2", NULL};
        for (int i = 0; fixed[i]; i++) argv[a++] = (char *)fixed[i];
    }
    const char *common[] = {"--threads", "1", "--no-plot", "--log-every", "1", NULL};
    for (int i = 0; common[i]; i++) argv[a++] = (char *)common[i];
    argv[a] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(g_bin, argv);
        _exit(127);
    }
    return pid;
}

/* Wait up to `sec` seconds for pid; returns 1 and *status when it exited, 0 when still running. */
static int wait_for(pid_t pid, double sec, int *status) {
    const double end = mono() + sec;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 1;
        if (r < 0 && errno != EINTR) return 1;
        if (mono() >= end) return 0;
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
}

/* Every visible checkpoint-N holds its complete file set. Returns the number of incomplete ones. */
static int incomplete_checkpoints(const char *out, char *bad, size_t cap) {
    static const char *const files[] = {"adapter_model.safetensors", "adapter_config.json", "afinar.json",
                                        "trainer_state.safetensors", "train_config.json"};
    DIR *d = opendir(out);
    int n_bad = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "checkpoint-", 11) != 0) continue;
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s/%s", out, e->d_name, files[i]);
            if (!exists(p)) {
                if (!n_bad) snprintf(bad, cap, "%s/%s lacks %s", out, e->d_name, files[i]);
                n_bad++;
                break;
            }
        }
    }
    if (d) closedir(d);
    return n_bad;
}

static int count_tmp(const char *out) {
    DIR *d = opendir(out);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += e->d_name[0] == '.' && (strstr(e->d_name, ".tmp") || strstr(e->d_name, ".old-"));
    if (d) closedir(d);
    return n;
}

/* The newest complete checkpoint loads: adapter as a classifier, trainer state with its tensors.
 * Returns its step, 0 when there is none yet, -1 on a failure (reported). */
static int64_t check_latest(const af_model *m, const char *out) {
    char bad[1400] = "";
    if (!CHECK(incomplete_checkpoints(out, bad, sizeof bad) == 0, "incomplete checkpoint after a kill: %s", bad))
        return -1;
    char *ck = NULL;
    if (af_trainer_find_checkpoint(out, &ck) != AF_OK) {
        af_clear_error();
        return 0;
    }
    af_classifier *c = NULL;
    af_status st = af_classifier_load(NULL, NULL, m, ck, &c);
    int ok = CHECK(st == AF_OK && c->num_classes == 3, "latest checkpoint %s loads: %s", ck, af_last_error());
    af_classifier_free(c);
    char *sp = af_path_join(ck, "trainer_state.safetensors");
    af_st_file *f = NULL;
    st = sp ? af_st_open(sp, &f) : AF_ERR_NOMEM;
    ok &= CHECK(st == AF_OK && af_st_find(f, "params") && af_st_find(f, "adam_m") && af_st_find(f, "adam_v") &&
                    af_st_find(f, "counters"),
                "trainer state %s opens: %s", sp ? sp : "", af_last_error());
    af_st_close(f);
    free(sp);
    const char *base = strrchr(ck, '/');
    int64_t step = base ? strtoll(base + 1 + 11, NULL, 10) : -1;
    free(ck);
    return ok ? step : -1;
}

/* Train lines of two metrics.jsonl are identical up to ",\"samples_per_s\"" (step order kept);
 * eval lines identical. *n_cmp: train lines compared. */
static int same_metrics(const char *a, const char *b, int *n_cmp) {
    char *x = tl_read_file(a, NULL), *y = tl_read_file(b, NULL);
    int ok = x && y;
    *n_cmp = 0;
    char *sx = NULL, *sy = NULL;
    char *lx = ok ? strtok_r(x, "\n", &sx) : NULL, *ly = ok ? strtok_r(y, "\n", &sy) : NULL;
    for (; ok && (lx || ly); lx = strtok_r(NULL, "\n", &sx), ly = strtok_r(NULL, "\n", &sy)) {
        if (!lx || !ly) {
            printf("  metrics.jsonl line counts differ\n");
            ok = 0;
            break;
        }
        const char *ex = strstr(lx, ",\"samples_per_s\""), *ey = strstr(ly, ",\"samples_per_s\"");
        size_t nx = ex ? (size_t)(ex - lx) : strlen(lx), ny = ey ? (size_t)(ey - ly) : strlen(ly);
        if (nx != ny || memcmp(lx, ly, nx) != 0) {
            printf("  differs:\n    %s\n    %s\n", lx, ly);
            ok = 0;
        }
        *n_cmp += ex != NULL;
    }
    free(x);
    free(y);
    return ok;
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || !realpath(bin, g_bin) || access(g_bin, X_OK) != 0) {
        tl_skip("kill/resume checks: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("kill");
    }
    const int k_kills = tl_sanitized() ? 12 : 32;
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_kill_%ld", (long)getpid());
    if (!CHECK(mkdir(g_dir, 0777) == 0, "mkdir %s", g_dir)) return tl_finish("kill");
    if (!CHECK(write_model(P_("tiny.gguf")) == AF_OK, "tiny model: %s", af_last_error())) return tl_finish("kill");
    write_corpus(P_("train.jsonl"), 40, 5);
    write_corpus(P_("val.jsonl"), 12, 6);
    af_model *m = NULL;
    if (!CHECK(af_model_load(T_CTX, P_("tiny.gguf"), &m) == AF_OK, "load: %s", af_last_error())) return tl_finish("kill");

    /* the uninterrupted reference */
    int status = 0;
    double t0 = mono();
    pid_t pid = start_train(P_("ref"), 0, P_("ref.log"));
    double t_first = -1; /* when the first checkpoint appeared: the start-up (model, data, context) before it */
    while (!wait_for(pid, 0.002, &status))
        if (t_first < 0 && exists(P_("ref/checkpoint-1/trainer_state.safetensors"))) t_first = mono() - t0;
    double T = mono() - t0; /* placement of the kills: lowered when a whole run is faster (below) */
    /* kills in [S, S + 0.6 (T - S)] with S half the start-up: a slow start (a sanitizer build) must not
       put every kill before the first checkpoint; some still land in the start-up (fresh starts) */
    const double S = t_first > 0 ? 0.5 * t_first : 0.0;
    if (!CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reference run exit status %d (log %s)", status,
               P_("ref.log")))
        goto done;
    CHECK(exists(P_("ref/final/adapter_model.safetensors")) && exists(P_("ref/checkpoint-24/trainer_state.safetensors")),
          "reference outputs");

    uint64_t rng = 20240917;
    int kills = 0, in_save = 0, resumes = 0, fresh = 0, rounds = 0, loads = 0, max_rounds = 40;
    int64_t max_step_seen = 0;
    char out[64];
    while (kills < k_kills && rounds < max_rounds) {
        snprintf(out, sizeof out, "run%d", rounds++);
        char outp[600], logp[600];
        snprintf(outp, sizeof outp, "%s", P_(out));
        snprintf(logp, sizeof logp, "%.590s.log", outp);
        int64_t step = 0, finished = 0;
        for (int attempt = 0; attempt < 200 && !finished; attempt++) {
            int resume = step > 0;
            resumes += resume;
            fresh += !resume;
            const double a0 = mono();
            pid = start_train(outp, resume, logp);
            double delay = kills < k_kills ? S + (double)tl_rand_uniform(&rng, 0.0f, 0.6f) * (T - S) : 600;
            if (wait_for(pid, delay, &status)) {
                /* a whole run finished before its kill: runs are now faster than the reference was
                 * (it ran on a busier machine); place later kills by this run's time */
                if (!resume && mono() - a0 < T && mono() - a0 > S) T = mono() - a0;
                if (!CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s exit status %d (log %s)", out, status,
                           logp)) {
                    char *lg = tl_read_file(logp, NULL);
                    printf("%s\n", lg ? lg : "");
                    free(lg);
                    goto done;
                }
                finished = 1;
                break;
            }
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            kills++;
            in_save += count_tmp(outp) > 0; /* a hidden temporary: the kill hit a save or a rotation */
            int64_t s = check_latest(m, outp);
            if (s < 0) goto done;
            loads += s > 0;
            if (!CHECK(s >= step, "%s: newest checkpoint went back from step %lld to %lld", out, (long long)step,
                       (long long)s))
                goto done;
            step = s;
            if (s > max_step_seen) max_step_seen = s;
        }
        if (!CHECK(finished, "%s never finished", out)) goto done;
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/final/adapter_model.safetensors", outp);
        CHECK(files_equal(P_("ref/final/adapter_model.safetensors"), a), "%s: final adapter differs from the "
                                                                          "uninterrupted run", out);
        snprintf(b, sizeof b, "%s/best/adapter_model.safetensors", outp);
        CHECK(files_equal(P_("ref/best/adapter_model.safetensors"), b), "%s: best adapter differs", out);
        snprintf(a, sizeof a, "%s/metrics.jsonl", outp);
        int n_cmp = 0;
        CHECK(same_metrics(P_("ref/metrics.jsonl"), a, &n_cmp) && n_cmp == 24, "%s: metrics.jsonl differs (%d train "
                                                                               "lines compared)", out, n_cmp);
        CHECK(count_tmp(outp) == 0, "%s: %d temporaries left after the finished run", out, count_tmp(outp));
    }
    CHECK(kills >= k_kills, "only %d kills in %d rounds", kills, rounds);
    CHECK(loads > 0 && max_step_seen > 1, "no kill found a checkpoint to load (%d loads)", loads);
    printf("kill test: %d SIGKILLs over %d rounds (reference run %.2f s, start-up %.2f s), %d of them left a save's temporary, %d "
           "resumes, %d fresh starts, %d checkpoint loads; every round's final/best adapters and per-step losses "
           "identical to the uninterrupted run\n",
           kills, rounds, T, t_first, in_save, resumes, fresh, loads);
done:
    af_model_free(m);
    if (!tl_failed && !getenv("TL_KEEP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0) printf("cannot remove %s\n", g_dir);
    } else printf("test files kept in %s\n", g_dir);
    return tl_finish("kill");
}
