/* shm_name.c — see shm_name.h. The name is a MAC under the job token so that a process without the
 * token cannot find (or pre-create) a formation's segment (worker/comm/comm_shm.c explains the
 * rest of that design). */
#include "common/shm_name.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"

int rm_shm_segment_name(const char *token, int epoch, int world, const char *const *addrs,
                        char name[RM_SHM_NAME_MAX], rm_err *err)
{
    if (!addrs || world < 1 || world > RM_MAX_WORLD)
        return rm_errf(err, RM_EINVAL, "shm: no peer list");
    /* on the heap: at RM_MAX_WORLD ranks the message is about 1 MiB */
    size_t cap = 64 + (size_t)world * 66;
    char *msg = malloc(cap);
    if (!msg)
        return rm_errf(err, RM_ENOMEM, "shm: out of memory");
    int m = snprintf(msg, cap, "ringmaster-shm-v1|%d|%d", epoch, world);
    for (int q = 0; q < world; q++) {
        int k = addrs[q] ? snprintf(msg + m, cap - (size_t)m, "|%s", addrs[q]) : 0;
        if (!addrs[q] || k < 0 || (size_t)k >= cap - (size_t)m) {
            free(msg);
            return addrs[q] ? rm_errf(err, RM_EINVAL, "shm: peer list too long")
                            : rm_errf(err, RM_EINVAL, "shm: rank %d has no address", q);
        }
        m += k;
    }
    uint8_t mac[32];
    const char *t = token ? token : "";
    rm_hmac_sha256(t, strlen(t), msg, (size_t)m, mac);
    free(msg);
    static const char hx[] = "0123456789abcdef";
    memcpy(name, "/rm-", 4);
    for (int i = 0; i < 20; i++) {
        name[4 + 2 * i] = hx[mac[i] >> 4];
        name[5 + 2 * i] = hx[mac[i] & 15];
    }
    name[44] = 0;
    return RM_OK;
}
