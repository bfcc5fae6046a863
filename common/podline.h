/* podline.h — the line protocol between kubesim's swarm runtime (tests/kubesim/swarm_rt.c) and the
 * worker swarm's kubelet mode (`ringmaster-worker swarm --kubelet`, worker/swarm/swarm_kubelet.c):
 * kubesim hands each started pod to one long-running swarm process instead of forking a process
 * per pod (docs/scale.md, "The swarm as a kubelet runtime").
 *
 * One line per message, words separated by one space, "\n" at the end, at most RM_PODLINE_MAX
 * bytes with the newline. KEY names one pod's container (kubesim writes "UID/CONTAINER").
 *   kubesim -> swarm (the swarm's stdin):
 *     start KEY url=http://A.B.C.D:PORT job=NS/NAME token=T id=N [ip=A.B.C.D] [steps=N]
 *         play worker N of the job: join, kv bootstrap, reports, re-joins; after `steps` steps
 *         (the job's training.maxSteps; absent = the swarm's --steps) a final "done" report, exit 0.
 *         ip: the pod's address, the worker's source address and the addr it joins with.
 *     stop KEY             the pod is deleted: the worker stops (exit 0, as after SIGTERM)
 *     kill KEY code=N      a fault: the worker dies at once (its connection closes), exit N
 *     hang KEY             a fault: the worker stops talking, its connection stays open
 *   swarm -> kubesim (the swarm's stdout):
 *     exit KEY code=N      the simulated worker ended with exit code N
 * Values are printable ASCII without spaces (the token, the job name and the url are all so when
 * the operator writes them); each has a cap, and a bad line is refused naming its field.
 *
 * Ownership: rm_podline holds its strings inline; rm_podline_in is a caller-owned fixed buffer;
 * rm_podline_out owns its queue (rm_podline_out_free). */
#ifndef RM_PODLINE_H
#define RM_PODLINE_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"

#define RM_PODLINE_MAX 1536 /* bytes of one line, the newline included */
#define RM_PODLINE_KEY_MAX 128
#define RM_PODLINE_URL_MAX 128
#define RM_PODLINE_JOB_MAX 320 /* "namespace/name": 63 + 1 + 253 */
#define RM_PODLINE_TOKEN_MAX 256
#define RM_PODLINE_IP_MAX 16
#define RM_PODLINE_STEPS_MAX 1000000000LL
#define RM_PODLINE_ID_MAX 1000000

typedef enum {
    RM_PODLINE_START = 1,
    RM_PODLINE_STOP,
    RM_PODLINE_KILL,
    RM_PODLINE_HANG,
    RM_PODLINE_EXIT
} rm_podline_verb;

typedef struct rm_podline {
    rm_podline_verb verb;
    char key[RM_PODLINE_KEY_MAX];
    /* start */
    char url[RM_PODLINE_URL_MAX];
    char job[RM_PODLINE_JOB_MAX];
    char token[RM_PODLINE_TOKEN_MAX];
    char ip[RM_PODLINE_IP_MAX]; /* "" = none */
    int id;                     /* the workerId (replica index) */
    long long steps;            /* 0 = the swarm's default */
    /* kill, exit */
    int code; /* 0..255 */
} rm_podline;

/* Parse one line (len bytes, without or with its trailing newline). RM_OK with *out filled, or
 * RM_EINVAL with err naming the field ("verb", "key", "url", "job", "token", "id", "ip", "steps",
 * "code", or the unknown field's name) and the line's key in out->key when it got that far (so a
 * bad start can still be answered for its pod). */
int rm_podline_parse(const char *line, size_t len, rm_podline *out, rm_err *err);
/* Render l into buf with its newline. Returns the length, or RM_EINVAL when a field would not
 * parse back (a value with a space or a control byte, over its cap) or RM_ETOOBIG when cap is too
 * small. buf is NUL-terminated on success. */
int rm_podline_format(const rm_podline *l, char *buf, size_t cap);

/* Lines from a byte stream (a pipe): feed what a read returned, take whole lines. */
typedef struct rm_podline_in {
    char b[4 * RM_PODLINE_MAX];
    size_t len;
    bool skipping; /* inside a line over RM_PODLINE_MAX: dropped up to its newline */
} rm_podline_in;

/* Room for the next read: *room bytes at the returned pointer (never 0 after rm_podline_take
 * returned 0). */
char *rm_podline_space(rm_podline_in *in, size_t *room);
/* n bytes were written at rm_podline_space's pointer. */
void rm_podline_fed(rm_podline_in *in, size_t n);
/* Take the next whole line into line[RM_PODLINE_MAX] (NUL-terminated, newline dropped): 1 = a
 * line, 0 = none yet, RM_ETOOBIG = a line over RM_PODLINE_MAX bytes was dropped (err says so;
 * call again for the lines after it). */
int rm_podline_take(rm_podline_in *in, char *line, rm_err *err);

/* Lines to a non-blocking fd (a pipe whose reader may be slow): queued, written when it takes them. */
#define RM_PODLINE_OUT_MAX (16u << 20) /* bytes waiting before the reader is taken to be stuck */
typedef struct rm_podline_out {
    char *b; /* b[off..len) waits */
    size_t len, off, cap;
} rm_podline_out;

/* Render l and queue it. RM_OK; RM_EINVAL (l does not render: rm_podline_format); RM_ETOOBIG
 * (RM_PODLINE_OUT_MAX bytes wait already: nothing queued); RM_ENOMEM. */
int rm_podline_queue(rm_podline_out *o, const rm_podline *l);
/* Write what waits to fd until it would block. RM_OK (all or part written: the rest waits);
 * RM_EIO with err when fd failed or was closed (what waited is dropped). */
int rm_podline_flush(rm_podline_out *o, int fd, rm_err *err);
/* Does anything wait? */
bool rm_podline_pending(const rm_podline_out *o);
void rm_podline_out_free(rm_podline_out *o); /* NULL ok; leaves it empty and reusable */
#endif
