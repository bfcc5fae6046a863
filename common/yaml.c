/* yaml.c — Kubernetes manifests (YAML, one or several documents) into cJSON with positions
 * (see yaml.h).
 *
 * Design: libyaml's event parser drives a small recursive builder, so we see every node's mark and
 * can (a) type plain scalars by the YAML 1.2 core schema, (b) reject duplicate keys with their
 * line:column, (c) record a "dotted.path[i]" -> line:col table per document that validation errors
 * use to point at the offending line. Anchors keep their own copy of the anchored node (so merges
 * can free their sources), aliases are deep copies, and every node built counts against a budget
 * so a "billion laughs" alias bomb fails fast instead of exhausting memory. Nesting depth is capped
 * so hostile input cannot overflow the stack. */
#include "common/yaml.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define RM_YAML_MAX_FILE (16u << 20)
#define RM_YAML_MAX_NODES 1000000u      /* whole stream, aliases expanded */
#define RM_YAML_MAX_ALIAS_NODES 100000u /* nodes created by alias expansion */
#define RM_YAML_MAX_DEPTH 128
#define RM_YAML_PATH_CAP 1024

typedef struct {
    char *path;
    int line, col;
} ypos;

typedef struct {
    ypos *v;
    size_t n, cap;
} ypos_table;

struct rm_yaml_docs {
    cJSON **docs;
    ypos_table *pos;
    size_t n, cap;
};

typedef struct {
    char *name;
    cJSON *node;  /* owned copy */
    size_t count; /* nodes in it */
} yanchor;

typedef struct {
    yaml_parser_t p;
    const char *name;
    rm_err *err;
    yanchor *anchors;
    size_t nanchors, capanchors;
    size_t nodes, alias_nodes;
    ypos_table pos; /* current document */
    char path[RM_YAML_PATH_CAP];
    size_t pathlen;
    int path_overflow;
} yctx;

/* ---- errors ------------------------------------------------------------------------------------ */

static int yerr_at(yctx *c, int code, yaml_mark_t m, const char *fmt, ...) RM_PRINTF(4, 5);
static int yerr_at(yctx *c, int code, yaml_mark_t m, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rm_errf(c->err, code, "%s:%zu:%zu: %s", c->name, m.line + 1, m.column + 1, msg);
}

static int oom(yctx *c)
{
    return rm_errf(c->err, RM_ENOMEM, "%s: out of memory", c->name);
}

static int parser_error(yctx *c)
{
    yaml_mark_t m = c->p.problem_mark;
    if (c->p.error == YAML_MEMORY_ERROR)
        return oom(c);
    if (c->p.context)
        return yerr_at(c, RM_EINVAL, m, "%s %s", c->p.problem ? c->p.problem : "syntax error", c->p.context);
    return yerr_at(c, RM_EINVAL, m, "%s", c->p.problem ? c->p.problem : "syntax error");
}

static int next_event(yctx *c, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&c->p, ev))
        return parser_error(c);
    return RM_OK;
}

/* ---- positions --------------------------------------------------------------------------------- */

static void table_free(ypos_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].path);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static int record_pos(yctx *c, yaml_mark_t m)
{
    if (c->path_overflow)
        return RM_OK;
    ypos_table *t = &c->pos;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        ypos *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return oom(c);
        t->v = nv;
        t->cap = nc;
    }
    char *p = strdup(c->path);
    if (!p)
        return oom(c);
    t->v[t->n++] = (ypos){p, (int)m.line + 1, (int)m.column + 1};
    return RM_OK;
}

/* Appends ".key" (or "key" at the root) or "[i]"; returns the old length to restore. */
static size_t path_push(yctx *c, const char *key, long idx)
{
    size_t old = c->pathlen;
    int n;
    size_t room = sizeof c->path - c->pathlen;
    if (key)
        n = snprintf(c->path + c->pathlen, room, "%s%s", c->pathlen ? "." : "", key);
    else
        n = snprintf(c->path + c->pathlen, room, "[%ld]", idx);
    if (n < 0 || (size_t)n >= room) {
        c->path[old] = 0;
        c->path_overflow++;
        return old | ((size_t)1 << (sizeof(size_t) * 8 - 1));
    }
    c->pathlen += (size_t)n;
    return old;
}

static void path_pop(yctx *c, size_t old)
{
    size_t hi = (size_t)1 << (sizeof(size_t) * 8 - 1);
    if (old & hi) {
        c->path_overflow--;
        old &= ~hi;
    }
    c->pathlen = old;
    c->path[old] = 0;
}

/* ---- scalars ----------------------------------------------------------------------------------- */

static int match_all(const char *s, const char *set)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!strchr(set, *s))
            return 0;
    return 1;
}

static int is_float_text(const char *s)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (!digits)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return *p == 0;
}

/* YAML 1.2 core schema for a plain scalar; NULL on ENOMEM. */
static cJSON *plain_scalar(const char *v)
{
    if (!*v || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
        strcmp(v, "NULL") == 0)
        return cJSON_CreateNull();
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
        return cJSON_CreateTrue();
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
        return cJSON_CreateFalse();
    const char *d = v + (*v == '+' || *v == '-');
    if (match_all(d, "0123456789"))
        return cJSON_CreateNumber(strtod(v, NULL));
    if (strncmp(v, "0x", 2) == 0 && match_all(v + 2, "0123456789abcdefABCDEF"))
        return cJSON_CreateNumber((double)strtoull(v + 2, NULL, 16));
    if (strncmp(v, "0o", 2) == 0 && match_all(v + 2, "01234567"))
        return cJSON_CreateNumber((double)strtoull(v + 2, NULL, 8));
    if (is_float_text(v))
        return cJSON_CreateNumber(strtod(v, NULL));
    if (strcmp(d, ".inf") == 0 || strcmp(d, ".Inf") == 0 || strcmp(d, ".INF") == 0)
        return cJSON_CreateNumber(*v == '-' ? -INFINITY : INFINITY);
    if (strcmp(v, ".nan") == 0 || strcmp(v, ".NaN") == 0 || strcmp(v, ".NAN") == 0)
        return cJSON_CreateNumber(NAN);
    return cJSON_CreateString(v);
}

static cJSON *scalar_node(yctx *c, const yaml_event_t *ev, int *rc)
{
    const char *v = (const char *)ev->data.scalar.value;
    const char *tag = (const char *)ev->data.scalar.tag;
    cJSON *n;
    *rc = RM_OK;
    if (tag && strcmp(tag, YAML_STR_TAG) == 0)
        n = cJSON_CreateString(v);
    else if (tag && (strcmp(tag, YAML_INT_TAG) == 0 || strcmp(tag, YAML_FLOAT_TAG) == 0 ||
                     strcmp(tag, YAML_BOOL_TAG) == 0 || strcmp(tag, YAML_NULL_TAG) == 0)) {
        n = plain_scalar(v);
        int ok =
            n &&
            ((strcmp(tag, YAML_NULL_TAG) == 0 && cJSON_IsNull(n)) ||
             (strcmp(tag, YAML_BOOL_TAG) == 0 && cJSON_IsBool(n)) ||
             ((strcmp(tag, YAML_INT_TAG) == 0 || strcmp(tag, YAML_FLOAT_TAG) == 0) && cJSON_IsNumber(n)));
        if (n && !ok) {
            cJSON_Delete(n);
            *rc = yerr_at(c, RM_EINVAL, ev->start_mark, "value \"%s\" does not match tag %s", v, tag);
            return NULL;
        }
    } else if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !tag)
        n = plain_scalar(v);
    else
        n = cJSON_CreateString(v);
    if (!n)
        *rc = oom(c);
    return n;
}

/* ---- anchors ----------------------------------------------------------------------------------- */

static void anchors_clear(yctx *c)
{
    for (size_t i = 0; i < c->nanchors; i++) {
        free(c->anchors[i].name);
        cJSON_Delete(c->anchors[i].node);
    }
    c->nanchors = 0;
}

static int anchor_add(yctx *c, const char *name, const cJSON *node, size_t count, yaml_mark_t m)
{
    if (c->nodes + count > RM_YAML_MAX_NODES)
        return yerr_at(c, RM_ETOOBIG, m, "document too large (over %u nodes)", RM_YAML_MAX_NODES);
    if (c->nanchors == c->capanchors) {
        size_t nc = c->capanchors ? c->capanchors * 2 : 8;
        yanchor *na = realloc(c->anchors, nc * sizeof *na);
        if (!na)
            return oom(c);
        c->anchors = na;
        c->capanchors = nc;
    }
    yanchor *a = &c->anchors[c->nanchors];
    a->name = strdup(name);
    a->node = cJSON_Duplicate(node, 1);
    a->count = count;
    if (!a->name || !a->node) {
        free(a->name);
        cJSON_Delete(a->node);
        return oom(c);
    }
    c->nodes += count;
    c->nanchors++;
    return RM_OK;
}

/* Latest definition wins (YAML allows redefining an anchor). */
static const yanchor *anchor_find(yctx *c, const char *name)
{
    for (size_t i = c->nanchors; i-- > 0;)
        if (strcmp(c->anchors[i].name, name) == 0)
            return &c->anchors[i];
    return NULL;
}

/* ---- tree builder ------------------------------------------------------------------------------ */

static int parse_node(yctx *c, yaml_event_t *ev, int depth, cJSON **out, size_t *count);

/* The keys of one mapping, hashed: cJSON objects are lists, so checking each new key against
 * them was quadratic (100k keys took 20 s). Slots borrow the items' own name strings. */
typedef struct {
    const char **slot;
    size_t cap, n; /* cap is 0 or a power of two */
} keyset;

static size_t key_hash(const char *k)
{
    size_t h = 1469598103934665603u; /* FNV-1a */
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211u;
    return h;
}

static bool keyset_has(const keyset *ks, const char *k)
{
    if (!ks->cap)
        return false;
    for (size_t i = key_hash(k) & (ks->cap - 1);; i = (i + 1) & (ks->cap - 1)) {
        if (!ks->slot[i])
            return false;
        if (strcmp(ks->slot[i], k) == 0)
            return true;
    }
}

/* k must not be in the set yet and must outlive it. RM_OK or RM_ENOMEM. */
static int keyset_add(keyset *ks, const char *k)
{
    if ((ks->n + 1) * 2 > ks->cap) {
        keyset bigger = {calloc(ks->cap ? ks->cap * 2 : 16, sizeof(char *)), 0, 0};
        if (!bigger.slot)
            return RM_ENOMEM;
        bigger.cap = ks->cap ? ks->cap * 2 : 16;
        for (size_t i = 0; i < ks->cap; i++)
            if (ks->slot[i])
                keyset_add(&bigger, ks->slot[i]); /* cannot grow again: load stays < 1/2 */
        free(ks->slot);
        *ks = bigger;
    }
    size_t i = key_hash(k) & (ks->cap - 1);
    while (ks->slot[i])
        i = (i + 1) & (ks->cap - 1);
    ks->slot[i] = k;
    ks->n++;
    return RM_OK;
}

static int merge_into(yctx *c, cJSON *obj, keyset *keys, const cJSON *src, yaml_mark_t m)
{
    if (cJSON_IsArray(src)) {
        for (const cJSON *it = src->child; it; it = it->next)
            if (!cJSON_IsObject(it))
                return yerr_at(c, RM_EINVAL, m, "merge key \"<<\" needs a mapping or a list of mappings");
        for (const cJSON *it = src->child; it; it = it->next) {
            int rc = merge_into(c, obj, keys, it, m);
            if (rc)
                return rc;
        }
        return RM_OK;
    }
    if (!cJSON_IsObject(src))
        return yerr_at(c, RM_EINVAL, m, "merge key \"<<\" needs a mapping or a list of mappings");
    for (const cJSON *it = src->child; it; it = it->next) {
        if (keyset_has(keys, it->string))
            continue;
        cJSON *d = cJSON_Duplicate(it, 1);
        if (!d || !cJSON_AddItemToObject(obj, it->string, d)) {
            cJSON_Delete(d);
            return oom(c);
        }
        if (keyset_add(keys, d->string))
            return oom(c);
    }
    return RM_OK;
}

static int parse_mapping(yctx *c, int depth, cJSON *obj, size_t *count)
{
    cJSON *merges = NULL;
    keyset keys = {0};
    yaml_mark_t merge_mark = {0, 0, 0};
    int rc = RM_OK;
    for (;;) {
        yaml_event_t k;
        if ((rc = next_event(c, &k)))
            goto out;
        if (k.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&k);
            break;
        }
        if (k.type != YAML_SCALAR_EVENT) {
            rc = yerr_at(c, RM_EINVAL, k.start_mark, "only plain keys are supported (got a %s)",
                         k.type == YAML_ALIAS_EVENT ? "alias" : "collection");
            yaml_event_delete(&k);
            goto out;
        }
        char *key = strdup((const char *)k.data.scalar.value);
        yaml_mark_t km = k.start_mark;
        int is_merge = k.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(key ? key : "", "<<") == 0;
        yaml_event_delete(&k);
        if (!key) {
            rc = oom(c);
            goto out;
        }
        if (!is_merge && keyset_has(&keys, key)) {
            rc = yerr_at(c, RM_EINVAL, km, "duplicate key \"%s\"", key);
            free(key);
            goto out;
        }
        yaml_event_t v;
        if ((rc = next_event(c, &v))) {
            free(key);
            goto out;
        }
        size_t saved = path_push(c, is_merge ? NULL : key, 0);
        if (is_merge)
            path_pop(c, saved); /* merged keys have no position of their own */
        else if ((rc = record_pos(c, km))) {
            path_pop(c, saved);
            yaml_event_delete(&v);
            free(key);
            goto out;
        }
        cJSON *child = NULL;
        size_t n = 0;
        rc = parse_node(c, &v, depth + 1, &child, &n);
        if (!is_merge)
            path_pop(c, saved);
        if (rc) {
            free(key);
            goto out;
        }
        *count += n;
        if (is_merge) {
            if (!merges && !(merges = cJSON_CreateArray())) {
                cJSON_Delete(child);
                free(key);
                rc = oom(c);
                goto out;
            }
            cJSON_AddItemToArray(merges, child);
            merge_mark = km;
        } else if (!cJSON_AddItemToObject(obj, key, child)) {
            cJSON_Delete(child);
            free(key);
            rc = oom(c);
            goto out;
        } else if (keyset_add(&keys, child->string)) {
            free(key);
            rc = oom(c);
            goto out;
        }
        free(key);
    }
    /* explicit keys win over merged ones, whatever their order */
    for (const cJSON *m = merges ? merges->child : NULL; m && !rc; m = m->next)
        rc = merge_into(c, obj, &keys, m, merge_mark);
out:
    free(keys.slot);
    cJSON_Delete(merges);
    return rc;
}

/* The &anchor a node event defines, or NULL (an alias event only refers to one). */
static const char *event_anchor(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return (const char *)ev->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT:
        return (const char *)ev->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT:
        return (const char *)ev->data.mapping_start.anchor;
    default:
        return NULL;
    }
}

/* Consumes ev (and the events of its children). On success *out is owned by the caller. */
static int parse_node(yctx *c, yaml_event_t *ev, int depth, cJSON **out, size_t *count)
{
    int rc = RM_OK;
    char *anchor = NULL;
    yaml_mark_t start = ev->start_mark;
    cJSON *node = NULL;
    *out = NULL;
    *count = 0;
    if (depth > RM_YAML_MAX_DEPTH) {
        yaml_event_delete(ev);
        return yerr_at(c, RM_EINVAL, start, "nesting deeper than %d levels", RM_YAML_MAX_DEPTH);
    }
    if (++c->nodes > RM_YAML_MAX_NODES) {
        yaml_event_delete(ev);
        return yerr_at(c, RM_ETOOBIG, start, "document too large (over %u nodes)", RM_YAML_MAX_NODES);
    }
    const char *an = event_anchor(ev);
    if (an && !(anchor = strdup(an))) {
        yaml_event_delete(ev);
        return oom(c);
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        node = scalar_node(c, ev, &rc);
        yaml_event_delete(ev);
        *count = 1;
        break;
    case YAML_ALIAS_EVENT: {
        const yanchor *a = anchor_find(c, (const char *)ev->data.alias.anchor);
        if (!a) {
            rc = yerr_at(c, RM_EINVAL, start, "unknown anchor \"%s\"", (const char *)ev->data.alias.anchor);
        } else if (c->alias_nodes + a->count > RM_YAML_MAX_ALIAS_NODES ||
                   c->nodes + a->count > RM_YAML_MAX_NODES) {
            rc = yerr_at(c, RM_ETOOBIG, start, "alias expansion over %u nodes (alias bomb?)",
                         RM_YAML_MAX_ALIAS_NODES);
        } else {
            node = cJSON_Duplicate(a->node, 1);
            if (!node)
                rc = oom(c);
            c->alias_nodes += a->count;
            c->nodes += a->count;
            *count = a->count;
        }
        yaml_event_delete(ev);
        break;
    }
    case YAML_SEQUENCE_START_EVENT: {
        yaml_event_delete(ev);
        node = cJSON_CreateArray();
        if (!node) {
            rc = oom(c);
            break;
        }
        *count = 1;
        for (long i = 0;; i++) {
            yaml_event_t e;
            if ((rc = next_event(c, &e)))
                break;
            if (e.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&e);
                break;
            }
            size_t saved = path_push(c, NULL, i);
            rc = record_pos(c, e.start_mark);
            cJSON *child = NULL;
            size_t n = 0;
            if (!rc)
                rc = parse_node(c, &e, depth + 1, &child, &n);
            else
                yaml_event_delete(&e);
            path_pop(c, saved);
            if (rc)
                break;
            cJSON_AddItemToArray(node, child);
            *count += n;
        }
        break;
    }
    case YAML_MAPPING_START_EVENT: {
        yaml_event_delete(ev);
        node = cJSON_CreateObject();
        if (!node) {
            rc = oom(c);
            break;
        }
        size_t n = 1;
        rc = parse_mapping(c, depth, node, &n);
        *count = n;
        break;
    }
    default:
        rc = yerr_at(c, RM_EINVAL, start, "unexpected YAML event %d", (int)ev->type);
        yaml_event_delete(ev);
        break;
    }
    if (!rc && anchor)
        rc = anchor_add(c, anchor, node, *count, start);
    free(anchor);
    if (rc) {
        cJSON_Delete(node);
        return rc;
    }
    *out = node;
    return RM_OK;
}

/* ---- documents --------------------------------------------------------------------------------- */

static int docs_push(rm_yaml_docs *d, cJSON *doc, ypos_table *t)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        cJSON **nd = realloc(d->docs, nc * sizeof *nd);
        if (!nd)
            return RM_ENOMEM;
        d->docs = nd;
        ypos_table *np = realloc(d->pos, nc * sizeof *np);
        if (!np)
            return RM_ENOMEM;
        d->pos = np;
        d->cap = nc;
    }
    d->docs[d->n] = doc;
    d->pos[d->n] = *t;
    memset(t, 0, sizeof *t);
    d->n++;
    return RM_OK;
}

void rm_yaml_free(rm_yaml_docs *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        cJSON_Delete(d->docs[i]);
        table_free(&d->pos[i]);
    }
    free(d->docs);
    free(d->pos);
    free(d);
}

int rm_yaml_load(const char *text, size_t len, const char *name, rm_yaml_docs **out, rm_err *err)
{
    yctx c;
    int rc = RM_OK;
    int done = 0;
    *out = NULL;
    memset(&c, 0, sizeof c);
    c.name = name ? name : "<input>";
    c.err = err;
    if (!text)
        return rm_errf(err, RM_EINVAL, "%s: no input", c.name);
    rm_yaml_docs *d = calloc(1, sizeof *d);
    if (!d)
        return oom(&c);
    if (!yaml_parser_initialize(&c.p)) {
        free(d);
        return oom(&c);
    }
    yaml_parser_set_input_string(&c.p, (const unsigned char *)text, len);
    while (!done && !rc) {
        yaml_event_t ev;
        if ((rc = next_event(&c, &ev)))
            break;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            yaml_event_delete(&ev);
            break;
        case YAML_STREAM_END_EVENT:
            yaml_event_delete(&ev);
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT: {
            yaml_mark_t dm = ev.start_mark;
            yaml_event_delete(&ev);
            yaml_event_t root;
            if ((rc = next_event(&c, &root)))
                break;
            c.path[0] = 0;
            c.pathlen = 0;
            rc = record_pos(&c, root.start_mark.index ? root.start_mark : dm);
            cJSON *doc = NULL;
            size_t n = 0;
            if (!rc)
                rc = parse_node(&c, &root, 0, &doc, &n);
            else
                yaml_event_delete(&root);
            anchors_clear(&c); /* anchors are per document */
            if (rc)
                break;
            if (cJSON_IsNull(doc)) {
                cJSON_Delete(doc);
                table_free(&c.pos);
                break;
            }
            if (docs_push(d, doc, &c.pos) != RM_OK) {
                cJSON_Delete(doc);
                rc = oom(&c);
            }
            break;
        }
        default:
            rc = yerr_at(&c, RM_EINVAL, ev.start_mark, "unexpected YAML event %d", (int)ev.type);
            yaml_event_delete(&ev);
            break;
        }
    }
    anchors_clear(&c);
    free(c.anchors);
    table_free(&c.pos);
    yaml_parser_delete(&c.p);
    if (rc) {
        rm_yaml_free(d);
        return rc;
    }
    *out = d;
    return RM_OK;
}

int rm_yaml_load_file(const char *path, rm_yaml_docs **out, rm_err *err)
{
    *out = NULL;
    if (!path)
        return rm_errf(err, RM_EINVAL, "no file given");
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return rm_errf(err, errno == ENOENT ? RM_ENOTFOUND : RM_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 65536, n = 0;
    errno = 0;
    char *buf = malloc(cap);
    int rc = RM_OK;
    while (buf) {
        if (n == cap) {
            if (cap > RM_YAML_MAX_FILE) {
                rc = rm_errf(err, RM_ETOOBIG, "%s: larger than %u MiB", path, RM_YAML_MAX_FILE >> 20);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { /* never parse the part read so far as if it were the whole file */
                rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (!rc && n > RM_YAML_MAX_FILE)
        rc = rm_errf(err, RM_ETOOBIG, "%s: larger than %u MiB", path, RM_YAML_MAX_FILE >> 20);
    if (!rc && !buf)
        rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    if (!rc && ferror(f)) /* fopen succeeds on a directory; the read then fails with EISDIR */
        rc = rm_errf(err, RM_EIO, "%s: %s", path,
                     errno == EISDIR ? "is a directory, not a manifest file"
                     : errno         ? strerror(errno)
                                     : "read error");
    if (!is_stdin)
        fclose(f);
    if (!rc)
        rc = rm_yaml_load(buf, n, is_stdin ? "<stdin>" : path, out, err);
    free(buf);
    return rc;
}

size_t rm_yaml_count(const rm_yaml_docs *d)
{
    return d ? d->n : 0;
}

cJSON *rm_yaml_doc(const rm_yaml_docs *d, size_t i)
{
    return d && i < d->n ? d->docs[i] : NULL;
}

cJSON *rm_yaml_take(rm_yaml_docs *d, size_t i)
{
    if (!d || i >= d->n)
        return NULL;
    cJSON *doc = d->docs[i];
    d->docs[i] = NULL;
    return doc;
}

int rm_yaml_pos(const rm_yaml_docs *d, size_t i, const char *path, int *line, int *col)
{
    if (!d || i >= d->n || !path)
        return RM_ENOTFOUND;
    const ypos_table *t = &d->pos[i];
    char buf[RM_YAML_PATH_CAP];
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        for (size_t k = 0; k < t->n; k++) {
            if (strcmp(t->v[k].path, buf) == 0) {
                *line = t->v[k].line;
                *col = t->v[k].col;
                return RM_OK;
            }
        }
        if (!buf[0])
            return RM_ENOTFOUND;
        /* strip the last ".key" or "[i]" */
        size_t l = strlen(buf);
        if (buf[l - 1] == ']') {
            char *lb = strrchr(buf, '[');
            if (lb)
                *lb = 0;
            else
                buf[0] = 0;
        } else {
            char *dot = strrchr(buf, '.');
            char *lb = strrchr(buf, '[');
            if (dot && (!lb || dot > lb))
                *dot = 0;
            else
                buf[0] = 0;
        }
    }
}
