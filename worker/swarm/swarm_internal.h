/* swarm_internal.h — what the swarm's two modes share and nothing else uses: swarm.c (the engine:
 * simulated workers' connections, timers and the rendezvous protocol, and the fixed run of
 * rm_swarm_run) and swarm_kubelet.c (the kubelet mode, whose workers come and go as kubesim starts
 * and deletes pods, across many jobs: docs/scale.md, "The swarm as a kubelet runtime"). Include it
 * only from those; the public API is swarm.h.
 *
 * Ownership: a swarm owns its worker array, heap and epoll set (the mode that made them frees
 * them); a worker's out/in buffers are its own; a worker borrows its sw_job, which the mode keeps
 * alive while any worker points at it. */
#ifndef RM_WORKER_SWARM_INTERNAL_H
#define RM_WORKER_SWARM_INTERNAL_H
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "worker/swarm/swarm.h"

enum { OP_NONE, OP_JOIN, OP_KV_PUT, OP_KV_GET, OP_REPORT };
enum { T_NONE, T_JOIN, T_REPORT, T_RETRY, T_NOTICE };
enum { W_LIVE, W_DEAD, W_HUNG, W_DONE, W_FREE };

/* Where a worker's job is served, and what its workers share. */
typedef struct sw_job {
    struct sockaddr_in dst;
    bool spread; /* loopback: each worker's connection leaves from its own address */
    char host[64], path[280], auth[300];
    long long high_step; /* the highest step its workers reported: a re-formed round resumes there,
                          * as workers restoring their last checkpoint would */
} sw_job;

typedef struct sw_worker {
    int fd;         /* -1 = no connection */
    int heap;       /* index in the timer heap, -1 = no timer */
    double due;     /* the timer's monotonic time */
    uint8_t state;  /* W_* */
    uint8_t op;     /* the request in flight (OP_NONE = none) */
    uint8_t timer;  /* what the timer does */
    bool connected; /* the connect finished */
    bool notice;    /* a neighbour died: re-join as soon as the request in flight ends */
    bool reported;  /* sent a report in the current epoch that answered "continue" */
    bool final;     /* the report in flight is the last one ("done", with the result) */
    int epoch, rank, world;
    int last_epoch; /* the lastEpoch of the next join */
    int tries;      /* failed sends of the request in flight */
    int wid;        /* its workerId */
    uint32_t addr;  /* its address (host order): the join's addr, and the source address when spread */
    double backoff;
    double train_start;
    double sent_at;  /* when the report in flight went out */
    long long step0; /* the step training (re)started from */
    long long steps; /* after this many steps it reports "done" and ends (0 = never) */
    sw_job *job;     /* borrowed */
    char *out;       /* the request (OUT_CAP bytes, allocated at the first request) */
    size_t out_len, out_off;
    char *in; /* the reply so far (grown up to RM_SWARM_MAX_REPLY) */
    size_t in_len, in_cap;
} sw_worker;

typedef struct ep_round {
    int world;
    int assigned, trained;
    double formed, trained_at; /* seconds since start */
    uint8_t *ranks;            /* rank seen (world bytes) */
    bool counted;
} ep_round;

typedef struct swarm swarm;
struct swarm {
    const rm_swarm_cfg *cfg; /* count bounds the worker array and a round's worldSize */
    rm_swarm_stats *st;
    sw_worker *w;
    int *heap, nheap;
    int ep;
    double t0;
    sw_job job; /* the fixed run's one job */
    bool first_trained;
    bool faulted;
    bool rounds_on;  /* the fixed run: rounds are counted and their ranks checked (one job) */
    bool log_errors; /* the kubelet mode: every error is logged as it happens */
    /* A worker ended on its own (code 0: the rendezvous said stop, or its last report went out);
     * NULL = nothing to tell. Called from inside the engine: it must not free the worker. */
    void (*on_end)(swarm *s, int id, int code);
    void *ud;
    ep_round rounds[RM_SWARM_MAX_EPOCHS + 1];
};

/* Parse url ("http://A.B.C.D:PORT") and fill j's address, host, path (for job "ns/name") and
 * auth (token). false with err naming "url" or "job". */
bool sw_job_init(sw_job *j, const char *url, const char *job, const char *token, rm_err *err);
/* Worker id's timer: due at the monotonic time due (replacing any it had), or none. */
void sw_timer_set(swarm *s, int id, int what, double due);
void sw_timer_cancel(swarm *s, int id);
/* Close worker w's connection (if any). */
void sw_conn_close(swarm *s, sw_worker *w);
/* Progress on worker id's connection (its epoll event): connect, write, read, replies. */
void sw_drive(swarm *s, int id);
/* Fire every timer due by now. */
void sw_fire_timers(swarm *s, double now);
#endif
