build3/src/kernels/cpu/backend_cpu.o: src/kernels/cpu/backend_cpu.c \
 src/kernels/backend.h include/afinar.h src/kernels/ctx.h src/core/core.h \
 src/core/threadpool.h src/kernels/matmul.h src/kernels/ops.h \
 src/kernels/train_ops.h
src/kernels/backend.h:
include/afinar.h:
src/kernels/ctx.h:
src/core/core.h:
src/core/threadpool.h:
src/kernels/matmul.h:
src/kernels/ops.h:
src/kernels/train_ops.h:
