# ledgerd: the tool-call ledger. `make run` and `make test` are the two
# commands a user needs; both install missing Debian packages first.

VERSION   := 0.1.0
PYTHON    ?= /usr/bin/python3
SANITIZE  ?=
# A sanitizer build lives apart, so switching never mixes objects.
BUILD     := build$(if $(SANITIZE),/sanitize)

CC        ?= cc
PKGS      := libmicrohttpd libpq libcrypto yaml-0.1 libcurl
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

LEDGER_SRC := $(wildcard ledger/*.c)
API_SRC    := $(wildcard api/*.c)
CTL_SRC    := $(wildcard sdk/ledgerctl/*.c)
SQL        := $(sort $(wildcard sql/*.sql))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)

LEDGER_OBJ := $(LEDGER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/migrations.o
API_OBJ    := $(API_SRC:%.c=$(BUILD)/%.o)
CTL_OBJ    := $(CTL_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps run test unit bench format lint clean
all: $(BUILD)/ledgerd $(if $(CTL_SRC),$(BUILD)/ledgerctl)

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

$(BUILD)/libledger.a: $(LEDGER_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/ledgerd: $(API_OBJ) $(BUILD)/libledger.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

# Unit tests link every object but main(), archive last.
TEST_OBJ := $(filter-out $(BUILD)/api/main.o,$(API_OBJ)) $(BUILD)/libledger.a
# The operator's client: libcurl, and the JSON reader of ledger/.
$(BUILD)/ledgerctl: $(CTL_OBJ) $(BUILD)/libledger.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) $(shell pkg-config --cflags cmocka) \
		-o $@ $< $(TEST_OBJ) $(PKG_LIBS) $(shell pkg-config --libs cmocka) $(LDLIBS)

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do $$t; done

# The README's test command: every test, on a throwaway PostgreSQL.
test:
	@scripts/deps.sh test
	$(MAKE) all unit
	LEDGERD=$(BUILD)/ledgerd $(PYTHON) -m pytest -q tests/http tests/integration

# Not a test: figures side by side with PostgreSQL's own limit (tests/bench/).
bench:
	@scripts/deps.sh bench
	$(MAKE) all
	LEDGERD=$(BUILD)/ledgerd $(PYTHON) tests/bench/bench.py

run:
	@scripts/deps.sh run
	$(MAKE) all
	LEDGERD=$(BUILD)/ledgerd scripts/run.sh

format:
	@scripts/deps.sh dev
	clang-format -i $(LEDGER_SRC) $(API_SRC) $(CTL_SRC) $(wildcard ledger/*.h api/*.h sdk/*/*.h) $(UNIT_SRC)

lint:
	@scripts/deps.sh dev
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE -I. -I$(BUILD)/gen \
		--suppress=missingIncludeSystem ledger api sdk

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -path '$(BUILD)/tools' -prune -o -name '*.d' -type f -print 2>/dev/null)
