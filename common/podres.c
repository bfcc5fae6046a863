/* podres.c — see podres.h. */
#include "common/podres.h"
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "common/quantity.h"

static const cJSON *oget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* ---------------- resource lists ---------------- */
static rm_res *res_find(rm_reslist *l, const char *name, bool create)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->r[i].name, name))
            return &l->r[i];
    if (!create || l->n >= RM_RES_MAX || strlen(name) >= sizeof(l->r[0].name))
        return NULL;
    rm_res *r = &l->r[l->n++];
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->milli = 0;
    return r;
}

int64_t rm_reslist_get(const rm_reslist *l, const char *name)
{
    rm_res *r = res_find((rm_reslist *)l, name, false);
    return r ? r->milli : 0;
}

bool rm_reslist_has(const rm_reslist *l, const char *name)
{
    return res_find((rm_reslist *)l, name, false) != NULL;
}

int rm_reslist_add(rm_reslist *l, const char *name, int64_t milli)
{
    rm_res *r = res_find(l, name, true);
    if (!r)
        return RM_ETOOBIG;
    if (milli > INT64_MAX - r->milli)
        return RM_EINVAL;
    r->milli += milli;
    return RM_OK;
}

int rm_reslist_sum(rm_reslist *a, const rm_reslist *b)
{
    for (int i = 0; i < b->n; i++)
        RM_CHECK(rm_reslist_add(a, b->r[i].name, b->r[i].milli));
    return RM_OK;
}

int rm_reslist_max(rm_reslist *a, const rm_reslist *b)
{
    for (int i = 0; i < b->n; i++) {
        rm_res *r = res_find(a, b->r[i].name, true);
        if (!r)
            return RM_ETOOBIG;
        if (b->r[i].milli > r->milli)
            r->milli = b->r[i].milli;
    }
    return RM_OK;
}

int rm_reslist_scale(rm_reslist *a, int64_t k)
{
    for (int i = 0; i < a->n; i++) {
        if (k > 0 && a->r[i].milli > INT64_MAX / k)
            return RM_EINVAL;
        a->r[i].milli *= k;
    }
    return RM_OK;
}

cJSON *rm_reslist_to_json(const rm_reslist *l)
{
    cJSON *o = cJSON_CreateObject();
    char b[64];
    for (int i = 0; o && i < l->n; i++)
        cJSON_AddStringToObject(o, l->r[i].name, rm_quantity_format(l->r[i].milli, b, sizeof b));
    return o;
}

int rm_reslist_from_json(const cJSON *o, const char *field, rm_reslist *l, rm_err *err)
{
    memset(l, 0, sizeof(*l));
    if (!o)
        return RM_OK;
    if (!cJSON_IsObject(o))
        return rm_err_field(err, RM_EINVAL, field, "must be an object of resource name -> quantity");
    const cJSON *q;
    cJSON_ArrayForEach(q, o)
    {
        int64_t m;
        if (rm_quantity_json_milli(q, &m) != RM_OK)
            return rm_err_field(err, RM_EINVAL, field, "%s: not a resource quantity", q->string);
        int rc = rm_reslist_add(l, q->string, m);
        if (rc)
            return rm_err_field(err, rc, field, "%s: %s", q->string,
                                rc == RM_ETOOBIG ? "too many resource names (at most 16)" : "too large");
    }
    return RM_OK;
}

/* ---------------- pod requests (k8s.io/component-helpers/resource PodRequests) ---------------- */
int rm_container_requests(const cJSON *c, const char *field, rm_reslist *out, rm_err *err)
{
    char f[256];
    const cJSON *res = oget(c, "resources");
    rm_reslist req, lim;
    snprintf(f, sizeof f, "%s.resources.requests", field);
    RM_CHECK(rm_reslist_from_json(oget(res, "requests"), f, &req, err));
    snprintf(f, sizeof f, "%s.resources.limits", field);
    RM_CHECK(rm_reslist_from_json(oget(res, "limits"), f, &lim, err));
    /* defaulting (pkg/apis/core/v1/defaults.go SetDefaults_ResourceRequirements... in
     * SetDefaults_Pod): a resource with a limit and no request requests its limit */
    for (int i = 0; i < lim.n; i++)
        if (!res_find(&req, lim.r[i].name, false))
            RM_CHECK(rm_reslist_add(&req, lim.r[i].name, lim.r[i].milli));
    *out = req;
    return RM_OK;
}

int rm_pod_requests(const cJSON *spec, rm_reslist *out, rm_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!spec)
        return RM_OK;
    rm_reslist reqs, init_max, sidecars, one;
    memset(&reqs, 0, sizeof reqs);
    memset(&init_max, 0, sizeof init_max);
    memset(&sidecars, 0, sizeof sidecars);
    const cJSON *c;
    int i = 0;
    char f[128];
    cJSON_ArrayForEach(c, oget(spec, "containers"))
    {
        snprintf(f, sizeof f, "spec.template.spec.containers[%d]", i++);
        RM_CHECK(rm_container_requests(c, f, &one, err));
        RM_CHECK(rm_reslist_sum(&reqs, &one));
    }
    i = 0;
    cJSON_ArrayForEach(c, oget(spec, "initContainers"))
    {
        snprintf(f, sizeof f, "spec.template.spec.initContainers[%d]", i++);
        RM_CHECK(rm_container_requests(c, f, &one, err));
        const cJSON *rp = oget(c, "restartPolicy");
        if (cJSON_IsString(rp) && !strcmp(rp->valuestring, "Always")) {
            /* a sidecar runs beside the containers and every later init container */
            RM_CHECK(rm_reslist_sum(&reqs, &one));
            RM_CHECK(rm_reslist_sum(&sidecars, &one));
            one = sidecars;
        } else {
            RM_CHECK(rm_reslist_sum(&one, &sidecars));
        }
        RM_CHECK(rm_reslist_max(&init_max, &one));
    }
    RM_CHECK(rm_reslist_max(&reqs, &init_max));
    rm_reslist ov;
    RM_CHECK(rm_reslist_from_json(oget(spec, "overhead"), "spec.template.spec.overhead", &ov, err));
    RM_CHECK(rm_reslist_sum(&reqs, &ov));
    *out = reqs;
    return RM_OK;
}
