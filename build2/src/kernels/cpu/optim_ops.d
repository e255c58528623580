build2/src/kernels/cpu/optim_ops.o: src/kernels/cpu/optim_ops.c \
 src/kernels/train_ops.h include/afinar.h src/kernels/ctx.h \
 src/core/core.h src/core/threadpool.h
src/kernels/train_ops.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
