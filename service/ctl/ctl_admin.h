/*
 * ctl_admin: what the admin API's command groups (sku, order, sale, health)
 * share: their flags (--url, --json, --token-file, --timeout-ms), one
 * request to the service, the exit code of its answer, and printing.
 *
 * The admin token comes from the daemon's own setting admin_token
 * (SECKILL_ADMIN_TOKEN, SECKILL_ADMIN_TOKEN_FILE or the config file) or from
 * --token-file PATH; never from a flag's value, which any local user can
 * read (ps).  It is never printed.
 */
#ifndef SECKILL_CTL_ADMIN_H
#define SECKILL_CTL_ADMIN_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl/ctl.h"

/* Removes the admin flags from argv (anywhere in it) into ctl, and settles
 * the URLs (SECKILL_URL, else the daemon's metrics_addr, when no --url).
 * Returns 0, or CTL_EXIT_USAGE after saying why. */
int ctl_admin_take_flags(struct ctl *ctl, int *argc, char **argv);

/* The admin flags' part of --help. */
void ctl_admin_usage(FILE *out);

/* One request to the service at URL number 'at'.  Returns CTL_EXIT_OK with
 * *out (the answer's JSON; caller json_decref) on a 2xx; otherwise says why
 * on stderr (and, with --json, prints the error's JSON on stdout) and
 * returns the exit code (enum ctl_exit), *out NULL.  body may be NULL, idem
 * (an Idempotency-Key) too. */
int ctl_admin_call(struct ctl *ctl, int at, const char *method, const char *path,
                   const json_t *body, const char *idem, json_t **out);

/* Prints an answer: its JSON with --json, else human(o).  Takes o. */
void ctl_admin_print(const struct ctl *ctl, json_t *o, void (*human)(const json_t *o));

/* The human form of one object: a two-column table of its members. */
void ctl_admin_print_object(const json_t *o);

/* ctl_admin_call to the first URL, and the answer printed as one object.
 * Returns the exit code. */
int ctl_admin_run(struct ctl *ctl, const char *method, const char *path, const json_t *body,
                  const char *idem);

/* A flag of one command that takes a value: its name ("--reason") and where
 * its value goes (NULL until given).  Lists end with {NULL, NULL}. */
struct ctl_flag {
    const char *name;
    const char **value;
};

/* Parses a command's arguments: exactly npos positional ones into pos, and
 * the flags of the list (each at most once).  Returns 0, or CTL_EXIT_USAGE
 * after saying why. */
int ctl_admin_args(const char *cmd, int argc, char **argv, int npos, const char **pos,
                   struct ctl_flag *flags);

/* Parses a SKU or order id (what names it in messages).  Returns 0, or
 * CTL_EXIT_USAGE after saying why. */
int ctl_admin_id(const char *what, const char *text, int64_t *id);

/* A paged list (GET base?after=&limit=, answering {"skus": [...],
 * "next_after": id|null}): the page --after/--limit ask for, or with no
 * --limit every page from --after on, printed as one (human(o), or the JSON
 * of the last page with every page's items).  Returns an exit code. */
int ctl_admin_pages(struct ctl *ctl, const char *cmd, const char *base, int argc, char **argv,
                    void (*human)(const json_t *o));

/* The exit code of an answer's status and error code (pure). */
int ctl_admin_exit_of(int status, const char *error);

#endif
