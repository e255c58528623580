build2/src/lora/merge.o: src/lora/merge.c include/afinar.h \
 src/core/core.h src/formats/gguf.h src/formats/gguf_write.h \
 src/kernels/quant.h src/core/blocks.h src/lora/adapter_gguf.h \
 src/lora/adapter_io.h src/formats/safetensors.h src/lora/lora.h \
 src/kernels/train_ops.h /usr/include/cjson/cJSON.h src/lora/export.h
include/afinar.h:
src/core/core.h:
src/formats/gguf.h:
src/formats/gguf_write.h:
src/kernels/quant.h:
src/core/blocks.h:
src/lora/adapter_gguf.h:
src/lora/adapter_io.h:
src/formats/safetensors.h:
src/lora/lora.h:
src/kernels/train_ops.h:
/usr/include/cjson/cJSON.h:
src/lora/export.h:
