build2/src/tokenizer/bpe.o: src/tokenizer/bpe.c \
 src/tokenizer/tok_internal.h src/tokenizer/tokenizer.h \
 src/formats/gguf.h src/core/core.h include/afinar.h \
 src/formats/lm_jsonl.h
src/tokenizer/tok_internal.h:
src/tokenizer/tokenizer.h:
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/formats/lm_jsonl.h:
