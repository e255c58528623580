build3/src/kernels/backend.o: src/kernels/backend.c src/kernels/backend.h \
 include/afinar.h src/kernels/ctx.h src/core/core.h src/core/threadpool.h
src/kernels/backend.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
