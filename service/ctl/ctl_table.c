#include "ctl/ctl_table.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

void ctl_table_init(struct ctl_table *t, size_t ncols, const char *const *header)
{
    t->ncols = ncols;
    t->nrows = 0;
    t->cells = NULL;
    ctl_table_add(t, header);
}

void ctl_table_add(struct ctl_table *t, const char *const *row)
{
    t->cells = xrealloc(t->cells, (t->nrows + 1) * t->ncols * sizeof *t->cells);
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = xstrdup(row[c] ? row[c] : "-");
    t->nrows++;
}

/* Characters of UTF-8 text s: the bytes that do not continue a sequence. */
static size_t width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

void ctl_table_print(const struct ctl_table *t, FILE *out)
{
    size_t *w = xcalloc(t->ncols + 1, sizeof *w);
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t cw = width(t->cells[r * t->ncols + c]);
            if (cw > w[c])
                w[c] = cw;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            fputs(cell, out);
            if (c + 1 < t->ncols)
                fprintf(out, "%*s", (int)(w[c] - width(cell) + 2), "");
        }
        fputc('\n', out);
    }
    free(w);
}

void ctl_table_free(struct ctl_table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = 0;
}

const char *ctl_cell(const json_t *v, char *buf, size_t cap)
{
    char *text = NULL;
    const char *s;
    if (!v || json_is_null(v))
        s = "-";
    else if (json_is_boolean(v))
        s = json_is_true(v) ? "yes" : "no";
    else if (json_is_string(v))
        s = json_string_value(v);
    else
        s = text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = strlen(s ? s : "");
    if (n >= cap) {
        /* cut on a character's first byte, and say so */
        n = cap - 4;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
        memcpy(buf, s, n);
        memcpy(buf + n, "...", 4);
    } else {
        memcpy(buf, s ? s : "", n + 1);
    }
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    free(text);
    return buf;
}

void ctl_table_print_object(const json_t *o, FILE *out)
{
    struct ctl_table t;
    ctl_table_init(&t, 2, (const char *[]){"field", "value"});
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        char cell[CTL_CELL_MAX];
        ctl_table_add(&t, (const char *[]){key, ctl_cell(v, cell, sizeof cell)});
    }
    ctl_table_print(&t, out);
    ctl_table_free(&t);
}

void ctl_table_print_items(const json_t *items, size_t ncols, const char *const *cols, FILE *out)
{
    struct ctl_table t;
    ctl_table_init(&t, ncols, cols);
    char(*cells)[CTL_CELL_MAX] = xcalloc(ncols, sizeof *cells);
    const char **row = xcalloc(ncols, sizeof *row);
    size_t i;
    const json_t *item;
    json_array_foreach((json_t *)items, i, item)
    {
        for (size_t c = 0; c < ncols; c++)
            row[c] = ctl_cell(json_object_get(item, cols[c]), cells[c], CTL_CELL_MAX);
        ctl_table_add(&t, row);
    }
    ctl_table_print(&t, out);
    ctl_table_free(&t);
    free(row);
    free(cells);
}
