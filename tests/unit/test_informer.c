/* test_informer.c — watch-stream parsing (line splitter with garbage and oversized lines, event
 * decoding incl. 410 ERROR events) and a full informer run against a fake API server: paginated
 * LIST, WATCH from the list's resourceVersion, a BOOKMARK, a 410 that forces a re-list, and the
 * re-list diff that reports a deletion that happened while the watch was down. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/http.h"
#include "common/json.h"
#include "operator/kube/client.h"
#include "common/trainingjob.h"
#include "operator/kube/informer.h"
#include "operator/kube/runtime.h"
#include "operator/reconcile.h"
#include "tests/unit/testutil.h"

typedef struct lines_seen {
    int n, nulls;
    char last[128];
    int stop_at;
} lines_seen;

static int on_line(void *ud, char *line, size_t len)
{
    lines_seen *s = ud;
    if (!line) {
        s->nulls++;
        return 0;
    }
    CU_ASSERT_EQUAL(line[len], 0); /* NUL-terminated at len (the line itself may hold NULs) */
    s->n++;
    snprintf(s->last, sizeof(s->last), "%s", line);
    return s->stop_at && s->n >= s->stop_at ? RM_ECLOSED : 0;
}

static void test_line_splitter(void)
{
    lines_seen s = {0};
    rm_kube_lines l;
    rm_kube_lines_init(&l, 16, on_line, &s);
    /* split across feeds, CRLF, empty lines */
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "ab", 2), RM_OK);
    CU_ASSERT_EQUAL(s.n, 0);
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "c\r\n\n\nde", 7), RM_OK);
    CU_ASSERT_EQUAL(s.n, 1);
    CU_ASSERT_STRING_EQUAL(s.last, "abc");
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "f\n", 2), RM_OK);
    CU_ASSERT_STRING_EQUAL(s.last, "def");
    /* oversized: 40 bytes over three feeds, dropped whole, callback told once, next line fine */
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "0123456789", 10), RM_OK);
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "0123456789", 10), RM_OK);
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "01234567890123456789\nok\n", 24), RM_OK);
    CU_ASSERT_EQUAL(l.oversized, 1);
    CU_ASSERT_EQUAL(s.nulls, 1);
    CU_ASSERT_EQUAL(s.n, 3);
    CU_ASSERT_STRING_EQUAL(s.last, "ok");
    /* exactly at the cap is accepted */
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, "0123456789abcdef\n", 17), RM_OK);
    CU_ASSERT_STRING_EQUAL(s.last, "0123456789abcdef");
    /* binary garbage with NULs does not crash; callback may stop the stream */
    s.stop_at = s.n + 1;
    char junk[8] = {'\x01', '\0', '\xff', '\n', 'z', '\n'};
    CU_ASSERT_EQUAL(rm_kube_lines_feed(&l, junk, 6), RM_ECLOSED);
    rm_kube_lines_free(&l);
}

static void test_decode_event(void)
{
    char type[16];
    cJSON *o = NULL;
    rm_err e = {0};
    const char *ok = "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}";
    CU_ASSERT_EQUAL(rm_informer_decode_event(ok, strlen(ok), type, sizeof(type), &o, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(type, "MODIFIED");
    CU_ASSERT_PTR_NOT_NULL(o);
    cJSON_Delete(o);
    const char *gone =
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"too old "
        "resource version: 1 (5)\",\"reason\":\"Expired\",\"code\":410}}";
    CU_ASSERT_EQUAL(rm_informer_decode_event(gone, strlen(gone), type, sizeof(type), &o, &e), RM_EEPOCH);
    CU_ASSERT_PTR_NULL(o);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "too old"));
    const char *bad[] = {"",
                         "{",
                         "[]",
                         "{\"type\":\"ADDED\"}",
                         "{\"type\":5,\"object\":{}}",
                         "{\"type\":\"WHAT\",\"object\":{}}",
                         "{\"type\":\"ERROR\",\"object\":{\"code\":500}}",
                         "\xff\xfe garbage"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o = NULL;
        CU_ASSERT_NOT_EQUAL(rm_informer_decode_event(bad[i], strlen(bad[i]), type, sizeof(type), &o, &e),
                            RM_OK);
        CU_ASSERT_PTR_NULL(o);
    }
}

/* ---------------- fake API server ---------------- */
typedef struct fakeapi {
    pthread_mutex_t mu;
    int lists, watches;
    char watch_rv[8][16];
} fakeapi;

static void add_pod(cJSON *items, const char *name, const char *rv, const char *job)
{
    cJSON *p = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(p, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", "t");
    cJSON_AddStringToObject(md, "resourceVersion", rv);
    cJSON *l = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(l, "job", job);
    cJSON_AddItemToArray(items, p);
}

static char *pod_line(const char *type, const char *name, const char *rv, const char *job)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON *arr = cJSON_CreateArray();
    add_pod(arr, name, rv, job);
    cJSON_AddItemToObject(ev, "object", cJSON_DetachItemFromArray(arr, 0));
    cJSON_Delete(arr);
    char *s = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    return s;
}

static int h_pods(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    fakeapi *f = ud;
    const char *watch = rm_http_query(req, "watch");
    const char *sel = rm_http_query(req, "labelSelector");
    if (!sel || strcmp(sel, "job") != 0)
        return rm_http_reply_error(resp, 400, "missing selector");
    pthread_mutex_lock(&f->mu);
    int rc;
    if (watch) {
        const char *rv = rm_http_query(req, "resourceVersion");
        const char *bm = rm_http_query(req, "allowWatchBookmarks");
        CU_ASSERT_PTR_NOT_NULL(bm);
        int w = f->watches++;
        if (w < 8)
            snprintf(f->watch_rv[w], sizeof(f->watch_rv[w]), "%s", rv ? rv : "");
        char body[4096] = "";
        if (w == 0) {
            char *a = pod_line("MODIFIED", "p1", "11", "j1");
            snprintf(body, sizeof(body),
                     "%s\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
                     "\"metadata\":{\"resourceVersion\":\"12\"}}}\n"
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":"
                     "{},\"status\":\"Failure\",\"message\":\"too old resource version: 12 "
                     "(13)\",\"reason\":\"Expired\",\"code\":410}}\n",
                     a);
            free(a);
        } else if (w == 1) {
            char *a = pod_line("ADDED", "p4", "15", "j1");
            snprintf(body, sizeof(body), "%s\n", a);
            free(a);
        }
        rc = rm_http_reply_text(resp, 200, "application/json", body);
    } else {
        int l = f->lists++;
        const char *cont = rm_http_query(req, "continue");
        cJSON *list = cJSON_CreateObject();
        cJSON_AddStringToObject(list, "kind", "PodList");
        cJSON *md = cJSON_AddObjectToObject(list, "metadata");
        cJSON *items = cJSON_AddArrayToObject(list, "items");
        if (l < 2) {
            /* first LIST, two pages of one item (limit=1) */
            if (!cont) {
                add_pod(items, "p1", "5", "j1");
                cJSON_AddStringToObject(md, "continue", "page2");
            } else {
                CU_ASSERT_STRING_EQUAL(cont, "page2");
                add_pod(items, "p2", "6", "j1");
                add_pod(items, "p5", "7", "j1");
            }
            cJSON_AddStringToObject(md, "resourceVersion", "10");
        } else {
            /* re-list after 410: p2 was deleted meanwhile, p3 created, p5 moved from j1 to j2 */
            if (!cont) {
                add_pod(items, "p1", "11", "j1");
                cJSON_AddStringToObject(md, "continue", "x");
            } else {
                add_pod(items, "p3", "13", "j2");
                add_pod(items, "p5", "12", "j2");
            }
            cJSON_AddStringToObject(md, "resourceVersion", "14");
        }
        rc = rm_http_reply_json(resp, 200, list);
        cJSON_Delete(list);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

typedef struct seen {
    pthread_mutex_t mu;
    char log[2048];
    char ilog[2048]; /* "event key@index;" for the events that carry an index */
} seen;

static void *tf(void *ud, const cJSON *obj)
{
    (void)ud;
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                                       "resourceVersion");
    return strdup(cJSON_IsString(rv) ? rv->valuestring : "?");
}

static int ix(void *ud, const cJSON *obj, char *buf, size_t cap)
{
    const cJSON *l =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(l, "job");
    if (!cJSON_IsString(j))
        return -1;
    snprintf(buf, cap, "t/%s", j->valuestring);
    return 0;
}

static void handler(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                    const void *n)
{
    seen *s = ud;
    pthread_mutex_lock(&s->mu);
    size_t len = strlen(s->log);
    const char *evs = ev == RM_INF_ADDED ? "add" : ev == RM_INF_UPDATED ? "upd" : "del";
    snprintf(s->log + len, sizeof(s->log) - len, "%s %s;", evs, key);
    len = strlen(s->ilog);
    if (index)
        snprintf(s->ilog + len, sizeof(s->ilog) - len, "%s %s@%s;", evs, key, index);
    pthread_mutex_unlock(&s->mu);
}

static int collect(void *ud, const char *key, const void *item)
{
    char *b = ud;
    strcat(b, key);
    strcat(b, "=");
    strcat(b, (const char *)item);
    strcat(b, ",");
    return 0;
}

static void test_informer_relist_on_410(void)
{
    fakeapi f;
    memset(&f, 0, sizeof(f));
    pthread_mutex_init(&f.mu, NULL);
    seen s;
    memset(&s, 0, sizeof(s));
    pthread_mutex_init(&s.mu, NULL);
    rm_http_route routes[] = {{"GET", "/api/v1/namespaces/t/pods", 0, h_pods, &f}};
    rm_http_opts ho = {.bind = "127.0.0.1:0"};
    rm_http_server *srv = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&ho, routes, 1, &srv, &e), RM_OK);
    char server[64];
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", rm_http_port(srv));
    rm_kube_config cfg = {.server = server};
    rm_kube_client_opts co = {.qps = -1, .max_retries = 1};
    rm_kube_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_kube_client_new(&cfg, &co, &c, &e), RM_OK);
    rm_informer_opts io = {.name = "pods",
                           .path = "/api/v1/namespaces/t/pods",
                           .label_selector = "job",
                           .transform = tf,
                           .free_item = free,
                           .index_fn = ix,
                           .handler = handler,
                           .ud = &s,
                           .page_limit = 1,
                           .watch_timeout_s = 5};
    rm_informer *inf = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_informer_start(c, &io, &inf, &e), RM_OK);
    CU_ASSERT_TRUE(rm_informer_wait_synced(inf, 5));
    /* wait for: list, watch(410), re-list, watch(p4) */
    for (int i = 0; i < 100; i++) {
        char rv[32];
        rm_informer_rv(inf, rv, sizeof(rv));
        if (strcmp(rv, "15") == 0)
            break;
        usleep(50 * 1000);
    }
    char rv[32];
    rm_informer_rv(inf, rv, sizeof(rv));
    CU_ASSERT_STRING_EQUAL(rv, "15");
    CU_ASSERT_EQUAL(rm_informer_lists(inf), 2);
    pthread_mutex_lock(&f.mu);
    CU_ASSERT_STRING_EQUAL(f.watch_rv[0], "10"); /* watch starts at the list's version */
    CU_ASSERT_STRING_EQUAL(f.watch_rv[1], "14"); /* after the re-list, its version */
    CU_ASSERT_EQUAL(f.lists, 4);                 /* two paginated LISTs */
    pthread_mutex_unlock(&f.mu);
    pthread_mutex_lock(&s.mu);
    /* the deletion of p2 during the outage is reported by the re-list diff; p1 unchanged → no event */
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "add t/p1;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "add t/p2;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "upd t/p1;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "del t/p2;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "add t/p3;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.log, "add t/p4;"));
    const char *u = strstr(s.log, "upd t/p1;");
    CU_ASSERT_PTR_NULL(u ? strstr(u + 1, "upd t/p1;") : NULL);
    /* p5 changed owner while the watch was down: the re-list tells the new owner and the old one
     * (whose reconcile must stop counting it), as the watch path does */
    CU_ASSERT_PTR_NOT_NULL(strstr(s.ilog, "add t/p5@t/j1;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.ilog, "upd t/p5@t/j2;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.ilog, "del t/p5@t/j1;"));
    pthread_mutex_unlock(&s.mu);
    CU_ASSERT_EQUAL(rm_informer_count(inf), 4);
    char buf[256] = "";
    rm_informer_rlock(inf);
    CU_ASSERT_STRING_EQUAL((const char *)rm_informer_get(inf, "t/p1"), "11");
    CU_ASSERT_PTR_NULL(rm_informer_get(inf, "t/p2"));
    rm_informer_by_index(inf, "t/j1", collect, buf);
    rm_informer_runlock(inf);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "t/p1=11"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "t/p4=15"));
    CU_ASSERT_PTR_NULL(strstr(buf, "t/p3"));
    CU_ASSERT_PTR_NULL(strstr(buf, "t/p5"));
    buf[0] = 0;
    rm_informer_rlock(inf);
    rm_informer_by_index(inf, "t/j2", collect, buf);
    rm_informer_runlock(inf);
    CU_ASSERT_TRUE(strcmp(buf, "t/p3=13,t/p5=12,") == 0 || strcmp(buf, "t/p5=12,t/p3=13,") == 0);
    rm_informer_stop(inf);
    rm_informer_stop(NULL);
    rm_kube_client_free(c);
    rm_http_stop(srv);
    pthread_mutex_destroy(&f.mu);
    pthread_mutex_destroy(&s.mu);
}

/* ---------------- cache projections of the kube runtime ---------------- */
/* The job cache compresses each job's JSON. Text with little redundancy (a base64 blob in an
 * annotation or an env value) grows slightly under deflate's small-memory settings: the cache must
 * still take the job, since a job it cannot take looks deleted to the operator. */
static void test_job_projection_incompressible(void)
{
    for (size_t n = 100; n <= 256 * 1024; n *= 4) {
        char *blob = malloc(n + 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(blob);
        unsigned x = 12345;
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            blob[i] = (char)('#' + (x >> 16) % 90); /* printable, no quote or backslash */
        }
        blob[n] = 0;
        cJSON *o = cJSON_CreateObject();
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        cJSON_AddStringToObject(md, "name", "j");
        cJSON_AddStringToObject(md, "namespace", "ns");
        cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
        cJSON_AddStringToObject(ann, "example.com/blob", blob);
        void *it = rm_kube_tj_transform(NULL, o);
        CU_ASSERT_PTR_NOT_NULL(it);
        if (!it)
            fprintf(stderr, "\n  job with a %zu-byte incompressible annotation not cached\n", n);
        free(it);
        cJSON_Delete(o);
        free(blob);
    }
}

static void test_pod_projection(void)
{
    const char *failed = "{\"metadata\":{\"name\":\"j-worker-3\",\"namespace\":\"ns\",\"creationTimestamp\":"
                         "\"2026-11-21T08:00:00Z\","
                         "\"labels\":{\"ringmaster.dev/job-name\":\"j\",\"ringmaster.dev/"
                         "replica-index\":\"3\",\"ringmaster.dev/epoch\":\"2\"}},"
                         "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Failed\","
                         "\"containerStatuses\":[{\"name\":\"worker\",\"state\":"
                         "{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\",\"finishedAt\":\"2026-"
                         "11-21T08:01:00Z\"}}}]}}";
    cJSON *o = cJSON_Parse(failed);
    rm_kube_pod *p = rm_kube_pod_transform(NULL, o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->index, 3);
    CU_ASSERT_EQUAL(p->epoch, 2);
    CU_ASSERT_EQUAL(p->phase, RM_WORKER_FAILED);
    CU_ASSERT_EQUAL(p->exit_code, 137);
    CU_ASSERT_STRING_EQUAL(p->reason, "OOMKilled");
    CU_ASSERT(p->finished_at - p->created_at > 59 && p->finished_at - p->created_at < 61);
    CU_ASSERT_NOT_EQUAL(p->node_hash, 0);
    char buf[64];
    CU_ASSERT_EQUAL(rm_kube_job_index(NULL, o, buf, sizeof(buf)), RM_OK);
    CU_ASSERT_STRING_EQUAL(buf, "ns/j");
    free(p);
    cJSON_Delete(o);
    /* killed by a signal with exit code 0 reported → 128+signal; being deleted → Terminating */
    const char *sig =
        "{\"metadata\":{\"name\":\"j-worker-0\",\"namespace\":\"ns\",\"deletionTimestamp\":\"2026-11-21T08:"
        "00:30Z\","
        "\"deletionGracePeriodSeconds\":30,\"labels\":{\"ringmaster.dev/replica-index\":\"0\"}},"
        "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],"
        "\"containerStatuses\":[{\"state\":{\"terminated\":{\"exitCode\":0,\"signal\":9}}}]}}";
    o = cJSON_Parse(sig);
    p = rm_kube_pod_transform(NULL, o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->phase, RM_WORKER_TERMINATING);
    CU_ASSERT_EQUAL(p->exit_code, 137);
    CU_ASSERT_TRUE(p->ready);
    double t = 0;
    rm_json_parse_time("2026-11-21T08:00:00Z", &t);
    CU_ASSERT_DOUBLE_EQUAL(p->deletion_started_at, t, 0.001);
    CU_ASSERT_NOT_EQUAL(rm_kube_job_index(NULL, o, buf, sizeof(buf)), RM_OK); /* no job label */
    free(p);
    cJSON_Delete(o);
    /* a secret's token is decoded */
    o = cJSON_Parse("{\"metadata\":{\"name\":\"j-rendezvous\"},\"data\":{\"token\":\"c2VjcmV0\"}}");
    rm_kube_owned *ow = rm_kube_owned_transform(NULL, o);
    CU_ASSERT_STRING_EQUAL(ow->token, "secret");
    free(ow);
    cJSON_Delete(o);
}

static cJSON *pod_env(const cJSON *pod, const char *name)
{
    const cJSON *env = rm_json_path(pod, "spec.containers[0].env"), *e;
    cJSON_ArrayForEach(e, env)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return (cJSON *)e;
    }
    return NULL;
}

static const char *env_val(const cJSON *pod, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pod_env(pod, name), "value");
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static void test_worker_pod(void)
{
    const char *job = "{\"apiVersion\":\"ringmaster.dev/"
                      "v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"tj\",\"namespace\":"
                      "\"ml\",\"uid\":\"u-1\"},"
                      "\"spec\":{\"replicas\":4,\"template\":{\"metadata\":{\"labels\":{\"team\":\"a\"}},"
                      "\"spec\":{\"restartPolicy\":\"Always\",\"containers\":[{\"name\":\"worker\","
                      "\"image\":\"pytorch/"
                      "pytorch:2.3\",\"command\":[\"torchrun\",\"train.py\"],\"env\":[{\"name\":\"RANK\","
                      "\"value\":\"99\"},{\"name\":\"MINE\",\"value\":\"x\"}],"
                      "\"resources\":{\"limits\":{\"nvidia.com/gpu\":1}}}]}}}}";
    cJSON *o = cJSON_Parse(job);
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(o, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    rm_kube_worker_pod_args pa = {
        .tj = &tj, .index = 2, .epoch = 5, .rdzv_url = "http://127.0.0.1:29400", .metrics_port = -1};
    cJSON *pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "metadata.name")->valuestring, "tj-worker-2");
    const cJSON *l = rm_json_path(pod, "metadata.labels");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItemCaseSensitive(l, "team")->valuestring, "a");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItemCaseSensitive(l, "ringmaster.dev/replica-index")->valuestring,
                           "2");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItemCaseSensitive(l, "ringmaster.dev/epoch")->valuestring, "5");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "metadata.ownerReferences[0].uid")->valuestring, "u-1");
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(pod, "metadata.ownerReferences[0].controller")));
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(pod, "metadata.ownerReferences[0].blockOwnerDeletion")));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.restartPolicy")->valuestring, "Never");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.subdomain")->valuestring, "tj");
    /* a foreign image runs unchanged: its command kept, no args added, GPUs passed through */
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].image")->valuestring, "pytorch/pytorch:2.3");
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.containers[0].args"));
    CU_ASSERT_PTR_NOT_NULL(rm_json_path(pod, "spec.containers[0].command"));
    CU_ASSERT_EQUAL(cJSON_GetObjectItemCaseSensitive(rm_json_path(pod, "spec.containers[0].resources.limits"),
                                                     "nvidia.com/gpu")
                        ->valueint,
                    1);
    CU_ASSERT_STRING_EQUAL(env_val(pod, "RANK"), "2"); /* ours wins over the template's */
    CU_ASSERT_STRING_EQUAL(env_val(pod, "MINE"), "x");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "WORLD_SIZE"), "4");
    /* a template running torchrun rendezvouses at its c10d store (docs/torchrun.md) */
    CU_ASSERT_STRING_EQUAL(env_val(pod, "PET_NNODES"), "4:4");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "PET_RDZV_BACKEND"), "c10d");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "PET_NODE_RANK"), "2");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "MASTER_ADDR"), "tj-worker-0.tj");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "MASTER_PORT"), "29500");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "LOCAL_RANK"), "0");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "RINGMASTER_JOB"), "ml/tj");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "RINGMASTER_BACKEND"), "nccl"); /* auto + GPU */
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(pod_env(pod, "RINGMASTER_TOKEN"), "valueFrom.secretKeyRef.name")->valuestring,
        "tj-rendezvous");
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(pod_env(pod, "RINGMASTER_BIND_ADDR"), "valueFrom.fieldRef.fieldPath")->valuestring,
        "status.podIP");
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    cJSON_Delete(o);
    /* no template: the default worker image with args [train ...], ring backend on CPU */
    o = cJSON_Parse("{\"apiVersion\":\"ringmaster.dev/"
                    "v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"d\",\"namespace\":"
                    "\"default\"},\"spec\":{\"replicas\":2}}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(o, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    pa = (rm_kube_worker_pod_args){.tj = &tj,
                                   .index = 0,
                                   .epoch = 1,
                                   .rdzv_url = "http://r",
                                   .worker_image = "ringmaster/worker:dev",
                                   .metrics_port = -1};
    pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].image")->valuestring,
                           "ringmaster/worker:dev");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[0]")->valuestring, "train");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[2]")->valuestring,
                           "$(RINGMASTER_BIND_ADDR):9090");
    cJSON_Delete(pod);
    pa.metrics_port = 0;
    pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[2]")->valuestring,
                           "$(RINGMASTER_BIND_ADDR):0");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "RINGMASTER_BACKEND"), "ring");
    CU_ASSERT_STRING_EQUAL(env_val(pod, "RINGMASTER_RENDEZVOUS"), "http://r");
    cJSON *tr = cJSON_Parse(env_val(pod, "RINGMASTER_TRAINING"));
    CU_ASSERT_PTR_NOT_NULL(tr);
    cJSON_Delete(tr);
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    cJSON_Delete(o);
    /* our image from another registry is still ours (args added); "worker" alone is not */
    const char *imgs[][2] = {{"registry.example.com/ml/ringmaster-worker:v2", "1"},
                             {"ghcr.io/acme/ringmaster/worker@sha256:abc", "1"},
                             {"docker.io/library/worker:1", "0"}};
    for (size_t i = 0; i < 3; i++) {
        char js[512];
        snprintf(
            js, sizeof(js),
            "{\"apiVersion\":\"ringmaster.dev/"
            "v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"d\",\"namespace\":\"default\"},"
            "\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\",\"image\":\"%s\"}]}}}}",
            imgs[i][0]);
        o = cJSON_Parse(js);
        CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(o, &tj, &e), RM_OK);
        rm_tj_defaults(&tj);
        pa = (rm_kube_worker_pod_args){
            .tj = &tj, .index = 0, .epoch = 1, .rdzv_url = "http://r", .metrics_port = -1};
        pod = rm_kube_worker_pod(&pa, &e);
        CU_ASSERT_EQUAL(rm_json_path(pod, "spec.containers[0].args") != NULL, imgs[i][1][0] == '1');
        cJSON_Delete(pod);
        rm_tj_free(&tj);
        cJSON_Delete(o);
    }
}

void rm_suite_informer(void)
{
    static const rm_test_case cases[] = {
        {"line_splitter", test_line_splitter},
        {"decode_event", test_decode_event},
        {"relist_on_410", test_informer_relist_on_410},
        {"pod_projection", test_pod_projection},
        {"job_projection_incompressible", test_job_projection_incompressible},
        {"worker_pod", test_worker_pod},
    };
    RM_ADD_SUITE("informer", NULL, NULL, cases);
}
