/* log: leveled log lines on stderr, safe from any thread.  Never log secrets. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Sets the threshold from "debug"/"info"/"warn"/"error"; returns -1 if unknown. */
int log_set_level(const char *name);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
