/* b64.h — base64 (RFC 4648, standard alphabet), the one codec of the project: kubeconfig and
 * service-account data in the operator's kube client, Secret data in kubesim (env, volumes, the
 * API's stringData → data).
 *
 * Ownership: both functions return memory the caller frees with free(). */
#ifndef RM_B64_H
#define RM_B64_H
#include <stddef.h>

/* Decode inlen bytes of in: padding optional, whitespace skipped. *out owned (malloc, NUL appended,
 * not counted in *len). RM_EINVAL on a character outside the alphabet or data after padding
 * (*out NULL), RM_ENOMEM. */
int rm_b64_decode(const char *in, size_t inlen, unsigned char **out, size_t *len);
/* Encode len bytes, padded; an owned NUL-terminated string, or NULL on ENOMEM. */
char *rm_b64_encode(const unsigned char *in, size_t len);

#endif
