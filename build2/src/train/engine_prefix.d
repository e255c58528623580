build2/src/train/engine_prefix.o: src/train/engine_prefix.c \
 src/train/engine_internal.h src/model/transformer.h \
 src/kernels/backend.h include/afinar.h src/kernels/ctx.h src/core/core.h \
 src/core/threadpool.h src/lora/lora.h src/kernels/train_ops.h \
 src/model/model.h src/formats/gguf.h src/formats/hf_config.h \
 src/formats/safetensors.h src/tokenizer/tokenizer.h \
 src/formats/lm_jsonl.h src/train/engine.h src/train/head.h
src/train/engine_internal.h:
src/model/transformer.h:
src/kernels/backend.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
src/lora/lora.h:
src/kernels/train_ops.h:
src/model/model.h:
src/formats/gguf.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/train/engine.h:
src/train/head.h:
