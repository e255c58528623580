build3/src/infer/text_metrics.o: src/infer/text_metrics.c src/core/core.h \
 include/afinar.h
src/core/core.h:
include/afinar.h:
