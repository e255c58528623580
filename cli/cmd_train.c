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
 * step, save a checkpoint, exit 128 + signal (130, 143). A second signal ends the process at once,
 * the checkpoint being written (a hidden temporary directory) removed. */
static void on_stop_signal(int sig) {
    if (g_interrupt) cli_signal_exit(sig);
    g_interrupt = 1;
    g_signal = sig;
    static const char msg_int[] = "\nafinar train: interrupt: finishing this step and saving a checkpoint "
                                  "(Ctrl-C again to abort without saving)\n";
    static const char msg_term[] = "\nafinar train: terminated (SIGTERM): finishing this step and saving a checkpoint "
                                   "(a second signal aborts without saving)\n";
    ssize_t w = sig == SIGTERM ? write(STDERR_FILENO, msg_term, sizeof msg_term - 1)
                               : write(STDERR_FILENO, msg_int, sizeof msg_int - 1);
    (void)w;
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
    /* Under mpirun / srun: one rank of a data-parallel run (af_trainer_run splits every step over
     * the ranks); rank 0 alone prints and writes. A rank that fails stops the whole job. */
    af_dist_info di;
    af_status st = af_dist_init(&di);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        train_cli_free(&tc);
        return rc;
    }
    o->log = di.rank == 0 ? stderr : NULL;
    o->interrupt = &g_interrupt;
    af_trainer *t = NULL;
    st = af_trainer_new(o, &t);
    if (st != AF_OK) {
        if (di.world_size > 1) cli_error(C, "rank %d of %d, before the first step:", di.rank, di.world_size);
        rc = cli_fail(C, st);
        goto done;
    }
    if (di.rank == 0) af_trainer_report(t, stderr);
    if (af_trainer_has_errors(t)) {
        if (di.rank == 0)
            cli_error(C, "not training: fix the errors above (or run 'afinar check' to iterate on the settings)");
        rc = 1;
        goto done;
    }
    /* Under a multi-process launcher SIGTERM means another rank died or the job was cancelled: the
     * step cannot finish, so af_dist_init's handler (one line naming the step and the last good
     * checkpoint, then exit) stays; one process saves first. */
    const int own_term = di.world_size <= 1;
    signal(SIGINT, on_stop_signal);
    if (own_term) signal(SIGTERM, on_stop_signal);
    af_train_result res;
    st = af_trainer_run(t, &res);
    signal(SIGINT, SIG_DFL);
    if (own_term) signal(SIGTERM, SIG_DFL);
    if (st != AF_OK) rc = cli_fail(C, st);
    else rc = res.stop == AF_STOP_INTERRUPTED ? (g_signal == SIGTERM ? 143 : 130) : 0;
done:
    af_trainer_free(t);
    train_cli_free(&tc);
    if (rc != 0 && rc != 130 && di.world_size > 1) {
        fprintf(stderr, "afinar %s: rank %d of %d: stopping every process of the job\n", C, di.rank, di.world_size);
        af_dist_abort(rc); /* returns only without a multi-process job */
    }
    af_dist_finalize();
    return rc;
}
