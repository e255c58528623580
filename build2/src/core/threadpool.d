build2/src/core/threadpool.o: src/core/threadpool.c src/core/threadpool.h \
 src/core/core.h include/afinar.h
src/core/threadpool.h:
src/core/core.h:
include/afinar.h:
