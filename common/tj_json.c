/* tj_json.c — the typed getters the TrainingJob parsers read every field through
 * (tj_internal.h): each takes an optional field, names it "<ctx>.<key>" on a wrong type or range,
 * and records its presence in a `set` mask so defaults never overwrite an explicit 0. */
#include "common/tj_internal.h"
#include "common/json.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<ctx>.<key>" into buf[FIELD_CAP]. A longer path is cut on purpose (it only names a field in
 * messages, and rm_err.field is that size too), so GCC's truncation warning is off here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
void tj_join(char *buf, const char *ctx, const char *key)
{
    if (ctx && *ctx)
        snprintf(buf, FIELD_CAP, "%s.%s", ctx, key);
    else
        snprintf(buf, FIELD_CAP, "%s", key);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Every tj_* getter reads an optional field: absent (or null) is RM_OK with *out untouched; present and
 * valid records `bit` in *set (when set is non-NULL); a wrong type is the json.h error. */
int tj_optional(int rc, uint32_t *set, uint32_t bit)
{
    if (rc == RM_ENOTFOUND)
        return RM_OK;
    if (rc == RM_OK && set)
        *set |= bit;
    return rc;
}

int tj_int(const cJSON *o, const char *k, const char *ctx, int *out, uint32_t *set, uint32_t bit, rm_err *err)
{
    int64_t v;
    int rc = rm_json_int(o, k, false, ctx, &v, err);
    if (rc)
        return tj_optional(rc, NULL, 0); /* absent: RM_OK; wrong type: the error */
    if (v < INT_MIN || v > INT_MAX) {
        char f[FIELD_CAP];
        tj_join(f, ctx, k);
        return rm_err_field(err, RM_EINVAL, f, "out of range");
    }
    *out = (int)v;
    return tj_optional(RM_OK, set, bit);
}

int tj_i64(const cJSON *o, const char *k, const char *ctx, int64_t *out, uint32_t *set, uint32_t bit,
           rm_err *err)
{
    return tj_optional(rm_json_int(o, k, false, ctx, out, err), set, bit);
}

int tj_num(const cJSON *o, const char *k, const char *ctx, double *out, uint32_t *set, uint32_t bit,
           rm_err *err)
{
    return tj_optional(rm_json_num(o, k, false, ctx, out, err), set, bit);
}

int tj_bool(const cJSON *o, const char *k, const char *ctx, bool *out, uint32_t *set, uint32_t bit,
            rm_err *err)
{
    return tj_optional(rm_json_bool(o, k, false, ctx, out, err), set, bit);
}

int tj_str(const cJSON *o, const char *k, const char *ctx, char **out, rm_err *err)
{
    const char *s = NULL;
    int rc = tj_optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    char *d = strdup(s);
    if (!d)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    free(*out);
    *out = d;
    return RM_OK;
}

void tj_names_list(char *buf, size_t cap, const char *const *names)
{
    buf[0] = 0;
    for (int j = 0; names[j]; j++) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", j ? ", " : "", names[j]);
    }
}

int tj_enum(const cJSON *o, const char *k, const char *ctx, const char *const *names, int *out, rm_err *err)
{
    const char *s = NULL;
    int rc = tj_optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    int i = rm_enum_index(names, s);
    if (i < 0) {
        char f[FIELD_CAP], list[128];
        tj_join(f, ctx, k);
        tj_names_list(list, sizeof list, names);
        return rm_err_field(err, RM_EINVAL, f, "must be one of %s (got \"%s\")", list, s);
    }
    *out = i;
    return RM_OK;
}

int tj_obj(const cJSON *o, const char *k, const char *ctx, const char *const *allowed, const cJSON **out,
           char *subctx, rm_err *err)
{
    *out = NULL;
    if (subctx)
        tj_join(subctx, ctx, k);
    int rc = tj_optional(rm_json_obj(o, k, false, ctx, out, err), NULL, 0);
    if (rc == RM_OK && *out && allowed)
        return rm_json_no_unknown(*out, allowed, subctx, err);
    return rc;
}

int tj_arr(const cJSON *o, const char *k, const char *ctx, const cJSON **out, rm_err *err)
{
    *out = NULL;
    return tj_optional(rm_json_arr(o, k, false, ctx, out, err), NULL, 0);
}
