/* safetensors.h — the safetensors file format, read and written (docs/models-and-data.md,
 * "Exported models"): the format PyTorch and Hugging Face load model weights from.
 *
 * File: an 8-byte little-endian header length N, N bytes of a JSON object (padded with spaces to a
 * multiple of 8), then the data buffer. Every key but "__metadata__" (a string-to-string map) names
 * a tensor: {"dtype": "F32"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]}, offsets
 * relative to the data buffer, little-endian row-major bytes. The rules enforced on read are the
 * format's own: a header of at most RM_ST_MAX_HEADER bytes that starts with '{', known dtypes,
 * end - begin = dtype size x the shape's product (no overflow), no duplicate names, and the
 * tensors tiling the data buffer exactly — no gap, no overlap, nothing after the last one.
 *
 * Read: rm_st_open maps the file read-only (the tensors are never copied; a loader reads them in
 * place) and validates the header, naming the file, the tensor and the field at fault. The writer
 * lays the entries out in the order given, pads the header, and writes the file atomically (a
 * temp file, fsync, rename; a reader sees no file or a whole one).
 *
 * Ownership: rm_st_file owns its mapping, its tensor table and the parsed metadata (rm_st_close,
 * NULL-safe, idempotent); pointers into it are valid until then. rm_st_write borrows its entries. */
#ifndef RM_COMMON_SAFETENSORS_H
#define RM_COMMON_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_ST_MAX_HEADER (100u << 20) /* the format's own cap on the JSON header */
#define RM_ST_MAX_TENSORS 65536
#define RM_ST_MAX_DIMS 8
#define RM_ST_MAX_META 1024 /* __metadata__ entries */

typedef enum {
    RM_ST_BOOL = 0,
    RM_ST_U8,
    RM_ST_I8,
    RM_ST_I16,
    RM_ST_U16,
    RM_ST_F16,
    RM_ST_BF16,
    RM_ST_I32,
    RM_ST_U32,
    RM_ST_F32,
    RM_ST_F64,
    RM_ST_I64,
    RM_ST_U64
} rm_st_dtype;
/* "F32", ... (the format's spelling). */
const char *rm_st_dtype_name(rm_st_dtype d);
/* RM_OK and *out, or RM_EINVAL for a name the format does not have. */
int rm_st_dtype_parse(const char *s, rm_st_dtype *out);
size_t rm_st_dtype_size(rm_st_dtype d);

typedef struct rm_st_tensor {
    const char *name; /* into the parsed header */
    rm_st_dtype dtype;
    int ndim;
    int64_t shape[RM_ST_MAX_DIMS];
    uint64_t begin, end; /* bytes of the data buffer */
} rm_st_tensor;

typedef struct rm_st_file {
    void *map; /* the whole file, read-only (NULL for a parsed buffer) */
    size_t size;
    const unsigned char *data; /* the data buffer */
    uint64_t data_size;
    int n;
    rm_st_tensor *t; /* in file order (ascending begin) */
    void *json;      /* the parsed header (cJSON) */
} rm_st_file;

/* Map and validate path. RM_EIO (missing, unreadable), RM_EINVAL (the message names the file,
 * the tensor and what is wrong). *out is zeroed on failure. */
int rm_st_open(const char *path, rm_st_file *out, rm_err *err);
/* The same over a buffer the caller keeps alive (what = the name errors give it). */
int rm_st_parse(const void *buf, size_t size, const char *what, rm_st_file *out, rm_err *err);
void rm_st_close(rm_st_file *f);
/* The tensor named name, or NULL. */
const rm_st_tensor *rm_st_find(const rm_st_file *f, const char *name);
static inline const void *rm_st_data(const rm_st_file *f, const rm_st_tensor *t)
{
    return f->data + t->begin;
}
/* __metadata__[key], or NULL. */
const char *rm_st_meta(const rm_st_file *f, const char *key);

/* One tensor to write: shape[ndim] of dtype at data (host memory, little-endian row-major). */
typedef struct rm_st_entry {
    const char *name;
    rm_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} rm_st_entry;

/* Write the entries (in order) with __metadata__ from meta (key, value, key, value, ..., NULL; may
 * be NULL) to path, atomically. RM_EINVAL naming a bad entry (empty or duplicate name, too many
 * dims, a negative extent, "__metadata__" as a tensor name), RM_EIO naming the path. */
int rm_st_write(const char *path, const rm_st_entry *e, int n, const char *const *meta, rm_err *err);
#endif
