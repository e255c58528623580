/* afinar train / afinar check — LoRA fine-tuning of a sequence classifier, and the dry run that
 * only reads the model's tokenizer and the data and prints statistics and diagnostics.
 * Flags: cli/train_opts.h. Library: src/train/trainer.h. */
#include "cli.h"
#include "train_opts.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupt;
static volatile sig_atomic_t g_signal; /* the signal that asked to stop (SIGINT or SIGTERM) */

/* SIGINT (Ctrl-C) and SIGTERM (docker stop, systemd, timeout, batch schedulers) alike: finish the
 * step, save a checkpoint, exit 128 + signal (130, 143). A second signal ends the process at once. */
static void on_stop_signal(int sig) {
    g_interrupt = 1;
    g_signal = sig;
    static const char msg_int[] = "\nafinar train: interrupt: finishing this step and saving a checkpoint "
                                  "(Ctrl-C again to abort without saving)\n";
    static const char msg_term[] = "\nafinar train: terminated (SIGTERM): finishing this step and saving a checkpoint "
                                   "(a second signal aborts without saving)\n";
    ssize_t w = sig == SIGTERM ? write(STDERR_FILENO, msg_term, sizeof msg_term - 1)
                               : write(STDERR_FILENO, msg_int, sizeof msg_int - 1);
    (void)w;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

int cmd_train(int argc, char **argv) {
    const char *C = "train";
    train_cli tc;
    int rc = train_cli_parse_required(C, argc, argv, &tc);
    if (rc != 0) return rc < 0 ? 0 : rc;
    af_trainer_opts *o = &tc.opts;
    if (!o->output_dir && !o->resume) {
        cli_error(C, "missing -o DIR (the output directory)");
        train_cli_free(&tc);
        return 2;
    }
    o->log = stderr;
    o->interrupt = &g_interrupt;
    af_trainer *t = NULL;
    af_status st = af_trainer_new(o, &t);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto done;
    }
    af_trainer_report(t, stderr);
    if (af_trainer_has_errors(t)) {
        cli_error(C, "not training: fix the errors above (or run 'afinar check' to iterate on the settings)");
        rc = 1;
        goto done;
    }
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    af_train_result res;
    st = af_trainer_run(t, &res);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (st != AF_OK) rc = cli_fail(C, st);
    else rc = res.stop == AF_STOP_INTERRUPTED ? (g_signal == SIGTERM ? 143 : 130) : 0;
done:
    af_trainer_free(t);
    train_cli_free(&tc);
    return rc;
}
