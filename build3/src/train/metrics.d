build3/src/train/metrics.o: src/train/metrics.c src/train/metrics.h \
 src/core/core.h include/afinar.h /usr/include/cjson/cJSON.h
src/train/metrics.h:
src/core/core.h:
include/afinar.h:
/usr/include/cjson/cJSON.h:
