build2/src/lora/adapter_gguf.o: src/lora/adapter_gguf.c \
 src/lora/adapter_gguf.h src/formats/gguf.h src/core/core.h \
 include/afinar.h src/formats/gguf_write.h src/lora/adapter_io.h \
 src/formats/safetensors.h src/lora/lora.h src/kernels/train_ops.h \
 /usr/include/cjson/cJSON.h src/kernels/quant.h src/core/blocks.h
src/lora/adapter_gguf.h:
src/formats/gguf.h:
src/core/core.h:
include/afinar.h:
src/formats/gguf_write.h:
src/lora/adapter_io.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
src/kernels/quant.h:
src/core/blocks.h:
