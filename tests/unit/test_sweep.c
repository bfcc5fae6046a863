/* Tests for common/sweep: parse + validation against the TrainingJob schema (every bad path and
 * type named exactly), grid and seeded-random expansion (counts, log scale, reproducibility), the
 * dotted-path setter, the median rule as a table, and the sweep reconcile as scenarios, each
 * re-run on its own output to prove idempotence. */
#include "common/json.h"
#include "common/rdzv.h"
#include "common/sweep.h"
#include "common/yaml.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char head[] = "apiVersion: ringmaster.dev/v1alpha1\n"
                           "kind: TrainingSweep\n"
                           "metadata: {name: lr-sweep}\n"
                           "spec:\n";

static const char base_body[] =
    "  algorithm: grid\n"
    "  parallelTrials: 2\n"
    "  objective: {metric: testAccuracy, goal: maximize}\n"
    "  earlyStopping: {rule: median, startEpoch: 2}\n"
    "  parameters:\n"
    "  - {path: training.optimizer.lr, values: [0.01, 0.02, 0.05, 0.1]}\n"
    "  - {path: training.model.hidden, values: [[256], [512, 256], [1024, 512]]}\n"
    "  - {path: training.batchSizePerWorker, min: 32, max: 256, scale: log, count: 4}\n"
    "  trialTemplate:\n"
    "    replicas: 1\n"
    "    training: {epochs: 6}\n";

static int parse_text(const char *body, rm_sweep *sw, rm_err *e)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", head, body);
    rm_yaml_docs *d = NULL;
    int rc = rm_yaml_load(buf, strlen(buf), "sweep", &d, e);
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    rc = rm_sweep_from_json(rm_yaml_doc(d, 0), sw, e);
    rm_yaml_free(d);
    return rc;
}

static void test_parse_base(void)
{
    rm_sweep sw;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(parse_text(base_body, &sw, &e), RM_OK);
    CU_ASSERT_EQUAL(sw.spec.trials, 4 * 3 * 4);
    CU_ASSERT_EQUAL(sw.spec.parallel_trials, 2);
    CU_ASSERT_EQUAL(sw.spec.epochs, 6);
    CU_ASSERT(sw.spec.early_stopping);
    CU_ASSERT_EQUAL(sw.spec.start_epoch, 2);
    CU_ASSERT_EQUAL(sw.spec.min_trials, 2);
    CU_ASSERT(sw.spec.maximize);
    CU_ASSERT_EQUAL(sw.status.total, 48);
    CU_ASSERT_EQUAL(sw.status.pending, 48);
    /* trial 5 = lr 0.01 (5 / 12 = 0), hidden [256] ((5 / 4) % 3 = 1 -> [512,256]), batch 5 % 4 = 1 */
    rm_tj tj;
    CU_ASSERT_EQUAL_FATAL(rm_sweep_trial_tj(&sw, 5, &tj, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(tj.name, "lr-sweep-5");
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.training.optimizer.lr, 0.01, 1e-12);
    CU_ASSERT_EQUAL(tj.spec.training.nhidden, 2);
    CU_ASSERT_EQUAL(tj.spec.training.hidden[0], 512);
    CU_ASSERT_EQUAL(tj.spec.training.batch_size_per_worker, 64);
    CU_ASSERT_EQUAL(tj.spec.training.epochs, 6);
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(tj.labels, RM_SWEEP_LABEL);
    CU_ASSERT(cJSON_IsString(lb) && strcmp(lb->valuestring, "lr-sweep") == 0);
    rm_tj_free(&tj);
    /* the last trial: lr 0.1, hidden [1024, 512], batch 256 */
    CU_ASSERT_EQUAL_FATAL(rm_sweep_trial_tj(&sw, 47, &tj, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.training.optimizer.lr, 0.1, 1e-12);
    CU_ASSERT_EQUAL(tj.spec.training.hidden[0], 1024);
    CU_ASSERT_EQUAL(tj.spec.training.batch_size_per_worker, 256);
    rm_tj_free(&tj);
    CU_ASSERT_NOT_EQUAL(rm_sweep_trial_tj(&sw, 48, &tj, &e), RM_OK);
    /* round trip: the printed sweep parses to the same trials */
    cJSON *o = rm_sweep_to_json(&sw);
    rm_sweep sw2;
    CU_ASSERT_EQUAL_FATAL(rm_sweep_from_json(o, &sw2, &e), RM_OK);
    CU_ASSERT_EQUAL(sw2.spec.trials, 48);
    cJSON *a = rm_sweep_trial_params(&sw, 17), *b = rm_sweep_trial_params(&sw2, 17);
    CU_ASSERT(cJSON_Compare(a, b, 1));
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(o);
    rm_sweep_free(&sw2);
    rm_sweep_free(&sw);
}

static void test_rejects(void)
{
    static const struct {
        const char *body, *field, *msg;
    } cases[] = {
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  - {path: training.optimizer.lrr, values: [0.1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[1].path",
         "spec.parameters[1].path: training.optimizer.lrr is not a TrainingJob spec field"},
        {"  parameters:\n  - {path: training.foo.bar, values: [1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].path",
         "spec.parameters[0].path: training.foo.bar is not a TrainingJob spec field"},
        {"  parameters:\n  - {path: replicass, values: [1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].path", "spec.parameters[0].path: replicass is not a TrainingJob spec field"},
        {"  parameters:\n  - {path: training.model.hidden.width, values: [1]}\n"
         "  trialTemplate: {training: {model: {hidden: [64]}}}\n",
         "spec.parameters[0].path", NULL},
        {"  parameters:\n  - {path: template.spec.x, values: [1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].path", NULL},
        {"  parameters:\n  - {path: \"training..lr\", values: [1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].path", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1, fast]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].values[1]",
         "spec.parameters[0].values[1]: spec.training.optimizer.lr: must be a number"},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1, -0.5]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].values[1]", NULL},
        {"  parameters:\n  - {path: training.model.hidden, values: [[64], 128]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].values[1]", NULL},
        {"  parameters:\n  - {path: training.batchSizePerWorker, values: [32, 40.5]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].values[1]", NULL},
        {"  parameters:\n  - {path: training.optimizer.type, values: [sgd, adamx]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].values[1]", NULL},
        {"  parameters:\n  - {path: training.batchSizePerWorker, min: 0, max: 64, scale: log}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].min", NULL},
        {"  parameters:\n  - {path: training.batchSizePerWorker, min: 64, max: 32}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].max", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1], min: 1, max: 2}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0]", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  - {path: training.optimizer.lr, values: [0.2]}\n  trialTemplate: {replicas: 1}\n",
         "spec.parameters[1].path", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n", "spec.trialTemplate",
         "spec.trialTemplate: required"},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 0}\n",
         "spec.trialTemplate.replicas", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1, bogus: 2}\n",
         "spec.trialTemplate.bogus", NULL},
        {"  algorithm: random\n  parameters:\n  - {path: training.optimizer.lr, min: 0.01, max: 0.1}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.maxTrials", "spec.maxTrials: required with algorithm: random"},
        {"  algorithm: bayes\n  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.algorithm", NULL},
        {"  parallelTrials: 0\n  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parallelTrials", NULL},
        {"  objective: {metric: accuracy}\n  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.objective.metric",
         "spec.objective.metric: must be one of testAccuracy, trainLoss, valLoss (got \"accuracy\")"},
        {"  objective: {metric: val_loss}\n  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.objective.metric", NULL},
        {"  earlyStopping: {rule: median, startEpoch: 0}\n  parameters:\n"
         "  - {path: training.optimizer.lr, values: [0.1]}\n  trialTemplate: {replicas: 1}\n",
         "spec.earlyStopping.startEpoch", NULL},
        {"  parameters: []\n  trialTemplate: {replicas: 1}\n", "spec.parameters", NULL},
        {"  maxTrial: 3\n  parameters:\n  - {path: training.optimizer.lr, values: [0.1]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.maxTrial", NULL},
        {"  parameters:\n  - {path: training.optimizer.lr, min: 0.001, max: 1, count: 65}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters[0].count", NULL},
        /* a combination only: a global batch above the dataset */
        {"  parameters:\n  - {path: replicas, values: [1, 64]}\n"
         "  - {path: training.batchSizePerWorker, values: [64, 1024]}\n"
         "  trialTemplate: {replicas: 1}\n",
         "spec.parameters", NULL},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        rm_sweep sw;
        rm_err e = {0};
        int rc = parse_text(cases[i].body, &sw, &e);
        CU_ASSERT_NOT_EQUAL(rc, RM_OK);
        if (strcmp(e.field, cases[i].field) != 0 || (cases[i].msg && strcmp(e.msg, cases[i].msg) != 0)) {
            fprintf(stderr, "\n  case %zu: field \"%s\" msg \"%s\"\n", i, e.field, e.msg);
            CU_FAIL("wrong field or message");
        }
        if (rc == RM_OK)
            rm_sweep_free(&sw);
    }
    /* a sweep name too long for its trial names */
    rm_sweep sw;
    rm_err e = {0};
    char body[600];
    snprintf(body, sizeof body,
             "apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingSweep\n"
             "metadata: {name: %s}\nspec:\n  parameters:\n  - {path: training.optimizer.lr, values: "
             "[0.1, 0.2]}\n  trialTemplate: {replicas: 1}\n",
             "a234567890123456789012345678901234567890123456789012345");
    rm_yaml_docs *d = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_yaml_load(body, strlen(body), "x", &d, &e), RM_OK);
    CU_ASSERT_NOT_EQUAL(rm_sweep_from_json(rm_yaml_doc(d, 0), &sw, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(e.field, "metadata.name");
    rm_yaml_free(d);
}

static void test_grid_ranges(void)
{
    rm_sweep sw;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(
        parse_text("  maxTrials: 5\n  parameters:\n"
                   "  - {path: training.optimizer.lr, min: 0.001, max: 0.1, scale: log, count: 3}\n"
                   "  - {path: training.batchSizePerWorker, min: 32, max: 256, scale: log, count: 4}\n"
                   "  - {path: training.optimizer.momentum, min: 0.5, max: 0.9, count: 3}\n"
                   "  trialTemplate: {replicas: 1}\n",
                   &sw, &e),
        RM_OK);
    CU_ASSERT_EQUAL(sw.spec.trials, 5); /* the grid has 36 points; maxTrials keeps the first 5 */
    const cJSON *lr = sw.spec.params[0].values, *bs = sw.spec.params[1].values,
                *mo = sw.spec.params[2].values;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(lr), 3);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetArrayItem(lr, 0)->valuedouble, 0.001, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetArrayItem(lr, 1)->valuedouble, 0.01, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetArrayItem(lr, 2)->valuedouble, 0.1, 1e-12);
    static const int want_bs[] = {32, 64, 128, 256}; /* integral ends: integers */
    for (int k = 0; k < 4; k++)
        CU_ASSERT_EQUAL(cJSON_GetArrayItem(bs, k)->valuedouble, want_bs[k]);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetArrayItem(mo, 1)->valuedouble, 0.7, 1e-12);
    /* trial 4 = (lr 0, bs 1, momentum 1) */
    cJSON *p = rm_sweep_trial_params(&sw, 4);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(p, "training.optimizer.lr")->valuedouble, 0.001, 1e-12);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(p, "training.batchSizePerWorker")->valuedouble, 64);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(p, "training.optimizer.momentum")->valuedouble, 0.7, 1e-12);
    cJSON_Delete(p);
    rm_sweep_free(&sw);
}

