/* manifest.h — the versioned checkpoint manifest (docs/models-and-data.md#checkpoint-manifest): one
 * JSON file per checkpoint that names every tensor, says which slice of it lies where in which
 * file, and carries the data cursor, so sharding, pipelines, tensor parallelism and export read
 * any checkpoint without knowing who wrote it or with which layout.
 *
 * Who owns what: the checkpoint files themselves (header, checksums, atomic placement, pruning)
 * are worker/checkpoint/checkpoint.h's and the sets' ckpt_shard.h's; this module describes them.
 * The writers call it last, after the files and (for a set) its .rmmf are in place, so a manifest
 * never names a file that is not durable; a checkpoint without one (an older writer's, or a crash
 * between the two) still loads through checkpoint.h and ckpt_shard.h exactly as before. The
 * tensor names are the model family's (worker/model/model.h rm_model_tensors).
 *
 * Name: "index-" + the name of what it describes without its extension + ".json"
 * (rm_ckpt_json_name): index-ckpt-<step>[-<n>].json beside a whole file,
 * index-manifest-<step>-<epoch>-<world>.json beside a set's .rmmf (its own prefix: tools and
 * tests count ckpt-* and manifest-* files). Written like every checkpoint file: temp file, fsync,
 * no-replace rename, fsync of DIR.
 *
 * Format (version 1):
 *   {"format": "ringmaster-checkpoint", "version": 1, "kind": "whole" | "sharded" | "stages" | "pieces",
 *    "model": {"family": "mlp", "shape": [words 0..nlayers of the shape record], "nparams": N},
 *    "step": S,
 *    "optimizer": {"type": "adam", "state_buffers": K, "t": opt_t},
 *    "data": {"train_epoch", "data_pos", "seed": "<decimal u64>", "world_size", "batch_per_worker"},
 *    "files": [{"name": "ckpt-...rmck", "crc32": "<payload CRC32, 8 hex>"}],
 *    "tensors": [{"name": "layers.0.weight", "buffer": 0, "offset": <floats into the flat buffer>,
 *                 "shape": [in, out], "layout": "in_out",
 *                 "pieces": [{"file": "ckpt-...rmck", "offset": <bytes into the file>,
 *                             "start": a, "end": b}]}]}
 *   buffer 0 is the parameters, k + 1 optimizer state buffer k, whose copy of tensor T is named
 *   "T@state<k>". A piece holds elements [start, end) of the tensor in its row-major flat order
 *   (fp32, little-endian host order) at `offset` bytes of `file`. Tensors of each buffer are
 *   listed in flat order and tile [0, nparams); a tensor's pieces, by start, tile [0, numel).
 * Version rule: `version` is the major version. A reader refuses a higher one ("<path>: version:
 * 2 is newer than this reader's 1"), since a field it does not know may change what the bytes
 * mean; fields may be added within a version and readers ignore fields they do not know.
 *
 * Ownership: rm_ckpt_manifest owns its arrays (rm_ckpt_manifest_free, NULL ok); everything passed
 * in is borrowed for the call. */
#ifndef RM_WORKER_CKPT_MANIFEST_H
#define RM_WORKER_CKPT_MANIFEST_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/model/model.h"

#define RM_CKPT_MF_FORMAT "ringmaster-checkpoint"
#define RM_CKPT_MF_VERSION 1
/* Read caps: a manifest's bytes, and the counts that size what it allocates. */
#define RM_CKPT_MF_MAX_BYTES (64u << 20)
#define RM_CKPT_MF_MAX_FILES 4096
#define RM_CKPT_MF_MAX_TENSORS 65536
#define RM_CKPT_MF_MAX_PIECES (1u << 22)
#define RM_CKPT_MF_NAME (RM_MODEL_TENSOR_NAME + 16)

/* The named tensors of a model, in flat order and tiling [0, nparams) (rm_model_tensors over
 * every unit); what a writer needs besides the checkpoint's header. */
typedef struct rm_ckpt_model {
    const char *family; /* m->family->name */
    const rm_model_tensor *t;
    int n;
} rm_ckpt_model;

/* Where a checkpoint file keeps which floats: each buffer's section of the payload holds
 * `floats` floats (nparams for a whole file, shard_floats for a shard), and in each section
 * floats [flat, flat + len) of that buffer lie at float `at`. */
typedef struct rm_ckpt_span {
    uint64_t flat, len, at;
} rm_ckpt_span;
typedef struct rm_ckpt_file_map {
    const char *name; /* in the checkpoint folder */
    uint32_t crc;     /* payload CRC32 its header records */
    uint64_t floats;
    int nspans;
    const rm_ckpt_span *spans;
} rm_ckpt_file_map;

typedef struct rm_ckpt_piece {
    int file;            /* index into files */
    uint64_t offset;     /* bytes into the file */
    uint64_t start, end; /* elements [start, end) of the tensor */
} rm_ckpt_piece;

typedef struct rm_ckpt_mtensor {
    char name[RM_CKPT_MF_NAME];
    int buffer;      /* 0 parameters, k + 1 optimizer state k */
    uint64_t offset; /* floats into the flat buffer */
    uint64_t numel;
    int ndim;
    int64_t shape[RM_MODEL_MAX_DIMS];
    char layout[16];
    size_t first, npieces; /* its pieces: pieces[first .. first + npieces) */
} rm_ckpt_mtensor;

typedef struct rm_ckpt_mfile {
    char name[RM_CKPT_NAME_CAP];
    uint32_t crc;
} rm_ckpt_mfile;

typedef struct rm_ckpt_manifest {
    int version;
    char kind[16]; /* "whole", "sharded", "stages", "pieces" (tensor parallelism: ckpt_shard.h) */
    char family[32];
    rm_model_shape shape;
    uint64_t nparams;
    int64_t step;
    int32_t opt_type, nstate;
    int64_t opt_t;
    int32_t train_epoch; /* the data cursor: the order is a function of (seed, epoch, rank) */
    int64_t data_pos;
    uint64_t seed;
    int32_t world_size, batch_per_worker;
    int nfiles, ntensors;
    size_t npieces;
    rm_ckpt_mfile *files;
    rm_ckpt_mtensor *tensors;
    rm_ckpt_piece *pieces;
} rm_ckpt_manifest;

void rm_ckpt_manifest_free(rm_ckpt_manifest *m);

/* The manifest of a checkpoint: meta's scalars, model's tensors (and each state buffer's copy),
 * each cut into the pieces the files hold. RM_EINVAL when model's tensors do not tile
 * [0, meta->nparams) or the files do not cover every float exactly once; RM_ENOMEM. */
int rm_ckpt_manifest_build(const rm_ckpt_meta *meta, const char *kind, const rm_ckpt_model *model,
                           const rm_ckpt_file_map *files, int nfiles, rm_ckpt_manifest *out, rm_err *err);

/* The JSON text of m (owned, free()); RM_ENOMEM. */
int rm_ckpt_manifest_encode(const rm_ckpt_manifest *m, char **out, size_t *n, rm_err *err);

/* Encode m and place it atomically as DIR/name (rm_ckpt_put_file: RM_ECONFLICT if it exists). */
int rm_ckpt_manifest_write(const char *dir, const char *name, const rm_ckpt_manifest *m, rm_err *err);

/* A whole checkpoint's manifest, written beside the file at file_path (rm_ckpt_write's path_out;
 * the file's header supplies the checksum). */
int rm_ckpt_manifest_write_whole(const char *file_path, const rm_ckpt_meta *meta, const rm_ckpt_model *model,
                                 rm_err *err);

/* Parse and validate JSON text (what path names, for messages): every error names the path and
 * the field ("<path>: tensors[3].pieces[0].end: beyond the tensor's 40 elements"); RM_EINVAL,
 * RM_ETOOBIG over a cap, RM_ENOMEM. out is zeroed first and owns its arrays on RM_OK only. */
int rm_ckpt_manifest_parse(const char *path, const char *text, size_t n, rm_ckpt_manifest *out, rm_err *err);

/* Read (at most RM_CKPT_MF_MAX_BYTES) and parse the manifest at path; RM_ENOTFOUND, RM_EIO. */
int rm_ckpt_manifest_read(const char *path, rm_ckpt_manifest *out, rm_err *err);

/* Floats [from, to) of the parameters, then of each optimizer state buffer ((1 + nstate) *
 * (to - from) floats, the compact layout of worker/checkpoint/ckpt_shard.h's ranged loads) from
 * the files of m in dir. Every file with a piece in the range is read in full and verified
 * (rm_ckpt_read_ranges: header, payload checksum) and must record the checksum m lists and m's
 * step; expect (may be NULL) as for rm_ckpt_read. RM_EINVAL on a bad range or cap, a mismatch or
 * a corrupt file (err names it); dst may be written even on failure. */
int rm_ckpt_manifest_assemble(const char *dir, const rm_ckpt_manifest *m, const rm_ckpt_meta *expect,
                              uint64_t from, uint64_t to, float *dst, size_t cap, rm_err *err);
#endif
