# afinar — build
#   make              library (static + shared) and the CLI in build/
#   make test         build and run every test program, $(JOBS) at a time (default: the number of
#                     CPUs), then print "N passed, N failed, N skipped" and the wall time
#   make sanitize     the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-san/)
#   make install PREFIX=/usr/local   headers (afinar.h, afinar_app.h), libs, afinar.pc, CLI
#   make bench        decode/prompt benchmarks (needs models/ and .venv-bench, see bench/README.md)
#   make check-llamacpp  export/merge cross-checks against llama.cpp (builds .venv-llamacpp once)
#   make test-python  the Python package's pytest suite and examples (python/, docs/PYTHON.md)
#   make device-kit   build/device-kit/: the Vulkan tests and GPU benchmarks for a bare GPU machine,
#                     run there with its run.sh in one call (docs/VULKAN.md "Device kit")
# Options: DEBUG=1 builds -O0 -g; BUILD=dir changes the build folder. Threads: the library's own
# worker pool (src/core/threadpool.c, POSIX threads); OpenMP is not used.

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
DEBUG   ?= 0

PKGS       := libpcre2-8 libcjson nettle libutf8proc yaml-0.1
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lpcre2-8 -lcjson -lnettle -lutf8proc -lyaml) -lcsv

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT     := -O2
ifeq ($(DEBUG),1)
OPT     := -O0 -g
endif
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -g -fPIC -Iinclude -Isrc $(PKG_CFLAGS)
# libafinar.so exports only the functions include/afinar.h and include/afinar_app.h mark AF_API
# (tests/check_exports.sh checks it); everything else stays internal to the library.
CFLAGS_BASE += -fvisibility=hidden
# Header dependencies written by the compiler next to each output (FILE.d): every header a source
# includes, directly or not (cli/*.h and tests/*.h included); -MP adds an empty rule per header so a
# deleted header does not stop the build. An output whose dependency file is missing (built by an
# older Makefile, or the file was removed) is rebuilt: it depends on FILE.d, which an empty rule
# "makes" when absent.
DEPFLAGS    := -MMD -MP

# Version (from include/afinar.h, the one place it is written) and the shared library's names:
# libafinar.so -> libafinar.so.MAJOR (the SONAME) -> libafinar.so.MAJOR.MINOR.PATCH (the file).
VERSION_PART = $(shell sed -n 's/^\#define AF_VERSION_$(1) *\([0-9]*\).*/\1/p' include/afinar.h)
VERSION  := $(call VERSION_PART,MAJOR).$(call VERSION_PART,MINOR).$(call VERSION_PART,PATCH)
SOMAJOR  := $(call VERSION_PART,MAJOR)
SONAME   := libafinar.so.$(SOMAJOR)
SOFILE   := libafinar.so.$(VERSION)
# Test programs run at the same time by `make test` (each is one process; pool threads inside).
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)

# MPI (optional; data-parallel `mpirun -np N afinar train`): Open MPI from Debian (libopenmpi-dev,
# pkg-config ompi-c). Found: src/train/dist_mpi.c is built and linked with it; not found or MPI=0:
# src/train/dist_none.c (one process; `afinar --help` says MPI is not built in).
MPI ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c)
MPI_LIBS   := $(shell pkg-config --libs ompi-c)
DIST_SKIP  := src/train/dist_none.c
else
MPI_CFLAGS :=
MPI_LIBS   :=
DIST_SKIP  := src/train/dist_mpi.c
endif

# libmicrohttpd (optional; `afinar serve`): Debian libmicrohttpd-dev (pkg-config libmicrohttpd). Found:
# src/serve/http.c is built and linked with it; not found or SERVE=0: src/serve/http_none.c (`afinar
# serve` says it is not built in).
SERVE ?= $(shell pkg-config --exists libmicrohttpd 2>/dev/null && echo 1 || echo 0)
ifeq ($(SERVE),1)
MHD_CFLAGS := $(shell pkg-config --cflags libmicrohttpd)
MHD_LIBS   := $(shell pkg-config --libs libmicrohttpd)
SERVE_SKIP := src/serve/http_none.c
else
MHD_CFLAGS :=
MHD_LIBS   :=
SERVE_SKIP := src/serve/http.c
endif

# Vulkan (optional; `--device vulkan`): the headers (libvulkan-dev, pkg-config vulkan) and glslc (shaderc)
# at build time. Found: src/kernels/vulkan/*.c are built, the shaders of src/kernels/vulkan/shaders are
# compiled to SPIR-V and embedded (scripts/vk_shaders.sh -> $(BUILD)/gen), and the loader
# (libvulkan.so.1) is opened at run time (dlopen), so the binary starts without it. Not found, or
# VULKAN=0: src/kernels/vulkan/vk_none.c (every Vulkan entry point says it is not built in).
GLSLC  ?= glslc
VULKAN ?= $(shell pkg-config --exists vulkan 2>/dev/null && command -v $(GLSLC) >/dev/null 2>&1 && echo 1 || echo 0)
VK_DIR := src/kernels/vulkan
ifeq ($(VULKAN),1)
VK_SKIP   := $(VK_DIR)/vk_none.c
VK_CFLAGS := $(shell pkg-config --cflags vulkan) -I$(BUILD)/gen
VK_DEFS   := -DAF_HAVE_VULKAN
VK_GEN_OBJ := $(BUILD)/gen/vk_shaders.o
VK_LIBS   := -ldl
else
VK_SKIP   := $(filter-out $(VK_DIR)/vk_none.c,$(wildcard $(VK_DIR)/*.c))
VK_CFLAGS :=
VK_DEFS   :=
VK_GEN_OBJ :=
VK_LIBS   :=
endif

CFLAGS  := $(CFLAGS_BASE) $(VK_DEFS) $(EXTRA_CFLAGS)
LDLIBS  := $(PKG_LIBS) $(MPI_LIBS) $(MHD_LIBS) $(VK_LIBS) -lm -lpthread $(EXTRA_LDFLAGS)

LIB_SRC  := $(filter-out $(DIST_SKIP) $(SERVE_SKIP) $(VK_SKIP),$(sort $(shell find src -name '*.c')))
# The web page of `afinar serve` (src/serve/web/*: HTML, JS, CSS) embedded as a C table.
WEB_ASSETS := $(sort $(wildcard src/serve/web/*))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(VK_GEN_OBJ) $(BUILD)/gen/web_assets.o
CLI_SRC  := $(sort $(wildcard cli/*.c))
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON := $(BUILD)/tests/testlib.o
# Scripts run by `make test` beside the test binaries (same RESULT line protocol).
TEST_SCRIPTS := tests/check_layers.sh tests/check_serve_clients.sh tests/check_serve_load.sh tests/check_cli_doc.sh \
                tests/check_exports.sh tests/check_architecture_doc.sh tests/check_web_ui.sh
TEST_SCRIPTS += tests/check_pref_cli.sh
TEST_SCRIPTS += tests/check_scaling.sh
TEST_SCRIPTS += tests/check_cpu_suite.sh
# The longest test programs start first, so that running JOBS at a time ends sooner.
TEST_SLOW  := $(addprefix $(BUILD)/tests/,test_vulkan_model test_vulkan_cli test_model test_peft_lm_parity test_dist test_trainer test_kill test_engine test_peft_parity test_lm_train)
TEST_ORDER := tests/check_web_ui.sh $(foreach t,$(TEST_SLOW),$(filter $(t),$(TEST_BIN))) $(filter-out $(TEST_SLOW),$(TEST_BIN)) \
              $(filter-out tests/check_web_ui.sh,$(TEST_SCRIPTS))

.PHONY: all lib cli test tests sanitize install clean probe print-ldlibs bench check-llamacpp cli-doc test-python \
        device-kit
all: probe lib cli

# The link flags of a program that links build/libafinar.a (the reference scripts in tests/ref/
# and bench/ build small C programs against it): `make -s print-ldlibs`.
print-ldlibs:
	@echo '$(LDLIBS)'

probe:
	@printf 'afinar build: C compiler %s; PCRE2 %s; cJSON %s; Nettle (SHA-256) %s; utf8proc %s\n' "$$($(CC) -dumpversion)" \
	  "$$(pkg-config --exists libpcre2-8 && echo '✓' || echo '✗ (apt-get install libpcre2-dev)')" \
	  "$$(pkg-config --exists libcjson && echo '✓' || echo '✗ (apt-get install libcjson-dev)')" \
	  "$$(pkg-config --exists nettle && echo '✓' || echo '✗ (apt-get install nettle-dev)')" \
	  "$$(pkg-config --exists libutf8proc && echo '✓' || echo '✗ (apt-get install libutf8proc-dev)')"
	@printf 'afinar build: libmicrohttpd (afinar serve) %s\n' \
	  "$$([ '$(SERVE)' = 1 ] && echo "✓ $$(pkg-config --modversion libmicrohttpd)" || echo '✗ (apt-get install libmicrohttpd-dev; or SERVE=0 was given)')"
	@printf 'afinar build: MPI (mpirun -np N afinar train) %s\n' \
	  "$$([ '$(MPI)' = 1 ] && echo "✓ Open MPI $$(pkg-config --modversion ompi-c)" || echo '✗ (apt-get install libopenmpi-dev openmpi-bin; or MPI=0 was given)')"
	@printf 'afinar build: Vulkan (--device vulkan) %s\n' \
	  "$$([ '$(VULKAN)' = 1 ] && echo "✓ headers $$(pkg-config --modversion vulkan), $$($(GLSLC) --version | head -n 1)" || echo '✗ (apt-get install libvulkan-dev glslc mesa-vulkan-drivers; or VULKAN=0 was given)')"

lib: $(BUILD)/libafinar.a $(BUILD)/libafinar.so
cli: $(BUILD)/afinar

# Compiler and flags of this build folder: the stamp is rewritten only when they change, and every
# object depends on it, so a changed flag (e.g. -fvisibility, EXTRA_CFLAGS) rebuilds everything.
FLAGS_STAMP := $(BUILD)/.cflags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(LDLIBS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(LDLIBS)' > $@
.PHONY: FORCE
FORCE:

$(BUILD)/%.o: %.c $(BUILD)/%.d $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# Only the MPI transport sees the MPI headers; only the HTTP glue sees libmicrohttpd's.
$(BUILD)/src/train/dist_mpi.o: CFLAGS += $(MPI_CFLAGS)
$(BUILD)/src/serve/http.o: CFLAGS += $(MHD_CFLAGS)

# The Vulkan backend: its files see the Vulkan headers and the generated shader ids; the SPIR-V of
# every shader variant is compiled (in parallel) and embedded when a shader or the list changes.
ifeq ($(VULKAN),1)
VK_SHADER_DEPS := $(wildcard $(VK_DIR)/shaders/*.comp $(VK_DIR)/shaders/*.glsl) $(VK_DIR)/shaders/shaders.list scripts/vk_shaders.sh
$(BUILD)/gen/vk_shaders.c $(BUILD)/gen/vk_shader_ids.h &: $(VK_SHADER_DEPS)
	@mkdir -p $(BUILD)/gen
	sh scripts/vk_shaders.sh $(VK_DIR)/shaders $(BUILD)/gen $(GLSLC)
$(BUILD)/gen/vk_shaders.o: $(BUILD)/gen/vk_shaders.c $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@
$(patsubst %.c,$(BUILD)/%.o,$(filter $(VK_DIR)/%,$(LIB_SRC))): CFLAGS += $(VK_CFLAGS)
$(patsubst %.c,$(BUILD)/%.o,$(filter $(VK_DIR)/%,$(LIB_SRC))): $(BUILD)/gen/vk_shader_ids.h
endif

$(BUILD)/gen/web_assets.c: $(WEB_ASSETS) scripts/embed_assets.sh
	@mkdir -p $(BUILD)/gen
	sh scripts/embed_assets.sh $@ $(WEB_ASSETS)
$(BUILD)/gen/web_assets.o: $(BUILD)/gen/web_assets.c $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libafinar.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/$(SOFILE): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LDLIBS)

$(BUILD)/$(SONAME): $(BUILD)/$(SOFILE)
	ln -sf $(SOFILE) $@

$(BUILD)/libafinar.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(BUILD)/afinar: $(CLI_OBJ) $(BUILD)/libafinar.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libafinar.a $(LDLIBS)

$(BUILD)/tests/testlib.o: tests/testlib.c $(BUILD)/tests/testlib.d $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -Itests -c $< -o $@

# Compiled and linked in one step: the dependency file is named and targeted explicitly.
$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libafinar.a $(BUILD)/tests/%.d $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -Itests -o $@ $< $(TEST_COMMON) $(BUILD)/libafinar.a $(LDLIBS)

tests: $(TEST_BIN) $(BUILD)/afinar

# Runs every test program from the repository root, $(JOBS) at a time; each prints its own checks
# (in one block per program) and the runner prints the closing "N passed, N failed, N skipped" line
# over all of them and the wall time. tests/check_layers.sh checks the layering (includes and calls),
# tests/check_exports.sh the exported symbols, tests/check_architecture_doc.sh that
# docs/ARCHITECTURE.md names every source file.
test: tests
	@AFINAR_BIN=$(BUILD)/afinar JOBS=$(JOBS) sh tests/run_all.sh $(TEST_ORDER)

SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# AF_TEST_SANITIZE=1 (in the environment of every test process) makes the slow tests do less of the
# same work (tests/testlib.h tl_sanitized); LeakSanitizer is on (detect_leaks=1, also ASan's default
# on x86-64 Linux; a leak fails the test binary through its exit status). Extra ASAN_OPTIONS /
# UBSAN_OPTIONS from the caller are appended (later options win).
sanitize:
	AF_TEST_SANITIZE=1 ASAN_OPTIONS="detect_leaks=1$${ASAN_OPTIONS:+:$$ASAN_OPTIONS}" \
	  UBSAN_OPTIONS="print_stacktrace=1$${UBSAN_OPTIONS:+:$$UBSAN_OPTIONS}" \
	  $(MAKE) BUILD=build-san EXTRA_CFLAGS="$(SAN_FLAGS) -O1" EXTRA_LDFLAGS="$(SAN_FLAGS)" test

install: lib cli
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/afinar.h include/afinar_app.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libafinar.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/$(SOFILE) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SOFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libafinar.so
	install -m 755 $(BUILD)/afinar $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	  -e 's|@LIBS@|$(PKG_LIBS) $(MPI_LIBS) $(MHD_LIBS) $(VK_LIBS) -lm -lpthread|g' afinar.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/afinar.pc

# libFuzzer targets (clang): make fuzz [FUZZ_SECONDS=60]; defined in tests/fuzz/fuzz.mk
-include tests/fuzz/fuzz.mk

bench: all
	bash bench/run_decode.sh

# The device kit (bench/kit/make_kit.sh, docs/VULKAN.md "Device kit"): build/device-kit/, the binary,
# the Vulkan test programs (built without MPI in build/kit-obj, rpath $$ORIGIN/lib), their libraries,
# the Vulkan loader packages, a 38 MiB SmolLM2 cut, fixtures, a BBC slice and run.sh.
device-kit:
	bash bench/kit/make_kit.sh

# llama.cpp cross-checks of `afinar export` / `afinar merge` (tests/ref/llamacpp_adapter_check.py):
# builds llama-cpp-python into $(LLAMACPP_VENV) once (scripts/setup_llamacpp.sh, portable build),
# then runs the checks on the models in models/. Skips (exit 0, with a message) when the build fails.
# Also the tiny qwen2/qwen3 GGUFs against transformers' logits (tests/ref/check_qwen_llamacpp.py), and
# the tiny gemma4 GGUF and `afinar convert`'s GGUFs of the tiny HF directories (and SmolLM2's when
# models/SmolLM2-135M-Instruct-hf exists) in llama.cpp (tests/ref/check_convert_llamacpp.py).
# LLAMACPP_BUILD_TIMEOUT (s) bounds the build so CI stays within its time budget (a skip, not a hang).
LLAMACPP_VENV ?= .venv-llamacpp
LLAMACPP_BUILD_TIMEOUT ?= 1500
check-llamacpp: lib cli
	@if timeout $(LLAMACPP_BUILD_TIMEOUT) bash scripts/setup_llamacpp.sh $(LLAMACPP_VENV); then \
	  $(LLAMACPP_VENV)/bin/python tests/ref/check_qwen_llamacpp.py && \
	  $(LLAMACPP_VENV)/bin/python tests/ref/check_convert_llamacpp.py --afinar $(BUILD)/afinar && \
	  $(LLAMACPP_VENV)/bin/python tests/ref/llamacpp_adapter_check.py --afinar $(BUILD)/afinar \
	    --results $(BUILD)/llamacpp_adapter_check.json; \
	else echo "SKIP check-llamacpp: llama-cpp-python could not be built within $(LLAMACPP_BUILD_TIMEOUT) s (log: $(LLAMACPP_VENV)/llama_build.log)"; fi

clean:
	rm -rf build build-san build-fuzz

# The compiler-written header dependencies of everything built so far (none on a clean tree).
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_COMMON:.o=.d) $(TEST_BIN:=.d)

# Dependency files: an empty rule so a missing one marks its output out of date (see DEPFLAGS).
$(BUILD)/%.d: ;
.PRECIOUS: $(BUILD)/%.d

# docs/CLI.md from the help texts of the built binary (tests/check_cli_doc.sh fails when it is stale).
cli-doc: $(BUILD)/afinar
	sh scripts/gen_cli_doc.sh $(BUILD)/afinar docs/CLI.md

# The Python package (python/): pytest suite and examples over $(BUILD)/libafinar.so in the venv
# .venv-python (made once); `scripts/test_python.sh --fresh` tests a fresh `pip install ./python`.
test-python: lib cli
	BUILD=$(BUILD) bash scripts/test_python.sh

# The grammar mask's cost per decode step on a model's vocabulary (bench/bench_grammar.c,
# bench/results/grammar_mask.md): make build/bench_grammar
$(BUILD)/bench_grammar: bench/bench_grammar.c $(BUILD)/libafinar.a $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libafinar.a $(LDLIBS)

# STREAM-like read bandwidth (bench/stream_read.c): the decode weight-bandwidth floor of
# bench/cpu_suite.sh; built by `make bench` or `make build/bench/stream_read`.
$(BUILD)/bench/stream_read: bench/stream_read.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -o $@ $< -lpthread
bench: $(BUILD)/bench/stream_read

# The CPU's measured FLOP peak and afinar's GEMM-shaped kernels at a SmolLM2 training shape
# (bench/peak_flops.c; the MFU denominators of bench/train_vs_peft and bench/cpu_suite.sh, which
# build it the same way): make build/bench/peak_flops (rebuilt when the library changes)
$(BUILD)/bench/peak_flops: bench/peak_flops.c $(BUILD)/libafinar.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fopenmp -DAF_LINKED -o $@ $< $(BUILD)/libafinar.a $(LDLIBS)

# Agreement of the int8-activation decode with the exact one on held-out prompts
# (bench/decode_agree.c, bench/decode_agreement.sh): make build/bench/decode_agree
$(BUILD)/bench/decode_agree: bench/decode_agree.c $(BUILD)/libafinar.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libafinar.a $(LDLIBS)
