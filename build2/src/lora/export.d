build2/src/lora/export.o: src/lora/export.c src/lora/export.h \
 src/lora/adapter_io.h src/core/core.h include/afinar.h \
 src/formats/safetensors.h src/lora/lora.h src/kernels/train_ops.h \
 /usr/include/cjson/cJSON.h src/lora/adapter_gguf.h src/formats/gguf.h \
 src/formats/gguf_write.h
src/lora/export.h:
src/lora/adapter_io.h:
src/core/core.h:
include/afinar.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
src/lora/adapter_gguf.h:
src/formats/gguf.h:
src/formats/gguf_write.h:
