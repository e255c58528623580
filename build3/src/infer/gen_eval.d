build3/src/infer/gen_eval.o: src/infer/gen_eval.c src/infer/session.h \
 src/lora/lora.h src/core/core.h include/afinar.h src/kernels/train_ops.h \
 src/formats/lm_jsonl.h src/tokenizer/tokenizer.h src/formats/gguf.h \
 /usr/include/cjson/cJSON.h
src/infer/session.h:
src/lora/lora.h:
src/core/core.h:
include/afinar.h:
src/kernels/train_ops.h:
src/formats/lm_jsonl.h:
src/tokenizer/tokenizer.h:
src/formats/gguf.h:
/usr/include/cjson/cJSON.h:
