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
           "      --timings          print prompt and decode speed on stderr at the end\n"
           "Ctrl-C / SIGTERM: stop after the current token, end the line, exit 130 / 143.\n",
           (double)d.temperature, (int)d.top_k, (double)d.top_p, (unsigned long long)d.seed);
}

int cmd_generate(int argc, char **argv) {
    const char *C = "generate";
    const char *adapter_dir = NULL, *prompt_cache = NULL;
    double lora_scale = 1.0;
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *system = NULL, *chat_template = NULL;
    cli_compute cc = CLI_COMPUTE_INIT;
    af_sampling dsp;
    af_sampling_default(&dsp);
    long n_predict = 128, top_k = dsp.top_k, n_ctx = 0, seed = (long)dsp.seed;
    double temp = dsp.temperature, top_p = dsp.top_p;
    int chat = 0, timings = 0, echo = 0, ignore_eos = 0;
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
        const int co = cli_compute_opt(C, o, optarg, &cc);
        if (co < 0) return 2;
        if (co > 0) continue;
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'a': adapter_dir = optarg; break;
        case O_LORA_SCALE: if (!cli_parse_float(C, "--lora-scale", optarg, -100, 100, &lora_scale)) return 2; break;
        case 'p': prompt = optarg; break;
        case 'f': prompt_file = optarg; break;
        case 'n': if (!cli_parse_int(C, "--n-predict", optarg, 1, 1 << 20, &n_predict)) return 2; break;
        case 'c': if (!cli_parse_int(C, "--ctx", optarg, 1, 1 << 20, &n_ctx)) return 2; break;
        case O_TEMP: if (!cli_parse_float(C, "--temp", optarg, 0, 100, &temp)) return 2; break;
        case O_TOPK: if (!cli_parse_int(C, "--top-k", optarg, 0, 1 << 30, &top_k)) return 2; break;
        case O_TOPP: if (!cli_parse_float(C, "--top-p", optarg, 0, 1, &top_p)) return 2; break;
        case O_SEED: if (!cli_parse_int(C, "--seed", optarg, 0, 0x7fffffffL, &seed)) return 2; break;
        case O_CHAT: chat = 1; break;
        case O_SYSTEM: system = optarg; break;
        case O_TMPL: chat_template = optarg; break;
        case O_PCACHE: prompt_cache = optarg; break;
        case O_TIMINGS: timings = 1; break;
        case O_ECHO: echo = 1; break;
        case O_IGNORE_EOS: ignore_eos = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar generate --help')", argv[optind - 1]); return 2;
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
    if (!prompt == !prompt_file) {
        cli_error(C, "give exactly one of -p TEXT or -f FILE");
        return 2;
    }
    if (system && !chat) {
        cli_error(C, "--system needs --chat");
        return 2;
    }
    if (chat_template && !chat) {
        cli_error(C, "--chat-template needs --chat");
        return 2;
    }
    af_ctx *ctx = NULL;
    int mrc = cli_compute_ctx(C, &cc, &ctx);
    if (mrc) return mrc;

    char *file_text = NULL;
    if (prompt_file) {
        /* never blocks (a FIFO, /dev/zero are refused; "/dev/stdin" may be a pipe); 16 MiB at most */
        if (af_read_text_file(prompt_file, (size_t)16 << 20, &file_text, NULL) != AF_OK) {
            cli_error(C, "prompt file %s", af_last_error());
            af_ctx_free(ctx);
            return 1;
        }
        prompt = file_text;
    }

    int rc = 1;
    af_model *model = NULL;
    af_session *sess = NULL;
    af_ctx *dev_ctx = NULL; /* --device auto that fell back to the CPU: the device context, freed at the end */
    char *chat_text = NULL;
    int32_t *ids = NULL, *gen = NULL;
    float *logits = NULL;
    long n_gen = 0; /* tokens generated (and printed) so far: a CPU fallback re-evaluates them */
    double t_prompt = 0, t_decode = 0;
    long n_decode = 0;
    size_t n_ids = 0;
    af_sampling sp = {(float)temp, (int32_t)top_k, (float)top_p, (uint64_t)seed};
    uint64_t rng = af_rng_seed(sp.seed);
    af_status st;
retry:
    st = af_model_load(ctx, model_path, &model);
    if (st != AF_OK) {
        if (cli_fallback_cpu(C, &ctx, &dev_ctx, st)) goto retry;
        rc = cli_fail(C, st);
        goto done;
    }
    const af_tokenizer *tok = af_model_tokenizer(model);
    if (!tok) {
        cli_error(C, "%s: the model has no usable tokenizer (%s), so text cannot be generated", model_path,
                  tok_reason(model, model_path));
        goto done;
    }
    const char *text = prompt;
    if (chat) {
        free(chat_text);
        chat_text = NULL;
        st = af_chat_format_template(model, chat_template, system, prompt, &chat_text);
        if (st != AF_OK) {
            rc = cli_fail(C, st);
            goto done;
        }
        text = chat_text;
    }
    free(ids);
    ids = NULL;
    st = af_tokenize(tok, text, strlen(text), 1, 1, &ids, &n_ids);
    if (st != AF_OK) {
        rc = cli_fail(C, st);
        goto done;
    }
    if (n_ids == 0) {
        if (prompt_file) cli_error(C, "%s: the prompt is empty after tokenization", prompt_file);
        else cli_error(C, "the prompt is empty after tokenization");
        goto done;
    }
    const af_model_config *cfg = af_model_get_config(model);
    long need = (long)n_ids + n_predict;
    if (n_ctx == 0) n_ctx = need;
    if (n_ctx > cfg->max_position_embeddings) {
        cli_error(C, "context %ld (prompt %zu + n-predict %ld) exceeds the model's %d positions", n_ctx, n_ids,
                  n_predict, cfg->max_position_embeddings);
        rc = 2;
        goto done;
    }
    if ((long)n_ids >= n_ctx) {
        cli_error(C, "the prompt has %zu tokens, more than the context (%ld)", n_ids, n_ctx);
        rc = 2;
        goto done;
    }
    if (need > n_ctx) n_predict = n_ctx - (long)n_ids;
    st = af_session_new(model, (int)n_ctx, &sess);
    if (st == AF_OK && adapter_dir) st = af_session_load_adapter(sess, adapter_dir, (float)lora_scale);
    if (st != AF_OK) goto device_fail;
    if (!logits) logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    if (!gen) gen = malloc(sizeof(int32_t) * (size_t)(n_predict + 1));
    if (!logits || !gen) {
        cli_error(C, "out of memory");
        goto done;
    }
    /* SIGINT and SIGTERM from here on: stop generating after the current token, end the line, exit
     * 130 / 143 (before: at once) */
    cli_graceful_stop(1);
    if (echo && !dev_ctx) {
        fwrite(text, 1, strlen(text), stdout);
        if (cli_stdout_failed(C)) goto done; /* rc 1: the output cannot be written */
    }
    double t0 = now_sec();
    int kept = 0;
    if (prompt_cache && access(prompt_cache, F_OK) == 0 && n_gen == 0) {
        /* a cache that does not belong to this model / adapter / setting is an error, not a miss */
        st = af_session_load_file(sess, prompt_cache);
        if (st != AF_OK) {
            rc = cli_fail(C, st);
            goto done;
        }
        kept = af_session_keep_prefix(sess, ids, (int)n_ids);
    }
    st = af_session_eval(sess, ids + kept, (int)n_ids - kept, logits, NULL);
    if (st == AF_OK && n_gen > 1) /* after a fallback: the tokens already printed, but the last */
        st = af_session_eval(sess, gen, (int)n_gen - 1, NULL, NULL);
    t_prompt = now_sec() - t0;
    if (st == AF_OK && n_gen > 0) st = af_session_eval(sess, gen + n_gen - 1, 1, logits, NULL);
    if (st != AF_OK) goto device_fail;
    if (prompt_cache && n_gen == 0) {
        st = af_session_save_file(sess, prompt_cache);
        if (st != AF_OK) {
            rc = cli_fail(C, st);
            goto done;
        }
        if (timings) fprintf(stderr, "prompt cache: %d of %zu prompt tokens reused from %s\n", kept, n_ids, prompt_cache);
    }
    char piece[256];
    while (n_gen < n_predict && !cli_stop_signal()) {
        const int32_t id = af_sample(logits, cfg->vocab_size, &sp, &rng);
        gen[n_gen++] = id;
        if (!ignore_eos && af_token_is_eog(tok, id)) break;
        int len = af_token_to_bytes(tok, id, 0, piece, sizeof piece);
        if (len > 0) {
            fwrite(piece, 1, (size_t)(len < (int)sizeof piece ? len : (int)sizeof piece), stdout);
            /* a closed pipe (EPIPE with SIGPIPE ignored), a full disk: stop generating at once */
            if (cli_stdout_failed(C)) goto done;
        }
        if (n_gen == n_predict) break;
        double t1 = now_sec();
        st = af_session_eval(sess, &id, 1, logits, NULL);
        t_decode += now_sec() - t1;
        n_decode++;
            if (st != AF_OK) goto device_fail;
    }
    fputc('\n', stdout);
    if (cli_stdout_failed(C)) goto done;
    if (timings)
        fprintf(stderr, "timings: prompt %zu tokens %.3f s (%.2f tok/s), decode %ld tokens %.3f s (%.2f tok/s)\n",
                n_ids, t_prompt, t_prompt > 0 ? (double)n_ids / t_prompt : 0.0, n_decode, t_decode,
                t_decode > 0 ? (double)n_decode / t_decode : 0.0);
    rc = cli_stop_signal() ? 128 + cli_stop_signal() : 0;
    goto done;
device_fail: /* the session failed: with --device auto, the same generation on the CPU from here */
    af_session_free(sess);
    sess = NULL;
    if (st != AF_ERR_CANCELLED && cli_fallback_cpu(C, &ctx, &dev_ctx, st)) {
        af_model_free(model);
        model = NULL;
        goto retry;
    }
    if (n_gen > 0) fputc('\n', stdout);
    rc = cli_fail(C, st);
done:
    free(logits);
    free(gen);
    free(ids);
    free(chat_text);
    free(file_text);
    af_session_free(sess);
    af_model_free(model);
    af_ctx_free(ctx);
    af_ctx_free(dev_ctx);
    return rc;
}
