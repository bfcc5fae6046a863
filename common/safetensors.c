/* safetensors.c — see safetensors.h. The header is parsed with cJSON after its length is checked
 * against the cap and the file size; tensors are validated one by one (naming each), then sorted by
 * offset to prove they tile the data buffer. The file stays mapped: a loader reads tensors in place. */
#include "common/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [RM_ST_BOOL] = {"BOOL", 1}, [RM_ST_U8] = {"U8", 1},   [RM_ST_I8] = {"I8", 1},
    [RM_ST_I16] = {"I16", 2},   [RM_ST_U16] = {"U16", 2}, [RM_ST_F16] = {"F16", 2},
    [RM_ST_BF16] = {"BF16", 2}, [RM_ST_I32] = {"I32", 4}, [RM_ST_U32] = {"U32", 4},
    [RM_ST_F32] = {"F32", 4},   [RM_ST_F64] = {"F64", 8}, [RM_ST_I64] = {"I64", 8},
    [RM_ST_U64] = {"U64", 8},
};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

const char *rm_st_dtype_name(rm_st_dtype d)
{
    return (unsigned)d < (unsigned)NDTYPES ? dtypes[d].name : "?";
}

size_t rm_st_dtype_size(rm_st_dtype d)
{
    return (unsigned)d < (unsigned)NDTYPES ? dtypes[d].size : 0;
}

int rm_st_dtype_parse(const char *s, rm_st_dtype *out)
{
    for (int i = 0; s && i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, s) == 0) {
            *out = (rm_st_dtype)i;
            return RM_OK;
        }
    return RM_EINVAL;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* One tensor's entry: dtype, shape, offsets, and the byte count they imply. */
static int parse_tensor(const char *what, const cJSON *v, uint64_t data_size, rm_st_tensor *t, rm_err *err)
{
    const char *name = v->string;
    if (!cJSON_IsObject(v))
        return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": not an object", what, name);
    for (const cJSON *k = v->child; k; k = k->next)
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") && strcmp(k->string, "data_offsets"))
            return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": unknown field \"%s\"", what, name, k->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsString(dt) || rm_st_dtype_parse(dt->valuestring, &t->dtype) != RM_OK)
        return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": dtype: not one of the format's (F32, BF16, ...)",
                       what, name);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > RM_ST_MAX_DIMS)
        return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": shape: an array of at most %d extents", what, name,
                       RM_ST_MAX_DIMS);
    uint64_t count = 1;
    t->ndim = 0;
    for (const cJSON *d = sh->child; d; d = d->next) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9007199254740992.0 ||
            d->valuedouble != (double)(int64_t)d->valuedouble)
            return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": shape: extents are integers >= 0", what, name);
        t->shape[t->ndim++] = (int64_t)d->valuedouble;
        uint64_t e = (uint64_t)d->valuedouble;
        if (e && count > UINT64_MAX / e)
            return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": shape: too many elements", what, name);
        count *= e;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !cJSON_IsNumber(of->child) ||
        !cJSON_IsNumber(of->child->next))
        return rm_errf(err, RM_EINVAL, "%s: tensor \"%s\": data_offsets: two integers [begin, end]", what,
                       name);
    double b = of->child->valuedouble, e = of->child->next->valuedouble;
    if (b < 0 || e < b || e > (double)data_size || b != (double)(uint64_t)b || e != (double)(uint64_t)e)
        return rm_errf(err, RM_EINVAL,
                       "%s: tensor \"%s\": data_offsets [%.0f, %.0f] outside the %llu-byte "
                       "data buffer",
                       what, name, b, e, (unsigned long long)data_size);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    size_t es = rm_st_dtype_size(t->dtype);
    if (count > UINT64_MAX / es || t->end - t->begin != count * es)
        return rm_errf(err, RM_EINVAL,
                       "%s: tensor \"%s\": data_offsets span %llu bytes, its dtype and "
                       "shape %llu",
                       what, name, (unsigned long long)(t->end - t->begin), (unsigned long long)(count * es));
    t->name = name;
    return RM_OK;
}

static int by_begin(const void *a, const void *b)
{
    const rm_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int parse_header(const unsigned char *buf, size_t size, const char *what, rm_st_file *f, rm_err *err)
{
    if (size < 8)
        return rm_errf(err, RM_EINVAL, "%s: %zu bytes, shorter than the 8-byte header length", what, size);
    uint64_t n = le64(buf);
    if (n > RM_ST_MAX_HEADER || n > size - 8)
        return rm_errf(err, RM_EINVAL, "%s: header length %llu (file %zu bytes, cap %u)", what,
                       (unsigned long long)n, size, RM_ST_MAX_HEADER);
    if (n < 2 || buf[8] != '{')
        return rm_errf(err, RM_EINVAL, "%s: the header is not a JSON object", what);
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)n, &end, false);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return rm_errf(err, RM_EINVAL, "%s: the header is not valid JSON", what);
    }
    for (const char *p = end; p && p < (const char *)buf + 8 + n; p++) /* padding: spaces only */
        if (*p != ' ') {
            cJSON_Delete(h);
            return rm_errf(err, RM_EINVAL, "%s: bytes after the header's JSON object", what);
        }
    f->json = h;
    f->data = buf + 8 + n;
    f->data_size = size - 8 - n;
    int count = 0;
    for (const cJSON *v = h->child; v; v = v->next)
        count += strcmp(v->string, "__metadata__") != 0;
    if (count > RM_ST_MAX_TENSORS)
        return rm_errf(err, RM_EINVAL, "%s: %d tensors (at most %d)", what, count, RM_ST_MAX_TENSORS);
    f->t = calloc(count ? (size_t)count : 1, sizeof *f->t);
    if (!f->t)
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", what);
    int metas = 0, seen_meta = 0;
    for (const cJSON *v = h->child; v; v = v->next) {
        if (strcmp(v->string, "__metadata__") == 0) {
            if (seen_meta++)
                return rm_errf(err, RM_EINVAL, "%s: \"__metadata__\" appears twice in the header", what);
            if (!cJSON_IsObject(v))
                return rm_errf(err, RM_EINVAL, "%s: __metadata__: not an object", what);
            for (const cJSON *m = v->child; m; m = m->next)
                if (!cJSON_IsString(m) || ++metas > RM_ST_MAX_META)
                    return rm_errf(err, RM_EINVAL, "%s: __metadata__.%s: values are strings (at most %d)",
                                   what, m->string, RM_ST_MAX_META);
            continue;
        }
        int rc = parse_tensor(what, v, f->data_size, &f->t[f->n], err); /* the file's fault: no log */
        if (rc)
            return rc;
        f->n++;
    }
    /* a name twice: adjacent once the names are sorted */
    const char **names = malloc((f->n ? (size_t)f->n : 1) * sizeof *names);
    if (!names)
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", what);
    for (int i = 0; i < f->n; i++)
        names[i] = f->t[i].name;
    qsort(names, (size_t)f->n, sizeof *names, by_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            int rc = rm_errf(err, RM_EINVAL, "%s: tensor \"%s\" appears twice in the header", what, names[i]);
            free(names);
            return rc;
        }
    free(names);
    qsort(f->t, (size_t)f->n, sizeof *f->t, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->t[i].begin != at)
            return rm_errf(err, RM_EINVAL,
                           "%s: tensor \"%s\" starts at byte %llu of the data buffer, "
                           "not %llu: the tensors must tile it without gaps or overlaps",
                           what, f->t[i].name, (unsigned long long)f->t[i].begin, (unsigned long long)at);
        at = f->t[i].end;
    }
    if (at != f->data_size)
        return rm_errf(err, RM_EINVAL, "%s: the tensors cover %llu of the %llu bytes of the data buffer",
                       what, (unsigned long long)at, (unsigned long long)f->data_size);
    return RM_OK;
}

void rm_st_close(rm_st_file *f)
{
    if (!f)
        return;
    cJSON_Delete(f->json);
    free(f->t);
    if (f->map)
        munmap(f->map, f->size);
    memset(f, 0, sizeof *f);
}

int rm_st_parse(const void *buf, size_t size, const char *what, rm_st_file *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = parse_header(buf, size, what, out, err);
    if (rc)
        rm_st_close(out);
    return rc;
}

int rm_st_open(const char *path, rm_st_file *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    void *map;
    size_t size;
    RM_CHECK(rm_fs_map_file(path, &map, &size, err));
    int rc = parse_header(map, size, path, out, err);
    out->map = map;
    out->size = size;
    if (rc)
        rm_st_close(out);
    return rc;
}

const rm_st_tensor *rm_st_find(const rm_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *rm_st_meta(const rm_st_file *f, const char *key)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f->json, "__metadata__");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The header of the entries, laid out in order; data[i] = entry i's bytes, in that order. */
static cJSON *make_header(const rm_st_entry *e, int n, const char *const *meta, rm_fs_piece *data,
                          rm_err *err)
{
    cJSON *h = cJSON_CreateObject();
    if (!h) {
        rm_errf(err, RM_ENOMEM, "safetensors: out of memory");
        return NULL;
    }
    if (meta && *meta) {
        cJSON *m = cJSON_AddObjectToObject(h, "__metadata__");
        for (int i = 0; m && meta[i] && meta[i + 1]; i += 2)
            cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *bad = !e[i].name || !*e[i].name                        ? "an empty name"
                          : strcmp(e[i].name, "__metadata__") == 0         ? "the reserved name __metadata__"
                          : cJSON_GetObjectItemCaseSensitive(h, e[i].name) ? "a name used twice"
                          : e[i].ndim < 0 || e[i].ndim > RM_ST_MAX_DIMS    ? "too many dimensions"
                          : rm_st_dtype_size(e[i].dtype) == 0              ? "an unknown dtype"
                                                                           : NULL;
        uint64_t count = 1;
        for (int d = 0; !bad && d < e[i].ndim; d++) {
            if (e[i].shape[d] < 0)
                bad = "a negative extent";
            else
                count *= (uint64_t)e[i].shape[d];
        }
        if (bad) {
            cJSON_Delete(h);
            rm_errf(err, RM_EINVAL, "safetensors: entry %d (\"%s\"): %s", i, e[i].name ? e[i].name : "", bad);
            return NULL;
        }
        uint64_t bytes = count * rm_st_dtype_size(e[i].dtype);
        cJSON *t = cJSON_AddObjectToObject(h, e[i].name);
        cJSON *sh = t ? cJSON_AddArrayToObject(t, "shape") : NULL,
              *of = t ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        if (!t || !sh || !of || !cJSON_AddStringToObject(t, "dtype", rm_st_dtype_name(e[i].dtype))) {
            cJSON_Delete(h);
            rm_errf(err, RM_ENOMEM, "safetensors: out of memory");
            return NULL;
        }
        for (int d = 0; d < e[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e[i].shape[d]));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(at + bytes)));
        data[i] = (rm_fs_piece){e[i].data, (size_t)bytes};
        at += bytes;
    }
    return h;
}

int rm_st_write(const char *path, const rm_st_entry *e, int n, const char *const *meta, rm_err *err)
{
    if (n < 0 || n > RM_ST_MAX_TENSORS)
        return rm_errf(err, RM_EINVAL, "safetensors: %d tensors (0..%d)", n, RM_ST_MAX_TENSORS);
    rm_fs_piece *pc = calloc((size_t)n + 1, sizeof *pc); /* the header, then each entry's data */
    if (!pc)
        return rm_errf(err, RM_ENOMEM, "safetensors: out of memory");
    cJSON *h = make_header(e, n, meta, pc + 1, err);
    if (!h) {
        free(pc);
        return err ? err->code : RM_EINVAL;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t jl = js ? strlen(js) : 0, padded = (jl + 7) & ~(size_t)7;
    char *hdr = js ? malloc(8 + padded) : NULL;
    if (!hdr) {
        free(js);
        free(pc);
        return rm_errf(err, RM_ENOMEM, "safetensors: out of memory");
    }
    for (int i = 0; i < 8; i++)
        hdr[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(hdr + 8, js, jl);
    memset(hdr + 8 + jl, ' ', padded - jl);
    free(js);
    pc[0] = (rm_fs_piece){hdr, 8 + padded};
    int rc = rm_fs_write_atomic(path, pc, n + 1, err);
    free(hdr);
    free(pc);
    return rc;
}
