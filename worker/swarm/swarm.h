/* swarm.h — many simulated workers in one process, speaking the real rendezvous protocol
 * (common/rdzv.h), to load a rendezvous at the size of a large job (docs/scale.md).
 *
 * Each simulated worker does what ringmaster-worker does, without training: join (long poll,
 * again on 202), the key-value bootstrap of its round (rank 0 publishes kv/EPOCH/bootstrap, the
 * others long-poll it), then a progress report every report_s seconds whose step advances every
 * step_s seconds (the report is the worker's heartbeat), and a re-join when a report answers
 * "rejoin". Faults: `kill` workers die (their connection closes) and `hang` workers stop talking
 * (their connection stays open) fault_at seconds after the first round trained; the next live
 * worker after each of them notices detect_s later, as its ring neighbour would, and re-joins with
 * lastEpoch = the broken epoch, which opens the next one. `slow` workers send their first join
 * slow_join_s late.
 *
 * Design: one thread, one epoll set, one non-blocking keep-alive connection per simulated worker
 * (HTTP/1.1, Content-Length replies), a timer heap for the steps and reports — no thread per
 * worker. On loopback every worker's connection leaves from its own source address
 * (127.100.X.Y), as pods would, so per-address limits of the server see N clients and the
 * ephemeral ports are not shared. The process raises its RLIMIT_NOFILE to the hard limit and
 * refuses a count that does not fit under it. Replies are scanned, not parsed into trees: only the
 * top-level "epoch", "rank", "worldSize", "action" are read; every round's ranks are checked to be
 * distinct and below worldSize, and a join that asked for no peer list must get the neighbours
 * ("next") and no "peers". */
#ifndef RM_WORKER_SWARM_H
#define RM_WORKER_SWARM_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_SWARM_MAX_COUNT 60000       /* simulated workers (source addresses 127.100.X.Y) */
#define RM_SWARM_MAX_REPLY (16u << 20) /* bytes of one reply (a join's peer list) */
#define RM_SWARM_MAX_EPOCHS 64         /* epochs whose rounds are measured */

typedef struct rm_swarm_cfg {
    const char *url;      /* "http://HOST:PORT" of the rendezvous (borrowed) */
    const char *job;      /* "ns/name" (borrowed) */
    const char *token;    /* borrowed */
    int count;            /* simulated workers, 1..RM_SWARM_MAX_COUNT */
    int id_base;          /* workerIds are id_base .. id_base+count-1 */
    double step_s;        /* seconds per training step (> 0) */
    double report_s;      /* seconds between progress reports (> 0) */
    bool kv;              /* the kv bootstrap after every round */
    bool peers;           /* joins ask for the whole peer list, as ringmaster-worker's do (default
                           * false: "peers": false, the ring neighbours only; rdzv.h) */
    bool hold;            /* reports ask to be held ("hold": true, docs/scale.md "Held reports"): a
                           * new epoch is learnt when it opens, not at the next report */
    int kill, hang, slow; /* how many workers die / hang / join late */
    double fault_at_s;    /* deaths and hangs: seconds after the first round trained */
    double detect_s;      /* how long the neighbour takes to notice */
    double slow_join_s;   /* how late the slow workers join */
    int rounds;           /* stop once this many rounds formed and trained (0: run until timeout) */
    double timeout_s;     /* give up after (> 0) */
    const volatile sig_atomic_t *cancel; /* borrowed; non-zero ends the run (NULL = none) */
} rm_swarm_cfg;

typedef struct rm_swarm_round {
    int epoch, world;
    double formed_s;  /* since the run started: the last member got its assignment */
    double trained_s; /* since the run started: the last member's first report answered "continue" */
} rm_swarm_round;

typedef struct rm_swarm_stats {
    int nrounds; /* rounds that formed and trained, in order */
    rm_swarm_round rounds[RM_SWARM_MAX_EPOCHS];
    double fault_s;                    /* since the run started: when the deaths/hangs happened (0 = none) */
    long requests, reconnects, errors; /* errors: unexpected replies and protocol violations */
    double wall_s, cpu_s;              /* the run's duration and this process's CPU time */
    char first_error[200];             /* the first error's description ("" = none) */
} rm_swarm_stats;

/* Fill *cfg with the defaults (step 0.1 s, report 1 s, kv on, detect 0.1 s, timeout 60 s). */
void rm_swarm_cfg_default(rm_swarm_cfg *cfg);
/* Run the swarm to the end (cfg->rounds reached, timeout, cancel). RM_OK when cfg->rounds rounds
 * formed and trained with no error (or rounds = 0 and the timeout ended it); RM_ETIMEDOUT when they
 * did not; RM_EPROTO when an error was counted; RM_EINVAL naming the field for a bad cfg, or when
 * count does not fit under the hard RLIMIT_NOFILE. *st (optional) is filled either way. */
int rm_swarm_run(const rm_swarm_cfg *cfg, rm_swarm_stats *st, rm_err *err);
/* `ringmaster-worker swarm [flags]` (argv[0] = "swarm"); also --serve, a rendezvous alone, and
 * --kubelet (rm_swarm_kubelet_main). */
int rm_swarm_main(int argc, char **argv);

/* The kubelet mode (swarm_kubelet.c; docs/scale.md, "The swarm as a kubelet runtime"): workers
 * come and go as kubesim's swarm runtime starts and deletes pods, one line each (common/podline.h). */
typedef struct rm_swarm_kubelet_cfg {
    double step_s, report_s; /* seconds per step, between reports (> 0) */
    bool kv;                 /* the kv bootstrap after every round */
    long long steps;         /* a job's steps when its start line gives none (>= 1) */
    int max;                 /* workers at once, 1..RM_SWARM_MAX_COUNT (less under RLIMIT_NOFILE) */
    const volatile sig_atomic_t *cancel; /* borrowed; non-zero ends the run (NULL = none) */
} rm_swarm_kubelet_cfg;

typedef struct rm_swarm_kubelet_stats {
    long started, exited, refused; /* workers started, ended (exit lines), starts refused */
    long requests, errors;         /* rendezvous requests sent; unexpected replies */
} rm_swarm_kubelet_stats;

/* Defaults: step 0.05 s, report 1 s, kv on, 100 steps, max RM_SWARM_MAX_COUNT. */
void rm_swarm_kubelet_cfg_default(rm_swarm_kubelet_cfg *cfg);
/* Serve lines from in_fd (start/stop/kill/hang) and write exit lines to out_fd until in_fd's end
 * or cfg->cancel; both fds are borrowed (made non-blocking) and stay open. A bad line is logged
 * naming its field, and a bad start is answered `exit KEY code=2`. RM_OK at the end of input;
 * RM_EINVAL naming the field for a bad cfg; RM_ENOMEM, RM_EIO. *st (optional) is filled. */
int rm_swarm_kubelet_run(const rm_swarm_kubelet_cfg *cfg, int in_fd, int out_fd, rm_swarm_kubelet_stats *st,
                         rm_err *err);
/* `ringmaster-worker swarm --kubelet [--step S] [--report S] [--steps N] [--no-kv] [--max N]`:
 * stdin and stdout are kubesim's pipes, the log goes to stderr. */
int rm_swarm_kubelet_main(int argc, char **argv);
#endif
