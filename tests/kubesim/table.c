/* table.c — server-side printing: meta.k8s.io/v1 Table responses (rule L4).
 *
 * Design: a column set per kind (CRs: Name + additionalPrinterColumns, or Name/Age; pods:
 * NAME READY STATUS RESTARTS AGE + wide columns; a few built-ins), cells computed from the stored
 * object; date columns rendered as the apiserver does (HumanDuration, "5m"). Rows carry a
 * PartialObjectMetadata so kubectl can show namespaces and follow watches. */
#include "tests/kubesim/kubesim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "common/json.h"

bool ks_wants_table(const rm_http_req *req)
{
    const char *a = rm_http_header(req, "Accept");
    return a && strstr(a, "as=Table") != NULL;
}

static void human_duration(double secs, char *out, size_t cap)
{
    if (secs < -1) {
        snprintf(out, cap, "<invalid>");
        return;
    }
    if (secs < 0)
        secs = 0;
    long s = (long)secs;
    long m = s / 60, h = s / 3600;
    if (s < 120)
        snprintf(out, cap, "%lds", s);
    else if (m < 10) {
        if (s % 60)
            snprintf(out, cap, "%ldm%lds", m, s % 60);
        else
            snprintf(out, cap, "%ldm", m);
    } else if (m < 180)
        snprintf(out, cap, "%ldm", m);
    else if (h < 8) {
        if (m % 60)
            snprintf(out, cap, "%ldh%ldm", h, m % 60);
        else
            snprintf(out, cap, "%ldh", h);
    } else if (h < 48)
        snprintf(out, cap, "%ldh", h);
    else if (h < 24 * 8) {
        if (h % 24)
            snprintf(out, cap, "%ldd%ldh", h / 24, h % 24);
        else
            snprintf(out, cap, "%ldd", h / 24);
    } else if (h < 24 * 365 * 2)
        snprintf(out, cap, "%ldd", h / 24);
    else if (h < 24 * 365 * 8)
        snprintf(out, cap, "%ldy%ldd", h / 24 / 365, (h / 24) % 365);
    else
        snprintf(out, cap, "%ldy", h / 24 / 365);
}

static cJSON *age_cell(const char *ts)
{
    double t;
    if (!ts || rm_json_parse_time(ts, &t) < 0)
        return cJSON_CreateString("<unknown>");
    char buf[32];
    human_duration((double)time(NULL) - t, buf, sizeof(buf));
    return cJSON_CreateString(buf);
}

static void coldef(cJSON *defs, const char *name, const char *type, const char *format, const char *desc,
                   int priority)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "type", type);
    cJSON_AddStringToObject(c, "format", format ? format : "");
    cJSON_AddStringToObject(c, "description", desc ? desc : "");
    cJSON_AddNumberToObject(c, "priority", priority);
    cJSON_AddItemToArray(defs, c);
}

static cJSON *str_or_none(const char *s)
{
    return cJSON_CreateString(s && *s ? s : "<none>");
}

static void pod_cells(cJSON *cells, const cJSON *o)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(st, "containerStatuses");
    int total = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "containers"));
    int ready = 0, restarts = 0;
    const char *reason = ks_sget(st, "phase") ? ks_sget(st, "phase") : "Pending";
    const char *sreason = ks_sget(st, "reason");
    if (sreason)
        reason = sreason;
    for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ready")))
            ready++;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(c, "restartCount");
        if (cJSON_IsNumber(rc))
            restarts += (int)rc->valuedouble;
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(c, "state");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(state, "waiting");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(state, "terminated");
        if (w && ks_sget(w, "reason"))
            reason = ks_sget(w, "reason");
        else if (t && ks_sget(t, "reason"))
            reason = ks_sget(t, "reason");
    }
    if (ks_sget(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "deletionTimestamp"))
        reason = "Terminating";
    char buf[32];
    snprintf(buf, sizeof(buf), "%d/%d", ready, total);
    cJSON_AddItemToArray(cells, cJSON_CreateString(buf));
    cJSON_AddItemToArray(cells, cJSON_CreateString(reason));
    snprintf(buf, sizeof(buf), "%d", restarts);
    cJSON_AddItemToArray(cells, cJSON_CreateString(buf));
    cJSON_AddItemToArray(
        cells, age_cell(ks_sget(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "creationTimestamp")));
    cJSON_AddItemToArray(cells, str_or_none(ks_sget(st, "podIP")));
    cJSON_AddItemToArray(cells, str_or_none(ks_sget(spec, "nodeName")));
    cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
    cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
}

/* Built-in column sets after "Name" (kubectl's printers); CRs without printer columns get Age as
 * a date, every other kind Age as a string. */
typedef struct ks_colspec {
    const char *name, *type, *desc;
    int priority;
} ks_colspec;
static const ks_colspec POD_COLS[] = {
    {"Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0},
    {"Status", "string", "The aggregate status of the containers in this pod.", 0},
    {"Restarts", "string", "The number of times the containers in this pod have been restarted.", 0},
    {"Age", "string", "", 0},
    {"IP", "string", "IP address allocated to the pod.", 1},
    {"Node", "string", "Name of the node this pod is assigned to.", 1},
    {"Nominated Node", "string", "", 1},
    {"Readiness Gates", "string", "", 1},
};
static const ks_colspec CONFIGMAP_COLS[] = {{"Data", "integer", "", 0}, {"Age", "string", "", 0}};
static const ks_colspec SECRET_COLS[] = {
    {"Type", "string", "", 0}, {"Data", "integer", "", 0}, {"Age", "string", "", 0}};
static const ks_colspec NAMESPACE_COLS[] = {{"Status", "string", "", 0}, {"Age", "string", "", 0}};
static const ks_colspec NODE_COLS[] = {{"Status", "string", "", 0},
                                       {"Roles", "string", "", 0},
                                       {"Age", "string", "", 0},
                                       {"Version", "string", "", 0}};
static const ks_colspec SERVICE_COLS[] = {{"Type", "string", "", 0},
                                          {"Cluster-IP", "string", "", 0},
                                          {"External-IP", "string", "", 0},
                                          {"Port(s)", "string", "", 0},
                                          {"Age", "string", "", 0}};
static const ks_colspec LEASE_COLS[] = {{"Holder", "string", "", 0}, {"Age", "string", "", 0}};
/* events have no Name column */
static const ks_colspec EVENT_COLS[] = {{"Last Seen", "string", "", 0},
                                        {"Type", "string", "", 0},
                                        {"Reason", "string", "", 0},
                                        {"Object", "string", "", 0},
                                        {"Message", "string", "", 0}};
static const ks_colspec CRD_COLS[] = {{"Created At", "date", "", 0}};
static const ks_colspec CR_AGE_COLS[] = {{"Age", "date", "", 0}};
static const ks_colspec AGE_COLS[] = {{"Age", "string", "", 0}};

static const ks_colspec *builtin_columns(enum ks_type t, size_t *n)
{
#define COLS(a) (*n = sizeof(a) / sizeof((a)[0]), (a))
    switch (t) {
    case KS_T_POD:
        return COLS(POD_COLS);
    case KS_T_CONFIGMAP:
        return COLS(CONFIGMAP_COLS);
    case KS_T_SECRET:
        return COLS(SECRET_COLS);
    case KS_T_NAMESPACE:
        return COLS(NAMESPACE_COLS);
    case KS_T_NODE:
        return COLS(NODE_COLS);
    case KS_T_SERVICE:
        return COLS(SERVICE_COLS);
    case KS_T_LEASE:
        return COLS(LEASE_COLS);
    case KS_T_EVENT:
    case KS_T_EVENT_NEW:
        return COLS(EVENT_COLS);
    case KS_T_CRD:
        return COLS(CRD_COLS);
    case KS_T_CR:
        return COLS(CR_AGE_COLS);
    default:
        return COLS(AGE_COLS);
    }
#undef COLS
}

cJSON *ks_table_build(ks_server *s, const ks_kind *k, ks_obj *const *objs, size_t n, bool with_defs)
{
    (void)s;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "kind", "Table");
    cJSON_AddStringToObject(t, "apiVersion", "meta.k8s.io/v1");
    cJSON_AddObjectToObject(t, "metadata");
    cJSON *defs = cJSON_AddArrayToObject(t, "columnDefinitions");
    cJSON *rows = cJSON_AddArrayToObject(t, "rows");
    cJSON *cols = k->columns; /* CR printer columns (borrowed; retired, never freed, on change) */
    if (k->type != KS_T_EVENT && k->type != KS_T_EVENT_NEW)
        coldef(defs, "Name", "string", "name", "Name must be unique within a namespace.", 0);
    if (k->type == KS_T_CR && cJSON_IsArray(cols) && cJSON_GetArraySize(cols) > 0) {
        for (const cJSON *c = cols->child; c; c = c->next) {
            const cJSON *pr = cJSON_GetObjectItemCaseSensitive(c, "priority");
            coldef(defs, ks_sget(c, "name") ? ks_sget(c, "name") : "",
                   ks_sget(c, "type") ? ks_sget(c, "type") : "string", ks_sget(c, "format"),
                   ks_sget(c, "description"), cJSON_IsNumber(pr) ? (int)pr->valuedouble : 0);
        }
    } else {
        size_t nc = 0;
        const ks_colspec *cs = builtin_columns(k->type, &nc);
        for (size_t i = 0; i < nc; i++)
            coldef(defs, cs[i].name, cs[i].type, "", cs[i].desc, cs[i].priority);
    }
    for (size_t i = 0; i < n; i++) {
        const cJSON *o = objs[i]->j;
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
        cJSON *row = cJSON_CreateObject();
        cJSON *cells = cJSON_AddArrayToObject(row, "cells");
        const char *name = ks_sget(md, "name") ? ks_sget(md, "name") : "";
        const char *created = ks_sget(md, "creationTimestamp");
        if (k->type != KS_T_EVENT && k->type != KS_T_EVENT_NEW)
            cJSON_AddItemToArray(cells, cJSON_CreateString(name));
        switch (k->type) {
        case KS_T_POD:
            pod_cells(cells, o);
            break;
        case KS_T_CONFIGMAP: {
            int d = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "data")) +
                    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "binaryData"));
            cJSON_AddItemToArray(cells, cJSON_CreateNumber(d));
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        }
        case KS_T_SECRET:
            cJSON_AddItemToArray(cells,
                                 cJSON_CreateString(ks_sget(o, "type") ? ks_sget(o, "type") : "Opaque"));
            cJSON_AddItemToArray(
                cells, cJSON_CreateNumber(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "data"))));
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        case KS_T_NAMESPACE:
            cJSON_AddItemToArray(
                cells,
                cJSON_CreateString(ks_sget(cJSON_GetObjectItemCaseSensitive(o, "status"), "phase")
                                       ? ks_sget(cJSON_GetObjectItemCaseSensitive(o, "status"), "phase")
                                       : "Active"));
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        case KS_T_NODE:
            cJSON_AddItemToArray(
                cells,
                cJSON_CreateString(
                    cJSON_IsString(ks_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status")) &&
                            !strcmp(ks_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status")
                                        ->valuestring,
                                    "True")
                        ? "Ready"
                        : "NotReady"));
            cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
            cJSON_AddItemToArray(cells, age_cell(created));
            cJSON_AddItemToArray(cells, cJSON_CreateString("v1.32.0"));
            break;
        case KS_T_SERVICE: {
            const cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
            cJSON_AddItemToArray(
                cells, cJSON_CreateString(ks_sget(spec, "type") ? ks_sget(spec, "type") : "ClusterIP"));
            cJSON_AddItemToArray(cells, str_or_none(ks_sget(spec, "clusterIP")));
            cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
            char ports[256] = "";
            size_t off = 0;
            const cJSON *pl = cJSON_GetObjectItemCaseSensitive(spec, "ports");
            for (const cJSON *p = pl ? pl->child : NULL; p && off < sizeof(ports); p = p->next) {
                const cJSON *port = cJSON_GetObjectItemCaseSensitive(p, "port");
                off += (size_t)snprintf(ports + off, sizeof(ports) - off, "%s%d/%s", off ? "," : "",
                                        cJSON_IsNumber(port) ? (int)port->valuedouble : 0,
                                        ks_sget(p, "protocol") ? ks_sget(p, "protocol") : "TCP");
            }
            cJSON_AddItemToArray(cells, str_or_none(ports));
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        }
        case KS_T_LEASE:
            cJSON_AddItemToArray(
                cells, str_or_none(ks_sget(cJSON_GetObjectItemCaseSensitive(o, "spec"), "holderIdentity")));
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        case KS_T_EVENT:
        case KS_T_EVENT_NEW: {
            const char *last =
                ks_sget(o, "lastTimestamp") ? ks_sget(o, "lastTimestamp") : ks_sget(o, "eventTime");
            cJSON_AddItemToArray(cells, last ? age_cell(last) : age_cell(created));
            cJSON_AddItemToArray(cells, str_or_none(ks_sget(o, "type")));
            cJSON_AddItemToArray(cells, str_or_none(ks_sget(o, "reason")));
            const cJSON *io = cJSON_GetObjectItemCaseSensitive(o, "involvedObject");
            char obj[320];
            char kindl[64] = "";
            const char *kk = ks_sget(io, "kind") ? ks_sget(io, "kind") : "";
            size_t j = 0;
            for (; kk[j] && j + 1 < sizeof(kindl); j++)
                kindl[j] = (char)((kk[j] >= 'A' && kk[j] <= 'Z') ? kk[j] + 32 : kk[j]);
            kindl[j] = 0;
            snprintf(obj, sizeof(obj), "%s/%s", kindl, ks_sget(io, "name") ? ks_sget(io, "name") : "");
            cJSON_AddItemToArray(cells, cJSON_CreateString(obj));
            cJSON_AddItemToArray(cells,
                                 cJSON_CreateString(ks_sget(o, "message") ? ks_sget(o, "message") : ""));
            break;
        }
        case KS_T_CRD:
            cJSON_AddItemToArray(cells, cJSON_CreateString(created ? created : ""));
            break;
        case KS_T_CR:
            if (cJSON_IsArray(cols) && cJSON_GetArraySize(cols) > 0) {
                for (const cJSON *c = cols->child; c; c = c->next) {
                    const cJSON *v = ks_jsonpath(o, ks_sget(c, "jsonPath"));
                    const char *type = ks_sget(c, "type") ? ks_sget(c, "type") : "string";
                    if (!v || cJSON_IsNull(v))
                        cJSON_AddItemToArray(cells, cJSON_CreateNull());
                    else if (!strcmp(type, "date") && cJSON_IsString(v))
                        cJSON_AddItemToArray(cells, age_cell(v->valuestring));
                    else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
                        char *sv = cJSON_PrintUnformatted(v);
                        cJSON_AddItemToArray(cells, cJSON_CreateString(sv ? sv : ""));
                        free(sv);
                    } else
                        cJSON_AddItemToArray(cells, cJSON_Duplicate(v, 1));
                }
            } else {
                cJSON_AddItemToArray(cells, age_cell(created));
            }
            break;
        default:
            cJSON_AddItemToArray(cells, age_cell(created));
            break;
        }
        cJSON *ro = cJSON_AddObjectToObject(row, "object");
        cJSON_AddStringToObject(ro, "kind", "PartialObjectMetadata");
        cJSON_AddStringToObject(ro, "apiVersion", "meta.k8s.io/v1");
        cJSON_AddItemToObject(ro, "metadata", cJSON_Duplicate(md, 1));
        cJSON_AddItemToArray(rows, row);
    }
    if (!with_defs) {
        cJSON_DeleteItemFromObjectCaseSensitive(t, "columnDefinitions");
        cJSON_AddArrayToObject(t, "columnDefinitions");
    }
    return t;
}
