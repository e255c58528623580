/* afinar check — read the model's tokenizer and the data with the flags of `afinar train`, print
 * statistics and diagnostics; exit 1 when any is an error, else 0. Nothing is written. */
#include "cli.h"
#include "train_opts.h"

#include <stdio.h>

int cmd_check(int argc, char **argv) {
    const char *C = "check";
    train_cli tc;
    int rc = train_cli_parse_required(C, argc, argv, &tc);
    if (rc != 0) return rc < 0 ? 0 : rc;
    af_trainer_opts *o = &tc.opts;
    af_trainer *t = NULL;
    af_status st = af_trainer_new(o, &t);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
    } else {
        af_trainer_report(t, stdout);
        const af_diag_list *d = af_trainer_diags(t);
        int n_err = 0, n_warn = 0;
        for (int32_t i = 0; i < d->n; i++) {
            n_err += d->items[i].severity == AF_DIAG_ERROR;
            n_warn += d->items[i].severity == AF_DIAG_WARN;
        }
        rc = af_trainer_has_errors(t) ? 1 : 0;
        printf("\ncheck: %s (%d errors, %d warnings)\n", rc ? "NOT ready to train" : "ready to train", n_err, n_warn);
    }
    af_trainer_free(t);
    train_cli_free(&tc);
    return rc;
}
