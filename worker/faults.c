/* faults.c — decide when a fault fires; see faults.h (the parser is in faults_parse.c).
 * Design: the marker is written before the fault fires, so even an _exit right after cannot lose
 * it; a marker that cannot be written means the fault does not fire (never fire twice). */
#include "common/faults.h"
#include "worker/checkpoint/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void rm_faults_set_dir(rm_faults *fs, const char *dir)
{
    snprintf(fs->dir, sizeof fs->dir, "%s", dir ? dir : "");
}

const rm_fault *rm_faults_due(rm_faults *fs, int rank, int64_t step)
{
    for (int i = 0; i < fs->n; i++) {
        rm_fault *f = &fs->f[i];
        if (f->kind == RM_FAULT_SLOW || f->fired || f->rank != rank || f->step != step)
            continue;
        f->fired = true;
        if (fs->dir[0]) {
            char path[1200];
            snprintf(path, sizeof path, "%s/.fault-%d-fired", fs->dir, i);
            rm_err merr = {0};
            if (rm_mkdir_p(fs->dir, &merr)) /* before the first checkpoint the folder may not exist */
                rm_warn("fault marker folder err=\"%s\"", merr.msg);
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
            if (fd < 0) {
                if (errno != EEXIST)
                    rm_warn("fault not fired: cannot write marker path=%s err=\"%s\"", path, strerror(errno));
                continue; /* fired before (by this job) or cannot prove once-only: skip */
            }
            char line[96];
            int n = snprintf(line, sizeof line, "%s rank=%d step=%lld pid=%ld\n", rm_fault_kind_name(f->kind),
                             rank, (long long)step, (long)getpid());
            if (write(fd, line, (size_t)n) < 0) {
                /* the marker exists even if empty; that is what counts */
            }
            fsync(fd);
            close(fd);
        }
        return f;
    }
    return NULL;
}
