/* reader.h — the data-reader interface: what the trainer and the parameter servers know of a data
 * set (docs/models-and-data.md, "Data formats"). A format is one file that fills an
 * rm_data_reader table (idx.c now; token shards and text next); nothing outside worker/data/
 * names a format.
 *
 * A reader opens one split (train or test) of a source (a folder or file the spec names: data.uri
 * or the deprecated dataDir) and hands out rows — an image and its label (IDX), or a context
 * window of tokens and the same window shifted by one (token shards, text): `gather` the rank's rows of a step from the
 * epoch's permutation (the order is a function of (seed, epoch, rank) alone: rm_perm_make, data.h),
 * `slice` contiguous rows (evaluation). A row is x_row_bytes of model input and label_row int32
 * labels. `probe` tells the shape from the headers without loading the set (the validator, a
 * parameter server, --resume's preflight), so every process sizes the model the same way.
 *
 * Errors name the file and what is wrong; bad data is the job's DataError, never a restart loop.
 *
 * Ownership: rm_data owns its reader state (rm_data_close, NULL-safe, idempotent); the reader
 * tables are static. gather/slice write into caller buffers and allocate nothing. */
#ifndef RM_WORKER_DATA_READER_H
#define RM_WORKER_DATA_READER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"

typedef enum { RM_SPLIT_TRAIN = 0, RM_SPLIT_TEST } rm_data_split;

/* What a split's headers say. */
typedef struct rm_data_info {
    int64_t n;          /* rows */
    int inputs;         /* features per row (IDX: rows x cols pixels) */
    int classes;        /* label range (IDX: 1 + the largest label) */
    size_t x_row_bytes; /* bytes of model input per row (IDX: inputs fp32 in [0, 1]) */
    int label_row;      /* int32 labels per row */
} rm_data_info;

typedef struct rm_data_reader {
    const char *format; /* spec.training.data.format: "idx" */
    /* The training split's shape from its headers (nothing loaded). t: what the spec says of the
     * model and the data (a token stream's context and vocabulary, the validation fraction). */
    int (*probe)(const char *src, const rm_training_spec *t, rm_data_info *out, rm_err *err);
    /* Open one split; *state owned by the reader until close. */
    int (*open)(const char *src, const rm_training_spec *t, rm_data_split split, void **state,
                rm_data_info *info, rm_err *err);
    void (*close)(void *state);
    /* rows rows for rank of world from permutation position pos (pos + rows * world <= n). */
    void (*gather)(const void *state, const uint32_t *perm, int64_t pos, int rank, int world, int rows,
                   void *x, int32_t *labels);
    /* rows contiguous rows from start (start + rows <= n). */
    void (*slice)(const void *state, int64_t start, int rows, void *x, int32_t *labels);
    /* Optional: the training epoch about to be gathered (the token streams shift each window by
     * an amount drawn from (seed, epoch, window)); NULL = rows do not depend on it. */
    void (*set_epoch)(void *state, uint64_t seed, int epoch);
} rm_data_reader;

/* An open split. */
typedef struct rm_data {
    const rm_data_reader *r;
    void *state;
    rm_data_info info;
} rm_data;

/* The reader of a format (RM_DATA_IDX, ...), or NULL when none is built in yet. */
const rm_data_reader *rm_data_reader_of(rm_data_format f);
/* Where the spec's data lives and which reader reads it: data.uri (a folder, file://, builtin:,
 * or http(s):// fetched into the data cache: errors then name spec.training.data.uri or .sha256 —
 * "spec.training.data.uri: 404 from http://..."), else dataDir, else the built-in Fashion-MNIST folder; data.format when given, else
 * IDX (the only reader so far). src receives the local path. Field-named errors. */
int rm_data_source(const rm_training_spec *t, const rm_data_reader **r, char *src, size_t cap, rm_err *err);
int rm_data_probe(const rm_training_spec *t, rm_data_info *out, rm_err *err);
/* data.uri is fetched (http://, https:// or s3://: credentials from the AWS_* environment): rm_data_source fetches it into the data cache once
 * (common/fetch.h) and reads it from there. */
bool rm_data_uri_remote(const char *uri);
/* The data cache folder, into buf: $RINGMASTER_DATA_CACHE, else $XDG_CACHE_HOME/ringmaster/data,
 * else $HOME/.cache/ringmaster/data, else /tmp/ringmaster-data-cache. Every worker of a machine
 * computes the same one, so a job's local workers share what one of them fetched. */
void rm_data_cache_dir(char *buf, size_t cap);
int rm_data_open(const rm_training_spec *t, rm_data_split split, rm_data *out, rm_err *err);
void rm_data_close(rm_data *d);
/* Is err (from rm_data_probe / rm_data_open) about the data itself — a fetch refused or failed,
 * a checksum mismatch, a file its reader rejects — rather than the worker (out of memory)? The
 * worker then exits RM_WORKER_EXIT_DATA_ERROR (common/worker_env.h) and the job fails with reason
 * DataError instead of restarting. Their errors carry field spec.training.data[.uri|.sha256|...]. */
bool rm_data_error_is(const rm_err *err);

static inline void rm_data_gather_rows(const rm_data *d, const uint32_t *perm, int64_t pos, int rank,
                                       int world, int rows, void *x, int32_t *labels)
{
    d->r->gather(d->state, perm, pos, rank, world, rows, x, labels);
}
/* The epoch the next gathers belong to (called with the epoch's permutation). */
static inline void rm_data_set_epoch(rm_data *d, uint64_t seed, int epoch)
{
    if (d->r->set_epoch)
        d->r->set_epoch(d->state, seed, epoch);
}
static inline void rm_data_slice_rows(const rm_data *d, int64_t start, int rows, void *x, int32_t *labels)
{
    d->r->slice(d->state, start, rows, x, labels);
}

/* The readers built in: worker/data/idx.c; worker/data/stream.c (token shards, raw text). */
extern const rm_data_reader rm_data_idx, rm_data_tokens, rm_data_text;
#endif
