/* Tests for worker/comm/comm_hier.c (the "hier" backend) and the rendezvous topology helpers
 * (rm_rdzv_topology / rm_rdzv_node_index in common/rdzv.c). Ranks are threads of this process,
 * each with its own loopback listener (a long-lived rm_ring_listener, as a worker has, or only a
 * listening socket); nodes are faked through rm_rdzv_peer.node. Checked: node splits 2x2, 2x3,
 * 3x2, 2x4, 4x2 and interleaved rank orders; awkward counts (0, 1, < local world, odd, multi-piece);
 * SUM/AVG in place and out of place; results bit-identical across ranks and equal to a naive sum
 * (and to the flat ring) within float tolerance; reduce_scatter / all_gather over the global shard
 * layout; shm vs ring inside a node; the flat fallback for one node, one rank per node and uneven
 * nodes; a peer that dies mid-collective is an error within the timeout. CUnit asserts run on the
 * main thread only. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "common/clock.h"
#include "common/rdzv.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/shard.h"

#define MAXW 8

typedef struct hworld hworld;
typedef struct hrank {
    hworld *w;
    int rank;
    rm_comm *comm;
    int init_rc, rc;
    rm_err err;
    float *buf, *out;
} hrank;

struct hworld {
    int n, epoch, shm_ok, persistent;
    const rm_comm_ops *ops;
    rm_rdzv_peer peers[MAXW];
    int lfd[MAXW];
    rm_ring_listener *lst[MAXW];
    hrank r[MAXW];
    pthread_t th[MAXW];
    size_t count;
    rm_redop op;
    int mode; /* 0 in place, 1 out of place, 2 reduce_scatter + all_gather */
    int die;  /* rank that destroys its comm instead of joining (-1 none) */
};

static const rm_comm_ops *hier(void)
{
    return rm_comm_backend("hier");
}

/* nodes: one letter per rank ("AABB"). */
static void hworld_make(hworld *w, const char *nodes, int persistent, int shm_ok)
{
    memset(w, 0, sizeof *w);
    w->n = (int)strlen(nodes);
    w->epoch = 5;
    w->shm_ok = shm_ok;
    w->persistent = persistent;
    w->ops = hier();
    w->die = -1;
    for (int i = 0; i < w->n; i++) {
        int port = 0;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_comm_listen("127.0.0.1", &w->lfd[i], &port, &e), 0);
        w->peers[i].rank = i;
        snprintf(w->peers[i].addr, sizeof w->peers[i].addr, "127.0.0.1:%d", port);
        snprintf(w->peers[i].worker_id, sizeof w->peers[i].worker_id, "%d", i);
        snprintf(w->peers[i].node, sizeof w->peers[i].node, "node-%c", nodes[i]);
        w->r[i].w = w;
        w->r[i].rank = i;
        if (persistent) {
            CU_ASSERT_EQUAL_FATAL(rm_ring_listener_start(w->lfd[i], 1, "tok", &w->lst[i], &e), 0);
            w->lfd[i] = -1;
        }
    }
}

static void *init_thread(void *arg)
{
    hrank *r = arg;
    hworld *w = r->w;
    rm_comm_cfg cfg = {.rank = r->rank,
                       .world_size = w->n,
                       .epoch = w->epoch,
                       .peers = w->peers,
                       .token = "tok",
                       .listener = w->lst[r->rank],
                       .listen_fd = w->lfd[r->rank],
                       .timeout_s = 5,
                       .shm_ok = w->shm_ok};
    r->init_rc = w->ops->init(&cfg, &r->comm, &r->err);
    return NULL;
}

static void run_all(hworld *w, void *(*fn)(void *))
{
    for (int i = 0; i < w->n; i++)
        pthread_create(&w->th[i], NULL, fn, &w->r[i]);
    for (int i = 0; i < w->n; i++)
        pthread_join(w->th[i], NULL);
}

static int hworld_init(hworld *w)
{
    run_all(w, init_thread);
    int bad = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->r[i].init_rc)
            fprintf(stderr, "init rank %d: %s\n", i, w->r[i].err.msg);
        bad |= w->r[i].init_rc != 0;
    }
    return bad ? -1 : 0;
}

static void hworld_close(hworld *w)
{
    for (int i = 0; i < w->n; i++) {
        w->ops->destroy(w->r[i].comm);
        w->r[i].comm = NULL;
        free(w->r[i].buf);
        free(w->r[i].out);
        w->r[i].buf = w->r[i].out = NULL;
        if (w->lfd[i] >= 0)
            close(w->lfd[i]);
        rm_ring_listener_free(w->lst[i]);
        w->lst[i] = NULL;
    }
}

static float val(int rank, size_t i)
{
    return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 1000) / 7.0 - 60.0);
}

static void *coll_thread(void *arg)
{
    hrank *r = arg;
    hworld *w = r->w;
    if (w->die == r->rank) {
        w->ops->destroy(r->comm);
        r->comm = NULL;
        r->rc = 0;
        return NULL;
    }
    if (w->mode == 0) {
        r->rc = w->ops->allreduce(r->comm, r->buf, w->count, RM_DT_F32, w->op, &r->err);
    } else if (w->mode == 1) {
        r->rc = w->ops->allreduce_oop(r->comm, r->buf, r->out, w->count, RM_DT_F32, w->op, &r->err);
    } else {
        size_t off, len;
        rm_shard_range(w->count, w->n, r->rank, &off, &len);
        float *shard = malloc((len + 1) * sizeof(float));
        r->rc = w->ops->reduce_scatter(r->comm, r->buf, shard, w->count, RM_DT_F32, w->op, &r->err);
        if (!r->rc)
            r->rc = w->ops->all_gather(r->comm, shard, r->out, w->count, RM_DT_F32, &r->err);
        free(shard);
    }
    return NULL;
}

/* One collective on an initialised world; returns failures. ref (optional) gets rank 0's result. */
static int check(hworld *w, size_t count, rm_redop op, int mode, float *ref)
{
    w->count = count;
    w->op = op;
    w->mode = mode;
    for (int i = 0; i < w->n; i++) {
        hrank *r = &w->r[i];
        free(r->buf);
        free(r->out);
        r->buf = malloc((count + 1) * sizeof(float));
        r->out = malloc((count + 1) * sizeof(float));
        for (size_t k = 0; k < count; k++)
            r->buf[k] = val(i, k);
        for (size_t k = 0; k <= count; k++)
            r->out[k] = -12345.0f;
        r->buf[count] = 999.0f;
        if (mode == 2)
            r->out[count] = 999.0f;
    }
    run_all(w, coll_thread);
    int fails = 0;
    for (int i = 0; i < w->n; i++)
        if (w->r[i].rc) {
            fprintf(stderr, "n=%d count=%zu rank %d: rc=%d %s\n", w->n, count, i, w->r[i].rc,
                    w->r[i].err.msg);
            fails++;
        }
    if (fails)
        return fails;
    const float *r0 = mode ? w->r[0].out : w->r[0].buf;
    for (size_t k = 0; k < count; k++) {
        double s = 0;
        for (int i = 0; i < w->n; i++)
            s += val(i, k);
        if (op == RM_OP_AVG)
            s /= w->n;
        if (fabs(r0[k] - s) > 1e-4 * (fabs(s) + 1) * w->n) {
            if (fails < 3)
                fprintf(stderr, "n=%d count=%zu k=%zu got %g want %g\n", w->n, count, k, (double)r0[k], s);
            fails++;
        }
    }
    for (int i = 1; i < w->n; i++) {
        const float *ri = mode ? w->r[i].out : w->r[i].buf;
        if (count && memcmp(ri, r0, count * sizeof(float)) != 0) {
            fprintf(stderr, "n=%d count=%zu rank %d differs from rank 0\n", w->n, count, i);
            fails++;
        }
    }
    for (int i = 0; i < w->n; i++) {
        if (mode != 2 && w->r[i].buf[count] != 999.0f)
            fails++;
        if (mode == 1 && w->r[i].out[count] != -12345.0f)
            fails++;
        if (mode == 2 && w->r[i].out[count] != 999.0f)
            fails++;
        if (mode == 1 && count && w->r[i].buf[0] != val(i, 0))
            fails++;
    }
    if (ref && count)
        memcpy(ref, r0, count * sizeof(float));
    return fails;
}

/* ---------------- topology (pure) ---------------- */

static void peers_of(rm_rdzv_peer *p, const char *nodes)
{
    for (int i = 0; nodes[i]; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].rank = i;
        if (nodes[i] != '_')
            snprintf(p[i].node, sizeof p[i].node, "n%c", nodes[i]);
    }
}

static void test_topology_table(void)
{
    static const struct {
        const char *nodes;
        int rank, nnodes, node_index, local_rank, local_world, uniform, min_local, max_local;
    } cases[] =
        {
            {"A", 0, 1, 0, 0, 1, 1, 1, 1},
            {"AABB", 0, 2, 0, 0, 2, 1, 2, 2},
            {"AABB", 3, 2, 1, 1, 2, 1, 2, 2},
            {"ABAB", 1, 2, 1, 0, 2, 1, 2, 2}, /* interleaved: nodes by lowest rank */
            {"ABAB", 2, 2, 0, 1, 2, 1, 2, 2},
            {"BBAA", 0, 2, 0, 0, 2, 1, 2, 2}, /* node names do not order nodes, ranks do */
            {"AAAB", 3, 2, 1, 0, 1, 0, 1, 3}, /* uneven */
            {"AAAB", 2, 2, 0, 2, 3, 0, 1, 3},
            {"ABC", 2, 3, 2, 0, 1, 1, 1, 1},  /* one rank per node */
            {"____", 2, 1, 0, 2, 4, 1, 4, 4}, /* nobody reported a node: one node "" */
            {"A_A_", 3, 2, 1, 1, 2, 1, 2, 2},
        };
    rm_rdzv_peer p[MAXW];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        peers_of(p, cases[c].nodes);
        rm_rdzv_topo t;
        int n = (int)strlen(cases[c].nodes);
        CU_ASSERT_EQUAL_FATAL(rm_rdzv_topology(p, n, cases[c].rank, &t), RM_OK);
        if (t.nnodes != cases[c].nnodes || t.node_index != cases[c].node_index ||
            t.local_rank != cases[c].local_rank || t.local_world != cases[c].local_world ||
            (int)t.uniform != cases[c].uniform || t.min_local != cases[c].min_local ||
            t.max_local != cases[c].max_local)
            fprintf(stderr, "case %zu (%s rank %d): nodes %d idx %d local %d/%d uniform %d %d..%d\n", c,
                    cases[c].nodes, cases[c].rank, t.nnodes, t.node_index, t.local_rank, t.local_world,
                    (int)t.uniform, t.min_local, t.max_local);
        CU_ASSERT_EQUAL(t.nnodes, cases[c].nnodes);
        CU_ASSERT_EQUAL(t.node_index, cases[c].node_index);
        CU_ASSERT_EQUAL(t.local_rank, cases[c].local_rank);
        CU_ASSERT_EQUAL(t.local_world, cases[c].local_world);
        CU_ASSERT_EQUAL((int)t.uniform, cases[c].uniform);
        CU_ASSERT_EQUAL(t.min_local, cases[c].min_local);
        CU_ASSERT_EQUAL(t.max_local, cases[c].max_local);
    }
    int idx[MAXW];
    peers_of(p, "BAAB");
    CU_ASSERT_EQUAL(rm_rdzv_node_index(p, 4, idx), 2);
    CU_ASSERT(idx[0] == 0 && idx[1] == 1 && idx[2] == 1 && idx[3] == 0);
    rm_rdzv_topo t;
    CU_ASSERT_EQUAL(rm_rdzv_topology(p, 4, 4, &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_topology(p, 4, -1, &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_node_index(NULL, 4, idx), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_rdzv_node_index(p, 0, idx), RM_EINVAL);
}

/* ---------------- the backend ---------------- */

static void test_table(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(hier());
    CU_ASSERT_STRING_EQUAL(hier()->name, "hier");
    CU_ASSERT_PTR_EQUAL(hier(), rm_comm_hier_ops());
    CU_ASSERT_EQUAL(rm_comm_hier_is_hier(NULL), 0);
    CU_ASSERT_STRING_EQUAL(rm_comm_hier_desc(NULL), "");
}

static void splits(int shm_ok, int persistent)
{
    static const char *const layouts[] = {"AABB", "ABAB", "AAABBB", "AABBCC", "AAAABBBB", "ABABABAB", "BBAA"};
    static const size_t counts[] = {0, 1, 2, 3, 7, 1000, 100003};
    setenv("RINGMASTER_RING_PIECE_KB", "8", 1);
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        hworld w;
        hworld_make(&w, layouts[l], persistent, shm_ok);
        CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
        for (int i = 0; i < w.n; i++) {
            CU_ASSERT_EQUAL(rm_comm_hier_is_hier(w.r[i].comm), 1);
            CU_ASSERT_PTR_NOT_NULL(
                strstr(rm_comm_hier_desc(w.r[i].comm), shm_ok ? "intra shm" : "intra ring"));
        }
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            CU_ASSERT_EQUAL(check(&w, counts[c], RM_OP_SUM, 0, NULL), 0);
            CU_ASSERT_EQUAL(check(&w, counts[c], RM_OP_AVG, 1, NULL), 0);
            CU_ASSERT_EQUAL(check(&w, counts[c], RM_OP_SUM, 2, NULL), 0);
        }
        hworld_close(&w);
    }
    unsetenv("RINGMASTER_RING_PIECE_KB");
}

static void test_splits_ring_inside(void)
{
    splits(0, 1);
}
static void test_splits_shm_inside(void)
{
    splits(1, 1);
}

/* No long-lived listener (bench, static worlds): init starts one over the socket for both rings. */
static void test_without_listener(void)
{
    hworld w;
    hworld_make(&w, "AABB", 0, 0);
    CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
    CU_ASSERT_EQUAL(check(&w, 4099, RM_OP_SUM, 0, NULL), 0);
    hworld_close(&w);
}

static void *barrier_thread(void *arg)
{
    hrank *r = arg;
    r->rc = r->w->ops->barrier(r->comm, &r->err);
    return NULL;
}

static void test_barrier_and_repeat(void)
{
    hworld w;
    hworld_make(&w, "AAABBB", 1, 1);
    CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
    for (int it = 0; it < 5; it++) {
        run_all(&w, barrier_thread);
        for (int i = 0; i < w.n; i++)
            CU_ASSERT_EQUAL(w.r[i].rc, 0);
        CU_ASSERT_EQUAL(check(&w, 513 + (size_t)it * 1000, RM_OP_SUM, it & 1, NULL), 0);
    }
    hworld_close(&w);
}

/* Hierarchical equals the flat ring within rounding, and each is bit-identical across its ranks. */
static void test_equals_flat_ring(void)
{
    size_t count = 50001;
    float *h = malloc(count * sizeof(float)), *f = malloc(count * sizeof(float));
    hworld w;
    hworld_make(&w, "AAAABBBB", 1, 1);
    CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
    CU_ASSERT_EQUAL(check(&w, count, RM_OP_AVG, 0, h), 0);
    hworld_close(&w);
    hworld_make(&w, "AAAABBBB", 1, 0);
    w.ops = rm_comm_backend("ring");
    CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
    CU_ASSERT_EQUAL(check(&w, count, RM_OP_AVG, 0, f), 0);
    hworld_close(&w);
    int bad = 0, differ = 0;
    for (size_t k = 0; k < count; k++) {
        if (fabsf(h[k] - f[k]) > 1e-5f * (fabsf(f[k]) + 1))
            bad++;
        differ += h[k] != f[k];
    }
    CU_ASSERT_EQUAL(bad, 0);
    fprintf(stderr, "hier vs flat ring: %d of %zu elements differ in the last bits\n", differ, count);
    free(h);
    free(f);
}

/* One node, one rank per node, uneven nodes: the flat comm, still correct. */
static void test_flat_fallbacks(void)
{
    static const struct {
        const char *nodes;
        int shm_ok;
        const char *want;
    } cases[] = {
        /* every rank here advertises 127.0.0.1, so "one host" holds whatever the node names */
        {"AAAA", 1, "flat shm"}, {"AAAA", 0, "flat ring"}, {"ABCD", 0, "flat ring"}, {"ABCD", 1, "flat shm"},
        {"AAAB", 1, "uneven"},   {"AB", 0, "flat ring"},   {"A", 1, "flat ring"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hworld w;
        hworld_make(&w, cases[c].nodes, 1, cases[c].shm_ok);
        CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
        for (int i = 0; i < w.n; i++) {
            CU_ASSERT_EQUAL(rm_comm_hier_is_hier(w.r[i].comm), 0);
            const char *d = rm_comm_hier_desc(w.r[i].comm);
            if (!strstr(d, cases[c].want))
                fprintf(stderr, "case %zu: \"%s\" lacks \"%s\"\n", c, d, cases[c].want);
            CU_ASSERT_PTR_NOT_NULL(strstr(d, cases[c].want));
        }
        CU_ASSERT_EQUAL(check(&w, 1031, RM_OP_AVG, 0, NULL), 0);
        CU_ASSERT_EQUAL(check(&w, 77, RM_OP_SUM, 2, NULL), 0);
        hworld_close(&w);
    }
}

static void test_bad_args(void)
{
    rm_err e = {0};
    rm_comm *c = NULL;
    rm_comm_cfg cfg = {.rank = 2, .world_size = 2, .epoch = 1};
    CU_ASSERT_EQUAL(hier()->init(&cfg, &c, &e), RM_EINVAL);
    cfg.rank = 0;
    CU_ASSERT_EQUAL(hier()->init(&cfg, &c, &e), RM_EINVAL); /* no peers */
    CU_ASSERT_PTR_NULL(c);
    hworld w;
    hworld_make(&w, "AABB", 1, 0);
    CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
    uint16_t h[4] = {0};
    CU_ASSERT_EQUAL(hier()->allreduce(w.r[0].comm, h, 4, RM_DT_BF16, RM_OP_SUM, &e), RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "f32"));
    hworld_close(&w);
}

/* A rank that dies mid-collective: every other rank fails (not hangs) within the timeout. */
static void test_peer_dies(void)
{
    for (int die = 0; die < 4; die += 3) {
        hworld w;
        hworld_make(&w, "AABB", 1, die == 0);
        CU_ASSERT_EQUAL_FATAL(hworld_init(&w), 0);
        w.die = die;
        double t0 = rm_mono();
        w.count = 300000;
        w.op = RM_OP_SUM;
        w.mode = 0;
        for (int i = 0; i < w.n; i++) {
            w.r[i].buf = calloc(w.count, sizeof(float));
            w.r[i].out = NULL;
        }
        run_all(&w, coll_thread);
        double dt = rm_mono() - t0;
        int failed = 0;
        for (int i = 0; i < w.n; i++)
            if (i != die)
                failed += w.r[i].rc != 0;
        /* the dead rank's node peer fails at once; the other node's ranks fail when the inter ring
         * of the dead rank's local index breaks, or at the timeout */
        CU_ASSERT_EQUAL(failed, w.n - 1);
        CU_ASSERT(dt < 5 * 3 + 2);
        hworld_close(&w);
    }
}

void rm_suite_hier(void)
{
    CU_pSuite s = CU_add_suite("hier", NULL, NULL);
    CU_add_test(s, "topology table", test_topology_table);
    CU_add_test(s, "table", test_table);
    CU_add_test(s, "splits, ring inside nodes", test_splits_ring_inside);
    CU_add_test(s, "splits, shm inside nodes", test_splits_shm_inside);
    CU_add_test(s, "without a long-lived listener", test_without_listener);
    CU_add_test(s, "barrier and repeated calls", test_barrier_and_repeat);
    CU_add_test(s, "equals the flat ring", test_equals_flat_ring);
    CU_add_test(s, "flat fallbacks", test_flat_fallbacks);
    CU_add_test(s, "bad arguments", test_bad_args);
    CU_add_test(s, "a peer dies", test_peer_dies);
}
