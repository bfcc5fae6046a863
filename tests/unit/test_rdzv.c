/* Tests for the rendezvous service and client (common/rdzv.h): an in-process service on
 * 127.0.0.1:0, clients in threads, raw HTTP for malformed requests. Each test starts and stops
 * its own service so no state leaks between them; waits are bounded and short. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/httpc.h"
#include "common/rdzv.h"
#include "common/worker_env.h"
#include "common/clock.h"
#include "tests/unit/testutil.h"

#define JOB "default/mnist"
#define TOKEN "s3cret-token-0123456789"

typedef struct fx {
    rm_rdzv *r;
    rm_http_server *srv;
    char url[64];
} fx;

static int fx_start_at(fx *f, const char *bind, int desired, int min, double settle)
{
    rm_err e = {0};
    memset(f, 0, sizeof *f);
    f->r = rm_rdzv_new();
    if (!f->r || rm_rdzv_job_set(f->r, JOB, TOKEN, desired, min, settle) != RM_OK ||
        rm_rdzv_serve(f->r, bind, &f->srv, &e) != RM_OK) {
        fprintf(stderr, "rdzv fixture: %s\n", e.msg);
        rm_rdzv_free(f->r);
        f->r = NULL;
        return -1;
    }
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", rm_http_port(f->srv));
    return 0;
}

static int fx_start(fx *f, int desired, int min, double settle)
{
    return fx_start_at(f, "127.0.0.1:0", desired, min, settle);
}

static void fx_stop(fx *f)
{
    rm_rdzv_shutdown(f->r);
    rm_http_stop(f->srv);
    rm_rdzv_free(f->r);
}

static rm_rdzv_state *snap(fx *f)
{
    static rm_rdzv_state st; /* tests run one at a time */
    memset(&st, 0, sizeof st);
    if (rm_rdzv_snapshot(f->r, JOB, &st) != RM_OK)
        st.epoch = -1;
    return &st;
}

/* Poll the snapshot until the job reaches `epoch` (and `nmembers` workers joined that epoch's
 * round when >= 0); false after 5 s. */
static bool wait_state(fx *f, int epoch, int joined)
{
    for (int i = 0; i < 500; i++) {
        rm_rdzv_state *s = snap(f);
        int n = 0;
        for (int k = 0; k < s->nmembers; k++)
            n += s->members[k].epoch == epoch;
        if (s->epoch == epoch && (joined < 0 || n >= joined))
            return true;
        rm_sleep(0.01);
    }
    return false;
}

/* ---------------- a joining worker in a thread ---------------- */

typedef struct joiner {
    const char *url, *token, *job;
    char wid[16], addr[64];
    int last_epoch;
    double timeout, secs;
    int rc;
    rm_rdzv_round round;
    rm_err err;
    pthread_t th;
} joiner;

static void *join_main(void *arg)
{
    joiner *j = arg;
    double t0 = rm_mono();
    rm_rdzv_client *c = rm_rdzv_client_new(j->url, j->job, j->token, j->wid, NULL);
    j->rc = c ? rm_rdzv_join(c, j->addr, j->last_epoch, j->timeout, &j->round, &j->err) : RM_ENOMEM;
    j->secs = rm_mono() - t0;
    rm_rdzv_client_free(c);
    return NULL;
}

/* addr NULL: 127.0.0.1:(20000 + workerId) */
static void join_start_at(joiner *j, const char *url, const char *wid, const char *addr, int last_epoch,
                          double timeout)
{
    memset(j, 0, sizeof *j);
    j->url = url;
    j->token = TOKEN;
    j->job = JOB;
    snprintf(j->wid, sizeof j->wid, "%s", wid);
    if (addr)
        snprintf(j->addr, sizeof j->addr, "%s", addr);
    else
        snprintf(j->addr, sizeof j->addr, "127.0.0.1:%d", 20000 + atoi(wid));
    j->last_epoch = last_epoch;
    j->timeout = timeout;
    CU_ASSERT_FATAL(pthread_create(&j->th, NULL, join_main, j) == 0);
}

static void join_start(joiner *j, const char *url, const char *wid, int last_epoch, double timeout)
{
    join_start_at(j, url, wid, NULL, last_epoch, timeout);
}

static void join_wait(joiner *j)
{
    pthread_join(j->th, NULL);
}

/* All joiners got the same round and rank == expected index of their workerId. */
static void check_round(joiner *js, int n, int epoch, const char *const *order)
{
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(js[i].rc, RM_OK);
        if (js[i].rc != RM_OK) {
            fprintf(stderr, "join %s: %s\n", js[i].wid, js[i].err.msg);
            continue;
        }
        CU_ASSERT_EQUAL(js[i].round.epoch, epoch);
        CU_ASSERT_EQUAL(js[i].round.world_size, n);
        for (int k = 0; k < n; k++)
            if (strcmp(order[k], js[i].wid) == 0)
                CU_ASSERT_EQUAL(js[i].round.rank, k);
        for (int k = 0; k < n && js[i].round.world_size == n; k++) {
            char addr[64];
            snprintf(addr, sizeof addr, "127.0.0.1:%d", 20000 + atoi(order[k]));
            CU_ASSERT_EQUAL(js[i].round.peers[k].rank, k);
            CU_ASSERT_STRING_EQUAL(js[i].round.peers[k].worker_id, order[k]);
            CU_ASSERT_STRING_EQUAL(js[i].round.peers[k].addr, addr);
        }
    }
}

static void free_rounds(joiner *js, int n)
{
    for (int i = 0; i < n; i++)
        rm_rdzv_round_free(&js[i].round);
}

static rm_rdzv_client *client(const fx *f, const char *wid)
{
    rm_rdzv_client *c = rm_rdzv_client_new(f->url, JOB, TOKEN, wid, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    return c;
}

/* ---------------- raw HTTP ---------------- */

static long raw(const fx *f, const char *method, const char *path, const char *auth, const char *body,
                size_t len, char **reply)
{
    char url[512], hdr[300];
    snprintf(url, sizeof url, "%s%s", f->url, path);
    snprintf(hdr, sizeof hdr, "Authorization: %s", auth ? auth : "");
    const char *headers[] = {hdr, NULL};
    rm_httpc *h = rm_httpc_new();
    rm_httpc_resp resp = {0};
    rm_err e = {0};
    long status = -1;
    if (rm_httpc_do(h, method, url, auth ? headers : NULL, body, len, 5000, 1 << 20, &resp, &e) == RM_OK)
        status = resp.status;
    if (reply) {
        *reply = resp.body;
        resp.body = NULL;
    }
    rm_httpc_resp_free(&resp);
    rm_httpc_free(h);
    return status;
}

#define BEARER "Bearer " TOKEN
#define P(s) "/v1/jobs/" JOB s

/* ---------------- tests ---------------- */

static void test_join_four(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 4, 4, 30) == 0);
    /* numeric order, not string order: "10" sorts after "9" */
    static const char *const order[] = {"0", "2", "9", "10"};
    static const char *const arrive[] = {"10", "2", "0", "9"};
    joiner js[4];
    for (int i = 0; i < 4; i++)
        join_start(&js[i], f.url, arrive[i], 0, 10);
    for (int i = 0; i < 4; i++)
        join_wait(&js[i]);
    check_round(js, 4, 1, order);
    rm_rdzv_state *s = snap(&f);
    CU_ASSERT(s->closed);
    CU_ASSERT_EQUAL(s->epoch, 1);
    CU_ASSERT_EQUAL(s->world_size, 4);
    CU_ASSERT_EQUAL(s->nmembers, 4);
    for (int i = 0; i < 4 && i < s->nmembers; i++) {
        CU_ASSERT_STRING_EQUAL(s->members[i].worker_id, order[i]);
        CU_ASSERT_EQUAL(s->members[i].rank, i);
    }
    /* a retried join (same process, same addr) gets the same answer at once */
    joiner again;
    join_start(&again, f.url, "9", 0, 5);
    join_wait(&again);
    CU_ASSERT_EQUAL(again.rc, RM_OK);
    CU_ASSERT_EQUAL(again.round.epoch, 1);
    CU_ASSERT_EQUAL(again.round.rank, 2);
    CU_ASSERT(again.secs < 1.0);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 1);
    rm_rdzv_round_free(&again.round);
    free_rounds(js, 4);
    fx_stop(&f);
}

static void test_bad_token(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 1, 1, 0) == 0);
    char path[] = "/tmp/rdzv-log-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    rm_rdzv_client *c = rm_rdzv_client_new(f.url, JOB, "wrong-token", "1", NULL);
    rm_rdzv_round round = {0};
    rm_err e = {0};
    double t0 = rm_mono();
    int rc = rm_rdzv_join(c, "127.0.0.1:1", 0, 5, &round, &e);
    double secs = rm_mono() - t0;
    rm_rdzv_client_free(c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    CU_ASSERT_EQUAL(rc, RM_EAUTH);
    CU_ASSERT(secs < 2.0);
    CU_ASSERT_PTR_NULL(round.peers);
    size_t len = 0;
    char *log = rm_test_read_file(path, &len);
    unlink(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "bad token"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, JOB));
    free(log);
    /* missing, malformed and almost-right Authorization headers */
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), NULL, NULL, 0, NULL), 401);
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), "Basic " TOKEN, NULL, 0, NULL), 401);
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), BEARER "x", NULL, 0, NULL), 401);
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), "Bearer s3cret", NULL, 0, NULL), 401);
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), BEARER, NULL, 0, NULL), 200);
    /* an unknown job: retried (the controller may not have registered it) until the timeout */
    c = rm_rdzv_client_new(f.url, "default/other", TOKEN, "0", NULL);
    t0 = rm_mono();
    rc = rm_rdzv_join(c, "127.0.0.1:1", 0, 0.6, &round, &e);
    secs = rm_mono() - t0;
    rm_rdzv_client_free(c);
    CU_ASSERT_EQUAL(rc, RM_ENOTFOUND);
    CU_ASSERT(secs >= 0.5 && secs < 3.0);
    /* bad client arguments: NULL, and the error names the argument (not "out of memory") */
    static const struct {
        const char *url, *job, *tok, *wid, *field;
    } badc[] = {
        {"http://h:1", "nonamespace", TOKEN, "0", "job"},
        {"http://h:1", JOB, "tok\r\nX: y", "0", "token"},
        {"http://h:1", JOB, "", "0", "token"},
        {"http://h:1", JOB, TOKEN, "a/b", "worker_id"},
        {"/", JOB, TOKEN, "0", "url"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(badc); i++) {
        rm_err ce = {0};
        CU_ASSERT_PTR_NULL(rm_rdzv_client_new(badc[i].url, badc[i].job, badc[i].tok, badc[i].wid, &ce));
        CU_ASSERT_EQUAL(ce.code, RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(ce.field, badc[i].field);
    }
    CU_ASSERT_PTR_NULL(rm_rdzv_client_new(f.url, "nonamespace", TOKEN, "0", NULL));
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "a/b", "t", 2, 3, 0), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "a/b", "t", 0, 0, 0), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "ab", "t", 1, 1, 0), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "a/b", "", 1, 1, 0), RM_EINVAL);
    fx_stop(&f);
}

static void test_elastic_settle_and_grow_back(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 3, 2, 0.5) == 0);
    static const char *const two[] = {"0", "1"};
    joiner js[3];
    double t0 = rm_mono();
    join_start(&js[0], f.url, "1", 0, 10);
    join_start(&js[1], f.url, "0", 0, 10);
    join_wait(&js[0]);
    join_wait(&js[1]);
    double secs = rm_mono() - t0;
    check_round(js, 2, 1, two);
    CU_ASSERT(secs >= 0.45 && secs < 3.0);
    free_rounds(js, 2);
    /* a third worker arrives late: the group is below desired size, so epoch 2 opens for it */
    join_start(&js[2], f.url, "2", 0, 10);
    CU_ASSERT(wait_state(&f, 2, 1));
    rm_rdzv_client *c = client(&f, "0");
    rm_rdzv_report rep = {.epoch = 1, .rank = 0, .step = 5};
    rm_rdzv_action act = RM_RDZV_CONTINUE;
    int cur = 0;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(act, RM_RDZV_REJOIN);
    CU_ASSERT_EQUAL(cur, 2);
    rm_rdzv_client_free(c);
    join_start(&js[0], f.url, "0", 1, 10);
    join_start(&js[1], f.url, "1", 1, 10);
    for (int i = 0; i < 3; i++)
        join_wait(&js[i]);
    /* js[] holds "0", "1", "2" → ranks 0, 1, 2 */
    static const char *const three[] = {"0", "1", "2"};
    check_round(js, 3, 2, three);
    CU_ASSERT_EQUAL(snap(&f)->world_size, 3);
    free_rounds(js, 3);
    fx_stop(&f);
}

static void test_late_joiner_full_group(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    static const char *const two[] = {"0", "1"};
    joiner js[2], late;
    join_start(&js[0], f.url, "0", 0, 10);
    join_start(&js[1], f.url, "1", 0, 10);
    join_wait(&js[0]);
    join_wait(&js[1]);
    check_round(js, 2, 1, two);
    free_rounds(js, 2);
    /* a stranger to a complete group waits; the group is not disturbed */
    join_start(&late, f.url, "5", 0, 0.8);
    join_wait(&late);
    CU_ASSERT_EQUAL(late.rc, RM_ETIMEDOUT);
    CU_ASSERT(late.secs >= 0.7 && late.secs < 3.0);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 1);
    CU_ASSERT(snap(&f)->closed);
    /* worker 1 asks again from the same address: a retry, still epoch 1 rank 1 */
    join_start(&js[1], f.url, "1", 0, 5);
    join_wait(&js[1]);
    CU_ASSERT_EQUAL(js[1].rc, RM_OK);
    CU_ASSERT_EQUAL(js[1].round.epoch, 1);
    CU_ASSERT_EQUAL(js[1].round.rank, 1);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 1);
    rm_rdzv_round_free(&js[1].round);
    /* worker 1 comes back as a new process (new address): the old group is broken → epoch 2 */
    join_start_at(&js[1], f.url, "1", "127.0.0.1:29999", 0, 10);
    CU_ASSERT(wait_state(&f, 2, 1));
    /* the survivor saw the break of epoch 1 and joins epoch 2 (no third epoch) */
    join_start(&js[0], f.url, "0", 1, 10);
    join_wait(&js[0]);
    join_wait(&js[1]);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(js[i].rc, RM_OK);
        CU_ASSERT_EQUAL(js[i].round.epoch, 2);
        CU_ASSERT_EQUAL(js[i].round.rank, i);
        CU_ASSERT_EQUAL(js[i].round.world_size, 2);
    }
    if (js[0].round.world_size == 2)
        CU_ASSERT_STRING_EQUAL(js[0].round.peers[1].addr, "127.0.0.1:29999");
    CU_ASSERT_EQUAL(snap(&f)->epoch, 2);
    free_rounds(js, 2);
    fx_stop(&f);
}

static void test_rejoin_once_and_restart(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 3, 3, 0) == 0);
    static const char *const three[] = {"0", "1", "2"};
    joiner js[3];
    for (int i = 0; i < 3; i++)
        join_start(&js[i], f.url, three[i], 0, 10);
    for (int i = 0; i < 3; i++)
        join_wait(&js[i]);
    check_round(js, 3, 1, three);
    free_rounds(js, 3);
    /* all three saw the group break and re-join at once: exactly one new epoch */
    for (int i = 0; i < 3; i++)
        join_start(&js[i], f.url, three[i], 1, 10);
    for (int i = 0; i < 3; i++)
        join_wait(&js[i]);
    check_round(js, 3, 2, three);
    free_rounds(js, 3);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 2);
    /* controller restarts are idempotent per epoch */
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 2);
    CU_ASSERT(snap(&f)->closed);
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 2, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 3);
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 2, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 3);
    rm_rdzv_state *s = snap(&f);
    CU_ASSERT_EQUAL(s->epoch, 3);
    CU_ASSERT(!s->closed);
    CU_ASSERT_EQUAL(s->world_size, 0);
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, "default/nope", 1, &ne), RM_ENOTFOUND);
    /* the survivors re-join (lastEpoch 2, no longer current) and close epoch 3 */
    for (int i = 0; i < 3; i++)
        join_start(&js[i], f.url, three[i], 2, 10);
    for (int i = 0; i < 3; i++)
        join_wait(&js[i]);
    check_round(js, 3, 3, three);
    free_rounds(js, 3);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 3);
    fx_stop(&f);
}

static void test_restart_while_held(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    joiner js[2];
    join_start(&js[0], f.url, "0", 0, 10);
    CU_ASSERT(wait_state(&f, 1, 1));
    int ne = 0;
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 2);
    /* the held join is answered 202 at once and the client re-joins epoch 2 by itself */
    CU_ASSERT(wait_state(&f, 2, 1));
    CU_ASSERT(rm_mono() - t0 < 2.0);
    join_start(&js[1], f.url, "1", 0, 10);
    join_wait(&js[0]);
    join_wait(&js[1]);
    static const char *const two[] = {"0", "1"};
    check_round(js, 2, 2, two);
    free_rounds(js, 2);
    fx_stop(&f);
}

typedef struct getter {
    rm_rdzv_client *c;
    const char *key;
    double timeout, secs;
    int rc;
    void *val;
    size_t len;
    rm_err err;
} getter;

static void *get_main(void *arg)
{
    getter *g = arg;
    double t0 = rm_mono();
    g->rc = rm_rdzv_kv_get(g->c, 1, g->key, g->timeout, &g->val, &g->len, &g->err);
    g->secs = rm_mono() - t0;
    return NULL;
}

static void test_kv(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    rm_rdzv_client *a = client(&f, "0"), *b = client(&f, "1");
    rm_err e = {0};
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 7); /* contains a NUL at 0 and bytes ≥ 0x80 */
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "nccl-id", id, sizeof id, &e), RM_OK);
    void *val = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 1, "nccl-id", 1, &val, &len, &e), RM_OK);
    CU_ASSERT_EQUAL(len, sizeof id);
    CU_ASSERT(val && memcmp(val, id, sizeof id) == 0);
    free(val);
    /* overwrite */
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "nccl-id", "x", 1, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 1, "nccl-id", 0, &val, &len, &e), RM_OK);
    CU_ASSERT(len == 1 && val && memcmp(val, "x", 1) == 0);
    free(val);
    /* a get that waits for a later put */
    getter g = {.c = b, .key = "late", .timeout = 5};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, get_main, &g) == 0);
    rm_sleep(0.3);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "late", "v2", 2, &e), RM_OK);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(g.rc, RM_OK);
    CU_ASSERT(g.len == 2 && g.val && memcmp(g.val, "v2", 2) == 0);
    CU_ASSERT(g.secs >= 0.25 && g.secs < 3.0);
    free(g.val);
    /* never published: times out close to the timeout */
    double t0 = rm_mono();
    val = NULL;
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 1, "never", 0.5, &val, &len, &e), RM_ETIMEDOUT);
    double secs = rm_mono() - t0;
    CU_ASSERT(secs >= 0.45 && secs < 2.5);
    CU_ASSERT_PTR_NULL(val);
    /* limits */
    char *big = calloc(1, RM_RDZV_MAX_KV + 1);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "big", big, RM_RDZV_MAX_KV + 1, &e), RM_ETOOBIG);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "big", big, RM_RDZV_MAX_KV, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 1, "big", 0, &val, &len, &e), RM_OK);
    CU_ASSERT_EQUAL(len, RM_RDZV_MAX_KV);
    free(val);
    free(big);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "a/b", "v", 1, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 2, "future", "v", 1, &e), RM_EPROTO);
    int ok = 0, rc = RM_OK;
    for (int i = 0; rc == RM_OK && i < 300; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        rc = rm_rdzv_kv_put(a, 1, key, "v", 1, &e);
        ok += rc == RM_OK;
    }
    CU_ASSERT_EQUAL(rc, RM_ETOOBIG);
    CU_ASSERT_EQUAL(ok, 256 - 3); /* nccl-id, late and big are there already */
    /* a new epoch drops the old epoch's kv */
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 1, "nccl-id", 1, &val, &len, &e), RM_EEPOCH);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 1, "nccl-id", "y", 1, &e), RM_EEPOCH);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 2, "nccl-id", 0.2, &val, &len, &e), RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(a, 2, "nccl-id", "", 0, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(b, 2, "nccl-id", 0.2, &val, &len, &e), RM_OK);
    CU_ASSERT_EQUAL(len, 0);
    free(val);
    rm_rdzv_client_free(a);
    rm_rdzv_client_free(b);
    fx_stop(&f);
}

/* A one-worker job whose worker "0" has joined (round 1 closed): its client, or NULL. */
static rm_rdzv_client *joined_alone(fx *f)
{
    if (fx_start(f, 1, 1, 0) != 0)
        return NULL;
    rm_rdzv_client *c = client(f, "0");
    rm_rdzv_round round = {0};
    rm_err e = {0};
    if (!c || rm_rdzv_join(c, "127.0.0.1:20000", 0, 5, &round, &e) != RM_OK) {
        rm_rdzv_client_free(c);
        fx_stop(f);
        return NULL;
    }
    rm_rdzv_round_free(&round);
    return c;
}

static void test_report(void)
{
    fx f;
    rm_rdzv_client *c = joined_alone(&f);
    CU_ASSERT_FATAL(c != NULL);
    rm_err e = {0};
    rm_rdzv_report rep = {.epoch = 1,
                          .rank = 0,
                          .step = 10,
                          .train_epoch = 1,
                          .loss = 0.5,
                          .samples_per_second = 1000,
                          .last_checkpoint_step = 8,
                          .allreduce_gbps = 2.5};
    rm_rdzv_action act = RM_RDZV_STOP;
    int cur = 0;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    if (e.msg[0])
        fprintf(stderr, "report: %s\n", e.msg);
    CU_ASSERT_EQUAL(act, RM_RDZV_CONTINUE);
    CU_ASSERT_EQUAL(cur, 1);
    rm_rdzv_state *s = snap(&f);
    CU_ASSERT_EQUAL_FATAL(s->nmembers, 1);
    rm_rdzv_member m = s->members[0];
    CU_ASSERT_EQUAL(m.step, 10);
    CU_ASSERT_EQUAL(m.train_epoch, 1);
    CU_ASSERT_EQUAL(m.last_checkpoint_step, 8);
    CU_ASSERT_DOUBLE_EQUAL(m.loss, 0.5, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m.samples_per_second, 1000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m.allreduce_gbps, 2.5, 1e-9);
    CU_ASSERT(m.last_report > 1e9 && m.last_progress > 1e9);
    CU_ASSERT(!m.done);
    CU_ASSERT(!s->have_result);
    CU_ASSERT(s->peak_rss == 0 && s->mem_optimizer == 0); /* nothing reported yet */
    /* memory (docs/strategies.md#sharding): the job keeps the largest reported value, kind by kind */
    rm_rdzv_report mr = rep;
    mr.mem_params = 400, mr.mem_grads = 300, mr.mem_optimizer = 800, mr.mem_activations = 10;
    mr.peak_rss = 5000;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &mr, &act, &cur, &e), RM_OK);
    mr.mem_params = 100, mr.mem_grads = 900, mr.mem_optimizer = 200, mr.peak_rss = 7000;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &mr, &act, &cur, &e), RM_OK);
    s = snap(&f);
    CU_ASSERT(s->mem_params == 400 && s->mem_grads == 900 && s->mem_optimizer == 800 &&
              s->mem_activations == 10 && s->peak_rss == 7000);
    /* the same step again is not progress; a higher step is */
    rm_sleep(0.02);
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(snap(&f)->members[0].last_progress, m.last_progress, 1e-9);
    CU_ASSERT(snap(&f)->members[0].last_report > m.last_report);
    rep.step = 20;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT(snap(&f)->members[0].last_progress > m.last_progress);
    /* done with a result */
    rep.done = true;
    rep.have_result = true;
    rep.test_accuracy = 0.9;
    rep.train_loss = 0.25;
    rep.result_steps = 20;
    rep.seconds = 12.5;
    rep.result_samples_per_second = 4000;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    s = snap(&f);
    CU_ASSERT(s->members[0].done);
    CU_ASSERT(s->have_result);
    CU_ASSERT_DOUBLE_EQUAL(s->test_accuracy, 0.9, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->train_loss, 0.25, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->seconds, 12.5, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->samples_per_second, 4000, 1e-9);
    CU_ASSERT_EQUAL(s->steps, 20);
    CU_ASSERT_EQUAL(s->nevals, 0);
    /* per-epoch evaluations (a sweep's early stopping reads them): every report carries them all,
     * the service keeps rank 0's in epoch order; another rank's are ignored */
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 2, 20, 0.85, 0.4, 0);
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 1, 10, 0.80, 0.6, 0);
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    s = snap(&f);
    CU_ASSERT_EQUAL_FATAL(s->nevals, 2);
    CU_ASSERT_EQUAL(s->evals[0].epoch, 1);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[0].test_accuracy, 0.80, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[1].train_loss, 0.4, 1e-9);
    rm_rdzv_report other = rep;
    other.rank = 1;
    other.evals[0].test_accuracy = 0.1;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &other, &act, &cur, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(snap(&f)->evals[0].test_accuracy, 0.80, 1e-9);
    /* a report from an old epoch is told to re-join */
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(act, RM_RDZV_REJOIN);
    CU_ASSERT_EQUAL(cur, 2);
    rm_rdzv_client_free(c);
    fx_stop(&f);
}

/* A language model's numbers on the wire (docs/models-and-data.md, "Shapes and status"): tokens/s,
 * each evaluation's step and valLoss, the result's valLoss and tokens/s travel both ways; a peer
 * that predates them (no such keys) still parses, its evaluations keyed by epoch. */
