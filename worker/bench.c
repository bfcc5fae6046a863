/* bench.c — `ringmaster-worker bench`: allreduce, reduce_scatter and all_gather busbw in
 * nccl-tests' format (see bench.h; --op picks the collective).
 *
 * Design follows nccl-tests' harness: per size, warm-up, a timed loop of -n iterations (the time
 * of one iteration averaged over the ranks), out-of-place and in-place, and a separate checked
 * run on fresh rank-dependent data whose exact sum is known (small integers, so float sums are
 * exact and #wrong is an exact count). algbw = bytes / time, busbw = algbw * 2(n-1)/n for the
 * allreduce and algbw * (n-1)/n for reduce_scatter and all_gather (as nccl-tests; size is the full
 * vector, each rank's shard is the layout of worker/allreduce/shard.h), GB = 1e9 bytes. Buffers are allocated once at the largest size (on the GPU for --backend nccl when the
 * CUDA kernels table is available, as nccl-tests does). Output on rank 0 only. */
#include "worker/bench.h"
#include "common/clock.h"
#include "common/log.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv.h"
#include "common/rm.h"
#include "common/worker_env.h"
#include "kernels/kernels.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/fusion.h"
#include "worker/comm/net.h"
#include "worker/allreduce/shard.h"

typedef struct bench_opts {
    size_t minb, maxb;
    double factor;
    long stepbytes;
    int iters, warmup, check;
    const char *backend, *json, *peers, *token;
    const char *nodes; /* --nodes: static mode's node name per rank ("a,a,b,b"), or NULL */
    const char *op;    /* allreduce | reduce_scatter | all_gather */
    int world, rank;
    double timeout_s;
    /* --fusion mode */
    int fusion, layers;
    size_t layer_floats;
    double compute_us;
    const char *thresholds;
} bench_opts;

typedef struct bench_row {
    size_t size, count;
    double t_us[2], algbw[2], busbw[2];
    long wrong[2];
} bench_row;

static int parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return RM_EINVAL;
    double mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024.0 * 1024.0, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024.0 * 1024.0 * 1024.0, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return RM_EINVAL;
    *out = (size_t)(v * mul);
    return RM_OK;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ringmaster-worker bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i STEPBYTES]\n"
        "         [-n ITERS] [-w WARMUP] [-c 0|1] [--backend ring|shm|mpi|nccl|local] [--json FILE]\n"
        "         [--op allreduce|reduce_scatter|all_gather]\n"
        "         [--world N --rank R --peers HOST:PORT,...] [--nodes NODE,...] [--token T] [--timeout S]\n"
        "  --backend hier: hierarchical allreduce over the ranks' nodes (--nodes in static mode,\n"
        "         NODE_NAME or the host name with the rendezvous).\n"
        "  sizes take K/M/G suffixes; defaults -b 32M -e 32M -f 2 -n 20 -w 5 -c 1.\n"
        "  --fusion [--layers 200] [--layer-floats 10000] [--compute-us 20]\n"
        "         [--thresholds 0,262144,...]: time per training step with per-layer\n"
        "         allreduce (threshold 0) vs fused buckets, backward simulated per layer.\n"
        "  World: mpirun (--backend mpi), --world/--rank/--peers (static), or the rendezvous\n"
        "  (" RM_ENV_RENDEZVOUS ", " RM_ENV_JOB ", " RM_ENV_TOKEN ", " RM_ENV_WORKER_ID ",\n"
        "  " RM_ENV_BIND_ADDR ").\n");
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    enum {
        OPT_BACKEND = 1000,
        OPT_JSON,
        OPT_WORLD,
        OPT_RANK,
        OPT_PEERS,
        OPT_TOKEN,
        OPT_TIMEOUT,
        OPT_FUSION,
        OPT_LAYERS,
        OPT_LFLOATS,
        OPT_COMPUTE,
        OPT_THRESH,
        OPT_OP,
        OPT_NODES
    };
    static const struct option lo[] = {{"minbytes", required_argument, NULL, 'b'},
                                       {"maxbytes", required_argument, NULL, 'e'},
                                       {"stepfactor", required_argument, NULL, 'f'},
                                       {"stepbytes", required_argument, NULL, 'i'},
                                       {"iters", required_argument, NULL, 'n'},
                                       {"warmup_iters", required_argument, NULL, 'w'},
                                       {"check", required_argument, NULL, 'c'},
                                       {"backend", required_argument, NULL, OPT_BACKEND},
                                       {"json", required_argument, NULL, OPT_JSON},
                                       {"world", required_argument, NULL, OPT_WORLD},
                                       {"rank", required_argument, NULL, OPT_RANK},
                                       {"peers", required_argument, NULL, OPT_PEERS},
                                       {"token", required_argument, NULL, OPT_TOKEN},
                                       {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                       {"fusion", no_argument, NULL, OPT_FUSION},
                                       {"layers", required_argument, NULL, OPT_LAYERS},
                                       {"layer-floats", required_argument, NULL, OPT_LFLOATS},
                                       {"compute-us", required_argument, NULL, OPT_COMPUTE},
                                       {"thresholds", required_argument, NULL, OPT_THRESH},
                                       {"op", required_argument, NULL, OPT_OP},
                                       {"nodes", required_argument, NULL, OPT_NODES},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    *o = (bench_opts){.minb = 32u << 20,
                      .maxb = 32u << 20,
                      .factor = 2,
                      .iters = 20,
                      .warmup = 5,
                      .check = 1,
                      .backend = NULL,
                      .world = 0,
                      .rank = -1,
                      .timeout_s = 30,
                      .layers = 200,
                      .layer_floats = 10000,
                      .compute_us = 20,
                      .thresholds = "0,262144,1048576,4194304,67108864"};
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:h", lo, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'b':
            if (parse_size(optarg, &o->minb))
                goto bad;
            break;
        case 'e':
            if (parse_size(optarg, &o->maxb))
                goto bad;
            break;
        case 'f':
            o->factor = strtod(optarg, &end);
            if (*end || o->factor <= 1.0)
                goto bad;
            break;
        case 'i':
            o->stepbytes = strtol(optarg, &end, 10);
            if (*end || o->stepbytes <= 0)
                goto bad;
            break;
        case 'n':
            o->iters = (int)strtol(optarg, &end, 10);
            if (*end || o->iters < 1 || o->iters > 1000000)
                goto bad;
            break;
        case 'w':
            o->warmup = (int)strtol(optarg, &end, 10);
            if (*end || o->warmup < 0 || o->warmup > 1000000)
                goto bad;
            break;
        case 'c':
            o->check = (int)strtol(optarg, &end, 10);
            if (*end || o->check < 0)
                goto bad;
            break;
        case 'd':
            if (strcmp(optarg, "float") != 0) {
                fprintf(stderr, "bench: only -d float is supported\n");
                return 2;
            }
            break;
        case 'o':
            if (strcmp(optarg, "sum") != 0) {
                fprintf(stderr, "bench: only -o sum is supported\n");
                return 2;
            }
            break;
        case OPT_BACKEND:
            o->backend = optarg;
            break;
        case OPT_JSON:
            o->json = optarg;
            break;
        case OPT_WORLD:
            o->world = (int)strtol(optarg, &end, 10);
            if (*end || o->world < 1 || o->world > RM_RDZV_MAX_WORLD)
                goto bad;
            break;
        case OPT_RANK:
            o->rank = (int)strtol(optarg, &end, 10);
            if (*end || o->rank < 0)
                goto bad;
            break;
        case OPT_PEERS:
            o->peers = optarg;
            break;
        case OPT_NODES:
            o->nodes = optarg;
            break;
        case OPT_TOKEN:
            o->token = optarg;
            break;
        case OPT_TIMEOUT:
            o->timeout_s = strtod(optarg, &end);
            if (*end || o->timeout_s <= 0)
                goto bad;
            break;
        case OPT_FUSION:
            o->fusion = 1;
            break;
        case OPT_LAYERS:
            o->layers = (int)strtol(optarg, &end, 10);
            if (*end || o->layers < 1 || o->layers > 100000)
                goto bad;
            break;
        case OPT_LFLOATS:
            o->layer_floats = (size_t)strtoull(optarg, &end, 10);
            if (*end || o->layer_floats < 1 || o->layer_floats > ((size_t)1 << 28))
                goto bad;
            break;
        case OPT_COMPUTE:
            o->compute_us = strtod(optarg, &end);
            if (*end || o->compute_us < 0 || o->compute_us > 1e6)
                goto bad;
            break;
        case OPT_THRESH:
            o->thresholds = optarg;
            break;
        case OPT_OP:
            if (strcmp(optarg, "allreduce") != 0 && strcmp(optarg, "reduce_scatter") != 0 &&
                strcmp(optarg, "all_gather") != 0) {
                fprintf(stderr, "bench: --op must be allreduce, reduce_scatter or all_gather (got \"%s\")\n",
                        optarg);
                return 2;
            }
            o->op = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (o->maxb < o->minb) {
        fprintf(stderr, "bench: -e must be >= -b\n");
        return 2;
    }
    if (o->maxb > (size_t)8 << 30) {
        fprintf(stderr, "bench: -e above 8G refused\n");
        return 2;
    }
    return 0;
bad:
    fprintf(stderr, "bench: bad value \"%s\" for -%c\n", optarg, ch < 256 ? ch : '-');
    usage(stderr);
    return 2;
}

static void fill(float *b, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++)
        b[i] = (float)((rank + 1) * (int)(i % 13 + 1));
}

static long count_wrong(const float *b, size_t count, int world)
{
    long wrong = 0;
    int tri = world * (world + 1) / 2;
    for (size_t i = 0; i < count; i++)
        if (b[i] != (float)(tri * (int)(i % 13 + 1)))
            wrong++;
    return wrong;
}

/* The same check for elements [off, off + len) of the full vector held in b[0..len). */
static long count_wrong_range(const float *b, size_t off, size_t len, int world)
{
    long wrong = 0;
    int tri = world * (world + 1) / 2;
    for (size_t k = 0; k < len; k++)
        if (b[k] != (float)(tri * (int)((off + k) % 13 + 1)))
            wrong++;
    return wrong;
}

/* The expected all-gather result's range [off, off + len) into b[0..len) (what each rank holds
 * of the reduced vector before gathering it). */
static void fill_result_range(float *b, size_t off, size_t len, int world)
{
    int tri = world * (world + 1) / 2;
    for (size_t k = 0; k < len; k++)
        b[k] = (float)(tri * (int)((off + k) % 13 + 1));
}

/* ---- world setup ---- */
typedef struct bench_world {
    const rm_comm_ops *ops;
    rm_comm *comm;
    int rank, size;
    rm_rdzv_peer *peers; /* owned (static mode) */
    rm_rdzv_round round; /* owned (rendezvous mode) */
    rm_rdzv_client *rdzv;
    int lfd;
} bench_world;

static int world_open(const bench_opts *o, bench_world *w, rm_err *err)
{
    int rc;
    memset(w, 0, sizeof *w);
    w->lfd = -1;
    const char *be = o->backend;
    if (!be)
        be = rm_comm_under_mpi() && !o->peers ? "mpi" : "ring";
    w->ops = rm_comm_backend(be);
    if (!w->ops)
        return rm_errf(err, RM_EUNSUPPORTED, "backend \"%s\" is not available in this build", be);
    const char *shm_env = getenv(RM_ENV_SHM);
    rm_comm_cfg cfg = {.listen_fd = -1,
                       .timeout_s = o->timeout_s,
                       .token = o->token,
                       .shm_ok = !(shm_env && !strcmp(shm_env, "0"))}; /* hier: shm inside a node */
    if (strcmp(be, "mpi") == 0) {
        RM_CHECK(w->ops->init(&cfg, &w->comm, err));
        return rm_comm_mpi_world(w->comm, &w->rank, &w->size);
    }
    if (o->world > 0 || o->peers) { /* static mode */
        int n = 0;
        if (o->world == 1 && !o->peers) {
            w->rank = 0;
            w->size = 1;
        } else {
            RM_CHECK(rm_comm_parse_peers(o->peers, &w->peers, &n, err));
            if (o->world && o->world != n)
                return rm_errf(err, RM_EINVAL, "--world %d but --peers lists %d", o->world, n);
            if (o->rank < 0 || o->rank >= n)
                return rm_errf(err, RM_EINVAL, "--rank must be in [0, %d)", n);
            w->rank = o->rank;
            w->size = n;
            if (o->nodes) { /* node of every rank, comma-separated, in rank order */
                const char *p = o->nodes;
                for (int q = 0; q < n; q++) {
                    size_t len = strcspn(p, ",");
                    if (len == 0 || len >= sizeof w->peers[q].node || !rm_rdzv_name_ok(p, len) ||
                        (q < n - 1 && p[len] != ',') || (q == n - 1 && p[len]))
                        return rm_errf(err, RM_EINVAL,
                                       "--nodes: give one node name per rank (%d, [A-Za-z0-9._-]), "
                                       "comma-separated",
                                       n);
                    memcpy(w->peers[q].node, p, len);
                    w->peers[q].node[len] = 0;
                    p += len + (p[len] == ',');
                }
            }
        }
        cfg.rank = w->rank;
        cfg.world_size = w->size;
        cfg.peers = w->peers;
        if (!cfg.token)
            cfg.token = getenv(RM_ENV_TOKEN);
        return w->ops->init(&cfg, &w->comm, err);
    }
    const char *url = getenv(RM_ENV_RENDEZVOUS), *job = getenv(RM_ENV_JOB),
               *tok = o->token ? o->token : getenv(RM_ENV_TOKEN), *wid = getenv(RM_ENV_WORKER_ID),
               *bind = getenv(RM_ENV_BIND_ADDR);
    if (!url || !job || !wid) {
        if (strcmp(be, "nccl") == 0 || strcmp(be, "local") == 0 || strcmp(be, "ring") == 0) {
            /* no world given: a world of one (the checks' expected sums scale with w->size) */
            w->rank = 0;
            w->size = 1;
            cfg.world_size = 1;
            return w->ops->init(&cfg, &w->comm, err);
        }
        return rm_errf(err, RM_EINVAL, "no world: use mpirun, --world/--rank/--peers or " RM_ENV_RENDEZVOUS);
    }
    char host[64] = "127.0.0.1", addr[96];
    int port = 0;
    if (bind && *bind) {
        if (strchr(bind, ':'))
            RM_CHECK(rm_comm_split_addr(bind, host, sizeof host, &port, err));
        else
            snprintf(host, sizeof host, "%s", bind);
    }
    RM_CHECK(rm_net_listen(host, port, 128, &w->lfd, &port, err));
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    w->rdzv = rm_rdzv_client_new(url, job, tok ? tok : "", wid, err);
    if (!w->rdzv)
        return err->code; /* the client said which argument it refused */
    double deadline = rm_mono() + 120;
    for (;;) {
        rc = rm_rdzv_join(w->rdzv, addr, -1, 15, &w->round, err);
        if (rc != RM_ETIMEDOUT && rc != RM_EAGAIN)
            break;
        if (rm_mono() > deadline)
            break;
    }
    if (rc)
        return rc;
    w->rank = w->round.rank;
    w->size = w->round.world_size;
    cfg.rank = w->rank;
    cfg.world_size = w->size;
    cfg.epoch = w->round.epoch;
    cfg.peers = w->round.peers;
    cfg.listen_fd = w->lfd;
    cfg.token = tok;
    cfg.rdzv = w->rdzv;
    /* a bench job measures the transport training would use: the trainer's rule (worker/train.c)
     * turns the ring into shm when every rank is on this host, and the table's header names it */
    if (w->ops == rm_comm_ring_ops() && rm_comm_shm_wanted(w->round.peers, w->size)) {
        w->ops = rm_comm_shm_ops();
        rm_info("bench: every rank on one host, measuring shared memory as training would use it "
                "(RINGMASTER_SHM=0 for the ring)");
    }
    return rm_comm_init_or_ring(&w->ops, &cfg, &w->comm, err);
}

static void world_close(bench_world *w)
{
    if (w->ops && w->comm)
        w->ops->destroy(w->comm);
    free(w->peers);
    rm_rdzv_round_free(&w->round);
    rm_rdzv_client_free(w->rdzv);
    if (w->lfd >= 0)
        close(w->lfd);
}

/* Average of a double over the ranks (through the comm itself, as float: microsecond times). */
static int avg_over(bench_world *w, double *v, rm_err *err)
{
    float x = (float)*v;
    RM_CHECK(w->ops->allreduce(w->comm, &x, 1, RM_DT_F32, RM_OP_AVG, err));
    *v = x;
    return RM_OK;
}

/* Buffers live on the GPU when the backend is nccl and the CUDA kernels table is there (as in
 * nccl-tests); host holds the fill/check copy. Elsewhere dev is NULL and send/recv are host memory. */
typedef struct bench_bufs {
    const rm_kernels *dev;
    float *send, *recv, *host;
} bench_bufs;

static void to_dev(const bench_bufs *b, float *dst, size_t count)
{
    if (b->dev)
        b->dev->h2d(dst, b->host, count * sizeof(float));
}

typedef enum { OP_ALLREDUCE = 0, OP_REDUCE_SCATTER, OP_ALL_GATHER } bench_op;

static bench_op op_of(const bench_opts *o)
{
    if (o->op && strcmp(o->op, "reduce_scatter") == 0)
        return OP_REDUCE_SCATTER;
    if (o->op && strcmp(o->op, "all_gather") == 0)
        return OP_ALL_GATHER;
    return OP_ALLREDUCE;
}

/* One collective as nccl-tests runs it: out of place send -> out; in place (out == send) the
 * shard lives inside the full buffer at its offset. reduce_scatter: send is the full vector, the
 * shard lands in out (or send + off); all_gather: the shard is send[0..len) (or send + off), the
 * full vector lands in out (or send). */
static int coll(bench_world *w, bench_op op, float *send, float *out, size_t count, rm_err *err)
{
    size_t off = rm_shard_off(count, w->size, w->rank);
    int inplace = send == out;
    switch (op) {
    case OP_REDUCE_SCATTER:
        return w->ops->reduce_scatter(w->comm, send, inplace ? send + off : out, count, RM_DT_F32, RM_OP_SUM,
                                      err);
    case OP_ALL_GATHER:
        return w->ops->all_gather(w->comm, inplace ? send + off : send, out, count, RM_DT_F32, err);
    case OP_ALLREDUCE:
        break;
    }
    return w->ops->allreduce_oop(w->comm, send, out, count, RM_DT_F32, RM_OP_SUM, err);
}

static int run_one(bench_world *w, const bench_opts *o, const bench_bufs *b, size_t count, int inplace,
                   double *t_us, long *wrong, rm_err *err)
{
    float *send = b->send, *out = inplace ? b->send : b->recv;
    const bench_op op = op_of(o);
    size_t off, len;
    rm_shard_range(count, w->size, w->rank, &off, &len);
    fill(b->dev ? b->host : send, count, w->rank);
    to_dev(b, send, count);
    for (int i = 0; i < o->warmup; i++)
        RM_CHECK(coll(w, op, send, out, count, err));
    RM_CHECK(w->ops->barrier(w->comm, err));
    double t0 = rm_mono();
    for (int i = 0; i < o->iters; i++)
        RM_CHECK(coll(w, op, send, out, count, err));
    double t = (rm_mono() - t0) / o->iters * 1e6;
    RM_CHECK(avg_over(w, &t, err));
    *t_us = t;
    *wrong = 0;
    if (o->check) {
        float *h = b->dev ? b->host : send;
        if (op == OP_ALL_GATHER) { /* every rank holds only its range of the result */
            for (size_t i = 0; i < count; i++)
                h[i] = -1.0f;
            fill_result_range(inplace ? h + off : h, off, len, w->size);
        } else {
            fill(h, count, w->rank);
        }
        to_dev(b, send, count);
        if (!inplace) {
            if (b->dev)
                b->dev->memset0(out, count * sizeof(float));
            else
                memset(out, 0xff, count * sizeof(float));
        }
        RM_CHECK(coll(w, op, send, out, count, err));
        /* reduce_scatter: only this rank's shard is defined */
        size_t n = op == OP_REDUCE_SCATTER ? len : count;
        const float *res = op == OP_REDUCE_SCATTER && inplace ? out + off : out;
        if (b->dev) {
            b->dev->d2h(b->host, res, n * sizeof(float));
            res = b->host;
        }
        double wr = (double)(op == OP_REDUCE_SCATTER ? count_wrong_range(res, off, len, w->size)
                                                     : count_wrong(res, count, w->size));
        float x = (float)wr;
        RM_CHECK(w->ops->allreduce(w->comm, &x, 1, RM_DT_F32, RM_OP_SUM, err));
        *wrong = (long)x;
    }
    return RM_OK;
}

static void write_json(const char *path, const char *op, const bench_world *w, const bench_row *rows,
                       int nrows, double avg_busbw)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        rm_warn("bench cannot write json path=%s", path);
        return;
    }
    fprintf(f,
            "{\"op\":\"%s\",\"backend\":\"%s\",\"world\":%d,\"type\":\"float\",\"redop\":\"sum\",\"rows\":[",
            op, w->ops->name, w->size);
    for (int i = 0; i < nrows; i++) {
        const bench_row *r = &rows[i];
        fprintf(f,
                "%s{\"size\":%zu,\"count\":%zu,\"oop\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,"
                "\"wrong\":%ld},\"ip\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%ld}}",
                i ? "," : "", r->size, r->count, r->t_us[0], r->algbw[0], r->busbw[0], r->wrong[0],
                r->t_us[1], r->algbw[1], r->busbw[1], r->wrong[1]);
    }
    fprintf(f, "],\"avg_busbw\":%.4f}\n", avg_busbw);
    fclose(f);
}

/* ---- --fusion: what tensor fusion buys on a model with many small layers ----
 * A step = simulated backward over the layers in reverse order (compute_us of busy work per
 * layer, then rm_fusion_ready) followed by rm_fusion_finish. Threshold 0 is one allreduce per
 * layer; a threshold >= the model size is one allreduce after backward (no overlap). */
static void busy_us(double us)
{
    if (us <= 0)
        return;
    double end = rm_mono() + us * 1e-6;
    while (rm_mono() < end) {
    }
}

static int fusion_bench(bench_world *w, const bench_opts *o)
{
    int nl = o->layers, rc = 0;
    size_t total = (size_t)nl * o->layer_floats;
    float *grads = NULL;
    size_t *off = calloc((size_t)nl, sizeof *off), *len = calloc((size_t)nl, sizeof *len);
    if (posix_memalign((void **)&grads, 64, total * sizeof(float)) || !off || !len) {
        fprintf(stderr, "bench: out of memory\n");
        free(off);
        free(len);
        free(grads);
        return 1;
    }
    for (int l = 0; l < nl; l++) {
        off[l] = (size_t)l * o->layer_floats;
        len[l] = o->layer_floats;
    }
    for (size_t i = 0; i < total; i++)
        grads[i] = (float)(w->rank + 1);
    if (w->rank == 0) {
        printf("# ringmaster-worker bench --fusion: backend %s, %d ranks, %d layers x %zu floats "
               "(%.2f MB), backward %.0f us/layer, %d iters\n",
               w->ops->name, w->size, nl, o->layer_floats, (double)total * 4 / 1e6, o->compute_us, o->iters);
        printf("#%14s%9s%12s%12s%12s%10s%8s\n", "threshold(B)", "buckets", "step(ms)", "comm(ms)",
               "exposed(ms)", "busbw", "#wrong");
        fflush(stdout);
    }
    const char *p = o->thresholds;
    while (p && *p) {
        char *end = NULL;
        size_t th = (size_t)strtoull(p, &end, 10);
        if (end == p)
            break;
        p = *end == ',' ? end + 1 : end;
        rm_fusion *f = NULL;
        rm_err err = {0};
        rc = rm_fusion_new(w->ops, w->comm, grads, off, len, nl, th, &f, &err);
        if (rc) {
            fprintf(stderr, "bench: fusion: %s\n", err.msg);
            break;
        }
        rm_fusion_set_world_size(f, w->size);
        double step = 0, comm = 0, exposed = 0, busbw = 0;
        for (int it = -o->warmup; it < o->iters && !rc; it++) {
            if (it == 0)
                rc = w->ops->barrier(w->comm, &err);
            rm_fusion_begin(f);
            for (int l = nl - 1; l >= 0; l--) {
                busy_us(o->compute_us);
                rm_fusion_ready(f, l);
            }
            if (!rc)
                rc = rm_fusion_finish(f, &err);
            else
                (void)rm_fusion_finish(f, NULL);
            if (it >= 0 && !rc) {
                rm_fusion_stats st;
                rm_fusion_get_stats(f, &st);
                step += st.step_s;
                comm += st.allreduce_s;
                exposed += st.wait_s;
                busbw += st.busbw_gbps;
            }
        }
        /* check: fresh data, one step, AVG of (rank+1) over n ranks = (n+1)/2 */
        long wrong = 0;
        if (!rc) {
            for (size_t i = 0; i < total; i++)
                grads[i] = (float)(w->rank + 1);
            rm_fusion_begin(f);
            for (int l = nl - 1; l >= 0; l--)
                rm_fusion_ready(f, l);
            rc = rm_fusion_finish(f, &err);
            float want = (float)(w->size + 1) / 2.0f;
            for (size_t i = 0; i < total && !rc; i++)
                if (fabsf(grads[i] - want) > 1e-5f * want)
                    wrong++;
        }
        int nb = rm_fusion_nbuckets(f);
        rm_fusion_free(f);
        if (rc) {
            fprintf(stderr, "bench: rank %d: fusion step failed: %s (%s)\n", w->rank, err.msg,
                    rm_strerror(rc));
            break;
        }
        double t = step / o->iters * 1e3;
        rc = avg_over(w, &t, &err);
        if (rc)
            break;
        if (w->rank == 0) {
            printf(" %14zu%9d%12.3f%12.3f%12.3f%10.3f%8ld\n", th, nb, t, comm / o->iters * 1e3,
                   exposed / o->iters * 1e3, busbw / o->iters, wrong);
            fflush(stdout);
        }
        if (wrong)
            rc = 1;
    }
    free(off);
    free(len);
    free(grads);
    return rc ? 1 : 0;
}

