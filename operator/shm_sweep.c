/* shm_sweep.c — see shm_sweep.h. */
#include "operator/shm_sweep.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "common/log.h"

static void unlink_names(rm_shm_sweep *s, int i)
{
    for (int k = 0; k < s->f[i].nnames; k++)
        if (shm_unlink(s->f[i].names[k]) == 0) {
            s->unlinked++;
            rm_info("removed a shared-memory segment left by a formation that died during setup "
                    "epoch=%d name=%s",
                    s->f[i].epoch, s->f[i].names[k]);
        }
}

static void drop(rm_shm_sweep *s, int i)
{
    memmove(&s->f[i], &s->f[i + 1], (size_t)(s->n - i - 1) * sizeof s->f[0]);
    s->n--;
}

/* The names a closed round's ranks may use: the flat formation's, and with ranks on several nodes
 * each node's group of 2+ ranks (comm_hier.c's intra-node shm, ranks renumbered in rank order). */
static void record(rm_shm_sweep *s, const char *token, const rm_rdzv_state *st)
{
    int w = st->world_size;
    if (w < 2 || w > (int)(sizeof st->members / sizeof st->members[0]))
        return; /* the snapshot lists the first 64 members only */
    const char *addr[sizeof st->members / sizeof st->members[0]] = {0};
    const char *node[sizeof st->members / sizeof st->members[0]] = {0};
    for (int i = 0; i < st->nmembers; i++) {
        int r = st->members[i].rank;
        if (r >= 0 && r < w) {
            addr[r] = st->members[i].addr;
            node[r] = st->members[i].node;
        }
    }
    for (int r = 0; r < w; r++)
        if (!addr[r])
            return;
    if (s->n == RM_SHM_SWEEP_FORMATIONS) {
        unlink_names(s, 0);
        drop(s, 0);
    }
    int i = s->n;
    memset(&s->f[i], 0, sizeof s->f[i]);
    s->f[i].epoch = st->epoch;
    if (rm_shm_segment_name(token, st->epoch, w, addr, s->f[i].names[0], NULL) != RM_OK)
        return;
    int nn = 1;
    bool done[sizeof st->members / sizeof st->members[0]] = {0};
    for (int r = 0; r < w && nn < RM_SHM_SWEEP_NAMES; r++) {
        if (done[r])
            continue;
        const char *grp[sizeof st->members / sizeof st->members[0]];
        int k = 0;
        for (int q = r; q < w; q++)
            if (!done[q] && strcmp(node[q], node[r]) == 0) {
                done[q] = true;
                grp[k++] = addr[q];
            }
        if (k >= 2 && k < w &&
            rm_shm_segment_name(token, st->epoch, k, grp, s->f[i].names[nn], NULL) == RM_OK)
            nn++;
    }
    s->f[i].nnames = nn;
    s->n++;
}

void rm_shm_sweep_note(rm_shm_sweep *s, const char *token, const rm_rdzv_state *st, double now)
{
    if (!s || !st)
        return;
    bool seen = false;
    for (int i = 0; i < s->n; i++)
        seen |= s->f[i].epoch == st->epoch;
    if (st->closed && !seen)
        record(s, token, st);
    for (int i = 0; i < s->n;) {
        if (s->f[i].epoch >= st->epoch) {
            i++;
            continue;
        }
        if (s->f[i].superseded_at == 0)
            s->f[i].superseded_at = now;
        unlink_names(s, i);
        if (now - s->f[i].superseded_at > RM_SHM_SWEEP_KEEP_S)
            drop(s, i);
        else
            i++;
    }
}

void rm_shm_sweep_all(rm_shm_sweep *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        unlink_names(s, i);
    s->n = 0;
}
