/*
 * serve_testkit.h — what the tests of `afinar serve` share (test_serve.c, test_serve_api.c): a
 * minimal HTTP/1.1 client over loopback (Connection: close; chunked bodies joined), the JSON and
 * server-sent-event helpers, running the CLI, and the server process on a tiny model (--port 0,
 * the port read from its "listening on" line; SIGTERM to stop). Include it once, after testlib.h
 * and tinymodel.c; it defines static functions and the globals g_dir (the test's folder), g_bin,
 * g_port, g_pid, g_auth, g_bare.
 */
#ifndef AF_SERVE_TESTKIT_H
#define AF_SERVE_TESTKIT_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"


#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64], g_bin[4096];
static int g_port;
static pid_t g_pid;
static const char *g_auth; /* a header line ("Authorization: ...\r\n") the requests send, or NULL */
static int g_bare;         /* 1: start_server loads no adapter */

#define P_(name) tl_join(g_dir, (name)) /* g_dir/name (testlib.h) */

/* ---- HTTP over loopback (Connection: close; the whole response) ---- */
typedef struct resp {
    int status;
    char *body; /* malloc'ed */
} resp;

static int connect_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return 0;
        p += w, n -= (size_t)w;
    }
    return 1;
}

static resp http(const char *method, const char *path, const char *body) {
    resp r = {-1, NULL};
    int fd = connect_port();
    if (fd < 0) return r;
    struct timeval tv = {120, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char head[512];
    const size_t bl = body ? strlen(body) : 0;
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                                "%sContent-Length: %zu\r\n\r\n", method, path, g_auth ? g_auth : "", bl);
    if (!send_all(fd, head, strlen(head)) || (bl && !send_all(fd, body, bl))) {
        close(fd);
        return r;
    }
    size_t len = 0, cap = 4096;
    char *b = malloc(cap);
    ssize_t k;
    while (b && (k = recv(fd, b + len, cap - len - 1, 0)) > 0) {
        len += (size_t)k;
        if (len + 1 == cap) b = realloc(b, cap *= 2);
    }
    close(fd);
    if (!b) return r;
    b[len] = 0;
    sscanf(b, "HTTP/1.%*d %d", &r.status);
    char *sep = strstr(b, "\r\n\r\n");
    r.body = strdup(sep ? sep + 4 : "");
    /* chunked transfer (streams): drop the chunk-size lines */
    if (strstr(b, "Transfer-Encoding: chunked") || strstr(b, "transfer-encoding: chunked")) {
        char *o = r.body, *p = r.body, *w = r.body;
        while (*p) {
            long n = strtol(p, &o, 16);
            if (o == p || n <= 0) break;
            p = strstr(o, "\r\n");
            if (!p) break;
            p += 2;
            memmove(w, p, (size_t)n);
            w += n, p += n;
            if (!strncmp(p, "\r\n", 2)) p += 2;
        }
        *w = 0;
    }
    free(b);
    return r;
}

/* The string value of "key": in a JSON text (first occurrence, JSON escapes \n \" \\ \uXXXX<0x80
 * decoded), malloc'ed; NULL if absent. Enough for the responses of this test. */
static char *json_str(const char *js, const char *key, const char **after) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = js ? strstr(js, pat) : NULL;
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(strlen(p) + 1), *o = out;
    while (*p && *p != '"') {
        if (*p == '\\' && p[1]) {
            p++;
            if (*p == 'n') *o++ = '\n';
            else if (*p == 't') *o++ = '\t';
            else if (*p == 'r') *o++ = '\r';
            else if (*p == 'u') {
                unsigned v = 0;
                sscanf(p + 1, "%4x", &v);
                *o++ = (char)v;
                p += 4;
            } else *o++ = *p;
            p++;
        } else *o++ = *p++;
    }
    *o = 0;
    if (after) *after = p;
    return out;
}

/* All "text"/"content" deltas of an SSE body concatenated. */
static char *sse_text(const char *body, const char *key, int *n_events, int *done) {
    size_t cap = 1 << 16;
    char *acc = calloc(1, cap);
    *n_events = 0;
    *done = strstr(body, "data: [DONE]") != NULL;
    const char *p = body;
    while ((p = strstr(p, "data: {"))) {
        (*n_events)++;
        const char *e = strstr(p, "\n\n");
        char *ev = strndup(p, e ? (size_t)(e - p) : strlen(p));
        char *t = json_str(ev, key, NULL);
        if (t && strlen(acc) + strlen(t) < cap) strcat(acc, t);
        free(t);
        free(ev);
        p = e ? e : p + 6;
    }
    return acc;
}

/* ---- running the CLI ---- */
static char *run_cli(char *const argv[], int *rc) {
    int po[2];
    if (pipe(po) != 0) return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(po[1], 1);
        int dn = open("/dev/null", O_WRONLY);
        dup2(dn, 2);
        close(po[0]);
        execv(g_bin, argv);
        _exit(127);
    }
    close(po[1]);
    size_t len = 0, cap = 4096;
    char *b = malloc(cap);
    ssize_t k;
    while ((k = read(po[0], b + len, cap - len - 1)) > 0) {
        len += (size_t)k;
        if (len + 1 == cap) b = realloc(b, cap *= 2);
    }
    b[len] = 0;
    close(po[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return b;
}

/* `afinar generate` text (its trailing newline removed). */
static char *generate(const char *adapter, const char *prompt, int n, const char *temp, const char *top_p, const char *seed) {
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n);
    char *av[32];
    int k = 0;
    av[k++] = "afinar", av[k++] = "generate", av[k++] = "-m", av[k++] = (char *)P_("tiny.gguf");
    av[k++] = "-p", av[k++] = (char *)prompt, av[k++] = "-n", av[k++] = nb, av[k++] = "--temp", av[k++] = (char *)temp;
    av[k++] = "--top-k", av[k++] = "0", av[k++] = "--top-p", av[k++] = (char *)top_p, av[k++] = "--seed", av[k++] = (char *)seed;
    av[k++] = "-t", av[k++] = "1";
    if (adapter) av[k++] = "-a", av[k++] = (char *)adapter;
    av[k] = NULL;
    int rc = 0;
    char *out = run_cli(av, &rc);
    CHECK(rc == 0, "generate exit %d", rc);
    size_t l = out ? strlen(out) : 0;
    if (l && out[l - 1] == '\n') out[--l] = 0;
    /* the server drops a trailing incomplete UTF-8 character (max_tokens cut inside it): so here */
    for (size_t q = 1; q <= 4 && q <= l; q++) {
        const unsigned char c = (unsigned char)out[l - q];
        if ((c & 0xC0) == 0x80) continue;
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > q) out[l - q] = 0;
        break;
    }
    return out;
}

static char *complete(const char *extra, const char *prompt, int n, const char *temp, const char *top_p, const char *seed,
                      int stream) {
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%s,\"top_p\":%s,\"seed\":%s%s%s}",
             prompt, n, temp, top_p, seed, stream ? ",\"stream\":true" : "", extra ? extra : "");
    resp r = http("POST", "/v1/completions", body);
    CHECK(r.status == 200, "completion %s: status %d: %s", body, r.status, r.body ? r.body : "");
    char *t = NULL;
    if (stream) {
        int ne = 0, done = 0;
        t = sse_text(r.body ? r.body : "", "text", &ne, &done);
        CHECK(done && ne >= 2, "stream ends with [DONE] (%d events)", ne);
    } else {
        t = json_str(r.body, "text", NULL);
    }
    free(r.body);
    return t ? t : strdup("<none>");
}

/* ---- the server process ---- */
/* The setup both serve test programs share: the afinar binary from AFINAR_BIN (make test sets it),
 * the test's folder g_dir (/tmp/<name>_XXXXXX) and the tiny byte-level llama model tiny.gguf in it
 * (vocab 256 + 2 extra tokens, seed 5, n_ctx positions), loaded into *m.
 * Returns 1 ready, 0 skipped (no binary: tl_skip recorded), -1 failed (g_dir empty when the folder
 * could not be made; else a CHECK recorded it, and *m may be set: the caller frees it). */
static int stk_setup(const char *name, int n_ctx, af_model **m) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || access(bin, X_OK) != 0 || !realpath(bin, g_bin)) {
        tl_skip("%s: AFINAR_BIN not set or not executable (make test sets it)", name);
        return 0;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/af_%s_XXXXXX", name);
    if (!mkdtemp(g_dir)) {
        g_dir[0] = 0; /* no folder: nothing to remove */
        return -1;
    }
    static const char *const extra[2] = {"ab", "<|endoftext|>"};
    static const char *const merges[1] = {"a b"};
    tm_spec sp = tm_default("llama", AF_TYPE_Q8_0);
    sp.vocab = 256 + 2;
    sp.seed = 5;
    if (n_ctx > 0) sp.n_ctx = n_ctx;
    if (!CHECK(tm_write_bpe(&sp, P_("tiny.gguf"), extra, 2, merges, 1) == AF_OK, "tiny model") ||
        !CHECK(af_model_load(T_CTX, P_("tiny.gguf"), m) == AF_OK, "load: %s", af_last_error()))
        return -1;
    return 1;
}

static int start_server(const char *extra_args) {
    char cmd[8192];
    if (g_bare)
        snprintf(cmd, sizeof cmd, "exec %s serve -m %s --port 0 -t 1 --ctx 128 --max-body 4096 %s", g_bin, P_("tiny.gguf"),
                 extra_args);
    else
        snprintf(cmd, sizeof cmd, "exec %s serve -m %s --adapter lm=%s --adapter cls=%s --port 0 -t 1 --ctx 128 --max-body 4096 %s",
                 g_bin, P_("tiny.gguf"), P_("lm"), P_("cls"), extra_args);
    const char *log = P_("server.log");
    unlink(log);
    g_pid = fork();
    if (g_pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        int dn = open("/dev/null", O_RDONLY);
        dup2(dn, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) { /* up to 60 s (sanitizer builds load slowly) */
        usleep(100000);
        char *t = tl_read_file(log, NULL);
        const char *p = t ? strstr(t, "listening on http://127.0.0.1:") : NULL;
        if (p) {
            g_port = atoi(p + strlen("listening on http://127.0.0.1:"));
            free(t);
            return 1;
        }
        if (t && strstr(t, "not built in")) {
            free(t);
            return -1;
        }
        free(t);
        int st;
        if (waitpid(g_pid, &st, WNOHANG) == g_pid) return 0;
    }
    return 0;
}

static int stop_server(void) {
    kill(g_pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 600; i++) {
        if (waitpid(g_pid, &st, WNOHANG) == g_pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        usleep(100000);
    }
    kill(g_pid, SIGKILL);
    waitpid(g_pid, &st, 0);
    return -1000;
}

#pragma GCC diagnostic pop

#endif
