/*
 * cli_harness.c — running the afinar command-line tool from a test, shared by tests/test_cli.c
 * (the bad-input matrix) and tests/test_ckpt.c (checkpoint checks): a temporary directory ("@"
 * in command lines), the tiny model and corpus writers, file helpers, run_argv (fork/execv with
 * pipes and a timeout) and EXPECT (exit status + one stderr line matched with "*" wildcards).
 * #included (static functions), as tinymodel.c is.
 */
#include "testlib.h"
#include "tinymodel.c"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Each including test uses some of these helpers. */
#define CLI_HELPER static __attribute__((unused))

static char g_dir[256];  /* the temporary directory */
static char g_bin[4096]; /* absolute path of the CLI */
static int g_dump;

/* "<dir>/<name>" in a rotating static buffer. */
CLI_HELPER const char *P_(const char *name) {
    static char buf[64][600];
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

CLI_HELPER void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "cannot write %s: %s", path, strerror(errno));
        return;
    }
    fputs(text, f);
    fclose(f);
}

CLI_HELPER int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---------------------------------------------------------------- inputs */

/* Tiny llama (tinymodel.c), with a byte-level gpt2 tokenizer (256 byte tokens, "ab", one merge,
 * <|endoftext|>) when with_tok. */
CLI_HELPER af_status write_model(const char *path, int with_tok) {
    static const char *const extra[2] = {"ab", "<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
    s.vocab = 256 + 2;
    s.seed = 5;
    return with_tok ? tm_write_bpe(&s, path, extra, 2, merges, 1) : tm_write(&s, path);
}

static const char *const k_names[3] = {"sport", "tech", "food"};

/* n samples "<word> <keyword>", label name of class i % 3. */
CLI_HELPER void write_corpus(const char *path, int n) {
    static const char *const keys[3] = {"goal", "chip", "soup"};
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < n; i++) fprintf(f, "{\"input\": \"w%d %s\", \"label\": \"%s\"}\n", i, keys[i % 3], k_names[i % 3]);
    fclose(f);
}

/* Copy a file; with max >= 0 only its first `max` bytes. */
CLI_HELPER int copy_file(const char *from, const char *to, long max) {
    size_t n = 0;
    char *b = tl_read_file(from, &n);
    if (!b) return 0;
    if (max >= 0 && (size_t)max < n) n = (size_t)max;
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) ok = (fclose(f) == 0) && ok;
    free(b);
    return ok;
}

/* Copy the tree `from` (files and directories) to a new `to`. */
CLI_HELPER int copy_tree(const char *from, const char *to) {
    DIR *d = opendir(from);
    if (!d || mkdir(to, 0777) != 0) {
        if (d) closedir(d);
        return 0;
    }
    struct dirent *e;
    int ok = 1;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        struct stat sb;
        if (lstat(a, &sb) != 0) ok = 0;
        else if (S_ISDIR(sb.st_mode)) ok = copy_tree(a, b) && ok;
        else ok = copy_file(a, b, -1) && ok;
    }
    closedir(d);
    return ok;
}

/* rm -rf without a shell (the tree holds only files and directories we made; chmod 000 ones are
 * made readable again first). */
CLI_HELPER void rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        chmod(path, 0700);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1200];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Names in `dir` containing `needle` (recursively). */
CLI_HELPER int count_named(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n += strstr(e->d_name, needle) != NULL;
        char sub[1200];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) n += count_named(sub, needle);
    }
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------- running the CLI */

typedef struct run_result {
    int rc;      /* exit status, or -signal, or -1000 on timeout / spawn failure */
    char *err;   /* stderr (malloc'ed, NUL-terminated) */
    char *out;   /* stdout */
} run_result;

#define RUN_TIMEOUT_S 120 /* generous: ASan builds are slow; a hang still ends */
static const char *g_env[8]; /* "NAME=VALUE" put into the child's environment (NULL-terminated) */
static int g_run_timeout = RUN_TIMEOUT_S; /* the reliability cases (a hang is the defect) use less */

/* Append what is readable on fd to the growing buffer; returns 0 at EOF or error. */
CLI_HELPER int drain(int fd, char **buf, size_t *len, size_t *cap) {
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) return 1;
    if (r <= 0) return 0;
    if (*len + (size_t)r + 1 > *cap) {
        size_t nc = 2 * (*cap + (size_t)r + 1);
        char *nb = realloc(*buf, nc);
        if (!nb) return 0;
        *buf = nb, *cap = nc;
    }
    memcpy(*buf + *len, tmp, (size_t)r);
    *len += (size_t)r;
    (*buf)[*len] = 0;
    return 1;
}

/* Run $AFINAR_BIN with args (args[0] = the binary, NULL-terminated). stdin from `in` (NULL:
 * /dev/null); stdout and stderr through pipes (so a file size limit does not cut them).
 * fsize > 0: RLIMIT_FSIZE in the child with SIGXFSZ ignored, so a write past it fails (EFBIG). */
CLI_HELPER run_result run_argv(const char *in, long fsize, char **args) {
    run_result r = {-1000, NULL, NULL};
    int po[2], pe[2];
    if (pipe(po) != 0 || pipe(pe) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return r;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        CHECK(0, "fork: %s", strerror(errno));
        return r;
    }
    if (pid == 0) {
        int fi = open(in ? in : "/dev/null", O_RDONLY);
        if (fi < 0) _exit(126);
        dup2(fi, 0), dup2(po[1], 1), dup2(pe[1], 2);
        close(fi), close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        for (int i = 0; i < 8 && g_env[i]; i++) putenv((char *)g_env[i]);
        if (fsize > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim;
            getrlimit(RLIMIT_FSIZE, &lim);
            lim.rlim_cur = (rlim_t)fsize;
            setrlimit(RLIMIT_FSIZE, &lim);
        }
        execv(args[0], args);
        _exit(127);
    }
    close(po[1]), close(pe[1]);
    size_t ol = 0, oc = 256, el = 0, ec = 256;
    r.out = calloc(oc, 1), r.err = calloc(ec, 1);
    int open_o = 1, open_e = 1, killed = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (open_o || open_e) {
        struct pollfd fds[2] = {{open_o ? po[0] : -1, POLLIN, 0}, {open_e ? pe[0] : -1, POLLIN, 0}};
        int n = poll(fds, 2, 200);
        if (n < 0 && errno != EINTR) break;
        if (n > 0 && fds[0].revents) open_o = drain(po[0], &r.out, &ol, &oc);
        if (n > 0 && fds[1].revents) open_e = drain(pe[0], &r.err, &el, &ec);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!killed && now.tv_sec - t0.tv_sec > g_run_timeout) {
            kill(pid, SIGKILL);
            killed = 1;
            CHECK(0, "%s %s: no exit after %d s (killed)", args[1], args[2] ? args[2] : "", g_run_timeout);
        }
    }
    close(po[0]), close(pe[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (killed) r.rc = -1000;
    else if (WIFEXITED(status)) r.rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) r.rc = -WTERMSIG(status);
    if (!r.out || !r.err) {
        CHECK(0, "out of memory capturing the output");
        free(r.out), free(r.err);
        r.out = strdup(""), r.err = strdup("");
    }
    return r;
}

CLI_HELPER void run_free(run_result *r) {
    free(r->err);
    free(r->out);
}

/* Expand "@" into the temporary directory. Returns a malloc'ed string. */
CLI_HELPER char *expand(const char *s) {
    size_t n = strlen(s), ld = strlen(g_dir), k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '@';
    char *o = malloc(n + k * ld + 1), *p = o;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '@') memcpy(p, g_dir, ld), p += ld;
        else *p++ = s[i];
    }
    *p = 0;
    return o;
}

/* Split a command line on single spaces ("@" expanded; "''" is an empty argument) into a
 * NULL-terminated argv with argv[0] = the binary. */
CLI_HELPER char **split_args(const char *cmdline) {
    char *s = expand(cmdline);
    int n = 2;
    for (char *q = s; *q; q++) n += *q == ' ';
    char **av = calloc((size_t)n + 1, sizeof *av);
    av[0] = strdup(g_bin);
    int k = 1;
    for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) av[k++] = strdup(strcmp(tok, "''") ? tok : "");
    av[k] = NULL;
    free(s);
    return av;
}

CLI_HELPER void free_args(char **av) {
    for (int i = 0; av[i]; i++) free(av[i]);
    free(av);
}

CLI_HELPER int n_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The last non-empty line of s (static buffer). */
CLI_HELPER const char *last_line(const char *s) {
    static char buf[4096];
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n') n--;
    size_t b = n;
    while (b > 0 && s[b - 1] != '\n') b--;
    snprintf(buf, sizeof buf, "%.*s", (int)(n - b), s + b);
    return buf;
}

/* Does text[0..n) match pattern p, where '*' matches any run of characters (no other wildcard)? */
CLI_HELPER int glob_match(const char *p, const char *text, size_t n) {
    size_t ti = 0, star_p = (size_t)-1, star_t = 0, pi = 0, pn = strlen(p);
    while (ti < n) {
        if (pi < pn && p[pi] == '*') star_p = pi++, star_t = ti;
        else if (pi < pn && p[pi] == text[ti]) pi++, ti++;
        else if (star_p != (size_t)-1) pi = star_p + 1, ti = ++star_t;
        else return 0;
    }
    while (pi < pn && p[pi] == '*') pi++;
    return pi == pn;
}

/*
 * One case: run `cmdline` (see split_args), expect exit status `want_rc` and a stderr of exactly
 * one line matching `want` ("@" expanded; "*" matches any text: a strerror, a list, a pid).
 * With flags & MULTI the message is the LAST stderr line (train prints its report first).
 */
enum { ONE = 0, MULTI = 1 };
CLI_HELPER int expect_in(const char *in, long fsize, const char *cmdline, int want_rc, const char *want, int flags) {
    char **av = split_args(cmdline);
    run_result r = run_argv(in, fsize, av);
    free_args(av);
    if (g_dump) printf("---- %s\n     rc=%d stderr(%d lines): %s", cmdline, r.rc, n_lines(r.err ? r.err : ""), r.err ? r.err : "(null)\n");
    int ok = 1;
    if (!r.err) {
        run_free(&r);
        return 0;
    }
    ok &= CHECK(r.rc >= 0 || r.rc == -1000, "%s: killed by signal %d (a crash)", cmdline, -r.rc);
    ok &= CHECK(r.rc == want_rc, "%s: exit status %d, want %d; stderr: %s", cmdline, r.rc, want_rc, r.err);
    char *w = expand(want);
    const char *line = (flags & MULTI) ? last_line(r.err) : r.err;
    size_t ll = strlen(line);
    if (!(flags & MULTI)) {
        ok &= CHECK(n_lines(r.err) == 1 && ll > 0 && line[ll - 1] == '\n', "%s: stderr is %d lines, want one:\n%s",
                    cmdline, n_lines(r.err), r.err);
        if (ll > 0 && line[ll - 1] == '\n') ll--;
    }
    ok &= CHECK(glob_match(w, line, ll), "%s:\n  stderr %.*s\n  want   %s", cmdline, (int)ll, line, w);
    free(w);
    run_free(&r);
    return ok;
}
#define EXPECT(cmd, rc, want) expect_in(NULL, 0, (cmd), (rc), (want), ONE)
#define EXPECT_MULTI(cmd, rc, want) expect_in(NULL, 0, (cmd), (rc), (want), MULTI)

/* Make an afinar-written adapter or checkpoint directory an unverified one (as a PEFT-made
 * directory is): remove its manifest.json and the "manifest" claim of its afinar.json, so that
 * hand edits reach the parsers behind the manifest check. */
CLI_HELPER void unverify(const char *dir) {
    char p[1300];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/afinar.json", dir);
    size_t n = 0;
    char *b = tl_read_file(p, &n);
    char *at = b ? strstr(b, "\"manifest\":") : NULL;
    if (at) {
        char *end = strchr(at, '\n');
        if (end) memmove(at, end + 1, strlen(end + 1) + 1);
        write_text(p, b);
    }
    free(b);
}
