/* discovery.c — /version, legacy discovery (/api, /apis, /api/v1, /apis/G[/V]) and the minimal
 * OpenAPI v3 that `kubectl apply --validate=strict` needs (rules A2, B1–B2, C1–C3).
 *
 * Design: every document is generated from the kind registry on each request (they are small),
 * so a CRD created a moment ago is listed at once; OpenAPI hashes are a hash of the document, so
 * kubectl's disk cache notices schema changes. Aggregated discovery is never served: answering
 * plain application/json makes kubectl fall back to the legacy form. */
#include "tests/kubesim/kubesim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ks_reply_json, then 1: "handled" */
static int reply(rm_http_resp *resp, int code, cJSON *o)
{
    int rc = ks_reply_json(resp, code, o);
    return rc ? rc : 1;
}

static cJSON *strarr(const char *const *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

static const char *const VERBS[] = {"create", "delete", "deletecollection", "get",
                                    "list",   "patch",  "update",           "watch"};
static const char *const SUBVERBS[] = {"get", "patch", "update"};

static void add_resource(cJSON *res, const ks_kind *k)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", k->resource);
    cJSON_AddStringToObject(r, "singularName", k->singular);
    cJSON_AddBoolToObject(r, "namespaced", k->namespaced);
    cJSON_AddStringToObject(r, "kind", k->kind);
    cJSON_AddItemToObject(r, "verbs", strarr(VERBS, RM_ARRAY_LEN(VERBS)));
    if (k->nshort) {
        cJSON *sn = cJSON_AddArrayToObject(r, "shortNames");
        for (int i = 0; i < k->nshort; i++)
            cJSON_AddItemToArray(sn, cJSON_CreateString(k->short_names[i]));
    }
    if (k->ncat) {
        cJSON *c = cJSON_AddArrayToObject(r, "categories");
        for (int i = 0; i < k->ncat; i++)
            cJSON_AddItemToArray(c, cJSON_CreateString(k->categories[i]));
    }
    cJSON_AddStringToObject(r, "storageVersionHash", "kubesim0");
    cJSON_AddItemToArray(res, r);
    char name[160];
    if (k->has_status) {
        snprintf(name, sizeof(name), "%s/status", k->resource);
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddStringToObject(r, "singularName", "");
        cJSON_AddBoolToObject(r, "namespaced", k->namespaced);
        cJSON_AddStringToObject(r, "kind", k->kind);
        cJSON_AddItemToObject(r, "verbs", strarr(SUBVERBS, RM_ARRAY_LEN(SUBVERBS)));
        cJSON_AddItemToArray(res, r);
    }
    if (k->has_scale) {
        snprintf(name, sizeof(name), "%s/scale", k->resource);
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddStringToObject(r, "singularName", "");
        cJSON_AddBoolToObject(r, "namespaced", k->namespaced);
        cJSON_AddStringToObject(r, "group", "autoscaling");
        cJSON_AddStringToObject(r, "version", "v1");
        cJSON_AddStringToObject(r, "kind", "Scale");
        cJSON_AddItemToObject(r, "verbs", strarr(SUBVERBS, RM_ARRAY_LEN(SUBVERBS)));
        cJSON_AddItemToArray(res, r);
    }
    if (k->type == KS_T_POD) {
        snprintf(name, sizeof(name), "%s/log", k->resource);
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddStringToObject(r, "singularName", "");
        cJSON_AddBoolToObject(r, "namespaced", true);
        cJSON_AddStringToObject(r, "kind", "Pod");
        static const char *const g[] = {"get"};
        cJSON_AddItemToObject(r, "verbs", strarr(g, 1));
        cJSON_AddItemToArray(res, r);
    }
}

/* Resource list of one group-version, or NULL when nothing is served there. Under rdlock. */
static cJSON *resource_list(ks_server *s, const char *group, const char *version)
{
    cJSON *o = NULL, *res = NULL;
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!k->served || strcmp(k->group, group) || strcmp(k->version, version))
            continue;
        if (!o) {
            o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "kind", "APIResourceList");
            cJSON_AddStringToObject(o, "apiVersion", "v1");
            char gv[256];
            cJSON_AddStringToObject(o, "groupVersion", ks_kind_apiversion(k, gv, sizeof(gv)));
            res = cJSON_AddArrayToObject(o, "resources");
        }
        add_resource(res, k);
    }
    return o;
}

/* The APIGroup object for group g, or NULL. Under rdlock. */
static cJSON *api_group(ks_server *s, const char *g)
{
    cJSON *grp = NULL, *versions = NULL;
    const char *preferred = NULL;
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!k->served || strcmp(k->group, g))
            continue;
        if (!grp) {
            grp = cJSON_CreateObject();
            cJSON_AddStringToObject(grp, "name", g);
            versions = cJSON_AddArrayToObject(grp, "versions");
        }
        bool seen = false;
        for (cJSON *v = versions->child; v; v = v->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(v, "version")->valuestring, k->version))
                seen = true;
        if (seen)
            continue;
        cJSON *v = cJSON_CreateObject();
        char gv[256];
        cJSON_AddStringToObject(v, "groupVersion", ks_kind_apiversion(k, gv, sizeof(gv)));
        cJSON_AddStringToObject(v, "version", k->version);
        if (k->storage || !preferred) {
            preferred = k->version;
            cJSON_InsertItemInArray(versions, 0, v);
        } else {
            cJSON_AddItemToArray(versions, v);
        }
    }
    if (grp) {
        cJSON *pv = cJSON_Duplicate(versions->child, 1);
        cJSON_AddItemToObject(grp, "preferredVersion", pv);
    }
    return grp;
}

static cJSON *group_list(ks_server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "APIGroupList");
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON *groups = cJSON_AddArrayToObject(o, "groups");
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!k->served || !k->group[0])
            continue;
        bool seen = false;
        for (cJSON *g = groups->child; g; g = g->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring, k->group))
                seen = true;
        if (!seen)
            cJSON_AddItemToArray(groups, api_group(s, k->group));
    }
    return o;
}

/* ---- OpenAPI v3 ----------------------------------------------------------------------------- */
static cJSON *param(const char *name, const char *in)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", name);
    cJSON_AddStringToObject(p, "in", in);
    if (!strcmp(in, "path"))
        cJSON_AddBoolToObject(p, "required", true);
    cJSON *sch = cJSON_AddObjectToObject(p, "schema");
    cJSON_AddStringToObject(sch, "type", "string");
    cJSON_AddBoolToObject(sch, "uniqueItems", true);
    return p;
}

static void schema_name(const ks_kind *k, char *buf, size_t cap)
{
    /* io.k8s.api.core.v1.Pod style, reversed group for CRs like the apiserver does */
    if (!k->group[0]) {
        snprintf(buf, cap, "io.k8s.api.core.%s.%s", k->version, k->kind);
        return;
    }
    char rev[160] = "";
    char g[128];
    snprintf(g, sizeof(g), "%s", k->group);
    char *parts[16];
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(g, ".", &save); t && n < 16; t = strtok_r(NULL, ".", &save))
        parts[n++] = t;
    size_t off = 0;
    for (int i = n - 1; i >= 0 && off < sizeof(rev); i--)
        off += (size_t)snprintf(rev + off, sizeof(rev) - off, "%s%s", i == n - 1 ? "" : ".", parts[i]);
    snprintf(buf, cap, "%s.%s.%s", rev, k->version, k->kind);
}

static cJSON *gvk_obj(const ks_kind *k)
{
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "group", k->group);
    cJSON_AddStringToObject(g, "version", k->version);
    cJSON_AddStringToObject(g, "kind", k->kind);
    return g;
}

static cJSON *gv_doc(ks_server *s, const char *group, const char *version)
{
    cJSON *doc = NULL, *paths = NULL, *schemas = NULL;
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!k->served || strcmp(k->group, group) || strcmp(k->version, version))
            continue;
        if (!doc) {
            doc = cJSON_CreateObject();
            cJSON_AddStringToObject(doc, "openapi", "3.0.0");
            cJSON *info = cJSON_AddObjectToObject(doc, "info");
            cJSON_AddStringToObject(info, "title", "Kubernetes");
            cJSON_AddStringToObject(info, "version", "v1.32.0");
            paths = cJSON_AddObjectToObject(doc, "paths");
            schemas = cJSON_AddObjectToObject(cJSON_AddObjectToObject(doc, "components"), "schemas");
        }
        char sname[256], ref[300], path[512], base[300];
        schema_name(k, sname, sizeof(sname));
        snprintf(ref, sizeof(ref), "#/components/schemas/%s", sname);
        if (k->group[0])
            snprintf(base, sizeof(base), "/apis/%s/%s", k->group, k->version);
        else
            snprintf(base, sizeof(base), "/api/%s", k->version);
        if (k->namespaced)
            snprintf(path, sizeof(path), "%s/namespaces/{namespace}/%s/{name}", base, k->resource);
        else
            snprintf(path, sizeof(path), "%s/%s/{name}", base, k->resource);
        cJSON *item = cJSON_AddObjectToObject(paths, path);
        cJSON *get = cJSON_AddObjectToObject(item, "get");
        cJSON_AddStringToObject(get, "operationId", "read");
        cJSON_AddItemToObject(get, "x-kubernetes-group-version-kind", gvk_obj(k));
        cJSON_AddStringToObject(get, "x-kubernetes-action", "get");
        cJSON *patch = cJSON_AddObjectToObject(item, "patch");
        cJSON_AddStringToObject(patch, "operationId", "patch");
        cJSON_AddItemToObject(patch, "x-kubernetes-group-version-kind", gvk_obj(k));
        cJSON_AddStringToObject(patch, "x-kubernetes-action", "patch");
        cJSON *params = cJSON_AddArrayToObject(patch, "parameters");
        cJSON_AddItemToArray(params, param("dryRun", "query"));
        cJSON_AddItemToArray(params, param("fieldManager", "query"));
        cJSON_AddItemToArray(params, param("fieldValidation", "query"));
        cJSON_AddItemToArray(params, param("force", "query"));
        cJSON *rb = cJSON_AddObjectToObject(patch, "requestBody");
        cJSON *content = cJSON_AddObjectToObject(rb, "content");
        cJSON *mp = cJSON_AddObjectToObject(content, "application/merge-patch+json");
        cJSON *mps = cJSON_AddObjectToObject(mp, "schema");
        cJSON_AddStringToObject(mps, "type", "object");
        cJSON *resp200 = cJSON_AddObjectToObject(cJSON_AddObjectToObject(patch, "responses"), "200");
        cJSON_AddStringToObject(resp200, "description", "OK");
        cJSON *rs = cJSON_AddObjectToObject(
            cJSON_AddObjectToObject(cJSON_AddObjectToObject(resp200, "content"), "application/json"),
            "schema");
        cJSON_AddStringToObject(rs, "$ref", ref);
        cJSON *sch = k->schema ? cJSON_Duplicate(k->schema, 1) : cJSON_CreateObject();
        if (!k->schema)
            cJSON_AddStringToObject(sch, "type", "object");
        cJSON_DeleteItemFromObjectCaseSensitive(sch, "x-kubernetes-group-version-kind");
        cJSON *gl = cJSON_AddArrayToObject(sch, "x-kubernetes-group-version-kind");
        cJSON_AddItemToArray(gl, gvk_obj(k));
        if (!cJSON_GetObjectItemCaseSensitive(schemas, sname))
            cJSON_AddItemToObject(schemas, sname, sch);
        else
            cJSON_Delete(sch);
    }
    return doc;
}

static unsigned long long fnv(const char *s)
{
    unsigned long long h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static cJSON *openapi_index(ks_server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *paths = cJSON_AddObjectToObject(o, "paths");
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!k->served)
            continue;
        char key[300];
        if (k->group[0])
            snprintf(key, sizeof(key), "apis/%s/%s", k->group, k->version);
        else
            snprintf(key, sizeof(key), "api/%s", k->version);
        if (cJSON_GetObjectItemCaseSensitive(paths, key))
            continue;
        cJSON *doc = gv_doc(s, k->group, k->version);
        char *txt = doc ? cJSON_PrintUnformatted(doc) : NULL;
        cJSON_Delete(doc);
        char url[400];
        snprintf(url, sizeof(url), "/openapi/v3/%s?hash=%016llX", key, txt ? fnv(txt) : 0ull);
        free(txt);
        cJSON *e = cJSON_AddObjectToObject(paths, key);
        cJSON_AddStringToObject(e, "serverRelativeURL", url);
    }
    return o;
}

int ks_discovery(ks_server *s, const rm_http_req *req, rm_http_resp *resp)
{
    const char *p = req->path;
    if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD"))
        return 0;
    if (!strcmp(p, "/version") || !strcmp(p, "/version/")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "major", "1");
        cJSON_AddStringToObject(o, "minor", "32");
        cJSON_AddStringToObject(o, "gitVersion", "v1.32.0");
        cJSON_AddStringToObject(o, "gitCommit", "kubesim");
        cJSON_AddStringToObject(o, "gitTreeState", "clean");
        cJSON_AddStringToObject(o, "buildDate", "2026-01-01T00:00:00Z");
        cJSON_AddStringToObject(o, "goVersion", "go1.23.0");
        cJSON_AddStringToObject(o, "compiler", "gc");
        cJSON_AddStringToObject(o, "platform", "linux/amd64");
        return reply(resp, 200, o);
    }
    if (!strcmp(p, "/healthz") || !strcmp(p, "/livez") || !strcmp(p, "/readyz")) {
        resp->status = 200;
        resp->content_type = "text/plain";
        resp->body = strdup("ok");
        return resp->body ? 1 : RM_ENOMEM;
    }
    if (!strcmp(p, "/api") || !strcmp(p, "/api/")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "APIVersions");
        cJSON *v = cJSON_AddArrayToObject(o, "versions");
        cJSON_AddItemToArray(v, cJSON_CreateString("v1"));
        cJSON *sa = cJSON_AddArrayToObject(o, "serverAddressByClientCIDRs");
        cJSON *e = cJSON_CreateObject();
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", atomic_load(&s->port));
        cJSON_AddStringToObject(e, "clientCIDR", "0.0.0.0/0");
        cJSON_AddStringToObject(e, "serverAddress", addr);
        cJSON_AddItemToArray(sa, e);
        return reply(resp, 200, o);
    }
    if (!strcmp(p, "/apis") || !strcmp(p, "/apis/")) {
        pthread_rwlock_rdlock(&s->lock);
        cJSON *o = group_list(s);
        pthread_rwlock_unlock(&s->lock);
        return reply(resp, 200, o);
    }
    if (!strcmp(p, "/openapi/v2")) {
        return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                         "OpenAPI v2 is not served by kubesim; use /openapi/v3") < 0
                   ? RM_ENOMEM
                   : 1;
    }
    if (!strcmp(p, "/openapi/v3") || !strcmp(p, "/openapi/v3/")) {
        pthread_rwlock_rdlock(&s->lock);
        cJSON *o = openapi_index(s);
        pthread_rwlock_unlock(&s->lock);
        return reply(resp, 200, o);
    }
    char g[128] = "", v[64] = "", extra[8] = "";
    if (!strncmp(p, "/openapi/v3/", 12)) {
        const char *rest = p + 12;
        int n = 0;
        if (!strncmp(rest, "api/", 4))
            n = sscanf(rest + 4, "%63[^/]%7s", v, extra) == 1 ? 1 : 0;
        else if (!strncmp(rest, "apis/", 5))
            n = sscanf(rest + 5, "%127[^/]/%63[^/]%7s", g, v, extra) == 2 ? 1 : 0;
        cJSON *doc = NULL;
        if (n) {
            pthread_rwlock_rdlock(&s->lock);
            doc = gv_doc(s, g, v);
            pthread_rwlock_unlock(&s->lock);
        }
        if (!doc)
            return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                             "the server could not find the requested resource") < 0
                       ? RM_ENOMEM
                       : 1;
        return reply(resp, 200, doc);
    }
    if (!strcmp(p, "/api/v1") || !strcmp(p, "/api/v1/")) {
        pthread_rwlock_rdlock(&s->lock);
        cJSON *o = resource_list(s, "", "v1");
        pthread_rwlock_unlock(&s->lock);
        return reply(resp, 200, o);
    }
    if (!strncmp(p, "/apis/", 6)) {
        int n = sscanf(p + 6, "%127[^/]/%63[^/]%7s", g, v, extra);
        if (n == 1 || (n == 2 && !strcmp(v, ""))) {
            pthread_rwlock_rdlock(&s->lock);
            cJSON *o = api_group(s, g);
            pthread_rwlock_unlock(&s->lock);
            if (!o)
                return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                                 "the server could not find the requested resource") < 0
                           ? RM_ENOMEM
                           : 1;
            cJSON_AddStringToObject(o, "kind", "APIGroup");
            cJSON_AddStringToObject(o, "apiVersion", "v1");
            return reply(resp, 200, o);
        }
        if (n == 2 || (n == 3 && !strcmp(extra, "/"))) {
            pthread_rwlock_rdlock(&s->lock);
            cJSON *o = resource_list(s, g, v);
            pthread_rwlock_unlock(&s->lock);
            if (!o)
                return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                                 "the server could not find the requested resource") < 0
                           ? RM_ENOMEM
                           : 1;
            return reply(resp, 200, o);
        }
    }
    return 0;
}
