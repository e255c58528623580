build2/src/infer/session.o: src/infer/session.c src/infer/session.h \
 src/lora/lora.h src/core/core.h include/afinar.h src/kernels/train_ops.h \
 src/kernels/backend.h src/kernels/ctx.h src/core/threadpool.h \
 src/lora/adapter_io.h src/formats/safetensors.h \
 /usr/include/cjson/cJSON.h src/model/transformer.h src/model/model.h \
 src/formats/gguf.h src/formats/hf_config.h src/tokenizer/tokenizer.h \
 src/formats/lm_jsonl.h
src/infer/session.h:
src/lora/lora.h:
src/core/core.h:
include/afinar.h:
src/kernels/train_ops.h:
src/kernels/backend.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/lora/adapter_io.h:
src/formats/safetensors.h:
/usr/include/cjson/cJSON.h:
src/model/transformer.h:
src/model/model.h:
src/formats/gguf.h:
src/formats/hf_config.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
