# SPDX-License-Identifier: MIT
# kvmm - the KV-cache memory manager.  Kbuild-shaped GNU make:
# each directory's Kbuild lists its objects; this file holds the rules.
#
#   make [V=1] [O=dir] [DEBUG=0..3] [SAN=address,undefined|thread]
#   make help

VERSION		:= 0.2.0
# Before 1.0 a minor version may break the ABI (0.2: struct kvmm_params
# sized and regrouped, the ring API in its own header, renames), so the
# soname carries it.
SONAME_MAJOR	:= 0.2

MAKEFLAGS	+= -rR --no-print-directory
comma		:= ,

# ---- knobs ----
ifeq ("$(origin V)", "command line")
  KBUILD_VERBOSE := $(V)
endif
ifeq ($(KBUILD_VERBOSE),1)
  quiet :=
  Q :=
else
  quiet := quiet_
  Q := @
endif
# make -s: no output at all, as Kbuild's silent_ mode
ifneq ($(findstring s,$(firstword -$(MAKEFLAGS))),)
  quiet := silent_
endif

DEBUG		?= 0
CHECK_DEBUG	?= 3
SAN		?=
O		?= build$(if $(SAN),-$(subst $(comma),-,$(SAN)))
PREFIX		?= /usr/local
LIBDIR		?= $(PREFIX)/lib
INCLUDEDIR	?= $(PREFIX)/include
BINDIR		?= $(PREFIX)/bin
MANDIR		?= $(PREFIX)/share/man
DOCDIR		?= $(PREFIX)/share/doc/kvmm
AR		?= ar
ifeq ($(origin AR),default)
  AR := ar
endif

srctree		:= $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
objtree		:= $(abspath $(O))
SHARED		?= $(abspath $(srctree)/../shared)

# One compiler per output tree, remembered: CC given on the command line
# or in the environment is used and recorded in O/toolchain.mk; without
# one, the recorded one, else cc.  make's built-in default does not count
# (a sub-make, under -R, has none), so make, make run, make install and
# pip's make lib all build with the same compiler and never rebuild for
# a switch between them.
-include $(objtree)/toolchain.mk
ifneq ($(filter default undefined,$(origin CC)),)
  CC := $(or $(KVMM_CC),cc)
endif

# ---- configuration (generated once per output tree) ----
autoconf	:= $(objtree)/include/generated/autoconf.h
-include $(objtree)/config.mk

# ---- flags ----
c_flags	:= -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -Wstrict-prototypes \
	   -Wno-unused-parameter -fno-strict-aliasing -fPIC -fvisibility=hidden \
	   -D_GNU_SOURCE -pthread -DKVMM_DEBUG=$(DEBUG) \
	   -I$(srctree)/include -I$(srctree)/uapi -I$(objtree)/include/generated \
	   -MMD -MP $(CFLAGS)
ld_flags := -pthread $(LDFLAGS)
ifneq ($(SAN),)
  c_flags  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  ld_flags += -fsanitize=$(SAN)
endif

# ---- Kbuild: collect obj-y from each directory, recursing into dir/ ----
define kbuild_dir
obj-y :=
include $(srctree)/$(1)/Kbuild
$(2) := $$($(2)) $$(addprefix $(1)/,$$(filter %.o,$$(obj-y)))
$$(foreach d,$$(filter %/,$$(obj-y)),$$(eval $$(call kbuild_dir,$(1)/$$(d:/=),$(2))))
endef

lib-objs :=
$(eval $(call kbuild_dir,kvmm,lib-objs))
$(eval $(call kbuild_dir,disp,lib-objs))
$(eval $(call kbuild_dir,driver,lib-objs))
$(eval $(call kbuild_dir,ipc,lib-objs))
$(eval $(call kbuild_dir,kernels,lib-objs))

progs-y :=
-include $(srctree)/tools/Kbuild
tests-y :=
-include $(srctree)/tests/Kbuild

LIB_A	:= $(objtree)/libkvmm.a
LIB_SO	:= $(objtree)/libkvmm.so.$(VERSION)
PROGS	:= $(addprefix $(objtree)/bin/,$(progs-y))
TESTS	:= $(objtree)/tests/kvmm-tests

all-objs := $(lib-objs) $(foreach p,$(progs-y),$(addprefix tools/,$($(p)-objs))) \
	    $(addprefix tests/,$(tests-y)) $(addprefix tools/,$(tests-tools-y)) $(addprefix fuzz/,$(addsuffix .o,dispatch_fuzz ring_fuzz remote_fuzz)) \
	    tests/stress/stress.o tests/stress/stress_client.o

