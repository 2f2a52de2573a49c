/*
 * replay: main() for a fuzz target without libFuzzer.
 *
 *   fuzz_<name> FILE_OR_DIR...
 *
 * Feeds each file named, and each regular file of each directory named (in
 * name order, not recursing), to LLVMFuzzerTestOneInput once, in a buffer of
 * exactly its size so that an over-read is seen by a sanitizer.  This is how
 * `make test` compiles every target and replays its corpus with the normal
 * compiler: the targets cannot rot when nobody runs clang.
 *
 * Exits 0 when every input ran (a broken property aborts instead), 1 when a
 * file could not be read or there was no input at all.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

/* Runs the target on one file's bytes; returns 0, or -1 if it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    uint8_t *exact;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            buf = realloc(buf, cap);
            if (buf == NULL)
                abort();
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return -1;
    }
    exact = malloc(len ? len : 1);
    if (exact == NULL)
        abort();
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

/* Runs every regular file of dir; adds the count to *ran.  Returns 0 or -1. */
static int replay_dir(const char *dir, int *ran)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), rc = 0;

    if (n < 0) {
        perror(dir);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;

        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path) != 0)
                rc = -1;
            else
                (*ran)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int ran = 0, rc = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;

        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            rc = 1;
        } else if (S_ISDIR(st.st_mode)) {
            if (replay_dir(argv[i], &ran) != 0)
                rc = 1;
        } else if (replay_file(argv[i]) != 0) {
            rc = 1;
        } else {
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "%s: no input to replay\n", argv[0]);
        rc = 1;
    }
    printf("%s: %d inputs replayed%s\n", argv[0], ran, rc ? ", with errors" : "");
    return rc;
}
