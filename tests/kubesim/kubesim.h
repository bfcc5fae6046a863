/* kubesim.h — the shared context of the Kubernetes API double (see tests/kubesim/README.md and
 * docs/kube-api-double.md for the rules it follows).
 *
 * Design: one process-wide context (ks_server) owns everything: the kind registry, one hash table
 * per kind (core and events.k8s.io Events share one), the global resourceVersion counter, the
 * watch event ring, faults, the request log and the kubelet. Stored objects are immutable,
 * reference-counted versions (ks_obj) carrying their serialized JSON, so a GET or a watch event
 * is served without copying the tree, and the event ring shares versions with the tables.
 * Locking: one rwlock (srv->lock) guards kinds, tables, rv and the ring; writers hold it
 * exclusively for the short commit step only. Watch streams sleep on a per-table condition
 * variable and are woken by commits to their table. */
#ifndef KS_KUBESIM_H
#define KS_KUBESIM_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "common/rm.h"
#include "common/clock.h"
#include "common/http.h"

#define KS_MAX_BODY (3u * 1024 * 1024)         /* request bodies above this → 413 (apiserver: 3 MiB) */
#define KS_RING_CAP 10000                      /* watch window in events */
#define KS_RING_MAX_BYTES (256u * 1024 * 1024) /* ... and in bytes of JSON held by those events */
#define KS_NODE_NAME "kubesim-node"

/* ---- immutable object versions ------------------------------------------------------------- */
typedef struct ks_obj {
    atomic_int ref;
    cJSON *j;   /* the object (never modified after ks_obj_new) */
    char *json; /* compact serialization */
    size_t len;
    uint64_t rv;
} ks_obj;

/* Takes ownership of j (also on failure). Returns owned ref (count 1) or NULL. */
ks_obj *ks_obj_new(cJSON *j, uint64_t rv);
ks_obj *ks_obj_ref(ks_obj *o);
void ks_obj_unref(ks_obj *o); /* NULL ok */

/* ---- kinds ---------------------------------------------------------------------------------- */
enum ks_type {
    KS_T_GENERIC = 0,
    KS_T_POD,
    KS_T_EVENT,
    KS_T_EVENT_NEW,
    KS_T_NAMESPACE,
    KS_T_CRD,
    KS_T_CR,
    KS_T_SERVICE,
    KS_T_SECRET,
    KS_T_CONFIGMAP,
    KS_T_LEASE,
    KS_T_NODE,
    KS_T_DEPLOYMENT,
};

typedef struct ks_entry {
    char *key; /* "ns/name" or "/name" */
    ks_obj *obj;
    struct ks_entry *next;
} ks_entry;

/* A sleeping watch stream: woken only by commits to its table in its namespace (or any
 * namespace when ns is ""), so a thousand idle watches elsewhere cost nothing per write. */
typedef struct ks_waiter {
    pthread_cond_t cond; /* waits with the table's mu */
    int signaled;
    char ns[128];
    const struct ks_lsel *ls; /* the stream's selectors (borrowed; NULL = all): a commit whose */
    const struct ks_fsel *fs; /* new and old states both miss them does not wake the stream */
    struct ks_waiter *prev, *next;
} ks_waiter;

typedef struct ks_table {
    ks_entry **b;
    size_t nb, count;
    uint64_t last_rv;   /* rv of the newest commit to this table (under srv->lock) */
    pthread_mutex_t mu; /* guards waiters */
    ks_waiter *waiters;
    atomic_ullong seq; /* bumped on every commit */
} ks_table;

typedef struct ks_kind {
    char group[128], version[64], resource[64], singular[64], kind[64], list_kind[80];
    char short_names[4][32];
    int nshort;
    char categories[4][32];
    int ncat;
    bool namespaced, served, has_status, has_scale;
    char scale_spec[128], scale_status[128], scale_selector[128];
    int type;           /* enum ks_type */
    ks_table *tab;      /* shared for the two Event kinds */
    cJSON *schema;      /* CR: openAPIV3Schema (owned), else NULL */
    cJSON *columns;     /* CR: additionalPrinterColumns (owned), else NULL */
    bool storage;       /* CR: the storage version (objects are stored with its apiVersion) */
    char crd_name[256]; /* CR: owning CRD */
} ks_kind;

/* "apps/v1" or "v1" for the core group into buf. */
const char *ks_kind_apiversion(const ks_kind *k, char *buf, size_t cap);

/* ---- events ---------------------------------------------------------------------------------- */
enum { KS_EV_ADDED = 0, KS_EV_MODIFIED, KS_EV_DELETED };
typedef struct ks_event {
    uint64_t rv;
    int type;
    ks_table *tab;
    ks_obj *obj; /* new state (DELETED: last state stamped with the deletion rv) */
    ks_obj *old; /* previous state or NULL (for selector transitions, rule F4) */
} ks_event;

/* ---- faults and the request log ------------------------------------------------------------ */
typedef struct ks_faults {
    pthread_mutex_t mu;
    int fail_n, fail_code; /* fail the next N matching requests with code */
    char fail_verb[24], fail_resource[64];
    int watch_410_n; /* answer the next N watches with a 410 ERROR event */
    int delay_ms;    /* delay every response */
    bool node_not_ready;
    unsigned node_lost;    /* bit i: opts.nodes[i] lost alone (node-not-ready?node=NAME) */
    bool sched_hold;       /* the schedulers bind nothing (tests line pods up first) */
    atomic_uint watch_gen; /* drop-watches bumps it; streams end when it changes */
} ks_faults;

typedef struct ks_reqrec {
    char method[8], verb[24], group[128], version[64], resource[64], sub[32], ns[128], name[256];
    char path[256];
    char ctype[64]; /* request Content-Type (patch flavour) */
    char ua[128];   /* User-Agent */
    int code;
} ks_reqrec;

struct ks_kubelet;
struct ks_snapshots;
typedef struct ks_gc ks_gc;

/* --node NAME:cpu=8,memory=16Gi,gpu=4,pods=110: a node with allocatable resources (milli-units;
 * a resource not given is 0, pods defaults to 110). With none, the one kubesim-node without
 * resources and the kubelet's bind-everything behaviour stay (sched.c). */
#define KS_MAX_NODES 16
typedef struct ks_node_spec {
    char name[64];
    int64_t cpu, memory, gpu, pods;
    /* --nodes N (tests/kubesim/netns.sh): the node's network namespace (a name under /run/netns)
     * and its address there; both empty for a plain --node */
    char netns[64], addr[48];
} ks_node_spec;

typedef struct ks_opts {
    char addr[128];
    char kubeconfig_out[512];
    char data_dir[512];
    char image_map[32][2][256];
    int nimage_map;
    bool no_kubelet;
    bool podman;             /* --runtime podman: pods' containers run with podman (podman.h) */
    bool swarm;              /* --runtime swarm: worker containers run in one swarm process (swarm_rt.h) */
    char swarm_program[512]; /* --swarm-program; "" = the --image-map program of ringmaster/worker */
    ks_node_spec nodes[KS_MAX_NODES];
    int nnodes;
    char cosched_scheduler[128]; /* the coscheduling profile's schedulerName */
    int nodes_netns;             /* --nodes N: nodes[0..N) are network namespaces (netns.sh) */
    char fabric_netns[64];       /* --nodes: netns.sh's fabric namespace (bridge ports vhI), or "" */
} ks_opts;

typedef struct ks_server {
    ks_opts opts;
    pthread_rwlock_t lock;
    uint64_t rv;
    ks_kind **kinds;
    size_t nkinds, capkinds;
    cJSON *graveyard; /* retired CRD schemas/columns (freed at exit) */
    ks_event *ring;   /* KS_RING_CAP slots */
    size_t ring_start, ring_len;
    uint64_t ring_dropped_rv; /* newest rv that fell out of the window (0: none) */
    size_t ring_bytes;        /* JSON bytes referenced by the ring's events */
    ks_faults faults;
    pthread_mutex_t reqmu;
    ks_reqrec *reqlog;
    size_t reqlog_cap, reqlog_len, reqlog_start;
    struct ks_snapshots *snaps;
    struct ks_kubelet *kubelet;
    rm_http_server *http;
    atomic_int port;   /* set after the listener starts; read by /api */
    ks_kind *core[16]; /* built-in kinds by enum ks_type, fixed after init */
    atomic_bool stopping;
    pthread_mutex_t ctlmu; /* main loop requests (restart) */
    pthread_cond_t ctlcond;
    int ctl_restart; /* 1 keep state, 2 fresh */
    pthread_t gc_thread;
    bool gc_started;
    atomic_bool gc_dirty; /* the collector has queued work (gc.c) */
    ks_gc *gc;            /* its indexes and queues */
    uint32_t name_seed;
    atomic_ullong uid_seq;
    atomic_ullong ip_seq;
} ks_server;

/* ---- store (store.c) ----------------------------------------------------------------------- */
int ks_server_init(ks_server *s, const ks_opts *o);
void ks_server_fini(ks_server *s);
void ks_store_reset(ks_server *s); /* drop every object and CRD kind, re-seed namespaces */
ks_kind *ks_kind_add(ks_server *s, const ks_kind *proto); /* caller holds wrlock; reuses a slot */
/* Lookups: caller holds the lock (read or write). */
ks_kind *ks_kind_find(ks_server *s, const char *group, const char *version, const char *resource);
ks_kind *ks_kind_by_kind(ks_server *s, const char *group, const char *kind);
ks_obj *ks_table_get(ks_table *t, const char *ns, const char *name); /* borrowed */
/* Commit a new version (or deletion when obj==NULL) under wrlock: bumps rv, stamps
 * metadata.resourceVersion, appends the event. Takes ownership of obj. *out (optional) gets a
 * borrowed pointer to the stored version (valid while the lock is held). */
int ks_commit(ks_server *s, ks_kind *k, const char *ns, const char *name, cJSON *obj, int evtype,
              ks_obj **out);
/* Snapshot of a table's objects sorted by key (refs taken; ks_objs_free). Caller holds a lock. */
ks_obj **ks_table_list(ks_table *t, const char *ns, size_t *n);
void ks_objs_free(ks_obj **v, size_t n);
/* Wake the waiters a commit concerns: ns NULL/"" = every namespace; newj NULL = ignore selectors. */
void ks_wake(ks_table *t, const char *ns, const cJSON *newj, const cJSON *oldj);
void ks_waiter_add(ks_table *t, ks_waiter *w, const char *ns);
void ks_waiter_del(ks_table *t, ks_waiter *w);
/* Sleep until signaled or timeout_ms; clears the signal; returns whether it was signaled. */
bool ks_waiter_wait(ks_table *t, ks_waiter *w, int timeout_ms);
/* Still unsignaled since the last arm? (then no commit concerned this waiter) */
bool ks_waiter_quiet(ks_table *t, ks_waiter *w);
void ks_waiter_arm(ks_table *t, ks_waiter *w); /* clear the signal before a scan */
void ks_new_uid(ks_server *s, char out[40]);
void ks_now_rfc3339(char out[32]);
const char *ks_sget(const cJSON *o, const char *key); /* o[key] when a string, else NULL (borrowed) */
void ks_gen_name(ks_server *s, const char *prefix, char *out, size_t cap);

/* ---- request handling (api.c) -------------------------------------------------------------- */
int ks_handle(const rm_http_req *req, rm_http_resp *resp, void *ud);
/* Status error body into resp. */
/* 200-style JSON reply: takes ownership of o (NULL ok → RM_ENOMEM); RM_OK or RM_ENOMEM. */
int ks_reply_json(rm_http_resp *resp, int code, cJSON *o);
int ks_status(rm_http_resp *resp, int code, const char *reason, const char *name, const char *group,
              const char *kind, const char *fmt, ...) RM_PRINTF(7, 8);

/* Internal writes used by the kubelet and the garbage collector. The callback edits a private
 * copy of the object and returns 1 to commit, 0 to leave it, <0 on error. Returns RM_ENOTFOUND
 * when the object is gone. Runs the generic update rules (finalizer emptied → delete). */
typedef int (*ks_mutate_fn)(cJSON *obj, void *ud);
int ks_internal_update(ks_server *s, ks_kind *k, const char *ns, const char *name, ks_mutate_fn fn, void *ud);
/* Delete as DELETE with propagationPolicy (NULL = Background) would; grace<0 = default. */
int ks_internal_delete(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *propagation,
                       int grace);
/* Create obj (taken) in ns as a POST would (name or generateName); RM_ECONFLICT if it exists. */
int ks_internal_create(ks_server *s, ks_kind *k, const char *ns, cJSON *obj);
/* Final removal (kubelet after processes exited; ignores grace). */
int ks_internal_remove(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *uid);
ks_kind *ks_core_kind(ks_server *s, int type);
/* ---- scheduling (sched.c) ---- */
/* One pass of the default scheduler and the volcano / coscheduling gang binders (only with
 * --node). Called from the kubelet's loop. */
void ks_sched_tick(ks_server *s);
/* Bind an unbound pod (a patch callback's body): spec.nodeName = node and a PodScheduled=True
 * condition. 0 (nothing changed) when already bound or, with skip_deleting, being deleted. */
int ks_pod_bind(cJSON *pod, const char *node, bool skip_deleting);
/* Is node a node this kubesim's kubelet runs pods for? */
bool ks_node_ours(const ks_server *s, const char *node);
/* Parse "NAME:cpu=8,memory=16Gi,gpu=4,pods=110"; false with msg on error. */
bool ks_node_parse(const char *arg, ks_node_spec *out, char *msg, size_t cap);
/* --nodes N: gives nodes[0..n) the namespaces and addresses in env (KUBESIM_NETNS_NODES, written
 * by tests/kubesim/netns.sh: "NETNS=IPV4 NETNS=IPV4 ..."). With no --node, nodes node-0..node-(n-1)
 * with cpu=32,memory=128Gi,pods=110 are made; with --node, their count must be n. check_paths:
 * each /run/netns/NETNS must exist. Returns false with msg (naming --nodes) on any mismatch. */
bool ks_nodes_netns(ks_opts *o, int n, const char *env, bool check_paths, char *msg, size_t cap);
/* The node spec named node (NULL when none or not ours). */
const ks_node_spec *ks_node_find(const ks_server *s, const char *node);
/* Is opts.nodes[i] lost alone (faults.node_lost)? Takes faults.mu. */
bool ks_node_lost(ks_server *s, int i); /* pods, namespaces...; caller needs no lock */

/* ---- garbage collector (gc.c) --------------------------------------------------------------- */
/* The collector is incremental: ks_commit reports every change (ks_gc_observe, under wrlock) and
 * a pass decides only on the objects a change concerned. */
int ks_gc_init(ks_server *s);   /* RM_OK / RM_ENOMEM; ks_server_init calls it */
void ks_gc_fini(ks_server *s);  /* NULL gc ok */
void ks_gc_reset(ks_server *s); /* under wrlock: every object is gone (ks_store_reset) */
/* Under wrlock, from ks_commit: oldj the previous version (NULL: created), newj the new one
 * (NULL: removed); both borrowed for the call. */
void ks_gc_observe(ks_server *s, ks_kind *k, const char *ns, const char *name, const cJSON *oldj,
                   const cJSON *newj);
/* One pass over what is queued (the thread's step; tests call it directly). Takes the read lock
 * itself, then writes; returns whether anything was queued. */
bool ks_gc_pass(ks_server *s);
unsigned long long ks_gc_examined(ks_server *s); /* objects passes have decided on (tests) */
int ks_gc_start(ks_server *s);
void ks_gc_stop(ks_server *s);

/* ---- discovery / openapi / version (discovery.c) -------------------------------------------- */
/* Returns 1 when the path was a discovery path and resp is filled. */
int ks_discovery(ks_server *s, const rm_http_req *req, rm_http_resp *resp);

/* ---- tables (table.c) ----------------------------------------------------------------------- */
bool ks_wants_table(const rm_http_req *req);
/* Build a Table for objs (borrowed) of kind k; owned cJSON. */
cJSON *ks_table_build(ks_server *s, const ks_kind *k, ks_obj *const *objs, size_t n, bool with_defs);

/* ---- CRDs and schemas (crd.c) --------------------------------------------------------------- */
/* Validate a CRD object, fill status; under wrlock register/refresh its kinds. */
int ks_crd_prepare(cJSON *crd, rm_err *err);
void ks_crd_register(ks_server *s, const cJSON *crd);
void ks_crd_unregister(ks_server *s, const char *crd_name);
/* Structural schema: prune unknown fields (collected into `unknown` as "spec.x" strings when
 * non-NULL), apply defaults, check types/enum/min/max/required. Returns RM_EINVAL with err set
 * (err->field = path) on a validation failure. */
int ks_schema_apply(const cJSON *schema, cJSON *obj, cJSON *unknown, rm_err *err);
/* Evaluate a simple JSONPath (".a.b", ".a[0].b", ".a[?(@.type==\"X\")].b"); borrowed or NULL. */
const cJSON *ks_jsonpath(const cJSON *obj, const char *path);

/* ---- events conversion (api.c) --------------------------------------------------------------- */
cJSON *ks_event_to_new(const cJSON *core); /* core/v1 Event → events.k8s.io/v1 (owned) */
cJSON *ks_event_to_core(const cJSON *ev);  /* events.k8s.io/v1 → core/v1 (owned) */

/* ---- kubelet (kubelet.c) -------------------------------------------------------------------- */
int ks_kubelet_start(ks_server *s);
void ks_kubelet_stop(ks_server *s); /* kills every pod's processes */
/* Path of a container's log file into buf; RM_ENOTFOUND when unknown. */
int ks_kubelet_log_path(ks_server *s, const char *pod_uid, const char *container, bool previous, char *buf,
                        size_t cap);
/* In a child just forked by the kubelet (system calls only: kubesim has threads): its own session
 * and process group, no blocked signals (kubesim blocks SIGTERM/SIGINT in every thread), default
 * SIGPIPE/SIGTERM/SIGINT. */
void ks_child_session(void);
/* --runtime swarm: a fault on pod ns/pod's simulated worker (its first running one): it dies with
 * exit code `code` (its connection closes), or with hang it stops talking (its connection stays
 * open). RM_OK; RM_ENOTFOUND (no such pod with a worker in the swarm); RM_EINVAL (no swarm
 * runtime); RM_EIO (the swarm process is gone). */
int ks_kubelet_swarm_fault(ks_server *s, const char *ns, const char *pod, bool hang, int code);

/* ---- admin (admin.c) ------------------------------------------------------------------------ */
/* Returns 1 if path was an admin path (resp filled). */
int ks_admin(ks_server *s, const rm_http_req *req, rm_http_resp *resp);
void ks_reqlog_add(ks_server *s, const ks_reqrec *r);
/* Fault check for a request: returns an HTTP code to fail with, or 0. Applies delay. */
int ks_fault_check(ks_server *s, const char *verb, const char *resource);

/* ---- small buffers -------------------------------------------------------------------------- */
typedef struct ks_buf {
    char *p;
    size_t len, cap;
    int oom;
} ks_buf;
void ks_buf_add(ks_buf *b, const char *s, size_t n);
void ks_buf_puts(ks_buf *b, const char *s);
void ks_buf_printf(ks_buf *b, const char *fmt, ...) RM_PRINTF(2, 3);
char *ks_buf_take(ks_buf *b, size_t *len); /* owned, NUL-terminated; NULL on OOM */
void ks_buf_free(ks_buf *b);
#endif
