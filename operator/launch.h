/* launch.h — the worker launch contract, written once.
 *
 * rm_launch_build turns (job, replica index, epoch, placement) into the complete list of
 * settings a worker gets: its arguments (after the binary) and its environment (names in
 * common/worker_env.h). The two runtimes only render that list: operator/local.c as argv/envp for
 * fork/exec, operator/kube/builders.c as a container's args/env. What legitimately differs between
 * them — where the rendezvous is, how the token and the bind address reach the process, how many
 * workers share a node — is the placement, an input, never a branch inside a runtime.
 *
 * Values come in three kinds: a literal, a Secret reference (the value names a Secret whose key
 * "token" holds it; the local runtime always passes literals) and a Downward-API field (the value
 * is a fieldPath such as "status.podIP").
 *
 * Ownership: rm_launch owns every string it holds; rm_launch_free releases them (NULL and a
 * zeroed struct are fine). Names are static strings. */
#ifndef RM_LAUNCH_H
#define RM_LAUNCH_H
#include <stdbool.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"

#define RM_LAUNCH_MAX_ENV 56
/* spec.checkpoint.path's default (common/trainingjob.c): a volume path on a cluster */
#define RM_DEFAULT_CHECKPOINT_PATH "/checkpoints"
#define RM_LAUNCH_MAX_ARGS 24

typedef enum {
    RM_LAUNCH_LITERAL = 0,
    RM_LAUNCH_SECRET, /* value = Secret name; key "token" */
    RM_LAUNCH_FIELD,  /* value = Downward-API fieldPath */
} rm_launch_src;

typedef struct rm_launch_var {
    const char *name; /* static (common/worker_env.h) */
    char *value;      /* owned */
    rm_launch_src src;
    bool user_wins; /* a default (the GPU/NCCL settings): a value the user already
                          * set (template env, the runner's environment) is kept, not replaced */
} rm_launch_var;

typedef struct rm_launch {
    rm_launch_var env[RM_LAUNCH_MAX_ENV];
    int nenv;
    char *args[RM_LAUNCH_MAX_ARGS]; /* owned; after the binary: "train", "--metrics-addr", ... */
    int nargs;
} rm_launch;

/* Where the worker runs: everything a runtime decides. Borrowed during rm_launch_build. */
typedef struct rm_launch_placement {
    const char *rdzv_url;       /* "http://127.0.0.1:PORT" */
    const char *token;          /* literal token; NULL = from the Secret "<job>-rendezvous" */
    const char *bind_addr;      /* literal; NULL = the pod IP (fieldRef status.podIP) */
    const char *node_name;      /* literal; NULL = the pod's node (fieldRef spec.nodeName) */
    const char *master_host;    /* MASTER_ADDR; NULL = "<job>-worker-0.<job>" (headless Service) */
    const char *checkpoint_dir; /* NULL = rm_launch_checkpoint_dir(job) */
    const char *metrics_host;   /* host part of --metrics-addr; NULL = "$(RINGMASTER_BIND_ADDR)" */
    int metrics_port;           /* < 0 = RM_PORT_WORKER_METRICS; 0 = any free port */
    int workers_per_node;       /* 1 (a pod per node slot): LOCAL_RANK 0, LOCAL_WORLD_SIZE 1;
                                  * > 1 (every worker on this machine): LOCAL_RANK = index */
    int gpus;                   /* GPUs each worker gets (for backend auto); 0 = CPU. > 0 also
                                  * adds the NCCL defaults (common/worker_env.h), user_wins */
    const char *net_ifname;     /* NCCL_SOCKET_IFNAME with GPUs; NULL = RM_POD_NET_IFNAME */
    const char *log_format;     /* "text" | "json" passed as --log-format; NULL = not passed */
    /* spec.strategy parameterServer: the servers' "host:port,..." in index order; NULL = the
     * cluster's "<job>-ps-<i>.<job>:29600" (headless Service names) */
    const char *ps_addrs;
    /* the template runs torchrun (rm_launch_runs_torchrun): PET_NNODES "min:max" and the c10d
     * rendezvous settings (docs/torchrun.md) */
    bool torchrun;
    const char *c10d_host; /* the c10d store's host; NULL = "<job>-c10d.<job>" (its pod's DNS name) */
} rm_launch_placement;

/* A torchrun job's c10d store pod is "<job>" RM_C10D_SUFFIX (docs/torchrun.md). */
#define RM_C10D_SUFFIX "-c10d"

/* Does the pod template's worker container (the one named "worker", else the first) run torchrun?
 * Yes when its command + args start with torchrun (any folder), run `-m torch.distributed.run`, or
 * hand a shell (`sh -c`, `bash -c`) a script that names either as a word. When it does and python
 * is not NULL, python gets the interpreter the c10d store runs with: the template's own for
 * `python -m torch.distributed.run`, else "python3". template is borrowed; NULL is "no". */
bool rm_launch_runs_torchrun(const cJSON *pod_template, char *python, size_t cap);

/* Build the settings of worker `index` created for `epoch`. job must be defaulted (rm_tj_defaults).
 * Returns RM_OK, RM_EINVAL (bad argument, err says which), RM_ENOMEM, RM_ETOOBIG (more settings
 * than the arrays hold: a programming error). On error *out is freed and zeroed. */
int rm_launch_build(const rm_tj *job, int index, int epoch, const rm_launch_placement *p, rm_launch *out,
                    rm_err *err);
void rm_launch_free(rm_launch *l);
/* The settings of parameter server `index` (spec.strategy parameterServer): `ringmaster-worker ps`
 * with RINGMASTER_ROLE=ps, RINGMASTER_PS_INDEX and what a server needs of the contract (token,
 * job, bind address, checkpoints, spec.training, spec.parameterServer, the servers' addresses,
 * WORLD_SIZE = spec.replicas). Errors as rm_launch_build. */
int rm_launch_build_ps(const rm_tj *job, int index, const rm_launch_placement *p, rm_launch *out,
                       rm_err *err);
/* The servers' address list for placement p into buf ("h:p,..."); returns buf. */
const char *rm_launch_ps_addrs(const rm_tj *job, const rm_launch_placement *p, char *buf, size_t cap);

/* The variable `name`, or NULL. Borrowed from l. */
const rm_launch_var *rm_launch_find(const rm_launch *l, const char *name);
/* Is `name` one of the variables a controller sets (so a user's copy of it is overridden)? torchrun's
 * PET_RDZV_* and PET_MAX_RESTARTS are not: they override a user's copy only where they are set. */
bool rm_launch_is_ours(const char *name);

/* The backend a worker runs: rm_backend_resolve of spec.backend for the placement's GPUs. */
rm_backend rm_launch_backend(const rm_tj *job, int gpus);
/* Default checkpoint folder on a cluster: spec.checkpoint.path (default /checkpoints)/<ns>/<name>.
 * Writes into buf (cap bytes, truncated). Returns buf. */
const char *rm_launch_checkpoint_dir(const rm_tj *job, char *buf, size_t cap);
#endif
