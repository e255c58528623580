/*
 * defaults.h — the defaults shared by the run's options (af_trainer_opts_defaults,
 * settings_table.c) and the public LoRA trainer (af_lora_trainer_opts_defaults, api.c): one value
 * per setting. The learning rate depends on the task: 5e-4 for a classification head, 2e-4 for
 * causal-LM SFT (QLoRA, Dettmers et al. 2023; PEFT/TRL's SFT guides); af_lora_trainer_opts'
 * default num_classes 0 is a causal-LM trainer, hence its lr. Not part of any API.
 */
#ifndef AF_TRAIN_DEFAULTS_H
#define AF_TRAIN_DEFAULTS_H

#define AF_DEFAULT_LORA_R 16
#define AF_DEFAULT_LORA_ALPHA 32
#define AF_DEFAULT_LORA_DROPOUT 0.05
#define AF_DEFAULT_LR_CLASSIFICATION 5e-4
#define AF_DEFAULT_LR_CAUSAL_LM 2e-4
/* preference tuning (dpo, orpo) with LoRA: 5e-5, between TRL's full-model default (1e-6) and the
 * 5e-6..5e-5 of its LoRA DPO examples; beta 0.1 as TRL's DPOConfig / ORPOConfig */
#define AF_DEFAULT_LR_PREF 5e-5
#define AF_DEFAULT_PREF_BETA 0.1
#define AF_DEFAULT_WEIGHT_DECAY 0.01
#define AF_DEFAULT_MAX_GRAD_NORM 1.0
#define AF_DEFAULT_SEED 42

#endif /* AF_TRAIN_DEFAULTS_H */
