/* projections.c — the informer projections of the kube runtime (see projections.h).
 *
 * Design: keep per object only what the sync loop reads. A TrainingJob is kept whole (the
 * reconcile needs its spec and status) but without the fields the operator never reads, and
 * deflated; pods, nodes and secrets shrink to small fixed structs. */
#include "operator/kube/projections.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "common/b64.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/worker_env.h"
#include "common/kmap.h"
#include "operator/kube/runtime.h"
#include "operator/reconcile.h"

/* A cached job: its JSON, zlib-compressed (a job's JSON repeats its keys; ~2.5x smaller). */
typedef struct tj_item {
    uint32_t len, zlen;
    unsigned char z[];
} tj_item;

void *rm_kube_tj_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    /* drop what the operator never reads and that can double an object's size: kubectl's
     * last-applied-configuration (a copy of the spec) and managedFields. /status writes built
     * from this copy cannot remove them: the status subresource only changes .status */
    cJSON *c = cJSON_Duplicate(obj, 1);
    if (!c)
        return NULL;
    cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    cJSON_DeleteItemFromObjectCaseSensitive(ann, "kubectl.kubernetes.io/last-applied-configuration");
    if (cJSON_IsObject(ann) && !ann->child)
        cJSON_DeleteItemFromObjectCaseSensitive(md, "annotations");
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    if (!s)
        return NULL;
    /* a 1 KiB window and the smallest memLevel: a few KiB of deflate state instead of the
     * default ~270 KiB per call; objects are a few KiB, so the ratio barely changes */
    uLong n = (uLong)strlen(s);
    unsigned char *zb = NULL;
    tj_item *it = NULL;
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (deflateInit2(&zs, 1, Z_DEFLATED, 10, 1, Z_DEFAULT_STRATEGY) == Z_OK) {
        /* deflateBound, not compressBound: with memLevel 1 deflate emits a block every ~128
         * symbols, and text with few repeats comes out ~1% larger than it went in, past
         * compressBound's 0.03% (such a job would look deleted) */
        uLong zl = deflateBound(&zs, n);
        if ((zb = malloc(zl))) {
            zs.next_in = (Bytef *)s;
            zs.avail_in = (uInt)n;
            zs.next_out = zb;
            zs.avail_out = (uInt)zl;
            int zrc = deflate(&zs, Z_FINISH);
            uLong out = zs.total_out;
            if (zrc == Z_STREAM_END && (it = malloc(sizeof(*it) + out))) {
                it->len = (uint32_t)n;
                it->zlen = (uint32_t)out;
                memcpy(it->z, zb, out);
            }
        }
        deflateEnd(&zs);
    }
    free(zb);
    free(s);
    return it;
}

char *rm_kube_tj_json(const void *item)
{
    const tj_item *it = item;
    char *out = it ? malloc((size_t)it->len + 1) : NULL;
    uLongf dl = it ? it->len : 0;
    if (!out)
        return NULL;
    if (uncompress((Bytef *)out, &dl, it->z, it->zlen) != Z_OK || dl != it->len) {
        free(out);
        return NULL;
    }
    out[dl] = 0;
    return out;
}

static const char *label(const cJSON *obj, const char *key)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(md, "labels");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int rm_kube_job_index(void *ud, const cJSON *obj, char *buf, size_t cap)
{
    (void)ud;
    const char *job = label(obj, RM_LABEL_JOB);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
    if (!job)
        return RM_ENOTFOUND;
    snprintf(buf, cap, "%s/%s", cJSON_IsString(ns) ? ns->valuestring : "", job);
    return RM_OK;
}

static double time_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double t = 0;
    if (cJSON_IsString(v))
        rm_json_parse_time(v->valuestring, &t);
    return t;
}

/* status.conditions' Ready (the last one when repeated) is "True"; dflt when there is none. */
static bool ready_condition(const cJSON *status, bool dflt)
{
    bool ready = dflt;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions"))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "status");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "Ready") == 0 && cJSON_IsString(s))
            ready = strcmp(s->valuestring, "True") == 0;
    }
    return ready;
}

/* Why a Pending pod cannot start, into buf ("" when nothing says): PodScheduled False
 * (Unschedulable and the scheduler's message, e.g. 0/3 nodes are available, or a missing PVC), else
 * a container — an init container first — waiting on its image or its configuration. */
static void waiting_reason(const cJSON *st, char *buf, size_t cap)
{
    static const char *const blocking[] = {
        "ErrImagePull",      "ImagePullBackOff",           "InvalidImageName",
        "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"};
    buf[0] = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, "conditions"))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type"),
                    *s = cJSON_GetObjectItemCaseSensitive(c, "status");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "reason"),
                    *m = cJSON_GetObjectItemCaseSensitive(c, "message");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "PodScheduled") && cJSON_IsString(s) &&
            !strcmp(s->valuestring, "False")) {
            snprintf(buf, cap, "%s: %s", cJSON_IsString(r) ? r->valuestring : "Unschedulable",
                     cJSON_IsString(m) ? m->valuestring : "the pod is not scheduled");
            return;
        }
    }
    for (int which = 0; which < 2; which++) {
        const cJSON *cs;
        cJSON_ArrayForEach(
            cs, cJSON_GetObjectItemCaseSensitive(st, which ? "containerStatuses" : "initContainerStatuses"))
        {
            const cJSON *w =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cs, "state"), "waiting");
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(w, "reason"),
                        *m = cJSON_GetObjectItemCaseSensitive(w, "message");
            if (!cJSON_IsString(r))
                continue;
            for (size_t k = 0; k < RM_ARRAY_LEN(blocking); k++)
                if (!strcmp(r->valuestring, blocking[k])) {
                    snprintf(buf, cap, "%s: %s", r->valuestring, cJSON_IsString(m) ? m->valuestring : "");
                    return;
                }
        }
    }
}

void *rm_kube_pod_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    rm_kube_pod *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    const char *idx = label(obj, RM_LABEL_INDEX), *ep = label(obj, RM_LABEL_EPOCH);
    const char *psi = label(obj, RM_LABEL_PS_INDEX);
    p->ps_index = psi ? atoi(psi) : -1;
    p->index = idx && !psi ? atoi(idx) : -1;
    p->epoch = ep ? atoi(ep) : 0;
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    p->created_at = time_of(md, "creationTimestamp");
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(spec, "nodeName");
    if (cJSON_IsString(node) && node->valuestring[0])
        p->node_hash = rm_kmap_hash(node->valuestring) | 1;
    const cJSON *phase = cJSON_GetObjectItemCaseSensitive(st, "phase");
    const char *ph = cJSON_IsString(phase) ? phase->valuestring : "Pending";
    p->phase = (unsigned char)(strcmp(ph, "Running") == 0     ? RM_WORKER_RUNNING
                               : strcmp(ph, "Succeeded") == 0 ? RM_WORKER_SUCCEEDED
                               : strcmp(ph, "Failed") == 0    ? RM_WORKER_FAILED
                                                              : RM_WORKER_PENDING);
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(st, "reason");
    if (cJSON_IsString(reason))
        snprintf(p->reason, sizeof(p->reason), "%s", reason->valuestring);
    p->ready = ready_condition(st, false);
    if (p->phase == RM_WORKER_PENDING)
        waiting_reason(st, p->waiting, sizeof p->waiting);
    /* the init containers' statuses too: a fetch-data container that failed on bad data ends the
     * pod with its exit code and message (docs/models-and-data.md, "Where data comes from") */
    for (int which = 0; which < 2; which++) {
        const cJSON *css = cJSON_GetObjectItemCaseSensitive(st, which ? "containerStatuses"
                                                                      : "initContainerStatuses"),
                    *cs;
        cJSON_ArrayForEach(cs, css)
        {
            const cJSON *state = cJSON_GetObjectItemCaseSensitive(cs, "state");
            const cJSON *term = cJSON_GetObjectItemCaseSensitive(state, "terminated");
            if (!term)
                continue;
            const cJSON *ec = cJSON_GetObjectItemCaseSensitive(term, "exitCode");
            const cJSON *sig = cJSON_GetObjectItemCaseSensitive(term, "signal");
            const cJSON *tr = cJSON_GetObjectItemCaseSensitive(term, "reason");
            int code = cJSON_IsNumber(ec) ? ec->valueint : 0;
            if (cJSON_IsNumber(sig) && sig->valueint > 0 && code == 0)
                code = 128 + sig->valueint;
            if (code != 0 || p->exit_code == 0) {
                p->exit_code = code;
                if (cJSON_IsString(tr) && !p->reason[0])
                    snprintf(p->reason, sizeof(p->reason), "%s", tr->valuestring);
                double f = time_of(term, "finishedAt");
                if (f > 0)
                    p->finished_at = f;
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(term, "message");
                if (code == RM_WORKER_EXIT_DATA_ERROR && cJSON_IsString(m)) {
                    /* the file's one line, or under FallbackToLogsOnError the log's last line */
                    const char *s = m->valuestring, *e = s + strlen(s);
                    while (e > s && (e[-1] == '\n' || e[-1] == '\r'))
                        e--;
                    const char *b = e;
                    while (b > s && b[-1] != '\n')
                        b--;
                    snprintf(p->message, sizeof(p->message), "%.*s", (int)(e - b), b);
                }
            }
        }
    }
    if ((p->phase == RM_WORKER_FAILED || p->phase == RM_WORKER_SUCCEEDED) && p->finished_at <= 0)
        p->finished_at = rm_wall(); /* first seen ended */
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(md, "deletionTimestamp");
    if (cJSON_IsString(dt)) {
        double t = 0;
        rm_json_parse_time(dt->valuestring, &t);
        /* deletionTimestamp is "now + grace": the deletion started grace seconds earlier */
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(md, "deletionGracePeriodSeconds");
        if (cJSON_IsNumber(g))
            t -= g->valuedouble;
        p->deletion_started_at = t > 0 ? t : rm_wall();
        p->phase = RM_WORKER_TERMINATING;
    }
    return p;
}

void *rm_kube_owned_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    rm_kube_owned *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(obj, "data");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(data, "token");
    if (cJSON_IsString(tok)) {
        unsigned char *raw = NULL;
        size_t n = 0;
        if (rm_b64_decode(tok->valuestring, strlen(tok->valuestring), &raw, &n) == RM_OK &&
            n < sizeof(o->token)) {
            memcpy(o->token, raw, n);
            o->token[n] = 0;
        }
        free(raw);
    }
    return o;
}

void *rm_kube_exists_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    (void)obj;
    return malloc(1);
}

void *rm_kube_node_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    rm_kube_node *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    /* no Ready condition yet: assume ready */
    n->ready = ready_condition(cJSON_GetObjectItemCaseSensitive(obj, "status"), true);
    return n;
}
