/*
 * api_trainer.h — the public LoRA trainer's object (af_lora_trainer), shared by api.c (creation,
 * accumulation, the optimizer step) and api_state.c (its parameters and state seen from outside:
 * the view, named tensors, optimizer state, adapter directories). Not part of any API.
 */
#ifndef AF_API_TRAINER_H
#define AF_API_TRAINER_H

#include "afinar.h"
#include "lora/lora.h"
#include "train/engine.h"

/* One trainable tensor of the flat vector under its PEFT name (af_lora_trainer_tensor_info). */
typedef struct tensor_desc {
    char *name;             /* PEFT name, owned */
    int64_t rows, cols, off; /* shape and float offset in the flat vector */
    int qk_rows;            /* 1: lora_B of q/k whose rows are GGUF-permuted internally */
} tensor_desc;

/* The trainer: its model, layout, engine, device vectors, counters and tensor table. */
struct af_lora_trainer {
    const af_model *model;      /* borrowed */
    const af_ctx *ctx;          /* borrowed: ext->ctx or the model's context */
    af_lora_trainer_opts o;     /* copy; o.targets is NULL (parsed into lay.lora.targets) */
    af_param_layout lay;
    af_engine *eng;
    float *P, *G, *M, *V;       /* [n_total] each, device memory of ctx (read back only for checkpoints,
                                 * metrics, saves and the tensor getters) */
    uint8_t *decay;             /* [n_total] weight-decay mask (0 on the head bias; device), NULL without head */
    float *class_w;             /* host [num_classes] or NULL (uniform); the engine uploads it */
    int64_t adam_t;             /* AdamW updates applied */
    int64_t step_count;         /* optimizer steps taken (applied + skipped) */
    int32_t n_micro;            /* micro-batches in the gradient (since the last step or zero_grad) */
    int32_t mb_in_step;         /* micro-batches accumulated since the last step (zero_grad keeps it): the
                                   index within the step of the next one (af_lora_trainer_micro_id) */
    int nonfinite;              /* a micro-batch loss since the last step was not finite */
    double max_grad_norm;       /* clipping threshold (<= 0: off) */
    char nf_where[224];         /* where the step's first non-finite value appeared ("" when finite) */
    int64_t head_dim;           /* for the q/k row map */
    int32_t n_tensors;
    tensor_desc *tensors;       /* [n_tensors] */
};

/* Prefix the current message with the public function's name `fn`, keeping the status st. */
af_status af_lt_refail(af_status st, const char *fn);

#endif
