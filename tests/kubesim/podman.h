/* podman.h — kubesim's container runtime (`kubesim --runtime podman`): turns a pod's container spec
 * into a `podman run` command line that the kubelet forks in place of the process it runs in the
 * default process mode. The kubelet keeps owning the lifecycle (the `podman run` client's exit is the
 * container's exit: it stays attached, forwards SIGTERM, and its stdout/stderr are the container's
 * log); this file only knows podman.
 *
 * What maps (the pod spec → podman flags): image (never pulled: --pull=never), command → --entrypoint,
 * args → after the image, env (already resolved by the kubelet, all sources) → -e, pod hostname →
 * --hostname, securityContext runAsUser/runAsGroup (pod, overridden by container) → --user,
 * readOnlyRootFilesystem → --read-only (no implicit tmpfs: a pod gets only the volumes it declares),
 * allowPrivilegeEscalation:false → no-new-privileges, capabilities drop/add, resources.limits
 * memory/cpu → --memory/--cpus, volumes → -v/--tmpfs (emptyDir, emptyDir{medium: Memory}, hostPath,
 * secret and configMap as files, persistentVolumeClaim as a folder per claim under the data dir,
 * the service account token as /var/run/secrets/kubernetes.io/serviceaccount), the cluster's names
 * → a shared hosts file mounted as /etc/hosts. Network: the host's (--network host): each pod
 * still has its own 127.0.x.y address, as in process mode.
 *
 * Ownership: every string passed in is borrowed; ks_podman_argv returns a NULL-terminated array the
 * caller frees with ks_podman_argv_free. */
#ifndef KS_PODMAN_H
#define KS_PODMAN_H

#include <stddef.h>
#include <sys/types.h>
#include "tests/kubesim/kubesim.h"

typedef struct ks_podman_pod {
    const char *ns, *name, *uid, *ip;
    const char *poddir; /* the pod's folder (volumes are made under it) */
    const char *hosts;  /* the hosts file to mount as /etc/hosts, or NULL */
} ks_podman_pod;

/* argv for `podman ... run ...` of container `ctr` of `pod` (the stored Pod JSON), named `cname`;
 * env is "K=V" strings (n of them). NULL on error with a message (the kubelet's waiting reason). */
char **ks_podman_argv(ks_server *s, const cJSON *pod, const cJSON *ctr, const ks_podman_pod *pp,
                      const char *cname, char *const *env, size_t nenv, char *msg, size_t mcap);
void ks_podman_argv_free(char **argv);

/* 1 when `image` is in podman's local store, 0 when not (the kubelet reports ErrImageNeverPull). */
int ks_podman_image_exists(const char *image);

/* `podman kill --signal SIG NAME` in the background (reaped by the kubelet's waitpid loop). */
void ks_podman_kill(const char *cname, int sig);

/* Removes every container this kubesim started (label io.kubesim.instance=<pid>); waits for it. */
void ks_podman_cleanup(void);

/* The OCI runtime podman uses (env KUBESIM_PODMAN_RUNTIME, default runc: crun refuses hybrid cgroups). */
const char *ks_podman_runtime(void);

#endif
