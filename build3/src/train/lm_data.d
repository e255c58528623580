build3/src/train/lm_data.o: src/train/lm_data.c src/train/data.h \
 src/formats/jsonl.h src/core/core.h include/afinar.h \
 src/formats/lm_jsonl.h src/kernels/ctx.h src/core/threadpool.h \
 src/tokenizer/tokenizer.h src/formats/gguf.h
src/train/data.h:
src/formats/jsonl.h:
src/core/core.h:
include/afinar.h:
src/formats/lm_jsonl.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/tokenizer/tokenizer.h:
src/formats/gguf.h:
