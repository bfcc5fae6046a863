/* selectors.c — label and field selector parsing and matching (rules K4, K5).
 *
 * Design: a selector is a flat array of requirements ANDed together; values are copied into the
 * structure so matching reads only the object (no allocation per event). The grammar follows
 * apimachinery's labels.Parse: requirements split on commas outside parentheses. */
#include "tests/kubesim/selectors.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOTEXISTS, OP_GT, OP_LT };

#define KS_SEL_MAX_REQ 32
#define KS_SEL_MAX_VALS 16

typedef struct ks_req {
    int op;
    char key[320];
    int nvals;
    char vals[KS_SEL_MAX_VALS][64];
} ks_req;

struct ks_lsel {
    int n;
    ks_req r[KS_SEL_MAX_REQ];
};

struct ks_fsel {
    int n;
    struct {
        int op;
        char field[128];
        char val[256];
    } r[KS_SEL_MAX_REQ];
};

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static bool label_value_ok(const char *v)
{
    size_t n = strlen(v);
    if (n == 0)
        return true;
    if (n > 63)
        return false;
    if (!isalnum((unsigned char)v[0]) || !isalnum((unsigned char)v[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.')
            return false;
    return true;
}

static bool label_key_ok(const char *k)
{
    const char *slash = strchr(k, '/');
    const char *name = k;
    if (slash) {
        size_t plen = (size_t)(slash - k);
        if (plen == 0 || plen > 253)
            return false;
        for (size_t i = 0; i < plen; i++)
            if (!isalnum((unsigned char)k[i]) && k[i] != '-' && k[i] != '.')
                return false;
        name = slash + 1;
        if (strchr(name, '/'))
            return false;
    }
    return *name && label_value_ok(name);
}

/* Reads a token made of key/value characters into buf. */
static const char *read_word(const char *p, char *buf, size_t cap)
{
    size_t n = 0;
    while (*p && (isalnum((unsigned char)*p) || strchr("-_./", *p))) {
        if (n + 1 < cap)
            buf[n++] = *p;
        else
            return NULL;
        p++;
    }
    buf[n] = 0;
    return p;
}

int ks_lsel_parse(const char *s, ks_lsel **out, rm_err *err)
{
    *out = NULL;
    ks_lsel *sel = calloc(1, sizeof(*sel));
    if (!sel)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    const char *p = s ? s : "";
    p = skip_ws(p);
    while (*p) {
        if (sel->n >= KS_SEL_MAX_REQ) {
            free(sel);
            return rm_errf(err, RM_EINVAL, "too many requirements in label selector");
        }
        ks_req *r = &sel->r[sel->n];
        memset(r, 0, sizeof(*r));
        p = skip_ws(p);
        bool neg = false;
        if (*p == '!') {
            neg = true;
            p = skip_ws(p + 1);
        }
        const char *q = read_word(p, r->key, sizeof(r->key));
        if (!q || !label_key_ok(r->key))
            goto bad;
        p = skip_ws(q);
        if (neg) {
            r->op = OP_NOTEXISTS;
        } else if (*p == ',' || *p == 0) {
            r->op = OP_EXISTS;
        } else if (p[0] == '=' || p[0] == '!' || p[0] == '>' || p[0] == '<') {
            if (p[0] == '=' && p[1] == '=') {
                r->op = OP_EQ;
                p += 2;
            } else if (p[0] == '=') {
                r->op = OP_EQ;
                p += 1;
            } else if (p[0] == '!' && p[1] == '=') {
                r->op = OP_NE;
                p += 2;
            } else if (p[0] == '>') {
                r->op = OP_GT;
                p += 1;
            } else if (p[0] == '<') {
                r->op = OP_LT;
                p += 1;
            } else
                goto bad;
            p = skip_ws(p);
            q = read_word(p, r->vals[0], sizeof(r->vals[0]));
            if (!q || !label_value_ok(r->vals[0]) || strchr(r->vals[0], '/'))
                goto bad;
            if (r->op == OP_GT || r->op == OP_LT) {
                char *end;
                if (!r->vals[0][0])
                    goto bad;
                (void)strtoll(r->vals[0], &end, 10);
                if (*end)
                    goto bad;
            }
            r->nvals = 1;
            p = skip_ws(q);
        } else if (!strncmp(p, "in", 2) || !strncmp(p, "notin", 5)) {
            if (!strncmp(p, "notin", 5)) {
                r->op = OP_NOTIN;
                p += 5;
            } else {
                r->op = OP_IN;
                p += 2;
            }
            p = skip_ws(p);
            if (*p != '(')
                goto bad;
            p = skip_ws(p + 1);
            for (;;) {
                if (r->nvals >= KS_SEL_MAX_VALS)
                    goto bad;
                q = read_word(p, r->vals[r->nvals], sizeof(r->vals[0]));
                if (!q || !label_value_ok(r->vals[r->nvals]) || strchr(r->vals[r->nvals], '/'))
                    goto bad;
                r->nvals++;
                p = skip_ws(q);
                if (*p == ',') {
                    p = skip_ws(p + 1);
                    continue;
                }
                if (*p == ')') {
                    p = skip_ws(p + 1);
                    break;
                }
                goto bad;
            }
        } else {
            goto bad;
        }
        sel->n++;
        if (*p == ',') {
            p = skip_ws(p + 1);
            if (!*p)
                goto bad;
            continue;
        }
        if (*p)
            goto bad;
    }
    *out = sel;
    return RM_OK;
bad:
    free(sel);
    return rm_errf(err, RM_EINVAL, "unable to parse requirement: invalid label selector \"%.200s\"",
                   s ? s : "");
}

bool ks_lsel_empty(const ks_lsel *sel)
{
    return !sel || sel->n == 0;
}

bool ks_lsel_match(const ks_lsel *sel, const cJSON *labels)
{
    if (!sel)
        return true;
    for (int i = 0; i < sel->n; i++) {
        const ks_req *r = &sel->r[i];
        const cJSON *v = labels ? cJSON_GetObjectItemCaseSensitive(labels, r->key) : NULL;
        const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
        bool ok = false;
        switch (r->op) {
        case OP_EQ:
            ok = s && !strcmp(s, r->vals[0]);
            break;
        case OP_NE:
            ok = !s || strcmp(s, r->vals[0]);
            break;
        case OP_EXISTS:
            ok = s != NULL;
            break;
        case OP_NOTEXISTS:
            ok = s == NULL;
            break;
        case OP_IN:
            for (int j = 0; s && j < r->nvals; j++)
                if (!strcmp(s, r->vals[j]))
                    ok = true;
            break;
        case OP_NOTIN:
            ok = true;
            for (int j = 0; s && j < r->nvals; j++)
                if (!strcmp(s, r->vals[j]))
                    ok = false;
            break;
        case OP_GT:
        case OP_LT: {
            if (!s)
                break;
            char *end;
            long long a = strtoll(s, &end, 10);
            if (*end || !*s)
                break;
            long long b = strtoll(r->vals[0], NULL, 10);
            ok = r->op == OP_GT ? a > b : a < b;
            break;
        }
        }
        if (!ok)
            return false;
    }
    return true;
}

void ks_lsel_free(ks_lsel *sel)
{
    free(sel);
}

const cJSON *ks_json_dot(const cJSON *obj, const char *path)
{
    char key[128];
    const cJSON *cur = obj;
    while (cur && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = 0;
        cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        path += n;
        if (*path == '.')
            path++;
    }
    return cur;
}

int ks_fsel_parse(const char *s, const char *const *allowed, ks_fsel **out, rm_err *err)
{
    *out = NULL;
    ks_fsel *sel = calloc(1, sizeof(*sel));
    if (!sel)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    const char *p = s ? s : "";
    while (*p) {
        const char *comma = p;
        /* a comma may be escaped with a backslash in values */
        while (*comma && !(*comma == ',' && (comma == p || comma[-1] != '\\')))
            comma++;
        size_t len = (size_t)(comma - p);
        char part[120];
        if (len >= sizeof(part) || sel->n >= KS_SEL_MAX_REQ) {
            free(sel);
            return rm_errf(err, RM_EINVAL, "invalid field selector: too long");
        }
        memcpy(part, p, len);
        part[len] = 0;
        char *op = NULL;
        int opk = OP_EQ;
        size_t oplen = 1;
        if ((op = strstr(part, "!="))) {
            opk = OP_NE;
            oplen = 2;
        } else if ((op = strstr(part, "=="))) {
            opk = OP_EQ;
            oplen = 2;
        } else if ((op = strchr(part, '='))) {
            opk = OP_EQ;
            oplen = 1;
        }
        if (!op || op == part) {
            free(sel);
            return rm_errf(err, RM_EINVAL, "invalid selector: '%.200s'; can't understand '%.200s'", s, part);
        }
        *op = 0;
        const char *field = part, *val = op + oplen;
        while (*field == ' ')
            field++;
        char *fe = op;
        while (fe > field && fe[-1] == ' ')
            *--fe = 0;
        bool ok = false;
        for (size_t i = 0; allowed && allowed[i]; i++)
            if (!strcmp(allowed[i], field))
                ok = true;
        if (!ok) {
            rm_errf(err, RM_EINVAL, "field label not supported: %.120s", field);
            free(sel);
            return RM_EINVAL;
        }
        if (strlen(field) >= sizeof(sel->r[0].field) || strlen(val) >= sizeof(sel->r[0].val)) {
            free(sel);
            return rm_errf(err, RM_EINVAL, "invalid field selector: too long");
        }
        sel->r[sel->n].op = opk;
        snprintf(sel->r[sel->n].field, sizeof(sel->r[0].field), "%s", field);
        /* unescape \, \= \\ */
        char *d = sel->r[sel->n].val;
        for (const char *v = val; *v; v++) {
            if (*v == '\\' && v[1])
                v++;
            *d++ = *v;
        }
        *d = 0;
        sel->n++;
        p = *comma ? comma + 1 : comma;
    }
    *out = sel;
    return RM_OK;
}

bool ks_fsel_empty(const ks_fsel *sel)
{
    return !sel || sel->n == 0;
}

bool ks_fsel_match(const ks_fsel *sel, const cJSON *obj)
{
    if (!sel)
        return true;
    for (int i = 0; i < sel->n; i++) {
        const cJSON *v = ks_json_dot(obj, sel->r[i].field);
        char num[64];
        const char *s = "";
        if (cJSON_IsString(v))
            s = v->valuestring;
        else if (cJSON_IsBool(v))
            s = cJSON_IsTrue(v) ? "true" : "false";
        else if (cJSON_IsNumber(v)) {
            snprintf(num, sizeof(num), "%lld", (long long)v->valuedouble);
            s = num;
        }
        bool eq = !strcmp(s, sel->r[i].val);
        if (sel->r[i].op == OP_EQ ? !eq : eq)
            return false;
    }
    return true;
}

void ks_fsel_free(ks_fsel *sel)
{
    free(sel);
}
