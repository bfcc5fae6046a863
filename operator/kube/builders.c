/* builders.c — the objects the kube runtime creates (see builders.h).
 *
 * Design: a pod is the job's own template with the launch contract (operator/launch.h) rendered
 * into it: labels, restart policy, hostname/subdomain under the job's headless Service, the
 * worker container's args and env, and the placement affinity. The template's values win
 * wherever the contract allows a default; everything the contract owns is ours. Remote data
 * (docs/models-and-data.md, "Where data comes from") adds an init container of the worker image
 * running `ringmaster-worker fetch` into the data cache, on the job's shared volume when the
 * checkpoint path is on one, else on a per-pod emptyDir; data.secretRef becomes envFrom. A template
 * that runs torchrun also gets its c10d store pod, built from the worker container's image alone
 * (docs/torchrun.md). */
#include "operator/kube/builders.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/b64.h"
#include "common/datasets.h"
#include "common/health.h"
#include "common/json.h"
#include "common/worker_env.h"
#include "common/trainingjob.h"
#include "operator/kube/runtime.h"
#include "operator/launch.h"

static cJSON *base_meta(cJSON *obj, const rm_tj *tj, const char *name)
{
    cJSON *md = cJSON_AddObjectToObject(obj, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", tj->namespace_);
    cJSON *l = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(l, RM_LABEL_JOB, tj->name);
    cJSON_AddStringToObject(l, "app.kubernetes.io/managed-by", "ringmaster");
    rm_json_add_controller_ref(md, RM_TJ_API_VERSION, RM_TJ_KIND, tj->name, tj->uid);
    return md;
}

/* Is this the ringmaster worker image (so it speaks our rendezvous and wants args [train])?
 * The configured --worker-image, or any image whose last path part (without tag or digest) is
 * "ringmaster-worker", or "worker" under a path that mentions ringmaster (ringmaster/worker). */
static bool is_worker_image(const char *image, const char *worker_image)
{
    if (!image)
        return true;
    if (strcmp(image, worker_image) == 0)
        return true;
    const char *slash = strrchr(image, '/');
    const char *base = slash ? slash + 1 : image;
    size_t n = strcspn(base, ":@");
    if (n == 17 && strncmp(base, "ringmaster-worker", 17) == 0)
        return true;
    return n == 6 && strncmp(base, "worker", 6) == 0 && slash &&
           memmem(image, (size_t)(slash - image), "ringmaster", 10) != NULL;
}

static const char *template_image(const rm_tj *tj)
{
    const cJSON *cs = rm_json_path(tj->spec.template, "spec.containers");
    const cJSON *c0 = NULL, *c;
    cJSON_ArrayForEach(c, cs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!c0 || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0))
            c0 = c;
    }
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(c0, "image");
    return cJSON_IsString(img) ? img->valuestring : NULL;
}

bool rm_kube_template_runs_worker(const rm_tj *tj, const char *worker_image)
{
    return is_worker_image(template_image(tj), worker_image);
}

/* Drop every template entry named `name` from env; if there was one, append the name to
 * overridden (once) for the EnvOverridden Warning. */
static void env_drop(cJSON *env, const char *name, char *overridden, size_t cap)
{
    for (int i = cJSON_GetArraySize(env) - 1; i >= 0; i--) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(env, i), "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0)
            continue;
        cJSON_DeleteItemFromArray(env, i);
        if (overridden && cap > 0 && !strstr(overridden, name)) {
            size_t len = strlen(overridden);
            rm_sfmt(overridden + len, cap - len, "%s%s", len ? ", " : "", name);
        }
    }
}

/* Render one launch setting as a container env entry (after dropping any user entry of that
 * name; its name is appended to overridden). */
static void env_render(cJSON *env, const rm_launch_var *v, char *overridden, size_t cap)
{
    if (v->user_wins) { /* a default: the template's own entry stays */
        const cJSON *it;
        cJSON_ArrayForEach(it, env)
        {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, v->name) == 0)
                return;
        }
    }
    env_drop(env, v->name, overridden, cap);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", v->name);
    if (v->src == RM_LAUNCH_LITERAL) {
        cJSON_AddStringToObject(e, "value", v->value);
    } else if (v->src == RM_LAUNCH_SECRET) {
        cJSON *skr = cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "valueFrom"), "secretKeyRef");
        cJSON_AddStringToObject(skr, "name", v->value);
        cJSON_AddStringToObject(skr, "key", "token");
    } else {
        cJSON *fr = cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "valueFrom"), "fieldRef");
        cJSON_AddStringToObject(fr, "fieldPath", v->value);
    }
    cJSON_AddItemToArray(env, e);
}

static cJSON *build_pod(const rm_tj *tj, int index, int epoch, int ps_index, const char *rdzv_url,
                        const char *worker_image, int metrics_port, char *overridden, size_t overridden_cap,
                        rm_err *err);

cJSON *rm_kube_ps_pod(const rm_tj *tj, int ps_index, const char *rdzv_url, const char *worker_image,
                      int metrics_port, rm_err *err)
{
    return build_pod(tj, -1, 0, ps_index, rdzv_url, worker_image, metrics_port, NULL, 0, err);
}

cJSON *rm_kube_worker_pod(const rm_kube_worker_pod_args *a, rm_err *err)
{
    return build_pod(a->tj, a->index, a->epoch, -1, a->rdzv_url, a->worker_image, a->metrics_port,
                     a->overridden, a->overridden_cap, err);
}

/* spec.placement.workersPerNode = k (docs/strategies.md#topology) for worker `index`: label the pod
 * with its node group g = index / k and, on kubernetes.io/hostname,
 *   affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution (k > 1 only): a node that
 *     runs a worker of this job with group g (the group's first pod matches itself, so it may go
 *     anywhere; the other k-1 follow it);
 *   affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: no node that runs a
 *     worker of this job with another group.
 * So k workers share each node (k = 1: one worker per node, spread) and the job uses
 * ceil(replicas / k) nodes. A node must fit k workers' requests, else the group's later pods stay
 * Pending. Either term is left out when the template already sets it (the user's wins). */
static void placement_render(cJSON *spec, cJSON *labels, const rm_tj *tj, int index)
{
    int k = tj->spec.placement.workers_per_node;
    if (k < 1 || index < 0)
        return;
    char g[32];
    snprintf(g, sizeof(g), "%d", index / k);
    cJSON_DeleteItemFromObjectCaseSensitive(labels, RM_LABEL_NODE_GROUP);
    cJSON_AddStringToObject(labels, RM_LABEL_NODE_GROUP, g);
    cJSON *aff = cJSON_GetObjectItemCaseSensitive(spec, "affinity");
    if (!cJSON_IsObject(aff)) {
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "affinity");
        aff = cJSON_AddObjectToObject(spec, "affinity");
    }
    if (k > 1 && !cJSON_GetObjectItemCaseSensitive(aff, "podAffinity")) {
        cJSON *term = cJSON_CreateObject();
        cJSON *ml = cJSON_AddObjectToObject(cJSON_AddObjectToObject(term, "labelSelector"), "matchLabels");
        cJSON_AddStringToObject(ml, RM_LABEL_JOB, tj->name);
        cJSON_AddStringToObject(ml, RM_LABEL_NODE_GROUP, g);
        cJSON_AddStringToObject(term, "topologyKey", "kubernetes.io/hostname");
        cJSON *req = cJSON_AddArrayToObject(cJSON_AddObjectToObject(aff, "podAffinity"),
                                            "requiredDuringSchedulingIgnoredDuringExecution");
        cJSON_AddItemToArray(req, term);
    }
    if (!cJSON_GetObjectItemCaseSensitive(aff, "podAntiAffinity")) {
        cJSON *term = cJSON_CreateObject();
        cJSON *me =
            cJSON_AddArrayToObject(cJSON_AddObjectToObject(term, "labelSelector"), "matchExpressions");
        const char *job[] = {tj->name}, *grp[] = {g};
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", RM_LABEL_JOB);
        cJSON_AddStringToObject(e, "operator", "In");
        cJSON_AddItemToObject(e, "values", cJSON_CreateStringArray(job, 1));
        cJSON_AddItemToArray(me, e);
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", RM_LABEL_NODE_GROUP);
        cJSON_AddStringToObject(e, "operator", "Exists");
        cJSON_AddItemToArray(me, e);
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", RM_LABEL_NODE_GROUP);
        cJSON_AddStringToObject(e, "operator", "NotIn");
        cJSON_AddItemToObject(e, "values", cJSON_CreateStringArray(grp, 1));
        cJSON_AddItemToArray(me, e);
        cJSON_AddStringToObject(term, "topologyKey", "kubernetes.io/hostname");
        cJSON *req = cJSON_AddArrayToObject(cJSON_AddObjectToObject(aff, "podAntiAffinity"),
                                            "requiredDuringSchedulingIgnoredDuringExecution");
        cJSON_AddItemToArray(req, term);
    }
}

/* A server pod's livenessProbe (unless the template gives one): its /healthz goes stalled after
 * rm_health_server_deadline (half of progressDeadlineSeconds) of requests held unanswered, and the
 * kubelet kills it after two failed probes a quarter of that apart - answering 503 or nothing at
 * all (SIGSTOP) - well before its waiting workers reach their own deadline; the failed pod is
 * replaced by operator/ps_reconcile.h's rules and restores its shard
 * (docs/strategies.md#failure-semantics). */
static void ps_liveness_render(cJSON *c, const rm_tj *tj, int port)
{
    double after = rm_health_server_deadline(tj->spec.restart.progress_deadline_seconds);
    if (after <= 0 || port <= 0 || cJSON_GetObjectItemCaseSensitive(c, "livenessProbe"))
        return; /* port 0: each server picks its own (--worker-metrics-port 0), nothing to probe */
    int period = (int)(after / 4);
    period = period < 1 ? 1 : period > 10 ? 10 : period;
    cJSON *pr = cJSON_AddObjectToObject(c, "livenessProbe");
    cJSON *hg = pr ? cJSON_AddObjectToObject(pr, "httpGet") : NULL;
    if (!hg)
        return;
    cJSON_AddStringToObject(hg, "path", "/healthz");
    cJSON_AddNumberToObject(hg, "port", port);
    cJSON_AddNumberToObject(pr, "periodSeconds", period);
    cJSON_AddNumberToObject(pr, "timeoutSeconds", 1);
    cJSON_AddNumberToObject(pr, "failureThreshold", 2);
}

/* A worker's pod (ps_index < 0) or parameter server ps_index's: the launch contract rendered
 * into the job's template. */
/* obj's member key as an array: the template's when it is one, else a new empty one in its place. */
static cJSON *array_member(cJSON *obj, const char *key)
{
    cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsArray(a))
        return a;
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    return cJSON_AddArrayToObject(obj, key);
}

/* The per-pod data volume when no shared one holds the checkpoint path. */
#define RM_DATA_VOLUME "ringmaster-data"
#define RM_DATA_MOUNT "/var/cache/ringmaster/data"

/* Does container c mount a volume at (or above) path? */
static bool mounted_at(const cJSON *c, const char *path)
{
    const cJSON *vm;
    cJSON_ArrayForEach(vm, cJSON_GetObjectItemCaseSensitive(c, "volumeMounts"))
    {
        const cJSON *mp = cJSON_GetObjectItemCaseSensitive(vm, "mountPath");
        if (!cJSON_IsString(mp))
            continue;
        size_t n = strlen(mp->valuestring);
        while (n > 1 && mp->valuestring[n - 1] == '/')
            n--;
        if (!strncmp(path, mp->valuestring, n) && (path[n] == '/' || path[n] == 0 || n == 1))
            return true;
    }
    return false;
}

/* data.secretRef: every key of the Secret as the container's env (AWS_ACCESS_KEY_ID ...). */
static void secret_env_render(cJSON *c, const rm_tj *tj)
{
    const char *sec = tj->spec.training.data.secret;
    if (!sec || !*sec)
        return;
    cJSON *ef = array_member(c, "envFrom");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(e, "secretRef"), "name", sec);
    cJSON_AddItemToArray(ef, e);
}

/* Remote data: the data cache (RINGMASTER_DATA_CACHE) on the job's shared volume — the one the
 * checkpoint path is on, so the job's pods fetch once and a replacement finds the data verified —
 * else on a per-pod emptyDir; and the init container that fills it before the worker starts (the
 * worker's own fetch then finds the cache complete). c is the worker container, env its env. */
static void data_init_render(cJSON *spec, cJSON *c, cJSON *env, const rm_tj *tj)
{
    char cache[1100];
    const char *ck = tj->spec.checkpoint.path ? tj->spec.checkpoint.path : "/checkpoints";
    bool shared = mounted_at(c, ck);
    if (shared) {
        rm_sfmt(cache, sizeof cache, "%s/.data-cache", ck);
    } else {
        rm_sfmt(cache, sizeof cache, "%s", RM_DATA_MOUNT);
        cJSON *vols = array_member(spec, "volumes");
        cJSON *v = cJSON_CreateObject();
        cJSON_AddStringToObject(v, "name", RM_DATA_VOLUME);
        cJSON_AddObjectToObject(v, "emptyDir");
        cJSON_AddItemToArray(vols, v);
        cJSON *vms = array_member(c, "volumeMounts");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", RM_DATA_VOLUME);
        cJSON_AddStringToObject(m, "mountPath", RM_DATA_MOUNT);
        cJSON_AddItemToArray(vms, m);
    }
    for (int i = cJSON_GetArraySize(env) - 1; i >= 0; i--) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(env, i), "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, RM_ENV_DATA_CACHE))
            cJSON_DeleteItemFromArray(env, i);
    }
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "name", RM_ENV_DATA_CACHE);
    cJSON_AddStringToObject(ev, "value", cache);
    cJSON_AddItemToArray(env, ev);

    /* the init container: the worker container's image, env, envFrom, mounts and resources */
    cJSON *ic = cJSON_CreateObject();
    cJSON_AddStringToObject(ic, "name", "fetch-data");
    static const char *const copy[] = {"image",     "imagePullPolicy", "env", "envFrom", "volumeMounts",
                                       "resources", "securityContext"};
    for (size_t i = 0; i < RM_ARRAY_LEN(copy); i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(c, copy[i]);
        if (x)
            cJSON_AddItemToObject(ic, copy[i], cJSON_Duplicate(x, 1));
    }
    cJSON *args = cJSON_AddArrayToObject(ic, "args");
    cJSON_AddItemToArray(args, cJSON_CreateString("fetch"));
    /* its reason (a DataError's message) reaches the operator even where the message file is not
     * written: the log's last line is that reason (worker/main.c) */
    cJSON_AddStringToObject(ic, "terminationMessagePolicy", "FallbackToLogsOnError");
    if (!cJSON_GetObjectItemCaseSensitive(c, "terminationMessagePolicy"))
        cJSON_AddStringToObject(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    cJSON *ics = array_member(spec, "initContainers");
    cJSON_AddItemToArray(ics, ic); /* after the user's own: they may prepare the volume */
}

/* torchrun's rendezvous options (docs/torchrun.md): a template's own PET_RDZV_CONF (join_timeout,
 * last_call_timeout, read_timeout ...) is kept, the contract's settings appended after it (torchrun
 * reads the list left to right, the last key wins: no agent ever hosts the store). The template's
 * entry is then replaced without an EnvOverridden warning: nothing of it was lost. */
static int rdzv_conf_merge(cJSON *env, rm_launch *ln)
{
    rm_launch_var *ours = (rm_launch_var *)rm_launch_find(ln, RM_ENV_PET_RDZV_CONF);
    if (!ours)
        return RM_OK;
    for (int i = cJSON_GetArraySize(env) - 1; i >= 0; i--) {
        const cJSON *e = cJSON_GetArrayItem(env, i);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, RM_ENV_PET_RDZV_CONF) != 0)
            continue;
        if (cJSON_IsString(v) && v->valuestring[0]) {
            char *merged = NULL;
            if (asprintf(&merged, "%s,%s", v->valuestring, ours->value) < 0)
                return RM_ENOMEM;
            free(ours->value);
            ours->value = merged;
        }
        cJSON_DeleteItemFromArray(env, i);
        break;
    }
    return RM_OK;
}

static cJSON *build_pod(const rm_tj *tj, int index, int epoch, int ps_index, const char *rdzv_url,
                        const char *worker_image, int metrics_port, char *overridden, size_t overridden_cap,
                        rm_err *err)
{
    char name[320], svc[256], buf[64];
    rm_launch ln;
    memset(&ln, 0, sizeof(ln));
    if (overridden && overridden_cap)
        overridden[0] = 0;
    if (ps_index >= 0)
        snprintf(name, sizeof(name), "%s-ps-%d", tj->name, ps_index);
    else
        snprintf(name, sizeof(name), "%s-worker-%d", tj->name, index);
    snprintf(svc, sizeof(svc), "%s", tj->name);
    if (!worker_image)
        worker_image = RM_DEFAULT_WORKER_IMAGE;
    rm_launch_placement where = {
        .rdzv_url = rdzv_url ? rdzv_url : "",
        .metrics_port = metrics_port,
        .workers_per_node = 1,
        .gpus = rm_template_gpus(tj->spec.template),
        .torchrun = ps_index < 0 && rm_launch_runs_torchrun(tj->spec.template, NULL, 0),
    };
    if ((ps_index >= 0 ? rm_launch_build_ps(tj, ps_index, &where, &ln, err)
                       : rm_launch_build(tj, index, epoch, &where, &ln, err)) != RM_OK)
        return NULL;
    cJSON *pod = cJSON_CreateObject();
    cJSON *tmpl = tj->spec.template ? cJSON_Duplicate(tj->spec.template, 1) : cJSON_CreateObject();
    if (!pod || !tmpl)
        goto nomem;
    cJSON_AddStringToObject(pod, "apiVersion", "v1");
    cJSON_AddStringToObject(pod, "kind", "Pod");
    cJSON *md = base_meta(pod, tj, name);
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    /* template labels and annotations first, ours win */
    const cJSON *tmd = cJSON_GetObjectItemCaseSensitive(tmpl, "metadata");
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(tmd, "labels"), *it;
    cJSON_ArrayForEach(it, tl)
    {
        if (cJSON_IsString(it) && !cJSON_GetObjectItemCaseSensitive(labels, it->string))
            cJSON_AddStringToObject(labels, it->string, it->valuestring);
    }
    if (ps_index >= 0) {
        cJSON_AddStringToObject(labels, RM_LABEL_ROLE, "ps");
        snprintf(buf, sizeof(buf), "%d", ps_index);
        cJSON_AddStringToObject(labels, RM_LABEL_PS_INDEX, buf);
    } else {
        if (tj->spec.strategy == RM_STRATEGY_PS)
            cJSON_AddStringToObject(labels, RM_LABEL_ROLE, "worker");
        snprintf(buf, sizeof(buf), "%d", index);
        cJSON_AddStringToObject(labels, RM_LABEL_INDEX, buf);
        snprintf(buf, sizeof(buf), "%d", epoch);
        cJSON_AddStringToObject(labels, RM_LABEL_EPOCH, buf);
    }
    const cJSON *ta = cJSON_GetObjectItemCaseSensitive(tmd, "annotations");
    if (cJSON_IsObject(ta))
        cJSON_AddItemToObject(md, "annotations", cJSON_Duplicate(ta, 1));
    cJSON *spec = cJSON_DetachItemFromObjectCaseSensitive(tmpl, "spec");
    if (!spec)
        spec = cJSON_CreateObject();
    cJSON_AddItemToObject(pod, "spec", spec);
    if (ps_index < 0)
        placement_render(spec, labels, tj, index);
    /* group restarts are ours: the kubelet must not restart a worker in place */
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "restartPolicy");
    cJSON_AddStringToObject(spec, "restartPolicy", "Never");
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "hostname");
    cJSON_AddStringToObject(spec, "hostname", name);
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "subdomain");
    cJSON_AddStringToObject(spec, "subdomain", svc);
    cJSON *cs = array_member(spec, "containers");
    cJSON *c = NULL, *ci;
    cJSON_ArrayForEach(ci, cs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(ci, "name");
        if (!c || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0))
            c = ci;
    }
    if (!c) {
        c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", "worker");
        cJSON_AddItemToArray(cs, c);
    }
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(c, "image");
    if (!cJSON_IsString(img) || !img->valuestring[0]) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "image");
        cJSON_AddStringToObject(c, "image", worker_image);
        img = cJSON_GetObjectItemCaseSensitive(c, "image");
    }
    bool ours = is_worker_image(img->valuestring, worker_image);
    if (ours && !cJSON_GetObjectItemCaseSensitive(c, "command") &&
        !cJSON_GetObjectItemCaseSensitive(c, "args")) {
        /* our image without a command of the user's: the contract's arguments (metrics on the
         * pod IP: right in a pod's own network namespace, and lets kubesim's process kubelet run
         * many workers on one host without port clashes) */
        cJSON *args = cJSON_AddArrayToObject(c, "args");
        for (int i = 0; i < ln.nargs; i++)
            cJSON_AddItemToArray(args, cJSON_CreateString(ln.args[i]));
    }
    cJSON *env = array_member(c, "env");
    if (rdzv_conf_merge(env, &ln) != RM_OK)
        goto nomem;
    for (int i = 0; i < ln.nenv; i++)
        env_render(env, &ln.env[i], overridden, overridden_cap);
    /* a contract variable this job leaves unset is still ours: a template copy would change the
     * job's topology behind its spec (RINGMASTER_STRATEGY, RINGMASTER_PARALLELISM ...) */
    for (int i = cJSON_GetArraySize(env) - 1; i >= 0; i--) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(env, i), "name");
        if (cJSON_IsString(nm) && rm_launch_is_ours(nm->valuestring) &&
            !rm_launch_find(&ln, nm->valuestring)) {
            char own[64]; /* env_drop frees the entry that holds the name */
            rm_sfmt(own, sizeof own, "%s", nm->valuestring);
            env_drop(env, own, overridden, overridden_cap);
        }
    }
    secret_env_render(c, tj);
    if (ps_index >= 0)
        ps_liveness_render(c, tj, metrics_port < 0 ? RM_PORT_WORKER_METRICS : metrics_port);
    if (ps_index < 0 && ours && rm_uri_fetched(tj->spec.training.data.uri))
        data_init_render(spec, c, env, tj);
    rm_launch_free(&ln);
    cJSON_Delete(tmpl);
    return pod;
nomem:
    rm_launch_free(&ln);
    cJSON_Delete(pod);
    cJSON_Delete(tmpl);
    rm_errf(err, RM_ENOMEM, "pod: out of memory");
    return NULL;
}

/* The c10d store torch's TCPStore serves to a torchrun job's agents (docs/torchrun.md): the
 * server half of torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py's store, with no
 * workers to wait for, kept until SIGTERM. argv[1] is the port. */
static const char c10d_script[] =
    "import datetime, signal, sys\n"
    "from torch.distributed import TCPStore\n"
    "port = int(sys.argv[1])\n"
    "store = TCPStore('127.0.0.1', port, is_master=True, wait_for_workers=False,\n"
    "                 timeout=datetime.timedelta(seconds=60))\n"
    "print('c10d store serving on port %d' % port, flush=True)\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "while True:\n"
    "    signal.pause()\n";

cJSON *rm_kube_c10d_pod(const rm_tj *tj, rm_err *err)
{
    char name[320], python[256], port[16];
    if (!rm_launch_runs_torchrun(tj->spec.template, python, sizeof python)) {
        rm_errf(err, RM_EINVAL, "spec.template: the worker container does not run torchrun");
        return NULL;
    }
    snprintf(name, sizeof(name), "%s" RM_C10D_SUFFIX, tj->name);
    snprintf(port, sizeof(port), "%d", RM_PORT_C10D);
    cJSON *pod = cJSON_CreateObject();
    cJSON_AddStringToObject(pod, "apiVersion", "v1");
    cJSON_AddStringToObject(pod, "kind", "Pod");
    cJSON *md = base_meta(pod, tj, name);
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(md, "labels"), RM_LABEL_ROLE, "c10d-store");
    cJSON *spec = cJSON_AddObjectToObject(pod, "spec");
    /* the store process restarts in place (an empty store at the same address); the pod itself
     * is recreated by the operator when it is lost */
    cJSON_AddStringToObject(spec, "restartPolicy", "Always");
    cJSON_AddStringToObject(spec, "hostname", name);
    cJSON_AddStringToObject(spec, "subdomain", tj->name);
    /* where and as whom the job's pods run; nothing of the worker's resources (no GPUs) */
    static const char *const pod_keys[] = {"imagePullSecrets", "securityContext",   "nodeSelector",
                                           "tolerations",      "priorityClassName", "serviceAccountName"};
    const cJSON *tspec = rm_json_path(tj->spec.template, "spec");
    for (size_t i = 0; i < RM_ARRAY_LEN(pod_keys); i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(tspec, pod_keys[i]);
        if (x)
            cJSON_AddItemToObject(spec, pod_keys[i], cJSON_Duplicate(x, 1));
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(tspec, "containers"), *w = NULL, *ci;
    cJSON_ArrayForEach(ci, cs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(ci, "name");
        if (!w || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0))
            w = ci;
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "containers"), c);
    cJSON_AddStringToObject(c, "name", "c10d-store");
    static const char *const ctr_keys[] = {"image", "imagePullPolicy", "securityContext"};
    for (size_t i = 0; i < RM_ARRAY_LEN(ctr_keys); i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(w, ctr_keys[i]);
        if (x)
            cJSON_AddItemToObject(c, ctr_keys[i], cJSON_Duplicate(x, 1));
    }
    const char *cmd[] = {python, "-c", c10d_script, port};
    cJSON_AddItemToObject(c, "command", cJSON_CreateStringArray(cmd, 4));
    cJSON *ports = cJSON_AddArrayToObject(c, "ports");
    cJSON *pt = cJSON_CreateObject();
    cJSON_AddStringToObject(pt, "name", "c10d");
    cJSON_AddNumberToObject(pt, "containerPort", RM_PORT_C10D);
    cJSON_AddItemToArray(ports, pt);
    cJSON *req = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "resources"), "requests");
    cJSON_AddStringToObject(req, "cpu", "100m");
    cJSON_AddStringToObject(req, "memory", "256Mi");
    cJSON *rp = cJSON_AddObjectToObject(c, "readinessProbe");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(rp, "tcpSocket"), "port", RM_PORT_C10D);
    cJSON_AddNumberToObject(rp, "periodSeconds", 2);
    return pod;
}

cJSON *rm_kube_service(const rm_tj *tj)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "apiVersion", "v1");
    cJSON_AddStringToObject(s, "kind", "Service");
    base_meta(s, tj, tj->name);
    cJSON *sp = cJSON_AddObjectToObject(s, "spec");
    cJSON_AddStringToObject(sp, "clusterIP", "None");
    cJSON_AddBoolToObject(sp, "publishNotReadyAddresses", 1);
    cJSON *sel = cJSON_AddObjectToObject(sp, "selector");
    cJSON_AddStringToObject(sel, RM_LABEL_JOB, tj->name);
    cJSON *ports = cJSON_AddArrayToObject(sp, "ports");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "master");
    cJSON_AddNumberToObject(p, "port", RM_PORT_MASTER);
    cJSON_AddStringToObject(p, "protocol", "TCP");
    cJSON_AddItemToArray(ports, p);
    return s;
}

cJSON *rm_kube_secret(const rm_tj *tj, const char *token)
{
    char name[320];
    snprintf(name, sizeof(name), "%s-rendezvous", tj->name);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "apiVersion", "v1");
    cJSON_AddStringToObject(s, "kind", "Secret");
    base_meta(s, tj, name);
    cJSON_AddStringToObject(s, "type", "Opaque");
    cJSON *d = cJSON_AddObjectToObject(s, "data");
    char *b = rm_b64_encode((const unsigned char *)token, strlen(token));
    cJSON_AddStringToObject(d, "token", b ? b : "");
    free(b);
    return s;
}
