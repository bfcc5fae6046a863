/* queueing.c — the kube runtime's gang scheduling and Kueue steps (see runtime_internal.h).
 *
 * Design: the decisions are the pure cores' (operator/gang.h: rm_gang_decide for the job's
 * PodGroup, rm_kueue_decide for its self-managed Workload, docs/gang-kueue.md §4(b)); these steps read
 * the PodGroup or Workload (neither is watched, so a GET per pass), ask the core, and execute
 * its answer. Both run before the reconcile core in each sync pass, since they may suspend the job,
 * run it, or hold its pods back. */
#include "operator/kube/runtime_internal.h"
#include <stdio.h>
#include <string.h>
#include "common/clock.h"
#include "common/json.h"
#include "common/trainingjob.h"
#include "operator/gang.h"

/* ---- gang scheduling: the job's PodGroup (operator/gang.h rm_gang_decide) ---- */
int rm_kube_rt_gang_step(rm_kube_rt *rt, const rm_tj *tj, job_mem *m, bool invalid, bool *hold,
                         double *requeue_after, rm_err *err)
{
    rm_gang_kind kind = (rm_gang_kind)rt->c.gang;
    if (kind == RM_GANG_NONE)
        return RM_OK;
    char coll[640], item[900];
    snprintf(coll, sizeof coll, "/apis/%s/%s/namespaces/%s/" RM_PODGROUP_PLURAL, rm_gang_group(kind),
             rm_gang_version(kind), tj->namespace_);
    snprintf(item, sizeof item, "%s/%s", coll, tj->name);
    cJSON *have = NULL;
    int rc = rm_kube_json(rt->c.client, "GET", item, NULL, NULL, &have, err);
    if (rc && rc != RM_ENOTFOUND)
        return rc;
    rc = RM_OK;
    bool terminal = tj->status.phase == RM_PHASE_SUCCEEDED || tj->status.phase == RM_PHASE_FAILED;
    cJSON *want = NULL;
    if (!terminal && !tj->spec.run.suspend && !invalid) {
        rm_err perr = {0};
        want = rm_gang_podgroup(tj, kind, &perr);
        if (!want)
            invalid = true; /* a template whose requests do not parse: the core reports it */
    }
    const cJSON *ph = rm_json_path(have, "status.phase");
    rm_gang_in in = {
        .kind = kind,
        .job_terminal = terminal,
        .job_suspended = tj->spec.run.suspend,
        .job_invalid = invalid,
        .pg_exists = have != NULL,
        .pg_deleting = rm_json_path(have, "metadata.deletionTimestamp") != NULL,
        .pg_phase = cJSON_IsString(ph) ? ph->valuestring : NULL,
        .pg_differs = have && want && rm_gang_podgroup_differs(have, want),
    };
    rm_gang_out o;
    rm_gang_decide(&in, &o);
    if (o.create_pg) {
        bool created = false;
        rc = rm_kube_rt_create(rt, coll, want, &created, err);
        if (!rc && created) {
            char note[256];
            snprintf(note, sizeof note, "Created %s PodGroup %s (minMember %d)", rm_gang_name(kind), tj->name,
                     rm_gang_size(tj));
            rm_kube_rt_job_event(rt, tj, false, "PodGroupCreated", note);
        }
    } else if (o.update_pg) {
        /* merge patch of the fields we own; Volcano's queue stays whatever the PodGroup has */
        cJSON *patch = cJSON_CreateObject();
        cJSON *sp = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(want, "spec"), 1);
        cJSON_DeleteItemFromObjectCaseSensitive(sp, "queue");
        cJSON_AddItemToObject(patch, "spec", sp);
        rc = rm_kube_json(rt->c.client, "PATCH", item, "application/merge-patch+json", patch, NULL, err);
        cJSON_Delete(patch);
    } else if (o.delete_pg) {
        cJSON *opts = cJSON_CreateObject();
        cJSON_AddStringToObject(opts, "propagationPolicy", "Background");
        rc = rm_kube_json(rt->c.client, "DELETE", item, NULL, opts, NULL, err);
        cJSON_Delete(opts);
        if (rc == RM_ENOTFOUND)
            rc = RM_OK;
        if (!rc)
            rm_kube_rt_job_event(rt, tj, false, "PodGroupDeleted",
                                 terminal ? "Deleted the PodGroup: the job finished"
                                          : "Deleted the PodGroup: the job is suspended");
    }
    if (o.hold_pods) {
        *hold = true;
        const char *phs = cJSON_IsString(ph) ? ph->valuestring : "not created yet";
        rm_sfmt(m->queued, sizeof m->queued,
                "PodGroupPending: the gang scheduler has not admitted PodGroup %s (phase %s); no pods are "
                "created until it does",
                tj->name, phs);
        if (*requeue_after <= 0 || *requeue_after > 1)
            *requeue_after = 1; /* PodGroups are not watched: look at the phase again soon */
        if (have && !m->pg_held_noted) {
            rm_kube_rt_job_event(rt, tj, false, "PodGroupPending",
                                 "Waiting for the gang scheduler "
                                 "to enqueue the PodGroup before creating pods");
            m->pg_held_noted = true;
        }
    } else {
        m->pg_held_noted = false;
    }
    cJSON_Delete(have);
    cJSON_Delete(want);
    return rc;
}

/* ---- Kueue: the self-managed Workload (operator/gang.h rm_kueue_decide, docs/gang-kueue.md §4(b)) ---- */
static int patch_job(rm_kube_rt *rt, const rm_tj *tj, job_mem *m, const cJSON *patch, rm_err *err)
{
    char p[640];
    snprintf(p, sizeof p, "/apis/%s/%s/namespaces/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, tj->namespace_,
             RM_TJ_PLURAL, tj->name);
    cJSON *got = NULL;
    int rc = rm_kube_json(rt->c.client, "PATCH", p, "application/merge-patch+json", patch, &got, err);
    if (!rc)
        rm_kube_rt_remember_latest(m, got); /* decide on nothing older than this write */
    cJSON_Delete(got);
    return rc;
}

static int put_wl_status(rm_kube_rt *rt, const char *wlpath, cJSON *wl, rm_err *err)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/status", wlpath);
    return rm_kube_json(rt->c.client, "PUT", p, NULL, wl, NULL, err);
}

/* The ResourceFlavors the admission assigned to pod set "worker" (for their nodeLabels and
 * tolerations), as an owned array. */
static int admitted_flavors(rm_kube_rt *rt, const cJSON *wl, cJSON **out, rm_err *err)
{
    *out = cJSON_CreateArray();
    const cJSON *a;
    cJSON_ArrayForEach(a, rm_json_path(wl, "status.admission.podSetAssignments"))
    {
        const cJSON *f;
        cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(a, "flavors"))
        {
            if (!cJSON_IsString(f))
                continue;
            bool seen = false;
            const cJSON *x;
            cJSON_ArrayForEach(x, *out) seen |=
                !strcmp(rm_json_path(x, "metadata.name") ? rm_json_path(x, "metadata.name")->valuestring : "",
                        f->valuestring);
            if (seen)
                continue;
            char p[512];
            snprintf(p, sizeof p, "/apis/" RM_KUEUE_GROUP "/" RM_KUEUE_VERSION "/resourceflavors/%s",
                     f->valuestring);
            cJSON *rf = NULL;
            int rc = rm_kube_json(rt->c.client, "GET", p, NULL, NULL, &rf, err);
            if (rc)
                return rc;
            cJSON_AddItemToArray(*out, rf);
        }
    }
    return RM_OK;
}

int rm_kube_rt_kueue_step(rm_kube_rt *rt, const cJSON *obj, const rm_tj *tj, job_mem *m, int active_pods,
                          bool *skip, double *requeue_after, rm_err *err)
{
    if (!rt->c.kueue || !rm_kueue_queue_name(tj))
        return RM_OK;
    char name[300], coll[640], item[1000], now[40], note[768];
    rm_kueue_workload_name(tj, name, sizeof name);
    snprintf(coll, sizeof coll, "/apis/" RM_KUEUE_GROUP "/" RM_KUEUE_VERSION "/namespaces/%s/workloads",
             tj->namespace_);
    snprintf(item, sizeof item, "%s/%s", coll, name);
    cJSON *wl = NULL;
    int rc = rm_kube_json(rt->c.client, "GET", item, NULL, NULL, &wl, err);
    if (rc && rc != RM_ENOTFOUND)
        return rc;
    rc = RM_OK;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    bool evicted = rm_kueue_condition(wl, "Evicted");
    rm_kueue_in in = {
        .job_terminal = tj->status.phase == RM_PHASE_SUCCEEDED || tj->status.phase == RM_PHASE_FAILED,
        .job_succeeded = tj->status.phase == RM_PHASE_SUCCEEDED,
        .job_suspended = tj->spec.run.suspend,
        .active_pods = active_pods,
        .wl_exists = wl != NULL,
        .wl_admitted = !evicted && rm_kueue_condition(wl, "Admitted") && rm_json_path(wl, "status.admission"),
        .wl_evicted = evicted,
        .wl_finished = rm_kueue_condition(wl, "Finished"),
        .wl_quota_reserved = rm_kueue_condition(wl, "QuotaReserved") || rm_json_path(wl, "status.admission"),
        .template_injected = wl && rm_kueue_template_injected(spec, wl),
    };
    in.count_mismatch =
        in.wl_admitted && !tj->spec.run.suspend && rm_kueue_admitted_count(wl) != tj->spec.replicas;
    in.wl_pods_ready = rm_kueue_condition(wl, "PodsReady");
    in.ready_pods = tj->status.ready_replicas;
    in.admitted_count = wl ? rm_kueue_admitted_count(wl) : 0;
    if (wl && !in.wl_admitted && !in.job_terminal) { /* rule R12: why the job waits */
        const cJSON *c, *why = NULL;
        cJSON_ArrayForEach(c, rm_json_path(wl, "status.conditions"))
        {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "QuotaReserved"))
                why = cJSON_GetObjectItemCaseSensitive(c, "message");
        }
        rm_sfmt(m->queued, sizeof m->queued, "QueuedByKueue: Workload %s in queue %s is not admitted%s%s",
                name, rm_kueue_queue_name(tj), cJSON_IsString(why) ? ": " : " (waiting for quota)",
                cJSON_IsString(why) ? why->valuestring : "");
    }
    rm_kueue_out o;
    rm_kueue_decide(&in, &o);
    rm_json_time(now, rm_wall());
    cJSON *patch = NULL, *flavors = NULL;
    switch (o.act) {
    case RM_KUEUE_NOTHING:
        break;
    case RM_KUEUE_CREATE_WORKLOAD: {
        cJSON *nw = rm_kueue_workload(tj, rt->worker_image, err);
        bool created = false;
        rc = nw ? rm_kube_rt_create(rt, coll, nw, &created, err) : RM_ENOMEM;
        cJSON_Delete(nw);
        if (!rc && created) {
            snprintf(note, sizeof note,
                     "Created Workload %s in queue %s; the job waits suspended for admission", name,
                     rm_kueue_queue_name(tj));
            rm_kube_rt_job_event(rt, tj, false, "WorkloadCreated", note);
        }
        if (!rc && !tj->spec.run.suspend) {
            patch = cJSON_Parse("{\"spec\":{\"runPolicy\":{\"suspend\":true}}}");
            rc = patch_job(rt, tj, m, patch, err);
        }
        break;
    }
    case RM_KUEUE_SUSPEND:
        patch = rm_kueue_restore_patch(spec, wl);
        rc = patch_job(rt, tj, m, patch, err);
        if (!rc && !tj->spec.run.suspend)
            rm_kube_rt_job_event(
                rt, tj, false, evicted ? "Evicted" : "Suspended",
                evicted ? "Kueue evicted the Workload: suspending (pods deleted, checkpoints kept)"
                        : "The Workload is not admitted: suspending until Kueue admits it");
        break;
    case RM_KUEUE_CLEAR_ADMISSION: {
        cJSON *st = cJSON_GetObjectItemCaseSensitive(wl, "status");
        cJSON_DeleteItemFromObjectCaseSensitive(st, "admission");
        rm_kueue_set_condition(wl, "QuotaReserved", false, "Pending",
                               "The workload was evicted; its pods are gone", now);
        rm_kueue_set_condition(wl, "Admitted", false, "NoReservation", "The workload has no reservation",
                               now);
        rm_kueue_set_condition(wl, "Requeued", true, "Evicted", "The workload was evicted and is requeued",
                               now);
        rc = put_wl_status(rt, item, wl, err);
        break;
    }
    case RM_KUEUE_RUN:
        rc = admitted_flavors(rt, wl, &flavors, err);
        if (!rc && !(patch = rm_kueue_run_patch(spec, wl, flavors, err)))
            rc = err->code ? err->code : RM_EPROTO;
        if (!rc)
            rc = patch_job(rt, tj, m, patch, err);
        if (!rc) {
            const cJSON *r = rm_json_path(patch, "spec.replicas");
            snprintf(note, sizeof note, "Kueue admitted Workload %s: running %d workers", name,
                     cJSON_IsNumber(r) ? r->valueint : tj->spec.replicas);
            rm_kube_rt_job_event(rt, tj, false, "Admitted", note);
        }
        break;
    case RM_KUEUE_REPLACE: {
        patch = rm_kueue_replace_patch(spec, wl);
        rc = patch_job(rt, tj, m, patch, err);
        cJSON *opts = cJSON_CreateObject();
        cJSON_AddStringToObject(opts, "propagationPolicy", "Background");
        if (!rc)
            rc = rm_kube_json(rt->c.client, "DELETE", item, NULL, opts, NULL, err);
        cJSON_Delete(opts);
        if (rc == RM_ENOTFOUND)
            rc = RM_OK;
        if (!rc) {
            snprintf(note, sizeof note,
                     "spec.replicas changed to %d while admitted for %d: suspended; "
                     "a new Workload asks Kueue for the new count",
                     tj->spec.replicas, rm_kueue_admitted_count(wl));
            rm_kube_rt_job_event(rt, tj, false, "WorkloadReplaced", note);
        }
        break;
    }
    case RM_KUEUE_FINISH:
        rm_kueue_set_condition(wl, "Finished", true, in.job_succeeded ? "Succeeded" : "Failed",
                               in.job_succeeded ? "The job succeeded" : "The job failed", now);
        rc = put_wl_status(rt, item, wl, err);
        break;
    }
    if (!rc && o.pods_ready >= 0 && (o.act == RM_KUEUE_NOTHING || o.act == RM_KUEUE_SUSPEND)) {
        /* the Workload as it is now (a SUSPEND does not write it) */
        rm_kueue_set_condition(
            wl, "PodsReady", o.pods_ready == 1, o.pods_ready ? "PodsReady" : "PodsNotReady",
            o.pods_ready ? "All admitted workers are ready" : "Not all admitted workers are ready", now);
        rc = put_wl_status(rt, item, wl, err);
    }
    if (!rc && o.hold_pods && o.act != RM_KUEUE_NOTHING)
        *skip = true;
    /* Workloads are not watched: while the job waits on Kueue, look again soon */
    if (!in.job_terminal && (tj->spec.run.suspend || o.act != RM_KUEUE_NOTHING || evicted) &&
        (*requeue_after <= 0 || *requeue_after > 1))
        *requeue_after = 1;
    cJSON_Delete(patch);
    cJSON_Delete(flavors);
    cJSON_Delete(wl);
    return rc;
}
