/*
 * trainer_recipe.c — the automatic recipe applied to a training run (rules: recipe.h), its report
 * and record, and the time budget's arithmetic (the loop's checks: trainer_run.c).
 */
#include "train/trainer_internal.h"

#include "kernels/ctx.h"
#include "train/optim.h"
#include "train/settings_internal.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Seconds of a time budget kept for what the plan does not model (saves, the final evaluation's
 * variance), plus this share of the budget. */
#define BUDGET_RESERVE_S 10.0
#define BUDGET_RESERVE_SHARE 0.03

static double flops_token_layer(const af_model *m) {
    const af_model_config *c = af_model_get_config(m);
    const double H = c->hidden_size, qd = (double)c->num_attention_heads * c->head_dim,
                 kvd = (double)c->num_key_value_heads * c->head_dim, F = c->intermediate_size;
    return 2.0 * (2 * H * qd + 2 * H * kvd + 3 * H * F);
}

/* The training speed in FLOPs per second of the cost model (recipe.h af_recipe_cost: 2 forward
 * FLOPs per token and adapted layer): one classification micro-batch of up to `batch` training
 * samples cut to 128 tokens, forward and backward through every layer adapted, timed (the machine as
 * it is now, load included). A causal-LM run times the forward/backward of its first micro-batch
 * the same way. The first call of an engine includes its allocations: the estimate errs low. */
static af_status probe_rate(af_trainer *t, double *rate) {
    const af_trainer_opts *o = t->o;
    const af_model_config *c = af_model_get_config(t->model);
    const int32_t m = t->train->n < o->batch ? t->train->n : o->batch;
    int32_t idx[64];
    const int32_t mm = m < 64 ? m : 64;
    for (int32_t i = 0; i < mm; i++) idx[i] = i;
    af_dataset *sub = NULL;
    af_lora_trainer *lt = NULL;
    af_batcher *bt = NULL;
    float *logits = NULL;
    af_status st = af_dataset_subset(t->train, idx, mm, &sub);
    if (st == AF_OK && !t->lm && sub->max_seq_len > 128) st = af_dataset_truncate(sub, 128);
    af_lora_trainer_opts lo;
    af_lora_trainer_opts_defaults(&lo);
    lo.r = o->lora_r, lo.lora_alpha = (float)o->lora_alpha, lo.lora_dropout = (float)o->lora_dropout;
    lo.use_rslora = o->use_rslora, lo.targets = o->targets, lo.seed = o->seed;
    lo.num_classes = t->lm ? 0 : t->num_classes > 0 ? t->num_classes : 1;
    lo.pooling = (af_head_pooling)o->pooling;
    lo.checkpointing = o->checkpointing;
    const af_lora_trainer_ext ext = {0, c->num_hidden_layers, o->max_grad_norm, t->ctx, NULL};
    if (st == AF_OK) st = af_lora_trainer_new_ext(t->model, &lo, &ext, &lt);
    if (st == AF_OK) st = af_batcher_new(sub, NULL, mm, mm, &bt);
    logits = af_malloc(sizeof(float) * (size_t)mm * (size_t)(lo.num_classes > 0 ? lo.num_classes : 1));
    if (st == AF_OK && !logits) st = af_fail(AF_ERR_NOMEM, "out of memory");
    af_packed_batch pb;
    if (st == AF_OK) st = af_batcher_pack(bt, idx, mm, &pb);
    double secs = 0;
    if (st == AF_OK) {
        af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, pb.labels, pb.multi_hot, pb.targets};
        const double t0 = af_time_sec();
        if (t->lm) {
            af_lm_loss r;
            st = af_lora_trainer_accumulate_lm_batch(lt, &b, 1.0f, 0, &r);
        } else {
            double loss = 0;
            st = af_lora_trainer_accumulate_batch(lt, &b, 1.0f, 0, &loss, logits);
        }
        secs = af_time_sec() - t0;
        *rate = secs > 0 ? t->flops_token_layer * (double)pb.n_tok * 2.0 * c->num_hidden_layers / secs : 0;
    }
    free(logits);
    af_batcher_free(bt);
    af_lora_trainer_free(lt);
    af_dataset_free(sub);
    if (st == AF_OK && !(*rate > 0)) st = af_fail(AF_ERR_INVALID_ARG, "time budget: the probe step took no time");
    return st;
}

int64_t af_tr_mem_tokens(af_trainer *t) {
    const af_trainer_opts *o = t->o;
    const af_model_config *c = af_model_get_config(t->model);
    int64_t mem_tokens = 0;
    af_tr_mem_limit(t);
    uint32_t targets = 0;
    af_param_layout lay;
    af_lora_config lc = {o->lora_r, (float)o->lora_alpha, (float)o->lora_dropout, o->use_rslora, 0, o->seed, 0};
    if (t->mem_ram > 0 && af_lora_parse_targets(o->targets, &targets) == AF_OK && (lc.targets = targets, 1) &&
        af_param_layout_init_layers(&lay, t->model, &lc, t->lm ? 0 : t->num_classes > 0 ? t->num_classes : 1, 0,
                                    c->num_hidden_layers) == AF_OK) {
        const double per_tok = (double)af_engine_bytes(t->model, &lay, 1024, o->checkpointing) / 1024.0;
        const double fixed = (double)t->model->file_bytes + (double)lay.n_total * 17.0 + 64.0 * 1048576.0;
        if (per_tok > 0 && (double)t->mem_ram > fixed) mem_tokens = (int64_t)(((double)t->mem_ram - fixed) / per_tok);
        af_param_layout_free(&lay);
    }
    return mem_tokens;
}

/* The origin of what the recipe chose: AF_ORIGIN_RECIPE on every key it decided (not given). */
static void mark_recipe(const af_trainer *t, af_trainer_opts *plan) {
    const unsigned g = plan->given;
    static const struct { const char *key; unsigned bit; int classification_only; } keys[] = {
        {"epochs", AF_GIVEN_LENGTH, 0},        {"class-weights", AF_GIVEN_CLASS_WEIGHTS, 1},
        {"max-seq-len", AF_GIVEN_MAX_SEQ_LEN, 1}, {"lora-layers", AF_GIVEN_LAYERS, 1},
        {"warmup", AF_GIVEN_WARMUP, 0},        {"eval-every", AF_GIVEN_EVAL_EVERY, 0},
        {"schedule", AF_GIVEN_SCHEDULE, 0},    {"patience", AF_GIVEN_PATIENCE, 0},
        {"early-stopping-threshold", AF_GIVEN_THRESHOLD, 0}};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        if ((g & keys[k].bit) || (keys[k].classification_only && t->lm &&
                                   !(keys[k].bit == AF_GIVEN_MAX_SEQ_LEN && t->lm_len_chosen))) /* the data's length */
            continue;
        if (keys[k].bit == AF_GIVEN_CLASS_WEIGHTS && t->multi_label) continue;
        if (keys[k].bit == AF_GIVEN_EVAL_EVERY && !t->val) continue;
        if ((keys[k].bit == AF_GIVEN_SCHEDULE || keys[k].bit == AF_GIVEN_PATIENCE || keys[k].bit == AF_GIVEN_THRESHOLD) &&
            !t->recipe.early_stop)
            continue;
        const int32_t i = af_setting_index(keys[k].key);
        if (i >= 0) plan->origin[i] = AF_ORIGIN_RECIPE;
    }
}

af_status af_tr_recipe_apply(af_trainer *t, af_trainer_opts *plan) {
    af_trainer_opts *o = plan;
    t->flops_token_layer = flops_token_layer(t->model);
    if (o->recipe != AF_RECIPE_AUTO) return AF_OK;
    const af_model_config *c = af_model_get_config(t->model);
    af_recipe_in in;
    memset(&in, 0, sizeof in);
    in.n = t->st_train.n;
    in.sorted_len = t->st_train.sorted_len;
    if (t->have_st_val) in.n_val = t->st_val.n, in.val_sorted_len = t->st_val.sorted_len;
    in.causal_lm = t->lm;
    in.preference = t->pref;
    if (t->lm)
        for (int32_t i = 0; i < t->train->n; i++) in.n_targets += af_dataset_n_targets(t->train, i);
    in.num_classes = t->st_train.num_classes;
    in.multi_label = t->multi_label;
    in.class_count = t->st_train.class_count;
    in.n_layers = c->num_hidden_layers;
    in.max_positions = c->max_position_embeddings;
    if (!t->lm && (in.max_positions <= 0 || in.max_positions > t->train->max_seq_len))
        in.max_positions = t->train->max_seq_len; /* the data were tokenized up to this length */
    in.flops_token_layer = t->flops_token_layer;
    in.hidden = c->hidden_size;
    in.prefix_cache_bytes = (int64_t)o->prefix_cache_mb << 20;
    /* causal LM, --grad-accum not given: one micro-batch per optimizer step (recipe.h) */
    const int32_t gi = af_setting_index("grad-accum");
    if (t->lm && !t->pref && gi >= 0 && o->origin[gi] == AF_ORIGIN_DEFAULT && o->grad_accum > 1) {
        snprintf(t->why_accum, sizeof t->why_accum, "grad-accum 1 (not %d): an optimizer step per micro-batch of up "
                 "to --batch x max_seq_len packed tokens, about the 8 sequences a step of TRL's SFTConfig default: "
                 "twice the updates in the same time (the headline job under a time budget: docs/RECIPE.md)",
                 (int)o->grad_accum);
        o->grad_accum = 1;
        o->origin[gi] = AF_ORIGIN_RECIPE;
    }
    in.batch = o->batch;
    in.grad_accum = o->grad_accum;
    in.given = o->given;
    if (o->train_data && !t->lm) in.given |= AF_GIVEN_MAX_SEQ_LEN; /* borrowed data: their tokens stay */
    in.epochs = o->epochs;
    in.max_steps = o->max_steps;
    in.max_seq_len = o->max_seq_len;
    in.layers = (t->layer_end > 0 ? t->layer_end : c->num_hidden_layers) - t->layer_min;
    in.patience = o->patience;
    in.mem_tokens = af_tr_mem_tokens(t);
    /* causal LM, dropout not given: none in a run of at most one pass (recipe.h); the probe step runs
     * as such a run would, and a longer plan gets the default back */
    const int32_t di = af_setting_index("lora-dropout"), li = af_setting_index("lr");
    const int drop_rule = t->lm && !t->pref && di >= 0 && o->origin[di] == AF_ORIGIN_DEFAULT && o->lora_dropout > 0;
    const int lr_rule = t->lm && !t->pref && li >= 0 && o->origin[li] == AF_ORIGIN_DEFAULT;
    const double drop_default = o->lora_dropout;
    if (drop_rule) o->lora_dropout = 0;
    if (o->time_budget_min > 0) { /* the budget in FLOPs at the speed of a probe step */
        AF_TRY(probe_rate(t, &t->rate_flops));
        const double budget_s = o->time_budget_min * 60.0;
        double left = budget_s * (1.0 - BUDGET_RESERVE_SHARE) - BUDGET_RESERVE_S - (af_time_sec() - t->t_created);
        if (left < 1) left = 1;
        in.budget_flops = t->rate_flops * left;
        in.time_budget = 1;
    }
    if (af_recipe_choose(&in, &t->recipe) != 0)
        return af_fail(AF_ERR_INVALID_ARG, "recipe: no training sample or no model layers");
    if (t->lm_len_chosen) /* the data's choice (af_tr_lm_read), reported with the recipe's */
        snprintf(t->recipe.why_max_seq_len, sizeof t->recipe.why_max_seq_len, "%s", t->lm_len_why);
    const af_recipe *r = &t->recipe;
    const unsigned g = in.given;
    if (!(g & AF_GIVEN_LENGTH)) o->epochs = r->epochs, o->max_steps = 0;
    /* passes over the data (--max-steps given: not known here, taken as more than one) */
    const double passes = (g & AF_GIVEN_LENGTH) && o->max_steps > 0 ? INFINITY : o->epochs;
    const int one_pass = passes <= 1.0 + 1e-9;
    if (lr_rule && one_pass) { /* causal LM, --lr not given: the one-pass rate (recipe.h) */
        snprintf(t->why_lr, sizeof t->why_lr, "lr %g (not %g): %.2g pass%s over the data; a short LoRA run's best "
                 "learning rate is higher than a long one's (Schulman et al. 2025, \"LoRA Without Regret\"), and "
                 "4e-4 gave a lower completion loss than 2e-4 on 2 models x 3 seeds (docs/RECIPE.md)",
                 AF_RECIPE_LM_ONE_PASS_LR, o->lr, passes, passes == 1.0 ? "" : "es");
        o->lr = AF_RECIPE_LM_ONE_PASS_LR;
        o->origin[li] = AF_ORIGIN_RECIPE;
    }
    if (drop_rule) {
        if (one_pass) {
            o->origin[di] = AF_ORIGIN_RECIPE;
            snprintf(t->why_dropout, sizeof t->why_dropout, "lora_dropout 0 (not %g): %.2g pass%s over the data, no "
                     "example seen twice, so nothing for dropout to regularise, and its masked inputs cost about a "
                     "third of a step (as PEFT's LoraConfig default; the headline job: docs/RECIPE.md)",
                     drop_default, passes, passes == 1.0 ? "" : "es");
        } else
            o->lora_dropout = drop_default;
        t->lora.dropout = (float)o->lora_dropout;
    }
    if (!t->lm && !(g & AF_GIVEN_CLASS_WEIGHTS) && !t->multi_label) o->class_weights = r->class_weights;
    if (!t->lm && !(g & AF_GIVEN_MAX_SEQ_LEN) && r->max_seq_len != t->train->max_seq_len) {
        o->max_seq_len = r->max_seq_len;
        AF_TRY(af_dataset_truncate(t->train_owned, r->max_seq_len));
        if (t->val_owned) AF_TRY(af_dataset_truncate(t->val_owned, r->max_seq_len));
        af_data_stats_free(&t->st_train);
        t->have_st_train = 0;
        AF_TRY(af_data_stats_compute(t->train, &t->st_train));
        t->have_st_train = 1;
        if (t->have_st_val) {
            af_data_stats_free(&t->st_val);
            t->have_st_val = 0;
            AF_TRY(af_data_stats_compute(t->val, &t->st_val));
            t->have_st_val = 1;
        }
    } else if (!t->lm && !(g & AF_GIVEN_MAX_SEQ_LEN))
        o->max_seq_len = r->max_seq_len;
    if (!t->lm && !(g & AF_GIVEN_LAYERS)) { /* the top r->layers layers (all: 0, 0 as "all" parses) */
        t->layer_min = r->layers >= c->num_hidden_layers ? 0 : c->num_hidden_layers - r->layers;
        t->layer_end = 0;
    }
    if (!(g & AF_GIVEN_WARMUP)) o->warmup_steps = -1, o->warmup_ratio = r->warmup_ratio;
    if (r->early_stop && t->val) { /* early stopping at the plateau (recipe.h) */
        if (!(g & AF_GIVEN_PATIENCE)) o->patience = r->patience;
        if (!(g & AF_GIVEN_THRESHOLD)) o->early_stopping_threshold = r->es_threshold;
        if (!(g & AF_GIVEN_SCHEDULE)) o->schedule = AF_SCHED_WSD;
    }
    o->given = g;
    mark_recipe(t, o);
    t->have_recipe = 1;
    return AF_OK;
}

/* Replace `key` of object j by item (taken over). 0 on allocation failure. */
static int put(cJSON *j, const char *key, cJSON *item) {
    if (!item) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (!cJSON_AddItemToObject(j, key, item)) {
        cJSON_Delete(item);
        return 0;
    }
    return 1;
}

/* The run's settings as a cJSON object (t->config_json parsed, or empty). */
static cJSON *settings_obj(const af_trainer *t) {
    cJSON *j = t->config_json ? cJSON_Parse(t->config_json) : NULL;
    if (j && !cJSON_IsObject(j)) cJSON_Delete(j), j = NULL;
    return j ? j : cJSON_CreateObject();
}

static af_status store_settings(af_trainer *t, cJSON *j) {
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (!s) return af_fail(AF_ERR_NOMEM, "out of memory");
    free(t->config_owned);
    t->config_owned = s;
    t->config_json = s;
    return AF_OK;
}

af_status af_tr_recipe_finish(af_trainer *t, af_trainer_opts *plan) {
    if (!t->have_recipe) return AF_OK;
    af_trainer_opts *o = plan;
    const af_recipe *r = &t->recipe;
    const unsigned g = o->given;
    if (t->val && !(g & AF_GIVEN_EVAL_EVERY))
        o->eval_every = r->n_evals > 0 ? af_recipe_eval_every(r->n_evals, t->total, t->spe) : t->total + 1;
    /* the record: every choice as a setting, so a resume (whose base is train_config.json) is exact */
    cJSON *j = settings_obj(t);
    int ok = j != NULL;
    char w[32];
    ok = ok && put(j, "recipe", cJSON_CreateString("auto"));
    if (ok && !(g & AF_GIVEN_LENGTH)) {
        cJSON_DeleteItemFromObjectCaseSensitive(j, "max-steps");
        ok = put(j, "epochs", cJSON_CreateNumber(o->epochs));
    }
    if (ok && !t->lm && !t->multi_label && !(g & AF_GIVEN_CLASS_WEIGHTS))
        ok = put(j, "class-weights", cJSON_CreateString(o->class_weights));
    if (ok && (!t->lm || t->lm_len_chosen) && !(g & AF_GIVEN_MAX_SEQ_LEN))
        ok = put(j, "max-seq-len", cJSON_CreateNumber(o->max_seq_len));
    char ly[32];
    af_tr_layers_text(t, ly, sizeof ly);
    if (ok && !t->lm && !(g & AF_GIVEN_LAYERS)) ok = put(j, "lora-layers", cJSON_CreateString(ly));
    if (ok && t->why_dropout[0]) ok = put(j, "lora-dropout", cJSON_CreateNumber(o->lora_dropout));
    if (ok && t->why_accum[0]) ok = put(j, "grad-accum", cJSON_CreateNumber(o->grad_accum));
    if (ok && t->why_lr[0]) ok = put(j, "lr", cJSON_CreateNumber(o->lr));
    if (ok && !(g & AF_GIVEN_WARMUP)) {
        snprintf(w, sizeof w, "%lld", (long long)t->warmup); /* steps: the same after a re-planned length */
        ok = put(j, "warmup", cJSON_CreateString(w));
    }
    if (ok && t->val && !(g & AF_GIVEN_EVAL_EVERY)) ok = put(j, "eval-every", cJSON_CreateNumber((double)o->eval_every));
    if (ok && t->val && r->early_stop) { /* a resume stops, and cools down, alike */
        if (ok && !(g & AF_GIVEN_SCHEDULE)) ok = put(j, "schedule", cJSON_CreateString("wsd"));
        if (ok && !(g & AF_GIVEN_PATIENCE)) ok = put(j, "patience", cJSON_CreateNumber(o->patience));
        if (ok && !(g & AF_GIVEN_THRESHOLD))
            ok = put(j, "early-stopping-threshold", cJSON_CreateNumber(o->early_stopping_threshold));
    }
    if (!ok) {
        cJSON_Delete(j);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    return store_settings(t, j);
}

void af_tr_recipe_report(const af_trainer *t, FILE *fp) {
    if (!t->have_recipe) return;
    const af_trainer_opts *o = t->o;
    const af_recipe *r = &t->recipe;
    const unsigned g = o->given;
    fprintf(fp, "recipe: auto (--recipe fixed: the documented defaults); %s:\n",
            o->check_only ? "train would use" : "this run uses");
    if (g & AF_GIVEN_LENGTH) {
        if (o->max_steps > 0) fprintf(fp, "  --max-steps %lld (given)\n", (long long)o->max_steps);
        else fprintf(fp, "  --epochs %g (given)\n", o->epochs);
    } else fprintf(fp, "  %s\n", r->why_epochs);
    if (!t->lm && !t->multi_label) {
        if (g & AF_GIVEN_CLASS_WEIGHTS) fprintf(fp, "  --class-weights %s (given)\n", o->class_weights);
        else fprintf(fp, "  %s\n", r->why_class_weights);
    }
    /* the layers as given: --layers-to-transform when set, else --lora-layers */
    const char *lk = o->layers_to_transform ? "layers-to-transform" : "lora-layers";
    const char *lv = o->layers_to_transform ? o->layers_to_transform : o->lora_layers ? o->lora_layers : "all";
    if (!t->lm) {
        if (g & AF_GIVEN_MAX_SEQ_LEN) fprintf(fp, "  --max-seq-len %d (given)\n", o->max_seq_len);
        else fprintf(fp, "  %s\n", r->why_max_seq_len);
        if (g & AF_GIVEN_LAYERS) fprintf(fp, "  --%s %s (given)\n", lk, lv);
        else fprintf(fp, "  %s\n", r->why_layers);
    } else {
        if (t->lm_len_chosen)
            fprintf(fp, "  %s\n  causal LM: --%s %s is the task's (not chosen by the recipe)\n", r->why_max_seq_len,
                    lk, lv);
        else
            fprintf(fp, "  causal LM: max_seq_len %d and --%s %s are the task's (not chosen by the recipe)\n",
                    o->max_seq_len, lk, lv);
    }
    if (g & AF_GIVEN_WARMUP) fprintf(fp, "  --warmup (given): %lld steps\n", (long long)t->warmup);
    else fprintf(fp, "  %s = %lld of %lld steps\n", r->why_warmup, (long long)t->warmup, (long long)t->total);
    if (t->val) {
        if (af_tr_no_eval(t)) fprintf(fp, "  %s\n", r->why_eval);
        else if (g & AF_GIVEN_EVAL_EVERY) fprintf(fp, "  --eval-every %lld (given)\n", (long long)t->eval_every);
        else fprintf(fp, "  evaluate every %lld steps: %s\n", (long long)t->eval_every, r->why_eval);
        if (r->why_stop[0]) fprintf(fp, "  %s\n", r->why_stop);
    }
    if (o->time_budget_min > 0)
        fprintf(fp, "  compute: about %.2g FLOPs; the --time-budget %g min allows %.2g at %.1f GFLOP/s (a probe step "
                    "through every layer, now; the length is corrected after the first steps)\n",
                r->cost_flops, o->time_budget_min, r->budget_flops, t->rate_flops / 1e9);
    else
        fprintf(fp, "  compute: about %.2g FLOPs of the default budget %.2g (--time-budget MIN fits the run to minutes)\n",
                r->cost_flops, r->budget_flops);
    if (r->gave_up[0]) fprintf(fp, "  given up to fit the budget: %s\n", r->gave_up);
    if (t->why_accum[0]) fprintf(fp, "  %s\n", t->why_accum);
    if (t->why_lr[0]) fprintf(fp, "  %s\n", t->why_lr);
    if (t->why_dropout[0]) fprintf(fp, "  %s\n", t->why_dropout);
    if (t->why_precision[0]) fprintf(fp, "  %s\n", t->why_precision);
}

char *af_tr_recipe_json(const af_trainer *t) {
    if (!t->have_recipe) return NULL;
    const af_recipe *r = &t->recipe;
    const af_trainer_opts *o = t->o;
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "recipe", "auto");
    cJSON_AddNumberToObject(j, "epochs", o->max_steps > 0 ? 0 : o->epochs);
    cJSON_AddStringToObject(j, "why_epochs", (o->given & AF_GIVEN_LENGTH) ? "given" : r->why_epochs);
    cJSON_AddStringToObject(j, "class_weights", o->class_weights ? o->class_weights : "uniform");
    cJSON_AddStringToObject(j, "why_class_weights", (o->given & AF_GIVEN_CLASS_WEIGHTS) ? "given" : r->why_class_weights);
    cJSON_AddNumberToObject(j, "max_seq_len", o->max_seq_len);
    cJSON_AddStringToObject(j, "why_max_seq_len", (o->given & AF_GIVEN_MAX_SEQ_LEN) ? "given" : r->why_max_seq_len);
    char ly[32];
    af_tr_layers_text(t, ly, sizeof ly);
    cJSON_AddStringToObject(j, "lora_layers", o->layers_to_transform                          ? o->layers_to_transform
                                              : (o->given & AF_GIVEN_LAYERS) && o->lora_layers ? o->lora_layers
                                                                                               : ly);
    cJSON_AddStringToObject(j, "why_layers", (o->given & AF_GIVEN_LAYERS) ? "given" : r->why_layers);
    cJSON_AddNumberToObject(j, "warmup_steps", (double)t->warmup);
    cJSON_AddNumberToObject(j, "eval_every", (double)t->eval_every);
    cJSON_AddNumberToObject(j, "eval_flops", r->eval_flops);
    cJSON_AddNumberToObject(j, "patience", o->patience);
    cJSON_AddNumberToObject(j, "early_stopping_threshold", o->early_stopping_threshold);
    cJSON_AddStringToObject(j, "schedule", af_sched_name(o->schedule));
    cJSON_AddStringToObject(j, "why_early_stopping", r->why_stop);
    cJSON_AddNumberToObject(j, "cost_flops", r->cost_flops);
    cJSON_AddNumberToObject(j, "budget_flops", r->budget_flops);
    cJSON_AddNumberToObject(j, "time_budget_min", o->time_budget_min);
    cJSON_AddNumberToObject(j, "assumed_flops_per_s", t->rate_flops);
    cJSON_AddStringToObject(j, "gave_up", r->gave_up);
    if (t->why_accum[0]) {
        cJSON_AddNumberToObject(j, "grad_accum", o->grad_accum);
        cJSON_AddStringToObject(j, "why_grad_accum", t->why_accum);
    }
    if (t->why_lr[0]) {
        cJSON_AddNumberToObject(j, "lr", o->lr);
        cJSON_AddStringToObject(j, "why_lr", t->why_lr);
    }
    if (t->why_dropout[0]) {
        cJSON_AddNumberToObject(j, "lora_dropout", o->lora_dropout);
        cJSON_AddStringToObject(j, "why_lora_dropout", t->why_dropout);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

int af_tr_no_eval(const af_trainer *t) {
    return t->have_recipe && t->val && t->recipe.n_evals == 0 && !(t->o->given & AF_GIVEN_EVAL_EVERY);
}

double af_tr_eval_steps(const af_trainer *t) {
    if (af_tr_no_eval(t)) return 0;
    if (!t->val || !t->have_st_train || !t->have_st_val || t->total <= 0) return 0;
    const double T = (double)af_recipe_tokens(t->st_train.sorted_len, t->st_train.n, t->o->max_seq_len);
    const double Tv = (double)af_recipe_tokens(t->st_val.sorted_len, t->st_val.n, t->o->max_seq_len);
    const double nl = t->lay.n_layers, K = t->lay.layer_end - t->lay.layer_min;
    const double step = T / (double)(t->spe > 0 ? t->spe : 1) * (2.0 * K + (nl - K));
    return step > 0 ? Tv * nl / step : 0;
}

double af_tr_budget_left(const af_trainer *t, double now, double elapsed_before) {
    if (!(t->o->time_budget_min > 0)) return INFINITY;
    return t->o->time_budget_min * 60.0 - (now - t->t_created) - elapsed_before;
}

int64_t af_tr_budget_replan(af_trainer *t, int64_t done, double step_s, double eval_s, double left, double reserve) {
    const af_trainer_opts *o = t->o;
    const int64_t rem = t->total - done;
    const double every = t->eval_every > 0 ? (double)t->eval_every : (double)t->spe;
    const double per = step_s + (t->val && every > 0 && !af_tr_no_eval(t) ? eval_s / every : 0.0);
    if (rem <= 0 || !(per > 0)) return t->total;
    /* a run the recipe shortened for the budget may grow back up to the passes its rules asked */
    int64_t cap = t->total;
    if (t->have_recipe && !(o->given & AF_GIVEN_LENGTH) && t->recipe.epochs_rule > 0) {
        const double c = ceil(t->recipe.epochs_rule * (double)t->spe - 1e-9);
        if (c > (double)cap) cap = (int64_t)c;
    }
    int64_t nrem = (int64_t)floor((left - reserve) / per);
    if (nrem < 1) nrem = 1;
    int64_t nt = done + nrem < cap ? done + nrem : cap;
    /* changes under 5% are left (the run is re-planned more than once; one a little too long is
       stopped at the budget near the end of its schedule) */
    if (nt == t->total || (double)llabs(nt - t->total) < 0.05 * (double)t->total) return t->total;
    t->total = nt;
    if (o->warmup_steps < 0) { /* a warm-up share: of the new length */
        t->warmup = (int64_t)ceil(o->warmup_ratio * (double)t->total - 1e-9);
        if (t->warmup < 0) t->warmup = 0;
    }
    if (t->have_recipe && t->val && !(o->given & AF_GIVEN_EVAL_EVERY))
        t->eval_every = af_recipe_eval_every(t->recipe.n_evals, t->total, t->spe);
    cJSON *j = settings_obj(t); /* recorded: a resume keeps this length, warm-up and evaluation interval */
    char w[32];
    snprintf(w, sizeof w, "%lld", (long long)t->warmup);
    if (j && put(j, "max-steps", cJSON_CreateNumber((double)t->total)) && put(j, "warmup", cJSON_CreateString(w)) &&
        (t->eval_every <= 0 || put(j, "eval-every", cJSON_CreateNumber((double)t->eval_every))))
        store_settings(t, j);
    else cJSON_Delete(j);
    return t->total;
}

int64_t af_tr_plateau_replan(af_trainer *t, int64_t done) {
    if (t->o->schedule != AF_SCHED_WSD || done <= 0 || done >= af_wsd_decay_start(t->total)) return t->total;
    const int64_t nt = af_wsd_total_ending(done);
    if (nt >= t->total) return t->total;
    t->total = nt;
    cJSON *j = settings_obj(t); /* recorded: a resume keeps this length and the warm-up it had */
    char w[32];
    snprintf(w, sizeof w, "%lld", (long long)t->warmup);
    if (j && put(j, "max-steps", cJSON_CreateNumber((double)t->total)) && put(j, "warmup", cJSON_CreateString(w)))
        store_settings(t, j);
    else cJSON_Delete(j);
    return t->total;
}