static void test_report_lm_numbers(void)
{
    fx f;
    rm_rdzv_client *c = joined_alone(&f);
    CU_ASSERT_FATAL(c != NULL);
    rm_err e = {0};
    rm_rdzv_report rep = {.epoch = 1,
                          .rank = 0,
                          .step = 300,
                          .train_epoch = 1,
                          .samples_per_second = 8,
                          .tokens_per_second = 8 * 256};
    /* three evaluations, two in epoch 1 (evalEverySteps), given out of order */
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 2, 300, 0.40, 2.2, 2.125);
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 1, 100, 0.30, 2.9, 2.75);
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 1, 200, 0.35, 2.5, 2.5);
    rm_rdzv_action act = RM_RDZV_STOP;
    int cur = 0;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    rm_rdzv_state *s = snap(&f);
    CU_ASSERT_DOUBLE_EQUAL(s->members[0].tokens_per_second, 2048, 0);
    CU_ASSERT_EQUAL_FATAL(s->nevals, 3);
    CU_ASSERT_EQUAL(s->evals[0].step, 100);
    CU_ASSERT_EQUAL(s->evals[1].step, 200);
    CU_ASSERT_EQUAL(s->evals[1].epoch, 1);
    CU_ASSERT_EQUAL(s->evals[2].step, 300);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[0].val_loss, 2.75, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[2].val_loss, 2.125, 0);
    CU_ASSERT_FALSE(s->have_result);
    /* re-evaluated at step 200 (a resumed rank 0): replaced, not added */
    rm_rdzv_eval_add(rep.evals, &rep.nevals, 1, 200, 0.36, 2.4, 2.375);
    CU_ASSERT_EQUAL(rep.nevals, 3);
    rep.done = true;
    rep.have_result = true;
    rep.val_loss = 2.125;
    rep.result_tokens_per_second = 4096;
    rep.result_samples_per_second = 16;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    s = snap(&f);
    CU_ASSERT_EQUAL(s->nevals, 3);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[1].val_loss, 2.375, 0);
    CU_ASSERT(s->have_result);
    CU_ASSERT_DOUBLE_EQUAL(s->val_loss, 2.125, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->tokens_per_second, 4096, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->samples_per_second, 16, 0);
    CU_ASSERT_STRING_EQUAL(s->model_uri, ""); /* no export reported: none kept */
    /* the exported model and an export's failure ride in the result (status.result.model,
     * ExportFailing) */
    rep.model_uri = "s3://models/run-1/model.safetensors";
    rep.model_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    rep.model_bytes = 203912;
    rep.export_error = "spec.output.uri: 403 from s3://models/run-2/config.json: access denied";
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    s = snap(&f);
    CU_ASSERT_STRING_EQUAL(s->model_uri, "s3://models/run-1/model.safetensors");
    CU_ASSERT_STRING_EQUAL(s->model_sha256, rep.model_sha256);
    CU_ASSERT_DOUBLE_EQUAL(s->model_bytes, 203912, 0);
    CU_ASSERT_STRING_EQUAL(s->export_error, rep.export_error);
    rep.model_uri = rep.model_sha256 = rep.export_error = NULL;
    rep.model_bytes = 0;
    static const char bad_model[] = "{\"workerId\":\"0\",\"epoch\":1,\"rank\":0,\"step\":40,"
                                    "\"result\":{\"steps\":40,\"model\":{\"uri\":\"a\\nb\"}}}";
    CU_ASSERT_EQUAL(raw(&f, "POST", P("/report"), BEARER, bad_model, sizeof bad_model - 1, NULL), 400);
    /* an MLP worker reports no tokens: nothing about tokens on the wire, 0 in the snapshot */
    rep.tokens_per_second = 0;
    rep.result_tokens_per_second = 0;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(snap(&f)->members[0].tokens_per_second, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(snap(&f)->tokens_per_second, 0, 0);
    rm_rdzv_client_free(c);
    fx_stop(&f);

    /* an older peer: no step, valLoss or tokensPerSecond anywhere */
    CU_ASSERT_FATAL(fx_start(&f, 1, 1, 0) == 0);
    static const char old_body[] =
        "{\"workerId\":\"0\",\"epoch\":1,\"rank\":0,\"step\":40,\"samplesPerSecond\":5,"
        "\"evaluations\":[{\"epoch\":2,\"testAccuracy\":0.8,\"trainLoss\":0.3},"
        "{\"epoch\":1,\"testAccuracy\":0.7,\"trainLoss\":0.4}],"
        "\"result\":{\"testAccuracy\":0.8,\"trainLoss\":0.3,\"steps\":40,\"seconds\":2,"
        "\"samplesPerSecond\":20}}";
    CU_ASSERT_EQUAL(raw(&f, "POST", P("/report"), BEARER, old_body, sizeof old_body - 1, NULL), 200);
    s = snap(&f);
    CU_ASSERT_EQUAL_FATAL(s->nevals, 2);
    CU_ASSERT_EQUAL(s->evals[0].epoch, 1);
    CU_ASSERT_EQUAL(s->evals[0].step, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[1].test_accuracy, 0.8, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[1].val_loss, 0, 0);
    CU_ASSERT(s->have_result);
    CU_ASSERT_DOUBLE_EQUAL(s->val_loss, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->tokens_per_second, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(s->members[0].tokens_per_second, 0, 0);
    /* a newer worker taking over: its stepped entry of epoch 2 replaces the stepless one */
    static const char new_body[] = "{\"workerId\":\"0\",\"epoch\":1,\"rank\":0,\"step\":50,"
                                   "\"evaluations\":[{\"epoch\":2,\"step\":40,\"testAccuracy\":0.81,"
                                   "\"trainLoss\":0.3,\"valLoss\":0.35}]}";
    CU_ASSERT_EQUAL(raw(&f, "POST", P("/report"), BEARER, new_body, sizeof new_body - 1, NULL), 200);
    s = snap(&f);
    CU_ASSERT_EQUAL_FATAL(s->nevals, 2);
    CU_ASSERT_EQUAL(s->evals[1].step, 40);
    CU_ASSERT_DOUBLE_EQUAL(s->evals[1].val_loss, 0.35, 0);
    fx_stop(&f);
}

/* "The group trains again" (the runner's recovery time) is the first report of a member of the
 * closed round. It must survive the next failure: a restart that opens a new epoch a moment
 * after that report still leaves the trained epoch and its time in the snapshot (the runner
 * miscounted 3 kills as 2 recoveries when a kill came within a tick of the recovery). */
static void test_trained_epoch_survives_restart(void)
{
    fx f;
    rm_rdzv_client *c = joined_alone(&f);
    CU_ASSERT_FATAL(c != NULL);
    rm_err e = {0};
    CU_ASSERT(snap(&f)->closed);
    CU_ASSERT_EQUAL(snap(&f)->trained_epoch, 0); /* closed, but nobody reported yet */
    rm_rdzv_report rep = {.epoch = 1, .rank = 0, .step = 1};
    rm_rdzv_action act = RM_RDZV_STOP;
    int cur = 0;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    rm_rdzv_state st = *snap(&f);
    CU_ASSERT_EQUAL(st.trained_epoch, 1);
    CU_ASSERT_EQUAL(st.trained_world, 1);
    CU_ASSERT(st.trained_at >= st.closed_at && st.trained_at > 0);
    /* a later report keeps the first one's time */
    rep.step = 2;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(snap(&f)->trained_at, st.trained_at);
    /* the next failure opens epoch 2: the trained epoch 1 is still there */
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 2);
    rm_rdzv_state *after = snap(&f);
    CU_ASSERT_EQUAL(after->epoch, 2);
    CU_ASSERT(!after->closed);
    CU_ASSERT_EQUAL(after->trained_epoch, 1);
    CU_ASSERT_EQUAL(after->trained_at, st.trained_at);
    /* a report from the old epoch does not make the open epoch 2 "trained" */
    rep.step = 3;
    rm_rdzv_send_report(c, &rep, &act, &cur, &e);
    CU_ASSERT_EQUAL(snap(&f)->trained_epoch, 1);
    rm_rdzv_client_free(c);
    fx_stop(&f);
}

/* What the operator polls twice a second for every job: the signature moves with a step, a join
 * or a result and stays put otherwise; the job index answers for thousands of jobs, removed ones
 * and the oldest tombstones (beyond 256) dropped from it. */
static void test_signature_and_many_jobs(void)
{
    fx f;
    rm_rdzv_client *c = joined_alone(&f);
    CU_ASSERT_FATAL(c != NULL);
    unsigned long long s0 = 0, s1 = 0;
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, JOB, &s0), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, JOB, &s1), RM_OK);
    CU_ASSERT_EQUAL(s0, s1);
    rm_err e = {0};
    rm_rdzv_report rep = {.epoch = 1, .rank = 0, .step = 10, .loss = 0.5};
    rm_rdzv_action act;
    int cur;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, JOB, &s1), RM_OK);
    CU_ASSERT_NOT_EQUAL(s0, s1); /* a step */
    rep.loss = 0.4;              /* the same step: nothing the controller polls for */
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, JOB, &s0), RM_OK);
    CU_ASSERT_EQUAL(s0, s1);
    rep.have_result = true;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, JOB, &s0), RM_OK);
    CU_ASSERT_NOT_EQUAL(s0, s1); /* a result */
    CU_ASSERT_EQUAL(rm_rdzv_signature(f.r, "default/nope", &s0), RM_ENOTFOUND);
    /* 3,000 jobs; every other one removed: 1,500 removals, of which the newest 256 stay tombstones */
    enum { NJ = 3000 };
    char name[64];
    for (int i = 0; i < NJ; i++) {
        snprintf(name, sizeof name, "ns/job-%d", i);
        CU_ASSERT_EQUAL_FATAL(rm_rdzv_job_set(f.r, name, TOKEN, 2, 1, 0), RM_OK);
    }
    for (int i = 0; i < NJ; i += 2) {
        snprintf(name, sizeof name, "ns/job-%d", i);
        CU_ASSERT_EQUAL_FATAL(rm_rdzv_job_remove(f.r, name), RM_OK);
    }
    rm_rdzv_state *st = malloc(sizeof *st);
    CU_ASSERT_FATAL(st != NULL);
    int live = 0, gone = 0;
    for (int i = 0; i < NJ; i++) {
        snprintf(name, sizeof name, "ns/job-%d", i);
        int rc = rm_rdzv_snapshot(f.r, name, st);
        live += rc == RM_OK && st->epoch == 1;
        gone += rc == RM_ENOTFOUND;
    }
    CU_ASSERT_EQUAL(live, NJ / 2);
    CU_ASSERT_EQUAL(gone, NJ / 2);
    /* registered again: a kept tombstone resumes at a higher epoch, a dropped one starts afresh */
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "ns/job-2998", TOKEN, 1, 1, 0), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, "ns/job-2998", st), RM_OK);
    CU_ASSERT_EQUAL(st->epoch, 2);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, "ns/job-0", TOKEN, 1, 1, 0), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, "ns/job-0", st), RM_OK);
    CU_ASSERT_EQUAL(st->epoch, 1);
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, JOB, st), RM_OK); /* the first job is still there */
    CU_ASSERT(st->have_result);
    free(st);
    rm_rdzv_client_free(c);
    fx_stop(&f);
}

static void test_stop_and_remove(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    rm_rdzv_client *c = client(&f, "1");
    rm_err e = {0};
    rm_rdzv_report rep = {.epoch = 1, .step = 3, .have_result = true, .test_accuracy = 0.88};
    rm_rdzv_action act;
    int cur;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    /* a join long-polling for a round that will never close is woken by the stop */
    joiner j;
    join_start(&j, f.url, "0", 0, 20);
    CU_ASSERT(wait_state(&f, 1, 2)); /* "1" by its report, "0" by its join */
    rm_sleep(0.1);
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_rdzv_job_stop(f.r, JOB), RM_OK);
    join_wait(&j);
    CU_ASSERT_EQUAL(j.rc, RM_ECLOSED);
    CU_ASSERT(rm_mono() - t0 < 2.0);
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(act, RM_RDZV_STOP);
    void *val = NULL;
    size_t len;
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(c, 1, "k", 1, &val, &len, &e), RM_ECLOSED);
    CU_ASSERT_EQUAL(rm_rdzv_kv_put(c, 1, "k", "v", 1, &e), RM_ECLOSED);
    rm_rdzv_round round = {0};
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:20001", 0, 5, &round, &e), RM_ECLOSED);
    /* stop keeps the results and is sticky */
    CU_ASSERT(snap(&f)->have_result);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, JOB, TOKEN, 1, 1, 0), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:20001", 0, 5, &round, &e), RM_ECLOSED);
    /* removed: forgotten, callers told to stop */
    CU_ASSERT_EQUAL(rm_rdzv_job_remove(f.r, JOB), RM_OK);
    CU_ASSERT_EQUAL(snap(&f)->epoch, -1);
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:20001", 0, 5, &round, &e), RM_ECLOSED);
    act = RM_RDZV_CONTINUE;
    CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_OK);
    CU_ASSERT_EQUAL(act, RM_RDZV_STOP);
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &cur), RM_ENOTFOUND);
    /* registered again: a fresh run at a higher epoch */
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, JOB, TOKEN, 1, 1, 0), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:20001", 0, 5, &round, &e), RM_OK);
    CU_ASSERT_EQUAL(round.epoch, 2);
    CU_ASSERT_EQUAL(round.world_size, 1);
    CU_ASSERT(!snap(&f)->have_result);
    rm_rdzv_round_free(&round);
    rm_rdzv_client_free(c);
    fx_stop(&f);
}

static void test_garbage(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 1, 1, 0) == 0);
    static const char *const bad_join[] = {
        "{{{",
        "",
        "[1,2]",
        "null",
        "{\"workerId\":5,\"addr\":\"127.0.0.1:1\"}",
        "{\"workerId\":\"0\"}",
        "{\"workerId\":\"0\",\"addr\":\"a b\"}",
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1\",\"lastEpoch\":1e300}",
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1\",\"lastEpoch\":1.5}",
        "{\"workerId\":\"../x\",\"addr\":\"127.0.0.1:1\"}",
        "{\"workerId\":\"0123456789012345678901234567890123\",\"addr\":\"127.0.0.1:1\"}",
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1\",\"wait\":11}",
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1\",\"wait\":-1}",
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1\",\"wait\":\"soon\"}",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad_join); i++) {
        char *reply = NULL;
        long st = raw(&f, "POST", P("/join"), BEARER, bad_join[i], strlen(bad_join[i]), &reply);
        CU_ASSERT_EQUAL(st, 400);
        CU_ASSERT(reply && strstr(reply, "\"error\""));
        if (st != 400)
            fprintf(stderr, "join body %s → %ld %s\n", bad_join[i], st, reply ? reply : "");
        free(reply);
    }
    static const char *const bad_report[] = {
        "null",
        "{\"workerId\":\"0\",\"epoch\":\"x\"}",
        "{\"workerId\":\"0\"}",
        "{\"workerId\":\"0\",\"epoch\":1,\"state\":\"weird\"}",
        "{\"workerId\":\"0\",\"epoch\":1,\"result\":5}",
        "{\"workerId\":\"0\",\"epoch\":1,\"result\":{\"testAccuracy\":\"high\"}}",
        "{\"workerId\":\"0\",\"epoch\":1,\"loss\":[1]}",
        "{\"workerId\":\"0\",\"epoch\":1,\"memory\":3}",
        "{\"workerId\":\"0\",\"epoch\":1,\"memory\":{\"params\":-1}}",
        "{\"workerId\":\"0\",\"epoch\":1,\"memory\":{\"peakRss\":\"big\"}}",
        "{\"workerId\":\"0\",\"epoch\":1,\"tokensPerSecond\":\"fast\"}",
        "{\"workerId\":\"0\",\"epoch\":1,\"result\":{\"valLoss\":\"low\"}}",
        "{\"workerId\":\"0\",\"epoch\":1,\"evaluations\":[{\"epoch\":1,\"step\":-5}]}",
        "{\"workerId\":\"0\",\"epoch\":1,\"evaluations\":[{\"epoch\":1,\"step\":2.5}]}",
        "{\"workerId\":\"0\",\"epoch\":1,\"evaluations\":[{\"epoch\":1,\"valLoss\":[]}]}",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad_report); i++) {
        long st = raw(&f, "POST", P("/report"), BEARER, bad_report[i], strlen(bad_report[i]), NULL);
        CU_ASSERT_EQUAL(st, 400);
        if (st != 400)
            fprintf(stderr, "report body %s → %ld\n", bad_report[i], st);
    }
    size_t huge = 200 * 1024;
    char *big = malloc(huge);
    memset(big, '{', huge);
    CU_ASSERT_EQUAL(raw(&f, "POST", P("/join"), BEARER, big, huge, NULL), 413);
    CU_ASSERT_EQUAL(raw(&f, "PUT", P("/kv/1/k"), BEARER, big, RM_RDZV_MAX_KV + 1, NULL), 413);
    free(big);
    static const struct {
        const char *method, *path;
        long status;
    } paths[] = {
        {"GET", P("/nope"), 404},
        {"GET", "/v1/jobs/", 404},
        {"GET", "/v1/jobs/default", 404},
        {"GET", "/v1/jobs/default/other/join", 404},
        {"GET", "/v1/jobs/a/b/c/d", 404},
        {"GET", "/v2/whatever", 404},
        {"GET", P("/join"), 405},
        {"DELETE", P("/kv/1/k"), 405},
        {"POST", P(""), 405},
        {"PUT", P("/kv/abc/k"), 400},
        {"PUT", P("/kv/0/k"), 400},
        {"PUT", P("/kv/1/"), 400},
        {"PUT", P("/kv/1/bad%20key"), 400},
        {"PUT", P("/kv/99999999999/k"), 400},
        {"GET", P("/kv/1/x?wait=abc"), 400},
        {"GET", P("/kv/1/x?wait=-1"), 400},
        {"GET", P("/kv/1/x?wait=nan"), 400},
        {"GET", P("/kv/1/x?wait=0"), 404},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(paths); i++) {
        bool put = strcmp(paths[i].method, "PUT") == 0;
        long st = raw(&f, paths[i].method, paths[i].path, BEARER, put ? "v" : NULL, put, NULL);
        CU_ASSERT_EQUAL(st, paths[i].status);
        if (st != paths[i].status)
            fprintf(stderr, "%s %s → %ld, want %ld\n", paths[i].method, paths[i].path, st, paths[i].status);
    }
    char *reply = NULL;
    CU_ASSERT_EQUAL(raw(&f, "GET", P(""), BEARER, NULL, 0, &reply), 200);
    CU_ASSERT(reply && strstr(reply, "\"epoch\":1"));
    free(reply);
    /* the service still works */
    rm_rdzv_client *c = client(&f, "0");
    rm_rdzv_round round = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:20000", 0, 5, &round, &e), RM_OK);
    CU_ASSERT_EQUAL(round.world_size, 1);
    CU_ASSERT_EQUAL(snap(&f)->nmembers, 1);
    rm_rdzv_round_free(&round);
    rm_rdzv_client_free(c);
    fx_stop(&f);
}

typedef struct poller {
    const fx *f;
    long status;
    double secs;
} poller;

static void *poll_main(void *arg)
{
    poller *p = arg;
    static const char body[] = "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:20000\"}";
    double t0 = rm_mono();
    p->status = raw(p->f, "POST", P("/join"), BEARER, body, sizeof body - 1, NULL);
    p->secs = rm_mono() - t0;
    return NULL;
}

static void test_free_wakes_long_poll(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    poller p = {.f = &f};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, poll_main, &p) == 0);
    CU_ASSERT(wait_state(&f, 1, 1));
    rm_sleep(0.1);
    double t0 = rm_mono();
    rm_rdzv_free(f.r); /* the poll is inside the handler: free wakes it and waits for it */
    double secs = rm_mono() - t0;
    pthread_join(th, NULL);
    CU_ASSERT(secs < 1.5);
    CU_ASSERT_EQUAL(p.status, 503);
    CU_ASSERT(p.secs < 3.0);
    rm_http_stop(f.srv);
    /* shutdown: a client keeps retrying the 503s until its own timeout, well short of the poll */
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    joiner j;
    join_start(&j, f.url, "0", 0, 1.0);
    CU_ASSERT(wait_state(&f, 1, 1));
    rm_rdzv_shutdown(f.r);
    join_wait(&j);
    CU_ASSERT_EQUAL(j.rc, RM_ETIMEDOUT);
    CU_ASSERT(j.secs < 3.0);
    fx_stop(&f);
}

static void test_controller_starts_late(void)
{
    /* find a free port, then let the worker try it before anything listens */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CU_ASSERT_FATAL(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    CU_ASSERT_FATAL(getsockname(s, (struct sockaddr *)&a, &al) == 0);
    int port = ntohs(a.sin_port);
    close(s);
    char url[64], bind_addr[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(bind_addr, sizeof bind_addr, "127.0.0.1:%d", port);
    joiner j;
    join_start(&j, url, "0", 0, 8);
    rm_sleep(0.5);
    fx f;
    int started = fx_start_at(&f, bind_addr, 1, 1, 0);
    join_wait(&j);
    if (started == 0) {
        CU_ASSERT_EQUAL(j.rc, RM_OK);
        CU_ASSERT_EQUAL(j.round.epoch, 1);
        CU_ASSERT(j.secs >= 0.45);
        rm_rdzv_round_free(&j.round);
        fx_stop(&f);
    } else {
        fprintf(stderr, "port %d taken meanwhile; test skipped\n", port);
    }
}

/* A service that answers nonsense: the client must say EPROTO, never hand it on. */
static int h_liar(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    (void)req;
    return rm_http_reply_text(resp, 200, "application/json", ud);
}

static void test_client_distrusts_reply_values(void)
{
    static const char *const replies[] = {
        "{\"epoch\":1e12,\"action\":\"continue\"}", /* would wrap in an int */
        "{\"epoch\":-5,\"action\":\"continue\"}",
        "{\"epoch\":3,\"action\":\"dance\"}",
        "{\"epoch\":\"3\",\"action\":\"continue\"}",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(replies); i++) {
        rm_http_route rt = {NULL, "/v1/jobs/", 1, h_liar, (void *)replies[i]};
        rm_http_opts o = {.bind = "127.0.0.1:0"};
        rm_http_server *s = NULL;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, &rt, 1, &s, &e), RM_OK);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", rm_http_port(s));
        rm_rdzv_client *c = rm_rdzv_client_new(url, JOB, TOKEN, "0", NULL);
        rm_rdzv_report rep = {.epoch = 1};
        rm_rdzv_action act = RM_RDZV_CONTINUE;
        int cur = 77;
        CU_ASSERT_EQUAL(rm_rdzv_send_report(c, &rep, &act, &cur, &e), RM_EPROTO);
        CU_ASSERT_EQUAL(cur, 77);
        rm_rdzv_client_free(c);
        rm_http_stop(s);
    }
}

/* The one name rule both sides use: what the client accepts is what the service accepts. */
static void test_name_rule(void)
{
    CU_ASSERT_TRUE(rm_rdzv_name_ok("worker-0_a.B9", 13));
    CU_ASSERT_TRUE(rm_rdzv_name_ok("ns/x", 2)); /* only the first len chars count */
    CU_ASSERT_FALSE(rm_rdzv_name_ok("ns/x", 4));
    CU_ASSERT_FALSE(rm_rdzv_name_ok("", 0));
    CU_ASSERT_FALSE(rm_rdzv_name_ok(NULL, 3));
    CU_ASSERT_FALSE(rm_rdzv_name_ok("a b", 3));
    CU_ASSERT_FALSE(rm_rdzv_name_ok("a%2F", 4));
    CU_ASSERT_FALSE(rm_rdzv_name_ok("\xc3\xa9", 2));
    /* the client refuses locally exactly the names the service would 400/404 */
    CU_ASSERT_PTR_NULL(rm_rdzv_client_new("http://127.0.0.1:1", "ns/a b", "t", "0", NULL));
    CU_ASSERT_PTR_NULL(rm_rdzv_client_new("http://127.0.0.1:1", "ns/a", "t", "w 1", NULL));
    CU_ASSERT_PTR_NULL(rm_rdzv_client_new("http://127.0.0.1:1", "/a", "t", "0", NULL));
    rm_rdzv_client *c = rm_rdzv_client_new("http://127.0.0.1:1", "ns-1/a.b_c", "t", "w-1", NULL);
    CU_ASSERT_PTR_NOT_NULL(c);
    rm_rdzv_client_free(c);
}

/* A NaN timeout never runs out ("left <= 0" is always false): refused at once, not retried
 * against a dead address forever. */
static void test_nan_timeout_refused(void)
{
    rm_rdzv_client *c = rm_rdzv_client_new("http://127.0.0.1:1", JOB, TOKEN, "0", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rm_rdzv_round rd;
    rm_err e = {0};
    void *v = NULL;
    size_t n = 0;
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:5", 0, NAN, &rd, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_kv_get(c, 1, "k", NAN, &v, &n, &e), RM_EINVAL);
    /* a deadline already past is a plain timeout, as before */
    CU_ASSERT_EQUAL(rm_rdzv_join(c, "127.0.0.1:5", 0, -1, &rd, &e), RM_ETIMEDOUT);
    CU_ASSERT(rm_mono() - t0 < 1.0);
    CU_ASSERT_PTR_NULL(v);
    rm_rdzv_client_free(c);
}

/* Anyone can send wrong tokens: 40 of them give at most 5 log lines (one window), not 40. */
static void test_bad_token_logs_rate_limited(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 1, 1, 0) == 0);
    char path[] = "/tmp/rdzv-log-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int refused = 0;
    for (int i = 0; i < 40; i++)
        refused += raw(&f, "GET", P(""), "Bearer nope", NULL, 0, NULL) == 401;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    CU_ASSERT_EQUAL(refused, 40);
    char *log = rm_test_read_file(path, NULL);
    unlink(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "bad token")); p++)
        lines++;
    CU_ASSERT(lines <= 5);
    free(log);
    fx_stop(&f);
}

typedef struct {
    rm_rdzv_client *c;
    int rc;
    double ended;
} cancel_join;
static void *cancel_join_thread(void *arg)
{
    cancel_join *cj = arg;
    rm_rdzv_round round = {0};
    rm_err e = {0};
    cj->rc = rm_rdzv_join(cj->c, "127.0.0.1:1", 0, 30, &round, &e);
    cj->ended = rm_mono();
    rm_rdzv_round_free(&round);
    return NULL;
}

/* SIGINT during the join long poll: the worker's flag ends it within about a second, not after
 * the server's 10 s hold. */
static void test_join_cancel(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0); /* one worker alone: the round never closes */
    static volatile sig_atomic_t flag;
    flag = 0;
    cancel_join cj = {.c = rm_rdzv_client_new(f.url, JOB, TOKEN, "0", NULL)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(cj.c);
    rm_rdzv_client_set_cancel(cj.c, &flag);
    pthread_t th;
    pthread_create(&th, NULL, cancel_join_thread, &cj);
    CU_ASSERT(wait_state(&f, 1, 1)); /* held in the long poll now */
    rm_sleep(0.2);
    double t0 = rm_mono();
    flag = 1;
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(cj.rc, RM_ECANCELED);
    CU_ASSERT(cj.ended - t0 < 1.5);
    fprintf(stderr, "    join ended %.3f s after the flag\n", cj.ended - t0);
    /* a raised flag refuses the next call at once */
    rm_rdzv_round round = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_rdzv_join(cj.c, "127.0.0.1:1", 0, 5, &round, &e), RM_ECANCELED);
    rm_rdzv_client_free(cj.c);
    fx_stop(&f);
}

/* Polling joins (rdzv.h): the background re-join of workers that never talk to each other. Three
 * workers, non-elastic (min 3), settle 0.3 s. After the controller declared one dead, the two
 * survivors poll: never held, told how many joined and whether that settled; the replacement's
 * join closes the round and the next poll gets the round. */
static void test_join_poll(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 3, 3, 0.3) == 0);
    static const char *const three[] = {"0", "1", "2"};
    joiner js[3];
    for (int i = 0; i < 3; i++)
        join_start(&js[i], f.url, three[i], 0, 10);
    for (int i = 0; i < 3; i++)
        join_wait(&js[i]);
    check_round(js, 3, 1, three);
    free_rounds(js, 3);
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f.r, JOB, 1, &ne), RM_OK); /* worker 2 declared dead */
    CU_ASSERT_EQUAL(ne, 2);
    rm_rdzv_client *c0 = rm_rdzv_client_new(f.url, JOB, TOKEN, "0", NULL);
    rm_rdzv_client *c1 = rm_rdzv_client_new(f.url, JOB, TOKEN, "1", NULL);
    CU_ASSERT_FATAL(c0 && c1);
    rm_rdzv_round rr;
    int joined = -1;
    bool settled = true;
    rm_err e = {0};
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_rdzv_join_poll(c0, "127.0.0.1:1000", 1, 0, &rr, &joined, &settled, &e), RM_EAGAIN);
    CU_ASSERT(rm_mono() - t0 < 1.0); /* not held */
    CU_ASSERT_EQUAL(rr.epoch, 2);
    CU_ASSERT_EQUAL(joined, 1);
    CU_ASSERT_FALSE(settled);
    CU_ASSERT_EQUAL(rm_rdzv_join_poll(c1, "127.0.0.1:1001", 1, 0, &rr, &joined, &settled, &e), RM_EAGAIN);
    CU_ASSERT_EQUAL(joined, 2);
    CU_ASSERT_FALSE(settled);
    rm_sleep(0.4);
    CU_ASSERT_EQUAL(rm_rdzv_join_poll(c0, "127.0.0.1:1000", 1, 0, &rr, &joined, &settled, &e), RM_EAGAIN);
    CU_ASSERT_EQUAL(joined, 2); /* the survivors, settled: the round stays open (min 3) */
    CU_ASSERT(settled);
    CU_ASSERT_EQUAL(snap(&f)->epoch, 2); /* polling opened no epoch */
    CU_ASSERT_FALSE(snap(&f)->closed);
    /* the replacement joins (a new process: lastEpoch 0): the round closes with 3 */
    joiner rep;
    join_start(&rep, f.url, "2", 0, 10);
    join_wait(&rep);
    CU_ASSERT_EQUAL(rep.rc, RM_OK);
    CU_ASSERT_EQUAL(rep.round.world_size, 3);
    rm_rdzv_round_free(&rep.round);
    CU_ASSERT_EQUAL(rm_rdzv_join_poll(c1, "127.0.0.1:1001", 1, 0, &rr, &joined, &settled, &e), RM_OK);
    CU_ASSERT_EQUAL(rr.epoch, 2);
    CU_ASSERT_EQUAL(rr.rank, 1);
    CU_ASSERT_EQUAL(rr.world_size, 3);
    rm_rdzv_round_free(&rr);
    /* a wait outside 0..10 is refused by the client; by the service as a 400 */
    CU_ASSERT_EQUAL(rm_rdzv_join_poll(c0, "127.0.0.1:1000", 1, 11, &rr, NULL, NULL, &e), RM_EINVAL);
    rm_rdzv_client_free(c0);
    rm_rdzv_client_free(c1);
    fx_stop(&f);
}

/* Parameter servers register their addresses; workers read them (rdzv.h "Servers"). */
static void test_servers_registry(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    rm_rdzv_client *ps = rm_rdzv_client_new(f.url, JOB, TOKEN, "ps", NULL);
    rm_rdzv_client *w = rm_rdzv_client_new(f.url, JOB, TOKEN, "0", NULL);
    rm_rdzv_client *bad = rm_rdzv_client_new(f.url, JOB, "wrong-token-0123456789", "0", NULL);
    CU_ASSERT_FATAL(ps && w && bad);
    static char got[8][128];
    int n = -1;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_rdzv_servers(w, got, 8, &n, &e), RM_OK);
    CU_ASSERT_EQUAL(n, 0); /* none yet */
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 1, "127.0.0.7:29600", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_servers(w, got, 8, &n, &e), RM_OK);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_STRING_EQUAL(got[0], ""); /* server 0 not yet */
    CU_ASSERT_STRING_EQUAL(got[1], "127.0.0.7:29600");
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 0, "127.0.0.6:29600", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 1, "127.0.0.9:29600", &e), RM_OK); /* replaced */
    CU_ASSERT_EQUAL(rm_rdzv_servers(w, got, 8, &n, &e), RM_OK);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_STRING_EQUAL(got[0], "127.0.0.6:29600");
    CU_ASSERT_STRING_EQUAL(got[1], "127.0.0.9:29600");
    CU_ASSERT_EQUAL(rm_rdzv_servers(w, got, 1, &n, &e), RM_OK); /* capped by the caller */
    CU_ASSERT_EQUAL(n, 1);
    /* strangers and bad input */
    CU_ASSERT_EQUAL(rm_rdzv_server_register(bad, 0, "127.0.0.66:1", &e), RM_EAUTH);
    CU_ASSERT_EQUAL(rm_rdzv_servers(bad, got, 8, &n, &e), RM_EAUTH);
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 64, "127.0.0.1:1", &e), RM_EINVAL);
    static const char *const bodies[] = {"{}", "[]", "{\"addr\":\"no port\"}", "{\"addr\":5}"};
    for (size_t i = 0; i < RM_ARRAY_LEN(bodies); i++)
        CU_ASSERT_EQUAL(raw(&f, "PUT", P("/servers/0"), BEARER, bodies[i], strlen(bodies[i]), NULL), 400);
    CU_ASSERT_EQUAL(raw(&f, "PUT", P("/servers/64"), BEARER, "{\"addr\":\"127.0.0.1:1\"}", 22, NULL), 400);
    CU_ASSERT_EQUAL(raw(&f, "PUT", P("/servers/x"), BEARER, "{\"addr\":\"127.0.0.1:1\"}", 22, NULL), 400);
    CU_ASSERT_EQUAL(raw(&f, "POST", P("/servers"), BEARER, "", 0, NULL), 405);
    CU_ASSERT_EQUAL(rm_rdzv_servers(w, got, 8, &n, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(got[0], "127.0.0.6:29600"); /* nothing bad got in */
    /* a server's failed checkpoint writes ride on its registration: the state has the worst */
    static rm_rdzv_state st;
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, JOB, &st), RM_OK);
    CU_ASSERT_EQUAL(st.ps_checkpoint_failures, 0);
    CU_ASSERT_EQUAL(rm_rdzv_server_report(ps, 0, "127.0.0.6:29600", 2, "disk full", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_server_report(ps, 1, "127.0.0.9:29600", 5, "read-only", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, JOB, &st), RM_OK);
    CU_ASSERT_EQUAL(st.ps_checkpoint_index, 1);
    CU_ASSERT_EQUAL(st.ps_checkpoint_failures, 5);
    CU_ASSERT_STRING_EQUAL(st.ps_checkpoint_error, "read-only");
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 1, "127.0.0.9:29600", &e), RM_OK); /* written again */
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f.r, JOB, &st), RM_OK);
    CU_ASSERT_EQUAL(st.ps_checkpoint_index, 0);
    CU_ASSERT_EQUAL(st.ps_checkpoint_failures, 2);
    static const char *const ckbad[] = {"{\"addr\":\"127.0.0.6:1\",\"checkpointFailures\":-1}",
                                        "{\"addr\":\"127.0.0.6:1\",\"checkpointFailures\":\"x\"}",
                                        "{\"addr\":\"127.0.0.6:1\",\"checkpointError\":5}"};
    for (size_t i = 0; i < RM_ARRAY_LEN(ckbad); i++)
        CU_ASSERT_EQUAL(raw(&f, "PUT", P("/servers/0"), BEARER, ckbad[i], strlen(ckbad[i]), NULL), 400);
    /* the servers' agreement records (worker/ps/ps_core.h) ride on the registration too */
    static rm_rdzv_ps_group gr[8];
    CU_ASSERT_EQUAL(rm_rdzv_server_groups(w, gr, 8, &n, &e), RM_OK);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT(!gr[0].known && !gr[1].known); /* none sent yet */
    rm_rdzv_ps_group g1 = {.known = true,
                           .inc = 0xfedcba9876543210ull, /* beyond a double's 53 bits */
                           .gen = 0x8000000000000001ull,
                           .settled = true,
                           .at = 40,
                           .version = 41,
                           .nheld = 2,
                           .held = {40, 20}};
    CU_ASSERT_EQUAL(rm_rdzv_server_put(ps, 1, "127.0.0.9:29600", 0, NULL, &g1, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_server_groups(w, gr, 8, &n, &e), RM_OK);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT(!gr[0].known);
    CU_ASSERT(gr[1].known && gr[1].inc == g1.inc && gr[1].gen == g1.gen && gr[1].settled);
    CU_ASSERT(gr[1].at == 40 && gr[1].version == 41 && gr[1].nheld == 2 && gr[1].held[0] == 40 &&
              gr[1].held[1] == 20);
    CU_ASSERT_EQUAL(rm_rdzv_server_register(ps, 1, "127.0.0.9:29600", &e), RM_OK); /* none: kept */
    CU_ASSERT_EQUAL(rm_rdzv_server_groups(w, gr, 8, &n, &e), RM_OK);
    CU_ASSERT(gr[1].known && gr[1].inc == g1.inc);
    static const char *const gbad[] = {
        "{\"addr\":\"127.0.0.6:1\",\"group\":5}",
        "{\"addr\":\"127.0.0.6:1\",\"group\":{\"inc\":\"0\",\"gen\":\"1\",\"settled\":false,\"at\":0,"
        "\"version\":0,\"held\":[]}}",
        "{\"addr\":\"127.0.0.6:1\",\"group\":{\"inc\":\"xyz\",\"gen\":\"1\",\"settled\":false,\"at\":0,"
        "\"version\":0,\"held\":[]}}",
        "{\"addr\":\"127.0.0.6:1\",\"group\":{\"inc\":\"1\",\"gen\":\"1\",\"settled\":false,\"at\":-1,"
        "\"version\":0,\"held\":[]}}",
        "{\"addr\":\"127.0.0.6:1\",\"group\":{\"inc\":\"1\",\"gen\":\"1\",\"settled\":false,\"at\":0,"
        "\"version\":0,\"held\":[\"x\"]}}",
        "{\"addr\":\"127.0.0.6:1\",\"group\":{\"inc\":\"1\",\"gen\":\"1\",\"settled\":false,\"at\":0,"
        "\"version\":0,\"held\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,"
        "28,29,30,31,32,33]}}",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(gbad); i++)
        CU_ASSERT_EQUAL(raw(&f, "PUT", P("/servers/0"), BEARER, gbad[i], strlen(gbad[i]), NULL), 400);
    CU_ASSERT_EQUAL(rm_rdzv_server_groups(w, gr, 8, &n, &e), RM_OK);
    CU_ASSERT(!gr[0].known); /* nothing bad got in */
    rm_rdzv_client_free(ps);
    rm_rdzv_client_free(w);
    rm_rdzv_client_free(bad);
    fx_stop(&f);
}

/* ---------------- node identity (docs/strategies.md#topology) ---------------- */

typedef struct node_joiner {
    const char *url, *wid, *node; /* node NULL: the client's default (NODE_NAME, hostname) */
    int rc;
    rm_rdzv_round round;
    rm_err err;
    pthread_t th;
} node_joiner;

static void *node_join_main(void *arg)
{
    node_joiner *j = arg;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", 21000 + atoi(j->wid));
    rm_rdzv_client *c = rm_rdzv_client_new(j->url, JOB, TOKEN, j->wid, NULL);
    j->rc = !c ? RM_ENOMEM : j->node ? rm_rdzv_client_set_node(c, j->node, &j->err) : RM_OK;
    if (!j->rc)
        j->rc = rm_rdzv_join(c, addr, 0, 10, &j->round, &j->err);
    rm_rdzv_client_free(c);
    return NULL;
}

static void test_nodes_reach_every_rank(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 4, 4, 30) == 0);
    setenv(RM_ENV_NODE_NAME, "env-node", 1);
    node_joiner js[4] = {{f.url, "0", "node-b", 0, {0}, {0}, 0},
                         {f.url, "1", "node-a", 0, {0}, {0}, 0},
                         {f.url, "2", "node-b", 0, {0}, {0}, 0},
                         {f.url, "3", NULL, 0, {0}, {0}, 0}};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_FATAL(pthread_create(&js[i].th, NULL, node_join_main, &js[i]) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(js[i].th, NULL);
    unsetenv(RM_ENV_NODE_NAME);
    static const char *const want[] = {"node-b", "node-a", "node-b", "env-node"};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(js[i].rc, RM_OK);
        CU_ASSERT_EQUAL_FATAL(js[i].round.world_size, 4);
        for (int q = 0; q < 4; q++)
            CU_ASSERT_STRING_EQUAL(js[i].round.peers[q].node, want[q]);
    }
    /* rank 2: node-b (node 0, by its lowest rank 0), the second of its two ranks */
    rm_rdzv_topo t;
    CU_ASSERT_EQUAL(rm_rdzv_topology(js[2].round.peers, 4, 2, &t), RM_OK);
    CU_ASSERT_EQUAL(t.nnodes, 3);
    CU_ASSERT_EQUAL(t.node_index, 0);
    CU_ASSERT_EQUAL(t.local_rank, 1);
    CU_ASSERT_EQUAL(t.local_world, 2);
    CU_ASSERT(!t.uniform);
    rm_rdzv_state *s = snap(&f);
    CU_ASSERT_STRING_EQUAL(s->members[1].node, "node-a");
    for (int i = 0; i < 4; i++)
        rm_rdzv_round_free(&js[i].round);
    /* bad node names: refused by the client and by the service */
    rm_rdzv_client *c = rm_rdzv_client_new(f.url, JOB, TOKEN, "9", NULL);
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_rdzv_client_set_node(c, "a/b", &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "node name"));
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CU_ASSERT_EQUAL(rm_rdzv_client_set_node(c, longname, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_client_set_node(c, "", &e), RM_OK);
    rm_rdzv_client_free(c);
    static const char *const bad[] = {
        "{\"workerId\":\"7\",\"addr\":\"127.0.0.1:1\",\"node\":\"a b\"}",
        "{\"workerId\":\"7\",\"addr\":\"127.0.0.1:1\",\"node\":5}",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        char *reply = NULL;
        CU_ASSERT_EQUAL(raw(&f, "POST", P("/join"), BEARER, bad[i], strlen(bad[i]), &reply), 400);
        free(reply);
    }
    fx_stop(&f);
}

/* This process's thread count (/proc/self/status). */
static int threads_now(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (fp)
        fclose(fp);
    return n;
}

/* Held joins cost no thread each (the rendezvous' event loop, docs/scale.md): 200 joins held in
 * an open round (it waits for 300) add a handful of threads, where a thread per connection added
 * 200; shutting down answers every one of them. */
static void test_held_joins_cost_no_thread(void)
{
    enum { N = 200 };
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, N + 100, N + 100, 0) == 0);
    int port = rm_http_port(f.srv);
    int before = threads_now();
    int fds[N];
    int opened = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof a) != 0)
            break;
        char body[160], req[512];
        int bl = snprintf(body, sizeof body,
                          "{\"workerId\":\"%d\",\"addr\":\"127.0.0.1:%d\",\"lastEpoch\":0}", i, 20000 + i);
        int rl = snprintf(req, sizeof req,
                          "POST /v1/jobs/" JOB "/join HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                          "\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                          bl, body);
        if (write(fds[i], req, (size_t)rl) != rl)
            break;
        opened++;
    }
    CU_ASSERT_EQUAL_FATAL(opened, N);
    /* every join evaluated once (the snapshot lists only 64 members): each is held now */
    for (int i = 0; i < 1000 && rm_rdzv_join_evals(f.r) < (unsigned long)N; i++)
        rm_sleep(0.01);
    CU_ASSERT(rm_rdzv_join_evals(f.r) >= (unsigned long)N);
    int during = threads_now();
    if (during - before >= 20)
        fprintf(stderr, "threads: %d before, %d with %d joins held\n", before, during, N);
    CU_ASSERT(during - before < 20);
    rm_rdzv_shutdown(f.r); /* answers the held joins (503) */
    int answered = 0;
    for (int i = 0; i < opened; i++) {
        struct timeval tv = {5, 0};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[256];
        ssize_t n = read(fds[i], buf, sizeof buf - 1);
        if (n > 12) {
            buf[n] = 0;
            answered += strncmp(buf + 9, "503", 3) == 0;
        }
        close(fds[i]);
    }
    CU_ASSERT_EQUAL(answered, N);
    fx_stop(&f);
}

/* Raw HTTP for the held-report test: POST body to the job's path on a new connection (-1 on
 * failure), then the reply's status and body (read until the body is complete or 5 s). */
static int raw_post(int port, const char *what, const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[1024];
    int rl = snprintf(req, sizeof req,
                      "POST /v1/jobs/" JOB "/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                      "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      what, strlen(body), body);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_reply(int fd, char *buf, size_t cap)
{
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = 0;
        const char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "Content-Length:");
        if (end && cl && got >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15))
            break;
    }
    buf[got] = 0;
    return got > 12 ? atoi(buf + 9) : -1;
}

/* Held reports (docs/scale.md, "Held reports"): a report with "hold": true that would answer
 * "continue" is answered after the hold, not at once; one held when another worker opens a new
 * epoch is answered at once with "rejoin", one held when the job stops with "stop"; a report from
 * an old epoch is never held. */
static void test_held_reports(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, 2, 2, 0) == 0);
    int port = rm_http_port(f.srv);
    char buf[2048];
    int j0 = raw_post(port, "join", "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:21000\",\"lastEpoch\":0}");
    int j1 = raw_post(port, "join", "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:21001\",\"lastEpoch\":0}");
    CU_ASSERT_EQUAL_FATAL(raw_reply(j0, buf, sizeof buf), 200);
    CU_ASSERT_EQUAL_FATAL(raw_reply(j1, buf, sizeof buf), 200);
    close(j0);
    close(j1);
    const char *rep1 = "{\"workerId\":\"0\",\"epoch\":1,\"rank\":0,\"step\":3,\"hold\":true}";
    /* continue: after the hold */
    double t0 = rm_mono();
    int fd = raw_post(port, "report", rep1);
    CU_ASSERT_EQUAL(raw_reply(fd, buf, sizeof buf), 200);
    double dt = rm_mono() - t0;
    CU_ASSERT(strstr(buf, "\"action\":\"continue\"") != NULL);
    CU_ASSERT(dt >= 0.8 && dt < 3.0);
    /* the epoch moves while it is held: rejoin at once */
    t0 = rm_mono();
    fd = raw_post(port, "report", rep1);
    rm_sleep(0.2);
    int brk = raw_post(port, "join", "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:21001\",\"lastEpoch\":1}");
    CU_ASSERT_EQUAL(raw_reply(fd, buf, sizeof buf), 200);
    dt = rm_mono() - t0;
    CU_ASSERT(strstr(buf, "\"action\":\"rejoin\"") != NULL && strstr(buf, "\"epoch\":2") != NULL);
    CU_ASSERT(dt < 0.7);
    if (dt >= 0.7)
        fprintf(stderr, "held report answered %.3f s after it was sent, the epoch moved at 0.2 s\n", dt);
    close(fd);
    /* an old epoch's report: rejoin, not held */
    t0 = rm_mono();
    fd = raw_post(port, "report", rep1);
    CU_ASSERT_EQUAL(raw_reply(fd, buf, sizeof buf), 200);
    CU_ASSERT(strstr(buf, "\"action\":\"rejoin\"") != NULL && rm_mono() - t0 < 0.5);
    close(fd);
    /* the job stops while it is held: stop at once */
    t0 = rm_mono();
    fd = raw_post(port, "report", "{\"workerId\":\"0\",\"epoch\":2,\"rank\":0,\"step\":3,\"hold\":true}");
    rm_sleep(0.2);
    CU_ASSERT_EQUAL(rm_rdzv_job_stop(f.r, JOB), RM_OK);
    CU_ASSERT_EQUAL(raw_reply(fd, buf, sizeof buf), 200);
    CU_ASSERT(strstr(buf, "\"action\":\"stop\"") != NULL && rm_mono() - t0 < 0.7);
    close(fd);
    if (brk >= 0)
        close(brk);
    /* a bad hold is refused naming it */
    fd = raw_post(port, "report", "{\"workerId\":\"0\",\"epoch\":2,\"hold\":3}");
    CU_ASSERT_EQUAL(raw_reply(fd, buf, sizeof buf), 400);
    CU_ASSERT(strstr(buf, "hold") != NULL);
    close(fd);
    fx_stop(&f);
}

void rm_suite_rdzv(void)
{
    static const rm_test_case cases[] = {
        {"join_four_ranks_by_numeric_worker_id", test_join_four},
        {"nodes_reach_every_rank", test_nodes_reach_every_rank},
        {"bad_token_unknown_job_bad_args", test_bad_token},
        {"elastic_settle_and_grow_back", test_elastic_settle_and_grow_back},
        {"late_joiner_full_group_and_new_incarnation", test_late_joiner_full_group},
        {"rejoin_opens_one_epoch_restart_idempotent", test_rejoin_once_and_restart},
        {"restart_while_a_join_is_held", test_restart_while_held},
        {"kv_put_get_wait_timeout_limits_epochs", test_kv},
        {"report_updates_snapshot_old_epoch_rejoins", test_report},
        {"report_lm_numbers_both_ways_and_old_peers", test_report_lm_numbers},
        {"trained_epoch_survives_the_next_restart", test_trained_epoch_survives_restart},
        {"stop_and_remove", test_stop_and_remove},
        {"signature_and_many_jobs", test_signature_and_many_jobs},
        {"garbage_requests_get_4xx", test_garbage},
        {"free_and_shutdown_wake_long_polls", test_free_wakes_long_poll},
        {"controller_starts_after_worker", test_controller_starts_late},
        {"one_name_rule_for_service_and_client", test_name_rule},
        {"client_distrusts_reply_values", test_client_distrusts_reply_values},
        {"nan_timeout_refused", test_nan_timeout_refused},
        {"bad_token_logs_rate_limited", test_bad_token_logs_rate_limited},
        {"sigint_flag_ends_join_long_poll", test_join_cancel},
        {"polling_join_counts_settles_never_held", test_join_poll},
        {"parameter_servers_register_workers_read", test_servers_registry},
        {"held_joins_cost_no_thread", test_held_joins_cost_no_thread},
        {"held_reports_answered_when_the_epoch_moves", test_held_reports},
    };
    RM_ADD_SUITE("rdzv", NULL, NULL, cases);
}
