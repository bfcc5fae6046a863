/* patch.c — merge patch (RFC 7386), JSON patch (RFC 6902) and a simple strategic merge patch.
 *
 * Design: patches operate on a caller-owned private copy of the stored object; nothing here knows
 * about the store. JSON pointers are parsed segment by segment (~1 → '/', ~0 → '~'). */
#include "tests/kubesim/patch.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cJSON_InsertItemInArray of Debian's cJSON 1.7.15-1+deb12u4 refuses inserts past index 0;
 * this does the same by moving the tail aside. Takes ownership of item. Returns 0 or -1. */
static int insert_at(cJSON *arr, int idx, cJSON *item)
{
    cJSON *tail = cJSON_CreateArray();
    if (!tail)
        return -1;
    while (cJSON_GetArraySize(arr) > idx)
        cJSON_AddItemToArray(tail, cJSON_DetachItemFromArray(arr, idx));
    cJSON_AddItemToArray(arr, item);
    while (tail->child)
        cJSON_AddItemToArray(arr, cJSON_DetachItemFromArray(tail, 0));
    cJSON_Delete(tail);
    return 0;
}

bool ks_json_equal(const cJSON *a, const cJSON *b)
{
    if (!a || !b)
        return a == b;
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return false;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a) || cJSON_IsRaw(a))
        return a->valuestring && b->valuestring && !strcmp(a->valuestring, b->valuestring);
    if (cJSON_IsArray(a)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!ks_json_equal(x, y))
                return false;
        return !x && !y;
    }
    if (cJSON_IsObject(a)) {
        int na = 0, nb = 0;
        for (const cJSON *y = b->child; y; y = y->next)
            nb++;
        for (const cJSON *x = a->child; x; x = x->next) {
            na++;
            if (!x->string)
                return false;
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y || !ks_json_equal(x, y))
                return false;
        }
        return na == nb;
    }
    return true; /* null, true, false */
}

/* ---- merge patch ---------------------------------------------------------------------------- */
static cJSON *merge_rec(cJSON *target, const cJSON *patch)
{
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return cJSON_Duplicate(patch, 1);
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
        if (!target)
            return NULL;
    }
    for (const cJSON *p = patch->child; p; p = p->next) {
        if (!p->string)
            continue;
        if (cJSON_IsNull(p)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
            continue;
        }
        cJSON *cur = cJSON_DetachItemFromObjectCaseSensitive(target, p->string);
        cJSON *nv = merge_rec(cur, p);
        if (!nv)
            return target;
        cJSON_AddItemToObject(target, p->string, nv);
    }
    return target;
}

int ks_merge_patch(cJSON **doc, const cJSON *patch, rm_err *err)
{
    if (!patch)
        return rm_errf(err, RM_EPROTO, "empty patch");
    cJSON *r = merge_rec(*doc, patch);
    if (!r) {
        *doc = NULL;
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    *doc = r;
    return RM_OK;
}

/* ---- JSON patch ----------------------------------------------------------------------------- */
/* Splits pointer into parent container + last token. Returns parent (borrowed) or NULL. */
static int ptr_token(const char **p, char *tok, size_t cap)
{
    if (**p != '/')
        return -1;
    (*p)++;
    size_t n = 0;
    while (**p && **p != '/') {
        char c = **p;
        if (c == '~') {
            if ((*p)[1] == '0')
                c = '~';
            else if ((*p)[1] == '1')
                c = '/';
            else
                return -1;
            (*p)++;
        }
        if (n + 1 >= cap)
            return -1;
        tok[n++] = c;
        (*p)++;
    }
    tok[n] = 0;
    return 0;
}

static int parse_index(const char *tok, int size, bool allow_end, int *out)
{
    if (allow_end && !strcmp(tok, "-")) {
        *out = size;
        return 0;
    }
    if (!*tok || (tok[0] == '0' && tok[1]))
        return -1;
    long v = 0;
    for (const char *c = tok; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (*c - '0');
        if (v > 1000000)
            return -1;
    }
    if (v > size || (!allow_end && v == size))
        return -1;
    *out = (int)v;
    return 0;
}

/* Resolve pointer to (parent, last token). "" → parent NULL (root). */
static int resolve(cJSON *root, const char *path, cJSON **parent, char *last, size_t cap)
{
    *parent = NULL;
    if (!*path) {
        last[0] = 0;
        return 0;
    }
    cJSON *cur = root;
    const char *p = path;
    char tok[512];
    for (;;) {
        if (ptr_token(&p, tok, sizeof(tok)) < 0)
            return -1;
        if (!*p) {
            *parent = cur;
            snprintf(last, cap, "%s", tok);
            return strlen(tok) < cap ? 0 : -1;
        }
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else if (cJSON_IsArray(cur)) {
            int idx;
            if (parse_index(tok, cJSON_GetArraySize(cur), false, &idx) < 0)
                return -1;
            cur = cJSON_GetArrayItem(cur, idx);
        } else {
            return -1;
        }
        if (!cur)
            return -1;
    }
}

static cJSON *get_at(cJSON *root, const char *path)
{
    cJSON *parent;
    char last[512];
    if (resolve(root, path, &parent, last, sizeof(last)) < 0)
        return NULL;
    if (!parent)
        return root;
    if (cJSON_IsObject(parent))
        return cJSON_GetObjectItemCaseSensitive(parent, last);
    if (cJSON_IsArray(parent)) {
        int idx;
        if (parse_index(last, cJSON_GetArraySize(parent), false, &idx) < 0)
            return NULL;
        return cJSON_GetArrayItem(parent, idx);
    }
    return NULL;
}

/* Detach the value at path; NULL if absent. */
static cJSON *detach_at(cJSON **root, const char *path)
{
    cJSON *parent;
    char last[512];
    if (resolve(*root, path, &parent, last, sizeof(last)) < 0)
        return NULL;
    if (!parent) {
        cJSON *r = *root;
        *root = NULL;
        return r;
    }
    if (cJSON_IsObject(parent))
        return cJSON_DetachItemFromObjectCaseSensitive(parent, last);
    if (cJSON_IsArray(parent)) {
        int idx;
        if (parse_index(last, cJSON_GetArraySize(parent), false, &idx) < 0)
            return NULL;
        return cJSON_DetachItemFromArray(parent, idx);
    }
    return NULL;
}

/* Insert (add semantics); takes ownership of v on success. */
static int add_at(cJSON **root, const char *path, cJSON *v, bool replace_only)
{
    cJSON *parent;
    char last[512];
    if (resolve(*root, path, &parent, last, sizeof(last)) < 0)
        return -1;
    if (!parent) {
        cJSON_Delete(*root);
        *root = v;
        return 0;
    }
    if (cJSON_IsObject(parent)) {
        if (cJSON_GetObjectItemCaseSensitive(parent, last))
            return cJSON_ReplaceItemInObjectCaseSensitive(parent, last, v) ? 0 : -1;
        if (replace_only)
            return -1;
        return cJSON_AddItemToObject(parent, last, v) ? 0 : -1;
    }
    if (cJSON_IsArray(parent)) {
        int n = cJSON_GetArraySize(parent), idx;
        if (parse_index(last, n, !replace_only, &idx) < 0)
            return -1;
        if (replace_only)
            return cJSON_ReplaceItemInArray(parent, idx, v) ? 0 : -1;
        if (idx == n)
            return cJSON_AddItemToArray(parent, v) ? 0 : -1;
        return insert_at(parent, idx, v);
    }
    return -1;
}

int ks_json_patch(cJSON **doc, const cJSON *patch, rm_err *err)
{
    if (!cJSON_IsArray(patch))
        return rm_errf(err, RM_EPROTO, "json patch must be an array of operations");
    int i = 0;
    for (const cJSON *op = patch->child; op; op = op->next, i++) {
        const cJSON *jo = cJSON_GetObjectItemCaseSensitive(op, "op");
        const cJSON *jp = cJSON_GetObjectItemCaseSensitive(op, "path");
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(op, "value");
        const cJSON *jf = cJSON_GetObjectItemCaseSensitive(op, "from");
        if (!cJSON_IsObject(op) || !cJSON_IsString(jo) || !cJSON_IsString(jp))
            return rm_errf(err, RM_EPROTO, "json patch operation %d: missing op or path", i);
        const char *o = jo->valuestring, *path = jp->valuestring;
        if (*path && *path != '/')
            return rm_errf(err, RM_EPROTO, "json patch operation %d: invalid path %.100s", i, path);
        if (!strcmp(o, "add") || !strcmp(o, "replace")) {
            if (!jv)
                return rm_errf(err, RM_EPROTO, "json patch operation %d: missing value", i);
            cJSON *v = cJSON_Duplicate(jv, 1);
            if (!v || add_at(doc, path, v, o[0] == 'r') < 0) {
                cJSON_Delete(v);
                return rm_errf(err, RM_EINVAL, "%s operation does not apply: doc is missing path: \"%.200s\"",
                               o, path);
            }
        } else if (!strcmp(o, "remove")) {
            if (!*path)
                return rm_errf(err, RM_EINVAL, "remove operation does not apply: cannot remove the root");
            cJSON *v = detach_at(doc, path);
            if (!v)
                return rm_errf(err, RM_EINVAL,
                               "remove operation does not apply: doc is missing path: \"%.200s\"", path);
            cJSON_Delete(v);
        } else if (!strcmp(o, "move") || !strcmp(o, "copy")) {
            if (!cJSON_IsString(jf))
                return rm_errf(err, RM_EPROTO, "json patch operation %d: missing from", i);
            cJSON *v;
            if (o[0] == 'm') {
                size_t fl = strlen(jf->valuestring);
                if (!strncmp(path, jf->valuestring, fl) && path[fl] == '/')
                    return rm_errf(err, RM_EINVAL, "move operation does not apply: from is a prefix of path");
                v = detach_at(doc, jf->valuestring);
            } else {
                cJSON *src = get_at(*doc, jf->valuestring);
                v = src ? cJSON_Duplicate(src, 1) : NULL;
            }
            if (!v)
                return rm_errf(err, RM_EINVAL,
                               "%s operation does not apply: doc is missing from path: \"%.200s\"", o,
                               jf->valuestring);
            if (!*doc)
                *doc = cJSON_CreateObject();
            if (add_at(doc, path, v, false) < 0) {
                cJSON_Delete(v);
                return rm_errf(err, RM_EINVAL, "%s operation does not apply: doc is missing path: \"%.200s\"",
                               o, path);
            }
        } else if (!strcmp(o, "test")) {
            if (!jv)
                return rm_errf(err, RM_EPROTO, "json patch operation %d: missing value", i);
            cJSON *cur = get_at(*doc, path);
            if (!cur || !ks_json_equal(cur, jv))
                return rm_errf(err, RM_EINVAL, "testing value %.200s failed: test failed", path);
        } else {
            return rm_errf(err, RM_EPROTO, "Unexpected kind: %.40s", o);
        }
        if (!*doc)
            return rm_errf(err, RM_EINVAL, "patch removed the whole document");
    }
    return RM_OK;
}

/* ---- strategic merge patch ------------------------------------------------------------------ */
static const char *merge_key_for(const char *field, const cJSON *elem)
{
    static const struct {
        const char *field, *key;
    } tab[] = {
        {"containers", "name"},
        {"initContainers", "name"},
        {"ephemeralContainers", "name"},
        {"volumes", "name"},
        {"env", "name"},
        {"imagePullSecrets", "name"},
        {"volumeMounts", "mountPath"},
        {"volumeDevices", "devicePath"},
        {"ownerReferences", "uid"},
        {"conditions", "type"},
        {"hostAliases", "ip"},
        {"topologySpreadConstraints", "topologyKey"},
        {"resourceClaims", "name"},
        {"containerStatuses", "name"},
        {"initContainerStatuses", "name"},
    };
    if (!field)
        return NULL;
    if (!strcmp(field, "ports")) {
        if (elem && cJSON_GetObjectItemCaseSensitive(elem, "containerPort"))
            return "containerPort";
        return "port";
    }
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (!strcmp(tab[i].field, field))
            return tab[i].key;
    return NULL;
}

static bool is_set_list(const char *field)
{
    return field && !strcmp(field, "finalizers");
}

static cJSON *smp_rec(cJSON *target, const cJSON *patch, const char *field, rm_err *err, int *rc);

static cJSON *find_by_key(cJSON *arr, const char *key, const cJSON *val, int *idx)
{
    int i = 0;
    for (cJSON *e = arr ? arr->child : NULL; e; e = e->next, i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, key);
        if (k && ks_json_equal(k, val)) {
            if (idx)
                *idx = i;
            return e;
        }
    }
    return NULL;
}

static cJSON *smp_list(cJSON *target, const cJSON *patch, const char *field, rm_err *err, int *rc)
{
    const char *mk = merge_key_for(field, patch->child);
    if (is_set_list(field)) {
        if (!cJSON_IsArray(target)) {
            cJSON_Delete(target);
            return cJSON_Duplicate(patch, 1);
        }
        for (const cJSON *p = patch->child; p; p = p->next) {
            bool have = false;
            for (cJSON *e = target->child; e; e = e->next)
                if (ks_json_equal(e, p))
                    have = true;
            if (!have)
                cJSON_AddItemToArray(target, cJSON_Duplicate(p, 1));
        }
        return target;
    }
    /* a {$patch: replace} element replaces the whole list */
    for (const cJSON *p = patch->child; p; p = p->next) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "$patch");
        if (cJSON_IsString(d) && !strcmp(d->valuestring, "replace")) {
            cJSON *out = cJSON_CreateArray();
            for (const cJSON *q = patch->child; q; q = q->next) {
                if (q == p)
                    continue;
                cJSON_AddItemToArray(out, cJSON_Duplicate(q, 1));
            }
            cJSON_Delete(target);
            return out;
        }
    }
    if (!mk || !cJSON_IsArray(target)) {
        cJSON_Delete(target);
        cJSON *out = cJSON_CreateArray();
        for (const cJSON *q = patch->child; q; q = q->next) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(q, "$patch");
            if (cJSON_IsString(d) && !strcmp(d->valuestring, "delete"))
                continue;
            cJSON *c = cJSON_Duplicate(q, 1);
            if (cJSON_IsObject(c))
                cJSON_DeleteItemFromObjectCaseSensitive(c, "$patch");
            cJSON_AddItemToArray(out, c);
        }
        return out;
    }
    for (const cJSON *p = patch->child; p; p = p->next) {
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(p, mk);
        if (!cJSON_IsObject(p) || !kv) {
            *rc = rm_errf(err, RM_EINVAL, "map in list %s is missing the merge key %s", field, mk);
            return target;
        }
        int idx = -1;
        cJSON *cur = find_by_key(target, mk, kv, &idx);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "$patch");
        if (cJSON_IsString(d) && !strcmp(d->valuestring, "delete")) {
            if (cur)
                cJSON_DeleteItemFromArray(target, idx);
            continue;
        }
        if (cur) {
            cJSON *det = cJSON_DetachItemFromArray(target, idx);
            cJSON *nv = smp_rec(det, p, NULL, err, rc);
            insert_at(target, idx, nv);
        } else {
            cJSON *nv = smp_rec(NULL, p, NULL, err, rc);
            cJSON_AddItemToArray(target, nv);
        }
        if (*rc)
            return target;
    }
    return target;
}

static cJSON *smp_rec(cJSON *target, const cJSON *patch, const char *field, rm_err *err, int *rc)
{
    if (cJSON_IsArray(patch))
        return smp_list(target, patch, field, err, rc);
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return cJSON_Duplicate(patch, 1);
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(patch, "$patch");
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "replace")) {
        cJSON_Delete(target);
        cJSON *c = cJSON_Duplicate(patch, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(c, "$patch");
        return c;
    }
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "delete")) {
        cJSON_Delete(target);
        return cJSON_CreateObject();
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
    }
    const cJSON *retain = cJSON_GetObjectItemCaseSensitive(patch, "$retainKeys");
    if (cJSON_IsArray(retain)) {
        cJSON *e = target->child;
        while (e) {
            cJSON *next = e->next;
            bool keep = false;
            for (const cJSON *r = retain->child; r; r = r->next)
                if (cJSON_IsString(r) && e->string && !strcmp(r->valuestring, e->string))
                    keep = true;
            if (!keep)
                cJSON_Delete(cJSON_DetachItemViaPointer(target, e));
            e = next;
        }
    }
    for (const cJSON *p = patch->child; p && !*rc; p = p->next) {
        if (!p->string)
            continue;
        if (p->string[0] == '$') {
            const char *pfx = "$deleteFromPrimitiveList/";
            if (!strncmp(p->string, pfx, strlen(pfx)) && cJSON_IsArray(p)) {
                cJSON *lst = cJSON_GetObjectItemCaseSensitive(target, p->string + strlen(pfx));
                if (cJSON_IsArray(lst)) {
                    cJSON *e = lst->child;
                    while (e) {
                        cJSON *next = e->next;
                        for (const cJSON *r = p->child; r; r = r->next)
                            if (ks_json_equal(e, r)) {
                                cJSON_Delete(cJSON_DetachItemViaPointer(lst, e));
                                break;
                            }
                        e = next;
                    }
                }
            }
            continue; /* $patch, $setElementOrder/..., $retainKeys handled or dropped */
        }
        if (cJSON_IsNull(p)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
            continue;
        }
        cJSON *cur = cJSON_DetachItemFromObjectCaseSensitive(target, p->string);
        cJSON *nv = smp_rec(cur, p, p->string, err, rc);
        if (nv)
            cJSON_AddItemToObject(target, p->string, nv);
    }
    return target;
}

int ks_strategic_merge_patch(cJSON **doc, const cJSON *patch, rm_err *err)
{
    if (!cJSON_IsObject(patch))
        return rm_errf(err, RM_EPROTO, "strategic merge patch must be a JSON object");
    int rc = 0;
    cJSON *r = smp_rec(*doc, patch, NULL, err, &rc);
    *doc = r;
    if (!r)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    return rc;
}
