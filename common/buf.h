/* buf.h — a growable byte buffer with a hard cap, for everything that grows from network input
 * (HTTP request and response bodies) and for rendered text.
 *
 * The buffer is always NUL-terminated after the first append (so bodies can be used as strings),
 * grows by doubling from 4 KiB, never past max + 1 bytes, and never holds more than `max` bytes:
 * an append that would pass the cap fails with RM_ETOOBIG and leaves the buffer as it was.
 * All size arithmetic is overflow-checked, so max = SIZE_MAX means "no cap" safely.
 * Ownership: `b` is owned by the rm_capbuf (rm_capbuf_free); a caller may take it and zero the
 * struct instead. */
#ifndef RM_BUF_H
#define RM_BUF_H
#include <stddef.h>
#include "common/rm.h"

typedef struct rm_capbuf {
    char *b;    /* NULL until the first append */
    size_t len; /* bytes held, excluding the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* the cap on len */
} rm_capbuf;

/* Append n bytes of p. RM_OK, RM_ETOOBIG (len + n > max; nothing appended) or RM_ENOMEM. */
int rm_capbuf_append(rm_capbuf *cb, const void *p, size_t n);
/* Free b and zero len/cap (max is kept). NULL ok. */
void rm_capbuf_free(rm_capbuf *cb);
#endif
