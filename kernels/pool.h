/* pool.h — the CPU kernels' threads: one process-wide pool that splits a kernel's work (the rows
 * of a GEMM, the (sequence, head) pairs of attention, the rows of a LayerNorm) among the cores
 * the worker was given (docs/architecture.md, "Threads in the kernels").
 *
 * Design: the BLAS library stays single-threaded; parallelism is ours, so a worker never runs two
 * thread pools against each other and the split is the same on every call (results do not depend
 * on timing). The calling thread runs part 0 and waits for the others; helper threads spin briefly
 * after a job (kernels come in bursts of hundreds per step) and then sleep on a condition
 * variable. One caller at a time: the training thread (calls from other threads run serially).
 *
 * Ownership: the pool's threads live until the process exits; nothing to free. */
#ifndef RM_KERNELS_POOL_H
#define RM_KERNELS_POOL_H
#include <stddef.h>

#define RM_POOL_MAX_THREADS 64

/* Run fn(ctx, part, nparts) for part in [0, nparts), nparts = the pool's width (or 1), on the
 * pool's threads; returns when all parts are done. A call from inside a part, or while another
 * thread is using the pool, runs every part on the calling thread. */
typedef void (*rm_pool_fn)(void *ctx, int part, int nparts);
void rm_pool_run(rm_pool_fn fn, void *ctx);
/* Run with at most max_parts parts (small jobs do not pay for waking every thread). */
void rm_pool_run_n(rm_pool_fn fn, void *ctx, int max_parts);
/* Set the width (1..RM_POOL_MAX_THREADS): threads are started on first use. */
void rm_pool_set_threads(int n);
int rm_pool_threads(void);
/* [lo, hi) of part p of n over [0, total), in whole multiples of `align` except the last. */
static inline void rm_pool_range(size_t total, int p, int n, size_t align, size_t *lo, size_t *hi)
{
    size_t units = (total + align - 1) / align;
    size_t a = units * (size_t)p / (size_t)n, b = units * (size_t)(p + 1) / (size_t)n;
    *lo = a * align < total ? a * align : total;
    *hi = b * align < total ? b * align : total;
}
/* The CPUs this process may use: its affinity mask, capped by a cgroup v2/v1 CPU quota (a pod's
 * limits.cpu, rounded up). At least 1. */
int rm_pool_cpus_available(void);
/* The cgroup CPU quota in whole CPUs (rounded up), or 0 when there is none. */
int rm_pool_cpu_quota(void);
#endif
