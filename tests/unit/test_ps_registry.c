/* Tests for worker/ps/ps_registry (docs/strategies.md#roles-names-environment): the parameter servers'
 * addresses from the rendezvous' server registry and bounded-retry connections to them, against a real
 * in-process rendezvous and fake servers that run the real handshake (rm_ps_hs_accept). A server that
 * has not registered times out by the deadline; a server replaced at a new address (the registry still
 * names the dead one) is found again once it registers; a wrong token fails at once (no retry); a stop
 * flag ends the retries; without a rendezvous the launch contract's list is used as is. */
#include "worker/ps/ps_registry.h"
#include "common/clock.h"
#include "common/http.h"
#include "worker/comm/net.h"
#include "tests/unit/testutil.h"
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define JOB "default/lb"
#define TOKEN "s3cret-token"
#define NS 2

/* A fake server `index` of NS: accepts, runs the server side of the handshake with its token and
 * keeps the connection open until it is stopped. */
typedef struct {
    int lfd, port, index;
    const char *token;
    pthread_t th;
    atomic_int stop, accepted, proved;
    int fds[8];
    int nfds;
} fake_ps;

static void *fake_main(void *arg)
{
    fake_ps *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = -1, w = -1;
        rm_err e = {0};
        if (rm_net_accept(f->lfd, rm_mono() + 1, &fd, NULL, 0, &e) != RM_OK)
            continue;
        atomic_fetch_add(&f->accepted, 1);
        if (rm_ps_hs_accept(fd, f->token, f->index, NS, rm_mono() + 2, NULL, NULL, &w, &e) == RM_OK)
            atomic_fetch_add(&f->proved, 1);
        if (f->nfds < 8)
            f->fds[f->nfds++] = fd;
        else
            close(fd);
    }
    return NULL;
}

static int fake_start(fake_ps *f, int index, const char *token)
{
    memset(f, 0, sizeof *f);
    f->index = index;
    f->token = token;
    rm_err e = {0};
    if (rm_net_listen("127.0.0.1", 0, 8, &f->lfd, &f->port, &e) != RM_OK) {
        fprintf(stderr, "fake server: %s\n", e.msg);
        return -1;
    }
    return pthread_create(&f->th, NULL, fake_main, f) == 0 ? 0 : -1;
}

static void fake_stop(fake_ps *f) /* the server is gone: nothing listens at its port */
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    for (int i = 0; i < f->nfds; i++)
        close(f->fds[i]);
    close(f->lfd);
}

static void addr_of(const fake_ps *f, char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.1:%d", f->port);
}

typedef struct {
    rm_rdzv *r;
    rm_http_server *srv;
    char url[64];
    rm_rdzv_client *ps; /* the servers' registration client */
} rdzv_fx;

static int rdzv_start(rdzv_fx *x)
{
    rm_err e = {0};
    memset(x, 0, sizeof *x);
    x->r = rm_rdzv_new();
    if (!x->r || rm_rdzv_job_set(x->r, JOB, TOKEN, 1, 1, 0) != RM_OK ||
        rm_rdzv_serve(x->r, "127.0.0.1:0", &x->srv, &e) != RM_OK) {
        fprintf(stderr, "rdzv fixture: %s\n", e.msg);
        rm_rdzv_free(x->r);
        return -1;
    }
    snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d", rm_http_port(x->srv));
    x->ps = rm_rdzv_client_new(x->url, JOB, TOKEN, "ps", NULL);
    return x->ps ? 0 : -1;
}

static void rdzv_stop(rdzv_fx *x)
{
    rm_rdzv_client_free(x->ps);
    rm_rdzv_shutdown(x->r);
    rm_http_stop(x->srv);
    rm_rdzv_free(x->r);
}

static const char LIST[NS][128] = {"lb-ps-0.lb:29600", "lb-ps-1.lb:29600"};

/* No rendezvous: the list's addresses as they are; an open connection is not reopened. */
static void test_static_list(void)
{
    fake_ps f;
    CU_ASSERT_FATAL(fake_start(&f, 1, TOKEN) == 0);
    char list[NS][128];
    memcpy(list, LIST, sizeof list);
    addr_of(&f, list[1], sizeof list[1]);
    rm_ps_registry g;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_registry_init(&g, (const char(*)[128])list, NS, NULL, JOB, TOKEN, "3", &e),
                          RM_OK);
    CU_ASSERT_PTR_NULL(g.rdzv);
    CU_ASSERT_STRING_EQUAL(g.addrs[0], "lb-ps-0.lb:29600");
    rm_ps_conn c = {.fd = -1};
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 1, 3, TOKEN, rm_mono() + 5, &e), RM_OK);
    CU_ASSERT(c.fd >= 0);
    int fd = c.fd;
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 1, 3, TOKEN, rm_mono() + 5, &e), RM_OK);
    CU_ASSERT_EQUAL(c.fd, fd); /* already open: untouched */
    rm_ps_conn_close(&c);
    /* index out of range */
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, NS, 3, TOKEN, rm_mono() + 5, &e), RM_EINVAL);
    rm_ps_registry_free(&g);
    fake_stop(&f);
    CU_ASSERT_EQUAL(atomic_load(&f.proved), 1);
}

typedef struct {
    rdzv_fx *x;
    const char *addr;
    double after_s;
} later_reg;

static void *register_later(void *arg)
{
    later_reg *l = arg;
    rm_sleep(l->after_s);
    rm_err e = {0};
    rm_rdzv_server_register(l->x->ps, 1, l->addr, &e);
    return NULL;
}

/* With a rendezvous: the list's names are never used (no DNS); an unregistered server times out
 * by the deadline; a registered one is connected; after it dies and a replacement registers at a
 * new address, the next connect finds the replacement (looked up again at every try). */
static void test_rendezvous_and_replacement(void)
{
    rdzv_fx x;
    CU_ASSERT_FATAL(rdzv_start(&x) == 0);
    rm_ps_registry g;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_registry_init(&g, LIST, NS, x.url, JOB, TOKEN, "2", &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(g.addrs[1], ""); /* unknown until the rendezvous says */
    rm_ps_conn c = {.fd = -1};

    /* not registered: bounded by the deadline, the message says why */
    double t0 = rm_mono();
    int rc = rm_ps_registry_connect(&g, &c, 1, 2, TOKEN, rm_mono() + 0.5, &e);
    double dt = rm_mono() - t0;
    CU_ASSERT_EQUAL(rc, RM_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "has not registered"));
    CU_ASSERT(dt >= 0.25 && dt < 3.0);
    CU_ASSERT_EQUAL(c.fd, -1);

    /* registered: found and connected */
    fake_ps a, b;
    CU_ASSERT_FATAL(fake_start(&a, 1, TOKEN) == 0);
    char aa[64], bb[64];
    addr_of(&a, aa, sizeof aa);
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_server_register(x.ps, 1, aa, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 1, 2, TOKEN, rm_mono() + 5, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(g.addrs[1], aa);
    rm_ps_conn_close(&c);

    /* server 1 dies; the rendezvous still names it; its replacement registers 0.3 s later at a
     * new address: the connect retries (bounded) and finds it */
    fake_stop(&a);
    CU_ASSERT_FATAL(fake_start(&b, 1, TOKEN) == 0);
    addr_of(&b, bb, sizeof bb);
    CU_ASSERT_STRING_NOT_EQUAL(aa, bb);
    later_reg l = {&x, bb, 0.3};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, register_later, &l) == 0);
    t0 = rm_mono();
    rc = rm_ps_registry_connect(&g, &c, 1, 2, TOKEN, rm_mono() + 20, &e);
    dt = rm_mono() - t0;
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(rc, RM_OK);
    CU_ASSERT_STRING_EQUAL(g.addrs[1], bb);
    CU_ASSERT(dt >= 0.25 && dt < 10.0); /* a try at the dead address: at most RM_PS_TRY_S */
    CU_ASSERT(c.fd >= 0);
    rm_ps_conn_close(&c);

    /* the rendezvous gone: the last known address is still used */
    rdzv_stop(&x);
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 1, 2, TOKEN, rm_mono() + 5, &e), RM_OK);
    rm_ps_conn_close(&c);
    rm_ps_registry_free(&g);
    fake_stop(&b);
    CU_ASSERT_EQUAL(atomic_load(&a.proved), 1);
    CU_ASSERT_EQUAL(atomic_load(&b.proved), 2);
}

/* A server that cannot prove the token: RM_EAUTH at once, not retried until the deadline. A raised
 * stop flag ends the retries (RM_ECANCELED). A rendezvous URL that cannot be used names the field. */
static void test_auth_cancel_and_bad_settings(void)
{
    fake_ps f;
    CU_ASSERT_FATAL(fake_start(&f, 0, "another-token") == 0);
    char list[NS][128];
    memcpy(list, LIST, sizeof list);
    addr_of(&f, list[0], sizeof list[0]);
    rm_ps_registry g;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_registry_init(&g, (const char(*)[128])list, NS, "", JOB, TOKEN, "1", &e),
                          RM_OK);
    rm_ps_conn c = {.fd = -1};
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 0, 1, TOKEN, rm_mono() + 20, &e), RM_EAUTH);
    CU_ASSERT(rm_mono() - t0 < 5);
    CU_ASSERT_EQUAL(c.fd, -1);
    fake_stop(&f);
    CU_ASSERT_EQUAL(atomic_load(&f.accepted), 1); /* one try */

    /* nothing listens at server 0's address; the stop flag is raised: canceled, not 20 s */
    atomic_int stop = 1;
    rm_ps_registry_set_cancel(&g, NULL, &stop);
    CU_ASSERT(rm_ps_registry_canceled(&g));
    t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_ps_registry_connect(&g, &c, 0, 1, TOKEN, rm_mono() + 20, &e), RM_ECANCELED);
    CU_ASSERT(rm_mono() - t0 < 5);
    rm_ps_registry_free(&g);

    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_ps_registry_init(&g, LIST, NS, "http://127.0.0.1:1", "not a job", TOKEN, "1", &e),
                    RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "RINGMASTER_RENDEZVOUS");
    CU_ASSERT_EQUAL(rm_ps_registry_init(&g, LIST, 0, NULL, JOB, TOKEN, "1", &e), RM_EINVAL);
}

void rm_suite_ps_registry(void)
{
    static const rm_test_case cases[] = {
        {"static_list", test_static_list},
        {"rendezvous_and_replacement", test_rendezvous_and_replacement},
        {"auth_cancel_and_bad_settings", test_auth_cancel_and_bad_settings},
    };
    RM_ADD_SUITE("ps_registry", NULL, NULL, cases);
}
