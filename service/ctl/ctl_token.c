#include "ctl/ctl_token.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "core/buyer_token.h"
#include "core/validate.h"

/* Longest token this command signs: a kid, three int64 claims and the MAC. */
#define TOKEN_MAX 384

void ctl_token_usage(FILE *out)
{
    fprintf(out,
            "  token --user N [--ttl S] [--kid K]\n"
            "                                   a buyer token (JWT, HS256) for user N, valid S\n"
            "                                   seconds (default %d, at most\n"
            "                                   buyer_token_max_ttl_s), signed with the secret\n"
            "                                   whose key id is K (default buyer_token_kid's);\n"
            "                                   the secrets are SECKILL_BUYER_TOKEN_SECRET\n"
            "                                   (and _NEXT) or the config file's\n",
            CTL_TOKEN_TTL_DEFAULT_S);
}

/* The secret whose key id is kid (NULL: the primary), or NULL when none has it. */
static const char *secret_of(const struct cfg *c, const char *kid)
{
    if (!kid || strcmp(kid, c->buyer_token_kid) == 0)
        return c->buyer_token_secret;
    if (c->buyer_token_secret_next[0] && strcmp(kid, c->buyer_token_kid_next) == 0)
        return c->buyer_token_secret_next;
    return NULL;
}

int ctl_token_main(struct ctl *ctl, int argc, char **argv)
{
    const struct cfg *c = &ctl->cfg;
    int64_t user = 0, ttl = CTL_TOKEN_TTL_DEFAULT_S;
    const char *kid = NULL;
    for (int i = 0; i < argc; i++) {
        const char *flag = argv[i];
        if ((strcmp(flag, "--user") == 0 || strcmp(flag, "--ttl") == 0) && i + 1 < argc) {
            const char *v = argv[++i];
            int64_t *dst = flag[2] == 'u' ? &user : &ttl;
            if (validate_id_segment(v, strlen(v), dst) != 0)
                return ctl_usage_error("%s needs a positive integer, not \"%s\"", flag, v);
        } else if (strcmp(flag, "--kid") == 0 && i + 1 < argc) {
            kid = argv[++i];
            if (!buyer_token_kid_valid(kid))
                return ctl_usage_error("--kid needs 1-%d characters of A-Z a-z 0-9 . _ -, not "
                                       "\"%s\"",
                                       BUYER_TOKEN_KID_MAX, kid);
        } else {
            return ctl_usage_error("token: unexpected argument \"%s\"", flag);
        }
    }
    if (user == 0)
        return ctl_usage_error("token needs --user N");
    /* The daemon refuses a longer-lived token: a token cannot be revoked
     * before it expires, so it stays short. */
    if (ttl > c->buyer_token_max_ttl_s)
        return ctl_usage_error("--ttl must be between 1 and %" PRId64
                               " seconds (buyer_token_max_ttl_s), not %" PRId64,
                               c->buyer_token_max_ttl_s, ttl);
    const char *secret = secret_of(c, kid);
    if (!secret)
        return ctl_usage_error("--kid %s names no key: buyer_token_kid is \"%s\", "
                               "buyer_token_kid_next \"%s\"",
                               kid, c->buyer_token_kid,
                               c->buyer_token_secret_next[0] ? c->buyer_token_kid_next : "");
    if (strlen(secret) < BUYER_TOKEN_SECRET_MIN_BYTES)
        return ctl_usage_error("buyer_token_secret is %s: set SECKILL_BUYER_TOKEN_SECRET (or "
                               "buyer_token_secret in the config file) to the daemon's secret, "
                               "at least %d bytes",
                               secret[0] ? "too short" : "not set", BUYER_TOKEN_SECRET_MIN_BYTES);
    char token[TOKEN_MAX];
    int64_t now = (int64_t)time(NULL);
    if (buyer_token_sign_kid(secret, strlen(secret), kid ? kid : c->buyer_token_kid, user, now,
                             now + ttl, token, sizeof token) < 0) {
        ctl_say("token: signing failed");
        return CTL_EXIT_ERROR;
    }
    printf("%s\n", token);
    return CTL_EXIT_OK;
}
