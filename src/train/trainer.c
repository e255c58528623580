/* trainer.c — trainer setup: options, model, data, split, statistics, class weights, plan,
 * memory estimate, diagnostics and the pre-training report (see trainer.h). */
#include "train/settings_internal.h"
#include "train/trainer_internal.h"

#include "formats/jsonl.h"
#include "kernels/ctx.h"
#include "kernels/matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void af_trainer_free(af_trainer *t) {
    if (!t) return;
    af_dataset_free(t->train_owned);
    af_dataset_free(t->val_owned);
    if (t->label_names) af_labels_free(t->label_names, t->num_classes);
    if (t->have_st_train) af_data_stats_free(&t->st_train);
    if (t->have_st_val) af_data_stats_free(&t->st_val);
    if (t->have_lay) af_param_layout_free(&t->lay);
    free(t->class_w);
    free(t->layer_list);
    af_diag_list_free(&t->diags);
    free(t->config_owned);
    free((void *)t->o); /* the plan, allocated by af_trainer_new */
    af_model_free(t->model_owned);
    af_ctx_free(t->ctx);
    af_ctx_free(t->ctx_dev);
    free(t);
}

static af_status copy_names(char ***dst, char *const *src, int32_t n) {
    *dst = af_calloc((size_t)n, sizeof(char *));
    if (!*dst) return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    for (int32_t i = 0; i < n; i++)
        if (!((*dst)[i] = strdup(src[i]))) return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    return AF_OK;
}

/* Read, check and tokenize the JSONL data; fills t->train_owned, t->val_owned, names, classes. */
static af_status load_text_data(af_trainer *t) {
    const af_trainer_opts *o = t->o;
    const af_tokenizer *tok = af_model_tokenizer(t->model);
    if (!tok) {
        const char *mp = o->model_path ? o->model_path : "model";
        const char *why = t->model->tok_error[0] ? t->model->tok_error : "no tokenizer.ggml.* keys";
        size_t lp = strlen(mp);
        if (!strncmp(why, mp, lp) && !strncmp(why + lp, ": ", 2)) why += lp + 2; /* path said once */
        return af_fail(AF_ERR_NOT_FOUND, "%s: the model has no usable tokenizer (%s); text data cannot be read", mp,
                       why);
    }
    char **names = NULL;
    int32_t n_names = 0;
    af_status st = AF_OK;
    if (o->labels) {
        struct stat sb;
        if (stat(o->labels, &sb) == 0 && S_ISREG(sb.st_mode)) st = af_labels_read_file(o->labels, &names, &n_names);
        else st = af_labels_parse_list(o->labels, &names, &n_names);
        if (st != AF_OK) return st;
        if (o->num_classes > 0 && o->num_classes != n_names) {
            af_labels_free(names, n_names);
            return af_fail(AF_ERR_INVALID_ARG, "--num-classes %d disagrees with the %d names of --labels", o->num_classes,
                           n_names);
        }
    }
    af_corpus_opts co;
    af_corpus_opts_init(&co);
    co.text_field = o->text_field;
    co.label_field = o->label_field;
    co.label_names = (const char *const *)names;
    co.n_label_names = n_names;
    co.num_classes = o->num_classes;
    af_corpus *ct = NULL, *cv = NULL;
    st = af_corpus_read(o->train_path, &co, &ct);
    if (st != AF_OK) goto done;
    if (o->multi_label && !ct->multi_label) {
        st = af_fail(AF_ERR_FORMAT, "%s: --multi-label given but the data are single-label (field '%s' holds one label)",
                     o->train_path, o->label_field ? o->label_field : "label");
        goto done;
    }
    t->multi_label = ct->multi_label;
    t->num_classes = ct->num_classes;
    if (names) {
        t->label_names = names;
        names = NULL;
        n_names = 0;
    } else if (ct->label_names) {
        st = copy_names(&t->label_names, ct->label_names, ct->num_classes);
        if (st != AF_OK) goto done;
    }
    if (o->val_path) {
        co.label_names = (const char *const *)t->label_names;
        co.n_label_names = t->label_names ? t->num_classes : 0;
        co.num_classes = t->num_classes;
        st = af_corpus_read(o->val_path, &co, &cv);
        if (st != AF_OK) goto done;
        if (cv->multi_label != ct->multi_label) {
            st = af_fail(AF_ERR_FORMAT, "%s: validation data are %s but the training data are %s", o->val_path,
                         cv->multi_label ? "multi-label" : "single-label", ct->multi_label ? "multi-label" : "single-label");
            goto done;
        }
    }
    /* the automatic recipe chooses max_seq_len from the lengths: build at its largest choice, then
       truncate (af_tr_recipe_apply) */
    int32_t build_len = o->max_seq_len;
    if (o->recipe == AF_RECIPE_AUTO && !(o->given & AF_GIVEN_MAX_SEQ_LEN)) {
        const int32_t ctxlen = t->model->cfg.max_position_embeddings;
        build_len = ctxlen > 0 && ctxlen < AF_RECIPE_MAX_LEN ? ctxlen : AF_RECIPE_MAX_LEN;
        if (build_len < o->max_seq_len) build_len = o->max_seq_len;
    }
    st = af_dataset_build(t->ctx, ct, tok, build_len, &t->train_owned);
    if (st == AF_OK && cv) st = af_dataset_build(t->ctx, cv, tok, build_len, &t->val_owned);
done:
    af_corpus_free(ct);
    af_corpus_free(cv);
    if (names) af_labels_free(names, n_names);
    return st;
}

/* A preference set's split: round(val_split · pairs) pairs (at least 1, at most pairs − 1) chosen by
 * a seeded shuffle of the pairs go to validation, both sides of each; indices ascending. */
static af_status split_pairs(const af_dataset *ds, double frac, uint64_t seed, int32_t **ti, int32_t *nt, int32_t **vi,
                             int32_t *nv) {
    const int32_t np = ds->n / 2;
    int32_t nval = (int32_t)floor(frac * np + 0.5);
    if (nval < 1) nval = 1;
    if (nval > np - 1)
        return af_fail(AF_ERR_INVALID_ARG, "--val-split %g: %d pairs cannot be split (none would be left to train on)",
                       frac, (int)np);
    int32_t *perm = af_malloc(sizeof(int32_t) * (size_t)np);
    uint8_t *isv = af_calloc((size_t)np, 1);
    *ti = af_malloc(sizeof(int32_t) * 2 * (size_t)(np - nval));
    *vi = af_malloc(sizeof(int32_t) * 2 * (size_t)nval);
    af_status st = perm && isv && *ti && *vi ? AF_OK : af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    if (st == AF_OK) {
        af_shuffle_perm(perm, np, seed, 0x76616c);
        for (int32_t k = 0; k < nval; k++) isv[perm[k]] = 1;
        *nt = *nv = 0;
        for (int32_t i = 0; i < np; i++) {
            int32_t *d = isv[i] ? *vi : *ti, *c = isv[i] ? nv : nt;
            d[(*c)++] = 2 * i, d[(*c)++] = 2 * i + 1;
        }
    }
    free(perm), free(isv);
    return st;
}

static af_status split_train(af_trainer *t) {
    int32_t *ti = NULL, *vi = NULL, nt = 0, nv = 0;
    af_status sst = t->train->pairs ? split_pairs(t->train, t->o->val_split, t->o->seed, &ti, &nt, &vi, &nv)
                                    : af_dataset_split_stratified(t->train, t->o->val_split, t->o->seed, &ti, &nt, &vi, &nv);
    if (sst != AF_OK) {
        free(ti), free(vi);
        return sst;
    }
    af_dataset *tr = NULL, *va = NULL;
    af_status st = af_dataset_subset(t->train, ti, nt, &tr);
    if (st == AF_OK) st = af_dataset_subset(t->train, vi, nv, &va);
    free(ti);
    free(vi);
    if (st != AF_OK) {
        af_dataset_free(tr);
        af_dataset_free(va);
        return st;
    }
    af_dataset_free(t->train_owned);
    t->train_owned = tr;
    t->train = tr;
    af_dataset_free(t->val_owned);
    t->val_owned = va;
    t->val = va;
    return AF_OK;
}

static int cmp_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x < y) - (x > y);
}

/* Sum of the `k` largest sample lengths of ds (the tokens of the biggest packed batch). */
static int64_t top_tokens(const af_dataset *ds, int32_t k) {
    if (!ds || ds->n == 0) return 0;
    int32_t *len = af_malloc(sizeof(int32_t) * (size_t)ds->n);
    if (!len) return (int64_t)k * ds->max_seq_len;
    for (int32_t i = 0; i < ds->n; i++) len[i] = af_dataset_len(ds, i);
    qsort(len, (size_t)ds->n, sizeof *len, cmp_desc);
    int64_t s = 0;
    for (int32_t i = 0; i < k && i < ds->n; i++) s += len[i];
    free(len);
    return s;
}

/* The memory limit of this process's cgroup (v2 memory.max, else v1 memory.limit_in_bytes) in
 * bytes; 0 when there is none or it cannot be read. */
static size_t cgroup_limit(void) {
    static const char *const files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) continue;
        char buf[64] = "";
        char *ok = fgets(buf, sizeof buf, f);
        fclose(f);
        if (!ok) continue;
        char *end = NULL;
        unsigned long long v = strtoull(buf, &end, 10);
        if (end == buf) return 0; /* "max": no limit */
        if (v > 0 && v < (1ull << 60)) return (size_t)v;
        return 0;
    }
    return 0;
}

void af_tr_mem_limit(af_trainer *t) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    t->mem_ram = (pages > 0 && psz > 0) ? (size_t)pages * (size_t)psz : 0;
    t->mem_what = "RAM";
    size_t cg = cgroup_limit();
    if (cg > 0 && (t->mem_ram == 0 || cg < t->mem_ram)) t->mem_ram = cg, t->mem_what = "cgroup memory.max";
    if (t->o->memory_limit_mb > 0) t->mem_ram = (size_t)(t->o->memory_limit_mb * 1048576.0), t->mem_what = "--memory-limit";
}

static af_status plan_steps(af_trainer *t) {
    const af_trainer_opts *o = t->o;
    const int64_t n = t->train->n, units = t->pref ? n / 2 : n; /* preference: micro-batches of pairs */
    t->n_micro = (units + o->batch - 1) / o->batch;
    if (t->packing) { /* bins of epoch 0; every epoch has as many (af_pack_bfd) */
        int32_t *idx = af_malloc(sizeof(int32_t) * (size_t)n), *off = af_malloc(sizeof(int32_t) * (size_t)(n + 1));
        int32_t nb = 0;
        af_status st = idx && off ? af_pack_bfd(t->train, NULL, (int32_t)n, t->budget, 0, idx, off, &nb)
                                  : af_fail(AF_ERR_NOMEM, "trainer: out of memory");
        free(idx);
        free(off);
        if (st != AF_OK) return st;
        t->n_micro = nb;
    }
    t->spe = (t->n_micro + o->grad_accum - 1) / o->grad_accum;
    if (o->max_steps > 0) t->total = o->max_steps;
    else if (o->epochs > 0) {
        double s = ceil(o->epochs * (double)t->spe - 1e-9);
        t->total = s < 1 ? 1 : (int64_t)s;
    } else t->total = 0;
    t->warmup = o->warmup_steps >= 0 ? o->warmup_steps : (int64_t)ceil(o->warmup_ratio * (double)t->total - 1e-9);
    if (t->warmup < 0) t->warmup = 0;
    /* memory: model mapping + engine workspace of the biggest micro-batch + P, G, M, V + logits */
    /* preference steps run one sequence at a time (pref.h) */
    t->max_mb_tokens = t->packing ? t->budget : top_tokens(t->train, t->pref ? 1 : o->batch);
    int64_t ev = top_tokens(t->val, t->pref ? 1 : o->eval_batch > 0 ? o->eval_batch : o->batch);
    t->max_ev_tokens = ev;
    size_t eng = af_engine_bytes(t->model, &t->lay, t->max_mb_tokens, o->checkpointing);
    size_t eng_ev = t->val ? af_engine_bytes(t->model, &t->lay, ev, 1) : 0;
    if (eng_ev > eng) eng = eng_ev;
    size_t model_bytes = (size_t)t->model->file_bytes;
    t->mem_need = model_bytes + eng + (size_t)t->lay.n_total * 4 * sizeof(float) + (size_t)t->lay.n_total;
    af_tr_mem_limit(t);
    const af_model_config *c = af_model_get_config(t->model);
    const int64_t H = c->hidden_size;
    t->n_model_params = (int64_t)c->vocab_size * H * (c->tie_word_embeddings ? 1 : 2) + H;
    for (int32_t l = 0; l < c->num_hidden_layers; l++) { /* the projections as they exist per layer, 2 norms */
        t->n_model_params += 2 * H;
        for (int32_t p = 0; p < 7; p++) {
            int64_t in, out;
            if (af_model_proj_shape(t->model, l, p, &in, &out)) t->n_model_params += in * out;
        }
    }
    return AF_OK;
}

/* --lora-layers resolved against the model into t->layer_min, t->layer_end (end 0: through the last
 * layer, as af_lora_parse_layers gives it); "topN" with N above the model's layers (the default
 * top10 on a smaller model) is every layer. --layers-to-transform instead: the list into
 * t->layer_list, its lowest and highest layer into the range. */
static af_status resolve_layers(af_trainer *t) {
    const int32_t n_layers = t->model->cfg.num_hidden_layers;
    if (t->o->layers_to_transform) {
        AF_TRY(af_lora_parse_layer_list(t->o->layers_to_transform, n_layers, &t->layer_list, &t->n_layer_list));
        const int32_t hi = t->layer_list[t->n_layer_list - 1];
        t->layer_min = t->layer_list[0];
        t->layer_end = hi == n_layers - 1 ? 0 : hi + 1;
        return AF_OK;
    }
    const char *lspec = t->o->lora_layers;
    long top_n = 0;
    char *end = NULL;
    if (lspec && (!strncmp(lspec, "top", 3) || !strncmp(lspec, "last:", 5)))
        top_n = strtol(lspec + (lspec[0] == 't' ? 3 : 5), &end, 10);
    if (top_n > n_layers && end && !*end) lspec = "all";
    return af_lora_parse_layers(lspec, n_layers, &t->layer_min, &t->layer_end);
}

/* Whether the automatic recipe considers bf16 frozen products: frozen_precision auto (and no --bf16)
 * under AF_RECIPE_AUTO, classification or causal LM, on the CPU. Quality measured with 3 seeds on
 * the main job (BBC News test accuracy) and the headline job (BBC headlines ROUGE-L and completion
 * loss), each within the f32 runs' seed spread (docs/RECIPE.md); preference runs keep f32 until
 * their held-out quality is measured the same way. It takes them where the CPU's bf16 dot product
 * is fast (af_cpu_info.bf16_dot_fast: from the CPU's identity, never a timing). */
static int recipe_considers_bf16(const af_trainer_opts *o, const af_ctx_params *p) {
    return o->frozen_precision == AF_PRECISION_AUTO && !o->bf16 && o->recipe == AF_RECIPE_AUTO &&
           (o->task == AF_TASK_CLASSIFICATION || o->task == AF_TASK_CAUSAL_LM) &&
           (!p->device || !strcmp(p->device, "cpu"));
}

/* The run's context t->ctx (af_ctx_open): the base (o->ctx, else the model's, else the defaults)
 * with o->threads, o->poll_us, o->quantize, o->device and the frozen products' precision applied;
 * o->frozen_precision resolved (never AUTO afterwards; the recipe's choice marked as its origin).
 * bf16 asked for where the CPU has no AVX512_BF16: a warning, and f32 products. The recipe's bf16
 * only where af_cpu()->bf16_dot_fast and the context runs bf16 products; otherwise f32, said in one
 * line. The choice never depends on a timing (the same run on the same machine gives the same bits
 * however loaded it is, and every rank of a data-parallel run decides alike); the measured rates are
 * reported. Device "auto": the device taken, on the log. */
static af_status make_ctx(af_trainer *t, af_trainer_opts *o) {
    if (o->bf16 && o->frozen_precision == AF_PRECISION_F32)
        return af_fail(AF_ERR_INVALID_ARG, "--bf16 and --frozen-precision f32 contradict each other: give one");
    af_ctx_params p;
    const af_ctx *base = o->ctx ? o->ctx : o->model ? o->model->ctx : NULL;
    if (base) af_ctx_get_params(base, &p);
    else af_ctx_params_default(&p);
    if (o->threads != 0) p.n_threads = o->threads;
    if (o->poll_us >= 0) p.poll_us = o->poll_us;
    if (o->quantize) p.quantize = o->quantize;
    if (o->device) p.device = o->device;
    if (o->bf16 && o->frozen_precision == AF_PRECISION_INT8)
        return af_fail(AF_ERR_INVALID_ARG, "--bf16 and --frozen-precision int8 contradict each other: give one");
    const int asked_i8 = o->frozen_precision == AF_PRECISION_INT8;
    const int asked = o->bf16 || o->frozen_precision == AF_PRECISION_BF16, considered = recipe_considers_bf16(o, &p);
    const af_cpu_info *cpu = af_cpu();
    const int by_recipe = considered && cpu->bf16_dot_fast;
    if (asked_i8) p.matmul_precision = "int8";
    else if (asked || by_recipe) p.matmul_precision = "bf16";
    else if (o->frozen_precision == AF_PRECISION_F32) p.matmul_precision = "f32";
    af_ctx_report rep;
    AF_TRY(af_ctx_open(&p, &t->ctx, &rep)); /* bf16 / int8 the context cannot run (rep.bf16_fallback): f32 */
    o->frozen_precision = t->ctx->i8 ? AF_PRECISION_INT8 : t->ctx->bf16 ? AF_PRECISION_BF16 : AF_PRECISION_F32;
    const int32_t i = af_setting_index("frozen-precision"), ib = af_setting_index("bf16");
    if (i >= 0 && considered) o->origin[i] = AF_ORIGIN_RECIPE;
    else if (i >= 0 && ib >= 0 && o->bf16) o->origin[i] = o->origin[ib]; /* --bf16: the alias's origin */
    if (by_recipe && t->ctx->bf16) /* said in the recipe's report (af_tr_recipe_report) */
        snprintf(t->why_precision, sizeof t->why_precision,
                 "frozen products: bf16 (this CPU's %s; measured now bf16 %.0f vs f32 %.0f GFLOP/s, %d threads; "
                 "--frozen-precision f32: exact f32 products)",
                 cpu->amx_ready ? "AMX-BF16 tiles run bf16 products faster than f32 FMA"
                                : "VDPBF16PS runs twice the f32 FMA's multiply-adds",
                 rep.bf16_gflops, rep.f32_gflops, af_ctx_n_threads(t->ctx));
    else if (considered)
        snprintf(t->why_precision, sizeof t->why_precision, "frozen products: f32 (%s)",
                 by_recipe ? "this context runs no bf16 products"
                 : cpu->avx512_bf16 ? "this CPU's bf16 dot product runs no faster than f32 FMA; --frozen-precision "
                                      "bf16 to take it"
                                    : "this CPU runs no bf16 products");
    if (!o->log) return AF_OK;
    if (asked && rep.bf16_slower)
        fprintf(o->log, "warning: --frozen-precision bf16: bf16 products are slower than f32 on this CPU (measured "
                        "%.0f vs %.0f GFLOP/s, %d threads); training with bf16 as asked, use f32 to go faster\n",
                rep.bf16_gflops, rep.f32_gflops, af_ctx_n_threads(t->ctx));
    if ((asked || asked_i8) && rep.bf16_fallback)
        fprintf(o->log, "warning: --frozen-precision %s: %s; training with f32 products\n", asked_i8 ? "int8" : "bf16",
                rep.bf16_why);
    if (rep.device_line[0]) fprintf(o->log, "--device auto: %s\n", rep.device_line);
    return AF_OK;
}

/* The options' consistency checks (the table's ranges are af_trainer_opts_check's): data and
 * model given, the task's own settings, the output directory (before the data are read). */
static af_status check_opts(af_trainer *t, af_trainer_opts *o) {
    if ((o->val_path || o->val_data) && o->val_split > 0)
        return af_fail(AF_ERR_INVALID_ARG, "give either --val FILE or --val-split FRACTION, not both");
    if (!o->train_data && !o->train_path) return af_fail(AF_ERR_INVALID_ARG, "no training data (--train FILE.jsonl)");
    if (!o->model && !o->model_path) return af_fail(AF_ERR_INVALID_ARG, "no model (-m FILE.gguf)");
    if (o->task != AF_TASK_CLASSIFICATION && !AF_TASK_IS_LM(o->task))
        return af_fail(AF_ERR_INVALID_ARG, "--task: %d is not classification, causal-lm, dpo or orpo", (int)o->task);
    t->lm = AF_TASK_IS_LM(o->task);
    t->pref = AF_TASK_IS_PREF(o->task);
    if (t->pref) { /* the loss (pref.h) and what a preference run does not take */
        t->po.type = o->task == AF_TASK_ORPO ? AF_PREF_ORPO : o->pref_loss_type == 1 ? AF_PREF_IPO : AF_PREF_SIGMOID;
        t->po.beta = o->pref_beta;
        t->po.label_smoothing = o->label_smoothing;
        const char *task = o->task == AF_TASK_ORPO ? "orpo" : "dpo";
        if (!(o->pref_beta > 0) || !isfinite(o->pref_beta))
            return af_fail(AF_ERR_INVALID_ARG, "--beta %g: must be > 0", o->pref_beta);
        if (!(o->label_smoothing >= 0 && o->label_smoothing < 0.5))
            return af_fail(AF_ERR_INVALID_ARG, "--label-smoothing %g: must be in [0, 0.5)", o->label_smoothing);
        if (o->label_smoothing > 0 && t->po.type != AF_PREF_SIGMOID)
            return af_fail(AF_ERR_INVALID_ARG, "--label-smoothing applies to --task dpo --loss-type sigmoid only");
        if (o->pref_loss_type != 0 && o->task == AF_TASK_ORPO)
            return af_fail(AF_ERR_INVALID_ARG, "--loss-type applies to --task dpo (orpo has its own loss)");
        if (o->packing > 0)
            return af_fail(AF_ERR_INVALID_ARG, "--task %s: --packing does not apply (micro-batches of --batch pairs)", task);
        if (o->loss_on && strcmp(o->loss_on, "auto") != 0)
            return af_fail(AF_ERR_INVALID_ARG, "--task %s: --loss-on %s: a pair is compared on its completions only", task,
                           o->loss_on);
        if (o->lora_dropout > 0 && o->lora_dropout != AF_DEFAULT_LORA_DROPOUT && o->log)
            fprintf(o->log, "note: --task %s runs without LoRA dropout (--lora-dropout %g ignored): the log-probabilities "
                            "of the loss are the ones differentiated, as TRL disables dropout for preference losses\n",
                    task, o->lora_dropout);
        o->lora_dropout = 0;
        o->packing = 0;
    } else if (o->pref_loss_type != 0 || o->label_smoothing != 0 || o->precompute_ref == 0 ||
               o->pref_beta != AF_DEFAULT_PREF_BETA)
        return af_fail(AF_ERR_INVALID_ARG, "--%s applies to --task dpo / orpo only",
                       o->pref_loss_type ? "loss-type" : o->label_smoothing != 0 ? "label-smoothing"
                       : o->precompute_ref == 0 ? "precompute-ref" : "beta");
    if (t->lm) {
        if (o->labels || o->num_classes > 0 || o->multi_label || o->label_field)
            return af_fail(AF_ERR_INVALID_ARG, "--task causal-lm: --%s applies to classification only",
                 o->labels ? "labels" : o->num_classes > 0 ? "num-classes" : o->multi_label ? "multi-label" : "label-field");
        if (strcmp(o->class_weights, "uniform") != 0)
            return af_fail(AF_ERR_INVALID_ARG, "--task causal-lm: --class-weights %s applies to classification only", o->class_weights);
        if (o->head_bias) return af_fail(AF_ERR_INVALID_ARG, "--task causal-lm: --head-bias applies to classification only (no head)");
        if (o->loss_on && strcmp(o->loss_on, "auto") != 0 && strcmp(o->loss_on, "all") != 0)
            return af_fail(AF_ERR_INVALID_ARG, "--loss-on: expected auto or all, got '%s'", o->loss_on);
        t->packing = o->packing != 0;
        t->budget = (int64_t)o->batch * o->max_seq_len;
    } else if (o->loss_on || o->chat_template || o->packing > 0)
        return af_fail(AF_ERR_INVALID_ARG, "--%s applies to --task causal-lm only",
             o->loss_on ? "loss-on" : o->chat_template ? "chat-template" : "packing");
    if (o->layers_to_transform) o->given |= AF_GIVEN_LAYERS; /* the explicit list: never the recipe's choice */
    if (o->output_dir && !o->resume) { /* the output checks, before the data are read and reported */
        struct stat ob;
        char what[256];
        if (stat(o->output_dir, &ob) == 0 && !S_ISDIR(ob.st_mode))
            return af_fail(AF_ERR_INVALID_ARG, "%s: exists and is not a directory", o->output_dir);
        if (!o->overwrite && af_tr_dir_has_run(o->output_dir, what, sizeof what))
            return af_fail(AF_ERR_INVALID_ARG,
                 "%s: holds another run (%s); use --overwrite to replace it, --resume %s to continue it, or "
                 "another -o DIR",
                 o->output_dir, what, o->output_dir);
    }
    return AF_OK;
}

/* The data: borrowed sets, or the causal-LM / classification JSONL read and tokenized; the
 * task's checks of the data; the validation split; the statistics. */
static af_status load_data(af_trainer *t, af_trainer_opts *plan) {
    const af_trainer_opts *o = t->o;
    af_status st = AF_OK;
    if (o->train_data) {
        t->train = o->train_data;
        t->val = o->val_data;
        t->num_classes = o->train_data->num_classes;
        t->multi_label = o->train_data->multi_label;
        if (o->train_data->label_names) {
            st = copy_names(&t->label_names, o->train_data->label_names, t->num_classes);
            if (st != AF_OK) return st;
        }
        if (t->val && (t->val->num_classes != t->num_classes || t->val->multi_label != t->multi_label))
            return af_fail(AF_ERR_INVALID_ARG, "validation data: %d classes (%s), training data: %d (%s)", t->val->num_classes,
                 t->val->multi_label ? "multi" : "single", t->num_classes, t->multi_label ? "multi" : "single");
    } else if (t->lm) {
        st = af_tr_lm_read(t, plan); /* max_seq_len from the data unless given (trainer_lmdata.c) */
        if (st != AF_OK) return st;
        t->train = t->train_owned;
        t->val = t->val_owned;
    } else {
        st = load_text_data(t);
        if (st != AF_OK) return st;
        t->train = t->train_owned;
        t->val = t->val_owned;
    }
    if (t->lm) { /* causal-LM data: token masks, no labels */
        const af_dataset *bad = !t->train->target_mask || t->train->num_classes > 0 ? t->train
                              : t->val && (!t->val->target_mask || t->val->num_classes > 0) ? t->val : NULL;
        if (bad)
            return af_fail(AF_ERR_INVALID_ARG, "--task causal-lm: %s data set has %s", bad == t->train ? "the training" : "the validation",
                 bad->target_mask ? "class labels" : "no loss mask (a classification data set?)");
        const af_dataset *np = t->train->pairs != t->pref ? t->train : t->val && t->val->pairs != t->pref ? t->val : NULL;
        if (np)
            return af_fail(AF_ERR_INVALID_ARG, "%s data set %s", np == t->train ? "the training" : "the validation",
                           t->pref ? "holds no preference pairs (read it with --task dpo / orpo)"
                                   : "holds preference pairs: use --task dpo or orpo");
        t->num_classes = 0;
        t->multi_label = 0;
    } else if (t->train->target_mask || (t->val && t->val->target_mask))
        return af_fail(AF_ERR_INVALID_ARG, "a causal-LM data set (with a loss mask) given to a classification run: use --task causal-lm");
    if (o->val_split > 0) {
        st = split_train(t);
        if (st != AF_OK) return st;
    }
    st = af_data_stats_compute(t->train, &t->st_train);
    if (st != AF_OK) return st;
    t->have_st_train = 1;
    if (t->val) {
        st = af_data_stats_compute(t->val, &t->st_val);
        if (st != AF_OK) return st;
        t->have_st_val = 1;
    }
    return AF_OK;
}

/* After the data: the LoRA (layers resolved once), the automatic recipe, the layout built once,
 * class weights, the step plan, the recipe's record, the diagnostics. */
static af_status settle(af_trainer *t, af_trainer_opts *plan, uint32_t targets) {
    const af_trainer_opts *o = t->o;
    af_status st;
    t->lora = (af_lora_config){o->lora_r, (float)o->lora_alpha, (float)o->lora_dropout, o->use_rslora, targets, o->seed,
                               o->use_dora};
    st = resolve_layers(t); /* --lora-layers as numbers, once */
    if (st == AF_OK) st = af_tr_recipe_apply(t, plan); /* AF_RECIPE_AUTO: epochs, class weights, max_seq_len, layers, warm-up */
    if (st != AF_OK) return st;
    /* the LoRA layout of the run, built once here and handed to the optimizer (af_tr_new_optimizer) */
    const int32_t nc = t->lm ? 0 : t->num_classes > 0 ? t->num_classes : 1;
    st = t->layer_list ? af_param_layout_init_list(&t->lay, t->model, &t->lora, nc, t->layer_list, t->n_layer_list)
                       : af_param_layout_init_layers(&t->lay, t->model, &t->lora, nc, t->layer_min, t->layer_end);
    if (st != AF_OK) return st;
    t->have_lay = 1;
    t->lay.init = o->init_lora_weights; /* pissa / olora: the SVD / QR of every adapted weight (not for a dry run) */
    if ((t->lay.init == AF_LORA_INIT_PISSA || t->lay.init == AF_LORA_INIT_OLORA) && !o->check_only)
        AF_TRY(af_lora_init_residual(t->model, &t->lay));
    if (strcmp(o->class_weights, "uniform") != 0) {
        if (t->multi_label)
            return af_fail(AF_ERR_INVALID_ARG, "--class-weights %s: class weights apply to single-label data only "
                                     "(multi-label uses BCE)", o->class_weights);
        t->class_w = af_malloc(sizeof(float) * (size_t)t->num_classes);
        if (!t->class_w) return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
        st = af_class_weights(&t->st_train, o->class_weights, t->class_w);
        if (st != AF_OK) return st;
    }
    st = plan_steps(t);
    if (st == AF_OK) st = af_tr_recipe_finish(t, plan); /* the evaluation interval; the settings record */
    if (st != AF_OK) return st;
    const af_train_config hc = {
        .lr = o->lr, .lora_r = o->lora_r, .lora_alpha = o->lora_alpha, .use_rslora = o->use_rslora,
        .batch_size = o->batch, .grad_accum = o->grad_accum, .max_grad_norm = o->max_grad_norm, .epochs = o->epochs,
        .max_steps = o->max_steps, .max_seq_len = o->max_seq_len, .n_model_params = t->n_model_params,
        .num_classes = t->num_classes, .label_names = (const char *const *)t->label_names,
        .class_weights = o->class_weights, .causal_lm = t->lm, .preference = t->pref, .lr_min = o->lr_min,
        .lr_decays = o->schedule != AF_SCHED_CONSTANT, .max_positions = t->model->cfg.max_position_embeddings,
        .has_val = t->val != NULL, .patience = o->patience, .eval_every = o->eval_every, .warmup_steps = t->warmup,
        .total_steps = t->total, .step_samples = t->packing && t->spe > 0 ? (double)t->train->n / (double)t->spe : 0.0,
        .max_seq_len_why = t->have_recipe && !t->lm && !(t->o->given & AF_GIVEN_MAX_SEQ_LEN) ? t->recipe.why_max_seq_len : NULL};
    st = af_hparams_check(&hc, &t->st_train, &t->diags);
    if (st != AF_OK) return st;
    return AF_OK;
}

af_status af_trainer_new(const af_trainer_opts *opts, af_trainer **out) {
    if (!opts || !out) return af_fail(AF_ERR_INVALID_ARG, "trainer: NULL argument");
    *out = NULL;
    af_trainer *t = af_calloc(1, sizeof *t);
    if (!t) return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    t->t_created = af_time_sec();
    /* the plan: writable through `o` while it is resolved below, read-only through t->o afterwards */
    af_trainer_opts *o = af_malloc(sizeof *o);
    if (!o) {
        free(t);
        return af_fail(AF_ERR_NOMEM, "trainer: out of memory");
    }
    *o = *opts;
    t->o = o;
    t->log = o->log, t->plot = o->plot, t->out_dir = o->output_dir, t->config_json = o->config_json;
    if (!o->targets) o->targets = "qv";
    if (!o->class_weights) o->class_weights = "uniform";
    af_trainer_opts_mark_caller(o); /* the origin of what a C caller set (settings objects carry theirs) */
    af_status st = af_trainer_opts_check(o); /* the table's ranges, as for a flag */
    if (st == AF_OK) st = check_opts(t, o);
    if (st != AF_OK) goto fail;
    uint32_t targets = 0;
    st = af_lora_parse_targets(o->targets, &targets);
    if (st != AF_OK) goto fail;
    st = make_ctx(t, o);
    if (st != AF_OK) goto fail;
    if (o->model) t->model = o->model;
    else {
        st = af_model_load(t->ctx, o->model_path, &t->model_owned);
        if (af_ctx_falls_back(t->ctx, st)) {
            /* --device auto: the model does not fit, the device cannot run it (or failed): the CPU */
            char msg[700];
            snprintf(msg, sizeof msg, "%s", af_last_error());
            if (o->log) fprintf(o->log, "warning: %s; --device auto: training on the CPU\n", msg);
            af_ctx *cpu = NULL;
            st = af_ctx_new_cpu(t->ctx, 1, &cpu);
            if (st == AF_OK) {
                af_ctx_free(t->ctx);
                t->ctx = cpu;
                st = af_model_load(t->ctx, o->model_path, &t->model_owned);
            }
        }
        if (st != AF_OK) goto fail;
        t->model = t->model_owned;
    }
    st = load_data(t, o);
    if (st == AF_OK) st = settle(t, o, targets);
    if (st != AF_OK) goto fail;
    t->eval_every = o->eval_every; /* resolved: from here on the plan is read through t->o only */
    *out = t;
    return AF_OK;
fail:
    af_trainer_free(t);
    return st;
}

const af_diag_list *af_trainer_diags(const af_trainer *t) { return &t->diags; }

void af_trainer_memory(const af_trainer *t, size_t *need, size_t *ram) {
    if (need) *need = t->mem_need;
    if (ram) *ram = t->mem_ram;
}

int af_trainer_n_errors(const af_trainer *t) {
    int n = 0;
    for (int32_t i = 0; i < t->diags.n; i++) n += t->diags.items[i].severity == AF_DIAG_ERROR;
    return n + (t->mem_ram > 0 && t->mem_need > t->mem_ram);
}

int af_trainer_has_errors(const af_trainer *t) {
    return af_diag_has_error(&t->diags) || (t->mem_ram > 0 && t->mem_need > t->mem_ram);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void af_trainer_report(const af_trainer *t, FILE *fp) {
    if (!fp) return;
    const af_trainer_opts *o = t->o;
    const char *const *names = (const char *const *)t->label_names;
    if (t->have_lm_rep >= 1) af_lm_data_report_print(&t->lm_rep_train, t->pref ? "training file (chosen and rejected sides)" : "training file", fp);
    if (t->have_lm_rep >= 1 && t->pref) af_pref_data_report_print(&t->pref_rep_train, t->o->max_seq_len, NULL, fp);
    if (t->have_lm_rep >= 2) af_lm_data_report_print(&t->lm_rep_val, t->pref ? "validation file (chosen and rejected sides)" : "validation file", fp);
    if (t->have_lm_rep >= 2 && t->pref) af_pref_data_report_print(&t->pref_rep_val, t->o->max_seq_len, NULL, fp);
    if (!t->have_lm_rep)
        af_data_stats_print(&t->st_train, names, o->val_split > 0 ? "training data (after the validation split)"
                                                                   : "training data", fp);
    if (t->have_st_val) {
        if (t->have_lm_rep < 2)
            af_data_stats_print(&t->st_val, names, o->val_split > 0 ? "validation data (split)" : "validation data", fp);
    } else fprintf(fp, "validation: none (give --val FILE or --val-split 0.1 for evaluation, best checkpoint "
                     "selection and early stopping)\n");
    const af_param_layout *l = &t->lay;
    const char *sched = af_sched_name(o->schedule);
    if (t->packing)
        fprintf(fp, "\nplan: causal LM, %lld optimizer steps (%lld per epoch = %lld packed micro-batches of <= %lld "
                    "tokens (--batch %d x --max-seq-len %d, best-fit decreasing) / grad-accum %d), warm-up %lld, "
                    "schedule %s, lr %g -> %g; loss = sum of token losses / target tokens of the whole step\n",
                (long long)t->total, (long long)t->spe, (long long)t->n_micro, (long long)t->budget, o->batch,
                o->max_seq_len, o->grad_accum, (long long)t->warmup, sched, o->lr,
                o->schedule == AF_SCHED_CONSTANT ? o->lr : o->lr_min);
    else if (t->pref) {
        const char *lt = t->po.type == AF_PREF_ORPO ? "orpo (odds ratio + NLL of the chosen side)"
                       : t->po.type == AF_PREF_IPO ? "ipo" : "sigmoid (DPO)";
        fprintf(fp, "\nplan: preference (%s), %lld optimizer steps (%lld per epoch = %lld micro-batches of %d pairs / "
                    "grad-accum %d; effective batch %d pairs), warm-up %lld, schedule %s, lr %g -> %g; loss %s, beta %g%s%s\n",
                o->task == AF_TASK_ORPO ? "orpo" : "dpo", (long long)t->total, (long long)t->spe, (long long)t->n_micro,
                o->batch, o->grad_accum, o->batch * o->grad_accum, (long long)t->warmup, sched, o->lr,
                o->schedule == AF_SCHED_CONSTANT ? o->lr : o->lr_min, lt, t->po.beta,
                t->po.label_smoothing > 0 ? ", label smoothing " : "", t->po.label_smoothing > 0 ? "on" : "");
        if (t->po.type != AF_PREF_ORPO)
            fprintf(fp, "      reference: the base model (the adapter off), %s\n",
                    o->precompute_ref != 0 ? "computed once per pair before training" : "computed in every step");
    } else
        fprintf(fp, "\nplan: %s%lld optimizer steps (%lld per epoch = %lld micro-batches of %d / grad-accum %d; "
                    "effective batch %d), warm-up %lld, schedule %s, lr %g -> %g\n",
                t->lm ? "causal LM, " : "", (long long)t->total, (long long)t->spe, (long long)t->n_micro, o->batch,
                o->grad_accum, o->batch * o->grad_accum, (long long)t->warmup, sched, o->lr,
                o->schedule == AF_SCHED_CONSTANT ? o->lr : o->lr_min);
    if (o->max_steps > 0 && o->epochs > 0 && t->spe > 0)
        fprintf(fp, "      --max-steps %lld sets the length (%.2f epochs); --epochs is not used\n",
                (long long)o->max_steps, (double)o->max_steps / (double)t->spe);
    char tg[128] = "";
    for (int p = 0; p < AF_PROJ_COUNT; p++)
        if (l->lora.targets & (1u << p)) {
            if (tg[0]) strncat(tg, ",", sizeof tg - strlen(tg) - 1);
            strncat(tg, af_proj_name((af_proj)p), sizeof tg - strlen(tg) - 1);
        }
    char ly[80] = "";
    if (t->layer_list) { /* --layers-to-transform */
        char list[48];
        af_tr_layers_text(t, list, sizeof list);
        snprintf(ly, sizeof ly, " of layers %s (of %d)", list, l->n_layers);
    } else if (l->layer_min > 0 || l->layer_end < l->n_layers)
        snprintf(ly, sizeof ly, " of layers %d-%d (of %d)", l->layer_min, l->layer_end - 1, l->n_layers);
    if (t->lm)
        fprintf(fp, "      LoRA r %d alpha %g (scale %g) dropout %g on %s%s; no head (the model's LM head, frozen); "
                    "%lld trainable parameters (base model ~%.1fM)\n",
                l->lora.r, l->lora.alpha, l->scale, l->lora.dropout, tg, ly, (long long)l->n_total,
                (double)t->n_model_params / 1e6);
    else
        fprintf(fp, "      LoRA r %d alpha %g (scale %g) dropout %g on %s%s; head %d x %d %s; pooling %s; %lld trainable "
                    "parameters (base model ~%.1fM)\n",
                l->lora.r, l->lora.alpha, l->scale, l->lora.dropout, tg, ly, l->num_classes, l->hidden,
                o->head_bias ? "+ bias" : "(no bias)", o->pooling == AF_POOL_LAST ? "last" : "mean",
                (long long)(l->n_total - (o->head_bias ? 0 : l->num_classes)), (double)t->n_model_params / 1e6);
    fprintf(fp, "      matmul precision %s%s\n", af_ctx_matmul_precision(t->ctx),
            t->ctx->i8 ? (t->ctx->bf16 ? " (int8 operands, int32 sums, row scales, in the frozen-weight products; "
                                         "bfloat16 in attention and LoRA)"
                                       : " (int8 operands, int32 sums, row scales, in the frozen-weight products)")
            : t->ctx->bf16 ? " (bfloat16 operands, f32 accumulation, in the frozen-weight products)"
                           : "");
    if (!af_ctx_on_cpu(t->ctx)) { /* the device and its memory */
        af_device_info di;
        af_ctx_device_info(t->ctx, &di);
        char b1[32], b2[32];
        fprintf(fp, "      device %s: %s [%s], %s free of %s\n", af_ctx_device(t->ctx), di.name, di.kind,
                af_fmt_bytes(b1, sizeof b1, di.mem_free), af_fmt_bytes(b2, sizeof b2, di.mem_total));
    }
    if (t->class_w) {
        fprintf(fp, "      class weights (%s):", o->class_weights);
        for (int32_t c = 0; c < t->num_classes; c++) fprintf(fp, " %.3g", t->class_w[c]);
        fputc('\n', fp);
    }
    af_tr_recipe_report(t, fp);
    if (o->check_only) af_tr_plan_print(t, fp);
    fprintf(fp, "memory: about %.0f MiB (model %.0f MiB mapped, activations for %lld tokens per micro-batch%s, "
                "parameters + AdamW %.1f MiB); limit %.0f MiB (%s)\n",
            mib(t->mem_need), mib((size_t)t->model->file_bytes), (long long)t->max_mb_tokens,
            o->checkpointing ? " with checkpointing" : "", mib((size_t)l->n_total * 16), mib(t->mem_ram), t->mem_what);
    if (t->mem_ram > 0 && t->mem_need > t->mem_ram)
        fprintf(fp, "error [memory] the estimate exceeds the %s -> %s\n", t->mem_what,
                o->checkpointing ? "use a smaller --batch or --max-seq-len"
                                 : "use --checkpointing, or a smaller --batch or --max-seq-len");
    if (t->diags.n) {
        fprintf(fp, "\ndiagnostics:\n");
        af_diag_print(&t->diags, fp);
    }
}
