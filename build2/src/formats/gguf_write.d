build2/src/formats/gguf_write.o: src/formats/gguf_write.c \
 src/formats/gguf_write.h src/core/core.h include/afinar.h \
 src/formats/gguf.h src/core/blocks.h
src/formats/gguf_write.h:
src/core/core.h:
include/afinar.h:
src/formats/gguf.h:
src/core/blocks.h:
