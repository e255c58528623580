build3/src/lora/adapter_merge.o: src/lora/adapter_merge.c \
 src/lora/adapter_io.h src/core/core.h include/afinar.h \
 src/formats/safetensors.h src/lora/lora.h src/kernels/train_ops.h \
 /usr/include/cjson/cJSON.h src/lora/svd.h src/core/fsutil.h \
 src/core/threadpool.h
src/lora/adapter_io.h:
src/core/core.h:
include/afinar.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
src/lora/svd.h:
src/core/fsutil.h:
src/core/threadpool.h:
