/* rdzv_internal.h — what the rendezvous service's files share (common/rdzv.c: jobs, rounds, kv
 * and the controller's API; common/rdzv_http.c: routing, long polls and the waiter thread;
 * common/rdzv_report.c: reports and parameter servers). Not a public header: only those files
 * include it. The protocol and the public API are in common/rdzv.h.
 *
 * Ownership: the service (struct rm_rdzv) owns its jobs; a job owns its members, kv entries,
 * servers and its round's shared reply body (one reference); the waiter list owns its records.
 * Every function below is called with r->mu held, and no pointer into a job is kept past it. */
#ifndef RM_RDZV_INTERNAL_H
#define RM_RDZV_INTERNAL_H
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv.h"
#include "common/kmap.h"

#define JOIN_POLL_S 10.0   /* how long a join is held before "202 waiting" */
#define KV_WAIT_MAX_S 30.0 /* cap on ?wait= */
#define KV_MAX_KEYS 256    /* keys per epoch */
#define KV_MAX_KEY 128
#define MAX_TOMBSTONES 256
#define JOB_NAME_MAX 255
#define REPORT_HOLD_S 1.0 /* a held report ("hold": true) is answered after at most this */
#define TOKEN_MAX 255

/* A reply body many replies share (the closed round's peer list), reference-counted: the job holds
 * one reference, every reply in flight one more, released by the HTTP server once sent. */
typedef struct shared_body {
    atomic_int refs;
    size_t len;
    char data[];
} shared_body;
typedef struct kv_ent {
    struct kv_ent *next;
    char *val;
    size_t len;
    char key[KV_MAX_KEY + 1];
} kv_ent;

/* A node name, kept once per job however many of its members report it (a node runs several
 * workers): the job's node table owns it, members hold references (docs/scale.md, "Memory per
 * worker"). */
typedef struct node_name {
    struct node_name *next; /* in its hash bucket */
    unsigned hash, refs;
    char s[];
} node_name;

/* A member: rm_rdzv_member's fields (rdzv_member_view), less what most workers never have:
 * the node is a reference into the job's node table and the checkpoint error is allocated only
 * while a write fails, so a record is ~200 bytes where the public view's inline buffers are
 * ~600 (docs/scale.md). */
typedef struct member {
    char worker_id[32];
    char addr[64];
    int rank;  /* in the closed round, else -1 */
    int epoch; /* of the last join/report */
    int round; /* epoch whose round this worker joined (0 = none) */
    int train_epoch;
    double last_report, last_progress; /* unix seconds; 0 = none */
    int64_t step, last_checkpoint_step;
    double loss, samples_per_second, allreduce_gbps, tokens_per_second;
    bool done;
    int checkpoint_failures;
    char *checkpoint_error; /* owned; NULL = none */
    node_name *node;        /* a reference (rdzv_node_ref); NULL = none reported */
} member;

typedef struct ps_server {
    char addr[64]; /* "" = not registered */
    int ckfail;    /* its last reported consecutive checkpoint failures */
    char ckerr[128];
    rm_rdzv_ps_group group; /* its agreement record */
} ps_server;

typedef struct job {
    struct job *next;
    char name[JOB_NAME_MAX + 1];
    char token[TOKEN_MAX + 1];
    int desired, min;
    double settle;
    int epoch;
    unsigned long incarnation; /* r->incarnations at its (re-)registration: who a held report meant */
    bool closed, stopped, removed;
    int world;
    double closed_at;  /* unix seconds */
    int trained_epoch; /* newest epoch whose closed round had a member report (0 = none) */
    double trained_at; /* unix seconds of that epoch's first such report */
    int trained_world; /* that round's world size */
    double last_join;  /* monotonic seconds of the last change to the open round */
    member **mem;      /* sorted by workerId (numeric first), at most RM_RDZV_MAX_WORLD; owned */
    int nmem, capmem;
    int nround;              /* members whose round is the current epoch (what rdzv_round_count was) */
    shared_body *round_body; /* the closed round's reply less the rank (round_body_get); one ref */
    int round_body_epoch;    /* the epoch round_body was built for (0 = none) */
    member **ranked;         /* the closed round's members by rank (world entries; rdzv_http.c) */
    node_name **nodes;       /* the members' node names: a hash table of nnodes_cap buckets */
    unsigned nnodes, nnodes_cap;
    int ranked_epoch; /* the epoch ranked was built for (0 = none) */
    kv_ent *kv;       /* current epoch's kv only */
    int nkv;
    bool have_result;
    double test_accuracy, train_loss, seconds, samples_per_second;
    double val_loss, tokens_per_second; /* 0 = not reported */
    int64_t steps;
    char model_uri[RM_RDZV_MODEL_URI_MAX], model_sha256[65], export_error[RM_RDZV_EXPORT_ERR_MAX];
    double model_bytes;
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* rank 0's, ascending step; kept across rounds */
    int nevals;
    double memmax[5]; /* largest reported: params, grads, optimizer, activations, peak RSS */
    /* parameter servers by index, [0, nsrv) — grown by a registration (a job without servers holds
     * none: the operator keeps a job entry per TrainingJob, docs/operator-scale.md) */
    struct ps_server *srv;
    int nsrv;
} job;

/* A parked long poll (an event-loop server: rm_http_park): what its handler's loop would have kept
 * on its stack. The waiter thread evaluates it on every wake-up, as that loop would. Its strings
 * live in str[], sized to them (one is held per waiting worker: docs/scale.md). */
enum { WAIT_JOIN, WAIT_KV };
typedef struct waiter {
    struct waiter *next;
    rm_http_parked *t;
    int kind; /* WAIT_* */
    double deadline;
    double wake;     /* evaluate again at the latest then (monotonic) */
    const char *job; /* into str */
    /* a join */
    const char *wid, *addr, *node; /* into str */
    int last_epoch, seen_epoch;
    bool peers; /* the reply carries the peer list ("peers": true, the default) */
    double wait_s;
    /* a kv read */
    int epoch;
    const char *key; /* into str */
    char str[];
} waiter;

/* A held report (an event-loop server, "hold": true in a report that would answer "continue"):
 * answered with the job's action as soon as its epoch moves on or it stops, else at its deadline,
 * so a worker learns of a new round without waiting for its next report (docs/scale.md). One FIFO
 * for all jobs: every hold is REPORT_HOLD_S, so deadlines are in order. */
typedef struct held_report {
    struct held_report *next;
    rm_http_parked *t;
    double deadline;
    int epoch;
    unsigned long incarnation; /* its job's: a job removed and registered again is another job */
    char job[];
} held_report;

struct rm_rdzv {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    waiter *waiters; /* parked long polls */
    bool wthread_on; /* the waiter thread runs */
    bool wquit;      /* it is asked to end */
    bool wdirty;     /* something changed since it last evaluated the waiters */
    double wnext;    /* when the waiter thread wakes next (monotonic) */
    pthread_t wthread;
    held_report *held;          /* held reports, oldest first (the waiter thread answers them) */
    held_report **held_tail;    /* where the next is linked (valid while held is not NULL) */
    bool hflush;                /* an epoch moved or a job stopped: answer the held reports it concerns */
    unsigned long join_evals;   /* join evaluations so far (rm_rdzv_join_evals) */
    job *jobs;                  /* in creation order */
    job **jobs_tail;            /* where the next job is linked (&r->jobs when there is none) */
    rm_kmap by_name;            /* job name -> job (its name is the key: rm_kmap_put_ref) */
    int ntomb;                  /* removed jobs kept as tombstones */
    unsigned long incarnations; /* job registrations so far (job.incarnation) */
    bool shutting;
    int inflight; /* handlers running */
};

/* ---- common/rdzv.c ---- */
/* Drop one reference to a shared body (b may be NULL); the last frees it. */
void rdzv_shared_body_release(void *b);
/* Every state change a long poll may wait for: wake the held handlers and the waiter thread. */
void rdzv_wake_all(rm_rdzv *r);
/* The whole NUL-terminated s is a name (rm_rdzv_name_ok) of at most max chars. */
bool rdzv_str_ok(const char *s, size_t max);
/* "NS/NAME", at most JOB_NAME_MAX chars in all. */
bool rdzv_job_name_ok(const char *s);
/* "host:port" of a member's or server's address characters, shorter than rm_rdzv_member.addr. */
bool rdzv_addr_ok(const char *s);
bool rdzv_is_digits(const char *s);
/* A json.h getter failed for real (an absent optional field is RM_ENOTFOUND, not a failure). */
bool rdzv_bad(int rc);
/* The job of that name, tombstones included; NULL if unknown. Borrowed until r->mu is released. */
job *rdzv_job_find(rm_rdzv *r, const char *name);
kv_ent *rdzv_kv_find(job *j, const char *key);
/* The member's index in j->mem, or -1. */
int rdzv_member_find(const job *j, const char *wid);
/* Insert in workerId order; NULL when the job is full or on ENOMEM (see rdzv.c). */
member *rdzv_member_add(job *j, const char *wid);
/* m's node name ("" = none reported). */
static inline const char *rdzv_member_node(const member *m)
{
    return m->node ? m->node->s : "";
}
/* Point m at node s ("" = none): a reference into j's node table, which keeps one copy of each
 * name. RM_ENOMEM leaves m as it was. */
int rdzv_member_set_node(job *j, member *m, const char *s);
/* Keep m's checkpoint error (copied, cut to rm_rdzv_member's size; NULL or "" = none). RM_ENOMEM
 * leaves m without one. */
int rdzv_member_set_ckerr(member *m, const char *s);
/* The public view of m. */
void rdzv_member_view(const member *m, rm_rdzv_member *out);
/* Members whose round is the current epoch. */
static inline int rdzv_round_count(const job *j)
{
    return j->nround;
}
enum { J_ASSIGNED, J_WAIT, J_STOP, J_FULL };
/* One evaluation of a join (J_*); safe to repeat after every wake-up (rdzv.c's file comment). */
int rdzv_join_eval(rm_rdzv *r, job *j, const char *wid, const char *addr, const char *node, int last_epoch,
                   double now);

/* ---- common/rdzv_http.c ---- */
int rdzv_reply_stop(rm_http_resp *resp);
/* Reply with o (owned: deleted here; NULL = out of memory, a 500). */
int rdzv_reply_cjson(rm_http_resp *resp, int status, cJSON *o);

/* ---- common/rdzv_report.c ---- */
int rdzv_handle_report(rm_rdzv *r, job *j, const rm_http_req *req, rm_http_resp *resp);
/* A report's action for a worker in epoch `epoch` of j (NULL: gone): stop, rejoin or continue. */
rm_rdzv_action rdzv_report_action(const job *j, int epoch);
/* The report's answer for that worker: 200 {"epoch":CURRENT (0 for a removed job),"action":...}. */
int rdzv_reply_report(rm_http_resp *resp, const job *j, int epoch);
/* Park req as a held report of job j at its epoch (rdzv_http.c): true when parked (the waiter thread
 * answers it), false on a thread-per-connection server or out of memory (answer it now). */
bool rdzv_hold_report(rm_rdzv *r, const job *j, const rm_http_req *req);
/* An epoch moved or a job stopped: the waiter thread answers the held reports that concern it. */
void rdzv_held_flush(rm_rdzv *r);
int rdzv_handle_server_put(job *j, const char *idx, const rm_http_req *req, rm_http_resp *resp);
int rdzv_handle_servers_get(const job *j, rm_http_resp *resp);
#endif
