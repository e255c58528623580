build3/src/formats/lm_jsonl.o: src/formats/lm_jsonl.c \
 src/formats/lm_jsonl.h src/core/core.h include/afinar.h \
 src/core/fsutil.h src/formats/jsonl.h /usr/include/cjson/cJSON.h
src/formats/lm_jsonl.h:
src/core/core.h:
include/afinar.h:
src/core/fsutil.h:
src/formats/jsonl.h:
/usr/include/cjson/cJSON.h:
