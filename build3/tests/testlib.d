build3/tests/testlib.o: tests/testlib.c tests/testlib.h src/kernels/ctx.h \
 include/afinar.h src/core/core.h src/core/threadpool.h
tests/testlib.h:
src/kernels/ctx.h:
include/afinar.h:
src/core/core.h:
src/core/threadpool.h:
