# tensord: plain Makefile. Optional parts switch with variables:
#   CUDA=auto|yes|no               build the CUDA backend (headers only; libcuda is dlopen'ed at run time)
#   CUDA_PATH=/usr/local/cuda      where cuda.h is looked for first (CUDA_INCLUDE=DIR: only there)
#   SANITIZER=address,undefined    build with sanitizers (into their own BUILD dir by default)
#   CI=true                        adds -Werror
#   V=1                            print full compiler lines (default: "CC build/obj/x.o")
#   PREFIX=/usr/local DESTDIR=     install locations
#   PORT=8077 or LISTEN=ADDR:PORT  where `make run` serves
VERSION    := 0.1.0
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR    ?=
CC         ?= cc
CLANG      ?= clang
SYS_PYTHON ?= /usr/bin/python3
# The tests' interpreter: Debian's python3 in a virtual environment that adds
# the pinned packages of tests/requirements.txt (made by `make deps`).
VENV       ?= .venv
PYTHON     ?= $(VENV)/bin/python
CUDA       ?= auto
CUDA_PATH  ?= /usr/local/cuda
SANITIZER  ?=
FUZZ_SECONDS ?= 10
.DEFAULT_GOAL := all

ifeq ($(SANITIZER),)
BUILD      ?= build
else
BUILD      ?= build/san-$(subst $(comma),-,$(SANITIZER))
endif
comma := ,

# The daemon's and the client's libraries (pkg-config names).
PKGS       := libmicrohttpd liburing libcrypto yaml-0.1 libcurl zlib
# jansson reads JSON in the tests only: the oracle the daemon's own parsers
# and writers are compared with (tests/ref/, and the unit tests and fuzz
# targets that include it). Nothing the daemon or the client links uses it.
TEST_PKGS  := jansson

# The oldest library versions the sources need, checked by `make config`
# (README "Building" says why each): liburing 2.2 brought
# io_uring_prep_cancel64 and the *_data64 helpers; libmicrohttpd 0.9.75 is
# the oldest built against (MHD_HTTP_CONTENT_TOO_LARGE); OpenSSL 1.1.0
# EVP_MD_CTX_new; libyaml 0.2.5 is the one the model card reader was built
# and fuzzed with; libcurl 7.68.0 (the mirror's upstream client) keeps a
# custom Authorization header from a redirect to another host (7.58) and
# has CURLINFO_RETRY_AFTER (7.66); zlib 1.2.11 is Debian 10's (deflateBound
# and the gzip wrapper are far older). The tests' jansson: 2.7 added
# json_stringn_nocheck. Each entry is name:version:Debian package.
PKG_MIN    := libmicrohttpd:0.9.75:libmicrohttpd-dev liburing:2.2:liburing-dev \
              libcrypto:1.1.0:libssl-dev yaml-0.1:0.2.5:libyaml-dev \
              libcurl:7.68.0:libcurl4-openssl-dev zlib:1.2.11:zlib1g-dev
TEST_PKG_MIN := jansson:2.7:libjansson-dev

# Quiet by default, like kbuild: one "CC file" line per step; V=1 prints
# the commands in full.
ifeq ($(V),1)
Q    :=
show  = @:
else
Q    := @
show  = @printf '  %-6s %s\n' '$(1)' '$(2)'
endif

# cuda.h (the CUDA 12.0 headers or newer; libcuda itself is dlopen'ed at run
# time) is looked for, first found first, in CUDA_INCLUDE when given, else in
# $(CUDA_PATH)/include, /usr/include (Debian's nvidia-cuda-dev), and the
# include directories of the CUDA wheels (nvidia-cuda-runtime-cu12:
# nvidia/cuda_runtime/include; CUDA 13's nvidia-cuda-runtime: nvidia/cu13/include)
# in the tests' virtual environment, the system's and the user's Python.
# CUDA=auto builds the CUDA parts when one is found; CUDA=yes stops otherwise.
CUDA_MIN_VERSION := 12000
CUDA_INCLUDE ?=
PY_SITES := $(VENV)/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
            /usr/lib/python3/dist-packages $(HOME)/.local/lib/python3*/site-packages
ifeq ($(CUDA),no)
CUDA_CANDIDATES :=
else ifneq ($(CUDA_INCLUDE),)
CUDA_CANDIDATES := $(CUDA_INCLUDE)
else
CUDA_CANDIDATES := $(CUDA_PATH)/include /usr/include \
  $(wildcard $(foreach s,$(PY_SITES),$(s)/nvidia/cuda_runtime/include $(s)/nvidia/cu13/include))
endif
# "ok DIR VERSION" for the first header new enough, else "old DIR VERSION"
# for the first one found, else nothing. Run by `make config` only (and
# `make print-CUDA_PROBE`, which tests/gpu/run.sh asks).
CUDA_PROBE = $(if $(CUDA_CANDIDATES),$(shell old=; for d in $(CUDA_CANDIDATES); do \
  f=$$d/cuda.h; [ -f $$f ] || continue; \
  v=$$(sed -n 's/^\#define CUDA_VERSION *\([0-9][0-9]*\).*/\1/p' $$f | head -n 1); \
  if [ "$${v:-0}" -ge $(CUDA_MIN_VERSION) ]; then echo "ok $$d $$v"; exit 0; fi; \
  [ -n "$$old" ] || old="old $$d $${v:-0}"; done; echo "$$old"))
CUDA_NOT_FOUND = $(if $(filter old,$(word 1,$(CUDA_PROBE))),$(word 2,$(CUDA_PROBE))/cuda.h declares \
  CUDA_VERSION $(word 3,$(CUDA_PROBE)); tensord needs the CUDA 12.0 headers (CUDA_VERSION 12000) or newer,no \
  cuda.h of CUDA 12.0 or newer in $(or $(CUDA_CANDIDATES),CUDA_PATH/include /usr/include or the \
  CUDA wheels (nvidia-cuda-runtime-cu12)); set CUDA_PATH or CUDA_INCLUDE)

# ---- Configuration ----------------------------------------------------------
# `make config` (mk/configure.sh) decides once, into $(BUILD)/config.mk,
# what every later make reads from there instead of deciding again: the
# compiler and its version (CONFIG_CC), each library's flags from
# pkg-config (LIB_CFLAGS_name, LIB_LIBS_name, their sums PKG_CFLAGS and
# PKG_LIBS: the versions checked against PKG_MIN, and the DLPack header
# found; a missing or too old one fails naming its Debian package), whether
# CUDA is built (WITH_CUDA, CUDA_INC), and the tests' libraries (their
# flags, or the message a unit test's build stops with). The file is made
# when a build needs it and it is missing, and made again when what it was
# decided from changes: the Makefile or mk/configure.sh, a file it found
# (CONFIG_FILES: the .pc files, cuda.h, the compiler), or an input it
# records (CONFIG_INPUTS, compared with CONFIG_INPUTS_NOW: CC, CPPFLAGS,
# CUDA, CUDA_PATH, CUDA_INCLUDE, the cuda.h files among the candidates,
# PKG_CONFIG_PATH and PKG_CONFIG_LIBDIR, the version lists, flags named on
# the command line). Flags named on the command line (PKG_CFLAGS= PKG_LIBS=,
# as tests/gpu/run.sh passes those of unpacked packages) are the caller's
# word: pkg-config is not asked, and every layer gets PKG_CFLAGS. Goals
# that only install packages, clean, print or start another make need no
# configuration (a fresh machine's `make run` installs the libraries first).
CONFIG := $(BUILD)/config.mk
USER_CPPFLAGS := $(CPPFLAGS)
GIVEN_FLAGS := $(if $(filter command line,$(origin PKG_LIBS)),1)
CONFIG_INPUTS_NOW = CC=$(CC) CPPFLAGS=$(USER_CPPFLAGS) CUDA=$(CUDA) CUDA_PATH=$(CUDA_PATH) \
  CUDA_INCLUDE=$(CUDA_INCLUDE) cuda.h=$(wildcard $(CUDA_CANDIDATES:%=%/cuda.h)) \
  PKG_CONFIG_PATH=$(PKG_CONFIG_PATH) PKG_CONFIG_LIBDIR=$(PKG_CONFIG_LIBDIR) PKG_MIN=$(PKG_MIN) \
  TEST_PKG_MIN=$(TEST_PKG_MIN) $(if $(GIVEN_FLAGS),PKG_CFLAGS=$(PKG_CFLAGS) PKG_LIBS=$(PKG_LIBS))
CONFIG_FREE := clean uninstall config deps deps-apt deps-run deps-test deps-test-apt deps-bench \
  deps-bench-apt run test bench bench-callgrind bench-compression bench-remote bench-hub bench-s3 bench-mirror \
  bench-mirror-routes bench-swarm bench-gpu bench-multi-gpu bench-hash check-olah tsan tsan-test \
  test-cuda-double test-debs-root dist \
  print-%
ifeq ($(filter-out $(CONFIG_FREE),$(or $(MAKECMDGOALS),all)),)
-include $(wildcard $(CONFIG))
else
include $(CONFIG)
# Made again at most once per make (MAKE_RESTARTS is set once make has
# read a remade file): a configuration that still differs cannot loop.
ifeq ($(MAKE_RESTARTS),)
ifneq ($(strip $(CONFIG_INPUTS)),$(strip $(CONFIG_INPUTS_NOW)))
$(CONFIG): FORCE
endif
endif
endif
sq = '$(subst ','\'',$(1))'
configure = CC=$(call sq,$(CC)) CPPFLAGS=$(call sq,$(USER_CPPFLAGS)) CUDA=$(call sq,$(CUDA)) \
  CUDA_PROBE=$(call sq,$(CUDA_PROBE)) CUDA_NOT_FOUND=$(call sq,$(CUDA_NOT_FOUND)) \
  PKG_MIN=$(call sq,$(PKG_MIN)) TEST_PKG_MIN=$(call sq,$(TEST_PKG_MIN)) GIVEN=$(GIVEN_FLAGS) \
  INPUTS=$(call sq,$(strip $(CONFIG_INPUTS_NOW))) sh mk/configure.sh $(CONFIG)
$(CONFIG): Makefile mk/configure.sh $(wildcard $(CONFIG_FILES))
	@mkdir -p $(dir $@)
	$(call show,CONFIG,$@)
	$(Q)$(configure)
config:
	@mkdir -p $(BUILD)
	@$(configure)
	@sed -n 's/^\(CONFIG_CC\|WITH_CUDA\|CUDA_INC\|PKG_LIBS\|TEST_LIBS_MISSING\) := \(..*\)/  \1: \2/p' $(CONFIG)

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wpointer-arith -Wformat=2 -Wvla
ifneq ($(CI),)
WARN     += -Werror
endif
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CPPFLAGS += -D_GNU_SOURCE -DTENSORD_VERSION='"$(VERSION)"'
ALL_CFLAGS = -std=c11 -pthread -fno-strict-aliasing $(WARN) $(CFLAGS)
LDLIBS   += $(PKG_LIBS) -ldl -lpthread -lm

ifeq ($(WITH_CUDA),1)
CPPFLAGS += -DTENSORD_CUDA=1
CUDA_CPPFLAGS := -isystem $(CUDA_INC)
endif
ifneq ($(SANITIZER),)
ALL_CFLAGS += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS    += -fsanitize=$(SANITIZER)
endif
# TSan cannot model the metrics ring's fences (gcc warns); every access
# there is atomic, so it reports no race either way.
ifneq ($(filter thread,$(subst $(comma), ,$(SANITIZER))),)
ALL_CFLAGS += -Wno-tsan
endif

# ---- Layers -----------------------------------------------------------------
# The folders, bottom up (docs/ARCHITECTURE.md, "Layers"), and what each may
# use: a layer is compiled with the include directories of those layers
# only, so including a header from above it fails the build. Every header
# of the project is included by its bare name ("registry.h"), found where
# the layer's path has it (names are unique across the tree). A layer gets
# the pkg-config flags of its own libraries only, and the headers of the
# two libraries that define a layer, libmicrohttpd (the HTTP front) and
# libcurl (the mirror's upstream client), are shadowed everywhere else by
# one that stops the build (mk/forbid/): the system's include directory
# would find them otherwise. tests/ops/test_layers.py compiles the wrong
# includes and sees them fail.
# core/ is layers of its own, by subject: the base; the runtime and the
# safetensors format beside each other on it (neither sees the other); the
# bodies of answers; the registry; hashing and the request parsers beside
# each other on top. Each sees every core folder below it.
CORE_LAYERS := core/base core/runtime core/format core/body core/registry core/hash core/req
# A source left at core/'s top (a merge from before the folders) would be
# compiled by nothing: say so.
ifneq ($(wildcard core/*.c core/*.h),)
$(error $(wildcard core/*.c core/*.h): core/'s sources belong in one of its folders, $(CORE_LAYERS))
endif
LAYERS := $(CORE_LAYERS) gpu mirror server/lease server/handlers server/http server/cli client
USES_core/base       := core/base
USES_core/runtime    := core/base core/runtime
USES_core/format     := core/base core/format
USES_core/body       := core/base core/runtime core/format core/body
USES_core/registry   := $(USES_core/body) core/registry
USES_core/hash       := $(USES_core/registry) core/hash
USES_core/req        := $(USES_core/registry) core/req
USES_gpu             := $(CORE_LAYERS) gpu
USES_mirror          := $(CORE_LAYERS) mirror
USES_server/lease    := $(CORE_LAYERS) gpu server/lease
USES_server/handlers := $(CORE_LAYERS) gpu mirror server/lease server/handlers
USES_server/http     := $(USES_server/handlers) server/http
USES_server/cli      := $(USES_server/http) server/cli
# The client library: its own headers and those of the core files it
# compiles and the wire protocol's (CLIENT_HEADERS), gathered in one folder
# of links. tensord-client (client/cli.c) reads the daemon's configuration
# file with core's reader.
USES_client          := client $(BUILD)/include/client
USES_client/cli      := client core/base core/runtime
LIBS_core/base       := libcrypto
LIBS_core/body       := zlib
LIBS_core/hash       := libcrypto
LIBS_core/req        := libcrypto yaml-0.1
LIBS_gpu             := liburing
LIBS_mirror          := libcurl libcrypto
LIBS_server/handlers := libcrypto
LIBS_server/http     := libmicrohttpd
LIBS_server/cli      := libcrypto
forbid = $(if $(filter server/http,$(1)),,mk/forbid/microhttpd) $(if $(filter mirror,$(1)),,mk/forbid/curl)
layer_flags = $(addprefix -I,$(USES_$(1)) $(call forbid,$(1))) \
  $(if $(GIVEN_FLAGS),$(PKG_CFLAGS),$(foreach l,$(LIBS_$(1)),$(LIB_CFLAGS_$(l)))) \
  $(if $(filter gpu client,$(1)),$(CUDA_CPPFLAGS))
# The unit tests and fuzz targets see every layer (and tests/unit's fixtures).
TEST_INC = $(addprefix -I,$(sort $(filter-out $(BUILD)/%,$(foreach l,$(LAYERS),$(USES_$(l))))) \
  tests/unit) \
  $(PKG_CFLAGS) $(CUDA_CPPFLAGS)

# Sources: files ending in _cuda.c only when CUDA is on.
cuda_too = $(filter-out %_cuda.c,$(1)) $(if $(filter 1,$(WITH_CUDA)),$(filter %_cuda.c,$(1)))
CORE_SRC   := $(wildcard $(addsuffix /*.c,$(CORE_LAYERS)))
GPU_SRC    := $(call cuda_too,$(wildcard gpu/*.c))
MIRROR_SRC := $(wildcard mirror/*.c)
SERVER_SRC := $(wildcard $(addsuffix /*.c,$(filter server/%,$(LAYERS))))
CLIENT_SRC := $(call cuda_too,$(filter-out client/cli.c,$(wildcard client/*.c)))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)

# The web console's files (server/handlers/ui/), compiled into the daemon
# as one generated C file by embed.py there (Python's standard library only).
UI_DIR     := server/handlers/ui
UI_FILES   := $(wildcard $(UI_DIR)/*.html $(UI_DIR)/*.css $(UI_DIR)/*.js)
UI_GEN     := $(BUILD)/gen/ui_assets.c
# The OpenAPI description (server/handlers/openapi/): base.json and one file
# of paths per API family, merged and compiled in by build.py there.
OPENAPI_DIR   := server/handlers/openapi
OPENAPI_FILES := $(OPENAPI_DIR)/base.json $(OPENAPI_DIR)/v1.json $(OPENAPI_DIR)/hub.json \
                 $(OPENAPI_DIR)/s3.json
OPENAPI_GEN   := $(BUILD)/gen/openapi_assets.c

CORE_OBJ   := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
LOWER_OBJ  := $(GPU_SRC:%.c=$(BUILD)/obj/%.o) $(MIRROR_SRC:%.c=$(BUILD)/obj/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/ui_assets.o \
              $(BUILD)/obj/gen/openapi_assets.o
SERVER_LIB_OBJ := $(filter-out $(BUILD)/obj/server/cli/main.o,$(SERVER_OBJ))
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)

# Each object gets its layer's flags (the generated console its handlers').
$(foreach l,$(LAYERS),$(eval $(BUILD)/obj/$(l)/%.o $(BUILD)/pic/$(l)/%.o \
  build/fuzz/obj/$(l)/%.o: LAYER_FLAGS = $$(call layer_flags,$(l))))
$(BUILD)/obj/client/cli.o: LAYER_FLAGS = $(call layer_flags,client/cli)
$(BUILD)/obj/gen/%.o build/fuzz/obj/build/gen/%.o: LAYER_FLAGS = $(call layer_flags,server/handlers)

# The CUDA driver test double (tests/cuda_double/): a libcuda.so.1 over host
# memory that the daemon and the client load through LD_LIBRARY_PATH in
# `make test-cuda-double`. Built with the same flags (and sanitizers).
CUDA_DOUBLE_SRC := $(wildcard tests/cuda_double/*.c)
CUDA_DOUBLE     := $(BUILD)/cuda-double/libcuda.so.1
$(CUDA_DOUBLE): $(CUDA_DOUBLE_SRC) tests/cuda_double/cuda_double.h
	@test -n "$(CUDA_INC)" || { echo "the CUDA driver test double needs cuda.h: $(CUDA_NOT_FOUND)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(call show,CCLD,$@)
	$(Q)$(CC) -D_GNU_SOURCE -isystem $(CUDA_INC) $(ALL_CFLAGS) $(LDFLAGS) -fPIC -fvisibility=hidden -shared \
	  -Wl,-soname,libcuda.so.1 -o $@ $(CUDA_DOUBLE_SRC) -lpthread
cuda-double: $(CUDA_DOUBLE)

# The daemon's CUDA backend and the client's CUDA path against the double,
# under ASan+UBSan (docs/GPU.md, "Testing"). Part of `make test`.
CUDA_DOUBLE_BUILD := build/san-address-undefined
test-cuda-double: deps-test
	@$(MAKE) --no-print-directory SANITIZER=address,undefined CUDA=yes \
	  $(CUDA_DOUBLE_BUILD)/tensord $(CUDA_DOUBLE_BUILD)/tensord-client \
	  $(CUDA_DOUBLE_BUILD)/libtensord-client.so $(CUDA_DOUBLE_BUILD)/cuda-double/libcuda.so.1
	@TENSORD_CUDA_BUILD=$(CUDA_DOUBLE_BUILD) $(PYTHON) tests/cuda_double/run.py

# tests/gpu/run.sh --device host inside a minimal Debian 12 root (debootstrap
# minbase, python3, numpy and a compiler only), built from the .debs it
# fetches: proves they carry the runtime closure (docs/GPU.md, "Testing").
# As root, with Debian's archive reachable; about 2 minutes on 2 cores. Not
# part of `make test` (its time and the network).
test-debs-root:
	@tests/gpu/min_root.sh

.PHONY: FORCE all config deps deps-apt deps-run deps-test deps-test-apt deps-bench deps-bench-apt run run-built uninstall test test-cuda-double test-debs-root cuda-double unit fuzz fuzz-smoke install clean integration circles print-% bench bench-callgrind bench-compression bench-gpu bench-multi-gpu bench-header bench-hub bench-leases bench-remote bench-s3 bench-mirror bench-mirror-routes bench-swarm bench-sha256 bench-hash check-olah soak tsan tsan-test dist
all: $(BUILD)/tensord $(BUILD)/libtensord-client.so $(BUILD)/tensord-client

# The flags a build directory was compiled with: objects depend on this
# file, which is rewritten only when the flags change (make CUDA=no after a
# CUDA build, CFLAGS=..., another compiler), so one directory never mixes
# two configurations.
BUILD_FLAGS = $(CONFIG_CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) $(LDLIBS) \
  $(foreach l,$(LAYERS) client/cli,$(l): $(call layer_flags,$(l)))
$(BUILD)/flags: FORCE
	@mkdir -p $(dir $@)
	@echo $(call sq,$(BUILD_FLAGS)) | cmp -s - $@ || echo $(call sq,$(BUILD_FLAGS)) > $@
# The same for the tests' own libraries (the unit tests and fuzz targets),
# which stop here, naming them, when make config did not find them.
$(BUILD)/test-flags: FORCE
	@$(if $(TEST_LIBS_MISSING),printf '%b\n' $(call sq,$(TEST_LIBS_MISSING)) >&2; exit 1)
	@mkdir -p $(dir $@)
	@echo '$(TEST_CFLAGS) $(TEST_LIBS)' | cmp -s - $@ || echo '$(TEST_CFLAGS) $(TEST_LIBS)' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(call show,CC,$@)
	$(Q)$(CC) $(CPPFLAGS) $(LAYER_FLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

%/gen/ui_assets.c: $(UI_DIR)/embed.py $(UI_FILES)
	@mkdir -p $(dir $@)
	$(call show,GEN,$@)
	$(Q)$(SYS_PYTHON) $(UI_DIR)/embed.py $@ $(UI_FILES)
$(BUILD)/obj/gen/ui_assets.o: $(UI_GEN) $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(call show,CC,$@)
	$(Q)$(CC) $(CPPFLAGS) $(LAYER_FLAGS) $(ALL_CFLAGS) -c $< -o $@
%/gen/openapi_assets.c: $(OPENAPI_DIR)/build.py $(UI_DIR)/embed.py $(OPENAPI_FILES) Makefile
	@mkdir -p $(dir $@)
	$(call show,GEN,$@)
	$(Q)$(SYS_PYTHON) $(OPENAPI_DIR)/build.py $@ $(VERSION) $(OPENAPI_FILES)
$(BUILD)/obj/gen/openapi_assets.o: $(OPENAPI_GEN) $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(call show,CC,$@)
	$(Q)$(CC) $(CPPFLAGS) $(LAYER_FLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libtensord-core.a: $(CORE_OBJ)
	@rm -f $@
	$(call show,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/tensord: $(SERVER_OBJ) $(LOWER_OBJ) $(BUILD)/libtensord-core.a
	$(call show,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The client library is position-independent and links only libc (+dl for
# CUDA). Of core it takes the answer reader's tokenizer, json_scan, and what
# that calls (strmap's fallible half, util's UTF-8 and hex helpers), the
# dtype table (the open answer's tensor sizes are checked with it), and the
# socket's trust check (path_trust); every function is its own section and
# the link drops those nothing calls, so core's allocation wrappers, which
# abort on OOM, never reach it: a worker must get errors from it, never an
# abort. Only tensord_* is exported. Its sources see only those files'
# headers, and the wire protocol's (gpu/ipc_proto.h, gpu/cuda_api.h).
CLIENT_CORE_SRC := core/format/dtype.c core/base/json_scan.c core/base/path_trust.c \
                   core/base/st_error.c core/base/strmap.c core/base/util.c
CLIENT_HEADERS  := $(CLIENT_CORE_SRC:.c=.h) core/format/split_bounds.h gpu/ipc_proto.h gpu/cuda_api.h
CLIENT_PIC_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/pic/%.o) $(CLIENT_CORE_SRC:%.c=$(BUILD)/pic/%.o)
$(BUILD)/include/client/.made: Makefile
	@rm -rf $(dir $@) && mkdir -p $(dir $@)
	@ln -sr $(CLIENT_HEADERS) $(dir $@) && touch $@
$(CLIENT_OBJ) $(filter $(BUILD)/pic/client/%,$(CLIENT_PIC_OBJ)) \
  $(filter-out build/fuzz/obj/client/cli.o,$(CLIENT_SRC:%.c=build/fuzz/obj/%.o)): \
  | $(BUILD)/include/client/.made
$(BUILD)/pic/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(call show,CC,$@)
	$(Q)$(CC) $(CPPFLAGS) $(LAYER_FLAGS) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -ffunction-sections \
	  -fdata-sections -MMD -MP -c $< -o $@
$(BUILD)/libtensord-client.so: $(CLIENT_PIC_OBJ)
	$(call show,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libtensord-client.so.0 -Wl,--gc-sections \
	  -o $@ $^ -ldl -lpthread
$(BUILD)/tensord-client: $(BUILD)/obj/client/cli.o $(CLIENT_OBJ) $(BUILD)/libtensord-core.a
	$(call show,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# -MMD: a test is rebuilt when a header it includes (test.h, a fixture)
# changes, not only its own .c. Those headers (and the tests/ref/ sources a
# test includes) become prerequisites: only the test's .c and the objects
# are compiled and linked.
# A test may #include the server file under test ("../../server/x/y.c") to
# reach its static functions (as h2o's t/00unit does): it links without
# that file's object.
included_obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(shell sed -n 's|^\#include "\.\./\.\./\(server/.*\.c\)"|\1|p' $(1)))
$(BUILD)/tests/%: tests/unit/%.c $(SERVER_LIB_OBJ) $(CLIENT_OBJ) $(LOWER_OBJ) \
                  $(BUILD)/libtensord-core.a $(BUILD)/test-flags
	@mkdir -p $(dir $@)
	$(call show,CCLD,$@)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_INC) $(ALL_CFLAGS) $(TEST_CFLAGS) -MMD -MP -MF $@.d $(LDFLAGS) \
	  -o $@ $< $(filter-out $(call included_obj,$<),$(filter %.o %.a,$^)) $(LDLIBS) $(TEST_LIBS)

unit: $(UNIT_BIN)
	@$(PYTHON) tests/run_unit.py $(UNIT_BIN)

# libFuzzer targets are built with clang into build/fuzz. Every object needs
# the fuzzer's coverage instrumentation (fuzzer-no-link), so the library is
# compiled once for all targets into build/fuzz/libtensord-fuzz.a, and each
# target links it with the fuzzer's main.
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_FLAGS := -g -O1 $(FUZZ_SAN)
FUZZ_LIB_SRC := $(CORE_SRC) $(GPU_SRC) $(MIRROR_SRC) $(filter-out server/cli/main.c,$(SERVER_SRC)) \
                $(CLIENT_SRC) build/gen/ui_assets.c build/gen/openapi_assets.c
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=build/fuzz/obj/%.o)
build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call show,CLANG,$@)
	$(Q)$(CLANG) $(CPPFLAGS) $(LAYER_FLAGS) -std=c11 -pthread $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link \
	  -MMD -MP -c $< -o $@
build/fuzz/libtensord-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(call show,AR,$@)
	$(Q)ar rcs $@ $^
build/fuzz/%: tests/fuzz/%.c build/fuzz/libtensord-fuzz.a
	@mkdir -p $(dir $@)
	$(call show,CLANG,$@)
	$(Q)$(CLANG) $(CPPFLAGS) $(TEST_INC) -std=c11 -pthread $(TEST_CFLAGS) $(FUZZ_FLAGS) \
	  -fsanitize=fuzzer -o $@ $^ $(LDLIBS) $(TEST_LIBS)

fuzz-build: $(FUZZ_BIN)
# Short smoke run of every target plus a replay of past crash inputs.
fuzz-smoke: $(FUZZ_BIN)
	@$(PYTHON) tests/fuzz/run.py --seconds $(FUZZ_SMOKE_SECONDS) $(FUZZ_BIN)
FUZZ_SMOKE_SECONDS ?= 5
fuzz: $(FUZZ_BIN)
	@$(PYTHON) tests/fuzz/run.py --seconds $(FUZZ_SECONDS) $(FUZZ_BIN)

# Debian packages, by what needs them; each list is installed only where a
# package is missing, so a provisioned machine never touches apt. Add a
# package to the list of the first target that needs it:
#   DEB_BUILD  compiling (make all; python3 runs server/handlers/ui/embed.py)
#   DEB_RUN    make run and the README tour (demo models, curl, the Python
#              client's imports); with DEB_BUILD the whole of `make deps-run`
#   DEB_TEST   make test (with the virtual environment of tests/requirements.txt;
#              chromium drives the web console's tests and the CORS test)
#   DEB_BENCH  make bench, bench-remote, bench-hub, bench-sha256, bench-callgrind, soak
# Nothing in DEB_BUILD or DEB_RUN starts a service; the test and bench lists
# are installed with services kept from starting (policy-rc.d), since nginx
# and prometheus would otherwise listen on :80 and :9090.
DEB_BUILD := build-essential pkg-config libmicrohttpd-dev liburing-dev libssl-dev \
             libdlpack-dev python3 libyaml-dev libcurl4-openssl-dev zlib1g-dev
DEB_RUN   := python3-numpy python3-urllib3 curl xxd
DEB_TEST  := libjansson-dev clang libclang-rt-14-dev python3-pytest python3-venv python3-torch \
             git man-db groff-base systemd prometheus nginx-light chromium
DEB_BENCH := nettle-dev nginx wrk aria2 iperf3 iproute2 python3-libtorrent valgrind
# Kept for scripts that read it: every list.
DEB_PKGS   = $(DEB_BUILD) $(DEB_RUN) $(DEB_TEST) $(DEB_BENCH)

# $(call apt_install,PACKAGES): installs those missing, as root or through sudo.
define apt_install
@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
if [ -n "$$missing" ]; then \
  echo "installing:" $$missing; \
  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive TENSORD_NO_START=$(2) sh -c '\
    [ -z "$$TENSORD_NO_START" ] || [ -e /usr/sbin/policy-rc.d ] || { \
      printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; \
      trap "rm -f /usr/sbin/policy-rc.d" EXIT; }; \
    apt-get install -y -qq --no-install-recommends "$$@"' sh $$missing; \
fi
endef

deps-run:
	$(call apt_install,$(DEB_BUILD) $(DEB_RUN))
deps-test-apt: deps-run
	$(call apt_install,$(DEB_TEST),1)
deps-bench-apt: deps-test-apt
	$(call apt_install,$(DEB_BENCH),1)
# The tests' (and benchmarks') virtual environment.
deps-test: deps-test-apt $(VENV)/.installed
deps-bench: deps-bench-apt $(VENV)/.installed
deps: deps-bench
deps-apt: deps-bench-apt

# Exact versions, no dependency resolution: what the file lists is what runs.
# pip's own lines say how far it is (a package at a time): the install takes
# a minute or two, and a silent one looked hung.
$(VENV)/.installed: tests/requirements.txt | deps-test-apt
	@echo "make: the tests' Python packages into $(VENV): $$(grep -c '^[A-Za-z]' tests/requirements.txt) pinned in tests/requirements.txt (a minute or two)"
	$(SYS_PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check --no-deps --progress-bar off \
	  -r tests/requirements.txt
	@touch $@

# `make run`: the runtime set only, the demo models under ./models, the
# daemon on LISTEN with its state under build/run/ and one demo model
# preloaded for leases (on GPU 0 when the build has CUDA and a GPU is
# there, else on the host backend). Extra daemon options: RUN_ARGS=...
PORT       ?= 8077
LISTEN     ?= 127.0.0.1:$(PORT)
RUN_PORT    = $(lastword $(subst :, ,$(LISTEN)))
RUN_HOSTPART = $(patsubst %:$(RUN_PORT),%,$(LISTEN))
RUN_HOST    = $(if $(filter 127.0.0.1 0.0.0.0 [::] [::1],$(RUN_HOSTPART)),localhost,$(RUN_HOSTPART))
RUN_URL     = $(RUN_HOST):$(RUN_PORT)
RUN_DEVICE ?= $(if $(and $(filter 1,$(WITH_CUDA)),$(wildcard /dev/nvidia0)),cuda:0,host)
RUN_ARGS   ?=
RUN_CMD     = $(BUILD)/tensord serve --models models --listen $(LISTEN) \
              --state-dir $(CURDIR)/$(BUILD)/run/state --preload demo-f32@$(RUN_DEVICE) $(RUN_ARGS)
# The packages first, then the rest in a make that reads the configuration
# (RUN_DEVICE asks WITH_CUDA).
run: deps-run
	@$(MAKE) --no-print-directory run-built
run-built: all
	@$(SYS_PYTHON) tests/gen/gen_models.py --demo models
	@mkdir -p $(BUILD)/run/state $(BUILD)/tour
	@sock=$$($(RUN_CMD) --print-socket) && echo && \
	echo "tensord is starting on http://$(LISTEN) serving ./models (another port: make run PORT=N)." && \
	echo && echo "  The web console: http://$(RUN_URL)/ui/   (open it in a browser)" && echo && \
	echo "demo-f32 is preloaded on $(RUN_DEVICE) for leases on $$sock." && \
	echo "Its content hashes are kept in $(BUILD)/run/state: build/tensord verify --state-dir $(BUILD)/run/state models/" && \
	echo "The README's tour takes the address from TENSORD_URL. Try:" && \
	echo "  export TENSORD_URL=http://$(RUN_URL)" && \
	echo "  curl -s \$$TENSORD_URL/v1/models" && \
	echo "  curl -s \$$TENSORD_URL/v1/models/demo-f32/header" && \
	echo "  curl -s \$$TENSORD_URL/v1/models/demo-f32/tensors/embed.weight -o build/tour/embed.bin" && \
	echo "  curl -s \"\$$TENSORD_URL/v1/models/demo-f32/tensors/embed.weight?slice=0:2,1:3&format=npy\" -o build/tour/slice.npy" && \
	echo "  curl -s -H 'Range: bytes=0-7' \$$TENSORD_URL/v1/models/demo-sharded/files/model-00001-of-00002.safetensors | xxd" && \
	echo "  PYTHONPATH=client/python python3 -m tensord ls           # the HTTP API's command line" && \
	echo "  build/tensord-client ls                 # the lease socket, found as the daemon chose it" && \
	echo "  build/tensord-client open demo-f32" && \
	echo "  PYTHONPATH=client/python python3 -c 'import tensord; m = tensord.connect().open(\"demo-f32\"); print(m.backend, m[\"embed.weight\"][:2])'" && \
	echo
	@$(RUN_CMD); rc=$$?; [ $$rc = 0 ] || echo "make run: tensord exited with status $$rc (port $(RUN_PORT) taken? make run PORT=N, or LISTEN=ADDR:PORT)" >&2; exit $$rc

test: deps-test
	@$(PYTHON) tests/run_all.py

# No include or call circle among the modules of any layer, or across them
# (the dispatcher, the handlers and the HTTP front depend one way, and so do
# the hasher's parts), and no include or call from one layer to a layer it
# may not use (USES_*; a call declared by hand passes the include paths):
# tests/ops/circles.py reads the includes and the objects' symbols. make
# test runs it.
LAYER_USES = $(foreach l,$(LAYERS) client/cli,$(call sq,$(l)=$(USES_$(l))))
circles: all
	@$(SYS_PYTHON) tests/ops/circles.py --build $(BUILD) $(addprefix --uses ,$(LAYER_USES)) $(LAYERS)
# Each layer's include directories, a line "LAYER=DIR ..." each (tests/ops/).
print-uses:
	@printf '%s\n' $(LAYER_USES)

integration: all
	@$(PYTHON) -m pytest -q tests/integration

bench: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/run.py

# Instructions per small request under callgrind (bench/callgrind.py;
# docs/PERFORMANCE.md "Instructions per request"): exact where req/s is
# not, so a 1% change shows. BENCH_CALLGRIND_ARGS names the binaries or
# git commits to compare (a commit is built once under /tmp), e.g.
# BENCH_CALLGRIND_ARGS="main build/tensord"; by default this checkout's.
bench-callgrind: deps-bench
	@$(MAKE) --no-print-directory $(BUILD)/tensord
	@$(PYTHON) bench/callgrind.py $(or $(BENCH_CALLGRIND_ARGS),$(BUILD)/tensord)

# Remote tensors: tensord.load_file against hf_hub_download and aria2c from
# nginx and a local safetensors load, tensor-parallel fetches, get_slice
# (bench/remote.py; about 2.5 GB of models, cached in build/bench/models).
bench-remote: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/remote.py $(BENCH_REMOTE_ARGS)

# The documents' sizes and CPU per request, as they are and as gzip
# (bench/compression.py; docs/PERFORMANCE.md "Compressed documents").
bench-compression: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/compression.py $(BENCH_COMPRESSION_ARGS)

# snapshot_download of a 2 GiB sharded repo from tensord's Hugging Face
# endpoint against nginx serving the same files in a static Hub layout
# (bench/hub.py; docs/PERFORMANCE.md "Hugging Face endpoint").
bench-hub: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/hub.py $(BENCH_HUB_ARGS)

# The Run:ai Model Streamer through the S3 API against the same streamer on
# local files and a plain read (bench/s3.py; BENCH_S3_ARGS="--gib 4").
bench-s3: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/s3.py $(BENCH_S3_ARGS)

# The pull-through mirror through a capped link between two network
# namespaces (bench/mirror.py, as root; docs/PERFORMANCE.md "Pull-through
# mirror"): first byte, rate against iperf3, upstream bytes, 64 clients,
# cut downloads, the cache cap, a changed upstream, a preload's lag behind
# the last byte. BENCH_MIRROR_ARGS="--gib 1 --rate 2gbit".
bench-mirror: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/mirror.py $(BENCH_MIRROR_ARGS)

# The /v1 routes through a mirror (loopback, no root): bench/mirror_routes.py.
bench-mirror-routes: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/mirror_routes.py $(BENCH_MIRROR_ROUTES_ARGS)

# A libtorrent swarm (Debian's python3-libtorrent, --peers sessions in
# network namespaces over tbf-capped links) with tensord as its HTTP web
# seed (bench/swarm.py, as root; docs/PERFORMANCE.md "A libtorrent swarm").
bench-swarm: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/swarm.py $(BENCH_SWARM_ARGS)

# Validation time of a 500,000-tensor header (README quotes it).
bench-header: $(BUILD)/libtensord-core.a
	$(CC) $(CPPFLAGS) $(call layer_flags,core/format) $(ALL_CFLAGS) -o $(BUILD)/bench_st_header \
	  bench/bench_st_header.c $(BUILD)/libtensord-core.a $(LDLIBS)
	$(BUILD)/bench_st_header

# The GPU preload against the machine's limits in the same run (pinned copy,
# page cache, O_DIRECT, safetensors; bench/preload.py, docs/PERFORMANCE.md
# "GPU preload"): on cuda:0 where a GPU is usable, else on the host backend
# and on the CUDA driver test double. BENCH_GPU_ARGS="--device cuda:1 ...".
BENCH_GPU_ARGS ?=
$(BUILD)/bench/ceil_preload: bench/ceil_preload.c bench/ceil.h gpu/cuda_api.h $(BUILD)/flags
	$(call show,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(call layer_flags,gpu) $(ALL_CFLAGS) -o $@ $< $(PKG_LIBS) -ldl -lpthread
bench-gpu: deps-bench
	@$(MAKE) --no-print-directory all $(BUILD)/bench/ceil_preload
	@if [ -n "$(BENCH_GPU_ARGS)" ]; then $(PYTHON) bench/preload.py $(BENCH_GPU_ARGS); \
	elif nvidia-smi -L >/dev/null 2>&1; then $(PYTHON) bench/preload.py --device cuda:0; \
	else $(PYTHON) bench/preload.py --device host && \
	  $(MAKE) --no-print-directory CUDA=yes $(BUILD)/cuda-double/libcuda.so.1 && \
	  $(PYTHON) bench/preload.py --double; fi

# Preloads to several devices at once (bench/multi_gpu.py): on the CUDA
# driver test double with two devices unless BENCH_MULTI_GPU_ARGS says
# otherwise (--gpu --devices N on a GPU host).
bench-multi-gpu: deps-bench
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory CUDA=yes $(BUILD)/cuda-double/libcuda.so.1
	@$(PYTHON) bench/multi_gpu.py $(BENCH_MULTI_GPU_ARGS)

# olah (a Hugging Face mirror from the package index, in a virtual
# environment of its own under build/) in front of tensord: snapshot_download
# through it byte-exact (bench/olah.py, docs/OPERATIONS.md "Scaling out").
check-olah: deps-test
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/olah.py

# Leases opened and closed per second on the host backend, and worker RSS
# over 1,000 open/close cycles (docs/GPU.md, issue 12).
bench-leases: all
	@$(PYTHON) bench/leases.py

# SHA-256 and SHA-1 GB/s on one core, OpenSSL's libcrypto against nettle
# (docs/PERFORMANCE.md "Content hashes"). nettle is linked only here.
bench-sha256:
	@mkdir -p $(BUILD)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $(BUILD)/bench_sha256 bench/bench_sha256.c \
	  $(shell pkg-config --libs libcrypto nettle)
	$(BUILD)/bench_sha256

# Time to hash a 2 GB sharded repo with an empty state directory and after a
# restart (docs/PERFORMANCE.md "Content hashes"); the repo is generated in a
# temporary directory and removed.
bench-hash: deps-bench
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/bench_hash.py

# Load and soak (not part of `make test`): SOAK_SECONDS of mixed traffic.
SOAK_SECONDS ?= 60
soak: all
	@$(PYTHON) tests/soak/soak.py --seconds $(SOAK_SECONDS)

# ThreadSanitizer (docs/ARCHITECTURE.md, "Lock order"): the unit tests whose
# threads share state (the hasher's workers, housekeeper and saver, the
# document renderer, readers racing registry reloads, the connection
# reaper and its suspensions, the GPU manager, a mirror's job queue, metrics,
# the log), built with -fsanitize=thread into build/san-thread; a report
# fails the run. Part of `make test`.
TSAN_UNITS := test_hasher test_hasher_work test_doc_cache test_registry test_hashstore \
              test_conns test_gpu_manager test_gpu_reload test_gpu_load test_mirror_job test_metrics \
              test_log
TSAN_BINS  := $(TSAN_UNITS:%=build/san-thread/tests/%)
tsan:
	@$(MAKE) --no-print-directory SANITIZER=thread CUDA=no $(TSAN_BINS)
	@TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1" \
	  $(PYTHON) tests/run_unit.py $(TSAN_BINS)

# The same, then the daemon built with ThreadSanitizer under the concurrent
# integration tests (slower; not part of `make test`).
tsan-test: tsan
	@$(MAKE) --no-print-directory SANITIZER=thread CUDA=no all
	TENSORD_BIN=build/san-thread/tensord TSAN_OPTIONS="halt_on_error=1 log_path=$(CURDIR)/build/tsan-daemon" \
	  $(PYTHON) -m pytest -q -p no:cacheprovider -m concurrent tests/integration

# The Python client (client/python, pure Python) as a wheel in $(BUILD)/dist,
# built from a copy so that setuptools' build/ and egg-info stay out of the
# checkout, with the system's setuptools (no download).
dist: deps-test
	@rm -rf $(BUILD)/pysrc && mkdir -p $(BUILD)/pysrc $(BUILD)/dist
	tar -C client/python --exclude=__pycache__ -cf - pyproject.toml README.md tensord | tar -C $(BUILD)/pysrc -xf -
	cp LICENSE $(BUILD)/pysrc/
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w $(BUILD)/dist $(BUILD)/pysrc
	@ls $(BUILD)/dist/tensord-*.whl

# What `make install` puts under DESTDIR/PREFIX (uninstall removes the same).
MAN_PAGES := docs/tensord.8 docs/tensord-client.1 docs/tensord.conf.5
INSTALLED  = bin/tensord bin/tensord-client lib/libtensord-client.so.0 lib/libtensord-client.so \
             include/tensord_client.h share/man/man8/tensord.8 share/man/man1/tensord-client.1 \
             share/man/man5/tensord.conf.5 lib/systemd/system/tensord.service \
             share/doc/tensord/OPERATIONS.md share/doc/tensord/CONFIG.md \
             share/doc/tensord/API.md share/doc/tensord/tensord-gpu.conf
# The dynamic linker's cache learns of the new library (so the Python
# client and C workers load it by name); not for a DESTDIR staging tree,
# whose package runs ldconfig when it is installed.
LDCONFIG  ?= $(if $(DESTDIR),,ldconfig)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	  $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/doc/tensord \
	  $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(SYSCONFDIR)/tensord
	install -m 0755 $(BUILD)/tensord $(BUILD)/tensord-client $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(BUILD)/libtensord-client.so $(DESTDIR)$(PREFIX)/lib/libtensord-client.so.0
	ln -sf libtensord-client.so.0 $(DESTDIR)$(PREFIX)/lib/libtensord-client.so
	install -m 0644 client/tensord_client.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 docs/tensord.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 docs/tensord-client.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 docs/tensord.conf.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 systemd/tensord.service $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 docs/OPERATIONS.md docs/CONFIG.md docs/API.md systemd/tensord-gpu.conf \
	  $(DESTDIR)$(PREFIX)/share/doc/tensord/
	@# An operator's edited configuration is never overwritten.
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf ]; then \
	  echo "keeping existing $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf"; \
	else install -m 0644 config/tensord.conf $(DESTDIR)$(SYSCONFDIR)/tensord/; fi
	$(if $(LDCONFIG),$(LDCONFIG))

# The configuration goes only when it is the shipped one, unedited.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))
	@if cmp -s config/tensord.conf $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf; then \
	  rm -f $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf; \
	  rmdir $(DESTDIR)$(SYSCONFDIR)/tensord 2>/dev/null || true; \
	elif [ -e $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf ]; then \
	  echo "keeping $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf (edited)"; fi
	-rmdir $(DESTDIR)$(PREFIX)/share/doc/tensord 2>/dev/null
	$(if $(LDCONFIG),$(LDCONFIG))

clean:
	rm -rf build

print-%:
	@echo $($*)

-include $(shell find $(BUILD)/obj $(BUILD)/pic $(BUILD)/tests build/fuzz/obj -name '*.d' 2>/dev/null)
