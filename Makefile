# ringmaster — one Makefile for the operator, the worker, kubesim and the tests.
#
# Knobs (NCCL style):  DEBUG=0|1  ASAN=0|1  UBSAN=0|1  WERROR=0|1 (1 under CI)
#                      CUDA=auto|0|1  NVCC_GENCODE=...  CUDA_HOME=/usr/local/cuda  PREFIX=/usr/local
# Layout of sources (wildcards, so a new module needs no Makefile edit):
#   common/*.c            -> libcommon.a        (shared runtime)
#   kernels/*.c           -> libkernels.a       (C reference kernels)
#   kernels/cuda/*.{c,cu}, worker/**/cuda/*.{c,cu}  (only when CUDA is on)
#   kernels/nocuda/*.c, worker/**/nocuda/*.c        (only when CUDA is off)
#   worker/**.c - main.c  -> libworker.a,  worker/main.c   -> bin/ringmaster-worker
#                            (every folder of worker/ by concern; cuda/ and nocuda/ halves beside
#                            each backend table)
#   operator/**.c - main.c-> liboperator.a, operator/main.c -> bin/ringmaster
#   tests/kubesim/*.c     -> bin/kubesim
#   tests/unit/test_*.c   -> unit-tests (one CUnit runner; each file defines rm_suite_<name>())
# Release objects go to build/release and binaries to bin/; ASAN/UBSAN/DEBUG builds go to
# build/<variant>/ with their binaries in build/<variant>/bin/ so they never clobber bin/.

# `make` alone builds everything: the configuration rule below comes first in the file.
.DEFAULT_GOAL := all

DEBUG  ?= 0
ASAN   ?= 0
UBSAN  ?= 0
ifneq ($(CI),)
WERROR ?= 1
else
WERROR ?= 0
endif
CUDA         ?= auto
CUDA_HOME    ?= /usr/local/cuda
# Device code for every current datacenter GPU (A100 sm_80, A10/A40 sm_86, L4/L40 sm_89, H100/H200
# sm_90, B200 sm_100) plus PTX of the newest for later ones; ctx_init names a missing one.
NVCC_GENCODE ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86 \
                -gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90,code=sm_90 \
                -gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100
PREFIX       ?= /usr/local
DESTDIR      ?=

ifeq ($(ASAN)$(UBSAN),00)
  ifeq ($(DEBUG),1)
    VARIANT := debug
  else
    VARIANT := release
  endif
else
  VARIANT := asan
endif
BUILDDIR ?= build/$(VARIANT)
ifeq ($(VARIANT),release)
BINDIR ?= bin
else
BINDIR ?= $(BUILDDIR)/bin
endif

# ---- configuration: flags that depend on installed packages ---------------------------------
# scripts/configure.sh writes them to $(BUILDDIR)/config.mk on every run of make (rewriting it only
# when they change), and every object depends on that file: flags are never computed from a machine
# state older than this make, and objects built before `make deps` installed a package are rebuilt.
# A missing required package is a build error naming it (MPI=0 leaves the mpi backend out on purpose).
MPI ?= 1
NVCC := $(CUDA_HOME)/bin/nvcc
CONFIG_MK := $(BUILDDIR)/config.mk
NOCONFIG_GOALS := deps deps-build deps-bench deps-images clean distclean images test-fresh crd-docs
# non-empty when some goal of this make compiles (plain `make` is `all`): only then are config.mk
# and flags.mk (below) remade and included; `make deps` must not configure before it installs.
BUILDING := $(filter-out $(NOCONFIG_GOALS),$(or $(MAKECMDGOALS),all))
ifneq ($(BUILDING),)
$(CONFIG_MK): FORCE
	@MPI='$(MPI)' CUDA='$(CUDA)' CUDA_HOME='$(CUDA_HOME)' scripts/configure.sh $@
include $(CONFIG_MK)
endif
.PHONY: FORCE config-check
FORCE:
config-check: $(CONFIG_MK)
	$(if $(RM_CONFIG_ERROR),$(error $(RM_CONFIG_ERROR)))

# ---- flags ----------------------------------------------------------------------------------
CC      ?= cc
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla -Wformat=2 -Wno-unused-parameter
CSTD    := -std=c11 -D_GNU_SOURCE
# -O2 vectorises a loop only when no scalar remainder is left (gcc's "very-cheap" cost model), and
# sqrtf's errno keeps Adagrad/Adam scalar: the dynamic cost model and -fno-math-errno let the
# element-wise loops (optimizers, sums, scaling) use SIMD. Each element still gets the same IEEE
# operations in the same order (no reassociation, no contraction under -std=c11), so results are
# bit-identical; Adagrad over 535k floats: 1.24 -> 0.31 ms (BENCHMARKS.md).
OPT     := $(if $(filter 1,$(DEBUG)),-O0 -g3,-O2 -g -fvect-cost-model=dynamic) -fno-math-errno
SAN     := $(if $(filter 1,$(ASAN)),-fsanitize=address -fno-omit-frame-pointer) \
           $(if $(filter 1,$(UBSAN)),-fsanitize=undefined -fno-sanitize-recover=undefined)
DEPFLAGS = -MMD -MP
CFLAGS  += $(CSTD) $(OPT) $(WARN) $(if $(filter 1,$(WERROR)),-Werror) $(SAN) -I. -pthread \
           $(MPI_CFLAGS) -DRM_HAVE_MPI=$(MPI_ON) -DRM_HAVE_CUDA=$(CUDA_ON)
LDFLAGS += $(SAN) -pthread -Wl,--as-needed
LIBS    := -lcurl -lcjson -lmicrohttpd -lyaml -lopenblas -lz $(MPI_LIBS) -lm
ifeq ($(CUDA_ON),1)
CFLAGS    += -I$(CUDA_HOME)/include
NVCCFLAGS ?= -O3 -std=c++17 --threads 0 $(NVCC_GENCODE) -Xcompiler -fPIC,-Wall -I. -I$(CUDA_HOME)/include -DRM_HAVE_CUDA=1
LIBS      += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart -lstdc++
endif

# ---- sources --------------------------------------------------------------------------------
COMMON_SRC   := $(wildcard common/*.c)
KERNELS_SRC  := $(wildcard kernels/*.c)
# worker/ is one level of folders by concern, each with optional cuda/ and nocuda/ halves.
WORKER_DIRS  := worker $(patsubst %/,%,$(filter-out %/cuda/ %/nocuda/,$(wildcard worker/*/)))
WORKER_SRC   := $(filter-out worker/main.c,$(wildcard $(addsuffix /*.c,$(WORKER_DIRS))))
OPERATOR_SRC := $(filter-out operator/main.c,$(wildcard operator/*.c operator/*/*.c))
KUBESIM_SRC  := $(filter-out tests/kubesim/main.c,$(wildcard tests/kubesim/*.c))
UNIT_SRC     := $(wildcard tests/unit/*.c)
ifeq ($(CUDA_ON),1)
KERNELS_CU   := $(wildcard kernels/cuda/*.cu)
KERNELS_SRC  += $(wildcard kernels/cuda/*.c)
WORKER_SRC   += $(wildcard $(addsuffix /cuda/*.c,$(WORKER_DIRS)))
WORKER_CU    := $(wildcard $(addsuffix /cuda/*.cu,$(WORKER_DIRS)))
else
KERNELS_CU   :=
WORKER_CU    :=
KERNELS_SRC  += $(wildcard kernels/nocuda/*.c)
WORKER_SRC   += $(wildcard $(addsuffix /nocuda/*.c,$(WORKER_DIRS)))
endif

obj = $(patsubst %.c,$(BUILDDIR)/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILDDIR)/%.cu.o,$(1))

LIBCOMMON   := $(BUILDDIR)/libcommon.a
LIBKERNELS  := $(BUILDDIR)/libkernels.a
LIBWORKER   := $(BUILDDIR)/libworker.a
LIBOPERATOR := $(BUILDDIR)/liboperator.a
LIBKUBESIM  := $(BUILDDIR)/libkubesim.a
ALL_LIBS    := $(LIBOPERATOR) $(LIBWORKER) $(LIBKUBESIM) $(LIBKERNELS) $(LIBCOMMON)

RINGMASTER  := $(BINDIR)/ringmaster
WORKER      := $(BINDIR)/ringmaster-worker
KUBESIM     := $(BINDIR)/kubesim
UNITTESTS   := $(BINDIR)/unit-tests

.PHONY: all deps deps-build deps-images images test-fresh crd-docs test test-unit test-e2e test-gpu bench demo install clean distclean info
all: $(RINGMASTER) $(WORKER) $(KUBESIM)

info:
	@echo "variant=$(VARIANT) builddir=$(BUILDDIR) bindir=$(BINDIR) cuda=$(CUDA_ON) werror=$(WERROR)"

# The compile commands themselves, rewritten only when they change (like config.mk, and like it an
# included makefile, remade before anything else, so a make with nothing to do still says so): an
# edit of the flags here (or CFLAGS=... on the command line) rebuilds the objects instead of
# linking stale ones. The file holds them as comments.
FLAGS_STAMP := $(BUILDDIR)/flags.mk
ifneq ($(BUILDING),)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@printf '# %s\n' '$(CC) $(CFLAGS)' '$(NVCC) $(NVCCFLAGS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
include $(FLAGS_STAMP)
endif

$(BUILDDIR)/%.o: %.c $(CONFIG_MK) $(FLAGS_STAMP) | config-check
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILDDIR)/%.cu.o: %.cu $(CONFIG_MK) $(FLAGS_STAMP) | config-check
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(LIBCOMMON):   $(call obj,$(COMMON_SRC))
$(LIBKERNELS):  $(call obj,$(KERNELS_SRC)) $(call cuobj,$(KERNELS_CU))
$(LIBWORKER):   $(call obj,$(WORKER_SRC)) $(call cuobj,$(WORKER_CU))
$(LIBOPERATOR): $(call obj,$(OPERATOR_SRC))
$(LIBKUBESIM):  $(call obj,$(KUBESIM_SRC))
$(ALL_LIBS):
	@mkdir -p $(dir $@)
	@rm -f $@
	$(AR) rcs $@ $^

# (the runner checks RINGMASTER_FAULT with the worker's own parser, common/faults_parse.c)
$(RINGMASTER): $(call obj,operator/main.c) $(LIBOPERATOR) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
# Libraries in dependency order (worker -> kernels -> common); none calls back up.
$(WORKER): $(call obj,worker/main.c) $(LIBWORKER) $(LIBKERNELS) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
$(KUBESIM): $(call obj,tests/kubesim/main.c) $(LIBKUBESIM) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# One CUnit runner: tests/unit/test_<name>.c defines void rm_suite_<name>(void).
$(BUILDDIR)/gen/suites.h: $(wildcard tests/unit/test_*.c)
	@mkdir -p $(dir $@)
	@for f in $(sort $(notdir $(basename $(wildcard tests/unit/test_*.c)))); do \
	  echo "RM_SUITE($${f#test_})"; done > $@.tmp && mv $@.tmp $@
$(BUILDDIR)/tests/unit/main.o: $(BUILDDIR)/gen/suites.h
$(BUILDDIR)/tests/unit/main.o: CFLAGS += -I$(BUILDDIR)/gen
$(UNITTESTS): $(call obj,$(UNIT_SRC)) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(UNIT_SRC)) $(ALL_LIBS) $(LIBS) -lcunit

-include $(shell find $(BUILDDIR) -name '*.d' 2>/dev/null)

# ---- packages -------------------------------------------------------------------------------
# DEB_BUILD_PKGS: what building needs (the image build stages install only these: `make deps-build`).
DEB_BUILD_PKGS := build-essential pkg-config libcurl4-openssl-dev libcjson-dev libmicrohttpd-dev zlib1g-dev \
            libcunit1-dev libyaml-dev libopenblas-dev libopenmpi-dev
DEB_PKGS := $(DEB_BUILD_PKGS) openmpi-bin \
            dataset-fashion-mnist prometheus python3-kubernetes python3-yaml python3-jsonschema \
            curl procps iproute2 clang-format python3-torch python3-numpy
# BENCH_PKGS: the peers and limits of bench/ (bench/gpt/sgemm_peak.c times BLIS and oneDNN beside
# OpenBLAS; gnuplot draws bench/results/gpt-loss.png).
BENCH_PKGS := python3-torch libblis-dev libdnnl-dev gnuplot-nox
# podman + runc run the images (crun fails on hybrid cgroups), mmdebstrap makes the Debian base,
# Go + sprig + YAML + JSON Schema libraries build the Helm renderer (tests/helm-render).
IMAGE_PKGS := podman runc mmdebstrap uidmap openssl
HELM_PKGS  := golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev \
              golang-github-xeipuuv-gojsonschema-dev
# NPM_DIRS: folders whose package-lock.json pins npm packages the tests run (tests/s3: s3rver).
NPM_DIRS := tests/s3
deps:
	@scripts/install-deps.sh $(DEB_PKGS)
	@scripts/install-npm-deps.sh $(NPM_DIRS)
deps-build:
	@scripts/install-deps.sh $(DEB_BUILD_PKGS)
deps-bench:
	@scripts/install-deps.sh $(DEB_PKGS) $(BENCH_PKGS)
	@scripts/install-npm-deps.sh $(NPM_DIRS)
deps-images:
	@scripts/install-deps.sh $(IMAGE_PKGS) $(HELM_PKGS)

# ---- images ---------------------------------------------------------------------------------
# `make images`: ringmaster/operator:latest and ringmaster/worker:cpu with podman from the Dockerfile
# (the Debian base made with mmdebstrap when missing). IMAGES="operator worker-cpu torch torch-elastic" picks.
IMAGES ?= operator worker-cpu
images: deps-images
	scripts/images.sh $(IMAGES)

# `make crd-docs`: the CRD's field descriptions from scripts/crd-descriptions.yaml (idempotent; touches
# only description: keys, so re-run it after editing the schema). tests/e2e/13-crd-docs.sh checks it.
crd-docs:
	/usr/bin/python3 scripts/crd-docs.py

# `make test-fresh` (not part of `make test`): a clean Debian container with this repository copied
# in runs the README's `make demo` then `make test`; both must succeed.
test-fresh: deps-images
	tests/fresh/run.sh

# ---- tests ----------------------------------------------------------------------------------
# `make test`: deps, then (in fresh makes that configure after deps) the release build (warnings as errors), the unit tests under ASan+UBSan,
# then every end-to-end script in tests/e2e against the release binaries.
NPROC := $(shell nproc 2>/dev/null || echo 2)
# deps-images: the container e2e tests (kubesim --runtime podman, the images, the Helm renderer) run in CI.
test: deps deps-images
	$(MAKE) -j$(NPROC) WERROR=1 all
	$(MAKE) -j$(NPROC) ASAN=1 UBSAN=1 WERROR=1 test-unit
	$(MAKE) -j$(NPROC) WERROR=1 test-e2e

# every suite, UNIT_JOBS at a time (tests/run-unit.sh); SUITES="a b" runs the suites whose names
# contain a or b, one process in order
test-unit: $(UNITTESTS) all
	ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:abort_on_error=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	RM_BIN=$(abspath $(BINDIR)) $(if $(SUITES),$(UNITTESTS) $(SUITES),tests/run-unit.sh $(UNITTESTS))

test-e2e: all
	RM_BIN=$(abspath $(BINDIR)) tests/run-e2e.sh $(E2E)

test-gpu: all
	RM_BIN=$(abspath $(BINDIR)) tests/gpu/run.sh

# deps first, then a fresh make: its configure step sees the packages deps just installed.
bench: deps-bench
	$(MAKE) all
	bench/run-all.sh

demo: deps
	$(MAKE) all
	$(RINGMASTER) run -f deploy/examples/fashion-mnist.yaml

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/ringmaster
	install -m 0755 $(RINGMASTER) $(WORKER) $(DESTDIR)$(PREFIX)/bin/
	# the kubectl plugin (operator/kubectl.h) and kubectl's completion for it: the same binary
	ln -sf ringmaster $(DESTDIR)$(PREFIX)/bin/kubectl-ringmaster
	ln -sf ringmaster $(DESTDIR)$(PREFIX)/bin/kubectl_complete-ringmaster
	cp -r deploy $(DESTDIR)$(PREFIX)/share/ringmaster/
	cp -r datasets $(DESTDIR)$(PREFIX)/share/ringmaster/

clean:
	rm -rf build bin
distclean: clean
