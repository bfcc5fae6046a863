/* tj_internal.h — what the files of the TrainingJob module share and nothing else uses:
 * trainingjob.c (names, parse, defaults, serialization, copy), tj_validate.c (rules),
 * tj_memory.c (the memory estimate), tj_status.c (status, conditions), tj_runtime.c (runtimes)
 * and tj_json.c (the field getters below). Include it only from those; the public API is trainingjob.h. */
#ifndef RM_TJ_INTERNAL_H
#define RM_TJ_INTERNAL_H
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include "common/trainingjob.h"

/* Longest field path a message names (rm_err.field's size). */
#define FIELD_CAP 128

/* "<ctx>.<key>" into buf[FIELD_CAP], cut to fit. */
void tj_join(char *buf, const char *ctx, const char *key);
/* Maps a json.h getter's rc for an optional field: RM_ENOTFOUND (absent or null) is RM_OK; RM_OK
 * records `bit` in *set (when set is non-NULL); an error is returned as it is. */
int tj_optional(int rc, uint32_t *set, uint32_t bit);
/* Optional fields of object o, named "<ctx>.<k>" in errors: absent leaves *out untouched; present
 * and valid stores it and records `bit` in *set (set may be NULL); a wrong type is the json.h
 * error. tj_str replaces *out with an owned copy. tj_enum stores the index in names. */
int tj_int(const cJSON *o, const char *k, const char *ctx, int *out, uint32_t *set, uint32_t bit,
           rm_err *err);
int tj_i64(const cJSON *o, const char *k, const char *ctx, int64_t *out, uint32_t *set, uint32_t bit,
           rm_err *err);
int tj_num(const cJSON *o, const char *k, const char *ctx, double *out, uint32_t *set, uint32_t bit,
           rm_err *err);
int tj_bool(const cJSON *o, const char *k, const char *ctx, bool *out, uint32_t *set, uint32_t bit,
            rm_err *err);
int tj_str(const cJSON *o, const char *k, const char *ctx, char **out, rm_err *err);
int tj_enum(const cJSON *o, const char *k, const char *ctx, const char *const *names, int *out, rm_err *err);
/* "a, b, c": a name table as a message lists it (cut to cap). */
void tj_names_list(char *buf, size_t cap, const char *const *names);
/* Optional object child (*out NULL when absent, borrowed); with `allowed`, its unknown keys are
 * errors named under subctx, which is filled with "<ctx>.<k>" when non-NULL. */
int tj_obj(const cJSON *o, const char *k, const char *ctx, const char *const *allowed, const cJSON **out,
           char *subctx, rm_err *err);
/* Optional array child, *out NULL when absent (borrowed). */
int tj_arr(const cJSON *o, const char *k, const char *ctx, const cJSON **out, rm_err *err);

/* Validation helpers (tj_validate.c): tj_bad fills err for the field "<ctx>.<key>" and returns
 * RM_EINVAL; tj_has_ctrl: s holds a control character (NULL: no); tj_dns1123: s is a DNS-1123
 * label (allow_dot: subdomain) of at most max characters. */
int tj_bad(rm_err *err, const char *ctx, const char *key, const char *fmt, ...) RM_PRINTF(4, 5);
/* An enum value outside its table (set from C, not parsed): "must be one of <the table>". */
int tj_bad_enum(rm_err *err, const char *ctx, const char *key, const char *const *names);
int tj_has_ctrl(const char *s);
int tj_dns1123(const char *s, int allow_dot, size_t max);
/* The fields of docs/models-and-data.md (tj_models_data.c): their ranges, then the
 * "not supported yet" gate for each value whose feature has not landed. training: called at the
 * end of rm_training_validate; spec: tensorParallel (from rm_par_validate) and spec.output. */
/* The folder a data.uri names ("/path", "file:///path" -> "/path", borrowed), else NULL: the
 * deprecated dataDir's spelling in data.uri. */
const char *tj_data_folder(const char *uri);
int tj_validate_models_data(const rm_training_spec *t, const char *ctx, rm_err *err);
int tj_validate_tensor_parallel(const rm_tj_spec *s, rm_err *err);
int tj_validate_output(const rm_tj_spec *s, rm_err *err);
/* "66.3 MiB", "1.5 GiB", "512 B" (tj_memory.c). */
void tj_fmt_bytes(char *buf, size_t cap, int64_t n);
/* The worker container's resources.limits.memory against the estimate for one worker
 * (tj_memory.c; rm_tj_validate applies it). */
int tj_check_template_memory(const rm_tj *tj, rm_err *err);
#endif
