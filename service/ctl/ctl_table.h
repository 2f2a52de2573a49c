/*
 * ctl_table: seckillctl's human output: aligned columns, and the text of a
 * JSON value in a cell.  Pure (it writes to the FILE it is given), for the
 * unit tests.
 */
#ifndef SECKILL_CTL_TABLE_H
#define SECKILL_CTL_TABLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#define CTL_CELL_MAX 256 /* bytes of one cell's text; longer text ends in "..." */

/* A table: a header row, then rows, of ncols cells each (copied). */
struct ctl_table {
    size_t ncols, nrows; /* nrows counts the header */
    char **cells;        /* row-major */
};

/* Starts t with its header (ncols names). */
void ctl_table_init(struct ctl_table *t, size_t ncols, const char *const *header);
/* Appends one row of t->ncols cells (NULL: "-"). */
void ctl_table_add(struct ctl_table *t, const char *const *row);
/* Prints t: every column as wide as its widest cell (in characters: a UTF-8
 * sequence counts one), two spaces apart, no trailing blanks. */
void ctl_table_print(const struct ctl_table *t, FILE *out);
void ctl_table_free(struct ctl_table *t);

/* The text of a JSON value for a cell: null or absent "-", booleans
 * "yes"/"no", numbers as JSON writes them, strings as they are but with
 * control characters shown as '?' (a name must not break the table), other
 * values as compact JSON.  Writes at most cap bytes (cap >= 4) into buf and
 * returns buf. */
const char *ctl_cell(const json_t *v, char *buf, size_t cap);

/* Prints a JSON object as a two-column table of its members, in its order:
 * "name  value". */
void ctl_table_print_object(const json_t *o, FILE *out);

/* Prints the objects of array 'items' as a table of the given columns (the
 * members' names are the header). */
void ctl_table_print_items(const json_t *items, size_t ncols, const char *const *cols, FILE *out);

#endif
