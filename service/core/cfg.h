/*
 * cfg: every setting of the daemon in one table (name, type, default, env
 * variable, help).  Sources, later wins: built-in defaults, a config file
 * (`name = value` lines), environment variables, command-line flags.
 * A bad value at start-up is fatal (the caller prints the message and exits).
 *
 * Secrets (admin_token; the Redis URLs, pg_dsn and migrate_pg_dsn when they carry
 * a password) are refused as command-line flags, never printed, and each has
 * a companion "<name>_file" setting (SECKILL_<NAME>_FILE, --<name>-file, or in
 * the config file) that reads the value from the first line of a file.
 *
 * Reloading (SIGHUP): the table marks the settings a running process may
 * take anew (CFG_RELOAD, "[reloadable]" in --help).  cfg_reread() reads
 * everything again as at start-up (the file, the environment, the same
 * flags, so precedence is unchanged), cfg_reload() applies the reloadable
 * changes to the running struct and names the others as needing a restart.
 * Other threads read a reloadable int setting of the running struct with
 * CFG_LIVE(), never keeping a copy; a reloadable string (log_level) is read
 * by the reloading thread alone.
 */
#ifndef SECKILL_CFG_H
#define SECKILL_CFG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The shortest admin_token accepted (bytes); empty disables the admin API. */
#define CFG_ADMIN_TOKEN_MIN_BYTES 32

/* The least time request_deadline_ms leaves an order after its own waits
 * (redis_timeout_ms + order_ack_wait_ms), to record a 202 in PostgreSQL. */
#define CFG_PENDING_RECORD_MIN_MS 500

struct cfg {
    char *http_addr;                       /* host:port the HTTP API listens on */
    char *http_trusted_proxies;            /* peers that send a PROXY v1 header first */
    int64_t http_threads;                  /* event-loop threads serving HTTP */
    int64_t http_backlog;                  /* listen queue length */
    int64_t http_request_timeout_ms;       /* whole request, first byte to last */
    int64_t http_idle_timeout_ms;          /* idle keep-alive connection */
    int64_t http_write_timeout_ms;         /* an answer's whole write, from its first stall */
    int64_t http_max_connections;          /* open connections, all clients */
    int64_t http_max_connections_per_addr; /* open connections of one client address */
    int64_t request_deadline_ms;           /* every store wait of one request, together */
    int64_t health_timeout_ms;             /* a store probe waits at most this */
    int64_t health_probe_interval_ms;      /* the probe threads check each store this often */
    int64_t max_body_bytes;                /* larger bodies are refused (400) */
    int64_t max_header_bytes;              /* larger header blocks are refused */
    int64_t max_idempotency_key_bytes;
    int64_t max_qty_per_order; /* upper bound for "qty" in an order */
    /* Token buckets (0 disables one): a buyer's orders per SKU (in Redis, so
     * they hold across instances), requests to the buyer API per client
     * address, failed admin authentications per client address. */
    int64_t rate_buyer_orders_per_min;
    int64_t rate_buyer_orders_burst;
    int64_t rate_addr_per_s;
    int64_t rate_addr_burst;
    int64_t rate_addr_buckets; /* client addresses remembered at most (bounded memory) */
    int64_t admin_auth_fail_per_min;
    int64_t admin_auth_fail_burst;
    int64_t payment_auth_fail_per_min; /* ... of the payment callback, a table of its own */
    int64_t payment_auth_fail_burst;
    char *redis_url;          /* redis://[[user]:password@]host:port[/db] */
    int64_t redis_timeout_ms; /* per command, sync and async */
    int64_t redis_connect_timeout_ms;
    int64_t redis_reconnect_ms; /* pause between reconnect attempts */
    int64_t redis_sentinel_poll_ms;
    char *redis_functions_url; /* a user that may only FUNCTION LOAD: self-healing; "": none */
    char *migrate_redis_url;   /* the admin user's URL for migrate's FUNCTION LOAD; "": redis_url */
    char *pg_dsn;              /* libpq conninfo; password best via PGPASSFILE */
    char *migrate_pg_dsn;      /* the schema owner's conninfo for migrate; "": pg_dsn */
    char *pg_writer_dsn;       /* the order writers' conninfo; "": pg_dsn */
    int64_t pg_statement_timeout_ms;
    int64_t pg_client_timeout_ms;        /* longest wait for any PostgreSQL answer */
    int64_t pg_connect_host_timeout_ms;  /* one host's share of a multi-host connect */
    int64_t pg_client_check_interval_ms; /* server checks a running statement's client */
    int64_t migrate_lock_wait_ms;        /* how long `migrate` waits for another instance */
    int64_t migrate_statement_timeout_ms;
    char *admin_token;   /* bearer token for /admin (>= 32 bytes); empty disables */
    char *payment_token; /* bearer token of the payment callback only (>= 32 bytes); may be empty */
    char *buyer_token_secret;      /* HS256 key of buyer tokens; serve needs >= 32 bytes */
    char *buyer_token_kid;         /* its key id ("": none; a token without kid uses it) */
    char *buyer_token_secret_next; /* a second key during a rotation ("": none) */
    char *buyer_token_kid_next;    /* its key id, required with it */
    int64_t buyer_token_max_ttl_s; /* longer-lived buyer tokens are refused */
    int64_t buyer_token_leeway_s;  /* clock skew tolerated on a buyer token's exp and nbf */
    int64_t max_buyer_token_bytes; /* longer buyer tokens are refused unread */
    int64_t worker_threads;        /* blocking workers for admin and lookups */
    int64_t worker_queue_max;      /* jobs waiting beyond this get 503 */
    int64_t lock_ttl_ms;           /* lease of the order/SKU locks */
    int64_t lock_wait_ms;          /* how long to wait for a busy lock */
    int64_t lock_retry_ms;         /* base retry interval while waiting */
    int64_t lock_commit_margin_ms; /* refuse to commit with less lease left */
    int64_t lock_min_replicas;     /* replicas that must acknowledge a lock (WAIT); 0: none */
    int64_t lock_replica_timeout_ms;
    int64_t idempotency_ttl_s;      /* how long an Idempotency-Key is remembered */
    int64_t idempotency_auto_ttl_s; /* ... one the service made up */
    int64_t refusal_ttl_s;          /* ... a refusal under the buyer's own key */
    int64_t full_retry_after_s;     /* Retry-After of a 503 store_full */
    char *order_ack;           /* "durable": answer after the commit; "reserved": after Redis */
    int64_t order_ack_wait_ms; /* durable: longest wait for the commit, then 202 pending */
    int64_t reserve_batch_max; /* orders of one SKU in one reserve.lua call */
    int64_t reserve_deadline_margin_ms; /* reserve.lua gives up this long before we do */
    int64_t sold_out_flag_ms;           /* sold out answered locally this long; 0: off */
    int64_t bucket_refill_rounds;       /* a bucketed order: moves into its bucket, then 503 */
    int64_t reconcile_interval_ms;      /* settle, reload, compare Redis with PostgreSQL */
    int64_t reconcile_retry_ms;         /* next pass after one that could not finish */
    int64_t pending_settle_after_ms;    /* a recorded 202's age before the reconciler looks */
    int64_t expiry_sweep_interval_ms;   /* expire unpaid orders, settle returns; 0: off */
    int64_t expiry_batch;               /* orders expired per transaction */
    int64_t expiry_sweep_skus;          /* SKUs per sweep (the next goes on from there) */
    int64_t writer_threads;             /* order writer threads in this process */
    int64_t writer_batch;               /* stream entries per SKU in a transaction */
    int64_t writer_skus_per_tx;         /* SKUs whose batches share one transaction */
    int64_t writer_block_ms;            /* XREADGROUP BLOCK */
    int64_t writer_claim_idle_ms;       /* reclaim entries idle this long (crashed writer) */
    int64_t writer_refresh_ms;          /* how often the SKU list is re-read */
    int64_t writer_retry_ms;            /* pause after a failed batch */
    int64_t dead_letter_max;            /* entries kept per SKU's dead-letter stream */
    int64_t metrics_max_skus;           /* SKUs with per-SKU gauges on /metrics */
    char *metrics_addr;                 /* the internal listener: metrics, health, admin */
    int64_t metrics_max_connections;    /* open connections to the internal listener */
    int64_t metrics_refresh_ms;         /* per-SKU gauges are read at most this often */
    int64_t admin_on_public;            /* 1: the admin API on http_addr as well */
    char *log_level;                    /* debug, info, warn, error */
};

/* A reloadable int setting of the running struct, read at run time by any
 * thread: a relaxed atomic load (cfg_reload stores it likewise). */
#define CFG_LIVE(c, field) __atomic_load_n(&(c)->field, __ATOMIC_RELAXED)

/* Fills c with the built-in defaults (strings are heap copies). */
void cfg_defaults(struct cfg *c);

/*
 * Applies a config file, the environment and argv flags (--name=value or
 * --name value, with '-' or '_').  'args' receives the first non-flag
 * argument index.  Returns 0, or -1 with a message in err.
 */
int cfg_load(struct cfg *c, int argc, char **argv, int *args, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Sets one setting by name from text ("<secret>_file": value is the path of
 * the file to read it from).  Returns 0 or -1 with a message in err (which
 * never holds a secret's value). */
int cfg_set(struct cfg *c, const char *name, const char *value, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* cfg_set() for a value given on the command line: refuses a secret, naming
 * its environment variable and file alternatives.  Returns 0 or -1. */
int cfg_set_flag(struct cfg *c, const char *name, const char *value, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Writes the environment variable of setting 'name' ("SECKILL_NAME") into out. */
void cfg_env_name(char *out, size_t cap, const char *name);

/* Checks settings against each other (a lease shorter than the margin it must
 * keep would roll every batch back, forever).  Returns 0, or -1 with err set. */
int cfg_check(const struct cfg *c, char *err, size_t errlen) __attribute__((warn_unused_result));

/* Reads every setting afresh into next (built-in defaults, then cfg_load
 * with argc/argv as at start-up) and checks it (cfg_check).  Returns 0 with
 * next filled (caller cfg_free's it), or -1 with err set and nothing held. */
int cfg_reread(struct cfg *next, int argc, char **argv, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Applies to the running cur the reloadable settings whose value differs in
 * next, and writes one line into summary: "changed a=1->2, b=x->y; needs
 * restart: c, d" ("changed nothing" when no reloadable one differs; a
 * secret's values are never written, only its name; "..." ends a line
 * longer than cap).  Settings that need a restart are not applied.  First
 * the settings that would run (cur with next's reloadable values) are
 * checked together (cfg_check): when they do not pass, nothing is applied
 * and -1 returned with err set.  Returns the number of settings applied.
 * Call it on the one thread that reloads; others may read cur meanwhile.
 */
int cfg_reload(struct cfg *cur, const struct cfg *next, char *summary, size_t cap, char *err,
               size_t errlen) __attribute__((warn_unused_result));

/* Prints every setting with its default and environment variable. */
void cfg_print_help(FILE *out);

/* Frees the strings held by c. */
void cfg_free(struct cfg *c);

#endif
