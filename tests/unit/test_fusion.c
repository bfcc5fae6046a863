/* Tests for worker/allreduce/fusion.c: bucket plans in reverse layer order (threshold 0 = per layer), the
 * order and ranges of the collectives issued, overlap (a bucket is reduced while later layers
 * are still being produced), error propagation, bad input, and that fused results equal an
 * unfused allreduce over a real 3-rank ring. A fake backend records calls. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "common/clock.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/fusion.h"
#include "worker/comm/net.h"

/* ---- fake backend ---- */
struct rm_comm {
    float *base;
    atomic_int calls;
    size_t off[64], len[64];
    int op[64];
    int fail_at; /* call index that fails (-1 none) */
    int delay_ms;
};

static int fake_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    int i = atomic_load(&c->calls);
    if (c->delay_ms)
        usleep((useconds_t)c->delay_ms * 1000);
    if (i < 64) {
        c->off[i] = (size_t)((float *)buf - c->base);
        c->len[i] = count;
        c->op[i] = (int)op;
    }
    atomic_store(&c->calls, i + 1);
    if (i == c->fail_at)
        return rm_errf(err, RM_ETIMEDOUT, "fake: peer timed out");
    (void)dt;
    return RM_OK;
}

static const rm_comm_ops fake_ops = {.name = "fake", .allreduce = fake_allreduce};

static const size_t OFF5[5] = {0, 10, 30, 60, 100}, LEN5[5] = {10, 20, 30, 40, 50};

static void test_plan(void)
{
    float g[150];
    struct rm_comm fc = {.base = g, .fail_at = -1};
    rm_fusion *f = NULL;
    rm_err e = {0};
    size_t off, len;
    int a, b;
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 0, &f, &e), 0);
    CU_ASSERT_EQUAL(rm_fusion_nbuckets(f), 5);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(rm_fusion_bucket(f, i, &off, &len, &a, &b), 0);
        CU_ASSERT_EQUAL(a, 4 - i);
        CU_ASSERT_EQUAL(b, 4 - i);
        CU_ASSERT_EQUAL(off, OFF5[4 - i]);
        CU_ASSERT_EQUAL(len, LEN5[4 - i]);
    }
    CU_ASSERT_EQUAL(rm_fusion_bucket(f, 5, &off, &len, &a, &b), RM_EINVAL);
    rm_fusion_free(f);
    /* 90 floats threshold: layers 4+3 (90 floats) then 2..0 (60 floats, closed at layer 0) */
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 90 * 4, &f, &e), 0);
    CU_ASSERT_EQUAL(rm_fusion_nbuckets(f), 2);
    rm_fusion_bucket(f, 0, &off, &len, &a, &b);
    CU_ASSERT(off == 60 && len == 90 && a == 3 && b == 4);
    rm_fusion_bucket(f, 1, &off, &len, &a, &b);
    CU_ASSERT(off == 0 && len == 60 && a == 0 && b == 2);
    rm_fusion_free(f);
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 1 << 30, &f, &e), 0);
    CU_ASSERT_EQUAL(rm_fusion_nbuckets(f), 1);
    rm_fusion_bucket(f, 0, &off, &len, &a, &b);
    CU_ASSERT(off == 0 && len == 150 && a == 0 && b == 4);
    rm_fusion_free(f);
    rm_fusion_free(NULL);
}

static void test_bad_layout(void)
{
    float g[10];
    struct rm_comm fc = {.base = g, .fail_at = -1};
    rm_fusion *f = NULL;
    rm_err e = {0};
    size_t off[2] = {0, 3}, len[2] = {5, 5};
    CU_ASSERT_EQUAL(rm_fusion_new(&fake_ops, &fc, g, off, len, 2, 0, &f, &e), RM_EINVAL);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_EQUAL(rm_fusion_new(&fake_ops, &fc, g, off, len, 0, 0, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_fusion_new(NULL, &fc, g, off, len, 2, 0, &f, &e), RM_EINVAL);
}

static void test_calls_in_reverse_order(void)
{
    float g[150];
    struct rm_comm fc = {.base = g, .fail_at = -1};
    rm_fusion *f = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 0, &f, &e), 0);
    rm_fusion_set_world_size(f, 2);
    for (int step = 0; step < 3; step++) {
        atomic_store(&fc.calls, 0);
        rm_fusion_begin(f);
        for (int l = 4; l >= 0; l--)
            CU_ASSERT_EQUAL(rm_fusion_ready(f, l), 0);
        CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), 0);
        CU_ASSERT_EQUAL(atomic_load(&fc.calls), 5);
        for (int i = 0; i < 5; i++) {
            CU_ASSERT_EQUAL(fc.off[i], OFF5[4 - i]);
            CU_ASSERT_EQUAL(fc.len[i], LEN5[4 - i]);
            CU_ASSERT_EQUAL(fc.op[i], RM_OP_AVG);
        }
    }
    rm_fusion_stats st;
    rm_fusion_get_stats(f, &st);
    CU_ASSERT_EQUAL(st.nbuckets, 5);
    CU_ASSERT_EQUAL(st.bytes, 150 * 4);
    CU_ASSERT_EQUAL(st.steps, 3);
    CU_ASSERT_EQUAL(st.total_bytes, 3 * 150 * 4);
    /* layers marked out of order still launch buckets in plan order */
    atomic_store(&fc.calls, 0);
    rm_fusion_begin(f);
    rm_fusion_ready(f, 3);
    rm_fusion_ready(f, 1);
    usleep(20 * 1000);
    CU_ASSERT_EQUAL(atomic_load(&fc.calls), 0); /* bucket 0 (layer 4) not ready: nothing launched */
    rm_fusion_ready(f, 4);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), 0); /* finish launches the rest */
    CU_ASSERT_EQUAL(atomic_load(&fc.calls), 5);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(fc.off[i], OFF5[4 - i]);
    rm_fusion_free(f);
}

static void test_overlap(void)
{
    /* a bucket's allreduce runs while "backward" of earlier layers continues */
    float g[150];
    struct rm_comm fc = {.base = g, .fail_at = -1, .delay_ms = 0};
    rm_fusion *f = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 0, &f, &e), 0);
    rm_fusion_begin(f);
    CU_ASSERT_EQUAL(rm_fusion_ready(f, 4), 0);
    double t0 = rm_mono();
    while (atomic_load(&fc.calls) == 0 && rm_mono() - t0 < 2.0)
        usleep(1000);
    CU_ASSERT_EQUAL(atomic_load(&fc.calls), 1); /* ran before layer 3 was even produced */
    for (int l = 3; l >= 0; l--)
        rm_fusion_ready(f, l);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), 0);
    rm_fusion_free(f);
    /* and ready() never blocks on a slow collective */
    fc.delay_ms = 100;
    atomic_store(&fc.calls, 0);
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 0, &f, &e), 0);
    rm_fusion_begin(f);
    t0 = rm_mono();
    for (int l = 4; l >= 0; l--)
        rm_fusion_ready(f, l);
    CU_ASSERT(rm_mono() - t0 < 0.05);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), 0);
    rm_fusion_stats st;
    rm_fusion_get_stats(f, &st);
    CU_ASSERT(st.wait_s > 0.3);
    CU_ASSERT(st.allreduce_s > 0.4);
    rm_fusion_free(f);
}

static void test_error_propagates(void)
{
    float g[150];
    struct rm_comm fc = {.base = g, .fail_at = 1};
    rm_fusion *f = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fusion_new(&fake_ops, &fc, g, OFF5, LEN5, 5, 0, &f, &e), 0);
    rm_fusion_begin(f);
    for (int l = 4; l >= 0; l--)
        rm_fusion_ready(f, l);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), RM_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "timed out"));
    CU_ASSERT_EQUAL(atomic_load(&fc.calls), 2); /* later buckets skipped after the failure */
    /* double ready is an error, reported by finish */
    fc.fail_at = -1;
    rm_fusion_begin(f);
    CU_ASSERT_EQUAL(rm_fusion_ready(f, 4), 0);
    CU_ASSERT_EQUAL(rm_fusion_ready(f, 4), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_fusion_ready(f, 9), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_fusion_finish(f, &e), RM_EINVAL); /* finish without begin */
    rm_fusion_free(f);
}

/* ---- fused == unfused over a real ring ---- */
#define NR 3
#define NL 40
typedef struct {
    int rank, rc;
    rm_rdzv_peer *peers;
    int lfd;
    float *fused, *plain;
    size_t total;
    size_t off[NL], len[NL];
    size_t threshold;
} fr;

static void *fused_rank(void *arg)
{
    fr *r = arg;
    const rm_comm_ops *ops = rm_comm_backend("ring");
    rm_comm_cfg cfg = {.rank = r->rank,
                       .world_size = NR,
                       .epoch = 1,
                       .peers = r->peers,
                       .token = "t",
                       .listen_fd = r->lfd,
                       .timeout_s = 5};
    rm_comm *c = NULL;
    rm_fusion *f = NULL;
    rm_err e = {0};
    r->rc = ops->init(&cfg, &c, &e);
    if (r->rc)
        return NULL;
    r->rc = rm_fusion_new(ops, c, r->fused, r->off, r->len, NL, r->threshold, &f, &e);
    if (!r->rc) {
        rm_fusion_set_world_size(f, NR);
        for (int step = 0; step < 2 && !r->rc; step++) {
            rm_fusion_begin(f);
            for (int l = NL - 1; l >= 0; l--)
                rm_fusion_ready(f, l);
            r->rc = rm_fusion_finish(f, &e);
        }
        rm_fusion_free(f);
    }
    if (!r->rc) { /* the same two averaging steps unfused */
        r->rc = ops->allreduce(c, r->plain, r->total, RM_DT_F32, RM_OP_AVG, &e);
        if (!r->rc)
            r->rc = ops->allreduce(c, r->plain, r->total, RM_DT_F32, RM_OP_AVG, &e);
    }
    ops->destroy(c);
    return NULL;
}

static void test_fused_equals_unfused(void)
{
    rm_rdzv_peer peers[NR];
    fr r[NR];
    pthread_t th[NR];
    size_t thresholds[] = {0, 4096, 1 << 30};
    for (size_t t = 0; t < RM_ARRAY_LEN(thresholds); t++) {
        memset(r, 0, sizeof r);
        for (int i = 0; i < NR; i++) {
            int port = 0;
            rm_err e = {0};
            CU_ASSERT_EQUAL_FATAL(rm_comm_listen("127.0.0.1", &r[i].lfd, &port, &e), 0);
            peers[i].rank = i;
            snprintf(peers[i].addr, sizeof peers[i].addr, "127.0.0.1:%d", port);
            r[i].rank = i;
            r[i].peers = peers;
            r[i].threshold = thresholds[t];
            size_t o = 0;
            for (int l = 0; l < NL; l++) {
                r[i].off[l] = o;
                r[i].len[l] = (size_t)(37 + 13 * l);
                o += r[i].len[l];
            }
            r[i].total = o;
            r[i].fused = malloc(o * sizeof(float));
            r[i].plain = malloc(o * sizeof(float));
            for (size_t k = 0; k < o; k++)
                r[i].fused[k] = r[i].plain[k] = (float)((k * 31 + (size_t)i * 7) % 101) * 0.25f;
        }
        for (int i = 0; i < NR; i++)
            pthread_create(&th[i], NULL, fused_rank, &r[i]);
        for (int i = 0; i < NR; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < NR; i++) {
            CU_ASSERT_EQUAL(r[i].rc, 0);
            int bad = 0;
            for (size_t k = 0; k < r[i].total; k++)
                if (fabsf(r[i].fused[k] - r[i].plain[k]) > 1e-4f * (fabsf(r[i].plain[k]) + 1))
                    bad++;
            CU_ASSERT_EQUAL(bad, 0);
            CU_ASSERT_EQUAL(memcmp(r[i].fused, r[0].fused, r[i].total * sizeof(float)), 0);
        }
        for (int i = 0; i < NR; i++) {
            free(r[i].fused);
            free(r[i].plain);
            close(r[i].lfd);
        }
    }
}

void rm_suite_fusion(void);
void rm_suite_fusion(void)
{
    static const rm_test_case cases[] = {
        {"plan_reverse_order_thresholds", test_plan},
        {"bad_layout", test_bad_layout},
        {"calls_in_reverse_order", test_calls_in_reverse_order},
        {"overlap_with_backward", test_overlap},
        {"error_propagates", test_error_propagates},
        {"fused_equals_unfused_ring", test_fused_equals_unfused},
    };
    RM_ADD_SUITE("fusion", NULL, NULL, cases);
}