# Libraries libkvmm itself needs, for every link against libkvmm.a.
lib_libs := $(if $(filter y,$(CONFIG_KVMM_LIBNUMA)),-lnuma) $(if $(filter y,$(CONFIG_KVMM_LIBURING)),-luring) \
	    $(if $(filter y,$(CONFIG_KVMM_HIREDIS)),-lhiredis)

# ---- commands, quiet unless V=1 ----
cmd = @$(if $($(quiet)cmd_$(1)),echo '  $($(quiet)cmd_$(1))';) $(cmd_$(1))
quiet_cmd_cc	= CC      $(@:$(objtree)/%=%)
      cmd_cc	= $(CC) $(c_flags) -c -o $@ $<
quiet_cmd_ar	= AR      $(@:$(objtree)/%=%)
      cmd_ar	= rm -f $@ && $(AR) rcs $@ $^
quiet_cmd_so	= LD      $(@:$(objtree)/%=%)
      cmd_so	= $(CC) -shared -Wl,-soname,libkvmm.so.$(SONAME_MAJOR) \
		  -Wl,--version-script=$(srctree)/scripts/libkvmm.map \
		  $(ld_flags) -o $@ $(filter %.o,$^) $(lib_libs) && \
		  ln -sf libkvmm.so.$(VERSION) $(objtree)/libkvmm.so.$(SONAME_MAJOR) && \
		  ln -sf libkvmm.so.$(VERSION) $(objtree)/libkvmm.so
quiet_cmd_link	= LD      $(@:$(objtree)/%=%)
      cmd_link	= $(CC) $(ld_flags) -o $@ $(filter %.o %.a,$^) $(link_libs) $(lib_libs)

.PHONY: all lib tools tests check check-engines bench run demo demo-transformers install uninstall clean \
	distclean help config deps FORCE
.DEFAULT_GOAL := all

all: lib tools

lib: $(LIB_A) $(LIB_SO)

tools: $(PROGS)

tests: $(TESTS)

# config.mk is an included makefile with a rule: on a fresh tree make
# generates it, then restarts and sees the probed features.
$(objtree)/config.mk: $(srctree)/scripts/config.sh
	$(Q)$(srctree)/scripts/config.sh "$(CC)" "$(objtree)"

$(autoconf): $(objtree)/config.mk

config:
	$(Q)$(srctree)/scripts/config.sh "$(CC)" "$(objtree)"

# Objects depend on the flags they were built with: a change of DEBUG or
# SAN rebuilds, as Kbuild's .cmd files do.
$(objtree)/.flags: FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(c_flags) $(ld_flags)' | cmp -s - $@ || \
		echo '$(CC) $(c_flags) $(ld_flags)' > $@
	@[ "$(KVMM_CC)" = "$(CC)" ] || echo 'KVMM_CC := $(CC)' > $(objtree)/toolchain.mk

$(objtree)/%.o: $(srctree)/%.c $(objtree)/.flags $(autoconf)
	@mkdir -p $(@D)
	$(call cmd,cc)

# driver/csum: a second build of the checksum for AVX2, chosen at run time.
ifeq ($(shell uname -m),x86_64)
$(objtree)/driver/csum/csum_avx2.o: c_flags += -mavx2
$(objtree)/driver/csum/csum_sse2.o: c_flags += -DKVMM_CSUM_AVX2
endif

# tests/remote starts its cluster with scripts/redis-cluster.sh
$(objtree)/tests/remote/%.o: c_flags += -DKVMM_SRCTREE='"$(srctree)"'
$(objtree)/tests/hostile/remote_test.o: c_flags += -DKVMM_SRCTREE='"$(srctree)"'

# driver/cuda builds against the toolkit's cuda.h alone: libcuda.so.1 is
# opened at run time.
$(objtree)/driver/cuda/%.o: c_flags += -I$(CUDA_HOME)/include

# kernels/: nvcc builds kv.cu into a fatbin (SASS for sm_80 and sm_90, PTX
# for anything newer), which fatbin.S embeds in the library.
NVCC_FLAGS	:= -O3 -std=c++17 -I$(srctree)/kernels \
		   -gencode arch=compute_80,code=sm_80 \
		   -gencode arch=compute_90,code=sm_90 \
		   -gencode arch=compute_90,code=compute_90
quiet_cmd_nvcc	= NVCC    $(@:$(objtree)/%=%)
      cmd_nvcc	= $(NVCC) -fatbin $(NVCC_FLAGS) -o $@ $<
$(objtree)/kernels/kv.fatbin: $(srctree)/kernels/kv.cu $(srctree)/kernels/kv.h $(autoconf)
	@mkdir -p $(@D)
	$(call cmd,nvcc)

quiet_cmd_as	= AS      $(@:$(objtree)/%=%)
      cmd_as	= $(CC) $(c_flags) -DKVMM_FATBIN='"$(objtree)/kernels/kv.fatbin"' -c -o $@ $<
$(objtree)/kernels/fatbin.o: $(srctree)/kernels/fatbin.S $(objtree)/kernels/kv.fatbin
	@mkdir -p $(@D)
	$(call cmd,as)

$(LIB_A): $(addprefix $(objtree)/,$(lib-objs))
	$(call cmd,ar)

$(LIB_SO): $(addprefix $(objtree)/,$(lib-objs)) $(srctree)/scripts/libkvmm.map
	$(call cmd,so)

# tools/<prog>: <prog>-objs from tools/Kbuild, <prog>-libs for extra libraries
define prog_rule
$(objtree)/bin/$(1): link_libs = $$($(1)-libs) -lm
$(objtree)/bin/$(1): $$(addprefix $(objtree)/tools/,$$($(1)-objs)) $(LIB_A)
	@mkdir -p $$(@D)
	$$(call cmd,link)
endef
$(foreach p,$(progs-y),$(eval $(call prog_rule,$(p))))

FAKECUDA := $(objtree)/tests/libfakecuda.so
$(TESTS): link_libs = -lcunit -lm -ldl -ljansson \
	$(if $(filter y,$(CONFIG_KVMM_KVEVENTS)),-lzmq -lmsgpackc -lcrypto)
$(TESTS): $(addprefix $(objtree)/tests/,$(tests-y)) $(addprefix $(objtree)/tools/,$(tests-tools-y)) $(LIB_A) \
	  $(if $(filter y,$(CONFIG_KVMM_CUDA_H)),$(FAKECUDA))
	$(call cmd,link)

# A CUDA driver made of host memory, which the tests point the cuda
# backend at (tests/fakecuda/fakecuda.c); it sits beside kvmm-tests.
$(objtree)/tests/fakecuda/%.o: c_flags += -I$(CUDA_HOME)/include
quiet_cmd_fakecuda = LD      $(@:$(objtree)/%=%)
      cmd_fakecuda = $(CC) -shared $(ld_flags) -o $@ $^
$(FAKECUDA): $(objtree)/tests/fakecuda/fakecuda.o $(objtree)/kernels/ref.o
	$(call cmd,fakecuda)

# The multi-process stress test: kvmm-stress drives kvmm-stress-client
# processes and kvmmctl.
STRESS := $(objtree)/tests/kvmm-stress $(objtree)/tests/kvmm-stress-client
$(objtree)/tests/kvmm-stress: link_libs = -lcunit -lm
$(objtree)/tests/kvmm-stress: $(objtree)/tests/stress/stress.o $(objtree)/tests/helpers.o $(LIB_A)
	$(call cmd,link)
$(objtree)/tests/kvmm-stress-client: link_libs = -lm
$(objtree)/tests/kvmm-stress-client: $(objtree)/tests/stress/stress_client.o $(LIB_A)
	$(call cmd,link)

# ---- running ----
# Tests run at DEBUG=$(CHECK_DEBUG) (invariant walks after every operation)
# in their own output tree, so they never mix objects with a release build.
check:
	$(Q)$(srctree)/scripts/install-deps.sh
	$(Q)$(MAKE) -f $(srctree)/Makefile CC='$(CC)' DEBUG=$(CHECK_DEBUG) O=$(objtree)/check SAN=$(SAN) run-tests

.PHONY: run-tests
run-tests: $(TESTS) $(PROGS)
	@if [ "$(CONFIG_KVMM_CUNIT)" != y ]; then \
		echo "check: CUnit not found: install libcunit1-dev (make deps)" >&2; exit 1; fi
	$(Q)$(srctree)/python/check.sh $(objtree) "$(SAN)" $(TESTS) $(TESTARGS)

# The engines' own tests (vLLM, LMCache) against kvmm's adapters, and ours
# of the SGLang one, in virtual environments cached outside the clone
# (torch: several GB).
check-engines: all
	$(Q)$(srctree)/tests/engines/run.sh $(objtree) $(ENGINES)

# make stress [SAN=thread|address,undefined] [KILLS=N]
KILLS		?= 120
stress:
	$(Q)$(MAKE) -f $(srctree)/Makefile CC='$(CC)' DEBUG=$(CHECK_DEBUG) O=$(objtree)/check SAN=$(SAN) run-stress

.PHONY: stress run-stress
run-stress: $(STRESS) $(objtree)/bin/kvmmctl
	$(Q)$(objtree)/tests/kvmm-stress -k $(KILLS) -b $(objtree)/tests

BENCH_OUT	?= $(objtree)/bench.jsonl
WORKLOAD	?= $(SHARED)/bench/workload.txt
TRACE		?= $(SHARED)/traces/mooncake/conversation_trace.jsonl
bench: $(objtree)/bin/kvmm-bench
	$(Q)$(srctree)/scripts/bench.sh $(objtree)/bin/kvmm-bench "$(WORKLOAD)" "$(BENCH_OUT)" "$(TRACE)"

# make run: the reference engine on generated traffic, with and without
# the prefix cache, and its plots.  ENGINE_ARGS adds flags.
ENGINE_ARGS	?=
run: deps
	$(Q)$(MAKE) -f $(srctree)/Makefile CC='$(CC)' O=$(O) DEBUG=$(DEBUG) SAN=$(SAN) all
	$(Q)$(objtree)/bin/kvmm-engine --compare --plot $(objtree)/plots $(ENGINE_ARGS)
	@echo 'run: the compute a prefix cache saves a real model, measured: make demo-transformers'

# make demo-transformers: a small Llama-shaped model of Hugging Face
# transformers (random weights) through a multi-turn chat, with and without
# kvmm's prefix cache: measured TTFT per turn, tokens/s, and
# plots/hf_ttft.svg.  Its environment (torch, transformers: several GB) is
# cached outside the clone.  HF_ARGS adds flags (python/bench/hf_chat.py).
HF_ARGS		?=
demo-transformers: all
	$(Q)venv=$$($(srctree)/python/venv.sh transformers $(objtree)) && \
		$$venv/bin/python $(srctree)/python/bench/hf_chat.py demo --plot $(objtree)/plots $(HF_ARGS)

demo: all
	$(Q)$(objtree)/bin/kvmm-bench demo

deps:
	$(Q)$(srctree)/scripts/install-deps.sh

# libFuzzer harnesses (clang): each runs FUZZ_TIME seconds; a crash, a
# sanitizer report or a broken invariant (abort) fails the target.
FUZZ_TIME	?= 60
FUZZERS		:= dispatch_fuzz ring_fuzz remote_fuzz
fuzz:
	$(Q)$(MAKE) -f $(srctree)/Makefile CC=clang SAN=address,undefined DEBUG=2 \
		O=$(abspath $(srctree))/build-fuzz CFLAGS=-fsanitize=fuzzer-no-link fuzz-run

.PHONY: fuzz fuzz-run
fuzz-run: $(addprefix $(objtree)/fuzz/,$(FUZZERS))
	$(Q)set -e; for f in $(FUZZERS); do \
		mkdir -p $(objtree)/corpus/$$f; \
		echo "  FUZZ    $$f for $(FUZZ_TIME) s"; \
		$(objtree)/fuzz/$$f -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
			$(objtree)/corpus/$$f $$(ls -d $(srctree)/fuzz/seeds/$$f 2>/dev/null) \
			2>$(objtree)/fuzz/$$f.log || \
			{ tail -40 $(objtree)/fuzz/$$f.log; exit 1; }; \
		grep -E 'stat::number_of_executed_units|stat::peak_rss' $(objtree)/fuzz/$$f.log; \
	done

$(objtree)/fuzz/%: $(objtree)/fuzz/%.o $(LIB_A)
	$(Q)$(CC) $(ld_flags) -fsanitize=fuzzer -o $@ $^ $(lib_libs)

install: lib tools
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/kvmm \
		$(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(DOCDIR)
	install -m 644 $(srctree)/LICENSE $(DESTDIR)$(DOCDIR)/
	install -m 755 $(objtree)/bin/kvmmd $(objtree)/bin/kvmmctl $(objtree)/bin/kvmm-bench \
		$(objtree)/bin/kvmm-engine $(DESTDIR)$(BINDIR)/
	install -m 644 $(srctree)/Documentation/man/kvmm-bench.1 \
		$(srctree)/Documentation/man/kvmm-engine.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(srctree)/Documentation/man/kvmmd.8 \
		$(srctree)/Documentation/man/kvmmctl.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvmm.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkvmm.so.$(SONAME_MAJOR)
	ln -sf libkvmm.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkvmm.so
	install -m 644 $(srctree)/include/libkvmm.h $(srctree)/include/libkvmm-ring.h \
		$(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(srctree)/uapi/kvmm/kvmm.h $(srctree)/uapi/kvmm/ring.h \
		$(DESTDIR)$(INCLUDEDIR)/kvmm/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|; s|@LIBS_PRIVATE@|$(lib_libs)|' \
		$(srctree)/scripts/kvmm.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/kvmm.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libkvmm.a $(DESTDIR)$(LIBDIR)/libkvmm.so* \
	      $(DESTDIR)$(INCLUDEDIR)/libkvmm.h $(DESTDIR)$(INCLUDEDIR)/libkvmm-ring.h \
	      $(DESTDIR)$(INCLUDEDIR)/kvmm/kvmm.h \
	      $(DESTDIR)$(INCLUDEDIR)/kvmm/ring.h $(DESTDIR)$(BINDIR)/kvmmd \
	      $(DESTDIR)$(BINDIR)/kvmmctl $(DESTDIR)$(BINDIR)/kvmm-bench \
	      $(DESTDIR)$(BINDIR)/kvmm-engine $(DESTDIR)$(MANDIR)/man1/kvmm-engine.1 \
	      $(DESTDIR)$(MANDIR)/man1/kvmm-bench.1 $(DESTDIR)$(MANDIR)/man8/kvmmd.8 \
	      $(DESTDIR)$(MANDIR)/man8/kvmmctl.8 \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/kvmm.pc $(DESTDIR)$(DOCDIR)/LICENSE

clean:
	rm -rf $(objtree)

distclean:
	rm -rf $(srctree)/build $(srctree)/build-*

help:
	@echo 'Targets:'
	@echo '  all        library (libkvmm.a, libkvmm.so) and tools: kvmmd, kvmmctl, kvmm-bench, kvmm-engine'
	@echo '  check      build at DEBUG=$(CHECK_DEBUG) and run the CUnit suites, the Python'
	@echo '             package'"'"'s pytest suites (TESTARGS="-s python": those alone), the'
	@echo '             transformers suites (TESTARGS="-s transformers"; venv in ~/.cache/kvmm) and'
	@echo '             every example of README.md and Documentation/ (TESTARGS="-s examples")'
	@echo '  check-engines  vLLM'"'"'s and LMCache'"'"'s own tests against kvmm'"'"'s adapters, and'
	@echo '             ours of the SGLang one (pinned; venvs in ~/.cache/kvmm; ENGINES="vllm lmcache sglang")'
	@echo '  bench      run kvmm-bench micro and replay; JSON lines to BENCH_OUT'
	@echo '  run        install missing packages (as root), build, run kvmm-engine (ENGINE_ARGS)'
	@echo '  demo-transformers  a transformers model'"'"'s chat with and without kvmm'"'"'s prefix cache:'
	@echo '             measured TTFT per turn, tokens/s, plots/hf_ttft.svg (HF_ARGS)'
	@echo '  fuzz       libFuzzer harnesses (clang), FUZZ_TIME seconds each'
	@echo '  stress     clients killed at random while they use rings (KILLS=120)'
	@echo '  install    library, headers, kvmm.pc, kvmmd, kvmmctl, man pages, LICENSE under DESTDIR/PREFIX'
	@echo '  deps       install missing Debian packages (as root)'
	@echo '  config     probe features again into O/include/generated/autoconf.h'
	@echo '  clean      remove the output tree O'
	@echo 'Variables:'
	@echo '  V=1        print whole commands'
	@echo '  CC=...     the compiler (default cc), remembered by the output tree:'
	@echo '             later makes there use it until another is given'
	@echo '  O=dir      output tree (default build, build-<san> with SAN)'
	@echo '  DEBUG=0..3 0 static checks, 1 cheap warnings, 2 asserts,'
	@echo '             3 invariant walk after every operation'
	@echo '  SAN=...    sanitizers: address,undefined or thread'
	@echo '  WORKLOAD=  workload file for make bench (default ../shared/bench/workload.txt)'
	@echo '  TRACE=     Mooncake trace for make bench (default ../shared/traces/mooncake/...)'
	@echo '  TESTARGS=  arguments for the test binary (e.g. -s kvmm_prefix_tree)'

FORCE:

-include $(addprefix $(objtree)/,$(all-objs:.o=.d) tests/fakecuda/fakecuda.d)
