build2/src/formats/hf_config.o: src/formats/hf_config.c \
 src/formats/hf_config.h src/core/core.h include/afinar.h \
 src/formats/safetensors.h src/core/fsutil.h /usr/include/cjson/cJSON.h
src/formats/hf_config.h:
src/core/core.h:
include/afinar.h:
src/formats/safetensors.h:
src/core/fsutil.h:
/usr/include/cjson/cJSON.h:
