# rlock.mk: the build of the lock library, service/rlock/, included by the
# top-level Makefile.
#
# The library is a room of its own: its objects are compiled with its own
# include/ and src/ and the flags of hiredis and libevent only (no -Iservice,
# no PostgreSQL or jansson), so any reach into the service fails the build.
#
# The including Makefile provides CC, AR, BUILD, OPT, WARN and LDFLAGS,
# and the embedding tool $(BUILD)/tools/embed (service/tools/embed.c).
#
# Provides these files and variables:
#   $(RLOCK_LIB)          $(BUILD)/librlock.a, what the service links
#   $(RLOCK_SO)           $(BUILD)/librlock.so.$(RLOCK_VERSION), soname librlock.so.0,
#                         from separate -fPIC objects; exports the public API only
#   $(RLOCK_TESTS)        the library's Check tests, $(BUILD)/tests/test_rlock*
#   $(RLOCK_TEST_SCRIPTS) its executable test scripts, tests/test_*.sh
#   $(RLOCK_BENCH)        $(BUILD)/rlock-bench, run by bench/bench-rlock.sh
#   $(RLOCK_ALL)          all of the above
#   RLOCK_CPPFLAGS        how code outside the library finds <rlock/...>
# and these targets:
#   rlock                 $(RLOCK_ALL)
#   rlock-install         lib/librlock.a, lib/librlock.so*, include/rlock/*.h and
#                         lib/pkgconfig/rlock.pc under $(DESTDIR)$(PREFIX)
#   rlock-uninstall       removes exactly those files
# The tests run under scripts/run-tests.sh, which provides the test Redis
# (SECKILL_TEST_REDIS_ADMIN_URL) and PostgreSQL (SECKILL_TEST_PG_DSN).

RLOCK_VERSION   := 0.1.0
RLOCK_SOVERSION := 0

RLOCK_DIR      := service/rlock
RLOCK_PKGS     := hiredis libevent
RLOCK_PKG_CFLAGS := $(shell pkg-config --cflags $(RLOCK_PKGS) 2>/dev/null || \
                      echo -I/usr/include/hiredis)
RLOCK_PKG_LIBS := $(shell pkg-config --libs $(RLOCK_PKGS) 2>/dev/null || echo -lhiredis -levent)
# The tests also use libevent's threads, Check, and libpq for the fenced
# store (a test dependency only: fencing is checked by the database).
RLOCK_TEST_PKGS := $(RLOCK_PKGS) libevent_pthreads check libpq
RLOCK_TEST_PKG_CFLAGS := $(shell pkg-config --cflags $(RLOCK_TEST_PKGS) 2>/dev/null || \
                           echo -I/usr/include/hiredis -I/usr/include/postgresql)
RLOCK_TEST_PKG_LIBS := $(shell pkg-config --libs $(RLOCK_TEST_PKGS) 2>/dev/null || \
                         echo -lhiredis -levent_pthreads -levent -lcheck -lpq)

# Its sources see the public headers and the one private header, nothing else.
RLOCK_SRC_CPPFLAGS := -D_GNU_SOURCE -I$(RLOCK_DIR)/include -I$(RLOCK_DIR)/src
RLOCK_CFLAGS       := $(OPT) $(WARN) $(RLOCK_PKG_CFLAGS) -pthread
# What a consumer of the library (the service, its tests) needs.
RLOCK_CPPFLAGS     := -I$(RLOCK_DIR)/include

RLOCK_SRC := $(sort $(wildcard $(RLOCK_DIR)/src/*.c))
RLOCK_LUA := $(sort $(wildcard lua/rlock/*.lua))
RLOCK_OBJ := $(RLOCK_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/rlock_lua.o
RLOCK_LIB := $(BUILD)/librlock.a

# The shared library is built from its own position-independent objects.
RLOCK_SONAME  := librlock.so.$(RLOCK_SOVERSION)
RLOCK_SO      := $(BUILD)/librlock.so.$(RLOCK_VERSION)
RLOCK_PIC_OBJ := $(RLOCK_SRC:%.c=$(BUILD)/pic/%.o) $(BUILD)/pic/gen/rlock_lua.o

# The tests use the public headers and their own harness, nothing else.
RLOCK_TEST_SRC     := $(sort $(wildcard $(RLOCK_DIR)/tests/test_*.c))
RLOCK_TEST_HELPERS := $(filter-out $(RLOCK_TEST_SRC),$(wildcard $(RLOCK_DIR)/tests/*.c))
RLOCK_TEST_OBJ     := $(RLOCK_TEST_SRC:%.c=$(BUILD)/%.o) $(RLOCK_TEST_HELPERS:%.c=$(BUILD)/%.o)
RLOCK_TEST_HOBJ    := $(RLOCK_TEST_HELPERS:%.c=$(BUILD)/%.o)
RLOCK_TESTS        := $(RLOCK_TEST_SRC:$(RLOCK_DIR)/tests/%.c=$(BUILD)/tests/%)
RLOCK_TEST_SCRIPTS := $(sort $(wildcard $(RLOCK_DIR)/tests/test_*.sh))

# The bench measures what the library sends, so it may use the private
# header (the script registry) as the library's own sources do.
RLOCK_BENCH_SRC := $(RLOCK_DIR)/bench/rlock_bench.c
RLOCK_BENCH     := $(BUILD)/rlock-bench

RLOCK_ALL := $(RLOCK_LIB) $(RLOCK_SO) $(RLOCK_TESTS) $(RLOCK_BENCH)

.PHONY: rlock rlock-install rlock-uninstall
rlock: $(RLOCK_ALL)

# The scripts, embedded as rlock_lua_<file>[] (src/registry.c names them).
$(BUILD)/gen/rlock_lua.c: $(RLOCK_LUA) $(BUILD)/tools/embed
	@mkdir -p $(@D)
	$(BUILD)/tools/embed rlock_lua_ $@ $(RLOCK_LUA)
$(BUILD)/gen/rlock_lua.o: $(BUILD)/gen/rlock_lua.c
	$(CC) $(OPT) -c -o $@ $<
$(BUILD)/pic/gen/rlock_lua.o: $(BUILD)/gen/rlock_lua.c
	@mkdir -p $(@D)
	$(CC) $(OPT) -fPIC -fvisibility=hidden -c -o $@ $<

$(RLOCK_SRC:%.c=$(BUILD)/%.o): $(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(RLOCK_SRC_CPPFLAGS) $(RLOCK_CFLAGS) -MMD -MP -c -o $@ $<

# Recreated, not updated: ar would keep the members of removed sources.
$(RLOCK_LIB): $(RLOCK_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(RLOCK_SRC:%.c=$(BUILD)/pic/%.o): $(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(RLOCK_SRC_CPPFLAGS) $(RLOCK_CFLAGS) -fPIC -MMD -MP -c -o $@ $<

# internal.h gives everything it declares hidden visibility, so the shared
# library exports the public API only; --no-undefined makes a missing
# dependency a link error here rather than in every program.
$(RLOCK_SO): $(RLOCK_PIC_OBJ)
	$(CC) -shared -Wl,-soname,$(RLOCK_SONAME) -Wl,--no-undefined $(LDFLAGS) -o $@ $^ \
	    $(RLOCK_PKG_LIBS)

$(RLOCK_TEST_OBJ): $(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) -D_GNU_SOURCE $(RLOCK_CPPFLAGS) -I$(RLOCK_DIR)/tests $(OPT) $(WARN) \
	    $(RLOCK_TEST_PKG_CFLAGS) -pthread -MMD -MP -c -o $@ $<

$(RLOCK_TESTS): $(BUILD)/tests/%: $(BUILD)/$(RLOCK_DIR)/tests/%.o $(RLOCK_TEST_HOBJ) $(RLOCK_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(RLOCK_TEST_PKG_LIBS)

$(RLOCK_BENCH_SRC:%.c=$(BUILD)/%.o): $(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(RLOCK_SRC_CPPFLAGS) $(RLOCK_CFLAGS) -MMD -MP -c -o $@ $<

$(RLOCK_BENCH): $(RLOCK_BENCH_SRC:%.c=$(BUILD)/%.o) $(RLOCK_LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(RLOCK_PKG_LIBS) -levent_pthreads -lm

# ---- install: make install [PREFIX=/usr/local] [DESTDIR=] (LIBDIR, INCLUDEDIR)

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
RLOCK_HEADERS := $(sort $(wildcard $(RLOCK_DIR)/include/rlock/*.h))

# rlock.pc names the directories relative to its prefix where it can, so a
# tree installed with DESTDIR and moved keeps working.
$(BUILD)/rlock.pc: $(RLOCK_DIR)/rlock.pc.in FORCE
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' \
	    -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
	    -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|' \
	    -e 's|@VERSION@|$(RLOCK_VERSION)|' $< >$@.tmp
	mv $@.tmp $@

rlock-install: $(RLOCK_LIB) $(RLOCK_SO) $(BUILD)/rlock.pc
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/rlock
	install -m 644 $(RLOCK_LIB) $(DESTDIR)$(LIBDIR)/librlock.a
	install -m 755 $(RLOCK_SO) $(DESTDIR)$(LIBDIR)/librlock.so.$(RLOCK_VERSION)
	ln -sf librlock.so.$(RLOCK_VERSION) $(DESTDIR)$(LIBDIR)/$(RLOCK_SONAME)
	ln -sf $(RLOCK_SONAME) $(DESTDIR)$(LIBDIR)/librlock.so
	install -m 644 $(RLOCK_HEADERS) $(DESTDIR)$(INCLUDEDIR)/rlock/
	install -m 644 $(BUILD)/rlock.pc $(DESTDIR)$(LIBDIR)/pkgconfig/rlock.pc

rlock-uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/librlock.a $(DESTDIR)$(LIBDIR)/librlock.so \
	    $(DESTDIR)$(LIBDIR)/$(RLOCK_SONAME) $(DESTDIR)$(LIBDIR)/librlock.so.$(RLOCK_VERSION) \
	    $(DESTDIR)$(LIBDIR)/pkgconfig/rlock.pc \
	    $(addprefix $(DESTDIR)$(INCLUDEDIR)/rlock/,$(notdir $(RLOCK_HEADERS)))
	if [ -d $(DESTDIR)$(INCLUDEDIR)/rlock ]; then rmdir $(DESTDIR)$(INCLUDEDIR)/rlock; fi

.PHONY: FORCE
FORCE:
