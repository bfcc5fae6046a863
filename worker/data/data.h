/* data.h — Fashion-MNIST from IDX files, the per-epoch permutation, and the rank's shard of a batch.
 *
 * Files: Debian's dataset-fashion-mnist ships gzipped IDX (train-images-idx3-ubyte.gz, ...); the
 * loader reads through zlib's gzread, which also reads an uncompressed file as-is, and looks for
 * "<name>" then "<name>.gz" in the data folder. Checked: magic (0x00000803 images, 0x00000801
 * labels), dimensions (rows*cols <= 4096, 1 <= n <= 10M), exact payload size (truncated or
 * trailing bytes are errors), labels < classes, and that images and labels agree on n.
 * Images stay uint8 in memory (47 MB for the training set) and are scaled to [0,1] floats when a
 * batch is gathered, so a worker holds one copy of the data per process.
 *
 * Sharding: every epoch has a permutation of [0, n) seeded by (seed, epoch), identical on every
 * rank. A step consumes `global = batch * world` consecutive permutation positions starting at
 * the cursor `pos`; rank r takes positions pos + r, pos + r + world, ... (batch of them). The
 * cursor is kept in samples, not steps, so a restart with a different world size resumes the epoch
 * where it stopped. An epoch ends when fewer than `global` positions remain (the tail is dropped).
 *
 * Ownership: rm_dataset owns images/labels (rm_dataset_free, NULL-safe). Gather writes into
 * caller-provided buffers and allocates nothing. */
#ifndef RM_WORKER_DATA_H
#define RM_WORKER_DATA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define RM_DATA_MAX_N 10000000
#define RM_DATA_MAX_PIXELS 4096
#define RM_DATA_MAX_CLASSES 256 /* u8 labels */

typedef struct rm_dataset {
    int n, rows, cols; /* samples, image rows, image cols */
    int classes;       /* label range: 1 + the largest label */
    uint8_t *images;   /* n * rows * cols */
    uint8_t *labels;   /* n */
} rm_dataset;

/* Load IDX image/label files (gzipped or raw). On error returns RM_EIO (missing/unreadable) or
 * RM_EINVAL (bad magic, dims, size, label) with err naming the file and what is wrong; *out zeroed. */
int rm_idx_load_images(const char *path, uint8_t **out, int *n, int *rows, int *cols, rm_err *err);
int rm_idx_load_labels(const char *path, int classes, uint8_t **out, int *n, rm_err *err);
/* The training set's shape from dir without loading its images: pixels per image (rows x cols)
 * and classes (1 + the largest label). */
int rm_dataset_probe(const char *dir, int *inputs, int *classes, rm_err *err);
/* Load "train" or "t10k" from dir (train = true -> train-*). classes = 1 + the largest label. */
int rm_dataset_load(const char *dir, bool train, rm_dataset *out, rm_err *err);
void rm_dataset_free(rm_dataset *d);

/* Deterministic generator (xoshiro256**, seeded through splitmix64). Same on every platform. */
typedef struct rm_rng {
    uint64_t s[4];
} rm_rng;
void rm_rng_seed(rm_rng *r, uint64_t seed);
uint64_t rm_rng_next(rm_rng *r);
double rm_rng_uniform(rm_rng *r);             /* [0, 1) */
double rm_rng_normal(rm_rng *r);              /* N(0, 1), Box-Muller */
uint64_t rm_rng_below(rm_rng *r, uint64_t n); /* [0, n), unbiased */

/* Fisher-Yates permutation of [0, n) for (seed, epoch). */
void rm_perm_make(uint32_t *perm, int n, uint64_t seed, int epoch);

/* Steps in an epoch of n samples for a global batch. */
static inline int64_t rm_data_steps_per_epoch(int n, int global_batch)
{
    return global_batch > 0 ? n / global_batch : 0;
}

/* Rank's part of the step starting at permutation position pos: rows = per-worker batch. Writes
 * x [rows x pixels] scaled to [0,1] and labels [rows] as int32. Requires pos + rows*world <= n. */
void rm_data_gather(const rm_dataset *d, const uint32_t *perm, int64_t pos, int rank, int world, int rows,
                    float *x, int32_t *labels);
/* Contiguous slice [start, start+rows) without permutation (evaluation). */
void rm_data_slice(const rm_dataset *d, int start, int rows, float *x, int32_t *labels);
#endif
