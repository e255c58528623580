build3/src/kernels/cpu/head_ops.o: src/kernels/cpu/head_ops.c \
 src/kernels/train_ops.h include/afinar.h src/kernels/ctx.h \
 src/core/core.h src/core/threadpool.h
src/kernels/train_ops.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
