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

static void usage(FILE *fp) {
    fprintf(fp,
            "afinar %s — fine-tune and run transformer language models (GGUF)\n"
            "\n"
            "usage: afinar <command> [options]\n"
            "\n"
            "commands:\n"
            "  info FILE|DIR      describe a GGUF file or HF directory: architecture, hyper-parameters, tokenizer, tensors\n"
            "  generate -m FILE -p TEXT [options]\n"
            "                     generate text (streams tokens; --temp 0 is greedy)\n"
            "  train -m FILE --train DATA.jsonl -o DIR [options]\n"
            "                     fine-tune a LoRA sequence classifier (checkpoints, best/, metrics.jsonl)\n"
            "  check -m FILE --train DATA.jsonl [options]\n"
            "                     data statistics and diagnostics of a training configuration (exit 1 on errors)\n"
            "  eval -m FILE -a ADAPTER --data DATA.jsonl [--json OUT.json]\n"
            "                     accuracy, macro-F1, per-class table, confusion matrix, calibration\n"
            "  predict -m FILE -a ADAPTER [--input DATA.jsonl]\n"
            "                     one JSON line per input text (stdin lines without --input)\n"
            "  export -m FILE -a ADAPTER -o OUT.gguf\n"
            "                     the adapter as a llama.cpp LoRA GGUF (llama-cli --lora, Ollama ADAPTER)\n"
            "  merge -m FILE -a ADAPTER -o OUT.gguf [--type keep|f16|q8_0|q4_k|...]\n"
            "                     fold the adapter into the model, re-quantized (a standalone GGUF)\n"
            "  merge-adapters A B ... -o OUT [--method M] [--weights W,...] [--density D] [--rank R]\n"
            "                     merge LoRA adapters on their ΔW (linear, cat, ties, dare-ties, ...)\n"
            "  devices            the compute devices of every backend (cpu, vulkan) with memory and features\n"
            "  serve -m FILE [--adapter NAME=DIR ...] [--port P]\n"
            "                     OpenAI-compatible HTTP server (chat, completions, streaming, per-request adapters)\n"
            "  convert DIR -o OUT.gguf [--type keep|f16|q8_0|q4_k|...]\n"
            "                     a Hugging Face checkpoint directory as a GGUF (llama.cpp names, tokenizer)\n"
            "  version            print version and the CPU features detected\n"
            "\n"
            "Run 'afinar <command> --help' for the options of a command.\n"
            "\n"
            "multi-process training: mpirun -np N afinar train ... (or srun): data parallel, the same adapter\n"
            "bytes for any N; %s\n",
            af_version(),
            af_dist_library() ? "MPI built in" : "MPI is NOT built in (rebuild with libopenmpi-dev installed)");
    if (af_dist_library()) fprintf(fp, "MPI library: %s\n", af_dist_library());
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
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        af_ctx *ctx = NULL;
        if (af_ctx_new(NULL, &ctx) != AF_OK) return cli_fail(cmd, AF_ERR_NOMEM);
        printf("afinar %s\ncpu: %s\nthreads: %d\n", af_version(), af_ctx_describe(ctx), af_ctx_n_threads(ctx));
        af_ctx_free(ctx);
        return 0;
    }
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "predict")) return cmd_predict(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "merge")) return cmd_merge(argc - 1, argv + 1);
    if (!strcmp(cmd, "merge-adapters")) return cmd_merge_adapters(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    fprintf(stderr, "afinar: unknown command '%s' (see 'afinar --help')\n", cmd);
    return 2;
}
