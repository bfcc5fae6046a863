/* sample.c — `ringmaster sample` (sample.h): exec `ringmaster-worker sample ARGS...`. */
#include "operator/sample.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rm.h"
#include "operator/local.h"

int rm_sample_main(int argc, char **argv)
{
    char bin[PATH_MAX];
    rm_err e = {0};
    if (rm_local_worker_bin(bin, sizeof bin, &e) != RM_OK) {
        fprintf(stderr, "ringmaster sample: %s\n", e.msg);
        return 1;
    }
    char **av = calloc((size_t)argc + 2, sizeof *av); /* bin, "sample", argv[1..], NULL */
    if (!av) {
        fprintf(stderr, "ringmaster sample: out of memory\n");
        return 1;
    }
    av[0] = bin;
    av[1] = "sample";
    for (int i = 1; i < argc; i++)
        av[i + 1] = argv[i];
    execv(bin, av);
    fprintf(stderr, "ringmaster sample: cannot run %s: %s\n", bin, strerror(errno));
    free(av);
    return 1;
}
