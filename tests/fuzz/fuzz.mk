# libFuzzer targets (clang). Included by the top Makefile.
#   make fuzz-build                  build every target into build-fuzz/
#   make fuzz [FUZZ_SECONDS=60]      build, then run each target for FUZZ_SECONDS on a copy of its
#                                    seed corpus; non-zero exit if any target finds a crash/leak
#   make fuzz FUZZ_TARGETS=gguf      only some targets
# Library sources are compiled with clang -fsanitize=fuzzer-no-link,address,undefined; targets link with -fsanitize=fuzzer,address,undefined. See tests/fuzz/README.md.

FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= gguf safetensors jsonl tok_bpe tok_spm adapter gguf_tok lm_jsonl hf_config tok_json manifest serve_req chat csv yaml grammar tool_stream
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := $(CFLAGS_BASE) -O1 -g $(FUZZ_SAN) -Wno-unknown-pragmas
# Only the modules the targets reach (the parsers and what they call); the kernels, model and
# training code are not needed and are slow to build under the sanitizers.
FUZZ_LIB_SRC := $(filter src/core/% src/formats/% src/tokenizer/% src/lora/adapter_io.c src/lora/adapter_load.c src/lora/adapter_gguf.c src/lora/lora.c src/lora/dora.c \
                  src/kernels/quant.c src/kernels/quantize.c src/kernels/nf4.c src/serve/request.c src/serve/grammar.c src/serve/tools.c \
                  src/train/settings.c src/train/settings_table.c src/train/settings_yaml.c src/train/optim.c \
                  src/infer/sample.c,$(LIB_SRC))
# The grammar's mask over an indexed vocabulary and the streamed tool calls (serve).
FUZZ_LIB_SRC += $(filter src/serve/grammar_mask.c src/serve/tool_stream.c,$(LIB_SRC))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/libafinar-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libafinar-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -Itests -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libafinar-fuzz.a \
	  $(PKG_LIBS) -lm -lpthread

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_BINS:=.d)

fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run_fuzz.sh $(FUZZ_TARGETS)
