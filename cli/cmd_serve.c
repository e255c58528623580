/* afinar serve — an OpenAI-compatible HTTP server (af_server_run): chat and text completions with
 * streaming, per-request LoRA adapters decoded together (continuous batching), classification
 * adapters, a prompt cache. SIGINT / SIGTERM: refuse new requests, finish those in flight, exit 0;
 * a second signal ends at once (130 / 143). */
#include "cli.h"

#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int g_stop;
static void on_signal(int sig) {
    if (g_stop) _exit(128 + sig);
    g_stop = sig;
}

static void help(void) {
    af_sampling d;
    af_sampling_default(&d);
    printf("usage: afinar serve -m MODEL [-a NAME=DIR ...] [--host H] [--port P] [options]\n"
           "\n"
           "model:\n"
           "  -m, --model PATH        GGUF file or Hugging Face checkpoint directory\n"
           "      --alias NAME        the model id clients use (default: the file or directory name without\n"
           "                          .gguf); a request's \"model\" may add .gguf, and with no adapter loaded any\n"
           "                          id is the model (as llama-server)\n"
           "  -a, --adapter NAME=DIR  serve a LoRA adapter (directory or LoRA GGUF) as model id NAME; an adapter\n"
           "                          with a classification head also answers POST /v1/classify (repeatable;\n"
           "                          -a is --adapter as in every afinar command, not llama-server's --alias)\n"
           "      --chat-template T   chatml | gemma | gemma4 instead of the model's own template\n"
           "      --runs DIR          show the run directories under DIR on the web page (read-only: curves,\n"
           "                          settings, last evaluation; a run's best/ loads as an adapter)\n"
           "server:\n"
           "      --host H            address to listen on (default 127.0.0.1; 0.0.0.0 = every interface)\n"
           "      --port P            TCP port (default 8080; 0 = any free port, printed at start)\n"
           "      --api-key KEY       require the header 'Authorization: Bearer KEY' on every route but\n"
           "                          /health (else HTTP 401; compared in constant time); default: the\n"
           "                          environment variable AFINAR_API_KEY when set (not visible in ps)\n"
           "  -np, --parallel N       sequences decoded together in one batch (default 4, max 64)\n"
           "      --max-adapters N    adapters loaded at once (default 64, max 1024); POST /lora-adapters/load\n"
           "                          beyond it: HTTP 409, or with \"evict\": true the least recently used\n"
           "                          adapter that no request is using is unloaded\n"
           "      --batch-tokens N    prompt tokens evaluated per scheduler pass together with the running\n"
           "                          requests' next tokens (chunked prefill; default 256, 16..2048)\n"
           "  -c, --ctx-size N        positions per sequence, prompt + generated (default 2048; --ctx is the\n"
           "                          same)\n"
           "      --queue N           requests waiting for a sequence; more get HTTP 429 (default 16)\n"
           "      --max-body BYTES    request body limit; more get HTTP 413 (default 1048576)\n"
           "      --timeout S         close a connection idle for S seconds (default 60)\n"
           CLI_COMPUTE_HELP
           "A request that gives no sampling field uses the defaults of 'afinar generate': temperature %g,\n"
           "top_k %d, top_p %g (a random seed unless \"seed\" is given).\n"
           "Endpoints: POST /v1/chat/completions, /v1/completions (stream, temperature, top_p, top_k,\n"
           "max_tokens, stop, seed, lora, n, logprobs, top_logprobs, response_format json_object |\n"
           "json_schema, tools, tool_choice), /v1/embeddings, /v1/classify; GET /v1/models, /health,\n"
           "/lora-adapters, /metrics;\n"
           "POST /lora-adapters (scales), /lora-adapters/load {\"name\",\"path\"}, /lora-adapters/unload {\"id\"}.\n"
           "SIGINT / SIGTERM: refuse new requests, finish those in flight, exit 0 (a second one: at once).\n"
           "The web page (playground, adapters, runs) is at http://HOST:PORT/ (docs/WEB.md).\n"
           "See docs/SERVING.md.\n",
           (double)d.temperature, (int)d.top_k, (double)d.top_p);
}

/* The options of `afinar serve` into *so and *cc (the adapters' NAME=DIR into names/paths[*na], cut
 * in argv). Returns 1, 0 after an error message (exit 2), -1 after --help (exit 0). */