static void test_random(void)
{
    static const char body[] = "  algorithm: random\n  seed: %d\n  maxTrials: 200\n  parameters:\n"
                               "  - {path: training.optimizer.lr, min: 0.0001, max: 1, scale: log}\n"
                               "  - {path: training.batchSizePerWorker, min: 16, max: 64}\n"
                               "  - {path: training.optimizer.type, values: [sgd, adam]}\n"
                               "  trialTemplate: {replicas: 1}\n";
    char b1[600], b2[600], b3[600];
    snprintf(b1, sizeof b1, body, 7);
    snprintf(b2, sizeof b2, body, 7);
    snprintf(b3, sizeof b3, body, 8);
    rm_sweep s1, s2, s3;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(parse_text(b1, &s1, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(parse_text(b2, &s2, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(parse_text(b3, &s3, &e), RM_OK);
    CU_ASSERT_EQUAL(s1.spec.trials, 200);
    int below = 0, differ = 0, adam = 0;
    for (int i = 199; i >= 0; i--) { /* any order: a trial's values depend only on (seed, i) */
        cJSON *a = rm_sweep_trial_params(&s1, i), *b = rm_sweep_trial_params(&s2, i),
              *c = rm_sweep_trial_params(&s3, i);
        CU_ASSERT(cJSON_Compare(a, b, 1));
        if (!cJSON_Compare(a, c, 1))
            differ++;
        double lr = cJSON_GetObjectItem(a, "training.optimizer.lr")->valuedouble;
        double bs = cJSON_GetObjectItem(a, "training.batchSizePerWorker")->valuedouble;
        CU_ASSERT(lr >= 0.0001 && lr <= 1);
        CU_ASSERT(bs >= 16 && bs <= 64 && bs == floor(bs));
        if (lr < 0.01)
            below++;
        if (strcmp(cJSON_GetObjectItem(a, "training.optimizer.type")->valuestring, "adam") == 0)
            adam++;
        cJSON_Delete(a);
        cJSON_Delete(b);
        cJSON_Delete(c);
    }
    /* log-uniform over 4 decades: half below 1e-2 (linear would put 1% there) */
    CU_ASSERT(below > 70 && below < 130);
    CU_ASSERT(adam > 70 && adam < 130);
    CU_ASSERT(differ > 190);
    rm_sweep_free(&s1);
    rm_sweep_free(&s2);
    rm_sweep_free(&s3);
}

static void test_set_path(void)
{
    rm_err e = {0};
    cJSON *spec = cJSON_Parse("{\"training\":{\"optimizer\":{\"lr\":0.1},\"model\":{\"hidden\":[1]}}}");
    cJSON *v = cJSON_CreateNumber(0.5);
    CU_ASSERT_EQUAL(rm_sweep_set_path(spec, "training.optimizer.lr", v, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_sweep_set_path(spec, "checkpoint.intervalSteps", v, &e), RM_OK);
    const cJSON *tr = cJSON_GetObjectItem(spec, "training");
    const cJSON *lr = cJSON_GetObjectItem(cJSON_GetObjectItem(tr, "optimizer"), "lr");
    const cJSON *iv = cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "checkpoint"), "intervalSteps");
    CU_ASSERT_FATAL(lr && iv);
    CU_ASSERT_DOUBLE_EQUAL(lr->valuedouble, 0.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(iv->valuedouble, 0.5, 0);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(spec, "training")), 2); /* replaced, not added */
    CU_ASSERT_EQUAL(rm_sweep_set_path(spec, "training.model.hidden.x", v, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_sweep_set_path(spec, "training..lr", v, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_sweep_set_path(spec, "", v, &e), RM_EINVAL);
    cJSON_Delete(v);
    cJSON_Delete(spec);
}

static void test_median(void)
{
    static const struct {
        double value;
        double fin[5];
        int n, min_trials;
        bool maximize, stop;
        double median;
    } cases[] = {
        {0.70, {0.80, 0.85}, 2, 2, true, true, 0.825}, /* below the median: stop */
        {0.82, {0.80, 0.85}, 2, 2, true, true, 0.825},
        {0.83, {0.80, 0.85}, 2, 2, true, false, 0.825},
        {0.825, {0.80, 0.85}, 2, 2, true, false, 0.825}, /* equal is not worse */
        {0.90, {0.80, 0.85}, 2, 2, true, false, 0.825},
        {0.70, {0.80}, 1, 2, true, false, 0.80}, /* too few finished */
        {0.70, {0.80}, 1, 1, true, true, 0.80},
        {0.70, {0}, 0, 1, true, false, NAN},             /* none finished */
        {0.50, {0.3, 0.4, 0.9}, 3, 2, false, true, 0.4}, /* minimizing a loss: above = worse */
        {0.35, {0.3, 0.4, 0.9}, 3, 2, false, false, 0.4},
        {0.60, {0.9, 0.5, 0.7, 0.8}, 4, 3, true, true, 0.75},
        {NAN, {0.9, 0.5}, 2, 1, true, false, 0.7}, /* no value: never stop */
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        double med = 0;
        bool s = rm_sweep_median_stop(cases[i].value, cases[i].fin, cases[i].n, cases[i].maximize,
                                      cases[i].min_trials, &med);
        if (s != cases[i].stop)
            fprintf(stderr, "\n  median case %zu\n", i);
        CU_ASSERT_EQUAL(s, cases[i].stop);
        if (isnan(cases[i].median)) {
            CU_ASSERT(isnan(med));
        } else {
            CU_ASSERT_DOUBLE_EQUAL(med, cases[i].median, 1e-12);
        }
    }
}

/* ---- reconcile scenarios ---- */

static const char rec_body[] = "  parallelTrials: 2\n"
                               "  earlyStopping: {rule: median, startEpoch: 2, minTrials: 2}\n"
                               "  parameters:\n"
                               "  - {path: training.optimizer.lr, values: [0.01, 0.02, 0.05, 0.1, 0.2]}\n"
                               "  trialTemplate: {replicas: 1, training: {epochs: 4}}\n";

static rm_sweep_obs obs_of(int index, rm_trial_phase ph, const double *acc, int n)
{
    rm_sweep_obs o;
    memset(&o, 0, sizeof o);
    o.index = index;
    o.phase = ph;
    for (int e = 0; e < n; e++)
        o.evals[e] = (rm_tj_eval){.epoch = e + 1, .test_accuracy = acc[e], .train_loss = 1 - acc[e]};
    o.nevals = n;
    if (ph == RM_TRIAL_SUCCEEDED && n > 0) {
        o.have_result = true;
        o.test_accuracy = acc[n - 1];
        o.train_loss = 1 - acc[n - 1];
    }
    return o;
}

/* Run one pass, move its status into sw, and check a second pass changes nothing but repeats
 * STOPs for trials still observed running. Returns the first pass's actions as "C0 S2 ..." */
static void pass(rm_sweep *sw, const rm_sweep_obs *obs, size_t n, double now, char *acts, size_t cap)
{
    rm_sweep_action a[64];
    rm_sweep_out out = {.actions = a, .cap = 64};
    CU_ASSERT_EQUAL_FATAL(rm_sweep_reconcile(sw, obs, n, now, &out), RM_OK);
    acts[0] = 0;
    size_t creates = 0;
    for (size_t i = 0; i < out.nactions; i++) {
        size_t l = strlen(acts);
        if (a[i].type == RM_SWEEP_ACT_EVENT)
            continue;
        snprintf(acts + l, cap - l, "%s%c%d", l ? " " : "", a[i].type == RM_SWEEP_ACT_CREATE ? 'C' : 'S',
                 a[i].index);
        creates += a[i].type == RM_SWEEP_ACT_CREATE;
    }
    rm_sweep_status_free(&sw->status);
    sw->status = out.status;
    /* idempotence: the same observations (plus what was just created, as Running) again */
    rm_sweep_obs more[64];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        more[m++] = obs[i];
    for (size_t i = 0; i < out.nactions; i++)
        if (a[i].type == RM_SWEEP_ACT_CREATE)
            more[m++] = obs_of(a[i].index, RM_TRIAL_RUNNING, NULL, 0);
    rm_sweep_out out2 = {.actions = a, .cap = 64};
    CU_ASSERT_EQUAL_FATAL(rm_sweep_reconcile(sw, more, m, now + 1, &out2), RM_OK);
    CU_ASSERT_FALSE(out2.status_changed);
    for (size_t i = 0; i < out2.nactions; i++)
        CU_ASSERT_NOT_EQUAL(a[i].type, RM_SWEEP_ACT_CREATE);
    rm_sweep_status_free(&out2.status);
}

static void test_reconcile_flow(void)
{
    rm_sweep sw;
    rm_err e = {0};
    char acts[256];
    CU_ASSERT_EQUAL_FATAL(parse_text(rec_body, &sw, &e), RM_OK);
    sw.generation = 3;
    /* fresh: the two lowest indices */
    pass(&sw, NULL, 0, 100, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C0 C1");
    CU_ASSERT_EQUAL(sw.status.phase, RM_SWEEP_RUNNING);
    CU_ASSERT_EQUAL(sw.status.running, 2);
    CU_ASSERT_EQUAL(sw.status.pending, 3);
    CU_ASSERT_EQUAL(sw.status.observed_generation, 3);
    CU_ASSERT(sw.status.conditions[RM_SWEEP_COND_RUNNING].status);
    CU_ASSERT_EQUAL(sw.status.conditions[RM_SWEEP_COND_RUNNING].observed_generation, 3);
    /* 0 succeeds, 1 runs on: one slot frees, trial 2 starts */
    const double a0[] = {0.70, 0.80, 0.84, 0.86}, a1[] = {0.72, 0.82, 0.85, 0.87};
    rm_sweep_obs o[5];
    o[0] = obs_of(0, RM_TRIAL_SUCCEEDED, a0, 4);
    o[1] = obs_of(1, RM_TRIAL_RUNNING, a1, 2);
    pass(&sw, o, 2, 110, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C2");
    CU_ASSERT_EQUAL(sw.status.best, 0);
    CU_ASSERT_DOUBLE_EQUAL(sw.status.best_objective, 0.86, 1e-12);
    /* 1 succeeds; 2 is at epoch 2 below the median of 0 and 1 at epoch 2 (0.81): stopped */
    const double a2[] = {0.50, 0.60};
    o[1] = obs_of(1, RM_TRIAL_SUCCEEDED, a1, 4);
    o[2] = obs_of(2, RM_TRIAL_RUNNING, a2, 2);
    pass(&sw, o, 3, 120, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "S2 C3 C4");
    CU_ASSERT_EQUAL(sw.status.trials[2].phase, RM_TRIAL_STOPPED);
    CU_ASSERT_STRING_EQUAL(sw.status.trials[2].reason, "MedianStop");
    CU_ASSERT_EQUAL(sw.status.stopped, 1);
    CU_ASSERT_EQUAL(sw.status.best, 1);
    /* 2 still seen running (the runtime has not stopped it yet): STOP again, nothing else */
    o[3] = obs_of(3, RM_TRIAL_RUNNING, NULL, 0);
    o[4] = obs_of(4, RM_TRIAL_RUNNING, NULL, 0);
    pass(&sw, o, 5, 125, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "S2");
    /* 2 stopped (a stopped trial reports Stopped; its status stays Stopped, never Failed); 3 at
     * epoch 1 is below the median but before startEpoch: kept; 4 above the median at epoch 2 */
    const double a3[] = {0.10}, a4[] = {0.75, 0.90};
    o[2] = obs_of(2, RM_TRIAL_FAILED, a2, 2);
    o[3] = obs_of(3, RM_TRIAL_RUNNING, a3, 1);
    o[4] = obs_of(4, RM_TRIAL_RUNNING, a4, 2);
    pass(&sw, o, 5, 130, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "");
    CU_ASSERT_EQUAL(sw.status.trials[2].phase, RM_TRIAL_STOPPED);
    /* 3 fails, 4 succeeds best of all: the sweep succeeds */
    const double a4f[] = {0.75, 0.90, 0.91, 0.92};
    o[3] = obs_of(3, RM_TRIAL_FAILED, a3, 1);
    rm_sfmt(o[3].reason, sizeof o[3].reason, "BackoffLimitExceeded");
    o[4] = obs_of(4, RM_TRIAL_SUCCEEDED, a4f, 4);
    pass(&sw, o, 5, 140, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "");
    CU_ASSERT_EQUAL(sw.status.phase, RM_SWEEP_SUCCEEDED);
    CU_ASSERT_EQUAL(sw.status.best, 4);
    CU_ASSERT_EQUAL(sw.status.succeeded, 3);
    CU_ASSERT_EQUAL(sw.status.failed, 1);
    CU_ASSERT_EQUAL(sw.status.stopped, 1);
    CU_ASSERT_STRING_EQUAL(sw.status.trials[3].reason, "BackoffLimitExceeded");
    CU_ASSERT(sw.status.conditions[RM_SWEEP_COND_SUCCEEDED].status);
    CU_ASSERT_FALSE(sw.status.conditions[RM_SWEEP_COND_RUNNING].status);
    CU_ASSERT_DOUBLE_EQUAL(sw.status.completion_time, 140, 0);
    /* the status survives a JSON round trip (the operator reads its own status back) */
    cJSON *j = rm_sweep_to_json(&sw);
    rm_sweep back;
    CU_ASSERT_EQUAL_FATAL(rm_sweep_from_json(j, &back, &e), RM_OK);
    rm_sweep_action a[16];
    rm_sweep_out out = {.actions = a, .cap = 16};
    CU_ASSERT_EQUAL(rm_sweep_reconcile(&back, o, 5, 150, &out), RM_OK);
    CU_ASSERT_FALSE(out.status_changed); /* nothing to write: the operator does not churn */
    CU_ASSERT_EQUAL(back.status.phase, RM_SWEEP_SUCCEEDED);
    CU_ASSERT_EQUAL(back.status.best, 4);
    CU_ASSERT_EQUAL(back.status.stopped, 1);
    CU_ASSERT_EQUAL(out.status.best, 4);
    CU_ASSERT_EQUAL(out.status.trials[2].phase, RM_TRIAL_STOPPED);
    size_t nc = 0;
    for (size_t i = 0; i < out.nactions; i++)
        nc += a[i].type != RM_SWEEP_ACT_EVENT;
    CU_ASSERT_EQUAL(nc, 0);
    rm_sweep_status_free(&out.status);
    rm_sweep_free(&back);
    cJSON_Delete(j);
    rm_sweep_free(&sw);
}

/* A restarted controller with no recorded status adopts what exists and never duplicates. */
static void test_reconcile_adopt(void)
{
    rm_sweep sw;
    rm_err e = {0};
    char acts[256];
    CU_ASSERT_EQUAL_FATAL(parse_text(rec_body, &sw, &e), RM_OK);
    const double ok[] = {0.7, 0.8, 0.8, 0.8};
    rm_sweep_obs o[3];
    o[0] = obs_of(0, RM_TRIAL_SUCCEEDED, ok, 4);
    o[1] = obs_of(2, RM_TRIAL_RUNNING, NULL, 0);
    o[2] = obs_of(1, RM_TRIAL_RUNNING, NULL, 0);
    pass(&sw, o, 3, 10, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, ""); /* 1 and 2 fill both slots; none re-created */
    CU_ASSERT_EQUAL(sw.status.running, 2);
    CU_ASSERT_EQUAL(sw.status.succeeded, 1);
    /* a created trial whose object vanished before finishing is created again (same name) */
    o[1] = obs_of(2, RM_TRIAL_RUNNING, NULL, 0);
    pass(&sw, o, 2, 20, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C1");
    /* finished trials whose objects are gone stay finished: nothing re-created */
    pass(&sw, NULL, 0, 30, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C1 C2");
    CU_ASSERT_EQUAL(sw.status.succeeded, 1);
    rm_sweep_free(&sw);
}

static void test_reconcile_minimize_and_fail(void)
{
    rm_sweep sw;
    rm_err e = {0};
    char acts[256];
    CU_ASSERT_EQUAL_FATAL(parse_text("  parallelTrials: 3\n  objective: {metric: trainLoss}\n  parameters:\n"
                                     "  - {path: training.optimizer.lr, values: [0.01, 0.02, 0.05]}\n"
                                     "  trialTemplate: {replicas: 1, training: {epochs: 2}}\n",
                                     &sw, &e),
                          RM_OK);
    CU_ASSERT_FALSE(sw.spec.maximize); /* trainLoss defaults to minimize */
    pass(&sw, NULL, 0, 1, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C0 C1 C2");
    const double x[] = {0.5, 0.7}, y[] = {0.5, 0.6}; /* loss = 1 - acc: 0.3, 0.4 */
    rm_sweep_obs o[3];
    o[0] = obs_of(0, RM_TRIAL_SUCCEEDED, x, 2);
    o[1] = obs_of(1, RM_TRIAL_SUCCEEDED, y, 2);
    o[2] = obs_of(2, RM_TRIAL_SUCCEEDED, x, 2);
    pass(&sw, o, 3, 2, acts, sizeof acts);
    CU_ASSERT_EQUAL(sw.status.best, 0); /* lowest loss; a tie goes to the lower index */
    CU_ASSERT_DOUBLE_EQUAL(sw.status.best_objective, 0.3, 1e-12);
    rm_sweep_free(&sw);
    /* every trial failed: the sweep fails */
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "  parallelTrials: 2\n  parameters:\n  - {path: training.optimizer.lr, values: [0.01, 0.02]}\n"
            "  trialTemplate: {replicas: 1}\n",
            &sw, &e),
        RM_OK);
    o[0] = obs_of(0, RM_TRIAL_FAILED, NULL, 0);
    o[1] = obs_of(1, RM_TRIAL_FAILED, NULL, 0);
    pass(&sw, o, 2, 5, acts, sizeof acts);
    CU_ASSERT_EQUAL(sw.status.phase, RM_SWEEP_FAILED);
    CU_ASSERT(sw.status.conditions[RM_SWEEP_COND_FAILED].status);
    CU_ASSERT_EQUAL(sw.status.best, -1);
    rm_sweep_free(&sw);
}

static void test_obs_from_tj(void)
{
    rm_sweep sw;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(parse_text(rec_body, &sw, &e), RM_OK);
    rm_tj tj;
    CU_ASSERT_EQUAL_FATAL(rm_sweep_trial_tj(&sw, 3, &tj, &e), RM_OK);
    tj.status.phase = RM_PHASE_RUNNING;
    rm_tj_progress_add_eval(&tj.status.progress, 2, 200, 0.8, 0.3, 0);
    rm_tj_progress_add_eval(&tj.status.progress, 1, 100, 0.7, 0.4, 0);
    rm_tj_progress_add_eval(&tj.status.progress, 2, 200, 0.81, 0.29, 0); /* re-evaluated: replaced */
    CU_ASSERT_EQUAL(tj.status.progress.nevals, 2);
    CU_ASSERT_EQUAL(tj.status.progress.evals[0].epoch, 1);
    rm_sweep_obs o;
    CU_ASSERT_EQUAL(rm_sweep_obs_from_tj(&sw, &tj, &o), 3);
    CU_ASSERT_EQUAL(o.phase, RM_TRIAL_RUNNING);
    CU_ASSERT_EQUAL(o.nevals, 2);
    CU_ASSERT_DOUBLE_EQUAL(o.evals[1].test_accuracy, 0.81, 0);
    /* the evaluations survive the TrainingJob status round trip */
    cJSON *j = rm_tj_status_to_json(&tj.status);
    rm_tj_status back;
    memset(&back, 0, sizeof back);
    CU_ASSERT_EQUAL(rm_tj_status_from_json(j, &back, &e), RM_OK);
    CU_ASSERT_EQUAL(back.progress.nevals, 2);
    CU_ASSERT_DOUBLE_EQUAL(back.progress.evals[1].train_loss, 0.29, 1e-12);
    cJSON_Delete(j);
    tj.spec.run.suspend = true; /* how the operator stops a trial */
    CU_ASSERT_EQUAL(rm_sweep_obs_from_tj(&sw, &tj, &o), 3);
    CU_ASSERT_EQUAL(o.phase, RM_TRIAL_STOPPED);
    free(tj.name);
    tj.name = strdup("lr-sweep-03"); /* not a name this sweep makes */
    CU_ASSERT_EQUAL(rm_sweep_obs_from_tj(&sw, &tj, &o), -1);
    free(tj.name);
    tj.name = strdup("other-3");
    CU_ASSERT_EQUAL(rm_sweep_obs_from_tj(&sw, &tj, &o), -1);
    rm_tj_free(&tj);
    rm_sweep_free(&sw);
}

/* The evaluation list (common/evals.h) the worker, the rendezvous and status share: ascending
 * step, several per epoch, the same step replaces, full -> the oldest makes room. */
static void test_eval_list(void)
{
    rm_rdzv_eval ev[RM_RDZV_MAX_EVALS];
    int n = 0;
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 2, 200, 0.8, 0.3, 1.5), 1);
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 1, 100, 0.7, 0.4, 1.9), 1);
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 1, 50, 0.6, 0.5, 2.1), 1);  /* mid-epoch: its own entry */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 1, 100, 0.7, 0.4, 1.9), 0); /* the same again */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 0, 10, 0.7, 0.4, 1.9), 0);  /* no epoch */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 1, -1, 0.7, 0.4, 1.9), 0);  /* no such step */
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(ev[0].step == 50 && ev[1].step == 100 && ev[2].step == 200);
    CU_ASSERT(ev[0].epoch == 1 && ev[1].epoch == 1 && ev[2].epoch == 2);
    /* the same step replaces (the final evaluation at the last epoch end's step) */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 3, 200, 0.82, 0.28, 1.4), 1);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ev[2].epoch, 3);
    CU_ASSERT_DOUBLE_EQUAL(ev[2].val_loss, 1.4, 0);
    /* full: each newer one pushes the oldest out; the newest RM_RDZV_MAX_EVALS stay, in order */
    for (int k = 3; k <= RM_RDZV_MAX_EVALS + 5; k++)
        CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 3, 100 * k, 0.9, 0.1, 1.0 / k), 1);
    CU_ASSERT_EQUAL_FATAL(n, RM_RDZV_MAX_EVALS);
    CU_ASSERT_EQUAL(ev[RM_RDZV_MAX_EVALS - 1].step, 100 * (RM_RDZV_MAX_EVALS + 5));
    CU_ASSERT_EQUAL(ev[0].step, 100 * 6);
    bool ascending = true;
    for (int i = 1; i < n; i++)
        ascending = ascending && ev[i - 1].step < ev[i].step;
    CU_ASSERT(ascending);
    /* full: older than every kept one is dropped; in between is inserted, the oldest leaves */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 3, 550, 0.9, 0.1, 1), 0);
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 3, 650, 0.9, 0.1, 1), 1);
    CU_ASSERT_EQUAL(n, RM_RDZV_MAX_EVALS);
    CU_ASSERT(ev[0].step == 650 && ev[1].step == 700);
    CU_ASSERT_EQUAL(ev[RM_RDZV_MAX_EVALS - 1].step, 100 * (RM_RDZV_MAX_EVALS + 5));
    /* a replacement when full changes nothing else */
    CU_ASSERT_EQUAL(rm_rdzv_eval_add(ev, &n, 3, 700, 0.5, 0.1, 1), 1);
    CU_ASSERT(ev[0].step == 650 && ev[1].step == 700 && ev[1].test_accuracy == 0.5);

    /* stepless entries (an older peer or status) are keyed by epoch; a stepped one of the same
     * epoch replaces it and a stepless report keeps the step already known */
    rm_tj_progress p;
    memset(&p, 0, sizeof p);
    CU_ASSERT_EQUAL(rm_tj_progress_add_eval(&p, 2, 0, 0.8, 0.3, 0), 1);
    CU_ASSERT_EQUAL(rm_tj_progress_add_eval(&p, 1, 0, 0.7, 0.4, 0), 1);
    CU_ASSERT_EQUAL(rm_tj_progress_add_eval(&p, 1, 0, 0.71, 0.4, 0), 1);
    CU_ASSERT_EQUAL_FATAL(p.nevals, 2);
    CU_ASSERT(p.evals[0].epoch == 1 && p.evals[0].test_accuracy == 0.71);
    CU_ASSERT_EQUAL(rm_tj_progress_add_eval(&p, 2, 400, 0.8, 0.3, 0.9), 1);
    CU_ASSERT_EQUAL(p.nevals, 2);
    CU_ASSERT(p.evals[1].step == 400 && p.evals[1].val_loss == 0.9);
    CU_ASSERT_EQUAL(rm_tj_progress_add_eval(&p, 2, 0, 0.8, 0.3, 0.9), 0);
    CU_ASSERT_EQUAL(p.evals[1].step, 400);
}

/* objective valLoss: parsed, minimized by default, judged per epoch on the epoch's newest
 * evaluation; a trial that reports no valLoss has no objective (never "best" at 0) */
static void test_val_loss_objective(void)
{
    rm_sweep sw;
    rm_err e = {0};
    char acts[256];
    CU_ASSERT_EQUAL_FATAL(parse_text("  parallelTrials: 3\n  objective: {metric: valLoss}\n"
                                     "  earlyStopping: {rule: median, startEpoch: 1, minTrials: 1}\n"
                                     "  parameters:\n"
                                     "  - {path: training.optimizer.lr, values: [0.01, 0.02, 0.05, 0.1]}\n"
                                     "  trialTemplate: {replicas: 1, training: {epochs: 3}}\n",
                                     &sw, &e),
                          RM_OK);
    CU_ASSERT_EQUAL(sw.spec.metric, RM_SWEEP_VAL_LOSS);
    CU_ASSERT_FALSE(sw.spec.maximize);
    CU_ASSERT_STRING_EQUAL(rm_sweep_metric_name(sw.spec.metric), "valLoss");
    /* the spec round-trips through JSON with its metric */
    cJSON *j = rm_sweep_to_json(&sw);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "spec.objective.metric")->valuestring, "valLoss");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "spec.objective.goal")->valuestring, "minimize");
    cJSON_Delete(j);
    pass(&sw, NULL, 0, 1, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C0 C1 C2");
    rm_sweep_obs o[4];
    memset(o, 0, sizeof o);
    /* trial 0 succeeded: two evaluations per epoch (evalEverySteps), the epoch end's is newest */
    o[0].index = 0;
    o[0].phase = RM_TRIAL_SUCCEEDED;
    static const double v0[] = {3.0, 2.5, 2.2, 2.0, 1.9, 1.8};
    for (int k = 0; k < 6; k++)
        o[0].evals[k] = (rm_tj_eval){.epoch = k / 2 + 1,
                                     .step = 50 * (k + 1),
                                     .test_accuracy = 0.5,
                                     .train_loss = 2,
                                     .val_loss = v0[k]};
    o[0].nevals = 6;
    o[0].have_result = true;
    o[0].test_accuracy = 0.5;
    o[0].val_loss = 1.8;
    /* trial 1 succeeded with a higher (worse) loss and a test accuracy that would win if it counted */
    o[1] = o[0];
    o[1].index = 1;
    for (int k = 0; k < 6; k++)
        o[1].evals[k].val_loss = v0[k] + 0.5;
    o[1].val_loss = 2.3;
    o[1].test_accuracy = 0.99;
    /* trial 2 runs: after epoch 1 its newest loss 2.6 is below the median of 2.5 and 3.0 (2.75):
     * kept (its mid-epoch 3.1 alone would have stopped it) */
    o[2].index = 2;
    o[2].phase = RM_TRIAL_RUNNING;
    o[2].evals[0] = (rm_tj_eval){.epoch = 1, .step = 50, .val_loss = 3.1};
    o[2].evals[1] = (rm_tj_eval){.epoch = 1, .step = 100, .val_loss = 2.6};
    o[2].nevals = 2;
    pass(&sw, o, 3, 2, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "C3");
    CU_ASSERT_EQUAL(sw.status.best, 0); /* the lowest valLoss */
    CU_ASSERT_DOUBLE_EQUAL(sw.status.best_objective, 1.8, 0);
    CU_ASSERT_DOUBLE_EQUAL(sw.status.trials[0].obj[0], 2.5, 0); /* epoch 1's newest */
    CU_ASSERT_DOUBLE_EQUAL(sw.status.trials[2].obj[0], 2.6, 0);
    CU_ASSERT_EQUAL(sw.status.trials[2].phase, RM_TRIAL_RUNNING);
    /* trial 2 at epoch 2: 2.9 is above the median of 2.0 and 2.5 (minimizing): stopped */
    o[2].evals[2] = (rm_tj_eval){.epoch = 2, .step = 200, .val_loss = 2.9};
    o[2].nevals = 3;
    /* trial 3 (an older worker: no valLoss) succeeds: no objective, so never the best */
    o[3].index = 3;
    o[3].phase = RM_TRIAL_SUCCEEDED;
    o[3].evals[0] = (rm_tj_eval){.epoch = 1, .test_accuracy = 0.9};
    o[3].nevals = 1;
    o[3].have_result = true;
    o[3].test_accuracy = 0.9;
    pass(&sw, o, 4, 3, acts, sizeof acts);
    CU_ASSERT_STRING_EQUAL(acts, "S2");
    CU_ASSERT_EQUAL(sw.status.trials[2].phase, RM_TRIAL_STOPPED);
    CU_ASSERT(strstr(sw.status.trials[2].message, "valLoss 2.9000") != NULL);
    CU_ASSERT_FALSE(sw.status.trials[3].have_final);
    CU_ASSERT_EQUAL(sw.status.best, 0);
    rm_sweep_free(&sw);
}

void rm_suite_sweep(void)
{
    static const rm_test_case cases[] = {
        {"parse_base", test_parse_base},
        {"eval_list_step_keyed_newest_kept", test_eval_list},
        {"val_loss_objective_minimized", test_val_loss_objective},
        {"rejects", test_rejects},
        {"grid_ranges", test_grid_ranges},
        {"random", test_random},
        {"set_path", test_set_path},
        {"median", test_median},
        {"reconcile_flow", test_reconcile_flow},
        {"reconcile_adopt", test_reconcile_adopt},
        {"reconcile_minimize_and_fail", test_reconcile_minimize_and_fail},
        {"obs_from_tj", test_obs_from_tj},
    };
    RM_ADD_SUITE("sweep", NULL, NULL, cases);
}
