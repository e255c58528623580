/* cli.h — shared helpers of the afinar command-line tool. */
#ifndef AF_CLI_H
#define AF_CLI_H

#include "afinar.h"
#include "afinar_app.h"

/* Print "afinar <cmd>: <message>" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Report a failed library call: "afinar <cmd>: <af_last_error()>" and return the exit code 1. */
int cli_fail(const char *cmd, af_status st);
/* The command's context from its flags (af_ctx_open): -t/--threads (0: all cores), --poll (< 0: the
 * default spin window of af_ctx_params), --kernel (NULL: auto), --bf16 (where the CPU cannot: a
 * warning on stderr and f32, the command goes on), --int8-act, and the --device given to
 * cli_set_device. With --device auto: one line on stderr saying which device it runs on (or why
 * the CPU). Errors are printed, the refused setting named by its flag (af_ctx_report.field);
 * returns the exit code then (2: a bad --kernel, --quantize or --device name; 1: a device that
 * cannot be opened), else 0 with *out set (caller frees with af_ctx_free after the models loaded
 * with it). */
int cli_make_ctx(const char *cmd, long threads, long poll_us, const char *kernel, int bf16, int int8_act, af_ctx **out);
/* --device DEV of the commands that compute: the next cli_make_ctx contexts get
 * af_ctx_params.device = name (NULL: cpu). */
void cli_set_device(const char *name);
#define CLI_DEVICE_HELP \
    "      --device DEV       cpu (default) | vulkan | vulkan:N | auto (a Vulkan GPU when there is one and\n" \
    "                         the job fits it, never a software device, else the CPU; a device failure\n" \
    "                         goes on on the CPU);\n" \
    "                         'afinar devices' lists them\n"
/* After a failure `st` of work on *ctx (made by cli_make_ctx): when the library's fallback rule
 * allows it (af_ctx_falls_back: --device auto, on a device, st a device failure, a job that does not
 * fit or that the device cannot run), prints one line ("... --device auto: going on on the CPU") and makes a CPU
 * context with the same settings: *old gets the device context (the caller frees it after the
 * objects made with it), *ctx the new one; returns 1. Else 0 (nothing changed). */
int cli_fallback_cpu(const char *cmd, af_ctx **ctx, af_ctx **old, af_status st);
/* --quantize TYPE of eval / predict / generate: the next cli_make_ctx contexts get
 * af_ctx_params.quantize = name (NULL: none). */
void cli_set_quantize(const char *name);
#define CLI_QUANTIZE_HELP \
    "      --quantize TYPE    quantize the base model's f32/f16/bf16 projections at load: nf4 (QLoRA\n" \
    "                         NormalFloat4), q8_0, f16, bf16 (default none)\n"
/* Parse numbers strictly (whole string); on failure print a message naming the flag and return 0. */
int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);

/* Output errors: flush stdout and check it. On a failed write (EPIPE with
 * SIGPIPE ignored, ENOSPC, EFBIG, /dev/full ...) print "afinar <cmd>: cannot write to stdout: <strerror>"
 * once and return 1 (the caller stops and exits 1); 0 while all is well. */
int cli_stdout_failed(const char *cmd);

/* Signals. main() routes SIGINT and SIGTERM of every command through one handler:
 * by default a signal ends the process at once: the temporaries of af_atomic_open and the
 * registered temporary directories are removed (af_remove_temporaries), one line goes to stderr,
 * exit status 128 + signal (130, 143). A command that can stop cleanly calls
 * cli_graceful_stop(1) before its long loop: the first signal then only sets the flag that
 * cli_stop_flag() points to (give it to af_ctx_set_interrupt; the library stops between batches
 * with AF_ERR_CANCELLED) and cli_stop_signal() returns; a second signal ends at once as above.
 * Slow system calls are interrupted (no SA_RESTART), so a read from a terminal returns. */
void cli_catch_signals(const char *cmd);
void cli_graceful_stop(int on);
volatile int *cli_stop_flag(void);
/* The signal that asked to stop (0: none). */
int cli_stop_signal(void);
/* The end of a stopped command: "afinar CMD: interrupted by SIGINT|SIGTERM[: what]; nothing more is
 * written" on stderr; returns 128 + the signal. */
int cli_stopped(const char *cmd, const char *what);
/* Async-signal-safe: remove the temporaries, print "afinar: stopped by signal N" and _exit(128 + sig). */
void cli_signal_exit(int sig) __attribute__((noreturn));

/* Why the model has no tokenizer, without a leading "<model_path>: " (said once by the caller). */
const char *tok_reason(const af_model *m, const char *model_path);

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_merge_adapters(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* `afinar eval --generate N` (causal-LM data): parsed by cmd_eval, run by cmd_eval_generate. */
typedef struct eval_gen_args {
    const char *model, *adapter, *data, *json_out; /* adapter NULL: the base model */
    double lora_scale;
    long n_generate, max_new_tokens, show, threads; /* n_generate < 0: no generation */
    int first_line, bf16;
    long batch, max_seq_len;                   /* loss evaluation: examples per batch, truncation */
    const char *loss_on, *chat_template;       /* af_lm_data_opts (NULL: defaults) */
    long poll_us;                              /* --poll (-1: default) */
} eval_gen_args;
int cmd_eval_generate(const eval_gen_args *a);

#endif
