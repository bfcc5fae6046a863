/* names.c — object-name and metadata rules of the API server (see names.h).
 *
 * The texts are kubernetes 1.32's (apimachinery/pkg/util/validation: the RegexError and
 * MaxLenError forms, including their "(e.g. 'my-name',  or '123-abc', ...)" double space) so that a
 * client matching on them sees what a real cluster says. */
#include "tests/kubesim/names.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define LABEL_FMT "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#define DNS1035_FMT "[a-z]([-a-z0-9]*[a-z0-9])?"
static const char MSG_LABEL[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '" LABEL_FMT "')";
static const char MSG_SUBDOMAIN[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '" LABEL_FMT "(\\." LABEL_FMT ")*')";
static const char MSG_DNS1035[] =
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '" DNS1035_FMT "')";

ks_name_fmt ks_name_format(const char *group, const char *kind)
{
    if (!group)
        group = "";
    if (!*group && !strcmp(kind, "Service"))
        return KS_NAME_DNS1035;
    if (!*group && !strcmp(kind, "Namespace"))
        return KS_NAME_LABEL;
    if (!strcmp(group, "rbac.authorization.k8s.io"))
        return KS_NAME_PATH_SEGMENT;
    return KS_NAME_SUBDOMAIN;
}

static bool alnum_lower(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])? over s[0..n) */
static bool label_re(const char *s, size_t n)
{
    if (n == 0 || !alnum_lower(s[0]) || !alnum_lower(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!alnum_lower(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool subdomain_re(const char *s)
{
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (!label_re(p, n))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

/* Go's %q for the value, cut at 200 bytes (the message stays readable for a huge name). */
static void quote(char *buf, size_t cap, const char *v)
{
    size_t o = 0;
    if (cap < 8)
        return;
    buf[o++] = '"';
    for (size_t i = 0; v[i] && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)v[i];
        if (i >= 200) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    if (o + 2 > cap)
        o = cap - 2;
    buf[o++] = '"';
    buf[o] = 0;
}

static void add(ks_causes *out, const char *type, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(ks_causes *out, const char *type, const char *field, const char *fmt, ...)
{
    if (out->n >= KS_MAX_CAUSES)
        return;
    ks_cause *c = &out->c[out->n++];
    snprintf(c->type, sizeof c->type, "%s", type);
    snprintf(c->field, sizeof c->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

static void invalid(ks_causes *out, const char *field, const char *value, const char *detail)
{
    char q[256];
    quote(q, sizeof q, value);
    add(out, "FieldValueInvalid", field, "Invalid value: %s: %s", q, detail);
}

int ks_check_name(ks_name_fmt fmt, const char *field, const char *value, ks_causes *out)
{
    int found = 0;
    size_t n = value ? strlen(value) : 0;
    if (!value)
        value = "";
    switch (fmt) {
    case KS_NAME_PATH_SEGMENT:
        if (!strcmp(value, ".") || !strcmp(value, "..")) {
            char d[32];
            snprintf(d, sizeof d, "may not be '%s'", value);
            invalid(out, field, value, d);
            found++;
        }
        if (strchr(value, '/')) {
            invalid(out, field, value, "may not contain '/'");
            found++;
        }
        if (strchr(value, '%')) {
            invalid(out, field, value, "may not contain '%'");
            found++;
        }
        break;
    case KS_NAME_SUBDOMAIN:
        if (n > 253) {
            invalid(out, field, value, "must be no more than 253 characters");
            found++;
        }
        if (!subdomain_re(value)) {
            invalid(out, field, value, MSG_SUBDOMAIN);
            found++;
        }
        break;
    case KS_NAME_LABEL:
    case KS_NAME_DNS1035:
        if (n > 63) {
            invalid(out, field, value, "must be no more than 63 characters");
            found++;
        }
        if (!label_re(value, n) || (fmt == KS_NAME_DNS1035 && !(value[0] >= 'a' && value[0] <= 'z'))) {
            invalid(out, field, value, fmt == KS_NAME_LABEL ? MSG_LABEL : MSG_DNS1035);
            found++;
        }
        break;
    }
    return found;
}

int ks_check_annotations(const cJSON *obj, ks_causes *out)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    size_t total = 0;
    for (const cJSON *a = cJSON_IsObject(an) ? an->child : NULL; a; a = a->next) {
        total += a->string ? strlen(a->string) : 0;
        if (cJSON_IsString(a))
            total += strlen(a->valuestring);
    }
    if (total <= KS_ANNOTATIONS_MAX)
        return 0;
    add(out, "FieldValueTooLong", "metadata.annotations", "Too long: may not be more than %d bytes",
        KS_ANNOTATIONS_MAX);
    return 1;
}

int ks_check_pod_names(const cJSON *pod, ks_causes *out)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
    static const char *const keys[] = {"hostname", "subdomain"};
    int found = 0;
    for (size_t i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, keys[i]);
        if (cJSON_IsString(v) && v->valuestring[0]) {
            char f[32];
            snprintf(f, sizeof f, "spec.%s", keys[i]);
            found += ks_check_name(KS_NAME_LABEL, f, v->valuestring, out);
        }
    }
    return found;
}

void ks_causes_message(const ks_causes *cs, const char *qualified_kind, const char *name, char *buf,
                       size_t cap)
{
    char q[256];
    quote(q, sizeof q, name ? name : "");
    size_t o = (size_t)snprintf(buf, cap, "%s %s is invalid: %s", qualified_kind, q, cs->n > 1 ? "[" : "");
    for (int i = 0; i < cs->n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s: %s", i ? ", " : "", cs->c[i].field, cs->c[i].msg);
    if (cs->n > 1 && o < cap)
        snprintf(buf + o, cap - o, "]");
}
