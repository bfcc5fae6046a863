/* fs.c — see fs.h. The writability probe really writes and fsyncs a byte: access(2) answers for
 * permissions only, not for read-only mounts, full disks or /proc. */
#include "common/fs.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int rm_fs_mkdir_p(const char *path, rm_err *err)
{
    char buf[4096];
    size_t len = path ? strlen(path) : 0;
    if (len == 0 || len >= sizeof buf)
        return rm_errf(err, RM_EINVAL, "mkdir: bad path");
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return rm_errf(err, RM_EIO, "mkdir %s: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    return RM_OK;
}

int rm_fs_dir_writable(const char *dir, const char *what, rm_err *err)
{
    rm_err e = {0};
    if (!dir || !*dir)
        return rm_errf(err, RM_EINVAL, "%s: empty path", what);
    if (rm_fs_mkdir_p(dir, &e) != RM_OK)
        return rm_errf(err, RM_EINVAL, "%s %s: cannot create it (%s)", what, dir, e.msg);
    struct stat st;
    if (stat(dir, &st) != 0)
        return rm_errf(err, RM_EINVAL, "%s %s: %s", what, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rm_errf(err, RM_EINVAL, "%s %s: not a directory", what, dir);
    char probe[4200];
    int w = snprintf(probe, sizeof probe, "%s/.tmp-probe.%ld", dir, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof probe)
        return rm_errf(err, RM_EINVAL, "%s %s: path too long", what, dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rm_errf(err, RM_EINVAL, "%s %s: cannot create a file there (%s)", what, dir, strerror(errno));
    int bad = 0;
    if (write(fd, "x", 1) != 1 || fsync(fd) != 0)
        bad = errno ? errno : EIO;
    close(fd);
    if (unlink(probe) != 0 && !bad)
        bad = errno;
    if (bad)
        return rm_errf(err, RM_EINVAL, "%s %s: cannot write a file there (%s)", what, dir, strerror(bad));
    return RM_OK;
}

/* write(2) until done: a large buffer may go out in parts */
static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int rm_fs_write_atomic(const char *path, const rm_fs_piece *pieces, int n, rm_err *err)
{
    char tmp[4200], dir[4200];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int w;
    if (!slash)
        w = snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        w = snprintf(dir, sizeof dir, "/");
    else
        w = snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!*base || w < 0 || (size_t)w >= sizeof dir ||
        (size_t)snprintf(tmp, sizeof tmp, "%s/.tmp-%s.%ld", dir, base, (long)getpid()) >= sizeof tmp)
        return rm_errf(err, RM_EINVAL, "%s: bad or over-long path", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rm_errf(err, RM_EIO, "%s: cannot create %s (%s)", path, tmp, strerror(errno));
    const char *step = NULL;
    for (int i = 0; i < n && !step; i++)
        if (pieces[i].n && write_all(fd, pieces[i].p, pieces[i].n) != 0)
            step = "write";
    if (!step && fsync(fd) != 0)
        step = "fsync";
    int e = errno;
    if (close(fd) != 0 && !step) {
        step = "close";
        e = errno;
    }
    if (!step && rename(tmp, path) != 0) {
        step = "rename";
        e = errno;
    }
    if (step) {
        unlink(tmp);
        return rm_errf(err, RM_EIO, "%s: %s failed (%s)", path, step, strerror(e ? e : EIO));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the rename itself made durable */
        (void)fsync(dfd);
        close(dfd);
    }
    return RM_OK;
}

int rm_fs_map_file(const char *path, void **map, size_t *size, rm_err *err)
{
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rm_errf(err, RM_EIO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    void *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (n && m == MAP_FAILED)
        return rm_errf(err, RM_EIO, "%s: mmap: %s", path, strerror(e));
    *map = m;
    *size = n;
    return RM_OK;
}

int rm_fs_unlink_globs(const char *dir, const char *const *patterns, size_t n)
{
    int removed = 0;
    for (size_t p = 0; p < n; p++) {
        char pat[PATH_MAX];
        if (snprintf(pat, sizeof pat, "%s/%s", dir, patterns[p]) >= (int)sizeof pat)
            continue;
        glob_t g;
        if (glob(pat, GLOB_NOSORT, NULL, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++)
                if (unlink(g.gl_pathv[i]) == 0)
                    removed++;
        globfree(&g);
    }
    return removed;
}
