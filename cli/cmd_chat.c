/* afinar chat — an interactive multi-turn conversation in the terminal with the model's chat
 * template. Each turn renders the whole conversation (af_chat_format_turns) and reuses the keys and
 * values already in the session (af_session_keep_prefix): the prompts of the earlier turns are not
 * evaluated again; the last answer, whose keys and values were computed token by token (the decode
 * kernels, which differ in the last bits from a batched evaluation), is evaluated again with the
 * new message. So each answer is bit for bit what `afinar generate` gives on the same rendered
 * conversation. Lines starting with '/' are commands (/reset, /system TEXT, /exit). SIGINT while an answer
 * streams ends that answer (the partial answer stays in the conversation); SIGINT at the prompt, a
 * second one during an answer, or end of input ends the program. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
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

static void help(void) {
    af_sampling d;
    af_sampling_default(&d);
    printf("usage: afinar chat -m MODEL [-a ADAPTER] [options]\n"
           "\n"
           "Talk to a chat model in the terminal: type a message and Enter; the answer streams. The whole\n"
           "conversation is the prompt of each answer (the model's chat template). The keys and values of\n"
           "the earlier prompts stay in the cache: a turn evaluates the last answer (computed token by\n"
           "token) and the new message, and answers exactly as 'afinar generate' on the whole text.\n"
           "\n"
           "In the chat:\n"
           "  /reset                 forget the conversation (the system message stays)\n"
           "  /system TEXT           set the system message and start a new conversation\n"
           "  /exit                  leave (so do end of input, Ctrl-D, and Ctrl-C at the prompt)\n"
           "  Ctrl-C                 while an answer streams: stop it (what was written stays in the\n"
           "                         conversation); a second Ctrl-C ends the program\n"
           "\n"
           "model:\n"
           "  -m, --model PATH       GGUF file or Hugging Face checkpoint directory\n"
           "  -a, --adapter DIR      apply a LoRA adapter (afinar train directory, PEFT directory or LoRA GGUF)\n"
           "      --lora-scale S     multiply the adapter's scale lora_alpha/r by S (default 1; 0 = base model)\n"
           "      --system TEXT      system message (default: the template's own)\n"
           "      --chat-template T  chatml | gemma | gemma4 instead of the model's own template\n"
           "sampling (the same defaults as 'afinar generate' and 'afinar serve'):\n"
           "  -n, --n-predict N      most tokens per answer (default 512; stops earlier at end-of-turn)\n"
           "      --temp T           temperature (default %g; 0 = greedy, deterministic)\n"
           "      --top-k K          keep the K most likely tokens (default %d; 0 = off)\n"
           "      --top-p P          nucleus sampling threshold (default %g; 1 = off)\n"
           "      --seed S           random seed (default %llu)\n"
           "      --ignore-eos       do not stop at end-of-generation tokens (answers run to -n)\n"
           "  -c, --ctx-size N       positions of the whole conversation (default: the model's, at most 4096)\n"
           CLI_COMPUTE_HELP
           "output:\n"
           "      --timings          after each answer, on stderr: the prompt tokens evaluated and those reused\n"
           "                         from the cache, and the decode speed\n"
           "The prompt '> ' is shown when standard input is a terminal; with a pipe, each input line is\n"
           "one user message and each answer one block of output lines followed by an empty line.\n",
           (double)d.temperature, (int)d.top_k, (double)d.top_p, (unsigned long long)d.seed);
}

/* The conversation: turns [n] of (role, malloc'ed text). */
typedef struct convo {
    const char **role;
    char **text;
    int n, cap;
} convo;

static int convo_add(convo *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 16;
        const char **r = realloc(c->role, sizeof *r * (size_t)nc);
        if (r) c->role = r;
        char **t = realloc(c->text, sizeof *t * (size_t)nc);
        if (t) c->text = t;
        if (!r || !t) return 0;
        c->cap = nc;
    }
    char *s = malloc(len + 1);
    if (!s) return 0;
    memcpy(s, text, len);
    s[len] = 0;
    c->role[c->n] = role;
    c->text[c->n++] = s;
    return 1;
}

/* Drop turns from index `from` on. */
static void convo_cut(convo *c, int from) {
    while (c->n > from) free(c->text[--c->n]);
}

static void convo_free(convo *c) {
    convo_cut(c, 0);
    free(c->role);
    free(c->text);
}

/* The answer being generated, as bytes. */
typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) return 0;
        b->p = p, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

typedef struct chat_cfg {
    long n_predict;
    int ignore_eos, timings;
    af_sampling sp;
    const char *tmpl;
} chat_cfg;

/* One answer to the conversation in *cv (its last turn is the user's): render, keep the cached
 * prefix, evaluate the rest, stream the answer to stdout and append it as the assistant's turn.
 * Returns 0, or an exit code (1: a failure, message printed). A conversation longer than the
 * context is not an error: a message, the user turn is dropped, 0. */
static int answer(const char *C, af_model *model, af_session *sess, int n_ctx, convo *cv, const chat_cfg *g,
                  uint64_t *rng, float *logits) {
    const af_tokenizer *tok = af_model_tokenizer(model);
    const af_model_config *cfg = af_model_get_config(model);
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    buf ans = {0};
    int rc = 1;
    af_status st = af_chat_format_turns(model, g->tmpl, cv->role, (const char *const *)cv->text, cv->n, &text);
    if (st == AF_OK) st = af_tokenize(tok, text, strlen(text), 1, 1, &ids, &n_ids);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto out;
    }
    if ((long)n_ids >= n_ctx) {
        fprintf(stderr, "afinar %s: the conversation is %zu tokens, the context holds %d: /reset, or a larger "
                        "-c/--ctx-size; this message was dropped\n", C, n_ids, n_ctx);
        convo_cut(cv, cv->n - 1);
        rc = 0;
        goto out;
    }
    const int kept = af_session_keep_prefix(sess, ids, (int)n_ids);
    double t0 = now_sec();
    st = af_session_eval(sess, ids + kept, (int)n_ids - kept, logits, NULL);
    const double t_prompt = now_sec() - t0;
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        af_session_reset(sess); /* its cache may be half-written */
        convo_cut(cv, cv->n - 1);
        goto out;
    }
    long room = n_ctx - (long)n_ids, n_gen = 0;
    t0 = now_sec();
    const long limit = g->n_predict < room ? g->n_predict : room;
    char piece[256];
    while (n_gen < limit && !cli_stop_signal()) {
        const int32_t id = af_sample(logits, cfg->vocab_size, &g->sp, rng);
        n_gen++;
        if (!g->ignore_eos && af_token_is_eog(tok, id)) break;
        int len = af_token_to_bytes(tok, id, 0, piece, sizeof piece);
        if (len > (int)sizeof piece) len = (int)sizeof piece;
        if (len > 0) {
            if (!buf_add(&ans, piece, (size_t)len)) {
                cli_error(C, "out of memory");
                goto out;
            }
            fwrite(piece, 1, (size_t)len, stdout);
            if (cli_stdout_failed(C)) goto out;
        }
        if (n_gen == limit) break;
        st = af_session_eval(sess, &id, 1, logits, NULL);
        if (st != AF_OK) {
            fputc('\n', stdout);
            rc = cli_fail(C, st);
            af_session_reset(sess);
            convo_cut(cv, cv->n - 1);
            goto out;
        }
    }
    const double t_decode = now_sec() - t0;
    if (n_gen == room && room < g->n_predict)
        fprintf(stderr, "\nafinar %s: the context (%d positions) is full: /reset, or a larger -c/--ctx-size\n", C, n_ctx);
    fputc('\n', stdout);
    if (!isatty(STDIN_FILENO)) fputc('\n', stdout); /* a pipe: an empty line ends each answer */
    if (cli_stdout_failed(C)) goto out;
    if (g->timings)
        fprintf(stderr, "timings: prompt %zu tokens, %d reused from the cache, %zu evaluated in %.3f s; decode %ld "
                        "tokens in %.3f s (%.2f tok/s)\n", n_ids, kept, n_ids - (size_t)kept, t_prompt, n_gen, t_decode,
                t_decode > 0 ? (double)n_gen / t_decode : 0.0);
    if (!convo_add(cv, "assistant", ans.p ? ans.p : "", ans.n)) {
        cli_error(C, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(ans.p);
    free(ids);
    free(text);
    return rc;
}

/* At the terminal's prompt: wait until a line can be read or a signal asked to stop, without the
 * race of a signal that arrives between printing the prompt and blocking in read(2) (the flag
 * would be set, and read would wait for a line all the same). SIGINT / SIGTERM are blocked while
 * the flag is checked and unblocked atomically by ppoll; the library's worker threads block them
 * (af_thread_start), so one that comes while they are blocked here waits, pending, for ppoll instead
 * of running the handler on a worker while this thread sleeps. Returns 1: input ready; 0: a stop signal. */
static int wait_input(void) {
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, &old);
    int ready = 0;
    while (!cli_stop_signal()) {
        struct pollfd p = {STDIN_FILENO, POLLIN, 0};
        const int r = ppoll(&p, 1, NULL, &old);
        if (r > 0 || (r < 0 && errno != EINTR)) { /* readable, hung up or an error: read(2) says which */
            ready = 1;
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return ready;
}

/* Start the conversation anew: only the system message, if any. */
static int convo_reset(convo *cv, const char *system) {
    convo_cut(cv, 0);
    return !system || convo_add(cv, "system", system, strlen(system));
}

/* The dialogue loop: read lines, run the commands, answer the messages. Returns the exit code. */
static int dialogue(const char *C, af_model *model, af_session *sess, int n_ctx, const char *system0,
                    const chat_cfg *g) {
    const int tty = isatty(STDIN_FILENO);
    const af_model_config *cfg = af_model_get_config(model);
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    char *system = system0 ? strdup(system0) : NULL;
    convo cv = {0};
    uint64_t rng = af_rng_seed(g->sp.seed);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    if (!logits || (system0 && !system) || !convo_reset(&cv, system)) {
        cli_error(C, "out of memory");
        rc = 1;
        goto out;
    }
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            if (cli_stdout_failed(C)) {
                rc = 1;
                break;
            }
        }
        errno = 0;
        /* at a terminal stdin's buffer is empty between lines (canonical mode reads one line) */
        ssize_t len = tty && !wait_input() ? -1 : getline(&line, &cap, stdin);
        if (len < 0) {
            if (cli_stop_signal()) { /* Ctrl-C at the prompt */
                fputc('\n', stdout);
                rc = 128 + cli_stop_signal();
            } else if (errno && errno != EINTR) {
                cli_error(C, "cannot read the input: %s", strerror(errno));
                rc = 1;
            } else if (tty) {
                fputc('\n', stdout); /* Ctrl-D: end the prompt's line */
            }
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (line[0] == '/') {
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            if (!strcmp(line, "/reset") || !strncmp(line, "/system", 7)) {
                if (line[1] == 's') {
                    const char *t = line + 7;
                    if (*t && *t != ' ') goto unknown;
                    while (*t == ' ') t++;
                    free(system);
                    system = *t ? strdup(t) : NULL;
                    if (*t && !system) {
                        cli_error(C, "out of memory");
                        rc = 1;
                        break;
                    }
                }
                if (!convo_reset(&cv, system)) {
                    cli_error(C, "out of memory");
                    rc = 1;
                    break;
                }
                fprintf(stderr, "(%s; a new conversation)\n",
                        line[1] == 's' ? (system ? "system message set" : "system message removed") : "reset");
                continue;
            }
        unknown:
            fprintf(stderr, "(unknown command %s: /reset, /system TEXT, /exit)\n", line);
            continue;
        }
        if (!convo_add(&cv, "user", line, (size_t)len)) {
            cli_error(C, "out of memory");
            rc = 1;
            break;
        }
        rc = answer(C, model, sess, n_ctx, &cv, g, &rng, logits);
        if (rc) break;
        if (cli_stop_signal() == SIGTERM) {
            rc = 128 + SIGTERM;
            break;
        }
        if (cli_stop_signal()) { /* Ctrl-C stopped this answer, not the program */
            fprintf(stderr, "(answer stopped)\n");
            cli_clear_stop();
        }
    }
out:
    free(line);
    free(system);
    free(logits);
    convo_free(&cv);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *C = "chat";
    const char *model_path = NULL, *adapter = NULL, *system = NULL;
    double lora_scale = 1.0;
    cli_compute cc = CLI_COMPUTE_INIT;
    chat_cfg g = {512, 0, 0, {0, 0, 0, 0}, NULL};
    af_sampling_default(&g.sp);
    long top_k = g.sp.top_k, seed = (long)g.sp.seed, n_ctx = 0;
    double temp = g.sp.temperature, top_p = g.sp.top_p;
    enum { O_TEMP = 1000, O_TOPK, O_TOPP, O_SEED, O_SYSTEM, O_TMPL, O_SCALE, O_NOEOS, O_TIMINGS };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"adapter", required_argument, 0, 'a'},
        {"lora-scale", required_argument, 0, O_SCALE}, {"system", required_argument, 0, O_SYSTEM},
        {"chat-template", required_argument, 0, O_TMPL}, {"n-predict", required_argument, 0, 'n'},
        {"temp", required_argument, 0, O_TEMP},   {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP},  {"seed", required_argument, 0, O_SEED},
        {"ignore-eos", no_argument, 0, O_NOEOS},  {"ctx-size", required_argument, 0, 'c'},
        {"ctx", required_argument, 0, 'c'},       {"timings", no_argument, 0, O_TIMINGS},
        CLI_COMPUTE_OPTIONS,
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:n:c:t:h", opts, NULL)) != -1) {
        const int co = cli_compute_opt(C, o, optarg, &cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'a': adapter = optarg; break;
        case O_SCALE: if (!cli_parse_float(C, "--lora-scale", optarg, -100, 100, &lora_scale)) return 2; break;
        case O_SYSTEM: system = optarg; break;
        case O_TMPL: g.tmpl = optarg; break;
        case 'n': if (!cli_parse_int(C, "--n-predict", optarg, 1, 1 << 20, &g.n_predict)) return 2; break;
        case 'c': if (!cli_parse_int(C, "--ctx-size", optarg, 16, 1 << 20, &n_ctx)) return 2; break;
        case O_TEMP: if (!cli_parse_float(C, "--temp", optarg, 0, 100, &temp)) return 2; break;
        case O_TOPK: if (!cli_parse_int(C, "--top-k", optarg, 0, 1 << 30, &top_k)) return 2; break;
        case O_TOPP: if (!cli_parse_float(C, "--top-p", optarg, 0, 1, &top_p)) return 2; break;
        case O_SEED: if (!cli_parse_int(C, "--seed", optarg, 0, 0x7fffffffL, &seed)) return 2; break;
        case O_NOEOS: g.ignore_eos = 1; break;
        case O_TIMINGS: g.timings = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar chat --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!model_path) {
        cli_error(C, "missing -m MODEL (a GGUF file or HF directory)");
        return 2;
    }
    g.sp = (af_sampling){(float)temp, (int32_t)top_k, (float)top_p, (uint64_t)seed};
    af_ctx *ctx = NULL, *dev_ctx = NULL;
    int rc = cli_compute_ctx(C, &cc, &ctx);
    if (rc) return rc;
    af_model *model = NULL;
    af_session *sess = NULL;
    af_status st;
    while ((st = af_model_load(ctx, model_path, &model)) != AF_OK && cli_fallback_cpu(C, &ctx, &dev_ctx, st)) {
    }
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto done;
    }
    if (!af_model_tokenizer(model)) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so it cannot chat", model_path,
                  tok_reason(model, model_path));
        rc = 1;
        goto done;
    }
    /* the template, checked before the first message (a model without one fails here) */
    const char *probe_role[] = {"user"}, *probe_text[] = {"hi"};
    char *probe = NULL;
    st = af_chat_format_turns(model, g.tmpl, probe_role, probe_text, 1, &probe);
    free(probe);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto done;
    }
    const int max_pos = af_model_get_config(model)->max_position_embeddings;
    if (n_ctx == 0) n_ctx = max_pos < 4096 ? max_pos : 4096;
    if (n_ctx > max_pos) {
        cli_error(C, "--ctx-size %ld exceeds the model's %d positions", n_ctx, max_pos);
        rc = 2;
        goto done;
    }
    st = af_session_new(model, (int)n_ctx, &sess);
    if (st == AF_OK && adapter) st = af_session_load_adapter(sess, adapter, (float)lora_scale);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto done;
    }
    if (isatty(STDIN_FILENO))
        fprintf(stderr, "afinar chat: %s%s%s, context %ld; /reset, /system TEXT, /exit; Ctrl-C stops an answer\n",
                model_path, adapter ? " + " : "", adapter ? adapter : "", n_ctx);
    /* SIGINT / SIGTERM from here on set a flag (an answer stops after its current token; a read of
     * the prompt returns); a second one during an answer ends the program at once */
    cli_graceful_stop(1);
    rc = dialogue(C, model, sess, (int)n_ctx, system, &g);
done:
    af_session_free(sess);
    af_model_free(model);
    af_ctx_free(ctx);
    af_ctx_free(dev_ctx);
    return rc;
}
