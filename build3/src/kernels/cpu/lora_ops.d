build3/src/kernels/cpu/lora_ops.o: src/kernels/cpu/lora_ops.c \
 src/kernels/train_ops.h include/afinar.h src/core/core.h \
 src/kernels/ctx.h src/core/threadpool.h src/kernels/matmul.h
src/kernels/train_ops.h:
include/afinar.h:
src/core/core.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/kernels/matmul.h:
