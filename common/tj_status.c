/* tj_status.c — a TrainingJob's status: to and from JSON, conditions and evaluations
 * (trainingjob.h). The operator writes status and reads back its own, so parsing is lenient about
 * keys it does not own (other writers' conditions, "workers", "selector") and strict about the
 * types of the ones it does. */
#include "common/tj_internal.h"
#include "common/json.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *rm_phase_name(rm_phase p)
{
    return (unsigned)p <= RM_PHASE_SUSPENDED ? rm_phase_names[p] : "Unknown";
}

const char *rm_cond_name(rm_cond_type c)
{
    return (unsigned)c < RM_COND__COUNT ? rm_cond_names[c] : "Unknown";
}

/* Reported-only numbers: written when non-zero and finite. */
static void add_nonzero(cJSON *o, const char *k, double v)
{
    if (v != 0 && isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
}

static void add_time(cJSON *o, const char *k, double t)
{
    if (t > 0) {
        char b[32];
        rm_json_time(b, t);
        cJSON_AddStringToObject(o, k, b);
    }
}

cJSON *rm_tj_status_to_json(const rm_tj_status *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "phase", rm_phase_name(st->phase));
    cJSON_AddNumberToObject(o, "observedGeneration", (double)st->observed_generation);
    cJSON *cs = cJSON_AddArrayToObject(o, "conditions");
    for (int i = 0; cs && i < RM_COND__COUNT; i++) {
        const rm_condition *c = &st->conditions[i];
        if (!c->present)
            continue;
        cJSON *x = cJSON_CreateObject();
        if (!x)
            continue;
        cJSON_AddStringToObject(x, "type", rm_cond_name((rm_cond_type)i));
        cJSON_AddStringToObject(x, "status", c->status ? "True" : "False");
        cJSON_AddStringToObject(x, "reason", c->reason);
        cJSON_AddStringToObject(x, "message", c->message);
        char b[32];
        rm_json_time(b, c->last_transition);
        cJSON_AddStringToObject(x, "lastTransitionTime", b);
        cJSON_AddNumberToObject(x, "observedGeneration", (double)c->observed_generation);
        cJSON_AddItemToArray(cs, x);
    }
    cJSON_AddNumberToObject(o, "replicas", st->replicas);
    cJSON_AddNumberToObject(o, "readyReplicas", st->ready_replicas);
    if (st->ps_replicas > 0) {
        cJSON *ps = cJSON_AddObjectToObject(o, "parameterServers");
        if (ps) {
            cJSON_AddNumberToObject(ps, "replicas", st->ps_replicas);
            cJSON_AddNumberToObject(ps, "readyReplicas", st->ps_ready);
        }
    }
    cJSON_AddNumberToObject(o, "epoch", st->epoch);
    cJSON_AddNumberToObject(o, "restarts", st->restarts);
    cJSON *p = cJSON_AddObjectToObject(o, "progress");
    if (p) {
        cJSON_AddNumberToObject(p, "step", (double)st->progress.step);
        cJSON_AddNumberToObject(p, "epoch", st->progress.train_epoch);
        cJSON_AddNumberToObject(p, "loss", isfinite(st->progress.loss) ? st->progress.loss : 0);
        cJSON_AddNumberToObject(p, "samplesPerSecond", st->progress.samples_per_second);
        cJSON_AddNumberToObject(p, "lastCheckpointStep", (double)st->progress.last_checkpoint_step);
        cJSON_AddNumberToObject(p, "allreduceGBps", st->progress.allreduce_gbps);
        add_nonzero(p, "tokensPerSecond", st->progress.tokens_per_second);
        add_nonzero(p, "percent", st->progress.percent);
        add_nonzero(p, "etaSeconds", st->progress.eta_seconds);
        if (st->progress.nevals > 0) {
            cJSON *ev = cJSON_AddArrayToObject(p, "evaluations");
            for (int i = 0; ev && i < st->progress.nevals && i < RM_TJ_MAX_EVALS; i++) {
                const rm_tj_eval *e = &st->progress.evals[i];
                cJSON *x = cJSON_CreateObject();
                if (!x)
                    break;
                cJSON_AddNumberToObject(x, "epoch", e->epoch);
                cJSON_AddNumberToObject(x, "testAccuracy", isfinite(e->test_accuracy) ? e->test_accuracy : 0);
                cJSON_AddNumberToObject(x, "trainLoss", isfinite(e->train_loss) ? e->train_loss : 0);
                if (e->step > 0)
                    cJSON_AddNumberToObject(x, "step", (double)e->step);
                if (e->val_loss != 0 && isfinite(e->val_loss))
                    cJSON_AddNumberToObject(x, "valLoss", e->val_loss);
                cJSON_AddItemToArray(ev, x);
            }
        }
    }
    if (st->high_step > 0 || st->high_epoch > 0) {
        cJSON *h = cJSON_AddObjectToObject(o, "stepHighWater");
        if (h) {
            cJSON_AddNumberToObject(h, "step", (double)st->high_step);
            cJSON_AddNumberToObject(h, "epoch", st->high_epoch);
        }
    }
    if (st->result.present) {
        cJSON *r = cJSON_AddObjectToObject(o, "result");
        if (r) {
            cJSON_AddNumberToObject(r, "testAccuracy", st->result.test_accuracy);
            cJSON_AddNumberToObject(r, "trainLoss", st->result.train_loss);
            cJSON_AddNumberToObject(r, "steps", (double)st->result.steps);
            cJSON_AddNumberToObject(r, "seconds", st->result.seconds);
            cJSON_AddNumberToObject(r, "samplesPerSecond", st->result.samples_per_second);
            if (st->result.peak_rss_bytes > 0) {
                cJSON *m = cJSON_AddObjectToObject(r, "memoryBytes");
                cJSON_AddNumberToObject(m, "params", st->result.memory_params);
                cJSON_AddNumberToObject(m, "grads", st->result.memory_grads);
                cJSON_AddNumberToObject(m, "optimizer", st->result.memory_optimizer);
                cJSON_AddNumberToObject(m, "activations", st->result.memory_activations);
                cJSON_AddNumberToObject(r, "peakRssBytes", st->result.peak_rss_bytes);
            }
            add_nonzero(r, "valLoss", st->result.val_loss);
            add_nonzero(r, "tokensPerSecond", st->result.tokens_per_second);
            add_nonzero(r, "mfu", st->result.mfu);
            if (st->result.model_uri[0]) {
                cJSON *m = cJSON_AddObjectToObject(r, "model");
                cJSON_AddStringToObject(m, "uri", st->result.model_uri);
                if (st->result.model_sha256[0])
                    cJSON_AddStringToObject(m, "sha256", st->result.model_sha256);
                add_nonzero(m, "bytes", (double)st->result.model_bytes);
            }
        }
    }
    if (st->data.uri[0]) {
        cJSON *d = cJSON_AddObjectToObject(o, "data");
        cJSON_AddStringToObject(d, "uri", st->data.uri);
        cJSON_AddNumberToObject(d, "bytes", (double)st->data.bytes);
        cJSON_AddNumberToObject(d, "totalBytes", (double)st->data.total_bytes);
    }
    add_time(o, "startTime", st->start_time);
    add_time(o, "completionTime", st->completion_time);
    add_time(o, "lastRestartTime", st->last_restart_time);
    if (st->message[0])
        cJSON_AddStringToObject(o, "message", st->message);
    return o;
}

static int p_time(const cJSON *o, const char *k, const char *ctx, double *out, rm_err *err)
{
    const char *s = NULL;
    int rc = tj_optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    if (rm_json_parse_time(s, out) != RM_OK) {
        char f[FIELD_CAP];
        tj_join(f, ctx, k);
        return rm_err_field(err, RM_EINVAL, f, "must be an RFC 3339 time (got \"%s\")", s);
    }
    return RM_OK;
}

static int p_buf(const cJSON *o, const char *k, const char *ctx, char *buf, size_t cap, rm_err *err)
{
    const char *s = NULL;
    int rc = tj_optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    snprintf(buf, cap, "%s", s);
    return RM_OK;
}

/* Status is written by us, so unknown keys (e.g. the operator's "workers", "selector") are kept
 * out of the struct but are not errors. */
int rm_tj_status_from_json(const cJSON *so, rm_tj_status *st, rm_err *err)
{
    int rc = RM_OK, iv;
    const cJSON *o;
    memset(st, 0, sizeof *st);
    if (!so || cJSON_IsNull(so))
        return RM_OK;
    if (!cJSON_IsObject(so))
        return rm_err_field(err, RM_EINVAL, "status", "must be an object");
    iv = 0;
    TRY(tj_enum(so, "phase", "status", rm_phase_names, &iv, err));
    st->phase = (rm_phase)iv;
    TRY(tj_i64(so, "observedGeneration", "status", &st->observed_generation, NULL, 0, err));
    TRY(tj_arr(so, "conditions", "status", &o, err));
    if (o) {
        int i = 0;
        for (const cJSON *c = o->child; c; c = c->next, i++) {
            char cctx[FIELD_CAP];
            snprintf(cctx, sizeof cctx, "status.conditions[%d]", i);
            if (!cJSON_IsObject(c)) {
                rc = rm_err_field(err, RM_EINVAL, cctx, "must be an object");
                goto out;
            }
            int ti = 0;
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(c, "type");
            if (!cJSON_IsString(tt) || (ti = rm_enum_index(rm_cond_names, tt->valuestring)) < 0)
                continue; /* a condition type we do not own: ignore */
            rm_condition *x = &st->conditions[ti];
            const char *sv = NULL;
            TRY(rm_json_str(c, "status", true, cctx, &sv, err));
            if (strcmp(sv, "True") != 0 && strcmp(sv, "False") != 0 && strcmp(sv, "Unknown") != 0) {
                char f[FIELD_CAP + 8];
                snprintf(f, sizeof f, "%s.status", cctx);
                rc = rm_err_field(err, RM_EINVAL, f, "must be True or False");
                goto out;
            }
            x->status = strcmp(sv, "True") == 0;
            TRY(p_buf(c, "reason", cctx, x->reason, sizeof x->reason, err));
            TRY(p_buf(c, "message", cctx, x->message, sizeof x->message, err));
            TRY(p_time(c, "lastTransitionTime", cctx, &x->last_transition, err));
            TRY(tj_i64(c, "observedGeneration", cctx, &x->observed_generation, NULL, 0, err));
            x->present = true;
        }
    }
    TRY(tj_int(so, "replicas", "status", &st->replicas, NULL, 0, err));
    TRY(tj_int(so, "readyReplicas", "status", &st->ready_replicas, NULL, 0, err));
    {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(so, "parameterServers");
        if (cJSON_IsObject(ps)) {
            TRY(tj_int(ps, "replicas", "status.parameterServers", &st->ps_replicas, NULL, 0, err));
            TRY(tj_int(ps, "readyReplicas", "status.parameterServers", &st->ps_ready, NULL, 0, err));
        }
    }
    TRY(tj_int(so, "epoch", "status", &st->epoch, NULL, 0, err));
    TRY(tj_int(so, "restarts", "status", &st->restarts, NULL, 0, err));
    TRY(tj_obj(so, "progress", "status", NULL, &o, NULL, err));
    if (o) {
        TRY(tj_i64(o, "step", "status.progress", &st->progress.step, NULL, 0, err));
        TRY(tj_int(o, "epoch", "status.progress", &st->progress.train_epoch, NULL, 0, err));
        TRY(tj_num(o, "loss", "status.progress", &st->progress.loss, NULL, 0, err));
        TRY(tj_num(o, "samplesPerSecond", "status.progress", &st->progress.samples_per_second, NULL, 0, err));
        TRY(tj_i64(o, "lastCheckpointStep", "status.progress", &st->progress.last_checkpoint_step, NULL, 0,
                   err));
        TRY(tj_num(o, "allreduceGBps", "status.progress", &st->progress.allreduce_gbps, NULL, 0, err));
        TRY(tj_num(o, "tokensPerSecond", "status.progress", &st->progress.tokens_per_second, NULL, 0, err));
        TRY(tj_num(o, "percent", "status.progress", &st->progress.percent, NULL, 0, err));
        TRY(tj_num(o, "etaSeconds", "status.progress", &st->progress.eta_seconds, NULL, 0, err));
        const cJSON *ev = NULL;
        TRY(tj_arr(o, "evaluations", "status.progress", &ev, err));
        int k = 0;
        for (const cJSON *x = ev ? ev->child : NULL; x; x = x->next, k++) {
            char ectx[64];
            rm_sfmt(ectx, sizeof ectx, "status.progress.evaluations[%d]", k);
            int e = 0;
            int64_t step = 0;
            double acc = 0, loss = 0, vloss = 0;
            if (!cJSON_IsObject(x)) {
                rc = rm_err_field(err, RM_EINVAL, ectx, "must be an object");
                goto out;
            }
            TRY(tj_int(x, "epoch", ectx, &e, NULL, 0, err));
            TRY(tj_num(x, "testAccuracy", ectx, &acc, NULL, 0, err));
            TRY(tj_num(x, "trainLoss", ectx, &loss, NULL, 0, err));
            TRY(tj_i64(x, "step", ectx, &step, NULL, 0, err));
            TRY(tj_num(x, "valLoss", ectx, &vloss, NULL, 0, err));
            rm_tj_progress_add_eval(&st->progress, e, step, acc, loss, vloss);
        }
    }
    TRY(tj_obj(so, "stepHighWater", "status", NULL, &o, NULL, err));
    if (o) {
        TRY(tj_i64(o, "step", "status.stepHighWater", &st->high_step, NULL, 0, err));
        TRY(tj_int(o, "epoch", "status.stepHighWater", &st->high_epoch, NULL, 0, err));
    }
    TRY(tj_obj(so, "result", "status", NULL, &o, NULL, err));
    if (o) {
        st->result.present = true;
        TRY(tj_num(o, "testAccuracy", "status.result", &st->result.test_accuracy, NULL, 0, err));
        TRY(tj_num(o, "trainLoss", "status.result", &st->result.train_loss, NULL, 0, err));
        TRY(tj_i64(o, "steps", "status.result", &st->result.steps, NULL, 0, err));
        TRY(tj_num(o, "seconds", "status.result", &st->result.seconds, NULL, 0, err));
        TRY(tj_num(o, "samplesPerSecond", "status.result", &st->result.samples_per_second, NULL, 0, err));
        TRY(tj_num(o, "peakRssBytes", "status.result", &st->result.peak_rss_bytes, NULL, 0, err));
        const cJSON *mb = NULL;
        TRY(tj_obj(o, "memoryBytes", "status.result", NULL, &mb, NULL, err));
        if (mb) {
            TRY(tj_num(mb, "params", "status.result.memoryBytes", &st->result.memory_params, NULL, 0, err));
            TRY(tj_num(mb, "grads", "status.result.memoryBytes", &st->result.memory_grads, NULL, 0, err));
            TRY(tj_num(mb, "optimizer", "status.result.memoryBytes", &st->result.memory_optimizer, NULL, 0,
                       err));
            TRY(tj_num(mb, "activations", "status.result.memoryBytes", &st->result.memory_activations, NULL,
                       0, err));
        }
        TRY(tj_num(o, "valLoss", "status.result", &st->result.val_loss, NULL, 0, err));
        TRY(tj_num(o, "tokensPerSecond", "status.result", &st->result.tokens_per_second, NULL, 0, err));
        TRY(tj_num(o, "mfu", "status.result", &st->result.mfu, NULL, 0, err));
        const cJSON *m = NULL;
        TRY(tj_obj(o, "model", "status.result", NULL, &m, NULL, err));
        if (m) {
            TRY(p_buf(m, "uri", "status.result.model", st->result.model_uri, sizeof st->result.model_uri,
                      err));
            TRY(p_buf(m, "sha256", "status.result.model", st->result.model_sha256,
                      sizeof st->result.model_sha256, err));
            TRY(tj_i64(m, "bytes", "status.result.model", &st->result.model_bytes, NULL, 0, err));
        }
    }
    TRY(tj_obj(so, "data", "status", NULL, &o, NULL, err));
    if (o) {
        TRY(p_buf(o, "uri", "status.data", st->data.uri, sizeof st->data.uri, err));
        TRY(tj_i64(o, "bytes", "status.data", &st->data.bytes, NULL, 0, err));
        TRY(tj_i64(o, "totalBytes", "status.data", &st->data.total_bytes, NULL, 0, err));
    }
    TRY(p_time(so, "startTime", "status", &st->start_time, err));
    TRY(p_time(so, "completionTime", "status", &st->completion_time, err));
    TRY(p_time(so, "lastRestartTime", "status", &st->last_restart_time, err));
    TRY(p_buf(so, "message", "status", st->message, sizeof st->message, err));
out:
    if (rc)
        memset(st, 0, sizeof *st);
    return rc;
}

int rm_tj_set_condition(rm_tj_status *st, rm_cond_type type, bool status, const char *reason,
                        const char *message, int64_t generation, double now)
{
    if (!st || (unsigned)type >= RM_COND__COUNT)
        return 0;
    rm_condition *c = &st->conditions[type];
    char r[sizeof c->reason] = "", m[sizeof c->message] = "";
    snprintf(r, sizeof r, "%s", reason ? reason : "");
    snprintf(m, sizeof m, "%s", message ? message : "");
    int changed = 0;
    if (!c->present || c->status != status) {
        c->last_transition = now;
        changed = 1;
    }
    if (!c->present || strcmp(c->reason, r) != 0 || strcmp(c->message, m) != 0 ||
        c->observed_generation != generation)
        changed = 1;
    c->present = true;
    c->status = status;
    memcpy(c->reason, r, sizeof r);
    memcpy(c->message, m, sizeof m);
    c->observed_generation = generation;
    return changed;
}

int rm_tj_progress_add_eval(rm_tj_progress *p, int epoch, int64_t step, double test_accuracy,
                            double train_loss, double val_loss)
{
    rm_eval e = {.epoch = epoch,
                 .step = step,
                 .test_accuracy = test_accuracy,
                 .train_loss = train_loss,
                 .val_loss = val_loss};
    return rm_eval_add(p->evals, &p->nevals, RM_TJ_MAX_EVALS, &e);
}
