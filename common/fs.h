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
#endif
