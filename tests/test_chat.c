/*
 * test_chat.c — `afinar chat` through a pseudo-terminal (forkpty), as a person types it, on
 * SmolLM2-135M-Instruct ($AFINAR_BIN, set by `make test`; skipped without the model):
 *   - a 2-turn conversation at --temp 0 whose answers equal `afinar generate` on the same messages
 *     (turn 1: generate --chat --system; turn 2: generate -p with the whole conversation rendered
 *     in ChatML, the model's template), so reusing the cached keys and values changes nothing;
 *   - /reset: the first question again gives the first answer again; /exit ends with status 0;
 *   - Ctrl-C while an answer streams stops that answer, not the program (the prompt comes back);
 *     Ctrl-C at the prompt then ends it (status 130); end of input (Ctrl-D) ends with status 0.
 */
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_bin[4096];
static const char *g_model;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A chat process on a pseudo-terminal and everything it wrote (stdout and stderr: the terminal). */
typedef struct term {
    pid_t pid;
    int fd;
    char *out;
    size_t len, cap;
} term;

static int term_start(term *t, char *const argv[]) {
    memset(t, 0, sizeof *t);
    t->pid = forkpty(&t->fd, NULL, NULL, NULL);
    if (t->pid < 0) return 0;
    if (t->pid == 0) {
        execv(g_bin, argv);
        _exit(127);
    }
    t->cap = 1 << 16;
    t->out = calloc(1, t->cap);
    return t->out != NULL;
}

/* Read what the process writes for up to `ms` milliseconds or until `marker` appears at or after
 * offset `from` of the output. Returns the marker's offset, or -1. */
static long term_wait(term *t, size_t from, const char *marker, int ms) {
    const double end = now_s() + ms / 1000.0;
    for (;;) {
        const char *hit = marker && t->len > from ? strstr(t->out + from, marker) : NULL;
        if (hit) return (long)(hit - t->out);
        const int left = (int)((end - now_s()) * 1000);
        if (left <= 0) return -1;
        struct pollfd p = {t->fd, POLLIN, 0};
        if (poll(&p, 1, left < 200 ? left : 200) <= 0) continue;
        if (t->len + 4097 > t->cap) {
            char *o = realloc(t->out, t->cap * 2);
            if (!o) return -1;
            t->out = o, t->cap *= 2;
        }
        ssize_t n = read(t->fd, t->out + t->len, 4096);
        if (n <= 0) { /* EIO: the process ended */
            if (!marker) return -1;
            const char *h2 = t->len > from ? strstr(t->out + from, marker) : NULL;
            return h2 ? (long)(h2 - t->out) : -1;
        }
        t->len += (size_t)n;
        t->out[t->len] = 0;
    }
}

