/*
 * bench_train.c — afinar's side of bench/train_vs_peft: a minimal LoRA training loop driven
 * directly through the engine (src/train/engine.h), timed per optimizer step, printed as JSON.
 *
 * Two sub-commands (both print one JSON object on stdout; errors go to stderr, exit 1):
 *
 *   bench_train tokens --model M --data D.jsonl --labels L.txt --max-seq-len S --n N --out F
 *       Tokenizes D with the model's tokenizer (af_dataset_build: add special tokens, keep the
 *       first S tokens) and writes the first N samples that have at least S tokens (so every row
 *       is full and padded and packed batches hold the same tokens) to F, one sample a line:
 *       "LABEL ID ID ID ...". The first line is "# n NUM_SAMPLES classes NUM_CLASSES max_seq_len S".
 *       bench/train_peft.py reads the same file, so both systems see identical token ids.
 *
 *   bench_train train --model M --tokens F [--f32] [--bf16] [--int8] [--targets qv|all-linear] [--r 16]
 *       [--alpha 32] [--batch 16] [--warmup 1] [--steps 3] [--threads 2] [--lr 2e-4] [--checkpointing]
 *       Loads M (Q4_1 GGUF as stored; --f32: every matrix dequantized ONCE in memory to an f32
 *       copy, the engine then runs its f32-weight kernels; --bf16: a context with matmul precision bf16,
 *       bfloat16 operands with f32 accumulation in the large products, fails where the CPU lacks
 *       AVX512_BF16; --int8: matmul precision int8, the frozen weights' products in int8, AVX512_VNNI),
 *       builds a LoRA layout on ALL layers
 *       (dropout 0, seed 42) with a classification head (mean pooling, no head bias, as
 *       transformers' score layer), no prefix cache, and runs warmup + steps optimizer steps on
 *       consecutive micro-batches of `batch` samples taken in file order (wrapping around). One
 *       step = zero G, af_engine_step (forward + loss + backward), AdamW (torch defaults, weight
 *       decay 0.01, no clipping) — the same work as train_peft.py's zero_grad/forward/backward/step.
 *       Reports per-step wall times, samples/s and tokens/s over the timed steps, losses, the
 *       peak resident memory (VmHWM) and the engine's activation bytes per token with and without
 *       checkpointing (af_engine_bytes).
 *
 * Built by bench/train_vs_peft against libafinar.a with -Iinclude -Isrc (internal headers).
 */
#include "afinar.h"
#include "kernels/ctx.h"
#include "kernels/cpu/attention_gemm.h"
#include "core/core.h"
#include "formats/jsonl.h"
#include "kernels/quant.h"
#include "lora/lora.h"
#include "model/model.h"
#include "train/data.h"
#include "train/engine.h"
#include "train/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_ctx.h"

static void die(const char *what) {
    fprintf(stderr, "bench_train: %s: %s\n", what, af_last_error());
    exit(1);
}

static const char *arg(int argc, char **argv, const char *name, const char *def) {
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

static int flag(int argc, char **argv, const char *name) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

/* A field of /proc/self/status in KiB ("VmHWM", "VmRSS", "RssFile", ...), -1 if absent. */
static long proc_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

static int cmd_tokens(int argc, char **argv) {
    const char *mp = arg(argc, argv, "--model", NULL), *dp = arg(argc, argv, "--data", NULL);
    const char *lp = arg(argc, argv, "--labels", NULL), *op = arg(argc, argv, "--out", NULL);
    int32_t S = atoi(arg(argc, argv, "--max-seq-len", "512")), N = atoi(arg(argc, argv, "--n", "64"));
    if (!mp || !dp || !lp || !op) {
        fprintf(stderr, "bench_train tokens: --model, --data, --labels and --out are required\n");
        return 1;
    }
    af_model *m = NULL;
    if (bench_ctx(NULL, 0, NULL, 0) != AF_OK || af_model_load(g_ctx, mp, &m) != AF_OK) die(mp);
    char **names = NULL;
    int32_t nn = 0;
    if (af_labels_read_file(lp, &names, &nn) != AF_OK) die(lp);
    af_corpus_opts co;
    af_corpus_opts_init(&co);
    co.label_names = (const char *const *)names;
    co.n_label_names = nn;
    af_corpus *c = NULL;
    if (af_corpus_read(dp, &co, &c) != AF_OK) die(dp);
    af_dataset *all = NULL, *ds = NULL;
    if (af_dataset_build(g_ctx, c, af_model_tokenizer(m), S, &all) != AF_OK) die("tokenize");
    /* the first N samples with at least S tokens: every row is full, so a padded batch (PyTorch)
       and a packed batch (afinar) hold exactly the same tokens */
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)all->n), k = 0;
    if (!idx) exit(1);
    for (int32_t i = 0; i < all->n && k < N; i++)
        if (af_dataset_len(all, i) == S) idx[k++] = i;
    if (k < N) {
        fprintf(stderr, "bench_train: only %d samples of %s have >= %d tokens (need %d)\n", k, dp, S, N);
        return 1;
    }
    if (af_dataset_subset(all, idx, k, &ds) != AF_OK) die("subset");
    free(idx);
    af_dataset_free(all);
    FILE *f = fopen(op, "w");
    if (!f) {
        fprintf(stderr, "bench_train: %s: cannot write\n", op);
        return 1;
    }
    fprintf(f, "# n %d classes %d max_seq_len %d\n", ds->n, ds->num_classes, S);
    int64_t ntok = 0, nfull = 0;
    for (int32_t i = 0; i < ds->n; i++) {
        fprintf(f, "%d", ds->labels[i]);
        for (int64_t k = ds->tok_off[i]; k < ds->tok_off[i + 1]; k++) fprintf(f, " %d", ds->tokens[k]);
        fputc('\n', f);
        ntok += af_dataset_len(ds, i);
        nfull += af_dataset_len(ds, i) == S;
    }
    fclose(f);
    printf("{\"samples\": %d, \"classes\": %d, \"tokens\": %lld, \"full_rows\": %lld, \"max_seq_len\": %d}\n",
           ds->n, ds->num_classes, (long long)ntok, (long long)nfull, S);
    af_dataset_free(ds);
    af_corpus_free(c);
    af_labels_free(names, nn);
    af_model_free(m);
    return 0;
}

/* Read the token file written by cmd_tokens. */
static af_dataset *read_tokens(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench_train: %s: cannot open\n", path);
        exit(1);
    }
    int n = 0, C = 0, S = 0;
    if (fscanf(f, "# n %d classes %d max_seq_len %d", &n, &C, &S) != 3 || n < 1) {
        fprintf(stderr, "bench_train: %s: bad header\n", path);
        exit(1);
    }
    int64_t cap = (int64_t)n * S;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap), *lab = malloc(sizeof(int32_t) * (size_t)n);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!ids || !lab || !off) exit(1);
    off[0] = 0;
    int64_t k = 0;
    for (int i = 0; i < n; i++) {
        if (fscanf(f, "%d", &lab[i]) != 1) exit(1);
        int c;
        for (;;) {
            do c = fgetc(f);
            while (c == ' ');
            if (c == '\n' || c == EOF) break;
            ungetc(c, f);
            int v;
            if (k >= cap || fscanf(f, "%d", &v) != 1) {
                fprintf(stderr, "bench_train: %s: bad line %d\n", path, i + 2);
                exit(1);
            }
            ids[k++] = v;
        }
        off[i + 1] = k;
    }
    fclose(f);
    af_dataset *ds = NULL;
    if (af_dataset_from_tokens(ids, off, n, lab, NULL, C, S, &ds) != AF_OK) die(path);
    free(ids), free(lab), free(off);
    return ds;
}

/* Replace one frozen matrix by an f32 copy (owned by the caller through *keep). The source pages of
 * the read-only private mapping are then dropped (MADV_DONTNEED: re-read from the file if ever
 * touched again), so the resident set holds the f32 copy and not both. */
static size_t to_f32(af_weight *w, float **keep) {
    if (w->type == AF_TYPE_F32) return 0;
    float *d = malloc(sizeof(float) * (size_t)(w->rows * w->cols));
    if (!d) {
        fprintf(stderr, "bench_train: out of memory (f32 copy)\n");
        exit(1);
    }
    const size_t rb = af_row_bytes(w->type, w->cols);
    for (int64_t r = 0; r < w->rows; r++)
        af_dequantize_row(w->type, (const char *)w->data + (size_t)r * rb, d + (size_t)r * (size_t)w->cols, w->cols);
    uintptr_t a = (uintptr_t)w->data, e = a + rb * (size_t)w->rows, pg = 4096;
    uintptr_t a0 = (a + pg - 1) & ~(pg - 1), e0 = e & ~(pg - 1);
    if (e0 > a0) madvise((void *)a0, e0 - a0, MADV_DONTNEED);
    w->data = d;
    w->type = AF_TYPE_F32;
    *keep = d;
    return sizeof(float) * (size_t)(w->rows * w->cols);
}

static int cmd_train(int argc, char **argv) {
    const char *mp = arg(argc, argv, "--model", NULL), *tp = arg(argc, argv, "--tokens", NULL);
    const char *targets = arg(argc, argv, "--targets", "qv");
    const int f32 = flag(argc, argv, "--f32"), ckpt = flag(argc, argv, "--checkpointing");
    const int32_t r = atoi(arg(argc, argv, "--r", "16")), B = atoi(arg(argc, argv, "--batch", "16"));
    const float alpha = (float)atof(arg(argc, argv, "--alpha", "32"));
    const int warm = atoi(arg(argc, argv, "--warmup", "1")), steps = atoi(arg(argc, argv, "--steps", "3"));
    const int threads = atoi(arg(argc, argv, "--threads", "2"));
    const float lr = (float)atof(arg(argc, argv, "--lr", "2e-4"));
    if (!mp || !tp || B < 1 || steps < 1 || warm < 0) {
        fprintf(stderr, "bench_train train: --model and --tokens are required; batch, steps >= 1\n");
        return 1;
    }
    const char *prec = flag(argc, argv, "--int8") ? "int8" : flag(argc, argv, "--bf16") ? "bf16" : NULL;
    if (bench_ctx(NULL, threads, prec, 0) != AF_OK) die("context (--bf16 / --int8?)");
    if (flag(argc, argv, "--row-attention")) af_ctx_set_hook(g_ctx, AF_CTX_ATT_GEMM, 0); /* A/B of attention_gemm.c */
    const double t_load0 = af_time_sec();
    af_model *m = NULL;
    if (af_model_load(g_ctx, mp, &m) != AF_OK) die(mp);
    size_t f32_bytes = 0;
    float *owned[2 + 7 * 64] = {0};
    int n_owned = 0;
    if (f32) {
        const int tied = m->output.data == m->tok_embd.data;
        f32_bytes += to_f32(&m->tok_embd, &owned[n_owned++]);
        if (tied) m->output = m->tok_embd;
        else f32_bytes += to_f32(&m->output, &owned[n_owned++]);
        for (int32_t l = 0; l < m->cfg.num_hidden_layers && l < 64; l++) {
            af_layer *L = &m->layers[l];
            af_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (int p = 0; p < 7; p++) f32_bytes += to_f32(ws[p], &owned[n_owned++]);
        }
    }
    const double t_load = af_time_sec() - t_load0;
    af_dataset *ds = read_tokens(tp);
    const long rss_model = proc_kib("VmRSS");

    af_lora_config lc = {.r = r, .alpha = alpha, .dropout = 0, .use_rslora = 0, .seed = 42};
    if (af_lora_parse_targets(targets, &lc.targets) != AF_OK) die(targets);
    af_param_layout lay;
    if (af_param_layout_init(&lay, m, &lc, ds->num_classes) != AF_OK) die("layout");
    const int64_t n = lay.n_total;
    float *P = calloc((size_t)n, 4), *G = calloc((size_t)n, 4), *M = calloc((size_t)n, 4), *V = calloc((size_t)n, 4);
    uint8_t *decay = malloc((size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)B * (size_t)ds->num_classes);
    if (!P || !G || !M || !V || !decay || !logits) exit(1);
    memset(decay, 1, (size_t)n);
    memset(decay + lay.head_b_off, 0, (size_t)ds->num_classes);
    af_lora_init_params(&lay, P);
    af_engine *eng = NULL;
    if (af_engine_new(g_ctx, m, &lay, &eng) != AF_OK) die("engine");
    af_batcher *bt = NULL;
    if (af_batcher_new(ds, NULL, ds->n, B, &bt) != AF_OK) die("batcher");
    af_adamw opt;
    af_adamw_defaults(&opt, lr);

    const int total = warm + steps;
    double *dt = calloc((size_t)total, sizeof(double)), *loss = calloc((size_t)total, sizeof(double));
    int64_t *ntok = calloc((size_t)total, sizeof(int64_t)), max_tok = 0;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)B);
    if (!dt || !loss || !ntok || !idx) exit(1);
    for (int s = 0; s < total; s++) {
        for (int32_t i = 0; i < B; i++) idx[i] = (int32_t)(((int64_t)s * B + i) % ds->n);
        af_packed_batch pb;
        if (af_batcher_pack(bt, idx, B, &pb) != AF_OK) die("pack");
        af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, pb.labels, pb.multi_hot, pb.targets};
        af_step_opts so = {AF_POOL_MEAN, NULL, ckpt, 1, (uint64_t)s};
        const double t0 = af_time_sec();
        memset(G, 0, sizeof(float) * (size_t)n);
        if (af_engine_step(eng, P, G, &b, &so, 1.0f, &loss[s], logits) != AF_OK) die("step");
        memset(G + lay.head_b_off, 0, sizeof(float) * (size_t)ds->num_classes); /* no head bias */
        af_adamw_step(g_ctx, &opt, P, G, M, V, n, lr, decay);
        dt[s] = af_time_sec() - t0;
        ntok[s] = pb.n_tok;
        if (pb.n_tok > max_tok) max_tok = pb.n_tok;
        fprintf(stderr, "bench_train: step %d/%d %.3f s loss %.4f (%lld tokens)\n", s + 1, total, dt[s], loss[s],
                (long long)pb.n_tok);
    }
    double tt = 0;
    int64_t tok = 0;
    for (int s = warm; s < total; s++) tt += dt[s], tok += ntok[s];
    const size_t bytes_nock = af_engine_bytes(m, &lay, max_tok, 0), bytes_ck = af_engine_bytes(m, &lay, max_tok, 1);

    printf("{\"system\": \"afinar\", \"base\": \"%s\", \"weight_type\": \"%s\", \"targets\": \"%s\", \"r\": %d, "
           "\"alpha\": %g, \"batch\": %d, \"max_seq_len\": %d, \"threads\": %d, \"checkpointing\": %s, "
           "\"kernel_path\": \"%s\", \"matmul_precision\": \"%s\", \"warmup_steps\": %d, \"timed_steps\": %d, \"trainable_params\": %lld, ",
           f32 ? "f32" : "gguf", f32 ? "f32 (dequantized in memory)" : af_type_name(m->layers[0].wq.type), targets,
           r, alpha, B, ds->max_seq_len, threads, ckpt ? "true" : "false", af_ctx_describe(g_ctx), af_ctx_matmul_precision(g_ctx), warm, steps,
           (long long)(n - ds->num_classes));
    printf("\"step_s\": [");
    for (int s = 0; s < total; s++) printf("%s%.6f", s ? ", " : "", dt[s]);
    printf("], \"step_tokens\": [");
    for (int s = 0; s < total; s++) printf("%s%lld", s ? ", " : "", (long long)ntok[s]);
    printf("], \"loss\": [");
    for (int s = 0; s < total; s++) printf("%s%.6f", s ? ", " : "", loss[s]);
    printf("], \"timed_s\": %.6f, \"samples_per_s\": %.4f, \"tokens_per_s\": %.2f, ", tt, steps * B / tt, tok / tt);
    printf("\"load_s\": %.3f, \"f32_copy_bytes\": %zu, \"rss_after_load_kib\": %ld, \"peak_rss_kib\": %ld, "
           "\"rss_file_kib\": %ld, \"act_bytes_per_token\": %.1f, \"act_bytes_per_token_ckpt\": %.1f, "
           "\"engine_bytes\": %zu, \"engine_bytes_ckpt\": %zu}\n",
           t_load, f32_bytes, rss_model, proc_kib("VmHWM"), proc_kib("RssFile"), (double)bytes_nock / (double)max_tok,
           (double)bytes_ck / (double)max_tok, bytes_nock, bytes_ck);
    af_batcher_free(bt);
    af_engine_free(eng);
    af_param_layout_free(&lay);
    af_dataset_free(ds);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(P), free(G), free(M), free(V), free(decay), free(logits), free(dt), free(loss), free(ntok), free(idx);
    af_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "tokens")) return cmd_tokens(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "train")) return cmd_train(argc, argv);
    fprintf(stderr, "usage: bench_train tokens|train ... (see the comment at the top of bench/bench_train.c)\n");
    return 2;
}
