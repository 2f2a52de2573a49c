# service/fuzz/fuzz.mk: the fuzz targets, included by the Makefile.
#
# Provides:
#   $(FUZZ_REPLAY)  each target linked with replay.c by $(CC) and the normal
#                   flags, $(BUILD)/fuzz-replay/fuzz_<name>; part of `make all`
#   fuzz-replay     runs each of them on its seed corpus; part of `make test`
#   fuzz            builds each target with clang, libFuzzer, ASan and UBSan
#                   ($(BUILD)/fuzz/fuzz_<name>, every service source
#                   instrumented) and runs it for FUZZ_SECONDS (scripts/fuzz.sh);
#                   fails on any crash, leak, timeout or sanitizer report
#
# A target is service/fuzz/fuzz_<name>.c (it defines LLVMFuzzerTestOneInput,
# see fuzz.h), its hand-written seeds in service/fuzz/corpus/<name>/, a
# dictionary service/fuzz/<name>.dict where one helps, and one line here:
FUZZ_TARGETS += order_body
FUZZ_TARGETS += sku_body
FUZZ_TARGETS += adjust_body
FUZZ_TARGETS += header_values
FUZZ_TARGETS += router
FUZZ_TARGETS += request_parse
FUZZ_TARGETS += buyer_token
FUZZ_TARGETS += life_body
FUZZ_TARGETS += proxy_header
FUZZ_TARGETS += redis_url
FUZZ_TARGETS += ratelimit
FUZZ_TARGETS += conn

# Settings (make fuzz FUZZ_SECONDS=15 FUZZ_ONLY=router,sku_body):
# FUZZ_SECONDS per target; FUZZ_MAX_LEN bytes per input (the default
# max_body_bytes); FUZZ_ONLY the targets to run, separated by commas (as
# FAULTS_ONLY) or spaces.
FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 4096
FUZZ_ONLY    ?= $(FUZZ_TARGETS)
FUZZ_CC      ?= clang

FUZZ_DIR    := service/fuzz
fuzz_comma  := ,
FUZZ_RUN     = $(subst $(fuzz_comma), ,$(FUZZ_ONLY))
FUZZ_REPLAY := $(FUZZ_TARGETS:%=$(BUILD)/fuzz-replay/fuzz_%)
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The service's sources, instrumented; the generated script and SQL objects
# are data and come from the normal build, as does the lock library.
FUZZ_LIB_OBJ := $(SVC_SRC:%.c=$(BUILD)/fuzz/obj/%.o) $(filter $(BUILD)/gen/%,$(SVC_OBJ))

.PHONY: fuzz fuzz-replay

$(BUILD)/fuzz-replay/fuzz_%: $(BUILD)/$(FUZZ_DIR)/fuzz_%.o $(BUILD)/$(FUZZ_DIR)/fuzz.o \
                             $(BUILD)/$(FUZZ_DIR)/replay.o $(BUILD)/libseckill.a $(BUILD)/librlock.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

fuzz-replay: $(FUZZ_REPLAY)
	@rc=0; for t in $(FUZZ_TARGETS); do \
	    $(BUILD)/fuzz-replay/fuzz_$$t $(FUZZ_DIR)/corpus/$$t || rc=1; \
	done; exit $$rc

$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) -O1 -g $(WARN) $(PKG_CFLAGS) -pthread $(FUZZ_SAN) \
	    -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

$(BUILD)/fuzz/libseckill.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/obj/$(FUZZ_DIR)/fuzz_%.o $(BUILD)/fuzz/obj/$(FUZZ_DIR)/fuzz.o \
                      $(BUILD)/fuzz/libseckill.a $(BUILD)/librlock.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -pthread -o $@ $^ $(PKG_LIBS)

# The sanitizers are part of the fuzz build; a SAN=1 build's objects (gcc's
# ASan runtime) cannot be linked with clang's.
fuzz:
	@if [ "$(SAN)" = 1 ]; then echo "make fuzz: drop SAN=1, fuzzing builds its own sanitizers" >&2; \
	    exit 2; fi
	FUZZ=1 scripts/deps.sh
	$(MAKE) $(FUZZ_RUN:%=$(BUILD)/fuzz/fuzz_%)
	BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_MAX_LEN=$(FUZZ_MAX_LEN) \
	    scripts/fuzz.sh $(FUZZ_RUN)
