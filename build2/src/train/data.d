build2/src/train/data.o: src/train/data.c src/train/data.h \
 src/formats/jsonl.h src/core/core.h include/afinar.h src/kernels/ctx.h \
 src/core/threadpool.h
src/train/data.h:
src/formats/jsonl.h:
src/core/core.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/threadpool.h:
