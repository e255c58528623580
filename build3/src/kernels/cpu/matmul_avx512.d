build3/src/kernels/cpu/matmul_avx512.o: src/kernels/cpu/matmul_avx512.c \
 src/kernels/cpu/gemm_packed.h include/afinar.h \
 src/kernels/cpu/matmul_internal.h src/kernels/cpu/kernels.h \
 src/core/core.h src/kernels/cpu/matmul_unpack.h src/kernels/quant.h \
 src/core/blocks.h src/kernels/cpu/nf4_unpack.h src/kernels/nf4.h
src/kernels/cpu/gemm_packed.h:
include/afinar.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/kernels.h:
src/core/core.h:
src/kernels/cpu/matmul_unpack.h:
src/kernels/quant.h:
src/core/blocks.h:
src/kernels/cpu/nf4_unpack.h:
src/kernels/nf4.h:
