build3/src/kernels/cpu/matmul_avx2.o: src/kernels/cpu/matmul_avx2.c \
 src/kernels/cpu/kernels.h src/core/core.h include/afinar.h \
 src/kernels/cpu/matmul_internal.h src/kernels/cpu/matmul_unpack.h \
 src/kernels/quant.h src/core/blocks.h src/kernels/cpu/nf4_unpack.h \
 src/kernels/nf4.h
src/kernels/cpu/kernels.h:
src/core/core.h:
include/afinar.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/matmul_unpack.h:
src/kernels/quant.h:
src/core/blocks.h:
src/kernels/cpu/nf4_unpack.h:
src/kernels/nf4.h:
