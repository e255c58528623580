/* afinar — command-line tool: dispatches subcommands. Exit codes: 0 success, 1 failure,
 * 2 usage error, 130 interrupted (SIGINT), 143 terminated (SIGTERM). Every write to stdout is
 * checked, the last flush and close included: lost output is exit status 1. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "afinar %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const char *g_quantize; /* cli_set_quantize */
void cli_set_quantize(const char *name) { g_quantize = name; }
static const char *g_device; /* cli_set_device */
void cli_set_device(const char *name) { g_device = name; }

int cli_fallback_cpu(const char *cmd, af_ctx **ctx, af_ctx **old, af_status st) {
    if (!af_ctx_falls_back(*ctx, st)) return 0;
    af_ctx *cpu = NULL;
    char msg[900];
    snprintf(msg, sizeof msg, "%s", af_last_error());
    if (af_ctx_new_cpu(*ctx, 1, &cpu) != AF_OK) return 0;
    fprintf(stderr, "afinar %s: %s; --device auto: going on on the CPU\n", cmd, msg);
    *old = *ctx;
    *ctx = cpu;
    return 1;
}

int cli_make_ctx(const char *cmd, long threads, long poll_us, const char *kernel, int bf16, int int8_act, af_ctx **out) {
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.quantize = g_quantize;
    p.device = g_device;
    p.n_threads = (int)threads;
    if (poll_us >= 0) p.poll_us = (int)poll_us;
    p.kernel_path = kernel;
    p.int8_activations = int8_act;
    if (bf16) p.matmul_precision = "bf16";
    af_ctx_report rep;
    af_status st = af_ctx_open(&p, out, &rep);
    if (st != AF_OK) { /* the setting refused, named by its flag */
        const int dev = rep.field == AF_CTX_SETTING_DEVICE;
        cli_error(cmd, "%s%s", rep.field == AF_CTX_SETTING_KERNEL ? "--kernel: " : dev ? "--device: " : "", af_last_error());
        return dev && st != AF_ERR_INVALID_ARG ? 1 : 2;
    }
    if (rep.bf16_slower)
        fprintf(stderr, "afinar %s: warning: --bf16: bf16 products are slower than f32 on this CPU (measured "
                        "%.0f vs %.0f GFLOP/s, %d threads); using bf16 as asked, drop --bf16 to go faster\n",
                cmd, rep.bf16_gflops, rep.f32_gflops, af_ctx_n_threads(*out));
    if (rep.bf16_fallback) fprintf(stderr, "afinar %s: warning: --bf16: %s; using f32 products\n", cmd, rep.bf16_why);
    if (rep.device_line[0]) fprintf(stderr, "afinar %s: --device auto: %s\n", cmd, rep.device_line);
    return 0;
}

/* ---- signals (cli.h) ---- */
static volatile sig_atomic_t g_stop_sig, g_graceful;
_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "sig_atomic_t is int");

void cli_signal_exit(int sig) {
    af_remove_temporaries(); /* unlink + rmdir only */
    static const char m_int[] = "\nafinar: interrupted (SIGINT): stopped at once, temporary files removed\n";
    static const char m_term[] = "\nafinar: terminated (SIGTERM): stopped at once, temporary files removed\n";
    ssize_t w = sig == SIGTERM ? write(STDERR_FILENO, m_term, sizeof m_term - 1)
                               : write(STDERR_FILENO, m_int, sizeof m_int - 1);
    (void)w;
    _exit(128 + sig);
}

static void on_stop_signal(int sig) {
    if (g_graceful && !g_stop_sig) {
        g_stop_sig = sig;
        return;
    }
    cli_signal_exit(sig);
}

void cli_catch_signals(const char *cmd) {
    (void)cmd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked read returns (EINTR) and the command sees the flag */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cli_graceful_stop(int on) { g_graceful = on; }
volatile int *cli_stop_flag(void) { return (volatile int *)&g_stop_sig; }
int cli_stop_signal(void) { return (int)g_stop_sig; }
void cli_clear_stop(void) { g_stop_sig = 0; }

int cli_stopped(const char *cmd, const char *what) {
    const int sig = (int)g_stop_sig;
    fprintf(stderr, "afinar %s: %s%s%s; nothing more is written\n", cmd,
            sig == SIGTERM ? "terminated (SIGTERM)" : "interrupted (SIGINT)", what && *what ? ": " : "",
            what ? what : "");
    return 128 + (sig ? sig : SIGINT);
}

static int g_stdout_reported;

int cli_stdout_failed(const char *cmd) {
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    if (bad && !g_stdout_reported) {
        g_stdout_reported = 1;
        fprintf(stderr, "afinar %s: cannot write to stdout: %s\n", cmd, strerror(errno ? errno : EIO));
    }
    return bad;
}

/* The last flush and close of stdout, checked: a command whose output was lost exits 1. */
static int finish_stdout(const char *cmd, int rc) {
    if (cli_stdout_failed(cmd)) return rc ? rc : 1;
    errno = 0;
    if (fclose(stdout) != 0) {
        if (!g_stdout_reported)
            fprintf(stderr, "afinar %s: cannot write to stdout: %s\n", cmd, strerror(errno ? errno : EIO));
        return rc ? rc : 1;
    }
    return rc;
}

const char *tok_reason(const af_model *m, const char *model_path) {
    const char *why = af_model_tokenizer_error(m);
    if (!why) return "unknown reason";
    size_t lp = model_path ? strlen(model_path) : 0;
    if (lp && !strncmp(why, model_path, lp) && !strncmp(why + lp, ": ", 2)) why += lp + 2;
    return why;
}

int cli_fail(const char *cmd, af_status st) {
    const char *msg = af_last_error();
    fprintf(stderr, "afinar %s: %s\n", cmd, (msg && *msg) ? msg : af_status_name(st));
    return 1;
}

int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_error(cmd, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

/* Every command: name, synopsis, one-line summary (wrapped by usage()), entry point. The general
 * help, `afinar help CMD` and the dispatch read this one table. */
typedef struct command {
    const char *name, *synopsis, *summary;
    int (*run)(int argc, char **argv);
} command;

static int cmd_version(int argc, char **argv);

static const command g_commands[] = {
    {"info", "FILE|DIR", "describe a GGUF file or HF directory: architecture, hyper-parameters, tokenizer, tensors",
     cmd_info},
    {"generate", "-m MODEL -p TEXT [options]", "generate text, streamed (--chat: with the chat template; --temp 0: greedy)",
     cmd_generate},
    {"chat", "-m MODEL [-a ADAPTER] [options]",
     "talk to a chat model in the terminal (multi-turn; /reset, /system TEXT, /exit; Ctrl-C stops an answer)", cmd_chat},
    {"train", "-m MODEL --train DATA -o DIR [options]",
     "LoRA fine-tuning: a text classifier (the default) or a chat / text model (--task causal-lm)", cmd_train},
    {"check", "-m MODEL --train DATA [options]",
     "data statistics and diagnostics of a training configuration, without training (exit 1 on errors)", cmd_check},
    {"eval", "-m MODEL -a ADAPTER --data DATA [options]",
     "classifier: accuracy, macro-F1, per-class table, confusion matrix; causal-LM: loss, perplexity, generations",
     cmd_eval},
    {"predict", "-m MODEL -a ADAPTER [--data DATA] [options]", "one JSON line per input text (stdin lines without --data)",
     cmd_predict},
    {"export", "-m MODEL -a ADAPTER -o OUT.gguf", "the adapter as a llama.cpp LoRA GGUF (llama-cli --lora, Ollama ADAPTER)",
     cmd_export},
    {"merge", "-m MODEL -a ADAPTER -o OUT.gguf [--type T]", "fold the adapter into the model, re-quantized (a standalone GGUF)",
     cmd_merge},
    {"merge-adapters", "A B ... -o OUT [--method M] [options]", "merge LoRA adapters on their ΔW (linear, cat, ties, dare-ties, ...)",
     cmd_merge_adapters},
    {"serve", "-m MODEL [-a NAME=DIR ...] [--port P] [options]",
     "OpenAI-compatible HTTP server (chat, completions, streaming, per-request adapters, classification)", cmd_serve},
    {"convert", "DIR -o OUT.gguf [--type T]", "a Hugging Face checkpoint directory as a GGUF (llama.cpp names, tokenizer)",
     cmd_convert},
    {"devices", "", "the compute devices of every backend (cpu, vulkan) with memory and features", cmd_devices},
    {"version", "", "version, the optional parts built in (Vulkan, MPI, serve) and the CPU features", cmd_version},
};
#define N_COMMANDS ((int)(sizeof g_commands / sizeof g_commands[0]))

static const command *find_command(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(g_commands[i].name, name)) return &g_commands[i];
    return NULL;
}

static void usage(FILE *fp) {
    fprintf(fp,
            "afinar %s — fine-tune and run transformer language models (GGUF files, HF directories)\n"
            "\n"
            "usage: afinar <command> [options]\n"
            "       afinar help <command>      (the same as afinar <command> --help)\n"
            "\n"
            "commands:\n",
            af_version());
    for (int i = 0; i < N_COMMANDS; i++) {
        const command *c = &g_commands[i];
        char head[96];
        snprintf(head, sizeof head, "%s %s", c->name, c->synopsis);
        int col = fprintf(fp, "  %s", head);
        if (col > 20) col = fprintf(fp, "\n%21s", "") - 1;
        else col += fprintf(fp, "%*s", 21 - col, "");
        /* the summary's words, wrapped at 100 columns under the summary column */
        for (const char *w = c->summary; *w;) {
            size_t n = strcspn(w, " ");
            if (col > 21 && col + 1 + (int)n > 100) col = fprintf(fp, "\n%21s", "") - 1;
            else if (col > 21) col += fprintf(fp, " ");
            col += fprintf(fp, "%.*s", (int)n, w);
            w += n;
            while (*w == ' ') w++;
        }
        fputc('\n', fp);
    }
    fprintf(fp,
            "\n"
            "MODEL is a GGUF file or a Hugging Face checkpoint directory. Exit status: 0 success, 1 failure,\n"
            "2 usage error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n"
            "\n"
            "multi-process training: mpirun -np N afinar train ... (or srun): data parallel, the same adapter\n"
            "bytes for any N ('afinar version' says whether MPI is built in).\n");
}

/* afinar version: the version, the optional parts built in, the CPU features. */
static int cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: afinar version\n\n"
               "Prints the version, the optional parts built in (serve: libmicrohttpd; MPI; Vulkan with the\n"
               "number of devices it sees, software renderers included) and the CPU features detected.\n");
        return 0;
    }
    if (argc > 1) {
        cli_error("version", "unexpected argument '%s'", argv[1]);
        return 2;
    }
    af_ctx *ctx = NULL;
    if (af_ctx_new(NULL, &ctx) != AF_OK) return cli_fail("version", AF_ERR_NOMEM);
    printf("afinar %s\n", af_version());
    printf("serve: %s\n", af_server_available() ? "built in (libmicrohttpd)" : "not built in (libmicrohttpd-dev absent)");
    printf("mpi: %s\n", af_dist_library() ? af_dist_library() : "not built in (libopenmpi-dev absent)");
    for (int32_t i = 0; i < af_backend_count(); i++) {
        const char *nm = af_backend_name(i);
        if (!strcmp(nm, "cpu")) continue;
        int32_t n = 0;
        char why[400] = "";
        af_device_info d[8];
        if (af_backend_devices(i, d, 8, &n, why, sizeof why) != AF_OK) continue;
        if (n <= 0) {
            printf("%s: %s\n", nm, why[0] ? why : "no device");
            continue;
        }
        printf("%s: built in, %d device%s:", nm, (int)n, n > 1 ? "s" : "");
        for (int32_t k = 0; k < n && k < 8; k++) printf("%s %s [%s]", k ? ";" : "", d[k].name, d[k].kind);
        printf(" ('afinar devices' for details)\n");
    }
    printf("cpu: %s\nthreads: %d\n", af_ctx_describe(ctx), af_ctx_n_threads(ctx));
    af_ctx_free(ctx);
    return 0;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv) {
    /* A file size limit (ulimit -f) makes write(2) fail with EFBIG, reported and cleaned up like
     * any failed write, instead of killing the process with SIGXFSZ mid-file. */
    signal(SIGXFSZ, SIG_IGN);
    /* SIGINT / SIGTERM: end at once with temporaries removed, unless the command stops cleanly */
    cli_catch_signals(argc >= 2 ? argv[1] : "");
    int rc = run_command(argc, argv);
    return finish_stdout(argc >= 2 ? argv[1] : "", rc);
}

static int run_command(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || (!strcmp(cmd, "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help")) { /* afinar help CMD == afinar CMD --help */
        const command *c = find_command(argv[2]);
        if (!c || argc > 3) {
            fprintf(stderr, "afinar help: %s '%s' (see 'afinar --help')\n", c ? "unexpected argument" : "unknown command",
                    c ? argv[3] : argv[2]);
            return 2;
        }
        char *hargv[] = {argv[2], "--help", NULL};
        return c->run(2, hargv);
    }
    if (!strcmp(cmd, "--version")) cmd = "version";
    const command *c = find_command(cmd);
    if (c) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "afinar: unknown command '%s' (see 'afinar --help')\n", cmd);
    return 2;
}
