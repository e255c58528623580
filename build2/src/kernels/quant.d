build2/src/kernels/quant.o: src/kernels/quant.c src/kernels/quant.h \
 src/core/blocks.h src/core/core.h include/afinar.h src/kernels/nf4.h
src/kernels/quant.h:
src/core/blocks.h:
src/core/core.h:
include/afinar.h:
src/kernels/nf4.h:
