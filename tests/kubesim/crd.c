/* crd.c — CustomResourceDefinitions: validation and status (rule L1), registering the kinds they
 * define, structural-schema pruning, defaulting and validation (rule L2), and the small JSONPath
 * subset printer columns and scale paths use.
 *
 * Design: a CRD write is validated and given its status (NamesAccepted, Established) in the same
 * commit, so `kubectl wait --for condition=established` returns at once; its served versions
 * become ks_kind entries sharing one table. Schema handling is one recursive walk that prunes,
 * defaults and checks in a single pass. CEL (x-kubernetes-validations) is not evaluated. */
#include "tests/kubesim/kubesim.h"
#include "tests/kubesim/patch.h"
#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/json.h"

static void sset(cJSON *o, const char *k, cJSON *v)
{
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else
        cJSON_AddItemToObject(o, k, v);
}

static cJSON *cond(const char *type, const char *reason, const char *msg, const char *ts)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", type);
    cJSON_AddStringToObject(c, "status", "True");
    cJSON_AddStringToObject(c, "lastTransitionTime", ts);
    cJSON_AddStringToObject(c, "reason", reason);
    cJSON_AddStringToObject(c, "message", msg);
    return c;
}

int ks_crd_prepare(cJSON *crd, rm_err *err)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(crd, "spec");
    if (!cJSON_IsObject(spec))
        return rm_err_field(err, RM_EINVAL, "spec", "Required value");
    const char *group = ks_sget(spec, "group");
    if (!group || !*group || !strchr(group, '.'))
        return rm_err_field(err, RM_EINVAL, "spec.group",
                            "Invalid value: should be a domain with at least one dot");
    cJSON *names = cJSON_GetObjectItemCaseSensitive(spec, "names");
    const char *plural = ks_sget(names, "plural"), *kind = ks_sget(names, "kind");
    if (!plural || !*plural)
        return rm_err_field(err, RM_EINVAL, "spec.names.plural", "Required value");
    if (!kind || !*kind)
        return rm_err_field(err, RM_EINVAL, "spec.names.kind", "Required value");
    for (const char *p = plural; *p; p++)
        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-')
            return rm_err_field(err, RM_EINVAL, "spec.names.plural",
                                "Invalid value: \"%s\": a lowercase RFC 1123 label", plural);
    char want[512];
    snprintf(want, sizeof(want), "%s.%s", plural, group);
    const char *name = ks_sget(cJSON_GetObjectItemCaseSensitive(crd, "metadata"), "name");
    if (!name || strcmp(name, want))
        return rm_err_field(err, RM_EINVAL, "metadata.name",
                            "Invalid value: \"%s\": must be spec.names.plural+\".\"+spec.group",
                            name ? name : "");
    const char *scope = ks_sget(spec, "scope");
    if (!scope || (strcmp(scope, "Namespaced") && strcmp(scope, "Cluster")))
        return rm_err_field(err, RM_EINVAL, "spec.scope",
                            "Unsupported value: supported values: \"Cluster\", \"Namespaced\"");
    cJSON *versions = cJSON_GetObjectItemCaseSensitive(spec, "versions");
    if (!cJSON_IsArray(versions) || !cJSON_GetArraySize(versions))
        return rm_err_field(err, RM_EINVAL, "spec.versions",
                            "Invalid value: must have exactly one version marked as storage version");
    int storage = 0;
    const char *storage_name = NULL;
    for (cJSON *v = versions->child; v; v = v->next) {
        if (!ks_sget(v, "name"))
            return rm_err_field(err, RM_EINVAL, "spec.versions[].name", "Required value");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "storage"))) {
            storage++;
            storage_name = ks_sget(v, "name");
        }
        const cJSON *sch = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "schema"),
                                                            "openAPIV3Schema");
        if (!cJSON_IsObject(sch))
            return rm_err_field(err, RM_EINVAL, "spec.versions[].schema.openAPIV3Schema",
                                "Required value: schemas are required");
    }
    if (storage != 1)
        return rm_err_field(err, RM_EINVAL, "spec.versions",
                            "Invalid value: must have exactly one version marked as storage version");
    if (!ks_sget(names, "singular")) {
        char low[64];
        size_t i = 0;
        for (; kind[i] && i + 1 < sizeof(low); i++)
            low[i] = (char)tolower((unsigned char)kind[i]);
        low[i] = 0;
        cJSON_AddStringToObject(names, "singular", low);
    }
    if (!ks_sget(names, "listKind")) {
        char lk[96];
        snprintf(lk, sizeof(lk), "%sList", kind);
        cJSON_AddStringToObject(names, "listKind", lk);
    }
    if (!cJSON_GetObjectItemCaseSensitive(spec, "conversion")) {
        cJSON *c = cJSON_AddObjectToObject(spec, "conversion");
        cJSON_AddStringToObject(c, "strategy", "None");
    }
    char ts[32];
    ks_now_rfc3339(ts);
    cJSON *st = cJSON_CreateObject();
    sset(st, "acceptedNames", cJSON_Duplicate(names, 1));
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON_AddItemToArray(conds, cond("NamesAccepted", "NoConflicts", "no conflicts found", ts));
    cJSON_AddItemToArray(
        conds, cond("Established", "InitialNamesAccepted", "the initial names have been accepted", ts));
    cJSON *sv = cJSON_AddArrayToObject(st, "storedVersions");
    cJSON_AddItemToArray(sv, cJSON_CreateString(storage_name));
    sset(crd, "status", st);
    return RM_OK;
}

void ks_crd_register(ks_server *s, const cJSON *crd)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(crd, "spec");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(spec, "names");
    const char *crd_name = ks_sget(cJSON_GetObjectItemCaseSensitive(crd, "metadata"), "name");
    if (!crd_name)
        return;
    ks_table *tab = NULL;
    for (size_t i = 0; i < s->nkinds; i++)
        if (s->kinds[i]->type == KS_T_CR && !strcmp(s->kinds[i]->crd_name, crd_name))
            tab = s->kinds[i]->tab;
    /* versions not served any more stop answering */
    for (size_t i = 0; i < s->nkinds; i++)
        if (s->kinds[i]->type == KS_T_CR && !strcmp(s->kinds[i]->crd_name, crd_name))
            s->kinds[i]->served = false;
    const cJSON *versions = cJSON_GetObjectItemCaseSensitive(spec, "versions");
    for (const cJSON *v = versions ? versions->child : NULL; v; v = v->next) {
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "served")))
            continue;
        ks_kind k;
        memset(&k, 0, sizeof(k));
        snprintf(k.group, sizeof(k.group), "%s", ks_sget(spec, "group"));
        snprintf(k.version, sizeof(k.version), "%s", ks_sget(v, "name"));
        snprintf(k.resource, sizeof(k.resource), "%s", ks_sget(names, "plural"));
        snprintf(k.singular, sizeof(k.singular), "%s",
                 ks_sget(names, "singular") ? ks_sget(names, "singular") : "");
        snprintf(k.kind, sizeof(k.kind), "%s", ks_sget(names, "kind"));
        snprintf(k.list_kind, sizeof(k.list_kind), "%s",
                 ks_sget(names, "listKind") ? ks_sget(names, "listKind") : "List");
        const cJSON *sn = cJSON_GetObjectItemCaseSensitive(names, "shortNames");
        for (const cJSON *e = sn ? sn->child : NULL; e && k.nshort < 4; e = e->next)
            if (cJSON_IsString(e))
                snprintf(k.short_names[k.nshort++], sizeof(k.short_names[0]), "%s", e->valuestring);
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(names, "categories");
        for (const cJSON *e = cat ? cat->child : NULL; e && k.ncat < 4; e = e->next)
            if (cJSON_IsString(e))
                snprintf(k.categories[k.ncat++], sizeof(k.categories[0]), "%s", e->valuestring);
        k.namespaced = !ks_sget(spec, "scope") || !strcmp(ks_sget(spec, "scope"), "Namespaced");
        k.served = true;
        k.storage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "storage"));
        k.type = KS_T_CR;
        const cJSON *sub = cJSON_GetObjectItemCaseSensitive(v, "subresources");
        k.has_status = cJSON_GetObjectItemCaseSensitive(sub, "status") != NULL;
        const cJSON *scale = cJSON_GetObjectItemCaseSensitive(sub, "scale");
        if (scale) {
            k.has_scale = true;
            snprintf(k.scale_spec, sizeof(k.scale_spec), "%s",
                     ks_sget(scale, "specReplicasPath") ? ks_sget(scale, "specReplicasPath")
                                                        : ".spec.replicas");
            snprintf(k.scale_status, sizeof(k.scale_status), "%s",
                     ks_sget(scale, "statusReplicasPath") ? ks_sget(scale, "statusReplicasPath") : "");
            snprintf(k.scale_selector, sizeof(k.scale_selector), "%s",
                     ks_sget(scale, "labelSelectorPath") ? ks_sget(scale, "labelSelectorPath") : "");
        }
        k.schema = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetObjectItemCaseSensitive(v, "schema"), "openAPIV3Schema"),
                                   1);
        const cJSON *cols = cJSON_GetObjectItemCaseSensitive(v, "additionalPrinterColumns");
        k.columns = cols ? cJSON_Duplicate(cols, 1) : NULL;
        snprintf(k.crd_name, sizeof(k.crd_name), "%s", crd_name);
        k.tab = tab;
        ks_kind *nk = ks_kind_add(s, &k);
        if (!nk) {
            rm_warn("kubesim: kind registry full, %s/%s not served", k.group, k.version);
            cJSON_Delete(k.schema);
            cJSON_Delete(k.columns);
            continue;
        }
        if (!tab)
            tab = nk->tab;
    }
}

void ks_crd_unregister(ks_server *s, const char *crd_name)
{
    for (size_t i = 0; i < s->nkinds; i++)
        if (s->kinds[i]->type == KS_T_CR && !strcmp(s->kinds[i]->crd_name, crd_name)) {
            s->kinds[i]->served = false;
            ks_wake(s->kinds[i]->tab, NULL, NULL, NULL);
        }
}

/* ---- structural schema ---------------------------------------------------------------------- */
static void join_path(char *out, size_t cap, const char *base, const char *key)
{
    if (base && *base)
        snprintf(out, cap, "%s.%s", base, key);
    else
        snprintf(out, cap, "%s", key);
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "string";
    if (cJSON_IsBool(v))
        return "boolean";
    if (cJSON_IsNumber(v))
        return v->valuedouble == floor(v->valuedouble) ? "integer" : "number";
    if (cJSON_IsArray(v))
        return "array";
    if (cJSON_IsObject(v))
        return "object";
    return "null";
}

static int walk(const cJSON *sch, cJSON *node, const char *path, bool root, cJSON *unknown, rm_err *err);

static int check_scalar(const cJSON *sch, const cJSON *node, const char *path, rm_err *err)
{
    const char *type = ks_sget(sch, "type");
    bool ios = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, "x-kubernetes-int-or-string"));
    if (ios) {
        if (!cJSON_IsString(node) && !(cJSON_IsNumber(node) && node->valuedouble == floor(node->valuedouble)))
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: \"%s\": %s in body must be of type int-or-string: \"%s\"",
                                type_name(node), path, type_name(node));
        return 0;
    }
    if (type) {
        bool ok = true;
        if (!strcmp(type, "string"))
            ok = cJSON_IsString(node);
        else if (!strcmp(type, "integer"))
            ok = cJSON_IsNumber(node) && node->valuedouble == floor(node->valuedouble);
        else if (!strcmp(type, "number"))
            ok = cJSON_IsNumber(node);
        else if (!strcmp(type, "boolean"))
            ok = cJSON_IsBool(node);
        else if (!strcmp(type, "object"))
            ok = cJSON_IsObject(node);
        else if (!strcmp(type, "array"))
            ok = cJSON_IsArray(node);
        if (!ok)
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: \"%s\": %s in body must be of type %s: \"%s\"",
                                type_name(node), path, type, type_name(node));
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sch, "enum");
    if (cJSON_IsArray(en)) {
        bool hit = false;
        for (const cJSON *e = en->child; e; e = e->next)
            if (ks_json_equal(e, node))
                hit = true;
        if (!hit) {
            char vals[300] = "";
            size_t off = 0;
            for (const cJSON *e = en->child; e && off < sizeof(vals); e = e->next) {
                char *p = cJSON_PrintUnformatted(e);
                off += (size_t)snprintf(vals + off, sizeof(vals) - off, "%s%s", off ? ", " : "", p ? p : "");
                free(p);
            }
            char *nv = cJSON_PrintUnformatted(node);
            rm_err_field(err, RM_EINVAL, path, "Unsupported value: %s: supported values: %s", nv ? nv : "",
                         vals);
            free(nv);
            return RM_EINVAL;
        }
    }
    if (cJSON_IsNumber(node)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(sch, "minimum");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(sch, "maximum");
        bool exmn = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMinimum"));
        bool exmx = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMaximum"));
        if (cJSON_IsNumber(mn) &&
            (exmn ? node->valuedouble <= mn->valuedouble : node->valuedouble < mn->valuedouble))
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: %g: %s in body should be greater than %s%g",
                                node->valuedouble, path, exmn ? "" : "or equal to ", mn->valuedouble);
        if (cJSON_IsNumber(mx) &&
            (exmx ? node->valuedouble >= mx->valuedouble : node->valuedouble > mx->valuedouble))
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: %g: %s in body should be less than %s%g", node->valuedouble,
                                path, exmx ? "" : "or equal to ", mx->valuedouble);
    }
    if (cJSON_IsString(node)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(sch, "minLength");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(sch, "maxLength");
        size_t len = strlen(node->valuestring);
        if (cJSON_IsNumber(mn) && (double)len < mn->valuedouble)
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: \"%.60s\": %s in body should be at least %g chars long",
                                node->valuestring, path, mn->valuedouble);
        if (cJSON_IsNumber(mx) && (double)len > mx->valuedouble)
            return rm_err_field(err, RM_EINVAL, path, "Too long: may not be more than %g bytes",
                                mx->valuedouble);
        /* pattern: ECMA-262 in the API server; POSIX extended here, the same for the anchored
         * character-class patterns CRDs use (an uncompilable one is not enforced) */
        const char *pat = ks_sget(sch, "pattern");
        regex_t re;
        if (pat && regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0) {
            int nomatch = regexec(&re, node->valuestring, 0, NULL, 0);
            regfree(&re);
            if (nomatch)
                return rm_err_field(err, RM_EINVAL, path,
                                    "Invalid value: \"%.60s\": %s in body should match '%s'",
                                    node->valuestring, path, pat);
        }
    }
    if (cJSON_IsArray(node)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(sch, "minItems");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(sch, "maxItems");
        int n = cJSON_GetArraySize(node);
        if (cJSON_IsNumber(mn) && n < mn->valuedouble)
            return rm_err_field(err, RM_EINVAL, path,
                                "Invalid value: %d: %s in body should have at least %g items", n, path,
                                mn->valuedouble);
        if (cJSON_IsNumber(mx) && n > mx->valuedouble)
            return rm_err_field(err, RM_EINVAL, path, "Too many: %d: must have at most %g items", n,
                                mx->valuedouble);
    }
    return 0;
}

static int walk(const cJSON *sch, cJSON *node, const char *path, bool root, cJSON *unknown, rm_err *err)
{
    if (!cJSON_IsObject(sch) || !node)
        return 0;
    int rc = check_scalar(sch, node, path, err);
    if (rc)
        return rc;
    bool preserve =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, "x-kubernetes-preserve-unknown-fields"));
    if (cJSON_IsObject(node)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
        bool embedded = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, "x-kubernetes-embedded-resource"));
        /* defaults first (rule L2), then recurse into what is there */
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
            const cJSON *def = cJSON_GetObjectItemCaseSensitive(p, "default");
            cJSON *cur = cJSON_GetObjectItemCaseSensitive(node, p->string);
            bool nullable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "nullable"));
            if (cur && cJSON_IsNull(cur) && !nullable) {
                cJSON_DeleteItemFromObjectCaseSensitive(node, p->string);
                cur = NULL;
            }
            if (!cur && def)
                cJSON_AddItemToObject(node, p->string, cJSON_Duplicate(def, 1));
        }
        cJSON *c = node->child;
        while (c) {
            cJSON *next = c->next;
            if (!c->string) {
                c = next;
                continue;
            }
            char sub[512];
            join_path(sub, sizeof(sub), path, c->string);
            if ((root || embedded) && (!strcmp(c->string, "apiVersion") || !strcmp(c->string, "kind") ||
                                       !strcmp(c->string, "metadata"))) {
                /* a CRD may restrict metadata.name (and generateName), nothing else in metadata */
                const cJSON *ns = root && !strcmp(c->string, "metadata") && props
                                      ? rm_json_path(props, "metadata.properties.name")
                                      : NULL;
                const cJSON *name = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "name") : NULL;
                if (ns && name && (rc = check_scalar(ns, name, "metadata.name", err)) != 0)
                    return rc;
                c = next;
                continue;
            }
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, c->string) : NULL;
            if (ps) {
                if (cJSON_IsNull(c) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ps, "nullable"))) {
                    c = next;
                    continue;
                }
                rc = walk(ps, c, sub, false, unknown, err);
            } else if (cJSON_IsObject(addl)) {
                rc = walk(addl, c, sub, false, unknown, err);
            } else if (cJSON_IsTrue(addl) || preserve) {
                rc = 0;
            } else {
                if (unknown && cJSON_GetArraySize(unknown) < 32)
                    cJSON_AddItemToArray(unknown, cJSON_CreateString(sub));
                cJSON_Delete(cJSON_DetachItemViaPointer(node, c));
                rc = 0;
            }
            if (rc)
                return rc;
            c = next;
        }
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(node, r->valuestring)) {
                char sub[512];
                join_path(sub, sizeof(sub), path, r->valuestring);
                return rm_err_field(err, RM_EINVAL, sub, "Required value");
            }
    } else if (cJSON_IsArray(node)) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items");
        int i = 0;
        for (cJSON *c = node->child; c; c = c->next, i++) {
            char sub[512];
            snprintf(sub, sizeof(sub), "%s[%d]", path, i);
            rc = walk(items, c, sub, false, unknown, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int ks_schema_apply(const cJSON *schema, cJSON *obj, cJSON *unknown, rm_err *err)
{
    return walk(schema, obj, "", true, unknown, err) ? RM_EINVAL : RM_OK;
}

/* ---- JSONPath subset ------------------------------------------------------------------------ */
const cJSON *ks_jsonpath(const cJSON *obj, const char *path)
{
    if (!path)
        return NULL;
    const char *p = path;
    if (*p == '{')
        p++;
    if (*p == '$')
        p++;
    const cJSON *cur = obj;
    while (cur && *p && *p != '}') {
        if (*p == '.') {
            p++;
            char key[128];
            size_t n = 0;
            while (*p && *p != '.' && *p != '[' && *p != '}' && n + 1 < sizeof(key))
                key[n++] = *p++;
            key[n] = 0;
            if (!n)
                continue;
            cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        } else if (*p == '[') {
            p++;
            if (*p == '?') {
                /* [?(@.key=="value")] */
                char key[128] = "", val[128] = "";
                const char *q = strstr(p, "@.");
                if (!q)
                    return NULL;
                q += 2;
                size_t n = 0;
                while (*q && *q != '=' && *q != '!' && n + 1 < sizeof(key))
                    key[n++] = *q++;
                key[n] = 0;
                while (*q == '=' || *q == ' ')
                    q++;
                char quote = *q;
                if (quote == '"' || quote == '\'') {
                    q++;
                    n = 0;
                    while (*q && *q != quote && n + 1 < sizeof(val))
                        val[n++] = *q++;
                    val[n] = 0;
                }
                const cJSON *found = NULL;
                for (const cJSON *e = cJSON_IsArray(cur) ? cur->child : NULL; e; e = e->next) {
                    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(e, key);
                    if (cJSON_IsString(kv) && !strcmp(kv->valuestring, val)) {
                        found = e;
                        break;
                    }
                }
                cur = found;
                const char *close = strstr(p, ")]");
                if (!close)
                    return NULL;
                p = close + 2;
            } else {
                char *end;
                long idx = strtol(p, &end, 10);
                if (*end != ']')
                    return NULL;
                p = end + 1;
                int size = cJSON_IsArray(cur) ? cJSON_GetArraySize(cur) : 0;
                if (idx < 0)
                    idx += size;
                cur = (idx >= 0 && idx < size) ? cJSON_GetArrayItem(cur, (int)idx) : NULL;
            }
        } else {
            return NULL;
        }
    }
    return cur;
}
