build3/src/train/api.o: src/train/api.c include/afinar.h src/core/core.h \
 src/kernels/backend.h src/kernels/ctx.h src/core/threadpool.h \
 src/lora/adapter_io.h src/formats/safetensors.h src/lora/lora.h \
 src/kernels/train_ops.h /usr/include/cjson/cJSON.h src/model/model.h \
 src/formats/gguf.h src/formats/hf_config.h src/tokenizer/tokenizer.h \
 src/formats/lm_jsonl.h src/train/api_internal.h src/train/engine.h \
 src/model/transformer.h src/train/head.h src/train/optim.h
include/afinar.h:
src/core/core.h:
src/kernels/backend.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/lora/adapter_io.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
src/model/model.h:
src/formats/gguf.h:
src/formats/hf_config.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/train/api_internal.h:
src/train/engine.h:
src/model/transformer.h:
src/train/head.h:
src/train/optim.h:
