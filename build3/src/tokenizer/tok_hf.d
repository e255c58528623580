build3/src/tokenizer/tok_hf.o: src/tokenizer/tok_hf.c \
 src/tokenizer/tok_internal.h src/tokenizer/tokenizer.h \
 src/formats/gguf.h src/core/core.h include/afinar.h \
 src/formats/lm_jsonl.h src/formats/hf_config.h src/formats/safetensors.h \
 /usr/include/cjson/cJSON.h
src/tokenizer/tok_internal.h:
src/tokenizer/tokenizer.h:
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/formats/lm_jsonl.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
/usr/include/cjson/cJSON.h:
