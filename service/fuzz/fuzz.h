/*
 * fuzz: the contract of a fuzz target, and the checks the targets share.
 *
 * A target is one file, service/fuzz/fuzz_<name>.c, that defines
 * LLVMFuzzerTestOneInput.  It must take any bytes, free all it allocates, and
 * assert the properties of what it calls with FUZZ_CHECK, so that a broken
 * property is a crash libFuzzer keeps (a mere "no crash" proves little).  The
 * same file links with libFuzzer (`make fuzz`, clang) and with replay.c
 * (`make test`, the normal compiler), so it must not depend on either.
 */
#ifndef SECKILL_FUZZ_H
#define SECKILL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input; always returns 0 (libFuzzer reserves other values). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts naming the property and where it is written, when cond is false.
 * Never compiled out (unlike assert). */
#define FUZZ_CHECK(cond) ((cond) ? (void)0 : fuzz_fail(#cond, __FILE__, __LINE__))

/* Prints "property failed" with its text and place, then aborts. */
void fuzz_fail(const char *what, const char *file, int line) __attribute__((noreturn));

/* A NUL-terminated copy of size bytes of data (an embedded NUL ends the
 * string early, as it would in a header); the caller frees it.  Aborts when
 * out of memory. */
char *fuzz_cstr(const uint8_t *data, size_t size);

/* Checks a validate_* error detail: NUL-terminated within cap, non-empty and
 * printable ASCII, as validate.h promises. */
void fuzz_check_detail(const char *detail, size_t cap);

#endif
