/* Tests for worker/allreduce/shard.c (the shard layout and the re-sharding plan, as tables) and for the
 * reduce-scatter / all-gather collectives of the comm table: the ring backend as n threads over
 * loopback for world sizes 1..8 and awkward counts (0, 1, < world, odd, multi-piece, through the
 * sender thread), against a naive reference, in place and out of place, SUM and AVG; the local
 * backend; and reduce-scatter + all-gather composing to the allreduce bit for bit. CUnit asserts
 * run on the main thread only (rank threads record results). */
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/shard.h"

/* ---- layout ---------------------------------------------------------------------------- */

static void test_layout_table(void)
{
    static const struct {
        size_t count;
        int world, rank;
        size_t off, len;
    } t[] = {
        {0, 1, 0, 0, 0},     {0, 4, 3, 0, 0},  {1, 1, 0, 0, 1},  {1, 4, 0, 0, 1},  {1, 4, 1, 1, 0},
        {1, 4, 3, 1, 0},     {3, 4, 2, 2, 1},  {3, 4, 3, 3, 0},  {10, 4, 0, 0, 3}, {10, 4, 1, 3, 3},
        {10, 4, 2, 6, 2},    {10, 4, 3, 8, 2}, {12, 4, 3, 9, 3}, {7, 8, 6, 6, 1},  {7, 8, 7, 7, 0},
        {101, 3, 2, 68, 33}, {5, 0, 0, 0, 0},  {5, 2, 2, 0, 0},  {5, 2, -1, 0, 0},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(t); i++) {
        size_t off = 99, len = 99;
        rm_shard_range(t[i].count, t[i].world, t[i].rank, &off, &len);
        CU_ASSERT_EQUAL(off, t[i].off);
        CU_ASSERT_EQUAL(len, t[i].len);
        CU_ASSERT_EQUAL(rm_shard_len(t[i].count, t[i].world, t[i].rank), t[i].len);
        CU_ASSERT_EQUAL(rm_shard_off(t[i].count, t[i].world, t[i].rank), t[i].off);
        if (off != t[i].off || len != t[i].len)
            fprintf(stderr, "layout row %zu: got off %zu len %zu\n", i, off, len);
    }
    CU_ASSERT_EQUAL(rm_shard_max_len(10, 4), 3);
    CU_ASSERT_EQUAL(rm_shard_max_len(12, 4), 3);
    CU_ASSERT_EQUAL(rm_shard_max_len(0, 4), 0);
    CU_ASSERT_EQUAL(rm_shard_max_len(3, 0), 0);
    /* invariants for every small case: tiling in rank order, lengths within one, owner() agrees */
    for (size_t count = 0; count <= 40; count++)
        for (int w = 1; w <= 9; w++) {
            size_t at = 0, mn = (size_t)-1, mx = 0;
            for (int r = 0; r < w; r++) {
                size_t off, len;
                rm_shard_range(count, w, r, &off, &len);
                CU_ASSERT_EQUAL(off, at);
                for (size_t i = off; i < off + len; i++)
                    CU_ASSERT_EQUAL(rm_shard_owner(count, w, i), r);
                at += len;
                mn = len < mn ? len : mn;
                mx = len > mx ? len : mx;
            }
            CU_ASSERT_EQUAL(at, count);
            CU_ASSERT(mx - mn <= 1);
            CU_ASSERT_EQUAL(mx, rm_shard_max_len(count, w));
            CU_ASSERT_EQUAL(rm_shard_owner(count, w, count), -1);
        }
}

static void test_plan_table(void)
{
    rm_shard_piece p[8];
    /* 10 elements, 4 -> 2: new rank 0 = [0,5) = old 0 [0,3) + old 1 [3,5) */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 4, 2, 0, p, 8), 2);
    CU_ASSERT(p[0].src_rank == 0 && p[0].src_off == 0 && p[0].dst_off == 0 && p[0].len == 3);
    CU_ASSERT(p[1].src_rank == 1 && p[1].src_off == 0 && p[1].dst_off == 3 && p[1].len == 2);
    /* new rank 1 = [5,10) = old 1 [5,6) (its offset 2) + old 2 [6,8) + old 3 [8,10) */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 4, 2, 1, p, 8), 3);
    CU_ASSERT(p[0].src_rank == 1 && p[0].src_off == 2 && p[0].dst_off == 0 && p[0].len == 1);
    CU_ASSERT(p[1].src_rank == 2 && p[1].src_off == 0 && p[1].dst_off == 1 && p[1].len == 2);
    CU_ASSERT(p[2].src_rank == 3 && p[2].src_off == 0 && p[2].dst_off == 3 && p[2].len == 2);
    /* unsharded -> sharded (old world 1): one piece from the single file */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 1, 4, 2, p, 8), 1);
    CU_ASSERT(p[0].src_rank == 0 && p[0].src_off == 6 && p[0].dst_off == 0 && p[0].len == 2);
    /* sharded -> unsharded: every old shard, in order */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 3, 1, 0, p, 8), 3);
    CU_ASSERT(p[2].src_rank == 2 && p[2].src_off == 0 && p[2].dst_off == 7 && p[2].len == 3);
    /* grow 2 -> 3 */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 2, 3, 1, p, 8), 2);
    CU_ASSERT(p[0].src_rank == 0 && p[0].src_off == 4 && p[0].len == 1);
    CU_ASSERT(p[1].src_rank == 1 && p[1].src_off == 0 && p[1].dst_off == 1 && p[1].len == 2);
    /* same world: identity */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 4, 4, 3, p, 8), 1);
    CU_ASSERT(p[0].src_rank == 3 && p[0].src_off == 0 && p[0].len == 2);
    /* an empty new shard needs nothing */
    CU_ASSERT_EQUAL(rm_shard_plan(2, 1, 4, 3, p, 8), 0);
    /* cap too small: the count is still returned, nothing past cap written */
    p[1].len = 777;
    CU_ASSERT_EQUAL(rm_shard_plan(10, 4, 1, 0, p, 1), 4);
    CU_ASSERT_EQUAL(p[1].len, 777);
    /* bad arguments */
    CU_ASSERT_EQUAL(rm_shard_plan(10, 0, 2, 0, p, 8), -1);
    CU_ASSERT_EQUAL(rm_shard_plan(10, 2, 0, 0, p, 8), -1);
    CU_ASSERT_EQUAL(rm_shard_plan(10, 2, 2, 2, p, 8), -1);
    /* every world pair: applying the plan to old shards rebuilds the new shard exactly */
    for (size_t count = 0; count <= 23; count++)
        for (int ow = 1; ow <= 8; ow++)
            for (int nw = 1; nw <= 8; nw++)
                for (int r = 0; r < nw; r++) {
                    rm_shard_piece q[8];
                    int np = rm_shard_plan(count, ow, nw, r, q, 8);
                    CU_ASSERT(np >= 0 && np <= ow);
                    size_t off, len, at = 0;
                    rm_shard_range(count, nw, r, &off, &len);
                    for (int k = 0; k < np; k++) {
                        CU_ASSERT_EQUAL(q[k].dst_off, at);
                        size_t so = rm_shard_off(count, ow, q[k].src_rank);
                        CU_ASSERT(q[k].src_off + q[k].len <= rm_shard_len(count, ow, q[k].src_rank));
                        CU_ASSERT_EQUAL(so + q[k].src_off, off + q[k].dst_off); /* same elements */
                        CU_ASSERT(q[k].len > 0);
                        at += q[k].len;
                    }
                    CU_ASSERT_EQUAL(at, len);
                }
}

/* The unit-by-unit re-sharding plan (sharded checkpoints): which ranges of which old ranks'
 * compact shards make up a new rank's compact shard. Units [5, 3]: world 2 compact shards are
 * rank 0 = u0[0,3) u1[0,2) (5 floats), rank 1 = u0[3,5) u1[2,3) (3 floats). */
static void test_unit_plan_table(void)
{
    static const size_t ulen[2] = {5, 3};
    static const struct {
        int ow, nw, nr, n;
        rm_shard_piece p[6];
    } t[] = {
        /* 2 -> 1: the whole vector, u0 from r0 [0,3) r1 [0,2), u1 from r0 [3,5) r1 [2,3) */
        {2, 1, 0, 4, {{0, 0, 0, 3}, {1, 0, 3, 2}, {0, 3, 5, 2}, {1, 2, 7, 1}}},
        /* 1 -> 2: rank 1 = u0[3,5) and u1[2,3) of the single file (offsets 3 and 5+2) */
        {1, 2, 1, 2, {{0, 3, 0, 2}, {0, 7, 2, 1}}},
        /* 2 -> 3: rank 0 = u0[0,2) (old r0 [0,2)), u1[0,1) (old r0 compact 3) */
        {2, 3, 0, 2, {{0, 0, 0, 2}, {0, 3, 2, 1}}},
        /* 2 -> 3: rank 1 = u0[2,4) (old r0 [2,3) + old r1 [0,1)), u1[1,2) (old r0 compact 4) */
        {2, 3, 1, 3, {{0, 2, 0, 1}, {1, 0, 1, 1}, {0, 4, 2, 1}}},
        /* 2 -> 3: rank 2 = u0[4,5) (old r1 [1,2)), u1[2,3) (old r1 compact 2) */
        {2, 3, 2, 2, {{1, 1, 0, 1}, {1, 2, 1, 1}}},
        /* 4 -> 2: rank 0 = u0[0,3) = old r0 [0,2) + r1 u0[0,1); u1[0,2) = r0 u1 (compact 2) + r1 u1 (compact 1) */
        {4, 2, 0, 4, {{0, 0, 0, 2}, {1, 0, 2, 1}, {0, 2, 3, 1}, {1, 1, 4, 1}}},
        /* same world: the identity */
        {2, 2, 1, 2, {{1, 0, 0, 2}, {1, 2, 2, 1}}},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(t); i++) {
        rm_shard_piece p[8];
        int n = rm_unit_shard_plan(ulen, 2, t[i].ow, t[i].nw, t[i].nr, p, 8);
        CU_ASSERT_EQUAL(n, t[i].n);
        for (int k = 0; k < n && k < t[i].n; k++) {
            bool ok = p[k].src_rank == t[i].p[k].src_rank && p[k].src_off == t[i].p[k].src_off &&
                      p[k].dst_off == t[i].p[k].dst_off && p[k].len == t[i].p[k].len;
            CU_ASSERT(ok);
            if (!ok)
                fprintf(stderr, "unit plan row %zu piece %d: got {%d,%zu,%zu,%zu}\n", i, k, p[k].src_rank,
                        p[k].src_off, p[k].dst_off, p[k].len);
        }
    }
    CU_ASSERT_EQUAL(rm_unit_shard_plan(ulen, 2, 0, 2, 0, NULL, 0), -1);
    CU_ASSERT_EQUAL(rm_unit_shard_plan(ulen, 2, 2, 2, 2, NULL, 0), -1);
    CU_ASSERT_EQUAL(rm_unit_shard_plan(ulen, 0, 2, 2, 0, NULL, 0), -1);
    /* every case up to world 8 on odd units: applying the plan to the old compact shards of a
     * known vector gives exactly the new compact shard */
    static const size_t u3[3] = {7, 1, 12};
    static const size_t o3[3] = {0, 7, 8};
    for (int ow = 1; ow <= 8; ow++)
        for (int nw = 1; nw <= 8; nw++)
            for (int nr = 0; nr < nw; nr++) {
                rm_unit_shard ns, os[8];
                rm_unit_shard_make(o3, u3, 3, nw, nr, &ns);
                float old[8][20], got[20];
                for (int r = 0; r < ow; r++) {
                    rm_unit_shard_make(o3, u3, 3, ow, r, &os[r]);
                    for (int u = 0; u < 3; u++)
                        for (size_t k = 0; k < os[r].len[u]; k++)
                            old[r][os[r].soff[u] + k] = (float)(os[r].off[u] + k);
                }
                rm_shard_piece p[64];
                int n = rm_unit_shard_plan(u3, 3, ow, nw, nr, p, 64);
                CU_ASSERT(n >= 0 && n <= 3 * ow);
                size_t covered = 0;
                for (int k = 0; k < n; k++) {
                    for (size_t j = 0; j < p[k].len; j++)
                        got[p[k].dst_off + j] = old[p[k].src_rank][p[k].src_off + j];
                    covered += p[k].len;
                }
                CU_ASSERT_EQUAL(covered, ns.total);
                for (int u = 0; u < 3; u++)
                    for (size_t k = 0; k < ns.len[u]; k++)
                        CU_ASSERT_EQUAL(got[ns.soff[u] + k], (float)(ns.off[u] + k));
            }
}

static void test_unit_shard(void)
{
    /* three layers of 10, 7 and 2 floats at 0, 10, 17; world 3 */
    const size_t off[] = {0, 10, 17}, len[] = {10, 7, 2};
    rm_unit_shard u;
    CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(off, len, 3, 3, 1, &u), 0);
    CU_ASSERT_EQUAL(u.nunits, 3);
    CU_ASSERT_EQUAL(u.off[0], 4); /* layer 0: 4,3,3 -> rank 1 [4,7) */
    CU_ASSERT_EQUAL(u.len[0], 3);
    CU_ASSERT_EQUAL(u.off[1], 13); /* layer 1: 3,2,2 -> rank 1 [13,15) */
    CU_ASSERT_EQUAL(u.len[1], 2);
    CU_ASSERT_EQUAL(u.off[2], 18); /* layer 2: 1,1,0 -> rank 1 [18,19) */
    CU_ASSERT_EQUAL(u.len[2], 1);
    CU_ASSERT_EQUAL(u.soff[0], 0);
    CU_ASSERT_EQUAL(u.soff[1], 3);
    CU_ASSERT_EQUAL(u.soff[2], 5);
    CU_ASSERT_EQUAL(u.total, 6);
    CU_ASSERT_EQUAL(u.max_unit, 10);
    CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(off, len, 3, 3, 2, &u), 0);
    CU_ASSERT_EQUAL(u.len[2], 0);
    CU_ASSERT_EQUAL(u.total, 5);
    /* the ranks' pieces tile every layer */
    for (int w = 1; w <= 8; w++) {
        size_t tot = 0;
        for (int r = 0; r < w; r++) {
            CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(off, len, 3, w, r, &u), 0);
            tot += u.total;
        }
        CU_ASSERT_EQUAL(tot, 19);
    }
    /* bad arguments */
    const size_t overlap[] = {0, 5, 17};
    CU_ASSERT_EQUAL(rm_unit_shard_make(overlap, len, 3, 2, 0, &u), -1);
    CU_ASSERT_EQUAL(u.nunits, 0);
    CU_ASSERT_EQUAL(rm_unit_shard_make(off, len, 0, 2, 0, &u), -1);
    CU_ASSERT_EQUAL(rm_unit_shard_make(off, len, 3, 2, 2, &u), -1);
    CU_ASSERT_EQUAL(rm_unit_shard_make(off, len, RM_SHARD_MAX_UNITS + 1, 2, 0, &u), -1);
}

/* ---- collectives ------------------------------------------------------------------------- */

#define MAXW 8

typedef struct sworld sworld;
typedef struct srank {
    sworld *w;
    int rank, rc, init_rc;
    rm_comm *comm;
    rm_err err;
    float *buf, *shard, *ar;
} srank;

struct sworld {
    int n;
    rm_rdzv_peer peers[MAXW];
    int lfd[MAXW];
    srank r[MAXW];
    pthread_t th[MAXW];
    size_t count;
    rm_redop op;
    int inplace;
};

static const rm_comm_ops *ring(void)
{
    return rm_comm_backend("ring");
}

static void *s_init(void *arg)
{
    srank *r = arg;
    sworld *w = r->w;
    rm_comm_cfg cfg = {.rank = r->rank,
                       .world_size = w->n,
                       .epoch = 3,
                       .peers = w->peers,
                       .token = "tok",
                       .listen_fd = w->lfd[r->rank],
                       .timeout_s = 20};
    r->init_rc = ring()->init(&cfg, &r->comm, &r->err);
    return NULL;
}

static void s_run(sworld *w, void *(*fn)(void *))
{
    for (int i = 0; i < w->n; i++)
        pthread_create(&w->th[i], NULL, fn, &w->r[i]);
    for (int i = 0; i < w->n; i++)
        pthread_join(w->th[i], NULL);
}

static int s_open(sworld *w, int n)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    for (int i = 0; i < n; i++) {
        int port = 0;
        rm_err e = {0};
        if (rm_comm_listen("127.0.0.1", &w->lfd[i], &port, &e))
            return -1;
        w->peers[i].rank = i;
        snprintf(w->peers[i].addr, sizeof w->peers[i].addr, "127.0.0.1:%d", port);
        snprintf(w->peers[i].worker_id, sizeof w->peers[i].worker_id, "%d", i);
        w->r[i].w = w;
        w->r[i].rank = i;
    }
    s_run(w, s_init);
    for (int i = 0; i < n; i++)
        if (w->r[i].init_rc) {
            fprintf(stderr, "init rank %d: %s\n", i, w->r[i].err.msg);
            return -1;
        }
    return 0;
}

static void s_close(sworld *w)
{
    for (int i = 0; i < w->n; i++) {
        ring()->destroy(w->r[i].comm);
        close(w->lfd[i]);
        free(w->r[i].buf);
        free(w->r[i].shard);
        free(w->r[i].ar);
    }
}

static float val(int rank, size_t i)
{
    return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 1000) / 7.0 - 60.0);
}

/* reduce-scatter, then all-gather of the result, then an allreduce of the original data */
static void *s_coll(void *arg)
{
    srank *r = arg;
    sworld *w = r->w;
    size_t off, len;
    rm_shard_range(w->count, w->n, r->rank, &off, &len);
    float *sh = w->inplace ? r->buf + off : r->shard;
    r->rc = ring()->reduce_scatter(r->comm, r->buf, sh, w->count, RM_DT_F32, w->op, &r->err);
    if (r->rc)
        return NULL;
    if (w->inplace)
        memcpy(r->shard, sh, len * sizeof(float)); /* for the check */
    for (size_t k = 0; k < w->count; k++)          /* the gather must fill these (out of place: all) */
        if (!w->inplace || k < off || k >= off + len)
            r->buf[k] = -777.0f;
    r->rc = ring()->all_gather(r->comm, sh, r->buf, w->count, RM_DT_F32, &r->err);
    if (r->rc)
        return NULL;
    r->rc = ring()->allreduce(r->comm, r->ar, w->count, RM_DT_F32, w->op, &r->err);
    return NULL;
}

static int check_rs_ag(sworld *w, size_t count, rm_redop op, int inplace)
{
    w->count = count;
    w->op = op;
    w->inplace = inplace;
    for (int i = 0; i < w->n; i++) {
        srank *r = &w->r[i];
        free(r->buf);
        free(r->shard);
        free(r->ar);
        r->buf = malloc((count + 1) * sizeof(float));
        r->ar = malloc((count + 1) * sizeof(float));
        r->shard = malloc((2 * count + 4) * sizeof(float));
        for (size_t k = 0; k < count; k++)
            r->buf[k] = r->ar[k] = val(i, k);
        r->buf[count] = 999.0f;
        for (size_t k = 0; k < 2 * count + 4; k++)
            r->shard[k] = -5.0f;
    }
    s_run(w, s_coll);
    int fails = 0;
    for (int i = 0; i < w->n; i++)
        if (w->r[i].rc) {
            fprintf(stderr, "n=%d count=%zu rank %d: rc=%d %s\n", w->n, count, i, w->r[i].rc,
                    w->r[i].err.msg);
            fails++;
        }
    if (fails)
        return fails;
    for (int i = 0; i < w->n; i++) {
        srank *r = &w->r[i];
        size_t off, len;
        rm_shard_range(count, w->n, i, &off, &len);
        /* the shard against the naive reduction */
        for (size_t k = 0; k < len; k++) {
            double s = 0;
            for (int j = 0; j < w->n; j++)
                s += val(j, off + k);
            if (op == RM_OP_AVG)
                s /= w->n;
            if (fabs(r->shard[k] - s) > 1e-4 * (fabs(s) + 1) * w->n) {
                if (fails < 3)
                    fprintf(stderr, "n=%d count=%zu rank %d k=%zu got %g want %g\n", w->n, count, i, k,
                            (double)r->shard[k], s);
                fails++;
            }
        }
        if (!inplace && r->shard[len] != -5.0f)
            fails++; /* nothing written past the shard */
        /* the gather: every rank's buffer == every shard, bit for bit == the allreduce */
        if (count && memcmp(r->buf, r->ar, count * sizeof(float)) != 0) {
            if (fails < 3)
                fprintf(stderr, "n=%d count=%zu rank %d: rs+ag != allreduce\n", w->n, count, i);
            fails++;
        }
        if (count && memcmp(r->buf, w->r[0].buf, count * sizeof(float)) != 0)
            fails++;
        if (r->buf[count] != 999.0f)
            fails++;
    }
    return fails;
}

static void test_ring_rs_ag_sizes(void)
{
    setenv("RINGMASTER_RING_PIECE_KB", "8", 1);  /* small pieces: the pipeline crosses steps */
    setenv("RINGMASTER_RING_TX_THREAD", "1", 1); /* >= 1 MiB goes through the sender thread */
    for (int n = 1; n <= MAXW; n++) {
        sworld w;
        int ok = s_open(&w, n) == 0;
        CU_ASSERT_FATAL(ok);
        size_t counts[] = {0,  1,    2,    (size_t)n - 1,          (size_t)n, (size_t)n + 1, 3,
                           17, 1001, 4099, (size_t)(300 << 10) + 7};
        for (size_t c = 0; c < RM_ARRAY_LEN(counts); c++) {
            if (counts[c] > (64 << 10) && n > 4)
                continue; /* keep the big case to small worlds */
            CU_ASSERT_EQUAL(check_rs_ag(&w, counts[c], RM_OP_SUM, 0), 0);
            CU_ASSERT_EQUAL(check_rs_ag(&w, counts[c], RM_OP_AVG, 1), 0);
        }
        s_close(&w);
    }
    unsetenv("RINGMASTER_RING_PIECE_KB");
    unsetenv("RINGMASTER_RING_TX_THREAD");
}

static void test_local_and_args(void)
{
    const rm_comm_ops *l = rm_comm_backend("local");
    rm_comm *c = NULL;
    rm_err e = {0};
    rm_comm_cfg cfg = {.rank = 0, .world_size = 1};
    CU_ASSERT_EQUAL_FATAL(l->init(&cfg, &c, &e), 0);
    float b[5] = {1, 2, 3, 4, 5}, s[5] = {0};
    CU_ASSERT_EQUAL(l->reduce_scatter(c, b, s, 5, RM_DT_F32, RM_OP_AVG, &e), 0);
    CU_ASSERT(s[0] == 1 && s[4] == 5);
    float g[5] = {0};
    CU_ASSERT_EQUAL(l->all_gather(c, s, g, 5, RM_DT_F32, &e), 0);
    CU_ASSERT(memcmp(g, b, sizeof g) == 0);
    l->abort(c);
    CU_ASSERT_EQUAL(l->all_gather(c, s, g, 5, RM_DT_F32, &e), RM_ECLOSED);
    l->destroy(c);
    /* every backend that is built has both collectives */
    const char *names[] = {"ring", "local", "mpi", "nccl"};
    for (size_t i = 0; i < RM_ARRAY_LEN(names); i++) {
        const rm_comm_ops *o = rm_comm_backend(names[i]);
        if (!o)
            continue;
        CU_ASSERT_PTR_NOT_NULL(o->reduce_scatter);
        CU_ASSERT_PTR_NOT_NULL(o->all_gather);
    }
    /* ring: bad dtype refused before touching the wire */
    sworld w;
    CU_ASSERT_FATAL(s_open(&w, 1) == 0);
    float x[3] = {1, 2, 3};
    CU_ASSERT_EQUAL(ring()->reduce_scatter(w.r[0].comm, x, x, 3, RM_DT_BF16, RM_OP_SUM, &e), RM_EUNSUPPORTED);
    CU_ASSERT_EQUAL(ring()->all_gather(w.r[0].comm, NULL, x, 3, RM_DT_F32, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(ring()->reduce_scatter(w.r[0].comm, x, x, 0, RM_DT_F32, RM_OP_SUM, &e), 0);
    s_close(&w);
}

/* ZeRO-2 staging buckets: a table of small cases, then the property that makes them correct — for
 * every rank, the parts the ordinary reduce-scatter of each bucket leaves it are, in order, exactly
 * its own piece of the unit (same floats, contiguous, compact offsets k * chunk), and no bucket is
 * larger than rm_shard_bucket_cap. */
static void test_bucket_table(void)
{
    static const struct {
        size_t len;
        int world;
        size_t cap;
        int nb;
        size_t chunk, t0, tlast;
    } t[] = {
        {10, 2, 4, 3, 2, 4, 2},      /* base 5: chunks 2,2,1 per rank */
        {11, 2, 4, 3, 2, 4, 3},      /* the remainder rides in the last bucket */
        {10, 4, 100, 1, 25, 10, 10}, /* one bucket: the unit itself */
        {3, 4, 8, 1, 2, 3, 3},       /* fewer floats than ranks: one bucket of the remainder */
        {0, 3, 8, 1, 2, 0, 0},       {7, 1, 3, 3, 3, 3, 1}, /* world 1: plain chunks */
        {9, 4, 2, 2, 1, 4, 5},                              /* cap < world still moves one float per rank */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_shard_bucket b = rm_shard_buckets(t[i].len, t[i].world, t[i].cap);
        CU_ASSERT_EQUAL(b.nbuckets, t[i].nb);
        CU_ASSERT_EQUAL(b.chunk, t[i].chunk);
        CU_ASSERT_EQUAL(rm_shard_bucket_total(t[i].len, t[i].world, t[i].cap, 0), t[i].t0);
        CU_ASSERT_EQUAL(rm_shard_bucket_total(t[i].len, t[i].world, t[i].cap, b.nbuckets - 1), t[i].tlast);
        CU_ASSERT_EQUAL(rm_shard_bucket_total(t[i].len, t[i].world, t[i].cap, b.nbuckets), 0);
    }
    CU_ASSERT_EQUAL(rm_shard_buckets(10, 0, 4).nbuckets, 0);
    CU_ASSERT_EQUAL(rm_shard_bucket_cap(8, 3), 3 * 2 + 2);
    for (size_t len = 0; len < 40; len++)
        for (int w = 1; w <= 6; w++)
            for (size_t cap = 1; cap <= 13; cap += 3) {
                rm_shard_bucket b = rm_shard_buckets(len, w, cap);
                for (int r = 0; r < w; r++) {
                    size_t at = rm_shard_off(len, w, r), got = 0;
                    for (int k = 0; k < b.nbuckets; k++) {
                        size_t tot = rm_shard_bucket_total(len, w, cap, k);
                        CU_ASSERT(tot <= rm_shard_bucket_cap(cap, w));
                        CU_ASSERT_EQUAL(got, (size_t)k * b.chunk); /* compact offset */
                        size_t part = rm_shard_len(tot, w, r);
                        if (k + 1 < b.nbuckets)
                            CU_ASSERT_EQUAL(part, b.chunk);
                        at += part;
                        got += part;
                    }
                    CU_ASSERT_EQUAL(got, rm_shard_len(len, w, r)); /* the piece, exactly */
                    CU_ASSERT_EQUAL(at, rm_shard_off(len, w, r) + rm_shard_len(len, w, r));
                }
            }
}

void rm_suite_shard(void);
void rm_suite_shard(void)
{
    static const rm_test_case cases[] = {
        {"layout_table", test_layout_table},
        {"plan_table", test_plan_table},
        {"unit_shard_table", test_unit_shard},
        {"unit_plan_table", test_unit_plan_table},
        {"zero2_bucket_table", test_bucket_table},
        {"ring_rs_ag_1_to_8_awkward_counts", test_ring_rs_ag_sizes},
        {"local_and_arguments", test_local_and_args},
    };
    RM_ADD_SUITE("shard", NULL, NULL, cases);
}
