/* Tests for worker/comm/comm_shm.c (the "shm" backend). Ranks are threads of this process for the
 * correctness matrix (world 2..8, counts 0, 1, < world, odd, multi-round, large) against a naive
 * reference summed in the same rank order, so results must be exactly equal and bit-identical
 * across ranks; allreduce in place and out of place, AVG, reduce_scatter + all_gather in and out of
 * place; a peer that leaves or hangs mid-collective -> error within the timeout; abort from another
 * thread. Forked processes for what needs a real process: kill -9 of a rank mid-collective and
 * during formation (no segment left in /dev/shm either way), a stranger without the token
 * (refused, nothing left), and a /dev/shm too small for the segment (a private 1 MiB tmpfs in a
 * mount namespace: every rank fails init at once with RM_ENOSPC naming /dev/shm, and
 * rm_comm_init_or_ring falls back to a working TCP ring); every rank killed during formation
 * leaks the segment, which the runner's sweep (operator/shm_sweep.c) removes once the rendezvous
 * moved past that epoch, and never before. CUnit asserts run on the main thread only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "common/clock.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/shard.h"
#include "operator/shm_sweep.h"

#define MAXW 8

typedef struct sworld sworld;
typedef struct srank {
    sworld *w;
    int rank;
    rm_comm *comm;
    int init_rc, rc;
    rm_err err;
    float *buf, *out, *shard;
    double elapsed;
    long bad; /* mismatches a rank thread found in its own results (mixed_thread) */
} srank;

struct sworld {
    int n, epoch;
    double timeout_s;
    const char *token[MAXW];
    rm_rdzv_peer peers[MAXW];
    srank r[MAXW];
    pthread_t th[MAXW];
    size_t count;
    rm_redop op;
    int mode;         /* 0 in place, 1 out of place, 2 rs+ag separate shard, 3 rs+ag in place */
    int behave[MAXW]; /* 0 normal, 1 hang (skip), 2 destroy (leave) */
};

static const rm_comm_ops *shm(void)
{
    return rm_comm_backend("shm");
}

static int g_port = 20000;

static void sworld_make(sworld *w, int n)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    w->epoch = 3;
    w->timeout_s = 5;
    g_port += 16;
    for (int q = 0; q < n; q++) {
        w->token[q] = "s3cret";
        w->peers[q].rank = q;
        snprintf(w->peers[q].worker_id, sizeof w->peers[q].worker_id, "w%d", q);
        /* pid + counter: a name no other test process or run uses */
        snprintf(w->peers[q].addr, sizeof w->peers[q].addr, "127.0.0.1:%d", (g_port + q) % 60000 + 1);
        w->r[q].w = w;
        w->r[q].rank = q;
    }
    snprintf(w->peers[0].worker_id, sizeof w->peers[0].worker_id, "p%d", (int)getpid());
    w->epoch = (int)getpid() % 100000 + g_port;
}

static rm_comm_cfg cfg_of(sworld *w, int q)
{
    rm_comm_cfg c = {.rank = q,
                     .world_size = w->n,
                     .epoch = w->epoch,
                     .peers = w->peers,
                     .token = w->token[q],
                     .listen_fd = -1,
                     .timeout_s = w->timeout_s};
    return c;
}

static void *init_thread(void *arg)
{
    srank *r = arg;
    rm_comm_cfg c = cfg_of(r->w, r->rank);
    r->init_rc = shm()->init(&c, &r->comm, &r->err);
    return NULL;
}

static void run_all(sworld *w, void *(*fn)(void *))
{
    for (int q = 0; q < w->n; q++)
        pthread_create(&w->th[q], NULL, fn, &w->r[q]);
    for (int q = 0; q < w->n; q++)
        pthread_join(w->th[q], NULL);
}

static int sworld_init(sworld *w)
{
    run_all(w, init_thread);
    int bad = 0;
    for (int q = 0; q < w->n; q++)
        bad |= w->r[q].init_rc != 0;
    return bad ? -1 : 0;
}

static void sworld_close(sworld *w)
{
    for (int q = 0; q < w->n; q++) {
        if (w->r[q].comm)
            shm()->destroy(w->r[q].comm);
        w->r[q].comm = NULL;
        free(w->r[q].buf);
        free(w->r[q].out);
        free(w->r[q].shard);
        w->r[q].buf = w->r[q].out = w->r[q].shard = NULL;
    }
}

static float val(int rank, size_t i)
{
    return (float)((int)((i * 7 + (size_t)rank * 13) % 1001) - 500) * 0.37f + (float)rank * 0.001f;
}

/* One collective of the given mode on rank r's buffers (modes as sworld.mode); the RS result of
 * modes 2 and 3 is kept in r->out. */
static int run_mode(srank *r, size_t count, int mode, rm_redop op)
{
    size_t off = rm_shard_off(count, r->w->n, r->rank), len = rm_shard_len(count, r->w->n, r->rank);
    int rc = RM_EINVAL;
    switch (mode) {
    case 0:
        rc = shm()->allreduce(r->comm, r->buf, count, RM_DT_F32, op, &r->err);
        break;
    case 1:
        rc = shm()->allreduce_oop(r->comm, r->buf, r->out, count, RM_DT_F32, op, &r->err);
        break;
    case 2:
        rc = shm()->reduce_scatter(r->comm, r->buf, r->shard, count, RM_DT_F32, op, &r->err);
        if (!rc) {
            memcpy(r->out, r->shard, len * sizeof(float)); /* keep the RS result */
            rc = shm()->all_gather(r->comm, r->shard, r->buf, count, RM_DT_F32, &r->err);
        }
        break;
    case 3:
        rc = shm()->reduce_scatter(r->comm, r->buf, r->buf + off, count, RM_DT_F32, op, &r->err);
        if (!rc) {
            memcpy(r->out, r->buf + off, len * sizeof(float));
            rc = shm()->all_gather(r->comm, r->buf + off, r->buf, count, RM_DT_F32, &r->err);
        }
        break;
    }
    return rc;
}

static void *coll_thread(void *arg)
{
    srank *r = arg;
    sworld *w = r->w;
    size_t count = w->count;
    double t0 = rm_mono();
    if (w->behave[r->rank] == 1) {
        r->rc = 0;
        return NULL;
    }
    if (w->behave[r->rank] == 2) {
        shm()->destroy(r->comm);
        r->comm = NULL;
        r->rc = 0;
        return NULL;
    }
    r->rc = run_mode(r, count, w->mode, w->op);
    r->elapsed = rm_mono() - t0;
    return NULL;
}

/* Returns the number of mismatches (0 = exact and identical across ranks). */
static long check_world(int n, size_t count, rm_redop op, int mode)
{
    sworld w;
    sworld_make(&w, n);
    w.count = count;
    w.op = op;
    w.mode = mode;
    if (sworld_init(&w)) {
        for (int q = 0; q < n; q++)
            if (w.r[q].init_rc)
                fprintf(stderr, "init rank %d: %s\n", q, w.r[q].err.msg);
        sworld_close(&w);
        return -1;
    }
    size_t cap = count ? count : 1;
    for (int q = 0; q < n; q++) {
        w.r[q].buf = malloc(cap * sizeof(float));
        w.r[q].out = calloc(cap, sizeof(float));
        w.r[q].shard = calloc(cap, sizeof(float));
        for (size_t i = 0; i < count; i++)
            w.r[q].buf[i] = val(q, i);
    }
    run_all(&w, coll_thread);
    long bad = 0;
    for (int q = 0; q < n; q++)
        if (w.r[q].rc) {
            fprintf(stderr, "rank %d: %s\n", q, w.r[q].err.msg);
            bad++;
        }
    const float inv = 1.0f / (float)n;
    for (size_t i = 0; i < count && !bad; i++) {
        float ref = val(0, i);
        for (int q = 1; q < n; q++)
            ref += val(q, i);
        if (op == RM_OP_AVG)
            ref *= inv;
        for (int q = 0; q < n; q++) {
            const float *res = mode == 1 ? w.r[q].out : w.r[q].buf;
            if (memcmp(&res[i], &ref, sizeof ref) != 0)
                bad++;
        }
        if (mode >= 2) { /* the reduce-scatter's own shard held the same value */
            int owner = rm_shard_owner(count, n, i);
            size_t off = rm_shard_off(count, n, owner);
            if (memcmp(&w.r[owner].out[i - off], &ref, sizeof ref) != 0)
                bad++;
        }
    }
    sworld_close(&w);
    return bad;
}

static int suite_init(void)
{
    /* small staging areas: 4 KiB per rank and set, so modest counts take many pipelined rounds */
    setenv("RINGMASTER_SHM_STAGE_BYTES", "4096", 1);
    return 0;
}
static int suite_clean(void)
{
    unsetenv("RINGMASTER_SHM_STAGE_BYTES");
    return 0;
}

static void test_table(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(shm());
    CU_ASSERT_STRING_EQUAL(shm()->name, "shm");
}

static void test_sizes(void)
{
    for (int n = 2; n <= MAXW; n++) {
        size_t counts[] = {0, 1, (size_t)n - 1, (size_t)2 * n + 1, 4099};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            long bad = check_world(n, counts[k], RM_OP_SUM, 0);
            if (bad)
                fprintf(stderr, "n=%d count=%zu: %ld mismatches\n", n, counts[k], bad);
            CU_ASSERT_EQUAL(bad, 0);
        }
    }
}

static void test_oop_avg_and_sharded(void)
{
    for (int n = 2; n <= MAXW; n += 3) {
        size_t counts[] = {1, (size_t)n - 1, 1001, 5003};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int mode = 1; mode <= 3; mode++) {
                long bad = check_world(n, counts[k], mode == 1 ? RM_OP_AVG : RM_OP_SUM, mode);
                if (bad)
                    fprintf(stderr, "n=%d count=%zu mode=%d: %ld\n", n, counts[k], mode, bad);
                CU_ASSERT_EQUAL(bad, 0);
            }
        long bad = check_world(n, 777, RM_OP_AVG, 0);
        CU_ASSERT_EQUAL(bad, 0);
    }
}

static void test_large_default_stage(void)
{
    unsetenv("RINGMASTER_SHM_STAGE_BYTES");
    CU_ASSERT_EQUAL(check_world(2, (size_t)3 << 20 | 5, RM_OP_SUM, 0), 0); /* 12 MiB, 6 rounds */
    CU_ASSERT_EQUAL(check_world(4, (size_t)1 << 20, RM_OP_AVG, 1), 0);
    setenv("RINGMASTER_SHM_STAGE_BYTES", "4096", 1);
}

static void test_repeated_calls_and_barrier(void)
{
    sworld w;
    sworld_make(&w, 3);
    CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
    /* many collectives on one comm: the round counter and every buffer set keep in step */
    for (int it = 0; it < 20; it++) {
        w.count = (size_t)(it * 37 % 1500);
        for (int q = 0; q < 3; q++) {
            free(w.r[q].buf);
            w.r[q].buf = malloc((w.count + 1) * sizeof(float));
            for (size_t i = 0; i < w.count; i++)
                w.r[q].buf[i] = val(q, i + (size_t)it);
        }
        run_all(&w, coll_thread);
        for (int q = 0; q < 3; q++)
            CU_ASSERT_EQUAL(w.r[q].rc, 0);
        for (size_t i = 0; i < w.count; i++) {
            float ref = val(0, i + (size_t)it) + val(1, i + (size_t)it) + val(2, i + (size_t)it);
            CU_ASSERT_TRUE(memcmp(&w.r[1].buf[i], &ref, 4) == 0 && memcmp(&w.r[2].buf[i], &ref, 4) == 0);
            if (memcmp(&w.r[1].buf[i], &ref, 4) != 0)
                break;
        }
    }
    sworld_close(&w);
}

/* Every rank runs a whole sequence of mixed collectives on one comm without any join between them
 * (one rank starts each call 1 ms late, in turn), so ranks drift through the pipelined buffer sets
 * and an allreduce's deferred gather meets the next call's rounds; checks its own results. */
#define MIXED_ITERS 12
static void *mixed_thread(void *arg)
{
    srank *r = arg;
    int n = r->w->n;
    size_t cap = 3001 + (MIXED_ITERS - 1) * 977;
    r->buf = malloc(cap * sizeof(float));
    r->out = calloc(cap, sizeof(float));
    r->shard = calloc(cap, sizeof(float));
    long bad = 0;
    for (int it = 0; it < MIXED_ITERS && !r->rc && !bad; it++) {
        size_t count = 3001 + (size_t)it * 977;
        int mode = it % 4;
        rm_redop op = mode < 2 && it % 3 == 1 ? RM_OP_AVG : RM_OP_SUM;
        for (size_t i = 0; i < count; i++)
            r->buf[i] = val(r->rank, i + (size_t)it);
        if (r->rank == it % n)
            usleep(1000);
        if ((r->rc = run_mode(r, count, mode, op)))
            break;
        size_t off = rm_shard_off(count, n, r->rank), len = rm_shard_len(count, n, r->rank);
        for (size_t i = 0; i < count; i++) {
            float ref = val(0, i + (size_t)it);
            for (int q = 1; q < n; q++)
                ref += val(q, i + (size_t)it);
            if (op == RM_OP_AVG)
                ref *= 1.0f / (float)n;
            const float *res = mode == 1 ? r->out : r->buf;
            if (memcmp(&res[i], &ref, sizeof ref) != 0)
                bad++;
            if (mode >= 2 && i >= off && i < off + len && memcmp(&r->out[i - off], &ref, sizeof ref) != 0)
                bad++;
        }
    }
    r->bad = bad;
    return NULL;
}

static void test_mixed_sequence_drifting(void)
{
    for (int n = 2; n <= 4; n++) {
        sworld w;
        sworld_make(&w, n);
        CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
        run_all(&w, mixed_thread);
        for (int q = 0; q < n; q++) {
            if (w.r[q].rc)
                fprintf(stderr, "n=%d rank %d: %s\n", n, q, w.r[q].err.msg);
            CU_ASSERT_EQUAL(w.r[q].rc, 0);
            CU_ASSERT_EQUAL(w.r[q].bad, 0);
        }
        sworld_close(&w);
    }
}

static void test_bad_args(void)
{
    sworld w;
    sworld_make(&w, 2);
    snprintf(w.peers[1].addr, sizeof w.peers[1].addr, "127.0.0.2:%d", 5000);
    rm_comm_cfg c = cfg_of(&w, 0);
    rm_comm *cm = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL(shm()->init(&c, &cm, &e), RM_EUNSUPPORTED); /* two hosts */
    CU_ASSERT_PTR_NULL(cm);
    c.rank = 2;
    CU_ASSERT_EQUAL(shm()->init(&c, &cm, &e), RM_EINVAL);
    /* bf16 refused on a live comm */
    sworld_make(&w, 2);
    CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
    uint16_t h[4] = {0};
    CU_ASSERT_EQUAL(shm()->allreduce(w.r[0].comm, h, 4, RM_DT_BF16, RM_OP_SUM, &e), RM_EUNSUPPORTED);
    sworld_close(&w);
}

/* mismatched collectives: RM_EPROTO on every rank, not a hang or garbage */
static void *mismatch_thread(void *arg)
{
    srank *r = arg;
    size_t count = r->rank == 0 ? 100 : 101;
    r->buf = calloc(count, sizeof(float));
    r->rc = shm()->allreduce(r->comm, r->buf, count, RM_DT_F32, RM_OP_SUM, &r->err);
    return NULL;
}

static void test_mismatch_is_eproto(void)
{
    sworld w;
    sworld_make(&w, 2);
    w.timeout_s = 2;
    CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
    run_all(&w, mismatch_thread);
    for (int q = 0; q < 2; q++)
        CU_ASSERT_TRUE(w.r[q].rc == RM_EPROTO || w.r[q].rc == RM_ECLOSED);
    CU_ASSERT_TRUE(w.r[0].rc == RM_EPROTO || w.r[1].rc == RM_EPROTO);
    sworld_close(&w);
}

static void dead_or_hung(int behave, int want)
{
    sworld w;
    sworld_make(&w, 4);
    w.timeout_s = 1.5;
    w.count = 50000;
    CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
    for (int q = 0; q < 4; q++)
        w.r[q].buf = calloc(w.count, sizeof(float));
    w.behave[2] = behave;
    double t0 = rm_mono();
    run_all(&w, coll_thread);
    double el = rm_mono() - t0;
    int seen = 0;
    for (int q = 0; q < 4; q++) {
        if (q == 2)
            continue;
        /* the first to notice reports `want`; it marks the segment failed, so the others may
         * report RM_ECLOSED ("rank k failed") first */
        seen += w.r[q].rc == want;
        CU_ASSERT_TRUE(w.r[q].rc == want || w.r[q].rc == RM_ECLOSED);
        if (w.r[q].rc != want)
            fprintf(stderr, "rank %d rc=%d %s\n", q, w.r[q].rc, w.r[q].err.msg);
    }
    CU_ASSERT_TRUE(seen >= 1);
    CU_ASSERT_TRUE(el < w.timeout_s + 3); /* bounded: never a hang */
    /* a broken comm stays broken */
    rm_err e = {0};
    CU_ASSERT_NOT_EQUAL(shm()->allreduce(w.r[0].comm, w.r[0].buf, 10, RM_DT_F32, RM_OP_SUM, &e), 0);
    sworld_close(&w);
}

static void test_peer_leaves(void)
{
    dead_or_hung(2, RM_ECLOSED);
}
static void test_peer_hangs(void)
{
    dead_or_hung(1, RM_ETIMEDOUT);
}

static void *abort_later(void *arg)
{
    usleep(200000);
    shm()->abort((rm_comm *)arg);
    return NULL;
}

static void test_abort(void)
{
    sworld w;
    sworld_make(&w, 2);
    w.timeout_s = 20;
    w.count = 1000;
    CU_ASSERT_EQUAL_FATAL(sworld_init(&w), 0);
    w.r[0].buf = calloc(w.count, sizeof(float));
    w.behave[1] = 1; /* rank 1 never comes: rank 0 blocks until aborted */
    pthread_t a;
    pthread_create(&a, NULL, abort_later, w.r[0].comm);
    double t0 = rm_mono();
    coll_thread(&w.r[0]);
    pthread_join(a, NULL);
    CU_ASSERT_EQUAL(w.r[0].rc, RM_ECLOSED);
    CU_ASSERT_TRUE(rm_mono() - t0 < 5);
    sworld_close(&w);
}

/* ---- processes ---------------------------------------------------------------------------- */

static int shm_exists(const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "/dev/shm%s", name);
    struct stat st;
    return stat(p, &st) == 0;
}

/* A forked rank: init; write 1 byte to ready_fd; then `iters` allreduces of count (0 = forever
 * until an error). Exit status: 0 ok, 10 + (-rc) on a collective error, 50 + (-rc) on init error. */
static void child_rank(sworld *w, int q, int ready_fd, size_t count, int iters)
{
    rm_comm_cfg c = cfg_of(w, q);
    rm_comm *cm = NULL;
    rm_err e = {0};
    int rc = shm()->init(&c, &cm, &e);
    if (rc)
        _exit(50 - rc);
    if (ready_fd >= 0 && write(ready_fd, "r", 1) != 1)
        _exit(99);
    float *buf = calloc(count, sizeof(float));
    for (int it = 0; iters == 0 || it < iters; it++) {
        rc = shm()->allreduce(cm, buf, count, RM_DT_F32, RM_OP_SUM, &e);
        if (rc)
            _exit(10 - rc);
    }
    shm()->destroy(cm);
    _exit(0);
}

static int wait_exit(pid_t pid, double timeout_s)
{
    double end = rm_mono() + timeout_s;
    int st = 0;
    while (rm_mono() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1; /* hung */
}

static void test_procs_normal_exit_leaves_nothing(void)
{
    sworld w;
    sworld_make(&w, 3);
    char name[RM_COMM_SHM_NAME_MAX];
    rm_comm_cfg c = cfg_of(&w, 0);
    CU_ASSERT_EQUAL_FATAL(rm_comm_shm_segment_name(&c, name, NULL), 0);
    pid_t pid[3];
    for (int q = 0; q < 3; q++)
        if ((pid[q] = fork()) == 0)
            child_rank(&w, q, -1, 3000, 50);
    for (int q = 0; q < 3; q++)
        CU_ASSERT_EQUAL(wait_exit(pid[q], 30), 0);
    CU_ASSERT_FALSE(shm_exists(name));
}

static void test_procs_kill9_mid_collective(void)
{
    for (int victim = 0; victim < 3; victim++) {
        sworld w;
        sworld_make(&w, 3);
        w.timeout_s = 3;
        char name[RM_COMM_SHM_NAME_MAX];
        rm_comm_cfg c = cfg_of(&w, 0);
        CU_ASSERT_EQUAL_FATAL(rm_comm_shm_segment_name(&c, name, NULL), 0);
        int pfd[2];
        CU_ASSERT_EQUAL_FATAL(pipe(pfd), 0);
        pid_t pid[3];
        for (int q = 0; q < 3; q++)
            if ((pid[q] = fork()) == 0) {
                close(pfd[0]);
                child_rank(&w, q, pfd[1], 20000, 0);
            }
        close(pfd[1]);
        char b[3];
        size_t got = 0;
        while (got < 3) {
            ssize_t k = read(pfd[0], b, 3 - got);
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        close(pfd[0]);
        CU_ASSERT_EQUAL(got, 3);
        CU_ASSERT_FALSE(shm_exists(name)); /* unlinked as soon as all attached */
        usleep(100000);                    /* mid-collective loop */
        double t0 = rm_mono();
        kill(pid[victim], SIGKILL);
        for (int q = 0; q < 3; q++) {
            int st = wait_exit(pid[q], w.timeout_s + 10);
            if (q == victim)
                continue;
            /* 10 - RM_ECLOSED (pid gone / peer failed) or 10 - RM_ETIMEDOUT; never a hang */
            CU_ASSERT_TRUE(st == 10 - RM_ECLOSED || st == 10 - RM_ETIMEDOUT);
            if (!(st == 10 - RM_ECLOSED || st == 10 - RM_ETIMEDOUT))
                fprintf(stderr, "rank %d status %d\n", q, st);
        }
        CU_ASSERT_TRUE(rm_mono() - t0 < w.timeout_s + 5);
        CU_ASSERT_FALSE(shm_exists(name));
    }
}

static void test_procs_kill9_during_formation(void)
{
    /* rank 0 creates and is killed before rank 2 ever comes; rank 1 (attached) times out and
     * unlinks: nothing left. */
    sworld w;
    sworld_make(&w, 3);
    w.timeout_s = 2;
    char name[RM_COMM_SHM_NAME_MAX];
    rm_comm_cfg c = cfg_of(&w, 0);
    CU_ASSERT_EQUAL_FATAL(rm_comm_shm_segment_name(&c, name, NULL), 0);
    pid_t p0 = fork();
    if (p0 == 0)
        child_rank(&w, 0, -1, 10, 1);
    pid_t p1 = fork();
    if (p1 == 0)
        child_rank(&w, 1, -1, 10, 1);
    double end = rm_mono() + 5;
    while (!shm_exists(name) && rm_mono() < end)
        usleep(5000);
    CU_ASSERT_TRUE(shm_exists(name)); /* formation in progress: the segment is there */
    usleep(200000);
    kill(p0, SIGKILL);
    wait_exit(p0, 5);
    int st = wait_exit(p1, w.timeout_s + 10);
    CU_ASSERT_TRUE(st == 50 - RM_ETIMEDOUT || st == 50 - RM_ECLOSED);
    CU_ASSERT_FALSE(shm_exists(name));
}

static void test_procs_stranger_refused(void)
{
    /* ranks 0 and 1 hold the token; "rank 2" does not, even knowing the segment's name (as if it
     * had listed /dev/shm): it is refused with RM_EAUTH, the formation fails, nothing is left. */
    sworld w;
    sworld_make(&w, 3);
    w.timeout_s = 2;
    char name[RM_COMM_SHM_NAME_MAX];
    rm_comm_cfg c = cfg_of(&w, 0);
    CU_ASSERT_EQUAL_FATAL(rm_comm_shm_segment_name(&c, name, NULL), 0);
    pid_t pid[3];
    for (int q = 0; q < 3; q++)
        if ((pid[q] = fork()) == 0) {
            if (q == 2) {
                w.token[2] = "wrong";
                rm_comm_shm_test_name = name;
                usleep(100000);
            }
            child_rank(&w, q, -1, 10, 1);
        }
    int st2 = wait_exit(pid[2], 15);
    CU_ASSERT_EQUAL(st2, 50 - RM_EAUTH);
    for (int q = 0; q < 2; q++) {
        int st = wait_exit(pid[q], 15);
        CU_ASSERT_TRUE(st == 50 - RM_ETIMEDOUT || st == 50 - RM_ECLOSED);
    }
    CU_ASSERT_FALSE(shm_exists(name));
    /* and a wrong-token rank that only computes its own name never finds the segment */
    sworld_make(&w, 2);
    w.timeout_s = 1;
    w.token[1] = "wrong";
    CU_ASSERT_EQUAL(sworld_init(&w), -1);
    CU_ASSERT_EQUAL(w.r[0].init_rc, RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(w.r[1].init_rc, RM_ETIMEDOUT);
    rm_comm_cfg c1 = cfg_of(&w, 0);
    CU_ASSERT_EQUAL(rm_comm_shm_segment_name(&c1, name, NULL), 0);
    CU_ASSERT_FALSE(shm_exists(name));
    sworld_close(&w);
}

static void test_procs_all_killed_runner_sweeps(void)
{
    /* both ranks die by SIGKILL while rank 0 waits for rank 1 to attach: no worker is left to
     * unlink the segment (the leak, proven below before the sweep runs) */
    sworld w;
    sworld_make(&w, 2);
    w.timeout_s = 30; /* nothing times out and unlinks on its own during the test */
    char name[RM_COMM_SHM_NAME_MAX];
    rm_comm_cfg c = cfg_of(&w, 0);
    CU_ASSERT_EQUAL_FATAL(rm_comm_shm_segment_name(&c, name, NULL), 0);
    pid_t p0 = fork();
    if (p0 == 0)
        child_rank(&w, 0, -1, 10, 1);
    pid_t p1 = fork();
    if (p1 == 0) {
        usleep(10 * 1000 * 1000); /* killed before it attaches */
        child_rank(&w, 1, -1, 10, 1);
    }
    double end = rm_mono() + 10;
    while (!shm_exists(name) && rm_mono() < end)
        usleep(5000);
    usleep(100000);
    kill(p0, SIGKILL);
    kill(p1, SIGKILL);
    wait_exit(p0, 5);
    wait_exit(p1, 5);
    CU_ASSERT_TRUE_FATAL(shm_exists(name)); /* leaked */
    /* the runner's view: the round of that epoch closed with both members */
    static rm_rdzv_state st;
    memset(&st, 0, sizeof st);
    st.epoch = w.epoch;
    st.closed = true;
    st.world_size = st.nmembers = 2;
    for (int q = 0; q < 2; q++) {
        st.members[q].rank = q;
        snprintf(st.members[q].addr, sizeof st.members[q].addr, "%s", w.peers[q].addr);
    }
    rm_shm_sweep sw = {0};
    rm_shm_sweep_note(&sw, w.token[0], &st, 100);
    CU_ASSERT_TRUE(shm_exists(name)); /* its epoch is current: maybe still forming, left alone */
    CU_ASSERT_EQUAL(sw.unlinked, 0);
    /* the controller restarts the round: epoch + 1 opens, the dead formation's segment goes */
    st.epoch++;
    st.closed = false;
    rm_shm_sweep_note(&sw, w.token[0], &st, 101);
    CU_ASSERT_FALSE(shm_exists(name));
    CU_ASSERT_EQUAL(sw.unlinked, 1);
    /* a later formation's segment (epoch + 1, live) is untouched until the run ends */
    st.closed = true;
    char live[RM_COMM_SHM_NAME_MAX];
    const char *addrs[2] = {w.peers[0].addr, w.peers[1].addr};
    CU_ASSERT_EQUAL_FATAL(rm_shm_segment_name(w.token[0], st.epoch, 2, addrs, live, NULL), 0);
    int fd = shm_open(live, O_RDWR | O_CREAT | O_EXCL, 0600);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    rm_shm_sweep_note(&sw, w.token[0], &st, 102);
    CU_ASSERT_TRUE(shm_exists(live));
    rm_shm_sweep_all(&sw);
    CU_ASSERT_FALSE(shm_exists(live));
    CU_ASSERT_EQUAL(sw.unlinked, 2);
    shm_unlink(live);
}

/* ---- a /dev/shm too small ---------------------------------------------------------------- */

static int shm_entries(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void *fallback_thread(void *arg)
{
    srank *r = arg;
    rm_comm_cfg c = cfg_of(r->w, r->rank);
    c.listen_fd = (int)r->bad; /* the listening socket made for this rank */
    const rm_comm_ops *ops = shm();
    r->init_rc = rm_comm_init_or_ring(&ops, &c, &r->comm, &r->err);
    if (r->init_rc)
        return NULL;
    r->elapsed = ops == rm_comm_ring_ops();
    r->rc = ops->allreduce(r->comm, r->buf, r->w->count, RM_DT_F32, RM_OP_SUM, &r->err);
    ops->destroy(r->comm);
    r->comm = NULL;
    return NULL;
}

/* In the child, inside its own mount namespace with a 1 MiB /dev/shm: exit 0 when every check
 * held, 77 when no mount namespace can be made here (not root), else the failed check's number. */
static void small_shm_child(void)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
        _exit(77);
    unsetenv("RINGMASTER_SHM_STAGE_BYTES"); /* default staging: a 3 MiB segment for 2 ranks */
    sworld w;
    sworld_make(&w, 2);
    w.timeout_s = 10;
    double t0 = rm_mono();
    if (sworld_init(&w) != -1)
        _exit(1);
    double took = rm_mono() - t0;
    for (int q = 0; q < 2; q++) {
        fprintf(stderr, "small /dev/shm: rank %d rc %d: %s\n", q, w.r[q].init_rc, w.r[q].err.msg);
        if (w.r[q].init_rc != RM_ENOSPC)
            _exit(2);
        if (!strstr(w.r[q].err.msg, "/dev/shm"))
            _exit(3);
    }
    if (took > 5) /* at once, not after the 10 s formation timeout */
        _exit(4);
    if (shm_entries() != 0) /* nothing left behind */
        _exit(5);
    sworld_close(&w);
    /* the fallback: the same formation through rm_comm_init_or_ring trains over the ring */
    sworld_make(&w, 2);
    w.timeout_s = 10;
    w.count = 1000;
    for (int q = 0; q < 2; q++) {
        int fd = -1, port = 0;
        if (rm_comm_listen("127.0.0.1", &fd, &port, NULL) != 0)
            _exit(6);
        snprintf(w.peers[q].addr, sizeof w.peers[q].addr, "127.0.0.1:%d", port);
        w.r[q].bad = fd;
        w.r[q].buf = malloc(w.count * sizeof(float));
        for (size_t i = 0; i < w.count; i++)
            w.r[q].buf[i] = val(q, i);
    }
    run_all(&w, fallback_thread);
    for (int q = 0; q < 2; q++) {
        close((int)w.r[q].bad);
        if (w.r[q].init_rc || w.r[q].rc) {
            fprintf(stderr, "fallback rank %d: %s\n", q, w.r[q].err.msg);
            _exit(7);
        }
        if (w.r[q].elapsed != 1) /* it runs the ring */
            _exit(8);
        for (size_t i = 0; i < w.count; i++)
            if (w.r[q].buf[i] != val(0, i) + val(1, i))
                _exit(9);
    }
    if (shm_entries() != 0)
        _exit(10);
    sworld_close(&w);
    _exit(0);
}

static void test_procs_small_dev_shm(void)
{
    pid_t pid = fork();
    if (pid == 0)
        small_shm_child();
    int st = wait_exit(pid, 40);
    if (st == 77) {
        fprintf(stderr, "(skipped: no mount namespace for a small /dev/shm here) ");
        return;
    }
    CU_ASSERT_EQUAL(st, 0);
}

void rm_suite_shm(void)
{
    static rm_test_case cases[] = {
        {"table", test_table},
        {"sizes x world 2..8 (exact vs naive)", test_sizes},
        {"oop, avg, reduce_scatter + all_gather", test_oop_avg_and_sharded},
        {"large buffers, default staging", test_large_default_stage},
        {"repeated collectives on one comm", test_repeated_calls_and_barrier},
        {"mixed collectives, ranks drifting through the pipeline", test_mixed_sequence_drifting},
        {"bad arguments", test_bad_args},
        {"mismatched calls are EPROTO", test_mismatch_is_eproto},
        {"peer leaves mid-collective", test_peer_leaves},
        {"peer hangs: timeout", test_peer_hangs},
        {"abort from another thread", test_abort},
        {"processes: normal exit leaves nothing", test_procs_normal_exit_leaves_nothing},
        {"processes: kill -9 mid-collective", test_procs_kill9_mid_collective},
        {"processes: kill -9 during formation", test_procs_kill9_during_formation},
        {"processes: stranger without token refused", test_procs_stranger_refused},
        {"processes: every rank killed in formation: the runner's sweep removes the segment",
         test_procs_all_killed_runner_sweeps},
        {"processes: /dev/shm too small: RM_ENOSPC at once, ring fallback", test_procs_small_dev_shm},
    };
    RM_ADD_SUITE("shm", suite_init, suite_clean, cases);
}
