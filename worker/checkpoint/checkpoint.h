/* checkpoint.h — atomic, checksummed training checkpoints (rank 0 writes, every rank reads).
 *
 * File: DIR/ckpt-<step, 12 digits>[-<n>].rmck =
 *   header (fixed size, little-endian host order; magic "RMCKPT01", version, sizes, all scalars
 *   of the training state, CRC32 of the payload, CRC32 of the header itself) followed by the
 *   payload: params (nparams floats) then each optimizer state buffer (nparams floats each).
 * Write: temp file in DIR (".tmp-ckpt-..."), write, fflush, fsync, move to the final name, fsync
 * DIR. A reader therefore sees either no file or a whole one. An existing file is never
 * overwritten (a "-<n>" suffix is added instead), also one that appears while the file is written:
 * the move is renameat2(RENAME_NOREPLACE), or link + unlink where that is unsupported, and on
 * EEXIST it takes the next suffix. After a successful write the oldest checkpoints of the same
 * model (shape, optimizer) beyond `keep` are removed, each after its JSON manifest
 * (worker/checkpoint/manifest.h) — never the one just written, never a file of
 * another model or with an unreadable header (an earlier run's, which --resume could not use) —
 * and temp files older than a minute (left by a writer that died mid-write) are removed.
 * Read: candidates newest first (by step, then suffix); a file that is truncated, has a bad magic/
 * version/checksum, or a model shape/optimizer other than expected is logged and skipped, and the
 * next older one is tried. Loading never modifies or deletes any file.
 *
 * Ownership: all buffers are the caller's; nothing is kept between calls. */
#ifndef RM_WORKER_CHECKPOINT_H
#define RM_WORKER_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "worker/model/model.h"

#define RM_CKPT_MAGIC "RMCKPT01"
#define RM_CKPT_VERSION 1
#define RM_CKPT_MAX_STATE 2
#define RM_CKPT_HDR_BYTES 512 /* the fixed header; the payload starts right after it */

typedef struct rm_ckpt_meta {
    int64_t step;        /* optimizer steps completed (global step) */
    int32_t train_epoch; /* data epoch the cursor is in */
    int64_t data_pos;    /* samples of that epoch's permutation consumed */
    int32_t world_size;  /* world size that wrote it (elastic restarts may differ) */
    int32_t batch_per_worker;
    int32_t rdzv_epoch;
    uint64_t seed;    /* data/model seed */
    uint64_t rng[4];  /* generator state (reserved for stochastic layers) */
    int32_t opt_type; /* rm_opt_type */
    int32_t nstate;   /* optimizer state buffers in the payload */
    int64_t opt_t;    /* optimizer updates applied (Adam bias correction) */
    double epoch_pos; /* schedule position (fractional data epoch) */
    double lr;        /* last lr used */
    float loss_scale; /* fp16 loss scaler (1 when unused) */
    int32_t scaler_tracker;
    rm_model_shape shape;
    uint64_t nparams;
    /* One rank's shard of a sharded checkpoint (worker/checkpoint/ckpt_shard.h); shard_world 0: a whole
     * checkpoint. A shard's payload is (1 + nstate) * shard_floats floats (its pieces of the
     * parameters, then of each optimizer buffer). Stored after the payload checksum, in what
     * version 1 headers left as zeros, so every older file reads as whole. */
    int32_t shard_rank, shard_world;
    uint64_t shard_floats;
} rm_ckpt_meta;

/* A payload segment (host memory). */
typedef struct rm_ckpt_seg {
    const void *p;
    size_t bytes;
} rm_ckpt_seg;

/* Write atomically; segs are concatenated as the payload (their total must be
 * (1 + meta->nstate) * meta->nparams floats). keep >= 1 prunes older files. path_out (may be NULL)
 * gets the final path. RM_EIO with err on any file-system failure (the temp file is removed). */
int rm_ckpt_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_seg *segs, int nsegs, int keep,
                  char *path_out, size_t path_cap, rm_err *err);

/* Write one file atomically under exactly DIR/name (no suffix, no pruning): temp file, fsync,
 * placed without replacing anything, fsync DIR. RM_ECONFLICT when name exists already; RM_EIO on
 * a file-system failure. The sharded checkpoints' shard files (worker/checkpoint/ckpt_shard.h). */
int rm_ckpt_write_named(const char *dir, const char *name, const rm_ckpt_meta *meta, const rm_ckpt_seg *segs,
                        int nsegs, char *path_out, size_t path_cap, rm_err *err);

/* The same atomic placement for any bytes (a sharded checkpoint's manifest). */
int rm_ckpt_put_file(const char *dir, const char *name, const void *bytes, size_t n, rm_err *err);

/* Decode and check one file's header only (not the payload); payload_crc (may be NULL) gets the
 * payload checksum it records. */
int rm_ckpt_read_header(const char *path, rm_ckpt_meta *meta, uint32_t *payload_crc, rm_err *err);

/* Read and verify one file into payload (cap bytes, host memory). expect may be NULL; otherwise
 * the file's shape, opt_type and nstate must match it. payload may be written even on failure. */
int rm_ckpt_read(const char *path, const rm_ckpt_meta *expect, rm_ckpt_meta *meta, void *payload, size_t cap,
                 rm_err *err);

/* Newest valid checkpoint in dir (see above). RM_ENOTFOUND when none is valid (or dir missing).
 * skipped (may be NULL) gets the number of invalid files passed over. */
int rm_ckpt_load_newest(const char *dir, const rm_ckpt_meta *expect, rm_ckpt_meta *meta, void *payload,
                        size_t cap, char *path_out, size_t path_cap, int *skipped, rm_err *err);

/* Listing a checkpoint folder (the one listing of whole checkpoints here and of sharded sets in
 * worker/checkpoint/ckpt_shard.c). parse(name, e) says whether a directory entry is one of the caller's
 * files and fills its keys; the entries come newest first: key[0] descending, then key[1]
 * descending. aux is the caller's (kept, not sorted on). */
#define RM_CKPT_NAME_CAP 96
typedef struct rm_ckpt_entry {
    int64_t key[2];
    int aux;
    char name[RM_CKPT_NAME_CAP];
} rm_ckpt_entry;
typedef bool (*rm_ckpt_parse_fn)(const char *name, rm_ckpt_entry *e);
/* *out owned (free(), NULL when empty). RM_ENOTFOUND when dir is missing, RM_EIO when it cannot
 * be read, RM_ENOMEM. Names of RM_CKPT_NAME_CAP bytes or more are never the caller's. */
int rm_ckpt_list(const char *dir, rm_ckpt_parse_fn parse, rm_ckpt_entry **out, int *n);
/* The whole checkpoints' files (ckpt-<step>[-<n>].rmck) in dir, newest first: key[0] = step,
 * key[1] = n (0 for none). As rm_ckpt_list. */
int rm_ckpt_list_whole(const char *dir, rm_ckpt_entry **out, int *n);

/* The name of the JSON manifest that pairs with a checkpoint file or a set's .rmmf
 * (worker/checkpoint/manifest.h): "index-" + name without its extension + ".json"
 * (index-ckpt-<step>.json, index-manifest-<step>-<epoch>-<world>.json). Its own prefix keeps it
 * out of what lists and counts ckpt-* and manifest-* files. -1 when it does not fit cap or name
 * has no extension. Pruning removes it before the file it describes. */
int rm_ckpt_json_name(const char *name, char *out, size_t cap);

/* fsync a folder (after removing files from it); -1 with errno on failure. */
int rm_ckpt_fsync_dir(const char *dir);

/* mkdir -p (mode 0755). */
int rm_mkdir_p(const char *path, rm_err *err);

/* Can checkpoints be written into dir? rm_fs_dir_writable (common/fs.h): creates it if missing,
 * then a probe file must be created, written, fsync'd and removed; RM_EINVAL naming the path and
 * the reason otherwise, so a worker refuses a folder it could never checkpoint into at start
 * instead of failing every write later. */
int rm_ckpt_dir_check(const char *dir, rm_err *err);

/* A ranged read (pipeline stages restore their own layers only): bytes [src, src + len) of a
 * file's payload go to dst + dst. */
typedef struct rm_ckpt_range {
    uint64_t src, len;
    size_t dst;
} rm_ckpt_range;

/* rm_ckpt_read keeping only the nr ranges: the whole payload is still read and its checksum
 * verified, streamed through a fixed 1 MiB buffer (memory: dst's cap bytes plus that, whatever
 * the file's size), but only the ranges are copied into dst. RM_EINVAL when a range lies outside
 * the payload or cap (checked before any byte is copied). payload_crc (may be NULL) gets the
 * checksum the header records. dst may be written even on failure. */
int rm_ckpt_read_ranges(const char *path, const rm_ckpt_meta *expect, const rm_ckpt_range *r, int nr,
                        void *dst, size_t cap, rm_ckpt_meta *meta, uint32_t *payload_crc, rm_err *err);

/* rm_ckpt_load_newest with rm_ckpt_read_ranges: the ranges of the newest valid whole checkpoint
 * (every candidate verified in full; the same fallback to older files). */
int rm_ckpt_load_newest_ranges(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_range *r, int nr,
                               void *dst, size_t cap, rm_ckpt_meta *meta, char *path_out, size_t path_cap,
                               int *skipped, rm_err *err);
#endif
