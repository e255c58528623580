build2/src/train/trainer.o: src/train/trainer.c \
 src/train/trainer_internal.h src/train/api_internal.h include/afinar.h \
 src/lora/lora.h src/core/core.h src/kernels/train_ops.h \
 src/train/engine.h src/model/model.h src/formats/gguf.h \
 src/formats/hf_config.h src/formats/safetensors.h \
 src/tokenizer/tokenizer.h src/formats/lm_jsonl.h src/model/transformer.h \
 src/kernels/backend.h src/kernels/ctx.h src/core/threadpool.h \
 src/train/head.h src/train/dist.h src/train/trainer.h src/train/data.h \
 src/formats/jsonl.h src/train/hparams.h src/train/metrics.h \
 /usr/include/cjson/cJSON.h src/train/optim.h src/kernels/matmul.h
src/train/trainer_internal.h:
src/train/api_internal.h:
include/afinar.h:
src/lora/lora.h:
src/core/core.h:
src/kernels/train_ops.h:
src/train/engine.h:
src/model/model.h:
src/formats/gguf.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/model/transformer.h:
src/kernels/backend.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/train/head.h:
src/train/dist.h:
src/train/trainer.h:
src/train/data.h:
src/formats/jsonl.h:
src/train/hparams.h:
src/train/metrics.h:
/usr/include/cjson/cJSON.h:
src/train/optim.h:
src/kernels/matmul.h:
