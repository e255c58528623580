/*
 * test_dist.c — data-parallel training under MPI (`mpirun -np N afinar train`), on a tiny random
 * llama model (tinymodel.c + a byte-level BPE tokenizer) and synthetic corpora:
 *   (a) classification: np 1, 2 and 4 (same global batch: --batch 2 --grad-accum 4) give
 *       byte-identical final/ and best/ adapters and identical per-step train lines of
 *       metrics.jsonl (loss printed with %.17g, accuracy, lr, grad-norm; timing fields dropped);
 *       each rank > 0 writes nothing (only rank 0's files exist) and the metrics carry the
 *       per-step communication (comm_s, comm_bytes > 0 for np > 1);
 *   (b) causal LM (--task causal-lm, packing): the same for np 1, 2, 4;
 *   (c) resume with another np: checkpoint-2 of the np 4 run resumed with np 2 ends with the same
 *       final/ adapter bytes as the uninterrupted np 1 run; the checkpoint records world_size 4;
 *   (d) the plain one-process binary (no mpirun) equals np 1 byte for byte with 4 micro-batches per
 *       step (classification: final/ and best/; causal LM: final/), and np 2 with one micro-batch
 *       per step (one rank idle): one path for one process and for N;
 *   (e) faults, each must end the whole job within 60 s with a non-zero status and a message
 *       naming the rank: a rank whose data file is missing (MPMD launch); a rank given other data
 *       (refused before the first step); a rank killed with SIGKILL in the middle of the run (the
 *       surviving rank says at which step it was stopped and the last good checkpoint);
 *   (f) two "hosts" (network namespaces joined by veth, MPI over TCP): same bytes as np 1 (skipped
 *       with a message where namespaces cannot be created);
 *   (g) SmolLM2-135M (models/, data/; skipped when absent): np 2 == np 1 for 2 steps, classification
 *       and causal LM;
 *   (h) a run directory held by a one-process run: `mpirun -np 2 ... --overwrite` is refused by rank 0
 *       naming the holder's pid.
 * Needs AFINAR_BIN (make test sets it), mpirun on PATH and an afinar built with MPI; skipped with a
 * message otherwise. Ranks run with --threads 1 and --oversubscribe (the CI machine has 2 cores).
 */
#include "testlib.h"
#include "tinymodel.c"

#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[256], g_bin[1024];
static const char *MPIRUN = "mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo";

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

static af_status write_model(const char *path) {
    static const char *const extra[1] = {"<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    s.vocab = 256 + 1;
    s.seed = 91;
    return tm_write_bpe(&s, path, extra, 1, merges, 1);
}

static void random_words(uint64_t *r, char *text, int nw) {
    for (int w = 0; w < nw; w++) {
        char word[8];
        int len = 2 + (int)(tl_rand_u64(r) % 3);
        for (int k = 0; k < len; k++) word[k] = (char)('d' + tl_rand_u64(r) % 20);
        word[len] = 0;
        strcat(text, word);
        strcat(text, " ");
    }
}

/* n classification samples of 3 classes (a class keyword among random words). */
static void write_corpus(const char *path, int n, uint64_t seed) {
    static const char *const names[3] = {"sport", "tech", "food"}, *const keys[3] = {"goal", "chip", "soup"};
    FILE *f = fopen(path, "w");
    uint64_t r = seed;
    for (int i = 0; f && i < n; i++) {
        int c = (int)(tl_rand_u64(&r) % 3);
        char text[256] = "";
        random_words(&r, text, 1 + (int)(tl_rand_u64(&r) % 3));
        strcat(text, keys[c]);
        strcat(text, " ");
        random_words(&r, text, 1 + (int)(tl_rand_u64(&r) % 2));
        fprintf(f, "{\"input\": \"%s\", \"label\": \"%s\"}\n", text, names[c]);
    }
    if (f) fclose(f);
}

/* n prompt/completion pairs of varied lengths (so packing makes micro-batches of different sizes). */
static void write_lm_corpus(const char *path, int n, uint64_t seed) {
    FILE *f = fopen(path, "w");
    uint64_t r = seed;
    for (int i = 0; f && i < n; i++) {
        char p[256] = "", c[256] = "";
        random_words(&r, p, 1 + (int)(tl_rand_u64(&r) % 4));
        random_words(&r, c, 1 + (int)(tl_rand_u64(&r) % 3));
        fprintf(f, "{\"prompt\": \"%s\", \"completion\": \"%s\"}\n", p, c);
    }
    if (f) fclose(f);
}

static int run(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(NULL);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
}

static char *slurp(const char *p) {
    size_t n;
    return tl_read_file(p, &n);
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = tl_read_file(a, &la), *y = tl_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x), free(y);
    return eq;
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The "type":"train" lines of metrics.jsonl with the fields that depend on timing or on the
 * process count removed (everything from "tokens_per_s" / "samples_per_s" on), one per line. */
static char *train_lines(const char *out) {
    char p[2048];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *s = slurp(p);
    if (!s) return NULL;
    size_t cap = strlen(s) + 1, len = 0;
    char *r = malloc(cap);
    r[0] = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        char *cut = strstr(line, ",\"tokens_per_s\"");
        if (!cut) cut = strstr(line, ",\"samples_per_s\"");
        if (cut) *cut = 0;
        len += (size_t)snprintf(r + len, cap - len, "%s\n", line);
    }
    free(s);
    return r;
}

/* 1 when every train line of OUT/metrics.jsonl carries comm_s and comm_bytes (> 0 when want_bytes). */
static int has_comm(const char *out, int want_bytes) {
    char p[2048];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *s = slurp(p);
    int ok = s != NULL, n = 0;
    for (char *line = s ? strtok(s, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        n++;
        const char *b = strstr(line, "\"comm_bytes\":");
        ok &= strstr(line, "\"comm_s\":") != NULL && b != NULL;
        if (b && want_bytes) ok &= atoll(b + 13) > 0;
    }
    free(s);
    return ok && n > 0;
}

static const char *CLS_ARGS = "--seed 7 --max-steps 6 --batch 2 --grad-accum 4 --lora-r 4 --lora-alpha 8 "
                              "--lora-dropout 0.1 --lr 0.01 --warmup 2 --max-seq-len 32 --eval-every 3 "
                              "--save-every 2 --save-total-limit 5 --threads 1 --no-plot --overwrite";
static const char *LM_ARGS = "--task causal-lm --seed 5 --max-steps 5 --batch 2 --grad-accum 4 --lora-r 4 "
                             "--lora-alpha 8 --lora-dropout 0.1 --lr 0.01 --warmup 1 --max-seq-len 48 "
                             "--targets all-linear --threads 1 --no-plot --overwrite";

static int train_np(int np, const char *out, const char *data_args, const char *args) {
    return run("cd %s && %s -np %d %s train -m tiny.gguf %s %s -o %s > %s.log 2>&1", g_dir, MPIRUN, np, g_bin,
               data_args, args, out, out);
}

static void identical_runs(const char *what, const char *prefix, const char *data_args, const char *args, int has_val) {
    const int nps[3] = {1, 2, 4};
    char out[3][64];
    for (int i = 0; i < 3; i++) {
        snprintf(out[i], sizeof out[i], "%s_np%d", prefix, nps[i]);
        int rc = train_np(nps[i], out[i], data_args, args);
        char lp[1200];
        snprintf(lp, sizeof lp, "%s/%s.log", g_dir, out[i]);
        char *log = slurp(lp);
        CHECK(rc == 0, "%s: mpirun -np %d: exit %d; log:\n%s", what, nps[i], rc, log ? log : "(none)");
        CHECK(log && strstr(log, "data parallel:") && strstr(log, "effective batch 8"),
              "%s np %d: the effective batch is printed", what, nps[i]);
        if (log && nps[i] > 1) { /* one writer: a single progress stream (rank 0's) */
            int n_train = 0;
            for (const char *q = log; (q = strstr(q, "training: ")); q++) n_train++;
            CHECK(n_train == 1, "%s np %d: 'training:' printed %d times (only rank 0 prints)", what, nps[i], n_train);
        }
        free(log);
        run("cd %s && printf '%%s np %%d: ' '%s' %d && sha256sum %s/final/adapter_model.safetensors", g_dir, what, nps[i],
            out[i]); /* the evidence, in the test's output */
        char d[1200];
        snprintf(d, sizeof d, "%s/%s", g_dir, out[i]);
        CHECK(has_comm(d, nps[i] > 1), "%s np %d: metrics.jsonl train lines carry comm_s and comm_bytes", what, nps[i]);
    }
    for (int i = 1; i < 3; i++) {
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s/final/adapter_model.safetensors", g_dir, out[0]);
        snprintf(b, sizeof b, "%s/%s/final/adapter_model.safetensors", g_dir, out[i]);
        CHECK(exists(a) && files_equal(a, b), "%s: final adapter of np %d byte-identical to np 1", what, nps[i]);
        if (has_val) {
            snprintf(a, sizeof a, "%s/%s/best/adapter_model.safetensors", g_dir, out[0]);
            snprintf(b, sizeof b, "%s/%s/best/adapter_model.safetensors", g_dir, out[i]);
            CHECK(exists(a) && files_equal(a, b), "%s: best adapter of np %d byte-identical to np 1", what, nps[i]);
        }
        snprintf(a, sizeof a, "%s/%s", g_dir, out[0]);
        snprintf(b, sizeof b, "%s/%s", g_dir, out[i]);
        char *la = train_lines(a), *lb = train_lines(b);
        CHECK(la && lb && strlen(la) > 0 && !strcmp(la, lb), "%s: train lines of np %d equal np 1's:\n%s---\n%s", what,
              nps[i], la ? la : "", lb ? lb : "");
        free(la), free(lb);
    }
}

/* pid of the process whose environment holds OMPI_COMM_WORLD_RANK=<rank> and AF_DIST_TEST_TAG=<tag>; 0 if none. */
static pid_t find_rank(int rank, const char *tag) {
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    char want_rank[64], want_tag[128];
    snprintf(want_rank, sizeof want_rank, "OMPI_COMM_WORLD_RANK=%d", rank);
    snprintf(want_tag, sizeof want_tag, "AF_DIST_TEST_TAG=%s", tag);
    while (d && !found && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char p[64];
        snprintf(p, sizeof p, "/proc/%ld/environ", pid);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        char buf[65536];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        int has_rank = 0, has_tag = 0;
        for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
            has_rank |= !strcmp(buf + i, want_rank);
            has_tag |= !strcmp(buf + i, want_tag);
        }
        if (has_rank && has_tag) found = (pid_t)pid;
    }
    if (d) closedir(d);
    return found;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int count_train_lines(const char *out) {
    char p[2048];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *s = slurp(p);
    int n = 0;
    for (const char *q = s; q && (q = strstr(q, "\"type\":\"train\"")); q++) n++;
    free(s);
    return n;
}

/* A rank killed with SIGKILL after two steps: the job ends within 60 s, non-zero, and the messages
 * name the dead rank and the step at which the survivor was stopped. */
static void killed_rank(void) {
    char tag[32];
    snprintf(tag, sizeof tag, "%ld", (long)getpid());
    setenv("AF_DIST_TEST_TAG", tag, 1);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && exec %s -np 2 %s train -m tiny.gguf --train train.jsonl %s --max-steps 400 -o kill_out "
             "> kill.log 2>&1",
             g_dir, MPIRUN, g_bin,
             "--seed 7 --batch 2 --grad-accum 4 --lora-r 4 --lora-alpha 8 --max-seq-len 32 --save-every 1 "
             "--threads 1 --no-plot --overwrite");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const double t0 = mono();
    pid_t victim = 0;
    while (mono() - t0 < 60) { /* wait for two finished steps */
        if (count_train_lines(P_("kill_out")) >= 2 && (victim = find_rank(1, tag)) > 0) break;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            pid = 0;
            break;
        }
        usleep(20000);
    }
    CHECK(victim > 0, "killed rank: rank 1 found running after two steps");
    int status = 0;
    double t_kill = mono();
    if (victim > 0) kill(victim, SIGKILL);
    int ended = 0;
    while (pid > 0 && mono() - t_kill < 60) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            ended = 1;
            break;
        }
        usleep(50000);
    }
    const double took = mono() - t_kill;
    if (!ended && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    unsetenv("AF_DIST_TEST_TAG");
    char *log = slurp(P_("kill.log"));
    CHECK(ended && WIFEXITED(status) && WEXITSTATUS(status) != 0,
          "killed rank: the job ended (%d) with a non-zero status within 60 s (%.1f s)", ended, took);
    CHECK(log && strstr(log, "rank 1") && strstr(log, "rank 0 of 2: stopped by the MPI launcher") &&
              strstr(log, "at step ") && strstr(log, "last good checkpoint:"),
          "killed rank: messages name the dead rank, the step and the last good checkpoint; log:\n%s",
          log ? log : "(none)");
    printf("killed rank: job ended %.1f s after SIGKILL of rank 1\n", took);
    free(log);
}


/* (f) Two "hosts": two network namespaces joined by a veth pair (10.77.N.1 and 10.77.N.2), mpirun in
 * the first, one rank in each (Open MPI's rsh launcher replaced by a script that enters the other
 * namespace: `ip netns exec`), MPI traffic over TCP on the veth only. The final adapter must equal
 * the np 1 run's bytes. Skipped with a message where namespaces cannot be made (not root, no `ip`). */
static void two_hosts(void) {
    char a[64], b[64], net[32];
    const long id = (long)getpid();
    snprintf(a, sizeof a, "afd_a%ld", id);
    snprintf(b, sizeof b, "afd_b%ld", id);
    snprintf(net, sizeof net, "10.77.%ld", id % 250 + 1);
    if (run("ip netns add %s > /dev/null 2>&1", a) != 0) {
        tl_skip("two-host run: cannot create a network namespace here (needs root and iproute2)");
        return;
    }
    int ok = run("ip netns add %s && ip link add va%ld type veth peer name vb%ld && ip link set va%ld netns %s && "
                 "ip link set vb%ld netns %s && ip -n %s addr add %s.1/24 dev va%ld && ip -n %s addr add %s.2/24 dev vb%ld "
                 "&& ip -n %s link set va%ld up && ip -n %s link set vb%ld up && ip -n %s link set lo up && "
                 "ip -n %s link set lo up",
                 b, id, id, id, a, id, b, a, net, id, b, net, id, a, id, b, id, a, b) == 0;
    CHECK(ok, "two-host run: namespaces %s, %s joined by a veth pair", a, b);
    FILE *f = fopen(P_("rsh.sh"), "w");
    if (f) {
        fprintf(f, "#!/bin/sh\n# mpirun's rsh agent: HOST CMD... -> CMD in that host's namespace\nh=$1; shift\n"
                   "case \"$h\" in %s.1) ns=%s ;; %s.2) ns=%s ;; *) echo \"unknown host $h\" >&2; exit 1 ;; esac\n"
                   "exec ip netns exec $ns sh -c \"$*\"\n",
                net, a, net, b);
        fclose(f);
    }
    if (ok && f) {
        const double t0 = mono();
        int rc = run("cd %s && chmod +x rsh.sh && timeout 120 ip netns exec %s mpirun --allow-run-as-root "
                     "--host %s.1:1,%s.2:1 -np 2 --mca plm_rsh_agent %s/rsh.sh --mca btl self,tcp --mca "
                     "btl_tcp_if_include %s.0/24 --mca oob_tcp_if_include %s.0/24 %s train -m tiny.gguf --train "
                     "train.jsonl --val val.jsonl %s -o hosts_out > hosts.log 2>&1",
                     g_dir, a, net, net, g_dir, net, net, g_bin, CLS_ARGS);
        char *log = slurp(P_("hosts.log"));
        CHECK(rc == 0, "two-host run over TCP: exit %d; log:\n%s", rc, log ? log : "");
        free(log);
        CHECK(files_equal(P_("cls_np1/final/adapter_model.safetensors"), P_("hosts_out/final/adapter_model.safetensors")),
              "two-host run over TCP: final adapter byte-identical to np 1");
        CHECK(has_comm(P_("hosts_out"), 1), "two-host run: metrics carry the communication");
        char *m = slurp(P_("hosts_out/metrics.jsonl"));
        double cs = 0;
        long long cb = 0;
        int ns = 0;
        for (const char *q = m; q && (q = strstr(q, "\"comm_s\":")); q++, ns++) {
            cs += atof(q + 9);
            const char *bq = strstr(q, "\"comm_bytes\":");
            if (bq) cb += atoll(bq + 13);
        }
        free(m);
        printf("two-host run (2 namespaces, TCP over veth): %.1f s; gather %.3f ms and %lld bytes per step (mean of %d)\n",
               mono() - t0, ns ? 1e3 * cs / ns : 0.0, ns ? cb / ns : 0, ns);
    }
    run("ip netns del %s > /dev/null 2>&1; ip netns del %s > /dev/null 2>&1", a, b);
}

