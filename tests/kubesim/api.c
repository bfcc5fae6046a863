/* api.c — kubesim's REST layer: path parsing, verbs, CRUD, list paging, watch streams, patch,
 * deletion, status/scale subresources and the generic update rules (rules D–K of
 * docs/kube-api-double.md).
 *
 * Design: every request is parsed into a ks_ri (kind, namespace, name, subresource, verb), logged,
 * checked against the fault table, then dispatched. Writes build the candidate object on a
 * private copy outside the store, then take the write lock only to check preconditions, apply the
 * server-owned fields and commit (so the rules of G4/I1/I2/J3 live in one function, ks_apply_write,
 * shared by PUT, PATCH, the kubelet and the garbage collector). A watch is one stream per
 * connection that scans the shared event ring from its cursor and sleeps on its table's
 * condition variable. */
#include "tests/kubesim/kubesim.h"
#include "common/clock.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "common/b64.h"
#include "common/json.h"
#include "common/yaml.h"
#include "tests/kubesim/names.h"
#include "tests/kubesim/patch.h"
#include "tests/kubesim/selectors.h"

/* ---- Status bodies (rule G1) ---------------------------------------------------------------- */
static const char *reason_for(int code)
{
    switch (code) {
    case 400:
        return "BadRequest";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 405:
        return "MethodNotAllowed";
    case 406:
        return "NotAcceptable";
    case 409:
        return "Conflict";
    case 410:
        return "Expired";
    case 413:
        return "RequestEntityTooLarge";
    case 415:
        return "UnsupportedMediaType";
    case 422:
        return "Invalid";
    case 429:
        return "TooManyRequests";
    case 500:
        return "InternalError";
    case 503:
        return "ServiceUnavailable";
    case 504:
        return "Timeout";
    default:
        return "Unknown";
    }
}

static cJSON *status_obj(int code, const char *reason, const char *name, const char *group, const char *kind,
                         const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "Status");
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(o, "status", code < 300 ? "Success" : "Failure");
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "reason", reason ? reason : reason_for(code));
    if (name || group || kind) {
        cJSON *d = cJSON_AddObjectToObject(o, "details");
        if (name)
            cJSON_AddStringToObject(d, "name", name);
        if (group)
            cJSON_AddStringToObject(d, "group", group);
        if (kind)
            cJSON_AddStringToObject(d, "kind", kind);
    }
    cJSON_AddNumberToObject(o, "code", code);
    return o;
}

int ks_reply_json(rm_http_resp *resp, int code, cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        return RM_ENOMEM;
    resp->status = code;
    resp->content_type = "application/json";
    resp->body = s;
    resp->body_len = strlen(s);
    return RM_OK;
}

int ks_status(rm_http_resp *resp, int code, const char *reason, const char *name, const char *group,
              const char *kind, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (code == 429)
        rm_http_add_header(resp, "Retry-After", "1");
    return ks_reply_json(resp, code, status_obj(code, reason, name, group, kind, msg));
}

/* ---- request info --------------------------------------------------------------------------- */
typedef struct ks_ri {
    const char *method;
    char group[128], version[64], resource[64], ns[128], name[256], sub[32], verb[24];
    bool has_ns;
    ks_kind *k; /* NULL: unknown resource (→ 404) */
    bool collection;
    bool watch;
} ks_ri;

static bool truthy(const char *v)
{
    return v && *v && strcmp(v, "0") && strcasecmp(v, "false");
}

/* Splits the path; returns 0 and fills ri for a resource path, -1 when not a resource path. */
static int parse_path(const char *path, ks_ri *ri)
{
    char buf[1024];
    if (strlen(path) >= sizeof(buf))
        return -1;
    snprintf(buf, sizeof(buf), "%s", path);
    char *seg[12];
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (n == 12)
            return -1;
        seg[n++] = t;
    }
    int i;
    if (n >= 2 && !strcmp(seg[0], "api")) {
        ri->group[0] = 0;
        snprintf(ri->version, sizeof(ri->version), "%s", seg[1]);
        i = 2;
    } else if (n >= 3 && !strcmp(seg[0], "apis")) {
        snprintf(ri->group, sizeof(ri->group), "%s", seg[1]);
        snprintf(ri->version, sizeof(ri->version), "%s", seg[2]);
        i = 3;
    } else {
        return -1;
    }
    int rest = n - i;
    if (rest <= 0)
        return -1;
    char **r = &seg[i];
    /* namespaces/{ns}/{res}[/{name}[/{sub}]] */
    if (!strcmp(r[0], "namespaces") && rest >= 3 &&
        !(rest == 3 && (!strcmp(r[2], "status") || !strcmp(r[2], "finalize")))) {
        ri->has_ns = true;
        snprintf(ri->ns, sizeof(ri->ns), "%s", r[1]);
        r += 2;
        rest -= 2;
    }
    if (rest > 3)
        return -1;
    if (strlen(r[0]) >= sizeof(ri->resource) || (rest > 1 && strlen(r[1]) >= sizeof(ri->name)) ||
        (rest > 2 && strlen(r[2]) >= sizeof(ri->sub)))
        return -1;
    snprintf(ri->resource, sizeof(ri->resource), "%s", r[0]);
    if (rest > 1)
        snprintf(ri->name, sizeof(ri->name), "%s", r[1]);
    if (rest > 2)
        snprintf(ri->sub, sizeof(ri->sub), "%s", r[2]);
    ri->collection = rest == 1;
    return 0;
}

static void set_verb(const rm_http_req *req, ks_ri *ri)
{
    const char *m = req->method;
    const char *v = "unknown";
    if (!strcmp(m, "GET") || !strcmp(m, "HEAD")) {
        if (ri->collection) {
            ri->watch = truthy(rm_http_query(req, "watch"));
            v = ri->watch ? "watch" : "list";
        } else {
            v = "get";
        }
    } else if (!strcmp(m, "POST")) {
        v = "create";
    } else if (!strcmp(m, "PUT")) {
        v = "update";
    } else if (!strcmp(m, "PATCH")) {
        v = "patch";
    } else if (!strcmp(m, "DELETE")) {
        v = ri->collection ? "deletecollection" : "delete";
    }
    snprintf(ri->verb, sizeof(ri->verb), "%s", v);
}

/* "trainingjobs.ringmaster.dev" / "pods" */
static const char *qualified(const ks_kind *k, char *buf, size_t cap)
{
    if (k->group[0])
        snprintf(buf, cap, "%s.%s", k->resource, k->group);
    else
        snprintf(buf, cap, "%s", k->resource);
    return buf;
}

/* "TrainingJob.ringmaster.dev" / "Pod": the qualified kind of an Invalid message */
static const char *qualified_kind(const ks_kind *k, char *buf, size_t cap)
{
    if (k->group[0])
        snprintf(buf, cap, "%s.%s", k->kind, k->group);
    else
        snprintf(buf, cap, "%s", k->kind);
    return buf;
}

static int not_found(rm_http_resp *resp, const ks_kind *k, const char *name)
{
    char q[256];
    return ks_status(resp, 404, "NotFound", name, k->group, k->resource, "%s \"%s\" not found",
                     qualified(k, q, sizeof(q)), name);
}

/* ---- metadata helpers ----------------------------------------------------------------------- */
static cJSON *md_of(cJSON *o)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "metadata");
        md = cJSON_AddObjectToObject(o, "metadata");
    }
    return md;
}

static const char *md_str(const cJSON *o, const char *key)
{
    return ks_sget(cJSON_GetObjectItemCaseSensitive(o, "metadata"), key);
}

static void set_item(cJSON *o, const char *key, cJSON *v)
{
    if (!v)
        return;
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else
        cJSON_AddItemToObject(o, key, v);
}

static void set_str(cJSON *o, const char *key, const char *v)
{
    set_item(o, key, cJSON_CreateString(v));
}

static void copy_field(cJSON *dst, const cJSON *src, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, key);
    if (v)
        set_item(dst, key, cJSON_Duplicate(v, 1));
    else
        cJSON_DeleteItemFromObjectCaseSensitive(dst, key);
}

static bool valid_name(const char *n, bool label_only)
{
    size_t len = strlen(n);
    if (len == 0 || len > (label_only ? 63u : 253u))
        return false;
    if (!isalnum((unsigned char)n[0]) || !isalnum((unsigned char)n[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-' ||
              (!label_only && c == '.')))
            return false;
    }
    return true;
}

/* Nesting depth (an object or array counts one level). Kept small-framed: it runs before the
 * bigger recursive walks, which it protects from deep input on small connection stacks. */
#define KS_MAX_DEPTH 100
static int json_depth(const cJSON *o, int limit)
{
    if (!o || !(cJSON_IsObject(o) || cJSON_IsArray(o)))
        return 0;
    if (limit <= 0)
        return 1;
    int best = 0;
    for (const cJSON *c = o->child; c; c = c->next) {
        int d = json_depth(c, limit - 1);
        if (d > best)
            best = d;
        if (best >= limit)
            break;
    }
    return best + 1;
}

/* Keep the last of duplicate keys (what the apiserver's decoder does), recording them. */
static void dedupe_keys(cJSON *o, const char *path, cJSON *dups)
{
    if (!o)
        return;
    if (cJSON_IsObject(o)) {
        cJSON *c = o->child;
        while (c) {
            cJSON *next = c->next;
            bool later = false;
            for (cJSON *d = next; d && c->string; d = d->next)
                if (d->string && !strcmp(d->string, c->string))
                    later = true;
            if (later) {
                if (dups && cJSON_GetArraySize(dups) < 32) {
                    char p[512];
                    snprintf(p, sizeof(p), "%s%s%s", path, *path ? "." : "", c->string);
                    cJSON_AddItemToArray(dups, cJSON_CreateString(p));
                }
                cJSON_Delete(cJSON_DetachItemViaPointer(o, c));
            } else {
                char p[512];
                snprintf(p, sizeof(p), "%s%s%s", path, *path ? "." : "", c->string ? c->string : "");
                dedupe_keys(c, p, dups);
            }
            c = next;
        }
    } else if (cJSON_IsArray(o)) {
        int i = 0;
        for (cJSON *c = o->child; c; c = c->next, i++) {
            char p[512];
            snprintf(p, sizeof(p), "%s[%d]", path, i);
            dedupe_keys(c, p, dups);
        }
    }
}

static bool has_finalizer(const cJSON *o, const char *f)
{
    const cJSON *fl =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "finalizers");
    for (const cJSON *e = fl ? fl->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, f))
            return true;
    return false;
}

static int finalizer_count(const cJSON *o)
{
    const cJSON *fl =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "finalizers");
    return cJSON_IsArray(fl) ? cJSON_GetArraySize(fl) : 0;
}

static bool kind_has_generation(const ks_kind *k)
{
    return k->type == KS_T_CR || k->type == KS_T_CRD || k->type == KS_T_DEPLOYMENT;
}

/* ---- Events: one store for core/v1 and events.k8s.io/v1 (rule P2) --------------------------- */
static void move_field(cJSON *dst, const char *dkey, const cJSON *src, const char *skey)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, skey);
    if (v && !cJSON_IsNull(v))
        set_item(dst, dkey, cJSON_Duplicate(v, 1));
}

/* core/v1 Event field ↔ events.k8s.io/v1 field, in the order both forms are written. */
static const struct {
    const char *core, *v1;
} EVENT_FIELDS[] = {
    {"metadata", "metadata"},
    {"eventTime", "eventTime"},
    {"series", "series"},
    {"reportingComponent", "reportingController"},
    {"reportingInstance", "reportingInstance"},
    {"action", "action"},
    {"reason", "reason"},
    {"involvedObject", "regarding"},
    {"related", "related"},
    {"message", "note"},
    {"type", "type"},
    {"source", "deprecatedSource"},
    {"firstTimestamp", "deprecatedFirstTimestamp"},
    {"lastTimestamp", "deprecatedLastTimestamp"},
    {"count", "deprecatedCount"},
};

/* One direction of the Event conversion. The reporter has two homes: v1's reportingController
 * falls back to core's source.component, and core's source to {component: reportingController}. */
static cJSON *event_convert(const cJSON *src, bool to_new)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "kind", "Event");
    cJSON_AddStringToObject(o, "apiVersion", to_new ? "events.k8s.io/v1" : "v1");
    for (size_t i = 0; i < sizeof(EVENT_FIELDS) / sizeof(EVENT_FIELDS[0]); i++) {
        const char *dkey = to_new ? EVENT_FIELDS[i].v1 : EVENT_FIELDS[i].core;
        move_field(o, dkey, src, to_new ? EVENT_FIELDS[i].core : EVENT_FIELDS[i].v1);
        if (cJSON_GetObjectItemCaseSensitive(o, dkey))
            continue;
        if (to_new && !strcmp(dkey, "reportingController")) {
            move_field(o, dkey, cJSON_GetObjectItemCaseSensitive(src, "source"), "component");
        } else if (!to_new && !strcmp(dkey, "source")) {
            const char *rc = ks_sget(src, "reportingController");
            if (rc) {
                cJSON *so = cJSON_AddObjectToObject(o, "source");
                cJSON_AddStringToObject(so, "component", rc);
            }
        }
    }
    return o;
}

cJSON *ks_event_to_new(const cJSON *core)
{
    return event_convert(core, true);
}

cJSON *ks_event_to_core(const cJSON *ev)
{
    return event_convert(ev, false);
}

/* JSON of a stored version as kind k serves it, appended to b. */
static void append_obj(ks_buf *b, const ks_kind *k, const ks_obj *o)
{
    if (k->type == KS_T_EVENT_NEW) {
        cJSON *c = ks_event_to_new(o->j);
        char *s = c ? cJSON_PrintUnformatted(c) : NULL;
        cJSON_Delete(c);
        if (s) {
            ks_buf_puts(b, s);
            free(s);
        } else {
            b->oom = 1;
        }
        return;
    }
    if (k->type == KS_T_CR) {
        char av[256];
        ks_kind_apiversion(k, av, sizeof(av));
        const char *have = ks_sget(o->j, "apiVersion");
        if (have && strcmp(have, av)) {
            cJSON *c = cJSON_Duplicate(o->j, 1);
            set_str(c, "apiVersion", av);
            char *s = cJSON_PrintUnformatted(c);
            cJSON_Delete(c);
            if (s) {
                ks_buf_puts(b, s);
                free(s);
            }
            return;
        }
    }
    ks_buf_add(b, o->json, o->len);
}

static cJSON *obj_view(const ks_kind *k, const ks_obj *o)
{
    if (k->type == KS_T_EVENT_NEW)
        return ks_event_to_new(o->j);
    cJSON *c = cJSON_Duplicate(o->j, 1);
    if (c && k->type == KS_T_CR) {
        char av[256];
        set_str(c, "apiVersion", ks_kind_apiversion(k, av, sizeof(av)));
    }
    return c;
}

static int reply_stored(rm_http_resp *resp, int code, const ks_kind *k, const ks_obj *o)
{
    ks_buf b = {0};
    append_obj(&b, k, o);
    size_t len;
    char *s = ks_buf_take(&b, &len);
    if (!s)
        return RM_ENOMEM;
    resp->status = code;
    resp->body = s;
    resp->body_len = len;
    return RM_OK;
}

/* ---- field selector labels per kind (rule K5) ----------------------------------------------- */
static const char *const FL_GENERIC[] = {"metadata.name", "metadata.namespace", NULL};
static const char *const FL_POD[] = {"metadata.name",
                                     "metadata.namespace",
                                     "spec.nodeName",
                                     "status.phase",
                                     "spec.restartPolicy",
                                     "spec.schedulerName",
                                     "spec.serviceAccountName",
                                     "status.podIP",
                                     "spec.hostNetwork",
                                     "status.nominatedNodeName",
                                     NULL};
static const char *const FL_EVENT[] = {"metadata.name",
                                       "metadata.namespace",
                                       "involvedObject.kind",
                                       "involvedObject.namespace",
                                       "involvedObject.name",
                                       "involvedObject.uid",
                                       "involvedObject.apiVersion",
                                       "involvedObject.resourceVersion",
                                       "involvedObject.fieldPath",
                                       "reason",
                                       "reportingComponent",
                                       "source",
                                       "type",
                                       NULL};
static const char *const FL_SECRET[] = {"metadata.name", "metadata.namespace", "type", NULL};
static const char *const FL_NS[] = {"metadata.name", "metadata.namespace", "status.phase", NULL};
static const char *const FL_NODE[] = {"metadata.name", "metadata.namespace", "spec.unschedulable", NULL};

static const char *const *field_labels(const ks_kind *k)
{
    switch (k->type) {
    case KS_T_POD:
        return FL_POD;
    case KS_T_EVENT:
    case KS_T_EVENT_NEW:
        return FL_EVENT;
    case KS_T_SECRET:
        return FL_SECRET;
    case KS_T_NAMESPACE:
        return FL_NS;
    case KS_T_NODE:
        return FL_NODE;
    default:
        return FL_GENERIC;
    }
}

static bool obj_matches(const ks_kind *k, const char *ns, const ks_lsel *ls, const ks_fsel *fs,
                        const cJSON *o)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    if (ns && *ns) {
        const char *ons = ks_sget(md, "namespace");
        if (!ons || strcmp(ons, ns))
            return false;
    }
    if (ls && !ks_lsel_match(ls, cJSON_GetObjectItemCaseSensitive(md, "labels")))
        return false;
    if (fs && !ks_fsel_match(fs, o))
        return false;
    (void)k;
    return true;
}

/* ---- the write path (rules G3, G4, I1, I2, J3, J5, K1, L2) --------------------------------- */
typedef struct ks_wres {
    int code; /* 0 ok; HTTP code on failure; -1 internal retry */
    char reason[32];
    char msg[1024];
    char field[256];
    ks_obj *obj; /* ref: the stored version (or last state when deleted) */
    bool deleted;
    bool noop;
    ks_causes causes; /* a 422's causes (names.h); none: one cause from field and msg */
} ks_wres;

enum { W_CREATE = 0, W_UPDATE, W_STATUS, W_INTERNAL };
enum { FV_WARN = 0, FV_STRICT, FV_IGNORE };

static void wfail(ks_wres *r, int code, const char *reason, const char *field, const char *fmt, ...)
    RM_PRINTF(5, 6);
static void wfail(ks_wres *r, int code, const char *reason, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
    r->code = code;
    snprintf(r->reason, sizeof(r->reason), "%s", reason ? reason : reason_for(code));
    snprintf(r->field, sizeof(r->field), "%s", field ? field : "");
}

static int reply_wfail(rm_http_resp *resp, const ks_kind *k, const char *name, const ks_wres *r)
{
    cJSON *o = status_obj(r->code, r->reason, name, k->group, k->resource, r->msg);
    if (r->code == 422 && r->causes.n > 0) {
        cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "details");
        cJSON *causes = cJSON_AddArrayToObject(d, "causes");
        for (int i = 0; i < r->causes.n; i++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "type", r->causes.c[i].type);
            cJSON_AddStringToObject(c, "message", r->causes.c[i].msg);
            cJSON_AddStringToObject(c, "field", r->causes.c[i].field);
            cJSON_AddItemToArray(causes, c);
        }
    } else if (r->code == 422 && r->field[0]) {
        cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "details");
        cJSON *causes = cJSON_AddArrayToObject(d, "causes");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "type", "FieldValueInvalid");
        cJSON_AddStringToObject(c, "message", r->msg);
        cJSON_AddStringToObject(c, "field", r->field);
        cJSON_AddItemToArray(causes, c);
    }
    return ks_reply_json(resp, r->code, o);
}

static bool image_latest(const char *img)
{
    const char *slash = strrchr(img, '/');
    const char *colon = strrchr(slash ? slash : img, ':');
    return !colon || !strcmp(colon, ":latest");
}

/* Defaults and checks of built-in kinds on create/update (a small part of their strategies). */
static int builtin_prepare(ks_server *s, ks_kind *k, cJSON *o, const cJSON *old, ks_wres *r)
{
    if (k->type == KS_T_POD) {
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
        cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, "containers");
        if (!cJSON_IsObject(spec) || !cJSON_IsArray(cs) || !cJSON_GetArraySize(cs)) {
            wfail(r, 422, NULL, "spec.containers", "Pod \"%s\" is invalid: spec.containers: Required value",
                  md_str(o, "name") ? md_str(o, "name") : "");
            return -1;
        }
        int i = 0;
        for (cJSON *c = cs->child; c; c = c->next, i++) {
            const char *cn = ks_sget(c, "name"), *img = ks_sget(c, "image");
            if (!cn || !valid_name(cn, true) || !img || !*img) {
                char f[64];
                snprintf(f, sizeof(f), "spec.containers[%d].%s", i,
                         (!cn || !valid_name(cn, true)) ? "name" : "image");
                wfail(r, 422, NULL, f, "Pod \"%s\" is invalid: %s: Required value",
                      md_str(o, "name") ? md_str(o, "name") : "", f);
                return -1;
            }
            if (!old) {
                if (!cJSON_GetObjectItemCaseSensitive(c, "terminationMessagePath"))
                    cJSON_AddStringToObject(c, "terminationMessagePath", "/dev/termination-log");
                if (!cJSON_GetObjectItemCaseSensitive(c, "terminationMessagePolicy"))
                    cJSON_AddStringToObject(c, "terminationMessagePolicy", "File");
                if (!cJSON_GetObjectItemCaseSensitive(c, "imagePullPolicy"))
                    cJSON_AddStringToObject(c, "imagePullPolicy",
                                            image_latest(img) ? "Always" : "IfNotPresent");
                if (!cJSON_GetObjectItemCaseSensitive(c, "resources"))
                    cJSON_AddObjectToObject(c, "resources");
            }
        }
        if (!old) {
            if (!cJSON_GetObjectItemCaseSensitive(spec, "restartPolicy"))
                cJSON_AddStringToObject(spec, "restartPolicy", "Always");
            if (!cJSON_GetObjectItemCaseSensitive(spec, "terminationGracePeriodSeconds"))
                cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", 30);
            if (!cJSON_GetObjectItemCaseSensitive(spec, "dnsPolicy"))
                cJSON_AddStringToObject(spec, "dnsPolicy", "ClusterFirst");
            if (!cJSON_GetObjectItemCaseSensitive(spec, "schedulerName"))
                cJSON_AddStringToObject(spec, "schedulerName", "default-scheduler");
            if (!cJSON_GetObjectItemCaseSensitive(spec, "serviceAccountName"))
                cJSON_AddStringToObject(spec, "serviceAccountName", "default");
            if (!cJSON_GetObjectItemCaseSensitive(spec, "securityContext"))
                cJSON_AddObjectToObject(spec, "securityContext");
            cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
            cJSON *st = cJSON_AddObjectToObject(o, "status");
            cJSON_AddStringToObject(st, "phase", "Pending");
            cJSON_AddStringToObject(st, "qosClass", "BestEffort");
        }
        const char *rp = ks_sget(spec, "restartPolicy");
        if (rp && strcmp(rp, "Always") && strcmp(rp, "OnFailure") && strcmp(rp, "Never")) {
            wfail(r, 422, NULL, "spec.restartPolicy",
                  "Pod \"%s\" is invalid: spec.restartPolicy: Unsupported value: \"%s\"",
                  md_str(o, "name") ? md_str(o, "name") : "", rp);
            return -1;
        }
    } else if (k->type == KS_T_SERVICE && !old) {
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
        if (!cJSON_IsObject(spec))
            spec = cJSON_AddObjectToObject(o, "spec");
        if (!cJSON_GetObjectItemCaseSensitive(spec, "type"))
            cJSON_AddStringToObject(spec, "type", "ClusterIP");
        if (!cJSON_GetObjectItemCaseSensitive(spec, "clusterIP")) {
            char ip[32];
            unsigned long long n = atomic_fetch_add(&s->ip_seq, 1) + 1;
            snprintf(ip, sizeof(ip), "10.96.%llu.%llu", (n / 250) % 250, n % 250 + 1);
            cJSON_AddStringToObject(spec, "clusterIP", ip);
            cJSON *ips = cJSON_AddArrayToObject(spec, "clusterIPs");
            cJSON_AddItemToArray(ips, cJSON_CreateString(ip));
        }
        if (!cJSON_GetObjectItemCaseSensitive(spec, "sessionAffinity"))
            cJSON_AddStringToObject(spec, "sessionAffinity", "None");
        cJSON *ports = cJSON_GetObjectItemCaseSensitive(spec, "ports");
        for (cJSON *p = cJSON_IsArray(ports) ? ports->child : NULL; p; p = p->next) {
            if (!cJSON_GetObjectItemCaseSensitive(p, "protocol"))
                cJSON_AddStringToObject(p, "protocol", "TCP");
            const cJSON *port = cJSON_GetObjectItemCaseSensitive(p, "port");
            if (!cJSON_GetObjectItemCaseSensitive(p, "targetPort") && port)
                cJSON_AddItemToObject(p, "targetPort", cJSON_Duplicate(port, 1));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
        cJSON *st = cJSON_AddObjectToObject(o, "status");
        cJSON_AddObjectToObject(st, "loadBalancer");
    } else if (k->type == KS_T_SECRET) {
        if (!cJSON_GetObjectItemCaseSensitive(o, "type"))
            cJSON_AddStringToObject(o, "type", "Opaque");
        cJSON *sd = cJSON_DetachItemFromObjectCaseSensitive(o, "stringData");
        if (cJSON_IsObject(sd)) {
            cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
            if (!cJSON_IsObject(data)) {
                cJSON_DeleteItemFromObjectCaseSensitive(o, "data");
                data = cJSON_AddObjectToObject(o, "data");
            }
            for (cJSON *e = sd->child; e; e = e->next) {
                if (!cJSON_IsString(e) || !e->string)
                    continue;
                char *enc = rm_b64_encode((const unsigned char *)e->valuestring, strlen(e->valuestring));
                if (enc)
                    set_str(data, e->string, enc);
                free(enc);
            }
        }
        cJSON_Delete(sd);
    } else if (k->type == KS_T_NAMESPACE) {
        if (!old) {
            cJSON *md = md_of(o);
            cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
            if (!cJSON_IsObject(labels))
                labels = cJSON_AddObjectToObject(md, "labels");
            set_str(labels, "kubernetes.io/metadata.name", md_str(o, "name"));
            cJSON_DeleteItemFromObjectCaseSensitive(o, "spec");
            cJSON *spec = cJSON_AddObjectToObject(o, "spec");
            cJSON *f = cJSON_AddArrayToObject(spec, "finalizers");
            cJSON_AddItemToArray(f, cJSON_CreateString("kubernetes"));
            cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
            cJSON *st = cJSON_AddObjectToObject(o, "status");
            cJSON_AddStringToObject(st, "phase", "Active");
        }
    } else if (k->type == KS_T_CRD) {
        rm_err e = {0};
        if (ks_crd_prepare(o, &e) < 0) {
            wfail(r, 422, NULL, e.field,
                  "CustomResourceDefinition.apiextensions.k8s.io \"%s\" is invalid: %s",
                  md_str(o, "name") ? md_str(o, "name") : "", e.msg);
            return -1;
        }
    }
    return 0;
}

static int check_owner_refs(const cJSON *o, ks_wres *r)
{
    const cJSON *refs =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "ownerReferences");
    if (!refs)
        return 0;
    if (!cJSON_IsArray(refs)) {
        wfail(r, 422, NULL, "metadata.ownerReferences", "metadata.ownerReferences: must be a list");
        return -1;
    }
    int controllers = 0, i = 0;
    for (const cJSON *e = refs->child; e; e = e->next, i++) {
        static const char *req[] = {"apiVersion", "kind", "name", "uid"};
        for (size_t j = 0; j < RM_ARRAY_LEN(req); j++) {
            const char *v = ks_sget(e, req[j]);
            if (!v || !*v) {
                char f[96];
                snprintf(f, sizeof(f), "metadata.ownerReferences[%d].%s", i, req[j]);
                wfail(r, 422, NULL, f, "%s: Invalid value: \"\": %s must not be empty", f, req[j]);
                return -1;
            }
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "controller")))
            controllers++;
    }
    if (controllers > 1) {
        wfail(r, 422, NULL, "metadata.ownerReferences",
              "metadata.ownerReferences: Invalid value: []v1.OwnerReference{...}: Only one reference can "
              "have Controller set to true");
        return -1;
    }
    return 0;
}

/* Compare two objects ignoring metadata (and status when ignore_status). */
static bool spec_equal(const cJSON *a, const cJSON *b, bool ignore_status)
{
    int na = 0, nb = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) {
        if (!e->string || !strcmp(e->string, "metadata") || (ignore_status && !strcmp(e->string, "status")))
            continue;
        na++;
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(b, e->string);
        if (!o || !ks_json_equal(e, o))
            return false;
    }
    for (const cJSON *e = b ? b->child : NULL; e; e = e->next) {
        if (!e->string || !strcmp(e->string, "metadata") || (ignore_status && !strcmp(e->string, "status")))
            continue;
        nb++;
    }
    return na == nb;
}

static bool pod_awaits_kubelet(ks_server *s, const cJSON *o)
{
    if (s->opts.no_kubelet)
        return false;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
    const char *node = ks_sget(spec, "nodeName");
    const char *phase = ks_sget(cJSON_GetObjectItemCaseSensitive(o, "status"), "phase");
    if (!node || !*node)
        return false;
    if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")))
        return false;
    return true;
}

static void unknown_fields_msg(const cJSON *unknown, char *buf, size_t cap, const char *prefix)
{
    size_t off = 0;
    buf[0] = 0;
    int i = 0;
    for (const cJSON *u = unknown->child; u && off < cap; u = u->next, i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s \"%s\"", i ? ", " : "", prefix, u->valuestring);
}

static void del_locked(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *prop,
                       int grace, const char *pre_uid, const char *pre_rv, bool dry, ks_wres *r);
static void remove_locked(ks_server *s, ks_kind *k, const char *ns, const char *name, ks_wres *r);

/* The API server's metadata rules on every write (names.h): the annotations' total size and, for
 * pods, spec.hostname/subdomain. (metadata.name is checked once, on create.) */
static int check_names(const ks_kind *k, const char *name, const cJSON *obj, ks_wres *r)
{
    ks_causes cs = {0};
    ks_check_annotations(obj, &cs);
    if (k->type == KS_T_POD)
        ks_check_pod_names(obj, &cs);
    if (cs.n == 0)
        return 0;
    char qk[200];
    wfail(r, 422, NULL, cs.c[0].field, "x");
    ks_causes_message(&cs, qualified_kind(k, qk, sizeof(qk)), name, r->msg, sizeof(r->msg));
    r->causes = cs;
    return -1;
}

/* The one write function. Takes ownership of nw. Takes the write lock itself. */
static void ks_apply_write(ks_server *s, ks_kind *k, const char *ns, const char *name, cJSON *nw, int mode,
                           const char *expect_rv, uint64_t internal_rv, int fv, rm_http_resp *warn_resp,
                           bool dry, ks_wres *r)
{
    memset(r, 0, sizeof(*r));
    cJSON *merged = NULL;
    cJSON *unknown = cJSON_CreateArray();
    if (json_depth(nw, KS_MAX_DEPTH + 1) > KS_MAX_DEPTH) {
        /* a patch can deepen an object: keep every later walk shallow */
        wfail(r, 422, NULL, NULL, "the object nests deeper than %d levels", KS_MAX_DEPTH);
        cJSON_Delete(nw);
        cJSON_Delete(unknown);
        return;
    }
    char q[256];
    qualified(k, q, sizeof(q));
    pthread_rwlock_wrlock(&s->lock);
    if (!k->served) {
        wfail(r, 404, NULL, NULL, "the server could not find the requested resource");
        goto out;
    }
    ks_obj *old = ks_table_get(k->tab, k->namespaced ? ns : "", name);
    const cJSON *oldj = old ? old->j : NULL;
    if (mode == W_CREATE) {
        if (old) {
            wfail(r, 409, "AlreadyExists", NULL, "%s \"%s\" already exists", q, name);
            goto out;
        }
        if (k->namespaced) {
            ks_kind *nsk = ks_core_kind(s, KS_T_NAMESPACE);
            ks_obj *nso = ks_table_get(nsk->tab, "", ns);
            if (!nso) {
                wfail(r, 404, "NotFound", NULL, "namespaces \"%s\" not found", ns);
                goto out;
            }
            if (md_str(nso->j, "deletionTimestamp")) {
                wfail(r, 403, "Forbidden", NULL,
                      "%s \"%s\" is forbidden: unable to create new content in namespace %s because it is "
                      "being terminated",
                      q, name, ns);
                goto out;
            }
        }
        merged = nw;
        nw = NULL;
        cJSON *md = md_of(merged);
        char uid[40], ts[32];
        ks_new_uid(s, uid);
        ks_now_rfc3339(ts);
        set_str(md, "name", name);
        if (k->namespaced)
            set_str(md, "namespace", ns);
        else
            cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
        set_str(md, "uid", uid);
        set_str(md, "creationTimestamp", ts);
        cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionTimestamp");
        cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionGracePeriodSeconds");
        cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
        cJSON_DeleteItemFromObjectCaseSensitive(md, "selfLink");
        if (kind_has_generation(k))
            set_item(md, "generation", cJSON_CreateNumber(1));
        else
            cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
        if (k->has_status && k->type == KS_T_CR)
            cJSON_DeleteItemFromObjectCaseSensitive(merged, "status");
    } else {
        if (!old) {
            wfail(r, 404, "NotFound", NULL, "%s \"%s\" not found", q, name);
            goto out;
        }
        if (internal_rv && old->rv != internal_rv) {
            r->code = -1;
            goto out;
        }
        char orv[32];
        snprintf(orv, sizeof(orv), "%llu", (unsigned long long)old->rv);
        if (expect_rv && *expect_rv && strcmp(expect_rv, orv)) {
            wfail(r, 409, "Conflict", NULL,
                  "Operation cannot be fulfilled on %s \"%s\": the object has been modified; please apply "
                  "your changes to the latest version and try again",
                  q, name);
            goto out;
        }
        if (mode == W_STATUS) {
            merged = cJSON_Duplicate(oldj, 1);
            copy_field(merged, nw, "status");
        } else {
            merged = nw;
            nw = NULL;
            cJSON *md = md_of(merged);
            const cJSON *omd = cJSON_GetObjectItemCaseSensitive(oldj, "metadata");
            set_str(md, "name", name);
            if (k->namespaced)
                set_str(md, "namespace", ns);
            else
                cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
            copy_field(md, omd, "uid");
            copy_field(md, omd, "creationTimestamp");
            copy_field(md, omd, "generation");
            copy_field(md, omd, "deletionTimestamp");
            copy_field(md, omd, "deletionGracePeriodSeconds");
            cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
            if (k->has_status && mode == W_UPDATE)
                copy_field(merged, oldj, "status");
        }
        /* apiVersion/kind of the stored object are the server's */
        copy_field(merged, oldj, "kind");
        if (k->type != KS_T_EVENT_NEW)
            copy_field(merged, oldj, "apiVersion");
    }
    if (k->type == KS_T_CR) {
        char av[256];
        /* objects are stored under the storage version's apiVersion */
        ks_kind *sk = k;
        for (size_t i = 0; i < s->nkinds; i++)
            if (s->kinds[i]->tab == k->tab && s->kinds[i]->storage && s->kinds[i]->served)
                sk = s->kinds[i];
        set_str(merged, "apiVersion", ks_kind_apiversion(sk, av, sizeof(av)));
        set_str(merged, "kind", k->kind);
        if (k->schema) {
            rm_err e = {0};
            if (ks_schema_apply(k->schema, merged, unknown, &e) < 0) {
                char qk[200];
                wfail(r, 422, NULL, e.field, "%s \"%s\" is invalid: %s", qualified_kind(k, qk, sizeof(qk)),
                      name, e.msg);
                goto out;
            }
        }
    } else if (k->type != KS_T_EVENT_NEW) {
        char av[256];
        set_str(merged, "apiVersion", ks_kind_apiversion(k, av, sizeof(av)));
        set_str(merged, "kind", k->kind);
    }
    if (cJSON_GetArraySize(unknown) > 0) {
        char buf[900];
        if (fv == FV_STRICT) {
            unknown_fields_msg(unknown, buf, sizeof(buf), "unknown field");
            wfail(r, 400, "BadRequest", NULL, "strict decoding error: %s", buf);
            goto out;
        }
        if (fv == FV_WARN && warn_resp) {
            for (const cJSON *u = unknown->child; u; u = u->next) {
                char w[256];
                snprintf(w, sizeof(w), "299 - \"unknown field \\\"%.200s\\\"\"", u->valuestring);
                rm_http_add_header(warn_resp, "Warning", w);
            }
        }
    }
    if (mode != W_STATUS && builtin_prepare(s, k, merged, oldj, r) < 0)
        goto out;
    if (mode != W_STATUS && check_names(k, name, merged, r) < 0)
        goto out;
    if (check_owner_refs(merged, r) < 0)
        goto out;
    if (oldj) {
        /* no new finalizers on an object being deleted (J3) */
        if (md_str(oldj, "deletionTimestamp")) {
            const cJSON *nf = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(merged, "metadata"), "finalizers");
            for (const cJSON *f = nf ? nf->child : NULL; f; f = f->next)
                if (cJSON_IsString(f) && !has_finalizer(oldj, f->valuestring)) {
                    wfail(r, 422, NULL, "metadata.finalizers",
                          "%s \"%s\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be "
                          "added if the object is being deleted, found new finalizers []string{\"%s\"}",
                          k->kind, name, f->valuestring);
                    goto out;
                }
        }
        if (kind_has_generation(k) && !spec_equal(oldj, merged, k->has_status)) {
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(oldj, "metadata"), "generation");
            set_item(md_of(merged), "generation",
                     cJSON_CreateNumber((cJSON_IsNumber(g) ? g->valuedouble : 0) + 1));
        }
        /* a write that changes nothing is not a write (no rv bump, no event) */
        char orv[32];
        snprintf(orv, sizeof(orv), "%llu", (unsigned long long)old->rv);
        set_str(md_of(merged), "resourceVersion", orv);
        if (ks_json_equal(merged, oldj)) {
            r->obj = ks_obj_ref(old);
            r->noop = true;
            goto out;
        }
        if (md_str(merged, "deletionTimestamp") && finalizer_count(merged) == 0 &&
            !(k->type == KS_T_POD && pod_awaits_kubelet(s, merged))) {
            if (dry) {
                r->obj = ks_obj_ref(old);
                goto out;
            }
            cJSON_Delete(merged);
            merged = NULL;
            remove_locked(s, k, ns, name, r);
            goto out;
        }
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(md_of(merged), "resourceVersion");
    }
    if (dry) {
        r->obj = ks_obj_new(merged, old ? old->rv : s->rv);
        merged = NULL;
        goto out;
    }
    ks_obj *stored = NULL;
    int rc = ks_commit(s, k, ns, name, merged, oldj ? KS_EV_MODIFIED : KS_EV_ADDED, &stored);
    merged = NULL;
    if (rc < 0) {
        wfail(r, 500, NULL, NULL, "commit failed: %s", rm_strerror(rc));
        goto out;
    }
    r->obj = ks_obj_ref(stored);
    if (k->type == KS_T_CRD)
        ks_crd_register(s, stored->j);
out:
    pthread_rwlock_unlock(&s->lock);
    cJSON_Delete(merged);
    cJSON_Delete(nw);
    cJSON_Delete(unknown);
}

/* ---- deletion (rules J1–J6) ----------------------------------------------------------------- */
/* Strip ownerReferences naming uid from every object (propagationPolicy=Orphan). Under wrlock. */
static void orphan_dependents(ks_server *s, const char *uid)
{
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        bool dup_tab = false;
        for (size_t j = 0; j < i; j++)
            if (s->kinds[j]->tab == k->tab)
                dup_tab = true;
        if (dup_tab || !k->served)
            continue;
        size_t n;
        ks_obj **v = ks_table_list(k->tab, NULL, &n);
        for (size_t x = 0; x < n; x++) {
            const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(v[x]->j, "metadata"), "ownerReferences");
            bool hit = false;
            for (const cJSON *e = refs ? refs->child : NULL; e; e = e->next)
                if (ks_sget(e, "uid") && !strcmp(ks_sget(e, "uid"), uid))
                    hit = true;
            if (!hit)
                continue;
            cJSON *c = cJSON_Duplicate(v[x]->j, 1);
            cJSON *md = md_of(c);
            cJSON *nrefs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
            cJSON *e = nrefs->child;
            while (e) {
                cJSON *next = e->next;
                if (ks_sget(e, "uid") && !strcmp(ks_sget(e, "uid"), uid))
                    cJSON_Delete(cJSON_DetachItemViaPointer(nrefs, e));
                e = next;
            }
            if (!cJSON_GetArraySize(nrefs))
                cJSON_DeleteItemFromObjectCaseSensitive(md, "ownerReferences");
            char ns[128], name[256];
            snprintf(ns, sizeof(ns), "%s", md_str(c, "namespace") ? md_str(c, "namespace") : "");
            snprintf(name, sizeof(name), "%s", md_str(c, "name") ? md_str(c, "name") : "");
            ks_commit(s, k, ns, name, c, KS_EV_MODIFIED, NULL);
        }
        ks_objs_free(v, n);
    }
}

/* Remove every object of a table (namespace ns, or all); under wrlock. */
static void purge_table(ks_server *s, ks_kind *k, const char *ns)
{
    size_t n;
    ks_obj **v = ks_table_list(k->tab, ns, &n);
    for (size_t x = 0; x < n; x++) {
        ks_wres r;
        memset(&r, 0, sizeof(r));
        char ons[128], name[256];
        snprintf(ons, sizeof(ons), "%s", md_str(v[x]->j, "namespace") ? md_str(v[x]->j, "namespace") : "");
        snprintf(name, sizeof(name), "%s", md_str(v[x]->j, "name") ? md_str(v[x]->j, "name") : "");
        del_locked(s, k, ons, name, "Background", -1, NULL, NULL, false, &r);
        ks_obj_unref(r.obj);
    }
    ks_objs_free(v, n);
}

/* Final removal (no finalizers left) with the namespace and CRD side effects. Under wrlock. */
static void remove_locked(ks_server *s, ks_kind *k, const char *ns, const char *name, ks_wres *r)
{
    if (k->type == KS_T_NAMESPACE) {
        /* the namespace controller's job, done at once: delete everything inside */
        for (size_t i = 0; i < s->nkinds; i++) {
            ks_kind *kk = s->kinds[i];
            bool dup_tab = false;
            for (size_t j = 0; j < i; j++)
                if (s->kinds[j]->tab == kk->tab)
                    dup_tab = true;
            if (!dup_tab && kk->served && kk->namespaced)
                purge_table(s, kk, name);
        }
    }
    ks_obj *last = NULL;
    if (ks_commit(s, k, ns, name, NULL, KS_EV_DELETED, &last) < 0) {
        wfail(r, 500, NULL, NULL, "delete failed");
        return;
    }
    r->obj = ks_obj_ref(last);
    r->deleted = true;
    if (k->type == KS_T_CRD) {
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(last->j, "spec");
        const char *group = ks_sget(spec, "group");
        const char *plural = ks_sget(cJSON_GetObjectItemCaseSensitive(spec, "names"), "plural");
        if (group && plural) {
            for (size_t i = 0; i < s->nkinds; i++) {
                ks_kind *kk = s->kinds[i];
                if (kk->type == KS_T_CR && kk->served && !strcmp(kk->group, group) &&
                    !strcmp(kk->resource, plural)) {
                    purge_table(s, kk, NULL);
                    break;
                }
            }
        }
        ks_crd_unregister(s, name);
    }
}

/* A delete that only marks the object (grace period, finalizers): commit the marked copy c when
 * it changed, else drop it; r->obj gets the version the client sees. Takes c. */
static void mark_deleting(ks_server *s, ks_kind *k, const char *ns, const char *name, cJSON *c, bool changed,
                          ks_obj *old, ks_wres *r)
{
    if (changed) {
        ks_obj *st = NULL;
        ks_commit(s, k, ns, name, c, KS_EV_MODIFIED, &st);
        r->obj = ks_obj_ref(st);
    } else {
        cJSON_Delete(c);
        r->obj = ks_obj_ref(old);
    }
}

static void del_locked(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *prop,
                       int grace, const char *pre_uid, const char *pre_rv, bool dry, ks_wres *r)
{
    char q[256];
    qualified(k, q, sizeof(q));
    ks_obj *old = ks_table_get(k->tab, k->namespaced ? ns : "", name);
    if (!old) {
        wfail(r, 404, "NotFound", NULL, "%s \"%s\" not found", q, name);
        return;
    }
    const char *uid = md_str(old->j, "uid");
    if (pre_uid && *pre_uid && (!uid || strcmp(uid, pre_uid))) {
        wfail(r, 409, "Conflict", NULL,
              "Operation cannot be fulfilled on %s \"%s\": Precondition failed: UID in precondition: %s, UID "
              "in object meta: %s",
              q, name, pre_uid, uid ? uid : "");
        return;
    }
    char orv[32];
    snprintf(orv, sizeof(orv), "%llu", (unsigned long long)old->rv);
    if (pre_rv && *pre_rv && strcmp(pre_rv, orv)) {
        wfail(r, 409, "Conflict", NULL,
              "Operation cannot be fulfilled on %s \"%s\": Precondition failed: ResourceVersion in "
              "precondition: %s, ResourceVersion in object meta: %s",
              q, name, pre_rv, orv);
        return;
    }
    if (k->type == KS_T_NAMESPACE &&
        (!strcmp(name, "default") || !strcmp(name, "kube-system") || !strcmp(name, "kube-public"))) {
        wfail(r, 403, "Forbidden", NULL, "namespaces \"%s\" is forbidden: this namespace may not be deleted",
              name);
        return;
    }
    if (dry) {
        r->obj = ks_obj_ref(old);
        return;
    }
    char uidbuf[64];
    snprintf(uidbuf, sizeof(uidbuf), "%s", uid ? uid : "");
    cJSON *c = cJSON_Duplicate(old->j, 1);
    cJSON *md = md_of(c);
    bool changed = false;
    if (prop && !strcmp(prop, "Orphan")) {
        orphan_dependents(s, uidbuf);
        old = ks_table_get(k->tab, k->namespaced ? ns : "", name);
    } else if (prop && !strcmp(prop, "Foreground") && !has_finalizer(c, "foregroundDeletion")) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(md, "finalizers");
        if (!cJSON_IsArray(f)) {
            cJSON_DeleteItemFromObjectCaseSensitive(md, "finalizers");
            f = cJSON_AddArrayToObject(md, "finalizers");
        }
        cJSON_AddItemToArray(f, cJSON_CreateString("foregroundDeletion"));
        changed = true;
    }
    double now = rm_wall();
    if (k->type == KS_T_POD && grace != 0 && pod_awaits_kubelet(s, c)) {
        const cJSON *tg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "spec"),
                                                           "terminationGracePeriodSeconds");
        int g = grace > 0 ? grace : (cJSON_IsNumber(tg) ? (int)tg->valuedouble : 30);
        const cJSON *dg = cJSON_GetObjectItemCaseSensitive(md, "deletionGracePeriodSeconds");
        if (!md_str(c, "deletionTimestamp") || (cJSON_IsNumber(dg) && g < dg->valuedouble)) {
            char ts[32];
            rm_json_time(ts, now + g);
            set_str(md, "deletionTimestamp", ts);
            set_item(md, "deletionGracePeriodSeconds", cJSON_CreateNumber(g));
            changed = true;
        }
        mark_deleting(s, k, ns, name, c, changed, old, r);
        return;
    }
    if (finalizer_count(c) > 0) {
        if (!md_str(c, "deletionTimestamp")) {
            char ts[32];
            rm_json_time(ts, now);
            set_str(md, "deletionTimestamp", ts);
            set_item(md, "deletionGracePeriodSeconds", cJSON_CreateNumber(0));
            if (kind_has_generation(k)) {
                const cJSON *g = cJSON_GetObjectItemCaseSensitive(md, "generation");
                set_item(md, "generation", cJSON_CreateNumber((cJSON_IsNumber(g) ? g->valuedouble : 0) + 1));
            }
            if (k->type == KS_T_NAMESPACE) {
                cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "status");
                if (st)
                    set_str(st, "phase", "Terminating");
            }
            changed = true;
        }
        mark_deleting(s, k, ns, name, c, changed, old, r);
        return;
    }
    cJSON_Delete(c);
    remove_locked(s, k, ns, name, r);
}

int ks_internal_delete(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *propagation,
                       int grace)
{
    ks_wres r;
    memset(&r, 0, sizeof(r));
    pthread_rwlock_wrlock(&s->lock);
    del_locked(s, k, ns, name, propagation ? propagation : "Background", grace, NULL, NULL, false, &r);
    pthread_rwlock_unlock(&s->lock);
    ks_obj_unref(r.obj);
    return r.code == 404 ? RM_ENOTFOUND : r.code ? RM_ERR : RM_OK;
}

int ks_internal_remove(ks_server *s, ks_kind *k, const char *ns, const char *name, const char *uid)
{
    int rc = RM_OK;
    pthread_rwlock_wrlock(&s->lock);
    ks_obj *o = ks_table_get(k->tab, ns, name);
    if (!o || (uid && (!md_str(o->j, "uid") || strcmp(md_str(o->j, "uid"), uid)))) {
        rc = RM_ENOTFOUND;
    } else if (finalizer_count(o->j) == 0) {
        rc = ks_commit(s, k, ns, name, NULL, KS_EV_DELETED, NULL);
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

int ks_internal_create(ks_server *s, ks_kind *k, const char *ns, cJSON *obj)
{
    const char *n = md_str(obj, "name");
    const char *g = md_str(obj, "generateName");
    char name[256];
    if (n && *n)
        snprintf(name, sizeof(name), "%s", n);
    else if (g && *g)
        ks_gen_name(s, g, name, sizeof(name));
    else {
        cJSON_Delete(obj);
        return RM_EINVAL;
    }
    ks_wres r;
    ks_apply_write(s, k, ns, name, obj, W_CREATE, NULL, 0, FV_IGNORE, NULL, false, &r);
    ks_obj_unref(r.obj);
    return r.code == 0 ? RM_OK : r.code == 409 ? RM_ECONFLICT : RM_ERR;
}

int ks_internal_update(ks_server *s, ks_kind *k, const char *ns, const char *name, ks_mutate_fn fn, void *ud)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        pthread_rwlock_rdlock(&s->lock);
        ks_obj *o = ks_obj_ref(ks_table_get(k->tab, ns, name));
        pthread_rwlock_unlock(&s->lock);
        if (!o)
            return RM_ENOTFOUND;
        cJSON *c = cJSON_Duplicate(o->j, 1);
        uint64_t rv = o->rv;
        ks_obj_unref(o);
        int m = c ? fn(c, ud) : -1;
        if (m <= 0) {
            cJSON_Delete(c);
            return m < 0 ? RM_ERR : RM_OK;
        }
        ks_wres r;
        ks_apply_write(s, k, ns, name, c, W_INTERNAL, NULL, rv, FV_IGNORE, NULL, false, &r);
        ks_obj_unref(r.obj);
        if (r.code == -1)
            continue;
        if (r.code == 404)
            return RM_ENOTFOUND;
        if (r.code) {
            rm_warn("kubesim internal update failed kind=%s name=%s/%s code=%d msg=\"%s\"", k->kind, ns, name,
                    r.code, r.msg);
            return RM_ERR;
        }
        return RM_OK;
    }
    return RM_ECONFLICT;
}

/* ---- list paging snapshots (rule E5) -------------------------------------------------------- */
#define KS_SNAP_MAX 64
#define KS_SNAP_TTL 300.0
typedef struct ks_snap {
    unsigned id;
    ks_obj **objs;
    size_t n;
    uint64_t rv;
    double created;
    const ks_kind *k;
} ks_snap;

struct ks_snapshots {
    pthread_mutex_t mu;
    ks_snap v[KS_SNAP_MAX];
    unsigned next_id;
};

static struct ks_snapshots *snaps(ks_server *s)
{
    /* created lazily under reqmu (cheap, once) */
    pthread_mutex_lock(&s->reqmu);
    if (!s->snaps) {
        s->snaps = calloc(1, sizeof(*s->snaps));
        if (s->snaps)
            pthread_mutex_init(&s->snaps->mu, NULL);
    }
    pthread_mutex_unlock(&s->reqmu);
    return s->snaps;
}

void ks_snapshots_clear(ks_server *s);
void ks_snapshots_clear(ks_server *s)
{
    struct ks_snapshots *ss = snaps(s);
    if (!ss)
        return;
    pthread_mutex_lock(&ss->mu);
    for (int i = 0; i < KS_SNAP_MAX; i++) {
        ks_objs_free(ss->v[i].objs, ss->v[i].n);
        memset(&ss->v[i], 0, sizeof(ss->v[i]));
    }
    pthread_mutex_unlock(&ss->mu);
}

/* Stores objs (takes ownership) and returns its id. */
static unsigned snap_put(ks_server *s, const ks_kind *k, ks_obj **objs, size_t n, uint64_t rv)
{
    struct ks_snapshots *ss = snaps(s);
    if (!ss) {
        ks_objs_free(objs, n);
        return 0;
    }
    pthread_mutex_lock(&ss->mu);
    int slot = 0;
    double now = rm_mono();
    for (int i = 0; i < KS_SNAP_MAX; i++) {
        if (ss->v[i].objs && now - ss->v[i].created > KS_SNAP_TTL) {
            ks_objs_free(ss->v[i].objs, ss->v[i].n);
            memset(&ss->v[i], 0, sizeof(ss->v[i]));
        }
        if (!ss->v[i].objs) {
            slot = i;
            break;
        }
        if (ss->v[i].created < ss->v[slot].created)
            slot = i;
    }
    ks_objs_free(ss->v[slot].objs, ss->v[slot].n);
    unsigned id = ++ss->next_id;
    ss->v[slot] = (ks_snap){.id = id, .objs = objs, .n = n, .rv = rv, .created = now, .k = k};
    pthread_mutex_unlock(&ss->mu);
    return id;
}

/* Copy refs of objs[off..off+limit) from snapshot id; -1 unknown/expired. */
static int snap_get(ks_server *s, unsigned id, size_t off, size_t limit, ks_obj ***out, size_t *n,
                    size_t *total, uint64_t *rv)
{
    pthread_rwlock_rdlock(&s->lock);
    uint64_t dropped = s->ring_dropped_rv;
    pthread_rwlock_unlock(&s->lock);
    struct ks_snapshots *ss = snaps(s);
    if (!ss)
        return -1;
    int rc = -1;
    pthread_mutex_lock(&ss->mu);
    for (int i = 0; i < KS_SNAP_MAX; i++) {
        ks_snap *sp = &ss->v[i];
        if (!sp->objs || sp->id != id)
            continue;
        if (rm_mono() - sp->created > KS_SNAP_TTL || (dropped && sp->rv < dropped))
            break;
        size_t cnt = off < sp->n ? sp->n - off : 0;
        if (limit && cnt > limit)
            cnt = limit;
        ks_obj **v = malloc((cnt + 1) * sizeof(*v));
        if (!v)
            break;
        for (size_t j = 0; j < cnt; j++)
            v[j] = ks_obj_ref(sp->objs[off + j]);
        *out = v;
        *n = cnt;
        *total = sp->n;
        *rv = sp->rv;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&ss->mu);
    return rc;
}

static int parse_rv(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-' || s[0] == '+')
        return -1;
    *out = v;
    return 1;
}

static int parse_selectors(const rm_http_req *req, const ks_kind *k, ks_lsel **ls, ks_fsel **fs,
                           rm_http_resp *resp)
{
    rm_err e = {0};
    *ls = NULL;
    *fs = NULL;
    if (ks_lsel_parse(rm_http_query(req, "labelSelector"), ls, &e) < 0) {
        ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "%s", e.msg);
        return -1;
    }
    if (ks_fsel_parse(rm_http_query(req, "fieldSelector"), field_labels(k), fs, &e) < 0) {
        ks_lsel_free(*ls);
        *ls = NULL;
        ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "%s", e.msg);
        return -1;
    }
    return 0;
}

static int handle_list(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    ks_kind *k = ri->k;
    const char *rvq = rm_http_query(req, "resourceVersion");
    const char *match = rm_http_query(req, "resourceVersionMatch");
    const char *cont = rm_http_query(req, "continue");
    const char *lim = rm_http_query(req, "limit");
    if (truthy(rm_http_query(req, "sendInitialEvents")))
        return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                         "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                         "sendInitialEvents is forbidden for list");
    if (match && *match) {
        if (!rvq || !*rvq)
            return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                             "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
                             "resourceVersionMatch is forbidden unless resourceVersion is provided");
        if (cont && *cont)
            return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                             "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
                             "resourceVersionMatch is forbidden when continue is provided");
        if (!strcmp(match, "Exact") && !strcmp(rvq, "0"))
            return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                             "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
                             "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"");
        if (strcmp(match, "Exact") && strcmp(match, "NotOlderThan"))
            return ks_status(
                resp, 422, "Invalid", NULL, NULL, NULL,
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"%.60s\"",
                match);
    }
    uint64_t want_rv = 0;
    if (parse_rv(rvq, &want_rv) < 0)
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "invalid resource version: %.60s", rvq);
    size_t limit = 0;
    if (lim && *lim) {
        char *end;
        long long l = strtoll(lim, &end, 10);
        if (*end || l < 0)
            return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "invalid limit: %.60s", lim);
        limit = (size_t)l;
    }
    ks_lsel *ls;
    ks_fsel *fs;
    if (parse_selectors(req, k, &ls, &fs, resp) < 0)
        return RM_OK;
    ks_obj **page = NULL;
    size_t npage = 0, total = 0, off = 0;
    uint64_t rv = 0;
    unsigned snap_id = 0;
    int rc = RM_OK;
    if (cont && *cont) {
        unsigned id;
        unsigned long long o;
        if (sscanf(cont, "ks1.%u.%llu", &id, &o) != 2) {
            rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                           "continue key is not valid: incorrect encoded start resourceVersion (version "
                           "meta.k8s.io/v1)");
            goto out;
        }
        if (snap_get(s, id, (size_t)o, limit, &page, &npage, &total, &rv) < 0) {
            rc = ks_status(
                resp, 410, "Expired", NULL, NULL, NULL,
                "The provided continue parameter is too old to display a consistent list result. You can "
                "start a new list without the continue parameter, or use the continue token in this response "
                "to retrieve the remainder of the results. Continuing with the provided token results in an "
                "inconsistent list - objects that were created, modified, or deleted between the time the "
                "first chunk was returned and now may show up in the list.");
            goto out;
        }
        snap_id = id;
        off = (size_t)o;
    } else {
        pthread_rwlock_rdlock(&s->lock);
        rv = s->rv;
        if (match && !strcmp(match, "Exact") && want_rv != rv) {
            uint64_t cur = s->rv;
            pthread_rwlock_unlock(&s->lock);
            if (want_rv > cur)
                rc = ks_status(resp, 504, "Timeout", NULL, NULL, NULL,
                               "Too large resource version: %llu, current: %llu", (unsigned long long)want_rv,
                               (unsigned long long)cur);
            else
                rc =
                    ks_status(resp, 410, "Expired", NULL, NULL, NULL, "too old resource version: %llu (%llu)",
                              (unsigned long long)want_rv, (unsigned long long)cur);
            goto out;
        }
        if (want_rv > rv) {
            uint64_t cur = s->rv;
            pthread_rwlock_unlock(&s->lock);
            rc = ks_status(resp, 504, "Timeout", NULL, NULL, NULL,
                           "Too large resource version: %llu, current: %llu", (unsigned long long)want_rv,
                           (unsigned long long)cur);
            goto out;
        }
        size_t n;
        ks_obj **all = ks_table_list(k->tab, ri->has_ns ? ri->ns : NULL, &n);
        pthread_rwlock_unlock(&s->lock);
        if (!all) {
            rc = RM_ENOMEM;
            goto out;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (obj_matches(k, NULL, ls, fs, all[i]->j))
                all[m++] = all[i];
            else
                ks_obj_unref(all[i]);
        }
        total = m;
        if (limit && m > limit) {
            page = malloc((limit + 1) * sizeof(*page));
            if (!page) {
                ks_objs_free(all, m);
                rc = RM_ENOMEM;
                goto out;
            }
            for (size_t i = 0; i < limit; i++)
                page[i] = ks_obj_ref(all[i]);
            npage = limit;
            snap_id = snap_put(s, k, all, m, rv);
        } else {
            page = all;
            npage = m;
        }
    }
    char token[64] = "";
    size_t remaining = 0;
    if (snap_id && off + npage < total) {
        snprintf(token, sizeof(token), "ks1.%u.%zu", snap_id, off + npage);
        remaining = total - off - npage;
    }
    if (ks_wants_table(req)) {
        cJSON *t = ks_table_build(s, k, page, npage, true);
        cJSON *md = cJSON_GetObjectItemCaseSensitive(t, "metadata");
        char rvs[32];
        snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
        set_str(md, "resourceVersion", rvs);
        if (token[0]) {
            set_str(md, "continue", token);
            cJSON_AddNumberToObject(md, "remainingItemCount", (double)remaining);
        }
        rc = ks_reply_json(resp, 200, t);
        goto out;
    }
    ks_buf b = {0};
    char av[256];
    ks_buf_printf(&b, "{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":{\"resourceVersion\":\"%llu\"",
                  k->list_kind, ks_kind_apiversion(k, av, sizeof(av)), (unsigned long long)rv);
    if (token[0])
        ks_buf_printf(&b, ",\"continue\":\"%s\",\"remainingItemCount\":%zu", token, remaining);
    ks_buf_puts(&b, "},\"items\":[");
    for (size_t i = 0; i < npage; i++) {
        if (i)
            ks_buf_add(&b, ",", 1);
        append_obj(&b, k, page[i]);
    }
    ks_buf_puts(&b, "]}");
    size_t len;
    resp->body = ks_buf_take(&b, &len);
    resp->body_len = len;
    resp->status = 200;
    rc = resp->body ? RM_OK : RM_ENOMEM;
out:
    ks_objs_free(page, npage);
    ks_lsel_free(ls);
    ks_fsel_free(fs);
    return rc;
}

/* ---- watch (rules F1–F8) -------------------------------------------------------------------- */
typedef struct ks_watch {
    ks_server *s;
    ks_kind *k;
    char ns[128];
    ks_lsel *ls;
    ks_fsel *fs;
    uint64_t cursor; /* every event with rv <= cursor has been considered */
    bool bookmarks, table, first_table, initial_end_bookmark;
    double deadline, last_bookmark;
    unsigned gen;
    ks_obj **initial; /* synthetic ADDEDs still to send */
    size_t ninitial, initial_pos;
    ks_buf out;
    size_t out_off;
    bool done;          /* end after out drains */
    bool expired_check; /* check the window on the first scan */
    ks_waiter waiter;
    bool waiting;
} ks_watch;

static double bookmark_interval(void)
{
    const char *e = getenv("KUBESIM_BOOKMARK_SECONDS");
    double v = e ? atof(e) : 0;
    return v > 0 ? v : 5.0;
}

static void watch_free(void *ud)
{
    ks_watch *w = ud;
    if (!w)
        return;
    if (w->waiting)
        ks_waiter_del(w->k->tab, &w->waiter);
    ks_lsel_free(w->ls);
    ks_fsel_free(w->fs);
    for (size_t i = w->initial_pos; w->initial && i < w->ninitial; i++)
        ks_obj_unref(w->initial[i]);
    free(w->initial);
    ks_buf_free(&w->out);
    free(w);
}

static void emit(ks_watch *w, const char *type, const ks_obj *o)
{
    ks_buf *b = &w->out;
    ks_buf_printf(b, "{\"type\":\"%s\",\"object\":", type);
    if (w->table) {
        ks_obj *one[1] = {(ks_obj *)o};
        cJSON *t = ks_table_build(w->s, w->k, one, 1, w->first_table);
        w->first_table = false;
        char *s = t ? cJSON_PrintUnformatted(t) : NULL;
        cJSON_Delete(t);
        if (s) {
            ks_buf_puts(b, s);
            free(s);
        } else {
            ks_buf_puts(b, "{}");
        }
    } else {
        append_obj(b, w->k, o);
    }
    ks_buf_puts(b, "}\n");
}

static void emit_bookmark(ks_watch *w, uint64_t rv, bool initial_end)
{
    char av[256];
    ks_buf_printf(&w->out,
                  "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":"
                  "{\"resourceVersion\":\"%llu\"%s}}}\n",
                  w->k->kind, ks_kind_apiversion(w->k, av, sizeof(av)), (unsigned long long)rv,
                  initial_end ? ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" : "");
}

static void emit_expired(ks_watch *w, uint64_t asked, uint64_t oldest)
{
    ks_buf_printf(&w->out,
                  "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                  "\"status\":\"Failure\",\"message\":\"too old resource version: %llu (%llu)\","
                  "\"reason\":\"Expired\",\"code\":410}}\n",
                  (unsigned long long)asked, (unsigned long long)oldest);
    w->done = true;
}

/* Scan the ring for events after the cursor; fills w->out. Caller holds rdlock. */
static void watch_scan(ks_watch *w)
{
    ks_server *s = w->s;
    if (w->expired_check) {
        w->expired_check = false;
        if (s->ring_dropped_rv && w->cursor < s->ring_dropped_rv) {
            emit_expired(w, w->cursor, s->ring_dropped_rv + 1);
            return;
        }
    }
    if (s->ring_dropped_rv && w->cursor < s->ring_dropped_rv) {
        /* fell out of the window while we were slow: the client must re-list */
        emit_expired(w, w->cursor, s->ring_dropped_rv + 1);
        return;
    }
    if (s->ring_len == 0)
        return;
    /* binary search for the first event with rv > cursor */
    size_t lo = 0, hi = s->ring_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->ring[(s->ring_start + mid) % KS_RING_CAP].rv <= w->cursor)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < s->ring_len; i++) {
        const ks_event *e = &s->ring[(s->ring_start + i) % KS_RING_CAP];
        w->cursor = e->rv;
        if (e->tab != w->k->tab)
            continue;
        bool now_m = obj_matches(w->k, w->ns, w->ls, w->fs, e->obj->j);
        bool was_m = e->old && obj_matches(w->k, w->ns, w->ls, w->fs, e->old->j);
        const char *type = NULL;
        if (e->type == KS_EV_ADDED)
            type = now_m ? "ADDED" : NULL;
        else if (e->type == KS_EV_DELETED)
            type = (now_m || was_m) ? "DELETED" : NULL;
        else if (now_m && was_m)
            type = "MODIFIED";
        else if (now_m)
            type = "ADDED";
        else if (was_m)
            type = "DELETED";
        if (type)
            emit(w, type, e->obj);
        if (w->out.len > 256 * 1024)
            break;
    }
}

static ssize_t watch_read(void *ud, char *buf, size_t cap)
{
    ks_watch *w = ud;
    ks_server *s = w->s;
    double until = rm_mono() + 0.5;
    for (;;) {
        if (w->out_off < w->out.len) {
            size_t n = w->out.len - w->out_off;
            if (n > cap)
                n = cap;
            memcpy(buf, w->out.p + w->out_off, n);
            w->out_off += n;
            if (w->out_off == w->out.len)
                w->out.len = w->out_off = 0;
            return (ssize_t)n;
        }
        if (w->done || atomic_load(&s->stopping) || atomic_load(&s->faults.watch_gen) != w->gen ||
            rm_mono() >= w->deadline)
            return -1;
        if (w->initial_pos < w->ninitial) {
            while (w->initial_pos < w->ninitial && w->out.len < 256 * 1024) {
                ks_obj *o = w->initial[w->initial_pos];
                emit(w, "ADDED", o);
                ks_obj_unref(o);
                w->initial[w->initial_pos++] = NULL;
            }
            if (w->initial_pos == w->ninitial && w->initial_end_bookmark)
                emit_bookmark(w, w->cursor, true);
            continue;
        }
        ks_waiter_arm(w->k->tab, &w->waiter);
        pthread_rwlock_rdlock(&s->lock);
        watch_scan(w);
        uint64_t cur = w->cursor;
        pthread_rwlock_unlock(&s->lock);
        if (w->out.len)
            continue;
        double now = rm_mono();
        if (w->bookmarks && now - w->last_bookmark >= bookmark_interval()) {
            w->last_bookmark = now;
            emit_bookmark(w, cur, false);
            continue;
        }
        if (now >= until)
            return 0;
        /* sleep until a commit to our table in our namespace (or a short timeout) */
        if (ks_waiter_wait(w->k->tab, &w->waiter, 200)) {
            /* coalesce: under a burst of writes, a short pause lets one wakeup carry many
             * events instead of waking a thousand streams per commit */
            struct timespec co = {0, 3 * 1000000L};
            nanosleep(&co, NULL);
        } else {
            /* Nothing concerned us since the last arm: every commit up to the current rv
             * either signaled us or is about other namespaces, so skip them unscanned. */
            pthread_rwlock_rdlock(&s->lock);
            uint64_t rv = s->rv;
            bool window_ok = !s->ring_dropped_rv || w->cursor >= s->ring_dropped_rv;
            pthread_rwlock_unlock(&s->lock);
            if (window_ok && rv > w->cursor && ks_waiter_quiet(w->k->tab, &w->waiter))
                w->cursor = rv;
        }
    }
}

static int handle_watch(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    ks_kind *k = ri->k;
    const char *rvq = rm_http_query(req, "resourceVersion");
    const char *match = rm_http_query(req, "resourceVersionMatch");
    bool sie = truthy(rm_http_query(req, "sendInitialEvents"));
    uint64_t rv = 0;
    int have_rv = parse_rv(rvq, &rv);
    if (have_rv < 0)
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "invalid resource version: %.60s", rvq);
    if (sie && (!match || strcmp(match, "NotOlderThan")))
        return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
                         "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan");
    if (sie && !truthy(rm_http_query(req, "allowWatchBookmarks")))
        return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                         "ListOptions.meta.k8s.io \"\" is invalid: allowWatchBookmarks: Forbidden: "
                         "sendInitialEvents requires setting allowWatchBookmarks to true");
    if (!sie && match && *match)
        return ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: "
                         "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided");
    ks_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return RM_ENOMEM;
    w->s = s;
    w->k = k;
    if (ri->has_ns)
        snprintf(w->ns, sizeof(w->ns), "%s", ri->ns);
    if (parse_selectors(req, k, &w->ls, &w->fs, resp) < 0) {
        watch_free(w);
        return RM_OK;
    }
    w->bookmarks = truthy(rm_http_query(req, "allowWatchBookmarks"));
    w->table = ks_wants_table(req);
    w->first_table = true;
    double to = 1800;
    const char *ts = rm_http_query(req, "timeoutSeconds");
    if (ts && *ts) {
        char *end;
        double v = strtod(ts, &end);
        if (*end || v < 0 || !isfinite(v)) {
            watch_free(w);
            return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "invalid timeoutSeconds: %.40s", ts);
        }
        if (v > 0)
            to = v;
    }
    w->deadline = rm_mono() + to;
    w->last_bookmark = rm_mono();
    w->gen = atomic_load(&s->faults.watch_gen);
    w->waiter.ls = ks_lsel_empty(w->ls) ? NULL : w->ls;
    w->waiter.fs = ks_fsel_empty(w->fs) ? NULL : w->fs;
    ks_waiter_add(k->tab, &w->waiter, w->ns);
    w->waiting = true;
    bool force410 = false;
    pthread_mutex_lock(&s->faults.mu);
    if (s->faults.watch_410_n > 0) {
        s->faults.watch_410_n--;
        force410 = true;
    }
    pthread_mutex_unlock(&s->faults.mu);
    pthread_rwlock_rdlock(&s->lock);
    if (force410) {
        emit_expired(w, rv, s->rv);
    } else if (sie || have_rv == 0 || rv == 0) {
        size_t n;
        ks_obj **all = ks_table_list(k->tab, w->ns[0] ? w->ns : NULL, &n);
        size_t m = 0;
        for (size_t i = 0; all && i < n; i++) {
            if (obj_matches(k, NULL, w->ls, w->fs, all[i]->j))
                all[m++] = all[i];
            else
                ks_obj_unref(all[i]);
        }
        w->initial = all;
        w->ninitial = m;
        w->cursor = s->rv;
        w->initial_end_bookmark = sie;
    } else {
        w->cursor = rv;
        w->expired_check = true;
    }
    pthread_rwlock_unlock(&s->lock);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->stream.read = watch_read;
    resp->stream.free = watch_free;
    resp->stream.ud = w;
    return RM_OK;
}

/* ---- item handlers -------------------------------------------------------------------------- */
static int parse_body(const rm_http_req *req, rm_http_resp *resp, cJSON **out, bool strict)
{
    *out = NULL;
    const char *ct = rm_http_header(req, "Content-Type");
    bool yaml =
        ct && (!strncasecmp(ct, "application/yaml", 16) || !strncasecmp(ct, "application/x-yaml", 18));
    if (ct && (strstr(ct, "protobuf") || strstr(ct, "cbor")))
        return ks_status(resp, 415, "UnsupportedMediaType", NULL, NULL, NULL,
                         "the body of the request was in an unknown format - accepted media types include: "
                         "application/json, application/yaml"),
               -1;
    if (!req->body_len)
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "the request body is empty"), -1;
    rm_err e = {0};
    cJSON *o = NULL;
    if (yaml) {
        rm_yaml_docs *docs = NULL;
        if (rm_yaml_load(req->body, req->body_len, "body", &docs, &e) == RM_OK && rm_yaml_count(docs) == 1)
            o = rm_yaml_take(docs, 0);
        else if (!e.msg[0])
            snprintf(e.msg, sizeof(e.msg), "exactly one YAML document is required");
        rm_yaml_free(docs);
    } else {
        o = rm_json_parse(req->body, req->body_len, &e);
    }
    if (!o)
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         "couldn't get version/kind; json parse error: %s", e.msg),
               -1;
    if (json_depth(o, KS_MAX_DEPTH + 1) > KS_MAX_DEPTH) {
        cJSON_Delete(o);
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         "the request body nests deeper than %d levels", KS_MAX_DEPTH),
               -1;
    }
    cJSON *dups = cJSON_CreateArray();
    dedupe_keys(o, "", dups);
    if (strict && cJSON_GetArraySize(dups) > 0) {
        char buf[600];
        unknown_fields_msg(dups, buf, sizeof(buf), "json: duplicate field");
        cJSON_Delete(dups);
        cJSON_Delete(o);
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "strict decoding error: %s", buf), -1;
    }
    cJSON_Delete(dups);
    *out = o;
    return 0;
}

/* parse_body for writes of a whole object (create, update): anything but a JSON object is a 400. */
static int parse_object_body(const rm_http_req *req, rm_http_resp *resp, cJSON **out, bool strict)
{
    if (parse_body(req, resp, out, strict) < 0)
        return -1;
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "the body must be a JSON object"), -1;
    }
    return 0;
}

static int field_validation(const rm_http_req *req)
{
    const char *fv = rm_http_query(req, "fieldValidation");
    if (fv && !strcasecmp(fv, "Strict"))
        return FV_STRICT;
    if (fv && !strcasecmp(fv, "Ignore"))
        return FV_IGNORE;
    return FV_WARN;
}

static bool dry_run(const rm_http_req *req)
{
    const char *d = rm_http_query(req, "dryRun");
    return d && !strcmp(d, "All");
}

static int check_type(rm_http_resp *resp, const ks_kind *k, const cJSON *o)
{
    char av[256];
    ks_kind_apiversion(k, av, sizeof(av));
    const char *oav = ks_sget(o, "apiVersion"), *okind = ks_sget(o, "kind");
    if (oav && strcmp(oav, av))
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         "the API version in the data (%s) does not match the expected API version (%s)", oav,
                         av),
               -1;
    if (okind && strcmp(okind, k->kind))
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         "the kind in the data (%s) does not match the expected kind (%s)", okind, k->kind),
               -1;
    return 0;
}

static int handle_get(ks_server *s, rm_http_resp *resp, const rm_http_req *req, ks_ri *ri)
{
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_obj_ref(ks_table_get(ri->k->tab, ri->ns, ri->name));
    pthread_rwlock_unlock(&s->lock);
    if (!o)
        return not_found(resp, ri->k, ri->name);
    int rc;
    if (ks_wants_table(req)) {
        ks_obj *one[1] = {o};
        rc = ks_reply_json(resp, 200, ks_table_build(s, ri->k, one, 1, true));
    } else {
        rc = reply_stored(resp, 200, ri->k, o);
    }
    ks_obj_unref(o);
    return rc;
}

static int handle_create(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    ks_kind *k = ri->k;
    int fv = field_validation(req);
    cJSON *o;
    if (parse_object_body(req, resp, &o, fv == FV_STRICT) < 0)
        return RM_OK;
    if (check_type(resp, k, o) < 0) {
        cJSON_Delete(o);
        return RM_OK;
    }
    if (k->type == KS_T_EVENT_NEW) {
        cJSON *c = ks_event_to_core(o);
        cJSON_Delete(o);
        o = c;
    }
    cJSON *md = md_of(o);
    const char *name = ks_sget(md, "name"), *gen = ks_sget(md, "generateName"),
               *ons = ks_sget(md, "namespace");
    if (ri->has_ns && ons && *ons && strcmp(ons, ri->ns)) {
        cJSON_Delete(o);
        return ks_status(
            resp, 400, "BadRequest", NULL, NULL, NULL,
            "the namespace of the provided object does not match the namespace sent on the request");
    }
    if (ks_sget(md, "resourceVersion") && *ks_sget(md, "resourceVersion")) {
        cJSON_Delete(o);
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         "resourceVersion should not be set on objects to be created");
    }
    if ((!name || !*name) && (!gen || !*gen)) {
        cJSON_Delete(o);
        return ks_status(
            resp, 422, "Invalid", NULL, k->group, k->kind,
            "%s \"\" is invalid: metadata.name: Required value: name or generateName is required", k->kind);
    }
    char namebuf[256];
    bool generated = !name || !*name;
    for (int attempt = 0; attempt < 8; attempt++) {
        if (generated)
            ks_gen_name(s, gen, namebuf, sizeof(namebuf));
        else
            snprintf(namebuf, sizeof(namebuf), "%s", name);
        ks_wres nr = {0};
        /* (a name longer than namebuf is cut at 255 characters: still over every limit) */
        if (ks_check_name(ks_name_format(k->group, k->kind), "metadata.name", namebuf, &nr.causes)) {
            cJSON_Delete(o);
            char qk[200];
            wfail(&nr, 422, NULL, "metadata.name", "x");
            ks_causes_message(&nr.causes, qualified_kind(k, qk, sizeof(qk)), namebuf, nr.msg, sizeof(nr.msg));
            return reply_wfail(resp, k, namebuf, &nr);
        }
        ks_wres r;
        ks_apply_write(s, k, ri->has_ns ? ri->ns : "", namebuf, cJSON_Duplicate(o, 1), W_CREATE, NULL, 0, fv,
                       resp, dry_run(req), &r);
        if (r.code == 409 && generated && !strcmp(r.reason, "AlreadyExists"))
            continue;
        cJSON_Delete(o);
        if (r.code)
            return reply_wfail(resp, k, namebuf, &r);
        int rc = reply_stored(resp, 201, k, r.obj);
        ks_obj_unref(r.obj);
        return rc;
    }
    cJSON_Delete(o);
    return ks_status(resp, 500, "InternalError", NULL, NULL, NULL, "could not generate a unique name");
}

/* Set a dotted path (".spec.replicas") in obj, creating objects on the way. */
static void set_path(cJSON *obj, const char *path, cJSON *v)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path[0] == '.' ? path + 1 : path);
    cJSON *cur = obj;
    char *save = NULL;
    char *tok = strtok_r(buf, ".", &save);
    while (tok) {
        char *next = strtok_r(NULL, ".", &save);
        if (!next) {
            set_item(cur, tok, v);
            return;
        }
        cJSON *c = cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (!cJSON_IsObject(c)) {
            cJSON_DeleteItemFromObjectCaseSensitive(cur, tok);
            c = cJSON_AddObjectToObject(cur, tok);
        }
        cur = c;
        tok = next;
    }
    cJSON_Delete(v);
}

static cJSON *scale_of(const ks_kind *k, const ks_obj *o)
{
    cJSON *sc = cJSON_CreateObject();
    cJSON_AddStringToObject(sc, "kind", "Scale");
    cJSON_AddStringToObject(sc, "apiVersion", "autoscaling/v1");
    cJSON *md = cJSON_AddObjectToObject(sc, "metadata");
    static const char *keep[] = {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"};
    const cJSON *omd = cJSON_GetObjectItemCaseSensitive(o->j, "metadata");
    for (size_t i = 0; i < RM_ARRAY_LEN(keep); i++)
        move_field(md, keep[i], omd, keep[i]);
    const cJSON *sr = ks_jsonpath(o->j, k->scale_spec);
    const cJSON *st = k->scale_status[0] ? ks_jsonpath(o->j, k->scale_status) : NULL;
    const cJSON *sel = k->scale_selector[0] ? ks_jsonpath(o->j, k->scale_selector) : NULL;
    cJSON *spec = cJSON_AddObjectToObject(sc, "spec");
    cJSON_AddNumberToObject(spec, "replicas", cJSON_IsNumber(sr) ? sr->valuedouble : 0);
    cJSON *status = cJSON_AddObjectToObject(sc, "status");
    cJSON_AddNumberToObject(status, "replicas", cJSON_IsNumber(st) ? st->valuedouble : 0);
    if (cJSON_IsString(sel))
        cJSON_AddStringToObject(status, "selector", sel->valuestring);
    return sc;
}

static int reply_scale(rm_http_resp *resp, const ks_kind *k, const ks_obj *o)
{
    return ks_reply_json(resp, 200, scale_of(k, o));
}

/* Write a Scale body into the CR; expect_rv from the Scale (may be NULL). */
static int write_scale(ks_server *s, rm_http_resp *resp, ks_ri *ri, const cJSON *scale, const char *expect_rv,
                       uint64_t internal_rv, int *retry)
{
    ks_kind *k = ri->k;
    const cJSON *rep =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(scale, "spec"), "replicas");
    if (!cJSON_IsNumber(rep) || rep->valuedouble < 0 || rep->valuedouble != floor(rep->valuedouble))
        return ks_status(resp, 422, "Invalid", ri->name, "autoscaling", "Scale",
                         "Scale.autoscaling \"%s\" is invalid: spec.replicas: Invalid value: must be a "
                         "non-negative integer",
                         ri->name);
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_obj_ref(ks_table_get(k->tab, ri->ns, ri->name));
    pthread_rwlock_unlock(&s->lock);
    if (!o)
        return not_found(resp, k, ri->name);
    cJSON *c = cJSON_Duplicate(o->j, 1);
    uint64_t rv = internal_rv ? internal_rv : o->rv;
    ks_obj_unref(o);
    set_path(c, k->scale_spec, cJSON_CreateNumber(rep->valuedouble));
    ks_wres r;
    ks_apply_write(s, k, ri->ns, ri->name, c, W_INTERNAL, expect_rv, rv, FV_IGNORE, resp, false, &r);
    if (r.code == -1) {
        *retry = 1;
        return RM_OK;
    }
    if (r.code)
        return reply_wfail(resp, k, ri->name, &r);
    int rc = reply_scale(resp, k, r.obj);
    ks_obj_unref(r.obj);
    return rc;
}

static int handle_update(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    ks_kind *k = ri->k;
    int fv = field_validation(req);
    cJSON *o;
    if (parse_object_body(req, resp, &o, fv == FV_STRICT) < 0)
        return RM_OK;
    const char *rv = md_str(o, "resourceVersion");
    char rvbuf[32] = "";
    if (rv)
        snprintf(rvbuf, sizeof(rvbuf), "%.31s", rv);
    if (!strcmp(ri->sub, "scale")) {
        int retry = 0, rc = RM_OK;
        for (int i = 0; i < 10; i++) {
            retry = 0;
            rc = write_scale(s, resp, ri, o, rvbuf[0] ? rvbuf : NULL, 0, &retry);
            if (!retry)
                break;
        }
        cJSON_Delete(o);
        return rc;
    }
    if (check_type(resp, k, o) < 0) {
        cJSON_Delete(o);
        return RM_OK;
    }
    const char *bname = md_str(o, "name");
    if (bname && strcmp(bname, ri->name)) {
        int rc =
            ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                      "the name of the object (%s) does not match the name on the URL (%s)", bname, ri->name);
        cJSON_Delete(o);
        return rc;
    }
    if (!rvbuf[0] && k->type == KS_T_CR) {
        cJSON_Delete(o);
        return ks_status(resp, 422, "Invalid", ri->name, k->group, k->kind,
                         "%s \"%s\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be "
                         "specified for an update",
                         k->kind, ri->name);
    }
    if (k->type == KS_T_EVENT_NEW) {
        cJSON *c = ks_event_to_core(o);
        cJSON_Delete(o);
        o = c;
    }
    ks_wres r;
    ks_apply_write(s, k, ri->ns, ri->name, o, ri->sub[0] ? W_STATUS : W_UPDATE, rvbuf[0] ? rvbuf : NULL, 0,
                   fv, resp, dry_run(req), &r);
    if (r.code)
        return reply_wfail(resp, k, ri->name, &r);
    int rc = reply_stored(resp, 200, k, r.obj);
    ks_obj_unref(r.obj);
    return rc;
}

static int handle_patch(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    ks_kind *k = ri->k;
    const char *ct = rm_http_header(req, "Content-Type");
    char ctype[128] = "";
    if (ct) {
        snprintf(ctype, sizeof(ctype), "%s", ct);
        char *semi = strchr(ctype, ';');
        if (semi)
            *semi = 0;
        for (char *p = ctype + strlen(ctype); p > ctype && p[-1] == ' '; p--)
            p[-1] = 0;
    }
    enum { P_JSON, P_MERGE, P_SMP } pt;
    if (!strcasecmp(ctype, "application/json-patch+json"))
        pt = P_JSON;
    else if (!strcasecmp(ctype, "application/merge-patch+json"))
        pt = P_MERGE;
    else if (!strcasecmp(ctype, "application/strategic-merge-patch+json") && k->type != KS_T_CR &&
             k->type != KS_T_CRD)
        pt = P_SMP;
    else if (!strcasecmp(ctype, "application/apply-patch+yaml"))
        return ks_status(resp, 415, "UnsupportedMediaType", NULL, NULL, NULL,
                         "server-side apply (application/apply-patch+yaml) is not supported by kubesim; use "
                         "client-side kubectl apply");
    else
        return ks_status(
            resp, 415, "UnsupportedMediaType", NULL, NULL, NULL,
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json%s",
            (k->type != KS_T_CR && k->type != KS_T_CRD) ? ", application/strategic-merge-patch+json" : "");
    int fv = field_validation(req);
    cJSON *patch;
    if (parse_body(req, resp, &patch, fv == FV_STRICT) < 0)
        return RM_OK;
    if ((pt == P_JSON && !cJSON_IsArray(patch)) || (pt != P_JSON && !cJSON_IsObject(patch))) {
        cJSON_Delete(patch);
        return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                         pt == P_JSON ? "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
                                      : "the patch must be a JSON object");
    }
    /* a patch that sets metadata.resourceVersion makes it a precondition (G4) */
    char user_rv[40] = "";
    if (pt == P_JSON) {
        for (const cJSON *op = patch->child; op; op = op->next) {
            const char *path = ks_sget(op, "path"), *opn = ks_sget(op, "op");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(op, "value");
            if (path && opn && !strcmp(path, "/metadata/resourceVersion") && cJSON_IsString(v) &&
                (!strcmp(opn, "replace") || !strcmp(opn, "add")))
                snprintf(user_rv, sizeof(user_rv), "%.39s", v->valuestring);
        }
    } else {
        const char *v = md_str(patch, "resourceVersion");
        if (v)
            snprintf(user_rv, sizeof(user_rv), "%.39s", v);
    }
    int rc = RM_OK;
    for (int attempt = 0; attempt < 20; attempt++) {
        pthread_rwlock_rdlock(&s->lock);
        ks_obj *o = ks_obj_ref(ks_table_get(k->tab, ri->ns, ri->name));
        pthread_rwlock_unlock(&s->lock);
        if (!o) {
            rc = not_found(resp, k, ri->name);
            break;
        }
        bool scale = !strcmp(ri->sub, "scale");
        cJSON *doc = scale ? scale_of(k, o) : obj_view(k, o);
        uint64_t orv = o->rv;
        ks_obj_unref(o);
        rm_err e = {0};
        int prc = pt == P_JSON    ? ks_json_patch(&doc, patch, &e)
                  : pt == P_MERGE ? ks_merge_patch(&doc, patch, &e)
                                  : ks_strategic_merge_patch(&doc, patch, &e);
        if (prc < 0 || !cJSON_IsObject(doc)) {
            cJSON_Delete(doc);
            if (prc == RM_EPROTO)
                rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "%s", e.msg);
            else
                rc = ks_status(resp, 422, "Invalid", ri->name, k->group, k->resource, "%s",
                               prc < 0 ? e.msg : "the patch result is not an object");
            break;
        }
        if (scale) {
            int retry = 0;
            rc = write_scale(s, resp, ri, doc, user_rv[0] ? user_rv : NULL, orv, &retry);
            cJSON_Delete(doc);
            if (retry)
                continue;
            break;
        }
        if (k->type == KS_T_EVENT_NEW) {
            cJSON *c = ks_event_to_core(doc);
            cJSON_Delete(doc);
            doc = c;
        }
        ks_wres r;
        ks_apply_write(s, k, ri->ns, ri->name, doc, ri->sub[0] ? W_STATUS : W_UPDATE,
                       user_rv[0] ? user_rv : NULL, orv, fv, resp, dry_run(req), &r);
        if (r.code == -1)
            continue;
        if (r.code) {
            rc = reply_wfail(resp, k, ri->name, &r);
            break;
        }
        rc = reply_stored(resp, 200, k, r.obj);
        ks_obj_unref(r.obj);
        break;
    }
    cJSON_Delete(patch);
    return rc;
}

static int delete_reply(rm_http_resp *resp, ks_kind *k, const char *name, ks_wres *r)
{
    if (r->code)
        return reply_wfail(resp, k, name, r);
    int rc;
    if (r->deleted && k->type != KS_T_POD) {
        cJSON *st = status_obj(200, "", name, k->group, k->resource, "");
        cJSON_DeleteItemFromObjectCaseSensitive(st, "message");
        cJSON_DeleteItemFromObjectCaseSensitive(st, "reason");
        cJSON *d = cJSON_GetObjectItemCaseSensitive(st, "details");
        const char *uid = md_str(r->obj->j, "uid");
        if (uid && d)
            cJSON_AddStringToObject(d, "uid", uid);
        rc = ks_reply_json(resp, 200, st);
    } else {
        rc = reply_stored(resp, 200, k, r->obj);
    }
    ks_obj_unref(r->obj);
    return rc;
}

static int delete_opts(const rm_http_req *req, rm_http_resp *resp, char *prop, size_t pcap, int *grace,
                       char *pre_uid, char *pre_rv, bool *dry)
{
    *grace = -1;
    prop[0] = pre_uid[0] = pre_rv[0] = 0;
    *dry = dry_run(req);
    const char *qp = rm_http_query(req, "propagationPolicy");
    if (qp)
        snprintf(prop, pcap, "%s", qp);
    const char *qg = rm_http_query(req, "gracePeriodSeconds");
    if (qg && *qg)
        *grace = atoi(qg);
    if (req->body_len) {
        rm_err e = {0};
        cJSON *o = rm_json_parse(req->body, req->body_len, &e);
        if (!o || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "invalid DeleteOptions: %s",
                      e.msg[0] ? e.msg : "not an object");
            return -1;
        }
        const char *p = ks_sget(o, "propagationPolicy");
        if (p)
            snprintf(prop, pcap, "%s", p);
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "gracePeriodSeconds");
        if (cJSON_IsNumber(g))
            *grace = (int)g->valuedouble;
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(o, "preconditions");
        if (ks_sget(pre, "uid"))
            snprintf(pre_uid, 64, "%s", ks_sget(pre, "uid"));
        if (ks_sget(pre, "resourceVersion"))
            snprintf(pre_rv, 32, "%.31s", ks_sget(pre, "resourceVersion"));
        const cJSON *dr = cJSON_GetObjectItemCaseSensitive(o, "dryRun");
        if (cJSON_IsArray(dr) && cJSON_GetArraySize(dr) > 0)
            *dry = true;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "orphanDependents")) && !prop[0])
            snprintf(prop, pcap, "Orphan");
        cJSON_Delete(o);
    }
    if (prop[0] && strcmp(prop, "Background") && strcmp(prop, "Foreground") && strcmp(prop, "Orphan")) {
        ks_status(resp, 422, "Invalid", NULL, NULL, NULL,
                  "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: "
                  "\"%.40s\": supported values: \"Foreground\", \"Background\", \"Orphan\"",
                  prop);
        return -1;
    }
    return 0;
}

static int handle_delete(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    char prop[32], pre_uid[64], pre_rv[32];
    int grace;
    bool dry;
    if (delete_opts(req, resp, prop, sizeof(prop), &grace, pre_uid, pre_rv, &dry) < 0)
        return RM_OK;
    ks_wres r;
    memset(&r, 0, sizeof(r));
    pthread_rwlock_wrlock(&s->lock);
    del_locked(s, ri->k, ri->ns, ri->name, prop[0] ? prop : "Background", grace, pre_uid, pre_rv, dry, &r);
    pthread_rwlock_unlock(&s->lock);
    return delete_reply(resp, ri->k, ri->name, &r);
}

static int handle_deletecollection(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    char prop[32], pre_uid[64], pre_rv[32];
    int grace;
    bool dry;
    if (delete_opts(req, resp, prop, sizeof(prop), &grace, pre_uid, pre_rv, &dry) < 0)
        return RM_OK;
    ks_lsel *ls;
    ks_fsel *fs;
    if (parse_selectors(req, ri->k, &ls, &fs, resp) < 0)
        return RM_OK;
    pthread_rwlock_wrlock(&s->lock);
    size_t n;
    ks_obj **v = ks_table_list(ri->k->tab, ri->has_ns ? ri->ns : NULL, &n);
    for (size_t i = 0; v && i < n; i++) {
        if (!obj_matches(ri->k, NULL, ls, fs, v[i]->j))
            continue;
        char ns[128], name[256];
        snprintf(ns, sizeof(ns), "%s", md_str(v[i]->j, "namespace") ? md_str(v[i]->j, "namespace") : "");
        snprintf(name, sizeof(name), "%s", md_str(v[i]->j, "name") ? md_str(v[i]->j, "name") : "");
        ks_wres r;
        memset(&r, 0, sizeof(r));
        del_locked(s, ri->k, ns, name, prop[0] ? prop : "Background", grace, NULL, NULL, dry, &r);
        ks_obj_unref(r.obj);
    }
    pthread_rwlock_unlock(&s->lock);
    ks_objs_free(v, n);
    ks_lsel_free(ls);
    ks_fsel_free(fs);
    cJSON *st = status_obj(200, "", NULL, NULL, NULL, "");
    cJSON_DeleteItemFromObjectCaseSensitive(st, "message");
    cJSON_DeleteItemFromObjectCaseSensitive(st, "reason");
    return ks_reply_json(resp, 200, st);
}

/* ---- pods/log ------------------------------------------------------------------------------- */
typedef struct ks_logf {
    ks_server *s;
    FILE *f;
    char ns[128], pod[256], container[64], uid[64];
    double deadline, last_check;
    int idle_checks;
} ks_logf;

static void logf_free(void *ud)
{
    ks_logf *l = ud;
    if (l && l->f)
        fclose(l->f);
    free(l);
}

/* Is the container still running (or waiting to restart)? */
static bool container_alive(ks_server *s, const char *ns, const char *pod, const char *uid, const char *cname)
{
    ks_kind *pk = ks_core_kind(s, KS_T_POD);
    bool alive = false;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_table_get(pk->tab, ns, pod);
    if (o && md_str(o->j, "uid") && !strcmp(md_str(o->j, "uid"), uid)) {
        const char *phase = ks_sget(cJSON_GetObjectItemCaseSensitive(o->j, "status"), "phase");
        alive = !phase || (strcmp(phase, "Succeeded") && strcmp(phase, "Failed"));
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o->j, "status"),
                                                           "containerStatuses");
        for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next)
            if (ks_sget(c, "name") && !strcmp(ks_sget(c, "name"), cname)) {
                const cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "state");
                if (cJSON_GetObjectItemCaseSensitive(st, "terminated"))
                    alive = false;
            }
    }
    pthread_rwlock_unlock(&s->lock);
    return alive;
}

static ssize_t logf_read(void *ud, char *buf, size_t cap)
{
    ks_logf *l = ud;
    if (atomic_load(&l->s->stopping) || rm_mono() > l->deadline)
        return -1;
    for (int i = 0; i < 50; i++) {
        size_t n = fread(buf, 1, cap, l->f);
        if (n > 0)
            return (ssize_t)n;
        clearerr(l->f);
        double now = rm_mono();
        if (now - l->last_check > 0.5) {
            l->last_check = now;
            if (!container_alive(l->s, l->ns, l->pod, l->uid, l->container)) {
                n = fread(buf, 1, cap, l->f);
                return n > 0 ? (ssize_t)n : -1;
            }
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int handle_log(ks_server *s, const rm_http_req *req, rm_http_resp *resp, ks_ri *ri)
{
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_obj_ref(ks_table_get(ri->k->tab, ri->ns, ri->name));
    pthread_rwlock_unlock(&s->lock);
    if (!o)
        return not_found(resp, ri->k, ri->name);
    const char *cq = rm_http_query(req, "container");
    const cJSON *cs =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o->j, "spec"), "containers");
    char cname[64] = "", uid[64];
    snprintf(uid, sizeof(uid), "%s", md_str(o->j, "uid") ? md_str(o->j, "uid") : "");
    int rc = RM_OK;
    if (cq && *cq) {
        bool found = false;
        for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next)
            if (ks_sget(c, "name") && !strcmp(ks_sget(c, "name"), cq))
                found = true;
        if (!found) {
            rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                           "container %.60s is not valid for pod %s", cq, ri->name);
            goto out;
        }
        snprintf(cname, sizeof(cname), "%s", cq);
    } else if (cJSON_GetArraySize(cs) == 1) {
        snprintf(cname, sizeof(cname), "%s", ks_sget(cs->child, "name") ? ks_sget(cs->child, "name") : "");
    } else {
        ks_buf b = {0};
        for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next)
            ks_buf_printf(&b, "%s%s", b.len ? " " : "", ks_sget(c, "name") ? ks_sget(c, "name") : "");
        rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                       "a container name must be specified for pod %s, choose one of: [%s]", ri->name,
                       b.p ? b.p : "");
        ks_buf_free(&b);
        goto out;
    }
    char path[1024];
    bool previous = truthy(rm_http_query(req, "previous"));
    if (ks_kubelet_log_path(s, uid, cname, previous, path, sizeof(path)) < 0) {
        rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                       previous ? "previous terminated container \"%s\" in pod \"%s\" not found"
                                : "container \"%s\" in pod \"%s\" is waiting to start: ContainerCreating",
                       cname, ri->name);
        goto out;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        rc = ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                       "container \"%s\" in pod \"%s\" is waiting to start: ContainerCreating", cname,
                       ri->name);
        goto out;
    }
    const char *tl = rm_http_query(req, "tailLines");
    long tail = tl && *tl ? atol(tl) : -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long start = 0;
    if (tail >= 0) {
        /* start of the last `tail` lines: scan back over at most the last 16 MiB */
        long win = size > 16L * 1024 * 1024 ? 16L * 1024 * 1024 : size;
        char *tb = malloc((size_t)win + 1);
        long off = size - win;
        start = size;
        if (tb && fseek(f, off, SEEK_SET) == 0 && fread(tb, 1, (size_t)win, f) == (size_t)win) {
            long p = win, count = 0;
            if (p > 0 && tb[p - 1] == '\n')
                p--;
            if (tail > 0) {
                while (p > 0) {
                    if (tb[p - 1] == '\n' && ++count == tail)
                        break;
                    p--;
                }
                start = off + p;
            }
        }
        free(tb);
    }
    const char *lb = rm_http_query(req, "limitBytes");
    long limit = lb && *lb ? atol(lb) : -1;
    fseek(f, start, SEEK_SET);
    if (truthy(rm_http_query(req, "follow"))) {
        ks_logf *l = calloc(1, sizeof(*l));
        if (!l) {
            fclose(f);
            rc = RM_ENOMEM;
            goto out;
        }
        l->s = s;
        l->f = f;
        snprintf(l->ns, sizeof(l->ns), "%s", ri->ns);
        snprintf(l->pod, sizeof(l->pod), "%s", ri->name);
        snprintf(l->container, sizeof(l->container), "%s", cname);
        snprintf(l->uid, sizeof(l->uid), "%s", uid);
        l->deadline = rm_mono() + 3600;
        resp->status = 200;
        resp->content_type = "text/plain";
        resp->stream.read = logf_read;
        resp->stream.free = logf_free;
        resp->stream.ud = l;
        goto out;
    }
    long n = size - start;
    if (limit >= 0 && n > limit)
        n = limit;
    if (n > 64L * 1024 * 1024)
        n = 64L * 1024 * 1024;
    char *data = malloc((size_t)n + 1);
    size_t got = data ? fread(data, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!data) {
        rc = RM_ENOMEM;
        goto out;
    }
    data[got] = 0;
    resp->status = 200;
    resp->content_type = "text/plain";
    resp->body = data;
    resp->body_len = got;
    if (!got) {
        /* an empty body: body_len 0 means strlen() → "" is fine */
    }
out:
    ks_obj_unref(o);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------------------- */
int ks_handle(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    ks_server *s = ud;
    if (req->body_len > KS_MAX_BODY)
        return ks_status(resp, 413, "RequestEntityTooLarge", NULL, NULL, NULL,
                         "Request entity too large: limit is %u", KS_MAX_BODY);
    int h = ks_admin(s, req, resp);
    if (h)
        return h < 0 ? h : RM_OK;
    h = ks_discovery(s, req, resp);
    if (h) {
        /* non-resource URLs are logged too (verb get, no resource) */
        ks_reqrec d;
        memset(&d, 0, sizeof(d));
        snprintf(d.method, sizeof(d.method), "%s", req->method);
        snprintf(d.path, sizeof(d.path), "%s", req->path);
        snprintf(d.verb, sizeof(d.verb), "get");
        const char *dua = rm_http_header(req, "User-Agent");
        snprintf(d.ua, sizeof(d.ua), "%s", dua ? dua : "");
        d.code = resp->status;
        ks_reqlog_add(s, &d);
        return h < 0 ? h : RM_OK;
    }
    ks_ri ri;
    memset(&ri, 0, sizeof(ri));
    ri.method = req->method;
    ks_reqrec rec;
    memset(&rec, 0, sizeof(rec));
    snprintf(rec.method, sizeof(rec.method), "%s", req->method);
    snprintf(rec.path, sizeof(rec.path), "%s", req->path);
    const char *rct = rm_http_header(req, "Content-Type");
    snprintf(rec.ctype, sizeof(rec.ctype), "%s", rct ? rct : "");
    const char *rua = rm_http_header(req, "User-Agent");
    snprintf(rec.ua, sizeof(rec.ua), "%s", rua ? rua : "");
    if (parse_path(req->path, &ri) < 0) {
        rec.code = 404;
        ks_reqlog_add(s, &rec);
        return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                         "the server could not find the requested resource");
    }
    set_verb(req, &ri);
    snprintf(rec.verb, sizeof(rec.verb), "%s", ri.verb);
    snprintf(rec.group, sizeof(rec.group), "%s", ri.group);
    snprintf(rec.version, sizeof(rec.version), "%s", ri.version);
    snprintf(rec.resource, sizeof(rec.resource), "%s", ri.resource);
    snprintf(rec.sub, sizeof(rec.sub), "%s", ri.sub);
    snprintf(rec.ns, sizeof(rec.ns), "%s", ri.ns);
    snprintf(rec.name, sizeof(rec.name), "%s", ri.name);
    int code = ks_fault_check(s, ri.verb, ri.resource);
    int rc = RM_OK;
    if (code) {
        rc = ks_status(resp, code, NULL, NULL, NULL, NULL, "kubesim injected fault: %d", code);
        goto done;
    }
    pthread_rwlock_rdlock(&s->lock);
    ri.k = ks_kind_find(s, ri.group, ri.version, ri.resource);
    pthread_rwlock_unlock(&s->lock);
    ks_kind *k = ri.k;
    if (!k || (k->namespaced && !ri.has_ns && !ri.collection) || (!k->namespaced && ri.has_ns)) {
        rc = ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                       "the server could not find the requested resource");
        goto done;
    }
    if (!k->namespaced)
        ri.ns[0] = 0;
    if (ri.has_ns && !ri.ns[0]) {
        rc = ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                       "the server could not find the requested resource");
        goto done;
    }
    if (ri.sub[0]) {
        bool ok = (!strcmp(ri.sub, "status") && k->has_status) ||
                  (!strcmp(ri.sub, "scale") && k->has_scale) ||
                  (!strcmp(ri.sub, "log") && k->type == KS_T_POD);
        if (!ok) {
            rc = ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                           "the server could not find the requested resource");
            goto done;
        }
    }
    const char *m = req->method;
    if (ri.collection) {
        if (!strcmp(m, "GET") || !strcmp(m, "HEAD"))
            rc = ri.watch ? handle_watch(s, req, resp, &ri) : handle_list(s, req, resp, &ri);
        else if (!strcmp(m, "POST") && (ri.has_ns || !k->namespaced))
            rc = handle_create(s, req, resp, &ri);
        else if (!strcmp(m, "DELETE"))
            rc = handle_deletecollection(s, req, resp, &ri);
        else
            rc = ks_status(resp, 405, "MethodNotAllowed", NULL, NULL, NULL,
                           "the server does not allow this method on the requested resource");
    } else if (!strcmp(ri.sub, "log")) {
        if (!strcmp(m, "GET"))
            rc = handle_log(s, req, resp, &ri);
        else
            rc = ks_status(resp, 405, "MethodNotAllowed", NULL, NULL, NULL,
                           "the server does not allow this method on the requested resource");
    } else if (!strcmp(m, "GET") || !strcmp(m, "HEAD")) {
        if (!strcmp(ri.sub, "scale")) {
            pthread_rwlock_rdlock(&s->lock);
            ks_obj *o = ks_obj_ref(ks_table_get(k->tab, ri.ns, ri.name));
            pthread_rwlock_unlock(&s->lock);
            rc = o ? reply_scale(resp, k, o) : not_found(resp, k, ri.name);
            ks_obj_unref(o);
        } else {
            rc = handle_get(s, resp, req, &ri);
        }
    } else if (!strcmp(m, "PUT")) {
        rc = handle_update(s, req, resp, &ri);
    } else if (!strcmp(m, "PATCH")) {
        rc = handle_patch(s, req, resp, &ri);
    } else if (!strcmp(m, "DELETE") && !ri.sub[0]) {
        rc = handle_delete(s, req, resp, &ri);
    } else {
        rc = ks_status(resp, 405, "MethodNotAllowed", NULL, NULL, NULL,
                       "the server does not allow this method on the requested resource");
    }
done:
    rec.code = resp->status;
    ks_reqlog_add(s, &rec);
    if (rc < 0) {
        free(resp->body);
        resp->body = NULL;
        if (resp->stream.free)
            resp->stream.free(resp->stream.ud);
        memset(&resp->stream, 0, sizeof(resp->stream));
        return ks_status(resp, 500, "InternalError", NULL, NULL, NULL, "internal error: %s", rm_strerror(rc));
    }
    return RM_OK;
}
