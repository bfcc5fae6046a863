/* faults_parse.c — parse RINGMASTER_FAULT (see faults.h). A translation unit of its own with no
 * dependency beyond common/, so `ringmaster run` links the very same parser and refuses a
 * malformed spec before it starts any worker. */
#include "worker/faults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *rm_fault_kind_name(rm_fault_kind k) { return k == RM_FAULT_HANG ? "hang" : "exit"; }

static int parse_num(const char *s, size_t len, long long lo, long long hi, long long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_one(const char *s, size_t len, rm_fault *f, rm_err *err)
{
    memset(f, 0, sizeof *f);
    const char *end = s + len, *p = s;
    const char *colon = memchr(p, ':', len);
    size_t kl = colon ? (size_t)(colon - p) : len;
    if (kl == 4 && !memcmp(p, "exit", 4))
        f->kind = RM_FAULT_EXIT;
    else if (kl == 4 && !memcmp(p, "hang", 4))
        f->kind = RM_FAULT_HANG;
    else
        return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: unknown fault kind \"%.*s\" (exit|hang)",
                       (int)kl, p);
    bool have_rank = false, have_step = false;
    p = colon ? colon + 1 : end;
    while (p < end) {
        const char *q = memchr(p, ':', (size_t)(end - p));
        if (!q)
            q = end;
        const char *eq = memchr(p, '=', (size_t)(q - p));
        if (!eq)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: expected key=value, got \"%.*s\"",
                           (int)(q - p), p);
        long long v;
        size_t klen = (size_t)(eq - p);
        if (klen == 4 && !memcmp(p, "rank", 4)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 0, 1 << 20, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad rank \"%.*s\"",
                               (int)(q - eq - 1), eq + 1);
            f->rank = (int)v;
            have_rank = true;
        } else if (klen == 4 && !memcmp(p, "step", 4)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 0, (long long)1 << 50, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad step \"%.*s\"",
                               (int)(q - eq - 1), eq + 1);
            f->step = v;
            have_step = true;
        } else {
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: unknown key \"%.*s\" (rank|step)",
                           (int)klen, p);
        }
        p = q < end ? q + 1 : end;
    }
    if (!have_rank || !have_step)
        return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\" needs rank= and step=",
                       (int)len, s);
    return RM_OK;
}

int rm_faults_parse(const char *spec, rm_faults *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!spec)
        return RM_OK;
    const char *p = spec, *end = spec + strlen(spec);
    while (p < end) {
        const char *q = memchr(p, ';', (size_t)(end - p));
        if (!q)
            q = end;
        /* trim spaces */
        const char *a = p, *b = q;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a) {
            if (out->n == RM_FAULTS_MAX) {
                memset(out, 0, sizeof *out);
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: more than %d faults",
                               RM_FAULTS_MAX);
            }
            int rc = parse_one(a, (size_t)(b - a), &out->f[out->n], err);
            if (rc) {
                memset(out, 0, sizeof *out);
                return rc;
            }
            out->n++;
        }
        p = q < end ? q + 1 : end;
    }
    return RM_OK;
}

