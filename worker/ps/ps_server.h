/* ps_server.h — `ringmaster-worker ps`: one parameter server (docs/strategies.md#parameter-servers).
 *
 * The server holds shard `index` of S (worker/ps/ps_core.h's partition of the model's flat parameter
 * vector) with its optimizer state, and serves the ops of worker/ps/ps_wire.h to the job's workers
 * over TCP, authenticated with the job token. Synchronous mode applies step k once N-b workers
 * pushed it (averaging exactly those, dropping and counting later ones); asynchronous mode
 * (Downpour) applies every push on arrival with the job's optimizer (Adagrad, as Downpour did),
 * records its staleness, and holds a worker more than stalenessBound steps ahead of the slowest
 * live one. Server 0 also hands out the global batch budget in async mode (DRAW).
 *
 * Threads: an acceptor; one thread per connection, each bounded: handshake within RM_PS_HANDSHAKE_S,
 * a request within the idle bound, every wait for a version or for the slowest worker within the
 * comm timeout. Connections in their handshake follow the ring's rule for strangers (common/admit.h:
 * capped per source and in all, never counted against members); at most RM_PS_MAX_CONNS
 * connections that proved the token are members, and one more is told FULL. State lives under one
 * mutex; a member's buffers are allocated once when it proves the token, so steps allocate nothing.
 * The main thread writes checkpoints (every checkpoint interval of versions, atomic and
 * checksummed, in <checkpoint dir>/ps-<index>/) from a snapshot taken under the mutex, and on
 * SIGTERM writes a last one and exits 0. A start restores the newest valid checkpoint of its shard
 * (params, optimizer state, version, draw counter).
 *
 * Settings: the worker launch contract (common/worker_env.h): RINGMASTER_PS_INDEX,
 * RINGMASTER_PS_ADDRS (this server listens on the port of its own entry, on RINGMASTER_BIND_ADDR),
 * RINGMASTER_PARAMETER_SERVER, RINGMASTER_TRAINING, RINGMASTER_TOKEN, WORLD_SIZE,
 * RINGMASTER_CHECKPOINT_*, RINGMASTER_JOB, RINGMASTER_FAULT (exit:role=ps:index=I:step=V).
 *
 * Ownership: everything is created and freed inside rm_ps_server_main. */
#ifndef RM_WORKER_PS_SERVER_H
#define RM_WORKER_PS_SERVER_H

#include "common/trainingjob.h"

#define RM_PS_MAX_CONNS RM_PS_MAX_MEMBERS /* the validator holds workers to RM_PS_JOB_MAX_WORKERS */
#define RM_PS_DEFAULT_PORT 29600

/* argv[0] == "ps". Exit code: 0 (SIGTERM after its checkpoint), 1 runtime failure, 2 settings. */
int rm_ps_server_main(int argc, char **argv);
#endif
