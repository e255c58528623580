build2/src/kernels/cpu/matmul.o: src/kernels/cpu/matmul.c \
 src/kernels/matmul.h include/afinar.h src/core/core.h src/kernels/ctx.h \
 src/core/threadpool.h src/kernels/cpu/gemm_packed.h \
 src/kernels/cpu/matmul_internal.h src/kernels/cpu/kernels.h \
 src/kernels/quant.h src/core/blocks.h
src/kernels/matmul.h:
include/afinar.h:
src/core/core.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/kernels/cpu/gemm_packed.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/kernels.h:
src/kernels/quant.h:
src/core/blocks.h:
