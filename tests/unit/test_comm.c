/* Tests for worker/comm/comm.c (backend table, address helpers, listener), worker/comm/comm_local.c
 * (world of one), worker/comm/comm_staged.c (collectives staged through the host, over a ring of
 * threads with the CPU table's copies) and worker/comm/net.c (SHA-256/HMAC test vectors, bounded
 * waits). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/http.h"
#include "common/clock.h"
#include "common/rdzv.h"

#include <pthread.h>

#include "kernels/kernels.h"
#include "tests/unit/testring.h"
#include "tests/unit/testutil.h"
#include "worker/allreduce/shard.h"
#include "worker/comm/comm.h"
#include "worker/comm/comm_staged.h"
#include "worker/comm/net.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_backend_table(void)
{
    CU_ASSERT_PTR_NOT_NULL(rm_comm_backend("ring"));
    CU_ASSERT_PTR_NOT_NULL(rm_comm_backend("local"));
    CU_ASSERT_STRING_EQUAL(rm_comm_backend("ring")->name, "ring");
    CU_ASSERT_STRING_EQUAL(rm_comm_backend("local")->name, "local");
    CU_ASSERT_PTR_NULL(rm_comm_backend("gloo"));
    CU_ASSERT_PTR_NULL(rm_comm_backend(NULL));
    const rm_comm_ops *m = rm_comm_backend("mpi");
    if (m)
        CU_ASSERT_STRING_EQUAL(m->name, "mpi");
    const rm_comm_ops *nc = rm_comm_backend("nccl");
    if (nc)
        CU_ASSERT_STRING_EQUAL(nc->name, "nccl");
    CU_ASSERT_EQUAL(rm_dtype_size(RM_DT_F32), 4);
    CU_ASSERT_EQUAL(rm_dtype_size(RM_DT_BF16), 2);
    CU_ASSERT_STRING_EQUAL(rm_dtype_name(RM_DT_F32), "float");
    CU_ASSERT_STRING_EQUAL(rm_redop_name(RM_OP_AVG), "avg");
}

static void test_parse_peers(void)
{
    rm_rdzv_peer *p = NULL;
    int n = 0;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_comm_parse_peers("127.0.0.1:4000,127.0.0.2:4001,localhost:9", &p, &n, &e), 0);
    CU_ASSERT_EQUAL(n, 3);
    if (p) {
        CU_ASSERT_STRING_EQUAL(p[1].addr, "127.0.0.2:4001");
        CU_ASSERT_EQUAL(p[2].rank, 2);
        CU_ASSERT_STRING_EQUAL(p[2].worker_id, "2");
    }
    free(p);
    p = NULL;
    const char *bad[] = {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "a:1,,b:2", ":80", "h:12x"};
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        CU_ASSERT_EQUAL(rm_comm_parse_peers(bad[i], &p, &n, &e), RM_EINVAL);
        CU_ASSERT_PTR_NULL(p);
    }
    char host[64];
    int port = 0;
    CU_ASSERT_EQUAL(rm_comm_split_addr("10.1.2.3:8080", host, sizeof host, &port, &e), 0);
    CU_ASSERT_STRING_EQUAL(host, "10.1.2.3");
    CU_ASSERT_EQUAL(port, 8080);
}

static void test_listen_connect(void)
{
    int lfd = -1, port = 0, cfd = -1, afd = -1;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_comm_listen("127.0.0.1", &lfd, &port, &e), 0);
    CU_ASSERT(port > 0);
    CU_ASSERT_EQUAL(rm_net_connect("127.0.0.1", port, rm_mono() + 2, &cfd, &e), 0);
    char who[64];
    CU_ASSERT_EQUAL(rm_net_accept(lfd, rm_mono() + 2, &afd, who, sizeof who, &e), 0);
    CU_ASSERT_EQUAL(strncmp(who, "127.0.0.1:", 10), 0);
    char b[4] = {0};
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_net_recv_all(afd, b, 4, rm_mono() + 0.2, &e), RM_ETIMEDOUT); /* bounded */
    CU_ASSERT(rm_mono() - t0 < 1.0);
    CU_ASSERT_EQUAL(rm_net_send_all(cfd, "ping", 4, rm_mono() + 1, &e), 0);
    CU_ASSERT_EQUAL(rm_net_recv_all(afd, b, 4, rm_mono() + 1, &e), 0);
    CU_ASSERT_EQUAL(memcmp(b, "ping", 4), 0);
    close(cfd);
    CU_ASSERT_EQUAL(rm_net_recv_all(afd, b, 4, rm_mono() + 1, &e), RM_ECLOSED);
    close(afd);
    CU_ASSERT_EQUAL(rm_net_accept(lfd, rm_mono() + 0.1, &afd, NULL, 0, &e), RM_ETIMEDOUT);
    close(lfd);
    CU_ASSERT_EQUAL(rm_net_listen("127.0.0.1", 70000, 8, &lfd, &port, &e), RM_EINVAL); /* bad port */
    CU_ASSERT_EQUAL(rm_comm_listen("localhost", &lfd, &port, &e), 0);
    close(lfd);
}

static void test_sha256_hmac(void)
{
    uint8_t d[32];
    char h[65];
    rm_sha256("abc", 3, d);
    hex(d, 32, h);
    CU_ASSERT_STRING_EQUAL(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    rm_sha256("", 0, d);
    hex(d, 32, h);
    CU_ASSERT_STRING_EQUAL(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 2 blocks */
    rm_sha256(m, strlen(m), d);
    hex(d, 32, h);
    CU_ASSERT_STRING_EQUAL(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* RFC 4231 test case 2 */
    rm_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    hex(d, 32, h);
    CU_ASSERT_STRING_EQUAL(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* RFC 4231 test case 6: key longer than a block */
    uint8_t key[131];
    memset(key, 0xaa, sizeof key);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    rm_hmac_sha256(key, sizeof key, m6, strlen(m6), d);
    hex(d, 32, h);
    CU_ASSERT_STRING_EQUAL(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    CU_ASSERT(rm_net_ct_equal("abc", "abc", 3));
    CU_ASSERT(!rm_net_ct_equal("abc", "abd", 3));
}

static void test_local_backend(void)
{
    const rm_comm_ops *ops = rm_comm_backend("local");
    rm_comm *c = NULL;
    rm_err e = {0};
    rm_comm_cfg bad = {.rank = 0, .world_size = 2, .listen_fd = -1};
    CU_ASSERT_EQUAL(ops->init(&bad, &c, &e), RM_EINVAL);
    rm_comm_cfg cfg = {.rank = 0, .world_size = 1, .listen_fd = -1};
    CU_ASSERT_EQUAL_FATAL(ops->init(&cfg, &c, &e), 0);
    float a[3] = {1, 2, 3}, b[3] = {0};
    CU_ASSERT_EQUAL(ops->allreduce(c, a, 3, RM_DT_F32, RM_OP_AVG, &e), 0);
    CU_ASSERT_EQUAL(a[2], 3.0f);
    CU_ASSERT_EQUAL(ops->allreduce_oop(c, a, b, 3, RM_DT_F32, RM_OP_SUM, &e), 0);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT_EQUAL(ops->allreduce(c, a, 0, RM_DT_F32, RM_OP_SUM, &e), 0);
    CU_ASSERT_EQUAL(ops->barrier(c, &e), 0);
    ops->abort(c);
    CU_ASSERT_EQUAL(ops->allreduce(c, a, 3, RM_DT_F32, RM_OP_SUM, &e), RM_ECLOSED);
    ops->destroy(c);
    ops->destroy(NULL);
}

/* `ringmaster-worker bench` in rendezvous mode: two worker processes join an in-process
 * rendezvous service (RINGMASTER_* env like `train`), form the ring from the peers it returns,
 * authenticate with the job token and print a table with #wrong 0. */
static void test_bench_rendezvous(void)
{
    char bin[512];
    snprintf(bin, sizeof bin, "%s/ringmaster-worker", rm_test_bindir());
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "skip: %s not built\n", bin);
        return;
    }
    rm_rdzv *r = rm_rdzv_new();
    rm_http_server *srv = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_serve(r, "127.0.0.1:0", &srv, &e), 0);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(r, "ns/bench", "tok-123", 2, 2, 0), 0);
    char url[128], *dir = rm_test_tmpdir("bench-rdzv");
    snprintf(url, sizeof url, "RINGMASTER_RENDEZVOUS=http://127.0.0.1:%d", rm_http_port(srv));
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        char out[600], wid[64];
        snprintf(out, sizeof out, "%s/out.%d", dir, i);
        snprintf(wid, sizeof wid, "RINGMASTER_WORKER_ID=%d", i);
        /* RINGMASTER_SHM=0: both ranks are on this host, where a bench job measures shared memory
         * as training would (tests/e2e/57-run-bench.sh); the opt-out keeps this test on the ring */
        char *envp[] = {url,
                        "RINGMASTER_JOB=ns/bench",
                        "RINGMASTER_TOKEN=tok-123",
                        wid,
                        "RINGMASTER_BIND_ADDR=127.0.0.1",
                        "RINGMASTER_LOG_LEVEL=warn",
                        "RINGMASTER_SHM=0",
                        NULL};
        char *argv[] = {bin,  "bench", "-b", "4K", "-e",        "256K", "-f", "4",
                        "-n", "3",     "-w", "1",  "--timeout", "10",   NULL};
        pids[i] = fork();
        if (pids[i] == 0) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execve(bin, argv, envp);
            _exit(127);
        }
    }
    int status[2] = {-1, -1}, left = 2;
    double deadline = rm_mono() + 60;
    while (left > 0 && rm_mono() < deadline) {
        for (int i = 0; i < 2; i++) {
            if (pids[i] > 0 && status[i] == -1 && waitpid(pids[i], &status[i], WNOHANG) == pids[i])
                left--;
        }
        usleep(20 * 1000);
    }
    for (int i = 0; i < 2; i++) {
        if (status[i] == -1 && pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
        CU_ASSERT(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
    }
    char p0[600];
    snprintf(p0, sizeof p0, "%s/out.0", dir);
    char *o0 = rm_test_read_file(p0, NULL);
    CU_ASSERT_PTR_NOT_NULL(o0);
    if (o0) {
        CU_ASSERT_PTR_NOT_NULL(strstr(o0, "backend ring, 2 ranks"));
        CU_ASSERT_PTR_NOT_NULL(strstr(o0, "# Out of bounds values : 0 OK"));
        if (!strstr(o0, "0 OK"))
            fprintf(stderr, "%s\n", o0);
    }
    free(o0);
    rm_rdzv_shutdown(r);
    rm_http_stop(srv);
    rm_rdzv_free(r);
    rm_test_rmtree(dir);
    free(dir);
}

/* ---- the staged comm: 3 ranks as threads on a loopback ring, each round comm wrapped ---- */
#define ST_N 3
#define ST_COUNT 1001 /* uneven shards: 334, 334, 333 */
typedef struct {
    int rank, rc;
    const rm_rdzv_peer *peers;
    rm_ring_listener **lst;
    float sum[ST_COUNT], shard[ST_COUNT], gathered[ST_COUNT], oop[ST_COUNT];
    char name[32];
} st_rank;

static void *st_main(void *ud)
{
    st_rank *r = ud;
    rm_err e = {0};
    rm_step_round rd;
    if ((r->rc = rm_test_ring_round(ST_N, r->rank, r->peers, r->lst, &rd, &e)))
        return NULL;
    const rm_comm_ops *ops = rd.ops;
    rm_comm *c = rd.comm;
    if ((r->rc = rm_comm_staged_wrap(&ops, &c, rm_kernels_cpu(), r->rank, ST_N, &e)))
        goto out;
    snprintf(r->name, sizeof r->name, "%s/%s", ops->name, rm_comm_staged_inner(ops, c)->name);
    float in[ST_COUNT];
    for (int i = 0; i < ST_COUNT; i++)
        r->sum[i] = in[i] = (float)(r->rank + 1) * (float)i;
    if ((r->rc = ops->allreduce(c, r->sum, ST_COUNT, RM_DT_F32, RM_OP_SUM, &e)) ||
        (r->rc = ops->allreduce_oop(c, in, r->oop, ST_COUNT, RM_DT_F32, RM_OP_SUM, &e)))
        goto out;
    float buf[ST_COUNT];
    memcpy(buf, in, sizeof buf);
    if ((r->rc = ops->reduce_scatter(c, buf, r->shard, ST_COUNT, RM_DT_F32, RM_OP_SUM, &e)))
        goto out;
    r->rc = ops->all_gather(c, r->shard, r->gathered, ST_COUNT, RM_DT_F32, &e);
out:
    if (c)
        ops->destroy(c);
    return NULL;
}

static void test_staged(void)
{
    rm_rdzv_peer peers[ST_N];
    rm_ring_listener *lst[ST_N];
    rm_test_ring_up(ST_N, peers, lst);
    static st_rank r[ST_N];
    pthread_t th[ST_N];
    for (int i = 0; i < ST_N; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i] = (st_rank){.rank = i, .peers = peers, .lst = lst};
        pthread_create(&th[i], NULL, st_main, &r[i]);
    }
    for (int i = 0; i < ST_N; i++)
        pthread_join(th[i], NULL);
    rm_test_ring_down(ST_N, lst);
    for (int k = 0; k < ST_N; k++) {
        CU_ASSERT_EQUAL_FATAL(r[k].rc, RM_OK);
        CU_ASSERT_STRING_EQUAL(r[k].name, "staged/ring");
        size_t off = rm_shard_off(ST_COUNT, ST_N, k), len = rm_shard_len(ST_COUNT, ST_N, k);
        for (int i = 0; i < ST_COUNT; i++) { /* ranks contribute 1, 2, 3 times i: 6i */
            CU_ASSERT_EQUAL(r[k].sum[i], 6.0f * (float)i);
            CU_ASSERT_EQUAL(r[k].oop[i], 6.0f * (float)i);
            CU_ASSERT_EQUAL(r[k].gathered[i], 6.0f * (float)i);
        }
        for (size_t i = 0; i < len; i++) /* this rank's shard of the sum */
            CU_ASSERT_EQUAL(r[k].shard[i], 6.0f * (float)(off + i));
    }
    /* its init refuses: it only wraps a formed comm */
    rm_comm *c = (rm_comm *)1;
    rm_err e = {0};
    rm_comm_cfg cfg = {.world_size = 1};
    CU_ASSERT_EQUAL(rm_comm_staged_ops()->init(&cfg, &c, &e), RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NULL(c);
}

void rm_suite_comm(void);
void rm_suite_comm(void)
{
    static const rm_test_case cases[] = {
        {"backend_table", test_backend_table},
        {"parse_peers", test_parse_peers},
        {"listen_connect_bounded", test_listen_connect},
        {"sha256_hmac_vectors", test_sha256_hmac},
        {"local_backend", test_local_backend},
        {"bench_rendezvous_mode", test_bench_rendezvous},
        {"staged_over_ring", test_staged},
    };
    RM_ADD_SUITE("comm", NULL, NULL, cases);
}
