# tensord: plain Makefile. Optional parts switch with variables:
#   CUDA=auto|yes|no               build the CUDA backend (headers only; libcuda is dlopen'ed at run time)
#   CUDA_PATH=/usr/local/cuda      where cuda.h is looked for first (CUDA_INCLUDE=DIR: only there)
#   SANITIZER=address,undefined    build with sanitizers (into their own BUILD dir by default)
#   CI=true                        adds -Werror
#   PREFIX=/usr/local DESTDIR=     install locations
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

PKGS       := libmicrohttpd liburing jansson libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

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
# for the first one found, else nothing.
CUDA_PROBE := $(if $(CUDA_CANDIDATES),$(shell old=; for d in $(CUDA_CANDIDATES); do \
  f=$$d/cuda.h; [ -f $$f ] || continue; \
  v=$$(sed -n 's/^\#define CUDA_VERSION *\([0-9][0-9]*\).*/\1/p' $$f | head -n 1); \
  if [ "$${v:-0}" -ge $(CUDA_MIN_VERSION) ]; then echo "ok $$d $$v"; exit 0; fi; \
  [ -n "$$old" ] || old="old $$d $${v:-0}"; done; echo "$$old"))
CUDA_INC := $(word 2,$(CUDA_PROBE))
CUDA_HEADER_VERSION := $(word 3,$(CUDA_PROBE))
CUDA_NOT_FOUND = $(if $(filter old,$(word 1,$(CUDA_PROBE))),$(CUDA_INC)/cuda.h declares \
  CUDA_VERSION $(CUDA_HEADER_VERSION); tensord needs the CUDA 12.0 headers (CUDA_VERSION 12000) or newer,no \
  cuda.h of CUDA 12.0 or newer in $(or $(CUDA_CANDIDATES),CUDA_PATH/include /usr/include or the \
  CUDA wheels (nvidia-cuda-runtime-cu12)); set CUDA_PATH or CUDA_INCLUDE)

ifeq ($(CUDA),auto)
  WITH_CUDA := $(if $(filter ok,$(word 1,$(CUDA_PROBE))),1,0)
else ifeq ($(CUDA),yes)
  WITH_CUDA := 1
  ifneq ($(word 1,$(CUDA_PROBE)),ok)
    $(error CUDA=yes but $(CUDA_NOT_FOUND))
  endif
else
  WITH_CUDA := 0
endif

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wpointer-arith -Wformat=2 -Wvla
ifneq ($(CI),)
WARN     += -Werror
endif
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CPPFLAGS += -D_GNU_SOURCE -DTENSORD_VERSION='"$(VERSION)"' -Icore -Iserver -Iclient
ALL_CFLAGS = -std=c11 -pthread -fno-strict-aliasing $(WARN) $(CFLAGS) $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS) -ldl -lpthread -lm

ifeq ($(WITH_CUDA),1)
CPPFLAGS += -DTENSORD_CUDA=1 -isystem $(CUDA_INC)
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

# Sources: every core/*.c and core/gpu/*.c (GPU sharing, included as
# "gpu/NAME.h") is part of the library; files ending in _cuda.c only when
# CUDA is on.
CORE_SRC   := $(filter-out %_cuda.c,$(wildcard core/*.c core/gpu/*.c))
ifeq ($(WITH_CUDA),1)
CORE_SRC   += $(wildcard core/*_cuda.c core/gpu/*_cuda.c)
endif
SERVER_SRC := $(wildcard server/*.c)
CLIENT_SRC := $(filter-out %_cuda.c client/cli.c,$(wildcard client/*.c))
ifeq ($(WITH_CUDA),1)
CLIENT_SRC += $(wildcard client/*_cuda.c)
endif
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)

CORE_OBJ   := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/obj/%.o)
SERVER_LIB_OBJ := $(filter-out $(BUILD)/obj/server/main.o,$(SERVER_OBJ))
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)

# The CUDA driver test double (tests/cuda_double/): a libcuda.so.1 over host
# memory that the daemon and the client load through LD_LIBRARY_PATH in
# `make test-cuda-double`. Built with the same flags (and sanitizers).
CUDA_DOUBLE_SRC := $(wildcard tests/cuda_double/*.c)
CUDA_DOUBLE     := $(BUILD)/cuda-double/libcuda.so.1
$(CUDA_DOUBLE): $(CUDA_DOUBLE_SRC) tests/cuda_double/cuda_double.h
	@test -n "$(CUDA_INC)" || { echo "the CUDA driver test double needs cuda.h: $(CUDA_NOT_FOUND)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE -isystem $(CUDA_INC) $(ALL_CFLAGS) $(LDFLAGS) -fPIC -fvisibility=hidden -shared \
	  -Wl,-soname,libcuda.so.1 -o $@ $(CUDA_DOUBLE_SRC) -lpthread
cuda-double: $(CUDA_DOUBLE)

# The daemon's CUDA backend and the client's CUDA path against the double,
# under ASan+UBSan (docs/GPU.md, "Testing"). Part of `make test`.
CUDA_DOUBLE_BUILD := build/san-address-undefined
test-cuda-double: deps
	@$(MAKE) --no-print-directory SANITIZER=address,undefined CUDA=yes \
	  $(CUDA_DOUBLE_BUILD)/tensord $(CUDA_DOUBLE_BUILD)/tensord-client \
	  $(CUDA_DOUBLE_BUILD)/libtensord-client.so $(CUDA_DOUBLE_BUILD)/cuda-double/libcuda.so.1
	@TENSORD_CUDA_BUILD=$(CUDA_DOUBLE_BUILD) $(PYTHON) tests/cuda_double/run.py

.PHONY: FORCE all deps deps-apt run test test-cuda-double cuda-double unit fuzz fuzz-smoke install clean integration print-% bench bench-header bench-hub bench-leases bench-remote bench-sha256 bench-hash soak tsan tsan-test dist
all: $(BUILD)/tensord $(BUILD)/libtensord-client.so $(BUILD)/tensord-client

# The flags a build directory was compiled with: objects depend on this
# file, which is rewritten only when the flags change (make CUDA=no after a
# CUDA build, CFLAGS=...), so one directory never mixes two configurations.
BUILD_FLAGS := $(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) $(LDLIBS)
$(BUILD)/flags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(subst ','\'',$(BUILD_FLAGS))' | cmp -s - $@ || echo '$(subst ','\'',$(BUILD_FLAGS))' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libtensord-core.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tensord: $(SERVER_OBJ) $(BUILD)/libtensord-core.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The client library is position-independent and links only libc (+dl for
# CUDA). Of core it takes the answer reader's tokenizer, json_scan, and what
# that calls (strmap's fallible half, util's UTF-8 and hex helpers); every
# function is its own section and the link drops those nothing calls, so
# core's allocation wrappers, which abort on OOM, never reach it: a worker
# must get errors from it, never an abort. Only tensord_* is exported.
CLIENT_CORE_SRC := core/json_scan.c core/strmap.c core/util.c
CLIENT_PIC_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/pic/%.o) $(CLIENT_CORE_SRC:%.c=$(BUILD)/pic/%.o)
$(BUILD)/pic/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -ffunction-sections -fdata-sections \
	  -MMD -MP -c $< -o $@
$(BUILD)/libtensord-client.so: $(CLIENT_PIC_OBJ)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libtensord-client.so.0 -Wl,--gc-sections \
	  -o $@ $^ -ldl -lpthread
$(BUILD)/tensord-client: $(BUILD)/obj/client/cli.o $(CLIENT_OBJ) $(BUILD)/libtensord-core.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# -MMD: a test is rebuilt when a header it includes (test.h, a fixture)
# changes, not only its own .c.
$(BUILD)/tests/%: tests/unit/%.c $(SERVER_LIB_OBJ) $(CLIENT_OBJ) $(BUILD)/libtensord-core.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/unit $(ALL_CFLAGS) -MMD -MP -MF $@.d $(LDFLAGS) -o $@ $^ $(LDLIBS)

unit: $(UNIT_BIN)
	@$(PYTHON) tests/run_unit.py $(UNIT_BIN)

# libFuzzer targets are built with clang into build/fuzz. Every object needs
# the fuzzer's coverage instrumentation (fuzzer-no-link), so the library is
# compiled once for all targets into build/fuzz/libtensord-fuzz.a, and each
# target links it with the fuzzer's main.
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_FLAGS := -g -O1 $(FUZZ_SAN)
FUZZ_LIB_SRC := $(CORE_SRC) $(filter-out server/main.c,$(SERVER_SRC)) $(CLIENT_SRC)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=build/fuzz/obj/%.o)
build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CLANG) $(CPPFLAGS) -std=c11 -pthread $(PKG_CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link \
	  -MMD -MP -c $< -o $@
build/fuzz/libtensord-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
build/fuzz/%: tests/fuzz/%.c build/fuzz/libtensord-fuzz.a
	@mkdir -p $(dir $@)
	$(CLANG) $(CPPFLAGS) -std=c11 -pthread $(PKG_CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $^ \
	  $(LDLIBS)

fuzz-build: $(FUZZ_BIN)
# Short smoke run of every target plus a replay of past crash inputs.
fuzz-smoke: $(FUZZ_BIN)
	@$(PYTHON) tests/fuzz/run.py --seconds $(FUZZ_SMOKE_SECONDS) $(FUZZ_BIN)
FUZZ_SMOKE_SECONDS ?= 5
fuzz: $(FUZZ_BIN)
	@$(PYTHON) tests/fuzz/run.py --seconds $(FUZZ_SECONDS) $(FUZZ_BIN)

# Debian packages the build, the tests and the benchmarks need. Installed
# only when missing, so `make test` on a provisioned machine does not touch apt.
DEB_PKGS := build-essential pkg-config libmicrohttpd-dev liburing-dev libjansson-dev libssl-dev \
            nettle-dev libdlpack-dev clang libclang-rt-14-dev python3-numpy python3-pytest curl \
            prometheus systemd nginx nginx-light git wrk man-db groff-base python3-venv python3-torch aria2
deps: deps-apt $(VENV)/.installed
deps-apt:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Exact versions, no dependency resolution: what the file lists is what runs.
$(VENV)/.installed: tests/requirements.txt | deps-apt
	$(SYS_PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r tests/requirements.txt
	@touch $@

run: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) tests/gen/gen_models.py --demo models
	@echo
	@echo "tensord is starting on http://127.0.0.1:8077 serving ./models. Try:"
	@echo "  curl -s localhost:8077/v1/models"
	@echo "  curl -s localhost:8077/v1/models/demo-f32/header"
	@echo "  curl -s localhost:8077/v1/models/demo-f32/tensors/embed.weight -o embed.bin"
	@echo "  curl -s 'localhost:8077/v1/models/demo-f32/tensors/embed.weight?slice=0:2,1:3&format=npy' -o slice.npy"
	@echo "  curl -s -H 'Range: bytes=0-7' localhost:8077/v1/models/demo-sharded/files/model-00001-of-00002.safetensors | xxd"
	@echo
	exec $(BUILD)/tensord serve --models models --listen 127.0.0.1:8077 --ipc-socket $(CURDIR)/$(BUILD)/tensord.sock

test: deps
	@$(PYTHON) tests/run_all.py

integration: all
	@$(PYTHON) -m pytest -q tests/integration

bench: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/run.py

# Remote tensors: tensord.load_file against hf_hub_download and aria2c from
# nginx and a local safetensors load, tensor-parallel fetches, get_slice
# (bench/remote.py; about 2.5 GB of models, cached in build/bench/models).
bench-remote: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/remote.py $(BENCH_REMOTE_ARGS)

# snapshot_download of a 2 GiB sharded repo from tensord's Hugging Face
# endpoint against nginx serving the same files in a static Hub layout
# (bench/hub.py; docs/PERFORMANCE.md "Hugging Face endpoint").
bench-hub: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/hub.py $(BENCH_HUB_ARGS)

# Validation time of a 500,000-tensor header (README quotes it).
bench-header: $(BUILD)/libtensord-core.a
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $(BUILD)/bench_st_header bench/bench_st_header.c \
	  $(BUILD)/libtensord-core.a $(LDLIBS)
	$(BUILD)/bench_st_header

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
bench-hash: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/bench_hash.py

# Load and soak (not part of `make test`): SOAK_SECONDS of mixed traffic.
SOAK_SECONDS ?= 60
soak: all
	@$(PYTHON) tests/soak/soak.py --seconds $(SOAK_SECONDS)

# ThreadSanitizer (docs/ARCHITECTURE.md, "Lock order"): the unit tests whose
# threads share state (the hasher's workers, housekeeper and saver, the
# document renderer, readers racing registry reloads, the connection
# reaper, the GPU manager, metrics, the log), built with -fsanitize=thread
# into build/san-thread; a report fails the run. Part of `make test`.
TSAN_UNITS := test_hasher test_hasher_work test_doc_cache test_registry test_hashstore \
              test_conns test_gpu_manager test_metrics test_log
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
dist: deps
	@rm -rf $(BUILD)/pysrc && mkdir -p $(BUILD)/pysrc $(BUILD)/dist
	tar -C client/python --exclude=__pycache__ -cf - pyproject.toml README.md tensord | tar -C $(BUILD)/pysrc -xf -
	cp LICENSE $(BUILD)/pysrc/
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w $(BUILD)/dist $(BUILD)/pysrc
	@ls $(BUILD)/dist/tensord-*.whl

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/doc/tensord \
	  $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(SYSCONFDIR)/tensord
	install -m 0755 $(BUILD)/tensord $(BUILD)/tensord-client $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(BUILD)/libtensord-client.so $(DESTDIR)$(PREFIX)/lib/libtensord-client.so.0
	ln -sf libtensord-client.so.0 $(DESTDIR)$(PREFIX)/lib/libtensord-client.so
	install -m 0644 client/tensord_client.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 docs/tensord.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 systemd/tensord.service $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 docs/OPERATIONS.md docs/CONFIG.md docs/API.md systemd/tensord-gpu.conf \
	  $(DESTDIR)$(PREFIX)/share/doc/tensord/
	@# An operator's edited configuration is never overwritten.
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf ]; then \
	  echo "keeping existing $(DESTDIR)$(SYSCONFDIR)/tensord/tensord.conf"; \
	else install -m 0644 config/tensord.conf $(DESTDIR)$(SYSCONFDIR)/tensord/; fi

clean:
	rm -rf build

print-%:
	@echo $($*)

-include $(shell find $(BUILD)/obj $(BUILD)/pic $(BUILD)/tests build/fuzz/obj -name '*.d' 2>/dev/null)
