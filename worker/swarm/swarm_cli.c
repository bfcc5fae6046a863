/* swarm_cli.c — `ringmaster-worker swarm`: the worker swarm's command line (swarm.h), and
 * `--serve`, a rendezvous alone in its own process for the swarm to load (bench/scale/run.sh): at
 * a large N the swarm's sockets and the rendezvous' together exceed one process's open files. */
#include "worker/swarm/swarm.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/rdzv.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: ringmaster-worker swarm --url http://A.B.C.D:PORT --job NS/NAME --token T --count N [flags]\n"
        "       ringmaster-worker swarm --serve ADDR --job NS/NAME --token T --desired N [--min M] "
        "[--settle S]\n"
        "  N simulated workers in one process speak the rendezvous protocol (join, kv bootstrap,\n"
        "  progress reports, re-joins): docs/scale.md.\n"
        "  --id-base B      workerIds B..B+N-1 (default 0; several swarms share a job)\n"
        "  --step S         seconds per step (default 0.1)      --report S  report period (default 1)\n"
        "  --no-kv          skip the kv bootstrap after each round\n"
        "  --peers          joins ask for the whole peer list, as real workers do (default: the ring\n"
        "                   neighbours only, \"peers\": false; the list is ~80 bytes a worker per reply)\n"
        "  --hold           reports ask to be held (\"hold\": true): a new epoch is learnt when it opens\n"
        "  --kill K --hang K  K workers die / hang --fault-at S seconds after the first round trained\n"
        "  --detect S       the dead worker's neighbour notices S seconds later (default 0.1)\n"
        "  --slow K --slow-join S  K workers send their first join S seconds late\n"
        "  --rounds R       stop once R rounds formed and trained (default 1; 0 = run until --timeout)\n"
        "  --timeout S      give up after S seconds (default 60)\n"
        "  --serve ADDR     instead: serve a rendezvous on ADDR (\"127.0.0.1:0\") with one job, print\n"
        "                   \"rendezvous listening on HOST:PORT\", run until SIGTERM/SIGINT\n"
        "  --kubelet        instead: kubesim's swarm runtime (`swarm --kubelet --help`)\n"
        "  Prints one line: swarm count=N rounds=R round1_formed_s=... recovery_*_s=... cpu_s=...\n"
        "  Exit 0 when the rounds formed with no protocol error, 1 otherwise, 2 on bad usage.\n");
}

static bool num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

static bool inum(const char *s, int *out)
{
    double v;
    if (!num(s, &v) || v != (double)(int)v)
        return false;
    *out = (int)v;
    return true;
}

static int serve(const char *bind, const char *job, const char *token, int desired, int min, double settle)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    rm_rdzv *r = rm_rdzv_new();
    rm_http_server *srv = NULL;
    rm_err err = {0};
    int rc = r ? rm_rdzv_job_set(r, job, token, desired, min > 0 ? min : desired, settle) : RM_ENOMEM;
    if (rc != RM_OK) {
        fprintf(stderr, "ringmaster-worker swarm --serve: job %s desired %d min %d settle %g: %s\n", job,
                desired, min, settle, rm_strerror(rc));
        rm_rdzv_free(r);
        return 2;
    }
    if (rm_rdzv_serve_world(r, bind, desired, &srv, &err) != RM_OK) {
        fprintf(stderr, "ringmaster-worker swarm --serve: %s\n", err.msg);
        rm_rdzv_free(r);
        return 1;
    }
    char host[64];
    int port = 0;
    if (rm_http_parse_addr(bind, host, sizeof host, &port) != RM_OK)
        snprintf(host, sizeof host, "127.0.0.1");
    printf("rendezvous listening on %s:%d\n", host, rm_http_port(srv));
    fflush(stdout);
    while (!g_stop)
        rm_sleep(0.1);
    rm_rdzv_shutdown(r);
    rm_http_stop(srv);
    rm_rdzv_free(r);
    return 0;
}

