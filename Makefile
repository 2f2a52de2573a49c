# seckill: flash-sale reservation service.  `make run` / `make test` are the two
# entry points; both install missing Debian packages and start a project-local
# Redis and PostgreSQL under var/ first.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2 -g
SAN      ?=
PKGS     := hiredis libevent libevent_pthreads jansson libpq libcrypto zlib
WARN     := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wno-format-nonliteral
ifeq ($(SAN),1)
OPT      := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null || echo -I/usr/include/postgresql)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lhiredis -levent_pthreads -levent -ljansson -lpq -lcrypto -lz)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck)
LDFLAGS  += $(OPT) -pthread

# The lock library builds by its own rules ($(BUILD)/librlock.a and more).
include service/rlock/rlock.mk
.DEFAULT_GOAL := all

CPPFLAGS += -D_GNU_SOURCE -Iservice $(RLOCK_CPPFLAGS) -Iloadtest
CFLAGS   += $(OPT) $(WARN) $(PKG_CFLAGS) -pthread

SVC_LUA     := $(sort $(wildcard lua/*.lua))
SVC_SQL     := $(sort $(wildcard sql/*.sql))
MIGRATIONS  := $(sort $(wildcard migrations/*.sql))
# The service's modules, one folder per layer (see docs/ARCHITECTURE.md); the
# daemon's and the CLI's entry points link them from libseckill.a.
SVC_DIRS    := core store sku order http
SVC_SRC     := $(foreach d,$(SVC_DIRS),$(wildcard service/$(d)/*.c))
CTL_SRC     := $(wildcard service/ctl/*.c)
LOAD_SRC    := $(filter-out loadtest/http_ceiling.c,$(wildcard loadtest/*.c))
TEST_SRC    := $(wildcard service/tests/test_*.c)
TEST_HELPERS:= $(filter-out $(TEST_SRC),$(wildcard service/tests/*.c))
# Script tests, run by scripts/run-tests.sh against the same stack as the binaries.
TEST_SCRIPTS:= $(sort $(wildcard service/tests/test_*.sh))

SVC_OBJ   := $(SVC_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/lua_svc.o $(BUILD)/gen/sql_svc.o \
             $(BUILD)/gen/migrations.o
TESTS     := $(TEST_SRC:service/tests/%.c=$(BUILD)/tests/%)
TEST_HOBJ := $(TEST_HELPERS:%.c=$(BUILD)/%.o)

# The fuzz targets: `make fuzz`, and their seeds replayed by `make test`.
include service/fuzz/fuzz.mk

.PHONY: all run test unit deps check-includes stack-start stack-stop format check-format loadtest \
        bench faults clean install uninstall model deb
PROGRAMS  := $(BUILD)/seckilld \
             $(if $(CTL_SRC),$(BUILD)/seckillctl) \
             $(if $(LOAD_SRC),$(BUILD)/seckill-loadtest) \
             $(if $(wildcard loadtest/http_ceiling.c),$(BUILD)/http-ceiling) \
             $(RLOCK_BENCH)
all: $(PROGRAMS) $(TESTS) $(RLOCK_ALL) $(FUZZ_REPLAY)

$(BUILD)/tools/embed: service/tools/embed.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<

$(BUILD)/gen/lua_svc.c: $(SVC_LUA) $(BUILD)/tools/embed
	@mkdir -p $(@D)
	$(BUILD)/tools/embed svclua_ $@ $(SVC_LUA)
$(BUILD)/gen/sql_svc.c: $(SVC_SQL) $(BUILD)/tools/embed
	@mkdir -p $(@D)
	$(BUILD)/tools/embed sql_ $@ $(SVC_SQL)
$(BUILD)/gen/migrations.c: $(MIGRATIONS) $(BUILD)/tools/embed
	@mkdir -p $(@D)
	$(BUILD)/tools/embed migration_ $@ $(MIGRATIONS)

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(CC) $(OPT) -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libseckill.a: $(SVC_OBJ)
	@rm -f $@ # a fresh archive: members of removed sources must not linger
	$(AR) rcs $@ $^

$(BUILD)/seckilld: $(BUILD)/service/daemon/main.o $(BUILD)/libseckill.a $(BUILD)/librlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

$(BUILD)/seckillctl: $(CTL_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libseckill.a $(BUILD)/librlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

# The load generator is a client: it may use the service's pure modules
# (core/, order/order.h) and the lock library, never its daemon code paths
# (scripts/check-includes.sh refuses any other include).
$(BUILD)/seckill-loadtest: $(LOAD_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libseckill.a $(BUILD)/librlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) -lm

$(BUILD)/http-ceiling: $(BUILD)/loadtest/http_ceiling.o $(BUILD)/libseckill.a $(BUILD)/librlock.a
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

$(BUILD)/tests/%: $(BUILD)/service/tests/%.o $(TEST_HOBJ) $(BUILD)/libseckill.a $(BUILD)/librlock.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(CHECK_LIBS)
# test_cluster_conn starts its cluster with the lock library's server harness.
$(BUILD)/tests/test_cluster_conn: $(BUILD)/$(RLOCK_DIR)/tests/harness_redis.o
# test_ctl also unit-tests seckillctl's admin groups (arguments, tables, HTTP answers).
$(BUILD)/tests/test_ctl: $(addprefix $(BUILD)/service/ctl/,ctl.o ctl_admin.o ctl_args.o ctl_http.o \
                           ctl_table.o)
# test_loadtest also unit-tests the load generator's latency histogram and buyer tokens.
$(BUILD)/tests/test_loadtest: $(BUILD)/loadtest/lt_hist.o $(BUILD)/loadtest/lt_buyers.o

deps:
	scripts/deps.sh

# make run: everything a newcomer needs, in the foreground; Ctrl-C stops it all.
# INSTANCES=N: N daemons behind HAProxy; REDIS=sentinel: Redis behind Sentinel;
# REDIS=cluster: a Redis Cluster; PG=ha: PostgreSQL as a Patroni cluster, a
# primary and a synchronous standby; PGBOUNCER=1: pgbouncer in front of
# PostgreSQL (scripts/stack.sh).
run: deps
	$(MAKE) $(BUILD)/seckilld $(BUILD)/seckillctl
	BUILD=$(BUILD) $(if $(INSTANCES),SECKILL_RUN_INSTANCES=$(INSTANCES)) \
	    $(if $(REDIS),SECKILL_REDIS_TOPOLOGY=$(REDIS)) $(if $(PG),SECKILL_PG_TOPOLOGY=$(PG)) $(if $(PGBOUNCER),SECKILL_PGBOUNCER=$(PGBOUNCER)) scripts/run.sh

# make test: a fresh stack on free ports, every test binary, then teardown.
# REDIS= and PG= choose the stack's topologies, as for make run.
test: deps
	$(MAKE) all
	scripts/check-includes.sh
	$(MAKE) fuzz-replay
	BUILD=$(BUILD) $(if $(REDIS),SECKILL_REDIS_TOPOLOGY=$(REDIS)) $(if $(PG),SECKILL_PG_TOPOLOGY=$(PG)) $(if $(PGBOUNCER),SECKILL_PGBOUNCER=$(PGBOUNCER)) \
	    scripts/run-tests.sh $(TESTS) $(RLOCK_TESTS) $(RLOCK_TEST_SCRIPTS) $(TEST_SCRIPTS)

# The protocol's Promela model checked by spin (model/README.md): every
# scenario of the fixed protocol exhaustively, then each re-inserted bug must
# be found.  BUG=N (or model-bugN, model-gap-ack, model-gap-load, model-item5):
# only that one, with its counterexample in words.
model: deps
	MODEL_OUT=$(BUILD)/model model/check.sh $(if $(BUG),bug $(BUG))
model-bug% model-gap-% model-item%: deps
	MODEL_OUT=$(BUILD)/model model/check.sh bug $(@:model-%=%)

# Long runs, never part of `make test`.
# REDIS=sentinel|cluster, PG=ha: the topologies of a stack started here (one
# already running in var/ is reused as it is).
loadtest: deps
	$(MAKE) all
	BUILD=$(BUILD) $(if $(REDIS),SECKILL_REDIS_TOPOLOGY=$(REDIS)) $(if $(PG),SECKILL_PG_TOPOLOGY=$(PG)) $(if $(PGBOUNCER),SECKILL_PGBOUNCER=$(PGBOUNCER)) \
	    scripts/loadtest.sh
# Faults injected into a private stack under load (FAULTS_SHORT=1: a few
# minutes; FAULTS_ONLY=name,... a subset).
faults: deps
	$(MAKE) all
	BUILD=$(BUILD) scripts/faults.sh
bench: deps
	$(MAKE) all
	rc=0; BUILD=$(BUILD) scripts/bench.sh || rc=$$?; \
	BUILD=$(BUILD) service/rlock/bench/bench-rlock.sh || rc=$$?; exit $$rc

# make install [PREFIX=/usr/local] [DESTDIR=]: the lock library, for other
# projects (pkg-config rlock); the daemon is not installed.
install: rlock-install
uninstall: rlock-uninstall

# make deb: the Debian packages of debian/control (seckill, librlock0,
# librlock-dev), built by dpkg-buildpackage with Debian's hardening flags from
# a fresh copy of the tree (tracked and new files, not ignored ones) in
# $(DEB_DIR)/seckill-<version>, then checked by lintian.  The .deb files land
# in $(DEB_DIR); nothing is rebuilt while no source changed.
DEB_DIR     := $(BUILD)/deb
DEB_VERSION  = $(shell dpkg-parsechangelog -S Version)
DEB_ARCH     = $(shell dpkg --print-architecture)
DEB_SOURCES  = $(wildcard $(shell git ls-files --cached --others --exclude-standard 2>/dev/null))
deb: deps
	$(MAKE) $(DEB_DIR)/seckill_$(DEB_VERSION)_$(DEB_ARCH).changes
	lintian --fail-on error,warning $(DEB_DIR)/seckill_$(DEB_VERSION)_$(DEB_ARCH).changes
	@echo "make deb: packages in $(DEB_DIR):"; ls $(DEB_DIR)/*_$(DEB_VERSION)_*.deb
$(DEB_DIR)/seckill_%.changes: $(DEB_SOURCES)
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/seckill-$(DEB_VERSION)
	git ls-files -z --cached --others --exclude-standard | \
	    tar -c --null --ignore-failed-read -T - -f - | tar -x -C $(DEB_DIR)/seckill-$(DEB_VERSION)
	cd $(DEB_DIR)/seckill-$(DEB_VERSION) && \
	    DEB_BUILD_OPTIONS="parallel=2 $${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -b --no-sign
	rm -rf $(DEB_DIR)/seckill-$(DEB_VERSION)

# No two modules or folders include each other in a circle.
check-includes:
	scripts/check-includes.sh

stack-start:
	scripts/stack.sh start var
stack-stop:
	scripts/stack.sh stop var

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
check-format:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
