/* manifest.c — build, write, read and assemble checkpoint manifests (format and guarantees in
 * manifest.h; docs/models-and-data.md#checkpoint-manifest).
 * Design: a manifest is built once from what the writer knows (the model's tensors and which flat
 * ranges each file holds) into one in-memory form that the encoder prints and the parser fills,
 * so a round trip is the test of both. The parser trusts nothing: every count is capped before
 * anything is allocated from it and every piece is checked to tile its tensor, so the assembler
 * only has to verify the files themselves (rm_ckpt_read_ranges' checksums). */
#include "worker/checkpoint/manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "common/trainingjob.h"

void rm_ckpt_manifest_free(rm_ckpt_manifest *m)
{
    if (!m)
        return;
    free(m->files);
    free(m->tensors);
    free(m->pieces);
    m->files = NULL;
    m->tensors = NULL;
    m->pieces = NULL;
}

/* Elements of a shape; 0 when a dimension is < 1 or the product overflows `limit`. */
static uint64_t numel_of(int ndim, const int64_t *shape, uint64_t limit)
{
    uint64_t n = 1;
    if (ndim < 1 || ndim > RM_MODEL_MAX_DIMS)
        return 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || (uint64_t)shape[d] > limit / n)
            return 0;
        n *= (uint64_t)shape[d];
    }
    return n;
}

static int piece_by_start(const void *a, const void *b)
{
    const rm_ckpt_piece *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* ---------------- build ---------------- */

/* The pieces of elements [t0, t0 + numel) of buffer b in the files (count only when out is NULL). */
static size_t cut(const rm_ckpt_file_map *files, int nfiles, int b, uint64_t t0, uint64_t numel,
                  rm_ckpt_piece *out)
{
    size_t n = 0;
    for (int f = 0; f < nfiles; f++)
        for (int s = 0; s < files[f].nspans; s++) {
            const rm_ckpt_span *sp = &files[f].spans[s];
            uint64_t lo = sp->flat > t0 ? sp->flat : t0;
            uint64_t hi = sp->flat + sp->len < t0 + numel ? sp->flat + sp->len : t0 + numel;
            if (lo >= hi)
                continue;
            if (out)
                out[n] = (rm_ckpt_piece){
                    .file = f,
                    .start = lo - t0,
                    .end = hi - t0,
                    .offset = RM_CKPT_HDR_BYTES +
                              ((uint64_t)b * files[f].floats + sp->at + (lo - sp->flat)) * sizeof(float)};
            n++;
        }
    return n;
}

int rm_ckpt_manifest_build(const rm_ckpt_meta *meta, const char *kind, const rm_ckpt_model *model,
                           const rm_ckpt_file_map *files, int nfiles, rm_ckpt_manifest *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    const int K = meta->nstate, nt = model ? model->n : 0;
    if (K < 0 || K > RM_CKPT_MAX_STATE || nt < 1 || nt > RM_CKPT_MF_MAX_TENSORS / (1 + K) || nfiles < 1 ||
        nfiles > RM_CKPT_MF_MAX_FILES || !model->family)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: %d tensors, %d files, %d state buffers", nt,
                       nfiles, K);
    uint64_t next = 0;
    size_t per_buffer = 0;
    for (int i = 0; i < nt; i++) {
        const rm_model_tensor *t = &model->t[i];
        uint64_t ne = numel_of(t->ndim, t->shape, meta->nparams);
        if (ne == 0 || t->off != next || strlen(t->name) + 8 >= RM_CKPT_MF_NAME || strchr(t->name, '@'))
            return rm_errf(err, RM_EINVAL,
                           "checkpoint manifest: tensor %s does not follow the one "
                           "before it (offset %zu, expected %llu)",
                           t->name, t->off, (unsigned long long)next);
        next += ne;
        per_buffer += cut(files, nfiles, 0, t->off, ne, NULL);
    }
    if (next != meta->nparams)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: tensors cover %llu of %llu parameters",
                       (unsigned long long)next, (unsigned long long)meta->nparams);
    if (per_buffer > RM_CKPT_MF_MAX_PIECES / (size_t)(1 + K))
        return rm_errf(err, RM_ETOOBIG, "checkpoint manifest: %zu pieces per buffer", per_buffer);
    rm_ckpt_manifest m = {
        .version = RM_CKPT_MF_VERSION,
        .shape = meta->shape,
        .nparams = meta->nparams,
        .step = meta->step,
        .opt_type = meta->opt_type,
        .nstate = K,
        .opt_t = meta->opt_t,
        .train_epoch = meta->train_epoch,
        .data_pos = meta->data_pos,
        .seed = meta->seed,
        .world_size = meta->world_size,
        .batch_per_worker = meta->batch_per_worker,
        .nfiles = nfiles,
        .ntensors = nt * (1 + K),
    };
    rm_sfmt(m.kind, sizeof m.kind, "%s", kind);
    rm_sfmt(m.family, sizeof m.family, "%s", model->family);
    m.files = calloc((size_t)nfiles, sizeof *m.files);
    m.tensors = calloc((size_t)m.ntensors, sizeof *m.tensors);
    m.pieces = calloc(per_buffer * (size_t)(1 + K) + 1, sizeof *m.pieces);
    if (!m.files || !m.tensors || !m.pieces) {
        rm_ckpt_manifest_free(&m);
        return rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    }
    for (int f = 0; f < nfiles; f++) {
        if (!files[f].name || strlen(files[f].name) >= sizeof m.files[f].name) {
            rm_ckpt_manifest_free(&m);
            return rm_errf(err, RM_EINVAL, "checkpoint manifest: file %d has no usable name", f);
        }
        rm_sfmt(m.files[f].name, sizeof m.files[f].name, "%s", files[f].name);
        m.files[f].crc = files[f].crc;
    }
    for (int b = 0; b <= K; b++)
        for (int i = 0; i < nt; i++) {
            const rm_model_tensor *t = &model->t[i];
            rm_ckpt_mtensor *mt = &m.tensors[b * nt + i];
            if (b)
                rm_sfmt(mt->name, sizeof mt->name, "%s@state%d", t->name, b - 1);
            else
                rm_sfmt(mt->name, sizeof mt->name, "%s", t->name);
            mt->buffer = b;
            mt->offset = t->off;
            mt->ndim = t->ndim;
            memcpy(mt->shape, t->shape, sizeof mt->shape);
            mt->numel = numel_of(t->ndim, t->shape, meta->nparams);
            rm_sfmt(mt->layout, sizeof mt->layout, "%s", t->layout ? t->layout : "");
            mt->first = m.npieces;
            mt->npieces = cut(files, nfiles, b, t->off, mt->numel, m.pieces + m.npieces);
            m.npieces += mt->npieces;
            rm_ckpt_piece *p = m.pieces + mt->first;
            qsort(p, mt->npieces, sizeof *p, piece_by_start);
            uint64_t at = 0; /* the files hold every element exactly once */
            size_t k = 0;
            for (; k < mt->npieces && p[k].start == at; k++)
                at = p[k].end;
            if (at != mt->numel || k != mt->npieces) {
                rm_ckpt_manifest_free(&m);
                return rm_errf(err, RM_EINVAL,
                               "checkpoint manifest: the files do not hold tensor %s "
                               "exactly once",
                               t->name);
            }
        }
    *out = m;
    return RM_OK;
}

/* ---------------- encode and write ---------------- */

int rm_ckpt_manifest_encode(const rm_ckpt_manifest *m, char **out, size_t *n, rm_err *err)
{
    *out = NULL;
    char buf[32];
    bool ok = true;
#define OK(x) ok = ok && (x) != NULL
    cJSON *root = cJSON_CreateObject(), *o;
    OK(root);
    OK(cJSON_AddStringToObject(root, "format", RM_CKPT_MF_FORMAT));
    OK(cJSON_AddNumberToObject(root, "version", m->version));
    OK(cJSON_AddStringToObject(root, "kind", m->kind));
    OK(o = cJSON_AddObjectToObject(root, "model"));
    OK(cJSON_AddStringToObject(o, "family", m->family));
    cJSON *a = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
    OK(a);
    /* the words up to the family's count, and beyond it any the family uses (a transformer's
     * shape is five words whatever its layer count); "layers" keeps the count itself */
    int last = m->shape.nlayers;
    for (int i = last + 1; i < RM_MODEL_SHAPE_WORDS; i++)
        if (m->shape.dims[i])
            last = i;
    for (int i = 0; ok && i <= last && i < RM_MODEL_SHAPE_WORDS; i++)
        ok = cJSON_AddItemToArray(a, cJSON_CreateNumber(m->shape.dims[i]));
    OK(cJSON_AddNumberToObject(o, "layers", m->shape.nlayers));
    OK(cJSON_AddNumberToObject(o, "nparams", (double)m->nparams));
    OK(cJSON_AddNumberToObject(root, "step", (double)m->step));
    OK(o = cJSON_AddObjectToObject(root, "optimizer"));
    OK(cJSON_AddStringToObject(o, "type", rm_enum_name(rm_opt_names, m->opt_type)));
    OK(cJSON_AddNumberToObject(o, "state_buffers", m->nstate));
    OK(cJSON_AddNumberToObject(o, "t", (double)m->opt_t));
    OK(o = cJSON_AddObjectToObject(root, "data"));
    OK(cJSON_AddNumberToObject(o, "train_epoch", m->train_epoch));
    OK(cJSON_AddNumberToObject(o, "data_pos", (double)m->data_pos));
    snprintf(buf, sizeof buf, "%" PRIu64, m->seed); /* a u64 does not fit a JSON number */
    OK(cJSON_AddStringToObject(o, "seed", buf));
    OK(cJSON_AddNumberToObject(o, "world_size", m->world_size));
    OK(cJSON_AddNumberToObject(o, "batch_per_worker", m->batch_per_worker));
    OK(a = cJSON_AddArrayToObject(root, "files"));
    for (int f = 0; ok && f < m->nfiles; f++) {
        OK(o = cJSON_CreateObject());
        ok = ok && cJSON_AddItemToArray(a, o);
        snprintf(buf, sizeof buf, "%08" PRIx32, m->files[f].crc);
        OK(cJSON_AddStringToObject(o, "name", m->files[f].name));
        OK(cJSON_AddStringToObject(o, "crc32", buf));
    }
    OK(a = cJSON_AddArrayToObject(root, "tensors"));
    for (int i = 0; ok && i < m->ntensors; i++) {
        const rm_ckpt_mtensor *t = &m->tensors[i];
        OK(o = cJSON_CreateObject());
        ok = ok && cJSON_AddItemToArray(a, o);
        OK(cJSON_AddStringToObject(o, "name", t->name));
        OK(cJSON_AddNumberToObject(o, "buffer", t->buffer));
        OK(cJSON_AddNumberToObject(o, "offset", (double)t->offset));
        cJSON *sh = ok ? cJSON_AddArrayToObject(o, "shape") : NULL, *ps;
        OK(sh);
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        OK(cJSON_AddStringToObject(o, "layout", t->layout));
        OK(ps = cJSON_AddArrayToObject(o, "pieces"));
        for (size_t k = 0; ok && k < t->npieces; k++) {
            const rm_ckpt_piece *p = &m->pieces[t->first + k];
            cJSON *po = cJSON_CreateObject();
            OK(po);
            ok = ok && cJSON_AddItemToArray(ps, po);
            OK(cJSON_AddStringToObject(po, "file", m->files[p->file].name));
            OK(cJSON_AddNumberToObject(po, "offset", (double)p->offset));
            OK(cJSON_AddNumberToObject(po, "start", (double)p->start));
            OK(cJSON_AddNumberToObject(po, "end", (double)p->end));
        }
    }
#undef OK
    char *text = ok ? rm_json_print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    *out = text;
    *n = strlen(text);
    return RM_OK;
}

int rm_ckpt_manifest_write(const char *dir, const char *name, const rm_ckpt_manifest *m, rm_err *err)
{
    char *text = NULL;
    size_t n = 0;
    RM_CHECK(rm_ckpt_manifest_encode(m, &text, &n, err));
    int rc = rm_ckpt_put_file(dir, name, text, n, err);
    if (rc == RM_ECONFLICT) {
        /* the writers call this right after placing the file it describes under a name that was
         * free: a manifest already there described an earlier file of that name, now gone */
        char p[4096 + RM_CKPT_NAME_CAP];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        rm_warn("checkpoint manifest: replacing a stale one path=%s", p);
        unlink(p);
        memset(err, 0, sizeof *err);
        rc = rm_ckpt_put_file(dir, name, text, n, err);
    }
    free(text);
    return rc;
}

int rm_ckpt_manifest_write_whole(const char *file_path, const rm_ckpt_meta *meta, const rm_ckpt_model *model,
                                 rm_err *err)
{
    const char *slash = strrchr(file_path, '/');
    char dir[4096], jname[RM_CKPT_NAME_CAP];
    const char *name = slash ? slash + 1 : file_path;
    rm_sfmt(dir, sizeof dir, "%.*s", slash ? (int)(slash - file_path) : 1, slash ? file_path : ".");
    if (rm_ckpt_json_name(name, jname, sizeof jname) != 0)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: no name for %s", file_path);
    rm_ckpt_meta hm;
    uint32_t crc = 0;
    RM_CHECK(rm_ckpt_read_header(file_path, &hm, &crc, err));
    rm_ckpt_span all = {.flat = 0, .len = meta->nparams, .at = 0};
    rm_ckpt_file_map f = {.name = name, .crc = crc, .floats = meta->nparams, .nspans = 1, .spans = &all};
    rm_ckpt_manifest m;
    RM_CHECK(rm_ckpt_manifest_build(meta, "whole", model, &f, 1, &m, err));
    int rc = rm_ckpt_manifest_write(dir, jname, &m, err);
    rm_ckpt_manifest_free(&m);
    return rc;
}

/* ---------------- parse ---------------- */

/* err's message (a rm_json getter's "<field>: ...") prefixed with the file; returns err's code. */
static int at_path(rm_err *err, const char *path)
{
    char msg[sizeof err->msg];
    rm_sfmt(msg, sizeof msg, "%s", err->msg);
    rm_sfmt(err->msg, sizeof err->msg, "%s: %s", path, msg);
    return err->code ? err->code : RM_EINVAL;
}

/* "<path>: <ctx>.<key>: <msg>" with field <ctx>.<key>. */
static int field_fail(rm_err *err, int code, const char *path, const char *ctx, const char *key,
                      const char *fmt, ...) RM_PRINTF(6, 7);
static int field_fail(rm_err *err, int code, const char *path, const char *ctx, const char *key,
                      const char *fmt, ...)
{
    char f[128], msg[256];
    rm_sfmt(f, sizeof f, "%s%s%s", ctx, *ctx && *key ? "." : "", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rm_errf(err, code, "%s: %s: %s", path, f, msg);
    if (err)
        rm_sfmt(err->field, sizeof err->field, "%s", f);
    return code;
}

/* An integer field in [lo, hi]. */
static int get_int(const cJSON *o, const char *key, const char *ctx, const char *path, int64_t lo, int64_t hi,
                   int64_t *out, rm_err *err)
{
    int rc = rm_json_int(o, key, true, ctx, out, err);
    if (rc)
        return at_path(err, path);
    if (*out < lo || *out > hi)
        return field_fail(err, RM_EINVAL, path, ctx, key, "%lld outside [%lld, %lld]", (long long)*out,
                          (long long)lo, (long long)hi);
    return RM_OK;
}

/* A string field of fewer than cap bytes, copied. */
static int get_str(const cJSON *o, const char *key, const char *ctx, const char *path, char *out, size_t cap,
                   rm_err *err)
{
    const char *s = NULL;
    if (rm_json_str(o, key, true, ctx, &s, err))
        return at_path(err, path);
    if (strlen(s) >= cap)
        return field_fail(err, RM_EINVAL, path, ctx, key, "longer than %zu bytes", cap - 1);
    memcpy(out, s, strlen(s) + 1);
    return RM_OK;
}

/* An array field of 1..max items. */
static int get_arr(const cJSON *o, const char *key, const char *ctx, const char *path, int max,
                   const cJSON **out, int *n, rm_err *err)
{
    if (rm_json_arr(o, key, true, ctx, out, err))
        return at_path(err, path);
    *n = cJSON_GetArraySize(*out);
    if (*n < 1 || *n > max)
        return field_fail(err, *n > max ? RM_ETOOBIG : RM_EINVAL, path, ctx, key, "%d entries (1 to %d)", *n,
                          max);
    return RM_OK;
}

static int get_obj(const cJSON *o, const char *key, const char *path, const cJSON **out, rm_err *err)
{
    return rm_json_obj(o, key, true, "", out, err) ? at_path(err, path) : RM_OK;
}

/* Files sorted by name, for the pieces' lookups. */
typedef struct named {
    const char *name;
    int idx;
} named;
static int named_cmp(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}
static int file_find(const named *v, int n, const char *name)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(v[mid].name, name);
        if (c == 0)
            return v[mid].idx;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int parse_head(const char *path, const cJSON *root, rm_ckpt_manifest *m, rm_err *err)
{
    int64_t v;
    const char *s = NULL;
    const cJSON *o, *a;
    int n, rc;
    if (rm_json_str(root, "format", true, "", &s, err))
        return at_path(err, path);
    if (strcmp(s, RM_CKPT_MF_FORMAT) != 0)
        return field_fail(err, RM_EINVAL, path, "", "format", "\"%.40s\" is not \"%s\"", s,
                          RM_CKPT_MF_FORMAT);
    if (rm_json_int(root, "version", true, "", &v, err))
        return at_path(err, path);
    if (v > RM_CKPT_MF_VERSION)
        return field_fail(err, RM_EUNSUPPORTED, path, "", "version",
                          "%lld is newer than this "
                          "reader's %d (written by a newer ringmaster)",
                          (long long)v, RM_CKPT_MF_VERSION);
    if (v < 1)
        return field_fail(err, RM_EINVAL, path, "", "version", "%lld is not a version", (long long)v);
    m->version = (int)v;
    if ((rc = get_str(root, "kind", "", path, m->kind, sizeof m->kind, err)))
        return rc;
    if (strcmp(m->kind, "whole") && strcmp(m->kind, "sharded") && strcmp(m->kind, "stages") &&
        strcmp(m->kind, "pieces"))
        return field_fail(err, RM_EINVAL, path, "", "kind", "must be whole, sharded, stages or pieces");
    if ((rc = get_obj(root, "model", path, &o, err)) ||
        (rc = get_str(o, "family", "model", path, m->family, sizeof m->family, err)) ||
        (rc = get_arr(o, "shape", "model", path, RM_MODEL_SHAPE_WORDS, &a, &n, err)))
        return rc;
    if (n < 2)
        return field_fail(err, RM_EINVAL, path, "model", "shape", "needs a count and its words");
    m->shape.nlayers = n - 1;
    for (int i = 0; i < n; i++) {
        const cJSON *w = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(w) || !(w->valuedouble >= INT_MIN && w->valuedouble <= INT_MAX) ||
            w->valuedouble != (double)(int)w->valuedouble)
            return field_fail(err, RM_EINVAL, path, "model", "shape", "word %d is not an integer", i);
        m->shape.dims[i] = (int)w->valuedouble;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "layers")) { /* absent in manifests before it: n - 1 */
        if ((rc = get_int(o, "layers", "model", path, 0, RM_MODEL_SHAPE_WORDS - 1, &v, err)))
            return rc;
        m->shape.nlayers = (int)v;
    }
    if ((rc = get_int(o, "nparams", "model", path, 1, INT64_C(1) << 50, &v, err)))
        return rc;
    m->nparams = (uint64_t)v;
    if ((rc = get_int(root, "step", "", path, 0, INT64_MAX, &m->step, err)) ||
        (rc = get_obj(root, "optimizer", path, &o, err)))
        return rc;
    if (rm_json_str(o, "type", true, "optimizer", &s, err))
        return at_path(err, path);
    if ((m->opt_type = rm_enum_index(rm_opt_names, s)) < 0)
        return field_fail(err, RM_EINVAL, path, "optimizer", "type", "unknown optimizer \"%.40s\"", s);
    if ((rc = get_int(o, "state_buffers", "optimizer", path, 0, RM_CKPT_MAX_STATE, &v, err)))
        return rc;
    m->nstate = (int32_t)v;
    if ((rc = get_int(o, "t", "optimizer", path, 0, INT64_MAX, &m->opt_t, err)) ||
        (rc = get_obj(root, "data", path, &o, err)) ||
        (rc = get_int(o, "data_pos", "data", path, 0, INT64_MAX, &m->data_pos, err)))
        return rc;
    int64_t ep, ws, bpw;
    if ((rc = get_int(o, "train_epoch", "data", path, 0, INT32_MAX, &ep, err)) ||
        (rc = get_int(o, "world_size", "data", path, 1, INT32_MAX, &ws, err)) ||
        (rc = get_int(o, "batch_per_worker", "data", path, 0, INT32_MAX, &bpw, err)))
        return rc;
    m->train_epoch = (int32_t)ep;
    m->world_size = (int32_t)ws;
    m->batch_per_worker = (int32_t)bpw;
    if (rm_json_str(o, "seed", true, "data", &s, err))
        return at_path(err, path);
    char *end = NULL;
    errno = 0;
    unsigned long long seed = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || errno)
        return field_fail(err, RM_EINVAL, path, "data", "seed", "must be a decimal 64-bit number");
    m->seed = seed;
    return RM_OK;
}

static int parse_files(const char *path, const cJSON *root, rm_ckpt_manifest *m, rm_err *err)
{
    const cJSON *a;
    int rc = get_arr(root, "files", "", path, RM_CKPT_MF_MAX_FILES, &a, &m->nfiles, err);
    if (rc)
        return rc;
    if (!(m->files = calloc((size_t)m->nfiles, sizeof *m->files)))
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    for (int f = 0; f < m->nfiles; f++) {
        char ctx[48], crc[16];
        snprintf(ctx, sizeof ctx, "files[%d]", f);
        const cJSON *o = cJSON_GetArrayItem(a, f);
        if ((rc = get_str(o, "name", ctx, path, m->files[f].name, sizeof m->files[f].name, err)) ||
            (rc = get_str(o, "crc32", ctx, path, crc, sizeof crc, err)))
            return rc;
        const char *nm = m->files[f].name;
        if (!*nm || strchr(nm, '/') || nm[0] == '.') /* a name in the folder, nothing else */
            return field_fail(err, RM_EINVAL, path, ctx, "name", "not a file name in the folder");
        unsigned x = 0;
        int used = 0;
        if (strlen(crc) != 8 || sscanf(crc, "%8x%n", &x, &used) != 1 || used != 8)
            return field_fail(err, RM_EINVAL, path, ctx, "crc32", "must be 8 hex digits");
        m->files[f].crc = x;
    }
    return RM_OK;
}

/* One tensor's fields (not its pieces); *pa its pieces array and *np their count. */
static int parse_tensor(const char *path, const char *ctx, const cJSON *o, const rm_ckpt_manifest *m,
                        rm_ckpt_mtensor *t, const cJSON **pa, int *np, rm_err *err)
{
    int64_t v;
    const cJSON *sh;
    int rc;
    if ((rc = get_str(o, "name", ctx, path, t->name, sizeof t->name, err)) ||
        (rc = get_int(o, "buffer", ctx, path, 0, m->nstate, &v, err)))
        return rc;
    t->buffer = (int)v;
    const char *at = strchr(t->name, '@');
    int k = -1, used = 0;
    if (t->buffer ? !at || sscanf(at, "@state%d%n", &k, &used) != 1 || k != t->buffer - 1 || at[used]
                  : at != NULL)
        return field_fail(err, RM_EINVAL, path, ctx, "name",
                          "\"%s\" is not buffer %d's name "
                          "(parameters: no '@'; state k: <name>@state<k>)",
                          t->name, t->buffer);
    if ((rc = get_int(o, "offset", ctx, path, 0, (int64_t)m->nparams - 1, &v, err)) ||
        (rc = get_arr(o, "shape", ctx, path, RM_MODEL_MAX_DIMS, &sh, &t->ndim, err)))
        return rc;
    t->offset = (uint64_t)v;
    for (int d = 0; d < t->ndim; d++) {
        const cJSON *x = cJSON_GetArrayItem(sh, d);
        t->shape[d] = cJSON_IsNumber(x) && x->valuedouble >= 1 && x->valuedouble <= (double)m->nparams &&
                              x->valuedouble == (double)(int64_t)x->valuedouble
                          ? (int64_t)x->valuedouble
                          : 0;
    }
    t->numel = numel_of(t->ndim, t->shape, m->nparams - t->offset);
    if (t->numel == 0)
        return field_fail(err, RM_EINVAL, path, ctx, "shape",
                          "dimensions must be >= 1 and fit the "
                          "%llu parameters from offset %llu",
                          (unsigned long long)m->nparams, (unsigned long long)t->offset);
    const char *lay = "";
    if (rm_json_str(o, "layout", false, ctx, &lay, err) == RM_EINVAL)
        return at_path(err, path);
    if (strlen(lay) >= sizeof t->layout)
        return field_fail(err, RM_EINVAL, path, ctx, "layout", "longer than %zu bytes", sizeof t->layout - 1);
    rm_sfmt(t->layout, sizeof t->layout, "%s", lay);
    return get_arr(o, "pieces", ctx, path, RM_CKPT_MF_MAX_FILES * 64, pa, np, err);
}

static int parse_tensors(const char *path, const cJSON *root, rm_ckpt_manifest *m, rm_err *err)
{
    const cJSON *a;
    int rc = get_arr(root, "tensors", "", path, RM_CKPT_MF_MAX_TENSORS, &a, &m->ntensors, err);
    if (rc)
        return rc;
    size_t total = 0; /* the pieces, capped before anything is allocated for them */
    for (const cJSON *o = a->child; o; o = o->next) {
        const cJSON *pa = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "pieces") : NULL;
        total += cJSON_IsArray(pa) ? (size_t)cJSON_GetArraySize(pa) : 0;
        if (total > RM_CKPT_MF_MAX_PIECES)
            return field_fail(err, RM_ETOOBIG, path, "", "tensors", "more than %u pieces",
                              RM_CKPT_MF_MAX_PIECES);
    }
    named *ord = malloc((size_t)m->nfiles * sizeof *ord);
    m->tensors = calloc((size_t)m->ntensors, sizeof *m->tensors);
    m->pieces = calloc(total + 1, sizeof *m->pieces);
    if (!ord || !m->tensors || !m->pieces) {
        free(ord);
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    }
    for (int f = 0; f < m->nfiles; f++)
        ord[f] = (named){m->files[f].name, f};
    qsort(ord, (size_t)m->nfiles, sizeof *ord, named_cmp);
    for (int f = 1; f < m->nfiles; f++)
        if (strcmp(ord[f].name, ord[f - 1].name) == 0) {
            rc = field_fail(err, RM_EINVAL, path, "", "files", "%s is listed twice", ord[f].name);
            free(ord);
            return rc;
        }
    uint64_t next[1 + RM_CKPT_MAX_STATE] = {0}; /* each buffer's tensors tile it in order */
    int i = 0;
    rc = RM_OK;
    for (const cJSON *o = a->child; o && rc == RM_OK; o = o->next, i++) {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "tensors[%d]", i);
        rm_ckpt_mtensor *t = &m->tensors[i];
        const cJSON *pa;
        int np;
        if ((rc = parse_tensor(path, ctx, o, m, t, &pa, &np, err)))
            break;
        if (t->offset != next[t->buffer]) {
            rc = field_fail(err, RM_EINVAL, path, ctx, "offset",
                            "%llu, but buffer %d's tensors so far "
                            "end at %llu",
                            (unsigned long long)t->offset, t->buffer, (unsigned long long)next[t->buffer]);
            break;
        }
        next[t->buffer] += t->numel;
        t->first = m->npieces;
        t->npieces = (size_t)np;
        uint64_t at = 0;
        int k = 0;
        for (const cJSON *po = pa->child; po && rc == RM_OK; po = po->next, k++) {
            char pctx[80];
            snprintf(pctx, sizeof pctx, "%s.pieces[%d]", ctx, k);
            rm_ckpt_piece *p = &m->pieces[m->npieces++];
            const char *fn = NULL;
            int64_t off, s, e;
            if (rm_json_str(po, "file", true, pctx, &fn, err)) {
                rc = at_path(err, path);
            } else if ((p->file = file_find(ord, m->nfiles, fn)) < 0) {
                rc = field_fail(err, RM_EINVAL, path, pctx, "file", "\"%.60s\" is not in files", fn);
            } else if (!(rc = get_int(po, "offset", pctx, path, RM_CKPT_HDR_BYTES, INT64_C(1) << 60, &off,
                                      err)) &&
                       !(rc = get_int(po, "start", pctx, path, 0, (int64_t)t->numel - 1, &s, err)) &&
                       !(rc = get_int(po, "end", pctx, path, 1, (int64_t)t->numel, &e, err))) {
                if ((uint64_t)s != at || e <= s)
                    rc = field_fail(err, RM_EINVAL, path, pctx, "start",
                                    "pieces must tile the "
                                    "tensor in order: [%lld, %lld) after %llu",
                                    (long long)s, (long long)e, (unsigned long long)at);
                p->offset = (uint64_t)off;
                p->start = (uint64_t)s;
                p->end = (uint64_t)e;
                at = p->end;
            }
        }
        if (rc == RM_OK && at != t->numel)
            rc = field_fail(err, RM_EINVAL, path, ctx, "pieces", "cover %llu of %llu elements",
                            (unsigned long long)at, (unsigned long long)t->numel);
    }
    free(ord);
    for (int b = 0; rc == RM_OK && b <= m->nstate; b++)
        if (next[b] != m->nparams)
            rc = field_fail(err, RM_EINVAL, path, "", "tensors",
                            "buffer %d's tensors cover %llu of "
                            "%llu parameters",
                            b, (unsigned long long)next[b], (unsigned long long)m->nparams);
    return rc;
}

int rm_ckpt_manifest_parse(const char *path, const char *text, size_t n, rm_ckpt_manifest *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    if (n > RM_CKPT_MF_MAX_BYTES)
        return rm_errf(err, RM_ETOOBIG, "%s: manifest larger than %u bytes", path, RM_CKPT_MF_MAX_BYTES);
    rm_err pe = {0};
    cJSON *root = rm_json_parse(text, n, &pe);
    if (!root)
        return rm_errf(err, RM_EINVAL, "%s: %s (torn or not a manifest)", path, pe.msg);
    rm_ckpt_manifest m = {0};
    int rc = cJSON_IsObject(root) ? RM_OK : rm_errf(err, RM_EINVAL, "%s: not a JSON object", path);
    if (rc == RM_OK)
        rc = parse_head(path, root, &m, err);
    if (rc == RM_OK)
        rc = parse_files(path, root, &m, err);
    if (rc == RM_OK)
        rc = parse_tensors(path, root, &m, err);
    cJSON_Delete(root);
    if (rc) {
        rm_ckpt_manifest_free(&m);
        return rc;
    }
    *out = m;
    return RM_OK;
}

int rm_ckpt_manifest_read(const char *path, rm_ckpt_manifest *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return rm_errf(err, errno == ENOENT ? RM_ENOTFOUND : RM_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = NULL;
    int rc = RM_OK;
    for (;;) { /* grow up to the cap + 1 byte, which says the file is larger */
        char *nb = realloc(b, cap + 1);
        if (!nb) {
            rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
            break;
        }
        b = nb;
        n += fread(b + n, 1, cap + 1 - n, f);
        if (n <= cap || cap > RM_CKPT_MF_MAX_BYTES)
            break;
        cap = cap * 4 > RM_CKPT_MF_MAX_BYTES ? RM_CKPT_MF_MAX_BYTES + (size_t)1 : cap * 4;
    }
    bool bad = ferror(f);
    fclose(f);
    if (rc == RM_OK && bad)
        rc = rm_errf(err, RM_EIO, "%s: read error", path);
    if (rc == RM_OK)
        rc = rm_ckpt_manifest_parse(path, b, n, out, err);
    free(b);
    return rc;
}

/* ---------------- assemble ---------------- */

typedef struct frange {
    int file;
    rm_ckpt_range r;
} frange;
static int frange_cmp(const void *a, const void *b)
{
    const frange *x = a, *y = b;
    return x->file < y->file ? -1 : x->file > y->file;
}

int rm_ckpt_manifest_assemble(const char *dir, const rm_ckpt_manifest *m, const rm_ckpt_meta *expect,
                              uint64_t from, uint64_t to, float *dst, size_t cap, rm_err *err)
{
    if (from >= to || to > m->nparams)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: range [%llu, %llu) of %llu parameters",
                       (unsigned long long)from, (unsigned long long)to, (unsigned long long)m->nparams);
    const uint64_t len = to - from;
    if ((uint64_t)(1 + m->nstate) * len * sizeof(float) > cap)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: destination too small");
    size_t nr = 0;
    frange *rs = NULL;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        nr = 0;
        for (int i = 0; i < m->ntensors; i++) {
            const rm_ckpt_mtensor *t = &m->tensors[i];
            if (t->offset >= to || t->offset + t->numel <= from)
                continue;
            for (size_t k = 0; k < t->npieces; k++) {
                const rm_ckpt_piece *p = &m->pieces[t->first + k];
                uint64_t a = t->offset + p->start, b = t->offset + p->end;
                uint64_t lo = a > from ? a : from, hi = b < to ? b : to;
                if (lo >= hi)
                    continue;
                if (rs)
                    rs[nr] =
                        (frange){p->file,
                                 {.src = p->offset - RM_CKPT_HDR_BYTES + (lo - a) * sizeof(float),
                                  .len = (hi - lo) * sizeof(float),
                                  .dst = (size_t)((uint64_t)t->buffer * len + lo - from) * sizeof(float)}};
                nr++;
            }
        }
        if (!rs && !(rs = malloc((nr + 1) * sizeof *rs)))
            return rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    }
    qsort(rs, nr, sizeof *rs, frange_cmp);
    rm_ckpt_range *one = malloc((nr + 1) * sizeof *one);
    int rc = one ? RM_OK : rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    for (size_t i = 0; i < nr && rc == RM_OK;) { /* each file once, verified in full */
        size_t j = i;
        while (j < nr && rs[j].file == rs[i].file) {
            one[j - i] = rs[j].r;
            j++;
        }
        const rm_ckpt_mfile *f = &m->files[rs[i].file];
        char p[4096 + RM_CKPT_NAME_CAP];
        snprintf(p, sizeof p, "%s/%s", dir, f->name);
        rm_ckpt_meta hm;
        uint32_t crc = 0;
        rm_err e = {0};
        rc = rm_ckpt_read_ranges(p, expect, one, (int)(j - i), dst, cap, &hm, &crc, &e);
        if (rc == RM_OK &&
            (crc != f->crc || hm.step != m->step || hm.nparams != m->nparams || hm.nstate != m->nstate))
            rc = rm_errf(&e, RM_EINVAL,
                         "%s: does not match the manifest (checksum %08x, listed "
                         "%08x; step %lld, listed %lld)",
                         p, crc, f->crc, (long long)hm.step, (long long)m->step);
        if (rc)
            rc = rm_errf(err, rc, "checkpoint manifest: %s", e.msg);
        i = j;
    }
    free(one);
    free(rs);
    return rc;
}
