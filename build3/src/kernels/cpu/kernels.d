build3/src/kernels/cpu/kernels.o: src/kernels/cpu/kernels.c \
 src/kernels/cpu/kernels.h src/core/core.h include/afinar.h \
 src/kernels/cpu/matmul_internal.h src/kernels/cpu/attention_gemm.h \
 src/kernels/cpu/gemm_packed.h
src/kernels/cpu/kernels.h:
src/core/core.h:
include/afinar.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/attention_gemm.h:
src/kernels/cpu/gemm_packed.h:
