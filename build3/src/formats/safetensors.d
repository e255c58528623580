build3/src/formats/safetensors.o: src/formats/safetensors.c \
 src/formats/safetensors.h src/core/core.h include/afinar.h \
 src/core/fsutil.h /usr/include/cjson/cJSON.h
src/formats/safetensors.h:
src/core/core.h:
include/afinar.h:
src/core/fsutil.h:
/usr/include/cjson/cJSON.h:
