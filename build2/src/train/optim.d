build2/src/train/optim.o: src/train/optim.c src/train/optim.h \
 include/afinar.h src/kernels/train_ops.h
src/train/optim.h:
include/afinar.h:
src/kernels/train_ops.h:
