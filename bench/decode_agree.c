/*
 * decode_agree.c — agreement of the int8-activation decode (`--int8-act`, af_ctx_params.int8_activations)
 * with the exact f32 decode on held-out prompts: the measurement any default decode path must pass
 * (greedy agreement >= 99% of >= 1,000 tokens, mean KL(p_f32 || p_int8) <= 1e-3 per token).
 *
 * The model is loaded twice, under an exact context (int8_activations 0) and an int8 one. For each
 * prompt, both sessions take the prompt's tokens but the last as one batch (the prompt path is f32
 * in both contexts), then the exact session generates greedily one token at a time while the int8
 * session is fed the SAME tokens one at a time (teacher forcing: every compared step runs the decode
 * kernels, from the same history). Per step: top-1 of both logits, KL(p_f32 || p_int8) over the
 * whole vocabulary (softmax in double), and, where the top-1 differs, the exact path's margin
 * between its first and second logit. Then, for reference, the int8 session generates greedily on
 * its own from the prompt and the length of its common prefix with the exact tokens is counted
 * (free-running agreement: one early flip changes everything after it). The process CPU time of
 * each teacher-forced step is summed per context (the two alternate step by step, so machine
 * load hits both alike): CPU ms per decode step, exact vs int8.
 *
 * Prompts (none used to tune any kernel): a few generic questions through the model's chat
 * template (af_chat_format), then the first line (the headline) of successive articles of a BBC
 * News *test* split (JSON lines with an "input" field; default data/bbc/test.jsonl) as plain text,
 * until the compared tokens reach --tokens. Generation of a prompt ends at an end-of-generation
 * token or after --per-prompt tokens.
 *
 * Build and run (bench/decode_agreement.sh runs both models of models/ and writes the table):
 *   make build/bench/decode_agree
 *   build/bench/decode_agree MODEL.gguf [--tokens 1000] [--per-prompt 128] [--threads 1]
 *       [--kernel auto|avx512|avx2|scalar] [--data data/bbc/test.jsonl] [--json OUT.json]
 *       [--int8-roles qkv,o,gateup,down,head,other | all]
 * --int8-roles: the product classes of the int8 context that take int8 activations (kernels/ctx.h
 * AF_INT8_*; default all), the others computed exact f32: which products cost the agreement.
 * Exit status: 0 (the figures are printed; meeting the targets is reported, not enforced), 1 on
 * a load / evaluation error, 2 on bad arguments.
 */
#include "afinar.h"
#include "kernels/ctx.h" /* af_ctx_set_int8_roles: mixed decode (a benchmark setting) */

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *CHAT_PROMPTS[] = {
    "What are three things to check before buying a used bicycle?",
    "Explain in a few sentences why the sky looks blue.",
    "Write a short note thanking a colleague for covering my shift.",
    "How do I keep basil growing on a windowsill?",
    "What is the difference between a list and a tuple in Python?",
    "Give me a simple plan for learning to swim as an adult.",
};
#define N_CHAT ((int)(sizeof CHAT_PROMPTS / sizeof CHAT_PROMPTS[0]))

typedef struct stats {
    long steps, agree, prompts;
    double kl_sum, kl_max;
    long kl_over; /* steps with KL > 1e-3 */
    double margin_sum; /* exact-path top-1 minus top-2 logit at disagreeing steps */
    double margin_max;
    long free_tokens, free_prefix; /* free-running: exact tokens compared, common prefix */
    long free_full;                 /* prompts whose whole generation matched */
    double cpu_e, cpu_q;            /* process CPU seconds of the teacher-forced decode steps */
} stats;

/* Process CPU time in seconds (all threads). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Greedy choice: the library's (af_sample with no parameters: argmax, ties -> lowest id). */
static int32_t argmax(const float *x, int32_t n) { return af_sample(x, n, NULL, NULL); }

/* log-sum-exp of x[0..n) in double. */
static double lse(const float *x, int32_t n) {
    double m = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

/* KL(softmax(a) || softmax(b)) in nats. */
static double kl(const float *a, const float *b, int32_t n) {
    const double la = lse(a, n), lb = lse(b, n);
    double s = 0;
    for (int32_t i = 0; i < n; i++) {
        double pa = (double)a[i] - la;
        s += exp(pa) * (pa - ((double)b[i] - lb));
    }
    return s > 0 ? s : 0;
}

/* Second-largest logit (the exact path's runner-up), given the largest's index. */
static float second(const float *x, int32_t n, int32_t top) {
    float s = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (i != top && x[i] > s) s = x[i];
    return s;
}

/* First line of the "input" of line `want` (0-based) of a JSON-lines file into a malloc'ed
 * string; NULL (message printed) at the end of the file or on a malformed line. */
static char *bbc_line(FILE *f, const char *path, long want) {
    static long line_no = 0;
    static char *buf = NULL;
    static size_t cap = 0;
    while (line_no <= want) {
        ssize_t len = getline(&buf, &cap, f);
        if (len < 0) return NULL;
        line_no++;
    }
    cJSON *j = cJSON_Parse(buf);
    const cJSON *in = j ? cJSON_GetObjectItemCaseSensitive(j, "input") : NULL;
    if (!cJSON_IsString(in)) {
        fprintf(stderr, "%s: line %ld: no string field \"input\"\n", path, want + 1);
        cJSON_Delete(j);
        return NULL;
    }
    const char *s = in->valuestring;
    size_t n = strcspn(s, "\n");
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, s, n);
        out[n] = 0;
    }
    cJSON_Delete(j);
    return out;
}

/* "qkv,o,..." or "all" -> AF_INT8_* bits; -1 for an unknown name. */
static int parse_roles(const char *s) {
    static const struct {
        const char *name;
        int bit;
    } R[] = {{"qkv", AF_INT8_QKV}, {"o", AF_INT8_O}, {"gateup", AF_INT8_GATEUP}, {"down", AF_INT8_DOWN},
             {"head", AF_INT8_HEAD}, {"other", AF_INT8_OTHER}, {"all", AF_INT8_ALL}};
    int bits = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        int found = 0;
        for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
            if (strlen(R[i].name) == n && !strncmp(s, R[i].name, n)) {
                bits |= R[i].bit;
                found = 1;
            }
        if (!found) return -1;
        s += n + (s[n] == ',');
    }
    return bits;
}

static int fail(const char *what) {
    fprintf(stderr, "decode_agree: %s: %s\n", what, af_last_error());
    return 1;
}

/* One prompt: teacher-forced comparison, then the free-running prefix. Returns 0 or 1 (error). */
static int run_prompt(af_model *me, af_model *mq, const char *text, int per_prompt, stats *S, float *la, float *lb,
                      int32_t *gen) {
    const af_tokenizer *tok = af_model_tokenizer(me);
    const int32_t V = af_model_get_config(me)->vocab_size;
    int32_t *ids = NULL;
    size_t n = 0;
    if (af_tokenize(tok, text, strlen(text), 1, 1, &ids, &n) != AF_OK) return fail("tokenize");
    if (n < 1) {
        free(ids);
        return 0;
    }
    af_session *se = NULL, *sq = NULL;
    int rc = 1;
    const int n_ctx = (int)n + per_prompt + 8;
    if (af_session_new(me, n_ctx, &se) != AF_OK || af_session_new(mq, n_ctx, &sq) != AF_OK) {
        rc = fail("session");
        goto done;
    }
    if (n > 1 && (af_session_eval(se, ids, (int)n - 1, NULL, NULL) != AF_OK ||
                  af_session_eval(sq, ids, (int)n - 1, NULL, NULL) != AF_OK)) {
        rc = fail("prompt");
        goto done;
    }
    int32_t cur = ids[n - 1];
    int ng = 0;
    for (int step = 0; step < per_prompt; step++) {
        const double c0 = cpu_now();
        af_status st = af_session_eval(se, &cur, 1, la, NULL);
        const double c1 = cpu_now();
        if (st == AF_OK) st = af_session_eval(sq, &cur, 1, lb, NULL);
        S->cpu_e += c1 - c0;
        S->cpu_q += cpu_now() - c1;
        if (st != AF_OK) {
            rc = fail("decode");
            goto done;
        }
        const int32_t te = argmax(la, V), tq = argmax(lb, V);
        const double k = kl(la, lb, V);
        S->steps++;
        S->kl_sum += k;
        if (k > S->kl_max) S->kl_max = k;
        if (k > 1e-3) S->kl_over++;
        if (te == tq)
            S->agree++;
        else {
            double mg = (double)la[te] - (double)second(la, V, te);
            S->margin_sum += mg;
            if (mg > S->margin_max) S->margin_max = mg;
        }
        gen[ng++] = te;
        if (af_token_is_eog(tok, te)) break;
        cur = te;
    }
    /* free-running: the int8 session alone from the same prompt */
    af_session_reset(sq);
    if (n > 1 && af_session_eval(sq, ids, (int)n - 1, NULL, NULL) != AF_OK) {
        rc = fail("prompt");
        goto done;
    }
    cur = ids[n - 1];
    int prefix = 0;
    for (; prefix < ng; prefix++) {
        if (af_session_eval(sq, &cur, 1, lb, NULL) != AF_OK) {
            rc = fail("decode");
            goto done;
        }
        cur = argmax(lb, V);
        if (cur != gen[prefix]) break;
    }
    S->free_tokens += ng;
    S->free_prefix += prefix;
    S->free_full += prefix == ng;
    S->prompts++;
    rc = 0;
done:
    af_session_free(se);
    af_session_free(sq);
    free(ids);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL, *data = "data/bbc/test.jsonl", *json = NULL, *kernel = NULL, *roles_s = "all";
    long target = 1000, per_prompt = 128, threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tokens") && v) target = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--per-prompt") && v) per_prompt = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && v) threads = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--kernel") && v) kernel = argv[++i];
        else if (!strcmp(a, "--data") && v) data = argv[++i];
        else if (!strcmp(a, "--json") && v) json = argv[++i];
        else if (!strcmp(a, "--int8-roles") && v) roles_s = argv[++i];
        else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "usage: decode_agree MODEL [--tokens N] [--per-prompt N] [--threads N] [--kernel PATH] "
                            "[--data FILE.jsonl] [--json OUT] [--int8-roles LIST]\n");
            return 2;
        }
    }
    const int roles = parse_roles(roles_s);
    if (roles < 0) {
        fprintf(stderr, "decode_agree: --int8-roles %s: names are qkv, o, gateup, down, head, other, all\n", roles_s);
        return 2;
    }
    if (!model || target < 1 || per_prompt < 1 || per_prompt > 4096 || threads < 0) {
        fprintf(stderr, "decode_agree: need a MODEL, --tokens >= 1, --per-prompt in 1..4096, --threads >= 0\n");
        return 2;
    }
    af_ctx *ce = NULL, *cq = NULL;
    af_model *me = NULL, *mq = NULL;
    FILE *f = NULL;
    float *la = NULL, *lb = NULL;
    int32_t *gen = NULL;
    int rc = 1;
    af_ctx_params p;
    af_ctx_params_default(&p);
    p.n_threads = (int)threads;
    if (kernel) p.kernel_path = kernel;
    if (af_ctx_new(&p, &ce) != AF_OK) {
        fail("exact context");
        goto out;
    }
    p.int8_activations = 1;
    if (af_ctx_new(&p, &cq) != AF_OK) {
        fail("int8 context");
        goto out;
    }
    af_ctx_set_int8_roles(cq, roles);
    if (af_model_load(ce, model, &me) != AF_OK || af_model_load(cq, model, &mq) != AF_OK) {
        fail(model);
        goto out;
    }
    if (!(f = fopen(data, "r"))) {
        fprintf(stderr, "decode_agree: %s: cannot open\n", data);
        goto out;
    }
    const int32_t V = af_model_get_config(me)->vocab_size;
    la = malloc(sizeof(float) * (size_t)V);
    lb = malloc(sizeof(float) * (size_t)V);
    gen = malloc(sizeof(int32_t) * (size_t)per_prompt);
    if (!la || !lb || !gen) {
        fprintf(stderr, "decode_agree: out of memory\n");
        goto out;
    }
    stats S;
    memset(&S, 0, sizeof S);
    long chat = 0, bbc = 0;
    for (int i = 0; S.steps < target; i++) {
        char *text = NULL;
        if (i < N_CHAT) {
            if (af_chat_format(me, NULL, CHAT_PROMPTS[i], &text) != AF_OK) {
                fail("chat template");
                goto out;
            }
            chat++;
        } else {
            text = bbc_line(f, data, bbc);
            if (!text) {
                fprintf(stderr, "decode_agree: %s: ran out of prompts at %ld compared tokens\n", data, S.steps);
                break;
            }
            bbc++;
        }
        const int bad = run_prompt(me, mq, text, (int)per_prompt, &S, la, lb, gen);
        free(text);
        if (bad) goto out;
    }
    const double top1 = S.steps ? (double)S.agree / (double)S.steps : 0, mkl = S.steps ? S.kl_sum / (double)S.steps : 0;
    const double freep = S.free_tokens ? (double)S.free_prefix / (double)S.free_tokens : 0;
    const long dis = S.steps - S.agree;
    printf("model %s (%s), kernel path %s, %ld threads, int8 products: %s\n", model,
           af_model_get_config(me)->architecture, af_ctx_kernel_path(ce), threads, roles_s);
    printf("prompts: %ld chat + %ld BBC test headlines; %ld teacher-forced decode steps\n", chat, bbc, S.steps);
    printf("top-1 agreement: %.2f%% (%ld of %ld differ; exact-path margin at those: mean %.3f, max %.3f)\n",
           100 * top1, dis, S.steps, dis ? S.margin_sum / (double)dis : 0, S.margin_max);
    printf("KL(p_f32 || p_int8) per token: mean %.3e, max %.3e, steps over 1e-3: %ld\n", mkl, S.kl_max, S.kl_over);
    printf("free-running greedy: %.2f%% of exact tokens in the common prefix; %ld of %ld prompts identical\n",
           100 * freep, S.free_full, S.prompts);
    printf("CPU ms per decode step (interleaved, step by step): exact %.3f, int8 %.3f (%.2fx)\n",
           1e3 * S.cpu_e / (double)(S.steps ? S.steps : 1), 1e3 * S.cpu_q / (double)(S.steps ? S.steps : 1),
           S.cpu_q > 0 ? S.cpu_e / S.cpu_q : 0);
    printf("targets: top-1 >= 99%%: %s; mean KL <= 1e-3: %s\n", top1 >= 0.99 ? "met" : "missed",
           mkl <= 1e-3 ? "met" : "missed");
    if (json) { /* written to json.tmp, then renamed */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddStringToObject(o, "kernel", af_ctx_kernel_path(ce));
        cJSON_AddNumberToObject(o, "threads", (double)threads);
        cJSON_AddStringToObject(o, "int8_roles", roles_s);
        cJSON_AddNumberToObject(o, "prompts", (double)S.prompts);
        cJSON_AddNumberToObject(o, "steps", (double)S.steps);
        cJSON_AddNumberToObject(o, "top1", top1);
        cJSON_AddNumberToObject(o, "kl_mean", mkl);
        cJSON_AddNumberToObject(o, "kl_max", S.kl_max);
        cJSON_AddNumberToObject(o, "kl_over_1e3", (double)S.kl_over);
        cJSON_AddNumberToObject(o, "free_prefix", freep);
        cJSON_AddNumberToObject(o, "free_identical_prompts", (double)S.free_full);
        cJSON_AddNumberToObject(o, "cpu_ms_exact", 1e3 * S.cpu_e / (double)(S.steps ? S.steps : 1));
        cJSON_AddNumberToObject(o, "cpu_ms_int8", 1e3 * S.cpu_q / (double)(S.steps ? S.steps : 1));
        char *txt = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", json);
        FILE *out = txt ? fopen(tmp, "w") : NULL;
        const int ok = out && fprintf(out, "%s\n", txt) > 0;
        free(txt);
        if (!out || fclose(out) != 0 || !ok || rename(tmp, json) != 0) {
            fprintf(stderr, "decode_agree: %s: cannot write\n", json);
            if (out) remove(tmp);
            goto out;
        }
    }
    rc = 0;
out:
    if (f) fclose(f);
    free(la);
    free(lb);
    free(gen);
    af_model_free(me);
    af_model_free(mq);
    af_ctx_free(ce);
    af_ctx_free(cq);
    return rc;
}
