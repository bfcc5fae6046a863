/* comm_shm.c — the "shm" backend: collectives through one POSIX shared-memory segment for ranks on
 * the same host (docs/strategies.md#topology). Selected by name ("shm"), and by the trainer instead of the TCP
 * ring when every rank of the round advertised the same host (worker/train.c; RINGMASTER_SHM=0
 * turns that off).
 *
 * Segment: one per job and rendezvous formation, created by rank 0 with shm_open(O_CREAT|O_EXCL,
 * 0600) + ftruncate + mmap, attached by the others, and shm_unlink'ed by rank 0 the moment every
 * rank has attached and proved the token — before the first collective. Any rank whose init fails
 * (timeout, bad proof, a peer that left) unlinks the name too, so a kill -9 of any rank at any time
 * leaves nothing in /dev/shm as long as one rank of the formation lives to its timeout; after a
 * normal start the name is already gone and the kernel frees the memory with the last mapping.
 * The segment is allocated with posix_fallocate, not only ftruncate'd: tmpfs allocates pages on
 * first touch, so a /dev/shm too small for it would be a SIGBUS in the first collective. When the
 * body does not fit, rank 0 still publishes the (allocated) header page with nospace set; every
 * attacher reads it and gives up with RM_ENOSPC naming /dev/shm, so all ranks of the formation
 * fail init the same way at once and the trainer falls back to the TCP ring together
 * (worker/train.c, comm_hier.c).
 *
 * Token (why this design): the segment's name is "/rm-" + hex(HMAC-SHA256(token, "ringmaster-shm-v1"
 * | epoch | world | every rank's advertised address)), so a rank without the token (or from another
 * formation) cannot compute the name and never finds the segment. Knowing the name is not enough:
 * rank 0 writes HMAC(token, "hdr" | name | nonce) into the header, which attachers check (a
 * stranger cannot pre-create a fake segment), and every attacher writes HMAC(token, "rank" | r |
 * name | nonce) into its slot, which rank 0 checks before it declares the segment ready (a
 * stranger that found the name in /dev/shm cannot take a rank's place: RM_EAUTH). Mode 0600 keeps
 * other users out entirely. This needs no extra TCP exchange (the token never crosses any wire)
 * and no state beyond the rendezvous round. What it cannot do: stop a process of the same user
 * that already mapped the segment from scribbling on it (that process could ptrace the workers
 * too) — the token gates membership, the uid gates memory.
 *
 * Algorithm (reduce-scatter + all-gather through shared memory, single reader per element): the
 * buffer is split by the shard layout of worker/allreduce/shard.h; each shard is walked in pieces of P
 * elements, one piece of every shard per round. In a round every rank (1) copies the pieces of the
 * OTHER ranks' shards into its staging area in[b][rank] (its own piece it never stages), (2) reduces
 * its own shard's piece in one fused pass reading its own input in place and every peer's staged
 * copy, in rank order 0..n-1 (so each element is summed in one fixed order: bit-identical on every
 * rank, since only the owner computes it), writing the result straight into its output and into
 * out[b] for the peers, (3) copies the other shards' reduced pieces out of out[b] (an allreduce does
 * this for round g after round g + 1's staging barrier, which already proves every rank reduced
 * round g: one barrier per round instead of two). SHM_SETS buffer
 * sets b = round % SHM_SETS pipeline the rounds: a rank stages and reduces later rounds while slower
 * ranks still gather earlier ones. Per byte of buffer and rank that is 2(n-1)/n + 1 reads and
 * 2(n-1)/n + 2/n writes (2 + 2 for n = 2), and with P sized so a round's pieces stay in L2 (default
 * 256 KiB of staging per rank), the shared-memory side of it can stay in cache (not yet measured idle).
 * reduce_scatter is phases 1-2 (written into the caller's shard), all_gather is phase 3 with
 * every rank's shard staged into out[b]; both bit-identical to the allreduce's values.
 *
 * Signalling: per-rank monotonic counters (staged, reduced, gathered = the last round done) in
 * their own cache lines, one futex "bell" word bumped after every counter store and woken only
 * when someone sleeps on it. Every wait busy-waits up to 20 us (a peer a round behind catches up in
 * that time; cut to ~64 pauses when the ranks outnumber the CPUs this rank may run on, where spinning
 * only delays a peer sharing the CPU), yields 32 times, then loops on futex waits of at most 50 ms
 * and re-checks: the peer counters, the segment's failed word (set by any rank whose collective
 * fails, aborts or that destroys mid-collective), the peers' left words (a clean destroy), the
 * peers' pids (kill(pid, 0) == ESRCH, when all ranks share a pid namespace: a dead peer is noticed
 * in ~50 ms) and the deadline cfg.timeout_s (a hung peer, or one in another pid namespace).
 * A call descriptor (kind, count) staged with every round makes mismatched calls RM_EPROTO.
 *
 * Ownership: init() returns an owned rm_comm (mapping + fd); destroy() unmaps. cfg is borrowed
 * during init only. Threads: as comm.h (abort() from any thread). f32 only (RM_EUNSUPPORTED else).
 * Test knob: RINGMASTER_SHM_STAGE_BYTES (rank 0 only, 4 KiB .. 64 MiB; default 256 KiB) is the
 * staging area per rank per buffer set; the header carries the piece size to every rank. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/shm_name.h"
#include "worker/comm/comm.h"
#include "worker/comm/net.h"
#include "worker/allreduce/shard.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory counters need lock-free atomics");

#define SHM_MAGIC 0x524d5348u /* "RMSH" */
#define SHM_VERSION 3u
#define SHM_STAGE_DEFAULT (256u << 10)
#define SHM_SETS 4 /* buffer sets: a rank may run up to SHM_SETS - 1 rounds ahead of the slowest */
#define SHM_SLICE_S 0.05
#define SHM_YIELDS 32    /* sched_yield rounds between spinning and the futex */
#define SHM_SPIN_S 20e-6 /* busy-wait this long before yielding (when every rank can have a CPU) */

typedef struct shm_hdr {
    _Atomic uint32_t magic; /* written last by rank 0: the rest of the header is valid */
    uint32_t version, world, epoch;
    uint64_t piece, size; /* elements per shard piece; segment bytes */
    uint8_t nonce[16];
    uint8_t mac[32]; /* HMAC(token, "hdr" | name | nonce) */
    char pidns[48];  /* rank 0's /proc/self/ns/pid link ("" = unknown) */
    /* rank 0 could not allocate the segment's body (an errno, ENOSPC: /dev/shm too small): the
     * header page alone is allocated, attachers read this, count themselves in declined and give up
     * with RM_ENOSPC, so every rank falls back together (docs/strategies.md#topology) */
    int32_t nospace;
    _Atomic uint32_t declined;
    alignas(64) _Atomic uint32_t ready; /* rank 0: every proof checked, name unlinked */
    _Atomic uint32_t failed;            /* 1 = some rank broke the comm; failed_rank says which */
    _Atomic int32_t failed_rank;
    alignas(64) _Atomic uint32_t bell; /* futex word: bumped after every counter store */
    _Atomic uint32_t sleepers;
} shm_hdr;

typedef struct shm_slot {
    _Atomic uint32_t attached; /* set after proof is written */
    _Atomic uint32_t left;     /* clean destroy */
    int32_t pid;
    char pidns[48];
    uint8_t proof[32]; /* HMAC(token, "rank" | r | name | nonce) */
    alignas(64) _Atomic uint64_t staged;
    alignas(64) _Atomic uint64_t reduced;
    alignas(64) _Atomic uint64_t gathered;
    alignas(64) _Atomic uint64_t desc[SHM_SETS]; /* (kind << 56) | count of the round using set b */
} shm_slot;

#define HDR_BYTES ((sizeof(shm_hdr) + 255) & ~(size_t)255)

struct rm_comm {
    int rank, n;
    double timeout_s;
    int fd;
    size_t size;
    unsigned char *base;
    shm_hdr *h;
    shm_slot *slots;
    float *in[SHM_SETS];  /* in[b] + (q * n + s) * P = rank q's staged piece of shard s (s != q) */
    float *out[SHM_SETS]; /* out[b] + s * P = shard s's reduced piece */
    size_t P;
    uint64_t seq; /* rounds done on this comm (same on every rank) */
    int same_pidns;
    double spin_s; /* busy-wait before yielding: SHM_SPIN_S, 0 when ranks outnumber this rank's CPUs */
    atomic_int aborted;
    int broken;
    int foreign; /* attach refused the segment (not ours): leave it untouched */
    char name[RM_COMM_SHM_NAME_MAX];
};

enum { K_AR = 1, K_RS = 2, K_AG = 3, K_BAR = 4 };

/* ---------------------------------------------------------------------------------------------- */
/* naming, token proofs                                                                           */

static const char *tok(const char *t)
{
    return t ? t : "";
}

const char *rm_comm_shm_test_name;

int rm_comm_shm_segment_name(const rm_comm_cfg *cfg, char name[RM_COMM_SHM_NAME_MAX], rm_err *err)
{
    if (!cfg || !cfg->peers || cfg->world_size < 1 || cfg->world_size > RM_COMM_SHM_MAX_RANKS)
        return rm_errf(err, RM_EINVAL, "shm: no peer list of 1..%d ranks", RM_COMM_SHM_MAX_RANKS);
    const char *addrs[RM_COMM_SHM_MAX_RANKS];
    for (int q = 0; q < cfg->world_size; q++)
        addrs[q] = cfg->peers[q].addr;
    return rm_shm_segment_name(cfg->token, cfg->epoch, cfg->world_size, addrs, name, err);
}

static void shm_mac(const char *token, const char *label, int rank, const char *name, const uint8_t nonce[16],
                    uint8_t out[32])
{
    char msg[160];
    int m = snprintf(msg, sizeof msg, "%s|%d|%s|", label, rank, name);
    memcpy(msg + m, nonce, 16);
    const char *t = tok(token);
    rm_hmac_sha256(t, strlen(t), msg, (size_t)m + 16, out);
}

static void read_pidns(char *out, size_t cap)
{
    ssize_t k = readlink("/proc/self/ns/pid", out, cap - 1);
    out[k > 0 ? k : 0] = 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* signalling                                                                                     */

static void ring_bell(rm_comm *c)
{
    atomic_fetch_add(&c->h->bell, 1);
    if (atomic_load(&c->h->sleepers) > 0)
        syscall(SYS_futex, (uint32_t *)&c->h->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void mark_failed(rm_comm *c)
{
    if (!c->h)
        return;
    int32_t none = -1;
    atomic_compare_exchange_strong(&c->h->failed_rank, &none, c->rank);
    atomic_store(&c->h->failed, 1);
    ring_bell(c);
}

typedef enum { W_STAGED, W_REDUCED, W_GATHERED, W_ATTACHED } wait_what;

static uint64_t slot_val(shm_slot *s, wait_what w)
{
    switch (w) {
    case W_STAGED:
        return atomic_load_explicit(&s->staged, memory_order_acquire);
    case W_REDUCED:
        return atomic_load_explicit(&s->reduced, memory_order_acquire);
    case W_GATHERED:
        return atomic_load_explicit(&s->gathered, memory_order_acquire);
    case W_ATTACHED:
        return atomic_load_explicit(&s->attached, memory_order_acquire);
    }
    return 0;
}

static const char *what_name(wait_what w)
{
    switch (w) {
    case W_STAGED:
        return "stage";
    case W_REDUCED:
        return "reduce";
    case W_GATHERED:
        return "gather";
    case W_ATTACHED:
        return "attach";
    }
    return "?";
}

/* First rank whose counter is below g, or -1 when all reached it. */
static int lagging(rm_comm *c, wait_what w, uint64_t g)
{
    for (int q = 0; q < c->n; q++)
        if (slot_val(&c->slots[q], w) < g)
            return q;
    return -1;
}

/* Wait until every rank's counter w reaches g (for W_ATTACHED: g = 1), bounded by the deadline;
 * notices abort, a failed segment, a peer that left or whose process is gone. */
static int shm_wait(rm_comm *c, wait_what w, uint64_t g, double deadline, rm_err *err)
{
    double next_pid_check = 0, spin_end = 0;
    int spin_phase = 1;
    for (int spin = 0;; spin++) {
        int q = lagging(c, w, g);
        if (q < 0)
            return RM_OK;
        if (atomic_load(&c->aborted))
            return rm_errf(err, RM_ECLOSED, "shm: aborted");
        if (atomic_load(&c->h->failed)) {
            int fr = atomic_load(&c->h->failed_rank);
            return rm_errf(err, RM_ECLOSED, "shm: rank %d failed or aborted its collective", fr);
        }
        if (spin_phase) { /* busy-wait up to SHM_SPIN_S: a peer a round behind catches up in µs */
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if ((spin & 31) == 31) {
                double t = rm_mono();
                if (spin_end == 0)
                    spin_end = t + c->spin_s;
                else if (t >= spin_end)
                    spin_phase = 0, spin = 0;
            }
            continue;
        }
        if (spin < SHM_YIELDS) { /* let a peer on this core run before sleeping */
            sched_yield();
            continue;
        }
        if (atomic_load(&c->slots[q].left))
            return rm_errf(err, RM_ECLOSED, "shm: rank %d left the comm", q);
        double now = rm_mono();
        if (w != W_ATTACHED && c->same_pidns && now >= next_pid_check) {
            next_pid_check = now + SHM_SLICE_S;
            for (int p = 0; p < c->n; p++) {
                pid_t pid = (pid_t)c->slots[p].pid;
                if (p != c->rank && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
                    return rm_errf(err, RM_ECLOSED, "shm: rank %d (pid %d) exited", p, (int)pid);
            }
        }
        if (now >= deadline)
            return rm_errf(err, RM_ETIMEDOUT, "shm: rank %d did not %s (round %llu) within %.1f s", q,
                           what_name(w), (unsigned long long)g, c->timeout_s);
        uint32_t v = atomic_load(&c->h->bell);
        atomic_fetch_add(&c->h->sleepers, 1);
        if (lagging(c, w, g) >= 0 && !atomic_load(&c->h->failed) && !atomic_load(&c->aborted)) {
            double left = deadline - now;
            if (left > SHM_SLICE_S)
                left = SHM_SLICE_S;
            struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            syscall(SYS_futex, (uint32_t *)&c->h->bell, FUTEX_WAIT, v, &ts, NULL, 0);
        }
        atomic_fetch_sub(&c->h->sleepers, 1);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* init / destroy                                                                                 */

static int shm_map(rm_comm *c, size_t size, rm_err *err)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (p == MAP_FAILED)
        return rm_errf(err, RM_EIO, "shm: mmap %s (%zu bytes): %s", c->name, size, strerror(errno));
    c->base = p;
    c->size = size;
    c->h = (shm_hdr *)p;
    return RM_OK;
}

static size_t seg_bytes(int n, size_t P)
{
    size_t per_set = ((size_t)n * (size_t)n * P + (size_t)n * P) * sizeof(float);
    return HDR_BYTES + (size_t)n * sizeof(shm_slot) + SHM_SETS * per_set;
}

static void shm_layout(rm_comm *c)
{
    unsigned char *p = c->base + HDR_BYTES;
    c->slots = (shm_slot *)p;
    p += (size_t)c->n * sizeof(shm_slot);
    size_t nP = (size_t)c->n * c->P;
    for (int b = 0; b < SHM_SETS; b++) {
        c->in[b] = (float *)p;
        p += (size_t)c->n * nP * sizeof(float);
        c->out[b] = (float *)p;
        p += nP * sizeof(float);
    }
}

static size_t stage_bytes(void)
{
    const char *s = getenv("RINGMASTER_SHM_STAGE_BYTES");
    if (!s || !*s)
        return SHM_STAGE_DEFAULT;
    char *e = NULL;
    unsigned long long v = strtoull(s, &e, 10);
    if (*e || v < 4096 || v > (64ull << 20))
        return SHM_STAGE_DEFAULT;
    return (size_t)v;
}

/* Rank 0 after its body allocation failed: the header says so; wait (to the deadline) until every
 * attacher has read it, so none is left waiting for a segment that is gone. The caller unlinks. */
static void wait_declined(rm_comm *c, double deadline)
{
    while (atomic_load(&c->h->declined) < (uint32_t)(c->n - 1) && !atomic_load(&c->aborted) &&
           rm_mono() < deadline)
        usleep(1000);
}

static int create_segment(rm_comm *c, const rm_comm_cfg *cfg, double deadline, rm_err *err)
{
    size_t P = stage_bytes() / sizeof(float) / (size_t)c->n;
    P &= ~(size_t)15; /* pieces start on cache lines */
    if (P < 16)
        P = 16;
    c->P = P;
    size_t size = seg_bytes(c->n, P);
    shm_unlink(c->name); /* a stale one from a formation whose ranks all died during init */
    c->fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (c->fd < 0)
        return rm_errf(err, errno == ENOSPC ? RM_ENOSPC : RM_EIO, "shm: create %s in /dev/shm: %s", c->name,
                       strerror(errno));
    /* ftruncate only sets the length (tmpfs allocates on first touch, where a full /dev/shm is a
     * SIGBUS): allocate for real with posix_fallocate, the header page first, so that when the
     * body does not fit the header can still tell the attachers */
    if (ftruncate(c->fd, (off_t)size) != 0)
        return rm_errf(err, errno == ENOSPC ? RM_ENOSPC : RM_EIO, "shm: size %s to %zu bytes in /dev/shm: %s",
                       c->name, size, strerror(errno));
    int e = posix_fallocate(c->fd, 0, (off_t)HDR_BYTES);
    if (e)
        return rm_errf(err, e == ENOSPC ? RM_ENOSPC : RM_EIO,
                       "shm: /dev/shm cannot hold even the %zu-byte header: %s (size /dev/shm: README "
                       "\"Shared memory between ranks on one host\")",
                       (size_t)HDR_BYTES, strerror(e));
    int rc = shm_map(c, size, err);
    if (rc)
        return rc;
    shm_hdr *h = c->h;
    e = posix_fallocate(c->fd, 0, (off_t)size);
    if (e) {
        rc = rm_errf(err, e == ENOSPC ? RM_ENOSPC : RM_EIO,
                     "shm: /dev/shm cannot hold the %zu-byte segment for %d ranks: %s (size /dev/shm: README "
                     "\"Shared memory between ranks on one host\")",
                     size, c->n, strerror(e));
        h->nospace = e;
    }
    h->version = SHM_VERSION;
    h->world = (uint32_t)c->n;
    h->epoch = (uint32_t)cfg->epoch;
    h->piece = P;
    h->size = size;
    rm_net_random(h->nonce, sizeof h->nonce);
    shm_mac(cfg->token, "hdr", 0, c->name, h->nonce, h->mac);
    read_pidns(h->pidns, sizeof h->pidns);
    atomic_store(&h->failed_rank, -1);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
    if (rc)
        wait_declined(c, deadline);
    return rc;
}

static int attach_segment(rm_comm *c, const rm_comm_cfg *cfg, double deadline, rm_err *err)
{
    for (;;) {
        if (atomic_load(&c->aborted))
            return rm_errf(err, RM_ECLOSED, "shm: aborted");
        if (c->fd < 0)
            c->fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0600);
        if (c->fd >= 0) {
            struct stat st;
            if (fstat(c->fd, &st) == 0 && (size_t)st.st_size >= HDR_BYTES) {
                if (!c->base) {
                    int rc = shm_map(c, HDR_BYTES, err);
                    if (rc)
                        return rc;
                }
                if (atomic_load_explicit(&c->h->magic, memory_order_acquire) == SHM_MAGIC &&
                    (size_t)st.st_size >= c->h->size)
                    break;
            }
        } else if (errno != ENOENT) {
            return rm_errf(err, RM_EIO, "shm: open %s: %s", c->name, strerror(errno));
        }
        if (rm_mono() >= deadline)
            return rm_errf(err, RM_ETIMEDOUT,
                           "shm: rank 0's segment did not appear within %.1f s (rank 0 gone, another "
                           "host or IPC namespace, a different job token, or a full /dev/shm)",
                           c->timeout_s);
        usleep(2000);
    }
    shm_hdr *h = c->h;
    uint8_t mac[32];
    shm_mac(cfg->token, "hdr", 0, c->name, h->nonce, mac);
    c->foreign = 1;
    if (!rm_net_ct_equal(mac, h->mac, 32))
        return rm_errf(err, RM_EAUTH, "shm: segment %s was not made with this job's token", c->name);
    if (h->version != SHM_VERSION || h->world != (uint32_t)c->n || h->epoch != (uint32_t)cfg->epoch ||
        h->piece < 16 || h->size != seg_bytes(c->n, (size_t)h->piece))
        return rm_errf(err, RM_EPROTO, "shm: segment %s header does not match this formation", c->name);
    c->foreign = 0;
    if (h->nospace) { /* only the header page exists: touch nothing else (SIGBUS) */
        atomic_fetch_add(&h->declined, 1);
        return rm_errf(err, RM_ENOSPC,
                       "shm: rank 0 could not allocate the %llu-byte segment in /dev/shm: %s (size /dev/shm: "
                       "README \"Shared memory between ranks on one host\")",
                       (unsigned long long)h->size, strerror((int)h->nospace));
    }
    c->P = (size_t)h->piece;
    size_t size = (size_t)h->size;
    munmap(c->base, c->size);
    c->base = NULL;
    c->h = NULL;
    return shm_map(c, size, err);
}

static void shm_destroy(rm_comm *c)
{
    if (!c)
        return;
    if (c->h) {
        if (c->broken)
            mark_failed(c);
        if (c->slots) {
            atomic_store(&c->slots[c->rank].left, 1);
            ring_bell(c);
        }
        munmap(c->base, c->size);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static int shm_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    if (!cfg || !out)
        return rm_errf(err, RM_EINVAL, "shm: NULL argument");
    *out = NULL;
    int n = cfg->world_size;
    if (n < 1 || n > RM_COMM_SHM_MAX_RANKS || cfg->rank < 0 || cfg->rank >= n)
        return rm_errf(err, RM_EINVAL, "shm: rank %d of world %d out of range (at most %d ranks on one host)",
                       cfg->rank, n, RM_COMM_SHM_MAX_RANKS);
    if (!cfg->peers)
        return rm_errf(err, RM_EINVAL, "shm: no peer list");
    /* every rank must be on this host: compare the advertised hosts */
    char h0[64], hq[64];
    int port;
    for (int q = 0; q < n; q++) {
        RM_CHECK(rm_comm_split_addr(cfg->peers[q].addr, q ? hq : h0, 64, &port, err));
        if (q && strcmp(h0, hq) != 0)
            return rm_errf(err, RM_EUNSUPPORTED, "shm: rank %d is on %s, rank 0 on %s: not one host", q, hq,
                           h0);
    }
    rm_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    c->rank = cfg->rank;
    c->n = n;
    c->fd = -1;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10;
    double deadline = rm_mono() + c->timeout_s;
    int rc = rm_comm_shm_segment_name(cfg, c->name, err);
    if (!rc && rm_comm_shm_test_name)
        snprintf(c->name, sizeof c->name, "%s", rm_comm_shm_test_name);
    if (!rc)
        rc = c->rank == 0 ? create_segment(c, cfg, deadline, err) : attach_segment(c, cfg, deadline, err);
    if (rc)
        goto fail;
    shm_layout(c);
    shm_slot *me = &c->slots[c->rank];
    me->pid = (int32_t)getpid();
    read_pidns(me->pidns, sizeof me->pidns);
    shm_mac(cfg->token, "rank", c->rank, c->name, c->h->nonce, me->proof);
    atomic_store_explicit(&me->attached, 1, memory_order_release);
    ring_bell(c);
    if (c->rank == 0) {
        rc = shm_wait(c, W_ATTACHED, 1, deadline, err);
        if (rc)
            goto fail;
        shm_unlink(c->name); /* everyone is in: nothing stays in /dev/shm from here on */
        for (int q = 1; q < n; q++) {
            uint8_t mac[32];
            shm_mac(cfg->token, "rank", q, c->name, c->h->nonce, mac);
            if (!rm_net_ct_equal(mac, c->slots[q].proof, 32)) {
                rc = rm_errf(err, RM_EAUTH, "shm: rank %d's slot was taken without the job token", q);
                goto fail;
            }
        }
        atomic_store_explicit(&c->h->ready, 1, memory_order_release);
        ring_bell(c);
    } else {
        for (;;) {
            if (atomic_load_explicit(&c->h->ready, memory_order_acquire))
                break;
            if (atomic_load(&c->h->failed)) {
                rc = rm_errf(err, RM_ECLOSED, "shm: rank %d gave up forming the comm",
                             (int)atomic_load(&c->h->failed_rank));
                goto fail;
            }
            if (atomic_load(&c->aborted)) {
                rc = rm_errf(err, RM_ECLOSED, "shm: aborted");
                goto fail;
            }
            if (rm_mono() >= deadline) {
                rc = rm_errf(err, RM_ETIMEDOUT, "shm: rank %d did not attach within %.1f s",
                             lagging(c, W_ATTACHED, 1), c->timeout_s);
                goto fail;
            }
            usleep(1000);
        }
    }
    /* more ranks than CPUs: a spinning rank only keeps a peer that shares its CPU from running, so
     * go straight to sched_yield and the futex */
    cpu_set_t cpus;
    c->spin_s = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < n ? 0 : SHM_SPIN_S;
    c->same_pidns = 1;
    for (int q = 0; q < n; q++)
        if (!c->slots[q].pidns[0] || strcmp(c->slots[q].pidns, me->pidns) != 0)
            c->same_pidns = 0;
    *out = c;
    return RM_OK;
fail:
    if (c->foreign) { /* a segment we could not authenticate: touch nothing in it */
        if (c->base)
            munmap(c->base, c->size);
        c->h = NULL;
    } else {
        shm_unlink(c->name); /* the formation failed: the name must not outlive it */
        c->broken = 1;
    }
    shm_destroy(c);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* collectives                                                                                    */

static void piece_of(size_t count, int n, int s, size_t j, size_t P, size_t *off, size_t *len)
{
    size_t so, sl;
    rm_shard_range(count, n, s, &so, &sl);
    size_t start = j * P;
    *off = so + start;
    *len = sl > start ? (sl - start < P ? sl - start : P) : 0;
}

static int shm_check(rm_comm *c, rm_dtype dt, rm_redop op, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "shm: NULL comm");
    if (atomic_load(&c->aborted))
        return rm_errf(err, RM_ECLOSED, "shm: aborted");
    if (c->broken)
        return rm_errf(err, RM_ECLOSED, "shm: comm broken by an earlier error");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "shm: dtype %s not supported (float only)", rm_dtype_name(dt));
    if (op != RM_OP_SUM && op != RM_OP_AVG)
        return rm_errf(err, RM_EINVAL, "shm: unknown reduction");
    return RM_OK;
}

/* out[i] = ((x[0][i] + x[1][i]) + x[2][i]) + ... (* inv for AVG), the same order for every element
 * and every call, written to o1 and, when o2 is not NULL, to o2 as well. Works in L1-sized blocks
 * through a local accumulator, so one pass over the inputs serves any world size, the loops
 * vectorize without alias checks, and o1/o2 may be the very same elements as one of the inputs (an
 * in-place allreduce reads its own input where it writes its result). */
#define SHM_BLOCK 1024
static void reduce_into(float *o1, float *o2, const float *const *x, int n, size_t len, int avg, float inv)
{
    float acc[SHM_BLOCK];
    for (size_t at = 0; at < len; at += SHM_BLOCK) {
        size_t m = len - at < SHM_BLOCK ? len - at : SHM_BLOCK;
        const float *a = x[0] + at, *b = x[1] + at;
        if (m == SHM_BLOCK) { /* fixed trip count: vectorized even at -O2 */
            for (size_t i = 0; i < SHM_BLOCK; i++)
                acc[i] = a[i] + b[i];
            for (int q = 2; q < n; q++) {
                const float *y = x[q] + at;
                for (size_t i = 0; i < SHM_BLOCK; i++)
                    acc[i] += y[i];
            }
            if (avg)
                for (size_t i = 0; i < SHM_BLOCK; i++)
                    acc[i] *= inv;
        } else {
            for (size_t i = 0; i < m; i++)
                acc[i] = a[i] + b[i];
            for (int q = 2; q < n; q++) {
                const float *y = x[q] + at;
                for (size_t i = 0; i < m; i++)
                    acc[i] += y[i];
            }
            if (avg)
                for (size_t i = 0; i < m; i++)
                    acc[i] *= inv;
        }
        memcpy(o1 + at, acc, m * sizeof(float));
        if (o2)
            memcpy(o2 + at, acc, m * sizeof(float));
    }
}

static int desc_mismatch(rm_comm *c, int b, uint64_t desc, uint64_t g, rm_err *err)
{
    for (int q = 0; q < c->n; q++)
        if (atomic_load_explicit(&c->slots[q].desc[b], memory_order_relaxed) != desc)
            return rm_errf(err, RM_EPROTO, "shm: rank %d is in a different collective or count (round %llu)",
                           q, (unsigned long long)g);
    return RM_OK;
}

/* Phase 3 of round j (buffer set b): the reduced pieces of the other shards from out[b] into dst
 * (AG: also this rank's own piece unless it is gathered in place). */
static void gather_round(rm_comm *c, int k, float *dst, const float *shard, size_t count, size_t j, int b)
{
    size_t P = c->P, off, len;
    for (int s = 0; s < c->n; s++) {
        if (k == K_AR && s == c->rank)
            continue; /* written by the reduce */
        piece_of(count, c->n, s, j, P, &off, &len);
        if (!len)
            continue;
        float *d = dst + off;
        if (k == K_AG && s == c->rank && d == shard + j * P)
            continue; /* in place */
        memcpy(d, c->out[b] + (size_t)s * P, len * sizeof(float));
    }
}

/* One collective of kind k. AR: src -> dst (count); RS: src (count) -> shard; AG: shard -> dst.
 * Memory passes per rank and round (world n, piece P of every shard):
 *   stage:   copy the n-1 pieces that other ranks own from src into in[b][me]   ((n-1)P read + write)
 *   reduce:  own piece = src (private, read in place) + every peer's staged copy, one fused pass,
 *            written to dst directly and (AR only) to out[b][me] for the peers  (nP read, 2P write)
 *   gather:  the n-1 other reduced pieces from out[b] into dst                  ((n-1)P read + write)
 * For n = 2 that is 2 reads + 2 writes per byte of buffer (the first version staged and gathered its
 * own piece too: 3 reads + 2.5 writes), and with pieces sized for L2 the shared-memory traffic stays
 * in cache: what reaches DRAM is mostly reading src and writing dst, as a memcpy does. */
static int shm_run(rm_comm *c, int k, const float *src, float *dst, float *shard, size_t count, rm_redop op,
                   rm_err *err)
{
    int n = c->n, me = c->rank;
    size_t P = c->P;
    size_t rounds = (rm_shard_max_len(count, n) + P - 1) / P;
    if (k == K_BAR)
        rounds = 1;
    const float inv = 1.0f / (float)n;
    uint64_t desc = ((uint64_t)k << 56) | (uint64_t)count;
    const float *xs[RM_COMM_SHM_MAX_RANKS]; /* c->n <= RM_COMM_SHM_MAX_RANKS (shm_init) */
    int rc = RM_OK;
    for (size_t j = 0; j < rounds; j++) {
        uint64_t g = ++c->seq;
        int b = (int)(g % SHM_SETS);
        double deadline = rm_mono() + c->timeout_s;
        if (g > SHM_SETS && (rc = shm_wait(c, W_GATHERED, g - SHM_SETS, deadline, err)))
            goto fail;
        shm_slot *ms = &c->slots[me];
        atomic_store_explicit(&ms->desc[b], desc, memory_order_relaxed);
        size_t off, len;
        if (k == K_AR || k == K_RS) {
            float *stage = c->in[b] + (size_t)me * (size_t)n * P;
            for (int s = 0; s < n; s++) {
                if (s == me)
                    continue; /* the owner reads its own piece from src itself */
                piece_of(count, n, s, j, P, &off, &len);
                if (len)
                    memcpy(stage + (size_t)s * P, src + off, len * sizeof(float));
            }
            atomic_store_explicit(&ms->staged, g, memory_order_release);
            ring_bell(c);
            if ((rc = shm_wait(c, W_STAGED, g, deadline, err)))
                goto fail;
            if ((rc = desc_mismatch(c, b, desc, g, err)))
                goto fail;
            piece_of(count, n, me, j, P, &off, &len);
            if (len) {
                for (int q = 0; q < n; q++)
                    xs[q] = q == me ? src + off : c->in[b] + ((size_t)q * (size_t)n + (size_t)me) * P;
                if (k == K_RS)
                    reduce_into(shard + j * P, NULL, xs, n, len, op == RM_OP_AVG, inv);
                else
                    reduce_into(c->out[b] + (size_t)me * P, dst + off, xs, n, len, op == RM_OP_AVG, inv);
            }
            atomic_store_explicit(&ms->reduced, g, memory_order_release);
            if (k == K_RS)
                atomic_store_explicit(&ms->gathered, g, memory_order_release);
            ring_bell(c);
            if (k == K_RS)
                continue;
        } else {
            if (k == K_AG) {
                piece_of(count, n, me, j, P, &off, &len);
                if (len)
                    memcpy(c->out[b] + (size_t)me * P, shard + j * P, len * sizeof(float));
            }
            atomic_store_explicit(&ms->staged, g, memory_order_release);
            atomic_store_explicit(&ms->reduced, g, memory_order_release);
            ring_bell(c);
        }
        if (k == K_AR) {
            /* gather the previous round now: every rank stored reduced(g - 1) before staged(g), so
             * the wait for staged(g) above already proved every piece of round g - 1 reduced. One
             * barrier per round (staged) instead of two (staged, reduced). */
            if (j > 0) {
                gather_round(c, K_AR, dst, NULL, count, j - 1, (int)((g - 1) % SHM_SETS));
                atomic_store_explicit(&ms->gathered, g - 1, memory_order_release);
                ring_bell(c);
            }
            if (j + 1 < rounds)
                continue;
        }
        if ((rc = shm_wait(c, W_REDUCED, g, deadline, err)))
            goto fail;
        if (k != K_AR && (rc = desc_mismatch(c, b, desc, g, err)))
            goto fail;
        if (k != K_BAR)
            gather_round(c, k, dst, shard, count, j, b);
        atomic_store_explicit(&ms->gathered, g, memory_order_release);
        ring_bell(c);
    }
    return RM_OK;
fail:
    c->broken = 1;
    mark_failed(c);
    return rc;
}

static int shm_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt, rm_redop op,
                             rm_err *err)
{
    RM_CHECK(shm_check(c, dt, op, err));
    if (!count)
        return RM_OK;
    if (!send || !recv)
        return rm_errf(err, RM_EINVAL, "shm: NULL buffer");
    if (c->n == 1) {
        if (send != recv)
            memmove(recv, send, count * sizeof(float));
        return RM_OK;
    }
    return shm_run(c, K_AR, send, recv, NULL, count, op, err);
}

static int shm_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return shm_allreduce_oop(c, buf, buf, count, dt, op, err);
}

static int shm_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                              rm_err *err)
{
    RM_CHECK(shm_check(c, dt, op, err));
    if (!count)
        return RM_OK;
    if (!buf || !shard)
        return rm_errf(err, RM_EINVAL, "shm: NULL buffer");
    if (c->n == 1) {
        if (shard != buf)
            memmove(shard, buf, count * sizeof(float));
        return RM_OK;
    }
    return shm_run(c, K_RS, buf, NULL, shard, count, op, err);
}

static int shm_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    RM_CHECK(shm_check(c, dt, RM_OP_SUM, err));
    if (!count)
        return RM_OK;
    if (!buf || !shard)
        return rm_errf(err, RM_EINVAL, "shm: NULL buffer");
    size_t off = rm_shard_off(count, c->n, c->rank), len = rm_shard_len(count, c->n, c->rank);
    if (c->n == 1) {
        if ((float *)buf + off != shard)
            memmove((float *)buf + off, shard, len * sizeof(float));
        return RM_OK;
    }
    return shm_run(c, K_AG, NULL, buf, (float *)shard, count, RM_OP_SUM, err);
}

static int shm_barrier(rm_comm *c, rm_err *err)
{
    RM_CHECK(shm_check(c, RM_DT_F32, RM_OP_SUM, err));
    if (c->n == 1)
        return RM_OK;
    return shm_run(c, K_BAR, NULL, NULL, NULL, 0, RM_OP_SUM, err);
}

static void shm_abort(rm_comm *c)
{
    if (!c)
        return;
    atomic_store(&c->aborted, 1);
    if (c->h)
        mark_failed(c);
}

static const rm_comm_ops shm_ops = {
    .name = "shm",
    .init = shm_init,
    .allreduce = shm_allreduce,
    .allreduce_oop = shm_allreduce_oop,
    .reduce_scatter = shm_reduce_scatter,
    .all_gather = shm_all_gather,
    .barrier = shm_barrier,
    .abort = shm_abort,
    .destroy = shm_destroy,
};

const rm_comm_ops *rm_comm_shm_ops(void)
{
    return &shm_ops;
}

const char *rm_comm_shm_name(const rm_comm *c)
{
    return c ? c->name : "";
}
