/* compute_opts.c — the compute flags shared by every command that runs a model (generate, chat,
 * serve, eval, predict): one parser, one help text, one context constructor (cli.h). */
#include "cli.h"

#include <string.h>

int cli_compute_opt(const char *cmd, int o, const char *arg, cli_compute *c) {
    switch (o) {
    case 't': return cli_parse_int(cmd, "--threads", arg, 0, 1024, &c->threads) ? 1 : -1;
    case CLI_O_POLL: return cli_parse_int(cmd, "--poll", arg, 0, 10000000, &c->poll) ? 1 : -1;
    case CLI_O_KERNEL: c->kernel = arg; return 1;
    case CLI_O_BF16: c->bf16 = 1; return 1;
    case CLI_O_INT8: c->int8_act = 1; return 1;
    case CLI_O_QUANT: cli_set_quantize(arg); return 1;
    case CLI_O_DEVICE: cli_set_device(arg); return 1;
    default: return 0;
    }
}

int cli_compute_ctx(const char *cmd, const cli_compute *c, af_ctx **out) {
    return cli_make_ctx(cmd, c->threads, c->poll, c->kernel, c->bf16, c->int8_act, out);
}
