build3/src/kernels/cpu/gemm_packed_avx512.o: \
 src/kernels/cpu/gemm_packed_avx512.c src/kernels/cpu/gemm_packed.h \
 include/afinar.h src/kernels/cpu/matmul_internal.h \
 src/kernels/cpu/kernels.h src/core/core.h
src/kernels/cpu/gemm_packed.h:
include/afinar.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/kernels.h:
src/core/core.h:
