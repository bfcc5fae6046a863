/* ckpt_shard.h — sharded, elastic checkpoints (docs/strategies.md#sharding): every rank writes its own shard, the
 * last one to finish writes a small manifest, and a restore at any world size re-shards.
 *
 * A set (one step of one round) in DIR:
 *   shard-<step, 12 digits>-<rdzv epoch>-<rank>-of-<world>.rmck  one per rank: a checkpoint file
 *       (worker/checkpoint/checkpoint.h, written by rm_ckpt_write_named: atomic, checksummed) whose header
 *       has shard_rank/shard_world/shard_floats set and whose payload is the rank's compact shard:
 *       its pieces of the parameters, then of each optimizer buffer, the vector sharded unit by
 *       unit (worker/allreduce/shard.h rm_unit_shard; units = the model's layers);
 *   manifest-<step>-<rdzv epoch>-<world>.rmmf  text, written last: format version, step, epoch,
 *       world, nparams, nstate, opt_type, the units (offset, length), for a stage-layout set
 *       (pipeline stages, rm_ckpt_stage_write) the stage bounds, one line per shard (rank, floats,
 *       payload CRC32, file name), for a pieces set (tensor parallelism, rm_ckpt_pieces_write)
 *       every shard's runs, and a CRC32 of everything before it;
 *   index-manifest-<step>-<rdzv epoch>-<world>.json  the set's JSON manifest (worker/checkpoint/manifest.h:
 *       named tensors and the pieces each shard holds), written right after the .rmmf by the
 *       rank that wrote it, when the writer was given the model's tensors; readers here ignore it.
 * A set is complete only when its manifest exists: shards without one (a rank died, SIGTERM caught
 * the ranks at different steps) are never loaded.
 *
 * Write (rm_ckpt_shard_write, each rank, off the training thread): write the own shard; then,
 * until wait_s passes, look for the manifest — or, when every shard of the set is there, read
 * their headers (the checksums they record) and write the manifest (no-replace: when two ranks
 * race, one wins and the other finds it). No collective: it works at SIGTERM too. The rank that
 * wrote the manifest prunes: the newest `keep` complete sets of this model stay; an older set goes
 * manifest first (so it is never complete with shards missing), then its shards; shards of no
 * kept set older than the newest complete one (they can never complete) go too. Whole checkpoints
 * (ckpt-*.rmck) are pruned by their own writer, not here.
 *
 * Read (rm_ckpt_shard_load_newest, each rank): manifests newest first (step, then epoch); a set
 * of another model is passed over; every shard of a candidate set is read and verified (its own
 * checksums, and the manifest's checksum, rank, world, step and epoch for it) — by every rank,
 * even shards whose pieces it does not need, so all ranks choose the same set — and a corrupt or
 * missing shard is logged naming the file and the next older set is tried. From each shard the
 * reader keeps: its pieces of the parameters (so the parameters are whole on every rank, as the
 * strategies' state agreement expects) and the pieces of the optimizer state that the re-sharding
 * plan (rm_unit_shard_plan) assigns to new_rank of new_world.
 *
 * Ownership: all buffers are the caller's; nothing is kept between calls. */
#ifndef RM_WORKER_CKPT_SHARD_H
#define RM_WORKER_CKPT_SHARD_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/manifest.h"

#define RM_CKPT_MANIFEST_MAX (4 << 20) /* bytes a manifest may have (read cap): a pieces set's runs */
#define RM_CKPT_MAX_RUNS 65536         /* runs a pieces set's manifest may list */

/* The units a vector is sharded by: contiguous, in order, covering [0, nparams). */
typedef struct rm_ckpt_units {
    int n;
    const size_t *off, *len;
} rm_ckpt_units;

/* Write this rank's shard (meta->shard_rank/shard_world/shard_floats set; segs its compact shard,
 * (1 + nstate) * shard_floats floats) and wait up to wait_s for the set to complete (see above).
 * RM_OK: the set is complete (path_out: the manifest). RM_ETIMEDOUT: the shard is on disk but
 * the set did not complete in time (err names the missing ranks). RM_EIO/RM_EINVAL: the shard
 * could not be written. model (may be NULL): the named tensors; when set, the rank that writes
 * the .rmmf writes the set's JSON manifest (worker/checkpoint/manifest.h) right after it (an
 * error there is returned, the complete set stays). */
int rm_ckpt_shard_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                        const rm_ckpt_model *model, const rm_ckpt_seg *segs, int nsegs, int keep,
                        double wait_s, char *path_out, size_t path_cap, rm_err *err);

/* rm_ckpt_shard_write for a stage-layout set (pipeline stages, docs/strategies.md#pipeline-stages): shard r (r < shard_world
 * = P) holds the whole units [stage_bounds[r], stage_bounds[r + 1]) — their parameters, then their
 * range of each optimizer buffer — instead of a piece of every unit. stage_bounds: P + 1 entries
 * rising from 0 to units->n (RM_EINVAL otherwise). The manifest records them ("stages P b0 .. bP"),
 * so a reader needs nothing but the model's units: rm_ckpt_shard_load_newest re-shards a
 * stage-layout set to any new_world like a balanced one (new_world 1: the whole payload). */
int rm_ckpt_stage_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                        const rm_ckpt_model *model, const int *stage_bounds, const rm_ckpt_seg *segs,
                        int nsegs, int keep, double wait_s, char *path_out, size_t path_cap, rm_err *err);

/* ---- pieces sets (tensor parallelism, docs/models-and-data.md "Tensor parallelism") ----
 * Shard r holds a rank's pieces of the model in its own compact layout: the parameters, then each
 * optimizer buffer, shard_floats each. The manifest records, after the shard lines' header part,
 * "pieces N" and N lines "run SHARD LOCAL LSTRIDE WHOLE WSTRIDE ROWS LEN": ROWS rows of LEN floats
 * from LOCAL in the shard's vector (LSTRIDE floats apart) at WHOLE in the model's vector (WSTRIDE
 * apart), the same for every buffer. A reader needs nothing but the runs: every parameter is
 * covered by exactly one run (checked, with each run inside its shard and the vector), the
 * rest of a shard (a replicated piece another shard records) is not read. Loads assemble the
 * whole payload, then cut what was asked for (any new_world, or a layer range). */
typedef struct rm_ckpt_run {
    int32_t shard;
    uint32_t rows;           /* >= 1 */
    uint64_t local, lstride; /* in the shard's compact vector */
    uint64_t whole, wstride; /* in the model's vector */
    uint64_t len;            /* floats per row, >= 1 */
} rm_ckpt_run;

/* A run restricted to the part of the shard's vector in [lo, hi) (a rank that writes only that
 * range of its pieces: the optimizer state sharded over a data-parallel group), renumbered to
 * shard `shard` whose vector starts at lo: at most three runs into out (a partial first row, the
 * whole rows, a partial last row), their count returned (0: no overlap; -1: a malformed run, rows
 * or len 0 or rows that overlap, lstride < len). The rows keep their strides; floats outside
 * [lo, hi) are in no run. */
int rm_ckpt_run_clip(const rm_ckpt_run *in, uint64_t lo, uint64_t hi, int32_t shard, rm_ckpt_run out[3]);

/* rm_ckpt_shard_write for a pieces set: the set's runs of every shard (n of them, any order). The
 * manifest is checked against the shards' sizes before it is written (RM_EINVAL naming the run).
 * The JSON manifest (model set) has kind "pieces", each run's rows its pieces; it is left out
 * (logged) when that is more than 2^18 pieces in all buffers (version 1 of the JSON has no strides),
 * which `ringmaster export --checkpoint` then cannot read. */
int rm_ckpt_pieces_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                         const rm_ckpt_model *model, const rm_ckpt_run *runs, int nruns,
                         const rm_ckpt_seg *segs, int nsegs, int keep, double wait_s, char *path_out,
                         size_t path_cap, rm_err *err);

/* Bytes rm_ckpt_shard_load_newest needs in dst: nparams floats (every parameter) plus nstate
 * buffers of new_rank's compact shard. */
size_t rm_ckpt_shard_dst_bytes(const rm_ckpt_units *units, int nstate, int new_world, int new_rank);

/* Newest complete, valid set with step > min_step, re-sharded for new_rank of new_world into dst
 * (layout above; cap bytes). meta gets rank 0's shard header (the scalars of the position).
 * RM_ENOTFOUND when there is none; skipped (may be NULL) counts the sets passed over as invalid.
 * dst may be written even when an older set is loaded in the end. */
int rm_ckpt_shard_load_newest(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units,
                              int new_world, int new_rank, int64_t min_step, void *dst, size_t cap,
                              rm_ckpt_meta *meta, char *path_out, size_t path_cap, int *skipped, rm_err *err);

/* File names (for tests and messages): "shard-...rmck" and "manifest-...rmmf" in dir. */
int rm_ckpt_shard_name(char *out, size_t cap, int64_t step, int epoch, int rank, int world);
int rm_ckpt_manifest_name(char *out, size_t cap, int64_t step, int epoch, int world);

/* ---- ranged restore (pipeline stages, docs/strategies.md#pipeline-stages): a stage keeps only its own layers ----
 * The payload a ranged load leaves in dst: layers [u0, u1)'s parameters (len floats, len = the
 * layers' parameter count), then their range of each of the nstate optimizer buffers (len floats
 * each) — the stage's compact layout, as a stage writes its own shard. Memory: dst plus a fixed
 * 1 MiB read buffer (worker/checkpoint/checkpoint.h rm_ckpt_read_ranges), never the whole model's payload.
 * What is verified is what the whole loaders verify: the manifest, and every shard of a set in
 * full (its checksum streamed, its header against the manifest) — also shards with no piece of
 * the range, so a corrupt or missing shard anywhere skips the set on every stage alike and all
 * stages restore the same step (a stage that took a set whose other shards are bad would restore
 * a step its neighbours fall back from). Only the pieces inside the range are copied: from a
 * stage-layout set of any P (a range may span several old stages: each contributes its units),
 * from a balanced set (each rank's piece of each unit), or from a whole checkpoint. */

/* Bytes a ranged load of layers [u0, u1) needs in dst ((1 + nstate) * len floats); 0 on a bad range. */
size_t rm_ckpt_layers_bytes(const rm_ckpt_units *units, int nstate, int u0, int u1);

/* rm_ckpt_shard_load_newest keeping layers [u0, u1) only (layout above): the newest complete,
 * valid set (any layout) with step > min_step. Same returns, fallback and meta as there. */
int rm_ckpt_set_load_layers(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units, int u0,
                            int u1, int64_t min_step, void *dst, size_t cap, rm_ckpt_meta *meta,
                            char *path_out, size_t path_cap, int *skipped, rm_err *err);

/* The same from the newest valid whole checkpoint (ckpt-*.rmck, worker/checkpoint/checkpoint.h
 * rm_ckpt_load_newest's selection and fallback): layers [u0, u1) of it. */
int rm_ckpt_whole_load_layers(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units, int u0,
                              int u1, void *dst, size_t cap, rm_ckpt_meta *meta, char *path_out,
                              size_t path_cap, int *skipped, rm_err *err);
#endif
