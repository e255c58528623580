build2/src/kernels/cpu/ops.o: src/kernels/cpu/ops.c src/kernels/ops.h \
 include/afinar.h src/core/core.h src/kernels/ctx.h src/core/threadpool.h \
 src/kernels/cpu/kernels.h src/kernels/cpu/matmul_internal.h \
 src/kernels/cpu/vexp.h
src/kernels/ops.h:
include/afinar.h:
src/core/core.h:
src/kernels/ctx.h:
src/core/threadpool.h:
src/kernels/cpu/kernels.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/cpu/vexp.h:
