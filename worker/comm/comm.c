/* comm.c — the backend table (name -> rm_comm_ops) and helpers shared by the backends and their
 * callers: dtype names, the rendezvous listener, "host:port" lists for static mode.
 *
 * The NCCL table lives in worker/comm/cuda/comm_nccl.c (CUDA builds) or worker/comm/nocuda/comm_nccl_stub.c
 * (CPU builds); the __has_include guard only matters for a CUDA build from a tree without the GPU
 * file, where "nccl" answers NULL. The ring backend's listener (rm_ring_listener) is in
 * comm_ring.c with the handshake it runs. */
#include "worker/comm/comm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/worker_env.h"
#include "worker/comm/net.h"

#if RM_HAVE_CUDA
#if defined(__has_include)
#if __has_include("worker/comm/cuda/comm_nccl.c")
#define RM_COMM_HAVE_NCCL_FILE 1
#endif
#endif
#else
#define RM_COMM_HAVE_NCCL_FILE 1 /* the nocuda stub */
#endif

size_t rm_dtype_size(rm_dtype dt)
{
    switch (dt) {
    case RM_DT_F32:
        return 4;
    case RM_DT_BF16:
        return 2;
    case RM_DT_F16:
        return 2;
    }
    return 0;
}

const char *rm_dtype_name(rm_dtype dt)
{
    switch (dt) {
    case RM_DT_F32:
        return "float";
    case RM_DT_BF16:
        return "bfloat16";
    case RM_DT_F16:
        return "half";
    }
    return "unknown";
}

const char *rm_redop_name(rm_redop op)
{
    switch (op) {
    case RM_OP_SUM:
        return "sum";
    case RM_OP_AVG:
        return "avg";
    }
    return "unknown";
}

const rm_comm_ops *rm_comm_backend(const char *name)
{
    if (!name)
        return NULL;
    if (strcmp(name, "ring") == 0)
        return rm_comm_ring_ops();
    if (strcmp(name, "local") == 0)
        return rm_comm_local_ops();
    if (strcmp(name, "mpi") == 0)
        return rm_comm_mpi_ops();
    if (strcmp(name, "shm") == 0)
        return rm_comm_shm_ops();
    if (strcmp(name, "hier") == 0)
        return rm_comm_hier_ops();
    if (strcmp(name, "nccl") == 0) {
#ifdef RM_COMM_HAVE_NCCL_FILE
        return rm_comm_nccl_ops();
#else
        return NULL;
#endif
    }
    return NULL;
}

bool rm_comm_shm_allowed(void)
{
    const char *e = getenv(RM_ENV_SHM);
    if (e && !strcmp(e, "0"))
        return false;
    if (!(e && !strcmp(e, "1")) && getenv("KUBERNETES_SERVICE_HOST"))
        return false;
    return true;
}

bool rm_comm_shm_wanted(const rm_rdzv_peer *peers, int world)
{
    if (!rm_comm_shm_allowed())
        return false;
    if (!peers || world < 2 || world > RM_COMM_SHM_MAX_RANKS)
        return false;
    const char *c0 = strrchr(peers[0].addr, ':');
    if (!c0)
        return false;
    size_t hl = (size_t)(c0 - peers[0].addr);
    for (int q = 1; q < world; q++) {
        const char *cq = strrchr(peers[q].addr, ':');
        if (!cq || (size_t)(cq - peers[q].addr) != hl || memcmp(peers[q].addr, peers[0].addr, hl))
            return false;
    }
    return true;
}

int rm_comm_init_or_ring(const rm_comm_ops **ops, const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    rm_err e = {0};
    int rc = (*ops)->init(cfg, out, &e);
    if (rc != RM_ENOSPC || *ops != rm_comm_shm_ops()) {
        if (rc && err)
            *err = e;
        return rc;
    }
    rm_warn("shared memory unusable, falling back to the TCP ring (give /dev/shm more room: a memory "
            "emptyDir in a pod) group=%u world=%d err=\"%s\"",
            (unsigned)cfg->group, cfg->world_size, e.msg);
    *ops = rm_comm_ring_ops();
    return (*ops)->init(cfg, out, err);
}

int rm_comm_under_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
           getenv("PMIX_RANK") != NULL;
}

int rm_comm_listen(const char *host, int *fd, int *port, rm_err *err)
{
    if (!fd || !port)
        return rm_errf(err, RM_EINVAL, "rm_comm_listen: NULL output");
    return rm_net_listen(host, 0, 128, fd, port, err);
}

int rm_comm_split_addr(const char *addr, char *host, size_t hostcap, int *port, rm_err *err)
{
    if (!addr)
        return rm_errf(err, RM_EINVAL, "empty address");
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= hostcap)
        return rm_errf(err, RM_EINVAL, "address \"%.64s\" is not host:port", addr);
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return rm_errf(err, RM_EINVAL, "address \"%.64s\": bad port", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *port = (int)p;
    return RM_OK;
}

int rm_comm_parse_peers(const char *list, rm_rdzv_peer **out, int *n, rm_err *err)
{
    if (!list || !*list || !out || !n)
        return rm_errf(err, RM_EINVAL, "--peers: empty list");
    int cnt = 1;
    for (const char *p = list; *p; p++)
        cnt += *p == ',';
    if (cnt > RM_RDZV_MAX_WORLD)
        return rm_errf(err, RM_EINVAL, "--peers: more than %d entries", RM_RDZV_MAX_WORLD);
    rm_rdzv_peer *v = calloc((size_t)cnt, sizeof *v);
    if (!v)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    const char *p = list;
    for (int i = 0; i < cnt; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char host[64];
        int port;
        if (len == 0 || len >= sizeof v[i].addr) {
            free(v);
            return rm_errf(err, RM_EINVAL, "--peers: entry %d is empty or too long", i);
        }
        memcpy(v[i].addr, p, len);
        v[i].addr[len] = '\0';
        int rc = rm_comm_split_addr(v[i].addr, host, sizeof host, &port, err);
        if (rc) {
            free(v);
            return rc;
        }
        v[i].rank = i;
        snprintf(v[i].worker_id, sizeof v[i].worker_id, "%d", i);
        p = e ? e + 1 : p + len;
    }
    *out = v;
    *n = cnt;
    return RM_OK;
}
