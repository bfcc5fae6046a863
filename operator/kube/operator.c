/* operator.c — `ringmaster operator`: wires the kube client, informers, workqueue, leader
 * election, kube runtime, rendezvous service, metrics and probes into one process.
 *
 * Design: one context struct (rm_op) on main's stack owns everything. Informers run always (warm
 * caches, fast failover); workers only reconcile while this process leads (or when leader election
 * is off). The rendezvous HTTP server is bound only while leading, so two operators can share one
 * --rendezvous-bind-address and workers' RINGMASTER_RENDEZVOUS stays valid across a failover.
 * Shutdown (SIGTERM/SIGINT): stop the queue, join workers, stop informers, release the Lease. */
#include "operator/kube/operator.h"
#include "common/clock.h"
#include "common/worker_env.h"
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/health.h"
#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/rdzv.h"
#include "common/trainingjob.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"
#include "operator/kube/leader.h"
#include "operator/kube/sweepctl.h"
#include "operator/kube/metrics.h"
#include "operator/kube/runtime.h"
#include "operator/kube/workqueue.h"
#include "operator/gang.h"

#define MAX_NS 16
#define MAX_WORKERS 64

typedef struct rm_op {
    /* flags */
    const char *kubeconfig, *namespaces[MAX_NS];
    int nns;
    const char *metrics_addr, *probe_addr, *le_ns, *le_id, *rdzv_bind, *rdzv_url, *worker_image;
    bool leader_elect, pod_events;
    int workers, worker_metrics_port;
    double qps, resync_s, force_delete_s;
    int burst;
    rm_gang_kind gang;
    const char *cosched_scheduler;
    int kueue; /* 0 none, 1 auto (when Workloads are served), 2 workload (required) */
    /* parts */
    rm_kube_client *client;
    rm_metrics *reg;
    rm_op_metrics om;
    rm_health *health;
    rm_http_server *metrics_srv, *probe_srv, *rdzv_srv;
    rm_rdzv *rdzv;
    rm_informer *jobs[MAX_NS];
    int njobs;
    rm_informer *pods, *services, *secrets, *nodes;
    rm_wq *q;
    rm_kube_rt *rt;
    rm_sweepctl *sweeps; /* the TrainingSweep controller (own informers and queue) */
    rm_leader *leader;
    pthread_t th[MAX_WORKERS];
    int nth;
    atomic_bool leading;
    atomic_bool synced;  /* every informer has loaded its first LIST */
    pthread_mutex_t lmu; /* leadership transitions (rendezvous server start/stop) */
    char rdzv_url_buf[256];
    char identity[128];
} rm_op;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ringmaster operator [--kubeconfig FILE] [--namespace NS]... [--metrics-bind-address :8080]\n"
        "         [--health-probe-bind-address :8081] [--leader-elect] [--leader-election-namespace NS]\n"
        "         [--leader-election-id NAME] [--workers N] [--kube-api-qps Q] [--kube-api-burst B]\n"
        "         [--rendezvous-bind-address :" RM_STR(
            RM_PORT_RENDEZVOUS) "] [--rendezvous-advertise-url URL]\n"
                                "         [--worker-image IMAGE] [--resync-period S] [--pod-events "
                                "true|false]\n"
                                "         [--force-delete-after S (pods stuck Terminating on a NotReady "
                                "node; 30)]\n"
                                "         [--worker-metrics-port P (" RM_STR(
                                    RM_PORT_WORKER_METRICS) "; 0 = any, for hosts shared by many pods)]\n"
                                                            "         [--gang-scheduler "
                                                            "none|volcano|coscheduling] "
                                                            "[--coscheduling-scheduler-name NAME]\n"
                                                            "         [--kueue-integration "
                                                            "auto|workload|none]\n"
                                                            "         [--log-format text|json] [--log-level "
                                                            "debug|info|warn|error]\n");
}

/* ---------------- enqueue handlers ---------------- */
static void on_job(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                   const void *n)
{
    rm_op *op = ud;
    rm_wq_add(op->q, key);
}

static void on_owned(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                     const void *n)
{
    rm_op *op = ud;
    if (index)
        rm_wq_add(op->q, index);
}

static void enqueue_all(rm_op *op, bool low);

static void on_node(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                    const void *n)
{
    /* a node going NotReady (or back) matters to the jobs with pods on it: pods only carry a hash
     * of their node's name, so look at every job (cheap next to a node failure) */
    rm_op *op = ud;
    const rm_kube_node *a = o, *b = n;
    if (ev == RM_INF_UPDATED && a && b && a->ready != b->ready && atomic_load(&op->leading))
        enqueue_all(op, false);
}

static void on_restart(void *ud, const char *name, const char *reason)
{
    rm_op *op = ud;
    rm_op_metrics_watch_restart(&op->om, name, reason);
}

static int enqueue_one(void *ud, const char *key, const void *item)
{
    rm_op *op = ud;
    rm_wq_add(op->q, key);
    return 0;
}

static int enqueue_one_low(void *ud, const char *key, const void *item)
{
    rm_op *op = ud;
    rm_wq_add_low(op->q, key);
    return 0;
}

static void enqueue_key(void *ud, const char *key)
{
    rm_op *op = ud;
    rm_wq_add(op->q, key);
}

/* Every job; low: behind every other add (the periodic resync: docs/operator-scale.md). */
static void enqueue_all(rm_op *op, bool low)
{
    for (int i = 0; i < op->njobs; i++) {
        rm_informer_rlock(op->jobs[i]);
        rm_informer_foreach(op->jobs[i], low ? enqueue_one_low : enqueue_one, op);
        rm_informer_runlock(op->jobs[i]);
    }
}

/* ---------------- leadership ---------------- */
void rm_op_rdzv_stop(rm_rdzv *r, rm_http_server *srv, bool resume)
{
    if (!srv)
        return;
    rm_rdzv_shutdown(r);
    rm_http_stop(srv);
    if (resume)
        rm_rdzv_resume(r);
}

static void on_leading(void *ud, bool leading)
{
    rm_op *op = ud;
    pthread_mutex_lock(&op->lmu);
    if (leading && op->rdzv_bind && !op->rdzv_srv) {
        rm_err err = {0};
        if (rm_rdzv_serve(op->rdzv, op->rdzv_bind, &op->rdzv_srv, &err) != RM_OK)
            rm_error("cannot serve rendezvous addr=%s err=\"%s\"", op->rdzv_bind, err.msg);
        else
            rm_info("rendezvous serving addr=%s port=%d", op->rdzv_bind, rm_http_port(op->rdzv_srv));
    }
    if (!leading && op->rdzv_srv) {
        rm_op_rdzv_stop(op->rdzv, op->rdzv_srv, true);
        op->rdzv_srv = NULL;
    }
    atomic_store(&op->leading, leading);
    rm_op_metrics_leader(&op->om, leading);
    if (leading)
        rm_sweepctl_enqueue_all(op->sweeps);
    pthread_mutex_unlock(&op->lmu);
    if (leading)
        enqueue_all(op, false);
}

static void update_ready(rm_op *op)
{
    bool synced = true;
    for (int i = 0; i < op->njobs; i++)
        synced &= rm_informer_synced(op->jobs[i]);
    synced &= rm_informer_synced(op->pods) && rm_informer_synced(op->services) &&
              rm_informer_synced(op->secrets) && rm_informer_synced(op->nodes);
    atomic_store(&op->synced, synced);
    bool lead = atomic_load(&op->leading);
    rm_health_set_ready(op->health, synced && lead,
                        !synced ? "informers not synced"
                        : !lead ? "not the leader"
                                : NULL);
}

/* ---------------- workers ---------------- */
static void *worker(void *arg)
{
    rm_op *op = arg;
    for (;;) {
        char *key = NULL;
        int rc = rm_wq_get(op->q, -1, &key);
        if (rc == RM_ECLOSED)
            break;
        if (rc)
            continue;
        if (!atomic_load(&op->leading)) {
            rm_wq_done(op->q, key); /* the leader-to-be re-enqueues everything */
            free(key);
            continue;
        }
        if (!atomic_load(&op->synced))
            update_ready(op);
        if (!atomic_load(&op->synced)) {
            /* WaitForCacheSync: deciding on half-loaded caches would see existing pods as
             * missing; look again shortly */
            rm_wq_add_after(op->q, key, 0.2);
            rm_wq_done(op->q, key);
            free(key);
            continue;
        }
        double t0 = rm_mono(), requeue = 0;
        rm_err err = {0};
        rc = rm_kube_rt_sync(op->rt, key, &requeue, &err);
        rm_op_metrics_reconcile(&op->om, rm_mono() - t0, rc != RM_OK);
        rm_health_beat(op->health);
        if (rc) {
            rm_warn("reconcile failed job=%s err=\"%s\" requeues=%d", key, err.msg,
                    rm_wq_num_requeues(op->q, key));
            rm_wq_add_rate_limited(op->q, key);
        } else {
            rm_wq_forget(op->q, key);
            if (requeue > 0)
                rm_wq_add_after(op->q, key, requeue);
        }
        rm_wq_done(op->q, key);
        free(key);
    }
    return NULL;
}

/* ---------------- flags ---------------- */
/* --kueue-integration, indexed by rm_op.kueue */
static const char *const kueue_modes[] = {"none", "auto", "workload", NULL};

static int parse_flags(rm_op *op, int argc, char **argv)
{
    enum {
        O_KC = 1000,
        O_NS,
        O_MA,
        O_PA,
        O_LE,
        O_LENS,
        O_LEID,
        O_W,
        O_QPS,
        O_BURST,
        O_RB,
        O_RU,
        O_WI,
        O_LF,
        O_LL,
        O_RS,
        O_PE,
        O_FD,
        O_WMP,
        O_H,
        O_GANG,
        O_COS,
        O_KQ
    };
    static const struct option lo[] = {{"kubeconfig", required_argument, 0, O_KC},
                                       {"namespace", required_argument, 0, O_NS},
                                       {"metrics-bind-address", required_argument, 0, O_MA},
                                       {"health-probe-bind-address", required_argument, 0, O_PA},
                                       {"leader-elect", optional_argument, 0, O_LE},
                                       {"leader-election-namespace", required_argument, 0, O_LENS},
                                       {"leader-election-id", required_argument, 0, O_LEID},
                                       {"workers", required_argument, 0, O_W},
                                       {"kube-api-qps", required_argument, 0, O_QPS},
                                       {"kube-api-burst", required_argument, 0, O_BURST},
                                       {"rendezvous-bind-address", required_argument, 0, O_RB},
                                       {"rendezvous-advertise-url", required_argument, 0, O_RU},
                                       {"worker-image", required_argument, 0, O_WI},
                                       {"log-format", required_argument, 0, O_LF},
                                       {"log-level", required_argument, 0, O_LL},
                                       {"resync-period", required_argument, 0, O_RS},
                                       {"pod-events", required_argument, 0, O_PE},
                                       {"force-delete-after", required_argument, 0, O_FD},
                                       {"worker-metrics-port", required_argument, 0, O_WMP},
                                       {"help", no_argument, 0, O_H},
                                       {"gang-scheduler", required_argument, 0, O_GANG},
                                       {"coscheduling-scheduler-name", required_argument, 0, O_COS},
                                       {"kueue-integration", required_argument, 0, O_KQ},
                                       {0, 0, 0, 0}};
    rm_log_level lvl = RM_LOG_INFO;
    rm_log_format fmt = RM_LOG_TEXT;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case O_KC:
            op->kubeconfig = optarg;
            break;
        case O_NS:
            if (op->nns >= MAX_NS) {
                fprintf(stderr, "ringmaster operator: at most %d --namespace flags\n", MAX_NS);
                return 2;
            }
            op->namespaces[op->nns++] = optarg;
            break;
        case O_MA:
            op->metrics_addr = optarg;
            break;
        case O_PA:
            op->probe_addr = optarg;
            break;
        case O_LE:
            op->leader_elect = !optarg || strcmp(optarg, "false") != 0;
            break;
        case O_LENS:
            op->le_ns = optarg;
            break;
        case O_LEID:
            op->le_id = optarg;
            break;
        case O_W:
            op->workers = (int)strtol(optarg, &end, 10);
            if (*end || op->workers < 1 || op->workers > MAX_WORKERS) {
                fprintf(stderr, "ringmaster operator: --workers must be 1..%d\n", MAX_WORKERS);
                return 2;
            }
            break;
        case O_QPS:
            op->qps = strtod(optarg, &end);
            if (*end) {
                fprintf(stderr, "ringmaster operator: bad --kube-api-qps %s\n", optarg);
                return 2;
            }
            break;
        case O_BURST:
            op->burst = (int)strtol(optarg, &end, 10);
            if (*end || op->burst < 1) {
                fprintf(stderr, "ringmaster operator: bad --kube-api-burst %s\n", optarg);
                return 2;
            }
            break;
        case O_RB:
            op->rdzv_bind = optarg;
            break;
        case O_RU:
            op->rdzv_url = optarg;
            break;
        case O_WI:
            op->worker_image = optarg;
            break;
        case O_LF:
            if (rm_log_parse_format(optarg, &fmt)) {
                fprintf(stderr, "ringmaster operator: bad --log-format %s\n", optarg);
                return 2;
            }
            break;
        case O_LL:
            if (rm_log_parse_level(optarg, &lvl)) {
                fprintf(stderr, "ringmaster operator: bad --log-level %s\n", optarg);
                return 2;
            }
            break;
        case O_RS:
            op->resync_s = strtod(optarg, &end);
            if (*end || op->resync_s < 0) {
                fprintf(stderr, "ringmaster operator: bad --resync-period %s\n", optarg);
                return 2;
            }
            break;
        case O_PE:
            op->pod_events = strcmp(optarg, "false") != 0;
            break;
        case O_WMP:
            op->worker_metrics_port = (int)strtol(optarg, &end, 10);
            if (*end || op->worker_metrics_port < 0 || op->worker_metrics_port > 65535) {
                fprintf(stderr, "ringmaster operator: bad --worker-metrics-port %s\n", optarg);
                return 2;
            }
            break;
        case O_FD:
            op->force_delete_s = strtod(optarg, &end);
            if (*end || op->force_delete_s <= 0) {
                fprintf(stderr, "ringmaster operator: bad --force-delete-after %s\n", optarg);
                return 2;
            }
            break;
        case O_GANG:
            if (rm_gang_parse(optarg, &op->gang)) {
                fprintf(stderr,
                        "ringmaster operator: bad --gang-scheduler %s (none, volcano or coscheduling)\n",
                        optarg);
                return 2;
            }
            break;
        case O_COS:
            if (!*optarg) {
                fprintf(stderr, "ringmaster operator: --coscheduling-scheduler-name must not be empty\n");
                return 2;
            }
            op->cosched_scheduler = optarg;
            break;
        case O_KQ:
            op->kueue = rm_enum_index(kueue_modes, optarg);
            if (op->kueue < 0) {
                fprintf(stderr, "ringmaster operator: bad --kueue-integration %s (auto, workload or none)\n",
                        optarg);
                return 2;
            }
            break;
        case O_H:
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringmaster operator: unexpected argument %s\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    rm_log_init(lvl, fmt, "operator");
    return 0;
}

static void metrics_probe_routes(rm_op *op, rm_err *err, int *rc)
{
    if (op->metrics_addr && strcmp(op->metrics_addr, "0") != 0) {
        rm_http_route r[] = {{"GET", "/metrics", 0, rm_metrics_handler, op->reg}};
        rm_http_opts o = {.bind = op->metrics_addr};
        *rc = rm_http_start(&o, r, 1, &op->metrics_srv, err);
        if (*rc)
            return;
        rm_info("metrics serving addr=%s port=%d", op->metrics_addr, rm_http_port(op->metrics_srv));
    }
    if (op->probe_addr && strcmp(op->probe_addr, "0") != 0) {
        rm_http_route r[] = {{"GET", "/healthz", 0, rm_health_healthz, op->health},
                             {"GET", "/readyz", 0, rm_health_readyz, op->health}};
        rm_http_opts o = {.bind = op->probe_addr};
        *rc = rm_http_start(&o, r, 2, &op->probe_srv, err);
        if (*rc)
            return;
        rm_info("probes serving addr=%s port=%d", op->probe_addr, rm_http_port(op->probe_srv));
    }
}

/* Discovery: does the API server serve `plural` in group/version? RM_OK yes, RM_ENOTFOUND no,
 * another code when it cannot be asked. */
static int served(rm_op *op, const char *group, const char *version, const char *plural, rm_err *err)
{
    char p[256];
    snprintf(p, sizeof p, "/apis/%s/%s", group, version);
    cJSON *rl = NULL;
    int rc = rm_kube_json(op->client, "GET", p, NULL, NULL, &rl, err);
    if (rc)
        return rc;
    const cJSON *r;
    rc = RM_ENOTFOUND;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(rl, "resources"))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(r, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, plural))
            rc = RM_OK;
    }
    cJSON_Delete(rl);
    return rc;
}

/* --gang-scheduler and --kueue-integration need their kinds served: fail fast naming the missing
 * resource (kubeflow/trainer#1811: a missing CRD used to fail silently). */
static int check_crds(rm_op *op)
{
    rm_err err = {0};
    if (op->gang != RM_GANG_NONE) {
        int rc = served(op, rm_gang_group(op->gang), rm_gang_version(op->gang), RM_PODGROUP_PLURAL, &err);
        if (rc) {
            rm_error(
                "--gang-scheduler %s: the API server does not serve " RM_PODGROUP_PLURAL ".%s/%s "
                "(kind PodGroup): install %s and its PodGroup CRD, or run with --gang-scheduler none%s%s",
                rm_gang_name(op->gang), rm_gang_group(op->gang), rm_gang_version(op->gang),
                op->gang == RM_GANG_VOLCANO ? "Volcano" : "scheduler-plugins (coscheduling)",
                rc == RM_ENOTFOUND ? "" : "; discovery failed: ", rc == RM_ENOTFOUND ? "" : err.msg);
            return rc;
        }
        rm_info("gang scheduling scheduler=%s podgroups=%s/%s", rm_gang_name(op->gang),
                rm_gang_group(op->gang), rm_gang_version(op->gang));
    }
    if (op->kueue) {
        int rc = served(op, RM_KUEUE_GROUP, RM_KUEUE_VERSION, "workloads", &err);
        if (rc && op->kueue == 2) {
            rm_error("--kueue-integration workload: the API server does not serve workloads." RM_KUEUE_GROUP
                     "/" RM_KUEUE_VERSION
                     " (kind Workload): install Kueue or run with --kueue-integration none");
            return rc;
        }
        if (rc)
            rm_info("Kueue Workloads are not served: jobs labelled " RM_KUEUE_QUEUE_LABEL
                    " run without Kueue");
        op->kueue = rc ? 0 : 2;
    }
    return RM_OK;
}

static int start_informer(rm_op *op, const char *name, const char *path, const char *sel,
                          void *(*tf)(void *, const cJSON *), void (*fr)(void *),
                          int (*ix)(void *, const cJSON *, char *, size_t),
                          void (*h)(void *, rm_inf_event, const char *, const char *, const void *,
                                    const void *),
                          rm_informer **out, rm_err *err)
{
    rm_informer_opts o = {.name = name,
                          .path = path,
                          .label_selector = sel,
                          .transform = tf,
                          .free_item = fr,
                          .index_fn = ix,
                          .handler = h,
                          .on_restart = on_restart,
                          .ud = op,
                          .page_limit = 500,
                          .watch_timeout_s = 300};
    /* flat projections live inside the cache entry */
    if (tf == rm_kube_pod_transform)
        o.inline_size = sizeof(rm_kube_pod);
    else if (tf == rm_kube_owned_transform)
        o.inline_size = sizeof(rm_kube_owned);
    else if (tf == rm_kube_node_transform)
        o.inline_size = sizeof(rm_kube_node);
    return rm_informer_start(op->client, &o, out, err);
}

/* The advertised rendezvous URL: explicit, else derived from the bind address. -1 (logged) when
 * the bind address has no fixed port to derive it from. */
static int advertise_url(rm_op *op)
{
    if (op->rdzv_url) {
        snprintf(op->rdzv_url_buf, sizeof(op->rdzv_url_buf), "%s", op->rdzv_url);
    } else {
        char host[128];
        int port = 0;
        if (rm_http_parse_addr(op->rdzv_bind, host, sizeof(host), &port) || port == 0) {
            rm_error("--rendezvous-bind-address %s needs a fixed port (or give --rendezvous-advertise-url)",
                     op->rdzv_bind);
            return -1;
        }
        if (strcmp(host, "0.0.0.0") == 0 || !host[0]) {
            char hn[64] = "127.0.0.1";
            snprintf(op->rdzv_url_buf, sizeof(op->rdzv_url_buf), "http://%s:%d", hn, port);
        } else {
            snprintf(op->rdzv_url_buf, sizeof(op->rdzv_url_buf), "http://%s:%d", host, port);
        }
    }
    return 0;
}

/* The informers: TrainingJobs (all namespaces, or one stream per --namespace), and the owned
 * objects and nodes across all namespaces. */
static int start_informers(rm_op *op, rm_err *err)
{
    int rc;
    char path[512];
    if (op->nns == 0) {
        snprintf(path, sizeof(path), "/apis/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, RM_TJ_PLURAL);
        rc = start_informer(op, "trainingjobs", path, NULL, rm_kube_tj_transform, free, NULL, on_job,
                            &op->jobs[0], err);
        if (rc)
            return rc;
        op->njobs = 1;
    } else {
        for (int i = 0; i < op->nns; i++) {
            snprintf(path, sizeof(path), "/apis/%s/%s/namespaces/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
                     op->namespaces[i], RM_TJ_PLURAL);
            rc = start_informer(op, "trainingjobs", path, NULL, rm_kube_tj_transform, free, NULL, on_job,
                                &op->jobs[i], err);
            if (rc)
                return rc;
            op->njobs++;
        }
    }
    /* owned objects across all namespaces (label-selected): fewer streams than one per namespace */
    rc = start_informer(op, "pods", "/api/v1/pods", RM_LABEL_JOB, rm_kube_pod_transform, free,
                        rm_kube_job_index, on_owned, &op->pods, err);
    if (!rc)
        rc = start_informer(op, "services", "/api/v1/services", RM_LABEL_JOB, rm_kube_exists_transform, free,
                            rm_kube_job_index, on_owned, &op->services, err);
    if (!rc)
        rc = start_informer(op, "secrets", "/api/v1/secrets", RM_LABEL_JOB, rm_kube_owned_transform, free,
                            rm_kube_job_index, on_owned, &op->secrets, err);
    if (!rc)
        rc = start_informer(op, "nodes", "/api/v1/nodes", NULL, rm_kube_node_transform, free, NULL, on_node,
                            &op->nodes, err);
    return rc;
}

/* Until SIGTERM/SIGINT: readiness, the rendezvous server while leading, rendezvous polling,
 * periodic resync; SIGUSR1 logs a memory and cache summary. */
static void main_loop(rm_op *op, const sigset_t *sigs)
{
    double last_resync = rm_mono();
    unsigned ticks = 0;
    for (;;) {
        struct timespec ts = {0, 500 * 1000 * 1000};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            rm_info("shutting down signal=%d", sig);
            break;
        }
        if (sig == SIGUSR1) {
            struct mallinfo2 mi = mallinfo2();
            size_t njobs = 0;
            for (int i = 0; i < op->njobs; i++)
                njobs += rm_informer_count(op->jobs[i]);
            rm_info("memory heap_bytes=%zu heap_in_use=%zu mmapped=%zu jobs=%zu pods=%zu services=%zu "
                    "secrets=%zu queue=%zu",
                    mi.arena, mi.uordblks, mi.hblkhd, njobs, rm_informer_count(op->pods),
                    rm_informer_count(op->services), rm_informer_count(op->secrets), rm_wq_len(op->q));
        }
        update_ready(op);
        rm_health_beat(op->health);
        pthread_mutex_lock(&op->lmu);
        if (atomic_load(&op->leading) && op->rdzv_bind && !op->rdzv_srv) {
            /* the previous leader may still hold the port for a moment: keep trying */
            rm_err rerr = {0};
            if (rm_rdzv_serve(op->rdzv, op->rdzv_bind, &op->rdzv_srv, &rerr) == RM_OK)
                rm_info("rendezvous serving addr=%s port=%d", op->rdzv_bind, rm_http_port(op->rdzv_srv));
        }
        pthread_mutex_unlock(&op->lmu);
        if (atomic_load(&op->leading))
            rm_kube_rt_poll_rdzv(op->rt, enqueue_key, op); /* rounds, progress, results */
        if (++ticks % 10 == 0)
            malloc_trim(64 * 1024); /* hand bursts' freed heap back (every ~5 s) */
        if (op->resync_s > 0 && rm_mono() - last_resync >= op->resync_s) {
            last_resync = rm_mono();
            if (atomic_load(&op->leading)) {
                enqueue_all(op, true);
                rm_sweepctl_enqueue_all(op->sweeps);
            }
        }
    }
}

int rm_operator_main(int argc, char **argv)
{
    rm_op op;
    memset(&op, 0, sizeof(op));
    op.metrics_addr = ":8080";
    op.probe_addr = ":8081";
    op.workers = 4;
    op.qps = 50;
    op.burst = 100;
    op.resync_s = 30;
    op.le_id = "ringmaster-operator";
    op.pod_events = true;
    op.worker_metrics_port = RM_PORT_WORKER_METRICS;
    op.rdzv_bind = ":" RM_STR(RM_PORT_RENDEZVOUS);
    op.kueue = 1;
    int rc = parse_flags(&op, argc, argv);
    if (rc)
        return rc == 1 ? 0 : 2;
    rm_err err = {0};
    int exit_code = 1;
    /* Memory stance: one malloc arena instead of one per thread, and large blocks always mmapped
     * (a fixed threshold stops glibc from raising it), so freed buffers go back to the kernel. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    pthread_mutex_init(&op.lmu, NULL);
    /* block the shutdown signals in every thread; main waits for them with sigwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1); /* logs a memory and cache summary */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    rm_kube_config cfg;
    if (rm_kube_config_auto(op.kubeconfig, &cfg, &err)) {
        rm_error("kube config: %s", err.msg);
        goto out;
    }
    op.reg = rm_metrics_new();
    op.health = rm_health_new(0);
    if (!op.reg || !op.health || rm_op_metrics_init(&op.om, op.reg, &err)) {
        rm_error("metrics: %s", err.msg[0] ? err.msg : "out of memory");
        rm_kube_config_free(&cfg);
        goto out;
    }
    rm_kube_client_opts co = {
        .qps = op.qps, .burst = op.burst, .observe = rm_op_metrics_api, .observe_ud = &op.om};
    rc = rm_kube_client_new(&cfg, &co, &op.client, &err);
    rm_kube_config_free(&cfg);
    if (rc) {
        rm_error("kube client: %s", err.msg);
        goto out;
    }
    rm_health_set_ready(op.health, false, "starting");
    if (check_crds(&op))
        goto out;
    rc = 0;
    metrics_probe_routes(&op, &err, &rc);
    if (rc) {
        rm_error("http: %s", err.msg);
        goto out;
    }
    /* one worker for the periodic resync's lane: it re-reads 10,000 idle jobs in a few seconds of
     * its period, and the other workers (and cores) stay free for changes (docs/operator-scale.md) */
    rm_wq_opts qo = {
        .hooks = {rm_op_metrics_wq_depth, rm_op_metrics_wq_added, rm_op_metrics_wq_latency, &op.om},
        .low_workers = 1};
    op.q = rm_wq_new(&qo);
    op.rdzv = rm_rdzv_new();
    if (!op.q || !op.rdzv) {
        rm_error("out of memory");
        goto out;
    }
    if (advertise_url(&op))
        goto out;
    char hn[64] = "localhost";
    gethostname(hn, sizeof(hn) - 1);
    snprintf(op.identity, sizeof(op.identity), "%s_%d", hn, (int)getpid());
    if (start_informers(&op, &err))
        goto inf_fail;
    rm_kube_rt_config rc_cfg = {.client = op.client,
                                .njobs_inf = op.njobs,
                                .pods = op.pods,
                                .services = op.services,
                                .secrets = op.secrets,
                                .nodes = op.nodes,
                                .rdzv = op.rdzv,
                                .metrics = &op.om,
                                .rdzv_url = op.rdzv_url_buf,
                                .worker_image = op.worker_image,
                                .instance = op.identity,
                                .pod_events = op.pod_events,
                                .force_delete_after_s = op.force_delete_s,
                                .worker_metrics_port = op.worker_metrics_port,
                                .gang = (int)op.gang,
                                .cosched_scheduler = op.cosched_scheduler,
                                .kueue = op.kueue != 0};
    for (int i = 0; i < op.njobs; i++)
        rc_cfg.jobs_inf[i] = op.jobs[i];
    if (rm_kube_rt_new(&rc_cfg, &op.rt, &err)) {
        rm_error("runtime: %s", err.msg);
        goto out;
    }
    { /* the second controller: TrainingSweeps, whose trials are TrainingJobs */
        rm_sweepctl_cfg sc = {.client = op.client,
                              .reg = op.reg,
                              .leading = &op.leading,
                              .namespaces = op.namespaces,
                              .nns = op.nns};
        if (rm_sweepctl_start(&sc, &op.sweeps, &err)) {
            rm_error("sweep controller: %s", err.msg);
            goto out;
        }
    }
    for (int i = 0; i < op.workers; i++) {
        if (pthread_create(&op.th[i], NULL, worker, &op)) {
            rm_error("cannot start worker threads");
            goto out;
        }
        op.nth++;
    }
    rm_info("operator started server=%s namespaces=%d workers=%d leader_elect=%d rendezvous=%s identity=%s",
            rm_kube_client_server(op.client), op.nns, op.workers, op.leader_elect ? 1 : 0, op.rdzv_url_buf,
            op.identity);
    if (op.leader_elect) {
        rm_leader_opts lo = {.namespace_ = op.le_ns ? op.le_ns : rm_kube_client_namespace(op.client),
                             .name = op.le_id,
                             .identity = op.identity,
                             .on_change = on_leading,
                             .ud = &op};
        if (rm_leader_start(op.client, &lo, &op.leader, &err)) {
            rm_error("leader election: %s", err.msg);
            goto out;
        }
    } else {
        on_leading(&op, true);
    }
    update_ready(&op);
    main_loop(&op, &sigs);
    exit_code = 0;
    goto out;
inf_fail:
    rm_error("informers: %s", err.msg);
out:
    if (op.q)
        rm_wq_shutdown(op.q);
    for (int i = 0; i < op.nth; i++)
        pthread_join(op.th[i], NULL);
    rm_sweepctl_stop(op.sweeps);
    rm_leader_stop(op.leader); /* releases the Lease so a successor starts at once */
    pthread_mutex_lock(&op.lmu);
    rm_op_rdzv_stop(op.rdzv, op.rdzv_srv, false);
    op.rdzv_srv = NULL;
    pthread_mutex_unlock(&op.lmu);
    for (int i = 0; i < op.njobs; i++)
        rm_informer_stop(op.jobs[i]);
    rm_informer_stop(op.pods);
    rm_informer_stop(op.services);
    rm_informer_stop(op.secrets);
    rm_informer_stop(op.nodes);
    rm_kube_rt_free(op.rt);
    rm_rdzv_free(op.rdzv);
    rm_wq_free(op.q);
    rm_http_stop(op.metrics_srv);
    rm_http_stop(op.probe_srv);
    rm_kube_client_free(op.client);
    rm_health_free(op.health);
    rm_metrics_free(op.reg);
    pthread_mutex_destroy(&op.lmu);
    return exit_code;
}
