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
    o->check_only = 1; /* the report says what train "would use" */
    af_ctx *dctx = NULL; /* --device: the run's base context, made here so that the device taken by
                          * auto is said on stderr as by every command (cli_make_ctx) */
    if (o->device) {
        cli_set_device(o->device);
        rc = cli_make_ctx(C, o->threads, o->poll_us, NULL, 0, 0, &dctx);
        cli_set_device(NULL);
        if (rc != 0) {
            train_cli_free(&tc);
            return rc;
        }
        o->ctx = dctx;
        o->device = NULL;
    }
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
        af_ctx *ctx = NULL; /* which precision of the large products is faster on this CPU */
        double f32 = 0, bf16 = 0;
        if (cli_make_ctx(C, o->threads, o->poll_us, NULL, 0, 0, &ctx) == 0 &&
            af_ctx_measure_precision(ctx, &f32, &bf16) == AF_OK) {
            if (bf16 > 0)
                printf("\nprecision: f32 %.0f GFLOP/s, bf16 %.0f GFLOP/s on this CPU (%d threads) -> %s\n", f32, bf16,
                       af_ctx_n_threads(ctx), bf16 > f32 ? "bf16 is faster (--frozen-precision bf16)" : "f32 is faster (--frozen-precision f32)");
            else
                printf("\nprecision: f32 %.0f GFLOP/s on this CPU (%d threads); bf16 products not available here "
                       "(needs AVX512_BF16) -> f32\n", f32, af_ctx_n_threads(ctx));
        }
        af_ctx_free(ctx);
        rc = af_trainer_has_errors(t) ? 1 : 0;
        n_err = af_trainer_n_errors(t); /* the memory estimate's error is not a diagnostic: count it too */
        printf("\ncheck: %s (%d errors, %d warnings)\n", rc ? "NOT ready to train" : "ready to train", n_err, n_warn);
    }
    af_trainer_free(t);
    af_ctx_free(dctx);
    train_cli_free(&tc);
    return rc;
}
