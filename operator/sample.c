/* sample.c — `ringmaster sample` (sample.h): exec `ringmaster-worker sample ARGS...`; and the exec
 * itself, which `ringmaster export` (operator/export.c) shares. */
#include "operator/sample.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rm.h"
#include "operator/local.h"

int rm_worker_exec(const char *sub, int argc, char **argv)
{
    char bin[PATH_MAX];
    rm_err e = {0};
    if (rm_local_worker_bin(bin, sizeof bin, &e) != RM_OK) {
        fprintf(stderr, "ringmaster %s: %s\n", sub, e.msg);
        return 1;
    }
    char **av = calloc((size_t)argc + 2, sizeof *av); /* bin, sub, argv[1..], NULL */
    if (!av) {
        fprintf(stderr, "ringmaster %s: out of memory\n", sub);
        return 1;
    }
    av[0] = bin;
    av[1] = (char *)sub;
    for (int i = 1; i < argc; i++)
        av[i + 1] = argv[i];
    execv(bin, av);
    fprintf(stderr, "ringmaster %s: cannot run %s: %s\n", sub, bin, strerror(errno));
    free(av);
    return 1;
}

int rm_sample_main(int argc, char **argv)
{
    return rm_worker_exec("sample", argc, argv);
}
