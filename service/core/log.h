/* log: leveled log lines on stderr, safe from any thread.  Never log secrets. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

#include <stddef.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Sets the threshold from "debug"/"info"/"warn"/"error"; returns -1 if unknown. */
int log_set_level(const char *name);
/* Copies 'in' into out (cap bytes, NUL-terminated, truncated at a whole
 * escape) with CR, LF and TAB written as \r \n \t and other control bytes
 * as \xNN, trailing newlines dropped, so that it fits on one log line.
 * Returns the length written. */
size_t log_escape(char *out, size_t cap, const char *in);
/* Writes one line "<UTC time> <LEVEL> <message, escaped by log_escape()>". */
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
