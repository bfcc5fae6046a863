/* export.c — model weights to and from safetensors + config.json (export.h,
 * docs/models-and-data.md "Exported models"). */
#include "worker/model/export.h"

#include "common/datasets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "common/fetch.h"
#include "common/fs.h"
#include "common/log.h"
#include "worker/data/reader.h"
#include "common/json.h"
#include "worker/gpu.h" /* the bf16/fp16 conversions */

/* ---------------- the model's tensors ---------------- */

/* Every named tensor of m over every unit (owned, free()); *n = how many. */
static int model_tensors(const rm_model *m, rm_model_tensor **out, int *n, rm_err *err)
{
    *out = NULL;
    *n = 0;
    if (!m->family || !m->family->tensors)
        return rm_errf(err, RM_EUNSUPPORTED, "the %s family names no tensors",
                       m->family ? m->family->name : "(none)");
    int total = 0;
    for (int u = 0; u < m->nunits; u++)
        total += rm_model_tensors(m, u, NULL, 0);
    if (total <= 0)
        return rm_errf(err, RM_EUNSUPPORTED, "the %s family names no tensors", m->family->name);
    rm_model_tensor *t = calloc((size_t)total, sizeof *t);
    if (!t)
        return rm_errf(err, RM_ENOMEM, "export: out of memory");
    int at = 0;
    for (int u = 0; u < m->nunits; u++)
        at += rm_model_tensors(m, u, t + at, total - at);
    *out = t;
    *n = total;
    return RM_OK;
}

static uint64_t numel(const rm_model_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static bool transposed(const rm_model_tensor *t)
{
    return t->layout && strcmp(t->layout, "in_out") == 0 && t->ndim == 2;
}

/* The shape a tensor has in the file: "in_out" [in x out] is written [out x in]. */
static void file_shape(const rm_model_tensor *t, int64_t *shape)
{
    for (int d = 0; d < t->ndim; d++)
        shape[d] = t->shape[d];
    if (transposed(t)) {
        shape[0] = t->shape[1];
        shape[1] = t->shape[0];
    }
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = 0;
    rm_sfmt(buf, cap, "[");
    at = strlen(buf);
    for (int d = 0; d < ndim && at < cap; d++) {
        rm_sfmt(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
        at += strlen(buf + at);
    }
    if (at < cap)
        rm_sfmt(buf + at, cap - at, "]");
}

/* ---------------- export ---------------- */

int rm_model_export(const rm_model *m, const float *host_params, const char *dir, rm_output_dtype dtype,
                    rm_err *err)
{
    if (!m->family || !m->family->config_json)
        return rm_errf(err, RM_EUNSUPPORTED, "export: the %s family writes no config.json",
                       m->family ? m->family->name : "(none)");
    if (dtype != RM_DTYPE_FLOAT32 && dtype != RM_DTYPE_BFLOAT16)
        return rm_errf(err, RM_EINVAL, "export: unknown dtype %d", (int)dtype);
    char cfg[8192];
    if (m->family->config_json(m, cfg, sizeof cfg) != RM_OK)
        return rm_errf(err, RM_EINVAL, "export: the %s config does not fit %zu bytes", m->family->name,
                       sizeof cfg);
    char wpath[4200], cpath[4200];
    int wn = snprintf(wpath, sizeof wpath, "%s/%s", dir, RM_EXPORT_WEIGHTS);
    int cn = snprintf(cpath, sizeof cpath, "%s/%s", dir, RM_EXPORT_CONFIG);
    if (wn < 0 || cn < 0 || (size_t)wn >= sizeof wpath || (size_t)cn >= sizeof cpath)
        return rm_errf(err, RM_EINVAL, "export: folder name too long (%zu bytes)", strlen(dir));
    rm_model_tensor *t;
    int n;
    RM_CHECK(model_tensors(m, &t, &n, err));
    /* converted copies (bfloat16, or a transposed float32) in one arena; a float32 tensor kept
     * as it is points into host_params */
    size_t dsize = dtype == RM_DTYPE_BFLOAT16 ? 2 : 4, arena_bytes = 0;
    for (int i = 0; i < n; i++)
        if (dtype == RM_DTYPE_BFLOAT16 || transposed(&t[i]))
            arena_bytes += (size_t)numel(&t[i]) * dsize;
    rm_st_entry *e = calloc((size_t)n, sizeof *e);
    int64_t(*shapes)[RM_MODEL_MAX_DIMS] = calloc((size_t)n, sizeof *shapes);
    unsigned char *arena = arena_bytes ? malloc(arena_bytes) : NULL;
    int rc = RM_OK;
    if (!e || !shapes || (arena_bytes && !arena)) {
        rc = rm_errf(err, RM_ENOMEM, "export: out of memory (%zu bytes)", arena_bytes);
        goto out;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const rm_model_tensor *ti = &t[i];
        const float *src = host_params + ti->off;
        uint64_t ne = numel(ti);
        file_shape(ti, shapes[i]);
        e[i] = (rm_st_entry){.name = ti->name,
                             .dtype = dtype == RM_DTYPE_BFLOAT16 ? RM_ST_BF16 : RM_ST_F32,
                             .ndim = ti->ndim,
                             .shape = shapes[i],
                             .data = src};
        if (dtype == RM_DTYPE_FLOAT32 && !transposed(ti))
            continue;
        unsigned char *dst = arena + at;
        at += (size_t)ne * dsize;
        e[i].data = dst;
        /* element k of the file's row-major order reads flat element idx(k) */
        size_t rows = transposed(ti) ? (size_t)ti->shape[1] : 1, cols = (size_t)ne / (rows ? rows : 1);
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                size_t k = r * cols + c;
                float v = transposed(ti) ? src[c * rows + r] : src[k];
                if (dtype == RM_DTYPE_BFLOAT16) {
                    uint16_t h = rm_f32_to_bf16(v);
                    memcpy(dst + k * 2, &h, 2);
                } else {
                    memcpy(dst + k * 4, &v, 4);
                }
            }
    }
    static const char *const meta[] = {"format", "pt", NULL};
    if ((rc = rm_fs_mkdir_p(dir, err)) != RM_OK)
        goto out;
    if ((rc = rm_st_write(wpath, e, n, meta, err)) != RM_OK)
        goto out;
    rm_fs_piece pc = {cfg, strlen(cfg)};
    rc = rm_fs_write_atomic(cpath, &pc, 1, err);
out:
    free(arena);
    free(shapes);
    free(e);
    free(t);
    return rc;
}

/* ---------------- import ---------------- */

int rm_model_weights_path(const char *path_or_dir, char *out, size_t cap, rm_err *err)
{
    struct stat st;
    int n;
    if (stat(path_or_dir, &st) == 0 && S_ISDIR(st.st_mode))
        n = snprintf(out, cap, "%s/%s", path_or_dir, RM_EXPORT_WEIGHTS);
    else
        n = snprintf(out, cap, "%s", path_or_dir);
    if (n < 0 || (size_t)n >= cap)
        return rm_errf(err, RM_EINVAL, "%s: path too long", path_or_dir);
    return RM_OK;
}

/* Names a model may meet in a file without holding them: Hugging Face's attention buffers (the
 * causal mask), and the tied head's copy of wte when it has wte's shape. */
static bool ignorable(const rm_st_file *f, const rm_st_tensor *x)
{
    size_t n = strlen(x->name);
    static const char *const bufs[] = {".attn.bias", ".attn.masked_bias"};
    for (size_t i = 0; i < RM_ARRAY_LEN(bufs); i++) {
        size_t b = strlen(bufs[i]);
        if (n > b && strcmp(x->name + n - b, bufs[i]) == 0 && strncmp(x->name, "transformer.h.", 14) == 0)
            return true;
    }
    if (strcmp(x->name, "lm_head.weight") == 0) {
        const rm_st_tensor *wte = rm_st_find(f, "transformer.wte.weight");
        return wte && wte->ndim == x->ndim &&
               memcmp(wte->shape, x->shape, (size_t)x->ndim * sizeof x->shape[0]) == 0;
    }
    return false;
}

static bool float_dtype(rm_st_dtype d)
{
    return d == RM_ST_F32 || d == RM_ST_BF16 || d == RM_ST_F16;
}

void rm_model_weights_close(rm_model_weights *w)
{
    if (!w)
        return;
    rm_st_close(&w->f);
    free(w->t);
    free(w->src);
    memset(w, 0, sizeof *w);
}

int rm_model_weights_open(const rm_model *m, const char *path_or_dir, rm_model_weights *w, rm_err *err)
{
    memset(w, 0, sizeof *w);
    RM_CHECK(rm_model_weights_path(path_or_dir, w->path, sizeof w->path, err));
    const char *path = w->path;
    rm_err e = {0};
    int rc = rm_st_open(path, &w->f, &e);
    if (rc) { /* the codec's message names the file and what is wrong with it */
        memset(w, 0, sizeof *w);
        return rm_errf(err, rc, "%s", e.msg);
    }
    rc = model_tensors(m, &w->t, &w->n, err);
    if (rc == RM_OK && !(w->src = calloc((size_t)w->n, sizeof *w->src)))
        rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    for (int i = 0; rc == RM_OK && i < w->n; i++) {
        const rm_model_tensor *ti = &w->t[i];
        const rm_st_tensor *x = rm_st_find(&w->f, ti->name);
        int64_t want[RM_MODEL_MAX_DIMS];
        char ws[96], hs[96];
        file_shape(ti, want);
        shape_str(ws, sizeof ws, ti->ndim, want);
        if (!x) {
            rc = rm_errf(
                err, RM_EINVAL,
                "%s: tensor \"%s\" %s is missing (the %s model expects %d tensors, the file holds %d)", path,
                ti->name, ws, m->family->name, w->n, w->f.n);
            break;
        }
        shape_str(hs, sizeof hs, x->ndim, x->shape);
        if (x->ndim != ti->ndim || memcmp(x->shape, want, (size_t)ti->ndim * sizeof want[0]) != 0) {
            rc = rm_errf(err, RM_EINVAL, "%s: tensor \"%s\" shape %s != expected %s", path, ti->name, hs, ws);
            break;
        }
        if (!float_dtype(x->dtype)) {
            rc = rm_errf(err, RM_EINVAL, "%s: tensor \"%s\" dtype %s (want F32, BF16 or F16)", path, ti->name,
                         rm_st_dtype_name(x->dtype));
            break;
        }
        w->src[i] = x;
    }
    if (rc == RM_OK) { /* what the file holds that the model does not read */
        char extra[320] = "";
        int nextra = 0;
        for (int j = 0; j < w->f.n; j++) {
            const rm_st_tensor *x = &w->f.t[j];
            bool known = false;
            for (int i = 0; i < w->n && !known; i++)
                known = w->src[i] == x;
            if (known || ignorable(&w->f, x))
                continue;
            size_t used = strlen(extra);
            if (nextra < 4 && used < sizeof extra)
                rm_sfmt(extra + used, sizeof extra - used, "%s\"%s\"", nextra ? ", " : "", x->name);
            nextra++;
        }
        if (nextra)
            rc = rm_errf(err, RM_EINVAL, "%s: %d tensor%s the %s model does not have: %s%s", path, nextra,
                         nextra == 1 ? "" : "s", m->family->name, extra, nextra > 4 ? ", ..." : "");
    }
    if (rc)
        rm_model_weights_close(w);
    return rc;
}

static float load_elem(const rm_st_tensor *x, const unsigned char *p, size_t k)
{
    if (x->dtype == RM_ST_F32) {
        float v;
        memcpy(&v, p + k * 4, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + k * 2, 2);
    return x->dtype == RM_ST_BF16 ? rm_bf16_to_f32(h) : rm_f16_to_f32(h);
}

void rm_model_weights_fill(const rm_model *m, const rm_model_weights *w, int u0, int u1, float *host)
{
    size_t lo = m->unit[u0].off, hi = m->unit[u1 - 1].off + m->unit[u1 - 1].len;
    for (int i = 0; i < w->n; i++) {
        const rm_model_tensor *ti = &w->t[i];
        if (ti->off < lo || ti->off >= hi)
            continue;
        const rm_st_tensor *x = w->src[i];
        const unsigned char *p = rm_st_data(&w->f, x);
        float *dst = host + (ti->off - lo);
        size_t ne = (size_t)numel(ti);
        if (transposed(ti)) { /* file [out x in] -> flat [in x out] */
            size_t in = (size_t)ti->shape[0], o = (size_t)ti->shape[1];
            for (size_t r = 0; r < o; r++)
                for (size_t c = 0; c < in; c++)
                    dst[c * o + r] = load_elem(x, p, r * in + c);
        } else if (x->dtype == RM_ST_F32) {
            memcpy(dst, p, ne * sizeof(float));
        } else {
            for (size_t k = 0; k < ne; k++)
                dst[k] = load_elem(x, p, k);
        }
    }
}

int rm_model_import(const rm_model *m, const char *path_or_dir, float *host_params, rm_err *err)
{
    rm_model_weights w;
    int rc =
        rm_model_weights_open(m, path_or_dir, &w, err); /* the user's file: reported once, by the caller */
    if (rc)
        return rc;
    rm_model_weights_fill(m, &w, 0, m->nunits, host_params);
    rm_model_weights_close(&w);
    return RM_OK;
}

/* ---------------- config.json ---------------- */

int rm_model_config_read(const char *path_or_dir, rm_model_shape *shape, const rm_model_family **fam,
                         rm_err *err)
{
    memset(shape, 0, sizeof *shape);
    *fam = NULL;
    char path[4200];
    struct stat st;
    int n;
    if (stat(path_or_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        n = snprintf(path, sizeof path, "%s/%s", path_or_dir, RM_EXPORT_CONFIG);
    } else {
        const char *slash = strrchr(path_or_dir, '/');
        n = slash ? snprintf(path, sizeof path, "%.*s/%s", (int)(slash - path_or_dir), path_or_dir,
                             RM_EXPORT_CONFIG)
                  : snprintf(path, sizeof path, "%s", RM_EXPORT_CONFIG);
    }
    if (n < 0 || (size_t)n >= sizeof path)
        return rm_errf(err, RM_EINVAL, "%s: path too long", path_or_dir);
    if (stat(path, &st) != 0)
        return rm_errf(err, errno == ENOENT ? RM_ENOTFOUND : RM_EIO, "%s: %s", path, strerror(errno));
    if (st.st_size > (off_t)RM_EXPORT_CONFIG_MAX)
        return rm_errf(err, RM_EINVAL, "%s: %lld bytes (a config.json is at most %u)", path,
                       (long long)st.st_size, RM_EXPORT_CONFIG_MAX);
    void *map;
    size_t size;
    RM_CHECK(rm_fs_map_file(path, &map, &size, err));
    char *text = malloc(size + 1);
    if (!text) {
        if (map)
            munmap(map, size);
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    }
    if (size)
        memcpy(text, map, size);
    text[size] = 0;
    if (map)
        munmap(map, size);
    int rc = RM_OK;
    rm_err e = {0};
    cJSON *j = rm_json_parse(text, size, &e);
    const char *type = NULL;
    if (!j) {
        rc = rm_errf(err, RM_EINVAL, "%s: %s", path, e.msg);
        goto out;
    }
    if (rm_json_str(j, "model_type", true, "", &type, &e) != RM_OK) {
        rc = rm_errf(err, RM_EINVAL, "%s: %s", path, e.msg);
        goto out;
    }
    static const struct {
        const char *model_type, *family;
    } types[] = {{"gpt2", "gpt"}, {"ringmaster-mlp", "mlp"}};
    for (size_t i = 0; i < RM_ARRAY_LEN(types) && !*fam; i++)
        if (strcmp(type, types[i].model_type) == 0)
            *fam = rm_model_family_find(types[i].family);
    if (!*fam || !(*fam)->shape_from_config) {
        rc = rm_errf(err, RM_EINVAL,
                     "%s: model_type: \"%s\" is not a model ringmaster runs (gpt2, ringmaster-mlp)", path,
                     type);
        *fam = NULL;
        goto out;
    }
    if ((rc = (*fam)->shape_from_config(text, shape, &e)) != RM_OK) {
        rc = rm_errf(err, rc, "%s: %s", path, e.msg);
        *fam = NULL;
    }
out:
    cJSON_Delete(j);
    free(text);
    return rc;
}

/* ---------------- model.init.uri ---------------- */

#define INIT_FIELD "spec.training.model.init.uri"

const char *rm_model_init_path(const char *uri)
{
    return rm_uri_local(uri);
}

/* A remote model.init.uri (http(s)://, s3://) into the data cache (common/fetch.h: once per
 * machine, resumed, retried; the AWS_* variables for s3://), then read like a local one: a URI
 * ending in '/' is an export folder (model.safetensors and config.json, whose shape is then
 * checked too), else the weights file itself. path gets the local file or folder. */
static int init_fetch(const char *uri, char *path, size_t cap, rm_err *err)
{
    static const char *const names[] = {RM_EXPORT_WEIGHTS, RM_EXPORT_CONFIG, NULL};
    char cache[4096];
    rm_data_cache_dir(cache, sizeof cache);
    rm_s3_creds s3;
    rm_fetch_s3_from_env(&s3);
    rm_fetch_opts o = {.field = INIT_FIELD, .s3 = &s3};
    rm_fetch_stats st = {0};
    bool folder = uri[strlen(uri) - 1] == '/';
    RM_CHECK(rm_fetch_cached(uri, folder ? names : NULL, cache, &o, path, cap, &st, err));
    rm_info("model init fetched uri=%s path=%s bytes=%llu cached=%d", uri, path, (unsigned long long)st.bytes,
            (int)st.cached);
    return RM_OK;
}

int rm_model_init_weights_open(const rm_model *m, const char *uri, rm_model_weights *w, rm_err *err)
{
    memset(w, 0, sizeof *w);
    const char *path = rm_model_init_path(uri);
    char fetched[4200];
    if (!path && uri && rm_uri_fetched(uri)) {
        RM_CHECK(init_fetch(uri, fetched, sizeof fetched, err));
        path = fetched;
    }
    if (!path)
        return rm_err_field(
            err, RM_EUNSUPPORTED, INIT_FIELD,
            "\"%s\" is not supported (a local path: /path or file:///path, http(s)://, s3://)",
            uri ? uri : "");
    rm_err e = {0};
    rm_model_shape s;
    const rm_model_family *fam;
    int rc = rm_model_config_read(path, &s, &fam, &e);
    if (rc == RM_OK && (fam != m->family || memcmp(&s, &m->shape, sizeof s) != 0)) {
        char have[128], want[128];
        fam->describe(&s, have, sizeof have);
        rm_model_shape_str(m, want, sizeof want);
        return rm_err_field(err, RM_EINVAL, INIT_FIELD, "%s describes a %s model %s; this job trains %s %s",
                            path, fam->name, have, m->family->name, want);
    }
    if (rc != RM_OK && rc != RM_ENOTFOUND) /* no config.json: the tensors alone are checked */
        return rm_err_field(err, rc, INIT_FIELD, "%s", e.msg);
    memset(&e, 0, sizeof e);
    if ((rc = rm_model_weights_open(m, path, w, &e)) != RM_OK)
        return rm_err_field(err, rc, INIT_FIELD, "%s", e.msg);
    return RM_OK;
}
