/* sigwake.h — the front-end's signals as a self-pipe a poll loop can wait on.
 *
 * SIGINT, SIGTERM and SIGHUP store the signal in rm_sig_stop and write 's' to the pipe; SIGCHLD
 * writes 'c'; SIGPIPE is ignored. With `escalate`, a second stop signal stores SIGKILL instead
 * (a second Ctrl-C: no more grace). Process-wide: one pipe per process. rm_sigwake_install() may
 * be called again (a forked child wanting its own pipe): it clears rm_sig_stop and makes a new
 * pipe; the old ends are O_CLOEXEC and stay open (the parent owns them). The caller owns *wake_r
 * and reads it non-blocking; the write end lives until exit. */
#ifndef RM_SIGWAKE_H
#define RM_SIGWAKE_H
#include <signal.h>
#include <stdbool.h>

extern volatile sig_atomic_t rm_sig_stop;

/* 0, or -1 with errno set (pipe2 failed; no handler installed). */
int rm_sigwake_install(int *wake_r, bool escalate);
#endif