int rm_swarm_main(int argc, char **argv)
{
    enum {
        O_URL = 256,
        O_JOB,
        O_TOKEN,
        O_COUNT,
        O_IDBASE,
        O_STEP,
        O_REPORT,
        O_NOKV,
        O_PEERS,
        O_HOLD,
        O_KILL,
        O_HANG,
        O_FAULTAT,
        O_DETECT,
        O_SLOW,
        O_SLOWJOIN,
        O_ROUNDS,
        O_TIMEOUT,
        O_SERVE,
        O_DESIRED,
        O_MIN,
        O_SETTLE,
        O_HELP
    };
    static const struct option opts[] = {{"url", required_argument, 0, O_URL},
                                         {"job", required_argument, 0, O_JOB},
                                         {"token", required_argument, 0, O_TOKEN},
                                         {"count", required_argument, 0, O_COUNT},
                                         {"id-base", required_argument, 0, O_IDBASE},
                                         {"step", required_argument, 0, O_STEP},
                                         {"report", required_argument, 0, O_REPORT},
                                         {"no-kv", no_argument, 0, O_NOKV},
                                         {"peers", no_argument, 0, O_PEERS},
                                         {"hold", no_argument, 0, O_HOLD},
                                         {"kill", required_argument, 0, O_KILL},
                                         {"hang", required_argument, 0, O_HANG},
                                         {"fault-at", required_argument, 0, O_FAULTAT},
                                         {"detect", required_argument, 0, O_DETECT},
                                         {"slow", required_argument, 0, O_SLOW},
                                         {"slow-join", required_argument, 0, O_SLOWJOIN},
                                         {"rounds", required_argument, 0, O_ROUNDS},
                                         {"timeout", required_argument, 0, O_TIMEOUT},
                                         {"serve", required_argument, 0, O_SERVE},
                                         {"desired", required_argument, 0, O_DESIRED},
                                         {"min", required_argument, 0, O_MIN},
                                         {"settle", required_argument, 0, O_SETTLE},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kubelet")) /* kubesim's runtime: a mode of its own (swarm_kubelet.c) */
            return rm_swarm_kubelet_main(argc, argv);
    rm_swarm_cfg c;
    rm_swarm_cfg_default(&c);
    c.rounds = 1;
    const char *serve_addr = NULL;
    int desired = 0, min = 0;
    double settle = 0;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        bool ok = true;
        const char *name = "";
        for (const struct option *p = opts; p->name; p++)
            if (p->val == o)
                name = p->name;
        switch (o) {
        case O_URL:
            c.url = optarg;
            break;
        case O_JOB:
            c.job = optarg;
            break;
        case O_TOKEN:
            c.token = optarg;
            break;
        case O_COUNT:
            ok = inum(optarg, &c.count);
            break;
        case O_IDBASE:
            ok = inum(optarg, &c.id_base);
            break;
        case O_STEP:
            ok = num(optarg, &c.step_s);
            break;
        case O_REPORT:
            ok = num(optarg, &c.report_s);
            break;
        case O_NOKV:
            c.kv = false;
            break;
        case O_PEERS:
            c.peers = true;
            break;
        case O_HOLD:
            c.hold = true;
            break;
        case O_KILL:
            ok = inum(optarg, &c.kill);
            break;
        case O_HANG:
            ok = inum(optarg, &c.hang);
            break;
        case O_FAULTAT:
            ok = num(optarg, &c.fault_at_s);
            break;
        case O_DETECT:
            ok = num(optarg, &c.detect_s);
            break;
        case O_SLOW:
            ok = inum(optarg, &c.slow);
            break;
        case O_SLOWJOIN:
            ok = num(optarg, &c.slow_join_s);
            break;
        case O_ROUNDS:
            ok = inum(optarg, &c.rounds);
            break;
        case O_TIMEOUT:
            ok = num(optarg, &c.timeout_s);
            break;
        case O_SERVE:
            serve_addr = optarg;
            break;
        case O_DESIRED:
            ok = inum(optarg, &desired);
            break;
        case O_MIN:
            ok = inum(optarg, &min);
            break;
        case O_SETTLE:
            ok = num(optarg, &settle);
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ringmaster-worker swarm: --%s: \"%s\" is not a number\n", name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringmaster-worker swarm: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (!c.job || !c.token) {
        fprintf(stderr, "ringmaster-worker swarm: --job and --token are required\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    if (serve_addr)
        return serve(serve_addr, c.job, c.token, desired, min, settle);
    c.cancel = &g_stop;
    rm_swarm_stats st;
    rm_err err = {0};
    int rc = rm_swarm_run(&c, &st, &err);
    if (rc == RM_EINVAL) {
        fprintf(stderr, "ringmaster-worker swarm: %s\n", err.msg);
        return 2;
    }
    printf("swarm count=%d kill=%d hang=%d slow=%d rounds=%d", c.count, c.kill, c.hang, c.slow, st.nrounds);
    for (int i = 0; i < st.nrounds; i++) {
        const rm_swarm_round *r = &st.rounds[i];
        printf(" round%d_epoch=%d round%d_world=%d round%d_formed_s=%.3f round%d_trained_s=%.3f", i + 1,
               r->epoch, i + 1, r->world, i + 1, r->formed_s, i + 1, r->trained_s);
    }
    if (st.fault_s > 0 && st.nrounds >= 2)
        printf(" recovery_formed_s=%.3f recovery_trained_s=%.3f", st.rounds[1].formed_s - st.fault_s,
               st.rounds[1].trained_s - st.fault_s);
    printf(" requests=%ld reconnects=%ld errors=%ld wall_s=%.2f cpu_s=%.2f\n", st.requests, st.reconnects,
           st.errors, st.wall_s, st.cpu_s);
    if (rc != RM_OK)
        fprintf(stderr, "ringmaster-worker swarm: %s\n", err.msg);
    return rc == RM_OK ? 0 : 1;
}