int rm_worker_bench_main(int argc, char **argv)
{
    bench_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc)
        return prc == 1 ? 0 : 2;
    rm_err err = {0};
    bench_world w;
    int rc = world_open(&o, &w, &err), status = 1;
    bench_bufs bb = {0};
    bench_row *rows = NULL;
    if (rc) {
        fprintf(stderr, "bench: %s (%s)\n", err.msg[0] ? err.msg : "setup failed", rm_strerror(rc));
        goto out;
    }
    if (o.fusion) {
        status = fusion_bench(&w, &o);
        goto out;
    }
    size_t maxcount = o.maxb / sizeof(float);
    if (maxcount == 0)
        maxcount = 1;
    if (strcmp(w.ops->name, "nccl") == 0) {
        bb.dev = rm_kernels_get("cuda");
        if (bb.dev && bb.dev->host_memory)
            bb.dev = NULL;
    }
    if (bb.dev) {
        bb.send = bb.dev->alloc(maxcount * sizeof(float));
        bb.recv = bb.dev->alloc(maxcount * sizeof(float));
        if (posix_memalign((void **)&bb.host, 64, maxcount * sizeof(float)))
            bb.host = NULL;
    } else if (posix_memalign((void **)&bb.send, 64, maxcount * sizeof(float)) ||
               posix_memalign((void **)&bb.recv, 64, maxcount * sizeof(float))) {
        bb.send = bb.recv = NULL;
    }
    if (!bb.send || !bb.recv || (bb.dev && !bb.host)) {
        fprintf(stderr, "bench: out of memory for %zu bytes%s\n", o.maxb, bb.dev ? " (device)" : "");
        goto out;
    }
    int maxrows = 4096, nrows = 0;
    rows = calloc((size_t)maxrows, sizeof *rows);
    if (!rows)
        goto out;
    const char *opname = o.op ? o.op : "allreduce";
    /* nccl-tests' bus bandwidth factors: allreduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n */
    const double busf = w.size > 1 ? (op_of(&o) == OP_ALLREDUCE ? 2.0 : 1.0) * (w.size - 1) / w.size : 0.0;
    if (w.rank == 0) {
        printf("# ringmaster-worker bench: %s, backend %s, %d ranks, %d iters, %d warmup, check %d\n", opname,
               w.ops->name, w.size, o.iters, o.warmup, o.check);
        printf("#\n#%62s%37s\n", "out-of-place", "in-place");
        printf("#%12s%14s%10s%8s%8s%11s%8s%8s%7s%11s%8s%8s%7s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("#%12s%14s%10s%8s%8s%11s%8s%8s%7s%11s%8s%8s%7s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }
    double bw_sum = 0;
    long wrong_total = 0;
    for (size_t size = o.minb; size <= o.maxb && nrows < maxrows;) {
        size_t count = size / sizeof(float);
        bench_row *r = &rows[nrows];
        r->size = count * sizeof(float);
        r->count = count;
        for (int ip = 0; ip < 2; ip++) {
            rc = run_one(&w, &o, &bb, count, ip, &r->t_us[ip], &r->wrong[ip], &err);
            if (rc) {
                fprintf(stderr, "bench: rank %d: %s of %zu bytes failed: %s (%s)\n", w.rank, opname, r->size,
                        err.msg, rm_strerror(rc));
                goto out;
            }
            r->algbw[ip] = r->t_us[ip] > 0 ? (double)r->size / (r->t_us[ip] * 1e-6) / 1e9 : 0;
            r->busbw[ip] = r->algbw[ip] * busf;
            wrong_total += r->wrong[ip];
            bw_sum += r->busbw[ip];
        }
        nrows++;
        if (w.rank == 0) {
            printf(" %12zu%14zu%10s%8s%8d%11.2f%8.2f%8.2f%7ld%11.2f%8.2f%8.2f%7ld\n", r->size, count, "float",
                   "sum", -1, r->t_us[0], r->algbw[0], r->busbw[0], r->wrong[0], r->t_us[1], r->algbw[1],
                   r->busbw[1], r->wrong[1]);
            fflush(stdout);
        }
        size_t next = o.stepbytes > 0 ? size + (size_t)o.stepbytes : (size_t)((double)size * o.factor);
        if (next <= size)
            next = size + sizeof(float);
        size = next;
    }
    double avg = nrows ? bw_sum / (2.0 * nrows) : 0;
    if (w.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f\n#\n", avg);
        fflush(stdout);
        if (o.json)
            write_json(o.json, opname, &w, rows, nrows, avg);
    }
    status = wrong_total ? 1 : 0;
out:
    free(rows);
    if (bb.dev) {
        bb.dev->free(bb.send);
        bb.dev->free(bb.recv);
    } else {
        free(bb.send);
        free(bb.recv);
    }
    free(bb.host);
    world_close(&w);
    return status;
}
