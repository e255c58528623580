build2/src/kernels/ctx.o: src/kernels/ctx.c src/kernels/ctx.h \
 include/afinar.h src/core/core.h src/core/threadpool.h src/core/blocks.h \
 src/kernels/backend.h src/kernels/cpu/kernels.h \
 src/kernels/cpu/matmul_internal.h src/kernels/matmul.h
src/kernels/ctx.h:
include/afinar.h:
src/core/core.h:
src/core/threadpool.h:
src/core/blocks.h:
src/kernels/backend.h:
src/kernels/cpu/kernels.h:
src/kernels/cpu/matmul_internal.h:
src/kernels/matmul.h:
