/* runtimes.c — the kube runtime's step for a job that names a training runtime (spec.runtimeRef;
 * common/tj_runtime.h, docs/trainingjob-api.md#runtimes).
 *
 * Design: the runtime is read once, when the operator first sees the job, and recorded in
 * status.runtime {kind, name, generation, template}; every later pass merges the recorded
 * template, never the live object, so editing or deleting the runtime never alters a job that
 * already resolved it (the same promise status.runningSpec makes for the job's own edits:
 * operator/spec_guard.h). The object is read with one GET past the informers: a runtime matters
 * only at a job's first pass, so the operator keeps no cache of them. */
#include <stdio.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/tj_runtime.h"
#include "operator/kube/client.h"
#include "operator/kube/runtime_internal.h"

/* The record of status.runtime (with its template), else NULL. */
static const cJSON *record_of(const cJSON *obj)
{
    const cJSON *r = rm_json_path(obj, "status.runtime");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "kind");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(r, "name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "template");
    return cJSON_IsString(k) && cJSON_IsString(n) && cJSON_IsObject(t) ? r : NULL;
}

static bool names(const cJSON *rec, const rm_runtime_ref *ref)
{
    return ref->present &&
           strcmp(cJSON_GetObjectItemCaseSensitive(rec, "kind")->valuestring, rm_runtime_ref_kind(ref)) ==
               0 &&
           strcmp(cJSON_GetObjectItemCaseSensitive(rec, "name")->valuestring, ref->name) == 0;
}

static bool str_set(const cJSON *obj, const char *path)
{
    const cJSON *v = rm_json_path(obj, path);
    return cJSON_IsString(v) && v->valuestring[0];
}

/* status.runtime of obj := {kind, name, generation, template} of the runtime object rto. */
static int record(cJSON *obj, const rm_runtime_ref *ref, const cJSON *rto, rm_err *err)
{
    cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    if (!cJSON_IsObject(st)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
        st = cJSON_AddObjectToObject(obj, "status");
    }
    cJSON *r = cJSON_CreateObject();
    cJSON *t = cJSON_Duplicate(rm_json_path(rto, "spec.template"), 1);
    const cJSON *gen = rm_json_path(rto, "metadata.generation");
    if (!st || !r || !t || !cJSON_AddStringToObject(r, "kind", rm_runtime_ref_kind(ref)) ||
        !cJSON_AddStringToObject(r, "name", ref->name) ||
        !cJSON_AddNumberToObject(r, "generation", cJSON_IsNumber(gen) ? gen->valuedouble : 0)) {
        cJSON_Delete(r);
        cJSON_Delete(t);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    cJSON_AddItemToObject(r, "template", t);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "runtime");
    cJSON_AddItemToObject(st, "runtime", r);
    return RM_OK;
}

int rm_kube_rt_runtime_step(rm_kube_rt *rt, const char *key, cJSON *obj, bool *done, rm_err *invalid,
                            rm_err *err)
{
    *done = false;
    const cJSON *rec = record_of(obj);
    /* a started job keeps the runtime it started with, whatever its runtimeRef says now (a changed
     * reference is then held back and reported like any immutable field: operator/spec_guard.h) */
    if (rec && str_set(obj, "status.startTime"))
        return rm_runtime_apply(obj, cJSON_GetObjectItemCaseSensitive(rec, "template"), err);
    rm_runtime_ref ref;
    if (rm_runtime_ref_of(obj, &ref, invalid) != RM_OK)
        return RM_OK; /* a malformed reference: the job's error (invalid->msg) */
    if (!ref.present)
        return RM_OK;
    if (!rec || !names(rec, &ref)) {
        const cJSON *ph = rm_json_path(obj, "status.phase");
        if (cJSON_IsString(ph) &&
            (!strcmp(ph->valuestring, "Failed") || !strcmp(ph->valuestring, "Succeeded"))) {
            *done = true; /* finished without resolving (its runtime was missing): nothing to read */
            return RM_OK;
        }
        char path[640];
        const cJSON *ns = rm_json_path(obj, "metadata.namespace");
        if (ref.cluster)
            snprintf(path, sizeof path, "/apis/%s/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
                     RM_CLUSTER_RUNTIME_PLURAL, ref.name);
        else
            snprintf(path, sizeof path, "/apis/%s/%s/namespaces/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
                     cJSON_IsString(ns) ? ns->valuestring : "default", RM_RUNTIME_PLURAL, ref.name);
        cJSON *rto = NULL;
        int rc = rm_kube_json(rt->c.client, "GET", path, NULL, NULL, &rto, err);
        if (rc == RM_ENOTFOUND) {
            rm_runtime_ref_error(&ref, "not found", invalid);
            return RM_OK;
        }
        if (rc)
            return rc; /* the API server or RBAC: retried with back-off */
        rm_err re = {0};
        if (rm_runtime_check(rto, &re) != RM_OK) {
            char why[600];
            rm_sfmt(why, sizeof why, "is invalid: %s", re.msg);
            rm_runtime_ref_error(&ref, why, invalid);
            cJSON_Delete(rto);
            return RM_OK;
        }
        rc = record(obj, &ref, rto, err);
        cJSON_Delete(rto);
        if (rc)
            return rc;
        rec = record_of(obj);
        rm_info("job resolved its runtime job=%s runtime=%s/%s generation=%.0f", key,
                rm_runtime_ref_kind(&ref), ref.name, rm_json_path(rec, "generation")->valuedouble);
    }
    return rm_runtime_apply(obj, cJSON_GetObjectItemCaseSensitive(rec, "template"), err);
}
