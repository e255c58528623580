build3/src/core/fsutil.o: src/core/fsutil.c src/core/fsutil.h \
 src/core/core.h include/afinar.h
src/core/fsutil.h:
src/core/core.h:
include/afinar.h:
