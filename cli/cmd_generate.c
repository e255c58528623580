/* afinar generate — stream a continuation of a prompt (or a chat answer) from a GGUF model. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (every thread) so far. */
static double cpu_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void help(void) {
    af_sampling d;
    af_sampling_default(&d);
    printf("usage: afinar generate -m MODEL (-p TEXT | -f FILE) [options]\n"
           "\n"
           "model:\n"
           "  -m, --model PATH       GGUF file or Hugging Face checkpoint directory\n"
           "  -a, --adapter DIR      apply a LoRA adapter (afinar train directory, PEFT directory or LoRA GGUF)\n"
           "      --lora-scale S     multiply the adapter's scale lora_alpha/r by S (default 1; 0 = base model)\n"
           "prompt:\n"
           "  -p, --prompt TEXT      prompt text (special tokens such as <|im_start|> are recognised)\n"
           "  -f, --file FILE        read the prompt from FILE\n"
           "      --chat             wrap the prompt in the model's chat template as one user turn\n"
           "      --system TEXT      system message for --chat (default: the template's own)\n"
           "      --chat-template T  with --chat: chatml | gemma | gemma4 instead of the model's own template\n"
           "      --echo             print the prompt before the generated text\n"
           "      --prompt-cache FILE  reuse the prompt's keys and values saved in FILE by an earlier run (the\n"
           "                         longest common prefix that gives bit-identical results) and save this\n"
           "                         prompt's there (versioned, checked against model, adapter and settings)\n"
           "sampling (the same defaults as 'afinar chat' and 'afinar serve'):\n"
           "  -n, --n-predict N      tokens to generate (default 128; stops earlier at end-of-generation)\n"
           "      --temp T           temperature (default %g; 0 = greedy, deterministic)\n"
           "      --top-k K          keep the K most likely tokens (default %d; 0 = off)\n"
           "      --top-p P          nucleus sampling threshold (default %g; 1 = off)\n"
           "      --seed S           random seed (default %llu)\n"
           "      --ignore-eos       do not stop at end-of-generation tokens\n"
           "  -c, --ctx-size N       context size (default: prompt + n-predict; --ctx is the same)\n"
           CLI_COMPUTE_HELP
           "output:\n"
           "      --timings          print prompt and decode speed, and the decode's parallel regions and\n"
           "                         CPU time per token, on stderr at the end\n"
           "Ctrl-C / SIGTERM: stop after the current token, end the line, exit 130 / 143.\n",
           (double)d.temperature, (int)d.top_k, (double)d.top_p, (unsigned long long)d.seed);
}

/* The command line. */
typedef struct gen_opts {
    const char *model_path, *adapter_dir, *prompt_cache, *prompt, *prompt_file, *system, *chat_template;
    double lora_scale, temp, top_p;
    long n_predict, top_k, n_ctx, seed;
    int chat, timings, echo, ignore_eos;
    cli_compute cc;
} gen_opts;

/* One generation: what a CPU fallback keeps (the tokens printed so far) and what it rebuilds. */
typedef struct gen_run {
    const gen_opts *g;
    const char *prompt;      /* -p, or the -f file's text (file_text) */
    char *file_text, *chat_text;
    af_ctx *ctx, *dev_ctx;   /* dev_ctx: --device auto that fell back to the CPU, freed at the end */
    af_model *model;
    af_session *sess;
    const af_tokenizer *tok;
    const af_model_config *cfg;
    const char *text;        /* the prompt as evaluated (chat_text with --chat) */
    int32_t *ids, *gen;
    size_t n_ids;
    float *logits;
    long n_predict, n_ctx;
    long n_gen;              /* tokens generated (and printed) so far: a CPU fallback re-evaluates them */
    long n_decode;
    double t_prompt, t_decode;
    af_sampling sp;
    uint64_t rng;
} gen_run;

#define GEN_GO_ON (-1)       /* a step's return: continue */
#define GEN_DEVICE_FAIL (-2) /* the session failed (status in *st): the CPU fallback decides */

/* Parse the options into g. Returns GEN_GO_ON, or the exit code (help printed, or a usage error). */
static int parse_opts(int argc, char **argv, gen_opts *g) {
    const char *C = "generate";
    af_sampling dsp;
    af_sampling_default(&dsp);
    memset(g, 0, sizeof *g);
    g->cc = (cli_compute)CLI_COMPUTE_INIT;
    g->lora_scale = 1.0;
    g->n_predict = 128, g->top_k = dsp.top_k, g->seed = (long)dsp.seed;
    g->temp = dsp.temperature, g->top_p = dsp.top_p;
    enum { O_TEMP = 1000, O_TOPK, O_TOPP, O_SEED, O_CHAT, O_SYSTEM, O_TIMINGS, O_ECHO, O_IGNORE_EOS, O_LORA_SCALE, O_TMPL, O_PCACHE };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},    {"n-predict", required_argument, 0, 'n'},
        {"ctx", required_argument, 0, 'c'},     {"ctx-size", required_argument, 0, 'c'},
        {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP}, {"seed", required_argument, 0, O_SEED},
        {"chat", no_argument, 0, O_CHAT},       {"system", required_argument, 0, O_SYSTEM},
        {"chat-template", required_argument, 0, O_TMPL}, {"prompt-cache", required_argument, 0, O_PCACHE},
        {"timings", no_argument, 0, O_TIMINGS},
        {"echo", no_argument, 0, O_ECHO},       {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"adapter", required_argument, 0, 'a'}, {"lora-scale", required_argument, 0, O_LORA_SCALE},
        CLI_COMPUTE_OPTIONS,
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:p:f:n:c:t:h", opts, NULL)) != -1) {
        const int co = cli_compute_opt(C, o, optarg, &g->cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': g->model_path = optarg; break;
        case 'a': g->adapter_dir = optarg; break;
        case O_LORA_SCALE: if (!cli_parse_float(C, "--lora-scale", optarg, -100, 100, &g->lora_scale)) return 2; break;
        case 'p': g->prompt = optarg; break;
        case 'f': g->prompt_file = optarg; break;
        case 'n': if (!cli_parse_int(C, "--n-predict", optarg, 1, 1 << 20, &g->n_predict)) return 2; break;
        case 'c': if (!cli_parse_int(C, "--ctx", optarg, 1, 1 << 20, &g->n_ctx)) return 2; break;
        case O_TEMP: if (!cli_parse_float(C, "--temp", optarg, 0, 100, &g->temp)) return 2; break;
        case O_TOPK: if (!cli_parse_int(C, "--top-k", optarg, 0, 1 << 30, &g->top_k)) return 2; break;
        case O_TOPP: if (!cli_parse_float(C, "--top-p", optarg, 0, 1, &g->top_p)) return 2; break;
        case O_SEED: if (!cli_parse_int(C, "--seed", optarg, 0, 0x7fffffffL, &g->seed)) return 2; break;
        case O_CHAT: g->chat = 1; break;
        case O_SYSTEM: g->system = optarg; break;
        case O_TMPL: g->chat_template = optarg; break;
        case O_PCACHE: g->prompt_cache = optarg; break;
        case O_TIMINGS: g->timings = 1; break;
        case O_ECHO: g->echo = 1; break;
        case O_IGNORE_EOS: g->ignore_eos = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar generate --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!g->model_path) {
        cli_error(C, "missing -m MODEL (a GGUF file or HF directory)");
        return 2;
    }
    if (!g->prompt == !g->prompt_file) {
        cli_error(C, "give exactly one of -p TEXT or -f FILE");
        return 2;
    }
    if (g->system && !g->chat) {
        cli_error(C, "--system needs --chat");
        return 2;
    }
    if (g->chat_template && !g->chat) {
        cli_error(C, "--chat-template needs --chat");
        return 2;
    }
    return GEN_GO_ON;
}

/* On a loaded model: its tokenizer, the prompt (in the chat template with --chat) tokenized, the
 * context checked against the model and n_predict fitted to it. GEN_GO_ON or the exit code. */
static int prepare_prompt(gen_run *R) {
    const char *C = "generate";
    const gen_opts *g = R->g;
    R->tok = af_model_tokenizer(R->model);
    if (!R->tok) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so text cannot be generated", g->model_path,
                  tok_reason(R->model, g->model_path));
        return 1;
    }
    R->text = R->prompt;
    if (g->chat) {
        free(R->chat_text);
        R->chat_text = NULL;
        af_status st = af_chat_format_template(R->model, g->chat_template, g->system, R->prompt, &R->chat_text);
        if (st != AF_OK) return cli_fail(C, st);
        R->text = R->chat_text;
    }
    free(R->ids);
    R->ids = NULL;
    af_status st = af_tokenize(R->tok, R->text, strlen(R->text), 1, 1, &R->ids, &R->n_ids);
    if (st != AF_OK) return cli_fail(C, st);
    if (R->n_ids == 0) {
        if (g->prompt_file) cli_error(C, "%s: the prompt is empty after tokenization", g->prompt_file);
        else cli_error(C, "the prompt is empty after tokenization");
        return 1;
    }
    R->cfg = af_model_get_config(R->model);
    long need = (long)R->n_ids + R->n_predict;
    if (R->n_ctx == 0) R->n_ctx = need;
    if (R->n_ctx > R->cfg->max_position_embeddings) {
        cli_error(C, "context %ld (prompt %zu + n-predict %ld) exceeds the model's %d positions", R->n_ctx, R->n_ids,
                  R->n_predict, R->cfg->max_position_embeddings);
        return 2;
    }
    if ((long)R->n_ids >= R->n_ctx) {
        cli_error(C, "the prompt has %zu tokens, more than the context (%ld)", R->n_ids, R->n_ctx);
        return 2;
    }
    if (need > R->n_ctx) R->n_predict = R->n_ctx - (long)R->n_ids;
    return GEN_GO_ON;
}

/* The prompt evaluated (its keys and values from --prompt-cache where they match, saved there
 * afterwards), and after a CPU fallback the tokens already printed; logits of the next token.
 * GEN_GO_ON, GEN_DEVICE_FAIL (*st) or the exit code. */
static int eval_prompt(gen_run *R, af_status *st) {
    const char *C = "generate";
    const gen_opts *g = R->g;
    double t0 = now_sec();
    int kept = 0;
    if (g->prompt_cache && access(g->prompt_cache, F_OK) == 0 && R->n_gen == 0) {
        /* a cache that does not belong to this model / adapter / setting is an error, not a miss */
        *st = af_session_load_file(R->sess, g->prompt_cache);
        if (*st != AF_OK) return cli_fail(C, *st);
        kept = af_session_keep_prefix(R->sess, R->ids, (int)R->n_ids);
    }
    *st = af_session_eval(R->sess, R->ids + kept, (int)R->n_ids - kept, R->logits, NULL);
    if (*st == AF_OK && R->n_gen > 1) /* after a fallback: the tokens already printed, but the last */
        *st = af_session_eval(R->sess, R->gen, (int)R->n_gen - 1, NULL, NULL);
    R->t_prompt = now_sec() - t0;
    if (*st == AF_OK && R->n_gen > 0) *st = af_session_eval(R->sess, R->gen + R->n_gen - 1, 1, R->logits, NULL);
    if (*st != AF_OK) return GEN_DEVICE_FAIL;
    if (g->prompt_cache && R->n_gen == 0) {
        *st = af_session_save_file(R->sess, g->prompt_cache);
        if (*st != AF_OK) return cli_fail(C, *st);
        if (g->timings)
            fprintf(stderr, "prompt cache: %d of %zu prompt tokens reused from %s\n", kept, R->n_ids, g->prompt_cache);
    }
    return GEN_GO_ON;
}

/* Sample, print and evaluate token after token up to n_predict, an end-of-generation token or a
 * stop signal; the closing newline and the timings. The exit code, or GEN_DEVICE_FAIL (*st). */
static int decode(gen_run *R, af_status *st) {
    const char *C = "generate";
    const gen_opts *g = R->g;
    char piece[256];
    af_pool_stats ps0, ps1;
    af_ctx_pool_stats(R->ctx, &ps0);
    double cpu_decode = 0;
    while (R->n_gen < R->n_predict && !cli_stop_signal()) {
        const int32_t id = af_sample(R->logits, R->cfg->vocab_size, &R->sp, &R->rng);
        R->gen[R->n_gen++] = id;
        if (!g->ignore_eos && af_token_is_eog(R->tok, id)) break;
        int len = af_token_to_bytes(R->tok, id, 0, piece, sizeof piece);
        if (len > 0) {
            fwrite(piece, 1, (size_t)(len < (int)sizeof piece ? len : (int)sizeof piece), stdout);
            /* a closed pipe (EPIPE with SIGPIPE ignored), a full disk: stop generating at once */
            if (cli_stdout_failed(C)) return 1;
        }
        if (R->n_gen == R->n_predict) break;
        double t1 = now_sec(), c1 = cpu_sec();
        *st = af_session_eval(R->sess, &id, 1, R->logits, NULL);
        R->t_decode += now_sec() - t1;
        cpu_decode += cpu_sec() - c1;
        R->n_decode++;
        if (*st != AF_OK) return GEN_DEVICE_FAIL;
    }
    fputc('\n', stdout);
    if (cli_stdout_failed(C)) return 1;
    if (g->timings)
        fprintf(stderr, "timings: prompt %zu tokens %.3f s (%.2f tok/s), decode %ld tokens %.3f s (%.2f tok/s)\n",
                R->n_ids, R->t_prompt, R->t_prompt > 0 ? (double)R->n_ids / R->t_prompt : 0.0, R->n_decode,
                R->t_decode, R->t_decode > 0 ? (double)R->n_decode / R->t_decode : 0.0);
    af_ctx_pool_stats(R->ctx, &ps1);
    if (g->timings && R->n_decode > 0)
        fprintf(stderr,
                "threads: decode %.1f parallel regions per token (%.1f woke the workers), %d threads, %.3f CPU ms "
                "per token\n",
                (double)(ps1.regions - ps0.regions) / (double)R->n_decode,
                (double)(ps1.forks - ps0.forks) / (double)R->n_decode, af_ctx_n_threads(R->ctx),
                1e3 * cpu_decode / (double)R->n_decode);
    return cli_stop_signal() ? 128 + cli_stop_signal() : 0;
}

/* The session (with the adapter), the buffers, the echo, the prompt and the decode. The exit code,
 * or GEN_DEVICE_FAIL (*st). */
static int run_session(gen_run *R, af_status *st) {
    const char *C = "generate";
    const gen_opts *g = R->g;
    *st = af_session_new(R->model, (int)R->n_ctx, &R->sess);
    if (*st == AF_OK && g->adapter_dir) *st = af_session_load_adapter(R->sess, g->adapter_dir, (float)g->lora_scale);
    if (*st != AF_OK) return GEN_DEVICE_FAIL;
    if (!R->logits) R->logits = malloc(sizeof(float) * (size_t)R->cfg->vocab_size);
    if (!R->gen) R->gen = malloc(sizeof(int32_t) * (size_t)(R->n_predict + 1));
    if (!R->logits || !R->gen) {
        cli_error(C, "out of memory");
        return 1;
    }
    /* SIGINT and SIGTERM from here on: stop generating after the current token, end the line, exit
     * 130 / 143 (before: at once) */
    cli_graceful_stop(1);
    if (g->echo && !R->dev_ctx) {
        fwrite(R->text, 1, strlen(R->text), stdout);
        if (cli_stdout_failed(C)) return 1; /* the output cannot be written */
    }
    int rc = eval_prompt(R, st);
    return rc == GEN_GO_ON ? decode(R, st) : rc;
}

/* Load the model and generate; after a failure of the device with --device auto, the same
 * generation on the CPU from where it stopped. The exit code. */
static int generate(gen_run *R) {
    const char *C = "generate";
    for (;;) {
        af_status st = af_model_load(R->ctx, R->g->model_path, &R->model);
        if (st != AF_OK) {
            if (cli_fallback_cpu(C, &R->ctx, &R->dev_ctx, st)) continue;
            return cli_fail(C, st);
        }
        int rc = prepare_prompt(R);
        if (rc == GEN_GO_ON) rc = run_session(R, &st);
        if (rc != GEN_DEVICE_FAIL) return rc;
        af_session_free(R->sess); /* the session failed: with --device auto, the CPU from here */
        R->sess = NULL;
        if (st != AF_ERR_CANCELLED && cli_fallback_cpu(C, &R->ctx, &R->dev_ctx, st)) {
            af_model_free(R->model);
            R->model = NULL;
            continue;
        }
        if (R->n_gen > 0) fputc('\n', stdout);
        return cli_fail(C, st);
    }
}

int cmd_generate(int argc, char **argv) {
    const char *C = "generate";
    gen_opts g;
    int rc = parse_opts(argc, argv, &g);
    if (rc != GEN_GO_ON) return rc;
    gen_run R;
    memset(&R, 0, sizeof R);
    R.g = &g;
    R.prompt = g.prompt;
    R.n_predict = g.n_predict;
    R.n_ctx = g.n_ctx;
    R.sp = (af_sampling){(float)g.temp, (int32_t)g.top_k, (float)g.top_p, (uint64_t)g.seed};
    R.rng = af_rng_seed(R.sp.seed);
    rc = cli_compute_ctx(C, &g.cc, &R.ctx);
    if (rc) return rc;
    if (g.prompt_file) {
        /* never blocks (a FIFO, /dev/zero are refused; "/dev/stdin" may be a pipe); 16 MiB at most */
        if (af_read_text_file(g.prompt_file, (size_t)16 << 20, &R.file_text, NULL) != AF_OK) {
            cli_error(C, "prompt file %s", af_last_error());
            af_ctx_free(R.ctx);
            return 1;
        }
        R.prompt = R.file_text;
    }
    rc = generate(&R);
    free(R.logits);
    free(R.gen);
    free(R.ids);
    free(R.chat_text);
    free(R.file_text);
    af_session_free(R.sess);
    af_model_free(R.model);
    af_ctx_free(R.ctx);
    af_ctx_free(R.dev_ctx);
    return rc;
}
