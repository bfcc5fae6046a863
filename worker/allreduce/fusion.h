/* fusion.h — tensor fusion with overlap (Horovod / PyTorch DDP buckets) for the data-parallel step.
 *
 * The flat gradient buffer holds the layers contiguously in forward order. Backward produces them
 * in reverse order, so a bucket is a contiguous range taken from the end of the buffer: no packing.
 * Buckets are planned once at rm_fusion_new: walking layers from last to first, a bucket closes
 * when it holds >= threshold_bytes (threshold 0 = one bucket per layer) or at layer 0. When every
 * layer of a bucket was marked ready, the bucket is queued for a comm thread owned by the
 * rm_fusion, which runs ops->allreduce(AVG) on it while backward continues on the caller's thread.
 * rm_fusion_finish waits for all buckets of the step.
 *
 * Steady state allocates nothing: the plan, the job queue and the thread are made in rm_fusion_new.
 *
 * Ownership: ops, comm and grads are borrowed and must outlive the rm_fusion; layer_off/layer_len
 * are copied. While a step is in flight (begin .. finish) the comm thread owns the comm: the
 * caller must not call collectives on it, and must not touch the grads of layers it already marked
 * ready. If a peer hangs, ops->abort(comm) from any thread makes finish() return quickly.
 *
 * Usage per step:
 *   rm_fusion_begin(f);
 *   for (l = nlayers-1; l >= 0; l--) { backward(l); rm_fusion_ready(f, l); }
 *   rc = rm_fusion_finish(f, &err);   // grads now averaged over the world, in place
 */
#ifndef RM_WORKER_FUSION_H
#define RM_WORKER_FUSION_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "worker/comm/comm.h"

typedef struct rm_fusion rm_fusion;

typedef struct rm_fusion_stats {
    int nbuckets;         /* buckets in the plan */
    uint64_t bytes;       /* bytes allreduced in the last finished step (sum over buckets) */
    uint64_t total_bytes; /* since rm_fusion_new */
    uint64_t steps;       /* finished steps */
    double allreduce_s;   /* last step: seconds the comm thread spent inside allreduce calls */
    double wait_s;        /* last step: seconds rm_fusion_finish blocked (exposed comm time) */
    double step_s;        /* last step: seconds from begin to the end of finish */
    double algbw_gbps;    /* last step: bytes / allreduce_s / 1e9 */
    double busbw_gbps;    /* last step: algbw * 2(n-1)/n */
} rm_fusion_stats;

/* Plans buckets and starts the comm thread. layer_off[i]/layer_len[i] are in floats; layers must
 * be in increasing, non-overlapping order inside grads. *out owned: rm_fusion_free.
 * RM_EINVAL on a bad layout or nlayers < 1. */
int rm_fusion_new(const rm_comm_ops *ops, rm_comm *comm, float *grads, const size_t *layer_off,
                  const size_t *layer_len, int nlayers, size_t threshold_bytes, rm_fusion **out, rm_err *err);
/* Start a step: resets the ready marks. Must not be called while a step is in flight. */
void rm_fusion_begin(rm_fusion *f);
/* Layer's gradient is final. Launches its bucket when the bucket is complete. RM_EINVAL for a bad
 * or repeated layer index (the step then fails in finish). Never blocks on the network. */
int rm_fusion_ready(rm_fusion *f, int layer);
/* Wait for every bucket of the step (layers never marked ready are launched now, so finish always
 * leaves the grads fully averaged on success). Returns the first error of the step (the comm is
 * then unusable: see comm.h). */
int rm_fusion_finish(rm_fusion *f, rm_err *err);
/* Stop and join the comm thread (waits for an in-flight bucket; abort the comm first if a peer
 * may hang). NULL ok. */
void rm_fusion_free(rm_fusion *f);
void rm_fusion_get_stats(const rm_fusion *f, rm_fusion_stats *out);
/* World size used only for busbw in the stats (default 1, which reports busbw 0). */
void rm_fusion_set_world_size(rm_fusion *f, int world_size);

/* The planned buckets, for tests and logs: bucket b covers floats [off, off+len) and layers
 * [first_layer, last_layer]. Buckets are numbered in launch order (bucket 0 holds the last layer).
 * RM_EINVAL when b is out of range. */
int rm_fusion_bucket(const rm_fusion *f, int b, size_t *off, size_t *len, int *first_layer, int *last_layer);
int rm_fusion_nbuckets(const rm_fusion *f);
#endif
