build3/src/train/settings.o: src/train/settings.c src/train/optim.h \
 include/afinar.h src/kernels/train_ops.h src/core/core.h \
 src/core/fsutil.h /usr/include/cjson/cJSON.h
src/train/optim.h:
include/afinar.h:
src/kernels/train_ops.h:
src/core/core.h:
src/core/fsutil.h:
/usr/include/cjson/cJSON.h:
