build2/src/core/cpu.o: src/core/cpu.c src/core/core.h include/afinar.h
src/core/core.h:
include/afinar.h:
