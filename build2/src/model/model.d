build2/src/model/model.o: src/model/model.c src/model/model.h \
 src/formats/gguf.h src/core/core.h include/afinar.h \
 src/formats/hf_config.h src/formats/safetensors.h \
 src/tokenizer/tokenizer.h src/formats/lm_jsonl.h src/kernels/ctx.h \
 src/core/threadpool.h src/kernels/quant.h src/core/blocks.h
src/model/model.h:
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/kernels/quant.h:
src/core/blocks.h:
