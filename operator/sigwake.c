/* sigwake.c — see sigwake.h. Handlers touch only sig_atomic_t state and write(2). */
#include "operator/sigwake.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

volatile sig_atomic_t rm_sig_stop;
static volatile sig_atomic_t g_escalate;
static int g_wake_w = -1;

static void wake(char c)
{
    if (g_wake_w >= 0) {
        ssize_t n = write(g_wake_w, &c, 1);
        (void)n;
    }
}

static void on_stop(int sig)
{
    int saved = errno;
    rm_sig_stop = rm_sig_stop && g_escalate ? SIGKILL : sig;
    wake('s');
    errno = saved;
}

static void on_child(int sig)
{
    (void)sig;
    int saved = errno;
    wake('c');
    errno = saved;
}

int rm_sigwake_install(int *wake_r, bool escalate)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    *wake_r = p[0];
    g_wake_w = p[1];
    g_escalate = escalate;
    rm_sig_stop = 0;
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal: checkpoint and stop, as for SIGTERM */
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}
