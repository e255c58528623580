build3/src/formats/jsonl.o: src/formats/jsonl.c src/formats/jsonl.h \
 src/core/core.h include/afinar.h src/core/fsutil.h \
 /usr/include/cjson/cJSON.h
src/formats/jsonl.h:
src/core/core.h:
include/afinar.h:
src/core/fsutil.h:
/usr/include/cjson/cJSON.h:
