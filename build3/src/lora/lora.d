build3/src/lora/lora.o: src/lora/lora.c src/lora/lora.h src/core/core.h \
 include/afinar.h src/kernels/train_ops.h src/kernels/ctx.h \
 src/core/threadpool.h
src/lora/lora.h:
src/core/core.h:
include/afinar.h:
src/kernels/train_ops.h:
src/kernels/ctx.h:
src/core/threadpool.h:
