/* fs.c — see fs.h. The writability probe really writes and fsyncs a byte: access(2) answers for
 * permissions only, not for read-only mounts, full disks or /proc. */
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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
        return rm_errf(err, RM_EINVAL, "%s %s: cannot create a file there (%s)", what, dir,
                       strerror(errno));
    int bad = 0;
    if (write(fd, "x", 1) != 1 || fsync(fd) != 0)
        bad = errno ? errno : EIO;
    close(fd);
    if (unlink(probe) != 0 && !bad)
        bad = errno;
    if (bad)
        return rm_errf(err, RM_EINVAL, "%s %s: cannot write a file there (%s)", what, dir,
                       strerror(bad));
    return RM_OK;
}
