build3/src/kernels/cpu/gemm_packed.o: src/kernels/cpu/gemm_packed.c \
 src/kernels/cpu/gemm_packed.h include/afinar.h \
 src/kernels/cpu/matmul_internal.h src/core/core.h src/kernels/ctx.h \
 src/core/threadpool.h src/kernels/cpu/kernels.h src/kernels/quant.h \
 src/core/blocks.h
src/kernels/cpu/gemm_packed.h:
include/afinar.h:
src/kernels/cpu/matmul_internal.h:
src/core/core.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/kernels/cpu/kernels.h:
src/kernels/quant.h:
src/core/blocks.h:
