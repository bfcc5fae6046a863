/* json.h — typed getters over cJSON that say which field was missing or of the wrong type.
 *
 * `ctx` is the dotted path of `obj` ("spec.restartPolicy", or "" at the top); errors name
 * "<ctx>.<key>" in err->field, e.g. "spec.replicas: must be an integer". Getters return
 * RM_OK, RM_ENOTFOUND (absent and !required: *out untouched, err untouched), or RM_EINVAL
 * (absent and required, or wrong type; err set). JSON null counts as absent.
 * Strings returned are borrowed from the cJSON tree (valid while it lives). */
#ifndef RM_JSON_H
#define RM_JSON_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/rm.h"

int rm_json_int(const cJSON *obj, const char *key, bool required, const char *ctx, int64_t *out,
                rm_err *err); /* integral number only (3.0 ok, 3.5 not); |v| >= 2^63
                                               * "out of range"; inf/NaN "must be a finite number" */
int rm_json_num(const cJSON *obj, const char *key, bool required, const char *ctx, double *out,
                rm_err *err); /* finite only: inf/NaN "must be a finite number" */
int rm_json_bool(const cJSON *obj, const char *key, bool required, const char *ctx, bool *out, rm_err *err);
int rm_json_str(const cJSON *obj, const char *key, bool required, const char *ctx, const char **out,
                rm_err *err);
int rm_json_obj(const cJSON *obj, const char *key, bool required, const char *ctx, const cJSON **out,
                rm_err *err);
int rm_json_arr(const cJSON *obj, const char *key, bool required, const char *ctx, const cJSON **out,
                rm_err *err);
/* RM_EINVAL naming the first key of obj not in the NULL-terminated `allowed` list
 * ("spec.foo: unknown field"). */
int rm_json_no_unknown(const cJSON *obj, const char *const *allowed, const char *ctx, rm_err *err);

/* Parse at most `len` bytes (need not be NUL-terminated). Returns owned tree or NULL with err
 * ("invalid JSON at offset N"). */
cJSON *rm_json_parse(const char *buf, size_t len, rm_err *err);
/* Compact print; owned string (free()). NULL on ENOMEM. */
char *rm_json_print(const cJSON *obj);
/* Follow a dotted path with [i] indexes ("status.conditions[0].type"); borrowed or NULL. */
const cJSON *rm_json_path(const cJSON *root, const char *path);
/* RFC 3339 UTC with seconds ("2026-11-21T08:00:00Z") and MicroTime ("...00.000000Z"). */
void rm_json_time(char buf[32], double unix_seconds);
void rm_json_microtime(char buf[40], double unix_seconds);
int rm_json_parse_time(const char *s, double *out); /* accepts both forms; RM_EINVAL if bad */
/* The head every API object shares: {"apiVersion", "kind", "metadata": {name, namespace, uid,
 * resourceVersion, generation}}, leaving out NULL strings and a zero generation. Returns a new
 * object the caller owns and sets *md to its metadata (borrowed); NULL when out of memory. */
cJSON *rm_json_object_head(const char *api_version, const char *kind, const char *name,
                           const char *namespace_, const char *uid, const char *resource_version,
                           int64_t generation, cJSON **md);
/* Append a controller ownerReference {apiVersion, kind, name, uid, controller: true,
 * blockOwnerDeletion: true} to metadata `md` (creating its ownerReferences array when absent).
 * Strings are copied; NULL uid is written as "". RM_OK, or RM_ENOMEM with `md` unchanged
 * except possibly for an empty ownerReferences array. */
int rm_json_add_controller_ref(cJSON *md, const char *api_version, const char *kind, const char *name,
                               const char *uid);
#endif
