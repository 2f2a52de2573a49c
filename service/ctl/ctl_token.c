#include "ctl/ctl_token.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "core/buyer_token.h"
#include "core/validate.h"

/* Longest token this command signs: three int64 claims and the MAC. */
#define TOKEN_MAX 256

void ctl_token_usage(FILE *out)
{
    fprintf(out,
            "  token --user N [--ttl S]         a buyer token (JWT, HS256) for user N, valid S\n"
            "                                   seconds (default %d, at most %d); the secret is\n"
            "                                   SECKILL_BUYER_TOKEN_SECRET or the config file's\n",
            CTL_TOKEN_TTL_DEFAULT_S, CTL_TOKEN_TTL_MAX_S);
}

int ctl_token_main(struct ctl *ctl, int argc, char **argv)
{
    int64_t user = 0, ttl = CTL_TOKEN_TTL_DEFAULT_S;
    for (int i = 0; i < argc; i++) {
        const char *flag = argv[i];
        if ((strcmp(flag, "--user") == 0 || strcmp(flag, "--ttl") == 0) && i + 1 < argc) {
            const char *v = argv[++i];
            int64_t *dst = flag[2] == 'u' ? &user : &ttl;
            if (validate_id_segment(v, strlen(v), dst) != 0)
                return ctl_usage_error("%s needs a positive integer, not \"%s\"", flag, v);
        } else {
            return ctl_usage_error("token: unexpected argument \"%s\"", flag);
        }
    }
    if (user == 0)
        return ctl_usage_error("token needs --user N");
    if (ttl > CTL_TOKEN_TTL_MAX_S)
        return ctl_usage_error("--ttl must be between 1 and %d seconds, not %" PRId64,
                               CTL_TOKEN_TTL_MAX_S, ttl);
    const char *secret = ctl->cfg.buyer_token_secret;
    if (strlen(secret) < BUYER_TOKEN_SECRET_MIN_BYTES)
        return ctl_usage_error("buyer_token_secret is %s: set SECKILL_BUYER_TOKEN_SECRET (or "
                               "buyer_token_secret in the config file) to the daemon's secret, "
                               "at least %d bytes",
                               secret[0] ? "too short" : "not set", BUYER_TOKEN_SECRET_MIN_BYTES);
    char token[TOKEN_MAX];
    int64_t now = (int64_t)time(NULL);
    if (buyer_token_sign(secret, strlen(secret), user, now, now + ttl, token, sizeof token) < 0) {
        ctl_say("token: signing failed");
        return CTL_EXIT_ERROR;
    }
    printf("%s\n", token);
    return CTL_EXIT_OK;
}
