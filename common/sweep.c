/* sweep.c — the TrainingSweep core (see sweep.h): parse, validate, expand, set, stop, reconcile.
 *
 * Design: the trial template is not re-described here. A parameter path is checked by setting a
 * value into a copy of the template and handing the result to the TrainingJob parser and validator
 * (strict: unknown fields are errors), so the sweep accepts exactly what a TrainingJob accepts and
 * the two can never disagree. Random values come from a counter-based generator (splitmix64 of
 * seed, trial index and parameter index), so trial i is the same whoever asks and in whatever order. */
#include "common/sweep.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

static const char *const algo_names[] = {"grid", "random", NULL};
static const char *const metric_names[] = {"testAccuracy", "trainLoss", "valLoss", NULL};
static const char *const sweep_phase_names[] = {"Pending", "Running", "Succeeded", "Failed"};
static const char *const trial_phase_names[] = {"Pending", "Running", "Succeeded", "Failed", "Stopped"};
static const char *const cond_names[] = {"Running", "Succeeded", "Failed"};

const char *rm_sweep_phase_name(rm_sweep_phase p)
{
    return (unsigned)p < RM_ARRAY_LEN(sweep_phase_names) ? sweep_phase_names[p] : "Unknown";
}
const char *rm_trial_phase_name(rm_trial_phase p)
{
    return (unsigned)p < RM_ARRAY_LEN(trial_phase_names) ? trial_phase_names[p] : "Unknown";
}
const char *rm_sweep_metric_name(rm_sweep_metric m)
{
    return (unsigned)m < RM_ARRAY_LEN(metric_names) - 1 ? metric_names[m] : "unknown";
}

static bool finished(rm_trial_phase p)
{
    return p == RM_TRIAL_SUCCEEDED || p == RM_TRIAL_FAILED || p == RM_TRIAL_STOPPED;
}

/* ---- random: splitmix64, counter based ------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) for (seed, trial, param). */
static double unit_draw(uint64_t seed, int trial, int param)
{
    uint64_t z = mix64(mix64(seed) ^ mix64(((uint64_t)(unsigned)trial << 16) ^ (uint64_t)(unsigned)param));
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- the dotted-path setter -------------------------------------------------------------------- */

int rm_sweep_set_path(cJSON *spec, const char *path, const cJSON *value, rm_err *err)
{
    char buf[256];
    if (!spec || !cJSON_IsObject(spec) || !path || !value)
        return rm_errf(err, RM_EINVAL, "set_path: bad arguments");
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return rm_errf(err, RM_EINVAL, "path must be 1..%zu characters", sizeof buf - 1);
    memcpy(buf, path, len + 1);
    cJSON *cur = spec;
    char *seg = buf;
    for (;;) {
        char *dot = strchr(seg, '.');
        if (dot)
            *dot = 0;
        if (!*seg)
            return rm_errf(err, RM_EINVAL, "%s: empty path segment", path);
        cJSON *child = cJSON_GetObjectItemCaseSensitive(cur, seg);
        if (!dot) {
            cJSON *copy = cJSON_Duplicate(value, 1);
            if (!copy)
                return rm_errf(err, RM_ENOMEM, "out of memory");
            if (child)
                cJSON_ReplaceItemInObjectCaseSensitive(cur, seg, copy);
            else
                cJSON_AddItemToObject(cur, seg, copy);
            return RM_OK;
        }
        if (!child) {
            child = cJSON_AddObjectToObject(cur, seg);
            if (!child)
                return rm_errf(err, RM_ENOMEM, "out of memory");
        } else if (!cJSON_IsObject(child)) {
            return rm_errf(err, RM_EINVAL, "%s: %s is not an object", path, seg);
        }
        cur = child;
        seg = dot + 1;
    }
}

/* ---- median rule -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

bool rm_sweep_median_stop(double value, const double *finished_v, int n, bool maximize, int min_trials,
                          double *median)
{
    double tmp[RM_SWEEP_MAX_TRIALS];
    int m = 0;
    for (int i = 0; i < n && m < (int)RM_ARRAY_LEN(tmp); i++)
        if (isfinite(finished_v[i]))
            tmp[m++] = finished_v[i];
    double med = NAN;
    if (m > 0) {
        qsort(tmp, (size_t)m, sizeof tmp[0], cmp_double);
        med = m % 2 ? tmp[m / 2] : (tmp[m / 2 - 1] + tmp[m / 2]) / 2;
    }
    if (median)
        *median = med;
    if (m == 0 || m < (min_trials > 0 ? min_trials : 1) || !isfinite(value))
        return false;
    return maximize ? value < med : value > med;
}

/* ---- expansion ---------------------------------------------------------------------------------- */

static int grid_size(const rm_sweep_spec *s)
{
    long long n = 1;
    for (int p = 0; p < s->nparams; p++) {
        n *= cJSON_GetArraySize(s->params[p].values);
        if (n > 1000000)
            return 1000001;
    }
    return (int)n;
}

static double range_point(const rm_sweep_param *p, double u)
{
    double v = p->log ? exp(log(p->min) + u * (log(p->max) - log(p->min))) : p->min + u * (p->max - p->min);
    if (p->integer)
        v = round(v);
    if (v < p->min)
        v = p->min;
    if (v > p->max)
        v = p->max;
    return v;
}

/* Trial `index`'s value of parameter p (owned copy). */
static cJSON *param_value(const rm_sweep_spec *s, int index, int p)
{
    const rm_sweep_param *pp = &s->params[p];
    if (s->algorithm == RM_SWEEP_GRID) {
        int rest = index;
        for (int q = s->nparams - 1; q > p; q--)
            rest /= cJSON_GetArraySize(s->params[q].values);
        int n = cJSON_GetArraySize(pp->values);
        return cJSON_Duplicate(cJSON_GetArrayItem(pp->values, rest % n), 1);
    }
    double u = unit_draw(s->seed, index, p);
    if (pp->range)
        return cJSON_CreateNumber(range_point(pp, u));
    int n = cJSON_GetArraySize(pp->values);
    int k = (int)(u * n);
    if (k >= n)
        k = n - 1;
    return cJSON_Duplicate(cJSON_GetArrayItem(pp->values, k), 1);
}

cJSON *rm_sweep_trial_params(const rm_sweep *sw, int index)
{
    if (!sw || index < 0 || index >= sw->spec.trials)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    for (int p = 0; o && p < sw->spec.nparams; p++) {
        cJSON *v = param_value(&sw->spec, index, p);
        if (!v) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, sw->spec.params[p].path, v);
    }
    return o;
}

const char *rm_sweep_trial_name(const rm_sweep *sw, int index, char *buf, size_t cap)
{
    rm_sfmt(buf, cap, "%s-%d", sw->name ? sw->name : "sweep", index);
    return buf;
}

/* A TrainingJob object from the template with `values` ({path: value}) applied. */
static cJSON *make_trial(const rm_sweep *sw, const char *name, const cJSON *values, int index, rm_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *spec = cJSON_Duplicate(sw->spec.trial_template, 1);
    if (!o || !spec)
        goto oom;
    cJSON_AddStringToObject(o, "apiVersion", RM_TJ_API_VERSION);
    cJSON_AddStringToObject(o, "kind", RM_TJ_KIND);
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    if (!md)
        goto oom;
    cJSON_AddStringToObject(md, "name", name);
    if (sw->namespace_)
        cJSON_AddStringToObject(md, "namespace", sw->namespace_);
    cJSON *lb = cJSON_AddObjectToObject(md, "labels");
    if (!lb)
        goto oom;
    if (sw->name)
        cJSON_AddStringToObject(lb, RM_SWEEP_LABEL, sw->name);
    if (index >= 0) {
        char ib[16];
        rm_sfmt(ib, sizeof ib, "%d", index);
        cJSON_AddStringToObject(lb, RM_SWEEP_INDEX_LABEL, ib);
    }
    for (const cJSON *v = values ? values->child : NULL; v; v = v->next) {
        int rc = rm_sweep_set_path(spec, v->string, v, err);
        if (rc) {
            cJSON_Delete(o);
            cJSON_Delete(spec);
            return NULL;
        }
    }
    cJSON_AddItemToObject(o, "spec", spec);
    return o;
oom:
    cJSON_Delete(o);
    cJSON_Delete(spec);
    rm_errf(err, RM_ENOMEM, "out of memory");
    return NULL;
}

cJSON *rm_sweep_trial_json(const rm_sweep *sw, int index, rm_err *err)
{
    char name[128];
    cJSON *vals = rm_sweep_trial_params(sw, index);
    if (!vals) {
        rm_errf(err, RM_EINVAL, "trial %d: no such trial (or out of memory)", index);
        return NULL;
    }
    cJSON *o = make_trial(sw, rm_sweep_trial_name(sw, index, name, sizeof name), vals, index, err);
    cJSON_Delete(vals);
    return o;
}

int rm_sweep_trial_tj(const rm_sweep *sw, int index, rm_tj *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    cJSON *o = rm_sweep_trial_json(sw, index, err);
    if (!o)
        return err && err->code ? err->code : RM_ENOMEM;
    int rc = rm_tj_from_json(o, out, err);
    cJSON_Delete(o);
    if (rc)
        return rc;
    rm_tj_defaults(out);
    rc = rm_tj_validate(out, err);
    if (rc)
        rm_tj_free(out);
    return rc;
}

/* ---- parse and validate ------------------------------------------------------------------------- */

static int enum_of(const cJSON *o, const char *k, const char *ctx, const char *const *names, int *out,
                   rm_err *err)
{
    const char *s = NULL;
    int rc = rm_json_str(o, k, false, ctx, &s, err);
    if (rc == RM_ENOTFOUND)
        return RM_OK;
    if (rc)
        return rc;
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) {
            *out = i;
            return RM_OK;
        }
    char f[160], list[96] = "";
    rm_sfmt(f, sizeof f, "%s%s%s", ctx, *ctx ? "." : "", k);
    for (int j = 0; names[j]; j++) {
        size_t l = strlen(list);
        rm_sfmt(list + l, sizeof list - l, "%s%s", j ? ", " : "", names[j]);
    }
    return rm_err_field(err, RM_EINVAL, f, "must be one of %s (got \"%s\")", list, s);
}

static int opt_int(const cJSON *o, const char *k, const char *ctx, int lo, int hi, int *out, bool *given,
                   rm_err *err)
{
    int64_t v;
    int rc = rm_json_int(o, k, false, ctx, &v, err);
    if (rc == RM_ENOTFOUND)
        return RM_OK;
    if (rc)
        return rc;
    if (v < lo || v > hi) {
        char f[160];
        rm_sfmt(f, sizeof f, "%s%s%s", ctx, *ctx ? "." : "", k);
        return rm_err_field(err, RM_EINVAL, f, "must be between %d and %d (got %lld)", lo, hi, (long long)v);
    }
    *out = (int)v;
    if (given)
        *given = true;
    return RM_OK;
}

/* Does the TrainingJob parser's error say the path itself (or a prefix of it) is not a field? */
static bool unknown_field_of(const rm_err *e, const char *path)
{
    char full[300];
    rm_sfmt(full, sizeof full, "spec.%s", path);
    size_t fl = strlen(e->field);
    if (!strstr(e->msg, "unknown field") || fl == 0 || strncmp(full, e->field, fl) != 0)
        return false;
    return full[fl] == 0 || full[fl] == '.';
}

/* Check one value of parameter p against the TrainingJob schema: the template with it set must
 * parse and validate. where = "values[2]" / "min" / "max". */
static int check_value(const rm_sweep *sw, int p, const char *where, const cJSON *v, rm_err *err)
{
    const char *path = sw->spec.params[p].path;
    char pctx[64];
    rm_sfmt(pctx, sizeof pctx, "spec.parameters[%d]", p);
    cJSON *vals = cJSON_CreateObject();
    if (!vals)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    cJSON_AddItemToObject(vals, path, cJSON_Duplicate(v, 1));
    rm_err e = {0};
    cJSON *o = make_trial(sw, "trial-check", vals, -1, &e);
    cJSON_Delete(vals);
    char f[96];
    if (!o) {
        if (e.code == RM_ENOMEM)
            return rm_errf(err, RM_ENOMEM, "out of memory");
        rm_sfmt(f, sizeof f, "%s.path", pctx);
        return rm_err_field(err, RM_EINVAL, f, "%s is not a TrainingJob spec field (%s)", path, e.msg);
    }
    rm_tj tj;
    int rc = rm_tj_from_json(o, &tj, &e);
    cJSON_Delete(o);
    if (rc == RM_OK) {
        rm_tj_defaults(&tj);
        rc = rm_tj_validate(&tj, &e);
        rm_tj_free(&tj);
    }
    if (rc == RM_OK)
        return RM_OK;
    if (rc == RM_ENOMEM)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    if (unknown_field_of(&e, path)) {
        rm_sfmt(f, sizeof f, "%s.path", pctx);
        return rm_err_field(err, RM_EINVAL, f, "%s is not a TrainingJob spec field", path);
    }
    rm_sfmt(f, sizeof f, "%s.%s", pctx, where);
    return rm_err_field(err, RM_EINVAL, f, "%s", e.msg);
}

static int parse_param(const cJSON *po, int p, rm_sweep_param *out, rm_err *err)
{
    static const char *const keys[] = {"path", "values", "min", "max", "scale", "count", NULL};
    static const char *const scales[] = {"linear", "log", NULL};
    char ctx[64], f[96];
    int rc = RM_OK;
    const char *path = NULL;
    const cJSON *vals = NULL;
    rm_sfmt(ctx, sizeof ctx, "spec.parameters[%d]", p);
    if (!cJSON_IsObject(po))
        return rm_err_field(err, RM_EINVAL, ctx, "must be an object");
    TRY(rm_json_no_unknown(po, keys, ctx, err));
    TRY(rm_json_str(po, "path", true, ctx, &path, err));
    rm_sfmt(f, sizeof f, "%s.path", ctx);
    size_t pl = strlen(path);
    if (pl == 0 || pl > 200 || path[0] == '.' || path[pl - 1] == '.' || strstr(path, "..") ||
        strpbrk(path, "[]* "))
        return rm_err_field(err, RM_EINVAL, f,
                            "must be a dotted path of field names such as "
                            "training.optimizer.lr (got \"%s\")",
                            path);
    if (strcmp(path, "template") == 0 || strncmp(path, "template.", 9) == 0)
        return rm_err_field(err, RM_EINVAL, f,
                            "%s: the pod template is opaque to ringmaster and "
                            "cannot be swept; sweep TrainingJob fields such as training.*",
                            path);
    if (strcmp(path, "training") == 0)
        return rm_err_field(err, RM_EINVAL, f,
                            "training: sweep a field inside it, such as "
                            "training.optimizer.lr");
    out->path = strdup(path);
    if (!out->path)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    rc = rm_json_arr(po, "values", false, ctx, &vals, err);
    if (rc && rc != RM_ENOTFOUND)
        return rc;
    bool has_min = cJSON_GetObjectItemCaseSensitive(po, "min") != NULL;
    bool has_max = cJSON_GetObjectItemCaseSensitive(po, "max") != NULL;
    bool has_range_keys = has_min || has_max || cJSON_GetObjectItemCaseSensitive(po, "scale") ||
                          cJSON_GetObjectItemCaseSensitive(po, "count");
    if (vals) {
        if (has_range_keys)
            return rm_err_field(err, RM_EINVAL, ctx,
                                "give either values or min/max/scale/count, "
                                "not both");
        int n = cJSON_GetArraySize(vals);
        rm_sfmt(f, sizeof f, "%s.values", ctx);
        if (n < 1 || n > RM_SWEEP_MAX_VALUES)
            return rm_err_field(err, RM_EINVAL, f, "must have 1..%d values (got %d)", RM_SWEEP_MAX_VALUES, n);
        out->values = cJSON_Duplicate(vals, 1);
        return out->values ? RM_OK : rm_errf(err, RM_ENOMEM, "out of memory");
    }
    if (!has_min || !has_max)
        return rm_err_field(err, RM_EINVAL, ctx, "needs values, or min and max");
    TRY(rm_json_num(po, "min", true, ctx, &out->min, err));
    TRY(rm_json_num(po, "max", true, ctx, &out->max, err));
    int scale = 0;
    TRY(enum_of(po, "scale", ctx, scales, &scale, err));
    out->log = scale == 1;
    out->count = 3;
    TRY(opt_int(po, "count", ctx, 1, RM_SWEEP_MAX_VALUES, &out->count, NULL, err));
    out->range = true;
    if (!(out->max >= out->min)) {
        rm_sfmt(f, sizeof f, "%s.max", ctx);
        return rm_err_field(err, RM_EINVAL, f, "must be >= min (%g)", out->min);
    }
    if (out->log && !(out->min > 0)) {
        rm_sfmt(f, sizeof f, "%s.min", ctx);
        return rm_err_field(err, RM_EINVAL, f, "must be > 0 with scale: log (got %g)", out->min);
    }
    out->integer = out->min == floor(out->min) && out->max == floor(out->max) && fabs(out->min) < 1e15 &&
                   fabs(out->max) < 1e15;
    out->values = cJSON_CreateArray();
    if (!out->values)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    for (int k = 0; k < out->count; k++) {
        double u = out->count == 1 ? 0 : (double)k / (out->count - 1);
        cJSON_AddItemToArray(out->values, cJSON_CreateNumber(range_point(out, u)));
    }
out:
    return rc;
}

static int parse_spec(const cJSON *sp, rm_sweep *sw, rm_err *err)
{
    static const char *const keys[] = {"algorithm",      "seed",          "maxTrials",
                                       "parallelTrials", "objective",     "earlyStopping",
                                       "parameters",     "trialTemplate", NULL};
    static const char *const obj_keys[] = {"metric", "goal", NULL};
    static const char *const es_keys[] = {"rule", "startEpoch", "minTrials", NULL};
    static const char *const goals[] = {"maximize", "minimize", NULL};
    static const char *const rules[] = {"median", NULL};
    rm_sweep_spec *s = &sw->spec;
    int rc = RM_OK, algo = 0;
    const cJSON *o = NULL, *params = NULL, *tmpl = NULL;
    bool max_given = false;
    TRY(rm_json_no_unknown(sp, keys, "spec", err));
    TRY(enum_of(sp, "algorithm", "spec", algo_names, &algo, err));
    s->algorithm = (rm_sweep_algo)algo;
    {
        int64_t seed = 1;
        rc = rm_json_int(sp, "seed", false, "spec", &seed, err);
        if (rc && rc != RM_ENOTFOUND)
            goto out;
        if (seed < 0) {
            rc = rm_err_field(err, RM_EINVAL, "spec.seed", "must be >= 0");
            goto out;
        }
        s->seed = (uint64_t)seed;
        rc = RM_OK;
    }
    TRY(opt_int(sp, "maxTrials", "spec", 1, RM_SWEEP_MAX_TRIALS, &s->max_trials, &max_given, err));
    s->parallel_trials = 1;
    TRY(opt_int(sp, "parallelTrials", "spec", 1, RM_SWEEP_MAX_PARALLEL, &s->parallel_trials, NULL, err));
    rc = rm_json_obj(sp, "objective", false, "spec", &o, err);
    if (rc && rc != RM_ENOTFOUND)
        goto out;
    rc = RM_OK;
    s->maximize = true;
    if (o) {
        int m = 0, g = -1;
        TRY(rm_json_no_unknown(o, obj_keys, "spec.objective", err));
        TRY(enum_of(o, "metric", "spec.objective", metric_names, &m, err));
        s->metric = (rm_sweep_metric)m;
        s->maximize = s->metric == RM_SWEEP_TEST_ACCURACY;
        TRY(enum_of(o, "goal", "spec.objective", goals, &g, err));
        if (g >= 0)
            s->maximize = g == 0;
    }
    o = NULL;
    rc = rm_json_obj(sp, "earlyStopping", false, "spec", &o, err);
    if (rc && rc != RM_ENOTFOUND)
        goto out;
    rc = RM_OK;
    if (o) {
        int rule = 0;
        s->early_stopping = true;
        s->start_epoch = 2;
        s->min_trials = 2;
        TRY(rm_json_no_unknown(o, es_keys, "spec.earlyStopping", err));
        TRY(enum_of(o, "rule", "spec.earlyStopping", rules, &rule, err));
        TRY(opt_int(o, "startEpoch", "spec.earlyStopping", 1, 100000, &s->start_epoch, NULL, err));
        TRY(opt_int(o, "minTrials", "spec.earlyStopping", 1, RM_SWEEP_MAX_TRIALS, &s->min_trials, NULL, err));
    }
    TRY(rm_json_obj(sp, "trialTemplate", true, "spec", &tmpl, err));
    s->trial_template = cJSON_Duplicate(tmpl, 1);
    if (!s->trial_template) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    TRY(rm_json_arr(sp, "parameters", true, "spec", &params, err));
    s->nparams = cJSON_GetArraySize(params);
    if (s->nparams < 1 || s->nparams > RM_SWEEP_MAX_PARAMS) {
        rc = rm_err_field(err, RM_EINVAL, "spec.parameters", "must have 1..%d entries (got %d)",
                          RM_SWEEP_MAX_PARAMS, s->nparams);
        s->nparams = 0;
        goto out;
    }
    {
        int p = 0;
        for (const cJSON *po = params->child; po; po = po->next, p++)
            TRY(parse_param(po, p, &s->params[p], err));
        for (p = 0; p < s->nparams; p++)
            for (int q = 0; q < p; q++)
                if (strcmp(s->params[p].path, s->params[q].path) == 0) {
                    char f[64];
                    rm_sfmt(f, sizeof f, "spec.parameters[%d].path", p);
                    rc =
                        rm_err_field(err, RM_EINVAL, f, "%s is already parameters[%d]", s->params[p].path, q);
                    goto out;
                }
    }
    if (s->algorithm == RM_SWEEP_GRID) {
        int g = grid_size(s);
        if (!max_given && g > RM_SWEEP_MAX_TRIALS) {
            rc = rm_err_field(err, RM_EINVAL, "spec.parameters",
                              "the grid has %s%d points, more "
                              "than %d trials; set spec.maxTrials to run its first ones",
                              g > 1000000 ? "over " : "", g > 1000000 ? 1000000 : g, RM_SWEEP_MAX_TRIALS);
            goto out;
        }
        s->trials = max_given && s->max_trials < g ? s->max_trials : g;
        if (!max_given)
            s->max_trials = g;
    } else {
        if (!max_given) {
            rc = rm_err_field(err, RM_EINVAL, "spec.maxTrials", "required with algorithm: random");
            goto out;
        }
        s->trials = s->max_trials;
    }
out:
    return rc;
}

/* Everything that needs the TrainingJob validator: the template alone, every value, every trial. */
static int validate(rm_sweep *sw, rm_err *err)
{
    rm_sweep_spec *s = &sw->spec;
    char name[160];
    rm_err e = {0};
    int rc;
    { /* the template alone (with a trial's name, so a too-long sweep name is caught) */
        cJSON *o = make_trial(
            sw, rm_sweep_trial_name(sw, s->trials > 0 ? s->trials - 1 : 0, name, sizeof name), NULL, -1, &e);
        if (!o)
            return rm_errf(err, RM_ENOMEM, "out of memory");
        rm_tj tj;
        rc = rm_tj_from_json(o, &tj, &e);
        cJSON_Delete(o);
        if (rc == RM_OK) {
            rm_tj_defaults(&tj);
            s->epochs = tj.spec.training.epochs;
            rc = rm_tj_validate(&tj, &e);
            rm_tj_free(&tj);
        }
        if (rc == RM_ENOMEM)
            return rm_errf(err, rc, "out of memory");
        if (rc) {
            if (strncmp(e.field, "metadata.name", 13) == 0)
                return rm_err_field(err, RM_EINVAL, "metadata.name",
                                    "trial names %s-<index> "
                                    "must be valid TrainingJob names: %s",
                                    sw->name, e.msg);
            char f[160];
            /* spec.X -> spec.trialTemplate.X */
            rm_sfmt(f, sizeof f, "spec.trialTemplate%s", e.field[0] ? e.field + 4 : "");
            return rm_err_field(err, RM_EINVAL, f, "%s", e.msg);
        }
    }
    for (int p = 0; p < s->nparams; p++) {
        const rm_sweep_param *pp = &s->params[p];
        if (pp->range) {
            cJSON *mn = cJSON_CreateNumber(pp->integer ? round(pp->min) : pp->min);
            cJSON *mx = cJSON_CreateNumber(pp->integer ? round(pp->max) : pp->max);
            rc = mn && mx ? check_value(sw, p, "min", mn, err) : RM_ENOMEM;
            if (rc == RM_OK)
                rc = check_value(sw, p, "max", mx, err);
            cJSON_Delete(mn);
            cJSON_Delete(mx);
            if (rc == RM_ENOMEM)
                return rm_errf(err, rc, "out of memory");
            if (rc)
                return rc;
        }
        int k = 0;
        for (const cJSON *v = pp->values->child; v; v = v->next, k++) {
            char where[32];
            rm_sfmt(where, sizeof where, "values[%d]", k);
            rc = check_value(sw, p, where, v, err);
            if (rc)
                return rc; /* an expected user error: no check-trail log */
        }
    }
    for (int i = 0; i < s->trials; i++) {
        rm_tj tj;
        rc = rm_sweep_trial_tj(sw, i, &tj, &e);
        if (rc == RM_OK) {
            rm_tj_free(&tj);
            continue;
        }
        cJSON *v = rm_sweep_trial_params(sw, i);
        char *vs = v ? cJSON_PrintUnformatted(v) : NULL;
        cJSON_Delete(v);
        rc = rm_err_field(err, RM_EINVAL, "spec.parameters", "trial %d %s: %s", i, vs ? vs : "", e.msg);
        free(vs);
        return rc;
    }
    return RM_OK;
}

static int parse_status(const cJSON *so, rm_sweep *sw, rm_err *err);

int rm_sweep_from_json(const cJSON *obj, rm_sweep *out, rm_err *err)
{
    static const char *const k_top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    int rc = RM_OK;
    const cJSON *md = NULL, *sp = NULL, *st = NULL;
    const char *s = NULL;
    memset(out, 0, sizeof *out);
    out->status.best = -1;
    if (!obj || !cJSON_IsObject(obj))
        return rm_errf(err, RM_EINVAL, "a TrainingSweep must be a JSON object");
    TRY(rm_json_no_unknown(obj, k_top, "", err));
    TRY(rm_json_str(obj, "apiVersion", true, "", &s, err));
    if (strcmp(s, RM_TJ_API_VERSION) != 0) {
        rc = rm_err_field(err, RM_EINVAL, "apiVersion", "must be %s (got \"%s\")", RM_TJ_API_VERSION, s);
        goto out;
    }
    TRY(rm_json_str(obj, "kind", true, "", &s, err));
    if (strcmp(s, RM_SWEEP_KIND) != 0) {
        rc = rm_err_field(err, RM_EINVAL, "kind", "must be %s (got \"%s\")", RM_SWEEP_KIND, s);
        goto out;
    }
    TRY(rm_json_obj(obj, "metadata", true, "", &md, err));
    TRY(rm_json_str(md, "name", true, "metadata", &s, err));
    out->name = strdup(s);
    s = NULL;
    rc = rm_json_str(md, "namespace", false, "metadata", &s, err);
    if (rc && rc != RM_ENOTFOUND)
        goto out;
    out->namespace_ = strdup(s ? s : "default");
    s = NULL;
    if (rm_json_str(md, "uid", false, "metadata", &s, err) == RM_OK)
        out->uid = strdup(s);
    s = NULL;
    if (rm_json_str(md, "resourceVersion", false, "metadata", &s, err) == RM_OK)
        out->resource_version = strdup(s);
    rc = rm_json_int(md, "generation", false, "metadata", &out->generation, err);
    if (rc && rc != RM_ENOTFOUND)
        goto out;
    rc = RM_OK;
    if (!out->name || !out->namespace_) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    TRY(rm_json_obj(obj, "spec", true, "", &sp, err));
    TRY(parse_spec(sp, out, err));
    TRY(validate(out, err));
    TRY(rm_sweep_status_init(out));
    rc = rm_json_obj(obj, "status", false, "", &st, err);
    if (rc && rc != RM_ENOTFOUND)
        goto out;
    rc = RM_OK;
    if (st)
        TRY(parse_status(st, out, err));
out:
    if (rc)
        rm_sweep_free(out);
    return rc;
}

void rm_sweep_status_free(rm_sweep_status *st)
{
    if (!st)
        return;
    free(st->trials);
    memset(st, 0, sizeof *st);
    st->best = -1;
}

int rm_sweep_status_copy(rm_sweep_status *dst, const rm_sweep_status *src)
{
    *dst = *src;
    dst->trials = NULL;
    if (src->total > 0 && src->trials) {
        dst->trials = malloc((size_t)src->total * sizeof *dst->trials);
        if (!dst->trials)
            return RM_ENOMEM;
        memcpy(dst->trials, src->trials, (size_t)src->total * sizeof *dst->trials);
    }
    return RM_OK;
}

static void trial_reset(rm_sweep_trial *t)
{
    memset(t, 0, sizeof *t);
    for (int e = 0; e < RM_SWEEP_MAX_EPOCHS; e++)
        t->obj[e] = NAN;
    t->final_obj = NAN;
}

int rm_sweep_status_init(rm_sweep *sw)
{
    rm_sweep_status *st = &sw->status;
    free(st->trials);
    st->trials = NULL;
    st->total = sw->spec.trials;
    st->best = -1;
    st->best_objective = NAN;
    if (st->total > 0) {
        st->trials = malloc((size_t)st->total * sizeof *st->trials);
        if (!st->trials)
            return RM_ENOMEM;
        for (int i = 0; i < st->total; i++)
            trial_reset(&st->trials[i]);
    }
    st->pending = st->total;
    return RM_OK;
}

void rm_sweep_free(rm_sweep *sw)
{
    if (!sw)
        return;
    free(sw->name);
    free(sw->namespace_);
    free(sw->uid);
    free(sw->resource_version);
    for (int p = 0; p < RM_SWEEP_MAX_PARAMS; p++) {
        free(sw->spec.params[p].path);
        cJSON_Delete(sw->spec.params[p].values);
    }
    cJSON_Delete(sw->spec.trial_template);
    rm_sweep_status_free(&sw->status);
    memset(sw, 0, sizeof *sw);
}

/* ---- serialization ------------------------------------------------------------------------------ */

static cJSON *spec_to_json(const rm_sweep_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "algorithm", algo_names[s->algorithm == RM_SWEEP_RANDOM]);
    cJSON_AddNumberToObject(o, "seed", (double)s->seed);
    cJSON_AddNumberToObject(o, "maxTrials", s->max_trials);
    cJSON_AddNumberToObject(o, "parallelTrials", s->parallel_trials);
    cJSON *ob = cJSON_AddObjectToObject(o, "objective");
    if (ob) {
        cJSON_AddStringToObject(ob, "metric", rm_sweep_metric_name(s->metric));
        cJSON_AddStringToObject(ob, "goal", s->maximize ? "maximize" : "minimize");
    }
    if (s->early_stopping) {
        cJSON *es = cJSON_AddObjectToObject(o, "earlyStopping");
        if (es) {
            cJSON_AddStringToObject(es, "rule", "median");
            cJSON_AddNumberToObject(es, "startEpoch", s->start_epoch);
            cJSON_AddNumberToObject(es, "minTrials", s->min_trials);
        }
    }
    cJSON *ps = cJSON_AddArrayToObject(o, "parameters");
    for (int p = 0; ps && p < s->nparams; p++) {
        const rm_sweep_param *pp = &s->params[p];
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        cJSON_AddStringToObject(x, "path", pp->path);
        if (pp->range) {
            cJSON_AddNumberToObject(x, "min", pp->min);
            cJSON_AddNumberToObject(x, "max", pp->max);
            cJSON_AddStringToObject(x, "scale", pp->log ? "log" : "linear");
            cJSON_AddNumberToObject(x, "count", pp->count);
        } else {
            cJSON_AddItemToObject(x, "values", cJSON_Duplicate(pp->values, 1));
        }
        cJSON_AddItemToArray(ps, x);
    }
    if (s->trial_template)
        cJSON_AddItemToObject(o, "trialTemplate", cJSON_Duplicate(s->trial_template, 1));
    return o;
}

static void add_finite(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
}

cJSON *rm_sweep_status_to_json(const rm_sweep *sw)
{
    const rm_sweep_status *st = &sw->status;
    char tb[40], name[160];
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "phase", rm_sweep_phase_name(st->phase));
    cJSON_AddNumberToObject(o, "observedGeneration", (double)st->observed_generation);
    cJSON *tr = cJSON_AddObjectToObject(o, "trials");
    if (tr) {
        cJSON_AddNumberToObject(tr, "total", st->total);
        cJSON_AddNumberToObject(tr, "pending", st->pending);
        cJSON_AddNumberToObject(tr, "running", st->running);
        cJSON_AddNumberToObject(tr, "succeeded", st->succeeded);
        cJSON_AddNumberToObject(tr, "failed", st->failed);
        cJSON_AddNumberToObject(tr, "stopped", st->stopped);
    }
    if (st->best >= 0 && st->best < st->total) {
        cJSON *b = cJSON_AddObjectToObject(o, "best");
        if (b) {
            cJSON_AddStringToObject(b, "trial", rm_sweep_trial_name(sw, st->best, name, sizeof name));
            cJSON_AddNumberToObject(b, "index", st->best);
            cJSON *pv = rm_sweep_trial_params(sw, st->best);
            if (pv)
                cJSON_AddItemToObject(b, "parameters", pv);
            add_finite(b, "objective", st->best_objective);
        }
    }
    cJSON *tt = cJSON_AddArrayToObject(o, "trialStatuses");
    for (int i = 0; tt && i < st->total; i++) {
        const rm_sweep_trial *t = &st->trials[i];
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        cJSON_AddNumberToObject(x, "index", i);
        cJSON_AddStringToObject(x, "name", rm_sweep_trial_name(sw, i, name, sizeof name));
        cJSON_AddStringToObject(x, "phase", rm_trial_phase_name(t->phase));
        cJSON *pv = rm_sweep_trial_params(sw, i);
        if (pv)
            cJSON_AddItemToObject(x, "parameters", pv);
        cJSON_AddNumberToObject(x, "epoch", t->epoch);
        if (t->have_final)
            add_finite(x, "objective", t->final_obj);
        if (t->nobj > 0) {
            cJSON *c = cJSON_AddArrayToObject(x, "objectives");
            for (int e = 0; c && e < t->nobj; e++)
                cJSON_AddItemToArray(c, isfinite(t->obj[e]) ? cJSON_CreateNumber(t->obj[e])
                                                            : cJSON_CreateNull());
        }
        if (t->reason[0])
            cJSON_AddStringToObject(x, "reason", t->reason);
        if (t->message[0])
            cJSON_AddStringToObject(x, "message", t->message);
        cJSON_AddItemToArray(tt, x);
    }
    cJSON *cs = cJSON_AddArrayToObject(o, "conditions");
    for (int c = 0; cs && c < RM_SWEEP_COND__COUNT; c++) {
        const rm_sweep_cond *k = &st->conditions[c];
        if (!k->present)
            continue;
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        cJSON_AddStringToObject(x, "type", cond_names[c]);
        cJSON_AddStringToObject(x, "status", k->status ? "True" : "False");
        cJSON_AddStringToObject(x, "reason", k->reason);
        cJSON_AddStringToObject(x, "message", k->message);
        rm_json_time(tb, k->last_transition);
        cJSON_AddStringToObject(x, "lastTransitionTime", tb);
        cJSON_AddNumberToObject(x, "observedGeneration", (double)k->observed_generation);
        cJSON_AddItemToArray(cs, x);
    }
    if (st->start_time > 0) {
        rm_json_time(tb, st->start_time);
        cJSON_AddStringToObject(o, "startTime", tb);
    }
    if (st->completion_time > 0) {
        rm_json_time(tb, st->completion_time);
        cJSON_AddStringToObject(o, "completionTime", tb);
    }
    return o;
}

cJSON *rm_sweep_to_json(const rm_sweep *sw)
{
    cJSON *md;
    cJSON *o = rm_json_object_head(RM_TJ_API_VERSION, RM_SWEEP_KIND, sw->name, sw->namespace_, sw->uid,
                                   sw->resource_version, sw->generation, &md);
    if (!o)
        return NULL;
    cJSON *sp = spec_to_json(&sw->spec);
    if (sp)
        cJSON_AddItemToObject(o, "spec", sp);
    cJSON *st = rm_sweep_status_to_json(sw);
    if (st)
        cJSON_AddItemToObject(o, "status", st);
    return o;
}

static int phase_of(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* Read a status back (the operator's own writes). Unknown values are ignored rather than fatal: a
 * status is ours to rewrite. */
static int parse_status(const cJSON *so, rm_sweep *sw, rm_err *err)
{
    (void)err;
    rm_sweep_status *st = &sw->status;
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(so, "phase")) && cJSON_IsString(x)) {
        int p = phase_of(x->valuestring, sweep_phase_names, 4);
        if (p >= 0)
            st->phase = (rm_sweep_phase)p;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(so, "observedGeneration")) && cJSON_IsNumber(x))
        st->observed_generation = (int64_t)x->valuedouble;
    if ((x = cJSON_GetObjectItemCaseSensitive(so, "startTime")) && cJSON_IsString(x))
        rm_json_parse_time(x->valuestring, &st->start_time);
    if ((x = cJSON_GetObjectItemCaseSensitive(so, "completionTime")) && cJSON_IsString(x))
        rm_json_parse_time(x->valuestring, &st->completion_time);
    const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(so, "trials");
    if (cJSON_IsObject(cnt)) {
        static const char *const ks[] = {"pending", "running", "succeeded", "failed", "stopped"};
        int *dst[] = {&st->pending, &st->running, &st->succeeded, &st->failed, &st->stopped};
        for (int k = 0; k < 5; k++)
            if ((x = cJSON_GetObjectItemCaseSensitive(cnt, ks[k])) && cJSON_IsNumber(x))
                *dst[k] = (int)x->valuedouble;
    }
    const cJSON *bi = rm_json_path(so, "best.index"), *bo = rm_json_path(so, "best.objective");
    if (cJSON_IsNumber(bi) && bi->valuedouble >= 0 && bi->valuedouble < st->total && cJSON_IsNumber(bo)) {
        st->best = (int)bi->valuedouble;
        st->best_objective = bo->valuedouble;
    }
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(so, "trialStatuses");
    for (const cJSON *t = cJSON_IsArray(tt) ? tt->child : NULL; t; t = t->next) {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(t, "index");
        if (!cJSON_IsNumber(ix) || ix->valuedouble < 0 || ix->valuedouble >= st->total)
            continue;
        rm_sweep_trial *r = &st->trials[(int)ix->valuedouble];
        if ((x = cJSON_GetObjectItemCaseSensitive(t, "phase")) && cJSON_IsString(x)) {
            int p = phase_of(x->valuestring, trial_phase_names, 5);
            if (p >= 0)
                r->phase = (rm_trial_phase)p;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(t, "epoch")) && cJSON_IsNumber(x))
            r->epoch = (int)x->valuedouble;
        if ((x = cJSON_GetObjectItemCaseSensitive(t, "objective")) && cJSON_IsNumber(x)) {
            r->have_final = true;
            r->final_obj = x->valuedouble;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "objectives");
        int e = 0;
        for (const cJSON *v = cJSON_IsArray(c) ? c->child : NULL; v && e < RM_SWEEP_MAX_EPOCHS;
             v = v->next, e++)
            r->obj[e] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        r->nobj = e;
        if ((x = cJSON_GetObjectItemCaseSensitive(t, "reason")) && cJSON_IsString(x))
            rm_sfmt(r->reason, sizeof r->reason, "%s", x->valuestring);
        if ((x = cJSON_GetObjectItemCaseSensitive(t, "message")) && cJSON_IsString(x))
            rm_sfmt(r->message, sizeof r->message, "%s", x->valuestring);
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(so, "conditions");
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(c, "type");
        int k = cJSON_IsString(ty) ? phase_of(ty->valuestring, cond_names, 3) : -1;
        if (k < 0)
            continue;
        rm_sweep_cond *d = &st->conditions[k];
        d->present = true;
        x = cJSON_GetObjectItemCaseSensitive(c, "status");
        d->status = cJSON_IsString(x) && strcmp(x->valuestring, "True") == 0;
        if ((x = cJSON_GetObjectItemCaseSensitive(c, "reason")) && cJSON_IsString(x))
            rm_sfmt(d->reason, sizeof d->reason, "%s", x->valuestring);
        if ((x = cJSON_GetObjectItemCaseSensitive(c, "message")) && cJSON_IsString(x))
            rm_sfmt(d->message, sizeof d->message, "%s", x->valuestring);
        if ((x = cJSON_GetObjectItemCaseSensitive(c, "lastTransitionTime")) && cJSON_IsString(x))
            rm_json_parse_time(x->valuestring, &d->last_transition);
        if ((x = cJSON_GetObjectItemCaseSensitive(c, "observedGeneration")) && cJSON_IsNumber(x))
            d->observed_generation = (int64_t)x->valuedouble;
    }
    return RM_OK;
}

/* ---- observations ------------------------------------------------------------------------------- */

int rm_sweep_obs_from_tj(const rm_sweep *sw, const rm_tj *trial, rm_sweep_obs *out)
{
    if (!sw->name || !trial->name)
        return -1;
    size_t nl = strlen(sw->name);
    const char *n = trial->name;
    if (strncmp(n, sw->name, nl) != 0 || n[nl] != '-' || !n[nl + 1])
        return -1;
    char *end;
    long idx = strtol(n + nl + 1, &end, 10);
    if (*end || idx < 0 || idx >= sw->spec.trials || (n[nl + 1] == '0' && n[nl + 2]))
        return -1;
    memset(out, 0, sizeof *out);
    out->index = (int)idx;
    const rm_tj_status *st = &trial->status;
    switch (st->phase) {
    case RM_PHASE_SUCCEEDED:
        out->phase = RM_TRIAL_SUCCEEDED;
        break;
    case RM_PHASE_FAILED:
        out->phase = RM_TRIAL_FAILED;
        break;
    case RM_PHASE_SUSPENDED:
        out->phase = RM_TRIAL_STOPPED;
        break;
    default:
        out->phase = trial->spec.run.suspend ? RM_TRIAL_STOPPED : RM_TRIAL_RUNNING;
        break;
    }
    if (out->phase == RM_TRIAL_FAILED)
        rm_sfmt(out->reason, sizeof out->reason, "%s", st->conditions[RM_COND_FAILED].reason);
    out->nevals = st->progress.nevals < RM_SWEEP_MAX_EPOCHS ? st->progress.nevals : RM_SWEEP_MAX_EPOCHS;
    memcpy(out->evals, st->progress.evals, (size_t)out->nevals * sizeof out->evals[0]);
    out->have_result = st->result.present;
    out->test_accuracy = st->result.test_accuracy;
    out->train_loss = st->result.train_loss;
    out->val_loss = st->result.val_loss;
    return out->index;
}

/* ---- reconcile ---------------------------------------------------------------------------------- */

/* Working state of one rm_sweep_reconcile call, shared by its rules. */
typedef struct sctx {
    const rm_sweep *sw;
    const rm_sweep_spec *s;
    const rm_sweep_obs *obs;
    size_t nobs;
    rm_sweep_out *out;
    rm_sweep_status *st;       /* &out->status */
    int n;                     /* trials in the table */
    bool *seen;                /* [n] the trial was observed this call */
    rm_trial_phase *obs_phase; /* [n] its observed phase */
    double *fin;               /* [n] scratch: finished trials' objectives at one epoch */
    double now;
    int rc; /* RM_ETOOBIG once the action array overflowed */
} sctx;

static void act(sctx *c, rm_sweep_act_type type, int index, bool warning, const char *reason, const char *fmt,
                ...) RM_PRINTF(6, 7);
static void act(sctx *c, rm_sweep_act_type type, int index, bool warning, const char *reason, const char *fmt,
                ...)
{
    if (c->out->nactions >= c->out->cap) {
        c->rc = RM_ETOOBIG;
        return;
    }
    rm_sweep_action *a = &c->out->actions[c->out->nactions++];
    memset(a, 0, sizeof *a);
    a->type = type;
    a->index = index;
    a->warning = warning;
    rm_sfmt(a->reason, sizeof a->reason, "%s", reason ? reason : "");
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->message, sizeof a->message, fmt, ap);
        va_end(ap);
    }
}

static void set_cond(sctx *c, rm_sweep_cond_type t, bool status, const char *reason, const char *msg)
{
    rm_sweep_cond *k = &c->out->status.conditions[t];
    if (!k->present || k->status != status)
        k->last_transition = c->now;
    k->present = true;
    k->status = status;
    rm_sfmt(k->reason, sizeof k->reason, "%s", reason);
    rm_sfmt(k->message, sizeof k->message, "%s", msg);
    k->observed_generation = c->sw->generation;
}

/* The objective out of one evaluation's (or the result's) numbers; NaN when not reported (a
 * valLoss of 0: a worker that predates it). */
static double obs_objective(const rm_sweep_spec *s, double acc, double loss, double val_loss)
{
    switch (s->metric) {
    case RM_SWEEP_TEST_ACCURACY:
        return acc;
    case RM_SWEEP_TRAIN_LOSS:
        return loss;
    default:
        return val_loss != 0 ? val_loss : NAN;
    }
}

static bool better(const rm_sweep_spec *s, double a, double b)
{
    return s->maximize ? a > b : a < b;
}

static bool status_equal(const rm_sweep_status *a, const rm_sweep_status *b)
{
    if (a->phase != b->phase || a->observed_generation != b->observed_generation || a->total != b->total ||
        a->pending != b->pending || a->running != b->running || a->succeeded != b->succeeded ||
        a->failed != b->failed || a->stopped != b->stopped || a->best != b->best ||
        a->start_time != b->start_time || a->completion_time != b->completion_time)
        return false;
    if (!(a->best_objective == b->best_objective || (isnan(a->best_objective) && isnan(b->best_objective))))
        return false;
    for (int i = 0; i < a->total; i++) {
        const rm_sweep_trial *x = &a->trials[i], *y = &b->trials[i];
        if (x->phase != y->phase || x->epoch != y->epoch || x->nobj != y->nobj ||
            x->have_final != y->have_final || strcmp(x->reason, y->reason) != 0 ||
            strcmp(x->message, y->message) != 0)
            return false;
        if (x->have_final && x->final_obj != y->final_obj)
            return false;
        for (int e = 0; e < x->nobj; e++)
            if (!(x->obj[e] == y->obj[e] || (isnan(x->obj[e]) && isnan(y->obj[e]))))
                return false;
    }
    for (int k = 0; k < RM_SWEEP_COND__COUNT; k++) {
        const rm_sweep_cond *x = &a->conditions[k], *y = &b->conditions[k];
        if (x->present != y->present ||
            (x->present && (x->status != y->status || strcmp(x->reason, y->reason) != 0 ||
                            strcmp(x->message, y->message) != 0 || x->last_transition != y->last_transition ||
                            x->observed_generation != y->observed_generation)))
            return false;
    }
    return true;
}

/* The table this call starts from: a copy of the recorded one, or a fresh all-Pending one when
 * there is none yet (or the spec's trial count changed), keeping the recorded phase, conditions
 * and times. */
static int start_table(const rm_sweep *sw, rm_sweep_status *st)
{
    if (sw->status.total == sw->spec.trials && sw->status.trials)
        return rm_sweep_status_copy(st, &sw->status) != RM_OK ? RM_ENOMEM : RM_OK;
    rm_sweep tmp = *sw;
    tmp.status.trials = NULL;
    tmp.status.total = 0;
    if (rm_sweep_status_init(&tmp) != RM_OK)
        return RM_ENOMEM;
    *st = tmp.status;
    st->phase = sw->status.phase;
    memcpy(st->conditions, sw->status.conditions, sizeof st->conditions);
    st->start_time = sw->status.start_time;
    st->completion_time = sw->status.completion_time;
    return RM_OK;
}

/* S1: observe. A recorded-finished trial is final; otherwise the observation sets the phase, the
 * objective curve and, on success, the final objective. */
static void rule_observe(sctx *c)
{
    const rm_sweep_spec *s = c->s;
    for (size_t k = 0; k < c->nobs; k++) {
        const rm_sweep_obs *o = &c->obs[k];
        if (o->index < 0 || o->index >= c->n)
            continue;
        c->seen[o->index] = true;
        c->obs_phase[o->index] = o->phase;
        rm_sweep_trial *t = &c->st->trials[o->index];
        if (finished(t->phase))
            continue; /* final */
        /* ascending step: an epoch's newest evaluation wins (its end-of-epoch one once the
         * epoch finished) */
        for (int e = 0; e < o->nevals; e++) {
            const rm_tj_eval *x = &o->evals[e];
            int ep = x->epoch;
            if (ep < 1 || ep > RM_SWEEP_MAX_EPOCHS)
                continue;
            double v = obs_objective(s, x->test_accuracy, x->train_loss, x->val_loss);
            if (isfinite(v))
                t->obj[ep - 1] = v;
            if (ep > t->nobj)
                t->nobj = ep;
            if (ep > t->epoch)
                t->epoch = ep;
        }
        switch (o->phase) {
        case RM_TRIAL_SUCCEEDED:
            t->phase = RM_TRIAL_SUCCEEDED;
            if (o->have_result && isfinite(obs_objective(s, o->test_accuracy, o->train_loss, o->val_loss))) {
                t->have_final = true;
                t->final_obj = obs_objective(s, o->test_accuracy, o->train_loss, o->val_loss);
            } else if (t->nobj > 0 && isfinite(t->obj[t->nobj - 1])) {
                t->have_final = true;
                t->final_obj = t->obj[t->nobj - 1];
            }
            break;
        case RM_TRIAL_FAILED:
            t->phase = RM_TRIAL_FAILED;
            rm_sfmt(t->reason, sizeof t->reason, "%s", o->reason[0] ? o->reason : "Failed");
            break;
        case RM_TRIAL_STOPPED: /* stopped by someone else (suspended by hand) */
            t->phase = RM_TRIAL_STOPPED;
            if (!t->reason[0])
                rm_sfmt(t->reason, sizeof t->reason, "Suspended");
            break;
        default:
            t->phase = RM_TRIAL_RUNNING;
            break;
        }
    }
}

/* S2: early stopping. A running trial worse than the median of the succeeded trials at its latest
 * epoch is stopped; one recorded Stopped but still seen running is stopped again. */
static void rule_early_stop(sctx *c)
{
    const rm_sweep_spec *s = c->s;
    for (int i = 0; i < c->n; i++) {
        rm_sweep_trial *t = &c->st->trials[i];
        if (t->phase == RM_TRIAL_STOPPED && c->seen[i] && c->obs_phase[i] == RM_TRIAL_RUNNING &&
            strcmp(t->reason, "MedianStop") == 0) {
            act(c, RM_SWEEP_ACT_STOP, i, false, "MedianStop", "%s", t->message); /* again */
            continue;
        }
        if (!s->early_stopping || t->phase != RM_TRIAL_RUNNING)
            continue;
        int e = t->epoch;
        if (e < s->start_epoch || e >= s->epochs || e > t->nobj || !isfinite(t->obj[e - 1]))
            continue;
        int n = 0;
        for (int j = 0; j < c->n; j++) {
            const rm_sweep_trial *f = &c->st->trials[j];
            if (f->phase == RM_TRIAL_SUCCEEDED && f->nobj >= e && isfinite(f->obj[e - 1]))
                c->fin[n++] = f->obj[e - 1];
        }
        double med;
        if (!rm_sweep_median_stop(t->obj[e - 1], c->fin, n, s->maximize, s->min_trials, &med))
            continue;
        char name[160];
        t->phase = RM_TRIAL_STOPPED;
        rm_sfmt(t->reason, sizeof t->reason, "MedianStop");
        rm_sfmt(t->message, sizeof t->message,
                "epoch %d: %s %.4f is worse than the median %.4f "
                "of %d finished trials",
                e, rm_sweep_metric_name(s->metric), t->obj[e - 1], med, n);
        act(c, RM_SWEEP_ACT_STOP, i, false, "MedianStop", "%s", t->message);
        act(c, RM_SWEEP_ACT_EVENT, i, false, "TrialStopped", "%s: %s",
            rm_sweep_trial_name(c->sw, i, name, sizeof name), t->message);
    }
}

/* S3: create. A created trial that vanished before finishing is created again; then the
 * lowest-index Pending trials while fewer than parallelTrials are unfinished. */
static void rule_create(sctx *c)
{
    int unfinished = 0;
    for (int i = 0; i < c->n; i++)
        if (c->st->trials[i].phase == RM_TRIAL_RUNNING)
            unfinished++;
    for (int i = 0; i < c->n; i++) {
        rm_sweep_trial *t = &c->st->trials[i];
        if (t->phase == RM_TRIAL_RUNNING && !c->seen[i])
            act(c, RM_SWEEP_ACT_CREATE, i, false, "TrialCreated", NULL);
    }
    for (int i = 0; i < c->n && unfinished < c->s->parallel_trials; i++) {
        rm_sweep_trial *t = &c->st->trials[i];
        if (t->phase != RM_TRIAL_PENDING)
            continue;
        if (!c->seen[i])
            act(c, RM_SWEEP_ACT_CREATE, i, false, "TrialCreated", NULL);
        t->phase = RM_TRIAL_RUNNING;
        unfinished++;
    }
}

/* S4: counts and the best trial (ties: the lowest index). */
static void rule_best(sctx *c)
{
    rm_sweep_status *st = c->st;
    st->pending = st->running = st->succeeded = st->failed = st->stopped = 0;
    st->best = -1;
    st->best_objective = NAN;
    for (int i = 0; i < c->n; i++) {
        const rm_sweep_trial *t = &st->trials[i];
        switch (t->phase) {
        case RM_TRIAL_PENDING:
            st->pending++;
            break;
        case RM_TRIAL_RUNNING:
            st->running++;
            break;
        case RM_TRIAL_SUCCEEDED:
            st->succeeded++;
            break;
        case RM_TRIAL_FAILED:
            st->failed++;
            break;
        case RM_TRIAL_STOPPED:
            st->stopped++;
            break;
        }
        if (t->phase == RM_TRIAL_SUCCEEDED && t->have_final && isfinite(t->final_obj) &&
            (st->best < 0 || better(c->s, t->final_obj, st->best_objective))) {
            st->best = i;
            st->best_objective = t->final_obj;
        }
    }
}

/* S5, S6: the sweep's phase, times, conditions and the end's Event. */
static void rule_phase(sctx *c)
{
    rm_sweep_status *st = c->st;
    int N = c->n;
    rm_sweep_phase was = c->sw->status.phase;
    char msg[200], name[160];
    st->observed_generation = c->sw->generation;
    if (st->pending == N && N > 0 && st->running == 0) {
        st->phase = RM_SWEEP_PENDING;
    } else if (st->pending == 0 && st->running == 0) {
        st->phase = st->succeeded > 0 ? RM_SWEEP_SUCCEEDED : RM_SWEEP_FAILED;
        if (st->completion_time == 0)
            st->completion_time = c->now;
    } else {
        st->phase = RM_SWEEP_RUNNING;
    }
    if (st->phase != RM_SWEEP_PENDING && st->start_time == 0)
        st->start_time = c->now;
    rm_sfmt(msg, sizeof msg,
            "%d of %d trials finished (%d succeeded, %d failed, %d stopped), %d "
            "running",
            st->succeeded + st->failed + st->stopped, N, st->succeeded, st->failed, st->stopped, st->running);
    if (st->phase == RM_SWEEP_RUNNING || st->phase == RM_SWEEP_PENDING) {
        set_cond(c, RM_SWEEP_COND_RUNNING, st->phase == RM_SWEEP_RUNNING,
                 st->phase == RM_SWEEP_RUNNING ? "TrialsRunning" : "NoTrialYet", msg);
        return;
    }
    set_cond(c, RM_SWEEP_COND_RUNNING, false, "Finished", msg);
    if (st->phase == RM_SWEEP_SUCCEEDED) {
        char best[200];
        rm_sfmt(best, sizeof best, "best trial %s: %s %.4f; %s",
                rm_sweep_trial_name(c->sw, st->best >= 0 ? st->best : 0, name, sizeof name),
                rm_sweep_metric_name(c->s->metric), st->best_objective, msg);
        set_cond(c, RM_SWEEP_COND_SUCCEEDED, true, "SweepSucceeded", best);
        if (was != RM_SWEEP_SUCCEEDED)
            act(c, RM_SWEEP_ACT_EVENT, -1, false, "SweepSucceeded", "%s", best);
    } else {
        set_cond(c, RM_SWEEP_COND_FAILED, true, "NoTrialSucceeded", msg);
        if (was != RM_SWEEP_FAILED)
            act(c, RM_SWEEP_ACT_EVENT, -1, true, "SweepFailed", "%s", msg);
    }
}

int rm_sweep_reconcile(const rm_sweep *sw, const rm_sweep_obs *obs, size_t nobs, double now,
                       rm_sweep_out *out)
{
    /* the rules in their fixed order (S1-S6, sweep.h); each reads what the ones before it set */
    static void (*const rules[])(sctx *) = {
        rule_observe, rule_early_stop, rule_create, rule_best, rule_phase,
    };
    out->nactions = 0;
    out->status_changed = false;
    memset(&out->status, 0, sizeof out->status);
    if (start_table(sw, &out->status) != RM_OK)
        return RM_ENOMEM;
    sctx c = {.sw = sw,
              .s = &sw->spec,
              .obs = obs,
              .nobs = nobs,
              .out = out,
              .st = &out->status,
              .n = out->status.total,
              .now = now};
    size_t cells = (size_t)(c.n > 0 ? c.n : 1);
    c.seen = calloc(cells, sizeof *c.seen);
    c.obs_phase = calloc(cells, sizeof *c.obs_phase);
    c.fin = malloc(cells * sizeof *c.fin);
    if (c.seen && c.obs_phase && c.fin)
        for (size_t i = 0; i < RM_ARRAY_LEN(rules); i++)
            rules[i](&c);
    else
        c.rc = RM_ENOMEM;
    free(c.seen);
    free(c.obs_phase);
    free(c.fin);
    if (c.rc) {
        rm_sweep_status_free(&out->status);
        return c.rc;
    }
    out->status_changed = !status_equal(&out->status, &sw->status);
    return RM_OK;
}
