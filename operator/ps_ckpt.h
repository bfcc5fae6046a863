/* ps_ckpt.h — the parameter servers' checkpoint folders as the local runner sees them
 * (CHECKPOINT_DIR/ps-<i>/: each shard's checkpoints, the L-BFGS vectors and coordinator state;
 * docs/strategies.md#failure-semantics). One rule for every role's state: a fresh run removes it,
 * --resume continues every shard from one version they all hold, and a server's death rolls every
 * shard back to such a version.
 *
 * Servers snapshot at the same versions (multiples of the checkpoint interval), so such a common
 * version exists unless a server never wrote one; versions are read from the file names
 * (ckpt-<version>[-<n>].rmck, worker/checkpoint/checkpoint.h).
 *
 * Ownership: paths are borrowed for the call; msg is the caller's buffer. */
#ifndef RM_OPERATOR_PS_CKPT_H
#define RM_OPERATOR_PS_CKPT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Remove every server's state under dir/ps-* (checkpoints, temporary files, fault markers, the
 * L-BFGS vectors and coordinator state). Returns the files removed. */
int rm_ps_ckpt_clear(const char *dir);

/* Does any dir/ps-<i>/ hold a shard checkpoint? */
bool rm_ps_ckpt_any(const char *dir);

/* The newest version every one of the S shards (dir/ps-0 .. ps-<S-1>) holds a checkpoint of.
 * Returns 1 and *version when there is one; 0 when no shard holds any checkpoint; -1 when some do
 * but they share no version: msg says which folders hold which newest version ("none" for one
 * without). */
int rm_ps_ckpt_common(const char *dir, int S, int64_t *version, char *msg, size_t cap);

/* Remove the shard checkpoints newer than version from dir/ps-0 .. ps-<S-1> (version < 0: all of
 * them), so every server restores version (or starts from the initial parameters). Returns the
 * files removed. */
int rm_ps_ckpt_rollback(const char *dir, int S, int64_t version);
#endif
