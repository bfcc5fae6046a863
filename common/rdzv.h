/* rdzv.h — the rendezvous service (embedded by `ringmaster run` and the operator) and its client
 * (used by ringmaster-worker).
 *
 * Protocol: HTTP/1.1 + JSON, every request carries "Authorization: Bearer <job token>"
 * (wrong/missing → 401, unknown job → 404). JOB is "namespace/name", URL-escaped as ns/name.
 *   POST /v1/jobs/NS/NAME/join   {"workerId":"3","addr":"127.0.0.5:40123","lastEpoch":E,
 *        "node":"node-a"}   (node optional: the worker's node name, NODE_NAME)
 *        long poll (server holds up to ~10 s) →
 *        200 {"epoch":E,"rank":r,"worldSize":n,"peers":[{"rank":0,"workerId":"0","addr":"...",
 *             "node":"node-a"},..]}   (a peer's "node" is "" when it sent none)
 *        "peers": false in the join asks for the reply without the peer list (~80 bytes a member:
 *        1.3 MB a reply at 16,384 workers, docs/scale.md): its ring neighbours instead,
 *        200 {"epoch":E,"worldSize":n,"prev":{peer of rank r-1 mod n},"next":{peer of r+1 mod n},
 *             "rank":r}   (what a worker that only talks to its neighbours needs)
 *        202 {"status":"waiting","epoch":E}  (round not closed yet: call again)
 *        409 {"status":"stop"}                (job finished/removed: exit)
 *   PUT  /v1/jobs/NS/NAME/kv/EPOCH/KEY   body = value (≤ 64 KiB)    → 204
 *   GET  /v1/jobs/NS/NAME/kv/EPOCH/KEY?wait=S  long poll ≤ S s      → 200 value | 404 | 410 (epoch gone)
 *   POST /v1/jobs/NS/NAME/report  {"workerId","epoch","rank","step","trainEpoch","loss",
 *        "samplesPerSecond","lastCheckpointStep","allreduceGBps","state":"training|done",
 *        "checkpointFailures":N,"checkpointError":"..." (both only while the last write failed),
 *        "tokensPerSecond" (language models only),
 *        "result":{"testAccuracy","trainLoss","steps","seconds","samplesPerSecond","valLoss",
 *        "tokensPerSecond", "model":{"uri","sha256","bytes"}, "exportError"} (the last four only
 *        when known; model and exportError from the rank that exported, docs/models-and-data.md),
 *        "evaluations":[{"epoch","step","testAccuracy","trainLoss","valLoss"},...] (the newest
 *        evaluations, at most RM_RDZV_MAX_EVALS: an epoch shorter than the report period is not
 *        lost; "step" and "valLoss" may be absent: a peer that predates them still parses)}
 *        → 200 {"epoch":CURRENT,"action":"continue"|"rejoin"|"stop"}
 *   GET  /v1/jobs/NS/NAME   → the job's rendezvous state (debugging)
 * Servers (docs/strategies.md#roles-names-environment): parameter servers register where they serve,
 *        workers read the list (a replaced server overwrites its entry; cluster names need no DNS):
 *   PUT  /v1/jobs/NS/NAME/servers/I   {"addr":"host:port"[, "checkpointFailures":N,
 *        "checkpointError":"..."]}, I in 0..RM_RDZV_MAX_SERVERS-1 → 204
 *   GET  /v1/jobs/NS/NAME/servers     → 200 {"servers":["host:port" | "" (not yet), ...]} (index order)
 *        A PUT may also carry the server's agreement record (worker/ps/ps_core.h
 *        rm_ps_agree_decide; docs/strategies.md#failure-semantics): "group":{"inc":"<hex>",
 *        "gen":"<hex>","settled":bool,"at":V,"version":V,"held":[V,...] (at most
 *        RM_RDZV_PS_HELD_MAX)}; the GET then also answers "groups":[{...} | null, ...] in index
 *        order (a PUT without one keeps the last record).
 * Polling joins: a join body may carry "wait": seconds (0..10, default 10) to hold it less; such
 *        a join's 202 also says {"joined":n,"settled":bool}: the workers in the open round so far,
 *        and whether `settle` seconds passed since the last of them joined. Workers that never
 *        talk to each other (parameter servers) re-join that way from their reporter while they
 *        go on training, and take a settled count as the workers still alive.
 * Held reports: a report body may carry "hold": true. On an event-loop server (rm_rdzv_serve) a
 *        report that would answer "continue" is then held for up to 1 s and answered "rejoin" the
 *        moment the job's epoch moves on ("stop" the moment it stops), else "continue" after the
 *        hold; a worker that reports again at once learns of a new round when it opens rather
 *        than at its next report (docs/scale.md, "Held reports"). A thread-per-connection server
 *        answers at once.
 *
 * Epochs start at 1; a worker that never trained sends lastEpoch 0 (or -1).
 * Rounds: epoch E's round opens empty; each join adds (workerId, addr). It closes when `desired`
 * workers joined, or — elastic — when at least `min` joined and `settle` seconds passed since the
 * last join. Ranks are assigned by ascending numeric workerId, so rank 0 is the lowest replica index
 * present. A closed round's members get the same answer on every join call for that epoch.
 * A join with lastEpoch == current closed epoch from a member means that member saw the group
 * break: the service opens epoch E+1 itself (fast recovery without waiting for the controller).
 * rm_rdzv_restart() lets the controller do the same when it sees a failure first; both are
 * idempotent per epoch (restarting from an epoch that is no longer current does nothing).
 * A report whose epoch is older than the current one is answered "rejoin". Request bodies capped at
 * 64 KiB. */
#ifndef RM_RDZV_H
#define RM_RDZV_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/evals.h"
#include "common/http.h"
#include "common/rm.h"

#define RM_RDZV_MAX_WORLD RM_MAX_WORLD /* common/rm.h */
#define RM_RDZV_MAX_KV 65536
#define RM_RDZV_MAX_SERVERS 64 /* parameter servers per job (RM_PS_MAX_SERVERS) */
/* A node name (a Kubernetes node name is a DNS subdomain: at most 253 characters; the rendezvous
 * accepts rm_rdzv_name_ok's characters). */
#define RM_RDZV_NODE_MAX 253
/* Evaluations kept per job (rank 0's, the newest ones; common/evals.h): what the controller copies
 * into status.progress.evaluations for a sweep's early stopping. */
#define RM_RDZV_MAX_EVALS 64
/* status.result.model's uri and an export's error message, as kept (longer ones are refused) */
#define RM_RDZV_MODEL_URI_MAX 1024
#define RM_RDZV_EXPORT_ERR_MAX 256
typedef rm_eval rm_rdzv_eval;
/* rm_eval_add with RM_RDZV_MAX_EVALS (common/evals.h: ascending step, the same step replaces,
 * when full the oldest makes room). Returns 1 if anything changed. */
int rm_rdzv_eval_add(rm_rdzv_eval *a, int *n, int epoch, int64_t step, double test_accuracy,
                     double train_loss, double val_loss);

/* The protocol's name rule, one definition for service and client: a job's namespace or name, a
 * workerId or a kv key is 1..len characters of [A-Za-z0-9._-] (len = the segment's length; the
 * callers add their own caps on it). */
bool rm_rdzv_name_ok(const char *s, size_t len);

/* ---------------- service ---------------- */
typedef struct rm_rdzv rm_rdzv;

rm_rdzv *rm_rdzv_new(void);
void rm_rdzv_free(rm_rdzv *r); /* wakes every long poll first; NULL ok */
/* Wake every long poll and answer every later request 503 at once (clients retry until their
 * timeout). Idempotent. Order to tear down: rm_rdzv_shutdown, rm_http_stop, rm_rdzv_free (free
 * waits for handlers still running, but a request arriving after free would touch freed memory). */
void rm_rdzv_shutdown(rm_rdzv *r);
/* Undo rm_rdzv_shutdown (jobs and rounds kept) once its HTTP server is stopped, so a process that
 * stops serving (an operator losing leadership) can serve again later. */
void rm_rdzv_resume(rm_rdzv *r);
/* Route for the embedding HTTP server: {"NULL method", "/v1/jobs/", prefix=1, rm_rdzv_handler, r}. */
int rm_rdzv_handler(const rm_http_req *req, rm_http_resp *resp, void *rdzv);
/* Convenience: start an HTTP server with only the rendezvous routes on bind ("127.0.0.1:0"): one
 * epoll thread, long polls parked. Its connection cap holds `workers` workers (each keeps one
 * keep-alive connection; out of 1..RM_RDZV_MAX_WORLD = RM_RDZV_MAX_WORLD) plus 256, at least 2,048
 * (the HTTP server's default); the process's
 * RLIMIT_NOFILE is raised toward its hard limit for them, and a limit that still holds fewer caps
 * the connections with a warning (docs/scale.md). rm_rdzv_serve sizes for RM_RDZV_MAX_WORLD. */
int rm_rdzv_serve_world(rm_rdzv *r, const char *bind, int workers, rm_http_server **out, rm_err *err);
int rm_rdzv_serve(rm_rdzv *r, const char *bind, rm_http_server **out, rm_err *err);

/* Register or update a job. token copied. desired = spec.replicas, min = spec.minReplicas. */
int rm_rdzv_job_set(rm_rdzv *r, const char *job, const char *token, int desired, int min,
                    double settle_seconds);
int rm_rdzv_job_remove(rm_rdzv *r, const char *job); /* later calls for it get 409 stop */
/* Mark finished (joins/reports answer stop) without forgetting results. */
int rm_rdzv_job_stop(rm_rdzv *r, const char *job);
/* Open epoch from_epoch+1 if from_epoch is current; *new_epoch gets the current epoch either way. */
int rm_rdzv_restart(rm_rdzv *r, const char *job, int from_epoch, int *new_epoch);

typedef struct rm_rdzv_member {
    char worker_id[32];
    char addr[64];
    int rank;             /* -1 while the round is open */
    int epoch;            /* epoch of the last join/report */
    double last_report;   /* unix seconds of the last report; 0 = none */
    double last_progress; /* unix seconds when step last increased */
    int64_t step, last_checkpoint_step;
    int train_epoch;
    double loss, samples_per_second, allreduce_gbps;
    double tokens_per_second;        /* language models: samples/s x tokens per row; 0 = none */
    bool done;                       /* reported state "done" */
    int checkpoint_failures;         /* consecutive failed checkpoint writes (0 = the last one succeeded) */
    char checkpoint_error[128];      /* the last failed write's message; "" when none */
    char node[RM_RDZV_NODE_MAX + 1]; /* the node the worker reported at its last join; "" = none */
} rm_rdzv_member;

#define RM_RDZV_STATE_MEMBERS 64 /* members a snapshot copies */
typedef struct rm_rdzv_state {
    int epoch;
    bool closed;    /* the epoch's round has closed (training) */
    int world_size; /* members of the closed round, else 0 */
    int nmembers;
    rm_rdzv_member members[RM_RDZV_STATE_MEMBERS]; /* the first (by workerId): local runs, status */
    double closed_at;                              /* unix seconds the current round closed */
    int trained_epoch; /* newest epoch whose closed round had a member report (0 = none) */
    double trained_at; /* unix seconds of that first report: the group training again */
    int trained_world; /* that round's world size */
    bool have_result;
    double test_accuracy, train_loss, seconds, samples_per_second;
    double val_loss, tokens_per_second; /* 0 = not reported (tokens/s: language models only) */
    int64_t steps;
    /* the exported model (status.result.model; "" / 0 = none) and why an export failed ("" = it
     * did not), from the rank that exported */
    char model_uri[RM_RDZV_MODEL_URI_MAX];
    char model_sha256[65];
    double model_bytes;
    char export_error[RM_RDZV_EXPORT_ERR_MAX];
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* ascending step */
    int nevals;
    /* the largest of every rank's reported memory (bytes; 0 = none reported): what one worker
     * needs, for status.result.memoryBytes / peakRssBytes */
    double mem_params, mem_grads, mem_optimizer, mem_activations, peak_rss;
    /* the parameter server with the most consecutive failed checkpoint writes (its last
     * registration's report): its index, the count (0 = none failing) and the last message */
    int ps_checkpoint_index, ps_checkpoint_failures;
    char ps_checkpoint_error[128];
    /* the data fetch's progress: the current epoch's kv key RM_RDZV_KV_DATA_FETCH ("BYTES TOTAL",
     * put by the fetching worker or init container); both 0 = none reported */
    uint64_t data_bytes, data_total;
} rm_rdzv_state;
/* The kv key a data fetch reports its progress under (docs/models-and-data.md, "Where data comes
 * from"): the value is "BYTES TOTAL" in decimal (TOTAL 0 = not known yet); the snapshot reads it. */
#define RM_RDZV_KV_DATA_FETCH "data-fetch"

/* Join evaluations so far, every job together: each join request and each wake-up of a held join
 * evaluates once. A round of N joins costs O(N) of them (docs/scale.md); tests check it. */
unsigned long rm_rdzv_join_evals(rm_rdzv *r);
/* Copy of the job's state (for the controller's observations). RM_ENOTFOUND if unknown. */
int rm_rdzv_snapshot(rm_rdzv *r, const char *job, rm_rdzv_state *out);
/* A hash of what a controller polls for (the epoch, whether its round closed, the world, the
 * member count, the result, and the step, state and epoch of the first 64 members): equal hashes
 * mean nothing it watches moved, without copying the state (the operator asks for every job twice
 * a second: docs/operator-scale.md). Like a snapshot, closes a round that is due. RM_ENOTFOUND if
 * unknown. */
int rm_rdzv_signature(rm_rdzv *r, const char *job, unsigned long long *sig);

/* ---------------- client (one per worker thread) ---------------- */
typedef struct rm_rdzv_client rm_rdzv_client;

typedef struct rm_rdzv_peer {
    int rank;
    char worker_id[32];
    char addr[64];
    char node[RM_RDZV_NODE_MAX + 1]; /* the node it runs on ("" = not reported) */
} rm_rdzv_peer;

/* Where the ranks of a round sit (docs/strategies.md#topology; pure, from the peers' node names).
 * Nodes are numbered in order of their lowest rank; a rank's local rank is its position among its
 * node's ranks in rank order, local_world their number. Ranks that reported no node ("") count as
 * one node "". */
typedef struct rm_rdzv_topo {
    int nnodes;     /* distinct nodes */
    int node_index; /* this rank's node, 0..nnodes-1 */
    int local_rank, local_world;
    bool uniform;             /* every node holds the same number of ranks */
    int min_local, max_local; /* fewest / most ranks on one node */
} rm_rdzv_topo;
/* Fill *out for `rank` of peers[0..world). RM_EINVAL on bad arguments, RM_ENOMEM. */
int rm_rdzv_topology(const rm_rdzv_peer *peers, int world, int rank, rm_rdzv_topo *out);
/* The node index of every rank (nodes numbered as above) into idx[0..world); returns nnodes, or
 * RM_EINVAL, RM_ENOMEM. O(world). */
int rm_rdzv_node_index(const rm_rdzv_peer *peers, int world, int *idx);
typedef struct rm_rdzv_round {
    int epoch, rank, world_size;
    rm_rdzv_peer *peers; /* owned, world_size entries, index = rank; rm_rdzv_round_free */
} rm_rdzv_round;
void rm_rdzv_round_free(rm_rdzv_round *r);

typedef struct rm_rdzv_report {
    int epoch, rank, train_epoch;
    int64_t step, last_checkpoint_step;
    double loss, samples_per_second, allreduce_gbps;
    double tokens_per_second; /* language models: samples_per_second x tokens per row; 0 = none */
    bool done;
    int checkpoint_failures;      /* consecutive failed checkpoint writes; 0 = last one ok */
    const char *checkpoint_error; /* borrowed; the last failure's message, NULL/"" when none */
    bool have_result;
    double test_accuracy, train_loss, seconds, result_samples_per_second;
    double val_loss;                 /* the final evaluation's; 0 = none */
    double result_tokens_per_second; /* the group's average; 0 = none (not a language model) */
    int64_t result_steps;
    /* with have_result, the rank that exported: the model written (borrowed; NULL = none) or
     * why the export failed (borrowed; NULL / "" = it did not) */
    const char *model_uri, *model_sha256;
    double model_bytes;
    const char *export_error;
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* every evaluation so far, ascending */
    int nevals;
    /* this rank's memory in bytes (ringmaster_worker_memory_bytes, peak RSS); sent when
     * peak_rss > 0 */
    double mem_params, mem_grads, mem_optimizer, mem_activations, peak_rss;
} rm_rdzv_report;

typedef enum { RM_RDZV_CONTINUE = 0, RM_RDZV_REJOIN, RM_RDZV_STOP } rm_rdzv_action;
/* The report reply's "action", as the service writes it and the client reads it. */
extern const char *const rm_rdzv_action_names[]; /* "continue", "rejoin", "stop", NULL */

/* url: "http://127.0.0.1:29400", job "ns/name", token one line (<= 255 bytes), worker_id of
 * rm_rdzv_name_ok's characters. All strings copied. Returns an owned client, or NULL with err
 * (may be NULL) saying why: RM_EINVAL naming the argument ("job", "token", "worker_id", "url")
 * for input the rendezvous would refuse, RM_ENOMEM. */
rm_rdzv_client *rm_rdzv_client_new(const char *url, const char *job, const char *token, const char *worker_id,
                                   rm_err *err);
void rm_rdzv_client_free(rm_rdzv_client *c);
/* The node this worker reports at every join (copied; NULL or "" = none). RM_EINVAL when the name
 * is longer than RM_RDZV_NODE_MAX or has characters outside rm_rdzv_name_ok's. */
int rm_rdzv_client_set_node(rm_rdzv_client *c, const char *node, rm_err *err);
/* Cancel flag (borrowed, e.g. the worker's SIGINT/SIGTERM flag; NULL = none): once *flag is
 * non-zero every call, long polls included, returns RM_ECANCELED within about a second. */
void rm_rdzv_client_set_cancel(rm_rdzv_client *c, const volatile sig_atomic_t *flag);
/* Block until the round closes or timeout_s passes (RM_ETIMEDOUT). RM_EAUTH on 401, RM_ECLOSED on
 * stop. my_addr is where this worker's ring listener accepts. */
int rm_rdzv_join(rm_rdzv_client *c, const char *my_addr, int last_epoch, double timeout_s, rm_rdzv_round *out,
                 rm_err *err);
/* Polling join (see "Polling joins"): one join held at most wait_s (0..10) seconds. RM_OK: the
 * round closed, out filled; RM_EAGAIN: still open, *joined / *settled (either may be NULL) say how
 * many joined it and whether they settled (for an epoch other than the last_epoch + 1 the worker
 * expects, out->epoch tells which). Errors as rm_rdzv_join. */
int rm_rdzv_join_poll(rm_rdzv_client *c, const char *my_addr, int last_epoch, double wait_s,
                      rm_rdzv_round *out, int *joined, bool *settled, rm_err *err);
/* Register parameter server `index` at addr ("host:port"). Retries no-answer for a few
 * seconds; RM_ENOTFOUND while the job is not registered yet (the caller retries). */
int rm_rdzv_server_register(rm_rdzv_client *c, int index, const char *addr, rm_err *err);
/* The same, also reporting the server's consecutive failed checkpoint writes (ckfail; 0 = the last
 * one succeeded) and the last one's message (ckerr, borrowed; NULL = none): the job's state carries
 * the worst server's (rm_rdzv_state.ps_checkpoint_*), as a worker's reports carry its own. */
int rm_rdzv_server_report(rm_rdzv_client *c, int index, const char *addr, int ckfail, const char *ckerr,
                          rm_err *err);
/* A parameter server's agreement record (rdzv.h "Servers"; worker/ps/ps_core.h rm_ps_member). */
#define RM_RDZV_PS_HELD_MAX 32
typedef struct rm_rdzv_ps_group {
    bool known; /* the server registered one */
    uint64_t inc, gen;
    bool settled;
    int64_t at, version;
    int nheld;
    int64_t held[RM_RDZV_PS_HELD_MAX];
} rm_rdzv_ps_group;
/* rm_rdzv_server_report with the agreement record g (borrowed; NULL: none sent). */
int rm_rdzv_server_put(rm_rdzv_client *c, int index, const char *addr, int ckfail, const char *ckerr,
                       const rm_rdzv_ps_group *g, rm_err *err);
/* Every server's agreement record: out[i] for i < *n (at most max; known false where server i sent
 * none). */
int rm_rdzv_server_groups(rm_rdzv_client *c, rm_rdzv_ps_group *out, int max, int *n, rm_err *err);
/* The servers' addresses: addrs[i] (cap bytes each) for i < *n (at most max; "" where server i has
 * not registered yet). */
int rm_rdzv_servers(rm_rdzv_client *c, char (*addrs)[128], int max, int *n, rm_err *err);
int rm_rdzv_kv_put(rm_rdzv_client *c, int epoch, const char *key, const void *val, size_t len, rm_err *err);
/* *val owned (free()). RM_ETIMEDOUT when not published within timeout_s; RM_EEPOCH if gone. */
int rm_rdzv_kv_get(rm_rdzv_client *c, int epoch, const char *key, double timeout_s, void **val, size_t *len,
                   rm_err *err);
int rm_rdzv_send_report(rm_rdzv_client *c, const rm_rdzv_report *rep, rm_rdzv_action *action,
                        int *current_epoch, rm_err *err);
#endif
