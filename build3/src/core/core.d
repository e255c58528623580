build3/src/core/core.o: src/core/core.c src/core/core.h include/afinar.h
src/core/core.h:
include/afinar.h:
