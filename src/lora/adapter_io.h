/*
 * adapter_io.h — save / load LoRA adapters (+ classification head) as a Hugging Face PEFT adapter
 * directory, so that `PeftModel.from_pretrained(base, dir)` (peft 0.21) loads what afinar trained
 * and afinar loads what PEFT trained.
 *
 * Directory contents (names from peft/utils/constants.py SAFETENSORS_WEIGHTS_NAME / CONFIG_NAME):
 *   adapter_model.safetensors   F32 (or F16/BF16) tensors, names exactly as PEFT's save_pretrained
 *                               writes them (get_peft_model_state_dict strips the adapter name):
 *     base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_A.weight      [r, in]
 *     base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_B.weight      [out, r]
 *     base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight   same
 *     base_model.model.score.weight                                                 [num_classes, hidden]
 *     base_model.model.score.bias   [num_classes]   only with opts.write_head_bias (see below)
 *   (verified against peft 0.21.2 save_pretrained on a LlamaForSequenceClassification with
 *   task_type SEQ_CLS: the modules_to_save head is saved WITHOUT ".modules_to_save.default.",
 *   as "base_model.model.score.weight"; tests/ref/check_peft_adapter.py.)
 *   adapter_config.json         LoraConfig fields: peft_type "LORA", task_type, r, lora_alpha,
 *                               lora_dropout, use_rslora, target_modules, modules_to_save ["score"]
 *                               (SEQ_CLS only), bias "none", fan_in_fan_out false, use_dora false,
 *                               init_lora_weights true, inference_mode true (as PEFT's
 *                               save_pretrained), base_model_name_or_path, ...
 *   afinar.json                 afinar's own record: format/version, architecture, num_classes,
 *                               hidden, n_layers, labels, pooling, max_seq_len, lora {r, alpha,
 *                               dropout, use_rslora, scale, targets}, head_bias, qk_row_order
 *                               ("hf"), + caller extras. Optional: without it (a PEFT-made
 *                               directory) the loaders default (trainer.h af_classifier_load:
 *                               pooling last, no bias, integer labels 0..num_labels-1).
 *                               "manifest": "manifest.json" says the writer also wrote the
 *                               manifest, so a directory that lost it is refused.
 *   manifest.json               byte size and SHA-256 of the three files above (formats/manifest.h),
 *                               written last; a checkpoint's also covers its trainer state and
 *                               settings. Loading verifies it first (every file, before anything is
 *                               parsed); a directory without one (made by PEFT, or by afinar before
 *                               manifests existed) loads unverified unless afinar.json claims one.
 * Each file is written atomically (core/fsutil.h); the directory is created if missing.
 *
 * About the head: transformers' LlamaForSequenceClassification (and the other *ForSequence-
 * Classification models) use `score = nn.Linear(hidden, num_labels, bias=False)` applied to the
 * hidden state of the LAST non-pad token. PEFT silently ignores unexpected keys on load
 * (set_peft_model_state_dict loads with strict=False), so a "score.bias" tensor is dropped by a
 * stock model; write it only if the consumer adds a biased score layer (or keep b == 0). Mean
 * pooling has no PEFT/transformers equivalent; it is recorded in afinar.json only.
 *
 * q/k row order. llama.cpp's converter (convert_hf_to_gguf.py LlamaModel.permute, docs/FORMATS.md §3.3)
 * permutes the rows of attn_q / attn_k of llama-architecture GGUF files so that RoPE can rotate
 * adjacent pairs; afinar computes in that GGUF order, so the LoRA B matrices of q_proj / k_proj
 * ([out, r], out = rows) are in GGUF row order in P, while transformers un-permutes on GGUF load and
 * PEFT expects HF order. Per head h (head_dim hd, a in {0,1}, b in [0, hd/2)):
 *     GGUF row (h*hd + 2b + a)  <->  HF row (h*hd + a*hd/2 + b)
 * over n_head heads for q_proj and n_kv_head heads for k_proj. A matrices (columns = input
 * features) and every other projection are unaffected; Gemma 3 GGUF tensors are not permuted
 * (Gemma3Model in convert_hf_to_gguf.py has no permute). af_adapter_save converts P's GGUF order
 * to HF order, and af_adapter_load converts back, when the caller names a permuted architecture
 * (af_adapter_qk_permuted) AND gives its head counts (n_head / n_kv_head / head_dim not all 0);
 * with the head counts left 0 nothing is converted (for callers that hold P in HF order already).
 * afinar.json records "qk_row_order": "hf" (version 2); an afinar.json of version 1 (written
 * before this conversion existed) holds GGUF order and is loaded without conversion.
 *
 * Layer subsets. When some layers have adapters and others none, adapter_config.json gets
 * "layers_to_transform": [the layers with adapters] (PEFT then only wraps those; layers_pattern
 * stays null, which makes PEFT take the first numbered component of the module name, i.e.
 * "layers.{i}" — peft/tuners/tuners_utils.py check_target_module_exists).
 */
#ifndef AF_ADAPTER_IO_H
#define AF_ADAPTER_IO_H

#include "core/core.h"
#include "formats/safetensors.h"
#include "lora/lora.h"

#include <cJSON.h>
#include <stdint.h>

#define AF_ADAPTER_WEIGHTS_FILE "adapter_model.safetensors"
#define AF_ADAPTER_CONFIG_FILE "adapter_config.json"
#define AF_ADAPTER_AFINAR_FILE "afinar.json"

/* Defaults of the PEFT naming (a Llama-style decoder under PeftModelFor*). */
#define AF_ADAPTER_DEFAULT_LAYERS_PREFIX "base_model.model.model.layers"
#define AF_ADAPTER_DEFAULT_HEAD_PREFIX "base_model.model.score"

/* Save options; a zero-initialised struct gives the defaults noted on each field. All pointers
 * are borrowed for the call. */
typedef struct af_adapter_save_opts {
    const char *base_model_name_or_path; /* adapter_config.json; NULL -> null */
    const char *task_type;      /* NULL -> "SEQ_CLS" when lay->num_classes > 0, else "CAUSAL_LM" */
    const char *layers_prefix;  /* NULL -> AF_ADAPTER_DEFAULT_LAYERS_PREFIX */
    const char *head_prefix;    /* NULL -> AF_ADAPTER_DEFAULT_HEAD_PREFIX; its last component
                                   ("score") is the modules_to_save entry */
    int write_head_bias;        /* also store <head_prefix>.bias [num_classes] (see above) */
    af_st_dtype dtype;          /* AF_ST_F16 or AF_ST_BF16 store halves; anything else -> F32 */
    /* q/k row order (see above): when af_adapter_qk_permuted(architecture) and these are not all
     * 0, B rows of q_proj / k_proj are converted from GGUF to HF order; then n_head * head_dim
     * must equal q_proj's rows and n_kv_head * head_dim k_proj's (head_dim even) for every
     * targeted q/k slot. All 0: P is written as it is. */
    int32_t n_head, n_kv_head, head_dim;
    /* afinar.json */
    const char *architecture;   /* e.g. "llama" (also selects the q/k row conversion); NULL ->
                                   omitted, no conversion */
    const char *pooling;        /* e.g. "last" / "mean"; NULL -> omitted */
    int32_t max_seq_len;        /* <= 0 -> omitted */
    const char *const *labels;  /* [n_labels] class names; may be NULL */
    int32_t n_labels;
    const cJSON *extra;         /* object whose members are copied into afinar.json (replacing
                                   same-named fields); NULL -> none */
    int caller_writes_manifest; /* 1: the caller adds files to `dir` and then writes manifest.json
                                   itself (af_manifest_write, listing AF_ADAPTER_FILES too), as the
                                   trainer does for a checkpoint; 0: af_adapter_save writes it last */
} af_adapter_save_opts;

/* The files af_adapter_save writes (before manifest.json), for af_manifest_write / _verify. */
#define AF_ADAPTER_N_FILES 3
extern const char *const AF_ADAPTER_FILES[AF_ADAPTER_N_FILES];

/* Save the parameters P [lay->n_total] laid out by `lay` to directory `dir` (created with
 * mkdir -p), then manifest.json (unless opts->caller_writes_manifest). Nothing is written when a
 * value to be stored (a LoRA A/B or head element) is NaN or Inf: an adapter afinar writes is always
 * finite. Errors: AF_ERR_INVALID_ARG (NULL args, lay inconsistent: r <= 0, a targeted slot
 * with in/out <= 0, n_labels != num_classes when labels given, extra not an object),
 * AF_ERR_RANGE (a non-finite value, naming the tensor and the element), AF_ERR_IO (naming the
 * file), AF_ERR_NOMEM. Files already written stay on failure (each one is complete: old or new;
 * the manifest then no longer matches them, so a loader refuses the mix). */
af_status af_adapter_save(const char *dir, const af_param_layout *lay, const float *P,
                          const af_adapter_save_opts *opts);

/* What an adapter directory holds, read without a layout (so the caller can build a matching
 * layout first). Strings and `afinar` are owned; free with af_adapter_info_free(). */
typedef struct af_adapter_info {
    char *peft_type;          /* "LORA" */
    char *task_type;          /* "SEQ_CLS", "CAUSAL_LM", ... or NULL when null/absent */
    char *base_model;         /* base_model_name_or_path or NULL */
    int32_t r;
    float alpha;
    float dropout;
    int use_rslora;
    uint32_t targets;         /* projections (1u << af_proj) that have LoRA tensors */
    int32_t n_layers;         /* 1 + the highest layer index among the LoRA tensors */
    int32_t num_classes;      /* rows of the head weight; 0 when the file has no head */
    int32_t hidden;           /* columns of the head weight (0 when no head) */
    int has_head_bias;
    int32_t *layers_to_transform; /* adapter_config.json's layers_to_transform, ascending, or NULL
                                     when null/absent (every layer); owned */
    int32_t n_layers_to_transform;
    int qk_rows_gguf;         /* 1: the file's q/k B rows are in GGUF order (afinar.json version 1,
                                 or "qk_row_order": "gguf"); 0: HF order (PEFT, afinar >= 2) */
    cJSON *afinar;            /* parsed afinar.json, NULL when the file is absent */
    char *architecture;       /* a GGUF adapter's general.architecture (owned), NULL for directories */
    int use_dora;             /* adapter_config.json use_dora: the file also holds a
                                 <prefix>.lora_magnitude_vector [out] per adapted projection (lora/dora.h) */
} af_adapter_info;

/* Verify manifest.json (formats/manifest.h; a directory without one is accepted unless its
 * afinar.json says it was written with one), then read adapter_config.json, the tensor
 * names/shapes of adapter_model.safetensors and (if present) afinar.json. When `dir` is a GGUF file (af_adapter_is_gguf: a llama.cpp LoRA GGUF or a merged
 * model carrying an afinar head) this is af_adapter_gguf_read_info (lora/adapter_gguf.h), and
 * af_adapter_load likewise reads it with af_adapter_gguf_load. Errors: AF_ERR_IO (missing file; a pickle adapter_model.bin without safetensors is
 * reported as AF_ERR_UNSUPPORTED), AF_ERR_FORMAT (malformed JSON / safetensors, a field of the
 * wrong type), AF_ERR_UNSUPPORTED (peft_type other than LORA, use_dora, fan_in_fan_out,
 * bias != "none", non-empty rank_pattern/alpha_pattern), AF_ERR_NOMEM. */
af_status af_adapter_read_info(const char *dir, af_adapter_info *info);
void af_adapter_info_free(af_adapter_info *info);

/* Load flags. */
enum {
    AF_ADAPTER_ALLOW_MISSING_HEAD = 1u << 0, /* layout has a head, file has none (e.g. a CAUSAL_LM
                                                adapter): leave P's head as it is */
    AF_ADAPTER_IGNORE_HEAD = 1u << 1,        /* file has a head the layout lacks: skip it */
};

/* Load options; a zero-initialised struct (or NULL) means: no flags, no q/k row conversion. */
typedef struct af_adapter_load_opts {
    unsigned flags;             /* AF_ADAPTER_* above */
    /* The model the adapter is loaded onto: when af_adapter_qk_permuted(architecture) and the
     * head counts are not all 0, q_proj / k_proj B rows are converted from the file's HF order to
     * GGUF order (not for files whose info.qk_rows_gguf is set). Head counts as in
     * af_adapter_save_opts. */
    const char *architecture;
    int32_t n_head, n_kv_head, head_dim;
} af_adapter_load_opts;

/* 1 when GGUF files of `architecture` have permuted q/k rows: "llama" (llama.cpp's LlamaModel
 * converter; the only such architecture afinar runs). 0 for NULL, "gemma3", "qwen2", "qwen3" (their
 * converters keep the HF row order: llama.cpp runs them in RoPE NEOX mode) and anything else. */
int af_adapter_qk_permuted(const char *architecture);

/* HF row of GGUF row `row` of a permuted q/k projection (llama.cpp LlamaModel.permute inverted,
 * docs/FORMATS.md §3.3): with row = h*head_dim + 2b + a (a in {0,1}, b in [0, head_dim/2)) it returns
 * h*head_dim + a*head_dim/2 + b. The head h is kept, so row may index any head; rows in
 * [0, head_dim) give the in-head map. head_dim must be even and > 0 (not checked). The single
 * definition of the q/k row order, used by af_adapter_qk_rows and src/train/api.c. */
int64_t af_adapter_qk_hf_row(int64_t row, int64_t head_dim);

/* Reorder the rows of B [n_heads*head_dim, r] (row-major) in place between GGUF and HF order
 * (to_hf = 1: row GGUF (h*hd + 2b + a) moves to HF (h*hd + a*hd/2 + b), af_adapter_qk_hf_row;
 * to_hf = 0: the inverse).
 * `tmp`: scratch of head_dim * r floats. head_dim must be even (not checked here). */
void af_adapter_qk_rows(float *B, int64_t n_heads, int64_t head_dim, int64_t r, int to_hf, float *tmp);

/* What an adapter tensor name means, matched by its tail as af_adapter_load does: returns 1 for
 * "...layers.{layer}.{self_attn|mlp}.{proj}.lora_A.weight", 2 for lora_B, 3 for a head weight
 * ("score.weight" / "classifier.weight"), 4 for a head bias, 0 otherwise; *layer and *proj are set
 * for 1 and 2 (either pointer may be NULL). Used by adapter_merge.c to build a layout from a file
 * alone. */
int af_adapter_tensor_role(const char *name, int32_t *layer, af_proj *proj);

/* Disable (a_off = b_off = -1) every slot of `lay` on a layer that info->layers_to_transform does
 * not list, so a layout built by af_param_layout_init for all layers matches an adapter trained on
 * a layer subset (the skipped slots' floats stay in the buffer, unused). No-op when the list is
 * NULL. */
void af_adapter_restrict_layout(af_param_layout *lay, const af_adapter_info *info);

/* Load `dir` into P [lay->n_total]. The manifest is verified and every tensor is mapped and
 * checked first (names, shapes, dtype, finite values) and P is written only when everything
 * matches, so on error P is unchanged.
 * `opts` may be NULL (see af_adapter_load_opts); q/k B rows are converted to GGUF order when it
 * names a permuted architecture.
 * Checks: peft_type LORA; r == lay->lora.r; lora_alpha == lay->lora.alpha (relative 1e-6);
 * use_rslora equal; every targeted slot of `lay` has lora_A [r, in] and lora_B [out, r]; every
 * LoRA tensor maps to a targeted slot; the head weight is [num_classes, hidden] and the bias (if
 * present) [num_classes]; a head weight without bias sets b = 0. Tensor names are matched by
 * their tail ("layers.{i}.self_attn.q_proj.lora_A.weight", "score.weight", "classifier.weight"),
 * so any PEFT prefix is accepted. Stored F32/F16/BF16/F64 are converted to f32.
 * `info_out` (may be NULL) receives the directory's info (free with af_adapter_info_free()).
 * Errors: those of af_adapter_read_info; AF_ERR_INVALID_ARG (r / alpha / rslora mismatch, head
 * counts that do not match the q/k rows when converting);
 * AF_ERR_NOT_FOUND (missing tensors: lists the first few and the count); AF_ERR_FORMAT
 * (unexpected tensors, likewise listed; wrong shapes naming expected and found). */
af_status af_adapter_load(const char *dir, const af_param_layout *lay, float *P, const af_adapter_load_opts *opts,
                          af_adapter_info *info_out);

/* The adapter in `dir` (whose info, from af_adapter_read_info, is `info`) for `model`, ready to
 * run: *lay = af_param_layout_init(model, {info r, alpha, `dropout`, use_rslora, targets, seed 0},
 * num_classes) restricted to PEFT's layers_to_transform (af_adapter_restrict_layout), and *P
 * [lay->n_total] (af_calloc'ed, caller frees; free *lay with af_param_layout_free) filled by
 * af_adapter_load with `flags` (AF_ADAPTER_*) and the q/k rows converted HF -> GGUF order for the
 * model's architecture and head counts. Used by classifiers and by sessions (generation), so an
 * adapter directory means the same parameters to both. On error *P is NULL and *lay holds
 * nothing to free. Errors: those of af_param_layout_init and af_adapter_load; AF_ERR_NOMEM (naming
 * dir and the parameter count). */
af_status af_adapter_load_for_model(const char *dir, const af_adapter_info *info, const af_model *model,
                                    float dropout, int32_t num_classes, unsigned flags, af_param_layout *lay,
                                    float **P);

#endif /* AF_ADAPTER_IO_H */
