/* buf.c — the capped growable buffer (see buf.h).
 * Design: one append that checks the cap before touching memory and does its growth arithmetic
 * without overflow, shared by the HTTP server (request bodies), the HTTP client (response bodies)
 * and the metrics renderer, so there is one place where "grows from network input" is bounded. */
#include "common/buf.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RM_CAPBUF_FIRST 4096u

int rm_capbuf_append(rm_capbuf *cb, const void *p, size_t n)
{
    if (cb->len > cb->max || n > cb->max - cb->len || cb->len + n == SIZE_MAX)
        return RM_ETOOBIG;
    size_t need = cb->len + n + 1; /* cannot overflow: len + n < SIZE_MAX */
    if (need > cb->cap) {
        size_t nc = cb->cap ? cb->cap : RM_CAPBUF_FIRST;
        while (nc < need)
            nc = nc > SIZE_MAX / 2 ? need : nc * 2;
        if (cb->max < SIZE_MAX && nc > cb->max + 1)
            nc = cb->max + 1; /* >= need, since len + n <= max */
        char *nb = realloc(cb->b, nc);
        if (!nb)
            return RM_ENOMEM;
        cb->b = nb;
        cb->cap = nc;
    }
    if (n)
        memcpy(cb->b + cb->len, p, n);
    cb->len += n;
    cb->b[cb->len] = 0;
    return RM_OK;
}

void rm_capbuf_free(rm_capbuf *cb)
{
    if (!cb)
        return;
    free(cb->b);
    cb->b = NULL;
    cb->len = cb->cap = 0;
}
