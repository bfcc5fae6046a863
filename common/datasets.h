/* datasets.h — where the built-in data sets live (docs/models-and-data.md, "Data formats"):
 * `builtin:fashion-mnist` is Debian's dataset-fashion-mnist package; `builtin:tinyshakespeare` is
 * the project's copy (datasets/tinyshakespeare/, installed to <prefix>/share/ringmaster/datasets and
 * into the worker image), and a local data.uri (/path or file:///path) is read in place.
 *
 * Ownership: paths are written into caller buffers; nothing is allocated. */
#ifndef RM_COMMON_DATASETS_H
#define RM_COMMON_DATASETS_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"
#include "common/trainingjob.h"

#define RM_TJ_BUILTIN_TINYSHAKESPEARE "builtin:tinyshakespeare"
/* Its size (datasets/tinyshakespeare/README.md: sha256 86c4e6aa...), for estimates before a worker runs. */
#define RM_TJ_TINYSHAKESPEARE_BYTES 1115394
/* The folder holding the project's data sets, found in this order: $RINGMASTER_DATASETS, the
 * executable's ../share/ringmaster/datasets (an install), its ../datasets (a source checkout),
 * /usr/local/share/ringmaster/datasets, /usr/share/ringmaster/datasets. */
#define RM_ENV_DATASETS "RINGMASTER_DATASETS"

/* The local path a URI names (/path as it is, file:///path without the scheme), or NULL for any
 * other form (builtin:, http(s)://, s3://). Borrowed from uri. */
const char *rm_uri_local(const char *uri);
/* True when uri is fetched before it is read (http://, https://, s3://: common/fetch.h). */
bool rm_uri_fetched(const char *uri);
/* True when uri names a built-in set ("builtin:" + a known name). */
bool rm_builtin_known(const char *uri);
/* The local path of data.uri (builtin:<name>, /path, file:///path) and the format the set has
 * (builtin) or RM_DATA_IDX as a placeholder (paths: see rm_data_sniff). RM_EUNSUPPORTED for remote
 * URIs, RM_EINVAL for an unknown built-in name, RM_ENOTFOUND when a built-in set is not installed;
 * errors name spec.training.data.uri. */
int rm_data_local_path(const char *uri, char *path, size_t cap, rm_data_format *fmt, rm_err *err);
/* The format of a local file or folder from its header or names: a file starting with a token
 * shard's magic is tokens, another file text; a folder holding *.bin shards is tokens, else idx. */
rm_data_format rm_data_sniff(const char *path);
#endif