/* (g) SmolLM2-135M (models/, skipped when absent): np 2 == np 1 for 2 steps, classification on the
 * first 16 BBC training articles (data/bbc, skipped when absent) and causal LM on 16 headline
 * examples, short sequences and adapters on the top 2 layers (seconds). */
static void smollm2(void) {
    if (tl_sanitized()) {
        tl_skip("SmolLM2 np 2 == np 1: not run under the sanitizers (AF_TEST_SANITIZE; the tiny models cover the code)");
        return;
    }
    const char *model = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!model) return;
    char mabs[1024], cwd[600];
    if (!getcwd(cwd, sizeof cwd)) return;
    snprintf(mabs, sizeof mabs, "%s%s%s", model[0] == '/' ? "" : cwd, model[0] == '/' ? "" : "/", model);
    if (access("data/bbc/train.jsonl", R_OK) != 0 || access("data/bbc_headlines/train.jsonl", R_OK) != 0) {
        tl_skip("SmolLM2 np 2 == np 1: data/bbc or data/bbc_headlines absent (scripts/setup.sh fetches them)");
        return;
    }
    run("head -n 16 data/bbc/train.jsonl > %s/bbc16.jsonl && head -n 16 data/bbc_headlines/train.jsonl > %s/hl16.jsonl",
        g_dir, g_dir);
    const char *common = "--max-steps 2 --batch 2 --grad-accum 2 --lora-layers top2 --threads 1 --no-plot --overwrite";
    for (int task = 0; task < 2; task++) {
        char out[2][64];
        int rc[2];
        for (int i = 0; i < 2; i++) {
            snprintf(out[i], sizeof out[i], "smol_%s_np%d", task ? "lm" : "cls", i + 1);
            rc[i] = run("cd %s && %s -np %d %s train -m %s %s %s %s -o %s > %s.log 2>&1", g_dir, MPIRUN, i + 1, g_bin,
                        mabs, task ? "--task causal-lm --train hl16.jsonl" : "--train bbc16.jsonl", common,
                        task ? "--targets all-linear --max-seq-len 224" : "--max-seq-len 32", out[i], out[i]);
        }
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s/final/adapter_model.safetensors", g_dir, out[0]);
        snprintf(b, sizeof b, "%s/%s/final/adapter_model.safetensors", g_dir, out[1]);
        CHECK(rc[0] == 0 && rc[1] == 0 && files_equal(a, b), "SmolLM2 %s: np 2 final adapter == np 1 (exit %d %d)",
              task ? "causal-LM" : "classification", rc[0], rc[1]);
    }
}

/* (h) One writer per run directory under MPI: while a one-process run trains into `held`, an
 * `mpirun -np 2 ... --overwrite -o held` job is refused by rank 0 (which takes the lock) naming the
 * holder's pid, and the whole job ends with a non-zero status. */
static void locked_dir(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && exec %s train -m tiny.gguf --train train.jsonl --seed 7 --batch 2 --lora-r 4 --max-seq-len 32 "
             "--max-steps 100000000 --save-every 100000000 --threads 1 --no-plot -o held > held.log 2>&1",
             g_dir, g_bin);
    fflush(NULL);
    pid_t holder = fork();
    if (holder == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const double t0 = mono();
    while (mono() - t0 < 60 && !exists(P_("held/run.json"))) usleep(20000);
    if (CHECK(exists(P_("held/run.json")), "locked dir: the holder started (run.json)")) {
        int rc = run("cd %s && timeout 120 %s -np 2 %s train -m tiny.gguf --train train.jsonl %s -o held --overwrite "
                     "> held_mpi.log 2>&1",
                     g_dir, MPIRUN, g_bin, CLS_ARGS);
        char *log = slurp(P_("held_mpi.log")), want[160];
        snprintf(want, sizeof want, "held: another afinar run is writing to this directory (pid %ld)", (long)holder);
        CHECK(rc != 0 && log && strstr(log, "rank 0 of 2") && strstr(log, want),
              "locked dir: mpirun -np 2 --overwrite refused naming the holder (exit %d); log:\n%s", rc, log ? log : "");
        free(log);
    }
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        tl_skip("MPI: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("test_dist");
    }
    if (system("command -v mpirun > /dev/null 2>&1") != 0) {
        tl_skip("MPI: mpirun not found (scripts/setup.sh installs openmpi-bin); multi-process tests not run");
        return tl_finish("test_dist");
    }
    if (!realpath(bin, g_bin)) snprintf(g_bin, sizeof g_bin, "%s", bin);
    char help[1200];
    snprintf(help, sizeof help, "%s version 2>&1 | grep '^mpi: ' | grep -vq 'not built in'", g_bin);
    if (system(help) != 0) {
        tl_skip("MPI: %s was built without MPI (install libopenmpi-dev and rebuild); multi-process tests not run", g_bin);
        return tl_finish("test_dist");
    }
    { /* sanitizer builds: Open MPI keeps allocations until exit, many from its dlopen'ed components
       * (unloaded by then, so no suppression can name them): LeakSanitizer is off in the ranks;
       * ASan and UBSan stay on. afinar's own frees are leak-checked by the in-process tests. */
        const char *old = getenv("ASAN_OPTIONS");
        char asan[1500];
        snprintf(asan, sizeof asan, "%s%sdetect_leaks=0", old ? old : "", old && *old ? ":" : "");
        setenv("ASAN_OPTIONS", asan, 1);
    }
    snprintf(g_dir, sizeof g_dir, "%s/afinar_dist_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return tl_finish("test_dist");
    }
    CHECK(write_model(P_("tiny.gguf")) == AF_OK, "tiny model written");
    write_corpus(P_("train.jsonl"), 40, 11);
    write_corpus(P_("other.jsonl"), 40, 12);
    write_corpus(P_("val.jsonl"), 12, 13);
    write_lm_corpus(P_("lm.jsonl"), 40, 14);

    /* (a), (b) */
    identical_runs("classification", "cls", "--train train.jsonl --val val.jsonl", CLS_ARGS, 1);
    identical_runs("causal-LM", "lm", "--train lm.jsonl", LM_ARGS, 0);

    /* (c) resume the np 4 run's checkpoint-2 with np 2 */
    {
        int rc = run("cd %s && rm -rf res && mkdir res && cp -r cls_np4/checkpoint-2 res/ && %s -np 2 %s train --resume "
                     "res/checkpoint-2 -o res --threads 1 --no-plot > res.log 2>&1",
                     g_dir, MPIRUN, g_bin);
        char *log = slurp(P_("res.log"));
        CHECK(rc == 0, "resume np 4 -> np 2: exit %d; log:\n%s", rc, log ? log : "");
        free(log);
        CHECK(files_equal(P_("cls_np1/final/adapter_model.safetensors"), P_("res/final/adapter_model.safetensors")),
              "resume np 4 -> np 2: final adapter byte-identical to the uninterrupted np 1 run");
        size_t sn = 0;
        char *st = tl_read_file(P_("cls_np4/checkpoint-2/trainer_state.safetensors"), &sn);
        CHECK(st && sn > 8 && memmem(st + 8, sn - 8, "\"world_size\":\"4\"", 16), "the np 4 checkpoint records world_size 4");
        free(st);
    }

    /* (d) the plain one-process binary (no mpirun) takes the same path: == np 1, 2, 4 for steps of
     * several micro-batches (classification and causal LM), and for one micro-batch per step with
     * one rank idle */
    {
        int rc1 = run("cd %s && %s train -m tiny.gguf --train train.jsonl --val val.jsonl %s -o cls_plain > cls_plain.log "
                      "2>&1", g_dir, g_bin, CLS_ARGS);
        int rc2 = run("cd %s && %s train -m tiny.gguf --train lm.jsonl %s -o lm_plain > lm_plain.log 2>&1", g_dir, g_bin,
                      LM_ARGS);
        CHECK(rc1 == 0 && rc2 == 0, "plain binary: classification exit %d, causal LM exit %d", rc1, rc2);
        CHECK(files_equal(P_("cls_plain/final/adapter_model.safetensors"), P_("cls_np1/final/adapter_model.safetensors")) &&
                  files_equal(P_("cls_plain/best/adapter_model.safetensors"), P_("cls_np1/best/adapter_model.safetensors")),
              "classification, 4 micro-batches per step: the plain binary's final/ and best/ byte-identical to mpirun -np 1");
        CHECK(files_equal(P_("lm_plain/final/adapter_model.safetensors"), P_("lm_np1/final/adapter_model.safetensors")),
              "causal LM: the plain binary's final/ byte-identical to mpirun -np 1");
        const char *a = "--seed 3 --max-steps 4 --batch 4 --grad-accum 1 --lora-r 4 --lora-alpha 8 --lora-dropout 0.1 "
                        "--lr 0.01 --max-seq-len 32 --threads 1 --no-plot --overwrite";
        rc1 = run("cd %s && %s train -m tiny.gguf --train train.jsonl %s -o one_plain > one_plain.log 2>&1", g_dir,
                  g_bin, a);
        rc2 = train_np(2, "one_np2", "--train train.jsonl", a);
        CHECK(rc1 == 0 && rc2 == 0, "grad-accum 1: plain %d, np 2 %d", rc1, rc2);
        CHECK(files_equal(P_("one_plain/final/adapter_model.safetensors"), P_("one_np2/final/adapter_model.safetensors")),
              "grad-accum 1: np 2 (one rank idle) byte-identical to the one-process binary");
    }

    /* (e) faults */
    {
        double t0 = mono();
        int rc = run("cd %s && timeout 90 %s -np 1 %s train -m tiny.gguf --train train.jsonl %s -o miss_out : -np 1 %s "
                     "train -m tiny.gguf --train missing.jsonl %s -o miss_out > miss.log 2>&1",
                     g_dir, MPIRUN, g_bin, CLS_ARGS, g_bin, CLS_ARGS);
        double took = mono() - t0;
        char *log = slurp(P_("miss.log"));
        CHECK(rc != 0 && rc != 124 && took < 60, "missing data on rank 1: job stopped (exit %d) in %.1f s", rc, took);
        CHECK(log && strstr(log, "rank 1 of 2, before the first step") && strstr(log, "missing.jsonl"),
              "missing data on rank 1: the message names the rank and the file; log:\n%s", log ? log : "");
        free(log);
        t0 = mono();
        rc = run("cd %s && timeout 90 %s -np 1 %s train -m tiny.gguf --train train.jsonl %s -o diff_out : -np 1 %s "
                 "train -m tiny.gguf --train other.jsonl %s -o diff_out > diff.log 2>&1",
                 g_dir, MPIRUN, g_bin, CLS_ARGS, g_bin, CLS_ARGS);
        took = mono() - t0;
        log = slurp(P_("diff.log"));
        CHECK(rc != 0 && rc != 124 && took < 60, "other data on rank 1: job stopped (exit %d) in %.1f s", rc, took);
        CHECK(log && strstr(log, "rank 1 has other training data"), "other data on rank 1: refused; log:\n%s",
              log ? log : "");
        free(log);
        if (af_cpu()->avx512_bf16 && af_cpu()->avx512bw) { /* bf16 products run here: ranks must agree on them */
            rc = run("cd %s && timeout 90 %s -np 1 %s train -m tiny.gguf --train train.jsonl %s --frozen-precision f32 "
                     "-o prec_out : -np 1 %s train -m tiny.gguf --train train.jsonl %s --frozen-precision bf16 "
                     "-o prec_out > prec.log 2>&1", g_dir, MPIRUN, g_bin, CLS_ARGS, g_bin, CLS_ARGS);
            log = slurp(P_("prec.log"));
            CHECK(rc != 0 && rc != 124 && log && strstr(log, "rank 1 has other training data or settings") &&
                      strstr(log, "precision"),
                  "f32 on rank 0, bf16 on rank 1: refused (exit %d); log:\n%s", rc, log ? log : "");
            free(log);
        } else
            tl_skip("ranks with other frozen-product precisions: this CPU runs no bf16 products");
    }
    killed_rank();
    locked_dir();
    two_hosts();
    smollm2();

    if (tl_failed == 0) run("rm -rf %s", g_dir);
    else printf("kept %s for inspection\n", g_dir);
    return tl_finish("test_dist");
}
