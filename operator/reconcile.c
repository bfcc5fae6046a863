/* reconcile.c — the pure reconcile core (rules R0..R9 are written out in reconcile.h).
 *
 * Design: one pass over a small on-stack view of the world (per-index observation and rendezvous
 * membership), then decisions in a fixed order — terminal, validation, created, suspend/resume,
 * deadline, success, failure/restart, resize, creation, phase — each of which either returns
 * through the terminal path or falls through. Nothing here reads a clock, allocates or does I/O,
 * so the same input always gives the same output and the unit tests drive it as a table. */
#include "operator/reconcile.h"
#include "common/datasets.h"
#include "common/worker_env.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_reconcile_opts_default(rm_reconcile_opts *o)
{
    memset(o, 0, sizeof *o);
    o->pending_timeout_s = 60;
    o->create_failure_threshold = 3;
    o->force_delete_after_s = 30;
    o->backoff_cap_s = 300;
    o->recovery_loop_epochs = RM_RECOVERY_LOOP_EPOCHS;
}

const char *rm_action_name(rm_action_type t)
{
    switch (t) {
    case RM_ACT_CREATE_WORKER:
        return "CreateWorker";
    case RM_ACT_DELETE_WORKER:
        return "DeleteWorker";
    case RM_ACT_RESTART_GROUP:
        return "RestartGroup";
    case RM_ACT_SET_RDZV:
        return "SetRendezvous";
    case RM_ACT_STOP_RDZV:
        return "StopRendezvous";
    case RM_ACT_EVENT:
        return "Event";
    case RM_ACT_DELETE_JOB:
        return "DeleteJob";
    case RM_ACT_REQUEUE_AFTER:
        return "RequeueAfter";
    }
    return "Unknown";
}

const char *rm_action_str(const rm_action *a, char *buf, size_t cap)
{
    switch (a->type) {
    case RM_ACT_CREATE_WORKER:
        rm_sfmt(buf, cap, "create %d epoch=%d", a->index, a->epoch);
        break;
    case RM_ACT_DELETE_WORKER:
        rm_sfmt(buf, cap, "delete %d%s (%s)", a->index, a->force ? " force" : "", a->reason);
        break;
    case RM_ACT_RESTART_GROUP:
        rm_sfmt(buf, cap, "restart from=%d", a->epoch);
        break;
    case RM_ACT_SET_RDZV:
        rm_sfmt(buf, cap, "rdzv desired=%d min=%d", a->desired, a->min);
        break;
    case RM_ACT_STOP_RDZV:
        rm_sfmt(buf, cap, "rdzv stop");
        break;
    case RM_ACT_EVENT:
        rm_sfmt(buf, cap, "event %s %s %s", a->warning ? "Warning" : "Normal", a->reason, a->message);
        break;
    case RM_ACT_DELETE_JOB:
        rm_sfmt(buf, cap, "delete job");
        break;
    case RM_ACT_REQUEUE_AFTER:
        rm_sfmt(buf, cap, "requeue %.3f", a->seconds);
        break;
    default:
        rm_sfmt(buf, cap, "?");
        break;
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------------
 * Working state of one call. */
#define MAXW RM_RDZV_MAX_WORLD

typedef struct rc_ctx {
    const rm_reconcile_in *in;
    const rm_tj *job;
    rm_reconcile_out *out;
    rm_tj_status *st;
    rm_reconcile_opts o;
    double now;
    int64_t gen;
    char jobname[192];
    int rc;         /* RM_ETOOBIG once the action array overflowed */
    double requeue; /* smallest timer; <0 = none */
    /* per-index views */
    const rm_observed_worker *obs[MAXW];
    const rm_rdzv_member *mem[MAXW]; /* member entry for index i (any epoch), NULL if none */
    bool culprit[MAXW];
    bool deleted[MAXW]; /* a DELETE was emitted this call */
    /* shared between the rules of one call */
    int D, minr;                                   /* desired workers, minReplicas (reconcile.h notation) */
    int target;                                    /* elastic: the group size to register (R7) */
    bool resumed;                                  /* R8 resumed in this call */
    bool new_failure, deadline_failure, need_bump; /* R5 */
    int nculprits;
    char why[256];         /* R5: the first culprit's story */
    bool cant_start[MAXW]; /* R7 elastic: index that cannot start */
    bool st_flag[MAXW];    /* R5 c): stale members */
    /* indexes in use: above D, every observed worker and member index (the loops over indexes
     * stop here, not at MAXW: RM_RDZV_MAX_WORLD is 16,384) */
    int span;
} rc_ctx;

static rm_action *push(rc_ctx *c, rm_action_type t)
{
    rm_reconcile_out *o = c->out;
    if (o->nactions >= o->cap) {
        c->rc = RM_ETOOBIG;
        return NULL;
    }
    rm_action *a = &o->actions[o->nactions++];
    memset(a, 0, sizeof *a);
    a->type = t;
    return a;
}

static void event(rc_ctx *c, bool warning, const char *reason, const char *fmt, ...) RM_PRINTF(4, 5);
static void event(rc_ctx *c, bool warning, const char *reason, const char *fmt, ...)
{
    rm_action *a = push(c, RM_ACT_EVENT);
    if (!a)
        return;
    a->warning = warning;
    rm_sfmt(a->reason, sizeof a->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->message, sizeof a->message, fmt, ap);
    va_end(ap);
}

static void del(rc_ctx *c, int index, bool force, const char *why)
{
    if (index >= 0 && index < MAXW) {
        if (c->deleted[index])
            return;
        c->deleted[index] = true;
    }
    rm_action *a = push(c, RM_ACT_DELETE_WORKER);
    if (!a)
        return;
    a->index = index;
    a->force = force;
    rm_sfmt(a->reason, sizeof a->reason, "%s", why);
}

static void create(rc_ctx *c, int index)
{
    rm_action *a = push(c, RM_ACT_CREATE_WORKER);
    if (!a)
        return;
    a->index = index;
    a->epoch = c->st->epoch;
    if (c->st->start_time == 0)
        c->st->start_time = c->now;
}

static void restart_group(rc_ctx *c)
{
    rm_action *a = push(c, RM_ACT_RESTART_GROUP);
    if (!a)
        return;
    a->epoch = c->st->epoch;
    c->st->epoch++;
}

static void requeue_in(rc_ctx *c, double s)
{
    if (s < 0.001)
        s = 0.001;
    if (c->requeue < 0 || s < c->requeue)
        c->requeue = s;
}

static int cond(rc_ctx *c, rm_cond_type t, bool status, const char *reason, const char *msg)
{
    return rm_tj_set_condition(c->st, t, status, reason, msg, c->gen, c->now);
}

/* Flip a condition to False only if it was ever set (conditions that never happened stay absent). */
static void cond_off(rc_ctx *c, rm_cond_type t, const char *reason, const char *msg)
{
    if (c->st->conditions[t].present && c->st->conditions[t].status)
        cond(c, t, false, reason, msg);
    else if (c->st->conditions[t].present)
        c->st->conditions[t].observed_generation = c->gen;
}

static bool cond_true(const rm_tj_status *st, rm_cond_type t)
{
    return st->conditions[t].present && st->conditions[t].status;
}

static bool is_terminating(const rm_observed_worker *w)
{
    return w->phase == RM_WORKER_TERMINATING || w->deletion_started_at > 0;
}

static bool exists(const rm_observed_worker *w)
{
    return w && w->phase != RM_WORKER_MISSING;
}

/* Member of the rendezvous' current round (closed: has a rank; open: joined this epoch). */
static bool current_member(const rm_rdzv_state *r, const rm_rdzv_member *m)
{
    if (!r || !m || m->epoch != r->epoch)
        return false;
    return r->closed ? m->rank >= 0 : true;
}

/* ---------------------------------------------------------------------------------------------
 * Terminal handling (R9): stop the rendezvous, clean up per policy, TTL. Also used right after
 * the transition to Succeeded/Failed in the same call. */
static void terminal(rc_ctx *c)
{
    const rm_tj_spec *sp = &c->job->spec;
    push(c, RM_ACT_STOP_RDZV);
    for (size_t k = 0; k < c->in->nworkers; k++) {
        const rm_observed_worker *w = &c->in->workers[k];
        if (!exists(w) || is_terminating(w))
            continue;
        bool kill = false;
        switch (sp->run.clean_pod_policy) {
        case RM_CLEAN_ALL:
            kill = true;
            break;
        case RM_CLEAN_RUNNING:
            kill = w->phase == RM_WORKER_PENDING || w->phase == RM_WORKER_RUNNING;
            break;
        case RM_CLEAN_NONE:
            kill = false;
            break;
        }
        if (kill)
            del(c, w->index, !w->node_ready, "cleanup");
    }
    int64_t ttl = sp->run.ttl_seconds_after_finished;
    if (ttl >= 0 && c->st->completion_time > 0) {
        double at = c->st->completion_time + (double)ttl;
        if (c->now >= at)
            push(c, RM_ACT_DELETE_JOB);
        else
            requeue_in(c, at - c->now);
    }
}

static void finish_failed(rc_ctx *c, const char *reason, const char *msg)
{
    rm_tj_status *st = c->st;
    bool was = cond_true(st, RM_COND_FAILED);
    cond(c, RM_COND_FAILED, true, reason, msg);
    cond_off(c, RM_COND_RUNNING, reason, msg);
    cond_off(c, RM_COND_RESTARTING, reason, msg);
    st->phase = RM_PHASE_FAILED;
    rm_sfmt(st->message, sizeof st->message, "%s", msg);
    if (!was) {
        st->completion_time = c->now;
        event(c, true, reason, "%s", msg);
    }
}

static void copy_result(rc_ctx *c)
{
    const rm_rdzv_state *r = c->in->rdzv;
    if (!r || !r->have_result)
        return;
    rm_tj_result *res = &c->st->result;
    res->present = true;
    res->test_accuracy = r->test_accuracy;
    res->train_loss = r->train_loss;
    res->seconds = r->seconds;
    res->samples_per_second = r->samples_per_second;
    /* the final evaluation's loss (a worker that predates result.valLoss: the newest listed) */
    res->val_loss = r->val_loss != 0 || r->nevals == 0 ? r->val_loss : r->evals[r->nevals - 1].val_loss;
    res->tokens_per_second = r->tokens_per_second;
    res->steps = r->steps;
    res->memory_params = r->mem_params;
    res->memory_grads = r->mem_grads;
    res->memory_optimizer = r->mem_optimizer;
    res->memory_activations = r->mem_activations;
    res->peak_rss_bytes = r->peak_rss;
    rm_sfmt(res->model_uri, sizeof res->model_uri, "%s", r->model_uri);
    rm_sfmt(res->model_sha256, sizeof res->model_sha256, "%s", r->model_sha256);
    res->model_bytes = (int64_t)r->model_bytes;
}

/* The end-of-run export failed (docs/models-and-data.md, "Shapes and status"): the training
 * succeeded and its checkpoints stay, so the job still ends Succeeded; the condition
 * ExportFailing and a Warning event say why (the worker's message names spec.output.uri and the
 * folder or s3:// URI, never a credential). */
static void export_outcome(rc_ctx *c, bool was)
{
    const rm_rdzv_state *r = c->in->rdzv;
    if (!r || !r->have_result || !r->export_error[0] || cond_true(c->st, RM_COND_EXPORT_FAILING))
        return;
    cond(c, RM_COND_EXPORT_FAILING, true, "ExportFailed", r->export_error);
    if (!was)
        event(c, true, "ExportFailing",
              "TrainingJob %s: the model was not exported (the checkpoints stay): %s", c->jobname,
              r->export_error);
}

static void finish_succeeded(rc_ctx *c)
{
    rm_tj_status *st = c->st;
    char msg[256];
    rm_sfmt(msg, sizeof msg, "TrainingJob %s successfully completed.", c->jobname);
    bool was = cond_true(st, RM_COND_SUCCEEDED);
    cond(c, RM_COND_SUCCEEDED, true, "Succeeded", msg);
    cond_off(c, RM_COND_RUNNING, "Succeeded", msg);
    cond_off(c, RM_COND_RESTARTING, "Succeeded", msg);
    st->phase = RM_PHASE_SUCCEEDED;
    st->message[0] = 0;
    copy_result(c);
    export_outcome(c, was);
    if (!was) {
        st->completion_time = c->now;
        event(c, false, "Succeeded", "%s", msg);
    }
}

/* Worker stuck Terminating on a NotReady node: force after the grace (every phase). */
static void force_stuck(rc_ctx *c)
{
    for (size_t k = 0; k < c->in->nworkers; k++) {
        const rm_observed_worker *w = &c->in->workers[k];
        if (!is_terminating(w) || w->node_ready || w->deletion_started_at <= 0)
            continue;
        double at = w->deletion_started_at + c->o.force_delete_after_s;
        if (c->now >= at)
            del(c, w->index, true, "stuck-terminating");
        else
            requeue_in(c, at - c->now);
    }
}

static double backoff_delay(const rc_ctx *c, int k /* 1-based restart number */)
{
    if (k < 2 || c->st->last_restart_time <= 0)
        return 0;
    double d = c->job->spec.restart.backoff_seconds;
    for (int i = 2; i < k && d < c->o.backoff_cap_s; i++)
        d *= 2;
    return d > c->o.backoff_cap_s ? c->o.backoff_cap_s : d;
}

/* Copy the live numbers from the rendezvous into status (R4). */
static void copy_progress(rc_ctx *c, int target)
{
    const rm_rdzv_state *r = c->in->rdzv;
    rm_tj_status *st = c->st;
    int ready = 0;
    for (size_t k = 0; k < c->in->nworkers; k++) {
        const rm_observed_worker *w = &c->in->workers[k];
        if (w->phase == RM_WORKER_RUNNING && w->ready && !is_terminating(w))
            ready++;
    }
    st->ready_replicas = ready;
    if (c->o.no_rendezvous || !r) {
        if (c->o.no_rendezvous) {
            int running = 0;
            for (size_t k = 0; k < c->in->nworkers; k++)
                if (c->in->workers[k].phase == RM_WORKER_RUNNING)
                    running++;
            st->replicas = running < target ? running : target;
        }
        return;
    }
    st->replicas = r->closed ? r->world_size : 0;
    for (int i = 0; i < r->nmembers && i < (int)RM_ARRAY_LEN(r->members); i++) {
        const rm_rdzv_member *m = &r->members[i];
        if (m->rank == 0 && m->epoch == r->epoch && (m->last_report > 0 || m->step > 0)) {
            st->progress.step = m->step;
            st->progress.train_epoch = m->train_epoch;
            st->progress.loss = m->loss;
            st->progress.samples_per_second = m->samples_per_second;
            st->progress.last_checkpoint_step = m->last_checkpoint_step;
            st->progress.allreduce_gbps = m->allreduce_gbps;
            st->progress.tokens_per_second = m->tokens_per_second;
            rm_tj_progress_estimate(&c->job->spec, &st->progress);
        }
    }
    /* evaluations: merged, so a rendezvous that forgot them (an operator restart) never erases
     * what status already holds */
    for (int i = 0; i < r->nevals && i < RM_RDZV_MAX_EVALS; i++) {
        const rm_rdzv_eval *e = &r->evals[i];
        rm_tj_progress_add_eval(&st->progress, e->epoch, e->step, e->test_accuracy, e->train_loss,
                                e->val_loss);
    }
}

/* R0b: the spec as written is invalid; the job keeps running at its last valid spec. */
static void invalid_update(rc_ctx *c, const char *why)
{
    char msg[256];
    rm_sfmt(msg, sizeof msg,
            "TrainingJob %s: the update is not applied, the job keeps its last "
            "valid spec: %s",
            c->jobname, why);
    bool was = cond_true(c->st, RM_COND_INVALID_SPEC);
    cond(c, RM_COND_INVALID_SPEC, true, "InvalidUpdate", msg);
    if (!was)
        event(c, true, "InvalidSpec", "%s", msg);
}

/* Members of R's current epoch that reported at least once. */
static bool reported_now(const rm_rdzv_state *r, const rm_rdzv_member *m)
{
    return r && m->epoch == r->epoch && m->last_report > 0;
}

/* R10: the group re-forms without ever getting past the highest step it reached (a restore
 * that desyncs the ranks, a batch larger than the data set): after opts.recovery_loop_epochs
 * epochs with no step above status.stepHighWater the job fails with reason RecoveryLoop.
 * Returns true when it failed the job. */
static bool recovery_loop(rc_ctx *c)
{
    const rm_rdzv_state *r = c->in->rdzv;
    rm_tj_status *st = c->st;
    if (!r || c->o.no_rendezvous || c->o.recovery_loop_epochs <= 0)
        return false;
    for (int i = 0; i < r->nmembers && i < (int)RM_ARRAY_LEN(r->members); i++) {
        const rm_rdzv_member *m = &r->members[i];
        if (reported_now(r, m) && m->step > st->high_step) {
            st->high_step = m->step;
            st->high_epoch = r->epoch;
        }
    }
    if (st->high_epoch == 0 && st->high_step == 0)
        st->high_epoch = r->epoch > 0 ? r->epoch : 1; /* counting starts at the first round */
    int loops = r->epoch - st->high_epoch;
    if (loops < c->o.recovery_loop_epochs)
        return false;
    char msg[256];
    rm_sfmt(msg, sizeof msg,
            "TrainingJob %s: the group re-formed %d times (rendezvous epoch %d to "
            "%d) without getting past step %lld; failing instead of looping",
            c->jobname, loops, st->high_epoch, r->epoch, (long long)st->high_step);
    finish_failed(c, "RecoveryLoop", msg);
    return true;
}

/* R11: workers report consecutive failed checkpoint writes. The first raises CheckpointFailing
 * and a Warning event; a write that succeeds again clears it; failing for longer than
 * progressDeadlineSeconds fails the job with reason CheckpointFailing. Returns true when it
 * failed the job. */
static bool checkpoint_failing(rc_ctx *c)
{
    const rm_rdzv_state *r = c->in->rdzv;
    rm_tj_status *st = c->st;
    if (!r || c->o.no_rendezvous)
        return false;
    int reported = 0;
    const rm_rdzv_member *bad = NULL;
    for (int i = 0; i < r->nmembers && i < (int)RM_ARRAY_LEN(r->members); i++) {
        const rm_rdzv_member *m = &r->members[i];
        if (!reported_now(r, m))
            continue;
        reported++;
        if (m->checkpoint_failures > 0 && (!bad || m->checkpoint_failures > bad->checkpoint_failures))
            bad = m;
    }
    /* a parameter server's checkpoints count as a worker's (docs/strategies.md#failure-semantics):
     * the servers report theirs with their registration, whether or not a round is closed */
    bool ps_bad =
        r->ps_checkpoint_failures > 0 && (!bad || r->ps_checkpoint_failures >= bad->checkpoint_failures);
    if (reported == 0 && !ps_bad)
        return false; /* a round re-forming: nothing new to judge */
    bool was = cond_true(st, RM_COND_CHECKPOINT_FAILING);
    char msg[256];
    if (!bad && !ps_bad) {
        if (was)
            cond(c, RM_COND_CHECKPOINT_FAILING, false, "CheckpointWritten", "checkpoints are written again");
        return false;
    }
    if (ps_bad)
        rm_sfmt(msg, sizeof msg, "parameter server %d: %d checkpoint write%s failed in a row: %s",
                r->ps_checkpoint_index, r->ps_checkpoint_failures, r->ps_checkpoint_failures == 1 ? "" : "s",
                r->ps_checkpoint_error[0] ? r->ps_checkpoint_error : "(no message)");
    else
        rm_sfmt(msg, sizeof msg, "worker %s: %d checkpoint write%s failed in a row: %s", bad->worker_id,
                bad->checkpoint_failures, bad->checkpoint_failures == 1 ? "" : "s",
                bad->checkpoint_error[0] ? bad->checkpoint_error : "(no message)");
    if (!was) {
        cond(c, RM_COND_CHECKPOINT_FAILING, true, "CheckpointWriteFailed", msg);
        event(c, true, "CheckpointFailing", "TrainingJob %s: %s", c->jobname, msg);
        return false;
    }
    double pd = c->job->spec.restart.progress_deadline_seconds;
    double since = st->conditions[RM_COND_CHECKPOINT_FAILING].last_transition;
    if (pd <= 0)
        return false;
    if (c->now - since <= pd) {
        requeue_in(c, since + pd - c->now);
        return false;
    }
    char fmsg[256];
    rm_sfmt(fmsg, sizeof fmsg,
            "TrainingJob %s: checkpoints failed for %.0fs (progressDeadlineSeconds "
            "%.0f): %s",
            c->jobname, c->now - since, pd, msg);
    finish_failed(c, "CheckpointFailing", fmsg);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * The core. */
/* Every rule sees the same names; a rule returns true when the call is decided (the terminal
 * path ran, or it has to wait) and the later rules must not run. */
#define RULE_VARS(c)                        \
    const rm_reconcile_in *in = (c)->in;    \
    const rm_tj_spec *sp = &(c)->job->spec; \
    const rm_rdzv_state *r = in->rdzv;      \
    rm_tj_status *st = (c)->st;             \
    char msg[256];                          \
    (void)in, (void)sp, (void)r, (void)st, (void)msg

/* R9: observedGeneration follows; a terminal job only gets cleanup. */
static bool rule_terminal(rc_ctx *c)
{
    RULE_VARS(c);
    st->observed_generation = c->gen;
    /* every condition is re-evaluated against this generation on every call */
    for (int t = 0; t < RM_COND__COUNT; t++)
        if (st->conditions[t].present)
            st->conditions[t].observed_generation = c->gen;

    /* Terminal jobs only get cleanup (R9). */
    if (st->phase == RM_PHASE_SUCCEEDED || st->phase == RM_PHASE_FAILED) {
        terminal(c);
        force_stuck(c);
        return true;
    }
    return false;
}

/* R0/R0b: an invalid spec fails a job that never started; an invalid update of a started
 * job keeps it at its last valid spec. */
static bool rule_validate(rc_ctx *c)
{
    RULE_VARS(c);
    /* R0 */
    rm_err e = {0};
    if (rm_tj_validate(c->job, &e) != RM_OK) {
        if (st->start_time > 0 && st->conditions[RM_COND_CREATED].present) {
            /* R0b: an update broke a job that already runs and the runtime knows no earlier
             * valid spec: keep everything as it is (nothing created, deleted or failed) */
            invalid_update(c, e.msg[0] ? e.msg : "invalid spec");
            copy_progress(c, st->replicas);
            force_stuck(c);
            return true;
        }
        if (!st->conditions[RM_COND_CREATED].present) {
            rm_sfmt(msg, sizeof msg, "TrainingJob %s is created.", c->jobname);
            cond(c, RM_COND_CREATED, true, "TrainingJobCreated", msg);
        }
        finish_failed(c, "InvalidSpec", e.msg[0] ? e.msg : "invalid spec");
        terminal(c);
        force_stuck(c);
        return true;
    }

    /* R0b: the runtime replaced an invalid update by the last valid spec */
    if (in->invalid_update)
        invalid_update(c, in->invalid_update);
    else if (cond_true(st, RM_COND_INVALID_SPEC))
        cond(c, RM_COND_INVALID_SPEC, false, "Valid", "the spec is valid; it is applied");
    return false;
}

/* R1: the Created condition; the adopted rendezvous epoch; D and minReplicas; the per-index
 * view of observations and rendezvous membership. */
static bool rule_created(rc_ctx *c)
{
    RULE_VARS(c);
    /* R1 */
    if (!st->conditions[RM_COND_CREATED].present) {
        rm_sfmt(msg, sizeof msg, "TrainingJob %s is created.", c->jobname);
        cond(c, RM_COND_CREATED, true, "TrainingJobCreated", msg);
        st->phase = RM_PHASE_PENDING;
        event(c, false, "TrainingJobCreated", "%s", msg);
    }

    /* Adopt an epoch the workers moved themselves (R7). */
    if (r && r->epoch > st->epoch)
        st->epoch = r->epoch;

    c->D = sp->replicas;
    if (c->D < sp->min_replicas)
        c->D = sp->min_replicas;
    if (sp->max_replicas > 0 && c->D > sp->max_replicas)
        c->D = sp->max_replicas;
    if (c->D > MAXW)
        c->D = MAXW;
    c->span = c->D;
    c->minr = sp->min_replicas > 0 ? sp->min_replicas : c->D;
    if (c->minr > c->D)
        c->minr = c->D;

    /* Per-index view. */
    for (size_t k = 0; k < in->nworkers; k++) {
        const rm_observed_worker *w = &in->workers[k];
        if (w->index < 0 || w->index >= MAXW)
            continue;
        if (w->index >= c->span)
            c->span = w->index + 1;
        if (!c->obs[w->index] ||
            (c->obs[w->index]->phase == RM_WORKER_MISSING && w->phase != RM_WORKER_MISSING))
            c->obs[w->index] = w;
    }
    if (r) {
        for (int i = 0; i < r->nmembers && i < (int)RM_ARRAY_LEN(r->members); i++) {
            const rm_rdzv_member *m = &r->members[i];
            char *end = NULL;
            long idx = strtol(m->worker_id, &end, 10);
            if (end == m->worker_id || *end || idx < 0 || idx >= MAXW)
                continue;
            if (idx >= c->span)
                c->span = (int)idx + 1;
            if (!c->mem[idx] || m->epoch >= c->mem[idx]->epoch)
                c->mem[idx] = m;
        }
    }
    return false;
}

/* R8: suspend deletes every worker; resume starts a fresh round. */
static bool rule_suspend(rc_ctx *c)
{
    RULE_VARS(c);
    /* R8 suspend / resume */
    if (sp->run.suspend) {
        for (size_t k = 0; k < in->nworkers; k++) {
            const rm_observed_worker *w = &in->workers[k];
            if (exists(w) && !is_terminating(w))
                del(c, w->index, !w->node_ready, "suspend");
        }
        if (!cond_true(st, RM_COND_SUSPENDED)) {
            rm_sfmt(msg, sizeof msg, "TrainingJob %s is suspended.", c->jobname);
            cond(c, RM_COND_SUSPENDED, true, "Suspended", msg);
            cond_off(c, RM_COND_RUNNING, "Suspended", msg);
            cond_off(c, RM_COND_RESTARTING, "Suspended", msg);
            event(c, false, "Suspended", "%s", msg);
        }
        st->phase = RM_PHASE_SUSPENDED;
        st->replicas = 0;
        st->ready_replicas = 0;
        force_stuck(c);
        return true;
    }
    if (cond_true(st, RM_COND_SUSPENDED)) {
        rm_sfmt(msg, sizeof msg, "TrainingJob %s is c->resumed.", c->jobname);
        cond(c, RM_COND_SUSPENDED, false, "Resumed", msg);
        event(c, false, "Resumed", "%s", msg);
        st->start_time = c->now;
        st->phase = RM_PHASE_PENDING;
        restart_group(c); /* a fresh round for the recreated workers; not a restart */
        c->resumed = true;
    }
    return false;
}

/* R8: activeDeadlineSeconds. */
/* R12 (docs/trainingjob-api.md, "Why is my job stuck"): a worker pod that cannot start — not
 * schedulable (the scheduler's message: too little CPU or GPU, a missing PVC, a taint), its image
 * not pulled, its configuration (a Secret, a ConfigMap) missing — sets the condition Blocked with
 * the cause as its reason and the pod's own words as its message, and a Warning event once; it is
 * cleared when no pod is blocked any more. Never ends the job: the cause may be fixed. */
static bool rule_blocked(rc_ctx *c)
{
    const rm_observed_worker *first = NULL;
    int n = 0;
    for (size_t k = 0; k < c->in->nworkers; k++) {
        const rm_observed_worker *w = &c->in->workers[k];
        if (!exists(w) || is_terminating(w) || w->phase != RM_WORKER_PENDING || !w->waiting[0])
            continue;
        n++;
        if (!first || w->index < first->index)
            first = w;
    }
    bool was = cond_true(c->st, RM_COND_BLOCKED);
    const char *q = c->in->queued;
    if (!first && !(q && *q)) {
        if (was)
            cond(c, RM_COND_BLOCKED, false, "PodsStarting", "no worker pod is blocked");
        return false;
    }
    char msg[320], qreason[32] = "";
    const char *reason = "ContainerConfigError";
    bool warning = true;
    if (!first) { /* the queue holds the job: its reason is the message's first word */
        size_t k = strcspn(q, ":");
        rm_sfmt(qreason, sizeof qreason, "%.*s", (int)k, q);
        reason = qreason;
        rm_sfmt(msg, sizeof msg, "%s", q[k] ? q + k + (q[k + 1] == ' ' ? 2 : 1) : q);
        warning = false;
    } else {
        const char *why = first->waiting;
        if (!strncmp(why, "Unschedulable", 13))
            reason = "Unschedulable";
        else if (strstr(why, "Image") || strstr(why, "image"))
            reason = "ImagePullFailed";
        if (n > 1)
            rm_sfmt(msg, sizeof msg, "worker %d cannot start (and %d more): %s", first->index, n - 1, why);
        else
            rm_sfmt(msg, sizeof msg, "worker %d cannot start: %s", first->index, why);
    }
    const rm_condition *cur = &c->st->conditions[RM_COND_BLOCKED];
    bool new_cause = !was || strcmp(cur->reason, reason) != 0;
    if (new_cause || strcmp(cur->message, msg) != 0)
        cond(c, RM_COND_BLOCKED, true, reason, msg);
    if (new_cause)
        event(c, warning, reason, "TrainingJob %s: %s", c->jobname, msg);
    return false;
}

static bool rule_deadline(rc_ctx *c)
{
    RULE_VARS(c);
    /* R8 activeDeadlineSeconds */
    if (sp->run.active_deadline_seconds > 0 && st->start_time > 0) {
        double at = st->start_time + (double)sp->run.active_deadline_seconds;
        if (c->now >= at) {
            rm_sfmt(msg, sizeof msg, "TrainingJob %s was active longer than specified deadline", c->jobname);
            finish_failed(c, "DeadlineExceeded", msg);
            terminal(c);
            force_stuck(c);
            return true;
        }
        requeue_in(c, at - c->now);
    }
    return false;
}

/* R6: success. */
static bool rule_success(rc_ctx *c)
{
    RULE_VARS(c);
    /* R6 success */
    bool done = false;
    if (r && r->have_result)
        done = true;
    if (r && !done) {
        for (int i = 0; i < r->nmembers && i < (int)RM_ARRAY_LEN(r->members); i++)
            if (r->members[i].rank == 0 && r->members[i].done && r->members[i].epoch == r->epoch)
                done = true;
    }
    if (!done && c->obs[0] && c->obs[0]->phase == RM_WORKER_SUCCEEDED)
        done = true;
    if (!done) {
        int n = 0, ok = 0;
        for (size_t k = 0; k < in->nworkers; k++) {
            if (!exists(&in->workers[k]))
                continue;
            n++;
            if (in->workers[k].phase == RM_WORKER_SUCCEEDED)
                ok++;
        }
        if (n > 0 && ok == n)
            done = true;
    }
    if (done && !c->resumed) {
        copy_progress(c, c->D);
        finish_succeeded(c);
        terminal(c);
        force_stuck(c);
        return true;
    }
    return false;
}

/* R10/R11: recovery loops and failing checkpoints. */
static bool rule_loops(rc_ctx *c)
{
    RULE_VARS(c);
    /* R10 recovery loop; R11 checkpoint failures */
    if (recovery_loop(c) || checkpoint_failing(c)) {
        copy_progress(c, c->D);
        terminal(c);
        force_stuck(c);
        return true;
    }
    return false;
}

/* R5e: a worker that ended on bad data (exit code RM_WORKER_EXIT_DATA_ERROR: a fetch refused,
 * a checksum mismatch, a file its reader rejects) fails the job with reason DataError and the
 * worker's message at once: another start would read the same data (docs/models-and-data.md,
 * "Data formats"), so it burns no restart. */
static bool rule_data_error(rc_ctx *c)
{
    RULE_VARS(c);
    for (size_t k = 0; k < in->nworkers; k++) {
        const rm_observed_worker *w = &in->workers[k];
        if (!exists(w) || w->phase != RM_WORKER_FAILED || is_terminating(w) ||
            w->exit_code != RM_WORKER_EXIT_DATA_ERROR || w->finished_at <= st->last_restart_time)
            continue;
        if (w->message[0])
            rm_sfmt(msg, sizeof msg, "%s", w->message);
        else
            rm_sfmt(msg, sizeof msg, "worker %d: the data could not be read (exit code %d)", w->index,
                    w->exit_code);
        copy_progress(c, c->D);
        finish_failed(c, "DataError", msg);
        terminal(c);
        force_stuck(c);
        return true;
    }
    return false;
}

/* R5: failure detection (sets culprits, new_failure, deadline_failure, need_bump, why). */
static bool rule_detect(rc_ctx *c)
{
    RULE_VARS(c);
    /* R5 failure detection */
    double pd = sp->restart.progress_deadline_seconds;
    bool use_pd = pd > 0 && !c->o.no_rendezvous;
    for (int i = 0; i < c->span; i++) {
        const rm_observed_worker *w = c->obs[i];
        const rm_rdzv_member *m = c->mem[i];
        /* a) failed */
        if (exists(w) && w->phase == RM_WORKER_FAILED && !is_terminating(w)) {
            c->culprit[i] = true;
            c->nculprits++;
            if (w->finished_at > st->last_restart_time) {
                c->new_failure = true;
                if (current_member(r, m))
                    c->need_bump = true;
                if (!c->why[0])
                    rm_sfmt(c->why, sizeof c->why, "worker %d failed (exit code %d%s%s)", i, w->exit_code,
                            w->reason[0] ? ", " : "", w->reason);
            }
            continue;
        }
        /* b) vanished member of the current closed round */
        if (!exists(w) && r && r->closed && r->epoch == st->epoch && current_member(r, m) && !m->done &&
            !c->o.no_rendezvous) {
            c->culprit[i] = true;
            c->nculprits++;
            c->new_failure = true;
            c->need_bump = true;
            if (!c->why[0])
                rm_sfmt(c->why, sizeof c->why, "worker %d disappeared", i);
        }
    }
    /* c) progress deadline inside a closed round */
    if (use_pd && r && r->closed && r->epoch == st->epoch && !c->new_failure) {
        int stale = 0, stale_unready = 0;
        bool *st_flag = c->st_flag;
        memset(st_flag, 0, (size_t)c->span * sizeof *st_flag);
        for (int i = 0; i < c->span; i++) {
            const rm_rdzv_member *m = c->mem[i];
            const rm_observed_worker *w = c->obs[i];
            if (!current_member(r, m) || m->done || !exists(w) || is_terminating(w))
                continue;
            double t = m->last_progress > r->closed_at ? m->last_progress : r->closed_at;
            double age = c->now - t;
            if (age > pd) {
                st_flag[i] = true;
                stale++;
                if (!w->ready)
                    stale_unready++;
            } else {
                requeue_in(c, pd - age);
            }
        }
        if (stale > 0) {
            for (int i = 0; i < c->span; i++) {
                if (!st_flag[i] || (stale_unready > 0 && c->obs[i]->ready))
                    continue;
                c->culprit[i] = true;
                c->nculprits++;
                if (!c->why[0]) {
                    const rm_rdzv_member *m = c->mem[i];
                    double t = m->last_progress > r->closed_at ? m->last_progress : r->closed_at;
                    rm_sfmt(c->why, sizeof c->why,
                            "worker %d made no progress for %.0fs (progressDeadlineSeconds %.0f)", i,
                            c->now - t, pd);
                }
            }
            c->new_failure = c->deadline_failure = c->need_bump = true;
        }
    }
    /* d) alive but not re-joining an open round others already joined */
    if (use_pd && r && !r->closed && r->epoch == st->epoch && !c->new_failure) {
        bool someone = false;
        for (int i = 0; i < c->span; i++)
            if (c->mem[i] && c->mem[i]->epoch == r->epoch)
                someone = true;
        for (int i = 0; someone && i < c->D; i++) {
            const rm_observed_worker *w = c->obs[i];
            const rm_rdzv_member *m = c->mem[i];
            if (!exists(w) || is_terminating(w) || w->phase != RM_WORKER_RUNNING)
                continue;
            if (m && m->epoch == r->epoch)
                continue;
            double t = w->created_at;
            if (m && m->last_report > t)
                t = m->last_report;
            if (m && m->last_progress > t)
                t = m->last_progress;
            if (st->last_restart_time > t)
                t = st->last_restart_time;
            double age = c->now - t;
            if (age > pd) {
                c->culprit[i] = true;
                c->nculprits++;
                c->new_failure = c->deadline_failure = true;
                if (!c->why[0])
                    rm_sfmt(c->why, sizeof c->why,
                            "worker %d has not joined rendezvous round %d for %.0fs "
                            "(progressDeadlineSeconds %.0f)",
                            i, r->epoch, age, pd);
            } else {
                requeue_in(c, pd - age);
            }
        }
    }
    return false;
}

/* R7t: a torchrun job lost workers but at least minReplicas others run: torchrun's agents re-form
 * without them, the operator only replaces the lost pods. Returns false when R7 applies instead
 * (too few survivors, a progress deadline, the restart budget spent). */
static bool torchrun_lost(rc_ctx *c, bool *stop)
{
    RULE_VARS(c);
    *stop = false;
    if (!c->o.torchrun || !c->o.no_rendezvous || c->deadline_failure ||
        st->restarts >= sp->restart.max_restarts)
        return false;
    int survivors = 0, first = -1;
    for (int i = 0; i < c->span; i++) {
        const rm_observed_worker *w = c->obs[i];
        if (c->culprit[i] && first < 0)
            first = i;
        else if (!c->culprit[i] && i < c->D && exists(w) && !is_terminating(w) &&
                 w->phase == RM_WORKER_RUNNING)
            survivors++;
    }
    if (survivors < c->minr || first < 0)
        return false;
    int k = st->restarts + 1, maxr = sp->restart.max_restarts;
    double at = st->last_restart_time + backoff_delay(c, k);
    if (st->last_restart_time > 0 && c->now < at) { /* keep the failed pod observed until then */
        rm_sfmt(msg, sizeof msg,
                "TrainingJob %s keeps running with %d workers: %s; replacing pod %s-worker-%d in %.1fs "
                "(back-off, replacement %d of %d)",
                c->jobname, survivors, c->why, c->job->name, first, at - c->now, k, maxr);
        if (st->phase == RM_PHASE_RUNNING)
            cond(c, RM_COND_RUNNING, true, "WorkerLost", msg);
        requeue_in(c, at - c->now);
        copy_progress(c, c->D);
        force_stuck(c);
        *stop = true;
        return true;
    }
    st->restarts = k;
    st->last_restart_time = c->now;
    rm_sfmt(msg, sizeof msg,
            "TrainingJob %s: %s; torchrun re-forms with the %d surviving workers of %d (minReplicas %d), "
            "the job keeps running; replacing pod %s-worker-%d (restart %d of %d)",
            c->jobname, c->why, survivors, c->D, c->minr, c->job->name, first, k, maxr);
    if (st->phase == RM_PHASE_RUNNING)
        cond(c, RM_COND_RUNNING, true, "WorkerLost", msg);
    event(c, true, "WorkerLost", "%s", msg);
    for (int i = 0; i < c->span; i++)
        if (c->culprit[i] && exists(c->obs[i]))
            del(c, i, !c->obs[i]->node_ready, "failed");
    return true; /* Missing culprits are created by R3 */
}

/* R7: group restart on a new failure (or the back-off wait). */
static bool rule_restart(rc_ctx *c)
{
    RULE_VARS(c);
    bool stop = false;
    if (c->new_failure && torchrun_lost(c, &stop))
        return stop;
    /* R7 restart */
    if (c->new_failure) {
        int maxr = sp->restart.max_restarts;
        if (st->restarts >= maxr) {
            rm_sfmt(msg, sizeof msg,
                    "TrainingJob %s has failed because it has reached the specified restart limit "
                    "(%d): %s",
                    c->jobname, maxr, c->why);
            copy_progress(c, c->D);
            finish_failed(c, "BackoffLimitExceeded", msg);
            terminal(c);
            force_stuck(c);
            return true;
        }
        int k = st->restarts + 1;
        double at = st->last_restart_time + backoff_delay(c, k);
        if (st->last_restart_time > 0 && c->now < at) {
            rm_sfmt(msg, sizeof msg, "%s; restart %d of %d in %.1fs (back-off)", c->why, k, maxr,
                    at - c->now);
            cond(c, RM_COND_RESTARTING, true, "BackOff", msg);
            cond_off(c, RM_COND_RUNNING, "BackOff", msg);
            st->phase = RM_PHASE_RESTARTING;
            requeue_in(c, at - c->now);
            copy_progress(c, c->D);
            force_stuck(c);
            return true;
        }
        const char *reason = c->deadline_failure ? "ProgressDeadlineExceeded" : "WorkerFailed";
        st->restarts = k;
        st->last_restart_time = c->now;
        if (c->need_bump)
            restart_group(c);
        rm_sfmt(msg, sizeof msg,
                "TrainingJob %s: %s; restarting the group at epoch %d "
                "(restart %d of %d)",
                c->jobname, c->why, st->epoch, k, maxr);
        cond(c, RM_COND_RESTARTING, true, reason, msg);
        cond_off(c, RM_COND_RUNNING, reason, msg);
        st->phase = RM_PHASE_RESTARTING;
        event(c, true, reason, "%s", msg);
        for (int i = 0; i < c->span; i++) {
            if (!c->culprit[i])
                continue;
            const rm_observed_worker *w = c->obs[i];
            if (exists(w))
                del(c, i, !w->node_ready, c->deadline_failure ? "progress-deadline" : "failed");
        }
        /* Missing culprits are created by the creation pass below. */
    } else {
        /* Failed workers from a disruption already handled: just replace. */
        for (int i = 0; i < c->span; i++)
            if (c->culprit[i] && exists(c->obs[i]))
                del(c, i, !c->obs[i]->node_ready, "failed");
    }
    return false;
}

/* R7 elastic target and resize; R3 scale-down. */
static bool rule_resize(rc_ctx *c)
{
    RULE_VARS(c);
    /* R7 elastic c->target and resize; R3 scale-down. */
    int cant = 0;
    for (int i = 0; i < c->D; i++) {
        const rm_observed_worker *w = c->obs[i];
        if (!w)
            continue;
        if (w->phase == RM_WORKER_PENDING && !is_terminating(w)) {
            double at = w->created_at + c->o.pending_timeout_s;
            if (c->now >= at)
                c->cant_start[i] = true;
            else if (c->minr < c->D)
                requeue_in(c, at - c->now);
        } else if (w->phase == RM_WORKER_MISSING && w->create_failures >= c->o.create_failure_threshold) {
            c->cant_start[i] = true;
        }
        if (c->cant_start[i])
            cant++;
    }
    c->target = c->D;
    if (c->minr < c->D && cant > 0 && c->D - cant >= c->minr)
        c->target = c->D - cant;
    if (in->rdzv_desired != c->target || in->rdzv_min != c->minr) {
        rm_action *a = push(c, RM_ACT_SET_RDZV);
        if (a) {
            a->desired = c->target;
            a->min = c->minr;
        }
        if (in->rdzv_desired > 0 && c->target < in->rdzv_desired && cant > 0)
            event(c, true, "ScaledDown",
                  "TrainingJob %s: %d of %d workers cannot start; continuing with %d "
                  "(minReplicas %d)",
                  c->jobname, cant, c->D, c->target, c->minr);
        else if (in->rdzv_desired > 0 && c->target < in->rdzv_desired)
            event(c, false, "ScaledDown", "TrainingJob %s: shrinking the group from %d to %d workers",
                  c->jobname, in->rdzv_desired, c->target);
        else if (in->rdzv_desired > 0 && c->target > in->rdzv_desired)
            event(c, false, "ScaledUp", "TrainingJob %s: growing the group from %d to %d workers", c->jobname,
                  in->rdzv_desired, c->target);
    }
    /* scale-down: indices >= c->D leave */
    bool leaver_in_round = false;
    for (size_t k = 0; k < in->nworkers; k++) {
        const rm_observed_worker *w = &in->workers[k];
        if (w->index >= c->D && exists(w) && !is_terminating(w)) {
            del(c, w->index, !w->node_ready, "scale-down");
            if (w->index < MAXW && current_member(r, c->mem[w->index]))
                leaver_in_round = true;
        }
    }
    /* resize: a running worker wants into a closed round, or a member must leave it */
    if (!c->new_failure && !c->resumed && r && r->closed && r->epoch == st->epoch && !c->o.no_rendezvous) {
        bool wants_in = false;
        for (int i = 0; i < c->D; i++) {
            const rm_observed_worker *w = c->obs[i];
            if (exists(w) && w->phase == RM_WORKER_RUNNING && !is_terminating(w) && !c->culprit[i] &&
                !current_member(r, c->mem[i]) && !c->cant_start[i])
                wants_in = true;
        }
        if (wants_in || leaver_in_round) {
            restart_group(c);
            event(c, false, "Resized", "TrainingJob %s: re-forming the group with %d workers at epoch %d",
                  c->jobname, c->target, st->epoch);
        }
    }
    return false;
}

/* R3: creation. */
static bool rule_create(rc_ctx *c)
{
    RULE_VARS(c);
    /* R3 creation */
    for (int i = 0; i < c->D; i++)
        if (!exists(c->obs[i]))
            create(c, i);
    return false;
}

/* R4: phase and progress. */
static bool rule_phase(rc_ctx *c)
{
    RULE_VARS(c);
    /* R4 phase */
    copy_progress(c, c->D);
    bool round_ok;
    if (c->o.no_rendezvous) {
        int running = 0;
        for (int i = 0; i < c->D; i++)
            if (exists(c->obs[i]) && c->obs[i]->phase == RM_WORKER_RUNNING && !is_terminating(c->obs[i]))
                running++;
        round_ok = running >= c->target;
    } else {
        round_ok = r && r->closed && r->epoch == st->epoch && r->world_size >= c->minr;
    }
    if (!c->new_failure && round_ok) {
        rm_sfmt(msg, sizeof msg, "TrainingJob %s is running.", c->jobname);
        bool was = cond_true(st, RM_COND_RUNNING);
        if (was && strcmp(st->conditions[RM_COND_RUNNING].reason, "WorkerLost") == 0) /* R7t */
            event(c, false, "WorkerReplaced",
                  "TrainingJob %s: every worker runs again (%d); torchrun admits the replacements at its "
                  "next re-rendezvous",
                  c->jobname, c->target);
        cond(c, RM_COND_RUNNING, true, "TrainingJobRunning", msg);
        cond_off(c, RM_COND_RESTARTING, "TrainingJobRunning", msg);
        st->phase = RM_PHASE_RUNNING;
        if (!was)
            event(c, false, "TrainingJobRunning", "%s", msg);
    } else if (!c->new_failure && st->phase != RM_PHASE_RESTARTING && st->phase != RM_PHASE_RUNNING) {
        /* Running stays Running while a resize or a worker-initiated epoch re-forms the round:
         * only a detected failure (Restarting) or the terminal rules change it. */
        st->phase = RM_PHASE_PENDING;
    }
    force_stuck(c);
    return false;
}

/* status.data {uri, bytes, totalBytes} (docs/models-and-data.md, "Where data comes from"): the
 * fetch's progress as the fetching worker (or init container) put it in the rendezvous
 * (RM_RDZV_KV_DATA_FETCH, read by the snapshot). Kept once seen: a later epoch has no fetch to
 * report, and the last figures say what was fetched. */
static void copy_data(rc_ctx *c)
{
    const rm_rdzv_state *r = c->in->rdzv;
    const char *uri = c->job->spec.training.data.uri;
    if (!r || (!r->data_bytes && !r->data_total) || !uri || !rm_uri_fetched(uri))
        return;
    rm_tj_status *st = c->st;
    rm_sfmt(st->data.uri, sizeof st->data.uri, "%s", uri);
    st->data.bytes = (int64_t)r->data_bytes;
    st->data.total_bytes = (int64_t)r->data_total;
}

/* The rules in their fixed order (reconcile.h). */
static void run(rc_ctx *c)
{
    static bool (*const rules[])(rc_ctx *) = {
        rule_terminal, rule_validate,   rule_created, rule_blocked, rule_suspend, rule_deadline, rule_success,
        rule_loops,    rule_data_error, rule_detect,  rule_restart, rule_resize,  rule_create,   rule_phase,
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(rules); i++)
        if (rules[i](c))
            return;
}

bool rm_reconcile_status_equal(const rm_tj_status *a, const rm_tj_status *b)
{
    if (a->phase != b->phase || a->observed_generation != b->observed_generation ||
        a->replicas != b->replicas || a->ready_replicas != b->ready_replicas || a->epoch != b->epoch ||
        a->restarts != b->restarts || a->start_time != b->start_time ||
        a->completion_time != b->completion_time || a->last_restart_time != b->last_restart_time ||
        a->high_step != b->high_step || a->high_epoch != b->high_epoch || strcmp(a->message, b->message) != 0)
        return false;
    const rm_tj_progress *p = &a->progress, *q = &b->progress;
    if (p->step != q->step || p->train_epoch != q->train_epoch || p->loss != q->loss ||
        p->samples_per_second != q->samples_per_second ||
        p->last_checkpoint_step != q->last_checkpoint_step || p->allreduce_gbps != q->allreduce_gbps ||
        p->tokens_per_second != q->tokens_per_second || p->percent != q->percent ||
        p->eta_seconds != q->eta_seconds || p->nevals != q->nevals)
        return false;
    for (int i = 0; i < p->nevals && i < RM_TJ_MAX_EVALS; i++)
        if (p->evals[i].epoch != q->evals[i].epoch || p->evals[i].step != q->evals[i].step ||
            p->evals[i].test_accuracy != q->evals[i].test_accuracy ||
            p->evals[i].train_loss != q->evals[i].train_loss || p->evals[i].val_loss != q->evals[i].val_loss)
            return false;
    const rm_tj_result *r = &a->result, *s = &b->result;
    if (r->present != s->present || r->test_accuracy != s->test_accuracy || r->train_loss != s->train_loss ||
        r->seconds != s->seconds || r->samples_per_second != s->samples_per_second || r->steps != s->steps ||
        r->memory_params != s->memory_params || r->memory_grads != s->memory_grads ||
        r->memory_optimizer != s->memory_optimizer || r->memory_activations != s->memory_activations ||
        r->peak_rss_bytes != s->peak_rss_bytes || r->val_loss != s->val_loss ||
        r->tokens_per_second != s->tokens_per_second || r->model_bytes != s->model_bytes ||
        strcmp(r->model_uri, s->model_uri) != 0 || strcmp(r->model_sha256, s->model_sha256) != 0)
        return false;
    if (strcmp(a->data.uri, b->data.uri) != 0 || a->data.bytes != b->data.bytes ||
        a->data.total_bytes != b->data.total_bytes)
        return false;
    for (int t = 0; t < RM_COND__COUNT; t++) {
        const rm_condition *c = &a->conditions[t], *d = &b->conditions[t];
        if (c->present != d->present)
            return false;
        if (!c->present)
            continue;
        if (c->status != d->status || c->last_transition != d->last_transition ||
            c->observed_generation != d->observed_generation || strcmp(c->reason, d->reason) != 0 ||
            strcmp(c->message, d->message) != 0)
            return false;
    }
    return true;
}

int rm_reconcile(const rm_reconcile_in *in, rm_reconcile_out *out)
{
    if (!in || !in->job || !out || (!out->actions && out->cap > 0))
        return RM_EINVAL;
    /* its one allocation: ~360 KiB of per-index views at RM_RDZV_MAX_WORLD, too much for a stack;
     * only the pages of the indexes in use (span) are ever touched */
    rc_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return RM_ENOMEM;
    c->in = in;
    c->job = in->job;
    c->out = out;
    c->st = &out->status;
    if (in->opts)
        c->o = *in->opts;
    else
        rm_reconcile_opts_default(&c->o);
    c->now = in->now;
    c->gen = in->job->generation;
    c->requeue = -1;
    rm_sfmt(c->jobname, sizeof c->jobname, "%s/%s", in->job->namespace_ ? in->job->namespace_ : "default",
            in->job->name ? in->job->name : "");
    out->status = in->job->status;
    out->nactions = 0;
    out->status_changed = false;

    copy_data(c);
    run(c);
    if (c->requeue >= 0) {
        rm_action *a = push(c, RM_ACT_REQUEUE_AFTER);
        if (a)
            a->seconds = c->requeue;
    }
    out->status_changed = !rm_reconcile_status_equal(&out->status, &in->job->status);
    int rc = c->rc;
    free(c);
    return rc;
}
