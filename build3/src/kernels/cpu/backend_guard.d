build3/src/kernels/cpu/backend_guard.o: src/kernels/cpu/backend_guard.c \
 src/kernels/backend.h include/afinar.h src/kernels/ctx.h src/core/core.h \
 src/core/threadpool.h src/core/blocks.h src/kernels/train_ops.h
src/kernels/backend.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
src/core/blocks.h:
src/kernels/train_ops.h:
