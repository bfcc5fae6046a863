/* b64.c — base64 encode/decode (common/b64.h). */
#include "common/b64.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/rm.h"

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int rm_b64_decode(const char *in, size_t inlen, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    unsigned char *o = malloc(inlen / 4 * 3 + 4);
    if (!o)
        return RM_ENOMEM;
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    bool pad = false;
    for (size_t i = 0; i < inlen; i++) {
        char ch = in[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
            continue;
        if (ch == '=') {
            pad = true;
            continue;
        }
        const char *p = ch ? strchr(B64, ch) : NULL;
        if (!p || pad) {
            free(o);
            return RM_EINVAL;
        }
        acc = (acc << 6) | (unsigned)(p - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[n++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    o[n] = 0;
    *out = o;
    *len = n;
    return RM_OK;
}

char *rm_b64_encode(const unsigned char *in, size_t len)
{
    char *o = malloc((len + 2) / 3 * 4 + 1);
    if (!o)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        o[n++] = B64[(v >> 18) & 63];
        o[n++] = B64[(v >> 12) & 63];
        o[n++] = i + 1 < len ? B64[(v >> 6) & 63] : '=';
        o[n++] = i + 2 < len ? B64[v & 63] : '=';
    }
    o[n] = 0;
    return o;
}
