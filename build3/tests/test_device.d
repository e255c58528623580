build3/tests/test_device: tests/test_device.c tests/testlib.h \
 tests/tinymodel.c tests/tinymodel.h include/afinar.h \
 src/formats/gguf_write.h src/core/core.h src/formats/gguf.h \
 src/kernels/quant.h src/core/blocks.h src/model/model.h \
 src/formats/hf_config.h src/formats/safetensors.h \
 src/tokenizer/tokenizer.h src/formats/lm_jsonl.h src/kernels/backend.h \
 src/kernels/ctx.h src/core/threadpool.h
tests/testlib.h:
tests/tinymodel.c:
tests/tinymodel.h:
include/afinar.h:
src/formats/gguf_write.h:
src/core/core.h:
src/formats/gguf.h:
src/kernels/quant.h:
src/core/blocks.h:
src/model/model.h:
src/formats/hf_config.h:
src/formats/safetensors.h:
src/tokenizer/tokenizer.h:
src/formats/lm_jsonl.h:
src/kernels/backend.h:
src/kernels/ctx.h:
src/core/threadpool.h:
