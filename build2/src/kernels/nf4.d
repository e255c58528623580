build2/src/kernels/nf4.o: src/kernels/nf4.c src/kernels/nf4.h \
 src/core/blocks.h
src/kernels/nf4.h:
src/core/blocks.h:
