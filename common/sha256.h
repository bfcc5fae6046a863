/* sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): streaming, for checking fetched data
 * against spec.training.data.sha256 (docs/models-and-data.md, "Where data comes from") without
 * holding it in memory (common/fetch.c hashes a file in chunks); one-shot, for the job token's MACs
 * and derived names (worker/comm/net.c handshakes, common/shm_name.c).
 *
 * Ownership: the context is the caller's (stack); nothing is allocated. */
#ifndef RM_COMMON_SHA256_H
#define RM_COMMON_SHA256_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

typedef struct rm_sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} rm_sha256_ctx;

void rm_sha256_init(rm_sha256_ctx *c);
void rm_sha256_update(rm_sha256_ctx *c, const void *data, size_t n);
/* The digest as 32 bytes; the context must be initialised again before reuse. */
void rm_sha256_final(rm_sha256_ctx *c, uint8_t out[32]);
/* out = 64 lowercase hex digits and a NUL. */
void rm_sha256_hex(const uint8_t d[32], char out[65]);
/* Add the whole content of path to c (read in 1 MiB chunks). RM_EIO naming the path. */
int rm_sha256_file(rm_sha256_ctx *c, const char *path, rm_err *err);
/* One shot: out = SHA-256(data); out = HMAC-SHA256(key, msg). out is the caller's 32 bytes. */
void rm_sha256(const void *data, size_t len, uint8_t out[32]);
void rm_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[32]);
#endif
