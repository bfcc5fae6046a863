/* gang.c — see gang.h. */
#include "operator/gang.h"
#include <stdio.h>
#include <string.h>
#include "common/json.h"
#include "common/quantity.h"

static const cJSON *oget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *const gang_names[] = {"none", "volcano", "coscheduling", NULL};

int rm_gang_parse(const char *s, rm_gang_kind *out)
{
    int i = s && !*s ? RM_GANG_NONE : rm_enum_index(gang_names, s); /* "" is none too */
    if (i < 0)
        return RM_EINVAL;
    *out = (rm_gang_kind)i;
    return RM_OK;
}

const char *rm_gang_name(rm_gang_kind k)
{
    return (unsigned)k <= RM_GANG_COSCHEDULING ? gang_names[k] : "none";
}

const char *rm_gang_group(rm_gang_kind k)
{
    return k == RM_GANG_VOLCANO ? RM_VOLCANO_GROUP : k == RM_GANG_COSCHEDULING ? RM_COSCHED_GROUP : NULL;
}

const char *rm_gang_version(rm_gang_kind k)
{
    return k == RM_GANG_VOLCANO ? RM_VOLCANO_VERSION : k == RM_GANG_COSCHEDULING ? RM_COSCHED_VERSION : NULL;
}

int rm_gang_size(const rm_tj *tj)
{
    int g = tj->spec.min_replicas > 0 ? tj->spec.min_replicas : tj->spec.replicas;
    return g < 1 ? 1 : g;
}

int rm_gang_min_resources(const rm_tj *tj, rm_reslist *out, rm_err *err)
{
    if (tj->spec.sched.min_resources)
        return rm_reslist_from_json(tj->spec.sched.min_resources,
                                    "spec.runPolicy.schedulingPolicy.minResources", out, err);
    RM_CHECK(rm_pod_requests(oget(tj->spec.template, "spec"), out, err));
    if (rm_reslist_scale(out, rm_gang_size(tj)))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.minResources",
                            "the gang's requests overflow");
    return RM_OK;
}

/* ---------------- PodGroup ---------------- */
static const char *volcano_queue(const rm_tj *tj)
{
    if (tj->spec.sched.queue)
        return tj->spec.sched.queue;
    const cJSON *a = oget(tj->annotations, "scheduling.volcano.sh/queue-name");
    return cJSON_IsString(a) && a->valuestring[0] ? a->valuestring : "default";
}

cJSON *rm_gang_podgroup(const rm_tj *tj, rm_gang_kind kind, rm_err *err)
{
    if (kind == RM_GANG_NONE) {
        rm_errf(err, RM_EINVAL, "no gang scheduler");
        return NULL;
    }
    rm_reslist mr;
    if (rm_gang_min_resources(tj, &mr, err))
        return NULL;
    int gang = rm_gang_size(tj);
    char av[96];
    snprintf(av, sizeof av, "%s/%s", rm_gang_group(kind), rm_gang_version(kind));
    cJSON *pg = cJSON_CreateObject();
    cJSON_AddStringToObject(pg, "apiVersion", av);
    cJSON_AddStringToObject(pg, "kind", "PodGroup");
    cJSON *md = cJSON_AddObjectToObject(pg, "metadata");
    cJSON_AddStringToObject(md, "name", tj->name);
    cJSON_AddStringToObject(md, "namespace", tj->namespace_ ? tj->namespace_ : "default");
    cJSON *l = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(l, "ringmaster.dev/job-name", tj->name);
    cJSON_AddStringToObject(l, "app.kubernetes.io/managed-by", "ringmaster");
    rm_json_add_controller_ref(md, RM_TJ_API_VERSION, RM_TJ_KIND, tj->name, tj->uid);
    cJSON *sp = cJSON_AddObjectToObject(pg, "spec");
    cJSON_AddNumberToObject(sp, "minMember", gang);
    if (kind == RM_GANG_VOLCANO) {
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(sp, "minTaskMember"), RM_KUEUE_PODSET, gang);
        cJSON_AddStringToObject(sp, "queue", volcano_queue(tj));
        if (tj->spec.sched.priority_class)
            cJSON_AddStringToObject(sp, "priorityClassName", tj->spec.sched.priority_class);
    } else if (tj->spec.sched.schedule_timeout_seconds > 0) {
        cJSON_AddNumberToObject(sp, "scheduleTimeoutSeconds", tj->spec.sched.schedule_timeout_seconds);
    }
    cJSON_AddItemToObject(sp, "minResources", rm_reslist_to_json(&mr));
    return pg;
}

static bool json_differs(const cJSON *a, const cJSON *b)
{
    if (!a && !b)
        return false;
    if (!a || !b)
        return true;
    return !cJSON_Compare(a, b, 1);
}

/* minResources compared as quantities ("4" == "4000m") */
static bool res_differs(const cJSON *a, const cJSON *b)
{
    rm_reslist x, y;
    rm_err e = {0};
    if (rm_reslist_from_json(a, "a", &x, &e) || rm_reslist_from_json(b, "b", &y, &e))
        return json_differs(a, b);
    if (x.n != y.n)
        return true;
    for (int i = 0; i < x.n; i++)
        if (!rm_reslist_has(&y, x.r[i].name) || rm_reslist_get(&y, x.r[i].name) != x.r[i].milli)
            return true;
    return false;
}

bool rm_gang_podgroup_differs(const cJSON *have, const cJSON *want)
{
    const cJSON *h = oget(have, "spec"), *w = oget(want, "spec");
    static const char *const keys[] = {"minMember", "minTaskMember", "priorityClassName",
                                       "scheduleTimeoutSeconds", NULL};
    for (int i = 0; keys[i]; i++)
        if (json_differs(oget(h, keys[i]), oget(w, keys[i])))
            return true;
    return res_differs(oget(h, "minResources"), oget(w, "minResources"));
}

static cJSON *ensure_obj(cJSON *parent, const char *k)
{
    cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, k);
    if (!cJSON_IsObject(o)) {
        cJSON_DeleteItemFromObjectCaseSensitive(parent, k);
        o = cJSON_AddObjectToObject(parent, k);
    }
    return o;
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddStringToObject(o, k, v);
}

bool rm_gang_decorate_pod(cJSON *pod, const rm_tj *tj, rm_gang_kind kind, const char *cosched)
{
    cJSON *spec = ensure_obj(pod, "spec");
    cJSON *md = ensure_obj(pod, "metadata");
    const cJSON *pc = oget(spec, "priorityClassName");
    if (tj->spec.sched.priority_class && !(cJSON_IsString(pc) && pc->valuestring[0]))
        set_str(spec, "priorityClassName", tj->spec.sched.priority_class);
    if (kind == RM_GANG_NONE)
        return false;
    const char *want = kind == RM_GANG_VOLCANO ? "volcano" : cosched ? cosched : RM_COSCHED_DEFAULT_SCHEDULER;
    const cJSON *sn = oget(spec, "schedulerName");
    bool foreign = false;
    if (cJSON_IsString(sn) && sn->valuestring[0] && strcmp(sn->valuestring, want) != 0)
        foreign = true; /* the user's choice stands (training-operator common/pod.go) */
    else
        set_str(spec, "schedulerName", want);
    if (kind == RM_GANG_VOLCANO) {
        cJSON *a = ensure_obj(md, "annotations");
        set_str(a, RM_VOLCANO_GROUP_ANNOTATION, tj->name);
        set_str(a, RM_VOLCANO_TASK_SPEC, RM_KUEUE_PODSET);
    } else {
        set_str(ensure_obj(md, "labels"), RM_COSCHED_POD_GROUP_LABEL, tj->name);
    }
    return foreign;
}

void rm_gang_decide(const rm_gang_in *in, rm_gang_out *out)
{
    memset(out, 0, sizeof(*out));
    if (in->kind == RM_GANG_NONE)
        return;                                  /* G1 */
    if (in->job_terminal || in->job_suspended) { /* G2 */
        out->delete_pg = in->pg_exists && !in->pg_deleting;
        return;
    }
    if (in->job_invalid) /* G3 */
        return;
    if (!in->pg_exists || in->pg_deleting) { /* G4 */
        out->create_pg = !in->pg_exists;
        out->hold_pods = true;
        return;
    }
    out->update_pg = in->pg_differs;
    if (in->kind == RM_GANG_VOLCANO)
        out->hold_pods = !in->pg_phase || !in->pg_phase[0] || !strcmp(in->pg_phase, "Pending");
}

/* ---------------- Kueue ---------------- */
const char *rm_kueue_queue_name(const rm_tj *tj)
{
    const cJSON *q = oget(tj->labels, RM_KUEUE_QUEUE_LABEL);
    return cJSON_IsString(q) && q->valuestring[0] ? q->valuestring : NULL;
}

const char *rm_kueue_workload_name(const rm_tj *tj, char *buf, size_t cap)
{
    /* FNV-1a of the uid (a recreated job of the same name gets another Workload) */
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = tj->uid ? tj->uid : tj->name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(buf, cap, "trainingjob-%.230s-%05llx", tj->name, (unsigned long long)(h & 0xfffff));
    return buf;
}

cJSON *rm_kueue_workload(const rm_tj *tj, const char *default_image, rm_err *err)
{
    const char *q = rm_kueue_queue_name(tj);
    if (!q) {
        rm_errf(err, RM_EINVAL, "job has no label " RM_KUEUE_QUEUE_LABEL);
        return NULL;
    }
    char name[300];
    rm_kueue_workload_name(tj, name, sizeof name);
    cJSON *wl = cJSON_CreateObject();
    cJSON_AddStringToObject(wl, "apiVersion", RM_KUEUE_GROUP "/" RM_KUEUE_VERSION);
    cJSON_AddStringToObject(wl, "kind", "Workload");
    cJSON *md = cJSON_AddObjectToObject(wl, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", tj->namespace_ ? tj->namespace_ : "default");
    cJSON *l = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(l, RM_KUEUE_JOB_UID_LABEL, tj->uid ? tj->uid : "");
    cJSON_AddStringToObject(l, "ringmaster.dev/job-name", tj->name);
    rm_json_add_controller_ref(md, RM_TJ_API_VERSION, RM_TJ_KIND, tj->name, tj->uid);
    cJSON *sp = cJSON_AddObjectToObject(wl, "spec");
    cJSON_AddStringToObject(sp, "queueName", q);
    if (tj->spec.sched.priority_class) {
        cJSON_AddStringToObject(sp, "priorityClassName", tj->spec.sched.priority_class);
        cJSON_AddStringToObject(sp, "priorityClassSource", "scheduling.k8s.io/priorityclass");
    }
    cJSON *sets = cJSON_AddArrayToObject(sp, "podSets");
    cJSON *ps = cJSON_CreateObject();
    cJSON_AddItemToArray(sets, ps);
    cJSON_AddStringToObject(ps, "name", RM_KUEUE_PODSET);
    cJSON_AddNumberToObject(ps, "count", tj->spec.replicas);
    if (tj->spec.min_replicas > 0 && tj->spec.min_replicas < tj->spec.replicas)
        cJSON_AddNumberToObject(ps, "minCount", tj->spec.min_replicas);
    cJSON *t = tj->spec.template ? cJSON_Duplicate(tj->spec.template, 1) : cJSON_CreateObject();
    cJSON *tsp = ensure_obj(t, "spec");
    const cJSON *cs = oget(tsp, "containers");
    if (!cJSON_IsArray(cs) || cJSON_GetArraySize(cs) == 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(tsp, "containers");
        cJSON *arr = cJSON_AddArrayToObject(tsp, "containers");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", "worker");
        cJSON_AddStringToObject(c, "image", default_image ? default_image : "ringmaster/worker:latest");
        cJSON_AddItemToArray(arr, c);
    }
    cJSON_AddItemToObject(ps, "template", t);
    return wl;
}

static void kueue_decide_act(const rm_kueue_in *in, rm_kueue_out *out);

void rm_kueue_decide(const rm_kueue_in *in, rm_kueue_out *out)
{
    memset(out, 0, sizeof(*out));
    kueue_decide_act(in, out);
    /* K7 */
    out->pods_ready = -1;
    if (in->wl_exists && !in->wl_finished) {
        bool want = !in->job_terminal && !in->job_suspended && in->wl_admitted && !in->wl_evicted &&
                    in->admitted_count > 0 && in->ready_pods >= in->admitted_count;
        if (want != in->wl_pods_ready)
            out->pods_ready = want;
    }
}

static void kueue_decide_act(const rm_kueue_in *in, rm_kueue_out *out)
{
    if (in->job_terminal) { /* K1 */
        if (in->wl_exists && !in->wl_finished)
            out->act = RM_KUEUE_FINISH;
        return;
    }
    if (!in->wl_exists) { /* K2 */
        out->act = RM_KUEUE_CREATE_WORKLOAD;
        out->hold_pods = true;
        return;
    }
    if (in->wl_evicted) { /* K3 */
        if (!in->job_suspended) {
            out->act = RM_KUEUE_SUSPEND;
            out->hold_pods = true;
        } else if (in->template_injected) {
            out->act = RM_KUEUE_SUSPEND; /* restore still pending */
        } else if (in->active_pods == 0 && in->wl_quota_reserved) {
            out->act = RM_KUEUE_CLEAR_ADMISSION;
        }
        return;
    }
    if (in->job_suspended && in->wl_admitted) { /* K4 */
        out->act = RM_KUEUE_RUN;
        out->hold_pods = true;
        return;
    }
    if (!in->job_suspended && in->wl_admitted && in->count_mismatch) { /* K6 */
        out->act = RM_KUEUE_REPLACE;
        out->hold_pods = true;
        return;
    }
    if (!in->job_suspended && !in->wl_admitted) { /* K5 */
        out->act = RM_KUEUE_SUSPEND;
        out->hold_pods = true;
    }
}

static const cJSON *workload_podset(const cJSON *wl)
{
    const cJSON *ps;
    cJSON_ArrayForEach(ps, rm_json_path(wl, "spec.podSets"))
    {
        const cJSON *n = oget(ps, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, RM_KUEUE_PODSET))
            return ps;
    }
    return NULL;
}

static int admitted_count(const cJSON *wl, const cJSON *ps)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, rm_json_path(wl, "status.admission.podSetAssignments"))
    {
        const cJSON *n = oget(a, "name"), *c = oget(a, "count");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, RM_KUEUE_PODSET) && cJSON_IsNumber(c))
            return c->valueint;
    }
    const cJSON *c = oget(ps, "count");
    return cJSON_IsNumber(c) ? c->valueint : 0;
}

int rm_kueue_admitted_count(const cJSON *wl)
{
    const cJSON *ps = workload_podset(wl);
    return ps ? admitted_count(wl, ps) : 0;
}

cJSON *rm_kueue_run_patch(const cJSON *job_spec, const cJSON *wl, const cJSON *flavors, rm_err *err)
{
    const cJSON *ps = workload_podset(wl);
    if (!ps) {
        rm_errf(err, RM_EPROTO, "Workload has no pod set \"" RM_KUEUE_PODSET "\"");
        return NULL;
    }
    int count = admitted_count(wl, ps);
    if (count < 1) {
        rm_errf(err, RM_EPROTO, "Workload admits no pod of pod set \"" RM_KUEUE_PODSET "\"");
        return NULL;
    }
    cJSON *p = cJSON_CreateObject();
    cJSON *sp = cJSON_AddObjectToObject(p, "spec");
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(sp, "runPolicy"), "suspend", 0);
    cJSON_AddNumberToObject(sp, "replicas", count);
    /* podset.Merge: the flavors' node labels join the template's (a conflicting key is an
     * error in Kueue; the flavor's value is the admitted one, so it wins here) */
    const cJSON *tsp = rm_json_path(job_spec, "template.spec");
    cJSON *ns = cJSON_Duplicate(oget(tsp, "nodeSelector"), 1);
    if (!cJSON_IsObject(ns)) {
        cJSON_Delete(ns);
        ns = cJSON_CreateObject();
    }
    cJSON *tol = cJSON_Duplicate(oget(tsp, "tolerations"), 1);
    if (!cJSON_IsArray(tol)) {
        cJSON_Delete(tol);
        tol = cJSON_CreateArray();
    }
    const cJSON *f, *kv;
    cJSON_ArrayForEach(f, flavors)
    {
        cJSON_ArrayForEach(kv, rm_json_path(f, "spec.nodeLabels")) if (cJSON_IsString(kv))
            set_str(ns, kv->string, kv->valuestring);
        cJSON_ArrayForEach(kv, rm_json_path(f, "spec.tolerations"))
        {
            bool dup = false;
            const cJSON *t;
            cJSON_ArrayForEach(t, tol) dup |= cJSON_Compare(t, kv, 1);
            if (!dup)
                cJSON_AddItemToArray(tol, cJSON_Duplicate(kv, 1));
        }
    }
    cJSON *tp = cJSON_AddObjectToObject(cJSON_AddObjectToObject(sp, "template"), "spec");
    if (ns->child)
        cJSON_AddItemToObject(tp, "nodeSelector", ns);
    else
        cJSON_Delete(ns);
    if (tol->child)
        cJSON_AddItemToObject(tp, "tolerations", tol);
    else
        cJSON_Delete(tol);
    return p;
}

cJSON *rm_kueue_restore_patch(const cJSON *job_spec, const cJSON *wl)
{
    const cJSON *ps = workload_podset(wl);
    const cJSON *wsp = rm_json_path(ps, "template.spec");
    const cJSON *jsp = rm_json_path(job_spec, "template.spec");
    cJSON *p = cJSON_CreateObject();
    cJSON *sp = cJSON_AddObjectToObject(p, "spec");
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(sp, "runPolicy"), "suspend", 1);
    if (!ps)
        return p;
    const cJSON *c = oget(ps, "count");
    if (cJSON_IsNumber(c))
        cJSON_AddNumberToObject(sp, "replicas", c->valueint);
    /* merge patch: keys the admission added become null, the Workload's values come back */
    const cJSON *jns = oget(jsp, "nodeSelector"), *wns = oget(wsp, "nodeSelector"), *kv;
    cJSON *ns = cJSON_CreateObject();
    cJSON_ArrayForEach(kv, jns) if (!oget(wns, kv->string)) cJSON_AddNullToObject(ns, kv->string);
    cJSON_ArrayForEach(kv, wns) cJSON_AddItemToObject(ns, kv->string, cJSON_Duplicate(kv, 1));
    cJSON *tp = cJSON_AddObjectToObject(cJSON_AddObjectToObject(sp, "template"), "spec");
    if (!(wns && wns->child) && jns) {
        cJSON_Delete(ns);
        cJSON_AddNullToObject(tp, "nodeSelector"); /* the template had none: remove it whole */
    } else if (ns->child) {
        cJSON_AddItemToObject(tp, "nodeSelector", ns);
    } else {
        cJSON_Delete(ns);
    }
    const cJSON *wt = oget(wsp, "tolerations");
    if (wt)
        cJSON_AddItemToObject(tp, "tolerations", cJSON_Duplicate(wt, 1));
    else if (oget(jsp, "tolerations"))
        cJSON_AddNullToObject(tp, "tolerations");
    return p;
}

cJSON *rm_kueue_replace_patch(const cJSON *job_spec, const cJSON *wl)
{
    cJSON *p = rm_kueue_restore_patch(job_spec, wl);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "spec"), "replicas");
    return p;
}

bool rm_kueue_template_injected(const cJSON *job_spec, const cJSON *wl)
{
    const cJSON *ps = workload_podset(wl);
    if (!ps)
        return false;
    const cJSON *c = oget(ps, "count"), *r = oget(job_spec, "replicas");
    if (cJSON_IsNumber(c) && cJSON_IsNumber(r) && c->valueint != r->valueint)
        return true;
    const cJSON *wsp = rm_json_path(ps, "template.spec"), *jsp = rm_json_path(job_spec, "template.spec");
    const cJSON *a = oget(jsp, "nodeSelector"), *b = oget(wsp, "nodeSelector");
    bool ea = !a || !a->child, eb = !b || !b->child;
    if (!(ea && eb) && json_differs(a, b))
        return true;
    a = oget(jsp, "tolerations");
    b = oget(wsp, "tolerations");
    ea = !a || !a->child;
    eb = !b || !b->child;
    return !(ea && eb) && json_differs(a, b);
}

bool rm_kueue_condition(const cJSON *obj, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, rm_json_path(obj, "status.conditions"))
    {
        const cJSON *t = oget(c, "type"), *s = oget(c, "status");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, type))
            return cJSON_IsString(s) && !strcmp(s->valuestring, "True");
    }
    return false;
}

void rm_kueue_set_condition(cJSON *obj, const char *type, bool status, const char *reason,
                            const char *message, const char *now)
{
    cJSON *st = ensure_obj(obj, "status");
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(st, "conditions");
    if (!cJSON_IsArray(conds)) {
        cJSON_DeleteItemFromObjectCaseSensitive(st, "conditions");
        conds = cJSON_AddArrayToObject(st, "conditions");
    }
    cJSON *c = NULL, *it;
    cJSON_ArrayForEach(it, conds)
    {
        const cJSON *t = oget(it, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, type))
            c = it;
    }
    const char *sv = status ? "True" : "False";
    if (!c) {
        c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "type", type);
        cJSON_AddItemToArray(conds, c);
    }
    const cJSON *old = oget(c, "status");
    if (!(cJSON_IsString(old) && !strcmp(old->valuestring, sv)) || !oget(c, "lastTransitionTime"))
        set_str(c, "lastTransitionTime", now);
    set_str(c, "status", sv);
    set_str(c, "reason", reason);
    set_str(c, "message", message);
}
