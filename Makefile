# kiln — top-level build.  Every stage folder compiles into one static
# library (build/libkiln.a); cli/ links it into bin/kiln.  New sources, unit
# tests (tests/unit/test_*.c), fuzz targets (tests/fuzz/fuzz_*.c), e2e tests
# (tests/e2e/t*.sh) and CLI commands (cli/cmd_*.c) are picked up by wildcard.

CC      ?= cc
CLANG   ?= clang
PKGS    := libarchive ext2fs libcurl openssl libzstd zlib sqlite3 jansson libmicrohttpd libpq fuse3
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
# The packages' flags are read when first used, not when make starts: in
# `make deps all` the packages are only there once deps has run.
PKG_CFLAGS = $(eval PKG_CFLAGS := $$(shell pkg-config --cflags $(PKGS) 2>/dev/null))$(PKG_CFLAGS)
PKG_LIBS = $(eval PKG_LIBS := $$(shell pkg-config --libs $(PKGS) 2>/dev/null))$(PKG_LIBS)
BASEFLAGS = -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. -Icommon -Ibuild/gen $(WARN) $(PKG_CFLAGS)
CFLAGS  ?= -O2 -g
LDLIBS  = $(PKG_LIBS) -lpthread -lm
SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

STAGES   := common oci dockerfile-parser rootfs builder vm guest snapshots regclient registry sign distrib service remote runtime
LIB_SRCS := $(sort $(foreach d,$(STAGES),$(wildcard $(d)/*.c)))
CLI_SRCS := $(sort $(wildcard cli/*.c))
CMD_SRCS := $(sort $(wildcard cli/cmd_*.c))
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
# The guest agent is a static, libc-only program: guest/agent/*.c plus the
# protocol codec guest/proto*.c (which is also part of libkiln for the host).
AGENT_SRCS := $(sort $(wildcard guest/agent/*.c) $(wildcard guest/proto*.c))

OBJ      := build/obj
ASAN     := build/asan
LIB_OBJS := $(LIB_SRCS:%.c=$(OBJ)/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(OBJ)/%.o)
ASAN_LIB_OBJS := $(LIB_SRCS:%.c=$(ASAN)/%.o)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(ASAN)/tests/%)
REPLAY_BINS := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=$(ASAN)/tests/replay_%)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build/fuzz/%)

.PHONY: all deps check test test-real test-faults demo fuzz clean clang-check check-layers install uninstall deb test-deb
.SECONDARY:
all: bin/kiln $(if $(AGENT_SRCS),bin/kiln-agent) build/man/kiln.1 build/kiln.bash-completion build/tests/cgroup-probe

# -- the library and the CLI ------------------------------------------------
$(OBJ)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

build/libkiln.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# The command table is generated from the cli/cmd_*.c file names, so adding a
# command is adding a file.  The header is only replaced when it changes.
build/gen/commands.h: $(CMD_SRCS) Makefile
	@mkdir -p $(@D)
	@for f in $(notdir $(basename $(CMD_SRCS))); do echo "KILN_CMD($${f#cmd_})"; done > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(OBJ)/cli/main.o: build/gen/commands.h

# The dashboard's files embedded in kiln serve as C arrays (docs/dashboard.md says why).
UI_FILES := $(sort $(wildcard registry/ui/*.html registry/ui/*.css registry/ui/*.js registry/ui/*.svg))
build/gen/ui_files.h: $(UI_FILES) registry/ui-embed.sh
	@mkdir -p $(@D)
	@registry/ui-embed.sh $(UI_FILES) > $@.tmp && mv $@.tmp $@
$(OBJ)/registry/ui.o $(ASAN)/registry/ui.o build/fuzzobj/registry/ui.o: build/gen/ui_files.h

bin/kiln: $(CLI_OBJS) build/libkiln.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJS) build/libkiln.a $(LDLIBS)

# AGENT_CFLAGS: e.g. -g for the Debian package, whose dh_strip moves the debug
# information into kiln-dbgsym (the agent itself is copied into every initramfs).
bin/kiln-agent: $(AGENT_SRCS) $(wildcard guest/*.h guest/agent/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -I. $(WARN) $(CPPFLAGS) -Os $(AGENT_CFLAGS) -static $(LDFLAGS) -o $@ $(AGENT_SRCS)

# A static program that drives vm/cgroup.c alone on a real cgroup v2
# hierarchy inside a guest whose kernel has cgroups (t0925).
build/tests/cgroup-probe: tests/guest/cgroup_probe.c build/libkiln.a
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(CFLAGS) -static $(LDFLAGS) -o $@ $< build/libkiln.a

# Man pages and bash completion come from the binary's own --help and
# --list-commands, so they cannot drift from it (t0900 checks the installed ones).
build/man/kiln.1: bin/kiln cli/gen-man.sh
	@rm -rf build/man
	cli/gen-man.sh bin/kiln build/man

build/kiln.bash-completion: bin/kiln cli/gen-completion.sh
	cli/gen-completion.sh bin/kiln $@

# -- install: PREFIX/bin/kiln, and the files it finds beside itself in
# PREFIX/lib/kiln (the agent, the guest kernel, the kernel scripts; vm/locate.c),
# man pages, bash completion, docs.  The list of what was installed is kept in
# PREFIX/lib/kiln/installed-files for `make uninstall`.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL ?= install
LIBEXEC := $(PREFIX)/lib/kiln
MANDIR  := $(PREFIX)/share/man/man1
DOCDIR  := $(PREFIX)/share/doc/kiln
COMPDIR := $(PREFIX)/share/bash-completion/completions
KERNEL  ?= build/kernel
DOCS    := README.md $(sort $(wildcard docs/*.md))

install: all
	@test -f $(KERNEL)/release || { echo "make install: no guest kernel in $(KERNEL) (run 'make deps' or vm/fetch-kernel.sh $(KERNEL))" >&2; exit 1; }
	@set -e; d='$(DESTDIR)'; p='$(PREFIX)'; list=$$(mktemp); \
	inst() { $(INSTALL) -D -m $$1 "$$2" "$$d$$3"; echo "$${3#$$p/}" >>$$list; }; \
	inst 755 bin/kiln $(PREFIX)/bin/kiln; \
	inst 755 bin/kiln-agent $(LIBEXEC)/kiln-agent; \
	inst 755 vm/fetch-kernel.sh $(LIBEXEC)/fetch-kernel.sh; \
	inst 755 vm/build-kernel.sh $(LIBEXEC)/build-kernel.sh; \
	inst 644 vm/kernel.config $(LIBEXEC)/kernel.config; \
	rm -rf "$$d$(LIBEXEC)/kernel"; \
	inst 644 $(KERNEL)/release $(LIBEXEC)/kernel/release; \
	cp -R $(KERNEL)/root "$$d$(LIBEXEC)/kernel/root"; \
	chmod -R u+rwX,go+rX,go-w "$$d$(LIBEXEC)/kernel/root"; \
	(cd $(KERNEL) && find root ! -type d) | sed 's|^|lib/kiln/kernel/|' >>$$list; \
	for f in build/man/*.1; do inst 644 $$f $(MANDIR)/$${f##*/}; done; \
	inst 644 build/kiln.bash-completion $(COMPDIR)/kiln; \
	for f in $(DOCS); do inst 644 $$f $(DOCDIR)/$${f##*/}; done; \
	echo lib/kiln/installed-files >>$$list; \
	$(INSTALL) -m 644 $$list "$$d$(LIBEXEC)/installed-files"; rm -f $$list; \
	echo "installed kiln in $$d$(PREFIX) (guest kernel $$(cat $(KERNEL)/release) in $(LIBEXEC)/kernel)"

# Removes exactly what install recorded, then kiln's own folders (lib/kiln,
# share/doc/kiln) once empty; shared ones (bin, man1, completions) stay.
uninstall:
	@set -e; d='$(DESTDIR)$(PREFIX)'; list="$$d/lib/kiln/installed-files"; \
	test -f "$$list" || { echo "make uninstall: no $$list: kiln is not installed in $$d" >&2; exit 1; }; \
	while IFS= read -r f; do rm -f "$$d/$$f"; done <"$$list"; \
	for dir in "$$d/lib/kiln" "$$d/share/doc/kiln"; do \
		[ ! -d "$$dir" ] || find "$$dir" -depth -type d -empty -delete; done; \
	echo "removed kiln from $$d"

# The Debian package (debian/), built from this tree; ../kiln_*.deb.
deb:
	dpkg-buildpackage -us -uc -b

# Slower than `make test` (a second compile, lintian, apt install, e2e tests
# against /usr/bin/kiln, purge): tests/deb.sh.
test-deb: deps all
	@tests/run.sh tests/deb.sh

# -- unit tests under ASan + UBSan ----------------------------------------------
$(ASAN)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) -O1 -g $(SAN) -MMD -MP -c $< -o $@

$(ASAN)/libkiln.a: $(ASAN_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(ASAN)/tests/test_%: $(ASAN)/tests/unit/test_%.o $(ASAN)/libkiln.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $< $(ASAN)/libkiln.a $(LDLIBS)

# Each fuzz target also builds as a plain program that replays its corpus,
# so `make check` runs every saved input under the sanitizers without clang.
$(ASAN)/tests/replay_%: $(ASAN)/tests/fuzz/fuzz_%.o $(ASAN)/tests/fuzz/replay.o $(ASAN)/libkiln.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $< $(ASAN)/tests/fuzz/replay.o $(ASAN)/libkiln.a $(LDLIBS)

# T=NAME runs one test (tests/README.md): a unit program or a replay
# (T=test_df_parse, T=replay_plan; T=test_df_parse:test_onbuild runs one case
# of it, through KILN_TEST_ONLY) for check; for test also an e2e test by its
# number or name prefix (T=t0520).
E2E_ALL := $(sort $(wildcard tests/e2e/t*.sh))
T_PROG   = $(firstword $(subst :, ,$(T)))
T_CASE   = $(word 2,$(subst :, ,$(T)))
T_BINS   = $(filter $(addprefix %/,$(T_PROG)),$(UNIT_BINS) $(REPLAY_BINS))
T_E2E    = $(filter tests/e2e/$(T_PROG)%,$(E2E_ALL))

ifeq ($(T),)
check: $(UNIT_BINS) $(REPLAY_BINS)
	@tests/run.sh $(UNIT_BINS) $(REPLAY_BINS)
else
check: $(T_BINS)
	@if [ -z "$(T_BINS)" ]; then echo "make check: no unit test or replay named '$(T_PROG)'" >&2; exit 2; fi
	@KILN_TEST_ONLY=$(T_CASE) tests/run.sh $(T_BINS)
endif

# -- everything: deps, build, unit tests, end-to-end tests ---------------------
# Each build phase on every core unless the caller gave -j (one phase at a
# time: all writes build/gen/ that the clang build reads).
TEST_J = $(if $(findstring -j,$(MAKEFLAGS))$(findstring jobserver,$(MAKEFLAGS)),,-j$(shell nproc))
test: deps
ifeq ($(T),)
	$(MAKE) $(TEST_J) all
	$(MAKE) $(TEST_J) clang-check
	$(MAKE) $(TEST_J) check-layers
	$(MAKE) $(TEST_J) $(UNIT_BINS) $(REPLAY_BINS)
	@tests/run.sh $(UNIT_BINS) $(REPLAY_BINS) $(E2E_ALL)
else
	@if [ -z "$(T_BINS)$(T_E2E)" ]; then echo "make test: no test named '$(T_PROG)'" >&2; exit 2; fi
	$(MAKE) all $(T_BINS)
	@KILN_TEST_ONLY=$(T_CASE) tests/run.sh $(T_BINS) $(T_E2E)
endif

# The real-world corpus alone (tests/data/real/: Debian base, apt, numpy, npm,
# gcc; kiln against buildah, then templates); `make test` runs it too, as
# tests/e2e/t0590-real-corpus.sh.
test-real: deps
	$(MAKE) all
	@tests/run.sh tests/e2e/t0590-real-corpus.sh

# Faults (docs/reliability.md): the full-disk test and the kill -9 harness
# with 40 kill points per command (240 in all; `make test` runs one each).
# KILN_KILL_SEED=S replays a run's points.
test-faults: deps
	$(MAKE) all
	@KILN_KILL_POINTS=$${KILN_KILL_POINTS:-40} tests/run.sh tests/e2e/t0950-full-disk.sh tests/e2e/t0951-kill-points.sh

# Packages, then the guest kernel the tests boot: by default a minimal kernel
# built from Debian's linux-source (vm/build-kernel.sh, vm/kernel.config; about
# 6 min on 2 cores the first time, then reused from ~/.cache/kiln/kernel) into
# build/kernel; KILN_GUEST_KERNEL=cloud takes Debian's cloud kernel instead.
deps:
	@tests/install-deps.sh deps/*.txt
	@vm/fetch-kernel.sh build/kernel >/dev/null

demo: deps
	$(MAKE) all
	@examples/demo.sh

# -- fuzzing with libFuzzer (clang) -------------------------------------------
build/fuzzobj/%.o: %.c
	@mkdir -p $(@D)
	$(CLANG) $(BASEFLAGS) -O1 -g -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@

build/fuzz/fuzz_%: build/fuzzobj/tests/fuzz/fuzz_%.o $(LIB_SRCS:%.c=build/fuzzobj/%.o)
	@mkdir -p $(@D)
	$(CLANG) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)

fuzz: $(FUZZ_BINS)

# Includes point down the stack only (the graph is in tests/check-layers.sh
# and docs/ARCHITECTURE.md).
# service/ is one core with frontends: no call cycle between its files
ACYCLIC := service remote
check-layers: build/serve-only $(patsubst %.c,$(OBJ)/%.o,$(foreach d,$(ACYCLIC),$(wildcard $(d)/*.c)))
	@tests/check-layers.sh .
	@tests/check-serve-link.sh build/serve-only
	@python3 tests/check-cycles.py $(OBJ) $(ACYCLIC) && echo "check-cycles: no call cycle between the files of $(ACYCLIC)"

# kiln serve's library closure linked alone: every object file (not an
# archive) of the folders the server stands on, so a reference into any other
# folder (vm, snapshots, builder, distrib) fails this link.
SERVE_STAGES := common oci regclient registry
SERVE_OBJS := $(sort $(foreach d,$(SERVE_STAGES),$(wildcard $(d)/*.c)))
build/serve-only: $(OBJ)/tests/serve_only.o $(SERVE_OBJS:%.c=$(OBJ)/%.o)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Build the whole tree with clang too (CI does both compilers).
clang-check:
	$(MAKE) OBJ=build/clang CC=$(CLANG) build/clang-kiln
build/clang-kiln: $(CLI_SRCS:%.c=build/clang/%.o) $(LIB_SRCS:%.c=build/clang/%.o)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
build/clang/cli/main.o: build/gen/commands.h

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
