/* worker_env.h — the names of the worker launch contract: every environment variable a controller
 * (`ringmaster run`'s local runtime or the operator's pods) sets for a worker, and the well-known
 * ports. The controllers write them through operator/launch.h (one builder, rendered by each
 * runtime); the worker (worker/train.c, worker/bench.c) reads them by these same names, so a name
 * is spelled exactly once.
 *
 * Ownership: macros only; nothing to own. */
#ifndef RM_WORKER_ENV_H
#define RM_WORKER_ENV_H

/* ringmaster's own contract */
#define RM_ENV_ROLE "RINGMASTER_ROLE"             /* "worker" | "ps" (docs/strategies.md) */
#define RM_ENV_RENDEZVOUS "RINGMASTER_RENDEZVOUS" /* http://host:port of the rendezvous */
#define RM_ENV_JOB "RINGMASTER_JOB"               /* "namespace/name" */
#define RM_ENV_TOKEN "RINGMASTER_TOKEN"           /* rendezvous + ring handshake secret */
#define RM_ENV_WORKER_ID "RINGMASTER_WORKER_ID"   /* replica index, decimal */
#define RM_ENV_EPOCH "RINGMASTER_EPOCH"           /* epoch the worker was created for */
#define RM_ENV_CHECKPOINT_DIR "RINGMASTER_CHECKPOINT_DIR"
#define RM_ENV_CHECKPOINT_INTERVAL "RINGMASTER_CHECKPOINT_INTERVAL" /* spec.checkpoint.intervalSteps */
#define RM_ENV_CHECKPOINT_KEEP "RINGMASTER_CHECKPOINT_KEEP"         /* spec.checkpoint.keep */
#define RM_ENV_PROGRESS_DEADLINE "RINGMASTER_PROGRESS_DEADLINE"     /* seconds, %g */
#define RM_ENV_BIND_ADDR "RINGMASTER_BIND_ADDR"                     /* address the worker listens on */
#define RM_ENV_BACKEND "RINGMASTER_BACKEND"                         /* resolved: ring | nccl | mpi */
#define RM_ENV_TRAINING "RINGMASTER_TRAINING"                       /* spec.training as compact JSON */
/* spec.output (docs/models-and-data.md, "Exported models"), set when the spec has one: where
 * rank 0 exports the model at the end (a folder or s3://bucket/prefix/) and in which dtype */
#define RM_ENV_OUTPUT_URI "RINGMASTER_OUTPUT_URI"
#define RM_ENV_OUTPUT_DTYPE "RINGMASTER_OUTPUT_DTYPE" /* float32 | bfloat16 */
/* An s3:// export's multipart threshold and part size in bytes (the user's, for tests against a
 * small model: real S3 wants parts of 5 MiB or more; common/fetch.h, rm_upload_plan) */
#define RM_ENV_UPLOAD_MULTIPART_BYTES "RINGMASTER_UPLOAD_MULTIPART_BYTES"
#define RM_ENV_UPLOAD_PART_BYTES "RINGMASTER_UPLOAD_PART_BYTES"
/* parameter servers (docs/strategies.md#parameter-servers) */
#define RM_ENV_STRATEGY "RINGMASTER_STRATEGY"        /* "allreduce" | "parameterServer" */
#define RM_ENV_PS_SPEC "RINGMASTER_PARAMETER_SERVER" /* spec.parameterServer as compact JSON */
#define RM_ENV_PS_ADDRS "RINGMASTER_PS_ADDRS"        /* "host:port,..." index order */
#define RM_ENV_PS_INDEX "RINGMASTER_PS_INDEX"        /* a server's shard index (role ps) */
#define RM_PORT_PS 29600                             /* a server's port on a cluster */
/* pipeline stages (docs/strategies.md#pipeline-stages): spec.parallelism as compact JSON, set when
 * pipelineStages or microBatches is above 1. The worker derives its stage, data-parallel group
 * and neighbours from its rendezvous rank: rank r = d*P + p (worker/pipeline/pipeline_core.h). */
#define RM_ENV_PARALLELISM "RINGMASTER_PARALLELISM"
/* read by the worker, set by users (never by a controller) */
#define RM_ENV_FAULT "RINGMASTER_FAULT"
#define RM_ENV_DEVICE "RINGMASTER_DEVICE"
/* "1": a host's workers time-slice its GPUs (LOCAL_RANK % visible) instead of one each (worker/gpu.h) */
#define RM_ENV_GPU_SHARED "RINGMASTER_GPU_SHARED"
/* CPUs a worker's kernels spread over (1..64; the user's: a template may set it). Unset: the pod's
 * CPU quota, else the machine's CPUs divided among LOCAL_WORLD_SIZE workers. */
#define RM_ENV_THREADS "RINGMASTER_THREADS"
#define RM_ENV_RESUME "RINGMASTER_RESUME" /* "1" | "if-present": continue an earlier run */
/* The folder remote data is fetched into (docs/models-and-data.md, "Where data comes from");
 * the user's. Unset: $XDG_CACHE_HOME/ringmaster/data or ~/.cache/ringmaster/data. */
#define RM_ENV_DATA_CACHE "RINGMASTER_DATA_CACHE"
/* Where a worker that ends on bad data writes its one-line reason (Kubernetes' terminationMessagePath
 * convention; `ringmaster run` sets a file per worker). Unset: /dev/termination-log when it exists. */
#define RM_ENV_TERMINATION_LOG "RINGMASTER_TERMINATION_LOG"
/* A worker's exit code when its data cannot be fetched or read (bad data, a refused or failed
 * fetch): the controllers fail the job with reason DataError instead of restarting it
 * (operator/reconcile.h, R5e). 1 stays "runtime failure", 2 "bad usage". */
#define RM_WORKER_EXIT_DATA_ERROR 3
/* Steps between the worker's "progress" log lines (1..10^9; default 100; the user's). */
#define RM_ENV_LOG_EVERY "RINGMASTER_LOG_EVERY"

/* torchrun / PyTorch conventions, so foreign images run unchanged */
#define RM_ENV_RANK "RANK"
#define RM_ENV_WORLD_SIZE "WORLD_SIZE"
#define RM_ENV_LOCAL_RANK "LOCAL_RANK"
#define RM_ENV_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define RM_ENV_NODE_NAME "NODE_NAME"
#define RM_ENV_MASTER_ADDR "MASTER_ADDR"
#define RM_ENV_MASTER_PORT "MASTER_PORT"
#define RM_ENV_PET_NNODES "PET_NNODES"
#define RM_ENV_PET_NODE_RANK "PET_NODE_RANK"
#define RM_ENV_PET_NPROC_PER_NODE "PET_NPROC_PER_NODE"
#define RM_ENV_PET_MASTER_ADDR "PET_MASTER_ADDR"
#define RM_ENV_PET_MASTER_PORT "PET_MASTER_PORT"
/* torchrun's elastic rendezvous (docs/torchrun.md): set only when the template runs torchrun */
#define RM_ENV_PET_RDZV_BACKEND "PET_RDZV_BACKEND"   /* "c10d" */
#define RM_ENV_PET_RDZV_ENDPOINT "PET_RDZV_ENDPOINT" /* the job's store pod, "<job>-c10d.<job>:29401" */
#define RM_ENV_PET_RDZV_ID "PET_RDZV_ID"             /* the job's uid: one per incarnation */
#define RM_ENV_PET_RDZV_CONF "PET_RDZV_CONF"         /* "is_host=false": no agent hosts the store */
#define RM_ENV_PET_MAX_RESTARTS "PET_MAX_RESTARTS"   /* spec.restartPolicy.maxRestarts */

/* ports (RM_STR(RM_PORT_MASTER) is "29500") */
#define RM_STR_(x) #x
#define RM_STR(x) RM_STR_(x)
#define RM_PORT_MASTER 29500        /* MASTER_PORT, PET_MASTER_PORT, the Service's "master" port */
#define RM_PORT_WORKER_METRICS 9090 /* a worker's /metrics and /healthz */
#define RM_PORT_RENDEZVOUS 29400    /* the operator's rendezvous service */
/* a torchrun job's c10d store (docs/torchrun.md): not torch's default 29400, which is the operator's
 * rendezvous port, so the two never clash where pods share a host's network (hostNetwork, kubesim) */
#define RM_PORT_C10D 29401
/* Shared-memory collectives for ranks on one host (worker/comm/comm_shm.c): "0" = always the
 * TCP ring; "1" = use shm whenever every rank advertised the same host (needed inside a pod, which
 * must then share the node's IPC namespace: hostIPC, or hostPath /dev/shm + hostNetwork); unset =
 * automatic outside Kubernetes (ringmaster run), off inside a pod. */
#define RM_ENV_SHM "RINGMASTER_SHM"
/* GPU defaults (docs/strategies.md#topology): set on workers that request nvidia.com/gpu, unless the
 * pod template's container already sets the name (the user's value wins). NCCL_SOCKET_IFNAME is the pod
 * network's interface: a pod's primary interface is eth0 under every CNI plugin the operator supports
 * (the Kubernetes network model gives each pod one interface in its own network namespace), so NCCL
 * never picks lo or a docker bridge; override it in the template for multi-NIC (Multus) pods. */
#define RM_ENV_NCCL_SOCKET_IFNAME "NCCL_SOCKET_IFNAME"
#define RM_ENV_NCCL_ASYNC_ERROR_HANDLING "NCCL_ASYNC_ERROR_HANDLING"
#define RM_ENV_TORCH_NCCL_ASYNC_ERROR_HANDLING "TORCH_NCCL_ASYNC_ERROR_HANDLING"
#define RM_ENV_NCCL_DEBUG "NCCL_DEBUG"
#define RM_POD_NET_IFNAME "eth0"
#endif
