build3/src/lora/adapter_model.o: src/lora/adapter_model.c \
 src/lora/adapter_io.h src/core/core.h include/afinar.h \
 src/formats/safetensors.h src/lora/lora.h src/kernels/train_ops.h \
 /usr/include/cjson/cJSON.h
src/lora/adapter_io.h:
src/core/core.h:
include/afinar.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
