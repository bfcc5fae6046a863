/* tj_runtime.c — training runtimes: the reference, the merge, a runtime's checks and the
 * resolution from YAML files (see tj_runtime.h; docs/trainingjob-api.md#runtimes).
 *
 * Design: the merge works on JSON, before the job is parsed, so the one strict parser, the
 * defaults and the validation see a single spec whatever its fields' origin, and an error names
 * the field as the job's effective spec has it. */
#include "common/tj_runtime.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/tj_internal.h"
#include "common/trainingjob.h"
#include "common/yaml.h"

const char *rm_runtime_ref_kind(const rm_runtime_ref *r)
{
    return r && !r->cluster ? RM_RUNTIME_KIND : RM_CLUSTER_RUNTIME_KIND;
}

int rm_runtime_ref_from_json(const cJSON *ref, const char *ctx, rm_runtime_ref *out, rm_err *err)
{
    static const char *const keys[] = {"apiGroup", "kind", "name", NULL};
    char f[FIELD_CAP];
    memset(out, 0, sizeof *out);
    out->cluster = true; /* Trainer v2's default kind */
    if (!cJSON_IsObject(ref))
        return rm_err_field(err, RM_EINVAL, ctx, "must be an object {kind, name}");
    int rc = rm_json_no_unknown(ref, keys, ctx, err);
    if (rc)
        return rc;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(ref, "apiGroup");
    if (g && !cJSON_IsNull(g) && (!cJSON_IsString(g) || strcmp(g->valuestring, RM_TJ_GROUP) != 0)) {
        tj_join(f, ctx, "apiGroup");
        return rm_err_field(err, RM_EINVAL, f, "must be %s", RM_TJ_GROUP);
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(ref, "kind");
    if (k && !cJSON_IsNull(k)) {
        if (cJSON_IsString(k) && strcmp(k->valuestring, RM_RUNTIME_KIND) == 0)
            out->cluster = false;
        else if (!cJSON_IsString(k) || strcmp(k->valuestring, RM_CLUSTER_RUNTIME_KIND) != 0) {
            tj_join(f, ctx, "kind");
            return rm_err_field(err, RM_EINVAL, f, "must be one of %s, %s", RM_CLUSTER_RUNTIME_KIND,
                                RM_RUNTIME_KIND);
        }
    }
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(ref, "name");
    tj_join(f, ctx, "name");
    if (!cJSON_IsString(n))
        return rm_err_field(err, RM_EINVAL, f, "required: the name of the %s", rm_runtime_ref_kind(out));
    if (!tj_dns1123(n->valuestring, 1, RM_RUNTIME_NAME_MAX))
        return rm_err_field(err, RM_EINVAL, f,
                            "must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.', at "
                            "most %d characters)",
                            RM_RUNTIME_NAME_MAX);
    snprintf(out->name, sizeof out->name, "%s", n->valuestring);
    out->present = true;
    return RM_OK;
}

int rm_runtime_ref_of(const cJSON *job, rm_runtime_ref *out, rm_err *err)
{
    const cJSON *ref = rm_json_path(job, "spec.runtimeRef");
    if (!ref || cJSON_IsNull(ref)) {
        memset(out, 0, sizeof *out);
        return RM_OK;
    }
    return rm_runtime_ref_from_json(ref, "spec.runtimeRef", out, err);
}

/* ---- the merge ---- */

/* A list that merges by name: non-empty, every item an object with a string "name". */
static bool named_list(const cJSON *a)
{
    if (!cJSON_IsArray(a) || !a->child)
        return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsObject(it) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "name")))
            return false;
    }
    return true;
}

static const cJSON *find_named(const cJSON *a, const char *name)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring, name) == 0)
            return it;
    }
    return NULL;
}

static cJSON *merge(const cJSON *base, const cJSON *over, int depth, bool *oom);

/* Append merge(b, o) to out (under key when out is an object); an absent result is skipped. */
static void put(cJSON *out, const char *key, const cJSON *b, const cJSON *o, int depth, bool *oom)
{
    bool sub_oom = false;
    cJSON *m = merge(b, o, depth + 1, &sub_oom);
    if (sub_oom) {
        *oom = true;
        return;
    }
    if (!m)
        return;
    bool ok = key ? cJSON_AddItemToObject(out, key, m) : cJSON_AddItemToArray(out, m);
    if (!ok) {
        cJSON_Delete(m);
        *oom = true;
    }
}

static cJSON *merge(const cJSON *base, const cJSON *over, int depth, bool *oom)
{
    *oom = false;
    if (!over) {
        if (!base || cJSON_IsNull(base))
            return NULL;
        cJSON *c = cJSON_Duplicate(base, 1);
        *oom = !c;
        return c;
    }
    if (cJSON_IsNull(over))
        return NULL; /* the job removes the runtime's value */
    const cJSON *it;
    cJSON *out = NULL;
    if (depth < RM_RUNTIME_MERGE_DEPTH && cJSON_IsObject(base) && cJSON_IsObject(over)) {
        if (!(out = cJSON_CreateObject()))
            goto oom;
        cJSON_ArrayForEach(it, base)
        {
            if (it->string)
                put(out, it->string, it, cJSON_GetObjectItemCaseSensitive(over, it->string), depth, oom);
            if (*oom)
                goto oom;
        }
        cJSON_ArrayForEach(it, over)
        {
            if (it->string && !cJSON_GetObjectItemCaseSensitive(base, it->string))
                put(out, it->string, NULL, it, depth, oom);
            if (*oom)
                goto oom;
        }
        return out;
    }
    if (depth < RM_RUNTIME_MERGE_DEPTH && named_list(base) && named_list(over)) {
        if (!(out = cJSON_CreateArray()))
            goto oom;
        cJSON_ArrayForEach(it, base)
        {
            const char *nm = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
            put(out, NULL, it, find_named(over, nm), depth, oom);
            if (*oom)
                goto oom;
        }
        cJSON_ArrayForEach(it, over)
        {
            if (!find_named(base, cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring))
                put(out, NULL, NULL, it, depth, oom);
            if (*oom)
                goto oom;
        }
        return out;
    }
    /* a scalar, a list that does not merge by name, a change of type: the job's value */
    if ((out = cJSON_Duplicate(over, 1)))
        return out;
oom:
    cJSON_Delete(out);
    *oom = true;
    return NULL;
}

cJSON *rm_runtime_merge(const cJSON *runtime, const cJSON *job, bool *oom)
{
    bool dummy;
    return merge(runtime, job, 0, oom ? oom : &dummy);
}

int rm_runtime_apply(cJSON *job, const cJSON *tmpl, rm_err *err)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(job, "spec");
    if (!cJSON_IsObject(spec))
        return rm_err_field(err, RM_EINVAL, "spec", "must be an object");
    bool oom = false;
    cJSON *m = rm_runtime_merge(tmpl, spec, &oom);
    if (!m)
        return oom ? rm_errf(err, RM_ENOMEM, "out of memory")
                   : rm_err_field(err, RM_EINVAL, "spec", "is empty");
    if (!cJSON_ReplaceItemInObjectCaseSensitive(job, "spec", m)) {
        cJSON_Delete(m);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    return RM_OK;
}

/* ---- a runtime's checks ---- */

int rm_runtime_check(const cJSON *rt_obj, rm_err *err)
{
    static const char *const k_top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    static const char *const k_spec[] = {"template", NULL};
    if (!cJSON_IsObject(rt_obj))
        return rm_errf(err, RM_EINVAL, "a runtime must be an object");
    int rc = rm_json_no_unknown(rt_obj, k_top, "", err);
    if (rc)
        return rc;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rt_obj, "apiVersion");
    if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, RM_TJ_API_VERSION) != 0))
        return rm_err_field(err, RM_EINVAL, "apiVersion", "must be %s", RM_TJ_API_VERSION);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(rt_obj, "kind");
    if (k && (!cJSON_IsString(k) || (strcmp(k->valuestring, RM_RUNTIME_KIND) != 0 &&
                                     strcmp(k->valuestring, RM_CLUSTER_RUNTIME_KIND) != 0)))
        return rm_err_field(err, RM_EINVAL, "kind", "must be %s or %s", RM_CLUSTER_RUNTIME_KIND,
                            RM_RUNTIME_KIND);
    if (!cJSON_IsString(rm_json_path(rt_obj, "metadata.name")))
        return rm_err_field(err, RM_EINVAL, "metadata.name", "required");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(rt_obj, "spec");
    if (!cJSON_IsObject(spec))
        return rm_err_field(err, RM_EINVAL, "spec", "required: an object with spec.template");
    if ((rc = rm_json_no_unknown(spec, k_spec, "spec", err)))
        return rc;
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(spec, "template");
    if (!cJSON_IsObject(tmpl))
        return rm_err_field(err, RM_EINVAL, "spec.template", "required: a TrainingJob spec");
    if (cJSON_GetObjectItemCaseSensitive(tmpl, "runtimeRef"))
        return rm_err_field(err, RM_EINVAL, "spec.template.runtimeRef",
                            "a runtime cannot reference another runtime");
    /* the template alone parses as a TrainingJob spec (strict): a typo is the runtime's error,
     * named in the runtime, not the job's */
    cJSON *fake = cJSON_CreateObject(), *md = cJSON_CreateObject(), *dup = cJSON_Duplicate(tmpl, 1);
    if (!fake || !md || !dup || !cJSON_AddStringToObject(md, "name", "runtime")) {
        cJSON_Delete(fake);
        cJSON_Delete(md);
        cJSON_Delete(dup);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    cJSON_AddItemToObject(fake, "metadata", md);
    cJSON_AddItemToObject(fake, "spec", dup);
    rm_tj tj;
    rm_err pe = {0};
    rc = rm_tj_from_json(fake, &tj, &pe);
    cJSON_Delete(fake);
    if (rc == RM_OK) {
        rm_tj_free(&tj);
        return RM_OK;
    }
    /* "spec.training.x: msg" -> "spec.template.training.x: msg" */
    if (strncmp(pe.field, "spec.", 5) == 0) {
        char f[FIELD_CAP];
        const char *msg = pe.msg;
        size_t fl = strlen(pe.field);
        if (strncmp(msg, pe.field, fl) == 0 && msg[fl] == ':')
            msg += fl + 1 + (msg[fl + 1] == ' ');
        rm_sfmt(f, sizeof f, "spec.template.%s", pe.field + 5);
        return rm_err_field(err, rc, f, "%s", msg);
    }
    *err = pe;
    return rc;
}

int rm_runtime_ref_error(const rm_runtime_ref *ref, const char *why, rm_err *err)
{
    return rm_err_field(err, RM_EINVAL, "spec.runtimeRef.name", "%s \"%s\" %s", rm_runtime_ref_kind(ref),
                        ref->name, why);
}

/* ---- `ringmaster run --runtimes PATH` ---- */

typedef struct local_find {
    const rm_runtime_ref *ref;
    const char *ns; /* the job's namespace */
    cJSON *found;   /* owned copy of the match */
    char where[512];
    int matches;
} local_find;

static bool matches(const cJSON *doc, const local_find *f)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    const cJSON *n = rm_json_path(doc, "metadata.name");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, rm_runtime_ref_kind(f->ref)) != 0 ||
        !cJSON_IsString(n) || strcmp(n->valuestring, f->ref->name) != 0)
        return false;
    const cJSON *ns = rm_json_path(doc, "metadata.namespace");
    return f->ref->cluster || !cJSON_IsString(ns) || strcmp(ns->valuestring, f->ns) == 0;
}

static int scan_file(const char *file, local_find *f, rm_err *err)
{
    rm_yaml_docs *d = NULL;
    rm_err ye = {0};
    if (rm_yaml_load_file(file, &d, &ye) != RM_OK)
        return rm_errf(err, RM_EINVAL, "--runtimes: %s", ye.msg[0] ? ye.msg : file);
    for (size_t i = 0; i < rm_yaml_count(d); i++) {
        const cJSON *doc = rm_yaml_doc(d, i);
        if (!matches(doc, f))
            continue;
        if (f->matches++ == 0) {
            f->found = cJSON_Duplicate(doc, 1);
            rm_sfmt(f->where, sizeof f->where, "%s", file);
            if (!f->found) {
                rm_yaml_free(d);
                return rm_errf(err, RM_ENOMEM, "out of memory");
            }
        }
    }
    rm_yaml_free(d);
    return RM_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool yaml_name(const char *n)
{
    size_t l = strlen(n);
    return n[0] != '.' &&
           ((l > 5 && strcmp(n + l - 5, ".yaml") == 0) || (l > 4 && strcmp(n + l - 4, ".yml") == 0));
}

/* The files of a folder in name order (so "two matches" always names the same files). */
static int scan_dir(const char *dir, local_find *f, rm_err *err)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return rm_errf(err, RM_EINVAL, "--runtimes: cannot read the folder %s", dir);
    char *names[RM_RUNTIME_MAX_FILES];
    int n = 0, rc = RM_OK;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        if (!yaml_name(de->d_name))
            continue;
        if (n == RM_RUNTIME_MAX_FILES) {
            rc = rm_errf(err, RM_EINVAL, "--runtimes: more than %d YAML files in %s", RM_RUNTIME_MAX_FILES,
                         dir);
            break;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, de->d_name);
    }
    closedir(dp);
    if (rc == RM_OK)
        qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n; i++) {
        if (rc == RM_OK)
            rc = scan_file(names[i], f, err);
        free(names[i]);
    }
    return rc;
}

int rm_runtime_resolve_files(cJSON *job, const char *path, rm_err *err)
{
    rm_runtime_ref ref;
    int rc = rm_runtime_ref_of(job, &ref, err);
    if (rc || !ref.present)
        return rc;
    if (!path || !*path)
        return rm_runtime_ref_error(&ref,
                                    "is not known here: give the file or folder that defines it with "
                                    "--runtimes (ringmaster run does not read the cluster)",
                                    err);
    const cJSON *ns = rm_json_path(job, "metadata.namespace");
    local_find f = {.ref = &ref, .ns = cJSON_IsString(ns) ? ns->valuestring : "default"};
    struct stat st;
    if (stat(path, &st) != 0)
        return rm_errf(err, RM_EINVAL, "--runtimes: %s does not exist", path);
    rc = S_ISDIR(st.st_mode) ? scan_dir(path, &f, err) : scan_file(path, &f, err);
    if (rc == RM_OK && f.matches == 0) {
        char why[600];
        rm_sfmt(why, sizeof why, "not found in %s", path);
        rc = rm_runtime_ref_error(&ref, why, err);
    } else if (rc == RM_OK && f.matches > 1) {
        char why[700];
        rm_sfmt(why, sizeof why, "is defined %d times under %s (first in %s)", f.matches, path, f.where);
        rc = rm_runtime_ref_error(&ref, why, err);
    }
    if (rc == RM_OK) {
        rm_err re = {0};
        if (rm_runtime_check(f.found, &re) != RM_OK) {
            char why[700];
            rm_sfmt(why, sizeof why, "(%s) is invalid: %s", f.where, re.msg);
            rc = rm_runtime_ref_error(&ref, why, err);
        } else {
            rc = rm_runtime_apply(job, rm_json_path(f.found, "spec.template"), err);
        }
    }
    cJSON_Delete(f.found);
    return rc;
}