static int serve_opts(int argc, char **argv, af_server_opts *so, cli_compute *cc, char **names, char **paths, int *na) {
    const char *C = "serve";
    long port = so->port, par = so->max_seqs, btok = so->batch_tokens, maxad = so->max_adapters, ctxn = so->n_ctx;
    long queue = so->queue, timeout = so->timeout_s, max_body = (long)so->max_body;
    enum { O_HOST = 1000, O_PORT, O_PAR, O_QUEUE, O_BODY, O_TIMEOUT, O_TMPL, O_ALIAS, O_KEY, O_RUNS, O_BTOK, O_MAXAD };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"adapter", required_argument, 0, 'a'},
        {"host", required_argument, 0, O_HOST},    {"port", required_argument, 0, O_PORT},
        {"parallel", required_argument, 0, O_PAR}, {"ctx", required_argument, 0, 'c'},
        {"ctx-size", required_argument, 0, 'c'},   {"alias", required_argument, 0, O_ALIAS},
        {"api-key", required_argument, 0, O_KEY},   {"runs", required_argument, 0, O_RUNS},
        {"queue", required_argument, 0, O_QUEUE},  {"max-body", required_argument, 0, O_BODY},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"chat-template", required_argument, 0, O_TMPL},
        {"batch-tokens", required_argument, 0, O_BTOK}, {"max-adapters", required_argument, 0, O_MAXAD},
        CLI_COMPUTE_OPTIONS,
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    /* llama-server's -np (two letters after one dash) is --parallel */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-np")) argv[i] = (char *)"--parallel";
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:c:t:h", opts, NULL)) != -1) {
        const int co = cli_compute_opt(C, o, optarg, cc);
        if (co < 0) return 0;
        if (co > 0) continue;
        int ok = 1;
        switch (o) {
        case 'm': so->model_path = optarg; break;
        case 'a': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1]) {
                cli_error(C, "--adapter %s: expected NAME=DIR (the model's own id is --alias NAME)", optarg);
                return 0;
            }
            *eq = 0;
            names[*na] = optarg;
            paths[(*na)++] = eq + 1;
            break;
        }
        case O_HOST: so->host = optarg; break;
        case O_PORT: ok = cli_parse_int(C, "--port", optarg, 0, 65535, &port); break;
        case O_PAR: ok = cli_parse_int(C, "--parallel", optarg, 1, 64, &par); break;
        case O_BTOK: ok = cli_parse_int(C, "--batch-tokens", optarg, 16, 2048, &btok); break;
        case O_MAXAD: ok = cli_parse_int(C, "--max-adapters", optarg, 1, 1024, &maxad); break;
        case 'c': ok = cli_parse_int(C, "--ctx-size", optarg, 8, 1 << 20, &ctxn); break;
        case O_ALIAS: so->alias = optarg; break;
        case O_KEY:
            if (!optarg[0]) {
                cli_error(C, "--api-key: the key is empty");
                return 0;
            }
            so->api_key = optarg;
            break;
        case O_QUEUE: ok = cli_parse_int(C, "--queue", optarg, 0, 100000, &queue); break;
        case O_BODY: ok = cli_parse_int(C, "--max-body", optarg, 1024, 1L << 30, &max_body); break;
        case O_TIMEOUT: ok = cli_parse_int(C, "--timeout", optarg, 0, 86400, &timeout); break;
        case O_TMPL: so->chat_template = optarg; break;
        case O_RUNS: so->runs_dir = optarg; break;
        case 'h': help(); return -1;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 0;
        default: cli_error(C, "unknown option '%s' (see 'afinar serve --help')", argv[optind - 1]); return 0;
        }
        if (!ok) return 0;
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 0;
    }
    so->port = (int32_t)port;
    so->max_seqs = (int32_t)par;
    so->batch_tokens = (int32_t)btok;
    so->max_adapters = (int32_t)maxad;
    so->n_ctx = (int32_t)ctxn;
    so->queue = (int32_t)queue;
    so->max_body = max_body;
    so->timeout_s = (int32_t)timeout;
    return 1;
}

int cmd_serve(int argc, char **argv) {
    const char *C = "serve";
    af_server_opts so;
    af_server_opts_default(&so);
    cli_compute cc = CLI_COMPUTE_INIT;
    char **names = calloc((size_t)argc + 1, sizeof *names), **paths = calloc((size_t)argc + 1, sizeof *paths);
    if (!names || !paths) {
        free(names), free(paths);
        cli_error(C, "out of memory");
        return 1;
    }
    int na = 0, rc = 2;
    const int po = serve_opts(argc, argv, &so, &cc, names, paths, &na);
    if (po <= 0) {
        rc = po < 0 ? 0 : 2;
        goto out;
    }
    if (!so.api_key && getenv("AFINAR_API_KEY") && getenv("AFINAR_API_KEY")[0]) so.api_key = getenv("AFINAR_API_KEY");
    if (!so.model_path) {
        cli_error(C, "missing -m MODEL (a GGUF file or HF directory)");
        goto out;
    }
    struct stat rst;
    if (so.runs_dir && (stat(so.runs_dir, &rst) != 0 || !S_ISDIR(rst.st_mode))) {
        cli_error(C, "--runs %s: not a directory", so.runs_dir);
        goto out;
    }
    af_ctx *ctx = NULL;
    int mrc = cli_compute_ctx(C, &cc, &ctx);
    if (mrc) {
        rc = mrc;
        goto out;
    }
    so.adapter_names = (const char *const *)names;
    so.adapter_paths = (const char *const *)paths;
    so.n_adapters = na;
    so.ctx = ctx;
    so.log = stderr;
    so.stop = &g_stop;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN); /* a client that closes its socket is an EPIPE, not the end of the server */
    af_status st = af_server_run(&so);
    af_ctx *old = NULL;
    /* A failure is returned only before the server listens (model load, memory guard): under
     * --device auto the CPU takes over then. Once serving, a device failure answers HTTP 500s. */
    if (st != AF_OK && !g_stop && cli_fallback_cpu(C, &ctx, &old, st)) {
        so.ctx = ctx;
        st = af_server_run(&so);
    }
    rc = st == AF_OK ? 0 : cli_fail(C, st);
    af_ctx_free(ctx);
    af_ctx_free(old);
out:
    free(names);
    free(paths);
    return rc;
}