static void term_send(term *t, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(t->fd, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

/* Exit status of the process within `ms` (-1: still running, then killed). */
static int term_end(term *t, int ms) {
    const double end = now_s() + ms / 1000.0;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(t->pid, &status, WNOHANG);
        if (r == t->pid) break;
        if (now_s() > end) {
            kill(t->pid, SIGKILL);
            waitpid(t->pid, &status, 0);
            close(t->fd);
            free(t->out);
            return -1;
        }
        term_wait(t, t->len, NULL, 50); /* drain the terminal */
    }
    close(t->fd);
    free(t->out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The "timings:" line of the last turn (afinar chat --timings), cut out of the answer by turn(). */
static char g_timings[512];

/* Type `line` and Enter at the prompt that ends at offset *at; returns the text written between the
 * echo of the line and the next prompt ("\r" removed, the echo, a "timings:" line and the last
 * newline cut), malloc'ed; *at moves past the new prompt. NULL when no prompt came back in time. */
static char *turn(term *t, size_t *at, const char *line) {
    char in[1024];
    snprintf(in, sizeof in, "%s\n", line);
    term_send(t, in);
    long p = term_wait(t, *at, "\n> ", 180000);
    if (p < 0) return NULL;
    char *s = malloc((size_t)p - *at + 1);
    size_t n = 0;
    for (size_t i = *at; i < (size_t)p; i++)
        if (t->out[i] != '\r') s[n++] = t->out[i];
    s[n] = 0;
    *at = (size_t)p + 3;
    const size_t ll = strlen(line);
    if (!strncmp(s, line, ll) && s[ll] == '\n') memmove(s, s + ll + 1, n - ll); /* the echo */
    n = strlen(s);
    if (n && s[n - 1] == '\n') s[--n] = 0;
    g_timings[0] = 0;
    char *tl = strstr(s, "timings: ");
    if (tl && (tl == s || tl[-1] == '\n')) { /* stderr's line after the answer */
        snprintf(g_timings, sizeof g_timings, "%s", tl);
        *tl = 0;
        n = strlen(s);
        if (n && s[n - 1] == '\n') s[--n] = 0;
    }
    return s;
}

/* stdout of `afinar ARGV...` (the trailing newline removed), malloc'ed; NULL on failure. */
static char *run_capture(char *const argv[]) {
    int pp[2];
    if (pipe(pp)) return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pp[1], 1);
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) dup2(dn, 2);
        close(pp[0]);
        execv(g_bin, argv);
        _exit(127);
    }
    close(pp[1]);
    size_t cap = 1 << 14, len = 0;
    char *s = malloc(cap);
    ssize_t n;
    while (s && (n = read(pp[0], s + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (len + 1 == cap) {
            char *o = realloc(s, cap *= 2);
            if (!o) break;
            s = o;
        }
    }
    close(pp[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!s || !WIFEXITED(status) || WEXITSTATUS(status)) {
        free(s);
        return NULL;
    }
    s[len] = 0;
    if (len && s[len - 1] == '\n') s[len - 1] = 0;
    return s;
}

#define SYS "You are a concise assistant."
#define Q1 "What is the capital of France?"
#define Q2 "And the capital of Spain?"

static void conversation(void) {
    char *argv[] = {"afinar", "chat", "-m", (char *)g_model, "--temp", "0", "-n", "24", "-t", "2",
                    "--system", SYS, "--timings", NULL};
    term t;
    if (!CHECK(term_start(&t, argv), "forkpty: %s", strerror(errno))) return;
    long p = term_wait(&t, 0, "\n> ", 120000);
    if (!CHECK(p >= 0, "the banner and the first prompt: %s", t.out)) {
        term_end(&t, 1000);
        return;
    }
    size_t at = (size_t)p + 3;
    char *a1 = turn(&t, &at, Q1);
    int p1 = -1, k1 = -1, p2 = -1, k2 = -1;
    sscanf(g_timings, "timings: prompt %d tokens, %d reused", &p1, &k1);
    char *a2 = a1 ? turn(&t, &at, Q2) : NULL;
    sscanf(g_timings, "timings: prompt %d tokens, %d reused", &p2, &k2);
    CHECK(p1 > 10 && k1 == 0 && p2 > p1 && k2 >= p1 - 4 && k2 <= p1 + 24,
          "turn 2 reuses the cached keys and values of turn 1's prompt (turn 1: %d tokens, %d reused; turn 2: %d "
          "tokens, %d reused; the answer, decoded token by token, is evaluated again)", p1, k1, p2, k2);
    char *g1 = run_capture((char *[]){"afinar", "generate", "-m", (char *)g_model, "--temp", "0", "-n", "24", "-t", "2",
                                      "--chat", "--system", SYS, "-p", Q1, NULL});
    CHECK(a1 && g1 && a1[0] && !strcmp(a1, g1), "turn 1 == afinar generate --chat: '%s' vs '%s'", a1 ? a1 : "(none)",
          g1 ? g1 : "(none)");
    if (a1) {
        char prompt[4096];
        snprintf(prompt, sizeof prompt,
                 "<|im_start|>system\n" SYS "<|im_end|>\n<|im_start|>user\n" Q1 "<|im_end|>\n<|im_start|>assistant\n"
                 "%s<|im_end|>\n<|im_start|>user\n" Q2 "<|im_end|>\n<|im_start|>assistant\n", a1);
        char *g2 = run_capture((char *[]){"afinar", "generate", "-m", (char *)g_model, "--temp", "0", "-n", "24", "-t",
                                          "2", "-p", prompt, NULL});
        CHECK(a2 && g2 && a2[0] && !strcmp(a2, g2), "turn 2 (cached conversation) == afinar generate on the whole "
              "conversation: '%s' vs '%s'", a2 ? a2 : "(none)", g2 ? g2 : "(none)");
        free(g2);
    }
    char *r = a2 ? turn(&t, &at, "/reset") : NULL;
    CHECK(r && strstr(r, "reset"), "/reset says so: '%s'", r ? r : "(no prompt)");
    char *a3 = r ? turn(&t, &at, Q1) : NULL;
    CHECK(a3 && a1 && !strcmp(a3, a1), "after /reset the first question gets the first answer: '%s'", a3 ? a3 : "");
    char *u = a3 ? turn(&t, &at, "/nonsense") : NULL;
    CHECK(u && strstr(u, "unknown command"), "an unknown /command is named: '%s'", u ? u : "");
    if (u) term_send(&t, "/exit\n");
    CHECK(term_end(&t, 30000) == 0, "/exit: status 0");
    free(a1), free(a2), free(a3), free(g1), free(r), free(u);
}

static void interrupt(void) {
    char *argv[] = {"afinar", "chat", "-m", (char *)g_model, "--temp", "0", "--ignore-eos", "-n", "2000", "-c",
                    "2048", "-t", "2", NULL};
    term t;
    if (!CHECK(term_start(&t, argv), "forkpty: %s", strerror(errno))) return;
    long p = term_wait(&t, 0, "\n> ", 120000);
    if (!CHECK(p >= 0, "the first prompt")) {
        term_end(&t, 1000);
        return;
    }
    term_send(&t, "Tell me a long story about a lighthouse.\n");
    const size_t at = (size_t)p + 3 + 42; /* past the echo */
    long a = term_wait(&t, at, " ", 120000); /* the answer streams */
    CHECK(a >= 0, "the answer starts");
    term_send(&t, "\x03");
    long s = term_wait(&t, at, "(answer stopped)", 60000);
    long q = s >= 0 ? term_wait(&t, (size_t)s, "\n> ", 60000) : -1;
    CHECK(s >= 0 && q >= 0, "Ctrl-C stops the answer and the prompt comes back: ...%s",
          t.out + (t.len > 300 ? t.len - 300 : 0));
    CHECK(waitpid(t.pid, NULL, WNOHANG) == 0, "the program goes on after Ctrl-C during an answer");
    term_send(&t, "\x03");
    CHECK(term_end(&t, 30000) == 130, "Ctrl-C at the prompt ends the program with status 130");

    char *argv2[] = {"afinar", "chat", "-m", (char *)g_model, "-t", "2", NULL};
    if (!CHECK(term_start(&t, argv2), "forkpty")) return;
    p = term_wait(&t, 0, "\n> ", 120000);
    CHECK(p >= 0, "the first prompt (second run)");
    term_send(&t, "\x04");
    CHECK(term_end(&t, 30000) == 0, "end of input (Ctrl-D) at the prompt: status 0");
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || access(bin, X_OK) != 0 || !realpath(bin, g_bin)) {
        tl_skip("chat: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("test_chat");
    }
    g_model = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!g_model) return tl_finish("test_chat");
    signal(SIGPIPE, SIG_IGN);
    conversation();
    interrupt();
    return tl_finish("test_chat");
}
