#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Read by every thread, set again by a reload: relaxed atomic accesses. */
static int threshold = LOG_INFO;

size_t log_escape(char *out, size_t cap, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(in), o = 0;
    /* A message's own trailing newline (PQerrorMessage has one) is not data. */
    while (n > 0 && (in[n - 1] == '\n' || in[n - 1] == '\r'))
        n--;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        char esc[4];
        size_t len = 0;
        if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            len = 2;
        } else if (c < 0x20 || c == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 0xf];
            len = 4;
        } else {
            esc[0] = (char)c;
            len = 1;
        }
        if (o + len >= cap)
            break; /* truncated at a whole character or escape */
        memcpy(out + o, esc, len);
        o += len;
    }
    out[o] = '\0';
    return o;
}

int log_set_level(const char *name)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            __atomic_store_n(&threshold, i, __ATOMIC_RELAXED);
            return 0;
        }
    return -1;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if ((int)lvl < __atomic_load_n(&threshold, __ATOMIC_RELAXED))
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, tags[lvl]);
    char msg[sizeof line];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One record, one line: a multi-line message (a PostgreSQL error) or
     * text from outside (a header, a key) must not forge or split lines. */
    size_t len = (size_t)n + log_escape(line + n, sizeof line - 1 - (size_t)n, msg);
    /* One fputs per line so concurrent threads do not interleave within a line. */
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
