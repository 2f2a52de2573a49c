/*
 * script: EVALSHA with a one-shot EVAL fallback, or FCALL for a function,
 * sync and async; the Functions library builder and loader; plus the small
 * SHA-1 needed to name scripts the way Redis does.
 */
#include "rlock/script.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rlock/resp.h"

/* ---- SHA-1 (FIPS 180-4), only used to name scripts, never for security ---- */

static uint32_t sha1_rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

/* Mixes one 64-byte block into the running state h. */
static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = sha1_rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);

    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        uint32_t t = sha1_rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = sha1_rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void rlock_sha1_hex(const void *data, size_t len, char out[RLOCK_SHA1_HEX_LEN + 1])
{
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    const unsigned char *p = data;
    size_t left = len;

    for (; left >= 64; p += 64, left -= 64)
        sha1_block(h, p);

    /* Padding: 0x80, zeros, then the bit length big-endian, filling one block,
     * or two when fewer than 9 bytes remain after the tail. */
    unsigned char tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tail_len = left + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tail_len == 128)
        sha1_block(h, tail + 64);

    unsigned char digest[RLOCK_SHA1_HEX_LEN / 2];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            digest[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
    rlock_hex(out, digest, sizeof digest);
}

void rlock_script_init(struct rlock_script *s, const char *name, const char *text, size_t len)
{
    s->name = name;
    s->text = text;
    s->len = len;
    rlock_sha1_hex(text, len, s->sha);
    s->function = NULL;
    s->flags = 0;
}

void rlock_function_init(struct rlock_script *s, const char *name, const char *text, size_t len,
                         unsigned flags)
{
    rlock_script_init(s, name, text, len);
    s->function = name;
    s->flags = flags;
}

/* The two words before numkeys: rlock_script_head(), or with eval those of
 * the fallback after NOSCRIPT, EVAL and the text. */
static void script_words(const struct rlock_script *s, int eval, const char *word[2], size_t len[2])
{
    if (eval) {
        word[0] = "EVAL";
        word[1] = s->text;
        len[1] = s->len;
    } else if (!s->function) {
        word[0] = "EVALSHA";
        word[1] = s->sha;
        len[1] = RLOCK_SHA1_HEX_LEN;
    } else {
        word[0] = s->flags & RLOCK_FN_NO_WRITES ? "FCALL_RO" : "FCALL";
        word[1] = s->function;
        len[1] = strlen(s->function);
    }
    len[0] = strlen(word[0]);
}

void rlock_script_head(const struct rlock_script *s, const char *word[2], size_t len[2])
{
    script_words(s, 0, word, len);
}

void rlock_script_argv(const struct rlock_script *s, int eval, int nkeys, int nargs,
                       const char *const *argv, const size_t *lens, const char **v, size_t *l,
                       char numkeys[RLOCK_RESP_DIGITS_MAX])
{
    script_words(s, eval, v, l);
    v[2] = numkeys;
    l[2] = rlock_resp_u64(numkeys, (uint64_t)nkeys);
    for (int i = 0; i < nkeys + nargs; i++) {
        v[3 + i] = argv[i];
        l[3 + i] = lens ? lens[i] : strlen(argv[i]);
    }
}

/* ---- script calls in the Redis protocol ---- */

size_t rlock_script_head_bytes(const struct rlock_script *s, int eval, int nuser)
{
    const char *w[2];
    size_t l[2];
    char digits[RLOCK_RESP_DIGITS_MAX];
    script_words(s, eval, w, l);
    return 1 + rlock_resp_u64(digits, (uint64_t)(3 + nuser)) + 2 + rlock_resp_bulk_bytes(l[0]) +
           rlock_resp_bulk_bytes(l[1]);
}

char *rlock_script_write_head(char *p, const struct rlock_script *s, int eval, int nuser)
{
    const char *w[2];
    size_t l[2];
    script_words(s, eval, w, l);
    p = rlock_resp_head(p, '*', (size_t)(3 + nuser));
    p = rlock_resp_bulk(p, w[0], l[0]);
    return rlock_resp_bulk(p, w[1], l[1]);
}

size_t rlock_script_args_bytes(int nkeys, int nargs, const char *const *argv, const size_t *lens)
{
    char num[RLOCK_RESP_DIGITS_MAX];
    size_t total = rlock_resp_bulk_bytes(rlock_resp_u64(num, (uint64_t)nkeys));
    for (int i = 0; i < nkeys + nargs; i++)
        total += rlock_resp_bulk_bytes(lens ? lens[i] : strlen(argv[i]));
    return total;
}

char *rlock_script_write_args(char *p, int nkeys, int nargs, const char *const *argv,
                              const size_t *lens)
{
    char num[RLOCK_RESP_DIGITS_MAX];
    p = rlock_resp_bulk(p, num, rlock_resp_u64(num, (uint64_t)nkeys));
    for (int i = 0; i < nkeys + nargs; i++)
        p = rlock_resp_bulk(p, argv[i], lens ? lens[i] : strlen(argv[i]));
    return p;
}

/* ---- running scripts ---- */

/* Argument vectors up to this size live on the stack in the sync path. */
#define SCRIPT_STACK_ARGS 32

/* Returns 3 + nkeys + nargs (EVALSHA, sha, numkeys, ...), or -1 if the counts
 * are negative or would overflow an int (hiredis takes argc as int). */
static int script_argc(int nkeys, int nargs)
{
    if (nkeys < 0 || nargs < 0 || nkeys > INT_MAX - 3 - nargs)
        return -1;
    return 3 + nkeys + nargs;
}

/* Reports an error through the context the way hiredis does, so callers have
 * one place to look whatever failed. */
static void set_context_error(redisContext *c, int err, const char *msg)
{
    c->err = err;
    rlock_err_set(c->errstr, sizeof c->errstr, "%s", msg);
}

redisReply *rlock_script_run(redisContext *c, const struct rlock_script *s, int nkeys, int nargs,
                             const char **argv, const size_t *argvlen)
{
    int argc = script_argc(nkeys, nargs);
    if (argc < 0) {
        set_context_error(c, REDIS_ERR_OTHER, "rlock_script_run: invalid key/argument count");
        return NULL;
    }

    const char *stack_v[SCRIPT_STACK_ARGS];
    size_t stack_l[SCRIPT_STACK_ARGS];
    const char **v = stack_v;
    size_t *l = stack_l;
    if (argc > SCRIPT_STACK_ARGS) {
        v = malloc((size_t)argc * sizeof *v);
        l = malloc((size_t)argc * sizeof *l);
        if (!v || !l) {
            free(v);
            free(l);
            set_context_error(c, REDIS_ERR_OOM, "Out of memory");
            return NULL;
        }
    }

    char numkeys[RLOCK_RESP_DIGITS_MAX];
    rlock_script_argv(s, 0, nkeys, nargs, argv, argvlen, v, l, numkeys);

    redisReply *r = redisCommandArgv(c, argc, v, l);
    if (!s->function && rlock_reply_kind(r) == RLOCK_REPLY_NOSCRIPT) {
        freeReplyObject(r);
        script_words(s, 1, v, l);
        r = redisCommandArgv(c, argc, v, l);
    }

    if (v != stack_v) {
        free(v);
        free(l);
    }
    return r;
}

/*
 * One in-flight async script call.  Everything the EVAL fallback needs is in
 * this single allocation (argument vectors and copied argument bytes follow
 * the struct), so the caller's argv may be gone by the time NOSCRIPT arrives.
 */
struct script_call {
    redisCallbackFn *fn;
    void *privdata;
    const char *text;
    size_t text_len;
    int argc;
    int retried; /* 1 from the start for a function: no EVAL to fall back to */
    const char **argv;
    size_t *argvlen;
    char sha[RLOCK_SHA1_HEX_LEN + 1];
    char numkeys[16];
};

static void script_call_done(redisAsyncContext *ac, void *r, void *privdata)
{
    struct script_call *call = privdata;
    redisReply *reply = r;

    if (!call->retried && rlock_reply_kind(reply) == RLOCK_REPLY_NOSCRIPT) {
        call->retried = 1;
        call->argv[0] = "EVAL";
        call->argvlen[0] = 4;
        call->argv[1] = call->text;
        call->argvlen[1] = call->text_len;
        if (redisAsyncCommandArgv(ac, script_call_done, call, call->argc, call->argv,
                                  call->argvlen) == REDIS_OK)
            return;
        /* Could not queue (disconnecting): end the call as hiredis ends
         * commands cut off by a disconnect, with a NULL reply. */
        reply = NULL;
    }
    call->fn(ac, reply, call->privdata);
    free(call);
}

int rlock_script_run_async(redisAsyncContext *ac, const struct rlock_script *s, redisCallbackFn *fn,
                           void *privdata, int nkeys, int nargs, const char **argv,
                           const size_t *argvlen)
{
    int argc = script_argc(nkeys, nargs);
    if (argc < 0 || !fn)
        return -1;

    size_t nuser = (size_t)nkeys + (size_t)nargs;
    size_t bytes = 0;
    for (size_t i = 0; i < nuser; i++) {
        size_t len = argvlen ? argvlen[i] : strlen(argv[i]);
        if (len > SIZE_MAX / 2 - bytes)
            return -1;
        bytes += len;
    }
    size_t vec = (size_t)argc * (sizeof(const char *) + sizeof(size_t));
    struct script_call *call = malloc(sizeof *call + vec + bytes);
    if (!call)
        return -1;

    call->fn = fn;
    call->privdata = privdata;
    call->text = s->text;
    call->text_len = s->len;
    call->argc = argc;
    call->retried = s->function != NULL;
    call->argv = (const char **)(call + 1);
    call->argvlen = (size_t *)(call->argv + argc);
    memcpy(call->sha, s->sha, sizeof call->sha);
    int n = snprintf(call->numkeys, sizeof call->numkeys, "%d", nkeys);

    /* A function's name is copied into the command by hiredis right away,
     * and never needed again (no fallback), so it may point into s. */
    rlock_script_head(s, call->argv, call->argvlen);
    if (!s->function)
        call->argv[1] = call->sha;
    call->argv[2] = call->numkeys;
    call->argvlen[2] = (size_t)n;
    char *data = (char *)(call->argvlen + argc);
    for (size_t i = 0; i < nuser; i++) {
        size_t len = argvlen ? argvlen[i] : strlen(argv[i]);
        memcpy(data, argv[i], len);
        call->argv[3 + i] = data;
        call->argvlen[3 + i] = len;
        data += len;
    }

    if (redisAsyncCommandArgv(ac, script_call_done, call, argc, call->argv, call->argvlen) !=
        REDIS_OK) {
        free(call);
        return -1;
    }
    return 0;
}

/* ---- Redis Functions libraries ---- */

/* Whether name is a valid function or library name: [A-Za-z0-9_]+. */
static int valid_name(const char *name)
{
    if (!name || !*name)
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return 0;
    return 1;
}

/* A growing text; on allocation failure buf is freed and set NULL, and every
 * later append is a no-op, so the builder checks once at the end. */
struct text {
    char *buf;
    size_t len, cap;
};

static void text_add(struct text *t, const char *p, size_t n)
{
    if (!t->buf)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap;
        while (t->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) {
            free(t->buf);
            t->buf = NULL;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_str(struct text *t, const char *s)
{
    text_add(t, s, strlen(s));
}

/* The flags table of a registration, "" when there is none. */
static const char *flags_lua(unsigned flags)
{
    switch (flags & (RLOCK_FN_NO_WRITES | RLOCK_FN_ALLOW_OOM)) {
    case RLOCK_FN_NO_WRITES:
        return ", flags={'no-writes'}";
    case RLOCK_FN_ALLOW_OOM:
        return ", flags={'allow-oom'}";
    case RLOCK_FN_NO_WRITES | RLOCK_FN_ALLOW_OOM:
        return ", flags={'no-writes', 'allow-oom'}";
    default:
        return "";
    }
}

char *rlock_library_build(const char *lib, const struct rlock_script *const *fns, size_t n,
                          size_t *len, char version[RLOCK_SHA1_HEX_LEN + 1])
{
    if (!valid_name(lib))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!fns[i] || !valid_name(fns[i]->function))
            return NULL;
    struct text t = {malloc(4096), 0, 4096};
    text_str(&t, "#!lua name=");
    text_str(&t, lib);
    text_str(&t, "\n");
    for (size_t i = 0; i < n; i++) {
        const struct rlock_script *s = fns[i];
        text_str(&t, "\nredis.register_function{function_name='");
        text_str(&t, s->function);
        text_str(&t, "', callback=function(KEYS, ARGV)\n");
        text_add(&t, s->text, s->len);
        /* the body may end in a comment without a newline */
        text_str(&t, "\nend");
        text_str(&t, flags_lua(s->flags));
        text_str(&t, "}\n");
    }
    if (!t.buf)
        return NULL;
    /* The version names everything above; the function that tells it
     * comes last so that it does not include itself. */
    rlock_sha1_hex(t.buf, t.len, version);
    text_str(&t, "\nredis.register_function{function_name='");
    text_str(&t, lib);
    text_str(&t, "_version', callback=function() return '");
    text_str(&t, version);
    text_str(&t, "' end, flags={'no-writes', 'allow-oom', 'allow-stale'}}\n");
    if (!t.buf)
        return NULL;
    *len = t.len;
    return t.buf;
}

redisReply *rlock_library_load(redisContext *c, const char *text, size_t len)
{
    const char *v[] = {"FUNCTION", "LOAD", "REPLACE", text};
    size_t l[] = {8, 4, 7, len};
    return redisCommandArgv(c, 4, v, l);
}

enum rlock_library_state rlock_library_check(redisContext *c, const char *lib, const char *version)
{
    char fn[128];
    int n = snprintf(fn, sizeof fn, "%s_version", lib);
    if (n < 0 || (size_t)n >= sizeof fn)
        return RLOCK_LIBRARY_ERROR;
    const char *v[] = {"FCALL_RO", fn, "0"};
    redisReply *r = redisCommandArgv(c, 3, v, NULL);
    enum rlock_library_state st = RLOCK_LIBRARY_ERROR;
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
        st = r->len == strlen(version) && memcmp(r->str, version, r->len) == 0
                 ? RLOCK_LIBRARY_CURRENT
                 : RLOCK_LIBRARY_OTHER;
    else if (rlock_reply_kind(r) == RLOCK_REPLY_NO_FUNCTION)
        st = RLOCK_LIBRARY_MISSING;
    freeReplyObject(r);
    return st;
}
