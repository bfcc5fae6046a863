/* faults.h — fault injection for tests: env RINGMASTER_FAULT, e.g.
 *   "exit:rank=1:step=300"                 rank 1 dies abruptly (_exit(137)) when it reaches step 300
 *   "hang:rank=2:step=100"                 rank 2 stops making progress (no steps, reports, beats)
 *   "exit:rank=1:step=300;exit:rank=2:step=900"   several, separated by ';'
 *   "exit:role=ps:index=0:step=500"        parameter server 0 dies at version 500 (>= 1: the
 *                                          updates it applied)
 *   "hang:role=ps:index=1:step=40"         parameter server 1 stops serving at version 40: it
 *                                          holds its state's lock, answers no request and
 *                                          /healthz says stalled once workers wait on it
 *   "slow:rank=1:factor=4[:step=S][:until=U]"  a straggler: from step S (default 0) to step U
 *                                          (default: the end) rank 1's every step takes factor
 *                                          times as long (it sleeps (factor-1)x its compute time)
 *   "exit:rank=3:step=120:node=lost"       rank 3 dies and its node is gone for good: before
 *                                          exiting it leaves DIR/.fault-lost-worker-<worker id>,
 *                                          and `ringmaster run` cannot create that replica again
 *                                          (an elastic job shrinks to minReplicas instead)
 * Keys may come in any order; exit/hang need rank (or role=ps with index) and step; slow needs
 * rank and factor; a missing key is named in the error. Off unless set. A slow fault has no "fired" marker: it is a range.
 *
 * Once per job: before a fault fires, a marker file DIR/.fault-<i>-fired is created (O_EXCL,
 * fsync'd) in the job's checkpoint folder, and a fault whose marker exists never fires again, so a
 * replacement worker that resumes from an earlier checkpoint does not die at the same step.
 * Without a folder the "fired" flag lives only in memory.
 *
 * Ownership: rm_faults is a plain value (no heap); the dir string is copied. */
#ifndef RM_WORKER_FAULTS_H
#define RM_WORKER_FAULTS_H
#include <stdbool.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_FAULTS_MAX 16

typedef enum { RM_FAULT_EXIT = 0, RM_FAULT_HANG, RM_FAULT_SLOW } rm_fault_kind;
/* role=ps:index=I selects parameter server I: its faults carry this pseudo-rank, which no worker
 * has (ranks are < RM_RDZV_MAX_WORLD). */
#define RM_FAULT_PS_RANK(i) ((1 << 24) + (i))

typedef struct rm_fault {
    rm_fault_kind kind;
    int rank;
    int64_t step;
    bool fired;
    double factor; /* slow: >= 1 */
    int64_t until; /* slow: last step slowed (exclusive); 0 = to the end */
    bool lost;     /* exit with node=lost: the replica cannot be recreated */
} rm_fault;

typedef struct rm_faults {
    rm_fault f[RM_FAULTS_MAX];
    int n;
    char dir[1024]; /* marker folder; "" = none */
} rm_faults;

/* Parse spec (NULL or "" = no faults). RM_EINVAL with a message naming the bad part. */
int rm_faults_parse(const char *spec, rm_faults *out, rm_err *err);
/* Against the job: refuse a fault that can never fire - role=ps on a job without parameter servers,
 * a server index >= spec.parameterServer.replicas, a rank >= the most workers the job may have
 * (spec.replicas/maxReplicas). RM_EINVAL with a message naming the fault (1-based) and the field.
 * `ringmaster run` calls it before it starts anything. */
struct rm_tj;
int rm_faults_check_job(const rm_faults *fs, const struct rm_tj *job, rm_err *err);
/* Where markers live (usually the checkpoint dir); created if missing when a fault fires. */
void rm_faults_set_dir(rm_faults *fs, const char *dir);
/* The fault due for (rank, step), if any and not fired yet (neither in memory nor by marker). It
 * is marked fired (marker written) before it is returned, so the caller just acts on it. */
const rm_fault *rm_faults_due(rm_faults *fs, int rank, int64_t step);
const char *rm_fault_kind_name(rm_fault_kind k);
/* node=lost: the worker marks its replica index (worker id) lost in dir (fsync'd) before it
 * exits; the local runner asks before creating a replica. 0 / -1 (errno). */
int rm_faults_mark_lost(const char *dir, const char *worker_id);
bool rm_faults_index_lost(const char *dir, int index);
/* The slow-down factor for (rank, step): the largest of the slow faults covering it, 1 if none. */
double rm_faults_slow(const rm_faults *fs, int rank, int64_t step);
#endif
