/* main.c — bin/kubesim: a Kubernetes API double with a process kubelet, for tests.
 *
 *   kubesim --addr 127.0.0.1:0 --kubeconfig-out FILE [--image-map IMAGE=PROGRAM]...
 *           [--no-kubelet] [--data-dir DIR] [--log-level debug|info|warn|error]
 *           [--node NAME:RES=Q,...]... [--nodes N] [--runtime process|podman|swarm]
 *           [--swarm-program PATH]
 * (--nodes N: the nodes are network namespaces made by tests/kubesim/netns.sh, read from
 * KUBESIM_NETNS_NODES; see tests/kubesim/README.md)
 *
 * Prints "kubesim listening on http://127.0.0.1:PORT" on stdout once it serves, writes a
 * kubeconfig (server http://..., user {}), and on SIGTERM/SIGINT stops serving, kills every pod
 * process group and exits 0. Design: the main thread only handles signals and the admin
 * endpoint's restart requests (an HTTP handler cannot stop the server it runs in). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <ftw.h>
#include "common/log.h"
#include "tests/kubesim/kubesim.h"

void ks_snapshots_clear(ks_server *s);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kubesim [--addr 127.0.0.1:0] [--kubeconfig-out FILE] [--image-map IMAGE=PROGRAM]...\n"
            "               [--no-kubelet] [--runtime process|podman|swarm] [--swarm-program PATH]\n"
            "               [--data-dir DIR] [--log-level LEVEL]\n"
            "               [--node NAME:cpu=8,memory=16Gi,gpu=4,pods=110]... [--coscheduling-scheduler-name "
            "NAME]\n"
            "               [--nodes N]   (nodes as network namespaces: run under tests/kubesim/netns.sh)\n"
            "A Kubernetes API double (v1.32) with a process kubelet; see tests/kubesim/README.md.\n");
}

static int write_kubeconfig(const char *path, int port)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubesim\n  cluster:\n    server: "
            "http://127.0.0.1:%d\n"
            "contexts:\n- name: kubesim\n  context:\n    cluster: kubesim\n    user: kubesim\n    namespace: "
            "default\n"
            "current-context: kubesim\npreferences: {}\nusers:\n- name: kubesim\n  user: {}\n",
            port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int start_http(ks_server *s, const char *bind, rm_err *err)
{
    static rm_http_route routes[1];
    routes[0] = (rm_http_route){.method = NULL, .path = "/", .prefix = 1, .fn = ks_handle, .ud = s};
    rm_http_opts o = {.bind = bind, .max_body = 64u * 1024 * 1024, .conn_timeout_s = 600, .max_conns = 4000};
    return rm_http_start(&o, routes, 1, &s->http, err);
}

int main(int argc, char **argv)
{
    static ks_server srv;
    /* signals are taken by the main thread only; blocked first, so an early SIGTERM still exits cleanly; children get a clean mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    ks_opts o;
    memset(&o, 0, sizeof(o));
    snprintf(o.addr, sizeof(o.addr), "127.0.0.1:0");
    rm_log_level lvl = RM_LOG_INFO;
    int nodes_netns = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-kubelet")) {
            o.no_kubelet = true;
        } else if (!strcmp(a, "--runtime") && v) {
            if (strcmp(v, "process") && strcmp(v, "podman") && strcmp(v, "swarm")) {
                fprintf(stderr, "kubesim: --runtime wants process (default), podman or swarm, not %s\n", v);
                return 2;
            }
            o.podman = !strcmp(v, "podman");
            o.swarm = !strcmp(v, "swarm");
            i++;
        } else if (!strcmp(a, "--swarm-program") && v) {
            if (strlen(v) >= sizeof(o.swarm_program)) {
                fprintf(stderr, "kubesim: --swarm-program is longer than %zu bytes\n",
                        sizeof(o.swarm_program) - 1);
                return 2;
            }
            snprintf(o.swarm_program, sizeof(o.swarm_program), "%s", v);
            i++;
        } else if (!strcmp(a, "--node") && v) {
            char msg[256];
            if (o.nnodes >= KS_MAX_NODES || !ks_node_parse(v, &o.nodes[o.nnodes], msg, sizeof msg)) {
                fprintf(stderr, "kubesim: %s\n", o.nnodes >= KS_MAX_NODES ? "at most 16 --node" : msg);
                return 2;
            }
            o.nnodes++;
            i++;
        } else if (!strcmp(a, "--nodes") && v) {
            char *end = NULL;
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > KS_MAX_NODES) {
                fprintf(stderr, "kubesim: --nodes wants a count from 1 to %d, not %s\n", KS_MAX_NODES, v);
                return 2;
            }
            nodes_netns = (int)n;
            i++;
        } else if (!strcmp(a, "--coscheduling-scheduler-name") && v) {
            snprintf(o.cosched_scheduler, sizeof(o.cosched_scheduler), "%s", v);
            i++;
        } else if (!strcmp(a, "--addr") && v) {
            snprintf(o.addr, sizeof(o.addr), "%s", v);
            i++;
        } else if (!strcmp(a, "--kubeconfig-out") && v) {
            snprintf(o.kubeconfig_out, sizeof(o.kubeconfig_out), "%s", v);
            i++;
        } else if (!strcmp(a, "--data-dir") && v) {
            snprintf(o.data_dir, sizeof(o.data_dir), "%s", v);
            i++;
        } else if (!strcmp(a, "--log-level") && v) {
            if (rm_log_parse_level(v, &lvl) < 0) {
                fprintf(stderr, "kubesim: bad --log-level %s\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--image-map") && v) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1] || o.nimage_map >= 32) {
                fprintf(stderr, "kubesim: --image-map wants IMAGE=PROGRAM (at most 32)\n");
                return 2;
            }
            snprintf(o.image_map[o.nimage_map][0], sizeof(o.image_map[0][0]), "%.*s", (int)(eq - v), v);
            const char *prog = eq + 1;
            if (strchr(prog, '/') && prog[0] != '/') {
                char cwd[PATH_MAX];
                if (!getcwd(cwd, sizeof(cwd)))
                    cwd[0] = 0;
                snprintf(o.image_map[o.nimage_map][1], sizeof(o.image_map[0][1]), "%.120s/%.120s", cwd, prog);
            } else {
                snprintf(o.image_map[o.nimage_map][1], sizeof(o.image_map[0][1]), "%s", prog);
            }
            o.nimage_map++;
            i++;
        } else {
            fprintf(stderr, "kubesim: unknown or incomplete argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (nodes_netns) {
        char msg[512];
        if (o.podman || o.swarm) {
            fprintf(stderr, "kubesim: --nodes runs pods with --runtime process only (podman's own networking "
                            "and the swarm's one process are not joined to the node namespaces)\n");
            return 2;
        }
        if (!ks_nodes_netns(&o, nodes_netns, getenv("KUBESIM_NETNS_NODES"), true, msg, sizeof msg)) {
            fprintf(stderr, "kubesim: %s\n", msg);
            return 2;
        }
        /* netns.sh's fabric: node-not-ready?node= takes that node's bridge port down */
        const char *fab = getenv("KUBESIM_NETNS_FABRIC");
        if (fab && *fab && strlen(fab) < sizeof o.fabric_netns &&
            strspn(fab, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == strlen(fab))
            snprintf(o.fabric_netns, sizeof o.fabric_netns, "%s", fab);
    }
    rm_log_init(lvl, RM_LOG_TEXT, "kubesim");
    for (int i = 0; i < o.nodes_netns; i++)
        rm_info("kubesim node=%s netns=%s addr=%s", o.nodes[i].name, o.nodes[i].netns, o.nodes[i].addr);
    bool temp_dir = false;
    if (!o.data_dir[0]) {
        const char *td = getenv("TMPDIR");
        snprintf(o.data_dir, sizeof(o.data_dir), "%s/kubesim.XXXXXX", td && *td ? td : "/tmp");
        if (!mkdtemp(o.data_dir)) {
            fprintf(stderr, "kubesim: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        temp_dir = true;
    } else {
        mkdir(o.data_dir, 0755);
    }

    if (ks_server_init(&srv, &o) < 0) {
        fprintf(stderr, "kubesim: out of memory\n");
        return 1;
    }
    rm_err err = {0};
    if (start_http(&srv, o.addr, &err) < 0) {
        fprintf(stderr, "kubesim: %s\n", err.msg);
        return 1;
    }
    atomic_store(&srv.port, rm_http_port(srv.http));
    int port = atomic_load(&srv.port);
    char bind[64];
    snprintf(bind, sizeof(bind), "127.0.0.1:%d", port);
    if (o.kubeconfig_out[0] && write_kubeconfig(o.kubeconfig_out, port) < 0) {
        fprintf(stderr, "kubesim: cannot write kubeconfig %s: %s\n", o.kubeconfig_out, strerror(errno));
        rm_http_stop(srv.http);
        return 1;
    }
    if (!o.no_kubelet && ks_kubelet_start(&srv) < 0) {
        fprintf(stderr, "kubesim: cannot start the kubelet\n");
        return 1;
    }
    ks_gc_start(&srv);
    printf("kubesim listening on http://127.0.0.1:%d\n", port);
    fflush(stdout);
    rm_info("kubesim serving addr=http://127.0.0.1:%d kubelet=%s data_dir=%s", port,
            o.no_kubelet ? "off" : "on", o.data_dir);
    for (;;) {
        struct timespec ts = {0, 200 * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
            break;
        pthread_mutex_lock(&srv.ctlmu);
        int restart = srv.ctl_restart;
        srv.ctl_restart = 0;
        pthread_mutex_unlock(&srv.ctlmu);
        if (!restart)
            continue;
        rm_info("kubesim restarting fresh=%d", restart == 2);
        atomic_fetch_add(&srv.faults.watch_gen, 1);
        rm_http_stop(srv.http);
        srv.http = NULL;
        if (restart == 2) {
            ks_store_reset(&srv);
            ks_snapshots_clear(&srv);
        }
        for (int tries = 0; tries < 50; tries++) {
            memset(&err, 0, sizeof(err));
            if (start_http(&srv, bind, &err) == 0)
                break;
            struct timespec d = {0, 100 * 1000000L};
            nanosleep(&d, NULL);
        }
        if (!srv.http) {
            fprintf(stderr, "kubesim: restart failed: %s\n", err.msg);
            break;
        }
    }
    rm_info("kubesim shutting down");
    atomic_store(&srv.stopping, true);
    rm_http_stop(srv.http);
    ks_kubelet_stop(&srv);
    ks_gc_stop(&srv);
    ks_snapshots_clear(&srv);
    ks_server_fini(&srv);
    if (temp_dir)
        nftw(o.data_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
