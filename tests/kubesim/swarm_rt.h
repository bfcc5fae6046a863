/* swarm_rt.h — kubesim's swarm runtime (`kubesim --runtime swarm`): worker pods run inside one
 * long-running `ringmaster-worker swarm --kubelet` process instead of a process each, so the
 * operator can be driven at full size with real rendezvous traffic (docs/scale.md, "The swarm as
 * a kubelet runtime"). The kubelet keeps owning the lifecycle and the pod status exactly as for
 * processes; this file only knows the swarm process and its line protocol (common/podline.h):
 * a start line per worker container, stop when the pod is deleted, kill/hang faults, and the
 * exit lines that come back.
 *
 * Which containers: those whose resolved env carries the operator's worker contract
 * (RINGMASTER_RENDEZVOUS, RINGMASTER_JOB, RINGMASTER_TOKEN, RINGMASTER_WORKER_ID, and
 * RINGMASTER_ROLE "worker" or unset); every other container (a parameter server, a c10d store, a
 * plain pod) runs as a process as under --runtime process.
 *
 * Threads: every call is made with the kubelet's mutex held (the kubelet thread, and the admin
 * endpoint through ks_kubelet_swarm_fault). Ownership: ks_swarm_new returns an owned handle
 * (ks_swarm_free, NULL ok); every string passed in is borrowed. */
#ifndef KS_SWARM_RT_H
#define KS_SWARM_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "common/podline.h"

typedef struct ks_swarm ks_swarm;

/* program: the ringmaster-worker binary; args: extra flags for `swarm --kubelet`, separated by
 * spaces (KUBESIM_SWARM_ARGS; NULL = none); log: the file its stderr is appended to. The process is
 * started at the first ks_swarm_start, and again after it died. NULL when out of memory. */
ks_swarm *ks_swarm_new(const char *program, const char *args, const char *log);
/* Close its stdin (the swarm ends at its end), wait up to 2 s, then SIGKILL its group; reap it. */
void ks_swarm_free(ks_swarm *sw);

/* Does a container with this env (n "K=V" strings) run in the swarm? */
bool ks_swarm_wants(char *const *env, size_t n);
/* Hand container `key`'s worker to the swarm: the start line from env (n "K=V" strings), ip (the
 * pod's address) and the job's training.maxSteps. RM_OK; RM_EINVAL with msg naming the variable
 * the line protocol refuses; RM_EIO with msg when the swarm cannot be started or is stuck. */
int ks_swarm_start(ks_swarm *sw, const char *key, char *const *env, size_t n, const char *ip, char *msg,
                   size_t mcap);
/* A stop, kill (code) or hang line for key. false when no swarm runs (its workers ended with it). */
bool ks_swarm_send(ks_swarm *sw, rm_podline_verb verb, const char *key, int code);
/* Write what waits, read what came back: fn(ud, key, code) for each exit line. Returns true when
 * the swarm process has gone since the last call (its stdout closed): every worker it held is
 * gone with it and the caller ends them. */
typedef void (*ks_swarm_exit_fn)(void *ud, const char *key, int code);
bool ks_swarm_poll(ks_swarm *sw, ks_swarm_exit_fn fn, void *ud);
/* The kubelet reaped pid: true when it was the swarm's (then ks_swarm_poll reports it gone). */
bool ks_swarm_reaped(ks_swarm *sw, pid_t pid);
#endif
