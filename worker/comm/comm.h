/* comm.h — collective communication for ringmaster-worker: one function table per backend.
 *
 * Backends: "ring" (TCP ring allreduce, comm_ring.c), "shm" (ranks on one host, through shared
 * memory, comm_shm.c), "hier" (hierarchical: intra-node then inter-node, comm_hier.c), "mpi" (Open MPI's MPI_Allreduce when the worker runs under mpirun,
 * comm_mpi.c), "local" (world size 1, comm_local.c) and "nccl"
 * (worker/comm/cuda/comm_nccl.c, only when CUDA is on). The trainer picks a table with
 * rm_comm_backend(name) and only ever talks to the table, so a backend is data, not a branch.
 *
 * Ownership: rm_comm_cfg is borrowed for the duration of init() only (peers, token and rdzv are
 * not kept past init; the ring copies what it needs). init() returns an owned rm_comm that the
 * caller releases with the same table's destroy() (NULL ok). Buffers passed to collectives are
 * borrowed for the duration of the call.
 *
 * Threads: one thread at a time may call collectives on one rm_comm (the fusion comm thread, or
 * the trainer). abort() is the exception: any thread may call it at any time; it makes blocked
 * and later calls on that comm fail fast (RM_ECLOSED), after which only destroy() is useful.
 *
 * Errors: 0 or a negative RM_E* code, details in rm_err. A collective that fails leaves the comm
 * unusable (peers may be out of step): destroy it, re-join the rendezvous, init again.
 *   RM_ETIMEDOUT  a peer did not answer within cfg.timeout_s (dead or hung)
 *   RM_ECLOSED    a peer closed its connection, or abort() was called
 *   RM_EPROTO     a peer sent garbage or got out of step (bad frame header / sequence)
 *   RM_EAUTH      handshake failed for the ring neighbour (never for strangers: they are dropped)
 *   RM_EUNSUPPORTED  dtype/op the backend does not do (ring: bf16/f16) */
#ifndef RM_WORKER_COMM_H
#define RM_WORKER_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rdzv.h"
#include "common/shm_name.h"
#include "common/rm.h"

typedef enum { RM_DT_F32 = 0, RM_DT_BF16, RM_DT_F16 } rm_dtype;
typedef enum { RM_OP_SUM = 0, RM_OP_AVG } rm_redop;

/* Bytes per element (0 for an unknown dtype) and a short name ("float", "bfloat16", "half"). */
size_t rm_dtype_size(rm_dtype dt);
const char *rm_dtype_name(rm_dtype dt);
const char *rm_redop_name(rm_redop op);

/* A worker's ring listener: a background thread that accepts and authenticates ring handshakes
 * for as long as it lives (training included), so strangers on the ring port are dropped within
 * a couple of seconds and never sit in the backlog until the next formation (comm_ring.c). */
typedef struct rm_ring_listener rm_ring_listener;

typedef struct rm_comm_cfg {
    int rank, world_size, epoch;
    const rm_rdzv_peer *peers;   /* world_size entries, index = rank (addr "host:port"); borrowed */
    const char *token;           /* job token; authenticates ring handshakes; NULL = "" */
    rm_ring_listener *listener;  /* the worker's long-lived ring listener (borrowed), or NULL:
                                    the ring then listens for this formation only, on listen_fd */
    int listen_fd;               /* without a listener: an already-bound, listening socket this
                                    worker advertised at rendezvous, or -1: the ring then binds
                                    peers[rank].addr itself. Borrowed: the caller closes it. */
    double timeout_s;            /* bound on every blocking step (connect, accept, send, recv);
                                    <= 0 means 10 s */
    struct rm_rdzv_client *rdzv; /* for NCCL's unique-id bootstrap through the kv area; may be NULL */
    int device;                  /* GPU ordinal for nccl; ignored elsewhere */
    /* ring only: 0 = the round's world; 1..65535 = a sub-group of it formed over the same
     * listener in the same epoch (rank/world_size/peers are then the sub-group's). Each group's
     * connections are parked and claimed apart. Users: comm_hier.c's intra- and inter-node rings
     * (1..3) and worker/pipeline/step_pipeline.c's stage links (0x4000 + the lower rank), data-parallel groups
     * (0x2000 + stage) and tie groups (0x8000 + unit * 512 + replica). */
    uint32_t group;
    /* "hier" only (comm_hier.c, docs/strategies.md#topology): a node's ranks may use shared memory when they also
     * advertised one host (the caller applied RINGMASTER_SHM). */
    int shm_ok;
} rm_comm_cfg;

typedef struct rm_comm rm_comm; /* opaque; each backend defines its own */

typedef struct rm_comm_ops {
    const char *name;
    int (*init)(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err);
    /* In place, blocking: buf holds count elements on every rank; on return every rank holds the
     * reduction (bit-identical across ranks for ring/mpi). count 0 is a no-op that still succeeds. */
    int (*allreduce)(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err);
    /* Out of place: send is only read; recv gets the result. send == recv behaves as in place. */
    int (*allreduce_oop)(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt, rm_redop op,
                         rm_err *err);
    /* Reduce-scatter over the shard layout (worker/allreduce/shard.h; rank r's shard is
     * [rm_shard_off, + rm_shard_len) of count): buf holds count elements on every rank and is
     * clobbered (scratch for partial sums); on return shard (rm_shard_len elements) holds the
     * reduction of every rank's copy of this rank's range. shard may be buf + off (in place).
     * Ring: the allreduce's first half, pipelined the same way, bit-identical to the allreduce's
     * result for that range; mpi: MPI_Reduce_scatter(_block); nccl: ncclReduceScatter (padded when
     * count % world != 0). count 0 is a no-op that succeeds. */
    int (*reduce_scatter)(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                          rm_err *err);
    /* All-gather over the shard layout: shard holds this rank's rm_shard_len elements (only
     * read); on return buf holds count elements, every rank's shard at its offset. shard may be
     * buf + off (in place). Ring: the allreduce's second half; mpi: MPI_Allgather(v); nccl:
     * ncclAllGather (padded when uneven). */
    int (*all_gather)(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err);
    int (*barrier)(rm_comm *c, rm_err *err);
    void (*abort)(rm_comm *c);   /* any thread; NULL ok */
    void (*destroy)(rm_comm *c); /* NULL ok */
} rm_comm_ops;

/* The table for "ring", "mpi", "local" or "nccl"; NULL when unknown or not built (nccl without
 * CUDA, mpi without Open MPI). Static storage; never freed. */
const rm_comm_ops *rm_comm_backend(const char *name);

/* Hook for the GPU build: worker/comm/cuda/comm_nccl.c defines it when CUDA is on; the CPU build's
 * worker/comm/nocuda/comm_nccl_stub.c returns NULL. */
const rm_comm_ops *rm_comm_nccl_ops(void);
/* The other tables, for callers that want one directly. */
const rm_comm_ops *rm_comm_ring_ops(void);
/* The two authenticated sockets of a ring comm (world >= 2): to_next is written towards rank+1,
 * from_prev read from rank-1 (for a world of 2, one socket per direction between the pair). For
 * point-to-point users (pipeline stages); the fds stay owned by the comm (destroy closes them),
 * and the caller must not run collectives on the comm while using them. RM_EINVAL for world 1. */
int rm_comm_ring_link_fds(rm_comm *c, int *to_next, int *from_prev);
const rm_comm_ops *rm_comm_local_ops(void);
const rm_comm_ops *rm_comm_mpi_ops(void); /* NULL when built without Open MPI */
/* "shm" (comm_shm.c): ranks on one host through a POSIX shared-memory segment. Its init fails with
 * RM_EUNSUPPORTED when the peers' advertised hosts differ. rm_comm_shm_name: the segment's name
 * ("/rm-<hex>", already unlinked once init returned; for tests); "" for NULL. */
const rm_comm_ops *rm_comm_shm_ops(void);
const char *rm_comm_shm_name(const rm_comm *c);
/* Whether a round's ranks should use shm instead of the TCP ring, the one rule for the trainer and
 * the bench job (which measures what training would use): rm_comm_shm_allowed is RINGMASTER_SHM
 * ("0" no, "1" yes; unset: yes outside Kubernetes, no in a pod, where ranks sharing a node also
 * need the node's IPC namespace; common/worker_env.h); rm_comm_shm_wanted adds that the world
 * has 2+ ranks and every peer advertised the same host. peers borrowed. */
bool rm_comm_shm_allowed(void);
bool rm_comm_shm_wanted(const rm_rdzv_peer *peers, int world);
/* The most ranks one shm formation holds (ranks on one host; its staging area grows with the
 * square): rm_comm_shm_wanted is false above it and the shm backend's init refuses more. */
#define RM_COMM_SHM_MAX_RANKS 1024
/* (*ops)->init(cfg, out, err), except that when *ops is shm and its init fails with RM_ENOSPC
 * (/dev/shm cannot hold the segment: every rank of the formation gets that code together, see
 * comm_shm.c) it logs a warning naming /dev/shm and inits the TCP ring with the same cfg instead,
 * setting *ops to the ring's table. Ownership as init. For callers that picked shm themselves
 * (worker/train.c, comm_hier.c); docs/strategies.md#topology. */
int rm_comm_init_or_ring(const rm_comm_ops **ops, const rm_comm_cfg *cfg, rm_comm **out, rm_err *err);
/* The segment name a formation uses: "/rm-" + hex(HMAC-SHA256(token, "ringmaster-shm-v1|epoch|
 * world|addr0|addr1...")[0..20)). RM_EINVAL without peers. */
#define RM_COMM_SHM_NAME_MAX RM_SHM_NAME_MAX /* common/shm_name.h, which derives it */
int rm_comm_shm_segment_name(const rm_comm_cfg *cfg, char name[RM_COMM_SHM_NAME_MAX], rm_err *err);
/* Tests only: when set, init uses this name instead of the derived one (a stranger that found the
 * name in /dev/shm). NULL in production. */
extern const char *rm_comm_shm_test_name;
/* "hier" (comm_hier.c, docs/strategies.md#topology): hierarchical allreduce over the peers' node names (intra-node
 * shm or ring, inter-node ring among ranks of one local index); the flat ring (or shm) when the
 * ranks are on one node, one rank per node, or unevenly spread. rm_comm_hier_is_hier: 1 when a
 * hier comm runs hierarchically, 0 when flat (or NULL); rm_comm_hier_desc: what it runs, for logs
 * ("" for NULL). Both only for comms of this table. */
const rm_comm_ops *rm_comm_hier_ops(void);
int rm_comm_hier_is_hier(const rm_comm *c);
const char *rm_comm_hier_desc(const rm_comm *c);
/* Rank and size of an mpi-backend comm (MPI decides them, not the rendezvous). RM_EUNSUPPORTED
 * without Open MPI. */
int rm_comm_mpi_world(rm_comm *c, int *rank, int *size);

/* True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set). */
int rm_comm_under_mpi(void);

/* Bind + listen on host (a 127.0.0.0/8 address or "localhost"; port 0 = any free port) so the
 * worker can advertise "host:port" at rendezvous before the ring exists. *fd is owned by the caller
 * (close it when done); *port gets the bound port. Backlog is large enough for a world plus
 * strangers. */
int rm_comm_listen(const char *host, int *fd, int *port, rm_err *err);

/* Start a ring listener on the listening socket fd (from rm_comm_listen; made non-blocking).
 * own_fd = 1: on success the listener owns the socket and closes it in free (on failure the
 * caller still owns it). token is copied (the job token; NULL = ""). *out owned: rm_ring_listener_free. */
int rm_ring_listener_start(int fd, int own_fd, const char *token, rm_ring_listener **out, rm_err *err);
/* Stop the thread, close pending and parked connections (and the socket when owned). NULL ok.
 * No ring_init may be using it. */
void rm_ring_listener_free(rm_ring_listener *l);
/* Unauthenticated connections dropped so far (tests, logs). */
unsigned long rm_ring_listener_dropped(rm_ring_listener *l);

/* Static-mode helper (bench, tests): parse "h:p,h:p,..." into world entries (rank = index,
 * worker_id = index). *out owned (free()); *n gets the count. RM_EINVAL on a malformed list. */
int rm_comm_parse_peers(const char *list, rm_rdzv_peer **out, int *n, rm_err *err);

/* Split "host:port" (IPv4 only). RM_EINVAL when malformed. host must hold >= 64 bytes. */
int rm_comm_split_addr(const char *addr, char *host, size_t hostcap, int *port, rm_err *err);
#endif
