build2/src/model/hf_describe.o: src/model/hf_describe.c include/afinar.h \
 src/formats/hf_config.h src/core/core.h src/formats/safetensors.h \
 src/tokenizer/tokenizer.h src/formats/gguf.h src/formats/lm_jsonl.h
include/afinar.h:
src/formats/hf_config.h:
src/core/core.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/gguf.h:
src/formats/lm_jsonl.h:
