/*
 * settings_table.c — the one table of a training run's settings: per key its flag, kind, range,
 * help section, and the af_trainer_opts field it fills (offsetof + type). Everything that reads,
 * checks, prints or defaults a setting goes through this table (declared in include/afinar.h,
 * "Training settings by key", and train/settings_internal.h):
 *   af_train_settings_to_opts  settings object -> typed fields, each with its origin;
 *   af_trainer_opts_check       the one range check of typed fields (same message as a flag's);
 *   af_train_setting_default    the default as it applies per task / recipe (help texts);
 *   af_setting_format           a field's value as text (check's settings block, run.json).
 * Adding a setting: one SETTINGS row, its af_trainer_opts field (and default in
 * af_trainer_opts_defaults when not 0), and the code that uses it.
 */
#include "train/optim.h"
#include "train/settings_internal.h"

#include "core/core.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void af_trainer_opts_defaults(af_trainer_opts *o) {
    memset(o, 0, sizeof *o);
    o->targets = "qv";
    o->lora_r = AF_DEFAULT_LORA_R;
    o->lora_layers = "top10";
    o->lora_alpha = AF_DEFAULT_LORA_ALPHA;
    o->lora_dropout = AF_DEFAULT_LORA_DROPOUT;
    o->pooling = AF_POOLING_MEAN;
    o->poll_us = -1;
    o->lr = AF_DEFAULT_LR_CLASSIFICATION;
    o->schedule = AF_SCHED_COSINE;
    o->warmup_steps = -1;
    o->warmup_ratio = 0.06;
    o->epochs = 1;
    o->batch = 8;
    o->grad_accum = 2;
    o->max_grad_norm = AF_DEFAULT_MAX_GRAD_NORM;
    o->weight_decay = AF_DEFAULT_WEIGHT_DECAY;
    o->seed = AF_DEFAULT_SEED;
    o->max_seq_len = 128;
    o->prefix_cache_mb = 2048;
    o->save_total_limit = 2;
    o->max_nonfinite = 5;
    o->progress_tty = -1;
    o->plot = 1;
    o->task = AF_TASK_CLASSIFICATION;
    o->packing = -1;
    o->pref_beta = AF_DEFAULT_PREF_BETA;
    o->precompute_ref = -1;
}

void af_trainer_opts_task_defaults(af_trainer_opts *o, af_task task) {
    o->task = task;
    if (!AF_TASK_IS_LM(task)) return;
    /* all linear layers as in QLoRA (Dettmers et al. 2023) and PEFT/TRL's SFT guides */
    o->targets = "all-linear";
    o->lora_layers = "all";
    o->lr = task == AF_TASK_CAUSAL_LM ? AF_DEFAULT_LR_CAUSAL_LM : AF_DEFAULT_LR_PREF;
}

/* How a row's value is stored in af_trainer_opts. */
typedef enum {
    FT_STR,    /* const char * */
    FT_I32,    /* int32_t */
    FT_I64,    /* int64_t */
    FT_U64,    /* uint64_t */
    FT_INT,    /* int */
    FT_DBL,    /* double */
    FT_BOOL,   /* int 0/1 (packing: -1 = the task's default, on) */
    FT_ENUM,   /* an enum stored as int: the index of the word in `words` */
    FT_WARMUP  /* warmup_steps (>= 0) or, when < 0, warmup_ratio */
} ftype;

typedef struct {
    size_t off;              /* offsetof(af_trainer_opts, field) */
    ftype type;
    const char *const *words;/* FT_ENUM: the accepted words, by value */
    unsigned given;          /* AF_GIVEN_* bit of a setting the automatic recipe decides (0: none) */
    const char *unset;       /* the value's meaning when the field is NULL / 0 / negative (NULL: print it) */
} binding;

_Static_assert(sizeof(af_task) == sizeof(int) && sizeof(af_sched) == sizeof(int) &&
                   sizeof(af_recipe_kind) == sizeof(int) && sizeof(af_head_pooling) == sizeof(int) &&
                   sizeof(af_frozen_precision) == sizeof(int),
               "FT_ENUM fields are stored as int");

static const char *const w_task[] = {"classification", "causal-lm", "dpo", "orpo", NULL};
static const char *const w_loss_type[] = {"sigmoid", "ipo", NULL};
static const char *const w_recipe[] = {"fixed", "auto", NULL};
static const char *const w_pooling[] = {"mean", "last", NULL};
static const char *const w_sched[] = {"constant", "cosine", "linear", "wsd", NULL};
static const char *const w_precision[] = {"auto", "f32", "bf16", "int8", NULL};
static const char *const w_lora_init[] = {"default", "gaussian", "pissa", "olora", NULL};

#define G_DATA "model and data"
#define G_TASK "task"
#define G_LORA "LoRA and head"
#define G_OPT "optimisation"
#define G_SCHED "schedule"
#define G_EVAL "evaluation"
#define G_CKPT "checkpoints"
#define G_COMP "compute"
#define G_OUT "output"
#define BIG 1e15
#define F(field) offsetof(af_trainer_opts, field)

/* X(name, kind, short, lo, hi, arg, group, train_only, field offset, type, words, recipe bit, unset, help) */
#define SETTINGS(X)                                                                                                  \
    X("model", TEXT, 'm', 0, 0, "FILE", G_DATA, 0, F(model_path), FT_STR, NULL, 0, "required",                     \
      "base model: a GGUF file or a Hugging Face directory (needs its tokenizer)")                                  \
    X("train", TEXT, 0, 0, 0, "FILE", G_DATA, 0, F(train_path), FT_STR, NULL, 0, "required",                        \
      "training data: JSONL {\"text\": ..., \"label\": id|name} (or \"labels\": [...]), or CSV / TSV with a "    \
      "header (docs/DATA.md); causal-lm: text, prompt/completion or messages")                                                                             \
    X("val", TEXT, 0, 0, 0, "FILE", G_DATA, 0, F(val_path), FT_STR, NULL, 0, "none",                                \
      "validation data (JSONL, CSV or TSV); evaluation, best checkpoint and early stopping use it")                            \
    X("val-split", NUMBER, 0, 0, 0.99, "F", G_DATA, 0, F(val_split), FT_DBL, NULL, 0, "none",                      \
      "hold out fraction F of train (stratified, seeded) as validation")                                          \
    X("text-field", TEXT, 0, 0, 0, "NAME", G_DATA, 0, F(text_field), FT_STR, NULL, 0, "the first of text, sentence, content, input", \
      "field (or column) holding the text")                                                                               \
    X("label-field", TEXT, 0, 0, 0, "NAME", G_DATA, 0, F(label_field), FT_STR, NULL, 0, "label / labels",           \
      "field (or column) holding the label(s)")                                                                           \
    X("labels", TEXT, 0, 0, 0, "FILE|a,b,c", G_DATA, 0, F(labels), FT_STR, NULL, 0, "from the data",                \
      "label names: a file with one per line, or a comma list (fixes the ids)")                                   \
    X("num-classes", INT, 0, 0, 1e6, "N", G_DATA, 0, F(num_classes), FT_I32, NULL, 0, "max label + 1",             \
      "number of classes for integer labels")                                                                      \
    X("multi-label", BOOL, 0, 0, 0, NULL, G_DATA, 0, F(multi_label), FT_BOOL, NULL, 0, NULL,                       \
      "require multi-label data (BCE loss; the data decide otherwise)")                                             \
    X("task", TEXT, 0, 0, 0, "NAME", G_TASK, 0, F(task), FT_ENUM, w_task, 0, NULL,                                  \
      "classification | causal-lm: next-token LoRA SFT on text, prompt/completion or messages JSONL "             \
      "(its own defaults of --targets, --lora-layers, --lr are shown as \"causal-lm\") | dpo | orpo: preference "  \
      "tuning on prompt/chosen/rejected pairs (causal-lm's defaults, --lr 5e-5; docs/PREFERENCE.md)")              \
    X("recipe", TEXT, 0, 0, 0, "auto|fixed", G_TASK, 0, F(recipe), FT_ENUM, w_recipe, 0, NULL,                      \
      "auto: epochs, class weights, max_seq_len, LoRA layers, warm-up and evaluation interval chosen from the "     \
      "data within a compute budget (each choice printed with its reason; flags you give win); fixed: the "        \
      "values shown as \"fixed recipe\"")                                                                             \
    X("time-budget", NUMBER, 0, 0.1, 1e6, "MIN", G_TASK, 0, F(time_budget_min), FT_DBL, NULL, 0, "none",           \
      "finish within MIN minutes (setup, training, evaluations): auto fits layers, max_seq_len and passes to the " \
      "measured speed; the run re-plans after its first steps and stops, evaluated and saved, at the budget")      \
    X("loss-on", TEXT, 0, 0, 0, "auto|all", G_TASK, 0, F(loss_on), FT_STR, NULL, 0, "auto",                        \
      "causal-lm: tokens with a loss: auto (completion only for prompt/completion, assistant turns for "          \
      "messages, all for text) or all")                                                                            \
    X("chat-template", TEXT, 0, 0, 0, "NAME", G_TASK, 0, F(chat_template), FT_STR, NULL, 0, "the model's",          \
      "causal-lm: render messages with NAME (chatml, qwen3, llama3, deepseek-r1, phi3, mistral, smollm3, gemma, "   \
      "gemma4, qwq, mistral-v7) instead of the layout recognised from the model's own template")              \
    X("packing", BOOL, 0, 0, 0, NULL, G_TASK, 0, F(packing), FT_BOOL, NULL, 0, "on",                                \
      "causal-lm: pack samples into micro-batches of --batch x --max-seq-len tokens by best-fit decreasing "       \
      "(--no-packing: --batch samples each)")                                                                      \
    X("beta", NUMBER, 0, 1e-9, 1e6, "B", G_TASK, 0, F(pref_beta), FT_DBL, NULL, 0, NULL,                            \
      "dpo: beta of the DPO/IPO loss (deviation from the reference); orpo: lambda, weight of the odds-ratio term") \
    X("loss-type", TEXT, 0, 0, 0, "sigmoid|ipo", G_TASK, 0, F(pref_loss_type), FT_ENUM, w_loss_type, 0, NULL,       \
      "dpo: sigmoid (DPO, Rafailov et al. 2023) or ipo (Azar et al. 2023)")                                        \
    X("label-smoothing", NUMBER, 0, 0, 0.49, "E", G_TASK, 0, F(label_smoothing), FT_DBL, NULL, 0, NULL,             \
      "dpo sigmoid: conservative DPO label smoothing in [0, 0.5)")                                                 \
    X("precompute-ref", BOOL, 0, 0, 0, NULL, G_TASK, 0, F(precompute_ref), FT_BOOL, NULL, 0, "on",                  \
      "dpo: reference log-probabilities (adapter off) computed once per pair before training "                     \
      "(--no-precompute-ref: again in every step)")                                                                \
    X("targets", TEXT, 0, 0, 0, "SPEC", G_LORA, 0, F(targets), FT_STR, NULL, 0, NULL,                               \
      "LoRA targets: qv, qkv, all-linear, or a list of q,k,v,o,gate,up,down")                                       \
    X("lora-layers", TEXT, 0, 0, 0, "A-B|topN", G_LORA, 0, F(lora_layers), FT_STR, NULL, AF_GIVEN_LAYERS, "all",  \
      "layers with adapters, 0-based: all, A-B, A-, topN (the backward stops at the lowest)")                      \
    X("layers-to-transform", TEXT, 0, 0, 0, "I,J,...", G_LORA, 0, F(layers_to_transform), FT_STR, NULL, 0,          \
      "--lora-layers", "PEFT layers_to_transform: adapters only on these 0-based layers, any set (e.g. 0,2,5; "   \
      "YAML: a list); instead of --lora-layers")                                                                    \
    X("lora-r", INT, 0, 1, 4096, "R", G_LORA, 0, F(lora_r), FT_I32, NULL, 0, NULL, "LoRA rank")                   \
    X("lora-alpha", NUMBER, 0, 1e-9, 1e6, "A", G_LORA, 0, F(lora_alpha), FT_DBL, NULL, 0, NULL,                    \
      "LoRA alpha (scale alpha/r)")                                                                                \
    X("lora-dropout", NUMBER, 0, 0, 0.99, "P", G_LORA, 0, F(lora_dropout), FT_DBL, NULL, 0, NULL,                  \
      "dropout on the LoRA input (auto recipe, causal-lm: 0 in a run of one pass or less)")                        \
    X("rslora", BOOL, 0, 0, 0, NULL, G_LORA, 0, F(use_rslora), FT_BOOL, NULL, 0, NULL,                              \
      "rank-stabilised scale alpha/sqrt(r)")                                                                       \
    X("loraplus-lr-ratio", NUMBER, 0, 0, 1e4, "X", G_LORA, 0, F(loraplus_lr_ratio), FT_DBL, NULL, 0, "off",         \
      "LoRA+: lora_B (and the head bias) learn at lr x X (PEFT create_loraplus_optimizer; 0 or 1: off)")         \
    X("init-lora-weights", TEXT, 0, 0, 0, "NAME", G_LORA, 0, F(init_lora_weights), FT_ENUM, w_lora_init, 0, NULL,     \
      "PEFT init_lora_weights: default (kaiming-uniform A, B = 0), gaussian (A ~ N(0, 1/r^2)), pissa (SVD of W) or " \
      "olora (QR of W), the rest of W frozen; saved as a rank-2r LoRA of the base (docs/LORA.md)")                  \
    X("dora", BOOL, 0, 0, 0, NULL, G_LORA, 0, F(use_dora), FT_BOOL, NULL, 0, NULL,                                 \
      "DoRA: a trained magnitude per output row, m/||W + sBA|| x (W + sBA) (PEFT use_dora; CPU only; docs/LORA.md)") \
    X("pooling", TEXT, 0, 0, 0, "mean|last", G_LORA, 0, F(pooling), FT_ENUM, w_pooling, 0, NULL,                    \
      "sequence pooling for the head (last = transformers/PEFT)")                                                  \
    X("head-bias", BOOL, 0, 0, 0, NULL, G_LORA, 0, F(head_bias), FT_BOOL, NULL, 0, NULL,                            \
      "train a head bias (PEFT's score layer has none: lost outside afinar)")                                      \
    X("class-weights", TEXT, 0, 0, 0, "SPEC", G_LORA, 0, F(class_weights), FT_STR, NULL, AF_GIVEN_CLASS_WEIGHTS,    \
      "uniform", "uniform, inverse-freq, sqrt-inverse, or w1,w2,...")                                              \
    X("lr", NUMBER, 0, 0, 10, "LR", G_OPT, 0, F(lr), FT_DBL, NULL, 0, NULL, "peak learning rate")                  \
    X("weight-decay", NUMBER, 0, 0, 10, "X", G_OPT, 0, F(weight_decay), FT_DBL, NULL, 0, NULL,                     \
      "AdamW weight decay (not on the head bias)")                                                                 \
    X("max-grad-norm", NUMBER, 0, 0, 1e9, "X", G_OPT, 0, F(max_grad_norm), FT_DBL, NULL, 0, "off",                 \
      "clip the global gradient norm (0 = off)")                                                                   \
    X("batch", INT, 0, 1, 1e6, "N", G_OPT, 0, F(batch), FT_I32, NULL, 0, NULL, "samples per micro-batch")           \
    X("grad-accum", INT, 0, 1, 1e6, "N", G_OPT, 0, F(grad_accum), FT_I32, NULL, 0, NULL,                            \
      "micro-batches per optimizer step")                                                                          \
    X("max-seq-len", INT, 0, 1, 1 << 20, "N", G_OPT, 0, F(max_seq_len), FT_I32, NULL, AF_GIVEN_MAX_SEQ_LEN, NULL,   \
      "truncate samples to N tokens")                                                                              \
    X("seed", INT, 0, 0, 9007199254740991.0, "N", G_OPT, 0, F(seed), FT_U64, NULL, 0, NULL,                        \
      "seed of init, shuffles, split and dropout")                                                                 \
    X("max-nonfinite", INT, 0, 1, 1e6, "N", G_OPT, 0, F(max_nonfinite), FT_I32, NULL, 0, NULL,                      \
      "stop after N consecutive non-finite steps")                                                                 \
    X("epochs", NUMBER, 0, 0, 1e6, "E", G_SCHED, 0, F(epochs), FT_DBL, NULL, AF_GIVEN_LENGTH, NULL,                 \
      "passes over the training data, may be fractional")                                                          \
    X("max-steps", INT, 0, 0, BIG, "N", G_SCHED, 0, F(max_steps), FT_I64, NULL, 0, "none",                          \
      "optimizer steps; sets the length instead of --epochs")                                                      \
    X("schedule", TEXT, 0, 0, 0, "NAME", G_SCHED, 0, F(schedule), FT_ENUM, w_sched, AF_GIVEN_SCHEDULE, NULL,        \
      "constant | cosine | linear | wsd (constant, then a linear cool-down over the last fifth), after a "         \
      "linear warm-up")                                                                                            \
    X("warmup", TEXT, 0, 0, 0, "N|F|P%", G_SCHED, 0, F(warmup_steps), FT_WARMUP, NULL, AF_GIVEN_WARMUP, NULL,      \
      "warm-up: N steps, or a fraction F < 1 / P% of all steps")                                                  \
    X("lr-min", NUMBER, 0, 0, 10, "LR", G_SCHED, 0, F(lr_min), FT_DBL, NULL, 0, NULL,                              \
      "floor of the cosine/linear decay")                                                                          \
    X("eval-every", INT, 0, 0, BIG, "N", G_EVAL, 0, F(eval_every), FT_I64, NULL, AF_GIVEN_EVAL_EVERY,               \
      "each epoch end", "evaluate every N steps (0: at each epoch end)")                                          \
    X("eval-batch", INT, 0, 0, 1e6, "N", G_EVAL, 0, F(eval_batch), FT_I32, NULL, 0, "--batch",                      \
      "samples per evaluation batch")                                                                              \
    X("patience", INT, 0, 0, 1e9, "N", G_EVAL, 0, F(patience), FT_I32, NULL, AF_GIVEN_PATIENCE, "off",              \
      "stop after N evaluations without a gain (macro-F1; causal-lm: eval loss); with --schedule wsd: cool "      \
      "down, evaluate once more, stop")                                                                            \
    X("early-stopping-threshold", NUMBER, 0, 0, 1e9, "X", G_EVAL, 0, F(early_stopping_threshold), FT_DBL, NULL,     \
      AF_GIVEN_THRESHOLD, NULL, "a gain counts for --patience only above X (macro-F1, or eval loss)")           \
    X("output", TEXT, 'o', 0, 0, "DIR", G_CKPT, 1, F(output_dir), FT_STR, NULL, 0, "required",                      \
      "output directory (checkpoints, best/, final/, metrics.jsonl, run.json)")                                    \
    X("overwrite", BOOL, 0, 0, 0, NULL, G_CKPT, 1, F(overwrite), FT_BOOL, NULL, 0, NULL,                            \
      "replace the run already in the output directory")                                                           \
    X("resume", TEXT, 0, 0, 0, "DIR", G_CKPT, 1, F(resume), FT_STR, NULL, 0, "none",                               \
      "continue exactly from a checkpoint (or a run directory's newest one)")                                      \
    X("save-every", INT, 0, 0, BIG, "N", G_CKPT, 1, F(save_every), FT_I64, NULL, 0,                                 \
      "at each evaluation / epoch end", "checkpoint every N steps (0: at each evaluation / epoch end)")            \
    X("save-total-limit", INT, 0, 0, 1e6, "N", G_CKPT, 1, F(save_total_limit), FT_I32, NULL, 0, "all",              \
      "checkpoints kept, newest first (0 = all)")                                                                  \
    X("threads", INT, 't', 0, 1024, "N", G_COMP, 0, F(threads), FT_INT, NULL, 0, "all cores", "compute threads")   \
    X("device", TEXT, 0, 0, 0, "DEV", G_COMP, 0, F(device), FT_STR, NULL, 0, "cpu",                                 \
      "compute device: cpu, vulkan, vulkan:N, auto (a Vulkan device when present and the run fits it, else the "  \
      "CPU); 'afinar devices' lists them")                                                                         \
    X("frozen-precision", TEXT, 0, 0, 0, "auto|f32|bf16|int8", G_COMP, 0, F(frozen_precision), FT_ENUM, w_precision, \
      0, NULL, "operands of the frozen-weight and attention products (LoRA, gradients, optimizer: f32); auto: "   \
      "the recipe's choice, bf16 for classification and causal LM where this CPU's bf16 dot product is fast "   \
      "(AMD Zen 4 and later); int8: the frozen weights' products in int8 with row scales (AVX512_VNNI)")          \
    X("bf16", BOOL, 0, 0, 0, NULL, G_COMP, 0, F(bf16), FT_BOOL, NULL, 0, NULL,                                      \
      "the same as --frozen-precision bf16 (bfloat16 operands, f32 accumulation; AVX512_BF16)")                   \
    X("quantize", TEXT, 0, 0, 0, "TYPE", G_COMP, 0, F(quantize), FT_STR, NULL, 0, "none",                          \
      "quantize the base model's f32/f16/bf16 projections at load: nf4 (QLoRA NormalFloat4, bitsandbytes-exact) " \
      "| q8_0 | f16 | bf16 | none")                                                                                \
    X("checkpointing", BOOL, 0, 0, 0, NULL, G_COMP, 0, F(checkpointing), FT_BOOL, NULL, 0, NULL,                    \
      "recompute activations in the backward (less memory, ~1.3x time)")                                          \
    X("prefix-cache", INT, 0, 0, 1 << 24, "MIB", G_COMP, 0, F(prefix_cache_mb), FT_I32, NULL, 0, "off",             \
      "keep the frozen layers' output per sample (0 = off)")                                                       \
    X("memory-limit", NUMBER, 0, 0, 1e9, "MIB", G_COMP, 0, F(memory_limit_mb), FT_DBL, NULL, 0,                     \
      "RAM or cgroup limit", "refuse to start above this estimated peak")                                          \
    X("poll", INT, 0, 0, 1e7, "US", G_COMP, 0, F(poll_us), FT_INT, NULL, 0, "1000",                                \
      "microseconds threads spin between operations before sleeping (0 = sleep at once)")                         \
    X("log-every", INT, 0, 0, BIG, "N", G_OUT, 1, F(log_every), FT_I64, NULL, 0, "about 20 lines",                 \
      "progress line every N steps when stderr is not a terminal")                                                 \
    X("plot", BOOL, 0, 0, 0, NULL, G_OUT, 1, F(plot), FT_BOOL, NULL, 0, NULL,                                       \
      "write curves.png with gnuplot at the end (--no-plot)")

#define INFO(name, kind, sh, lo, hi, arg, grp, tonly, off, ft, words, given, unset, help)                         \
    {name, AF_SETTING_##kind, sh, lo, hi, arg, help, grp, tonly},
#define BIND(name, kind, sh, lo, hi, arg, grp, tonly, off, ft, words, given, unset, help) {off, ft, words, given, unset},
static const af_setting_info k_keys[] = {SETTINGS(INFO)};
static const binding k_bind[] = {SETTINGS(BIND)};
#undef INFO
#undef BIND
#undef BIG
#define N_KEYS ((int32_t)(sizeof k_keys / sizeof *k_keys))
_Static_assert(sizeof k_keys / sizeof *k_keys <= AF_SETTINGS_MAX, "af_trainer_opts.origin has no room for a key");

const af_setting_info *af_train_setting_keys(int32_t *n) {
    if (n) *n = N_KEYS;
    return k_keys;
}

int32_t af_setting_index(const char *name) {
    for (int32_t i = 0; name && i < N_KEYS; i++)
        if (!strcmp(k_keys[i].name, name)) return i;
    return -1;
}

const char *af_setting_origin_name(af_setting_origin origin) {
    static const char *const names[] = {"default", "caller", "resume", "config", "flag", "recipe"};
    return (unsigned)origin < sizeof names / sizeof *names ? names[origin] : "?";
}

static void *field(af_trainer_opts *o, int32_t i) { return (char *)o + k_bind[i].off; }
static const void *cfield(const af_trainer_opts *o, int32_t i) { return (const char *)o + k_bind[i].off; }

/* A numeric field's value as a double (FT_STR, FT_ENUM, FT_WARMUP: 0). */
static double num_of(const af_trainer_opts *o, int32_t i) {
    const void *p = cfield(o, i);
    switch (k_bind[i].type) {
    case FT_I32: return *(const int32_t *)p;
    case FT_I64: return (double)*(const int64_t *)p;
    case FT_U64: return (double)*(const uint64_t *)p;
    case FT_INT:
    case FT_BOOL: return *(const int *)p;
    case FT_DBL: return *(const double *)p;
    default: return 0;
    }
}

static void set_num(af_trainer_opts *o, int32_t i, double v) {
    void *p = field(o, i);
    switch (k_bind[i].type) {
    case FT_I32: *(int32_t *)p = (int32_t)v; break;
    case FT_I64: *(int64_t *)p = (int64_t)v; break;
    case FT_U64: *(uint64_t *)p = (uint64_t)v; break;
    case FT_INT:
    case FT_BOOL:
    case FT_ENUM: *(int *)p = (int)v; break;
    case FT_DBL: *(double *)p = v; break;
    default: break;
    }
}

char *af_setting_format(int32_t i, const af_trainer_opts *o, char *buf, size_t cap) {
    if (i < 0 || i >= N_KEYS || !cap) return NULL;
    const binding *b = &k_bind[i];
    const void *p = cfield(o, i);
    const char *unset = b->unset;
    switch (b->type) {
    case FT_STR: {
        const char *s = *(const char *const *)p;
        snprintf(buf, cap, "%s", s ? s : unset ? unset : "none");
        break;
    }
    case FT_ENUM: {
        const int v = *(const int *)p;
        int n = 0;
        while (b->words[n]) n++;
        snprintf(buf, cap, "%s", v >= 0 && v < n ? b->words[v] : "?");
        break;
    }
    case FT_WARMUP:
        if (o->warmup_steps >= 0) snprintf(buf, cap, "%lld steps", (long long)o->warmup_steps);
        else snprintf(buf, cap, "%.15g%%", o->warmup_ratio * 100);
        break;
    case FT_BOOL: {
        const int v = *(const int *)p;
        snprintf(buf, cap, "%s", v < 0 && unset ? unset : v ? "on" : "off");
        break;
    }
    default: {
        const double v = num_of(o, i);
        if (v <= 0 && unset) snprintf(buf, cap, "%s", unset);
        else if (b->type == FT_U64) snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p);
        else snprintf(buf, cap, "%.15g", v);
    }
    }
    return buf;
}

/* Whether field i of a and b hold the same value (strings by content). */
static int same_value(const af_trainer_opts *a, const af_trainer_opts *b, int32_t i) {
    const void *p = cfield(a, i), *q = cfield(b, i);
    switch (k_bind[i].type) {
    case FT_STR: {
        const char *s = *(const char *const *)p, *t = *(const char *const *)q;
        return s == t || (s && t && !strcmp(s, t));
    }
    case FT_WARMUP: return a->warmup_steps == b->warmup_steps && a->warmup_ratio == b->warmup_ratio;
    case FT_ENUM: return *(const int *)p == *(const int *)q;
    case FT_U64: return *(const uint64_t *)p == *(const uint64_t *)q;
    default: return num_of(a, i) == num_of(b, i);
    }
}

void af_trainer_opts_mark_caller(af_trainer_opts *o) {
    for (int32_t i = 0; i < N_KEYS; i++)
        if (o->origin[i] != AF_ORIGIN_DEFAULT) return; /* from a settings object: its origins are complete */
    af_trainer_opts d;
    af_trainer_opts_defaults(&d);
    af_trainer_opts_task_defaults(&d, o->task);
    for (int32_t i = 0; i < N_KEYS; i++)
        if (o->origin[i] == AF_ORIGIN_DEFAULT && !same_value(o, &d, i)) o->origin[i] = AF_ORIGIN_CALLER;
}

char *af_train_setting_default(const char *key, af_task task, int auto_recipe, char *buf, size_t cap) {
    const int32_t i = af_setting_index(key);
    if (i < 0 || !buf || !cap) return NULL;
    af_trainer_opts d;
    af_trainer_opts_defaults(&d);
    af_trainer_opts_task_defaults(&d, task);
    if (auto_recipe) d.recipe = AF_RECIPE_AUTO; /* settings objects (the command line) default to auto */
    char v[160];
    af_setting_format(i, &d, v, sizeof v);
    /* the keys the automatic recipe decides: of a causal-LM run only the length, warm-up and
       evaluation interval (recipe.h); class weights of single-label data */
    const unsigned g = k_bind[i].given;
    const int decided = auto_recipe && g && (!AF_TASK_IS_LM(task) || g == AF_GIVEN_LENGTH ||
                                             g == AF_GIVEN_WARMUP || g == AF_GIVEN_EVAL_EVERY ||
                                             g == AF_GIVEN_SCHEDULE || g == AF_GIVEN_PATIENCE ||
                                             g == AF_GIVEN_THRESHOLD);
    if (decided) snprintf(buf, cap, "auto: from the data; fixed recipe: %s", v);
    else snprintf(buf, cap, "%s", v);
    return buf;
}

/* ---- settings object -> typed fields ---- */

/* Value of `e` as text for a TEXT key (numbers are printed). */
static int get_str(const cJSON *e, const char **s, char *buf, size_t cap) {
    if (cJSON_IsString(e)) *s = e->valuestring;
    else if (cJSON_IsNumber(e)) snprintf(buf, cap, "%.17g", e->valuedouble), *s = buf;
    else return 0;
    return 1;
}

/* The one range check of a numeric key: "--batch: expected an integer in [1, 1000000], got '0'". */
static af_status check_range(const af_setting_info *d, double v, const char *given) {
    const char *what = d->kind == AF_SETTING_INT ? "an integer" : "a number";
    if (!isfinite(v) || v < d->lo || v > d->hi || (d->kind == AF_SETTING_INT && v != floor(v)))
        return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s in [%.15g, %.15g], got '%s'", d->name, what, d->lo, d->hi,
                       given);
    return AF_OK;
}

/* Numeric value of an INT / NUMBER key, checked against the key's range. Messages quote the value
 * as given. */
static af_status get_num(const af_setting_info *d, const cJSON *e, double *v) {
    char given[64];
    const char *what = d->kind == AF_SETTING_INT ? "an integer" : "a number";
    if (cJSON_IsNumber(e)) {
        *v = e->valuedouble;
        snprintf(given, sizeof given, "%.17g", *v);
    } else if (cJSON_IsString(e)) {
        char *end;
        errno = 0;
        *v = strtod(e->valuestring, &end);
        snprintf(given, sizeof given, "%.60s", e->valuestring);
        if (errno || end == e->valuestring || *end)
            return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s, got '%s'", d->name, what, given);
    } else {
        return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s", d->name, what);
    }
    return check_range(d, *v, given);
}

static af_status get_bool(const af_setting_info *d, const cJSON *e, int *b) {
    if (cJSON_IsBool(e)) *b = cJSON_IsTrue(e);
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "true") || !strcmp(e->valuestring, "1"))) *b = 1;
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "false") || !strcmp(e->valuestring, "0"))) *b = 0;
    else if (cJSON_IsNumber(e) && (e->valuedouble == 0 || e->valuedouble == 1)) *b = e->valuedouble != 0;
    else return af_fail(AF_ERR_INVALID_ARG, "--%s: expected true or false", d->name);
    return AF_OK;
}

/* Warm-up spec: "N" steps, "F" fraction < 1, "P%". */
static af_status parse_warmup(const cJSON *e, af_trainer_opts *o) {
    double v;
    char *end;
    const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
    if (cJSON_IsNumber(e)) v = e->valuedouble, end = (char *)"";
    else if (s) {
        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s) goto bad;
    } else goto bad;
    if (!isfinite(v) || v < 0) goto bad;
    if (*end == '%' && !end[1]) {
        if (v > 100) goto bad;
        o->warmup_steps = -1, o->warmup_ratio = v / 100;
    } else if (*end) goto bad;
    else if (v < 1 && v > 0) o->warmup_steps = -1, o->warmup_ratio = v;
    else if (v == floor(v) && v <= 1e15) o->warmup_steps = (int64_t)v;
    else goto bad;
    return AF_OK;
bad:
    return af_fail(AF_ERR_INVALID_ARG, "--warmup: expected N steps, a fraction below 1 or P%%, got '%s'",
                   s ? s : (cJSON_IsNumber(e) ? "a number out of range" : "a non-number"));
}

/* A word of an FT_ENUM key into its field. */
static af_status set_enum(int32_t i, const char *s, af_trainer_opts *o) {
    const char *const *w = k_bind[i].words;
    for (int v = 0; w[v]; v++)
        if (!strcmp(s, w[v])) {
            set_num(o, i, v);
            return AF_OK;
        }
    char list[128] = "";
    for (int v = 0; w[v]; v++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", v ? (w[v + 1] ? ", " : " or ") : "", w[v]);
    return af_fail(AF_ERR_INVALID_ARG, "--%s: expected %s, got '%s'", k_keys[i].name, list, s);
}

/* One key's value `e` into its field. *text_owned: a number given for a text key was stored as
 * text in the object (the caller starts again: the field must point into the object). */
static af_status set_key(af_train_settings *ts, int32_t i, const cJSON *e, af_trainer_opts *o, int *restart) {
    const af_setting_info *d = &k_keys[i];
    const binding *b = &k_bind[i];
    if (b->type == FT_WARMUP) return parse_warmup(e, o);
    if (d->kind == AF_SETTING_TEXT) {
        const char *s = NULL;
        char buf[64];
        if (!get_str(e, &s, buf, sizeof buf)) return af_fail(AF_ERR_INVALID_ARG, "--%s: expected a string", d->name);
        if (s == buf) { /* keep numbers given for strings alive: store the text in the object */
            AF_TRY(af_train_settings_restate(ts, d->name, buf));
            *restart = 1;
            return AF_OK;
        }
        if (b->type == FT_ENUM) return set_enum(i, s, o);
        *(const char **)field(o, i) = s;
        return AF_OK;
    }
    if (d->kind == AF_SETTING_BOOL) {
        int v = 0;
        AF_TRY(get_bool(d, e, &v));
        *(int *)field(o, i) = v;
        return AF_OK;
    }
    double v = 0;
    AF_TRY(get_num(d, e, &v));
    set_num(o, i, v);
    return AF_OK;
}

af_status af_train_settings_to_opts(af_train_settings *ts, af_trainer_opts *o) {
    if (!ts || !o) return af_fail(AF_ERR_INVALID_ARG, "af_train_settings_to_opts: NULL argument");
    af_trainer_opts_defaults(o);
    o->recipe = AF_RECIPE_AUTO; /* settings (the command line, --config) default to the automatic recipe */
    /* the task first: causal-lm changes the defaults of the keys below (af_trainer_opts_task_defaults) */
    const int32_t i_task = af_setting_index("task");
    const cJSON *e = af_train_settings_item(ts, "task");
    if (e) {
        const char *task = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!task) return af_fail(AF_ERR_INVALID_ARG, "--task: expected classification or causal-lm, got 'a non-string'");
        AF_TRY(set_enum(i_task, task, o));
    }
    af_trainer_opts_task_defaults(o, o->task);
    for (int32_t i = 0; i < N_KEYS; i++) o->origin[i] = AF_ORIGIN_DEFAULT;
    for (e = af_train_settings_first(ts); e; e = e->next) {
        const int32_t i = af_setting_index(e->string);
        if (i < 0) continue;
        o->origin[i] = (unsigned char)af_train_settings_origin(ts, e->string);
        if (i == i_task) continue; /* read above */
        int restart = 0;
        AF_TRY(set_key(ts, i, e, o, &restart));
        if (restart) return af_train_settings_to_opts(ts, o);
        if (k_bind[i].given) o->given |= k_bind[i].given; /* the recipe's settings given win over its choices */
    }
    const int have_epochs = af_train_settings_item(ts, "epochs") != NULL, have_steps = o->max_steps > 0;
    if (!have_steps && !have_epochs) o->given &= ~(unsigned)AF_GIVEN_LENGTH;
    if (have_steps) o->given |= AF_GIVEN_LENGTH;
    if (o->val_path && o->val_split > 0)
        return af_fail(AF_ERR_INVALID_ARG,
                       "--val and --val-split conflict: give a validation file or a split fraction, not both");
    if (o->layers_to_transform && af_train_settings_item(ts, "lora-layers"))
        return af_fail(AF_ERR_INVALID_ARG, "--layers-to-transform %s and --lora-layers %s: give one of them",
                       o->layers_to_transform, o->lora_layers ? o->lora_layers : "all");
    if (have_steps && !have_epochs) o->epochs = 0; /* --max-steps alone: the default epochs play no part */
    if (!(o->epochs > 0) && o->max_steps <= 0)
        return af_fail(AF_ERR_INVALID_ARG, "--epochs 0 trains nothing: give --epochs E > 0 or --max-steps N");
    return AF_OK;
}

af_status af_trainer_opts_check(const af_trainer_opts *o) {
    af_trainer_opts d;
    af_trainer_opts_defaults(&d);
    af_trainer_opts_task_defaults(&d, AF_TASK_IS_LM(o->task) ? o->task : AF_TASK_CLASSIFICATION);
    /* the values a run cannot start with; the others (a learning rate of 0 or 1e30, ...) are the
       diagnostics' to judge (hparams.c), as a C caller may set them */
    static const char *const hard[] = {"batch", "grad-accum", "max-seq-len", "weight-decay", "lr-min", "val-split"};
    for (size_t h = 0; h < sizeof hard / sizeof *hard; h++) {
        const int32_t i = af_setting_index(hard[h]);
        const af_setting_info *k = &k_keys[i];
        if (same_value(o, &d, i)) continue;
        char given[64];
        const double v = num_of(o, i);
        snprintf(given, sizeof given, "%.17g", v);
        AF_TRY(check_range(k, v, given));
    }
    return AF_OK;
}
