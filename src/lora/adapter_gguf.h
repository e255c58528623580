/*
 * adapter_gguf.h — LoRA adapters as llama.cpp LoRA GGUF files (what llama.cpp's
 * convert_lora_to_gguf.py writes and src/llama-adapter.cpp llama_adapter_lora_init reads), and the
 * afinar classification head stored in GGUF metadata (in such an adapter file or in a merged model).
 *
 * LoRA GGUF layout (facts from llama.cpp's llama-adapter.cpp / convert_lora_to_gguf.py, docs/FORMATS.md §8):
 *   general.architecture  string  the base model's ("llama", "gemma3"); llama.cpp refuses a mismatch
 *   general.type          string  "adapter"
 *   adapter.type          string  "lora"
 *   adapter.lora.alpha    f32     llama.cpp scales by alpha / r (r = lora_a's ne[1]); afinar writes
 *                                 alpha = scale * r so rsLoRA adapters keep their scale alpha/sqrt(r)
 *   tensors, for each adapted projection (the base tensor name + suffix):
 *     blk.{i}.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_a
 *         ggml ne = {in, r}: row-major [r, in] = PEFT lora_A
 *     ....weight.lora_b   ggml ne = {r, out}: row-major [out, r] = PEFT lora_B, its rows in the
 *         base GGUF's row order (for "llama" q/k: llama.cpp's permuted order, which is afinar's
 *         in-memory order; convert_lora_to_gguf.py permutes PEFT's B rows the same way)
 *   llama.cpp refuses any other tensor name (except *_norm.weight), so the afinar extras are KVs:
 *   afinar.adapter_json            string  the adapter's afinar.json (labels, pooling, max_seq_len...)
 *   afinar.classifier.num_classes  u32     C      } only for a classification adapter; the same
 *   afinar.classifier.hidden       u32     H      } keys carry the head in a merged model file
 *   afinar.classifier.weight       f32[C*H] row-major [C, H]
 *   afinar.classifier.bias         f32[C]   optional (absent: b = 0)
 * Tensors are written as F32; F16/BF16 are read too.
 */
#ifndef AF_ADAPTER_GGUF_H
#define AF_ADAPTER_GGUF_H

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "lora/adapter_io.h"

#define AF_GGUF_KEY_ADAPTER_JSON "afinar.adapter_json"
#define AF_GGUF_KEY_HEAD_PREFIX "afinar.classifier."
#define AF_GGUF_KEY_HEAD_C "afinar.classifier.num_classes"
#define AF_GGUF_KEY_HEAD_H "afinar.classifier.hidden"
#define AF_GGUF_KEY_HEAD_W "afinar.classifier.weight"
#define AF_GGUF_KEY_HEAD_B "afinar.classifier.bias"

/* GGUF tensor name stem of projection p ("attn_q", ..., "ffn_down": llama.cpp's LLM_TENSOR names);
 * NULL for p out of range. */
const char *af_proj_gguf_name(int p);

/* 1 when `path` is a regular file that starts with the GGUF magic (then the adapter readers treat
 * it as a LoRA GGUF or a model file with an afinar head), else 0. Never fails. */
int af_adapter_is_gguf(const char *path);

/* af_adapter_read_info for a GGUF file: a LoRA GGUF (general.type "adapter"), or a model file
 * carrying an afinar head (a merged classifier: r = 0, targets = 0, only the head). info->architecture
 * is general.architecture, info->qk_rows_gguf = 1 (B rows already in GGUF order).
 * Errors: AF_ERR_IO / AF_ERR_FORMAT (af_gguf_open; a general.type "adapter" file whose adapter.type
 * is not "lora" is AF_ERR_UNSUPPORTED; a tensor name that is not blk.{i}.{proj}.weight.lora_{a,b};
 * lora_a / lora_b shapes not {in, r} / {r, out}; ranks that differ (AF_ERR_UNSUPPORTED); head keys
 * of the wrong type or length; a model file without a head), AF_ERR_NOMEM. */
af_status af_adapter_gguf_read_info(const char *path, af_adapter_info *info);

/* af_adapter_load for a GGUF file (same contract: every tensor checked before P is written; flags
 * AF_ADAPTER_*; no q/k conversion, the file is in GGUF row order). */
af_status af_adapter_gguf_load(const char *path, const af_param_layout *lay, float *P, unsigned flags,
                               af_adapter_info *info_out);

/* Add the head KVs above (C = lay->num_classes, H = lay->hidden, W and b from P; the bias is written
 * only when write_bias) and, when afinar_json != NULL, afinar.adapter_json. No-op for the head when
 * lay has none. Errors: those of af_gguf_writer_add_*. */
af_status af_adapter_gguf_add_head(af_gguf_writer *w, const af_param_layout *lay, const float *P, int write_bias,
                                   const char *afinar_json);

/* Write P (laid out by lay, q/k B rows in GGUF order) as a LoRA GGUF at `path` (atomically: temp
 * file + rename). `architecture`: general.architecture (required). `afinar_json`: text stored as
 * afinar.adapter_json (may be NULL). Errors: AF_ERR_INVALID_ARG (NULL, r <= 0), those of the writer. */
af_status af_adapter_gguf_write(const char *path, const af_param_layout *lay, const float *P,
                                const char *architecture, int write_bias, const char *afinar_json);

#endif /* AF_ADAPTER_GGUF_H */
