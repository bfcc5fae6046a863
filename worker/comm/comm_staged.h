/* comm_staged.h — a host transport (ring, shm, hier, mpi, local) carrying device buffers: every
 * collective copies its device input to a pinned host buffer, runs the wrapped comm there and
 * copies the result back (docs/gpu.md, "Running on GPUs"). The trainer wraps its round comm in it
 * when the kernels table holds device memory and the backend is not NCCL (backend ring on GPUs,
 * RINGMASTER_GPU_SHARED), so every strategy's collectives take device pointers as they do over NCCL.
 *
 * Ownership: rm_comm_staged_wrap takes the wrapped comm (its destroy destroys it); the kernels table
 * is borrowed for the wrapper's life. The staging buffer grows to the largest collective and is freed
 * with the wrapper. Threads: as comm.h (one caller at a time; abort from any thread). */
#ifndef RM_WORKER_COMM_STAGED_H
#define RM_WORKER_COMM_STAGED_H
#include "kernels/kernels.h"
#include "worker/comm/comm.h"

/* The staging table (its init answers RM_EUNSUPPORTED: use rm_comm_staged_wrap). */
const rm_comm_ops *rm_comm_staged_ops(void);
/* Wrap *ops / *comm (rank of world) in place: on success *ops is the staging table and *comm the
 * wrapper owning the old comm; on failure (RM_ENOMEM) both are left as they were. */
int rm_comm_staged_wrap(const rm_comm_ops **ops, rm_comm **comm, const rm_kernels *k, int rank, int world,
                        rm_err *err);
/* The wrapped table of a staging comm (for logs), else ops itself. */
const rm_comm_ops *rm_comm_staged_inner(const rm_comm_ops *ops, const rm_comm *c);
#endif
