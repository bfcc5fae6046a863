/* sha256.c — streaming SHA-256 (sha256.h), written from FIPS 180-4's definition: the 64 round
 * constants are the first 32 bits of the fractional parts of the cube roots of the first 64
 * primes, the initial state those of the square roots of the first 8. */
#include "common/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void block(uint32_t h[8], const uint8_t p[64])
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void rm_sha256_init(rm_sha256_ctx *c)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->nbuf = 0;
}

void rm_sha256_update(rm_sha256_ctx *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    c->len += n;
    if (c->nbuf) {
        size_t take = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take;
        p += take;
        n -= take;
        if (c->nbuf < 64)
            return;
        block(c->h, c->buf);
        c->nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        block(c->h, p);
    memcpy(c->buf, p, n);
    c->nbuf = n;
}

void rm_sha256_final(rm_sha256_ctx *c, uint8_t out[32])
{
    uint64_t bits = c->len * 8;
    uint8_t pad[72] = {0x80};
    size_t padn = (c->nbuf < 56 ? 56 : 120) - c->nbuf;
    for (int i = 0; i < 8; i++)
        pad[padn + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    rm_sha256_update(c, pad, padn + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void rm_sha256_hex(const uint8_t d[32], char out[65])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[64] = 0;
}

int rm_sha256_file(rm_sha256_ctx *c, const char *path, rm_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    int rc = RM_OK;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = rm_errf(err, RM_EIO, "%s: read: %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        rm_sha256_update(c, buf, (size_t)n);
    }
    free(buf);
    close(fd);
    return rc;
}

void rm_sha256(const void *data, size_t len, uint8_t out[32])
{
    rm_sha256_ctx c;
    rm_sha256_init(&c);
    rm_sha256_update(&c, data, len);
    rm_sha256_final(&c, out);
}

void rm_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32])
{
    uint8_t k[64] = {0}, ipad[64], opad[64], inner[32];
    if (keylen > 64)
        rm_sha256(key, keylen, k);
    else if (keylen)
        memcpy(k, key, keylen);
    for (int i = 0; i < 64; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5c;
    }
    rm_sha256_ctx c;
    rm_sha256_init(&c);
    rm_sha256_update(&c, ipad, 64);
    rm_sha256_update(&c, msg, len);
    rm_sha256_final(&c, inner);
    rm_sha256_init(&c);
    rm_sha256_update(&c, opad, 64);
    rm_sha256_update(&c, inner, 32);
    rm_sha256_final(&c, out);
}
