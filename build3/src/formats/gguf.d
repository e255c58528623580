build3/src/formats/gguf.o: src/formats/gguf.c src/formats/gguf.h \
 src/core/core.h include/afinar.h src/core/fsutil.h src/core/blocks.h
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/core/fsutil.h:
src/core/blocks.h:
