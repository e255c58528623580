build3/src/infer/sample.o: src/infer/sample.c src/core/core.h \
 include/afinar.h
src/core/core.h:
include/afinar.h:
