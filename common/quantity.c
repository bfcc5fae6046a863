/* quantity.c — see quantity.h. */
#include "common/quantity.h"
#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define Q_MAX_MILLI INT64_MAX

/* value = mant / 10^frac_digits * mult_num, mult given as (base^exp); all in 128-bit. */
int rm_quantity_milli(const char *s, int64_t *out)
{
    if (!s || !*s)
        return RM_EINVAL;
    const char *p = s;
    if (*p == '+')
        p++;
    else if (*p == '-')
        return RM_EINVAL;
    unsigned __int128 mant = 0;
    int frac = 0, digits = 0;
    bool dot = false;
    for (; *p; p++) {
        if (isdigit((unsigned char)*p)) {
            if (mant > ((unsigned __int128)1 << 100))
                return RM_EINVAL;
            mant = mant * 10 + (unsigned)(*p - '0');
            digits++;
            if (dot)
                frac++;
        } else if (*p == '.' && !dot) {
            dot = true;
        } else {
            break;
        }
    }
    if (!digits)
        return RM_EINVAL;
    int dexp = 0; /* power of ten */
    int bexp = 0; /* power of 1024 */
    if (!*p) {
    } else if (!strcmp(p, "m")) {
        dexp = -3;
    } else if (p[1] == 0 && strchr("kMGTPE", *p)) {
        dexp = 3 * (int)(strchr("kMGTPE", *p) - "kMGTPE" + 1);
    } else if (p[1] == 'i' && p[2] == 0 && strchr("KMGTPE", *p)) {
        bexp = (int)(strchr("KMGTPE", *p) - "KMGTPE" + 1);
    } else if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        int sign = 1, e = 0, nd = 0;
        if (*q == '+' || *q == '-')
            sign = *q++ == '-' ? -1 : 1;
        for (; isdigit((unsigned char)*q) && nd < 4; q++, nd++)
            e = e * 10 + (*q - '0');
        if (!nd || *q)
            return RM_EINVAL;
        dexp = sign * e;
    } else {
        return RM_EINVAL;
    }
    /* milli = mant * 10^(dexp + 3 - frac) * 1024^bexp, rounded up */
    int tenp = dexp + 3 - frac;
    unsigned __int128 v = mant, lim = (unsigned __int128)Q_MAX_MILLI;
    for (int i = 0; i < bexp; i++) {
        v *= 1024;
        if (v > lim)
            return RM_EINVAL;
    }
    if (tenp >= 0) {
        for (int i = 0; i < tenp; i++) {
            if (v == 0)
                break;
            v *= 10;
            if (v > lim)
                return RM_EINVAL;
        }
    } else {
        unsigned __int128 d = 1;
        for (int i = 0; i < -tenp && d <= ((unsigned __int128)1 << 120) / 10; i++)
            d *= 10;
        v = (v + d - 1) / d; /* round up */
    }
    if (v > lim)
        return RM_EINVAL;
    *out = (int64_t)v;
    return RM_OK;
}

int rm_quantity_bytes(const char *s, int64_t *out)
{
    int64_t milli;
    int rc = rm_quantity_milli(s, &milli);
    if (rc == RM_OK)
        *out = milli / 1000 + (milli % 1000 != 0);
    return rc;
}

int rm_quantity_json_milli(const cJSON *v, int64_t *out)
{
    if (cJSON_IsString(v))
        return rm_quantity_milli(v->valuestring, out);
    if (cJSON_IsNumber(v)) {
        char b[64];
        if (!(v->valuedouble >= 0) || v->valuedouble > 9e15)
            return RM_EINVAL;
        snprintf(b, sizeof b, "%.17g", v->valuedouble);
        return rm_quantity_milli(b, out);
    }
    return RM_EINVAL;
}

const char *rm_quantity_format(int64_t milli, char *buf, size_t cap)
{
    if (milli < 0)
        milli = 0;
    if (milli % 1000) {
        snprintf(buf, cap, "%" PRId64 "m", milli);
        return buf;
    }
    int64_t v = milli / 1000;
    static const char *const bin[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int k = -1;
    while (v >= 1024 && v % 1024 == 0 && k < 5) {
        v /= 1024;
        k++;
    }
    if (k >= 0)
        snprintf(buf, cap, "%" PRId64 "%s", v, bin[k]);
    else
        snprintf(buf, cap, "%" PRId64, milli / 1000);
    return buf;
}
