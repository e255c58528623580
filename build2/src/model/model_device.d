build2/src/model/model_device.o: src/model/model_device.c \
 src/model/model.h src/formats/gguf.h src/core/core.h include/afinar.h \
 src/formats/hf_config.h src/formats/safetensors.h \
 src/tokenizer/tokenizer.h src/formats/lm_jsonl.h src/core/blocks.h \
 src/kernels/backend.h src/kernels/ctx.h src/core/threadpool.h
src/model/model.h:
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/core/blocks.h:
src/kernels/backend.h:
src/kernels/ctx.h:
src/core/threadpool.h:
