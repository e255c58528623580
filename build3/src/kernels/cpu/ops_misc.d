build3/src/kernels/cpu/ops_misc.o: src/kernels/cpu/ops_misc.c \
 src/kernels/ops.h include/afinar.h src/core/blocks.h \
 src/core/threadpool.h src/core/core.h src/kernels/ctx.h \
 src/kernels/matmul.h src/kernels/quant.h
src/kernels/ops.h:
include/afinar.h:
src/core/blocks.h:
src/core/threadpool.h:
src/core/core.h:
src/kernels/ctx.h:
src/kernels/matmul.h:
src/kernels/quant.h:
