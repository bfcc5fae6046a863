/* fs.h — small file-system helpers shared by the worker and the runner.
 *
 * Ownership: paths are borrowed; nothing is kept between calls. */
#ifndef RM_COMMON_FS_H
#define RM_COMMON_FS_H
#include "common/rm.h"

/* mkdir -p (mode 0755). RM_EINVAL for an empty or over-long path, RM_EIO naming the component
 * that could not be made. */
int rm_fs_mkdir_p(const char *path, rm_err *err);

/* Can files be written into dir? Creates it (mkdir -p) if missing, then requires a directory in
 * which a file can be created, written, fsync'd and removed (a probe ".tmp-probe.<pid>").
 * RM_EINVAL with err naming the path and the reason (not a directory, read-only, permission
 * denied, /proc-like file systems). `what` starts the message ("checkpoint dir"). */
int rm_fs_dir_writable(const char *dir, const char *what, rm_err *err);

/* Map a regular file read-only (private): *map (NULL for an empty file) and *size, to be given
 * back with munmap(*map, *size). RM_EIO naming the path: missing, unreadable, not a regular file,
 * mmap refused. */
int rm_fs_map_file(const char *path, void **map, size_t *size, rm_err *err);

/* A byte range to write. */
typedef struct rm_fs_piece {
    const void *p;
    size_t n;
} rm_fs_piece;
/* Write the pieces, in order, as the whole content of path (mode 0644), atomically: a temp file
 * beside it (".tmp-<name>.<pid>"), write, fsync, rename over path, fsync the folder. A reader
 * sees the old file or the whole new one; on failure the temp file is removed and path is as it
 * was. RM_EIO naming the path and the step that failed. */
int rm_fs_write_atomic(const char *path, const rm_fs_piece *pieces, int n, rm_err *err);

/* Unlink every file matching dir/PATTERN for each of the n glob patterns, in order (a caller that
 * must remove one kind before another lists it first). Returns how many were removed. */
int rm_fs_unlink_globs(const char *dir, const char *const *patterns, size_t n);
#endif
