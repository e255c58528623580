build3/src/formats/gguf_describe.o: src/formats/gguf_describe.c \
 src/formats/gguf.h src/core/core.h include/afinar.h src/core/blocks.h
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/core/blocks.h:
