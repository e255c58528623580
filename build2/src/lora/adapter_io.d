build2/src/lora/adapter_io.o: src/lora/adapter_io.c src/lora/adapter_io.h \
 src/core/core.h include/afinar.h src/formats/safetensors.h \
 src/lora/lora.h src/kernels/train_ops.h /usr/include/cjson/cJSON.h \
 src/lora/adapter_gguf.h src/formats/gguf.h src/formats/gguf_write.h \
 src/core/fsutil.h
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
src/core/fsutil.h:
