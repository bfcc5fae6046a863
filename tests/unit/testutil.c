/* See testutil.h. */
#include <math.h>
#include "tests/unit/testutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void rm_test_add_suite(const char *name, int (*init)(void), int (*clean)(void), const rm_test_case *cases,
                       size_t n)
{
    CU_pSuite s = CU_add_suite(name, init, clean);
    if (!s) {
        fprintf(stderr, "cannot add suite %s\n", name);
        exit(2);
    }
    for (size_t i = 0; i < n; i++)
        CU_add_test(s, cases[i].name, cases[i].fn);
}

char *rm_test_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/rmtest-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(buf))
        return NULL;
    return strdup(buf);
}

void rm_test_rmtree(const char *path)
{
    if (!path || !*path || strcmp(path, "/") == 0)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "rmtree %s failed\n", path);
}

void rm_test_clear_dir(const char *path)
{
    rm_test_rmtree(path);
    if (path)
        mkdir(path, 0700);
}

int rm_test_tmpdir_free(char **path)
{
    if (*path)
        rm_test_rmtree(*path);
    free(*path);
    *path = NULL;
    return 0;
}

char *rm_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!b)
        return NULL;
    b[n] = 0;
    if (len)
        *len = n;
    return b;
}

int rm_test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

const char *rm_test_bindir(void)
{
    const char *b = getenv("RM_BIN");
    return b && *b ? b : "bin";
}

double rm_test_rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}
