/* json.c — typed getters over cJSON that name the offending field, plus parse/print/path/time.
 *
 * Design: every getter builds the field path "<ctx>.<key>" only on the error path, so the happy
 * path is a hash-free linear lookup (cJSON objects are lists) and no allocation. Error messages
 * are uniform ("X: required", "X: must be an integer") so tests and users can rely on them. */
#include "common/json.h"
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* err->field = "<ctx>.<key>" (or "<key>" at the top), err->msg = "<field>: <msg>"; RM_EINVAL. */
static int field_err(rm_err *err, const char *ctx, const char *key, const char *msg)
{
    char f[128];
    if (ctx && *ctx)
        snprintf(f, sizeof f, "%s.%s", ctx, key);
    else
        snprintf(f, sizeof f, "%s", key);
    return rm_err_field(err, RM_EINVAL, f, "%s", msg);
}

/* The one getter core: find obj[key] and check its type with `is`. RM_OK with *item set,
 * RM_ENOTFOUND (absent or null, optional: nothing touched), RM_EINVAL ("required" when absent
 * and required, "must be <what>" when `is` says no). */
static int typed(const cJSON *obj, const char *key, bool required, const char *ctx,
                 cJSON_bool (*is)(const cJSON *), const char *must_be, const cJSON **item, rm_err *err)
{
    const cJSON *it = NULL;
    if (obj && cJSON_IsObject(obj))
        it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return required ? field_err(err, ctx, key, "required") : RM_ENOTFOUND;
    if (!is(it))
        return field_err(err, ctx, key, must_be);
    *item = it;
    return RM_OK;
}

static cJSON_bool is_string(const cJSON *it)
{
    return cJSON_IsString(it) && it->valuestring;
}

int rm_json_int(const cJSON *obj, const char *key, bool required, const char *ctx, int64_t *out, rm_err *err)
{
    const cJSON *it = NULL;
    int rc = typed(obj, key, required, ctx, cJSON_IsNumber, "must be an integer", &it, err);
    if (rc != RM_OK)
        return rc;
    double v = it->valuedouble;
    if (!isfinite(v)) /* YAML's .inf/.nan */
        return field_err(err, ctx, key, "must be a finite number");
    if (v != floor(v))
        return field_err(err, ctx, key, "must be an integer");
    /* 2^63 is exactly representable; anything >= it does not fit (2^63-1 written out parses as
     * 2^63, a double's nearest value, and is out of range too) */
    if (v >= 9223372036854775808.0 || v < -9223372036854775808.0)
        return field_err(err, ctx, key, "out of range");
    *out = (int64_t)v;
    return RM_OK;
}

int rm_json_num(const cJSON *obj, const char *key, bool required, const char *ctx, double *out, rm_err *err)
{
    const cJSON *it = NULL;
    int rc = typed(obj, key, required, ctx, cJSON_IsNumber, "must be a number", &it, err);
    if (rc == RM_OK && !isfinite(it->valuedouble)) /* YAML's .inf/.nan: no knob wants them */
        return field_err(err, ctx, key, "must be a finite number");
    if (rc == RM_OK)
        *out = it->valuedouble;
    return rc;
}

int rm_json_bool(const cJSON *obj, const char *key, bool required, const char *ctx, bool *out, rm_err *err)
{
    const cJSON *it = NULL;
    int rc = typed(obj, key, required, ctx, cJSON_IsBool, "must be a boolean", &it, err);
    if (rc == RM_OK)
        *out = cJSON_IsTrue(it);
    return rc;
}

int rm_json_str(const cJSON *obj, const char *key, bool required, const char *ctx, const char **out,
                rm_err *err)
{
    const cJSON *it = NULL;
    int rc = typed(obj, key, required, ctx, is_string, "must be a string", &it, err);
    if (rc == RM_OK)
        *out = it->valuestring;
    return rc;
}

int rm_json_obj(const cJSON *obj, const char *key, bool required, const char *ctx, const cJSON **out,
                rm_err *err)
{
    return typed(obj, key, required, ctx, cJSON_IsObject, "must be an object", out, err);
}

int rm_json_arr(const cJSON *obj, const char *key, bool required, const char *ctx, const cJSON **out,
                rm_err *err)
{
    return typed(obj, key, required, ctx, cJSON_IsArray, "must be an array", out, err);
}

int rm_json_no_unknown(const cJSON *obj, const char *const *allowed, const char *ctx, rm_err *err)
{
    if (!obj || !cJSON_IsObject(obj))
        return RM_OK;
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = allowed; a && *a; a++) {
            if (it->string && strcmp(*a, it->string) == 0) {
                ok = 1;
                break;
            }
        }
        if (!ok)
            return field_err(err, ctx, it->string ? it->string : "?", "unknown field");
    }
    return RM_OK;
}

cJSON *rm_json_parse(const char *buf, size_t len, rm_err *err)
{
    if (!buf) {
        rm_errf(err, RM_EINVAL, "invalid JSON at offset 0: no input");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        size_t off = end && end >= buf ? (size_t)(end - buf) : 0;
        const char *e = cJSON_GetErrorPtr();
        if (!end && e && e >= buf && e <= buf + len)
            off = (size_t)(e - buf);
        rm_errf(err, RM_EINVAL, "invalid JSON at offset %zu", off);
        return NULL;
    }
    /* trailing garbage after the value (whitespace and NUL padding allowed) */
    size_t off = end ? (size_t)(end - buf) : len;
    while (off < len && (buf[off] == ' ' || buf[off] == '\t' || buf[off] == '\n' || buf[off] == '\r'))
        off++;
    if (off < len && buf[off] != 0) {
        cJSON_Delete(root);
        rm_errf(err, RM_EINVAL, "invalid JSON at offset %zu: trailing data", off);
        return NULL;
    }
    return root;
}

char *rm_json_print(const cJSON *obj)
{
    if (!obj)
        return NULL;
    return cJSON_PrintUnformatted(obj);
}

const cJSON *rm_json_path(const cJSON *root, const char *path)
{
    const cJSON *cur = root;
    const char *p = path;
    if (!root || !path)
        return NULL;
    while (*p && cur) {
        if (*p == '.') {
            p++;
            continue;
        }
        if (*p == '[') {
            char *e;
            long idx = strtol(p + 1, &e, 10);
            /* idx > INT_MAX would wrap in cJSON's int index and name another element */
            if (e == p + 1 || *e != ']' || idx < 0 || idx > INT_MAX || !cJSON_IsArray(cur))
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)idx);
            p = e + 1;
            continue;
        }
        const char *s = p;
        while (*p && *p != '.' && *p != '[')
            p++;
        size_t n = (size_t)(p - s);
        if (!cJSON_IsObject(cur))
            return NULL;
        const cJSON *found = NULL;
        for (const cJSON *it = cur->child; it; it = it->next) {
            if (it->string && strlen(it->string) == n && memcmp(it->string, s, n) == 0) {
                found = it;
                break;
            }
        }
        cur = found;
    }
    return cur;
}

/* The last second RFC 3339 can spell (four-digit years). */
#define RM_JSON_MAX_TIME 253402300799.0 /* 9999-12-31T23:59:59Z */

static void fmt_time(char *buf, size_t cap, double t, int micro)
{
    if (!isfinite(t) || t < 0)
        t = 0;
    /* beyond it, (time_t)t may overflow (undefined) and gmtime_r/strftime fail, leaving garbage */
    if (t > RM_JSON_MAX_TIME)
        t = RM_JSON_MAX_TIME;
    time_t s = (time_t)floor(t);
    long us = (long)llround((t - (double)s) * 1e6);
    if (us >= 1000000) {
        s++;
        us -= 1000000;
    }
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    if (micro)
        snprintf(buf + n, cap - n, ".%06ldZ", us);
    else
        snprintf(buf + n, cap - n, "Z");
}

void rm_json_time(char buf[32], double unix_seconds)
{
    fmt_time(buf, 32, unix_seconds, 0);
}
void rm_json_microtime(char buf[40], double unix_seconds)
{
    fmt_time(buf, 40, unix_seconds, 1);
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int rm_json_parse_time(const char *s, double *out)
{
    int Y, M, D, h, m, sec;
    if (!s || strlen(s) < 20)
        return RM_EINVAL;
    if (digits(s, 4, &Y) || s[4] != '-' || digits(s + 5, 2, &M) || s[7] != '-' || digits(s + 8, 2, &D) ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || digits(s + 11, 2, &h) || s[13] != ':' ||
        digits(s + 14, 2, &m) || s[16] != ':' || digits(s + 17, 2, &sec))
        return RM_EINVAL;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (Y % 4 == 0 && Y % 100 != 0) || Y % 400 == 0;
    /* timegm would roll "02-30" into March: refuse it as Kubernetes does */
    if (M < 1 || M > 12 || D < 1 || D > mdays[M - 1] || (M == 2 && D == 29 && !leap) || h > 23 || m > 59 ||
        sec > 60)
        return RM_EINVAL;
    const char *p = s + 19;
    double frac = 0;
    if (*p == '.') {
        double scale = 0.1;
        p++;
        if (!isdigit((unsigned char)*p))
            return RM_EINVAL;
        while (isdigit((unsigned char)*p)) {
            frac += (*p - '0') * scale;
            scale /= 10;
            p++;
        }
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return RM_EINVAL;
        offset = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return RM_EINVAL;
    }
    if (*p)
        return RM_EINVAL;
    struct tm tm = {0};
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    *out = (double)t - (double)offset + frac;
    return RM_OK;
}

int rm_json_add_controller_ref(cJSON *md, const char *api_version, const char *kind, const char *name,
                               const char *uid)
{
    cJSON *refs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
    if (!cJSON_IsArray(refs)) {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "ownerReferences");
        refs = cJSON_AddArrayToObject(md, "ownerReferences");
    }
    cJSON *r = cJSON_CreateObject();
    if (!refs || !r || !cJSON_AddStringToObject(r, "apiVersion", api_version) ||
        !cJSON_AddStringToObject(r, "kind", kind) || !cJSON_AddStringToObject(r, "name", name) ||
        !cJSON_AddStringToObject(r, "uid", uid ? uid : "") || !cJSON_AddBoolToObject(r, "controller", 1) ||
        !cJSON_AddBoolToObject(r, "blockOwnerDeletion", 1) || !cJSON_AddItemToArray(refs, r)) {
        cJSON_Delete(r);
        return RM_ENOMEM;
    }
    return RM_OK;
}

cJSON *rm_json_object_head(const char *api_version, const char *kind, const char *name,
                           const char *namespace_, const char *uid, const char *resource_version,
                           int64_t generation, cJSON **md)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = NULL;
    if (!o || !cJSON_AddStringToObject(o, "apiVersion", api_version) ||
        !cJSON_AddStringToObject(o, "kind", kind) || !(m = cJSON_AddObjectToObject(o, "metadata")))
        goto oom;
    const char *keys[] = {"name", "namespace", "uid", "resourceVersion"};
    const char *vals[] = {name, namespace_, uid, resource_version};
    for (int i = 0; i < 4; i++)
        if (vals[i] && !cJSON_AddStringToObject(m, keys[i], vals[i]))
            goto oom;
    if (generation && !cJSON_AddNumberToObject(m, "generation", (double)generation))
        goto oom;
    *md = m;
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}
