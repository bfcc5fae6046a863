/* spec_guard.c — the per-field rule table of a running TrainingJob's spec and the running-spec
 * record (see spec_guard.h; docs/trainingjob-api.md#changing-a-running-job). */
#include "operator/spec_guard.h"
#include <stdio.h>
#include <string.h>
#include "common/rm.h"

const rm_spec_field rm_spec_fields[] = {
    {"backend", RM_SPEC_IMMUTABLE, "the group's transport; peers on two backends never meet"},
    {"strategy", RM_SPEC_IMMUTABLE, "allreduce workers and parameter servers do not mix"},
    {"parameterServer", RM_SPEC_IMMUTABLE, "shards, mode and step counts every worker and server share"},
    {"parallelism", RM_SPEC_IMMUTABLE, "the stage split every rank and checkpoint follows"},
    {"training", RM_SPEC_IMMUTABLE,
     "the model, data, optimizer, schedule and sharding each rank computes with; a replacement "
     "restores the group's checkpoint"},
    {"checkpoint", RM_SPEC_IMMUTABLE,
     "where and when the group writes the checkpoint a replacement restores"},
    {"placement", RM_SPEC_IMMUTABLE, "the node groups the hierarchical allreduce is built on"},
    {"output", RM_SPEC_IMMUTABLE, "where the running group exports the model"},
    {"runtimeRef", RM_SPEC_IMMUTABLE,
     "the runtime whose template the running spec was merged from (status.runtime)"},
    {"replicas", RM_SPEC_MUTABLE, "a resize: a new rendezvous round restores from the checkpoint"},
    {"minReplicas", RM_SPEC_MUTABLE, "the elastic floor, from the next round"},
    {"maxReplicas", RM_SPEC_MUTABLE, "the elastic ceiling, from the next round"},
    {"restartPolicy", RM_SPEC_MUTABLE, "read by the operator at its next decision"},
    {"runPolicy", RM_SPEC_MUTABLE,
     "read by the operator at its next decision; suspend stops the pods and resuming restores "
     "from the checkpoint (managedBy and schedulingPolicy.queue are immutable by their own rules)"},
    {"managedBy", RM_SPEC_MUTABLE, "immutable by its own rule"},
    {"template", RM_SPEC_MUTABLE, "pods created afterwards (Kueue writes node selectors here)"},
};
const int rm_spec_nfields = (int)(sizeof rm_spec_fields / sizeof rm_spec_fields[0]);

static bool known(const char *key)
{
    for (int i = 0; i < rm_spec_nfields; i++)
        if (strcmp(rm_spec_fields[i].key, key) == 0)
            return true;
    return false;
}

rm_spec_rule rm_spec_rule_of(const char *key)
{
    for (int i = 0; key && i < rm_spec_nfields; i++)
        if (strcmp(rm_spec_fields[i].key, key) == 0)
            return rm_spec_fields[i].rule;
    return RM_SPEC_IMMUTABLE;
}

cJSON *rm_spec_running(const cJSON *spec)
{
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    const cJSON *it, *from = cJSON_IsObject(spec) ? spec : (const cJSON *)NULL;
    cJSON_ArrayForEach(it, from)
    {
        if (!it->string || rm_spec_rule_of(it->string) != RM_SPEC_IMMUTABLE)
            continue;
        cJSON *c = cJSON_Duplicate(it, 1);
        if (!c || !cJSON_AddItemToObject(r, it->string, c)) {
            cJSON_Delete(c);
            cJSON_Delete(r);
            return NULL;
        }
    }
    return r;
}

typedef struct diff_out {
    char *buf;
    size_t cap, len;
    int n;
} diff_out;

static void add_path(diff_out *d, const char *path)
{
    d->n++;
    if (d->len + 4 >= d->cap)
        return; /* already truncated */
    size_t need = strlen(path) + (d->len ? 2 : 0);
    if (d->len + need + 4 >= d->cap) {
        snprintf(d->buf + d->len, d->cap - d->len, "%s...", d->len ? ", " : "");
        d->len = d->cap;
        return;
    }
    d->len += (size_t)snprintf(d->buf + d->len, d->cap - d->len, "%s%s", d->len ? ", " : "", path);
}

/* The paths under `path` where a and b (either may be NULL = absent) differ: down through objects
 * on both sides, else the path itself. */
static void diff(const cJSON *a, const cJSON *b, const char *path, int depth, diff_out *d)
{
    if (!a && !b)
        return;
    if (a && b && cJSON_IsObject(a) && cJSON_IsObject(b) && depth < 16) {
        const cJSON *it;
        char sub[256];
        cJSON_ArrayForEach(it, a)
        {
            snprintf(sub, sizeof sub, "%s.%s", path, it->string ? it->string : "");
            diff(it, cJSON_GetObjectItemCaseSensitive(b, it->string), sub, depth + 1, d);
        }
        cJSON_ArrayForEach(it, b)
        {
            if (cJSON_GetObjectItemCaseSensitive(a, it->string))
                continue; /* compared above */
            snprintf(sub, sizeof sub, "%s.%s", path, it->string ? it->string : "");
            diff(NULL, it, sub, depth + 1, d);
        }
        return;
    }
    if (!a || !b || !cJSON_Compare(a, b, 1))
        add_path(d, path);
}

int rm_spec_changed_fields(const cJSON *running, const cJSON *spec, char *field, size_t cap)
{
    diff_out d = {field, cap, 0, 0};
    if (cap)
        field[0] = 0;
    if (!cJSON_IsObject(spec))
        spec = NULL;
    if (!cJSON_IsObject(running))
        running = NULL;
    for (int i = 0; i < rm_spec_nfields; i++) {
        const rm_spec_field *f = &rm_spec_fields[i];
        if (f->rule != RM_SPEC_IMMUTABLE)
            continue;
        char path[64];
        snprintf(path, sizeof path, "spec.%s", f->key);
        diff(cJSON_GetObjectItemCaseSensitive(running, f->key),
             cJSON_GetObjectItemCaseSensitive(spec, f->key), path, 0, &d);
    }
    /* keys the table does not know are immutable too */
    const cJSON *it;
    char path[256];
    cJSON_ArrayForEach(it, running)
    {
        if (it->string && !known(it->string)) {
            snprintf(path, sizeof path, "spec.%s", it->string);
            diff(it, cJSON_GetObjectItemCaseSensitive(spec, it->string), path, 0, &d);
        }
    }
    cJSON_ArrayForEach(it, spec)
    {
        if (it->string && !known(it->string) && !cJSON_GetObjectItemCaseSensitive(running, it->string)) {
            snprintf(path, sizeof path, "spec.%s", it->string);
            diff(NULL, it, path, 0, &d);
        }
    }
    return d.n;
}

int rm_spec_hold(cJSON *spec, const cJSON *running)
{
    if (!cJSON_IsObject(spec))
        return RM_EINVAL;
    /* drop every immutable key, then put the record's copies in */
    for (cJSON *it = spec->child, *next; it; it = next) {
        next = it->next;
        if (it->string && rm_spec_rule_of(it->string) == RM_SPEC_IMMUTABLE)
            cJSON_Delete(cJSON_DetachItemViaPointer(spec, it));
    }
    const cJSON *it, *from = cJSON_IsObject(running) ? running : (const cJSON *)NULL;
    cJSON_ArrayForEach(it, from)
    {
        if (!it->string || rm_spec_rule_of(it->string) != RM_SPEC_IMMUTABLE)
            continue;
        cJSON *c = cJSON_Duplicate(it, 1);
        if (!c || !cJSON_AddItemToObject(spec, it->string, c)) {
            cJSON_Delete(c);
            return RM_ENOMEM;
        }
    }
    return RM_OK;
}
