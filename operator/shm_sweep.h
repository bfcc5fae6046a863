/* shm_sweep.h — the local runner's cleanup of shared-memory segments left by formations whose ranks
 * all died during shm setup (README "Shared memory between ranks on one host").
 *
 * Why here: the shm backend unlinks its segment as soon as every rank attached, and any rank whose
 * formation fails unlinks it too, so only one case leaks: every rank of the formation is killed
 * (SIGKILL) between rank 0's create and the last attach. No worker is left to clean up, but the
 * runner survives and knows everything the name is derived from (common/shm_name.h): the job
 * token, each closed round's epoch and its members' addresses in rank order (and nodes, for the
 * per-node groups of a hierarchical formation). It records each closed round it sees and, once the
 * rendezvous has moved past that epoch (the formation is dead: its members are told to rejoin),
 * unlinks its names; again on every later call for RM_SHM_SWEEP_KEEP_S (a rank 0 of the dead
 * formation that was still alive may create its segment after the first sweep), and all of them
 * when the run ends. Unlinking a name nobody uses is a harmless ENOENT.
 *
 * Ownership: the caller owns the rm_shm_sweep (zero-initialised, no resources); the state and token
 * are borrowed for the call. Single-threaded (the runner's loop). */
#ifndef RM_SHM_SWEEP_H
#define RM_SHM_SWEEP_H
#include "common/rdzv.h"
#include "common/shm_name.h"

#define RM_SHM_SWEEP_FORMATIONS 16 /* closed rounds remembered (oldest dropped first) */
#define RM_SHM_SWEEP_NAMES 8       /* names per round: the flat one plus per-node groups */
#define RM_SHM_SWEEP_KEEP_S 120.0

typedef struct rm_shm_sweep {
    struct {
        int epoch;
        int nnames;
        double superseded_at; /* 0 while the round's epoch is current */
        char names[RM_SHM_SWEEP_NAMES][RM_SHM_NAME_MAX];
    } f[RM_SHM_SWEEP_FORMATIONS];
    int n;
    unsigned long unlinked; /* segments actually removed (tests, logs) */
} rm_shm_sweep;

/* Record st's round when it is closed with 2+ members (once per epoch); unlink the names of every
 * recorded round older than st->epoch; forget those superseded more than RM_SHM_SWEEP_KEEP_S
 * before now (unix or monotonic seconds, the caller's choice, used consistently). */
void rm_shm_sweep_note(rm_shm_sweep *s, const char *token, const rm_rdzv_state *st, double now);
/* The run is over: unlink every recorded name and forget them. */
void rm_shm_sweep_all(rm_shm_sweep *s);
#endif
