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
#define AF_DEFAULT_WEIGHT_DECAY 0.01
#define AF_DEFAULT_MAX_GRAD_NORM 1.0
#define AF_DEFAULT_SEED 42

#endif /* AF_TRAIN_DEFAULTS_H */
