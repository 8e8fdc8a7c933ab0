# ledgerd: the tool-call ledger. `make run` and `make test` are the two
# commands a user needs; both install missing Debian packages first.

# The one place the version is written: every artifact takes it from VERSION.
VERSION   := $(shell cat VERSION)
# The shared library's ABI major, the soname's number (libledger_client.so.1):
# raised only when a program linked against an older libledger_client.so.N
# could break, never with VERSION alone.
SOVERSION := 1
PYTHON    ?= /usr/bin/python3
SANITIZE  ?=
# A sanitizer build lives apart, so switching never mixes objects.
BUILD     := build$(if $(SANITIZE),/sanitize)

CC        ?= cc
PKGS      := libpq libcrypto libssl yaml-0.1 libcurl
WARNINGS  := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
             -Wpointer-arith -Wformat=2 -Wundef -Werror
CFLAGS    ?= -O2 -g
CFLAGS    += -std=c11 $(WARNINGS) -pthread
CPPFLAGS  += -D_GNU_SOURCE -I. -I$(BUILD)/gen -DLEDGER_VERSION='"$(VERSION)"'
LDLIBS    += -pthread -lm
ifneq ($(SANITIZE),)
CFLAGS    += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS   += -fsanitize=$(SANITIZE)
endif

# pkg-config is asked lazily, after `deps` had a chance to install it.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS))

LEDGER_SRC := $(wildcard ledger/*/*.c)
API_SRC    := $(wildcard api/*/*.c)
CTL_SRC    := $(wildcard sdk/programs/ledgerctl/*.c)
SQL        := $(sort $(wildcard sql/*.sql))
# The incident-review page: every file of ui/ but its README, served at /ui/.
UI_FILES   := $(sort $(filter-out ui/README.md,$(wildcard ui/*)))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
# The C SDK carries ledgerd's generic code (ledger/common/: JSON, JCS,
# hashes), so the fingerprint a client computes is the server's by construction.
COMMON_SRC := $(wildcard ledger/common/*.c)
SDK_SRC    := $(wildcard sdk/c/*.c) $(COMMON_SRC)
SDK_OBJ    := $(SDK_SRC:%.c=$(BUILD)/pic/%.o)
SDK_LIBS    = $(shell pkg-config --libs libcurl libcrypto) -pthread -lm
SDK_SO     := libledger_client.so.$(VERSION)
SDK_SONAME := libledger_client.so.$(SOVERSION)
SDK_TEST   := $(BUILD)/tests/test_c_client
SDK_EXAMPLE := $(BUILD)/examples/send_email
GATEWAY_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard sdk/programs/ledger-gateway/*.c))
MCP_OBJ     := $(patsubst %.c,$(BUILD)/%.o,$(wildcard sdk/programs/ledger-mcp/*.c))
CHAOS_AGENT := $(BUILD)/tests/chaos_agent
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
# The C library's directory; Debian's packages give the multiarch one
# (/usr/lib/x86_64-linux-gnu), the .pc file then says it.
LIBDIR     ?= $(PREFIX)/lib
DOCDIR     ?= $(PREFIX)/share/doc/ledgerd
MANDIR     ?= $(PREFIX)/share/man

LEDGER_OBJ := $(LEDGER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/migrations.o
API_OBJ    := $(API_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/ui_files.o
CTL_OBJ    := $(CTL_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all sdk dist deb install install-sdk deps run demo test unit fuzz fuzz-smoke bench chaos image-test format lint clean
all: $(BUILD)/ledgerd $(if $(CTL_SRC),$(BUILD)/ledgerctl) sdk

# The SDK test needs cmocka, a test package: `make test` builds it, not `all`.
sdk: $(BUILD)/ledger-gateway $(BUILD)/ledger-mcp $(BUILD)/libledger_client.a $(BUILD)/libledger_client.so $(BUILD)/ledger_client.pc \
     $(BUILD)/ledger_client-uninstalled.pc $(SDK_EXAMPLE)

deps:
	@scripts/deps.sh test

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/gen/migrations.c: $(SQL) scripts/embed-sql.sh
	@mkdir -p $(dir $@)
	scripts/embed-sql.sh $(SQL) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/migrations.o: $(BUILD)/gen/migrations.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/ui_files.c: $(UI_FILES) scripts/embed-ui.sh
	@mkdir -p $(dir $@)
	scripts/embed-ui.sh $(UI_FILES) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/ui_files.o: $(BUILD)/gen/ui_files.c
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/libledger.a: $(LEDGER_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/ledgerd: $(API_OBJ) $(BUILD)/libledger.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

# Unit tests link every object but main(), archive last.
TEST_OBJ := $(filter-out $(BUILD)/api/cli/main.o,$(API_OBJ)) $(BUILD)/libledger.a
# The operator's client: every call through the C SDK's archive, and
# ledger/common's JSON reader and writer for what it prints (the archive's
# own copy is localized, so the two never clash; the linker takes from
# ledger/common's archive only what ledgerctl uses).
$(BUILD)/libledger_common.a: $(COMMON_SRC:%.c=$(BUILD)/%.o)
	rm -f $@ && $(AR) rcs $@ $^

# The wire (api/wire/: HTTP/1.1 and TLS, no domain words): ledger-gateway
# and ledger-mcp serve on it as ledgerd does.
$(BUILD)/libledger_wire.a: $(patsubst %.c,$(BUILD)/%.o,$(wildcard api/wire/*.c))
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/ledgerctl: $(CTL_OBJ) $(BUILD)/libledger_client.a $(BUILD)/libledger_common.a
	$(CC) $(LDFLAGS) -o $@ $^ $(SDK_LIBS)

# ledger-mcp's message module is no part of ledgerd: its test links it beside.
$(BUILD)/tests/test_mcp_message: TEST_OBJ += $(BUILD)/sdk/programs/ledger-mcp/message.o
$(BUILD)/tests/test_mcp_message: $(BUILD)/sdk/programs/ledger-mcp/message.o

# So is ledger-gateway's key module (and OpenSSL's HMAC, which ledgerd links too).
$(BUILD)/tests/test_gateway_key: TEST_OBJ += $(BUILD)/sdk/programs/ledger-gateway/key.o
$(BUILD)/tests/test_gateway_key: $(BUILD)/sdk/programs/ledger-gateway/key.o

$(BUILD)/tests/%: tests/unit/%.c $(TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) $(shell pkg-config --cflags cmocka) \
		-o $@ $< $(TEST_OBJ) $(PKG_LIBS) $(shell pkg-config --libs cmocka) $(LDLIBS)

# The SDK: position-independent objects with only the public API visible.
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden $(PKG_CFLAGS) -MMD -MP -c $< -o $@

# The file is named for VERSION; the loader looks for the soname's link, the
# linker (-lledger_client) for the unversioned one. The version script exports
# the public header's functions alone, versioned LEDGER_CLIENT_1.
SDK_MAP    := sdk/c/ledger_client.map
$(BUILD)/$(SDK_SO): $(SDK_OBJ) $(SDK_MAP)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SDK_SONAME) -Wl,--version-script=$(SDK_MAP) \
		-o $@ $(SDK_OBJ) $(SDK_LIBS)

$(BUILD)/$(SDK_SONAME): $(BUILD)/$(SDK_SO)
	ln -sf $(SDK_SO) $@

$(BUILD)/libledger_client.so: $(BUILD)/$(SDK_SONAME)
	ln -sf $(SDK_SONAME) $@

# The objects that say LEDGER_VERSION (--version, ledger_client_version(), the
# user agent) are built again when VERSION changes.
$(BUILD)/pic/sdk/c/client.o $(BUILD)/api/cli/main.o $(BUILD)/api/service/server.o \
$(BUILD)/sdk/programs/ledger-gateway/config.o $(BUILD)/sdk/programs/ledger-gateway/trace.o \
$(BUILD)/sdk/programs/ledger-mcp/main.o \
$(BUILD)/sdk/programs/ledgerctl/ledgerctl.o: VERSION

# One relocatable object whose hidden symbols are made local, so the static
# library's copy of the JSON code never clashes with a program's own.
$(BUILD)/libledger_client.a: $(SDK_OBJ)
	$(LD) -r -o $(BUILD)/pic/ledger_client.o $^
	objcopy --localize-hidden $(BUILD)/pic/ledger_client.o
	rm -f $@ && $(AR) rcs $@ $(BUILD)/pic/ledger_client.o

# The .pc of a prefix, include and library directory, to standard output.
write_pc = sed -e 's|@PREFIX@|$(1)|' -e 's|@VERSION@|$(VERSION)|' \
		-e 's|@INCLUDEDIR@|$(2)|' -e 's|@LIBDIR@|$(3)|' scripts/ledger_client.pc.in

$(BUILD)/ledger_client.pc: scripts/ledger_client.pc.in Makefile
	$(call write_pc,$(PREFIX),$${prefix}/include,$${prefix}/lib) > $@

# pkg-config prefers NAME-uninstalled.pc when it is on PKG_CONFIG_PATH: the build tree.
$(BUILD)/ledger_client-uninstalled.pc: scripts/ledger_client.pc.in Makefile
	$(call write_pc,$(CURDIR),$(CURDIR)/sdk/c,$(CURDIR)/$(BUILD)) > $@

# The SDK's own test links the static library; the example, like a user's
# program, the shared one through pkg-config.
$(SDK_TEST): tests/sdk/c/test_c_client.c tests/sdk/c/test_c_client_review.c \
		tests/sdk/c/test_c_client_router.c tests/sdk/c/test_c_client_tls.c \
		tests/sdk/c/test_c_client_results.c tests/sdk/c/test_c_client.h $(BUILD)/libledger_client.a
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE $(CFLAGS) -I. -Isdk/c $(shell pkg-config --cflags cmocka) -o $@ \
		tests/sdk/c/test_c_client.c tests/sdk/c/test_c_client_review.c tests/sdk/c/test_c_client_router.c \
		tests/sdk/c/test_c_client_tls.c tests/sdk/c/test_c_client_results.c $(BUILD)/libledger_client.a $(shell pkg-config --libs cmocka) $(SDK_LIBS) $(LDFLAGS)

$(SDK_EXAMPLE): sdk/c/examples/send_email.c $(BUILD)/libledger_client.so \
		$(BUILD)/ledger_client-uninstalled.pc
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $$(PKG_CONFIG_PATH=$(BUILD) pkg-config --cflags ledger_client) -o $@ $< \
		$$(PKG_CONFIG_PATH=$(BUILD) pkg-config --libs ledger_client) $(LDFLAGS)

# The chaos campaign's agent on the C SDK (tests/chaos/): the static library, like the SDK test.
$(CHAOS_AGENT): tests/chaos/c_agent.c $(BUILD)/libledger_client.a
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE $(CFLAGS) -Isdk/c -o $@ $< $(BUILD)/libledger_client.a $(SDK_LIBS) $(LDFLAGS)

# tests/otel's program that makes spans with ledger/common/trace.h, as ledgerd does.
TRACE_EMIT := $(BUILD)/tests/trace_emit
$(TRACE_EMIT): tests/otel/trace_emit.c $(BUILD)/libledger_common.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libledger_common.a $(SDK_LIBS)

# The reference router: what an integrator copies, built on the SDK's public header alone.
$(GATEWAY_OBJ): CPPFLAGS += -Isdk/c
$(GATEWAY_OBJ): PKG_CFLAGS += $(shell pkg-config --cflags jansson yaml-0.1)
$(BUILD)/ledger-gateway: $(GATEWAY_OBJ) $(BUILD)/libledger_wire.a $(BUILD)/libledger_client.a \
		$(BUILD)/libledger_common.a
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs jansson libssl yaml-0.1) $(SDK_LIBS)

# ledger-mcp: the exactly-once MCP proxy (sdk/programs/ledger-mcp/README.md), on the C SDK's
# archive, with ledger/common's JSON reader and writer as ledgerctl has them.
$(BUILD)/ledger-mcp: $(MCP_OBJ) $(BUILD)/libledger_wire.a $(BUILD)/libledger_client.a \
		$(BUILD)/libledger_common.a
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs libssl) $(SDK_LIBS)

# The .pc is written here, for the PREFIX of this install (build/'s is for make's own).
install-sdk: $(BUILD)/ledger-gateway $(BUILD)/ledger-mcp $(BUILD)/libledger_client.a $(BUILD)/libledger_client.so
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 755 $(BUILD)/ledger-mcp $(DESTDIR)$(PREFIX)/bin/
	install -m 644 sdk/c/ledger_client.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libledger_client.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/$(SDK_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SDK_SO) $(DESTDIR)$(LIBDIR)/$(SDK_SONAME)
	ln -sf $(SDK_SONAME) $(DESTDIR)$(LIBDIR)/libledger_client.so
	$(call write_pc,$(PREFIX),$${prefix}/include,$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))) \
		> $(DESTDIR)$(LIBDIR)/pkgconfig/ledger_client.pc

# make install [PREFIX=/usr/local] [DESTDIR=...] [SYSCONFDIR=/etc]: the four programs, the C
# library (install-sdk), the systemd units of ledgerd and ledger-gateway written for this
# prefix, their settings files (never over ones already there: they are the operator's),
# the operator's docs and the four programs' man pages. docs/operations.md, "Running as a service", says what next.
install: install-sdk $(BUILD)/ledgerd $(BUILD)/ledgerctl
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(SYSCONFDIR)/ledgerd
	install -m 755 $(BUILD)/ledgerd $(BUILD)/ledgerctl $(BUILD)/ledger-gateway \
		$(DESTDIR)$(PREFIX)/bin/
	for unit in ledgerd ledger-gateway; do \
		sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
			-e 's|@DOCDIR@|$(DOCDIR)|g' packaging/systemd/$$unit.service.in \
			> $(DESTDIR)$(UNITDIR)/$$unit.service && \
		chmod 644 $(DESTDIR)$(UNITDIR)/$$unit.service || exit 1; \
	done
	for env in ledgerd gateway; do \
		[ -e $(DESTDIR)$(SYSCONFDIR)/ledgerd/$$env.env ] || \
		install -m 600 packaging/systemd/$$env.env $(DESTDIR)$(SYSCONFDIR)/ledgerd/ || exit 1; \
	done
	install -m 644 LICENSE CHANGELOG.md docs/operations.md docs/api.md $(DESTDIR)$(DOCDIR)/
	install -m 644 sdk/programs/ledger-gateway/README.md $(DESTDIR)$(DOCDIR)/ledger-gateway.md
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8
	install -m 644 packaging/man/ledger-mcp.1 packaging/man/ledgerctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 packaging/man/ledgerd.8 packaging/man/ledger-gateway.8 $(DESTDIR)$(MANDIR)/man8/

# make dist: the source of the commit checked out (git archive: what is committed, nothing
# else), as build/ledgerd-VERSION.tar.gz with its SHA-256 beside it; it builds with make.
dist:
	@mkdir -p $(BUILD)
	git archive --format=tar.gz --prefix=ledgerd-$(VERSION)/ \
		-o $(BUILD)/ledgerd-$(VERSION).tar.gz HEAD
	cd $(BUILD) && sha256sum ledgerd-$(VERSION).tar.gz > ledgerd-$(VERSION).tar.gz.sha256
	@echo "$(BUILD)/ledgerd-$(VERSION).tar.gz: $$(du -h $(BUILD)/ledgerd-$(VERSION).tar.gz | cut -f1)"

# make deb: Debian 12's packages of the commit, from its `make dist` tarball (so
# from what is committed alone) and its packaging/debian/: ledgerd (with
# ledgerctl), ledger-gateway, ledger-mcp, libledger-client1 and
# libledger-client-dev, in build/deb/. debian/changelog is written here from
# VERSION, so the two never disagree. lintian checks them; an error fails
# the build, warnings are listed (build/deb/lintian.txt).
DEB_DIR := build/deb
DEB_SRC := $(DEB_DIR)/ledgerd-$(VERSION)
deb: dist
	@scripts/deps.sh deb
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)
	tar -xzf $(BUILD)/ledgerd-$(VERSION).tar.gz -C $(DEB_DIR)
	cp -r $(DEB_SRC)/packaging/debian $(DEB_SRC)/debian
	{ printf 'ledgerd (%s) bookworm; urgency=medium\n\n' '$(VERSION)'; \
	  printf '  * Built from commit %s; CHANGELOG.md says what changed.\n\n' "$$(git rev-parse --short HEAD)"; \
	  printf ' -- %s  %s\n' "$$(sed -n 's/^Maintainer: //p' packaging/debian/control)" \
		"$$(git log -1 --format=%cD HEAD)"; } > $(DEB_SRC)/debian/changelog
	cd $(DEB_SRC) && dpkg-buildpackage -b -us -uc -J$(BUILD_JOBS) > ../build.log 2>&1 || \
		{ tail -n 40 ../build.log; exit 1; }
	rm -rf $(DEB_SRC)
	lintian --fail-on error --tag-display-limit 0 $(DEB_DIR)/*.deb > $(DEB_DIR)/lintian.txt 2>&1; \
		status=$$?; cat $(DEB_DIR)/lintian.txt; exit $$status
	@for d in $(DEB_DIR)/*.deb; do \
		echo "$$d: $$(dpkg-deb -f $$d Version), $$(du -h $$d | cut -f1)"; done

# The failover rows are data the tests read; they must be what their generator writes.
unit: $(UNIT_BIN)
	@$(PYTHON) tests/unit/gen_failover_table.py --check
	@set -e; for t in $(UNIT_BIN); do $$t; done

# Coverage-guided fuzzing (tests/fuzz/README.md): one libFuzzer binary per
# tests/fuzz/fuzz_<target>.c, linked with the project sources it exercises,
# all compiled again by clang under ASan and UBSan into build/fuzz/ (never
# the gcc objects of $(BUILD)). FUZZ_LINK_<target> names those sources;
# a target that names none links ledger/common.
FUZZ_CC       ?= clang
FUZZ_DIR      := build/fuzz
FUZZ_TARGETS  := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SECONDS  ?= 60
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   := -std=c11 -O1 -g -fno-omit-frame-pointer $(WARNINGS) -pthread $(FUZZ_SANITIZE)
FUZZ_LINK_json       := $(COMMON_SRC)
FUZZ_LINK_jcs        := $(COMMON_SRC)
FUZZ_LINK_routes     := api/service/routes.c api/wire/http.c ledger/core/id.c
FUZZ_LINK_policy     := ledger/core/policy.c
FUZZ_LINK_sdk_answer := $(SDK_SRC)
FUZZ_LINK_mcp_message := sdk/programs/ledger-mcp/message.c $(COMMON_SRC)
# The whole server in the fuzzer's process; the store answers from tests/fuzz/store_stub.c.
FUZZ_LINK_http       := $(filter-out api/cli/main.c api/cli/tokencmd.c,$(API_SRC)) $(COMMON_SRC) \
			$(wildcard ledger/core/*.c) ledger/store/migrate.c tests/fuzz/store_stub.c \
			$(BUILD)/gen/ui_files.c

fuzz_objs = $(patsubst %.c,$(FUZZ_DIR)/%.o,$(or $(FUZZ_LINK_$(1)),$(COMMON_SRC)))

# The project's code gets the coverage hooks; only the harness links libFuzzer's main().
$(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(PKG_CFLAGS) -MMD -MP -c $< -o $@

define fuzz_target
$(FUZZ_DIR)/fuzz_$(1): tests/fuzz/fuzz_$(1).c $(call fuzz_objs,$(1))
	$$(FUZZ_CC) $$(CPPFLAGS) $$(FUZZ_CFLAGS) -fsanitize=fuzzer $$(PKG_CFLAGS) -MMD -MP -o $$@ \
		$$< $(call fuzz_objs,$(1)) $$(PKG_LIBS) $$(LDLIBS)
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_target,$(t))))

# Each target in turn for FUZZ_SECONDS from its checked-in corpus (FUZZ_TARGETS=json
# for one); what it finds lands in build/fuzz/.
fuzz:
	@scripts/deps.sh fuzz
	$(MAKE) $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
	@set -e; for t in $(FUZZ_TARGETS); do tests/fuzz/run.sh $$t $(FUZZ_SECONDS); done

# make test's share: every seed, then 10 s of new inputs per target; any report fails it.
fuzz-smoke:
	@scripts/deps.sh fuzz
	$(MAKE) $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
	@set -e; for t in $(FUZZ_TARGETS); do tests/fuzz/run.sh --smoke $$t 10; done

# Test files run in parallel, each whole on one worker (its module's ledgerd
# and database are its own); most of their time is spent waiting on leases,
# PostgreSQL and failovers, not on the CPU.
TEST_JOBS       ?= 4
PYTEST_PARALLEL := -n $(TEST_JOBS) --dist loadfile

# The README's test command: every test, on a throwaway PostgreSQL, with the
# fuzz targets' short run beside the first pytest run (it wants a core while
# the tests mostly wait on leases and PostgreSQL); then the HTTP contract
# again with the fast paths off, so that every answer the fast paths give is
# also the one the locked path decides in C (the wire's tests, which no fast
# path touches, run once).
BUILD_JOBS ?= $(shell nproc)
test:
	@scripts/deps.sh test
	$(MAKE) -j$(BUILD_JOBS) all $(UNIT_BIN) $(SDK_TEST) $(CHAOS_AGENT) $(TRACE_EMIT) \
		$(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
	$(MAKE) unit
	$(PYTHON) scripts/check_layers.py
	$(PYTHON) scripts/check_names.py $(BUILD)
	@mkdir -p $(FUZZ_DIR)/logs
	@$(MAKE) --no-print-directory fuzz-smoke >$(FUZZ_DIR)/logs/smoke.log 2>&1 & smoke=$$!; \
	status=0; LEDGERD=$(BUILD)/ledgerd $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) \
		tests/http tests/integration tests/docs tests/ops tests/sdk tests/programs tests/ui tests/faults tests/engines tests/ha \
		tests/docker tests/chaos tests/otel \
		|| status=$$?; \
	if wait $$smoke; then grep '^fuzz ' $(FUZZ_DIR)/logs/smoke.log; \
	else cat $(FUZZ_DIR)/logs/smoke.log; status=1; fi; exit $$status
	LEDGER_FAST_PATHS=off LEDGERD=$(BUILD)/ledgerd $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) \
		tests/http --ignore=tests/http/test_wire.py

# A randomized fault campaign judged by an independent checker (tests/chaos/README.md):
# CHAOS_SECONDS of load and faults (default 300) drawn from CHAOS_SEED (default random,
# printed); the record lands in build/chaos/<time>-<seed>/.
chaos:
	@scripts/deps.sh run
	$(MAKE) all $(CHAOS_AGENT)
	LEDGERD=$(BUILD)/ledgerd $(PYTHON) tests/chaos/campaign.py

# docker/Dockerfile built and run for real, with podman (no Docker engine
# here) on a Debian base made with debootstrap, against a PostgreSQL 15 on
# loopback: what it checks is in docker/README.md. As root; a first run
# takes a few minutes, later ones reuse the base and the downloads kept in
# build/image/.
image-test:
	@scripts/deps.sh image
	tests/image/run.sh

# Not a test: figures side by side with PostgreSQL's own limit (tests/bench/).
bench:
	@scripts/deps.sh bench
	$(MAKE) all
	LEDGERD=$(BUILD)/ledgerd $(PYTHON) tests/bench/bench.py
	LEDGERD=$(BUILD)/ledgerd $(PYTHON) tests/bench/mcp_latency.py

# exec: the shell of the recipe becomes run.sh, which make's SIGTERM (a kill
# of make's PID) then reaches; it passes the signal on to ledgerd.
run:
	@scripts/deps.sh run
	$(MAKE) all
	LEDGERD=$(BUILD)/ledgerd exec scripts/run.sh

# ledger-gateway in front of two real llama.cpp engines, each killed once on
# purpose, and ledgerd's timelines of both requests (scripts/demo.py); runs
# until Ctrl-C or SIGTERM, which stop everything it started.
demo:
	@scripts/deps.sh demo
	$(MAKE) all
	$(PYTHON) scripts/demo.py

format:
	@scripts/deps.sh dev
	clang-format -i $(LEDGER_SRC) $(API_SRC) $(CTL_SRC) $(wildcard ledger/*/*.h api/*/*.h sdk/*/*.h sdk/programs/*/*.h) $(UNIT_SRC) \
		$(wildcard sdk/c/*.c sdk/programs/ledger-gateway/*.[ch] sdk/programs/ledger-mcp/*.[ch] sdk/c/examples/*.c tests/sdk/c/*.c tests/chaos/*.c tests/fuzz/*.c)

lint:
	@scripts/deps.sh dev
	$(PYTHON) scripts/check_layers.py
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE -I. -I$(BUILD)/gen \
		--suppress=missingIncludeSystem ledger api sdk

clean:
	rm -rf $(BUILD)

# Not build/image: make image-test's container storage and Debian base, whose
# files (etc/init.d/*, ...) are no dependency lists.
-include $(shell find $(BUILD) \( -path '$(BUILD)/tools' -o -path '$(FUZZ_DIR)' -o -path '$(BUILD)/image' \) \
	-prune -o -name '*.d' -type f -print 2>/dev/null)
-include $(shell find $(FUZZ_DIR) -name '*.d' -type f -print 2>/dev/null)
