/* cast_cache.h — which 16-bit copy of a gemm operand is still valid: the bookkeeping of the CUDA
 * table's operand cache (kernels/cuda/kernels_cuda.cu), as pure functions tested on the CPU
 * (tests/unit/test_cast_cache.c).
 *
 * Why: with precision bf16/fp16 every gemm rounds its fp32 operands to 16 bits first. A training
 * step reads each operand twice (the forward's X and W come back in the backward's dW = X^T.dY and
 * dX = dY.W^T, and dY feeds both backward products), so rounding per gemm does every cast twice.
 * The table keeps the rounded copy of each operand in a slot and reuses it while the fp32 source
 * is unchanged.
 *
 * Rule (never a stale copy): a slot holds the cast of one source region — the fp32 bytes a cast of
 * (src, rows, cols, ld) reads — and is dropped when anything that may write an overlapping byte is
 * queued: every writing entry of the table reports its output range (rm_cast_cache_written), memory
 * written outside the table (an NCCL collective) is reported by its writer through
 * rm_cuda_note_written (kernels/kernels_cuda.h), a fresh allocation reports its range (it may reuse
 * freed addresses), and the table drops every slot at its once-per-step check(). Writes are reported
 * when they are queued on the stream, after every read of the old copy already queued, so an
 * invalidation is never early or late.
 *
 * The slot's 16-bit buffer belongs to the caller (the CUDA table: device memory it grows); this code
 * only chooses slots. Usable from C11 and CUDA C++; header-only; no locking (the caller holds its
 * lock). */
#ifndef RM_KERNELS_CAST_CACHE_H
#define RM_KERNELS_CAST_CACHE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RM_CAST_SLOTS 32 /* 3 operands per layer (X, W, dY): models up to 10 layers hit every time */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rm_cast_slot {
    const void *src;    /* NULL: free (buf and cap are kept for reuse) */
    size_t span;        /* bytes of src the cast reads */
    int rows, cols, ld; /* the stored (untransposed) operand: rows x cols, row stride ld floats */
    int prec;           /* rm_precision of the copy */
    void *buf;          /* the caller's 16-bit copy */
    size_t cap;         /* bytes allocated at buf */
    uint64_t used;      /* last use (the cache's clock), for least-recently-used replacement */
} rm_cast_slot;

typedef struct rm_cast_cache {
    rm_cast_slot slot[RM_CAST_SLOTS];
    uint64_t clock;
    uint64_t hits, misses;
} rm_cast_cache;

/* Bytes of fp32 source that a rows x cols operand with row stride ld reads (0 for an empty one). */
static inline size_t rm_cast_span(int rows, int cols, int ld)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * sizeof(float);
}

static inline bool rm_cast_overlap(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return an && bn && a0 < b0 + bn && b0 < a0 + an;
}

/* The slot for a cast of (src, rows, cols, ld) at precision prec, whose copy needs `need` bytes.
 * *hit true: the slot already holds it (use slot.buf as is). *hit false: the slot now carries this
 * key and the caller must make the copy — grow buf to `need` if cap is smaller, then cast; if that
 * fails, rm_cast_cache_drop the slot. A miss takes a free slot whose cap is enough, else the free
 * slot with the largest cap, else the least recently used one (so a steady training step reuses the
 * same buffers and allocates nothing). */
static inline int rm_cast_cache_get(rm_cast_cache *c, const void *src, int rows, int cols, int ld, int prec,
                                    size_t need, bool *hit)
{
    int fit = -1, freeb = -1, lru = 0;
    c->clock++;
    for (int i = 0; i < RM_CAST_SLOTS; i++) {
        rm_cast_slot *s = &c->slot[i];
        if (s->src == src && s->rows == rows && s->cols == cols && s->ld == ld && s->prec == prec && src) {
            s->used = c->clock;
            c->hits++;
            *hit = true;
            return i;
        }
        if (!s->src && s->cap >= need && (fit < 0 || s->cap < c->slot[fit].cap))
            fit = i;
        if (!s->src && (freeb < 0 || s->cap > c->slot[freeb].cap))
            freeb = i;
        if (s->used < c->slot[lru].used)
            lru = i;
    }
    int i = fit >= 0 ? fit : freeb >= 0 ? freeb : lru;
    rm_cast_slot *s = &c->slot[i];
    s->src = src;
    s->span = rm_cast_span(rows, cols, ld);
    s->rows = rows;
    s->cols = cols;
    s->ld = ld;
    s->prec = prec;
    s->used = c->clock;
    c->misses++;
    *hit = false;
    return i;
}

/* The slot no longer holds a valid copy (its buffer stays for reuse). */
static inline void rm_cast_cache_drop(rm_cast_cache *c, int i)
{
    c->slot[i].src = NULL;
    c->slot[i].used = 0;
}

/* [p, p + bytes) may be written by work queued from now on: drop every copy of a source that
 * overlaps it. */
static inline void rm_cast_cache_written(rm_cast_cache *c, const void *p, size_t bytes)
{
    for (int i = 0; i < RM_CAST_SLOTS; i++)
        if (c->slot[i].src && rm_cast_overlap(c->slot[i].src, c->slot[i].span, p, bytes))
            rm_cast_cache_drop(c, i);
}

/* Drop every copy (buffers kept). */
static inline void rm_cast_cache_clear(rm_cast_cache *c)
{
    for (int i = 0; i < RM_CAST_SLOTS; i++)
        rm_cast_cache_drop(c, i);
}

#ifdef __cplusplus
}
#endif
#endif
