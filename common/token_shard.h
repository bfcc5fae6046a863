/* token_shard.h — llm.c's token shard files (docs/models-and-data.md, "Data formats"), the format
 * any tokenizer run offline produces and `ringmaster tokenize` writes: a 1,024-byte header of 256
 * little-endian int32 — [0] magic, [1] version, [2] token count, the rest zero — then the tokens,
 * little-endian: magic 20240520 version 1 with uint16 tokens, or magic 20240801 version 7 with
 * uint32 tokens. The file is exactly the header plus count tokens: a truncated or over-long file is
 * an error, not a shorter or longer set.
 *
 * Ownership: plain values; the writer borrows the tokens. */
#ifndef RM_COMMON_TOKEN_SHARD_H
#define RM_COMMON_TOKEN_SHARD_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_TOK_HEADER_BYTES 1024
#define RM_TOK_MAGIC_U16 20240520
#define RM_TOK_VERSION_U16 1
#define RM_TOK_MAGIC_U32 20240801
#define RM_TOK_VERSION_U32 7
#define RM_TOK_MAX_COUNT (1ull << 40) /* a sanity cap on the header's count (4 TiB of uint32) */

typedef struct rm_tok_header {
    int token_bytes; /* 2 or 4 */
    uint64_t count;  /* tokens after the header */
} rm_tok_header;

/* Check a shard's header against the file's size. RM_EINVAL naming `what` (the file) and the
 * field: a bad magic, a version that does not go with it, a count that does not match the size. */
int rm_tok_header_parse(const unsigned char hdr[RM_TOK_HEADER_BYTES], uint64_t file_size, const char *what,
                        rm_tok_header *out, rm_err *err);
/* Write count tokens as one shard at path, atomically: uint16 (version 1) when every token fits,
 * else uint32 (version 7). */
int rm_tok_write_shard(const char *path, const uint32_t *tokens, size_t count, rm_err *err);
#endif
