/* shard.h — the one definition of how a flat vector of `count` floats is split across `world`
 * ranks (ZeRO stages, reduce-scatter / all-gather, sharded checkpoints), and the re-sharding plan
 * that maps one layout onto another. Pure functions on integers: no I/O, no allocation, shared by
 * the CPU and GPU (NCCL) paths and by the checkpoint code, tested as tables (tests/unit/test_shard.c).
 *
 * Layout ("balanced, remainder first"): base = count / world, rem = count % world; rank r owns
 * [off_r, off_r + len_r) with len_r = base + (r < rem) and off_r = r * base + min(r, rem). Shards
 * are contiguous, in rank order, cover the vector exactly once, and differ in length by at most
 * one element; ranks beyond `count` own empty shards. It is also the segment split of the ring
 * allreduce (worker/comm/comm_ring.c), so a reduce-scatter is exactly the allreduce's first half.
 *
 * Ownership: callers own every array passed in; nothing is kept. */
#ifndef RM_WORKER_SHARD_H
#define RM_WORKER_SHARD_H
#include <stddef.h>

/* Offset and length of rank's shard. world >= 1 and 0 <= rank < world (otherwise both are 0). */
void rm_shard_range(size_t count, int world, int rank, size_t *off, size_t *len);
size_t rm_shard_len(size_t count, int world, int rank);
size_t rm_shard_off(size_t count, int world, int rank);
/* The longest shard (what a padded, uniform-block collective needs per rank): ceil(count/world). */
size_t rm_shard_max_len(size_t count, int world);
/* The rank whose shard holds element i (i < count). */
int rm_shard_owner(size_t count, int world, size_t i);

/* One copy of a re-sharding plan: new shard [dst_off, dst_off + len) (offsets within the new
 * rank's shard) comes from old rank src_rank's shard [src_off, src_off + len). */
typedef struct rm_shard_piece {
    int src_rank;
    size_t src_off, dst_off, len;
} rm_shard_piece;

/* The pieces new_rank (of new_world) needs from a vector sharded across old_world ranks, in
 * order of dst_off; they tile the new shard exactly. An unsharded vector is old_world = 1 (one
 * piece from "rank 0"); unsharding is new_world = 1. Writes at most cap pieces and returns how
 * many the plan has (at most old_world; may exceed cap: call again with more room), or -1 on bad
 * arguments (world < 1, rank out of range). */
int rm_shard_plan(size_t count, int old_world, int new_world, int new_rank, rm_shard_piece *out, int cap);

/* A flat vector of contiguous units (a model's layers) sharded unit by unit, as FSDP does: rank's
 * piece of unit u is the layout above applied to the unit ([unit_off + rm_shard_off(unit_len),
 * + rm_shard_len)); the rank keeps its pieces back to back in a compact shard buffer. Gathering or
 * reduce-scattering one unit is then one collective on [unit_off, unit_off + unit_len). */
#define RM_SHARD_MAX_UNITS 64
typedef struct rm_unit_shard {
    int nunits, world, rank;
    size_t unit_off[RM_SHARD_MAX_UNITS], unit_len[RM_SHARD_MAX_UNITS];
    size_t off[RM_SHARD_MAX_UNITS]; /* this rank's piece of unit u: offset in the flat vector */
    size_t len[RM_SHARD_MAX_UNITS];
    size_t soff[RM_SHARD_MAX_UNITS]; /* ... and in the compact shard */
    size_t total;                    /* floats in the compact shard */
    size_t max_unit;                 /* the longest unit (what one gather holds) */
} rm_unit_shard;

/* Units must be in increasing, non-overlapping order; 1 <= nunits <= RM_SHARD_MAX_UNITS,
 * 0 <= rank < world. Returns 0, or -1 on bad arguments (out zeroed). */
int rm_unit_shard_make(const size_t *unit_off, const size_t *unit_len, int nunits, int world, int rank,
                       rm_unit_shard *out);

/* The re-sharding plan of a vector sharded unit by unit (rm_unit_shard, the sharded checkpoints of
 * worker/checkpoint/ckpt_shard.h): which ranges of which old ranks' compact shards (old_world) make up
 * new_rank's compact shard (new_world). Piece offsets are within the compact shards: src_off in
 * old rank src_rank's, dst_off in new_rank's. In unit order, then old-rank order; they tile the
 * new compact shard exactly. new_world = 1 is the unsharded vector (unit pieces back to back).
 * Writes at most cap pieces, returns how many the plan has (at most nunits * old_world), or -1 on
 * bad arguments. */
int rm_unit_shard_plan(const size_t *unit_len, int nunits, int old_world, int new_world, int new_rank,
                       rm_shard_piece *out, int cap);

/* ZeRO-2 staging buckets. A unit (a layer's gradient, unit_len floats) is reduce-scattered in
 * buckets of at most about cap floats, each written into a reusable staging buffer, so that the
 * ordinary reduce-scatter of bucket k (rank r gets [rm_shard_off(total_k), + rm_shard_len) of
 * it) leaves every rank exactly the next part of ITS OWN piece of the unit (the layout above):
 * bucket k holds, for each rank r in order, the unit's floats
 *     [rm_shard_off(unit_len, world, r) + k * chunk, + rm_shard_len(total_k, world, r)).
 * Every bucket but the last takes `chunk` floats from every rank (total world * chunk); the last
 * takes what is left (the pieces' remainder included), so the buckets of one rank tile its piece
 * in order and rank r's part of bucket k lands at compact offset soff + k * chunk.
 * chunk = max(1, cap / world); buckets = ceil(base / chunk) (at least 1), base = unit_len / world.
 * No bucket holds more than rm_shard_bucket_cap(cap, world) floats (the staging buffer's size). */
typedef struct rm_shard_bucket {
    int nbuckets;
    size_t chunk; /* floats each rank contributes to every bucket but the last */
} rm_shard_bucket;
/* world >= 1 (else nbuckets 0). */
rm_shard_bucket rm_shard_buckets(size_t unit_len, int world, size_t cap);
/* Floats in bucket k (0 <= k < nbuckets; else 0). */
size_t rm_shard_bucket_total(size_t unit_len, int world, size_t cap, int k);
/* The largest bucket any unit can have for this cap: world * max(1, cap / world) + world - 1. */
size_t rm_shard_bucket_cap(size_t cap, int world);
#endif
