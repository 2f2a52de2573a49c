/*
 * Fuzz target: Redis URLs (rlock_url_parse(): redis://, redis-sentinel://,
 * redis-cluster://), which come from the config, the environment or a file.
 *
 * Properties: a refusal leaves the struct zeroed and says why in a
 * NUL-terminated, non-empty message that never repeats the password; an
 * accepted URL is exactly one kind (a server, Sentinels and a master name, or
 * cluster seeds), every node has a non-empty host and a port in 1..65535,
 * counts stay within their bounds, a cluster's database is 0, and parsing
 * the same text again gives the same struct.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include <rlock/url.h>

static void check_node(const struct rlock_url_node *n)
{
    FUZZ_CHECK(memchr(n->host, '\0', sizeof n->host) != NULL);
    FUZZ_CHECK(n->host[0] != '\0');
    FUZZ_CHECK(n->port >= 1 && n->port <= 65535);
}

/* The password part of the text (between the scheme's "//" and the last
 * '@', after the first ':'), when at least 4 bytes long; "" otherwise. */
static void password_of(const char *s, char *out, size_t cap)
{
    out[0] = '\0';
    const char *p = strstr(s, "//"), *at = strrchr(s, '@');
    if (!p || !at || at < p + 2)
        return;
    const char *colon = memchr(p + 2, ':', (size_t)(at - p - 2));
    if (!colon || at - colon - 1 < 4 || (size_t)(at - colon - 1) >= cap)
        return;
    memcpy(out, colon + 1, (size_t)(at - colon - 1));
    out[at - colon - 1] = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    struct rlock_url u, again, zero;
    memset(&zero, 0, sizeof zero);
    char err[320] = "";
    if (rlock_url_parse(s, &u, err, sizeof err) != 0) {
        FUZZ_CHECK(memcmp(&u, &zero, sizeof u) == 0);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
        /* A password with a byte no message of the parser holds (a
         * plain one may spell "redis-" or "host" by chance) never shows. */
        char pw[256];
        password_of(s, pw, sizeof pw);
        FUZZ_CHECK(!strpbrk(pw, "!#$^*~+=[]{}|<>?&;`\"") || strstr(err, pw) == NULL);
        free(s);
        return 0;
    }
    int kinds = (u.nsentinels > 0) + (u.nseeds > 0);
    FUZZ_CHECK(kinds <= 1);
    FUZZ_CHECK(u.nsentinels >= 0 && u.nsentinels <= RLOCK_URL_MAX_SENTINELS);
    FUZZ_CHECK(u.nseeds >= 0 && u.nseeds <= RLOCK_URL_MAX_SEEDS);
    FUZZ_CHECK(u.watch == NULL);
    FUZZ_CHECK(memchr(u.user, '\0', sizeof u.user) && memchr(u.password, '\0', sizeof u.password));
    FUZZ_CHECK(u.db >= 0 && u.db <= 1000000);
    if (kinds == 0) {
        FUZZ_CHECK(memchr(u.host, '\0', sizeof u.host) != NULL && u.host[0] != '\0');
        FUZZ_CHECK(u.port >= 1 && u.port <= 65535);
    } else {
        FUZZ_CHECK(u.host[0] == '\0' && u.port == 0); /* resolved later, never guessed */
    }
    for (int i = 0; i < u.nsentinels; i++)
        check_node(&u.sentinel[i]);
    if (u.nsentinels > 0)
        FUZZ_CHECK(u.master[0] != '\0');
    for (int i = 0; i < u.nseeds; i++)
        check_node(&u.seed[i]);
    if (u.nseeds > 0)
        FUZZ_CHECK(u.db == 0);
    FUZZ_CHECK(rlock_url_parse(s, &again, err, sizeof err) == 0);
    FUZZ_CHECK(memcmp(&u, &again, sizeof u) == 0);
    free(s);
    return 0;
}
