build2/src/core/blocks.o: src/core/blocks.c src/core/blocks.h \
 src/core/core.h include/afinar.h
src/core/blocks.h:
src/core/core.h:
include/afinar.h:
